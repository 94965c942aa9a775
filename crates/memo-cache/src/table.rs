//! The scoped memo table: [`with_cache`] makes one, [`get_or_put`] and its variants
//! use it, with single-flight computation of misses; [`Table::get`] only looks up.

use std::hash::Hash;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread::{self, ThreadId};

use dashmap::DashMap;
use dashmap::mapref::entry::Entry;

use crate::hit_counter::HitCounter;
use crate::map_hasher::MapHasherBuilder;

/// Runs `f` with a fresh, empty table when `enabled`, or with `None` when not.
///
/// The table exists only for the duration of the call: it is dropped (with every
/// value in it) when `f` returns, and also when `f` panics, before the panic
/// continues to the caller. It is never registered anywhere; the only way to reach
/// it is the reference given to `f`, which cannot outlive the call, so share it with
/// worker threads by passing it to [`std::thread::scope`] threads explicitly.
///
/// With `enabled == false`, every helper given `None` computes every value and
/// stores nothing, so a caller has one code path for both.
pub fn with_cache<K, V, R>(enabled: bool, f: impl FnOnce(Option<&Table<K, V>>) -> R) -> R
where
    K: Eq + Hash + Clone,
    V: Clone,
{
    if enabled {
        let table = Table::new();
        f(Some(&table))
    } else {
        f(None)
    }
}

/// Looks `key` up in `table`; on a miss, computes `f()`, stores it and returns it.
///
/// `None` computes `f()` every time and stores nothing. See [`Table::get_or_put`]
/// for the guarantees with a table (single flight, failure handling).
pub fn get_or_put<K, V>(table: Option<&Table<K, V>>, key: K, f: impl FnOnce() -> V) -> V
where
    K: Eq + Hash + Clone,
    V: Clone,
{
    match table {
        Some(t) => t.get_or_put(key, f),
        None => f(),
    }
}

/// Like [`get_or_put`], but says whether the value was already there.
///
/// `None` always computes and always reports [`Fetched::Miss`], so code that counts
/// cache effectiveness sees the same shape whether the cache is enabled or not.
pub fn fetch_or_put<K, V>(table: Option<&Table<K, V>>, key: K, f: impl FnOnce() -> V) -> Fetched<V>
where
    K: Eq + Hash + Clone,
    V: Clone,
{
    match table {
        Some(t) => t.fetch_or_put(key, f),
        None => Fetched::Miss(f()),
    }
}

/// Like [`get_or_put`] for a computation that can fail: an `Err` is returned to the
/// caller and nothing is stored.
pub fn try_get_or_put<K, V, E>(
    table: Option<&Table<K, V>>,
    key: K,
    f: impl FnOnce() -> Result<V, E>,
) -> Result<V, E>
where
    K: Eq + Hash + Clone,
    V: Clone,
{
    match table {
        Some(t) => t.try_get_or_put(key, f),
        None => f(),
    }
}

/// Like [`fetch_or_put`] for a computation that can fail: an `Err` is returned to
/// the caller and nothing is stored.
pub fn try_fetch_or_put<K, V, E>(
    table: Option<&Table<K, V>>,
    key: K,
    f: impl FnOnce() -> Result<V, E>,
) -> Result<Fetched<V>, E>
where
    K: Eq + Hash + Clone,
    V: Clone,
{
    match table {
        Some(t) => t.try_fetch_or_put(key, f),
        None => f().map(Fetched::Miss),
    }
}

/// A value and where it came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fetched<V> {
    /// The value was stored already (or was being computed by another call, which
    /// this call waited for): the computation was not run by this call.
    Hit(V),
    /// This call ran the computation.
    Miss(V),
}

impl<V> Fetched<V> {
    /// The value, wherever it came from.
    pub fn into_value(self) -> V {
        match self {
            Fetched::Hit(v) | Fetched::Miss(v) => v,
        }
    }

    /// A reference to the value.
    pub fn value(&self) -> &V {
        match self {
            Fetched::Hit(v) | Fetched::Miss(v) => v,
        }
    }

    /// Whether the computation was skipped.
    pub fn is_hit(&self) -> bool {
        matches!(self, Fetched::Hit(_))
    }
}

/// Counts of what a table's calls did, since the table was made.
///
/// Every finished call counts exactly once as a hit, a miss or a failure, so
/// `hits + misses + failures` is the number of calls (a call answered from the table
/// whose `V::clone` panics is a hit); a [`Table::get`] counts only when it finds a
/// value (a hit), as it computes nothing. Counts are exact for every
/// call that happens-before the read (e.g. calls of threads already joined).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Calls answered without running their computation (including calls that
    /// waited for another call computing the same key).
    pub hits: u64,
    /// Calls that ran their computation and got a value.
    pub misses: u64,
    /// Calls whose computation panicked or returned `Err`; nothing was stored.
    pub failures: u64,
    /// Times a call blocked waiting for another call computing the same key.
    pub waits: u64,
    /// Values stored now.
    pub entries: usize,
}

/// A memo table for one scope, made only by [`with_cache`].
///
/// There is no other constructor, so a table cannot be put in a `static` or outlive
/// its scope:
///
/// ```compile_fail
/// let escaped = memo_cache::with_cache(true, |t: Option<&memo_cache::Table<memo_cache::Key, u32>>| t);
/// ```
///
/// ```compile_fail
/// let table = memo_cache::Table::<memo_cache::Key, u32>::new();
/// ```
///
/// Keys are meant to be [`crate::Key`] digests (any `Eq + Hash + Clone` type works;
/// the in-memory hash is fast rather than attack-resistant, which digests don't
/// need). Values are returned by `Clone`, so make them cheap to clone (numbers,
/// short strings, or an `Arc` of something large).
///
/// It is `Sync` when `K` and `V` are `Send + Sync`: share `&Table` with scoped
/// threads.
pub struct Table<K, V> {
    map: DashMap<K, Slot<V>, MapHasherBuilder>,
    hits: HitCounter,
    misses: Counter,
    failures: Counter,
    waits: Counter,
    /// Values stored; a stored value is never removed, so this is also the count of
    /// values present.
    stored: Counter,
}

/// A map entry: a stored value, or a computation in progress.
enum Slot<V> {
    Ready(V),
    Pending(Arc<Flight>),
}

/// One computation in progress, which other calls for the same key wait on.
struct Flight {
    owner: ThreadId,
    finished: Mutex<bool>,
    cond: Condvar,
}

impl Flight {
    fn new() -> Self {
        Flight {
            owner: thread::current().id(),
            finished: Mutex::new(false),
            cond: Condvar::new(),
        }
    }

    /// Blocks until the computation stored its value or failed.
    fn wait(&self) {
        // No user code ever runs under this mutex, so poisoning cannot happen; if it
        // somehow did, the flag is still meaningful.
        let mut finished = self.finished.lock().unwrap_or_else(PoisonError::into_inner);
        while !*finished {
            finished = self
                .cond
                .wait(finished)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }

    fn finish(&self) {
        *self.finished.lock().unwrap_or_else(PoisonError::into_inner) = true;
        self.cond.notify_all();
    }
}

/// A counter of the slow path, on its own cache line so that counting does not slow
/// a lookup of the map on another thread.
#[repr(align(128))]
#[derive(Default)]
struct Counter(AtomicU64);

impl Counter {
    #[inline(always)]
    fn bump(&self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }

    fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// Counts a computation that unwinds or fails and, if the call claimed its key,
/// clears the claim and wakes the waiters.
struct FailureGuard<'a, K: Eq + Hash + Clone, V> {
    table: &'a Table<K, V>,
    /// The key and flight this call claimed (none for a re-entrant call).
    claim: Option<(&'a K, &'a Arc<Flight>)>,
    /// Cleared once the value is computed (and, if claimed, about to be stored).
    armed: bool,
}

impl<K: Eq + Hash + Clone, V> Drop for FailureGuard<'_, K, V> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        self.table.failures.bump();
        if let Some((key, flight)) = self.claim {
            // Only our own placeholder is removed; the removed slot is dropped after
            // the shard lock is released.
            let removed = self.table.map.remove_if(
                key,
                |_, slot| matches!(slot, Slot::Pending(f) if Arc::ptr_eq(f, flight)),
            );
            drop(removed);
            flight.finish();
        }
    }
}

impl<K, V> std::fmt::Debug for Table<K, V>
where
    K: Eq + Hash + Clone,
    V: Clone,
{
    /// Shows the statistics, never the keys or values.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Table")
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

impl<K, V> Table<K, V>
where
    K: Eq + Hash + Clone,
    V: Clone,
{
    fn new() -> Self {
        Table {
            map: DashMap::with_hasher(MapHasherBuilder::random()),
            hits: HitCounter::default(),
            misses: Counter::default(),
            failures: Counter::default(),
            waits: Counter::default(),
            stored: Counter::default(),
        }
    }

    /// Returns the value stored for `key`; on a miss, computes `f()`, stores it and
    /// returns it.
    ///
    /// - **Single flight:** while one call computes a key, other calls for that key
    ///   wait and then return the stored value, so concurrent misses compute once.
    /// - **Failure stores nothing:** if `f` panics, the panic propagates to this
    ///   caller, nothing is stored, and one waiting call (if any) computes afresh;
    ///   the table stays usable (nothing is poisoned).
    /// - **No lock held across user code:** `f` runs with no map lock held, so it may
    ///   use the table (other keys, or other tables) freely. The one exception is
    ///   `V::clone`, which runs under a shard's read lock and must not use this table.
    /// - **Re-entrancy:** if `f` asks for its own key on its own thread, that inner
    ///   call computes without storing rather than waiting for itself forever. A
    ///   wait that involves other threads cannot be detected: a thread that `f`
    ///   spawns and joins must not ask for `f`'s key, and two computations on two
    ///   threads must not each ask for the other's key (each would wait for the
    ///   other, as with any single-flight cache).
    pub fn get_or_put(&self, key: K, f: impl FnOnce() -> V) -> V {
        self.fetch_or_put(key, f).into_value()
    }

    /// Like [`Table::get_or_put`], but says whether the value was already there.
    #[inline]
    pub fn fetch_or_put(&self, key: K, f: impl FnOnce() -> V) -> Fetched<V> {
        if let Some(v) = self.lookup(&key) {
            return Fetched::Hit(v);
        }
        match self.compute::<std::convert::Infallible>(key, || Ok(f())) {
            Ok(fetched) => fetched,
            Err(never) => match never {},
        }
    }

    /// Like [`Table::get_or_put`] for a computation that can fail: an `Err` is
    /// returned to this caller, nothing is stored, and a waiting call computes
    /// afresh.
    pub fn try_get_or_put<E>(&self, key: K, f: impl FnOnce() -> Result<V, E>) -> Result<V, E> {
        self.try_fetch_or_put(key, f).map(Fetched::into_value)
    }

    /// Like [`Table::fetch_or_put`] for a computation that can fail: an `Err` is
    /// returned to this caller, nothing is stored, and a waiting call computes
    /// afresh.
    #[inline]
    pub fn try_fetch_or_put<E>(
        &self,
        key: K,
        f: impl FnOnce() -> Result<V, E>,
    ) -> Result<Fetched<V>, E> {
        if let Some(v) = self.lookup(&key) {
            return Ok(Fetched::Hit(v));
        }
        self.compute(key, f)
    }

    /// The value stored for `key`, if any; never computes, never waits, never claims.
    ///
    /// - **A hit counts:** a value found counts as a hit in [`Table::stats`] (before
    ///   `V::clone`, as for the other calls); `None` counts nothing, so a caller that
    ///   follows a `None` with [`Table::fetch_or_put`] (or a `try_` variant) for the same
    ///   key has that one call counted once, as a hit, a miss or a failure.
    /// - **A computation in progress is `None`:** a key another call is computing (on
    ///   any thread, this one included) is not stored yet; `get` does not wait for it.
    /// - **No lock held after it returns:** `V::clone` runs under a shard's read lock,
    ///   as for every hit, and must not use this table; nothing else runs under it.
    ///
    /// So a caller can answer hits on a thread that must never block on a computation
    /// (e.g. a thread serving requests) and hand only the `None`s to a thread of their
    /// own that calls [`Table::fetch_or_put`].
    #[inline]
    pub fn get(&self, key: &K) -> Option<V> {
        self.lookup(key)
    }

    /// The hit path: a stored value, cloned out under the shard's read lock.
    #[inline(always)]
    fn lookup(&self, key: &K) -> Option<V> {
        match self.map.get(key)?.value() {
            Slot::Ready(v) => {
                // Counted before the clone, so a call whose clone panics counts too.
                self.hits.bump();
                Some(v.clone())
            }
            Slot::Pending(_) => None,
        }
    }

    /// The slow path: claim the key and compute, or wait for whoever claimed it.
    #[cold]
    fn compute<E>(&self, key: K, f: impl FnOnce() -> Result<V, E>) -> Result<Fetched<V>, E> {
        loop {
            let flight = match self.map.entry(key.clone()) {
                Entry::Occupied(entry) => match entry.get() {
                    Slot::Ready(v) => {
                        self.hits.bump();
                        let v = v.clone();
                        drop(entry);
                        return Ok(Fetched::Hit(v));
                    }
                    Slot::Pending(flight) => Arc::clone(flight),
                },
                Entry::Vacant(entry) => {
                    let flight = Arc::new(Flight::new());
                    drop(entry.insert(Slot::Pending(Arc::clone(&flight))));
                    return self.run(key, &flight, f).map(Fetched::Miss);
                }
            };
            if flight.owner == thread::current().id() {
                // `f` of an outer call on this thread asked for its own key.
                let mut guard = FailureGuard {
                    table: self,
                    claim: None,
                    armed: true,
                };
                let v = f()?;
                guard.armed = false;
                self.misses.bump();
                return Ok(Fetched::Miss(v));
            }
            self.waits.bump();
            flight.wait();
        }
    }

    /// Runs `f` for a key this call has claimed with `flight`.
    fn run<E>(
        &self,
        key: K,
        flight: &Arc<Flight>,
        f: impl FnOnce() -> Result<V, E>,
    ) -> Result<V, E> {
        let mut guard = FailureGuard {
            table: self,
            claim: Some((&key, flight)),
            armed: true,
        };
        // On a panic or an `Err` (or a panicking `clone`), the guard clears the claim.
        let v = f()?;
        let stored = v.clone();
        guard.armed = false;
        drop(guard);
        let replaced = self.map.insert(key, Slot::Ready(stored));
        drop(replaced);
        self.stored.bump();
        self.misses.bump();
        flight.finish();
        Ok(v)
    }

    /// What the table's calls have done so far.
    pub fn stats(&self) -> Stats {
        Stats {
            hits: self.hits.get(),
            misses: self.misses.get(),
            failures: self.failures.get(),
            waits: self.waits.get(),
            entries: self.len(),
        }
    }

    /// How many values are stored (computations in progress are not counted).
    pub fn len(&self) -> usize {
        usize::try_from(self.stored.get()).unwrap_or(usize::MAX)
    }

    /// Whether no value is stored.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::sync::mpsc;

    use super::*;

    type T = Table<u32, String>;

    #[test]
    fn get_answers_only_stored_values_and_counts_only_hits() {
        with_cache(true, |t: Option<&T>| {
            let t = t.unwrap();
            assert_eq!(t.get(&1), None);
            assert_eq!(
                t.stats(),
                Stats::default(),
                "a get finding nothing counts nothing"
            );
            assert_eq!(t.get_or_put(1, || "one".into()), "one");
            assert_eq!(t.get(&1).as_deref(), Some("one"));
            assert_eq!(t.get(&2), None);
            let s = t.stats();
            assert_eq!((s.hits, s.misses, s.failures, s.entries), (1, 1, 0, 1));
        });
    }

    #[test]
    fn get_never_stores_and_a_failure_leaves_none() {
        with_cache(true, |t: Option<&T>| {
            let t = t.unwrap();
            assert_eq!(
                t.try_get_or_put(3, || Err::<String, _>("refused")),
                Err("refused")
            );
            assert_eq!(t.get(&3), None);
            assert_eq!(t.len(), 0);
            let s = t.stats();
            assert_eq!((s.hits, s.misses, s.failures), (0, 0, 1));
        });
    }

    /// A key in flight is `None` for its own computation's thread (no self-wait) and for
    /// another thread (no wait: the computation is held until that thread has its answer).
    #[test]
    fn get_of_a_key_in_flight_is_none_and_never_waits() {
        with_cache(true, |t: Option<&T>| {
            let t = t.unwrap();
            let (asked, answered) = (mpsc::channel(), mpsc::channel::<Option<String>>());
            thread::scope(|s| {
                let other = s.spawn(move || {
                    asked.1.recv().unwrap();
                    answered.0.send(t.get(&7)).unwrap();
                });
                let v = t.get_or_put(7, || {
                    assert_eq!(t.get(&7), None);
                    asked.0.send(()).unwrap();
                    // Still computing: the other thread's get must return without us.
                    // A guard against a get that waits (it would wait for us forever),
                    // not a time assertion.
                    let other_got = answered.1.recv_timeout(std::time::Duration::from_secs(60));
                    assert_eq!(other_got, Ok(None), "the other thread's get waited");
                    "seven".to_string()
                });
                other.join().unwrap();
                assert_eq!(v, "seven");
            });
            assert_eq!(t.get(&7).as_deref(), Some("seven"));
            let s = t.stats();
            assert_eq!((s.hits, s.misses, s.waits), (1, 1, 0));
        });
    }

    /// The pattern it is for: a `get`, then `fetch_or_put` for a `None`; each call counts
    /// once, so `hits + misses + failures` is the number of calls.
    #[test]
    fn get_then_fetch_counts_each_call_once() {
        with_cache(true, |t: Option<&T>| {
            let t = t.unwrap();
            let mut calls = 0u64;
            for i in 0..50u32 {
                let k = i % 7;
                calls += 1;
                let got = match t.get(&k) {
                    Some(v) => Fetched::Hit(v),
                    None => match t.try_fetch_or_put(k, || {
                        if i % 5 == 0 {
                            Err(())
                        } else {
                            Ok(k.to_string())
                        }
                    }) {
                        Ok(f) => f,
                        Err(()) => continue,
                    },
                };
                assert_eq!(got.into_value(), k.to_string());
            }
            let s = t.stats();
            assert_eq!(s.hits + s.misses + s.failures, calls);
            assert_eq!(s.misses, s.entries as u64);
        });
    }
}
