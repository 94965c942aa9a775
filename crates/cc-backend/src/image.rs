//! The bytes a program is loaded from ([`Image`]): on Linux a sealed memory file, so the
//! loader maps exactly the bytes that were compiled or verified, whatever happens to any
//! path of the file system.

#[cfg(target_os = "linux")]
use std::fs::File;
use std::path::{Path, PathBuf};

use crate::error::CcError;

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
/// **Other targets**: a file created (`O_CREAT | O_EXCL`, mode 0600, links never
/// followed) under a fresh name in a fresh directory of the checked work directory (see
/// [`crate::workdir`]), loaded by path: the path is new to the loader, and only this user
/// (or root) can change it, but its bytes are not sealed.
#[derive(Debug)]
pub(crate) struct Image {
    /// The sealed memory file (`None` once leaked). Linux only.
    #[cfg(target_os = "linux")]
    file: Option<File>,
    /// The file's directory, removed with the image. Other targets only.
    #[cfg(not(target_os = "linux"))]
    _dir: tempfile::TempDir,
    path: PathBuf,
    size: u64,
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> CcError + use<> {
    let path = path.to_path_buf();
    move |source| CcError::Io { path, source }
}

impl Image {
    /// An image holding `bytes`, ready to load from [`Image::path`]: a sealed memory file;
    /// where the system makes none (no `memfd_create`, or executable memory files
    /// forbidden: `vm.memfd_noexec` 2), an unnamed file (`O_TMPFILE`, or created `O_EXCL`
    /// and unlinked at once) of the checked work directory `work` gives, which only this
    /// process's descriptor can write (not sealed).
    ///
    /// Errors with [`CcError::Io`] (naming the memory file) when neither can be made or
    /// written (too many open files, no memory, a file-size limit).
    #[cfg(target_os = "linux")]
    pub(crate) fn new(
        bytes: &[u8],
        work: impl FnOnce() -> Result<PathBuf, CcError>,
    ) -> Result<Image, CcError> {
        let file = match sealed_memory_file(bytes) {
            Ok(file) => file,
            Err(error) => match work().ok().and_then(|dir| unnamed_file(bytes, &dir).ok()) {
                Some(file) => file,
                None => return Err(error),
            },
        };
        let path = PathBuf::from(format!(
            "/proc/self/fd/{}",
            std::os::fd::AsRawFd::as_raw_fd(&file)
        ));
        Ok(Image {
            file: Some(file),
            path,
            size: bytes.len() as u64,
        })
    }

    /// An image holding `bytes`, ready to load from [`Image::path`]: a new file in a new
    /// directory of `work` (the checked work directory).
    ///
    /// Errors with [`CcError::Io`] when the directory or file cannot be made or written.
    #[cfg(not(target_os = "linux"))]
    pub(crate) fn new(
        bytes: &[u8],
        work: impl FnOnce() -> Result<PathBuf, CcError>,
    ) -> Result<Image, CcError> {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        use std::sync::atomic::{AtomicU64, Ordering};

        // A name no other load of this process used: the loader answers a path it loaded
        // and has not unloaded with that library.
        static LOADS: AtomicU64 = AtomicU64::new(0);
        let work = work()?;
        let dir = tempfile::Builder::new()
            .prefix("kcache-cc-loaded-")
            .tempdir_in(&work)
            .map_err(io(&work))?;
        let path = dir.path().join(format!(
            "program-{}-{}.so",
            std::process::id(),
            LOADS.fetch_add(1, Ordering::Relaxed)
        ));
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
            .open(&path)
            .map_err(io(&path))?;
        file.write_all(bytes).map_err(io(&path))?;
        Ok(Image {
            _dir: dir,
            path,
            size: bytes.len() as u64,
        })
    }

    /// The path to give the loader: `/proc/self/fd/N` on Linux (valid while the image
    /// lives), the file's path elsewhere.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// The number of bytes held.
    pub(crate) fn size(&self) -> u64 {
        self.size
    }

    /// The bytes held: on Linux read back from the sealed memory file, so exactly the
    /// bytes the loader mapped.
    pub(crate) fn bytes(&self) -> Result<Vec<u8>, CcError> {
        #[cfg(target_os = "linux")]
        {
            use std::os::unix::fs::FileExt;
            let file = self.file.as_ref().ok_or_else(|| {
                io(&self.path)(std::io::Error::other("the memory file was released"))
            })?;
            let len = usize::try_from(self.size)
                .map_err(|_| io(&self.path)(std::io::Error::other("the program is too large")))?;
            let mut bytes = vec![0u8; len];
            file.read_exact_at(&mut bytes, 0).map_err(io(&self.path))?;
            Ok(bytes)
        }
        #[cfg(not(target_os = "linux"))]
        {
            std::fs::read(&self.path).map_err(io(&self.path))
        }
    }
}

#[cfg(test)]
thread_local! {
    /// Set by a test: this thread's images take the fallback (no memory file).
    pub(crate) static NO_MEMORY_FILE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
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
        return Err(io(shown)(std::io::Error::other(
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
        .map_err(|e| io(shown)(e.into()))?;
    let mut file = File::from(fd);
    file.write_all(bytes).map_err(io(shown))?;
    rustix::fs::fcntl_add_seals(
        &file,
        SealFlags::WRITE | SealFlags::GROW | SealFlags::SHRINK | SealFlags::SEAL,
    )
    .map_err(|e| io(shown)(e.into()))?;
    Ok(file)
}

/// An unnamed file of `dir` (the checked work directory) holding `bytes`.
#[cfg(target_os = "linux")]
fn unnamed_file(bytes: &[u8], dir: &Path) -> Result<File, CcError> {
    use std::io::Write;
    let mut file = tempfile::tempfile_in(dir).map_err(io(dir))?;
    file.write_all(bytes).map_err(io(dir))?;
    Ok(file)
}

#[cfg(target_os = "linux")]
impl Drop for Image {
    fn drop(&mut self) {
        if still_loaded(&self.path) {
            // The loader still answers this path with the library: the number must never
            // name another memory file of this process.
            std::mem::forget(self.file.take());
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
