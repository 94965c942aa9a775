//! The compile driver: [`resolve`] for any [`Backend`], [`resolve_split`] for a
//! [`SplitBackend`], and the process-wide [`CompileRecord`].

use std::any::Any;
use std::collections::HashMap;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use crate::backend::{
    Backend, BatchKernel, Compiled, Group, PersistentBackend, SplitBackend, Units,
};
use crate::cache::{KernelCache, Resolved, lock};
use crate::census::{self, Census};
use crate::error::{CompileFailure, Error, KernelError, Stage};
use crate::partition::{balanced, current_split_override, programs_for};
use crate::store::{FailureMemory, HostPart, KernelStore, MissReason};

/// What split-capable backends have compiled in this process, as counters.
///
/// Counts only grow; tests compare a value read before with one read after (other
/// threads of the process may add to them meanwhile).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CompileRecord {
    /// Resolves of a [`SplitBackend`] that compiled anything, split or not (also with
    /// the cache disabled).
    pub split_capable_compiles: u64,
    /// Of those, the ones whose compiles went through the concurrent path.
    pub concurrent_resolves: u64,
    /// Programs compiled through the concurrent path.
    pub concurrent_programs: u64,
}

static SPLIT_CAPABLE: AtomicU64 = AtomicU64::new(0);
static CONCURRENT_RESOLVES: AtomicU64 = AtomicU64::new(0);
static CONCURRENT_PROGRAMS: AtomicU64 = AtomicU64::new(0);

/// The process-wide [`CompileRecord`] now. A test gates its split claims on
/// `split_capable_compiles` growing rather than on a backend's name.
pub fn compile_record() -> CompileRecord {
    CompileRecord {
        split_capable_compiles: SPLIT_CAPABLE.load(Ordering::Relaxed),
        concurrent_resolves: CONCURRENT_RESOLVES.load(Ordering::Relaxed),
        concurrent_programs: CONCURRENT_PROGRAMS.load(Ordering::Relaxed),
    }
}

/// Answers, per kernel of `batch`, the program holding its code and the symbol to find
/// it by, compiling what the cache does not hold.
///
/// Every kernel is first looked up without the compile lock. If any missed, the
/// cache's compile lock is taken, the misses are looked up again (another thread may
/// just have published them) and the rest are compiled there: one representative per
/// distinct key (the first in batch order; the others share its program and symbol),
/// grouped by option list in order of first appearance, one
/// [`compile_group`](Backend::compile_group) per group. A group is published only after
/// its compile returned: a failing group publishes nothing, groups before it stay
/// published, and the error is returned; the next resolve compiles those kernels
/// afresh. [`before_compile`](Backend::before_compile) runs under the lock ahead of the
/// compiles, also when nothing is left to compile (an all-hit batch takes the lock only
/// with [`always_lock`](Backend::always_lock)). The kernels the lookups answered are
/// added to every enclosing [`with_census`](crate::with_census) scope, once per call.
/// A panic in backend code propagates (the cache stays consistent); the resolve is
/// still counted first (the cache's statistics count its kernels, the census its
/// reused kernels and the programs published before the panic).
///
/// Symbols: kernels with different keys must have different symbols; otherwise the
/// call fails with [`Error::DuplicateSymbol`] before any lookup or compile. Kernels
/// with equal keys may share a symbol (twins; only the first one's source is ever
/// compiled, whatever the others' sources say, since equal keys are the caller's
/// claim that they mean the same). A renderer that names every kernel alike (TVM's
/// `default_function_kernel`) makes the symbols of a batch distinct by rendering kernel
/// `i` under [`segment_kernel_name`](canonical_text::segment_kernel_name)`(name, i)`
/// (its text defines it under that symbol too), whose index
/// [`kernel_key`](crate::kernel_key) leaves out of the key (any other suffix enters it,
/// and the same kernel numbered otherwise in the next batch would miss).
///
/// The returned vector has one entry per kernel, in batch order.
pub fn resolve<B: Backend>(
    cache: &KernelCache<B::Program>,
    batch: &[BatchKernel<B::Source>],
    backend: &B,
) -> Result<Vec<Resolved<B::Program>>, Error<B::Error>> {
    drive(cache, batch, backend, None, |groups, answers, census| {
        compile_whole(
            cache,
            batch,
            backend,
            None,
            Mode::Strict,
            groups,
            answers,
            census,
        )
    })
    .map(strict)
}

/// One kernel's answer from a per-kernel resolve: its program and symbol, or why it has
/// none (shared, as an `Arc`, by the kernels it is the answer of).
pub type Outcome<P, E> = Result<Resolved<P>, Arc<KernelError<E>>>;

/// A per-kernel resolve's answers, one per kernel of the batch, in batch order.
pub type Outcomes<P, E> = Vec<Outcome<P, E>>;

/// What a per-kernel resolve with backend `B` returns: one outcome per kernel, or the
/// error that refused the whole batch.
pub type EachResult<B> =
    Result<Outcomes<<B as Backend>::Program, <B as Backend>::Error>, Error<<B as Backend>::Error>>;

/// A program's compile on the concurrent path: `None` when there was nothing to compile,
/// else the kernels that failed alone or the program's error.
type Ran<E> = Option<Result<Vec<(usize, E)>, E>>;

/// [`resolve`] with one outcome per kernel: a kernel whose own unit fails to compile gets
/// its own error, and every other kernel is compiled, published and answered.
///
/// The lookups, representatives, groups, locks and statistics are [`resolve`]'s; the
/// compiles go through [`compile_group_each`](Backend::compile_group_each), which
/// compiles each kernel at most once and reports the kernels whose own unit failed: each
/// is answered with [`KernelError::Unit`] holding that unit's error, and the program of
/// the others is published and answers them (it never holds a failed kernel). A failure
/// of a whole program (an `Err` of `compile_group_each`, or of a backend that cannot
/// tell its kernels apart) answers every kernel of it with one [`KernelError::Program`];
/// later programs are still compiled. Kernels sharing a key share the outcome (one
/// `Arc`). The call itself fails only when the batch is refused
/// ([`Error::DuplicateSymbol`]) or [`before_compile`](Backend::before_compile) fails.
///
/// **Failures are not cached** in memory: nothing of a failed kernel is published or
/// saved, so the next resolve of it compiles it again (and fails again, if nothing
/// changed), unless a kernel store remembers it ([`resolve_each_with_store`]). Each
/// failed representative counts in [`Census::kernels_failed`] and, in the cache's
/// statistics, as a miss. A panic in backend code propagates as in [`resolve`], after
/// the programs that compiled were published and the resolve was counted.
///
/// ```
/// use std::convert::Infallible;
/// use kernel_cache::{resolve_each, Backend, BatchKernel, Compiled, Group, KernelCache, Units};
///
/// #[derive(Debug, thiserror::Error)]
/// #[error("`{0}` does not compile")]
/// struct Refused(String);
///
/// /// A toy backend: a kernel whose text holds `typo` does not compile; the others do.
/// struct Toy;
/// impl Backend for Toy {
///     type Source = String;
///     type Program = Vec<String>;
///     type Error = Refused;
///     fn compile_group(&self, g: &Group<'_, String>) -> Result<Compiled<Vec<String>>, Refused> {
///         self.compile_group_each(g).and_then(|u| match u.failed.into_iter().next() {
///             Some((_, e)) => Err(e),
///             None => Ok(u.program.expect("no failure")),
///         })
///     }
///     fn compile_group_each(&self, g: &Group<'_, String>) -> Result<Units<Vec<String>, Refused>, Refused> {
///         let (mut failed, mut held) = (Vec::new(), Vec::new());
///         for (i, k) in g.kernels.iter().enumerate() {
///             if k.source.contains("typo") {
///                 failed.push((i, Refused(k.symbol.clone())));
///             } else {
///                 held.push(k.symbol.clone());
///             }
///         }
///         let program = (!held.is_empty()).then(|| Compiled { weight: 1, program: held });
///         Ok(Units { program, failed })
///     }
/// }
///
/// // A tuning round: three candidates, the second mistyped.
/// let candidate = |i: usize, text: &str| BatchKernel {
///     key: format!("k{i}"), options: vec![], symbol: format!("cand{i}"), source: text.to_string(),
/// };
/// let batch = [candidate(0, "x+1"), candidate(1, "x+typo"), candidate(2, "x*2")];
/// let cache = KernelCache::new(1 << 20);
/// let outcomes = resolve_each(&cache, &batch, &Toy)?;
/// let failed = outcomes[1].as_ref().unwrap_err();
/// assert!(failed.is_alone());
/// assert_eq!(failed.compile_failure().unwrap().symbols, ["cand1"]);
/// // The others compiled once, in one program without the failed one, and are cached.
/// assert!(outcomes[0].as_ref().unwrap().same_program(outcomes[2].as_ref().unwrap()));
/// assert_eq!(outcomes[0].as_ref().unwrap().program.len(), 2);
/// assert!(cache.find("k0").is_some() && cache.find("k1").is_none());
/// # Ok::<(), kernel_cache::Error<Refused>>(())
/// ```
pub fn resolve_each<B: Backend>(
    cache: &KernelCache<B::Program>,
    batch: &[BatchKernel<B::Source>],
    backend: &B,
) -> EachResult<B> {
    drive(cache, batch, backend, None, |groups, answers, census| {
        compile_whole(
            cache,
            batch,
            backend,
            None,
            Mode::Each,
            groups,
            answers,
            census,
        )
    })
}

/// [`resolve_each`] with a persistent [`KernelStore`] under the cache, as
/// [`resolve_with_store`] describes (`None`: exactly [`resolve_each`]). Only programs
/// that compiled are saved, holding only the kernels that compiled.
///
/// **Remembered failures** (the store's [`FailureMemory`], by default
/// [`Remember`](FailureMemory::Remember)): a kernel that fails alone
/// ([`KernelError::Unit`]) with a failure the backend calls the kernel's own
/// ([`PersistentBackend::remembered`]) is remembered in the store by its key, the backend
/// identity and its host part, while its compile lock is held; a later resolve of it, in
/// any process, that finds no program for it answers it with
/// [`KernelError::Remembered`] (the remembered message), compiles nothing for it and
/// counts it in [`Census::kernels_remembered_failed`]. A failure of a whole program is
/// never remembered. [`FailureMemory::Retry`] compiles such kernels again (a program
/// saved for one forgets its failure); `kcache gc --failures` and
/// [`KernelStore::forget_failures`] forget them.
pub fn resolve_each_with_store<B: PersistentBackend>(
    cache: &KernelCache<B::Program>,
    store: Option<&KernelStore>,
    batch: &[BatchKernel<B::Source>],
    backend: &B,
) -> EachResult<B> {
    let level = store.map(|store| StoreLevel::new(store, backend, Mode::Each));
    let level = level
        .as_ref()
        .map(|l| l as &dyn Persist<B::Program, B::Error, B::Source>);
    drive(cache, batch, backend, level, |groups, answers, census| {
        compile_whole(
            cache,
            batch,
            backend,
            level,
            Mode::Each,
            groups,
            answers,
            census,
        )
    })
}

/// [`resolve_split`] with one outcome per kernel, as [`resolve_each`] describes: on the
/// concurrent path each program is compiled with
/// [`compile_each`](SplitBackend::compile_each), its failed kernels answered alone and
/// its other kernels [finished](SplitBackend::finish) and published; a program that
/// fails as a whole answers its kernels with one [`KernelError::Program`]; the first
/// panic in batch order is resumed after every program that compiled was published.
pub fn resolve_split_each<B: SplitBackend>(
    cache: &KernelCache<B::Program>,
    batch: &[BatchKernel<B::Source>],
    backend: &B,
) -> EachResult<B> {
    split_drive(cache, batch, backend, None, Mode::Each)
}

/// [`resolve_split_each`] with a persistent [`KernelStore`] under the cache, as
/// [`resolve_each_with_store`] describes (`None`: exactly [`resolve_split_each`]).
pub fn resolve_split_each_with_store<B: SplitBackend + PersistentBackend>(
    cache: &KernelCache<B::Program>,
    store: Option<&KernelStore>,
    batch: &[BatchKernel<B::Source>],
    backend: &B,
) -> EachResult<B> {
    let level = store.map(|store| StoreLevel::new(store, backend, Mode::Each));
    let level = level
        .as_ref()
        .map(|l| l as &SharedPersist<'_, B::Program, B::Error, B::Source>);
    split_drive(cache, batch, backend, level, Mode::Each)
}

/// Whether a failing kernel fails the whole resolve (the seed's semantics) or alone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Strict,
    Each,
}

/// A strict resolve's answers: every one is a program (a strict compile records no
/// kernel failure; its first failure is the call's error).
fn strict<P, E: std::error::Error + 'static>(outcomes: Outcomes<P, E>) -> Vec<Resolved<P>> {
    outcomes
        .into_iter()
        .map(|o| o.expect("a strict resolve answers every kernel with a program or fails"))
        .collect()
}

/// [`resolve`] with a persistent [`KernelStore`] under the cache (`None`: exactly
/// [`resolve`]).
///
/// After the locked re-lookup, the distinct keys the cache still misses are looked up
/// in the store (under the backend's [`identity`](PersistentBackend::identity) and, for
/// an option list whose code depends on the machine, its
/// [`host_part`](PersistentBackend::host_part), asked once per option list); each
/// program found is verified, [loaded](PersistentBackend::load) and published as one
/// group. For the keys still missing the resolve takes the store's per-key compile
/// locks (waiting for another process compiling one of them, then looking the store
/// up again), compiles as [`resolve`] does and, after each program's compile returned
/// and it was published, [saves](PersistentBackend::save) it to the store. Nothing the
/// store does fails the resolve: a store miss, a refused directory, a program that does
/// not load or save are misses and warnings (see
/// [`store::record`](crate::store::record)). Loaded kernels count in
/// [`Census::kernels_loaded`], not as compiled.

pub fn resolve_with_store<B: PersistentBackend>(
    cache: &KernelCache<B::Program>,
    store: Option<&KernelStore>,
    batch: &[BatchKernel<B::Source>],
    backend: &B,
) -> Result<Vec<Resolved<B::Program>>, Error<B::Error>> {
    let level = store.map(|store| StoreLevel::new(store, backend, Mode::Strict));
    let level = level
        .as_ref()
        .map(|l| l as &dyn Persist<B::Program, B::Error, B::Source>);
    drive(cache, batch, backend, level, |groups, answers, census| {
        compile_whole(
            cache,
            batch,
            backend,
            level,
            Mode::Strict,
            groups,
            answers,
            census,
        )
    })
    .map(strict)
}

/// [`resolve_split`] with a persistent [`KernelStore`] under the cache, as
/// [`resolve_with_store`] describes (`None`: exactly [`resolve_split`]).
pub fn resolve_split_with_store<B: SplitBackend + PersistentBackend>(
    cache: &KernelCache<B::Program>,
    store: Option<&KernelStore>,
    batch: &[BatchKernel<B::Source>],
    backend: &B,
) -> Result<Vec<Resolved<B::Program>>, Error<B::Error>> {
    let level = store.map(|store| StoreLevel::new(store, backend, Mode::Strict));
    let level = level
        .as_ref()
        .map(|l| l as &SharedPersist<'_, B::Program, B::Error, B::Source>);
    split_drive(cache, batch, backend, level, Mode::Strict).map(strict)
}

/// A loaded program and its weight.
type Weighed<P> = (Arc<P>, u64);

/// A loaded program, its weight and the entries it answers.
type LoadedGroup<P> = (Arc<P>, u64, Vec<(String, Resolved<P>)>);

/// A kernel key and the option list its kernel compiles under.
type Keyed<'a> = (&'a str, &'a [String]);

/// The persistent level as the driver sees it (object-safe, over the program type).
trait Persist<P, E, S> {
    /// Per key: the loaded program (shared by the keys of one blob), its weight and the
    /// symbol; or the kernel's remembered failure; or nothing.
    fn find(&self, keys: &[Keyed<'_>]) -> Vec<Looked<P>>;
    /// Remembers the failures of kernels that failed alone which the backend calls their
    /// own (per-kernel resolves only; the default remembers nothing).
    fn remember(&self, failed: &[(&BatchKernel<S>, &E)]) {
        let _ = failed;
    }
    /// Takes the compile locks of `keys`; whether any was held by another process.
    fn lock(&self, keys: &[Keyed<'_>]) -> (Box<dyn Any>, bool);
    /// Saves a program compiled under `options` in `took` for its `(key, symbol)`s.
    fn save(&self, program: &P, options: &[String], kernels: &[(&str, &str)], took: Duration);
    /// What this resolve's waits for the level's locks came to: `(timed out, given up at
    /// once while backing off)`.
    fn lock_counts(&self) -> (u64, u64);
}

/// A persistent level the programs of a split resolve save to from threads of their own.
type SharedPersist<'a, P, E, S> = dyn Persist<P, E, S> + Sync + 'a;

/// What the persistent level holds for one key.
enum Looked<P> {
    /// A loaded program (shared by the keys of one blob), its weight and the symbol.
    Found(Arc<P>, u64, String),
    /// The kernel's remembered failure: its message.
    Failed(String),
    /// Nothing usable.
    Missing,
}

struct StoreLevel<'a, B> {
    /// The store, for this resolve: its lock waits draw on one budget.
    store: KernelStore,
    backend: &'a B,
    identity: String,
    /// The backend's host part per option list, asked once in this resolve (an error as
    /// its message), so the lookup, the lock and the save of a key name one entry.
    hosts: Mutex<HashMap<Vec<String>, Result<HostPart, String>>>,
    /// What this resolve does with remembered failures (a strict resolve: `Off`).
    failures: FailureMemory,
}

impl<'a, B: PersistentBackend> StoreLevel<'a, B> {
    /// The level of a strict resolve (`mode` `Strict`: no remembered failure is read or
    /// written) or a per-kernel one (as the store's [`FailureMemory`] says).
    fn new(store: &'a KernelStore, backend: &'a B, mode: Mode) -> Self {
        StoreLevel {
            store: store.for_resolve(),
            backend,
            identity: backend.identity(),
            hosts: Mutex::default(),
            failures: match mode {
                Mode::Strict => FailureMemory::Off,
                Mode::Each => store.failure_memory(),
            },
        }
    }

    /// The backend's host part for `options` (asked once per option list).
    fn host(&self, options: &[String]) -> Result<HostPart, String> {
        if let Some(known) = lock(&self.hosts).get(options) {
            return known.clone();
        }
        // Backend code runs without the memo's lock held.
        let host = self.backend.host_part(options).map_err(|e| e.to_string());
        lock(&self.hosts)
            .entry(options.to_vec())
            .or_insert(host)
            .clone()
    }
}

impl<B: PersistentBackend> Persist<B::Program, B::Error, B::Source> for StoreLevel<'_, B> {
    fn find(&self, keys: &[Keyed<'_>]) -> Vec<Looked<B::Program>> {
        // A key whose host part the backend cannot tell is not looked up (its miss says
        // why). Each distinct blob is loaded once; a blob the backend cannot load is a
        // miss (`LoadFailed`) for every key naming it, and removed unless the backend says
        // the failure was this moment's or this machine's (`keeps_saved`).
        let keys: Vec<(&str, Result<HostPart, MissReason>)> = keys
            .iter()
            .map(|&(key, options)| (key, self.host(options).map_err(MissReason::HostUnknown)))
            .collect();
        let mut loaded: HashMap<String, Result<Weighed<B::Program>, String>> = HashMap::new();
        let failures = self.failures == FailureMemory::Remember;
        let found = self
            .store
            .lookup_batch(&self.identity, &keys, failures, |blob| {
                let program = loaded.entry(blob.blob.clone()).or_insert_with(|| {
                    match self.backend.load(&blob.saved) {
                        Ok(c) => Ok((Arc::new(c.program), c.weight)),
                        Err(e) => {
                            if !self.backend.keeps_saved(&e) {
                                self.store.remove_blob(&blob.blob);
                            }
                            Err(e.to_string())
                        }
                    }
                });
                match program {
                    Ok(_) => Ok(()),
                    Err(why) => Err(MissReason::LoadFailed(why.clone())),
                }
            });
        found
            .into_iter()
            .map(|r| match r {
                Ok((blob, symbol)) => match loaded.get(&blob.blob) {
                    Some(Ok((program, weight))) => {
                        Looked::Found(Arc::clone(program), *weight, symbol)
                    }
                    _ => Looked::Missing,
                },
                Err(MissReason::Remembered(message)) => Looked::Failed(message),
                Err(_) => Looked::Missing,
            })
            .collect()
    }

    fn remember(&self, failed: &[(&BatchKernel<B::Source>, &B::Error)]) {
        if self.failures == FailureMemory::Off {
            return;
        }
        // Only what the backend calls the kernel's own, under a host part it can tell
        // (the failure is named by it).
        let remembered: Vec<(&str, HostPart, String)> = failed
            .iter()
            .filter_map(|&(kernel, error)| {
                let message = self.backend.remembered(kernel, error)?;
                let host = self.host(&kernel.options).ok()?;
                Some((kernel.key.as_str(), host, message))
            })
            .collect();
        self.store.remember_failures(&self.identity, &remembered);
    }

    fn lock(&self, keys: &[Keyed<'_>]) -> (Box<dyn Any>, bool) {
        // A key whose host part the backend cannot tell has no entry name, so no lock:
        // it is compiled without one (as when its lock file cannot be opened).
        let keys: Vec<(&str, HostPart)> = keys
            .iter()
            .filter_map(|&(key, options)| Some((key, self.host(options).ok()?)))
            .collect();
        let (locks, waited) = self.store.compile_locks(&self.identity, &keys);
        (Box::new(locks), waited)
    }

    fn save(
        &self,
        program: &B::Program,
        options: &[String],
        kernels: &[(&str, &str)],
        took: Duration,
    ) {
        let host = match self.host(options) {
            Ok(host) => host,
            Err(why) => {
                let why = format!("what the options mean on this machine is unknown: {why}");
                return crate::store::note_save_failure(kernels, &why);
            }
        };
        match self.backend.save(program) {
            Ok(saved) => self.store.save(&self.identity, host, &saved, kernels, took),
            Err(e) => crate::store::note_save_failure(kernels, &e.to_string()),
        }
    }

    fn lock_counts(&self) -> (u64, u64) {
        self.store.lock_counts()
    }
}

/// [`resolve`] for a backend that can split its compiles.
///
/// Each option list's representatives are cut into [`programs_for`]`(split, n)`
/// programs of [`chunks`](crate::chunks)' sizes, [`balanced`] by the backend's
/// [`compile_cost`](SplitBackend::compile_cost) (contiguous runs when every kernel costs
/// the same), where `split` is [`current_split_override`] or else the backend's
/// [`split`](SplitBackend::split).
/// When no option list is cut, the compile is [`resolve`]'s, through
/// [`compile_group`](Backend::compile_group). When any is, every program of the batch
/// (numbered in batch order, `n_groups` counting them all) is
/// [prepared](SplitBackend::prepare), then [compiled](SplitBackend::compile) at once -
/// the first on the calling thread, the others on threads of their own, every one
/// joined before this returns - still under the lock; each that succeeded is
/// [finished](SplitBackend::finish) and published in batch order, as soon as its own
/// compile and every earlier program's have returned (later ones may still be
/// compiling), and the first
/// failure in batch order - an error or a panic, of `prepare`, `compile` or `finish` -
/// is what the call reports: a panic is resumed on the calling thread after the
/// successful programs were published; an error is returned, with
/// [`later_panics`](CompileFailure::later_panics) counting the programs after it whose
/// compile panicked (the panic hook reported each as it happened). A thread that cannot
/// be spawned compiles on the calling thread instead. Splitting changes neither a key nor
/// what a published value means: a kernel's program holds its own code under its own
/// option list, beside fewer companions.
///
/// Every call that compiles anything is counted in [`compile_record`].
pub fn resolve_split<B: SplitBackend>(
    cache: &KernelCache<B::Program>,
    batch: &[BatchKernel<B::Source>],
    backend: &B,
) -> Result<Vec<Resolved<B::Program>>, Error<B::Error>> {
    split_drive(cache, batch, backend, None, Mode::Strict).map(strict)
}

fn split_drive<B: SplitBackend>(
    cache: &KernelCache<B::Program>,
    batch: &[BatchKernel<B::Source>],
    backend: &B,
    level: Option<&SharedPersist<'_, B::Program, B::Error, B::Source>>,
    mode: Mode,
) -> EachResult<B> {
    let unshared = level.map(|l| l as &dyn Persist<B::Program, B::Error, B::Source>);
    drive(
        cache,
        batch,
        backend,
        unshared,
        |groups, answers, census| {
            SPLIT_CAPABLE.fetch_add(1, Ordering::Relaxed);
            let split = current_split_override().unwrap_or_else(|| backend.split());
            let programs: Vec<OptionGroup<'_>> = groups
                .iter()
                .flat_map(|(options, reps)| {
                    let cost = |&i: &usize| backend.compile_cost(&batch[i].source);
                    balanced(programs_for(split, reps.len()), reps, cost)
                        .into_iter()
                        .map(move |program| (*options, program))
                })
                .collect();
            if programs.len() == groups.len() {
                compile_whole(
                    cache, batch, backend, unshared, mode, groups, answers, census,
                )
            } else {
                CONCURRENT_RESOLVES.fetch_add(1, Ordering::Relaxed);
                CONCURRENT_PROGRAMS.fetch_add(programs.len() as u64, Ordering::Relaxed);
                compile_concurrent(
                    cache, batch, backend, level, mode, programs, answers, census,
                )
            }
        },
    )
}

/// An option list and the batch indices of the representatives compiled under it.
type OptionGroup<'a> = (&'a [String], Vec<usize>);

/// Per kernel: the outcome, once known.
type Answers<P, E> = Vec<Option<Outcome<P, E>>>;

/// Lookups, lock, re-lookup, representatives and grouping, accounting; `compile`
/// compiles the groups and fills the answers of the representatives it published.
fn drive<'a, B, F>(
    cache: &KernelCache<B::Program>,
    batch: &'a [BatchKernel<B::Source>],
    backend: &B,
    level: Option<&dyn Persist<B::Program, B::Error, B::Source>>,
    compile: F,
) -> EachResult<B>
where
    B: Backend,
    F: FnOnce(
        Vec<OptionGroup<'a>>,
        &mut Answers<B::Program, B::Error>,
        &mut Census,
    ) -> Result<(), Error<B::Error>>,
{
    if let Some((symbol, first, second)) = duplicate_symbol(batch) {
        return Err(Error::DuplicateSymbol {
            symbol: symbol.to_string(),
            first,
            second,
        });
    }
    let n = batch.len() as u64;
    let capacity = cache.capacity();
    let mut answers: Answers<B::Program, B::Error> = cache
        .lookup_many(batch.iter().map(|k| k.key.as_str()), capacity)
        .into_iter()
        .map(|a| a.map(Ok))
        .collect();
    let mut reused = answers.iter().filter(|a| a.is_some()).count() as u64;
    if reused == n && !backend.always_lock() {
        cache.count(reused, 0);
        census::note(Census {
            kernels_reused: reused,
            resolves: 1,
            ..Census::default()
        });
        return Ok(answers.into_iter().flatten().collect());
    }

    let _compile_lock = lock(&cache.compile_lock);
    let capacity = cache.capacity();
    for (answer, kernel) in answers.iter_mut().zip(batch) {
        if answer.is_none() {
            *answer = cache.lookup(&kernel.key, capacity).map(Ok);
            reused += u64::from(answer.is_some());
        }
    }
    let mut census = Census {
        kernels_reused: reused,
        resolves: 1,
        ..Census::default()
    };
    // A panic in backend code is caught only to count this resolve (statistics and
    // census, with the programs published before it) and is then resumed unchanged.
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        backend.before_compile().map_err(Error::BeforeCompile)?;
        let mut rep_of: HashMap<&str, usize> = HashMap::new();
        let mut reps: Vec<usize> = Vec::new();
        let mut twins: Vec<(usize, usize)> = Vec::new();
        for (i, kernel) in batch.iter().enumerate() {
            if answers[i].is_some() {
                continue;
            }
            if let Some(&rep) = rep_of.get(kernel.key.as_str()) {
                twins.push((i, rep));
                continue;
            }
            rep_of.insert(&kernel.key, i);
            reps.push(i);
        }
        // The persistent level: load what it holds; lock the rest across processes
        // (held until the saves are done) and look again if another process held one.
        let mut _compile_locks = None;
        if let Some(level) = level
            && !reps.is_empty()
        {
            reps = load_from(cache, batch, level, reps, &mut answers, &mut census);
            if !reps.is_empty() {
                let keys: Vec<Keyed<'_>> = reps
                    .iter()
                    .map(|&i| (batch[i].key.as_str(), batch[i].options.as_slice()))
                    .collect();
                let (locks, waited) = level.lock(&keys);
                _compile_locks = Some(locks);
                if waited {
                    reps = load_from(cache, batch, level, reps, &mut answers, &mut census);
                }
            }
        }
        let mut group_of: HashMap<&[String], usize> = HashMap::new();
        let mut groups: Vec<OptionGroup<'a>> = Vec::new();
        for i in reps {
            let kernel = &batch[i];
            let g = *group_of.entry(&kernel.options).or_insert_with(|| {
                groups.push((&kernel.options, Vec::new()));
                groups.len() - 1
            });
            groups[g].1.push(i);
        }
        let compiled: Vec<usize> = groups.iter().flat_map(|g| g.1.iter().copied()).collect();
        if !groups.is_empty() {
            compile(groups, &mut answers, &mut census)?;
        }
        // The failures of kernels that failed alone, remembered while their compile locks
        // are held (a process waiting for one then finds the failure).
        if let Some(level) = level {
            let failed: Vec<(&BatchKernel<B::Source>, &B::Error)> = compiled
                .iter()
                .filter_map(|&i| match answers[i].as_ref()? {
                    Err(e) => match e.as_ref() {
                        KernelError::Unit(f) => Some((&batch[i], &f.source)),
                        _ => None,
                    },
                    Ok(_) => None,
                })
                .collect();
            if !failed.is_empty() {
                level.remember(&failed);
            }
        }
        for (i, rep) in twins {
            answers[i] = answers[rep].clone();
        }
        Ok(())
    }));
    if let Some(level) = level {
        // Every save is done (a split resolve joins its save threads before it returns).
        let (timeouts, skips) = level.lock_counts();
        census.store_lock_timeouts += timeouts;
        census.store_lock_skips += skips;
    }
    cache.count(reused, n - reused);
    census::note(census);
    match outcome {
        Ok(result) => result?,
        Err(panic) => resume_unwind(panic),
    }
    Ok(answers
        .into_iter()
        .map(|a| a.expect("every kernel is a hit, a compiled representative or its twin"))
        .collect())
}

/// The first pair of kernels (in batch order of the later one) with different keys and
/// one symbol: `(symbol, first index, second index)`.
fn duplicate_symbol<S>(batch: &[BatchKernel<S>]) -> Option<(&str, usize, usize)> {
    let mut seen: HashMap<&str, usize> = HashMap::with_capacity(batch.len());
    for (i, kernel) in batch.iter().enumerate() {
        // One hash of the symbol per kernel (this runs on every resolve, hits included).
        let first = *seen.entry(kernel.symbol.as_str()).or_insert(i);
        if first != i && batch[first].key != kernel.key {
            return Some((&kernel.symbol, first, i));
        }
    }
    None
}

/// Looks `reps` up in the persistent level; publishes each program found as one group
/// and answers its representatives, and answers those whose failure the level remembers
/// with it ([`KernelError::Remembered`]). Returns the representatives still missing.
fn load_from<P: Send + Sync + 'static, S, E: std::error::Error + 'static>(
    cache: &KernelCache<P>,
    batch: &[BatchKernel<S>],
    level: &dyn Persist<P, E, S>,
    reps: Vec<usize>,
    answers: &mut Answers<P, E>,
    census: &mut Census,
) -> Vec<usize> {
    let keys: Vec<Keyed<'_>> = reps
        .iter()
        .map(|&i| (batch[i].key.as_str(), batch[i].options.as_slice()))
        .collect();
    let found = level.find(&keys);
    let mut missing = Vec::new();
    // One group per loaded program, in order of first appearance.
    let mut programs: Vec<LoadedGroup<P>> = Vec::new();
    for (&i, hit) in reps.iter().zip(found) {
        let (program, weight, symbol) = match hit {
            Looked::Found(program, weight, symbol) => (program, weight, symbol),
            Looked::Failed(message) => {
                let error = KernelError::Remembered {
                    symbol: batch[i].symbol.clone(),
                    message,
                };
                answers[i] = Some(Err(Arc::new(error)));
                census.kernels_remembered_failed += 1;
                continue;
            }
            Looked::Missing => {
                missing.push(i);
                continue;
            }
        };
        let value = Resolved::new(Arc::clone(&program), symbol);
        answers[i] = Some(Ok(value.clone()));
        let entry = (batch[i].key.clone(), value);
        match programs.iter_mut().find(|p| Arc::ptr_eq(&p.0, &program)) {
            Some(p) => p.2.push(entry),
            None => programs.push((program, weight, vec![entry])),
        }
    }
    for (_, weight, entries) in programs {
        census.programs_loaded += 1;
        census.kernels_loaded += entries.len() as u64;
        cache.publish(entries, weight);
    }
    missing
}

fn group_of<'a, S>(
    batch: &'a [BatchKernel<S>],
    index: usize,
    n_groups: usize,
    options: &'a [String],
    idxs: &[usize],
) -> Group<'a, S> {
    Group {
        index,
        n_groups,
        options,
        kernels: idxs.iter().map(|&i| &batch[i]).collect(),
    }
}

fn symbols<S>(group: &Group<'_, S>) -> Vec<String> {
    group.kernels.iter().map(|k| k.symbol.clone()).collect()
}

/// Publishes `compiled` (compiled in `took`) as one group, answers its
/// representatives, then saves it to the persistent level if any.
#[allow(clippy::too_many_arguments)]
fn publish<P: Send + Sync + 'static, S, E: std::error::Error + 'static>(
    cache: &KernelCache<P>,
    level: Option<&dyn Persist<P, E, S>>,
    group: &Group<'_, S>,
    idxs: &[usize],
    compiled: Compiled<P>,
    took: Duration,
    answers: &mut Answers<P, E>,
    census: &mut Census,
) {
    let program = publish_in_memory(cache, group, idxs, compiled, answers, census);
    if let Some(level) = level {
        level.save(&program, group.options, &save_list(group), took);
    }
}

/// Publishes `compiled` as one group in the memory cache and answers its
/// representatives; returns the program.
fn publish_in_memory<P: Send + Sync + 'static, S, E: std::error::Error + 'static>(
    cache: &KernelCache<P>,
    group: &Group<'_, S>,
    idxs: &[usize],
    compiled: Compiled<P>,
    answers: &mut Answers<P, E>,
    census: &mut Census,
) -> Arc<P> {
    let program = Arc::new(compiled.program);
    let mut entries = Vec::with_capacity(idxs.len());
    for (&i, kernel) in idxs.iter().zip(&group.kernels) {
        let value = Resolved::new(Arc::clone(&program), kernel.symbol.as_str());
        answers[i] = Some(Ok(value.clone()));
        entries.push((kernel.key.clone(), value));
    }
    cache.publish(entries, compiled.weight);
    census.programs_compiled += 1;
    census.kernels_compiled += idxs.len() as u64;
    program
}

/// The `(key, symbol)`s a save of `group`'s program is for.
fn save_list<'a, S>(group: &Group<'a, S>) -> Vec<(&'a str, &'a str)> {
    group
        .kernels
        .iter()
        .map(|k| (k.key.as_str(), k.symbol.as_str()))
        .collect()
}

/// Records the kernels of `group` (batch indices `idxs`) that failed alone, each with a
/// [`KernelError::Unit`] of its own; returns the batch indices of the others, in order.
#[allow(clippy::too_many_arguments)]
fn fail_units<P, S, E: std::error::Error + 'static>(
    group: &Group<'_, S>,
    idxs: &[usize],
    stage: Stage,
    failed: Vec<(usize, E)>,
    answers: &mut Answers<P, E>,
    census: &mut Census,
) -> Vec<usize> {
    let mut alone = vec![false; idxs.len()];
    for (position, source) in failed {
        // A position out of range or given again is ignored (see `Units`).
        if position >= idxs.len() || alone[position] {
            continue;
        }
        alone[position] = true;
        let error = KernelError::Unit(CompileFailure {
            stage,
            program: group.index,
            programs: group.n_groups,
            symbols: vec![group.kernels[position].symbol.clone()],
            source,
            later_panics: 0,
        });
        answers[idxs[position]] = Some(Err(Arc::new(error)));
        census.kernels_failed += 1;
    }
    idxs.iter()
        .zip(alone)
        .filter(|(_, alone)| !alone)
        .map(|(&i, _)| i)
        .collect()
}

/// Answers every kernel of `idxs` with one shared `error`.
fn fail_all<P, E: std::error::Error + 'static>(
    idxs: &[usize],
    error: KernelError<E>,
    answers: &mut Answers<P, E>,
    census: &mut Census,
) {
    let error = Arc::new(error);
    for &i in idxs {
        answers[i] = Some(Err(Arc::clone(&error)));
    }
    census.kernels_failed += idxs.len() as u64;
}

#[allow(clippy::too_many_arguments)]
fn compile_whole<B: Backend>(
    cache: &KernelCache<B::Program>,
    batch: &[BatchKernel<B::Source>],
    backend: &B,
    level: Option<&dyn Persist<B::Program, B::Error, B::Source>>,
    mode: Mode,
    groups: Vec<OptionGroup<'_>>,
    answers: &mut Answers<B::Program, B::Error>,
    census: &mut Census,
) -> Result<(), Error<B::Error>> {
    let n_groups = groups.len();
    for (index, (options, idxs)) in groups.into_iter().enumerate() {
        let group = group_of(batch, index, n_groups, options, &idxs);
        let failure = |source| CompileFailure {
            stage: Stage::CompileGroup,
            program: index,
            programs: n_groups,
            symbols: symbols(&group),
            source,
            later_panics: 0,
        };
        let started = Instant::now();
        if mode == Mode::Strict {
            let compiled = backend
                .compile_group(&group)
                .map_err(|source| Error::Compile(Box::new(failure(source))))?;
            let took = started.elapsed();
            publish(cache, level, &group, &idxs, compiled, took, answers, census);
            continue;
        }
        let Units { program, failed } = match backend.compile_group_each(&group) {
            Ok(units) => units,
            Err(source) => {
                fail_all(
                    &idxs,
                    KernelError::Program(failure(source)),
                    answers,
                    census,
                );
                continue;
            }
        };
        let took = started.elapsed();
        let rest = fail_units(&group, &idxs, Stage::CompileGroup, failed, answers, census);
        if rest.is_empty() {
            continue;
        }
        let held = group_of(batch, index, n_groups, options, &rest);
        match program {
            Some(compiled) => publish(cache, level, &held, &rest, compiled, took, answers, census),
            None => {
                for (&i, kernel) in rest.iter().zip(&held.kernels) {
                    let error = KernelError::Unreported {
                        symbol: kernel.symbol.clone(),
                        program: index,
                    };
                    fail_all(&[i], error, answers, census);
                }
            }
        }
    }
    Ok(())
}

/// A program between prepare and finish on the concurrent path.
enum Slot<T, E> {
    Ready(T),
    Failed(Stage, E),
    /// Its `prepare` panicked (the panic waits for its turn in batch order).
    Panicked(Box<dyn Any + Send>),
}

/// A value handed from thread to thread, taken (`None` left) once.
type Taken<T> = Mutex<Option<T>>;

/// What a compile thread returned: `None` when there was nothing to compile (prepare
/// failed), else the kernels that failed alone or the program's error; or the panic it
/// raised.
type Joined<E> = thread::Result<Ran<E>>;

#[allow(clippy::too_many_arguments)]
fn compile_concurrent<B: SplitBackend>(
    cache: &KernelCache<B::Program>,
    batch: &[BatchKernel<B::Source>],
    backend: &B,
    level: Option<&SharedPersist<'_, B::Program, B::Error, B::Source>>,
    mode: Mode,
    programs: Vec<OptionGroup<'_>>,
    answers: &mut Answers<B::Program, B::Error>,
    census: &mut Census,
) -> Result<(), Error<B::Error>> {
    let n_programs = programs.len();
    let groups: Vec<(Group<'_, B::Source>, Vec<usize>)> = programs
        .into_iter()
        .enumerate()
        .map(|(index, (options, idxs))| (group_of(batch, index, n_programs, options, &idxs), idxs))
        .collect();
    // Each slot is taken (`None` left) when its program is finished.
    let slots: Vec<Taken<Slot<B::Prepared, B::Error>>> = groups
        .iter()
        .map(|(group, _)| {
            Mutex::new(Some(
                match catch_unwind(AssertUnwindSafe(|| backend.prepare(group))) {
                    Ok(Ok(prepared)) => Slot::Ready(prepared),
                    Ok(Err(e)) => Slot::Failed(Stage::Prepare, e),
                    Err(panic) => Slot::Panicked(panic),
                },
            ))
        })
        .collect();
    let took: Vec<Mutex<Duration>> = groups.iter().map(|_| Mutex::new(Duration::ZERO)).collect();
    let run = |j: usize| -> Ran<B::Error> {
        let mut slot = lock(&slots[j]);
        let started = Instant::now();
        let out = match slot.as_mut() {
            Some(Slot::Ready(prepared)) => Some(match mode {
                Mode::Strict => backend.compile(prepared).map(|()| Vec::new()),
                Mode::Each => backend.compile_each(prepared),
            }),
            Some(Slot::Failed(..) | Slot::Panicked(_)) | None => None,
        };
        *lock(&took[j]) = started.elapsed();
        out
    };

    // The first failure in batch order, error or panic, is what a strict resolve
    // reports; a per-kernel resolve answers errors per kernel and resumes the first panic.
    let mut first: Option<Failure<B::Error>> = None;
    let mut later_panics = 0;
    // A panic of a save, resumed once every program is finished.
    let mut save_panic: Option<Box<dyn Any + Send>> = None;
    thread::scope(|scope| {
        let run = &run;
        let mut handles = (1..n_programs)
            .map(|j| {
                thread::Builder::new()
                    .name(format!("kcache-compile-{j}"))
                    .spawn_scoped(scope, move || run(j))
                    .ok()
            })
            .collect::<Vec<_>>()
            .into_iter();
        let mut saves = Vec::new();
        // Programs are finished in batch order on this thread, each once its own
        // compile and every earlier one's have returned (the later ones may still be
        // compiling); each save to the persistent level runs on a thread of its own
        // meanwhile.
        for (j, (group, idxs)) in groups.iter().enumerate() {
            let handle = if j == 0 {
                None
            } else {
                handles.next().flatten()
            };
            let joined: Joined<B::Error> = match handle {
                Some(handle) => handle.join(),
                // The first program, or a thread that could not be spawned: compiled
                // here.
                _ => catch_unwind(AssertUnwindSafe(|| run(j))),
            };
            let slot = lock(&slots[j]).take();
            // A panic of prepare, compile or finish takes its place in batch order as an
            // error does.
            let mut panicked = |panic: Box<dyn Any + Send>| {
                if first.is_some() {
                    later_panics += 1;
                } else {
                    first = Some(Failure::Panic(panic));
                }
                None
            };
            // The failing step, its error and the batch indices of the kernels it fails.
            let failure = match (slot, joined) {
                (Some(Slot::Panicked(panic)), _) | (_, Err(panic)) => panicked(panic),
                (Some(Slot::Failed(stage, e)), _) => Some((stage, e, idxs.clone())),
                (Some(Slot::Ready(_)), Ok(Some(Err(e)))) => Some((Stage::Compile, e, idxs.clone())),
                // Taken only here, once.
                (None, Ok(_)) => None,
                (Some(Slot::Ready(prepared)), Ok(out)) => {
                    let failed = match out {
                        Some(Ok(failed)) => failed,
                        _ => Vec::new(),
                    };
                    let rest = fail_units(group, idxs, Stage::Compile, failed, answers, census);
                    if rest.is_empty() {
                        // Every kernel failed alone: nothing to finish.
                        None
                    } else {
                        let held = group_of(batch, group.index, n_programs, group.options, &rest);
                        match catch_unwind(AssertUnwindSafe(|| backend.finish(prepared))) {
                            Ok(Ok(compiled)) => {
                                let took = *lock(&took[j]);
                                let program = publish_in_memory(
                                    cache, &held, &rest, compiled, answers, census,
                                );
                                if let Some(level) = level {
                                    let kernels = save_list(&held);
                                    let options = group.options;
                                    let task = {
                                        let program = Arc::clone(&program);
                                        let kernels = kernels.clone();
                                        move || level.save(&program, options, &kernels, took)
                                    };
                                    match thread::Builder::new()
                                        .name(format!("kcache-save-{j}"))
                                        .spawn_scoped(scope, task)
                                    {
                                        Ok(handle) => saves.push(handle),
                                        // No thread: the save runs here, never lost.
                                        Err(_) => level.save(&program, options, &kernels, took),
                                    }
                                }
                                None
                            }
                            Ok(Err(e)) => Some((Stage::Finish, e, rest)),
                            Err(panic) => panicked(panic),
                        }
                    }
                }
            };
            let Some((stage, source, failing)) = failure else {
                continue;
            };
            let failure = CompileFailure {
                stage,
                program: group.index,
                programs: n_programs,
                symbols: failing.iter().map(|&i| batch[i].symbol.clone()).collect(),
                source,
                later_panics: 0,
            };
            match mode {
                Mode::Each => fail_all(&failing, KernelError::Program(failure), answers, census),
                Mode::Strict => {
                    if first.is_none() {
                        first = Some(Failure::Error(failure));
                    }
                }
            }
        }
        for handle in saves {
            if let Err(panic) = handle.join() {
                save_panic.get_or_insert(panic);
            }
        }
    });
    if let Some(panic) = save_panic {
        resume_unwind(panic);
    }
    match first {
        None => Ok(()),
        Some(Failure::Panic(panic)) => resume_unwind(panic),
        Some(Failure::Error(mut failure)) => {
            failure.later_panics = later_panics;
            Err(Error::Compile(Box::new(failure)))
        }
    }
}

/// The first failure of a concurrent compile, in batch order.
enum Failure<E: std::error::Error + 'static> {
    Error(CompileFailure<E>),
    Panic(Box<dyn Any + Send>),
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    //! The driver's bookkeeping, checked with a backend that "compiles" a group into the
    //! list of its kernels' texts (so every answer can be checked against its source).
    use super::*;
    use crate::partition::{Split, chunks, with_split_override};
    use proptest::prelude::*;

    /// A program: the option list it was compiled under and its `(symbol, source)`s.
    #[derive(Debug)]
    struct Listing {
        options: Vec<String>,
        kernels: Vec<(String, String)>,
    }

    #[derive(Debug, thiserror::Error)]
    #[error("kernel text `fail` does not compile")]
    struct Refused;

    /// Records every compile; refuses a group holding a kernel whose text is `fail`.
    #[derive(Default)]
    struct Lister {
        compiles: Mutex<Vec<(Vec<String>, Vec<String>)>>,
        split: Option<Split>,
        /// A kernel's compile cost is its text's length (else 1).
        costs_by_length: bool,
    }

    impl Lister {
        fn build(&self, group: &Group<'_, String>) -> Result<Compiled<Listing>, Refused> {
            let symbols = group.kernels.iter().map(|k| k.symbol.clone()).collect();
            lock(&self.compiles).push((group.options.to_vec(), symbols));
            if group.kernels.iter().any(|k| k.source == "fail") {
                return Err(Refused);
            }
            Ok(Compiled {
                weight: group.kernels.len() as u64,
                program: Listing {
                    options: group.options.to_vec(),
                    kernels: group
                        .kernels
                        .iter()
                        .map(|k| (k.symbol.clone(), k.source.clone()))
                        .collect(),
                },
            })
        }
    }

    impl Backend for Lister {
        type Source = String;
        type Program = Listing;
        type Error = Refused;
        fn compile_group(&self, group: &Group<'_, String>) -> Result<Compiled<Listing>, Refused> {
            self.build(group)
        }
        fn compile_group_each(
            &self,
            group: &Group<'_, String>,
        ) -> Result<Units<Listing, Refused>, Refused> {
            let mut pending = self.pending(group);
            let failed = Self::drop_failed(&mut pending);
            let program = (!pending.1.is_empty()).then(|| Self::listing(pending));
            Ok(Units { program, failed })
        }
    }

    /// A program between prepare and finish: its option list and `(symbol, source)`s.
    type Pending = (Vec<String>, Vec<(String, String)>);

    impl Lister {
        /// Records the compile; the program (its option list and kernels) to build.
        fn pending(&self, group: &Group<'_, String>) -> Pending {
            let symbols = group.kernels.iter().map(|k| k.symbol.clone()).collect();
            lock(&self.compiles).push((group.options.to_vec(), symbols));
            let kernels = group
                .kernels
                .iter()
                .map(|k| (k.symbol.clone(), k.source.clone()))
                .collect();
            (group.options.to_vec(), kernels)
        }

        /// Drops the kernels whose text is `fail`: their positions, refused alone.
        fn drop_failed(pending: &mut Pending) -> Vec<(usize, Refused)> {
            let failed: Vec<(usize, Refused)> = (pending.1.iter().enumerate())
                .filter(|(_, k)| k.1 == "fail")
                .map(|(i, _)| (i, Refused))
                .collect();
            pending.1.retain(|k| k.1 != "fail");
            failed
        }

        fn listing(pending: Pending) -> Compiled<Listing> {
            Compiled {
                weight: pending.1.len() as u64,
                program: Listing {
                    options: pending.0,
                    kernels: pending.1,
                },
            }
        }
    }

    impl SplitBackend for Lister {
        type Prepared = Pending;
        fn split(&self) -> Split {
            self.split.unwrap_or(Split::WHOLE)
        }
        fn compile_cost(&self, source: &String) -> u64 {
            if self.costs_by_length {
                source.len() as u64
            } else {
                1
            }
        }
        fn prepare(&self, group: &Group<'_, String>) -> Result<Self::Prepared, Refused> {
            Ok(self.pending(group))
        }
        fn compile(&self, prepared: &mut Self::Prepared) -> Result<(), Refused> {
            match prepared.1.iter().any(|k| k.1 == "fail") {
                true => Err(Refused),
                false => Ok(()),
            }
        }
        fn compile_each(&self, prepared: &mut Pending) -> Result<Vec<(usize, Refused)>, Refused> {
            Ok(Self::drop_failed(prepared))
        }
        fn finish(&self, prepared: Self::Prepared) -> Result<Compiled<Listing>, Refused> {
            Ok(Self::listing(prepared))
        }
    }

    fn opts(o: u8) -> Vec<String> {
        (0..o).map(|i| format!("-f{i}")).collect()
    }

    /// Kernel `i` of key `k` under option list `o`; key 4's text does not compile when
    /// `failing`.
    fn batch(spec: &[(u8, u8)], failing: bool) -> Vec<BatchKernel<String>> {
        spec.iter()
            .enumerate()
            .map(|(i, &(k, o))| BatchKernel {
                // The option list enters the key, as kernel_key makes it.
                key: format!("k{k}/o{o}"),
                options: opts(o),
                symbol: format!("s{i}"),
                source: if failing && k == 4 {
                    "fail".into()
                } else {
                    format!("text{k}")
                },
            })
            .collect()
    }

    /// The expected compiles: representatives (first per key, not prepublished),
    /// grouped by option list in order of first appearance, cut by `split` if any.
    fn expected_programs(
        b: &[BatchKernel<String>],
        pre: &[bool],
        split: Option<Split>,
    ) -> Vec<(Vec<String>, Vec<usize>)> {
        let mut seen = std::collections::HashSet::new();
        let mut groups: Vec<(Vec<String>, Vec<usize>)> = Vec::new();
        for (i, k) in b.iter().enumerate() {
            if pre[i] || !seen.insert(k.key.clone()) {
                continue;
            }
            match groups.iter_mut().find(|g| g.0 == k.options) {
                Some(g) => g.1.push(i),
                None => groups.push((k.options.clone(), vec![i])),
            }
        }
        let Some(split) = split else { return groups };
        let cut: Vec<_> = groups
            .iter()
            .flat_map(|(o, reps)| {
                chunks(programs_for(split, reps.len()), reps)
                    .into_iter()
                    .map(|r| (o.clone(), r.to_vec()))
                    .collect::<Vec<_>>()
            })
            .collect();
        if cut.len() == groups.len() {
            groups
        } else {
            cut
        }
    }

    /// What a [`Faulty`] program does at one stage.
    #[derive(Clone, Copy, Debug, PartialEq)]
    enum Fault {
        Fail(Stage),
        Panic(Stage),
    }

    /// A split backend whose program holding kernel text `t` fails or panics as
    /// `faults` says for `t` (each program here holds one kernel).
    struct Faulty {
        faults: Vec<(&'static str, Fault)>,
    }

    impl Faulty {
        fn at(&self, text: &str, stage: Stage) -> Result<(), Refused> {
            match self.faults.iter().find(|(t, _)| *t == text).map(|f| f.1) {
                Some(Fault::Fail(s)) if s == stage => Err(Refused),
                Some(Fault::Panic(s)) if s == stage => panic!("{text} panics at {s:?}"),
                _ => Ok(()),
            }
        }
    }

    /// Kernels `k<i>` / `s<i>` of texts `t<i>`, no options.
    fn texts(n: usize) -> Vec<BatchKernel<String>> {
        (0..n)
            .map(|i| BatchKernel {
                key: format!("k{i}"),
                options: vec![],
                symbol: format!("s{i}"),
                source: format!("t{i}"),
            })
            .collect()
    }

    /// A program of one kernel: its text (the test backends' programs here).
    fn first_text(g: &Group<'_, String>) -> Compiled<String> {
        Compiled {
            weight: 1,
            program: g.kernels[0].source.clone(),
        }
    }

    impl Backend for Faulty {
        type Source = String;
        type Program = String;
        type Error = Refused;
        fn compile_group(&self, g: &Group<'_, String>) -> Result<Compiled<String>, Refused> {
            Ok(first_text(g))
        }
    }

    impl SplitBackend for Faulty {
        type Prepared = String;
        fn split(&self) -> Split {
            Split::new(8, 1)
        }
        fn prepare(&self, group: &Group<'_, String>) -> Result<String, Refused> {
            let text = group.kernels[0].source.clone();
            self.at(&text, Stage::Prepare).map(|()| text)
        }
        fn compile(&self, text: &mut String) -> Result<(), Refused> {
            self.at(text, Stage::Compile)
        }
        fn finish(&self, text: String) -> Result<Compiled<String>, Refused> {
            self.at(&text, Stage::Finish)?;
            Ok(Compiled {
                weight: 1,
                program: text,
            })
        }
    }

    /// A split resolve cuts an option list's kernels into programs balanced by the
    /// backend's compile costs (two costly kernels apart, beside a cheap one each), of
    /// the sizes a cut by count gives, each in batch order; contiguous runs when the
    /// costs are equal.
    #[test]
    fn split_programs_are_balanced_by_compile_cost() {
        let batch: Vec<BatchKernel<String>> = ["heavyheavy0", "heavyheavy1", "l2", "l3", "l4"]
            .iter()
            .enumerate()
            .map(|(i, text)| BatchKernel {
                key: format!("k{i}"),
                options: vec![],
                symbol: format!("s{i}"),
                source: text.to_string(),
            })
            .collect();
        for (by_length, want) in [
            (true, vec![vec!["s0", "s2"], vec!["s1", "s3", "s4"]]),
            (false, vec![vec!["s0", "s1"], vec!["s2", "s3", "s4"]]),
        ] {
            let lister = Lister {
                split: Some(Split::new(2, 1)),
                costs_by_length: by_length,
                ..Lister::default()
            };
            resolve_split(&KernelCache::new(1 << 20), &batch, &lister).unwrap();
            let compiled: Vec<Vec<String>> =
                lock(&lister.compiles).iter().map(|c| c.1.clone()).collect();
            assert_eq!(compiled, want, "costs by length: {by_length}");
        }
    }

    /// A persistent level that records the programs saved to it (a program here is its
    /// one kernel's text); its save of `panics_on` panics.
    #[derive(Default)]
    struct Saves {
        saved: Mutex<Vec<String>>,
        changed: std::sync::Condvar,
        panics_on: Option<&'static str>,
    }

    impl Persist<String, Refused, String> for Saves {
        fn find(&self, keys: &[Keyed<'_>]) -> Vec<Looked<String>> {
            keys.iter().map(|_| Looked::Missing).collect()
        }
        fn lock(&self, _keys: &[Keyed<'_>]) -> (Box<dyn Any>, bool) {
            (Box::new(()), false)
        }
        fn lock_counts(&self) -> (u64, u64) {
            (0, 0)
        }
        fn save(&self, program: &String, _: &[String], _: &[(&str, &str)], _: Duration) {
            if self.panics_on == Some(program.as_str()) {
                panic!("the save of {program} panics");
            }
            lock(&self.saved).push(program.clone());
            self.changed.notify_all();
        }
    }

    /// A split backend, one kernel per program (as [`Faulty`] without faults), whose
    /// compile of `t1` waits (at most a minute) for the save of `t0`'s program to `saves`,
    /// if any.
    struct WaitsForSave<'a> {
        saves: Option<&'a Saves>,
        saw_first_saved: std::sync::atomic::AtomicBool,
    }

    impl Backend for WaitsForSave<'_> {
        type Source = String;
        type Program = String;
        type Error = Refused;
        fn compile_group(&self, g: &Group<'_, String>) -> Result<Compiled<String>, Refused> {
            Ok(first_text(g))
        }
    }

    impl SplitBackend for WaitsForSave<'_> {
        type Prepared = String;
        fn split(&self) -> Split {
            Split::new(8, 1)
        }
        fn prepare(&self, group: &Group<'_, String>) -> Result<String, Refused> {
            Ok(group.kernels[0].source.clone())
        }
        fn compile(&self, text: &mut String) -> Result<(), Refused> {
            if let Some(saves) = self.saves
                && text == "t1"
            {
                let saved = lock(&saves.saved);
                let (saved, _) = saves
                    .changed
                    .wait_timeout_while(saved, Duration::from_secs(60), |s| {
                        !s.iter().any(|p| p == "t0")
                    })
                    .unwrap_or_else(|e| e.into_inner());
                let seen = saved.iter().any(|p| p == "t0");
                self.saw_first_saved.store(seen, Ordering::SeqCst);
            }
            Ok(())
        }
        fn finish(&self, text: String) -> Result<Compiled<String>, Refused> {
            Ok(Compiled {
                weight: 1,
                program: text,
            })
        }
    }

    /// A split resolve finishes and saves each program once its own compile (and every
    /// earlier one's) returned, while later programs still compile: the save of the
    /// first program is seen from the second's compile. Every program is saved and
    /// answered.
    #[test]
    fn a_program_is_saved_while_a_later_one_still_compiles() {
        let saves = Saves::default();
        let backend = WaitsForSave {
            saves: Some(&saves),
            saw_first_saved: Default::default(),
        };
        let batch = texts(3);
        let cache = KernelCache::new(1 << 20);
        let answers = split_drive(&cache, &batch, &backend, Some(&saves), Mode::Strict)
            .map(strict)
            .unwrap();
        assert!(
            backend.saw_first_saved.load(Ordering::SeqCst),
            "the first program was not saved while the second compiled"
        );
        let mut saved = lock(&saves.saved).clone();
        saved.sort();
        assert_eq!(saved, ["t0", "t1", "t2"]);
        for (a, k) in answers.iter().zip(&batch) {
            assert_eq!(a.program.as_str(), k.source);
        }
    }

    /// A panic in a save (run on a thread of its own) reaches the caller, after every
    /// program was finished and published.
    #[test]
    fn a_panic_in_a_save_reaches_the_caller() {
        let saves = Saves {
            panics_on: Some("t0"),
            ..Saves::default()
        };
        let backend = WaitsForSave {
            saves: None,
            saw_first_saved: Default::default(),
        };
        let batch = texts(3);
        let cache = KernelCache::new(1 << 20);
        let out = catch_unwind(AssertUnwindSafe(|| {
            split_drive(&cache, &batch, &backend, Some(&saves), Mode::Strict)
        }));
        assert!(out.is_err(), "the save's panic reaches the caller");
        for k in &batch {
            assert!(cache.find(&k.key).is_some(), "{} was published", k.key);
        }
        let mut saved = lock(&saves.saved).clone();
        saved.sort();
        assert_eq!(saved, ["t1", "t2"]);
    }

    /// A panic in `prepare` or `finish` takes its place in batch order as one in
    /// `compile` does: an earlier error is what the resolve reports (the panic counted
    /// in `later_panics`), an earlier panic is resumed, and every program that succeeded
    /// is published either way.
    #[test]
    fn a_panic_in_prepare_or_finish_waits_for_its_turn_in_batch_order() {
        let batch = texts(4);
        let cases = [
            vec![
                ("t0", Fault::Fail(Stage::Prepare)),
                ("t2", Fault::Panic(Stage::Prepare)),
            ],
            vec![
                ("t1", Fault::Fail(Stage::Compile)),
                ("t2", Fault::Panic(Stage::Finish)),
            ],
            vec![
                ("t0", Fault::Fail(Stage::Finish)),
                ("t3", Fault::Panic(Stage::Prepare)),
            ],
        ];
        for faults in cases {
            let failing: Vec<&str> = faults.iter().map(|f| f.0).collect();
            let cache = KernelCache::new(1 << 20);
            let backend = Faulty {
                faults: faults.clone(),
            };
            let out = catch_unwind(AssertUnwindSafe(|| resolve_split(&cache, &batch, &backend)));
            let Ok(Err(Error::Compile(failure))) = out else {
                panic!("{faults:?}: the earlier error must be reported, not the later panic");
            };
            let Fault::Fail(stage) = faults[0].1 else {
                unreachable!()
            };
            assert_eq!(
                (failure.program, failure.stage),
                (
                    batch.iter().position(|k| k.source == faults[0].0).unwrap(),
                    stage
                )
            );
            assert_eq!(failure.later_panics, 1, "{faults:?}");
            for k in &batch {
                assert_eq!(
                    cache.find(&k.key).is_some(),
                    !failing.contains(&k.source.as_str()),
                    "{faults:?} {}",
                    k.source
                );
            }
        }
        // An earlier panic (in finish) is resumed, after the later successes were published.
        let cache = KernelCache::new(1 << 20);
        let backend = Faulty {
            faults: vec![
                ("t1", Fault::Panic(Stage::Finish)),
                ("t2", Fault::Fail(Stage::Prepare)),
            ],
        };
        let out = catch_unwind(AssertUnwindSafe(|| resolve_split(&cache, &batch, &backend)));
        assert!(out.is_err(), "the earlier panic reaches the caller");
        assert!(cache.find("k0").is_some() && cache.find("k3").is_some());
        assert!(cache.find("k1").is_none() && cache.find("k2").is_none());
    }

    /// On the concurrent path of a per-kernel resolve, a program whose prepare, compile
    /// or finish fails answers its kernels with a `KernelError::Program` of that stage,
    /// every other program is published, and the first panic in batch order is resumed
    /// after that (a later error no longer hides it).
    #[test]
    fn per_kernel_split_answers_each_failing_program_and_resumes_panics() {
        let batch = texts(4);
        for stage in [Stage::Prepare, Stage::Compile, Stage::Finish] {
            let cache = KernelCache::new(1 << 20);
            let backend = Faulty {
                faults: vec![("t1", Fault::Fail(stage)), ("t3", Fault::Fail(stage))],
            };
            let (outcomes, census) =
                crate::census::with_census(|| resolve_split_each(&cache, &batch, &backend));
            let outcomes = outcomes.unwrap();
            for (i, o) in outcomes.iter().enumerate() {
                match o {
                    Ok(a) => {
                        assert!(i == 0 || i == 2, "{stage:?} {i}");
                        assert_eq!(*a.program, format!("t{i}"));
                    }
                    Err(e) => {
                        assert!(i == 1 || i == 3, "{stage:?} {i}");
                        assert!(matches!(&**e, KernelError::Program(f)
                            if f.stage == stage && f.program == i && f.symbols == [format!("s{i}")]));
                    }
                }
                assert_eq!(cache.find(&format!("k{i}")).is_some(), i % 2 == 0);
            }
            assert_eq!((census.kernels_compiled, census.kernels_failed), (2, 2));
        }
        // An error before a panic no longer stops the panic: it is resumed, after the
        // programs that compiled were published.
        let cache = KernelCache::new(1 << 20);
        let backend = Faulty {
            faults: vec![
                ("t0", Fault::Fail(Stage::Compile)),
                ("t2", Fault::Panic(Stage::Finish)),
            ],
        };
        let out = catch_unwind(AssertUnwindSafe(|| {
            resolve_split_each(&cache, &batch, &backend)
        }));
        assert!(out.is_err(), "the panic reaches the caller");
        assert!(cache.find("k1").is_some() && cache.find("k3").is_some());
        assert!(cache.find("k0").is_none() && cache.find("k2").is_none());
    }

    proptest! {
        #[test]
        fn resolve_compiles_one_representative_per_key_grouped_by_options(
            spec in proptest::collection::vec((0u8..6, 0u8..3), 0..14),
            prepublished in proptest::collection::vec(any::<bool>(), 6),
            failing in any::<bool>(),
            split in proptest::option::of((1usize..4, 1usize..3)),
        ) {
            let split = split.map(|(m, k)| Split::new(m, k));
            let b = batch(&spec, failing);
            let cache = KernelCache::new(1 << 40);
            // Publish some keys beforehand (their texts always compile).
            let pre_keys: Vec<String> = b.iter()
                .filter(|k| prepublished[k.key[1..2].parse::<usize>().unwrap()])
                .map(|k| k.key.clone())
                .collect();
            let old = Arc::new(Listing { options: vec![], kernels: vec![] });
            cache.publish(pre_keys.iter().map(|k| (k.clone(), Resolved::new(Arc::clone(&old), "old"))), 1);
            let pre: Vec<bool> = b.iter().map(|k| pre_keys.contains(&k.key)).collect();

            let lister = Lister { split, ..Lister::default() };
            let (result, census) = crate::census::with_census(|| match split {
                None => resolve(&cache, &b, &lister),
                Some(s) => with_split_override(s, || resolve_split(&cache, &b, &lister)),
            });
            let expected = expected_programs(&b, &pre, split);
            let compiles = lock(&lister.compiles).clone();
            let concurrent = split.is_some() && expected.len() > expected_programs(&b, &pre, None).len();
            let fails = |p: &(Vec<String>, Vec<usize>)| p.1.iter().any(|&i| b[i].source == "fail");
            let first_failing = expected.iter().position(fails);

            // Which programs were compiled, in order: every one on the concurrent path,
            // up to the first failure on the whole path.
            let attempted = match (concurrent, first_failing) {
                (false, Some(f)) => f + 1,
                _ => expected.len(),
            };
            prop_assert_eq!(compiles.len(), attempted);
            for ((options, symbols), (eo, eidx)) in compiles.iter().zip(&expected) {
                prop_assert_eq!(options, eo);
                let want: Vec<String> = eidx.iter().map(|&i| b[i].symbol.clone()).collect();
                prop_assert_eq!(symbols, &want);
            }
            prop_assert_eq!(census.kernels_reused, pre.iter().filter(|p| **p).count() as u64);

            // Published: every program that compiled (all before the failure on the
            // whole path), never one that failed.
            for (p, prog) in expected.iter().enumerate() {
                let published = !fails(prog) && (concurrent || first_failing.is_none_or(|f| p < f));
                for &i in &prog.1 {
                    prop_assert_eq!(cache.find(&b[i].key).is_some(), published, "program {}", p);
                }
            }
            match (result, first_failing) {
                (Err(Error::Compile(f)), Some(p)) => {
                    prop_assert_eq!(f.program, p);
                    prop_assert_eq!(f.programs, expected.len());
                }
                (Ok(answers), None) => {
                    prop_assert_eq!(answers.len(), b.len());
                    for (i, (k, a)) in b.iter().zip(&answers).enumerate() {
                        if pre[i] {
                            prop_assert!(Arc::ptr_eq(&a.program, &old));
                            continue;
                        }
                        // The representative's symbol, in a program holding its text
                        // under the kernel's own option list.
                        let rep = b.iter().position(|r| r.key == k.key).unwrap();
                        prop_assert_eq!(&*a.symbol, b[rep].symbol.as_str());
                        prop_assert_eq!(&a.program.options, &k.options);
                        prop_assert!(a.program.kernels.contains(&(b[rep].symbol.clone(), k.source.clone())));
                    }
                }
                (other, f) => prop_assert!(false, "result {:?} with first failing {:?}", other.map(|a| a.len()), f),
            }
        }

        /// The per-kernel resolves against a simple reference: every program of the
        /// grouping (cut as `resolve_split` cuts it) is compiled once, whatever fails; a
        /// kernel whose text is `fail` (and its twins) is answered with its own error and
        /// never published; every other is answered from a program holding its text under
        /// its own option list and no failed kernel, and is published; the census is exact.
        #[test]
        fn resolve_each_fails_each_failing_kernel_alone(
            spec in proptest::collection::vec((0u8..6, 0u8..3), 0..14),
            prepublished in proptest::collection::vec(any::<bool>(), 6),
            split in proptest::option::of((1usize..4, 1usize..3)),
        ) {
            let split = split.map(|(m, k)| Split::new(m, k));
            let b = batch(&spec, true);
            let cache = KernelCache::new(1 << 40);
            // Publish some keys beforehand (never the failing key 4).
            let pre_keys: Vec<String> = b.iter()
                .filter(|k| k.source != "fail" && prepublished[k.key[1..2].parse::<usize>().unwrap()])
                .map(|k| k.key.clone())
                .collect();
            let old = Arc::new(Listing { options: vec![], kernels: vec![] });
            cache.publish(pre_keys.iter().map(|k| (k.clone(), Resolved::new(Arc::clone(&old), "old"))), 1);
            let pre: Vec<bool> = b.iter().map(|k| pre_keys.contains(&k.key)).collect();

            let lister = Lister { split, ..Lister::default() };
            let (result, census) = crate::census::with_census(|| match split {
                None => resolve_each(&cache, &b, &lister),
                Some(s) => with_split_override(s, || resolve_split_each(&cache, &b, &lister)),
            });
            let outcomes = result.unwrap();
            let expected = expected_programs(&b, &pre, split);
            let compiles = lock(&lister.compiles).clone();
            prop_assert_eq!(compiles.len(), expected.len(), "every program compiled once");
            for ((options, symbols), (eo, eidx)) in compiles.iter().zip(&expected) {
                prop_assert_eq!(options, eo);
                let want: Vec<String> = eidx.iter().map(|&i| b[i].symbol.clone()).collect();
                prop_assert_eq!(symbols, &want);
            }
            let reps: Vec<usize> = expected.iter().flat_map(|p| p.1.clone()).collect();
            let failing_reps = reps.iter().filter(|&&i| b[i].source == "fail").count() as u64;
            prop_assert_eq!(census.kernels_failed, failing_reps);
            prop_assert_eq!(census.kernels_compiled, reps.len() as u64 - failing_reps);
            prop_assert_eq!(census.kernels_reused, pre.iter().filter(|p| **p).count() as u64);
            prop_assert_eq!(outcomes.len(), b.len());
            for (i, (k, o)) in b.iter().zip(&outcomes).enumerate() {
                let rep = b.iter().position(|r| r.key == k.key).unwrap();
                if k.source == "fail" {
                    let e = o.as_ref().unwrap_err();
                    prop_assert!(e.is_alone());
                    prop_assert_eq!(&e.compile_failure().unwrap().symbols, &vec![b[rep].symbol.clone()]);
                    prop_assert!(cache.find(&k.key).is_none());
                    continue;
                }
                let a = o.as_ref().unwrap();
                prop_assert!(cache.find(&k.key).is_some());
                if pre[i] {
                    prop_assert!(Arc::ptr_eq(&a.program, &old));
                    continue;
                }
                prop_assert_eq!(&*a.symbol, b[rep].symbol.as_str());
                prop_assert_eq!(&a.program.options, &k.options);
                prop_assert!(a.program.kernels.contains(&(b[rep].symbol.clone(), k.source.clone())));
                prop_assert!(a.program.kernels.iter().all(|(_, t)| t != "fail"));
            }
        }
    }
}
