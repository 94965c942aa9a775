//! The plain tuning loop a user writes without kcache, the baseline of the
//! `tune_session_vs_plain` figures: every candidate rendered (reference-ir's renderer, the
//! demo's settings) into a C file of its own with a `main` that times it, compiled by one
//! `cc -O2 <the demo's options> file.c -o exe -lm` into an executable (no kernel cache, no canonical keys,
//! no kernel store), run once to check its output against the Rust reference and then
//! timed with the warm-up, samples and iterations the caller gives (no memo table: a
//! candidate listed twice is compiled and measured twice). The candidates compile on
//! `threads` threads (a user's thread pool); the measurements run one at a time, in the
//! listed order, then the fastest `finalists` of each kernel are timed again
//! `finalist_rounds` times, interleaved, and the fastest by those wins.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use reference_ir::render::{Naming, Param, render, segments, signature_of};
use schedule_cache::Config;

use crate::error::DemoError;
use crate::kernels::{Data, Routine, compiler_options, routines_sized};
use tuner::median;

/// One candidate of the plain loop: a point of a demo kernel's space and how it is timed.
#[derive(Clone, Debug, PartialEq)]
pub struct PlainCandidate {
    /// The kernel's name (one of [`kernel_names`](crate::kernel_names)).
    pub kernel: String,
    /// The point of its schedule space.
    pub point: Vec<usize>,
    /// Untimed runs before the samples.
    pub warmup: usize,
    /// Timed samples.
    pub samples: usize,
    /// Runs per sample (a sample is their mean).
    pub iterations: u32,
}

/// How the plain loop runs.
#[derive(Clone, Debug)]
pub struct PlainOptions {
    /// The compiler command (`cc`).
    pub compiler: String,
    /// Options beyond the demo's own (`-ffp-contract=off -fopenmp-simd`) and `-O2`.
    pub extra_options: Vec<String>,
    /// The matrix product's size (`None`: the demo's default).
    pub size: Option<usize>,
    /// Where the C files and executables go (created).
    pub work_dir: PathBuf,
    /// Compiles at a time.
    pub threads: usize,
    /// Candidates of each kernel timed again at the end.
    pub finalists: usize,
    /// Interleaved rounds over the finalists (each with the candidate's own samples).
    pub finalist_rounds: usize,
}

/// What the plain loop did.
#[derive(Clone, Debug, PartialEq)]
pub struct PlainReport {
    /// Wall time of the whole loop, in seconds.
    pub seconds: f64,
    /// Of which compiling (wall time of the compile phase).
    pub compile_seconds: f64,
    /// Compiler runs (one per candidate).
    pub compiles: usize,
    /// Candidates whose output was wrong (never winners).
    pub wrong: usize,
    /// Per kernel, in the order first listed: its winning point and median time (seconds).
    pub winners: Vec<(String, Vec<usize>, f64)>,
}

struct Built {
    exe: PathBuf,
    out: PathBuf,
}

/// Runs the plain loop over `candidates` (see the module doc).
///
/// # Errors
/// [`DemoError::UnknownKernel`] for a kernel the demo does not have,
/// [`DemoError::Render`] for a point that is not legal or does not render,
/// [`DemoError::NothingCompiled`] when the compiler fails on a candidate (the plain loop
/// has no per-candidate recovery: the demo's candidates all compile),
/// [`DemoError::Io`] for the work directory or a candidate's run.
pub fn plain_loop(
    candidates: &[PlainCandidate],
    options: &PlainOptions,
) -> Result<PlainReport, DemoError> {
    let start = Instant::now();
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| DemoError::Io { path, source }
    };
    std::fs::create_dir_all(&options.work_dir).map_err(io(&options.work_dir))?;
    let routines = routines_sized(options.size.unwrap_or(crate::kernels::MM));
    let routine = |name: &str| {
        routines
            .iter()
            .find(|r| r.name == name)
            .ok_or_else(|| DemoError::UnknownKernel {
                name: name.to_string(),
                known: routines
                    .iter()
                    .map(|r| r.name)
                    .collect::<Vec<_>>()
                    .join(", "),
            })
    };
    let config = Config::new(reference_ir::render::reference_settings())
        .with(schedule_cache::TIMING_SETTING, "isolated");
    let mut flags = vec!["-O2".to_string()];
    flags.extend(compiler_options(&config));
    flags.extend(options.extra_options.iter().cloned());
    // Render every candidate to its own file (sequentially, as the tuner renders).
    let mut files = Vec::with_capacity(candidates.len());
    for (i, c) in candidates.iter().enumerate() {
        let r = routine(&c.kernel)?;
        let text = program(r, &c.point, &config)?;
        let base = options.work_dir.join(format!("{}_{i}", c.kernel));
        let source = base.with_extension("c");
        std::fs::write(&source, text).map_err(io(&source))?;
        files.push((source, base));
    }
    // Compile, `threads` at a time.
    let compile_start = Instant::now();
    let threads = options.threads.max(1);
    let results: Vec<Result<(), DemoError>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let (files, flags, compiler) = (&files, &flags, &options.compiler);
                s.spawn(move || {
                    files
                        .iter()
                        .enumerate()
                        .filter(|(i, _)| i % threads == t)
                        .map(|(_, (source, exe))| compile(compiler, flags, source, exe))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| {
                h.join()
                    .unwrap_or_else(|_| vec![Err(DemoError::Render("a compile thread".into()))])
            })
            .collect()
    });
    results
        .into_iter()
        .collect::<Result<Vec<()>, DemoError>>()?;
    let compile_seconds = compile_start.elapsed().as_secs_f64();
    let built: Vec<Built> = files
        .into_iter()
        .map(|(_, exe)| Built {
            out: exe.with_extension("out"),
            exe,
        })
        .collect();
    // Measure in order; the data file of each kernel is written once.
    let mut data_files: Vec<(String, PathBuf, Data)> = Vec::new();
    let mut medians = Vec::with_capacity(candidates.len());
    let mut wrong = 0;
    for (c, b) in candidates.iter().zip(&built) {
        if !data_files.iter().any(|(k, _, _)| *k == c.kernel) {
            let r = routine(&c.kernel)?;
            let data = Data::new(r);
            let path = options.work_dir.join(format!("{}.data", c.kernel));
            let bytes: Vec<u8> = data
                .a
                .iter()
                .chain(&data.b)
                .flat_map(|v| v.to_le_bytes())
                .collect();
            std::fs::write(&path, bytes).map_err(io(&path))?;
            data_files.push((c.kernel.clone(), path, data));
        }
        let (_, path, data) = data_files
            .iter()
            .find(|(k, _, _)| *k == c.kernel)
            .ok_or_else(|| DemoError::Render("no data".into()))?;
        let times = run(b, path, c)?;
        let r = routine(&c.kernel)?;
        if check(&b.out, data, r.tolerance)? {
            medians.push(median(&times));
        } else {
            wrong += 1;
            medians.push(None);
        }
    }
    // The finalists of each kernel, timed again interleaved.
    let mut kernels: Vec<&str> = Vec::new();
    for c in candidates {
        if !kernels.contains(&c.kernel.as_str()) {
            kernels.push(&c.kernel);
        }
    }
    let mut winners = Vec::new();
    for k in kernels {
        let mut mine: Vec<(usize, f64)> = candidates
            .iter()
            .enumerate()
            .filter(|(_, c)| c.kernel == k)
            .filter_map(|(i, _)| medians[i].map(|m| (i, m)))
            .collect();
        mine.sort_by(|x, y| x.1.total_cmp(&y.1));
        mine.truncate(options.finalists.max(1));
        let mut again: Vec<Vec<f64>> = vec![Vec::new(); mine.len()];
        let (_, path, _) = data_files
            .iter()
            .find(|(name, _, _)| name == k)
            .ok_or_else(|| DemoError::Render("no data".into()))?;
        for _ in 0..options.finalist_rounds {
            for (j, (i, _)) in mine.iter().enumerate() {
                again[j].extend(run(&built[*i], path, &candidates[*i])?);
            }
        }
        let best = mine
            .iter()
            .zip(&again)
            .map(|((i, m), t)| (*i, median(t).unwrap_or(*m)))
            .min_by(|x, y| x.1.total_cmp(&y.1));
        if let Some((i, t)) = best {
            winners.push((k.to_string(), candidates[i].point.clone(), t));
        }
    }
    Ok(PlainReport {
        seconds: start.elapsed().as_secs_f64(),
        compile_seconds,
        compiles: candidates.len(),
        wrong,
        winners,
    })
}

/// The candidate's C program: its kernels (one per segment, as the demo renders them),
/// then a `main` that reads `a` and `b` from the file `argv[1]`, runs the kernels once and
/// writes `out` to `argv[2]`, then runs them `argv[3]` times untimed and prints `argv[4]`
/// samples, each the mean seconds of `argv[5]` runs.
fn program(routine: &Routine, point: &[usize], config: &Config) -> Result<String, DemoError> {
    let built = (routine.build)();
    let schedule = (routine.schedule)(&built, point)
        .ok_or_else(|| DemoError::Render(format!("{point:?} is not a legal point")))?;
    let code = schedule
        .apply(&built.code)
        .map_err(|e| DemoError::Render(e.to_string()))?;
    let mut preludes: Vec<String> = Vec::new();
    let (mut texts, mut calls) = (String::new(), String::new());
    for (i, segment) in segments(&code).iter().enumerate() {
        let symbol = format!("{}__seg{i}", routine.name);
        let params = signature_of(segment, &[]);
        let rendered = render(segment, &symbol, &params, Naming::Minted, config)
            .map_err(|e| DemoError::Render(e.to_string()))?;
        if !preludes.contains(&rendered.prelude) {
            preludes.push(rendered.prelude.clone());
        }
        texts.push_str(&rendered.text);
        texts.push('\n');
        let args = params
            .iter()
            .map(|p| match p {
                Param::Node(n) => built
                    .params
                    .iter()
                    .find(|(id, _)| *id == n.id())
                    .map(|(_, b)| b.name())
                    .ok_or_else(|| DemoError::Render(format!("{} is bound to nothing", n.label()))),
                Param::Static(s) => Err(DemoError::Render(format!("static {s}"))),
            })
            .collect::<Result<Vec<&str>, DemoError>>()?;
        let _ = writeln!(calls, "    {symbol}({});", args.join(", "));
    }
    let n = routine.len;
    let mut c = preludes.concat();
    c.push_str("#include <stdio.h>\n#include <stdlib.h>\n#include <time.h>\n");
    c.push_str(&texts);
    let _ = write!(
        c,
        r#"static float out[{n}], a[{n}], b[{n}];
static void run_once(void) {{
{calls}}}
static double now(void) {{
    struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}}
int main(int argc, char **argv) {{
    if (argc != 6) return 2;
    FILE *in = fopen(argv[1], "rb");
    if (!in || fread(a, sizeof(float), {n}, in) != {n} || fread(b, sizeof(float), {n}, in) != {n}) return 3;
    fclose(in);
    run_once();
    FILE *o = fopen(argv[2], "wb");
    if (!o || fwrite(out, sizeof(float), {n}, o) != {n}) return 4;
    fclose(o);
    int warmup = atoi(argv[3]), samples = atoi(argv[4]), iterations = atoi(argv[5]);
    for (int w = 0; w < warmup; ++w) run_once();
    for (int s = 0; s < samples; ++s) {{
        double t0 = now();
        for (int i = 0; i < iterations; ++i) run_once();
        printf("%.9e\n", (now() - t0) / iterations);
    }}
    return 0;
}}
"#
    );
    Ok(c)
}

fn compile(compiler: &str, flags: &[String], source: &Path, exe: &Path) -> Result<(), DemoError> {
    let output = Command::new(compiler)
        .args(flags)
        .arg(source)
        .arg("-o")
        .arg(exe)
        .arg("-lm")
        .output()
        .map_err(|source| DemoError::Io {
            path: PathBuf::from(compiler),
            source,
        })?;
    if output.status.success() {
        Ok(())
    } else {
        Err(DemoError::NothingCompiled {
            routine: source.display().to_string(),
            first: String::from_utf8_lossy(&output.stderr)
                .lines()
                .next()
                .unwrap_or("")
                .to_string(),
        })
    }
}

fn run(built: &Built, data: &Path, c: &PlainCandidate) -> Result<Vec<f64>, DemoError> {
    let output = Command::new(&built.exe)
        .arg(data)
        .arg(&built.out)
        .arg(c.warmup.to_string())
        .arg(c.samples.to_string())
        .arg(c.iterations.max(1).to_string())
        .output()
        .map_err(|source| DemoError::Io {
            path: built.exe.clone(),
            source,
        })?;
    if !output.status.success() {
        return Err(DemoError::Io {
            path: built.exe.clone(),
            source: std::io::Error::other(format!("exited with {}", output.status)),
        });
    }
    Ok(String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|l| l.trim().parse::<f64>().ok())
        .collect())
}

fn check(out: &Path, data: &Data, tolerance: f32) -> Result<bool, DemoError> {
    let bytes = std::fs::read(out).map_err(|source| DemoError::Io {
        path: out.to_path_buf(),
        source,
    })?;
    let values: Vec<f32> = bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    Ok(values.len() == data.expected.len()
        && values.iter().zip(&data.expected).all(|(o, e)| {
            let d = (o - e).abs() / e.abs().max(1.0);
            d <= tolerance
        }))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// Real compiles and runs: every candidate is compiled once per listing (a repeat
    /// too), checked right, and the winner is one of the listed points.
    #[test]
    fn the_plain_loop_compiles_checks_and_times_every_listed_candidate() {
        let tmp = tempfile::tempdir().unwrap();
        let candidate = |point: Vec<usize>| PlainCandidate {
            kernel: "chain".to_string(),
            point,
            warmup: 1,
            samples: 2,
            iterations: 1,
        };
        let points = [vec![0, 0, 0], vec![0, 2, 2], vec![1, 1, 1], vec![0, 2, 2]];
        let candidates: Vec<_> = points.iter().cloned().map(candidate).collect();
        let options = PlainOptions {
            compiler: "cc".to_string(),
            extra_options: Vec::new(),
            size: None,
            work_dir: tmp.path().join("work"),
            threads: 2,
            finalists: 2,
            finalist_rounds: 1,
        };
        let report = plain_loop(&candidates, &options).unwrap();
        assert_eq!(report.compiles, 4);
        assert_eq!(report.wrong, 0);
        assert_eq!(report.winners.len(), 1);
        assert!(points.contains(&report.winners[0].1));
        assert!(report.winners[0].2 > 0.0);
        let exes = std::fs::read_dir(tmp.path().join("work"))
            .unwrap()
            .filter(|e| e.as_ref().unwrap().path().extension().is_none())
            .count();
        assert_eq!(exes, 4, "one executable per listed candidate");
        // A kernel the demo does not have is refused.
        let mut bad = candidates[0].clone();
        bad.kernel = "nope".to_string();
        assert!(matches!(
            plain_loop(&[bad], &options),
            Err(DemoError::UnknownKernel { .. })
        ));
    }
}
