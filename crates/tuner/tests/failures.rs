//! Failures with real compiles: a candidate that fails to compile is skipped and reported
//! (and, through a kernel store, remembered and not compiled again); a stored winner that
//! no longer applies is unusable and replaced; a seed that fails is counted with its reason.

mod support;

use cc_backend::CcBackend;
use kernel_cache::store::KernelStore;
use memo_cache::with_cache;
use reference_ir::schedule::RefOp;
use support::{Matmul, RefWorkload, base_options, kernel_cache};
use tuner::{Measure, ProgressMode, RandomSearch, Replayed, SearchOptions, Tuned, Tuner, Workload};

fn unrolls(w: &RefWorkload<Matmul>, point: &[usize]) -> bool {
    let code = w.build();
    w.ops_at(&code, point)
        .is_some_and(|ops| ops.iter().any(|o| matches!(o, RefOp::Unroll { .. })))
}

#[test]
fn failing_candidates_are_skipped_reported_and_remembered() {
    let backend = CcBackend::new().expect("a C compiler");
    let dir = tempfile::tempdir().expect("tempdir");
    let mut w = RefWorkload::new(Matmul { n: 16 }, &backend, base_options());
    w.poison_unroll = true;
    let schedules = w.schedules(&backend, &dir.path().join("schedules"));
    let store = KernelStore::new(dir.path().join("kernels"));
    let options = SearchOptions {
        budget: w.space.len(),
        batch: 16,
        ..SearchOptions::default()
    };
    let search = || {
        let cache = kernel_cache();
        let tuner = Tuner::new(&schedules, &backend, &cache)
            .with_kernel_store(Some(&store))
            .with_measure(Measure::quick())
            .with_progress(ProgressMode::Quiet);
        with_cache(true, |memo| {
            tuner.search(&w, &mut RandomSearch::new(), &options, memo)
        })
        .expect("a search with a winner")
    };
    let first = search();
    let unrolling = w.space.legal().iter().filter(|p| unrolls(&w, p)).count();
    assert!(unrolling > 0);
    assert_eq!(first.failed.len(), unrolling, "{:?}", first.failed);
    assert_eq!(first.trials.len() + unrolling, w.space.len());
    for f in &first.failed {
        let point = f.point.as_deref().expect("a point");
        assert!(unrolls(&w, point), "{point:?} failed: {}", f.why);
        assert!(!f.why.is_empty());
    }
    // Compiled and failed here (a later batch may meet a kernel failed earlier: remembered).
    assert!(first.failed.iter().any(|f| !f.remembered));
    let winner = first.winner.point.as_deref().expect("a point");
    assert!(!unrolls(&w, winner));

    // A fresh process's kernel cache, the same store: the failures are remembered.
    let second = search();
    assert_eq!(second.failed.len(), unrolling);
    assert!(
        second.failed.iter().all(|f| f.remembered),
        "{:?}",
        second.failed
    );
    // Nothing failing was compiled again (candidates sharing a failed kernel count it once).
    assert!(second.census.kernels_remembered_failed > 0);
    assert_eq!(second.census.kernels_failed, 0);
}

#[test]
fn a_stored_winner_that_does_not_apply_is_unusable_and_replaced() {
    let backend = CcBackend::new().expect("a C compiler");
    let dir = tempfile::tempdir().expect("tempdir");
    // n = 8: a split by 16 does not apply to its loops of 8; stored anyway.
    let w = RefWorkload::new(Matmul { n: 8 }, &backend, base_options());
    let bad = [1, 0, 3, 0, 0];
    w.store_point(&backend, dir.path(), &bad);
    let schedules = w.schedules(&backend, dir.path());
    let cache = kernel_cache();
    let tuner = Tuner::new(&schedules, &backend, &cache)
        .with_measure(Measure::quick())
        .with_progress(ProgressMode::Quiet);
    match tuner.replay(&w).expect("replay") {
        Replayed::Unusable { why, .. } => assert!(why.contains("does not apply"), "{why}"),
        other => panic!("expected an unusable entry, got {other:?}"),
    }
    let options = SearchOptions {
        budget: 6,
        ..SearchOptions::default()
    };
    let tuned = with_cache(true, |memo| {
        tuner.tune(&w, &mut RandomSearch::new(), &options, memo)
    })
    .expect("tuned");
    let Tuned::Searched { miss, stored, .. } = tuned else {
        panic!("an unusable entry is never replayed");
    };
    assert!(miss.contains("cannot be used"), "{miss}");
    // Replaced whatever its (fake, tiny) stored time.
    assert!(stored.is_stored(), "{stored:?}");
    assert!(matches!(
        tuner.replay(&w).expect("replay"),
        Replayed::Hit(_)
    ));
}

#[test]
fn seeds_that_fail_or_exceed_the_cap_are_counted_with_reasons() {
    let backend = CcBackend::new().expect("a C compiler");
    let dir = tempfile::tempdir().expect("tempdir");
    // A winner at n = 32 that splits by 16: near code at n = 8, where it cannot apply.
    let big = RefWorkload::new(Matmul { n: 32 }, &backend, base_options());
    big.store_point(&backend, dir.path(), &[1, 0, 3, 0, 0]);
    let small = RefWorkload::new(Matmul { n: 8 }, &backend, base_options());
    let schedules = small.schedules(&backend, dir.path());
    let cache = kernel_cache();
    let tuner = Tuner::new(&schedules, &backend, &cache)
        .with_measure(Measure::quick())
        .with_progress(ProgressMode::Quiet);
    let options = SearchOptions {
        budget: 4,
        ..SearchOptions::default()
    };
    let report = with_cache(true, |memo| {
        tuner.search(&small, &mut RandomSearch::new(), &options, memo)
    })
    .expect("a search");
    let seeds = report.seeds.as_ref().expect("a seed round");
    assert_eq!(
        (seeds.offered, seeds.attempted, seeds.failed),
        (1, 1, 1),
        "{seeds:?}"
    );
    let failed = &report.failed[0];
    assert_eq!(failed.attempt, 1, "seeds go first");
    assert!(matches!(failed.origin, tuner::Origin::Seed { .. }));
    assert_eq!(
        report.attempts, 4,
        "the failed seed counts against the budget"
    );

    // With no room for seeds, the seed is dropped, with the reason.
    let none = SearchOptions {
        max_seeds: 0,
        ..options
    };
    let report = with_cache(true, |memo| {
        tuner.search(&small, &mut RandomSearch::new(), &none, memo)
    })
    .expect("a search");
    let seeds = report.seeds.as_ref().expect("a seed round");
    assert_eq!((seeds.offered, seeds.attempted), (1, 0));
    assert!(
        seeds.dropped[0].reason.contains("more than the 0 seeds"),
        "{seeds:?}"
    );
}

fn vectorizes(w: &RefWorkload<Matmul>, point: &[usize]) -> bool {
    let code = w.build();
    w.ops_at(&code, point)
        .is_some_and(|ops| ops.iter().any(|o| matches!(o, RefOp::Vectorize { .. })))
}

#[test]
fn a_candidate_with_wrong_output_is_rejected_never_a_winner_never_stored() {
    let backend = CcBackend::new().expect("a C compiler");
    let dir = tempfile::tempdir().expect("tempdir");
    let mut w = RefWorkload::new(Matmul { n: 16 }, &backend, base_options());
    w.miscompute_vectorize = true;
    let schedules = w.schedules(&backend, dir.path());
    let cache = kernel_cache();
    let tuner = Tuner::new(&schedules, &backend, &cache)
        .with_measure(Measure::quick())
        .with_progress(ProgressMode::Quiet);
    let options = SearchOptions {
        budget: w.space.len(),
        batch: 16,
        ..SearchOptions::default()
    };
    let tuned = with_cache(true, |memo| {
        tuner.tune(&w, &mut RandomSearch::new(), &options, memo)
    })
    .expect("tuned");
    let Tuned::Searched { report, stored, .. } = tuned else {
        panic!("nothing to replay");
    };
    let mut rejected = 0;
    for t in &report.trials {
        let point = t.point.as_deref().expect("a point");
        if vectorizes(&w, point) {
            assert!(!t.measurement.correct, "{point:?} was accepted");
            assert!(
                t.measurement
                    .wrong
                    .as_deref()
                    .is_some_and(|w| w.contains("error"))
            );
            rejected += 1;
        } else {
            assert!(
                t.measurement.correct,
                "{point:?}: {:?}",
                t.measurement.wrong
            );
        }
    }
    assert!(rejected > 0);
    assert!(stored.is_stored());
    let winner = report.winner.point.as_deref().expect("a point");
    assert!(!vectorizes(&w, winner), "a wrong candidate won: {winner:?}");
    assert!(report.finalists.iter().all(|f| f.remeasured.correct));
    match tuner.replay(&w).expect("replay") {
        Replayed::Hit(hit) => assert!(hit.measurement.correct),
        other => panic!("the stored winner should replay: {other:?}"),
    }
}
