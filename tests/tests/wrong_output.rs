//! Every candidate is checked against a Rust reference before it can win: a compiler
//! that miscompiles some candidates (a real wrapper script around `cc`) gets them
//! rejected, and the winner is a correct one.

use kcache_demo::{DemoError, DemoOptions, Origin, run};

/// A "compiler" that edits the C file with `sed` before compiling it with `cc`.
fn sabotaging_compiler(dir: &std::path::Path, sed: &str) -> String {
    test_support::cc::wrapper(dir, "evil-cc", &format!("sed -i '{sed}' \"$a\""))
}

#[test]
fn miscompiled_candidates_are_rejected_and_never_win() {
    let tmp = tempfile::tempdir().expect("tempdir");
    // Loops of 128 iterations lose their last one: only rowdot candidates that split both
    // loops (no loop of extent 128 left) compute the right dot products.
    let compiler = sabotaging_compiler(tmp.path(), "s/< 128; ++/< 127; ++/g");
    let mut options = DemoOptions::new(tmp.path().join("cache"));
    options.kernels = Some(vec!["rowdot".to_string()]);
    options.round1 = 24; // the whole space
    options.round2 = 0;
    options.reps = 1;
    options.progress = false;
    options.compiler = Some(compiler);
    let report = run(&options).expect("some candidates are correct");
    let k = &report.kernels[0];
    assert_eq!(k.origin, Origin::Searched);
    assert_eq!(k.candidates, 24);
    assert!(k.rejected >= 12, "rejected {}", k.rejected);
    assert!(k.schedule.contains("split(c,"), "{}", k.schedule);
    assert!(k.schedule.contains("split(r,"), "{}", k.schedule);
    assert!(
        k.baseline_seconds.is_none(),
        "the unscheduled code was wrong too"
    );
}

#[test]
fn a_kernel_with_no_correct_candidate_fails_the_run_clearly() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let compiler = sabotaging_compiler(tmp.path(), "s/0\\.5f/0.25f/g");
    let mut options = DemoOptions::new(tmp.path().join("cache"));
    options.kernels = Some(vec!["chain".to_string()]);
    (
        options.round1,
        options.round2,
        options.reps,
        options.progress,
    ) = (3, 0, 1, false);
    options.compiler = Some(compiler);
    match run(&options) {
        Err(DemoError::NoCorrectCandidate(name)) => assert_eq!(name, "chain"),
        other => panic!("expected NoCorrectCandidate, got {other:?}"),
    }
    // Nothing was stored for it.
    assert!(
        !tmp.path().join("cache").join("regime.stamp").exists() || {
            let inv =
                schedule_cache::admin::inventory(&tmp.path().join("cache")).expect("inventory");
            inv.entries.is_empty()
        }
    );
}

#[test]
fn a_missing_compiler_is_a_clear_error() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut options = DemoOptions::new(tmp.path().join("cache"));
    options.progress = false;
    options.compiler = Some("/nonexistent/kcache-no-such-cc".to_string());
    let err = run(&options).expect_err("no compiler");
    assert!(matches!(err, DemoError::NoCompiler(_)), "{err:?}");
    assert!(err.to_string().contains("no working C compiler"), "{err}");
}

#[test]
fn a_replayed_winner_that_computes_a_wrong_result_is_a_miss_searched_and_replaced() {
    let tmp = tempfile::tempdir().expect("tempdir");
    // The same compiler command (so the same key) in both runs; while `flag` exists, its
    // next compile of C files (and only that one) turns chain's `0.5f` into `0.25f`.
    let flag = tmp.path().join("sabotage-once");
    let script = tmp.path().join("once-cc.sh");
    std::fs::write(
        &script,
        format!(
            "case \"$*\" in *.c*) if rm {flag} 2>/dev/null; then for a in \"$@\"; do case \"$a\" in *.c) sed -i 's/0\\.5f/0.25f/g' \"$a\";; esac; done; fi;; esac\nexec cc \"$@\"\n",
            flag = flag.display()
        ),
    )
    .expect("write script");
    let mut options = DemoOptions::new(tmp.path().join("cache"));
    options.kernels = Some(vec!["chain".to_string()]);
    (
        options.round1,
        options.round2,
        options.reps,
        options.progress,
    ) = (3, 1, 1, false);
    options.compiler = Some(format!("sh {}", script.display()));
    // Programs only in memory: the second run compiles its replayed winner again.
    options.kernel_store = false;
    let first = run(&options).expect("first run");
    assert_eq!(first.totals.disk_stored, 1);

    std::fs::write(&flag, "").expect("arm the sabotage");
    let second = run(&options).expect("a wrong replay is a miss, not a failed run");
    assert!(
        !flag.exists(),
        "the replayed winner was compiled (sabotaged)"
    );
    let k = &second.kernels[0];
    assert_eq!(k.origin, Origin::Searched);
    assert!(k.disk_lookup.starts_with("miss"), "{}", k.disk_lookup);
    assert!(k.disk_lookup.contains("wrong result"), "{}", k.disk_lookup);
    assert_eq!(second.totals.disk_hits, 0);
    assert_eq!(
        second.totals.disk_stored, 1,
        "the new winner replaces the entry"
    );
    assert_eq!(k.key, first.kernels[0].key);

    let third = run(&options).expect("third run");
    assert_eq!(third.kernels[0].origin, Origin::Replayed);
    assert_eq!(third.kernels[0].schedule_ron, k.schedule_ron);
}
