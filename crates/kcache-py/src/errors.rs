//! The exceptions of `kcache`: one hierarchy under `kcache.Error`, each carrying the Rust
//! error's message (its `Display`, causes included), and [`PyError`], the crate's one error
//! enum, which picks the exception a Rust error becomes.
//!
//! ```text
//! kcache.Error                 every error kcache raises (catch this one to catch them all)
//! ├── kcache.CompileError      a kernel (or its program) did not compile; `.symbol` names it
//! ├── kcache.SignatureError    a signature is invalid, or a call's arguments do not match it
//! ├── kcache.StoreError        a store's directory, lock or file could not be used
//! ├── kcache.ScheduleError     the schedule cache refused an operation
//! └── kcache.BackendError      the compiler could not be run or identified
//! ```
//!
//! Wrong Python types (a `str` where a `list` is wanted) raise Python's own `TypeError`, as
//! any Python function does; a value kcache refuses raises `ValueError` when it is not one of
//! the cases above.

use pyo3::exceptions::{PyException, PyValueError};
use pyo3::prelude::*;

pyo3::create_exception!(
    kcache,
    Error,
    PyException,
    "The base class of every exception kcache raises; its message is the Rust error's."
);
pyo3::create_exception!(
    kcache,
    CompileError,
    Error,
    "A kernel, or the program it was compiled in, did not compile: the compiler's message."
);
pyo3::create_exception!(
    kcache,
    SignatureError,
    Error,
    "A kernel signature is invalid, or the arguments of a call do not match it (count, \
     element type, length, writability): nothing was called."
);
pyo3::create_exception!(
    kcache,
    StoreError,
    Error,
    "A store's directory, lock or file could not be used (permissions, a newer format, I/O)."
);
pyo3::create_exception!(
    kcache,
    ScheduleError,
    Error,
    "The schedule cache refused an operation (a schedule that names no loop symbol of the \
     code, a bad entry, an invalid key part)."
);
pyo3::create_exception!(
    kcache,
    BackendError,
    Error,
    "The compiler could not be run or identified (missing, not executable, another host)."
);

/// Every error this crate raises, before it becomes a Python exception: the variant picks
/// the class, the string is the Rust error's message.
#[derive(Debug, thiserror::Error)]
pub(crate) enum PyError {
    /// A kernel or its program did not compile.
    #[error("{0}")]
    Compile(String),
    /// A signature, or a call's arguments against it.
    #[error("{0}")]
    Signature(String),
    /// A store's directory, lock or file.
    #[error("{0}")]
    Store(String),
    /// The schedule cache.
    #[error("{0}")]
    Schedule(String),
    /// The compiler could not be run or identified.
    #[error("{0}")]
    Backend(String),
    /// A value kcache refuses that is none of the above (`ValueError`).
    #[error("{0}")]
    Value(String),
}

impl From<PyError> for PyErr {
    fn from(e: PyError) -> PyErr {
        match e {
            PyError::Compile(m) => CompileError::new_err(m),
            PyError::Signature(m) => SignatureError::new_err(m),
            PyError::Store(m) => StoreError::new_err(m),
            PyError::Schedule(m) => ScheduleError::new_err(m),
            PyError::Backend(m) => BackendError::new_err(m),
            PyError::Value(m) => PyValueError::new_err(m),
        }
    }
}

impl From<cache_dir::Error> for PyError {
    fn from(e: cache_dir::Error) -> PyError {
        PyError::Store(report(&e))
    }
}

impl From<schedule_cache::Error> for PyError {
    fn from(e: schedule_cache::Error) -> PyError {
        PyError::Schedule(report(&e))
    }
}

/// `e`'s message followed by each cause's that it does not already contain, joined by `: `.
pub(crate) fn report(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut next = e.source();
    while let Some(cause) = next {
        let shown = cause.to_string();
        if !out.contains(&shown) {
            out.push_str(": ");
            out.push_str(&shown);
        }
        next = cause.source();
    }
    out
}

/// Adds the exception classes to the module.
pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("Error", py.get_type::<Error>())?;
    m.add("CompileError", py.get_type::<CompileError>())?;
    m.add("SignatureError", py.get_type::<SignatureError>())?;
    m.add("StoreError", py.get_type::<StoreError>())?;
    m.add("ScheduleError", py.get_type::<ScheduleError>())?;
    m.add("BackendError", py.get_type::<BackendError>())?;
    Ok(())
}
