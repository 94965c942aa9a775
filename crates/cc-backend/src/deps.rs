//! The files a compile read besides its translation unit (the headers its `#include`s
//! found, system headers too), so that a saved program is loaded only while every one of
//! them still holds what the compile read ([`collect`], [`verify`]), and the include
//! search's [`Witness`]es, so that it is not loaded once a header of the same name would
//! shadow a recorded one ([`witnesses`], [`verify_witnesses`]): the contract is
//! [`CcBackend`](crate::CcBackend)'s "What a key does not cover".

use std::collections::BTreeMap;
use std::fs::File;
use std::io::Read;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use rustix::fs::OFlags;
use sha2::{Digest, Sha256};

use crate::error::CcError;
use crate::toolchain::{DEP_FILE, UNIT_NAME};
use crate::unlisted;

/// How long before the compile began a file's last change must lie for the file to vouch
/// for the program: a file system stamps a change with a coarse clock (a kernel tick on
/// Linux, 2 s on FAT), so a change just after the compile began may carry a time just
/// before it.
pub(crate) const SETTLED: Duration = Duration::from_secs(2);

/// The time a file's last change must precede for it to vouch for a compile that began at
/// `started` ([`SETTLED`] before).
fn settled_before(started: SystemTime) -> SystemTime {
    started
        .checked_sub(SETTLED)
        .unwrap_or(SystemTime::UNIX_EPOCH)
}

/// One file a compile read: its absolute path and the SHA-256 of its content.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Dep {
    pub(crate) path: String,
    pub(crate) digest: [u8; 32],
}

fn changed(path: &str, why: impl Into<String>) -> CcError {
    CcError::DependencyChanged {
        path: PathBuf::from(path),
        why: why.into(),
    }
}

/// What a program was compiled from besides its units, as far as saving it goes.
#[derive(Debug)]
pub(crate) enum Manifest {
    /// Compiled here: the unit directories (each holding its [`DEP_FILE`]) and when the
    /// compile began.
    Compiled {
        unit_dirs: Vec<PathBuf>,
        started: SystemTime,
    },
    /// Loaded from a saved program whose files and witnesses were verified at the load.
    Loaded(Vec<Dep>, Vec<Witness>),
}

impl Manifest {
    /// The files and digests a save records (see [`collect`]) and the witnesses of their
    /// include search (see [`witnesses`]) against the list `search` gives (asked only for
    /// a program compiled here).
    pub(crate) fn vouch(
        &self,
        search: impl FnOnce() -> Result<std::sync::Arc<Vec<String>>, CcError>,
    ) -> Result<(Vec<Dep>, Vec<Witness>), CcError> {
        match self {
            Manifest::Compiled { unit_dirs, started } => {
                let deps = collect(unit_dirs, *started)?;
                let listed: Vec<String> = deps.iter().map(|d| d.path.clone()).collect();
                unlisted::in_files(unit_dirs, &listed)?;
                let witnesses = witnesses(&search()?, &deps, *started)?;
                Ok((deps, witnesses))
            }
            Manifest::Loaded(deps, witnesses) => Ok((deps.clone(), witnesses.clone())),
        }
    }
}

/// The prerequisites of the make rule the compiler wrote (`kernel.o: kernel.c a.h ...`),
/// unescaped (`\ ` is a space, `\#` a `#`, `$$` a `$`); `None` if it is not one rule.
pub(crate) fn parse_make_rule(text: &str) -> Option<Vec<String>> {
    let joined = text.replace("\\\r\n", " ").replace("\\\n", " ");
    let mut tokens = Vec::new();
    let mut current = String::new();
    let mut chars = joined.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if matches!(chars.peek(), Some(' ' | '#' | '\\')) => {
                if let Some(next) = chars.next() {
                    current.push(next);
                }
            }
            '$' if chars.peek() == Some(&'$') => {
                chars.next();
                current.push('$');
            }
            c if c.is_whitespace() => {
                if !current.is_empty() {
                    tokens.push(std::mem::take(&mut current));
                }
            }
            c => current.push(c),
        }
    }
    if !current.is_empty() {
        tokens.push(current);
    }
    let mut tokens = tokens.into_iter();
    let target = tokens.next()?;
    if !target.ends_with(':') {
        return None;
    }
    let prerequisites: Vec<String> = tokens.collect();
    if prerequisites.iter().any(|t| t.ends_with(':')) {
        return None;
    }
    Some(prerequisites)
}

/// When the file's inode last changed (`st_ctime`): a write, and also a rename over its
/// name (an upgrade installing a file that keeps its packaged modification time) or a
/// `touch` backdating it, none of which can set it back.
fn changed_at(meta: &std::fs::Metadata) -> SystemTime {
    let secs = u64::try_from(meta.ctime()).unwrap_or(0);
    let nanos = u32::try_from(meta.ctime_nsec()).unwrap_or(0);
    SystemTime::UNIX_EPOCH + Duration::new(secs, nanos.min(999_999_999))
}

/// The flags every open of a listed file adds to `O_RDONLY` (and std's `O_CLOEXEC`):
/// `O_NONBLOCK`, so a FIFO put at the name after it was checked opens without waiting for
/// a writer (and is then refused on its handle), and `O_NOCTTY`. Links are followed: a
/// header is often reached through one.
fn open_flags() -> i32 {
    // The flag bits are small positive constants, so the conversion never fails.
    i32::try_from((OFlags::NONBLOCK | OFlags::NOCTTY).bits()).unwrap_or(0)
}

/// The SHA-256 of the regular file at `path` (links followed) and when that file last
/// changed ([`changed_at`]), read on the opened handle *after* its content was hashed: a
/// change time never goes back, so a write during the read shows in it.
///
/// Never blocks: the name is checked before the open (so a FIFO or device already there
/// is never opened), the open does not wait ([`open_flags`]), and the handle is checked
/// again before reading.
fn digest_file(path: &str) -> Result<([u8; 32], SystemTime), CcError> {
    let io = |e: std::io::Error| changed(path, e.to_string());
    if !std::fs::metadata(path).map_err(io)?.is_file() {
        return Err(changed(path, "not a regular file"));
    }
    let mut file = File::options()
        .read(true)
        .custom_flags(open_flags())
        .open(path)
        .map_err(io)?;
    if !file.metadata().map_err(io)?.is_file() {
        return Err(changed(path, "not a regular file"));
    }
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match file.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(io(e)),
        };
        hasher.update(&buf[..n]);
    }
    let mut digest = [0u8; 32];
    digest.copy_from_slice(&hasher.finalize());
    // After the read: a change made while it ran is in this change time.
    let after = file.metadata().map_err(io)?;
    Ok((digest, changed_at(&after)))
}

/// The most symbolic links [`resolution_changed_at`] follows resolving one path (Linux's
/// `ELOOP` bound).
const MAX_LINKS: usize = 40;

/// When a symbolic link met resolving the absolute `path` last changed (the latest
/// [`changed_at`] of them all; the epoch if there is none): a link at any component, a
/// directory's (`/opt/cuda -> cuda-12.4`) as well as the file's, and every link of a chain
/// (`link.h -> mid.h -> six.h`), each read with `lstat` and followed as the kernel follows
/// it (`..` after a link leaves the link's target). Pointing any of them at another file
/// changes that link (or puts a new one at its name), so a path resolving elsewhere than
/// it did shows here. Refused past [`MAX_LINKS`] links. With `every`, every component met
/// counts, not only links (a directory renamed into the path has a new change time).
fn resolution_changed_at(path: &str, every: bool) -> Result<SystemTime, CcError> {
    use std::path::Component;
    let io = |e: std::io::Error| changed(path, e.to_string());
    // What is left to resolve, next component last.
    fn push(pending: &mut Vec<std::ffi::OsString>, path: &Path) {
        for c in path.components().rev() {
            match c {
                Component::Normal(name) => pending.push(name.to_os_string()),
                Component::ParentDir => pending.push("..".into()),
                Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
            }
        }
    }
    let mut pending = Vec::new();
    push(&mut pending, Path::new(path));
    let mut resolved = PathBuf::from("/");
    let mut latest = SystemTime::UNIX_EPOCH;
    let mut links = 0;
    while let Some(name) = pending.pop() {
        if name == ".." {
            resolved.pop();
            continue;
        }
        let next = resolved.join(&name);
        let meta = std::fs::symlink_metadata(&next).map_err(io)?;
        if !meta.file_type().is_symlink() {
            if every {
                latest = latest.max(changed_at(&meta));
            }
            resolved = next;
            continue;
        }
        links += 1;
        if links > MAX_LINKS {
            return Err(changed(path, "more than 40 symbolic links to resolve"));
        }
        latest = latest.max(changed_at(&meta));
        let target = std::fs::read_link(&next).map_err(io)?;
        if target.is_absolute() {
            resolved = PathBuf::from("/");
        }
        push(&mut pending, &target);
    }
    Ok(latest)
}

/// The files the compiles of `unit_dirs` (each holding its [`DEP_FILE`]) read besides
/// their units, each once, with their digests; refused if one is named by a relative
/// path, cannot be read, or changed (its inode's change time, or that of a symbolic link
/// met resolving its path: [`resolution_changed_at`]) less than [`SETTLED`] before `started`
/// (the compile's start) or later: then what it holds may not be what the compiler read.
pub(crate) fn collect(unit_dirs: &[PathBuf], started: SystemTime) -> Result<Vec<Dep>, CcError> {
    let settled = settled_before(started);
    let mut found: BTreeMap<String, [u8; 32]> = BTreeMap::new();
    for dir in unit_dirs {
        let dep_file = dir.join(DEP_FILE);
        let text = std::fs::read_to_string(&dep_file).map_err(|e| CcError::Io {
            path: dep_file.clone(),
            source: e,
        })?;
        let listed = parse_make_rule(&text).ok_or_else(|| {
            changed(
                &dep_file.display().to_string(),
                "the compiler's dependency list does not parse",
            )
        })?;
        for path in listed {
            if path == UNIT_NAME || found.contains_key(&path) {
                continue;
            }
            if !Path::new(&path).is_absolute() {
                return Err(changed(&path, "named by a relative path"));
            }
            let (digest, file_changed) = digest_file(&path)?;
            // After the read (a change time never goes back): the links of the path too.
            let links_changed = resolution_changed_at(&path, false)?;
            if file_changed.max(links_changed) >= settled {
                return Err(changed(
                    &path,
                    "changed after the compile began, or less than 2 s before",
                ));
            }
            found.insert(path, digest);
        }
    }
    Ok(found
        .into_iter()
        .map(|(path, digest)| Dep { path, digest })
        .collect())
}

/// Checks that every file of `deps` still holds what it held when the program was
/// compiled.
pub(crate) fn verify(deps: &[Dep]) -> Result<(), CcError> {
    for dep in deps {
        let (digest, _) = digest_file(&dep.path)?;
        if digest != dep.digest {
            return Err(changed(&dep.path, "its content differs from the compile's"));
        }
    }
    Ok(())
}

/// What a path resolves to now, as an include search looking at it would see it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Kind {
    /// Nothing at it (`ENOENT`, or a component before the last is not a directory).
    Absent = 0,
    /// A directory.
    Directory = 1,
    /// A regular file.
    File = 2,
    /// Anything else (a FIFO, a device, a socket).
    Other = 3,
}

impl Kind {
    /// The kind saved as byte `b` (the discriminant).
    pub(crate) fn from_byte(b: u8) -> Option<Kind> {
        [Kind::Absent, Kind::Directory, Kind::File, Kind::Other]
            .get(usize::from(b))
            .copied()
    }
}

/// What `path` resolves to (links followed, as the compiler's `open` follows them); an
/// error other than "absent" (a permission refused) cannot vouch for anything.
fn kind_of(path: &Path) -> Result<Kind, std::io::Error> {
    match std::fs::metadata(path) {
        Ok(meta) if meta.is_dir() => Ok(Kind::Directory),
        Ok(meta) if meta.is_file() => Ok(Kind::File),
        Ok(_) => Ok(Kind::Other),
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory
            ) =>
        {
            Ok(Kind::Absent)
        }
        Err(e) => Err(e),
    }
}

/// A path an include search looked at before the directory a recorded header was found
/// in, and what it resolved to at the save: the shortest prefix of `<earlier
/// directory>/<the header's name relative to its own directory>` that is absent, or (when
/// none is) the first prefix that is not a directory or the whole path, with its kind.
/// While every witness resolves as it did, that search finds what it found then.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Witness {
    pub(crate) path: String,
    pub(crate) kind: Kind,
}

fn search_refused(path: &str, why: impl Into<String>) -> CcError {
    CcError::IncludeSearch {
        path: PathBuf::from(path),
        why: why.into(),
    }
}

/// The names `header` may have been searched for under the include directories of
/// `search` (in search order): `(k, name)` for every directory `search[k]` it lies under,
/// by its path as written and by both paths resolved (`realpath`). The directory it was
/// found in is one of them, so taking them all over-approximates the search.
/// `resolved` holds each directory's resolved path (`None` where it does not resolve).
fn interpretations(
    header: &str,
    search: &[String],
    resolved: &[Option<PathBuf>],
) -> Vec<(usize, String)> {
    let header_canonical = std::fs::canonicalize(header).ok();
    let mut found = Vec::new();
    for (k, (dir, canonical)) in search.iter().zip(resolved).enumerate() {
        let trimmed = dir.trim_end_matches('/');
        if let Some(rest) = header.strip_prefix(trimmed)
            && rest.starts_with('/')
        {
            let name = rest.trim_start_matches('/');
            if !name.is_empty() {
                found.push((k, name.to_string()));
            }
        }
        if let (Some(h), Some(d)) = (&header_canonical, canonical)
            && let Ok(rest) = h.strip_prefix(d)
            && let Some(name) = rest.to_str()
            && !name.is_empty()
        {
            found.push((k, name.to_string()));
        }
    }
    found.sort();
    found.dedup();
    found
}

/// The witness of searching `dir` for `name` (see [`Witness`]). A witness that exists
/// must have settled: it and every component of its path changed (inode change time)
/// before `settled`, or it may have appeared after the compiler looked (a compile that
/// found something there read it, and recorded it; one that found nothing did not).
fn witness(dir: &str, name: &str, settled: SystemTime) -> Result<Witness, CcError> {
    use std::path::Component;
    let full = Path::new(dir).join(name);
    let components: Vec<Component<'_>> = full.components().collect();
    let mut prefix = PathBuf::new();
    for (i, component) in components.iter().enumerate() {
        prefix.push(component.as_os_str());
        if matches!(component, Component::RootDir | Component::Prefix(_)) {
            continue;
        }
        let path = prefix.to_string_lossy().into_owned();
        let kind = kind_of(&prefix).map_err(|e| search_refused(&path, e.to_string()))?;
        if kind == Kind::Directory && i + 1 < components.len() {
            continue;
        }
        if kind != Kind::Absent && resolution_changed_at(&path, true)? >= settled {
            return Err(search_refused(
                &path,
                "it or a directory of its path changed after the compile began, or less than 2 s before",
            ));
        }
        return Ok(Witness { path, kind });
    }
    Err(search_refused(dir, "not a path below an include directory"))
}

/// The witnesses of every recorded header `deps` against the include search list
/// `search` (absolute directories in search order; see [`Witness`]): for every directory
/// a header lies under ([`interpretations`]), every directory searched before it. A
/// header under none of them (included by its absolute path, or relative to the
/// including file's directory) adds none. Refused when a directory of the list is
/// relative (it is searched from the compile's own directory) or a witness that exists
/// changed after the compile began or less than [`SETTLED`] before `started`.
pub(crate) fn witnesses(
    search: &[String],
    deps: &[Dep],
    started: SystemTime,
) -> Result<Vec<Witness>, CcError> {
    if let Some(dir) = search.iter().find(|d| !Path::new(d).is_absolute()) {
        return Err(search_refused(
            dir,
            "a relative include directory (searched from each compile's own directory)",
        ));
    }
    let settled = settled_before(started);
    let resolved: Vec<Option<PathBuf>> = search
        .iter()
        .map(|d| std::fs::canonicalize(d).ok())
        .collect();
    let mut found = std::collections::BTreeSet::new();
    let mut walked = std::collections::HashSet::new();
    for dep in deps {
        for (k, name) in interpretations(&dep.path, search, &resolved) {
            for dir in &search[..k] {
                if walked.insert((dir.as_str(), name.clone())) {
                    found.insert(witness(dir, &name, settled)?);
                }
            }
        }
    }
    Ok(found.into_iter().collect())
}

/// Checks that every witness resolves as it did at the save ([`CcError::IncludeSearch`]
/// otherwise: a header searched for may now be found elsewhere than it was).
pub(crate) fn verify_witnesses(witnesses: &[Witness]) -> Result<(), CcError> {
    for w in witnesses {
        let now =
            kind_of(Path::new(&w.path)).map_err(|e| search_refused(&w.path, e.to_string()))?;
        if now != w.kind {
            return Err(search_refused(
                &w.path,
                format!(
                    "an include search looks here before a recorded header's directory: it was {:?} at the save, it is {now:?} now",
                    w.kind
                ),
            ));
        }
    }
    Ok(())
}

/// The include search list in what `<compiler> <options> -E -v` printed (in the C
/// locale): directories it ignored because they do not exist or are not directories
/// first (they may be created; their place in the order is not printed), then the
/// `#include "..."` list, then the `#include <...>` list, each directory once. `None`
/// if the lists are not there or hold a line that is not a directory.
pub(crate) fn parse_search_list(text: &str) -> Option<Vec<String>> {
    let mut unlisted = Vec::new();
    let mut listed = Vec::new();
    let (mut started, mut ended, mut inside) = (false, false, false);
    for line in text.lines() {
        if let Some(dir) = line
            .strip_prefix("ignoring nonexistent directory \"")
            .and_then(|rest| rest.strip_suffix('"'))
        {
            unlisted.push(dir.to_string());
        } else if let Some((_, rest)) = line.split_once("warning: ")
            && let Some(dir) = rest.strip_suffix(": not a directory")
        {
            unlisted.push(dir.to_string());
        } else if line == "#include \"...\" search starts here:"
            || line == "#include <...> search starts here:"
        {
            started = true;
            inside = true;
        } else if line == "End of search list." {
            inside = false;
            ended = true;
        } else if inside {
            let dir = line.strip_prefix(' ')?;
            let dir = dir.strip_suffix(" (framework directory)").unwrap_or(dir);
            if dir.is_empty() {
                return None;
            }
            listed.push(dir.to_string());
        }
    }
    if !(started && ended) || inside {
        return None;
    }
    let mut all: Vec<String> = Vec::new();
    for dir in unlisted.into_iter().chain(listed) {
        if !all.contains(&dir) {
            all.push(dir);
        }
    }
    Some(all)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn make_rules_parse_with_continuations_and_escapes() {
        let rule = "kernel.o: kernel.c /usr/include/math.h \\\n /a\\ b/c\\#d.h /e$$f.h\n";
        assert_eq!(
            parse_make_rule(rule).unwrap(),
            ["kernel.c", "/usr/include/math.h", "/a b/c#d.h", "/e$f.h"]
        );
        assert_eq!(
            parse_make_rule("kernel.o:\n").unwrap(),
            Vec::<String>::new()
        );
        assert_eq!(parse_make_rule("no rule here"), None);
        assert_eq!(parse_make_rule(""), None);
        assert_eq!(parse_make_rule("a.o: b\nc.o: d\n"), None);
    }

    /// A write landing while the content is hashed is in the change time returned (it was
    /// read before the content, so the old change time vouched for new or torn content).
    #[test]
    fn a_write_during_the_read_shows_in_the_change_time() {
        use std::os::unix::fs::FileExt;
        use std::time::Instant;
        let tmp = tempfile::tempdir().unwrap();
        let header = tmp.path().join("big.h");
        let size: u64 = 96 << 20;
        std::fs::write(&header, vec![b' '; size as usize]).unwrap();
        let path = header.display().to_string();
        for _ in 0..5 {
            // Every change before this one lies well before the write below.
            std::thread::sleep(Duration::from_millis(400));
            let target = header.clone();
            let writer = std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(10));
                let file = File::options().write(true).open(&target).unwrap();
                let began = SystemTime::now();
                file.write_at(b"x", size - 1).unwrap();
                (began, Instant::now())
            });
            let (_, changed) = digest_file(&path).unwrap();
            let returned = Instant::now();
            let (began, written) = writer.join().unwrap();
            if written < returned {
                // The coarse clock of change times may lag the system clock by a tick.
                assert!(
                    changed + Duration::from_millis(50) >= began,
                    "a write during the read is not in the change time: {changed:?} < {began:?}"
                );
                return;
            }
        }
        panic!("the read never outlasted a 10 ms delay: the test shows nothing");
    }

    /// A FIFO renamed over a header between its check and its open never blocks the
    /// read (the open waited for a writer, for ever).
    #[test]
    fn a_fifo_swapped_in_never_blocks_the_read() {
        use std::sync::atomic::{AtomicBool, Ordering};
        use std::sync::{Arc, mpsc};
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().to_path_buf();
        let (name, regular, fifo) = (dir.join("h.h"), dir.join("regular"), dir.join("fifo"));
        std::fs::write(&regular, "#define X 1\n").unwrap();
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(made.success());
        std::fs::copy(&regular, &name).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let swapper = {
            let (stop, dir, name) = (stop.clone(), dir.clone(), name.clone());
            let (regular, fifo) = (regular.clone(), fifo.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    for (from, tmp) in [(&fifo, "t1"), (&regular, "t2")] {
                        std::fs::hard_link(from, dir.join(tmp)).unwrap();
                        std::fs::rename(dir.join(tmp), &name).unwrap();
                    }
                }
            })
        };
        let (tx, rx) = mpsc::channel();
        let path = name.display().to_string();
        std::thread::spawn(move || {
            let until = std::time::Instant::now() + Duration::from_millis(1500);
            let mut reads = 0u32;
            while std::time::Instant::now() < until {
                let _ = digest_file(&path);
                reads += 1;
            }
            let _ = tx.send(reads);
        });
        let done = rx.recv_timeout(Duration::from_secs(20));
        stop.store(true, Ordering::Relaxed);
        swapper.join().unwrap();
        if done.is_err() {
            // Release the blocked open before failing.
            let _ = File::options().write(true).open(&fifo);
            panic!("reading a header blocked on a FIFO put at its name");
        }
    }

    /// Every link of a path counts, wherever it is, `..` after a link leaves the link's
    /// target, and a loop of links is refused, never followed for ever.
    #[test]
    fn links_anywhere_in_a_path_are_found_and_loops_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let t = tmp.path();
        let path = |p: &str| t.join(p).display().to_string();
        let links_changed_at = |p: &str| resolution_changed_at(p, false);
        std::fs::create_dir_all(t.join("real/sub")).unwrap();
        std::fs::write(t.join("real/h.h"), "").unwrap();
        assert_eq!(
            links_changed_at(&path("real/sub/../h.h")).unwrap(),
            SystemTime::UNIX_EPOCH
        );
        std::os::unix::fs::symlink("real/sub", t.join("dir")).unwrap();
        std::os::unix::fs::symlink(t.join("dir"), t.join("chain")).unwrap();
        let link = changed_at(&std::fs::symlink_metadata(t.join("dir")).unwrap());
        // chain -> dir -> real/sub, then .. is real: real/h.h.
        assert!(links_changed_at(&path("chain/../h.h")).unwrap() >= link);
        std::os::unix::fs::symlink("b", t.join("a")).unwrap();
        std::os::unix::fs::symlink("a", t.join("b")).unwrap();
        assert!(matches!(
            links_changed_at(&path("a/h.h")),
            Err(CcError::DependencyChanged { why, .. }) if why.contains("more than 40")
        ));
    }

    /// gcc's and clang's `-E -v` lists: ignored directories (absent, not directories)
    /// first, then the quote and bracket lists in order, each once; no list, an unended
    /// one or a stray line in it does not parse.
    #[test]
    fn search_lists_parse() {
        let gcc = "ignoring nonexistent directory \"/usr/local/include/x86_64-linux-gnu\"\n\
                   ignoring duplicate directory \"/a\"\n\
                   cc1: warning: /f: not a directory\n\
                   #include \"...\" search starts here:\n /q\n\
                   #include <...> search starts here:\n /a\n /a b\n /usr/include\n\
                   End of search list.\n";
        assert_eq!(
            parse_search_list(gcc).unwrap(),
            [
                "/usr/local/include/x86_64-linux-gnu",
                "/f",
                "/q",
                "/a",
                "/a b",
                "/usr/include"
            ]
        );
        assert_eq!(parse_search_list("cc1 -E\n"), None);
        assert_eq!(
            parse_search_list("#include <...> search starts here:\n /a\n"),
            None
        );
        assert_eq!(
            parse_search_list("#include <...> search starts here:\nx\nEnd of search list.\n"),
            None
        );
    }

    /// A witness is the first absent prefix of the path searched, or what the whole path
    /// (or a non-directory on its way) is; a header under no search directory has none;
    /// one found in the second directory has one in the first; a relative directory is
    /// refused; a witness resolving otherwise fails verification.
    #[test]
    fn witnesses_record_what_an_earlier_search_directory_held() {
        let tmp = tempfile::tempdir().unwrap();
        let t = tmp.path();
        for d in ["one", "two/lib", "three"] {
            std::fs::create_dir_all(t.join(d)).unwrap();
        }
        std::fs::write(t.join("two/lib/s.h"), "").unwrap();
        std::fs::write(t.join("three/lib"), "").unwrap();
        let path = |p: &str| t.join(p).display().to_string();
        let later = SystemTime::now() + Duration::from_secs(60);
        let search = [path("one"), path("three"), path("two")];
        let dep = |p: &str| Dep {
            path: path(p),
            digest: [0; 32],
        };
        let found = witnesses(&search, &[dep("two/lib/s.h")], later).unwrap();
        assert_eq!(
            found,
            [
                Witness {
                    path: path("one/lib"),
                    kind: Kind::Absent
                },
                Witness {
                    path: path("three/lib"),
                    kind: Kind::File
                },
            ]
        );
        assert!(
            witnesses(&search, &[dep("elsewhere.h")], later)
                .unwrap()
                .is_empty()
        );
        // Present witnesses must have settled.
        assert!(matches!(
            witnesses(&search, &[dep("two/lib/s.h")], SystemTime::UNIX_EPOCH),
            Err(CcError::IncludeSearch { .. })
        ));
        assert!(matches!(
            witnesses(&["rel".to_string()], &[], later),
            Err(CcError::IncludeSearch { .. })
        ));
        assert!(verify_witnesses(&found).is_ok());
        std::fs::create_dir(t.join("one/lib")).unwrap();
        assert!(matches!(
            verify_witnesses(&found),
            Err(CcError::IncludeSearch { .. })
        ));
    }

    #[test]
    fn a_changed_or_missing_file_fails_verification() {
        let tmp = tempfile::tempdir().unwrap();
        let header = tmp.path().join("h.h");
        std::fs::write(&header, "#define X 1\n").unwrap();
        let path = header.display().to_string();
        let (digest, _) = digest_file(&path).unwrap();
        let deps = [Dep { path, digest }];
        assert!(verify(&deps).is_ok());
        std::fs::write(&header, "#define X 2\n").unwrap();
        assert!(matches!(
            verify(&deps),
            Err(CcError::DependencyChanged { .. })
        ));
        std::fs::remove_file(&header).unwrap();
        assert!(matches!(
            verify(&deps),
            Err(CcError::DependencyChanged { .. })
        ));
        std::fs::create_dir(&header).unwrap();
        assert!(matches!(
            verify(&deps),
            Err(CcError::DependencyChanged { .. })
        ));
    }
}
