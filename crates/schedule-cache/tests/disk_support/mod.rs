//! Helpers shared by the `disk_*` integration tests.
#![allow(dead_code, unreachable_pub)]

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Child;

use schedule_cache::CacheKey;
use schedule_cache::placement::{Direction, Flip, PlacementEntry, Shipped};

/// The digest every test entry uses (the first key component).
pub const DIGEST: &str = "5eed0000aa";

/// A key `DIGEST-<rest>`.
pub fn key(rest: &str) -> CacheKey {
    CacheKey::new(&format!("{DIGEST}-{rest}")).expect("valid key")
}

/// A placement entry whose flips encode `(a, b, c)` followed by `extra` flips derived from
/// them, so [`decode_payload`] can tell whether an entry is one some writer produced whole.
pub fn payload(a: u32, b: u32, c: u32, extra: u32) -> PlacementEntry {
    let dir = |x: u32| match x % 3 {
        0 => Direction::Materialize,
        1 => Direction::Inline,
        _ => Direction::Footprint,
    };
    let mut flips = vec![
        Flip {
            node: a,
            direction: Direction::Materialize,
        },
        Flip {
            node: b,
            direction: Direction::Inline,
        },
        Flip {
            node: c,
            direction: Direction::Footprint,
        },
        Flip {
            node: extra,
            direction: Direction::Materialize,
        },
    ];
    let mut x = a.wrapping_mul(2_654_435_761) ^ b.wrapping_mul(40_503) ^ c ^ extra;
    for _ in 0..extra {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        flips.push(Flip {
            node: x,
            direction: dir(x),
        });
    }
    let shipped = match (a + b + c) % 3 {
        0 => Shipped::A,
        1 => Shipped::B,
        _ => Shipped::Refined,
    };
    PlacementEntry::new(DIGEST, flips, shipped)
}

/// `(a, b, c)` if `e` is exactly `payload(a, b, c, extra)` for the numbers it records.
pub fn decode_payload(e: &PlacementEntry) -> Option<(u32, u32, u32)> {
    let [a, b, c, extra] = [0, 1, 2, 3].map(|i| e.flips.get(i).map(|f| f.node));
    let (a, b, c, extra) = (a?, b?, c?, extra?);
    (payload(a, b, c, extra) == *e).then_some((a, b, c))
}

/// Every file under `root` (recursively) with its content; directories as empty markers.
pub fn snapshot(root: &Path) -> BTreeMap<PathBuf, Option<Vec<u8>>> {
    let mut out = BTreeMap::new();
    fn walk(p: &Path, out: &mut BTreeMap<PathBuf, Option<Vec<u8>>>) {
        let Ok(rd) = fs::read_dir(p) else { return };
        for item in rd.flatten() {
            let path = item.path();
            if item.file_type().is_ok_and(|t| t.is_dir()) {
                out.insert(path.clone(), None);
                walk(&path, out);
            } else {
                out.insert(path.clone(), Some(fs::read(&path).unwrap_or_default()));
            }
        }
    }
    walk(root, &mut out);
    out
}

/// Names in `dir` that start with the staging prefix.
pub fn staging_names(dir: &Path) -> Vec<String> {
    fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .filter_map(|e| e.file_name().to_str().map(str::to_owned))
                .filter(|n| cache_dir::is_staging(n))
                .collect()
        })
        .unwrap_or_default()
}

/// The uid and gid of user `nobody`, as whom a root test runs a child that must not be
/// able to write (permission bits do not bind root).
const NOBODY: u32 = 65534;

/// Runs the test `child_test` of this test binary again, in a child process that cannot
/// write `dir`, with `env_var` naming `dir`: everything under `tmp` is made readable by
/// all, `dir` read-only (mode 0555, restored after), and as root the child runs as user
/// `nobody`. Fails unless the child passed exactly one test. The child test must return at
/// once when `env_var` is unset (so it passes when the whole binary runs), and should
/// check that it cannot write `dir`, or it shows nothing.
pub fn run_child_as_reader(child_test: &str, env_var: &str, tmp: &Path, dir: &Path) {
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::process::CommandExt;
    for item in walk(tmp) {
        let mode = if item.is_dir() { 0o755 } else { 0o644 };
        fs::set_permissions(&item, fs::Permissions::from_mode(mode)).expect("chmod");
    }
    fs::set_permissions(dir, fs::Permissions::from_mode(0o555)).expect("chmod");
    let mut cmd = std::process::Command::new(std::env::current_exe().expect("exe"));
    cmd.args(["--exact", child_test, "--nocapture", "--test-threads=1"])
        .env(env_var, dir);
    if is_root() {
        cmd.uid(NOBODY).gid(NOBODY);
    }
    let out = cmd.output().expect("spawn the reader");
    fs::set_permissions(dir, fs::Permissions::from_mode(0o755)).expect("chmod back");
    assert!(
        out.status.success(),
        "reader failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("1 passed"),
        "the child ran no test: {stdout}"
    );
}

/// `path` and everything below it.
fn walk(path: &Path) -> Vec<PathBuf> {
    let mut out = vec![path.to_path_buf()];
    if path.is_dir() {
        for item in fs::read_dir(path).expect("ls").flatten() {
            out.extend(walk(&item.path()));
        }
    }
    out
}

/// Whether this process runs as root (the owner of a file it just created is uid 0).
pub fn is_root() -> bool {
    use std::os::unix::fs::MetadataExt;
    let f = tempfile::NamedTempFile::new().expect("tempfile");
    f.as_file().metadata().expect("stat").uid() == 0
}

/// Child processes killed (SIGKILL) and reaped when dropped, so a failing test never leaks
/// workers.
#[derive(Default)]
pub struct Children(pub Vec<Child>);

impl Drop for Children {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// A small deterministic generator (test-support's xorshift64*); `Rng::from_env_or_clock`
/// seeds it per test run from the clock and pid and prints the seed, so a failure can be
/// rerun with the same seed via `KCACHE_TEST_SEED`.
#[allow(unused_imports)]
pub use test_support::Rng;
