//! Loaded programs ([`CcProgram`]) and callable kernels ([`Kernel`]): the only code of
//! the workspace that is `unsafe`.

use std::ffi::c_void;
use std::fmt;
use std::path::Path;
use std::sync::Arc;

use kernel_cache::Resolved;
use libloading::os::unix::{Library as UnixLibrary, RTLD_LOCAL, RTLD_NOW};

use crate::deps::{Dep, Manifest, Witness};
use crate::error::CcError;
use crate::image::Image;
use crate::signature::{Arg, Signature, entry_symbol, exported_symbol};
use crate::workdir::WorkDir;

/// The C type of every generated entry: `void entry(void *const *args)`.
type EntryFn = unsafe extern "C" fn(*const *mut c_void);

/// A compiled, loaded shared object holding some kernels, with each kernel's
/// [`Signature`].
///
/// The library stays loaded as long as the `CcProgram` lives; every [`Kernel`] taken from
/// it holds it by `Arc`. On Linux the library is loaded from a sealed memory file holding
/// exactly the bytes compiled (read once from the linker's output) or verified (given to
/// [`Backend::load`](kernel_cache::Backend::load)), never from a
/// path of the file system; [`CcProgram::path`] names that memory file.
pub struct CcProgram {
    // Field order is drop order: unload before the image (whose drop asks the loader
    // whether the library is gone) and before the directories go.
    library: libloading::Library,
    image: Image,
    symbols: Vec<String>,
    signatures: Vec<Signature>,
    manifest: Manifest,
    /// The option list it was compiled under.
    options: Vec<String>,
    /// The compile's directory (its units' dependency lists, read by a save).
    _dir: Option<tempfile::TempDir>,
    /// The checked work directory holding `_dir`.
    _work: Option<Arc<WorkDir>>,
}

impl fmt::Debug for CcProgram {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CcProgram")
            .field("path", &self.image.path())
            .field("size", &self.image.size())
            .field("symbols", &self.symbols)
            .finish()
    }
}

impl CcProgram {
    /// Keeps `dir` (the compile's directory, holding what a save reads) as long as the
    /// program.
    pub(crate) fn keep_dir(&mut self, dir: tempfile::TempDir) {
        self._dir = Some(dir);
    }

    /// Loads the shared object `image` holds and checks that it defines every kernel of
    /// `kernels` and its entry. `dir` (a compile's directory) and `work` (the work
    /// directory holding it) are kept alive with the program.
    ///
    /// Before the loader sees the object, its dynamic symbol table is read from the
    /// bytes `image` holds: a kernel the object does not itself define is
    /// [`CcError::UndefinedKernel`] (not the loader's `undefined symbol`, nor, for a
    /// kernel named as a C library function, that function found in a library the
    /// object depends on).
    pub(crate) fn load(
        image: Image,
        dir: Option<tempfile::TempDir>,
        work: Option<Arc<WorkDir>>,
        kernels: Vec<(String, Signature)>,
        manifest: Manifest,
        options: Vec<String>,
    ) -> Result<CcProgram, CcError> {
        check_defined(
            &image.bytes()?,
            kernels.iter().map(|(symbol, _)| symbol.as_str()),
        )?;
        let library = open(image.path())?;
        let (symbols, signatures) = kernels.into_iter().unzip();
        let program = CcProgram {
            library,
            image,
            symbols,
            signatures,
            manifest,
            options,
            _dir: dir,
            _work: work,
        };
        for symbol in &program.symbols {
            program.address(symbol)?;
            program.entry(symbol)?;
        }
        Ok(program)
    }

    /// The shared object's size in bytes (its weight in a cache): the size of the bytes
    /// loaded.
    pub fn size(&self) -> u64 {
        self.image.size()
    }

    /// The path the shared object was loaded from: on Linux `/proc/self/fd/N`, the sealed
    /// memory file holding its bytes (valid while the program lives; closed when it is
    /// dropped and its library unloaded); without `/proc` and elsewhere a file of its own
    /// in a private directory of the work directory (removed when the program is
    /// dropped).
    pub fn path(&self) -> &Path {
        self.image.path()
    }

    /// The symbols of the kernels compiled into this program, in batch order.
    pub fn symbols(&self) -> &[String] {
        &self.symbols
    }

    /// The signature kernel `symbol` was compiled with.
    pub fn signature(&self, symbol: &str) -> Option<&Signature> {
        let i = self.symbols.iter().position(|s| s == symbol)?;
        self.signatures.get(i)
    }

    /// The kernel compiled under `symbol`, holding this program alive.
    ///
    /// Errors with [`CcError::MissingSymbol`] when the program holds no such kernel.
    pub fn kernel(self: &Arc<Self>, symbol: &str) -> Result<Kernel, CcError> {
        let signature = self
            .signature(symbol)
            .ok_or_else(|| CcError::MissingSymbol {
                symbol: symbol.to_string(),
                path: self.path().to_path_buf(),
                source: None,
            })?
            .clone();
        Ok(Kernel {
            program: Arc::clone(self),
            symbol: symbol.to_string(),
            signature,
            address: self.address(symbol)? as usize,
            entry: self.entry(symbol)?,
        })
    }

    /// The address of kernel `symbol`'s function in the library (exported under
    /// [`exported_symbol`]), never dereferenced here.
    #[allow(unsafe_code)]
    fn address(&self, symbol: &str) -> Result<*const c_void, CcError> {
        let exported = exported_symbol(symbol);
        // SAFETY: the symbol is looked up as an opaque address (`*const c_void` is the
        // data-pointer type `dlsym` returns); nothing is read or called through it here.
        // A `Kernel` holding it also holds `self`, so the library outlives the copy.
        let found = unsafe { self.library.get::<*const c_void>(exported.as_bytes()) };
        match found {
            Ok(f) => Ok(*f),
            Err(source) => Err(self.missing(&exported, source)),
        }
    }

    #[allow(unsafe_code)]
    fn entry(&self, symbol: &str) -> Result<EntryFn, CcError> {
        let entry = entry_symbol(symbol);
        // SAFETY: `<symbol>__kcache_entry` is defined only by the entry the backend
        // generates in the kernel's own translation unit, of type `void (void *const
        // *)`, which is `EntryFn` (kernel symbols with the entry suffix are refused, and
        // a second definition of the name in the same shared object fails to link). The
        // copied function pointer is only called through a `Kernel`, which keeps `self`
        // (and so the library) alive.
        let found = unsafe { self.library.get::<EntryFn>(entry.as_bytes()) };
        match found {
            Ok(f) => Ok(*f),
            Err(source) => Err(self.missing(&entry, source)),
        }
    }

    fn missing(&self, symbol: &str, source: libloading::Error) -> CcError {
        CcError::MissingSymbol {
            symbol: symbol.to_string(),
            path: self.path().to_path_buf(),
            source: Some(source),
        }
    }

    /// The shared object's bytes (for saving it): the very bytes loaded, read back from
    /// the sealed memory file on Linux.
    pub(crate) fn bytes(&self) -> Result<Vec<u8>, CcError> {
        self.image.bytes()
    }

    /// The files the compile read besides its units, with their digests, and the
    /// witnesses of their include search against the list `search` gives (for saving it;
    /// see [`Manifest::vouch`]).
    pub(crate) fn vouch(
        &self,
        search: impl FnOnce() -> Result<std::sync::Arc<Vec<String>>, CcError>,
    ) -> Result<(Vec<Dep>, Vec<Witness>), CcError> {
        self.manifest.vouch(search)
    }

    /// The option list it was compiled under.
    pub(crate) fn options(&self) -> &[String] {
        &self.options
    }

    /// The kernels' symbols and signatures, in order.
    pub(crate) fn kernels(&self) -> impl Iterator<Item = (&String, &Signature)> {
        self.symbols.iter().zip(&self.signatures)
    }
}

/// Checks that the shared object `bytes` defines, for each kernel of `symbols`, its
/// exported function ([`exported_symbol`]) and its entry itself: a definition (a function
/// or data, not an undefined reference) in its dynamic symbol table, the table the loader
/// answers `dlsym` from. An object that does not parse as ELF (another format
/// than the system's) is left to the loader.
fn check_defined<'a>(bytes: &[u8], symbols: impl Iterator<Item = &'a str>) -> Result<(), CcError> {
    use object::{Object as _, ObjectSymbol as _};
    let Ok(file) = object::File::parse(bytes) else {
        return Ok(());
    };
    let defined: std::collections::HashSet<&[u8]> = file
        .dynamic_symbols()
        .filter(|s| s.is_definition() && s.is_global())
        .filter_map(|s| s.name_bytes().ok())
        .collect();
    for symbol in symbols {
        let (exported, entry) = (exported_symbol(symbol), entry_symbol(symbol));
        if !defined.contains(exported.as_bytes()) || !defined.contains(entry.as_bytes()) {
            return Err(CcError::UndefinedKernel {
                symbol: symbol.to_string(),
            });
        }
    }
    Ok(())
}

#[allow(unsafe_code)]
fn open(path: &Path) -> Result<libloading::Library, CcError> {
    // SAFETY: loading runs the object's initialisers. The object's bytes are either the
    // output of this crate's own compile of kernel sources the caller supplied (read once,
    // without following a link, from a fresh directory of the checked work directory,
    // which no other user can write or rename in: see `WorkDir::check`), or the bytes given
    // to `Backend::load`, which its contract requires to be bytes `save`
    // produced (the persistent store verifies them by digest from a blob only its owner
    // could write: the trust boundary of `docs/disk-format.md`); like kernel text, those
    // bytes are trusted input of a safe function. The crate's contract (see `Source`) is
    // that kernel sources are trusted C without initialisers or finalisers with
    // requirements. On Linux `path` is `/proc/self/fd/N` of a sealed memory file holding
    // those bytes (`Image`, which checked the path leads to that file): what the loader
    // maps is what was checked, and nothing can change it afterwards; without `/proc`, and
    // elsewhere, a new file (`O_EXCL|O_NOFOLLOW`, 0600) of a fresh 0700 directory of the
    // checked work directory, read back through its descriptor and compared with those
    // bytes, which only this user (or root) could change since.
    // `RTLD_NOW` resolves every reference at load time, so a kernel calling an undefined
    // function is an error here rather than a crash at call time. The memory file is new
    // (so no loaded library has its inode), and no library the loader still holds was
    // loaded under `path`: an `Image` whose library stays loaded (`-z nodelete`) keeps its
    // descriptor open for good, so its number (the path) is never given to another; the
    // loader, which answers a path it loaded and has not unloaded with that library, never
    // hands back an older library.
    let library = unsafe { UnixLibrary::open(Some(path), RTLD_NOW | RTLD_LOCAL) };
    library.map(Into::into).map_err(|source| CcError::Load {
        path: path.to_path_buf(),
        source,
    })
}

/// A kernel of a loaded program, callable from safe code through
/// [`call`](Kernel::call).
///
/// Holds its program alive, so it stays callable after the cache that answered it
/// evicted the program.
#[derive(Clone)]
pub struct Kernel {
    program: Arc<CcProgram>,
    symbol: String,
    signature: Signature,
    /// The kernel function's address (kept as an integer: never dereferenced here).
    address: usize,
    entry: EntryFn,
}

impl fmt::Debug for Kernel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Kernel")
            .field("symbol", &self.symbol)
            .field("signature", &self.signature.to_string())
            .field("program", &self.program.path())
            .finish()
    }
}

impl Kernel {
    /// The kernel for a value a [`KernelCache`](kernel_cache::KernelCache) answered: a
    /// renamed twin's answer names the symbol its program was compiled under, which may be
    /// another kernel's name, and this finds the kernel under it.
    pub fn from_resolved(resolved: &Resolved<CcProgram>) -> Result<Kernel, CcError> {
        resolved.program.kernel(&resolved.symbol)
    }

    /// The symbol the kernel is found under.
    pub fn symbol(&self) -> &str {
        &self.symbol
    }

    /// The signature it was compiled with.
    pub fn signature(&self) -> &Signature {
        &self.signature
    }

    /// The program holding the kernel.
    pub fn program(&self) -> &Arc<CcProgram> {
        &self.program
    }

    /// The kernel's own C function, for callers with their own FFI.
    ///
    /// Valid while this `Kernel` (or a clone, or its program) lives. Calling it is
    /// `unsafe` and entirely the caller's responsibility: cast it to the `extern "C"`
    /// function type of the kernel's [`signature`](Kernel::signature) (pointers for
    /// buffers, values for scalars, in order, returning nothing) and pass buffers at
    /// least as long as the signature's extents.
    pub fn raw_function(&self) -> *const c_void {
        self.address as *const c_void
    }

    /// Runs the kernel on `args`, checked against its signature first: as many
    /// arguments as parameters, each of exactly its parameter's kind (a shared slice
    /// for a `const` buffer, an exclusive one for a written buffer, a value for a
    /// scalar, of the same element type), and every buffer at least as long as its
    /// extent evaluated on the call's scalars. Otherwise the call is refused with
    /// [`CcError::ArgCount`], [`CcError::ArgKind`], [`CcError::BufferTooShort`] or
    /// [`CcError::BadExtent`] and the kernel does not run.
    ///
    /// ```
    /// use cc_backend::{Arg, CcBackend, Elem, Extent, Signature, Source};
    /// use std::sync::Arc;
    ///
    /// let sig = Signature::new()
    ///     .buffer_mut("y", Elem::F64, Extent::of("n"))
    ///     .buffer("x", Elem::F64, Extent::of("n"))
    ///     .scalar("alpha", Elem::F64)
    ///     .scalar("n", Elem::I64);
    /// let axpy = Source::new(
    ///     "void axpy(double *y, const double *x, double alpha, int64_t n) {\n\
    ///        for (int64_t i = 0; i < n; ++i) y[i] += alpha * x[i];\n}",
    ///     sig,
    /// );
    /// let program = Arc::new(CcBackend::new()?.compile_program(&[("axpy", &axpy)], &[])?);
    /// let kernel = program.kernel("axpy")?;
    /// let mut y = [1.0, 1.0, 1.0];
    /// kernel.call(&mut [Arg::F64Mut(&mut y), Arg::F64(&[1.0, 2.0, 3.0]), Arg::F64Scalar(2.0), Arg::I64Scalar(3)])?;
    /// assert_eq!(y, [3.0, 5.0, 7.0]);
    /// // n = 4 would read past the 3 elements given: refused, the kernel does not run.
    /// let short = kernel.call(&mut [Arg::F64Mut(&mut y), Arg::F64(&[1.0; 4]), Arg::F64Scalar(2.0), Arg::I64Scalar(4)]);
    /// assert!(matches!(short, Err(cc_backend::CcError::BufferTooShort { .. })));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[allow(unsafe_code)]
    pub fn call(&self, args: &mut [Arg<'_>]) -> Result<(), CcError> {
        let pointers = self.signature.marshal(&self.symbol, args)?;
        // SAFETY: `entry` is the generated entry of this kernel (see
        // `CcProgram::entry`), alive while `self.program` is. `marshal` checked that
        // `pointers` has one element per parameter, in order: for a buffer, the data
        // pointer of a slice of exactly the parameter's element type (exclusive, from a
        // `&mut` slice, where the kernel writes), holding at least the signature's
        // extent; for a scalar, a pointer to a live value of exactly the parameter's
        // type. The entry reads `pointers[i]` for each parameter only and passes them
        // to the kernel, whose C type the compiler checked against the signature's
        // prototype: this object's own definition of the symbol, which the link binds the
        // entry's call to (`LINK_FLAGS`), never a same-named function of the process. By the kernel-text contract (see `Source`) the kernel touches no
        // element at or beyond the extents, writes only through non-const buffers and
        // keeps no pointer after returning. `args` (and so every pointee) outlives the
        // call.
        unsafe { (self.entry)(pointers.as_ptr()) };
        Ok(())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::{CcBackend, Source};
    use test_support::kernels::elementwise_kernel;

    /// The bytes of a program of one kernel `k` computing `expr`, linked `-z nodelete`
    /// (`dlclose` then leaves it loaded: user options may say so).
    fn resident_object(expr: &str) -> Vec<u8> {
        let source = Source::new(elementwise_kernel("k", expr), Signature::out_a_b_n());
        CcBackend::new()
            .unwrap()
            .compile_program(&[("k", &source)], &["-Wl,-z,nodelete".to_string()])
            .unwrap()
            .bytes()
            .unwrap()
    }

    /// Loads `bytes` as a program of one kernel `k` (from a fresh image).
    fn load_bytes(bytes: &[u8]) -> Arc<CcProgram> {
        let image = Image::new(bytes, || Ok(std::env::temp_dir())).unwrap();
        let kernels = vec![("k".to_string(), Signature::out_a_b_n())];
        let manifest = Manifest::Loaded(Vec::new(), Vec::new());
        Arc::new(CcProgram::load(image, None, None, kernels, manifest, Vec::new()).unwrap())
    }

    fn run(program: &Arc<CcProgram>) -> f32 {
        let mut out = [0.0f32];
        program
            .kernel("k")
            .unwrap()
            .call(&mut [
                Arg::F32Mut(&mut out),
                Arg::F32(&[2.0]),
                Arg::F32(&[3.0]),
                Arg::I32Scalar(1),
            ])
            .unwrap();
        out[0]
    }

    /// The loader answers a `dlopen` of a path it has loaded before, and not unloaded,
    /// with that library, whatever the file holds now. A program dropped while its library
    /// stays loaded (`-z nodelete`) must not free its path (`/proc/self/fd/N`: the next
    /// memory file would get the same number): the later program must still be its own
    /// code, never the resident one called under the later one's signature.
    #[test]
    fn a_resident_library_of_a_reused_path_is_never_taken_for_a_new_program() {
        let (add, mul) = (
            resident_object("a[i] + b[i]"),
            resident_object("a[i] * b[i]"),
        );
        for _ in 0..3 {
            let first = load_bytes(&add);
            assert_eq!(run(&first), 5.0);
            drop(first);
            let second = load_bytes(&mul);
            assert_eq!(run(&second), 6.0, "the resident library answered");
        }
    }

    /// A program that is unloaded when dropped gives its descriptor back (only a resident
    /// library's is kept open for good).
    #[test]
    fn an_unloaded_program_closes_its_memory_file() {
        let source = Source::new(
            elementwise_kernel("k", "a[i] - b[i]"),
            Signature::out_a_b_n(),
        );
        let program = CcBackend::new()
            .unwrap()
            .compile_program(&[("k", &source)], &[])
            .unwrap();
        let target = std::fs::read_link(program.path()).unwrap();
        assert!(
            target.to_string_lossy().contains("memfd:kcache-cc-program"),
            "{target:?}"
        );
        let program = Arc::new(program);
        assert_eq!(run(&program), -1.0);
        use std::os::unix::fs::MetadataExt;
        let path = program.path().to_path_buf();
        let inode = std::fs::metadata(&path).unwrap().ino();
        drop(program);
        // The number may be taken again by another thread's file, but not by this one.
        assert!(
            std::fs::metadata(&path).map_or(true, |m| m.ino() != inode),
            "the memory file stayed open"
        );
    }

    /// The bytes loaded cannot be changed afterwards, by this process or any other: the
    /// memory file refuses writes and truncation, the kernel computes what was verified,
    /// and the bytes a save would take are those loaded.
    #[test]
    fn the_loaded_bytes_are_sealed() {
        let (add, mul) = (
            resident_object("a[i] + b[i]"),
            resident_object("a[i] * b[i]"),
        );
        let program = load_bytes(&add);
        let mut writer = std::fs::OpenOptions::new()
            .write(true)
            .open(program.path())
            .unwrap();
        use std::io::Write;
        assert!(
            writer.write_all(&mul).is_err(),
            "the memory file took a write"
        );
        assert!(writer.set_len(0).is_err(), "the memory file was truncated");
        assert_eq!(run(&program), 5.0);
        assert_eq!(program.bytes().unwrap(), add);
        assert_eq!(program.size(), add.len() as u64);
    }

    /// Where the system makes no memory file, a program is loaded from an unnamed file of
    /// the checked work directory: its own code, nothing left in the directory, the bytes
    /// a save takes those loaded.
    #[test]
    fn without_memory_files_an_unnamed_file_of_the_work_directory_serves() {
        let add = resident_object("a[i] + b[i]");
        let work = tempfile::tempdir().unwrap();
        crate::image::NO_MEMORY_FILE.set(true);
        let image = Image::new(&add, || Ok(work.path().to_path_buf()));
        crate::image::NO_MEMORY_FILE.set(false);
        let image = image.unwrap();
        let target = std::fs::read_link(image.path()).unwrap();
        assert!(target.starts_with(work.path()), "{target:?}");
        assert_eq!(std::fs::read_dir(work.path()).unwrap().count(), 0);
        let kernels = vec![("k".to_string(), Signature::out_a_b_n())];
        let manifest = Manifest::Loaded(Vec::new(), Vec::new());
        let program =
            Arc::new(CcProgram::load(image, None, None, kernels, manifest, Vec::new()).unwrap());
        assert_eq!(run(&program), 5.0);
        assert_eq!(program.bytes().unwrap(), add);
        // Without a work directory to fall back on, the memory file's error.
        crate::image::NO_MEMORY_FILE.set(true);
        let refused = Image::new(&add, || {
            Err(CcError::WorkDir {
                path: work.path().to_path_buf(),
                why: "test".into(),
            })
        });
        crate::image::NO_MEMORY_FILE.set(false);
        let err = refused.unwrap_err().to_string();
        assert!(err.contains("memfd:kcache-cc-program"), "{err}");
    }

    /// Without `/proc` a program is loaded from a named file of its own: a fresh directory
    /// of the work directory, mode 0700, holding one file, mode 0600, with exactly the
    /// bytes given; its own code runs, the bytes a save takes are those loaded, and the
    /// directory goes with the program (but stays while a resident library holds its name).
    /// Without a work directory either, the error says what the system lacks.
    #[test]
    fn without_proc_a_private_named_file_of_the_work_directory_serves() {
        use std::os::unix::fs::PermissionsExt;
        let source = Source::new(
            elementwise_kernel("k", "a[i] + b[i]"),
            Signature::out_a_b_n(),
        );
        let add = CcBackend::new()
            .unwrap()
            .compile_program(&[("k", &source)], &[])
            .unwrap()
            .bytes()
            .unwrap();
        let work = tempfile::tempdir().unwrap();
        let image_of = |bytes: &[u8]| {
            crate::image::NO_PROC.set(true);
            let image = Image::new(bytes, || Ok(work.path().to_path_buf()));
            crate::image::NO_PROC.set(false);
            image
        };
        let image = image_of(&add).unwrap();
        let path = image.path().to_path_buf();
        let dir = path.parent().unwrap().to_path_buf();
        assert_eq!(dir.parent().unwrap(), work.path(), "{path:?}");
        let mode = |p: &Path| std::fs::symlink_metadata(p).unwrap().permissions().mode() & 0o7777;
        assert_eq!((mode(&dir), mode(&path)), (0o700, 0o600));
        assert_eq!(std::fs::read(&path).unwrap(), add);
        let kernels = vec![("k".to_string(), Signature::out_a_b_n())];
        let manifest = Manifest::Loaded(Vec::new(), Vec::new());
        let program =
            Arc::new(CcProgram::load(image, None, None, kernels, manifest, Vec::new()).unwrap());
        assert_eq!(program.path(), path);
        assert_eq!(run(&program), 5.0);
        assert_eq!(program.bytes().unwrap(), add);
        drop(program);
        assert_eq!(std::fs::read_dir(work.path()).unwrap().count(), 0);

        // No memory file either: the same named file.
        crate::image::NO_MEMORY_FILE.set(true);
        let image = image_of(&add);
        crate::image::NO_MEMORY_FILE.set(false);
        let image = image.unwrap();
        assert_eq!(
            image.path().parent().unwrap().parent().unwrap(),
            work.path()
        );
        assert_eq!(image.bytes().unwrap(), add);
        drop(image);
        assert_eq!(std::fs::read_dir(work.path()).unwrap().count(), 0);

        // A resident library keeps its name: the directory stays.
        let resident = resident_object("a[i] * b[i]");
        let image = image_of(&resident).unwrap();
        let dir = image.path().parent().unwrap().to_path_buf();
        let kernels = vec![("k".to_string(), Signature::out_a_b_n())];
        let manifest = Manifest::Loaded(Vec::new(), Vec::new());
        let program =
            Arc::new(CcProgram::load(image, None, None, kernels, manifest, Vec::new()).unwrap());
        assert_eq!(run(&program), 6.0);
        drop(program);
        assert!(dir.is_dir(), "the resident library's directory was removed");

        // No work directory either: what the system lacks.
        crate::image::NO_PROC.set(true);
        let refused = Image::new(&add, || {
            Err(CcError::WorkDir {
                path: work.path().to_path_buf(),
                why: "test".into(),
            })
        });
        crate::image::NO_PROC.set(false);
        let err = refused.unwrap_err();
        let shown = err.to_string();
        assert!(matches!(err, CcError::Environment { .. }), "{shown}");
        assert!(
            shown.contains("/proc") && shown.contains("work directory"),
            "{shown}"
        );
    }

    /// On the compile path the bytes loaded, weighed and saved are the linker's output as
    /// read once: a change of the file on disk afterwards changes none of them.
    #[test]
    fn a_compiled_program_is_the_bytes_read_once() {
        let work = tempfile::tempdir().unwrap();
        let backend = CcBackend::new().unwrap().with_work_dir(work.path());
        let source = Source::new(
            elementwise_kernel("k", "a[i] + b[i]"),
            Signature::out_a_b_n(),
        );
        let program = Arc::new(backend.compile_program(&[("k", &source)], &[]).unwrap());
        let loaded = program.bytes().unwrap();
        let on_disk = program._dir.as_ref().unwrap().path().join("program.so");
        assert_eq!(std::fs::read(&on_disk).unwrap(), loaded);
        let mul = resident_object("a[i] * b[i]");
        std::fs::write(&on_disk, &mul).unwrap();
        assert_eq!(run(&program), 5.0);
        assert_eq!(
            program.bytes().unwrap(),
            loaded,
            "the save would take other bytes"
        );
        assert_eq!(program.size(), loaded.len() as u64);
    }
}
