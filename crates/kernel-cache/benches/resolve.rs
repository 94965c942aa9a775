//! Benchmarks of `resolve` with the real C backend (one criterion group per figure,
//! each with a `subject` and a `baseline`):
//!
//! - `resolve_all_hit_1000`: an all-hit resolve of 1,000 kernels against 1,000 raw
//!   dashmap gets of the same keys (cloning the same values). The keys are the real
//!   keys of 1,000 C kernels; the programs are stand-ins from a backend that compiles
//!   nothing, since a hit never reaches the backend or looks inside a program (and
//!   compiling 1,000 kernels, one translation unit each, cost over a minute of setup per
//!   run, which `cargo xtask bench` repeats every round);
//! - `resolve_all_hit_1000_vs_quick_cache`: the same against 1,000 quick_cache gets;
//! - `compile_64_split2`: 64 realistic kernels compiled from a cold cache through the
//!   concurrent path as 2 programs, against the same compiled whole as one program.

use std::hint::black_box;
use std::sync::Arc;

use cc_backend::{CcBackend, CcProgram, Signature, Source};
use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use dashmap::DashMap;
use kernel_cache::{Backend, BatchKernel, Compiled, Group, KernelCache, Names, Resolver, Split};
use test_support::kernels::{elementwise_kernel, realistic_kernel};

/// A compiled program stand-in for the all-hit figures (see the module doc).
type StandIn = [u64; 4];

type Value = (Arc<StandIn>, Arc<str>);

/// Fills the cache for the all-hit figures: every group "compiles" to a stand-in.
struct StandInBackend;

impl Backend for StandInBackend {
    type Source = ();
    type Program = StandIn;
    type Error = std::convert::Infallible;

    fn compile_group(
        &self,
        group: &Group<'_, ()>,
    ) -> Result<Compiled<StandIn>, std::convert::Infallible> {
        Ok(Compiled {
            program: [group.index as u64; 4],
            weight: 1,
        })
    }
}

fn batch_of(
    backend: &CcBackend,
    options: &[&str],
    texts: Vec<(String, String)>,
) -> Vec<BatchKernel<Source>> {
    let names = Names::new().with_bound(["out", "a", "b", "n"]);
    let options: Vec<String> = options.iter().map(|o| o.to_string()).collect();
    texts
        .into_iter()
        .map(|(symbol, text)| {
            Source::new(text, Signature::out_a_b_n()).batch_kernel(
                &symbol,
                &names,
                options.clone(),
                backend.identity(),
            )
        })
        .collect()
}

fn all_hit(c: &mut Criterion) {
    let cc = CcBackend::new().expect("a C compiler is installed");
    // The real keys of 1,000 kernels; only the hits are measured.
    let batch: Vec<BatchKernel<()>> = batch_of(
        &cc,
        &["-O0"],
        (0..1000)
            .map(|i| {
                let name = format!("k{i}");
                let text = elementwise_kernel(&name, &format!("a[i] * {i}.0f + b[i]"));
                (name, text)
            })
            .collect(),
    )
    .into_iter()
    .map(|k| BatchKernel {
        key: k.key,
        options: k.options,
        symbol: k.symbol,
        source: (),
    })
    .collect();
    let backend = StandInBackend;
    let cache = KernelCache::new(1 << 30);
    let warm = Resolver::new(&cache, &backend)
        .resolve_strict(&batch)
        .map(|r| r.answers)
        .expect("stand-ins");
    let map: DashMap<String, Value> = DashMap::new();
    let quick: quick_cache::sync::Cache<String, Value> = quick_cache::sync::Cache::new(2000);
    for (k, r) in batch.iter().zip(&warm) {
        map.insert(
            k.key.clone(),
            (Arc::clone(&r.program), Arc::clone(&r.symbol)),
        );
        quick.insert(
            k.key.clone(),
            (Arc::clone(&r.program), Arc::clone(&r.symbol)),
        );
    }

    let mut g = c.benchmark_group("resolve_all_hit_1000");
    g.bench_function("subject", |b| {
        b.iter(|| {
            Resolver::new(&cache, &backend)
                .resolve_strict(black_box(&batch))
                .map(|r| r.answers)
                .expect("all hit")
        })
    });
    g.bench_function("baseline", |b| {
        b.iter(|| {
            black_box(&batch)
                .iter()
                .map(|k| map.get(&k.key).map(|v| v.value().clone()))
                .collect::<Vec<_>>()
        })
    });
    g.finish();

    let mut g = c.benchmark_group("resolve_all_hit_1000_vs_quick_cache");
    g.bench_function("subject", |b| {
        b.iter(|| {
            Resolver::new(&cache, &backend)
                .resolve_strict(black_box(&batch))
                .map(|r| r.answers)
                .expect("all hit")
        })
    });
    g.bench_function("baseline", |b| {
        b.iter(|| {
            black_box(&batch)
                .iter()
                .map(|k| quick.get(&k.key))
                .collect::<Vec<_>>()
        })
    });
    g.finish();
}

fn split_compile(c: &mut Criterion) {
    let backend = CcBackend::new().expect("a C compiler is installed");
    let batch = batch_of(
        &backend,
        &["-fno-math-errno"],
        (0..64)
            .map(|i| {
                let name = format!("fused{i}");
                let text = realistic_kernel(&name, i);
                (name, text)
            })
            .collect(),
    );
    let (batch, backend) = (&batch, &backend);
    let compile = |split: Split| {
        move |cache: KernelCache<CcProgram>| {
            let answers = Resolver::new(&cache, backend)
                .split(split)
                .resolve_strict(batch)
                .map(|r| r.answers)
                .expect("the kernels compile");
            // Returned so that unloading happens outside the measurement.
            (cache, answers)
        }
    };
    let mut g = c.benchmark_group("compile_64_split2");
    g.sample_size(10);
    g.bench_function("subject", |b| {
        b.iter_batched(
            || KernelCache::new(1 << 30),
            compile(Split::new(2, 1)),
            BatchSize::PerIteration,
        )
    });
    g.bench_function("baseline", |b| {
        b.iter_batched(
            || KernelCache::new(1 << 30),
            compile(Split::WHOLE),
            BatchSize::PerIteration,
        )
    });
    g.finish();
}

criterion_group!(benches, all_hit, split_compile);
criterion_main!(benches);
