//! Without `/proc` the kernel store loses nothing (issue 39): a process in a mount namespace
//! whose `/proc` is unmounted (`unshare --mount`, then `umount -l /proc`) cannot give the
//! loader `/proc/self/fd/N`; it loads saved programs and compiles new ones through a named
//! file of a private directory of the checked work directory, and the store's entries and
//! blobs are byte-identical afterwards (new ones added). Where that fallback is impossible
//! too (the work directory on a file system mounted `noexec`), the resolve fails with a
//! message saying what the system lacks, and the store still keeps every program. A normal
//! process then loads them all.
//!
//! The processes without `/proc` are this test binary re-run with `NOPROC_ROLE` set, under
//! `unshare(1)`: that needs root (as CI runs); as another user the test says so and returns,
//! as `hostile_tmpdir.rs` does.

#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::Command;

use cc_backend::{Arg, CcBackend, Kernel, Signature, Source};
use kernel_cache::store::KernelStore;
use kernel_cache::{BatchKernel, KernelCache, Names, Resolved, Resolver};
use sha2::{Digest, Sha256};
use test_support::child::{field, stdout_of};
use test_support::kernels::elementwise_kernel;
use test_support::lines::censused;

const ROLE: &str = "NOPROC_ROLE";
const STORE: &str = "NOPROC_STORE";
const WORK: &str = "NOPROC_WORK";

fn is_root() -> bool {
    let f = tempfile::NamedTempFile::new().unwrap();
    f.as_file().metadata().unwrap().uid() == 0
}

/// Kernels `first..first + 4`: kernel `j` is `out[i] = a[i] * j + b[i]`.
fn batch(b: &CcBackend, first: u64) -> Vec<BatchKernel<Source>> {
    let names = Names::new().with_bound(["out", "a", "b", "n"]);
    (first..first + 4)
        .map(|j| {
            let name = format!("k{j}");
            Source::new(
                elementwise_kernel(&name, &format!("a[i] * {j}.0f + b[i]")),
                Signature::out_a_b_n(),
            )
            .batch_kernel(&name, &names, vec![], b.identity())
        })
        .collect()
}

/// How many of `answers` (kernels `first..`) compute something else than their kernel.
fn wrong(answers: &[Resolved<cc_backend::CcProgram>], first: u64) -> usize {
    let (a, b) = ([1.0f32, 2.0, 3.0], [10.0f32, 20.0, 30.0]);
    answers
        .iter()
        .zip(first..)
        .filter(|(answer, j)| {
            let mut out = [0.0f32; 3];
            Kernel::from_resolved(answer)
                .unwrap()
                .call(&mut [
                    Arg::F32Mut(&mut out),
                    Arg::F32(&a),
                    Arg::F32(&b),
                    Arg::I32Scalar(3),
                ])
                .unwrap();
            (0..3).any(|i| out[i] != a[i] * *j as f32 + b[i])
        })
        .count()
}

/// The store's entries and blobs: name to SHA-256 of the content.
fn tree(store: &Path) -> BTreeMap<String, String> {
    fs::read_dir(store)
        .unwrap()
        .map(|e| e.unwrap())
        .filter_map(|e| {
            let name = e.file_name().into_string().unwrap();
            (name.starts_with("k-") || name.starts_with("b-")).then(|| {
                let digest = Sha256::digest(fs::read(e.path()).unwrap());
                (name, hex(&digest))
            })
        })
        .collect()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A resolve of `batch` with a fresh cache: its answers (or the error, with its causes,
/// on one line) and its census.
fn resolve(
    b: &CcBackend,
    store: &KernelStore,
    batch: &[BatchKernel<Source>],
) -> (
    Result<Vec<Resolved<cc_backend::CcProgram>>, String>,
    kernel_cache::Census,
) {
    let cache = KernelCache::new(1 << 30);
    let (answers, census) = censused(Resolver::new(&cache, b).store(store).resolve_strict(batch));
    let answers = answers.map_err(|e| {
        let mut message = e.to_string();
        let mut next = std::error::Error::source(&e);
        while let Some(cause) = next {
            message.push_str(": ");
            message.push_str(&cause.to_string());
            next = cause.source();
        }
        message.replace('\n', " ")
    });
    (answers, census)
}

/// The child's body, a no-op unless this process was spawned as one (in a mount namespace
/// without `/proc`):
/// - `serve`: resolves kernels 0..4 (saved by the parent) and 4..8 (new); prints
///   `CHILD loaded=.. compiled=.. wrong=..`;
/// - `noexec`: resolves kernels 0..4 with a work directory mounted `noexec`; prints
///   `CHILD error=<the error, on one line>`.
#[test]
fn child() {
    let Ok(role) = std::env::var(ROLE) else {
        return;
    };
    assert!(
        !Path::new("/proc/self/fd").exists(),
        "the child was to run without /proc, and /proc/self/fd is there"
    );
    let store = KernelStore::new(std::env::var(STORE).unwrap());
    let b = CcBackend::new()
        .unwrap()
        .with_work_dir(std::env::var(WORK).unwrap());
    match role.as_str() {
        "serve" => {
            // Reported, never unwrapped: the parent checks the store first.
            let (old, c_old) = resolve(&b, &store, &batch(&b, 0));
            let (new, c_new) = resolve(&b, &store, &batch(&b, 4));
            let census = c_old + c_new;
            let mut failed = 0;
            let mut wrong_answers = 0;
            for (answers, first) in [(old, 0), (new, 4)] {
                match answers {
                    Ok(answers) => wrong_answers += wrong(&answers, first),
                    Err(e) => {
                        failed += 1;
                        println!("\nCHILD_ERROR {e}");
                    }
                }
            }
            println!(
                "\nCHILD loaded={} compiled={} wrong={wrong_answers} failed={failed}",
                census.kernels_loaded, census.kernels_compiled,
            );
        }
        "noexec" => {
            let (answers, _) = resolve(&b, &store, &batch(&b, 0));
            let error = answers.expect_err("nothing can be loaded here");
            println!("\nCHILD error={error}");
        }
        other => panic!("no role {other}"),
    }
}

/// Runs this test binary as the child `role` in a new mount namespace without `/proc`
/// (`setup` runs there first, as `sh -c`); its output.
fn child_without_proc(role: &str, store: &Path, work: &Path, setup: &str) -> String {
    let exe = std::env::current_exe().unwrap();
    stdout_of(
        Command::new("unshare")
            .args(["--mount", "--fork", "sh", "-c"])
            .arg(format!(
                "umount -l /proc && {setup} exec \"$0\" --exact child --nocapture --test-threads=1"
            ))
            .arg(exe)
            .env(ROLE, role)
            .env(STORE, store)
            .env(WORK, work),
    )
}

/// The `CHILD ` line of a child's output.
fn report(out: &str) -> &str {
    out.lines()
        .find(|l| l.starts_with("CHILD "))
        .unwrap_or_else(|| panic!("no report in {out}"))
}

#[test]
fn without_proc_programs_load_or_fail_clearly_and_the_store_loses_nothing() {
    if !is_root() {
        // unshare(1) and umount(8) need root: as CI runs.
        eprintln!("skipped: needs root to unmount /proc in a mount namespace");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let store_dir = tmp.path().join("kernels");
    let work = tmp.path().join("work");
    fs::create_dir(&work).unwrap();
    fs::set_permissions(&work, fs::Permissions::from_mode(0o700)).unwrap();
    let store = KernelStore::new(&store_dir);
    let b = CcBackend::new().unwrap().with_work_dir(&work);

    // A normal process saves kernels 0..4.
    let (answers, census) = resolve(&b, &store, &batch(&b, 0));
    assert_eq!(wrong(&answers.unwrap(), 0), 0);
    assert_eq!(census.kernels_compiled, 4);
    let before = tree(&store_dir);
    assert!(before.len() >= 5, "{before:?}");

    // Without /proc: the saved kernels load, the new ones compile (through named files of
    // the work directory), every answer is right, and nothing saved was changed or removed.
    let out = child_without_proc("serve", &store_dir, &work, "");
    let after = tree(&store_dir);
    for (name, digest) in &before {
        assert_eq!(
            after.get(name),
            Some(digest),
            "{name} changed or was removed: {out}"
        );
    }
    let line = report(&out);
    assert_eq!(field::<u64>(line, "failed"), 0, "{out}");
    assert_eq!(field::<u64>(line, "wrong"), 0, "{out}");
    assert_eq!(field::<u64>(line, "loaded"), 4, "{out}");
    assert_eq!(field::<u64>(line, "compiled"), 4, "{out}");
    assert!(after.len() > before.len(), "the new kernels were not saved");
    let kept: Vec<_> = fs::read_dir(&work).unwrap().collect();
    assert!(
        kept.is_empty(),
        "files left in the work directory: {kept:?}"
    );

    // Without /proc and with a work directory mounted noexec: nothing can be loaded; the
    // resolve fails saying so, and the store keeps every program, byte for byte.
    let noexec = tmp.path().join("noexec");
    fs::create_dir(&noexec).unwrap();
    fs::set_permissions(&noexec, fs::Permissions::from_mode(0o700)).unwrap();
    let out = child_without_proc(
        "noexec",
        &store_dir,
        &noexec,
        "mount -t tmpfs -o noexec,mode=0700 tmpfs \"$NOPROC_WORK\" &&",
    );
    let error = report(&out);
    assert!(
        error.contains("/proc") && error.contains("noexec"),
        "the message does not say what the system lacks: {error}"
    );
    assert_eq!(tree(&store_dir), after, "the store changed");

    // A normal process loads every kernel the store holds, compiling none.
    let (old, c_old) = resolve(&b, &store, &batch(&b, 0));
    let (new, c_new) = resolve(&b, &store, &batch(&b, 4));
    assert_eq!(wrong(&old.unwrap(), 0) + wrong(&new.unwrap(), 4), 0);
    let census = c_old + c_new;
    assert_eq!((census.kernels_loaded, census.kernels_compiled), (8, 0));
}
