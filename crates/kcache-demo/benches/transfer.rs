//! Sound transfer figures (issue 24): how much a search seeded from earlier winners saves,
//! with the real C compiler. One invocation: a cold demo run at the default regime (64x64x64
//! matmul, the demo's compiler options) stores its winners; then, in the same cache,
//!
//! - a **codegen change** (`-O3` added to the compiler options: every winner is a miss whose
//!   same-code entries differ in codegen), every kernel searched from its seeds, and
//! - a **size change** (matmul 96x96x96: other code of the same loop nest), searched from the
//!   64x64x64 winner,
//!
//! each with `compare_cold`: an unseeded search of the same budget runs in the same process
//! and both winners are re-measured side by side, interleaved. Printed, per change (`codegen`,
//! `size`), as `FIGURE <name> <subject> <baseline>`:
//!
//! - `transfer_trials_to_match_<change>`: the first trial (in the seeded search's order)
//!   measured within 5% of the cold search's winner, over the cold search's trial budget
//!   (the median over kernels; a search that never came within 5% counts the budget plus one);
//! - `transfer_final_quality_<change>`: the seeded winner's time over the cold winner's, both
//!   re-measured side by side (the median over kernels).
//!
//! Without `--bench` (as `cargo xtask test` runs it) it runs a small version.

use kcache_demo::{DemoOptions, Report, run};

fn options(dir: &std::path::Path, small: bool) -> DemoOptions {
    let mut o = DemoOptions::new(dir);
    o.progress = false;
    if small {
        o.kernels = Some(vec!["matmul".to_string()]);
        (o.round1, o.round2, o.reps) = (4, 2, 1);
    } else if std::env::var("KCACHE_BENCH_QUICK").as_deref() == Ok("1") {
        o.reps = 3;
    }
    o
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// The two figures of a seeded run: (trials to match, their budget) and (seeded, cold).
fn figures(report: &Report) -> ((f64, f64), (f64, f64)) {
    let (mut trials, mut quality) = (Vec::new(), Vec::new());
    for k in &report.kernels {
        let cold = k
            .seeding
            .as_ref()
            .and_then(|s| s.cold.as_ref())
            .unwrap_or_else(|| panic!("{} was not compared with a cold search", k.name));
        let budget = cold.cold_trials as f64;
        let to_match = cold.trials_to_match.map_or(budget + 1.0, |t| t as f64);
        trials.push(to_match / budget);
        quality.push(cold.seeded_seconds / cold.cold_seconds);
    }
    // Printed as subject and baseline whose ratio is the median over kernels.
    ((median(trials), 1.0), (median(quality), 1.0))
}

fn main() {
    let bench = std::env::args().any(|a| a == "--bench");
    let small = !bench;
    let dir = tempfile::tempdir().expect("a temporary directory");
    let cache = dir.path().join("cache");

    let cold = run(&options(&cache, small)).expect("the cold run");
    assert!(cold.kernels.iter().all(|k| k.seeding.is_some()));

    let mut codegen = options(&cache, small);
    codegen.extra_options = vec!["-O3".to_string()];
    codegen.compare_cold = true;
    let codegen = run(&codegen).expect("the run after a codegen change");

    let mut size = options(&cache, small);
    size.kernels = Some(vec!["matmul".to_string()]);
    size.size = Some(96);
    size.compare_cold = true;
    let size = run(&size).expect("the run after a size change");

    let tag = if bench { "" } else { "test mode: " };
    for (change, report) in [("codegen", &codegen), ("size", &size)] {
        for k in &report.kernels {
            let s = k.seeding.as_ref().expect("searched with seeding");
            assert!(s.offered > 0, "{change}: {} was offered no seed", k.name);
        }
    }
    let ((t, tb), (q, qb)) = figures(&codegen);
    println!("{tag}FIGURE transfer_trials_to_match_codegen {t:.4} {tb:.4}");
    println!("{tag}FIGURE transfer_final_quality_codegen {q:.4} {qb:.4}");
    let ((t, tb), (q, qb)) = figures(&size);
    println!("{tag}FIGURE transfer_trials_to_match_size {t:.4} {tb:.4}");
    println!("{tag}FIGURE transfer_final_quality_size {q:.4} {qb:.4}");
}
