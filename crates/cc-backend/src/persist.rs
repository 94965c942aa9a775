//! Programs that outlive the process: [`CcBackend`]'s persistence, as its
//! [`Backend`](kernel_cache::Backend) implementation calls it (the shared object's bytes,
//! with each kernel's symbol and signature).

use kernel_cache::{Compiled, SavedProgram};

use crate::backend::CcBackend;
use crate::deps::{self, Dep, Kind, Manifest, Witness};
use crate::error::CcError;
use crate::image::Image;
use crate::program::CcProgram;
use crate::signature::{Reader, Signature, check_symbol, put_str};
use crate::toolchain::{dependency_option, targets_host};
use crate::unlisted;

/// The version of the saved-program layout below; it is part of
/// [`CcBackend::identity`] (so of every key and of [`Backend::identity`](kernel_cache::Backend::identity)), so a program saved under another layout is never
/// loaded.
///
/// Layout of [`SavedProgram::bytes`]: the magic `kcache-cc-program\0`, a little-endian
/// `u32` kernel count, per kernel its symbol (`u32` length + UTF-8) and signature
/// (parameter count, then per parameter: tag 0 const buffer / 1 written buffer / 2
/// scalar, element code, name, and for buffers the extent's factor as `u64` and its
/// scalar names), then a `u32` count of the files the compile read besides its units
/// (the headers its `#include`s found) and per file its absolute path (`u32` length +
/// UTF-8) and the SHA-256 of its content (32 bytes), then a `u32` count of the include
/// search's witnesses and per witness its absolute path (`u32` length + UTF-8) and a byte
/// saying what it resolved to at the save (0 absent, 1 directory, 2 regular file, 3
/// anything else), then the program's option list (`u32`
/// count, each option as `u32` length + UTF-8) and, when an option targets the host
/// processor (`native`), a byte 1 and [`CcBackend`]'s host-target digest for that list
/// (32 bytes), else a byte 0, then the shared object's length (`u64`) and bytes, and
/// nothing after.
///
/// History (one line per bump, with the reason):
/// - 1: first layout.
/// - 2: the files the compile read, so a program is never loaded after a header it
///   included changed (the key covers the kernel's text, not what it includes).
/// - 3: the option list and, for `-march=native` and the like, what it meant on the
///   compiling machine, so such a program is never loaded on another processor.
/// - 4: the include search's witnesses, so a program is never loaded after a header of
///   the same name appeared in an include directory searched before the recorded one's.
pub const SAVED_FORMAT: &str = "cc-backend saved program 4";

const MAGIC: &[u8] = b"kcache-cc-program\0";

fn invalid(why: &str) -> CcError {
    CcError::InvalidSignature(format!("saved program: {why}"))
}

/// [`Backend`](kernel_cache::Backend)'s `save` and `load`, which `backend.rs`'s
/// implementation forwards to; its `identity` is [`CcBackend::identity`].
impl CcBackend {
    /// The saved form of `program` ([`SAVED_FORMAT`]'s layout), refused as [`CcBackend`]'s
    /// docs say ("What a key does not cover"): [`CcError::DependencyChanged`] (a header
    /// that changed, relative or unreadable), [`CcError::IncludeSearch`] (a path the search
    /// looked at changed, a relative include directory, a search list that does not
    /// parse), [`CcError::UnlistedInput`] (a file read but not listed) or
    /// [`CcError::DependencyOption`].
    pub(crate) fn save_program(&self, program: &CcProgram) -> Result<SavedProgram, CcError> {
        if let Some(option) = dependency_option(program.options()) {
            return Err(CcError::DependencyOption {
                option: option.clone(),
            });
        }
        unlisted::in_options(program.options())?;
        let (deps, witnesses) = program.vouch(|| self.search_dirs(program.options()))?;
        let object = program.bytes()?;
        let mut bytes = Vec::with_capacity(object.len() + 256);
        bytes.extend_from_slice(MAGIC);
        bytes.extend_from_slice(&(program.symbols().len() as u32).to_le_bytes());
        for (symbol, signature) in program.kernels() {
            put_str(&mut bytes, symbol);
            signature.encode(&mut bytes);
        }
        bytes.extend_from_slice(&(deps.len() as u32).to_le_bytes());
        for dep in &deps {
            put_str(&mut bytes, &dep.path);
            bytes.extend_from_slice(&dep.digest);
        }
        bytes.extend_from_slice(&(witnesses.len() as u32).to_le_bytes());
        for witness in &witnesses {
            put_str(&mut bytes, &witness.path);
            bytes.push(witness.kind as u8);
        }
        let options = program.options();
        bytes.extend_from_slice(&(options.len() as u32).to_le_bytes());
        for option in options {
            put_str(&mut bytes, option);
        }
        if targets_host(options) {
            bytes.push(1);
            bytes.extend_from_slice(&self.host_target(options)?);
        } else {
            bytes.push(0);
        }
        bytes.extend_from_slice(&(object.len() as u64).to_le_bytes());
        bytes.extend_from_slice(&object);
        Ok(SavedProgram {
            bytes,
            symbols: program.symbols().to_vec(),
        })
    }

    /// Checks that every file the compile read still holds what it held then
    /// ([`CcError::DependencyChanged`]), that the include search finds what it found
    /// ([`CcError::IncludeSearch`]) and that host-targeting options mean here what they
    /// meant there ([`CcError::OtherHost`]), then loads the shared object's bytes from an
    /// [`Image`] (the bytes run are exactly the bytes given), checking every kernel and
    /// entry symbol. It never compiles and never counts as a compile.
    ///
    /// `saved` is machine code that is run, trusted as a kernel's C text is: give it only
    /// bytes [`save`](kernel_cache::Backend::save) produced (as the kernel store does, which
    /// verifies a blob's digest and owner first). Other bytes are not checked to be a
    /// program this backend compiled, nor their signatures to fit their code.
    pub(crate) fn load_saved(&self, saved: &SavedProgram) -> Result<Compiled<CcProgram>, CcError> {
        let mut r = Reader {
            bytes: &saved.bytes,
        };
        if r.take(MAGIC.len()) != Some(MAGIC) {
            return Err(invalid("no magic"));
        }
        let n = r.u32().ok_or_else(|| invalid("truncated"))?;
        let mut kernels: Vec<(String, Signature)> = Vec::new();
        for _ in 0..n {
            let symbol = r.string().ok_or_else(|| invalid("truncated symbol"))?;
            check_symbol(&symbol)?;
            let signature = Signature::decode(&mut r).ok_or_else(|| invalid("bad signature"))?;
            kernels.push((symbol, signature));
        }
        let n_deps = r.u32().ok_or_else(|| invalid("truncated"))?;
        let mut deps: Vec<Dep> = Vec::new();
        for _ in 0..n_deps {
            let path = r.string().ok_or_else(|| invalid("truncated file name"))?;
            let digest = r
                .take(32)
                .and_then(|d| <[u8; 32]>::try_from(d).ok())
                .ok_or_else(|| invalid("truncated file digest"))?;
            deps.push(Dep { path, digest });
        }
        let n_witnesses = r.u32().ok_or_else(|| invalid("truncated"))?;
        let mut witnesses: Vec<Witness> = Vec::new();
        for _ in 0..n_witnesses {
            let path = r
                .string()
                .ok_or_else(|| invalid("truncated witness path"))?;
            let kind = r
                .take(1)
                .and_then(|b| Kind::from_byte(b[0]))
                .ok_or_else(|| invalid("bad witness kind"))?;
            witnesses.push(Witness { path, kind });
        }
        let n_options = r.u32().ok_or_else(|| invalid("truncated"))?;
        let mut options: Vec<String> = Vec::new();
        for _ in 0..n_options {
            options.push(r.string().ok_or_else(|| invalid("truncated option"))?);
        }
        let host = match r.take(1) {
            Some([0]) => None,
            Some([1]) => Some(
                r.take(32)
                    .and_then(|d| <[u8; 32]>::try_from(d).ok())
                    .ok_or_else(|| invalid("truncated host target"))?,
            ),
            _ => return Err(invalid("bad host target")),
        };
        if host.is_some() != targets_host(&options) {
            return Err(invalid("host target does not fit the options"));
        }
        let len = r
            .u64()
            .and_then(|l| usize::try_from(l).ok())
            .ok_or_else(|| invalid("truncated"))?;
        let object = r.take(len).ok_or_else(|| invalid("truncated object"))?;
        if !r.bytes.is_empty() {
            return Err(invalid("trailing bytes"));
        }
        if kernels.iter().map(|(s, _)| s).ne(saved.symbols.iter()) {
            return Err(invalid("symbol table differs from the saved kernels"));
        }
        // Never saved by this build; one saved before may lack headers in its list.
        if let Some(option) = dependency_option(&options) {
            return Err(CcError::DependencyOption {
                option: option.clone(),
            });
        }
        deps::verify(&deps)?;
        deps::verify_witnesses(&witnesses)?;
        if let Some(compiled_for) = host
            && self.host_target(&options)? != compiled_for
        {
            return Err(CcError::OtherHost { options });
        }
        // Linux: a sealed memory file, no work directory needed (unless the system makes
        // no memory file or has no `/proc`); elsewhere a new file of the checked work
        // directory, which the program keeps alive (a private subdirectory of a shared
        // one goes with its last holder).
        let mut work = None;
        let image = Image::new(object, || {
            let checked = self.work()?;
            let path = checked.path().to_path_buf();
            work = Some(checked);
            Ok(path)
        })?;
        let program = CcProgram::load(
            image,
            None,
            work,
            kernels,
            Manifest::Loaded(deps, witnesses),
            options,
        )?;
        Ok(Compiled {
            weight: program.size(),
            program,
        })
    }
}
