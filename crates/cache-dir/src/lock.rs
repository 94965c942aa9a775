//! Mutual exclusion on one cache directory: an in-process reader/writer lock per directory,
//! then an advisory lock (`flock`) on the directory's permanent lock file.
//!
//! The in-process lock matters where the platform's file lock is per process rather than per
//! open file (Linux emulates `flock` with `fcntl` record locks on NFS): threads of one process
//! must still exclude each other there.
//!
//! The lock file is opened read-write (created if asked), never truncated and never unlinked.
//! Where that open is refused because this process cannot write the directory (`EACCES`,
//! `EPERM`, `EROFS`: a read-only mount, another user's cache), a **shared** hold falls back:
//! it opens an existing lock file read-only (`flock` needs no write access on a local file
//! system) and, if there is none, holds no file lock at all ([`Held::is_lock_free`]); the
//! cache-open then re-checks the stamp after the caller's reads (see
//! [`CacheDir::with_shared`](crate::CacheDir::with_shared)). An exclusive hold never falls back.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};

use crate::read::{read_flags, retry};

/// Name of the permanent lock file inside a cache directory. Part of the on-disk format:
/// it is created read-write on first open and must never be unlinked while the cache is live.
pub const LOCK_FILE: &str = "cache.lock";

/// How a hold covers the directory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Entry reads and writes at an admitted regime.
    Shared,
    /// Regime transitions, staging sweeps, eviction and garbage collection.
    Exclusive,
}

#[derive(Default)]
struct DirLock {
    state: Mutex<State>,
    released: Condvar,
}

#[derive(Default)]
struct State {
    readers: usize,
    writer: bool,
}

fn lock_ignoring_poison<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // The protected data are plain counters that are always consistent, so a panic in some
    // other thread while it held the mutex leaves nothing to repair.
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl DirLock {
    fn acquire(&self, mode: Mode) {
        let mut st = lock_ignoring_poison(&self.state);
        loop {
            let free = match mode {
                Mode::Shared => !st.writer,
                Mode::Exclusive => !st.writer && st.readers == 0,
            };
            if free {
                break;
            }
            st = self
                .released
                .wait(st)
                .unwrap_or_else(|poisoned| poisoned.into_inner());
        }
        match mode {
            Mode::Shared => st.readers += 1,
            Mode::Exclusive => st.writer = true,
        }
    }

    fn release(&self, mode: Mode) {
        let mut st = lock_ignoring_poison(&self.state);
        match mode {
            Mode::Shared => st.readers = st.readers.saturating_sub(1),
            Mode::Exclusive => st.writer = false,
        }
        drop(st);
        self.released.notify_all();
    }
}

fn registry() -> &'static Mutex<HashMap<PathBuf, Arc<DirLock>>> {
    static REGISTRY: OnceLock<Mutex<HashMap<PathBuf, Arc<DirLock>>>> = OnceLock::new();
    REGISTRY.get_or_init(Default::default)
}

/// The directory's locks, held until dropped (file lock released first).
pub(crate) struct Held {
    dir_lock: Arc<DirLock>,
    mode: Mode,
    file: Option<File>,
    lock_free: bool,
}

impl Held {
    pub(crate) fn mode(&self) -> Mode {
        self.mode
    }

    /// Whether this shared hold has no file lock (a directory this process cannot write and
    /// that has no lock file).
    pub(crate) fn is_lock_free(&self) -> bool {
        self.lock_free
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        // Closing the only descriptor of the open file releases the flock.
        drop(self.file.take());
        self.dir_lock.release(self.mode);
    }
}

fn cannot_write(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::PermissionDenied | io::ErrorKind::ReadOnlyFilesystem
    )
}

fn check_regular(file: &File) -> io::Result<()> {
    let t = file.metadata()?.file_type();
    if t.is_file() {
        Ok(())
    } else {
        Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "the lock file is {}, not a regular file",
                crate::read::describe(t)
            ),
        ))
    }
}

/// Takes the in-process lock, then the file lock on `dir/cache.lock` (creating the lock file
/// if `create`). Blocks until both are available. Interrupted waits are retried. The lock file
/// is opened without blocking and without following a link, and must be a regular file.
///
/// # Errors
/// `NotFound` if the directory (or, without `create`, the lock file) does not exist; any other
/// open or lock error. A shared hold on a directory this process cannot write falls back as the
/// module docs say instead of failing.
pub(crate) fn acquire(dir: &Path, mode: Mode, create: bool) -> io::Result<Held> {
    let key = std::path::absolute(dir)?;
    let dir_lock = {
        let mut reg = lock_ignoring_poison(registry());
        Arc::clone(reg.entry(key).or_default())
    };
    dir_lock.acquire(mode);
    // From here on, dropping `held` releases the in-process lock, on every path.
    let mut held = Held {
        dir_lock,
        mode,
        file: None,
        lock_free: false,
    };
    let path = dir.join(LOCK_FILE);
    let file = match retry(|| {
        OpenOptions::new()
            .read(true)
            .write(true)
            .create(create)
            .truncate(false)
            .custom_flags(read_flags())
            .open(&path)
    }) {
        Ok(f) => f,
        Err(e) if mode == Mode::Shared && cannot_write(&e) => {
            match retry(|| {
                OpenOptions::new()
                    .read(true)
                    .custom_flags(read_flags())
                    .open(&path)
            }) {
                Ok(f) => f,
                Err(absent) if absent.kind() == io::ErrorKind::NotFound && dir.is_dir() => {
                    held.lock_free = true;
                    return Ok(held);
                }
                Err(_) => return Err(e),
            }
        }
        Err(e) => return Err(e),
    };
    check_regular(&file)?;
    retry(|| match mode {
        Mode::Shared => file.lock_shared(),
        Mode::Exclusive => file.lock(),
    })?;
    held.file = Some(file);
    Ok(held)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    #[test]
    fn exclusive_excludes_threads_of_one_process() {
        let dir = tempfile::tempdir().expect("tempdir");
        let inside = AtomicUsize::new(0);
        let max = AtomicUsize::new(0);
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..10 {
                        let _h = acquire(dir.path(), Mode::Exclusive, true).expect("lock");
                        let n = inside.fetch_add(1, Ordering::SeqCst) + 1;
                        max.fetch_max(n, Ordering::SeqCst);
                        std::thread::sleep(Duration::from_micros(200));
                        inside.fetch_sub(1, Ordering::SeqCst);
                    }
                });
            }
        });
        assert_eq!(max.load(Ordering::SeqCst), 1);
        assert!(dir.path().join(LOCK_FILE).is_file());
    }

    #[test]
    fn shared_holders_coexist_and_missing_dir_is_not_found() {
        let dir = tempfile::tempdir().expect("tempdir");
        let a = acquire(dir.path(), Mode::Shared, true).expect("first");
        let b = acquire(dir.path(), Mode::Shared, true).expect("second");
        assert_eq!(a.mode(), Mode::Shared);
        assert!(!a.is_lock_free());
        drop((a, b));
        let err = acquire(&dir.path().join("absent"), Mode::Shared, true)
            .err()
            .expect("missing dir");
        assert_eq!(err.kind(), io::ErrorKind::NotFound);
        assert!(!dir.path().join("absent").exists());
    }

    #[test]
    fn a_lock_file_that_is_not_a_regular_file_is_refused_without_hanging() {
        let dir = tempfile::tempdir().expect("tempdir");
        rustix::fs::mkfifoat(
            rustix::fs::CWD,
            dir.path().join(LOCK_FILE),
            rustix::fs::Mode::from_raw_mode(0o600),
        )
        .expect("mkfifo");
        for mode in [Mode::Shared, Mode::Exclusive] {
            let err = acquire(dir.path(), mode, true)
                .err()
                .expect("a FIFO is refused");
            assert_eq!(err.kind(), io::ErrorKind::InvalidInput, "{err}");
        }
    }
}
