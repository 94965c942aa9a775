//! The crate's error type, [`Error`].

use std::fmt;

/// Which step of a program's compile failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    /// [`Backend::compile_group`](crate::Backend::compile_group) (the whole path).
    CompileGroup,
    /// [`SplitBackend::prepare`](crate::SplitBackend::prepare).
    Prepare,
    /// [`SplitBackend::compile`](crate::SplitBackend::compile), on its own thread.
    Compile,
    /// [`SplitBackend::finish`](crate::SplitBackend::finish).
    Finish,
}

impl fmt::Display for Stage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Stage::CompileGroup => "compile",
            Stage::Prepare => "prepare",
            Stage::Compile => "concurrent compile",
            Stage::Finish => "finish",
        })
    }
}

/// Why [`resolve`](crate::resolve) or [`resolve_split`](crate::resolve_split) failed.
/// `E` is the backend's own error, kept typed and reachable through `source()`.
#[derive(Debug, thiserror::Error)]
pub enum Error<E: std::error::Error + 'static> {
    /// The backend's `before_compile` hook failed; nothing was compiled or published.
    #[error("the backend's before_compile hook failed")]
    BeforeCompile(#[source] E),
    /// A program failed to compile. Nothing of it was published; programs earlier in
    /// batch order (and, on the concurrent path, every other program that succeeded)
    /// were published.
    #[error(transparent)]
    Compile(Box<CompileFailure<E>>),
}

/// Which program of a resolve failed, at which step, and the backend's error.
#[derive(Debug, thiserror::Error)]
#[error("{stage} of program {program} of {programs} failed (kernels: {})", symbols.join(", "))]
pub struct CompileFailure<E: std::error::Error + 'static> {
    /// The step that failed.
    pub stage: Stage,
    /// The program's number, in batch order.
    pub program: usize,
    /// How many programs the resolve compiled.
    pub programs: usize,
    /// The symbols of the kernels the program held.
    pub symbols: Vec<String>,
    /// The backend's error.
    #[source]
    pub source: E,
}

impl<E: std::error::Error + 'static> Error<E> {
    /// The backend's error.
    pub fn backend_error(&self) -> &E {
        match self {
            Error::BeforeCompile(e) => e,
            Error::Compile(failure) => &failure.source,
        }
    }

    /// The backend's error, owned.
    pub fn into_backend_error(self) -> E {
        match self {
            Error::BeforeCompile(e) => e,
            Error::Compile(failure) => failure.source,
        }
    }

    /// The failing program's details, when a compile failed.
    pub fn compile_failure(&self) -> Option<&CompileFailure<E>> {
        match self {
            Error::Compile(failure) => Some(failure),
            Error::BeforeCompile(_) => None,
        }
    }
}
