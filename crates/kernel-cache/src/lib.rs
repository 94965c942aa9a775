//! An in-memory, byte-weighted cache of compiled kernel programs, and the driver that
//! fills it.
//!
//! A compiler backend renders kernels, compiles groups of them into programs (shared
//! objects, modules) and looks each kernel up by symbol. [`KernelCache`] keeps those
//! programs keyed by kernel key ([`kernel_key`]: kernels that differ only in the names
//! they own share a key). A [`Resolver`] (a cache, a [`Backend`], optionally a
//! [`store::KernelStore`] and a [`Split`]) answers a whole batch and returns what the call
//! did ([`Resolution`]: an answer per kernel, a [`Census`], the store's events); nothing is
//! observed from the side.
//!
//! **A failed candidate fails alone** with [`Resolver::resolve`] ([`Outcome`] per kernel):
//! an autotuner renders a round's candidates, resolves them in one batch, times the `Ok`s
//! and skips the `Err`s. [`Resolver::resolve_strict`] fails the call at the first failure.
//! [`CachedBackend`] holds backend, cache and store together for an adopter.
//!
//! The backend is a trait; this crate never compiles anything itself. `cc-backend` is the
//! reference backend (C via the system compiler); its crate docs show a complete use
//! with real keys, a compile, a safe call and a kernel store. The example below uses a
//! toy backend and hand-made keys; a real caller keys its kernels with [`kernel_key`] (or
//! [`BatchKernel::keyed`]).
//!
//! ```
//! use std::convert::Infallible;
//! use kernel_cache::{Backend, BatchKernel, Compiled, Group, KernelCache, Resolver, Split};
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
//! // Cut into programs of at least one kernel, up to four, compiled at once.
//! let resolver = Resolver::new(&cache, &Upper).split(Split::new(4, 1));
//! // `b` has the same key as `a` (a renamed twin): one representative is compiled.
//! let first = resolver.resolve_strict(&[kernel("k1", "a"), kernel("k1", "b"), kernel("k2", "c")])?;
//! assert_eq!(&*first.answers[1].symbol, "a");
//! assert_eq!((first.census.kernels_compiled, first.census.programs_compiled), (2, 2));
//! // Resolving again is all hits.
//! let again = resolver.resolve_strict(&[kernel("k1", "d")])?;
//! assert!(again.answers[0].same_program(&first.answers[0]));
//! assert_eq!(again.census.kernels_reused, 1);
//! # Ok::<(), kernel_cache::Error<Infallible>>(())
//! ```
//!
//! # Threads
//!
//! A cache is looked up from any number of threads at once, but compiles into one cache do
//! not overlap (a [`Resolver`] that misses holds the cache's compile lock): a search
//! compiles its candidates in parallel by handing them to one resolve with a [`Split`], not
//! by resolving from each thread.
//!
//! # Versions
//!
//! What a minor version may add: variants of the `#[non_exhaustive]` enums [`Error`],
//! [`KernelError`], [`Outcome`](store::Outcome), [`MissReason`](store::MissReason) and
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

pub use backend::{Backend, BatchKernel, Compiled, Group, SavedProgram, Units};
pub use cache::{CacheStats, KernelCache, Resolved};
/// Where a kcache directory keeps each store (the schedule store at its root, the kernel store
/// at `kernels/`): the layout `kcache stats DIR` reads.
pub use cache_dir::Layout;
pub use cached::CachedBackend;
pub use canonical_text::Names;
pub use census::Census;
pub use error::{CompileFailure, Error, KernelError};
pub use key::kernel_key;
pub use partition::{Split, balanced, chunks, programs_for};
pub use resolve::{Outcome, Outcomes, Resolution, Resolver};
