//! How kernel-cache's costs grow with its size (issue 15). Given `--bench`, one
//! measurement of each figure is printed as `FIGURE <name> <subject> <baseline>` (the
//! ratio is subject / baseline; `cargo xtask bench` runs this once per round and reports
//! the median ratio over the rounds with its spread), each beside the same figure for a
//! plain map (its peer), so a cost that grows worse than a plain map's shows:
//!
//! - `kernel_cache_memory_per_entry_1m`: live heap bytes per entry of a cache holding one
//!   million entries published in groups of eight, against a plain
//!   `HashMap<String, Resolved<_>>` holding the same keys and values (counted by this
//!   binary's global allocator, `cap::Cap`: every byte requested and not yet freed);
//! - `kernel_cache_all_hit_growth_1k_to_1m`: an all-hit resolve of 1,000 kernels (spread
//!   over the whole cache, resolved again and again) with one million entries in the
//!   cache, against one thousand; peer `dashmap_get_growth_1k_to_1m`;
//! - `kernel_cache_publish_evict_growth_1k_to_1m`: one publish of a group of eight at
//!   capacity (it evicts the oldest group: the steady state of a full cache), with one
//!   million entries retained, against one thousand; peer
//!   `hashmap_fifo_publish_growth_1k_to_1m`;
//! - `kernel_cache_two_threads_resolve`: resolves per second of two threads at once (each
//!   its own 1,000 kernels, at one million entries), against one thread alone (higher is
//!   better, 2.0 perfect); peer `dashmap_two_threads_get`.
//!
//! Within a run the timed subjects and baselines alternate, several samples each
//! (`KCACHE_BENCH_QUICK=1` or `--quick`: fewer; `KCACHE_SCALE_ONLY=all_hit,…`: only the
//! figures whose names contain one of the words, for profiling one). Without `--bench` (as
//! `cargo test --all-targets` runs it) it runs once at small sizes and checks the cache
//! answers what it holds.

use std::collections::{HashMap, VecDeque};
use std::convert::Infallible;
use std::hint::black_box;
use std::sync::Arc;
use std::time::Instant;

use dashmap::DashMap;
use kernel_cache::{Backend, BatchKernel, Compiled, Group, KernelCache, Resolved, Resolver};

/// The system allocator, counting the bytes requested and not yet freed (no limit).
#[global_allocator]
static GLOBAL: test_support::alloc::Counting = test_support::alloc::counting();

/// A compiled program stand-in: the scale figures measure the cache, which never looks
/// inside a program.
type Program = [u64; 4];

/// The backend of the timed resolves: they are all hits, so it is never asked to compile
/// (the run fails loudly if it were).
struct HitsOnly;

impl Backend for HitsOnly {
    type Source = ();
    type Program = Program;
    type Error = Infallible;

    fn compile_group(&self, group: &Group<'_, ()>) -> Result<Compiled<Program>, Infallible> {
        panic!(
            "the scale bench resolves hits only, yet {} kernels missed",
            group.kernels.len()
        )
    }
}

/// Kernels per published group.
const GROUP: usize = 8;
/// Kernels per timed resolve.
const BATCH: usize = 1000;

/// The `i`-th key: 64 lowercase hex characters, like a kernel key.
fn key(i: usize) -> String {
    let mut z = (i as u64).wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut out = String::with_capacity(64);
    for _ in 0..4 {
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        out.push_str(&format!("{z:016x}"));
    }
    out
}

/// The symbol of the `i`-th kernel (as a renderer names segment kernels).
fn symbol(i: usize) -> String {
    format!("fused_{}__seg{}", i / GROUP, i % GROUP)
}

/// The entries of group `g` (keys `g*8 .. g*8+8`) sharing one program.
fn group_entries(g: usize) -> Vec<(String, Resolved<Program>)> {
    let program = Arc::new([g as u64; 4]);
    (g * GROUP..(g + 1) * GROUP)
        .map(|i| (key(i), Resolved::new(Arc::clone(&program), symbol(i))))
        .collect()
}

/// A cache holding `n` entries (keys `0..n`) in groups of eight, each weighing 1.
fn filled(n: usize) -> KernelCache<Program> {
    let cache = KernelCache::new(u64::MAX);
    for g in 0..n / GROUP {
        cache.publish(group_entries(g), 1);
    }
    cache
}

/// `BATCH` kernels spread evenly over the keys `0..n`, starting at `offset`.
fn batch(n: usize, offset: usize) -> Vec<BatchKernel<()>> {
    let step = (n / BATCH).max(1);
    (0..BATCH.min(n))
        .map(|j| (offset + j * step) % n)
        .map(|i| BatchKernel {
            key: key(i),
            options: Vec::new(),
            symbol: symbol(i),
            source: (),
        })
        .collect()
}

/// The median of `v` (sorted in place).
fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Seconds per call of `f`: the median of `samples` timings of `reps` calls each.
fn time(samples: usize, reps: usize, mut f: impl FnMut()) -> f64 {
    let mut t: Vec<f64> = (0..samples)
        .map(|_| {
            let start = Instant::now();
            for _ in 0..reps {
                f();
            }
            start.elapsed().as_secs_f64() / reps as f64
        })
        .collect();
    median(&mut t)
}

/// One figure: its subject's and baseline's measurements in this run (interleaved), and
/// the same figure for a plain map (its peer), printed beside it.
struct Figure {
    /// The start of the line the figure is printed on: `FIGURE <name> `.
    line: &'static str,
    subject: Vec<f64>,
    baseline: Vec<f64>,
    /// The peer's line start and measurements.
    peer: Option<(&'static str, Vec<f64>, Vec<f64>)>,
    detail: String,
}

impl Figure {
    /// Prints `FIGURE <name> <subject> <baseline>` (medians) for the figure and its peer,
    /// then a `#` line in words. In test mode (small sizes) the lines say so first, so no
    /// harness reads them as figures.
    fn print(mut self, bench: bool) {
        let tag = if bench {
            ""
        } else {
            "test mode (small sizes): "
        };
        let (s, b) = (median(&mut self.subject), median(&mut self.baseline));
        println!("{tag}{}{s:.6e} {b:.6e}", self.line);
        let name = |line: &str| line.trim_start_matches("FIGURE ").trim_end().to_string();
        let mut peer_ratio = String::new();
        if let Some((line, mut ps, mut pb)) = self.peer {
            let (ps, pb) = (median(&mut ps), median(&mut pb));
            println!("{tag}{line}{ps:.6e} {pb:.6e}");
            peer_ratio = format!("; peer {}: {:.3}", name(line), ps / pb);
        }
        println!(
            "# {}: {:.3}{peer_ratio}: {}",
            name(self.line),
            s / b,
            self.detail
        );
    }
}

/// Live heap bytes per entry of a kernel cache and of a plain map holding the same.
fn memory(n: usize) -> Figure {
    let before = GLOBAL.allocated();
    let cache = filled(n);
    let cache_bytes = GLOBAL.allocated() - before;
    assert_eq!(cache.len(), n);
    drop(cache);

    let before = GLOBAL.allocated();
    let mut plain: HashMap<String, Resolved<Program>> = HashMap::new();
    for g in 0..n / GROUP {
        plain.extend(group_entries(g));
    }
    let plain_bytes = GLOBAL.allocated() - before;
    assert_eq!(plain.len(), n);
    drop(plain);

    let (c, p) = (cache_bytes as f64 / n as f64, plain_bytes as f64 / n as f64);
    // Bytes are counted, not timed: the bound holds at every size this runs at
    // (also in test mode, so `cargo test --all-targets` checks it).
    assert!(
        c <= 2.0 * p,
        "{c:.0} bytes per entry against {p:.0} in a plain map: over 2x"
    );
    Figure {
        line: "FIGURE kernel_cache_memory_per_entry_1m ",
        subject: vec![c],
        baseline: vec![p],
        peer: None,
        detail: format!(
            "{c:.0} bytes per entry against {p:.0} in a plain HashMap<String, Resolved<_>>, {n} entries in groups of {GROUP}"
        ),
    }
}

/// A plain concurrent map holding the same entries as [`filled`]`(n)`: the peer whose
/// growth the cache's is compared with.
fn plain_filled(n: usize) -> DashMap<String, Resolved<Program>> {
    let map = DashMap::new();
    for g in 0..n / GROUP {
        for (k, v) in group_entries(g) {
            map.insert(k, v);
        }
    }
    map
}

/// All-hit resolves of 1,000 kernels at `large` entries against at `small`.
fn all_hit(small: usize, large: usize, rounds: usize, samples: usize) -> Figure {
    let (s_cache, l_cache) = (filled(small), filled(large));
    let (s_plain, l_plain) = (plain_filled(small), plain_filled(large));
    let (s_batch, l_batch) = (batch(small, 0), batch(large, 0));
    let run = |cache: &KernelCache<Program>, b: &[BatchKernel<()>]| {
        let answers = Resolver::new(cache, &HitsOnly)
            .resolve_strict(black_box(b))
            .map(|r| r.answers)
            .expect("all hits");
        black_box(answers);
    };
    let get = |map: &DashMap<String, Resolved<Program>>, b: &[BatchKernel<()>]| {
        let answers: Vec<_> = black_box(b)
            .iter()
            .map(|k| map.get(&k.key).map(|v| v.value().clone()))
            .collect();
        black_box(answers);
    };
    let (mut tl, mut ts, mut pl, mut ps) = (vec![], vec![], vec![], vec![]);
    for _ in 0..rounds {
        tl.push(time(samples, 20, || run(&l_cache, &l_batch)));
        ts.push(time(samples, 20, || run(&s_cache, &s_batch)));
        pl.push(time(samples, 20, || get(&l_plain, &l_batch)));
        ps.push(time(samples, 20, || get(&s_plain, &s_batch)));
    }
    let detail = format!(
        "seconds per all-hit resolve of {BATCH} kernels at {large} entries over at {small} ({:.1} µs, {:.1} µs); the peer: raw dashmap gets of the same keys",
        median(&mut tl.clone()) * 1e6,
        median(&mut ts.clone()) * 1e6,
    );
    Figure {
        line: "FIGURE kernel_cache_all_hit_growth_1k_to_1m ",
        subject: tl,
        baseline: ts,
        peer: Some(("FIGURE dashmap_get_growth_1k_to_1m ", pl, ps)),
        detail,
    }
}

/// A plain FIFO of groups over a `HashMap`: the peer of a publish at capacity.
struct PlainFifo {
    map: HashMap<String, Resolved<Program>>,
    order: VecDeque<Vec<String>>,
}

impl PlainFifo {
    fn filled(n: usize) -> PlainFifo {
        let mut fifo = PlainFifo {
            map: HashMap::new(),
            order: VecDeque::new(),
        };
        for g in 0..n / GROUP {
            fifo.publish(group_entries(g), usize::MAX);
        }
        fifo
    }

    /// Inserts a group, then drops the oldest groups while more than `groups` remain.
    fn publish(&mut self, entries: Vec<(String, Resolved<Program>)>, groups: usize) {
        let mut keys = Vec::with_capacity(entries.len());
        for (k, v) in entries {
            keys.push(k.clone());
            self.map.insert(k, v);
        }
        self.order.push_back(keys);
        while self.order.len() > groups {
            for k in self.order.pop_front().unwrap_or_default() {
                self.map.remove(&k);
            }
        }
    }
}

/// Publishing one group of eight at capacity (evicting the oldest group) with `large`
/// entries retained against `small`.
fn publish_evict(small: usize, large: usize, rounds: usize, per_sample: usize) -> Figure {
    let (s_cache, l_cache) = (filled(small), filled(large));
    s_cache.set_capacity((small / GROUP) as u64);
    l_cache.set_capacity((large / GROUP) as u64);
    let (mut s_plain, mut l_plain) = (PlainFifo::filled(small), PlainFifo::filled(large));
    // Fresh groups (new keys) for every publish, made outside the timing.
    let mut next = large / GROUP;
    let mut fresh = |count: usize| -> Vec<Vec<(String, Resolved<Program>)>> {
        let out = (next..next + count).map(group_entries).collect();
        next += count;
        out
    };
    let publish_all = |cache: &KernelCache<Program>, groups: Vec<Vec<_>>| {
        let start = Instant::now();
        for g in groups {
            cache.publish(g, 1);
        }
        start.elapsed().as_secs_f64() / per_sample as f64
    };
    let plain_all = |fifo: &mut PlainFifo, n: usize, groups: Vec<Vec<_>>| {
        let start = Instant::now();
        for g in groups {
            fifo.publish(g, n / GROUP);
        }
        start.elapsed().as_secs_f64() / per_sample as f64
    };
    let (mut tl, mut ts, mut pl, mut ps) = (vec![], vec![], vec![], vec![]);
    for _ in 0..rounds {
        tl.push(publish_all(&l_cache, fresh(per_sample)));
        ts.push(publish_all(&s_cache, fresh(per_sample)));
        pl.push(plain_all(&mut l_plain, large, fresh(per_sample)));
        ps.push(plain_all(&mut s_plain, small, fresh(per_sample)));
    }
    assert_eq!(
        s_cache.len(),
        small,
        "steady state: each publish evicts one"
    );
    assert_eq!(
        l_cache.len(),
        large,
        "steady state: each publish evicts one"
    );
    let detail = format!(
        "seconds per publish of a group of {GROUP} at capacity (one eviction) with {large} entries over with {small} ({:.2} µs, {:.2} µs); the peer: a plain HashMap with a FIFO of groups",
        median(&mut tl.clone()) * 1e6,
        median(&mut ts.clone()) * 1e6,
    );
    Figure {
        line: "FIGURE kernel_cache_publish_evict_growth_1k_to_1m ",
        subject: tl,
        baseline: ts,
        peer: Some(("FIGURE hashmap_fifo_publish_growth_1k_to_1m ", pl, ps)),
        detail,
    }
}

/// Two threads resolving at once against one: throughput ratio.
fn two_threads(n: usize, rounds: usize, reps: usize) -> Figure {
    let cache = filled(n);
    let plain = plain_filled(n);
    let batches = [batch(n, 0), batch(n, n / 2 + 1)];
    let work = |b: &[BatchKernel<()>]| {
        for _ in 0..reps {
            black_box(
                Resolver::new(&cache, &HitsOnly)
                    .resolve_strict(black_box(b))
                    .map(|r| r.answers)
                    .expect("all hits"),
            );
        }
    };
    let peer_work = |b: &[BatchKernel<()>]| {
        for _ in 0..reps {
            let answers: Vec<_> = black_box(b)
                .iter()
                .map(|k| plain.get(&k.key).map(|v| v.value().clone()))
                .collect();
            black_box(answers);
        }
    };
    // Throughput (resolves per second) on two threads at once, and on one.
    let throughput = |work: &(dyn Fn(&[BatchKernel<()>]) + Sync)| -> (f64, f64) {
        let start = Instant::now();
        work(&batches[0]);
        let one = reps as f64 / start.elapsed().as_secs_f64();
        let start = Instant::now();
        std::thread::scope(|s| {
            for b in &batches {
                s.spawn(|| work(b));
            }
        });
        let two = 2.0 * reps as f64 / start.elapsed().as_secs_f64();
        (two, one)
    };
    let (mut t2, mut t1, mut p2, mut p1) = (vec![], vec![], vec![], vec![]);
    for _ in 0..rounds {
        let (two, one) = throughput(&work);
        t2.push(two);
        t1.push(one);
        let (two, one) = throughput(&peer_work);
        p2.push(two);
        p1.push(one);
    }
    Figure {
        line: "FIGURE kernel_cache_two_threads_resolve ",
        subject: t2,
        baseline: t1,
        peer: Some(("FIGURE dashmap_two_threads_get ", p2, p1)),
        detail: format!(
            "resolves of {BATCH} hits per second at {n} entries on two threads at once over on one (higher is better, 2.0 perfect on {} cores); the peer: raw dashmap gets of the same keys",
            std::thread::available_parallelism().map_or(1, |n| n.get()),
        ),
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let bench = args.iter().any(|a| a == "--bench");
    let quick = std::env::var("KCACHE_BENCH_QUICK").is_ok_and(|v| v == "1")
        || args.iter().any(|a| a == "--quick");
    let (small, large) = if bench {
        (1_000, 1_000_000)
    } else {
        (1_000, 8_000)
    };
    let (rounds, samples) = match (bench, quick) {
        (false, _) => (1, 1),
        (true, true) => (2, 5),
        (true, false) => (3, 9),
    };
    // `KCACHE_SCALE_ONLY=a,b` runs only the figures whose names contain `a` or `b` (for
    // profiling one figure; `cargo xtask bench --only` filters the printed lines instead).
    let only = std::env::var("KCACHE_SCALE_ONLY").unwrap_or_default();
    let runs = |name: &str| only.is_empty() || only.split(',').any(|o| name.contains(o));
    if runs("kernel_cache_memory_per_entry_1m") {
        memory(large).print(bench);
    }
    if runs("kernel_cache_all_hit_growth_1k_to_1m") {
        all_hit(small, large, rounds, samples).print(bench);
    }
    if runs("kernel_cache_publish_evict_growth_1k_to_1m") {
        publish_evict(small, large, rounds, if bench { 2_000 } else { 10 }).print(bench);
    }
    if runs("kernel_cache_two_threads_resolve") {
        two_threads(large, rounds, if bench { 200 } else { 2 }).print(bench);
    }
}
