//! The kernel cache from Python: `kcache.KernelCache` (kernel-cache's in-memory cache, the
//! persistent kernel store of a directory, and cc-backend's C compiler), `kcache.Signature`,
//! `kcache.Source` and `kcache.Kernel`, a compiled kernel called through its checked
//! signature with numpy arrays or any buffer.
//!
//! A call copies each buffer argument into a Rust vector, calls the kernel with the GIL
//! released, and copies the written buffers back: no pointer into Python memory is ever
//! handed to C, so an argument that does not match the signature (its count, an element
//! type, a length, a read-only buffer for a written parameter) raises
//! `kcache.SignatureError` before the kernel runs, and never crashes.

use std::sync::{Arc, Mutex, RwLock};

use cc_backend::{Arg, CcBackend, CcError, CcProgram, Elem, Extent, Param, Signature, Source};
use kernel_cache::{CachedBackend, Census, KernelError, Resolved};
use pyo3::buffer::{Element, PyBuffer};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyTuple};

use crate::canonical::{PyNames, names_or_default};
use crate::errors::{CompileError, PyError, report};

/// The element type of a name: cc-backend's spelling (`f32`), numpy's (`float32`) or C's
/// (`float`).
fn elem_of(name: &str) -> Result<Elem, PyError> {
    Ok(match name {
        "f32" | "float32" | "float" => Elem::F32,
        "f64" | "float64" | "double" => Elem::F64,
        "i32" | "int32" | "int32_t" | "int" => Elem::I32,
        "i64" | "int64" | "int64_t" => Elem::I64,
        "u8" | "uint8" | "uint8_t" => Elem::U8,
        "f16" | "float16" | "half" => Elem::F16Bits,
        other => {
            return Err(PyError::Signature(format!(
                "unknown element type {other:?} (f32, f64, i32, i64, u8, f16)"
            )));
        }
    })
}

/// The short name of an element type (`f32`...), as `elem_of` reads it.
fn elem_name(elem: Elem) -> &'static str {
    match elem {
        Elem::F32 => "f32",
        Elem::F64 => "f64",
        Elem::I32 => "i32",
        Elem::I64 => "i64",
        Elem::U8 => "u8",
        Elem::F16Bits => "f16",
    }
}

/// An extent from Python: an `int` (that many elements), a `str` (the integer scalar
/// parameter of that name) or a sequence of both (their product: `("m", "k")`, `(4, "n")`).
#[derive(FromPyObject)]
enum ExtentArg {
    Fixed(usize),
    Scalar(String),
    Product(Vec<ExtentPart>),
}

#[derive(FromPyObject)]
enum ExtentPart {
    Factor(usize),
    Scalar(String),
}

impl ExtentArg {
    fn extent(self) -> Extent {
        match self {
            ExtentArg::Fixed(n) => Extent::fixed(n),
            ExtentArg::Scalar(s) => Extent::of(&s),
            ExtentArg::Product(parts) => {
                let mut extent = Extent::product(std::iter::empty());
                for p in parts {
                    match p {
                        ExtentPart::Factor(f) => extent = extent.times(f),
                        ExtentPart::Scalar(s) => extent.scalars.push(s),
                    }
                }
                extent
            }
        }
    }
}

/// A kernel's C signature: its parameters in order, each a buffer (read, or written) of an
/// element type and an extent, or a scalar. Immutable: each builder method returns a new
/// signature.
///
/// ```python
/// sig = (kcache.Signature()
///        .buffer_mut("y", "f64", "n")     # double *y, at least n elements
///        .buffer("x", "f64", "n")         # const double *x
///        .scalar("alpha", "f64")
///        .scalar("n", "i64"))             # int64_t n
/// ```
///
/// Element types: `f32`, `f64`, `i32`, `i64`, `u8`, `f16` (half-precision bits, C
/// `uint16_t`: pass numpy `float16` or `uint16` arrays); numpy's names (`float32`) work too.
/// Extents: an `int`, the name of an integer scalar parameter, or a sequence of both
/// multiplied (`("m", "k")`, `(4, "n")`).
#[pyclass(module = "kcache", frozen, skip_from_py_object, name = "Signature")]
#[derive(Clone)]
pub(crate) struct PySignature {
    inner: Signature,
}

#[pymethods]
impl PySignature {
    /// An empty signature (a kernel of no parameters).
    #[new]
    fn new() -> PySignature {
        PySignature {
            inner: Signature::new(),
        }
    }

    /// This signature and a read buffer `const <elem> *name` of at least `extent` elements.
    fn buffer(&self, name: &str, elem: &str, extent: ExtentArg) -> PyResult<PySignature> {
        let elem = elem_of(elem)?;
        Ok(PySignature {
            inner: self.inner.clone().buffer(name, elem, extent.extent()),
        })
    }

    /// This signature and a written buffer `<elem> *name` of at least `extent` elements.
    fn buffer_mut(&self, name: &str, elem: &str, extent: ExtentArg) -> PyResult<PySignature> {
        let elem = elem_of(elem)?;
        Ok(PySignature {
            inner: self.inner.clone().buffer_mut(name, elem, extent.extent()),
        })
    }

    /// This signature and a scalar parameter `<elem> name`, passed by value.
    fn scalar(&self, name: &str, elem: &str) -> PyResult<PySignature> {
        let elem = elem_of(elem)?;
        Ok(PySignature {
            inner: self.inner.clone().scalar(name, elem),
        })
    }

    /// Raises `kcache.SignatureError` if the signature is malformed (an extent naming no
    /// integer scalar, a name given twice, ...); returns `None` otherwise.
    fn check(&self) -> PyResult<()> {
        self.inner
            .check()
            .map_err(|e| PyError::Signature(report(&e)).into())
    }

    /// The parameters as plain data: `(name, "buffer" | "buffer_mut" | "scalar", elem,
    /// extent or None)` each, the extent as cc-backend prints it.
    #[getter]
    fn params(&self) -> Vec<(String, &'static str, &'static str, Option<String>)> {
        self.inner
            .params
            .iter()
            .map(|p| match p {
                Param::Buffer {
                    name,
                    elem,
                    writes,
                    len,
                } => (
                    name.clone(),
                    if *writes { "buffer_mut" } else { "buffer" },
                    elem_name(*elem),
                    Some(len.to_string()),
                ),
                Param::Scalar { name, elem } => (name.clone(), "scalar", elem_name(*elem), None),
            })
            .collect()
    }

    fn __len__(&self) -> usize {
        self.inner.params.len()
    }

    fn __repr__(&self) -> String {
        format!("<kcache.Signature {}>", self.inner)
    }

    fn __eq__(&self, other: &Bound<'_, PyAny>) -> bool {
        other
            .cast::<PySignature>()
            .is_ok_and(|o| o.get().inner == self.inner)
    }
}

/// A kernel to compile: its C text defining `symbol` with a type compatible with
/// `signature`, after `prelude` (default: cc-backend's, `<math.h>`, `<stdint.h>`,
/// `<stddef.h>`). Keep helpers `static`; the text must be safe to run on several threads.
#[pyclass(module = "kcache", frozen, name = "Source")]
pub(crate) struct PySource {
    symbol: String,
    source: Source,
}

#[pymethods]
impl PySource {
    /// `Source(symbol, text, signature, prelude=None)`.
    #[new]
    #[pyo3(signature = (symbol, text, signature, prelude=None))]
    fn new(
        symbol: String,
        text: String,
        signature: PyRef<'_, PySignature>,
        prelude: Option<String>,
    ) -> PySource {
        let mut source = Source::new(text, signature.inner.clone());
        if let Some(p) = prelude {
            source = source.with_prelude(p);
        }
        PySource { symbol, source }
    }
    /// The kernel's symbol (the name its text defines).
    #[getter]
    fn symbol(&self) -> &str {
        &self.symbol
    }
    /// The kernel's text.
    #[getter]
    fn text(&self) -> &str {
        &self.source.text
    }
    /// The prelude ahead of the text.
    #[getter]
    fn prelude(&self) -> &str {
        &self.source.prelude
    }
    /// The signature.
    #[getter]
    fn signature(&self) -> PySignature {
        PySignature {
            inner: self.source.signature.clone(),
        }
    }
    fn __repr__(&self) -> String {
        format!("<kcache.Source {}{}>", self.symbol, self.source.signature)
    }
}

/// A compiled kernel, callable: `kernel(*args)` with one argument per parameter, in order:
/// a buffer (a numpy array, `array.array`, `bytearray`, anything with the buffer protocol)
/// of exactly the parameter's element type and at least its extent's length for a buffer
/// (writable for a written one), a Python number for a scalar. A mismatch raises
/// `kcache.SignatureError` and the kernel does not run. The GIL is released during the call.
#[pyclass(module = "kcache", frozen, name = "Kernel")]
pub(crate) struct PyKernel {
    kernel: cc_backend::Kernel,
}

/// A buffer argument copied out of Python, and where to copy it back.
enum Held {
    F32(Vec<f32>),
    F64(Vec<f64>),
    I32(Vec<i32>),
    I64(Vec<i64>),
    U8(Vec<u8>),
    U16(Vec<u16>),
    Scalar(Arg<'static>),
}

fn sig_err(msg: String) -> PyErr {
    PyError::Signature(msg).into()
}

/// The buffer of argument `i` (parameter `name`) as `T`, checked writable if `writes`.
fn buffer_of<T: Element + Copy>(
    py: Python<'_>,
    obj: &Bound<'_, PyAny>,
    name: &str,
    elem: Elem,
    writes: bool,
) -> PyResult<(PyBuffer<T>, Vec<T>)> {
    let buf = PyBuffer::<T>::get(obj).map_err(|e| {
        sig_err(format!(
            "parameter `{name}`: expected a buffer of {} (numpy {}), got {}: {}",
            elem_name(elem),
            numpy_name(elem),
            type_name(obj),
            e.value(py)
        ))
    })?;
    if writes && buf.readonly() {
        return Err(sig_err(format!(
            "parameter `{name}`: the kernel writes it, but the buffer given is read-only"
        )));
    }
    let data = buf.to_vec(py).map_err(|e| {
        sig_err(format!(
            "parameter `{name}`: could not read the buffer: {}",
            e.value(py)
        ))
    })?;
    Ok((buf, data))
}

fn numpy_name(elem: Elem) -> &'static str {
    match elem {
        Elem::F32 => "float32",
        Elem::F64 => "float64",
        Elem::I32 => "int32",
        Elem::I64 => "int64",
        Elem::U8 => "uint8",
        Elem::F16Bits => "uint16 holding float16 bits",
    }
}

fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "?".into())
}

/// A scalar argument of `elem` from a Python number.
fn scalar_of(obj: &Bound<'_, PyAny>, name: &str, elem: Elem) -> PyResult<Arg<'static>> {
    let wrong = |e: PyErr| {
        sig_err(format!(
            "parameter `{name}`: expected a {} scalar, got {}: {}",
            elem_name(elem),
            type_name(obj),
            e.value(obj.py())
        ))
    };
    if obj.cast::<pyo3::types::PyBool>().is_ok() && elem != Elem::U8 {
        return Err(sig_err(format!(
            "parameter `{name}`: expected a {} scalar, got a bool",
            elem_name(elem)
        )));
    }
    Ok(match elem {
        Elem::F32 => Arg::F32Scalar(obj.extract::<f64>().map_err(wrong)? as f32),
        Elem::F64 => Arg::F64Scalar(obj.extract::<f64>().map_err(wrong)?),
        Elem::I32 => Arg::I32Scalar(obj.extract::<i32>().map_err(wrong)?),
        Elem::I64 => Arg::I64Scalar(obj.extract::<i64>().map_err(wrong)?),
        Elem::U8 => Arg::U8Scalar(obj.extract::<u8>().map_err(wrong)?),
        Elem::F16Bits => Arg::F16BitsScalar(obj.extract::<u16>().map_err(wrong)?),
    })
}

#[pymethods]
impl PyKernel {
    #[pyo3(signature = (*args))]
    fn __call__(&self, py: Python<'_>, args: &Bound<'_, PyTuple>) -> PyResult<()> {
        let params = &self.kernel.signature().params;
        if args.len() != params.len() {
            return Err(sig_err(format!(
                "kernel `{}` takes {} arguments {}, got {}",
                self.kernel.symbol(),
                params.len(),
                self.kernel.signature(),
                args.len()
            )));
        }
        // Copy every argument out first (so nothing runs on a bad one), remembering the
        // written buffers' Python side.
        let mut held: Vec<Held> = Vec::with_capacity(params.len());
        let mut back: Vec<(usize, Bound<'_, PyAny>)> = Vec::new();
        for (i, (param, obj)) in params.iter().zip(args.iter()).enumerate() {
            match param {
                Param::Scalar { name, elem } => {
                    held.push(Held::Scalar(scalar_of(&obj, name, *elem)?))
                }
                Param::Buffer {
                    name, elem, writes, ..
                } => {
                    // numpy's float16 arrays (format `e`) are read as their bits, through
                    // a `uint16` view sharing their memory (so a written one is written).
                    let obj = if *elem == Elem::F16Bits {
                        float16_bits(&obj)
                    } else {
                        obj
                    };
                    let h = match elem {
                        Elem::F32 => Held::F32(buffer_of::<f32>(py, &obj, name, *elem, *writes)?.1),
                        Elem::F64 => Held::F64(buffer_of::<f64>(py, &obj, name, *elem, *writes)?.1),
                        Elem::I32 => Held::I32(buffer_of::<i32>(py, &obj, name, *elem, *writes)?.1),
                        Elem::I64 => Held::I64(buffer_of::<i64>(py, &obj, name, *elem, *writes)?.1),
                        Elem::U8 => Held::U8(buffer_of::<u8>(py, &obj, name, *elem, *writes)?.1),
                        Elem::F16Bits => {
                            Held::U16(buffer_of::<u16>(py, &obj, name, *elem, *writes)?.1)
                        }
                    };
                    held.push(h);
                    if *writes {
                        back.push((i, obj.clone()));
                    }
                }
            }
        }
        let kernel = &self.kernel;
        let result = py.detach(|| {
            let mut call: Vec<Arg<'_>> = params
                .iter()
                .zip(held.iter_mut())
                .map(|(p, h)| {
                    let writes = matches!(p, Param::Buffer { writes: true, .. });
                    match (h, writes) {
                        (Held::F32(v), true) => Arg::F32Mut(v),
                        (Held::F32(v), false) => Arg::F32(v),
                        (Held::F64(v), true) => Arg::F64Mut(v),
                        (Held::F64(v), false) => Arg::F64(v),
                        (Held::I32(v), true) => Arg::I32Mut(v),
                        (Held::I32(v), false) => Arg::I32(v),
                        (Held::I64(v), true) => Arg::I64Mut(v),
                        (Held::I64(v), false) => Arg::I64(v),
                        (Held::U8(v), true) => Arg::U8Mut(v),
                        (Held::U8(v), false) => Arg::U8(v),
                        (Held::U16(v), true) => Arg::F16BitsMut(v),
                        (Held::U16(v), false) => Arg::F16Bits(v),
                        (Held::Scalar(a), _) => scalar_copy(a),
                    }
                })
                .collect();
            kernel.call(&mut call)
        });
        result.map_err(|e| call_error(&e))?;
        for (i, obj) in back {
            let copied = match &held[i] {
                Held::F32(v) => copy_back::<f32>(py, &obj, v),
                Held::F64(v) => copy_back::<f64>(py, &obj, v),
                Held::I32(v) => copy_back::<i32>(py, &obj, v),
                Held::I64(v) => copy_back::<i64>(py, &obj, v),
                Held::U8(v) => copy_back::<u8>(py, &obj, v),
                Held::U16(v) => copy_back::<u16>(py, &obj, v),
                Held::Scalar(_) => Ok(()),
            };
            copied?;
        }
        Ok(())
    }

    /// The symbol the kernel is found under in its program (a renamed twin's answer is the
    /// stored twin's symbol).
    #[getter]
    fn symbol(&self) -> &str {
        self.kernel.symbol()
    }

    /// The signature it was compiled with.
    #[getter]
    fn signature(&self) -> PySignature {
        PySignature {
            inner: self.kernel.signature().clone(),
        }
    }

    /// The path of the shared object holding the kernel (loadable with `ctypes.CDLL`; it
    /// stays on disk while this kernel lives).
    #[getter]
    fn program_path(&self) -> String {
        self.kernel.program().path().display().to_string()
    }

    /// The kernel function's address, for callers with their own FFI (`ctypes`): valid
    /// while this object lives; calling it unchecked is the caller's responsibility.
    #[getter]
    fn address(&self) -> usize {
        self.kernel.raw_function() as usize
    }

    fn __repr__(&self) -> String {
        format!(
            "<kcache.Kernel {}{}>",
            self.kernel.symbol(),
            self.kernel.signature()
        )
    }
}

/// `obj` itself, or for a numpy `float16` array its `uint16` view (same memory).
fn float16_bits<'py>(obj: &Bound<'py, PyAny>) -> Bound<'py, PyAny> {
    let is_f16 = obj
        .getattr("dtype")
        .and_then(|d| d.getattr("name"))
        .and_then(|n| n.extract::<String>())
        .is_ok_and(|n| n == "float16");
    if is_f16 && let Ok(view) = obj.call_method1("view", ("uint16",)) {
        return view;
    }
    obj.clone()
}

/// A copy of a scalar argument (an `Arg` scalar holds no borrow).
fn scalar_copy(a: &Arg<'static>) -> Arg<'static> {
    match a {
        Arg::F32Scalar(v) => Arg::F32Scalar(*v),
        Arg::F64Scalar(v) => Arg::F64Scalar(*v),
        Arg::I32Scalar(v) => Arg::I32Scalar(*v),
        Arg::I64Scalar(v) => Arg::I64Scalar(*v),
        Arg::U8Scalar(v) => Arg::U8Scalar(*v),
        Arg::F16BitsScalar(v) => Arg::F16BitsScalar(*v),
        // Only scalars are held as `Held::Scalar`.
        _ => Arg::U8Scalar(0),
    }
}

fn copy_back<T: Element + Copy>(py: Python<'_>, obj: &Bound<'_, PyAny>, v: &[T]) -> PyResult<()> {
    let buf = PyBuffer::<T>::get(obj)?;
    buf.copy_from_slice(py, v)
}

/// A call's refusal: a signature mismatch (count, kind, length, extent).
fn call_error(e: &CcError) -> PyErr {
    match e {
        CcError::ArgCount { .. }
        | CcError::ArgKind { .. }
        | CcError::BufferTooShort { .. }
        | CcError::BadExtent { .. } => sig_err(report(e)),
        other => PyError::Backend(report(other)).into(),
    }
}

/// The open state of a [`PyKernelCache`]: the cached backend and the census totals.
struct Open {
    cached: CachedBackend<CcBackend>,
    dir: Option<String>,
}

/// The kernel cache: C kernels compiled in batches by the system compiler (cc-backend),
/// kept in memory (byte-weighted) and, given a directory, in the persistent kernel store at
/// `dir/kernels` (the layout `kcache stats DIR` reads), so another process, Python or Rust,
/// loads them instead of compiling.
///
/// ```python
/// with kcache.KernelCache("/tmp/kc") as cache:
///     [k] = cache.compile([kcache.Source("k", text, sig)])
///     k(out, x, 3)
/// ```
///
/// Thread-safe: threads may compile through one cache at once (the GIL is released while
/// compiling). As a context manager it closes on exit: later calls raise `kcache.Error`;
/// kernels already returned stay callable.
#[pyclass(module = "kcache", frozen, name = "KernelCache")]
pub(crate) struct PyKernelCache {
    open: RwLock<Option<Arc<Open>>>,
    census: Mutex<Census>,
}

fn census_dict<'py>(py: Python<'py>, c: &Census) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("resolves", c.resolves)?;
    d.set_item("kernels_reused", c.kernels_reused)?;
    d.set_item("kernels_loaded", c.kernels_loaded)?;
    d.set_item("kernels_compiled", c.kernels_compiled)?;
    d.set_item("kernels_failed", c.kernels_failed)?;
    d.set_item("kernels_remembered_failed", c.kernels_remembered_failed)?;
    d.set_item("programs_compiled", c.programs_compiled)?;
    d.set_item("programs_loaded", c.programs_loaded)?;
    d.set_item("store_lock_skips", c.store_lock_skips)?;
    d.set_item("store_lock_timeouts", c.store_lock_timeouts)?;
    Ok(d)
}

impl PyKernelCache {
    fn opened(&self) -> PyResult<Arc<Open>> {
        let guard = self
            .open
            .read()
            .map_err(|_| PyError::Value("the kernel cache's lock is poisoned".into()))?;
        guard
            .clone()
            .ok_or_else(|| crate::errors::Error::new_err("the kernel cache is closed"))
    }

    /// Resolves `sources` in one batch: per-kernel outcomes (a `Kernel`, or the
    /// `CompileError` of that kernel) and the census of the call.
    fn resolve<'py>(
        &self,
        py: Python<'py>,
        sources: &Bound<'py, PyAny>,
        options: Vec<String>,
        names: Option<PyRef<'_, PyNames>>,
    ) -> PyResult<(Bound<'py, PyList>, Census)> {
        let open = self.opened()?;
        let names = names_or_default(names.as_deref());
        let mut batch = Vec::new();
        for item in sources.try_iter()? {
            let item = item?;
            let source = item.cast::<PySource>().map_err(|_| {
                pyo3::exceptions::PyTypeError::new_err(format!(
                    "compile takes kcache.Source objects, got {}",
                    type_name(&item)
                ))
            })?;
            let s = source.get();
            batch.push((s.symbol.clone(), s.source.clone()));
        }
        let identity = open.cached.backend.identity().to_string();
        let result = py.detach(|| {
            let batch: Vec<_> = batch
                .into_iter()
                .map(|(symbol, source)| {
                    source.batch_kernel(&symbol, &names, options.clone(), &identity)
                })
                .collect();
            open.cached.resolve_each(&batch)
        });
        let (outcomes, census) = result.map_err(|e| match e {
            kernel_cache::Error::BeforeCompile(_) => PyError::Backend(report(&e)),
            other => PyError::Compile(report(&other)),
        })?;
        if let Ok(mut total) = self.census.lock() {
            *total += census;
        }
        let list = PyList::empty(py);
        for outcome in outcomes {
            match outcome {
                Ok(resolved) => list.append(kernel_of(py, &resolved)?)?,
                Err(e) => list.append(compile_error(py, &e)?)?,
            }
        }
        Ok((list, census))
    }
}

fn kernel_of<'py>(py: Python<'py>, resolved: &Resolved<CcProgram>) -> PyResult<Bound<'py, PyAny>> {
    match cc_backend::Kernel::from_resolved(resolved) {
        Ok(kernel) => Ok(Bound::new(py, PyKernel { kernel })?.into_any()),
        Err(e) => Ok(CompileError::new_err(report(&e))
            .into_value(py)
            .into_bound(py)
            .into_any()),
    }
}

/// The `CompileError` instance of one kernel's failure, with `.symbols` (the kernels it
/// names) and `.remembered` (whether the store remembered it rather than compiling).
fn compile_error<'py>(py: Python<'py>, e: &KernelError<CcError>) -> PyResult<Bound<'py, PyAny>> {
    let err = CompileError::new_err(report(e))
        .into_value(py)
        .into_bound(py);
    let symbols: Vec<String> = match e {
        KernelError::Unit(f) | KernelError::Program(f) => f.symbols.clone(),
        KernelError::Unreported { symbol, .. } | KernelError::Remembered { symbol, .. } => {
            vec![symbol.clone()]
        }
        _ => Vec::new(),
    };
    err.setattr("symbols", symbols)?;
    err.setattr("remembered", e.remembered().is_some())?;
    err.setattr("alone", e.is_alone())?;
    Ok(err.into_any())
}

#[pymethods]
impl PyKernelCache {
    /// `KernelCache(dir=None, *, capacity_bytes=64 MiB, compiler=None, work_dir=None)`:
    /// over the kernel store at `dir/kernels` (created now: an unusable directory raises
    /// `kcache.StoreError`), or memory only without `dir`. `compiler` is the C compiler
    /// command (default: `cc`, or `$CC`); a missing one raises `kcache.BackendError`.
    #[new]
    #[pyo3(signature = (dir=None, *, capacity_bytes=64 << 20, compiler=None, work_dir=None),
        text_signature = "(dir=None, *, capacity_bytes=67108864, compiler=None, work_dir=None)")]
    fn new(
        py: Python<'_>,
        dir: Option<std::path::PathBuf>,
        capacity_bytes: u64,
        compiler: Option<String>,
        work_dir: Option<std::path::PathBuf>,
    ) -> PyResult<PyKernelCache> {
        let open = py.detach(|| -> Result<Open, PyError> {
            let backend = match &compiler {
                Some(c) => CcBackend::with_compiler(c),
                None => CcBackend::new(),
            }
            .map_err(|e| PyError::Backend(report(&e)))?;
            let backend = match work_dir {
                Some(w) => backend.with_work_dir(w),
                None => backend,
            };
            let mut cached = CachedBackend::new(backend, capacity_bytes);
            if let Some(d) = &dir {
                cached = cached.with_store_in(&cache_dir::Layout::new(d))?;
            }
            Ok(Open {
                cached,
                dir: dir.map(|d| d.display().to_string()),
            })
        })?;
        Ok(PyKernelCache {
            open: RwLock::new(Some(Arc::new(open))),
            census: Mutex::new(Census::default()),
        })
    }

    /// `compile(sources, *, options=(), names=None) -> list[Kernel | CompileError]`: one
    /// batch, answered per kernel in order: a `Kernel` (found in memory, loaded from the
    /// store, or compiled), or the `kcache.CompileError` *instance* of a kernel that failed
    /// (not raised: the other kernels are still answered). `options` are the compiler
    /// options (in the key); `names` the `kcache.Names` of the key (default: names from the
    /// text). Raises only for the batch as a whole (two kernels with different keys but one
    /// symbol; a closed cache).
    #[pyo3(signature = (sources, *, options=Vec::new(), names=None),
        text_signature = "(self, sources, *, options=(), names=None)")]
    fn compile<'py>(
        &self,
        py: Python<'py>,
        sources: &Bound<'py, PyAny>,
        options: Vec<String>,
        names: Option<PyRef<'_, PyNames>>,
    ) -> PyResult<Bound<'py, PyList>> {
        self.resolve(py, sources, options, names).map(|(l, _)| l)
    }

    /// `compile_census(...)`: as `compile`, with the census of this call (a dict:
    /// `kernels_compiled`, `kernels_loaded`, `kernels_reused`, `kernels_failed`, ...).
    #[pyo3(signature = (sources, *, options=Vec::new(), names=None),
        text_signature = "(self, sources, *, options=(), names=None)")]
    fn compile_census<'py>(
        &self,
        py: Python<'py>,
        sources: &Bound<'py, PyAny>,
        options: Vec<String>,
        names: Option<PyRef<'_, PyNames>>,
    ) -> PyResult<(Bound<'py, PyList>, Bound<'py, PyDict>)> {
        let (list, census) = self.resolve(py, sources, options, names)?;
        Ok((list, census_dict(py, &census)?))
    }

    /// `compile_one(source, *, options=(), names=None) -> Kernel`: one kernel; its failure
    /// is raised as `kcache.CompileError`.
    #[pyo3(signature = (source, *, options=Vec::new(), names=None),
        text_signature = "(self, source, *, options=(), names=None)")]
    fn compile_one<'py>(
        &self,
        py: Python<'py>,
        source: Bound<'py, PySource>,
        options: Vec<String>,
        names: Option<PyRef<'_, PyNames>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let batch = PyList::new(py, [source])?;
        let (list, _) = self.resolve(py, batch.as_any(), options, names)?;
        let answer = list.get_item(0)?;
        if answer.is_instance_of::<pyo3::exceptions::PyBaseException>() {
            return Err(PyErr::from_value(answer));
        }
        Ok(answer)
    }

    /// `key(source, *, options=(), names=None) -> str`: the key `compile` files `source`
    /// under (cc-backend's `Source::key` with this compiler's identity).
    #[pyo3(signature = (source, *, options=Vec::new(), names=None),
        text_signature = "(self, source, *, options=(), names=None)")]
    fn key(
        &self,
        py: Python<'_>,
        source: PyRef<'_, PySource>,
        options: Vec<String>,
        names: Option<PyRef<'_, PyNames>>,
    ) -> PyResult<String> {
        let open = self.opened()?;
        let names = names_or_default(names.as_deref());
        let (symbol, src) = (source.symbol.clone(), source.source.clone());
        Ok(py.detach(|| src.key(&symbol, &names, &options, open.cached.backend.identity())))
    }

    /// The compiler's identity (its path, version and target), part of every key.
    #[getter]
    fn compiler_identity(&self) -> PyResult<String> {
        Ok(self.opened()?.cached.backend.identity().to_string())
    }

    /// The store's directory (`dir/kernels`), or `None` without one.
    #[getter]
    fn store_dir(&self) -> PyResult<Option<String>> {
        let open = self.opened()?;
        Ok(open
            .cached
            .store
            .as_ref()
            .map(|s| s.dir().display().to_string()))
    }

    /// `stats() -> dict`: `census` (this object's calls, summed), `memory` (the in-memory
    /// cache: entries, hits, misses, evictions, retained_bytes...), `compiler` (programs,
    /// kernels and units compiled by this process) and `store` (entries, blobs, bytes, hits,
    /// misses, saves... of the directory; `None` without one).
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let open = self.opened()?;
        let total = self.census.lock().map(|c| *c).unwrap_or_default();
        let d = PyDict::new(py);
        d.set_item("census", census_dict(py, &total)?)?;
        let m = open.cached.cache.stats();
        let mem = PyDict::new(py);
        mem.set_item("entries", m.entries)?;
        mem.set_item("groups", m.groups)?;
        mem.set_item("hits", m.hits)?;
        mem.set_item("misses", m.misses)?;
        mem.set_item("evictions", m.evictions)?;
        mem.set_item("superseded", m.superseded)?;
        mem.set_item("retained_bytes", m.retained_bytes)?;
        d.set_item("memory", mem)?;
        let b = &open.cached.backend;
        let cc = PyDict::new(py);
        cc.set_item("programs_compiled", b.programs_compiled())?;
        cc.set_item("kernels_compiled", b.kernels_compiled())?;
        cc.set_item("units_compiled", b.units_compiled())?;
        cc.set_item("merged_compiles", b.merged_compiles())?;
        d.set_item("compiler", cc)?;
        match &open.cached.store {
            Some(store) => {
                let s = py.detach(|| store.stats()).map_err(PyError::from)?;
                let st = PyDict::new(py);
                st.set_item("entries", s.entries)?;
                st.set_item("blobs", s.blobs)?;
                st.set_item("bytes", s.bytes)?;
                st.set_item("failures", s.failures)?;
                st.set_item("hits", s.counters.hits)?;
                st.set_item("misses", s.counters.misses)?;
                st.set_item("saves", s.counters.saves)?;
                st.set_item("evictions", s.counters.evictions)?;
                st.set_item("removed_bad", s.counters.removed_bad)?;
                d.set_item("store", st)?;
            }
            None => d.set_item("store", py.None())?,
        }
        Ok(d)
    }

    /// Closes the cache: later calls raise `kcache.Error`; returned kernels stay callable.
    fn close(&self) {
        if let Ok(mut g) = self.open.write() {
            *g = None;
        }
    }

    /// Whether `close` was called (or the `with` block ended).
    #[getter]
    fn closed(&self) -> bool {
        self.open.read().map(|g| g.is_none()).unwrap_or(true)
    }

    fn __enter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, _exc: &Bound<'_, PyTuple>) -> bool {
        self.close();
        false
    }

    fn __repr__(&self) -> String {
        match self.open.read().ok().and_then(|g| g.clone()) {
            Some(open) => format!(
                "<kcache.KernelCache dir={:?} compiler={:?}>",
                open.dir,
                open.cached.backend.identity().lines().next().unwrap_or("")
            ),
            None => "<kcache.KernelCache closed>".into(),
        }
    }
}

/// Adds this file's classes to the module.
pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PySignature>()?;
    m.add_class::<PySource>()?;
    m.add_class::<PyKernel>()?;
    m.add_class::<PyKernelCache>()?;
    Ok(())
}
