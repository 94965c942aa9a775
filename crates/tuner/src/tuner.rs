//! The tuning loop: replay, seed round, budgeted search in batches, finalists, store.

use std::collections::BTreeMap;

use kernel_cache::store::KernelStore;
use kernel_cache::{Backend, BatchKernel, Census, KernelCache, Resolved, Resolver, Split};
use memo_cache::{Key, KeyBuilder, Table, try_fetch_or_put};
use rand::SeedableRng;
use schedule_cache::{
    CacheKey, Measurements, Miss, Registry, ScheduleCache, ScheduleLanguage, Store, StoreOutcome,
    StorePolicy, Subject, to_saved,
};

use crate::Error;
use crate::measure::{self, Measure, Measurement, RunOnce};
use crate::progress::{Progress, ProgressMode};
use crate::space::Point;
use crate::strategy::{History, OrderRng, Strategy};
use crate::workload::Workload;

/// The memo key's tag: bumped when what a measurement means changes.
const MEMO_TAG: &str = "kcache-tuner/measurement/v1";

/// One search's settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SearchOptions {
    /// The most candidates attempted (seeds and the baseline included; a candidate that
    /// fails to render or compile counts: it was attempted).
    pub budget: usize,
    /// Candidates compiled together in one resolve.
    pub batch: usize,
    /// Seeds the order of the strategy's random choices (never the workload's name).
    pub order_seed: u64,
    /// Whether to start with the schedule cache's seeds.
    pub seeds: bool,
    /// The most seeds measured (the rest are reported as not tried).
    pub max_seeds: usize,
    /// Whether the all-zero point (the unscheduled code), when legal, is attempted first
    /// after the seeds (its time is the report's baseline).
    pub baseline_first: bool,
}

impl Default for SearchOptions {
    /// A budget of 24 in batches of 8, order seed 0, seeds on (at most 4), baseline first.
    fn default() -> SearchOptions {
        SearchOptions {
            budget: 24,
            batch: 8,
            order_seed: 0,
            seeds: true,
            max_seeds: 4,
            baseline_first: true,
        }
    }
}

impl SearchOptions {
    fn check(&self) -> Result<(), Error> {
        if self.budget == 0 || self.batch == 0 {
            return Err(Error::InvalidSetting(
                "SearchOptions: budget and batch must be at least 1".to_string(),
            ));
        }
        Ok(())
    }
}

/// Where a candidate came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Origin {
    /// A seed the schedule cache offered; `from` says whence (its origin and key).
    Seed {
        /// The seed's origin and key, in words.
        from: String,
    },
    /// The unscheduled code (the all-zero point).
    Baseline,
    /// The strategy's proposal.
    Strategy,
    /// A stored winner replayed.
    Replay,
}

/// A candidate compiled, checked and (when correct) timed.
#[derive(Clone, Debug, PartialEq)]
pub struct Trial {
    /// Its position in the search's attempts, from 1 (failed candidates count).
    pub attempt: usize,
    /// Its point in the space (`None` for a seed outside the space).
    pub point: Option<Point>,
    /// Where it came from.
    pub origin: Origin,
    /// Its measurement during the search.
    pub measurement: Measurement,
    /// Whether the memo table answered it (it was measured before in this table).
    pub memo_hit: bool,
}

/// A candidate skipped: it could not be rendered, failed to compile, or could not be
/// bound to its data. Never measured, never a winner.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failed {
    /// Its position in the search's attempts, from 1.
    pub attempt: usize,
    /// Its point in the space (`None` for a seed outside the space).
    pub point: Option<Point>,
    /// Where it came from.
    pub origin: Origin,
    /// Why (the compiler's first error line, or the workload's words).
    pub why: String,
    /// Whether the kernel store remembered the failure (nothing was compiled).
    pub remembered: bool,
}

/// A seed the schedule cache offered that was not measured.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DroppedSeed {
    /// The seed's origin and key, in words.
    pub from: String,
    /// Why it was dropped (it does not rebuild or apply on this code, or it duplicates a
    /// seed already taken, or the seed cap was reached).
    pub reason: String,
}

/// What the seed round did.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SeedRound {
    /// Seeds the schedule cache offered.
    pub offered: usize,
    /// Seeds attempted (re-applied on fresh code).
    pub attempted: usize,
    /// Seeds dropped before anything was compiled, with the reasons.
    pub dropped: Vec<DroppedSeed>,
    /// Entries the cache skipped while gathering seeds (key, reason).
    pub skipped: Vec<(String, String)>,
    /// Seeds that failed to render or compile (details in the report's `failed`).
    pub failed: usize,
    /// Seeds that computed a wrong result.
    pub wrong: usize,
}

/// A finalist re-measured.
#[derive(Clone, Debug, PartialEq)]
pub struct Finalist {
    /// Its attempt number.
    pub attempt: usize,
    /// Its time during the search (seconds, the ranking estimate).
    pub search_time: f64,
    /// Its interleaved re-measurement.
    pub remeasured: Measurement,
}

/// The winner of a search: the fastest finalist as re-measured.
#[derive(Clone, Debug)]
pub struct Winner<C, O> {
    /// Its attempt number.
    pub attempt: usize,
    /// Its point (`None` for a seed outside the space).
    pub point: Option<Point>,
    /// Where it came from.
    pub origin: Origin,
    /// The fresh code it was built on.
    pub code: C,
    /// Its schedule, on `code`.
    pub ops: Vec<O>,
    /// Its interleaved re-measurement (the spread of its samples included).
    pub measurement: Measurement,
}

/// What a search did, in order, and its winner.
#[derive(Clone, Debug)]
pub struct SearchReport<C, O> {
    /// The workload's name.
    pub workload: String,
    /// The strategy's name.
    pub strategy: String,
    /// The order seed.
    pub order_seed: u64,
    /// The budget.
    pub budget: usize,
    /// Candidates attempted (at most the budget).
    pub attempts: usize,
    /// Candidates measured, in attempt order.
    pub trials: Vec<Trial>,
    /// Candidates skipped, in attempt order.
    pub failed: Vec<Failed>,
    /// The seed round, when seeds were asked for.
    pub seeds: Option<SeedRound>,
    /// The finalists, re-measured interleaved, in search order.
    pub finalists: Vec<Finalist>,
    /// The winner.
    pub winner: Winner<C, O>,
    /// The unscheduled code's time, when it was measured correct.
    pub baseline: Option<f64>,
    /// Measurements the memo table answered in this search.
    pub memo_hits: u64,
    /// Measurements made in this search.
    pub memo_misses: u64,
    /// What the search's resolves compiled, reused and loaded.
    pub census: Census,
}

impl<C, O> SearchReport<C, O> {
    /// The first attempt whose search time is at most `target` seconds.
    pub fn first_within(&self, target: f64) -> Option<usize> {
        self.trials
            .iter()
            .find(|t| t.measurement.correct && t.measurement.time <= target)
            .map(|t| t.attempt)
    }
}

/// A stored winner replayed and checked.
#[derive(Clone, Debug)]
pub struct ReplayHit<C, O> {
    /// The key it was stored under.
    pub key: CacheKey,
    /// The fresh code it was replayed on.
    pub code: C,
    /// Its schedule on `code`.
    pub ops: Vec<O>,
    /// The stored samples (seconds per run).
    pub stored_times: Vec<f64>,
    /// The stored entry's baseline time (the unscheduled code's), if it has one.
    pub baseline: Option<f64>,
    /// What the replay's resolve compiled, reused and loaded.
    pub census: Census,
    /// Its measurement now.
    pub measurement: Measurement,
}

/// What looking a stored winner up gave.
// Returned once per replayed workload: boxing the hit would buy nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug)]
pub enum Replayed<C, O> {
    /// Found, applied, compiled, checked correct and timed.
    Hit(ReplayHit<C, O>),
    /// Nothing stored usable under the key (the miss explained).
    Miss(String),
    /// An entry was found but cannot be used (it does not apply, render, compile, or it
    /// computes a wrong result): a search must replace it whatever its time.
    Unusable {
        /// Its key.
        key: CacheKey,
        /// Why.
        why: String,
    },
}

/// The result of [`Tuner::tune`].
// Returned once per tuned workload: boxing the report would buy nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug)]
pub enum Tuned<C, O> {
    /// A stored winner was replayed.
    Replayed(ReplayHit<C, O>),
    /// A search ran and its winner was offered to the store.
    Searched {
        /// Why nothing was replayed.
        miss: String,
        /// The search.
        report: SearchReport<C, O>,
        /// What the store did with the winner.
        stored: StoreOutcome,
        /// The key the winner went to, if any.
        key: Option<CacheKey>,
    },
}

/// A candidate before it is rendered.
struct Pending<C, O> {
    point: Option<Point>,
    origin: Origin,
    code: C,
    ops: Vec<O>,
}

/// The tuning loop over one schedule cache, one backend and one kernel cache.
///
/// Every batch resolves per kernel ([`Resolver::resolve`]) through the kernel cache, the
/// kernel store when given and the split when given: a candidate whose kernel fails is
/// skipped and reported (a failure the store remembers is not compiled again); the others
/// are compiled once. Measurements go through the caller's memo table when given.
pub struct Tuner<'a, L: ScheduleLanguage, S: Store, B: Backend> {
    schedules: &'a ScheduleCache<L, S>,
    backend: &'a B,
    cache: &'a KernelCache<B::Program>,
    kernel_store: Option<&'a KernelStore>,
    split: Option<Split>,
    measure: Measure,
    progress: ProgressMode,
    policy: StorePolicy,
}

impl<'a, L: ScheduleLanguage, S: Store, B: Backend> Tuner<'a, L, S, B> {
    /// A tuner storing winners through `schedules` under keep-faster (whatever the cache's
    /// own policy), compiling with `backend` into `cache`; default [`Measure`], progress
    /// [`ProgressMode::Auto`], no kernel store.
    pub fn new(
        schedules: &'a ScheduleCache<L, S>,
        backend: &'a B,
        cache: &'a KernelCache<B::Program>,
    ) -> Tuner<'a, L, S, B> {
        Tuner {
            schedules,
            backend,
            cache,
            kernel_store: None,
            split: None,
            measure: Measure::default(),
            progress: ProgressMode::Auto,
            policy: StorePolicy::KeepFaster,
        }
    }

    /// Stores [`Tuner::tune`]'s winners under `policy` (default
    /// [`StorePolicy::KeepFaster`]: concurrent tuners leave the fastest entry, not the last).
    pub fn with_store_policy(mut self, policy: StorePolicy) -> Self {
        self.policy = policy;
        self
    }

    /// The policy [`Tuner::tune`] stores winners under.
    pub fn store_policy(&self) -> StorePolicy {
        self.policy
    }

    /// Resolves through a persistent kernel store too.
    pub fn with_kernel_store(mut self, store: Option<&'a KernelStore>) -> Self {
        self.kernel_store = store;
        self
    }

    /// Cuts compiles into programs as `split` says.
    pub fn with_split(mut self, split: Split) -> Self {
        self.split = Some(split);
        self
    }

    /// Times candidates as `measure` says (checked when a search starts).
    pub fn with_measure(mut self, measure: Measure) -> Self {
        self.measure = measure;
        self
    }

    /// Shows progress as `mode` says.
    pub fn with_progress(mut self, mode: ProgressMode) -> Self {
        self.progress = mode;
        self
    }

    /// The measurement settings.
    pub fn measure(&self) -> &Measure {
        &self.measure
    }

    /// The schedule cache.
    pub fn schedules(&self) -> &ScheduleCache<L, S> {
        self.schedules
    }

    /// Looks the workload's stored winner up and, on a hit, replays it on fresh code:
    /// applied, rendered, compiled, checked against the workload's reference and timed
    /// before it is returned. An entry that fails any of these is
    /// [`Replayed::Unusable`], never a winner.
    pub fn replay<W: Workload<L, B>>(&self, w: &W) -> Result<Replayed<W::Code, L::Op>, Error> {
        let code = w.build();
        let placements = w.placements(&code);
        let found = self
            .schedules
            .lookup(Subject::new(&code).with_placements(&placements))
            .map_err(|e| schedule_error(w, e))?;
        let hit = match found {
            Ok(hit) => hit,
            Err(Miss::NoTiming) => {
                return Ok(Replayed::Miss("no timing identity, no key".to_string()));
            }
            Err(miss) => return Ok(Replayed::Miss(miss.to_string())),
        };
        let progress = Progress::start(self.progress, w.name(), 0);
        let key = hit.key.clone();
        let unusable = |why: String| {
            progress.say(&format!("the winner stored at {key} cannot be used: {why}"));
            Ok(Replayed::Unusable {
                key: key.clone(),
                why,
            })
        };
        let rendered = match w.render(&code, &hit.ops, 0) {
            Ok(r) => r,
            Err(why) => return unusable(format!("it does not apply or render: {why}")),
        };
        let (answers, census) = self.resolve(w, &rendered.kernels)?;
        let kernels = match resolved_of(&answers, 0..rendered.kernels.len()) {
            Ok(k) => k,
            Err((why, _)) => return unusable(format!("it fails to compile: {why}")),
        };
        let mut bound = match w.bind(&rendered.plan, &kernels) {
            Ok(b) => b,
            Err(why) => return unusable(format!("it cannot be bound: {why}")),
        };
        let m = self.check_and_time(w, &mut bound, "the stored winner")?;
        if let Some(why) = m.wrong {
            return unusable(format!("it computes a wrong result: {why}"));
        }
        progress.say(&format!(
            "replayed the winner stored at {key}: {:.4} ms (spread {:.1}%)",
            m.time * 1e3,
            m.spread * 100.0
        ));
        Ok(Replayed::Hit(ReplayHit {
            key,
            code,
            ops: hit.ops,
            baseline: hit.entry.baseline_time,
            stored_times: hit.entry.times,
            measurement: m,
            census,
        }))
    }

    /// Replays the stored winner if there is a usable one; else searches and offers the
    /// winner to the store (under [`Tuner::store_policy`], keep-faster by default; an entry
    /// found unusable is replaced whatever its time).
    pub fn tune<W: Workload<L, B>>(
        &self,
        w: &W,
        strategy: &mut dyn Strategy,
        options: &SearchOptions,
        memo: Option<&Table<Key, Measurement>>,
    ) -> Result<Tuned<W::Code, L::Op>, Error> {
        let (miss, policy) = match self.replay(w)? {
            Replayed::Hit(hit) => return Ok(Tuned::Replayed(hit)),
            Replayed::Miss(why) => (why, self.policy),
            Replayed::Unusable { key, why } => (
                format!("the winner stored at {key} cannot be used: {why}"),
                StorePolicy::LastWriteWins,
            ),
        };
        let report = self.search(w, strategy, options, memo)?;
        let (stored, key) = self.store(w, &report, policy)?;
        Ok(Tuned::Searched {
            miss,
            report,
            stored,
            key,
        })
    }

    /// Offers a search's winner to the schedule store under `policy`: its re-measured
    /// samples are the entry's times (so the entry keeps their spread), the baseline
    /// its baseline time. Returns what the store did and the key.
    pub fn store<W: Workload<L, B>>(
        &self,
        w: &W,
        report: &SearchReport<W::Code, L::Op>,
        policy: StorePolicy,
    ) -> Result<(StoreOutcome, Option<CacheKey>), Error> {
        let winner = &report.winner;
        let placements = w.placements(&winner.code);
        let subject = Subject::new(&winner.code).with_placements(&placements);
        let mut measurements = Measurements::new(winner.measurement.samples.clone());
        measurements.baseline_time = report.baseline;
        let published = self
            .schedules
            .store_with_policy(subject, &winner.ops, measurements, policy)
            .map_err(|e| schedule_error(w, e))?;
        Ok((published.outcome, published.key))
    }

    /// A budgeted search of `w`'s space: the seed round first (when asked), then the
    /// baseline (when asked), then the strategy's proposals, `options.batch` candidates
    /// per resolve, until `options.budget` candidates were attempted or the strategy has
    /// nothing more. The `measure.finalists` fastest correct candidates are then
    /// re-measured interleaved and the fastest of them wins. Nothing is stored (see
    /// [`Tuner::store`] and [`Tuner::tune`]).
    pub fn search<W: Workload<L, B>>(
        &self,
        w: &W,
        strategy: &mut dyn Strategy,
        options: &SearchOptions,
        memo: Option<&Table<Key, Measurement>>,
    ) -> Result<SearchReport<W::Code, L::Op>, Error> {
        options.check()?;
        self.measure.check()?;
        let progress = Progress::start(self.progress, w.name(), options.budget);
        let stats_before = memo.map(|t| t.stats());
        let mut run = Run::<W::Code, L::Op> {
            trials: Vec::new(),
            failed: Vec::new(),
            kept: BTreeMap::new(),
            history: History::new(),
            attempts: 0,
            census: Census::default(),
        };
        let mut rng = OrderRng::seed_from_u64(options.order_seed);

        // The seed round: measured first, before anything else.
        let seeds = if options.seeds {
            let (pending, mut round) = self.seed_candidates(w, options)?;
            let room = options.budget.min(pending.len());
            for p in pending.iter().skip(room) {
                round.dropped.push(DroppedSeed {
                    from: origin_words(&p.origin),
                    reason: "the budget is smaller than the seeds".to_string(),
                });
            }
            let pending: Vec<_> = pending.into_iter().take(room).collect();
            round.attempted = pending.len();
            let (first_failed, first_trial) = (run.failed.len(), run.trials.len());
            self.run_batch(w, pending, memo, &mut run, &progress, "seeds")?;
            round.failed = run.failed.len() - first_failed;
            round.wrong = run.trials[first_trial..]
                .iter()
                .filter(|t| !t.measurement.correct)
                .count();
            progress.say(&format!(
                "{} seeds offered, {} measured first, {} dropped, {} failed, {} wrong{}",
                round.offered,
                round.attempted - round.failed,
                round.dropped.len(),
                round.failed,
                round.wrong,
                round
                    .dropped
                    .iter()
                    .map(|d| format!("\n  dropped: {}: {}", d.from, d.reason))
                    .collect::<String>()
            ));
            Some(round)
        } else {
            None
        };

        let space = w.space();
        let mut first = Vec::new();
        if options.baseline_first && run.attempts < options.budget {
            let zero = vec![0; space.dims().len()];
            if space.contains(&zero) && run.history.propose(&zero) {
                first.push((zero, Origin::Baseline));
            }
        }
        let mut number = 0;
        while run.attempts < options.budget {
            let room = options.batch.min(options.budget - run.attempts);
            let mut batch = std::mem::take(&mut first);
            let want = room.saturating_sub(batch.len());
            if want > 0 {
                for p in strategy.propose(space, &run.history, want, &mut rng) {
                    // The contract, enforced: legal, new, at most `want`.
                    if batch.len() >= room || !space.contains(&p) {
                        continue;
                    }
                    if run.history.propose(&p) {
                        batch.push((p, Origin::Strategy));
                    }
                }
            }
            if batch.is_empty() {
                break;
            }
            let mut pending = Vec::with_capacity(batch.len());
            for (point, origin) in batch {
                let code = w.build();
                match w.ops_at(&code, &point) {
                    Some(ops) => pending.push(Pending {
                        point: Some(point),
                        origin,
                        code,
                        ops,
                    }),
                    None => {
                        run.attempts += 1;
                        run.failed.push(Failed {
                            attempt: run.attempts,
                            point: Some(point),
                            origin,
                            why: "the workload says the point is not legal".to_string(),
                            remembered: false,
                        });
                    }
                }
            }
            number += 1;
            self.run_batch(
                w,
                pending,
                memo,
                &mut run,
                &progress,
                &format!("batch {number}"),
            )?;
        }

        let report = self.finish(
            w,
            strategy.name(),
            options,
            run,
            seeds,
            stats_before,
            memo,
            &progress,
        );
        progress.finish();
        report
    }

    /// The finalists re-measured and the report.
    #[allow(clippy::too_many_arguments)]
    fn finish<W: Workload<L, B>>(
        &self,
        w: &W,
        strategy: &str,
        options: &SearchOptions,
        mut run: Run<W::Code, L::Op>,
        seeds: Option<SeedRound>,
        stats_before: Option<memo_cache::Stats>,
        memo: Option<&Table<Key, Measurement>>,
        progress: &Progress,
    ) -> Result<SearchReport<W::Code, L::Op>, Error> {
        let mut correct: Vec<&Trial> = run
            .trials
            .iter()
            .filter(|t| t.measurement.correct)
            .collect();
        correct.sort_by(|a, b| a.measurement.time.total_cmp(&b.measurement.time));
        let finalists: Vec<(usize, f64)> = correct
            .iter()
            .take(self.measure.finalists)
            .map(|t| (t.attempt, t.measurement.time))
            .collect();
        if finalists.is_empty() {
            return Err(Error::NoCorrectCandidate {
                workload: w.name().to_string(),
                measured: run.trials.len(),
                failed: run.failed.len(),
                first_failure: run.failed.first().map(|f| f.why.clone()),
            });
        }
        let candidates: Vec<(&W::Code, &[L::Op])> = finalists
            .iter()
            .filter_map(|(a, _)| run.kept.get(a).map(|(c, o)| (c, o.as_slice())))
            .collect();
        let (remeasured, census) =
            self.side_by_side(w, &candidates, self.measure.finalist_rounds)?;
        run.census += census;
        let best = remeasured
            .iter()
            .enumerate()
            .min_by(|a, b| a.1.time.total_cmp(&b.1.time))
            .map(|(i, _)| i)
            .unwrap_or(0);
        let finalists: Vec<Finalist> = finalists
            .iter()
            .zip(remeasured)
            .map(|((attempt, search_time), remeasured)| Finalist {
                attempt: *attempt,
                search_time: *search_time,
                remeasured,
            })
            .collect();
        let Some(win) = finalists.get(best) else {
            return Err(Error::NoCorrectCandidate {
                workload: w.name().to_string(),
                measured: run.trials.len(),
                failed: run.failed.len(),
                first_failure: Some("no finalist could be re-measured".to_string()),
            });
        };
        let trial = run
            .trials
            .iter()
            .find(|t| t.attempt == win.attempt)
            .cloned();
        let (code, ops) =
            run.kept
                .remove(&win.attempt)
                .ok_or_else(|| Error::NoCorrectCandidate {
                    workload: w.name().to_string(),
                    measured: run.trials.len(),
                    failed: run.failed.len(),
                    first_failure: None,
                })?;
        let (point, origin) = trial.map_or((None, Origin::Strategy), |t| (t.point, t.origin));
        progress.say(&format!(
            "winner: attempt {} {} at {:.4} ms (spread {:.1}%), of {} finalists re-measured interleaved",
            win.attempt,
            point.as_deref().map_or("(a seed outside the space)".to_string(), |p| w.describe(p)),
            win.remeasured.time * 1e3,
            win.remeasured.spread * 100.0,
            finalists.len()
        ));
        let winner = Winner {
            attempt: win.attempt,
            point,
            origin,
            code,
            ops,
            measurement: win.remeasured.clone(),
        };
        let baseline = run
            .trials
            .iter()
            .find(|t| t.origin == Origin::Baseline && t.measurement.correct)
            .map(|t| t.measurement.time);
        let after = memo.map(|t| t.stats());
        let (memo_hits, memo_misses) = match (stats_before, after) {
            (Some(b), Some(a)) => (a.hits - b.hits, a.misses - b.misses),
            _ => (0, run.trials.len() as u64),
        };
        Ok(SearchReport {
            workload: w.name().to_string(),
            strategy: strategy.to_string(),
            order_seed: options.order_seed,
            budget: options.budget,
            attempts: run.attempts,
            trials: run.trials,
            failed: run.failed,
            seeds,
            finalists,
            winner,
            baseline,
            memo_hits,
            memo_misses,
            census: run.census,
        })
    }

    /// The seeds re-applied on fresh code, deduplicated, at most `max_seeds`.
    fn seed_candidates<W: Workload<L, B>>(
        &self,
        w: &W,
        options: &SearchOptions,
    ) -> Result<SeedCandidates<W::Code, L::Op>, Error> {
        let code = w.build();
        let placements = w.placements(&code);
        let seeds = self
            .schedules
            .seeds(Subject::new(&code).with_placements(&placements))
            .map_err(|e| schedule_error(w, e))?;
        let mut round = SeedRound {
            offered: seeds.seeds.len(),
            skipped: seeds.skipped.clone(),
            ..SeedRound::default()
        };
        let mut pending: Vec<Pending<W::Code, L::Op>> = Vec::new();
        let mut saved_forms: Vec<String> = Vec::new();
        for seed in &seeds.seeds {
            let from = format!("{} at {}", seed.origin(), seed.key());
            if pending.len() >= options.max_seeds {
                round.dropped.push(DroppedSeed {
                    from,
                    reason: format!("more than the {} seeds measured", options.max_seeds),
                });
                continue;
            }
            let code = w.build();
            let placements = w.placements(&code);
            let subject = Subject::new(&code).with_placements(&placements);
            let candidate = match self.schedules.candidate(seed, subject) {
                Ok(c) => c,
                Err(dropped) => {
                    round.dropped.push(DroppedSeed {
                        from,
                        reason: dropped.reason,
                    });
                    continue;
                }
            };
            let (point, form) = point_of(
                self.schedules.language(),
                w,
                &code,
                &placements,
                &candidate.ops,
            );
            if form.as_ref().is_some_and(|f| saved_forms.contains(f)) {
                round.dropped.push(DroppedSeed {
                    from,
                    reason: "the same schedule as a seed already taken".to_string(),
                });
                continue;
            }
            saved_forms.extend(form);
            pending.push(Pending {
                point,
                origin: Origin::Seed { from },
                code,
                ops: candidate.ops,
            });
        }
        Ok((pending, round))
    }

    /// Renders, resolves, binds, checks and times one batch, recording each candidate.
    fn run_batch<W: Workload<L, B>>(
        &self,
        w: &W,
        pending: Vec<Pending<W::Code, L::Op>>,
        memo: Option<&Table<Key, Measurement>>,
        run: &mut Run<W::Code, L::Op>,
        progress: &Progress,
        label: &str,
    ) -> Result<(), Error> {
        if pending.is_empty() {
            return Ok(());
        }
        let mut kernels: Vec<BatchKernel<B::Source>> = Vec::new();
        let mut rendered = Vec::with_capacity(pending.len());
        for p in pending {
            run.attempts += 1;
            let attempt = run.attempts;
            if let Some(point) = &p.point {
                run.history.propose(point);
            }
            let r = w.render(&p.code, &p.ops, kernels.len()).map(|r| {
                let range = kernels.len()..kernels.len() + r.kernels.len();
                kernels.extend(r.kernels);
                (range, r.plan, r.memo_tag)
            });
            rendered.push((p, attempt, r));
        }
        let (answers, census) = if kernels.is_empty() {
            (Vec::new(), Census::default())
        } else {
            self.resolve(w, &kernels)?
        };
        run.census += census;
        let before = run.trials.len();
        let failed_before = run.failed.len();
        for (p, attempt, r) in rendered {
            let (range, plan, memo_tag) = match r {
                Ok(r) => r,
                Err(why) => {
                    progress.say(&format!(
                        "candidate {} SKIPPED: it cannot be rendered: {why}",
                        label_of(w, &p)
                    ));
                    run.failed.push(Failed {
                        attempt,
                        point: p.point,
                        origin: p.origin,
                        why,
                        remembered: false,
                    });
                    continue;
                }
            };
            let resolved = match resolved_of(&answers, range.clone()) {
                Ok(k) => k,
                Err((why, remembered)) => {
                    progress.say(&format!(
                        "candidate {} SKIPPED: it fails to compile{}: {why}",
                        label_of(w, &p),
                        if remembered { " (remembered)" } else { "" }
                    ));
                    run.failed.push(Failed {
                        attempt,
                        point: p.point,
                        origin: p.origin,
                        why,
                        remembered,
                    });
                    continue;
                }
            };
            let mut bound = match w.bind(&plan, &resolved) {
                Ok(b) => b,
                Err(why) => {
                    run.failed.push(Failed {
                        attempt,
                        point: p.point,
                        origin: p.origin,
                        why: format!("it cannot be bound: {why}"),
                        remembered: false,
                    });
                    continue;
                }
            };
            let key = memo_key(w.name(), &memo_tag, &kernels[range], &self.measure);
            let label = label_of(w, &p);
            let fetched =
                try_fetch_or_put(memo, key, || self.check_and_time(w, &mut bound, &label))?;
            let memo_hit = fetched.is_hit();
            let measurement = fetched.into_value();
            if let Some(why) = &measurement.wrong {
                progress.say(&format!("candidate {label} REJECTED: wrong output: {why}"));
            } else if let Some(point) = &p.point {
                run.history.record(point, measurement.time);
            }
            if measurement.correct {
                run.kept.insert(attempt, (p.code, p.ops));
            }
            run.trials.push(Trial {
                attempt,
                point: p.point,
                origin: p.origin,
                measurement,
                memo_hit,
            });
        }
        let best = run
            .trials
            .iter()
            .filter(|t| t.measurement.correct)
            .map(|t| t.measurement.time)
            .min_by(f64::total_cmp);
        let measured = run.trials.len() - before;
        let failed = run.failed.len() - failed_before;
        progress.advance(measured + failed, best);
        progress.say(&format!(
            "{label}: {measured} measured ({} from the memo table), {failed} skipped, {} kernels compiled; best so far {}",
            run.trials[before..].iter().filter(|t| t.memo_hit).count(),
            census.kernels_compiled,
            best.map_or("-".to_string(), |b| format!("{:.4} ms", b * 1e3))
        ));
        Ok(())
    }

    /// One resolve of `kernels`.
    fn resolve<W: Workload<L, B>>(
        &self,
        w: &W,
        kernels: &[BatchKernel<B::Source>],
    ) -> Result<Answers<B>, Error> {
        let mut resolver = Resolver::new(self.cache, self.backend).store(self.kernel_store);
        if let Some(split) = self.split {
            resolver = resolver.split(split);
        }
        let resolution = resolver.resolve(kernels).map_err(|e| Error::Resolve {
            workload: w.name().to_string(),
            kernels: kernels.len(),
            source: Box::new(e),
        })?;
        Ok((resolution.answers, resolution.census))
    }

    /// Checks a bound candidate, then times it when correct.
    fn check_and_time<W: Workload<L, B>>(
        &self,
        w: &W,
        bound: &mut W::Bound,
        label: &str,
    ) -> Result<Measurement, Error> {
        if let Err(why) = w.check(bound) {
            return Ok(Measurement::wrong(why));
        }
        let mut once = || w.run(bound);
        measure::time(&mut once, &self.measure).map_err(|why| Error::Run {
            workload: w.name().to_string(),
            candidate: label.to_string(),
            why,
        })
    }

    /// Renders `candidates` into one batch, resolves it, binds and checks each, then
    /// re-measures them interleaved over `rounds` rounds. A candidate that no longer
    /// compiles or computes a wrong result is an error (it was measured correct before).
    pub(crate) fn side_by_side<W: Workload<L, B>>(
        &self,
        w: &W,
        candidates: &[(&W::Code, &[L::Op])],
        rounds: usize,
    ) -> Result<(Vec<Measurement>, Census), Error> {
        let mut kernels = Vec::new();
        let mut parts = Vec::new();
        let fail = |i: usize, why: String| Error::Run {
            workload: w.name().to_string(),
            candidate: format!("finalist {}", i + 1),
            why,
        };
        for (i, (code, ops)) in candidates.iter().enumerate() {
            let r = w
                .render(code, ops, kernels.len())
                .map_err(|why| fail(i, why))?;
            let range = kernels.len()..kernels.len() + r.kernels.len();
            kernels.extend(r.kernels);
            parts.push((range, r.plan));
        }
        let (answers, census) = self.resolve(w, &kernels)?;
        let mut bound = Vec::new();
        for (i, (range, plan)) in parts.iter().enumerate() {
            let resolved = resolved_of(&answers, range.clone()).map_err(|(why, _)| fail(i, why))?;
            let mut b = w.bind(plan, &resolved).map_err(|why| fail(i, why))?;
            w.check(&mut b)
                .map_err(|why| fail(i, format!("wrong output: {why}")))?;
            bound.push(b);
        }
        let mut closures: Vec<Box<RunOnce<'_>>> = bound
            .iter_mut()
            .map(|b| Box::new(move || w.run(b)) as Box<RunOnce<'_>>)
            .collect();
        let mut runs: Vec<&mut RunOnce<'_>> = closures.iter_mut().map(|c| &mut **c).collect();
        let measured = measure::interleaved(&mut runs, &self.measure, rounds)
            .map_err(|(i, why)| fail(i, why))?;
        Ok((measured, census))
    }
}

/// One resolve's answers (one per kernel) and census.
type Answers<B> = (
    kernel_cache::Outcomes<<B as Backend>::Program, <B as Backend>::Error>,
    Census,
);

/// The seeds re-applied, and what the round did so far.
type SeedCandidates<C, O> = (Vec<Pending<C, O>>, SeedRound);

/// What a search accumulates.
struct Run<C, O> {
    trials: Vec<Trial>,
    failed: Vec<Failed>,
    /// The code and ops of every correct trial, by attempt (finalists are re-rendered).
    kept: BTreeMap<usize, (C, Vec<O>)>,
    history: History,
    attempts: usize,
    census: Census,
}

/// The answers of `range`, or the first failure's first line and whether it was
/// remembered.
fn resolved_of<P, E: std::error::Error + 'static>(
    answers: &[kernel_cache::Outcome<P, E>],
    range: std::ops::Range<usize>,
) -> Result<Vec<Resolved<P>>, (String, bool)> {
    let mut out = Vec::with_capacity(range.len());
    for i in range {
        match answers.get(i) {
            Some(Ok(r)) => out.push(r.clone()),
            Some(Err(e)) => {
                let text = e.to_string();
                // The compiler's first error line, else the error's first line.
                let why = text
                    .lines()
                    .skip(1)
                    .find(|l| l.contains("error"))
                    .or_else(|| text.lines().next())
                    .unwrap_or("")
                    .trim();
                return Err((schedule_cache::admin::short(why), e.remembered().is_some()));
            }
            None => return Err(("no answer for the kernel".to_string(), false)),
        }
    }
    Ok(out)
}

/// The memo key of a candidate's measurement: the workload, its tag (data and bindings),
/// the kernels' keys in order and the measurement settings.
fn memo_key<S>(workload: &str, tag: &str, kernels: &[BatchKernel<S>], m: &Measure) -> Key {
    let mut b = KeyBuilder::new(MEMO_TAG)
        .text(workload)
        .text(tag)
        .uint(kernels.len() as u64);
    for k in kernels {
        b = b.text(&k.key);
    }
    for part in m.key_parts() {
        b = b.uint(part);
    }
    b.finish()
}

/// The point of the space whose schedule on `code` saves to the same ops as `ops`, and
/// the saved form (to tell two seeds apart), when there is one.
fn point_of<L: ScheduleLanguage, B: Backend, W: Workload<L, B>>(
    lang: &L,
    w: &W,
    code: &W::Code,
    placements: &BTreeMap<schedule_cache::NodeId, schedule_cache::Placement>,
    ops: &[L::Op],
) -> (Option<Point>, Option<String>) {
    let Ok(identity) = Subject::new(code).with_placements(placements).identity() else {
        return (None, None);
    };
    let registry = Registry::new(&identity);
    let Ok((want, _)) = to_saved(lang, &registry, ops) else {
        return (None, None);
    };
    let form = format!("{:?}", want.ops);
    let point = w.space().legal().iter().find_map(|p| {
        let ops = w.ops_at(code, p)?;
        let (have, _) = to_saved(lang, &registry, &ops).ok()?;
        (have.ops == want.ops).then(|| p.clone())
    });
    (point, Some(form))
}

/// The workload's name on a schedule-cache error.
fn schedule_error<L: ScheduleLanguage, B: Backend, W: Workload<L, B>>(
    w: &W,
    source: schedule_cache::Error,
) -> Error {
    Error::Schedule {
        workload: w.name().to_string(),
        source,
    }
}

/// An origin in words (for dropped seeds).
fn origin_words(origin: &Origin) -> String {
    match origin {
        Origin::Seed { from } => from.clone(),
        Origin::Baseline => "the baseline".to_string(),
        Origin::Strategy => "the strategy".to_string(),
        Origin::Replay => "the stored winner".to_string(),
    }
}

/// A candidate as progress lines name it.
fn label_of<L: ScheduleLanguage, B: Backend, W: Workload<L, B>, C, O>(
    w: &W,
    p: &Pending<C, O>,
) -> String {
    match (&p.point, &p.origin) {
        (Some(point), Origin::Seed { .. }) => format!("{} (seed)", w.describe(point)),
        (Some(point), _) => w.describe(point),
        (None, Origin::Seed { from }) => format!("seed from {from}"),
        (None, _) => "(no point)".to_string(),
    }
}
