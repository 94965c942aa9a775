//! End-to-end figures of a tuning session (issue 15): the demo's whole search
//! ([`kcache_demo::run`], full settings, a fresh cache directory each time) in each mode,
//! with the real C compiler. Given `--bench`, one measurement of each figure is printed as
//! `FIGURE <name> <subject> <baseline>` (`cargo xtask bench` runs this once per round and
//! reports the median ratio over the rounds with its spread):
//!
//! - `demo_compiles_canonical_vs_verbatim`: kernels compiled with canonical keys against
//!   kernels a cache keyed by the SHA-256 of the exact text and options (Triton's and
//!   ccache's keys) compiles over the *same* candidate stream (counted in the same run);
//! - `demo_wall_canonical_vs_verbatim`: the session's wall time with canonical keys against
//!   the same search with `--keys verbatim` (a separate run; the search is steered by
//!   timings, so its stream may differ slightly);
//! - `demo_wall_memo_vs_no_memo`: the session's wall time with the memo table against a
//!   session without it (`--no-memo`), both with canonical keys;
//! - `demo_measure_memo_vs_no_memo`: the time spent measuring in those two sessions;
//! - `demo_measurements_memo_vs_no_memo`: the measurements actually run in them (the
//!   others answered by the memo table).
//!
//! Runs alternate their order from one invocation to the next (by the clock), so a load
//! spike does not always fall on the same mode. Without `--bench` (as `cargo xtask test`
//! runs it) it runs one small search per mode and checks the counts agree.

use std::time::{SystemTime, UNIX_EPOCH};

use kcache_demo::{DemoOptions, KeyMode, Report, run};

/// One fresh session in `keys` mode, with or without the memo table.
fn session(keys: KeyMode, memo: bool, small: bool) -> Report {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let mut options = DemoOptions::new(dir.path().join("cache"));
    options.progress = false;
    options.keys = keys;
    options.memo = memo;
    if small {
        options.kernels = Some(vec!["softmax".to_string()]);
        (options.round1, options.round2, options.reps) = (4, 4, 1);
    }
    run(&options).expect("the demo runs")
}

fn main() {
    let bench = std::env::args().any(|a| a == "--bench");
    let small = !bench;
    let flip = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
        % 2
        == 1;
    let modes = [
        (KeyMode::Canonical, true),
        (KeyMode::Verbatim, true),
        (KeyMode::Canonical, false),
    ];
    let mut reports: Vec<Option<Report>> = vec![None, None, None];
    let order: Vec<usize> = if flip { vec![2, 1, 0] } else { vec![0, 1, 2] };
    for i in order {
        let (keys, memo) = modes[i];
        reports[i] = Some(session(keys, memo, small));
    }
    let reports: Vec<Report> = reports
        .into_iter()
        .map(|r| r.expect("every mode ran"))
        .collect();
    let (canonical, verbatim, no_memo) = (&reports[0], &reports[1], &reports[2]);
    let (c, v, n) = (canonical.totals, verbatim.totals, no_memo.totals);
    // What each figure stands on, checked every time.
    assert!(c.verbatim_compiles >= c.kernels_compiled);
    assert_eq!(v.kernels_compiled, v.verbatim_compiles);
    assert_eq!(n.memo_hits, 0);

    let tag = if bench { "" } else { "test mode: " };
    println!(
        "{tag}FIGURE demo_compiles_canonical_vs_verbatim {} {}",
        c.kernels_compiled, c.verbatim_compiles
    );
    println!(
        "{tag}FIGURE demo_wall_canonical_vs_verbatim {:.4} {:.4}",
        canonical.total_seconds, verbatim.total_seconds
    );
    println!(
        "{tag}FIGURE demo_wall_memo_vs_no_memo {:.4} {:.4}",
        canonical.total_seconds, no_memo.total_seconds
    );
    println!(
        "{tag}FIGURE demo_measure_memo_vs_no_memo {:.4} {:.4}",
        c.measure_seconds, n.measure_seconds
    );
    println!(
        "{tag}FIGURE demo_measurements_memo_vs_no_memo {} {}",
        c.memo_misses, n.memo_misses
    );
    println!(
        "# canonical: {} rendered, {} compiled ({} by verbatim keys over the same stream), {}/{} measurements from the memo table, {:.2} s compiling, {:.2} s measuring, {:.2} s in all",
        c.kernels_rendered,
        c.kernels_compiled,
        c.verbatim_compiles,
        c.memo_hits,
        c.memo_hits + c.memo_misses,
        c.compile_seconds,
        c.measure_seconds,
        canonical.total_seconds
    );
    println!(
        "# verbatim: {} rendered, {} compiled, {}/{} measurements from the memo table, {:.2} s compiling, {:.2} s measuring, {:.2} s in all",
        v.kernels_rendered,
        v.kernels_compiled,
        v.memo_hits,
        v.memo_hits + v.memo_misses,
        v.compile_seconds,
        v.measure_seconds,
        verbatim.total_seconds
    );
    println!(
        "# no memo: {} rendered, {} compiled, {} measurements run, {:.2} s compiling, {:.2} s measuring, {:.2} s in all",
        n.kernels_rendered,
        n.kernels_compiled,
        n.memo_misses,
        n.compile_seconds,
        n.measure_seconds,
        no_memo.total_seconds
    );
}
