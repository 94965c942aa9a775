//! Redis store benchmarks (feature `redis`; each run starts a private `redis-server`).
//!
//! - `redis_lookup`: `subject` is a `RedisStore` lookup of a present entry (one script call:
//!   stamp check and GET on the server, then parse, version and digest check); `baseline` is a
//!   plain `GET` of the same key on a raw connection plus the RON parse.
//! - `redis_two_level_local_hit`: `subject` is a two-level lookup answered by the local
//!   directory; `baseline` is the Redis store's lookup of the same entry (what the local level
//!   saves per hit).

#[path = "../tests/redis_support/mod.rs"]
mod redis_support;

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use redis_support::{DIGEST, Server, ServerExt, key, payload};
use schedule_cache::placement::PlacementEntry;
use schedule_cache::{DiskCache, Store, StoreOutcome, TwoLevel};

fn benches(c: &mut Criterion) {
    let server = Server::start();
    let store = server.store();
    let k = key("cc-n1a2b3c4-c5d6e7f8-p4-dx86-tisolated");
    let e = payload(1, 1, 48);
    assert_eq!(
        store.store(Some(&k), &e).expect("store"),
        StoreOutcome::Stored
    );
    let name = store.entry_key(schedule_cache::admin::Space::Placement, &k);
    let mut raw = server.raw();

    let mut g = c.benchmark_group("redis_lookup");
    g.bench_function("subject", |b| {
        b.iter(|| {
            let found: Option<PlacementEntry> = store.lookup(Some(black_box(&k)), DIGEST);
            assert!(found.is_some());
            found
        })
    });
    g.bench_function("baseline", |b| {
        b.iter(|| {
            let bytes: Vec<u8> = redis::cmd("GET")
                .arg(black_box(&name))
                .query(&mut raw)
                .expect("GET");
            let found: PlacementEntry =
                ron::from_str(std::str::from_utf8(&bytes).expect("utf8")).expect("parse");
            found
        })
    });
    g.finish();

    let tmp = tempfile::tempdir().expect("tempdir");
    let both = TwoLevel::new(DiskCache::new(tmp.path()), &store);
    assert!(both.lookup::<PlacementEntry>(Some(&k), DIGEST).is_some());
    let mut g = c.benchmark_group("redis_two_level_local_hit");
    g.bench_function("subject", |b| {
        b.iter(|| {
            let found: Option<PlacementEntry> = both.lookup(Some(black_box(&k)), DIGEST);
            assert!(found.is_some());
            found
        })
    });
    g.bench_function("baseline", |b| {
        b.iter(|| {
            let found: Option<PlacementEntry> = store.lookup(Some(black_box(&k)), DIGEST);
            assert!(found.is_some());
            found
        })
    });
    g.finish();
}

criterion_group!(redis_benches, benches);
criterion_main!(redis_benches);
