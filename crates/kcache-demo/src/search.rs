//! What the demo's tuning has of its own: the reference IR's kernels as a workload of the
//! tuner crate ([`DemoWorkload`]: rendering, data, checking output, the replay caps, the
//! kernel keys of `--keys`, the kernel dump), and the session that runs the tuner over
//! each kernel and turns its reports into the demo's. The loop itself (replay, seed
//! round, search, measurement, finalists, store) is the tuner's.

use std::cell::RefCell;
use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use canonical_text::segment_kernel_name;
use cc_backend::{Arg, CcBackend, CcProgram, Elem, Extent, Kernel, Signature, Source};
use kernel_cache::store::KernelStore;
use kernel_cache::{BatchKernel, KernelCache, Names, Resolved, Split};
use memo_cache::{Key, Table};
use reference_ir::ir::Precision;
use reference_ir::render::{
    Naming, Param as RenderParam, ParamKind, Rendered, render, segments, signature_of,
};
use reference_ir::schedule::{RefOp, ReferenceLanguage, SavedRefOp};
use schedule_cache::{
    CompleteIdentity, Config, DiskCache, Limits, NodeId, Placement, RedisStore, Registry,
    SavedSchedule, ScheduleCache, SeedOrigin, StoreOutcome, StorePolicy, Subject, SymRef,
    TimingIdentity, Toolchain, TwoLevel, digest_completeness, to_saved,
};
use tuner::{
    ColdOptions, Measure, Measurement, NeighbourhoodSearch, Origin as TrialOrigin, ProgressMode,
    Replayed, SearchOptions, SearchReport, Space, Strategy, Tuner, Workload,
};

use crate::DemoOptions;
use crate::error::DemoError;
use crate::kernels::{Binding, Built, Data, Routine, compiler_options, seed_of};
use crate::keys::{KeyMode, verbatim_key};
use crate::report::{ColdComparison, KernelReport, Origin, Seeding, Totals};

/// At most this many seeds are measured per kernel (they count against the budget).
const MAX_SEED_TRIALS: usize = 4;

/// Interleaved rounds of the side-by-side re-measurement of `--compare-cold`.
const SIDE_BY_SIDE_ROUNDS: usize = 7;

/// What the workload's renders, binds and runs counted over a run (it renders through
/// `&self`).
#[derive(Default)]
struct Counts {
    kernels_rendered: u64,
    verbatim_seen: HashSet<String>,
    verbatim_compiles: u64,
    dumped: u64,
    /// Set by a render, taken by the first bind after it: the resolve in between.
    resolve_started: Option<(Instant, u64)>,
    resolves: u64,
    compiling_resolves: u64,
    compile_seconds: f64,
    measure_seconds: f64,
}

/// Everything one demo run shares: the real backend, the in-process kernel cache, the
/// schedule cache and its regime, the memo table and the counters.
pub(crate) struct Session<'t> {
    backend: CcBackend,
    cache: KernelCache<CcProgram>,
    /// The persistent kernel store under the cache directory, unless disabled.
    kernel_store: Option<KernelStore>,
    /// Where to write the stream of kernels resolved (see `DemoOptions::dump_kernels`).
    dump_kernels: Option<PathBuf>,
    compiler_options: Vec<String>,
    /// The schedule cache's front door, built once from the regime.
    schedules: ScheduleCache<ReferenceLanguage, Schedules>,
    memo: Option<&'t Table<Key, Measurement>>,
    keys: KeyMode,
    progress: bool,
    reps: usize,
    round1: usize,
    round2: usize,
    seeding: bool,
    compare_cold: bool,
    counts: RefCell<Counts>,
    totals: RefCell<Totals>,
}

/// Bumped whenever the renderer's output changes for the same code: it enters the
/// codegen key component, so winners stored under another renderer never replay.
const RENDERER_VERSION: &str = "schedule-cache-render-minted-2";

/// The backend name in disk keys.
const BACKEND_NAME: &str = "cc";

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
            compiler_options,
            schedules,
            memo,
            keys: options.keys,
            progress: options.progress,
            reps: options.reps.clamp(1, crate::MAX_REPS),
            round1: options.round1.max(1),
            round2: options.round2,
            seeding: options.seeds,
            compare_cold: options.compare_cold,
            counts: RefCell::new(Counts::default()),
            totals: RefCell::new(Totals::default()),
        })
    }

    fn say(&self, line: &str) {
        if self.progress {
            eprintln!("[kcache-demo] {line}");
        }
    }

    fn measure(&self) -> Measure {
        measure_of(self.reps)
    }

    fn workload<'s>(&'s self, routine: &'s Routine) -> Result<DemoWorkload<'s>, DemoError> {
        let space = Space::new(
            routine.space.iter().map(|(_, c)| c.len()).collect(),
            legal_points(routine),
        )
        .map_err(|source| tune_error(routine, source))?;
        Ok(DemoWorkload {
            routine,
            space,
            data: Data::new(routine),
            config: self.schedules.config(),
            compiler_options: &self.compiler_options,
            backend: &self.backend,
            keys: self.keys,
            dump: self.dump_kernels.as_deref(),
            counts: &self.counts,
        })
    }

    /// Tunes one routine with the tuner: its stored winner replayed (checked) when there
    /// is a usable one, else a search (from the cache's seeds when seeding is on; beside a
    /// cold search with `compare_cold`) whose winner is stored under keep-faster (a stored
    /// winner found unusable is replaced whatever its time).
    pub(crate) fn tune(&self, routine: &Routine) -> Result<KernelReport, DemoError> {
        let work = self.workload(routine)?;
        let tuner = Tuner::new(&self.schedules, &self.backend, &self.cache)
            .with_kernel_store(self.kernel_store.as_ref())
            .with_split(self.backend.split())
            .with_measure(self.measure())
            .with_progress(if self.progress {
                ProgressMode::Auto
            } else {
                ProgressMode::Quiet
            });
        let rendered_before = self.counts.borrow().kernels_rendered;
        let (disk_lookup, policy) = match tuner.replay(&work).map_err(|e| tune_error(routine, e))? {
            Replayed::Hit(hit) => {
                let (describe, schedule_ron) = saved_words(routine, &hit.code, &hit.ops)?;
                let timing_note = crate::report::timing_note(
                    &hit.stored_times,
                    &hit.measurement.samples,
                    crate::report::load_average(),
                );
                self.add_census(&hit.census);
                let mut t = self.totals.borrow_mut();
                t.disk_lookups += 1;
                t.disk_hits += 1;
                // The replayed winner was run and timed once (not through the memo table).
                t.memo_misses += 1;
                return Ok(KernelReport {
                    name: routine.name.to_string(),
                    description: routine.description.to_string(),
                    origin: Origin::Replayed,
                    candidates: 0,
                    rejected: 0,
                    kernels_rendered: (self.counts.borrow().kernels_rendered - rendered_before)
                        as usize,
                    baseline_seconds: hit.baseline,
                    best_seconds: hit.measurement.median,
                    stored_best_seconds: median(&hit.stored_times),
                    timing_note,
                    schedule: describe,
                    schedule_ron,
                    key: hit.key.as_str().to_string(),
                    disk_lookup: "hit".to_string(),
                    seeding: None,
                    failed_to_compile: Vec::new(),
                    measured: Vec::new(),
                });
            }
            // A refusal (`refused: …`) and a skipped lookup say so themselves.
            Replayed::Miss(why) if why.starts_with("refused") || why.starts_with("skipped") => {
                (why, self.schedules.store_policy())
            }
            Replayed::Miss(why) => (format!("miss: {why}"), self.schedules.store_policy()),
            Replayed::Unusable { why, .. } => {
                // The op's own words: the tuner's and the renderer's prefixes add nothing
                // to "cannot be used".
                let why = why
                    .strip_prefix("it does not apply or render: ")
                    .unwrap_or(&why);
                let why = why
                    .strip_prefix("it no longer applies (")
                    .and_then(|w| w.strip_suffix(')'))
                    .unwrap_or(why);
                (
                    format!(
                        "miss: the stored winner cannot be used: {}",
                        schedule_cache::admin::short(why)
                    ),
                    StorePolicy::LastWriteWins,
                )
            }
        };
        // The seeds the cache offers (the tuner takes the same list): the report names
        // them in the demo's words.
        let offered = if self.seeding {
            let built = work.build();
            let placements = placements(&built);
            self.schedules
                .seeds(Subject::new(&built).with_placements(&placements))
                .map_err(|e| schedule_error(routine, e))?
                .seeds
        } else {
            Vec::new()
        };
        let budget = self.round1 + self.round2;
        let batch = self.round1.max(self.round2).max(1);
        let order_seed = seed_of(routine.name);
        let round1 = self.round1;
        let mut strategy =
            || -> Box<dyn Strategy> { Box::new(NeighbourhoodSearch::new(round1, LEADERS)) };
        let (report, cold) = if self.compare_cold && self.seeding {
            let cmp = tuner
                .compare_cold(
                    &work,
                    &mut strategy,
                    &ColdOptions {
                        budget,
                        batch,
                        seeded_order: order_seed,
                        // Independent of the seeded search's order (and of the name).
                        cold_order: order_seed ^ clock_seed(),
                        max_seeds: MAX_SEED_TRIALS,
                        rounds: SIDE_BY_SIDE_ROUNDS,
                        within: 0.05,
                    },
                )
                .map_err(|e| tune_error(routine, e))?;
            let same_program = cmp.seeded.winner.point.is_some()
                && cmp.seeded.winner.point == cmp.cold.winner.point;
            let cold = ColdComparison {
                cold_trials: cmp.cold.trials.len(),
                trials_to_match: cmp.seeded_trials,
                seeded_seconds: cmp.seeded_time.median,
                cold_seconds: cmp.cold_time.median,
                same_program,
            };
            (cmp.seeded, Some(cold))
        } else {
            let options = SearchOptions {
                budget,
                batch,
                order_seed,
                seeds: self.seeding,
                max_seeds: MAX_SEED_TRIALS,
                baseline_first: true,
            };
            let report = tuner
                .search(&work, &mut *strategy(), &options, self.memo)
                .map_err(|e| tune_error(routine, e))?;
            (report, None)
        };
        let (outcome, key) = tuner
            .store(&work, &report, policy)
            .map_err(|e| tune_error(routine, e))?;
        self.add_census(&report.census);
        {
            let mut t = self.totals.borrow_mut();
            t.disk_lookups += 1;
            t.memo_hits += report.memo_hits;
            t.memo_misses += report.memo_misses;
        }
        match outcome {
            StoreOutcome::Stored => self.totals.borrow_mut().disk_stored += 1,
            StoreOutcome::Refused(r) => self.say(&format!(
                "{}: the disk cache refused the winner ({r})",
                routine.name
            )),
            StoreOutcome::KeptExisting(kept) => {
                self.totals.borrow_mut().disk_kept_faster += 1;
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
        let winner = &report.winner;
        let (describe, schedule_ron) = saved_words(routine, &winner.code, &winner.ops)?;
        let speedup = report.baseline.map_or(String::new(), |b| {
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
        let seeding = self
            .seeding
            .then(|| seeding_of(routine, &report, &offered, cold));
        Ok(KernelReport {
            name: routine.name.to_string(),
            description: routine.description.to_string(),
            origin: Origin::Searched,
            candidates: report.trials.len(),
            rejected: report
                .trials
                .iter()
                .filter(|t| !t.measurement.correct)
                .count(),
            kernels_rendered: (self.counts.borrow().kernels_rendered - rendered_before) as usize,
            baseline_seconds: report.baseline,
            best_seconds: winner.measurement.median,
            stored_best_seconds: None,
            timing_note: None,
            schedule: describe,
            schedule_ron,
            key: key.map(|k| k.as_str().to_string()).unwrap_or_default(),
            disk_lookup,
            seeding,
            failed_to_compile: report.failed.iter().map(|f| f.why.clone()).collect(),
            measured: report
                .trials
                .iter()
                .map(|t| crate::report::Measured {
                    point: t.point.clone(),
                    samples: t.measurement.samples.len(),
                    iterations: t.measurement.iterations,
                    memo_hit: t.memo_hit,
                })
                .collect(),
        })
    }

    fn add_census(&self, c: &kernel_cache::Census) {
        let mut t = self.totals.borrow_mut();
        t.kernels_reused += c.kernels_reused;
        t.kernels_loaded += c.kernels_loaded;
        t.programs_loaded += c.programs_loaded;
    }

    /// The run's totals: the counters of the searches and replays, and what the backend
    /// and the workload's renders counted.
    pub(crate) fn finish(&self) -> Totals {
        let c = self.counts.borrow();
        Totals {
            kernels_rendered: c.kernels_rendered,
            kernels_compiled: self.backend.kernels_compiled(),
            programs_compiled: self.backend.programs_compiled(),
            verbatim_compiles: c.verbatim_compiles,
            resolves: c.resolves,
            compiling_resolves: c.compiling_resolves,
            compile_seconds: c.compile_seconds,
            measure_seconds: c.measure_seconds,
            ..*self.totals.borrow()
        }
    }
}

/// How candidates are timed: the tuner's default (warm-up, samples of at least 200 µs,
/// repeats until the spread is within 3%, finalists re-measured interleaved), at least
/// `reps` samples (and at most `reps` when `reps` is below the default's 5: the tests'
/// quick runs).
pub(crate) fn measure_of(reps: usize) -> Measure {
    let base = Measure::default();
    let reps = reps.clamp(1, crate::MAX_REPS);
    Measure {
        min_samples: reps,
        max_samples: if reps < base.min_samples {
            reps
        } else {
            base.max_samples.max(reps)
        },
        finalist_rounds: base.finalist_rounds.min(reps),
        ..base
    }
}

/// Render failures of a seed that mean it was never compiled (it does not apply to the
/// code, or is beyond the replay caps): reported as dropped seeds, as before the tuner.
const NOT_COMPILED: [&str; 3] = ["it no longer applies", "it has ", "it renders to more than"];

/// What seeding did, from the seeded search's report and the seeds the cache offered
/// (the demo's words for them: `1 entry (differ in: codegen)`, `matmul 64x64x64`).
fn seeding_of<C>(
    routine: &Routine,
    report: &SearchReport<C, RefOp>,
    offered: &[schedule_cache::Seed<SavedRefOp>],
    cold: Option<ColdComparison>,
) -> Seeding {
    let round = report.seeds.clone().unwrap_or_default();
    let label_of = |from: &str| -> (String, Option<&schedule_cache::Seed<SavedRefOp>>) {
        match offered
            .iter()
            .find(|s| from == format!("{} at {}", s.origin(), s.key()))
        {
            Some(seed) => (
                match seed.origin() {
                    SeedOrigin::SameCode { .. } => "the same code".to_string(),
                    SeedOrigin::NearCode { digest, .. } => near_label(routine, digest),
                    other => format!("{other:?}"),
                },
                Some(seed),
            ),
            None => (from.to_string(), None),
        }
    };
    let seed_from = |o: &TrialOrigin| match o {
        TrialOrigin::Seed { from } => Some(from.clone()),
        _ => None,
    };
    let mut dropped: Vec<String> = round
        .dropped
        .iter()
        .map(|d| format!("{}: {}", label_of(&d.from).0, d.reason))
        .collect();
    let (mut same, mut differing, mut near) = (0, Vec::new(), Vec::<String>::new());
    let mut failed = 0;
    let mut count = |from: &str| {
        let (label, seed) = label_of(from);
        match seed.map(|s| s.origin()) {
            Some(SeedOrigin::SameCode { differing: d }) => {
                same += 1;
                for c in d {
                    if !differing.contains(c) {
                        differing.push(*c);
                    }
                }
            }
            _ => {
                if !near.contains(&label) {
                    near.push(label);
                }
            }
        }
    };
    for t in &report.trials {
        if let Some(from) = seed_from(&t.origin) {
            count(&from);
        }
    }
    for f in &report.failed {
        let Some(from) = seed_from(&f.origin) else {
            continue;
        };
        if NOT_COMPILED.iter().any(|p| f.why.starts_with(p)) {
            let why = match f
                .why
                .strip_prefix("it no longer applies (")
                .and_then(|w| w.strip_suffix(')'))
            {
                Some(op) => format!(
                    "it no longer applies ({})",
                    schedule_cache::admin::short(op)
                ),
                None => schedule_cache::admin::short(&f.why),
            };
            dropped.push(format!("{}: {why}", label_of(&from).0));
        } else {
            failed += 1;
            count(&from);
        }
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
    let seed_trials = report
        .trials
        .iter()
        .filter(|t| matches!(t.origin, TrialOrigin::Seed { .. }))
        .count();
    Seeding {
        summary: if parts.is_empty() {
            "no seed".to_string()
        } else {
            format!("seeded from {}", parts.join(" and "))
        },
        offered: round.offered,
        seed_trials,
        trials: report.trials.len(),
        dropped,
        seeds_rejected: round.wrong,
        seeds_failed: failed,
        winner_from_seed: matches!(report.winner.origin, TrialOrigin::Seed { .. }),
        cold,
    }
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
            let placements = placements(&built);
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

/// A winner's schedule in words and as saved RON, from its ops on the code they were
/// built for.
fn saved_words(
    routine: &Routine,
    built: &Built,
    ops: &[RefOp],
) -> Result<(String, String), DemoError> {
    let placements = placements(built);
    let identity = Subject::new(&built.code)
        .with_placements(&placements)
        .identity()
        .map_err(|e| schedule_error(routine, e))?;
    let (saved, _) = to_saved(&ReferenceLanguage, &Registry::new(&identity), ops)
        .map_err(|e| schedule_error(routine, e))?;
    let ron = saved.to_ron().map_err(|e| schedule_error(routine, e))?;
    Ok((describe(&saved, &identity, built), ron))
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

/// A tuner error as the demo's: no correct candidate because none compiled is
/// [`DemoError::NothingCompiled`] (with the compiler's first error), the schedule cache's
/// failures are [`DemoError::Schedule`].
fn tune_error(routine: &Routine, e: tuner::Error) -> DemoError {
    match e {
        tuner::Error::NoCorrectCandidate {
            measured: 0,
            first_failure: Some(first),
            ..
        } => DemoError::NothingCompiled {
            routine: routine.name.to_string(),
            first,
        },
        tuner::Error::NoCorrectCandidate { .. } => {
            DemoError::NoCorrectCandidate(routine.name.to_string())
        }
        tuner::Error::Schedule { source, .. } => schedule_error(routine, source),
        other => DemoError::Tune {
            routine: routine.name.to_string(),
            source: other,
        },
    }
}

/// A seed from the clock, for a cold search's order independent of everything else.
fn clock_seed() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
        | 1
}

/// A routine of the demo as the tuner's workload.
pub(crate) struct DemoWorkload<'s> {
    routine: &'s Routine,
    space: Space,
    data: Data,
    config: &'s Config,
    compiler_options: &'s [String],
    backend: &'s CcBackend,
    keys: KeyMode,
    dump: Option<&'s Path>,
    counts: &'s RefCell<Counts>,
}

/// A candidate's kernels bound to the demo's buffers, and its output buffer.
pub(crate) struct Bound {
    kernels: Vec<(Kernel, Vec<Binding>)>,
    out: Vec<f32>,
}

impl DemoWorkload<'_> {
    /// Appends a kernel to the dump directory, if any.
    fn dump(&self, source: &Source) -> Result<(), String> {
        let Some(dir) = self.dump else {
            return Ok(());
        };
        let io = |e: std::io::Error| format!("the kernel dump {}: {e}", dir.display());
        std::fs::create_dir_all(dir).map_err(io)?;
        std::fs::write(dir.join("options"), self.compiler_options.join("\n")).map_err(io)?;
        let mut counts = self.counts.borrow_mut();
        std::fs::write(
            dir.join(format!("{}.c", counts.dumped)),
            source.keyed_text(),
        )
        .map_err(io)?;
        counts.dumped += 1;
        Ok(())
    }
}

impl Workload<ReferenceLanguage, CcBackend> for DemoWorkload<'_> {
    type Code = Built;
    type Plan = Vec<Vec<Binding>>;
    type Bound = Bound;

    fn name(&self) -> &str {
        self.routine.name
    }

    fn space(&self) -> &Space {
        &self.space
    }

    fn build(&self) -> Built {
        (self.routine.build)()
    }

    fn placements(&self, code: &Built) -> BTreeMap<NodeId, Placement> {
        placements(code)
    }

    fn ops_at(&self, code: &Built, point: &[usize]) -> Option<Vec<RefOp>> {
        (self.routine.schedule)(code, point).map(|s| s.ops)
    }

    /// Applies the ops and renders one kernel per segment, named by its position in the
    /// batch, with the segment's nodes as its parameters. A schedule of more than
    /// [`MAX_REPLAY_OPS`] ops, or rendering to more than [`MAX_REPLAY_C_BYTES`] of C
    /// (prelude and text, found as each segment is rendered), is refused: what the
    /// demo's own schedules never reach (a foreign entry or seed would).
    fn render(
        &self,
        code: &Built,
        ops: &[RefOp],
        first_kernel: usize,
    ) -> Result<tuner::Rendered<Source, Vec<Vec<Binding>>>, String> {
        if ops.len() > MAX_REPLAY_OPS {
            return Err(format!(
                "it has {} ops, more than the {MAX_REPLAY_OPS} the demo replays",
                ops.len()
            ));
        }
        let scheduled = reference_ir::schedule::apply_ops(ops, &code.code)
            .map_err(|e| format!("it no longer applies ({e})"))?;
        let (mut kernels, mut plan) = (Vec::new(), Vec::new());
        let mut c_bytes = 0;
        let identity = self.backend.identity();
        for segment in segments(&scheduled) {
            let symbol = segment_kernel_name(self.routine.name, first_kernel + kernels.len());
            let params = signature_of(&segment, &[]);
            let rendered = render(&segment, &symbol, &params, Naming::Minted, self.config)
                .map_err(|e| e.to_string())?;
            c_bytes += rendered.prelude.len() + rendered.text.len();
            if c_bytes > MAX_REPLAY_C_BYTES {
                return Err(format!(
                    "it renders to more than {MAX_REPLAY_C_BYTES} bytes of C, the most the demo compiles"
                ));
            }
            let bindings = params
                .iter()
                .map(|p| match p {
                    RenderParam::Node(n) => code
                        .params
                        .iter()
                        .find(|(id, _)| *id == n.id())
                        .map(|(_, b)| *b)
                        .ok_or_else(|| format!("node {} is bound to no buffer", n.label())),
                    RenderParam::Static(s) => Err(format!("static {s} has no argument")),
                })
                .collect::<Result<Vec<Binding>, String>>()?;
            let source = Source {
                prelude: rendered.prelude.clone(),
                text: rendered.text.clone(),
                signature: signature(&rendered).map_err(|e| e.to_string())?,
            };
            let verbatim = verbatim_of(&source, self.compiler_options, identity);
            let key = match self.keys {
                KeyMode::Canonical => source.key(
                    &symbol,
                    &Names::new().with_bound(rendered.owned.iter().cloned()),
                    self.compiler_options,
                    identity,
                ),
                KeyMode::Verbatim => verbatim.clone(),
            };
            self.dump(&source)?;
            {
                let mut counts = self.counts.borrow_mut();
                counts.kernels_rendered += 1;
                // What a cache keyed by the exact text would have compiled.
                if counts.verbatim_seen.insert(verbatim) {
                    counts.verbatim_compiles += 1;
                }
            }
            kernels.push(BatchKernel {
                key,
                options: self.compiler_options.to_vec(),
                symbol,
                source,
            });
            plan.push(bindings);
        }
        self.counts.borrow_mut().resolve_started =
            Some((Instant::now(), self.backend.programs_compiled()));
        // The kernel keys cover the text and signature but not which buffer a parameter
        // receives: the bindings are in the memo tag, with the data.
        let memo_tag = format!(
            "routine={} n={} data_seed={} bindings={:?}",
            self.routine.name,
            self.routine.len,
            self.data.seed,
            plan.iter()
                .map(|k: &Vec<Binding>| k.iter().map(|b| b.name()).collect::<Vec<_>>())
                .collect::<Vec<_>>()
        );
        Ok(tuner::Rendered {
            kernels,
            plan,
            memo_tag,
        })
    }

    fn bind(
        &self,
        plan: &Vec<Vec<Binding>>,
        kernels: &[Resolved<CcProgram>],
    ) -> Result<Bound, String> {
        {
            let mut counts = self.counts.borrow_mut();
            if let Some((start, programs)) = counts.resolve_started.take() {
                counts.compile_seconds += start.elapsed().as_secs_f64();
                counts.resolves += 1;
                if self.backend.programs_compiled() > programs {
                    counts.compiling_resolves += 1;
                }
            }
        }
        let kernels = kernels
            .iter()
            .zip(plan)
            .map(|(r, b)| {
                Kernel::from_resolved(r)
                    .map(|k| (k, b.clone()))
                    .map_err(|e| e.to_string())
            })
            .collect::<Result<Vec<_>, String>>()?;
        Ok(Bound {
            kernels,
            out: vec![0.0; self.routine.len],
        })
    }

    fn run(&self, bound: &mut Bound) -> Result<(), String> {
        let start = Instant::now();
        for (kernel, bindings) in &bound.kernels {
            let mut out = Some(&mut bound.out[..]);
            let mut args = Vec::with_capacity(bindings.len());
            for b in bindings {
                args.push(match b {
                    Binding::Out => {
                        Arg::F32Mut(out.take().ok_or("a kernel with two output parameters")?)
                    }
                    Binding::A => Arg::F32(&self.data.a),
                    Binding::B => Arg::F32(&self.data.b),
                });
            }
            kernel.call(&mut args).map_err(|e| e.to_string())?;
        }
        self.counts.borrow_mut().measure_seconds += start.elapsed().as_secs_f64();
        Ok(())
    }

    /// Runs the candidate once on a zeroed output buffer (as the reference's `out`
    /// starts) and compares every element with the Rust reference (relative error at most
    /// the routine's tolerance; a NaN is wrong).
    fn check(&self, bound: &mut Bound) -> Result<(), String> {
        bound.out.iter_mut().for_each(|o| *o = 0.0);
        self.run(bound)?;
        let error = bound
            .out
            .iter()
            .zip(&self.data.expected)
            .map(|(o, e)| {
                let d = (o - e).abs() / e.abs().max(1.0);
                if d.is_nan() { f32::INFINITY } else { d }
            })
            .fold(0.0f32, f32::max);
        if error <= self.routine.tolerance {
            Ok(())
        } else {
            Err(format!("max relative error {error:.2e}"))
        }
    }

    fn describe(&self, point: &[usize]) -> String {
        point_label(self.routine, point)
    }
}

/// The verbatim key of a kernel: its exact prelude and text, its signature, the options
/// and the compiler.
fn verbatim_of(source: &Source, options: &[String], identity: &str) -> String {
    let identity = format!("{identity}\nsignature {}", source.signature.keyed_form());
    verbatim_key(&source.keyed_text(), options, identity.as_bytes())
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

pub(crate) fn median(times: &[f64]) -> Option<f64> {
    let mut t = times.to_vec();
    t.sort_by(f64::total_cmp);
    t.get(t.len() / 2).copied()
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

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::kernels::routines;

    /// `--reps` is the fewest samples: the tuner may take more (up to its cap) while the
    /// spread is high, never more than `reps` below the default's minimum; always a
    /// setting the tuner accepts.
    #[test]
    fn reps_are_the_fewest_samples() {
        for (reps, min, max) in [
            (1, 1, 1),
            (3, 3, 3),
            (7, 7, 25),
            (40, 40, 40),
            (5000, 1000, 1000),
        ] {
            let m = measure_of(reps);
            assert_eq!((m.min_samples, m.max_samples), (min, max), "reps {reps}");
            m.check().unwrap();
        }
    }

    /// Two candidates of one routine whose kernels are the same text (so the same kernel
    /// keys) but whose parameters are bound to other buffers are two measurements: their
    /// memo tags differ, so the tuner's memo table never answers one with the other's (a
    /// wrong hit would report a wrong candidate correct).
    #[test]
    fn candidates_differing_only_in_bindings_are_measured_apart() {
        let tmp = tempfile::tempdir().unwrap();
        let mut options = DemoOptions::new(tmp.path().join("cache"));
        (options.reps, options.progress, options.kernel_store) = (1, false, false);
        let chain = routines().into_iter().find(|r| r.name == "chain").unwrap();
        let backend = CcBackend::new().unwrap();
        let disk = TwoLevel::local_only(DiskCache::new(&options.cache_dir));
        let session = Session::new(backend, disk, None, &options).unwrap();
        let work = session.workload(&chain).unwrap();
        let right = work.build();
        // The same code with x and y bound to each other's buffer.
        let mut swapped = work.build();
        for (_, b) in &mut swapped.params {
            *b = match *b {
                Binding::A => Binding::B,
                Binding::B => Binding::A,
                Binding::Out => Binding::Out,
            };
        }
        let a = work.render(&right, &[], 0).unwrap();
        let b = work.render(&swapped, &[], 0).unwrap();
        let keys = |r: &tuner::Rendered<Source, Vec<Vec<Binding>>>| {
            r.kernels.iter().map(|k| k.key.clone()).collect::<Vec<_>>()
        };
        assert_eq!(keys(&a), keys(&b), "the same kernel keys");
        assert_ne!(a.memo_tag, b.memo_tag, "other measurements");
        assert_ne!(a.plan, b.plan);
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
