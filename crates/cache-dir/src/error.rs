//! The one error type of the directory protocol.

use std::io;
use std::path::{Path, PathBuf};

/// Why a cache directory operation did not happen. Every variant is something the file system,
/// another process or a hostile directory can cause; a store above this crate turns each into a
/// miss or a refused store, never a failed run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The cache directory does not exist (an open that does not create found nothing).
    #[error("no cache directory at {}", path.display())]
    NoDirectory {
        /// The directory looked for.
        path: PathBuf,
    },
    /// The stamp names a newer regime of this store kind than the caller's: a newer build owns
    /// the directory. Nothing was touched.
    #[error(
        "{}: regime.stamp has {kind} regime {found}, newer than this build's {ours}: a newer \
         build owns this directory; refused, nothing touched",
        path.display()
    )]
    NewerRegime {
        /// The cache directory.
        path: PathBuf,
        /// The store kind (the caller's, which the stamp names or, for a bare stamp, was taken
        /// to name).
        kind: &'static str,
        /// The stamp's regime version.
        found: u32,
        /// The caller's regime version.
        ours: u32,
    },
    /// The stamp is not a well-formed stamp. Nothing was touched.
    #[error(
        "{}: malformed regime stamp {content:?} (not `<store kind> <version>`); this \
         {kind} refuses the directory, nothing touched",
        path.display()
    )]
    MalformedStamp {
        /// The cache directory.
        path: PathBuf,
        /// The caller's store kind.
        kind: &'static str,
        /// The stamp content, lossily decoded, at most 64 characters.
        content: String,
    },
    /// The stamp names another store kind: the directory is another store's (a schedule store
    /// pointed at a kernel store's directory, say). Refused with nothing swept, stamped or
    /// created.
    #[error(
        "{}: this directory is a {found} directory (regime.stamp `{found} {version}`), not a \
         {ours} directory; this {ours} refuses it, nothing swept or changed (give each store a \
         directory of its own)",
        path.display()
    )]
    ForeignStore {
        /// The cache directory.
        path: PathBuf,
        /// The store kind the stamp names.
        found: String,
        /// The stamp's regime version.
        version: u32,
        /// The caller's store kind.
        ours: &'static str,
    },
    /// The stamp is a bare version (written before stamps named their store kind) and the
    /// directory holds a file this store never writes, so which store wrote it cannot be told:
    /// refused with nothing swept, stamped or created. A directory holding only this store's
    /// files is taken as this store's and its stamp rewritten with the kind (see
    /// [`CacheDir::check_adoptable`](crate::CacheDir::check_adoptable)).
    #[error(
        "{}: regime.stamp `{version}` names no store kind (written before stamps did) and the \
         directory holds {name:?}, which no {ours} writes: it may be another store's \
         directory; this {ours} refuses it, nothing swept or changed. If it is a {ours} \
         directory, move {name:?} out and the next open adopts it; if it is another store's, \
         open it with that store; or delete the directory (a cache: only compile time is lost)",
        path.display()
    )]
    UnkindedStamp {
        /// The cache directory.
        path: PathBuf,
        /// The bare stamp's version.
        version: u32,
        /// The caller's store kind.
        ours: &'static str,
        /// The first file found that this store never writes (at most 64 characters of it).
        name: String,
    },
    /// A lock-free read of a directory this process cannot write saw the stamp change while it
    /// read: the answer is discarded.
    #[error("the regime stamp changed during a lock-free read of a read-only directory")]
    StampChanged,
    /// A file name the protocol does not allow for an entry (see [`validate_name`](crate::validate_name)).
    #[error("invalid entry file name {name:?}: {why}")]
    InvalidName {
        /// The name (at most 64 characters of it).
        name: String,
        /// Which rule it breaks.
        why: &'static str,
    },
    /// A directory or file another user could have written (see
    /// [`check_private`](crate::check_private)).
    #[error("{}: {why}", path.display())]
    NotPrivate {
        /// The path checked.
        path: PathBuf,
        /// What is wrong with its owner or mode.
        why: String,
    },
    /// The directory has no regime stamp yet holds a file named like an entry: it is no
    /// cache directory of this store (a user's directory given as the cache, holding, say,
    /// `settings.ron`). Nothing was deleted and it is not adopted; the store wants a
    /// directory of its own (or such files removed).
    #[error(
        "{} has no regime stamp but holds {name:?}, named like an entry: not adopted as a \
         cache directory, nothing deleted (give the store a directory of its own)",
        path.display()
    )]
    Unadopted {
        /// The directory.
        path: PathBuf,
        /// The first file found named like an entry (at most 64 characters of it).
        name: String,
    },
    /// The directory's lock (`cache.lock`, or the in-process lock in front of it) was held by
    /// another process or thread for longer than the handle's lock wait
    /// ([`CacheDir::with_lock_wait`](crate::CacheDir::with_lock_wait)): nothing was done.
    #[error(
        "{}: gave up after waiting {waited:?} for the {mode:?} lock on cache.lock, which \
         another process or thread holds (a stopped or hung process?)",
        path.display()
    )]
    LockTimeout {
        /// The cache directory.
        path: PathBuf,
        /// How the lock was wanted.
        mode: crate::Mode,
        /// The bound that passed.
        waited: std::time::Duration,
    },
    /// The file system said no.
    #[error("{}: could not {during}: {source}", path.display())]
    Io {
        /// What the protocol was doing: "open and lock the lock file", "read the regime stamp",
        /// "publish the entry", ….
        during: &'static str,
        /// The path it was done at: the cache directory, or the entry, file or directory
        /// component the failing call named (the first directory that could not be created,
        /// say).
        path: PathBuf,
        /// The error.
        #[source]
        source: io::Error,
    },
}

impl Error {
    pub(crate) fn io(during: &'static str, path: &Path) -> impl FnOnce(io::Error) -> Error {
        move |source| Error::Io {
            during,
            path: path.to_path_buf(),
            source,
        }
    }

    /// Whether this is an I/O error of kind `NotFound` (for example an absent entry).
    pub fn is_not_found(&self) -> bool {
        matches!(self, Error::Io { source, .. } if source.kind() == io::ErrorKind::NotFound)
    }

    /// Whether this is the file system refusing a write (`EACCES`, `EPERM`, `EROFS`: a
    /// read-only mount, another user's directory): what an exclusive open, or any open that
    /// must create something, answers where this process cannot write. A shared open of an
    /// existing directory still serves reads there
    /// ([`CacheDir::with_shared`](crate::CacheDir::with_shared)).
    pub fn is_read_only(&self) -> bool {
        matches!(self, Error::Io { source, .. } if crate::cannot_write(source))
    }
}
