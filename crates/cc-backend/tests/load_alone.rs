//! A kernel whose object links but does not load fails alone: its program's other kernels
//! are loaded and returned (per-kernel resolves), with the real compiler and loader. The
//! cause used is one a `-z defs` link cannot see: initial-exec thread-local storage larger
//! than the loader's static reserve (`cannot allocate memory in static TLS block`).

#![allow(clippy::unwrap_used)]

mod common;

use cc_backend::{CcBackend, CcError, Signature, Source};
use kernel_cache::{KernelCache, KernelError, Names, Resolver};
use test_support::kernels::elementwise_kernel;
use test_support::lines::censused;

/// Where the kernel that does not load sits.
const BAD: usize = 4;

fn batch(b: &CcBackend) -> Vec<kernel_cache::BatchKernel<Source>> {
    let names = Names::new().with_bound(["out", "a", "b", "n"]);
    (0..12)
        .map(|i| {
            let name = format!("cand{i}");
            let text = if i == BAD {
                // 16 MiB of initial-exec thread-local storage: the link accepts it, the
                // loader cannot reserve it in a running process.
                format!(
                    "__attribute__((tls_model(\"initial-exec\"))) __thread float scratch[1 << 22];\n\
                     void {name}(float *out, const float *a, const float *b, int n) {{\n  \
                     for (int i = 0; i < n; ++i) {{ ((volatile float *)scratch)[i] = a[i]; out[i] = ((volatile float *)scratch)[i] + b[i]; }}\n}}\n"
                )
            } else {
                elementwise_kernel(&name, &format!("a[i] * {i}.0f + b[i]"))
            };
            Source::new(text, Signature::out_a_b_n()).batch_kernel(&name, &names, vec![], b.identity())
        })
        .collect()
}

#[test]
fn a_kernel_that_does_not_load_fails_alone() {
    let b = CcBackend::new().expect("a C compiler is installed");
    let batch = batch(&b);
    for split in [false, true] {
        let cache = KernelCache::new(1 << 30);
        let (outcomes, census) = censused(if split {
            Resolver::new(&cache, &b).split(b.split()).resolve(&batch)
        } else {
            Resolver::new(&cache, &b).resolve(&batch)
        });
        let outcomes = outcomes.unwrap();
        for (i, outcome) in outcomes.iter().enumerate() {
            if i == BAD {
                let error = outcome.as_ref().err().map(|e| e.as_ref());
                let Some(KernelError::Unit(failure)) = error else {
                    panic!("split {split}: the bad kernel: {error:?}");
                };
                assert_eq!(failure.symbols, [format!("cand{BAD}")]);
                assert!(
                    matches!(&failure.source, CcError::Load { .. }),
                    "{:?}",
                    failure.source
                );
                assert!(failure.to_string().contains("static TLS"), "{failure}");
            } else {
                let answer = outcome.as_ref().unwrap();
                let out = common::run_abn(&answer.program, &answer.symbol);
                let want: Vec<f32> = [1.0f32, 2.0, 3.0]
                    .iter()
                    .zip([10.0f32, 20.0, 30.0])
                    .map(|(a, b)| a * i as f32 + b)
                    .collect();
                assert_eq!(out, want, "split {split}: kernel {i}");
            }
        }
        assert_eq!(
            (census.kernels_compiled, census.kernels_failed),
            (11, 1),
            "split {split}"
        );
    }
}
