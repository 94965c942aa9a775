//! Programs that outlive the process, with the real C compiler and real processes: a
//! shared object compiled in one process is loaded and called in another with no
//! compile; renamed twins hit across processes; a corrupted or other-writable blob is a
//! miss; two processes racing on one key compile it once; the byte limit holds across
//! processes; SIGKILL during saves never leaves an entry pointing nowhere or a blob that
//! loads wrong.
//!
//! Workers are this test binary re-run with `PERSIST_ROLE` set.

#![allow(clippy::unwrap_used)]

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use cc_backend::{Arg, CcBackend, Kernel, Signature, Source};
use kernel_cache::store::{KernelStore, MissReason, NotSaved, Outcome};
use kernel_cache::{Backend, BatchKernel, KernelCache, Names, Resolved, Resolver};
use test_support::kernels::elementwise_kernel;
use test_support::lines::{censused, recorded};

const ROLE: &str = "PERSIST_ROLE";

fn backend() -> CcBackend {
    CcBackend::new().expect("a C compiler is installed")
}

fn names() -> Names {
    Names::new().with_bound(["out", "a", "b", "n"])
}

/// Kernel `j`: `out[i] = a[i] * j + b[i] * m`, named `k{j}_{m}__seg{seg}` (the segment
/// index is not part of the key: renamed twins differ only there).
fn kernel(b: &CcBackend, j: u64, m: u64, seg: u64) -> BatchKernel<Source> {
    let name = format!("k{j}_{m}__seg{seg}");
    Source::new(
        elementwise_kernel(&name, &format!("a[i] * {j}.0f + b[i] * {m}.0f")),
        Signature::out_a_b_n(),
    )
    .batch_kernel(&name, &names(), vec![], b.identity())
}

/// Calls an answered kernel and checks it computes kernel `(j, m)`.
fn check(answer: &Resolved<cc_backend::CcProgram>, j: u64, m: u64) {
    let kernel = Kernel::from_resolved(answer).unwrap();
    let (a, bb) = ([1.0f32, 2.0, 3.0], [10.0f32, 20.0, 30.0]);
    let mut out = [0.0f32; 3];
    kernel
        .call(&mut [
            Arg::F32Mut(&mut out),
            Arg::F32(&a),
            Arg::F32(&bb),
            Arg::I32Scalar(3),
        ])
        .unwrap();
    let want: Vec<f32> = a
        .iter()
        .zip(&bb)
        .map(|(x, y)| x * j as f32 + y * m as f32)
        .collect();
    assert_eq!(
        out.to_vec(),
        want,
        "kernel ({j}, {m}) under {}",
        answer.symbol
    );
}

fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("{name} not set"))
}

fn env_u64(name: &str) -> u64 {
    env(name).parse().unwrap()
}

/// The worker body; a no-op unless this process was spawned as a worker.
#[test]
fn worker() {
    let Ok(role) = std::env::var(ROLE) else {
        return;
    };
    let dir = PathBuf::from(env("PERSIST_DIR"));
    let max = std::env::var("PERSIST_MAX").map_or(u64::MAX, |m| m.parse().unwrap());
    let store = KernelStore::new(&dir).with_max_bytes(max);
    let b = backend();
    let cache = KernelCache::new(1 << 30);
    match role.as_str() {
        // Resolves kernels (first..first+n, m) under segment index `seg`; checks each.
        "resolve" => {
            let (first, n, m, seg) = (
                env_u64("PERSIST_FIRST"),
                env_u64("PERSIST_N"),
                env_u64("PERSIST_M"),
                env_u64("PERSIST_SEG"),
            );
            if let Ok(t) = std::env::var("PERSIST_START_AT") {
                let at = Duration::from_millis(t.parse().unwrap());
                let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
                std::thread::sleep(at.saturating_sub(now));
            }
            let batch: Vec<_> = (first..first + n).map(|j| kernel(&b, j, m, seg)).collect();
            let (answers, census) = censused(
                Resolver::new(&cache, &b)
                    .store(Some(&store))
                    .split(b.split())
                    .resolve_strict(&batch),
            );
            let answers = answers.unwrap();
            for (j, answer) in (first..first + n).zip(&answers) {
                check(answer, j, m);
            }
            println!(
                "RESULT compiles={} loaded={} symbol={}",
                b.programs_compiled(),
                census.kernels_loaded,
                answers[0].symbol
            );
        }
        // Resolves the kernel including "scale.h" (found through `CPATH`); prints what
        // it computes.
        "scaled" => {
            let (out, census, _) = resolve_scaled(&b, &store, scaled(&b, "scale.h"));
            println!("RESULT out={out} loaded={}", census.kernels_loaded);
        }
        // Resolves the kernel computing `a[i] * SCALE` under the options of `PERSIST_OPTS`
        // (one a line), its prelude `PERSIST_PRELUDE` then `#include PERSIST_INCLUDE` (when
        // set); prints what it computes, whether it was loaded or saved, and whether a saved
        // program was refused because of the include search.
        "include" => {
            let options: Vec<String> = env("PERSIST_OPTS").lines().map(String::from).collect();
            let mut prelude = std::env::var("PERSIST_PRELUDE").unwrap_or_default();
            if let Ok(include) = std::env::var("PERSIST_INCLUDE") {
                prelude.push_str(&format!("#include {include}\n"));
            }
            let kernel = Source::new(
                elementwise_kernel("k", "a[i] * SCALE"),
                Signature::out_a_b_n(),
            )
            .with_prelude(prelude)
            .batch_kernel("k", &names(), options, b.identity());
            let (out, census, events) = resolve_scaled(&b, &store, kernel);
            let saved = events
                .iter()
                .any(|e| matches!(e.outcome, Outcome::Saved { .. }));
            let refused = events.iter().any(|e| {
                matches!(&e.outcome, Outcome::Miss(MissReason::LoadFailed(m)) if m.contains("include search"))
            });
            println!(
                "RESULT out={out} loaded={} saved={saved} refused={refused}",
                census.kernels_loaded
            );
        }
        // Resolves kernel (3, 4) (run under a small file-size limit); prints whether the
        // resolve failed and whether the store's blob was a miss for an I/O error.
        "stuck" => {
            let batch = [kernel(&b, 3, 4, 0)];
            // Per kernel, so that the store's events come back with the compile's failure.
            let resolution = Resolver::new(&cache, &b)
                .store(&store)
                .split(b.split())
                .resolve(&batch)
                .unwrap();
            let (result, events) = (&resolution.answers[0], resolution.events);
            let io_miss = events.iter().any(|e| {
                matches!(&e.outcome, Outcome::Miss(MissReason::LoadFailed(why))
                    if why.contains("I/O error on memfd:kcache-cc-program"))
            });
            println!("RESULT failed={} io_miss={io_miss}", result.is_err());
        }
        // Resolves kernel (2, 0) under `-march=native`; prints what it computes.
        "native" => {
            let name = "k2_0__seg0";
            let kernel = Source::new(
                elementwise_kernel(name, "a[i] * 2.0f + b[i] * 0.0f"),
                Signature::out_a_b_n(),
            )
            .batch_kernel(name, &names(), vec!["-march=native".into()], b.identity());
            let (answers, census) = censused(
                Resolver::new(&cache, &b)
                    .store(Some(&store))
                    .split(b.split())
                    .resolve_strict(&[kernel]),
            );
            check(&answers.unwrap()[0], 2, 0);
            println!("RESULT loaded={}", census.kernels_loaded);
        }
        // Compiles and saves one-kernel programs (id, seq) until killed.
        "saver" => {
            let id = env_u64("PERSIST_ID");
            for seq in 0.. {
                let batch = [kernel(&b, id, seq, 0)];
                Resolver::new(&cache, &b)
                    .store(Some(&store))
                    .split(b.split())
                    .resolve_strict(&batch)
                    .map(|r| r.answers)
                    .unwrap();
            }
        }
        other => panic!("unknown role {other}"),
    }
}

fn spawn(role: &str, dir: &Path, vars: &[(&str, String)]) -> Child {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args(["--exact", "worker", "--nocapture", "--test-threads=1"])
        .env(ROLE, role)
        .env("PERSIST_DIR", dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    for (k, v) in vars {
        cmd.env(k, v);
    }
    cmd.spawn().unwrap()
}

fn finish(child: Child) -> String {
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "worker failed: {stdout}");
    stdout
        .lines()
        .find_map(|l| l.split_once("RESULT ").map(|(_, r)| r.to_string()))
        .unwrap_or_else(|| panic!("no RESULT in {stdout}"))
}

fn field(result: &str, name: &str) -> String {
    result
        .split_whitespace()
        .find_map(|f| f.strip_prefix(&format!("{name}=")))
        .unwrap()
        .to_string()
}

fn resolve_vars(first: u64, n: u64, m: u64, seg: u64) -> Vec<(&'static str, String)> {
    vec![
        ("PERSIST_FIRST", first.to_string()),
        ("PERSIST_N", n.to_string()),
        ("PERSIST_M", m.to_string()),
        ("PERSIST_SEG", seg.to_string()),
    ]
}

#[test]
fn a_program_compiled_in_one_process_is_loaded_and_called_in_another() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("kernels");
    let a = finish(spawn("resolve", &dir, &resolve_vars(1, 6, 2, 1)));
    assert_ne!(field(&a, "compiles"), "0");
    assert_eq!(field(&a, "loaded"), "0");
    let b = finish(spawn("resolve", &dir, &resolve_vars(1, 6, 2, 1)));
    assert_eq!(field(&b, "compiles"), "0", "{b}");
    assert_eq!(field(&b, "loaded"), "6");
    // Renamed twins (other segment indices: other symbols, equal keys) hit too, and
    // answer under the symbol the program was compiled with.
    let backend = backend();
    assert_eq!(kernel(&backend, 1, 2, 1).key, kernel(&backend, 1, 2, 9).key);
    let c = finish(spawn("resolve", &dir, &resolve_vars(1, 6, 2, 9)));
    assert_eq!(field(&c, "compiles"), "0", "{c}");
    assert_eq!(field(&c, "symbol"), "k1_2__seg1");
}

fn blobs(dir: &Path) -> Vec<PathBuf> {
    fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with("b-"))
        .collect()
}

#[test]
fn a_corrupted_truncated_or_other_writable_blob_is_a_miss() {
    let b = backend();
    for damage in ["flip", "truncate", "o+w"] {
        let tmp = tempfile::tempdir().unwrap();
        let store = KernelStore::new(tmp.path().join("kernels"));
        let batch = [kernel(&b, 3, 4, 0)];
        Resolver::new(&KernelCache::new(1 << 20), &b)
            .store(Some(&store))
            .split(b.split())
            .resolve_strict(&batch)
            .map(|r| r.answers)
            .unwrap();
        let [blob] = blobs(store.dir()).try_into().unwrap();
        let mut bytes = fs::read(&blob).unwrap();
        match damage {
            "flip" => {
                // A byte inside the shared object's code.
                let mid = bytes.len() / 2;
                bytes[mid] ^= 0x40;
                fs::write(&blob, &bytes).unwrap();
            }
            "truncate" => {
                bytes.truncate(bytes.len() - 100);
                fs::write(&blob, &bytes).unwrap();
            }
            _ => fs::set_permissions(&blob, fs::Permissions::from_mode(0o606)).unwrap(),
        }
        let before = b.programs_compiled();
        let ((answers, census), events) = recorded(
            Resolver::new(&KernelCache::new(1 << 20), &b)
                .store(Some(&store))
                .split(b.split())
                .resolve_strict(&batch),
        );
        let answers = answers.unwrap();
        check(&answers[0], 3, 4);
        assert_eq!(census.kernels_loaded, 0, "{damage}");
        assert_eq!(b.programs_compiled(), before + 1, "{damage}");
        let miss = events.iter().find_map(|e| match &e.outcome {
            Outcome::Miss(m) => Some(m.clone()),
            _ => None,
        });
        match damage {
            "o+w" => assert!(
                matches!(miss, Some(MissReason::NotPrivate(_))),
                "{events:?}"
            ),
            _ => {
                assert_eq!(miss, Some(MissReason::Corrupt), "{damage}: {events:?}");
                // Removed, then saved whole again by the compile.
                let [again] = blobs(store.dir()).try_into().unwrap();
                assert!(
                    fs::read(again).unwrap() != bytes,
                    "{damage}: the damaged blob stayed"
                );
            }
        }
    }
}

/// A load that fails for the moment (here the memory file the shared object is written
/// to cannot hold it: a process whose file-size limit is below the program's size, as a
/// full disk or memory limit gives) is a miss that keeps the blob, which the next process
/// loads (every such failure removed it: a full disk emptied the store of every program
/// looked up).
#[test]
fn a_blob_that_cannot_be_loaded_for_the_moment_is_kept() {
    let b = backend();
    let tmp = tempfile::tempdir().unwrap();
    let store = KernelStore::new(tmp.path().join("kernels"));
    let batch = [kernel(&b, 3, 4, 0)];
    Resolver::new(&KernelCache::new(1 << 20), &b)
        .store(Some(&store))
        .split(b.split())
        .resolve_strict(&batch)
        .map(|r| r.answers)
        .unwrap();
    let [blob] = blobs(store.dir()).try_into().unwrap();
    let bytes = fs::read(&blob).unwrap();
    assert!(
        bytes.len() > 4096,
        "the limit below must be under the program's size"
    );

    // A worker whose files (the memory file included) may not grow past 2 KiB (SIGXFSZ
    // ignored: a write past the limit fails with EFBIG).
    let exe = std::env::current_exe().unwrap();
    let out = Command::new("sh")
        .arg("-c")
        .arg("trap '' XFSZ; ulimit -f 4; exec \"$0\" \"$@\"")
        .arg(&exe)
        .args(["--exact", "worker", "--nocapture", "--test-threads=1"])
        .env(ROLE, "stuck")
        .env("PERSIST_DIR", store.dir())
        .stderr(Stdio::inherit())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "worker failed: {stdout}");
    let result = stdout
        .lines()
        .find_map(|l| l.split_once("RESULT ").map(|(_, r)| r.to_string()))
        .unwrap_or_else(|| panic!("no RESULT in {stdout}"));
    // The compile that follows the miss cannot write its program either.
    assert_eq!(field(&result, "failed"), "true", "{result}");
    assert_eq!(field(&result, "io_miss"), "true", "{result}");
    assert_eq!(fs::read(&blob).unwrap(), bytes, "the blob was removed");

    let (answers, census) = censused(
        Resolver::new(&KernelCache::new(1 << 20), &b)
            .store(Some(&store))
            .split(b.split())
            .resolve_strict(&batch),
    );
    check(&answers.unwrap()[0], 3, 4);
    assert_eq!(census.kernels_loaded, 1);
}

/// Lets headers written just now settle: a file that changed less than 2 s before a
/// compile began does not vouch for the program (nothing can date a change back).
fn settle() {
    std::thread::sleep(Duration::from_millis(2500));
}

/// A kernel computing `a[i] * SCALE`, `SCALE` defined by the header `#include
/// "<header>"` finds.
fn scaled(b: &CcBackend, header: &str) -> BatchKernel<Source> {
    Source::new(
        elementwise_kernel("k", "a[i] * SCALE"),
        Signature::out_a_b_n(),
    )
    .with_prelude(format!("#include \"{header}\"\n"))
    .batch_kernel("k", &names(), vec![], b.identity())
}

/// Resolves `kernel` with a fresh cache over `store`; what it computes for `a = [1]`,
/// the census and the store's events.
fn resolve_scaled(
    b: &CcBackend,
    store: &KernelStore,
    kernel: BatchKernel<Source>,
) -> (
    f32,
    kernel_cache::Census,
    Vec<kernel_cache::store::StoreEvent>,
) {
    let ((answers, census), events) = recorded(
        Resolver::new(&KernelCache::new(1 << 20), b)
            .store(Some(store))
            .split((b).split())
            .resolve_strict(&[kernel]),
    );
    let k = Kernel::from_resolved(&answers.unwrap()[0]).unwrap();
    let mut out = [0.0f32];
    k.call(&mut [
        Arg::F32Mut(&mut out),
        Arg::F32(&[1.0]),
        Arg::F32(&[0.0]),
        Arg::I32Scalar(1),
    ])
    .unwrap();
    (out[0], census, events)
}

/// The key covers the kernel's text, not what it includes: a saved program is never
/// loaded after a header it was compiled against changed (it is compiled again), and a
/// program whose header changed after its compile began is not saved.
#[test]
fn a_saved_program_is_never_loaded_after_a_header_it_included_changed() {
    let b = backend();
    let tmp = tempfile::tempdir().unwrap();
    let store = KernelStore::new(tmp.path().join("kernels"));
    let header = tmp.path().join("scale.h");
    // Settled after writing (a header written just now does not vouch for a program: below).
    let define = |v: u32| {
        fs::write(&header, format!("#define SCALE {v}\n")).unwrap();
        settle();
    };
    let scaled = |b: &CcBackend, h: &Path| scaled(b, &h.display().to_string());
    define(1);
    let (out, census, events) = resolve_scaled(&b, &store, scaled(&b, &header));
    assert_eq!((out, census.kernels_compiled), (1.0, 1));
    assert!(
        events
            .iter()
            .any(|e| matches!(e.outcome, Outcome::Saved { .. })),
        "{events:?}"
    );
    // Same header: loaded, not compiled.
    let (out, census, _) = resolve_scaled(&b, &store, scaled(&b, &header));
    assert_eq!(
        (out, census.kernels_loaded, census.kernels_compiled),
        (1.0, 1, 0)
    );
    // The header changed: the saved program is refused and the kernel compiled again.
    define(2);
    let (out, census, events) = resolve_scaled(&b, &store, scaled(&b, &header));
    assert_eq!(
        out, 2.0,
        "answered with a program compiled from the old header"
    );
    assert_eq!((census.kernels_loaded, census.kernels_compiled), (0, 1));
    assert!(
        events.iter().any(|e| matches!(&e.outcome,
            Outcome::Miss(MissReason::LoadFailed(m)) if m.contains("scale.h"))),
        "{events:?}"
    );
    let (out, census, _) = resolve_scaled(&b, &store, scaled(&b, &header));
    assert_eq!((out, census.kernels_loaded), (2.0, 1));
    // A header changed just before the compile began (within a file system's clock
    // granularity of it) may not be what the compiler read: the program is used but not
    // saved. So is one dated back a year (the change itself is not), and one renamed over
    // the header with an old modification time (as a package upgrade installs it).
    fs::write(&header, "#define SCALE 3\n").unwrap();
    let (out, census, events) = resolve_scaled(&b, &store, scaled(&b, &header));
    assert_eq!((out, census.kernels_compiled), (3.0, 1));
    assert!(
        events.iter().any(|e| matches!(&e.outcome,
            Outcome::NotSaved(NotSaved::Backend(m)) if m.contains("after the compile began"))),
        "{events:?}"
    );
    let year_ago = SystemTime::now() - Duration::from_secs(365 * 24 * 3600);
    let backdate = |path: &Path| {
        fs::File::options()
            .write(true)
            .open(path)
            .unwrap()
            .set_modified(year_ago)
            .unwrap()
    };
    fs::write(&header, "#define SCALE 4\n").unwrap();
    backdate(&header);
    let (out, census, events) = resolve_scaled(&b, &store, scaled(&b, &header));
    assert_eq!((out, census.kernels_compiled), (4.0, 1));
    assert!(
        events.iter().any(|e| matches!(&e.outcome,
            Outcome::NotSaved(NotSaved::Backend(m)) if m.contains("after the compile began"))),
        "{events:?}"
    );
    let packaged = tmp.path().join("scale.h.new");
    fs::write(&packaged, "#define SCALE 5\n").unwrap();
    backdate(&packaged);
    settle();
    fs::rename(&packaged, &header).unwrap();
    let (out, census, events) = resolve_scaled(&b, &store, scaled(&b, &header));
    assert_eq!((out, census.kernels_compiled), (5.0, 1));
    assert!(
        events.iter().any(|e| matches!(&e.outcome,
            Outcome::NotSaved(NotSaved::Backend(m)) if m.contains("after the compile began"))),
        "{events:?}"
    );
    // And a link pointed just now at a file that settled long ago.
    let (six, seven) = (tmp.path().join("six.h"), tmp.path().join("seven.h"));
    fs::write(&six, "#define SCALE 6\n").unwrap();
    fs::write(&seven, "#define SCALE 7\n").unwrap();
    let link = tmp.path().join("link.h");
    std::os::unix::fs::symlink(&six, &link).unwrap();
    settle();
    let (out, _, events) = resolve_scaled(&b, &store, scaled(&b, &link));
    assert_eq!(out, 6.0);
    assert!(
        events
            .iter()
            .any(|e| matches!(e.outcome, Outcome::Saved { .. })),
        "{events:?}"
    );
    fs::remove_file(&link).unwrap();
    std::os::unix::fs::symlink(&seven, &link).unwrap();
    let (out, census, events) = resolve_scaled(&b, &store, scaled(&b, &link));
    assert_eq!((out, census.kernels_compiled), (7.0, 1));
    assert!(
        events.iter().any(|e| matches!(&e.outcome,
            Outcome::NotSaved(NotSaved::Backend(m)) if m.contains("after the compile began"))),
        "{events:?}"
    );
}

/// A backend whose compiler is a wrapper of `cc` that runs the shell command `after` once
/// each unit's `-c` compile finished: a change made during the compile, after the
/// compiler read its files and before the program is saved.
fn cc_changing_after_compile(dir: &Path, after: &str) -> CcBackend {
    let wrapper = dir.join("cc-then");
    fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\ncc \"$@\"; s=$?\ncase \" $* \" in *\" -c \"*) {after};; esac\nexit $s\n"
        ),
    )
    .unwrap();
    fs::set_permissions(&wrapper, fs::Permissions::from_mode(0o755)).unwrap();
    CcBackend::with_compiler(&wrapper.display().to_string()).unwrap()
}

/// A header reached through links, one of which is pointed at another (settled) header
/// during the compile: the link the name itself is (checked before), one further along
/// the chain, or a directory's link in the path (as `update-alternatives` keeps
/// `/opt/cuda -> cuda-12.x`). The program was compiled from the old header and is never
/// saved: the next resolve compiles the new one (it loaded the old program, a wrong hit).
#[test]
fn a_program_is_not_saved_when_any_link_of_its_headers_path_changed_during_the_compile() {
    // (links to make as (target, link), header to include, (new target, link repointed),
    // SCALE before and after)
    type Case<'a> = (
        &'a [(&'a str, &'a str)],
        &'a str,
        (&'a str, &'a str),
        f32,
        f32,
    );
    let cases: [Case<'_>; 3] = [
        (
            &[("six.h", "link.h")],
            "link.h",
            ("seven.h", "link.h"),
            6.0,
            7.0,
        ),
        (
            &[("six.h", "mid.h"), ("mid.h", "link.h")],
            "link.h",
            ("seven.h", "mid.h"),
            6.0,
            7.0,
        ),
        (&[("v1", "cur")], "cur/scale.h", ("v2", "cur"), 1.0, 2.0),
    ];
    for (links, header, (target, repointed), old, new) in cases {
        let tmp = tempfile::tempdir().unwrap();
        let t = tmp.path();
        fs::write(t.join("six.h"), "#define SCALE 6\n").unwrap();
        fs::write(t.join("seven.h"), "#define SCALE 7\n").unwrap();
        for (d, v) in [("v1", 1), ("v2", 2)] {
            fs::create_dir(t.join(d)).unwrap();
            fs::write(t.join(d).join("scale.h"), format!("#define SCALE {v}\n")).unwrap();
        }
        for (target, link) in links {
            std::os::unix::fs::symlink(t.join(target), t.join(link)).unwrap();
        }
        settle();
        let b = cc_changing_after_compile(
            t,
            &format!(
                "ln -sfn {} {}",
                t.join(target).display(),
                t.join(repointed).display()
            ),
        );
        let store = KernelStore::new(t.join("kernels"));
        let header = t.join(header).display().to_string();
        let (out, census, events) = resolve_scaled(&b, &store, scaled(&b, &header));
        assert_eq!((out, census.kernels_compiled), (old, 1), "{header}");
        assert!(
            events.iter().any(|e| matches!(&e.outcome,
                Outcome::NotSaved(NotSaved::Backend(m)) if m.contains("after the compile began"))),
            "{repointed} repointed during the compile, yet: {events:?}"
        );
        let (out, census, _) = resolve_scaled(&b, &store, scaled(&b, &header));
        assert_eq!(
            (out, census.kernels_loaded),
            (new, 0),
            "{repointed}: answered with the program compiled through the old link"
        );
    }
}

/// System headers are files the compile read too: a saved program records `math.h` (the
/// default prelude's) and a header of an `-isystem` directory, and is not loaded once the
/// latter changed. Under `-MMD` the compiler lists neither, so such a program is never
/// saved (it was, and loaded after the system header changed: a wrong hit).
#[test]
fn system_headers_are_recorded_and_dependency_options_keep_a_program_unsaved() {
    let b = backend();
    let tmp = tempfile::tempdir().unwrap();
    let sys = tmp.path().join("sys");
    fs::create_dir(&sys).unwrap();
    let define = |v: u32| fs::write(sys.join("scale.h"), format!("#define SCALE {v}\n")).unwrap();
    define(1);
    settle();
    let store = KernelStore::new(tmp.path().join("kernels"));
    let kernel = |options: &[&str]| {
        let mut options: Vec<String> = options.iter().map(|o| o.to_string()).collect();
        options.push(format!("-isystem{}", sys.display()));
        Source::new(
            elementwise_kernel("k", "a[i] * SCALE"),
            Signature::out_a_b_n(),
        )
        .with_prelude(format!(
            "{}#include <scale.h>\n",
            cc_backend::DEFAULT_PRELUDE
        ))
        .batch_kernel("k", &names(), options, b.identity())
    };
    let program = b
        .compile_program(&[("k", &kernel(&[]).source)], &kernel(&[]).options)
        .unwrap();
    let saved = Backend::save(&b, &program)
        .expect("cc-backend saves")
        .unwrap();
    let recorded = String::from_utf8_lossy(&saved.bytes);
    for header in ["/math.h", "/sys/scale.h"] {
        assert!(recorded.contains(header), "{header} not recorded");
    }
    // Without -MMD: saved, loaded, refused once the system header changed.
    let (out, _, events) = resolve_scaled(&b, &store, kernel(&[]));
    assert_eq!(out, 1.0);
    assert!(
        events
            .iter()
            .any(|e| matches!(e.outcome, Outcome::Saved { .. })),
        "{events:?}"
    );
    assert_eq!(resolve_scaled(&b, &store, kernel(&[])).1.kernels_loaded, 1);
    // With -MMD (or another dependency option): compiled and used, never saved.
    for option in ["-MMD", "-Wp,-MMD,user.d"] {
        let (out, _, events) = resolve_scaled(&b, &store, kernel(&[option]));
        assert_eq!(out, 1.0);
        assert!(
            events.iter().any(|e| matches!(&e.outcome,
                Outcome::NotSaved(NotSaved::Backend(m)) if m.contains(option))),
            "{option}: {events:?}"
        );
    }
    define(2);
    for options in [&[][..], &["-MMD"]] {
        let (out, census, _) = resolve_scaled(&b, &store, kernel(options));
        assert_eq!(
            (out, census.kernels_loaded),
            (2.0, 0),
            "{options:?}: answered with the program compiled from the old system header"
        );
    }
}

/// A header the compiler's dependency list names by a relative path (reached from the
/// unit's own directory: `#include "../../scale.h"`, or `scale.h` under `-I../..`; the
/// list says `../../scale.h`) keeps the program unsaved: it is used, and compiled again
/// by the next resolve.
#[test]
fn a_header_named_by_a_relative_path_keeps_the_program_unsaved() {
    let tmp = tempfile::tempdir().unwrap();
    // Each unit compiles in `<work>/<program dir>/<symbol>/kernel.c`.
    let work = tmp.path().join("work");
    fs::create_dir(&work).unwrap();
    fs::write(work.join("scale.h"), "#define SCALE 3\n").unwrap();
    settle();
    let b = backend().with_work_dir(&work);
    let store = KernelStore::new(tmp.path().join("kernels"));
    let kernels = [
        scaled(&b, "../../scale.h"),
        Source::new(
            elementwise_kernel("k", "a[i] * SCALE"),
            Signature::out_a_b_n(),
        )
        .with_prelude("#include \"scale.h\"\n")
        .batch_kernel("k", &names(), vec!["-I../..".into()], b.identity()),
    ];
    for kernel in kernels {
        for _ in 0..2 {
            let (out, census, events) = resolve_scaled(&b, &store, kernel.clone());
            assert_eq!(
                (out, census.kernels_compiled, census.kernels_loaded),
                (3.0, 1, 0),
                "{events:?}"
            );
            assert!(
                events.iter().any(|e| matches!(&e.outcome,
                    Outcome::NotSaved(NotSaved::Backend(m))
                        if m.contains("../../scale.h") && m.contains("named by a relative path"))),
                "{events:?}"
            );
            assert!(
                !events
                    .iter()
                    .any(|e| matches!(e.outcome, Outcome::Saved { .. })),
                "{events:?}"
            );
        }
    }
    assert!(!store.dir().exists() || blobs(store.dir()).is_empty());
}

/// `CPATH` decides which header `#include "scale.h"` finds: a process with another
/// setting never loads a program compiled with the first one's header.
#[test]
fn a_process_whose_include_path_finds_another_header_never_loads_the_first_ones_program() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("kernels");
    let include = |name: &str, v: u32| {
        let d = tmp.path().join(name);
        fs::create_dir(&d).unwrap();
        fs::write(d.join("scale.h"), format!("#define SCALE {v}\n")).unwrap();
        d.display().to_string()
    };
    let (one, two) = (include("one", 1), include("two", 2));
    settle();
    let run = |cpath: &str| finish(spawn("scaled", &dir, &[("CPATH", cpath.to_string())]));
    assert_eq!(run(&one), "out=1 loaded=0");
    assert_eq!(
        run(&two),
        "out=2 loaded=0",
        "answered with the other header's program"
    );
    assert_eq!(run(&one), "out=1 loaded=1");
    assert_eq!(run(&two), "out=2 loaded=1");
}

/// Runs the `include` worker over the store `dir`: `options`, `#include <include>` after
/// `prelude`, the variables `vars`.
fn run_include(
    dir: &Path,
    options: &[String],
    prelude: &str,
    include: Option<&str>,
    vars: &[(&str, String)],
) -> String {
    let mut all = vec![
        ("PERSIST_OPTS", options.join("\n")),
        ("PERSIST_PRELUDE", prelude.to_string()),
    ];
    if let Some(include) = include {
        all.push(("PERSIST_INCLUDE", include.to_string()));
    }
    all.extend(vars.iter().cloned());
    finish(spawn("include", dir, &all))
}

/// `-I one -I two` with `scale.h` (`SCALE 2`) only in `two`, and the options naming them.
fn one_and_two(t: &Path) -> Vec<String> {
    for d in ["one", "two"] {
        fs::create_dir(t.join(d)).unwrap();
    }
    fs::write(t.join("two/scale.h"), "#define SCALE 2\n").unwrap();
    vec![
        format!("-I{}", t.join("one").display()),
        format!("-I{}", t.join("two").display()),
    ]
}

/// A header of the same name created after the save in an include directory searched
/// before the recorded one's shadows it: a fresh compile finds the new header, so the
/// saved program (compiled from the old one) is never loaded again (it was: a process
/// computed 2 where a compile gives 9).
#[test]
fn a_header_created_later_in_an_earlier_include_directory_is_never_shadowed_by_the_saved_program() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let dir = t.join("kernels");
    let options = one_and_two(t);
    settle();
    let run = || run_include(&dir, &options, "", Some("<scale.h>"), &[]);
    assert_eq!(run(), "out=2 loaded=0 saved=true refused=false");
    assert_eq!(run(), "out=2 loaded=1 saved=false refused=false");
    fs::write(t.join("one/scale.h"), "#define SCALE 9\n").unwrap();
    assert_eq!(
        run(),
        "out=9 loaded=0 saved=false refused=true",
        "answered with the program compiled from two/scale.h while one/scale.h shadows it"
    );
}

/// The same with a header named by a relative path (`<lib/scale.h>`): `one/lib/` and the
/// header created after the save, only the header created in a `one/lib/` that was there,
/// and `one` itself created after the save (the compiler ignored it as nonexistent).
#[test]
fn a_nested_header_or_include_directory_created_later_is_never_shadowed_by_the_saved_program() {
    // (directories made before the save, what is created after it)
    let cases: [(&[&str], &[&str]); 3] = [
        (&["one"], &["one/lib"]),
        (&["one", "one/lib"], &[]),
        (&[], &["one", "one/lib"]),
    ];
    for (before, after) in cases {
        let tmp = tempfile::tempdir().unwrap();
        let t = tmp.path();
        let dir = t.join("kernels");
        for d in before.iter().chain(&["two", "two/lib"]) {
            fs::create_dir(t.join(d)).unwrap();
        }
        fs::write(t.join("two/lib/scale.h"), "#define SCALE 2\n").unwrap();
        let options = vec![
            format!("-I{}", t.join("one").display()),
            format!("-I{}", t.join("two").display()),
        ];
        settle();
        let run = || run_include(&dir, &options, "", Some("<lib/scale.h>"), &[]);
        assert_eq!(
            run(),
            "out=2 loaded=0 saved=true refused=false",
            "{before:?}"
        );
        assert_eq!(
            run(),
            "out=2 loaded=1 saved=false refused=false",
            "{before:?}"
        );
        for d in after {
            fs::create_dir(t.join(d)).unwrap();
        }
        fs::write(t.join("one/lib/scale.h"), "#define SCALE 9\n").unwrap();
        assert_eq!(
            run(),
            "out=9 loaded=0 saved=false refused=true",
            "made before the save {before:?}, after it {after:?}: answered with the shadowed program"
        );
    }
}

/// What a search for the recorded header never looks at does not keep the saved program
/// from loading: a header of another name in the earlier directory, one of the same name
/// in a directory not searched, another header beside the recorded one.
#[test]
fn files_an_include_search_does_not_look_at_never_keep_a_saved_program_from_loading() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let dir = t.join("kernels");
    let options = one_and_two(t);
    settle();
    let run = || run_include(&dir, &options, "", Some("<scale.h>"), &[]);
    assert_eq!(run(), "out=2 loaded=0 saved=true refused=false");
    fs::write(t.join("one/other.h"), "#define SCALE 9\n").unwrap();
    fs::create_dir(t.join("elsewhere")).unwrap();
    fs::write(t.join("elsewhere/scale.h"), "#define SCALE 9\n").unwrap();
    fs::write(t.join("two/extra.h"), "#define SCALE 9\n").unwrap();
    assert_eq!(run(), "out=2 loaded=1 saved=false refused=false");
}

/// The default prelude's system headers (`math.h`, `stddef.h`, `stdint.h`, and what they
/// include, some through `#include_next`) are searched for in settled system directories:
/// a program including them is saved and loaded by another process, with `cc` and with
/// clang.
#[test]
fn the_default_prelude_still_saves_and_loads_with_cc_and_clang() {
    for cc in ["cc", "clang"] {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("kernels");
        let run = || {
            run_include(
                &dir,
                &["-DSCALE=3".to_string()],
                cc_backend::DEFAULT_PRELUDE,
                None,
                &[("CC", cc.to_string())],
            )
        };
        assert_eq!(run(), "out=3 loaded=0 saved=true refused=false", "{cc}");
        assert_eq!(run(), "out=3 loaded=1 saved=false refused=false", "{cc}");
    }
}

/// clang applies `CCC_OVERRIDE_OPTIONS` to its command line (`+-DSCALE=3` defines
/// `SCALE`): a process with another setting never loads a program compiled under the
/// first one's (it did: the variable was not part of the backend's identity).
#[test]
fn a_process_whose_clang_override_options_differ_never_loads_the_first_ones_program() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("kernels");
    let include = tmp.path().join("include");
    fs::create_dir(&include).unwrap();
    fs::write(
        include.join("scale.h"),
        "#ifndef SCALE\n#define SCALE 1\n#endif\n",
    )
    .unwrap();
    settle();
    let run = |scale: u32| {
        let vars = [
            ("CC", "clang".to_string()),
            ("CPATH", include.display().to_string()),
            ("CCC_OVERRIDE_OPTIONS", format!("+-DSCALE={scale}")),
        ];
        finish(spawn("scaled", &dir, &vars))
    };
    assert_eq!(run(3), "out=3 loaded=0");
    assert_eq!(
        run(4),
        "out=4 loaded=0",
        "answered with the program compiled under the other override"
    );
    assert_eq!(run(3), "out=3 loaded=1");
}

/// A program compiled with `-march=native` is code for the compiling machine's
/// processor: another process on a machine whose processor it expands to the same loads
/// it; one on another processor never does (it compiles its own). The other processor
/// is played by `$CC` set to a wrapper of `cc` that adds a line naming a processor
/// (`FAKE_CPU`) to what `-###` prints, the only way the backend asks what `native`
/// means; every compile is the real `cc`'s.
#[test]
fn a_program_compiled_for_the_host_processor_is_never_loaded_on_another() {
    let tmp = tempfile::tempdir().unwrap();
    let on = on_processor(tmp.path());
    assert_eq!(on("one"), "loaded=0");
    assert_eq!(on("one"), "loaded=1", "the same processor loads it");
    assert_eq!(on("two"), "loaded=0", "loaded on another processor");
}

/// Writes `path`: a wrapper of `cc` that adds `processor: $FAKE_CPU` to what `-###`
/// prints (the only way the backend asks what `native` means), `FAKE_CPU` set to `cpu`
/// first when given; every compile is the real `cc`'s.
fn cc_on_cpu(path: &Path, cpu: Option<&str>) {
    let set = cpu.map(|c| format!("FAKE_CPU={c}\n")).unwrap_or_default();
    fs::write(
        path,
        format!(
            "#!/bin/sh\n{set}for a in \"$@\"; do\n  if [ \"$a\" = \"-###\" ]; then\n    cc \"$@\"; s=$?\n    \
             echo \"processor: $FAKE_CPU\" >&2; exit $s\n  fi\ndone\nexec cc \"$@\"\n"
        ),
    )
    .unwrap();
    fs::set_permissions(path, fs::Permissions::from_mode(0o755)).unwrap();
}

/// A runner of the `native` worker on the processor named, under a [`cc_on_cpu`] wrapper
/// (the same for every processor, so every run has one backend identity), with its store
/// in `tmp`.
fn on_processor(tmp: &Path) -> impl Fn(&str) -> String {
    let dir = tmp.join("kernels");
    let wrapper = tmp.join("cc-on-cpu");
    cc_on_cpu(&wrapper, None);
    move |cpu: &str| {
        finish(spawn(
            "native",
            &dir,
            &[
                ("CC", wrapper.display().to_string()),
                ("FAKE_CPU", cpu.to_string()),
            ],
        ))
    }
}

/// Machines of two processors sharing one store directory each keep their own
/// `-march=native` program: processes on processors one, two, one, two in turn compile
/// on their processor's first run and load on its second (the entry's name holds what
/// `native` means there, `Backend::host_part`). With one entry per key, the
/// second machine's save replaced the first one's entry, and so on in turn: no run loaded.
#[test]
fn machines_of_two_processors_sharing_a_store_each_load_their_own_native_program() {
    let tmp = tempfile::tempdir().unwrap();
    let on = on_processor(tmp.path());
    assert_eq!(on("one"), "loaded=0");
    assert_eq!(on("two"), "loaded=0", "loaded on another processor");
    assert_eq!(
        on("one"),
        "loaded=1",
        "processor one's program is still there"
    );
    assert_eq!(
        on("two"),
        "loaded=1",
        "processor two's program is still there"
    );
}

#[test]
fn two_processes_racing_on_one_key_compile_it_once() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("kernels");
    KernelStore::new(&dir).create().unwrap();
    let at = SystemTime::now().duration_since(UNIX_EPOCH).unwrap() + Duration::from_millis(400);
    let children: Vec<Child> = (0..2)
        .map(|_| {
            let mut vars = resolve_vars(5, 2, 7, 0);
            vars.push(("PERSIST_START_AT", at.as_millis().to_string()));
            spawn("resolve", &dir, &vars)
        })
        .collect();
    let results: Vec<String> = children.into_iter().map(finish).collect();
    let compiles: u64 = results
        .iter()
        .map(|r| field(r, "compiles").parse::<u64>().unwrap())
        .sum();
    assert_eq!(compiles, 1, "{results:?}");
}

#[test]
fn the_byte_limit_holds_across_processes() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("kernels");
    // Measure one program's blob, then allow about two and a half of them.
    let one = finish(spawn("resolve", &dir, &resolve_vars(40, 1, 1, 0)));
    assert_eq!(field(&one, "compiles"), "1");
    let size = KernelStore::new(&dir).stats().unwrap().bytes;
    let max = size * 5 / 2;
    let children: Vec<Child> = (0..3u64)
        .map(|p| {
            let mut vars = resolve_vars(50 + p, 1, 1, 0);
            vars.push(("PERSIST_MAX", max.to_string()));
            spawn("resolve", &dir, &vars)
        })
        .chain((0..3u64).map(|p| {
            let mut vars = resolve_vars(60 + p, 1, 1, 0);
            vars.push(("PERSIST_MAX", max.to_string()));
            spawn("resolve", &dir, &vars)
        }))
        .collect();
    for c in children {
        finish(c);
    }
    let stats = KernelStore::new(&dir).stats().unwrap();
    assert!(stats.bytes <= max, "{stats:?} over {max}");
    assert!(stats.counters.evictions >= 4, "{stats:?}");
}

#[test]
fn sigkill_during_saves_never_leaves_a_dangling_entry_or_a_blob_that_loads_wrong() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("kernels");
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    for round in 0..3u64 {
        let mut savers: Vec<Child> = (0..2u64)
            .map(|i| {
                let vars = [("PERSIST_ID", (round * 2 + i + 1).to_string())];
                spawn("saver", &dir, &vars)
            })
            .collect();
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        std::thread::sleep(Duration::from_millis(400 + seed % 600));
        for s in &mut savers {
            s.kill().unwrap();
            s.wait().unwrap();
        }
    }
    // Every entry names a blob that is there.
    let mut entries = 0;
    for item in fs::read_dir(&dir).unwrap() {
        let name = item.unwrap().file_name().to_string_lossy().into_owned();
        if name.starts_with("k-") {
            let text = fs::read_to_string(dir.join(&name)).unwrap();
            let blob = text.lines().find_map(|l| l.strip_prefix("blob ")).unwrap();
            assert!(
                dir.join(format!("b-{blob}")).is_file(),
                "{name} points nowhere"
            );
            entries += 1;
        }
    }
    assert!(entries > 0, "no saver saved anything");
    // Every program the store answers loads and computes its own kernel.
    let b = backend();
    let store = KernelStore::new(&dir);
    let mut loaded = 0;
    for id in 1..=6u64 {
        for seq in 0..200u64 {
            let k = kernel(&b, id, seq, 0);
            match store.probe(b.identity(), &k.key) {
                Ok((saved, symbol)) => {
                    let program = Arc::new(
                        Backend::load(&b, &saved)
                            .expect("cc-backend loads")
                            .unwrap()
                            .program,
                    );
                    check(&Resolved::new(program, symbol), id, seq);
                    loaded += 1;
                }
                Err(MissReason::NoEntry) => {}
                Err(other) => panic!("({id}, {seq}): {other:?}"),
            }
        }
    }
    assert!(loaded > 0);
    assert_eq!(store.stats().unwrap().counters.removed_bad, 0);
}

/// The load still refuses a `-march=native` program on another processor, whatever name
/// led to it (`CcError::OtherHost`, and the program is kept for the machines it was
/// compiled for): the entry's name keeps processors apart, the load check stays. The
/// host parts of the two processors differ; an option list without `native` has none.
#[test]
fn a_native_program_is_refused_by_a_load_on_another_processor() {
    let tmp = tempfile::tempdir().unwrap();
    let on = |cpu: &str| {
        let wrapper = tmp.path().join(format!("cc-on-{cpu}"));
        cc_on_cpu(&wrapper, Some(cpu));
        CcBackend::with_compiler(&wrapper.display().to_string()).unwrap()
    };
    let (one, two) = (on("one"), on("two"));
    let native = vec!["-march=native".to_string()];
    let host = |b: &CcBackend, options: &[String]| b.host_part(options).unwrap();
    assert!(host(&one, &native).is_some());
    assert_ne!(host(&one, &native), host(&two, &native));
    assert_eq!(host(&one, &["-O3".to_string()]), None);
    let source = Source::new(
        elementwise_kernel("k", "a[i] * 2.0f"),
        Signature::out_a_b_n(),
    );
    let program = one.compile_program(&[("k", &source)], &native).unwrap();
    let saved = Backend::save(&one, &program)
        .expect("cc-backend saves")
        .unwrap();
    let refused = two
        .load(&saved)
        .expect("cc-backend loads")
        .expect_err("loaded on another processor");
    assert!(
        matches!(refused, cc_backend::CcError::OtherHost { .. }),
        "{refused}"
    );
    assert!(two.keeps_saved(&refused));
    assert!(
        Backend::load(&one, &saved)
            .expect("cc-backend loads")
            .is_ok()
    );
}

/// What `-march=native` means does not depend on the directory a backend compiles in:
/// clang's `-###` prints its working directory (`-fdebug-compilation-dir=`), so machines of
/// one processor whose work directories differ (another `TMPDIR`, `with_work_dir`) had
/// different host parts (and each refused the other's program as compiled for another
/// processor). The expansion is asked for in `/`.
#[test]
fn the_host_part_does_not_depend_on_the_work_directory() {
    let native = vec!["-march=native".to_string()];
    for cc in ["cc", "clang"] {
        let host = |dir: &Path| {
            CcBackend::with_compiler(cc)
                .unwrap()
                .with_work_dir(dir)
                .host_part(&native)
                .unwrap()
        };
        let (one, two) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        assert_eq!(host(one.path()), host(two.path()), "{cc}");
    }
}

/// A compiler that cannot say what `-march=native` means (`-###` fails) still compiles the
/// kernel: the resolve succeeds with the right answer, the key is not looked up
/// (`HostUnknown`) nor saved, and nothing is written under a name.
#[test]
fn a_host_processor_the_compiler_cannot_describe_keeps_the_kernel_out_of_the_store() {
    let tmp = tempfile::tempdir().unwrap();
    let wrapper = tmp.path().join("cc-without-###");
    fs::write(
        &wrapper,
        "#!/bin/sh\nfor a in \"$@\"; do\n  if [ \"$a\" = \"-###\" ]; then\n    \
         echo 'no -### here' >&2; exit 1\n  fi\ndone\nexec cc \"$@\"\n",
    )
    .unwrap();
    fs::set_permissions(&wrapper, fs::Permissions::from_mode(0o755)).unwrap();
    let b = CcBackend::with_compiler(&wrapper.display().to_string()).unwrap();
    let store = KernelStore::new(tmp.path().join("kernels"));
    let name = "k2_0__seg0";
    let kernel = Source::new(
        elementwise_kernel(name, "a[i] * 2.0f + b[i] * 0.0f"),
        Signature::out_a_b_n(),
    )
    .batch_kernel(name, &names(), vec!["-march=native".into()], b.identity());
    let ((answers, census), events) = recorded(
        Resolver::new(&KernelCache::new(1 << 20), &b)
            .store(Some(&store))
            .split(b.split())
            .resolve_strict(&[kernel]),
    );
    check(&answers.unwrap()[0], 2, 0);
    assert_eq!(census.kernels_compiled, 1);
    assert!(
        events.iter().any(|e| matches!(&e.outcome,
            Outcome::Miss(MissReason::HostUnknown(m)) if m.contains("no -### here"))),
        "{events:?}"
    );
    assert!(
        events.iter().any(|e| matches!(&e.outcome,
            Outcome::NotSaved(NotSaved::Backend(m)) if m.contains("no -### here"))),
        "{events:?}"
    );
    assert!(!store.dir().exists(), "nothing looked up, locked or saved");
}

/// A file the assembler pulls in with `.incbin` is missing from the compiler's dependency
/// list: the program is used but never saved (the result says why), so no later resolve
/// loads a program built from the file's old bytes (issue 26, class 4).
#[test]
fn a_program_reading_a_file_the_dependency_list_misses_is_never_saved() {
    let b = backend();
    let tmp = tempfile::tempdir().unwrap();
    let store = KernelStore::new(tmp.path().join("kernels"));
    let blob = tmp.path().join("blob.bin");
    let kernel = || {
        let text = format!(
            "__asm__(\".pushsection .rodata\\n.globl kc_blob\\n.hidden kc_blob\\nkc_blob:\\n.incbin \\\"{}\\\"\\n.popsection\\n\");\n\
             extern const unsigned char kc_blob[];\n{}",
            blob.display(),
            elementwise_kernel("k", "a[i] * kc_blob[0]")
        );
        Source::new(text, Signature::out_a_b_n()).batch_kernel("k", &names(), vec![], b.identity())
    };
    for v in [3u8, 5] {
        fs::write(&blob, [v]).unwrap();
        settle();
        let (out, census, events) = resolve_scaled(&b, &store, kernel());
        assert_eq!(
            (out, census.kernels_loaded, census.kernels_compiled),
            (f32::from(v), 0, 1),
            "answered with a program built from the old file"
        );
        assert!(
            events.iter().any(|e| matches!(&e.outcome,
                Outcome::NotSaved(NotSaved::Backend(m)) if m.contains(".incbin"))),
            "{events:?}"
        );
    }
}
