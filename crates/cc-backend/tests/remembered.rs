//! Remembered failures with the real compiler, the persistent kernel store and real
//! processes: a candidate calling an undefined function, compiled in a batch of 12 beside
//! 11 good ones, fails alone naming its symbol while the 11 are returned; a second process
//! loads the 11 and answers the bad one from the remembered failure, compiling nothing; a
//! process asked for the bad one alone compiles nothing and says why. A retry compiles it
//! again, and forgetting (as `kcache gc --failures` does) makes the next process compile
//! it. A failure of the environment (a compiler killed, a full disk) is never remembered.
//!
//! Workers are this test binary re-run with `REMEMBER_ROLE` set.

#![allow(clippy::unwrap_used)]

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use cc_backend::{Arg, CcBackend, CcError, CcProgram, Kernel, Signature, Source};
use kernel_cache::store::{FailureMemory, KernelStore};
use kernel_cache::{BatchKernel, KernelCache, KernelError, Names, Outcome, Resolver};
use test_support::kernels::elementwise_kernel;
use test_support::lines::censused;

const ROLE: &str = "REMEMBER_ROLE";

/// Where the bad candidate sits in the batch.
const BAD: usize = 5;

/// The function the bad candidate calls and nothing defines (a misspelled call: under gcc
/// 12 an implicit declaration is a warning, so the unit compiles and the link fails).
const MISSING: &str = "kcache_missing_fn";

fn names() -> Names {
    Names::new().with_bound(["out", "a", "b", "n"])
}

/// Candidate `i` of the tuning round: `out[i] = a[i] * i + b[i]`, or, for [`BAD`], a call
/// of [`MISSING`].
fn candidate(b: &CcBackend, i: usize) -> BatchKernel<Source> {
    let name = format!("cand{i}");
    let expr = if i == BAD {
        format!("a[i] + {MISSING}(b[i])")
    } else {
        format!("a[i] * {i}.0f + b[i]")
    };
    Source::new(elementwise_kernel(&name, &expr), Signature::out_a_b_n()).batch_kernel(
        &name,
        &names(),
        vec![],
        b.identity(),
    )
}

/// Checks that an answered good candidate `i` computes `a * i + b`.
fn check(answer: &kernel_cache::Resolved<CcProgram>, i: usize) {
    let kernel = Kernel::from_resolved(answer).unwrap();
    let (a, bb) = ([1.0f32, 2.0, 3.0], [10.0f32, 20.0, 30.0]);
    let mut out = [0.0f32; 3];
    kernel
        .call(&mut [
            Arg::F32Mut(&mut out),
            Arg::F32(&a),
            Arg::F32(&bb),
            Arg::I32Scalar(3),
        ])
        .unwrap();
    let want: Vec<f32> = a.iter().zip(&bb).map(|(x, y)| x * i as f32 + y).collect();
    assert_eq!(out.to_vec(), want, "candidate {i}");
}

/// How the bad candidate was answered: `unit` (it failed alone now), `remembered`, or
/// something else (which fails the test), and whether the message names [`MISSING`].
fn bad_kind(outcome: &Outcome<CcProgram, CcError>) -> (String, bool) {
    let Err(error) = outcome else {
        panic!("the bad candidate has a program")
    };
    let kind = match error.as_ref() {
        KernelError::Unit(_) => "unit",
        KernelError::Remembered { .. } => "remembered",
        other => panic!("the bad candidate failed otherwise: {other}"),
    };
    assert!(error.is_alone());
    let message = match error.remembered() {
        Some(message) => message.to_string(),
        None => error.to_string(),
    };
    (kind.to_string(), message.contains(MISSING))
}

/// The worker body; a no-op unless this process was spawned as a worker.
///
/// Resolves the candidates `REMEMBER_WHICH` names (`all`: the 12; `bad`: the bad one
/// alone) with a fresh memory cache over the store at `REMEMBER_DIR` (failure memory
/// `REMEMBER_MODE`: `remember` or `retry`), checks every good candidate computes what it
/// should, and prints what it compiled, loaded and how the bad one was answered.
#[test]
fn worker() {
    let Ok(role) = std::env::var(ROLE) else {
        return;
    };
    assert_eq!(role, "resolve");
    let dir = PathBuf::from(std::env::var("REMEMBER_DIR").unwrap());
    let mode = match std::env::var("REMEMBER_MODE").unwrap().as_str() {
        "remember" => FailureMemory::Remember,
        "retry" => FailureMemory::Retry,
        other => panic!("unknown mode {other}"),
    };
    let store = KernelStore::new(&dir).with_failure_memory(mode);
    let b = CcBackend::new().expect("a C compiler is installed");
    let which: Vec<usize> = match std::env::var("REMEMBER_WHICH").unwrap().as_str() {
        "all" => (0..12).collect(),
        "bad" => vec![BAD],
        other => panic!("unknown batch {other}"),
    };
    let batch: Vec<_> = which.iter().map(|&i| candidate(&b, i)).collect();
    let cache = KernelCache::new(1 << 30);
    let (outcomes, census) = censused(
        Resolver::new(&cache, &b)
            .store(Some(&store))
            .split(b.split())
            .resolve(&batch),
    );
    let outcomes = outcomes.unwrap();
    let mut bad = (String::new(), false);
    for (&i, outcome) in which.iter().zip(&outcomes) {
        if i == BAD {
            bad = bad_kind(outcome);
        } else {
            check(outcome.as_ref().unwrap(), i);
        }
    }
    println!(
        "RESULT units={} programs={} loaded={} compiled={} failed={} remembered={} bad={} names_symbol={}",
        b.units_compiled(),
        b.programs_compiled(),
        census.kernels_loaded,
        census.kernels_compiled,
        census.kernels_failed,
        census.kernels_remembered_failed,
        bad.0,
        bad.1,
    );
}

/// Runs a worker resolving `which` (`all` or `bad`) over the store at `dir` with failure
/// memory `mode`; returns its result line.
fn run(dir: &Path, which: &str, mode: &str) -> String {
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "worker", "--nocapture", "--test-threads=1"])
        .env(ROLE, "resolve")
        .env("REMEMBER_DIR", dir)
        .env("REMEMBER_WHICH", which)
        .env("REMEMBER_MODE", mode)
        .stderr(Stdio::inherit())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "worker failed: {stdout}");
    stdout
        .lines()
        .find_map(|l| l.split_once("RESULT ").map(|(_, r)| r.to_string()))
        .unwrap_or_else(|| panic!("no RESULT in {stdout}"))
}

fn field(result: &str, name: &str) -> String {
    result
        .split_whitespace()
        .find_map(|f| f.strip_prefix(&format!("{name}=")))
        .unwrap_or_else(|| panic!("no {name} in {result}"))
        .to_string()
}

/// The issue's words: "A candidate with an undefined function compiles in a batch of 12
/// beside 11 good ones: the 11 are returned and loaded by a second process, the bad one
/// fails alone naming its symbol; a second process asked for the bad one compiles nothing
/// and reports the remembered failure."
#[test]
fn a_bad_candidate_fails_alone_once_and_is_remembered_across_processes() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("kernels");

    // The first process: the 11 are compiled and returned, the bad one fails alone at the
    // link, naming the function it calls.
    let first = run(&dir, "all", "remember");
    assert_eq!(field(&first, "compiled"), "11", "{first}");
    assert_eq!(field(&first, "failed"), "1", "{first}");
    assert_eq!(field(&first, "remembered"), "0", "{first}");
    assert_eq!(field(&first, "bad"), "unit", "{first}");
    assert_eq!(field(&first, "names_symbol"), "true", "{first}");
    let store = KernelStore::new(&dir);
    let stats = store.stats().unwrap();
    assert_eq!(stats.failures, 1);
    assert!(stats.failure_bytes > 0);
    let listed = store.failures().unwrap();
    assert_eq!(listed.len(), 1);
    assert!(listed[0].message.as_deref().unwrap().contains(MISSING));

    // A second process: the 11 are loaded (and computed), the bad one answered from the
    // remembered failure; nothing is compiled.
    let second = run(&dir, "all", "remember");
    assert_eq!(field(&second, "loaded"), "11", "{second}");
    assert_eq!(field(&second, "remembered"), "1", "{second}");
    assert_eq!(field(&second, "bad"), "remembered", "{second}");
    assert_eq!(field(&second, "names_symbol"), "true", "{second}");
    assert_eq!(field(&second, "units"), "0", "{second}");
    assert_eq!(field(&second, "programs"), "0", "{second}");
    assert_eq!(field(&second, "compiled"), "0", "{second}");

    // A process asked for the bad one alone compiles nothing and says why.
    let alone = run(&dir, "bad", "remember");
    assert_eq!(field(&alone, "units"), "0", "{alone}");
    assert_eq!(field(&alone, "programs"), "0", "{alone}");
    assert_eq!(field(&alone, "bad"), "remembered", "{alone}");
    assert_eq!(field(&alone, "names_symbol"), "true", "{alone}");

    // A retry compiles it again (and remembers the failure again).
    let retry = run(&dir, "bad", "retry");
    assert_eq!(field(&retry, "units"), "1", "{retry}");
    assert_eq!(field(&retry, "bad"), "unit", "{retry}");
    assert_eq!(store.stats().unwrap().failures, 1);

    // Forgetting (what `kcache gc --failures` does): the next process compiles it.
    assert_eq!(store.forget_failures(None).unwrap(), 1);
    assert_eq!(store.stats().unwrap().failures, 0);
    let fresh = run(&dir, "bad", "remember");
    assert_eq!(field(&fresh, "units"), "1", "{fresh}");
    assert_eq!(field(&fresh, "bad"), "unit", "{fresh}");
    // Forgetting by age keeps a failure younger than the age.
    assert_eq!(
        store
            .forget_failures(Some(std::time::Duration::from_secs(3600)))
            .unwrap(),
        0
    );
    assert_eq!(store.stats().unwrap().failures, 1);
}

/// A compiler wrapper at `dir/name` that runs the real compiler for everything but a unit's
/// compile (`-c`), where it runs `on_compile` (a failure of the environment).
fn wrapper(dir: &Path, name: &str, on_compile: &str) -> PathBuf {
    let path = dir.join(name);
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    fs::write(
        &path,
        format!(
            "#!/bin/sh\nfor a in \"$@\"; do [ \"$a\" = -c ] && {{ {on_compile}; }}; done\nexec {cc} \"$@\"\n"
        ),
    )
    .unwrap();
    fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).unwrap();
    path
}

/// Failures of the environment are never remembered: a compiler killed by a signal, one
/// that cannot write its output (a full disk), and one that cannot be started at all. Each
/// resolve compiles the candidates again.
#[test]
fn failures_of_the_environment_are_not_remembered() {
    let tmp = tempfile::tempdir().unwrap();
    let bin = tmp.path().join("bin");
    fs::create_dir(&bin).unwrap();
    let killed = wrapper(&bin, "cc-killed", "kill -9 $$");
    let full = wrapper(
        &bin,
        "cc-full",
        "echo \"kernel.c:2:1: fatal error: error writing to /tmp/ccA.s: No space left on device\" >&2; exit 1",
    );
    let vanishing = wrapper(&bin, "cc-vanishing", "exit 1");
    for (compiler, gone) in [(&killed, false), (&full, false), (&vanishing, true)] {
        let dir = tmp.path().join(format!(
            "kernels-{}",
            compiler.file_name().unwrap().to_string_lossy()
        ));
        let store = KernelStore::new(&dir);
        store.create().unwrap();
        let b = CcBackend::with_compiler(compiler.to_str().unwrap()).unwrap();
        if gone {
            // Made (its version read), then removed: it cannot be started.
            fs::remove_file(compiler).unwrap();
        }
        // The bad candidate and a good one: each fails, alone or with its program.
        let batch = [candidate(&b, BAD), candidate(&b, 1)];
        for round in 0..2 {
            let cache = KernelCache::new(1 << 30);
            let before = b.programs_compiled();
            let (outcomes, census) = censused(
                Resolver::new(&cache, &b)
                    .store(Some(&store))
                    .split(b.split())
                    .resolve(&batch),
            );
            let outcomes = outcomes.unwrap();
            assert!(
                outcomes.iter().all(Result::is_err),
                "{compiler:?} round {round}"
            );
            assert_eq!(census.kernels_remembered_failed, 0, "{compiler:?}");
            assert_eq!(census.kernels_failed, 2, "{compiler:?}");
            assert!(
                b.programs_compiled() > before,
                "{compiler:?}: compiled again"
            );
            assert_eq!(store.stats().unwrap().failures, 0, "{compiler:?}");
        }
    }

    // The naive variant the oracle catches: with the real compiler, the bad candidate's
    // own failure is remembered in a store of its own.
    let dir = tmp.path().join("kernels-real");
    let store = KernelStore::new(&dir);
    let b = CcBackend::new().unwrap();
    let cache = KernelCache::new(1 << 30);
    Resolver::new(&cache, &b)
        .store(Some(&store))
        .split(b.split())
        .resolve(&[candidate(&b, BAD)])
        .map(|r| r.answers)
        .unwrap();
    assert_eq!(store.stats().unwrap().failures, 1);
}

/// The failures kept are bounded: past the cap the oldest are forgotten; and a store with
/// failure memory off neither reads nor writes them.
#[test]
fn remembered_failures_are_bounded_and_can_be_turned_off() {
    let tmp = tempfile::tempdir().unwrap();
    let b = CcBackend::new().unwrap();
    // Three bad candidates of distinct texts.
    let bad: Vec<BatchKernel<Source>> = (0..3)
        .map(|j| {
            let name = format!("bad{j}");
            Source::new(
                elementwise_kernel(&name, &format!("a[i] + {MISSING}{j}(b[i])")),
                Signature::out_a_b_n(),
            )
            .batch_kernel(&name, &names(), vec![], b.identity())
        })
        .collect();
    let store = KernelStore::new(tmp.path().join("capped")).with_max_failures(2);
    for kernel in &bad {
        let cache = KernelCache::new(1 << 30);
        Resolver::new(&cache, &b)
            .store(Some(&store))
            .split(b.split())
            .resolve(std::slice::from_ref(kernel))
            .map(|r| r.answers)
            .unwrap();
        // Distinct modification times, so "oldest" is well defined.
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let listed = store.failures().unwrap();
    assert_eq!(listed.len(), 2, "{listed:?}");
    let messages: Vec<String> = listed.into_iter().map(|f| f.message.unwrap()).collect();
    assert!(messages[0].contains(&format!("{MISSING}1")), "{messages:?}");
    assert!(messages[1].contains(&format!("{MISSING}2")), "{messages:?}");

    let off = KernelStore::new(tmp.path().join("off")).with_failure_memory(FailureMemory::Off);
    for _ in 0..2 {
        let cache = KernelCache::new(1 << 30);
        let before = b.units_compiled();
        Resolver::new(&cache, &b)
            .store(Some(&off))
            .split(b.split())
            .resolve(&bad[..1])
            .map(|r| r.answers)
            .unwrap();
        assert_eq!(b.units_compiled(), before + 1);
    }
    assert_eq!(off.stats().unwrap().failures, 0);
}
