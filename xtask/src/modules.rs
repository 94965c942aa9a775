//! A crate's module tree as its source files declare it, read with `syn`: which file each
//! module lives in, its items, and how a path written in a module resolves to the module
//! (and so the file) that defines what it names. Shared by the import-circle rule
//! ([`crate::imports`]) and the public-API snapshot ([`crate::api`]).
//!
//! Approximations, deterministic: items under `#[cfg(test)]` are left out (test code is
//! not the crate's structure); `#[path]` attributes are followed relative to the declaring
//! file's directory; macro bodies are not read; a glob import (`use x::*`) resolves nothing
//! by name.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

/// One module of a crate.
pub(crate) struct Module {
    /// The file the module's items are written in (an inline module's is its parent's).
    pub(crate) file: PathBuf,
    /// The module's items (without those under `#[cfg(test)]`).
    pub(crate) items: Vec<syn::Item>,
    /// Whether the module is declared `pub` (the root is).
    pub(crate) public: bool,
}

/// A crate's modules by path (`[]` is the root).
pub(crate) struct Tree {
    pub(crate) modules: BTreeMap<Vec<String>, Module>,
}

/// Whether `attrs` hold `#[cfg(test)]`.
pub(crate) fn is_test(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| {
        a.path().is_ident("cfg")
            && a.parse_args::<syn::Meta>()
                .is_ok_and(|m| m.path().is_ident("test"))
    })
}

/// The value of a `#[path = "..."]` attribute.
fn path_attribute(attrs: &[syn::Attribute]) -> Option<String> {
    attrs.iter().find_map(|a| match &a.meta {
        syn::Meta::NameValue(nv) if nv.path.is_ident("path") => match &nv.value {
            syn::Expr::Lit(syn::ExprLit {
                lit: syn::Lit::Str(s),
                ..
            }) => Some(s.value()),
            _ => None,
        },
        _ => None,
    })
}

impl Tree {
    /// The module tree rooted at `root_file` (`src/lib.rs` or `src/main.rs`); `Err` names a
    /// file that cannot be read or parsed.
    pub(crate) fn load(root_file: &Path) -> Result<Tree, String> {
        let mut tree = Tree {
            modules: BTreeMap::new(),
        };
        let dir = root_file.parent().unwrap_or(Path::new(".")).to_path_buf();
        let items = parse(root_file)?;
        tree.add(Vec::new(), root_file, &dir, items, true)?;
        Ok(tree)
    }

    /// Adds module `path` of `file` with `items`; `dir` is where its `mod x;` files are.
    fn add(
        &mut self,
        path: Vec<String>,
        file: &Path,
        dir: &Path,
        items: Vec<syn::Item>,
        public: bool,
    ) -> Result<(), String> {
        let items: Vec<syn::Item> = items
            .into_iter()
            .filter(|i| !is_test(item_attrs(i)))
            .collect();
        for item in &items {
            let syn::Item::Mod(m) = item else { continue };
            let mut child = path.clone();
            child.push(m.ident.to_string());
            let child_public = matches!(m.vis, syn::Visibility::Public(_));
            match &m.content {
                Some((_, inner)) => {
                    self.add(
                        child,
                        file,
                        &dir.join(m.ident.to_string()),
                        inner.clone(),
                        child_public,
                    )?;
                }
                None => {
                    let name = m.ident.to_string();
                    let found = match path_attribute(&m.attrs) {
                        Some(p) => dir.join(p),
                        None if dir.join(format!("{name}.rs")).exists() => {
                            dir.join(format!("{name}.rs"))
                        }
                        None => dir.join(&name).join("mod.rs"),
                    };
                    let child_dir = if found.ends_with("mod.rs") {
                        found.parent().unwrap_or(dir).to_path_buf()
                    } else {
                        dir.join(&name)
                    };
                    let inner = parse(&found)?;
                    self.add(child, &found, &child_dir, inner, child_public)?;
                }
            }
        }
        self.modules.insert(
            path,
            Module {
                file: file.to_path_buf(),
                items,
                public,
            },
        );
        Ok(())
    }

    /// The module and the rest of the path that `segments`, written in module `from`, name:
    /// `crate`, `super` and `self` first, then child modules as far as they go, then through
    /// a `use` of the module reached that brings the next name in (a few steps at most).
    /// `None` for a path that starts outside the crate.
    pub(crate) fn resolve(
        &self,
        from: &[String],
        segments: &[String],
    ) -> Option<(Vec<String>, Vec<String>)> {
        self.resolve_depth(from, segments.to_vec(), 0).ok()
    }

    /// [`Tree::resolve`], or for a path that leads outside the crate (possibly through the
    /// crate's own `use`s) that path as last written (`Err`).
    pub(crate) fn resolve_or_external(
        &self,
        from: &[String],
        segments: &[String],
    ) -> Result<(Vec<String>, Vec<String>), Vec<String>> {
        self.resolve_depth(from, segments.to_vec(), 0)
    }

    fn resolve_depth(
        &self,
        from: &[String],
        segments: Vec<String>,
        depth: usize,
    ) -> Result<(Vec<String>, Vec<String>), Vec<String>> {
        let mut at: Vec<String> = from.to_vec();
        let mut i = 0;
        match segments.first().map(String::as_str) {
            Some("crate") => {
                at.clear();
                i = 1;
            }
            Some("self") => i = 1,
            Some("super") => {
                while segments.get(i).is_some_and(|s| s == "super") {
                    at.pop().ok_or_else(|| segments.clone())?;
                    i += 1;
                }
            }
            Some(first) => {
                let mut child = at.clone();
                child.push(first.to_string());
                if !self.modules.contains_key(&child) && self.imported(&at, first).is_none() {
                    return Err(segments);
                }
            }
            None => return Err(segments),
        }
        while let Some(next) = segments.get(i) {
            let mut child = at.clone();
            child.push(next.clone());
            if self.modules.contains_key(&child) {
                at = child;
                i += 1;
                continue;
            }
            // A name the module brings in with a `use`: follow it (bounded).
            if depth < 4
                && let Some(mut full) = self.imported(&at, next)
            {
                full.extend(segments[i + 1..].iter().cloned());
                return self.resolve_depth(&at, full, depth + 1);
            }
            break;
        }
        Ok((at, segments[i..].to_vec()))
    }

    /// The path a `use` of module `at` gives `name` (the full written path), if one does.
    pub(crate) fn imported(&self, at: &[String], name: &str) -> Option<Vec<String>> {
        let module = self.modules.get(at)?;
        module.items.iter().find_map(|item| match item {
            syn::Item::Use(u) => use_paths(&u.tree)
                .into_iter()
                .find(|(alias, _)| alias == name)
                .map(|(_, path)| path),
            _ => None,
        })
    }
}

/// The `(name brought in, full path)` pairs of a use tree; a glob gives `("*", prefix)`.
pub(crate) fn use_paths(tree: &syn::UseTree) -> Vec<(String, Vec<String>)> {
    fn walk(tree: &syn::UseTree, prefix: &mut Vec<String>, out: &mut Vec<(String, Vec<String>)>) {
        match tree {
            syn::UseTree::Path(p) => {
                prefix.push(p.ident.to_string());
                walk(&p.tree, prefix, out);
                prefix.pop();
            }
            syn::UseTree::Name(n) => {
                let name = n.ident.to_string();
                if name == "self" {
                    if let Some(last) = prefix.last() {
                        out.push((last.clone(), prefix.clone()));
                    }
                } else {
                    let mut full = prefix.clone();
                    full.push(name.clone());
                    out.push((name, full));
                }
            }
            syn::UseTree::Rename(r) => {
                let mut full = prefix.clone();
                let name = r.ident.to_string();
                if name != "self" {
                    full.push(name);
                }
                out.push((r.rename.to_string(), full));
            }
            syn::UseTree::Glob(_) => out.push(("*".to_string(), prefix.clone())),
            syn::UseTree::Group(g) => {
                for t in &g.items {
                    walk(t, prefix, out);
                }
            }
        }
    }
    let mut out = Vec::new();
    walk(tree, &mut Vec::new(), &mut out);
    out
}

/// An item's attributes.
pub(crate) fn item_attrs(item: &syn::Item) -> &[syn::Attribute] {
    match item {
        syn::Item::Const(i) => &i.attrs,
        syn::Item::Enum(i) => &i.attrs,
        syn::Item::ExternCrate(i) => &i.attrs,
        syn::Item::Fn(i) => &i.attrs,
        syn::Item::ForeignMod(i) => &i.attrs,
        syn::Item::Impl(i) => &i.attrs,
        syn::Item::Macro(i) => &i.attrs,
        syn::Item::Mod(i) => &i.attrs,
        syn::Item::Static(i) => &i.attrs,
        syn::Item::Struct(i) => &i.attrs,
        syn::Item::Trait(i) => &i.attrs,
        syn::Item::TraitAlias(i) => &i.attrs,
        syn::Item::Type(i) => &i.attrs,
        syn::Item::Union(i) => &i.attrs,
        syn::Item::Use(i) => &i.attrs,
        _ => &[],
    }
}

/// The items of the Rust file `path`.
fn parse(path: &Path) -> Result<Vec<syn::Item>, String> {
    let text = fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    syn::parse_file(&text)
        .map(|f| f.items)
        .map_err(|e| format!("{}: does not parse: {e}", path.display()))
}
