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
use crate::components::KeyParts;
use crate::identity::CompleteIdentity;
use crate::key::KeyComponent;
use crate::saved::{Registry, SavedSchedule, ScheduleLanguage, of_saved};

/// The payload format version of [`ScheduleEntry`]. Bumped when the canonical rendering or the
/// saved-schedule format changes (an old entry is then ignored by lookup). Independent of the
/// directory's key-regime version.
///
/// History (one line per bump, `vN: reason`; a test checks the last line matches):
/// v1: initial format (rendering kcache-identity-1, SavedRefOp, key parts, times in seconds)
/// v2: key parts are full-width component digests, with the new `format` component (regime 2)
///
/// Optional fields added without a bump, since a reader of an earlier build ignores them and
/// an entry without them is read alike (no lookup answers otherwise): `key_summary` (people's
/// lines), `size_free` (near-code seeds are checked against it; an entry without it is only
/// never offered as near code).
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
    /// The size-free identity ([`crate::seeds::size_free_digest`]) of the code the entry was
    /// stored for, written by [`ScheduleCache::store`](crate::ScheduleCache::store): what a
    /// near-code seed's structure is checked against before it is offered. Absent from
    /// entries written before it existed and from entries published through
    /// [`Store::store`](crate::store::Store::store) directly: such an entry is never offered
    /// as a near-code seed (it still is as a same-code one, which its digest guards).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size_free: Option<String>,
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
            size_free: None,
        })
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

    /// The optional fields need no new version: a reader that does not know them (an earlier
    /// build's `ScheduleEntry`, mirrored here with its fields only) reads an entry that has
    /// them, and this build reads an entry without them.
    #[test]
    fn optional_fields_are_read_by_earlier_readers_and_absent_ones_default() {
        #[derive(serde::Deserialize)]
        #[allow(dead_code)]
        struct Earlier {
            version: u32,
            digest: String,
            key_parts: KeyParts,
            schedule: SavedSchedule<u32>,
            times: Vec<f64>,
            baseline_time: Option<f64>,
        }
        let digest = "ab".repeat(32);
        let entry = ScheduleEntry {
            version: ENTRY_VERSION,
            digest: digest.clone(),
            key_parts: KeyParts {
                parts: vec![(KeyComponent::Digest, digest.clone())],
            },
            schedule: SavedSchedule {
                digest: digest.clone(),
                ops: vec![7u32],
            },
            times: vec![1e-6],
            baseline_time: None,
            key_summary: vec![(KeyComponent::Backend, "cc".to_owned())],
            size_free: Some("cd".repeat(32)),
        };
        let text =
            ron::ser::to_string_pretty(&entry, ron::ser::PrettyConfig::default()).expect("encode");
        assert!(text.contains("size_free: Some("), "{text}");
        let earlier: Earlier = ron::from_str(&text).expect("an earlier reader reads it");
        assert_eq!((earlier.version, earlier.schedule.ops), (2, vec![7]));
        let bare = ScheduleEntry {
            key_summary: Vec::new(),
            size_free: None,
            ..entry
        };
        let text =
            ron::ser::to_string_pretty(&bare, ron::ser::PrettyConfig::default()).expect("encode");
        assert!(!text.contains("size_free"), "{text}");
        let back: ScheduleEntry<u32> = ron::from_str(&text).expect("read without them");
        assert_eq!(back, bare);
    }

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
