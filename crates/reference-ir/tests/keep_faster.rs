//! The keep-faster store policy (`StorePolicy::KeepFaster`) with real processes: 6 processes
//! store different times for one key at once, in each of 50 rounds (a new key each round), on
//! a directory and on a real `redis-server`; every round leaves the fastest winner. Also:
//! entries a lookup would not return (garbage, another digest, other key components, no usable
//! time, on Redis one written behind the store's back) are replaced, a faster or equally fast
//! one is kept and the outcome says so, and the default stays last write wins.
//!
//! The workers are this test binary itself, re-run with `KCACHE_KEEP_FASTER_ID` set; each
//! runs all 50 rounds, meeting the others at a file barrier before each round's store.

#[path = "../../schedule-cache/tests/redis_support/mod.rs"]
mod redis_support;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use redis_support::ServerExt as _;

use reference_ir::ir::{Code, Expr, Index, Precision, Stmt, Symbol, TensorNode};
use reference_ir::schedule::{ReferenceLanguage, Schedule};
use schedule_cache::{
    DiskCache, KeptExisting, Measurements, ScheduleCache, Store, StoreOutcome, StorePolicy,
    TimingIdentity,
};

const ID: &str = "KCACHE_KEEP_FASTER_ID";
const DIR: &str = "KCACHE_KEEP_FASTER_DIR";
const URL: &str = "KCACHE_KEEP_FASTER_URL";
const PROCESSES: u32 = 6;
const ROUNDS: u32 = 50;

fn fail(code: i32, msg: String) -> ! {
    eprintln!("{msg}");
    std::process::exit(code)
}

/// Round `round`'s code: `for i in 0..64+round { y[i] = 2 }` (a key of its own per round),
/// built with fresh ids, and its loop symbol.
fn code(round: u32) -> (Code, Symbol) {
    let i = Symbol::fresh("i");
    let y = TensorNode::new("y", &[64 + round as usize], Precision::F32);
    let body = vec![Stmt::set(&y, vec![Index::var(&i)], Expr::Const(2.0))];
    (
        Code::new(vec![Stmt::for_(&i, 0, 64 + i64::from(round), body)]),
        i,
    )
}

/// Worker `id`'s measurements in `round`: its best time is `1e-4 * (1 + rank / 100)`, the
/// rank a permutation of the workers that changes every round (so the fastest is a different
/// worker, starting at a different moment, from round to round). The best is not the first
/// time, and a slower one and a NaN come with it.
fn times(id: u32, round: u32) -> Vec<f64> {
    let best = 1e-4 * (1.0 + f64::from(rank(id, round)) / 100.0);
    vec![best * 1.5, f64::NAN, best, best * 1.2]
}

fn rank(id: u32, round: u32) -> u32 {
    (id * 5 + round * 7) % PROCESSES
}

fn fastest(round: u32) -> u32 {
    (0..PROCESSES)
        .find(|&id| rank(id, round) == 0)
        .expect("a permutation")
}

fn timing() -> TimingIdentity {
    TimingIdentity {
        device: "keep-faster-test".into(),
        toolchain: None,
    }
}

fn cache<S: Store>(store: S) -> ScheduleCache<ReferenceLanguage, S> {
    ScheduleCache::new(ReferenceLanguage, "cc", timing(), store)
        .with_schedule_format("keep-faster-1")
}

/// Stores `times` for round `round`'s code (split by 8) through `c`.
fn store_round<S: Store>(
    c: &ScheduleCache<ReferenceLanguage, S>,
    round: u32,
    times: Vec<f64>,
) -> StoreOutcome {
    let (code, i) = code(round);
    let mut s = Schedule::new();
    s.split(&i, 8);
    c.store(&code, &s.ops, Measurements::new(times))
        .unwrap_or_else(|e| fail(2, format!("store error {e}")))
        .outcome
}

/// The times stored for round `round`, if any.
fn stored_times<S: Store>(c: &ScheduleCache<ReferenceLanguage, S>, round: u32) -> Option<Vec<f64>> {
    let (code, _) = code(round);
    c.lookup(&code).expect("lookup").ok().map(|h| h.entry.times)
}

fn same_times(a: &[f64], b: &[f64]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
}

/// Waits (bounded) until `path` exists.
fn await_file(path: &Path, deadline: Instant, who: &str) {
    while !path.exists() {
        if Instant::now() > deadline {
            fail(6, format!("{who}: {} never appeared", path.display()));
        }
        std::thread::sleep(Duration::from_micros(200));
    }
}

/// The worker: for each round, says it is ready, waits for the parent's go, then stores its
/// times for the round's key under keep-faster and reports the outcome (`@O round id S|K`).
#[test]
fn keep_faster_worker() {
    let Ok(id) = std::env::var(ID) else { return };
    let id: u32 = id.parse().expect("id");
    let sync = PathBuf::from(std::env::var(DIR).expect("sync dir"));
    match std::env::var(URL) {
        Ok(url) => rounds(
            id,
            &sync,
            schedule_cache::RedisStore::open(&url)
                .unwrap_or_else(|e| fail(2, format!("url: {e}")))
                .with_timeouts(Duration::from_secs(1), Duration::from_secs(5)),
        ),
        Err(_) => rounds(id, &sync, DiskCache::new(sync.join("cache"))),
    }
}

fn rounds<S: Store>(id: u32, sync: &Path, store: S) {
    let deadline = Instant::now() + Duration::from_secs(60);
    let c = cache(store).with_store_policy(StorePolicy::KeepFaster);
    for round in 0..ROUNDS {
        fs::write(sync.join(format!("ready-{round}-{id}")), "").expect("ready");
        await_file(&sync.join(format!("go-{round}")), deadline, "worker");
        let letter = match store_round(&c, round, times(id, round)) {
            StoreOutcome::Stored => "S",
            StoreOutcome::KeptExisting(_) => "K",
            other => fail(3, format!("worker {id} round {round}: {other:?}")),
        };
        println!("@O {round} {id} {letter}");
    }
}

/// Runs the 6 workers through the 50 rounds against `env` (the store they use), then checks
/// each round's key with `check`.
fn race(sync: &Path, env: &[(&str, String)], check: impl Fn(u32) -> Option<Vec<f64>>) {
    let mut children: Vec<Child> = Vec::new();
    struct Reap<'a>(&'a mut Vec<Child>);
    impl Drop for Reap<'_> {
        fn drop(&mut self) {
            for c in self.0.iter_mut() {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
    }
    let reap = Reap(&mut children);
    for id in 0..PROCESSES {
        let mut cmd = Command::new(std::env::current_exe().expect("exe"));
        cmd.args([
            "--exact",
            "keep_faster_worker",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(ID, id.to_string())
        .env(DIR, sync)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
        for (k, v) in env {
            cmd.env(k, v);
        }
        reap.0.push(cmd.spawn().expect("spawn"));
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    for round in 0..ROUNDS {
        for id in 0..PROCESSES {
            await_file(
                &sync.join(format!("ready-{round}-{id}")),
                deadline,
                "parent",
            );
        }
        fs::write(sync.join(format!("go-{round}")), "").expect("go");
    }
    let children = std::mem::take(reap.0);
    drop(reap);
    let mut kept = 0;
    let mut fastest_stored = 0;
    for child in children {
        let out = child.wait_with_output().expect("worker");
        assert!(
            out.status.success(),
            "worker failed: {:?}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            let Some((_, rest)) = line.split_once("@O ") else {
                continue;
            };
            let f: Vec<&str> = rest.split(' ').collect();
            let (round, id): (u32, u32) = (f[0].parse().expect("round"), f[1].parse().expect("id"));
            match f[2] {
                "K" => kept += 1,
                _ if id == fastest(round) => fastest_stored += 1,
                _ => {}
            }
        }
    }
    for round in 0..ROUNDS {
        let found = check(round).unwrap_or_else(|| panic!("round {round}: no entry"));
        let want = times(fastest(round), round);
        assert!(
            same_times(&found, &want),
            "round {round}: the entry holds {found:?}, the fastest stored {want:?} (worker {})",
            fastest(round)
        );
    }
    // Nothing is faster than each round's fastest, so its store always published.
    assert_eq!(
        fastest_stored, ROUNDS,
        "the fastest worker's store was kept out"
    );
    assert!(kept > 0, "no store ever lost to a faster entry");
    eprintln!("{ROUNDS} rounds: the fastest stayed each time ({kept} stores kept an entry)");
}

#[test]
fn six_processes_leave_the_fastest_on_disk_in_each_of_50_rounds() {
    if std::env::var(ID).is_ok() {
        return;
    }
    let tmp = tempfile::tempdir().expect("tempdir");
    let reader = cache(DiskCache::new(tmp.path().join("cache")));
    race(tmp.path(), &[], |round| stored_times(&reader, round));
}

#[test]
fn six_processes_leave_the_fastest_on_redis_in_each_of_50_rounds() {
    if std::env::var(ID).is_ok() {
        return;
    }
    let server = redis_support::Server::start();
    let tmp = tempfile::tempdir().expect("tempdir");
    let reader = cache(server.store());
    race(tmp.path(), &[(URL, server.url())], |round| {
        stored_times(&reader, round)
    });
}

/// What every store under test answers to the same questions (disk and Redis alike).
fn kept_and_replaced<S: Store>(store: S, corrupt: &dyn Fn(&str)) {
    let keep = cache(store).with_store_policy(StorePolicy::KeepFaster);
    // No entry yet: stored.
    assert_eq!(
        store_round(&keep, 0, vec![2e-4, 3e-4]),
        StoreOutcome::Stored
    );
    // Slower, equally fast, or without a usable time: the existing entry stays.
    for (times, new_time) in [
        (vec![2.5e-4], Some(2.5e-4)),
        (vec![3e-4, 2e-4], Some(2e-4)),
        (vec![f64::NAN, -1.0], None),
        (vec![], None),
    ] {
        assert_eq!(
            store_round(&keep, 0, times.clone()),
            StoreOutcome::KeptExisting(KeptExisting {
                existing_time: 2e-4,
                new_time
            }),
            "{times:?}"
        );
        assert_eq!(stored_times(&keep, 0), Some(vec![2e-4, 3e-4]));
    }
    // Strictly faster: replaced.
    assert_eq!(store_round(&keep, 0, vec![1.9e-4]), StoreOutcome::Stored);
    assert_eq!(stored_times(&keep, 0), Some(vec![1.9e-4]));
    // An entry with no usable time is replaced by any, and one that a lookup would not
    // return (`corrupt` puts it there) is replaced even by a slower one.
    assert_eq!(
        store_round(&cache(keep.store_ref()), 0, vec![f64::NAN]),
        StoreOutcome::Stored
    );
    assert_eq!(store_round(&keep, 0, vec![9e-4]), StoreOutcome::Stored);
    for what in ["garbage", "another digest", "other key components"] {
        assert_eq!(store_round(&keep, 0, vec![1e-6]), StoreOutcome::Stored);
        corrupt(what);
        assert_eq!(stored_times(&keep, 0), None, "{what}: a lookup returns it");
        assert_eq!(
            store_round(&keep, 0, vec![5e-4]),
            StoreOutcome::Stored,
            "{what}"
        );
        assert_eq!(stored_times(&keep, 0), Some(vec![5e-4]), "{what}");
    }
}

/// Writes at round 0's key what `what` names: bytes that are no entry, an entry of round 1's
/// code, or round 0's entry as another schedule format would key it (the key's file copied).
fn corrupt_on_disk(dir: &Path) -> impl Fn(&str) {
    let dir = dir.to_owned();
    move |what| {
        let key = |round: u32, format: &str| {
            let (code, _) = code(round);
            cache(DiskCache::new(&dir))
                .with_schedule_format(format)
                .key(&code)
                .expect("key")
                .expect("timing")
        };
        let target = dir.join(format!("{}.ron", key(0, "keep-faster-1")));
        let bytes = match what {
            "garbage" => b"(version: 2, digest: ".to_vec(),
            "another digest" => {
                store_round(&cache(DiskCache::new(&dir)), 1, vec![1e-6]);
                fs::read(dir.join(format!("{}.ron", key(1, "keep-faster-1")))).expect("read")
            }
            _ => {
                let other = cache(DiskCache::new(&dir)).with_schedule_format("other-format");
                store_round(&other, 0, vec![1e-6]);
                fs::read(dir.join(format!("{}.ron", key(0, "other-format")))).expect("read")
            }
        };
        fs::write(target, bytes).expect("write");
    }
}

#[test]
fn on_disk_a_faster_entry_is_kept_and_one_no_lookup_returns_is_replaced() {
    if std::env::var(ID).is_ok() {
        return;
    }
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("cache");
    kept_and_replaced(DiskCache::new(&dir), &corrupt_on_disk(&dir));
}

#[test]
fn on_redis_a_faster_entry_is_kept_and_one_no_lookup_returns_is_replaced() {
    use schedule_cache::admin::Space;
    if std::env::var(ID).is_ok() {
        return;
    }
    let server = redis_support::Server::start();
    let store = server.store();
    let corrupt = |what: &str| {
        let mut raw = server.raw();
        let key = |round: u32, format: &str| {
            let (code, _) = code(round);
            cache(&store)
                .with_schedule_format(format)
                .key(&code)
                .expect("key")
                .expect("timing")
        };
        let target = store.entry_key(Space::Schedule, &key(0, "keep-faster-1"));
        let get = |raw: &mut redis::Connection, name: String| -> Vec<u8> {
            redis::cmd("GET").arg(name).query(raw).expect("GET")
        };
        // Behind the store's back: the claim recorded with the previous entry stays, so its
        // SHA-1 no longer names the entry ...
        let bytes: Vec<u8> = match what {
            "garbage" => b"(version: 2, digest: ".to_vec(),
            "another digest" => {
                store_round(&cache(&store), 1, vec![1e-6]);
                get(
                    &mut raw,
                    store.entry_key(Space::Schedule, &key(1, "keep-faster-1")),
                )
            }
            _ => {
                // ... except here: the other key's entry comes with its claim, whose SHA-1
                // matches and whose identity (other key components) does not.
                let other = key(0, "other-format");
                store_round(
                    &cache(&store).with_schedule_format("other-format"),
                    0,
                    vec![1e-6],
                );
                let claim: Vec<(String, String)> = redis::cmd("HGETALL")
                    .arg(store.claim_key(Space::Schedule, &other))
                    .query(&mut raw)
                    .expect("HGETALL");
                assert_eq!(claim.len(), 3, "{claim:?}");
                let mut hset = redis::cmd("HSET");
                hset.arg(store.claim_key(Space::Schedule, &key(0, "keep-faster-1")));
                for (f, v) in claim {
                    hset.arg(f).arg(v);
                }
                let _: i64 = hset.query(&mut raw).expect("HSET");
                get(&mut raw, store.entry_key(Space::Schedule, &other))
            }
        };
        let () = redis::cmd("SET")
            .arg(&target)
            .arg(bytes)
            .query(&mut raw)
            .expect("SET");
    };
    kept_and_replaced(&store, &corrupt);
}

/// The seed's default stays: without a policy, a slower winner replaces a faster one.
#[test]
fn by_default_the_last_write_wins() {
    if std::env::var(ID).is_ok() {
        return;
    }
    let tmp = tempfile::tempdir().expect("tempdir");
    let c = cache(DiskCache::new(tmp.path()));
    assert_eq!(c.store_policy(), StorePolicy::LastWriteWins);
    assert_eq!(store_round(&c, 0, vec![1e-4]), StoreOutcome::Stored);
    assert_eq!(store_round(&c, 0, vec![9e-4]), StoreOutcome::Stored);
    assert_eq!(stored_times(&c, 0), Some(vec![9e-4]));
}

/// The reference: what a sequence of stores of one key leaves, by the documented rule alone.
#[derive(Default)]
struct Model {
    times: Option<Vec<f64>>,
}

impl Model {
    fn best(times: &[f64]) -> Option<f64> {
        let mut best: Option<f64> = None;
        for &t in times {
            if t.is_finite() && t >= 0.0 && best.is_none_or(|b| t < b) {
                best = Some(t);
            }
        }
        best
    }

    /// Whether the store publishes (`true`) or keeps the existing entry.
    fn store(&mut self, policy: StorePolicy, times: &[f64]) -> bool {
        let old = self.times.as_deref().and_then(Model::best);
        let publish = policy == StorePolicy::LastWriteWins
            || match (old, Model::best(times)) {
                (None, _) => true,
                (Some(old), Some(new)) => new < old,
                (Some(_), None) => false,
            };
        if publish {
            self.times = Some(times.to_vec());
        }
        publish
    }
}

fn steps() -> impl proptest::strategy::Strategy<Value = Vec<(bool, Vec<f64>)>> {
    use proptest::prelude::*;
    let time = prop_oneof![
        8 => (1u32..6).prop_map(|k| f64::from(k) * 1e-5),
        1 => Just(f64::NAN),
        1 => Just(-1e-5),
        1 => Just(f64::INFINITY),
    ];
    proptest::collection::vec(
        (any::<bool>(), proptest::collection::vec(time, 0..4)),
        1..12,
    )
}

/// Random sequences of last-write-wins and keep-faster stores of one key, times including
/// NaN, negative, infinite and none: every store answers and leaves what the model says, on
/// disk and (with the feature) on a real Redis server.
#[test]
fn mixed_policies_follow_the_reference_model() {
    use proptest::prelude::*;
    if std::env::var(ID).is_ok() {
        return;
    }
    let server = redis_support::Server::start();
    let redis = server.store();
    let config = ProptestConfig {
        cases: 24,
        failure_persistence: None,
        ..ProptestConfig::default()
    };
    let case = std::cell::Cell::new(0u32);
    proptest!(config, |(steps in steps())| {
        case.set(case.get() + 1);
        let case = case.get();
        let tmp = tempfile::tempdir().expect("tempdir");
        let mut model = Model::default();
        for (keep, times) in steps {
            let policy = if keep { StorePolicy::KeepFaster } else { StorePolicy::LastWriteWins };
            let published = model.store(policy, &times);
            let check = |got: StoreOutcome, now: Option<Vec<f64>>| -> Result<(), TestCaseError> {
                prop_assert_eq!(got.is_stored(), published, "{:?} {:?}: {:?}", policy, times, got);
                let want = model.times.as_ref().expect("an entry");
                prop_assert!(now.as_ref().is_some_and(|n| same_times(n, want)), "{:?} != {:?}", now, want);
                Ok(())
            };
            let disk = cache(DiskCache::new(tmp.path())).with_store_policy(policy);
            check(store_round(&disk, 0, times.clone()), stored_times(&disk, 0))?;
            {
                // A key of its own per case on the one server.
                let redis = cache(&redis)
                    .with_schedule_format(&format!("model-{case}"))
                    .with_store_policy(policy);
                check(store_round(&redis, 0, times.clone()), stored_times(&redis, 0))?;
            }
        }
    });
}

/// A directory in front of a shared store: each level keeps the faster of its own entry and
/// the new one; the outcome is `Stored` if one level published, else the shared level's
/// `KeptExisting`.
#[test]
fn two_levels_apply_the_policy_each_to_its_own_entry() {
    use schedule_cache::{DiskCache, TwoLevel};
    if std::env::var(ID).is_ok() {
        return;
    }
    let tmp = tempfile::tempdir().expect("tempdir");
    let (near, far) = (
        DiskCache::new(tmp.path().join("near")),
        DiskCache::new(tmp.path().join("far")),
    );
    store_round(&cache(&far), 0, vec![1e-5]);
    store_round(&cache(&near), 0, vec![9e-5]);
    let both = cache(TwoLevel::new(&near, &far)).with_store_policy(StorePolicy::KeepFaster);
    assert_eq!(store_round(&both, 0, vec![5e-5]), StoreOutcome::Stored);
    assert_eq!(stored_times(&cache(&near), 0), Some(vec![5e-5]));
    assert_eq!(stored_times(&cache(&far), 0), Some(vec![1e-5]));
    assert_eq!(
        store_round(&both, 0, vec![6e-5]),
        StoreOutcome::KeptExisting(KeptExisting {
            existing_time: 1e-5,
            new_time: Some(6e-5)
        })
    );
    assert_eq!(stored_times(&cache(&near), 0), Some(vec![5e-5]));
    assert_eq!(stored_times(&cache(&far), 0), Some(vec![1e-5]));
}

/// A claim is indexed with its entry, so a regime change sweeps it: no claim of an old regime
/// can outlive its entry and keep a new regime's winner out.
#[test]
fn on_redis_a_regime_change_sweeps_the_claims() {
    use schedule_cache::admin::{CACHE_REGIME_VERSION, Space};
    if std::env::var(ID).is_ok() {
        return;
    }
    let server = redis_support::Server::start();
    let store = server.store();
    let mut raw = server.raw();
    let keep = cache(&store).with_store_policy(StorePolicy::KeepFaster);
    assert_eq!(store_round(&keep, 0, vec![1e-6]), StoreOutcome::Stored);
    let (code, _) = code(0);
    let key = keep.key(&code).expect("key").expect("timing");
    let claim = store.claim_key(Space::Schedule, &key);
    let exists = |raw: &mut redis::Connection| -> bool {
        redis::cmd("EXISTS").arg(&claim).query(raw).expect("EXISTS")
    };
    assert!(exists(&mut raw), "the store wrote no claim");
    let newer = server.store().with_regime(CACHE_REGIME_VERSION + 1);
    let bumped = cache(&newer).with_store_policy(StorePolicy::KeepFaster);
    assert_eq!(store_round(&bumped, 1, vec![1e-6]), StoreOutcome::Stored);
    assert!(!exists(&mut raw), "the claim outlived the regime change");
}
