//! `Resolver` (strict, whole and split) driving the real C backend.

#![allow(clippy::unwrap_used)]

mod common;

use std::collections::BTreeSet;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};

use cc_backend::{CcBackend, CcError, CcProgram, Source};
use common::*;
use kernel_cache::{Backend, BatchKernel, Compiled, Error, Group, KernelCache, Resolver, Split};

const BIG: u64 = 1 << 30;

#[test]
fn renamed_twins_hit_with_one_compile() {
    let b = backend();
    let cache = KernelCache::new(BIG);
    // The same kernel rendered twice: another segment index, other loop symbols.
    let batch = [
        fused_numbered("step__seg1", 1, 0),
        fused_numbered("step__seg4", 1, 40),
        fused("other", 2),
    ];
    assert_ne!(batch[0].source, batch[1].source);
    assert_eq!(batch[0].key, batch[1].key, "renamed twins share a key");
    let answers = Resolver::new(&cache, &b)
        .resolve_strict(&batch)
        .map(|r| r.answers)
        .unwrap();
    assert_eq!(
        b.kernels_compiled(),
        2,
        "one representative per distinct key"
    );
    assert_eq!(b.programs_compiled(), 1);
    assert_eq!(
        &*answers[1].symbol, "step__seg1",
        "the twin answers the representative's symbol"
    );
    assert!(answers[0].same_program(&answers[1]) && answers[0].same_program(&answers[2]));
    assert_eq!(run(&answers[0], 100), run(&answers[1], 100));

    // A later rendering under yet another name hits without compiling.
    let again = Resolver::new(&cache, &b)
        .resolve_strict(&[fused_numbered("step__seg9", 1, 77)])
        .unwrap();
    let census = again.census;
    assert_eq!(&*again.answers[0].symbol, "step__seg1");
    assert_eq!(run(&again.answers[0], 100), run(&answers[0], 100));
    assert_eq!(b.programs_compiled(), 1);
    assert_eq!(census.kernels_reused, 1);
    assert_eq!(census.kernels_compiled, 0);
}

#[test]
fn one_compile_per_option_list_in_batch_order() {
    let b = backend();
    let cache = KernelCache::new(BIG);
    let batch = [
        elementwise("x1", "a[i] + 1.0f", &["-O1"]),
        elementwise("ya", "a[i] * 2.0f", &["-O3"]),
        elementwise("x2", "a[i] + 2.0f", &["-O1"]),
    ];
    let answers = Resolver::new(&cache, &b)
        .resolve_strict(&batch)
        .map(|r| r.answers)
        .unwrap();
    assert_eq!(b.programs_compiled(), 2);
    assert!(answers[0].same_program(&answers[2]));
    assert!(!answers[0].same_program(&answers[1]));
    assert_eq!(answers[0].program.symbols(), ["x1", "x2"]);
    let (a, _) = inputs(8);
    assert_eq!(
        run(&answers[2], 8),
        a.iter().map(|v| v + 2.0).collect::<Vec<_>>()
    );
    assert_eq!(cache.stats().groups, 2);
}

#[test]
fn a_failing_group_publishes_nothing_and_earlier_groups_stay() {
    let b = backend();
    let cache = KernelCache::new(BIG);
    let good = elementwise("good", "a[i] - b[i]", &["-O1"]);
    let later_good = elementwise("later_good", "a[i] * b[i]", &[]);
    let batch = [good.clone(), broken("bad"), later_good.clone()];
    let err = Resolver::new(&cache, &b)
        .resolve_strict(&batch)
        .map(|r| r.answers)
        .unwrap_err();
    match &err {
        Error::Compile(f) => {
            assert_eq!((f.program, f.programs), (1, 2));
            assert_eq!(f.symbols, ["bad", "later_good"]);
            assert!(
                matches!(&f.source, CcError::Compiler { stderr, .. } if stderr.contains("error"))
            );
        }
        other => panic!("unexpected {other:?}"),
    }
    assert!(
        cache.find(&good.key).is_some(),
        "the earlier group stays published"
    );
    assert!(
        cache.find(&later_good.key).is_none(),
        "the failing group published nothing"
    );

    // The next resolve compiles the failed group's kernels afresh and hits the rest.
    let before = b.programs_compiled();
    let answers = Resolver::new(&cache, &b)
        .resolve_strict(&[good, later_good])
        .map(|r| r.answers)
        .unwrap();
    assert_eq!(b.programs_compiled(), before + 1);
    assert_eq!(&*answers[1].symbol, "later_good");
}

#[test]
fn split_and_whole_compiles_give_the_same_results() {
    let b = backend();
    let batch: Vec<_> = (0..12).map(|i| fused(&format!("k{i}"), 100 + i)).collect();
    let whole = Resolver::new(&KernelCache::new(BIG), &b)
        .split(Split::WHOLE)
        .resolve_strict(&batch)
        .unwrap();
    let split = Resolver::new(&KernelCache::new(BIG), &b)
        .split(Split::new(2, 1))
        .resolve_strict(&batch)
        .unwrap();
    assert_eq!(whole.census.programs_compiled, 1);
    assert_eq!(split.census.programs_compiled, 2);
    let (whole, split) = (whole.answers, split.answers);
    assert_eq!(b.programs_compiled(), 3);

    let programs = |answers: &[kernel_cache::Resolved<CcProgram>]| {
        answers
            .iter()
            .map(|a| Arc::as_ptr(&a.program))
            .collect::<BTreeSet<_>>()
            .len()
    };
    assert_eq!(programs(&whole), 1);
    assert_eq!(programs(&split), 2);
    // The first program holds half of the kernels, the half `balanced` gives by text
    // length with the first kernel in it, in batch order.
    let idxs: Vec<usize> = (0..batch.len()).collect();
    let cut = kernel_cache::balanced(2, &idxs, |&i| batch[i].source.text.len() as u64);
    let first: Vec<String> = cut[0].iter().map(|&i| format!("k{i}")).collect();
    assert_eq!(first.len(), 6);
    assert_eq!(split[0].program.symbols(), first);
    for (w, s) in whole.iter().zip(&split) {
        assert_eq!(w.symbol, s.symbol);
        for n in [0, 7, 64, 300] {
            assert_eq!(run(w, n), run(s, n), "{} n={n}", w.symbol);
        }
    }
}

#[test]
fn concurrent_path_publishes_successes_and_returns_the_first_failure() {
    let b = backend();
    let cache = KernelCache::new(BIG);
    let batch = [
        broken("bad0"),
        elementwise("ok1", "a[i]", &[]),
        elementwise("ok2", "b[i]", &[]),
        broken("bad3"),
    ];
    let err = Resolver::new(&cache, &b)
        .split(Split::new(4, 1))
        .resolve_strict(&batch)
        .map(|r| r.answers)
        .unwrap_err();
    match err {
        Error::Compile(f) => {
            assert_eq!((f.program, f.programs), (0, 4));
        }
        other => panic!("unexpected {other:?}"),
    }
    assert!(cache.find(&batch[1].key).is_some() && cache.find(&batch[2].key).is_some());
    assert!(cache.find(&batch[0].key).is_none() && cache.find(&batch[3].key).is_none());
    assert_eq!(b.programs_compiled(), 4);
}

#[test]
fn eviction_under_a_small_capacity_keeps_handed_out_programs_working() {
    let b = backend();
    let cache = KernelCache::new(1);
    let first = Resolver::new(&cache, &b)
        .resolve_strict(&[elementwise("first", "a[i] + b[i]", &[])])
        .map(|r| r.answers)
        .unwrap();
    let path = first[0].program.path().to_path_buf();
    let second = Resolver::new(&cache, &b)
        .resolve_strict(&[elementwise("second", "a[i] - b[i]", &[])])
        .map(|r| r.answers)
        .unwrap();
    let stats = cache.stats();
    assert_eq!(stats.evictions, 1);
    assert_eq!(stats.groups, 1, "an oversized group is retained alone");
    assert_eq!(stats.retained_bytes, second[0].program.size());
    assert!(
        cache
            .find(&elementwise("first", "a[i] + b[i]", &[]).key)
            .is_none()
    );
    // The evicted program is still loaded and callable through the handed-out value.
    assert!(path.exists());
    let (a, bb) = inputs(5);
    let want: Vec<f32> = a.iter().zip(&bb).map(|(x, y)| x + y).collect();
    assert_eq!(run(&first[0], 5), want);
}

#[test]
fn disabled_cache_compiles_every_time() {
    let b = backend();
    let cache = KernelCache::new(0);
    let batch = [elementwise("k", "a[i]", &[])];
    for _ in 0..2 {
        let resolver = Resolver::new(&cache, &b).split(b.split());
        let census = resolver.resolve_strict(&batch).unwrap().census;
        assert_eq!((census.programs_compiled, census.kernels_reused), (1, 0));
    }
    assert_eq!(b.programs_compiled(), 2);
    assert_eq!(cache.stats().retained_bytes, 0);
}

#[test]
fn many_threads_compile_each_distinct_key_exactly_once() {
    for split in [Split::WHOLE, Split::new(2, 1)] {
        let b = backend();
        let cache = KernelCache::new(BIG);
        // Six kernels, four distinct keys (two renamed twins).
        let batch = vec![
            fused_numbered("t__seg0", 1, 0),
            fused_numbered("u__seg1", 2, 10),
            fused_numbered("t__seg2", 1, 20),
            fused("t3", 3),
            fused_numbered("u__seg4", 2, 40),
            fused("t5", 4),
        ];
        let threads = 8;
        let barrier = Barrier::new(threads);
        let answers: Vec<Vec<_>> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..threads)
                .map(|_| {
                    s.spawn(|| {
                        barrier.wait();
                        Resolver::new(&cache, &b)
                            .split(split)
                            .resolve_strict(&batch)
                            .map(|r| r.answers)
                            .unwrap()
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert_eq!(b.kernels_compiled(), 4, "{split:?}");
        let first = &answers[0];
        for other in &answers[1..] {
            for (x, y) in first.iter().zip(other) {
                assert!(x.same_program(y) && x.symbol == y.symbol);
            }
        }
        let stats = cache.stats();
        assert_eq!(stats.hits + stats.misses, 6 * threads as u64);
        assert_eq!(stats.misses, 6, "only the compiling resolve missed");
    }
}

/// A backend wrapping the C backend, to observe and break the driver's hooks.
struct Hooked {
    inner: CcBackend,
    always_lock: bool,
    fail_before: bool,
    before_calls: AtomicUsize,
    /// Symbol whose program's compile panics.
    panic_on: Option<&'static str>,
}

impl Hooked {
    fn new() -> Hooked {
        Hooked {
            inner: backend(),
            always_lock: false,
            fail_before: false,
            before_calls: AtomicUsize::new(0),
            panic_on: None,
        }
    }
}

impl Backend for Hooked {
    type Source = Source;
    type Program = CcProgram;
    type Error = CcError;

    fn compile_group(&self, group: &Group<'_, Source>) -> Result<Compiled<CcProgram>, CcError> {
        if group
            .kernels
            .iter()
            .any(|k| Some(k.symbol.as_str()) == self.panic_on)
        {
            panic!("compile_group exploded");
        }
        self.inner.compile_group(group)
    }

    fn before_compile(&self) -> Result<(), CcError> {
        self.before_calls.fetch_add(1, Ordering::SeqCst);
        if self.fail_before {
            return Err(CcError::InvalidSymbol("before_compile refused".into()));
        }
        Ok(())
    }

    fn always_lock(&self) -> bool {
        self.always_lock
    }
}

impl Hooked {
    /// How its resolves are cut: up to four programs of one kernel or more.
    fn split(&self) -> Split {
        Split::new(4, 1)
    }
}

#[test]
fn before_compile_runs_under_the_lock_and_with_always_lock_for_all_hits() {
    let cache = KernelCache::new(BIG);
    let batch = [elementwise("h", "a[i] + 3.0f", &[])];
    let mut hooked = Hooked::new();
    Resolver::new(&cache, &hooked)
        .resolve_strict(&batch)
        .map(|r| r.answers)
        .unwrap();
    assert_eq!(hooked.before_calls.load(Ordering::SeqCst), 1);
    Resolver::new(&cache, &hooked)
        .resolve_strict(&batch)
        .map(|r| r.answers)
        .unwrap();
    assert_eq!(
        hooked.before_calls.load(Ordering::SeqCst),
        1,
        "an all-hit batch takes no lock"
    );
    hooked.always_lock = true;
    Resolver::new(&cache, &hooked)
        .resolve_strict(&batch)
        .map(|r| r.answers)
        .unwrap();
    assert_eq!(
        hooked.before_calls.load(Ordering::SeqCst),
        2,
        "always_lock runs it even for all hits"
    );
    assert_eq!(hooked.inner.programs_compiled(), 1);
}

#[test]
fn a_failing_before_compile_compiles_nothing() {
    let cache = KernelCache::new(BIG);
    let mut hooked = Hooked::new();
    hooked.fail_before = true;
    let err = Resolver::new(&cache, &hooked)
        .resolve_strict(&[elementwise("h", "a[i]", &[])])
        .map(|r| r.answers)
        .unwrap_err();
    assert!(matches!(err, Error::BeforeCompile(_)));
    assert_eq!(hooked.inner.programs_compiled(), 0);
    assert!(cache.is_empty());
}

#[test]
fn a_panic_in_a_compile_thread_propagates_and_the_cache_stays_usable() {
    let cache = KernelCache::new(BIG);
    let mut hooked = Hooked::new();
    hooked.panic_on = Some("p2");
    let batch = [
        elementwise("p0", "a[i]", &[]),
        elementwise("p1", "b[i]", &[]),
        elementwise("p2", "a[i] * 2.0f", &[]),
        elementwise("p3", "b[i] * 2.0f", &[]),
    ];
    let caught = catch_unwind(AssertUnwindSafe(|| {
        Resolver::new(&cache, &hooked)
            .split(hooked.split())
            .resolve_strict(&batch)
            .map(|r| r.answers)
    }));
    let payload = caught.expect_err("the compile thread's panic reaches the caller");
    assert_eq!(
        payload.downcast_ref::<&str>(),
        Some(&"compile_group exploded")
    );
    // The programs that compiled were published; the panicking one was not.
    assert!(cache.find(&batch[0].key).is_some());
    assert!(cache.find(&batch[3].key).is_some());
    assert!(cache.find(&batch[2].key).is_none());
    // The compile lock is usable again.
    hooked.panic_on = None;
    let answers = Resolver::new(&cache, &hooked)
        .split(hooked.split())
        .resolve_strict(&batch)
        .map(|r| r.answers)
        .unwrap();
    assert_eq!(&*answers[2].symbol, "p2");
    assert_eq!(
        hooked.inner.programs_compiled(),
        4,
        "three before the panic, p2 afresh"
    );
}

#[test]
fn census_counts_reused_kernels_once_per_call() {
    let b = backend();
    let cache = KernelCache::new(BIG);
    let warm = [
        elementwise("c0", "a[i]", &[]),
        elementwise("c1", "b[i]", &[]),
    ];
    Resolver::new(&cache, &b)
        .resolve_strict(&warm)
        .map(|r| r.answers)
        .unwrap();
    let batch = [
        warm[0].clone(),
        warm[1].clone(),
        elementwise("c2", "a[i] + b[i]", &[]),
        warm[0].clone(),
    ];
    let census = Resolver::new(&cache, &b)
        .resolve_strict(&batch)
        .unwrap()
        .census;
    assert_eq!(census.kernels_reused, 3);
    assert_eq!(census.kernels_compiled, 1);
    assert_eq!(census.programs_compiled, 1);
    assert_eq!(census.resolves, 1);
}

#[test]
fn empty_batch_resolves_to_nothing() {
    let b = backend();
    let cache = KernelCache::new(BIG);
    let empty: [BatchKernel<Source>; 0] = [];
    assert!(
        Resolver::new(&cache, &b)
            .split(b.split())
            .resolve_strict(&empty)
            .map(|r| r.answers)
            .unwrap()
            .is_empty()
    );
    assert_eq!(b.programs_compiled(), 0);
}

#[test]
fn different_kernels_with_one_symbol_are_refused_before_any_compile() {
    let b = backend();
    let cache = KernelCache::new(BIG);
    let x = elementwise("same", "a[i] + 1.0f", &[]);
    let y = elementwise("same", "a[i] + 2.0f", &[]);
    assert_ne!(x.key, y.key);
    let batch = [elementwise("other", "b[i]", &[]), x.clone(), y];
    for split in [Split::WHOLE, Split::new(3, 1)] {
        let err = Resolver::new(&cache, &b)
            .split(split)
            .resolve_strict(&batch)
            .map(|r| r.answers)
            .unwrap_err();
        match &err {
            Error::DuplicateSymbol {
                symbol,
                first,
                second,
            } => assert_eq!((symbol.as_str(), *first, *second), ("same", 1, 2)),
            other => panic!("unexpected {other:?}"),
        }
        assert!(err.to_string().contains("`same`"), "{err}");
        assert!(err.backend_error().is_none());
    }
    assert_eq!(b.programs_compiled(), 0, "refused before any compile");
    assert!(cache.is_empty());
    assert_eq!(cache.stats().hits + cache.stats().misses, 0);

    // Twins (one key) may share a symbol: one compile, one answer.
    let answers = Resolver::new(&cache, &b)
        .resolve_strict(&[x.clone(), x])
        .map(|r| r.answers)
        .unwrap();
    assert_eq!(b.programs_compiled(), 1);
    assert!(answers[0].same_program(&answers[1]));
}

#[test]
fn the_first_failure_in_batch_order_wins_over_a_later_panic() {
    let cache = KernelCache::new(BIG);
    let mut hooked = Hooked::new();
    hooked.panic_on = Some("q2");
    let batch = [
        broken("q0"),
        elementwise("q1", "a[i]", &[]),
        elementwise("q2", "b[i]", &[]),
        elementwise("q3", "a[i] - b[i]", &[]),
    ];
    let err = Resolver::new(&cache, &hooked)
        .split(hooked.split())
        .resolve_strict(&batch)
        .map(|r| r.answers)
        .unwrap_err();
    let failure = err.compile_failure().expect("a compile failure");
    assert_eq!(failure.program, 0);
    assert_eq!(failure.later_panics, 1);
    let shown = err.to_string();
    assert!(shown.contains("1 later program(s) panicked"), "{shown}");
    assert!(
        shown.contains("error"),
        "the compiler's diagnostics are shown: {shown}"
    );
    assert!(cache.find(&batch[1].key).is_some() && cache.find(&batch[3].key).is_some());
    assert!(cache.find(&batch[2].key).is_none());

    // A panic earlier in batch order than the error is resumed.
    let cache = KernelCache::new(BIG);
    hooked.panic_on = Some("q1");
    let batch = [
        elementwise("q0", "a[i]", &[]),
        elementwise("q1", "b[i]", &[]),
        broken("q2"),
    ];
    let caught = catch_unwind(AssertUnwindSafe(|| {
        Resolver::new(&cache, &hooked)
            .split(hooked.split())
            .resolve_strict(&batch)
            .map(|r| r.answers)
    }));
    assert!(caught.is_err(), "the earlier panic reaches the caller");
    assert!(cache.find(&batch[0].key).is_some());
}

#[test]
fn a_panicking_resolve_is_still_counted() {
    let cache = KernelCache::new(BIG);
    let mut hooked = Hooked::new();
    let warm = elementwise("w0", "a[i] * 3.0f", &[]);
    Resolver::new(&cache, &hooked)
        .resolve_strict(std::slice::from_ref(&warm))
        .map(|r| r.answers)
        .unwrap();
    let before = cache.stats();
    hooked.panic_on = Some("w2");
    let batch = [
        warm.clone(),
        elementwise("w1", "a[i] * 4.0f", &["-O1"]),
        elementwise("w2", "a[i] * 5.0f", &[]),
    ];
    let caught = catch_unwind(AssertUnwindSafe(|| {
        Resolver::new(&cache, &hooked).resolve_strict(&batch)
    }));
    let payload = caught.expect_err("the panic propagates");
    assert_eq!(
        payload.downcast_ref::<&str>(),
        Some(&"compile_group exploded")
    );
    // The census went with the panic; the cache's statistics counted the resolve.
    let after = cache.stats();
    assert_eq!(after.hits - before.hits, 1);
    assert_eq!(after.misses - before.misses, 2);
    assert!(cache.find(&batch[1].key).is_some());
}
