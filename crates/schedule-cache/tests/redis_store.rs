//! The Redis store against a real `redis-server` on 127.0.0.1 (one private server per test):
//! round trips, bad stored values, the regime protocol between clients, an unreachable or
//! silent server, the server killed mid-run, and back-fill in two-level mode.
//!
//! Without a `redis-server` binary each test fails, saying how to install one
//! (`cargo xtask test` installs it when missing and it may).
#![cfg(feature = "redis")]

mod redis_support;

use std::collections::BTreeSet;
use std::net::TcpListener;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::{Duration, Instant};

use redis::Commands;
use redis_support::{DIGEST, ServerExt, key, payload};
use schedule_cache::admin::{CACHE_REGIME_VERSION, Observer, Op, Outcome, Space};
use schedule_cache::placement::{PLACEMENT_ENTRY_VERSION, PlacementEntry};
use schedule_cache::{
    CacheKey, DiskCache, Error, Lookup, MissReason, RedisStore, Refusal, ScheduleEntry, Store,
    StoreOutcome, TwoLevel,
};

/// Every key on the server, sorted.
fn all_keys(con: &mut redis::Connection) -> BTreeSet<String> {
    con.keys::<_, Vec<String>>("*")
        .expect("KEYS")
        .into_iter()
        .collect()
}

#[test]
fn store_lookup_round_trip_in_both_spaces() {
    let server = redis_support::Server::start();
    let observer = Observer::new();
    let store = server.store().with_observer(observer.clone());
    let k = key("cc-n1");
    let entry = payload(1, 1, 40);
    let out = store.store(Some(&k), &entry).expect("store");
    let events = observer.take();
    assert_eq!(out, StoreOutcome::Stored);
    assert_eq!(events.len(), 1);
    assert_eq!(
        (events[0].op, &events[0].outcome),
        (Op::Store, &Outcome::Stored)
    );
    assert_eq!(events[0].dir.to_str(), Some(store.location().as_str()));

    // Another client (another connection) reads it back; the bytes are the RON text the
    // directory store would write.
    let other = server.store();
    assert_eq!(other.lookup(Some(&k), DIGEST), Some(entry.clone()));
    let tmp = tempfile::tempdir().expect("tempdir");
    DiskCache::new(tmp.path())
        .store(Some(&k), &entry)
        .expect("disk store");
    let on_disk = std::fs::read(tmp.path().join(Space::Placement.file_name(&k))).expect("read");
    let in_redis: Vec<u8> = server
        .raw()
        .get(store.entry_key(Space::Placement, &k))
        .expect("GET");
    assert_eq!(in_redis, on_disk);
    let stamp: String = server.raw().get(store.stamp_key()).expect("GET stamp");
    assert_eq!(stamp, format!("{CACHE_REGIME_VERSION}\n"));

    // The same key in the schedule space is another entry: absent until stored.
    let missing = other.probe::<ScheduleEntry<ron::Value>>(Some(&k), DIGEST);
    assert!(
        matches!(missing, Lookup::Miss(MissReason::NoEntry { .. })),
        "{missing:?}"
    );

    // Last write wins; a `None` key does nothing at all.
    let newer = payload(2, 7, 3);
    assert_eq!(
        other.store(Some(&k), &newer).expect("store"),
        StoreOutcome::Stored
    );
    assert_eq!(store.lookup(Some(&k), DIGEST), Some(newer.clone()));
    let before = all_keys(&mut server.raw());
    assert_eq!(
        store.store(None, &newer).expect("skip"),
        StoreOutcome::Skipped
    );
    assert_eq!(store.probe::<PlacementEntry>(None, DIGEST), Lookup::Skipped);
    assert_eq!(all_keys(&mut server.raw()), before);
}

#[test]
fn misses_are_explained_and_bad_values_are_misses() {
    let server = redis_support::Server::start();
    let store = server.store();
    let mut raw = server.raw();
    store
        .store(Some(&key("cc-n1")), &payload(1, 1, 5))
        .expect("store");

    // Same code under another numerics tag: the miss names the sibling key.
    match store.probe::<PlacementEntry>(Some(&key("cc-n2")), DIGEST) {
        Lookup::Miss(MissReason::NoEntry { same_digest }) => {
            assert_eq!(same_digest, vec![key("cc-n1").as_str().to_owned()]);
        }
        other => panic!("{other:?}"),
    }
    // Looked up for another digest: a digest mismatch, never a hit.
    assert!(matches!(
        store.probe::<PlacementEntry>(Some(&key("cc-n1")), "5eed0000cc"),
        Lookup::Miss(MissReason::DigestMismatch { .. })
    ));

    let good = ron::ser::to_string_pretty(&payload(3, 3, 9), ron::ser::PrettyConfig::default())
        .expect("encode");
    let wrong_version = good.replacen(
        &format!("version: {PLACEMENT_ENTRY_VERSION}"),
        "version: 99",
        1,
    );
    assert_ne!(wrong_version, good);
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("empty", Vec::new()),
        ("truncated", good.as_bytes()[..good.len() / 2].to_vec()),
        ("garbage", b"\xff\x00not ron at all(((".to_vec()),
        ("wrong version", wrong_version.into_bytes()),
    ];
    for (name, bytes) in cases {
        let k = key(&format!("bad-{}", name.replace(' ', "_")));
        let _: () = raw
            .set(store.entry_key(Space::Placement, &k), bytes)
            .expect("SET");
        let found = store.probe::<PlacementEntry>(Some(&k), DIGEST);
        match (name, &found) {
            ("wrong version", Lookup::Miss(MissReason::VersionMismatch { found: 99, .. })) => {}
            ("wrong version", _) => panic!("{name}: {found:?}"),
            (_, Lookup::Miss(MissReason::Unparsable { .. })) => {}
            _ => panic!("{name}: {found:?}"),
        }
    }
    // A value of the wrong Redis type at the entry's name: unreadable, a miss.
    let k = key("bad-hash");
    let _: () = raw
        .hset(store.entry_key(Space::Placement, &k), "f", "v")
        .expect("HSET");
    assert!(matches!(
        store.probe::<PlacementEntry>(Some(&k), DIGEST),
        Lookup::Miss(MissReason::Unreadable { .. })
    ));
    // Caller mistakes are typed errors and write nothing.
    let before = all_keys(&mut raw);
    assert!(matches!(
        store.store(
            Some(&CacheKey::new("ffff-cc").expect("key")),
            &payload(1, 1, 1)
        ),
        Err(Error::KeyDigestMismatch { .. })
    ));
    let mut old = payload(1, 1, 1);
    old.version = PLACEMENT_ENTRY_VERSION + 1;
    assert!(matches!(
        store.store(Some(&key("cc")), &old),
        Err(Error::EntryVersion { .. })
    ));
    assert_eq!(all_keys(&mut raw), before);
}

#[test]
fn a_regime_bump_by_one_client_invalidates_for_another() {
    let server = redis_support::Server::start();
    let r = CACHE_REGIME_VERSION;
    let writer = server.store().with_regime(r);
    let reader = server.store().with_regime(r);
    let upgraded = server.store().with_regime(r + 1);
    let mut raw = server.raw();

    writer
        .store(Some(&key("old")), &payload(1, 1, 4))
        .expect("store");
    assert!(
        reader
            .lookup::<PlacementEntry>(Some(&key("old")), DIGEST)
            .is_some()
    );

    // The upgraded client's first operation sweeps the old regime's entries, then stamps.
    assert_eq!(
        upgraded
            .store(Some(&key("new")), &payload(2, 2, 4))
            .expect("store"),
        StoreOutcome::Stored
    );
    let stamp: String = raw.get(upgraded.stamp_key()).expect("GET");
    assert_eq!(stamp, format!("{}\n", r + 1));
    assert_eq!(
        all_keys(&mut raw),
        [
            upgraded.stamp_key(),
            upgraded.index_key(),
            upgraded.entry_key(Space::Placement, &key("new")),
            upgraded.digest_key(Space::Placement, DIGEST),
        ]
        .into_iter()
        .collect()
    );

    // The old client is now refused (a miss), and its stores change nothing.
    let before = all_keys(&mut raw);
    assert_eq!(
        reader.probe::<PlacementEntry>(Some(&key("new")), DIGEST),
        Lookup::Refused(Refusal::NewerRegime {
            found: r + 1,
            ours: r
        })
    );
    assert!(matches!(
        writer
            .store(Some(&key("old")), &payload(1, 2, 4))
            .expect("store"),
        StoreOutcome::Refused(Refusal::NewerRegime { .. })
    ));
    assert_eq!(all_keys(&mut raw), before);
    assert_eq!(
        upgraded.probe::<PlacementEntry>(Some(&key("old")), DIGEST),
        Lookup::Miss(MissReason::NoEntry {
            same_digest: vec![key("new").as_str().to_owned()]
        })
    );
    assert_eq!(
        upgraded.lookup(Some(&key("new")), DIGEST),
        Some(payload(2, 2, 4))
    );

    // A malformed stamp refuses everyone and changes nothing.
    let _: () = raw.set(upgraded.stamp_key(), "2.0").expect("SET");
    let before = all_keys(&mut raw);
    for client in [&writer, &upgraded] {
        match client.probe::<PlacementEntry>(Some(&key("new")), DIGEST) {
            Lookup::Refused(Refusal::MalformedStamp { content }) => assert_eq!(content, "2.0"),
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            client
                .store(Some(&key("new")), &payload(3, 3, 3))
                .expect("store"),
            StoreOutcome::Refused(Refusal::MalformedStamp { .. })
        ));
    }
    assert_eq!(all_keys(&mut raw), before);
    let stamp: String = raw.get(upgraded.stamp_key()).expect("GET");
    assert_eq!(stamp, "2.0");

    // Prefixes are separate caches: another prefix on the same server is unaffected.
    let other = server.store().with_prefix("other").expect("prefix");
    assert_eq!(
        other
            .store(Some(&key("new")), &payload(4, 4, 4))
            .expect("store"),
        StoreOutcome::Stored
    );
    assert_eq!(
        other.lookup(Some(&key("new")), DIGEST),
        Some(payload(4, 4, 4))
    );
}

#[test]
fn a_server_killed_mid_run_turns_operations_into_refusals_then_recovers() {
    let mut server = redis_support::Server::start();
    let observer = Observer::new();
    let store = server.store().with_observer(observer.clone());
    let k = key("live");
    assert_eq!(
        store.store(Some(&k), &payload(1, 1, 8)).expect("store"),
        StoreOutcome::Stored
    );
    let stats_before = observer.stats();

    let killed = AtomicBool::new(false);
    let live_hits = AtomicU32::new(0);
    let (hits_before, refusals_after) = std::thread::scope(|s| {
        let worker = s.spawn(|| {
            let (mut hits_before, mut refusals_after) = (0u32, 0u32);
            let deadline = Instant::now() + Duration::from_secs(20);
            while refusals_after < 20 && Instant::now() < deadline {
                let was_killed = killed.load(Ordering::SeqCst);
                observer.take();
                let found = store.probe::<PlacementEntry>(Some(&k), DIGEST);
                let events = observer.take();
                let stored = store
                    .store(Some(&k), &payload(1, 1, 8))
                    .expect("no caller error");
                assert_eq!(events.len(), 1);
                match found {
                    Lookup::Hit(e) => {
                        assert_eq!(e, payload(1, 1, 8));
                        assert!(!was_killed, "a hit from a killed server");
                        hits_before += 1;
                        live_hits.fetch_add(1, Ordering::SeqCst);
                    }
                    Lookup::Refused(Refusal::Io { .. }) if was_killed => {
                        assert!(matches!(events[0].outcome, Outcome::Refused(_)));
                        assert!(matches!(stored, StoreOutcome::Refused(Refusal::Io { .. })));
                        refusals_after += 1;
                    }
                    // In flight while the kill happened.
                    Lookup::Refused(Refusal::Io { .. }) => {}
                    other => panic!("unexpected {other:?}"),
                }
            }
            (hits_before, refusals_after)
        });
        // Let the worker run against the live server, then kill the server under it.
        let start = Instant::now();
        while live_hits.load(Ordering::SeqCst) < 5 && start.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(5));
        }
        server.kill();
        killed.store(true, Ordering::SeqCst);
        worker.join().expect("the worker never panics")
    });
    assert!(hits_before > 0, "the worker never hit before the kill");
    assert_eq!(
        refusals_after, 20,
        "lookups after the kill were not refusals"
    );
    assert!(store.unreachable_count() >= 1);
    assert!(observer.stats().refused >= stats_before.refused + 40);

    // A fresh server on the same address (empty: no persistence) is used again once the retry
    // pause is over; its absent stamp is set by the first operation.
    server.restart();
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut out = store.store(Some(&k), &payload(1, 2, 8)).expect("store");
    while out != StoreOutcome::Stored && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(60));
        out = store.store(Some(&k), &payload(1, 2, 8)).expect("store");
    }
    assert_eq!(out, StoreOutcome::Stored);
    assert_eq!(store.lookup(Some(&k), DIGEST), Some(payload(1, 2, 8)));
}

#[test]
fn a_silent_or_absent_server_is_a_refusal_within_the_timeouts() {
    // A listener that accepts connections but never answers: the read timeout fires.
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let silent = RedisStore::open(&format!("redis://127.0.0.1:{port}"))
        .expect("url")
        .with_timeouts(Duration::from_millis(300), Duration::from_millis(300));
    let found = silent.probe::<PlacementEntry>(Some(&key("x")), DIGEST);
    assert!(
        matches!(&found, Lookup::Refused(Refusal::Io { kind, .. }) if *kind == std::io::ErrorKind::TimedOut),
        "{found:?}"
    );
    assert!(matches!(
        silent
            .store(Some(&key("x")), &payload(1, 1, 1))
            .expect("store"),
        StoreOutcome::Refused(Refusal::Io { .. })
    ));
    drop(listener);

    // Nothing listening: refused at once.
    let port = TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port();
    let absent = RedisStore::open(&format!("redis://127.0.0.1:{port}")).expect("url");
    assert!(matches!(
        absent.probe::<PlacementEntry>(Some(&key("x")), DIGEST),
        Lookup::Refused(Refusal::Io {
            kind: std::io::ErrorKind::ConnectionRefused,
            ..
        })
    ));
}

#[test]
fn two_level_mode_back_fills_the_local_directory() {
    let server = redis_support::Server::start();
    let tmp = tempfile::tempdir().expect("tempdir");
    let k = key("cc-n1-winner");
    let entry = payload(5, 5, 30);

    // Machine A tunes and publishes through its own two-level store.
    let a = TwoLevel::new(DiskCache::new(tmp.path().join("a")), server.store());
    assert_eq!(
        a.store_each(Some(&k), &entry).expect("store"),
        (StoreOutcome::Stored, StoreOutcome::Stored)
    );

    // Machine B starts with an empty directory: local miss, shared hit, back-fill.
    let b_dir = tmp.path().join("b");
    let observer = Observer::new();
    let b = TwoLevel::new(
        DiskCache::new(&b_dir).with_observer(observer.clone()),
        server.store().with_observer(observer.clone()),
    );
    let found = b.lookup::<PlacementEntry>(Some(&k), DIGEST);
    let events = observer.take();
    assert_eq!(found.as_ref(), Some(&entry));
    let seen: Vec<(String, Op, Outcome)> = events
        .iter()
        .map(|e| (e.dir.display().to_string(), e.op, e.outcome.clone()))
        .collect();
    let local = b_dir.display().to_string();
    assert_eq!(
        seen,
        vec![
            (
                local.clone(),
                Op::Lookup,
                Outcome::Miss(MissReason::NoDirectory)
            ),
            (
                b.shared().expect("a shared level").location(),
                Op::Lookup,
                Outcome::Hit
            ),
            (local.clone(), Op::Store, Outcome::Stored),
        ]
    );
    assert!(b_dir.join(Space::Placement.file_name(&k)).is_file());

    // The second lookup is answered locally; the server is not consulted.
    let found = b.lookup::<PlacementEntry>(Some(&k), DIGEST);
    let events = observer.take();
    assert_eq!(found, Some(entry.clone()));
    assert_eq!(events.len(), 1);
    assert_eq!(
        (events[0].dir.display().to_string(), &events[0].outcome),
        (local, &Outcome::Hit)
    );

    // Without the server, B still answers from its directory.
    drop(server);
    assert_eq!(b.lookup(Some(&k), DIGEST), Some(entry));
}

#[test]
fn a_configured_disk_then_redis_store_shares_winners_between_directories() {
    let server = redis_support::Server::start();
    let tmp = tempfile::tempdir().expect("tempdir");
    assert!(matches!(
        TwoLevel::disk_then_redis(tmp.path().join("x"), "no scheme"),
        Err(Error::InvalidStoreConfig { .. })
    ));
    let k = key("cc-shared");
    let a = TwoLevel::disk_then_redis(tmp.path().join("a"), &server.url()).expect("url");
    assert_eq!(
        a.store(Some(&k), &payload(8, 8, 8)).expect("store"),
        StoreOutcome::Stored
    );
    let b = TwoLevel::disk_then_redis(tmp.path().join("b"), &server.url()).expect("url");
    assert_eq!(b.lookup(Some(&k), DIGEST), Some(payload(8, 8, 8)));
    assert_eq!(
        b.local().lookup(Some(&k), DIGEST),
        Some(payload(8, 8, 8)),
        "back-filled"
    );
}

/// Regression: a lookup fetched an entry value of any size (up to Redis's 512 MB) and parsed
/// it; a value past the directory store's cap is now a miss (`Unreadable`, kind
/// `FileTooLarge`) that the server answers without sending the value, and a store past the cap
/// is refused as the directory store refuses it.
#[test]
fn a_value_past_the_cap_is_a_miss_without_being_fetched() {
    let server = redis_support::Server::start();
    let store = server.store();
    let mut raw = server.raw();
    let k = key("huge");
    store.store(Some(&k), &payload(1, 1, 1)).expect("store");
    let cap = usize::try_from(schedule_cache::admin::MAX_ENTRY_BYTES).expect("cap");
    let _: () = raw
        .set(store.entry_key(Space::Placement, &k), vec![b'x'; cap + 1])
        .expect("SET");
    match store.probe::<PlacementEntry>(Some(&k), DIGEST) {
        Lookup::Miss(MissReason::Unreadable { kind, message }) => {
            assert_eq!(kind, std::io::ErrorKind::FileTooLarge, "{message}");
            assert!(message.len() < 200, "{message}");
        }
        other => panic!("{other:?}"),
    }
    // Exactly at the cap is read (and here unparsable).
    let _: () = raw
        .set(store.entry_key(Space::Placement, &k), vec![b'x'; cap])
        .expect("SET");
    assert!(matches!(
        store.probe::<PlacementEntry>(Some(&k), DIGEST),
        Lookup::Miss(MissReason::Unparsable { .. })
    ));
    // A store past the cap is refused and writes nothing.
    let big = key("big");
    let mut entry = payload(1, 1, 1);
    entry.flips = (0..1_000_000)
        .map(|node| schedule_cache::placement::Flip {
            node,
            direction: schedule_cache::placement::Direction::Materialize,
        })
        .collect();
    assert!(matches!(
        store.store(Some(&big), &entry).expect("store"),
        StoreOutcome::Refused(Refusal::Io {
            kind: std::io::ErrorKind::FileTooLarge,
            ..
        })
    ));
    assert!(
        !raw.exists::<_, bool>(store.entry_key(Space::Placement, &big))
            .expect("EXISTS")
    );
}

/// Regression: the store script wrote the entry before adding its name to the index, so a
/// server error on the index (a value of the wrong type there) left an entry the store
/// reported refused and that no regime transition would ever delete. A refused store now
/// writes no entry.
#[test]
fn a_store_the_server_refuses_writes_no_entry() {
    let server = redis_support::Server::start();
    let store = server.store();
    let mut raw = server.raw();
    store
        .store(Some(&key("first")), &payload(1, 1, 1))
        .expect("store");
    let _: () = raw.del(store.index_key()).expect("DEL");
    let _: () = raw.set(store.index_key(), "not a set").expect("SET");
    let k = key("second");
    let out = store.store(Some(&k), &payload(2, 2, 2)).expect("store");
    assert!(
        matches!(out, StoreOutcome::Refused(Refusal::Io { .. })),
        "{out:?}"
    );
    assert!(
        !raw.exists::<_, bool>(store.entry_key(Space::Placement, &k))
            .expect("EXISTS")
    );
}

/// Regression: the members of a digest set were named in a miss whatever they held; only
/// valid keys of the same digest are named now (as the directory store's sibling index), so a
/// garbage or huge member never reaches a miss message.
#[test]
fn garbage_digest_set_members_are_never_named() {
    let server = redis_support::Server::start();
    let store = server.store();
    let mut raw = server.raw();
    store
        .store(Some(&key("cc-n1")), &payload(1, 1, 1))
        .expect("store");
    let set = store.digest_key(Space::Placement, DIGEST);
    for junk in [
        "x".repeat(1 << 20),
        "../etc/passwd".to_owned(),
        "ffff-cc".to_owned(),
        String::new(),
    ] {
        let _: () = raw.sadd(&set, junk).expect("SADD");
    }
    match store.probe::<PlacementEntry>(Some(&key("cc-n2")), DIGEST) {
        Lookup::Miss(reason @ MissReason::NoEntry { .. }) => {
            let MissReason::NoEntry { same_digest } = &reason else {
                unreachable!()
            };
            assert_eq!(same_digest, &[key("cc-n1").as_str().to_owned()]);
            assert!(reason.to_string().len() < 400, "{reason}");
        }
        other => panic!("{other:?}"),
    }
}
