//! What a demo run reports: [`Report`], per kernel [`KernelReport`], and the [`Totals`].

use std::fmt;
use std::path::PathBuf;

use crate::KeyMode;
use crate::search::ms;

/// Where a kernel's winning schedule came from in this run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    /// Found by searching the schedule space (and then stored on disk).
    Searched,
    /// Found on disk and replayed on freshly built code (no search).
    Replayed,
}

/// One tuned kernel.
#[derive(Clone, Debug, PartialEq)]
pub struct KernelReport {
    /// The routine's name (its segment kernels are `<name>__seg<i>`).
    pub name: String,
    /// What it computes.
    pub description: String,
    /// Searched or replayed.
    pub origin: Origin,
    /// Candidate schedules measured (0 when replayed).
    pub candidates: usize,
    /// Candidates rejected because their output did not match the Rust reference.
    pub rejected: usize,
    /// Segment kernels rendered and resolved for this routine.
    pub kernels_rendered: usize,
    /// Median time of the unscheduled code, in seconds (as stored, when replayed).
    pub baseline_seconds: Option<f64>,
    /// Median time of the winner measured in this run, in seconds.
    pub best_seconds: f64,
    /// When replayed: the winner's median time stored by the search that picked it.
    pub stored_best_seconds: Option<f64>,
    /// When replayed and this run's time is further from the stored one than the samples'
    /// spread: the note saying so, with the load average ([`timing_note`]).
    pub timing_note: Option<String>,
    /// The winning schedule in words (loops and nodes named by their labels).
    pub schedule: String,
    /// The winning schedule as saved (RON of schedule-cache's `SavedSchedule`): equal
    /// across processes for the same winner.
    pub schedule_ron: String,
    /// The disk key the winner is stored under (empty without a timing identity).
    pub key: String,
    /// What the disk lookup of this run found: `hit`, or why it missed (which key
    /// components differ when the same code has entries under other components).
    pub disk_lookup: String,
    /// When searched with seeding on: what the seeds were and did.
    pub seeding: Option<Seeding>,
    /// Candidates that failed to compile, each with the compiler's first diagnostics:
    /// reported and skipped (never measured, never a winner), not a failed run.
    pub failed_to_compile: Vec<String>,
    /// The candidates the search measured (or the memo table answered), in order: what
    /// a plain loop would compile and time to do the same search
    /// ([`plain_loop`](crate::plain_loop)). Empty when replayed.
    pub measured: Vec<Measured>,
}

/// One candidate a search measured, as the tuner timed it.
#[derive(Clone, Debug, PartialEq)]
pub struct Measured {
    /// Its point in the kernel's space (`None` for a seed outside it).
    pub point: Option<Vec<usize>>,
    /// Timed samples.
    pub samples: usize,
    /// Runs per sample.
    pub iterations: u32,
    /// Whether the memo table answered it (nothing was run this time).
    pub memo_hit: bool,
}

/// What seeding did for one searched kernel.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Seeding {
    /// `seeded from 1 entry (differ in: codegen)`, `seeded from matmul 64x64x64`, or
    /// `no seed`.
    pub summary: String,
    /// Seeds the schedule cache offered.
    pub offered: usize,
    /// Seeds measured (first, in a round of their own), each checked against the
    /// reference before it could win.
    pub seed_trials: usize,
    /// Candidates the seeded search measured in all (seeds included).
    pub trials: usize,
    /// Seeds dropped before measuring, each with where it came from and why (it does not
    /// rebuild on the code, no longer applies, is beyond the replay caps).
    pub dropped: Vec<String>,
    /// Seeds measured whose output did not match the reference: rejected, never stored.
    pub seeds_rejected: usize,
    /// Seeds that failed to compile under this regime: skipped.
    pub seeds_failed: usize,
    /// Whether the winner was one of the seeds (measured here like every candidate).
    pub winner_from_seed: bool,
    /// With `compare_cold`: the seeded search against an unseeded one of the same budget.
    pub cold: Option<ColdComparison>,
}

/// A seeded search against a cold (unseeded) search of the same budget, in one process.
#[derive(Clone, Debug, PartialEq)]
pub struct ColdComparison {
    /// Candidates the cold search measured.
    pub cold_trials: usize,
    /// The seeded search's first attempt (1-based) within 5% of the faster of the two
    /// winners as re-measured side by side (the tuner's `trials_to_match`); `None` if none
    /// was.
    pub trials_to_match: Option<usize>,
    /// The seeded winner, re-measured side by side with the cold winner (median of
    /// interleaved measurements), in seconds.
    pub seeded_seconds: f64,
    /// The cold winner, re-measured side by side with the seeded winner (interleaved, always,
    /// even when both are the same point), in seconds.
    pub cold_seconds: f64,
    /// Both winners are the same point of the space (still timed apart).
    pub same_program: bool,
}

/// Counters of one run, over every kernel.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Totals {
    /// Segment kernels rendered and handed to the kernel cache.
    pub kernels_rendered: u64,
    /// Kernels compiled (one per distinct key).
    pub kernels_compiled: u64,
    /// Kernels a cache keyed by the exact text (SHA-256 of text, options and compiler:
    /// see [`verbatim_key`](crate::verbatim_key)) would have compiled over this run's
    /// candidate stream: the distinct verbatim keys among the kernels rendered. Equal to
    /// `kernels_compiled` with [`KeyMode::Verbatim`](crate::KeyMode::Verbatim).
    pub verbatim_compiles: u64,
    /// Kernels the kernel cache answered from earlier compiles.
    pub kernels_reused: u64,
    /// Programs (shared objects) compiled.
    pub programs_compiled: u64,
    /// Kernels answered by loading a program from the persistent kernel store (not
    /// compiled in this run).
    pub kernels_loaded: u64,
    /// Programs (shared objects) loaded from the persistent kernel store.
    pub programs_loaded: u64,
    /// Resolve calls.
    pub resolves: u64,
    /// Resolve calls that compiled anything.
    pub compiling_resolves: u64,
    /// Measurements answered by the memo table.
    pub memo_hits: u64,
    /// Measurements actually run.
    pub memo_misses: u64,
    /// Disk lookups of winners.
    pub disk_lookups: u64,
    /// Disk lookups that found a usable winner: replayed, and computing the right result
    /// (a stored winner that does not apply to the code, is beyond the replay caps or
    /// computes a wrong result is a miss, and its kernel is searched again).
    pub disk_hits: u64,
    /// Winners stored on disk.
    pub disk_stored: u64,
    /// Winners not stored because the store already held one measured faster under the
    /// same key (the demo stores under keep-faster: another run stored it meanwhile).
    pub disk_kept_faster: u64,
    /// Wall time spent resolving (compiling), in seconds.
    pub compile_seconds: f64,
    /// Wall time spent measuring (including checks), in seconds.
    pub measure_seconds: f64,
}

impl Totals {
    /// Kernels rendered that needed no compile of their own: answered by the cache or
    /// sharing a renamed twin's compile in the same batch.
    pub fn kernels_not_compiled(&self) -> u64 {
        self.kernels_rendered.saturating_sub(self.kernels_compiled)
    }
}

/// What one demo run did.
#[derive(Clone, Debug, PartialEq)]
pub struct Report {
    /// The disk cache directory used.
    pub cache_dir: PathBuf,
    /// Where winners are looked up and stored, as the report names it: `disk`, or the
    /// directory then Redis with `--redis`.
    pub store: String,
    /// The C compiler (first line of its `--version`).
    pub compiler: String,
    /// The machine, readable ([`schedule_cache::Cpu::readable`]): winners are keyed by its
    /// full form, so another CPU never replays them.
    pub device: String,
    /// How kernels were keyed.
    pub keys: KeyMode,
    /// Whether the memo table answered repeated measurements.
    pub memo: bool,
    /// One report per kernel, in the demo's order.
    pub kernels: Vec<KernelReport>,
    /// Counters over the run.
    pub totals: Totals,
    /// Candidates a cold search of these kernels measures (the search budget).
    pub cold_search_candidates: usize,
    /// Segment kernels a cold search of these kernels renders and resolves (at most).
    pub cold_search_kernels: usize,
    /// Whole run wall time, in seconds.
    pub total_seconds: f64,
    /// How candidates were timed (the tuner's settings for this run's `reps`).
    pub measure: tuner::Measure,
}

impl Report {
    /// How many kernels were replayed from disk.
    pub fn replayed(&self) -> usize {
        self.kernels
            .iter()
            .filter(|k| k.origin == Origin::Replayed)
            .count()
    }
}

/// `n` and `word`, pluralized with an `s` unless `n` is 1.
pub(crate) fn count(n: impl Into<u64>, word: &str) -> String {
    let n = n.into();
    if n == 1 {
        format!("1 {word}")
    } else {
        format!("{n} {word}s")
    }
}

/// `part / whole` as a ratio (`0.47x`), or `-` when `whole` is 0.
fn ratio(part: u64, whole: u64) -> String {
    if whole == 0 {
        "-".to_string()
    } else {
        format!("{:.2}x", part as f64 / whole as f64)
    }
}

fn pct(part: u64, whole: u64) -> String {
    if whole == 0 {
        "-".to_string()
    } else {
        format!("{:.0}%", 100.0 * part as f64 / whole as f64)
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let t = &self.totals;
        writeln!(
            f,
            "kcache demo: {} tuned with {}",
            count(self.kernels.len() as u64, "kernel"),
            self.compiler
        )?;
        writeln!(f, "device: {}", self.device)?;
        writeln!(f, "cache directory: {}", self.cache_dir.display())?;
        writeln!(f)?;
        writeln!(
            f,
            "{:<8} {:<9} {:>5} {:>7} {:>10} {:>10} {:>7} {:>10}  schedule",
            "kernel", "origin", "cands", "kernels", "baseline", "best", "speedup", "this run"
        )?;
        for k in &self.kernels {
            let origin = match k.origin {
                Origin::Searched => "searched",
                Origin::Replayed => "replayed",
            };
            // For a replayed winner, baseline and best are the figures its search stored;
            // "this run" is the replayed code measured now.
            let best = k.stored_best_seconds.unwrap_or(k.best_seconds);
            let speedup = k
                .baseline_seconds
                .map_or("-".to_string(), |b| format!("{:.1}x", b / best));
            let rejected = if k.rejected > 0 {
                format!(" [{} rejected: wrong output]", k.rejected)
            } else {
                String::new()
            };
            writeln!(
                f,
                "{:<8} {:<9} {:>5} {:>7} {:>10} {:>10} {:>7} {:>10}  {}{rejected}",
                k.name,
                origin,
                k.candidates,
                k.kernels_rendered,
                k.baseline_seconds.map_or("-".to_string(), ms),
                ms(best),
                speedup,
                ms(k.best_seconds),
                k.schedule
            )?;
        }
        for k in &self.kernels {
            if let Some(note) = &k.timing_note {
                writeln!(f, "  {}: {note}", k.name)?;
            }
        }
        for k in self.kernels.iter().filter(|k| k.origin == Origin::Searched) {
            writeln!(f, "  {}: disk lookup {}", k.name, k.disk_lookup)?;
            for why in &k.failed_to_compile {
                writeln!(
                    f,
                    "  {}: a candidate failed to compile (skipped): {why}",
                    k.name
                )?;
            }
            let Some(s) = &k.seeding else { continue };
            if s.offered == 0 && s.dropped.is_empty() {
                continue;
            }
            writeln!(
                f,
                "  {}: {}: {} seed {} measured first ({} rejected: wrong output, {} failed to compile), {} in all; the winner {}",
                k.name,
                s.summary,
                s.seed_trials,
                if s.seed_trials == 1 {
                    "trial"
                } else {
                    "trials"
                },
                s.seeds_rejected,
                s.seeds_failed,
                count(s.trials as u64, "trial"),
                if s.winner_from_seed {
                    "is a seed"
                } else {
                    "is a searched candidate"
                }
            )?;
            for d in &s.dropped {
                writeln!(f, "  {}: seed dropped: {d}", k.name)?;
            }
            if let Some(c) = &s.cold {
                let side_by_side = if c.same_program {
                    format!("the same program, {}", ms(c.seeded_seconds))
                } else {
                    format!(
                        "side by side: seeded {} vs cold {} ({:.2}x)",
                        ms(c.seeded_seconds),
                        ms(c.cold_seconds),
                        c.seeded_seconds / c.cold_seconds
                    )
                };
                writeln!(
                    f,
                    "  {}: against a cold search of {}: within 5% of its winner at trial {}; winners {side_by_side}",
                    k.name,
                    count(c.cold_trials as u64, "trial"),
                    c.trials_to_match.map_or("-".to_string(), |t| t.to_string()),
                )?;
            }
        }
        writeln!(f)?;
        let twins = t
            .kernels_rendered
            .saturating_sub(t.kernels_compiled + t.kernels_reused + t.kernels_loaded);
        writeln!(
            f,
            "kernel cache: {} kernels rendered, {} compiled, {} reused from earlier compiles, {twins} renamed twins within a batch (hit rate {})",
            t.kernels_rendered,
            t.kernels_compiled,
            t.kernels_reused,
            pct(t.kernels_not_compiled(), t.kernels_rendered)
        )?;
        match self.keys {
            KeyMode::Canonical => writeln!(
                f,
                "kernel keys: canonical; keyed by the exact text (SHA-256, as Triton's and ccache's keys) the same candidates would have compiled {} kernels: {} compiles with canonical keys",
                t.verbatim_compiles,
                ratio(t.kernels_compiled, t.verbatim_compiles)
            )?,
            KeyMode::Verbatim => writeln!(
                f,
                "kernel keys: verbatim (SHA-256 of the exact text, options and compiler, as Triton's and ccache's keys; --keys canonical shares renamed twins)"
            )?,
        }
        let per_compile = if t.compiling_resolves == 0 {
            "-".to_string()
        } else {
            format!(
                "{:.1}",
                t.programs_compiled as f64 / t.compiling_resolves as f64
            )
        };
        writeln!(
            f,
            "compiles: {} in {} ({per_compile} programs per compile, split compile on), {:.2} s",
            count(t.programs_compiled, "program"),
            count(t.compiling_resolves, "compiling resolve"),
            t.compile_seconds
        )?;
        writeln!(
            f,
            "kernel store: {} loaded from the kernel store ({}), {} compiled",
            count(t.kernels_loaded, "kernel"),
            count(t.programs_loaded, "program"),
            t.kernels_compiled
        )?;
        if self.memo {
            writeln!(
                f,
                "memo table: {} of {} measurements answered without running (hit rate {}), {:.2} s measuring",
                t.memo_hits,
                t.memo_hits + t.memo_misses,
                pct(t.memo_hits, t.memo_hits + t.memo_misses),
                t.measure_seconds
            )?;
        } else {
            writeln!(
                f,
                "memo table: off (--no-memo): all {} measurements run, {:.2} s measuring",
                t.memo_misses, t.measure_seconds
            )?;
        }
        writeln!(
            f,
            "schedule store ({}): {} of {} winners found (hit rate {}), {} stored{}",
            self.store,
            t.disk_hits,
            t.disk_lookups,
            pct(t.disk_hits, t.disk_lookups),
            t.disk_stored,
            if t.disk_kept_faster > 0 {
                format!(", {} kept a faster stored winner", t.disk_kept_faster)
            } else {
                String::new()
            }
        )?;
        writeln!(f, "time: {:.2} s in all", self.total_seconds)?;
        writeln!(f)?;
        let n = self.kernels.len();
        let replayed = self.replayed();
        if replayed == n && n > 0 {
            writeln!(
                f,
                "replayed {replayed}/{n} winners from {}: compiled {} in {} instead of a cold search of up to {} candidates ({} kernels to render and resolve)",
                self.store,
                count(t.kernels_compiled, "kernel"),
                count(t.programs_compiled, "program"),
                self.cold_search_candidates,
                self.cold_search_kernels
            )?;
        } else if replayed > 0 {
            writeln!(
                f,
                "replayed {replayed}/{n} winners from {}, searched the other {}: compiled {} kernels",
                self.store,
                n - replayed,
                t.kernels_compiled
            )?;
        } else {
            let dir = self.cache_dir.display();
            let stored = if t.disk_stored as usize == n {
                format!("winners stored in {dir}")
            } else if (t.disk_stored + t.disk_kept_faster) as usize == n {
                format!(
                    "{} of {n} winners stored in {dir} (it held faster ones for the others)",
                    t.disk_stored
                )
            } else {
                format!(
                    "{} of {n} winners stored in {dir} (the disk cache refused or kept others)",
                    t.disk_stored
                )
            };
            writeln!(
                f,
                "searched {}: {}, {} compiled; {stored}",
                count(n as u64, "kernel"),
                count(
                    self.kernels
                        .iter()
                        .map(|k| k.candidates as u64)
                        .sum::<u64>(),
                    "candidate"
                ),
                count(t.kernels_compiled, "kernel"),
            )?;
            if t.disk_stored > 0 {
                writeln!(
                    f,
                    "run it again to replay them from {} instead of searching",
                    self.store
                )?;
            }
        }
        Ok(())
    }
}

/// The one-minute load average (`/proc/loadavg`), `None` where it cannot be read.
pub fn load_average() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// A note for a replayed winner whose median time `now` (this run's samples) differs from
/// the `stored` samples' median by more than their spread (the larger of the two ranges,
/// max - min): the times and the load average `load` (one minute) beside the cores, since a
/// loaded machine slows what it times; the replayed winner is the stored one all the same.
/// `None` within the spread or without samples.
pub fn timing_note(stored: &[f64], now: &[f64], load: Option<f64>) -> Option<String> {
    let range = |t: &[f64]| {
        let max = t.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let min = t.iter().copied().fold(f64::INFINITY, f64::min);
        max - min
    };
    let (then, here) = (crate::search::median(stored)?, crate::search::median(now)?);
    let spread = range(stored).max(range(now));
    if (here - then).abs() <= spread {
        return None;
    }
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let load = match load {
        Some(l) => format!("load average {l:.2} (1 min) on {cores} cores"),
        None => "load average unknown".to_string(),
    };
    Some(format!(
        "replayed in {}, stored {}: further apart than the samples' spread ({}); {load}: a \
         busy machine moves times, the winner is the stored one all the same",
        ms(here),
        ms(then),
        ms(spread)
    ))
}

#[cfg(test)]
mod timing_note_tests {
    use super::*;

    #[test]
    fn a_note_only_beyond_the_spread_with_the_load() {
        let stored = [1.0e-3, 1.1e-3, 1.2e-3];
        // Within the spread: no note.
        assert_eq!(
            timing_note(&stored, &[1.15e-3, 1.2e-3, 1.3e-3], Some(9.0)),
            None
        );
        // Four times slower, tight samples: a note with both times and the load.
        let note = timing_note(&stored, &[4.0e-3, 4.1e-3, 4.2e-3], Some(7.5)).expect("a note");
        assert!(
            note.contains("replayed in 4.100 ms, stored 1.100 ms"),
            "{note}"
        );
        assert!(note.contains("spread (0.200 ms)"), "{note}");
        assert!(note.contains("load average 7.50 (1 min)"), "{note}");
        // Faster beyond the spread is noted too; no samples, no note.
        assert!(
            timing_note(&stored, &[0.2e-3, 0.21e-3], None).is_some_and(|n| n.contains("unknown"))
        );
        assert_eq!(timing_note(&[], &[1.0], None), None);
    }
}
