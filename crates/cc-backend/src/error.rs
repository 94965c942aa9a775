//! The crate's error type, [`CcError`].

use std::path::PathBuf;

/// Why compiling, loading or calling a C kernel failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
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
    /// The C compiler ran and refused a kernel's unit or the link; `stderr` is what it
    /// printed. Each kernel is compiled on its own (as `kernel.c`), so a unit that does
    /// not compile is reported with its one kernel in `symbols` and that unit's
    /// diagnostics only; a failed link names every kernel it linked. (A compiler probe,
    /// `-E -v` or `-E -###`, that fails names none.) A diagnostic's line number is the
    /// line of the kernel's text (`kernel.c:3:12` is its third line; the prelude's lines
    /// come before line 1). The display shows the diagnostics' first lines; the field
    /// holds them all.
    #[error(
        "the C compiler failed ({status}) on kernels {symbols:?}:\n{}",
        first_lines(stderr)
    )]
    Compiler {
        /// How the compiler exited.
        status: String,
        /// The compiler's diagnostics for this unit (or link).
        stderr: String,
        /// The kernel whose unit failed (one symbol), or every kernel of a failed link;
        /// empty for a failed probe.
        symbols: Vec<String>,
    },
    /// The object of kernels `symbols` refers to `name`, a symbol the backend generates
    /// for a kernel (its entry `…__kcache_entry` or its exported function
    /// `…__kcache_kernel`) that its own unit does not define: it would call a companion
    /// kernel of its program, which a kernel never does (it means the same whichever
    /// companions share its program). The unit is not linked; as a per-kernel outcome it
    /// fails alone.
    #[error(
        "kernels {symbols:?} refer to `{name}`, a symbol the backend generates for another kernel"
    )]
    ReservedReference {
        /// The kernels of the unit (one, or a merged unit's).
        symbols: Vec<String>,
        /// The symbol referred to.
        name: String,
    },
    /// The object of kernels `symbols` would be joined with its companions' by the link
    /// otherwise than through symbols, which the backend makes local: `why` says how (a
    /// section named as a C identifier, gathered over every object with
    /// `__start_`/`__stop_` symbols; a `.gnu.linkonce` section or COMDAT group, kept once;
    /// a common symbol, one object with its namesakes; link-time-optimization IR,
    /// compiled together). The kernel is not linked; as a per-kernel outcome it fails
    /// alone, as it does beside any companion.
    #[error("kernels {symbols:?} cannot be kept apart from their companions: {why}")]
    Unisolable {
        /// The kernels of the unit (one, or a merged unit's).
        symbols: Vec<String>,
        /// How the link would join them.
        why: String,
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
    /// The work directory compiles would happen in cannot be trusted (see
    /// [`CcBackend::with_work_dir`](crate::CcBackend::with_work_dir)): it, or a directory
    /// above it, is writable by the group or others without the sticky bit, owned by
    /// another user, a link, missing, or a private subdirectory could not be made in it.
    /// `path` is the directory at fault, `why` says what is wrong with it. Nothing was
    /// compiled or loaded.
    #[error("the work directory {} cannot be used: {why}", path.display())]
    WorkDir {
        /// The directory at fault (the work directory or one above it).
        path: PathBuf,
        /// Why it is refused.
        why: String,
    },
    /// An [`ObjectBackend`](crate::ObjectBackend)'s compiler command was refused when
    /// the backend was made: `word` is the word refused (empty when the command is), `why`
    /// says why (an input or output the backend names itself, an empty command, a compiler
    /// path that is not UTF-8 or holds white space).
    #[error("the object compiler command cannot use `{word}`: {why}")]
    ObjectCommand {
        /// The word refused.
        word: String,
        /// Why.
        why: String,
    },
    /// This system lacks what loading a program needs, whatever the program's bytes: `lacks`
    /// says what (no memory file and no usable work directory; `/proc` not mounted, so the
    /// loader cannot read a file by descriptor, and no file of the work directory can take
    /// its place; a work directory on a file system mounted `noexec`). Nothing was loaded;
    /// a saved program that meets it stays in the store
    /// ([`Backend::keeps_saved`](kernel_cache::Backend::keeps_saved)).
    #[error("cannot load a program here: {lacks}")]
    Environment {
        /// What the system lacks, said plainly.
        lacks: String,
    },
    /// A kernel's symbol is not a C identifier (`[A-Za-z_][A-Za-z0-9_]*`), or holds
    /// `__kcache_` (what the symbols the backend generates for a kernel hold: its entry
    /// `…__kcache_entry`, its exported function `…__kcache_kernel`).
    #[error("`{0}` is not a C identifier without `__kcache_`; it cannot name a kernel")]
    InvalidSymbol(String),
    /// Two kernels of one program have one symbol.
    #[error("two kernels of one program are named `{0}`")]
    DuplicateSymbol(String),
    /// A [`Signature`](crate::Signature) is malformed (see
    /// [`Signature::check`](crate::Signature::check)), or a saved program's table is.
    #[error("invalid kernel signature {0}")]
    InvalidSignature(String),
    /// The text of kernel `symbol` does not define a function of that name: the linked
    /// program's dynamic symbol table holds no definition of it (the text names its
    /// function otherwise, makes it `static` or hidden, or defines nothing). Checked on
    /// the object's bytes before it is loaded, so such a kernel is never answered by a
    /// function of the same name from another library (`getpid` from the C library for a
    /// kernel named `getpid`). Nothing was loaded.
    #[error("the text of kernel `{symbol}` does not define `{symbol}`")]
    UndefinedKernel {
        /// The kernel's symbol.
        symbol: String,
    },
    /// The compiled shared object could not be loaded (for example it references a
    /// function no loaded library defines). The display ends with the loader's message (such as
    /// `undefined symbol: name`): the file is removed with its program, so the message
    /// is all that is left to say why.
    #[error("could not load {}: {}", path.display(), error_chain(source))]
    Load {
        /// The shared object.
        path: PathBuf,
        /// The loader's error.
        #[source]
        source: libloading::Error,
    },
    /// The program holds no kernel of that name, or the loader does not find a kernel's
    /// symbol (or its generated entry) in the loaded program. (A text that does not
    /// define its kernel is [`CcError::UndefinedKernel`], found before loading.)
    #[error("kernel `{symbol}` is not defined in {path}")]
    MissingSymbol {
        /// The symbol looked up.
        symbol: String,
        /// The shared object.
        path: PathBuf,
        /// The loader's error, when the loader was asked.
        #[source]
        source: Option<libloading::Error>,
    },
    /// A call gave another number of arguments than the kernel has parameters.
    #[error("kernel `{symbol}` takes {expected} arguments, {given} given")]
    ArgCount {
        /// The kernel.
        symbol: String,
        /// Its parameter count.
        expected: usize,
        /// The argument count.
        given: usize,
    },
    /// An argument is not of its parameter's kind (buffer or scalar, element type,
    /// shared or exclusive).
    #[error("kernel `{symbol}`'s argument {index} must be {param}, given {given}")]
    ArgKind {
        /// The kernel.
        symbol: String,
        /// The argument's position.
        index: usize,
        /// The parameter, as declared.
        param: String,
        /// What was given.
        given: String,
    },
    /// A file the compile read besides the kernel's own unit (a header its `#include`s
    /// found) cannot be vouched for: at a save, it changed after the compile began or less
    /// than 2 s before (its inode's change time: any write, or a rename over it; or a
    /// symbolic link in its path was pointed elsewhere), is
    /// named by a relative path or cannot be read (the program is not saved); at a
    /// load of a saved program, its content is no longer what the compile read (the
    /// saved program is not loaded, so it is compiled again).
    #[error("a file the compile read, {}, cannot vouch for the program: {why}", path.display())]
    DependencyChanged {
        /// The file.
        path: PathBuf,
        /// What differs.
        why: String,
    },
    /// The include search cannot vouch for a saved program: at a load, a path an include
    /// search looks at before the directory a recorded header was found in resolves to
    /// something other than at the save (a header of the same name, or a directory on its
    /// way, appeared in an earlier include directory and would shadow the recorded one:
    /// the saved program is not loaded, the kernel is compiled again); at a save, such a
    /// path that exists changed after the compile began or less than 2 s before, an
    /// include directory is relative, or the compiler's search list (`-E -v`) could not
    /// be read (the program is not saved).
    #[error("the include search, at {}, cannot vouch for the program: {why}", path.display())]
    IncludeSearch {
        /// The path looked at (or the directory, or the compiler).
        path: PathBuf,
        /// What differs.
        why: String,
    },
    /// A program's options hold one that changes the compiler's dependency output (`-MMD`,
    /// `-MM`, `-MF`, `-Wp,-MD,...` and the like): the compiler may then leave headers out
    /// of the list of files the compile read (with `-MMD`, every system and `-isystem`
    /// header), so the program cannot vouch for what it was compiled from. It is used in
    /// this process but never saved (nor, if a store holds one, loaded).
    #[error(
        "the option `{option}` changes the compiler's list of the files it read: the program is not saved"
    )]
    DependencyOption {
        /// The option.
        option: String,
    },
    /// The compile may have read a file its dependency list does not name (`.incbin`,
    /// `.include`, `#embed`, `__has_include`, an option naming a file): the program is
    /// used but not saved, since no later load could see that file change.
    #[error("the compile may read a file its dependency list does not name ({what}{}): the program is not saved", path.as_ref().map(|p| format!(", in {}", p.display())).unwrap_or_default())]
    UnlistedInput {
        /// What reads it.
        what: String,
        /// The file holding it, when not the kernel's text or options.
        path: Option<std::path::PathBuf>,
    },
    /// A saved program was compiled with options that target the host processor
    /// (`-march=native` and the like) on a machine whose processor they expand to
    /// differently (another model or other features): its code may not run here, so it
    /// is not loaded (the kernels are compiled again).
    #[error("the saved program was compiled for another processor (options {options:?})")]
    OtherHost {
        /// The program's option list.
        options: Vec<String>,
    },
    /// A buffer is shorter than its parameter's extent at this call.
    #[error(
        "kernel `{symbol}`'s buffer {param} (argument {index}) needs at least {needed} elements, {given} given"
    )]
    BufferTooShort {
        /// The kernel.
        symbol: String,
        /// The argument's position.
        index: usize,
        /// The parameter's name.
        param: String,
        /// Its extent at this call.
        needed: usize,
        /// The buffer's length.
        given: usize,
    },
    /// A buffer's extent cannot be evaluated at this call (a negative scalar, or an
    /// overflowing product).
    #[error("kernel `{symbol}`'s buffer {param} has no extent at this call: {why}")]
    BadExtent {
        /// The kernel.
        symbol: String,
        /// The parameter's name.
        param: String,
        /// Why.
        why: String,
    },
}

/// How many lines of compiler diagnostics [`CcError::Compiler`] displays.
const SHOWN_LINES: usize = 12;

/// The first [`SHOWN_LINES`] lines of `text`, and how many more there are.
fn first_lines(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let mut shown = lines
        .iter()
        .take(SHOWN_LINES)
        .copied()
        .collect::<Vec<_>>()
        .join("\n");
    if lines.len() > SHOWN_LINES {
        shown.push_str(&format!("\n... ({} more lines)", lines.len() - SHOWN_LINES));
    }
    shown
}

/// An error and its sources, on one line (libloading's error says only `dlopen failed`;
/// the system's message, such as `undefined symbol: name`, is its source).
pub(crate) fn error_chain(error: &dyn std::error::Error) -> String {
    let mut message = error.to_string();
    let mut next = error.source();
    while let Some(e) = next {
        message.push_str(": ");
        message.push_str(&e.to_string());
        next = e.source();
    }
    message
}

impl CcError {
    /// [`CcError::Compiler`] for the finished process `output`, naming `symbols`.
    pub(crate) fn failed(output: &std::process::Output, symbols: Vec<String>) -> CcError {
        CcError::Compiler {
            status: output.status.to_string(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
            symbols,
        }
    }

    /// [`CcError::Io`] on `path`, for `map_err`.
    pub(crate) fn io(path: &std::path::Path) -> impl FnOnce(std::io::Error) -> CcError + use<> {
        let path = path.to_path_buf();
        move |source| CcError::Io { path, source }
    }
}
