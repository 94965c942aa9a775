//! The promises of a lock-free hold ([`CacheDir::with_shared`] on a directory this process
//! cannot write and that has no lock file) and of [`Guard::append`](cache_dir::Guard::append),
//! on real directories.
//!
//! The lock-free cases run in a child process (this test binary again) that cannot write the
//! directory: as root (where permission bits do not bind) the child runs as user `nobody`
//! (uid 65534); as another user the directory is simply made read-only.
//!
//! No test asserts a time: a hang is caught by running the operation on a thread and failing
//! when no answer arrives within a generous bound.

use std::fs;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::os::unix::fs::{FileTypeExt, PermissionsExt, symlink};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use cache_dir::{CacheDir, Error, Guard, LOCK_FILE, RegimeStamp, STAMP_FILE, read_stamp};
use test_support::no_hang;

fn is_entry(name: &str) -> bool {
    name.ends_with(".entry") || name.ends_with(".keys")
}

/// The kind of the I/O error `result` failed with.
fn io_kind<T: std::fmt::Debug>(result: Result<T, Error>) -> io::ErrorKind {
    match result {
        Err(Error::Io { source, .. }) => source.kind(),
        other => panic!("expected an I/O refusal, got {other:?}"),
    }
}

/// Runs `f` under a fresh directory's shared hold.
fn with_guard<R>(f: impl FnOnce(&Guard<'_>) -> R) -> (tempfile::TempDir, R) {
    let tmp = tempfile::tempdir().expect("tempdir");
    let out = CacheDir::new(tmp.path().join("cache"), "test-store", 1, is_entry)
        .with_shared(true, f)
        .expect("open");
    (tmp, out)
}

#[test]
fn publish_all_publishes_in_order_and_stops_at_the_first_refusal() {
    for private in [false, true] {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().join("cache");
        let cache = CacheDir::new(&dir, "test-store", 1, is_entry);
        let cache = if private {
            cache.with_private_files()
        } else {
            cache
        };
        let entries: Vec<(String, Vec<u8>)> = (0..5)
            .map(|i| (format!("e{i}.entry"), vec![b'a' + i as u8; 10 + i]))
            .collect();
        let all: Vec<(&str, &[u8])> = entries
            .iter()
            .map(|(n, b)| (n.as_str(), b.as_slice()))
            .collect();
        cache
            .with_shared(true, |g| g.publish_all(&all))
            .expect("open")
            .expect("publish");
        for (name, bytes) in &entries {
            assert_eq!(&fs::read(dir.join(name)).expect("read"), bytes, "{name}");
        }
        // A name the directory refuses, third of four: the two before it are published,
        // the one after it is not written, and the refusal is the error.
        let bad: Vec<(&str, &[u8])> = vec![
            ("f0.entry", b"x"),
            ("f1.entry", b"y"),
            ("../f2.entry", b"z"),
            ("f3.entry", b"w"),
        ];
        let out = cache
            .with_shared(true, |g| g.publish_all(&bad))
            .expect("open");
        assert!(matches!(out, Err(Error::InvalidName { .. })), "{out:?}");
        assert_eq!(fs::read(dir.join("f1.entry")).expect("f1"), b"y");
        assert!(!dir.join("f3.entry").exists());
        // No staging directory is left behind.
        let left: Vec<String> = fs::read_dir(&dir)
            .expect("list")
            .map(|e| e.expect("item").file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with(".atomicwrite"))
            .collect();
        assert!(left.is_empty(), "{left:?}");
        if private {
            for (name, _) in &entries {
                let mode = fs::metadata(dir.join(name))
                    .expect("meta")
                    .permissions()
                    .mode();
                assert_eq!(mode & 0o777, 0o600, "{name}");
            }
        }
    }
}

#[test]
fn append_writes_nothing_to_a_file_that_holds_its_cap() {
    let (_tmp, ()) = with_guard(|g| {
        let full = g.dir().join("full.keys");
        fs::write(&full, [b'x'; 16]).expect("write");
        assert_eq!(
            io_kind(g.append("full.keys", b"y\n", 16)),
            io::ErrorKind::FileTooLarge
        );
        assert_eq!(fs::read(&full).expect("read"), [b'x'; 16]);
        // Past the cap too.
        fs::write(&full, [b'x'; 17]).expect("write");
        assert_eq!(
            io_kind(g.append("full.keys", b"y\n", 16)),
            io::ErrorKind::FileTooLarge
        );
        assert_eq!(fs::read(&full).expect("read"), [b'x'; 17]);
        // One byte short of it, the record is appended whole; an absent file is created.
        fs::write(&full, [b'x'; 15]).expect("write");
        g.append("full.keys", b"y\n", 16).expect("below the cap");
        assert_eq!(fs::read(&full).expect("read"), b"xxxxxxxxxxxxxxxy\n");
        g.append("new.keys", b"y\n", 16).expect("absent");
        assert_eq!(fs::read(g.dir().join("new.keys")).expect("read"), b"y\n");
    });
}

#[test]
fn append_refuses_a_fifo_without_hanging_or_writing_into_it() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("cache");
    let cache = CacheDir::new(&dir, "test-store", 1, is_entry);
    cache.with_shared(true, |_| ()).expect("create");
    let fifo = dir.join("pipe.keys");
    rustix::fs::mkfifoat(
        rustix::fs::CWD,
        &fifo,
        rustix::fs::Mode::from_raw_mode(0o644),
    )
    .expect("mkfifo");
    // With a reader, opening for writing succeeds: the refusal is the file-type check.
    let mut reader = fs::File::from(
        rustix::fs::open(
            &fifo,
            rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::NONBLOCK,
            rustix::fs::Mode::empty(),
        )
        .expect("open the reader"),
    );
    let c = cache.clone();
    let with_reader = no_hang("append to a FIFO with a reader", move || {
        c.with_shared(false, |g| g.append("pipe.keys", b"y\n", 1 << 16))
            .expect("open")
    });
    assert_eq!(io_kind(with_reader), io::ErrorKind::InvalidInput);
    let mut got = Vec::new();
    reader.read_to_end(&mut got).expect("read the FIFO");
    assert!(got.is_empty(), "written into the FIFO: {got:?}");
    drop(reader);
    // Without one, a blocking open for writing would wait for a reader forever.
    let without_reader = no_hang("append to a FIFO without a reader", move || {
        cache
            .with_shared(false, |g| g.append("pipe.keys", b"y\n", 1 << 16))
            .expect("open")
    });
    assert!(without_reader.is_err(), "{without_reader:?}");
    let kept = fs::symlink_metadata(&fifo).expect("still there");
    assert!(kept.file_type().is_fifo());
}

#[test]
fn append_never_follows_a_symlink() {
    let (tmp, ()) = with_guard(|g| {
        let real = g.dir().join("real.keys");
        fs::write(&real, b"one\n").expect("write");
        symlink("real.keys", g.dir().join("link.keys")).expect("symlink");
        assert!(g.append("link.keys", b"two\n", 1 << 16).is_err());
        assert_eq!(fs::read(&real).expect("read"), b"one\n");
        // A dangling link is not followed to create its target (outside the directory here).
        let outside = g.dir().parent().expect("parent").join("outside.keys");
        symlink(&outside, g.dir().join("dangling.keys")).expect("symlink");
        assert!(g.append("dangling.keys", b"two\n", 1 << 16).is_err());
        assert!(!outside.exists(), "the append created the link's target");
    });
    drop(tmp);
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
/// - `append`: checks it could open `hint.keys` for writing, then that the lock-free hold's
///   append is refused as read-only anyway.
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
    let cache = CacheDir::new(&dir, "test-store", 1, is_entry);
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
        "append" => {
            fs::OpenOptions::new()
                .append(true)
                .open(dir.join("hint.keys"))
                .expect("the child may write the file itself: else the test shows nothing");
            let got = cache
                .with_shared(false, |g| {
                    assert!(g.is_lock_free(), "the hold has a file lock");
                    g.append("hint.keys", b"two\n", 1 << 16)
                })
                .expect("open");
            assert_eq!(io_kind(got), io::ErrorKind::ReadOnlyFilesystem);
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
    CacheDir::new(&dir, "test-store", 1, is_entry)
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
    CacheDir::new(&dir, "test-store", 2, is_entry)
        .with_shared(false, |_| ())
        .expect("the newer regime opens");
    assert_eq!(
        read_stamp(&dir).expect("stamp"),
        RegimeStamp::Kind {
            kind: "test-store".into(),
            version: 2
        }
    );
    let mut stdin = child.stdin.take().expect("stdin");
    writeln!(stdin, "go").expect("tell the child");
    drop(stdin);
    let mut rest = String::new();
    stdout.read_to_string(&mut rest).expect("read the child");
    seen.push_str(&rest);
    check_child(child, &seen);
}

/// A lock-free hold never appends, even to a file the process may write.
#[test]
fn a_lock_free_hold_refuses_to_append() {
    let (_tmp, dir) = lock_free_dir();
    let hint = dir.join("hint.keys");
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o755)).expect("chmod");
    fs::write(&hint, b"one\n").expect("write");
    fs::set_permissions(&hint, fs::Permissions::from_mode(0o666)).expect("chmod");
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o555)).expect("chmod");
    let mut child = run_child("append", &dir);
    drop(child.stdin.take());
    check_child(child, "");
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o755)).expect("chmod back");
    assert_eq!(fs::read(&hint).expect("read"), b"one\n");
    assert!(
        !dir.join(LOCK_FILE).exists(),
        "the child created the lock file"
    );
}
