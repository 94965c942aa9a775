//! What the kernel store did, explained: [`StoreEvent`]s (a lookup's [`MissReason`], a
//! save's outcome, an eviction), returned with a resolve
//! ([`Resolution::events`](crate::Resolution::events)) and reported to `tracing` (target
//! `kernel_cache::store`).

use std::fmt;

/// Why a key was not answered from the kernel store. Every miss is one of these; none
/// fails a resolve.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum MissReason {
    /// The store's directory does not exist (a lookup never creates it).
    NoDirectory,
    /// The directory protocol refused the store (newer or malformed regime stamp, an
    /// I/O error, a directory another user could have written, ...): the message says
    /// which.
    Refused(String),
    /// No entry for this key under this backend identity.
    NoEntry,
    /// The entry file is malformed or names another key or identity (removed).
    BadEntry,
    /// The entry's blob is missing (the entry was removed).
    NoBlob,
    /// The blob's bytes do not match its digest, or do not parse (truncated,
    /// corrupted): removed, never loaded.
    Corrupt,
    /// The entry's symbol is not in its blob's symbol table (the entry was removed).
    NoSymbol,
    /// The entry names a blob (verified by its digest) that does not say it was compiled
    /// for this kernel (this identity, key, host part and symbol): an entry rewritten to
    /// name another kernel's blob. Removed, never loaded.
    WrongBlob,
    /// The entry or blob file is not private (another user owns it or could write it):
    /// refused, never loaded, left in place.
    NotPrivate(String),
    /// The backend could not load the verified blob (removed, unless the backend keeps it:
    /// see `Backend::keeps_saved`).
    LoadFailed(String),
    /// A shared level's entry or blob carries no valid MAC for this farm's secret (unsigned,
    /// signed with another secret, or changed since it was signed).
    BadSignature,
    /// The backend could not tell what the kernel's options mean on this machine
    /// (`Backend::host_part` failed), which names the kernel's entry: the kernel
    /// was not looked up, and is compiled without a compile lock and not saved.
    HostUnknown(String),
    /// No entry, but the store remembers that the kernel failed alone under this identity
    /// and host part (a failure the backend called its own,
    /// `Backend::remembered`): the message it failed with. A per-kernel resolve
    /// answers the kernel with it and compiles nothing for it.
    Remembered(String),
}

impl fmt::Display for MissReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MissReason::NoDirectory => f.write_str("no store directory"),
            MissReason::Refused(why) => write!(f, "store refused: {why}"),
            MissReason::NoEntry => f.write_str("no entry"),
            MissReason::BadEntry => f.write_str("malformed entry (removed)"),
            MissReason::NoBlob => f.write_str("entry points to no blob (removed)"),
            MissReason::Corrupt => f.write_str("blob does not match its digest (removed)"),
            MissReason::NoSymbol => f.write_str("symbol not in the blob's table (removed)"),
            MissReason::WrongBlob => {
                f.write_str("entry names a blob not compiled for this kernel (removed)")
            }
            MissReason::NotPrivate(why) => write!(f, "refused, not private: {why}"),
            MissReason::LoadFailed(why) => write!(f, "backend could not load the blob: {why}"),
            MissReason::BadSignature => f.write_str("shared entry or blob unsigned or mis-signed"),
            MissReason::HostUnknown(why) => write!(
                f,
                "backend could not tell what the options mean on this machine: {why}"
            ),
            MissReason::Remembered(why) => write!(f, "remembered failure: {why}"),
        }
    }
}

/// Why a compiled program was not saved. None fails a resolve.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum NotSaved {
    /// Its compile took less than the store's minimum compile time.
    TooFast,
    /// Its blob and 4 KiB of room for its entries are more than the store's byte limit (a
    /// blob a little smaller than the limit is not saved either).
    TooLarge,
    /// The backend's `save` failed or returned an invalid symbol table, or its `host_part`
    /// for the program's options failed.
    Backend(String),
    /// The directory protocol or the file system refused the write.
    Refused(String),
}

impl fmt::Display for NotSaved {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NotSaved::TooFast => f.write_str("compile faster than the minimum compile time"),
            NotSaved::TooLarge => f.write_str("program larger than the store's byte limit"),
            NotSaved::Backend(why) => write!(f, "backend could not save: {why}"),
            NotSaved::Refused(why) => write!(f, "store refused the write: {why}"),
        }
    }
}

/// What happened to one key (or one blob) at the kernel store.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Outcome {
    /// The key was answered from the blob with this digest.
    Hit {
        /// The blob's SHA-256.
        blob: String,
    },
    /// The key was answered from the farm's shared level (verified, back-filled locally).
    SharedHit {
        /// The blob's SHA-256.
        blob: String,
    },
    /// The key was not answered.
    Miss(MissReason),
    /// The key's program was saved as the blob with this digest.
    Saved {
        /// The blob's SHA-256.
        blob: String,
    },
    /// The key's program was not saved.
    NotSaved(NotSaved),
    /// The key's failure was remembered (`KernelStore::with_failure_memory`), or could not
    /// be (`Err`, why).
    Remembered(Result<(), String>),
    /// The blob was evicted to keep the store under its byte limit (`key` is empty).
    Evicted {
        /// The blob's SHA-256.
        blob: String,
    },
    /// The key's compile waited for another process compiling it; `timed_out` if the
    /// wait ended by the store's timeout rather than by the other process finishing.
    Waited {
        /// Whether the wait hit the timeout.
        timed_out: bool,
    },
    /// A wait for the store directory's lock (`cache.lock`) or the counters' lock passed
    /// what the resolve's lock wait left (`KernelStore::with_lock_wait`), so that
    /// operation was given up (`key` is empty): an eviction skipped, a counters update
    /// dropped. (A lookup or save that timed out is its key's `Miss(Refused)` or
    /// `NotSaved(Refused)`.) The store then backs off (`KernelStore::with_lock_backoff`).
    LockTimedOut {
        /// What was given up, and the wait's error.
        during: String,
    },
    /// The lock an eviction or a counters update needed was not free at once and was not
    /// waited for, the store backing off after a lock wait timed out
    /// (`KernelStore::with_lock_backoff`) or the resolve's lock wait used up: the operation
    /// was given up (`key` is empty). (A lookup or save given up so is its key's
    /// `Miss(Refused)` or `NotSaved(Refused)`, saying it was not waited for.)
    LockSkipped {
        /// What was given up, and why it was not waited for.
        during: String,
    },
}

/// One event of the kernel store.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoreEvent {
    /// The kernel key (empty for an eviction).
    pub key: String,
    /// What happened.
    pub outcome: Outcome,
}

/// Reports `outcome` for `key` to `tracing`.
pub(crate) fn trace(key: &str, outcome: &Outcome) {
    match outcome {
        Outcome::Hit { blob } => {
            tracing::debug!(target: "kernel_cache::store", key, blob, "kernel store hit");
        }
        Outcome::SharedHit { blob } => {
            tracing::debug!(target: "kernel_cache::store", key, blob, "kernel store hit on the farm's shared level");
        }
        Outcome::Miss(MissReason::Remembered(why)) => {
            tracing::info!(target: "kernel_cache::store", key, %why, "kernel store remembers the kernel's failure: not compiled");
        }
        Outcome::Miss(MissReason::NoEntry | MissReason::NoDirectory) => {
            tracing::debug!(target: "kernel_cache::store", key, "kernel store miss: no entry");
        }
        Outcome::Miss(why) => {
            tracing::warn!(target: "kernel_cache::store", key, %why, "kernel store miss");
        }
        Outcome::Saved { blob } => {
            tracing::debug!(target: "kernel_cache::store", key, blob, "kernel store save");
        }
        Outcome::NotSaved(NotSaved::TooFast) => {
            tracing::debug!(target: "kernel_cache::store", key, "not saved: compile too fast");
        }
        Outcome::NotSaved(why) => {
            tracing::warn!(target: "kernel_cache::store", key, %why, "kernel store save failed");
        }
        Outcome::Remembered(Ok(())) => {
            tracing::debug!(target: "kernel_cache::store", key, "kernel failure remembered");
        }
        Outcome::Remembered(Err(why)) => {
            tracing::warn!(target: "kernel_cache::store", key, %why, "kernel failure not remembered");
        }
        Outcome::Evicted { blob } => {
            tracing::info!(target: "kernel_cache::store", blob, "kernel store eviction");
        }
        Outcome::Waited { timed_out } => {
            tracing::info!(target: "kernel_cache::store", key, timed_out, "waited for another process's compile");
        }
        Outcome::LockTimedOut { during } => {
            tracing::warn!(target: "kernel_cache::store", during, "kernel store lock wait timed out: operation given up");
        }
        Outcome::LockSkipped { during } => {
            tracing::debug!(target: "kernel_cache::store", during, "kernel store lock not waited for: operation given up");
        }
    }
}
