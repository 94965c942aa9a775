//! The kcache Python package (`import kcache`): a Pythonic front over the Rust crates,
//! built with PyO3 and maturin (`cargo xtask wheel`).
//!
//! This crate is the native module `kcache._kcache`; `python/kcache/__init__.py` re-exports
//! it, `python/kcache/_kcache.pyi` types it. One Rust module per file, each registering its
//! functions and classes into the native module:
//!
//! - `canonical.rs`: `kcache.Names`, `kcache.canonical_key`, `kcache.canonicalize`,
//!   `kcache.kernel_key` (canonical-text and kernel-cache's key, byte for byte);
//! - `kernels.rs`: `kcache.KernelCache` (the kernel cache, the persistent kernel store and
//!   cc-backend's C compiler), `kcache.Signature`, `kcache.Kernel`;
//! - `schedules.rs`: `kcache.ScheduleCache` (schedule-cache over a directory store);
//! - `memo.rs`: `kcache.MemoTable` (memo-cache's table over Python values);
//! - `errors.rs`: the exceptions, under `kcache.Error`.
//!
//! ```python
//! import kcache
//! a = "void k(float *out) { for (int i3 = 0; i3 < 4; ++i3) out[i3] = 0; }"
//! b = "void k(float *out) { for (int j7 = 0; j7 < 4; ++j7) out[j7] = 0; }"
//! assert kcache.canonical_key(a, "k") == kcache.canonical_key(b, "k")
//! ```
//!
//! Every class is frozen and `Sync` (PyO3 checks), so Python threads may share one; the GIL
//! is released around compiles, store reads and writes, and lookups.
//!
//! `#![deny(unsafe_code)]` rather than `forbid`: PyO3's macros expand to `unsafe` blocks
//! under their own `#[allow]`, which `forbid` would reject. This crate writes none.

#![deny(missing_docs)]
#![deny(unsafe_code)]

use pyo3::prelude::*;

mod canonical;
mod errors;
mod kernels;
mod memo;
mod object;
mod schedules;

/// The native module `kcache._kcache`: each file's items, registered in turn.
#[pymodule]
fn _kcache(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    errors::register(m)?;
    canonical::register(m)?;
    kernels::register(m)?;
    schedules::register(m)?;
    memo::register(m)?;
    object::register(m)?;
    Ok(())
}
