//! The compile work directory, checked like the kernel store's: compiles happen only where
//! no other user can swap a directory or rename a file.

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};

use crate::error::CcError;

/// Group or other write permission.
const GROUP_OTHER_WRITE: u32 = 0o022;
/// The sticky bit: in such a directory only an entry's owner (or the directory's owner, or
/// root) may rename or remove it.
const STICKY: u32 = 0o1000;

/// A work directory that passed [`WorkDir::check`]: the directory compiles make their
/// fresh program directories in.
#[derive(Debug)]
pub(crate) struct WorkDir {
    path: PathBuf,
    /// The private subdirectory made in a shared sticky directory (removed when the last
    /// holder goes).
    _private: Option<tempfile::TempDir>,
}

fn refused(dir: &Path, why: impl Into<String>) -> CcError {
    CcError::WorkDir {
        path: dir.to_path_buf(),
        why: why.into(),
    }
}

impl WorkDir {
    /// Checks `dir` and every directory above it (after resolving links once, then
    /// `lstat` on each: a link met is refused) and picks where compiles happen:
    ///
    /// - every directory above `dir` must be owned by this process's effective user or
    ///   by root, and must not be writable by its group or others unless it is sticky
    ///   (then the directory below it must be owned by this user or root too): otherwise
    ///   whoever can write it could rename `dir` away and put their own in its place;
    /// - `dir` owned by this user and not writable by its group or others is used as it
    ///   is;
    /// - `dir` sticky and owned by this user or root (a shared `/tmp`) gets a private
    ///   subdirectory of a fresh random name, made with mode 0700 (never through a link:
    ///   `mkdir` does not follow one) and checked after creation with `lstat` (a directory
    ///   owned by this user, no group or other access), which is used instead;
    /// - anything else is refused with [`CcError::WorkDir`] naming the directory and why
    ///   (for example a directory others can write without the sticky bit, or another
    ///   user's).
    pub(crate) fn check(dir: &Path) -> Result<WorkDir, CcError> {
        let me = rustix::process::geteuid().as_raw();
        let trusted = |uid: u32| uid == me || uid == 0;
        let canonical = fs::canonicalize(dir)
            .map_err(|e| refused(dir, format!("it cannot be resolved: {e}")))?;
        let mut path = PathBuf::new();
        // Whether the directory above the one looked at is sticky and writable by others.
        let mut above_shared = false;
        let mut last = None;
        for component in canonical.components() {
            match component {
                Component::RootDir | Component::Normal(_) => path.push(component),
                _ => return Err(refused(dir, "its resolved path is not plain")),
            }
            let meta = fs::symlink_metadata(&path)
                .map_err(|e| refused(&path, format!("it cannot be examined: {e}")))?;
            if meta.file_type().is_symlink() || !meta.is_dir() {
                return Err(refused(
                    &path,
                    "it is not a directory (or was replaced by a link while checked)",
                ));
            }
            if !trusted(meta.uid()) {
                return Err(refused(
                    &path,
                    format!(
                        "it is owned by uid {}, neither this process's uid {me} nor root: \
                         its owner could replace what compiles write and load",
                        meta.uid()
                    ),
                ));
            }
            let mode = meta.mode();
            above_shared = false;
            if mode & GROUP_OTHER_WRITE != 0 {
                if mode & STICKY == 0 {
                    return Err(refused(
                        &path,
                        format!(
                            "mode {:o} lets the group or others write it without the sticky \
                             bit: another user could rename what compiles write and load",
                            mode & 0o7777
                        ),
                    ));
                }
                above_shared = true;
            }
            last = Some(meta);
        }
        let meta = last.ok_or_else(|| refused(dir, "its resolved path is empty"))?;
        if above_shared {
            return WorkDir::private_in(&canonical, me);
        }
        if meta.uid() != me {
            return Err(refused(
                &canonical,
                format!(
                    "it is owned by uid {}, not by this process's uid {me}, and not sticky",
                    meta.uid()
                ),
            ));
        }
        Ok(WorkDir {
            path: canonical,
            _private: None,
        })
    }

    /// A fresh private subdirectory of the sticky directory `shared`, checked after
    /// creation.
    fn private_in(shared: &Path, me: u32) -> Result<WorkDir, CcError> {
        let private = tempfile::Builder::new()
            .prefix("kcache-cc-work-")
            .permissions(fs::Permissions::from_mode(0o700))
            .tempdir_in(shared)
            .map_err(|e| {
                refused(
                    shared,
                    format!("a private subdirectory cannot be made in it: {e}"),
                )
            })?;
        let meta = fs::symlink_metadata(private.path()).map_err(|e| {
            refused(
                private.path(),
                format!("the private subdirectory cannot be examined: {e}"),
            )
        })?;
        let why = if meta.file_type().is_symlink() || !meta.is_dir() {
            Some("the private subdirectory is not a directory".to_string())
        } else if meta.uid() != me {
            Some(format!(
                "the private subdirectory is owned by uid {}, not {me}",
                meta.uid()
            ))
        } else if meta.mode() & 0o077 != 0 {
            Some(format!(
                "the private subdirectory has mode {:o}, not private",
                meta.mode() & 0o7777
            ))
        } else {
            None
        };
        match why {
            Some(why) => {
                // Not ours to remove.
                let path = private.keep();
                Err(refused(&path, why))
            }
            None => Ok(WorkDir {
                path: private.path().to_path_buf(),
                _private: Some(private),
            }),
        }
    }

    /// Where compiles make their program directories.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn chmod(path: &Path, mode: u32) {
        fs::set_permissions(path, fs::Permissions::from_mode(mode)).unwrap();
    }

    #[test]
    fn private_directories_are_used_as_they_are() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("own");
        fs::create_dir(&dir).unwrap();
        chmod(&dir, 0o755);
        let work = WorkDir::check(&dir).unwrap();
        assert_eq!(work.path(), fs::canonicalize(&dir).unwrap());
    }

    #[test]
    fn a_shared_sticky_directory_gets_a_private_subdirectory() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("shared");
        fs::create_dir(&dir).unwrap();
        chmod(&dir, 0o1777);
        let work = WorkDir::check(&dir).unwrap();
        let made = work.path().to_path_buf();
        assert_eq!(made.parent().unwrap(), fs::canonicalize(&dir).unwrap());
        let meta = fs::symlink_metadata(&made).unwrap();
        assert!(meta.is_dir());
        assert_eq!(meta.mode() & 0o777, 0o700);
        drop(work);
        assert!(
            !made.exists(),
            "the private subdirectory goes with its holder"
        );
    }

    #[test]
    fn shared_directories_without_the_sticky_bit_are_refused() {
        let tmp = tempfile::tempdir().unwrap();
        for (mode, name) in [(0o777, "world"), (0o775, "group"), (0o757, "other")] {
            let dir = tmp.path().join(name);
            fs::create_dir(&dir).unwrap();
            chmod(&dir, mode);
            let err = WorkDir::check(&dir).unwrap_err();
            let shown = err.to_string();
            assert!(matches!(err, CcError::WorkDir { .. }), "{shown}");
            assert!(shown.contains(name) && shown.contains("sticky"), "{shown}");
            // Below it, even a private directory of ours can be swapped: refused too.
            let below = dir.join("mine");
            fs::create_dir(&below).unwrap();
            chmod(&below, 0o700);
            let err = WorkDir::check(&below).unwrap_err().to_string();
            assert!(err.contains(name) && err.contains("sticky"), "{err}");
        }
    }

    #[test]
    fn a_missing_directory_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let err = WorkDir::check(&tmp.path().join("absent")).unwrap_err();
        assert!(err.to_string().contains("absent"), "{err}");
    }
}
