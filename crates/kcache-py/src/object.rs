//! The object compiler from Python: `kcache.ObjectCompiler` (cc-backend's `ObjectBackend`,
//! kernel-cache's in-memory cache and the persistent kernel store of a directory): C text in,
//! an ELF relocatable object's bytes out, as a runtime with its own object loader (tinygrad's
//! CPU device, `kcache.tinygrad`) wants them.

use std::sync::atomic::{AtomicU64, Ordering};

use cc_backend::{CcError, ObjectBackend, defined_function};
use kernel_cache::CachedBackend;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};

use crate::errors::{PyError, report};

/// The error of a refused command or a compiler that cannot be run.
fn backend_error(e: &CcError) -> PyError {
    match e {
        CcError::ObjectCommand { .. }
        | CcError::DependencyOption { .. }
        | CcError::UnlistedInput { .. } => PyError::Value(report(e)),
        other => PyError::Backend(report(other)),
    }
}

/// Compiles C kernels to ELF relocatable objects with a compiler command of the caller's,
/// one object per kernel, through kcache: kernels keyed canonically (a renamed twin, such as
/// tinygrad's `E_4` and `E_4n1`, is compiled once and answered with the object compiled under
/// the first name), kept in memory and, given a directory, in the persistent kernel store at
/// `store_dir/kernels` (shared safely by concurrent processes: a second process loads instead
/// of compiling).
///
/// ```python
/// oc = kcache.ObjectCompiler("/tmp/kc", ["clang", "-O2", "-fPIC", "-ffreestanding"])
/// obj = oc.compile("void E_4(float* restrict d) { for (int i = 0; i < 4; i++) d[i] = 1; }")
/// assert obj[:4] == b"\x7fELF"
/// ```
///
/// `argv` is the compiler and its flags without input or output (kcache adds `-c -MD -MF
/// kernel.d -o kernel.o kernel.c`); a command naming its own input or output, `-E`, `-S`, a
/// dependency option or an option naming a file (`@file`, `-fprofile-use`...) raises
/// `ValueError`; a compiler that cannot be run raises `kcache.BackendError`; an unusable
/// store directory `kcache.StoreError`. Thread-safe (the GIL is released while compiling).
#[pyclass(module = "kcache", frozen, name = "ObjectCompiler")]
pub(crate) struct PyObjectCompiler {
    cached: CachedBackend<ObjectBackend>,
    store_dir: Option<String>,
    argv: Vec<String>,
    compiled: AtomicU64,
    from_store: AtomicU64,
    from_memory: AtomicU64,
}

#[pymethods]
impl PyObjectCompiler {
    /// `ObjectCompiler(store_dir, argv, *, capacity_bytes=256 MiB, work_dir=None)`:
    /// `store_dir` may be `None` (memory only); `work_dir` is where compiles happen (default
    /// the system's temporary directory, checked as cc-backend checks it).
    #[new]
    #[pyo3(
        signature = (store_dir, argv, *, capacity_bytes = 256 << 20, work_dir = None),
        text_signature = "(store_dir, argv, *, capacity_bytes=268435456, work_dir=None)"
    )]
    fn new(
        py: Python<'_>,
        store_dir: Option<std::path::PathBuf>,
        argv: Vec<String>,
        capacity_bytes: u64,
        work_dir: Option<std::path::PathBuf>,
    ) -> PyResult<PyObjectCompiler> {
        let command = argv.clone();
        let cached = py.detach(|| -> Result<_, PyError> {
            let backend = ObjectBackend::new(&command).map_err(|e| backend_error(&e))?;
            let backend = match work_dir {
                Some(w) => backend.with_work_dir(w),
                None => backend,
            };
            let mut cached = CachedBackend::new(backend, capacity_bytes);
            if let Some(d) = &store_dir {
                cached = cached.with_store_in(&cache_dir::Layout::new(d))?;
            }
            Ok((cached, store_dir.map(|d| d.display().to_string())))
        })?;
        Ok(PyObjectCompiler {
            cached: cached.0,
            store_dir: cached.1,
            argv,
            compiled: AtomicU64::new(0),
            from_store: AtomicU64::new(0),
            from_memory: AtomicU64::new(0),
        })
    }

    /// `compile(src, name=None) -> bytes`: the object of the kernel `name` (default: the
    /// text's last function definition) defined by `src`: from memory, from the store, or
    /// compiled now. A text that does not compile raises `kcache.CompileError` with the
    /// compiler's message; a text defining no function (and no `name`) raises `ValueError`.
    /// The object's symbol is the name the kernel was first compiled under (a renamed
    /// twin's object is its first twin's).
    #[pyo3(signature = (src, name = None))]
    fn compile<'py>(
        &self,
        py: Python<'py>,
        src: &str,
        name: Option<String>,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let symbol = match name {
            Some(n) => n,
            None => defined_function(src).ok_or_else(|| {
                PyError::Value("the text defines no function: pass name=".to_string())
            })?,
        };
        let result = py.detach(|| {
            let batch = [self.cached.backend.batch_kernel(&symbol, src)];
            self.cached
                .resolve_each(&batch)
                .map(|(mut outcomes, census)| {
                    let outcome = outcomes.pop();
                    (outcome, census)
                })
        });
        let (outcome, census) = result.map_err(|e| match e {
            kernel_cache::Error::BeforeCompile(_) => PyError::Backend(report(&e)),
            other => PyError::Compile(report(&other)),
        })?;
        self.compiled
            .fetch_add(census.kernels_compiled, Ordering::Relaxed);
        self.from_store
            .fetch_add(census.kernels_loaded, Ordering::Relaxed);
        self.from_memory
            .fetch_add(census.kernels_reused, Ordering::Relaxed);
        let resolved = match outcome {
            Some(Ok(resolved)) => resolved,
            Some(Err(e)) => return Err(PyError::Compile(report(&e)).into()),
            None => return Err(PyError::Compile("no answer for the kernel".into()).into()),
        };
        let object = resolved
            .program
            .object(&resolved.symbol)
            .ok_or_else(|| PyError::Compile(format!("no object for `{}`", resolved.symbol)))?;
        Ok(PyBytes::new(py, object.bytes()))
    }

    /// `key(src, name=None) -> str`: the kernel's key (canonical text, flags, identity).
    #[pyo3(signature = (src, name = None))]
    fn key(&self, src: &str, name: Option<String>) -> PyResult<String> {
        let symbol = match name {
            Some(n) => n,
            None => defined_function(src).ok_or_else(|| {
                PyError::Value("the text defines no function: pass name=".to_string())
            })?,
        };
        Ok(self.cached.backend.batch_kernel(&symbol, src).key)
    }

    /// `{"compiled": n, "from_store": n, "from_memory": n}`: kernels this object compiled,
    /// loaded from the store, and answered from memory (a repeat or a renamed twin).
    #[getter]
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        d.set_item("compiled", self.compiled.load(Ordering::Relaxed))?;
        d.set_item("from_store", self.from_store.load(Ordering::Relaxed))?;
        d.set_item("from_memory", self.from_memory.load(Ordering::Relaxed))?;
        Ok(d)
    }

    /// The backend's identity (compiler, version, rule, target, format), one item a line.
    #[getter]
    fn identity(&self) -> String {
        self.cached.backend.identity().to_string()
    }

    /// The command, as given.
    #[getter]
    fn argv(&self) -> Vec<String> {
        self.argv.clone()
    }

    /// The store's directory (`store_dir/kernels`), or `None` without one.
    #[getter]
    fn store_dir(&self) -> Option<String> {
        self.cached
            .store
            .as_ref()
            .map(|s| s.dir().display().to_string())
    }

    fn __repr__(&self) -> String {
        format!(
            "<kcache.ObjectCompiler store_dir={:?} argv={:?}>",
            self.store_dir, self.argv
        )
    }
}

/// Adds this file's class to the module.
pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyObjectCompiler>()?;
    Ok(())
}
