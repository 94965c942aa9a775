//! The object code of a compiled kernel, symbol names aside, and the one way every oracle
//! compiles a kernel (`cc -O2 -c` as `kernel.c` in a directory of its own, dated
//! 1970-01-01). Shared by the gcc oracle and the corpus tests (`#[path]`-included).
#![allow(clippy::unwrap_used)]
#![allow(dead_code)] // each includer uses part of it

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use object::{Object, ObjectSection, ObjectSymbol, RelocationTarget, SectionKind};

/// What a relocation points at, names aside for defined symbols.
#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Target {
    External(String),
    Defined(String, u64),
    Section(String),
    Other,
}

/// The object code of a compiled kernel, symbol names aside.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Code {
    sections: BTreeMap<String, (Vec<u8>, u64)>,
    relocations: Vec<(String, u64, u32, i64, Target)>,
}

fn object_code(bytes: &[u8]) -> Code {
    let file = object::File::parse(bytes).unwrap();
    let section_name = |idx| {
        file.section_by_index(idx)
            .ok()
            .and_then(|s| s.name().ok().map(str::to_owned))
            .unwrap_or_default()
    };
    let mut sections = BTreeMap::new();
    let mut relocations = Vec::new();
    for s in file.sections() {
        let name = s.name().unwrap_or("").to_owned();
        let keep = matches!(
            s.kind(),
            SectionKind::Text
                | SectionKind::Data
                | SectionKind::ReadOnlyData
                | SectionKind::ReadOnlyString
                | SectionKind::ReadOnlyDataWithRel
                | SectionKind::UninitializedData
                | SectionKind::Tls
                | SectionKind::UninitializedTls
        ) || name == ".eh_frame";
        if !keep {
            continue;
        }
        let data = if s.kind() == SectionKind::UninitializedData {
            Vec::new()
        } else {
            s.data().unwrap_or_default().to_vec()
        };
        for (off, r) in s.relocations() {
            let r_type = match r.flags() {
                object::RelocationFlags::Elf { r_type } => r_type,
                _ => 0,
            };
            let target = match r.target() {
                RelocationTarget::Symbol(i) => match file.symbol_by_index(i) {
                    Ok(sym) if sym.is_undefined() => {
                        Target::External(sym.name().unwrap_or("").to_owned())
                    }
                    Ok(sym) if sym.kind() == object::SymbolKind::Section => {
                        Target::Section(sym.section_index().map(section_name).unwrap_or_default())
                    }
                    Ok(sym) => Target::Defined(
                        sym.section_index().map(section_name).unwrap_or_default(),
                        sym.address(),
                    ),
                    Err(_) => Target::Other,
                },
                RelocationTarget::Section(i) => Target::Section(section_name(i)),
                _ => Target::Other,
            };
            relocations.push((name.clone(), off, r_type, r.addend(), target));
        }
        sections.insert(name, (data, s.size()));
    }
    Code {
        sections,
        relocations,
    }
}

/// Compiles `text` with `cc -O2 -c`; `None` if it does not compile.
///
/// Every text is compiled the same way wherever it is: as `kernel.c` in a directory of
/// its own (the compiler's working directory), dated 1970-01-01, with
/// `SOURCE_DATE_EPOCH=0` and `TZ=UTC0`. A key is over the text; what `__FILE__`,
/// `__DATE__`, `__TIME__` and `__TIMESTAMP__` observe (the compile's file name and time)
/// is the backend's to fix, as cc-backend does. Without this, two compiles of one text
/// differ (found by seed 23: `assert`'s `__FILE__` in `.rodata`).
pub(crate) fn compile(dir: &Path, k: usize, text: &str) -> Option<Code> {
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    compile_with(&cc, dir, k, text)
}

/// [`compile`] with the compiler `cc` (a command on `PATH`, such as `clang`).
pub(crate) fn compile_with(cc: &str, dir: &Path, k: usize, text: &str) -> Option<Code> {
    let unit = dir.join(format!("k{k}"));
    std::fs::create_dir_all(&unit).unwrap();
    let c = unit.join("kernel.c");
    let o = unit.join("kernel.o");
    std::fs::write(&c, text).unwrap();
    std::fs::File::options()
        .write(true)
        .open(&c)
        .and_then(|f| f.set_modified(std::time::SystemTime::UNIX_EPOCH))
        .unwrap();
    let out = Command::new(cc)
        .current_dir(&unit)
        .envs([("SOURCE_DATE_EPOCH", "0"), ("TZ", "UTC0")])
        .args(["-O2", "-c", "-w", "-o", "kernel.o", "kernel.c"])
        .output()
        .unwrap_or_else(|e| panic!("the C compiler `{cc}` runs (the oracle needs it): {e}"));
    if !out.status.success() && std::env::var("KCACHE_SOUNDNESS_DEBUG").is_ok() {
        eprintln!("{}\n{text}", String::from_utf8_lossy(&out.stderr));
    }
    out.status
        .success()
        .then(|| object_code(&std::fs::read(&o).unwrap()))
}
