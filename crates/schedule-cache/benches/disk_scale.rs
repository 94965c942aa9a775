//! The schedule store on disk at scale (issue 15): lookup, miss and store cost in a directory
//! of 100,000 entries against one of 100, and the regime sweep of 100,000 entries.
//!
//! A measured bench binary (`harness = false`) for `cargo xtask bench --scale`: the small and
//! the large directory are measured interleaved, operation by operation, in several internal
//! rounds; with `--bench` it prints `FIGURE <name> <subject> <baseline>` (subject: the median
//! over the rounds at the large size; baseline: the same at the small size; xtask repeats the
//! binary and prints the median ratio with its spread) and a `#` line per figure with the
//! per-round ratios. Without `--bench` (as `cargo xtask test` runs it) it runs a small
//! version (500 entries), so it cannot rot.
//!
//! The large directory is filled by writing entry files directly (the exact bytes `store`
//! writes, without the two `fsync`s per entry that would make 100,000 stores take many
//! minutes); the fill time is printed. Arguments (after `--`): `--entries N` (default
//! 100000), `--small N` (100), `--rounds R` (7), `--ops K` (1000 lookups per round and size).

use schedule_cache::Store as _;
use std::fs;
use std::hint::black_box;
use std::time::{Duration, Instant};

use schedule_cache::admin::Space;
use schedule_cache::placement::PlacementEntry;
use schedule_cache::{CacheKey, DiskCache, Lookup, StoreOutcome};
use test_support::Rng;
use test_support::bench::{arg, summary};
mod fill;
use fill::{entry, fill};

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// Median and 99th percentile of `samples`.
fn p50_p99(samples: &mut [Duration]) -> (Duration, Duration) {
    samples.sort();
    (percentile(samples, 0.5), percentile(samples, 0.99))
}

/// Prints the figure: the medians at the large and the small size (seconds), and the
/// per-round ratios.
fn figure(name: &str, large: &mut [f64], small: &mut [f64]) {
    let ratios: Vec<String> = large
        .iter()
        .zip(small.iter())
        .map(|(l, s)| format!("{:.3}", l / s))
        .collect();
    let (l, _, _) = summary(large);
    let (s, _, _) = summary(small);
    println!("FIGURE {name} {l:.9} {s:.9}");
    println!("# {name}: per-round ratios {}", ratios.join(" "));
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    // `cargo bench` and `cargo xtask bench` pass `--bench`; `cargo test` runs a small version.
    let full = args.iter().any(|a| a == "--bench");
    let entries = arg(&args, "--entries", if full { 100_000 } else { 500 });
    let small_n = arg(&args, "--small", 100);
    let rounds = arg(&args, "--rounds", if full { 5 } else { 1 }).max(1);
    let ops = arg(&args, "--ops", if full { 1000 } else { 50 }).max(1);
    let tmp = tempfile::tempdir().expect("tempdir");
    let (small_dir, large_dir) = (tmp.path().join("small"), tmp.path().join("large"));
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let small = fill(&small_dir, small_n, &mut rng);
    let t = Instant::now();
    let large = fill(&large_dir, entries, &mut rng);
    let fill_s = t.elapsed().as_secs_f64();
    println!(
        "# filled {entries} entries in {fill_s:.1} s ({:.3} s per 1000); small directory: {small_n}",
        fill_s / entries as f64 * 1000.0
    );
    let (small_cache, large_cache) = (DiskCache::new(&small_dir), DiskCache::new(&large_dir));

    let lookup = |cache: &DiskCache, (key, digest): &(CacheKey, String)| {
        let t = Instant::now();
        let found = cache.probe::<PlacementEntry>(Some(black_box(key)), digest);
        let d = t.elapsed();
        assert!(matches!(found, Lookup::Hit(_)), "{found:?}");
        d
    };
    let miss = |cache: &DiskCache, rng: &mut Rng| {
        let (key, e) = entry(rng);
        let t = Instant::now();
        let found = cache.probe::<PlacementEntry>(Some(black_box(&key)), &e.digest);
        let d = t.elapsed();
        assert!(matches!(found, Lookup::Miss(_)), "{found:?}");
        d
    };
    let store = |cache: &DiskCache, rng: &mut Rng| {
        let (key, e) = entry(rng);
        let t = Instant::now();
        let out = cache.store(Some(black_box(&key)), &e).expect("store");
        let d = t.elapsed();
        assert_eq!(out, StoreOutcome::Stored);
        fs::remove_file(cache.dir().join(Space::Placement.file_name(&key))).expect("rm");
        d
    };

    // The first open of a directory in a process sweeps its staging (a listing): once per
    // process, not per operation, so it is done before measuring.
    let _ = lookup(&small_cache, &small[0]);
    let _ = lookup(&large_cache, &large[0]);
    // Per figure: (large, small) seconds per round.
    let mut figs: Vec<(&str, Vec<f64>, Vec<f64>)> = [
        "disk_scale_lookup_growth_p50",
        "disk_scale_lookup_growth_p99",
        "disk_scale_miss_growth_p50",
        "disk_scale_miss_growth_p99",
        "disk_scale_store_growth_p50",
        "disk_scale_store_growth_p99",
    ]
    .into_iter()
    .map(|n| (n, vec![], vec![]))
    .collect();
    let mut push = |i: usize, l: Duration, s: Duration| {
        figs[i].1.push(l.as_secs_f64());
        figs[i].2.push(s.as_secs_f64());
    };
    let store_ops = (ops / 10).max(5);
    for _ in 0..rounds {
        let (mut s, mut l) = (Vec::with_capacity(ops), Vec::with_capacity(ops));
        for _ in 0..ops {
            s.push(lookup(&small_cache, &small[rng.below(small.len())]));
            l.push(lookup(&large_cache, &large[rng.below(large.len())]));
        }
        let ((s50, s99), (l50, l99)) = (p50_p99(&mut s), p50_p99(&mut l));
        push(0, l50, s50);
        push(1, l99, s99);

        let (mut s, mut l) = (Vec::with_capacity(ops), Vec::with_capacity(ops));
        for _ in 0..ops {
            s.push(miss(&small_cache, &mut rng));
            l.push(miss(&large_cache, &mut rng));
        }
        let ((s50, s99), (l50, l99)) = (p50_p99(&mut s), p50_p99(&mut l));
        push(2, l50, s50);
        push(3, l99, s99);

        let (mut s, mut l) = (Vec::new(), Vec::new());
        for _ in 0..store_ops {
            s.push(store(&small_cache, &mut rng));
            l.push(store(&large_cache, &mut rng));
        }
        let ((s50, s99), (l50, l99)) = (p50_p99(&mut s), p50_p99(&mut l));
        push(4, l50, s50);
        push(5, l99, s99);
    }
    // The names, spelled out for xtask's table check:
    // FIGURE disk_scale_lookup_growth_p50 , FIGURE disk_scale_lookup_growth_p99 ,
    // FIGURE disk_scale_miss_growth_p50 , FIGURE disk_scale_miss_growth_p99 ,
    // FIGURE disk_scale_store_growth_p50 , FIGURE disk_scale_store_growth_p99 .
    for (name, large, small) in &mut figs {
        println!(
            "# {name}: {:.1} us at {entries} entries, {:.1} us at {small_n}",
            summary(large).0 * 1e6,
            summary(small).0 * 1e6
        );
        figure(name, large, small);
    }

    // The regime sweep: a build of the next regime opens the large directory.
    let t = Instant::now();
    let next = DiskCache::new(&large_dir).with_regime(large_cache.regime() + 1);
    let found = next.probe::<PlacementEntry>(Some(&large[0].0), &large[0].1);
    let sweep_s = t.elapsed().as_secs_f64();
    assert!(matches!(found, Lookup::Miss(_)), "{found:?}");
    let left = fs::read_dir(&large_dir).expect("ls").count();
    assert!(left <= 3, "{left} names left after the sweep");
    // Seconds per 1,000 entries, against one second (the unit).
    println!(
        "FIGURE disk_scale_regime_sweep_s_per_1000 {:.6} 1",
        sweep_s / entries as f64 * 1000.0
    );
}
