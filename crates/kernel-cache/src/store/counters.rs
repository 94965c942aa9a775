//! The store's counters kept across processes (as `ccache -s` does): one small file,
//! `stats`, read-modified-written under a `flock` of its own.
//!
//! The counters are advisory: they are not fsynced, and a file that does not parse
//! (a crash mid-write, a hand edit) counts from zero again. They never decide a hit.

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::Path;

/// The counters file's name inside the store directory (not an entry).
pub(crate) const STATS_FILE: &str = "stats";

const MAGIC: &str = "kcache kernel store stats 1";

/// Counters of the kernel store, summed over every process that used it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// Keys answered from the store.
    pub hits: u64,
    /// Keys looked up and not answered.
    pub misses: u64,
    /// Programs saved.
    pub saves: u64,
    /// Blobs evicted to keep the store under its byte limit (by resolves and by `gc`).
    pub evictions: u64,
    /// Blobs or entries found corrupt, dangling or not loadable, and removed.
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

fn read_locked(file: &mut File) -> io::Result<Counters> {
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

/// Adds `delta` to the directory's counters.
pub(crate) fn add(dir: &Path, delta: Counters) -> io::Result<()> {
    if delta.is_zero() {
        return Ok(());
    }
    let mut file = open(dir, true)?;
    file.lock()?;
    let mut now = read_locked(&mut file)?;
    now.add(delta);
    file.seek(SeekFrom::Start(0))?;
    file.set_len(0)?;
    file.write_all(now.render().as_bytes())?;
    file.unlock()
}

/// The directory's counters (zero if there is no counters file).
pub(crate) fn read(dir: &Path) -> io::Result<Counters> {
    let mut file = match open(dir, false) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Counters::default()),
        Err(e) => return Err(e),
    };
    file.lock_shared()?;
    let out = read_locked(&mut file);
    file.unlock()?;
    out
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
        add(tmp.path(), one).unwrap();
        add(tmp.path(), one).unwrap();
        let two = read(tmp.path()).unwrap();
        assert_eq!((two.hits, two.misses, two.removed_bad), (4, 2, 6));
        std::fs::write(tmp.path().join(STATS_FILE), b"\xff garbage").unwrap();
        assert_eq!(read(tmp.path()).unwrap(), Counters::default());
        add(tmp.path(), one).unwrap();
        assert_eq!(read(tmp.path()).unwrap(), one);
    }
}
