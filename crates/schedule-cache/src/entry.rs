//! What the on-disk store writes and reads: the [`DiskEntry`] contract.

use serde::{Serialize, de::DeserializeOwned};

/// A payload the disk store can publish and look up.
///
/// Contract: `version()` returns the format version the value was written with; a reader
/// treats an entry whose `version()` differs from `Self::VERSION`, or whose `digest()` differs
/// from the digest being looked up, as a miss (never as a hit, never as an error).
pub trait DiskEntry: Serialize + DeserializeOwned {
    /// The payload format version this build writes and accepts.
    const VERSION: u32;
    /// The format version recorded in this value.
    fn version(&self) -> u32;
    /// The identity digest this entry was saved for.
    fn digest(&self) -> &str;
}

use crate::Error;
use crate::components::{KeyComponent, KeyParts};
use crate::identity::CompleteIdentity;
use crate::saved::{Registry, SavedSchedule, ScheduleLanguage, of_saved};

/// The payload format version of [`ScheduleEntry`]. Bumped when the canonical rendering or the
/// saved-schedule format changes (an old entry is then ignored by lookup). Independent of the
/// directory's key-regime version.
///
/// History (one line per bump, `vN: reason`; a test checks the last line matches):
/// v1: initial format (rendering kcache-identity-1, SavedRefOp, key parts, times in seconds)
/// v2: key parts are full-width component digests, with the new `format` component (regime 2)
pub const ENTRY_VERSION: u32 = 2;

/// One cached schedule, as stored on disk (RON): the winning schedule of the code named by
/// `digest`, the key parts it was stored under, and its measured times.
///
/// `Op` is the backend's saved op type ([`ScheduleLanguage::SavedOp`]); tools that only
/// inspect entries can use `ron::Value`.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ScheduleEntry<Op> {
    /// The format version ([`ENTRY_VERSION`] when written by this build).
    pub version: u32,
    /// The code digest (equal to `schedule.digest`).
    pub digest: String,
    /// The key components the entry was stored under, in key order (explains a miss).
    pub key_parts: KeyParts,
    /// The saved schedule.
    pub schedule: SavedSchedule<Op>,
    /// Measured run times of the scheduled code, in seconds, in measurement order.
    pub times: Vec<f64>,
    /// Measured run time of the unscheduled code, in seconds, if measured.
    pub baseline_time: Option<f64>,
    /// A readable line per key component (`components::key_summary`), for people only:
    /// never compared, absent from entries written before it existed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub key_summary: Vec<(KeyComponent, String)>,
}

impl<Op> ScheduleEntry<Op> {
    /// An entry for `schedule`, saved against `identity`, stored under `key_parts`.
    ///
    /// # Errors
    /// [`Error::DigestMismatch`] if the schedule was saved against another identity.
    pub fn new(
        identity: &CompleteIdentity,
        key_parts: KeyParts,
        schedule: SavedSchedule<Op>,
        times: Vec<f64>,
        baseline_time: Option<f64>,
    ) -> Result<ScheduleEntry<Op>, Error> {
        if schedule.digest != identity.digest() {
            return Err(Error::DigestMismatch {
                saved: schedule.digest,
                current: identity.digest().to_owned(),
            });
        }
        Ok(ScheduleEntry {
            version: ENTRY_VERSION,
            digest: identity.digest().to_owned(),
            key_parts,
            schedule,
            times,
            baseline_time,
            key_summary: Vec::new(),
        })
    }

    /// This entry with `summary` as its readable key summary.
    pub fn with_key_summary(mut self, summary: Vec<(KeyComponent, String)>) -> ScheduleEntry<Op> {
        self.key_summary = summary;
        self
    }
}

impl<Op> ScheduleEntry<Op>
where
    Op: serde::Serialize + serde::de::DeserializeOwned + Clone + std::fmt::Debug + PartialEq,
{
    /// Replays the entry's schedule against a fresh compile (see [`of_saved`]).
    ///
    /// # Errors
    /// [`Error::DigestMismatch`] if the entry's digest (or its schedule's) differs from
    /// `identity`'s; otherwise [`of_saved`]'s errors.
    pub fn replay<L: ScheduleLanguage<SavedOp = Op>>(
        &self,
        lang: &L,
        identity: &CompleteIdentity,
    ) -> Result<(Vec<L::Op>, Registry), Error> {
        if self.digest != identity.digest() {
            return Err(Error::DigestMismatch {
                saved: self.digest.clone(),
                current: identity.digest().to_owned(),
            });
        }
        of_saved(lang, &self.schedule, identity)
    }
}

impl<Op: serde::Serialize + serde::de::DeserializeOwned> DiskEntry for ScheduleEntry<Op> {
    const VERSION: u32 = ENTRY_VERSION;
    fn version(&self) -> u32 {
        self.version
    }
    fn digest(&self) -> &str {
        &self.digest
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn history_comment_ends_with_current_version() {
        let src = include_str!("entry.rs");
        let last = src
            .lines()
            .map(str::trim_start)
            .filter_map(|l| l.strip_prefix("/// v"))
            .filter_map(|l| l.split_once(':'))
            .map(|(n, reason)| {
                assert!(!reason.trim().is_empty(), "bump v{n} has no reason");
                n.parse::<u32>().expect("history line starts with a number")
            })
            .collect::<Vec<_>>();
        let expected: Vec<u32> = (1..=ENTRY_VERSION).collect();
        assert_eq!(last, expected, "one history line per version, in order");
    }
}
