//! Where entries live: the [`Store`] trait (its contract), the directory store ([`DiskCache`]),
//! the shared Redis store (`RedisStore`, cargo feature `redis`) and the [`TwoLevel`]
//! composition of a local store in front of a shared one.
//!
//! ```
//! use schedule_cache::{CacheKey, DiskCache, StoreOutcome, Store, TwoLevel};
//! use schedule_cache::admin::{Observer, Outcome};
//! use schedule_cache::placement::{Direction, Flip, PlacementEntry, Shipped};
//!
//! let tmp = tempfile::tempdir()?;
//! let (near, far) = (DiskCache::new(tmp.path().join("near")), DiskCache::new(tmp.path().join("far")));
//! let key = CacheKey::new("0f1e2d-cc-n1-c2-p3-d4-tisolated")?;
//! let entry = PlacementEntry::new("0f1e2d", vec![Flip { node: 1, direction: Direction::Inline }], Shipped::Refined);
//! assert_eq!(far.store(Some(&key), &entry)?, StoreOutcome::Stored);
//!
//! // The near level misses, the far level hits and the entry is back-filled near.
//! // One observer given to both levels sees what each did, in order.
//! let observer = Observer::new();
//! let both = TwoLevel::new(near.clone().with_observer(observer.clone()), far.with_observer(observer.clone()));
//! let found = both.lookup::<PlacementEntry>(Some(&key), "0f1e2d");
//! assert_eq!(found.as_ref(), Some(&entry));
//! let outcomes: Vec<_> = observer.take().into_iter().map(|e| e.outcome).collect();
//! assert!(matches!(outcomes.as_slice(), [Outcome::Miss(_), Outcome::Hit, Outcome::Stored]));
//! assert_eq!(near.lookup(Some(&key), "0f1e2d"), Some(entry));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use crate::disk::{Lookup, Refusal, StoreOutcome, StorePolicy, Stored};
use crate::{CacheKey, Error};

/// A place entries are published to and looked up from, under the directory store's contract
/// (docs/disk-format.md): same keys, entry types and versions; regime stamp semantics; whole
/// entries; refusals instead of failed runs.
///
/// The stores of this crate report every operation (including `None` keys) to the
/// [`Observer`](crate::disk::Observer) they were given, if any, and to `tracing`.
pub trait Store {
    /// Publishes `entry` at `key`. With `key == None` nothing is done ([`StoreOutcome::Skipped`]).
    ///
    /// # Errors
    /// Only caller mistakes ([`Error::EntryVersion`], [`Error::KeyDigestMismatch`],
    /// [`Error::Encode`]), detected before anything is written. Everything the store's medium or
    /// another process can cause is `Ok(StoreOutcome::Refused(_))`.
    fn store<E: Stored>(&self, key: Option<&CacheKey>, entry: &E) -> Result<StoreOutcome, Error> {
        self.store_with(key, entry, StorePolicy::LastWriteWins)
    }

    /// [`Store::store`] under `policy`. Under [`StorePolicy::KeepFaster`] the existing entry's
    /// claim is read, compared and replaced (or kept) in one atomic step of the store's medium
    /// (the directory's exclusive lock; one Lua script on Redis): of concurrent keep-faster
    /// stores of one key, the entry with the smallest best time stays, whatever their order.
    /// A kept existing entry is `Ok(StoreOutcome::KeptExisting(_))`.
    ///
    /// # Errors
    /// As [`Store::store`].
    fn store_with<E: Stored>(
        &self,
        key: Option<&CacheKey>,
        entry: &E,
        policy: StorePolicy,
    ) -> Result<StoreOutcome, Error>;

    /// The entry at `key` if it is of the current version and was saved for `digest`, else why
    /// not. Never panics on any stored content and never fails the run.
    fn probe<E: Stored>(&self, key: Option<&CacheKey>, digest: &str) -> Lookup<E>;

    /// [`Store::probe`] reduced to the hit.
    fn lookup<E: Stored>(&self, key: Option<&CacheKey>, digest: &str) -> Option<E> {
        match self.probe(key, digest) {
            Lookup::Hit(entry) => Some(entry),
            _ => None,
        }
    }

    /// Where the store keeps its entries, for reports and log lines (never holds a password).
    fn location(&self) -> String;

    /// Notes in the store's near-code index that the schedule entry at `key` holds code of
    /// size-free identity `shape` ([`crate::seeds::size_free_digest`]), so
    /// [`Store::near_keys`] of that shape names it. A hint: a lost note only means fewer
    /// seeds. The default keeps no index and says so.
    ///
    /// # Errors
    /// [`NearIndexError::Unsupported`] for a store without a near-code index;
    /// [`NearIndexError::Refused`] when the medium refused.
    fn note_near(&self, shape: &str, key: &CacheKey) -> Result<(), NearIndexError> {
        let _ = (shape, key);
        Err(NearIndexError::Unsupported {
            store: self.location(),
        })
    }

    /// The keys of schedule entries noted under size-free identity `shape` (entries of code
    /// with the same loop-nest structure and other extents, or the same code). The entries
    /// are still to be probed: a key only says where to look.
    ///
    /// # Errors
    /// As [`Store::note_near`].
    fn near_keys(&self, shape: &str) -> Result<Vec<CacheKey>, NearIndexError> {
        let _ = shape;
        Err(NearIndexError::Unsupported {
            store: self.location(),
        })
    }
}

/// Why a store gave no answer from a near-code index.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum NearIndexError {
    /// The store keeps no near-code index (the Redis store, a store of the caller's): seeds
    /// of near code cannot be offered from it.
    Unsupported {
        /// The store's location.
        store: String,
    },
    /// The store refused (see [`Refusal`]).
    Refused(Refusal),
}

impl std::fmt::Display for NearIndexError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NearIndexError::Unsupported { store } => {
                write!(f, "the store at {store} keeps no near-code index")
            }
            NearIndexError::Refused(r) => write!(f, "the near-code index refused: {r}"),
        }
    }
}

impl<S: Store + ?Sized> Store for &S {
    fn store_with<E: Stored>(
        &self,
        key: Option<&CacheKey>,
        entry: &E,
        policy: StorePolicy,
    ) -> Result<StoreOutcome, Error> {
        (**self).store_with(key, entry, policy)
    }

    fn probe<E: Stored>(&self, key: Option<&CacheKey>, digest: &str) -> Lookup<E> {
        (**self).probe(key, digest)
    }

    fn location(&self) -> String {
        (**self).location()
    }

    fn note_near(&self, shape: &str, key: &CacheKey) -> Result<(), NearIndexError> {
        (**self).note_near(shape, key)
    }

    fn near_keys(&self, shape: &str) -> Result<Vec<CacheKey>, NearIndexError> {
        (**self).near_keys(shape)
    }
}

/// The one composition of levels: a local store, with or without a shared one behind it
/// (typically a `DiskCache` in front of a `RedisStore`, cargo feature `redis`). Without a
/// shared level ([`TwoLevel::local_only`]) it is the local store alone: every operation is the
/// local level's, answered as the local level answers it.
///
/// - Lookup consults `local` first; on a local hit the shared store is not contacted. Otherwise
///   it consults `shared`; on a shared hit the entry is **back-filled** into `local` (a local
///   refusal is reported but does not turn the hit into a miss). When neither level hits, the
///   result is the shared level's answer (the local answer is in the local level's observer).
/// - Store publishes to `local`, then to `shared` (write-through); under a
///   [`StorePolicy`] each level applies it to its own existing entry. The outcome is `Stored`
///   if at least one level stored the entry, else `KeptExisting` if one level kept its
///   existing entry (the shared level's if both did), else the shared level's refusal;
///   [`TwoLevel::store_each`] returns both outcomes.
///
/// Regimes are per level: each level's stamp is checked and transitioned by that level alone.
#[derive(Clone, Debug)]
pub struct TwoLevel<L, S> {
    local: L,
    shared: Option<S>,
}

impl<L: Store, S: Store> TwoLevel<L, S> {
    /// `local` in front of `shared`.
    pub fn new(local: L, shared: S) -> TwoLevel<L, S> {
        TwoLevel {
            local,
            shared: Some(shared),
        }
    }

    /// `local` with no shared level (a program that picks its levels at run time: a
    /// directory alone, or a directory in front of a server).
    pub fn local_only(local: L) -> TwoLevel<L, S> {
        TwoLevel {
            local,
            shared: None,
        }
    }

    /// The local level.
    pub fn local(&self) -> &L {
        &self.local
    }

    /// The shared level, if there is one.
    pub fn shared(&self) -> Option<&S> {
        self.shared.as_ref()
    }

    /// Publishes `entry` to the local level, then to the shared level, and returns both
    /// outcomes `(local, shared)` (the shared one [`StoreOutcome::Skipped`] without a shared
    /// level).
    ///
    /// # Errors
    /// The caller mistakes of [`Store::store`], raised before either level writes anything.
    pub fn store_each<E: Stored>(
        &self,
        key: Option<&CacheKey>,
        entry: &E,
    ) -> Result<(StoreOutcome, StoreOutcome), Error> {
        self.store_both(key, entry, StorePolicy::LastWriteWins)
    }

    /// [`TwoLevel::store_each`] under `policy`, which each level applies on its own.
    fn store_both<E: Stored>(
        &self,
        key: Option<&CacheKey>,
        entry: &E,
        policy: StorePolicy,
    ) -> Result<(StoreOutcome, StoreOutcome), Error> {
        let local = self.local.store_with(key, entry, policy)?;
        let shared = match &self.shared {
            Some(shared) => shared.store_with(key, entry, policy)?,
            None => StoreOutcome::Skipped,
        };
        Ok((local, shared))
    }
}

impl<L: Store, S: Store> Store for TwoLevel<L, S> {
    fn store_with<E: Stored>(
        &self,
        key: Option<&CacheKey>,
        entry: &E,
        policy: StorePolicy,
    ) -> Result<StoreOutcome, Error> {
        let (local, shared) = self.store_both(key, entry, policy)?;
        Ok(match (local, shared) {
            (StoreOutcome::Stored, _) | (_, StoreOutcome::Stored) => StoreOutcome::Stored,
            (_, StoreOutcome::KeptExisting(k)) | (StoreOutcome::KeptExisting(k), _) => {
                StoreOutcome::KeptExisting(k)
            }
            (StoreOutcome::Skipped, StoreOutcome::Skipped) => StoreOutcome::Skipped,
            (_, StoreOutcome::Refused(r)) | (StoreOutcome::Refused(r), _) => {
                StoreOutcome::Refused(r)
            }
        })
    }

    fn probe<E: Stored>(&self, key: Option<&CacheKey>, digest: &str) -> Lookup<E> {
        let local = self.local.probe(key, digest);
        let shared = match (&local, &self.shared) {
            (Lookup::Miss(_) | Lookup::Refused(_), Some(shared)) => shared,
            _ => return local,
        };
        let found = shared.probe::<E>(key, digest);
        if let Lookup::Hit(entry) = &found {
            // A shared hit was saved for `digest` at `key`, so the local store accepts it; a
            // local refusal is reported by the local level and leaves the hit a hit.
            if let Err(e) = self.local.store(key, entry) {
                tracing::warn!(
                    target: "schedule_cache::store",
                    local = %self.local.location(),
                    key = key.map(CacheKey::as_str).unwrap_or("-"),
                    error = %e,
                    "could not back-fill a shared hit into the local store"
                );
            }
        }
        found
    }

    fn location(&self) -> String {
        match &self.shared {
            Some(shared) => format!("{} then {}", self.local.location(), shared.location()),
            None => self.local.location(),
        }
    }

    /// Notes at both levels; `Ok` if either level noted it, else the local level's error.
    fn note_near(&self, shape: &str, key: &CacheKey) -> Result<(), NearIndexError> {
        let local = self.local.note_near(shape, key);
        let Some(shared) = &self.shared else {
            return local;
        };
        let shared = shared.note_near(shape, key);
        match (local, shared) {
            (Ok(()), _) | (_, Ok(())) => Ok(()),
            (Err(e), Err(_)) => Err(e),
        }
    }

    /// The local level's keys, then the shared level's not already listed; `Err` only if
    /// neither level answers (the local level's error).
    fn near_keys(&self, shape: &str) -> Result<Vec<CacheKey>, NearIndexError> {
        let Some(shared) = &self.shared else {
            return self.local.near_keys(shape);
        };
        match (self.local.near_keys(shape), shared.near_keys(shape)) {
            (Ok(mut keys), Ok(more)) => {
                for k in more {
                    if !keys.contains(&k) {
                        keys.push(k);
                    }
                }
                Ok(keys)
            }
            (Ok(keys), Err(_)) | (Err(_), Ok(keys)) => Ok(keys),
            (Err(e), Err(_)) => Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::disk::{DiskCache, MissReason, Observer, Outcome, Refusal};
    use crate::placement::{Direction, Flip, PlacementEntry, Shipped};

    fn entry(digest: &str) -> PlacementEntry {
        PlacementEntry::new(
            digest,
            vec![Flip {
                node: 2,
                direction: Direction::Materialize,
            }],
            Shipped::Refined,
        )
    }

    #[test]
    fn a_local_hit_never_consults_the_shared_level() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let observer = Observer::new();
        let (near, far) = (
            DiskCache::new(tmp.path().join("near")).with_observer(observer.clone()),
            DiskCache::new(tmp.path().join("far")).with_observer(observer.clone()),
        );
        let key = CacheKey::new("abc-cc").expect("key");
        let both = TwoLevel::new(&near, &far);
        assert_eq!(
            both.store(Some(&key), &entry("abc")).expect("store"),
            StoreOutcome::Stored
        );
        observer.take();
        let found = both.probe::<PlacementEntry>(Some(&key), "abc");
        let events = observer.take();
        assert_eq!(found, Lookup::Hit(entry("abc")));
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].dir, near.dir());
    }

    #[test]
    fn a_double_miss_reports_the_shared_answer_and_back_fills_nothing() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let observer = Observer::new();
        let near = DiskCache::new(tmp.path().join("near")).with_observer(observer.clone());
        let far = DiskCache::new(tmp.path().join("far")).with_observer(observer.clone());
        let key = CacheKey::new("abc-cc").expect("key");
        let both = TwoLevel::new(near, far);
        let found = both.probe::<PlacementEntry>(Some(&key), "abc");
        let events = observer.take();
        assert_eq!(found, Lookup::Miss(MissReason::NoDirectory));
        assert_eq!(events.len(), 2);
        assert!(!tmp.path().join("near").exists());
    }

    #[test]
    fn a_refusing_local_level_still_serves_shared_hits() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let near_dir = tmp.path().join("near");
        std::fs::write(&near_dir, "a file where the directory should be").expect("write");
        let observer = Observer::new();
        let near = DiskCache::new(&near_dir).with_observer(observer.clone());
        let far = DiskCache::new(tmp.path().join("far")).with_observer(observer.clone());
        let key = CacheKey::new("abc-cc").expect("key");
        let both = TwoLevel::new(near, far);
        let (local, shared) = both.store_each(Some(&key), &entry("abc")).expect("store");
        assert!(matches!(local, StoreOutcome::Refused(Refusal::Io { .. })));
        assert_eq!(shared, StoreOutcome::Stored);
        observer.take();
        let found = both.lookup::<PlacementEntry>(Some(&key), "abc");
        let events = observer.take();
        assert_eq!(found, Some(entry("abc")));
        let outcomes: Vec<&Outcome> = events.iter().map(|e| &e.outcome).collect();
        assert!(matches!(
            outcomes.as_slice(),
            [Outcome::Refused(_), Outcome::Hit, Outcome::Refused(_)]
        ));
    }

    #[test]
    fn caller_mistakes_are_raised_before_either_level_writes() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let both = TwoLevel::new(
            DiskCache::new(tmp.path().join("near")),
            DiskCache::new(tmp.path().join("far")),
        );
        let key = CacheKey::new("other-cc").expect("key");
        assert!(matches!(
            both.store(Some(&key), &entry("abc")),
            Err(Error::KeyDigestMismatch { .. })
        ));
        assert!(!tmp.path().join("near").exists() && !tmp.path().join("far").exists());
        assert_eq!(
            both.store::<PlacementEntry>(None, &entry("abc"))
                .expect("skip"),
            StoreOutcome::Skipped
        );
    }

    #[test]
    fn a_local_only_composition_is_the_directory_store() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let observer = Observer::new();
        let store = TwoLevel::<DiskCache, DiskCache>::local_only(
            DiskCache::new(tmp.path().join("c")).with_observer(observer.clone()),
        );
        let key = CacheKey::new("abc-cc").expect("key");
        assert_eq!(
            store.store(Some(&key), &entry("abc")).expect("store"),
            StoreOutcome::Stored
        );
        assert_eq!(store.local().lookup(Some(&key), "abc"), Some(entry("abc")));
        assert_eq!(store.location(), tmp.path().join("c").display().to_string());
        // A miss is the directory's own answer (no shared level to ask), and nothing else runs.
        let other = CacheKey::new("abd-cc").expect("key");
        observer.take();
        let found = store.probe::<PlacementEntry>(Some(&other), "abd");
        let events = observer.take();
        assert_eq!(
            found,
            Lookup::Miss(MissReason::NoEntry {
                same_digest: vec![]
            })
        );
        assert_eq!(events.len(), 1);
    }
}
