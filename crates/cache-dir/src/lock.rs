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
//!
//! Every wait is bounded: both locks are taken by polling (`try_lock`, every
//! [`LOCK_POLL`]) until a deadline, so a holder that never lets go (a process stopped with
//! `SIGSTOP` while it holds the lock, a hung NFS client) costs a waiter its bound, not its
//! life; the waiter gets `TimedOut`.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use crate::read::{read_flags, retry};

/// Name of the permanent lock file inside a cache directory. Part of the on-disk format:
/// it is created read-write on first open and must never be unlinked while the cache is live.
pub const LOCK_FILE: &str = "cache.lock";

/// How often a wait for a held lock file tries again.
pub const LOCK_POLL: Duration = Duration::from_millis(5);

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
    /// Takes the in-process lock, waiting until `deadline` (`None`: no deadline); `false`
    /// if the deadline passed first.
    fn acquire(&self, mode: Mode, deadline: Option<Instant>) -> bool {
        let mut st = lock_ignoring_poison(&self.state);
        loop {
            let free = match mode {
                Mode::Shared => !st.writer,
                Mode::Exclusive => !st.writer && st.readers == 0,
            };
            if free {
                break;
            }
            st = match deadline {
                None => self
                    .released
                    .wait(st)
                    .unwrap_or_else(|poisoned| poisoned.into_inner()),
                Some(d) => {
                    let left = d.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return false;
                    }
                    self.released
                        .wait_timeout(st, left)
                        .unwrap_or_else(|poisoned| poisoned.into_inner())
                        .0
                }
            };
        }
        match mode {
            Mode::Shared => st.readers += 1,
            Mode::Exclusive => st.writer = true,
        }
        true
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

    /// The open lock file (none for a lock-free hold).
    pub(crate) fn file(&self) -> Option<&File> {
        self.file.as_ref()
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

fn timed_out(mode: Mode) -> io::Error {
    io::Error::new(
        io::ErrorKind::TimedOut,
        format!(
            "the {} lock is held by another process or thread past this wait's bound",
            match mode {
                Mode::Shared => "shared",
                Mode::Exclusive => "exclusive",
            }
        ),
    )
}

/// Takes the in-process lock, then the file lock on `dir/cache.lock` (creating the lock file
/// with `file_mode`, before the umask, if `create`), each waiting at most until `deadline`
/// (`None`: for as long as it is held). The lock file is opened without blocking and without
/// following a link, and must be a regular file.
///
/// # Errors
/// `NotFound` if the directory (or, without `create`, the lock file) does not exist;
/// `TimedOut` if the deadline passed before a lock was free; any other open or lock error. A
/// shared hold on a directory this process cannot write falls back as the module docs say
/// instead of failing.
pub(crate) fn acquire(
    dir: &Path,
    mode: Mode,
    create: bool,
    file_mode: u32,
    deadline: Option<Instant>,
) -> io::Result<Held> {
    let key = std::path::absolute(dir)?;
    let dir_lock = {
        let mut reg = lock_ignoring_poison(registry());
        Arc::clone(reg.entry(key).or_default())
    };
    if !dir_lock.acquire(mode, deadline) {
        return Err(timed_out(mode));
    }
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
            .mode(file_mode)
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
    lock_until(&file, mode, deadline)?;
    held.file = Some(file);
    Ok(held)
}

/// Takes `file`'s `flock` in `mode`, trying again every [`LOCK_POLL`] until `deadline`
/// (`None`: a blocking wait).
///
/// # Errors
/// `TimedOut` past the deadline; any other lock error.
pub fn lock_until(file: &File, mode: Mode, deadline: Option<Instant>) -> io::Result<()> {
    let Some(deadline) = deadline else {
        return retry(|| match mode {
            Mode::Shared => file.lock_shared(),
            Mode::Exclusive => file.lock(),
        });
    };
    loop {
        let tried = match mode {
            Mode::Shared => file.try_lock_shared(),
            Mode::Exclusive => file.try_lock(),
        };
        match tried {
            Ok(()) => return Ok(()),
            Err(std::fs::TryLockError::WouldBlock) => {
                if Instant::now() >= deadline {
                    return Err(timed_out(mode));
                }
                std::thread::sleep(LOCK_POLL);
            }
            Err(std::fs::TryLockError::Error(e)) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(std::fs::TryLockError::Error(e)) => return Err(e),
        }
    }
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
                        let _h =
                            acquire(dir.path(), Mode::Exclusive, true, 0o666, None).expect("lock");
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
        let a = acquire(dir.path(), Mode::Shared, true, 0o666, None).expect("first");
        let b = acquire(dir.path(), Mode::Shared, true, 0o666, None).expect("second");
        assert_eq!(a.mode(), Mode::Shared);
        assert!(!a.is_lock_free());
        drop((a, b));
        let err = acquire(&dir.path().join("absent"), Mode::Shared, true, 0o666, None)
            .err()
            .expect("missing dir");
        assert_eq!(err.kind(), io::ErrorKind::NotFound);
        assert!(!dir.path().join("absent").exists());
    }

    /// A wait with a deadline gives up with `TimedOut` while another open file holds the
    /// lock (exclusive against shared, and against the in-process lock too), and succeeds
    /// once it is released.
    #[test]
    fn a_wait_with_a_deadline_times_out_while_the_lock_is_held() {
        let dir = tempfile::tempdir().expect("tempdir");
        let soon = || Some(Instant::now() + Duration::from_millis(50));
        // Another open file of the lock (as another process would hold it).
        let other = std::fs::File::create(dir.path().join(LOCK_FILE)).expect("create");
        other.lock_shared().expect("lock");
        let err = acquire(dir.path(), Mode::Exclusive, true, 0o666, soon())
            .err()
            .expect("held shared elsewhere");
        assert_eq!(err.kind(), io::ErrorKind::TimedOut, "{err}");
        acquire(dir.path(), Mode::Shared, true, 0o666, soon()).expect("shared coexists");
        other.unlock().expect("unlock");
        let held = acquire(dir.path(), Mode::Exclusive, true, 0o666, soon()).expect("free");
        // The in-process lock is bounded too.
        let err = acquire(dir.path(), Mode::Shared, true, 0o666, soon())
            .err()
            .expect("held by this process");
        assert_eq!(err.kind(), io::ErrorKind::TimedOut, "{err}");
        drop(held);
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
            let err = acquire(dir.path(), mode, true, 0o666, None)
                .err()
                .expect("a FIFO is refused");
            assert_eq!(err.kind(), io::ErrorKind::InvalidInput, "{err}");
        }
    }
}
