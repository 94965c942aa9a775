//! `cargo xtask bench [--quick] [--scale] [--rounds N] [--only NAME,…]`: measures every
//! figure of [`FIGURES`] in several interleaved rounds and prints, per figure,
//!
//! ```text
//! BENCH <name> <median ratio> <unit> <min>-<max>
//! ```
//!
//! then a table with each figure's target, whether the median meets it, and its baseline.
//!
//! # How a figure is measured
//!
//! A figure is a ratio of a subject (what kcache does) to a baseline (what it is compared
//! with), both measured by one bench binary in the same round, close together in time (a
//! printed figure may time child processes on both sides; a figure in seconds, unit `s`,
//! has one second for its baseline). One measurement of
//! every selected figure is a *round*; `--quick` runs 5 rounds with criterion's quick mode,
//! a full run 7 rounds with a second of warm-up and three of measurement per function.
//! A benchmark binary whose rounds are cheap gets more, up to three times as many, while
//! its total stays within a budget (10 s quick, 60 s full): a short measurement is the
//! one a load spike moves most. `--rounds N` runs exactly N. Each round runs each
//! benchmark binary once, so the subject and
//! baseline of one round are seconds apart, and the rounds alternate between them: a load
//! spike on the shared machine moves one round's ratio, not the median. The printed ratio
//! is the median over the rounds and the spread their minimum and maximum.
//!
//! The machine is shared: each round records the one-minute load average as it starts
//! (`/proc/loadavg`), and each figure prints the range it ran under and how many of its
//! rounds ran quiet (load at most [`QUIET_LOAD`]), with their median ratio. `--settle S`
//! waits before each round, up to S seconds, for the load average to fall to
//! [`QUIET_LOAD`] (a round leaves it near 1 on its own).
//!
//! A figure may ask for at least N rounds in a full run without `--rounds` (`min_rounds`:
//! the transfer figures are medians over at least 9 paired rounds).
//!
//! Figures marked `scale` (a million entries, a hundred thousand files: slow) run in a full
//! run and with `--scale`, not in a plain `--quick` run. `--only a,b` keeps the figures
//! whose names contain `a` or `b` (a name that keeps none is an error). A figure in the table that produces no measurement in
//! some round fails the command: every listed figure runs.
//!
//! # Adding a figure: one line in [`FIGURES`]
//!
//! - **A criterion group** (the usual case): in a crate's `benches/<target>.rs` (declared as
//!   `[[bench]] name = "<target>", harness = false`), write a group named for the figure
//!   with two functions, `subject` and `baseline`; then add
//!   `Figure::criterion("<group>", "<package>", "<target>", "what the baseline is")` here,
//!   with `.at_most(t)` when the issue sets a target and `.scale()` when it is slow. The
//!   ratio is the median time of `subject` over that of `baseline` (criterion's
//!   `new/estimates.json`, read from `target/kcache-bench/criterion`). Only the `subject`
//!   and `baseline` functions of listed groups run here (a filter), so extra functions in
//!   a group (a breakdown) cost nothing.
//! - **A printed figure** (not a time: bytes per entry, kernels compiled, a throughput
//!   ratio): a `harness = false` bench binary that, when given `--bench`, prints one line
//!   `FIGURE <name> <subject> <baseline>` per figure to stdout (both positive numbers, the
//!   ratio is subject / baseline); without `--bench` (as `cargo xtask test` runs it) it
//!   runs a small version, so it cannot rot. Add
//!   `Figure::printed("<name>", "<package>", "<target>", "what the baseline is")`, with
//!   `.unit("…")` when the ratio is not read as `x`. The environment variable
//!   `KCACHE_BENCH_QUICK` is set to `1` in a `--quick` run.
//!
//! The tinygrad figures (`tinygrad_beam_*`, kcache-py's `tinygrad_beam` bench) run Python
//! processes of the venv `target/kcache-venv`: when one is selected, the release wheel is
//! built and installed there first, with every pin (`python::wheel`).

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

/// How a figure's two measurements are obtained.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Source {
    /// A criterion group named for the figure with functions `subject` and `baseline`.
    Criterion,
    /// A `FIGURE <name> <subject> <baseline>` line the bench binary prints.
    Printed,
}

/// One figure: where it is measured, what it is compared with, its target.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Figure {
    name: &'static str,
    package: &'static str,
    bench: &'static str,
    baseline: &'static str,
    source: Source,
    /// The issue's target for the median ratio (at most), if it set one.
    target: Option<f64>,
    unit: &'static str,
    scale: bool,
    /// The fewest rounds of a full run (a `--quick` run and `--rounds N` keep theirs).
    min_rounds: usize,
}

impl Figure {
    /// A criterion group `name` in `package`'s bench target `bench`.
    const fn criterion(
        name: &'static str,
        package: &'static str,
        bench: &'static str,
        baseline: &'static str,
    ) -> Figure {
        Figure {
            name,
            package,
            bench,
            baseline,
            source: Source::Criterion,
            target: None,
            unit: "x",
            scale: false,
            min_rounds: 0,
        }
    }

    /// A figure the bench binary prints as `FIGURE <name> <subject> <baseline>`.
    const fn printed(
        name: &'static str,
        package: &'static str,
        bench: &'static str,
        baseline: &'static str,
    ) -> Figure {
        Figure {
            source: Source::Printed,
            ..Figure::criterion(name, package, bench, baseline)
        }
    }

    /// The target: the median ratio must be at most `t`.
    const fn at_most(self, t: f64) -> Figure {
        Figure {
            target: Some(t),
            ..self
        }
    }

    /// The unit printed after the ratio (`x` unless set).
    #[allow(dead_code)] // for figures that are not read as `x`
    const fn unit(self, unit: &'static str) -> Figure {
        Figure { unit, ..self }
    }

    /// At least `n` rounds in a full run (a median over paired rounds the issue sets).
    const fn min_rounds(self, n: usize) -> Figure {
        Figure {
            min_rounds: n,
            ..self
        }
    }

    /// A slow figure: runs in a full run and with `--scale`, not in a plain `--quick` run.
    const fn scale(self) -> Figure {
        Figure {
            scale: true,
            ..self
        }
    }
}

/// Every figure `cargo xtask bench` reports, one line each (see the module doc).
const FIGURES: &[Figure] = &[
    Figure::criterion(
        "canonical_key_1mib",
        "canonical-text",
        "canonical",
        "SHA-256 of the same bytes",
    )
    .at_most(4.0),
    Figure::criterion(
        "canonical_key_bound200",
        "canonical-text",
        "canonical",
        "SHA-256 of the same bytes (kernels declaring ~200 bound names)",
    )
    .at_most(4.5),
    Figure::criterion(
        "canonical_key_corpus",
        "canonical-text",
        "canonical",
        "SHA-256 of the same bytes (the real kernel corpus: tinygrad with its declared names, TVM, OCANNL)",
    ),
    Figure::criterion(
        "canonical_key_corpus_names",
        "canonical-text",
        "canonical",
        "SHA-256 of the same bytes (the real corpus, each kernel keyed with its declared names inside the loop, through a NameScope)",
    )
    .at_most(5.0),
    Figure::criterion(
        "resolve_all_hit_1000",
        "kernel-cache",
        "resolve",
        "1,000 raw dashmap gets",
    )
    .at_most(3.0),
    Figure::criterion(
        "resolve_all_hit_1000_vs_quick_cache",
        "kernel-cache",
        "resolve",
        "1,000 quick_cache gets",
    ),
    Figure::criterion(
        "compile_64_split2",
        "kernel-cache",
        "resolve",
        "the same 64 kernels compiled whole",
    )
    .at_most(0.6),
    Figure::printed(
        "cold_compile_64_vs_one_file",
        "cc-backend",
        "cold_compile",
        "cc -O2 -shared -fPIC of one file holding the same 64 kernels, prelude once (kcache: one program, fresh process, empty store)",
    )
    .at_most(1.1),
    Figure::printed(
        "cold_compile_64_split2_vs_one_file",
        "cc-backend",
        "cold_compile",
        "the same one-file compile (kcache: the split driver, 2 programs on 2 cores)",
    )
    .at_most(0.6),
    Figure::printed(
        "kernel_store_load_64",
        "kernel-cache",
        "store_load",
        "the same 64 kernels compiled in a fresh process without the kernel store",
    )
    .at_most(0.05),
    Figure::printed(
        "transfer_size_trials_ratio",
        "tuner",
        "transfer",
        "the attempts an unseeded search (its own memo table and order) needs to come within 5% of the faster re-measured winner (seeded: from the 128^3 winner, at 96^3; reference-ir's 2,000-point tiled matmul space)",
    )
    .at_most(0.25)
    .min_rounds(9),
    Figure::printed(
        "transfer_option_trials_ratio",
        "tuner",
        "transfer",
        "the same unseeded count after -O3 is added (seeded from the -O2 winner of the same code)",
    )
    .at_most(1.1)
    .min_rounds(9),
    Figure::printed(
        "transfer_compiler_trials_ratio",
        "tuner",
        "transfer",
        "the same unseeded count after gcc -> clang (seeded from the gcc winner of the same code)",
    )
    .at_most(1.1)
    .min_rounds(9),
    Figure::printed(
        "transfer_final_quality_size",
        "tuner",
        "transfer",
        "the unseeded winner at the same budget, both re-measured side by side, interleaved (after 128^3 -> 96^3)",
    )
    .at_most(1.0)
    .min_rounds(9),
    Figure::printed(
        "transfer_final_quality_option",
        "tuner",
        "transfer",
        "the unseeded winner at the same budget, re-measured side by side (after -O3)",
    )
    .at_most(1.0)
    .min_rounds(9),
    Figure::printed(
        "transfer_final_quality_compiler",
        "tuner",
        "transfer",
        "the unseeded winner at the same budget, re-measured side by side (after gcc -> clang)",
    )
    .at_most(1.0)
    .min_rounds(9),
    Figure::printed(
        "kcache_vs_ccache_compiles",
        "kcache-demo",
        "vs_ccache",
        "ccache's compiles (cache misses) on the same second tuning job's stream of kernels",
    )
    .at_most(0.99)
    .scale(),
    Figure::printed(
        "kcache_vs_ccache_seconds",
        "kcache-demo",
        "vs_ccache",
        "ccache's wall time compiling and linking that stream",
    )
    .scale(),
    Figure::criterion(
        "disk_lookup",
        "schedule-cache",
        "disk",
        "std::fs::read + RON parse of the file",
    )
    .at_most(3.0),
    Figure::criterion(
        "disk_store",
        "schedule-cache",
        "disk",
        "a plain atomic write of the same bytes",
    ),
    Figure::criterion(
        "redis_lookup",
        "schedule-cache",
        "redis",
        "a raw GET + RON parse of the same entry",
    ),
    Figure::criterion(
        "redis_two_level_local_hit",
        "schedule-cache",
        "redis",
        "the Redis store's lookup of the same entry",
    ),
    Figure::criterion(
        "memo_hit_vs_dashmap",
        "memo-cache",
        "memo",
        "a raw dashmap get",
    )
    .at_most(1.5),
    Figure::criterion(
        "memo_hit_vs_moka",
        "memo-cache",
        "memo",
        "moka get_with on the same keys",
    )
    .at_most(1.0),
    Figure::printed(
        "memo_memory_per_entry_1m",
        "memo-cache",
        "memo_scale",
        "a plain HashMap<Key, u64> holding the same million entries (bytes per entry)",
    )
    .at_most(2.0),
    Figure::printed(
        "memo_two_threads_throughput",
        "memo-cache",
        "memo_scale",
        "one thread on the same million-entry table (hits/s; higher is better, 2 is perfect)",
    ),
    Figure::printed(
        "tinygrad_beam_second_run_vs_first",
        "kcache-py",
        "tinygrad_beam",
        "the first process's BEAM search over the same model through kcache, empty store (seconds; tinygrad's BEAM result cache on, its default)",
    )
    .at_most(0.2),
    Figure::printed(
        "tinygrad_beam_second_run_vs_tinygrad_cache",
        "kcache-py",
        "tinygrad_beam",
        "tinygrad's own second process over its own compile and BEAM caches (seconds)",
    ),
    Figure::printed(
        "tinygrad_beam_first_run_vs_tinygrad",
        "kcache-py",
        "tinygrad_beam",
        "tinygrad's own first process, empty cache database (seconds)",
    ),
    Figure::printed(
        "tinygrad_beam_research_second_run_vs_first",
        "kcache-py",
        "tinygrad_beam",
        "the first process, both with IGNORE_BEAM_CACHE=1: the second searches again, its candidates following its own timings (seconds)",
    ),
    Figure::printed(
        "tinygrad_beam_disk_bytes_vs_tinygrad_cache",
        "kcache-py",
        "tinygrad_beam",
        "tinygrad's cache database after its two processes (bytes; kcache: its kernel store after its two)",
    )
    .unit("bytes"),
    Figure::printed(
        "demo_compiles_canonical_vs_verbatim",
        "kcache-demo",
        "session",
        "kernels compiled by SHA-256 keys of the exact text over the same candidates",
    )
    .at_most(0.6)
    .scale(),
    Figure::printed(
        "demo_wall_canonical_vs_verbatim",
        "kcache-demo",
        "session",
        "the demo's search with --keys verbatim (session seconds)",
    )
    .scale(),
    Figure::printed(
        "demo_wall_memo_vs_no_memo",
        "kcache-demo",
        "session",
        "the demo's search with --no-memo (session seconds)",
    )
    .scale(),
    Figure::printed(
        "demo_measure_memo_vs_no_memo",
        "kcache-demo",
        "session",
        "the demo's search with --no-memo (seconds spent measuring)",
    )
    .scale(),
    Figure::printed(
        "demo_measurements_memo_vs_no_memo",
        "kcache-demo",
        "session",
        "the demo's search with --no-memo (measurements run)",
    )
    .scale(),
    Figure::printed(
        "disk_scale_lookup_growth_p50",
        "schedule-cache",
        "disk_scale",
        "the same lookups (hits) in a directory of 100 entries (median)",
    )
    .at_most(1.5)
    .scale(),
    Figure::printed(
        "disk_scale_lookup_growth_p99",
        "schedule-cache",
        "disk_scale",
        "the same lookups (hits) in a directory of 100 entries (99th percentile)",
    )
    .scale(),
    Figure::printed(
        "disk_scale_miss_growth_p50",
        "schedule-cache",
        "disk_scale",
        "missing lookups in a directory of 100 entries (median)",
    )
    .scale(),
    Figure::printed(
        "disk_scale_miss_growth_p99",
        "schedule-cache",
        "disk_scale",
        "missing lookups in a directory of 100 entries (99th percentile)",
    )
    .scale(),
    Figure::printed(
        "disk_scale_store_growth_p50",
        "schedule-cache",
        "disk_scale",
        "stores into a directory of 100 entries (median)",
    )
    .scale(),
    Figure::printed(
        "disk_scale_store_growth_p99",
        "schedule-cache",
        "disk_scale",
        "stores into a directory of 100 entries (99th percentile)",
    )
    .scale(),
    Figure::printed(
        "disk_scale_regime_sweep_s_per_1000",
        "schedule-cache",
        "disk_scale",
        "one second: seconds per 1,000 entries a regime change sweeps (100,000 entries)",
    )
    .unit("s")
    .scale(),
    Figure::printed(
        "kcache_stats_s_total",
        "kcache-cli",
        "commands_scale",
        "one second: kcache stats on 100,000 entries (a child process), seconds in all",
    )
    .unit("s")
    .at_most(3.0)
    .scale(),
    Figure::printed(
        "kcache_stats_s_per_1000",
        "kcache-cli",
        "commands_scale",
        "one second: kcache stats, seconds per 1,000 entries",
    )
    .unit("s")
    .scale(),
    Figure::printed(
        "kcache_stats_peak_memory_growth",
        "kcache-cli",
        "commands_scale",
        "kcache stats' peak resident set on 1,000 entries (bounded memory: about 1)",
    )
    .scale(),
    Figure::printed(
        "kcache_verify_s_per_1000",
        "kcache-cli",
        "commands_scale",
        "one second: kcache verify (every entry parsed), seconds per 1,000 entries",
    )
    .unit("s")
    .scale(),
    Figure::printed(
        "kcache_verify_peak_memory_growth",
        "kcache-cli",
        "commands_scale",
        "kcache verify's peak resident set on 1,000 entries",
    )
    .scale(),
    Figure::printed(
        "kcache_gc_s_per_1000",
        "kcache-cli",
        "commands_scale",
        "one second: kcache gc --older-than 3650d (lists and stats every entry), per 1,000",
    )
    .unit("s")
    .scale(),
    Figure::printed(
        "kcache_gc_peak_memory_growth",
        "kcache-cli",
        "commands_scale",
        "kcache gc's peak resident set on 1,000 entries",
    )
    .scale(),
    Figure::printed(
        "kernel_cache_memory_per_entry_1m",
        "kernel-cache",
        "scale",
        "a plain HashMap<String, Resolved<_>> holding the same million entries (bytes per entry)",
    )
    .at_most(2.0)
    .scale(),
    Figure::printed(
        "kernel_cache_all_hit_growth_1k_to_1m",
        "kernel-cache",
        "scale",
        "the same all-hit resolve of 1,000 kernels at 1,000 entries",
    )
    .at_most(1.5)
    .scale(),
    Figure::printed(
        "dashmap_get_growth_1k_to_1m",
        "kernel-cache",
        "scale",
        "peer: raw dashmap gets of the same 1,000 keys at 1,000 entries",
    )
    .scale(),
    Figure::printed(
        "kernel_cache_publish_evict_growth_1k_to_1m",
        "kernel-cache",
        "scale",
        "a publish of 8 at capacity (one eviction) at 1,000 entries",
    )
    .scale(),
    Figure::printed(
        "hashmap_fifo_publish_growth_1k_to_1m",
        "kernel-cache",
        "scale",
        "peer: a HashMap + FIFO of groups, the same publish at 1,000 entries",
    )
    .scale(),
    Figure::printed(
        "kernel_cache_two_threads_resolve",
        "kernel-cache",
        "scale",
        "one thread at a million entries (resolves/s; higher is better, 2 is perfect)",
    )
    .scale(),
    Figure::printed(
        "dashmap_two_threads_get",
        "kernel-cache",
        "scale",
        "peer: raw dashmap gets, one thread (higher is better, 2 is perfect)",
    )
    .scale(),
    Figure::printed(
        "matmul_space_within_5pct",
        "kcache-demo",
        "space",
        "share of reference-ir's TiledMatmul space (all 2,000 legal schedules at 128^3, each compiled, checked and timed) within 5% of its best point",
    )
    .unit("share")
    .at_most(0.05)
    .scale(),
    Figure::printed(
        "tune_session_vs_plain",
        "kcache-demo",
        "tune_session",
        "the same candidates and measurements in a plain loop without kcache: one C file and one cc per candidate, no memo (wall time; kcache: the demo's kernels tuned by the tuner, a fresh directory)",
    )
    .at_most(0.5),
    Figure::printed(
        "tune_session_replay_vs_plain",
        "kcache-demo",
        "tune_session",
        "the same plain loop (kcache: a second process tuning the same kernels with the first's store, spawn to exit)",
    )
    .at_most(0.05),
];

/// What the command line asked for.
#[derive(Debug, PartialEq)]
struct Options {
    quick: bool,
    scale: bool,
    rounds: usize,
    /// Rounds a cheap binary may get (see the module doc).
    max_rounds: usize,
    only: Vec<String>,
    /// `--settle S`: before each round, wait up to S seconds for the load average to
    /// fall to [`QUIET_LOAD`].
    settle: Option<f64>,
}

fn parse(args: &[String]) -> Result<Options, String> {
    let mut o = Options {
        quick: false,
        scale: false,
        rounds: 0,
        max_rounds: 0,
        only: Vec::new(),
        settle: None,
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--quick" => o.quick = true,
            "--scale" => o.scale = true,
            "--rounds" => {
                let n = it.next().ok_or("--rounds needs a number")?;
                o.rounds = n
                    .parse()
                    .ok()
                    .filter(|&n| n > 0)
                    .ok_or_else(|| format!("--rounds {n}: not a positive number"))?;
            }
            "--settle" => {
                let n = it.next().ok_or("--settle needs a number of seconds")?;
                let s = n
                    .parse::<f64>()
                    .ok()
                    .filter(|s| s.is_finite() && *s >= 0.0)
                    .ok_or_else(|| format!("--settle {n}: not a number of seconds"))?;
                o.settle = Some(s);
            }
            "--only" => {
                let names = it.next().ok_or("--only needs names")?;
                o.only
                    .extend(names.split(',').filter(|s| !s.is_empty()).map(String::from));
            }
            other => {
                return Err(format!(
                    "unknown argument {other} (usage: cargo xtask bench [--quick] [--scale] \
                     [--rounds N] [--only NAME,…])"
                ));
            }
        }
    }
    if o.rounds == 0 {
        o.rounds = if o.quick { 5 } else { 7 };
        o.max_rounds = 3 * o.rounds;
    } else {
        o.max_rounds = o.rounds;
    }
    Ok(o)
}

/// The figures a run with `o` measures.
fn selected(o: &Options) -> Vec<Figure> {
    FIGURES
        .iter()
        .filter(|f| !f.scale || o.scale || !o.quick)
        .filter(|f| o.only.is_empty() || o.only.iter().any(|n| f.name.contains(n.as_str())))
        .copied()
        .collect()
}

/// Each `--only` name must select a figure: a misspelt one would otherwise be dropped
/// without a word while the others run.
fn check_only(o: &Options) -> Result<(), String> {
    let picked = selected(o);
    for n in &o.only {
        if picked.iter().any(|f| f.name.contains(n.as_str())) {
            continue;
        }
        return Err(if FIGURES.iter().any(|f| f.name.contains(n.as_str())) {
            format!(
                "--only {n}: names only scale figures, which a --quick run leaves out \
                 (add --scale)"
            )
        } else {
            format!("--only {n}: no figure's name contains it (see xtask/src/bench.rs)")
        });
    }
    Ok(())
}

/// Runs the rounds, then prints the figures.
pub(crate) fn run(root: &Path, args: &[String]) -> Result<(), String> {
    let o = parse(args)?;
    check_only(&o)?;
    let figures = selected(&o);
    if figures.is_empty() {
        return Err("no figure selected".to_string());
    }
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"));
    let home = target.join("kcache-bench").join("criterion");
    // The tinygrad figures run the venv's Python with the kcache wheel (release) and the pins.
    if figures.iter().any(|f| f.package == "kcache-py") {
        crate::python::wheel(root, true, &[])?;
    }
    let binaries = build()?;
    // (package, bench) -> its figures, in table order.
    let mut by_binary: BTreeMap<(&str, &str), Vec<Figure>> = BTreeMap::new();
    for f in &figures {
        by_binary.entry((f.package, f.bench)).or_default().push(*f);
    }
    let mut ratios: BTreeMap<&str, Vec<Measured>> = BTreeMap::new();
    let started = Instant::now();
    let budget = if o.quick { 10.0 } else { 60.0 };
    // Seconds each binary has taken so far, and its last round's.
    let mut spent: BTreeMap<(&str, &str), (f64, f64)> = BTreeMap::new();
    let floor = |figs: &[Figure]| least_rounds(&o, figs);
    let all_rounds = by_binary
        .values()
        .map(|figs| o.max_rounds.max(floor(figs)))
        .max()
        .unwrap_or(o.max_rounds);
    for round in 0..all_rounds {
        for ((package, bench), figs) in &by_binary {
            let (total, last) = spent.get(&(*package, *bench)).copied().unwrap_or_default();
            let least = floor(figs);
            if round >= o.max_rounds.max(least)
                || (round >= o.rounds.max(least) && total + last > budget)
            {
                continue;
            }
            if let Some(max) = o.settle {
                settle(max);
            }
            let t0 = Instant::now();
            let load = load_average();
            let bin = binaries
                .get(&(package.to_string(), bench.to_string()))
                .ok_or_else(|| format!("cargo built no bench target {bench} of {package}"))?;
            let _ = fs::remove_dir_all(&home);
            let printed = run_binary(bin, figs, &home, o.quick)?;
            for f in figs {
                let m = match f.source {
                    Source::Criterion => criterion_estimate(&home.join(f.name)),
                    Source::Printed => printed.get(f.name).copied(),
                }
                .map(|m| Measured { load, ..m })
                .ok_or_else(|| {
                    format!(
                        "round {}: figure {} measured nothing (bench {bench} of {package})",
                        round + 1,
                        f.name
                    )
                })?;
                ratios.entry(f.name).or_default().push(m);
            }
            let took = t0.elapsed().as_secs_f64();
            spent.insert((*package, *bench), (total + took, took));
            eprintln!(
                "xtask bench: round {}/{}-{} {package}/{bench}: {took:.1} s (load average {load:.2})",
                round + 1,
                o.rounds,
                o.max_rounds,
            );
        }
    }
    let _ = fs::remove_dir_all(&home);
    println!();
    let summaries: Vec<(Figure, Summary)> = figures
        .iter()
        .map(|f| (*f, summarize(&ratios[f.name])))
        .collect();
    for (f, s) in &summaries {
        println!("{}", bench_line(f, s));
    }
    println!();
    println!(
        "{:<38} {:>8} {:>17} {:>6} {:>8}  {:<4} {:>11} {:>13} baseline (median subject, baseline)",
        "figure", "ratio", "spread", "rounds", "target", "met", "load", "quiet: ratio"
    );
    for (f, s) in &summaries {
        let (target_s, met) = match f.target {
            None => ("-".to_string(), "-"),
            Some(t) if s.median <= t => (format!("<= {t}"), "yes"),
            Some(t) => (format!("<= {t}"), "NO"),
        };
        println!(
            "{:<38} {:>8.3} {:>17} {:>6} {:>8}  {:<4} {:>11} {:>13} {} ({}, {})",
            f.name,
            s.median,
            format!("{:.3}-{:.3}", s.min, s.max),
            s.rounds,
            target_s,
            met,
            format!("{:.1}-{:.1}", s.load_min, s.load_max),
            match s.quiet_median {
                Some(q) => format!("{}: {q:.3}", s.quiet),
                None => "0: -".to_string(),
            },
            f.baseline,
            show(f, s.subject),
            show(f, s.baseline)
        );
    }
    println!(
        "\n{} figure(s), {} to {} round(s) each, {:.0} s of measuring",
        figures.len(),
        o.rounds,
        o.max_rounds,
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// The fewest rounds a binary measuring `figs` runs: its figures' `min_rounds` in a full
/// run without `--rounds` (a `--quick` run and an explicit `--rounds N` keep theirs), else 0.
fn least_rounds(o: &Options, figs: &[Figure]) -> usize {
    // Without `--rounds`, a cheap binary may run three times the rounds (`parse`).
    let explicit = o.max_rounds == o.rounds;
    if o.quick || explicit {
        0
    } else {
        figs.iter().map(|f| f.min_rounds).max().unwrap_or(0)
    }
}

/// The `BENCH` line of one figure.
fn bench_line(f: &Figure, s: &Summary) -> String {
    format!(
        "BENCH {} {:.3} {} {:.3}-{:.3} load {:.1}-{:.1} quiet {}",
        f.name, s.median, f.unit, s.min, s.max, s.load_min, s.load_max, s.quiet
    )
}

fn show(f: &Figure, v: f64) -> String {
    match f.source {
        Source::Criterion if v >= 1e6 => format!("{:.1} ms", v / 1e6),
        Source::Criterion => format!("{:.1} µs", v / 1e3),
        Source::Printed if v.abs() >= 100.0 => format!("{v:.0}"),
        // Seconds of a fast operation: four significant digits, not four zeros.
        Source::Printed if v != 0.0 && v.abs() < 0.01 => format!("{v:.3e}"),
        Source::Printed => format!("{v:.4}"),
    }
}

/// A built bench binary and its package's directory (where `cargo bench` would run it).
struct Binary {
    exe: PathBuf,
    dir: PathBuf,
}

/// Builds the bench binaries; `(package, target)` -> binary.
fn build() -> Result<BTreeMap<(String, String), Binary>, String> {
    // Every bench target of the workspace with every feature, whatever is selected: one
    // feature resolution, so a warm `cargo bench --no-run --workspace --all-features`
    // (or an earlier run) is reused as is rather than rebuilt for a subset.
    let args: Vec<String> = [
        "bench",
        "--no-run",
        "--workspace",
        "--all-features",
        "--bench",
        "*",
        "--message-format=json",
    ]
    .map(String::from)
    .to_vec();
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    eprintln!("$ cargo {}", args.join(" "));
    let out = Command::new(cargo)
        .args(&args)
        .current_dir(crate::project_root())
        .stderr(std::process::Stdio::inherit())
        .output()
        .map_err(|e| format!("could not run cargo: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "`cargo {}` failed ({})",
            args.join(" "),
            out.status
        ));
    }
    Ok(executables(&String::from_utf8_lossy(&out.stdout)))
}

/// `(package, bench target)` -> binary, from cargo's JSON messages.
fn executables(messages: &str) -> BTreeMap<(String, String), Binary> {
    let mut out = BTreeMap::new();
    for line in messages.lines() {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        if v["reason"] != "compiler-artifact" {
            continue;
        }
        let (Some(exe), Some(name), Some(manifest)) = (
            v["executable"].as_str(),
            v["target"]["name"].as_str(),
            v["manifest_path"].as_str(),
        ) else {
            continue;
        };
        let is_bench = v["target"]["kind"]
            .as_array()
            .is_some_and(|k| k.iter().any(|k| k == "bench"));
        // The package's name, read from the manifest to stay independent of cargo's
        // package-id format.
        let package = fs::read_to_string(manifest)
            .ok()
            .and_then(|m| package_name(&m));
        let dir = Path::new(manifest).parent();
        if let (true, Some(package), Some(dir)) = (is_bench, package, dir) {
            out.insert(
                (package, name.to_string()),
                Binary {
                    exe: PathBuf::from(exe),
                    dir: dir.to_path_buf(),
                },
            );
        }
    }
    out
}

/// The `name` of a manifest's `[package]` section.
fn package_name(manifest: &str) -> Option<String> {
    let mut in_package = false;
    for line in manifest.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            in_package = line == "[package]";
        } else if in_package && let Some(rest) = line.strip_prefix("name") {
            let value = rest.trim_start().strip_prefix('=')?.trim();
            return Some(value.trim_matches('"').to_string());
        }
    }
    None
}

/// One round's measurement of one figure.
#[derive(Clone, Copy, Debug)]
struct Measured {
    subject: f64,
    baseline: f64,
    /// The one-minute load average when its round started (`NaN`: unknown).
    load: f64,
}

/// A round is *quiet* when the one-minute load average at its start is at most this: less
/// than one core of a two-core machine busy with anything else.
const QUIET_LOAD: f64 = 1.0;

/// Waits (polling each second) until the one-minute load average is at most
/// [`QUIET_LOAD`], or `max` seconds passed, or it cannot be read: a round then starts after
/// the load the previous round left (one core busy for its length) has decayed, when
/// nothing else keeps the machine busy.
fn settle(max: f64) {
    let start = Instant::now();
    while load_average() > QUIET_LOAD && start.elapsed().as_secs_f64() < max {
        std::thread::sleep(std::time::Duration::from_secs(1));
    }
}

/// The one-minute load average (`NaN` where `/proc/loadavg` cannot be read).
fn load_average() -> f64 {
    fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(f64::NAN)
}

/// Runs one bench binary for one round; returns the `FIGURE` lines it printed.
fn run_binary(
    bin: &Binary,
    figs: &[Figure],
    home: &Path,
    quick: bool,
) -> Result<BTreeMap<String, Measured>, String> {
    let groups: Vec<&str> = figs
        .iter()
        .filter(|f| f.source == Source::Criterion)
        .map(|f| f.name)
        .collect();
    let mut cmd = Command::new(&bin.exe);
    cmd.args(["--bench", "--noplot", "--nresamples", "10000"]);
    if quick {
        cmd.args(["--quick", "--measurement-time", "2"]);
    } else {
        cmd.args(["--warm-up-time", "1", "--measurement-time", "3"]);
    }
    if !groups.is_empty() {
        cmd.arg(format!("^({})/(subject|baseline)$", groups.join("|")));
    }
    // A bench runs in its package's directory, as under `cargo bench`.
    cmd.current_dir(&bin.dir)
        .env("CRITERION_HOME", home)
        .env("KCACHE_BENCH_QUICK", if quick { "1" } else { "0" });
    let out = cmd
        .output()
        .map_err(|e| format!("could not run {}: {e}", bin.exe.display()))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        return Err(format!(
            "{} failed ({}):\n{}\n{}",
            bin.exe.display(),
            out.status,
            stdout,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(printed_figures(&stdout))
}

/// The `FIGURE <name> <subject> <baseline>` lines of a bench binary's output.
fn printed_figures(stdout: &str) -> BTreeMap<String, Measured> {
    let mut out = BTreeMap::new();
    for line in stdout.lines() {
        let mut w = line.split_whitespace();
        if w.next() != Some("FIGURE") {
            continue;
        }
        let (Some(name), Some(s), Some(b), None) = (w.next(), w.next(), w.next(), w.next()) else {
            continue;
        };
        if let (Ok(subject), Ok(baseline)) = (s.parse::<f64>(), b.parse::<f64>())
            && subject > 0.0
            && baseline > 0.0
            && subject.is_finite()
            && baseline.is_finite()
        {
            out.insert(
                name.to_string(),
                Measured {
                    subject,
                    baseline,
                    load: f64::NAN,
                },
            );
        }
    }
    out
}

/// A criterion group's `subject` and `baseline` median times (ns), if both were measured.
fn criterion_estimate(group: &Path) -> Option<Measured> {
    let subject = median_ns(&group.join("subject/new/estimates.json"))?;
    let baseline = median_ns(&group.join("baseline/new/estimates.json"))?;
    (subject > 0.0 && baseline > 0.0).then_some(Measured {
        subject,
        baseline,
        load: f64::NAN,
    })
}

fn median_ns(path: &Path) -> Option<f64> {
    let text = fs::read_to_string(path).ok()?;
    let v: serde_json::Value = serde_json::from_str(&text).ok()?;
    v.get("median")?.get("point_estimate")?.as_f64()
}

/// The rounds of one figure, summarized.
#[derive(Debug, PartialEq)]
struct Summary {
    /// How many rounds measured the figure.
    rounds: usize,
    median: f64,
    min: f64,
    max: f64,
    /// Median subject and baseline over the rounds (for the table).
    subject: f64,
    baseline: f64,
    /// The lowest and highest load average its rounds started under.
    load_min: f64,
    load_max: f64,
    /// How many of its rounds ran quiet, and their median ratio.
    quiet: usize,
    quiet_median: Option<f64>,
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n == 0 {
        f64::NAN
    } else if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn summarize(rounds: &[Measured]) -> Summary {
    let r: Vec<f64> = rounds.iter().map(|m| m.subject / m.baseline).collect();
    let quiet: Vec<f64> = rounds
        .iter()
        .filter(|m| m.load <= QUIET_LOAD)
        .map(|m| m.subject / m.baseline)
        .collect();
    Summary {
        rounds: rounds.len(),
        median: median(r.clone()),
        min: r.iter().copied().fold(f64::INFINITY, f64::min),
        max: r.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        subject: median(rounds.iter().map(|m| m.subject).collect()),
        baseline: median(rounds.iter().map(|m| m.baseline).collect()),
        load_min: rounds.iter().map(|m| m.load).fold(f64::INFINITY, f64::min),
        load_max: rounds
            .iter()
            .map(|m| m.load)
            .fold(f64::NEG_INFINITY, f64::max),
        quiet: quiet.len(),
        quiet_median: (!quiet.is_empty()).then(|| median(quiet)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_criterion_estimates() {
        let dir = std::env::temp_dir().join(format!("xtask-bench-{}", std::process::id()));
        for (f, v) in [("subject", 30.0), ("baseline", 10.0)] {
            let p = dir.join("g").join(f).join("new");
            fs::create_dir_all(&p).expect("mkdir");
            fs::write(
                p.join("estimates.json"),
                format!("{{\"median\":{{\"point_estimate\":{v}}}}}"),
            )
            .expect("write");
        }
        fs::create_dir_all(dir.join("lonely/subject/new")).expect("mkdir");
        let g = criterion_estimate(&dir.join("g"));
        let lonely = criterion_estimate(&dir.join("lonely"));
        let _ = fs::remove_dir_all(&dir);
        let g = g.expect("both measured");
        assert_eq!((g.subject, g.baseline), (30.0, 10.0));
        assert!(lonely.is_none());
    }

    #[test]
    fn printed_values_keep_their_significant_digits() {
        let f = Figure::printed("p", "p", "b", "base");
        assert_eq!(show(&f, 1.234e-4), "1.234e-4");
        assert_eq!(show(&f, 0.5), "0.5000");
        assert_eq!(show(&f, 0.0), "0.0000");
        assert_eq!(show(&f, 250.0), "250");
    }

    #[test]
    fn transfer_figures_get_at_least_nine_rounds_in_a_full_run() {
        let transfer: Vec<Figure> = FIGURES
            .iter()
            .filter(|f| f.name.starts_with("transfer_"))
            .copied()
            .collect();
        assert_eq!(transfer.len(), 6);
        let full = parse(&[]).expect("parse");
        assert_eq!(least_rounds(&full, &transfer), 9);
        let quick = parse(&["--quick".to_string()]).expect("parse");
        assert_eq!(least_rounds(&quick, &transfer), 0);
        let three = parse(&["--rounds".to_string(), "3".to_string()]).expect("parse");
        assert_eq!(least_rounds(&three, &transfer), 0);
        let others: Vec<Figure> = FIGURES
            .iter()
            .filter(|f| f.min_rounds == 0)
            .copied()
            .collect();
        assert_eq!(least_rounds(&full, &others), 0);
    }

    #[test]
    fn the_median_ratio_and_its_spread_over_rounds() {
        let rounds = [
            (30.0, 10.0, 0.5),
            (50.0, 10.0, 3.0),
            (20.0, 10.0, 1.0),
            (40.0, 10.0, 2.5),
        ]
        .map(|(subject, baseline, load)| Measured {
            subject,
            baseline,
            load,
        });
        let s = summarize(&rounds);
        assert_eq!((s.median, s.min, s.max), (3.5, 2.0, 5.0));
        assert_eq!((s.load_min, s.load_max), (0.5, 3.0));
        assert_eq!((s.quiet, s.quiet_median), (2, Some(2.5)));
        let f = Figure::criterion("g", "p", "b", "base");
        assert_eq!(
            bench_line(&f, &s),
            "BENCH g 3.500 x 2.000-5.000 load 0.5-3.0 quiet 2"
        );
    }

    #[test]
    fn printed_figures_are_parsed_and_garbage_is_not() {
        let out = "noise\nFIGURE a 3 2\nFIGURE b 1\nFIGURE c x 1\nFIGURE d 0 1\nFIGURE e 1 2 3\n";
        let p = printed_figures(out);
        assert_eq!(p.keys().collect::<Vec<_>>(), ["a"]);
        assert_eq!((p["a"].subject, p["a"].baseline), (3.0, 2.0));
    }

    #[test]
    fn options_and_selection() {
        let args = |s: &str| s.split_whitespace().map(String::from).collect::<Vec<_>>();
        let quick = parse(&args("--quick")).expect("parse");
        assert_eq!((quick.rounds, quick.max_rounds, quick.quick), (5, 15, true));
        let three = parse(&args("--rounds 3")).expect("parse");
        assert_eq!((three.rounds, three.max_rounds), (3, 3));
        assert!(parse(&args("--rounds 0")).is_err());
        assert!(parse(&args("--frobnicate")).is_err());
        assert_eq!(
            parse(&args("--settle 30")).expect("parse").settle,
            Some(30.0)
        );
        assert_eq!(three.settle, None);
        for bad in ["--settle", "--settle -1", "--settle x", "--settle inf"] {
            assert!(parse(&args(bad)).is_err(), "{bad}");
        }
        let only = parse(&args("--only memo_hit,disk_lookup")).expect("parse");
        let names: Vec<&str> = selected(&only).iter().map(|f| f.name).collect();
        assert_eq!(
            names,
            ["disk_lookup", "memo_hit_vs_dashmap", "memo_hit_vs_moka"]
        );
        assert!(check_only(&only).is_ok());
        // A name that selects nothing is refused, not dropped while the others run.
        let typo = parse(&args("--only memo_hit,dsk_lookup")).expect("parse");
        assert!(check_only(&typo).is_err_and(|e| e.contains("dsk_lookup")));
        let scale_in_quick =
            parse(&args("--quick --only memo_hit,kcache_vs_ccache")).expect("parse");
        assert!(check_only(&scale_in_quick).is_err_and(|e| e.contains("--scale")));
        let scale =
            parse(&args("--quick --scale --only memo_hit,kcache_vs_ccache")).expect("parse");
        assert!(check_only(&scale).is_ok());
        // A quick run leaves scale figures out unless asked; a full run keeps them.
        for f in selected(&quick) {
            assert!(!f.scale, "{} is a scale figure", f.name);
        }
        let full = parse(&[]).expect("parse");
        assert_eq!(
            selected(&full).len(),
            FIGURES.len(),
            "a full run measures every figure"
        );
    }

    #[test]
    fn every_figure_is_named_once_and_its_bench_target_exists() {
        let root = crate::project_root();
        let mut names: Vec<&str> = FIGURES.iter().map(|f| f.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), FIGURES.len(), "a figure name appears twice");
        // Package name -> directory, for every package of the workspace.
        let mut dirs: Vec<PathBuf> = fs::read_dir(root.join("crates"))
            .expect("crates/")
            .flatten()
            .map(|e| e.path())
            .collect();
        dirs.push(root.join("tests"));
        let dir_of = |package: &str| {
            dirs.iter()
                .find(|d| {
                    fs::read_to_string(d.join("Cargo.toml"))
                        .ok()
                        .and_then(|m| package_name(&m))
                        .as_deref()
                        == Some(package)
                })
                .cloned()
        };
        for f in FIGURES {
            let dir =
                dir_of(f.package).unwrap_or_else(|| panic!("{}: no package {}", f.name, f.package));
            let src = dir.join("benches").join(format!("{}.rs", f.bench));
            let src = fs::read_to_string(&src)
                .unwrap_or_else(|e| panic!("{}: {}: {e}", f.name, src.display()));
            let mention = match f.source {
                Source::Criterion => format!("\"{}\"", f.name),
                Source::Printed => format!("FIGURE {} ", f.name),
            };
            assert!(
                src.contains(&mention),
                "{}: benches/{}.rs has no `{mention}`",
                f.name,
                f.bench
            );
        }
    }
}
