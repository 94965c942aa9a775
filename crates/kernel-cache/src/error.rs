//! The crate's error type, [`Error`].

use std::fmt;

/// Why a resolve failed. The per-kernel [`Resolver::resolve`](crate::Resolver::resolve)
/// returns only [`Error::BeforeCompile`] and [`Error::DuplicateSymbol`]: a compile's
/// failure is answered per kernel ([`KernelError`]); [`Resolver::resolve_strict`](crate::Resolver::resolve_strict)
/// also returns [`Error::Compile`].
/// `E` is the backend's own error, kept typed and reachable through `source()`.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error<E: std::error::Error + 'static> {
    /// The backend's `before_compile` hook failed; nothing was compiled or published.
    #[error("the backend's before_compile hook failed")]
    BeforeCompile(#[source] E),
    /// A program failed to compile. Nothing of it was published; every other program
    /// that compiled was published.
    #[error(transparent)]
    Compile(Box<CompileFailure<E>>),
    /// Two kernels of the batch with different keys share one symbol (a program could
    /// not hold both, and a caller looking one up by symbol would find the other).
    /// Found before any lookup or compile: nothing was compiled, published or counted.
    /// Kernels with equal keys may share a symbol: they are twins, and only the first's
    /// source is ever compiled (the key is the caller's claim that they mean the same).
    #[error(
        "kernels {first} and {second} of the batch have different keys but one symbol `{symbol}`"
    )]
    DuplicateSymbol {
        /// The shared symbol.
        symbol: String,
        /// The earlier kernel's index in the batch.
        first: usize,
        /// The later kernel's index in the batch.
        second: usize,
    },
}

/// Why one kernel of a per-kernel resolve ([`Resolver::resolve`](crate::Resolver::resolve))
/// has no program. Kernels sharing a key (twins) share one `Arc` of it, and so
/// do the kernels of one failed program.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum KernelError<E: std::error::Error + 'static> {
    /// The kernel's own unit failed to compile: the failure names this one kernel
    /// (`symbols` holds its representative's symbol) and `source` holds that unit's own
    /// error (for cc-backend, the compiler's diagnostics for that unit only). The other
    /// kernels of its program were compiled without it.
    #[error("kernel {kernel} failed alone: {failure}", failure = .0, kernel = .0.symbols.join(", "))]
    Unit(CompileFailure<E>),
    /// The kernel's whole program failed (a step that is not one kernel's: a link, a
    /// compiler that could not be started, a backend that cannot tell its kernels'
    /// failures apart): every kernel of it (`symbols`) has this error.
    #[error(transparent)]
    Program(CompileFailure<E>),
    /// The backend reported neither a program holding the kernel nor a failure of it
    /// (a backend bug: see [`Units`](crate::Units)); the kernel is refused rather than
    /// answered from a program that may not hold it.
    #[error(
        "program {program}: the backend answered neither code nor an error for kernel `{symbol}`"
    )]
    Unreported {
        /// The kernel's (representative's) symbol.
        symbol: String,
        /// The program's number, in batch order.
        program: usize,
    },
    /// The kernel store remembers that this kernel (its key, under this backend identity and
    /// host part) failed alone in an earlier resolve, a failure the backend said is the
    /// kernel's own ([`Backend::remembered`](crate::Backend::remembered)):
    /// nothing was compiled for it. `message` is what the failure said then. A resolve
    /// with [`FailureMemory::Retry`](crate::store::FailureMemory) compiles it again, and
    /// `kcache gc --failures` forgets it.
    #[error("kernel {symbol} is remembered as failed (not compiled again): {message}")]
    Remembered {
        /// The kernel's (representative's) symbol.
        symbol: String,
        /// The remembered failure's message.
        message: String,
    },
}

impl<E: std::error::Error + 'static> KernelError<E> {
    /// The backend's error, unless the backend reported none.
    pub fn backend_error(&self) -> Option<&E> {
        self.compile_failure().map(|f| &f.source)
    }

    /// The failing unit's or program's details, unless the backend reported none.
    pub fn compile_failure(&self) -> Option<&CompileFailure<E>> {
        match self {
            KernelError::Unit(f) | KernelError::Program(f) => Some(f),
            KernelError::Unreported { .. } | KernelError::Remembered { .. } => None,
        }
    }

    /// The remembered failure's message, when the kernel store answered the kernel with a
    /// failure remembered from an earlier resolve ([`KernelError::Remembered`]).
    pub fn remembered(&self) -> Option<&str> {
        match self {
            KernelError::Remembered { message, .. } => Some(message),
            _ => None,
        }
    }

    /// Whether the kernel failed alone (its own unit, now or, remembered, before), not
    /// with its whole program.
    pub fn is_alone(&self) -> bool {
        matches!(self, KernelError::Unit(_) | KernelError::Remembered { .. })
    }
}

/// Which program of a resolve failed, and the backend's error.
///
/// Its `Display` ends with the first lines of the backend error's own display (for
/// the C backend, the compiler's first diagnostics), so a one-line report says why;
/// the whole backend error stays reachable as [`source`](std::error::Error::source)
/// and as the field.
#[derive(Debug, thiserror::Error)]
pub struct CompileFailure<E: std::error::Error + 'static> {
    /// The program's number, in batch order.
    pub program: usize,
    /// How many programs the resolve compiled.
    pub programs: usize,
    /// The symbols of the kernels the failing compile held: the program's kernels, or,
    /// for one kernel that failed alone ([`KernelError::Unit`]), that one kernel.
    pub symbols: Vec<String>,
    /// The backend's error.
    #[source]
    pub source: E,
    /// How many programs later in batch order panicked (strict resolve). The
    /// first failure in batch order is what a resolve reports, so their panics were not
    /// resumed; the panic hook reported each as it happened, and this count keeps them
    /// visible.
    pub later_panics: usize,
}

/// How many lines of the backend error's display [`CompileFailure`] shows.
const SHOWN_LINES: usize = 6;

impl<E: std::error::Error + 'static> fmt::Display for CompileFailure<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "compile of program {} of {} failed (kernels: {})",
            self.program,
            self.programs,
            self.symbols.join(", ")
        )?;
        if self.later_panics > 0 {
            write!(
                f,
                "; {} later program(s) panicked (reported by the panic hook)",
                self.later_panics
            )?;
        }
        let shown = self.source.to_string();
        let mut lines = shown.lines();
        if let Some(first) = lines.next() {
            write!(f, ": {first}")?;
        }
        let rest: Vec<&str> = lines.by_ref().take(SHOWN_LINES - 1).collect();
        for line in &rest {
            write!(f, "\n  {line}")?;
        }
        if lines.next().is_some() {
            write!(f, "\n  ...")?;
        }
        Ok(())
    }
}

impl<E: std::error::Error + 'static> Error<E> {
    /// The backend's error, unless the batch itself was refused.
    pub fn backend_error(&self) -> Option<&E> {
        match self {
            Error::BeforeCompile(e) => Some(e),
            Error::Compile(failure) => Some(&failure.source),
            Error::DuplicateSymbol { .. } => None,
        }
    }

    /// The failing program's details, when a compile failed.
    pub fn compile_failure(&self) -> Option<&CompileFailure<E>> {
        match self {
            Error::Compile(failure) => Some(failure),
            Error::BeforeCompile(_) | Error::DuplicateSymbol { .. } => None,
        }
    }
}
