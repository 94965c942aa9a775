//! The crate's error type, [`CcError`].

use std::path::PathBuf;

/// Why compiling, loading or calling a C kernel failed.
#[derive(Debug, thiserror::Error)]
pub enum CcError {
    /// The C compiler could not be started at all (not installed, not executable).
    #[error("could not run the C compiler `{compiler}`")]
    Spawn {
        /// The compiler command.
        compiler: String,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
    /// The C compiler ran and refused the program; `stderr` is what it printed.
    #[error("the C compiler failed ({status}) on a program of kernels {symbols:?}:\n{stderr}")]
    Compiler {
        /// How the compiler exited.
        status: String,
        /// The compiler's diagnostics.
        stderr: String,
        /// The kernels the program held.
        symbols: Vec<String>,
    },
    /// Reading or writing a file of the work directory failed.
    #[error("I/O error on {path}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
    /// A kernel's symbol is not a C identifier (`[A-Za-z_][A-Za-z0-9_]*`).
    #[error("`{0}` is not a C identifier and cannot name a kernel")]
    InvalidSymbol(String),
    /// The compiled shared object could not be loaded (for example it references a
    /// function no loaded library defines).
    #[error("could not load {path}")]
    Load {
        /// The shared object.
        path: PathBuf,
        /// The loader's error.
        #[source]
        source: libloading::Error,
    },
    /// A kernel's symbol is not defined by the program that should hold it (its text
    /// defines a function under another name).
    #[error("kernel `{symbol}` is not defined in {path}")]
    MissingSymbol {
        /// The symbol looked up.
        symbol: String,
        /// The shared object.
        path: PathBuf,
        /// The loader's error.
        #[source]
        source: libloading::Error,
    },
    /// A kernel was called with slices of different lengths, or longer than a C `int`
    /// can count.
    #[error(
        "kernel `{symbol}` called with lengths out={out}, a={a}, b={b}: they must be equal and fit a C int"
    )]
    Length {
        /// The kernel.
        symbol: String,
        /// `out.len()`.
        out: usize,
        /// `a.len()`.
        a: usize,
        /// `b.len()`.
        b: usize,
    },
}
