//! What one resolve did, counted: [`Census`].

/// What a resolve did ([`Resolution::census`](crate::Resolution::census)); censuses of
/// several resolves add up (`+`, `sum`).
///
/// A kernel of a batch counts in at most one of `kernels_reused`, `kernels_compiled`,
/// `kernels_loaded`, `kernels_failed` and `kernels_remembered_failed`: in the first when a
/// lookup answered it, in another when it was the representative of its key, and in none
/// when it is a twin (the same key later in the batch) of a representative the same
/// resolve compiled, loaded or failed. So, for a resolve that returned, the five sum to the
/// batch's length less those twins.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Census {
    /// Kernels the cache's lookups answered (twins sharing a compiled representative
    /// are not counted here), added once per resolve call.
    pub kernels_reused: u64,
    /// Kernels compiled (representatives only: one per distinct key).
    pub kernels_compiled: u64,
    /// Programs compiled.
    pub programs_compiled: u64,
    /// Resolve calls (1 for one resolve's census; 0 for a batch refused before any lookup).
    pub resolves: u64,
    /// Kernels answered by loading a program from a persistent kernel store
    /// (representatives only), not compiled.
    pub kernels_loaded: u64,
    /// Programs loaded from a persistent kernel store (one per blob).
    pub programs_loaded: u64,
    /// Kernels a per-kernel resolve ([`Resolver::resolve`](crate::Resolver::resolve))
    /// answered with an error (representatives only: one per distinct key),
    /// alone or with their whole program. A strict resolve counts none: its failure is
    /// the call's error.
    pub kernels_failed: u64,
    /// Kernels a per-kernel resolve answered with a failure the kernel store remembered
    /// from an earlier resolve ([`KernelError::Remembered`](crate::KernelError::Remembered);
    /// representatives only), compiling nothing for them. Not counted in `kernels_failed`.
    pub kernels_remembered_failed: u64,
    /// Waits for a kernel store's lock that reached their bound, at most one lock wait in
    /// all ([`KernelStore::with_lock_wait`](crate::store::KernelStore::with_lock_wait)).
    pub store_lock_timeouts: u64,
    /// Kernel store operations given up at once because their lock was held: the store
    /// backing off ([`KernelStore::with_lock_backoff`](crate::store::KernelStore::with_lock_backoff))
    /// or the resolve's lock wait used up.
    pub store_lock_skips: u64,
}

/// Field by field: the census of two resolves taken together.
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
