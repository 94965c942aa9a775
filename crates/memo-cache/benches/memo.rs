//! The hit path of the memo table against the maps an optimizer would otherwise use.
//!
//! - `memo_hit_vs_dashmap`: 1,000 `get_or_put` hits against 1,000 raw `DashMap::get`s
//!   (std's default hasher, value copied out) on the same keys: what single flight
//!   and statistics cost on a hit.
//! - `memo_hit_vs_moka`: the same hits against `moka::sync::Cache::get_with`, the
//!   peer with the same "compute on a miss, once" contract.

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use dashmap::DashMap;
use memo_cache::{Key, Table, get_or_put, with_cache};

const KEYS: usize = 1_000;

fn keys() -> Vec<Key> {
    (0..KEYS as u64)
        .map(|i| Key::of_parts(&[b"bench", &i.to_le_bytes()]))
        .collect()
}

fn fill(table: &Table<Key, u64>, keys: &[Key]) {
    for (i, k) in keys.iter().enumerate() {
        table.get_or_put(*k, || i as u64);
    }
}

/// All hits: the computation is never run (it would change the sum).
fn hits(table: &Table<Key, u64>, keys: &[Key]) -> u64 {
    keys.iter()
        .map(|k| get_or_put(Some(table), *k, || u64::MAX))
        .fold(0, u64::wrapping_add)
}

/// The group `name`: all hits on the keys in a memo table (subject) against `lookup` of
/// each key in the peer (baseline), both holding the `i`-th key's value `i`.
fn hit_vs(c: &mut Criterion, name: &str, keys: &[Key], lookup: impl Fn(&Key) -> u64) {
    let expected: u64 = (0..KEYS as u64).sum();
    with_cache(true, |table| {
        let Some(table) = table else { return };
        fill(table, keys);
        let mut g = c.benchmark_group(name);
        g.bench_function("subject", |b| {
            b.iter(|| {
                let sum = hits(table, black_box(keys));
                assert_eq!(sum, expected);
                sum
            })
        });
        g.bench_function("baseline", |b| {
            b.iter(|| {
                let sum = black_box(keys)
                    .iter()
                    .map(&lookup)
                    .fold(0, u64::wrapping_add);
                assert_eq!(sum, expected);
                sum
            })
        });
        g.finish();
    });
}

fn memo_hit_vs_dashmap(c: &mut Criterion) {
    let keys = keys();
    let raw: DashMap<Key, u64> = DashMap::new();
    for (i, k) in keys.iter().enumerate() {
        raw.insert(*k, i as u64);
    }
    hit_vs(c, "memo_hit_vs_dashmap", &keys, |k| {
        raw.get(k).map_or(u64::MAX, |r| *r)
    });
}

fn memo_hit_vs_moka(c: &mut Criterion) {
    let keys = keys();
    let moka: moka::sync::Cache<Key, u64> = moka::sync::Cache::new(10 * KEYS as u64);
    for (i, k) in keys.iter().enumerate() {
        moka.insert(*k, i as u64);
    }
    hit_vs(c, "memo_hit_vs_moka", &keys, |k| {
        moka.get_with(*k, || u64::MAX)
    });
}

criterion_group!(benches, memo_hit_vs_dashmap, memo_hit_vs_moka);
criterion_main!(benches);
