//! The kernel store as a trust boundary against another local user, with real processes
//! (issue 25): under umask `002` and `000` no file of the store is ever open to the group
//! (a victim process compiles, saves and evicts while a group member's process tries to open
//! every file read-write); an entry rewritten to name another kernel's blob is a miss; a
//! symbolic link at the store's path is refused with nothing written into its target; a
//! process holding `cache.lock` and stopped with `SIGSTOP` costs a resolve that must evict
//! its lock wait, never a hang.
//!
//! The users: as root (as CI runs) the set-up creates a group and two users in it, a victim
//! and an attacker, and runs each child (this test binary again) as one of them. As
//! another user the cases that need them say so and return.

use std::collections::HashMap;
use std::fs;
use std::io::Write;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::Duration;

use kernel_cache::store::{KernelStore, MissReason, NotSaved, Outcome, StoreEvent};
use kernel_cache::{Backend, BatchKernel, Compiled, Group, KernelCache, Resolver, SavedProgram};
use test_support::lines::misses;
use test_support::lines::recorded;
use test_support::lock::LockHolder;

/// Far above any honest operation on a loaded machine; only a hang reaches it.
const HANG: Duration = Duration::from_secs(120);

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct TextError(String);

/// A program: its kernels' `(symbol, text)` pairs.
#[derive(Debug)]
struct TextProgram {
    kernels: HashMap<String, String>,
}

/// Compiles a group to `symbol\ttext` lines; saves and loads those lines.
struct TextBackend {
    compiles: AtomicU64,
}

impl TextBackend {
    fn new() -> TextBackend {
        TextBackend {
            compiles: AtomicU64::new(0),
        }
    }
}

fn parse(bytes: &[u8]) -> Result<TextProgram, TextError> {
    let text = std::str::from_utf8(bytes).map_err(|e| TextError(e.to_string()))?;
    let mut kernels = HashMap::new();
    for line in text.lines() {
        let (s, t) = line
            .split_once('\t')
            .ok_or_else(|| TextError("malformed".into()))?;
        kernels.insert(s.to_string(), t.to_string());
    }
    Ok(TextProgram { kernels })
}

fn render(p: &TextProgram) -> (Vec<u8>, Vec<String>) {
    let mut symbols: Vec<String> = p.kernels.keys().cloned().collect();
    symbols.sort();
    let mut text = String::new();
    for s in &symbols {
        text.push_str(&format!("{s}\t{}\n", p.kernels[s]));
    }
    (text.into_bytes(), symbols)
}

impl Backend for TextBackend {
    type Source = String;
    type Program = TextProgram;
    type Error = TextError;

    fn compile_group(&self, g: &Group<'_, String>) -> Result<Compiled<TextProgram>, TextError> {
        self.compiles.fetch_add(1, Ordering::SeqCst);
        let kernels = g
            .kernels
            .iter()
            .map(|k| (k.symbol.to_string(), k.source.clone()))
            .collect();
        Ok(Compiled {
            weight: 1,
            program: TextProgram { kernels },
        })
    }

    fn identity(&self) -> Option<String> {
        Some("text-backend 1".into())
    }

    fn save(&self, p: &TextProgram) -> Option<Result<SavedProgram, TextError>> {
        let (bytes, symbols) = render(p);
        Some(Ok(SavedProgram { bytes, symbols }))
    }

    fn load(&self, saved: &SavedProgram) -> Option<Result<Compiled<TextProgram>, TextError>> {
        Some(parse(&saved.bytes).map(|program| Compiled { weight: 1, program }))
    }

    fn keeps_saved(&self, _error: &TextError) -> bool {
        false
    }

    fn host_part(&self, _options: &[String]) -> Result<Option<[u8; 32]>, TextError> {
        Ok(None)
    }
}

/// One kernel `key`, compiled under `symbol`, whose text is `text`.
fn kernel(key: &str, symbol: &str, text: &str) -> BatchKernel<String> {
    BatchKernel {
        key: key.into(),
        options: vec![],
        symbol: symbol.into(),
        source: text.into(),
    }
}

/// `n` kernels `{prefix}-{i}`, each with a text of about 300 bytes.
fn batch(prefix: &str, first: usize, n: usize) -> Vec<BatchKernel<String>> {
    (first..first + n)
        .map(|i| {
            kernel(
                &format!("{prefix}-{i}"),
                &format!("f_{i}"),
                &format!("kernel {i} {}", "x".repeat(300)),
            )
        })
        .collect()
}

/// Resolves `b` over `store` with an empty cache, as a new process would: the answers'
/// texts by key, how many compiles, and the store's events.
fn resolve(store: &KernelStore, b: &[BatchKernel<String>]) -> (Vec<String>, u64, Vec<StoreEvent>) {
    let backend = TextBackend::new();
    let ((answers, _census), events) = recorded(
        Resolver::new(&KernelCache::new(1 << 20), &backend)
            .store(Some(store))
            .resolve_strict(b),
    );
    let answers = answers.expect("a resolve never fails for the store's sake");
    let texts = answers
        .iter()
        .map(|a| a.program.kernels[&*a.symbol].clone())
        .collect();
    (texts, backend.compiles.load(Ordering::SeqCst), events)
}

/// The name of `key`'s entry under the text backend (the formula of `docs/disk-format.md`).
fn entry_path(dir: &Path, key: &str) -> PathBuf {
    let digest = canonical_text::digest_of_parts(&[
        b"kcache-kernel-store-entry-1",
        b"text-backend 1",
        key.as_bytes(),
    ]);
    dir.join(format!("k-{digest}"))
}

fn entry_field(entry: &str, field: &str) -> String {
    entry
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{field} ")))
        .unwrap_or_else(|| panic!("no {field} in {entry}"))
        .to_string()
}

/// Two kernels compiled as two programs under one symbol name `f`: rewriting the first's
/// entry to name the second's blob (a valid blob, its digest right, `f` in its table) is a
/// `WrongBlob` miss, the entry removed, and the kernel compiled again with its own text.
/// (With the check that the blob lists the entry's kernel removed, the resolve loaded the
/// other kernel's program and answered its text, and the test failed.)
#[test]
fn an_entry_pointed_at_another_kernels_blob_is_a_miss() {
    let tmp = tempfile::tempdir().expect("tmp");
    let store = KernelStore::new(tmp.path().join("kernels"));
    let a = [kernel("key-a", "f", "the text of a")];
    let b = [kernel("key-b", "f", "the text of b")];
    resolve(&store, &a);
    resolve(&store, &b);
    let (path_a, path_b) = (
        entry_path(store.dir(), "key-a"),
        entry_path(store.dir(), "key-b"),
    );
    let entry_a = fs::read_to_string(&path_a).expect("a's entry");
    let entry_b = fs::read_to_string(&path_b).expect("b's entry");
    let (blob_a, blob_b) = (entry_field(&entry_a, "blob"), entry_field(&entry_b, "blob"));
    assert_ne!(blob_a, blob_b);
    assert_eq!(
        resolve(&store, &a).0,
        ["the text of a"],
        "a hits its own blob"
    );
    let forged = entry_a.replace(&blob_a, &blob_b);
    fs::write(&path_a, forged).expect("rewrite a's entry");
    let (texts, compiles, events) = resolve(&store, &a);
    assert_eq!(texts, ["the text of a"], "{events:?}");
    assert_eq!(compiles, 1);
    assert_eq!(misses(&events), [MissReason::WrongBlob], "{events:?}");
    // The forged entry went; the compile saved a's entry again, naming a's blob.
    let again = fs::read_to_string(&path_a).expect("saved again");
    assert_eq!(entry_field(&again, "blob"), blob_a);
    // b is untouched and still hits.
    assert_eq!(resolve(&store, &b).1, 0);
}

/// A symbolic link at the store's path (planted where the store would create its
/// directory, pointing at a directory its planter chose) is refused: `create` says why, a
/// resolve compiles without the store (a `NotPrivate` miss, `NotSaved`), and nothing is
/// written into the link's target. (Following it, as `create_dir_all` and the lock file's
/// open do, the store wrote its lock file, stamp, blob and entries there and the test
/// failed.)
#[test]
fn a_symbolic_link_at_the_store_path_is_refused() {
    let tmp = tempfile::tempdir().expect("tmp");
    let target = tmp.path().join("planted");
    fs::create_dir(&target).expect("mkdir");
    fs::set_permissions(&target, fs::Permissions::from_mode(0o700)).expect("chmod");
    let link = tmp.path().join("kernels");
    std::os::unix::fs::symlink(&target, &link).expect("symlink");
    let store = KernelStore::new(&link);
    let err = store.create().expect_err("a link is refused");
    assert!(err.to_string().contains("symbolic link"), "{err}");
    let (texts, compiles, events) = resolve(&store, &batch("l", 0, 2));
    assert_eq!((texts.len(), compiles), (2, 1));
    assert!(
        matches!(&misses(&events)[0], MissReason::NotPrivate(m) if m.contains("symbolic link")),
        "{events:?}"
    );
    assert!(
        events
            .iter()
            .any(|e| matches!(&e.outcome, Outcome::NotSaved(NotSaved::Refused(_)))),
        "{events:?}"
    );
    assert_eq!(fs::read_dir(&target).expect("list").count(), 0);
    assert!(store.stats().is_err());
}

/// A process holding `cache.lock` **exclusively** (as an evicting or collecting process
/// does) and stopped: a resolve's lookup gives up after the lock wait (a `Refused` miss
/// saying so), it compiles, its save gives up without waiting (`NotSaved(Refused)`: the
/// resolve's lock wait is used up and the store backs off), and its answers are right: a
/// stopped holder costs the resolve its bound, not a hang. (With the blocking `flock` of
/// before, the lookup never returned.)
#[test]
fn a_stopped_exclusive_holder_costs_a_resolve_its_bound_not_a_hang() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("kernels");
    let store = KernelStore::new(&dir).with_lock_wait(Duration::from_millis(300));
    store.create().expect("create");
    let mut holder = LockHolder::hold(&dir, "cache.lock", true);
    holder.stop();
    let (tx, rx) = mpsc::channel();
    let s = store.clone();
    std::thread::spawn(move || {
        let _ = tx.send(resolve(&s, &batch("x", 0, 2)));
    });
    let got = rx.recv_timeout(HANG);
    holder.kill();
    let (texts, compiles, events) = got.expect("a resolve hung on the stopped holder's lock");
    assert_eq!(
        texts,
        batch("x", 0, 2)
            .iter()
            .map(|k| k.source.clone())
            .collect::<Vec<_>>()
    );
    assert_eq!(compiles, 1);
    assert!(
        misses(&events).iter().all(
            |m| matches!(m, MissReason::Refused(why) if why.contains("gave up after waiting"))
        ),
        "{events:?}"
    );
    assert!(
        events.iter().any(|e| matches!(&e.outcome,
            Outcome::NotSaved(NotSaved::Refused(why)) if why.contains("not waited for"))),
        "{events:?}"
    );
}

/// A process holding `cache.lock` shared (`flock(1)`, in a process group of its own) and
/// stopped with `SIGSTOP`, while a resolve compiles and saves programs past the store's
/// byte limit: the resolve returns (its answers right) after at most its lock wait; the
/// eviction it could not do is reported as `LockTimedOut` (later ones, the store backing
/// off, as `LockSkipped`), the programs were saved (a shared lock is free at once). Once the holder is gone a trim brings the store under its limit. (With the
/// blocking `flock` of before, the eviction's exclusive lock never came and the test failed
/// at its hang bound.)
#[test]
fn a_stopped_lock_holder_costs_an_evicting_resolve_its_bound_not_a_hang() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("kernels");
    let store = KernelStore::new(&dir)
        .with_max_bytes(6000)
        .with_lock_wait(Duration::from_millis(500));
    store.create().expect("create");
    let mut holder = LockHolder::hold(&dir, "cache.lock", false);
    holder.stop();
    let (tx, rx) = mpsc::channel();
    let s = store.clone();
    std::thread::spawn(move || {
        let mut all = Vec::new();
        for i in 0..4 {
            let b = batch("e", i * 4, 4);
            let (texts, compiles, events) = resolve(&s, &b);
            let right = texts.iter().zip(&b).all(|(t, k)| *t == k.source);
            all.push((right, compiles, events));
        }
        let _ = tx.send(all);
    });
    let got = rx.recv_timeout(HANG);
    holder.kill();
    let got = got.expect("a resolve hung on the stopped holder's lock");
    let mut timed_out = 0;
    for (right, compiles, events) in &got {
        assert!(right, "{events:?}");
        assert_eq!(*compiles, 1, "{events:?}");
        assert!(
            events
                .iter()
                .any(|e| matches!(e.outcome, Outcome::Saved { .. })),
            "{events:?}"
        );
        timed_out += events
            .iter()
            .filter(|e| matches!(&e.outcome, Outcome::LockTimedOut { during } if during.contains("evict")))
            .count();
    }
    assert!(timed_out >= 1, "no eviction was reported given up: {got:?}");
    assert!(store.stats().expect("stats").bytes > 6000);
    let trimmed = store.trim(6000).expect("free now");
    assert!(trimmed.bytes_left <= 6000, "{trimmed:?}");
}

// ---- Another user in the group -------------------------------------------------------

const ROLE: &str = "KTRUST_ROLE";
const DIR: &str = "KTRUST_DIR";
const NAMES: &str = "KTRUST_NAMES";
const STOP: &str = "KTRUST_STOP";
const GROUP: &str = "kc25grp";
const VICTIM: &str = "kc25victim";
const ATTACKER: &str = "kc25attack";

/// The children's bodies; a no-op unless this process was spawned as one.
///
/// - `victim`: resolves 12 programs of 2 kernels into a store of at most 6000 bytes (saves
///   evict), prints how many kernels were saved and refused and blobs evicted.
/// - `attacker`: until the stop file appears, reads the list of paths the parent saw in
///   the store and tries to open each read-write (and to list the store), then prints
///   its tries and successes.
#[test]
fn child() {
    let Ok(role) = std::env::var(ROLE) else {
        return;
    };
    let dir = PathBuf::from(std::env::var(DIR).expect("dir"));
    match role.as_str() {
        "victim" => {
            let store = KernelStore::new(&dir).with_max_bytes(6000);
            let (mut saved, mut evicted, mut refused) = (0, 0, 0);
            let mut other = Vec::new();
            for i in 0..12 {
                let (texts, _, events) = resolve(&store, &batch("v", i * 2, 2));
                assert_eq!(texts.len(), 2);
                for e in &events {
                    match &e.outcome {
                        Outcome::Saved { .. } => saved += 1,
                        Outcome::Evicted { .. } => evicted += 1,
                        Outcome::Miss(MissReason::NotPrivate(_)) => refused += 1,
                        Outcome::Miss(MissReason::NoEntry | MissReason::NoDirectory) => {}
                        o => other.push(format!("{o:?}")),
                    }
                }
            }
            if !other.is_empty() {
                eprintln!("victim's other events: {other:?}");
            }
            println!("RESULT saved={saved} evicted={evicted} refused={refused}");
        }
        "attacker" => {
            let names = PathBuf::from(std::env::var(NAMES).expect("names"));
            let stop = PathBuf::from(std::env::var(STOP).expect("stop"));
            let (mut tries, mut opened, mut listed) = (0u64, Vec::new(), 0u64);
            let mut rounds = 0u64;
            while !stop.exists() || rounds < 2 {
                rounds += 1;
                if fs::read_dir(&dir).is_ok() {
                    listed += 1;
                }
                let list = fs::read_to_string(&names).unwrap_or_default();
                for p in list.lines() {
                    tries += 1;
                    if fs::OpenOptions::new()
                        .read(true)
                        .write(true)
                        .open(p)
                        .is_ok()
                    {
                        opened.push(p.to_string());
                    }
                }
            }
            opened.sort();
            opened.dedup();
            let shown: Vec<&str> = opened.iter().take(3).map(String::as_str).collect();
            println!(
                "RESULT tries={tries} listed={listed} opened={} opened_count={}",
                shown.join(","),
                opened.len()
            );
        }
        other => panic!("unknown role {other}"),
    }
}

fn result(out: std::process::Output, who: &str) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{who} failed: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
        .lines()
        .find_map(|l| l.split_once("RESULT ").map(|(_, r)| r.to_string()))
        .unwrap_or_else(|| panic!("no RESULT from {who}: {stdout}"))
}

fn field(result: &str, name: &str) -> String {
    result
        .split_whitespace()
        .find_map(|f| f.strip_prefix(&format!("{name}=")))
        .unwrap_or_else(|| panic!("no {name} in {result}"))
        .to_string()
}

/// The uid of `user` and the gid of [`GROUP`], creating both (as root) if needed.
fn ids(user: &str) -> (u32, u32) {
    let id = |args: &[&str]| -> Option<u32> {
        let out = Command::new("id").args(args).output().ok()?;
        String::from_utf8_lossy(&out.stdout).trim().parse().ok()
    };
    if Command::new("getent")
        .args(["group", GROUP])
        .output()
        .is_ok_and(|o| !o.status.success())
    {
        let _ = Command::new("groupadd").arg(GROUP).status();
    }
    if id(&["-u", user]).is_none() {
        let _ = Command::new("useradd")
            .args(["-M", "-N", "-g", GROUP, "-s", "/usr/sbin/nologin", user])
            .status();
    }
    let uid = id(&["-u", user]).expect("the user exists");
    let gid = id(&["-g", user]).expect("its group");
    (uid, gid)
}

/// Runs the children: the victim under `umask` on `store`, and concurrently the attacker;
/// meanwhile lists the store (as root) for the attacker. The victim's and attacker's
/// results, and every mode seen (path, mode) during and after the run.
fn attack(root: &Path, store: &Path, umask: &str) -> (String, String, Vec<(PathBuf, u32)>) {
    let (victim, gid) = ids(VICTIM);
    let (attacker, _) = ids(ATTACKER);
    let names = root.join("names");
    let stop = root.join("stop");
    fs::write(&names, "").expect("names");
    fs::set_permissions(&names, fs::Permissions::from_mode(0o644)).expect("chmod");
    let exe = std::env::current_exe().expect("exe");
    let spawn = |role: &str, uid: u32, umask: &str| {
        Command::new("sh")
            .arg("-c")
            .arg(format!("umask {umask}; exec \"$0\" \"$@\""))
            .arg(&exe)
            .args(["--exact", "child", "--nocapture", "--test-threads=1"])
            .env(ROLE, role)
            .env(DIR, store)
            .env(NAMES, &names)
            .env(STOP, &stop)
            .uid(uid)
            .gid(gid)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn a child")
    };
    let attacker = spawn("attacker", attacker, "022");
    let victim = spawn("victim", victim, umask);
    let done = AtomicBool::new(false);
    let mut seen: Vec<(PathBuf, u32)> = Vec::new();
    let (victim_out, seen) = std::thread::scope(|s| {
        let watcher = s.spawn(|| {
            while !done.load(Ordering::SeqCst) {
                let mut list = String::new();
                for (p, mode) in walk(store) {
                    list.push_str(&format!("{}\n", p.display()));
                    seen.push((p, mode));
                }
                let tmp = root.join("names.tmp");
                if fs::write(&tmp, &list).is_ok() {
                    let _ = fs::set_permissions(&tmp, fs::Permissions::from_mode(0o644));
                    let _ = fs::rename(&tmp, &names);
                }
                std::thread::sleep(Duration::from_millis(2));
            }
            seen
        });
        let out = victim.wait_with_output().expect("victim");
        done.store(true, Ordering::SeqCst);
        (out, watcher.join().expect("watcher"))
    });
    let mut seen = seen;
    seen.extend(walk(store));
    fs::File::create(&stop)
        .expect("stop")
        .flush()
        .expect("flush");
    let attacker_out = attacker.wait_with_output().expect("attacker");
    (
        result(victim_out, "victim"),
        result(attacker_out, "attacker"),
        seen,
    )
}

/// Every path under `dir` (itself included) with its mode bits (and the directory bit),
/// never following a link.
fn walk(dir: &Path) -> Vec<(PathBuf, u32)> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(p) = todo.pop() {
        let Ok(meta) = fs::symlink_metadata(&p) else {
            continue;
        };
        out.push((p.clone(), meta.mode() & 0o47777));
        if meta.is_dir()
            && let Ok(items) = fs::read_dir(&p)
        {
            todo.extend(items.filter_map(Result::ok).map(|e| e.path()));
        }
    }
    out
}

/// Under umask `002` and `000`, a victim process (a user whose primary group an attacker
/// shares) compiles, saves and evicts in a store its run creates, while the attacker's
/// process tries to open every path seen in the store read-write, and to list it: it never
/// succeeds, and every file seen at any moment (entries, blobs, stamp, lock, counters,
/// compile locks, staging) is `0600` in `0700` directories. A directory made by hand
/// reachable by the group (`0750`) is refused, nothing saved in it, nothing opened.
/// (Before: the stamp, lock file and counters were left group-writable under umask `002`
/// and `000` and the mode check failed; in the `0750` directory, which was accepted, the
/// attacker opened the new entries read-write.)
#[test]
fn another_user_in_the_group_never_opens_a_file_of_the_store() {
    if cache_dir::current_uid() != 0 {
        eprintln!("not root: cannot create the second user; nothing to show");
        return;
    }
    for umask in ["002", "000"] {
        let tmp = tempfile::tempdir().expect("tmp");
        let root = tmp.path().to_path_buf();
        fs::set_permissions(&root, fs::Permissions::from_mode(0o755)).expect("chmod");
        let (victim, gid) = ids(VICTIM);
        let home = root.join("home");
        fs::create_dir(&home).expect("mkdir");
        std::os::unix::fs::chown(&home, Some(victim), Some(gid)).expect("chown");
        fs::set_permissions(&home, fs::Permissions::from_mode(0o775)).expect("chmod");

        let store = home.join("kernels");
        let (v, a, seen) = attack(&root, &store, umask);
        assert!(field(&v, "saved").parse::<u64>().expect("n") >= 12, "{v}");
        assert!(field(&v, "evicted").parse::<u64>().expect("n") >= 1, "{v}");
        assert_eq!(
            field(&a, "opened"),
            "",
            "umask {umask}: the attacker opened files: {a}"
        );
        assert_eq!(field(&a, "listed"), "0", "{a}");
        assert!(field(&a, "tries").parse::<u64>().expect("n") > 0, "{a}");
        // S_IFDIR (0o40000) tells a directory from a file.
        let files = seen.iter().filter(|(_, m)| m & 0o40000 == 0).count();
        assert!(files > 10, "{seen:?}");
        for (p, mode) in &seen {
            let want = if mode & 0o40000 != 0 { 0o40700 } else { 0o600 };
            assert_eq!(*mode, want, "umask {umask}: {} was {mode:o}", p.display());
        }

        // A directory the group may reach, made by hand: refused, untouched.
        let reachable = home.join("reachable");
        fs::create_dir(&reachable).expect("mkdir");
        std::os::unix::fs::chown(&reachable, Some(victim), Some(gid)).expect("chown");
        fs::set_permissions(&reachable, fs::Permissions::from_mode(0o750)).expect("chmod");
        let (v, a, _) = attack(&root, &reachable, umask);
        assert_eq!(field(&v, "saved"), "0", "{v}");
        assert!(field(&v, "refused").parse::<u64>().expect("n") >= 24, "{v}");
        assert_eq!(field(&a, "opened"), "", "{a}");
        assert_eq!(fs::read_dir(&reachable).expect("list").count(), 0);
    }
}
