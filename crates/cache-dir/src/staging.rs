//! Staging artifacts: the `.atomicwrite*` directories an atomic write stages in, and the sweep
//! that removes those a killed writer left behind.

use std::collections::HashSet;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, SystemTime};

/// Prefix of the staging directories `atomicwrites` creates inside the cache directory (one
/// per write, holding `tmpfile.tmp`). Scans skip every name starting with `.`.
pub const STAGING_PREFIX: &str = ".atomicwrite";

/// Default age after which a staging directory counts as crash-stale: one hour without a
/// modification, as in the original.
pub const DEFAULT_STALE_STAGING_AFTER: Duration = Duration::from_secs(3600);

/// Whether a directory entry name is a staging artifact.
pub fn is_staging(name: &str) -> bool {
    name.starts_with(STAGING_PREFIX)
}

/// Time since the newest modification of a staging directory or of anything directly in it
/// (zero if a modification time lies in the future).
///
/// # Errors
/// A failure to stat the directory itself; unreadable children are ignored.
pub fn staging_age(path: &Path) -> io::Result<Duration> {
    let meta = fs::symlink_metadata(path)?;
    let mut newest = meta.modified()?;
    if meta.is_dir() {
        for child in fs::read_dir(path)?.flatten() {
            if let Ok(t) = child.metadata().and_then(|m| m.modified()) {
                newest = newest.max(t);
            }
        }
    }
    Ok(SystemTime::now()
        .duration_since(newest)
        .unwrap_or(Duration::ZERO))
}

/// Removes every staging artifact in `dir` at least `stale_after` old, re-checking the age just
/// before deleting it. Returns how many were removed. Failures to remove one artifact are
/// logged and skipped: a leftover staging directory is waste, not a wrong answer.
pub(crate) fn sweep_stale(dir: &Path, stale_after: Duration) -> io::Result<usize> {
    let mut removed = 0;
    for item in fs::read_dir(dir)? {
        let Ok(item) = item else { continue };
        let name = item.file_name();
        let Some(name) = name.to_str() else { continue };
        if !is_staging(name) {
            continue;
        }
        let path = item.path();
        let stale = |p: &Path| staging_age(p).is_ok_and(|age| age >= stale_after);
        if !stale(&path) {
            continue;
        }
        // Re-check just before deleting: a writer may have touched it since the first look.
        if !stale(&path) {
            continue;
        }
        let result = if item.file_type().is_ok_and(|t| t.is_dir()) {
            fs::remove_dir_all(&path)
        } else {
            fs::remove_file(&path)
        };
        match result {
            Ok(()) => removed += 1,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => tracing::warn!(
                target: "cache_dir",
                path = %path.display(),
                error = %e,
                "could not remove a stale staging artifact"
            ),
        }
    }
    Ok(removed)
}

fn swept() -> &'static Mutex<HashSet<PathBuf>> {
    static SWEPT: OnceLock<Mutex<HashSet<PathBuf>>> = OnceLock::new();
    SWEPT.get_or_init(Default::default)
}

fn id(dir: &Path) -> PathBuf {
    std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf())
}

/// Whether this process has already swept `dir`'s staging artifacts.
pub(crate) fn already_swept(dir: &Path) -> bool {
    swept()
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .contains(&id(dir))
}

/// Sweeps `dir` unless this process already did; callers hold the exclusive directory lock.
pub(crate) fn sweep_once(dir: &Path, stale_after: Duration) {
    let first = swept()
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(id(dir));
    if !first {
        return;
    }
    match sweep_stale(dir, stale_after) {
        Ok(0) => {}
        Ok(n) => tracing::info!(
            target: "cache_dir",
            dir = %dir.display(),
            removed = n,
            "removed crash-stale staging artifacts"
        ),
        Err(e) => tracing::warn!(
            target: "cache_dir",
            dir = %dir.display(),
            error = %e,
            "could not scan for stale staging artifacts"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sweeps_only_stale_staging() {
        let dir = tempfile::tempdir().expect("tempdir");
        let staged = dir.path().join(".atomicwriteAbC123");
        fs::create_dir(&staged).expect("mkdir");
        fs::write(staged.join("tmpfile.tmp"), b"partial").expect("write");
        fs::write(dir.path().join("k.ron"), b"()").expect("write");
        fs::write(dir.path().join(".hidden"), b"x").expect("write");
        // Fresh: a one-hour threshold keeps it.
        assert_eq!(
            sweep_stale(dir.path(), DEFAULT_STALE_STAGING_AFTER).expect("sweep"),
            0
        );
        assert!(staged.exists());
        // A zero threshold makes everything stale.
        assert_eq!(sweep_stale(dir.path(), Duration::ZERO).expect("sweep"), 1);
        assert!(!staged.exists());
        assert!(dir.path().join("k.ron").exists());
        assert!(dir.path().join(".hidden").exists());
    }

    #[test]
    fn sweep_once_runs_once_per_directory() {
        let dir = tempfile::tempdir().expect("tempdir");
        assert!(!already_swept(dir.path()));
        sweep_once(dir.path(), Duration::ZERO);
        assert!(already_swept(dir.path()));
        let staged = dir.path().join(".atomicwriteXYZ");
        fs::create_dir(&staged).expect("mkdir");
        sweep_once(dir.path(), Duration::ZERO);
        assert!(staged.exists(), "second sweep in one process must not run");
    }
}
