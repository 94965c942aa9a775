//! Mutual exclusion on one cache directory: an in-process reader/writer lock per directory,
//! then an advisory lock (`flock`) on the directory's permanent lock file.
//!
//! The in-process lock matters where the platform's file lock is per process rather than per
//! open file (Linux emulates `flock` with `fcntl` record locks on NFS): threads of one process
//! must still exclude each other there.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};

/// Name of the permanent lock file inside a cache directory. Part of the on-disk format:
/// it is created read-write on first open and must never be unlinked while the cache is live.
pub const LOCK_FILE: &str = "cache.lock";

/// How a cache-open holds the directory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Entry reads and writes at an admitted regime.
    Shared,
    /// Regime transitions, staging sweeps and garbage collection.
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
}

impl Held {
    pub(crate) fn mode(&self) -> Mode {
        self.mode
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        // Closing the only descriptor of the open file releases the flock.
        drop(self.file.take());
        self.dir_lock.release(self.mode);
    }
}

/// Retries `f` while it fails with `ErrorKind::Interrupted` (a signal arrived while blocked):
/// an interrupt is never turned into a failure of the cache operation.
pub(crate) fn retry<T>(mut f: impl FnMut() -> io::Result<T>) -> io::Result<T> {
    loop {
        match f() {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            other => return other,
        }
    }
}

/// Takes the in-process lock, then opens `dir/LOCK_FILE` read-write (creating it if `create`)
/// and locks it in `mode`. Blocks until both are granted.
///
/// Errors are the open or lock failure; `NotFound` from a missing directory in particular.
pub(crate) fn acquire(dir: &Path, mode: Mode, create: bool) -> io::Result<Held> {
    let id = std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf());
    let dir_lock = {
        let mut reg = lock_ignoring_poison(registry());
        Arc::clone(reg.entry(id).or_default())
    };
    dir_lock.acquire(mode);
    // From here on, dropping `held` releases the in-process lock, on every path.
    let mut held = Held {
        dir_lock,
        mode,
        file: None,
    };
    let file = retry(|| {
        OpenOptions::new()
            .read(true)
            .write(true)
            .create(create)
            .truncate(false)
            .open(dir.join(LOCK_FILE))
    })?;
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
        drop((a, b));
        let err = acquire(&dir.path().join("absent"), Mode::Shared, true)
            .err()
            .expect("missing dir");
        assert_eq!(err.kind(), io::ErrorKind::NotFound);
        assert!(!dir.path().join("absent").exists());
    }
}
