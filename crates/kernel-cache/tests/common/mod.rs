//! Helpers shared by the integration tests: batches of real C kernels and calling them.

#![allow(dead_code, clippy::unwrap_used)]

use cc_backend::{Arg, CcBackend, CcProgram, Kernel, Signature, Source};
use std::sync::OnceLock;
use test_support::kernels::{elementwise_kernel, realistic_kernel, realistic_kernel_numbered};

use kernel_cache::{BatchKernel, Names, Resolved};

pub(crate) fn backend() -> CcBackend {
    CcBackend::new().expect("a C compiler is installed")
}

/// The C backend's identity, computed once.
pub(crate) fn identity() -> &'static str {
    static IDENTITY: OnceLock<String> = OnceLock::new();
    IDENTITY.get_or_init(|| backend().identity().to_string())
}

/// A kernel of `text` and the generators' signature `(out, a, b, n)`, keyed by
/// `Source::key` (the kernel's parameters declared as its bound names).
pub(crate) fn kernel(name: &str, text: String, options: &[&str]) -> BatchKernel<Source> {
    let options: Vec<String> = options.iter().map(|o| o.to_string()).collect();
    let names = Names::new().with_bound(["out", "a", "b", "n"]);
    Source::new(text, Signature::out_a_b_n()).batch_kernel(name, &names, options, identity())
}

/// A realistic kernel named `name` whose body is determined by `seed`.
pub(crate) fn fused(name: &str, seed: u64) -> BatchKernel<Source> {
    kernel(name, realistic_kernel(name, seed), &[])
}

/// [`fused`] with its loop symbols and locals numbered from `first_symbol`.
pub(crate) fn fused_numbered(name: &str, seed: u64, first_symbol: u64) -> BatchKernel<Source> {
    kernel(
        name,
        realistic_kernel_numbered(name, seed, first_symbol),
        &[],
    )
}

/// `out[i] = <expr>` under `options`.
pub(crate) fn elementwise(name: &str, expr: &str, options: &[&str]) -> BatchKernel<Source> {
    kernel(name, elementwise_kernel(name, expr), options)
}

/// A kernel that does not compile.
pub(crate) fn broken(name: &str) -> BatchKernel<Source> {
    kernel(
        name,
        format!("void {name}(float *out, const float *a, const float *b, int n) {{ out[0] = ; }}"),
        &[],
    )
}

pub(crate) fn inputs(n: usize) -> (Vec<f32>, Vec<f32>) {
    let a = (0..n).map(|i| (i as f32 * 0.37).sin()).collect();
    let b = (0..n).map(|i| (i as f32 * 0.11).cos() + 0.5).collect();
    (a, b)
}

/// Calls the kernel a cache answered on the standard inputs of length `n`.
pub(crate) fn run(resolved: &Resolved<CcProgram>, n: usize) -> Vec<f32> {
    let (a, b) = inputs(n);
    let mut out = vec![0.0; n];
    Kernel::from_resolved(resolved)
        .unwrap()
        .call(&mut [
            Arg::F32Mut(&mut out),
            Arg::F32(&a),
            Arg::F32(&b),
            Arg::I32Scalar(i32::try_from(n).unwrap()),
        ])
        .unwrap();
    out
}
