//! The toolchain: the C compiler (and the assembler and linker it runs) and `objcopy`, as
//! processes the backend starts, each with its flags and its private temporaries
//! ([`TMP_ENV`]), and the lines of the backend's identity that name them.

use std::ffi::OsString;
use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};

use crate::error::CcError;

/// The flags every compile uses, ahead of the group's option list.
pub const BASE_FLAGS: &[&str] = &["-O2", "-shared", "-fPIC"];

/// The flags the link adds, after the group's option list (why: [`CcBackend`](crate::CcBackend)):
/// `-Wl,-Bsymbolic` binds a generated entry's call of its kernel to the object's own
/// definition, never to a same-named function of the process (`free`, `getpid`); Mach-O's
/// two-level namespace does so already. `-Wl,-z,defs` makes a reference nothing defines a
/// link error, where the kernel is told apart from its companions, never at the loader.
pub(crate) const LINK_FLAGS: &[&str] = if cfg!(target_vendor = "apple") {
    &[]
} else {
    &["-Wl,-Bsymbolic", "-Wl,-z,defs"]
};

/// The variables naming where a toolchain process writes its own temporaries (gcc's
/// assembly between `cc1` and `as`): every process gets all three set to a private
/// directory of the checked work directory (see [`CcBackend`](crate::CcBackend)).
pub(crate) const TMP_ENV: [&str; 3] = ["TMPDIR", "TMP", "TEMP"];

/// The file name of every translation unit, each in a directory of its own (the
/// compiler's working directory when it compiles that unit), so `__FILE__` is the same
/// whatever the directory and the symbol.
pub(crate) const UNIT_NAME: &str = "kernel.c";

/// The object file each unit compiles to, beside it.
pub(crate) const OBJECT_NAME: &str = "kernel.o";

/// The dependency file each unit's compile writes beside it (`-MD -MF`).
pub(crate) const DEP_FILE: &str = "kernel.d";

/// The directive ahead of every kernel text in a unit (its own or a merged one): the
/// text's first line is line 1 of `kernel.c`, so a compiler diagnostic's line number
/// (`kernel.c:3:12: error: ...` in [`CcError::Compiler`]) is the line of the kernel's
/// text, whatever the prelude and the generated lines before it, and `__LINE__` in a
/// text means the same line in every unit.
pub(crate) const TEXT_LINE: &str = "#line 1 \"kernel.c\"";

/// The environment the compiler runs in, besides the caller's: the time the predefined
/// macros `__DATE__` and `__TIME__` expand to (`SOURCE_DATE_EPOCH`, honoured by gcc 7 and
/// later and clang 16 and later) and the time zone `__TIMESTAMP__` is written in.
const COMPILER_ENV: [(&str, &str); 2] = [("SOURCE_DATE_EPOCH", "0"), ("TZ", "UTC0")];

/// The environment variables that decide which files the compiler reads (include
/// directories, where it finds its own programs, library directories), what it makes of
/// its command line (clang's `CCC_OVERRIDE_OPTIONS`, which edits it: `+-DX=1` adds a
/// definition) or what the GNU linker writes (`LD_RUN_PATH`, the run path a program
/// linked without `-rpath` records, which decides the libraries it loads; `LDEMULATION`
/// and `GNUTARGET`, its output format): snapshotted when
/// the backend is made, written into its identity and given to every compile as they
/// were then (so a different setting is a different identity, never a wrong hit).
pub const COMPILER_INPUT_ENV: [&str; 9] = [
    "CPATH",
    "C_INCLUDE_PATH",
    "GCC_EXEC_PREFIX",
    "COMPILER_PATH",
    "LIBRARY_PATH",
    "CCC_OVERRIDE_OPTIONS",
    "LD_RUN_PATH",
    "LDEMULATION",
    "GNUTARGET",
];

/// The variables of [`COMPILER_INPUT_ENV`] that add include directories ahead of the
/// system's (a `math.h` of the user's could be found there).
const INCLUDE_ENV: &[&str] = &[
    "CPATH",
    "C_INCLUDE_PATH",
    "GCC_EXEC_PREFIX",
    "COMPILER_PATH",
];

/// Whether an option list makes the compiler target the processor it runs on
/// (`-march=native`, `-mcpu=native`, `-mtune=native`): then the code depends on the
/// machine that compiled it, not only on the keyed parts.
pub(crate) fn targets_host(options: &[String]) -> bool {
    options.iter().any(|o| o.contains("native"))
}

/// The first option of a list that changes the compiler's dependency output
/// ([`CcError::DependencyOption`]): every `-M...`, `-Wp,...,-M...`, the long
/// `--...dependencies` forms and anything naming dependencies (`-Xclang -dependency-file`).
pub(crate) fn dependency_option(options: &[String]) -> Option<&String> {
    options.iter().find(|o| {
        o.starts_with("-M")
            || o.contains("dependenc")
            || (o.starts_with("-Wp,") && o.split(',').any(|part| part.starts_with("-M")))
    })
}

/// The first line of what `command --version` printed, if it ran.
fn first_version_line(command: &mut Command) -> std::io::Result<(bool, String)> {
    let output = command.arg("--version").output()?;
    let line = String::from_utf8_lossy(&output.stdout)
        .lines()
        .next()
        .unwrap_or("")
        .to_string();
    Ok((output.status.success(), line))
}

/// The backend's toolchain as found when the backend was made: the compiler command, the
/// first line of its `--version`, [`COMPILER_INPUT_ENV`] as it was then, and the `objcopy`
/// that localizes objects.
#[derive(Clone, Debug)]
pub(crate) struct Toolchain {
    /// The compiler: a program and its leading arguments.
    compiler: Vec<OsString>,
    /// The first line of the compiler's `--version`.
    version: String,
    /// [`COMPILER_INPUT_ENV`] as it was when the backend was made (`None`: unset).
    input_env: Vec<(&'static str, Option<OsString>)>,
    /// The `objcopy` that makes every symbol of a unit's object but its kernels' entries
    /// local and the first line of its `--version`: the first of `objcopy` and
    /// `llvm-objcopy` on the `PATH` that answers; `None` on Apple targets (whose objects
    /// are not ELF) or when neither answers (then every compile fails with
    /// [`CcError::Spawn`] naming `objcopy`).
    objcopy: Option<(OsString, String)>,
    /// The flags [`Toolchain::command`] puts ahead of the options: [`BASE_FLAGS`] for
    /// [`CcBackend`](crate::CcBackend), none for the object backend (its caller's command
    /// line is all its flags).
    base_flags: &'static [&'static str],
}

impl Toolchain {
    /// The toolchain of the compiler `command` (a program and its leading arguments,
    /// separated by white space), with [`COMPILER_INPUT_ENV`] read through `var`. Runs
    /// `<compiler> --version` once; errors with [`CcError::Spawn`] when it cannot be run.
    pub(crate) fn find(
        command: &str,
        var: impl Fn(&str) -> Option<OsString>,
    ) -> Result<Toolchain, CcError> {
        let compiler: Vec<OsString> = command.split_whitespace().map(OsString::from).collect();
        let spawn_error = |source| CcError::Spawn {
            compiler: command.to_string(),
            source,
        };
        let (program, args) = compiler
            .split_first()
            .ok_or_else(|| spawn_error(std::io::Error::other("empty compiler command")))?;
        let (_, version) =
            first_version_line(Command::new(program).args(args)).map_err(spawn_error)?;
        let objcopy = if cfg!(target_vendor = "apple") {
            None
        } else {
            ["objcopy", "llvm-objcopy"].into_iter().find_map(|name| {
                match first_version_line(&mut Command::new(name)) {
                    Ok((true, version)) => Some((OsString::from(name), version)),
                    _ => None,
                }
            })
        };
        Ok(Toolchain {
            input_env: COMPILER_INPUT_ENV
                .iter()
                .map(|&name| (name, var(name)))
                .collect(),
            compiler,
            version,
            objcopy,
            base_flags: BASE_FLAGS,
        })
    }

    /// The same toolchain, putting `flags` instead of [`BASE_FLAGS`] ahead of every
    /// command's options.
    pub(crate) fn with_base_flags(mut self, flags: &'static [&'static str]) -> Toolchain {
        self.base_flags = flags;
        self
    }

    /// What `options` make of this machine's processor: the SHA-256 of what `<compiler>
    /// <base flags> <options> -E -### -x c /dev/null` prints (the driver's expansion of
    /// `-march=native` to the processor's model and features), run in `/` (clang prints
    /// its working directory, which must not tell two machines of one processor apart),
    /// temporaries in `tmp`.
    pub(crate) fn host_digest(&self, options: &[String], tmp: &Path) -> Result<[u8; 32], CcError> {
        use sha2::{Digest, Sha256};
        let output = self.probe(options, &["-E", "-###"], &[], Path::new("/"), tmp)?;
        let mut hasher = Sha256::new();
        hasher.update(&output.stdout);
        hasher.update(&output.stderr);
        let mut digest = [0u8; 32];
        digest.copy_from_slice(&hasher.finalize());
        Ok(digest)
    }

    /// The first line of the compiler's `--version`.
    pub(crate) fn version(&self) -> &str {
        &self.version
    }

    /// The first line of the `objcopy`'s `--version`, if one was found.
    pub(crate) fn objcopy_version(&self) -> Option<&str> {
        self.objcopy.as_ref().map(|(_, version)| version.as_str())
    }

    /// [`COMPILER_INPUT_ENV`] as the toolchain found it.
    pub(crate) fn input_env(&self) -> &[(&'static str, Option<OsString>)] {
        &self.input_env
    }

    /// Whether a variable of [`INCLUDE_ENV`] was set.
    pub(crate) fn include_env_set(&self) -> bool {
        self.input_env
            .iter()
            .any(|(name, value)| value.is_some() && INCLUDE_ENV.contains(name))
    }

    /// The compiler command as one line, for messages.
    pub(crate) fn command_line(&self) -> String {
        self.compiler
            .iter()
            .map(|c| c.to_string_lossy())
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// The error of a compiler process that could not be started.
    pub(crate) fn spawn_error(&self, source: std::io::Error) -> CcError {
        CcError::Spawn {
            compiler: self.command_line(),
            source,
        }
    }

    /// The compiler command every compile, link and probe starts with: the command and its
    /// own arguments, [`COMPILER_INPUT_ENV`] as the toolchain found it, [`COMPILER_ENV`],
    /// [`TMP_ENV`] naming `tmp` (a private directory of the checked work directory) and
    /// the base flags ([`BASE_FLAGS`] unless [`Toolchain::with_base_flags`] said otherwise),
    /// then `options`.
    pub(crate) fn command(&self, tmp: &Path, options: &[String]) -> Result<Command, CcError> {
        let (program, program_args) = self
            .compiler
            .split_first()
            .ok_or_else(|| self.spawn_error(std::io::Error::other("empty compiler command")))?;
        let mut command = Command::new(program);
        for (name, value) in &self.input_env {
            match value {
                Some(value) => command.env(name, value),
                None => command.env_remove(name),
            };
        }
        command
            .args(program_args)
            .envs(COMPILER_ENV)
            .envs(TMP_ENV.map(|name| (name, tmp)))
            .args(self.base_flags)
            .args(options);
        Ok(command)
    }

    /// Runs `command` (made by [`Toolchain::command`]) to its end.
    pub(crate) fn run(&self, command: &mut Command) -> Result<Output, CcError> {
        command.output().map_err(|source| self.spawn_error(source))
    }

    /// Runs the compiler as a compile would (its environment, base flags, `options`,
    /// temporaries in `tmp`), with `args` then `-x c /dev/null` and the variables `env`, in
    /// `dir`; its output if it succeeded.
    pub(crate) fn probe(
        &self,
        options: &[String],
        args: &[&str],
        env: &[(&str, &str)],
        dir: &Path,
        tmp: &Path,
    ) -> Result<Output, CcError> {
        let output = self.run(
            self.command(tmp, options)?
                .envs(env.iter().copied())
                .args(args)
                .args(["-x", "c", "/dev/null"])
                .current_dir(dir),
        )?;
        if !output.status.success() {
            return Err(CcError::failed(&output, Vec::new()));
        }
        Ok(output)
    }

    /// Runs the compiler's preprocessor as a compile would, with `args` then `-x c -` and
    /// `input` on its standard input, in `/`, with `tmp` as its temporary directory: its
    /// standard output if it succeeded (the `-dM -E` and `-E -P` probes of a prelude).
    pub(crate) fn preprocess(
        &self,
        options: &[String],
        args: &[&str],
        input: &str,
        tmp: &Path,
    ) -> Option<Vec<u8>> {
        let mut child = self
            .command(tmp, options)
            .ok()?
            .args(args)
            .args(["-x", "c", "-"])
            .current_dir("/")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .ok()?;
        // A compiler that stops reading early fails below; a write error says no more.
        let written = child
            .stdin
            .take()
            .map(|mut stdin| stdin.write_all(input.as_bytes()));
        let output = child.wait_with_output().ok()?;
        (output.status.success() && matches!(written, Some(Ok(())))).then_some(output.stdout)
    }

    /// Runs `objcopy` with `args` on `object`, temporaries and working directory in `tmp`.
    pub(crate) fn objcopy(
        &self,
        args: &[String],
        object: &Path,
        tmp: &Path,
    ) -> Result<Output, CcError> {
        let objcopy = self
            .objcopy
            .as_ref()
            .map_or(std::ffi::OsStr::new("objcopy"), |(program, _)| program);
        Command::new(objcopy)
            .args(args)
            .arg(object)
            .envs(TMP_ENV.map(|name| (name, tmp)))
            .current_dir(tmp)
            .output()
            .map_err(|source| CcError::Spawn {
                compiler: objcopy.to_string_lossy().into_owned(),
                source,
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dependency_options_are_found() {
        let found = |options: &[&str]| {
            let options: Vec<String> = options.iter().map(|o| o.to_string()).collect();
            dependency_option(&options).cloned()
        };
        for option in [
            "-MMD",
            "-MM",
            "-M",
            "-MD",
            "-MF",
            "-MFx.d",
            "-MT",
            "-MP",
            "-MG",
            "-MQ",
            "-Wp,-MMD,x.d",
            "-Wp,-DX,-MD,x.d",
            "--user-dependencies",
            "--write-dependencies",
            "-dependency-file",
        ] {
            assert_eq!(
                found(&["-O3", option]),
                Some(option.to_string()),
                "{option}"
            );
        }
        assert_eq!(found(&["-Xpreprocessor", "-MMD"]), Some("-MMD".into()));
        assert_eq!(
            found(&["-march=native", "-mavx2", "-Wp,-DX=1", "-DM=2"]),
            None
        );
    }
}
