//! The memo table from Python: `kcache.MemoTable`, memo-cache's single-flight table over
//! Python values, keyed as memo-cache keys (a `KeyBuilder` with the table's tag, then the
//! key given as plain data: `None`, `bool`, `int`, `float`, `str`, lists/tuples, dicts with
//! `str` keys), and `kcache.memo_key`, that key's hex digest.
//!
//! memo-cache makes a table only for a scope (`with_cache`), never one that outlives it.
//! A Python object cannot borrow, so each `MemoTable` runs its scope on a thread of its own:
//! `with_cache` there, where each request is looked up (`Table::get`, which never waits
//! or computes) and a hit answered at once; a miss gets a scoped thread of its own, which
//! asks the table as any caller would (so concurrent requests for one key compute once,
//! and a computation may use the table for other keys). The scope ends, and the table with every value in it
//! is dropped, when the `MemoTable` is closed (`close()`, the end of its `with` block) or
//! collected.
//!
//! Re-entrancy: memo-cache sees a computation asking for its own key only on the thread
//! that claimed it, and here every request that misses, nested ones too, runs on a thread
//! of its own. So each request carries its call chain (the (table, key) computations it
//! runs inside, [`Link`]); the thread serving it keeps that chain, plus its own key, in
//! [`CHAIN`] while `compute` runs (Python's `compute` runs on that thread), and a request
//! whose (table, key) is already on the chain is computed right there, on the asking
//! thread, without storing, as memo-cache does for a same-thread re-entrant call. This covers a key asking for
//! itself and any cycle through other keys or tables on one chain (A -> B -> A).

use std::cell::{Cell, RefCell};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Sender, channel};
use std::sync::{Arc, Mutex};

use memo_cache::{Key, KeyBuilder, Stats, Value};
use pyo3::exceptions::{PyRecursionError, PyTypeError, PyValueError};
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

/// The computations a request runs inside, innermost first: one (table, key) whose
/// computation is in flight, and the chain that asked for it.
struct Link {
    /// The [`PyMemoTable::id`] of the table computing `key`.
    table: u64,
    key: Key,
    /// The number of links on the chain, this one included.
    depth: usize,
    outer: Chain,
}

/// The longest chain of requests each asked from inside the previous one's computation
/// (Python's default recursion limit): each link is a thread, so an unbounded chain of new
/// keys would otherwise start threads until none can be started. Deeper: `RecursionError`
/// for a key not stored (a stored one is answered, as it starts no thread).
const MAX_CHAIN_DEPTH: usize = 1000;

/// The most re-entrant computations nested on one thread: they run on that thread's stack
/// (a request thread's is Rust's default, 2 MiB), so a `compute` that always asks for its
/// own key raises `RecursionError` here instead of overflowing it.
const MAX_REENTRANT_NESTING: usize = 64;

/// A call chain: `None` for a request made outside any computation (a Python thread).
type Chain = Option<Arc<Link>>;

thread_local! {
    /// The chain whose innermost computation runs on this thread: set on a table's request
    /// thread while its `compute` runs, `None` on every other thread.
    static CHAIN: RefCell<Chain> = const { RefCell::new(None) };
    /// How many re-entrant computations are running nested on this thread.
    static NESTING: Cell<usize> = const { Cell::new(0) };
}

/// Counts one re-entrant computation nested on this thread while it lives.
struct Nested;

impl Nested {
    /// `None` when [`MAX_REENTRANT_NESTING`] are running already.
    fn enter() -> Option<Nested> {
        NESTING.with(|n| {
            (n.get() < MAX_REENTRANT_NESTING).then(|| {
                n.set(n.get() + 1);
                Nested
            })
        })
    }
}

impl Drop for Nested {
    fn drop(&mut self) {
        NESTING.with(|n| n.set(n.get().saturating_sub(1)));
    }
}

/// Whether `table`'s `key` is being computed on `chain` (so asking for it would wait for
/// the asker itself).
fn on_chain(chain: &Chain, table: u64, key: &Key) -> bool {
    let mut link = chain.as_deref();
    while let Some(l) = link {
        if l.table == table && l.key == *key {
            return true;
        }
        link = l.outer.as_deref();
    }
    false
}

/// A table's identity on a chain: never reused in a process, unlike an address.
static NEXT_TABLE_ID: AtomicU64 = AtomicU64::new(0);

/// What a request asks of the table's scope.
enum Request {
    /// `try_fetch_or_put(key, compute)` on behalf of `chain`; the answer is the value and
    /// whether it was a hit.
    Fetch {
        key: Key,
        compute: Py<PyAny>,
        chain: Chain,
        reply: Sender<Result<(Held, bool), PyErr>>,
    },
    /// The table's counters.
    Stats(Sender<Stats>),
}

/// Runs the scope of the table numbered `id`: `with_cache`, then, until every sender is
/// gone, answers each request's hit itself and starts a scoped thread for each miss.
fn serve(id: u64, requests: std::sync::mpsc::Receiver<Request>) {
    memo_cache::with_cache(true, |table: Option<&memo_cache::Table<Key, Held>>| {
        let Some(table) = table else { return };
        std::thread::scope(|s| {
            for request in requests {
                match request {
                    Request::Fetch {
                        key,
                        compute,
                        chain,
                        reply,
                    } => {
                        // A hit is answered here: a lookup, no thread (`get` never waits
                        // or computes, so this thread never blocks on a computation).
                        if let Some(value) = table.get(&key) {
                            // `compute` goes before the reply, so the caller, re-attaching
                            // to Python, releases it (a `Py` dropped while not attached
                            // waits for the next attach), and with it what it captured.
                            drop(compute);
                            let _ = reply.send(Ok((value, true)));
                            continue;
                        }
                        // Checked after the lookup: a stored key is answered at any depth.
                        if chain.as_ref().is_some_and(|l| l.depth >= MAX_CHAIN_DEPTH) {
                            drop(compute);
                            let _ = reply.send(Err(PyRecursionError::new_err(format!(
                                "a memo table's call chain is deeper than {MAX_CHAIN_DEPTH} \
                                 requests, each asked from inside the previous one's compute"
                            ))));
                            continue;
                        }
                        // A miss (or a key in flight) gets a thread of its own, which
                        // computes or waits. A thread that cannot be started answers
                        // with an error, not a panic of this scope (which would close
                        // the table).
                        let failed = reply.clone();
                        let started = std::thread::Builder::new().spawn_scoped(s, move || {
                            // This thread serves this one request: `compute`, and any
                            // request it makes, runs inside `key` on `chain`.
                            let depth = chain.as_ref().map_or(0, |l| l.depth) + 1;
                            let link = Arc::new(Link {
                                table: id,
                                key,
                                depth,
                                outer: chain,
                            });
                            CHAIN.with(|c| *c.borrow_mut() = Some(link));
                            let answer = table.try_fetch_or_put(key, || {
                                Python::attach(|py| compute.call0(py).map(Arc::new))
                            });
                            // Before the reply, as for a hit.
                            drop(compute);
                            let _ = reply.send(answer.map(|f| {
                                let hit = f.is_hit();
                                (f.into_value(), hit)
                            }));
                        });
                        if let Err(e) = started {
                            let _ = failed.send(Err(Error::new_err(format!(
                                "could not start a thread for the memo table's request: {e}"
                            ))));
                        }
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
/// collected; a closed table raises `kcache.Error`.
///
/// Re-entrancy: a `get` or `fetch` made by a `compute` for a key of a table whose
/// computation is in flight on the same call chain (its own key, or A -> B -> A through
/// other keys or other tables, each asked from inside the previous one's `compute`) calls
/// its `compute` right away and stores nothing, rather than waiting for itself; it counts
/// as a miss (or a failure), and the outer call's value is the one stored. More than 64
/// such computations nested, or a chain of more than 1000 requests each asked from inside
/// the previous one's `compute` (for a key not stored: a stored one is answered), raise
/// `RecursionError` (so a `compute` that always asks for its own key, or for a new key,
/// ends as unbounded recursion does). Waits that involve
/// other threads are not detected: a `compute` must not start a thread that asks for a
/// key of its own chain and wait for it, and two threads must not each compute a key
/// whose `compute` asks for the other's (each would wait for the other forever, as with
/// any single-flight cache).
#[pyclass(module = "kcache", frozen, name = "MemoTable")]
pub(crate) struct PyMemoTable {
    /// This table on a call chain.
    id: u64,
    tag: String,
    requests: Mutex<Option<Sender<Request>>>,
    /// Re-entrant calls computed without the table (`stats()` adds them to its counts).
    reentrant_misses: AtomicU64,
    reentrant_failures: AtomicU64,
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
        let chain = CHAIN.with(|c| c.borrow().clone());
        if on_chain(&chain, self.id, &key) {
            // Asked from inside `key`'s own computation (this thread is serving it, or a
            // request it is waiting for): compute here and store nothing.
            let Some(_nested) = Nested::enter() else {
                return Err(PyRecursionError::new_err(format!(
                    "a memo table's compute asked for a key in flight on its own call chain \
                     {MAX_REENTRANT_NESTING} times nested (each computed without storing)"
                )));
            };
            return match compute.call0(py) {
                Ok(v) => {
                    self.reentrant_misses.fetch_add(1, Ordering::Relaxed);
                    Ok((v, false))
                }
                Err(e) => {
                    self.reentrant_failures.fetch_add(1, Ordering::Relaxed);
                    Err(e)
                }
            };
        }
        let (reply, answer) = channel();
        sender
            .send(Request::Fetch {
                key,
                compute,
                chain,
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
        let id = NEXT_TABLE_ID.fetch_add(1, Ordering::Relaxed);
        let (sender, requests) = channel();
        std::thread::Builder::new()
            .name("kcache-memo".into())
            .spawn(move || serve(id, requests))
            .map_err(|e| Error::new_err(format!("could not start the memo table's thread: {e}")))?;
        Ok(PyMemoTable {
            id,
            tag,
            requests: Mutex::new(Some(sender)),
            reentrant_misses: AtomicU64::new(0),
            reentrant_failures: AtomicU64::new(0),
        })
    }

    /// `get(key, compute)`: the value stored for `key`, else `compute()`'s (stored; computed
    /// without storing when `key` is in flight on the calling compute's own chain).
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
    /// another's computation), `failures` (computations that raised). A re-entrant call
    /// (computed without storing) counts as a miss or a failure, as in memo-cache.
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
        let inner_misses = self.reentrant_misses.load(Ordering::Relaxed);
        let inner_failures = self.reentrant_failures.load(Ordering::Relaxed);
        d.set_item("misses", s.misses + inner_misses)?;
        d.set_item("waits", s.waits)?;
        d.set_item("failures", s.failures + inner_failures)?;
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
