//! Many writers in separate processes on one real `redis-server`: 6 processes store large
//! entries at 4 overlapping keys and look them up while the parent reads too. Every entry any
//! reader gets is one some writer wrote whole (no torn value), no operation is refused, no
//! process errors, and the entries left at the end are ones the workers reported storing.
//!
//! The workers are this test binary itself, re-run with `KCACHE_REDIS_WORKER` set.
#![cfg(feature = "redis")]

mod redis_support;

use std::collections::BTreeSet;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use redis_support::{DIGEST, ServerExt, decode, key, payload};
use schedule_cache::placement::PlacementEntry;
use schedule_cache::{Lookup, RedisStore, Store, StoreOutcome};

const WORKER: &str = "KCACHE_REDIS_WORKER";
const URL: &str = "KCACHE_REDIS_URL";
const PROCESSES: u32 = 6;
const KEYS: u32 = 4;
const OPS: u32 = 40;

fn fail(code: i32, msg: String) -> ! {
    eprintln!("{msg}");
    std::process::exit(code)
}

/// How many flips the entry of `(writer, seq)` has: 50 to 650, so entries of one key differ
/// in length (a torn value would mix lengths).
fn size(writer: u32, seq: u32) -> u32 {
    50 + (writer * 131 + seq * 37) % 600
}

/// The worker body; a no-op unless this process was spawned as a worker.
#[test]
fn redis_writer_worker() {
    let Ok(id) = std::env::var(WORKER) else {
        return;
    };
    let id: u32 = id.parse().expect("worker id");
    let url = std::env::var(URL).expect("url");
    let store = RedisStore::open(&url)
        .expect("url")
        .with_timeouts(Duration::from_secs(1), Duration::from_secs(5));
    let mut x = id.wrapping_mul(2_654_435_761) | 1;
    let mut next = move |n: u32| {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        x % n
    };
    for seq in 1..=OPS {
        let ki = next(KEYS);
        let k = key(&format!("k{ki}"));
        match store
            .store(Some(&k), &payload(id, seq, size(id, seq)))
            .unwrap_or_else(|e| fail(2, format!("worker {id}: store error {e}")))
        {
            StoreOutcome::Stored => println!("@S {ki} {id} {seq}"),
            other => fail(3, format!("worker {id}: store {other:?}")),
        }
        let kj = next(KEYS);
        match store.probe::<PlacementEntry>(Some(&key(&format!("k{kj}"))), DIGEST) {
            Lookup::Hit(e) => match decode(&e) {
                Some((w, s, n)) if n == size(w, s) => {}
                _ => fail(4, format!("worker {id}: torn or foreign entry at k{kj}")),
            },
            Lookup::Miss(_) => {}
            other => fail(5, format!("worker {id}: lookup {other:?}")),
        }
    }
}

#[test]
fn concurrent_writer_processes_never_tear_an_entry() {
    let server = redis_support::Server::start();
    let children = spawn_workers("redis_writer_worker", WORKER, &server.url());

    // Read along while the workers write.
    let reader = server.store();
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut seen = 0u32;
    let mut children: Vec<_> = children.into_iter().map(Some).collect();
    let mut outputs = Vec::new();
    while children.iter().any(Option::is_some) {
        assert!(Instant::now() < deadline, "workers did not finish in time");
        for ki in 0..KEYS {
            match reader.probe::<PlacementEntry>(Some(&key(&format!("k{ki}"))), DIGEST) {
                Lookup::Hit(e) => {
                    let (w, s, n) = decode(&e).expect("a whole entry");
                    assert_eq!(n, size(w, s), "an entry of the wrong length");
                    seen += 1;
                }
                Lookup::Miss(_) => {}
                other => panic!("reader: {other:?}"),
            }
        }
        for slot in &mut children {
            if let Some(child) = slot
                && child.try_wait().expect("try_wait").is_some()
            {
                let child = slot.take().expect("present");
                outputs.push(child.wait_with_output().expect("output"));
            }
        }
    }

    let mut stored: BTreeSet<(u32, u32, u32)> = BTreeSet::new();
    for out in &outputs {
        assert!(
            out.status.success(),
            "a worker failed ({:?}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            // The harness's "test … " banner may precede the first line.
            if let Some((_, rest)) = line.split_once("@S ") {
                let v: Vec<u32> = rest.split(' ').map(|x| x.parse().expect("num")).collect();
                stored.insert((v[0], v[1], v[2]));
            }
        }
    }
    assert_eq!(
        stored.len(),
        (PROCESSES * OPS) as usize,
        "every store was reported"
    );
    assert!(seen > 0, "the reader never saw an entry");

    // Each key holds a whole entry that a worker reported storing at that key.
    for ki in 0..KEYS {
        if !stored.iter().any(|(k, _, _)| *k == ki) {
            continue;
        }
        let e = reader
            .lookup::<PlacementEntry>(Some(&key(&format!("k{ki}"))), DIGEST)
            .expect("an entry at a written key");
        let (w, s, _) = decode(&e).expect("whole");
        assert!(
            stored.contains(&(ki, w, s)),
            "k{ki} holds ({w}, {s}), never stored there"
        );
    }
}

const BUMP_WORKER: &str = "KCACHE_REDIS_BUMP_WORKER";
const OPS_AFTER_BUMP: u32 = 15;
/// Outside the cache's prefix: the parent's signal and the workers' progress counter.
const BUMP_FLAG: &str = "test-control:bump";
const PROGRESS: &str = "test-control:ops";

/// `seq` tagged with the regime it was written under (decoded by [`regime_of`]).
fn tagged(regime: u32, seq: u32) -> u32 {
    regime * 1000 + seq
}

fn regime_of(tagged_seq: u32) -> u32 {
    tagged_seq / 1000
}

/// The bump worker: stores and looks up under regime R until the parent raises the flag, then
/// under R + 1. Old-regime writers use keys k0..k3, new ones k2..k5, so k0 and k1 are written
/// only before the bump (only the sweep can remove them) and k4, k5 only after it.
#[test]
fn redis_bump_worker() {
    let Ok(id) = std::env::var(BUMP_WORKER) else {
        return;
    };
    let id: u32 = id.parse().expect("worker id");
    let url = std::env::var(URL).expect("url");
    let mut raw = redis::Client::open(url.as_str())
        .expect("url")
        .get_connection_with_timeout(Duration::from_secs(2))
        .expect("connect");
    let r = schedule_cache::admin::CACHE_REGIME_VERSION;
    let mut regime = r;
    let mut x = id.wrapping_mul(2_654_435_761) | 1;
    let mut next = move |n: u32| {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        x % n
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    let (mut seq, mut after) = (0u32, 0u32);
    let mut new_stored = BTreeSet::new();
    while after < OPS_AFTER_BUMP {
        if Instant::now() > deadline {
            fail(6, format!("worker {id}: no bump before the deadline"));
        }
        if regime == r
            && redis::cmd("EXISTS")
                .arg(BUMP_FLAG)
                .query::<bool>(&mut raw)
                .expect("EXISTS")
        {
            regime = r + 1;
        }
        let store = RedisStore::open(&url)
            .expect("url")
            .with_regime(regime)
            .with_timeouts(Duration::from_secs(1), Duration::from_secs(5));
        seq += 1;
        let ki = next(KEYS) + if regime == r { 0 } else { 2 };
        let s = tagged(regime, seq);
        match store
            .store(Some(&key(&format!("k{ki}"))), &payload(id, s, size(id, s)))
            .unwrap_or_else(|e| fail(2, format!("worker {id}: store error {e}")))
        {
            StoreOutcome::Stored => {
                println!("@S {ki} {id} {s}");
                if regime != r {
                    new_stored.insert(ki);
                }
            }
            StoreOutcome::Refused(schedule_cache::Refusal::NewerRegime { .. }) if regime == r => {}
            other => fail(3, format!("worker {id} (regime {regime}): store {other:?}")),
        }
        let kj = next(KEYS + 2);
        match store.probe::<PlacementEntry>(Some(&key(&format!("k{kj}"))), DIGEST) {
            Lookup::Hit(e) => match decode(&e) {
                Some((w, s, n)) if n == size(w, s) && regime_of(s) == regime => {}
                found => fail(
                    4,
                    format!("worker {id} (regime {regime}) read {found:?} at k{kj}"),
                ),
            },
            Lookup::Miss(m) if regime != r && new_stored.contains(&kj) => fail(
                5,
                format!("worker {id}: lost its own new-regime entry k{kj}: {m}"),
            ),
            Lookup::Miss(_) => {}
            Lookup::Refused(schedule_cache::Refusal::NewerRegime { .. }) if regime == r => {}
            other => fail(
                7,
                format!("worker {id} (regime {regime}): lookup {other:?}"),
            ),
        }
        let _: i64 = redis::cmd("INCR")
            .arg(PROGRESS)
            .query(&mut raw)
            .expect("INCR");
        if regime != r {
            after += 1;
        }
    }
}

#[test]
fn a_regime_bump_amid_writer_processes_sweeps_exactly_the_old_regime() {
    let server = redis_support::Server::start();
    let children = spawn_workers("redis_bump_worker", BUMP_WORKER, &server.url());
    // Raise the flag once the workers have done some old-regime operations.
    let mut raw = server.raw();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let done: Option<u32> = redis::cmd("GET")
            .arg(PROGRESS)
            .query(&mut raw)
            .expect("GET");
        if done.unwrap_or(0) >= PROCESSES * 4 {
            break;
        }
        assert!(Instant::now() < deadline, "workers made no progress");
        std::thread::sleep(Duration::from_millis(5));
    }
    let _: () = redis::cmd("SET")
        .arg(BUMP_FLAG)
        .arg(1)
        .query(&mut raw)
        .expect("SET");

    let mut stored: BTreeSet<(u32, u32, u32)> = BTreeSet::new();
    for child in children {
        let out = child.wait_with_output().expect("worker output");
        assert!(
            out.status.success(),
            "a worker failed ({:?}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            if let Some((_, rest)) = line.split_once("@S ") {
                let v: Vec<u32> = rest.split(' ').map(|x| x.parse().expect("num")).collect();
                stored.insert((v[0], v[1], v[2]));
            }
        }
    }
    let r = schedule_cache::admin::CACHE_REGIME_VERSION;
    assert!(
        stored.iter().any(|&(_, _, s)| regime_of(s) == r),
        "no old-regime store"
    );
    let reader = server.store().with_regime(r + 1);
    for ki in 0..KEYS + 2 {
        let found = reader.lookup::<PlacementEntry>(Some(&key(&format!("k{ki}"))), DIGEST);
        let new_writes = stored
            .iter()
            .any(|&(k, _, s)| k == ki && regime_of(s) == r + 1);
        match found {
            // Nothing written before the bump survives it.
            None => assert!(
                !new_writes,
                "k{ki}: an entry written after the bump was lost"
            ),
            Some(e) => {
                let (w, s, _) = decode(&e).expect("whole");
                assert_eq!(regime_of(s), r + 1, "k{ki}: an old-regime entry survived");
                assert!(
                    stored.contains(&(ki, w, s)),
                    "k{ki}: ({w}, {s}) was never stored"
                );
            }
        }
    }
}

/// Starts `PROCESSES` copies of this test binary, each running only the test `worker` with
/// `id_var` set to its index and the server's URL in `URL`.
fn spawn_workers(worker: &str, id_var: &str, url: &str) -> Vec<std::process::Child> {
    let exe = std::env::current_exe().expect("test binary");
    (0..PROCESSES)
        .map(|id| {
            Command::new(&exe)
                .args(["--exact", worker, "--nocapture", "--test-threads=1"])
                .env(id_var, id.to_string())
                .env(URL, url)
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("spawn worker")
        })
        .collect()
}
