//! `kernel_store_load_64` (a printed figure, see `xtask/src/bench.rs`): 64 realistic
//! kernels resolved from the persistent kernel store in a fresh process (open, read,
//! verify, load the shared objects, publish), against the same 64 compiled in a fresh
//! process with no store (the real C compiler, split compile as the backend's default).
//!
//! The bench re-runs itself as three worker processes: one fills the store (untimed),
//! one resolves from it, one compiles without it; each times only its resolve call.
//! With `--bench` it prints `FIGURE kernel_store_load_64 <load s> <compile s>`; without
//! (as `cargo xtask test` runs it) it does the same with 8 kernels and checks the load
//! compiled nothing.

use std::path::Path;

use std::time::Instant;
use test_support::child::Worker;

use cc_backend::{CcBackend, Signature, Source};
use kernel_cache::store::KernelStore;
use kernel_cache::{BatchKernel, KernelCache, Names, Resolver};
use test_support::kernels::realistic_kernel;
use test_support::lines::censused;

/// The variables that make this binary a worker (see `test_support::child::Worker`).
const PREFIX: &str = "KCACHE_STORE_BENCH";

fn batch(backend: &CcBackend, n: u64) -> Vec<BatchKernel<Source>> {
    let names = Names::new().with_bound(["out", "a", "b", "n"]);
    (0..n)
        .map(|i| {
            let symbol = format!("fused_{i}");
            Source::new(realistic_kernel(&symbol, 1000 + i), Signature::out_a_b_n()).batch_kernel(
                &symbol,
                &names,
                vec![],
                backend.identity(),
            )
        })
        .collect()
}

/// A worker: resolves `n` kernels with the store at `dir` (or none); prints
/// `SECONDS <s> COMPILED <programs>`.
fn worker(role: &str, dir: &Path, n: u64) {
    let backend = CcBackend::new().expect("a C compiler");
    let b = batch(&backend, n);
    let store = KernelStore::new(dir);
    let store = (role != "compile").then_some(&store);
    let cache = KernelCache::new(1 << 30);
    let start = Instant::now();
    let (out, census) = censused(
        Resolver::new(&cache, &backend)
            .store(store)
            .split(backend.split())
            .resolve_strict(&b),
    );
    let seconds = start.elapsed().as_secs_f64();
    out.expect("resolve");
    println!(
        "SECONDS {seconds:.6} COMPILED {} LOADED {}",
        census.kernels_compiled, census.kernels_loaded
    );
}

fn spawn(role: &str, dir: &Path, n: u64) -> (f64, u64, u64) {
    let line = Worker::run(PREFIX, role, dir, n);
    let w: Vec<&str> = line.split_whitespace().collect();
    (
        w[1].parse().expect("seconds"),
        w[3].parse().expect("compiled"),
        w[5].parse().expect("loaded"),
    )
}

fn main() {
    if let Some(w) = Worker::assigned(PREFIX) {
        worker(&w.role, &w.dir, w.n);
        return;
    }
    let bench = std::env::args().any(|a| a == "--bench");
    let n = if bench { 64 } else { 8 };
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("kernels");
    let (_, filled, _) = spawn("fill", &dir, n);
    assert_eq!(filled, n, "the first process compiles every kernel");
    let (load, compiled, loaded) = spawn("load", &dir, n);
    assert_eq!(
        (compiled, loaded),
        (0, n),
        "a fresh process loads, never compiles"
    );
    let (compile, compiled, _) = spawn("compile", &dir, n);
    assert_eq!(compiled, n);
    if bench {
        println!("FIGURE kernel_store_load_{n} {load:.6} {compile:.6}");
    } else {
        println!("kernel store: {n} kernels loaded in {load:.3} s, compiled in {compile:.3} s");
    }
}
