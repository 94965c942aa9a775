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
