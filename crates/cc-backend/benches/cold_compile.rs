//! `cold_compile_64_vs_one_file` and `cold_compile_64_split2_vs_one_file` (printed figures,
//! see `xtask/src/bench.rs`): kcache resolving 64 distinct realistic kernels in a fresh
//! process with an empty kernel store (one program; then split into 2 programs compiled
//! concurrently), against `cc -O2 -shared -fPIC` of one file holding the same 64 kernels
//! with the prelude once.
//!
//! The bench re-runs itself as a worker process per kcache measurement, which times only
//! its resolve call (the kernel store's save included); the baseline is the compiler's
//! process, timed from spawn to exit. The three are run in a rotating order so no side
//! always runs first. With `--bench` it prints
//! `FIGURE cold_compile_64_vs_one_file <whole s> <one file s>` and
//! `FIGURE cold_compile_64_split2_vs_one_file <split s> <one file s>`; without (as `cargo
//! xtask test` runs it) it does the same with 8 kernels and checks that each kcache run
//! compiled every kernel and the one file compiled.
//!
//! With `--units` it measures nothing: it resolves the 64 kernels once as one program and
//! once split into 2, through a compiler command that logs each unit it compiles (the
//! entries `*__kcache_entry` its `kernel.c` defines), and prints which kernels share a
//! merged unit and which are compiled alone (`UNITS whole: ...`, `UNITS split2: ...`).

use std::path::Path;
use std::process::Command;

use std::time::Instant;
use test_support::child::Worker;

use cc_backend::{CcBackend, DEFAULT_PRELUDE, Signature, Source};
use kernel_cache::store::KernelStore;
use kernel_cache::{BatchKernel, KernelCache, Names, Resolver, Split};
use test_support::kernels::realistic_kernel;
use test_support::lines::censused;

/// The variables that make this binary a worker (see `test_support::child::Worker`).
const PREFIX: &str = "KCACHE_COLD_BENCH";

fn symbol(i: u64) -> String {
    format!("fused_{i}")
}

fn text(i: u64) -> String {
    realistic_kernel(&symbol(i), 5000 + i)
}

fn batch(backend: &CcBackend, n: u64) -> Vec<BatchKernel<Source>> {
    let names = Names::new().with_bound(["out", "a", "b", "n"]);
    (0..n)
        .map(|i| {
            Source::new(text(i), Signature::out_a_b_n()).batch_kernel(
                &symbol(i),
                &names,
                vec![],
                backend.identity(),
            )
        })
        .collect()
}

/// A worker: resolves `n` kernels with an empty store at `dir`, as one program (`whole`)
/// or split into 2; prints `SECONDS <s> COMPILED <kernels>`.
fn worker(role: &str, dir: &Path, n: u64) {
    let backend = CcBackend::new()
        .expect("a C compiler")
        .with_split(Split::new(2, 1));
    let b = batch(&backend, n);
    let store = KernelStore::new(dir);
    let cache = KernelCache::new(1 << 30);
    let start = Instant::now();
    let (out, census) = censused(if role == "whole" {
        Resolver::new(&cache, &backend)
            .store(Some(&store))
            .resolve_strict(&b)
    } else {
        Resolver::new(&cache, &backend)
            .store(Some(&store))
            .split(backend.split())
            .resolve_strict(&b)
    });
    let seconds = start.elapsed().as_secs_f64();
    out.expect("resolve");
    println!("SECONDS {seconds:.6} COMPILED {}", census.kernels_compiled);
}

fn spawn(role: &str, dir: &Path, n: u64) -> f64 {
    let line = Worker::run(PREFIX, role, dir, n);
    let w: Vec<&str> = line.split_whitespace().collect();
    let compiled: u64 = w[3].parse().expect("compiled");
    assert_eq!(compiled, n, "worker {role}: every kernel is compiled");
    w[1].parse().expect("seconds")
}

/// `cc -O2 -shared -fPIC` of one file: the prelude once, then the `n` kernels.
fn one_file(dir: &Path, n: u64) -> f64 {
    let mut c = DEFAULT_PRELUDE.to_string();
    for i in 0..n {
        c.push_str(&text(i));
    }
    let file = dir.join("all.c");
    std::fs::write(&file, c).expect("write the one file");
    let command = std::env::var("CC")
        .ok()
        .filter(|c| !c.trim().is_empty())
        .unwrap_or_else(|| "cc".to_string());
    let mut words = command.split_whitespace();
    let program = words.next().expect("a compiler command");
    let start = Instant::now();
    let out = Command::new(program)
        .args(words)
        .args(["-O2", "-shared", "-fPIC", "-o"])
        .arg(dir.join("all.so"))
        .arg(&file)
        .arg("-lm")
        .output()
        .expect("run the compiler");
    let seconds = start.elapsed().as_secs_f64();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    seconds
}

/// `--units`: which of the `n` kernels share merged units, whole and split in 2.
fn units(n: u64) {
    let tmp = tempfile::tempdir().expect("tmp");
    let log = tmp.path().join("units.log");
    let script = tmp.path().join("logging-cc.sh");
    let compiler = std::env::var("CC")
        .ok()
        .filter(|c| !c.trim().is_empty())
        .unwrap_or_else(|| "cc".to_string());
    // Each unit compile (`-c` of a `.c`) logs the entries its unit defines, one line.
    std::fs::write(
        &script,
        format!(
            "case \" $* \" in *\" -c \"*) for a in \"$@\"; do case \"$a\" in *.c) \
             echo \"$(grep -o '[A-Za-z0-9_]*__kcache_entry(void' \"$a\" | sed 's/__kcache_entry(void//' | sort -u | tr '\\n' ' ')\" >> '{}';; esac; done;; esac\n\
             exec {compiler} \"$@\"\n",
            log.display()
        ),
    )
    .expect("write the logging compiler");
    for (role, split) in [("whole", false), ("split2", true)] {
        let _ = std::fs::remove_file(&log);
        let backend = CcBackend::with_compiler(&format!("sh {}", script.display()))
            .expect("a C compiler")
            .with_split(Split::new(2, 1));
        let b = batch(&backend, n);
        let cache = KernelCache::new(1 << 30);
        if split {
            Resolver::new(&cache, &backend)
                .split(backend.split())
                .resolve_strict(&b)
                .map(|r| r.answers)
                .expect("resolve");
        } else {
            Resolver::new(&cache, &backend)
                .resolve_strict(&b)
                .map(|r| r.answers)
                .expect("resolve");
        }
        let logged = std::fs::read_to_string(&log).expect("the unit log");
        let mut merged: Vec<Vec<String>> = Vec::new();
        let mut alone: Vec<String> = Vec::new();
        for line in logged.lines() {
            let mut members: Vec<String> = line.split_whitespace().map(str::to_string).collect();
            members.sort_by_key(|m| m.trim_start_matches("fused_").parse::<u64>().unwrap_or(0));
            match members.len() {
                0 => {}
                1 => alone.extend(members),
                _ => merged.push(members),
            }
        }
        alone.sort_by_key(|m| m.trim_start_matches("fused_").parse::<u64>().unwrap_or(0));
        let in_merged: usize = merged.iter().map(Vec::len).sum();
        println!(
            "UNITS {role}: {} merged units holding {in_merged} kernels, {} kernels in units of their own (merged compiles {}, unit compiles {})",
            merged.len(),
            alone.len(),
            backend.merged_compiles(),
            backend.units_compiled()
        );
        for (i, m) in merged.iter().enumerate() {
            println!("UNITS {role} merged unit {i}: {}", m.join(" "));
        }
        println!("UNITS {role} alone: {}", alone.join(" "));
    }
}

fn main() {
    if let Some(w) = Worker::assigned(PREFIX) {
        worker(&w.role, &w.dir, w.n);
        return;
    }
    if std::env::args().any(|a| a == "--units") {
        units(64);
        return;
    }
    let bench = std::env::args().any(|a| a == "--bench");
    let n = if bench { 64 } else { 8 };
    let tmp = tempfile::tempdir().expect("tmp");
    // The rotation: which side runs first changes with the second of the clock, so
    // interleaved rounds of `cargo xtask bench` start each side first in turn.
    let first = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() % 3);
    let (mut whole, mut split, mut file) = (0.0, 0.0, 0.0);
    for step in 0..3 {
        let dir = tmp.path().join(format!("run{step}"));
        std::fs::create_dir(&dir).expect("mkdir");
        match (first + step) % 3 {
            0 => whole = spawn("whole", &dir.join("kernels"), n),
            1 => split = spawn("split", &dir.join("kernels"), n),
            _ => file = one_file(&dir, n),
        }
    }
    if bench {
        println!("FIGURE cold_compile_{n}_vs_one_file {whole:.6} {file:.6}");
        println!("FIGURE cold_compile_{n}_split2_vs_one_file {split:.6} {file:.6}");
    } else {
        println!(
            "cold compile of {n} kernels: whole {whole:.3} s, split in 2 {split:.3} s, one file {file:.3} s"
        );
    }
}
