//! [`CachedBackend`]: a backend held together with its in-memory cache and its kernel
//! store, the three things every resolve of an adopter takes.

use crate::store::KernelStore;
use crate::{Backend, BatchKernel, Census, Error, KernelCache, Outcomes, Resolver};

/// A backend, the [`KernelCache`] its programs are kept in, and optionally the persistent
/// [`KernelStore`] under that cache: what a backend adopting kcache holds, resolved
/// through in one call that also says what it did ([`CachedBackend::resolve_each`]).
///
/// It adds nothing to the [`Resolver`] it builds; the fields stay public for every other
/// resolve.
///
/// ```
/// use std::convert::Infallible;
/// use kernel_cache::{Backend, BatchKernel, CachedBackend, Compiled, Group, Layout, SavedProgram};
///
/// /// A toy backend whose program is its symbols, saved as they are.
/// struct Symbols;
/// impl Backend for Symbols {
///     type Source = ();
///     type Program = Vec<String>;
///     type Error = Infallible;
///     fn compile_group(&self, g: &Group<'_, ()>) -> Result<Compiled<Vec<String>>, Infallible> {
///         Ok(Compiled { program: g.kernels.iter().map(|k| k.symbol.clone()).collect(), weight: 1 })
///     }
///     fn identity(&self) -> Option<String> { Some("symbols 1".into()) }
///     fn save(&self, p: &Vec<String>) -> Option<Result<SavedProgram, Infallible>> {
///         Some(Ok(SavedProgram { bytes: b"symbols".to_vec(), symbols: p.clone() }))
///     }
///     fn load(&self, saved: &SavedProgram) -> Option<Result<Compiled<Vec<String>>, Infallible>> {
///         Some(Ok(Compiled { program: saved.symbols.clone(), weight: 1 }))
///     }
/// }
/// let dir = tempfile::tempdir()?;
/// let layout = Layout::new(dir.path());
/// let batch = [BatchKernel { key: "k1".into(), options: vec![], symbol: "a".into(), source: () }];
/// let first = CachedBackend::new(Symbols, 1 << 20).with_store_in(&layout)?;
/// let (outcomes, census) = first.resolve_each(&batch)?;
/// assert!(outcomes[0].is_ok());
/// assert_eq!((census.kernels_compiled, census.kernels_loaded), (1, 0));
/// // Another process (a fresh cache over the same directory) loads it.
/// let second = CachedBackend::new(Symbols, 1 << 20).with_store_in(&layout)?;
/// let (_, census) = second.resolve_each(&batch)?;
/// assert_eq!((census.kernels_compiled, census.kernels_loaded), (0, 1));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct CachedBackend<B: Backend> {
    /// The backend that compiles, saves and loads programs.
    pub backend: B,
    /// The in-memory cache of its programs.
    pub cache: KernelCache<B::Program>,
    /// The persistent store under the cache, if any.
    pub store: Option<KernelStore>,
}

impl<B: Backend> CachedBackend<B> {
    /// `backend` over a new cache of `capacity_bytes` ([`KernelCache::new`]), no store.
    pub fn new(backend: B, capacity_bytes: u64) -> CachedBackend<B> {
        CachedBackend {
            backend,
            cache: KernelCache::new(capacity_bytes),
            store: None,
        }
    }

    /// With the kernel store of `layout` ([`Layout::kernels`](crate::Layout::kernels), the
    /// directory `kcache stats` reads), created now: an unusable directory is this call's
    /// error, where a resolve would only warn and compile.
    pub fn with_store_in(
        mut self,
        layout: &crate::Layout,
    ) -> Result<CachedBackend<B>, cache_dir::Error> {
        let store = KernelStore::new(layout.kernels());
        store.create()?;
        self.store = Some(store);
        Ok(self)
    }

    /// [`Resolver::resolve`] of `batch` over this cache and store, with the [`Census`] of
    /// this call (what it found, compiled, loaded and failed).
    #[allow(clippy::type_complexity)]
    pub fn resolve_each(
        &self,
        batch: &[BatchKernel<B::Source>],
    ) -> Result<(Outcomes<B::Program, B::Error>, Census), Error<B::Error>> {
        let resolver = Resolver::new(&self.cache, &self.backend).store(self.store.as_ref());
        resolver.resolve(batch).map(|r| (r.answers, r.census))
    }
}
