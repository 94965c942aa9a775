//! The Rust side of the Python package's shared-store test (`crates/kcache-py/tests/test_shared_store.py`): a
//! Rust process resolving one C kernel through the kernel store of a cache directory, as
//! `kcache.KernelCache(DIR)` does from Python, so each can load what the other compiled.
//!
//! `kernel_store_peer DIR SYMBOL FILE N`: the kernel in FILE, defining SYMBOL with the
//! signature `(float *out, const float *x, int64_t n)` (`out` and `x` of `n` elements), is
//! resolved through `CachedBackend<CcBackend>` with the store at `DIR/kernels`, default
//! names and no options, then called with `x[i] = i` for `n = N`. Prints one line:
//! `compiled=<kernels compiled> loaded=<kernels loaded> key=<key> out=<out, comma-separated>`.

use cc_backend::{Arg, CcBackend, Elem, Extent, Signature, Source};
use kernel_cache::{CachedBackend, Layout, Names};

type Res<T> = Result<T, Box<dyn std::error::Error>>;

fn main() -> Res<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [dir, symbol, file, n] = args.as_slice() else {
        return Err("usage: kernel_store_peer DIR SYMBOL FILE N".into());
    };
    let n: usize = n.parse()?;
    let text = std::fs::read_to_string(file)?;
    let signature = Signature::new()
        .buffer_mut("out", Elem::F32, Extent::of("n"))
        .buffer("x", Elem::F32, Extent::of("n"))
        .scalar("n", Elem::I64);
    let cached =
        CachedBackend::new(CcBackend::new()?, 64 << 20).with_store_in(&Layout::new(dir))?;
    let source = Source::try_new(text, signature)?;
    let kernel = source.batch_kernel(
        symbol,
        &Names::default(),
        Vec::new(),
        cached.backend.identity(),
    );
    let key = kernel.key.clone();
    let (outcomes, census) = cached.resolve_each(&[kernel])?;
    let resolved = match outcomes.into_iter().next() {
        Some(Ok(r)) => r,
        Some(Err(e)) => return Err(e.to_string().into()),
        None => return Err("no outcome".into()),
    };
    let kernel = cc_backend::Kernel::from_resolved(&resolved)?;
    let x: Vec<f32> = (0..n).map(|i| i as f32).collect();
    let mut out = vec![0.0f32; n];
    kernel.call(&mut [
        Arg::F32Mut(&mut out),
        Arg::F32(&x),
        Arg::I64Scalar(i64::try_from(n)?),
    ])?;
    let shown: Vec<String> = out.iter().map(|v| v.to_string()).collect();
    println!(
        "compiled={} loaded={} key={key} out={}",
        census.kernels_compiled,
        census.kernels_loaded,
        shown.join(",")
    );
    Ok(())
}
