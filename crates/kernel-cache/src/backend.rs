//! What a backend author implements ([`Backend`]) and the data a resolve hands it
//! ([`BatchKernel`], [`Group`], [`Compiled`], [`Units`], [`SavedProgram`]).

/// One kernel of a batch given to a [`Resolver`](crate::Resolver).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BatchKernel<S> {
    /// The kernel's key (for example from [`kernel_key`](crate::kernel_key)); kernels
    /// with equal keys share one compiled program and symbol. Any string is accepted:
    /// an equal key is the caller's claim that the kernels compile to interchangeable
    /// code, so it must cover everything the program depends on (the text up to
    /// renaming, the options, the compiler; [`kernel_key`](crate::kernel_key) covers
    /// these, and cc-backend's `Source::batch_kernel` adds the signature).
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

/// What a per-kernel compile ([`Backend::compile_group_each`]) made of a group: the
/// kernels whose own units failed, each with its own error, and the program holding the
/// others.
#[derive(Debug)]
pub struct Units<P, E> {
    /// The program holding every kernel of the group not in `failed` (each under its
    /// `symbol`); `None` when every kernel failed. A kernel neither in `failed` nor held
    /// (`None` while some kernel did not fail) is a backend bug: the resolve answers it
    /// with [`KernelError::Unreported`](crate::KernelError::Unreported), never a program.
    pub program: Option<Compiled<P>>,
    /// The kernels that failed alone: their position in the group's `kernels` and their
    /// own error (for cc-backend, that unit's diagnostics). A position out of range, or
    /// given again, is ignored.
    pub failed: Vec<(usize, E)>,
}

/// A compiled program in the form a persistent kernel store keeps it: the program's
/// bytes (for cc-backend, the shared object file) and its symbol table.
///
/// The store treats `bytes` as opaque: it names the blob by the SHA-256 of its framed
/// content (symbol table and bytes), verifies that digest before every load and hands
/// [`Backend::load`] exactly what [`Backend::save`] returned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SavedProgram {
    /// The program's bytes, complete: loading them must need no other file.
    pub bytes: Vec<u8>,
    /// Every symbol the program defines for the kernels compiled into it (the `symbol`s
    /// of its group's kernels, in batch order). Each must be a non-empty string without
    /// a NUL or newline byte; the store refuses to save (and never loads) a program
    /// whose table breaks that.
    pub symbols: Vec<String>,
}

/// A compiler backend: compiles groups of kernels into programs.
///
/// A [`Resolver`](crate::Resolver) compiles the programs it cuts concurrently, each on a
/// thread of its own (so a backend is `Sync`), under the cache's compile lock; code of the
/// backend never runs while the cache holds a map reference.
///
/// A program must depend on nothing the kernels' keys do not cover (their texts, option
/// lists and the backend identity): not on the directory, file names or time of the
/// compile, which the predefined macros `__FILE__`, `__DATE__`, `__TIME__` and
/// `__TIMESTAMP__` (and `assert` messages) expose. cc-backend, for example, compiles
/// every unit as `kernel.c` in a directory of its own and fixes the time (see its
/// `CcBackend`).
///
/// # Persistence (optional)
///
/// A backend whose programs can outlive the process implements
/// [`identity`](Backend::identity), [`save`](Backend::save) and [`load`](Backend::load)
/// (each returns `None` by default: a backend without an identity is never given the
/// resolver's store); its programs are then saved to a persistent kernel store after a
/// compile and loaded from it in this or another process instead of compiling again.
///
/// * [`identity`](Backend::identity) names everything outside the kernel key
///   that makes saved bytes loadable and meaningful in this process: the compiler and
///   its version, the flags every compile adds, the target (architecture, OS, ABI) and
///   the saved format. Two backends with equal identities must be able to load each
///   other's saved programs and get the same code; the store only answers a key from an
///   entry saved under an equal identity (a different identity is a miss, explained).
///   It must not contain secrets (it is written to disk and shown in reports).
/// * [`host_part`](Backend::host_part) says, for an option list whose code
///   depends on the machine that compiles it (cc-backend's `-march=native` and the like:
///   code for the compiling machine's processor), what those options mean on this
///   machine; `None` (the default) for options whose code is the same on every machine of
///   the identity. It must be equal on two machines whose programs compiled under those
///   options each can load, and differ otherwise: the store names a key's entry (and its
///   compile lock, and its farm key) by identity, key and host part, so each kind of
///   machine has its own entry and its own hits in a store several share; a host part
///   that differs where the programs would load only costs misses, one that is equal where
///   they would not makes the machines replace each other's entries in turn (`load` must
///   still refuse such a program, as it refuses any it cannot run).
/// * [`save`](Backend::save) returns the complete bytes of `program` and its
///   symbol table, such that [`load`](Backend::load) of that value (by any
///   backend of equal identity, in any process, any time later) gives a program in
///   which every symbol of the table finds the same code as in `program`. It runs under
///   the cache's compile lock, after the compile returned; it must not change
///   `program`. An `Err` means "cannot be saved": the store logs it as a warning and
///   keeps nothing (a future miss), the resolve still succeeds.
/// * [`load`](Backend::load) turns saved bytes into a program the cache can
///   retain, with its weight (as [`compile_group`](Backend::compile_group) would give it), without
///   compiling. The store calls it only with bytes whose digest it has verified, from a
///   blob only the store's owner could have written (or, from a shared store, carrying a
///   valid keyed MAC): that is the trust boundary (see `docs/disk-format.md`). A key
///   names a kernel's text, not the files the compile read besides it (headers): a
///   backend whose compiles read such files records what it read in the saved bytes
///   and `load` refuses (`Err`) once one of them differs (cc-backend does). `load`
///   must not keep a reference to `saved` (copy what it needs; for a shared object,
///   write the bytes to a fresh file of its own and load that). It must check that the
///   program defines every symbol of `saved.symbols` and return an `Err` otherwise; an
///   `Err` is a miss (the resolve compiles instead), and the store removes the blob
///   unless [`keeps_saved`](Backend::keeps_saved) says the failure was this
///   moment's or this machine's. It must not count as a compile in the backend's own
///   counters.
pub trait Backend: Sync {
    /// What a kernel's code is given as.
    type Source: Sync;
    /// A compiled program; shared by every kernel compiled into it.
    type Program: Send + Sync + 'static;
    /// Why a compile failed.
    type Error: std::error::Error + Send + Sync + 'static;

    /// Compiles `group`'s kernels into one program in which each kernel can be found
    /// under its `symbol` (a strict resolve: any failure fails the program). Runs on a
    /// thread of its own, under the cache's compile lock.
    fn compile_group(
        &self,
        group: &Group<'_, Self::Source>,
    ) -> Result<Compiled<Self::Program>, Self::Error>;

    /// Compiles `group`'s kernels as [`compile_group`](Backend::compile_group) does, but
    /// reports a kernel whose own unit fails alone: the program holds the others. Used by
    /// the per-kernel resolve ([`Resolver::resolve`](crate::Resolver::resolve)). Each
    /// kernel must be compiled at most once (a failure must not cost the other kernels a
    /// second compile). An `Err` fails the whole group (every kernel of it gets that
    /// error).
    ///
    /// The default calls [`compile_group`](Backend::compile_group): a backend that cannot
    /// tell which kernel failed fails its whole group, as a strict resolve does.
    fn compile_group_each(
        &self,
        group: &Group<'_, Self::Source>,
    ) -> Result<Units<Self::Program, Self::Error>, Self::Error> {
        self.compile_group(group).map(|compiled| Units {
            program: Some(compiled),
            failed: Vec::new(),
        })
    }

    /// What compiling `source` costs, relative to the batch's other kernels (for example
    /// its length): an option list's kernels are cut into programs of the sizes a cut by
    /// count gives, balanced by this cost ([`balanced`](crate::balanced)). The default, 1
    /// for every kernel, cuts them into contiguous runs ([`chunks`](crate::chunks)). Never
    /// changes what a kernel compiles to, only which program holds it.
    fn compile_cost(&self, source: &Self::Source) -> u64 {
        let _ = source;
        1
    }

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

    /// What identifies this backend's saved programs (see "Persistence"); `None` (the
    /// default): its programs are never saved nor loaded, and a resolver's store is not
    /// used.
    fn identity(&self) -> Option<String> {
        None
    }

    /// The saved form of `program` (its bytes and symbol table), or why it cannot be
    /// saved; `None` (the default): this backend does not save.
    fn save(&self, program: &Self::Program) -> Option<Result<SavedProgram, Self::Error>> {
        let _ = program;
        None
    }

    /// The program `saved` holds, loaded without compiling, and its weight; `None` (the
    /// default): this backend does not load.
    #[allow(clippy::type_complexity)]
    fn load(&self, saved: &SavedProgram) -> Option<Result<Compiled<Self::Program>, Self::Error>> {
        let _ = saved;
        None
    }

    /// What `options` mean on this machine, for an option list whose code depends on the
    /// machine that compiles it; `None` for one whose code does not (see "Persistence"). A digest of the options' meaning (for cc-backend, of the compiler's
    /// expansion of `-march=native` to this processor), the same for every call with the
    /// same options in one process; asked once per option list per resolve, under the
    /// cache's compile lock: memoize it when it is costly.
    ///
    /// An `Err` means "cannot be told now": the kernels under those options are compiled
    /// without the store (not looked up, `MissReason::HostUnknown`; no compile lock; not
    /// saved, `NotSaved::Backend`), and the resolve still succeeds. The default is
    /// `Ok(None)` for every option list.
    fn host_part(&self, options: &[String]) -> Result<Option<[u8; 32]>, Self::Error> {
        let _ = options;
        Ok(None)
    }

    /// Whether the saved program stays in the store after [`load`](Backend::load)
    /// failed with `error`: `true` when the failure belongs to this moment, this machine or
    /// this process's environment rather than to the program's bytes (an I/O error such as
    /// a full disk; a system lacking what loading needs, such as `/proc` not mounted in this
    /// process's mount namespace; a program compiled for another processor in a store
    /// several machines share), so the blob may still load later or elsewhere; `false`
    /// (the default) when it can never load again (a header it was compiled from changed,
    /// malformed bytes), so the store removes it. When in doubt, `true`: a kept blob costs
    /// only disk, a removed one a compile in every process that shares the store. Either way the lookup is a miss
    /// and the resolve compiles; the blob kept is evicted by the size limit once nothing
    /// names it.
    fn keeps_saved(&self, error: &Self::Error) -> bool {
        let _ = error;
        false
    }

    /// The message to remember `kernel`'s failure by, when `error` (its own unit's failure
    /// in a per-kernel resolve, [`KernelError::Unit`](crate::KernelError::Unit)) is a
    /// property of the kernel under this identity: the same key, identity and host part
    /// would fail the same way in any process, so the store keeps the message and the
    /// per-kernel resolves answer the kernel with it
    /// ([`KernelError::Remembered`](crate::KernelError::Remembered)) instead of compiling it
    /// again (`docs/disk-format.md`, "Remembered failures"). `None` (the default) for a
    /// failure of this moment, this machine or this environment (a compiler that could not
    /// be started, an I/O error, a lock that timed out, a full disk, a killed compiler) and
    /// for one that may depend on what the key does not name (a header the kernel reads):
    /// those are compiled again next time. When in doubt, `None`: a failure not remembered
    /// costs a compile, a wrong one a kernel refused until it is forgotten
    /// ([`FailureMemory::Retry`](crate::store::FailureMemory), `kcache gc --failures`).
    /// Whole-program failures ([`KernelError::Program`](crate::KernelError::Program)) are
    /// never asked about: they are not one kernel's.
    fn remembered(
        &self,
        kernel: &BatchKernel<Self::Source>,
        error: &Self::Error,
    ) -> Option<String> {
        let _ = (kernel, error);
        None
    }
}
