//! `kcache key`: the kernel-cache key of a kernel file, the same bytes as
//! `kernel_cache::kernel_key` on the same inputs.

use std::io::{self, Read, Write};
use std::path::Path;
use std::process::ExitCode;

use crate::report::Failure;

/// What `kernel_cache::kernel_key` takes, as given on the command line.
pub(crate) struct KeyInputs<'a> {
    /// The kernel's text: a file, or `-` for standard input.
    pub(crate) file: &'a Path,
    /// The kernel's own name (its symbol).
    pub(crate) symbol: &'a str,
    /// Which names the key may rename.
    pub(crate) names: &'a kernel_cache::Names,
    /// The compiler option list, in order.
    pub(crate) options: &'a [String],
    /// The backend identity given inline, if any.
    pub(crate) identity: Option<&'a str>,
    /// A file holding the backend identity's exact bytes, if any.
    pub(crate) identity_file: Option<&'a Path>,
}

/// The most bytes `canon` and `key` read of a kernel file or an identity file (or standard
/// input): a kernel's text is kilobytes; a larger input (`/dev/zero`, a wrong file) is refused
/// rather than read until memory runs out.
pub(crate) const MAX_INPUT_BYTES: u64 = 64 << 20;

/// Reads `path` (`-`: standard input) whole, up to [`MAX_INPUT_BYTES`].
pub(crate) fn read(path: &Path) -> Result<Vec<u8>, Failure> {
    let shown = || {
        if path == Path::new("-") {
            "standard input".to_string()
        } else {
            path.display().to_string()
        }
    };
    let mut bytes = Vec::new();
    let read = if path == Path::new("-") {
        io::Read::read_to_end(&mut io::stdin().take(MAX_INPUT_BYTES + 1), &mut bytes)
    } else {
        std::fs::File::open(path)
            .and_then(|f| io::Read::read_to_end(&mut f.take(MAX_INPUT_BYTES + 1), &mut bytes))
    };
    read.map_err(|e| format!("{}: {e}", shown()))?;
    if bytes.len() as u64 > MAX_INPUT_BYTES {
        return Err(format!(
            "{}: larger than the cap of {MAX_INPUT_BYTES} bytes",
            shown()
        )
        .into());
    }
    Ok(bytes)
}

/// Prints the key (64 hex digits, one line) to `out`; to `err`, a note per reason the key
/// depends on a spelling ([`canonical_text::Canonical::kept_names`]: refusals, the kernel's
/// own name kept as spelled, declared names kept, pinned names), or that the own name was
/// keyed by its role.
pub(crate) fn key(
    out: &mut impl Write,
    err: &mut impl Write,
    k: &KeyInputs<'_>,
) -> Result<ExitCode, Failure> {
    let text = String::from_utf8(read(k.file)?)
        .map_err(|_| format!("{}: not UTF-8 text", k.file.display()))?;
    let identity = match (k.identity, k.identity_file) {
        (Some(s), None) => s.as_bytes().to_vec(),
        (None, Some(path)) => read(path)?,
        (None, None) => Vec::new(),
        (Some(_), Some(_)) => {
            return Err("give the backend identity once: --identity or --identity-file".into());
        }
    };
    let key = kernel_cache::kernel_key(&text, k.symbol, k.names, k.options, &identity);
    writeln!(out, "{key}")?;
    let canonical = canonical_text::canonical_kernel(&text, Some(k.symbol), k.names);
    if canonical.kernel_name_by_role() && canonical.kernel_name_kept().is_none() {
        writeln!(
            err,
            "kcache key: note: kernel name `{}` keyed by its role (a twin spelled otherwise shares the key)",
            k.symbol
        )?;
    }
    for line in canonical.kept_names() {
        writeln!(err, "kcache key: note: {line}")?;
    }
    Ok(ExitCode::SUCCESS)
}
