//! Remembered failures in the kernel store, with real files (the C-compiler and
//! cross-process tests are cc-backend's `tests/remembered.rs`): a kernel that failed alone
//! is answered from the store with no compile; the strict resolves neither read nor write
//! them; a retry whose compile succeeds forgets the failure; a failure file of another
//! kernel or a malformed one is removed and the kernel compiled; a failure is named by
//! identity, key and host part; an older regime's sweep removes failures with the rest.

#![allow(clippy::unwrap_used)]

use std::fs;

use kernel_cache::store::{FailureMemory, KernelStore, MissReason, Outcome};
use kernel_cache::{BatchKernel, KernelCache, KernelError, Resolver};
use test_support::lines::Lines;
use test_support::lines::{censused, recorded};

fn kernel(key: &str, symbol: &str, source: &str) -> BatchKernel<String> {
    BatchKernel {
        key: key.into(),
        options: vec![],
        symbol: symbol.into(),
        source: source.into(),
    }
}

fn batch() -> Vec<BatchKernel<String>> {
    vec![
        kernel("good", "k0", "good kernel"),
        kernel("bad", "k1", "fail:k1 calls an undefined function"),
    ]
}

/// The only `f-` file of the store.
fn failure_file(store: &KernelStore) -> std::path::PathBuf {
    let mut names: Vec<_> = fs::read_dir(store.dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().unwrap().to_str().unwrap().starts_with("f-"))
        .collect();
    assert_eq!(names.len(), 1, "{names:?}");
    names.pop().unwrap()
}

#[test]
fn a_failure_is_answered_from_the_store_and_a_success_forgets_it() {
    let tmp = tempfile::tempdir().unwrap();
    let store = KernelStore::new(tmp.path().join("kernels"));
    let lines = Lines::default();
    let (first, census) = censused(
        Resolver::new(&KernelCache::new(1 << 20), &lines)
            .store(Some(&store))
            .resolve(&batch()),
    );
    let first = first.unwrap();
    assert!(matches!(
        first[1].as_ref().unwrap_err().as_ref(),
        KernelError::Unit(_)
    ));
    assert_eq!(
        (census.kernels_failed, census.kernels_remembered_failed),
        (1, 0)
    );
    assert_eq!(store.stats().unwrap().failures, 1);

    // Another cache (another process's): the good one loaded, the bad one remembered.
    let compiles = lines.compiles();
    let ((second, census), events) = recorded(
        Resolver::new(&KernelCache::new(1 << 20), &lines)
            .store(Some(&store))
            .resolve(&batch()),
    );
    let second = second.unwrap();
    assert_eq!(lines.compiles(), compiles);
    let error = second[1].as_ref().unwrap_err();
    assert_eq!(
        error.remembered(),
        Some("k1 calls an undefined function"),
        "{error}"
    );
    assert!(error.to_string().contains("remembered"), "{error}");
    assert_eq!(
        (
            census.kernels_loaded,
            census.kernels_remembered_failed,
            census.kernels_failed
        ),
        (1, 1, 0)
    );
    assert!(events.iter().any(|e| e.key == "bad"
        && matches!(&e.outcome, Outcome::Miss(MissReason::Remembered(m)) if m.contains("undefined"))));

    // The strict resolve neither reads nor writes failures: it compiles and fails.
    let strict = Resolver::new(&KernelCache::new(1 << 20), &lines)
        .store(Some(&store))
        .resolve_strict(&batch())
        .map(|r| r.answers);
    assert!(strict.is_err());
    assert_eq!(lines.compiles(), compiles + 1);

    // A retry of the key whose compile now succeeds (here: another text under the same
    // key) saves a program and forgets the failure.
    let retry = store.clone().with_failure_memory(FailureMemory::Retry);
    let fixed = [kernel("bad", "k1", "fixed kernel")];
    let out = Resolver::new(&KernelCache::new(1 << 20), &lines)
        .store(Some(&retry))
        .resolve(&fixed)
        .map(|r| r.answers)
        .unwrap();
    assert!(out[0].is_ok());
    assert_eq!(store.stats().unwrap().failures, 0);
    let (again, census) = censused(
        Resolver::new(&KernelCache::new(1 << 20), &lines)
            .store(Some(&store))
            .resolve(&batch()),
    );
    assert!(again.unwrap().iter().all(Result::is_ok));
    assert_eq!(census.kernels_loaded, 2);
}

/// A failure file that names another kernel (copied over this one's name) or does not
/// parse is removed, and the kernel compiled; a failure is named by the backend identity
/// and the host part, so another host compiles it.
#[test]
fn a_foreign_or_malformed_failure_is_removed_and_hosts_keep_their_own() {
    let tmp = tempfile::tempdir().unwrap();
    let store = KernelStore::new(tmp.path().join("kernels"));
    let lines = Lines::default();
    let cache = || KernelCache::new(1 << 20);
    Resolver::new(&cache(), &lines)
        .store(Some(&store))
        .resolve(&batch())
        .map(|r| r.answers)
        .unwrap();
    let file = failure_file(&store);
    let bytes = fs::read(&file).unwrap();

    // Another host: its own name, so the kernel is compiled there (and remembered again).
    let other = Lines::on_host(Some(7));
    let before = other.compiles();
    let out = Resolver::new(&cache(), &other)
        .store(Some(&store))
        .resolve(&batch()[1..])
        .map(|r| r.answers)
        .unwrap();
    assert!(matches!(
        out[0].as_ref().unwrap_err().as_ref(),
        KernelError::Unit(_)
    ));
    assert_eq!(other.compiles(), before + 1);
    assert_eq!(store.stats().unwrap().failures, 2);

    // Another kernel's failure at this kernel's name: removed, compiled.
    let other_key = [kernel("bad2", "k2", "fail:another")];
    Resolver::new(&cache(), &lines)
        .store(Some(&store))
        .resolve(&other_key)
        .map(|r| r.answers)
        .unwrap();
    let theirs = fs::read_dir(store.dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| {
            p.file_name().unwrap().to_str().unwrap().starts_with("f-")
                && *p != file
                && fs::read(p).unwrap().ends_with(b"another")
        })
        .unwrap();
    fs::write(&file, fs::read(&theirs).unwrap()).unwrap();
    let compiles = lines.compiles();
    let out = Resolver::new(&cache(), &lines)
        .store(Some(&store))
        .resolve(&batch()[1..])
        .map(|r| r.answers)
        .unwrap();
    assert!(matches!(
        out[0].as_ref().unwrap_err().as_ref(),
        KernelError::Unit(_)
    ));
    assert_eq!(lines.compiles(), compiles + 1);
    // Remembered again, rightly this time.
    assert_eq!(fs::read(&file).unwrap(), bytes);

    // Malformed: removed, compiled, remembered again.
    fs::write(&file, b"kcache kernel failure 1\nnot a failure").unwrap();
    let out = Resolver::new(&cache(), &lines)
        .store(Some(&store))
        .resolve(&batch()[1..])
        .map(|r| r.answers)
        .unwrap();
    assert!(matches!(
        out[0].as_ref().unwrap_err().as_ref(),
        KernelError::Unit(_)
    ));
    assert_eq!(fs::read(&file).unwrap(), bytes);
    assert!(store.verify().unwrap().problems.is_empty());
    fs::write(&file, b"garbage").unwrap();
    let v = store.verify().unwrap();
    assert_eq!(v.problems.len(), 1, "{:?}", v.problems);
}

/// Failures are entries of the regime: a store of an older regime is swept of them with
/// the rest (named like entries, never read by a build of another regime).
#[test]
fn an_older_regimes_sweep_removes_failures() {
    let tmp = tempfile::tempdir().unwrap();
    let store = KernelStore::new(tmp.path().join("kernels"));
    Resolver::new(&KernelCache::new(1 << 20), &Lines::default())
        .store(Some(&store))
        .resolve(&batch())
        .map(|r| r.answers)
        .unwrap();
    assert_eq!(store.stats().unwrap().failures, 1);
    let stamp = store.dir().join("regime.stamp");
    let older = kernel_cache::store::REGIME - 1;
    fs::write(&stamp, format!("kcache-kernel-store {older}\n")).unwrap();
    let stats = store.stats().unwrap();
    assert_eq!((stats.failures, stats.entries, stats.blobs), (0, 0, 0));
}
