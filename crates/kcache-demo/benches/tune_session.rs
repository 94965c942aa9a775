//! Tuning with kcache against a plain loop (issue 37): the demo's kernels tuned by the
//! tuner crate ([`kcache_demo::run`], a fresh cache directory) against
//! [`kcache_demo::plain_loop`], the same search written without kcache: the same
//! candidates (every one the tuner measured or its memo table answered, in order), each
//! rendered into a C file of its own and compiled by one `cc` into an executable, timed
//! with the same warm-up, samples and runs per sample, the same number of finalists
//! re-timed over the same rounds, and no memo, kernel cache or store. Printed, one paired
//! round per invocation (`cargo xtask bench` runs it once per round), as
//!
//! - `FIGURE tune_session_vs_plain <tuner s> <plain s>`: the first process's wall time
//!   (everything `run` does: probing the compiler, the searches, the store) over the
//!   plain loop's;
//! - `FIGURE tune_session_replay_vs_plain <second process s> <plain s>`: a second process
//!   (this binary again, `--child DIR`, timed from spawn to exit) tuning the same kernels
//!   with the store the first left (every winner replayed and checked) over the same plain
//!   loop.
//!
//! The plain loop goes second (it runs the tuner's exact candidates), finding the
//! compiler and its headers warm in the page cache. Without `--bench` (as `cargo xtask test` runs it) one small
//! kernel with a small budget; with `KCACHE_BENCH_QUICK=1` the two two-segment kernels
//! (matmul, softmax) with the demo's 12 + 12 candidates and at least 3 samples each; a full
//! run tunes all four kernels with the demo's settings (12 + 12 candidates, at least 7
//! samples).

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use kcache_demo::{DemoOptions, PlainCandidate, PlainOptions, Report, plain_loop, run};

#[derive(Clone, Copy, PartialEq)]
enum Size {
    Small,
    Quick,
    Full,
}

fn options(dir: &Path, size: Size) -> DemoOptions {
    let mut o = DemoOptions::new(dir);
    o.progress = false;
    match size {
        Size::Small => {
            o.kernels = Some(vec!["chain".to_string()]);
            (o.round1, o.round2, o.reps) = (3, 2, 1);
        }
        Size::Quick => {
            o.kernels = Some(vec!["matmul".to_string(), "softmax".to_string()]);
            o.reps = 3;
        }
        Size::Full => {}
    }
    o
}

fn size_of(name: &str) -> Size {
    match name {
        "small" => Size::Small,
        "quick" => Size::Quick,
        _ => Size::Full,
    }
}

/// The candidates the tuner's searches measured, as the plain loop runs them.
fn candidates(report: &Report) -> Vec<PlainCandidate> {
    report
        .kernels
        .iter()
        .flat_map(|k| {
            k.measured.iter().filter_map(|m| {
                Some(PlainCandidate {
                    kernel: k.name.clone(),
                    point: m.point.clone()?,
                    warmup: report.measure.warmup,
                    samples: m.samples,
                    iterations: m.iterations,
                })
            })
        })
        .collect()
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    // The second process: tune the same kernels with the first's store, print what it did.
    if let Some(at) = args.iter().position(|a| a == "--child") {
        let (dir, size) = (&args[at + 1], size_of(&args[at + 2]));
        let report = run(&options(Path::new(dir), size)).expect("the second process runs");
        println!(
            "CHILD replayed {} of {} compiled {}",
            report.replayed(),
            report.kernels.len(),
            report.totals.kernels_compiled
        );
        return;
    }
    let bench = args.iter().any(|a| a == "--bench");
    let size = if !bench {
        Size::Small
    } else if std::env::var("KCACHE_BENCH_QUICK").as_deref() == Ok("1") {
        Size::Quick
    } else {
        Size::Full
    };
    let size_name = match size {
        Size::Small => "small",
        Size::Quick => "quick",
        Size::Full => "full",
    };
    let tmp = tempfile::tempdir().expect("a temporary directory");
    let cache = tmp.path().join("cache");

    let tune = || {
        let start = Instant::now();
        let report = run(&options(&cache, size)).expect("the tuning session");
        (report, start.elapsed().as_secs_f64())
    };
    let plain = |candidates: &[PlainCandidate], measure: &tuner::Measure| {
        let work = tmp.path().join(format!("plain-{}", candidates.len()));
        let _ = std::fs::remove_dir_all(&work);
        let o = PlainOptions {
            compiler: "cc".to_string(),
            extra_options: Vec::new(),
            size: None,
            work_dir: work,
            threads: std::thread::available_parallelism().map_or(1, |n| n.get()),
            finalists: measure.finalists,
            finalist_rounds: measure.finalist_rounds,
        };
        plain_loop(candidates, &o).expect("the plain loop")
    };
    // The plain loop runs exactly the tuner's candidates, so it goes second (it then
    // finds the compiler and the headers warm in the page cache: no help to kcache).
    let (report, tuner_seconds) = tune();
    let plain_report = plain(&candidates(&report), &report.measure);
    assert_eq!(
        report.replayed(),
        0,
        "a fresh directory: every kernel searched"
    );
    assert_eq!(
        plain_report.wrong, 0,
        "the plain loop's candidates are all correct"
    );

    let start = Instant::now();
    let child = Command::new(&args[0])
        .arg("--child")
        .arg(&cache)
        .arg(size_name)
        .output()
        .expect("the second process");
    let replay_seconds = start.elapsed().as_secs_f64();
    let out = String::from_utf8_lossy(&child.stdout);
    assert!(child.status.success(), "{out}");
    let n = report.kernels.len();
    assert!(
        out.contains(&format!("CHILD replayed {n} of {n} compiled 0")),
        "the second process replays every winner and compiles nothing: {out}"
    );

    let tag = if bench { "" } else { "test mode: " };
    println!(
        "{tag}FIGURE tune_session_vs_plain {tuner_seconds:.4} {:.4}",
        plain_report.seconds
    );
    println!(
        "{tag}FIGURE tune_session_replay_vs_plain {replay_seconds:.4} {:.4}",
        plain_report.seconds
    );
    let t = report.totals;
    println!(
        "# tuner: {} kernels, {} candidates, {} kernels rendered, {} compiled in {} programs, {}/{} measurements from the memo table, {tuner_seconds:.2} s; plain: {} compiles ({:.2} s compiling), {:.2} s; second process {replay_seconds:.2} s",
        n,
        report.kernels.iter().map(|k| k.candidates).sum::<usize>(),
        t.kernels_rendered,
        t.kernels_compiled,
        t.programs_compiled,
        t.memo_hits,
        t.memo_hits + t.memo_misses,
        plain_report.compiles,
        plain_report.compile_seconds,
        plain_report.seconds,
    );
}
