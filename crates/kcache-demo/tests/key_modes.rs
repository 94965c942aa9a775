//! The demo's comparison modes, with the real C compiler: `--keys verbatim` compiles every
//! kernel whose exact text is new (and the report's count of verbatim compiles agrees with
//! what the verbatim-keyed cache really compiled), canonical keys compile fewer over the
//! same kind of search, and `--no-memo` runs every measurement.

use kcache_demo::{DemoOptions, KeyMode, Origin, Report, run};

/// A small search of the softmax (two segments: its candidates share renamed twins).
fn search(keys: KeyMode, memo: bool) -> Report {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut options = DemoOptions::new(dir.path().join("cache"));
    options.kernels = Some(vec!["softmax".to_string()]);
    (
        options.round1,
        options.round2,
        options.reps,
        options.progress,
    ) = (5, 5, 1, false);
    options.keys = keys;
    options.memo = memo;
    let report = run(&options).expect("the demo runs");
    assert_eq!(report.kernels[0].origin, Origin::Searched);
    assert_eq!((report.keys, report.memo), (keys, memo));
    report
}

#[test]
fn verbatim_keys_compile_every_new_text_and_the_count_agrees() {
    let verbatim = search(KeyMode::Verbatim, true);
    let t = verbatim.totals;
    // Every candidate is rendered with fresh names, so its exact text is new: all
    // compiled; the finalists re-rendered for their interleaved re-measurement (the same
    // code, so mostly the same text) are the only repeats.
    assert!(t.kernels_compiled <= t.kernels_rendered, "{verbatim}");
    assert!(
        t.kernels_compiled >= 2 * verbatim.kernels[0].candidates as u64,
        "{verbatim}"
    );
    assert_eq!(t.verbatim_compiles, t.kernels_compiled, "{verbatim}");
    assert!(verbatim.to_string().contains("kernel keys: verbatim"));
}

#[test]
fn canonical_keys_compile_fewer_than_verbatim_over_the_same_stream() {
    let canonical = search(KeyMode::Canonical, true);
    let t = canonical.totals;
    // Fresh names per candidate: only the finalists' re-renders repeat a text.
    assert!(t.verbatim_compiles <= t.kernels_rendered, "{canonical}");
    assert!(
        t.verbatim_compiles >= 2 * canonical.kernels[0].candidates as u64,
        "{canonical}"
    );
    assert!(
        t.kernels_compiled < t.verbatim_compiles,
        "renamed twins share compiles: {canonical}"
    );
    assert!(canonical.to_string().contains(&format!(
        "would have compiled {} kernels",
        t.verbatim_compiles
    )));
}

#[test]
fn without_the_memo_table_every_measurement_runs() {
    let report = search(KeyMode::Canonical, false);
    let t = report.totals;
    assert_eq!(t.memo_hits, 0);
    assert_eq!(
        t.memo_misses as usize, report.kernels[0].candidates,
        "{report}"
    );
    assert!(report.to_string().contains("memo table: off"));
}
