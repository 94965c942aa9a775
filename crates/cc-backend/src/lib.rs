//! The reference [`kernel_cache`] backend: compiles C kernels with the system C
//! compiler into shared objects, loads them and calls them.
//!
//! [`CcBackend`] implements [`kernel_cache::Backend`] and [`kernel_cache::SplitBackend`]:
//! each program is one C file compiled by `cc -O2 -shared -fPIC` (or `$CC`), loaded
//! with `libloading` and weighed by the size of its shared object. A compiler error
//! comes back as [`CcError::Compiler`] carrying the compiler's diagnostics.
//!
//! **Kernel text contract.** A kernel is trusted C text that defines a function of
//! [`KERNEL_SIGNATURE`], `void name(float *out, const float *a, const float *b, int n)`,
//! under the kernel's symbol, touching only indices `0..n` of each array. The backend
//! declares that prototype ahead of the kernels, so a kernel of another type is a
//! compile error, and [`Kernel::call`] checks the slice lengths; what the C code does
//! within those bounds is the kernel author's responsibility, as with any C code.
//!
//! ```
//! use cc_backend::{CcBackend, Kernel, elementwise_kernel};
//! use kernel_cache::{BatchKernel, KernelCache, resolve_split};
//!
//! let backend = CcBackend::new()?;
//! let cache = KernelCache::new(64 << 20);
//! let kernel = |name: &str, expr: &str| BatchKernel {
//!     key: format!("demo:{expr}"),
//!     options: vec!["-ffp-contract=off".to_string()],
//!     symbol: name.to_string(),
//!     source: elementwise_kernel(name, expr),
//! };
//! let batch = [kernel("add", "a[i] + b[i]"), kernel("mul", "a[i] * b[i]")];
//! let answers = resolve_split(&cache, &batch, &backend)?;
//! let mul = Kernel::from_resolved(&answers[1])?;
//! let mut out = [0.0f32; 3];
//! mul.call(&mut out, &[1.0, 2.0, 3.0], &[4.0, 5.0, 6.0])?;
//! assert_eq!(out, [4.0, 10.0, 18.0]);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![deny(unsafe_code)]
#![deny(missing_docs)]

mod backend;
mod error;
mod generate;
mod program;

pub use backend::{BASE_FLAGS, CcBackend, KERNEL_SIGNATURE, PreparedProgram};
pub use error::CcError;
pub use generate::{elementwise_kernel, realistic_kernel, realistic_kernel_numbered};
pub use program::{CcProgram, Kernel};
