//! Invariants of a search with real compiles, over random budgets, batches, orders and
//! strategies: the budget is respected, no point is attempted twice, the finalists are
//! the fastest candidates measured, and the winner is the best re-measured finalist.

mod support;

use cc_backend::CcBackend;
use memo_cache::with_cache;
use proptest::prelude::*;
use support::{Matmul, RefWorkload, base_options, kernel_cache};
use tuner::{
    Measure, NeighbourhoodSearch, ProgressMode, RandomSearch, SearchOptions, Strategy, Tuner,
};

#[test]
fn search_invariants() {
    let backend = CcBackend::new().expect("a C compiler");
    let dir = tempfile::tempdir().expect("tempdir");
    // n = 8: tiles of 16 do not apply, so some candidates fail and are skipped.
    let w = RefWorkload::new(Matmul { n: 8 }, &backend, base_options());
    let schedules = w.schedules(&backend, dir.path());
    let cache = kernel_cache();
    let tuner = Tuner::new(&schedules, &backend, &cache)
        .with_measure(Measure::quick())
        .with_progress(ProgressMode::Quiet);
    let config = ProptestConfig {
        cases: 24,
        ..ProptestConfig::default()
    };
    proptest!(config, |(
        budget in 1usize..40,
        batch in 1usize..12,
        order_seed in 0u64..1_000_000,
        baseline_first in any::<bool>(),
        neighbourhood in any::<bool>(),
    )| {
        let mut strategy: Box<dyn Strategy> = if neighbourhood {
            Box::new(NeighbourhoodSearch::new(4, 2))
        } else {
            Box::new(RandomSearch::new())
        };
        let options = SearchOptions { budget, batch, order_seed, baseline_first, ..SearchOptions::default() };
        let result = with_cache(true, |memo| tuner.search(&w, &mut *strategy, &options, memo));
        let report = match result {
            Ok(r) => r,
            // Every candidate of a tiny budget may have failed: then there is no winner.
            Err(tuner::Error::NoCorrectCandidate { measured: 0, failed, .. }) => {
                prop_assert!(failed > 0 && failed <= budget, "{} failed of {}", failed, budget);
                return Ok(());
            }
            Err(e) => return Err(TestCaseError::fail(e.to_string())),
        };
        prop_assert!(report.attempts <= budget);
        prop_assert_eq!(report.trials.len() + report.failed.len(), report.attempts);
        let mut points: Vec<Vec<usize>> = report.trials.iter().filter_map(|t| t.point.clone())
            .chain(report.failed.iter().filter_map(|f| f.point.clone()))
            .collect();
        let n = points.len();
        points.sort();
        points.dedup();
        prop_assert_eq!(points.len(), n, "a point attempted twice");
        // Attempt numbers are 1..=attempts, each once.
        let mut attempts: Vec<usize> = report.trials.iter().map(|t| t.attempt)
            .chain(report.failed.iter().map(|f| f.attempt)).collect();
        attempts.sort();
        prop_assert_eq!(attempts, (1..=report.attempts).collect::<Vec<_>>());
        // The finalists are the fastest correct candidates as the search measured them.
        let mut medians: Vec<f64> = report.trials.iter().filter(|t| t.measurement.correct)
            .map(|t| t.measurement.time).collect();
        medians.sort_by(f64::total_cmp);
        let mut finalists: Vec<f64> = report.finalists.iter().map(|f| f.search_time).collect();
        finalists.sort_by(f64::total_cmp);
        prop_assert_eq!(&finalists[..], &medians[..finalists.len()]);
        // The winner is the best re-measured finalist.
        let best = report.finalists.iter()
            .min_by(|a, b| a.remeasured.time.total_cmp(&b.remeasured.time))
            .expect("a finalist");
        prop_assert_eq!(report.winner.attempt, best.attempt);
        prop_assert_eq!(&report.winner.measurement, &best.remeasured);
        prop_assert!(report.winner.measurement.correct);
    });
}

/// Small budgets are spent exactly, the baseline first when asked (a budget of one tries
/// the baseline alone).
#[test]
fn small_budgets_are_spent_exactly() {
    let backend = CcBackend::new().expect("a C compiler");
    let dir = tempfile::tempdir().expect("tempdir");
    let w = RefWorkload::new(Matmul { n: 16 }, &backend, base_options());
    let schedules = w.schedules(&backend, dir.path());
    let cache = kernel_cache();
    let tuner = Tuner::new(&schedules, &backend, &cache)
        .with_measure(Measure::quick())
        .with_progress(ProgressMode::Quiet);
    for budget in 1..=3 {
        for baseline_first in [true, false] {
            for batch in [1, 2, 8] {
                let options = SearchOptions {
                    budget,
                    batch,
                    baseline_first,
                    ..SearchOptions::default()
                };
                let report = with_cache(true, |memo| {
                    tuner.search(&w, &mut RandomSearch::new(), &options, memo)
                })
                .expect("a search");
                assert_eq!(report.attempts, budget, "{options:?}");
                assert_eq!(report.trials.len(), budget);
                if baseline_first {
                    assert_eq!(report.trials[0].origin, tuner::Origin::Baseline);
                    assert!(report.baseline.is_some());
                }
            }
        }
    }
}
