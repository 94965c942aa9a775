//! The memo table from Python: `kcache.MemoTable`, memo-cache's single-flight table over
//! Python values, keyed as memo-cache keys (a `KeyBuilder` with the table's tag, then the
//! key given as plain data: `None`, `bool`, `int`, `float`, `str`, lists/tuples, dicts with
//! `str` keys), and `kcache.memo_key`, that key's hex digest.
//!
//! memo-cache makes a table only for a scope (`with_cache`), never one that outlives it.
//! A Python object cannot borrow, so each `MemoTable` runs its scope on a thread of its own:
//! `with_cache` there, and inside it a scoped thread per request, which asks the table as
//! any caller would (so concurrent requests for one key compute once, and a computation
//! may use the table for other keys). The scope ends, and the table with every value in it
//! is dropped, when the `MemoTable` is closed (`close()`, the end of its `with` block) or
//! collected.

use std::sync::mpsc::{Sender, channel};
use std::sync::{Arc, Mutex};

use memo_cache::{Key, KeyBuilder, Stats, Value};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};

use crate::errors::Error;

/// The deepest nesting of lists and dicts a key may have (deeper: `ValueError`), so a
/// self-referencing or absurdly deep key is refused rather than overflowing the stack.
const MAX_DEPTH: usize = 64;

/// `obj` as memo-cache's `Value`.
pub(crate) fn value_of(obj: &Bound<'_, PyAny>, depth: usize) -> PyResult<Value> {
    if depth > MAX_DEPTH {
        return Err(PyValueError::new_err(format!(
            "a memo key nests deeper than {MAX_DEPTH} lists or dicts"
        )));
    }
    if obj.is_none() {
        return Ok(Value::Null);
    }
    if let Ok(b) = obj.cast::<PyBool>() {
        return Ok(Value::Bool(b.is_true()));
    }
    if obj.cast::<PyInt>().is_ok() {
        return obj
            .extract::<i64>()
            .map(Value::Int)
            .map_err(|_| PyValueError::new_err("a memo key's int must fit in 64 bits"));
    }
    if let Ok(f) = obj.cast::<PyFloat>() {
        return Ok(Value::Float(f.value()));
    }
    if let Ok(s) = obj.cast::<PyString>() {
        return Ok(Value::Text(s.to_str()?.to_owned()));
    }
    if let Ok(l) = obj.cast::<PyList>() {
        return l
            .iter()
            .map(|x| value_of(&x, depth + 1))
            .collect::<PyResult<_>>()
            .map(Value::List);
    }
    if let Ok(t) = obj.cast::<PyTuple>() {
        return t
            .iter()
            .map(|x| value_of(&x, depth + 1))
            .collect::<PyResult<_>>()
            .map(Value::List);
    }
    if let Ok(d) = obj.cast::<PyDict>() {
        let mut map = std::collections::BTreeMap::new();
        for (k, v) in d.iter() {
            let k: String = k
                .extract()
                .map_err(|_| PyTypeError::new_err("a memo key's dict must have str keys"))?;
            map.insert(k, value_of(&v, depth + 1)?);
        }
        return Ok(Value::Map(map));
    }
    Err(PyTypeError::new_err(format!(
        "a memo key is plain data (None, bool, int, float, str, list, tuple, dict), not {}",
        obj.get_type().name()?
    )))
}

fn key_of(tag: &str, key: &Bound<'_, PyAny>) -> PyResult<Key> {
    Ok(KeyBuilder::new(tag).value(&value_of(key, 0)?).finish())
}

/// A value the table holds: a Python object, shared.
type Held = Arc<Py<PyAny>>;

/// What a request asks of the table's scope.
enum Request {
    /// `try_fetch_or_put(key, compute)`; the answer is the value and whether it was a hit.
    Fetch {
        key: Key,
        compute: Py<PyAny>,
        reply: Sender<Result<(Held, bool), PyErr>>,
    },
    /// The table's counters.
    Stats(Sender<Stats>),
}

/// Runs a table's scope: `with_cache`, then one scoped thread per request until every
/// sender is gone.
fn serve(requests: std::sync::mpsc::Receiver<Request>) {
    memo_cache::with_cache(true, |table: Option<&memo_cache::Table<Key, Held>>| {
        let Some(table) = table else { return };
        std::thread::scope(|s| {
            for request in requests {
                match request {
                    Request::Fetch {
                        key,
                        compute,
                        reply,
                    } => {
                        s.spawn(move || {
                            let answer = table.try_fetch_or_put(key, || {
                                Python::attach(|py| compute.call0(py).map(Arc::new))
                            });
                            let _ = reply.send(answer.map(|f| {
                                let hit = f.is_hit();
                                (f.into_value(), hit)
                            }));
                        });
                    }
                    Request::Stats(reply) => {
                        let _ = reply.send(table.stats());
                    }
                }
            }
        });
    });
}

/// A memo table for one search: `get(key, compute)` returns the value stored for `key`,
/// or calls `compute()` once, stores its result and returns it. Concurrent callers of one
/// key (threads) compute it once (single flight); a `compute` that raises stores nothing
/// and the exception reaches its caller.
///
/// Keys are plain data (`None`, `bool`, `int`, `float`, `str`, `list`/`tuple` (the same),
/// `dict` with `str` keys), hashed with memo-cache's `KeyBuilder` after the table's `tag`:
/// put everything that changes the result in the key. Values are any Python objects.
///
/// ```python
/// with kcache.MemoTable(tag="my-tuner/v1") as memo:
///     t = memo.get(("matmul", 64, {"tile": 8}), lambda: measure(8))
/// ```
///
/// The table lives until it is closed (the end of the `with` block, `close()`) or
/// collected; a closed table raises `kcache.Error`. A `compute` must not ask for its own
/// key (it would wait for itself).
#[pyclass(module = "kcache", frozen, name = "MemoTable")]
pub(crate) struct PyMemoTable {
    tag: String,
    requests: Mutex<Option<Sender<Request>>>,
}

impl PyMemoTable {
    fn sender(&self) -> PyResult<Sender<Request>> {
        self.requests
            .lock()
            .ok()
            .and_then(|g| g.clone())
            .ok_or_else(|| Error::new_err("the memo table is closed"))
    }

    fn fetch_inner(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        compute: Py<PyAny>,
    ) -> PyResult<(Py<PyAny>, bool)> {
        let key = key_of(&self.tag, key)?;
        let sender = self.sender()?;
        let (reply, answer) = channel();
        sender
            .send(Request::Fetch {
                key,
                compute,
                reply,
            })
            .map_err(|_| Error::new_err("the memo table is closed"))?;
        let answer = py
            .detach(move || answer.recv())
            .map_err(|_| Error::new_err("the memo table's scope ended during the call"))?;
        let (value, hit) = answer?;
        Ok((value.clone_ref(py), hit))
    }
}

#[pymethods]
impl PyMemoTable {
    /// `MemoTable(tag="kcache-py/memo")`: an empty table whose keys start with `tag` (name
    /// your search and its version: tables of other tags never share keys).
    #[new]
    #[pyo3(signature = (tag="kcache-py/memo".to_string()), text_signature = "(tag='kcache-py/memo')")]
    fn new(tag: String) -> PyResult<PyMemoTable> {
        let (sender, requests) = channel();
        std::thread::Builder::new()
            .name("kcache-memo".into())
            .spawn(move || serve(requests))
            .map_err(|e| Error::new_err(format!("could not start the memo table's thread: {e}")))?;
        Ok(PyMemoTable {
            tag,
            requests: Mutex::new(Some(sender)),
        })
    }

    /// `get(key, compute)`: the value stored for `key`, else `compute()`'s (stored).
    fn get(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        compute: Py<PyAny>,
    ) -> PyResult<Py<PyAny>> {
        self.fetch_inner(py, key, compute).map(|(v, _)| v)
    }

    /// `fetch(key, compute) -> (value, hit)`: as `get`, and whether the value was there.
    fn fetch(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        compute: Py<PyAny>,
    ) -> PyResult<(Py<PyAny>, bool)> {
        self.fetch_inner(py, key, compute)
    }

    /// `key(key) -> str`: the hex digest `key` is stored under in this table.
    fn key(&self, key: &Bound<'_, PyAny>) -> PyResult<String> {
        Ok(key_of(&self.tag, key)?.to_hex())
    }

    /// The table's tag.
    #[getter]
    fn tag(&self) -> &str {
        &self.tag
    }

    /// `stats() -> dict`: `entries`, `hits`, `misses`, `waits` (calls that waited for
    /// another's computation), `failures` (computations that raised).
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let sender = self.sender()?;
        let (reply, answer) = channel();
        sender
            .send(Request::Stats(reply))
            .map_err(|_| Error::new_err("the memo table is closed"))?;
        let s = py
            .detach(move || answer.recv())
            .map_err(|_| Error::new_err("the memo table is closed"))?;
        let d = PyDict::new(py);
        d.set_item("entries", s.entries)?;
        d.set_item("hits", s.hits)?;
        d.set_item("misses", s.misses)?;
        d.set_item("waits", s.waits)?;
        d.set_item("failures", s.failures)?;
        Ok(d)
    }

    fn __len__(&self, py: Python<'_>) -> PyResult<usize> {
        let stats = self.stats(py)?;
        match stats.get_item("entries")? {
            Some(n) => n.extract(),
            None => Ok(0),
        }
    }

    /// Ends the table's scope: every value is dropped; later calls raise `kcache.Error`.
    fn close(&self) {
        if let Ok(mut g) = self.requests.lock() {
            *g = None;
        }
    }

    /// Whether the table was closed.
    #[getter]
    fn closed(&self) -> bool {
        self.requests.lock().map(|g| g.is_none()).unwrap_or(true)
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
        format!(
            "<kcache.MemoTable tag={:?}{}>",
            self.tag,
            if self.closed() { " closed" } else { "" }
        )
    }
}

/// `memo_key(key, tag="kcache-py/memo") -> str`: memo-cache's key of plain data `key`
/// under `tag` (`KeyBuilder::new(tag).value(key)`), as hex: what a `MemoTable` of that tag
/// stores `key` under.
#[pyfunction]
#[pyo3(signature = (key, tag="kcache-py/memo"))]
fn memo_key(key: &Bound<'_, PyAny>, tag: &str) -> PyResult<String> {
    Ok(key_of(tag, key)?.to_hex())
}

/// Adds this file's class and function to the module.
pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyMemoTable>()?;
    m.add_function(wrap_pyfunction!(memo_key, m)?)?;
    Ok(())
}
