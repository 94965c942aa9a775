//! Hostile directory content (issue 12): whatever sits at an entry's or the stamp's name — a
//! FIFO, a link to `/dev/zero`, a 100 MB file, a huge garbage token — a lookup or store returns
//! promptly with a miss or a refusal, reads a bounded number of bytes, and says why in a short
//! message. And a directory this process cannot write still serves lookups.
//!
//! No test asserts a time: a hang is caught by running the operation on a thread and failing
//! when no answer arrives within a generous bound.
//!
//! The read-only cases run the lookups in a child process (this test binary again) that cannot
//! write the directory: as root (where permission bits do not bind) the child runs as user
//! `nobody` (uid 65534); as another user the directory is simply made read-only.

mod disk_support;

use schedule_cache::Store as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use cache_dir::LOCK_FILE;
use cache_dir::STAMP_FILE;
use disk_support::{DIGEST, key, payload};
use schedule_cache::admin::{MAX_ENTRY_BYTES, MAX_MESSAGE_CHARS, Space};
use schedule_cache::placement::PlacementEntry;
use schedule_cache::{DiskCache, Lookup, MissReason, Refusal, StoreOutcome};
use test_support::no_hang;

fn mkfifo(path: &Path) {
    let status = Command::new("mkfifo")
        .arg(path)
        .status()
        .expect("run mkfifo");
    assert!(status.success(), "mkfifo {}", path.display());
}

/// A cache directory holding one stored entry at `key("k")`; returns the directory and the
/// entry's path.
fn stocked() -> (tempfile::TempDir, PathBuf, PathBuf) {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("cache");
    let k = key("k");
    assert_eq!(
        schedule_cache::DiskCache::new(&dir)
            .store(Some(&k), &payload(1, 2, 3, 4))
            .expect("store"),
        StoreOutcome::Stored
    );
    let entry = dir.join(Space::Placement.file_name(&k));
    (tmp, dir, entry)
}

fn probe(dir: &Path) -> Lookup<PlacementEntry> {
    let dir = dir.to_path_buf();
    no_hang("probe", move || {
        DiskCache::new(&dir).probe::<PlacementEntry>(Some(&key("k")), DIGEST)
    })
}

fn store(dir: &Path) -> StoreOutcome {
    let dir = dir.to_path_buf();
    no_hang("store", move || {
        DiskCache::new(&dir)
            .store(Some(&key("k")), &payload(5, 6, 7, 1))
            .expect("no caller mistake")
    })
}

fn assert_unreadable(found: &Lookup<PlacementEntry>, says: &str) {
    match found {
        Lookup::Miss(MissReason::Unreadable { message, .. }) => {
            assert!(message.contains(says), "{message:?} should say {says:?}");
        }
        other => panic!("expected an unreadable-entry miss, got {other:?}"),
    }
}

fn assert_stamp_refused(found: &Lookup<PlacementEntry>) {
    match found {
        Lookup::Refused(Refusal::Io { during, .. }) => assert_eq!(*during, "read the regime stamp"),
        other => panic!("expected a refusal reading the stamp, got {other:?}"),
    }
}

#[test]
fn a_fifo_at_the_entry_path_is_a_prompt_miss_and_frees_the_lock() {
    let (_tmp, dir, entry) = stocked();
    fs::remove_file(&entry).expect("rm");
    mkfifo(&entry);
    assert_unreadable(&probe(&dir), "FIFO");
    // The lock was released: a store (exclusive work elsewhere would block otherwise) and a
    // second probe both answer.
    assert_unreadable(&probe(&dir), "FIFO");
    let swept = {
        let dir = dir.clone();
        no_hang("sweep", move || DiskCache::new(&dir).sweep_stale_staging())
    };
    assert_eq!(swept, Ok(0));
}

#[test]
fn a_fifo_at_the_stamp_path_is_a_prompt_refusal_for_lookup_and_store() {
    let (_tmp, dir, _entry) = stocked();
    fs::remove_file(dir.join(STAMP_FILE)).expect("rm");
    mkfifo(&dir.join(STAMP_FILE));
    assert_stamp_refused(&probe(&dir));
    assert!(matches!(
        store(&dir),
        StoreOutcome::Refused(Refusal::Io {
            during: "read the regime stamp",
            ..
        })
    ));
}

#[test]
fn a_fifo_lock_file_is_a_prompt_refusal() {
    let (_tmp, dir, _entry) = stocked();
    fs::remove_file(dir.join(LOCK_FILE)).expect("rm");
    mkfifo(&dir.join(LOCK_FILE));
    match probe(&dir) {
        Lookup::Refused(Refusal::Io {
            during, message, ..
        }) => {
            assert_eq!(during, "open and lock the lock file");
            assert!(message.contains("FIFO"), "{message}");
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[test]
fn links_to_dev_zero_are_never_read() {
    let (_tmp, dir, entry) = stocked();
    fs::remove_file(&entry).expect("rm");
    std::os::unix::fs::symlink("/dev/zero", &entry).expect("symlink");
    assert_unreadable(&probe(&dir), "symbolic link");
    fs::remove_file(&entry).expect("rm");
    fs::remove_file(dir.join(STAMP_FILE)).expect("rm");
    std::os::unix::fs::symlink("/dev/zero", dir.join(STAMP_FILE)).expect("symlink");
    assert_stamp_refused(&probe(&dir));
    // A link to a regular file is refused too: entries are published by rename, never linked.
    fs::remove_file(dir.join(STAMP_FILE)).expect("rm");
    fs::write(dir.join("real-stamp"), "1\n").expect("write");
    std::os::unix::fs::symlink(dir.join("real-stamp"), dir.join(STAMP_FILE)).expect("symlink");
    assert_stamp_refused(&probe(&dir));
}

/// The peak resident set of this process, in KiB.
fn peak_rss_kib() -> u64 {
    let status = fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM")
}

#[test]
fn a_100_mb_entry_is_refused_by_its_size_without_being_read() {
    let (_tmp, dir, entry) = stocked();
    let f = fs::File::create(&entry).expect("create");
    f.set_len(100 << 20).expect("set_len");
    drop(f);
    let before = peak_rss_kib();
    let found = probe(&dir);
    let grown_mib = peak_rss_kib().saturating_sub(before) / 1024;
    match &found {
        Lookup::Miss(MissReason::Unreadable { kind, message }) => {
            assert_eq!(*kind, std::io::ErrorKind::FileTooLarge);
            assert!(message.len() <= MAX_MESSAGE_CHARS + 4, "{message}");
        }
        other => panic!("expected a too-large miss, got {other:?}"),
    }
    // Reading it would have grown the peak by at least 100 MiB.
    assert!(grown_mib < 50, "peak resident set grew by {grown_mib} MiB");
    // The verifier and the stats read through the same cap.
    let inv = schedule_cache::admin::inventory(&dir).expect("inventory");
    let problem =
        schedule_cache::admin::verify_entry(&dir, &inv.entries[0]).expect_err("too large");
    assert!(problem.to_string().contains("cap"), "{problem}");
}

#[test]
fn a_huge_garbage_token_gives_a_short_miss_message() {
    let (_tmp, dir, entry) = stocked();
    for garbage in [
        "x".repeat(1 << 20),
        format!("(version: 1, digest: \"{}\")", "y".repeat(1 << 20)),
        format!(
            "(version: 1, digest: \"{}\", flips: [], shipped: A)",
            "z".repeat(1 << 20)
        ),
        format!("\"{}", "q".repeat(1 << 20)),
    ] {
        fs::write(&entry, &garbage).expect("write");
        let found = probe(&dir);
        assert!(matches!(found, Lookup::Miss(_)), "{found:?}");
        let Lookup::Miss(reason) = found else {
            unreachable!()
        };
        let shown = reason.to_string();
        assert!(
            shown.len() <= 2 * MAX_MESSAGE_CHARS + 100,
            "{} characters: {}…",
            shown.len(),
            &shown[..200]
        );
    }
}

#[test]
fn a_store_larger_than_the_cap_is_refused() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let flips = (MAX_ENTRY_BYTES / 16) as u32;
    let big = payload(1, 2, 3, flips);
    let out = DiskCache::new(tmp.path())
        .store(Some(&key("k")), &big)
        .expect("no caller mistake");
    assert!(
        matches!(&out, StoreOutcome::Refused(Refusal::Io { kind, .. }) if *kind == std::io::ErrorKind::FileTooLarge),
        "{out:?}"
    );
}

const RO_CHILD: &str = "KCACHE_DISK_READONLY_CHILD";

/// The child body: looks `key("k")` up in the directory named by the environment, which it
/// cannot write, and exits 0 if it hits and a store is refused.
#[test]
fn readonly_child() {
    let Ok(dir) = std::env::var(RO_CHILD) else {
        return;
    };
    let dir = PathBuf::from(dir);
    assert!(
        fs::File::create(dir.join("probe-write")).is_err(),
        "the child can write the directory: the test shows nothing"
    );
    let found = DiskCache::new(&dir).probe::<PlacementEntry>(Some(&key("k")), DIGEST);
    assert_eq!(
        found,
        Lookup::Hit(payload(1, 2, 3, 4)),
        "lookup in a read-only directory"
    );
    let stored = DiskCache::new(&dir)
        .store(Some(&key("other")), &payload(1, 1, 1, 1))
        .expect("no caller mistake");
    assert!(matches!(stored, StoreOutcome::Refused(_)), "{stored:?}");
}

/// Runs [`readonly_child`] on `dir` as a process that cannot write it.
fn lookup_as_reader(tmp: &Path, dir: &Path) {
    disk_support::run_child_as_reader("readonly_child", RO_CHILD, tmp, dir);
}

#[test]
fn a_read_only_directory_with_a_lock_file_serves_lookups() {
    let (tmp, dir, _entry) = stocked();
    assert!(dir.join(LOCK_FILE).is_file());
    lookup_as_reader(tmp.path(), &dir);
}

#[test]
fn a_read_only_directory_without_a_lock_file_serves_lookups() {
    let (tmp, dir, _entry) = stocked();
    fs::remove_file(dir.join(LOCK_FILE)).expect("rm");
    lookup_as_reader(tmp.path(), &dir);
    assert!(!dir.join(LOCK_FILE).exists(), "the reader created nothing");
}

/// A miss names its siblings from the digest's index, never from a directory listing: lines
/// that are garbage, of another digest or space, or whose entry is gone are ignored, and a
/// FIFO or a huge file at the index's name costs nothing.
#[test]
fn a_missing_lookup_reads_only_a_checked_sibling_index() {
    let (_tmp, dir, _entry) = stocked();
    let index = dir.join(schedule_cache::admin::siblings_file_name(DIGEST).expect("name"));
    let listed = |dir: &Path| match probe_key(dir, "absent") {
        Lookup::Miss(MissReason::NoEntry { same_digest }) => same_digest,
        other => panic!("expected a plain miss, got {other:?}"),
    };
    assert_eq!(listed(&dir), vec![key("k").as_str().to_owned()]);
    let gone = key("gone");
    fs::write(
        &index,
        format!(
            "p {}\ngarbage\np ../../etc/passwd\ns {}\np ffff-other\np {}\n",
            key("k").as_str(),
            key("k").as_str(),
            gone.as_str()
        ),
    )
    .expect("write");
    assert_eq!(listed(&dir), vec![key("k").as_str().to_owned()]);
    fs::remove_file(&index).expect("rm");
    mkfifo(&index);
    assert_eq!(listed(&dir), Vec::<String>::new());
    fs::remove_file(&index).expect("rm");
    fs::File::create(&index)
        .expect("create")
        .set_len(100 << 20)
        .expect("set_len");
    assert_eq!(listed(&dir), Vec::<String>::new());
}

/// A sibling index that holds [`MAX_SIBLINGS_BYTES`](schedule_cache::admin::MAX_SIBLINGS_BYTES) is no longer
/// appended to: a store of a new key of the digest leaves it as it was. One byte short of the
/// cap, the key's line is appended.
#[test]
fn a_full_sibling_index_is_no_longer_appended_to() {
    let (_tmp, dir, _entry) = stocked();
    let index = dir.join(schedule_cache::admin::siblings_file_name(DIGEST).expect("name"));
    let cap = usize::try_from(schedule_cache::admin::MAX_SIBLINGS_BYTES).expect("the cap fits");
    let store_key = |rest: &str| {
        let (dir, k) = (dir.clone(), key(rest));
        no_hang("store", move || {
            DiskCache::new(&dir)
                .store(Some(&k), &payload(5, 6, 7, 1))
                .expect("no caller mistake")
        })
    };
    let mut full = b"# padding\n".repeat(cap / 10 + 1);
    full.truncate(cap - 1);
    full.push(b'\n');
    fs::write(&index, &full).expect("write");
    assert_eq!(store_key("new"), StoreOutcome::Stored);
    assert!(dir.join(Space::Placement.file_name(&key("new"))).is_file());
    assert_eq!(
        fs::read(&index).expect("read"),
        full,
        "appended past the cap"
    );
    let short = &full[1..];
    fs::write(&index, short).expect("write");
    assert_eq!(store_key("newer"), StoreOutcome::Stored);
    let mut expected = short.to_vec();
    expected.extend_from_slice(format!("p {}\n", key("newer").as_str()).as_bytes());
    assert_eq!(fs::read(&index).expect("read"), expected);
}

fn probe_key(dir: &Path, rest: &str) -> Lookup<PlacementEntry> {
    let (dir, k) = (dir.to_path_buf(), key(rest));
    no_hang("probe", move || {
        DiskCache::new(&dir).probe::<PlacementEntry>(Some(&k), DIGEST)
    })
}
