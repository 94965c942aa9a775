//! Read-only inspection of a cache directory and garbage collection, for tools (`kcache`).

use std::fs;
use std::io;
use std::path::Path;
use std::time::{Duration, SystemTime};

use cache_dir::{CacheDir, Mode};

use super::record::{MissReason, Refusal};
use super::{DiskCache, RegimeStamp, Space, decode_entry, key_starts_with_digest, read_stamp};
use super::{LOCK_FILE, MAX_ENTRY_BYTES, STAMP_FILE, is_entry_of_any_version, refusal, unreadable};
use crate::entry::ScheduleEntry;
use crate::placement::PlacementEntry;
use crate::{CacheKey, DiskEntry, Error};

/// One entry file of a cache directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EntryFile {
    /// The file name.
    pub name: String,
    /// Its filename space.
    pub space: Space,
    /// The key its name encodes.
    pub key: CacheKey,
    /// Its size in bytes (0 for a non-file).
    pub bytes: u64,
    /// Time since it was last modified (when it was published).
    pub age: Duration,
    /// Whether it is a regular file (something else at an entry name is junk).
    pub is_file: bool,
}

/// One staging artifact (`.atomicwrite*`) of a cache directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StagingArtifact {
    /// The directory name.
    pub name: String,
    /// Total bytes of the files directly inside it (their sizes, which sparse files can make
    /// huge; the total stops at `u64::MAX`).
    pub bytes: u64,
    /// Time since its newest modification.
    pub age: Duration,
}

/// What a cache directory holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Inventory {
    /// The regime stamp.
    pub regime: RegimeStamp,
    /// Whether the lock file exists.
    pub lock_file: bool,
    /// Entry files of both spaces, sorted by name.
    pub entries: Vec<EntryFile>,
    /// Staging artifacts, sorted by name.
    pub staging: Vec<StagingArtifact>,
    /// Sibling index files (`<digest>.keys`), sorted.
    pub index: Vec<String>,
    /// Names that are neither entries, staging, sibling indexes, the lock nor the stamp
    /// (sorted).
    pub foreign: Vec<String>,
}

/// Why an entry file does not verify.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum EntryProblem {
    /// Something other than a regular file sits at the entry's name.
    NotAFile,
    /// The entry is unreadable, unparsable, or of another version (the reason a lookup would
    /// give).
    Invalid(MissReason),
    /// The entry's recorded digest is not the first component of its key: a lookup by the
    /// key's identity would never accept it (a renamed or misplaced file).
    DigestNotKeyPrefix {
        /// The digest the entry records.
        digest: String,
    },
}

impl std::fmt::Display for EntryProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            EntryProblem::NotAFile => f.write_str("not a regular file"),
            EntryProblem::Invalid(m) => write!(f, "{m}"),
            EntryProblem::DigestNotKeyPrefix { digest } => {
                write!(f, "digest {digest:?} is not the first component of the key")
            }
        }
    }
}

fn inspect_err(path: &Path) -> impl FnOnce(io::Error) -> Error + '_ {
    move |source| Error::Inspect {
        path: path.to_path_buf(),
        source,
    }
}

/// The problem of an entry file at `path` that could not be read.
fn unreadable_at(path: &Path) -> impl FnOnce(io::Error) -> EntryProblem + '_ {
    move |source| {
        EntryProblem::Invalid(unreadable(cache_dir::Error::Io {
            during: "read the entry",
            path: path.to_path_buf(),
            source,
        }))
    }
}

fn age_of(meta: &fs::Metadata) -> Duration {
    meta.modified()
        .ok()
        .and_then(|t| SystemTime::now().duration_since(t).ok())
        .unwrap_or(Duration::ZERO)
}

/// One name of a cache directory, as [`scan`] sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Found {
    /// The lock file.
    LockFile,
    /// An entry file of the current key shape.
    Entry(EntryFile),
    /// A staging artifact.
    Staging(StagingArtifact),
    /// A digest's sibling index (`<digest>.keys`, see `SIBLINGS_SUFFIX`).
    Index(String),
    /// Any other name (including entries of an older key shape, which a regime change sweeps).
    Foreign(String),
}

/// Streams the names of `dir` to `visit` without changing anything and without holding them
/// all (memory stays bounded at any directory size; names come in directory order). Never
/// creates the directory, the lock file or a stamp. If the lock file exists and can be opened,
/// the listing is taken under a shared lock (so it never sees a regime transition half done).
/// Returns the stamp.
///
/// # Errors
/// [`Error::Inspect`] if the directory or its stamp cannot be read.
pub fn scan(dir: &Path, mut visit: impl FnMut(Found)) -> Result<RegimeStamp, Error> {
    let cache = CacheDir::new(
        dir,
        super::STORE_KIND,
        super::CACHE_REGIME_VERSION,
        is_entry_of_any_version,
    );
    let _held = cache.lock(Mode::Shared, false).ok();
    let regime = read_stamp(dir).map_err(inspect_err(&dir.join(STAMP_FILE)))?;
    for item in fs::read_dir(dir).map_err(inspect_err(dir))? {
        let item = item.map_err(inspect_err(dir))?;
        let name = item.file_name().to_string_lossy().into_owned();
        let path = item.path();
        if name == LOCK_FILE {
            visit(Found::LockFile);
        } else if name == STAMP_FILE {
        } else if cache_dir::is_staging(&name) {
            let bytes = fs::read_dir(&path)
                .map(|rd| {
                    cache_dir::total_bytes(
                        rd.flatten()
                            .filter_map(|c| c.metadata().ok())
                            .map(|m| m.len()),
                    )
                })
                .unwrap_or(0);
            let age = cache_dir::staging_age(&path).unwrap_or(Duration::ZERO);
            visit(Found::Staging(StagingArtifact { name, bytes, age }));
        } else if let Some((space, key)) = Space::of_file_name(&name) {
            let meta = match item.metadata() {
                Ok(m) => m,
                // Removed since the listing (a concurrent gc): gone, not an error.
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => return Err(inspect_err(&path)(e)),
            };
            visit(Found::Entry(EntryFile {
                name,
                space,
                key,
                bytes: if meta.is_file() { meta.len() } else { 0 },
                age: age_of(&meta),
                is_file: meta.is_file(),
            }));
        } else if name.ends_with(super::SIBLINGS_SUFFIX) && is_entry_of_any_version(&name) {
            visit(Found::Index(name));
        } else {
            visit(Found::Foreign(name));
        }
    }
    Ok(regime)
}

/// Lists `dir` without changing anything, as [`scan`] does, collecting and sorting every
/// name: for small directories and tests (a tool on a large directory uses [`scan`], which
/// holds nothing).
///
/// # Errors
/// [`Error::Inspect`] if the directory or its stamp cannot be read.
pub fn inventory(dir: &Path) -> Result<Inventory, Error> {
    let mut inv = Inventory {
        regime: RegimeStamp::Absent,
        lock_file: false,
        entries: Vec::new(),
        staging: Vec::new(),
        index: Vec::new(),
        foreign: Vec::new(),
    };
    inv.regime = scan(dir, |found| match found {
        Found::Index(n) => inv.index.push(n),
        Found::LockFile => inv.lock_file = true,
        Found::Entry(e) => inv.entries.push(e),
        Found::Staging(s) => inv.staging.push(s),
        Found::Foreign(n) => inv.foreign.push(n),
    })?;
    inv.entries.sort_by(|a, b| a.name.cmp(&b.name));
    inv.staging.sort_by(|a, b| a.name.cmp(&b.name));
    inv.index.sort();
    inv.foreign.sort();
    Ok(inv)
}

/// How many leading bytes [`entry_version`] reads.
pub(super) const HEADER_BYTES: u64 = 256;

/// The `version` an entry file records, read from its first `HEADER_BYTES` only (as every
/// store writes it: `(` then `version: N` first): the cheap check `kcache stats` makes on every
/// entry. A file whose header is not of that shape is reported `Unparsable`; the rest of the
/// file is not looked at ([`verify_entry`] parses the whole entry).
///
/// # Errors
/// The problem found: not a regular file, unreadable, or no version header.
pub fn entry_version(dir: &Path, entry: &EntryFile) -> Result<u32, EntryProblem> {
    use std::io::Read;
    if !entry.is_file {
        return Err(EntryProblem::NotAFile);
    }
    // `entry` comes from a listing whose `lstat` said regular file.
    let path = dir.join(&entry.name);
    let (file, _) = cache_dir::open_listed_regular(&path).map_err(unreadable_at(&path))?;
    let mut head = Vec::with_capacity(HEADER_BYTES as usize);
    file.take(HEADER_BYTES)
        .read_to_end(&mut head)
        .map_err(unreadable_at(&path))?;
    parse_version_header(&head).ok_or(EntryProblem::Invalid(MissReason::Unparsable {
        message: "no `(version: N` header".into(),
    }))
}

/// `N` from `(version: N,` at the start of `head` (RON white space and comments aside are not
/// accepted: only the layout stores write, with any ASCII white space).
fn parse_version_header(head: &[u8]) -> Option<u32> {
    let ws = |s: &[u8]| -> usize { s.iter().take_while(|b| b.is_ascii_whitespace()).count() };
    let mut at = ws(head);
    at += usize::from(head.get(at) == Some(&b'('));
    if at == 0 || head[at - 1] != b'(' {
        return None;
    }
    at += ws(&head[at..]);
    let rest = head[at..].strip_prefix(b"version")?;
    let rest = &rest[ws(rest)..];
    let rest = rest.strip_prefix(b":")?;
    let rest = &rest[ws(rest)..];
    let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
    let after = &rest[digits..];
    let after = &after[ws(after)..];
    if digits == 0 || digits > 10 || !matches!(after.first(), Some(b',') | Some(b')')) {
        return None;
    }
    std::str::from_utf8(&rest[..digits]).ok()?.parse().ok()
}

/// Checks one entry file of `dir`: it is a regular file, parses as its space's entry type at
/// the current version, and the digest it records is the first `-`-separated component of its
/// key (or the whole key) — the same rule `store` enforces, so an entry written by `store`
/// always verifies. Returns the recorded digest.
///
/// # Errors
/// The problem found.
pub fn verify_entry(dir: &Path, entry: &EntryFile) -> Result<String, EntryProblem> {
    if !entry.is_file {
        return Err(EntryProblem::NotAFile);
    }
    let path = dir.join(&entry.name);
    let bytes = cache_dir::read_regular(&path, MAX_ENTRY_BYTES).map_err(unreadable_at(&path))?;
    let digest = match entry.space {
        Space::Placement => decode_entry::<PlacementEntry>(&bytes, None)
            .map(|e| e.digest().to_owned())
            .map_err(EntryProblem::Invalid)?,
        // The op type is the backend's; any op parses as a RON value.
        Space::Schedule => decode_entry::<ScheduleEntry<ron::Value>>(&bytes, None)
            .map(|e| e.digest().to_owned())
            .map_err(EntryProblem::Invalid)?,
    };
    if !key_starts_with_digest(entry.key.as_str(), &digest) {
        return Err(EntryProblem::DigestNotKeyPrefix { digest });
    }
    Ok(digest)
}

/// What [`DiskCache::gc`] removed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GcReport {
    /// Staging artifacts removed.
    pub staging_removed: usize,
    /// Entry files removed.
    pub entries_removed: usize,
    /// Bytes of the removed entry files (their sizes, which sparse files can make huge; the
    /// total stops at `u64::MAX`).
    pub bytes_freed: u64,
}

impl DiskCache {
    /// Garbage-collects the directory under the exclusive lock: removes staging artifacts
    /// older than the stale-staging threshold and, if `older_than` is given, every entry file
    /// (both spaces) published at least that long ago. Never removes the lock file, never
    /// writes the stamp, never creates the directory; entries are collected whatever the
    /// stamp's regime version.
    ///
    /// Only a directory the store would adopt is collected (`cache_dir::CacheDir::lock_adopted`):
    /// one **without a stamp that holds a file named like an entry**
    /// ([`is_entry_of_any_version`]: a home directory's `settings.ron`, `notes.keys`) is no
    /// cache of this store and is refused ([`Refusal::Unadopted`]), as is one with a malformed
    /// stamp ([`Refusal::MalformedStamp`]): nothing removed, no lock file created. A directory
    /// without a stamp and without such files is collected (only staging can be there) and
    /// stays unstamped.
    ///
    /// # Errors
    /// The refusal if the directory is not adopted or cannot be locked or listed; failures to
    /// remove single files are skipped (and logged).
    pub fn gc(&self, older_than: Option<Duration>) -> Result<GcReport, Refusal> {
        let held = self.dir.lock_adopted(Mode::Exclusive).map_err(refusal)?;
        let mut report = GcReport {
            staging_removed: held.sweep_stale_staging().map_err(refusal)?,
            ..GcReport::default()
        };
        let Some(limit) = older_than else {
            return Ok(report);
        };
        for item in held.entries().map_err(refusal)?.flatten() {
            let index = item.name.ends_with(super::SIBLINGS_SUFFIX);
            if Space::of_file_name(&item.name).is_none() && !index {
                continue;
            }
            let item = item.item;
            let Ok(meta) = item.metadata() else { continue };
            if meta.is_dir() || age_of(&meta) < limit {
                continue;
            }
            match fs::remove_file(item.path()) {
                // A sibling index is a hint beside the entries: its removal frees bytes but
                // is not counted as an entry (an index untouched that long lists entries at
                // least as old).
                Ok(()) => {
                    report.entries_removed += usize::from(!index);
                    report.bytes_freed = report.bytes_freed.saturating_add(meta.len());
                }
                Err(e) => tracing::warn!(
                    target: "schedule_cache::disk",
                    path = %item.path().display(),
                    error = %e,
                    "gc could not remove an entry"
                ),
            }
        }
        Ok(report)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn the_version_header_is_read_from_the_layouts_stores_write() {
        assert_eq!(
            parse_version_header(b"(\n    version: 2,\n    digest: \"ab\""),
            Some(2)
        );
        assert_eq!(parse_version_header(b"(version:1)"), Some(1));
        for bad in [
            &b""[..],
            b"version: 1,",
            b"(versio: 1,",
            b"(version: ,",
            b"(version: 1x",
            b"(version: 99999999999,",
        ] {
            assert_eq!(
                parse_version_header(bad),
                None,
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    proptest! {
        /// The header agrees with the full parse on every entry a store writes.
        #[test]
        fn the_header_agrees_with_the_full_parse(version in any::<u32>(), flips in 0u32..40) {
            let mut e = crate::placement::PlacementEntry::new(
                "ab12",
                (0..flips).map(|n| crate::placement::Flip { node: n, direction: crate::placement::Direction::Inline }).collect(),
                crate::placement::Shipped::A,
            );
            e.version = version;
            let text = ron::ser::to_string_pretty(&e, ron::ser::PrettyConfig::default()).expect("encode");
            prop_assert_eq!(parse_version_header(text.as_bytes()), Some(version));
        }
    }
}
