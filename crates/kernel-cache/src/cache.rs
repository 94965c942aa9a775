//! The byte-weighted cache itself: [`KernelCache`], its values ([`Resolved`]) and its
//! statistics ([`CacheStats`]).

use std::collections::BTreeMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::table::{Key, Table};

/// What the cache answers for a key: the shared program holding the kernel's code and
/// the symbol to look the kernel up by in that program.
///
/// The symbol is the name the kernel was *compiled* under, which for a hit may be the
/// name another (renamed) twin of the kernel had. Cloning is cheap (two reference
/// counts). The program stays alive as long as any `Resolved` (or other `Arc`) holding
/// it exists, whatever the cache evicts meanwhile.
pub struct Resolved<P> {
    /// The compiled program (for example a loaded shared object).
    pub program: Arc<P>,
    /// The symbol the kernel was compiled under in `program`.
    pub symbol: Arc<str>,
}

impl<P> Clone for Resolved<P> {
    fn clone(&self) -> Self {
        Resolved {
            program: Arc::clone(&self.program),
            symbol: Arc::clone(&self.symbol),
        }
    }
}

impl<P> fmt::Debug for Resolved<P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Resolved")
            .field("program", &Arc::as_ptr(&self.program))
            .field("symbol", &self.symbol)
            .finish()
    }
}

impl<P> Resolved<P> {
    /// A value for `symbol` in `program`.
    pub fn new(program: Arc<P>, symbol: impl Into<Arc<str>>) -> Self {
        Resolved {
            program,
            symbol: symbol.into(),
        }
    }

    /// Whether `self` and `other` share one program (the same allocation).
    pub fn same_program(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.program, &other.program)
    }
}

/// A snapshot of a cache's counters and occupancy.
///
/// Counters (`hits`, `misses`, `evictions`, `superseded`) only grow; occupancy (`retained_bytes`,
/// `groups`, `entries`) is the state at the time of the snapshot.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Lookups (and kernels of a resolved batch) the cache answered.
    pub hits: u64,
    /// Lookups (and kernels of a resolved batch) the cache did not answer.
    pub misses: u64,
    /// Groups dropped because the retained total exceeded the capacity (or because the
    /// capacity read zero at a publish).
    pub evictions: u64,
    /// Groups dropped because every key they published was re-pointed to a newer group.
    pub superseded: u64,
    /// The summed weight of the groups currently retained.
    pub retained_bytes: u64,
    /// The number of groups currently retained.
    pub groups: u64,
    /// The number of keys currently answered.
    pub entries: u64,
}

/// One stored value and the group that owns its key.
pub(crate) struct Slot<P> {
    pub(crate) value: Resolved<P>,
    pub(crate) group: u64,
}

impl<P> Clone for Slot<P> {
    fn clone(&self) -> Self {
        Slot {
            value: self.value.clone(),
            group: self.group,
        }
    }
}

/// A retained group: its weight and the keys it published (some may have been
/// re-pointed since; `live` counts those it still owns). A kernel key is 32 inline
/// bytes here as in the map; any other key shares its one allocation with the map's
/// entry.
#[derive(Clone)]
pub(crate) struct GroupRec {
    pub(crate) bytes: u64,
    pub(crate) keys: Vec<Key>,
    pub(crate) live: usize,
}

/// The groups, oldest first (ids grow with every publish), and their summed weight.
#[derive(Default)]
pub(crate) struct Groups {
    pub(crate) by_age: BTreeMap<u64, GroupRec>,
    pub(crate) retained: u64,
    pub(crate) next_id: u64,
}

/// A cache of compiled programs, keyed by kernel key, weighted in bytes by group.
///
/// Every [`publish`](KernelCache::publish) retains its entries as one *group* of the
/// caller's weight; the oldest groups are evicted while the retained total exceeds
/// the capacity. Lookups ([`find`](KernelCache::find)) take no lock of the cache's own
/// (only a shard lock of its concurrent map, for reading) and can run from any number
/// of threads while another publishes.
///
/// **Keys** are compared in full, as strings: a key of exactly 64 lowercase hex digits
/// (what [`kernel_key`](crate::kernel_key) returns) is held as the 32 bytes it spells,
/// any other string verbatim, and the two forms never meet, so two keys hit each other
/// exactly when their strings are equal.
///
/// **Capacity.** The capacity is read on every publish and find (see
/// [`set_capacity`](KernelCache::set_capacity)). A capacity of `0` disables the cache:
/// finds miss and a publish retains nothing (and drops whatever was retained).
///
/// **A group larger than the capacity** is still retained, *alone*: its publish evicts
/// every older group, and the next publish evicts it. So the retained total exceeds the
/// capacity only while the newest group by itself does, by at most that group's
/// weight, and a batch whose program outweighs the cache still hits when it is resolved
/// again right away.
///
/// **Re-publishing a key** re-points it to the new group; the older group no longer owns
/// it, so evicting that group leaves the key be. A group that owns no key any more is
/// dropped at once (its weight is no longer retained; counted as `superseded`).
///
/// Values handed out stay valid after eviction: they hold the program by `Arc`.
///
/// A cache is one value, shared by reference; nothing outside it sees it (a test that
/// needs a cold cache makes a new one).
pub struct KernelCache<P> {
    /// Key to value.
    map: Table<P>,
    groups: Mutex<Groups>,
    capacity: AtomicU64,
    hits: AtomicU64,
    misses: AtomicU64,
    evictions: AtomicU64,
    superseded: AtomicU64,
    /// Serializes the compiles of [`resolve`](crate::resolve) on this cache.
    pub(crate) compile_lock: Mutex<()>,
}

impl<P> fmt::Debug for KernelCache<P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KernelCache")
            .field("capacity", &self.capacity())
            .field("stats", &self.stats())
            .finish()
    }
}

/// Locks a mutex whose data stays consistent across a panic of its holder (every
/// critical section of this crate leaves its data consistent before it can panic).
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl<P: Send + Sync + 'static> KernelCache<P> {
    /// A cache of `capacity_bytes`, changeable later with
    /// [`set_capacity`](KernelCache::set_capacity).
    pub fn new(capacity_bytes: u64) -> Self {
        KernelCache {
            map: Table::new(),
            groups: Mutex::new(Groups::default()),
            capacity: AtomicU64::new(capacity_bytes),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            evictions: AtomicU64::new(0),
            superseded: AtomicU64::new(0),
            compile_lock: Mutex::new(()),
        }
    }
}

impl<P> KernelCache<P> {
    /// The capacity in bytes now (0: disabled).
    pub fn capacity(&self) -> u64 {
        self.capacity.load(Ordering::Acquire)
    }

    /// Sets the capacity to `bytes` (0 disables the cache). Takes effect at the next
    /// publish or find; nothing is evicted until the next publish.
    pub fn set_capacity(&self, bytes: u64) {
        self.capacity.store(bytes, Ordering::Release);
    }

    /// The value retained under `key`, counted as a hit, or `None` (a miss) when the
    /// key is absent or the cache is disabled. Takes no lock of the cache's own.
    pub fn find(&self, key: &str) -> Option<Resolved<P>> {
        let found = self.lookup(key, self.capacity());
        self.count(u64::from(found.is_some()), u64::from(found.is_none()));
        found
    }

    /// [`find`](KernelCache::find) without touching the counters, for a capacity
    /// already read.
    pub(crate) fn lookup(&self, key: &str, capacity: u64) -> Option<Resolved<P>> {
        if capacity == 0 {
            return None;
        }
        self.map.get(key)
    }

    /// [`lookup`](KernelCache::lookup) of each of `keys`, in order, as one batch (each
    /// shard of the map is read-locked once, and the lookups of a shard overlap).
    pub(crate) fn lookup_many<'k>(
        &self,
        keys: impl ExactSizeIterator<Item = &'k str>,
        capacity: u64,
    ) -> Vec<Option<Resolved<P>>> {
        if capacity == 0 {
            return keys.map(|_| None).collect();
        }
        self.map.get_many(keys)
    }

    pub(crate) fn count(&self, hits: u64, misses: u64) {
        if hits > 0 {
            self.hits.fetch_add(hits, Ordering::Relaxed);
        }
        if misses > 0 {
            self.misses.fetch_add(misses, Ordering::Relaxed);
        }
    }

    /// Retains `entries` as one group weighing `bytes`, then evicts the oldest groups
    /// while the retained total exceeds the capacity (never the group just published:
    /// see the type's docs for a group larger than the capacity). A key already present
    /// is re-pointed to this group. With a capacity of 0, retains nothing and drops
    /// every retained group.
    pub fn publish(&self, entries: impl IntoIterator<Item = (String, Resolved<P>)>, bytes: u64) {
        let capacity = self.capacity();
        let mut groups = lock(&self.groups);
        if capacity == 0 {
            self.evict_while(&mut groups, |_| true, None);
            return;
        }
        let id = groups.next_id;
        groups.next_id += 1;
        let mut keys = Vec::new();
        let mut released = Vec::new();
        for (key, value) in entries {
            let (previous, key) = self
                .map
                .insert(Key::from_string(key), Slot { value, group: id });
            match previous {
                Some(slot) if slot.group == id => {}
                Some(slot) => {
                    released.push(slot.group);
                    keys.push(key);
                }
                None => keys.push(key),
            }
        }
        for old in released {
            self.release(&mut groups, old);
        }
        if !keys.is_empty() {
            let live = keys.len();
            groups.by_age.insert(id, GroupRec { bytes, keys, live });
            groups.retained = groups.retained.saturating_add(bytes);
        }
        self.evict_while(&mut groups, |retained| retained > capacity, Some(id));
    }

    /// One key of group `old` was re-pointed; drops the group when it owns none.
    fn release(&self, groups: &mut Groups, old: u64) {
        let emptied = match groups.by_age.get_mut(&old) {
            Some(rec) => {
                rec.live = rec.live.saturating_sub(1);
                rec.live == 0
            }
            None => false,
        };
        if emptied && let Some(rec) = groups.by_age.remove(&old) {
            groups.retained = groups.retained.saturating_sub(rec.bytes);
            self.superseded.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Evicts oldest groups (never `keep`) while `over(retained)`.
    fn evict_while(&self, groups: &mut Groups, over: impl Fn(u64) -> bool, keep: Option<u64>) {
        while over(groups.retained) {
            let Some((&oldest, _)) = groups.by_age.first_key_value() else {
                break;
            };
            if Some(oldest) == keep {
                break;
            }
            let Some(rec) = groups.by_age.remove(&oldest) else {
                break;
            };
            for key in &rec.keys {
                drop(self.map.remove_if_group(key, oldest));
            }
            groups.retained = groups.retained.saturating_sub(rec.bytes);
            self.evictions.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The counters and occupancy now.
    pub fn stats(&self) -> CacheStats {
        let groups = lock(&self.groups);
        CacheStats {
            hits: self.hits.load(Ordering::Relaxed),
            misses: self.misses.load(Ordering::Relaxed),
            evictions: self.evictions.load(Ordering::Relaxed),
            superseded: self.superseded.load(Ordering::Relaxed),
            retained_bytes: groups.retained,
            groups: groups.by_age.len() as u64,
            entries: self.map.len() as u64,
        }
    }

    /// The number of keys the cache answers now (ignoring a capacity of 0).
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether the cache holds no key.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Drops every retained group (not counted as evictions). Values handed out stay
    /// valid.
    pub fn clear(&self) {
        let mut groups = lock(&self.groups);
        self.map.clear();
        groups.by_age.clear();
        groups.retained = 0;
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn value(tag: &str) -> Resolved<String> {
        Resolved::new(Arc::new(tag.to_string()), tag)
    }

    #[test]
    fn publish_then_find_hits_and_counts() {
        let c = KernelCache::new(100);
        assert!(c.find("a").is_none());
        c.publish([("a".to_string(), value("pa"))], 10);
        let v = c.find("a").expect("published");
        assert_eq!(&*v.symbol, "pa");
        let s = c.stats();
        assert_eq!(
            (s.hits, s.misses, s.retained_bytes, s.groups),
            (1, 1, 10, 1)
        );
    }

    #[test]
    fn oldest_group_is_evicted_first() {
        let c = KernelCache::new(25);
        c.publish([("a".to_string(), value("a"))], 10);
        c.publish([("b".to_string(), value("b"))], 10);
        c.publish([("c".to_string(), value("c"))], 10);
        assert!(c.find("a").is_none());
        assert!(c.find("b").is_some() && c.find("c").is_some());
        assert_eq!(c.stats().evictions, 1);
        assert_eq!(c.stats().retained_bytes, 20);
    }

    #[test]
    fn repointed_key_survives_eviction_of_its_older_group() {
        let c = KernelCache::new(25);
        c.publish(
            [
                ("a".to_string(), value("old")),
                ("x".to_string(), value("old")),
            ],
            10,
        );
        c.publish([("a".to_string(), value("new"))], 10);
        c.publish([("b".to_string(), value("b"))], 10);
        // The first group went (30 > 25); `a` belongs to the second and stays.
        assert!(c.find("x").is_none());
        assert_eq!(&*c.find("a").expect("re-pointed").symbol, "new");
    }

    #[test]
    fn group_that_lost_every_key_is_dropped_at_once() {
        let c = KernelCache::new(100);
        c.publish([("a".to_string(), value("1"))], 40);
        c.publish([("a".to_string(), value("2"))], 30);
        let s = c.stats();
        assert_eq!((s.retained_bytes, s.groups, s.superseded), (30, 1, 1));
    }

    #[test]
    fn oversized_group_is_retained_alone_until_next_publish() {
        let c = KernelCache::new(50);
        c.publish([("a".to_string(), value("a"))], 10);
        c.publish([("big".to_string(), value("big"))], 80);
        assert!(c.find("a").is_none());
        assert!(c.find("big").is_some());
        assert_eq!(c.stats().retained_bytes, 80);
        c.publish([("b".to_string(), value("b"))], 10);
        assert!(c.find("big").is_none());
        assert_eq!(c.stats().retained_bytes, 10);
    }

    #[test]
    fn capacity_zero_disables_and_capacity_is_read_each_time() {
        let c = KernelCache::new(0);
        c.publish([("a".to_string(), value("a"))], 1);
        assert!(c.find("a").is_none());
        assert_eq!(c.stats().retained_bytes, 0);
        c.set_capacity(10);
        c.publish([("a".to_string(), value("a"))], 1);
        assert!(c.find("a").is_some());
        c.set_capacity(0);
        assert!(c.find("a").is_none(), "a disabled cache misses");
        c.set_capacity(10);
        assert!(c.find("a").is_some(), "the capacity is read at each find");
    }

    #[test]
    fn handed_out_values_outlive_eviction() {
        let c = KernelCache::new(1);
        c.publish([("a".to_string(), value("a"))], 1);
        let v = c.find("a").expect("present");
        c.publish([("b".to_string(), value("b"))], 1);
        assert!(c.find("a").is_none());
        assert_eq!(&*v.program, "a");
    }

    /// The reference model: a list of groups, oldest first, each with the keys it owns.
    #[derive(Default)]
    struct Model {
        capacity: u64,
        groups: Vec<(u64, u64, std::collections::BTreeSet<String>)>,
        map: BTreeMap<String, (u64, String)>,
        next: u64,
        evictions: u64,
        superseded: u64,
    }

    impl Model {
        fn retained(&self) -> u64 {
            self.groups.iter().map(|g| g.1).sum()
        }

        fn publish(&mut self, keys: &[String], bytes: u64, tag: &str) {
            if self.capacity == 0 {
                self.evictions += self.groups.len() as u64;
                self.groups.clear();
                self.map.clear();
                return;
            }
            let id = self.next;
            self.next += 1;
            let mut owned = std::collections::BTreeSet::new();
            for k in keys {
                if let Some((old, _)) = self.map.insert(k.clone(), (id, tag.to_string()))
                    && old != id
                {
                    if let Some(g) = self.groups.iter_mut().find(|g| g.0 == old) {
                        g.2.remove(k);
                    }
                    let before = self.groups.len();
                    self.groups.retain(|g| !g.2.is_empty());
                    self.superseded += (before - self.groups.len()) as u64;
                }
                owned.insert(k.clone());
            }
            if !owned.is_empty() {
                self.groups.push((id, bytes, owned));
            }
            while self.retained() > self.capacity && self.groups.first().is_some_and(|g| g.0 != id)
            {
                let (_, _, keys) = self.groups.remove(0);
                self.evictions += 1;
                for k in keys {
                    self.map.remove(&k);
                }
            }
        }
    }

    #[derive(Clone, Debug)]
    enum Op {
        Publish(Vec<u8>, u64),
        SetCapacity(u64),
    }

    fn op() -> impl proptest::strategy::Strategy<Value = Op> {
        use proptest::prelude::*;
        prop_oneof![
            8 => (proptest::collection::vec(0u8..12, 0..5), 0u64..60).prop_map(|(k, b)| Op::Publish(k, b)),
            1 => (0u64..120).prop_map(Op::SetCapacity),
        ]
    }

    /// The keys of the model test: kernel keys (64 lowercase hex digits, held as bytes)
    /// beside keys one digit or one case away from them, cut or extended, and plain
    /// names, so a wrong hit between the two forms or between near keys would show.
    fn model_key(k: u8) -> String {
        const D: &str = "00ff3c9a1b2e4d5f60718293a4b5c6d7e8f90a1b2c3d4e5f6071829304a5b6c7";
        match k {
            0 => D.to_string(),
            1 => D.replacen('7', "6", 1),
            2 => D.to_uppercase(),
            3 => D.replacen('f', "F", 1),
            4 => D[..63].to_string(),
            5 => format!("{D}0"),
            6 => format!("{}8", &D[..63]),
            7 => "0".repeat(64),
            8 => "k0".to_string(),
            9 => String::new(),
            10 => D.replacen('a', "g", 1),
            _ => format!("k{k}"),
        }
    }

    proptest::proptest! {
        /// Random publish / capacity sequences agree with the reference model, and after
        /// every publish the retained total is within capacity unless the newest group
        /// alone outweighs it (then it is the only group).
        #[test]
        fn eviction_accounting_matches_model(
            initial in 0u64..120,
            ops in proptest::collection::vec(op(), 1..60),
        ) {
            let cache = KernelCache::<String>::new(initial);
            let mut model = Model { capacity: initial, ..Model::default() };
            for (n, op) in ops.into_iter().enumerate() {
                match op {
                    Op::SetCapacity(c) => {
                        cache.set_capacity(c);
                        model.capacity = c;
                    }
                    Op::Publish(ks, bytes) => {
                        let tag = format!("p{n}");
                        let keys: Vec<String> = ks.iter().map(|&k| model_key(k)).collect();
                        cache.publish(keys.iter().map(|k| (k.clone(), value(&tag))), bytes);
                        model.publish(&keys, bytes, &tag);
                        let s = cache.stats();
                        proptest::prop_assert_eq!(s.retained_bytes, model.retained());
                        proptest::prop_assert_eq!(s.groups, model.groups.len() as u64);
                        proptest::prop_assert_eq!(s.evictions, model.evictions);
                        proptest::prop_assert_eq!(s.superseded, model.superseded);
                        proptest::prop_assert_eq!(s.entries, model.map.len() as u64);
                        proptest::prop_assert!(
                            s.retained_bytes <= model.capacity
                                || (s.groups == 1 && model.groups[0].0 + 1 == model.next),
                            "retained {} over capacity {} with {} groups", s.retained_bytes, model.capacity, s.groups
                        );
                    }
                }
                let all: Vec<String> = (0u8..12).map(model_key).collect();
                let many = cache.lookup_many(all.iter().map(String::as_str), cache.capacity());
                for (key, from_batch) in all.iter().zip(many) {
                    let got = cache.find(key).map(|v| v.symbol.to_string());
                    let want = if model.capacity == 0 {
                        None
                    } else {
                        model.map.get(key).map(|(_, t)| t.clone())
                    };
                    proptest::prop_assert_eq!(from_batch.map(|v| v.symbol.to_string()), want.clone(), "key {}", key);
                    proptest::prop_assert_eq!(got, want, "key {}", key);
                }
            }
        }
    }
}
