//! The autotuning search and the replay of stored winners.

use std::collections::{BTreeMap, HashSet};
use std::path::PathBuf;
use std::time::Instant;

use canonical_text::segment_kernel_name;
use cc_backend::{Arg, CcBackend, CcProgram, Elem, Extent, Kernel, Signature, Source};
use kernel_cache::store::KernelStore;
use kernel_cache::{BatchKernel, KernelCache, Names, Resolver, Split};
use memo_cache::{Key, KeyBuilder, Table, Value, try_fetch_or_put};
use reference_ir::ir::Precision;
use reference_ir::render::{
    Naming, Param as RenderParam, ParamKind, Rendered, render, segments, signature_of,
};
use reference_ir::schedule::{ReferenceLanguage, SavedRefOp, Schedule, apply_ops};
use schedule_cache::{
    CompleteIdentity, Config, Limits, Measurements, Miss, Registry, SavedSchedule, ScheduleCache,
    ScheduleEntry, SeedOrigin, Subject, SymRef, TimingIdentity, Toolchain, digest_completeness,
    to_saved,
};
use schedule_cache::{
    DiskCache, NodeId, Placement, RedisStore, StoreOutcome, StorePolicy, TwoLevel,
};

use crate::DemoOptions;
use crate::error::DemoError;
use crate::kernels::{Binding, Built, Routine};
use crate::keys::{KeyMode, verbatim_key};
use crate::report::{ColdComparison, KernelReport, Origin, Seeding, Totals, count};

/// Bumped whenever the renderer's output changes for the same code: it enters the
/// codegen key component, so winners stored under another renderer never replay.
const RENDERER_VERSION: &str = "schedule-cache-render-minted-2";

/// The backend name in disk keys.
const BACKEND_NAME: &str = "cc";

/// The least duration of one timed sample (a candidate is run repeatedly within it).
const SAMPLE_SECONDS: f64 = 200e-6;

/// How many round-1 leaders round 2 explores around.
const LEADERS: usize = 3;

/// The most ops a stored winner may have to be replayed (the demo's schedules have at
/// most 6): an entry of more was written by something else, and is a miss. (The library
/// bounds what any entry can do on its own: at most `MAX_SAVED_OPS` ops, loops nested at
/// most `schedule::MAX_NEST_DEPTH` deep, so a foreign entry of thousands of splits no
/// longer overflows the stack; this cap keeps the demo's replays to the shapes it makes.)
pub(crate) const MAX_REPLAY_OPS: usize = 64;

/// The most bytes of C (prelude and text, over its kernels) a replayed winner may render
/// to (the demo's schedules render to at most about 10 KB): unrolled loops are copied, so
/// a foreign entry that unrolls every loop renders a copy per iteration, megabytes the
/// compiler would chew on for minutes. More is a miss.
pub(crate) const MAX_REPLAY_C_BYTES: usize = 256 << 10;

/// A measured candidate (what the memo table stores).
#[derive(Clone, Debug)]
pub(crate) struct Measurement {
    /// Median time of one run of all the candidate's kernels, in seconds.
    pub(crate) median: f64,
    /// Every timed sample (the mean time of one run within the sample), in seconds.
    pub(crate) times: Vec<f64>,
    /// Largest relative error against the Rust reference.
    pub(crate) error: f32,
    /// Whether the output matched the reference within tolerance.
    pub(crate) correct: bool,
}

/// Everything one demo run shares: the real backend, the in-process kernel cache, the
/// configuration and key inputs, the disk cache and the counters.
pub(crate) struct Session<'t> {
    pub(crate) backend: CcBackend,
    pub(crate) cache: KernelCache<CcProgram>,
    /// The persistent kernel store under the cache directory, unless disabled.
    pub(crate) kernel_store: Option<KernelStore>,
    /// Where to write the stream of kernels resolved (see `DemoOptions::dump_kernels`).
    pub(crate) dump_kernels: Option<PathBuf>,
    /// Kernels written to the dump directory so far.
    pub(crate) dumped: u64,
    pub(crate) compiler_options: Vec<String>,
    /// The schedule cache's front door, built once from the regime.
    pub(crate) schedules: ScheduleCache<ReferenceLanguage, Schedules>,
    pub(crate) memo: Option<&'t Table<Key, Measurement>>,
    /// How kernels are keyed.
    pub(crate) keys: KeyMode,
    /// The verbatim keys of every kernel resolved so far (what a verbatim-keyed cache
    /// would hold), to count its compiles over the same stream in either mode.
    pub(crate) verbatim_seen: HashSet<String>,
    pub(crate) progress: bool,
    pub(crate) reps: usize,
    pub(crate) round1: usize,
    pub(crate) round2: usize,
    /// Start searches from the cache's seeds.
    pub(crate) seeding: bool,
    /// Compare each seeded search with a cold one.
    pub(crate) compare_cold: bool,
    /// Candidates of the current search that failed to compile (skipped).
    pub(crate) failures: Vec<Failure>,
    /// Routines whose stored winner was found but could not be used: their new winner
    /// replaces it whatever its time (under keep-faster a faster broken entry would stay).
    pub(crate) unusable_stored: HashSet<String>,
    pub(crate) totals: Totals,
}

/// The compiler options the renderer asks for, from the configuration. Run under
/// schedule-cache's digest-completeness guard: every setting consulted here must be
/// declared with the key component it enters.
pub(crate) fn compiler_options(config: &Config) -> Vec<String> {
    let mut options = vec![
        // Keep float results reproducible, so outputs can be checked against Rust.
        "-ffp-contract=off".to_string(),
        // Honour the renderer's `#pragma omp simd` without linking OpenMP.
        "-fopenmp-simd".to_string(),
    ];
    if config.get("numerics.fast_math") == Some("true") {
        options.push("-ffast-math".to_string());
    }
    options
}

fn vector_bytes() -> u32 {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx512f") {
            return 64;
        }
        if std::arch::is_x86_feature_detected!("avx2") {
            return 32;
        }
    }
    16
}

/// The demo's schedule store: the cache directory, with a Redis server behind it under
/// `--redis`.
pub(crate) type Schedules = TwoLevel<DiskCache, RedisStore>;

impl<'t> Session<'t> {
    pub(crate) fn new(
        backend: CcBackend,
        disk: Schedules,
        memo: Option<&'t Table<Key, Measurement>>,
        options: &DemoOptions,
    ) -> Result<Session<'t>, DemoError> {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        // Split compile on: up to one program per core, of at least 4 kernels each.
        let backend = backend.with_split(Split::new(cores, 4));
        let config = Config::new(reference_ir::render::reference_settings())
            .with(schedule_cache::TIMING_SETTING, "isolated");
        let mut compiler_options =
            digest_completeness(&config, compiler_options).map_err(|e| DemoError::Schedule {
                routine: "(configuration)".to_string(),
                source: e,
            })?;
        // The caller's own options: they enter the codegen component with the rest.
        compiler_options.extend(options.extra_options.iter().cloned());
        let compiler = backend.compiler_version().to_string();
        // The compiler and the options every kernel is compiled with: a flag change is a
        // miss that names it. The renderer's prelude follows from the code and the declared
        // settings (both keyed) and its version (the codegen tag).
        let toolchain = Toolchain::new(backend.identity(), &compiler_options);
        let limits = Limits {
            codegen_tag: RENDERER_VERSION.to_string(),
            worker_pool_tag: "single-thread".to_string(),
            max_threads: 1,
            vector_bytes: vector_bytes(),
            local_memory_bytes: 0,
            extra: BTreeMap::from([("arch".to_string(), std::env::consts::ARCH.to_string())]),
            toolchain: None,
        };
        let timing = TimingIdentity::this_cpu(Some(compiler));
        // Concurrent runs storing one kernel's winner leave the fastest, not the last.
        let schedules = ScheduleCache::new(ReferenceLanguage, BACKEND_NAME, timing, disk)
            .with_store_policy(StorePolicy::KeepFaster)
            .with_config(config)
            .with_limits(limits)
            .with_toolchain(toolchain);
        Ok(Session {
            backend,
            cache: KernelCache::new(256 << 20),
            kernel_store: options.kernel_store.then(|| {
                KernelStore::new(
                    options
                        .kernel_store_dir
                        .clone()
                        .unwrap_or_else(|| cache_dir::Layout::new(&options.cache_dir).kernels()),
                )
            }),
            dump_kernels: options.dump_kernels.clone(),
            dumped: 0,
            compiler_options,
            schedules,
            memo,
            keys: options.keys,
            verbatim_seen: HashSet::new(),
            progress: options.progress,
            reps: options.reps.clamp(1, crate::MAX_REPS),
            round1: options.round1.max(1),
            round2: options.round2,
            seeding: options.seeds,
            compare_cold: options.compare_cold,
            failures: Vec::new(),
            unusable_stored: HashSet::new(),
            totals: Totals::default(),
        })
    }

    fn say(&self, line: &str) {
        if self.progress {
            eprintln!("[kcache-demo] {line}");
        }
    }

    /// The placement classes of a routine's freshly built code (its parameters live on the
    /// device), which enter the code's identity.
    fn placements(built: &Built) -> BTreeMap<NodeId, Placement> {
        built
            .params
            .iter()
            .map(|(id, _)| (*id, Placement::OnDevice))
            .collect()
    }

    /// Renders the candidates' code (already scheduled) into one batch, one kernel per
    /// segment, named by its position in the batch, with the segment's nodes as its
    /// parameters. Returns, per candidate, the indices of its kernels.
    ///
    /// With `max_c_bytes`, a candidate whose kernels render to more bytes of C (prelude
    /// and text) is [`DemoError::Render`], found as each segment is rendered, before it is
    /// copied or keyed.
    fn render_batch(
        &self,
        routine: &Routine,
        codes: &[(&Built, &reference_ir::ir::Code)],
        batch: &mut Batch,
        max_c_bytes: Option<usize>,
    ) -> Result<Vec<Vec<usize>>, DemoError> {
        let mut owners = Vec::new();
        for (built, code) in codes {
            let mut mine = Vec::new();
            let mut c_bytes = 0;
            for segment in segments(code) {
                let symbol = segment_kernel_name(routine.name, batch.kernels.len());
                let params = signature_of(&segment, &[]);
                let config = self.schedules.config();
                let rendered = render(&segment, &symbol, &params, Naming::Minted, config)
                    .map_err(|e| DemoError::Render(e.to_string()))?;
                c_bytes += rendered.prelude.len() + rendered.text.len();
                if let Some(max) = max_c_bytes
                    && c_bytes > max
                {
                    return Err(DemoError::Render(format!(
                        "it renders to more than {max} bytes of C, the most the demo compiles"
                    )));
                }
                let bindings = params
                    .iter()
                    .map(|p| match p {
                        RenderParam::Node(n) => built
                            .params
                            .iter()
                            .find(|(id, _)| *id == n.id())
                            .map(|(_, b)| *b)
                            .ok_or_else(|| {
                                DemoError::Render(format!(
                                    "node {} is bound to no buffer",
                                    n.label()
                                ))
                            }),
                        RenderParam::Static(s) => {
                            Err(DemoError::Render(format!("static {s} has no argument")))
                        }
                    })
                    .collect::<Result<Vec<Binding>, DemoError>>()?;
                let source = Source {
                    prelude: rendered.prelude.clone(),
                    text: rendered.text.clone(),
                    signature: signature(&rendered)?,
                };
                let key = match self.keys {
                    KeyMode::Canonical => source.key(
                        &symbol,
                        &Names::new().with_bound(rendered.owned.iter().cloned()),
                        &self.compiler_options,
                        self.backend.identity(),
                    ),
                    KeyMode::Verbatim => {
                        verbatim_of(&source, &self.compiler_options, self.backend.identity())
                    }
                };
                mine.push(batch.kernels.len());
                batch.kernels.push(BatchKernel {
                    key,
                    options: self.compiler_options.clone(),
                    symbol,
                    source,
                });
                batch.bindings.push(bindings);
            }
            owners.push(mine);
        }
        Ok(owners)
    }

    /// Resolves a batch through the kernel cache with the real backend (split compile
    /// on, one outcome per kernel), counting what it compiled and reused. Returns, per
    /// kernel, the callable kernel or why it has none (its unit failed to compile: the
    /// compiler's first diagnostics): a kernel that fails fails alone, the batch's other
    /// kernels are compiled once and answered.
    fn resolve(
        &mut self,
        label: &str,
        whole: &Batch,
    ) -> Result<Vec<Result<Bound, String>>, DemoError> {
        let batch = &whole.kernels[..];
        self.dump(batch)?;
        let start = Instant::now();
        let resolved = Resolver::new(&self.cache, &self.backend)
            .store(self.kernel_store.as_ref())
            .split(self.backend.split())
            .resolve(batch);
        let seconds = start.elapsed().as_secs_f64();
        let (resolved, census) =
            resolved
                .map(|r| (r.answers, r.census))
                .map_err(|source| DemoError::Resolve {
                    routine: label.to_string(),
                    source,
                })?;
        // What a cache keyed by the exact text would have compiled of this batch.
        let identity = self.backend.identity();
        let verbatim_new = batch
            .iter()
            .filter(|k| {
                self.verbatim_seen
                    .insert(verbatim_of(&k.source, &k.options, identity))
            })
            .count() as u64;
        let t = &mut self.totals;
        t.verbatim_compiles += verbatim_new;
        t.kernels_rendered += batch.len() as u64;
        t.kernels_compiled += census.kernels_compiled;
        t.kernels_reused += census.kernels_reused;
        t.programs_compiled += census.programs_compiled;
        t.kernels_loaded += census.kernels_loaded;
        t.programs_loaded += census.programs_loaded;
        t.resolves += 1;
        if census.programs_compiled > 0 {
            t.compiling_resolves += 1;
        }
        t.compile_seconds += seconds;
        let twins = (batch.len() as u64).saturating_sub(
            census.kernels_compiled + census.kernels_reused + census.kernels_loaded,
        );
        self.say(&format!(
            "{label}: {} -> {} compiled in {} ({seconds:.2} s), {} loaded from the kernel store, {} reused from the kernel cache, {twins} renamed twins in the batch",
            count(batch.len() as u64, "kernel"),
            census.kernels_compiled,
            count(census.programs_compiled, "program"),
            census.kernels_loaded,
            census.kernels_reused,
        ));
        resolved
            .iter()
            .zip(&whole.bindings)
            .map(|(r, bindings)| match r {
                Ok(r) => Ok(Ok(Bound {
                    kernel: Kernel::from_resolved(r).map_err(DemoError::Backend)?,
                    bindings: bindings.clone(),
                })),
                Err(e) => {
                    // The compiler's first error line (else the error's first line).
                    let text = e.to_string();
                    let why = text
                        .lines()
                        .skip(1)
                        .find(|l| l.contains("error"))
                        .or_else(|| text.lines().next())
                        .unwrap_or("")
                        .trim();
                    Ok(Err(schedule_cache::admin::short(why)))
                }
            })
            .collect()
    }

    /// Appends the batch's kernels to the dump directory, if any.
    fn dump(&mut self, batch: &[BatchKernel<Source>]) -> Result<(), DemoError> {
        let Some(dir) = &self.dump_kernels else {
            return Ok(());
        };
        let io = |path: PathBuf| move |source| DemoError::Io { path, source };
        std::fs::create_dir_all(dir).map_err(io(dir.clone()))?;
        let options = dir.join("options");
        std::fs::write(&options, self.compiler_options.join("\n")).map_err(io(options))?;
        for kernel in batch {
            let path = dir.join(format!("{}.c", self.dumped));
            std::fs::write(&path, kernel.source.keyed_text()).map_err(io(path))?;
            self.dumped += 1;
        }
        Ok(())
    }

    /// Times a candidate (its kernels run in order on `data`), through the memo table:
    /// a candidate whose kernels were measured before (under any names) with the same
    /// buffers bound to their parameters is not re-run.
    fn measure(
        &mut self,
        routine: &Routine,
        keys: &[&str],
        kernels: &[Bound],
        data: &Data,
    ) -> Result<Measurement, DemoError> {
        let key = memo_key(routine, keys, kernels, self.reps, data.seed);
        let reps = self.reps;
        let tolerance = routine.tolerance;
        let start = Instant::now();
        let fetched = try_fetch_or_put(self.memo, key, || {
            run_and_time(kernels, data, reps, tolerance)
        })?;
        self.totals.measure_seconds += start.elapsed().as_secs_f64();
        if fetched.is_hit() {
            self.totals.memo_hits += 1;
        } else {
            self.totals.memo_misses += 1;
        }
        Ok(fetched.into_value())
    }

    /// Looks a routine's winner up on disk; on a hit, replays it on freshly built code.
    /// `Ok(Err(why))` says why no winner was found (the miss explained).
    pub(crate) fn try_replay(
        &mut self,
        routine: &Routine,
    ) -> Result<Result<Replay, String>, DemoError> {
        let built = (routine.build)();
        let placements = Self::placements(&built);
        let found = self
            .schedules
            .lookup(Subject::new(&built.code).with_placements(&placements))
            .map_err(|e| schedule_error(routine, e))?;
        self.totals.disk_lookups += 1;
        let hit = match found {
            Ok(hit) => hit,
            Err(Miss::Refused(refusal)) => {
                self.say(&format!("{}: disk cache refused ({refusal})", routine.name));
                return Ok(Err(format!("refused: {refusal}")));
            }
            Err(Miss::NoTiming) => {
                return Ok(Err("skipped: no timing identity, no key".to_string()));
            }
            Err(miss) => {
                self.say(&format!("{}: no winner on disk ({miss})", routine.name));
                return Ok(Err(format!("miss: {miss}")));
            }
        };
        // The front door replayed the entry behind its digest and key-component guards; its
        // ops may still not apply to the code (a corrupted or hand-edited entry): a miss,
        // searched again, and the new winner replaces the entry. (Counted as a disk hit
        // only once the replayed winner computes the right result.)
        if hit.ops.len() > MAX_REPLAY_OPS {
            let why = format!(
                "it has {} ops, more than the {MAX_REPLAY_OPS} the demo replays",
                hit.ops.len()
            );
            return Ok(Err(self.unusable(routine, &hit.key, &why)));
        }
        let code = match apply_ops(&hit.ops, &built.code) {
            Ok(code) => code,
            Err(e) => return Ok(Err(self.unusable(routine, &hit.key, &e.to_string()))),
        };
        let describe = describe(&hit.entry.schedule, &hit.identity, &built);
        self.say(&format!(
            "{}: replaying the winner stored at {}: {describe}",
            routine.name, hit.key
        ));
        Ok(Ok(Replay {
            built,
            code,
            entry: hit.entry,
            key: hit.key.as_str().to_string(),
            describe,
        }))
    }

    /// A stored winner found at `key` that cannot be used (`why`): said on the progress
    /// line, and returned as the miss the report shows (the routine is searched again).
    fn unusable(&mut self, routine: &Routine, key: &impl std::fmt::Display, why: &str) -> String {
        self.unusable_stored.insert(routine.name.to_string());
        let why = schedule_cache::admin::short(why);
        self.say(&format!(
            "{}: the winner stored at {key} cannot be used ({why}); searching again",
            routine.name
        ));
        format!("miss: the stored winner cannot be used: {why}")
    }

    /// Compiles the replayed winners in one batch, checks and times each, and reports, in
    /// order. A winner that cannot be rendered or computes a wrong result is `Err(why)`: a
    /// miss (the caller searches that routine again), never a failed run.
    pub(crate) fn finish_replays(
        &mut self,
        replays: Vec<(&Routine, Replay)>,
    ) -> Result<Vec<Result<KernelReport, String>>, DemoError> {
        if replays.is_empty() {
            return Ok(Vec::new());
        }
        let mut batch = Batch::default();
        let mut owners = Vec::new();
        for (routine, replay) in &replays {
            // One batch for every winner: segment names stay unique by position.
            let before = batch.kernels.len();
            let why = match self.render_batch(
                routine,
                &[(&replay.built, &replay.code)],
                &mut batch,
                Some(MAX_REPLAY_C_BYTES),
            ) {
                Ok(mut o) => {
                    owners.push(Ok(o.pop().unwrap_or_default()));
                    continue;
                }
                Err(DemoError::Render(why)) => format!("cannot render: {why}"),
                Err(e) => return Err(e),
            };
            // Nothing of this winner stays in the batch.
            batch.kernels.truncate(before);
            batch.bindings.truncate(before);
            owners.push(Err(self.unusable(routine, &replay.key, &why)));
        }
        let kernels = self.resolve("replayed winners", &batch)?;
        let mut reports = Vec::new();
        for ((routine, replay), mine) in replays.into_iter().zip(owners) {
            let mine = match mine {
                Ok(mine) => mine,
                Err(why) => {
                    reports.push(Err(why));
                    continue;
                }
            };
            let data = Data::new(routine);
            let keys: Vec<&str> = mine
                .iter()
                .map(|&i| batch.kernels[i].key.as_str())
                .collect();
            let ks = match bound_of(&kernels, &mine) {
                Ok(ks) => ks,
                Err(why) => {
                    reports.push(Err(self.unusable(
                        routine,
                        &replay.key,
                        &format!("it fails to compile: {why}"),
                    )));
                    continue;
                }
            };
            let m = self.measure(routine, &keys, &ks, &data)?;
            if !m.correct {
                reports.push(Err(self.unusable(
                    routine,
                    &replay.key,
                    &format!(
                        "it computes a wrong result (max relative error {:.2e})",
                        m.error
                    ),
                )));
                continue;
            }
            self.totals.disk_hits += 1;
            let stored = median(&replay.entry.times);
            let timing_note = crate::report::timing_note(
                &replay.entry.times,
                &m.times,
                crate::report::load_average(),
            );
            self.say(&format!(
                "{}: replayed winner runs in {} (stored: {})",
                routine.name,
                ms(m.median),
                stored.map_or("-".to_string(), ms)
            ));
            reports.push(Ok(KernelReport {
                name: routine.name.to_string(),
                description: routine.description.to_string(),
                origin: Origin::Replayed,
                candidates: 0,
                rejected: 0,
                kernels_rendered: mine.len(),
                baseline_seconds: replay.entry.baseline_time,
                best_seconds: m.median,
                stored_best_seconds: stored,
                timing_note,
                schedule: replay.describe,
                schedule_ron: replay
                    .entry
                    .schedule
                    .to_ron()
                    .map_err(|e| schedule_error(routine, e))?,
                key: replay.key,
                disk_lookup: "hit".to_string(),
                seeding: None,
                failed_to_compile: Vec::new(),
            }));
        }
        Ok(reports)
    }

    /// The two-round search (after the seeds' round when `seeds`): every candidate tried,
    /// in order, and what seeding did.
    fn explore(
        &mut self,
        routine: &Routine,
        data: &Data,
        seeds: bool,
    ) -> Result<Explored, DemoError> {
        self.failures.clear();
        let legal = legal_points(routine);
        let mut round1: Vec<Vec<usize>> = vec![vec![0; routine.space.len()]];
        let mut rest: Vec<&Vec<usize>> =
            legal.iter().filter(|p| p.iter().any(|&c| c != 0)).collect();
        shuffle(&mut rest, seed_of(routine.name));
        let seeded = if seeds {
            Some(self.seed_candidates(routine, &legal)?)
        } else {
            None
        };
        let seed_points: Vec<Vec<usize>> = seeded
            .iter()
            .flat_map(|(fresh, _)| fresh.iter().map(|f| f.point.clone()))
            .collect();
        let seed_trials = seeded.as_ref().map_or(0, |(fresh, _)| fresh.len());
        round1.extend(
            rest.into_iter()
                .filter(|p| !seed_points.contains(p))
                .take(self.round1.saturating_sub(1 + seed_trials))
                .cloned(),
        );
        self.say(&format!(
            "{}: searching {} legal schedules of {} ({} dims): round 1 tries {}",
            routine.name,
            legal.len(),
            routine.description,
            routine.space.len(),
            round1.len()
        ));
        let mut tried: Vec<Tried> = Vec::new();
        let mut seeding = None;
        if let Some((fresh, notes)) = seeded {
            if !fresh.is_empty() {
                self.measure_round(routine, "seeds", fresh, data, &mut tried)?;
            }
            seeding = Some(notes);
        }
        self.run_round(routine, "round 1", &round1, data, &mut tried)?;

        // Round 2: the neighbours of the round's leaders (one dimension changed). The
        // tuner does not remember what it measured: the memo table does.
        let mut leaders: Vec<&Tried> = tried
            .iter()
            .filter(|t| t.measurement.correct && t.point.len() == routine.space.len())
            .collect();
        leaders.sort_by(|a, b| a.measurement.median.total_cmp(&b.measurement.median));
        let mut round2: Vec<Vec<usize>> = Vec::new();
        'fill: for leader in leaders.iter().take(LEADERS) {
            for (d, (_, choices)) in routine.space.iter().enumerate() {
                for c in 0..choices.len() {
                    if round2.len() >= self.round2 {
                        break 'fill;
                    }
                    let mut p = leader.point.clone();
                    p[d] = c;
                    if legal.contains(&p) && !round2.contains(&p) {
                        round2.push(p);
                    }
                }
            }
        }
        if !round2.is_empty() {
            self.run_round(routine, "round 2", &round2, data, &mut tried)?;
        }
        if let Some(notes) = seeding.as_mut() {
            notes.trials = tried.len();
            notes.seeds_rejected = tried
                .iter()
                .filter(|t| t.seeded && !t.measurement.correct)
                .count();
            notes.seeds_failed = self.failures.iter().filter(|f| f.seeded).count();
        }
        Ok((tried, seeding, std::mem::take(&mut self.failures)))
    }

    /// Searches a routine's schedule space in two rounds and stores the winner on disk.
    /// With seeding on, the search starts from the seeds the schedule cache offers (each
    /// rebuilt on fresh code, applied, checked against the reference and measured in its own
    /// round before it can win; a seed that does not apply is dropped and reported); with
    /// `compare_cold`, an unseeded search of the same budget runs too (nothing of it stored)
    /// and both winners are re-measured side by side, interleaved.
    pub(crate) fn search(
        &mut self,
        routine: &Routine,
        disk_lookup: String,
    ) -> Result<KernelReport, DemoError> {
        let rendered_before = self.totals.kernels_rendered;
        let data = Data::new(routine);
        let (tried, mut seeding, failures) = self.explore(routine, &data, self.seeding)?;
        if tried.is_empty()
            && let Some(first) = failures.first()
        {
            return Err(DemoError::NothingCompiled {
                routine: routine.name.to_string(),
                first: first.why.clone(),
            });
        }
        if let Some(seeding) = seeding.as_mut()
            && self.compare_cold
        {
            seeding.cold = Some(self.compare_with_cold(routine, &data, &tried)?);
        }
        let candidates = tried.len();
        let rejected = tried.iter().filter(|t| !t.measurement.correct).count();
        let baseline = tried
            .iter()
            .find(|t| t.point.iter().all(|&c| c == 0) && t.measurement.correct)
            .map(|t| t.measurement.median);
        let winner = tried
            .into_iter()
            .filter(|t| t.measurement.correct)
            .min_by(|a, b| a.measurement.median.total_cmp(&b.measurement.median))
            .ok_or_else(|| DemoError::NoCorrectCandidate(routine.name.to_string()))?;
        if let Some(seeding) = seeding.as_mut() {
            seeding.winner_from_seed = winner.seeded;
        }

        // Save the winner against the code it was built on, and store it on disk.
        let placements = Self::placements(&winner.built);
        let subject = Subject::new(&winner.built.code).with_placements(&placements);
        let identity = subject.identity().map_err(|e| schedule_error(routine, e))?;
        let mut measurements = Measurements::new(winner.measurement.times.clone());
        measurements.baseline_time = baseline;
        let policy = if self.unusable_stored.contains(routine.name) {
            StorePolicy::LastWriteWins
        } else {
            self.schedules.store_policy()
        };
        let published = self
            .schedules
            .store_with_policy(subject, &winner.schedule.ops, measurements, policy)
            .map_err(|e| schedule_error(routine, e))?;
        let describe = describe(&published.saved, &identity, &winner.built);
        let schedule_ron = published
            .saved
            .to_ron()
            .map_err(|e| schedule_error(routine, e))?;
        let key = published.key;
        match published.outcome {
            StoreOutcome::Stored => self.totals.disk_stored += 1,
            StoreOutcome::Refused(r) => self.say(&format!(
                "{}: the disk cache refused the winner ({r})",
                routine.name
            )),
            StoreOutcome::KeptExisting(kept) => {
                self.totals.disk_kept_faster += 1;
                self.say(&format!(
                    "{}: kept the faster winner already stored (best time {} against this search's {})",
                    routine.name,
                    ms(kept.existing_time),
                    kept.new_time.map_or_else(|| "none".to_string(), ms)
                ));
            }
            StoreOutcome::Skipped => {}
            other => self.say(&format!("{}: the disk cache said {other:?}", routine.name)),
        }
        let speedup = baseline.map_or(String::new(), |b| {
            format!(
                " ({:.1}x over the unscheduled code)",
                b / winner.measurement.median
            )
        });
        self.say(&format!(
            "{}: winner {}{speedup}: {describe}",
            routine.name,
            ms(winner.measurement.median)
        ));
        Ok(KernelReport {
            name: routine.name.to_string(),
            description: routine.description.to_string(),
            origin: Origin::Searched,
            candidates,
            rejected,
            kernels_rendered: (self.totals.kernels_rendered - rendered_before) as usize,
            baseline_seconds: baseline,
            best_seconds: winner.measurement.median,
            stored_best_seconds: None,
            timing_note: None,
            schedule: describe,
            schedule_ron,
            key: key.map(|k| k.as_str().to_string()).unwrap_or_default(),
            disk_lookup,
            seeding,
            failed_to_compile: failures.iter().map(|f| f.why.clone()).collect(),
        })
    }

    /// The seeds the schedule cache offers for the routine's code, each rebuilt on fresh
    /// code and applied (a seed that does not rebuild or apply, or is beyond the replay caps,
    /// is dropped and named in the notes). At most [`MAX_SEED_TRIALS`] are kept.
    fn seed_candidates(
        &mut self,
        routine: &Routine,
        legal: &[Vec<usize>],
    ) -> Result<(Vec<Fresh>, Seeding), DemoError> {
        let built = (routine.build)();
        let placements = Self::placements(&built);
        let seeds = self
            .schedules
            .seeds(Subject::new(&built.code).with_placements(&placements))
            .map_err(|e| schedule_error(routine, e))?;
        let mut notes = Seeding {
            offered: seeds.seeds.len(),
            ..Seeding::default()
        };
        let mut fresh: Vec<Fresh> = Vec::new();
        let mut differing: Vec<schedule_cache::KeyComponent> = Vec::new();
        let mut near: Vec<String> = Vec::new();
        let mut same = 0;
        for seed in &seeds.seeds {
            if fresh.len() >= MAX_SEED_TRIALS {
                break;
            }
            let built = (routine.build)();
            let placements = Self::placements(&built);
            let subject = Subject::new(&built.code).with_placements(&placements);
            let origin = match seed.origin() {
                SeedOrigin::SameCode { .. } => "the same code".to_string(),
                SeedOrigin::NearCode { digest, .. } => near_label(routine, digest),
                other => format!("{other:?}"),
            };
            let candidate = match self.schedules.candidate(seed, subject) {
                Ok(c) => c,
                Err(dropped) => {
                    notes.dropped.push(format!("{origin}: {}", dropped.reason));
                    continue;
                }
            };
            if candidate.ops.len() > MAX_REPLAY_OPS {
                notes.dropped.push(format!(
                    "{origin}: {} ops, more than the {MAX_REPLAY_OPS} the demo replays",
                    candidate.ops.len()
                ));
                continue;
            }
            let code = match apply_ops(&candidate.ops, &built.code) {
                Ok(code) => code,
                Err(e) => {
                    notes.dropped.push(format!(
                        "{origin}: it no longer applies ({})",
                        schedule_cache::admin::short(&e.to_string())
                    ));
                    continue;
                }
            };
            // Beyond the rendered-C cap: dropped before anything is compiled.
            let mut scratch = Batch::default();
            if let Err(e) = self.render_batch(
                routine,
                &[(&built, &code)],
                &mut scratch,
                Some(MAX_REPLAY_C_BYTES),
            ) {
                notes.dropped.push(format!("{origin}: cannot render: {e}"));
                continue;
            }
            let point = point_of(routine, legal, &built, &candidate.ops).unwrap_or_default();
            if fresh.iter().any(|f| !point.is_empty() && f.point == point) {
                continue;
            }
            match seed.origin() {
                SeedOrigin::SameCode { differing: d } => {
                    same += 1;
                    for c in d {
                        if !differing.contains(c) {
                            differing.push(*c);
                        }
                    }
                }
                // Near code, and any kind of seed this demo does not know yet.
                _ => {
                    if !near.contains(&origin) {
                        near.push(origin.clone());
                    }
                }
            }
            fresh.push(Fresh {
                point,
                built,
                schedule: Schedule { ops: candidate.ops },
                code,
                seeded: true,
            });
        }
        differing.sort();
        let mut parts = Vec::new();
        if same > 0 {
            let names: Vec<&str> = differing.iter().map(|c| c.name()).collect();
            parts.push(format!(
                "{same} {} (differ in: {})",
                if same == 1 { "entry" } else { "entries" },
                names.join(", ")
            ));
        }
        parts.extend(near);
        notes.summary = if parts.is_empty() {
            "no seed".to_string()
        } else {
            format!("seeded from {}", parts.join(" and "))
        };
        notes.seed_trials = fresh.len();
        self.say(&format!(
            "{}: {} offered, {} measured first; {} dropped{}",
            routine.name,
            notes.summary,
            fresh.len(),
            notes.dropped.len(),
            notes
                .dropped
                .iter()
                .map(|d| format!("\n  dropped: {d}"))
                .collect::<String>()
        ));
        Ok((fresh, notes))
    }

    /// An unseeded search of the same budget (nothing of it stored), then both winners
    /// re-measured side by side, interleaved, in this process.
    fn compare_with_cold(
        &mut self,
        routine: &Routine,
        data: &Data,
        seeded: &[Tried],
    ) -> Result<ColdComparison, DemoError> {
        let (cold, _, _) = self.explore(routine, data, false)?;
        let best = |tried: &[Tried]| -> Option<usize> {
            tried
                .iter()
                .enumerate()
                .filter(|(_, t)| t.measurement.correct)
                .min_by(|a, b| a.1.measurement.median.total_cmp(&b.1.measurement.median))
                .map(|(i, _)| i)
        };
        let (Some(si), Some(ci)) = (best(seeded), best(cold.as_slice())) else {
            return Err(DemoError::NoCorrectCandidate(routine.name.to_string()));
        };
        let (s, c) = (&seeded[si], &cold[ci]);
        let mut scheduled = Vec::new();
        for t in [s, c] {
            scheduled.push(
                t.schedule
                    .apply(&t.built.code)
                    .map_err(|e| schedule_error(routine, e))?,
            );
        }
        let codes: Vec<(&Built, &reference_ir::ir::Code)> =
            vec![(&s.built, &scheduled[0]), (&c.built, &scheduled[1])];
        let cold_median = c.measurement.median;
        let mut batch = Batch::default();
        let owners = self.render_batch(routine, &codes, &mut batch, None)?;
        let kernels = self.resolve(&format!("{} side by side", routine.name), &batch)?;
        let compiled = |o: &Vec<usize>| {
            bound_of(&kernels, o).map_err(|why| {
                DemoError::Render(format!(
                    "a winner compared side by side failed to compile: {why}"
                ))
            })
        };
        let (ks, kc) = (compiled(&owners[0])?, compiled(&owners[1])?);
        // Both winners rendering to kernels of equal keys are one program (equal keys mean
        // the same object code): timing it twice would only compare noise, so it is timed
        // once and both sides get that time.
        let keys_of = |o: &Vec<usize>| -> Vec<&str> {
            o.iter().map(|&i| batch.kernels[i].key.as_str()).collect()
        };
        let same_program = keys_of(&owners[0]) == keys_of(&owners[1]);
        let (mut ts, mut tc) = (Vec::new(), Vec::new());
        for _ in 0..SIDE_BY_SIDE_ROUNDS {
            ts.push(run_and_time(&ks, data, self.reps, routine.tolerance)?.median);
            if !same_program {
                tc.push(run_and_time(&kc, data, self.reps, routine.tolerance)?.median);
            }
        }
        let seeded_seconds = median(&ts).unwrap_or(f64::INFINITY);
        let cold_seconds = if same_program {
            seeded_seconds
        } else {
            median(&tc).unwrap_or(f64::INFINITY)
        };
        // The first trial of the seeded search within 5% of the cold winner (times as the
        // searches measured them, in this process).
        let target = cold_median * 1.05;
        let trials_to_match = seeded
            .iter()
            .position(|t| t.measurement.correct && t.measurement.median <= target)
            .map(|i| i + 1);
        Ok(ColdComparison {
            cold_trials: cold.len(),
            trials_to_match,
            seeded_seconds,
            cold_seconds,
            same_program,
        })
    }

    fn run_round(
        &mut self,
        routine: &Routine,
        round: &str,
        points: &[Vec<usize>],
        data: &Data,
        tried: &mut Vec<Tried>,
    ) -> Result<(), DemoError> {
        let mut fresh = Vec::new();
        for point in points {
            // Each candidate is lowered anew: fresh symbols, fresh node ids, fresh names.
            let built = (routine.build)();
            let Some(schedule) = (routine.schedule)(&built, point) else {
                continue;
            };
            let code = schedule
                .apply(&built.code)
                .map_err(|e| schedule_error(routine, e))?;
            fresh.push(Fresh {
                point: point.clone(),
                built,
                schedule,
                code,
                seeded: false,
            });
        }
        self.measure_round(routine, round, fresh, data, tried)
    }

    /// Compiles the round's candidates in one batch, checks and times each, in order.
    fn measure_round(
        &mut self,
        routine: &Routine,
        round: &str,
        fresh: Vec<Fresh>,
        data: &Data,
        tried: &mut Vec<Tried>,
    ) -> Result<(), DemoError> {
        let codes: Vec<(&Built, &reference_ir::ir::Code)> =
            fresh.iter().map(|f| (&f.built, &f.code)).collect();
        let mut batch = Batch::default();
        let owners = self.render_batch(routine, &codes, &mut batch, None)?;
        let kernels = self.resolve(&format!("{} {round}", routine.name), &batch)?;
        let (hits_before, rejected_before) = (self.totals.memo_hits, tried.len());
        for (f, mine) in fresh.into_iter().zip(owners) {
            let Fresh {
                point,
                built,
                schedule,
                seeded,
                ..
            } = f;
            let keys: Vec<&str> = mine
                .iter()
                .map(|&i| batch.kernels[i].key.as_str())
                .collect();
            let ks = match bound_of(&kernels, &mine) {
                Ok(ks) => ks,
                Err(why) => {
                    // Reported and skipped: never measured, never a winner, never a failed run.
                    self.say(&format!(
                        "{}: candidate {} SKIPPED: it fails to compile: {why}",
                        routine.name,
                        candidate_label(routine, &point, seeded)
                    ));
                    self.failures.push(Failure { seeded, why });
                    continue;
                }
            };
            let measurement = self.measure(routine, &keys, &ks, data)?;
            if !measurement.correct {
                self.say(&format!(
                    "{}: candidate {} REJECTED: wrong output (max relative error {:.2e})",
                    routine.name,
                    candidate_label(routine, &point, seeded),
                    measurement.error
                ));
            }
            tried.push(Tried {
                point,
                built,
                schedule,
                measurement,
                seeded,
            });
        }
        let best = tried[rejected_before..]
            .iter()
            .filter(|t| t.measurement.correct)
            .map(|t| t.measurement.median)
            .min_by(f64::total_cmp);
        self.say(&format!(
            "{} {round}: {} candidates measured ({} answered by the memo table), best {}",
            routine.name,
            tried.len() - rejected_before,
            self.totals.memo_hits - hits_before,
            best.map_or("-".to_string(), ms)
        ));
        Ok(())
    }
}

/// At most this many seeds are measured per kernel (they count against round 1's budget).
const MAX_SEED_TRIALS: usize = 4;

/// Interleaved re-measurements of the two winners [`Session::compare_with_cold`] compares.
const SIDE_BY_SIDE_ROUNDS: usize = 7;

/// The callable kernels of one candidate (`mine`, indices into the batch), or why one of them
/// failed to compile.
fn bound_of(kernels: &[Result<Bound, String>], mine: &[usize]) -> Result<Vec<Bound>, String> {
    mine.iter()
        .map(|&i| {
            kernels
                .get(i)
                .cloned()
                .unwrap_or_else(|| Err("no such kernel".to_string()))
        })
        .collect()
}

/// What a search tried (in order), what seeding did, and the candidates that failed to
/// compile.
type Explored = (Vec<Tried>, Option<Seeding>, Vec<Failure>);

/// A candidate that failed to compile (skipped, never measured).
pub(crate) struct Failure {
    seeded: bool,
    why: String,
}

/// The point of the routine's space whose schedule, built on `built`, saves to the same ops
/// as `ops` (so the seed's neighbours can be explored), if any.
fn point_of(
    routine: &Routine,
    legal: &[Vec<usize>],
    built: &Built,
    ops: &[reference_ir::schedule::RefOp],
) -> Option<Vec<usize>> {
    let placements = Session::placements(built);
    let identity = Subject::new(&built.code)
        .with_placements(&placements)
        .identity()
        .ok()?;
    let registry = Registry::new(&identity);
    let (want, _) = to_saved(&ReferenceLanguage, &registry, ops).ok()?;
    legal.iter().find_map(|p| {
        let s = (routine.schedule)(built, p)?;
        let (have, _) = to_saved(&ReferenceLanguage, &registry, &s.ops).ok()?;
        (have.ops == want.ops).then(|| p.clone())
    })
}

/// "matmul 64x64x64" for near code of the matrix product whose digest is `digest`, else
/// the routine's name and the digest's first 12 digits.
fn near_label(routine: &Routine, digest: &str) -> String {
    if routine.name == "matmul" {
        for n in crate::kernels::MATMUL_SIZES {
            let sized = crate::kernels::routines_sized(n);
            let Some(r) = sized.iter().find(|r| r.name == "matmul") else {
                break;
            };
            let built = (r.build)();
            let placements = Session::placements(&built);
            if Subject::new(&built.code)
                .with_placements(&placements)
                .identity()
                .is_ok_and(|id| id.digest() == digest)
            {
                return format!("matmul {n}x{n}x{n}");
            }
        }
    }
    format!(
        "{} of other sizes ({})",
        routine.name,
        digest.get(..12).unwrap_or(digest)
    )
}

/// The memo table's key of a measurement: the routine, the kernels run in order (their
/// kernel keys), the buffer each kernel's parameters are bound to (in parameter order),
/// the data and the number of timed runs. The kernel key covers the text and signature
/// but not which buffer a parameter receives, so the bindings are in the key themselves:
/// two candidates with the same kernels bound to other buffers are other measurements.
fn memo_key(routine: &Routine, keys: &[&str], kernels: &[Bound], reps: usize, seed: u64) -> Key {
    let bindings = kernels
        .iter()
        .map(|k| Value::List(k.bindings.iter().map(|b| Value::from(b.name())).collect()))
        .collect();
    let fields = [
        ("routine", Value::from(routine.name)),
        (
            "kernels",
            Value::List(keys.iter().map(|k| Value::from(*k)).collect()),
        ),
        ("bindings", Value::List(bindings)),
        ("n", Value::Int(routine.len as i64)),
        ("reps", Value::Int(reps as i64)),
        ("data_seed", Value::Int(seed as i64)),
    ];
    KeyBuilder::new("kcache-demo/measurement/v1")
        .fields(fields.iter().map(|(n, v)| (*n, v)))
        .finish()
}

/// A routine's winner found on disk and replayed on fresh code.
pub(crate) struct Replay {
    built: Built,
    code: reference_ir::ir::Code,
    entry: ScheduleEntry<SavedRefOp>,
    key: String,
    describe: String,
}

pub(crate) struct Tried {
    /// The point of the routine's space (empty for a seed outside it).
    point: Vec<usize>,
    built: Built,
    schedule: Schedule,
    measurement: Measurement,
    /// Whether it came from a seed.
    seeded: bool,
}

/// A candidate built and scheduled, before it is compiled and measured.
struct Fresh {
    point: Vec<usize>,
    built: Built,
    schedule: Schedule,
    code: reference_ir::ir::Code,
    seeded: bool,
}

/// A routine's input data (deterministic) and expected output.
pub(crate) struct Data {
    pub(crate) seed: u64,
    pub(crate) a: Vec<f32>,
    pub(crate) b: Vec<f32>,
    pub(crate) expected: Vec<f32>,
}

impl Data {
    pub(crate) fn new(routine: &Routine) -> Data {
        let seed = seed_of(routine.name);
        let mut rng = SplitMix(seed);
        let mut values =
            |n: usize| -> Vec<f32> { (0..n).map(|_| rng.unit() * 2.0 - 1.0).collect() };
        let a = values(routine.len);
        let b = values(routine.len);
        let mut expected = vec![0.0; routine.len];
        (routine.reference)(&a, &b, &mut expected);
        Data {
            seed,
            a,
            b,
            expected,
        }
    }
}

/// The verbatim key of a kernel: its exact prelude and text, its signature, the options
/// and the compiler.
fn verbatim_of(source: &Source, options: &[String], identity: &str) -> String {
    let identity = format!("{identity}\nsignature {}", source.signature.keyed_form());
    verbatim_key(&source.keyed_text(), options, identity.as_bytes())
}

/// A batch of rendered kernels and, per kernel, the buffer each parameter is bound to.
#[derive(Default)]
struct Batch {
    kernels: Vec<BatchKernel<Source>>,
    bindings: Vec<Vec<Binding>>,
}

/// A callable kernel and the buffer each of its parameters is bound to.
#[derive(Clone, Debug)]
pub(crate) struct Bound {
    kernel: Kernel,
    bindings: Vec<Binding>,
}

/// The cc-backend signature of a rendered kernel: each node a buffer of exactly its
/// element count (the renderer touches nothing beyond it), each static an index.
fn signature(rendered: &Rendered) -> Result<Signature, DemoError> {
    let mut signature = Signature::new();
    for p in &rendered.params {
        signature = match &p.kind {
            ParamKind::Buffer {
                precision,
                writes,
                len,
            } => {
                let elem = match precision {
                    Precision::F32 => Elem::F32,
                    Precision::F64 => Elem::F64,
                    Precision::I32 => Elem::I32,
                    Precision::I64 => Elem::I64,
                    Precision::F16 | Precision::Bf16 => Elem::F16Bits,
                };
                if *writes {
                    signature.buffer_mut(&p.name, elem, Extent::fixed(*len))
                } else {
                    signature.buffer(&p.name, elem, Extent::fixed(*len))
                }
            }
            ParamKind::Index { wide } => {
                signature.scalar(&p.name, if *wide { Elem::I64 } else { Elem::I32 })
            }
        };
    }
    Ok(signature)
}

/// Runs a kernel on `data`: each parameter gets the buffer it is bound to.
fn call(bound: &Bound, out: &mut [f32], data: &Data) -> Result<(), DemoError> {
    let mut out = Some(out);
    let mut args = Vec::with_capacity(bound.bindings.len());
    for b in &bound.bindings {
        args.push(match b {
            Binding::Out => Arg::F32Mut(out.take().ok_or_else(|| {
                DemoError::Render("a kernel with two output parameters".to_string())
            })?),
            Binding::A => Arg::F32(&data.a),
            Binding::B => Arg::F32(&data.b),
        });
    }
    bound.kernel.call(&mut args).map_err(DemoError::Backend)
}

fn run_and_time(
    kernels: &[Bound],
    data: &Data,
    reps: usize,
    tolerance: f32,
) -> Result<Measurement, DemoError> {
    let mut out = vec![0.0f32; data.a.len()];
    for k in kernels {
        call(k, &mut out, data)?;
    }
    let error = out
        .iter()
        .zip(&data.expected)
        .map(|(o, e)| {
            let d = (o - e).abs() / e.abs().max(1.0);
            if d.is_nan() { f32::INFINITY } else { d }
        })
        .fold(0.0f32, f32::max);
    // Each timed sample runs the candidate often enough to last about SAMPLE_SECONDS,
    // so short kernels are not timed at the clock's resolution.
    let once = {
        let start = Instant::now();
        for k in kernels {
            call(k, &mut out, data)?;
        }
        start.elapsed().as_secs_f64()
    };
    let iterations = (SAMPLE_SECONDS / once.max(1e-9)).ceil().clamp(1.0, 256.0) as u32;
    let mut times = Vec::with_capacity(reps);
    for _ in 0..reps {
        let start = Instant::now();
        for _ in 0..iterations {
            for k in kernels {
                call(k, &mut out, data)?;
            }
        }
        times.push(start.elapsed().as_secs_f64() / f64::from(iterations));
    }
    Ok(Measurement {
        median: median(&times).unwrap_or(f64::INFINITY),
        times,
        error,
        correct: error <= tolerance,
    })
}

pub(crate) fn median(times: &[f64]) -> Option<f64> {
    let mut t = times.to_vec();
    t.sort_by(f64::total_cmp);
    t.get(t.len() / 2).copied()
}

/// Seconds as milliseconds, for progress lines and the report.
/// A candidate as the progress lines name it: its point in the routine's space (or that it
/// is a seed from outside it), marked when it is a seed.
fn candidate_label(routine: &Routine, point: &[usize], seeded: bool) -> String {
    let what = if point.len() == routine.space.len() {
        point_label(routine, point)
    } else {
        "(a seed outside the demo's space)".to_string()
    };
    let seed = if seeded { " (a seed)" } else { "" };
    format!("{what}{seed}")
}

pub(crate) fn ms(seconds: f64) -> String {
    format!("{:.3} ms", seconds * 1e3)
}

fn schedule_error(routine: &Routine, source: schedule_cache::Error) -> DemoError {
    DemoError::Schedule {
        routine: routine.name.to_string(),
        source,
    }
}

/// Every point of `routine`'s space whose schedule is legal and applies, in odometer
/// order.
pub(crate) fn legal_points(routine: &Routine) -> Vec<Vec<usize>> {
    let mut out = Vec::new();
    let mut point = vec![0; routine.space.len()];
    loop {
        let built = (routine.build)();
        if (routine.schedule)(&built, &point).is_some_and(|s| s.apply(&built.code).is_ok()) {
            out.push(point.clone());
        }
        let mut d = 0;
        while d < point.len() {
            point[d] += 1;
            if point[d] < routine.space[d].1.len() {
                break;
            }
            point[d] = 0;
            d += 1;
        }
        if d == point.len() {
            return out;
        }
    }
}

fn point_label(routine: &Routine, point: &[usize]) -> String {
    routine
        .space
        .iter()
        .zip(point)
        .map(|((name, choices), &c)| format!("{name}={}", choices.get(c).copied().unwrap_or("?")))
        .collect::<Vec<_>>()
        .join(" ")
}

/// A saved schedule in words, naming loops and nodes by the labels of `built`.
fn describe(
    saved: &SavedSchedule<SavedRefOp>,
    identity: &CompleteIdentity,
    built: &Built,
) -> String {
    fn sym(r: &SymRef, ops: &[SavedRefOp], identity: &CompleteIdentity, built: &Built) -> String {
        match r {
            SymRef::Base(i) => identity
                .binders()
                .get(*i)
                .and_then(|id| built.loops.iter().find(|(_, s)| s.id() == *id))
                .map_or(format!("L{i}"), |(name, _)| name.to_string()),
            SymRef::Static(k) => format!("s{k}"),
            SymRef::Minted { op, role } => {
                let target = match ops.get(*op) {
                    Some(SavedRefOp::Split { target, .. }) => sym(target, ops, identity, built),
                    Some(SavedRefOp::Hoist { out_of, .. }) => sym(out_of, ops, identity, built),
                    _ => format!("op{op}"),
                };
                format!("{target}.{role}")
            }
        }
    }
    let ops = &saved.ops;
    let node = |i: &usize| {
        identity
            .nodes()
            .get(*i)
            .and_then(|id| built.nodes.iter().find(|(_, n)| n.id() == *id))
            .map_or(format!("t{i}"), |(name, _)| name.to_string())
    };
    let words: Vec<String> = ops
        .iter()
        .map(|op| match op {
            SavedRefOp::Split { target, factor } => {
                format!("split({},{factor})", sym(target, ops, identity, built))
            }
            SavedRefOp::Reorder { outer, inner } => format!(
                "reorder({},{})",
                sym(outer, ops, identity, built),
                sym(inner, ops, identity, built)
            ),
            SavedRefOp::Unroll { target } => {
                format!("unroll({})", sym(target, ops, identity, built))
            }
            SavedRefOp::Vectorize { target } => {
                format!("vectorize({})", sym(target, ops, identity, built))
            }
            SavedRefOp::Hoist { node: n, out_of } => {
                format!(
                    "hoist({} out of {})",
                    node(n),
                    sym(out_of, ops, identity, built)
                )
            }
        })
        .collect();
    if words.is_empty() {
        "none (the unscheduled code won)".to_string()
    } else {
        words.join(" ")
    }
}

/// SplitMix64: a small deterministic generator for data and candidate order.
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn unit(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 24) as f32
    }
}

fn seed_of(name: &str) -> u64 {
    name.bytes().fold(0xCBF2_9CE4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01B3)
    })
}

fn shuffle<T>(items: &mut [T], seed: u64) {
    let mut rng = SplitMix(seed);
    for i in (1..items.len()).rev() {
        let j = (rng.next() % (i as u64 + 1)) as usize;
        items.swap(i, j);
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::kernels::routines;

    /// Two candidates of one routine whose kernels are the same text (so the same kernel
    /// keys) but whose parameters are bound to other buffers are two measurements: the
    /// memo table never answers one with the other's (a wrong hit would report a wrong
    /// candidate correct, and could pick it as the winner). Real renders, compiles and runs.
    #[test]
    fn candidates_differing_only_in_bindings_are_measured_apart() {
        let tmp = tempfile::tempdir().unwrap();
        let mut options = DemoOptions::new(tmp.path().join("cache"));
        (options.reps, options.progress, options.kernel_store) = (1, false, false);
        let chain = routines().into_iter().find(|r| r.name == "chain").unwrap();
        memo_cache::with_cache(true, |memo| {
            let backend = CcBackend::new().unwrap();
            let disk = TwoLevel::local_only(DiskCache::new(&options.cache_dir));
            let mut session = Session::new(backend, disk, memo, &options).unwrap();
            let right = (chain.build)();
            // The same code with x and y bound to each other's buffer.
            let mut swapped = (chain.build)();
            for (_, b) in &mut swapped.params {
                *b = match *b {
                    Binding::A => Binding::B,
                    Binding::B => Binding::A,
                    Binding::Out => Binding::Out,
                };
            }
            let mut batch = Batch::default();
            let codes = [(&right, &right.code), (&swapped, &swapped.code)];
            let owners = session
                .render_batch(&chain, &codes, &mut batch, None)
                .unwrap();
            let kernels = session.resolve("test", &batch).unwrap();
            let keys = |o: &[usize]| {
                o.iter()
                    .map(|&i| batch.kernels[i].key.as_str())
                    .collect::<Vec<_>>()
            };
            let bound = |o: &[usize]| bound_of(&kernels, o).unwrap();
            assert_eq!(keys(&owners[0]), keys(&owners[1]), "the same kernel keys");
            let data = Data::new(&chain);
            let memo_key_of = |o: &[usize]| memo_key(&chain, &keys(o), &bound(o), 1, data.seed);
            assert_ne!(memo_key_of(&owners[0]), memo_key_of(&owners[1]));
            let first = session
                .measure(&chain, &keys(&owners[0]), &bound(&owners[0]), &data)
                .unwrap();
            assert!(first.correct);
            let second = session
                .measure(&chain, &keys(&owners[1]), &bound(&owners[1]), &data)
                .unwrap();
            assert_eq!(
                session.totals.memo_hits, 0,
                "not answered by the memo table"
            );
            assert!(!second.correct, "x and y swapped compute another result");
            // The same candidate again is answered.
            session
                .measure(&chain, &keys(&owners[1]), &bound(&owners[1]), &data)
                .unwrap();
            assert_eq!(session.totals.memo_hits, 1);
        });
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod caps {
    use super::*;
    use crate::kernels::routines;

    /// The replay caps never refuse a winner of the demo's own search: every legal point
    /// of every routine has at most `MAX_REPLAY_OPS` ops and renders to at most a tenth of
    /// `MAX_REPLAY_C_BYTES`.
    #[test]
    fn every_schedule_of_the_demo_is_well_within_the_replay_caps() {
        let config = Config::new(reference_ir::render::reference_settings());
        for r in routines() {
            for p in legal_points(&r) {
                let built = (r.build)();
                let s = (r.schedule)(&built, &p).unwrap();
                assert!(s.ops.len() <= MAX_REPLAY_OPS / 8, "{} {p:?}", r.name);
                let code = s.apply(&built.code).unwrap();
                let bytes: usize = segments(&code)
                    .iter()
                    .map(|seg| {
                        let k = render(seg, "k", &signature_of(seg, &[]), Naming::Minted, &config)
                            .unwrap();
                        k.prelude.len() + k.text.len()
                    })
                    .sum();
                assert!(
                    bytes <= MAX_REPLAY_C_BYTES / 10,
                    "{} {p:?}: {bytes}",
                    r.name
                );
            }
        }
    }
}
