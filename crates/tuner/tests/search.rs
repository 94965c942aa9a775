//! The tuner against real cc compiles: a search drives real batches, a failing candidate is
//! skipped and reported, the store keeps the winner and a replay checks it.

mod support;

use cc_backend::CcBackend;
use memo_cache::with_cache;
use support::{Matmul, RefWorkload, base_options, kernel_cache};
use tuner::{
    Measure, NeighbourhoodSearch, ProgressMode, RandomSearch, Replayed, SearchOptions, Tuned, Tuner,
};

fn backend() -> CcBackend {
    CcBackend::new().expect("a C compiler")
}

#[test]
fn a_search_measures_within_budget_and_replays_its_stored_winner() {
    let backend = backend();
    let dir = tempfile::tempdir().expect("tempdir");
    let w = RefWorkload::new(Matmul { n: 32 }, &backend, base_options());
    assert_eq!(w.space.len(), 64);
    let schedules = w.schedules(&backend, dir.path());
    let cache = kernel_cache();
    let tuner = Tuner::new(&schedules, &backend, &cache)
        .with_measure(Measure::quick())
        .with_progress(ProgressMode::Lines);
    let options = SearchOptions {
        budget: 10,
        batch: 5,
        order_seed: 3,
        ..SearchOptions::default()
    };
    let tuned = with_cache(true, |memo| {
        tuner.tune(&w, &mut NeighbourhoodSearch::new(5, 2), &options, memo)
    })
    .expect("tuned");
    let Tuned::Searched { report, stored, .. } = tuned else {
        panic!("an empty cache replays nothing");
    };
    assert!(stored.is_stored(), "{stored:?}");
    assert_eq!(report.attempts, 10);
    assert_eq!(report.trials.len() + report.failed.len(), 10);
    assert!(report.baseline.is_some(), "the baseline is tried first");
    assert_eq!(
        report.trials[0].point.as_deref(),
        Some(&[0, 0, 0, 0, 0][..])
    );
    assert!(report.winner.measurement.correct);
    assert!(report.winner.measurement.samples.len() >= 3);
    assert_eq!(report.memo_misses, report.trials.len() as u64);
    // The winner is the fastest finalist as re-measured.
    let best = report
        .finalists
        .iter()
        .map(|f| f.remeasured.time)
        .fold(f64::INFINITY, f64::min);
    assert_eq!(report.winner.measurement.time, best);

    // Under keep-faster (the tuner's default), a faster entry stored meanwhile stays.
    assert_eq!(
        tuner.store_policy(),
        schedule_cache::StorePolicy::KeepFaster
    );
    let faster = RefWorkload::new(Matmul { n: 32 }, &backend, base_options());
    let code = tuner::Workload::build(&faster);
    let placements = tuner::Workload::placements(&faster, &code);
    let ops = tuner::Workload::ops_at(&faster, &code, &[1, 0, 0, 0, 0]).expect("legal");
    let fake = schedules
        .store_with_policy(
            schedule_cache::Subject::new(&code).with_placements(&placements),
            &ops,
            schedule_cache::Measurements::new(vec![1e-12]),
            schedule_cache::StorePolicy::LastWriteWins,
        )
        .expect("stored");
    assert!(fake.outcome.is_stored());
    let (again, _) = tuner
        .store(&w, &report, tuner.store_policy())
        .expect("offered");
    assert!(again.kept_existing().is_some(), "{again:?}");
    let (replaced, _) = tuner
        .store(&w, &report, schedule_cache::StorePolicy::LastWriteWins)
        .expect("offered");
    assert!(replaced.is_stored());

    // A second tuner over the same directory replays it, checked.
    let cache2 = kernel_cache();
    let again = Tuner::new(&schedules, &backend, &cache2)
        .with_measure(Measure::quick())
        .with_progress(ProgressMode::Quiet);
    match again.replay(&w).expect("replay") {
        Replayed::Hit(hit) => {
            assert!(hit.measurement.correct);
            assert_eq!(
                hit.baseline, report.baseline,
                "the stored baseline comes back"
            );
            // A fresh kernel cache and no kernel store: the winner's kernels are compiled.
            assert!(hit.census.kernels_compiled > 0);
        }
        other => panic!("expected a replay, got {other:?}"),
    }
}

#[test]
fn a_candidate_that_fails_to_compile_is_skipped_and_reported() {
    let backend = backend();
    let dir = tempfile::tempdir().expect("tempdir");
    // An option only some candidates' text trips: -Werror with an always-false check does
    // not exist portably, so a compiler error is made with a define the renderer never
    // writes: every kernel fails, and the search says so without a winner.
    let mut options = base_options();
    options.push("-include/nonexistent/header.h".to_string());
    let w = RefWorkload::new(Matmul { n: 16 }, &backend, options);
    let schedules = w.schedules(&backend, dir.path());
    let cache = kernel_cache();
    let tuner = Tuner::new(&schedules, &backend, &cache)
        .with_measure(Measure::quick())
        .with_progress(ProgressMode::Quiet);
    let options = SearchOptions {
        budget: 4,
        batch: 4,
        ..SearchOptions::default()
    };
    let err = with_cache(true, |memo| {
        tuner.search(&w, &mut RandomSearch::new(), &options, memo)
    })
    .expect_err("nothing compiles");
    let text = err.to_string();
    assert!(
        text.contains("no candidate computed a correct result"),
        "{text}"
    );
    assert!(text.contains("4 failed"), "{text}");
}

/// Run as a child process by `progress_is_plain_lines_off_a_terminal_and_nothing_when_quiet`
/// (the variable says which mode); a no-op in a normal run.
#[test]
fn progress_child() {
    let mode = match std::env::var("TUNER_PROGRESS_CHILD").as_deref() {
        Ok("auto") => ProgressMode::Auto,
        Ok("quiet") => ProgressMode::Quiet,
        _ => return,
    };
    let backend = backend();
    let dir = tempfile::tempdir().expect("tempdir");
    let w = RefWorkload::new(Matmul { n: 8 }, &backend, base_options());
    let schedules = w.schedules(&backend, dir.path());
    let cache = kernel_cache();
    let tuner = Tuner::new(&schedules, &backend, &cache)
        .with_measure(Measure::quick())
        .with_progress(mode);
    let options = SearchOptions {
        budget: 4,
        ..SearchOptions::default()
    };
    with_cache(true, |memo| {
        tuner.search(&w, &mut RandomSearch::new(), &options, memo)
    })
    .expect("a search");
}

#[test]
fn progress_is_plain_lines_off_a_terminal_and_nothing_when_quiet() {
    let run = |mode: &str| {
        let out = std::process::Command::new(std::env::current_exe().expect("the test binary"))
            .args([
                "--exact",
                "progress_child",
                "--nocapture",
                "--test-threads=1",
            ])
            .env("TUNER_PROGRESS_CHILD", mode)
            .stderr(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .output()
            .expect("the child runs");
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    // Standard error is a pipe here, not a terminal: Auto writes plain lines, no bar.
    let auto = run("auto");
    assert!(auto.contains("[tuner] matmul: batch 1: "), "{auto}");
    assert!(auto.contains("[tuner] matmul: winner: attempt "), "{auto}");
    assert!(
        !auto.contains('\u{1b}'),
        "no escape codes off a terminal: {auto}"
    );
    let quiet = run("quiet");
    assert!(!quiet.contains("[tuner]"), "{quiet}");
}

/// On a terminal (a pseudo-terminal from util-linux's `script`), Auto draws indicatif's bar.
#[test]
fn progress_is_a_bar_on_a_terminal() {
    let exe = std::env::current_exe().expect("the test binary");
    let command = format!(
        "{} --exact progress_child --nocapture --test-threads=1",
        exe.display()
    );
    let out = std::process::Command::new("script")
        .args(["-qec", &command, "/dev/null"])
        .env("TUNER_PROGRESS_CHILD", "auto")
        .stdin(std::process::Stdio::null())
        .output()
        .expect("`script` (util-linux) runs");
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("/4 trials"), "the bar: {text}");
    assert!(text.contains("\u{1b}["), "drawn with escape codes: {text}");
    assert!(
        !text.contains("[tuner]"),
        "no plain lines on a terminal: {text}"
    );
}
