//! The cold-comparison harness: a seeded search beside an unseeded one, each with its own
//! memo table and its own candidate order, both winners re-measured side by side.

use kernel_cache::Backend;
use memo_cache::with_cache;
use schedule_cache::{ScheduleLanguage, Store};

use crate::Error;
use crate::measure::Measurement;
use crate::strategy::Strategy;
use crate::tuner::{SearchOptions, SearchReport, Tuner};
use crate::workload::Workload;

/// The harness's settings.
#[derive(Clone, Debug, PartialEq)]
pub struct ColdOptions {
    /// Each search's budget (the same for both).
    pub budget: usize,
    /// Candidates per resolve.
    pub batch: usize,
    /// The seeded search's order seed.
    pub seeded_order: u64,
    /// The unseeded search's order seed (independent of the seeded one's: pick another).
    pub cold_order: u64,
    /// The most seeds the seeded search measures.
    pub max_seeds: usize,
    /// Rounds of the side-by-side re-measurement of the two winners.
    pub rounds: usize,
    /// "Within" means at most `1 + within` times the best re-measured winner (0.05: 5%).
    pub within: f64,
}

impl Default for ColdOptions {
    /// Budget 24 in batches of 8, orders 1 and 2, at most 4 seeds, 9 rounds, within 5%.
    fn default() -> ColdOptions {
        ColdOptions {
            budget: 24,
            batch: 8,
            seeded_order: 1,
            cold_order: 2,
            max_seeds: 4,
            rounds: 9,
            within: 0.05,
        }
    }
}

/// A seeded search against a cold one.
#[derive(Clone, Debug)]
pub struct ColdComparison<C, O> {
    /// The seeded search (its own memo table, order `seeded_order`).
    pub seeded: SearchReport<C, O>,
    /// The unseeded search (its own memo table, order `cold_order`, no seeds).
    pub cold: SearchReport<C, O>,
    /// The seeded winner, re-measured beside the cold one (interleaved).
    pub seeded_time: Measurement,
    /// The cold winner, re-measured beside the seeded one (interleaved).
    pub cold_time: Measurement,
    /// The target: `(1 + within)` times the faster re-measured winner.
    pub target: f64,
    /// The seeded search's first attempt within the target (see [`trials_to_match`]).
    pub seeded_trials: Option<usize>,
    /// The cold search's first attempt within the target.
    pub cold_trials: Option<usize>,
}

impl<C, O> ColdComparison<C, O> {
    /// Seeded trials-to-match over cold trials-to-match; a search that never came within
    /// the target counts its budget plus one.
    pub fn trials_ratio(&self) -> f64 {
        let or_over = |t: Option<usize>, r: &SearchReport<C, O>| t.unwrap_or(r.budget + 1) as f64;
        or_over(self.seeded_trials, &self.seeded) / or_over(self.cold_trials, &self.cold)
    }

    /// The seeded winner's re-measured time over the cold winner's (below 1: the seeded
    /// winner is faster).
    pub fn quality(&self) -> f64 {
        self.seeded_time.time / self.cold_time.time
    }
}

/// The first attempt of `report` within `target` seconds: the first trial whose search
/// time is within it, or the winner's attempt when only its re-measured time
/// (`winner_time`) is.
pub fn trials_to_match<C, O>(
    report: &SearchReport<C, O>,
    winner_time: f64,
    target: f64,
) -> Option<usize> {
    let first = report.first_within(target);
    let winner = (winner_time <= target).then_some(report.winner.attempt);
    match (first, winner) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

impl<L: ScheduleLanguage, S: Store, B: Backend> Tuner<'_, L, S, B> {
    /// Runs a seeded search and an unseeded one of the same budget, each with a fresh
    /// memo table of its own and its own order seed (`make_strategy` builds a fresh
    /// strategy for each), then re-measures both winners side by side, interleaved,
    /// always (even when they are the same program), and returns both searches with
    /// trials-to-match against the faster re-measured winner. Nothing is stored.
    pub fn compare_cold<W: Workload<L, B>>(
        &self,
        w: &W,
        make_strategy: &mut dyn FnMut() -> Box<dyn Strategy>,
        options: &ColdOptions,
    ) -> Result<ColdComparison<W::Code, L::Op>, Error> {
        if options.rounds == 0 || options.within.is_nan() || options.within < 0.0 {
            return Err(Error::InvalidSetting(
                "ColdOptions: rounds at least 1, within a non-negative number".to_string(),
            ));
        }
        let search = |order_seed, seeds: bool, make: &mut dyn FnMut() -> Box<dyn Strategy>| {
            let opts = SearchOptions {
                budget: options.budget,
                batch: options.batch,
                order_seed,
                seeds,
                max_seeds: options.max_seeds,
                baseline_first: true,
            };
            // A table of its own, dropped when the search ends.
            with_cache(true, |memo| self.search(w, &mut *make(), &opts, memo))
        };
        let seeded = search(options.seeded_order, true, make_strategy)?;
        let cold = search(options.cold_order, false, make_strategy)?;
        let pair = [
            (&seeded.winner.code, seeded.winner.ops.as_slice()),
            (&cold.winner.code, cold.winner.ops.as_slice()),
        ];
        let (mut times, _) = self.side_by_side(w, &pair, options.rounds)?;
        let cold_time = times.pop().ok_or_else(|| missing(w))?;
        let seeded_time = times.pop().ok_or_else(|| missing(w))?;
        let target = seeded_time.time.min(cold_time.time) * (1.0 + options.within);
        let seeded_trials = trials_to_match(&seeded, seeded_time.time, target);
        let cold_trials = trials_to_match(&cold, cold_time.time, target);
        Ok(ColdComparison {
            seeded,
            cold,
            seeded_time,
            cold_time,
            target,
            seeded_trials,
            cold_trials,
        })
    }
}

fn missing<L: ScheduleLanguage, B: Backend, W: Workload<L, B>>(w: &W) -> Error {
    Error::Run {
        workload: w.name().to_string(),
        candidate: "a winner compared side by side".to_string(),
        why: "no measurement".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::measure::Measurement;
    use crate::tuner::{Origin, SearchReport, Trial, Winner};
    use kernel_cache::Census;

    fn report(times: &[f64], winner: usize) -> SearchReport<(), ()> {
        let trials = times
            .iter()
            .enumerate()
            .map(|(i, &t)| Trial {
                attempt: i + 1,
                point: Some(vec![i]),
                origin: Origin::Strategy,
                measurement: Measurement::of_samples(vec![t], 1, Default::default()),
                memo_hit: false,
            })
            .collect();
        SearchReport {
            workload: "w".to_string(),
            strategy: "s".to_string(),
            order_seed: 0,
            budget: 10,
            attempts: times.len(),
            trials,
            failed: Vec::new(),
            seeds: None,
            finalists: Vec::new(),
            winner: Winner {
                attempt: winner,
                point: None,
                origin: Origin::Strategy,
                code: (),
                ops: Vec::new(),
                measurement: Measurement::of_samples(vec![1.0], 1, Default::default()),
            },
            baseline: None,
            memo_hits: 0,
            memo_misses: 0,
            census: Census::default(),
        }
    }

    #[test]
    fn trials_to_match_is_the_first_attempt_within_the_target() {
        let r = report(&[3.0, 1.2, 1.04, 1.0], 4);
        assert_eq!(trials_to_match(&r, 1.0, 1.05), Some(3));
        // Nothing measured within, but the re-measured winner is: its attempt.
        let r = report(&[3.0, 1.2, 1.1], 2);
        assert_eq!(trials_to_match(&r, 1.0, 1.05), Some(2));
        // Neither: never.
        assert_eq!(trials_to_match(&r, 1.2, 1.05), None);
    }

    #[test]
    fn a_search_that_never_matches_counts_its_budget_plus_one() {
        let seeded = report(&[1.0], 1);
        let cold = report(&[2.0], 1);
        let c = ColdComparison {
            seeded_time: Measurement::of_samples(vec![1.0], 1, Default::default()),
            cold_time: Measurement::of_samples(vec![2.0], 1, Default::default()),
            target: 1.05,
            seeded_trials: Some(1),
            cold_trials: None,
            seeded,
            cold,
        };
        assert_eq!(c.trials_ratio(), 1.0 / 11.0);
        assert_eq!(c.quality(), 0.5);
    }
}
