//! TODO(h19): memo bindings.

use pyo3::prelude::*;

/// Adds this file's classes and functions to the module.
pub(crate) fn register(_m: &Bound<'_, PyModule>) -> PyResult<()> {
    Ok(())
}
