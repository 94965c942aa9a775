//! Contention with real processes: 8 processes store and look up overlapping keys; in the
//! middle, each switches (when it notices a bump file) to a newer regime, so old-regime and
//! new-regime processes race on one directory. Afterwards: no entry written under the new
//! regime is lost, none written under the old one survives, and no process errored.
//!
//! The workers are this test binary itself, re-run with `KCACHE_DISK_CONTEND_ID` set.

mod disk_support;

use schedule_cache::Store as _;
use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use disk_support::{Children, DIGEST, Rng, decode_payload, key, payload};
use schedule_cache::admin::Space;
use schedule_cache::placement::PlacementEntry;
use schedule_cache::{DiskCache, Lookup, StoreOutcome};

const ID: &str = "KCACHE_DISK_CONTEND_ID";
const KEYS: u64 = 5;
const PROCESSES: u32 = 8;
const OPS_AFTER_BUMP: u32 = 12;

fn fail(code: i32, msg: String) -> ! {
    eprintln!("{msg}");
    std::process::exit(code)
}

/// The worker body; a no-op unless this process was spawned as a worker.
#[test]
fn contend_worker() {
    let Ok(id) = std::env::var(ID) else { return };
    let id: u32 = id.parse().expect("id");
    let dir = PathBuf::from(std::env::var("KCACHE_DISK_DIR").expect("dir"));
    let seed: u64 = std::env::var("KCACHE_DISK_SEED")
        .expect("seed")
        .parse()
        .expect("seed");
    let bump = dir.with_extension("bump");
    let mut rng = Rng::new(seed ^ u64::from(id) << 40);
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut regime = 1u32;
    let mut v2_stored = BTreeSet::new();
    let (mut seq, mut after) = (0u32, 0u32);
    while after < OPS_AFTER_BUMP {
        if regime == 1 && bump.exists() {
            regime = 2;
        }
        if Instant::now() > deadline {
            fail(6, format!("worker {id}: no bump before the deadline"));
        }
        let cache = DiskCache::new(&dir).with_regime(regime);
        seq += 1;
        // Old writers use keys k0..k4, new ones k2..k6: k0 and k1 are written only before the
        // bump, so only the sweep can remove them; k5 and k6 only after it.
        let ki = rng.below(KEYS) + if regime == 2 { 2 } else { 0 };
        let out = cache
            .store(
                Some(&key(&format!("k{ki}"))),
                &payload(id, regime, seq, seq % 7),
            )
            .unwrap_or_else(|e| fail(2, format!("worker {id}: store error {e}")));
        match out {
            StoreOutcome::Stored => {
                println!("@S {regime} {ki} {id} {seq}");
                if regime == 2 {
                    v2_stored.insert(ki);
                }
            }
            StoreOutcome::Refused(r) if regime == 1 => println!("@R {regime} {ki} {id} {seq} {r}"),
            other => fail(7, format!("worker {id}: new-regime store {other:?}")),
        }
        let kj = rng.below(KEYS + 2);
        match cache.probe::<PlacementEntry>(Some(&key(&format!("k{kj}"))), DIGEST) {
            Lookup::Hit(e) => match decode_payload(&e) {
                Some((_, r, _)) if r == regime => {}
                found => fail(3, format!("worker {id} (regime {regime}) read {found:?}")),
            },
            Lookup::Miss(m) if regime == 2 && v2_stored.contains(&kj) => {
                fail(4, format!("worker {id}: new-regime entry k{kj} lost: {m}"))
            }
            Lookup::Miss(_) => {}
            Lookup::Refused(_) if regime == 1 => {}
            other => fail(7, format!("worker {id}: new-regime lookup {other:?}")),
        }
        if regime == 2 {
            after += 1;
        }
    }
}

#[test]
fn eight_processes_race_through_a_regime_bump() {
    if std::env::var(ID).is_ok() {
        return;
    }
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("cache");
    let mut rng = Rng::from_env_or_clock();
    let seed = rng.next_u64();
    let mut workers = Children::default();
    for id in 0..PROCESSES {
        let child = Command::new(std::env::current_exe().expect("exe"))
            .args([
                "--exact",
                "contend_worker",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(ID, id.to_string())
            .env("KCACHE_DISK_DIR", &dir)
            .env("KCACHE_DISK_SEED", seed.to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn");
        workers.0.push(child);
    }
    // Bump once the old regime has written entries (or after a bounded wait).
    let waited = Instant::now();
    while waited.elapsed() < Duration::from_secs(10) {
        let n = fs::read_dir(&dir)
            .map(|rd| {
                rd.flatten()
                    .filter(|e| Space::of_file_name(&e.file_name().to_string_lossy()).is_some())
                    .count()
            })
            .unwrap_or(0);
        if n >= KEYS as usize {
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    std::thread::sleep(Duration::from_millis(rng.below(150)));
    fs::write(dir.with_extension("bump"), "").expect("bump");

    let mut v1_stored = 0;
    let mut v1_refused = 0;
    let mut v2: BTreeMap<u64, BTreeSet<(u32, u32)>> = BTreeMap::new();
    for c in std::mem::take(&mut workers.0) {
        let out = c.wait_with_output().expect("worker");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success(),
            "worker failed: {:?}\n{stderr}",
            out.status
        );
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            // The harness may print its own text before ours on the first line.
            let Some(record) = line.split('@').nth(1) else {
                continue;
            };
            let f: Vec<&str> = record.split_whitespace().collect();
            match f.as_slice() {
                ["S", "1", ..] => v1_stored += 1,
                ["R", "1", ..] => v1_refused += 1,
                ["R", ..] => panic!("unexpected record {record}"),
                ["S", "2", k, w, s] => {
                    v2.entry(k.parse().expect("k"))
                        .or_default()
                        .insert((w.parse().expect("w"), s.parse().expect("s")));
                }
                _ => {}
            }
        }
    }
    eprintln!(
        "old regime: {v1_stored} stored, {v1_refused} refused; new regime: {} stores",
        v2.values().map(BTreeSet::len).sum::<usize>()
    );
    assert!(
        v1_stored > 0,
        "the old regime must have written entries before the bump"
    );
    assert!(
        v2.keys().all(|&k| k >= 2),
        "keys k0 and k1 belong to the old regime only"
    );

    // Final state: exactly the keys the new regime wrote, each holding one of its writes.
    let mut present = BTreeSet::new();
    for item in fs::read_dir(&dir).expect("list").flatten() {
        let name = item.file_name().to_string_lossy().into_owned();
        let Some((Space::Placement, k)) = Space::of_file_name(&name) else {
            continue;
        };
        let ki: u64 = k
            .as_str()
            .rsplit('k')
            .next()
            .expect("k")
            .parse()
            .expect("index");
        let e: PlacementEntry =
            ron::from_str(&fs::read_to_string(item.path()).expect("read")).expect("parse");
        let (w, regime, s) = decode_payload(&e).expect("whole entry");
        assert_eq!(
            regime, 2,
            "an entry written before the bump survived: {name}"
        );
        assert!(
            v2.get(&ki).is_some_and(|set| set.contains(&(w, s))),
            "{name} holds a write nobody reported"
        );
        present.insert(ki);
    }
    let written: BTreeSet<u64> = v2.keys().copied().collect();
    assert_eq!(
        present, written,
        "every key written after the bump is present"
    );
    assert_eq!(
        fs::read_to_string(dir.join(cache_dir::STAMP_FILE)).expect("stamp"),
        "kcache-schedule-store 2\n"
    );
}
