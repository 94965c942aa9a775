//! Scoped counts of reused and compiled kernels: [`with_census`] and [`Census`].

use std::cell::RefCell;

/// What the resolves inside a [`with_census`] scope did.
///
/// A kernel of a batch counts in at most one of `kernels_reused`, `kernels_compiled`,
/// `kernels_loaded`, `kernels_failed` and `kernels_remembered_failed`: in the first when a
/// lookup answered it, in another when it was the representative of its key, and in none
/// when it is a twin (the same key later in the batch) of a representative the same
/// resolve compiled, loaded or failed. So, for a resolve that returned, the five sum to the
/// batch's length less those twins.
///
/// ```
/// use std::convert::Infallible;
/// use kernel_cache::store::KernelStore;
/// use kernel_cache::{
///     resolve_with_store, with_census, Backend, BatchKernel, Compiled, Group, KernelCache,
///     PersistentBackend, SavedProgram,
/// };
///
/// /// A toy backend whose program is its symbols, saved as they are.
/// struct Symbols;
/// impl Backend for Symbols {
///     type Source = ();
///     type Program = Vec<String>;
///     type Error = Infallible;
///     fn compile_group(&self, g: &Group<'_, ()>) -> Result<Compiled<Vec<String>>, Infallible> {
///         let program = g.kernels.iter().map(|k| k.symbol.clone()).collect();
///         Ok(Compiled { program, weight: 1 })
///     }
/// }
/// impl PersistentBackend for Symbols {
///     fn identity(&self) -> String { "symbols 1".into() }
///     fn save(&self, p: &Vec<String>) -> Result<SavedProgram, Infallible> {
///         Ok(SavedProgram { bytes: b"symbols".to_vec(), symbols: p.clone() })
///     }
///     fn load(&self, saved: &SavedProgram) -> Result<Compiled<Vec<String>>, Infallible> {
///         Ok(Compiled { program: saved.symbols.clone(), weight: 1 })
///     }
/// }
/// let kernel = |key: &str, symbol: &str| BatchKernel {
///     key: key.to_string(), options: vec![], symbol: symbol.to_string(), source: (),
/// };
/// let batch = [kernel("k1", "a"), kernel("k1", "b"), kernel("k2", "c")]; // `b`: `a`'s twin
/// let dir = tempfile::tempdir()?;
/// let store = KernelStore::new(dir.path().join("kernels"));
/// let count = |cache, batch: &[_]| {
///     let (answers, c) = with_census(|| resolve_with_store(cache, Some(&store), batch, &Symbols));
///     answers.map(|_| (c.kernels_compiled, c.kernels_loaded, c.kernels_reused))
/// };
/// let cache = KernelCache::new(1 << 20);
/// assert_eq!(count(&cache, &batch)?, (2, 0, 0)); // `b` counts in none
/// // Resolved again, each kernel is answered by its own lookup, `b` too.
/// assert_eq!(count(&cache, &batch)?, (0, 0, 3));
/// // Another process (a fresh cache) loads the two programs' kernels; `b` counts in none.
/// assert_eq!(count(&KernelCache::new(1 << 20), &batch)?, (0, 2, 0));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Census {
    /// Kernels the cache's lookups answered (twins sharing a compiled representative
    /// are not counted here), added once per resolve call.
    pub kernels_reused: u64,
    /// Kernels compiled (representatives only: one per distinct key).
    pub kernels_compiled: u64,
    /// Programs compiled (one per group, or one per chunk on the concurrent path).
    pub programs_compiled: u64,
    /// Resolve calls.
    pub resolves: u64,
    /// Kernels answered by loading a program from a persistent kernel store
    /// (representatives only), not compiled.
    pub kernels_loaded: u64,
    /// Programs loaded from a persistent kernel store (one per blob).
    pub programs_loaded: u64,
    /// Kernels a per-kernel resolve ([`resolve_each`](crate::resolve_each) and its
    /// variants) answered with an error (representatives only: one per distinct key),
    /// alone or with their whole program. A strict resolve counts none: its failure is
    /// the call's error.
    pub kernels_failed: u64,
    /// Kernels a per-kernel resolve answered with a failure the kernel store remembered
    /// from an earlier resolve ([`KernelError::Remembered`](crate::KernelError::Remembered);
    /// representatives only), compiling nothing for them. Not counted in `kernels_failed`.
    pub kernels_remembered_failed: u64,
    /// Waits for a kernel store's lock (`cache.lock` or the counters' lock) that reached
    /// their bound: each cost at most what was left of its resolve's lock wait, so a
    /// resolve's timeouts together cost at most one lock wait
    /// ([`KernelStore::with_lock_wait`](crate::store::KernelStore::with_lock_wait)).
    pub store_lock_timeouts: u64,
    /// Kernel store operations (a lookup, a save, an eviction, a counters update) whose
    /// lock was held and was not waited for, so they were given up at once: the store was
    /// backing off after a lock timeout
    /// ([`KernelStore::with_lock_backoff`](crate::store::KernelStore::with_lock_backoff)),
    /// or the resolve's lock wait was used up.
    pub store_lock_skips: u64,
}

/// Field by field: the census of two scopes (or of two threads) taken together.
///
/// ```
/// use kernel_cache::Census;
/// let a = Census { kernels_compiled: 2, resolves: 1, ..Census::default() };
/// let b = Census { kernels_loaded: 3, resolves: 1, ..Census::default() };
/// let both = a + b;
/// assert_eq!((both.kernels_compiled, both.kernels_loaded, both.resolves), (2, 3, 2));
/// ```
impl std::ops::Add for Census {
    type Output = Census;
    fn add(mut self, other: Census) -> Census {
        self += other;
        self
    }
}

impl std::ops::AddAssign for Census {
    fn add_assign(&mut self, d: Census) {
        // Destructured, so a new field cannot be left out of the sum.
        let Census {
            kernels_reused,
            kernels_compiled,
            programs_compiled,
            resolves,
            kernels_loaded,
            programs_loaded,
            kernels_failed,
            kernels_remembered_failed,
            store_lock_timeouts,
            store_lock_skips,
        } = d;
        self.kernels_reused += kernels_reused;
        self.kernels_compiled += kernels_compiled;
        self.programs_compiled += programs_compiled;
        self.resolves += resolves;
        self.kernels_loaded += kernels_loaded;
        self.programs_loaded += programs_loaded;
        self.kernels_failed += kernels_failed;
        self.kernels_remembered_failed += kernels_remembered_failed;
        self.store_lock_timeouts += store_lock_timeouts;
        self.store_lock_skips += store_lock_skips;
    }
}

impl std::iter::Sum for Census {
    fn sum<I: Iterator<Item = Census>>(iter: I) -> Census {
        iter.fold(Census::default(), |a, b| a + b)
    }
}

thread_local! {
    static STACK: RefCell<Vec<Census>> = const { RefCell::new(Vec::new()) };
}

/// Runs `f` and returns what the resolves it made *on this thread* added up to. Scopes
/// nest: a resolve counts in every enclosing scope. A panic in `f` ends the scope and
/// continues.
///
/// ```
/// use kernel_cache::with_census;
/// let ((), census) = with_census(|| ());
/// assert_eq!(census.resolves, 0);
/// ```
pub fn with_census<R>(f: impl FnOnce() -> R) -> (R, Census) {
    struct Pop;
    impl Drop for Pop {
        fn drop(&mut self) {
            STACK.with(|s| s.borrow_mut().pop());
        }
    }
    STACK.with(|s| s.borrow_mut().push(Census::default()));
    let pop = Pop;
    let result = f();
    let census = STACK.with(|s| s.borrow().last().copied().unwrap_or_default());
    drop(pop);
    (result, census)
}

/// Adds `delta` to every enclosing census of this thread.
pub(crate) fn note(delta: Census) {
    STACK.with(|s| {
        for c in s.borrow_mut().iter_mut() {
            *c += delta;
        }
    });
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn nested_scopes_both_count() {
        let ((), outer) = with_census(|| {
            note(Census {
                kernels_reused: 2,
                ..Census::default()
            });
            let ((), inner) = with_census(|| {
                note(Census {
                    kernels_reused: 3,
                    resolves: 1,
                    ..Census::default()
                })
            });
            assert_eq!(inner.kernels_reused, 3);
        });
        assert_eq!(outer.kernels_reused, 5);
        assert_eq!(outer.resolves, 1);
    }

    #[test]
    fn outside_any_scope_notes_nothing() {
        note(Census {
            kernels_reused: 1,
            ..Census::default()
        });
        let ((), c) = with_census(|| ());
        assert_eq!(c, Census::default());
    }
}
