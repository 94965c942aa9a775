//! An in-memory, byte-weighted cache of compiled kernel programs, and the driver that
//! fills it.
//!
//! A compiler backend renders kernels, compiles groups of them into programs (shared
//! objects, modules) and looks each kernel up by symbol. [`KernelCache`] keeps those
//! programs keyed by kernel key (see [`kernel_key`]: kernels that differ only in the
//! names they own share a key), evicting the oldest groups past a byte capacity.
//! [`resolve`] answers a whole batch: lock-free lookups first, then one compile per
//! option list of the missing kernels, one representative per distinct key;
//! [`resolve_split`] additionally cuts large compiles into programs compiled at once on
//! several threads.
//!
//! **A failed candidate fails alone.** [`resolve`] keeps the seed's semantics: the first
//! failure in batch order fails the call. An autotuner whose candidates may not compile
//! (a pragma the compiler refuses, a typo in a template) uses [`resolve_each`] (or
//! [`resolve_split_each`], [`resolve_each_with_store`], [`resolve_split_each_with_store`]):
//! one [`Outcome`] per kernel, a failed kernel's error ([`KernelError::Unit`]) holding its
//! own unit's diagnostics, every other kernel compiled once, published, saved and
//! returned. Failures are not cached: a later resolve compiles them again. The tuning
//! loop is: render the round's candidates, `resolve_each` them in one batch, time the
//! `Ok`s, report and skip the `Err`s (see [`resolve_each`]'s example, and cc-backend's
//! crate docs for one with the real compiler).
//!
//! The backend is a trait ([`Backend`], optionally [`SplitBackend`]); this crate never
//! compiles anything itself. `cc-backend` is the reference backend (C via the system
//! compiler); its crate docs show a complete use: real keys, a compile, a safe call, and
//! programs kept across processes in a [`store::KernelStore`] through
//! [`resolve_with_store`]; [`CachedBackend`] holds backend, cache and store together and
//! resolves per kernel with the call's census. The example below uses a toy backend and hand-made keys; a
//! real caller keys its kernels with [`kernel_key`] (or [`BatchKernel::keyed`]).
//!
//! ```
//! use std::convert::Infallible;
//! use kernel_cache::{Backend, BatchKernel, Compiled, Group, KernelCache, resolve};
//!
//! /// A toy backend whose "program" is the upper-cased text of its kernels.
//! struct Upper;
//! impl Backend for Upper {
//!     type Source = String;
//!     type Program = Vec<(String, String)>;
//!     type Error = Infallible;
//!     fn compile_group(&self, g: &Group<'_, String>) -> Result<Compiled<Self::Program>, Infallible> {
//!         let program: Vec<_> = g.kernels.iter()
//!             .map(|k| (k.symbol.clone(), k.source.to_uppercase()))
//!             .collect();
//!         Ok(Compiled { weight: 100, program })
//!     }
//! }
//!
//! let kernel = |key: &str, symbol: &str| BatchKernel {
//!     key: key.to_string(), options: vec![], symbol: symbol.to_string(), source: "x+1".to_string(),
//! };
//! let cache = KernelCache::new(1 << 20);
//! // `b` has the same key as `a` (a renamed twin): one representative is compiled.
//! let answers = resolve(&cache, &[kernel("k1", "a"), kernel("k1", "b")], &Upper).unwrap();
//! assert_eq!(&*answers[1].symbol, "a");
//! assert!(answers[0].same_program(&answers[1]));
//! // Resolving again is all hits.
//! let again = resolve(&cache, &[kernel("k1", "c")], &Upper).unwrap();
//! assert!(again[0].same_program(&answers[0]));
//! assert_eq!(cache.stats().hits, 1);
//! ```
//!
//! # Threads
//!
//! A cache is shared by reference and looked up from any number of
//! threads at once, but compiles into one cache do not overlap: a resolve that misses
//! holds the cache's compile lock while it compiles (and, with a kernel store, loads and
//! saves), so resolves from several threads, each with its own misses, compile one after
//! the other. A search that renders candidates on several threads compiles them in
//! parallel by handing their kernels to one [`resolve_split`] (which cuts a batch into
//! programs compiled at once), not by resolving from each thread.
//!
//! ```
//! use std::sync::atomic::{AtomicUsize, Ordering};
//! use std::{convert::Infallible, thread, time::Duration};
//! use kernel_cache::{resolve, Backend, BatchKernel, Compiled, Group, KernelCache};
//!
//! /// A slow toy backend that records how many of its compiles ran at once.
//! #[derive(Default)]
//! struct Slow { running: AtomicUsize, most: AtomicUsize }
//! impl Backend for Slow {
//!     type Source = ();
//!     type Program = ();
//!     type Error = Infallible;
//!     fn compile_group(&self, _: &Group<'_, ()>) -> Result<Compiled<()>, Infallible> {
//!         let now = self.running.fetch_add(1, Ordering::SeqCst) + 1;
//!         self.most.fetch_max(now, Ordering::SeqCst);
//!         thread::sleep(Duration::from_millis(50));
//!         self.running.fetch_sub(1, Ordering::SeqCst);
//!         Ok(Compiled { program: (), weight: 1 })
//!     }
//! }
//! let (cache, backend) = (KernelCache::new(1 << 20), Slow::default());
//! thread::scope(|s| {
//!     for key in ["k1", "k2", "k3"] {
//!         let (cache, backend) = (&cache, &backend);
//!         let kernel = BatchKernel { key: key.into(), options: vec![], symbol: key.into(), source: () };
//!         let batch = [kernel];
//!         s.spawn(move || resolve(cache, &batch, backend).unwrap());
//!     }
//! });
//! assert_eq!(backend.most.load(Ordering::SeqCst), 1); // three compiles, one at a time
//! ```
//!
//! # Versions
//!
//! What a minor version may add: variants of the `#[non_exhaustive]` enums [`Error`],
//! [`KernelError`], [`Stage`], [`Outcome`](store::Outcome), [`MissReason`](store::MissReason) and
//! [`NotSaved`](store::NotSaved) (a `match` on them needs a `_` arm), and new functions. A change
//! of the kernel store's format comes with a new [`REGIME`](store::REGIME) (old entries are swept
//! or refused, never misread).
#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod backend;
mod cache;
mod cached;
mod census;
mod error;
mod key;
mod partition;
mod resolve;
pub mod store;
mod table;

pub use backend::{
    Backend, BatchKernel, Compiled, Group, PersistentBackend, SavedProgram, SplitBackend, Units,
};
pub use cache::{CacheStats, KernelCache, Resolved};
/// Where a kcache directory keeps each store (the schedule store at its root, the kernel store
/// at `kernels/`): the layout `kcache stats DIR` reads.
pub use cache_dir::Layout;
pub use cached::CachedBackend;
pub use canonical_text::Names;
pub use census::{Census, with_census};
pub use error::{CompileFailure, Error, KernelError, Stage};
pub use key::kernel_key;
pub use partition::{
    Split, balanced, chunks, current_split_override, programs_for, with_split_override,
};
pub use resolve::{
    CompileRecord, EachResult, Outcome, Outcomes, compile_record, resolve, resolve_each,
    resolve_each_with_store, resolve_split, resolve_split_each, resolve_split_each_with_store,
    resolve_split_with_store, resolve_with_store,
};
