//! The schedule cache from Python: `kcache.ScheduleCache`, schedule-cache's front door over a
//! directory store, with loop code and schedules as plain Python data.
//!
//! **The code** (what the key sees of a loop nest; schedule-cache's `LoopCode` walk) is a
//! tree of plain data:
//!
//! - a `list` or `tuple` whose first item is a `str`: a construct of that kind and its
//!   children (`["for", {"loop": "i"}, ["extent", 64], ...]`);
//! - an `int` or a `float` (a bound, a constant; floats compared bit for bit); a `bool` is
//!   its `int`; a `str` elsewhere is a word (an operation's name); `None` is a word too;
//! - `{"loop": name}` binds a loop symbol, `{"local": name}` a local (a runtime parameter
//!   is a `"param"` construct then a local: see schedule-cache's `LoopCode`), `{"sym": name}`
//!   uses one; names are renamed canonically, so code differing only in them shares a key;
//! - `{"node": name, "dims": [..], "dtype": "f32"}` is a use of a tensor node;
//! - `{"opaque": what}` is something the key cannot see: such code is never keyed.
//!
//! **The schedule** is a list of ops, each plain data (`None`, `bool`, `int`, `float`, `str`,
//! lists, dicts with `str` keys) saved as it is, except that a dict `{"sym": name}` names a
//! symbol of the code and `{"node": name}` a node of it: those are saved by position and
//! replayed under the names of the code looked up. Nothing else in an op may depend on the
//! code's spelling.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};
use schedule_cache::{
    DiskCache, Error as ScheduleErr, LoopCode, Measurements, Miss, NodeAttrs, NodeId, Replayer,
    Resolver, ScheduleCache, ScheduleLanguage, SymId, SymRef, TimingIdentity, Toolchain, Visitor,
};
use serde::{Deserialize, Serialize};

use crate::errors::{Error, PyError};

/// The deepest nesting of a code tree or an op (deeper: `ValueError`).
const MAX_DEPTH: usize = 256;

/// Process-wide fresh ids: every code converted gets symbols and nodes of its own.
fn fresh() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// One piece of a code tree.
#[derive(Debug)]
enum Piece {
    Construct(String, Vec<Piece>),
    Int(i64),
    Float(f64),
    Word(String),
    LoopBinder(SymId),
    LocalBinder(SymId),
    Symbol(SymId),
    Node(NodeId, Vec<usize>, String),
    Opaque(String),
}

/// A code tree converted from Python, with its names.
#[derive(Debug)]
struct Code {
    pieces: Vec<Piece>,
    syms: HashMap<String, SymId>,
    nodes: HashMap<String, NodeId>,
}

impl Code {
    fn sym(&mut self, name: String) -> SymId {
        *self.syms.entry(name).or_insert_with(|| SymId(fresh()))
    }
    fn node(&mut self, name: String) -> NodeId {
        *self.nodes.entry(name).or_insert_with(|| NodeId(fresh()))
    }
    fn sym_name(&self, id: SymId) -> Option<&str> {
        self.syms
            .iter()
            .find(|(_, v)| **v == id)
            .map(|(k, _)| k.as_str())
    }
    fn node_name(&self, id: NodeId) -> Option<&str> {
        self.nodes
            .iter()
            .find(|(_, v)| **v == id)
            .map(|(k, _)| k.as_str())
    }

    fn from_py(obj: &Bound<'_, PyAny>) -> PyResult<Code> {
        let mut code = Code {
            pieces: Vec::new(),
            syms: HashMap::new(),
            nodes: HashMap::new(),
        };
        let piece = code.piece(obj, 0)?;
        code.pieces.push(piece);
        Ok(code)
    }

    fn piece(&mut self, obj: &Bound<'_, PyAny>, depth: usize) -> PyResult<Piece> {
        if depth > MAX_DEPTH {
            return Err(PyValueError::new_err(format!(
                "the code nests deeper than {MAX_DEPTH}"
            )));
        }
        if obj.is_none() {
            return Ok(Piece::Word("None".into()));
        }
        if let Ok(b) = obj.cast::<PyBool>() {
            return Ok(Piece::Int(i64::from(b.is_true())));
        }
        if obj.cast::<PyInt>().is_ok() {
            return obj
                .extract::<i64>()
                .map(Piece::Int)
                .map_err(|_| PyValueError::new_err("an int of the code must fit in 64 bits"));
        }
        if let Ok(f) = obj.cast::<PyFloat>() {
            return Ok(Piece::Float(f.value()));
        }
        if let Ok(s) = obj.cast::<PyString>() {
            return Ok(Piece::Word(s.to_str()?.to_owned()));
        }
        let items: Option<Vec<Bound<'_, PyAny>>> = if let Ok(l) = obj.cast::<PyList>() {
            Some(l.iter().collect())
        } else if let Ok(t) = obj.cast::<PyTuple>() {
            Some(t.iter().collect())
        } else {
            None
        };
        if let Some(items) = items {
            let Some((head, rest)) = items.split_first() else {
                return Err(PyValueError::new_err(
                    "a construct of the code is a list starting with its kind (a str), not []",
                ));
            };
            let kind: String = head.extract().map_err(|_| {
                PyTypeError::new_err("a construct of the code starts with its kind, a str")
            })?;
            let children = rest
                .iter()
                .map(|c| self.piece(c, depth + 1))
                .collect::<PyResult<_>>()?;
            return Ok(Piece::Construct(kind, children));
        }
        if let Ok(d) = obj.cast::<PyDict>() {
            let get = |k: &str| -> PyResult<Option<String>> {
                d.get_item(k)?.map(|v| v.extract::<String>()).transpose()
            };
            if d.len() == 1 {
                if let Some(n) = get("loop")? {
                    return Ok(Piece::LoopBinder(self.sym(n)));
                }
                if let Some(n) = get("local")? {
                    return Ok(Piece::LocalBinder(self.sym(n)));
                }
                if let Some(n) = get("sym")? {
                    return Ok(Piece::Symbol(self.sym(n)));
                }
                if let Some(w) = get("opaque")? {
                    return Ok(Piece::Opaque(w));
                }
            }
            if let Some(n) = get("node")? {
                let dims: Vec<usize> = match d.get_item("dims")? {
                    Some(v) => v.extract()?,
                    None => Vec::new(),
                };
                let dtype: String = match d.get_item("dtype")? {
                    Some(v) => v.extract()?,
                    None => String::new(),
                };
                if d.len() > 3 || (d.len() > 1 && dims.is_empty() && dtype.is_empty()) {
                    return Err(PyValueError::new_err(
                        "a node of the code is {\"node\": name, \"dims\": [...], \"dtype\": str}",
                    ));
                }
                return Ok(Piece::Node(self.node(n), dims, dtype));
            }
            return Err(PyValueError::new_err(
                "a dict in the code is {\"loop\"|\"local\"|\"sym\"|\"opaque\": str} or a node \
                 {\"node\": name, \"dims\": [...], \"dtype\": str}",
            ));
        }
        Err(PyTypeError::new_err(format!(
            "the code is plain data (lists, ints, floats, strs, dicts), not {}",
            obj.get_type().name()?
        )))
    }
}

fn walk(p: &Piece, v: &mut dyn Visitor) {
    match p {
        Piece::Construct(kind, children) => {
            v.open(kind);
            for c in children {
                walk(c, v);
            }
            v.close();
        }
        Piece::Int(i) => v.int(*i),
        Piece::Float(f) => v.float(*f),
        Piece::Word(w) => {
            v.open(w);
            v.close();
        }
        Piece::LoopBinder(s) => v.loop_binder(*s),
        Piece::LocalBinder(s) => v.local_binder(*s),
        Piece::Symbol(s) => v.symbol(*s),
        Piece::Node(n, dims, dtype) => v.node(*n, &NodeAttrs::new(dims, dtype)),
        Piece::Opaque(w) => v.opaque(w),
    }
}

impl LoopCode for Code {
    fn walk(&self, v: &mut dyn Visitor) {
        for p in &self.pieces {
            walk(p, v);
        }
    }
}

/// A live op: plain data, with the code's symbols and nodes by id.
#[derive(Clone, Debug)]
pub(crate) enum Op {
    Null,
    Bool(bool),
    Int(i64),
    Float(f64),
    Text(String),
    List(Vec<Op>),
    Map(BTreeMap<String, Op>),
    Sym(SymId),
    Node(NodeId),
}

/// A saved op: plain data, with symbols and nodes by position (what the entry holds).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) enum SavedOp {
    Null,
    Bool(bool),
    Int(i64),
    Float(f64),
    Text(String),
    List(Vec<SavedOp>),
    Map(BTreeMap<String, SavedOp>),
    Sym(SymRef),
    Node(usize),
}

/// The schedule language of plain ops.
pub(crate) struct Plain;

impl ScheduleLanguage for Plain {
    type Op = Op;
    type SavedOp = SavedOp;

    fn save_op(&self, op: &Op, refs: &mut Resolver<'_>) -> Result<SavedOp, ScheduleErr> {
        Ok(match op {
            Op::Null => SavedOp::Null,
            Op::Bool(b) => SavedOp::Bool(*b),
            Op::Int(i) => SavedOp::Int(*i),
            Op::Float(f) => SavedOp::Float(*f),
            Op::Text(s) => SavedOp::Text(s.clone()),
            Op::List(l) => SavedOp::List(
                l.iter()
                    .map(|o| self.save_op(o, refs))
                    .collect::<Result<_, _>>()?,
            ),
            Op::Map(m) => SavedOp::Map(
                m.iter()
                    .map(|(k, o)| Ok((k.clone(), self.save_op(o, refs)?)))
                    .collect::<Result<_, ScheduleErr>>()?,
            ),
            Op::Sym(s) => SavedOp::Sym(refs.sym(*s)?),
            Op::Node(n) => SavedOp::Node(refs.node(*n)?),
        })
    }

    fn minted(&self, _op: &Op) -> Vec<(String, SymId)> {
        Vec::new()
    }

    fn build_op(&self, saved: &SavedOp, refs: &mut Replayer<'_>) -> Result<Op, ScheduleErr> {
        Ok(match saved {
            SavedOp::Null => Op::Null,
            SavedOp::Bool(b) => Op::Bool(*b),
            SavedOp::Int(i) => Op::Int(*i),
            SavedOp::Float(f) => Op::Float(*f),
            SavedOp::Text(s) => Op::Text(s.clone()),
            SavedOp::List(l) => Op::List(
                l.iter()
                    .map(|o| self.build_op(o, refs))
                    .collect::<Result<_, _>>()?,
            ),
            SavedOp::Map(m) => Op::Map(
                m.iter()
                    .map(|(k, o)| Ok((k.clone(), self.build_op(o, refs)?)))
                    .collect::<Result<_, ScheduleErr>>()?,
            ),
            SavedOp::Sym(r) => Op::Sym(refs.sym(r)?),
            SavedOp::Node(i) => Op::Node(refs.node(*i)?),
        })
    }
}

/// A Python op as an [`Op`] of `code`.
fn op_of(obj: &Bound<'_, PyAny>, code: &Code, depth: usize) -> PyResult<Op> {
    if depth > MAX_DEPTH {
        return Err(PyValueError::new_err(format!(
            "an op nests deeper than {MAX_DEPTH}"
        )));
    }
    if obj.is_none() {
        return Ok(Op::Null);
    }
    if let Ok(b) = obj.cast::<PyBool>() {
        return Ok(Op::Bool(b.is_true()));
    }
    if obj.cast::<PyInt>().is_ok() {
        return obj
            .extract::<i64>()
            .map(Op::Int)
            .map_err(|_| PyValueError::new_err("an int of an op must fit in 64 bits"));
    }
    if let Ok(f) = obj.cast::<PyFloat>() {
        return Ok(Op::Float(f.value()));
    }
    if let Ok(s) = obj.cast::<PyString>() {
        return Ok(Op::Text(s.to_str()?.to_owned()));
    }
    if let Ok(l) = obj.cast::<PyList>() {
        return l
            .iter()
            .map(|x| op_of(&x, code, depth + 1))
            .collect::<PyResult<_>>()
            .map(Op::List);
    }
    if let Ok(t) = obj.cast::<PyTuple>() {
        return t
            .iter()
            .map(|x| op_of(&x, code, depth + 1))
            .collect::<PyResult<_>>()
            .map(Op::List);
    }
    if let Ok(d) = obj.cast::<PyDict>() {
        if d.len() == 1 {
            if let Some(n) = d.get_item("sym")? {
                let n: String = n.extract()?;
                return code.syms.get(&n).map(|s| Op::Sym(*s)).ok_or_else(|| {
                    PyError::Schedule(format!("an op names symbol {n:?}, which the code does not"))
                        .into()
                });
            }
            if let Some(n) = d.get_item("node")? {
                let n: String = n.extract()?;
                return code.nodes.get(&n).map(|s| Op::Node(*s)).ok_or_else(|| {
                    PyError::Schedule(format!("an op names node {n:?}, which the code does not"))
                        .into()
                });
            }
        }
        let mut map = BTreeMap::new();
        for (k, v) in d.iter() {
            let k: String = k
                .extract()
                .map_err(|_| PyTypeError::new_err("an op's dict must have str keys"))?;
            map.insert(k, op_of(&v, code, depth + 1)?);
        }
        return Ok(Op::Map(map));
    }
    Err(PyTypeError::new_err(format!(
        "an op is plain data (None, bool, int, float, str, list, tuple, dict), not {}",
        obj.get_type().name()?
    )))
}

/// An [`Op`] as Python data, its symbols and nodes named as `code` names them.
fn py_of<'py>(py: Python<'py>, op: &Op, code: &Code) -> PyResult<Bound<'py, PyAny>> {
    Ok(match op {
        Op::Null => py.None().into_bound(py),
        Op::Bool(b) => PyBool::new(py, *b).to_owned().into_any(),
        Op::Int(i) => i.into_pyobject(py)?.into_any(),
        Op::Float(f) => PyFloat::new(py, *f).into_any(),
        Op::Text(s) => PyString::new(py, s).into_any(),
        Op::List(l) => {
            let items = l
                .iter()
                .map(|o| py_of(py, o, code))
                .collect::<PyResult<Vec<_>>>()?;
            PyList::new(py, items)?.into_any()
        }
        Op::Map(m) => {
            let d = PyDict::new(py);
            for (k, o) in m {
                d.set_item(k, py_of(py, o, code)?)?;
            }
            d.into_any()
        }
        Op::Sym(s) => {
            let d = PyDict::new(py);
            d.set_item("sym", code.sym_name(*s).unwrap_or(""))?;
            d.into_any()
        }
        Op::Node(n) => {
            let d = PyDict::new(py);
            d.set_item("node", code.node_name(*n).unwrap_or(""))?;
            d.into_any()
        }
    })
}

/// What a lookup answered: a hit (`ops`, `times`, `key`) or a miss that says why
/// (`miss`, `kind`, `differing`, `changes`). True exactly on a hit.
#[pyclass(module = "kcache", frozen, name = "Lookup")]
pub(crate) struct PyLookup {
    /// Whether the lookup hit.
    #[pyo3(get)]
    hit: bool,
    /// The schedule replayed on the code looked up (its names), on a hit; else `None`.
    #[pyo3(get)]
    ops: Option<Py<PyAny>>,
    /// The stored run times (seconds), on a hit.
    #[pyo3(get)]
    times: Vec<f64>,
    /// The stored baseline time, if any.
    #[pyo3(get)]
    baseline_time: Option<f64>,
    /// The key looked up (hex), when the code was keyed.
    #[pyo3(get)]
    key: Option<String>,
    /// Why it missed, in one line (`None` on a hit).
    #[pyo3(get)]
    miss: Option<String>,
    /// `"hit"`, `"not_found"`, `"refused"`, `"other_components"`, `"unreplayable"` or
    /// `"no_timing"`.
    #[pyo3(get)]
    kind: &'static str,
    /// The key components in which the store's entries of the same code differ.
    #[pyo3(get)]
    differing: Vec<&'static str>,
    /// What changed in each differing component: `(component, "old → new")`.
    #[pyo3(get)]
    changes: Vec<(&'static str, String)>,
}

#[pymethods]
impl PyLookup {
    fn __bool__(&self) -> bool {
        self.hit
    }
    fn __repr__(&self) -> String {
        match &self.miss {
            None => format!(
                "<kcache.Lookup hit key={}>",
                self.key.as_deref().unwrap_or("")
            ),
            Some(m) => format!("<kcache.Lookup miss: {m}>"),
        }
    }
}

struct OpenSchedules {
    cache: ScheduleCache<Plain, DiskCache>,
    dir: String,
}

/// The schedule cache over a directory: `lookup(code)` replays a stored schedule on `code`
/// (or says why it missed), `store(code, ops, times)` keeps a winner (keep-faster by
/// default: a slower winner never replaces a faster one), `seeds(code)` offers schedules of
/// the same code under other key components and of the same code at other sizes, to start a
/// search from.
///
/// Code and schedules are plain data. **The code** (what the key sees of a loop nest) is a
/// tree: a list (or tuple) starting with a `str` is a construct of that kind and its
/// children; an `int` or `float` is a value (floats bit for bit; a `bool` is its `int`); any
/// other `str`, and `None`, is a word; `{"loop": name}` binds a loop symbol, `{"local": name}`
/// a local (a runtime parameter: a `["param", "i64"]` construct, then `{"local": "n"}`),
/// `{"sym": name}` uses one; `{"node": name, "dims": [...], "dtype": "f32"}` uses a tensor
/// node; `{"opaque": what}` is something the key cannot see (such code is never keyed).
/// Symbol names are renamed canonically: code differing only in them shares a key.
///
/// ```python
/// code = ["kernel", ["param", "i64"], {"local": "n"},
///         ["for", {"loop": "i"}, ["extent", 64],
///          ["set", {"node": "out", "dims": [64], "dtype": "f32"}, ["mul", {"sym": "i"}, 2.0]]]]
/// ```
///
/// **A schedule** is a list of ops, each plain data (`None`, `bool`, `int`, `float`, `str`,
/// lists, dicts with `str` keys) saved as it is, except `{"sym": name}` and `{"node": name}`,
/// which name a symbol or node of the code: saved by position, replayed under the names of
/// the code looked up (`[{"unroll": {"sym": "i"}, "by": 4}]` stored for loop `i` comes back
/// as `{"sym": "j"}` for the same code spelled with `j`).
///
/// The key holds the code (up to its names), `backend`, the device timings are measured on
/// (this CPU unless `device` is given), the toolchain (`compiler`, `options`, `prelude`) and
/// `schedule_format`. Thread-safe; the GIL is released around lookups and stores. As a
/// context manager it closes on exit.
#[pyclass(module = "kcache", frozen, name = "ScheduleCache")]
pub(crate) struct PyScheduleCache {
    open: RwLock<Option<Arc<OpenSchedules>>>,
}

impl PyScheduleCache {
    fn opened(&self) -> PyResult<Arc<OpenSchedules>> {
        self.open
            .read()
            .ok()
            .and_then(|g| g.clone())
            .ok_or_else(|| Error::new_err("the schedule cache is closed"))
    }
}

fn schedule_err(e: ScheduleErr) -> PyErr {
    PyError::from(e).into()
}

#[pymethods]
impl PyScheduleCache {
    /// `ScheduleCache(dir, backend, *, device=None, compiler=None, options=(), prelude=None,
    /// schedule_format="", keep_faster=True)`: the store is the directory `dir` itself
    /// (cache-dir's layout: `kcache stats dir` reads it).
    #[new]
    #[pyo3(signature = (dir, backend, *, device=None, compiler=None, options=Vec::new(),
        prelude=None, schedule_format=String::new(), keep_faster=true),
        text_signature = "(dir, backend, *, device=None, compiler=None, options=(), prelude=None, \
            schedule_format='', keep_faster=True)")]
    #[allow(clippy::too_many_arguments)]
    fn new(
        dir: std::path::PathBuf,
        backend: &str,
        device: Option<String>,
        compiler: Option<String>,
        options: Vec<String>,
        prelude: Option<String>,
        schedule_format: String,
        keep_faster: bool,
    ) -> PyResult<PyScheduleCache> {
        let timing = match device {
            Some(device) => TimingIdentity {
                device,
                toolchain: None,
            },
            None => TimingIdentity::this_cpu(None),
        };
        let mut cache = ScheduleCache::new(Plain, backend, timing, DiskCache::new(&dir))
            .with_schedule_format(&schedule_format)
            .with_store_policy(if keep_faster {
                schedule_cache::StorePolicy::KeepFaster
            } else {
                schedule_cache::StorePolicy::LastWriteWins
            });
        if compiler.is_some() || !options.is_empty() || prelude.is_some() {
            let mut toolchain = Toolchain::new(compiler.as_deref().unwrap_or(""), options);
            if let Some(p) = &prelude {
                toolchain = toolchain.with_prelude(p);
            }
            cache = cache.with_toolchain(toolchain);
        }
        Ok(PyScheduleCache {
            open: RwLock::new(Some(Arc::new(OpenSchedules {
                cache,
                dir: dir.display().to_string(),
            }))),
        })
    }

    /// `key(code) -> str`: the key `code` is stored under (hex).
    fn key(&self, py: Python<'_>, code: &Bound<'_, PyAny>) -> PyResult<Option<String>> {
        let open = self.opened()?;
        let code = Code::from_py(code)?;
        let key = py.detach(|| open.cache.key(&code)).map_err(schedule_err)?;
        Ok(key.map(|k| k.as_str().to_owned()))
    }

    /// `lookup(code) -> Lookup`: a hit (the stored schedule replayed on `code`) or a miss
    /// that says why. Raises `kcache.ScheduleError` only for code that cannot be keyed.
    fn lookup(&self, py: Python<'_>, code: &Bound<'_, PyAny>) -> PyResult<PyLookup> {
        let open = self.opened()?;
        let code = Code::from_py(code)?;
        let answer = py
            .detach(|| open.cache.lookup(&code))
            .map_err(schedule_err)?;
        Ok(match answer {
            Ok(hit) => {
                let ops = hit
                    .ops
                    .iter()
                    .map(|o| py_of(py, o, &code))
                    .collect::<PyResult<Vec<_>>>()?;
                PyLookup {
                    hit: true,
                    ops: Some(PyList::new(py, ops)?.into_any().unbind()),
                    times: hit.entry.times.clone(),
                    baseline_time: hit.entry.baseline_time,
                    key: Some(hit.key.as_str().to_owned()),
                    miss: None,
                    kind: "hit",
                    differing: Vec::new(),
                    changes: Vec::new(),
                }
            }
            Err(miss) => {
                let key = py
                    .detach(|| open.cache.key(&code))
                    .ok()
                    .flatten()
                    .map(|k| k.as_str().to_owned());
                let (kind, differing, changes) = match &miss {
                    Miss::NoTiming => ("no_timing", Vec::new(), Vec::new()),
                    Miss::Refused(_) => ("refused", Vec::new(), Vec::new()),
                    Miss::NotFound {
                        differing, changes, ..
                    } => (
                        "not_found",
                        differing.iter().map(|c| c.name()).collect(),
                        changes.iter().map(|(c, s)| (c.name(), s.clone())).collect(),
                    ),
                    Miss::OtherComponents { differing } => (
                        "other_components",
                        differing.iter().map(|c| c.name()).collect(),
                        Vec::new(),
                    ),
                    Miss::Unreplayable { .. } => ("unreplayable", Vec::new(), Vec::new()),
                    _ => ("other", Vec::new(), Vec::new()),
                };
                PyLookup {
                    hit: false,
                    ops: None,
                    times: Vec::new(),
                    baseline_time: None,
                    key,
                    miss: Some(miss.to_string()),
                    kind,
                    differing,
                    changes,
                }
            }
        })
    }

    /// `store(code, ops, times, baseline_time=None) -> dict`: keeps `ops` (a list of plain
    /// ops) as `code`'s schedule, measured `times` (seconds). Under keep-faster an entry
    /// measured faster stays. Returns `{"outcome": "stored" | "kept_existing" | "refused" |
    /// "skipped", "key": str | None, "why": str | None}`.
    #[pyo3(signature = (code, ops, times, baseline_time=None))]
    fn store<'py>(
        &self,
        py: Python<'py>,
        code: &Bound<'py, PyAny>,
        ops: &Bound<'py, PyAny>,
        times: Vec<f64>,
        baseline_time: Option<f64>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let open = self.opened()?;
        let code = Code::from_py(code)?;
        let ops: Vec<Op> = ops
            .try_iter()?
            .map(|o| op_of(&o?, &code, 0))
            .collect::<PyResult<_>>()?;
        let mut m = Measurements::new(times);
        if let Some(b) = baseline_time {
            m = m.with_baseline_time(b);
        }
        let published = py
            .detach(|| open.cache.store(&code, &ops, m))
            .map_err(schedule_err)?;
        let d = PyDict::new(py);
        let (outcome, why) = match &published.outcome {
            schedule_cache::StoreOutcome::Stored => ("stored", None),
            schedule_cache::StoreOutcome::KeptExisting(k) => ("kept_existing", Some(k.to_string())),
            schedule_cache::StoreOutcome::Refused(r) => ("refused", Some(r.to_string())),
            schedule_cache::StoreOutcome::Skipped => ("skipped", None),
            _ => ("other", None),
        };
        d.set_item("outcome", outcome)?;
        d.set_item("key", published.key.as_ref().map(|k| k.as_str().to_owned()))?;
        d.set_item("why", why)?;
        Ok(d)
    }

    /// `seeds(code) -> list[dict]`: schedules to start a search of `code` from, best first,
    /// each rebuilt on `code`: `{"ops": [...], "origin": str, "key": str, "best_time":
    /// float | None, "near": bool}` (`near`: stored for this code at other sizes, else for
    /// this code under other key components). Seeds that do not apply are left out.
    fn seeds<'py>(
        &self,
        py: Python<'py>,
        code: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyList>> {
        let open = self.opened()?;
        let code = Code::from_py(code)?;
        let candidates = py
            .detach(|| -> Result<Vec<_>, ScheduleErr> {
                let seeds = open.cache.seeds(&code)?;
                Ok(seeds
                    .seeds
                    .iter()
                    .filter_map(|s| {
                        let c = open.cache.candidate(s, &code).ok()?;
                        Some((
                            c,
                            s.key().as_str().to_owned(),
                            s.origin_best_time(),
                            s.origin().to_string(),
                            matches!(s.origin(), schedule_cache::SeedOrigin::NearCode { .. }),
                        ))
                    })
                    .collect())
            })
            .map_err(schedule_err)?;
        let out = PyList::empty(py);
        for (c, key, best, origin, near) in candidates {
            let d = PyDict::new(py);
            let ops = c
                .ops
                .iter()
                .map(|o| py_of(py, o, &code))
                .collect::<PyResult<Vec<_>>>()?;
            d.set_item("ops", PyList::new(py, ops)?)?;
            d.set_item("origin", origin)?;
            d.set_item("key", key)?;
            d.set_item("best_time", best)?;
            d.set_item("near", near)?;
            out.append(d)?;
        }
        Ok(out)
    }

    /// The store's directory.
    #[getter]
    fn dir(&self) -> PyResult<String> {
        Ok(self.opened()?.dir.clone())
    }

    /// Closes the cache: later calls raise `kcache.Error`.
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
            Some(o) => format!("<kcache.ScheduleCache dir={:?}>", o.dir),
            None => "<kcache.ScheduleCache closed>".into(),
        }
    }
}

/// Adds this file's classes to the module.
pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyScheduleCache>()?;
    m.add_class::<PyLookup>()?;
    Ok(())
}
