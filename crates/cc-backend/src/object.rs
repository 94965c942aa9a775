//! The object backend: [`ObjectBackend`] compiles each kernel's C text with a caller-given
//! compiler command to an ELF relocatable object of its own (what tinygrad's CPU device
//! maps with its own loader), keyed canonically and kept in the kernel store.

use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use canonical_text::lexer::{TokenKind, tokenize};
use kernel_cache::{Backend, BatchKernel, Compiled, Group, Names, SavedProgram, Units};

use crate::error::CcError;
use crate::toolchain::{DEP_FILE, OBJECT_NAME, Toolchain, UNIT_NAME, targets_host};
use crate::workdir::WorkDir;
use crate::{deps, unlisted};

/// The format of an [`ObjectBackend`] program's saved bytes (a line of its identity): a
/// header line `kcache-object 1 <objects> <host>` (`<host>`: the hex digest of
/// [`Backend::host_part`] or `-`), then each object as its length (8 bytes, little
/// endian) and its bytes, in the order of the saved symbols.
pub const OBJECT_FORMAT: &str = "kcache-object 1";

/// What the object backend's identity says of how a compile depends on its keyed parts
/// only (programs compiled before this rule never meet those compiled under it).
const OBJECT_RULE: &str = "object: one kernel per object; the text as kernel.c alone in a fresh private directory (its working directory), compiled with <command> -c -MD -MF kernel.d -o kernel.o kernel.c; SOURCE_DATE_EPOCH=0; TZ=UTC0; TMPDIR, TMP and TEMP that directory; saved only when kernel.d names no file but kernel.c";

/// An ELF relocatable object compiled from one kernel's text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelObject {
    symbol: String,
    bytes: Vec<u8>,
    defines: Vec<String>,
}

impl KernelObject {
    /// The kernel's symbol (the name it was compiled under: a renamed twin answered from
    /// this object finds its code here, under this name).
    pub fn symbol(&self) -> &str {
        &self.symbol
    }

    /// The object file's bytes, exactly as compiled (or as the kernel store verified them).
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// The global symbols the object defines, as read from it, in its symbol table's order.
    pub fn defines(&self) -> &[String] {
        &self.defines
    }
}

/// An [`ObjectBackend`] program: one object per kernel of its group.
#[derive(Debug)]
pub struct ObjectProgram {
    objects: Vec<KernelObject>,
    /// Why it may not be saved (it read a file its key does not name), if so.
    unsaved: Option<(String, Option<PathBuf>)>,
}

impl ObjectProgram {
    /// The object of kernel `symbol`, if this program holds it.
    pub fn object(&self, symbol: &str) -> Option<&KernelObject> {
        self.objects.iter().find(|o| o.symbol == symbol)
    }

    /// Every object, in kernel order.
    pub fn objects(&self) -> &[KernelObject] {
        &self.objects
    }

    fn weight(&self) -> u64 {
        self.objects.iter().map(|o| o.bytes.len() as u64).sum()
    }
}

/// A kernel-cache backend that compiles each kernel's C text to an ELF relocatable object
/// with a compiler command its caller gives (tinygrad's `clang -c -x c -O2 -fPIC
/// -ffreestanding ... --target=x86_64-none-unknown-elf -march=native`), one object per
/// kernel, for callers that map objects with their own loader.
///
/// **The command.** `argv` is the compiler (`argv[0]`, found on the `PATH` when it names
/// no directory, run by the absolute path found) and its flags, without input or output:
/// the backend adds `-c -MD -MF kernel.d -o kernel.o kernel.c`. Refused when made
/// ([`CcError::ObjectCommand`]): an empty command, a word that is not a flag (an input
/// file, `-`; a word after `-x` is its language), an output or mode option (`-o`, `-E`,
/// `-S`), an option that changes the dependency list (`-MD` and the like: the backend
/// writes its own) or names a file the dependency list would not name (`@file`,
/// `-fprofile-use`, `-specs=`, ...; cc-backend's rule); a compiler not found is
/// [`CcError::Spawn`]. Every word is a part of every key
/// (the kernels' option list), in order.
///
/// **The identity** (in every key and the kernel store's name for the programs): the
/// compiler word as given, the path it was run by and that path resolved (links
/// followed), the first line of its `--version`, the settings of
/// [`COMPILER_INPUT_ENV`](crate::COMPILER_INPUT_ENV) when the backend was made (and every
/// compile gets them as they were then, as [`CcBackend`](crate::CcBackend)'s do), the
/// compile rule, the target architecture and OS and [`OBJECT_FORMAT`]. Options that target
/// the host processor (a word containing `native`) give the kernels a host part: the
/// digest of the driver's expansion of the command on this machine (`-E -###`, as
/// cc-backend's), also written in the saved bytes and checked at load
/// ([`CcError::OtherHost`]).
///
/// **Keys.** [`ObjectBackend::batch_kernel`] keys a text with
/// [`kernel_key`](kernel_cache::kernel_key) under default [`Names`]: a renderer's renamed
/// twin (tinygrad's `E_4` and `E_4n1`) shares its key where canonical-text finds the
/// own name's role sound, and is answered with the object compiled under the first name
/// (a loader that runs an object's start, as tinygrad's does, runs the same code).
///
/// **Isolation and reproducibility** are cc-backend's: the checked work directory
/// ([`ObjectBackend::with_work_dir`]), a fresh private directory per kernel holding
/// `kernel.c` (so `__FILE__` is the same everywhere), `SOURCE_DATE_EPOCH=0` and `TZ=UTC0`,
/// `TMPDIR`, `TMP` and `TEMP` that directory. Headers: a program whose compile read any
/// file besides its text (the compiler's `-MD` list), or whose text holds a construct
/// reading a file the list does not name (`#embed`, `.incbin`, `__has_include`), is used
/// in this process but never saved ([`CcError::UnlistedInput`]), so no saved object
/// depends on a file its key does not name. As cc-backend's, a compiler that ignores
/// `SOURCE_DATE_EPOCH` (clang before 16) expands `__DATE__` and `__TIME__` to the real
/// time: a text using them is answered with an object compiled at another time.
///
/// **The bytes handed out are the bytes verified.** A compiled object is read once from
/// its file; a loaded one is the kernel store's verified bytes, checked to be an ELF
/// object that defines its kernel's symbol.
#[derive(Debug)]
pub struct ObjectBackend {
    toolchain: Toolchain,
    /// The flags: `argv` after the compiler word.
    flags: Vec<String>,
    identity: String,
    work_dir: PathBuf,
    /// `work_dir` once checked; checked again until it passes.
    work: Mutex<Option<Arc<WorkDir>>>,
    /// The host part, once computed (`Some(None)`: the flags do not target the host).
    host: Mutex<Option<Option<[u8; 32]>>>,
    objects_compiled: AtomicU64,
}

/// Locks a mutex whose data stays consistent across a panic of its holder.
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn bad_command(word: &str, why: &str) -> CcError {
    CcError::ObjectCommand {
        word: word.to_string(),
        why: why.to_string(),
    }
}

/// Checks the flags of a command (see [`ObjectBackend`]).
fn check_flags(flags: &[String]) -> Result<(), CcError> {
    let mut after_x = false;
    for word in flags {
        if after_x {
            after_x = false;
            continue;
        }
        if word == "-x" {
            after_x = true;
        } else if !word.starts_with('-') || word == "-" {
            return Err(bad_command(
                word,
                "an input file: the backend gives the compiler the kernel's text",
            ));
        } else if word.starts_with("-o") {
            return Err(bad_command(
                word,
                "the backend names the object file itself",
            ));
        } else if word == "-E" || word == "-S" || word == "-###" {
            return Err(bad_command(word, "the backend compiles to an object (-c)"));
        }
    }
    if let Some(option) = crate::toolchain::dependency_option(flags) {
        return Err(CcError::DependencyOption {
            option: option.clone(),
        });
    }
    unlisted::in_options(flags)
}

/// The absolute path the program `word` runs as: `word` itself when it names a directory,
/// else the first executable file of that name in `path` (the `PATH`'s value).
fn find_program(word: &str, path: Option<OsString>) -> Result<PathBuf, CcError> {
    use std::os::unix::fs::PermissionsExt;
    let missing = |why: &str| CcError::Spawn {
        compiler: word.to_string(),
        source: std::io::Error::new(std::io::ErrorKind::NotFound, why.to_string()),
    };
    if word.contains('/') {
        return std::path::absolute(word).map_err(|_| missing("cannot be made absolute"));
    }
    let path = path.ok_or_else(|| missing("not found: PATH is not set"))?;
    std::env::split_paths(&path)
        .filter(|dir| dir.is_absolute())
        .map(|dir| dir.join(word))
        .find(|candidate| {
            std::fs::metadata(candidate)
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
        .ok_or_else(|| missing("not found in an absolute directory of the PATH"))
}

impl ObjectBackend {
    /// A backend compiling with `argv` (see [`ObjectBackend`]), in the system's temporary
    /// directory. Runs `<compiler> --version` once.
    ///
    /// ```
    /// use cc_backend::ObjectBackend;
    /// let argv = ["cc", "-O2", "-fPIC", "-x", "c"].map(String::from);
    /// let backend = ObjectBackend::new(&argv)?;
    /// assert!(backend.identity().contains("cc"));
    /// // An input file is refused: the backend gives the compiler the text.
    /// assert!(ObjectBackend::new(&["cc".to_string(), "-".to_string()]).is_err());
    /// # Ok::<(), cc_backend::CcError>(())
    /// ```
    pub fn new(argv: &[String]) -> Result<ObjectBackend, CcError> {
        Self::new_under(argv, |name| std::env::var_os(name))
    }

    fn new_under(
        argv: &[String],
        var: impl Fn(&str) -> Option<OsString>,
    ) -> Result<ObjectBackend, CcError> {
        let (program, flags) = argv
            .split_first()
            .ok_or_else(|| bad_command("", "the command is empty"))?;
        check_flags(flags)?;
        let found = find_program(program, var("PATH"))?;
        let found_text = found
            .to_str()
            .filter(|t| !t.chars().any(char::is_whitespace))
            .ok_or_else(|| bad_command(program, "its path is not UTF-8 or holds white space"))?
            .to_string();
        let resolved = std::fs::canonicalize(&found).map_err(|source| CcError::Spawn {
            compiler: program.clone(),
            source,
        })?;
        let toolchain = Toolchain::find(&found_text, var)?.with_base_flags(&[]);
        let mut identity = format!(
            "kcache object backend\ncompiler {program}\nrun as {found_text}\nresolved {}\n{}\n{OBJECT_RULE}",
            resolved.display(),
            toolchain.version(),
        );
        for (name, value) in toolchain.input_env() {
            if let Some(value) = value {
                identity.push_str(&format!("\nenv {name}={value:?}"));
            }
        }
        identity.push_str(&format!(
            "\ntarget {}-{}\n{OBJECT_FORMAT}",
            std::env::consts::ARCH,
            std::env::consts::OS,
        ));
        Ok(ObjectBackend {
            toolchain,
            flags: flags.to_vec(),
            identity,
            work_dir: std::env::temp_dir(),
            work: Mutex::default(),
            host: Mutex::default(),
            objects_compiled: AtomicU64::new(0),
        })
    }

    /// The same backend, compiling in fresh directories under `dir`, checked at the first
    /// compile as [`CcBackend::with_work_dir`](crate::CcBackend::with_work_dir) checks
    /// its own.
    pub fn with_work_dir(mut self, dir: impl Into<PathBuf>) -> ObjectBackend {
        self.work_dir = dir.into();
        self.work = Mutex::default();
        self
    }

    /// What identifies this backend's objects (see [`ObjectBackend`]); the string
    /// [`Backend::identity`] returns and every [`ObjectBackend::batch_kernel`] key holds.
    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// The flags of the command (`argv` after the compiler word): every kernel's option
    /// list.
    pub fn flags(&self) -> &[String] {
        &self.flags
    }

    /// Objects compiled so far (a compiler run per kernel, whether it succeeded or not;
    /// a load from the store is not one).
    pub fn objects_compiled(&self) -> u64 {
        self.objects_compiled.load(Ordering::Relaxed)
    }

    /// The batch kernel of `text` under the name `symbol`: keyed by
    /// [`kernel_key`](kernel_cache::kernel_key) with default [`Names`], the flags and the
    /// identity.
    pub fn batch_kernel(&self, symbol: &str, text: &str) -> BatchKernel<String> {
        BatchKernel::keyed(
            symbol,
            text.to_string(),
            &Names::default(),
            self.flags.clone(),
            self.identity.as_bytes(),
        )
    }

    fn work(&self) -> Result<Arc<WorkDir>, CcError> {
        let mut work = lock(&self.work);
        if let Some(checked) = &*work {
            return Ok(checked.clone());
        }
        let checked = Arc::new(WorkDir::check(&self.work_dir)?);
        *work = Some(checked.clone());
        Ok(checked)
    }

    /// The host part of this backend's flags (computed once).
    fn host(&self) -> Result<Option<[u8; 32]>, CcError> {
        if let Some(known) = *lock(&self.host) {
            return Ok(known);
        }
        let part = if targets_host(&self.flags) {
            let work = self.work()?;
            Some(self.toolchain.host_digest(&self.flags, work.path())?)
        } else {
            None
        };
        *lock(&self.host) = Some(part);
        Ok(part)
    }

    /// Compiles one kernel to its object: `Err` for a failure of the whole program (the
    /// compiler could not run, the work directory), `Ok(Err)` for the kernel's own.
    #[allow(clippy::type_complexity)]
    fn compile_one(
        &self,
        kernel: &BatchKernel<String>,
    ) -> Result<Result<(KernelObject, Option<(String, Option<PathBuf>)>), CcError>, CcError> {
        let work = self.work()?;
        let dir = tempfile::Builder::new()
            .prefix("kcache-object-")
            .tempdir_in(work.path())
            .map_err(CcError::io(work.path()))?;
        let unit = dir.path().join(UNIT_NAME);
        std::fs::write(&unit, &kernel.source).map_err(CcError::io(&unit))?;
        let started = SystemTime::now();
        self.objects_compiled.fetch_add(1, Ordering::Relaxed);
        let output = self.toolchain.run(
            self.toolchain
                .command(dir.path(), &self.flags)?
                .args(["-c", "-MD", "-MF", DEP_FILE, "-o", OBJECT_NAME, UNIT_NAME])
                .current_dir(dir.path()),
        )?;
        if !output.status.success() {
            return Ok(Err(CcError::failed(&output, vec![kernel.symbol.clone()])));
        }
        let object_path = dir.path().join(OBJECT_NAME);
        let bytes = std::fs::read(&object_path).map_err(CcError::io(&object_path))?;
        let object = match read_object(&kernel.symbol, bytes) {
            Ok(object) => object,
            Err(e) => return Ok(Err(e)),
        };
        let unsaved = match unlisted::in_text(kernel.source.as_bytes(), true) {
            Some(what) => Some((format!("`{what}` in the kernel's text"), None)),
            None => match deps::collect(&[dir.path().to_path_buf()], started) {
                Ok(read) => read.first().map(|dep| {
                    (
                        "a file besides the kernel's text (the object backend saves only \
                         kernels that read none)"
                            .to_string(),
                        Some(PathBuf::from(&dep.path)),
                    )
                }),
                Err(e) => Some((e.to_string(), None)),
            },
        };
        Ok(Ok((object, unsaved)))
    }

    fn compile(&self, group: &Group<'_, String>) -> Result<Units<ObjectProgram, CcError>, CcError> {
        let mut objects = Vec::new();
        let mut failed = Vec::new();
        let mut unsaved = None;
        for (position, kernel) in group.kernels.iter().enumerate() {
            match self.compile_one(kernel)? {
                Ok((object, why)) => {
                    objects.push(object);
                    unsaved = unsaved.or(why);
                }
                Err(e) => failed.push((position, e)),
            }
        }
        let program = (!objects.is_empty()).then(|| {
            let program = ObjectProgram { objects, unsaved };
            Compiled {
                weight: program.weight(),
                program,
            }
        });
        Ok(Units { program, failed })
    }
}

/// The object `bytes` of kernel `symbol`: parsed as an ELF relocatable object that defines
/// `symbol` as a global.
fn read_object(symbol: &str, bytes: Vec<u8>) -> Result<KernelObject, CcError> {
    use object::{Object as _, ObjectSymbol as _};
    let file = object::File::parse(&*bytes).map_err(|e| CcError::Unisolable {
        symbols: vec![symbol.to_string()],
        why: format!("its object does not parse as an object file: {e}"),
    })?;
    if file.format() != object::BinaryFormat::Elf || file.kind() != object::ObjectKind::Relocatable
    {
        return Err(CcError::Unisolable {
            symbols: vec![symbol.to_string()],
            why: "its object is not an ELF relocatable object".to_string(),
        });
    }
    let defines: Vec<String> = file
        .symbols()
        .filter(|s| s.is_definition() && s.is_global())
        .filter_map(|s| s.name().ok().map(str::to_string))
        .collect();
    if !defines.iter().any(|d| d == symbol) {
        return Err(CcError::UndefinedKernel {
            symbol: symbol.to_string(),
        });
    }
    Ok(KernelObject {
        symbol: symbol.to_string(),
        bytes,
        defines,
    })
}

/// The text's last function definition's name: an identifier at file scope followed by a
/// parenthesized list and `{` (a renderer's kernel is its text's last definition). `None`
/// when it has none.
///
/// ```
/// let text = "typedef float float4 __attribute__((ext_vector_type(4)));\n\
///             static float f(float x) { return x; }\n\
///             void E_4(float* restrict data0_4) { data0_4[0] = f(1.0f); }";
/// assert_eq!(cc_backend::defined_function(text).as_deref(), Some("E_4"));
/// assert_eq!(cc_backend::defined_function("int x;"), None);
/// ```
pub fn defined_function(text: &str) -> Option<String> {
    let src = text.as_bytes();
    let tokens: Vec<_> = tokenize(src)
        .into_iter()
        .filter(|t| {
            !matches!(
                t.kind,
                TokenKind::Whitespace
                    | TokenKind::LineComment
                    | TokenKind::BlockComment
                    | TokenKind::Preprocessor
            )
        })
        .collect();
    let mut depth = 0usize;
    let mut last = None;
    let mut i = 0;
    while i < tokens.len() {
        let t = &tokens[i];
        let bytes = t.bytes(src);
        match bytes {
            b"{" | b"(" | b"[" => depth += 1,
            b"}" | b")" | b"]" => depth = depth.saturating_sub(1),
            _ => {}
        }
        if depth == 0
            && t.kind == TokenKind::Ident
            && tokens.get(i + 1).is_some_and(|n| n.bytes(src) == b"(")
        {
            // Skip to the matching `)`.
            let mut j = i + 1;
            let mut inner = 0usize;
            while j < tokens.len() {
                match tokens[j].bytes(src) {
                    b"(" => inner += 1,
                    b")" => {
                        inner -= 1;
                        if inner == 0 {
                            break;
                        }
                    }
                    _ => {}
                }
                j += 1;
            }
            if tokens.get(j + 1).is_some_and(|n| n.bytes(src) == b"{") {
                last = Some(String::from_utf8_lossy(bytes).into_owned());
            }
        }
        i += 1;
    }
    last
}

impl Backend for ObjectBackend {
    type Source = String;
    type Program = ObjectProgram;
    type Error = CcError;

    fn compile_group(&self, group: &Group<'_, String>) -> Result<Compiled<ObjectProgram>, CcError> {
        let mut units = self.compile(group)?;
        if let Some((_, e)) = units.failed.drain(..).next() {
            return Err(e);
        }
        units
            .program
            .ok_or_else(|| bad_command("", "an empty group"))
    }

    fn compile_group_each(
        &self,
        group: &Group<'_, String>,
    ) -> Result<Units<ObjectProgram, CcError>, CcError> {
        self.compile(group)
    }

    fn compile_cost(&self, source: &String) -> u64 {
        source.len() as u64
    }

    fn identity(&self) -> Option<String> {
        Some(self.identity.clone())
    }

    fn host_part(&self, options: &[String]) -> Result<Option<[u8; 32]>, CcError> {
        if options != self.flags {
            // Kernels are keyed with this backend's flags: another list is not its own.
            return Err(bad_command(
                &options.join(" "),
                "not this backend's flags: a kernel must be made by its batch_kernel",
            ));
        }
        self.host()
    }

    fn save(&self, program: &ObjectProgram) -> Option<Result<SavedProgram, CcError>> {
        if let Some((what, path)) = &program.unsaved {
            return Some(Err(CcError::UnlistedInput {
                what: what.clone(),
                path: path.clone(),
            }));
        }
        let host = match self.host() {
            Ok(host) => host,
            Err(e) => return Some(Err(e)),
        };
        let host = host.map_or_else(|| "-".to_string(), hex_digest);
        let mut bytes = format!("{OBJECT_FORMAT} {} {host}\n", program.objects.len()).into_bytes();
        for object in &program.objects {
            bytes.extend_from_slice(&(object.bytes.len() as u64).to_le_bytes());
            bytes.extend_from_slice(&object.bytes);
        }
        Some(Ok(SavedProgram {
            bytes,
            symbols: program.objects.iter().map(|o| o.symbol.clone()).collect(),
        }))
    }

    fn load(&self, saved: &SavedProgram) -> Option<Result<Compiled<ObjectProgram>, CcError>> {
        Some(self.load_saved(saved))
    }

    fn keeps_saved(&self, error: &CcError) -> bool {
        // Another processor's object, or this moment's failure: it may load elsewhere or
        // later.
        matches!(
            error,
            CcError::OtherHost { .. }
                | CcError::Spawn { .. }
                | CcError::WorkDir { .. }
                | CcError::Io { .. }
        )
    }
}

fn hex_digest(digest: [u8; 32]) -> String {
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

impl ObjectBackend {
    fn load_saved(&self, saved: &SavedProgram) -> Result<Compiled<ObjectProgram>, CcError> {
        let malformed = |why: &str| CcError::Unisolable {
            symbols: saved.symbols.clone(),
            why: format!("its saved bytes are malformed: {why}"),
        };
        let newline = saved
            .bytes
            .iter()
            .position(|&b| b == b'\n')
            .ok_or_else(|| malformed("no header"))?;
        let header = std::str::from_utf8(&saved.bytes[..newline])
            .map_err(|_| malformed("header not UTF-8"))?;
        let rest = header
            .strip_prefix(OBJECT_FORMAT)
            .and_then(|r| r.strip_prefix(' '))
            .ok_or_else(|| malformed("another format"))?;
        let (count, host) = rest.split_once(' ').ok_or_else(|| malformed("header"))?;
        let count: usize = count.parse().map_err(|_| malformed("object count"))?;
        if count != saved.symbols.len() {
            return Err(malformed("object count differs from the symbols'"));
        }
        let here = self.host()?.map_or_else(|| "-".to_string(), hex_digest);
        if host != here {
            return Err(CcError::OtherHost {
                options: self.flags.clone(),
            });
        }
        let mut at = newline + 1;
        let mut objects = Vec::with_capacity(count);
        for symbol in &saved.symbols {
            let len_bytes: [u8; 8] = saved
                .bytes
                .get(at..at + 8)
                .and_then(|s| s.try_into().ok())
                .ok_or_else(|| malformed("truncated"))?;
            let len =
                usize::try_from(u64::from_le_bytes(len_bytes)).map_err(|_| malformed("length"))?;
            at += 8;
            let end = at.checked_add(len).ok_or_else(|| malformed("length"))?;
            let bytes = saved
                .bytes
                .get(at..end)
                .ok_or_else(|| malformed("truncated"))?
                .to_vec();
            at = end;
            objects.push(read_object(symbol, bytes)?);
        }
        if at != saved.bytes.len() {
            return Err(malformed("trailing bytes"));
        }
        let program = ObjectProgram {
            objects,
            unsaved: None,
        };
        Ok(Compiled {
            weight: program.weight(),
            program,
        })
    }
}
