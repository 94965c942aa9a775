//! The public-API snapshot: for each library crate under `crates/`, the paths an adopter can
//! name, one per line in `docs/api/<crate>.txt`, so that a surface never grows (or
//! shrinks) unnoticed: `cargo xtask tidy` fails, showing the difference, when the source
//! says otherwise, and `cargo xtask api --bless` rewrites the files.
//!
//! A line is a kind and a path, and for a function its signature on one line:
//! - every `pub` item of a public module (the root, and `pub mod`s of public modules):
//!   `fn`, `struct`, `enum`, `trait`, `type`, `const`, `static`, `union`, `mod`, and
//!   `macro` for `#[macro_export]` ones;
//! - every `pub use` of a public module, under the name it gives: resolved inside the
//!   crate to the item's kind (`struct cc_backend::CcBackend`), or `use <path> = <what it
//!   names>` for another crate's item; a glob of one of the crate's modules lists that
//!   module's `pub` items and `pub use`s, a glob of another crate's module is one line
//!   `use <module path>::* = <its path>::*` (its items are not listed: the approximation);
//! - the variants of public enums and the `pub` fields of public structs;
//! - the methods of public traits, and the `pub` methods of every inherent `impl` of a public
//!   type (wherever the `impl` is written), and one line per trait `impl` of a public type,
//!   under the type's shortest public path (a type re-exported twice lists its methods once);
//! - signatures are the tokens as written (attributes and bodies left out, white space
//!   normalized), types as written, not resolved.
//!
//! Items under `#[cfg(test)]` and `#[doc(hidden)]` ones are left out. The lines are sorted;
//! [`count`] is the number of distinct public paths (not counting `impl` lines).

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

use quote::ToTokens;

use crate::modules::{Tree, item_attrs, use_paths};

/// The snapshot's lines of the crate named `name` whose root file is `lib`.
pub(crate) fn surface(name: &str, lib: &Path) -> Result<Vec<String>, String> {
    let tree = Tree::load(lib)?;
    let krate = name.replace('-', "_");
    let mut lines = BTreeSet::new();
    // (defining module, type name) -> the public paths it is named by.
    let mut types: BTreeMap<(Vec<String>, String), BTreeSet<String>> = BTreeMap::new();
    for (path, module) in &tree.modules {
        if !reachable(&tree, path) {
            continue;
        }
        let prefix = join(&krate, path);
        for item in &module.items {
            if hidden(item_attrs(item)) {
                continue;
            }
            if let syn::Item::Use(u) = item {
                if !public(&u.vis) {
                    continue;
                }
                for (alias, written) in use_paths(&u.tree) {
                    reexport(
                        &tree, &krate, path, &prefix, &alias, &written, &mut lines, &mut types,
                    );
                }
                continue;
            }
            if let Some(ident) = item_name(item)
                && item_public(item)
            {
                let full = format!("{prefix}::{ident}");
                describe(item, &full, &mut lines);
                types.entry((path.clone(), ident)).or_default().insert(full);
            }
        }
    }
    // Methods and trait impls of public types, wherever the impl is.
    for (path, module) in &tree.modules {
        for item in &module.items {
            let syn::Item::Impl(imp) = item else { continue };
            let syn::Type::Path(self_ty) = &*imp.self_ty else {
                continue;
            };
            let written: Vec<String> = self_ty
                .path
                .segments
                .iter()
                .map(|s| s.ident.to_string())
                .collect();
            let Some(last) = written.last().cloned() else {
                continue;
            };
            let defined = match tree.resolve(path, &written) {
                Some((module, rest)) if rest.len() == 1 => (module, rest[0].clone()),
                _ => (path.clone(), last),
            };
            // Under the type's shortest public path only: one line per method.
            let Some(name) = types
                .get(&defined)
                .and_then(|names| names.iter().min_by_key(|n| (n.len(), n.as_str())))
            else {
                continue;
            };
            {
                match &imp.trait_ {
                    Some((_, trait_path, _)) => {
                        lines.insert(format!("impl {} for {name}", tokens(trait_path)));
                    }
                    None => {
                        for inner in &imp.items {
                            if let syn::ImplItem::Fn(f) = inner
                                && public(&f.vis)
                                && !hidden(&f.attrs)
                                && !crate::modules::is_test(&f.attrs)
                            {
                                lines.insert(format!("fn {name}::{}", signature(&f.sig)));
                            }
                        }
                    }
                }
            }
        }
    }
    Ok(lines.into_iter().collect())
}

/// The number of distinct public paths of a snapshot's `lines` (`impl` lines not counted).
pub(crate) fn count(lines: &[String]) -> usize {
    lines
        .iter()
        .filter(|l| !l.starts_with("impl "))
        .filter_map(|l| {
            let rest = l.split_once(' ')?.1;
            let end = rest.find(['(', '<', ' ', '=']).unwrap_or(rest.len());
            Some(rest[..end].trim_end_matches(':').to_string())
        })
        .collect::<BTreeSet<_>>()
        .len()
}

/// Whether module `path` and every module above it are public.
fn reachable(tree: &Tree, path: &[String]) -> bool {
    (0..=path.len()).all(|n| tree.modules.get(&path[..n]).is_some_and(|m| m.public))
}

fn join(krate: &str, path: &[String]) -> String {
    std::iter::once(krate.to_string())
        .chain(path.iter().cloned())
        .collect::<Vec<_>>()
        .join("::")
}

fn public(vis: &syn::Visibility) -> bool {
    matches!(vis, syn::Visibility::Public(_))
}

/// Whether `attrs` hold `#[doc(hidden)]`.
fn hidden(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| {
        a.path().is_ident("doc") && a.parse_args::<syn::Ident>().is_ok_and(|i| i == "hidden")
    })
}

fn item_public(item: &syn::Item) -> bool {
    match item {
        syn::Item::Const(i) => public(&i.vis),
        syn::Item::Enum(i) => public(&i.vis),
        syn::Item::Fn(i) => public(&i.vis),
        syn::Item::Mod(i) => public(&i.vis),
        syn::Item::Static(i) => public(&i.vis),
        syn::Item::Struct(i) => public(&i.vis),
        syn::Item::Trait(i) => public(&i.vis),
        syn::Item::Type(i) => public(&i.vis),
        syn::Item::Union(i) => public(&i.vis),
        syn::Item::Macro(i) => i.attrs.iter().any(|a| a.path().is_ident("macro_export")),
        _ => false,
    }
}

fn item_name(item: &syn::Item) -> Option<String> {
    Some(match item {
        syn::Item::Const(i) => i.ident.to_string(),
        syn::Item::Enum(i) => i.ident.to_string(),
        syn::Item::Fn(i) => i.sig.ident.to_string(),
        syn::Item::Mod(i) => i.ident.to_string(),
        syn::Item::Static(i) => i.ident.to_string(),
        syn::Item::Struct(i) => i.ident.to_string(),
        syn::Item::Trait(i) => i.ident.to_string(),
        syn::Item::Type(i) => i.ident.to_string(),
        syn::Item::Union(i) => i.ident.to_string(),
        syn::Item::Macro(i) => i.ident.as_ref()?.to_string(),
        _ => return None,
    })
}

/// The lines of `item`, named `full`.
fn describe(item: &syn::Item, full: &str, lines: &mut BTreeSet<String>) {
    let mut add = |line: String| {
        lines.insert(line);
    };
    match item {
        syn::Item::Const(i) => add(format!("const {full}: {}", tokens(&i.ty))),
        syn::Item::Static(i) => add(format!("static {full}: {}", tokens(&i.ty))),
        syn::Item::Type(i) => add(format!("type {full} = {}", tokens(&i.ty))),
        syn::Item::Mod(_) => add(format!("mod {full}")),
        syn::Item::Macro(_) => add(format!("macro {full}")),
        syn::Item::Union(_) => add(format!("union {full}")),
        syn::Item::Fn(i) => add(format!("fn {}", signature_named(&i.sig, full))),
        syn::Item::Struct(i) => {
            add(format!("struct {full}{}", tokens(&i.generics)));
            for field in &i.fields {
                if let Some(name) = &field.ident
                    && public(&field.vis)
                {
                    add(format!("field {full}::{name}: {}", tokens(&field.ty)));
                }
            }
        }
        syn::Item::Enum(i) => {
            add(format!("enum {full}{}", tokens(&i.generics)));
            for v in &i.variants {
                add(format!("variant {full}::{}", v.ident));
            }
        }
        syn::Item::Trait(i) => {
            add(format!("trait {full}{}", tokens(&i.generics)));
            for inner in &i.items {
                match inner {
                    syn::TraitItem::Fn(f) => add(format!("fn {full}::{}", signature(&f.sig))),
                    syn::TraitItem::Type(t) => add(format!("type {full}::{}", t.ident)),
                    syn::TraitItem::Const(c) => {
                        add(format!("const {full}::{}: {}", c.ident, tokens(&c.ty)))
                    }
                    _ => {}
                }
            }
        }
        _ => {}
    }
}

/// The lines of a `pub use` of module `at` (named `prefix`) giving `alias` for `written`.
#[allow(clippy::too_many_arguments)]
fn reexport(
    tree: &Tree,
    krate: &str,
    at: &[String],
    prefix: &str,
    alias: &str,
    written: &[String],
    lines: &mut BTreeSet<String>,
    types: &mut BTreeMap<(Vec<String>, String), BTreeSet<String>>,
) {
    let resolved = tree.resolve_or_external(at, written);
    if alias == "*" {
        match resolved {
            Ok((module, rest)) if rest.is_empty() => {
                if let Some(m) = tree.modules.get(&module) {
                    for item in &m.items {
                        if let syn::Item::Use(u) = item
                            && public(&u.vis)
                        {
                            for (a, w) in use_paths(&u.tree) {
                                if a != "*" {
                                    reexport(tree, krate, &module, prefix, &a, &w, lines, types);
                                }
                            }
                        } else if let Some(ident) = item_name(item)
                            && item_public(item)
                            && !hidden(item_attrs(item))
                        {
                            let full = format!("{prefix}::{ident}");
                            describe(item, &full, lines);
                            types
                                .entry((module.clone(), ident))
                                .or_default()
                                .insert(full);
                        }
                    }
                }
            }
            Ok((module, rest)) => {
                let path = join(krate, &module);
                lines.insert(format!("use {prefix}::* = {path}::{}::*", rest.join("::")));
            }
            Err(external) => {
                lines.insert(format!("use {prefix}::* = {}::*", external.join("::")));
            }
        }
        return;
    }
    let full = format!("{prefix}::{alias}");
    if let Ok((module, rest)) = &resolved {
        let (module, rest) = (module.clone(), rest.clone());
        if rest.is_empty() {
            // A module re-exported.
            lines.insert(format!("mod {full} = {}", join(krate, &module)));
            return;
        }
        if rest.len() == 1
            && let Some(m) = tree.modules.get(&module)
            && let Some(item) = m
                .items
                .iter()
                .find(|i| item_name(i).as_deref() == Some(rest[0].as_str()))
        {
            describe(item, &full, lines);
            types
                .entry((module.clone(), rest[0].clone()))
                .or_default()
                .insert(full);
            return;
        }
        lines.insert(format!(
            "use {full} = {}::{}",
            join(krate, &module),
            rest.join("::")
        ));
        return;
    }
    if let Err(external) = resolved {
        lines.insert(format!("use {full} = {}", external.join("::")));
    }
}

/// A function's signature on one line, under `name`.
fn signature_named(sig: &syn::Signature, name: &str) -> String {
    let mut sig = sig.clone();
    sig.ident = syn::Ident::new("__name__", sig.ident.span());
    normalize(&sig.to_token_stream().to_string()).replacen("fn __name__", name, 1)
}

/// A method's signature on one line: `name(args) -> output`, with its qualifiers first.
fn signature(sig: &syn::Signature) -> String {
    let text = normalize(&sig.to_token_stream().to_string());
    // `const unsafe fn name...` -> `name... (const unsafe)`
    match text.split_once("fn ") {
        Some(("", rest)) => rest.to_string(),
        Some((qualifiers, rest)) => format!("{rest} ({})", qualifiers.trim()),
        None => text,
    }
}

fn tokens(t: &impl ToTokens) -> String {
    normalize(&t.to_token_stream().to_string())
}

/// Token text with the spaces `to_string` puts around punctuation taken out.
fn normalize(text: &str) -> String {
    let mut out = text.split_whitespace().collect::<Vec<_>>().join(" ");
    for (from, to) in [
        (" ,", ","),
        (" ;", ";"),
        ("( ", "("),
        (" )", ")"),
        (" (", "("),
        ("[ ", "["),
        (" ]", "]"),
        (" < ", "<"),
        ("< ", "<"),
        (" <", "<"),
        (" >", ">"),
        (" :: ", "::"),
        (":: ", "::"),
        (" : ", ": "),
        ("& ", "&"),
        ("' ", "'"),
        ("# ", "#"),
        ("! ", "!"),
        ("* const ", "*const "),
        ("* mut ", "*mut "),
    ] {
        out = out.replace(from, to);
    }
    out.replace(",)", ")")
        .replace(",>", ">")
        .replace("->", " -> ")
        .replace("  ", " ")
}

/// `docs/api/<crate>.txt` for `crate`.
pub(crate) fn snapshot_path(root: &Path, name: &str) -> PathBuf {
    root.join("docs/api").join(format!("{name}.txt"))
}

/// `(name, src/lib.rs)` of every library crate under `crates/`.
pub(crate) fn libraries(root: &Path) -> Vec<(String, PathBuf)> {
    let mut out: Vec<(String, PathBuf)> = fs::read_dir(root.join("crates"))
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|d| d.join("src/lib.rs").exists())
        .filter_map(|d| {
            let name = d.file_name()?.to_string_lossy().into_owned();
            Some((name, d.join("src/lib.rs")))
        })
        .collect();
    out.sort();
    out
}

/// The snapshot's text for `lines`.
pub(crate) fn render(lines: &[String]) -> String {
    let mut text = lines.join("\n");
    text.push('\n');
    text
}

/// The problems of every library's surface against its snapshot: a missing snapshot, or
/// the lines added (`+`) and removed (`-`).
pub(crate) fn snapshot_problems(root: &Path) -> Vec<String> {
    let mut problems = Vec::new();
    for (name, lib) in libraries(root) {
        let lines = match surface(&name, &lib) {
            Ok(lines) => lines,
            Err(e) => {
                problems.push(e);
                continue;
            }
        };
        let path = snapshot_path(root, &name);
        let Ok(saved) = fs::read_to_string(&path) else {
            problems.push(format!(
                "{name}: no public-API snapshot {} (`cargo xtask api --bless` writes it)",
                path.strip_prefix(root).unwrap_or(&path).display()
            ));
            continue;
        };
        if let Some(diff) = difference(&saved, &lines) {
            problems.push(format!(
                "{name}: the public API differs from docs/api/{name}.txt (`cargo xtask api --bless` \
                 accepts it):\n{diff}"
            ));
        }
    }
    problems
}

/// The lines only the source has (`+`) and only the snapshot has (`-`), or `None` if equal.
pub(crate) fn difference(saved: &str, lines: &[String]) -> Option<String> {
    let saved: BTreeSet<&str> = saved.lines().filter(|l| !l.is_empty()).collect();
    let now: BTreeSet<&str> = lines.iter().map(String::as_str).collect();
    let mut out: Vec<String> = now.difference(&saved).map(|l| format!("+ {l}")).collect();
    out.extend(saved.difference(&now).map(|l| format!("- {l}")));
    (!out.is_empty()).then(|| out.join("\n"))
}

/// `cargo xtask api [--bless] [--count]`.
pub(crate) fn command(root: &Path, bless: bool, count_only: bool) -> Result<(), String> {
    let mut failed = Vec::new();
    for (name, lib) in libraries(root) {
        let lines = surface(&name, &lib)?;
        if count_only {
            let mut kinds: BTreeMap<&str, usize> = BTreeMap::new();
            for line in &lines {
                *kinds
                    .entry(line.split(' ').next().unwrap_or(""))
                    .or_default() += 1;
            }
            let kinds: Vec<String> = kinds.iter().map(|(k, n)| format!("{n} {k}")).collect();
            println!(
                "{name}: {} public names ({} lines: {})",
                count(&lines),
                lines.len(),
                kinds.join(", ")
            );
            continue;
        }
        let path = snapshot_path(root, &name);
        if bless {
            fs::create_dir_all(path.parent().unwrap_or(root))
                .and_then(|()| fs::write(&path, render(&lines)))
                .map_err(|e| format!("{}: {e}", path.display()))?;
            println!(
                "{name}: {} public names, {} lines written",
                count(&lines),
                lines.len()
            );
        }
    }
    if !bless && !count_only {
        failed = snapshot_problems(root);
    }
    if failed.is_empty() {
        Ok(())
    } else {
        for f in &failed {
            eprintln!("api: {f}");
        }
        Err(format!("{} public API problem(s)", failed.len()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn crate_with(lib: &str, extra: &[(&str, &str)]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().expect("temporary directory");
        let src = dir.path().join("crates/demo/src");
        fs::create_dir_all(&src).expect("mkdir");
        fs::write(src.join("lib.rs"), lib).expect("write");
        for (path, text) in extra {
            fs::write(src.join(path), text).expect("write");
        }
        dir
    }

    /// Root items, re-exports from a private module, methods of public types (signatures on
    /// one line), a `pub mod`'s items; private and test items are not listed.
    #[test]
    fn the_surface_lists_what_an_adopter_can_name() {
        let dir = crate_with(
            "mod inner;\npub mod tools;\npub use inner::{Ext, Thing, make};\npub use other::Names;\n\
             pub const N: usize = 1;\nfn private() {}\n#[cfg(test)]\npub fn tested() {}\n",
            &[
                (
                    "inner.rs",
                    "pub use outside::deep::Ext;\npub struct Thing { pub size: u64, hidden: u8 }\nimpl Thing {\n    pub fn new(\n        size: u64,\n    ) -> Thing { Thing { size, hidden: 0 } }\n    fn secret(&self) {}\n}\npub fn make() -> Thing { Thing::new(1) }\npub fn unexported() {}\n",
                ),
                (
                    "tools.rs",
                    "pub enum Mode { A, B }\npub(crate) fn internal() {}\n",
                ),
            ],
        );
        let lines = surface("demo", &dir.path().join("crates/demo/src/lib.rs")).expect("parses");
        let want = [
            "const demo::N: usize",
            "field demo::Thing::size: u64",
            "fn demo::Thing::new(size: u64) -> Thing",
            "fn demo::make() -> Thing",
            "mod demo::tools",
            "struct demo::Thing",
            "use demo::Names = other::Names",
            // Through the crate's own `use`: the outside path.
            "use demo::Ext = outside::deep::Ext",
            "variant demo::tools::Mode::A",
            "variant demo::tools::Mode::B",
            "enum demo::tools::Mode",
        ];
        let mut want: Vec<String> = want.iter().map(|s| s.to_string()).collect();
        want.sort();
        assert_eq!(lines, want);
        assert_eq!(count(&lines), 11);
    }

    /// A snapshot that differs fails with the difference; an equal one passes; a missing one
    /// fails.
    #[test]
    fn a_surface_that_grew_fails_with_the_difference() {
        let dir = crate_with("pub fn a() {}\npub fn b(x: u8) {}\n", &[]);
        let root = dir.path();
        assert!(snapshot_problems(root)[0].contains("no public-API snapshot"));
        fs::create_dir_all(root.join("docs/api")).expect("mkdir");
        fs::write(snapshot_path(root, "demo"), "fn demo::a()\n").expect("write");
        let problems = snapshot_problems(root);
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(problems[0].contains("+ fn demo::b(x: u8)"), "{problems:?}");
        fs::write(
            snapshot_path(root, "demo"),
            "fn demo::a()\nfn demo::b(x: u8)\n",
        )
        .expect("write");
        assert!(snapshot_problems(root).is_empty());
    }
}
