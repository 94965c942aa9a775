//! The process-wide registry of caches and the cold-cache test scope
//! [`with_cold_caches`].

use std::sync::{Condvar, Mutex, Weak};
use std::thread::{self, ThreadId};

use crate::cache::lock;

/// What the cold scope needs of a cache, whatever its program type.
pub(crate) trait ColdScoped: Send + Sync {
    /// Saves what the cache holds under scope `depth` and empties it.
    fn enter_cold(&self, depth: usize);
    /// Empties the cache and puts back what scope `depth` saved, if it saved anything
    /// (a cache created inside the scope saved nothing and ends empty).
    fn leave_cold(&self, depth: usize);
}

/// Every cache the process has created, weakly (a dropped cache is pruned).
static REGISTRY: Mutex<Vec<Weak<dyn ColdScoped>>> = Mutex::new(Vec::new());

/// Which thread is inside a cold scope, and how deeply.
struct ScopeOwner {
    thread: Option<ThreadId>,
    depth: usize,
}

static OWNER: Mutex<ScopeOwner> = Mutex::new(ScopeOwner {
    thread: None,
    depth: 0,
});
static OWNER_FREED: Condvar = Condvar::new();

pub(crate) fn register(cache: Weak<dyn ColdScoped>) {
    let mut registry = lock(&REGISTRY);
    registry.retain(|w| w.strong_count() > 0);
    registry.push(cache);
}

fn live_caches() -> Vec<std::sync::Arc<dyn ColdScoped>> {
    let mut registry = lock(&REGISTRY);
    registry.retain(|w| w.strong_count() > 0);
    registry.iter().filter_map(Weak::upgrade).collect()
}

/// Leaves the scope of depth `depth` when dropped: on return and while unwinding.
struct Leave {
    depth: usize,
}

impl Drop for Leave {
    fn drop(&mut self) {
        for cache in live_caches() {
            cache.leave_cold(self.depth);
        }
        let mut owner = lock(&OWNER);
        owner.depth = self.depth - 1;
        if owner.depth == 0 {
            owner.thread = None;
            OWNER_FREED.notify_all();
        }
    }
}

/// Runs `f` with every [`KernelCache`](crate::KernelCache) this process has created
/// emptied, so a compile inside reuses nothing an earlier compile published; then puts
/// back what each cache held on entry, on return and on panic alike (the panic then
/// continues), discarding whatever `f` published. A cache created inside `f` ends
/// empty. Values handed out inside stay valid, as after an eviction. Scopes nest.
///
/// Meant for tests: a test that needs a cold cache uses this rather than compiling
/// something no earlier compile of the process rendered. Scopes of different threads
/// are serialized (a second thread waits until the first thread's outermost scope
/// ends). Not for use while another thread resolves into a cache: that thread may
/// publish into a cache while it is being emptied or restored, and what it published
/// is then discarded. Counters ([`CacheStats`](crate::CacheStats) hits, misses, ...)
/// are not rolled back.
///
/// ```
/// use std::sync::Arc;
/// use kernel_cache::{KernelCache, Resolved, with_cold_caches};
///
/// let cache = KernelCache::<u32>::new(1 << 20);
/// cache.publish([("k".to_string(), Resolved::new(Arc::new(7), "sym"))], 100);
/// with_cold_caches(|| {
///     assert!(cache.find("k").is_none());
///     cache.publish([("j".to_string(), Resolved::new(Arc::new(8), "sym"))], 100);
/// });
/// assert!(cache.find("k").is_some());
/// assert!(cache.find("j").is_none());
/// ```
pub fn with_cold_caches<R>(f: impl FnOnce() -> R) -> R {
    let me = thread::current().id();
    let depth = {
        let mut owner = lock(&OWNER);
        while owner.thread.is_some_and(|t| t != me) {
            owner = OWNER_FREED.wait(owner).unwrap_or_else(|e| e.into_inner());
        }
        owner.thread = Some(me);
        owner.depth += 1;
        owner.depth
    };
    let leave = Leave { depth };
    for cache in live_caches() {
        cache.enter_cold(depth);
    }
    let result = f();
    drop(leave);
    result
}
