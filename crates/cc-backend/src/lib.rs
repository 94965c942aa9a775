//! The reference [`kernel_cache`] backend: compiles C kernels of any signature with
//! the system C compiler into shared objects, loads them and calls them safely.
//!
//! [`CcBackend`] implements [`kernel_cache::Backend`] (split compiles and persistence
//! included); its docs say how a program is compiled (a unit
//! per kernel, or merged units for kernels that provably cannot affect each other),
//! isolated, loaded from the very bytes compiled, saved, and what a key does not cover. A
//! kernel is a [`Source`]: the caller's prelude, the kernel's C text and its [`Signature`]
//! (buffers and scalars of the [`Elem`] types, each buffer with the [`Extent`] it must hold
//! at least); [`Source`]'s docs hold the kernel text contract. [`Kernel::call`] is the safe
//! call: it checks the argument count, kinds ([`Arg`]) and buffer lengths against the
//! signature before the kernel runs, and refuses with a typed [`CcError`] otherwise;
//! [`Kernel::raw_function`] gives the kernel's own symbol to callers with their own FFI. A
//! compiler error is [`CcError::Compiler`], naming the kernel that failed and showing its
//! own diagnostics.
//!
//! ```
//! use cc_backend::{Arg, CcBackend, Elem, Extent, Kernel, Signature, Source};
//! use kernel_cache::{BatchKernel, KernelCache, Names, Resolver};
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
//! let answers = Resolver::new(&cache, &backend).split(backend.split()).resolve_strict(&batch)?.answers;
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
//! [`ObjectBackend`] is the second backend: each kernel compiled with a caller-given compiler
//! command to an ELF relocatable object of its own (for a runtime with its own object
//! loader, such as tinygrad's CPU device), keyed canonically and kept in the kernel store.
//!
//! Per-kernel resolves (a tuning round whose candidates may fail) and the kernel store
//! (programs that outlive the process) are [`kernel_cache`]'s; how this backend answers
//! them is in [`CcBackend`]'s docs. Call a kernel through [`Kernel::from_resolved`].
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
mod image;
mod merge;
mod object;
mod observers;
mod persist;
mod program;
mod signature;
mod source;
mod toolchain;
mod unlisted;
mod words;
mod workdir;

pub use backend::CcBackend;
pub use error::CcError;
pub use object::{KernelObject, OBJECT_FORMAT, ObjectBackend, ObjectProgram, defined_function};
pub use persist::SAVED_FORMAT;
pub use program::{CcProgram, Kernel};
pub use signature::{Arg, Elem, Extent, MAX_PARAMS, Param, Signature};
pub use source::{DEFAULT_PRELUDE, Source};
pub use toolchain::{BASE_FLAGS, COMPILER_INPUT_ENV};
