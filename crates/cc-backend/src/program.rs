//! Loaded programs ([`CcProgram`]) and callable kernels ([`Kernel`]): the only code of
//! the workspace that is `unsafe`.

use std::fmt;
use std::os::raw::c_int;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use kernel_cache::Resolved;
use libloading::os::unix::{Library as UnixLibrary, RTLD_LOCAL, RTLD_NOW};

use crate::error::CcError;

/// The C type every kernel has: `void name(float *out, const float *a, const float *b,
/// int n)`.
type KernelFn = unsafe extern "C" fn(*mut f32, *const f32, *const f32, c_int);

/// A compiled, loaded shared object holding some kernels.
///
/// The library stays loaded (and its file on disk) as long as the `CcProgram` lives;
/// every [`Kernel`] taken from it holds it by `Arc`.
pub struct CcProgram {
    // Field order is drop order: unload before the directory goes.
    library: libloading::Library,
    path: PathBuf,
    size: u64,
    symbols: Vec<String>,
    _dir: tempfile::TempDir,
}

impl fmt::Debug for CcProgram {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CcProgram")
            .field("path", &self.path)
            .field("size", &self.size)
            .field("symbols", &self.symbols)
            .finish()
    }
}

impl CcProgram {
    /// Loads the shared object `path` (in `dir`, which it keeps alive) and checks that
    /// it defines every one of `symbols`.
    pub(crate) fn load(
        dir: tempfile::TempDir,
        path: PathBuf,
        symbols: Vec<String>,
    ) -> Result<CcProgram, CcError> {
        let size = std::fs::metadata(&path)
            .map_err(|source| CcError::Io {
                path: path.clone(),
                source,
            })?
            .len();
        let library = open(&path)?;
        let program = CcProgram {
            library,
            path,
            size,
            symbols,
            _dir: dir,
        };
        for symbol in &program.symbols {
            program.function(symbol)?;
        }
        Ok(program)
    }

    /// The shared object's size in bytes (its weight in a cache).
    pub fn size(&self) -> u64 {
        self.size
    }

    /// The shared object's path (removed when the program is dropped).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The symbols of the kernels compiled into this program, in batch order.
    pub fn symbols(&self) -> &[String] {
        &self.symbols
    }

    /// The kernel compiled under `symbol`, holding this program alive.
    ///
    /// Errors with [`CcError::MissingSymbol`] when the program defines no such symbol.
    pub fn kernel(self: &Arc<Self>, symbol: &str) -> Result<Kernel, CcError> {
        let function = self.function(symbol)?;
        Ok(Kernel {
            program: Arc::clone(self),
            symbol: symbol.to_string(),
            function,
        })
    }

    #[allow(unsafe_code)]
    fn function(&self, symbol: &str) -> Result<KernelFn, CcError> {
        // SAFETY: every kernel symbol of a program is declared by the prototype the
        // backend writes ahead of the kernels (`void name(float *, const float *, const
        // float *, int)`), so a definition of any other type fails to compile, and
        // `KernelFn` is that type. The copied function pointer is only used through a
        // `Kernel`, which keeps `self` (and so the library) alive.
        let found = unsafe { self.library.get::<KernelFn>(symbol.as_bytes()) };
        match found {
            Ok(f) => Ok(*f),
            Err(source) => Err(CcError::MissingSymbol {
                symbol: symbol.to_string(),
                path: self.path.clone(),
                source,
            }),
        }
    }
}

#[allow(unsafe_code)]
fn open(path: &Path) -> Result<libloading::Library, CcError> {
    // SAFETY: loading runs the object's initialisers. The object was compiled by this
    // crate from kernel text the caller supplied; the crate's contract (see the crate
    // docs) is that kernel text is trusted C that defines kernels of the fixed
    // signature and has no initialisers or finalisers with requirements. `RTLD_NOW`
    // resolves every reference at load time, so a kernel calling an undefined function
    // is an error here rather than a crash at call time. The file has a fresh, unique
    // path, so the loader never hands back an older library of the same name.
    let library = unsafe { UnixLibrary::open(Some(path), RTLD_NOW | RTLD_LOCAL) };
    library.map(Into::into).map_err(|source| CcError::Load {
        path: path.to_path_buf(),
        source,
    })
}

/// A kernel of a loaded program, callable from safe code.
///
/// Holds its program alive, so it stays callable after the cache that answered it
/// evicted the program.
#[derive(Clone)]
pub struct Kernel {
    program: Arc<CcProgram>,
    symbol: String,
    function: KernelFn,
}

impl fmt::Debug for Kernel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Kernel")
            .field("symbol", &self.symbol)
            .field("program", &self.program.path)
            .finish()
    }
}

impl Kernel {
    /// The kernel for a value a [`KernelCache`](kernel_cache::KernelCache) answered.
    pub fn from_resolved(resolved: &Resolved<CcProgram>) -> Result<Kernel, CcError> {
        resolved.program.kernel(&resolved.symbol)
    }

    /// The symbol the kernel is found under.
    pub fn symbol(&self) -> &str {
        &self.symbol
    }

    /// The program holding the kernel.
    pub fn program(&self) -> &Arc<CcProgram> {
        &self.program
    }

    /// Runs the kernel on `n = out.len()` elements: `kernel(out, a, b, n)`.
    ///
    /// Errors with [`CcError::Length`] unless the three slices have the same length
    /// and it fits a C `int`. The kernel's C text is trusted to touch only indices
    /// `0..n` of each array (the crate's contract for kernel text).
    #[allow(unsafe_code)]
    pub fn call(&self, out: &mut [f32], a: &[f32], b: &[f32]) -> Result<(), CcError> {
        let n = out.len();
        let length_error = || CcError::Length {
            symbol: self.symbol.clone(),
            out: out.len(),
            a: a.len(),
            b: b.len(),
        };
        if a.len() != n || b.len() != n {
            return Err(length_error());
        }
        let n_c = c_int::try_from(n).map_err(|_| length_error())?;
        // SAFETY: `function` has the C type it was declared with (see
        // `CcProgram::function`), its library is alive while `self.program` is, `out` is
        // an exclusive, writable array of `n` floats and `a`, `b` readable arrays of
        // `n` floats each; by the kernel-text contract the kernel accesses only indices
        // below `n` of each and keeps no pointer after returning.
        unsafe { (self.function)(out.as_mut_ptr(), a.as_ptr(), b.as_ptr(), n_c) };
        Ok(())
    }
}
