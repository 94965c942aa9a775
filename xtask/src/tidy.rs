//! Repository rules that `cargo xtask tidy` checks, and `cargo test` too (see the
//! test at the bottom), so a rule is never only a convention:
//!
//! - every crate root (`src/lib.rs`, `src/main.rs`) starts with a `//!` crate doc;
//! - every library crate under `crates/` denies missing docs, and every crate root there
//!   (a binary's `src/main.rs` too) forbids unsafe code (a crate that must load shared
//!   objects may `deny` instead and allow it locally), each as a line of its own;
//! - every internal dependency a crate declares (normal or build, on any target, as
//!   `cargo metadata` reads the manifests) is one the layer table in
//!   `docs/ARCHITECTURE.md` allows, and every crate is in that table;
//! - `test-support` is only ever a dev-dependency (never a normal or build one);
//! - path dependencies in the root manifest carry versions;
//! - no Rust source line ends in white space;
//! - every example at the top of `examples/` (a foreign backend adopting kcache) marks the
//!   lines that touch kcache's APIs between `// kcache-glue: begin` and `// kcache-glue: end`
//!   lines, has at most [`MAX_GLUE_LINES`] lines of code there (comments and blank lines not
//!   counted), and names no kcache crate outside them;
//! - no import circle inside a crate under `crates/` is wider than
//!   [`MAX_CIRCLE`](crate::imports::MAX_CIRCLE) files (see [`crate::imports`]);
//! - every library crate's public API is the one `docs/api/<crate>.txt` lists (see
//!   [`crate::api`]; `cargo xtask api --bless` rewrites the lists).

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// The most lines of code (not comments, not blank) an example's kcache glue may have: the
/// cost of adopting kcache in a backend of one's own (issue 28).
pub(crate) const MAX_GLUE_LINES: usize = 100;

/// The crates an adopter's code names (as Rust paths); an example names them only in its glue.
const KCACHE_PATHS: &[&str] = &[
    "canonical_text",
    "cache_dir",
    "kernel_cache",
    "cc_backend",
    "schedule_cache",
    "memo_cache",
    "redis_wire",
    "tuner",
];

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
    let declared = declared_deps(root).unwrap_or_else(|e| {
        problems.push(format!("cargo metadata: {e}"));
        BTreeMap::new()
    });
    problems.extend(dev_only_problems(&declared));
    for (name, dir) in &crates {
        check_crate_root(root, name, dir, &mut problems);
        let deps: BTreeSet<String> = declared
            .get(name)
            .into_iter()
            .flatten()
            .filter(|d| internal.contains(*d))
            .cloned()
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
    check_examples(root, &mut problems);
    for (name, dir) in &crates {
        if dir.parent().is_some_and(|p| p.ends_with("crates")) {
            for file in [dir.join("src/lib.rs"), dir.join("src/main.rs")] {
                if file.exists() {
                    for p in crate::imports::circle_problems(root, &file) {
                        problems.push(format!("{name}: {p}"));
                    }
                }
            }
        }
    }
    problems.extend(crate::api::snapshot_problems(root));
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems)
    }
}

/// Every package that has a dev-only crate as a normal or build dependency.
fn dev_only_problems(declared: &BTreeMap<String, BTreeSet<String>>) -> Vec<String> {
    declared
        .iter()
        .filter(|(_, deps)| deps.contains("test-support"))
        .map(|(name, _)| {
            format!("{name} depends on test-support, which is dev-only: make it a dev-dependency")
        })
        .collect()
}

/// The glue rule for every `examples/*.rs`.
fn check_examples(root: &Path, problems: &mut Vec<String>) {
    let Ok(rd) = fs::read_dir(root.join("examples")) else {
        return;
    };
    let mut files: Vec<PathBuf> = rd
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "rs"))
        .collect();
    files.sort();
    for file in files {
        let text = fs::read_to_string(&file).unwrap_or_default();
        if let Err(problem) = glue_lines(&text) {
            problems.push(format!("{}: {problem}", rel(root, &file)));
        }
    }
}

/// The lines of code of `text`'s kcache glue (see the module docs), or why the rule fails.
fn glue_lines(text: &str) -> Result<usize, String> {
    let (mut inside, mut blocks, mut count) = (false, 0, 0);
    for (i, line) in text.lines().enumerate() {
        let t = line.trim();
        match (t, inside) {
            ("// kcache-glue: begin", false) => (inside, blocks) = (true, blocks + 1),
            ("// kcache-glue: end", true) => inside = false,
            ("// kcache-glue: begin" | "// kcache-glue: end", _) => {
                return Err(format!("line {}: unbalanced glue marker", i + 1));
            }
            _ if t.is_empty() || t.starts_with("//") => {}
            _ if inside => count += 1,
            _ => {
                let names_kcache = t
                    .split(|c: char| !(c.is_alphanumeric() || c == '_'))
                    .any(|word| KCACHE_PATHS.contains(&word));
                if names_kcache {
                    return Err(format!(
                        "line {}: names a kcache crate outside the kcache glue markers",
                        i + 1
                    ));
                }
            }
        }
    }
    if inside {
        return Err("a `// kcache-glue: begin` without its end".to_string());
    }
    if blocks == 0 {
        return Err("no `// kcache-glue: begin` ... `// kcache-glue: end` block".to_string());
    }
    if count > MAX_GLUE_LINES {
        return Err(format!(
            "{count} lines of kcache glue, more than {MAX_GLUE_LINES}: make the API it needs simpler"
        ));
    }
    Ok(count)
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
    if !in_crates_dir {
        return;
    }
    for file in &roots {
        let text = fs::read_to_string(file).unwrap_or_default();
        if *file == lib && !has_inner_attribute(&text, "#![deny(missing_docs)]") {
            problems.push(format!(
                "{}: missing #![deny(missing_docs)]",
                rel(root, file)
            ));
        }
        // Every crate root, a binary's too: the workspace lint only denies unsafe code,
        // which an `#[allow]` can lift.
        if !has_inner_attribute(&text, "#![forbid(unsafe_code)]")
            && !has_inner_attribute(&text, "#![deny(unsafe_code)]")
        {
            problems.push(format!(
                "{}: missing #![forbid(unsafe_code)]",
                rel(root, file)
            ));
        }
    }
}

/// Whether `text` has `attribute` as a line of its own (not inside a comment, a doc or a
/// string, where a text search would find it too).
fn has_inner_attribute(text: &str, attribute: &str) -> bool {
    text.lines().any(|l| l.trim() == attribute)
}

/// `(package name, directory)` of every workspace member.
fn crate_dirs(root: &Path) -> Vec<(String, PathBuf)> {
    let mut dirs: Vec<PathBuf> = fs::read_dir(root.join("crates"))
        .map(|rd| rd.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    dirs.push(root.join("xtask"));
    dirs.push(root.join("tests"));
    dirs.push(root.join("examples"));
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

/// For each workspace package, the packages it depends on other than for tests (normal
/// and build dependencies, on every target, renamed or not), as `cargo metadata` reads the
/// manifests.
fn declared_deps(root: &Path) -> Result<BTreeMap<String, BTreeSet<String>>, String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    let out = std::process::Command::new(cargo)
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--offline",
        ])
        .current_dir(root)
        .output()
        .map_err(|e| format!("could not run it: {e}"))?;
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    let metadata: serde_json::Value =
        serde_json::from_slice(&out.stdout).map_err(|e| format!("its output: {e}"))?;
    Ok(non_dev_deps(&metadata))
}

/// [`declared_deps`] from `cargo metadata`'s JSON.
fn non_dev_deps(metadata: &serde_json::Value) -> BTreeMap<String, BTreeSet<String>> {
    let mut out = BTreeMap::new();
    for package in metadata["packages"].as_array().into_iter().flatten() {
        let Some(name) = package["name"].as_str() else {
            continue;
        };
        let deps = package["dependencies"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|d| d["kind"].as_str() != Some("dev"))
            .filter_map(|d| d["name"].as_str().map(str::to_string))
            .collect();
        out.insert(name.to_string(), deps);
    }
    out
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
    let mut stack = vec![
        root.join("crates"),
        root.join("xtask"),
        root.join("tests"),
        root.join("examples"),
    ];
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

    /// An attribute counts only as a line of its own: in a comment or a doc it is text.
    #[test]
    fn inner_attributes_are_lines_not_mentions() {
        let a = "#![forbid(unsafe_code)]";
        assert!(has_inner_attribute(
            "//! doc\n\n#![forbid(unsafe_code)]\n",
            a
        ));
        assert!(!has_inner_attribute(
            "//! uses #![forbid(unsafe_code)] like others\n",
            a
        ));
        assert!(!has_inner_attribute("// #![forbid(unsafe_code)]\n", a));
    }

    #[test]
    fn manifest_sections_are_read() {
        let m = "[package]\nname = \"x\"\n[dependencies]\nfoo.workspace = true\nbar = \"1\"\n# c\n[dev-dependencies]\nbaz = \"1\"\n";
        assert_eq!(
            section_lines(m, "dependencies"),
            vec!["foo.workspace = true", "bar = \"1\""]
        );
        assert_eq!(section_lines(m, "package"), vec!["name = \"x\""]);
    }

    /// Build dependencies and target-specific ones count (a `[target.'cfg(unix)'.dependencies]`
    /// table was invisible to the hand-written manifest reading); dev-dependencies do not.
    #[test]
    fn every_dependency_but_dev_ones_is_held_to_the_layers() {
        let metadata = serde_json::json!({"packages": [{
            "name": "a",
            "dependencies": [
                {"name": "plain", "kind": null, "target": null},
                {"name": "built", "kind": "build", "target": null},
                {"name": "unix_only", "kind": null, "target": "cfg(unix)"},
                {"name": "renamed", "rename": "alias", "kind": null, "target": null},
                {"name": "tested", "kind": "dev", "target": null}
            ]
        }]});
        let deps = non_dev_deps(&metadata);
        let want: BTreeSet<String> = ["built", "plain", "renamed", "unix_only"]
            .map(String::from)
            .into();
        assert_eq!(deps["a"], want);
    }

    /// test-support as a normal or build dependency is a problem; as a dev one it is not
    /// (`non_dev_deps` leaves dev ones out).
    #[test]
    fn test_support_is_dev_only() {
        let metadata = serde_json::json!({"packages": [
            {"name": "lib", "dependencies": [{"name": "test-support", "kind": null}]},
            {"name": "built", "dependencies": [{"name": "test-support", "kind": "build"}]},
            {"name": "fine", "dependencies": [{"name": "test-support", "kind": "dev"}]}
        ]});
        let problems = dev_only_problems(&non_dev_deps(&metadata));
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(
            problems[0].starts_with("built depends on test-support"),
            "{problems:?}"
        );
        assert!(
            problems[1].starts_with("lib depends on test-support"),
            "{problems:?}"
        );
    }

    /// The workspace as cargo reads it: every crate's declared dependencies are found.
    #[test]
    fn the_workspace_dependencies_are_read_through_cargo() {
        let deps = declared_deps(&crate::project_root()).expect("cargo metadata runs");
        assert!(deps["kernel-cache"].contains("canonical-text"), "{deps:?}");
        assert!(
            !deps["canonical-text"].contains("proptest"),
            "dev-only: {deps:?}"
        );
    }

    /// The glue rule: code lines between the markers count, comments and blank lines do not;
    /// a kcache path outside them, a missing or unbalanced marker, or too many lines fail.
    #[test]
    fn example_glue_is_counted_and_bounded() {
        let glue = "// kcache-glue: begin\nuse kernel_cache::Names;\n\n/// doc\nfn f() {}\n// kcache-glue: end\n";
        assert_eq!(
            glue_lines(&format!("//! uses kernel_cache\nfn main() {{}}\n{glue}")),
            Ok(2)
        );
        assert!(glue_lines("fn main() {}\n").is_err());
        assert!(glue_lines("// kcache-glue: begin\nfn f() {}\n").is_err());
        assert!(glue_lines("// kcache-glue: end\n").is_err());
        let outside = format!("{glue}fn g() {{ let _ = kernel_cache::kernel_key; }}\n");
        assert!(
            glue_lines(&outside)
                .expect_err("a path outside")
                .contains("outside")
        );
        let long = format!(
            "// kcache-glue: begin\n{}// kcache-glue: end\n",
            "let x = 1;\n".repeat(MAX_GLUE_LINES + 1)
        );
        assert!(
            glue_lines(&long)
                .expect_err("too long")
                .contains("more than")
        );
        // The real examples: within the bound (and counted at all).
        let root = crate::project_root();
        for example in ["foreign_backend.rs", "tinygrad_style.rs"] {
            let text = fs::read_to_string(root.join("examples").join(example)).expect(example);
            let count = glue_lines(&text).expect("the example keeps the glue rule");
            assert!(count > 50, "{example}: {count}");
        }
    }
}
