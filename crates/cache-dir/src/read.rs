//! Bounded reads that never block and never follow a link: the only way the protocol reads a
//! file (stamp or entry) of a directory other processes (or other users) can write.
//!
//! A hostile or broken directory can hold anything at an entry's name: a FIFO (an ordinary
//! `open` for reading blocks until a writer appears, while the reader holds the directory lock),
//! a symbolic link to `/dev/zero` (an ordinary read never ends), a device, a huge file. So a
//! read here: refuses anything `lstat` does not call a regular file before opening it; opens
//! with `O_NONBLOCK | O_NOFOLLOW | O_NOCTTY` (a FIFO that appeared in between opens without
//! waiting, a link fails to open); checks the *opened handle* (`fstat`) is a regular file; and
//! reads at most `max_len` bytes, refusing a longer file without reading it.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;

use rustix::fs::OFlags;

/// The open flags of every protocol read, beside `O_RDONLY` and std's `O_CLOEXEC`.
pub(crate) fn read_flags() -> i32 {
    // The flag bits are small positive constants, so the conversion never fails.
    i32::try_from((OFlags::NONBLOCK | OFlags::NOFOLLOW | OFlags::NOCTTY).bits()).unwrap_or(0)
}

/// What kind of non-regular file a file type is, for messages.
pub(crate) fn describe(t: fs::FileType) -> &'static str {
    if t.is_dir() {
        "a directory"
    } else if t.is_symlink() {
        "a symbolic link"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else {
        "a regular file"
    }
}

fn not_regular(t: fs::FileType) -> io::Error {
    let kind = if t.is_dir() {
        io::ErrorKind::IsADirectory
    } else {
        io::ErrorKind::InvalidInput
    };
    io::Error::new(kind, format!("{}, not a regular file", describe(t)))
}

/// Opens `path` for reading only if it is a regular file, without blocking and without
/// following a final symbolic link, and checks the opened handle. Returns the file and its
/// length.
///
/// # Errors
/// `NotFound` if nothing is there; `IsADirectory` for a directory; `InvalidInput` for any other
/// non-regular file (symbolic link, FIFO, socket, device); any other open or `fstat` error.
pub fn open_regular(path: &Path) -> io::Result<(File, u64)> {
    let before = fs::symlink_metadata(path)?;
    if !before.file_type().is_file() {
        return Err(not_regular(before.file_type()));
    }
    open_listed_regular(path)
}

/// [`open_regular`] without its own `lstat`, for a caller that has just listed `path` as a
/// regular file (a directory scan's `lstat`): the open still never blocks and never follows a
/// link, and the opened handle is still checked.
///
/// # Errors
/// As [`open_regular`].
pub fn open_listed_regular(path: &Path) -> io::Result<(File, u64)> {
    let mut options = OpenOptions::new();
    options.read(true);
    let (file, meta) = open_checked(&options, path)?;
    Ok((file, meta.len()))
}

/// Opens the file at `path` for reading and writing (creating it with `mode` when `create`
/// and it is absent), without blocking and without following a final symbolic link, and
/// checks the opened handle is a regular file: how a store opens a lock or counters file of
/// its own, so that nothing at that name (a FIFO, a link to a device or to a file elsewhere)
/// blocks the open or is written through.
///
/// # Errors
/// `NotFound` if nothing is there and not `create`; `IsADirectory` for a directory;
/// `InvalidInput` for a symbolic link or any other non-regular file; any other open or
/// `fstat` error.
pub fn open_rw_regular(path: &Path, create: bool, mode: u32) -> io::Result<File> {
    let mut options = OpenOptions::new();
    options
        .read(true)
        .write(true)
        .create(create)
        .truncate(false)
        .mode(mode);
    open_checked(&options, path).map(|(file, _)| file)
}

/// Opens `path` with `options` plus the non-blocking, no-follow flags, and checks that the
/// opened handle is a regular file (returning its metadata).
fn open_checked(options: &OpenOptions, path: &Path) -> io::Result<(File, fs::Metadata)> {
    let mut options = options.clone();
    options.custom_flags(read_flags());
    let file = retry(|| options.open(path)).map_err(|e| {
        // O_NOFOLLOW on a link (one that replaced the file since a caller's lstat): ELOOP.
        if e.raw_os_error() == Some(rustix::io::Errno::LOOP.raw_os_error()) {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                "a symbolic link, not a regular file",
            )
        } else {
            e
        }
    })?;
    let meta = file.metadata()?;
    if !meta.file_type().is_file() {
        return Err(not_regular(meta.file_type()));
    }
    Ok((file, meta))
}

fn too_large(max_len: u64) -> io::Error {
    io::Error::new(
        io::ErrorKind::FileTooLarge,
        format!("larger than the cap of {max_len} bytes"),
    )
}

/// Reads the whole of the regular file at `path`, if it holds at most `max_len` bytes. Never
/// blocks on a FIFO, never follows a final symbolic link, never reads more than `max_len + 1`
/// bytes (a file that grows while read is caught too). Interrupted reads are retried.
///
/// # Errors
/// As [`open_regular`], and `FileTooLarge` for a file longer than `max_len` (refused before
/// reading when its size says so).
///
/// ```
/// # let tmp = tempfile::tempdir()?;
/// let path = tmp.path().join("e");
/// std::fs::write(&path, b"hello")?;
/// assert_eq!(cache_dir::read_regular(&path, 5)?, b"hello");
/// assert_eq!(cache_dir::read_regular(&path, 4).unwrap_err().kind(), std::io::ErrorKind::FileTooLarge);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn read_regular(path: &Path, max_len: u64) -> io::Result<Vec<u8>> {
    let (file, len) = open_regular(path)?;
    if len > max_len {
        return Err(too_large(max_len));
    }
    let mut bytes = Vec::with_capacity(usize::try_from(len).unwrap_or(0));
    file.take(max_len.saturating_add(1))
        .read_to_end(&mut bytes)?;
    if bytes.len() as u64 > max_len {
        return Err(too_large(max_len));
    }
    Ok(bytes)
}

/// Retries `f` while it fails with `ErrorKind::Interrupted` (a signal arrived while blocked):
/// an interrupt is never turned into a failure of a cache operation.
///
/// # Errors
/// The first error that is not `Interrupted`.
pub fn retry<T>(mut f: impl FnMut() -> io::Result<T>) -> io::Result<T> {
    loop {
        match f() {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            other => return other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_regular_files_up_to_the_cap() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = dir.path().join("f");
        fs::write(&p, b"abc").expect("write");
        assert_eq!(read_regular(&p, 3).expect("read"), b"abc");
        assert_eq!(read_regular(&p, 100).expect("read"), b"abc");
        let e = read_regular(&p, 2).expect_err("too large");
        assert_eq!(e.kind(), io::ErrorKind::FileTooLarge);
        fs::write(&p, b"").expect("write");
        assert_eq!(read_regular(&p, 0).expect("read"), b"");
    }

    #[test]
    fn read_write_opens_never_follow_links_block_or_write_through_them() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = dir.path().join("lock");
        assert_eq!(
            open_rw_regular(&p, false, 0o600)
                .expect_err("absent")
                .kind(),
            io::ErrorKind::NotFound
        );
        open_rw_regular(&p, true, 0o600).expect("created");
        assert!(p.is_file());
        let link = dir.path().join("link");
        let target = dir.path().join("elsewhere");
        std::os::unix::fs::symlink(&target, &link).expect("symlink");
        let e = open_rw_regular(&link, true, 0o600).expect_err("link");
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{e}");
        assert!(!target.exists(), "created through the link");
        let fifo = dir.path().join("fifo");
        rustix::fs::mkfifoat(
            rustix::fs::CWD,
            &fifo,
            rustix::fs::Mode::from_raw_mode(0o600),
        )
        .expect("mkfifo");
        let e = open_rw_regular(&fifo, true, 0o600).expect_err("fifo");
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{e}");
        let e = open_rw_regular(dir.path(), true, 0o600).expect_err("dir");
        assert_eq!(e.kind(), io::ErrorKind::IsADirectory, "{e}");
    }

    #[test]
    fn refuses_what_is_not_a_regular_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let e = read_regular(dir.path(), 10).expect_err("dir");
        assert_eq!(e.kind(), io::ErrorKind::IsADirectory);
        let link = dir.path().join("link");
        let target = dir.path().join("target");
        fs::write(&target, b"x").expect("write");
        std::os::unix::fs::symlink(&target, &link).expect("symlink");
        let e = read_regular(&link, 10).expect_err("link");
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        assert!(e.to_string().contains("symbolic link"), "{e}");
        let missing = read_regular(&dir.path().join("absent"), 10).expect_err("absent");
        assert_eq!(missing.kind(), io::ErrorKind::NotFound);
    }
}
