//! What a backend author implements ([`Backend`], optionally [`SplitBackend`]) and the
//! data resolve hands them ([`BatchKernel`], [`Group`], [`Compiled`]).

use crate::partition::Split;

/// One kernel of a batch given to [`resolve`](crate::resolve).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BatchKernel<S> {
    /// The kernel's key (for example from [`kernel_key`](crate::kernel_key)); kernels
    /// with equal keys share one compiled program and symbol.
    pub key: String,
    /// The compiler option list the kernel compiles under. It must enter the key: two
    /// kernels with equal keys but different option lists share the first one's code.
    pub options: Vec<String>,
    /// The name the current rendering gives the kernel.
    pub symbol: String,
    /// What the backend compiles (for example the kernel's C text).
    pub source: S,
}

/// One program to compile: some of a batch's kernels (one representative per distinct
/// key), all under one option list.
#[derive(Debug)]
pub struct Group<'a, S> {
    /// This program's number within the resolve's compiles, in batch order.
    pub index: usize,
    /// How many programs the resolve compiles.
    pub n_groups: usize,
    /// The option list every kernel of the group compiles under.
    pub options: &'a [String],
    /// The kernels, in batch order. Each must be found in the compiled program under
    /// its `symbol`.
    pub kernels: Vec<&'a BatchKernel<S>>,
}

/// A compiled program and its weight in the cache (the compiled bytes where the
/// backend can measure them).
#[derive(Debug)]
pub struct Compiled<P> {
    /// The program.
    pub program: P,
    /// Its weight in bytes.
    pub weight: u64,
}

/// A compiler backend: compiles a group of kernels into one program.
///
/// This is all a backend that cannot split its compiles implements; such a backend is
/// driven by [`resolve`](crate::resolve). Code of the backend never runs while the
/// cache holds a map reference.
pub trait Backend {
    /// What a kernel's code is given as.
    type Source;
    /// A compiled program; shared by every kernel compiled into it.
    type Program: Send + Sync + 'static;
    /// Why a compile failed.
    type Error: std::error::Error + Send + Sync + 'static;

    /// Compiles `group`'s kernels into one program in which each kernel can be found
    /// under its `symbol`. Runs under the cache's compile lock.
    fn compile_group(
        &self,
        group: &Group<'_, Self::Source>,
    ) -> Result<Compiled<Self::Program>, Self::Error>;

    /// Runs under the compile lock ahead of a resolve's compiles, also when nothing is
    /// left to compile after the locked re-lookup. An error stops the resolve before
    /// any compile. The default does nothing.
    fn before_compile(&self) -> Result<(), Self::Error> {
        Ok(())
    }

    /// Whether an all-hit resolve still takes the compile lock and runs
    /// [`before_compile`](Backend::before_compile) (for a backend that writes
    /// per-compile artifacts even for an all-hit batch). The default is `false`.
    fn always_lock(&self) -> bool {
        false
    }
}

/// A backend that can cut its compiles into programs compiled at once on several
/// threads: driven by [`resolve_split`](crate::resolve_split).
///
/// For each program: [`prepare`](SplitBackend::prepare) runs on the calling thread,
/// [`compile`](SplitBackend::compile) on a thread of its own (the first on the calling
/// thread), and [`finish`](SplitBackend::finish) again on the calling thread, in batch
/// order, after every compile has returned.
pub trait SplitBackend: Backend + Sync {
    /// A program between prepare and finish.
    type Prepared: Send;

    /// How this backend's configuration cuts compiles (replaced inside
    /// [`with_split_override`](crate::with_split_override)).
    fn split(&self) -> Split;

    /// Gets `group` ready to compile (for example writes its source file).
    fn prepare(&self, group: &Group<'_, Self::Source>) -> Result<Self::Prepared, Self::Error>;

    /// Compiles a prepared program; runs concurrently with the other programs'.
    fn compile(&self, prepared: &mut Self::Prepared) -> Result<(), Self::Error>;

    /// Turns a compiled program into the program the cache retains (for example loads
    /// it) and its weight.
    fn finish(&self, prepared: Self::Prepared) -> Result<Compiled<Self::Program>, Self::Error>;
}
