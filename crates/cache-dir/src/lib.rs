//! The directory protocol of kcache's on-disk stores, in one place: a store that keeps entries
//! as files in a directory shared by many processes (the schedule store of `schedule-cache`,
//! the kernel store of `kernel-cache`) builds on [`CacheDir`] and gets the same guarantees.
//!
//! - **A permanent lock file** ([`LOCK_FILE`]): an in-process reader/writer lock, then `flock`
//!   on a file that is never unlinked; **shared** for entry reads and writes, **exclusive** for a
//!   regime change, a staging sweep, eviction and garbage collection.
//! - **A regime stamp** ([`STAMP_FILE`], `<store kind> <version>`): whose directory it is and
//!   the store's version of what entry names mean. Another store kind's: refused naming the
//!   path and both kinds, nothing swept ([`Error::ForeignStore`]); a bare legacy version is
//!   taken as the store's own only if every file is one it writes ([`Error::UnkindedStamp`]).
//!   Equal: admitted. Newer or malformed: refused, nothing touched. Older: under the exclusive lock,
//!   every file the store's `is_entry` predicate calls an entry (of any version) is deleted,
//!   then the stamp is published. Absent: the stamp is published if no file is named like an
//!   entry; if one is, the directory is no cache (a user's directory holding `settings.ron`)
//!   and is refused with nothing touched, not even a lock file created ([`Error::Unadopted`]).
//!   The rule has one home, [`CacheDir::check_adoptable`]; tools that delete files of a cache
//!   whatever its regime (garbage collection, clearing) lock through
//!   [`CacheDir::lock_adopted`], which applies it too.
//! - **Atomic publication** ([`Guard::publish`], via `atomicwrites`): a reader sees a whole old
//!   file or a whole new one, never a torn one, and a published file survives a power loss.
//! - **Crash-stale staging cleanup**: the first open of a directory in a process removes the
//!   staging directories killed writers left behind.
//! - **Validated names** ([`validate_name`]): an entry name never leaves the directory and is
//!   never a protocol file.
//! - **No hang and no unbounded read on any directory content** ([`read_regular`]): only regular
//!   files are read, opened without blocking and without following links, checked on the
//!   opened handle, up to a caller-given size.
//! - **Owner and mode checks** ([`check_private`]) for a store that is a trust boundary, and
//!   **private files from the first byte** for such a store
//!   ([`CacheDir::with_private_files`]): every file created `0600`, the directory `0700`,
//!   never reached through a symbolic link at its name.
//! - **Bounded lock waits** ([`CacheDir::with_lock_wait`], default [`DEFAULT_LOCK_WAIT`]): a
//!   holder that never lets go is [`Error::LockTimeout`], never a hang.
//! - **Read-only directories still serve lookups**: see [`CacheDir::with_shared`].
//! - **One layout of a kcache directory** ([`Layout`]): the schedule store at its root, the
//!   kernel store at `kernels/` inside it, for every program and the `kcache` tool.
//!
//! What a store keeps in its entries, how it explains a miss and how it reports to observers is
//! the store's own; this crate reports its own events (regime transitions, staging sweeps) to
//! `tracing` under target `cache_dir`. `docs/disk-format.md` ("The directory protocol") is the
//! full specification.
//!
//! ```
//! use cache_dir::{CacheDir, Error};
//!
//! fn is_entry(name: &str) -> bool {
//!     name.ends_with(".entry")
//! }
//!
//! let tmp = tempfile::tempdir()?;
//! let store = CacheDir::new(tmp.path().join("kernels"), "example-store", 1, is_entry);
//! // A lookup never creates the directory: a missing one is an error the store calls a miss.
//! assert!(matches!(store.with_shared(false, |_| ()), Err(Error::NoDirectory { .. })));
//! store.with_shared(true, |dir| dir.publish("k1.entry", b"payload"))??;
//! let read = store.with_shared(false, |dir| dir.read("k1.entry", 1 << 20))??;
//! assert_eq!(read, b"payload");
//! // A build of regime 2 sweeps every entry, then stamps the directory.
//! let newer = CacheDir::new(store.dir(), "example-store", 2, is_entry);
//! let names: Vec<String> = newer.with_shared(false, |dir| {
//!     dir.entries().map(|it| it.filter_map(Result::ok).map(|e| e.name).collect())
//! })??;
//! assert!(names.is_empty());
//! // And the older build is refused from then on.
//! assert!(matches!(store.with_shared(false, |_| ()), Err(Error::NewerRegime { found: 2, ours: 1, .. })));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Versions
//!
//! What a minor version may add: variants of the `#[non_exhaustive]` [`Error`] (a new
//! refusal; a `match` on it needs a `_` arm) and new methods. The on-disk protocol (lock file,
//! stamp, staging) changes only with a new regime of the store using it, never silently.

#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod error;
mod layout;
mod lock;
mod names;
mod private;
mod read;
mod regime;
mod staging;

use std::fs;
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use atomicwrites::{AllowOverwrite, AtomicFile};

pub use error::Error;
pub use layout::Layout;
pub use lock::{LOCK_FILE, LOCK_POLL, Mode, lock_until};
pub use names::{MAX_NAME_LEN, validate_name};
pub use private::{
    check_private, check_private_dir, check_private_metadata, create_private_dir, current_uid,
};
pub use read::{open_listed_regular, open_regular, open_rw_regular, read_regular, retry};
pub use regime::{
    MAX_KIND_LEN, MAX_STAMP_BYTES, RegimeStamp, STAMP_FILE, is_valid_kind, parse_kind_stamp,
    parse_stamp, read_stamp, render_kind_stamp, render_stamp,
};
pub use staging::{DEFAULT_STALE_STAGING_AFTER, STAGING_PREFIX, is_staging, staging_age};

use lock::Held;

/// How long a cache-open waits, by default, for the directory's lock while another process
/// holds it in a conflicting mode (see [`CacheDir::with_lock_wait`]).
pub const DEFAULT_LOCK_WAIT: Duration = Duration::from_secs(30);

/// A cache directory together with the protocol parameters a process uses on it: the regime
/// version it writes and admits, which file names are entries (of *any* version: a regime
/// change deletes exactly these), and when staging counts as crash-stale.
#[derive(Clone, Debug)]
pub struct CacheDir {
    dir: PathBuf,
    kind: &'static str,
    regime: u32,
    is_entry: fn(&str) -> bool,
    is_own_file: fn(&str) -> bool,
    stale_staging_after: Duration,
    private: bool,
    lock_wait: Duration,
}

/// An open cache directory: the locks (released on drop) and the entry operations they cover.
pub struct Guard<'a> {
    cache: &'a CacheDir,
    held: Held,
}

/// One entry file seen by [`Guard::entries`].
#[derive(Debug)]
pub struct Listed {
    /// Its file name (valid UTF-8, accepted by the store's `is_entry`).
    pub name: String,
    /// The directory entry (file type and `lstat` metadata without following links).
    pub item: fs::DirEntry,
}

/// The entry files of a directory, read from the directory as they are iterated (never all
/// held at once).
pub struct Entries<'g> {
    listing: fs::ReadDir,
    is_entry: fn(&str) -> bool,
    _guard: std::marker::PhantomData<&'g ()>,
}

impl Iterator for Entries<'_> {
    type Item = io::Result<Listed>;

    fn next(&mut self) -> Option<io::Result<Listed>> {
        loop {
            let item = match self.listing.next()? {
                Ok(item) => item,
                Err(e) => return Some(Err(e)),
            };
            let Ok(name) = item.file_name().into_string() else {
                continue;
            };
            if is_entry_name(self.is_entry, &name) {
                return Some(Ok(Listed { name, item }));
            }
        }
    }
}

fn cannot_write(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::PermissionDenied | io::ErrorKind::ReadOnlyFilesystem
    )
}

/// The store's predicate, never accepting a protocol or staging name.
fn is_entry_name(is_entry: fn(&str) -> bool, name: &str) -> bool {
    !name.starts_with('.') && name != LOCK_FILE && name != STAMP_FILE && is_entry(name)
}

impl CacheDir {
    /// The cache at `dir` of store `kind` under regime version `regime`, whose entries are the
    /// file names `is_entry` accepts. `kind` names the store in the stamp (`<kind>
    /// <regime>\n`): a directory stamped by another kind is refused by every open
    /// ([`Error::ForeignStore`]); it must be a valid kind ([`is_valid_kind`]: lowercase ASCII
    /// letters, digits and `-`, at most [`MAX_KIND_LEN`] bytes), or every open refuses with
    /// [`Error::MalformedStamp`] before touching anything. `is_entry` must accept every name any
    /// version of the store ever wrote as an entry (a regime change deletes exactly those); the
    /// lock file, the stamp and names starting with `.` are never entries whatever it says.
    /// Touches nothing on disk.
    pub fn new(
        dir: impl Into<PathBuf>,
        kind: &'static str,
        regime: u32,
        is_entry: fn(&str) -> bool,
    ) -> CacheDir {
        CacheDir {
            dir: dir.into(),
            kind,
            regime,
            is_entry,
            is_own_file: |_| false,
            stale_staging_after: DEFAULT_STALE_STAGING_AFTER,
            private: false,
            lock_wait: DEFAULT_LOCK_WAIT,
        }
    }

    /// The same cache, whose store also writes the files `is_own_file` accepts besides its
    /// entries (compile locks, a counters file): never swept by a regime change, but counted as
    /// this store's when a bare legacy stamp's directory is told apart from another store's
    /// ([`CacheDir::check_adoptable`]). Default: none.
    pub fn with_own_files(mut self, is_own_file: fn(&str) -> bool) -> CacheDir {
        self.is_own_file = is_own_file;
        self
    }

    /// The store kind this handle writes in the stamp and admits.
    pub fn kind(&self) -> &'static str {
        self.kind
    }

    /// The stamp this handle writes and admits.
    fn our_stamp(&self) -> RegimeStamp {
        RegimeStamp::Kind {
            kind: self.kind.to_owned(),
            version: self.regime,
        }
    }

    /// The same cache as a **private store** (one whose files are loaded and run): every
    /// file the protocol creates (entries, the stamp, the lock file, appended files) is
    /// created with mode `0600` on its descriptor before it is published (the umask can only
    /// take bits away), so no other user can open one at any moment, whatever the umask
    /// (`002`, `000`); an existing lock file or stamp of this user with group or other bits
    /// (left by a umask or an earlier build) is made `0600` at the cache-open, one another user
    /// owns is refused ([`Error::NotPrivate`]). The directory is created with
    /// [`create_private_dir`] (`0700`, no link followed at a name it creates) and checked
    /// at every cache-open with [`check_private_dir`]: a symbolic link at its path, another
    /// owner, or any group or other permission bit is refused with [`Error::NotPrivate`]
    /// naming the path and why, before anything is created in it.
    pub fn with_private_files(mut self) -> CacheDir {
        self.private = true;
        self
    }

    /// Whether this is a private store ([`CacheDir::with_private_files`]).
    pub fn is_private(&self) -> bool {
        self.private
    }

    /// The same cache, waiting at most `wait` for the directory's lock (the in-process lock
    /// and `cache.lock`) at each cache-open, [`CacheDir::lock`] and
    /// [`CacheDir::lock_adopted`]; past it the operation is refused with
    /// [`Error::LockTimeout`] (a cache-open's first-open staging sweep does not wait at all:
    /// if the exclusive lock is not free at once, the open is shared and the sweep is left to
    /// a later open). A `wait` past what the clock can count (`Duration::MAX`) waits for as
    /// long as the lock is held. Default [`DEFAULT_LOCK_WAIT`].
    pub fn with_lock_wait(mut self, wait: Duration) -> CacheDir {
        self.lock_wait = wait;
        self
    }

    /// The bound on a lock wait.
    pub fn lock_wait(&self) -> Duration {
        self.lock_wait
    }

    /// The mode new protocol files are created with (before the umask).
    fn file_mode(&self, shared_default: u32) -> u32 {
        if self.private { 0o600 } else { shared_default }
    }

    /// The cache-open's deadline for a lock wait starting now (`None`: none).
    fn deadline(&self) -> Option<Instant> {
        Instant::now().checked_add(self.lock_wait)
    }

    fn lock_error(&self, mode: Mode, during: &'static str) -> impl FnOnce(io::Error) -> Error {
        move |e| {
            if e.kind() == io::ErrorKind::TimedOut {
                Error::LockTimeout {
                    path: self.dir.clone(),
                    mode,
                    waited: self.lock_wait,
                }
            } else {
                Error::io(during, &self.dir)(e)
            }
        }
    }

    /// Staging directories untouched for at least `after` count as crash-stale (default
    /// [`DEFAULT_STALE_STAGING_AFTER`]).
    pub fn with_stale_staging_after(mut self, after: Duration) -> CacheDir {
        self.stale_staging_after = after;
        self
    }

    /// The cache directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The regime version this handle writes and admits.
    pub fn regime(&self) -> u32 {
        self.regime
    }

    /// The stale-staging threshold.
    pub fn stale_staging_after(&self) -> Duration {
        self.stale_staging_after
    }

    /// Whether `name` is an entry's file name for this store.
    pub fn is_entry(&self, name: &str) -> bool {
        is_entry_name(self.is_entry, name)
    }

    /// The cache-open, then `f` on the open directory, then the release. With `create`, the
    /// directory (and its parents) and the lock file are created; without, a missing directory
    /// is [`Error::NoDirectory`] and nothing is created but the lock file of an existing
    /// directory.
    ///
    /// The cache-open takes the locks (shared; exclusive on the process's first open of the
    /// directory, which sweeps crash-stale staging, or when the regime must change) and reads
    /// the stamp: equal is admitted; newer ([`Error::NewerRegime`]) or malformed
    /// ([`Error::MalformedStamp`]) is refused with nothing touched; older deletes every
    /// entry, publishes this regime's stamp and is admitted; absent publishes the stamp and
    /// is admitted if no file is named like an entry, and is refused with nothing touched
    /// ([`Error::Unadopted`]; checked by [`CacheDir::check_adoptable`] before the lock file is
    /// created, so none is) if one is (a directory that is no cache: a store never deletes a
    /// user's `settings.ron`). The locks are held until `f` returns.
    ///
    /// **A directory this process cannot write** (a read-only mount, another user's cache)
    /// still serves reads: the first-open sweep is skipped; an existing lock file is opened
    /// read-only and locked shared; with no lock file there is no file lock to take, so the
    /// stamp is read again after `f` and the result is discarded ([`Error::StampChanged`])
    /// unless it still equals this regime. That is safe because stamps only move forward and a
    /// newer regime's writer publishes its stamp before its first entry: a read that began
    /// under our stamp and ends under our stamp saw only entries of our regime. A directory
    /// that needs a regime change is refused there (the change needs the exclusive lock).
    ///
    /// # Errors
    /// The refusal: [`Error::NoDirectory`], [`Error::NewerRegime`], [`Error::MalformedStamp`],
    /// [`Error::Unadopted`], [`Error::StampChanged`], or [`Error::Io`] naming what the
    /// protocol was doing.
    pub fn with_shared<R>(
        &self,
        create: bool,
        f: impl FnOnce(&Guard<'_>) -> R,
    ) -> Result<R, Error> {
        let guard = self.open(create, Mode::Shared)?;
        let out = f(&guard);
        if guard.is_lock_free() {
            let stamp =
                read_stamp(&self.dir).map_err(Error::io("read the regime stamp", &self.dir))?;
            if stamp != self.our_stamp() {
                return Err(Error::StampChanged);
            }
        }
        Ok(out)
    }

    /// Like [`CacheDir::with_shared`], holding the exclusive lock through `f` (for eviction
    /// and other changes that must not interleave with entry I/O). Never lock-free: a directory
    /// this process cannot write is refused.
    ///
    /// # Errors
    /// As [`CacheDir::with_shared`].
    pub fn with_exclusive<R>(
        &self,
        create: bool,
        f: impl FnOnce(&Guard<'_>) -> R,
    ) -> Result<R, Error> {
        let guard = self.open(create, Mode::Exclusive)?;
        Ok(f(&guard))
    }

    /// Takes the locks in `mode` **without** the cache-open's stamp check, for tools that
    /// inspect or collect garbage whatever the regime (never for entry I/O of a store).
    /// With `create`, an existing directory gets its lock file; without, a missing lock file is
    /// `NotFound` (so a read-only inspection creates nothing).
    ///
    /// # Errors
    /// [`Error::Io`] (`NotFound` if the directory or, without `create`, the lock file is
    /// missing).
    pub fn lock(&self, mode: Mode, create: bool) -> Result<Guard<'_>, Error> {
        if self.private {
            match check_private_dir(&self.dir) {
                Err(Error::NoDirectory { .. }) => {
                    return Err(Error::io("open and lock the lock file", &self.dir)(
                        io::Error::new(io::ErrorKind::NotFound, "no cache directory"),
                    ));
                }
                other => other?,
            }
        }
        let held = lock::acquire(
            &self.dir,
            mode,
            create,
            self.file_mode(0o666),
            self.deadline(),
        )
        .map_err(self.lock_error(mode, "open and lock the lock file"))?;
        self.make_protocol_files_private(&held)?;
        Ok(Guard { cache: self, held })
    }

    /// In a private store: the lock file and the stamp made `0600` (refused if another user
    /// owns one).
    fn make_protocol_files_private(&self, held: &Held) -> Result<(), Error> {
        if !self.private {
            return Ok(());
        }
        if let Some(file) = held.file() {
            private::make_private(&self.dir.join(LOCK_FILE), file)?;
        }
        let stamp = self.dir.join(STAMP_FILE);
        match open_regular(&stamp) {
            Ok((file, _)) => private::make_private(&stamp, &file),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            // read_stamp reports what is wrong with it.
            Err(_) => Ok(()),
        }
    }

    /// Removes the directory's crash-stale staging artifacts now (under the exclusive lock),
    /// whether or not this process already swept it. Returns how many were removed. Does not
    /// change the stamp, never creates the directory. Only a directory the store would adopt
    /// is swept ([`CacheDir::lock_adopted`]): one that is no cache of this store is refused
    /// and left exactly as it was (no lock file created, nothing removed).
    ///
    /// # Errors
    /// [`Error::Unadopted`], [`Error::MalformedStamp`] or [`Error::NoDirectory`] (untouched),
    /// or the refusal if the directory cannot be locked or listed.
    pub fn sweep_stale_staging(&self) -> Result<usize, Error> {
        let guard = self.lock_adopted(Mode::Exclusive)?;
        guard.sweep_stale_staging()
    }

    /// The adoption rule, read without a lock and without creating or changing anything:
    /// - a stamp of this kind (any version) passes (the open then admits, sweeps or refuses a
    ///   newer regime);
    /// - a stamp of another kind is another store's directory ([`Error::ForeignStore`]);
    /// - a malformed stamp is [`Error::MalformedStamp`];
    /// - a bare stamp (a version alone, written before stamps named their kind) passes only if
    ///   every file in the directory is one this store writes (an entry, an own file
    ///   ([`CacheDir::with_own_files`]), the lock file, the stamp, a `.`-name); otherwise
    ///   which store wrote it cannot be told and it is refused ([`Error::UnkindedStamp`]).
    ///   One that passes is taken as this kind's at that version: the open rewrites the stamp
    ///   with the kind (sweeping nothing at an equal version, this store's entries at an older
    ///   one, refusing a newer one). A directory of another store that holds none of its
    ///   entries may so become this store's: nothing of it is deleted, and the other store then
    ///   refuses it by name ([`Error::ForeignStore`]);
    /// - an absent stamp passes unless the directory holds a file (not a directory) named like
    ///   an entry: such a directory is no cache of this store ([`Error::Unadopted`]). A missing
    ///   directory passes.
    ///
    /// Every cache-open and [`CacheDir::lock_adopted`] apply it before they create the lock
    /// file, so a refused directory is left exactly as it was; tools that report on a
    /// directory use it to say what the next open does.
    ///
    /// Racing with a store adopting the directory never refuses it: a store publishes its
    /// stamp before its first entry, so the stamp is read again after an entry-named file is
    /// found and only a stamp still absent refuses.
    ///
    /// # Errors
    /// [`Error::ForeignStore`], [`Error::UnkindedStamp`], [`Error::Unadopted`],
    /// [`Error::MalformedStamp`], or [`Error::Io`] if the stamp or the listing cannot be read.
    pub fn check_adoptable(&self) -> Result<(), Error> {
        let read = || read_stamp(&self.dir).map_err(Error::io("read the regime stamp", &self.dir));
        let stamp = read()?;
        if let Some(refusal) = self.refusal(&stamp) {
            return Err(refusal);
        }
        match stamp {
            RegimeStamp::Kind { .. } | RegimeStamp::Malformed(_) => return Ok(()),
            RegimeStamp::Bare(version) => {
                return match self.first_foreign_file() {
                    Ok(None) => Ok(()),
                    Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
                    Ok(Some(name)) => Err(Error::UnkindedStamp {
                        path: self.dir.clone(),
                        version,
                        ours: self.kind,
                        name: name.chars().take(64).collect(),
                    }),
                    Err(e) => Err(Error::io("list the directory", &self.dir)(e)),
                };
            }
            RegimeStamp::Absent => {}
        }
        let first = match self.first_entry_file() {
            Ok(first) => first,
            Err(e) if e.kind() == io::ErrorKind::NotFound => None,
            Err(e) => return Err(Error::io("list the directory", &self.dir)(e)),
        };
        match first {
            Some(name) if read()? == RegimeStamp::Absent => Err(Error::Unadopted {
                path: self.dir.clone(),
                name: name.chars().take(64).collect(),
            }),
            _ => Ok(()),
        }
    }

    /// The refusal every open gives `stamp` whatever the directory holds: a stamp of another
    /// kind, a malformed one, a newer regime of this kind (or an invalid kind of ours).
    fn refusal(&self, stamp: &RegimeStamp) -> Option<Error> {
        if !is_valid_kind(self.kind) {
            return Some(Error::MalformedStamp {
                path: self.dir.clone(),
                kind: self.kind,
                content: format!("<this store's kind {:?} is not a valid kind>", self.kind),
            });
        }
        match stamp {
            RegimeStamp::Kind { kind, version } if kind != self.kind => Some(Error::ForeignStore {
                path: self.dir.clone(),
                found: kind.clone(),
                version: *version,
                ours: self.kind,
            }),
            RegimeStamp::Malformed(content) => Some(Error::MalformedStamp {
                path: self.dir.clone(),
                kind: self.kind,
                content: content.clone(),
            }),
            _ => None,
        }
    }

    /// The refusal of a newer regime (`found`) than this handle's.
    fn newer(&self, found: u32) -> Error {
        Error::NewerRegime {
            path: self.dir.clone(),
            kind: self.kind,
            found,
            ours: self.regime,
        }
    }

    /// Takes the locks in `mode` **without** the cache-open's stamp transition, like
    /// [`CacheDir::lock`], for a tool that removes files of a cache whatever its regime
    /// (garbage collection, clearing it), but only in a directory the store would adopt
    /// ([`CacheDir::check_adoptable`], checked before the lock file is created and again
    /// under the lock): a user's directory given as the cache is refused with nothing created,
    /// deleted or stamped. Never creates the directory and never writes the stamp; creates the
    /// lock file of an existing directory that passes.
    ///
    /// # Errors
    /// [`Error::NoDirectory`] for a missing directory, the adoption refusal
    /// ([`Error::Unadopted`], [`Error::MalformedStamp`]), or [`Error::Io`].
    pub fn lock_adopted(&self, mode: Mode) -> Result<Guard<'_>, Error> {
        self.check_adoptable()?;
        let guard = self.lock(mode, true).map_err(|e| match e {
            e if e.is_not_found() => Error::NoDirectory {
                path: self.dir.clone(),
            },
            e => e,
        })?;
        self.check_adoptable()?;
        Ok(guard)
    }

    fn open(&self, create: bool, want: Mode) -> Result<Guard<'_>, Error> {
        if self.private {
            if create {
                create_private_dir(&self.dir)?;
            } else {
                check_private_dir(&self.dir)?;
            }
        } else if create {
            retry(|| fs::create_dir_all(&self.dir))
                .map_err(Error::io("create the directory", &self.dir))?;
        }
        // Before the lock file is created: a directory that is no cache of ours is refused
        // untouched (the check is repeated under the exclusive lock before any stamping).
        // Anything else (an unreadable listing, say) is the locked path's to report. Once
        // the lock file is there, the check under the lock suffices (one `lstat` instead of
        // a second stamp read on every open).
        if fs::symlink_metadata(self.dir.join(LOCK_FILE)).is_err()
            && let Err(
                e @ (Error::Unadopted { .. }
                | Error::MalformedStamp { .. }
                | Error::ForeignStore { .. }
                | Error::UnkindedStamp { .. }),
            ) = self.check_adoptable()
        {
            return Err(e);
        }
        let sweep = !staging::already_swept(&self.dir);
        let mut mode = if sweep { Mode::Exclusive } else { want };
        // Exclusive only for the first-open sweep: a directory we cannot write skips it, and
        // so does an open that would have to wait for it (the sweep is left to a later open).
        let mut optional = want == Mode::Shared && sweep;
        let deadline = self.deadline();
        loop {
            let wait_until = if optional {
                Some(Instant::now())
            } else {
                deadline
            };
            let acquired = lock::acquire(&self.dir, mode, true, self.file_mode(0o666), wait_until);
            let held = match acquired {
                Ok(h) => h,
                Err(e) if e.kind() == io::ErrorKind::NotFound && !create => {
                    return Err(Error::NoDirectory {
                        path: self.dir.clone(),
                    });
                }
                Err(e) if optional && (cannot_write(&e) || e.kind() == io::ErrorKind::TimedOut) => {
                    mode = Mode::Shared;
                    optional = false;
                    continue;
                }
                Err(e) => return Err(self.lock_error(mode, "open and lock the lock file")(e)),
            };
            let stamp =
                read_stamp(&self.dir).map_err(Error::io("read the regime stamp", &self.dir))?;
            // Another store's directory is left as it was: its files' modes too.
            if let Some(refusal) = self.refusal(&stamp) {
                return Err(refusal);
            }
            // Nor is a directory this store would not adopt (checked again, under the
            // exclusive lock, before anything is swept or stamped).
            if matches!(stamp, RegimeStamp::Absent | RegimeStamp::Bare(_)) {
                self.check_adoptable()?;
            }
            self.make_protocol_files_private(&held)?;
            match &stamp {
                RegimeStamp::Kind { version, .. } if *version == self.regime => {}
                RegimeStamp::Kind { version: v, .. } | RegimeStamp::Bare(v) if *v > self.regime => {
                    // A bare stamp is refused as newer only once it is told to be ours (an
                    // unkinded one names what it holds instead).
                    if matches!(stamp, RegimeStamp::Bare(_)) {
                        self.check_adoptable()?;
                    }
                    return Err(self.newer(*v));
                }
                _ => {
                    if held.mode() == Mode::Shared {
                        drop(held);
                        mode = Mode::Exclusive;
                        optional = false;
                        continue;
                    }
                    // Under the exclusive lock, before anything is deleted or stamped: an
                    // absent stamp's directory holds no entry-named file, a bare stamp's holds
                    // only this store's files.
                    if matches!(stamp, RegimeStamp::Absent | RegimeStamp::Bare(_)) {
                        self.check_adoptable()?;
                    }
                    self.transition(&stamp)
                        .map_err(Error::io("sweep entries for a new regime", &self.dir))?;
                }
            }
            if held.mode() == Mode::Exclusive {
                staging::sweep_once(&self.dir, self.stale_staging_after);
            }
            return Ok(Guard { cache: self, held });
        }
    }

    /// The name of the first directory item this store never writes (see
    /// [`CacheDir::check_adoptable`]'s bare stamps), if any.
    fn first_foreign_file(&self) -> io::Result<Option<String>> {
        for item in fs::read_dir(&self.dir)? {
            let item = item?;
            let name = match item.file_name().into_string() {
                Ok(name) => name,
                Err(raw) => return Ok(Some(raw.to_string_lossy().into_owned())),
            };
            if name.starts_with('.') || name == LOCK_FILE || name == STAMP_FILE {
                continue;
            }
            let is_file = !item.file_type()?.is_dir();
            if !(is_file && (self.is_entry(&name) || (self.is_own_file)(&name))) {
                return Ok(Some(name));
            }
        }
        Ok(None)
    }

    /// The name of the first file (no directory) `is_entry` accepts, if any.
    fn first_entry_file(&self) -> io::Result<Option<String>> {
        for item in fs::read_dir(&self.dir)? {
            let item = item?;
            let Ok(name) = item.file_name().into_string() else {
                continue;
            };
            if self.is_entry(&name) && !item.file_type()?.is_dir() {
                return Ok(Some(name));
            }
        }
        Ok(None)
    }

    /// Deletes every entry (every name `is_entry` accepts that is not a directory) of an
    /// older regime (none for an absent stamp: see [`CacheDir::check_adoptable`]; none for a
    /// bare stamp of this regime, which only gains its kind), then publishes this handle's
    /// stamp. A crash in between leaves the old stamp, so the next opener sweeps again.
    fn transition(&self, from: &RegimeStamp) -> io::Result<()> {
        let mut removed = 0usize;
        // An absent stamp was adopted because no file is named like an entry: nothing to
        // sweep, and a second listing could only delete a user's file created since.
        let sweep = match from {
            RegimeStamp::Absent => false,
            RegimeStamp::Bare(v) => *v != self.regime,
            _ => true,
        };
        if sweep {
            for item in fs::read_dir(&self.dir)? {
                let item = item?;
                let Ok(name) = item.file_name().into_string() else {
                    continue;
                };
                if !self.is_entry(&name) || item.file_type()?.is_dir() {
                    continue;
                }
                match fs::remove_file(item.path()) {
                    Ok(()) => removed += 1,
                    Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                    Err(e) => return Err(e),
                }
            }
        }
        regime::publish_stamp(&self.dir, self.kind, self.regime, self.file_mode(0o666))?;
        tracing::info!(
            target: "cache_dir",
            dir = %self.dir.display(),
            from = %from,
            kind = self.kind,
            to = self.regime,
            removed,
            "cache directory moved to a new regime"
        );
        Ok(())
    }
}

impl Guard<'_> {
    /// How the directory is held (a shared open may hold it exclusively: see
    /// [`CacheDir::with_shared`]).
    pub fn mode(&self) -> Mode {
        self.held.mode()
    }

    /// Whether this is a shared hold without a file lock (a directory this process cannot
    /// write and that has no lock file; see [`CacheDir::with_shared`]).
    pub fn is_lock_free(&self) -> bool {
        self.held.is_lock_free()
    }

    /// The cache directory.
    pub fn dir(&self) -> &Path {
        &self.cache.dir
    }

    /// The path of the entry file `name`, once [`validate_name`] accepts it.
    ///
    /// # Errors
    /// [`Error::InvalidName`].
    pub fn path(&self, name: &str) -> Result<PathBuf, Error> {
        validate_name(name)?;
        Ok(self.cache.dir.join(name))
    }

    /// The bytes of the entry file `name`, read with [`read_regular`]: only a regular file,
    /// never blocking, never through a link, at most `max_len` bytes.
    ///
    /// # Errors
    /// [`Error::InvalidName`], or [`Error::Io`] (`during`: "read the entry") whose source is
    /// `NotFound` for an absent entry ([`Error::is_not_found`]), `FileTooLarge` past `max_len`,
    /// `IsADirectory` or `InvalidInput` for something that is not a regular file.
    pub fn read(&self, name: &str, max_len: u64) -> Result<Vec<u8>, Error> {
        let path = self.path(name)?;
        read_regular(&path, max_len).map_err(Error::io("read the entry", &path))
    }

    /// Publishes `bytes` as the entry file `name` atomically (`atomicwrites`: staged in a
    /// `.atomicwrite*` directory, fsynced, renamed over `name`, directory fsynced). A reader
    /// sees the whole old file or the whole new one; concurrent writers of one name: the last
    /// rename wins. In a private store the file is created `0600` (see [`publish_file`]).
    ///
    /// # Errors
    /// [`Error::InvalidName`], or [`Error::Io`] (`during`: "publish the entry"), also for a
    /// lock-free hold (which never writes).
    pub fn publish(&self, name: &str, bytes: &[u8]) -> Result<(), Error> {
        let path = self.path(name)?;
        if self.is_lock_free() {
            return Err(Error::io("publish the entry", &path)(io::Error::new(
                io::ErrorKind::ReadOnlyFilesystem,
                "the directory is read-only for this process",
            )));
        }
        publish_file(&path, bytes, self.cache.file_mode(0o666))
            .map_err(Error::io("publish the entry", &path))
    }

    /// Publishes each `(name, bytes)` as [`Guard::publish`] does, in order, with one fsync of
    /// the directory after the last rename instead of one per file (in a private store; in
    /// another each is [`Guard::publish`]ed). Each file is fsynced before its rename, so from
    /// that rename on its name holds the whole new file; when this returns, every rename is
    /// durable. A crash before then may leave any subset of them published, each whole.
    ///
    /// # Errors
    /// As [`Guard::publish`], for the first entry that fails; the entries before it stay
    /// published (their renames are made durable first), the ones after it are not written.
    pub fn publish_all<N: AsRef<str>, B: AsRef<[u8]>>(
        &self,
        entries: &[(N, B)],
    ) -> Result<(), Error> {
        let mode = self.cache.file_mode(0o666);
        if mode & 0o077 != 0 || self.is_lock_free() {
            return entries
                .iter()
                .try_for_each(|(name, bytes)| self.publish(name.as_ref(), bytes.as_ref()));
        }
        let first = entries.iter().try_for_each(|(name, bytes)| {
            let path = self.path(name.as_ref())?;
            rename_private_into_place(&path, bytes.as_ref(), mode)
                .map(|_| ())
                .map_err(Error::io("publish the entry", &path))
        });
        let dir = &self.cache.dir;
        fs::File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(Error::io("publish the entry", dir))?;
        first
    }

    /// Appends `bytes` to the file `name` (created with mode `0644` if absent, `0600` in a
    /// private store) in one `write`
    /// with `O_APPEND`, so concurrent appenders of short records (up to a page) never
    /// interleave them. Not atomic publication and not fsynced: for hints that may be lost
    /// (an index a reader re-checks), never for entries. Opened as every protocol file is
    /// (non-blocking, no link, must be a regular file); nothing is written if the file already
    /// holds `max_len` bytes or more.
    ///
    /// # Errors
    /// [`Error::InvalidName`], or [`Error::Io`] (`during`: "append to the file"), also for a
    /// lock-free hold or a file at its cap (`FileTooLarge`).
    pub fn append(&self, name: &str, bytes: &[u8], max_len: u64) -> Result<(), Error> {
        use std::os::unix::fs::OpenOptionsExt;
        let path = self.path(name)?;
        let fail = Error::io("append to the file", &path);
        if self.is_lock_free() {
            return Err(fail(io::Error::new(
                io::ErrorKind::ReadOnlyFilesystem,
                "the directory is read-only for this process",
            )));
        }
        let mut file = match retry(|| {
            fs::OpenOptions::new()
                .append(true)
                .create(true)
                .mode(self.cache.file_mode(0o644))
                .custom_flags(read::read_flags())
                .open(&path)
        }) {
            Ok(f) => f,
            Err(e) => return Err(fail(e)),
        };
        let meta = match file.metadata() {
            Ok(m) => m,
            Err(e) => return Err(fail(e)),
        };
        if !meta.is_file() {
            return Err(fail(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{}, not a regular file", read::describe(meta.file_type())),
            )));
        }
        if meta.len() >= max_len {
            return Err(fail(io::Error::new(
                io::ErrorKind::FileTooLarge,
                format!("the file holds the cap of {max_len} bytes"),
            )));
        }
        retry(|| file.write_all(bytes)).map_err(fail)
    }

    /// Removes the entry file `name`; `false` if there was none.
    ///
    /// # Errors
    /// [`Error::InvalidName`], or [`Error::Io`] (`during`: "remove the entry").
    pub fn remove(&self, name: &str) -> Result<bool, Error> {
        let path = self.path(name)?;
        match retry(|| fs::remove_file(&path)) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(Error::io("remove the entry", &path)(e)),
        }
    }

    /// The entry files of the directory (every name the store's `is_entry` accepts), streamed
    /// from the directory listing: memory stays bounded whatever the directory holds.
    ///
    /// # Errors
    /// [`Error::Io`] (`during`: "list the directory") if the listing cannot start; errors of
    /// single items are yielded.
    pub fn entries(&self) -> Result<Entries<'_>, Error> {
        Ok(Entries {
            listing: fs::read_dir(&self.cache.dir)
                .map_err(Error::io("list the directory", &self.cache.dir))?,
            is_entry: self.cache.is_entry,
            _guard: std::marker::PhantomData,
        })
    }

    /// Removes crash-stale staging artifacts (older than the handle's threshold), re-checking
    /// each one's age just before deleting it. Returns how many were removed.
    ///
    /// # Errors
    /// [`Error::Io`] if the hold is not exclusive or the directory cannot be listed.
    pub fn sweep_stale_staging(&self) -> Result<usize, Error> {
        if self.mode() != Mode::Exclusive {
            return Err(Error::io("sweep stale staging", &self.cache.dir)(
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "the sweep needs the exclusive lock",
                ),
            ));
        }
        staging::sweep_stale(&self.cache.dir, self.cache.stale_staging_after)
            .map_err(Error::io("list the directory", &self.cache.dir))
    }
}

/// Publishes `bytes` at `path` atomically, as [`Guard::publish`] does: staged in
/// `<parent>/.atomicwrite<suffix>/tmpfile.tmp`, the file fsynced, renamed over `path`, the
/// directory fsynced; a failed write removes its staging and leaves the earlier file intact.
/// The file is created with `mode` (before the umask) on its descriptor when it is staged.
///
/// A **private** `mode` (no group or other bit, as a private store's `0o600`) is staged by
/// this crate itself: the staging directory is created `0700` and the file `O_CREAT|O_EXCL`
/// with `mode`, so no other user can open either at any moment, whatever the umask.
/// (`atomicwrites`, used for other modes, creates its staging directory with the umask's
/// mode: `0777` under umask `000`.)
///
/// # Errors
/// The I/O error.
pub fn publish_file(path: &Path, bytes: &[u8], mode: u32) -> io::Result<()> {
    if mode & 0o077 == 0 {
        return publish_private_file(path, bytes, mode);
    }
    let mut options = fs::OpenOptions::new();
    options.write(true).create(true).truncate(true).mode(mode);
    AtomicFile::new(path, AllowOverwrite)
        .write_with_options(|f| f.write_all(bytes), options)
        .map_err(io::Error::from)
}

fn publish_private_file(path: &Path, bytes: &[u8], mode: u32) -> io::Result<()> {
    let parent = rename_private_into_place(path, bytes, mode)?;
    fs::File::open(parent)?.sync_all()
}

/// [`publish_private_file`] but the directory's fsync: staged privately, fsynced, renamed
/// to `path`; returns the directory, whose fsync makes the rename durable.
fn rename_private_into_place<'p>(path: &'p Path, bytes: &[u8], mode: u32) -> io::Result<&'p Path> {
    use std::os::unix::fs::DirBuilderExt;
    use std::sync::atomic::{AtomicU64, Ordering};
    static SEQ: AtomicU64 = AtomicU64::new(0);
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let name = path
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no file name"))?;
    let staging = loop {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let candidate = parent.join(format!(
            "{STAGING_PREFIX}{}-{}-{nanos}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        ));
        match fs::DirBuilder::new().mode(0o700).create(&candidate) {
            Ok(()) => break candidate,
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    };
    let staged = staging.join("tmpfile.tmp");
    let written = (|| {
        let mut f = retry(|| {
            fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(mode)
                .open(&staged)
        })?;
        retry(|| f.write_all(bytes))?;
        f.sync_all()?;
        drop(f);
        fs::rename(&staged, parent.join(name))
    })();
    let _ = fs::remove_file(&staged);
    let _ = fs::remove_dir(&staging);
    written.map(|()| parent)
}

/// The total of file sizes `lens` (lengths as the file system reports them), stopping at
/// `u64::MAX`: a sparse file's size costs no disk, so a store's files can claim more bytes
/// together than a `u64` counts (a plain sum panics in a debug build and wraps in release).
/// The stores' statistics and size limits sum with it.
///
/// ```
/// assert_eq!(cache_dir::total_bytes([1, 2, 3]), 6);
/// let half = u64::MAX / 2 + 1;
/// assert_eq!(cache_dir::total_bytes([half, half]), u64::MAX);
/// assert_eq!(cache_dir::total_bytes([u64::MAX, 1, u64::MAX]), u64::MAX);
/// ```
pub fn total_bytes(lens: impl IntoIterator<Item = u64>) -> u64 {
    lens.into_iter().fold(0, u64::saturating_add)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The explicit sweep follows the adoption rule: a directory without a stamp that holds
    /// a file named like an entry is refused, with no lock file created and its crash-stale
    /// staging (which a cache-open of it would refuse to touch too) left in place; once the
    /// file is gone the same sweep removes the staging.
    #[test]
    fn the_explicit_sweep_refuses_an_unadopted_directory_untouched() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let cache = CacheDir::new(tmp.path(), "test-store", 7, |n| n.ends_with(".ron"))
            .with_stale_staging_after(Duration::ZERO);
        fs::write(tmp.path().join("settings.ron"), "mine").expect("write");
        let staging = tmp.path().join(format!("{STAGING_PREFIX}-left"));
        fs::create_dir(&staging).expect("staging");
        let listing = || {
            let mut names: Vec<String> = fs::read_dir(tmp.path())
                .expect("list")
                .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
                .collect();
            names.sort();
            names
        };
        let before = listing();
        assert!(matches!(
            cache.sweep_stale_staging(),
            Err(Error::Unadopted { .. })
        ));
        assert_eq!(listing(), before, "the refused sweep changed the directory");
        fs::remove_file(tmp.path().join("settings.ron")).expect("remove");
        assert_eq!(cache.sweep_stale_staging().expect("sweep"), 1);
        assert!(!staging.exists());
    }

    /// Adopting a directory with no stamp sweeps nothing: the adoption check found no file
    /// named like an entry, and one that appeared since (a user's `settings.ron`, created
    /// between the check and the stamping) is no entry of ours.
    #[test]
    fn adopting_an_unstamped_directory_deletes_nothing() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let cache = CacheDir::new(tmp.path(), "test-store", 7, |n| n.ends_with(".ron"));
        fs::write(tmp.path().join("settings.ron"), "mine").expect("write");
        cache.transition(&RegimeStamp::Absent).expect("adopt");
        assert_eq!(
            fs::read_to_string(tmp.path().join("settings.ron")).expect("kept"),
            "mine"
        );
        assert_eq!(
            read_stamp(tmp.path()).expect("stamp"),
            RegimeStamp::Kind {
                kind: "test-store".into(),
                version: 7
            }
        );
        // An older regime's entries are swept.
        cache.transition(&RegimeStamp::Bare(6)).expect("sweep");
        assert!(!tmp.path().join("settings.ron").exists());
    }
}
