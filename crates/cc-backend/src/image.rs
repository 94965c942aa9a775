//! The bytes a program is loaded from ([`Image`]): on Linux a sealed memory file, so the
//! loader maps exactly the bytes that were compiled or verified, whatever happens to any
//! path of the file system.

use std::fs::File;
use std::path::{Path, PathBuf};

use crate::error::{CcError, error_chain};

/// The bytes of one shared object, held where the loader reads them.
///
/// **Linux**: a memory file (`memfd_create`, close-on-exec) written with the bytes and then
/// sealed against any write, growth or shrinking and against further seals
/// (`F_SEAL_WRITE | F_SEAL_GROW | F_SEAL_SHRINK | F_SEAL_SEAL`): no process, this one
/// included, can change what it holds. Where the system makes no executable memory file,
/// an unnamed file of the checked work directory (no path names it; only this process's
/// descriptor can write it). The loader opens it as `/proc/self/fd/N`
/// ([`Image::path`]). The loader answers a path it has loaded and not unloaded (a library
/// linked `-z nodelete`, which options may ask for, never is) with that library: so the
/// descriptor stays open while its library may be loaded, and when the `Image` is dropped
/// (after its library) the loader is asked (`RTLD_NOLOAD`) whether it still holds a
/// library under that path; if it does, the descriptor is leaked, so the number and the
/// path are never reused in this process.
///
/// **Without `/proc`** (Linux) **and on other targets**: a [`named_file`] of the checked
/// work directory, loaded by path: the path is new to the loader, and only this user (or
/// root) can change it, but its bytes are not sealed. The directory goes with the image,
/// unless its library stays loaded.
#[derive(Debug)]
pub(crate) struct Image {
    /// The descriptor holding the bytes: the sealed memory file, the unnamed file, or the
    /// named file of the fallback (`None` once leaked).
    file: Option<File>,
    /// The named file's private directory, removed with the image; `None` when the loader
    /// reads the bytes through `/proc/self/fd/N`.
    dir: Option<tempfile::TempDir>,
    path: PathBuf,
    size: u64,
}

impl Image {
    /// An image holding `bytes`, ready to load from [`Image::path`], held as [`Image`] says
    /// (the fallbacks' files in the checked work directory `work` gives; `/proc/self/fd/N`
    /// checked to lead to that very file, same device and inode).
    ///
    /// Errors with [`CcError::Environment`] saying what the system lacks (a memory file,
    /// `/proc`, a usable work directory, one not mounted `noexec`) when no way of loading
    /// is left; the bytes are not at fault.
    #[cfg(target_os = "linux")]
    pub(crate) fn new(
        bytes: &[u8],
        work: impl FnOnce() -> Result<PathBuf, CcError>,
    ) -> Result<Image, CcError> {
        // The work directory, asked for at most once (its error as a message).
        let mut work = Some(work);
        let mut known: Option<Result<PathBuf, String>> = None;
        let mut work_dir = move || -> Result<PathBuf, String> {
            if let Some(work) = work.take() {
                known = Some(work().map_err(|e| error_chain(&e)));
            }
            known
                .clone()
                .unwrap_or_else(|| Err("no work directory".into()))
        };
        let environment = |lacks: String| CcError::Environment { lacks };
        let file = match sealed_memory_file(bytes) {
            Ok(file) => file,
            Err(memfd) => {
                let memfd = error_chain(&memfd);
                let dir = work_dir().map_err(|e| {
                    environment(format!(
                        "no memory file can hold the program ({memfd}), and the work \
                         directory cannot be used ({e})"
                    ))
                })?;
                unnamed_file(bytes, &dir).map_err(|e| {
                    environment(format!(
                        "no memory file can hold the program ({memfd}), and no file of the \
                         work directory {} can ({})",
                        dir.display(),
                        error_chain(&e)
                    ))
                })?
            }
        };
        let path = PathBuf::from(format!(
            "/proc/self/fd/{}",
            std::os::fd::AsRawFd::as_raw_fd(&file)
        ));
        let no_proc = match reaches(&path, &file) {
            Ok(()) => {
                return Ok(Image {
                    file: Some(file),
                    dir: None,
                    path,
                    size: bytes.len() as u64,
                });
            }
            Err(why) => why,
        };
        drop(file);
        let dir = work_dir().map_err(|e| {
            environment(format!(
                "{no_proc}, and the work directory cannot hold the program's file instead ({e})"
            ))
        })?;
        named_file(bytes, &dir).map_err(|e| match e {
            CcError::Environment { lacks } => environment(format!("{no_proc}, and {lacks}")),
            e => environment(format!(
                "{no_proc}, and the work directory {} cannot hold the program's file instead \
                 ({})",
                dir.display(),
                error_chain(&e)
            )),
        })
    }

    /// An image holding `bytes`, ready to load from [`Image::path`]: a new file in a new
    /// directory of `work` (the checked work directory), see [`named_file`].
    ///
    /// Errors with [`CcError::Io`] when the directory or file cannot be made or written,
    /// [`CcError::Environment`] when its file system is mounted `noexec`.
    #[cfg(not(target_os = "linux"))]
    pub(crate) fn new(
        bytes: &[u8],
        work: impl FnOnce() -> Result<PathBuf, CcError>,
    ) -> Result<Image, CcError> {
        named_file(bytes, &work()?)
    }

    /// The path to give the loader: `/proc/self/fd/N` on Linux (valid while the image
    /// lives), the named file's path without `/proc` and elsewhere.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// The number of bytes held.
    pub(crate) fn size(&self) -> u64 {
        self.size
    }

    /// The bytes held, read back through the image's descriptor: on Linux with `/proc`,
    /// from the sealed memory file, so exactly the bytes the loader mapped.
    pub(crate) fn bytes(&self) -> Result<Vec<u8>, CcError> {
        use std::os::unix::fs::FileExt;
        let file = self.file.as_ref().ok_or_else(|| {
            CcError::io(&self.path)(std::io::Error::other("the program's file was released"))
        })?;
        let len = usize::try_from(self.size).map_err(|_| {
            CcError::io(&self.path)(std::io::Error::other("the program is too large"))
        })?;
        let mut bytes = vec![0u8; len];
        file.read_exact_at(&mut bytes, 0)
            .map_err(CcError::io(&self.path))?;
        Ok(bytes)
    }
}

/// Whether the loader, given `path` (`/proc/self/fd/N`), opens `file`: the path must
/// lead to the same device and inode. Otherwise what the system lacks, said plainly.
#[cfg(target_os = "linux")]
fn reaches(path: &Path, file: &File) -> Result<(), String> {
    use std::os::unix::fs::MetadataExt;
    #[cfg(test)]
    if NO_PROC.get() {
        return Err(format!(
            "{} cannot be opened (no /proc in this test)",
            path.display()
        ));
    }
    let held = file
        .metadata()
        .map_err(|e| format!("the program's file cannot be examined ({e})"))?;
    match std::fs::metadata(path) {
        Ok(at) if (at.dev(), at.ino()) == (held.dev(), held.ino()) => Ok(()),
        Ok(_) => Err(format!(
            "{} does not lead to the program's file (is /proc the proc file system?)",
            path.display()
        )),
        Err(e) => Err(format!(
            "{} cannot be opened ({e}): the loader needs /proc mounted to read a file \
             by descriptor",
            path.display()
        )),
    }
}

/// An image of `bytes` in a named file: a fresh directory of `work` (mode 0700, checked
/// after creation to be a directory of this user's that nobody else can reach), a new file
/// in it (`O_CREAT | O_EXCL | O_NOFOLLOW`, mode 0600, under a name no other load of this
/// process used: the loader answers a path it loaded and has not unloaded with that
/// library), written, then read back through its descriptor and compared with `bytes`,
/// and checked to be the regular file at its path (same device and inode). A file system
/// mounted `noexec` is refused ([`CcError::Environment`]): the loader could not map it.
fn named_file(bytes: &[u8], work: &Path) -> Result<Image, CcError> {
    use std::io::Write;
    use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt, PermissionsExt};
    use std::sync::atomic::{AtomicU64, Ordering};

    static LOADS: AtomicU64 = AtomicU64::new(0);
    let dir = tempfile::Builder::new()
        .prefix("kcache-cc-loaded-")
        .permissions(std::fs::Permissions::from_mode(0o700))
        .tempdir_in(work)
        .map_err(CcError::io(work))?;
    let meta = std::fs::symlink_metadata(dir.path()).map_err(CcError::io(dir.path()))?;
    let me = rustix::process::geteuid().as_raw();
    if !meta.is_dir() || meta.uid() != me || meta.mode() & 0o077 != 0 {
        return Err(CcError::WorkDir {
            path: dir.path().to_path_buf(),
            why: format!(
                "the directory made for a program's file is not a private directory of uid \
                 {me} (uid {}, mode {:o})",
                meta.uid(),
                meta.mode() & 0o7777
            ),
        });
    }
    let path = dir.path().join(format!(
        "program-{}-{}.so",
        std::process::id(),
        LOADS.fetch_add(1, Ordering::Relaxed)
    ));
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags((rustix::fs::OFlags::NOFOLLOW | rustix::fs::OFlags::CLOEXEC).bits() as i32)
        .open(&path)
        .map_err(CcError::io(&path))?;
    file.write_all(bytes).map_err(CcError::io(&path))?;
    let held = file.metadata().map_err(CcError::io(&path))?;
    let at = std::fs::symlink_metadata(&path).map_err(CcError::io(&path))?;
    let mut back = vec![0u8; bytes.len()];
    file.read_exact_at(&mut back, 0)
        .map_err(CcError::io(&path))?;
    if !at.is_file()
        || (at.dev(), at.ino()) != (held.dev(), held.ino())
        || held.len() != bytes.len() as u64
        || back != bytes
    {
        return Err(CcError::io(&path)(std::io::Error::other(
            "the program's file does not hold what was written to it",
        )));
    }
    drop(back);
    let flags = rustix::fs::fstatvfs(&file)
        .map_err(|e| CcError::io(&path)(e.into()))?
        .f_flag;
    if flags.contains(rustix::fs::StatVfsMountFlags::NOEXEC) {
        return Err(CcError::Environment {
            lacks: format!(
                "the work directory {} is on a file system mounted noexec: the loader cannot \
                 map a program from it",
                work.display()
            ),
        });
    }
    Ok(Image {
        file: Some(file),
        dir: Some(dir),
        path,
        size: bytes.len() as u64,
    })
}

#[cfg(test)]
thread_local! {
    /// Set by a test: this thread's images take the fallback (no memory file).
    pub(crate) static NO_MEMORY_FILE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    /// Set by a test: this thread's images find no `/proc` (a named file of the work
    /// directory).
    pub(crate) static NO_PROC: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// A memory file holding `bytes`, sealed against any change.
#[cfg(target_os = "linux")]
fn sealed_memory_file(bytes: &[u8]) -> Result<File, CcError> {
    use rustix::fs::{MemfdFlags, SealFlags};
    use std::io::Write;

    let name = Path::new("kcache-cc-program");
    // How errors name it (as `/proc/self/fd` shows it).
    let shown = Path::new("memfd:kcache-cc-program");
    #[cfg(test)]
    if NO_MEMORY_FILE.get() {
        return Err(CcError::io(shown)(std::io::Error::other(
            "no memory files in this test",
        )));
    }
    let flags = MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING;
    // Where `vm.memfd_noexec` is 1, a memory file made without `MFD_EXEC` cannot be
    // mapped executable; kernels before 6.3 refuse the flag (EINVAL): then without it.
    let fd = rustix::fs::memfd_create(name, flags | MemfdFlags::EXEC)
        .or_else(|e| {
            if e == rustix::io::Errno::INVAL {
                rustix::fs::memfd_create(name, flags)
            } else {
                Err(e)
            }
        })
        .map_err(|e| CcError::io(shown)(e.into()))?;
    let mut file = File::from(fd);
    file.write_all(bytes).map_err(CcError::io(shown))?;
    rustix::fs::fcntl_add_seals(
        &file,
        SealFlags::WRITE | SealFlags::GROW | SealFlags::SHRINK | SealFlags::SEAL,
    )
    .map_err(|e| CcError::io(shown)(e.into()))?;
    Ok(file)
}

/// An unnamed file of `dir` (the checked work directory) holding `bytes`.
#[cfg(target_os = "linux")]
fn unnamed_file(bytes: &[u8], dir: &Path) -> Result<File, CcError> {
    use std::io::Write;
    let mut file = tempfile::tempfile_in(dir).map_err(CcError::io(dir))?;
    file.write_all(bytes).map_err(CcError::io(dir))?;
    Ok(file)
}

#[cfg(target_os = "linux")]
impl Drop for Image {
    fn drop(&mut self) {
        if still_loaded(&self.path) {
            // The loader still answers this path with the library: the number must never
            // name another memory file of this process, nor the name another file.
            std::mem::forget(self.file.take());
            if let Some(dir) = self.dir.take() {
                let _ = dir.keep();
            }
        }
    }
}

/// Whether the loader holds a library it would answer a `dlopen` of `path` with.
#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
fn still_loaded(path: &Path) -> bool {
    /// `RTLD_NOLOAD` of glibc and musl (the same value on every Linux architecture);
    /// libloading does not export it.
    const RTLD_NOLOAD: std::ffi::c_int = 0x4;
    // SAFETY: with `RTLD_NOLOAD` the loader maps nothing and runs no initialiser: it
    // answers a library it already holds under this path (or of the file `path` opens now,
    // the image's own memory file, which is open until this returns) by taking one more
    // reference, which dropping the handle gives back (`dlclose`; that library's
    // finalisers cannot run since the reference it drops is the one just taken), or fails.
    let handle = unsafe {
        libloading::os::unix::Library::open(
            Some(path),
            libloading::os::unix::RTLD_LAZY | RTLD_NOLOAD,
        )
    };
    handle.is_ok()
}
