//! Store policies: what a store does when an entry already sits at the key it publishes to
//! ([`StorePolicy`]); [`Claim`] defines "faster".

use std::fmt;

/// What a store does when an entry already sits at the key.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum StorePolicy {
    /// Publish unconditionally: of concurrent stores of one key, the last one stays (the
    /// seed's protocol, and the default).
    #[default]
    LastWriteWins,
    /// Publish only if the existing entry has no `Claim` this entry's claim beats: the
    /// entry is published when there is no existing entry, when the existing one has no
    /// claim (it is unreadable, unparsable, of another version, saved for another digest or
    /// under other key components, or holds no usable time), or when the new entry's best time
    /// is **strictly** smaller than the existing one's. Otherwise the existing entry stays and
    /// the store answers [`StoreOutcome::KeptExisting`](super::StoreOutcome::KeptExisting).
    /// Placement entries carry no times, so for them this is last write wins.
    KeepFaster,
}

/// What an entry claims under [`StorePolicy::KeepFaster`]: its best time, and what it was
/// measured for.
///
/// The **best time** of a schedule entry is the smallest of its `times` that is finite and
/// non-negative (seconds; `-0.0` counts as `0.0`); an entry with no such time (no times, only
/// NaN, infinite or negative ones) has no claim. The baseline time is not part of it. The
/// **identity** is the entry's digest and full key components: a claim only counts against a
/// new entry of the same identity (the key already names them, so this guards against an entry
/// copied or written by hand under a key it does not belong to).
#[derive(Clone, Debug, PartialEq)]
pub struct Claim {
    /// The best time, in seconds (finite, `>= 0.0`).
    pub time: f64,
    /// The digest and key components the time was measured for, as one line.
    pub identity: String,
}

/// The best time of `times` as [`Claim`] defines it: the smallest finite non-negative one.
pub(crate) fn best_time(times: &[f64]) -> Option<f64> {
    times
        .iter()
        .copied()
        .filter(|t| t.is_finite() && *t >= 0.0)
        // `+ 0.0` turns -0.0 into 0.0, so equal times have equal bits.
        .map(|t| t + 0.0)
        .min_by(f64::total_cmp)
}

/// Whether a new entry of `identity` with best time `new_time` replaces an existing entry
/// claiming `existing` under [`StorePolicy::KeepFaster`]; `Err` carries what to report when the
/// existing entry stays.
pub(crate) fn keep_faster(
    existing: Option<&Claim>,
    identity: &str,
    new_time: Option<f64>,
) -> Result<(), KeptExisting> {
    let Some(existing) = existing.filter(|e| e.identity == identity) else {
        return Ok(());
    };
    match new_time {
        Some(t) if t < existing.time => Ok(()),
        _ => Err(KeptExisting {
            existing_time: existing.time,
            new_time,
        }),
    }
}

/// A [`StorePolicy::KeepFaster`] store that left the existing entry in place: it measured at
/// least as fast as the new one (or the new one had no usable time).
///
/// Compared by the bits of its times, which are never NaN.
#[derive(Clone, Copy, Debug)]
pub struct KeptExisting {
    /// The existing entry's best time, in seconds.
    pub existing_time: f64,
    /// The new entry's best time, in seconds (`None`: it had none, so it cannot be shown
    /// faster).
    pub new_time: Option<f64>,
}

impl PartialEq for KeptExisting {
    fn eq(&self, other: &KeptExisting) -> bool {
        self.existing_time.to_bits() == other.existing_time.to_bits()
            && self.new_time.map(f64::to_bits) == other.new_time.map(f64::to_bits)
    }
}

impl Eq for KeptExisting {}

impl fmt::Display for KeptExisting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.new_time {
            Some(new) => write!(
                f,
                "kept the existing entry ({:e} s), the new one is not faster ({new:e} s)",
                self.existing_time
            ),
            None => write!(
                f,
                "kept the existing entry ({:e} s), the new one has no usable time",
                self.existing_time
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(time: f64, identity: &str) -> Claim {
        Claim {
            time,
            identity: identity.into(),
        }
    }

    #[test]
    fn the_best_time_is_the_smallest_finite_non_negative_one() {
        assert_eq!(best_time(&[3.0, 1.0, 2.0]), Some(1.0));
        assert_eq!(best_time(&[f64::NAN, -1.0, f64::INFINITY, 2.0]), Some(2.0));
        assert_eq!(best_time(&[f64::NAN, f64::NEG_INFINITY]), None);
        assert_eq!(best_time(&[]), None);
        assert_eq!(best_time(&[-0.0]).map(f64::to_bits), Some(0.0f64.to_bits()));
    }

    #[test]
    fn only_a_strictly_faster_entry_of_the_same_identity_replaces() {
        let old = claim(2.0, "a");
        assert_eq!(keep_faster(None, "a", Some(9.0)), Ok(()));
        assert_eq!(keep_faster(None, "a", None), Ok(()));
        assert_eq!(keep_faster(Some(&old), "a", Some(1.0)), Ok(()));
        assert_eq!(
            keep_faster(Some(&old), "a", Some(2.0)),
            Err(KeptExisting {
                existing_time: 2.0,
                new_time: Some(2.0)
            })
        );
        assert_eq!(
            keep_faster(Some(&old), "a", None),
            Err(KeptExisting {
                existing_time: 2.0,
                new_time: None
            })
        );
        // A claim measured for something else does not count.
        assert_eq!(keep_faster(Some(&old), "b", Some(9.0)), Ok(()));
    }
}
