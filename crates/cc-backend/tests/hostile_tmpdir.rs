//! A work directory (`TMPDIR`, `with_work_dir`) or a compiler `TMPDIR` another user can
//! write: her code never runs in our process. An attacker child process, as another user (`nobody` when this
//! test runs as root), loops over the directory swapping every directory of ours for one of
//! her own and renaming her own shared object (whose constructor creates a marker file
//! only our user can create) over every `program.so` and `*.so` it finds, while the victim
//! compiles and loads, bounded in runs. No marker may appear: a work directory she can
//! write without the sticky bit is refused, a sticky one is worked in through a private
//! subdirectory she cannot touch, and a saved program is loaded from a sealed memory file
//! whatever the directory holds.
//!
//! The compiler's own temporaries (gcc's assembly between `cc1` and `as`) are the same
//! attack one step further: with a private work directory but her `TMPDIR` (a directory
//! without the sticky bit, or a link she flips), her assembly must never be what is linked
//! (the `compiler_temporaries_*` tests, 200 compiles each).
//!
//! The attacker is this test binary re-run with `HOSTILE_DIR` (or `HOSTILE_TMP_BASE`) set.

#![allow(clippy::unwrap_used)]

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cc_backend::{Arg, CcBackend, CcError, CcProgram, Signature, Source};
use kernel_cache::Backend;
use test_support::kernels::elementwise_kernel;

/// The uid and gid of user `nobody`, the attacker when this test runs as root.
const NOBODY: u32 = 65534;

fn chmod(path: &Path, mode: u32) {
    fs::set_permissions(path, fs::Permissions::from_mode(mode)).unwrap();
}

fn is_root() -> bool {
    let f = tempfile::NamedTempFile::new().unwrap();
    f.as_file().metadata().unwrap().uid() == 0
}

/// The attacker's body; a no-op unless this process was spawned as the attacker.
///
/// Until `<dir>/.stop` exists (or two minutes pass): every directory of `dir` that is not
/// hers is exchanged (`RENAME_EXCHANGE`) with one of her own (mode 0777) holding her object
/// where a compile's link of kernel `k` reads `k/kernel.o`; in each of her own, a
/// fresh hard link of her shared object is renamed over `program.so` and over every other
/// `*.so`. Prints how many swaps and plants succeeded.
#[test]
fn attacker() {
    let Ok(dir) = std::env::var("HOSTILE_DIR") else {
        return;
    };
    let dir = PathBuf::from(dir);
    let own = dir.join(".evil.so");
    fs::copy(std::env::var("HOSTILE_EVIL").unwrap(), &own).unwrap();
    let own_object = dir.join(".evil.o");
    fs::copy(std::env::var("HOSTILE_EVIL_OBJECT").unwrap(), &own_object).unwrap();
    let me = fs::metadata(&own).unwrap().uid();
    fs::write(dir.join(".ready"), b"").unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    let (mut n, mut swaps, mut plants) = (0u64, 0u64, 0u64);
    while !dir.join(".stop").exists() && Instant::now() < deadline {
        let Ok(items) = fs::read_dir(&dir) else {
            continue;
        };
        for item in items.flatten() {
            if item.file_name().to_string_lossy().starts_with('.') {
                continue;
            }
            let path = item.path();
            let Ok(meta) = fs::symlink_metadata(&path) else {
                continue;
            };
            if !meta.is_dir() {
                continue;
            }
            n += 1;
            if meta.uid() != me {
                // Her directory, with her object where the link of kernel `k` looks for
                // its unit's object, exchanged atomically with ours (no moment without a
                // directory at the path).
                let hers = dir.join(format!(".h-{n}"));
                let unit = hers.join("k");
                if fs::create_dir(&hers).is_err() || fs::create_dir(&unit).is_err() {
                    continue;
                }
                let _ = fs::set_permissions(&hers, fs::Permissions::from_mode(0o777));
                let _ = fs::set_permissions(&unit, fs::Permissions::from_mode(0o777));
                let _ = fs::hard_link(&own_object, unit.join("kernel.o"));
                let cwd = rustix::fs::CWD;
                let flags = rustix::fs::RenameFlags::EXCHANGE;
                if rustix::fs::renameat_with(cwd, &hers, cwd, &path, flags).is_ok() {
                    swaps += 1;
                }
                continue;
            }
            let mut targets = vec![path.join("program.so")];
            if let Ok(files) = fs::read_dir(&path) {
                for f in files.flatten() {
                    let name = f.file_name().to_string_lossy().into_owned();
                    if name.ends_with(".so") && !name.starts_with('.') {
                        targets.push(f.path());
                    }
                }
            }
            for target in targets {
                n += 1;
                let link = path.join(format!(".e-{n}"));
                if fs::hard_link(&own, &link).is_ok() {
                    if fs::rename(&link, &target).is_ok() {
                        plants += 1;
                    } else {
                        let _ = fs::remove_file(&link);
                    }
                }
            }
        }
    }
    println!("RESULT swaps={swaps} plants={plants}");
}

/// A hostile work directory with its attacker running, a marker path only this user can
/// create, and the attacker's shared object.
struct Hostile {
    _tmp: tempfile::TempDir,
    dir: PathBuf,
    marker: PathBuf,
    attacker: Option<Child>,
}

impl Hostile {
    /// `<tmp>/work` of mode `mode` (owned by this user), the attacker started in it.
    fn start(mode: u32) -> Hostile {
        let tmp = tempfile::tempdir().unwrap();
        chmod(tmp.path(), 0o755);
        let dir = tmp.path().join("work");
        fs::create_dir(&dir).unwrap();
        chmod(&dir, mode);
        let marks = tmp.path().join("marks");
        fs::create_dir(&marks).unwrap();
        chmod(&marks, 0o755);
        let marker = marks.join("pwned");
        // Her shared object: its constructor creates the marker (which only this user can),
        // and it defines nothing a kernel needs.
        let evil_c = tmp.path().join("evil.c");
        fs::write(
            &evil_c,
            format!(
                "#include <fcntl.h>\n#include <unistd.h>\n\
                 __attribute__((constructor)) static void pwn(void) {{\n\
                   int fd = open(\"{}\", O_CREAT | O_WRONLY, 0644);\n\
                   if (fd >= 0) close(fd);\n}}\n",
                marker.display()
            ),
        )
        .unwrap();
        let evil = tmp.path().join("evil.so");
        let evil_object = tmp.path().join("evil.o");
        for (out, how) in [(&evil, "-shared"), (&evil_object, "-c")] {
            let status = Command::new("cc")
                .args([how, "-fPIC", "-o"])
                .arg(out)
                .arg(&evil_c)
                .status()
                .unwrap();
            assert!(status.success());
            chmod(out, 0o644);
        }
        let mut cmd = Command::new(std::env::current_exe().unwrap());
        cmd.args(["--exact", "attacker", "--nocapture", "--test-threads=1"])
            .env("HOSTILE_DIR", &dir)
            .env("HOSTILE_EVIL", &evil)
            .env("HOSTILE_EVIL_OBJECT", &evil_object)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        if is_root() {
            use std::os::unix::process::CommandExt;
            cmd.uid(NOBODY).gid(NOBODY);
        }
        let attacker = Some(cmd.spawn().unwrap());
        let started = Instant::now();
        while !dir.join(".ready").exists() {
            assert!(started.elapsed() < Duration::from_secs(60), "no attacker");
            std::thread::sleep(Duration::from_millis(10));
        }
        Hostile {
            _tmp: tmp,
            dir,
            marker,
            attacker,
        }
    }

    /// Stops the attacker; what she reports.
    fn stop(&mut self) -> String {
        // The stop file must be one she can see: in the hostile directory itself.
        fs::write(self.dir.join(".stop"), b"").unwrap();
        let out = self.attacker.take().unwrap().wait_with_output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(out.status.success(), "attacker failed: {stdout}");
        stdout
            .lines()
            .find_map(|l| l.split_once("RESULT ").map(|(_, r)| r.to_string()))
            .unwrap_or_else(|| panic!("no RESULT in {stdout}"))
    }

    fn pwned(&self) -> bool {
        self.marker.exists()
    }
}

impl Drop for Hostile {
    fn drop(&mut self) {
        if let Some(mut c) = self.attacker.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Kernel `out[i] = a[i] * j + b[i]`.
fn source(j: u64) -> Source {
    Source::new(
        elementwise_kernel("k", &format!("a[i] * {j}.0f + b[i]")),
        Signature::out_a_b_n(),
    )
}

fn run(program: &Arc<CcProgram>) -> f32 {
    let mut out = [0.0f32];
    program
        .kernel("k")
        .unwrap()
        .call(&mut [
            Arg::F32Mut(&mut out),
            Arg::F32(&[2.0]),
            Arg::F32(&[3.0]),
            Arg::I32Scalar(1),
        ])
        .unwrap();
    out[0]
}

/// Runs, bounded, of each race.
const RUNS: u64 = 200;

/// A world-writable work directory without the sticky bit: every compile is refused
/// (`CcError::WorkDir`, naming the directory and the missing sticky bit) before anything
/// is written there, and her code never runs.
#[test]
fn a_work_directory_others_can_write_is_refused_and_no_foreign_code_runs() {
    let mut hostile = Hostile::start(0o777);
    let (mut refused, mut failed) = (0, Vec::new());
    for j in 0..RUNS {
        let backend = CcBackend::new().unwrap().with_work_dir(&hostile.dir);
        match backend.compile_program(&[("k", &source(j))], &[]) {
            Err(CcError::WorkDir { path, why }) => {
                assert_eq!(path, fs::canonicalize(&hostile.dir).unwrap());
                assert!(why.contains("sticky"), "{why}");
                refused += 1;
            }
            // Only without the check: her swaps make our compiles fail.
            Err(e) => failed.push(e.to_string().lines().next().unwrap_or("").to_string()),
            Ok(program) => assert_eq!(run(&Arc::new(program)), (2 * j + 3) as f32),
        }
        assert!(!hostile.pwned(), "her constructor ran in run {j}");
    }
    let report = hostile.stop();
    assert!(!hostile.pwned(), "her constructor ran ({report})");
    failed.truncate(5);
    assert_eq!(refused, RUNS, "{report}: {failed:?}");
}

/// A world-writable sticky work directory (a shared `/tmp`): compiles happen in a private
/// subdirectory of ours she can neither enter nor rename; every program computes its own
/// kernel and her code never runs.
#[test]
fn a_shared_sticky_work_directory_is_used_through_a_private_subdirectory() {
    if !is_root() {
        // As the same user she could rename our subdirectory: the check needs two users.
        eprintln!("skipped: needs root to run the attacker as another user");
        return;
    }
    let mut hostile = Hostile::start(0o1777);
    let runs = RUNS / 2;
    for j in 0..runs {
        let backend = CcBackend::new().unwrap().with_work_dir(&hostile.dir);
        let program = Arc::new(backend.compile_program(&[("k", &source(j))], &[]).unwrap());
        assert_eq!(run(&program), (2 * j + 3) as f32, "run {j}");
        // What we made in her directory: one private subdirectory, ours, mode 0700.
        let ours: Vec<_> = fs::read_dir(&hostile.dir)
            .unwrap()
            .flatten()
            .filter(|e| e.metadata().unwrap().uid() == 0)
            .collect();
        assert_eq!(ours.len(), 1, "run {j}");
        let meta = fs::symlink_metadata(ours[0].path()).unwrap();
        assert!(meta.is_dir() && meta.mode() & 0o7777 == 0o700, "run {j}");
        assert!(
            ours[0]
                .file_name()
                .to_string_lossy()
                .starts_with("kcache-cc-work-")
        );
        assert!(!hostile.pwned(), "her constructor ran in run {j}");
    }
    let report = hostile.stop();
    assert!(!hostile.pwned(), "her constructor ran ({report})");
    assert!(report.contains("swaps=0"), "{report}");
}

/// The store load path with a hostile `TMPDIR`: a saved program is loaded from a sealed
/// memory file, so nothing is written to the work directory she can write, and every
/// load runs the saved code.
#[test]
fn a_saved_program_loads_its_own_bytes_under_a_hostile_work_directory() {
    let mut hostile = Hostile::start(0o777);
    let private = tempfile::tempdir().unwrap();
    let compiler = CcBackend::new().unwrap().with_work_dir(private.path());
    let program = compiler.compile_program(&[("k", &source(7))], &[]).unwrap();
    let saved = Backend::save(&compiler, &program)
        .expect("cc-backend saves")
        .unwrap();
    let mut failed = Vec::new();
    for j in 0..RUNS {
        let backend = CcBackend::new().unwrap().with_work_dir(&hostile.dir);
        match Backend::load(&backend, &saved).expect("cc-backend loads") {
            Ok(loaded) => assert_eq!(run(&Arc::new(loaded.program)), 17.0, "run {j}"),
            // Only when the load goes through her directory.
            Err(e) => failed.push(e.to_string()),
        }
        assert!(!hostile.pwned(), "her constructor ran in run {j}");
    }
    let report = hostile.stop();
    assert!(!hostile.pwned(), "her constructor ran ({report})");
    failed.truncate(5);
    assert!(failed.is_empty(), "{report}: {failed:?}");
    // Nothing of ours was ever in her directory (as root: she is another user).
    if is_root() {
        assert!(report.contains("swaps=0"), "{report}");
        for item in fs::read_dir(&hostile.dir).unwrap().flatten() {
            if item.file_name() != ".stop" {
                assert_ne!(item.metadata().unwrap().uid(), 0, "{:?}", item.path());
            }
        }
    }
}

// ---- The compiler's own temporaries (issue 35, point 8). ----
//
// The work directory is private, but the compiler's `TMPDIR` is hers: gcc writes the
// assembly between `cc1` and `as` there (`ccXXXXXX.s`, unless `-pipe`). The victim is
// this test binary re-run with `TMPDIR` set to her directory (or to a link she flips
// between two of hers) and a private work directory; the attacker, another user (`nobody`
// when this test runs as root), renames her own copy over every temporary she sees: an
// assembly file defining kernel `k`, its entry and a constructor creating the marker. No
// marker may appear in 200 compiles, every program computes its own kernel, and she sees
// no temporary at all (the toolchain writes none where she can reach it).

/// The temporaries attacker's body; a no-op unless this process was spawned as her.
///
/// Watches `<HOSTILE_TMP_BASE>/tmp` (`plain`), or (`flip`) makes two directories of her
/// own there and a link `tmp` she flips between them at every pass, watching both. Every
/// file named like a temporary (`*.s`, `*.o`, `*.c`, `*.res`, `*.ld*`) that is not her
/// payload (another owner, another size) gets a fresh copy of her payload renamed over
/// it: her constructor as an object for `*.o` and as C for `*.c` (collect2 compiles and
/// links `ccXXXXXX.cdtor.c` of its own), her assembly of kernel `k` for the rest. Until `.stop` exists in the base
/// (or five minutes pass); prints how many files she saw and replaced.
#[test]
fn temporaries_attacker() {
    let Ok(base) = std::env::var("HOSTILE_TMP_BASE") else {
        return;
    };
    let base = PathBuf::from(base);
    let flip = std::env::var("HOSTILE_TMP_MODE").unwrap() == "flip";
    let assembly = fs::read(std::env::var("HOSTILE_EVIL_S").unwrap()).unwrap();
    let object = fs::read(std::env::var("HOSTILE_EVIL_CTOR_OBJECT").unwrap()).unwrap();
    let source = fs::read(std::env::var("HOSTILE_EVIL_CTOR_C").unwrap()).unwrap();
    let me = rustix::process::geteuid().as_raw();
    let watched: Vec<PathBuf> = if flip {
        let dirs = [base.join("hers-1"), base.join("hers-2")];
        for d in &dirs {
            fs::create_dir(d).unwrap();
            fs::set_permissions(d, fs::Permissions::from_mode(0o777)).unwrap();
        }
        std::os::unix::fs::symlink(&dirs[0], base.join("tmp")).unwrap();
        dirs.to_vec()
    } else {
        vec![base.join("tmp")]
    };
    fs::write(base.join(".ready-tmp"), b"").unwrap();
    let deadline = Instant::now() + Duration::from_secs(300);
    let (mut n, mut seen, mut plants) = (0u64, 0u64, 0u64);
    let mut names = std::collections::HashSet::new();
    while !base.join(".stop").exists() && Instant::now() < deadline {
        if flip {
            n += 1;
            let link = base.join(format!(".l-{n}"));
            if std::os::unix::fs::symlink(&watched[(n % 2) as usize], &link).is_ok()
                && fs::rename(&link, base.join("tmp")).is_err()
            {
                let _ = fs::remove_file(&link);
            }
        }
        for dir in &watched {
            let Ok(items) = fs::read_dir(dir) else {
                continue;
            };
            for item in items.flatten() {
                let name = item.file_name().to_string_lossy().into_owned();
                if name.starts_with('.') {
                    continue;
                }
                let payload = if name.ends_with(".o") {
                    &object
                } else if name.ends_with(".c") {
                    &source
                } else if name.ends_with(".s") || name.ends_with(".res") || name.contains(".ld") {
                    &assembly
                } else {
                    continue;
                };
                if names.insert(name.clone()) {
                    seen += 1;
                }
                let path = item.path();
                let Ok(meta) = fs::symlink_metadata(&path) else {
                    continue;
                };
                if meta.uid() == me && meta.len() == payload.len() as u64 {
                    continue;
                }
                n += 1;
                let fresh = dir.join(format!(".p-{n}"));
                if fs::write(&fresh, payload).is_ok() {
                    let _ = fs::set_permissions(&fresh, fs::Permissions::from_mode(0o666));
                    if fs::rename(&fresh, &path).is_ok() {
                        plants += 1;
                    } else {
                        let _ = fs::remove_file(&fresh);
                    }
                }
            }
        }
    }
    println!("RESULT seen={seen} plants={plants}");
}

/// The victim's body; a no-op unless this process was spawned as the victim (with
/// `TMPDIR` set by its parent). Compiles `HOSTILE_VICTIM_RUNS` programs of kernel `k`
/// (under the options `HOSTILE_VICTIM_OPTIONS`, split on white space) in
/// the private work directory `HOSTILE_VICTIM_WORK` and runs each; prints how many
/// computed their own kernel, computed something else, or failed (and the first failure).
#[test]
fn temporaries_victim() {
    let Ok(work) = std::env::var("HOSTILE_VICTIM_WORK") else {
        return;
    };
    let runs: u64 = std::env::var("HOSTILE_VICTIM_RUNS")
        .unwrap()
        .parse()
        .unwrap();
    let options: Vec<String> = std::env::var("HOSTILE_VICTIM_OPTIONS")
        .unwrap_or_default()
        .split_whitespace()
        .map(str::to_string)
        .collect();
    let (mut ok, mut wrong, mut failed) = (0u64, 0u64, 0u64);
    let mut first = String::new();
    for j in 0..runs {
        let backend = CcBackend::new().unwrap().with_work_dir(&work);
        match backend.compile_program(&[("k", &source(j))], &options) {
            Ok(program) => {
                if run(&Arc::new(program)) == (2 * j + 3) as f32 {
                    ok += 1;
                } else {
                    wrong += 1;
                }
            }
            Err(e) => {
                failed += 1;
                if first.is_empty() {
                    first = e.to_string().replace('\n', " | ");
                }
            }
        }
    }
    println!("VICTIM ok={ok} wrong={wrong} failed={failed} first_failure={first}");
}

/// Her payload, built by us from C: kernel `k` (`a[i] + b[i]`) with its entry and a
/// constructor creating `marker`, as assembly (for the assembly between `cc1` and `as`);
/// the constructor alone as C and as an object (for what the link compiles and links of
/// its own, collect2's `*.cdtor.c` and `*.cdtor.o`). Returns (assembly, C, object).
fn temporaries_payload(dir: &Path, marker: &Path) -> (PathBuf, PathBuf, PathBuf) {
    let ctor = format!(
        "#include <fcntl.h>\n#include <unistd.h>\n\
         __attribute__((constructor)) static void pwn(void) {{\n\
           int fd = open(\"{}\", O_CREAT | O_WRONLY, 0644);\n\
           if (fd >= 0) close(fd);\n}}\n",
        marker.display()
    );
    let kernel = "void k(float *out, const float *a, const float *b, int n) {\n\
           for (int i = 0; i < n; ++i) out[i] = a[i] + b[i];\n}\n\
         void k__kcache_entry(void *const *args) {\n\
           k((float *)args[0], (const float *)args[1], (const float *)args[2], *(const int *)args[3]);\n}\n";
    let (kc, cc) = (dir.join("evil-k.c"), dir.join("evil-ctor.c"));
    fs::write(&kc, format!("{ctor}{kernel}")).unwrap();
    fs::write(&cc, &ctor).unwrap();
    chmod(&cc, 0o644);
    let (s, o) = (dir.join("evil-k.s"), dir.join("evil-ctor.o"));
    for (out, how, c) in [(&s, "-S", &kc), (&o, "-c", &cc)] {
        let status = Command::new("cc")
            .args([how, "-O2", "-fPIC", "-o"])
            .arg(out)
            .arg(c)
            .status()
            .unwrap();
        assert!(status.success());
        chmod(out, 0o644);
    }
    (s, cc, o)
}

/// Runs the victim (`runs` compiles under `options`) against the temporaries attacker:
/// `flip` chooses her link (else a plain world-writable directory without the sticky bit)
/// as the victim's `TMPDIR`.
fn temporaries(flip: bool, runs: u64, options: &str) {
    let tmp = tempfile::tempdir().unwrap();
    chmod(tmp.path(), 0o755);
    let base = tmp.path().join("base");
    fs::create_dir(&base).unwrap();
    // Sticky when she makes her own link in it; else it holds the plain directory.
    chmod(&base, if flip { 0o1777 } else { 0o777 });
    if !flip {
        let plain = base.join("tmp");
        fs::create_dir(&plain).unwrap();
        chmod(&plain, 0o777);
    }
    let marks = tmp.path().join("marks");
    fs::create_dir(&marks).unwrap();
    chmod(&marks, 0o755);
    let marker = marks.join("pwned");
    let work = tmp.path().join("work");
    fs::create_dir(&work).unwrap();
    chmod(&work, 0o700);
    let (evil_s, evil_c, evil_o) = temporaries_payload(tmp.path(), &marker);
    // The attacker writes `.ready-tmp` in the base and stops at our `.stop` there.
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args([
        "--exact",
        "temporaries_attacker",
        "--nocapture",
        "--test-threads=1",
    ])
    .env("HOSTILE_TMP_BASE", &base)
    .env("HOSTILE_TMP_MODE", if flip { "flip" } else { "plain" })
    .env("HOSTILE_EVIL_S", &evil_s)
    .env("HOSTILE_EVIL_CTOR_C", &evil_c)
    .env("HOSTILE_EVIL_CTOR_OBJECT", &evil_o)
    .stdout(Stdio::piped())
    .stderr(Stdio::inherit());
    if is_root() {
        use std::os::unix::process::CommandExt;
        cmd.uid(NOBODY).gid(NOBODY);
    }
    let attacker = cmd.spawn().unwrap();
    let started = Instant::now();
    while !base.join(".ready-tmp").exists() {
        assert!(started.elapsed() < Duration::from_secs(60), "no attacker");
        std::thread::sleep(Duration::from_millis(10));
    }
    // The victim, with her directory (or link) as its `TMPDIR`, `TMP` and `TEMP`.
    let hers = base.join("tmp");
    let victim = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "temporaries_victim",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("HOSTILE_VICTIM_WORK", &work)
        .env("HOSTILE_VICTIM_RUNS", runs.to_string())
        .env("HOSTILE_VICTIM_OPTIONS", options)
        .env("TMPDIR", &hers)
        .env("TMP", &hers)
        .env("TEMP", &hers)
        .output()
        .unwrap();
    let _ = fs::write(base.join(".stop"), b"");
    let out = attacker.wait_with_output().unwrap();
    let report = String::from_utf8_lossy(&out.stdout).into_owned();
    let report = report
        .lines()
        .find_map(|l| l.split_once("RESULT ").map(|(_, r)| r.to_string()))
        .unwrap_or_else(|| panic!("no RESULT from the attacker: {report}"));
    let stdout = String::from_utf8_lossy(&victim.stdout).into_owned();
    assert!(
        victim.status.success(),
        "the victim failed: {stdout}{}",
        String::from_utf8_lossy(&victim.stderr)
    );
    let line = stdout
        .lines()
        .find_map(|l| l.split_once("VICTIM ").map(|(_, r)| r.to_string()))
        .unwrap_or_else(|| panic!("no VICTIM line: {stdout}"));
    println!("attacker: {report}; victim: {line}");
    assert!(
        !marker.exists(),
        "her constructor ran in the victim's process (attacker: {report}; victim: {line})"
    );
    assert!(
        line.starts_with(&format!("ok={runs} ")),
        "every program must compute its own kernel (attacker: {report}; victim: {line})"
    );
    // Stronger: nothing the toolchain writes is even where she can see it.
    assert!(
        report.starts_with("seen=0 "),
        "the compiler wrote temporaries into her TMPDIR (attacker: {report}; victim: {line})"
    );
}

/// `TMPDIR` is a world-writable directory without the sticky bit (the work directory is
/// private): her assembly never reaches our program.
#[test]
fn compiler_temporaries_in_a_tmpdir_others_can_write_never_reach_our_program() {
    temporaries(false, RUNS, "");
}

/// `TMPDIR` is a link she flips between two directories of hers.
#[test]
fn compiler_temporaries_under_a_flipped_tmpdir_link_never_reach_our_program() {
    temporaries(true, RUNS, "");
}

/// With `-pipe` gcc writes no assembly file, but its link still does: collect2's
/// `ccXXXXXX.res` and the `ccXXXXXX.cdtor.c` it compiles to `ccXXXXXX.cdtor.o` and links
/// into the program. Half the runs.
#[test]
fn compiler_temporaries_of_the_link_never_reach_our_program() {
    temporaries(false, RUNS / 2, "-pipe");
}
