//! The on-disk store: entries published atomically under `dir/<key>.ron` (placement entries
//! under `dir/<key>.placement.ron`), guarded by a permanent lock file and a regime stamp.
//!
//! The directory protocol is the [`cache_dir`] crate's (one home for every kcache store on
//! disk); this module adds the schedule store's entry spaces, encodings and explained misses.
//! docs/disk-format.md is the specification (cache-open, locks, waits, sizes, refusals).

// Its items reach `admin` from the root directly, so this module never imports its tools.
pub(crate) mod inspect;
mod policy;
pub(crate) mod record;
mod regime;
mod wait;

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use cache_dir::{CacheDir, Mode};

use crate::store::{NearIndexError, Store};
use crate::{CacheKey, DiskEntry, Error};

pub(crate) use cache_dir::{LOCK_FILE, RegimeStamp, STAMP_FILE, read_stamp};
pub(crate) use policy::{Claim, best_time};
pub use policy::{KeptExisting, StorePolicy};
pub use record::{DirRefusal, DiskEvent, DiskStats, MissReason, Observer, Op, Outcome, Refusal};
#[cfg(test)]
pub(crate) use regime::tests::check_history as regime_history_check;
pub use regime::{CACHE_REGIME_VERSION, STORE_KIND};
pub(crate) use wait::one_call;

/// The largest entry file a lookup reads (16 MiB): a larger file at an entry's name is a miss
/// (`Unreadable`, kind `FileTooLarge`) without being read, and a store of a larger entry is
/// refused. Real entries are a few KiB.
pub const MAX_ENTRY_BYTES: u64 = 16 << 20;

/// At most this many characters of a parser's or the file system's message are kept in a
/// [`MissReason`], so a garbage entry never puts its content into a miss message.
pub const MAX_MESSAGE_CHARS: usize = 200;

/// Whether `name` is the file name of an entry of *any* version of this store:
/// `<stem>.ron` or `<stem>.placement.ron` where the stem is one or more bytes of
/// `[A-Za-z0-9_-]`, of any length (every version so far wrote `<key>.ron` and
/// `<key>.placement.ron` with keys of that alphabet; a future version must keep its entry names
/// inside this set or widen it). A regime change deletes exactly these, so no entry of an
/// older regime survives it whatever its key shape or length; names with other bytes in the
/// stem (`not.a.key.ron`) are foreign and never touched.
pub fn is_entry_of_any_version(name: &str) -> bool {
    let stem = name
        .strip_suffix(Space::Placement.suffix())
        .or_else(|| name.strip_suffix(Space::Schedule.suffix()))
        .or_else(|| name.strip_suffix(SIBLINGS_SUFFIX));
    stem.is_some_and(|stem| {
        !stem.is_empty()
            && stem
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    })
}

/// Suffix of a digest's sibling index, `<digest>.keys`: one line `s <key>` or `p <key>` per
/// entry stored for that digest (schedule or placement space), appended by `store`, read by a
/// missing lookup to name the keys that hold the same code under other components — so a miss
/// never lists the whole directory. A hint only: lines whose entry file is gone are ignored,
/// and a regime change deletes the index with the entries.
pub(crate) const SIBLINGS_SUFFIX: &str = ".keys";

/// A sibling index past this size is no longer appended to (nor read past it).
pub const MAX_SIBLINGS_BYTES: u64 = 64 << 10;

/// The sibling index file name of `digest`, if `digest` can name a file.
pub fn siblings_file_name(digest: &str) -> Option<String> {
    let name = format!("{digest}{SIBLINGS_SUFFIX}");
    (cache_dir::validate_name(&name).is_ok() && is_entry_of_any_version(&name)).then_some(name)
}

fn space_letter(space: Space) -> &'static str {
    match space {
        Space::Schedule => "s",
        Space::Placement => "p",
    }
}

/// Appends the line `<letter> <key>` to the index file `name` unless it is already listed (one
/// `write` with `O_APPEND`, so concurrent appenders never interleave lines; not fsynced: an
/// index is a hint, a lost line only makes a later miss explain less or fewer seeds).
fn append_index_line(
    dir: &cache_dir::Guard<'_>,
    name: &str,
    letter: &str,
    key: &CacheKey,
) -> Result<(), cache_dir::Error> {
    let line = format!("{letter} {}\n", key.as_str());
    match dir.read(name, MAX_SIBLINGS_BYTES) {
        Ok(existing)
            if existing
                .split(|&b| b == b'\n')
                .any(|l| l == line.trim_end().as_bytes()) =>
        {
            return Ok(());
        }
        Ok(_) => {}
        Err(e) if e.is_not_found() => {}
        Err(e) => return Err(e),
    }
    dir.append(name, line.as_bytes(), MAX_SIBLINGS_BYTES)
}

/// The keys on the lines `<letter> <key>` of the index file `name` that `keep` accepts and
/// whose entry file of `space` exists, sorted, at most `max`: a bounded read, never a
/// directory listing. None when the file cannot be named or read.
fn index_keys(
    dir: &cache_dir::Guard<'_>,
    name: Option<String>,
    (letter, space): (&str, Space),
    max: usize,
    keep: impl Fn(&CacheKey) -> bool,
) -> Vec<CacheKey> {
    let Some(Ok(index)) = name.map(|name| dir.read(&name, MAX_SIBLINGS_BYTES)) else {
        return Vec::new();
    };
    let mut keys: Vec<CacheKey> = String::from_utf8_lossy(&index)
        .lines()
        .filter_map(|line| {
            let (l, k) = line.split_once(' ')?;
            let k = CacheKey::new(k).ok()?;
            (l == letter && keep(&k)).then_some(k)
        })
        .filter(|k| {
            std::fs::symlink_metadata(dir.dir().join(space.file_name(k))).is_ok_and(|m| m.is_file())
        })
        .collect();
    keys.sort();
    keys.dedup();
    keys.truncate(max);
    keys
}

/// Appends `key` to `digest`'s sibling index ([`append_index_line`]); failures are ignored.
fn note_sibling(dir: &cache_dir::Guard<'_>, space: Space, digest: &str, key: &CacheKey) {
    if let Some(name) = siblings_file_name(digest) {
        let _ = append_index_line(dir, &name, space_letter(space), key);
    }
}

/// The line letter of a near-code index line: `n <key>` in `<shape>.keys`, where `<shape>` is
/// a size-free identity ([`crate::seeds::size_free_digest`]) and `<key>` the key of a
/// schedule entry whose code has that size-free identity. A shape digest is domain-separated
/// from code digests (it hashes a tag with the size-free rendering's digest), so a shape's
/// index file never is a code's sibling index, and the letters keep the two apart anyway.
const NEAR_LETTER: &str = "n";

/// At most this many keys are returned by [`DiskCache::near_keys`].
pub(crate) const MAX_NEAR: usize = 16;

/// Appends `key` to the shape's near-code index ([`append_index_line`]).
fn note_near_line(dir: &cache_dir::Guard<'_>, shape: &str, key: &CacheKey) -> Result<(), Refusal> {
    let Some(name) = siblings_file_name(shape) else {
        return Err(Refusal::Io {
            during: "name the near-code index",
            kind: io::ErrorKind::InvalidInput,
            message: short(shape),
        });
    };
    append_index_line(dir, &name, NEAR_LETTER, key).map_err(refusal)
}

/// The filename space an entry type lives in. Spaces never share a file name: a key has no
/// `.`, so `<key>.ron` and `<key>.placement.ron` cannot collide.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Space {
    /// Saved schedules: `<key>.ron`.
    Schedule,
    /// Placement decisions: `<key>.placement.ron`.
    Placement,
}

impl Space {
    /// The file name suffix of this space.
    pub const fn suffix(self) -> &'static str {
        match self {
            Space::Schedule => ".ron",
            Space::Placement => ".placement.ron",
        }
    }

    /// The file name of the entry at `key` in this space.
    pub fn file_name(self, key: &CacheKey) -> String {
        format!("{}{}", key.as_str(), self.suffix())
    }

    /// Splits an entry file name into its space and key; `None` for any other name (the lock,
    /// the stamp, staging directories, hidden files, foreign files).
    pub fn of_file_name(name: &str) -> Option<(Space, CacheKey)> {
        let (space, stem) = if let Some(stem) = name.strip_suffix(Space::Placement.suffix()) {
            (Space::Placement, stem)
        } else {
            (
                Space::Schedule,
                name.strip_suffix(Space::Schedule.suffix())?,
            )
        };
        CacheKey::new(stem).ok().map(|k| (space, k))
    }
}

pub(crate) mod sealed {
    use super::Claim;

    /// What the stores read from an entry under [`StorePolicy::KeepFaster`](super::StorePolicy)
    /// (sealed: the crate's two entry types only).
    pub trait Sealed {
        /// What the entry's times were measured for, as one line (`Claim::identity`): its
        /// digest and, for a schedule entry, its full key components.
        fn claim_identity(&self) -> String;

        /// The entry's best time (`best_time` of a schedule entry's times; a placement
        /// entry has none).
        fn best_time(&self) -> Option<f64>;

        /// The entry's `Claim`, if it has a best time.
        fn claim(&self) -> Option<Claim> {
            self.best_time().map(|time| Claim {
                time,
                identity: self.claim_identity(),
            })
        }
    }
}

/// An entry type the store knows how to place: a [`DiskEntry`] with its filename space.
/// Sealed: the spaces are part of the on-disk format.
pub trait Stored: DiskEntry + sealed::Sealed {
    /// The filename space entries of this type live in.
    const SPACE: Space;
}

impl<Op: serde::Serialize + serde::de::DeserializeOwned> Stored
    for crate::entry::ScheduleEntry<Op>
{
    const SPACE: Space = Space::Schedule;
}

impl<Op: serde::Serialize + serde::de::DeserializeOwned> sealed::Sealed
    for crate::entry::ScheduleEntry<Op>
{
    fn claim_identity(&self) -> String {
        let mut line = format!("digest={}", self.digest);
        for (c, v) in &self.key_parts.parts {
            line.push_str(&format!(";{}={v}", c.name()));
        }
        line
    }

    fn best_time(&self) -> Option<f64> {
        best_time(&self.times)
    }
}

impl Stored for crate::placement::PlacementEntry {
    const SPACE: Space = Space::Placement;
}

impl sealed::Sealed for crate::placement::PlacementEntry {
    fn claim_identity(&self) -> String {
        format!("digest={}", self.digest)
    }

    fn best_time(&self) -> Option<f64> {
        None
    }
}

/// What a store did. Only caller mistakes are errors; everything the filesystem or another
/// process can cause is one of these.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum StoreOutcome {
    /// The entry was published (it may later be overwritten by a concurrent writer: last
    /// write wins, or under [`StorePolicy::KeepFaster`] a faster one).
    Stored,
    /// Under [`StorePolicy::KeepFaster`]: the existing entry measured at least as fast, so it
    /// stays and the new entry was not published.
    KeptExisting(KeptExisting),
    /// The cache refused; the entry is a future miss. The reason is also reported to the
    /// store's [`Observer`] and `tracing`.
    Refused(Refusal),
    /// The key was `None`: nothing was done.
    Skipped,
}

/// What a lookup found, with the reason when it found nothing usable.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Lookup<E> {
    /// An entry of the current version saved for the digest looked up.
    Hit(E),
    /// The cache had no usable entry.
    Miss(MissReason),
    /// The cache refused the open (newer or malformed stamp, filesystem refusal).
    Refused(Refusal),
    /// The key was `None`: nothing was done.
    Skipped,
}

impl<E> Lookup<E> {
    /// The event an [`Observer`] sees for this answer.
    pub(crate) fn noted(&self) -> Outcome {
        match self {
            Lookup::Hit(_) => Outcome::Hit,
            Lookup::Miss(m) => Outcome::Miss(m.clone()),
            Lookup::Refused(r) => Outcome::Refused(r.clone()),
            Lookup::Skipped => Outcome::Skipped,
        }
    }
}

/// A cache directory together with the protocol parameters a process uses on it.
///
/// [`DiskCache::new`] uses this build's [`CACHE_REGIME_VERSION`] and the default stale-staging
/// threshold; the `with_*` methods exist for tools and for tests that simulate other builds.
///
/// Clones share the lock back-off ([`DiskCache::with_lock_backoff`]) and the observer
/// ([`DiskCache::with_observer`]).
#[derive(Clone, Debug)]
pub struct DiskCache {
    dir: CacheDir,
    locks: wait::LockPolicy,
    observer: Option<Arc<Observer>>,
}

/// The refusal for a protocol error of [`cache_dir`] (the `during` strings are the protocol's).
fn refusal(e: cache_dir::Error) -> Refusal {
    match e {
        cache_dir::Error::NewerRegime { found, ours, .. } => Refusal::NewerRegime { found, ours },
        cache_dir::Error::MalformedStamp { content, .. } => Refusal::MalformedStamp { content },
        e @ (cache_dir::Error::ForeignStore { .. } | cache_dir::Error::UnkindedStamp { .. }) => {
            Refusal::OtherStore(DirRefusal::new(e))
        }
        cache_dir::Error::Unadopted { name, .. } => Refusal::Unadopted { name },
        cache_dir::Error::Io { during, source, .. } => Refusal::io(during, &source),
        cache_dir::Error::NoDirectory { .. } => Refusal::Io {
            during: "open the directory",
            kind: io::ErrorKind::NotFound,
            message: "the directory disappeared".into(),
        },
        e @ cache_dir::Error::LockTimeout { .. } => Refusal::Io {
            during: "lock the cache directory",
            kind: io::ErrorKind::TimedOut,
            message: short(&e.to_string()),
        },
        other => Refusal::Protocol(DirRefusal::new(other)),
    }
}

/// `message`, cut to [`MAX_MESSAGE_CHARS`] characters (marked with `…` when cut): how the
/// store cuts every error it reports in a miss or a refusal, and how a program reporting
/// such a reason should cut its own.
///
/// ```
/// use schedule_cache::admin::{MAX_MESSAGE_CHARS, short};
/// assert_eq!(short("fine"), "fine");
/// let cut = short(&"x".repeat(MAX_MESSAGE_CHARS + 1));
/// assert_eq!(cut, format!("{}…", "x".repeat(MAX_MESSAGE_CHARS)));
/// ```
pub fn short(message: &str) -> String {
    let mut chars = message.chars();
    let mut out: String = chars.by_ref().take(MAX_MESSAGE_CHARS).collect();
    if chars.next().is_some() {
        out.push('…');
    }
    out
}

/// Whether `key` is `digest`, or starts with `digest` followed by `-` (the key's first
/// component is the digest of the identity it was built from).
pub(crate) fn key_starts_with_digest(key: &str, digest: &str) -> bool {
    !digest.is_empty()
        && key
            .strip_prefix(digest)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('-'))
}

impl DiskCache {
    /// The cache at `dir` under this build's regime. Touches nothing on disk.
    ///
    /// Give it a directory of its own: a directory without a regime stamp that holds a file
    /// [`is_entry_of_any_version`] accepts (such as `settings.ron` or `notes.keys`) is
    /// refused, nothing in it deleted, as the module docs' cache-open says.
    pub fn new(dir: impl Into<PathBuf>) -> DiskCache {
        DiskCache {
            dir: CacheDir::new(
                dir,
                STORE_KIND,
                CACHE_REGIME_VERSION,
                is_entry_of_any_version,
            ),
            locks: wait::LockPolicy::default(),
            observer: None,
        }
    }

    /// The same cache as seen by a build with regime version `regime` (tests simulating an
    /// upgrade, tools). Never use it to write a live cache under a regime you do not implement.
    pub fn with_regime(self, regime: u32) -> DiskCache {
        DiskCache {
            dir: CacheDir::new(self.dir.dir(), STORE_KIND, regime, is_entry_of_any_version)
                .with_stale_staging_after(self.dir.stale_staging_after())
                .with_lock_wait(self.dir.lock_wait()),
            ..self
        }
    }

    /// The same store, reporting every store and lookup (of this value and its clones) to
    /// `observer` ([`Observer`]). Without one, operations are only logged through `tracing`.
    pub fn with_observer(self, observer: Arc<Observer>) -> DiskCache {
        DiskCache {
            observer: Some(observer),
            ..self
        }
    }

    /// Staging directories untouched for at least `after` count as crash-stale (default
    /// `DEFAULT_STALE_STAGING_AFTER`).
    pub fn with_stale_staging_after(self, after: Duration) -> DiskCache {
        let dir = self.dir.with_stale_staging_after(after);
        DiskCache { dir, ..self }
    }

    /// Each operation waits at most `wait` for the directory's lock (default
    /// `cache_dir::DEFAULT_LOCK_WAIT`, 30 s), and a [`ScheduleCache`](crate::ScheduleCache)
    /// call at most `wait` in all, however many locks it takes (its first wait sets one
    /// deadline for the rest). Past it the operation is refused (a miss, a refused store,
    /// kind `TimedOut`) and the store backs off ([`DiskCache::with_lock_backoff`]). So a
    /// process that holds the lock and never lets go (stopped with `SIGSTOP`, say) costs a
    /// call at most `wait`, and this store at most `wait` per back-off interval.
    pub fn with_lock_wait(self, wait: Duration) -> DiskCache {
        let dir = self.dir.with_lock_wait(wait);
        DiskCache { dir, ..self }
    }

    /// The bound on one lock wait ([`DiskCache::with_lock_wait`]).
    pub fn lock_wait(&self) -> Duration {
        self.dir.lock_wait()
    }

    /// The same store, backing off for `interval` after a lock wait timed out (default
    /// `DEFAULT_LOCK_BACKOFF`, 5 minutes): in the interval every store and lookup of this
    /// value and its clones, on any thread, only tries the lock, never waits for it (a lock
    /// free at once is taken; one held refuses the operation at once, kind `WouldBlock`,
    /// saying so); once the interval passed, the first operation waits again (the others
    /// still only try). A lock got in a mode at least as strong as the one whose wait timed
    /// out ends the back-off; another timeout starts a new interval. `Duration::ZERO` never
    /// backs off; an interval past what the clock counts backs off for good. The back-off
    /// belongs to this value and its clones, not to the directory: another
    /// [`DiskCache::new`] of the same directory keeps its own.
    pub fn with_lock_backoff(self, interval: Duration) -> DiskCache {
        let locks = self.locks.with_backoff(interval);
        DiskCache { locks, ..self }
    }

    /// The cache-open in `mode` for one store or lookup (see [`DiskCache::with_lock_wait`]):
    /// the lock is waited for at most what the call's deadline leaves of the lock wait, and
    /// only tried while the store backs off; the outcome feeds the back-off. A lock only tried
    /// and held is an `Io` refusal of kind `WouldBlock` saying why.
    fn gated<R>(
        &self,
        mode: Mode,
        create: bool,
        f: impl FnOnce(&cache_dir::Guard<'_>) -> R,
    ) -> Result<R, cache_dir::Error> {
        let attempt = self.locks.attempt(self.dir.lock_wait());
        let dir = self.dir.clone().with_lock_wait(attempt.wait);
        let mut got = false;
        let run = |guard: &cache_dir::Guard<'_>| {
            got = true;
            f(guard)
        };
        let out = match mode {
            Mode::Shared => dir.with_shared(create, run),
            Mode::Exclusive => dir.with_exclusive(create, run),
        };
        let timed_out = matches!(out, Err(cache_dir::Error::LockTimeout { .. }));
        self.locks
            .settle(attempt, mode, got, timed_out, self.dir.dir());
        match out {
            Err(cache_dir::Error::LockTimeout { .. }) if attempt.wait.is_zero() => {
                let (kind, message) = self.locks.not_waited(attempt);
                Err(cache_dir::Error::Io {
                    during: "lock the cache directory",
                    path: self.dir.dir().to_path_buf(),
                    source: io::Error::new(kind, message),
                })
            }
            other => other,
        }
    }

    /// The cache directory.
    pub fn dir(&self) -> &Path {
        self.dir.dir()
    }

    /// The regime version this handle writes and admits.
    pub fn regime(&self) -> u32 {
        self.dir.regime()
    }

    /// Whether a cache-open would adopt the directory, read without a lock and without
    /// creating or changing anything (`cache_dir::CacheDir::check_adoptable`): a directory
    /// without a stamp that holds a file [`is_entry_of_any_version`] accepts is
    /// [`Refusal::Unadopted`], a malformed stamp [`Refusal::MalformedStamp`]; a missing
    /// directory, one with a stamp of any version, or one without a stamp or entry-named files
    /// passes. For a program that puts more than this store in the directory (the demo's
    /// kernel store) and must not touch a user's directory at all.
    ///
    /// # Errors
    /// The refusal, or [`Refusal::Io`] if the stamp or the listing cannot be read.
    pub fn check_adoptable(&self) -> Result<(), Refusal> {
        self.dir.check_adoptable().map_err(refusal)
    }

    /// Runs `f` while holding the directory's exclusive lock (the in-process lock, then the
    /// `flock` on [`LOCK_FILE`], created if the directory exists): what a tool that removes or
    /// rewrites files of a live cache (`kcache-demo --fresh`, say) must hold, so no store or
    /// lookup of any process runs meanwhile. Never creates the directory, never writes the
    /// stamp (any regime is accepted).
    ///
    /// The directory must be one the store would adopt (`cache_dir::CacheDir::lock_adopted`):
    /// one without a stamp that holds a file [`is_entry_of_any_version`] accepts (a user's
    /// `settings.ron`), or one with a malformed stamp, is refused before anything is created
    /// and `f` is not run.
    ///
    /// # Errors
    /// The refusal ([`Refusal::Unadopted`], [`Refusal::MalformedStamp`], [`Refusal::Io`]) if
    /// the directory does not exist, is not adopted or cannot be locked.
    pub fn with_exclusive_lock<R>(&self, f: impl FnOnce() -> R) -> Result<R, Refusal> {
        let held = self
            .dir
            .lock_adopted(cache_dir::Mode::Exclusive)
            .map_err(refusal)?;
        let r = f();
        drop(held);
        Ok(r)
    }

    /// Removes the directory's crash-stale staging artifacts now (under the exclusive lock),
    /// regardless of whether this process already swept it. Returns how many were removed.
    /// Does not change the stamp. A directory that is no cache of this store (no stamp, a
    /// file named like an entry) is refused ([`Refusal::Unadopted`]) and left as it was, no
    /// lock file created, as [`DiskCache::gc`] does.
    ///
    /// # Errors
    /// The refusal if the directory is not adopted or cannot be locked or listed.
    pub fn sweep_stale_staging(&self) -> Result<usize, Refusal> {
        self.dir.sweep_stale_staging().map_err(refusal)
    }

    fn publish(
        &self,
        key: &CacheKey,
        space: Space,
        digest: &str,
        bytes: &[u8],
    ) -> Result<(), Refusal> {
        self.gated(Mode::Shared, true, |dir| {
            dir.publish(&space.file_name(key), bytes)?;
            note_sibling(dir, space, digest, key);
            Ok(())
        })
        .and_then(|published| published)
        .map_err(refusal)
    }
}

/// The directory store as a level: the protocol of the module docs.
impl Store for DiskCache {
    /// [`Store::store_with`] on the directory, which it creates with its parents. Under
    /// [`StorePolicy::KeepFaster`] the store holds the directory's **exclusive** lock (not the
    /// shared one) from reading the existing entry through publishing the new one, so no other
    /// store or lookup of any process runs in between: the read, the comparison and the write
    /// are one step. The existing entry's claim is read as a lookup of `entry.digest()` would
    /// read it (an entry the lookup would not return has no claim and is replaced). On a
    /// directory this process cannot write (a read-only mount) the claim is read under the
    /// shared lock: an existing entry that stays is [`StoreOutcome::KeptExisting`] with
    /// nothing written, and only a store that would publish is refused.
    fn store_with<E: Stored>(
        &self,
        key: Option<&CacheKey>,
        entry: &E,
        policy: StorePolicy,
    ) -> Result<StoreOutcome, Error> {
        level_store(self.level(), key, entry, |key, text| match policy {
            StorePolicy::LastWriteWins => self
                .publish(key, E::SPACE, entry.digest(), text.as_bytes())
                .map(|()| StoreOutcome::Stored),
            StorePolicy::KeepFaster => {
                self.publish_if_faster(key, entry, text.as_bytes())
                    .map(|kept| {
                        kept.map_or_else(StoreOutcome::KeptExisting, |()| StoreOutcome::Stored)
                    })
            }
        })
    }

    /// [`Store::probe`] of the directory, which it never creates. Panics of the running program
    /// are not caught and an interrupted read is retried: a process-level failure is never
    /// turned into a miss.
    fn probe<E: Stored>(&self, key: Option<&CacheKey>, digest: &str) -> Lookup<E> {
        level_probe(self.level(), key, |key| {
            match self.gated(Mode::Shared, false, |dir| read_entry::<E>(dir, key, digest)) {
                Err(cache_dir::Error::NoDirectory { .. }) => Lookup::Miss(MissReason::NoDirectory),
                Err(e) => Lookup::Refused(refusal(e)),
                Ok(Ok(e)) => Lookup::Hit(e),
                Ok(Err(m)) => Lookup::Miss(m),
            }
        })
    }

    /// [`Store::note_near`] as the line `n <key>` of `<shape>.keys`, under the shared lock (the
    /// directory must exist: call it after a store published the entry); a regime change
    /// deletes it with the entries.
    fn note_near(&self, shape: &str, key: &CacheKey) -> Result<(), NearIndexError> {
        match self.gated(Mode::Shared, false, |dir| note_near_line(dir, shape, key)) {
            Ok(r) => r,
            Err(e) => Err(refusal(e)),
        }
        .map_err(NearIndexError::Refused)
    }

    /// [`Store::near_keys`]: those whose entry file exists (sorted, at most `MAX_NEAR`); none
    /// when the directory does not exist. Read under the shared lock; never creates anything.
    fn near_keys(&self, shape: &str) -> Result<Vec<CacheKey>, NearIndexError> {
        let keys = |dir: &cache_dir::Guard<'_>| {
            let name = siblings_file_name(shape);
            index_keys(dir, name, (NEAR_LETTER, Space::Schedule), MAX_NEAR, |_| {
                true
            })
        };
        match self.gated(Mode::Shared, false, keys) {
            Ok(keys) => Ok(keys),
            Err(cache_dir::Error::NoDirectory { .. }) => Ok(Vec::new()),
            Err(e) => Err(NearIndexError::Refused(refusal(e))),
        }
    }

    fn location(&self) -> String {
        self.dir().display().to_string()
    }
}

impl DiskCache {
    /// Where this level's events come from and go: its directory and observer.
    fn level(&self) -> (&Path, Option<&Observer>) {
        (self.dir(), self.observer.as_deref())
    }

    /// The keep-faster store: under the exclusive lock, reads the existing entry's claim,
    /// compares, and publishes only if the new entry wins. Where this process cannot write the
    /// directory (a read-only mount: the exclusive open is refused), the existing entry is
    /// read under the shared lock instead and, if it stays, the answer is `KeptExisting`
    /// without anything written; only a store that would publish is refused.
    fn publish_if_faster<E: Stored>(
        &self,
        key: &CacheKey,
        entry: &E,
        bytes: &[u8],
    ) -> Result<Result<(), KeptExisting>, Refusal> {
        let name = E::SPACE.file_name(key);
        let (identity, new_time) = (entry.claim_identity(), entry.best_time());
        let decided = self
            .gated(Mode::Exclusive, true, |dir| {
                let existing = existing_claim::<E>(dir, &name, entry.digest());
                if let Err(kept) = policy::keep_faster(existing.as_ref(), &identity, new_time) {
                    return Ok(Err(kept));
                }
                dir.publish(&name, bytes)?;
                note_sibling(dir, E::SPACE, entry.digest(), key);
                Ok(Ok(()))
            })
            .and_then(|published| published);
        match decided {
            Err(e) if e.is_read_only() => {
                // Nothing can be written, so the only store that can happen is the one that
                // keeps the existing entry: decided on a read under the shared lock (a
                // read-only descriptor's `flock`, or the lock-free read and its stamp
                // re-check). A last-write-wins store running meanwhile is ordered after it.
                let existing = self
                    .gated(Mode::Shared, false, |dir| {
                        existing_claim::<E>(dir, &name, entry.digest())
                    })
                    .ok()
                    .flatten();
                match policy::keep_faster(existing.as_ref(), &identity, new_time) {
                    Err(kept) => Ok(Err(kept)),
                    Ok(()) => Err(refusal(e)),
                }
            }
            other => other.map_err(refusal),
        }
    }
}

/// The claim of the entry file `name` if a lookup of `digest` would return it (anything else
/// has no claim).
fn existing_claim<E: Stored>(
    dir: &cache_dir::Guard<'_>,
    name: &str,
    digest: &str,
) -> Option<Claim> {
    dir.read(name, MAX_ENTRY_BYTES)
        .ok()
        .and_then(|b| decode_entry::<E>(&b, Some(digest)).ok())
        .and_then(|e| e.claim())
}

impl StoreOutcome {
    /// The event an [`Observer`] sees for this outcome.
    pub(crate) fn noted(&self) -> Outcome {
        match self {
            StoreOutcome::Stored => Outcome::Stored,
            StoreOutcome::KeptExisting(k) => Outcome::KeptExisting(*k),
            StoreOutcome::Refused(r) => Outcome::Refused(r.clone()),
            StoreOutcome::Skipped => Outcome::Skipped,
        }
    }
}

/// One level's store with the bookkeeping every level shares: a `None` key is skipped; the
/// entry is checked and encoded ([`encode_for_key`]: caller mistakes are the only errors) and
/// refused past [`MAX_ENTRY_BYTES`] ([`check_entry_size`]) before `write` gets the key and the
/// encoding; the outcome is reported ([`record::note`]) to the level's observer with `at` as the
/// event's `dir`.
pub(crate) fn level_store<E: Stored>(
    at: (&Path, Option<&Observer>),
    key: Option<&CacheKey>,
    entry: &E,
    write: impl FnOnce(&CacheKey, &str) -> Result<StoreOutcome, Refusal>,
) -> Result<StoreOutcome, Error> {
    let outcome = match key {
        None => StoreOutcome::Skipped,
        Some(key) => {
            let text = encode_for_key(key, entry)?;
            check_entry_size(text.len())
                .and_then(|()| write(key, &text))
                .unwrap_or_else(StoreOutcome::Refused)
        }
    };
    note(Op::Store, E::SPACE, at, key, outcome.noted());
    Ok(outcome)
}

/// One level's lookup with the bookkeeping every level shares: a `None` key is skipped, and
/// the answer of `read` is reported as [`level_store`] reports a store's.
pub(crate) fn level_probe<E: Stored>(
    at: (&Path, Option<&Observer>),
    key: Option<&CacheKey>,
    read: impl FnOnce(&CacheKey) -> Lookup<E>,
) -> Lookup<E> {
    let found = key.map_or(Lookup::Skipped, read);
    note(Op::Lookup, E::SPACE, at, key, found.noted());
    found
}

fn note(
    op: Op,
    space: Space,
    (at, observer): (&Path, Option<&Observer>),
    key: Option<&CacheKey>,
    outcome: Outcome,
) {
    let event = DiskEvent {
        op,
        space,
        dir: at.to_path_buf(),
        key: key.map(|k| k.as_str().to_owned()),
        outcome,
    };
    record::note(observer, event);
}

/// The refusal of a store whose encoded entry is past [`MAX_ENTRY_BYTES`] (every store
/// refuses what no lookup would read).
fn check_entry_size(len: usize) -> Result<(), Refusal> {
    if len as u64 > MAX_ENTRY_BYTES {
        return Err(Refusal::Io {
            during: "publish the entry",
            kind: io::ErrorKind::FileTooLarge,
            message: format!("the entry is larger than the cap of {MAX_ENTRY_BYTES} bytes"),
        });
    }
    Ok(())
}

/// The caller-mistake checks every store makes before publishing, then the one encoding every
/// store writes (so an entry can be copied between a directory and a shared store byte for
/// byte): [`Error::EntryVersion`] if `entry.version()` is not `E::VERSION`,
/// [`Error::KeyDigestMismatch`] if `key` does not start with `entry.digest()`, [`Error::Encode`]
/// if the entry cannot be encoded.
pub(crate) fn encode_for_key<E: Stored>(key: &CacheKey, entry: &E) -> Result<String, Error> {
    if entry.version() != E::VERSION {
        return Err(Error::EntryVersion {
            found: entry.version(),
            expected: E::VERSION,
        });
    }
    if !key_starts_with_digest(key.as_str(), entry.digest()) {
        return Err(Error::KeyDigestMismatch {
            key: key.as_str().to_owned(),
            digest: entry.digest().to_owned(),
        });
    }
    ron::ser::to_string_pretty(entry, ron::ser::PrettyConfig::default()).map_err(|e| {
        Error::Encode {
            message: e.to_string(),
        }
    })
}

/// Just the `version` field of an entry, to explain a parse failure of another version.
#[derive(serde::Deserialize)]
struct VersionProbe {
    version: u32,
}

/// Parses entry bytes as `E`, checking the version and (if given) the digest.
pub(crate) fn decode_entry<E: Stored>(bytes: &[u8], digest: Option<&str>) -> Result<E, MissReason> {
    let text = std::str::from_utf8(bytes).map_err(|e| MissReason::Unparsable {
        message: short(&e.to_string()),
    })?;
    let entry: E = match ron::from_str(text) {
        Ok(e) => e,
        Err(err) => {
            return Err(match ron::from_str::<VersionProbe>(text) {
                Ok(p) if p.version != E::VERSION => MissReason::VersionMismatch {
                    found: p.version,
                    expected: E::VERSION,
                },
                _ => MissReason::Unparsable {
                    message: short(&err.to_string()),
                },
            });
        }
    };
    if entry.version() != E::VERSION {
        return Err(MissReason::VersionMismatch {
            found: entry.version(),
            expected: E::VERSION,
        });
    }
    if let Some(digest) = digest
        && entry.digest() != digest
    {
        return Err(MissReason::DigestMismatch {
            found: short(entry.digest()),
            expected: digest.to_owned(),
        });
    }
    Ok(entry)
}

/// At most this many sibling keys are listed in [`MissReason::NoEntry`].
pub(crate) const MAX_SIBLINGS: usize = 8;

/// Keys of `space` in `dir` holding entries for `digest` (other than `except`), from the
/// digest's sibling index ([`SIBLINGS_SUFFIX`], [`index_keys`]).
fn same_digest_keys(
    dir: &cache_dir::Guard<'_>,
    space: Space,
    digest: &str,
    except: &CacheKey,
) -> Vec<String> {
    let keep = |k: &CacheKey| k != except && key_starts_with_digest(k.as_str(), digest);
    let name = siblings_file_name(digest);
    let keys = index_keys(dir, name, (space_letter(space), space), MAX_SIBLINGS, keep);
    keys.into_iter().map(|k| k.as_str().to_owned()).collect()
}

fn read_entry<E: Stored>(
    dir: &cache_dir::Guard<'_>,
    key: &CacheKey,
    digest: &str,
) -> Result<E, MissReason> {
    let bytes = match dir.read(&E::SPACE.file_name(key), MAX_ENTRY_BYTES) {
        Ok(b) => b,
        Err(e) if e.is_not_found() => {
            return Err(MissReason::NoEntry {
                same_digest: same_digest_keys(dir, E::SPACE, digest, key),
            });
        }
        Err(e) => return Err(unreadable(e)),
    };
    decode_entry(&bytes, Some(digest))
}

/// The miss reason for an entry file that could not be read.
pub(crate) fn unreadable(e: cache_dir::Error) -> MissReason {
    match e {
        cache_dir::Error::Io { source, .. } => MissReason::Unreadable {
            kind: source.kind(),
            message: short(&source.to_string()),
        },
        other => MissReason::Unreadable {
            kind: io::ErrorKind::InvalidInput,
            message: short(&other.to_string()),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::fs;

    fn space() -> impl Strategy<Value = Space> {
        prop_oneof![Just(Space::Schedule), Just(Space::Placement)]
    }

    proptest! {
        /// Every entry file name maps back to its own space and key, and no two (space, key)
        /// pairs share a file name.
        #[test]
        fn file_names_round_trip_and_never_collide(
            a in "[A-Za-z0-9_-]{1,40}", sa in space(),
            b in "[A-Za-z0-9_-]{1,40}", sb in space(),
        ) {
            let (ka, kb) = (CacheKey::new(&a).expect("key"), CacheKey::new(&b).expect("key"));
            prop_assert_eq!(Space::of_file_name(&sa.file_name(&ka)), Some((sa, ka.clone())));
            if (sa, &ka) != (sb, &kb) {
                prop_assert_ne!(sa.file_name(&ka), sb.file_name(&kb));
            }
        }

        /// The lock, the stamp, staging and hidden names are never entries.
        #[test]
        fn protocol_names_are_never_entries(suffix in "[A-Za-z0-9_.-]{0,12}") {
            for name in [
                LOCK_FILE.to_owned(),
                STAMP_FILE.to_owned(),
                format!("{}{suffix}", cache_dir::STAGING_PREFIX),
                format!(".{suffix}.ron"),
            ] {
                prop_assert_eq!(Space::of_file_name(&name), None);
            }
        }
    }

    #[test]
    fn a_key_starts_with_a_digest_only_at_a_component_boundary() {
        assert!(key_starts_with_digest("ab12", "ab12"));
        assert!(key_starts_with_digest("ab12-cc-n1", "ab12"));
        assert!(!key_starts_with_digest("ab123-cc", "ab12"));
        assert!(!key_starts_with_digest("ab12-cc", ""));
        assert!(!key_starts_with_digest("-cc", ""));
        assert!(!key_starts_with_digest("cc-ab12", "ab12"));
    }

    #[test]
    fn the_exclusive_lock_holds_off_every_store_until_released() {
        use crate::placement::{PlacementEntry, Shipped};
        let tmp = tempfile::tempdir().expect("tempdir");
        let cache = DiskCache::new(tmp.path().join("c"));
        // No directory: refused, nothing created.
        assert!(cache.with_exclusive_lock(|| ()).is_err());
        assert!(!cache.dir().exists());
        fs::create_dir(cache.dir()).expect("mkdir");
        let key = CacheKey::new("ab12-x").expect("key");
        let (tx, rx) = std::sync::mpsc::channel();
        let stored_while_locked = cache
            .with_exclusive_lock(|| {
                let (c, k) = (cache.clone(), key.clone());
                let writer = std::thread::spawn(move || {
                    let e = PlacementEntry::new("ab12", vec![], Shipped::A);
                    let out = c.store(Some(&k), &e);
                    tx.send(()).expect("send");
                    out
                });
                std::thread::sleep(Duration::from_millis(100));
                (rx.try_recv().is_ok(), writer)
            })
            .expect("locked");
        let (early, writer) = stored_while_locked;
        assert!(!early, "a store ran while the exclusive lock was held");
        assert_eq!(
            writer.join().expect("writer").expect("store"),
            StoreOutcome::Stored
        );
    }
}
