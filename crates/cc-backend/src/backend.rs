//! The backend: [`CcBackend`] writes each kernel of a program to a translation unit of
//! its own, compiles and links them into one shared object with the system C compiler,
//! and loads the result.

use std::collections::HashMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use kernel_cache::{Backend, BatchKernel, Compiled, Group, SavedProgram, Split, Units};

use crate::deps::{self, Manifest};
use crate::error::CcError;
use crate::image::Image;
use crate::persist::SAVED_FORMAT;
use crate::program::CcProgram;
use crate::signature::{RESERVED_INFIX, Signature, check_symbol, entry_symbol, exported_symbol};
use crate::source::Source;
use crate::toolchain::{
    BASE_FLAGS, DEP_FILE, LINK_FLAGS, OBJECT_NAME, Toolchain, UNIT_NAME, targets_host,
};
use crate::workdir::WorkDir;
use crate::{merge, observers};

/// What [`CcBackend`]'s identity says of how it makes a program depend on nothing but
/// its keyed parts (part of every key: programs compiled before this rule never meet
/// those compiled under it).
const REPRODUCIBLE: &str = "reproducible: each unit kernel.c in its own directory, dated 1970-01-01, the text after #line 1 \"kernel.c\"; SOURCE_DATE_EPOCH=0; TZ=UTC0";

/// What [`CcBackend`]'s identity says of the merged unit (see [`merge`](crate::merge)):
/// kernels that provably cannot affect each other share merged units, whose object
/// code may differ from their own units' (gcc may fold identical kernels into one), so
/// programs compiled under this rule never meet those compiled before it.
const MERGED: &str = "merged 2: kernels of a program with a standard-header prelude, plain options, a text whose words are allowed keywords, plain names, built-ins or macros expanding to those, and whose preprocessed tokens (cc -E) are one void definition calling only the prelude's functions and built-ins, declaring no function, with no directive, attribute or asm, share units kernel.c of at most 32 kernels, sizes as an even cut by count, balanced by text length (costliest first into the lightest unit with room; each unit in kernel order) (prototypes and entries, prelude, each text after #line 1); a failed merged compile falls back to one unit each";

/// The directory of a program's merged unit (not a C identifier: never a kernel's).
const MERGED_DIR: &str = ".merged";

/// One unit's compile and isolation (in [`CcBackend::run_compiler`]): given the unit's
/// directory and the positions of its kernels, `Some` error when the unit failed.
type UnitCompile<'a> = dyn Fn(&Path, &[usize]) -> Result<Option<CcError>, CcError> + Sync + 'a;

/// The directory of the unit the merge check preprocesses (not a C identifier).
const CHECK_DIR: &str = ".mergecheck";

/// What [`CcBackend`]'s identity says of link-level isolation and the compiler's
/// temporaries (programs compiled before this rule never meet those compiled under it).
const ISOLATED: &str = "isolated: every symbol of a unit's object but its kernels' entries made local by objcopy --keep-global-symbol before the link (-z defs); a kernel whose own link fails is reported alone; TMPDIR, TMP and TEMP of every toolchain process the program's private compile directory";

/// A kernel-cache backend that compiles C kernels with the system C compiler.
///
/// Each program is one shared object: every kernel is compiled by `cc -O2 -shared -fPIC
/// <options> -MD -MF kernel.d -c -o kernel.o kernel.c` in a directory of its own (the
/// compiler lists in `kernel.d` the headers it read), then the objects are
/// linked by `cc -O2 -shared -fPIC <options> -Wl,-Bsymbolic -Wl,-z,defs -o program.so
/// <objects> -lm` (`-Bsymbolic`: a kernel named like a function the process has, `free`,
/// is still the one its entry calls; `-z defs`: a reference nothing defines is a link
/// error; neither on Apple targets, whose linker binds so already), all in a
/// fresh directory of the work directory (removed when the program is dropped; the work
/// directory is checked first, see [`CcBackend::with_work_dir`]). The compiler is `$CC`
/// when set (split on white space: a command and its leading arguments), else `cc`.
///
/// **A kernel means the same whichever companions share its program.**
/// - Every kernel is its own translation unit (see [`Source`]), so no preprocessor state,
///   `static`, `#pragma` or declaration of one kernel reaches another. The one exception
///   keeps that promise: kernels that provably cannot affect each other (the `merge`
///   module's allow list, judged on the text's tokens, the compiler's macro table and its
///   own preprocessing of the text: a standard-header prelude, options that only change
///   code, one `void` definition calling only the prelude's functions and built-ins, no
///   directive, pragma, attribute, asm or declaration reaching file scope) share merged
///   units `kernel.c` (each in a directory of its own) of at most 32, compiled
///   concurrently; a merged unit that fails to compile or link falls back to one unit per
///   kernel.
/// - Before the link, `objcopy` renames each kernel's function to `<symbol>__kcache_kernel`
///   and makes every symbol of the object local but those and the entries
///   (`<symbol>__kcache_entry`): a function one text defines (a renderer's fast `expf`)
///   never serves a companion's call, and a call of a companion kernel by its symbol finds
///   nothing and fails the link. A unit that refers to a generated symbol it does not
///   define is refused ([`CcError::ReservedReference`]). Through the per-kernel resolves
///   a unit that does not link is told apart by linking each object alone: it fails alone
///   with the linker's diagnostics, and its companions are linked and returned. Likewise
///   a program that links but does not load (a unit's initial-exec thread-local storage
///   past the loader's static reserve, an executable stack a hardened loader refuses): the
///   per-kernel compile loads the program itself, and on a loader refusal
///   ([`CcError::Load`]) loads each object alone; one that does not load alone fails alone
///   and the others are linked again and loaded (a merged unit's, or a refusal no object
///   meets alone, fails the program).
/// - Every compiler, assembler, linker and `objcopy` process runs with `TMPDIR`, `TMP`
///   and `TEMP` naming the program's own fresh directory (private, in the checked work
///   directory), so nothing the toolchain writes between its steps (gcc's assembly
///   between `cc1` and `as`) is reachable by another user, whatever the process's own
///   `TMPDIR` is.
///
/// **The bytes run are the bytes compiled.** The linker's output is read once (opened
/// without following a link): what is loaded, weighed ([`CcProgram::size`]) and saved
/// ([`Backend::save`](kernel_cache::Backend::save)) is one sequence of
/// bytes, whatever happens to any file afterwards (see [`CcProgram`] for where it is held).
///
/// **Reproducible compiles.** The program depends on the keyed parts only, never on
/// where or when it was compiled: each unit is the file `kernel.c`, compiled in its own
/// directory (so `__FILE__` and `assert` messages are the same for every directory and
/// symbol), dated 1970-01-01 (`__TIMESTAMP__`), and the compiler runs with
/// `SOURCE_DATE_EPOCH=0` and `TZ=UTC0` (`__DATE__`, `__TIME__`). A
/// compiler that ignores `SOURCE_DATE_EPOCH` (gcc before 7, clang before 16) still
/// expands `__DATE__` and `__TIME__` to the real time: a kernel using them is then
/// answered with a program compiled at another time.
///
/// **What a key does not cover: the files the text includes.** A kernel's key covers
/// its prelude and text, not the content of the headers they `#include`. Where headers
/// are searched for is pinned by the options (in the key) and the variables of
/// [`COMPILER_INPUT_ENV`](crate::COMPILER_INPUT_ENV) (`CPATH` and the like), read once, when the backend is made,
/// written into its identity and given to every compile as they were then. The content
/// of the files found is checked by the kernel store only: a saved program records every
/// file its compile read (the compiler's `-MD` list: every header, system headers and
/// `-include` files too) by absolute path with its SHA-256 and is not loaded once one
/// differs or is gone (it is compiled again; see
/// [`Backend::load`](kernel_cache::Backend::load) below).
///
/// **Which header a search would find now.** A header of the same name created after the
/// save in an include directory searched before the recorded one's would shadow it. So a
/// save also asks the compiler for its include search list under the program's options
/// (`-E -v`, once per option list; directories it ignores as absent or not directories
/// count as searched first, since they may appear) and records, for every recorded header
/// lying under a search directory (every such directory, by path as written and resolved)
/// and every directory searched before that one, what the path the search looked at there
/// resolves to: the first absent component (`one/scale.h`, or `one/lib` for
/// `<lib/scale.h>`, or `one` itself), or what the path is when it exists. A load re-checks
/// each (a `stat`) and refuses on any difference ([`CcError::IncludeSearch`]; the kernel
/// is compiled again): a header, or a directory on its way, created in an earlier
/// directory is seen, `#include_next` included (every earlier directory is checked).
/// Other names in those directories, and files anywhere else, do not matter. A save
/// refuses when such a path that exists changed after the compile began or less than 2 s
/// before, when a search directory is relative (searched from each compile's own
/// directory: a relative `-I`, an empty `CPATH` element) or when the list does not parse.
///
/// What is still **not** seen: a header reached relative to the directory of the header
/// including it (`#include "x.h"` in `/p/sub/api.h` looks in `/p/sub` first), when that
/// directory is not an include directory: a same-named header created there later is not
/// looked for; a header whose absence a compile tested (`__has_include`, or a search that
/// found nothing and took another branch) is not recorded at all, so one created later
/// goes unseen. Nor are files the compiler reads without listing them:
/// those named by options, such as `@file` response files, `-specs=` files and
/// `-fprofile-use=` profiles, files the link reads (libraries named in the options) and
/// the compiler's own programs (a changed compiler is known by its `--version` line
/// only). A save refuses a header that changed during the compile (its inode's or a link's
/// change time in its path), but not one reached through a real directory (not a link)
/// renamed over a directory of its path during the compile. Add what such files hold, or
/// a version of it, to the options or the prelude when it may change. The in-memory cache
/// checks nothing: a process that edits a header while it runs must empty its cache (or
/// put a digest of the header in the prelude or options).
///
/// **Options that change the dependency list** (`-MMD` and the like) keep a program out of
/// the kernel store ([`CcError::DependencyOption`]). **Options that target the host
/// processor** (any option containing `native`) give the kernel a host part
/// ([`Backend::host_part`](kernel_cache::Backend::host_part)), so
/// machines of different processors sharing a store each save and load their own program
/// ([`CcError::OtherHost`]: a program reached under a name it does not fit is never run).
///
/// Its [`Split`] defaults to as many programs as the machine has cores, of at least 8
/// kernels each.
#[derive(Debug)]
pub struct CcBackend {
    toolchain: Toolchain,
    work_dir: PathBuf,
    /// `work_dir` once checked (see [`WorkDir::check`]); checked again until it passes.
    work: Mutex<Option<Arc<WorkDir>>>,
    split: Split,
    identity: String,
    programs_compiled: AtomicU64,
    kernels_compiled: AtomicU64,
    /// Translation units the compiler was run on (`cc -c`), whether they compiled or not.
    units_compiled: AtomicU64,
    /// Merged units the compiler was run on, whether they compiled or not.
    merged_compiled: AtomicU64,
    /// [`CcBackend::host_target`] per option list, once computed.
    host_targets: Mutex<HashMap<Vec<String>, [u8; 32]>>,
    /// [`CcBackend::search_dirs`] per option list, once computed.
    search_lists: Mutex<HashMap<Vec<String>, Arc<Vec<String>>>>,
    /// Held while [`CcBackend::search_dirs`] runs its probe, so that concurrent callers
    /// for one option list (the programs of a split resolve) run it once.
    search_probe: Mutex<()>,
    /// Include search probes run (`-E -v`), for tests.
    search_probes: AtomicU64,
}

/// Locks a mutex whose data (a memo of finished computations) stays consistent across a
/// panic of its holder.
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A program between its compile's prepare and finish steps: its
/// directory, with the translation units written (a merged kernel's own unit only if its
/// merged unit fails) and (after compile) the shared object built.
#[derive(Debug)]
pub(crate) struct PreparedProgram {
    dir: tempfile::TempDir,
    /// The checked work directory holding `dir`.
    work: Arc<WorkDir>,
    /// Each kernel's directory (holding its unit, [`UNIT_NAME`], once written), in kernel
    /// order; after the compile, the directories of the units linked (the merged ones
    /// first, if any).
    unit_dirs: Vec<PathBuf>,
    /// The unit text of each kernel whose own unit is not written yet (the merge
    /// candidates: written only if the kernel is not merged or its merged unit fails), in
    /// kernel order.
    pending: Vec<Option<String>>,
    /// The merge candidates ([`merge::candidates`](merge::candidates)): their
    /// positions and sources, in kernel order; the compile step checks what the compiler
    /// makes of them and cuts the merged units.
    candidates: Vec<(usize, Source)>,
    so_path: PathBuf,
    options: Vec<String>,
    kernels: Vec<(String, Signature)>,
    /// When the compile began (set by the compile step).
    started: Option<SystemTime>,
    /// The program, already loaded by a per-kernel compile (which loads before it reports,
    /// so that a kernel whose object does not load fails alone); `finish` returns it.
    loaded: Option<CcProgram>,
}

impl PreparedProgram {
    /// The merge candidates as `(symbol, source)`, indexed by candidate.
    fn candidate_sources(&self) -> Vec<(&str, &Source)> {
        let symbol = |m: usize| self.kernels[m].0.as_str();
        self.candidates
            .iter()
            .map(|(m, s)| (symbol(*m), s))
            .collect()
    }
}

impl CcBackend {
    /// A backend using `$CC` (or `cc`) and the system's temporary directory.
    ///
    /// Runs `<compiler> --version` once; errors with [`CcError::Spawn`] when the
    /// compiler cannot be run.
    pub fn new() -> Result<CcBackend, CcError> {
        let command = std::env::var("CC")
            .ok()
            .filter(|c| !c.trim().is_empty())
            .unwrap_or_else(|| "cc".to_string());
        Self::with_compiler(&command)
    }

    /// A backend using `command` (a program and its leading arguments, separated by
    /// white space) as the C compiler.
    pub fn with_compiler(command: &str) -> Result<CcBackend, CcError> {
        Self::with_compiler_under(command, |name| std::env::var_os(name))
    }

    /// [`CcBackend::with_compiler`] with [`COMPILER_INPUT_ENV`](crate::COMPILER_INPUT_ENV) read through `var` (the
    /// process's environment there; a test gives another, as a backend made before the
    /// process changed a variable would have seen).
    fn with_compiler_under(
        command: &str,
        var: impl Fn(&str) -> Option<OsString>,
    ) -> Result<CcBackend, CcError> {
        let toolchain = Toolchain::find(command, var)?;
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let mut identity = format!(
            "{command}\n{}\n{}\n{REPRODUCIBLE}\n{MERGED}\nlink {}\n{ISOLATED}",
            toolchain.version(),
            BASE_FLAGS.join(" "),
            LINK_FLAGS.join(" ")
        );
        if let Some(objcopy_version) = toolchain.objcopy_version() {
            identity.push_str(&format!("\nobjcopy {objcopy_version}"));
        }
        for (name, value) in toolchain.input_env() {
            if let Some(value) = value {
                identity.push_str(&format!("\nenv {name}={:?}", value));
            }
        }
        // What makes a saved program loadable: the same string is the key's part and the
        // kernel store's identity, so there is one identity to pass anywhere.
        identity.push_str(&format!(
            "\ntarget {}-{}\n{}",
            std::env::consts::ARCH,
            std::env::consts::OS,
            SAVED_FORMAT
        ));
        let work_dir = std::env::temp_dir();
        observers::register(&identity, &toolchain, &work_dir);
        Ok(CcBackend {
            toolchain,
            identity,
            work_dir,
            work: Mutex::default(),
            split: Split::new(cores, 8),
            programs_compiled: AtomicU64::new(0),
            host_targets: Mutex::default(),
            search_lists: Mutex::default(),
            search_probe: Mutex::default(),
            search_probes: AtomicU64::new(0),
            kernels_compiled: AtomicU64::new(0),
            units_compiled: AtomicU64::new(0),
            merged_compiled: AtomicU64::new(0),
        })
    }

    /// The same backend, cutting its compiles by `split`.
    pub fn with_split(mut self, split: Split) -> CcBackend {
        self.split = split;
        self
    }

    /// The same backend, compiling in fresh directories under `dir` (which must exist)
    /// instead of the system's temporary directory (`TMPDIR`, else `/tmp`).
    ///
    /// The work directory is checked at the first compile, as the kernel store's
    /// directory is: it and every directory above it must be owned by this process's user
    /// or root and not writable by the group or others unless sticky. A work directory of
    /// this user's that only it can write is used as it is; a sticky shared one (`/tmp`)
    /// gets a private subdirectory (mode 0700, fresh random name, checked after creation),
    /// removed when the backend and its programs are gone (a process killed before leaves
    /// it behind, as it leaves its compile directories). Anything else is refused: every
    /// compile fails with [`CcError::WorkDir`], saying which directory and why (a
    /// directory others can write without the sticky bit lets them rename what a compile
    /// writes and loads). A refused directory is checked again at the next compile.
    pub fn with_work_dir(mut self, dir: impl Into<PathBuf>) -> CcBackend {
        self.work_dir = dir.into();
        self.work = Mutex::default();
        observers::register(&self.identity, &self.toolchain, &self.work_dir);
        self
    }

    /// The checked work directory (see [`CcBackend::with_work_dir`]).
    pub(crate) fn work(&self) -> Result<Arc<WorkDir>, CcError> {
        let mut work = lock(&self.work);
        if let Some(checked) = &*work {
            return Ok(checked.clone());
        }
        let checked = Arc::new(WorkDir::check(&self.work_dir)?);
        *work = Some(checked.clone());
        Ok(checked)
    }

    /// What identifies this backend's output: the compiler command, the first line of
    /// its `--version`, the base flags, its reproducible-compile rule, its merged-unit
    /// rule, the link's own flags (`-Wl,-Bsymbolic -Wl,-z,defs` but on Apple targets), its
    /// isolation rule and the first line of its `objcopy`'s `--version`, the settings of
    /// [`COMPILER_INPUT_ENV`](crate::COMPILER_INPUT_ENV) it found (see [`CcBackend`]), the target architecture and
    /// OS, and [`SAVED_FORMAT`](crate::SAVED_FORMAT), one per line in that order. Put it
    /// in every key (see [`kernel_cache::kernel_key`]) so kernels compiled by another
    /// compiler never hit.
    ///
    /// It is also the identity the kernel store files programs under
    /// ([`Backend::identity`](kernel_cache::Backend::identity)
    /// returns the same string), so it is the one to give
    /// [`KernelStore::probe`](kernel_cache::store::KernelStore::probe).
    ///
    /// ```
    /// use cc_backend::{CcBackend, Elem, Extent, Signature, Source};
    /// use kernel_cache::store::KernelStore;
    /// use kernel_cache::{Backend, KernelCache, Names, Resolver};
    ///
    /// let dir = tempfile::tempdir()?;
    /// let backend = CcBackend::new()?;
    /// let store = KernelStore::new(dir.path().join("kernels"));
    /// let signature = Signature::new()
    ///     .buffer_mut("y", Elem::F32, Extent::of("n"))
    ///     .scalar("n", Elem::I32);
    /// let text = "void zero(float *y, int n) { for (int i = 0; i < n; ++i) y[i] = 0; }";
    /// let source = Source::new(text, signature);
    /// let batch = [source.batch_kernel("zero", &Names::new(), vec![], backend.identity())];
    /// Resolver::new(&KernelCache::new(1 << 20), &backend).store(&store).resolve_strict(&batch)?;
    /// // One identity: the key's part is the one the store files the program under.
    /// assert_eq!(Backend::identity(&backend).as_deref(), Some(backend.identity()));
    /// let saved = store.probe(backend.identity(), &batch[0].key);
    /// assert_eq!(saved.map(|(_, symbol)| symbol), Ok("zero".to_string()));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// The first line of the compiler's `--version` output as the backend found it when
    /// it was made (for example `cc (Debian 12.2.0-14) 12.2.0`; empty if the compiler
    /// printed nothing), the line [`identity`](CcBackend::identity) holds. For reports
    /// and logs; keys take the whole identity.
    ///
    /// ```
    /// let backend = cc_backend::CcBackend::new()?;
    /// assert!(backend.identity().lines().any(|l| l == backend.compiler_version()));
    /// # Ok::<(), cc_backend::CcError>(())
    /// ```
    pub fn compiler_version(&self) -> &str {
        self.toolchain.version()
    }

    /// Merged units (see [`CcBackend`]'s merged unit) this backend has run the compiler on
    /// so far, whether they compiled or not (a failed one is followed by one unit compile
    /// per kernel it held, counted by [`units_compiled`](CcBackend::units_compiled)).
    pub fn merged_compiles(&self) -> u64 {
        self.merged_compiled.load(Ordering::Relaxed)
    }

    /// Programs this backend has compiled (successfully or not) so far.
    pub fn programs_compiled(&self) -> u64 {
        self.programs_compiled.load(Ordering::Relaxed)
    }

    /// Kernels this backend has compiled so far (one per kernel of each program).
    pub fn kernels_compiled(&self) -> u64 {
        self.kernels_compiled.load(Ordering::Relaxed)
    }

    /// Translation units this backend has run the compiler on so far (`cc -c`, one per
    /// kernel unit actually compiled, whether it compiled or was refused; a strict compile
    /// stops at its first failing unit, so the units after it are not counted). Loading
    /// a saved program runs none.
    pub fn units_compiled(&self) -> u64 {
        self.units_compiled.load(Ordering::Relaxed)
    }

    /// Compiles `kernels` (`(symbol, source)` pairs) under `options` into one loaded
    /// program, without any cache. Symbols must be distinct.
    pub fn compile_program(
        &self,
        kernels: &[(&str, &Source)],
        options: &[String],
    ) -> Result<CcProgram, CcError> {
        let mut prepared = self.prepare_parts(kernels, options)?;
        self.run_compiler(&mut prepared, false)?;
        self.load(prepared)
    }

    fn prepare_parts(
        &self,
        kernels: &[(&str, &Source)],
        options: &[String],
    ) -> Result<PreparedProgram, CcError> {
        for (i, (symbol, source)) in kernels.iter().enumerate() {
            check_symbol(symbol)?;
            if kernels[..i].iter().any(|(s, _)| s == symbol) {
                return Err(CcError::DuplicateSymbol(symbol.to_string()));
            }
            source.signature.check()?;
        }
        let work = self.work()?;
        let dir = tempfile::Builder::new()
            .prefix("kcache-cc-")
            .tempdir_in(work.path())
            .map_err(CcError::io(work.path()))?;
        let include_env_set = self.toolchain.include_env_set();
        let members = merge::candidates(kernels, options, include_env_set, |prelude| {
            observers::learned(&self.identity, prelude, options).flatten()
        });
        let candidates = members.iter().map(|&m| (m, kernels[m].1.clone())).collect();
        let mut unit_dirs = Vec::with_capacity(kernels.len());
        let mut pending = Vec::with_capacity(kernels.len());
        for (position, (symbol, source)) in kernels.iter().enumerate() {
            // Symbols are C identifiers: safe, distinct directory names.
            let unit_dir = dir.path().join(symbol);
            let text = source.translation_unit(symbol);
            if members.contains(&position) {
                pending.push(Some(text));
            } else {
                write_unit(&unit_dir, &text)?;
                pending.push(None);
            }
            unit_dirs.push(unit_dir);
        }
        Ok(PreparedProgram {
            candidates,
            pending,
            so_path: dir.path().join("program.so"),
            dir,
            work,
            unit_dirs,
            options: options.to_vec(),
            kernels: kernels
                .iter()
                .map(|(s, source)| (s.to_string(), source.signature.clone()))
                .collect(),
            started: None,
            loaded: None,
        })
    }

    /// What the compiler makes of `options` on this machine: the SHA-256 of what `cc
    /// <base flags> <options> -E -### -x c /dev/null` prints (the commands it would
    /// run, with `-march=native` and the like expanded to this processor's model and
    /// features), run in `/`: clang prints its working directory there
    /// (`-fdebug-compilation-dir=`), which must not tell two machines of one processor
    /// apart. Computed once per option list.
    pub(crate) fn host_target(&self, options: &[String]) -> Result<[u8; 32], CcError> {
        if let Some(known) = lock(&self.host_targets).get(options) {
            return Ok(*known);
        }
        let work = self.work()?;
        let digest = self.toolchain.host_digest(options, work.path())?;
        lock(&self.host_targets).insert(options.to_vec(), digest);
        Ok(digest)
    }

    /// The include search list of a compile under `options`: the directories `cc <base
    /// flags> <options> -E -v -x c /dev/null` (in the C locale) says it searches, in order
    /// (quote directories, then bracket ones), after those it says it ignores (absent, or
    /// not directories: they may appear; see [`deps::parse_search_list`](crate::deps)).
    /// Run in `/`, never in the work directory, which is not checked here: a relative
    /// program prefix in the options (`-B./`) would have the compiler run programs found
    /// there (a relative search directory is refused at the save anyway). Computed once
    /// per option list: a caller that finds the probe running waits for its answer (an
    /// error is not kept: the next caller probes again).
    pub(crate) fn search_dirs(&self, options: &[String]) -> Result<Arc<Vec<String>>, CcError> {
        if let Some(known) = lock(&self.search_lists).get(options) {
            return Ok(known.clone());
        }
        let _probing = lock(&self.search_probe);
        if let Some(known) = lock(&self.search_lists).get(options) {
            return Ok(known.clone());
        }
        self.search_probes.fetch_add(1, Ordering::Relaxed);
        let work = self.work()?;
        let output = self.toolchain.probe(
            options,
            &["-E", "-v", "-o", "/dev/null"],
            &[("LC_ALL", "C"), ("LANGUAGE", "")],
            Path::new("/"),
            work.path(),
        )?;
        let refused = |why: &str| CcError::IncludeSearch {
            path: PathBuf::from(self.toolchain.command_line()),
            why: why.to_string(),
        };
        let text = String::from_utf8(output.stderr)
            .map_err(|_| refused("its include search list (`-E -v`) is not UTF-8"))?;
        let dirs = deps::parse_search_list(&text)
            .ok_or_else(|| refused("its include search list (`-E -v`) does not parse"))?;
        let dirs = Arc::new(dirs);
        lock(&self.search_lists).insert(options.to_vec(), dirs.clone());
        Ok(dirs)
    }

    /// Compiles `prepared`'s units and links them. The merge candidates that pass
    /// [`CcBackend::merge_check`] are compiled in merged units, concurrently (a failed one
    /// is no error: its kernels are compiled alone); every object is isolated
    /// ([`CcBackend::isolate`]) before the link. Strict (`each` false): the kernels' own
    /// units in kernel order, the first that fails (no later one compiled) or a failed link
    /// is the error. Per unit (`each` true): as [`CcBackend`]'s docs and
    /// [`compile_group_each`](Backend::compile_group_each) say; the failed units are returned
    /// (positions in kernel order) and removed from `prepared`. An `Err` is the whole
    /// program's failure.
    fn run_compiler(
        &self,
        prepared: &mut PreparedProgram,
        each: bool,
    ) -> Result<Vec<(usize, CcError)>, CcError> {
        self.programs_compiled.fetch_add(1, Ordering::Relaxed);
        self.kernels_compiled
            .fetch_add(prepared.kernels.len() as u64, Ordering::Relaxed);
        // Every toolchain process writes its temporaries in the program's own directory
        // (fresh, private, in the checked work directory).
        let tmp = prepared.dir.path().to_path_buf();
        let options = prepared.options.clone();
        let compiler = || self.toolchain.command(&tmp, &options);
        let failed = |output: std::process::Output, symbols| CcError::failed(&output, symbols);
        // Before the compiler reads anything: a file modified from here on may not be
        // what it read (see `deps`).
        let started = SystemTime::now();
        let kernel_symbols: Vec<String> = prepared
            .kernels
            .iter()
            .map(|(symbol, _)| symbol.clone())
            .collect();
        let program_dir = prepared.dir.path().to_path_buf();
        let so_path = prepared.so_path.clone();
        let symbols = |members: &[usize]| -> Vec<String> {
            members.iter().map(|&m| kernel_symbols[m].clone()).collect()
        };
        // One unit's compile, then its object's isolation: `Some` error when the unit
        // failed (its diagnostics name its kernels).
        let unit = |dir: &Path, members: &[usize]| -> Result<Option<CcError>, CcError> {
            let output = self.toolchain.run(
                compiler()?
                    .args(["-MD", "-MF", DEP_FILE, "-c", "-o", OBJECT_NAME, UNIT_NAME])
                    .current_dir(dir),
            )?;
            if !output.status.success() {
                return Ok(Some(failed(output, symbols(members))));
            }
            self.isolate(&dir.join(OBJECT_NAME), &symbols(members), &tmp)
        };
        // Which candidates merge: what the compiler's preprocessor makes of them.
        let members = self.merge_check(prepared, &compiler)?;
        let mut merged: Vec<(PathBuf, Vec<usize>)> = Vec::new();
        {
            let sources = prepared.candidate_sources();
            // `members` are positions in the program; `sources` is indexed by candidate.
            let index = |m: usize| {
                prepared
                    .candidates
                    .iter()
                    .position(|(c, _)| *c == m)
                    .unwrap_or(0)
            };
            let length = |m: usize| prepared.candidates[index(m)].1.text.len() as u64;
            for (n, group) in merge::merged_groups(&members, length)
                .into_iter()
                .enumerate()
            {
                let local: Vec<usize> = group.iter().map(|&m| index(m)).collect();
                let merged_dir = prepared.dir.path().join(format!("{MERGED_DIR}{n}"));
                write_unit(&merged_dir, &merge::merged_unit(&sources, &local))?;
                merged.push((merged_dir, group));
            }
        }
        // The merged units first, concurrently (each compile is a process of its own that
        // reads only its unit): when one compiles, its kernels need no unit of their own;
        // when it fails, each of its kernels is compiled alone (its own diagnostics, never
        // a program the merge made).
        let mut linked: Vec<(PathBuf, Vec<usize>)> = Vec::with_capacity(prepared.kernels.len());
        let mut alone: Vec<bool> = vec![true; prepared.kernels.len()];
        // Beside them, the include search list a save to a kernel store reads
        // (`search_dirs`: one `-E -v` probe per option list, kept), so a cold resolve does
        // not run it after the link. Its error is not reported here: the save asks again.
        let merged_outputs = std::thread::scope(|scope| {
            if !lock(&self.search_lists).contains_key(&options) {
                scope.spawn(|| {
                    let _ = self.search_dirs(&options);
                });
            }
            merge::concurrently(merged.len(), |n| {
                let output = unit(&merged[n].0, &merged[n].1);
                self.merged_compiled.fetch_add(1, Ordering::Relaxed);
                output
            })
        });
        for ((merged_dir, members), output) in merged.into_iter().zip(merged_outputs) {
            if output?.is_none() {
                for &m in &members {
                    alone[m] = false;
                }
                linked.push((merged_dir, members));
            }
        }
        let alone: Vec<usize> = (0..prepared.kernels.len()).filter(|&p| alone[p]).collect();
        let mut failures = Vec::new();
        self.compile_alone(prepared, &alone, each, &unit, &mut linked, &mut failures)?;
        // The link of the objects of `units` into `out`; per unit, a failure is told apart
        // by linking each object alone.
        let link = |units: &[(PathBuf, Vec<usize>)], out: &Path| {
            let objects = units.iter().map(|(d, _)| d.join(OBJECT_NAME));
            let mut command = compiler()?;
            command.args(LINK_FLAGS).arg("-o").arg(out).args(objects);
            self.toolchain
                .run(command.arg("-lm").current_dir(&program_dir))
        };
        loop {
            if linked.is_empty() {
                break;
            }
            let output = link(&linked, &so_path)?;
            if output.status.success() {
                break;
            }
            let everyone: Vec<String> = linked
                .iter()
                .flat_map(|(_, members)| members.iter().map(|&m| prepared.kernels[m].0.clone()))
                .collect();
            if !each {
                return Err(failed(output, everyone));
            }
            let alone_outputs = merge::concurrently(linked.len(), |n| {
                link(
                    &linked[n..=n],
                    &program_dir.join(format!("link-check-{n}.so")),
                )
            });
            let mut next = Vec::with_capacity(linked.len());
            let mut again = Vec::new();
            let failed_before = failures.len();
            for ((dir, members), alone_output) in linked.drain(..).zip(alone_outputs) {
                let alone_output = alone_output?;
                if alone_output.status.success() {
                    next.push((dir, members));
                } else if let [position] = members[..] {
                    // A kernel's own unit (a merged one holds at least two).
                    let symbol = prepared.kernels[position].0.clone();
                    failures.push((position, failed(alone_output, vec![symbol])));
                } else {
                    // A merged unit that does not link alone: its kernels, each alone.
                    again.extend(members);
                }
            }
            if again.is_empty() && failures.len() == failed_before {
                // Every object links alone, yet not together.
                return Err(failed(output, everyone));
            }
            linked = next;
            again.sort_unstable();
            self.compile_alone(prepared, &again, each, &unit, &mut linked, &mut failures)?;
        }
        // Per unit, the program is loaded here: a kernel whose object links but does not
        // load (initial-exec thread-local storage past the loader's static reserve, an
        // executable stack a hardened loader refuses) is told apart by loading each object
        // alone, and fails alone.
        let mut loaded = None;
        let mut round = 0;
        while each && !linked.is_empty() {
            round += 1;
            let held = |linked: &[(PathBuf, Vec<usize>)]| -> Vec<(String, Signature)> {
                held_positions(linked)
                    .into_iter()
                    .map(|p| prepared.kernels[p].clone())
                    .collect()
            };
            let unit_dirs: Vec<PathBuf> = linked.iter().map(|(d, _)| d.clone()).collect();
            let error = match self.load_file(prepared, &so_path, held(&linked), unit_dirs, started)
            {
                Ok(program) => {
                    loaded = Some(program);
                    break;
                }
                Err(error @ CcError::Load { .. }) => error,
                Err(other) => return Err(other),
            };
            let alone = merge::concurrently(linked.len(), |n| {
                let out = program_dir.join(format!("load-check-{round}-{n}.so"));
                let output = link(&linked[n..=n], &out)?;
                if !output.status.success() {
                    return Err(failed(output, symbols(&linked[n].1)));
                }
                let kernels = held(&linked[n..=n]);
                match self.load_file(prepared, &out, kernels, Vec::new(), started) {
                    Ok(_) => Ok(None),
                    Err(e @ CcError::Load { .. }) => Ok(Some(e)),
                    Err(other) => Err(other),
                }
            });
            let failed_before = failures.len();
            let mut next = Vec::with_capacity(linked.len());
            for ((dir, members), outcome) in linked.drain(..).zip(alone) {
                match (outcome?, &members[..]) {
                    (None, _) => next.push((dir, members)),
                    // A kernel's own unit that does not load alone fails alone.
                    (Some(e), [position]) => failures.push((*position, e)),
                    // A merged unit's kernels (allow-listed: no thread-local storage,
                    // attribute or asm) do not load alone: the whole program fails.
                    (Some(_), _) => return Err(error),
                }
            }
            if failures.len() == failed_before {
                // Every object loads alone, yet not together.
                return Err(error);
            }
            linked = next;
            if linked.is_empty() {
                break;
            }
            let output = link(&linked, &so_path)?;
            if !output.status.success() {
                return Err(failed(output, symbols(&held_positions(&linked))));
            }
        }
        prepared.loaded = loaded;
        // The directories of the units linked, merged ones first.
        prepared.unit_dirs = linked.iter().map(|(d, _)| d.clone()).collect();
        if !failures.is_empty() {
            failures.sort_by_key(|(p, _)| *p);
            if failures.len() == prepared.kernels.len() {
                return Ok(failures);
            }
            // Only the units that compiled and link are in the program: it holds exactly
            // them.
            let mut position = 0;
            prepared.kernels.retain(|_| {
                position += 1;
                !failures.iter().any(|(q, _)| *q == position - 1)
            });
        }
        prepared.started = Some(started);
        Ok(failures)
    }

    /// Compiles the own units of the kernels at `positions` (writing those not written
    /// yet) and adds those that compiled to `linked`. Per unit (`each`): concurrently,
    /// every failure added to `failures`; strict: in order, the first failure returned.
    fn compile_alone(
        &self,
        prepared: &mut PreparedProgram,
        positions: &[usize],
        each: bool,
        unit: &UnitCompile<'_>,
        linked: &mut Vec<(PathBuf, Vec<usize>)>,
        failures: &mut Vec<(usize, CcError)>,
    ) -> Result<(), CcError> {
        for &position in positions {
            if let Some(text) = prepared.pending[position].take() {
                write_unit(&prepared.unit_dirs[position], &text)?;
            }
        }
        if each {
            // Every unit is compiled once whatever the others do: concurrently.
            let outputs = merge::concurrently(positions.len(), |i| {
                let output = unit(&prepared.unit_dirs[positions[i]], &[positions[i]]);
                self.units_compiled.fetch_add(1, Ordering::Relaxed);
                output
            });
            for (&position, output) in positions.iter().zip(outputs) {
                match output? {
                    None => linked.push((prepared.unit_dirs[position].clone(), vec![position])),
                    Some(error) => failures.push((position, error)),
                }
            }
        } else {
            // Strict: in kernel order, no unit compiled after the first that fails.
            for &position in positions {
                let output = unit(&prepared.unit_dirs[position], &[position])?;
                self.units_compiled.fetch_add(1, Ordering::Relaxed);
                if let Some(error) = output {
                    return Err(error);
                }
                linked.push((prepared.unit_dirs[position].clone(), vec![position]));
            }
        }
        Ok(())
    }

    /// The merge candidates of `prepared` that pass the check on the compiler's own
    /// preprocessing (see [`merge`](crate::merge)): none when fewer than two are
    /// candidates, when fewer than two pass, or when the preprocessor fails.
    fn merge_check(
        &self,
        prepared: &PreparedProgram,
        compiler: &dyn Fn() -> Result<Command, CcError>,
    ) -> Result<Vec<usize>, CcError> {
        if prepared.candidates.len() < 2 {
            return Ok(Vec::new());
        }
        let sources = prepared.candidate_sources();
        let all: Vec<usize> = (0..sources.len()).collect();
        let check_dir = prepared.dir.path().join(CHECK_DIR);
        write_unit(&check_dir, &merge::check_unit(&sources, &all))?;
        let output = self
            .toolchain
            .run(compiler()?.args(["-E", UNIT_NAME]).current_dir(&check_dir))?;
        if !output.status.success() {
            return Ok(Vec::new());
        }
        let Some(facts) = observers::learned(
            &self.identity,
            &prepared.candidates[0].1.prelude,
            &prepared.options,
        )
        .flatten() else {
            return Ok(Vec::new());
        };
        let passed = merge::mergeable_after_expansion(&sources, &all, &output.stdout, &facts.merge);
        if passed.len() < 2 {
            return Ok(Vec::new());
        }
        Ok(passed.iter().map(|&i| prepared.candidates[i].0).collect())
    }

    /// Isolates the object of a unit holding kernels `symbols` from every other object of
    /// its program, before the link (why: [`CcBackend`]): refused as [`object_refusal`]
    /// says, else `objcopy` (temporaries in `tmp`) renames each kernel's function to its
    /// exported name ([`KERNEL_SUFFIX`](crate::signature::KERNEL_SUFFIX)) and makes every
    /// symbol local but those and the entries. `Some` error when the unit is refused;
    /// nothing is done on Apple targets.
    fn isolate(
        &self,
        object: &Path,
        symbols: &[String],
        tmp: &Path,
    ) -> Result<Option<CcError>, CcError> {
        if cfg!(target_vendor = "apple") {
            return Ok(None);
        }
        let bytes = std::fs::read(object).map_err(CcError::io(object))?;
        if let Some(refused) = object_refusal(&bytes, symbols) {
            return Ok(Some(refused));
        }
        let mut args = Vec::with_capacity(3 * symbols.len());
        for symbol in symbols {
            let exported = exported_symbol(symbol);
            args.push(format!("--redefine-sym={symbol}={exported}"));
            args.push(format!("--keep-global-symbol={exported}"));
            args.push(format!("--keep-global-symbol={}", entry_symbol(symbol)));
        }
        let output = self.toolchain.objcopy(&args, object, tmp)?;
        Ok((!output.status.success()).then(|| CcError::failed(&output, symbols.to_vec())))
    }

    /// Remembers a kernel's own failure when it is a property of its text, prelude and
    /// options under this identity, by an allow list (see `CcBackend`'s docs, "Remembered
    /// failures"): [`CcError::UndefinedKernel`], [`CcError::ReservedReference`], and a
    /// [`CcError::Compiler`] naming only this kernel, from a compiler that exited (not one
    /// killed by a signal) with an error on a line of the kernel's unit (`kernel.c:L:C:
    /// error:`) or a link's undefined reference, and none of the marks of a failing
    /// environment (a fatal error, an internal compiler error, a full disk, a killed
    /// program, a failed final link). And only for a kernel whose compile reads no file the
    /// user may change under the same key: a prelude of nothing but standard C headers, a
    /// text that neither includes nor embeds, options of the merge allow list (no `-I`,
    /// `-include` or file-naming option) and no include-path variable. Everything else,
    /// environmental or not (a compiler that could not be started, an I/O error, a refused
    /// work directory), is compiled again next time.
    fn remembers(
        &self,
        kernel: &kernel_cache::BatchKernel<Source>,
        error: &CcError,
    ) -> Option<String> {
        let source = &kernel.source;
        let reads_no_user_file = merge::prelude_mergeable(&source.prelude)
            && !source.text.contains("include")
            && !source.text.contains("embed")
            && merge::options_mergeable(&kernel.options)
            && !self.toolchain.include_env_set();
        if !reads_no_user_file {
            return None;
        }
        let own = match error {
            CcError::UndefinedKernel { symbol } => *symbol == kernel.symbol,
            CcError::ReservedReference { symbols, .. } => {
                symbols.as_slice() == std::slice::from_ref(&kernel.symbol)
            }
            CcError::Compiler {
                status,
                stderr,
                symbols,
            } => {
                symbols.as_slice() == std::slice::from_ref(&kernel.symbol)
                    && status.starts_with("exit status")
                    && text_diagnostics(stderr)
            }
            _ => false,
        };
        own.then(|| error.to_string())
    }

    /// Loads the shared object `path` of `prepared`'s compile (started at `started`) for
    /// `kernels`, whose units are in `unit_dirs` (what a save reads), as
    /// [`CcBackend::load`] does, without taking `prepared`'s directory (which
    /// its `finish` step hands the program).
    fn load_file(
        &self,
        prepared: &PreparedProgram,
        path: &Path,
        kernels: Vec<(String, Signature)>,
        unit_dirs: Vec<PathBuf>,
        started: SystemTime,
    ) -> Result<CcProgram, CcError> {
        let manifest = Manifest::Compiled { unit_dirs, started };
        let bytes = read_object(path)?;
        let work = prepared.work.path().to_path_buf();
        let image = Image::new(&bytes, || Ok(work))?;
        drop(bytes);
        CcProgram::load(
            image,
            None,
            Some(Arc::clone(&prepared.work)),
            kernels,
            manifest,
            prepared.options.clone(),
        )
    }

    /// Loads the linker's output: its bytes read once (see [`read_object`]) into an
    /// [`Image`], loaded from there, so the bytes run are the bytes weighed and saved.
    fn load(&self, prepared: PreparedProgram) -> Result<CcProgram, CcError> {
        // Never compiled: every file counts as modified since (nothing is saved).
        let started = prepared.started.unwrap_or(SystemTime::UNIX_EPOCH);
        let mut program = self.load_file(
            &prepared,
            &prepared.so_path,
            prepared.kernels.clone(),
            prepared.unit_dirs.clone(),
            started,
        )?;
        program.keep_dir(prepared.dir);
        Ok(program)
    }
}

/// Whether a compiler's or linker's diagnostics `stderr` say the kernel's own text failed,
/// by an allow list: an error on a line of the unit (`kernel.c:L:C: error:` or
/// `kernel.c:L: error:`, as gcc and clang print it) or an undefined reference at the link
/// (GNU ld's "undefined reference to", lld's "undefined symbol:"), and none of the marks
/// of a failure of the moment or the machine (a fatal error, such as a file that cannot be
/// written; an internal compiler error; a full disk; a killed program; a failed final
/// link; a resource exhausted).
fn text_diagnostics(stderr: &str) -> bool {
    const ENVIRONMENT: &[&str] = &[
        "fatal error",
        "internal compiler error",
        "No space left",
        "Killed",
        "killed",
        "final link failed",
        "out of memory",
        "Cannot allocate memory",
        "memory exhausted",
        "cannot open",
        "cannot find",
        "Resource temporarily unavailable",
        "Too many open files",
    ];
    let unit_error = stderr.lines().any(|line| {
        line.strip_prefix(UNIT_NAME)
            .and_then(|rest| rest.strip_prefix(':'))
            .is_some_and(|rest| {
                let position = rest
                    .split(": ")
                    .next()
                    .is_some_and(|p| p.split(':').all(|n| n.bytes().all(|b| b.is_ascii_digit())));
                position && rest.contains(": error: ")
            })
    });
    let undefined =
        stderr.contains("undefined reference to `") || stderr.contains("undefined symbol: ");
    (unit_error || undefined) && !ENVIRONMENT.iter().any(|mark| stderr.contains(mark))
}

/// The kernel positions of the units `linked`, in kernel order.
fn held_positions(linked: &[(PathBuf, Vec<usize>)]) -> Vec<usize> {
    let mut positions: Vec<usize> = linked.iter().flat_map(|(_, m)| m.iter().copied()).collect();
    positions.sort_unstable();
    positions
}

/// Writes `text` as the unit [`UNIT_NAME`] in the new directory `unit_dir`, dated
/// 1970-01-01.
fn write_unit(unit_dir: &Path, text: &str) -> Result<(), CcError> {
    std::fs::create_dir(unit_dir).map_err(CcError::io(unit_dir))?;
    let c_path = unit_dir.join(UNIT_NAME);
    std::fs::write(&c_path, text).map_err(CcError::io(&c_path))?;
    std::fs::File::options()
        .write(true)
        .open(&c_path)
        .and_then(|f| f.set_modified(std::time::SystemTime::UNIX_EPOCH))
        .map_err(CcError::io(&c_path))
}

/// Why the object `bytes` of a unit holding kernels `symbols` is refused before the link, or
/// `None`: a kernel it does not define as a global symbol (its text names its function
/// otherwise, makes it `static`, or defines nothing: [`CcError::UndefinedKernel`]); a
/// symbol it refers to without defining it whose name holds [`RESERVED_INFIX`]
/// ([`CcError::ReservedReference`]); a way the link would join it with its companions'
/// objects otherwise than by binding symbols, which [`CcBackend::isolate`] makes local
/// ([`CcError::Unisolable`]). For the last, the object must be an ELF relocatable whose every section has a name of the
/// toolchain's own (starting with `.`), none of the two such families the link joins
/// across objects, in no COMDAT group, with no common symbol. Each refusal is one way a
/// GNU or LLVM link joins objects:
///
/// - a section named as a C identifier is gathered over every object, and the link defines
///   `__start_<name>` / `__stop_<name>` over all of it (a kernel would read a companion's
///   entries);
/// - `.gnu.linkonce.*` sections and COMDAT groups of one name are kept once for the whole
///   link (a companion's would replace the kernel's);
/// - a common symbol is one object with every common symbol of its name (`-fcommon`, the
///   `common` attribute);
/// - link-time-optimization IR (`.gnu.lto_*` sections, or LLVM bitcode, which is not ELF)
///   is compiled at the link together with every companion's (`-flto`).
fn object_refusal(bytes: &[u8], symbols: &[String]) -> Option<CcError> {
    use object::{Object as _, ObjectComdat as _, ObjectSection as _, ObjectSymbol as _};
    let unisolable = |why: String| {
        Some(CcError::Unisolable {
            symbols: symbols.to_vec(),
            why,
        })
    };
    let Ok(file) = object::File::parse(bytes) else {
        return unisolable(
            "its object is not an ELF relocatable (LLVM bitcode under -flto?): the link \
             would compile it together with its companions"
                .to_string(),
        );
    };
    let defined: std::collections::HashSet<&str> = file
        .symbols()
        .filter(|s| s.is_definition() && s.is_global())
        .filter_map(|s| s.name().ok())
        .collect();
    if let Some(symbol) = symbols.iter().find(|s| !defined.contains(s.as_str())) {
        return Some(CcError::UndefinedKernel {
            symbol: symbol.clone(),
        });
    }
    let reserved = file
        .symbols()
        .filter(|s| s.is_undefined())
        .filter_map(|s| s.name().ok())
        .find(|name| name.contains(RESERVED_INFIX));
    if let Some(name) = reserved {
        return Some(CcError::ReservedReference {
            symbols: symbols.to_vec(),
            name: name.to_owned(),
        });
    }
    if file.format() != object::BinaryFormat::Elf {
        return unisolable("its object is not ELF".to_string());
    }
    for section in file.sections() {
        let name = section.name().unwrap_or("");
        if name.starts_with(".gnu.lto_") {
            return unisolable(format!(
                "its object holds link-time-optimization IR (`{name}`, -flto), which the link \
                 compiles together with its companions'"
            ));
        }
        if !name.starts_with('.') || name.starts_with(".gnu.linkonce") {
            return unisolable(format!(
                "it defines section `{name}`, which the link gathers or deduplicates across \
                 its companions' objects"
            ));
        }
    }
    if let Some(comdat) = file.comdats().next() {
        let name = comdat.name().unwrap_or("");
        return unisolable(format!(
            "its object holds a COMDAT group (`{name}`), which the link keeps once for all \
             its companions"
        ));
    }
    if let Some(common) = file.symbols().find(|s| s.is_common()) {
        let name = common.name().unwrap_or("");
        return unisolable(format!(
            "it defines `{name}` as a common symbol, which the link makes one object with \
             every companion's of that name (compile with -fno-common, the default, and \
             without the `common` attribute)"
        ));
    }
    None
}

/// The bytes of the linker's output `path` (in a fresh directory of the checked work
/// directory): opened without following a link, checked on the opened handle to be a
/// regular file of this user's, read once.
fn read_object(path: &Path) -> Result<Vec<u8>, CcError> {
    use rustix::fs::{Mode, OFlags};
    use std::io::Read;
    use std::os::unix::fs::MetadataExt;

    let io = |source: std::io::Error| CcError::Io {
        path: path.to_path_buf(),
        source,
    };
    let fd = rustix::fs::open(
        path,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NONBLOCK,
        Mode::empty(),
    )
    .map_err(|e| io(e.into()))?;
    let mut file = std::fs::File::from(fd);
    let meta = file.metadata().map_err(io)?;
    if !meta.is_file() || meta.uid() != rustix::process::geteuid().as_raw() {
        return Err(io(std::io::Error::other(
            "the linker's output is not a regular file of this user's",
        )));
    }
    let mut bytes = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
    file.read_to_end(&mut bytes).map_err(io)?;
    Ok(bytes)
}

impl Backend for CcBackend {
    type Source = Source;
    type Program = CcProgram;
    type Error = CcError;

    fn compile_group(&self, group: &Group<'_, Source>) -> Result<Compiled<CcProgram>, CcError> {
        let mut prepared = self.prepare(group)?;
        self.run_compiler(&mut prepared, false)?;
        self.finish(prepared)
    }

    /// Each kernel's unit is compiled once; a unit that fails is reported alone with its
    /// own diagnostics ([`CcError::Compiler`] naming that one kernel, or the loader's
    /// [`CcError::Load`] for a unit whose object links but does not load) and the others
    /// are linked and loaded into the program without it. A kernel whose symbol or signature is refused
    /// before any compile ([`CcError::InvalidSymbol`], [`CcError::InvalidSignature`],
    /// [`CcError::DuplicateSymbol`]) and a failed link fail the whole group.
    fn compile_group_each(
        &self,
        group: &Group<'_, Source>,
    ) -> Result<Units<CcProgram, CcError>, CcError> {
        let mut prepared = self.prepare(group)?;
        let failed = self.run_compiler(&mut prepared, true)?;
        let program = if failed.len() == group.kernels.len() {
            None
        } else {
            Some(self.finish(prepared)?)
        };
        Ok(Units { program, failed })
    }

    /// The length of the kernel's text (its prelude is compiled once per unit whatever
    /// the cut).
    fn compile_cost(&self, source: &Source) -> u64 {
        source.text.len() as u64
    }

    fn identity(&self) -> Option<String> {
        Some(CcBackend::identity(self).to_owned())
    }

    fn save(&self, program: &CcProgram) -> Option<Result<SavedProgram, CcError>> {
        Some(self.save_program(program))
    }

    fn load(&self, saved: &SavedProgram) -> Option<Result<Compiled<CcProgram>, CcError>> {
        Some(self.load_saved(saved))
    }

    /// For an option list that targets the host processor (`-march=native`, `-mcpu=native`,
    /// `-mtune=native`: any option containing `native`), the SHA-256 of what the compiler
    /// prints for it under `-E -###` here, run in `/` (its expansion to this processor's
    /// model and features: the digest a saved program records and `load` compares,
    /// computed once per option list); `None` for any other list. The store names such a kernel's entry by
    /// it, so machines of different processors sharing a store or farm each keep their own
    /// program. An error running the compiler is the error (the kernel is compiled
    /// without the store).
    fn host_part(&self, options: &[String]) -> Result<Option<[u8; 32]>, CcError> {
        if targets_host(options) {
            self.host_target(options).map(Some)
        } else {
            Ok(None)
        }
    }

    /// Keeps the saved program when the failure is this process's environment's, not the
    /// program's: an I/O error (making or writing the memory file, or the file of the work
    /// directory, the shared object is loaded from: no memory, a file-size limit, too many
    /// open files), a work directory refused ([`CcError::WorkDir`]), a system that lacks
    /// what loading needs ([`CcError::Environment`]: no `/proc` and no usable work
    /// directory, a `noexec` work directory); and for a program compiled for another
    /// processor ([`CcError::OtherHost`]: it still serves the machines it was compiled
    /// for, in a store several share). Every other load error (a header changed, the
    /// include search finds another header, malformed bytes, a loader refusal of a file
    /// it could read) removes it.
    fn keeps_saved(&self, error: &CcError) -> bool {
        matches!(
            error,
            CcError::Io { .. }
                | CcError::WorkDir { .. }
                | CcError::Environment { .. }
                | CcError::OtherHost { .. }
        )
    }

    fn remembered(&self, kernel: &BatchKernel<Source>, error: &CcError) -> Option<String> {
        self.remembers(kernel, error)
    }
}

/// The steps of a program's compile, which [`Backend`]'s methods run in turn.
impl CcBackend {
    /// How this backend's configuration cuts compiles ([`CcBackend::with_split`]): what
    /// a caller passes to its resolver's [`split`](kernel_cache::Resolver::split).
    pub fn split(&self) -> Split {
        self.split
    }

    fn prepare(&self, group: &Group<'_, Source>) -> Result<PreparedProgram, CcError> {
        let kernels: Vec<(&str, &Source)> = group
            .kernels
            .iter()
            .map(|k| (k.symbol.as_str(), &k.source))
            .collect();
        self.prepare_parts(&kernels, group.options)
    }

    fn finish(&self, mut prepared: PreparedProgram) -> Result<Compiled<CcProgram>, CcError> {
        let program = match prepared.loaded.take() {
            // Loaded by the per-kernel compile: it keeps the program's directory.
            Some(mut program) => {
                program.keep_dir(prepared.dir);
                program
            }
            None => self.load(prepared)?,
        };
        Ok(Compiled {
            weight: program.size(),
            program,
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// The diagnostics a failure is remembered for: the text's own errors and undefined
    /// references, never those of a failing environment.
    #[test]
    fn only_the_texts_own_diagnostics_are_remembered() {
        let own = [
            "kernel.c: In function 'k':\nkernel.c:3:12: error: expected ';' before '}' token",
            "kernel.c:7: error: unterminated comment",
            "/usr/bin/ld: kernel.o: in function `k':\nkernel.c:(.text+0x1d): undefined reference to `missing_fn'\ncollect2: error: ld returned 1 exit status",
            "ld.lld: error: undefined symbol: missing_fn",
        ];
        for stderr in own {
            assert!(text_diagnostics(stderr), "{stderr}");
        }
        let environment = [
            "",
            "cc1: error: cannot write kernel.o",
            "kernel.c:1:10: fatal error: scale.h: No such file or directory",
            "kernel.c:3:1: error: x\nkernel.c: fatal error: error writing to /tmp/ccx.s: No space left on device",
            "gcc: internal compiler error: Killed (program cc1)",
            "kernel.c:3:1: error: x\n/usr/bin/ld: final link failed: No space left on device",
            "{standard input}: Assembler messages:\n{standard input}:9: Error: can't write kernel.o",
            "kernel.cc:3:1: error: other unit",
            "/usr/bin/ld: cannot find -lfoo",
        ];
        for stderr in environment {
            assert!(!text_diagnostics(stderr), "{stderr}");
        }
    }

    /// The include-search probe of a save runs nothing another user put in the work
    /// directory: with `-B./` in the options, gcc runs `./cc1` from its working directory.
    #[test]
    fn the_include_search_probe_runs_no_program_of_the_work_directory() {
        use std::os::unix::fs::PermissionsExt;
        let work = tempfile::tempdir().unwrap();
        let marker = work.path().join("ran");
        let cc1 = work.path().join("cc1");
        std::fs::write(
            &cc1,
            format!("#!/bin/sh\ntouch '{}'\nexit 1\n", marker.display()),
        )
        .unwrap();
        std::fs::set_permissions(&cc1, std::fs::Permissions::from_mode(0o755)).unwrap();
        let backend = CcBackend::new().unwrap().with_work_dir(work.path());
        let _ = backend.search_dirs(&["-B./".to_string()]);
        assert!(!marker.exists(), "the probe ran the work directory's cc1");
    }

    /// Concurrent callers for one option list (the programs of a split resolve, each
    /// asking beside its compile) run the include search probe once and get one answer;
    /// another option list is probed on its own.
    #[test]
    fn concurrent_include_search_callers_probe_once() {
        let backend = CcBackend::new().unwrap();
        let options = vec!["-O2".to_string()];
        let start = std::sync::Barrier::new(4);
        let lists: Vec<Arc<Vec<String>>> = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..4)
                .map(|_| {
                    scope.spawn(|| {
                        start.wait();
                        backend.search_dirs(&options).unwrap()
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert_eq!(backend.search_probes.load(Ordering::Relaxed), 1);
        assert!(lists.iter().all(|l| Arc::ptr_eq(l, &lists[0])));
        assert!(!lists[0].is_empty(), "the compiler searches some directory");
        backend.search_dirs(&["-O1".to_string()]).unwrap();
        assert_eq!(backend.search_probes.load(Ordering::Relaxed), 2);
    }

    /// `COMPILER_INPUT_ENV` is read once, when the backend is made, and every compile gets
    /// the values read then: a backend made while `CPATH` named `one` (its `scale.h`:
    /// `SCALE 1`) compiles with `one` after the process's `CPATH` names `two` (`SCALE 2`),
    /// and its identity still names `one`; one made while `CPATH` was unset compiles without
    /// it. Safe Rust cannot change a running process's
    /// environment (`set_var` is `unsafe`), so the child runs under `CPATH=two` from its
    /// start and the backend is made as that environment read before the change would
    /// have been (`with_compiler_under`, `CPATH=one`).
    /// `LD_RUN_PATH` changes the program the link writes (its run path, which decides the
    /// libraries it loads): a backend made under it names it in its identity and links with
    /// it; one made without it does neither.
    #[test]
    fn the_linkers_run_path_variable_is_in_the_identity_and_the_program() {
        let command = std::env::var("CC")
            .ok()
            .filter(|c| !c.trim().is_empty())
            .unwrap_or_else(|| "cc".to_string());
        let run_path = "/kcache-test-run-path";
        let source = Source::new(
            test_support::kernels::elementwise_kernel("k", "a[i] + b[i]"),
            crate::Signature::out_a_b_n(),
        );
        let program_bytes = |b: &CcBackend| {
            let program = b.compile_program(&[("k", &source)], &[]).expect("compile");
            program.bytes().expect("the shared object's bytes")
        };
        let holds = |bytes: &[u8]| {
            bytes
                .windows(run_path.len())
                .any(|w| w == run_path.as_bytes())
        };
        let with = CcBackend::with_compiler_under(&command, |name| {
            if name == "LD_RUN_PATH" {
                Some(OsString::from(run_path))
            } else {
                (name != "LD_RUN_PATH")
                    .then(|| std::env::var_os(name))
                    .flatten()
            }
        })
        .expect("a C compiler is installed");
        assert!(
            with.identity()
                .contains(&format!("env LD_RUN_PATH={:?}", OsString::from(run_path))),
            "{}",
            with.identity()
        );
        assert!(holds(&program_bytes(&with)), "the link ignored LD_RUN_PATH");
        let without = CcBackend::with_compiler_under(&command, |name| {
            (name != "LD_RUN_PATH")
                .then(|| std::env::var_os(name))
                .flatten()
        })
        .expect("a C compiler is installed");
        assert!(!without.identity().contains("LD_RUN_PATH"));
        assert!(!holds(&program_bytes(&without)));
    }

    #[test]
    fn compiles_get_the_input_variables_read_when_the_backend_was_made() {
        const CHILD: &str = "CC_BACKEND_SNAPSHOT_ONE";
        let Ok(one) = std::env::var(CHILD) else {
            let tmp = tempfile::tempdir().expect("tmp");
            let include = |name: &str, v: u32| {
                let d = tmp.path().join(name);
                std::fs::create_dir(&d).expect("mkdir");
                std::fs::write(d.join("scale.h"), format!("#define SCALE {v}\n")).expect("write");
                d
            };
            let (one, two) = (include("one", 1), include("two", 2));
            let out = Command::new(std::env::current_exe().expect("test binary"))
                .args([
                    "--exact",
                    "backend::tests::compiles_get_the_input_variables_read_when_the_backend_was_made",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env(CHILD, &one)
                .env("CPATH", &two)
                .output()
                .expect("run the child");
            let stdout = String::from_utf8_lossy(&out.stdout);
            assert!(
                out.status.success(),
                "{stdout}{}",
                String::from_utf8_lossy(&out.stderr)
            );
            assert!(stdout.contains("CHILD out=1"), "{stdout}");
            return;
        };
        let two = std::env::var_os("CPATH").expect("the child runs under CPATH=two");
        let command = std::env::var("CC")
            .ok()
            .filter(|c| !c.trim().is_empty())
            .unwrap_or_else(|| "cc".to_string());
        let b = CcBackend::with_compiler_under(&command, |name| {
            if name == "CPATH" {
                Some(OsString::from(&one))
            } else {
                std::env::var_os(name)
            }
        })
        .expect("a C compiler is installed");
        let identity = b.identity().to_string();
        assert!(
            identity.contains(&format!("env CPATH={:?}", OsString::from(&one))),
            "{identity}"
        );
        assert!(!identity.contains(&format!("{two:?}")), "{identity}");
        let source = Source::new(
            test_support::kernels::elementwise_kernel("k", "a[i] * SCALE"),
            crate::Signature::out_a_b_n(),
        )
        .with_prelude("#include \"scale.h\"\n");
        let program = Arc::new(b.compile_program(&[("k", &source)], &[]).expect("compile"));
        let mut out = [0.0f32];
        program
            .kernel("k")
            .expect("kernel")
            .call(&mut [
                crate::Arg::F32Mut(&mut out),
                crate::Arg::F32(&[1.0]),
                crate::Arg::F32(&[0.0]),
                crate::Arg::I32Scalar(1),
            ])
            .expect("call");
        assert_eq!(b.identity(), identity);
        // Made while `CPATH` was unset: compiles run without it (no `scale.h` is found).
        let unset = CcBackend::with_compiler_under(&command, |name| {
            (name != "CPATH").then(|| std::env::var_os(name)).flatten()
        })
        .expect("a C compiler is installed");
        assert!(
            !unset.identity().contains("env CPATH"),
            "{}",
            unset.identity()
        );
        let missing = unset.compile_program(&[("k", &source)], &[]);
        assert!(
            matches!(&missing, Err(e) if e.to_string().contains("scale.h")),
            "{missing:?}"
        );
        println!("CHILD out={}", out[0]);
    }
}
