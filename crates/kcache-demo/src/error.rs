//! The demo's error type, [`DemoError`].

use std::path::PathBuf;

use cc_backend::CcError;

/// Why the demo could not finish.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DemoError {
    /// No working C compiler: the demo compiles real C (set `CC` to choose one).
    #[error("no working C compiler (the demo compiles real C kernels; install cc or set CC)")]
    NoCompiler(#[source] CcError),
    /// Compiling, loading or calling a kernel failed.
    #[error("the C backend failed")]
    Backend(#[source] CcError),
    /// Resolving a batch of kernels through the kernel cache failed.
    #[error("resolving {routine}'s kernels failed")]
    Resolve {
        /// The routine whose batch failed.
        routine: String,
        /// The driver's error (carries the compiler's diagnostics).
        #[source]
        source: kernel_cache::Error<CcError>,
    },
    /// A schedule, identity or cache-key operation failed.
    #[error("schedule-cache refused an operation for {routine}")]
    Schedule {
        /// The routine concerned.
        routine: String,
        /// schedule-cache's error.
        #[source]
        source: schedule_cache::Error,
    },
    /// The code could not be rendered to C.
    #[error("cannot render to C: {0}")]
    Render(String),
    /// Every candidate of a routine computed a wrong result.
    #[error("no candidate schedule of {0} computed the right result")]
    NoCorrectCandidate(String),
    /// `--kernels` named a kernel the demo does not have.
    #[error("unknown kernel {name:?}; the demo's kernels are {known}")]
    UnknownKernel {
        /// The name given.
        name: String,
        /// The known names, comma-separated.
        known: String,
    },
    /// Every candidate of a search failed to compile (each is skipped alone, so this is a
    /// compiler that compiles nothing): the first one's diagnostic.
    #[error("resolving {routine}: every candidate failed to compile: {first}")]
    NothingCompiled {
        /// The routine.
        routine: String,
        /// The compiler's first error line for the first candidate.
        first: String,
    },
    /// Two options of which one would be dropped without a word (`compare_cold` without
    /// `seeds`: there is no seeded search to compare; a matrix size with kernels that leave
    /// out the matrix product): refused rather than run as something else than asked.
    #[error("{0}")]
    ConflictingOptions(String),
    /// `--size` is outside the sizes the demo builds.
    #[error("matmul size {size} is outside {min}..={max}")]
    BadSize {
        /// The size given.
        size: usize,
        /// The smallest size.
        min: usize,
        /// The largest size.
        max: usize,
    },
    /// `--fresh` was asked to clear a directory that does not look like a kcache cache.
    #[error(
        "refusing to clear {}: it holds {entry:?}, which is not a kcache cache file",
        path.display()
    )]
    NotACacheDir {
        /// The directory.
        path: PathBuf,
        /// The first foreign file found.
        entry: String,
    },
    /// The cache directory (or, for `--fresh`, its kernel store) is one the store does not
    /// adopt: it has no regime stamp yet holds a file named like an entry (a user's
    /// `settings.ron`). Nothing in it was created, deleted or stamped.
    #[error(
        "refusing {} as the cache directory: it has no regime stamp but holds {name:?}, named \
         like an entry, so it is no kcache cache (nothing was changed; give the demo a \
         directory of its own)",
        path.display()
    )]
    Unadopted {
        /// The directory (the cache directory, or its kernel store).
        path: PathBuf,
        /// The first file found named like an entry.
        name: String,
    },
    /// The cache directory's regime stamp is no regime version (a file of someone else's
    /// named `regime.stamp`, or a damaged stamp): the store refuses the directory, and
    /// nothing in it was created, deleted or stamped.
    #[error(
        "refusing {} as the cache directory: its regime stamp {content:?} is malformed, so \
         the store refuses it (nothing was changed; give the demo a directory of its own)",
        path.display()
    )]
    MalformedStamp {
        /// The directory.
        path: PathBuf,
        /// The stamp's content (at most 64 characters).
        content: String,
    },
    /// The tuner stopped on a routine (a setting out of range, a batch it could not
    /// resolve at all, a correct candidate failing when timed).
    #[error("tuning {routine}")]
    Tune {
        /// The routine.
        routine: String,
        /// The tuner's error.
        #[source]
        source: tuner::Error,
    },
    /// A filesystem operation of the demo itself failed.
    #[error("I/O error on {}", path.display())]
    Io {
        /// The path.
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
}
