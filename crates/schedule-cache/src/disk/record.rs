//! What every disk operation reports: its outcome (with the reason for a miss or a refusal), to
//! the store's [`Observer`] if it was given one (events and counts), and as a `tracing` event.

use std::fmt;
use std::io;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};

use super::{KeptExisting, Space};

/// Which disk operation an event reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Op {
    /// A `store`.
    Store,
    /// A `lookup`.
    Lookup,
}

/// Why a lookup found no usable entry (the cache was consulted and had no answer).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum MissReason {
    /// The cache directory does not exist (lookup never creates it).
    NoDirectory,
    /// No entry file at this key. `same_digest` lists (sorted, at most
    /// `MAX_SIBLINGS`) the keys of this space that hold entries for the
    /// same digest under other key components (another numerics policy, codegen environment,
    /// pool, device or timing objective): the components where they differ from the key looked
    /// up explain the miss.
    NoEntry {
        /// Keys of entries for the same code under other components.
        same_digest: Vec<String>,
    },
    /// The entry file exists but could not be read (for example a directory sits at its name).
    Unreadable {
        /// The kind of the read error.
        kind: io::ErrorKind,
        /// The read error's message.
        message: String,
    },
    /// The entry's bytes are not a valid encoding of the entry type (truncated, garbage, empty).
    Unparsable {
        /// The parser's message.
        message: String,
    },
    /// The entry was written with another payload format version.
    VersionMismatch {
        /// The version the file records.
        found: u32,
        /// The version this build reads.
        expected: u32,
    },
    /// The entry was saved for another identity digest than the one looked up.
    DigestMismatch {
        /// The digest the file records.
        found: String,
        /// The digest the caller asked for.
        expected: String,
    },
}

impl fmt::Display for MissReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MissReason::NoDirectory => f.write_str("no cache directory"),
            MissReason::NoEntry { same_digest } if same_digest.is_empty() => {
                f.write_str("no entry at this key")
            }
            MissReason::NoEntry { same_digest } => write!(
                f,
                "no entry at this key; the same code has entries under {}",
                same_digest.join(", ")
            ),
            MissReason::Unreadable { message, .. } => write!(f, "entry unreadable: {message}"),
            MissReason::Unparsable { message } => write!(f, "entry unparsable: {message}"),
            MissReason::VersionMismatch { found, expected } => {
                write!(f, "entry version {found}, this build reads {expected}")
            }
            MissReason::DigestMismatch { found, expected } => {
                write!(f, "entry digest {found}, looked up {expected}")
            }
        }
    }
}

/// A refusal of the directory protocol, the [`cache_dir::Error`] itself (structured: match on
/// [`DirRefusal::error`]). Two are equal when they read the same.
#[derive(Clone, Debug)]
pub struct DirRefusal(std::sync::Arc<cache_dir::Error>);

impl DirRefusal {
    pub(crate) fn new(e: cache_dir::Error) -> DirRefusal {
        DirRefusal(std::sync::Arc::new(e))
    }

    /// The directory protocol's error.
    pub fn error(&self) -> &cache_dir::Error {
        &self.0
    }
}

impl PartialEq for DirRefusal {
    fn eq(&self, other: &DirRefusal) -> bool {
        self.0.to_string() == other.0.to_string()
    }
}

impl Eq for DirRefusal {}

impl fmt::Display for DirRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// Why the cache declined an operation without touching the directory's stamp or entries.
/// A refusal is never a failed run: a refused store is a future miss, a refused lookup a miss.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Refusal {
    /// The directory's stamp names a newer regime than this build's: a newer binary owns it.
    NewerRegime {
        /// The stamp's regime version.
        found: u32,
        /// This build's regime version.
        ours: u32,
    },
    /// The directory's stamp is not a well-formed regime version.
    MalformedStamp {
        /// The stamp content (at most 64 characters).
        content: String,
    },
    /// The directory has no regime stamp yet holds a file named like an entry
    /// ([`super::is_entry_of_any_version`]): it is no cache directory of this store (a user's
    /// directory given as the cache, holding `settings.ron`). Nothing in it was created,
    /// deleted or stamped.
    Unadopted {
        /// The first file found named like an entry (at most 64 characters of it).
        name: String,
    },
    /// The directory is another store's (its stamp names another store kind, the kernel
    /// store's, say: [`cache_dir::Error::ForeignStore`]), or its stamp is a bare legacy version
    /// and it holds a file the schedule store never writes, so whose it is cannot be told
    /// ([`cache_dir::Error::UnkindedStamp`]). Nothing in it was swept, created or stamped.
    OtherStore(DirRefusal),
    /// Another refusal of the directory protocol (a name it does not allow, a directory
    /// another user could write, a stamp changed under a lock-free read), kept whole.
    Protocol(DirRefusal),
    /// The filesystem said no (permissions, a file where the directory should be, a full disk…).
    Io {
        /// What the cache was doing: "create the directory", "lock", "read the stamp", ….
        during: &'static str,
        /// The kind of the error.
        kind: io::ErrorKind,
        /// The error's message.
        message: String,
    },
}

impl Refusal {
    pub(crate) fn io(during: &'static str, e: &io::Error) -> Refusal {
        Refusal::Io {
            during,
            kind: e.kind(),
            message: e.to_string(),
        }
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::NewerRegime { found, ours } => {
                write!(f, "stamp has newer regime {found} (this build: {ours})")
            }
            Refusal::MalformedStamp { content } => write!(f, "malformed regime stamp {content:?}"),
            Refusal::OtherStore(e) | Refusal::Protocol(e) => write!(f, "{e}"),
            Refusal::Unadopted { name } => write!(
                f,
                "no regime stamp but holds {name:?}, named like an entry: not a cache directory \
                 of this store, left untouched (give it a directory of its own)"
            ),
            Refusal::Io {
                during, message, ..
            } => write!(f, "could not {during}: {message}"),
        }
    }
}

/// The outcome of one disk operation.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Outcome {
    /// A lookup returned an entry.
    Hit,
    /// A lookup returned nothing, for this reason.
    Miss(MissReason),
    /// A store published its entry.
    Stored,
    /// A keep-faster store left the existing, at least as fast entry in place and published
    /// nothing.
    KeptExisting(KeptExisting),
    /// The operation was refused; the directory was left as it was.
    Refused(Refusal),
    /// The key was `None` (no timing identity): nothing was done, not even creating the
    /// directory, locking or reading the stamp.
    Skipped,
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Outcome::Hit => f.write_str("hit"),
            Outcome::Miss(r) => write!(f, "miss: {r}"),
            Outcome::Stored => f.write_str("stored"),
            Outcome::KeptExisting(k) => write!(f, "{k}"),
            Outcome::Refused(r) => write!(f, "refused: {r}"),
            Outcome::Skipped => f.write_str("skipped (no key)"),
        }
    }
}

/// One disk operation as an [`Observer`] sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DiskEvent {
    /// Store or lookup.
    pub op: Op,
    /// The entry's filename space.
    pub space: Space,
    /// The cache directory, as the caller named it.
    pub dir: PathBuf,
    /// The key, or `None` when the caller had none.
    pub key: Option<String>,
    /// What happened.
    pub outcome: Outcome,
}

/// Counts of operation outcomes an [`Observer`] saw.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DiskStats {
    /// Lookups that returned an entry.
    pub hits: u64,
    /// Lookups that found no usable entry.
    pub misses: u64,
    /// Stores that published their entry.
    pub stored: u64,
    /// Stores and lookups the cache refused (filesystem refusal, newer or malformed stamp).
    pub refused: u64,
    /// Operations skipped because the key was `None`.
    pub skipped: u64,
    /// Keep-faster stores that left the existing entry in place.
    pub kept_existing: u64,
}

/// What the stores it is given to did: every operation, in the order the operations ended,
/// and counts of their outcomes. Given explicitly (`DiskCache::with_observer`,
/// `RedisStore::with_observer`; clones of a store share it, and several stores may share one),
/// it sees those stores' operations on every thread and nothing else. The events are kept
/// until [`Observer::take`]n; the counts since it was made.
#[derive(Debug, Default)]
pub struct Observer(Mutex<(Vec<DiskEvent>, DiskStats)>);

impl Observer {
    /// A new observer, to give to stores.
    pub fn new() -> Arc<Observer> {
        Arc::default()
    }

    /// The events seen since the last `take`, in order, and forgets them.
    pub fn take(&self) -> Vec<DiskEvent> {
        std::mem::take(&mut self.lock().0)
    }

    /// The outcome counts of every operation seen (not reset by [`Observer::take`]).
    pub fn stats(&self) -> DiskStats {
        self.lock().1
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, (Vec<DiskEvent>, DiskStats)> {
        // Nothing panics while the lock is held; a poisoned lock holds whole data.
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Reports one operation to `tracing` and to the store's observer, if it has one.
pub(crate) fn note(observer: Option<&Observer>, event: DiskEvent) {
    let key = event.key.as_deref().unwrap_or("-");
    match &event.outcome {
        Outcome::Refused(r) => tracing::warn!(
            target: "schedule_cache::disk",
            op = ?event.op, space = ?event.space, dir = %event.dir.display(), key,
            reason = %r,
            "cache operation refused; it will be a miss"
        ),
        Outcome::Miss(r) => tracing::debug!(
            target: "schedule_cache::disk",
            op = ?event.op, space = ?event.space, dir = %event.dir.display(), key,
            reason = %r,
            "cache miss"
        ),
        other => tracing::trace!(
            target: "schedule_cache::disk",
            op = ?event.op, space = ?event.space, dir = %event.dir.display(), key,
            outcome = %other,
            "cache operation"
        ),
    }
    if let Some(observer) = observer {
        let mut seen = observer.lock();
        let stats = &mut seen.1;
        let count = match event.outcome {
            Outcome::Hit => &mut stats.hits,
            Outcome::Miss(_) => &mut stats.misses,
            Outcome::Stored => &mut stats.stored,
            Outcome::Refused(_) => &mut stats.refused,
            Outcome::Skipped => &mut stats.skipped,
            Outcome::KeptExisting(_) => &mut stats.kept_existing,
        };
        *count += 1;
        seen.0.push(event);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(outcome: Outcome) -> DiskEvent {
        DiskEvent {
            op: Op::Lookup,
            space: Space::Schedule,
            dir: PathBuf::from("d"),
            key: Some("k".into()),
            outcome,
        }
    }

    #[test]
    fn an_observer_sees_what_it_is_given_in_order_and_counts_it() {
        let (shared, other) = (Observer::new(), Observer::new());
        note(Some(&shared), ev(Outcome::Hit));
        note(Some(&other), ev(Outcome::Skipped));
        note(
            None,
            ev(Outcome::Refused(Refusal::MalformedStamp {
                content: "x".into(),
            })),
        );
        note(Some(&shared), ev(Outcome::Stored));
        assert_eq!(other.take(), vec![ev(Outcome::Skipped)]);
        assert_eq!(shared.take(), vec![ev(Outcome::Hit), ev(Outcome::Stored)]);
        assert!(shared.take().is_empty(), "take forgets");
        let counted = DiskStats {
            hits: 1,
            stored: 1,
            ..DiskStats::default()
        };
        assert_eq!(shared.stats(), counted, "take does not reset the counts");
    }
}
