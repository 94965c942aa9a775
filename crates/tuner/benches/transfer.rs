//! Transfer figures through the tuner's cold-comparison harness (issue 37), with the real
//! C compiler, on reference-ir's large space (`space::TiledMatmul`: 2,000 legal schedules
//! of a tiled matrix product, few of them near the best). One invocation is one paired
//! round: a search tunes the source (the product at 128, gcc, the base options) and stores
//! its winner; then, in the same cache,
//! three changes are each searched from the seeds the cache offers, beside an unseeded
//! search with its own memo table and its own candidate order, both winners re-measured
//! interleaved ([`tuner::Tuner::compare_cold`]):
//!
//! - `size`: the product at 96 (near code of the same loop nest);
//! - `option`: `-O3` added to the compiler options (the same code, another codegen);
//! - `compiler`: clang instead of gcc (the same code, another toolchain and timing).
//!
//! Printed per change as `FIGURE <name> <subject> <baseline>`:
//!
//! - `transfer_<change>_trials_ratio`: the attempts the seeded search needs to come within
//!   5% of the faster re-measured winner, over the attempts the unseeded search needs (a
//!   search that never does counts its budget plus one);
//! - `transfer_final_quality_<change>`: the seeded winner's re-measured time over the
//!   unseeded winner's, re-measured side by side, interleaved.
//!
//! `cargo xtask bench` runs the binary once per round and reports the median over rounds.
//! Every round draws fresh order seeds (from the clock and the process id, printed), so the
//! rounds' orders are independent of each other and of the kernel's name.
//!
//! Without `--bench` (as `cargo xtask test` runs it), or with `KCACHE_BENCH_QUICK=1`, it
//! runs a small version (64 -> 96, small budgets, quick measurement settings).

#[path = "../tests/support/mod.rs"]
mod support;

use cc_backend::CcBackend;
use memo_cache::with_cache;
use schedule_cache::StorePolicy;
use support::{RefWorkload, Tiled, base_options, kernel_cache};
use tuner::{
    ColdComparison, ColdOptions, Measure, NeighbourhoodSearch, ProgressMode, SearchOptions,
    Strategy, Tuner,
};

struct Sizes {
    n: usize,
    n_changed: usize,
    source_budget: usize,
    budget: usize,
    measure: Measure,
}

fn strategy() -> Box<dyn Strategy> {
    Box::new(NeighbourhoodSearch::new(8, 3))
}

fn order_base() -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    nanos ^ (u64::from(std::process::id()) << 32)
}

fn compare(
    change: &str,
    backend: &CcBackend,
    target: &RefWorkload<Tiled>,
    dir: &std::path::Path,
    s: &Sizes,
    order: u64,
) -> ColdComparison<support::Built, reference_ir::schedule::RefOp> {
    let schedules = target.schedules(backend, dir);
    let cache = kernel_cache();
    let tuner = Tuner::new(&schedules, backend, &cache)
        .with_measure(s.measure.clone())
        .with_progress(ProgressMode::Quiet);
    let options = ColdOptions {
        budget: s.budget,
        batch: 8,
        seeded_order: order,
        cold_order: order.wrapping_add(0x9E37_79B9),
        max_seeds: 4,
        rounds: s.measure.finalist_rounds.max(5),
        within: 0.05,
    };
    let c = tuner
        .compare_cold(target, &mut strategy, &options)
        .unwrap_or_else(|e| panic!("{change}: {e}"));
    let seeds = c.seeded.seeds.clone().unwrap_or_default();
    eprintln!(
        "transfer {change}: seeds offered {} attempted {} dropped {} failed {} wrong {}; \
         seeded within 5% at {:?}, cold at {:?} (budget {}); winners {:.4} ms (spread {:.1}%) \
         vs {:.4} ms (spread {:.1}%), seeded {:?} cold {:?}",
        seeds.offered,
        seeds.attempted,
        seeds.dropped.len(),
        seeds.failed,
        seeds.wrong,
        c.seeded_trials,
        c.cold_trials,
        s.budget,
        c.seeded_time.time * 1e3,
        c.seeded_time.spread * 100.0,
        c.cold_time.time * 1e3,
        c.cold_time.spread * 100.0,
        c.seeded.winner.point,
        c.cold.winner.point,
    );
    for d in &seeds.dropped {
        eprintln!("  dropped seed: {}: {}", d.from, d.reason);
    }
    c
}

/// The two figures of one change, each printed subject first: the seeded search's
/// attempts to match over the cold one's, and the seeded winner's re-measured time over
/// the cold one's.
fn print(change: &str, c: &ColdComparison<support::Built, reference_ir::schedule::RefOp>) {
    let over = |t: Option<usize>, budget: usize| t.unwrap_or(budget + 1);
    let (seeded, cold) = (
        over(c.seeded_trials, c.seeded.budget),
        over(c.cold_trials, c.cold.budget),
    );
    let (s, k) = (c.seeded_time.time, c.cold_time.time);
    match change {
        "size" => {
            println!("FIGURE transfer_size_trials_ratio {seeded} {cold}");
            println!("FIGURE transfer_final_quality_size {s:e} {k:e}");
        }
        "option" => {
            println!("FIGURE transfer_option_trials_ratio {seeded} {cold}");
            println!("FIGURE transfer_final_quality_option {s:e} {k:e}");
        }
        _ => {
            println!("FIGURE transfer_compiler_trials_ratio {seeded} {cold}");
            println!("FIGURE transfer_final_quality_compiler {s:e} {k:e}");
        }
    }
}

fn main() {
    let bench = std::env::args().any(|a| a == "--bench");
    let quick = std::env::var("KCACHE_BENCH_QUICK").as_deref() == Ok("1");
    let s = if bench && !quick {
        Sizes {
            n: 128,
            n_changed: 96,
            source_budget: 48,
            budget: 32,
            measure: Measure::default(),
        }
    } else {
        Sizes {
            n: 64,
            n_changed: 96,
            source_budget: 12,
            budget: 10,
            measure: Measure::quick(),
        }
    };
    let order = order_base();
    eprintln!("transfer: order seed base {order}");
    let gcc = CcBackend::with_compiler("gcc").expect("gcc");
    let clang = CcBackend::with_compiler("clang").expect("clang");
    let dir = tempfile::tempdir().expect("a temporary directory");

    // The source: tuned and stored once per round.
    let source = RefWorkload::new(Tiled::new(s.n), &gcc, base_options());
    {
        let schedules = source.schedules(&gcc, dir.path());
        let cache = kernel_cache();
        let tuner = Tuner::new(&schedules, &gcc, &cache)
            .with_measure(s.measure.clone())
            .with_progress(ProgressMode::Quiet);
        let options = SearchOptions {
            budget: s.source_budget,
            order_seed: order.wrapping_add(17),
            seeds: false,
            ..SearchOptions::default()
        };
        let report = with_cache(true, |memo| {
            tuner.search(&source, &mut *strategy(), &options, memo)
        })
        .expect("the source search");
        let (stored, _) = tuner
            .store(&source, &report, StorePolicy::KeepFaster)
            .expect("stored");
        assert!(stored.is_stored(), "{stored:?}");
        eprintln!(
            "transfer source: tiled matmul {n}, winner {:?} at {:.4} ms",
            report.winner.point,
            report.winner.measurement.time * 1e3,
            n = s.n
        );
    }

    let size = RefWorkload::new(Tiled::new(s.n_changed), &gcc, base_options());
    let c = compare("size", &gcc, &size, dir.path(), &s, order.wrapping_add(1));
    print("size", &c);

    let mut o3 = base_options();
    o3.push("-O3".to_string());
    let option = RefWorkload::new(Tiled::new(s.n), &gcc, o3);
    let c = compare(
        "option",
        &gcc,
        &option,
        dir.path(),
        &s,
        order.wrapping_add(2),
    );
    print("option", &c);

    let compiler = RefWorkload::new(Tiled::new(s.n), &clang, base_options());
    let c = compare(
        "compiler",
        &clang,
        &compiler,
        dir.path(),
        &s,
        order.wrapping_add(3),
    );
    print("compiler", &c);
}
