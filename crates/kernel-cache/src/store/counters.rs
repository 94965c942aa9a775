//! The store's counters kept across processes (as `ccache -s` does): one small file,
//! `stats`, read, then **replaced by a rename** (never rewritten in place), under a
//! bounded `flock` of the file itself.
//!
//! An adder takes the lock of the `stats` it opened, checks that it is still the file at
//! that name (another adder may have renamed a new one over it meanwhile: then it starts
//! again with that one), reads it, writes the sum to a staging file (`.atomicwrite-stats-*`,
//! mode `0600`, swept as crash-stale staging when a killed adder leaves one) and renames it
//! over `stats`. A reader (no lock needed) sees the whole old file or the whole new one: a
//! process killed at any point of an update never resets the counters.
//!
//! The counters are advisory: they are not fsynced (a power loss may lose recent counts),
//! and a file that does not parse (a hand edit) counts from zero again. They never decide
//! a hit.

use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The counters file's name inside the store directory (not an entry).
pub(crate) const STATS_FILE: &str = "stats";

const MAGIC: &str = "kcache kernel store stats 1";

/// Counters of the kernel store, summed over every process that used it. Two units:
/// `hits` and `misses` count **kernels** (keys looked up: a program of eight kernels
/// found is eight hits); `saves` and `evictions` count **programs** (one blob each,
/// however many kernels it holds); `removed_bad` counts **files** (blobs and entries).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// Kernels (keys) answered from the store.
    pub hits: u64,
    /// Kernels (keys) looked up and not answered.
    pub misses: u64,
    /// Programs saved (one per compiled program, whatever its number of kernels).
    pub saves: u64,
    /// Programs (blobs) evicted to keep the store under its byte limit (by resolves and
    /// by `gc`).
    pub evictions: u64,
    /// Files (blobs or entries) found corrupt, dangling or not loadable, and removed.
    pub removed_bad: u64,
}

impl Counters {
    fn fields(&mut self) -> [(&'static str, &mut u64); 5] {
        [
            ("hits", &mut self.hits),
            ("misses", &mut self.misses),
            ("saves", &mut self.saves),
            ("evictions", &mut self.evictions),
            ("removed_bad", &mut self.removed_bad),
        ]
    }

    pub(crate) fn is_zero(&self) -> bool {
        *self == Counters::default()
    }

    fn parse(text: &str) -> Counters {
        let mut out = Counters::default();
        let mut lines = text.lines();
        if lines.next() != Some(MAGIC) {
            return out;
        }
        for l in lines {
            let Some((name, value)) = l.split_once(' ') else {
                continue;
            };
            let Ok(value) = value.parse::<u64>() else {
                continue;
            };
            for (field, slot) in out.fields() {
                if field == name {
                    *slot = value;
                }
            }
        }
        out
    }

    fn render(mut self) -> String {
        let mut s = format!("{MAGIC}\n");
        for (name, value) in self.fields() {
            s.push_str(&format!("{name} {value}\n"));
        }
        s
    }

    pub(crate) fn add(&mut self, mut other: Counters) {
        for ((_, a), (_, b)) in self.fields().into_iter().zip(other.fields()) {
            *a = a.saturating_add(*b);
        }
    }
}

/// Opens the counters file (creating it to write), refusing anything but a regular file
/// without blocking on it or following a link to it (`cache-dir`'s opens).
fn open(dir: &Path, write: bool) -> io::Result<File> {
    let path = dir.join(STATS_FILE);
    if write {
        cache_dir::open_rw_regular(&path, true, 0o600)
    } else {
        cache_dir::open_regular(&path).map(|(file, _)| file)
    }
}

fn read_from(file: &mut File) -> io::Result<Counters> {
    if !file.metadata()?.is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "stats is not a regular file",
        ));
    }
    let mut text = String::new();
    let _ = file.take(4096).read_to_string(&mut text);
    Ok(Counters::parse(&text))
}

/// Adds `delta` to the directory's counters, waiting at most `wait` for another adder.
///
/// # Errors
/// `TimedOut` if the counters' lock stayed held past `wait`; any I/O error (the counters
/// are then as they were).
pub(crate) fn add(dir: &Path, delta: Counters, wait: Duration) -> io::Result<()> {
    if delta.is_zero() {
        return Ok(());
    }
    let deadline = Instant::now().checked_add(wait);
    let path = dir.join(STATS_FILE);
    loop {
        let mut file = open(dir, true)?;
        cache_dir::lock_until(&file, cache_dir::Mode::Exclusive, deadline)?;
        // Another adder renamed a new file over the one this process locked: its lock
        // guards nothing now; start again with the file at the name.
        let held = file.metadata()?;
        let at_name = fs::symlink_metadata(&path)?;
        if (held.dev(), held.ino()) != (at_name.dev(), at_name.ino()) {
            continue;
        }
        let mut now = read_from(&mut file)?;
        now.add(delta);
        return replace(dir, &now.render());
    }
}

/// Writes `text` to a fresh staging file (mode `0600`; `O_CREAT|O_EXCL`, which never
/// follows a link) and renames it
/// over `stats`; the staging file is removed if anything fails before the rename.
fn replace(dir: &Path, text: &str) -> io::Result<()> {
    static SEQ: AtomicU64 = AtomicU64::new(0);
    let staged = dir.join(format!(
        "{}-stats-{}-{}",
        cache_dir::STAGING_PREFIX,
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    ));
    let written = (|| {
        let mut f = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&staged)?;
        f.write_all(text.as_bytes())?;
        fs::rename(&staged, dir.join(STATS_FILE))
    })();
    if written.is_err() {
        let _ = fs::remove_file(&staged);
    }
    written
}

/// The directory's counters (zero if there is no counters file). Takes no lock: the file
/// is only ever replaced whole.
pub(crate) fn read(dir: &Path) -> io::Result<Counters> {
    let mut file = match open(dir, false) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Counters::default()),
        Err(e) => return Err(e),
    };
    read_from(&mut file)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn counters_add_up_and_survive_garbage() {
        let tmp = tempfile::tempdir().unwrap();
        assert_eq!(read(tmp.path()).unwrap(), Counters::default());
        let one = Counters {
            hits: 2,
            misses: 1,
            saves: 1,
            evictions: 0,
            removed_bad: 3,
        };
        add(tmp.path(), one, WAIT).unwrap();
        add(tmp.path(), one, WAIT).unwrap();
        let two = read(tmp.path()).unwrap();
        assert_eq!((two.hits, two.misses, two.removed_bad), (4, 2, 6));
        std::fs::write(tmp.path().join(STATS_FILE), b"\xff garbage").unwrap();
        assert_eq!(read(tmp.path()).unwrap(), Counters::default());
        add(tmp.path(), one, WAIT).unwrap();
        assert_eq!(read(tmp.path()).unwrap(), one);
    }

    const WAIT: Duration = Duration::from_secs(30);

    /// The file at `stats` is only ever replaced whole: a reader that takes no lock, reading
    /// while four threads add, never sees the counters go down or the file empty (what a
    /// process killed mid-update would leave). With the in-place rewrite of before
    /// (truncate, then write) the reader saw an empty file and the test failed.
    #[test]
    fn an_update_never_shows_a_reset_to_a_reader() {
        let tmp = tempfile::tempdir().unwrap();
        let one = Counters {
            hits: 1,
            ..Counters::default()
        };
        add(tmp.path(), one, WAIT).unwrap();
        let done = std::sync::atomic::AtomicBool::new(false);
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..150 {
                        add(tmp.path(), one, WAIT).unwrap();
                    }
                });
            }
            s.spawn(|| {
                let mut last = 0;
                let mut reads = 0u64;
                while !done.load(Ordering::SeqCst) || reads == 0 {
                    // A plain read, as a process killed mid-update leaves the file.
                    let text = fs::read_to_string(tmp.path().join(STATS_FILE)).unwrap();
                    let now = Counters::parse(&text).hits;
                    assert!(
                        now >= last.max(1),
                        "counters went from {last} to {now}: {text:?}"
                    );
                    last = now;
                    reads += 1;
                }
            });
            // The adders end first; then the reader stops.
            std::thread::sleep(Duration::from_millis(10));
            while read(tmp.path()).unwrap().hits < 601 {
                std::thread::sleep(Duration::from_millis(5));
            }
            done.store(true, Ordering::SeqCst);
        });
        assert_eq!(read(tmp.path()).unwrap().hits, 601);
        // No staging file is left behind.
        let left: Vec<_> = fs::read_dir(tmp.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .filter(|n| n != STATS_FILE)
            .collect();
        assert!(left.is_empty(), "{left:?}");
    }
}
