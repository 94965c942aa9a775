//! Keep-faster on a directory no write can reach (issue 39): a read-only bind mount in a
//! mount namespace of its own, so even root cannot write (mode bits do not stop root). A
//! keep-faster store whose candidate is slower than the stored winner answers `KeptExisting`
//! without writing; one whose candidate is faster, and a last-write-wins store, are refused;
//! lookups hit; the directory is byte for byte what it was. Once with the directory's lock
//! file (a shared `flock` on a read-only descriptor) and once without one (the lock-free read
//! with its stamp re-check).
//!
//! The inner part is this test binary re-run by `unshare -m` (`-r -m` when not root) after
//! `mount --bind -o ro`, with `KCACHE_READ_ONLY_DIR` set.

use std::collections::BTreeMap;
use std::fs;
use std::io::ErrorKind;
use std::path::Path;
use std::process::Command;

use reference_ir::ir::{Code, Expr, Index, Precision, Stmt, Symbol, TensorNode};
use reference_ir::schedule::{ReferenceLanguage, Schedule};
use schedule_cache::{
    DiskCache, KeptExisting, Measurements, Refusal, ScheduleCache, StoreOutcome, StorePolicy,
    TimingIdentity,
};

const DIR: &str = "KCACHE_READ_ONLY_DIR";
const STORED: f64 = 2e-6;

fn fail(msg: String) -> ! {
    eprintln!("{msg}");
    std::process::exit(3)
}

/// `for i in 0..96 { y[i] = 2 }` with fresh ids, and its loop symbol.
fn code() -> (Code, Symbol) {
    let i = Symbol::fresh("i");
    let y = TensorNode::new("y", &[96], Precision::F32);
    let body = vec![Stmt::set(&y, vec![Index::var(&i)], Expr::Const(2.0))];
    (Code::new(vec![Stmt::for_(&i, 0, 96, body)]), i)
}

fn cache(dir: &Path) -> ScheduleCache<ReferenceLanguage, DiskCache> {
    let timing = TimingIdentity {
        device: "dev".into(),
        toolchain: None,
    };
    ScheduleCache::new(ReferenceLanguage, "cc", timing, DiskCache::new(dir))
        .with_store_policy(StorePolicy::KeepFaster)
}

fn store(
    c: &ScheduleCache<ReferenceLanguage, DiskCache>,
    time: f64,
    policy: StorePolicy,
) -> StoreOutcome {
    let (code, i) = code();
    let mut s = Schedule::new();
    s.split(&i, 8);
    c.store_with_policy(&code, &s.ops, Measurements::new(vec![time]), policy)
        .unwrap_or_else(|e| fail(format!("store: {e}")))
        .outcome
}

/// Every file under `dir` (not following links) with its bytes and modification time.
fn snapshot(dir: &Path) -> BTreeMap<String, (Vec<u8>, std::time::SystemTime)> {
    let mut out = BTreeMap::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for item in fs::read_dir(&d).expect("list") {
            let item = item.expect("item");
            let meta = fs::symlink_metadata(item.path()).expect("lstat");
            let name = item
                .path()
                .strip_prefix(dir)
                .expect("inside")
                .display()
                .to_string();
            if meta.is_dir() {
                todo.push(item.path());
                out.insert(name + "/", (Vec::new(), meta.modified().expect("mtime")));
            } else {
                let bytes = fs::read(item.path()).expect("read");
                out.insert(name, (bytes, meta.modified().expect("mtime")));
            }
        }
    }
    out
}

/// The inner part, on the read-only mount; a no-op unless run as it.
#[test]
fn inner_on_a_read_only_mount() {
    let Ok(dir) = std::env::var(DIR) else {
        return;
    };
    let dir = Path::new(&dir);
    // The mount is what stops the writes (root ignores mode bits).
    match fs::write(dir.join("probe"), b"x") {
        Err(e) if e.kind() == ErrorKind::ReadOnlyFilesystem => {}
        other => fail(format!("the directory is writable here: {other:?}")),
    }
    let c = cache(dir);
    let (looked_up, _) = code();
    let hit = c
        .lookup(&looked_up)
        .unwrap_or_else(|e| fail(format!("lookup: {e}")))
        .unwrap_or_else(|m| fail(format!("a lookup on a read-only store misses: {m}")));
    if hit.entry.times != [STORED] {
        fail(format!("hit {:?}", hit.entry.times));
    }
    for slower in [3e-6, STORED] {
        let got = store(&c, slower, StorePolicy::KeepFaster);
        let want = StoreOutcome::KeptExisting(KeptExisting {
            existing_time: STORED,
            new_time: Some(slower),
        });
        if got != want {
            fail(format!(
                "keep-faster of a slower {slower}: {got:?}, not {want:?}"
            ));
        }
    }
    for (time, policy) in [
        (1e-6, StorePolicy::KeepFaster),
        (3e-6, StorePolicy::LastWriteWins),
    ] {
        match store(&c, time, policy) {
            StoreOutcome::Refused(Refusal::Io {
                kind: ErrorKind::ReadOnlyFilesystem,
                ..
            }) => {}
            other => fail(format!(
                "{policy:?} store of {time}: {other:?}, not refused"
            )),
        }
    }
    println!("INNER DONE");
}

fn run_on_read_only_mount(dir: &Path) {
    let exe = std::env::current_exe().expect("current_exe");
    // Root if a file this process creates is root's.
    let root = {
        use std::os::unix::fs::MetadataExt;
        let probe = tempfile::NamedTempFile::new().expect("tempfile");
        probe.as_file().metadata().expect("fstat").uid() == 0
    };
    let mut cmd = Command::new("unshare");
    if !root {
        cmd.arg("-r");
    }
    cmd.args(["-m", "--propagation", "private", "sh", "-c"])
        .arg(r#"mount --bind -o ro "$1" "$1" && exec "$2" --exact inner_on_a_read_only_mount --nocapture --test-threads=1"#)
        .arg("sh")
        .arg(dir)
        .arg(&exe)
        .env(DIR, dir);
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run unshare (util-linux) for the read-only mount: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stdout.contains("INNER DONE"),
        "the inner part on the read-only mount failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
}

#[test]
fn keep_faster_on_a_read_only_mount_keeps_the_faster_entry_without_writing() {
    for with_lock_file in [true, false] {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().join("cache");
        let c = cache(&dir);
        assert_eq!(
            store(&c, STORED, StorePolicy::KeepFaster),
            StoreOutcome::Stored
        );
        if !with_lock_file {
            // As a tool copying a store's entries would leave it: no lock file to lock.
            fs::remove_file(dir.join(cache_dir::LOCK_FILE)).expect("rm lock");
        }
        let before = snapshot(&dir);
        run_on_read_only_mount(&dir);
        assert_eq!(snapshot(&dir), before, "with lock file: {with_lock_file}");
        // Writable again (the mount was the child's only): the faster candidate is stored.
        assert_eq!(
            store(&c, 1e-6, StorePolicy::KeepFaster),
            StoreOutcome::Stored
        );
    }
}
