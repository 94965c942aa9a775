//! Repository rules that `cargo xtask tidy` checks, and `cargo test` too (see the
//! test at the bottom), so a rule is never only a convention:
//!
//! - every crate root (`src/lib.rs`, `src/main.rs`) starts with a `//!` crate doc;
//! - every library crate under `crates/` denies missing docs and forbids unsafe code
//!   (a crate that must load shared objects may `deny` instead and allow it locally);
//! - every internal dependency a crate declares is one the layer table in
//!   `docs/ARCHITECTURE.md` allows, and every crate is in that table;
//! - path dependencies in the root manifest carry versions;
//! - no Rust source line ends in white space.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// Checks every rule; `Err` lists each problem found, one per entry.
pub(crate) fn check(root: &Path) -> Result<(), Vec<String>> {
    let mut problems = Vec::new();
    let crates = crate_dirs(root);
    if crates.is_empty() {
        problems.push(format!("no crates found under {}", root.display()));
    }
    let layers = match fs::read_to_string(root.join("docs/ARCHITECTURE.md")) {
        Ok(text) => parse_layers(&text).unwrap_or_else(|e| {
            problems.push(format!("docs/ARCHITECTURE.md: {e}"));
            BTreeMap::new()
        }),
        Err(e) => {
            problems.push(format!("docs/ARCHITECTURE.md: {e}"));
            BTreeMap::new()
        }
    };
    let internal: BTreeSet<String> = crates.iter().map(|(name, _)| name.clone()).collect();
    for (name, dir) in &crates {
        check_crate_root(root, name, dir, &mut problems);
        let manifest = match fs::read_to_string(dir.join("Cargo.toml")) {
            Ok(m) => m,
            Err(e) => {
                problems.push(format!("{name}: Cargo.toml: {e}"));
                continue;
            }
        };
        let deps: BTreeSet<String> = section_keys(&manifest, "dependencies")
            .into_iter()
            .filter(|d| internal.contains(d))
            .collect();
        match layers.get(name) {
            None => problems.push(format!(
                "{name}: not in the layer table of docs/ARCHITECTURE.md"
            )),
            Some(allowed) => {
                for d in deps.difference(allowed) {
                    problems.push(format!(
                        "{name} depends on {d}, which the layer table of docs/ARCHITECTURE.md does not allow"
                    ));
                }
            }
        }
    }
    if let Ok(manifest) = fs::read_to_string(root.join("Cargo.toml")) {
        for line in section_lines(&manifest, "workspace.dependencies") {
            if line.contains("path =") && !line.contains("version =") {
                problems.push(format!(
                    "Cargo.toml: path dependency without a version: {line}"
                ));
            }
        }
    }
    for file in rust_files(root) {
        if let Ok(text) = fs::read_to_string(&file) {
            for (i, line) in text.lines().enumerate() {
                if line.ends_with(' ') || line.ends_with('\t') {
                    problems.push(format!(
                        "{}:{}: trailing white space",
                        rel(root, &file),
                        i + 1
                    ));
                }
            }
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems)
    }
}

fn check_crate_root(root: &Path, name: &str, dir: &Path, problems: &mut Vec<String>) {
    let lib = dir.join("src/lib.rs");
    let roots: Vec<PathBuf> = [lib.clone(), dir.join("src/main.rs")]
        .into_iter()
        .filter(|p| p.exists())
        .collect();
    if roots.is_empty() {
        problems.push(format!("{name}: no src/lib.rs or src/main.rs"));
    }
    for file in &roots {
        let text = fs::read_to_string(file).unwrap_or_default();
        if !text.starts_with("//!") {
            problems.push(format!(
                "{}: must start with a `//!` crate doc",
                rel(root, file)
            ));
        }
    }
    let in_crates_dir = dir.parent().is_some_and(|p| p.ends_with("crates"));
    if in_crates_dir && lib.exists() {
        let text = fs::read_to_string(&lib).unwrap_or_default();
        if !text.contains("#![deny(missing_docs)]") {
            problems.push(format!(
                "{}: missing #![deny(missing_docs)]",
                rel(root, &lib)
            ));
        }
        if !text.contains("#![forbid(unsafe_code)]") && !text.contains("#![deny(unsafe_code)]") {
            problems.push(format!(
                "{}: missing #![forbid(unsafe_code)]",
                rel(root, &lib)
            ));
        }
    }
}

/// `(package name, directory)` of every workspace member.
fn crate_dirs(root: &Path) -> Vec<(String, PathBuf)> {
    let mut dirs: Vec<PathBuf> = fs::read_dir(root.join("crates"))
        .map(|rd| rd.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    dirs.push(root.join("xtask"));
    dirs.push(root.join("tests"));
    let mut out = Vec::new();
    for dir in dirs {
        let Ok(manifest) = fs::read_to_string(dir.join("Cargo.toml")) else {
            continue;
        };
        let name = section_lines(&manifest, "package")
            .into_iter()
            .find_map(|l| {
                let (k, v) = l.split_once('=')?;
                (k.trim() == "name").then(|| v.trim().trim_matches('"').to_string())
            });
        if let Some(name) = name {
            out.push((name, dir));
        }
    }
    out.sort();
    out
}

/// The non-blank, non-comment lines of `[section]` in a TOML manifest.
fn section_lines<'a>(manifest: &'a str, section: &str) -> Vec<&'a str> {
    let header = format!("[{section}]");
    let mut inside = false;
    let mut out = Vec::new();
    for line in manifest.lines() {
        let t = line.trim();
        if t.starts_with('[') {
            inside = t == header;
            continue;
        }
        if inside && !t.is_empty() && !t.starts_with('#') {
            out.push(t);
        }
    }
    out
}

/// The dependency names declared in `[section]` (`name = …` or `name.workspace = true`).
fn section_keys(manifest: &str, section: &str) -> Vec<String> {
    section_lines(manifest, section)
        .into_iter()
        .filter_map(|l| {
            let key = l.split(['=', '.']).next()?.trim();
            (!key.is_empty()).then(|| key.to_string())
        })
        .collect()
}

/// Parses the fenced block after the `<!-- layers -->` marker: one line per crate,
/// `crate: allowed-dep allowed-dep …`.
fn parse_layers(text: &str) -> Result<BTreeMap<String, BTreeSet<String>>, String> {
    let start = text
        .find("<!-- layers -->")
        .ok_or("no `<!-- layers -->` marker before the layer table")?;
    let rest = &text[start..];
    let open = rest
        .find("```")
        .ok_or("no fenced layer table after the marker")?;
    let body = &rest[open + 3..];
    let body = body.split_once('\n').map(|(_, b)| b).unwrap_or("");
    let close = body.find("```").ok_or("unterminated layer table")?;
    let mut out = BTreeMap::new();
    for line in body[..close].lines() {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let (name, deps) = line
            .split_once(':')
            .ok_or_else(|| format!("layer table line without `:`: {line}"))?;
        out.insert(
            name.trim().to_string(),
            deps.split_whitespace().map(str::to_string).collect(),
        );
    }
    Ok(out)
}

fn rust_files(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![root.join("crates"), root.join("xtask"), root.join("tests")];
    while let Some(dir) = stack.pop() {
        let Ok(rd) = fs::read_dir(&dir) else { continue };
        for entry in rd.flatten() {
            let path = entry.path();
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if name.starts_with('.') || name == "target" {
                continue;
            }
            if path.is_dir() {
                stack.push(path);
            } else if name.ends_with(".rs") {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

fn rel(root: &Path, p: &Path) -> String {
    p.strip_prefix(root).unwrap_or(p).display().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tidy() {
        if let Err(problems) = check(&crate::project_root()) {
            panic!("tidy problems:\n{}", problems.join("\n"));
        }
    }

    #[test]
    fn layer_table_parses_and_rejects_garbage() {
        let doc = "x\n<!-- layers -->\n```text\na:\nb: a\n```\n";
        let layers = parse_layers(doc).expect("parses");
        assert!(layers["a"].is_empty());
        assert!(layers["b"].contains("a"));
        assert!(parse_layers("no marker").is_err());
        assert!(parse_layers("<!-- layers -->\n```text\nno colon\n```").is_err());
    }

    #[test]
    fn manifest_sections_are_read() {
        let m = "[package]\nname = \"x\"\n[dependencies]\nfoo.workspace = true\nbar = \"1\"\n# c\n[dev-dependencies]\nbaz = \"1\"\n";
        assert_eq!(section_keys(m, "dependencies"), vec!["foo", "bar"]);
        assert_eq!(section_keys(m, "dev-dependencies"), vec!["baz"]);
    }
}
