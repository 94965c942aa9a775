//! The exit status of `kcache stats` and `kcache verify` on real directories, as `--help`
//! documents it: 0 a store read (or checked) and sound, 1 a store every open refuses or a
//! problem found, 3 nothing there to read or check ("verified 0 entries" is no success);
//! and the one directory layout (`cache_dir::Layout`) both stores' users share.

mod common;

use schedule_cache::Store as _;
use std::fs;
use std::path::Path;
use std::process::Output;

use cache_dir::STAMP_FILE;
use common::{entry, kcache, key};
use kernel_cache::store::KernelStore;
use kernel_cache::{BatchKernel, KernelCache, Resolver};
use test_support::lines::Lines;

fn run(command: &str, dir: &Path) -> Output {
    kcache(&[command, dir.to_str().expect("utf-8")])
}

#[track_caller]
fn assert_status(o: &Output, code: i32) {
    assert_eq!(
        o.status.code(),
        Some(code),
        "stdout:\n{}\nstderr:\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
}

/// One program saved into the kernel store at `kernels` by a real resolve.
fn save_one_program(kernels: &Path) {
    let b = vec![BatchKernel {
        key: "key-0".to_string(),
        options: vec![],
        symbol: "k0".to_string(),
        source: "kernel 0".to_string(),
    }];
    let store = KernelStore::new(kernels);
    Resolver::new(&KernelCache::new(1 << 20), &Lines::default())
        .store(Some(&store))
        .resolve_strict(&b)
        .map(|r| r.answers)
        .expect("resolve");
}

#[test]
fn an_empty_directory_is_nothing_checked_status_3() {
    let tmp = tempfile::tempdir().expect("tmp");
    for command in ["stats", "verify"] {
        let o = run(command, tmp.path());
        assert_status(&o, 3);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains("exit status 3"), "{command}: {err}");
    }
    // Nothing was created by looking.
    assert_eq!(fs::read_dir(tmp.path()).expect("list").count(), 0);
    // A stamped schedule store with no entry: stats reads a store (0), verify checked
    // nothing (3).
    schedule_cache::DiskCache::new(tmp.path())
        .store(Some(&key("a")), &entry(0))
        .expect("store");
    for e in fs::read_dir(tmp.path()).expect("list").flatten() {
        if e.file_name().to_string_lossy().ends_with(".ron") {
            fs::remove_file(e.path()).expect("rm");
        }
    }
    assert!(tmp.path().join(STAMP_FILE).exists());
    assert_status(&run("stats", tmp.path()), 0);
    let o = run("verify", tmp.path());
    assert_status(&o, 3);
    assert!(String::from_utf8_lossy(&o.stdout).contains("verified 0 entries: 0 problem(s)"));
}

#[test]
fn a_refused_directory_is_status_1() {
    // A directory whose stamp no open of this build admits: malformed, newer, another store's.
    for stamp in [
        "garbage\n",
        "kcache-schedule-store 999\n",
        "someone-elses-store 1\n",
    ] {
        let tmp = tempfile::tempdir().expect("tmp");
        fs::write(tmp.path().join(STAMP_FILE), stamp).expect("stamp");
        for command in ["stats", "verify"] {
            assert_status(&run(command, tmp.path()), 1);
        }
    }
    // A user's directory holding a file named like an entry and no stamp: every open refuses.
    let tmp = tempfile::tempdir().expect("tmp");
    fs::write(tmp.path().join("settings.ron"), "(a: 1)\n").expect("write");
    for command in ["stats", "verify"] {
        assert_status(&run(command, tmp.path()), 1);
    }
    // The kernel store itself given as DIR (its stamp is another store kind's).
    let tmp = tempfile::tempdir().expect("tmp");
    let kernels = cache_dir::Layout::new(tmp.path()).kernels();
    save_one_program(&kernels);
    for command in ["stats", "verify"] {
        assert_status(&run(command, &kernels), 1);
    }
    // A kernel store at DIR/kernels of a newer regime beside a sound schedule store.
    let tmp = tempfile::tempdir().expect("tmp");
    schedule_cache::DiskCache::new(tmp.path())
        .store(Some(&key("a")), &entry(0))
        .expect("store");
    let kernels = cache_dir::Layout::new(tmp.path()).kernels();
    save_one_program(&kernels);
    fs::write(kernels.join(STAMP_FILE), "kcache-kernel-store 999\n").expect("stamp");
    for command in ["stats", "verify"] {
        assert_status(&run(command, tmp.path()), 1);
    }
}

/// The stores opened where `Layout` puts them (as the demo and the examples open them) are
/// the ones `kcache DIR` reads: both sections filled, both verified, status 0. The layout the
/// foreign-backend example used before (`DIR/schedules` beside `DIR/kernels`) leaves the
/// schedule store unseen.
#[test]
fn stores_opened_at_the_layouts_paths_are_read_whole() {
    let tmp = tempfile::tempdir().expect("tmp");
    let layout = cache_dir::Layout::new(tmp.path());
    assert_eq!(layout, kernel_cache::Layout::new(tmp.path()));
    schedule_cache::DiskCache::new(layout.schedules())
        .store(Some(&key("a")), &entry(0))
        .expect("store");
    save_one_program(&layout.kernels());
    let o = run("stats", layout.root());
    assert_status(&o, 0);
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        text.contains("entries: 1 (schedule 0, placement 1)"),
        "{text}"
    );
    assert!(text.contains("  entries: 1 (programs 1)"), "{text}");
    assert!(text.contains("foreign files: 0"), "{text}");
    let o = run("verify", layout.root());
    assert_status(&o, 0);
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(text.contains("verified 1 entries: 0 problem(s)"), "{text}");
    assert!(
        text.contains("1 entries, 1 programs: 0 problem(s)"),
        "{text}"
    );

    // The old example layout: the schedule store one level down is a foreign directory.
    let old = tempfile::tempdir().expect("tmp");
    schedule_cache::DiskCache::new(old.path().join("schedules"))
        .store(Some(&key("a")), &entry(0))
        .expect("store");
    let o = run("stats", old.path());
    assert_status(&o, 3);
    assert!(String::from_utf8_lossy(&o.stdout).contains("foreign files: 1"));
    // ... and the tool says where it is.
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(err.contains("schedules holds a store"), "{err}");
}
