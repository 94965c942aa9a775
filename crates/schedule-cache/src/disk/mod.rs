//! The on-disk store: entries published atomically under `dir/<key>.ron` (placement entries
//! under `dir/<key>.placement.ron`), guarded by a permanent lock file and a regime stamp.
//!
//! The protocol, in short (docs/disk-format.md is the full specification):
//!
//! - A `None` key is a complete no-op: no directory, no lock, no stamp change.
//! - Every store and lookup first *opens* the cache: it takes the directory's in-process lock,
//!   then an `flock` on [`LOCK_FILE`] (opened read-write, never unlinked), and reads
//!   [`STAMP_FILE`]. Equal stamp: admitted. Newer or malformed stamp: refused, nothing
//!   touched. Absent or older stamp: under the exclusive lock, every entry is deleted, then the
//!   stamp is atomically replaced, then the operation is admitted.
//! - The lock is held through the entry I/O; entries are published with `atomicwrites`, so a
//!   reader sees a whole old entry or a whole new one, never a torn one.
//! - The first open of a directory in a process also removes crash-stale staging directories.
//! - A filesystem refusal is an [`Outcome::Refused`] (a future miss), never an error; a lookup
//!   never creates the directory. Every operation is reported to [`record`]ers, to [`stats`]
//!   and as a `tracing` event, so a miss always says why.
//!
//! ```
//! use schedule_cache::CacheKey;
//! use schedule_cache::disk::{self, Outcome, StoreOutcome};
//! use schedule_cache::placement::{Direction, Flip, PlacementEntry, Shipped};
//!
//! let tmp = tempfile::tempdir()?;
//! let dir = tmp.path().join("cache");
//! let digest = "0f1e2d";
//! let key = CacheKey::new("0f1e2d-cc-n1-c2-p3-d4-tisolated")?;
//! let entry = PlacementEntry::new(digest, vec![Flip { node: 3, direction: Direction::Inline }], Shipped::Refined);
//!
//! assert_eq!(disk::store(&dir, Some(&key), &entry)?, StoreOutcome::Stored);
//! let (found, events) = disk::record(|| disk::lookup::<PlacementEntry>(&dir, Some(&key), "other"));
//! assert_eq!(found, None);
//! assert!(matches!(events[0].outcome, Outcome::Miss(disk::MissReason::DigestMismatch { .. })));
//! assert_eq!(disk::lookup(&dir, Some(&key), digest), Some(entry));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod inspect;
mod lock;
mod record;
mod regime;
mod staging;

use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use atomicwrites::{AllowOverwrite, AtomicFile};

use crate::{CacheKey, DiskEntry, Error};
use lock::{Held, Mode, retry};

pub use inspect::{
    EntryFile, EntryProblem, GcReport, Inventory, StagingArtifact, inventory, verify_entry,
};
pub use lock::LOCK_FILE;
#[cfg(feature = "redis")]
pub(crate) use record::note;
pub use record::{DiskEvent, DiskStats, MissReason, Op, Outcome, Refusal, record, stats};
#[cfg(test)]
pub(crate) use regime::tests::check_history as regime_history_check;
pub use regime::{
    CACHE_REGIME_VERSION, RegimeStamp, STAMP_FILE, parse_stamp, read_stamp, render_stamp,
};
pub use staging::{DEFAULT_STALE_STAGING_AFTER, STAGING_PREFIX, is_staging, staging_age};

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

mod sealed {
    pub trait Sealed {}
}

/// An entry type the store knows how to place: a [`DiskEntry`] with its filename space.
/// Sealed: the spaces are part of the on-disk format.
pub trait Stored: DiskEntry + sealed::Sealed {
    /// The filename space entries of this type live in.
    const SPACE: Space;
}

impl<Op: serde::Serialize + serde::de::DeserializeOwned> sealed::Sealed
    for crate::entry::ScheduleEntry<Op>
{
}
impl<Op: serde::Serialize + serde::de::DeserializeOwned> Stored
    for crate::entry::ScheduleEntry<Op>
{
    const SPACE: Space = Space::Schedule;
}

impl sealed::Sealed for crate::placement::PlacementEntry {}
impl Stored for crate::placement::PlacementEntry {
    const SPACE: Space = Space::Placement;
}

/// What a store did. Only caller mistakes are errors; everything the filesystem or another
/// process can cause is one of these.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StoreOutcome {
    /// The entry was published (it may later be overwritten by a concurrent writer: last
    /// write wins).
    Stored,
    /// The cache refused; the entry is a future miss. The reason is also reported to
    /// recorders, [`stats`] and `tracing`.
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
    /// The entry on a hit.
    pub fn hit(self) -> Option<E> {
        match self {
            Lookup::Hit(e) => Some(e),
            _ => None,
        }
    }
}

/// A cache directory together with the protocol parameters a process uses on it.
///
/// [`DiskCache::new`] uses this build's [`CACHE_REGIME_VERSION`] and the default stale-staging
/// threshold; the `with_*` methods exist for tools and for tests that simulate other builds.
#[derive(Clone, Debug)]
pub struct DiskCache {
    dir: PathBuf,
    regime: u32,
    stale_staging_after: Duration,
}

enum OpenError {
    NoDirectory,
    Refused(Refusal),
}

/// Whether `key` is `digest`, or starts with `digest` followed by `-` (the key's first
/// component is the digest of the identity it was built from).
pub fn key_starts_with_digest(key: &str, digest: &str) -> bool {
    !digest.is_empty()
        && key
            .strip_prefix(digest)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('-'))
}

impl DiskCache {
    /// The cache at `dir` under this build's regime. Touches nothing on disk.
    pub fn new(dir: impl Into<PathBuf>) -> DiskCache {
        DiskCache {
            dir: dir.into(),
            regime: CACHE_REGIME_VERSION,
            stale_staging_after: DEFAULT_STALE_STAGING_AFTER,
        }
    }

    /// The same cache as seen by a build with regime version `regime` (tests simulating an
    /// upgrade, tools). Never use it to write a live cache under a regime you do not implement.
    pub fn with_regime(mut self, regime: u32) -> DiskCache {
        self.regime = regime;
        self
    }

    /// Staging directories untouched for at least `after` count as crash-stale (default
    /// [`DEFAULT_STALE_STAGING_AFTER`]).
    pub fn with_stale_staging_after(mut self, after: Duration) -> DiskCache {
        self.stale_staging_after = after;
        self
    }

    /// The cache directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The regime version this handle writes and admits.
    pub fn regime(&self) -> u32 {
        self.regime
    }

    /// Runs `f` while holding the directory's exclusive lock (the in-process lock, then the
    /// `flock` on [`LOCK_FILE`], created if the directory exists): what a tool that removes or
    /// rewrites files of a live cache (`kcache-demo --fresh`, say) must hold, so no store or
    /// lookup of any process runs meanwhile. Never creates the directory.
    ///
    /// # Errors
    /// The refusal if the directory does not exist or cannot be locked.
    pub fn with_exclusive_lock<R>(&self, f: impl FnOnce() -> R) -> Result<R, Refusal> {
        let held = lock::acquire(&self.dir, Mode::Exclusive, false)
            .or_else(|e| {
                if e.kind() == io::ErrorKind::NotFound && self.dir.is_dir() {
                    lock::acquire(&self.dir, Mode::Exclusive, true)
                } else {
                    Err(e)
                }
            })
            .map_err(|e| Refusal::io("open and lock the lock file", &e))?;
        let r = f();
        drop(held);
        Ok(r)
    }

    /// Publishes `entry` at `key` (see the module docs for the protocol). Creates the directory
    /// and its parents. With `key == None` nothing at all happens.
    ///
    /// # Errors
    /// Only caller mistakes: [`Error::EntryVersion`] if `entry.version()` is not `E::VERSION`,
    /// [`Error::KeyDigestMismatch`] if the key does not start with `entry.digest()`,
    /// [`Error::Encode`] if the entry cannot be encoded. Filesystem and protocol refusals are
    /// `Ok(StoreOutcome::Refused(_))`.
    pub fn store<E: Stored>(
        &self,
        key: Option<&CacheKey>,
        entry: &E,
    ) -> Result<StoreOutcome, Error> {
        let Some(key) = key else {
            self.note(Op::Store, E::SPACE, None, Outcome::Skipped);
            return Ok(StoreOutcome::Skipped);
        };
        let text = encode_for_key(key, entry)?;
        let outcome = match self.publish(key, E::SPACE, text.as_bytes()) {
            Ok(()) => StoreOutcome::Stored,
            Err(r) => StoreOutcome::Refused(r),
        };
        let noted = match &outcome {
            StoreOutcome::Stored => Outcome::Stored,
            StoreOutcome::Refused(r) => Outcome::Refused(r.clone()),
            StoreOutcome::Skipped => Outcome::Skipped,
        };
        self.note(Op::Store, E::SPACE, Some(key), noted);
        Ok(outcome)
    }

    /// The entry at `key` if it is of the current version and was saved for `digest`; `None`
    /// otherwise (see [`DiskCache::probe`] for the reason). Never creates the directory.
    /// Panics of the running program are not caught and an interrupted read is retried: a
    /// process-level failure is never turned into a miss.
    pub fn lookup<E: Stored>(&self, key: Option<&CacheKey>, digest: &str) -> Option<E> {
        self.probe(key, digest).hit()
    }

    /// Like [`DiskCache::lookup`], returning why nothing usable was found.
    pub fn probe<E: Stored>(&self, key: Option<&CacheKey>, digest: &str) -> Lookup<E> {
        let Some(key) = key else {
            self.note(Op::Lookup, E::SPACE, None, Outcome::Skipped);
            return Lookup::Skipped;
        };
        let found = match self.open(false) {
            Err(OpenError::NoDirectory) => Lookup::Miss(MissReason::NoDirectory),
            Err(OpenError::Refused(r)) => Lookup::Refused(r),
            Ok(held) => {
                let read = read_entry::<E>(&self.dir, key, digest);
                drop(held);
                match read {
                    Ok(e) => Lookup::Hit(e),
                    Err(m) => Lookup::Miss(m),
                }
            }
        };
        let noted = match &found {
            Lookup::Hit(_) => Outcome::Hit,
            Lookup::Miss(m) => Outcome::Miss(m.clone()),
            Lookup::Refused(r) => Outcome::Refused(r.clone()),
            Lookup::Skipped => Outcome::Skipped,
        };
        self.note(Op::Lookup, E::SPACE, Some(key), noted);
        found
    }

    /// Removes the directory's crash-stale staging artifacts now (under the exclusive lock),
    /// regardless of whether this process already swept it. Returns how many were removed.
    /// Does not read or change the stamp.
    ///
    /// # Errors
    /// The refusal if the directory cannot be locked or listed.
    pub fn sweep_stale_staging(&self) -> Result<usize, Refusal> {
        let _held = lock::acquire(&self.dir, Mode::Exclusive, true)
            .map_err(|e| Refusal::io("open and lock the lock file", &e))?;
        staging::sweep_stale(&self.dir, self.stale_staging_after)
            .map_err(|e| Refusal::io("list the directory", &e))
    }

    fn note(&self, op: Op, space: Space, key: Option<&CacheKey>, outcome: Outcome) {
        record::note(DiskEvent {
            op,
            space,
            dir: self.dir.clone(),
            key: key.map(|k| k.as_str().to_owned()),
            outcome,
        });
    }

    fn publish(&self, key: &CacheKey, space: Space, bytes: &[u8]) -> Result<(), Refusal> {
        retry(|| fs::create_dir_all(&self.dir))
            .map_err(|e| Refusal::io("create the directory", &e))?;
        let held = self.open(true).map_err(|e| match e {
            OpenError::Refused(r) => r,
            OpenError::NoDirectory => Refusal::Io {
                during: "open the directory",
                kind: io::ErrorKind::NotFound,
                message: "the directory disappeared".into(),
            },
        })?;
        let written = AtomicFile::new(self.dir.join(space.file_name(key)), AllowOverwrite)
            .write(|f| f.write_all(bytes))
            .map_err(|e| Refusal::io("publish the entry", &io::Error::from(e)));
        drop(held);
        written
    }

    /// The cache-open of the protocol: locks, reads the stamp, admits, refuses or transitions.
    fn open(&self, creating: bool) -> Result<Held, OpenError> {
        let mut mode = if staging::already_swept(&self.dir) {
            Mode::Shared
        } else {
            Mode::Exclusive
        };
        loop {
            let held = match lock::acquire(&self.dir, mode, true) {
                Ok(h) => h,
                Err(e) if e.kind() == io::ErrorKind::NotFound && !creating => {
                    return Err(OpenError::NoDirectory);
                }
                Err(e) => {
                    return Err(OpenError::Refused(Refusal::io(
                        "open and lock the lock file",
                        &e,
                    )));
                }
            };
            let stamp = read_stamp(&self.dir)
                .map_err(|e| OpenError::Refused(Refusal::io("read the regime stamp", &e)))?;
            match stamp {
                RegimeStamp::Version(v) if v == self.regime => {}
                RegimeStamp::Version(v) if v > self.regime => {
                    return Err(OpenError::Refused(Refusal::NewerRegime {
                        found: v,
                        ours: self.regime,
                    }));
                }
                RegimeStamp::Malformed(content) => {
                    return Err(OpenError::Refused(Refusal::MalformedStamp { content }));
                }
                RegimeStamp::Absent | RegimeStamp::Version(_) => {
                    if mode == Mode::Shared {
                        drop(held);
                        mode = Mode::Exclusive;
                        continue;
                    }
                    self.transition(&stamp).map_err(|e| {
                        OpenError::Refused(Refusal::io("sweep entries for a new regime", &e))
                    })?;
                }
            }
            if held.mode() == Mode::Exclusive {
                staging::sweep_once(&self.dir, self.stale_staging_after);
            }
            return Ok(held);
        }
    }

    /// Deletes every entry (both spaces), then publishes this handle's stamp. A crash in
    /// between leaves the old stamp, so the next opener sweeps again.
    fn transition(&self, from: &RegimeStamp) -> io::Result<()> {
        let mut removed = 0usize;
        for item in fs::read_dir(&self.dir)? {
            let item = item?;
            let name = item.file_name();
            let Some(name) = name.to_str() else { continue };
            if Space::of_file_name(name).is_none() || item.file_type()?.is_dir() {
                continue;
            }
            match fs::remove_file(item.path()) {
                Ok(()) => removed += 1,
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        }
        regime::publish_stamp(&self.dir, self.regime)?;
        tracing::info!(
            target: "schedule_cache::disk",
            dir = %self.dir.display(),
            from = %from,
            to = self.regime,
            removed,
            "cache directory moved to a new regime"
        );
        Ok(())
    }
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
        message: e.to_string(),
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
                    message: err.to_string(),
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
            found: entry.digest().to_owned(),
            expected: digest.to_owned(),
        });
    }
    Ok(entry)
}

/// At most this many sibling keys are listed in [`MissReason::NoEntry`].
pub const MAX_SIBLINGS: usize = 8;

/// Keys of `space` in `dir` holding entries for `digest` (other than `except`).
fn same_digest_keys(dir: &Path, space: Space, digest: &str, except: &CacheKey) -> Vec<String> {
    let Ok(listing) = fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut keys: Vec<String> = listing
        .flatten()
        .filter_map(|item| {
            let (s, k) = Space::of_file_name(item.file_name().to_str()?)?;
            (s == space && &k != except && key_starts_with_digest(k.as_str(), digest))
                .then(|| k.as_str().to_owned())
        })
        .collect();
    keys.sort();
    keys.truncate(MAX_SIBLINGS);
    keys
}

fn read_entry<E: Stored>(dir: &Path, key: &CacheKey, digest: &str) -> Result<E, MissReason> {
    let path = dir.join(E::SPACE.file_name(key));
    let bytes = match retry(|| fs::read(&path)) {
        Ok(b) => b,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(MissReason::NoEntry {
                same_digest: same_digest_keys(dir, E::SPACE, digest, key),
            });
        }
        Err(e) => {
            return Err(MissReason::Unreadable {
                kind: e.kind(),
                message: e.to_string(),
            });
        }
    };
    decode_entry(&bytes, Some(digest))
}

/// [`DiskCache::store`] on `DiskCache::new(dir)`: publishes `entry` at `key` under this
/// build's regime. `None` key: nothing happens.
///
/// # Errors
/// As [`DiskCache::store`]: caller mistakes only.
pub fn store<E: Stored>(
    dir: &Path,
    key: Option<&CacheKey>,
    entry: &E,
) -> Result<StoreOutcome, Error> {
    DiskCache::new(dir).store(key, entry)
}

/// [`DiskCache::lookup`] on `DiskCache::new(dir)`.
pub fn lookup<E: Stored>(dir: &Path, key: Option<&CacheKey>, digest: &str) -> Option<E> {
    DiskCache::new(dir).lookup(key, digest)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

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
                format!("{STAGING_PREFIX}{suffix}"),
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
