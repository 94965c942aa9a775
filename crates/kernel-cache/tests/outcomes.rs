//! Per-kernel outcomes (`Resolver::resolve`) with the real C backend: a
//! candidate that fails to compile fails alone, the others are compiled once, published,
//! saved and loaded by another process.

#![allow(clippy::unwrap_used)]

mod common;

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::Path;
use std::process::Command;

use cc_backend::{CcBackend, CcError, CcProgram, Source};
use common::*;
use kernel_cache::store::{FailureMemory, KernelStore};
use kernel_cache::{
    Backend, BatchKernel, Compiled, Error, Group, KernelCache, Outcome, Resolved, Resolver, Split,
    Units,
};
use test_support::lines::censused;

const BIG: u64 = 1 << 30;

/// Where a syntax error and a refused candidate sit in the 12-candidate batch.
const SYNTAX: usize = 3;
const REFUSED: usize = 8;

/// A candidate the compiler refuses though its syntax is fine: gcc rejects an unroll
/// factor of 65535 or more (clang accepts it, so there the candidate is an `#error`).
fn refused(name: &str) -> BatchKernel<Source> {
    kernel(
        name,
        format!(
            "void {name}(float *out, const float *a, const float *b, int n) {{\n\
             #if defined(__clang__)\n#error \"unroll factor refused\"\n#endif\n\
             #pragma GCC unroll 100000\n\
             for (int i = 0; i < n; ++i) out[i] = a[i] + b[i];\n}}"
        ),
        &[],
    )
}

/// Twelve candidates of one tuning round: ten realistic kernels, one with a syntax error
/// (at `SYNTAX`) and one the compiler refuses (at `REFUSED`).
fn candidates() -> Vec<BatchKernel<Source>> {
    (0..12)
        .map(|i| {
            let name = format!("cand{i}");
            match i {
                SYNTAX => broken(&name),
                REFUSED => refused(&name),
                _ => fused(&name, 500 + i as u64),
            }
        })
        .collect()
}

fn good(i: usize) -> bool {
    i != SYNTAX && i != REFUSED
}

/// Each kernel's output on 16 elements, as the bits of its floats.
fn outputs<'a>(answers: impl Iterator<Item = &'a Resolved<CcProgram>>) -> String {
    answers
        .map(|a| {
            run(a, 16)
                .iter()
                .map(|v| format!("{:08x}", v.to_bits()))
                .collect::<String>()
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// [`outputs`] of the good candidates' outcomes.
fn good_outputs(outcomes: &[Outcome<CcProgram, CcError>]) -> String {
    outputs(
        outcomes
            .iter()
            .enumerate()
            .filter(|(i, _)| good(*i))
            .map(|(_, o)| o.as_ref().unwrap()),
    )
}

/// The two failures hold their own unit's diagnostics (and nothing of the other's).
fn check_failures(outcomes: &[Outcome<CcProgram, CcError>]) {
    for (i, own, other) in [
        (SYNTAX, "expected expression", "unroll"),
        (REFUSED, "unroll", "expected expression"),
    ] {
        let error = outcomes[i].as_ref().unwrap_err();
        assert!(error.is_alone(), "{i}: {error}");
        let failure = error.compile_failure().unwrap();
        assert_eq!(failure.symbols, [format!("cand{i}")]);
        match &failure.source {
            CcError::Compiler {
                stderr, symbols, ..
            } => {
                assert_eq!(symbols, &[format!("cand{i}")]);
                assert!(stderr.contains(own), "{i}: {stderr}");
                assert!(
                    !stderr.contains(other),
                    "{i} holds another unit's: {stderr}"
                );
            }
            other => panic!("{i}: {other:?}"),
        }
        assert!(error.to_string().contains(own), "{error}");
    }
}

/// The reference: the ten good candidates compiled by a strict resolve, without store.
fn reference_outputs(b: &CcBackend) -> String {
    let batch: Vec<_> = candidates()
        .into_iter()
        .enumerate()
        .filter(|(i, _)| good(*i))
        .map(|(_, k)| k)
        .collect();
    let answers = Resolver::new(&KernelCache::new(BIG), b)
        .resolve_strict(&batch)
        .map(|r| r.answers)
        .unwrap();
    outputs(answers.iter())
}

/// The child's environment: the store to load from, and the variant (`whole`, `split`).
const CHILD_STORE: &str = "KCACHE_OUTCOMES_STORE";
const CHILD_VARIANT: &str = "KCACHE_OUTCOMES_VARIANT";

/// The second process: a fresh backend and cache resolve the ten good candidates from
/// the store (0 compiles), then the whole batch (the two failures are not cached in
/// memory; the store remembers them, so they are answered with no compile), then again
/// with the store's failure memory set to retry (they are compiled, and fail, again).
fn child(store: &Path, split: bool) {
    let b = backend();
    let retry = KernelStore::new(store).with_failure_memory(FailureMemory::Retry);
    let store = KernelStore::new(store);
    let cache = KernelCache::new(BIG);
    let batch = candidates();
    let goods: Vec<_> = batch
        .iter()
        .enumerate()
        .filter(|(i, _)| good(*i))
        .map(|(_, k)| k.clone())
        .collect();
    let cut = if split {
        Split::new(3, 1)
    } else {
        Split::WHOLE
    };
    let resolve_in = |store: &KernelStore, batch: &[BatchKernel<Source>]| {
        Resolver::new(&cache, &b)
            .store(store)
            .split(cut)
            .resolve(batch)
    };
    let resolve_with = |batch: &[BatchKernel<Source>]| resolve_in(&store, batch);
    let (loaded, census) = censused(resolve_with(&goods));
    println!(
        "CHILD loaded={} compiled={} failed={} units={}",
        census.kernels_loaded,
        census.kernels_compiled,
        census.kernels_failed,
        b.units_compiled()
    );
    let loaded: Vec<Resolved<CcProgram>> =
        loaded.unwrap().into_iter().map(Result::unwrap).collect();
    println!("CHILD outputs={}", outputs(loaded.iter()));
    let before = b.units_compiled();
    let (all, census) = censused(resolve_with(&batch));
    let all = all.unwrap();
    for i in [SYNTAX, REFUSED] {
        let error = all[i].as_ref().unwrap_err();
        assert!(error.remembered().is_some(), "{i}: {error}");
    }
    println!(
        "CHILD remembered reused={} failed={} remembered={} units={}",
        census.kernels_reused,
        census.kernels_failed,
        census.kernels_remembered_failed,
        b.units_compiled() - before
    );
    let before = b.units_compiled();
    let (all, census) = censused(resolve_in(&retry, &batch));
    let all = all.unwrap();
    check_failures(&all);
    println!(
        "CHILD again reused={} failed={} units={}",
        census.kernels_reused,
        census.kernels_failed,
        b.units_compiled() - before
    );
}

/// Runs this test again as a child process loading from `store`; its stdout.
fn spawn_child(test: &str, store: &Path, variant: &str) -> String {
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", test, "--nocapture", "--test-threads=1"])
        .env(CHILD_STORE, store)
        .env(CHILD_VARIANT, variant)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// Whether this process is a child: then it has done the child's part.
fn child_of() -> bool {
    let (Some(store), Ok(variant)) = (std::env::var_os(CHILD_STORE), std::env::var(CHILD_VARIANT))
    else {
        return false;
    };
    child(Path::new(&store), variant == "split");
    true
}

/// Shared by both variants: 12 unit compiles, 10 answered and run as the reference
/// computes them, 2 failures each with their own diagnostics, then a second process
/// loads the 10 with 0 compiles, answers the 2 failures from the store's memory with 0
/// compiles, and compiles them again when told to retry.
fn twelve_candidates(test: &str, split: bool) {
    if child_of() {
        return;
    }
    let b = backend();
    let reference = reference_outputs(&b);
    let dir = tempfile::tempdir().unwrap();
    let store_dir = dir.path().join("kernels");
    let store = KernelStore::new(&store_dir);
    let cache = KernelCache::new(BIG);
    let batch = candidates();
    let (units, merged) = (b.units_compiled(), b.merged_compiles());
    // Split: three programs of four kernels, compiled at once: the failures sit in the
    // first and the third.
    let cut = if split {
        Split::new(3, 1)
    } else {
        Split::WHOLE
    };
    let (outcomes, census) = censused(
        Resolver::new(&cache, &b)
            .store(&store)
            .split(cut)
            .resolve(&batch),
    );
    let outcomes = outcomes.unwrap();
    assert_eq!(outcomes.len(), 12);
    // Each candidate compiled once, alone or in a merged unit that compiled (cc-backend
    // merges kernels without directives; the refused one has some): whole, the merged unit
    // of the eleven holds the syntax error and fails, so all twelve are compiled alone;
    // split in three, the first program's merged unit fails (four alone), the second's
    // compiles, the third merges three and compiles the refused one alone.
    assert_eq!(
        (b.units_compiled() - units, b.merged_compiles() - merged),
        if split { (5, 3) } else { (12, 1) },
        "each candidate compiled once (units, merged units)"
    );
    assert_eq!(
        (
            census.kernels_compiled,
            census.kernels_failed,
            census.programs_compiled
        ),
        (10, 2, if split { 3 } else { 1 })
    );
    check_failures(&outcomes);
    let stats = cache.stats();
    assert_eq!(
        (stats.hits, stats.misses, stats.entries, stats.groups),
        (0, 12, 10, if split { 3 } else { 1 }),
        "every candidate a miss; only the ten published"
    );
    for (i, k) in batch.iter().enumerate() {
        assert_eq!(outcomes[i].is_ok(), good(i), "{i}");
        assert_eq!(
            cache.find(&k.key).is_some(),
            good(i),
            "{i}: failures are not cached"
        );
        if let Ok(answer) = &outcomes[i] {
            assert_eq!(&*answer.symbol, k.symbol.as_str());
            assert!(
                !answer
                    .program
                    .symbols()
                    .iter()
                    .any(|s| s == "cand3" || s == "cand8"),
                "a program never holds a failed kernel"
            );
        }
    }
    assert_eq!(
        good_outputs(&outcomes),
        reference,
        "the ten compute what a strict compile does"
    );

    let stdout = spawn_child(test, &store_dir, if split { "split" } else { "whole" });
    assert!(
        stdout.contains("CHILD loaded=10 compiled=0 failed=0 units=0"),
        "{stdout}"
    );
    assert!(
        stdout.contains(&format!("CHILD outputs={reference}\n")),
        "{stdout}"
    );
    assert!(
        stdout.contains("CHILD remembered reused=10 failed=0 remembered=2 units=0"),
        "{stdout}"
    );
    assert!(
        stdout.contains("CHILD again reused=10 failed=2 units=2"),
        "{stdout}"
    );
}

#[test]
fn twelve_candidates_two_invalid_resolve_ten_loaded_by_a_second_process() {
    twelve_candidates(
        "twelve_candidates_two_invalid_resolve_ten_loaded_by_a_second_process",
        false,
    );
}

#[test]
fn split_twelve_candidates_two_invalid_resolve_ten_loaded_by_a_second_process() {
    twelve_candidates(
        "split_twelve_candidates_two_invalid_resolve_ten_loaded_by_a_second_process",
        true,
    );
}

/// The strict resolve keeps the seed's semantics on the same batch: the first failure in
/// batch order fails the call, its (single) program publishes nothing, and the compile
/// stopped at the failing unit.
#[test]
fn strict_resolve_still_fails_the_batch_at_its_first_failure() {
    let b = backend();
    let cache = KernelCache::new(BIG);
    let batch = candidates();
    let units = b.units_compiled();
    let err = Resolver::new(&cache, &b)
        .resolve_strict(&batch)
        .map(|r| r.answers)
        .unwrap_err();
    let Error::Compile(failure) = &err else {
        panic!("{err:?}")
    };
    assert_eq!(failure.program, 0);
    assert_eq!(failure.symbols.len(), 12, "the program's kernels");
    assert!(matches!(&failure.source,
        CcError::Compiler { symbols, .. } if symbols == &["cand3".to_string()]));
    assert_eq!(b.units_compiled() - units, SYNTAX as u64 + 1);
    assert!(batch.iter().all(|k| cache.find(&k.key).is_none()));
}

/// Kernels sharing a key share the outcome, failed or not; a program whose kernels all
/// fail publishes nothing (on the concurrent path it is not finished), and the next
/// resolve compiles the failures again.
#[test]
fn twins_share_the_outcome_and_an_all_failed_program_publishes_nothing() {
    let b = backend();
    let cache = KernelCache::new(BIG);
    // Segment kernels: the index is not in the key, so seg0/seg7 are twins.
    let batch = [
        broken("bad__seg0"),
        broken("bad2"),
        fused_numbered("step__seg1", 1, 0),
        fused_numbered("step__seg4", 1, 40),
        broken("bad__seg7"),
    ];
    assert_eq!(batch[0].key, batch[4].key);
    assert_eq!(batch[2].key, batch[3].key);
    for split in [false, true] {
        let cache = KernelCache::new(BIG);
        let units = b.units_compiled();
        // Split: programs [bad__seg0, bad2] (all failing) and [step__seg1].
        let cut = if split {
            Split::new(2, 1)
        } else {
            Split::WHOLE
        };
        let (outcomes, census) = censused(Resolver::new(&cache, &b).split(cut).resolve(&batch));
        let o = outcomes.unwrap();
        assert_eq!(b.units_compiled() - units, 3, "split={split}");
        assert_eq!((census.kernels_failed, census.kernels_compiled), (2, 1));
        assert!(std::sync::Arc::ptr_eq(
            o[0].as_ref().unwrap_err(),
            o[4].as_ref().unwrap_err()
        ));
        assert!(!std::sync::Arc::ptr_eq(
            o[0].as_ref().unwrap_err(),
            o[1].as_ref().unwrap_err()
        ));
        assert!(o[2].as_ref().unwrap().same_program(o[3].as_ref().unwrap()));
        assert_eq!(&*o[3].as_ref().unwrap().symbol, "step__seg1");
        assert_eq!(o[2].as_ref().unwrap().program.symbols(), ["step__seg1"]);
        assert!(cache.find(&batch[0].key).is_none() && cache.find(&batch[1].key).is_none());
    }
    // All failing: nothing published, every kernel answered with its own error.
    let all_bad = [broken("x0"), broken("x1")];
    let o = Resolver::new(&cache, &b)
        .resolve(&all_bad)
        .map(|r| r.answers)
        .unwrap();
    assert!(o.iter().all(|o| o.as_ref().is_err_and(|e| e.is_alone())));
    assert_eq!(cache.stats().groups, 0);
    let units = b.units_compiled();
    Resolver::new(&cache, &b)
        .resolve(&all_bad)
        .map(|r| r.answers)
        .unwrap();
    assert_eq!(b.units_compiled() - units, 2, "failures are compiled again");
}

/// The real C backend, panicking in its per-kernel compile for a program holding
/// `panics_on`.
struct Panicky {
    inner: CcBackend,
    panics_on: &'static str,
}

impl Panicky {
    fn check(&self, symbols: &[String]) {
        if symbols.iter().any(|s| s == self.panics_on) {
            panic!("the backend panics on {}", self.panics_on);
        }
    }
}

impl Backend for Panicky {
    type Source = Source;
    type Program = CcProgram;
    type Error = CcError;
    fn compile_group(&self, g: &Group<'_, Source>) -> Result<Compiled<CcProgram>, CcError> {
        self.inner.compile_group(g)
    }
    fn compile_group_each(
        &self,
        g: &Group<'_, Source>,
    ) -> Result<Units<CcProgram, CcError>, CcError> {
        let symbols: Vec<String> = g.kernels.iter().map(|k| k.symbol.clone()).collect();
        self.check(&symbols);
        self.inner.compile_group_each(g)
    }
}

/// A panic in backend code still propagates from a per-kernel resolve, after the resolve
/// was counted; on the concurrent path, after the other programs (and their failures)
/// were settled: the programs that compiled are published.
#[test]
fn a_panicking_backend_still_propagates() {
    let batch = [
        elementwise("p0", "a[i] + 1.0f", &[]),
        broken("p1"),
        elementwise("p2", "a[i] + 2.0f", &[]),
        elementwise("p3", "a[i] + 3.0f", &[]),
    ];
    let b = Panicky {
        inner: backend(),
        panics_on: "p2",
    };
    let cache = KernelCache::new(BIG);
    let out = catch_unwind(AssertUnwindSafe(|| {
        Resolver::new(&cache, &b).resolve(&batch)
    }));
    let panic = out.unwrap_err();
    assert_eq!(
        panic.downcast_ref::<String>().map(String::as_str),
        Some("the backend panics on p2")
    );
    // The census went with the panic; the cache's statistics counted the resolve.
    assert_eq!(cache.stats().misses, 4);

    // Split into four programs: p2's panics; p0 and p3 are published, p1 failed alone.
    let cache = KernelCache::new(BIG);
    let out = catch_unwind(AssertUnwindSafe(|| {
        Resolver::new(&cache, &b)
            .split(Split::new(4, 1))
            .resolve(&batch)
    }));
    assert_eq!(
        out.unwrap_err()
            .downcast_ref::<String>()
            .map(String::as_str),
        Some("the backend panics on p2"),
        "the backend's panic reaches the caller"
    );
    assert_eq!(cache.stats().misses, 4);
    assert!(cache.find(&batch[0].key).is_some() && cache.find(&batch[3].key).is_some());
    assert!(cache.find(&batch[1].key).is_none() && cache.find(&batch[2].key).is_none());
}
