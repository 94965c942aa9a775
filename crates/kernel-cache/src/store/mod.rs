//! The persistent kernel store: compiled programs that outlive the process.
//!
//! A [`KernelStore`] is a directory of content-addressed program blobs (`b-<sha256>`, a
//! [`SavedProgram`]) and key entries (`k-<digest>` of backend identity, kernel key and
//! [`Backend::host_part`]: which blob, which symbol).
//! It sits under a [`KernelCache`](crate::KernelCache) as a second level: give it to a
//! [`Resolver`](crate::Resolver) and a memory miss is
//! looked up here before anything is compiled, and what is compiled is saved here after
//! its compile returned.
//!
//! The directory protocol (permanent lock file, regime stamp, atomic publication,
//! crash-stale staging cleanup, validated names, bounded reads) is `cache-dir`'s. On top
//! of it the store (its invariants: `docs/ARCHITECTURE.md`; its files, trust model and
//! bounds: `docs/disk-format.md`, "The kernel store"):
//!
//! * **is a trust boundary**: a private store (files `0600`, directory `0700`, no link, no
//!   other user's); every blob verified against its digest and against the kernel its
//!   entry names ([`MissReason::WrongBlob`]) before it is loaded;
//! * **never waits without bound**: at most [`KernelStore::with_lock_wait`] in all per
//!   resolve for its locks, then a back-off ([`KernelStore::with_lock_backoff`]); compile
//!   locks at most [`KernelStore::with_compile_wait`];
//! * **is bounded**: `max_bytes`, least-recently-used blobs evicted first across processes,
//!   and a minimum compile time below which nothing is saved;
//! * **compiles each key once across processes**: a per-key lock file (`c-<digest>`) held
//!   from the lookup that missed until the save;
//! * **remembers failures** a backend calls the kernel's own ([`FailureMemory`]);
//! * **explains every miss** ([`MissReason`]) in a resolve's events and to `tracing`
//!   (target `kernel_cache::store`), and keeps counters across processes ([`StoreStats`]).
//!
//! Nothing the store does fails a resolve: a refused directory, a failing save, a
//! corrupt blob are misses and warnings.
//!
//! Give the store a directory of its own, such as `<cache-dir>/kernels`: another store's
//! ([`STORE_KIND`]) or a newer regime's ([`REGIME`]) is refused ([`KernelStore::create`]).
//!
//! ```
//! use kernel_cache::store::{DirError, KernelStore, MissReason, REGIME};
//! let tmp = tempfile::tempdir()?;
//! let store = KernelStore::new(tmp.path().join("kernels")).with_max_bytes(64 << 20);
//! // A lookup never creates the directory (a resolve that compiles does; `create`
//! // checks up front that it can be created and is private).
//! assert_eq!(store.probe("cc-identity", "some-key").err(), Some(MissReason::NoDirectory));
//! store.create()?;
//! assert_eq!(store.probe("cc-identity", "some-key").err(), Some(MissReason::NoEntry));
//! assert_eq!(store.stats()?.entries, 0);
//!
//! // A directory stamped with a newer regime is refused, and so is another store's.
//! let other = KernelStore::new(tmp.path().join("other"));
//! other.create()?;
//! let stamp = other.dir().join("regime.stamp");
//! std::fs::write(&stamp, format!("kcache-kernel-store {}\n", REGIME + 1))?;
//! assert!(matches!(other.create(), Err(DirError::NewerRegime { .. })));
//! assert!(matches!(other.probe("cc-identity", "some-key"), Err(MissReason::Refused(_))));
//! std::fs::write(&stamp, "kcache-schedule-store 2\n")?;
//! assert!(matches!(other.create(), Err(DirError::ForeignStore { .. })));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod counters;
mod farm;
mod format;
mod record;
mod verify;

use std::collections::HashMap;
use std::fmt;
use std::fs::{self, File};
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime};

use cache_dir::{CacheDir, Guard, Mode};

#[cfg(doc)]
use crate::backend::Backend;
use crate::backend::SavedProgram;
/// The directory protocol's error (`cache_dir::Error`), which [`KernelStore::create`],
/// [`KernelStore::trim`], [`KernelStore::stats`] and [`KernelStore::check_adoptable`]
/// return.
pub use cache_dir::Error as DirError;
pub use counters::Counters;
pub use farm::{
    DEFAULT_CONNECT_TIMEOUT, DEFAULT_IO_TIMEOUT, DEFAULT_MAX_BLOB_BYTES, DEFAULT_RETRY_AFTER,
    FarmLevel, WireError,
};
use format::{
    CompiledFor, EntryRecord, FailureRecord, entry_digest, host_text, identity_digest, sha256_hex,
};
pub use record::{MissReason, NotSaved, Outcome, StoreEvent};
pub use verify::Verified;

/// The store's regime version (`cache-dir`'s stamp): what entry and blob names mean and
/// what their files hold. A change of either format requires a bump; a newer build's
/// directory is refused by an older build, an older one is swept.
///
/// History (one line per bump, with the reason):
/// - 1: first version (blob `kcache kernel blob 1`, entry `kcache kernel entry 1`).
/// - 2: a blob lists the kernels it was compiled for (identity, key, host part, symbol) and
///   an entry records its host part (blob `kcache kernel blob 2`, entry `kcache kernel
///   entry 2`), so an entry rewritten to name another kernel's blob is a miss
///   ([`MissReason::WrongBlob`]), never a load of the other kernel.
///
/// Not a bump: entry names with a host part (`Backend::host_part`, a second name
/// domain beside the first; the files are unchanged, and no build reads anything out of
/// a name, so a build without them only never looks such an entry up).
/// Nor remembered failures (`f-<digest>` files, [`FailureMemory`]: a kind of file beside
/// the others, which a build without them never reads, counts or removes, and the next
/// regime's sweep removes with every entry).
pub const REGIME: u32 = 2;

/// The store kind the kernel store's regime stamp names (`kcache-kernel-store 2`): another
/// store (the schedule store) opening a kernel store's directory is refused by name, with
/// nothing swept, and the kernel store refuses theirs ([`DirError::ForeignStore`]). A bare
/// stamp (`2`, written before stamps named their kind) is taken as the kernel store's only if
/// every file in the directory is one the kernel store writes ([`DirError::UnkindedStamp`]).
pub const STORE_KIND: &str = "kcache-kernel-store";

/// The default byte limit of a store: 1 GiB.
pub const DEFAULT_MAX_BYTES: u64 = 1 << 30;

/// How long a resolve waits, by default, for another process compiling the same key.
pub const DEFAULT_COMPILE_WAIT: Duration = Duration::from_secs(300);

/// How long, by default, a store's locks are only tried, not waited for, after a lock wait
/// timed out ([`KernelStore::with_lock_backoff`]).
pub const DEFAULT_LOCK_BACKOFF: Duration = Duration::from_secs(300);

/// How many remembered failures a store keeps by default
/// ([`KernelStore::with_max_failures`]).
pub const DEFAULT_MAX_FAILURES: usize = 1024;

/// Whether the per-kernel resolves with this store read and write remembered failures
/// ([`KernelStore::with_failure_memory`]): a kernel that failed alone, with a failure its
/// backend calls the kernel's own ([`Backend::remembered`]), is remembered by its
/// key, backend identity and host part, and answered with that failure
/// ([`KernelError::Remembered`](crate::KernelError::Remembered)) by the next resolve of any
/// process instead of being compiled again. The strict resolves neither read nor write
/// them (they do not tell one kernel's failure from its program's).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FailureMemory {
    /// Remembered failures answer their kernels; new ones are remembered (the default).
    #[default]
    Remember,
    /// Remembered failures are not read: every kernel is compiled, and what it does
    /// replaces what was remembered (a failure is remembered again, a program saved
    /// forgets it). Forces a fresh compile of known-bad kernels.
    Retry,
    /// Remembered failures are neither read nor written (a saved program still forgets
    /// its kernel's).
    Off,
}

/// How often a waiting resolve retries a held compile lock.
const POLL: Duration = Duration::from_millis(5);

/// What a key's entry is named by besides the backend identity and the kernel key: the
/// backend's host part for the kernel's options ([`Backend::host_part`]), `None`
/// for options whose code is the same on every machine.
pub type HostPart = Option<[u8; 32]>;

/// What a store holds and has done, as `kcache stats` shows it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StoreStats {
    /// Key entries.
    pub entries: u64,
    /// Program blobs.
    pub blobs: u64,
    /// Bytes of blobs and entries (their file sizes, which a sparse file can make huge;
    /// the total stops at `u64::MAX`).
    pub bytes: u64,
    /// Remembered failures ([`FailureMemory`]).
    pub failures: u64,
    /// Bytes of remembered failures (not in `bytes`: they have their own bound,
    /// [`KernelStore::with_max_failures`]).
    pub failure_bytes: u64,
    /// The counters kept across processes.
    pub counters: Counters,
}

/// One remembered failure, as [`KernelStore::failures`] lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RememberedFailure {
    /// Its file's name (`f-<entry digest>`: the digest of identity, key and host part).
    pub name: String,
    /// When it was remembered (the file's modification time).
    pub remembered: SystemTime,
    /// The SHA-256 of the kernel's key.
    pub key_sha256: String,
    /// The message the kernel failed with (`None`: the file is malformed; a lookup removes
    /// it).
    pub message: Option<String>,
}

/// What a [`KernelStore::trim`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Trimmed {
    /// Blobs evicted (least recently used first).
    pub evicted_blobs: u64,
    /// Entries removed with them, or because their blob was gone or they were malformed.
    pub removed_entries: u64,
    /// Compile lock files nobody held, removed.
    pub removed_locks: u64,
    /// Bytes of blobs and entries left (their file sizes; the total stops at `u64::MAX`).
    pub bytes_left: u64,
}

/// A persistent store of compiled programs (see the [module docs](self)).
///
/// Cheap to clone; holds no open file between operations.
#[derive(Clone, Debug)]
pub struct KernelStore {
    dir: CacheDir,
    max_bytes: u64,
    min_compile_time: Duration,
    compile_wait: Duration,
    /// Whether per-kernel resolves read and write remembered failures.
    failure_memory: FailureMemory,
    /// How many remembered failures are kept.
    max_failures: usize,
    /// Counts made while the directory did not exist yet.
    pending: Arc<Mutex<Counters>>,
    /// How long the locks are only tried after a lock wait timed out.
    lock_backoff: Duration,
    /// The back-off, shared by every clone of the store.
    backoff: Arc<Mutex<Backoff>>,
    /// The resolve this handle serves ([`KernelStore::for_resolve`]), if any: its share of
    /// lock waits and what its waits came to.
    session: Option<Arc<Session>>,
    /// The shared level on a Redis server, if any.
    farm: Option<Arc<FarmLevel>>,
}

/// The back-off after a lock wait that timed out (the farm's pause after a dead server is
/// the model): until `until`, the store's locks are only tried.
#[derive(Debug, Default)]
struct Backoff {
    /// `None`: not backing off. `Some(None)`: for good (an interval past what the clock
    /// counts). `Some(Some(t))`: until `t`.
    until: Option<Option<Instant>>,
    /// When the wait that started it timed out.
    since: Option<Instant>,
}

/// One resolve's share of the store's lock waits ([`KernelStore::for_resolve`]).
#[derive(Debug)]
struct Session {
    /// What is left of the resolve's lock wait: every lock wait of the resolve draws on it.
    budget: Mutex<Duration>,
    /// Lock waits of the resolve that reached their bound.
    timeouts: AtomicU64,
    /// Store operations of the resolve given up at once: the store backing off, or the
    /// budget used up.
    skips: AtomicU64,
    /// What the store did for the resolve, in order.
    events: Mutex<Vec<StoreEvent>>,
}

/// How a store operation may take a lock: how long it may wait, and why.
#[derive(Clone, Copy, Debug)]
struct Attempt {
    /// The longest wait.
    wait: Duration,
    /// The store is backing off: the lock is only tried (`wait` is zero).
    backing_off: bool,
    /// The back-off's interval passed and this caller is the one that waits again.
    retry: bool,
}

/// Why a store operation under the store's lock did nothing.
#[derive(Debug)]
enum Denied {
    /// The directory protocol's refusal (a lock wait that timed out among them).
    Dir(cache_dir::Error),
    /// The lock was not free at once and was not waited for (the store backing off after a
    /// lock wait timed out, or the resolve's lock wait used up): the operation was given up.
    NotWaited(String),
}

impl fmt::Display for Denied {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Denied::Dir(e) => e.fmt(f),
            Denied::NotWaited(why) => f.write_str(why),
        }
    }
}

/// A verified blob as a lookup keeps it: the program, and the kernels it was compiled for.
type ReadBlob = (Arc<SavedProgram>, Arc<Vec<CompiledFor>>);

/// A program found in the store, verified, not yet loaded.
pub(crate) struct FoundBlob {
    pub(crate) blob: String,
    pub(crate) saved: Arc<SavedProgram>,
    /// Whether it came from the farm's shared level (and was back-filled).
    pub(crate) shared: bool,
}

/// What a save wrote: the blob's digest and file, and each entry's digest and file.
struct Written {
    digest: String,
    blob: Vec<u8>,
    entries: Vec<(String, Vec<u8>)>,
}

/// The compile locks a resolve holds for its remaining keys (released on drop).
pub(crate) struct CompileLocks {
    _files: Vec<File>,
}

/// A store operation's refusal, as a miss reason.
fn refused(e: &Denied) -> MissReason {
    match e {
        Denied::Dir(cache_dir::Error::NoDirectory { .. }) => MissReason::NoDirectory,
        Denied::Dir(e @ cache_dir::Error::NotPrivate { .. }) => {
            MissReason::NotPrivate(e.to_string())
        }
        _ => MissReason::Refused(e.to_string()),
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // The guarded values are plain data, consistent at every step: a panic elsewhere
    // leaves nothing to repair.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl KernelStore {
    /// The store at `dir`, with [`DEFAULT_MAX_BYTES`], no minimum compile time and
    /// [`DEFAULT_COMPILE_WAIT`]. Touches nothing on disk.
    pub fn new(dir: impl Into<PathBuf>) -> KernelStore {
        KernelStore {
            dir: CacheDir::new(dir, STORE_KIND, REGIME, format::is_store_entry)
                .with_own_files(format::is_own_file)
                .with_private_files(),
            max_bytes: DEFAULT_MAX_BYTES,
            min_compile_time: Duration::ZERO,
            compile_wait: DEFAULT_COMPILE_WAIT,
            failure_memory: FailureMemory::Remember,
            max_failures: DEFAULT_MAX_FAILURES,
            pending: Arc::default(),
            lock_backoff: DEFAULT_LOCK_BACKOFF,
            backoff: Arc::default(),
            session: None,
            farm: None,
        }
    }

    /// The same store bounded to `max_bytes` of blobs and entries (0: nothing is saved).
    pub fn with_max_bytes(mut self, max_bytes: u64) -> KernelStore {
        self.max_bytes = max_bytes;
        self
    }

    /// The same store, saving only programs whose compile took at least `min` (as JAX's
    /// persistent cache does: a fast compile is not worth the disk).
    pub fn with_min_compile_time(mut self, min: Duration) -> KernelStore {
        self.min_compile_time = min;
        self
    }

    /// The same store, with per-kernel resolves reading and writing remembered failures as
    /// `memory` says (default [`FailureMemory::Remember`]).
    pub fn with_failure_memory(mut self, memory: FailureMemory) -> KernelStore {
        self.failure_memory = memory;
        self
    }

    /// What per-kernel resolves do with remembered failures ([`FailureMemory`]).
    pub fn failure_memory(&self) -> FailureMemory {
        self.failure_memory
    }

    /// The same store, keeping at most `max` remembered failures (default
    /// [`DEFAULT_MAX_FAILURES`]; each message at most 2 KiB): past it, the oldest are
    /// forgotten when a failure is remembered. 0 remembers none.
    pub fn with_max_failures(mut self, max: usize) -> KernelStore {
        self.max_failures = max;
        self
    }

    /// The same store, waiting at most `wait` for another process compiling a key this
    /// resolve misses (after which it compiles the key itself). A `wait` past what the
    /// clock can count from now (`Duration::MAX`, say) waits for as long as the lock is
    /// held.
    pub fn with_compile_wait(mut self, wait: Duration) -> KernelStore {
        self.compile_wait = wait;
        self
    }

    /// The same store, waiting at most `wait` for the directory's lock (`cache.lock`) and
    /// the counters' lock (default `cache_dir::DEFAULT_LOCK_WAIT`, 30 s): at most `wait` in
    /// all per resolve (its lookups, compile-lock set-up, saves, evictions and counters
    /// updates draw on one budget, each wait getting what the earlier ones left), and at
    /// most `wait` per call of [`probe`](KernelStore::probe) and the tools
    /// ([`create`](KernelStore::create), [`stats`](KernelStore::stats),
    /// [`trim`](KernelStore::trim)). Past it the operation is given up, never the resolve:
    /// a lookup is a miss ([`MissReason::Refused`] saying it gave up waiting), a save is
    /// [`NotSaved::Refused`], an eviction is skipped and a counters update dropped (each
    /// reported as [`Outcome::LockTimedOut`] in the resolve's events and as a
    /// `tracing` warning; counted in [`Census::store_lock_timeouts`](crate::Census)), and
    /// the store backs off ([`KernelStore::with_lock_backoff`]). So a process that holds the
    /// lock and never lets go (stopped with `SIGSTOP`, say) costs a resolve at most this
    /// bound, and a process at most this bound per back-off interval; the resolve compiles
    /// or serves.
    pub fn with_lock_wait(mut self, wait: Duration) -> KernelStore {
        self.dir = self.dir.with_lock_wait(wait);
        self
    }

    /// The same store, backing off for `interval` after a lock wait timed out (default
    /// [`DEFAULT_LOCK_BACKOFF`], 5 minutes): in the interval every operation of a resolve
    /// or [`probe`](KernelStore::probe), by any clone or thread of this store, only tries
    /// the lock it needs, never waits for it (a lock free at once is taken; one held is a
    /// miss, a skipped save, eviction or counters update, reported as
    /// [`Outcome::LockSkipped`] or a refusal saying so, and counted in
    /// [`Census::store_lock_skips`](crate::Census)); once it passed, the first operation
    /// waits again (the others still only try meanwhile): a lock it gets ends the back-off,
    /// another timeout starts a new interval. `Duration::ZERO` never backs off; an
    /// interval past what the clock counts backs off for good. The back-off is this
    /// store value's (shared by its clones), not the directory's: another
    /// `KernelStore::new` of the same directory keeps its own.
    pub fn with_lock_backoff(mut self, interval: Duration) -> KernelStore {
        self.lock_backoff = interval;
        self
    }

    /// This store for one resolve: every lock wait through the returned handle (and its
    /// clones) draws on one budget of the store's lock wait, and counts its timeouts and
    /// back-off skips for [`KernelStore::lock_counts`].
    pub(crate) fn for_resolve(&self) -> KernelStore {
        let mut store = self.clone();
        store.session = Some(Arc::new(Session {
            budget: Mutex::new(self.dir.lock_wait()),
            timeouts: AtomicU64::new(0),
            skips: AtomicU64::new(0),
            events: Mutex::default(),
        }));
        store
    }

    /// What this resolve's lock waits came to: `(timed out, given up at once while backing
    /// off)`, and the resolve's events, taken (zeros and none for a handle not made by
    /// [`KernelStore::for_resolve`]).
    pub(crate) fn finish_resolve(&self) -> (u64, u64, Vec<StoreEvent>) {
        self.session.as_ref().map_or((0, 0, Vec::new()), |s| {
            (
                s.timeouts.load(Ordering::Relaxed),
                s.skips.load(Ordering::Relaxed),
                std::mem::take(&mut *lock(&s.events)),
            )
        })
    }

    /// Reports `outcome` for `key` to `tracing` and, in a resolve, to its events.
    fn note(&self, key: &str, outcome: Outcome) {
        record::trace(key, &outcome);
        if let Some(s) = &self.session {
            let key = key.to_string();
            lock(&s.events).push(StoreEvent { key, outcome });
        }
    }

    /// Reports that the backend could not save a program for `kernels`.
    pub(crate) fn note_save_failure(&self, kernels: &[(&str, &str)], why: &str) {
        for (key, _) in kernels {
            self.note(key, Outcome::NotSaved(NotSaved::Backend(why.to_string())));
        }
    }

    /// How the next lock of a store operation may be taken: the resolve's remaining budget
    /// (or the whole lock wait outside a resolve), or no wait at all while backing off. The
    /// first caller after the interval passed is the one that waits again; the interval is
    /// renewed meanwhile, so the others keep only trying.
    fn attempt(&self) -> Attempt {
        let budget = self
            .session
            .as_ref()
            .map_or(self.dir.lock_wait(), |s| *lock(&s.budget));
        let now = Instant::now();
        let mut b = lock(&self.backoff);
        let (backing_off, retry) = match b.until {
            None => (false, false),
            Some(Some(until)) if now >= until => {
                b.until = Some(now.checked_add(self.lock_backoff));
                (false, true)
            }
            Some(_) => (true, false),
        };
        Attempt {
            wait: if backing_off { Duration::ZERO } else { budget },
            backing_off,
            retry,
        }
    }

    /// Accounts for an attempt that waited `waited` for its lock and got it, or did not:
    /// the resolve's budget shrinks by the wait. A lock not got after a wait is a timeout
    /// and starts the back-off; one not got without a wait (backing off, or the budget used
    /// up) is a skip. The retry after a back-off that gets its lock ends it.
    fn settle(&self, attempt: Attempt, waited: Duration, not_got: bool) {
        let timed_out = not_got && !attempt.wait.is_zero();
        if let Some(s) = &self.session {
            let mut budget = lock(&s.budget);
            *budget = budget.saturating_sub(waited);
            if not_got {
                let counter = if timed_out { &s.timeouts } else { &s.skips };
                counter.fetch_add(1, Ordering::Relaxed);
            }
        }
        if attempt.backing_off {
            return;
        }
        let mut b = lock(&self.backoff);
        if timed_out && !self.lock_backoff.is_zero() {
            let now = Instant::now();
            if b.until.is_none() {
                tracing::warn!(
                    target: "kernel_cache::store",
                    dir = %self.dir().display(),
                    backoff_ms = u64::try_from(self.lock_backoff.as_millis()).unwrap_or(u64::MAX),
                    "kernel store lock wait timed out: its locks are only tried, not waited for, during the back-off"
                );
            }
            b.until = Some(now.checked_add(self.lock_backoff));
            b.since = Some(now);
        } else if !not_got && attempt.retry {
            *b = Backoff::default();
        }
    }

    /// What an operation given up at once, its lock `what` held, says.
    fn not_waited(&self, attempt: Attempt, what: &str) -> Denied {
        if !attempt.backing_off {
            return Denied::NotWaited(format!(
                "{}: {what} not waited for (held by another process or thread): this \
                 resolve's lock wait of {:?} was used up",
                self.dir().display(),
                self.dir.lock_wait()
            ));
        }
        let b = lock(&self.backoff);
        let ago = b.since.map(|t| t.elapsed()).unwrap_or_default();
        let left = match b.until {
            Some(Some(until)) => format!(
                "for {:?} more",
                until.saturating_duration_since(Instant::now())
            ),
            _ => "for good".to_string(),
        };
        Denied::NotWaited(format!(
            "{}: {what} not waited for (held by another process or thread): a lock wait \
             timed out {ago:?} ago, so the store only tries its locks {left}",
            self.dir().display()
        ))
    }

    /// The same store in front of a farm's shared level (a Redis server): a key
    /// missing locally is looked up there (verified by the farm's MAC and the blob's
    /// digest) and back-filled locally; a saved program is pushed there too.
    pub fn with_farm(mut self, farm: FarmLevel) -> KernelStore {
        self.farm = Some(Arc::new(farm));
        self
    }

    /// The store's directory.
    pub fn dir(&self) -> &Path {
        self.dir.dir()
    }

    /// The byte limit.
    pub fn max_bytes(&self) -> u64 {
        self.max_bytes
    }

    /// Creates the directory and its missing parents (mode `0700`, no symbolic link
    /// followed at a name it creates) and checks it is private.
    ///
    /// Optional: a resolve that misses creates the directory the same way before it
    /// compiles (a lookup alone never does). Call it at start-up to learn at once that
    /// the directory is unusable (another user's, reachable by group or others, a symbolic
    /// link, not creatable): a resolve only reports that as a miss (to `tracing` and the
    /// resolve's events) and runs without the store, so without a subscriber
    /// nothing shows that nothing persists. A directory made by hand under a umask of
    /// `022` (mode `0755`) is refused: `chmod 700` it.
    ///
    /// # Errors
    /// [`DirError::NotPrivate`] naming the path and why, if the directory is a symbolic
    /// link, owned by another user or has any group or other permission bit
    /// (`cache_dir::check_private_dir`); the directory protocol's refusal of an existing
    /// directory that is not this store's: [`DirError::ForeignStore`] for another store
    /// kind's stamp, [`DirError::UnkindedStamp`] for a bare legacy stamp beside files the
    /// kernel store never writes, [`DirError::NewerRegime`] or [`DirError::MalformedStamp`]
    /// for its regime stamp, [`DirError::Unadopted`] for one without a stamp holding files
    /// named like the store's (each naming the path); [`DirError::LockTimeout`]; or the
    /// I/O error, naming what was being done.
    pub fn create(&self) -> Result<(), cache_dir::Error> {
        self.dir.with_shared(true, |_| ())
    }

    /// Runs `f` on the open directory (a private store's: `cache-dir` checks the directory
    /// is private at every open, and creates it so with `create`), the lock shared.
    fn open<R>(&self, create: bool, f: impl FnOnce(&Guard<'_>) -> R) -> Result<R, Denied> {
        self.open_gated(Mode::Shared, create, f)
    }

    /// The cache-open in `mode`, waiting for the lock at most what the resolve's budget
    /// leaves (not at all while backing off), then `f`; the wait is settled
    /// ([`KernelStore::settle`]).
    fn open_gated<R>(
        &self,
        mode: Mode,
        create: bool,
        f: impl FnOnce(&Guard<'_>) -> R,
    ) -> Result<R, Denied> {
        let attempt = self.attempt();
        let dir = self.dir.clone().with_lock_wait(attempt.wait);
        let started = Instant::now();
        let mut waited = None;
        let run = |g: &Guard<'_>| {
            waited = Some(started.elapsed());
            f(g)
        };
        let out = match mode {
            Mode::Shared => dir.with_shared(create, run),
            Mode::Exclusive => dir.with_exclusive(create, run),
        };
        let not_got = matches!(out, Err(cache_dir::Error::LockTimeout { .. }));
        self.settle(
            attempt,
            waited.unwrap_or_else(|| started.elapsed()),
            not_got,
        );
        match out {
            Ok(r) => Ok(r),
            Err(_) if not_got && attempt.wait.is_zero() => Err(self.not_waited(
                attempt,
                &format!(
                    "the {} lock on cache.lock",
                    match mode {
                        Mode::Shared => "shared",
                        Mode::Exclusive => "exclusive",
                    }
                ),
            )),
            Err(e) => Err(Denied::Dir(e)),
        }
    }

    /// Reports a lock wait that timed out, or an operation given up while backing off (to
    /// the resolve's events and `tracing`); other refusals are left to the caller.
    fn note_timeout(&self, e: &Denied, during: &str) {
        match e {
            Denied::Dir(e @ cache_dir::Error::LockTimeout { .. }) => self.note(
                "",
                Outcome::LockTimedOut {
                    during: format!("{during}: {e}"),
                },
            ),
            Denied::NotWaited(why) => self.note(
                "",
                Outcome::LockSkipped {
                    during: format!("{during}: {why}"),
                },
            ),
            Denied::Dir(_) => {}
        }
    }

    /// Looks up `key` saved under backend `identity`: the verified program and the symbol
    /// to find the kernel by, or why not. `identity` is the backend's
    /// [`Backend::identity`], the one a resolve saves and looks programs up
    /// under: under another string, a program a resolve saved is not found
    /// ([`MissReason::NoEntry`]). Marks the blob used (LRU) on a hit; removes a corrupt
    /// blob or a dangling entry. Reports to `tracing` and counts in the store's
    /// counters like a resolve's lookup.
    pub fn probe(&self, identity: &str, key: &str) -> Result<(SavedProgram, String), MissReason> {
        self.probe_host(identity, key, None)
    }

    /// [`KernelStore::probe`] for the entry of `key` under `identity` and the host part
    /// `host` ([`Backend::host_part`] of the kernel's options: `None` looks up
    /// the entry [`probe`](KernelStore::probe) does).
    pub fn probe_host(
        &self,
        identity: &str,
        key: &str,
        host: HostPart,
    ) -> Result<(SavedProgram, String), MissReason> {
        let found = self.lookup_batch(identity, &[(key, Ok(host))], false, |_| Ok(()));
        match found.into_iter().next() {
            Some(Ok((blob, symbol))) => Ok(((*blob.saved).clone(), symbol)),
            Some(Err(why)) => Err(why),
            None => Err(MissReason::NoEntry),
        }
    }

    /// Looks every key up under one open of the directory; per key the verified blob
    /// (shared between keys of one blob) and symbol, or why not. Reports each key.
    ///
    /// Each key comes with its host part, or the miss its key has when the backend could
    /// not tell it (that key is not looked up).
    ///
    /// `accept` is asked about every verified blob found (for example: does the backend
    /// load it?) before the key is reported and counted: its `Err` is the key's miss.
    ///
    /// With `failures`, a key without an entry whose failure is remembered is
    /// [`MissReason::Remembered`] (with its message).
    pub(crate) fn lookup_batch(
        &self,
        identity: &str,
        keys: &[(&str, Result<HostPart, MissReason>)],
        failures: bool,
        mut accept: impl FnMut(&FoundBlob) -> Result<(), MissReason>,
    ) -> Vec<Result<(FoundBlob, String), MissReason>> {
        let mut delta = Counters::default();
        let id_digest = identity_digest(identity);
        let out = self.open(self.farm.is_some(), |guard| {
            let mut blobs: HashMap<String, Result<ReadBlob, MissReason>> = HashMap::new();
            keys.iter()
                .map(|(key, host)| {
                    let host = host.as_ref().map_err(Clone::clone)?;
                    let digest = entry_digest(identity, key, host.as_ref());
                    let want = CompiledFor::new(&id_digest, key, host.as_ref(), "");
                    self.lookup_one(guard, &want, key, &digest, failures, &mut blobs, &mut delta)
                })
                .collect::<Vec<_>>()
        });
        let out: Vec<_> = match out {
            Ok(v) => v
                .into_iter()
                .map(|r| r.and_then(|(found, symbol)| accept(&found).map(|()| (found, symbol))))
                .collect(),
            Err(e) => {
                let why = refused(&e);
                keys.iter()
                    .map(|(_, host)| match host {
                        Err(unknown) => Err(unknown.clone()),
                        Ok(_) => Err(why.clone()),
                    })
                    .collect()
            }
        };
        for ((key, _), r) in keys.iter().zip(&out) {
            match r {
                Ok((found, _)) => {
                    delta.hits += 1;
                    let blob = found.blob.clone();
                    let outcome = if found.shared {
                        Outcome::SharedHit { blob }
                    } else {
                        Outcome::Hit { blob }
                    };
                    self.note(key, outcome);
                }
                Err(why) => {
                    delta.misses += 1;
                    self.note(key, Outcome::Miss(why.clone()));
                }
            }
        }
        self.count(delta);
        out
    }

    /// Looks `key` up at its entry `k-<digest>` (then, with `failures`, at its remembered
    /// failure `f-<digest>`; and on the farm, if any, when there is neither locally). `want`
    /// is what the entry must say (identity, key and host part; its symbol is ignored).
    #[allow(clippy::too_many_arguments)]
    fn lookup_one(
        &self,
        guard: &Guard<'_>,
        want: &CompiledFor,
        key: &str,
        digest: &str,
        failures: bool,
        blobs: &mut HashMap<String, Result<ReadBlob, MissReason>>,
        delta: &mut Counters,
    ) -> Result<(FoundBlob, String), MissReason> {
        let name = format!("k-{digest}");
        let read = read_private(guard, &name, 4096).map(|(_, b)| b);
        if failures && matches!(read, Err(MissReason::NoEntry)) {
            Self::remembered_failure(guard, want, digest, delta)?;
        }
        let bytes = match read {
            Err(MissReason::NoEntry) if self.farm.is_some() => {
                return self.lookup_farm(guard, want, key, digest);
            }
            other => other?,
        };
        let remove = |name: &str, delta: &mut Counters| {
            if guard.remove(name).unwrap_or(false) {
                delta.removed_bad += 1;
            }
        };
        let Some(entry) = EntryRecord::decode(&bytes).filter(|e| e.is_for(want)) else {
            remove(&name, delta);
            return Err(MissReason::BadEntry);
        };
        let blob_name = format!("b-{}", entry.blob);
        let saved = (blobs.entry(entry.blob.clone()))
            .or_insert_with(|| self.read_blob(guard, &blob_name, &entry.blob, delta))
            .clone();
        let (saved, compiled_for) = match saved {
            Ok(s) => s,
            Err(MissReason::NoEntry) => {
                remove(&name, delta);
                return Err(MissReason::NoBlob);
            }
            Err(why) => return Err(why),
        };
        if let Err(why) = entry.fits(&saved, &compiled_for) {
            remove(&name, delta);
            return Err(why);
        }
        Ok((
            FoundBlob {
                blob: entry.blob,
                saved,
                shared: false,
            },
            entry.symbol,
        ))
    }

    /// The failure remembered for `want`'s kernel at `f-<digest>`, as the miss it is
    /// ([`MissReason::Remembered`]); `Ok` when none is (a malformed one, or another kernel's,
    /// is removed; one that is not private is refused and left in place).
    fn remembered_failure(
        guard: &Guard<'_>,
        want: &CompiledFor,
        digest: &str,
        delta: &mut Counters,
    ) -> Result<(), MissReason> {
        let name = format!("f-{digest}");
        let bytes = match read_private(guard, &name, format::MAX_FAILURE_FILE) {
            Ok((_, bytes)) => bytes,
            Err(MissReason::NoEntry) => return Ok(()),
            Err(MissReason::NotPrivate(why)) => return Err(MissReason::NotPrivate(why)),
            // Oversized (`Corrupt`) or unreadable: not a failure this store wrote.
            Err(_) => Vec::new(),
        };
        match FailureRecord::decode(&bytes) {
            Some(f) if want.names(&f.identity, &f.key, &f.host) => {
                Err(MissReason::Remembered(f.message))
            }
            _ => {
                if guard.remove(&name).unwrap_or(false) {
                    delta.removed_bad += 1;
                }
                Ok(())
            }
        }
    }

    /// Remembers each `(key, host part, message)`: a kernel that failed alone under backend
    /// `identity`, with a failure the backend calls the kernel's own. Each is published as
    /// `f-<entry digest>` (replacing an earlier one); then the oldest failures past
    /// [`KernelStore::with_max_failures`] are removed. Reported per key
    /// ([`Outcome::Remembered`]); nothing here fails a resolve.
    pub(crate) fn remember_failures(&self, identity: &str, failures: &[(&str, HostPart, String)]) {
        // A store that keeps none (`with_max_failures(0)`) is asked for none: not an error.
        if failures.is_empty() || self.max_failures == 0 {
            return;
        }
        let outcome = {
            let id_digest = identity_digest(identity);
            let files: Vec<(String, Vec<u8>)> = failures
                .iter()
                .map(|(key, host, message)| {
                    let record = FailureRecord {
                        identity: id_digest.clone(),
                        key: sha256_hex(key.as_bytes()),
                        host: host_text(host.as_ref()),
                        message: message.clone(),
                    };
                    (
                        format!("f-{}", entry_digest(identity, key, host.as_ref())),
                        record.encode(),
                    )
                })
                .collect();
            let write = |guard: &Guard<'_>| -> Result<(), cache_dir::Error> {
                guard.publish_all(&files)?;
                self.forget_past_cap(guard);
                Ok(())
            };
            (self.open(true, write).and_then(|r| r.map_err(Denied::Dir))).map_err(|e| e.to_string())
        };
        for (key, _, _) in failures {
            self.note(key, Outcome::Remembered(outcome.clone()));
        }
    }

    /// Removes the oldest remembered failures (by modification time) past the cap.
    fn forget_past_cap(&self, guard: &Guard<'_>) {
        let mut listed = Self::failure_files(guard);
        if listed.len() <= self.max_failures {
            return;
        }
        listed.sort();
        let extra = listed.len() - self.max_failures;
        for (_, name, _) in &listed[..extra] {
            let _ = guard.remove(name);
        }
    }

    /// Every remembered failure's file: modification time, name, size.
    fn failure_files(guard: &Guard<'_>) -> Vec<(SystemTime, String, u64)> {
        let Ok(entries) = guard.entries() else {
            return Vec::new();
        };
        entries
            .filter_map(Result::ok)
            .filter(|e| format::is_failure_name(&e.name))
            .filter_map(|e| {
                let meta = e.item.metadata().ok()?;
                let used = meta.modified().unwrap_or(SystemTime::UNIX_EPOCH);
                Some((used, e.name, meta.len()))
            })
            .collect()
    }

    /// Every remembered failure, oldest first, with its message (`kcache failures`).
    ///
    /// # Errors
    /// The refusal if the directory is missing, not private or cannot be opened.
    pub fn failures(&self) -> Result<Vec<RememberedFailure>, cache_dir::Error> {
        self.dir.with_shared(false, |guard| {
            let mut listed = Self::failure_files(guard);
            listed.sort();
            listed
                .into_iter()
                .map(|(remembered, name, _)| {
                    let record = read_private(guard, &name, format::MAX_FAILURE_FILE)
                        .ok()
                        .and_then(|(_, b)| FailureRecord::decode(&b));
                    RememberedFailure {
                        key_sha256: record.as_ref().map(|r| r.key.clone()).unwrap_or_default(),
                        message: record.map(|r| r.message),
                        remembered,
                        name,
                    }
                })
                .collect()
        })
    }

    /// Forgets remembered failures: every one (`None`), or those remembered at least
    /// `older_than` ago (`kcache gc --failures`). Returns how many were removed. The next
    /// resolve of a forgotten kernel compiles it.
    ///
    /// # Errors
    /// The refusal if the directory is missing, not private or cannot be locked.
    pub fn forget_failures(&self, older_than: Option<Duration>) -> Result<u64, cache_dir::Error> {
        let now = SystemTime::now();
        self.dir.with_exclusive(false, |guard| {
            let mut removed = 0;
            for (when, name, _) in Self::failure_files(guard) {
                let old = older_than
                    .is_none_or(|age| now.duration_since(when).is_ok_and(|elapsed| elapsed >= age));
                if old && guard.remove(&name).unwrap_or(false) {
                    removed += 1;
                }
            }
            removed
        })
    }

    /// Looks `key` up on the farm's shared level at its entry digest `digest` (the local
    /// entry's name): verified (MACs, blob digest, identity, key, symbol), then
    /// back-filled into the local directory (blob first).
    fn lookup_farm(
        &self,
        guard: &Guard<'_>,
        want: &CompiledFor,
        key: &str,
        digest: &str,
    ) -> Result<(FoundBlob, String), MissReason> {
        let Some(farm) = &self.farm else {
            return Err(MissReason::NoEntry);
        };
        // The local read's cap on a blob (see `read_blob`).
        let max_blob = self.max_bytes.max(1 << 20);
        let (entry_bytes, blob_file) =
            farm.fetch(digest, max_blob, |e| EntryRecord::decode(e).map(|r| r.blob))?;
        let entry = (EntryRecord::decode(&entry_bytes).filter(|e| e.is_for(want)))
            .ok_or(MissReason::BadEntry)?;
        if sha256_hex(&blob_file) != entry.blob {
            return Err(MissReason::Corrupt);
        }
        let blob = format::decode_blob(&blob_file).ok_or(MissReason::Corrupt)?;
        entry.fits(&blob.saved, &blob.kernels)?;
        let saved = blob.saved;
        let blob_name = format!("b-{}", entry.blob);
        let backfill = guard
            .publish(&blob_name, &blob_file)
            .and_then(|()| guard.publish(&format!("k-{digest}"), &entry_bytes));
        if let Err(e) = backfill {
            tracing::warn!(target: "kernel_cache::store", key, error = %e, "farm hit not back-filled");
        }
        Ok((
            FoundBlob {
                blob: entry.blob,
                saved: Arc::new(saved),
                shared: true,
            },
            entry.symbol,
        ))
    }

    /// Reads and verifies a blob; marks it used. `Err(NoEntry)` if it is absent.
    fn read_blob(
        &self,
        guard: &Guard<'_>,
        name: &str,
        digest: &str,
        delta: &mut Counters,
    ) -> Result<ReadBlob, MissReason> {
        let read = read_private(guard, name, self.max_bytes.max(1 << 20));
        let (file, parsed) = match read {
            Ok((file, bytes)) => {
                let parsed = (sha256_hex(&bytes) == digest)
                    .then(|| format::decode_blob(&bytes))
                    .flatten();
                (Some(file), parsed)
            }
            // Larger than any blob the store saves.
            Err(MissReason::Corrupt) => (None, None),
            Err(why) => return Err(why),
        };
        let Some(saved) = parsed else {
            if guard.remove(name).unwrap_or(false) {
                delta.removed_bad += 1;
            }
            return Err(MissReason::Corrupt);
        };
        // Mark use for the LRU (as owner, futimens needs no write access).
        if let Some(file) = file {
            let _ = file.set_modified(SystemTime::now());
        }
        Ok((Arc::new(saved.saved), Arc::new(saved.kernels)))
    }

    /// Removes the blob `digest` (after its program failed to load for good).
    pub(crate) fn remove_blob(&self, digest: &str) {
        let removed = self
            .open(false, |g| g.remove(&format!("b-{digest}")).unwrap_or(false))
            .unwrap_or(false);
        if removed {
            self.count(Counters {
                removed_bad: 1,
                ..Counters::default()
            });
        }
    }

    /// Saves `saved` (compiled in `took`) for `kernels` (`(key, symbol)` pairs) under
    /// backend `identity` and host part `host` (the program's option list's), then evicts
    /// least-recently-used blobs past the byte limit. Blob first, entries after: a crash
    /// never leaves an entry pointing nowhere.
    pub(crate) fn save(
        &self,
        identity: &str,
        host: HostPart,
        saved: &SavedProgram,
        kernels: &[(&str, &str)],
        took: Duration,
    ) {
        let outcome = self.try_save(identity, host, saved, kernels, took);
        for (key, _) in kernels {
            self.note(
                key,
                match &outcome {
                    Ok(written) => Outcome::Saved {
                        blob: written.digest.clone(),
                    },
                    Err(why) => Outcome::NotSaved(why.clone()),
                },
            );
        }
        if let (Some(farm), Ok(w)) = (&self.farm, &outcome)
            && let Err(e) = farm.push(&w.digest, &w.blob, &w.entries)
        {
            for (key, _) in kernels {
                self.note(key, Outcome::NotSaved(NotSaved::Refused(e.clone())));
            }
        }
        if outcome.is_ok() {
            self.count(Counters {
                saves: 1,
                ..Counters::default()
            });
            self.evict_to(self.max_bytes);
        }
    }

    fn try_save(
        &self,
        identity: &str,
        host: HostPart,
        saved: &SavedProgram,
        kernels: &[(&str, &str)],
        took: Duration,
    ) -> Result<Written, NotSaved> {
        if took < self.min_compile_time {
            return Err(NotSaved::TooFast);
        }
        let bad_symbol = kernels
            .iter()
            .find(|(_, s)| !saved.symbols.iter().any(|t| t == s));
        if let Some((_, s)) = bad_symbol {
            return Err(NotSaved::Backend(format!(
                "symbol {s:?} is not in the saved program's table"
            )));
        }
        let id_digest = identity_digest(identity);
        let host_hex = host_text(host.as_ref());
        let compiled_for: Vec<CompiledFor> = kernels
            .iter()
            .map(|(key, symbol)| CompiledFor::new(&id_digest, key, host.as_ref(), symbol))
            .collect();
        let file = format::encode_blob(saved, &compiled_for)
            .ok_or_else(|| NotSaved::Backend("invalid symbol in the saved table".into()))?;
        if (file.len() as u64).saturating_add(4096) > self.max_bytes {
            return Err(NotSaved::TooLarge);
        }
        let digest = sha256_hex(&file);
        let compile_ms = u64::try_from(took.as_millis()).unwrap_or(u64::MAX);
        let entries: Vec<(String, Vec<u8>)> = kernels
            .iter()
            .map(|(key, symbol)| {
                let record = EntryRecord {
                    blob: digest.clone(),
                    symbol: symbol.to_string(),
                    identity: id_digest.clone(),
                    key: sha256_hex(key.as_bytes()),
                    host: host_hex.clone(),
                    compile_ms,
                };
                (entry_digest(identity, key, host.as_ref()), record.encode())
            })
            .collect();
        let write = |guard: &Guard<'_>| -> Result<(), cache_dir::Error> {
            let blob_name = format!("b-{digest}");
            let path = guard.path(&blob_name)?;
            // A blob already there that a lookup would load (a private regular file of
            // this length: its content is checked at every load) is kept and marked used;
            // anything else at that name (a truncated file, one another user owns or could
            // write, which every lookup refuses) is replaced.
            let present = fs::symlink_metadata(&path).is_ok_and(|m| {
                m.is_file()
                    && m.len() == file.len() as u64
                    && cache_dir::check_private_metadata(&path, &m).is_ok()
            });
            if present {
                if let Ok((f, _)) = cache_dir::open_regular(&path) {
                    let _ = f.set_modified(SystemTime::now());
                }
            } else {
                guard.publish(&blob_name, &file)?;
            }
            publish_entries(guard, &entries)?;
            // A kernel with a program forgets its remembered failure (a retry that
            // compiled it).
            for (digest, _) in &entries {
                let _ = guard.remove(&format!("f-{digest}"));
            }
            Ok(())
        };
        let written = self.open(true, write).and_then(|r| r.map_err(Denied::Dir));
        written.map_err(|e| NotSaved::Refused(e.to_string()))?;
        Ok(Written {
            digest,
            blob: file,
            entries,
        })
    }

    /// What the directory holds now (its counters left at zero).
    fn tally(guard: &Guard<'_>) -> StoreStats {
        let mut s = StoreStats::default();
        for e in guard.entries().into_iter().flatten().filter_map(Result::ok) {
            let len = e.item.metadata().map(|m| m.len()).unwrap_or(0);
            if format::is_failure_name(&e.name) {
                s.failures += 1;
                s.failure_bytes = s.failure_bytes.saturating_add(len);
                continue;
            }
            s.bytes = s.bytes.saturating_add(len);
            if format::is_blob_name(&e.name) {
                s.blobs += 1;
            } else {
                s.entries += 1;
            }
        }
        s
    }

    /// Evicts least-recently-used blobs (and their entries) until the store holds at
    /// most `max_bytes`; removes dangling and malformed entries on the way.
    /// A lock wait that times out skips the eviction (reported, see
    /// [`KernelStore::with_lock_wait`]): the store stays over its limit until the next
    /// save or `gc`, by at most what the saves made meanwhile.
    fn evict_to(&self, max_bytes: u64) -> Trimmed {
        let over = match self.open(false, |g| Self::tally(g).bytes > max_bytes) {
            Ok(over) => over,
            Err(e) => {
                self.note_timeout(&e, "measure the store before evicting");
                false
            }
        };
        if !over {
            return Trimmed::default();
        }
        match self.open_gated(Mode::Exclusive, false, |g| {
            self.evict_locked(g, max_bytes, None, false)
        }) {
            Ok(trimmed) => trimmed,
            Err(e) => {
                self.note_timeout(&e, "evict");
                Trimmed::default()
            }
        }
    }

    fn evict_locked(
        &self,
        guard: &Guard<'_>,
        max_bytes: u64,
        unused_before: Option<SystemTime>,
        sweep_locks: bool,
    ) -> Trimmed {
        let mut blobs: Vec<(SystemTime, u64, String)> = Vec::new();
        let mut entries: Vec<(String, u64)> = Vec::new();
        let mut locks: Vec<String> = Vec::new();
        if let Ok(listing) = fs::read_dir(guard.dir()) {
            for item in listing.filter_map(Result::ok) {
                let Ok(name) = item.file_name().into_string() else {
                    continue;
                };
                let Ok(meta) = item.metadata() else { continue };
                if format::is_blob_name(&name) {
                    let used = meta.modified().unwrap_or(SystemTime::UNIX_EPOCH);
                    blobs.push((used, meta.len(), name[2..].to_string()));
                } else if format::is_entry_name(&name) {
                    entries.push((name, meta.len()));
                } else if format::is_compile_lock_name(&name) {
                    locks.push(name);
                }
            }
        }
        // Counted in u128, where file sizes cannot overflow, so eviction stops where it should
        // even if sparse files claim more than u64::MAX bytes together.
        let mut total: u128 = blobs
            .iter()
            .map(|b| b.1)
            .chain(entries.iter().map(|e| e.1))
            .map(u128::from)
            .sum();
        blobs.sort();
        let mut victims = std::collections::HashSet::new();
        let mut out = Trimmed::default();
        // Oldest use first: every program unused since before `unused_before`, then as
        // many more as the size bound needs.
        for (used, size, digest) in &blobs {
            let stale = unused_before.is_some_and(|cut| *used < cut);
            if !stale && total <= u128::from(max_bytes) {
                break;
            }
            victims.insert(digest.clone());
            total -= u128::from(*size);
        }
        let live: std::collections::HashSet<&str> = blobs
            .iter()
            .map(|b| b.2.as_str())
            .filter(|d| !victims.contains(*d))
            .collect();
        // Entries first, then blobs: a crash in between leaves unreferenced blobs (the
        // oldest, evicted next time), never an entry that points nowhere.
        for (name, size) in &entries {
            let keep = guard
                .read(name, 4096)
                .ok()
                .and_then(|b| EntryRecord::decode(&b))
                .is_some_and(|r| live.contains(r.blob.as_str()));
            if !keep && guard.remove(name).unwrap_or(false) {
                out.removed_entries += 1;
                total = total.saturating_sub(u128::from(*size));
            }
        }
        let mut delta = Counters::default();
        for digest in &victims {
            if guard.remove(&format!("b-{digest}")).unwrap_or(false) {
                out.evicted_blobs += 1;
                delta.evictions += 1;
                self.note(
                    "",
                    Outcome::Evicted {
                        blob: digest.clone(),
                    },
                );
            }
        }
        if sweep_locks {
            for name in &locks {
                let path = guard.dir().join(name);
                let Ok(f) = cache_dir::open_rw_regular(&path, false, 0o600) else {
                    continue;
                };
                // Only a lock nobody holds; a process that opened it a moment ago and
                // locks it after this removal at worst compiles a key twice.
                if f.try_lock().is_ok() && fs::remove_file(&path).is_ok() {
                    out.removed_locks += 1;
                }
            }
        }
        out.bytes_left = u64::try_from(total).unwrap_or(u64::MAX);
        self.count(delta);
        out
    }

    /// Trims the store to at most `max_bytes` (least recently used first), removes
    /// dangling and malformed entries and unheld compile locks (`kcache gc --max-size`).
    ///
    /// # Errors
    /// The refusal if the directory is missing, not private or cannot be locked.
    pub fn trim(&self, max_bytes: u64) -> Result<Trimmed, cache_dir::Error> {
        self.dir
            .with_exclusive(false, |g| self.evict_locked(g, max_bytes, None, true))
    }

    /// Removes every program not used for `age` or longer (its last use: the time a
    /// lookup last loaded it or a save wrote it), with its entries, and, as
    /// [`trim`](KernelStore::trim) does, dangling and malformed entries and unheld compile
    /// locks (`kcache gc --older-than`).
    ///
    /// # Errors
    /// The refusal if the directory is missing, not private or cannot be locked.
    pub fn remove_unused_for(&self, age: std::time::Duration) -> Result<Trimmed, cache_dir::Error> {
        let cut = SystemTime::now()
            .checked_sub(age)
            .unwrap_or(SystemTime::UNIX_EPOCH);
        self.dir
            .with_exclusive(false, |g| self.evict_locked(g, u64::MAX, Some(cut), true))
    }

    /// Whether the store would adopt its directory, read without a lock and without creating
    /// or changing anything (`cache_dir::CacheDir::check_adoptable`): a directory without a
    /// regime stamp that holds a file named like one of the store's entries or blobs is no
    /// store of ours. For a tool that must validate a whole tree before it changes any of it.
    ///
    /// # Errors
    /// [`cache_dir::Error::Unadopted`], [`cache_dir::Error::MalformedStamp`], or
    /// [`cache_dir::Error::Io`].
    pub fn check_adoptable(&self) -> Result<(), cache_dir::Error> {
        self.dir.check_adoptable()
    }

    /// What the store holds and the counters of every process that used it.
    ///
    /// # Errors
    /// The refusal if the directory is missing, not private or cannot be opened.
    pub fn stats(&self) -> Result<StoreStats, cache_dir::Error> {
        self.dir.with_shared(false, |guard| StoreStats {
            counters: counters::read(guard.dir()).unwrap_or_default(),
            ..Self::tally(guard)
        })
    }

    /// Adds `delta` to the store's counters; while the directory does not exist yet
    /// (a first lookup, before the first save creates it) the counts wait in memory.
    fn count(&self, delta: Counters) {
        let mut pending = lock(&self.pending);
        pending.add(delta);
        // Only into the store's own private directory (never through a link at its path,
        // never into a directory it refuses, such as another store's: the stamp must be
        // this store's, else the counts wait in memory).
        if cache_dir::check_private_dir(self.dir()).is_err() {
            return;
        }
        let ours = cache_dir::RegimeStamp::Kind {
            kind: STORE_KIND.into(),
            version: REGIME,
        };
        if cache_dir::read_stamp(self.dir()).ok() != Some(ours) {
            return;
        }
        if pending.is_zero() {
            return;
        }
        let attempt = self.attempt();
        let started = Instant::now();
        let added = counters::add(self.dir(), *pending, attempt.wait);
        let timed_out = matches!(&added, Err(e) if e.kind() == io::ErrorKind::TimedOut);
        self.settle(attempt, started.elapsed(), timed_out);
        *pending = Counters::default();
        match added {
            Ok(()) => {}
            Err(_) if timed_out && attempt.wait.is_zero() => {
                let why = self.not_waited(attempt, "the counters' lock");
                self.note_timeout(&why, "update the counters");
                tracing::debug!(target: "kernel_cache::store", error = %why, "kernel store counters not updated");
            }
            Err(e) => {
                if timed_out {
                    self.note(
                        "",
                        Outcome::LockTimedOut {
                            during: format!("update the counters: {e}"),
                        },
                    );
                }
                tracing::warn!(target: "kernel_cache::store", error = %e, "kernel store counters not updated");
            }
        }
    }

    /// Takes the compile lock of every key (each named as its entry is, with its host
    /// part; in sorted order, so two resolves never wait on each other in a cycle),
    /// waiting for each at most until `compile_wait` after this call began (one deadline for
    /// all). Returns
    /// the locks and whether any was held by another.
    pub(crate) fn compile_locks(
        &self,
        identity: &str,
        keys: &[(&str, HostPart)],
    ) -> (CompileLocks, bool) {
        let mut digests: Vec<(String, &str)> = keys
            .iter()
            .map(|(k, host)| (entry_digest(identity, k, host.as_ref()), *k))
            .collect();
        digests.sort();
        digests.dedup_by(|a, b| a.0 == b.0);
        let mut files = Vec::with_capacity(digests.len());
        let mut waited = false;
        // `None`: a wait past what `Instant` can count is no deadline (adding it would panic).
        let deadline = Instant::now().checked_add(self.compile_wait);
        if digests.is_empty() || self.open(true, |_| ()).is_err() {
            return (CompileLocks { _files: files }, false);
        }
        for (digest, key) in digests {
            let path = self.dir().join(format!("c-{digest}"));
            // Never through a link, never blocking: anything but a regular file at the
            // name is no lock (the key is compiled without one).
            let Ok(file) = cache_dir::open_rw_regular(&path, true, 0o600) else {
                continue;
            };
            let mut this_waited = false;
            let got = loop {
                match file.try_lock() {
                    Ok(()) => break true,
                    Err(fs::TryLockError::WouldBlock)
                        if deadline.is_none_or(|d| Instant::now() < d) =>
                    {
                        this_waited = true;
                        std::thread::sleep(POLL);
                    }
                    Err(_) => break false,
                }
            };
            if this_waited {
                waited = true;
                self.note(key, Outcome::Waited { timed_out: !got });
            }
            if got {
                files.push(file);
            }
        }
        (CompileLocks { _files: files }, waited)
    }
}

/// Reads the private regular file `name` of the directory, at most `max` bytes.
fn read_private(guard: &Guard<'_>, name: &str, max: u64) -> Result<(File, Vec<u8>), MissReason> {
    let path = guard
        .path(name)
        .map_err(|e| MissReason::Refused(e.to_string()))?;
    read_private_file(&path, max)
}

/// Opens `path` with `cache-dir`'s bounded, non-blocking, no-follow read, checks the
/// opened file is private, and reads it. Absent: `NoEntry`.
fn read_private_file(path: &Path, max: u64) -> Result<(File, Vec<u8>), MissReason> {
    let (mut file, len) = match cache_dir::open_regular(path) {
        Ok(x) => x,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Err(MissReason::NoEntry),
        Err(e) => return Err(MissReason::Refused(format!("{}: {e}", path.display()))),
    };
    let meta = file
        .metadata()
        .map_err(|e| MissReason::Refused(e.to_string()))?;
    cache_dir::check_private_metadata(path, &meta)
        .map_err(|e| MissReason::NotPrivate(e.to_string()))?;
    if len > max {
        return Err(MissReason::Corrupt);
    }
    let mut bytes = Vec::with_capacity(usize::try_from(len).unwrap_or(0));
    (&mut file)
        .take(max.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(|e| MissReason::Refused(e.to_string()))?;
    if bytes.len() as u64 > max {
        return Err(MissReason::Corrupt);
    }
    Ok((file, bytes))
}

/// At most this many threads publish one save's entries.
const PUBLISH_THREADS: usize = 8;

/// Publishes each `(entry digest, bytes)` as `k-<digest>`, each file staged, fsynced and
/// renamed on its own ([`Guard::publish_all`]: one directory fsync per run of entries
/// rather than one per entry). A publication waits on the disk, not the CPU, and a
/// program compiled for many kernels has as many entries: from `2 * PUBLISH_THREADS`
/// entries on they are published in runs by up to [`PUBLISH_THREADS`] threads at once,
/// so their `fsync`s overlap (the file system commits them together) rather than queue.
/// Each entry is atomic on its own: a crash leaves any subset of them, each whole.
/// Returns the first error met (in entry order); a panic in a thread propagates, and a
/// run whose thread cannot be spawned is published on the calling thread.
fn publish_entries(
    guard: &Guard<'_>,
    entries: &[(String, Vec<u8>)],
) -> Result<(), cache_dir::Error> {
    let named: Vec<(String, &[u8])> = entries
        .iter()
        .map(|(entry, bytes)| (format!("k-{entry}"), bytes.as_slice()))
        .collect();
    let run = |part: &[(String, &[u8])]| guard.publish_all(part);
    if named.len() < 2 * PUBLISH_THREADS {
        return run(&named);
    }
    let chunk = named.len().div_ceil(PUBLISH_THREADS);
    std::thread::scope(|s| {
        // A run whose thread cannot be spawned is published on this thread instead.
        let workers: Vec<_> = named
            .chunks(chunk)
            .map(|part| {
                std::thread::Builder::new()
                    .spawn_scoped(s, move || run(part))
                    .map_err(|_| part)
            })
            .collect();
        let mut first = Ok(());
        for w in workers {
            let outcome = match w {
                Ok(handle) => handle
                    .join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic)),
                Err(part) => run(part),
            };
            if first.is_ok() {
                first = outcome;
            }
        }
        first
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// [`REGIME`]'s doc carries one `/// - N: reason` history line per version, in order,
    /// and the file formats' magic lines are the ones this regime wrote when it was last
    /// bumped: changing a format without a bump (or bumping without a history line) fails
    /// here.
    #[test]
    fn the_regime_has_a_history_line_per_bump_and_pins_the_formats() {
        let source = include_str!("mod.rs");
        let decl = format!("pub const REGIME: u32 = {REGIME};");
        let at = source.find(&decl).expect("the declaration, on one line");
        let mut versions: Vec<u32> = source[..at]
            .lines()
            .rev()
            .take_while(|l| l.trim_start().starts_with("///"))
            .filter_map(|l| l.trim_start().strip_prefix("/// - "))
            .filter_map(|rest| {
                let (n, reason) = rest.split_once(':')?;
                assert!(
                    !reason.trim().is_empty(),
                    "history line {n} gives no reason"
                );
                n.parse::<u32>().ok()
            })
            .collect();
        versions.reverse();
        assert_eq!(versions, (1..=REGIME).collect::<Vec<_>>());
        assert_eq!(
            (REGIME, format::BLOB_MAGIC, format::ENTRY_MAGIC),
            (2, "kcache kernel blob 2", "kcache kernel entry 2"),
            "a format changed: bump REGIME, with its history line"
        );
    }
}
