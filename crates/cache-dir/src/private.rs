//! Owner and mode checks for a store that is a trust boundary (a store whose blobs are loaded
//! and run): a directory or file another user could have written is refused, a directory
//! another user could reach is refused, and a directory is never reached through a symbolic
//! link at its own name or at a name this crate creates.

use std::fs::{self, File};
use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Component, Path};

use crate::error::Error;

/// The effective user id of this process.
pub fn current_uid() -> u32 {
    rustix::process::geteuid().as_raw()
}

/// Checks that `meta` (of `path`) is owned by this process's effective user and is not
/// writable by its group or by others. Use it on the metadata of an *opened* handle
/// (`File::metadata`) to check the very file that will be read.
///
/// # Errors
/// [`Error::NotPrivate`] naming the owner or the mode bits at fault.
pub fn check_private_metadata(path: &Path, meta: &fs::Metadata) -> Result<(), Error> {
    let me = current_uid();
    let why = if meta.uid() != me {
        Some(format!(
            "owned by uid {}, not by this process's uid {me}: another user could have written it",
            meta.uid()
        ))
    } else if meta.mode() & 0o022 != 0 {
        Some(format!(
            "mode {:o} lets the group or others write it",
            meta.mode() & 0o7777
        ))
    } else {
        None
    };
    match why {
        None => Ok(()),
        Some(why) => Err(Error::NotPrivate {
            path: path.to_path_buf(),
            why,
        }),
    }
}

/// Checks that `path` (a symbolic link is followed: the directory or file it names is
/// checked) is owned by this process's effective user and not writable by group or others.
/// It checks `path` itself, not its ancestors: whoever can write a parent directory can replace
/// `path`, so a trust boundary keeps its whole path private.
///
/// ```
/// use std::os::unix::fs::PermissionsExt;
/// let tmp = tempfile::tempdir()?;
/// std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o700))?;
/// cache_dir::check_private(tmp.path())?;
/// std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o777))?;
/// assert!(cache_dir::check_private(tmp.path()).is_err());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// # Errors
/// [`Error::NotPrivate`], or [`Error::Io`] if `path` cannot be stat'ed.
pub fn check_private(path: &Path) -> Result<(), Error> {
    let meta = fs::metadata(path).map_err(Error::io("check the owner and mode", path))?;
    check_private_metadata(path, &meta)
}

/// Checks the directory of a private store (see [`CacheDir::with_private_files`](crate::CacheDir::with_private_files)):
/// `path` itself is not a symbolic link (checked with `lstat`: a link at the store's name,
/// planted by whoever could write its parent, is refused, never followed), it is a
/// directory owned by this process's effective user, and its mode gives the group and others
/// **no** permission at all (`0700` or less): a group member who may search the directory can
/// open a file the moment it appears and keep the descriptor, so files made private later (or
/// by the umask) would not be.
///
/// # Errors
/// [`Error::NoDirectory`] if nothing is at `path`; [`Error::NotPrivate`] naming the path
/// and why (a link, not a directory, another owner, the mode bits at fault); [`Error::Io`]
/// if `path` cannot be stat'ed.
pub fn check_private_dir(path: &Path) -> Result<(), Error> {
    let meta = match fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(Error::NoDirectory {
                path: path.to_path_buf(),
            });
        }
        Err(e) => return Err(Error::io("check the store directory", path)(e)),
    };
    let not_private = |why: String| {
        Err(Error::NotPrivate {
            path: path.to_path_buf(),
            why,
        })
    };
    let t = meta.file_type();
    if t.is_symlink() {
        return not_private(
            "a symbolic link: a store that loads code never follows one at its own path \
             (give the real directory)"
                .into(),
        );
    }
    if !t.is_dir() {
        return not_private(format!("{}, not a directory", crate::read::describe(t)));
    }
    check_private_metadata(path, &meta)?;
    if meta.mode() & 0o077 != 0 {
        return not_private(format!(
            "mode {:o} lets the group or others reach its files (a private store's directory \
             must be 0700: chmod 700 it, or give the store a directory of its own)",
            meta.mode() & 0o7777
        ));
    }
    Ok(())
}

/// Creates the directory `path` and every missing ancestor, each with mode `0700`, never
/// following a symbolic link at a name it creates: an ancestor that exists is used as it is
/// (the user's own layout, links included), but a name that was absent when looked at and is
/// a link (or anything but a directory) when created (someone planted it in between) is
/// refused. The directory is then checked with [`check_private_dir`], so an existing
/// directory that is a link, another user's, or reachable by group or others is refused
/// whether or not this call created it.
///
/// # Errors
/// [`Error::NotPrivate`] naming the path and why; [`Error::Io`] if a directory cannot be
/// created.
pub fn create_private_dir(path: &Path) -> Result<(), Error> {
    let mut missing = Vec::new();
    let mut at = Some(path);
    while let Some(p) = at {
        if p.as_os_str().is_empty() || fs::symlink_metadata(p).is_ok() {
            break;
        }
        missing.push(p);
        at = p.parent();
    }
    for p in missing.into_iter().rev() {
        if matches!(p.components().next_back(), Some(Component::ParentDir)) {
            return Err(Error::NotPrivate {
                path: p.to_path_buf(),
                why: "ends in `..`: not a name this store can create".into(),
            });
        }
        match fs::DirBuilder::new().mode(0o700).create(p) {
            Ok(()) => {}
            // Created by someone else since it was looked at: only a real directory will do
            // (`check_private_dir` below checks the store's own; an ancestor must not be a
            // link, which `mkdir` would not have followed but every later path would).
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                let t = fs::symlink_metadata(p)
                    .map_err(Error::io("create the store directory", p))?
                    .file_type();
                if !t.is_dir() {
                    return Err(Error::NotPrivate {
                        path: p.to_path_buf(),
                        why: format!(
                            "{} appeared where this store was creating a directory: not followed",
                            crate::read::describe(t)
                        ),
                    });
                }
            }
            Err(e) => return Err(Error::io("create the store directory", p)(e)),
        }
    }
    check_private_dir(path)
}

/// Makes an opened protocol file of a private store private: owned by this user (else
/// [`Error::NotPrivate`]) and mode `0600` (group and other bits, which the umask or an
/// earlier build left, are cleared on the descriptor: the owner needs no write access for
/// that).
pub(crate) fn make_private(path: &Path, file: &File) -> Result<(), Error> {
    let meta = file
        .metadata()
        .map_err(Error::io("check the owner and mode", path))?;
    let me = current_uid();
    if meta.uid() != me {
        return Err(Error::NotPrivate {
            path: path.to_path_buf(),
            why: format!(
                "owned by uid {}, not by this process's uid {me}: another user could have written it",
                meta.uid()
            ),
        });
    }
    if meta.mode() & 0o077 != 0 {
        file.set_permissions(fs::Permissions::from_mode(0o600))
            .map_err(Error::io("make a protocol file private", path))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn group_or_other_write_is_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let f = dir.path().join("blob");
        fs::write(&f, b"x").expect("write");
        for (mode, ok) in [(0o600, true), (0o644, true), (0o664, false), (0o602, false)] {
            fs::set_permissions(&f, fs::Permissions::from_mode(mode)).expect("chmod");
            assert_eq!(check_private(&f).is_ok(), ok, "{mode:o}");
        }
    }

    #[test]
    fn a_private_directory_is_0700_not_a_link_and_created_without_following_one() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().join("a/b/store");
        create_private_dir(&dir).expect("created");
        for p in [tmp.path().join("a"), tmp.path().join("a/b"), dir.clone()] {
            let mode = fs::metadata(&p).expect("stat").mode() & 0o7777;
            assert_eq!(mode, 0o700, "{}", p.display());
        }
        for (mode, ok) in [
            (0o700, true),
            (0o750, false),
            (0o705, false),
            (0o711, false),
        ] {
            fs::set_permissions(&dir, fs::Permissions::from_mode(mode)).expect("chmod");
            assert_eq!(check_private_dir(&dir).is_ok(), ok, "{mode:o}");
        }
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o700)).expect("chmod");
        let elsewhere = tmp.path().join("elsewhere");
        fs::create_dir(&elsewhere).expect("mkdir");
        fs::set_permissions(&elsewhere, fs::Permissions::from_mode(0o700)).expect("chmod");
        let link = tmp.path().join("link");
        std::os::unix::fs::symlink(&elsewhere, &link).expect("symlink");
        let err = create_private_dir(&link).expect_err("a link is refused");
        assert!(err.to_string().contains("symbolic link"), "{err}");
        assert!(matches!(
            check_private_dir(&tmp.path().join("absent")),
            Err(Error::NoDirectory { .. })
        ));
    }

    #[test]
    fn another_owner_is_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let f = dir.path().join("blob");
        fs::write(&f, b"x").expect("write");
        fs::set_permissions(&f, fs::Permissions::from_mode(0o600)).expect("chmod");
        let other = current_uid().wrapping_add(1);
        match std::os::unix::fs::chown(&f, Some(other), None) {
            Ok(()) => {
                let err = check_private(&f).expect_err("foreign owner");
                assert!(err.to_string().contains("owned by uid"), "{err}");
            }
            // Only root may give a file away; then the owner check is shown by the test above
            // never passing for a file of ours with group write, and by the doc example.
            Err(e) => assert_eq!(e.kind(), std::io::ErrorKind::PermissionDenied),
        }
    }
}
