//! Bad input on disk and from callers: every case is a miss, a refusal or a typed error,
//! never a panic, and nothing is ever written outside the cache directory.

mod disk_support;

use schedule_cache::Store as _;
use std::fs;

use std::path::Path;

use cache_dir::STAMP_FILE;
use disk_support::{DIGEST, key, payload, snapshot};
use schedule_cache::admin::{Observer, Outcome};
use schedule_cache::placement::{PLACEMENT_ENTRY_VERSION, PlacementEntry};
use schedule_cache::{CacheKey, DiskCache, Error, Lookup, MissReason, Refusal, StoreOutcome};

/// A cache directory inside a parent that also holds a canary; the canary (everything in the
/// parent outside the cache directory) must be unchanged after each case.
struct Sandbox {
    tmp: tempfile::TempDir,
}

impl Sandbox {
    fn new() -> Sandbox {
        let tmp = tempfile::tempdir().expect("tempdir");
        fs::create_dir(tmp.path().join("canary")).expect("mkdir");
        fs::write(tmp.path().join("canary/file"), "do not touch").expect("write");
        Sandbox { tmp }
    }
    fn dir(&self) -> std::path::PathBuf {
        self.tmp.path().join("cache")
    }
    fn outside(&self) -> Vec<std::path::PathBuf> {
        snapshot(self.tmp.path())
            .into_keys()
            .filter(|p| !p.starts_with(self.dir()))
            .collect()
    }
}

fn entry_path(dir: &Path, k: &CacheKey) -> std::path::PathBuf {
    dir.join(format!("{k}.placement.ron"))
}

fn probe(dir: &Path, k: &CacheKey) -> Lookup<PlacementEntry> {
    DiskCache::new(dir).probe(Some(k), DIGEST)
}

#[test]
fn corrupt_entries_are_explained_misses() {
    let sb = Sandbox::new();
    let outside = sb.outside();
    let dir = sb.dir();
    let k = key("bad");
    schedule_cache::DiskCache::new(&dir)
        .store(Some(&k), &payload(1, 2, 3, 40))
        .expect("store");
    let good = fs::read(entry_path(&dir, &k)).expect("read");

    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("truncated", good[..good.len() / 2].to_vec()),
        ("empty", Vec::new()),
        (
            "random",
            (0..512u32)
                .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
                .collect(),
        ),
        ("not utf-8", vec![0xff, 0xfe, b'(', 0x80]),
        ("another type", b"(a: 1, b: [2, 3])".to_vec()),
    ];
    for (name, bytes) in cases {
        fs::write(entry_path(&dir, &k), &bytes).expect("write");
        let got = probe(&dir, &k);
        assert!(
            matches!(got, Lookup::Miss(MissReason::Unparsable { .. })),
            "{name}: {got:?}"
        );
    }

    // Wrong version: the same shape with another number, and another shape altogether.
    let mut other = payload(1, 2, 3, 4);
    other.version = PLACEMENT_ENTRY_VERSION + 1;
    let text = ron::to_string(&other).expect("encode");
    fs::write(entry_path(&dir, &k), text).expect("write");
    assert_eq!(
        probe(&dir, &k),
        Lookup::Miss(MissReason::VersionMismatch {
            found: PLACEMENT_ENTRY_VERSION + 1,
            expected: PLACEMENT_ENTRY_VERSION
        })
    );
    fs::write(entry_path(&dir, &k), "(version: 0, choices: {\"x\": 1})").expect("write");
    assert!(matches!(
        probe(&dir, &k),
        Lookup::Miss(MissReason::VersionMismatch { found: 0, .. })
    ));

    // Wrong digest: a whole, current entry saved for another identity.
    let mut foreign = payload(1, 2, 3, 4);
    foreign.digest = "0123".into();
    fs::write(
        entry_path(&dir, &k),
        ron::to_string(&foreign).expect("encode"),
    )
    .expect("write");
    assert!(matches!(
        probe(&dir, &k),
        Lookup::Miss(MissReason::DigestMismatch { .. })
    ));

    // A directory where the entry should be: a miss to read, a refusal to overwrite.
    fs::remove_file(entry_path(&dir, &k)).expect("rm");
    fs::create_dir(entry_path(&dir, &k)).expect("mkdir");
    assert!(matches!(
        probe(&dir, &k),
        Lookup::Miss(MissReason::Unreadable { .. })
    ));
    let out = schedule_cache::DiskCache::new(&dir)
        .store(Some(&k), &payload(1, 2, 3, 4))
        .expect("store");
    assert!(
        matches!(out, StoreOutcome::Refused(Refusal::Io { .. })),
        "{out:?}"
    );
    assert!(entry_path(&dir, &k).is_dir());
    assert!(
        disk_support::staging_names(&dir).is_empty(),
        "a failed write removes its own staging"
    );
    assert_eq!(sb.outside(), outside);
}

#[test]
fn an_unwritable_cache_directory_is_a_refusal_not_an_error() {
    let sb = Sandbox::new();
    let k = key("ro");
    // A file where the cache directory should be (works for every user, root included).
    fs::write(sb.dir(), "I am a file").expect("write");
    let before = snapshot(sb.tmp.path());
    let observer = Observer::new();
    let out = (
        schedule_cache::DiskCache::new(sb.dir())
            .with_observer(observer.clone())
            .store(Some(&k), &payload(1, 1, 1, 1))
            .expect("store"),
        schedule_cache::DiskCache::new(sb.dir().join("sub"))
            .with_observer(observer.clone())
            .store(Some(&k), &payload(1, 1, 1, 1))
            .expect("store"),
        DiskCache::new(sb.dir())
            .with_observer(observer.clone())
            .probe::<PlacementEntry>(Some(&k), DIGEST),
    );
    let events = observer.take();
    assert!(
        matches!(out.0, StoreOutcome::Refused(Refusal::Io { .. })),
        "{:?}",
        out.0
    );
    assert!(
        matches!(out.1, StoreOutcome::Refused(Refusal::Io { .. })),
        "{:?}",
        out.1
    );
    assert!(
        matches!(out.2, Lookup::Refused(Refusal::Io { .. })),
        "{:?}",
        out.2
    );
    assert!(
        events
            .iter()
            .all(|e| matches!(e.outcome, Outcome::Refused(_)))
    );
    assert_eq!(fs::read_to_string(sb.dir()).expect("read"), "I am a file");
    assert_eq!(snapshot(sb.tmp.path()), before);

    // A directory the process cannot write (root included: the check runs in a child
    // process that is `nobody` when this one is root).
    let ro = sb.tmp.path().join("ro");
    fs::create_dir(&ro).expect("mkdir");
    disk_support::run_child_as_reader("read_only_empty_child", RO_EMPTY_CHILD, sb.tmp.path(), &ro);
}

const RO_EMPTY_CHILD: &str = "KCACHE_DISK_READONLY_EMPTY_CHILD";

/// The child body of [`an_unwritable_cache_directory_is_a_refusal_not_an_error`]: in the
/// empty directory named by the environment, which it cannot write, a store and a lookup
/// are refusals (nothing to read, no stamp to write).
#[test]
fn read_only_empty_child() {
    let Ok(dir) = std::env::var(RO_EMPTY_CHILD) else {
        return;
    };
    let ro = std::path::PathBuf::from(dir);
    assert!(
        fs::File::create(ro.join("probe-write")).is_err(),
        "the child can write the directory: the test shows nothing"
    );
    let k = key("ro");
    let out = schedule_cache::DiskCache::new(&ro)
        .store(Some(&k), &payload(1, 1, 1, 1))
        .expect("store");
    assert!(
        matches!(out, StoreOutcome::Refused(Refusal::Io { .. })),
        "{out:?}"
    );
    assert!(matches!(probe(&ro, &k), Lookup::Refused(_)));
}

#[test]
fn bad_stamps_refuse() {
    let sb = Sandbox::new();
    let dir = sb.dir();
    let k = key("s");
    schedule_cache::DiskCache::new(&dir)
        .store(Some(&k), &payload(1, 1, 1, 1))
        .expect("store");
    for (content, newer) in [
        (&b""[..], false),
        (b"\n", false),
        (b"1.0\n", false),
        (b"\xff\xfe", false),
        (b"4294967296\n", false),
        (b"4294967295\n", true),
    ] {
        fs::write(dir.join(STAMP_FILE), content).expect("write");
        let before = snapshot(sb.tmp.path());
        let out = schedule_cache::DiskCache::new(&dir)
            .store(Some(&k), &payload(2, 2, 2, 2))
            .expect("store");
        match out {
            StoreOutcome::Refused(Refusal::NewerRegime { .. }) if newer => {}
            StoreOutcome::Refused(Refusal::MalformedStamp { .. }) if !newer => {}
            other => panic!("{content:?}: {other:?}"),
        }
        assert!(matches!(probe(&dir, &k), Lookup::Refused(_)));
        assert_eq!(snapshot(sb.tmp.path()), before);
    }
    // A directory where the stamp should be is a filesystem refusal too.
    fs::remove_file(dir.join(STAMP_FILE)).expect("rm");
    fs::create_dir(dir.join(STAMP_FILE)).expect("mkdir");
    assert!(matches!(
        schedule_cache::DiskCache::new(&dir)
            .store(Some(&k), &payload(2, 2, 2, 2))
            .expect("store"),
        StoreOutcome::Refused(Refusal::Io { .. })
    ));
}

#[test]
fn keys_with_path_syntax_are_rejected_before_any_path_is_built() {
    let sb = Sandbox::new();
    let before = snapshot(sb.tmp.path());
    for raw in [
        "../escape",
        "a/b",
        "/etc/passwd",
        "..",
        ".",
        "x/../../y",
        "a\\b",
        "",
        "k.ron",
    ] {
        let err = CacheKey::new(raw).expect_err(raw);
        assert!(matches!(err, Error::InvalidKey { .. }), "{raw}: {err}");
    }
    assert_eq!(snapshot(sb.tmp.path()), before);
}

#[test]
fn a_panic_in_observed_code_propagates() {
    let observer = Observer::new();
    let caught = std::panic::catch_unwind(|| {
        let _ = schedule_cache::DiskCache::new(Path::new("/nonexistent-kcache"))
            .with_observer(observer.clone())
            .lookup::<PlacementEntry>(None, DIGEST);
        panic!("user panic");
    });
    assert!(caught.is_err());
    // The observer outlives the panic whole, with what it saw before it; a new observer sees
    // only its own events.
    assert_eq!(observer.take().len(), 1);
    assert!(Observer::new().take().is_empty());
}

mod props {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]

        /// Arbitrary bytes at an entry's name: a lookup is a miss or (if the bytes happen to be
        /// a current entry for the digest) a hit, never a panic.
        #[test]
        fn arbitrary_entry_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
            let tmp = tempfile::tempdir().expect("tempdir");
            let k = key("p");
            schedule_cache::DiskCache::new(tmp.path()).store(Some(&k), &payload(1, 1, 1, 1)).expect("store");
            fs::write(entry_path(tmp.path(), &k), &bytes).expect("write");
            match probe(tmp.path(), &k) {
                Lookup::Hit(e) => prop_assert_eq!(ron::from_str::<PlacementEntry>(std::str::from_utf8(&bytes).expect("utf8")).expect("parse"), e),
                Lookup::Miss(_) => {}
                other => prop_assert!(false, "{:?}", other),
            }
        }

        /// Arbitrary stamp bytes: a store is admitted (the stamp then reads this build's
        /// regime) or refused with the stamp untouched; never a panic, never an error.
        #[test]
        fn arbitrary_stamps_admit_or_refuse(bytes in proptest::collection::vec(any::<u8>(), 0..12)) {
            let tmp = tempfile::tempdir().expect("tempdir");
            let cache = DiskCache::new(tmp.path()).with_regime(7);
            fs::write(tmp.path().join(STAMP_FILE), &bytes).expect("write");
            match cache.store(Some(&key("p")), &payload(1, 1, 1, 1)).expect("store") {
                StoreOutcome::Stored => {
                    let v = cache_dir::parse_stamp(&bytes);
                    prop_assert!(v.is_some_and(|v| v <= 7));
                    // A bare stamp (of only this store's files) is replaced by this store's
                    // kinded stamp, an equal one sweeping nothing.
                    let want = format!("{} 7\n", schedule_cache::admin::STORE_KIND);
                    prop_assert_eq!(fs::read_to_string(tmp.path().join(STAMP_FILE)).expect("stamp"), want);
                }
                StoreOutcome::Refused(_) => {
                    prop_assert!(cache_dir::parse_stamp(&bytes).is_none_or(|v| v > 7));
                    prop_assert_eq!(fs::read(tmp.path().join(STAMP_FILE)).expect("stamp"), bytes);
                }
                other => prop_assert!(false, "{:?}", other),
            }
        }
    }
}
