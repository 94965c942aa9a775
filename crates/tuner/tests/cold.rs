//! The cold-comparison harness with real compiles: the cold search's memo table is its
//! own, and a useless seed leaves the trials ratio near or above 1 (so the transfer
//! figure can fail).

mod support;

use cc_backend::CcBackend;
use memo_cache::with_cache;
use reference_ir::schedule::ReferenceLanguage;
use support::{Matmul, Problem, RefWorkload, base_options, kernel_cache};
use tuner::{
    ColdOptions, Measure, NeighbourhoodSearch, ProgressMode, SearchOptions, Strategy, Tuner,
};

fn strategy() -> Box<dyn Strategy> {
    Box::new(NeighbourhoodSearch::new(6, 2))
}

/// The workload under another regime: one more define, so its entries are seeds of the
/// same code differing in codegen.
fn other_regime(backend: &CcBackend, n: usize, define: &str) -> RefWorkload<Matmul> {
    let mut options = base_options();
    options.push(format!("-D{define}"));
    RefWorkload::new(Matmul { n }, backend, options)
}

#[test]
fn cold_memo_is_its_own() {
    let backend = CcBackend::new().expect("a C compiler");
    let dir = tempfile::tempdir().expect("tempdir");
    let target = RefWorkload::new(Matmul { n: 8 }, &backend, base_options());
    let source = other_regime(&backend, 8, "KCACHE_SOURCE");
    source.store_point(&backend, dir.path(), &[1, 0, 2, 2, 1]);
    let schedules = target.schedules(&backend, dir.path());
    let cache = kernel_cache();
    let tuner = Tuner::new(&schedules, &backend, &cache)
        .with_measure(Measure::quick())
        .with_progress(ProgressMode::Quiet);
    // Each search covers the whole space, so every cold candidate was measured by the
    // seeded search first: a shared table would answer all of them.
    let budget = target.space.len();
    let options = ColdOptions {
        budget,
        batch: 32,
        rounds: 3,
        ..ColdOptions::default()
    };
    let c = tuner
        .compare_cold(&target, &mut strategy, &options)
        .expect("compared");
    let seeds = c.seeded.seeds.as_ref().expect("a seed round");
    assert_eq!((seeds.offered, seeds.attempted), (1, 1), "{seeds:?}");
    assert_eq!(
        c.seeded.trials[0].point.as_deref(),
        Some(&[1, 0, 2, 2, 1][..])
    );
    assert_eq!(c.seeded.attempts, budget);
    assert_eq!(c.cold.attempts, budget);
    assert!(c.cold.seeds.is_none());
    assert_eq!(c.cold.memo_hits, 0, "the cold search read another table");
    assert_eq!(c.cold.memo_misses, c.cold.trials.len() as u64);
    assert_eq!(c.seeded.memo_hits, 0);
    // The orders differ (independent seeds), and both winners were re-measured.
    let order = |r: &tuner::SearchReport<_, _>| -> Vec<Option<Vec<usize>>> {
        r.trials.iter().map(|t| t.point.clone()).collect()
    };
    assert_ne!(order(&c.seeded)[1..9], order(&c.cold)[..8]);
    assert_eq!(c.seeded_time.samples.len(), 3);
    assert_eq!(c.cold_time.samples.len(), 3);
    assert!(c.quality().is_finite() && c.trials_ratio() > 0.0);
}

/// A seed that is the winner of unrelated code (the schedule a row-wise reduction would
/// pick: loops in ijk order, the innermost reduction unrolled) costs the seeded search a
/// trial and saves it nothing: over paired rounds with independent orders, the median
/// trials ratio stays near or above 1.
#[test]
fn a_useless_seed_leaves_the_ratio_near_one() {
    let backend = CcBackend::new().expect("a C compiler");
    let dir = tempfile::tempdir().expect("tempdir");
    let target = RefWorkload::new(Matmul { n: 32 }, &backend, base_options());
    let unrelated = other_regime(&backend, 32, "KCACHE_UNRELATED");
    let useless = [0, 0, 0, 1, 0];
    unrelated.store_point(&backend, dir.path(), &useless);
    let schedules = target.schedules(&backend, dir.path());
    let cache = kernel_cache();
    let tuner = Tuner::new(&schedules, &backend, &cache)
        .with_measure(Measure::quick())
        .with_progress(ProgressMode::Quiet);
    let mut ratios = Vec::new();
    for round in 0..7u64 {
        let options = ColdOptions {
            budget: 16,
            batch: 8,
            seeded_order: 1000 + round,
            cold_order: 2000 + round,
            rounds: 5,
            ..ColdOptions::default()
        };
        let c = tuner
            .compare_cold(&target, &mut strategy, &options)
            .expect("compared");
        assert_eq!(c.seeded.trials[0].point.as_deref(), Some(&useless[..]));
        eprintln!(
            "round {round}: seeded {:?} cold {:?} ratio {:.2} quality {:.2}",
            c.seeded_trials,
            c.cold_trials,
            c.trials_ratio(),
            c.quality()
        );
        ratios.push(c.trials_ratio());
    }
    ratios.sort_by(f64::total_cmp);
    let median = ratios[ratios.len() / 2];
    assert!(
        median >= 0.5,
        "a useless seed cannot make the seeded search need half the trials: {ratios:?}"
    );
}

#[test]
fn search_options_are_checked() {
    let backend = CcBackend::new().expect("a C compiler");
    let dir = tempfile::tempdir().expect("tempdir");
    let w = RefWorkload::new(Matmul { n: 8 }, &backend, base_options());
    let schedules = w.schedules(&backend, dir.path());
    let cache = kernel_cache();
    let tuner: Tuner<'_, ReferenceLanguage, _, _> =
        Tuner::new(&schedules, &backend, &cache).with_progress(ProgressMode::Quiet);
    let zero = SearchOptions {
        budget: 0,
        ..SearchOptions::default()
    };
    let err = with_cache(true, |memo| tuner.search(&w, &mut *strategy(), &zero, memo))
        .expect_err("a zero budget");
    assert!(err.to_string().contains("budget"), "{err}");
    let _ = Matmul { n: 8 }.len();
}
