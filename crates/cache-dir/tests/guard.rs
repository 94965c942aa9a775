//! The promises of a lock-free hold ([`CacheDir::with_shared`] on a directory this process
//! cannot write and that has no lock file), on real directories.
//!
//! The lock-free cases run in a child process (this test binary again) that cannot write the
//! directory: as root (where permission bits do not bind) the child runs as user `nobody`
//! (uid 65534); as another user the directory is simply made read-only.

use std::fs;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use cache_dir::{CacheDir, Error, LOCK_FILE, RegimeStamp, STAMP_FILE, read_stamp};

fn is_entry(name: &str) -> bool {
    name.ends_with(".entry") || name.ends_with(".keys")
}

const CHILD_ROLE: &str = "KCACHE_CACHE_DIR_GUARD_CHILD";
const CHILD_DIR: &str = "KCACHE_CACHE_DIR_GUARD_DIR";
const NOBODY: u32 = 65534;
/// What the stamp child prints once it is inside its lock-free read.
const INSIDE: &str = "GUARD-CHILD-INSIDE";

/// The child body, run by [`run_child`] in a process that cannot write the directory named by
/// the environment (a directory of regime 1 without a lock file, so its hold is lock-free).
///
/// - `stamp`: reads `k.entry` lock-free, prints [`INSIDE`], waits for a line on standard input
///   (the parent moves the directory to regime 2 meanwhile), and checks the read is discarded
///   with [`Error::StampChanged`].
#[test]
fn child() {
    let (Ok(role), Ok(dir)) = (std::env::var(CHILD_ROLE), std::env::var(CHILD_DIR)) else {
        return;
    };
    let dir = PathBuf::from(dir);
    assert!(
        fs::File::create(dir.join("probe-write")).is_err(),
        "the child can write the directory: the test shows nothing"
    );
    let cache = CacheDir::new(&dir, 1, is_entry);
    match role.as_str() {
        "stamp" => {
            let got = cache.with_shared(false, |g| {
                assert!(g.is_lock_free(), "the hold has a file lock");
                let read = g.read("k.entry", 64).expect("read the entry");
                let mut out = io::stdout();
                writeln!(out, "{INSIDE}").expect("stdout");
                out.flush().expect("flush");
                let mut line = String::new();
                io::stdin().read_line(&mut line).expect("stdin");
                read
            });
            assert!(matches!(got, Err(Error::StampChanged)), "{got:?}");
        }
        other => panic!("unknown role {other}"),
    }
}

/// Whether this process runs as root.
fn is_root() -> bool {
    cache_dir::current_uid() == 0
}

/// A directory of regime 1 holding `k.entry`, without a lock file, readable by everyone and
/// writable by nobody but root: a reader that is not root holds it lock-free.
fn lock_free_dir() -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("cache");
    CacheDir::new(&dir, 1, is_entry)
        .with_shared(true, |g| g.publish("k.entry", b"old"))
        .expect("open")
        .expect("publish");
    fs::remove_file(dir.join(LOCK_FILE)).expect("rm the lock file");
    fs::set_permissions(tmp.path(), fs::Permissions::from_mode(0o755)).expect("chmod");
    for name in ["k.entry", STAMP_FILE] {
        fs::set_permissions(dir.join(name), fs::Permissions::from_mode(0o644)).expect("chmod");
    }
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o555)).expect("chmod");
    (tmp, dir)
}

/// Starts [`child`] in `role` on `dir` as a process that cannot write it.
fn run_child(role: &str, dir: &Path) -> std::process::Child {
    let mut cmd = Command::new(std::env::current_exe().expect("exe"));
    cmd.args(["--exact", "child", "--nocapture", "--test-threads=1"])
        .env(CHILD_ROLE, role)
        .env(CHILD_DIR, dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if is_root() {
        cmd.uid(NOBODY).gid(NOBODY);
    }
    cmd.spawn().expect("spawn the child")
}

fn check_child(child: std::process::Child, stdout_before: &str) {
    let out = child.wait_with_output().expect("wait for the child");
    let stdout = format!("{stdout_before}{}", String::from_utf8_lossy(&out.stdout));
    assert!(
        out.status.success(),
        "child failed: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("1 passed"),
        "the child ran no test: {stdout}"
    );
}

/// A lock-free read (no lock file to lock in a directory this process cannot write) whose
/// stamp a newer build changed while it read is discarded: the stamp is read again after it.
#[test]
fn a_lock_free_read_across_a_regime_change_is_discarded() {
    let (_tmp, dir) = lock_free_dir();
    let mut child = run_child("stamp", &dir);
    let mut stdout = BufReader::new(child.stdout.take().expect("stdout"));
    let mut seen = String::new();
    loop {
        let mut line = String::new();
        let n = stdout.read_line(&mut line).expect("read the child");
        seen.push_str(&line);
        if line.contains(INSIDE) {
            break;
        }
        assert!(n > 0, "the child ended before its read: {seen}");
    }
    // The child is inside its lock-free read: a build of regime 2 takes the directory over.
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o755)).expect("chmod");
    CacheDir::new(&dir, 2, is_entry)
        .with_shared(false, |_| ())
        .expect("the newer regime opens");
    assert_eq!(read_stamp(&dir).expect("stamp"), RegimeStamp::Version(2));
    let mut stdin = child.stdin.take().expect("stdin");
    writeln!(stdin, "go").expect("tell the child");
    drop(stdin);
    let mut rest = String::new();
    stdout.read_to_string(&mut rest).expect("read the child");
    seen.push_str(&rest);
    check_child(child, &seen);
}
