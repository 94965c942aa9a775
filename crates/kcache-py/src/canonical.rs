//! Canonical keys from Python: `kcache.Names` (canonical-text's `Names`, the same options
//! under the same names), `kcache.canonical_key`, `kcache.canonicalize` (the canonical form
//! with what was renamed, pinned or refused) and `kcache.kernel_key` (kernel-cache's key,
//! the bytes `kcache key` prints).

use std::collections::BTreeSet;

use pyo3::prelude::*;

/// Which names a key may rename: canonical-text's `Names`, option for option.
///
/// The defaults are the Rust defaults: names the text declares itself are renamed
/// (`text_names`), the kernel's own name is keyed by its role where that is sound
/// (`kernel_name_by_role`), `i12`/`v3_acc` shaped names are renamed (`minted_shapes`),
/// `assert` is the one observing macro. The list arguments add to those defaults.
#[pyclass(module = "kcache", frozen, skip_from_py_object, name = "Names")]
#[derive(Clone, Debug)]
pub(crate) struct PyNames {
    pub(crate) inner: canonical_text::Names,
}

#[pymethods]
impl PyNames {
    /// `Names(*, bound=(), free=(), keep=(), observers=(), derivations=(),
    /// minted_kernel_separator=None, minted_shapes=True, text_names=True,
    /// kernel_name_by_role=True, included_macros_known=False)`.
    ///
    /// - `bound`: names the kernel binds (renamed); `free`: names it refers to from
    ///   outside (never renamed); `keep`: names never renamed (builtins, vendor names);
    /// - `observers`: macros that observe a spelling (a text using one is keyed as spelled);
    /// - `derivations`: `(prefix, suffix)` templates: `prefix + base + suffix` is renamed
    ///   with its bound base;
    /// - `minted_kernel_separator`: the renderer mints kernel names `<stem><SEP><counter>`,
    ///   and the counter leaves the key.
    #[new]
    #[pyo3(signature = (*, bound=Vec::new(), free=Vec::new(), keep=Vec::new(),
        observers=Vec::new(), derivations=Vec::new(), minted_kernel_separator=None,
        minted_shapes=true, text_names=true, kernel_name_by_role=true,
        included_macros_known=false),
        text_signature = "(*, bound=(), free=(), keep=(), observers=(), derivations=(), \
            minted_kernel_separator=None, minted_shapes=True, text_names=True, \
            kernel_name_by_role=True, included_macros_known=False)")]
    #[allow(clippy::too_many_arguments)]
    fn new(
        bound: Vec<String>,
        free: Vec<String>,
        keep: Vec<String>,
        observers: Vec<String>,
        derivations: Vec<(String, String)>,
        minted_kernel_separator: Option<String>,
        minted_shapes: bool,
        text_names: bool,
        kernel_name_by_role: bool,
        included_macros_known: bool,
    ) -> PyNames {
        let mut names = canonical_text::Names::new()
            .with_bound(bound)
            .with_free(free)
            .with_keep(keep)
            .with_observers(observers)
            .with_minted_shapes(minted_shapes)
            .with_text_names(text_names)
            .with_kernel_name_by_role(kernel_name_by_role)
            .with_included_macros_known(included_macros_known);
        for (prefix, suffix) in derivations {
            names = names.with_derivation(prefix, suffix);
        }
        if let Some(sep) = minted_kernel_separator {
            names = names.with_minted_kernel_names(sep);
        }
        PyNames { inner: names }
    }

    /// The bound names, sorted.
    #[getter]
    fn bound(&self) -> Vec<String> {
        self.inner.bound.iter().cloned().collect()
    }
    /// The free names, sorted.
    #[getter]
    fn free(&self) -> Vec<String> {
        self.inner.free.iter().cloned().collect()
    }
    /// The kept names, sorted.
    #[getter]
    fn keep(&self) -> Vec<String> {
        self.inner.keep.iter().cloned().collect()
    }
    /// The observing macros, sorted (`assert` by default).
    #[getter]
    fn observers(&self) -> Vec<String> {
        self.inner.observers.iter().cloned().collect()
    }
    /// The derivation templates, `(prefix, suffix)` each.
    #[getter]
    fn derivations(&self) -> Vec<(String, String)> {
        self.inner
            .derivations
            .iter()
            .map(|d| (d.prefix.clone(), d.suffix.clone()))
            .collect()
    }
    /// The minted kernel-name separator, if any.
    #[getter]
    fn minted_kernel_separator(&self) -> Option<String> {
        self.inner.minted_kernel_separator.clone()
    }
    /// Whether `i12`/`v3_acc` shaped names are renamed unlisted.
    #[getter]
    fn minted_shapes(&self) -> bool {
        self.inner.minted_shapes
    }
    /// Whether the names the text declares itself are renamed unlisted.
    #[getter]
    fn text_names(&self) -> bool {
        self.inner.text_names
    }
    /// Whether the kernel's own name is keyed by its role where sound.
    #[getter]
    fn kernel_name_by_role(&self) -> bool {
        self.inner.kernel_name_by_role
    }
    /// Whether the caller learned the included headers' macros itself.
    #[getter]
    fn included_macros_known(&self) -> bool {
        self.inner.included_macros_known
    }

    fn __repr__(&self) -> String {
        let list = |s: &BTreeSet<String>| format!("{:?}", s.iter().collect::<Vec<_>>());
        format!(
            "Names(bound={}, free={}, keep={}, observers={}, derivations={:?}, \
             minted_kernel_separator={:?}, minted_shapes={}, text_names={}, \
             kernel_name_by_role={}, included_macros_known={})",
            list(&self.inner.bound),
            list(&self.inner.free),
            list(&self.inner.keep),
            list(&self.inner.observers),
            self.derivations(),
            self.inner.minted_kernel_separator,
            py_bool(self.inner.minted_shapes),
            py_bool(self.inner.text_names),
            py_bool(self.inner.kernel_name_by_role),
            py_bool(self.inner.included_macros_known),
        )
    }
}

fn py_bool(b: bool) -> &'static str {
    if b { "True" } else { "False" }
}

/// The `Names` a call uses: the given one, or the defaults.
pub(crate) fn names_or_default(names: Option<&PyNames>) -> canonical_text::Names {
    names.map(|n| n.inner.clone()).unwrap_or_default()
}

/// A kernel's canonical form: its key and what the key saw.
#[pyclass(module = "kcache", frozen, name = "Canonical")]
pub(crate) struct PyCanonical {
    inner: canonical_text::Canonical,
}

#[pymethods]
impl PyCanonical {
    /// The key (64 lowercase hex digits) with `extra_parts` (bytes or str, in order).
    #[pyo3(signature = (extra_parts=Vec::new()), text_signature = "(self, extra_parts=())")]
    fn key(&self, py: Python<'_>, extra_parts: Vec<Part>) -> String {
        let parts: Vec<&[u8]> = extra_parts.iter().map(Part::bytes).collect();
        py.detach(|| self.inner.key(&parts))
    }
    /// The canonical text, readable (renamed names spelled `kc<n>`).
    #[getter]
    fn text(&self) -> String {
        self.inner.text().to_string()
    }
    /// The names renamed, in order of first occurrence.
    #[getter]
    fn renamed(&self) -> Vec<String> {
        self.inner.renamed().map(|n| n.into_owned()).collect()
    }
    /// The names pinned (kept as spelled where they could have been renamed).
    #[getter]
    fn pinned(&self) -> Vec<String> {
        self.inner.pinned().to_vec()
    }
    /// Why the text was keyed as spelled, one line per refusal (empty: nothing refused).
    #[getter]
    fn refusals(&self) -> Vec<String> {
        self.inner
            .refusals()
            .iter()
            .map(|r| r.to_string())
            .collect()
    }
    /// One line per reason the key depends on a spelling (what `kcache key` notes).
    #[getter]
    fn kept_names(&self) -> Vec<String> {
        self.inner.kept_names()
    }
    /// Whether the kernel's own name was keyed by its role.
    #[getter]
    fn kernel_name_by_role(&self) -> bool {
        self.inner.kernel_name_by_role()
    }
    /// Why the kernel's own name was keyed as spelled, if it was.
    #[getter]
    fn kernel_name_kept(&self) -> Option<&'static str> {
        self.inner.kernel_name_kept()
    }
    fn __repr__(&self) -> String {
        format!(
            "<kcache.Canonical key={} renamed={}>",
            self.inner.key(&[]),
            self.inner.renamed_count()
        )
    }
}

/// A key part: `bytes` as they are, `str` as its UTF-8.
#[derive(FromPyObject)]
pub(crate) enum Part {
    /// A `bytes` object.
    Bytes(Vec<u8>),
    /// A `str`.
    Text(String),
}

impl Part {
    pub(crate) fn bytes(&self) -> &[u8] {
        match self {
            Part::Bytes(b) => b,
            Part::Text(s) => s.as_bytes(),
        }
    }
}

/// `canonical_key(text, kernel_name=None, names=None, extra_parts=())`: the key of C kernel
/// `text` (64 lowercase hex digits), equal to canonical-text's
/// `canonical_kernel(text, kernel_name, names).key(extra_parts)`: two kernels differing only
/// in the names they own share it. `names` defaults to `kcache.Names()`.
#[pyfunction]
#[pyo3(signature = (text, kernel_name=None, names=None, extra_parts=Vec::new()),
    text_signature = "(text, kernel_name=None, names=None, extra_parts=())")]
fn canonical_key(
    py: Python<'_>,
    text: &str,
    kernel_name: Option<&str>,
    names: Option<PyRef<'_, PyNames>>,
    extra_parts: Vec<Part>,
) -> String {
    let names = names_or_default(names.as_deref());
    let parts: Vec<&[u8]> = extra_parts.iter().map(Part::bytes).collect();
    py.detach(|| canonical_text::canonical_kernel(text, kernel_name, &names).key(&parts))
}

/// `canonicalize(text, kernel_name=None, names=None) -> Canonical`: the canonical form of
/// `text`, to see what its key renamed, pinned or refused.
#[pyfunction]
#[pyo3(signature = (text, kernel_name=None, names=None))]
fn canonicalize(
    py: Python<'_>,
    text: &str,
    kernel_name: Option<&str>,
    names: Option<PyRef<'_, PyNames>>,
) -> PyCanonical {
    let names = names_or_default(names.as_deref());
    let inner = py.detach(|| canonical_text::canonical_kernel(text, kernel_name, &names));
    PyCanonical { inner }
}

/// `kernel_key(text, symbol, names=None, options=(), identity=b"")`: the kernel cache's key
/// of `text` compiled as `symbol` with the compiler options `options` (in order) by the
/// backend `identity` — kernel-cache's `kernel_key`, the same bytes `kcache key` prints.
#[pyfunction]
#[pyo3(signature = (text, symbol, names=None, options=Vec::new(), identity=Part::Bytes(Vec::new())),
    text_signature = "(text, symbol, names=None, options=(), identity=b'')")]
fn kernel_key(
    py: Python<'_>,
    text: &str,
    symbol: &str,
    names: Option<PyRef<'_, PyNames>>,
    options: Vec<String>,
    identity: Part,
) -> String {
    let names = names_or_default(names.as_deref());
    py.detach(|| kernel_cache::kernel_key(text, symbol, &names, &options, identity.bytes()))
}

/// Adds this file's classes and functions to the module.
pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyNames>()?;
    m.add_class::<PyCanonical>()?;
    m.add_function(wrap_pyfunction!(canonical_key, m)?)?;
    m.add_function(wrap_pyfunction!(canonicalize, m)?)?;
    m.add_function(wrap_pyfunction!(kernel_key, m)?)?;
    Ok(())
}
