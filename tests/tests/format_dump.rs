//! The format dump: what a fixed workload writes, one line per fact, so a change meant to
//! leave keys and formats alone (a refactor) can be compared byte for byte before and after.
//!
//! The workload: the 64 kernels of the cold-compile bench (`test_support::kernels::realistic_kernel`),
//! under two option lists and with `-march=native` (a host part), 8 renamed twins, one kernel the
//! compiler refuses, resolved per kernel through the real C compiler into a fresh kernel
//! store; and 24 schedule-store entries of today's key shape (schedule-cache's bench entries,
//! a fixed seed, each stored through `DiskCache`). The dump holds the backend identity, every kernel key, every file of both stores
//! (entries and stamps in full, blobs by name, which is their SHA-256, and length) with the
//! one field that is a measurement (`compile_ms`) masked.
//!
//! Written to `$KCACHE_FORMAT_DUMP` when that is set (else the test says SKIPPED and passes;
//! the comparison is a tool, not a check):
//! `KCACHE_FORMAT_DUMP=/tmp/before.txt cargo test -p kcache-tests --test format_dump`.

use std::fmt::Write as _;
use std::path::Path;

use cc_backend::{CcBackend, Signature, Source};
use kernel_cache::store::KernelStore;
use kernel_cache::{BatchKernel, KernelCache, Names, Resolver};
use schedule_cache::Store as _;
use schedule_cache::{DiskCache, StoreOutcome};
use test_support::Rng;
use test_support::kernels::realistic_kernel;

/// schedule-cache's bench entries (today's key shape), the same file its benches use.
#[path = "../../crates/schedule-cache/benches/fill/mod.rs"]
mod fill;

fn kernels(backend: &CcBackend) -> Vec<BatchKernel<Source>> {
    let names = Names::new().with_bound(["out", "a", "b", "n"]);
    let mut batch = Vec::new();
    let lists = [
        vec![],
        vec!["-O3".to_string()],
        vec!["-march=native".to_string()],
    ];
    for (o, options) in lists.into_iter().enumerate() {
        // The first list's kernels 0..8 again under other names: renamed twins.
        let twins = if o == 0 { 72 } else { 64 };
        for j in 0..twins {
            let i = j % 64;
            let symbol = format!("fused_{o}_{j}");
            let text = realistic_kernel(&symbol, 5000 + i);
            batch.push(Source::new(text, Signature::out_a_b_n()).batch_kernel(
                &symbol,
                &names,
                options.clone(),
                backend.identity(),
            ));
        }
    }
    let bad = "void broken(float *out, const float *a, const float *b, int n) { out[0] = ; }";
    batch.push(Source::new(bad, Signature::out_a_b_n()).batch_kernel(
        "broken",
        &names,
        vec![],
        backend.identity(),
    ));
    batch
}

/// Every file under `dir`, sorted, one line each: blobs by name and length, the rest in full
/// (measurements masked).
fn files(out: &mut String, label: &str, dir: &Path) {
    let mut paths = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).expect("read the store") {
            let p = e.expect("an entry").path();
            if p.is_dir() {
                stack.push(p);
            } else {
                paths.push(p);
            }
        }
    }
    paths.sort();
    for p in paths {
        let name = p
            .strip_prefix(dir)
            .expect("under dir")
            .display()
            .to_string();
        let bytes = std::fs::read(&p).expect("read a store file");
        let base = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if base.starts_with("b-") {
            writeln!(out, "{label} {name} len={}", bytes.len()).expect("write");
            continue;
        }
        let text = String::from_utf8_lossy(&bytes);
        let masked: Vec<String> = text
            .lines()
            .map(|l| {
                if l.starts_with("compile_ms ") {
                    "compile_ms <masked>".to_string()
                } else {
                    l.to_string()
                }
            })
            .collect();
        writeln!(out, "{label} {name} {:?}", masked.join("\n")).expect("write");
    }
}

#[test]
fn dump_formats() {
    let Some(path) = std::env::var_os("KCACHE_FORMAT_DUMP") else {
        eprintln!("SKIPPED: KCACHE_FORMAT_DUMP is not set");
        return;
    };
    let mut out = String::new();
    let backend = CcBackend::new().expect("a C compiler");
    writeln!(out, "identity {:?}", backend.identity()).expect("write");

    let batch = kernels(&backend);
    for k in &batch {
        writeln!(out, "key {} {:?} {}", k.symbol, k.options, k.key).expect("write");
    }
    let tmp = tempfile::tempdir().expect("a temporary directory");
    let store = KernelStore::new(tmp.path().join("kernels"));
    let cache = KernelCache::new(1 << 30);
    let outcomes = Resolver::new(&cache, &backend)
        .store(&store)
        .resolve(&batch)
        .expect("the batch is resolved")
        .answers;
    for (k, o) in batch.iter().zip(outcomes.iter()) {
        writeln!(out, "outcome {} {:?} ok={}", k.symbol, k.options, o.is_ok()).expect("write");
    }
    files(&mut out, "kernels", &tmp.path().join("kernels"));

    let schedules = tmp.path().join("schedules");
    std::fs::create_dir_all(&schedules).expect("mkdir");
    let disk = DiskCache::new(&schedules);
    let mut rng = Rng::new(7);
    for _ in 0..24 {
        let (key, entry) = fill::entry(&mut rng);
        let stored = disk.store(Some(&key), &entry).expect("store");
        assert_eq!(stored, StoreOutcome::Stored);
        writeln!(out, "schedule {} {}", key.as_str(), entry.digest).expect("write");
    }
    files(&mut out, "schedules", &schedules);
    std::fs::write(&path, out).expect("the dump is written");
}
