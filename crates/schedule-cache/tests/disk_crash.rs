//! Crash safety with real processes: writer processes are killed with SIGKILL at random points
//! (most of a writer's time is spent inside an atomic write) while reader processes look
//! entries up. Every entry a lookup returns, during and after, must be one some writer wrote
//! whole; afterwards the crash-stale staging a killed writer left is swept by the next
//! process to open the directory.
//!
//! The workers are this test binary itself, re-run with `KCACHE_DISK_CRASH_ROLE` set.

mod disk_support;

use schedule_cache::Store as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use disk_support::{Children, DIGEST, Rng, decode_payload, key, payload, staging_names};
use schedule_cache::admin::Space;
use schedule_cache::placement::PlacementEntry;
use schedule_cache::{DiskCache, Lookup, MissReason};

const ROLE: &str = "KCACHE_DISK_CRASH_ROLE";
const KEYS: u32 = 6;

fn keys() -> Vec<schedule_cache::CacheKey> {
    (0..KEYS).map(|i| key(&format!("k{i}"))).collect()
}

/// A writer's `seq`-th entry: big enough (tens of KiB) that a kill often lands mid-write.
fn writer_entry(writer: u32, seq: u32) -> PlacementEntry {
    payload(writer, seq, 0, 200 + (seq * 97 + writer * 31) % 1500)
}

/// The worker body; a no-op unless this process was spawned as a worker.
#[test]
fn crash_worker() {
    let Ok(role) = std::env::var(ROLE) else {
        return;
    };
    let dir = PathBuf::from(std::env::var("KCACHE_DISK_DIR").expect("dir"));
    let id: u32 = std::env::var("KCACHE_DISK_ID")
        .expect("id")
        .parse()
        .expect("id");
    let cache = DiskCache::new(&dir);
    let keys = keys();
    // Safety net: a worker never outlives a crashed parent by long.
    let deadline = Instant::now() + Duration::from_secs(30);
    match role.as_str() {
        "writer" => {
            let mut seq = 0u32;
            while Instant::now() < deadline {
                let k = &keys[((id + seq) % KEYS) as usize];
                cache.store(Some(k), &writer_entry(id, seq)).expect("store");
                seq += 1;
            }
        }
        "reader" => {
            let stop = dir.with_extension("stop");
            let mut hits = 0u64;
            while !stop.exists() && Instant::now() < deadline {
                for k in &keys {
                    match cache.probe::<PlacementEntry>(Some(k), DIGEST) {
                        Lookup::Hit(e) => {
                            let Some((w, s, _)) = decode_payload(&e) else {
                                eprintln!("torn or foreign entry at {k}: {e:?}");
                                std::process::exit(3);
                            };
                            if writer_entry(w, s) != e {
                                eprintln!("entry at {k} is not writer {w}'s entry {s}");
                                std::process::exit(3);
                            }
                            hits += 1;
                        }
                        // Publication is atomic: a reader never sees a partial file.
                        Lookup::Miss(MissReason::Unparsable { message }) => {
                            eprintln!("torn read at {k}: {message}");
                            std::process::exit(5);
                        }
                        Lookup::Miss(_) => {}
                        other => {
                            eprintln!("reader saw {other:?}");
                            std::process::exit(4);
                        }
                    }
                }
            }
            println!("\nhits={hits}");
        }
        other => panic!("unknown role {other}"),
    }
}

fn entry_count(dir: &Path) -> usize {
    fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .filter(|e| Space::of_file_name(&e.file_name().to_string_lossy()).is_some())
                .count()
        })
        .unwrap_or(0)
}

fn spawn(role: &str, dir: &Path, id: u32) -> std::process::Child {
    Command::new(std::env::current_exe().expect("current exe"))
        .args(["--exact", "crash_worker", "--nocapture", "--test-threads=1"])
        .env(ROLE, role)
        .env("KCACHE_DISK_DIR", dir)
        .env("KCACHE_DISK_ID", id.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn worker")
}

#[test]
fn killed_writers_never_leave_a_torn_entry_and_their_staging_is_swept() {
    if std::env::var(ROLE).is_ok() {
        return;
    }
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("cache");
    let mut rng = Rng::from_env_or_clock();
    let mut writers = Children::default();
    let mut readers = Children::default();
    let mut next_id = 0u32;
    for _ in 0..3 {
        writers.0.push(spawn("writer", &dir, next_id));
        next_id += 1;
    }
    for r in 0..2 {
        readers.0.push(spawn("reader", &dir, 1000 + r));
    }

    // Let the first entry land (bounded: a loaded machine starts processes slowly).
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(20) && entry_count(&dir) == 0 {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(entry_count(&dir) > 0, "no writer published an entry");

    // Kill a random writer at a random moment, replace it, for a bounded number of rounds.
    let mut kills = 0;
    for _ in 0..25 {
        std::thread::sleep(Duration::from_millis(10 + rng.below(70)));
        let victim = rng.below(writers.0.len() as u64) as usize;
        let mut child = writers.0.swap_remove(victim);
        child.kill().expect("SIGKILL");
        let status = child.wait().expect("wait");
        assert!(
            status.code().is_none(),
            "the writer died of the signal: {status:?}"
        );
        kills += 1;
        writers.0.push(spawn("writer", &dir, next_id));
        next_id += 1;
    }
    // Kill the remaining writers, then stop the readers.
    for c in &mut writers.0 {
        c.kill().expect("SIGKILL");
        c.wait().expect("wait");
    }
    writers.0.clear();
    fs::write(dir.with_extension("stop"), "").expect("stop file");
    let mut total_hits = 0u64;
    for c in std::mem::take(&mut readers.0) {
        let out = c.wait_with_output().expect("reader");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success(),
            "reader failed: {:?}\n{stderr}",
            out.status
        );
        let stdout = String::from_utf8_lossy(&out.stdout);
        let hits: u64 = stdout
            .split("hits=")
            .nth(1)
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|n| n.parse().ok())
            .expect("reader reports its hits");
        total_hits += hits;
    }
    assert!(
        total_hits > 0,
        "readers must have seen entries while writers were killed"
    );

    // Every entry file on disk is whole (atomic publication), not just the ones lookups return.
    let mut whole = 0;
    for item in fs::read_dir(&dir).expect("list").flatten() {
        let name = item.file_name().to_string_lossy().into_owned();
        if Space::of_file_name(&name).is_some() {
            let text = fs::read_to_string(item.path()).expect("read");
            let e: PlacementEntry = ron::from_str(&text).expect("every published entry parses");
            let (w, s, _) = decode_payload(&e).expect("whole");
            assert_eq!(writer_entry(w, s), e);
            whole += 1;
        }
    }
    assert!(whole > 0);

    // Kill rounds until a killed writer is seen to leave staging behind: wait until a
    // writer's staging directory exists (the write is in progress), then SIGKILL it.
    let mut left_behind = staging_names(&dir).len();
    for round in 0..40 {
        if left_behind > 0 {
            break;
        }
        let mut c = spawn("writer", &dir, next_id + round);
        let watching = Instant::now();
        while staging_names(&dir).is_empty() && watching.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_micros(200));
        }
        c.kill().expect("SIGKILL");
        c.wait().expect("wait");
        left_behind = staging_names(&dir).len();
    }
    assert!(left_behind > 0, "no kill landed inside a write in 40 tries");
    eprintln!(
        "{kills} kills, {total_hits} reader hits, {whole} entries, {left_behind} stale staging"
    );

    // The next process to open the directory (this one has not yet) sweeps it. The threshold
    // is zero here because the test cannot wait an hour; the writers are all dead.
    let cache = DiskCache::new(&dir).with_stale_staging_after(Duration::ZERO);
    for k in keys() {
        if let Lookup::Hit(e) = cache.probe::<PlacementEntry>(Some(&k), DIGEST) {
            let (w, s, _) = decode_payload(&e).expect("whole");
            assert_eq!(writer_entry(w, s), e);
        }
    }
    assert_eq!(
        staging_names(&dir),
        Vec::<String>::new(),
        "stale staging swept"
    );
}
