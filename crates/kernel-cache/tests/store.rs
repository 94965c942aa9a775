//! The persistent kernel store with real files and real processes: a program saved by one
//! process is loaded by another without a compile; renamed twins hit across processes;
//! corrupt, truncated and non-private files are misses; the byte limit holds across
//! processes; two processes racing on one key compile it once; SIGKILL during saves
//! never leaves an entry pointing nowhere or a blob that does not verify.
//!
//! The backend here writes each program to a real file (its "object") and loads saved
//! bytes by writing them to a fresh file of its own and reading that back; the C-compiler
//! tests are cc-backend's. Workers are this test binary re-run with `KSTORE_ROLE` set.

use std::collections::HashMap;
use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use kernel_cache::store::{KernelStore, MissReason, NotSaved, Outcome, StoreEvent};
use kernel_cache::{
    Backend, BatchKernel, Census, Compiled, Error, Group, KernelCache, Resolved, Resolver,
    SavedProgram,
};
use test_support::lines::censused;
use test_support::lines::misses;

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct FileError(String);

/// A program: the `(symbol, text)` lines read back from its file.
#[derive(Debug)]
struct FileProgram {
    bytes: Vec<u8>,
    kernels: HashMap<String, String>,
    symbols: Vec<String>,
}

/// Compiles a group by writing `symbol\ttext` lines to a file in a fresh directory and
/// reading it back; `delay` stands for the compile's duration.
struct FileBackend {
    work: tempfile::TempDir,
    compiles: AtomicU64,
    delay: Duration,
    /// Refuse every load (a backend that cannot load what it saved).
    refuse_loads: bool,
    /// The host part of every option list (a machine whose code depends on it, as under
    /// cc-backend's `-march=native`): recorded in what it saves, and a program saved under
    /// another is refused by `load` (and kept, as cc-backend keeps one compiled for another
    /// processor).
    host: Option<[u8; 32]>,
    /// `host_part` fails (a machine that cannot tell what its options mean).
    host_fails: bool,
}

impl FileBackend {
    fn new() -> FileBackend {
        FileBackend {
            work: tempfile::tempdir().expect("work dir"),
            compiles: AtomicU64::new(0),
            delay: Duration::ZERO,
            refuse_loads: false,
            host: None,
            host_fails: false,
        }
    }

    /// A backend on a machine whose options mean `host` (a host part of `[host; 32]`).
    fn on_host(host: u8) -> FileBackend {
        FileBackend {
            host: Some([host; 32]),
            ..FileBackend::new()
        }
    }

    fn read_back(&self, bytes: &[u8]) -> Result<FileProgram, FileError> {
        let dir = tempfile::tempdir_in(self.work.path()).map_err(|e| FileError(e.to_string()))?;
        let path = dir.path().join("program.obj");
        fs::write(&path, bytes).map_err(|e| FileError(e.to_string()))?;
        let bytes = fs::read(&path).map_err(|e| FileError(e.to_string()))?;
        let text = String::from_utf8(bytes.clone()).map_err(|e| FileError(e.to_string()))?;
        let mut kernels = HashMap::new();
        let mut symbols = Vec::new();
        for line in text.lines() {
            let (s, t) = line
                .split_once('\t')
                .ok_or_else(|| FileError("malformed".into()))?;
            kernels.insert(s.to_string(), t.to_string());
            symbols.push(s.to_string());
        }
        Ok(FileProgram {
            bytes,
            kernels,
            symbols,
        })
    }
}

impl Backend for FileBackend {
    type Source = String;
    type Program = FileProgram;
    type Error = FileError;

    fn compile_group(&self, g: &Group<'_, String>) -> Result<Compiled<FileProgram>, FileError> {
        self.compiles.fetch_add(1, Ordering::SeqCst);
        std::thread::sleep(self.delay);
        let mut text = String::new();
        for k in &g.kernels {
            text.push_str(&format!("{}\t{}\n", k.symbol, k.source));
        }
        let program = self.read_back(text.as_bytes())?;
        Ok(Compiled {
            weight: program.bytes.len() as u64,
            program,
        })
    }

    fn identity(&self) -> Option<String> {
        Some("file-backend 1".into())
    }

    fn save(&self, p: &FileProgram) -> Option<Result<SavedProgram, FileError>> {
        let mut bytes = Vec::new();
        if let Some(host) = self.host {
            bytes.extend_from_slice(format!("host\t{host:?}\n").as_bytes());
        }
        bytes.extend_from_slice(&p.bytes);
        Some(Ok(SavedProgram {
            bytes,
            symbols: p.symbols.clone(),
        }))
    }

    fn load(&self, saved: &SavedProgram) -> Option<Result<Compiled<FileProgram>, FileError>> {
        Some(self.load_result(saved))
    }

    fn keeps_saved(&self, error: &FileError) -> bool {
        error.0.contains("another host")
    }

    fn host_part(&self, _options: &[String]) -> Result<Option<[u8; 32]>, FileError> {
        if self.host_fails {
            return Err(FileError("cannot ask the processor".into()));
        }
        Ok(self.host)
    }
}

impl FileBackend {
    /// [`Backend::load`]'s answer.
    fn load_result(&self, saved: &SavedProgram) -> Result<Compiled<FileProgram>, FileError> {
        {
            if self.refuse_loads {
                return Err(FileError("this backend refuses loads".into()));
            }
            let mut bytes = saved.bytes.as_slice();
            let mut compiled_for = None;
            if let Some(rest) = bytes.strip_prefix(b"host\t".as_slice()) {
                let end = rest.iter().position(|&b| b == b'\n').unwrap_or(rest.len());
                compiled_for = Some(rest[..end].to_vec());
                bytes = rest.get(end + 1..).unwrap_or_default();
            }
            if compiled_for != self.host.map(|h| format!("{h:?}").into_bytes()) {
                return Err(FileError("compiled for another host".into()));
            }
            let program = self.read_back(bytes)?;
            if saved
                .symbols
                .iter()
                .any(|s| !program.kernels.contains_key(s))
            {
                return Err(FileError("symbol missing".into()));
            }
            Ok(Compiled {
                weight: program.bytes.len() as u64,
                program,
            })
        }
    }
}

/// `n` kernels `k{first}..`, their symbols prefixed by `prefix` (a renaming).
fn batch(first: usize, n: usize, prefix: &str) -> Vec<BatchKernel<String>> {
    (first..first + n)
        .map(|i| BatchKernel {
            key: format!("key-{i}"),
            options: vec![],
            symbol: format!("{prefix}_{i}"),
            source: format!("text of kernel {i} {}", "x".repeat(200)),
        })
        .collect()
}

const ROLE: &str = "KSTORE_ROLE";

fn spawn(role: &str, dir: &Path, extra: &[(&str, String)]) -> Child {
    let mut cmd = Command::new(std::env::current_exe().expect("test binary"));
    cmd.args(["--exact", "worker", "--nocapture", "--test-threads=1"])
        .env(ROLE, role)
        .env("KSTORE_DIR", dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    for (k, v) in extra {
        cmd.env(k, v);
    }
    cmd.spawn().expect("spawn worker")
}

/// Runs a worker to its end; its `RESULT ...` line.
fn run(role: &str, dir: &Path, extra: &[(&str, String)]) -> String {
    let out = spawn(role, dir, extra).wait_with_output().expect("worker");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "worker {role} failed: {stdout}");
    result_line(&stdout)
}

fn result_line(stdout: &str) -> String {
    stdout
        .lines()
        .find_map(|l| l.split_once("RESULT ").map(|(_, r)| r))
        .unwrap_or_else(|| panic!("no RESULT line in {stdout}"))
        .to_string()
}

fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("{name} not set"))
}

fn env_usize(name: &str) -> usize {
    env(name).parse().expect("a number")
}

/// The worker body; a no-op unless this process was spawned as a worker.
#[test]
fn worker() {
    let Ok(role) = std::env::var(ROLE) else {
        return;
    };
    let dir = PathBuf::from(env("KSTORE_DIR"));
    let max = std::env::var("KSTORE_MAX").map_or(u64::MAX, |m| m.parse().expect("max"));
    let store = KernelStore::new(&dir).with_max_bytes(max);
    let mut backend = FileBackend::new();
    let cache = KernelCache::new(1 << 30);
    match role.as_str() {
        // Resolve kernels `first..first+n` (symbols prefixed `prefix`), check each
        // answer's text, print compiles and loads.
        "resolve" => {
            backend.delay = Duration::from_millis(env_usize("KSTORE_DELAY_MS") as u64);
            let b = batch(
                env_usize("KSTORE_FIRST"),
                env_usize("KSTORE_N"),
                &env("KSTORE_PREFIX"),
            );
            if let Ok(t) = std::env::var("KSTORE_START_AT") {
                // Start together with the other workers (milliseconds since the epoch).
                let at = Duration::from_millis(t.parse().expect("start"));
                let now = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .expect("clock");
                std::thread::sleep(at.saturating_sub(now));
            }
            let (answers, census) = censused(
                Resolver::new(&cache, &backend)
                    .store(Some(&store))
                    .resolve_strict(&b),
            );
            let answers = answers.expect("resolve");
            for (k, a) in b.iter().zip(&answers) {
                assert_eq!(a.program.kernels.get(&*a.symbol), Some(&k.source));
            }
            let symbols: Vec<&str> = answers.iter().map(|a| &*a.symbol).collect();
            println!(
                "RESULT compiles={} loaded={} first_symbol={}",
                backend.compiles.load(Ordering::SeqCst),
                census.kernels_loaded,
                symbols.first().copied().unwrap_or("")
            );
        }
        // Save programs of 1..4 kernels in a loop until killed.
        "saver" => {
            let id = env_usize("KSTORE_ID");
            let mut seq = 0;
            loop {
                let b = batch(id * 100_000 + seq * 4, 1 + seq % 4, "s");
                Resolver::new(&cache, &backend)
                    .store(Some(&store))
                    .resolve_strict(&b)
                    .map(|r| r.answers)
                    .expect("resolve");
                seq += 1;
            }
        }
        other => panic!("unknown role {other}"),
    }
}

fn field(result: &str, name: &str) -> String {
    result
        .split_whitespace()
        .find_map(|f| f.strip_prefix(&format!("{name}=")))
        .unwrap_or_else(|| panic!("no {name} in {result}"))
        .to_string()
}

fn resolve_in_child(dir: &Path, first: usize, n: usize, prefix: &str) -> String {
    run(
        "resolve",
        dir,
        &[
            ("KSTORE_FIRST", first.to_string()),
            ("KSTORE_N", n.to_string()),
            ("KSTORE_PREFIX", prefix.to_string()),
            ("KSTORE_DELAY_MS", "0".into()),
        ],
    )
}

#[test]
fn a_program_saved_by_one_process_is_loaded_by_another_without_a_compile() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("kernels");
    let first = resolve_in_child(&dir, 0, 8, "a");
    assert_eq!(field(&first, "compiles"), "1");
    assert_eq!(field(&first, "loaded"), "0");
    let second = resolve_in_child(&dir, 0, 8, "a");
    assert_eq!(field(&second, "compiles"), "0", "{second}");
    assert_eq!(field(&second, "loaded"), "8");
    // Renamed twins (same keys, other symbols) hit too, answered under the saved symbol.
    let renamed = resolve_in_child(&dir, 0, 8, "renamed");
    assert_eq!(field(&renamed, "compiles"), "0");
    assert_eq!(field(&renamed, "first_symbol"), "a_0");
    let stats = KernelStore::new(&dir).stats().expect("stats");
    assert_eq!((stats.entries, stats.blobs), (8, 1));
    assert_eq!(stats.counters.hits, 16);
    assert_eq!(stats.counters.misses, 8);
    assert_eq!(stats.counters.saves, 1);
}

#[test]
fn a_program_for_many_kernels_saves_every_entry_and_another_process_loads_them_all() {
    // 40 kernels: past the count from which a save publishes its entries from several
    // threads at once.
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("kernels");
    let first = resolve_in_child(&dir, 0, 40, "a");
    assert_eq!(field(&first, "compiles"), "1", "{first}");
    let stats = KernelStore::new(&dir).stats().expect("stats");
    assert_eq!((stats.entries, stats.blobs), (40, 1));
    // Every staging directory was removed: only blobs, entries, locks and protocol files.
    let names: Vec<String> = fs::read_dir(&dir)
        .expect("list")
        .map(|e| e.expect("item").file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        names.iter().all(|n| !n.starts_with('.')),
        "staging left behind: {names:?}"
    );
    let second = resolve_in_child(&dir, 0, 40, "a");
    assert_eq!(field(&second, "compiles"), "0", "{second}");
    assert_eq!(field(&second, "loaded"), "40");
}

fn only_blob(dir: &Path) -> PathBuf {
    let blobs: Vec<PathBuf> = fs::read_dir(dir)
        .expect("list")
        .map(|e| e.expect("item").path())
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("b-"))
        })
        .collect();
    assert_eq!(blobs.len(), 1, "{blobs:?}");
    blobs[0].clone()
}

/// Saves the programs of `b` to `store`: a resolve with an empty cache and a fresh backend.
fn save(store: &KernelStore, b: &[BatchKernel<String>]) {
    Resolver::new(&KernelCache::new(1 << 20), &FileBackend::new())
        .store(Some(store))
        .resolve_strict(b)
        .map(|r| r.answers)
        .expect("first");
}

/// What a resolve answers.
type Answers = Result<Vec<Resolved<FileProgram>>, Error<FileError>>;

/// Resolves `b` with an empty cache over `store`, as a new process would: its answers and
/// census, and the store's events.
fn resolved(
    store: &KernelStore,
    b: &[BatchKernel<String>],
    backend: &FileBackend,
) -> ((Answers, Census), Vec<StoreEvent>) {
    test_support::lines::recorded(
        Resolver::new(&KernelCache::new(1 << 20), backend)
            .store(Some(store))
            .resolve_strict(b),
    )
}

#[test]
fn a_corrupted_or_truncated_blob_is_a_miss_and_is_removed() {
    for damage in ["flip", "truncate", "empty"] {
        let tmp = tempfile::tempdir().expect("tmp");
        let store = KernelStore::new(tmp.path().join("kernels"));
        let b = batch(0, 3, "k");
        save(&store, &b);
        let blob = only_blob(store.dir());
        let mut bytes = fs::read(&blob).expect("read");
        match damage {
            "flip" => {
                let last = bytes.len() - 1;
                bytes[last] ^= 1;
            }
            "truncate" => bytes.truncate(bytes.len() / 2),
            _ => bytes.clear(),
        }
        fs::write(&blob, &bytes).expect("damage");
        let ((answers, census), events) = resolved(&store, &b, &FileBackend::new());
        answers.expect("resolve");
        assert_eq!(census.kernels_loaded, 0, "{damage}");
        assert_eq!(census.kernels_compiled, 3, "{damage}");
        let why = misses(&events);
        assert_eq!(why[0], MissReason::Corrupt, "{damage}: {events:?}");
        // The blob was removed, then saved again whole by the compile.
        let again = only_blob(store.dir());
        assert_ne!(fs::read(&again).expect("read"), bytes);
        assert!(store.probe("file-backend 1", "key-0").is_ok());
    }
}

#[test]
fn a_blob_the_backend_cannot_load_is_a_miss_counted_as_one_and_removed() {
    let tmp = tempfile::tempdir().expect("tmp");
    let store = KernelStore::new(tmp.path().join("kernels"));
    let b = batch(0, 2, "k");
    save(&store, &b);
    let before = store.stats().expect("stats").counters;
    let mut refusing = FileBackend::new();
    refusing.refuse_loads = true;
    let ((out, census), events) = resolved(&store, &b, &refusing);
    out.expect("a load failure is a miss, never a failed resolve");
    assert_eq!((census.kernels_loaded, census.kernels_compiled), (0, 2));
    let why = misses(&events);
    assert!(
        matches!(&why[0], MissReason::LoadFailed(m) if m.contains("refuses")),
        "{events:?}"
    );
    assert!(
        !events
            .iter()
            .any(|e| matches!(e.outcome, Outcome::Hit { .. })),
        "{events:?}"
    );
    let after = store.stats().expect("stats").counters;
    assert_eq!(after.hits, before.hits);
    assert_eq!(after.misses, before.misses + 2);
    assert_eq!(after.removed_bad, before.removed_bad + 1);
}

#[test]
fn a_blob_or_directory_others_could_write_is_refused() {
    let tmp = tempfile::tempdir().expect("tmp");
    let store = KernelStore::new(tmp.path().join("kernels"));
    let b = batch(0, 2, "k");
    save(&store, &b);
    let blob = only_blob(store.dir());
    fs::set_permissions(&blob, fs::Permissions::from_mode(0o606)).expect("chmod o+w");
    let ((answers, census), events) = resolved(&store, &b, &FileBackend::new());
    answers.expect("a refused blob is a miss, never a failed resolve");
    assert_eq!(census.kernels_loaded, 0);
    assert!(
        matches!(&misses(&events)[0], MissReason::NotPrivate(m) if m.contains("others write")),
        "{events:?}"
    );
    // The directory itself.
    fs::set_permissions(&blob, fs::Permissions::from_mode(0o600)).expect("chmod");
    assert!(store.probe("file-backend 1", "key-0").is_ok());
    fs::set_permissions(store.dir(), fs::Permissions::from_mode(0o777)).expect("chmod dir");
    let refused = store.probe("file-backend 1", "key-0");
    assert!(
        matches!(&refused, Err(MissReason::NotPrivate(_))),
        "{refused:?}"
    );
    let err = store.stats().expect_err("stats refuses too");
    assert!(err.to_string().contains("group or others"), "{err}");
}

/// A blob another user owns is refused at every lookup, so a save of the same program
/// replaces it (it was kept, being a private-looking file of the right length, and the
/// program was compiled again by every process, never loaded). Only root can give a file
/// away: as another user the case cannot arise from this process and the test says so.
#[test]
fn a_blob_another_user_owns_is_replaced_by_the_next_save() {
    let tmp = tempfile::tempdir().expect("tmp");
    let store = KernelStore::new(tmp.path().join("kernels"));
    let b = batch(0, 2, "k");
    save(&store, &b);
    let blob = only_blob(store.dir());
    let other = cache_dir::current_uid().wrapping_add(1);
    if let Err(e) = std::os::unix::fs::chown(&blob, Some(other), None) {
        assert_eq!(e.kind(), std::io::ErrorKind::PermissionDenied, "{e}");
        eprintln!("not root: cannot give the blob away; nothing to show");
        return;
    }
    let ((answers, census), events) = resolved(&store, &b, &FileBackend::new());
    answers.expect("a refused blob is a miss");
    assert_eq!((census.kernels_loaded, census.kernels_compiled), (0, 2));
    assert!(
        matches!(&misses(&events)[0], MissReason::NotPrivate(m) if m.contains("owned by uid")),
        "{events:?}"
    );
    // That resolve saved the program again: the blob is ours now, and it loads.
    let blob = only_blob(store.dir());
    assert_eq!(
        fs::metadata(&blob).expect("stat").uid(),
        cache_dir::current_uid()
    );
    let ((answers, census), _) = resolved(&store, &b, &FileBackend::new());
    answers.expect("resolve");
    assert_eq!((census.kernels_loaded, census.kernels_compiled), (2, 0));
}

/// `create` reports a directory the store refuses: one made by hand under a umask of
/// `002` (mode `0775`) or `022` (`0755`: the group and others may open the files in it),
/// one the group may read (`0750`) or anyone may write (`0777`) is `NotPrivate` naming
/// its mode; `0700` is accepted, and a missing directory is made `0700`.
#[test]
fn create_reports_a_group_or_other_writable_directory() {
    let tmp = tempfile::tempdir().expect("tmp");
    let fresh = KernelStore::new(tmp.path().join("parent/kernels"));
    fresh.create().expect("a missing directory is created");
    let mode = fs::metadata(fresh.dir())
        .expect("stat")
        .permissions()
        .mode()
        & 0o7777;
    assert_eq!(mode, 0o700, "{mode:o}");
    for (mode, refused) in [
        (0o775, true),
        (0o777, true),
        (0o755, true),
        (0o750, true),
        (0o700, false),
    ] {
        let dir = tmp.path().join(format!("made-{mode:o}"));
        fs::create_dir(&dir).expect("mkdir");
        fs::set_permissions(&dir, fs::Permissions::from_mode(mode)).expect("chmod");
        let created = KernelStore::new(&dir).create();
        if refused {
            let err = created.expect_err("a directory others could write is refused");
            assert!(
                matches!(&err, cache_dir::Error::NotPrivate { why, .. }
                    if why.contains(&format!("mode {mode:o}"))),
                "{mode:o}: {err}"
            );
        } else {
            created.unwrap_or_else(|e| panic!("{mode:o}: {e}"));
        }
    }
}

/// A directory this process cannot create under: a read-only tmpfs mounted for the test when
/// run as root (root ignores modes), else a parent of mode `0500`. Unmounted on drop.
struct Unwritable {
    tmp: tempfile::TempDir,
    mounted: bool,
}

impl Unwritable {
    /// Fails the test when root cannot mount (no `CAP_SYS_ADMIN`): it never passes by
    /// skipping.
    fn new() -> Option<Unwritable> {
        let tmp = tempfile::tempdir().expect("tmp");
        let root = fs::metadata("/proc/self").expect("stat").uid() == 0;
        if !root {
            fs::set_permissions(tmp.path(), fs::Permissions::from_mode(0o500)).expect("chmod");
            return Some(Unwritable {
                tmp,
                mounted: false,
            });
        }
        let status = Command::new("mount")
            .args(["-t", "tmpfs", "-o", "ro,size=64k", "tmpfs"])
            .arg(tmp.path())
            .status();
        assert!(
            matches!(status, Ok(s) if s.success()),
            "root could not mount a read-only tmpfs for this test ({status:?}); run it as root \
             with CAP_SYS_ADMIN (as CI does) or as an unprivileged user"
        );
        Some(Unwritable { tmp, mounted: true })
    }

    fn path(&self) -> &Path {
        self.tmp.path()
    }
}

impl Drop for Unwritable {
    fn drop(&mut self) {
        if self.mounted {
            let _ = Command::new("umount").arg(self.tmp.path()).status();
        } else {
            let _ = fs::set_permissions(self.tmp.path(), fs::Permissions::from_mode(0o700));
        }
    }
}

#[test]
fn create_where_nothing_can_be_created_names_the_directory() {
    let Some(ro) = Unwritable::new() else { return };
    for dir in [ro.path().join("kernels"), ro.path().join("a/b/kernels")] {
        let err = KernelStore::new(&dir)
            .create()
            .expect_err("nothing can be created there");
        let text = err.to_string();
        assert!(
            matches!(&err, cache_dir::Error::Io { .. }),
            "{}: {text}",
            dir.display()
        );
        // The directory the mkdir failed on (the first missing one) and the cause.
        let first = ro.path().join(
            dir.strip_prefix(ro.path())
                .expect("under")
                .components()
                .next()
                .expect("a component"),
        );
        assert!(
            text.contains(&first.display().to_string()),
            "names {}: {text}",
            first.display()
        );
        assert!(
            text.contains("Read-only file system") || text.contains("Permission denied"),
            "says why: {text}"
        );
        assert!(!first.exists(), "nothing created: {}", first.display());
    }
}

#[test]
fn the_byte_limit_holds_across_processes_least_recently_used_first() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("kernels");
    // One program of 4 kernels is a bit over 1 KiB with its entries.
    let max = 6000u64;
    let mut children: Vec<Child> = (0..4)
        .map(|i| {
            spawn(
                "resolve",
                &dir,
                &[
                    ("KSTORE_FIRST", (i * 4).to_string()),
                    ("KSTORE_N", "4".into()),
                    ("KSTORE_PREFIX", "p".into()),
                    ("KSTORE_DELAY_MS", "0".into()),
                    ("KSTORE_MAX", max.to_string()),
                ],
            )
        })
        .collect();
    for c in &mut children {
        assert!(c.wait().expect("wait").success());
    }
    let store = KernelStore::new(&dir).with_max_bytes(max);
    let stats = store.stats().expect("stats");
    assert!(stats.bytes <= max, "{stats:?}");
    assert!(stats.counters.evictions >= 1, "{stats:?}");
    // Every entry left points to a blob that verifies.
    for i in 0..16 {
        match store.probe("file-backend 1", &format!("key-{i}")) {
            Ok(_) | Err(MissReason::NoEntry) => {}
            Err(other) => panic!("key-{i}: {other:?}"),
        }
    }
    // A used blob survives a trim that evicts an older unused one.
    let backend = FileBackend::new();
    let cache = KernelCache::new(1 << 20);
    let a = batch(100, 4, "a");
    let b = batch(200, 4, "b");
    let big = KernelStore::new(&dir).with_max_bytes(1 << 20);
    Resolver::new(&cache, &backend)
        .store(Some(&big))
        .resolve_strict(&a)
        .map(|r| r.answers)
        .expect("a");
    std::thread::sleep(Duration::from_millis(20));
    Resolver::new(&cache, &backend)
        .store(Some(&big))
        .resolve_strict(&b)
        .map(|r| r.answers)
        .expect("b");
    std::thread::sleep(Duration::from_millis(20));
    assert!(big.probe("file-backend 1", "key-100").is_ok()); // marks a used
    let one = big.stats().expect("stats").bytes;
    big.trim(one - 1).expect("trim");
    assert!(big.probe("file-backend 1", "key-100").is_ok());
}

#[test]
fn two_processes_racing_on_one_key_compile_it_once() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("kernels");
    KernelStore::new(&dir).create().expect("create");
    let start = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        + Duration::from_millis(300);
    let children: Vec<Child> = (0..2)
        .map(|_| {
            spawn(
                "resolve",
                &dir,
                &[
                    ("KSTORE_FIRST", "7".into()),
                    ("KSTORE_N", "3".into()),
                    ("KSTORE_PREFIX", "r".into()),
                    ("KSTORE_DELAY_MS", "400".into()),
                    ("KSTORE_START_AT", start.as_millis().to_string()),
                ],
            )
        })
        .collect();
    let results: Vec<String> = children
        .into_iter()
        .map(|c| {
            let out = c.wait_with_output().expect("wait");
            assert!(out.status.success());
            result_line(&String::from_utf8_lossy(&out.stdout))
        })
        .collect();
    let compiles: u64 = results
        .iter()
        .map(|r| field(r, "compiles").parse::<u64>().expect("n"))
        .sum();
    assert_eq!(compiles, 1, "{results:?}");
}

/// A child resolving one key of `prefix` whose compile takes a minute, returned once its
/// compile lock file exists (it may not hold the lock yet: callers wait a little more).
fn slow_compile(dir: &Path, prefix: &str) -> Child {
    let child = spawn(
        "resolve",
        dir,
        &[
            ("KSTORE_FIRST", "0".into()),
            ("KSTORE_N", "1".into()),
            ("KSTORE_PREFIX", prefix.into()),
            ("KSTORE_DELAY_MS", "60000".into()),
        ],
    );
    // Until a compile lock is held: one this process can take (and drops at once) is not,
    // so a lock file the child created but has not locked yet is not taken for its lock.
    let deadline = Instant::now() + Duration::from_secs(20);
    while !(dir.is_dir()
        && names(dir, "c-")
            .iter()
            .any(|n| fs::File::open(dir.join(n)).is_ok_and(|f| f.try_lock().is_err())))
    {
        assert!(
            Instant::now() < deadline,
            "the child never took its compile lock"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    child
}

#[test]
fn a_dead_compile_lock_holder_blocks_nobody() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("kernels");
    // A child that compiles slowly is killed while it holds the key's compile lock.
    let mut child = slow_compile(&dir, "d");
    std::thread::sleep(Duration::from_millis(100));
    child.kill().expect("kill");
    child.wait().expect("reap");
    // A live holder would make the resolve wait (a `Waited` event, timed out after the
    // minute): no such event shows the dead holder's lock was free.
    let store = KernelStore::new(&dir).with_compile_wait(Duration::from_secs(60));
    let ((out, census), events) = resolved(&store, &batch(0, 1, "d"), &FileBackend::new());
    out.expect("resolve");
    assert_eq!(census.kernels_compiled, 1);
    assert!(
        !events
            .iter()
            .any(|e| matches!(e.outcome, Outcome::Waited { .. })),
        "{events:?}"
    );
}

/// `trim` (`kcache gc --max-size`) removes the compile locks nobody holds and keeps those a
/// live process (a child compiling) or another open file of this process holds; it removes
/// dangling and malformed entries and keeps the entries of blobs that stay.
#[test]
fn trim_removes_unheld_compile_locks_and_dangling_or_malformed_entries() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("kernels");
    let store = KernelStore::new(&dir);
    // A program of two kernels that stays, and one whose blob is then lost.
    save(&store, &batch(100, 2, "t"));
    let kept = names(&dir, "k-");
    save(&store, &batch(200, 1, "g"));
    let dangling: Vec<String> = names(&dir, "k-")
        .into_iter()
        .filter(|n| !kept.contains(n))
        .collect();
    assert_eq!(dangling.len(), 1, "{dangling:?}");
    let blobs = names(&dir, "b-");
    let lost = blobs
        .iter()
        .find(|b| fs::read(dir.join(b)).is_ok_and(|bytes| contains(&bytes, b"g_200")))
        .expect("the second program's blob");
    fs::remove_file(dir.join(lost)).expect("lose the blob");
    let private = |name: String| {
        let path = dir.join(name);
        fs::write(&path, b"").expect("write");
        fs::set_permissions(&path, fs::Permissions::from_mode(0o600)).expect("chmod");
        path
    };
    fs::write(private(format!("k-{}", "e".repeat(64))), b"not an entry").expect("write");
    // Compile locks: those the saves' resolves left (released, never unlinked), one a live
    // child holds, one this process holds through another open file, one nobody holds.
    let left = names(&dir, "c-");
    assert_eq!(left.len(), 3, "{left:?}");
    let mut child = slow_compile(&dir, "h");
    let deadline = Instant::now() + Duration::from_secs(20);
    // Until the child holds its own: a lock this process can take is not held yet.
    let childs = loop {
        let held = names(&dir, "c-")
            .into_iter()
            .filter(|n| !left.contains(n))
            .map(|n| dir.join(n))
            .find(|p| fs::File::open(p).is_ok_and(|f| f.try_lock().is_err()));
        if let Some(path) = held {
            break path;
        }
        assert!(Instant::now() < deadline, "the child never locked its file");
        std::thread::sleep(Duration::from_millis(10));
    };
    let ours = private(format!("c-{}", "a".repeat(64)));
    let holder = fs::File::open(&ours).expect("open");
    holder.lock().expect("lock");
    let free = private(format!("c-{}", "b".repeat(64)));

    let t = store.trim(u64::MAX).expect("trim");
    assert_eq!(
        (t.evicted_blobs, t.removed_entries, t.removed_locks),
        (0, 2, 4),
        "{t:?}"
    );
    assert!(
        childs.exists() && ours.exists(),
        "a held compile lock was removed"
    );
    assert!(!free.exists(), "the unheld compile lock is still there");
    assert!(
        left.iter().all(|n| !dir.join(n).exists()),
        "a released compile lock is still there"
    );
    assert_eq!(
        names(&dir, "k-"),
        kept,
        "dangling or malformed entries left"
    );
    assert_eq!(t.bytes_left, store.stats().expect("stats").bytes);
    for i in 100..102 {
        assert!(store.probe("file-backend 1", &format!("key-{i}")).is_ok());
    }
    // Once released, both go too.
    child.kill().expect("kill");
    child.wait().expect("reap");
    drop(holder);
    let t = store.trim(u64::MAX).expect("trim");
    assert_eq!((t.removed_entries, t.removed_locks), (0, 2), "{t:?}");
    assert!(names(&dir, "c-").is_empty(), "{:?}", names(&dir, "c-"));
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

#[test]
fn sigkill_during_saves_never_leaves_a_dangling_entry_or_a_bad_blob() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("kernels");
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    for round in 0..6 {
        let mut savers: Vec<Child> = (0..3)
            .map(|id| {
                spawn(
                    "saver",
                    &dir,
                    &[
                        ("KSTORE_ID", (round * 3 + id).to_string()),
                        // Small enough that savers evict each other too.
                        ("KSTORE_MAX", "40000".into()),
                    ],
                )
            })
            .collect();
        std::thread::sleep(Duration::from_millis(150 + next() % 250));
        for s in &mut savers {
            s.kill().expect("kill");
            s.wait().expect("reap");
        }
    }
    // Every entry names a blob that is there and verifies; every blob verifies.
    let store = KernelStore::new(&dir);
    let mut checked = 0;
    for name in names(&dir, "b-") {
        use sha2::Digest;
        let bytes = fs::read(dir.join(&name)).expect("blob");
        assert_eq!(
            hex::encode(sha2::Sha256::digest(&bytes)),
            &name["b-".len()..]
        );
        checked += 1;
    }
    assert!(checked > 0);
    let mut entries = 0;
    for name in names(&dir, "k-") {
        let text = fs::read_to_string(dir.join(&name)).expect("entry");
        let blob = text
            .lines()
            .find_map(|l| l.strip_prefix("blob "))
            .unwrap_or_else(|| panic!("torn entry {name}: {text:?}"));
        assert!(
            dir.join(format!("b-{blob}")).is_file(),
            "{name} points nowhere"
        );
        entries += 1;
    }
    assert!(entries > 0);
    // And a lookup of what is left never meets anything but hits.
    let stats = store.stats().expect("stats");
    assert_eq!(stats.counters.removed_bad, 0, "{stats:?}");
}

/// No directory content hangs the store, makes it read without bound, fails a resolve, or
/// makes it write through a link: a FIFO, a link to `/dev/zero`, a link to a file
/// elsewhere, a directory or an 8 GiB sparse file at every name the store opens (an entry,
/// a blob, the counters, a compile lock, the lock file).
#[test]
fn no_directory_content_hangs_the_store_or_is_written_through() {
    /// Runs `f` on a thread of its own; panics if it takes longer than a minute.
    fn within<T: Send + 'static>(what: String, f: impl FnOnce() -> T + Send + 'static) -> T {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(f());
        });
        rx.recv_timeout(Duration::from_secs(60))
            .unwrap_or_else(|_| panic!("{what}: hung"))
    }
    let named = |dir: &Path, prefix: &str| -> PathBuf {
        fs::read_dir(dir)
            .expect("list")
            .map(|e| e.expect("item").path())
            .find(|p| {
                p.file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with(prefix))
            })
            .unwrap_or_else(|| panic!("no {prefix} file"))
    };
    for target in ["k-", "b-", "stats", "c-", "cache.lock"] {
        for kind in ["fifo", "dev-zero", "link-elsewhere", "directory", "sparse"] {
            let what = format!("{kind} at {target}");
            let tmp = tempfile::tempdir().expect("tmp");
            let store = KernelStore::new(tmp.path().join("kernels"));
            let b = batch(0, 2, "k");
            save(&store, &b);
            let path = match target {
                "stats" | "cache.lock" => store.dir().join(target),
                _ => named(store.dir(), target),
            };
            fs::remove_file(&path).expect("remove");
            let elsewhere = tmp.path().join("elsewhere");
            match kind {
                "fifo" => {
                    let made = Command::new("mkfifo").arg(&path).status().expect("mkfifo");
                    assert!(made.success());
                }
                "dev-zero" => std::os::unix::fs::symlink("/dev/zero", &path).expect("link"),
                "link-elsewhere" => std::os::unix::fs::symlink(&elsewhere, &path).expect("link"),
                "directory" => fs::create_dir(&path).expect("mkdir"),
                _ => fs::File::create(&path)
                    .and_then(|f| f.set_len(8 << 30))
                    .expect("sparse"),
            }
            if target == "c-" {
                // The compile lock is taken for a key the store misses.
                for e in fs::read_dir(store.dir()).expect("list") {
                    let p = e.expect("item").path();
                    if p.file_name()
                        .is_some_and(|n| n.to_string_lossy().starts_with("k-"))
                    {
                        fs::remove_file(p).expect("remove entry");
                    }
                }
            }
            let s = store.clone();
            let answers = within(what.clone(), move || {
                let backend = FileBackend::new();
                let answers = Resolver::new(&KernelCache::new(1 << 20), &backend)
                    .store(Some(&s))
                    .resolve_strict(&batch(0, 2, "k"))
                    .map(|r| r.answers);
                answers.map(|a| {
                    a.iter()
                        .map(|r| r.program.kernels.get(&*r.symbol).cloned())
                        .collect::<Vec<_>>()
                })
            });
            let want: Vec<Option<String>> = b.iter().map(|k| Some(k.source.clone())).collect();
            assert_eq!(answers.expect(&what), want, "{what}");
            let s = store.clone();
            let _ = within(format!("stats, {what}"), move || s.stats());
            let s = store.clone();
            let _ = within(format!("trim, {what}"), move || s.trim(1 << 30));
            assert!(
                !elsewhere.exists(),
                "{what}: a file was created through the link"
            );
        }
    }
}

/// What is not saved: a compile faster than the store's minimum compile time
/// (`TooFast`), a program larger than the byte limit (`TooLarge`; a limit of 0 saves
/// nothing). The resolve succeeds either way and nothing is left in the directory.
#[test]
fn fast_compiles_and_programs_past_the_limit_are_not_saved() {
    // (what, byte limit, minimum compile time, why not saved)
    let cases = [
        (
            "too fast",
            u64::MAX,
            Duration::from_secs(3600),
            NotSaved::TooFast,
        ),
        ("limit 0", 0, Duration::ZERO, NotSaved::TooLarge),
        ("limit 100", 100, Duration::ZERO, NotSaved::TooLarge),
    ];
    for (what, max_bytes, min_time, want) in cases {
        let tmp = tempfile::tempdir().expect("tmp");
        let dir = tmp.path().join("kernels");
        let store = KernelStore::new(&dir)
            .with_max_bytes(max_bytes)
            .with_min_compile_time(min_time);
        let b = batch(0, 2, "k");
        let ((out, census), events) = resolved(&store, &b, &FileBackend::new());
        out.expect("resolve");
        assert_eq!(census.kernels_compiled, 2, "{what}");
        let why: Vec<NotSaved> = events
            .iter()
            .filter_map(|e| match &e.outcome {
                Outcome::NotSaved(n) => Some(n.clone()),
                Outcome::Saved { .. } => panic!("{what}: saved: {events:?}"),
                _ => None,
            })
            .collect();
        assert_eq!(why, vec![want.clone(), want], "{what}");
        let stored = fs::read_dir(&dir).map_or(0, |d| {
            d.filter(|e| {
                e.as_ref()
                    .is_ok_and(|e| matches!(e.file_name().to_str(), Some(n) if n.starts_with("b-") || n.starts_with("k-")))
            })
            .count()
        });
        assert_eq!(stored, 0, "{what}");
    }
}

/// The byte limit a program must fit is its blob's size plus 4 KiB of room for its
/// entries: a limit 4095 bytes past the blob is `TooLarge` (nothing written), 4096 past
/// it saves the program.
#[test]
fn a_program_is_saved_when_its_blob_and_4_kib_fit_the_limit() {
    let tmp = tempfile::tempdir().expect("tmp");
    let b = batch(0, 1, "t");
    let unlimited = tmp.path().join("unlimited");
    save(&KernelStore::new(&unlimited), &b);
    let blob = fs::metadata(only_blob(&unlimited)).expect("stat").len();
    for (room, saved) in [(4095, false), (4096, true)] {
        let dir = tmp.path().join(format!("room-{room}"));
        let store = KernelStore::new(&dir).with_max_bytes(blob + room);
        let ((out, _), events) = resolved(&store, &b, &FileBackend::new());
        out.expect("resolve");
        let outcomes: Vec<&Outcome> = events
            .iter()
            .map(|e| &e.outcome)
            .filter(|o| matches!(o, Outcome::Saved { .. } | Outcome::NotSaved(_)))
            .collect();
        if saved {
            assert!(
                matches!(outcomes[..], [Outcome::Saved { .. }]),
                "{events:?}"
            );
            assert_eq!(fs::metadata(only_blob(&dir)).expect("stat").len(), blob);
        } else {
            assert_eq!(outcomes, [&Outcome::NotSaved(NotSaved::TooLarge)]);
            assert!(names(&dir, "b-").is_empty(), "{:?}", names(&dir, "b-"));
        }
    }
}

/// A key whose compile lock a live process holds longer than the store's compile wait
/// is compiled anyway once the wait ends (`Waited { timed_out: true }`), with the right
/// answer.
#[test]
fn a_compile_wait_that_times_out_compiles_the_key_itself() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("kernels");
    let mut child = slow_compile(&dir, "w");
    let store = KernelStore::new(&dir).with_compile_wait(Duration::from_millis(300));
    let b = batch(0, 1, "w");
    let ((out, census), events) = resolved(&store, &b, &FileBackend::new());
    child.kill().expect("kill");
    child.wait().expect("reap");
    let answers = out.expect("resolve");
    assert_eq!(
        answers[0].program.kernels.get(&*answers[0].symbol),
        Some(&b[0].source)
    );
    assert_eq!(census.kernels_compiled, 1);
    assert!(
        events
            .iter()
            .any(|e| e.outcome == Outcome::Waited { timed_out: true }),
        "{events:?}"
    );
}

/// A compile wait longer than the clock can count (`Duration::MAX`) is no deadline, not
/// a panic: the resolve waits for as long as a live process holds the key's compile lock,
/// and compiles the key once that process is gone (it died without saving).
#[test]
fn an_unbounded_compile_wait_waits_for_the_holder() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("kernels");
    let mut child = slow_compile(&dir, "u");
    let store = KernelStore::new(&dir).with_compile_wait(Duration::MAX);
    let b = batch(0, 1, "u");
    let ((out, census), events) = std::thread::scope(|s| {
        let resolving = s.spawn(|| resolved(&store, &b, &FileBackend::new()));
        // Long enough for the resolve to reach the held lock and start waiting (killed
        // before that, the child would leave nothing to wait for, and no `Waited` event).
        std::thread::sleep(Duration::from_secs(1));
        child.kill().expect("kill");
        child.wait().expect("reap");
        resolving.join().expect("the resolve panicked")
    });
    let answers = out.expect("resolve");
    assert_eq!(
        answers[0].program.kernels.get(&*answers[0].symbol),
        Some(&b[0].source)
    );
    assert_eq!(census.kernels_compiled, 1);
    assert!(
        events
            .iter()
            .any(|e| e.outcome == Outcome::Waited { timed_out: false }),
        "{events:?}"
    );
}

/// The store's file names starting with `prefix`, sorted.
fn names(dir: &Path, prefix: &str) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .expect("list")
        .map(|e| e.expect("item").file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(prefix))
        .collect();
    names.sort();
    names
}

/// The name of key `key-0`'s entry under `file-backend 1`, with host parts `[1; 32]` and
/// `[2; 32]` and without one (`docs/disk-format.md`'s formulas, computed outside the
/// crate; the last is the name every store before host parts gave it).
const KEY_0_ON_HOST_1: &str = "d05e71941aa9dcba2048d2dbc92716fb937633b06a2db67d6e44f73a696e5ef3";
const KEY_0_ON_HOST_2: &str = "0f04508635a54a4cc63b6c44cd9e74d04b8d0d0dc1f540d84ed0588815968ffc";
const KEY_0: &str = "fbf452ab6ea2755f0b42bb8c0caf295095e974b3b8b755b2f9bf5ca0b59705b8";

/// Machines whose backends give a key's options different host parts (as cc-backend's
/// `-march=native` on two processors) share one store and each keep their own entry:
/// resolves on hosts one, two, one, two in turn compile on each host's first and load on
/// its second, and a backend without host parts keeps the entry name of every earlier
/// store (pinned), beside theirs. With one entry per key, each host's save replaced the
/// other's entry (its program refused by the other's load), so no resolve loaded.
#[test]
fn machines_of_different_host_parts_sharing_a_store_each_load_their_own_program() {
    let tmp = tempfile::tempdir().expect("tmp");
    let store = KernelStore::new(tmp.path().join("kernels"));
    let b = batch(0, 1, "k");
    let run = |backend: &FileBackend| {
        let (out, census) = censused(
            Resolver::new(&KernelCache::new(1 << 20), backend)
                .store(Some(&store))
                .resolve_strict(&b),
        );
        let answers = out.expect("resolve");
        assert_eq!(
            answers[0].program.kernels.get(&*answers[0].symbol),
            Some(&b[0].source)
        );
        (census.kernels_compiled, census.kernels_loaded)
    };
    assert_eq!(run(&FileBackend::on_host(1)), (1, 0));
    assert_eq!(run(&FileBackend::on_host(2)), (1, 0));
    assert_eq!(
        run(&FileBackend::on_host(1)),
        (0, 1),
        "host one's entry is gone"
    );
    assert_eq!(
        run(&FileBackend::on_host(2)),
        (0, 1),
        "host two's entry is gone"
    );
    assert_eq!(run(&FileBackend::new()), (1, 0));
    assert_eq!(run(&FileBackend::new()), (0, 1));
    let mut want = vec![
        format!("k-{KEY_0_ON_HOST_1}"),
        format!("k-{KEY_0_ON_HOST_2}"),
        format!("k-{KEY_0}"),
    ];
    want.sort();
    assert_eq!(names(store.dir(), "k-"), want);
    // Each compile lock is named as its entry.
    let locks: Vec<String> = want.iter().map(|n| n.replacen("k-", "c-", 1)).collect();
    assert_eq!(names(store.dir(), "c-"), locks);
    assert_eq!(names(store.dir(), "b-").len(), 3);
    // Each entry answers its own host's probe only.
    let (one, _) = store
        .probe_host("file-backend 1", "key-0", Some([1; 32]))
        .expect("host one's entry");
    assert!(
        one.bytes
            .starts_with(format!("host\t{:?}", [1u8; 32]).as_bytes())
    );
    let (none, _) = store
        .probe("file-backend 1", "key-0")
        .expect("the entry without");
    assert!(!none.bytes.starts_with(b"host"));
    assert_eq!(
        store
            .probe_host("file-backend 1", "key-0", Some([3; 32]))
            .err(),
        Some(MissReason::NoEntry)
    );
}

/// A backend that cannot tell what a kernel's options mean on its machine (`host_part`
/// fails) still gets its kernel compiled: the key is not looked up (`HostUnknown`), not
/// locked and not saved (`NotSaved::Backend`, saying why), so nothing is written under a
/// name that could mean another machine's program; the next resolve compiles again.
#[test]
fn a_host_part_the_backend_cannot_tell_compiles_without_the_store() {
    let tmp = tempfile::tempdir().expect("tmp");
    let store = KernelStore::new(tmp.path().join("kernels"));
    let b = batch(0, 2, "k");
    let backend = FileBackend {
        host_fails: true,
        ..FileBackend::on_host(1)
    };
    for _ in 0..2 {
        let ((out, census), events) = resolved(&store, &b, &backend);
        let answers = out.expect("a host part that cannot be told never fails a resolve");
        for (k, a) in b.iter().zip(&answers) {
            assert_eq!(a.program.kernels.get(&*a.symbol), Some(&k.source));
        }
        assert_eq!((census.kernels_compiled, census.kernels_loaded), (2, 0));
        let why = misses(&events);
        assert_eq!(why.len(), 2, "{events:?}");
        assert!(
            why.iter()
                .all(|m| matches!(m, MissReason::HostUnknown(m) if m.contains("cannot ask"))),
            "{events:?}"
        );
        let not_saved = events
            .iter()
            .filter(|e| {
                matches!(&e.outcome, Outcome::NotSaved(NotSaved::Backend(m)) if m.contains("cannot ask"))
            })
            .count();
        assert_eq!(not_saved, 2, "{events:?}");
    }
    assert!(
        !store.dir().exists(),
        "nothing to look up, lock or save: the directory is not even made"
    );
}

#[test]
fn verify_reports_what_a_lookup_would_refuse_and_changes_nothing() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("kernels");
    let store = KernelStore::new(&dir);
    save(&store, &batch(300, 2, "v"));
    let before_first = names(&dir, "k-");
    let clean = store.verify().expect("verify");
    assert_eq!((clean.entries, clean.blobs), (2, 1), "{clean:?}");
    assert!(clean.problems.is_empty(), "{clean:?}");
    // A second program whose blob is then damaged: its blob and its entry are problems.
    let before = (names(&dir, "k-"), names(&dir, "b-"));
    save(&store, &batch(400, 1, "w"));
    let second_entry = added(&dir, "k-", &before.0);
    let second_blob = added(&dir, "b-", &before.1);
    let mut bytes = fs::read(dir.join(&second_blob)).expect("read");
    let last = bytes.len() - 1;
    bytes[last] ^= 1;
    fs::write(dir.join(&second_blob), &bytes).expect("damage");
    // A malformed entry.
    let malformed = format!("k-{}", "e".repeat(64));
    fs::write(dir.join(&malformed), b"not an entry").expect("write");
    fs::set_permissions(dir.join(&malformed), fs::Permissions::from_mode(0o600)).expect("chmod");
    // An entry of the first program rewritten to name a third program's (sound) blob.
    let before = names(&dir, "b-");
    save(&store, &batch(500, 1, "x"));
    let third_blob = added(&dir, "b-", &before);
    let swapped = names(&dir, "k-")
        .into_iter()
        .find(|n| before_first.contains(n))
        .expect("an entry of the first program");
    let text = fs::read_to_string(dir.join(&swapped)).expect("read");
    let blob_line = text
        .lines()
        .find(|l| l.starts_with("blob "))
        .expect("blob line");
    let forged = text.replace(blob_line, &format!("blob {}", &third_blob[2..]));
    fs::write(dir.join(&swapped), forged).expect("swap");
    let listing = |dir: &Path| -> Vec<(String, Vec<u8>)> {
        let mut all: Vec<(String, Vec<u8>)> = fs::read_dir(dir)
            .expect("list")
            .map(|e| e.expect("item"))
            .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
            .map(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                (name, fs::read(e.path()).expect("read"))
            })
            .filter(|(name, _)| name.starts_with("k-") || name.starts_with("b-"))
            .collect();
        all.sort();
        all
    };
    let files_before = listing(&dir);
    let v = store.verify().expect("verify");
    assert_eq!((v.entries, v.blobs), (5, 3), "{v:?}");
    let flagged: Vec<&str> = v.problems.iter().map(|(n, _)| n.as_str()).collect();
    let mut expected = vec![
        second_blob.as_str(),
        second_entry.as_str(),
        swapped.as_str(),
    ];
    expected.push(&malformed);
    expected.sort_unstable();
    assert_eq!(flagged, expected, "{v:?}");
    for (name, why) in &v.problems {
        let want = if name.starts_with("b-") {
            "does not hash to its name"
        } else if *name == malformed {
            "malformed entry"
        } else if *name == swapped {
            "does not hold `v_30"
        } else {
            "does not hash to its name"
        };
        assert!(why.contains(want), "{name}: {why}");
    }
    assert_eq!(listing(&dir), files_before, "verify changed the store");
    // A lookup agrees: the third program is found, and of the first program's two kernels
    // exactly the one whose entry was swapped is a miss.
    assert!(store.probe("file-backend 1", "key-500").is_ok());
    let missed = (300..302)
        .filter(|i| store.probe("file-backend 1", &format!("key-{i}")).is_err())
        .count();
    assert_eq!(missed, 1);
}

/// The one name with `prefix` in `dir` that is not in `before`.
fn added(dir: &Path, prefix: &str, before: &[String]) -> String {
    let new: Vec<String> = names(dir, prefix)
        .into_iter()
        .filter(|n| !before.contains(n))
        .collect();
    assert_eq!(new.len(), 1, "{new:?}");
    new[0].clone()
}
