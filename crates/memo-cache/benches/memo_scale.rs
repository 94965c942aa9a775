//! The memo table at one million entries (printed figures, see `xtask/src/bench.rs`):
//!
//! - `memo_memory_per_entry_1m`: bytes allocated per entry by a [`Table<Key, u64>`] holding
//!   one million entries, against a plain `std::collections::HashMap<Key, u64>` holding the
//!   same (counted by a global allocator that tallies live bytes, `cap::Cap`);
//! - `memo_two_threads_throughput`: hits per second of two threads on one table of a million
//!   entries, against one thread on the same table (2 would be perfect scaling; the figure
//!   is a throughput ratio, so higher is better).
//!
//! With `--bench` it prints `FIGURE <name> <subject> <baseline>` lines; without (as
//! `cargo xtask test` runs it) it runs the same code on ten thousand entries and checks it.

use std::collections::HashMap;
use std::hint::black_box;
use std::sync::Barrier;
use std::time::Instant;

use memo_cache::{Key, Table, with_cache};

/// The system allocator, counting the bytes live (no limit).
#[global_allocator]
static ALLOCATOR: test_support::alloc::Counting = test_support::alloc::counting();

fn keys(n: usize) -> Vec<Key> {
    (0..n as u64)
        .map(|i| Key::of_parts(&[b"memo-scale", &i.to_le_bytes()]))
        .collect()
}

/// Bytes per entry of a table and of a plain map holding `keys`.
fn memory_per_entry(keys: &[Key]) -> (f64, f64) {
    let n = keys.len() as f64;
    let before = ALLOCATOR.allocated();
    let table_bytes = with_cache(true, |table: Option<&Table<Key, u64>>| {
        let Some(table) = table else { return 0 };
        for (i, k) in keys.iter().enumerate() {
            table.get_or_put(*k, || i as u64);
        }
        assert_eq!(table.len(), keys.len());
        ALLOCATOR.allocated().saturating_sub(before)
    });
    let before = ALLOCATOR.allocated();
    let mut map: HashMap<Key, u64> = HashMap::new();
    for (i, k) in keys.iter().enumerate() {
        map.insert(*k, i as u64);
    }
    assert_eq!(map.len(), keys.len());
    let map_bytes = ALLOCATOR.allocated().saturating_sub(before);
    drop(black_box(map));
    (table_bytes as f64 / n, map_bytes as f64 / n)
}

/// All-hit lookups per second on one table of `keys`: `threads` threads each doing `hits`.
fn hits_per_second(table: &Table<Key, u64>, keys: &[Key], threads: usize, hits: usize) -> f64 {
    let barrier = Barrier::new(threads + 1);
    let elapsed = std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|t| {
                let barrier = &barrier;
                s.spawn(move || {
                    barrier.wait();
                    // Each thread walks the keys with its own odd stride (no shared order).
                    let stride = 2 * (t + 1) * 7919 + 1;
                    let mut sum = 0u64;
                    let mut j = t * 104_729;
                    for _ in 0..hits {
                        j = (j + stride) % keys.len();
                        sum = sum.wrapping_add(table.get_or_put(keys[j], || u64::MAX));
                    }
                    barrier.wait();
                    sum
                })
            })
            .collect();
        barrier.wait();
        let t0 = Instant::now();
        barrier.wait();
        let elapsed = t0.elapsed();
        for w in workers {
            let sum = w.join().expect("worker");
            assert!(sum < u64::MAX / 2, "a hit ran the computation");
        }
        elapsed
    });
    (threads * hits) as f64 / elapsed.as_secs_f64()
}

/// Two threads' hit throughput and one thread's, each the median of three interleaved runs.
fn throughput(keys: &[Key], hits: usize) -> (f64, f64) {
    with_cache(true, |table: Option<&Table<Key, u64>>| {
        let Some(table) = table else {
            return (0.0, 0.0);
        };
        for (i, k) in keys.iter().enumerate() {
            table.get_or_put(*k, || i as u64);
        }
        let (mut two, mut one) = (Vec::new(), Vec::new());
        for _ in 0..3 {
            one.push(hits_per_second(table, keys, 1, hits));
            two.push(hits_per_second(table, keys, 2, hits));
        }
        for v in [&mut one, &mut two] {
            v.sort_by(f64::total_cmp);
        }
        let stats = table.stats();
        assert_eq!(stats.hits, 3 * 3 * hits as u64);
        (two[1], one[1])
    })
}

fn main() {
    let bench = std::env::args().any(|a| a == "--bench");
    let quick = std::env::var("KCACHE_BENCH_QUICK").is_ok_and(|v| v == "1");
    let n = if bench { 1_000_000 } else { 10_000 };
    let keys = keys(n);
    let (table, map) = memory_per_entry(&keys);
    println!("FIGURE memo_memory_per_entry_1m {table:.2} {map:.2}");
    let hits = match (bench, quick) {
        (false, _) => 10_000,
        (true, true) => 300_000,
        (true, false) => 2_000_000,
    };
    let (two, one) = throughput(&keys, hits);
    println!("FIGURE memo_two_threads_throughput {two:.0} {one:.0}");
    if !bench {
        // A small table has more fixed overhead per entry; far above a map is still wrong.
        assert!(
            table < 4.0 * map,
            "table {table} B/entry, map {map} B/entry"
        );
        assert!(two > 0.0 && one > 0.0);
    }
}
