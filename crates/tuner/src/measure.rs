//! Measurement a user can trust on a noisy machine: warm-up, samples long enough for the
//! clock, repeats until the spread is within a bound (or a cap), and interleaved
//! re-measurement of finalists.

use std::time::{Duration, Instant};

use crate::Error;

/// Which statistic of a measurement's samples ranks candidates ([`Measurement::time`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Estimate {
    /// The median sample.
    Median,
    /// The fastest sample. Other processes only add time to a sample, so on a shared,
    /// loaded machine the minimum is the steadiest estimate of what a candidate costs
    /// (the median moves with the load once most samples are interrupted).
    #[default]
    Min,
}

/// How candidates are timed.
///
/// One *sample* runs the candidate as many times as it takes to last at least
/// `min_sample` (calibrated once per candidate, at most `max_iterations` runs) and
/// records the mean time of one run. A measurement takes `warmup` untimed runs, then
/// samples until it has at least `min_samples` and their spread is within `spread_bound`,
/// or it has `max_samples`.
#[derive(Clone, Debug, PartialEq)]
pub struct Measure {
    /// Untimed runs before the first sample (caches, page faults, frequency ramp-up).
    pub warmup: usize,
    /// The least duration of one sample.
    pub min_sample: Duration,
    /// The most runs one sample makes.
    pub max_iterations: u32,
    /// The fewest samples of one measurement (at least 1).
    pub min_samples: usize,
    /// The most samples of one measurement (at least `min_samples`).
    pub max_samples: usize,
    /// The spread (see [`spread`]) below which sampling stops early.
    pub spread_bound: f64,
    /// How many of a search's fastest candidates are re-measured before one is chosen.
    pub finalists: usize,
    /// Rounds of the interleaved re-measurement (each round one sample of each).
    pub finalist_rounds: usize,
    /// The statistic that ranks candidates.
    pub estimate: Estimate,
}

impl Default for Measure {
    /// 2 warm-up runs, samples of at least 200 µs (at most 4096 runs each), 5 to 25
    /// samples until the spread is within 3%, 3 finalists re-measured over 9
    /// interleaved rounds, ranked by the fastest sample.
    fn default() -> Measure {
        Measure {
            warmup: 2,
            min_sample: Duration::from_micros(200),
            max_iterations: 4096,
            min_samples: 5,
            max_samples: 25,
            spread_bound: 0.03,
            finalists: 3,
            finalist_rounds: 9,
            estimate: Estimate::Min,
        }
    }
}

impl Measure {
    /// Quick settings for tests and smoke runs: 1 warm-up run, samples of 50 µs, 3 to 7
    /// samples within 10%, 2 finalists over 3 rounds. Not for figures.
    pub fn quick() -> Measure {
        Measure {
            warmup: 1,
            min_sample: Duration::from_micros(50),
            max_iterations: 1024,
            min_samples: 3,
            max_samples: 7,
            spread_bound: 0.10,
            finalists: 2,
            finalist_rounds: 3,
            estimate: Estimate::Min,
        }
    }

    /// Errors when a count is zero where it must not be, `max_samples < min_samples`,
    /// or the bound is not a non-negative number.
    pub fn check(&self) -> Result<(), Error> {
        let bad = |what: &str| Err(Error::InvalidSetting(format!("Measure: {what}")));
        if self.min_samples == 0 || self.max_iterations == 0 {
            return bad("min_samples and max_iterations must be at least 1");
        }
        if self.max_samples < self.min_samples {
            return bad("max_samples must be at least min_samples");
        }
        if self.spread_bound.is_nan() || self.spread_bound < 0.0 {
            return bad("spread_bound must be a non-negative number");
        }
        if self.finalists == 0 || self.finalist_rounds == 0 {
            return bad("finalists and finalist_rounds must be at least 1");
        }
        Ok(())
    }

    /// The parts of the settings that change a measurement, for the memo key.
    pub(crate) fn key_parts(&self) -> [u64; 7] {
        [
            self.warmup as u64,
            self.min_sample.as_nanos() as u64,
            u64::from(self.max_iterations),
            self.min_samples as u64,
            self.max_samples as u64,
            self.spread_bound.to_bits(),
            match self.estimate {
                Estimate::Median => 0,
                Estimate::Min => 1,
            },
        ]
    }
}

/// A candidate's measurement (what the memo table keeps).
#[derive(Clone, Debug, PartialEq)]
pub struct Measurement {
    /// Whether the output matched the workload's check. A wrong candidate is never timed
    /// and never a winner.
    pub correct: bool,
    /// Why the output was wrong (the workload's words), when it was.
    pub wrong: Option<String>,
    /// The estimate that ranks it ([`Measure::estimate`] of the samples): seconds per
    /// run (infinite when not correct).
    pub time: f64,
    /// The median sample: seconds per run (infinite when not correct).
    pub median: f64,
    /// The fastest sample: seconds per run (infinite when not correct).
    pub min: f64,
    /// The samples' spread (see [`spread`]).
    pub spread: f64,
    /// Every sample, in order: seconds per run.
    pub samples: Vec<f64>,
    /// Runs per sample.
    pub iterations: u32,
}

impl Measurement {
    /// A candidate whose output was wrong.
    pub fn wrong(why: String) -> Measurement {
        Measurement {
            correct: false,
            wrong: Some(why),
            time: f64::INFINITY,
            median: f64::INFINITY,
            min: f64::INFINITY,
            spread: 0.0,
            samples: Vec::new(),
            iterations: 0,
        }
    }

    /// A correct candidate's measurement from its samples, ranked by `estimate`.
    pub fn of_samples(samples: Vec<f64>, iterations: u32, estimate: Estimate) -> Measurement {
        let median = median(&samples).unwrap_or(f64::INFINITY);
        let min = samples.iter().copied().fold(f64::INFINITY, f64::min);
        Measurement {
            correct: true,
            wrong: None,
            time: match estimate {
                Estimate::Median => median,
                Estimate::Min => min,
            },
            median,
            min,
            spread: spread(&samples),
            samples,
            iterations,
        }
    }
}

/// The median of `values` (the upper one of an even count), `None` when empty.
pub fn median(values: &[f64]) -> Option<f64> {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied()
}

/// The relative interquartile range of `values`: (third quartile - first quartile) /
/// median, 0 for fewer than two values. Robust to a few outliers (a sample hit by an
/// interrupt), unlike max/min.
pub fn spread(values: &[f64]) -> f64 {
    if values.len() < 2 {
        return 0.0;
    }
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let q = |f: f64| {
        let x = f * (v.len() - 1) as f64;
        let (lo, hi) = (x.floor() as usize, x.ceil() as usize);
        v[lo] + (v[hi] - v[lo]) * (x - lo as f64)
    };
    let m = q(0.5);
    if m > 0.0 {
        (q(0.75) - q(0.25)) / m
    } else {
        0.0
    }
}

/// One timed run of a candidate; `Err(why)` when it fails.
pub(crate) type RunOnce<'r> = dyn FnMut() -> Result<(), String> + 'r;

/// How many runs make one sample of at least `min_sample`, from one timed run.
pub(crate) fn calibrate(run: &mut RunOnce<'_>, m: &Measure) -> Result<u32, String> {
    let start = Instant::now();
    run()?;
    let once = start.elapsed().as_secs_f64().max(1e-9);
    let n = (m.min_sample.as_secs_f64() / once).ceil();
    Ok(n.clamp(1.0, f64::from(m.max_iterations)) as u32)
}

/// One sample: `iterations` runs, the mean time of one.
pub(crate) fn sample(run: &mut RunOnce<'_>, iterations: u32) -> Result<f64, String> {
    let start = Instant::now();
    for _ in 0..iterations {
        run()?;
    }
    Ok(start.elapsed().as_secs_f64() / f64::from(iterations.max(1)))
}

/// Times a candidate known to be correct: warm-up, calibration, then samples until the
/// spread is within the bound (after `min_samples`) or `max_samples` are taken.
pub(crate) fn time(run: &mut RunOnce<'_>, m: &Measure) -> Result<Measurement, String> {
    for _ in 0..m.warmup {
        run()?;
    }
    let iterations = calibrate(run, m)?;
    let mut samples = Vec::with_capacity(m.min_samples);
    while samples.len() < m.max_samples {
        samples.push(sample(run, iterations)?);
        if samples.len() >= m.min_samples && spread(&samples) <= m.spread_bound {
            break;
        }
    }
    Ok(Measurement::of_samples(samples, iterations, m.estimate))
}

/// Re-measures candidates side by side: a warm-up and calibration each, then `rounds`
/// rounds of one sample of each in turn (so a slow spell of the machine hits all of them
/// alike). Returns one measurement per candidate, in order; `Err((i, why))` names the
/// candidate that failed.
pub(crate) fn interleaved(
    runs: &mut [&mut RunOnce<'_>],
    m: &Measure,
    rounds: usize,
) -> Result<Vec<Measurement>, (usize, String)> {
    let mut iterations = Vec::with_capacity(runs.len());
    for (i, run) in runs.iter_mut().enumerate() {
        for _ in 0..m.warmup {
            run().map_err(|e| (i, e))?;
        }
        iterations.push(calibrate(*run, m).map_err(|e| (i, e))?);
    }
    let mut samples = vec![Vec::with_capacity(rounds); runs.len()];
    for _ in 0..rounds.max(1) {
        for (i, run) in runs.iter_mut().enumerate() {
            samples[i].push(sample(*run, iterations[i]).map_err(|e| (i, e))?);
        }
    }
    Ok(samples
        .into_iter()
        .zip(iterations)
        .map(|(s, n)| Measurement::of_samples(s, n, m.estimate))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spread_ignores_one_outlier_and_median_is_the_middle() {
        let v = [1.0, 1.01, 0.99, 1.0, 1.7];
        assert!(spread(&v) < 0.03, "{}", spread(&v));
        assert_eq!(median(&v), Some(1.0));
        assert_eq!(spread(&[1.0]), 0.0);
        // Quartiles 1.5 and 2.5 around a median of 2.
        assert_eq!(spread(&[1.0, 2.0, 3.0]), 0.5);
    }

    #[test]
    fn sampling_stops_at_the_cap_or_the_bound() {
        let m = Measure {
            warmup: 0,
            min_sample: Duration::ZERO,
            min_samples: 3,
            max_samples: 6,
            spread_bound: 0.0,
            ..Measure::quick()
        };
        let mut calls = 0;
        let mut run = || {
            calls += 1;
            // Alternating work: the spread is never zero, so sampling runs to the cap.
            let n = if calls % 2 == 0 { 20_000 } else { 1 };
            std::hint::black_box((0..n).sum::<u64>());
            Ok(())
        };
        let t = time(&mut run, &m).expect("runs");
        assert_eq!(t.samples.len(), 6);
        assert!(t.correct);
        let mut failing = || Err("boom".to_string());
        assert_eq!(time(&mut failing, &m), Err("boom".to_string()));
    }

    #[test]
    fn settings_are_checked() {
        assert!(Measure::default().check().is_ok());
        assert!(Measure::quick().check().is_ok());
        let bad = Measure {
            max_samples: 1,
            min_samples: 2,
            ..Measure::quick()
        };
        assert!(bad.check().is_err());
        let nan = Measure {
            spread_bound: f64::NAN,
            ..Measure::quick()
        };
        assert!(nan.check().is_err());
    }
}
