//! The disk protocol in one process: no-op keys, directory creation, the regime stamp
//! transitions and refusals, the permanent lock file, observers and the staging sweep.

mod disk_support;

use schedule_cache::Store as _;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime};

use cache_dir::LOCK_FILE;
use cache_dir::STAMP_FILE;
use disk_support::{DIGEST, key, payload, snapshot, staging_names};
use schedule_cache::admin::{CACHE_REGIME_VERSION, DiskStats, Observer, Op, Outcome};
use schedule_cache::placement::PlacementEntry;
use schedule_cache::{CacheKey, DiskCache, Error, Lookup, MissReason, Refusal, StoreOutcome};

fn stamp(dir: &Path) -> String {
    fs::read_to_string(dir.join(STAMP_FILE)).expect("stamp")
}

#[test]
fn a_none_key_does_nothing_at_all() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("never");
    let e = payload(1, 2, 3, 0);
    let observer = Observer::new();
    let results = (
        schedule_cache::DiskCache::new(&dir)
            .with_observer(observer.clone())
            .store(None, &e)
            .expect("store"),
        schedule_cache::DiskCache::new(&dir)
            .with_observer(observer.clone())
            .lookup::<PlacementEntry>(None, DIGEST),
    );
    let events = observer.take();
    assert_eq!(results, (StoreOutcome::Skipped, None));
    assert!(!dir.exists(), "a None key must not create the directory");
    assert_eq!(events.len(), 2);
    assert!(
        events
            .iter()
            .all(|e| e.outcome == Outcome::Skipped && e.key.is_none())
    );

    // Not even on a directory a newer build owns: no lock, no stamp change.
    let owned = tmp.path().join("owned");
    fs::create_dir(&owned).expect("mkdir");
    fs::write(owned.join(STAMP_FILE), "999\n").expect("stamp");
    let before = snapshot(tmp.path());
    assert_eq!(
        schedule_cache::DiskCache::new(&owned)
            .store(None, &e)
            .expect("store"),
        StoreOutcome::Skipped
    );
    assert_eq!(snapshot(tmp.path()), before);
    assert!(!owned.join(LOCK_FILE).exists());
}

#[test]
fn store_creates_parents_and_lookup_hits() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("a/b/c");
    let k = key("cc-n1");
    let e = payload(4, 5, 6, 10);
    assert_eq!(
        schedule_cache::DiskCache::new(&dir)
            .store(Some(&k), &e)
            .expect("store"),
        StoreOutcome::Stored
    );
    assert_eq!(
        stamp(&dir),
        format!(
            "{} {CACHE_REGIME_VERSION}\n",
            schedule_cache::admin::STORE_KIND
        )
    );
    assert!(dir.join(LOCK_FILE).is_file());
    assert!(dir.join(format!("{k}.placement.ron")).is_file());
    let observer = Observer::new();
    let found = schedule_cache::DiskCache::new(&dir)
        .with_observer(observer.clone())
        .lookup(Some(&k), DIGEST);
    let events = observer.take();
    assert_eq!(found, Some(e));
    assert_eq!(events[0].op, Op::Lookup);
    assert_eq!(events[0].outcome, Outcome::Hit);
    assert_eq!(events[0].key.as_deref(), Some(k.as_str()));
    assert!(
        staging_names(&dir).is_empty(),
        "a completed write leaves no staging"
    );
}

/// A lookup of another digest than the entry's misses and says why (moved from the private
/// `disk` module's docs, which no reader saw rendered).
#[test]
fn a_lookup_of_another_digest_misses_and_says_so() -> Result<(), Box<dyn std::error::Error>> {
    use schedule_cache::placement::{Direction, Flip, Shipped};
    let tmp = tempfile::tempdir()?;
    let observer = Observer::new();
    let disk = DiskCache::new(tmp.path().join("cache")).with_observer(observer.clone());
    let digest = "0f1e2d";
    let key = CacheKey::new("0f1e2d-cc-n1-c2-p3-d4-tisolated")?;
    let flips = vec![Flip {
        node: 3,
        direction: Direction::Inline,
    }];
    let entry = PlacementEntry::new(digest, flips, Shipped::Refined);

    assert_eq!(disk.store(Some(&key), &entry)?, StoreOutcome::Stored);
    observer.take();
    let found = disk.lookup::<PlacementEntry>(Some(&key), "other");
    let events = observer.take();
    assert_eq!(found, None);
    assert!(matches!(
        events[0].outcome,
        Outcome::Miss(MissReason::DigestMismatch { .. })
    ));
    assert_eq!(disk.lookup(Some(&key), digest), Some(entry));
    Ok(())
}

#[test]
fn last_write_wins() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let k = key("lww");
    for i in 0..3 {
        schedule_cache::DiskCache::new(tmp.path())
            .store(Some(&k), &payload(i, 0, 0, i))
            .expect("store");
    }
    assert_eq!(
        schedule_cache::DiskCache::new(tmp.path()).lookup(Some(&k), DIGEST),
        Some(payload(2, 0, 0, 2))
    );
}

#[test]
fn lookup_never_creates_the_directory_and_explains_the_miss() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("absent");
    let k = key("x");
    let observer = Observer::new();
    let found = schedule_cache::DiskCache::new(&dir)
        .with_observer(observer.clone())
        .lookup::<PlacementEntry>(Some(&k), DIGEST);
    let events = observer.take();
    assert_eq!(found, None);
    assert_eq!(events[0].outcome, Outcome::Miss(MissReason::NoDirectory));
    assert!(!dir.exists());

    fs::create_dir(&dir).expect("mkdir");
    let probe = DiskCache::new(&dir).probe::<PlacementEntry>(Some(&k), DIGEST);
    assert_eq!(
        probe,
        Lookup::Miss(MissReason::NoEntry {
            same_digest: vec![]
        })
    );
}

/// A directory without a stamp that holds files named like entries is no cache of this
/// store (a user's directory given as the cache): refused, nothing deleted, not stamped.
#[test]
fn an_absent_stamp_beside_entry_named_files_deletes_nothing() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    let names = [
        "settings.ron",
        "k2.placement.ron",
        "notes.keys",
        "README.txt",
        ".hidden.ron",
        "not.a.key.ron",
    ];
    for name in names {
        fs::write(dir.join(name), "x").expect("write");
    }
    fs::create_dir(dir.join("subdir.ron")).expect("mkdir");
    let k = CacheKey::new("k2").expect("key");
    let observer = Observer::new();
    let found = schedule_cache::DiskCache::new(dir)
        .with_observer(observer.clone())
        .lookup::<PlacementEntry>(Some(&k), "k2");
    let events = observer.take();
    assert_eq!(found, None);
    assert!(
        matches!(&events[0].outcome, Outcome::Refused(r) if r.to_string().contains("no regime stamp")),
        "{:?}",
        events[0].outcome
    );
    let _ = DiskCache::new(dir)
        .with_observer(observer.clone())
        .store(Some(&key("s")), &payload(1, 1, 1, 1));
    let events = observer.take();
    assert!(
        matches!(events[0].outcome, Outcome::Refused(_)),
        "{events:?}"
    );
    for kept in names.iter().chain(&["subdir.ron"]) {
        assert!(dir.join(kept).exists(), "{kept} must survive");
    }
    assert!(!dir.join(STAMP_FILE).exists());
    assert!(
        !dir.join(LOCK_FILE).exists(),
        "a refused directory gets no lock file either"
    );
}

/// A directory without a stamp and without entry-named files (new, or holding only other
/// files) is adopted: stamped, nothing deleted.
#[test]
fn an_absent_stamp_beside_other_files_is_adopted() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    for name in ["README.txt", ".hidden.ron", "not.a.key.ron"] {
        fs::write(dir.join(name), "x").expect("write");
    }
    let k = key("s");
    DiskCache::new(dir)
        .store(Some(&k), &payload(1, 1, 1, 1))
        .expect("store");
    for kept in ["README.txt", ".hidden.ron", "not.a.key.ron"] {
        assert!(dir.join(kept).exists(), "{kept} must survive");
    }
    assert_eq!(
        stamp(dir),
        format!(
            "{} {CACHE_REGIME_VERSION}\n",
            schedule_cache::admin::STORE_KIND
        )
    );
}

/// An older stamp sweeps every entry of any version, and nothing else.
#[test]
fn an_older_stamp_sweeps_every_entry_and_nothing_else() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    fs::write(dir.join(STAMP_FILE), "kcache-schedule-store 1\n").expect("stamp");
    for name in [
        "k1.ron",
        "k2.placement.ron",
        "k3.keys",
        "README.txt",
        ".hidden.ron",
        "not.a.key.ron",
    ] {
        fs::write(dir.join(name), "x").expect("write");
    }
    fs::create_dir(dir.join("subdir.ron")).expect("mkdir");
    let k = CacheKey::new("k2").expect("key");
    let found = schedule_cache::DiskCache::new(dir).lookup::<PlacementEntry>(Some(&k), "k2");
    assert_eq!(found, None);
    for gone in ["k1.ron", "k2.placement.ron", "k3.keys"] {
        assert!(
            !dir.join(gone).exists(),
            "{gone} is an entry of an older regime"
        );
    }
    for kept in ["README.txt", ".hidden.ron", "not.a.key.ron", "subdir.ron"] {
        assert!(
            dir.join(kept).exists(),
            "{kept} is not an entry and must survive"
        );
    }
    assert_eq!(
        stamp(dir),
        format!(
            "{} {CACHE_REGIME_VERSION}\n",
            schedule_cache::admin::STORE_KIND
        )
    );
}

#[test]
fn an_older_stamp_sweeps_placement_entries_too() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let old = DiskCache::new(tmp.path()).with_regime(1);
    let observer = Observer::new();
    let new = DiskCache::new(tmp.path())
        .with_regime(2)
        .with_observer(observer.clone());
    let (k1, k2) = (key("one"), key("two"));
    old.store(Some(&k1), &payload(1, 1, 1, 1)).expect("store");
    old.store(Some(&k2), &payload(2, 2, 2, 2)).expect("store");
    assert_eq!(stamp(tmp.path()), "kcache-schedule-store 1\n");
    let found = new.lookup::<PlacementEntry>(Some(&k1), DIGEST);
    let events = observer.take();
    assert_eq!(found, None);
    assert_eq!(
        events[0].outcome,
        Outcome::Miss(MissReason::NoEntry {
            same_digest: vec![]
        })
    );
    assert_eq!(stamp(tmp.path()), "kcache-schedule-store 2\n");
    assert!(!tmp.path().join(format!("{k2}.placement.ron")).exists());
    // An entry written after the transition survives later opens at the same regime.
    new.store(Some(&k2), &payload(3, 3, 3, 3)).expect("store");
    assert_eq!(new.lookup(Some(&k2), DIGEST), Some(payload(3, 3, 3, 3)));
}

#[test]
fn newer_or_malformed_stamps_refuse_and_touch_nothing() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("c");
    let k = key("k");
    DiskCache::new(&dir)
        .with_regime(5)
        .store(Some(&k), &payload(1, 2, 3, 4))
        .expect("store");
    for (content, want) in [
        ("5\n", Refusal::NewerRegime { found: 5, ours: 4 }),
        (
            "five\n",
            Refusal::MalformedStamp {
                content: "five\n".into(),
            },
        ),
    ] {
        fs::write(dir.join(STAMP_FILE), content).expect("stamp");
        let observer = Observer::new();
        let old = DiskCache::new(&dir)
            .with_regime(4)
            .with_observer(observer.clone());
        let before = snapshot(tmp.path());
        let out = (
            old.store(Some(&k), &payload(9, 9, 9, 9)).expect("store"),
            old.probe::<PlacementEntry>(Some(&k), DIGEST),
        );
        let events = observer.take();
        assert_eq!(out.0, StoreOutcome::Refused(want.clone()));
        assert_eq!(out.1, Lookup::Refused(want.clone()));
        assert_eq!(events[1].outcome, Outcome::Refused(want));
        assert_eq!(snapshot(tmp.path()), before, "a refusal must touch nothing");
    }
}

#[test]
fn caller_mistakes_are_typed_errors_and_write_nothing() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("c");
    let other = CacheKey::new("ffff-cc").expect("key");
    let err = schedule_cache::DiskCache::new(&dir)
        .store(Some(&other), &payload(1, 1, 1, 1))
        .expect_err("mismatch");
    assert!(matches!(err, Error::KeyDigestMismatch { .. }), "{err}");
    // A key that merely starts with the digest's characters is not prefixed by the digest.
    let glued = CacheKey::new(&format!("{DIGEST}ff-cc")).expect("key");
    assert!(
        schedule_cache::DiskCache::new(&dir)
            .store(Some(&glued), &payload(1, 1, 1, 1))
            .is_err()
    );
    let mut stale = payload(1, 1, 1, 1);
    stale.version = 0;
    let err = schedule_cache::DiskCache::new(&dir)
        .store(Some(&key("v")), &stale)
        .expect_err("version");
    assert!(matches!(err, Error::EntryVersion { found: 0, .. }), "{err}");
    assert!(!dir.exists());
}

#[test]
fn the_lock_file_is_permanent() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    let k = key("k");
    schedule_cache::DiskCache::new(dir)
        .store(Some(&k), &payload(1, 1, 1, 1))
        .expect("store");
    let ino = fs::metadata(dir.join(LOCK_FILE)).expect("lock").ino();
    DiskCache::new(dir)
        .with_regime(CACHE_REGIME_VERSION + 1)
        .store(Some(&k), &payload(2, 2, 2, 2))
        .expect("store");
    DiskCache::new(dir).gc(Some(Duration::ZERO)).expect("gc");
    let _ = schedule_cache::DiskCache::new(dir).lookup::<PlacementEntry>(Some(&k), DIGEST);
    assert_eq!(fs::metadata(dir.join(LOCK_FILE)).expect("lock").ino(), ino);
}

/// The original's race test: a process holds the lock through a regime transition; a
/// concurrent writer blocks on the lock and its entry survives the transition.
#[test]
fn a_writer_blocks_behind_a_transition_and_its_entry_survives() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    let k_old = key("old");
    let k_new = key("new");
    DiskCache::new(dir)
        .with_regime(1)
        .store(Some(&k_old), &payload(1, 1, 1, 1))
        .expect("store");

    // Play the transitioning process by hand: an independent open of the lock file, locked.
    let lock = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(dir.join(LOCK_FILE))
        .expect("open lock");
    lock.lock().expect("lock");
    let done = AtomicBool::new(false);
    std::thread::scope(|s| {
        let writer = s.spawn(|| {
            let out = DiskCache::new(dir)
                .with_regime(2)
                .store(Some(&k_new), &payload(2, 2, 2, 2))
                .expect("store");
            done.store(true, Ordering::SeqCst);
            out
        });
        std::thread::sleep(Duration::from_millis(200));
        assert!(
            !done.load(Ordering::SeqCst),
            "the writer must wait for the lock"
        );
        // The transition: sweep every entry, then publish the new stamp, then release.
        fs::remove_file(dir.join(format!("{k_old}.placement.ron"))).expect("sweep");
        fs::write(dir.join(STAMP_FILE), "kcache-schedule-store 2\n").expect("stamp");
        lock.unlock().expect("unlock");
        assert_eq!(writer.join().expect("writer"), StoreOutcome::Stored);
    });
    let v2 = DiskCache::new(dir).with_regime(2);
    assert_eq!(v2.lookup(Some(&k_new), DIGEST), Some(payload(2, 2, 2, 2)));
    assert_eq!(v2.lookup::<PlacementEntry>(Some(&k_old), DIGEST), None);
}

#[test]
fn stale_staging_is_swept_on_first_open_fresh_staging_is_kept() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    let old_dir = dir.join(".atomicwriteDEAD01");
    let fresh_dir = dir.join(".atomicwriteLIVE01");
    for d in [&old_dir, &fresh_dir] {
        fs::create_dir(d).expect("mkdir");
        fs::write(d.join("tmpfile.tmp"), b"half an entr").expect("write");
    }
    let two_hours_ago = SystemTime::now() - Duration::from_secs(7200);
    for p in [old_dir.join("tmpfile.tmp"), old_dir.clone()] {
        fs::File::open(&p)
            .expect("open")
            .set_modified(two_hours_ago)
            .expect("set mtime");
    }
    let _ = schedule_cache::DiskCache::new(dir).lookup::<PlacementEntry>(Some(&key("k")), DIGEST);
    assert!(
        !old_dir.exists(),
        "a staging dir idle for two hours is crash-stale"
    );
    assert!(
        fresh_dir.exists(),
        "a fresh staging dir may belong to a live writer"
    );
    // The explicit sweep ignores the once-per-process rule.
    let n = DiskCache::new(dir)
        .with_stale_staging_after(Duration::ZERO)
        .sweep_stale_staging()
        .expect("sweep");
    assert_eq!(n, 1);
    assert!(staging_names(dir).is_empty());
}

#[test]
fn gc_removes_old_entries_and_stale_staging_only() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    let (k1, k2) = (key("a"), key("b"));
    schedule_cache::DiskCache::new(dir)
        .store(Some(&k1), &payload(1, 1, 1, 1))
        .expect("store");
    schedule_cache::DiskCache::new(dir)
        .store(Some(&k2), &payload(2, 2, 2, 2))
        .expect("store");
    let path1 = dir.join(format!("{k1}.placement.ron"));
    fs::File::options()
        .write(true)
        .open(&path1)
        .expect("open")
        .set_modified(SystemTime::now() - Duration::from_secs(3 * 86400))
        .expect("mtime");
    let report = DiskCache::new(dir)
        .gc(Some(Duration::from_secs(86400)))
        .expect("gc");
    assert_eq!(report.entries_removed, 1);
    assert!(!path1.exists());
    assert_eq!(
        schedule_cache::DiskCache::new(dir).lookup(Some(&k2), DIGEST),
        Some(payload(2, 2, 2, 2))
    );
    assert!(dir.join(LOCK_FILE).exists() && dir.join(STAMP_FILE).exists());
}

#[test]
fn stats_count_outcomes() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let observer = Observer::new();
    let before = observer.stats();
    let k = key("s");
    let disk = schedule_cache::DiskCache::new(tmp.path()).with_observer(observer.clone());
    disk.store(Some(&k), &payload(1, 1, 1, 1)).expect("store");
    let _ = disk.lookup::<PlacementEntry>(Some(&k), DIGEST);
    let _ = disk.lookup::<PlacementEntry>(Some(&k), "other");
    // Another store of the same directory without the observer is not counted.
    let _ = schedule_cache::DiskCache::new(tmp.path()).lookup::<PlacementEntry>(Some(&k), DIGEST);
    let after = observer.stats();
    assert!(after.stored > before.stored);
    assert!(after.hits > before.hits);
    assert!(after.misses > before.misses);
    // The counts are this observer's own, so they are exact.
    assert_eq!(
        after,
        DiskStats {
            stored: 1,
            hits: 1,
            misses: 1,
            ..DiskStats::default()
        }
    );
}

#[test]
fn a_miss_names_the_keys_the_same_code_is_stored_under() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    let isolated = key("cc-n1-c2-p3-d4-tisolated");
    let other_code = CacheKey::new("77aa-cc-n1-c2-p3-d4-tqueued").expect("key");
    schedule_cache::DiskCache::new(dir)
        .store(Some(&isolated), &payload(1, 1, 1, 1))
        .expect("store");
    let mut foreign = payload(2, 2, 2, 2);
    foreign.digest = "77aa".into();
    schedule_cache::DiskCache::new(dir)
        .store(Some(&other_code), &foreign)
        .expect("store");
    let queued = key("cc-n1-c2-p3-d4-tqueued");
    let got = DiskCache::new(dir).probe::<PlacementEntry>(Some(&queued), DIGEST);
    let Lookup::Miss(reason) = got else {
        panic!("{got:?}")
    };
    assert_eq!(
        reason,
        MissReason::NoEntry {
            same_digest: vec![isolated.as_str().to_owned()]
        }
    );
    assert!(reason.to_string().contains("tisolated"), "{reason}");
}

/// A regime change deletes every entry of every version, whatever the key shape or length
/// of the version that wrote it (regime 1's `digest-backend-n…` keys, regime 2's 185-byte
/// keys, keys longer than the 200-byte limit), in both spaces, and nothing else.
#[test]
fn a_regime_change_sweeps_entries_of_every_version() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    let v1 = format!("{}-cc-n1a2b3c4-c5d6e7f8-p4-dx86-tisolated", "ab".repeat(32));
    let v2 = format!(
        "{}-{}-b0a1b2c_f3d4e5f_n000000_c111111_p222222_d333333_t444444",
        "cd".repeat(32),
        "ef".repeat(32)
    );
    let long = "9".repeat(240);
    let entries = [
        format!("{v1}.ron"),
        format!("{v1}.placement.ron"),
        format!("{v2}.ron"),
        format!("{v2}.placement.ron"),
        format!("{long}.ron"),
        "x.ron".to_owned(),
    ];
    let foreign = [
        "not.a.key.ron",
        ".hidden.ron",
        "notes.txt",
        ".ron",
        "a b.ron",
    ];
    for name in entries.iter().map(String::as_str).chain(foreign) {
        fs::write(dir.join(name), "old").expect("write");
    }
    fs::write(dir.join(STAMP_FILE), "kcache-schedule-store 1\n").expect("stamp");
    let k = key("any");
    assert_eq!(
        schedule_cache::DiskCache::new(dir).lookup::<PlacementEntry>(Some(&k), DIGEST),
        None
    );
    assert_eq!(
        stamp(dir),
        format!(
            "{} {CACHE_REGIME_VERSION}\n",
            schedule_cache::admin::STORE_KIND
        )
    );
    for name in &entries {
        assert!(
            !dir.join(name).exists(),
            "{name} is an entry of an older regime and must go"
        );
    }
    for name in foreign {
        assert!(
            dir.join(name).exists(),
            "{name} is foreign and must survive"
        );
    }
}

mod model {
    //! The protocol against a model: a random sequence of stores and lookups by processes of
    //! random regimes behaves like a map that is cleared whenever a newer regime first opens
    //! the directory, and that refuses every regime older than the newest seen.
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    #[derive(Clone, Debug)]
    enum Step {
        Store { regime: u32, key: u8, value: u32 },
        Lookup { regime: u32, key: u8 },
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            (1..4u32, 0..4u8, any::<u32>()).prop_map(|(regime, key, value)| Step::Store {
                regime,
                key,
                value
            }),
            (1..4u32, 0..4u8).prop_map(|(regime, key)| Step::Lookup { regime, key }),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(24))]

        #[test]
        fn the_store_behaves_like_a_regime_scoped_map(steps in proptest::collection::vec(step(), 1..14)) {
            let tmp = tempfile::tempdir().expect("tempdir");
            let dir = tmp.path().join("c");
            let mut stamp: Option<u32> = None;
            let mut map: BTreeMap<u8, u32> = BTreeMap::new();
            let k = |i: u8| key(&format!("m{i}"));
            for s in steps {
                let (regime, creates) = match s {
                    Step::Store { regime, .. } => (regime, true),
                    Step::Lookup { regime, .. } => (regime, dir.exists()),
                };
                let cache = DiskCache::new(&dir).with_regime(regime);
                let refused = stamp.is_some_and(|v| v > regime);
                if creates && !refused && stamp != Some(regime) {
                    stamp = Some(regime);
                    map.clear();
                }
                match s {
                    Step::Store { key: i, value, .. } => {
                        let out = cache.store(Some(&k(i)), &payload(value, 0, 0, 0)).expect("store");
                        if refused {
                            prop_assert!(matches!(out, StoreOutcome::Refused(Refusal::NewerRegime { .. })), "{:?}", out);
                        } else {
                            prop_assert_eq!(out, StoreOutcome::Stored);
                            map.insert(i, value);
                        }
                    }
                    Step::Lookup { key: i, .. } => {
                        let got = cache.probe::<PlacementEntry>(Some(&k(i)), DIGEST);
                        match (refused, map.get(&i)) {
                            (true, _) => prop_assert!(matches!(got, Lookup::Refused(Refusal::NewerRegime { .. })), "{:?}", got),
                            (false, Some(&v)) => prop_assert_eq!(got, Lookup::Hit(payload(v, 0, 0, 0))),
                            (false, None) => prop_assert!(matches!(got, Lookup::Miss(_)), "{:?}", got),
                        }
                    }
                }
                if dir.exists() {
                    let want = stamp.map(|v| format!("{} {v}\n", schedule_cache::admin::STORE_KIND));
                    prop_assert_eq!(fs::read_to_string(dir.join(STAMP_FILE)).ok(), want);
                }
            }
        }
    }
}

mod log_events {
    //! A refusal is reported as a `tracing` warning naming the directory, key and reason.
    use super::*;
    use std::sync::{Arc, Mutex};
    use tracing::field::{Field, Visit};
    use tracing::span::{Attributes, Id, Record};
    use tracing::{Event, Level, Metadata, Subscriber};

    #[derive(Clone, Default)]
    struct Collect(Arc<Mutex<Vec<(Level, String)>>>);

    struct Fields(String);
    impl Visit for Fields {
        fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
            self.0.push_str(&format!("{}={:?} ", field.name(), value));
        }
    }

    impl Subscriber for Collect {
        fn enabled(&self, _: &Metadata<'_>) -> bool {
            true
        }
        fn new_span(&self, _: &Attributes<'_>) -> Id {
            Id::from_u64(1)
        }
        fn record(&self, _: &Id, _: &Record<'_>) {}
        fn record_follows_from(&self, _: &Id, _: &Id) {}
        fn event(&self, event: &Event<'_>) {
            let mut f = Fields(String::new());
            event.record(&mut f);
            self.0
                .lock()
                .expect("log")
                .push((*event.metadata().level(), f.0));
        }
        fn enter(&self, _: &Id) {}
        fn exit(&self, _: &Id) {}
    }

    #[test]
    fn a_refusal_is_a_warning_event() {
        let tmp = tempfile::tempdir().expect("tempdir");
        fs::write(tmp.path().join(STAMP_FILE), "9\n").expect("stamp");
        let log = Collect::default();
        let k = key("logged");
        let out = tracing::subscriber::with_default(log.clone(), || {
            schedule_cache::DiskCache::new(tmp.path())
                .store(Some(&k), &payload(1, 1, 1, 1))
                .expect("store")
        });
        assert!(matches!(out, StoreOutcome::Refused(_)));
        let events = log.0.lock().expect("log");
        let warning = events
            .iter()
            .find(|(level, _)| *level == Level::WARN)
            .expect("a warning");
        assert!(warning.1.contains(k.as_str()), "{}", warning.1);
        assert!(warning.1.contains("newer regime 9"), "{}", warning.1);
    }
}
