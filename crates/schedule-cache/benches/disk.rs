//! Disk store benchmarks.
//!
//! - `disk_lookup`: `subject` is a lookup of a present entry through the full protocol (lock
//!   file, stamp check, read, parse, version and digest check); `baseline` is `std::fs::read`
//!   plus the RON parse of the same file.
//! - `disk_store`: `subject` is a store (lock, stamp check, encode, atomic publication);
//!   `baseline` is a plain `atomicwrites` write of the same bytes to the same path.

mod fill;

use schedule_cache::Store as _;
use std::hint::black_box;
use std::io::Write;

use atomicwrites::{AllowOverwrite, AtomicFile};
use criterion::{Criterion, criterion_group, criterion_main};
use schedule_cache::admin::Space;
use schedule_cache::placement::{PlacementEntry, Shipped};
use schedule_cache::{CacheKey, DiskCache, StoreOutcome};

const DIGEST: &str = "9c56cc51b374c3ba189210d5b6d4bf57790d351c96c47c02190ecf1e430635ab";

fn entry() -> PlacementEntry {
    PlacementEntry::new(DIGEST, fill::flips(48, 7, 3), Shipped::Refined)
}

fn benches(c: &mut Criterion) {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("cache");
    let key =
        CacheKey::new(&format!("{DIGEST}-cc-n1a2b3c4-c5d6e7f8-p4-dx86-tisolated")).expect("key");
    let e = entry();
    let cache = DiskCache::new(&dir);
    assert_eq!(
        cache.store(Some(&key), &e).expect("store"),
        StoreOutcome::Stored
    );
    let path = dir.join(Space::Placement.file_name(&key));

    let mut g = c.benchmark_group("disk_lookup");
    g.bench_function("subject", |b| {
        b.iter(|| {
            let found: Option<PlacementEntry> = cache.lookup(Some(black_box(&key)), DIGEST);
            assert!(found.is_some());
            found
        })
    });
    g.bench_function("baseline", |b| {
        b.iter(|| {
            let bytes = std::fs::read(black_box(&path)).expect("read");
            let text = std::str::from_utf8(&bytes).expect("utf8");
            let found: PlacementEntry = ron::from_str(text).expect("parse");
            found
        })
    });
    g.finish();

    let bytes = std::fs::read(&path).expect("read");
    let mut g = c.benchmark_group("disk_store");
    g.sample_size(20);
    g.bench_function("subject", |b| {
        b.iter(|| {
            let out = schedule_cache::DiskCache::new(&dir)
                .store(Some(black_box(&key)), &e)
                .expect("store");
            assert_eq!(out, StoreOutcome::Stored);
        })
    });
    g.bench_function("baseline", |b| {
        b.iter(|| {
            AtomicFile::new(black_box(&path), AllowOverwrite)
                .write(|f| f.write_all(&bytes))
                .expect("write");
        })
    });
    g.finish();
}

criterion_group!(disk_benches, benches);
criterion_main!(disk_benches);
