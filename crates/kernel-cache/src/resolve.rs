//! The compile driver: a [`Resolver`] (cache, backend, optional kernel store, split)
//! answers a batch per kernel ([`Resolver::resolve`]) or strictly
//! ([`Resolver::resolve_strict`]), with the call's [`Census`] and store events.

use std::any::Any;
use std::collections::{HashMap, VecDeque};
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use crate::backend::{Backend, BatchKernel, Compiled, Group, Units};
use crate::cache::{KernelCache, Resolved, lock};
use crate::census::Census;
use crate::error::{CompileFailure, Error, KernelError};
use crate::partition::{Split, balanced, programs_for};
use crate::store::{CompileLocks, FailureMemory, HostPart, KernelStore, MissReason, StoreEvent};

/// One kernel's answer from a per-kernel resolve: its program and symbol, or why it has
/// none (shared, as an `Arc`, by the kernels it is the answer of).
pub type Outcome<P, E> = Result<Resolved<P>, Arc<KernelError<E>>>;

/// A per-kernel resolve's answers, one per kernel of the batch, in batch order.
pub type Outcomes<P, E> = Vec<Outcome<P, E>>;

/// What a resolve did and answered: one answer per kernel of the batch, in batch order
/// (an [`Outcome`] per kernel for [`Resolver::resolve`], a [`Resolved`] for
/// [`Resolver::resolve_strict`]), what it counted and what its kernel store did.
#[derive(Debug)]
pub struct Resolution<T> {
    /// One answer per kernel, in batch order.
    pub answers: Vec<T>,
    /// What this call found, compiled, loaded and failed.
    pub census: Census,
    /// What the kernel store did in this call, in order (empty without a store): every
    /// lookup's outcome (a miss with its [`MissReason`]), save, eviction and lock wait.
    pub events: Vec<StoreEvent>,
}

/// A resolve's configuration: the cache answered from and published to, the backend that
/// compiles, optionally the persistent kernel store under the cache, and how compiles
/// are cut into programs ([`Split`], by default [`Split::WHOLE`]: one program per option
/// list). Cheap to build: make one per call or keep one.
///
/// **Lookups and compiles.** Every kernel is first looked up without the compile lock.
/// If any missed, the cache's compile lock is taken, the misses are looked up again
/// (another thread may just have published them), then in the store if any, and the rest
/// are compiled there: one representative per distinct key (the first in batch order;
/// the others, its twins, share its answer), grouped by option list in order of first
/// appearance, each option list's representatives cut into
/// [`programs_for`]`(split, n)` programs of [`chunks`](crate::chunks)' sizes,
/// [`balanced`] by the backend's [`compile_cost`](Backend::compile_cost). Every program
/// is compiled on a thread of its own (the first on the calling thread), at most as many at
/// once as [`available_parallelism`](std::thread::available_parallelism) says, and they
/// are joined in batch order: each is published (and saved to the store, on a thread
/// of its own) once it and every earlier program returned, while later ones may still be
/// compiling. A program is published only after its compile returned, and a failed one
/// never. A thread that cannot be spawned compiles on the calling thread instead.
/// [`before_compile`](Backend::before_compile) runs under the lock ahead of the
/// compiles, also when nothing is left to compile (an all-hit batch takes the lock only
/// with [`always_lock`](Backend::always_lock)). Splitting changes neither a key nor what
/// a published value means: a kernel's program holds its own code under its own option
/// list, beside fewer companions.
///
/// **Symbols.** Kernels with different keys must have different symbols
/// ([`Error::DuplicateSymbol`]); a renderer that names every kernel alike (TVM's
/// `default_function_kernel`) renders kernel `i` under
/// [`segment_kernel_name`](canonical_text::segment_kernel_name)`(name, i)`, whose index
/// [`kernel_key`](crate::kernel_key) leaves out of the key.
///
/// **With a kernel store** ([`Resolver::store`]; used only for a backend with an
/// [`identity`](Backend::identity)), the keys the cache still misses are looked up in the
/// store (by identity, key and [`host_part`](Backend::host_part)) and
/// [loaded](Backend::load); the rest are compiled under the store's per-key compile locks
/// and [saved](Backend::save) once published. Nothing the store does fails the resolve:
/// its misses and warnings are the [`Resolution::events`].
///
/// **Panics** in backend code propagate (the cache stays consistent): the first in batch
/// order is resumed after every program that compiled was published and the resolve was
/// counted in the cache's statistics.
///
/// The crate docs show a resolver over a toy backend.
pub struct Resolver<'a, B: Backend> {
    cache: &'a KernelCache<B::Program>,
    backend: &'a B,
    store: Option<&'a KernelStore>,
    split: Split,
}

impl<B: Backend> Clone for Resolver<'_, B> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<B: Backend> Copy for Resolver<'_, B> {}

impl<'a, B: Backend> Resolver<'a, B> {
    /// Resolves into `cache` with `backend`: no store, [`Split::WHOLE`].
    pub fn new(cache: &'a KernelCache<B::Program>, backend: &'a B) -> Self {
        Resolver {
            cache,
            backend,
            store: None,
            split: Split::WHOLE,
        }
    }

    /// The same resolver with `store` (a `&KernelStore`, or an `Option` of one) under the
    /// cache (see the type's docs); `None` resolves without a store.
    pub fn store(mut self, store: impl Into<Option<&'a KernelStore>>) -> Self {
        self.store = store.into();
        self
    }

    /// The same resolver, cutting each option list's compiles by `split`.
    pub fn split(mut self, split: Split) -> Self {
        self.split = split;
        self
    }

    /// Answers every kernel of `batch` on its own: a kernel whose own unit fails to
    /// compile gets its own error, and every other kernel is compiled, published, saved
    /// and answered.
    ///
    /// The compiles go through [`compile_group_each`](Backend::compile_group_each), which
    /// compiles each kernel at most once and reports the kernels whose own unit failed:
    /// each is answered with [`KernelError::Unit`] holding that unit's error, and the
    /// program of the others is published and answers them (it never holds a failed
    /// kernel). A failure of a whole program answers every kernel of it with one
    /// [`KernelError::Program`]; a kernel the backend reported neither way is
    /// [`KernelError::Unreported`]. Kernels sharing a key share the outcome (one `Arc`).
    /// The call itself fails only when the batch is refused ([`Error::DuplicateSymbol`])
    /// or [`before_compile`](Backend::before_compile) fails.
    ///
    /// **Failures are not cached** in memory: nothing of a failed kernel is published or
    /// saved, so the next resolve of it compiles it again, unless the kernel store
    /// remembers it ([`FailureMemory`], written while its compile lock is held): then it
    /// is answered with [`KernelError::Remembered`] ([`Census::kernels_remembered_failed`]).
    /// Each failed representative counts in [`Census::kernels_failed`] and, in the cache's
    /// statistics, as a miss.
    ///
    /// cc-backend's crate docs show a tuning round with the real compiler.
    #[allow(clippy::type_complexity)]
    pub fn resolve(
        &self,
        batch: &[BatchKernel<B::Source>],
    ) -> Result<Resolution<Outcome<B::Program, B::Error>>, Error<B::Error>> {
        let (answers, census, events) = self.run(batch, Mode::Each);
        Ok(Resolution {
            answers: answers?,
            census,
            events,
        })
    }

    /// [`resolve`](Resolver::resolve) with the seed's semantics: the first failure in
    /// batch order (an error of [`compile_group`](Backend::compile_group), or a panic)
    /// fails the call. A failed program publishes nothing; every program that compiled
    /// is published (a later panic is counted in the error's
    /// [`later_panics`](CompileFailure::later_panics), the hook having reported it). No
    /// remembered failure is read or written.
    pub fn resolve_strict(
        &self,
        batch: &[BatchKernel<B::Source>],
    ) -> Result<Resolution<Resolved<B::Program>>, Error<B::Error>> {
        let (answers, census, events) = self.run(batch, Mode::Strict);
        let answers = answers?
            .into_iter()
            .map(|o| o.expect("a strict resolve answers every kernel with a program or fails"))
            .collect();
        Ok(Resolution {
            answers,
            census,
            events,
        })
    }

    /// The resolve in `mode`: its answers (or the error that failed it), and what it
    /// counted and recorded either way.
    #[allow(clippy::type_complexity)]
    fn run(
        &self,
        batch: &[BatchKernel<B::Source>],
        mode: Mode,
    ) -> (
        Result<Outcomes<B::Program, B::Error>, Error<B::Error>>,
        Census,
        Vec<StoreEvent>,
    ) {
        let level = (self.store).and_then(|store| {
            let identity = self.backend.identity()?;
            Some(StoreLevel::new(store, self.backend, identity, mode))
        });
        let level = level.as_ref();
        let mut census = Census::default();
        let answers = self.drive(batch, level, mode, &mut census);
        let events = level.map(|l| l.finish(&mut census)).unwrap_or_default();
        match answers {
            Ok(answers) => (answers, census, events),
            Err(panic) => resume_unwind(panic),
        }
    }

    /// Lookups, lock, re-lookup, representatives, store, programs, accounting. A panic
    /// in backend code is caught only to count this resolve and returned for resuming.
    #[allow(clippy::type_complexity)]
    fn drive(
        &self,
        batch: &[BatchKernel<B::Source>],
        level: Option<&StoreLevel<'_, B>>,
        mode: Mode,
        census: &mut Census,
    ) -> thread::Result<Result<Outcomes<B::Program, B::Error>, Error<B::Error>>> {
        let (cache, backend) = (self.cache, self.backend);
        if let Err(refused) = duplicate_symbol(batch) {
            return Ok(Err(refused));
        }
        let n = batch.len() as u64;
        let mut answers: Answers<B::Program, B::Error> = cache
            .lookup_many(batch.iter().map(|k| k.key.as_str()), cache.capacity())
            .into_iter()
            .map(|a| a.map(Ok))
            .collect();
        let mut reused = answers.iter().filter(|a| a.is_some()).count() as u64;
        census.resolves = 1;
        if reused == n && !backend.always_lock() {
            cache.count(reused, 0);
            census.kernels_reused = reused;
            return Ok(Ok(answers.into_iter().flatten().collect()));
        }

        let _compile_lock = lock(&cache.compile_lock);
        let capacity = cache.capacity();
        for (answer, kernel) in answers.iter_mut().zip(batch) {
            if answer.is_none() {
                *answer = cache.lookup(&kernel.key, capacity).map(Ok);
                reused += u64::from(answer.is_some());
            }
        }
        census.kernels_reused = reused;
        let outcome = catch_unwind(AssertUnwindSafe(|| {
            backend.before_compile().map_err(Error::BeforeCompile)?;
            let mut rep_of: HashMap<&str, usize> = HashMap::new();
            let (mut reps, mut twins) = (Vec::new(), Vec::new());
            for (i, kernel) in batch.iter().enumerate() {
                if answers[i].is_some() {
                    continue;
                }
                match rep_of.get(kernel.key.as_str()) {
                    Some(&rep) => twins.push((i, rep)),
                    None => {
                        rep_of.insert(&kernel.key, i);
                        reps.push(i);
                    }
                }
            }
            // The persistent level: load what it holds; lock the rest across processes
            // (held until the saves are done) and look again if another process held one.
            let mut _compile_locks = None;
            if let Some(level) = level
                && !reps.is_empty()
            {
                reps = load_from(cache, batch, level, reps, &mut answers, census);
                if !reps.is_empty() {
                    let (locks, waited) = level.lock(&keyed(batch, &reps));
                    _compile_locks = Some(locks);
                    if waited {
                        reps = load_from(cache, batch, level, reps, &mut answers, census);
                    }
                }
            }
            let programs = self.programs(batch, &reps);
            let result = self.compile_all(batch, level, mode, programs, &mut answers, census);
            // The failures of kernels that failed alone, remembered while their compile
            // locks are held (a process waiting for one then finds the failure).
            if let Some(level) = level {
                let failed: Vec<(&BatchKernel<B::Source>, &B::Error)> = (reps.iter())
                    .filter_map(|&i| match answers[i].as_ref()?.as_ref().err()?.as_ref() {
                        KernelError::Unit(f) => Some((&batch[i], &f.source)),
                        _ => None,
                    })
                    .collect();
                if !failed.is_empty() {
                    level.remember(&failed);
                }
            }
            result?;
            for (i, rep) in twins {
                answers[i] = answers[rep].clone();
            }
            Ok(())
        }));
        cache.count(reused, n - reused);
        Ok(outcome?.map(|()| {
            (answers.into_iter())
                .map(|a| a.expect("every kernel is a hit, a compiled representative or its twin"))
                .collect()
        }))
    }

    /// The programs `reps` compile as: grouped by option list in order of first
    /// appearance, each group cut by the split and balanced by compile cost.
    fn programs<'b>(
        &self,
        batch: &'b [BatchKernel<B::Source>],
        reps: &[usize],
    ) -> Vec<OptionGroup<'b>> {
        let mut group_of: HashMap<&[String], usize> = HashMap::new();
        let mut groups: Vec<OptionGroup<'b>> = Vec::new();
        for &i in reps {
            let options = batch[i].options.as_slice();
            let g = *group_of.entry(options).or_insert_with(|| {
                groups.push((options, Vec::new()));
                groups.len() - 1
            });
            groups[g].1.push(i);
        }
        let cost = |&i: &usize| self.backend.compile_cost(&batch[i].source);
        (groups.into_iter())
            .flat_map(|(options, reps)| {
                balanced(programs_for(self.split, reps.len()), &reps, cost)
                    .into_iter()
                    .map(move |program| (options, program))
            })
            .collect()
    }

    /// Compiles every program on a thread of its own and joins them in batch order,
    /// publishing (and saving) each that compiled, answering the kernels of each that
    /// failed (per kernel) or keeping the first failure (strict).
    #[allow(clippy::too_many_arguments)]
    fn compile_all(
        &self,
        batch: &[BatchKernel<B::Source>],
        level: Option<&StoreLevel<'_, B>>,
        mode: Mode,
        programs: Vec<OptionGroup<'_>>,
        answers: &mut Answers<B::Program, B::Error>,
        census: &mut Census,
    ) -> Result<(), Error<B::Error>> {
        let (cache, backend) = (self.cache, self.backend);
        let n_programs = programs.len();
        let groups: Vec<(Group<'_, B::Source>, Vec<usize>)> = (programs.into_iter().enumerate())
            .map(|(index, (options, idxs))| {
                (group_of(batch, index, n_programs, options, &idxs), idxs)
            })
            .collect();
        let compile = |group: &Group<'_, B::Source>| -> (Compile<B>, Duration) {
            let started = Instant::now();
            let ran = catch_unwind(AssertUnwindSafe(|| match mode {
                Mode::Strict => backend.compile_group(group).map(|program| Units {
                    program: Some(program),
                    failed: Vec::new(),
                }),
                Mode::Each => backend.compile_group_each(group),
            }));
            (ran, started.elapsed())
        };
        // The first failure in batch order, error or panic, is what a strict resolve
        // reports; a per-kernel resolve answers errors per kernel and resumes the first panic.
        let mut first: Option<Failure<B::Error>> = None;
        let mut later_panics = 0;
        let mut save_panic: Option<Box<dyn Any + Send>> = None;
        // At most as many compiles at once as the machine runs threads: program `j` (the
        // first on this thread) is joined while the next `width - 1` compile.
        let width = thread::available_parallelism().map_or(1, usize::from);
        thread::scope(|scope| {
            let compile = &compile;
            let spawn = |j: usize| {
                let group = &groups[j].0;
                (thread::Builder::new().name(format!("kcache-compile-{j}")))
                    .spawn_scoped(scope, move || compile(group))
                    .ok()
            };
            let mut handles: VecDeque<_> = (1..n_programs.min(width)).map(spawn).collect();
            let mut saves = Vec::new();
            for (j, (group, idxs)) in groups.iter().enumerate() {
                let handle = if j == 0 {
                    None
                } else {
                    handles.pop_front().flatten()
                };
                // `compile` catches the backend's panics: a join error is not one of them.
                let (ran, took) = match handle {
                    Some(handle) => handle.join().unwrap_or_else(|p| (Err(p), Duration::ZERO)),
                    None => compile(group),
                };
                if j + width < n_programs {
                    handles.push_back(spawn(j + width));
                }
                let failure = |source, symbols| CompileFailure {
                    program: j,
                    programs: n_programs,
                    symbols,
                    source,
                    later_panics: 0,
                };
                let Units { program, failed } = match ran {
                    Err(panic) => {
                        match first {
                            Some(_) => later_panics += 1,
                            None => first = Some(Failure::Panic(panic)),
                        }
                        continue;
                    }
                    Ok(Err(source)) => {
                        let failure = failure(source, symbols(group));
                        match mode {
                            Mode::Each => {
                                fail_all(idxs, KernelError::Program(failure), answers, census)
                            }
                            Mode::Strict if first.is_none() => {
                                first = Some(Failure::Error(failure))
                            }
                            Mode::Strict => {}
                        }
                        continue;
                    }
                    Ok(Ok(units)) => units,
                };
                let mut alone = vec![false; idxs.len()];
                for (position, source) in failed {
                    // A position out of range or given again is ignored (see `Units`).
                    if position >= idxs.len() || alone[position] {
                        continue;
                    }
                    alone[position] = true;
                    let symbols = vec![group.kernels[position].symbol.clone()];
                    let error = KernelError::Unit(failure(source, symbols));
                    fail_all(&idxs[position..=position], error, answers, census);
                }
                let rest: Vec<usize> = (idxs.iter().zip(&alone))
                    .filter_map(|(&i, &a)| (!a).then_some(i))
                    .collect();
                if rest.is_empty() {
                    continue;
                }
                let Some(compiled) = program else {
                    for &i in &rest {
                        let symbol = batch[i].symbol.clone();
                        let error = KernelError::Unreported { symbol, program: j };
                        fail_all(&[i], error, answers, census);
                    }
                    continue;
                };
                let held = group_of(batch, j, n_programs, group.options, &rest);
                let program = publish(cache, &held, &rest, compiled, answers, census);
                if let Some(level) = level {
                    // The `(key, symbol)`s the save is for.
                    let kernels: Vec<(&str, &str)> = (held.kernels.iter())
                        .map(|k| (k.key.as_str(), k.symbol.as_str()))
                        .collect();
                    let options = group.options;
                    let task = {
                        let (program, kernels) = (Arc::clone(&program), kernels.clone());
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
}

/// Whether a failing kernel fails the whole resolve (the seed's semantics) or alone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Strict,
    Each,
}

/// A program's compile: the kernels that failed alone and the program of the others,
/// the program's error, or the panic it raised.
type Compile<B> = thread::Result<
    Result<Units<<B as Backend>::Program, <B as Backend>::Error>, <B as Backend>::Error>,
>;

/// The first failure of a resolve's compiles, in batch order.
enum Failure<E: std::error::Error + 'static> {
    Error(CompileFailure<E>),
    Panic(Box<dyn Any + Send>),
}

/// An option list and the batch indices of the representatives compiled under it.
type OptionGroup<'a> = (&'a [String], Vec<usize>);

/// Per kernel: the outcome, once known.
type Answers<P, E> = Vec<Option<Outcome<P, E>>>;

/// A loaded program and its weight.
type Weighed<P> = (Arc<P>, u64);

/// A loaded program, its weight and the entries it answers.
type LoadedGroup<P> = (Arc<P>, u64, Vec<(String, Resolved<P>)>);

/// A kernel key and the option list its kernel compiles under.
type Keyed<'a> = (&'a str, &'a [String]);

fn keyed<'a, S>(batch: &'a [BatchKernel<S>], idxs: &[usize]) -> Vec<Keyed<'a>> {
    (idxs.iter())
        .map(|&i| (batch[i].key.as_str(), batch[i].options.as_slice()))
        .collect()
}

/// What the persistent level holds for one key.
enum Looked<P> {
    /// A loaded program (shared by the keys of one blob), its weight and the symbol.
    Found(Arc<P>, u64, String),
    /// The kernel's remembered failure: its message.
    Failed(String),
    /// Nothing usable.
    Missing,
}

/// The kernel store as one resolve uses it.
struct StoreLevel<'a, B> {
    /// The store, for this resolve: its lock waits draw on one budget, and it keeps the
    /// resolve's events.
    store: KernelStore,
    backend: &'a B,
    identity: String,
    /// The backend's host part per option list, asked once in this resolve (an error as
    /// its message), so the lookup, the lock and the save of a key name one entry.
    hosts: Mutex<HashMap<Vec<String>, Result<HostPart, String>>>,
    /// What this resolve does with remembered failures (a strict resolve: `Off`).
    failures: FailureMemory,
}

impl<'a, B: Backend> StoreLevel<'a, B> {
    /// The level of a strict resolve (`mode` `Strict`: no remembered failure is read or
    /// written) or a per-kernel one (as the store's [`FailureMemory`] says).
    fn new(store: &'a KernelStore, backend: &'a B, identity: String, mode: Mode) -> Self {
        StoreLevel {
            store: store.for_resolve(),
            backend,
            identity,
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

impl<B: Backend> StoreLevel<'_, B> {
    /// Per key: the loaded program (shared by the keys of one blob), its weight and the
    /// symbol; or the kernel's remembered failure; or nothing.
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
                        Some(Ok(c)) => Ok((Arc::new(c.program), c.weight)),
                        Some(Err(e)) => {
                            if !self.backend.keeps_saved(&e) {
                                self.store.remove_blob(&blob.blob);
                            }
                            Err(e.to_string())
                        }
                        None => Err("the backend does not load programs".to_string()),
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

    /// Remembers the failures of kernels that failed alone which the backend calls their
    /// own (per-kernel resolves only).
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

    /// Takes the compile locks of `keys`; whether any was held by another process.
    fn lock(&self, keys: &[Keyed<'_>]) -> (CompileLocks, bool) {
        // A key whose host part the backend cannot tell has no entry name, so no lock:
        // it is compiled without one (as when its lock file cannot be opened).
        let keys: Vec<(&str, HostPart)> = keys
            .iter()
            .filter_map(|&(key, options)| Some((key, self.host(options).ok()?)))
            .collect();
        self.store.compile_locks(&self.identity, &keys)
    }

    /// Saves a program compiled under `options` in `took` for its `(key, symbol)`s.
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
                return self.store.note_save_failure(kernels, &why);
            }
        };
        match self.backend.save(program) {
            Some(Ok(saved)) => self.store.save(&self.identity, host, &saved, kernels, took),
            Some(Err(e)) => self.store.note_save_failure(kernels, &e.to_string()),
            None => (self.store).note_save_failure(kernels, "the backend does not save programs"),
        }
    }

    /// Adds what this resolve's waits for the store's locks came to to `census`; the
    /// store's events, in order.
    fn finish(&self, census: &mut Census) -> Vec<StoreEvent> {
        let (timeouts, skips, events) = self.store.finish_resolve();
        census.store_lock_timeouts += timeouts;
        census.store_lock_skips += skips;
        events
    }
}

/// The first pair of kernels (in batch order of the later one) with different keys and
/// one symbol, as the refusal [`Error::DuplicateSymbol`].
fn duplicate_symbol<S, E: std::error::Error + 'static>(
    batch: &[BatchKernel<S>],
) -> Result<(), Error<E>> {
    let mut seen: HashMap<&str, usize> = HashMap::with_capacity(batch.len());
    for (second, kernel) in batch.iter().enumerate() {
        // One hash of the symbol per kernel (this runs on every resolve, hits included).
        let first = *seen.entry(kernel.symbol.as_str()).or_insert(second);
        if first != second && batch[first].key != kernel.key {
            let symbol = kernel.symbol.clone();
            return Err(Error::DuplicateSymbol {
                symbol,
                first,
                second,
            });
        }
    }
    Ok(())
}

/// Looks `reps` up in the persistent level; publishes each program found as one group
/// and answers its representatives, and answers those whose failure the level remembers
/// with it ([`KernelError::Remembered`]). Returns the representatives still missing.
fn load_from<B: Backend>(
    cache: &KernelCache<B::Program>,
    batch: &[BatchKernel<B::Source>],
    level: &StoreLevel<'_, B>,
    reps: Vec<usize>,
    answers: &mut Answers<B::Program, B::Error>,
    census: &mut Census,
) -> Vec<usize> {
    let found = level.find(&keyed(batch, &reps));
    let mut missing = Vec::new();
    // One group per loaded program, in order of first appearance.
    let mut programs: Vec<LoadedGroup<B::Program>> = Vec::new();
    for (&i, hit) in reps.iter().zip(found) {
        let (program, weight, symbol) = match hit {
            Looked::Found(program, weight, symbol) => (program, weight, symbol),
            Looked::Failed(message) => {
                let symbol = batch[i].symbol.clone();
                let error = KernelError::Remembered { symbol, message };
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

/// Publishes `compiled` as one group in the memory cache and answers its
/// representatives; returns the program.
fn publish<P: Send + Sync + 'static, S, E: std::error::Error + 'static>(
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

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    //! The driver's bookkeeping, checked with a backend that "compiles" a group into the
    //! list of its kernels' texts (so every answer can be checked against its source).
    use super::*;
    use crate::SavedProgram;
    use crate::partition::chunks;
    use proptest::prelude::*;
    use std::sync::atomic::Ordering;

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
        fn compile_cost(&self, source: &String) -> u64 {
            if self.costs_by_length {
                source.len() as u64
            } else {
                1
            }
        }
    }

    impl Lister {
        /// A resolver of `self` into `cache`, cut by `self.split` (else whole).
        fn resolver<'a>(&'a self, cache: &'a KernelCache<Listing>) -> Resolver<'a, Self> {
            Resolver::new(cache, self).split(self.split.unwrap_or(Split::WHOLE))
        }
    }

    /// A program's option list: its option list and `(symbol, source)`s.
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

    /// What a [`Faulty`] program does.
    #[derive(Clone, Copy, Debug, PartialEq)]
    enum Fault {
        Fail,
        Panic,
    }

    /// A backend whose program holding kernel text `t` fails or panics as `faults` says
    /// for `t` (each program here holds one kernel: cut by [`ONE_EACH`]).
    struct Faulty {
        faults: Vec<(&'static str, Fault)>,
    }

    /// One program per kernel, up to eight.
    const ONE_EACH: Split = Split::new(8, 1);

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
            let text = &g.kernels[0].source;
            match self.faults.iter().find(|(t, _)| t == text).map(|f| f.1) {
                Some(Fault::Fail) => Err(Refused),
                Some(Fault::Panic) => panic!("{text} panics"),
                None => Ok(first_text(g)),
            }
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
            lister
                .resolver(&KernelCache::new(1 << 20))
                .resolve_strict(&batch)
                .unwrap();
            // Compiled at once: in any order.
            let mut compiled: Vec<Vec<String>> =
                lock(&lister.compiles).iter().map(|c| c.1.clone()).collect();
            compiled.sort();
            assert_eq!(compiled, want, "costs by length: {by_length}");
        }
    }

    /// A backend, one kernel per program (as [`Faulty`] without faults), that saves its
    /// programs (each its one kernel's text) and records the saves; its save of
    /// `panics_on` panics, and with `waits`, its compile of `t1` waits (at most a minute)
    /// for the save of `t0`'s program.
    #[derive(Default)]
    struct Saves {
        saved: Mutex<Vec<String>>,
        changed: std::sync::Condvar,
        panics_on: Option<&'static str>,
        waits: bool,
        saw_first_saved: std::sync::atomic::AtomicBool,
    }

    impl Backend for Saves {
        type Source = String;
        type Program = String;
        type Error = Refused;
        fn compile_group(&self, g: &Group<'_, String>) -> Result<Compiled<String>, Refused> {
            if self.waits && g.kernels[0].source == "t1" {
                let saved = lock(&self.saved);
                let (saved, _) = (self.changed)
                    .wait_timeout_while(saved, Duration::from_secs(60), |s| {
                        !s.iter().any(|p| p == "t0")
                    })
                    .unwrap_or_else(|e| e.into_inner());
                let seen = saved.iter().any(|p| p == "t0");
                self.saw_first_saved.store(seen, Ordering::SeqCst);
            }
            Ok(first_text(g))
        }
        fn identity(&self) -> Option<String> {
            Some("saves 1".into())
        }
        fn save(&self, program: &String) -> Option<Result<SavedProgram, Refused>> {
            if self.panics_on == Some(program.as_str()) {
                panic!("the save of {program} panics");
            }
            lock(&self.saved).push(program.clone());
            self.changed.notify_all();
            let symbols = vec![format!("s{}", &program[1..])];
            Some(Ok(SavedProgram {
                bytes: program.clone().into_bytes(),
                symbols,
            }))
        }
    }

    /// A resolve publishes and saves each program once its own compile (and every
    /// earlier one's) returned, while later programs still compile: the save of the
    /// first program is seen from the second's compile. Every program is saved and
    /// answered.
    #[test]
    fn a_program_is_saved_while_a_later_one_still_compiles() {
        let backend = Saves {
            waits: true,
            ..Saves::default()
        };
        let batch = texts(3);
        let dir = tempfile::tempdir().unwrap();
        let store = KernelStore::new(dir.path().join("kernels"));
        let cache = KernelCache::new(1 << 20);
        let resolver = Resolver::new(&cache, &backend)
            .store(&store)
            .split(ONE_EACH);
        let resolution = resolver.resolve_strict(&batch).unwrap();
        assert!(
            backend.saw_first_saved.load(Ordering::SeqCst),
            "the first program was not saved while the second compiled"
        );
        let mut saved = lock(&backend.saved).clone();
        saved.sort();
        assert_eq!(saved, ["t0", "t1", "t2"]);
        for (a, k) in resolution.answers.iter().zip(&batch) {
            assert_eq!(a.program.as_str(), k.source);
        }
    }

    /// A panic in a save (run on a thread of its own) reaches the caller, after every
    /// program was finished and published.
    #[test]
    fn a_panic_in_a_save_reaches_the_caller() {
        let backend = Saves {
            panics_on: Some("t0"),
            ..Saves::default()
        };
        let batch = texts(3);
        let dir = tempfile::tempdir().unwrap();
        let store = KernelStore::new(dir.path().join("kernels"));
        let cache = KernelCache::new(1 << 20);
        let resolver = Resolver::new(&cache, &backend)
            .store(&store)
            .split(ONE_EACH);
        let out = catch_unwind(AssertUnwindSafe(|| resolver.resolve_strict(&batch)));
        assert!(out.is_err(), "the save's panic reaches the caller");
        for k in &batch {
            assert!(cache.find(&k.key).is_some(), "{} was published", k.key);
        }
        let mut saved = lock(&backend.saved).clone();
        saved.sort();
        assert_eq!(saved, ["t1", "t2"]);
    }

    /// A panic in a program's compile takes its place in batch order as an error does: an
    /// earlier error is what the strict resolve reports (the panic counted in
    /// `later_panics`), an earlier panic is resumed, and every program that succeeded is
    /// published either way.
    #[test]
    fn a_panic_waits_for_its_turn_in_batch_order() {
        let batch = texts(4);
        let cases = [
            vec![("t0", Fault::Fail), ("t2", Fault::Panic)],
            vec![("t1", Fault::Fail), ("t2", Fault::Panic)],
            vec![("t0", Fault::Fail), ("t3", Fault::Panic)],
        ];
        for faults in cases {
            let failing: Vec<&str> = faults.iter().map(|f| f.0).collect();
            let cache = KernelCache::new(1 << 20);
            let backend = Faulty {
                faults: faults.clone(),
            };
            let resolver = Resolver::new(&cache, &backend).split(ONE_EACH);
            let out = catch_unwind(AssertUnwindSafe(|| resolver.resolve_strict(&batch)));
            let Ok(Err(Error::Compile(failure))) = out else {
                panic!("{faults:?}: the earlier error must be reported, not the later panic");
            };
            assert_eq!(
                failure.program,
                batch.iter().position(|k| k.source == faults[0].0).unwrap()
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
        // An earlier panic is resumed, after the later successes were published.
        let cache = KernelCache::new(1 << 20);
        let backend = Faulty {
            faults: vec![("t1", Fault::Panic), ("t2", Fault::Fail)],
        };
        let resolver = Resolver::new(&cache, &backend).split(ONE_EACH);
        let out = catch_unwind(AssertUnwindSafe(|| resolver.resolve_strict(&batch)));
        assert!(out.is_err(), "the earlier panic reaches the caller");
        assert!(cache.find("k0").is_some() && cache.find("k3").is_some());
        assert!(cache.find("k1").is_none() && cache.find("k2").is_none());
    }

    /// In a per-kernel resolve, a program whose compile fails answers its kernels with a
    /// `KernelError::Program`, every other program is published, and the first panic in
    /// batch order is resumed after that (a later error no longer hides it).
    #[test]
    fn per_kernel_split_answers_each_failing_program_and_resumes_panics() {
        let batch = texts(4);
        {
            let cache = KernelCache::new(1 << 20);
            let backend = Faulty {
                faults: vec![("t1", Fault::Fail), ("t3", Fault::Fail)],
            };
            let resolution = Resolver::new(&cache, &backend)
                .split(ONE_EACH)
                .resolve(&batch)
                .unwrap();
            let (outcomes, census) = (resolution.answers, resolution.census);
            for (i, o) in outcomes.iter().enumerate() {
                match o {
                    Ok(a) => {
                        assert!(i == 0 || i == 2, "{i}");
                        assert_eq!(*a.program, format!("t{i}"));
                    }
                    Err(e) => {
                        assert!(i == 1 || i == 3, "{i}");
                        assert!(matches!(&**e, KernelError::Program(f)
                            if f.program == i && f.symbols == [format!("s{i}")]));
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
            faults: vec![("t0", Fault::Fail), ("t2", Fault::Panic)],
        };
        let resolver = Resolver::new(&cache, &backend).split(ONE_EACH);
        let out = catch_unwind(AssertUnwindSafe(|| resolver.resolve(&batch)));
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
            let (result, census, _) = lister.resolver(&cache).run(&b, Mode::Strict);
            let result = result.map(|o| o.into_iter().map(|a| a.unwrap()).collect::<Vec<_>>());
            let expected = expected_programs(&b, &pre, split);
            let mut compiles = lock(&lister.compiles).clone();
            let fails = |p: &(Vec<String>, Vec<usize>)| p.1.iter().any(|&i| b[i].source == "fail");
            let first_failing = expected.iter().position(fails);

            // Every program is compiled (each on a thread of its own: in any order), the
            // failing ones too.
            prop_assert_eq!(compiles.len(), expected.len());
            let order = |c: &(Vec<String>, Vec<String>)| {
                expected.iter().position(|p| c.1.first() == p.1.first().map(|&i| &b[i].symbol))
            };
            compiles.sort_by_key(order);
            for ((options, symbols), (eo, eidx)) in compiles.iter().zip(&expected) {
                prop_assert_eq!(options, eo);
                let want: Vec<String> = eidx.iter().map(|&i| b[i].symbol.clone()).collect();
                prop_assert_eq!(symbols, &want);
            }
            prop_assert_eq!(census.kernels_reused, pre.iter().filter(|p| **p).count() as u64);

            // Published: every program that compiled, never one that failed.
            for (p, prog) in expected.iter().enumerate() {
                let published = !fails(prog);
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
        /// grouping (cut by the split) is compiled once, whatever fails; a
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
            let resolution = lister.resolver(&cache).resolve(&b).unwrap();
            let (outcomes, census) = (resolution.answers, resolution.census);
            let expected = expected_programs(&b, &pre, split);
            let mut compiles = lock(&lister.compiles).clone();
            let order = |c: &(Vec<String>, Vec<String>)| {
                expected.iter().position(|p| c.1.first() == p.1.first().map(|&i| &b[i].symbol))
            };
            compiles.sort_by_key(order);
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
