//! Inputs of a compile that the compiler's dependency list (`-MD`) does not name: a
//! program that may have read one is never saved, since no later load could see it
//! change (issue 26, class 4).
//!
//! * In the translation unit and every file the list names: the assembler's `.incbin`
//!   (a file's bytes into the object) and `.include` (an assembler source), reached
//!   through `asm` strings; C23's `#embed` (and `%:embed`) and `__has_embed`.
//! * In the translation unit: `__has_include` and `__has_include_next`, which ask whether
//!   a file exists (a file created later changes the answer; the list names only what
//!   was found). In system headers they are left alone: clang's own `<stdint.h>` asks
//!   `__has_include_next(<stdint.h>)` of the C library's, which the list names.
//! * In the options: a response file (`@file`), profile, sample-profile, spec, plugin and
//!   sanitizer list files, `--embed-dir`, and assembler options (`-Wa,`, `-Xassembler`:
//!   `-I` there is where `.include` searches).

use std::path::{Path, PathBuf};

use crate::error::CcError;
use crate::toolchain::UNIT_NAME;

/// Options whose files the dependency list never names.
const OPTION_PREFIXES: &[&str] = &[
    "@",
    "-fprofile-use",
    "-fprofile-instr-use",
    "-fprofile-sample-use",
    "-fauto-profile",
    "-specs",
    "--specs",
    "-fplugin",
    "-fsanitize-blacklist",
    "-fsanitize-ignorelist",
    "--embed-dir",
    "-embed-dir",
    "-Wa,",
    "-Xassembler",
];

fn refused(what: impl Into<String>, path: Option<&Path>) -> CcError {
    CcError::UnlistedInput {
        what: what.into(),
        path: path.map(Path::to_path_buf),
    }
}

/// The first option that makes the compile read a file its dependency list does not name.
pub(crate) fn in_options(options: &[String]) -> Result<(), CcError> {
    match options
        .iter()
        .find(|o| OPTION_PREFIXES.iter().any(|p| o.starts_with(p)))
    {
        Some(o) => Err(refused(format!("the option `{o}`"), None)),
        None => Ok(()),
    }
}

/// Whether `text` holds a construct that reads a file the dependency list does not
/// name: `.incbin`, `.include`, `#embed`, `__has_embed`, and (`unit`: the translation
/// unit itself) `__has_include`. Over-finding (in a comment) only keeps a program unsaved.
pub(crate) fn in_text(text: &[u8], unit: bool) -> Option<&'static str> {
    let find = |needle: &[u8]| text.windows(needle.len()).position(|w| w == needle);
    for what in [".incbin", ".include", "__has_embed"] {
        if find(what.as_bytes()).is_some() {
            return Some(what);
        }
    }
    if unit && find(b"__has_include").is_some() {
        return Some("__has_include");
    }
    // `#embed` and `%:embed`, with blanks between.
    let mut from = 0;
    while let Some(k) = text[from..].windows(5).position(|w| w == b"embed") {
        let at = from + k;
        let before = text[..at].trim_ascii_end();
        if before.ends_with(b"#") || before.ends_with(b"%:") {
            return Some("#embed");
        }
        from = at + 5;
    }
    None
}

/// Checks the units (`kernel.c` in each of `unit_dirs`) and the files `deps` names.
pub(crate) fn in_files(unit_dirs: &[PathBuf], deps: &[String]) -> Result<(), CcError> {
    let read =
        |p: &Path| std::fs::read(p).map_err(|e| refused(format!("unreadable: {e}"), Some(p)));
    for dir in unit_dirs {
        let unit = dir.join(UNIT_NAME);
        if let Some(what) = in_text(&read(&unit)?, true) {
            return Err(refused(format!("`{what}` in the kernel's text"), None));
        }
    }
    for dep in deps {
        let path = Path::new(dep);
        if let Some(what) = in_text(&read(path)?, false) {
            return Err(refused(format!("`{what}`"), Some(path)));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constructs_are_found() {
        for (text, what) in [
            ("asm(\".incbin \\\"x.bin\\\"\");", Some(".incbin")),
            ("__asm__(\".include \\\"m.s\\\"\");", Some(".include")),
            (
                "static const char d[] = {\n#  embed \"x\"\n};",
                Some("#embed"),
            ),
            ("%: embed <x>", Some("#embed")),
            ("#if __has_embed(\"x\")", Some("__has_embed")),
            ("#if __has_include(<x.h>)", Some("__has_include")),
            ("int embed = 1; float x = y.inc;", None),
        ] {
            assert_eq!(in_text(text.as_bytes(), true), what, "{text}");
        }
        assert_eq!(in_text(b"#if __has_include_next(<s.h>)", false), None);
        assert!(in_options(&["-O3".into(), "-Wa,-Idir".into()]).is_err());
        assert!(in_options(&["@opts".into()]).is_err());
        assert!(in_options(&["-O3".into(), "-ffast-math".into()]).is_ok());
    }
}
