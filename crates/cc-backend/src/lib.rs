//! The reference [`kernel_cache`] backend: compiles C kernels of any signature with
//! the system C compiler into shared objects, loads them and calls them safely.
//!
//! [`CcBackend`] implements [`kernel_cache::Backend`], [`kernel_cache::SplitBackend`]
//! and [`kernel_cache::PersistentBackend`]. A kernel is a [`Source`]: the caller's
//! prelude (headers, `static` helpers), the kernel's C text and its [`Signature`]
//! (buffers of `f32`/`f64`/`i32`/`i64`/`u8`/f16-as-`u16`, const or written, each with
//! the [`Extent`] it must hold at least, and scalars of those types). Each kernel is
//! compiled as a translation unit of its own, behind the prototype its signature
//! implies (so a definition of another C type fails to compile) and a generated
//! uniform-ABI entry, except that kernels which provably cannot affect each other (a
//! prelude of C standard headers only, options that only change code, a text that is one
//! `void` definition of its symbol with no directive and naming no other kernel) share
//! merged units of at most 32, compiled concurrently, falling back to a unit each when
//! one fails ([`CcBackend::merged_compiles`] counts them; the rule is part of the
//! identity); one compiler command compiles a program's units and links them
//! into one shared object (`cc -O2 -shared -fPIC`, or `$CC`), loaded with `libloading`
//! (`RTLD_NOW`) and weighed by its size. On Linux it is loaded from a sealed memory file
//! holding the bytes read once from the linker's output (or given to
//! [`PersistentBackend::load`](kernel_cache::PersistentBackend::load)), never by a path
//! another process could change; compiles happen only in a work directory no other user
//! can write without the sticky bit (a shared sticky `/tmp` gets a private subdirectory;
//! see [`CcBackend::with_work_dir`]), others are refused with [`CcError::WorkDir`].
//! No preprocessor state crosses from one kernel to another: a kernel means the same
//! whichever companions share its program. A key
//! does not cover the content of the headers a kernel includes: a saved program records
//! them and is never loaded from the kernel store after one changed or after a header of
//! the same name appeared in an include directory searched before its own, but the
//! in-memory cache does not look (see [`CcBackend`] for what goes unseen).
//!
//! [`Kernel::call`] is the safe call: it checks the argument count, each argument's
//! kind ([`Arg`]) and each buffer's length against the signature before the kernel
//! runs, and refuses with a typed [`CcError`] otherwise. [`Kernel::raw_function`] gives
//! the kernel's own symbol to callers with their own FFI (calling it is `unsafe`).
//! A compiler error is [`CcError::Compiler`], whose display shows the compiler's first
//! diagnostics and names the kernel that failed (each kernel is compiled on its own, as
//! `kernel.c` in a directory of its own, so equal keys mean equal code).
//!
//! **Kernel text contract.** Prelude and text are trusted C. The text defines the
//! kernel under its symbol with the signature's C type, touches no buffer element at
//! or beyond that buffer's extent, writes only through written buffers, keeps no
//! pointer after returning and may run on several threads at once (a [`Kernel`] is
//! `Send + Sync`, so safe calls of one kernel may overlap: no unsynchronised `static`
//! state): the compiler checks the type, the safe call checks the lengths, the rest is
//! the kernel author's responsibility, as with any C code.
//! Helpers with external linkage would be defined once per kernel and fail to link:
//! make them `static`.
//!
//! ```
//! use cc_backend::{Arg, CcBackend, Elem, Extent, Kernel, Signature, Source};
//! use kernel_cache::{BatchKernel, KernelCache, Names, resolve_split};
//!
//! let backend = CcBackend::new()?;
//! let cache = KernelCache::new(64 << 20);
//! // void scale(float *out, const float *x, float s, int n), buffers of n floats.
//! let signature = Signature::new()
//!     .buffer_mut("out", Elem::F32, Extent::of("n"))
//!     .buffer("x", Elem::F32, Extent::of("n"))
//!     .scalar("s", Elem::F32)
//!     .scalar("n", Elem::I32);
//! let kernel = |name: &str, expr: &str| {
//!     let text = format!(
//!         "void {name}(float *out, const float *x, float s, int n) {{\n\
//!            for (int i = 0; i < n; ++i) out[i] = {expr};\n}}"
//!     );
//!     let names = Names::new().with_bound(["out", "x", "s", "n"]);
//!     Source::new(text, signature.clone())
//!         .batch_kernel(name, &names, vec!["-ffp-contract=off".to_string()], backend.identity())
//! };
//! let batch = [kernel("scale", "x[i] * s"), kernel("shift", "x[i] + s")];
//! let answers = resolve_split(&cache, &batch, &backend)?;
//! let shift = Kernel::from_resolved(&answers[1])?;
//! let mut out = [0.0f32; 3];
//! shift.call(&mut [Arg::F32Mut(&mut out), Arg::F32(&[1.0, 2.0, 3.0]), Arg::F32Scalar(0.5), Arg::I32Scalar(3)])?;
//! assert_eq!(out, [1.5, 2.5, 3.5]);
//! // A wrong kind is refused before the kernel runs.
//! let wrong = shift.call(&mut [Arg::F32Mut(&mut out), Arg::F32(&[1.0; 3]), Arg::F64Scalar(0.5), Arg::I32Scalar(3)]);
//! assert!(matches!(wrong, Err(cc_backend::CcError::ArgKind { index: 2, .. })));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! **A tuning round whose candidates may fail.** [`kernel_cache::resolve_each`] (and its
//! split and store variants) answers each kernel on its own: every unit is compiled once,
//! a unit the compiler refuses is reported alone ([`kernel_cache::KernelError::Unit`],
//! its [`CcError::Compiler`] holding that unit's diagnostics only) and the others are
//! linked into one program without it. [`CcBackend::units_compiled`] counts the unit
//! compiles.
//!
//! ```
//! use std::time::Instant;
//! use cc_backend::{Arg, CcBackend, CcError, Kernel, Signature, Source};
//! use kernel_cache::{resolve_each, KernelCache, Names};
//!
//! let backend = CcBackend::new()?;
//! let cache = KernelCache::new(64 << 20);
//! let names = Names::new().with_bound(["out", "a", "b", "n"]);
//! // Candidates of one kernel: unroll factors, one of them rendered with a typo.
//! let candidate = |unroll: u32, end: &str| {
//!     let name = format!("mul_u{unroll}");
//!     let text = format!("void {name}(float *out, const float *a, const float *b, int n) {{\n\
//!                         #pragma GCC unroll {unroll}\n\
//!                         for (int i = 0; i < n; ++i) out[i] = a[i] * b[i]{end}\n}}");
//!     Source::new(text, Signature::out_a_b_n()).batch_kernel(&name, &names, vec![], backend.identity())
//! };
//! let batch = [candidate(1, ";"), candidate(2, ""), candidate(4, ";"), candidate(8, ";")];
//! let outcomes = resolve_each(&cache, &batch, &backend)?;
//! assert_eq!(backend.units_compiled(), 4); // each candidate compiled once
//! let (a, b) = (vec![1.5f32; 4096], vec![2.0f32; 4096]);
//! let mut best: Option<(std::time::Duration, &str)> = None;
//! for (candidate, outcome) in batch.iter().zip(&outcomes) {
//!     let resolved = match outcome {
//!         Ok(resolved) => resolved,
//!         Err(failed) => {
//!             // Reported and skipped: the diagnostics are this candidate's own.
//!             assert!(failed.is_alone());
//!             let Some(CcError::Compiler { stderr, .. }) = failed.backend_error() else { unreachable!() };
//!             eprintln!("{} does not compile:\n{stderr}", candidate.symbol);
//!             continue;
//!         }
//!     };
//!     let kernel = Kernel::from_resolved(resolved)?;
//!     let mut out = vec![0.0f32; 4096];
//!     let started = Instant::now();
//!     kernel.call(&mut [Arg::F32Mut(&mut out), Arg::F32(&a), Arg::F32(&b), Arg::I32Scalar(4096)])?;
//!     let took = started.elapsed();
//!     assert_eq!(out[4095], 3.0);
//!     if best.is_none_or(|(t, _)| took < t) {
//!         best = Some((took, candidate.symbol.as_str()));
//!     }
//! }
//! assert!(outcomes[1].is_err() && best.is_some());
//! // The failure was not cached: resolving it again compiles (and fails) again.
//! assert!(resolve_each(&cache, &batch[1..2], &backend)?[0].is_err());
//! assert_eq!(backend.units_compiled(), 5);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! **Programs that outlive the process.** Put a [`kernel_cache::store::KernelStore`]
//! (a directory of your own, private to your user) under the cache and resolve with
//! [`kernel_cache::resolve_with_store`] (or `resolve_split_with_store`): a later process
//! loads what an earlier one compiled, renamed twins included, instead of compiling it.
//! The directory is created by the first resolve that compiles, or up front by
//! `KernelStore::create`, which also reports a directory the store refuses. Call a
//! kernel through [`Kernel::from_resolved`]: a twin's answer names the symbol its program
//! was compiled under, which may be another kernel's name.
//!
//! ```
//! use cc_backend::{Arg, CcBackend, Elem, Extent, Kernel, Signature, Source};
//! use kernel_cache::{resolve_with_store, with_census, KernelCache, Names};
//! use kernel_cache::store::KernelStore;
//!
//! let dir = tempfile::tempdir()?;
//! let backend = CcBackend::new()?;
//! let signature = Signature::new()
//!     .buffer_mut("out", Elem::F32, Extent::of("n"))
//!     .buffer("x", Elem::F32, Extent::of("n"))
//!     .scalar("n", Elem::I32);
//! // One kernel as two runs of a renderer name it (a fissioned routine's segment kernel:
//! // its own name is keyed by its role, `canonical_text::Names::kernel_name_by_role`).
//! let render = |name: &str, out: &str, x: &str| {
//!     let text = format!("void {name}(float *{out}, const float *{x}, int n) {{\n\
//!                         for (int i = 0; i < n; ++i) {out}[i] = sqrtf({x}[i]);\n}}");
//!     Source::new(text, signature.clone())
//!         .batch_kernel(name, &Names::new().with_bound([out, x, "n"]), vec![], backend.identity())
//! };
//! let store = KernelStore::new(dir.path().join("kernels"));
//! // Optional, but a resolve only reports an unusable directory (another user's,
//! // group-writable) as a miss to `tracing`: this says so at once.
//! store.create()?;
//! // First process: compiles and saves.
//! let cache = KernelCache::new(64 << 20);
//! let (first, census) = with_census(|| resolve_with_store(&cache, Some(&store), &[render("step__seg0", "data0", "data1")], &backend));
//! first?;
//! assert_eq!(census.kernels_compiled, 1);
//! // Second process (a fresh in-memory cache): a renamed twin is loaded, not compiled.
//! let cache = KernelCache::new(64 << 20);
//! let (answers, census) = with_census(|| resolve_with_store(&cache, Some(&store), &[render("step__seg4", "buf0", "buf1")], &backend));
//! let answers = answers?;
//! assert_eq!((census.kernels_compiled, census.kernels_loaded), (0, 1));
//! assert_eq!(&*answers[0].symbol, "step__seg0"); // the name it was compiled under
//! let kernel = Kernel::from_resolved(&answers[0])?;
//! let mut out = [0.0f32; 2];
//! kernel.call(&mut [Arg::F32Mut(&mut out), Arg::F32(&[4.0, 9.0]), Arg::I32Scalar(2)])?;
//! assert_eq!(out, [2.0, 3.0]);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Versions
//!
//! What a minor version may add: variants of the `#[non_exhaustive]` [`CcError`] (a new way a
//! compile or load is refused; a `match` on it needs a `_` arm), new [`Elem`] kinds only with a
//! breaking release (signatures are part of keys), and new methods. Anything that can change the
//! object code of a program is a line of the backend's identity, so it never shares a key with
//! what an older version compiled.
#![deny(unsafe_code)]
#![deny(missing_docs)]

mod backend;
mod deps;
mod error;
mod generate;
mod image;
mod merge;
mod observers;
mod persist;
mod program;
mod signature;
mod source;
mod unlisted;
mod workdir;

pub use backend::{BASE_FLAGS, COMPILER_INPUT_ENV, CcBackend, PreparedProgram};
pub use error::CcError;
pub use generate::{elementwise_kernel, realistic_kernel, realistic_kernel_numbered};
pub use persist::SAVED_FORMAT;
pub use program::{CcProgram, Kernel};
pub use signature::{Arg, Elem, Extent, MAX_PARAMS, Param, Signature};
pub use source::{DEFAULT_PRELUDE, Source};
