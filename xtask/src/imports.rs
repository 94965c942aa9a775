//! The import-circle rule: inside a crate, the files that reach each other through their
//! paths (a strongly connected component of the file graph) are at most [`MAX_CIRCLE`].
//!
//! The graph has one node per source file and an edge from a file to every other file
//! holding a module that one of its paths names: `use` trees (`use crate::a::b`,
//! `use super::x`, `use child::y`) and paths in code and types (`crate::a::f()`,
//! `super::T`), each resolved through child modules and through the `use`s of the module
//! reached (so `crate::X`, re-exported at the root from `a`, is an edge to `a`'s file). What
//! [`crate::modules`] leaves out (test items, macro bodies, glob imports) adds no edge.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use syn::visit::Visit;

use crate::modules::{Tree, use_paths};

/// The most files one import circle may hold.
pub(crate) const MAX_CIRCLE: usize = 3;

/// The file graph of a crate: for each file, the files it names (no self-edges).
pub(crate) fn file_graph(tree: &Tree) -> BTreeMap<PathBuf, BTreeSet<PathBuf>> {
    let mut graph: BTreeMap<PathBuf, BTreeSet<PathBuf>> = BTreeMap::new();
    for (path, module) in &tree.modules {
        let mut paths = Paths::default();
        for item in &module.items {
            match item {
                syn::Item::Use(u) => {
                    for (_, full) in use_paths(&u.tree) {
                        paths.0.push(full);
                    }
                }
                // A child module's own items are its module's.
                syn::Item::Mod(_) => {}
                item => paths.visit_item(item),
            }
        }
        let from = graph.entry(module.file.clone()).or_default();
        for written in paths.0 {
            if let Some((target, _)) = tree.resolve(path, &written)
                && let Some(to) = tree.modules.get(&target)
                && to.file != module.file
            {
                from.insert(to.file.clone());
            }
        }
    }
    graph
}

/// Every path written in code or types.
#[derive(Default)]
struct Paths(Vec<Vec<String>>);

impl<'ast> Visit<'ast> for Paths {
    fn visit_path(&mut self, path: &'ast syn::Path) {
        if path.leading_colon.is_none() && path.segments.len() > 1 {
            self.0
                .push(path.segments.iter().map(|s| s.ident.to_string()).collect());
        }
        syn::visit::visit_path(self, path);
    }

    fn visit_item_mod(&mut self, _: &'ast syn::ItemMod) {}
}

/// The strongly connected components of `graph` (Tarjan), each sorted, in a fixed order.
pub(crate) fn components(graph: &BTreeMap<PathBuf, BTreeSet<PathBuf>>) -> Vec<Vec<PathBuf>> {
    struct State<'g> {
        graph: &'g BTreeMap<PathBuf, BTreeSet<PathBuf>>,
        index: BTreeMap<&'g PathBuf, usize>,
        low: BTreeMap<&'g PathBuf, usize>,
        stack: Vec<&'g PathBuf>,
        on_stack: BTreeSet<&'g PathBuf>,
        out: Vec<Vec<PathBuf>>,
    }
    fn visit<'g>(s: &mut State<'g>, v: &'g PathBuf) {
        let n = s.index.len();
        s.index.insert(v, n);
        s.low.insert(v, n);
        s.stack.push(v);
        s.on_stack.insert(v);
        for w in s.graph.get(v).into_iter().flatten() {
            if !s.index.contains_key(w) {
                visit(s, w);
                let low = s.low[v].min(s.low[w]);
                s.low.insert(v, low);
            } else if s.on_stack.contains(w) {
                let low = s.low[v].min(s.index[w]);
                s.low.insert(v, low);
            }
        }
        if s.low[v] == s.index[v] {
            let mut component = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack.remove(w);
                component.push(w.clone());
                if w == v {
                    break;
                }
            }
            component.sort();
            s.out.push(component);
        }
    }
    let mut state = State {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in graph.keys() {
        if !state.index.contains_key(v) {
            visit(&mut state, v);
        }
    }
    state.out.sort();
    state.out
}

/// A shortest cycle from `start` back to it inside `component`, as a path of files.
fn cycle_through(
    graph: &BTreeMap<PathBuf, BTreeSet<PathBuf>>,
    component: &[PathBuf],
    start: &PathBuf,
) -> Vec<PathBuf> {
    let mut previous: BTreeMap<&PathBuf, &PathBuf> = BTreeMap::new();
    let mut queue = std::collections::VecDeque::from([start]);
    while let Some(v) = queue.pop_front() {
        for w in graph.get(v).into_iter().flatten() {
            if !component.contains(w) {
                continue;
            }
            if w == start {
                let mut cycle = vec![start.clone()];
                let mut at = v;
                while at != start {
                    cycle.push(at.clone());
                    at = previous[at];
                }
                cycle.push(start.clone());
                cycle.reverse();
                return cycle;
            }
            if !previous.contains_key(w) {
                previous.insert(w, v);
                queue.push_back(w);
            }
        }
    }
    Vec::new()
}

/// The problems of the crate whose root file is `root_file`: one per import circle wider
/// than [`MAX_CIRCLE`] files, naming its files and one cycle through them.
pub(crate) fn circle_problems(root: &Path, root_file: &Path) -> Vec<String> {
    let rel = |p: &Path| p.strip_prefix(root).unwrap_or(p).display().to_string();
    let tree = match Tree::load(root_file) {
        Ok(tree) => tree,
        Err(e) => return vec![e],
    };
    let graph = file_graph(&tree);
    components(&graph)
        .into_iter()
        .filter(|c| c.len() > MAX_CIRCLE)
        .map(|c| {
            let cycle: Vec<String> = cycle_through(&graph, &c, &c[0])
                .iter()
                .map(|p| rel(p))
                .collect();
            let files: Vec<String> = c.iter().map(|p| rel(p)).collect();
            format!(
                "an import circle of {} files (more than {MAX_CIRCLE}): {}; for example {}",
                c.len(),
                files.join(", "),
                cycle.join(" -> ")
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A crate in a temporary directory: `files` as `(path under src, text)`.
    fn write_crate(files: &[(&str, &str)]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().expect("temporary directory");
        for (path, text) in files {
            let path = dir.path().join("src").join(path);
            std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
            std::fs::write(path, text).expect("write");
        }
        dir
    }

    /// Four files in a ring (through a `use`, a path in code, `super::` and a root
    /// re-export) fail and the message shows the cycle; cutting one edge passes.
    #[test]
    fn a_circle_of_four_files_fails_and_three_pass() {
        let ring = |d_names_a: &str| {
            write_crate(&[
                ("lib.rs", "mod a;\nmod b;\nmod c;\nmod d;\npub use a::A;\n"),
                ("a.rs", "use crate::b::B;\npub struct A;\n"),
                ("b.rs", "pub struct B;\nfn f() { crate::c::g(); }\n"),
                ("c.rs", "pub fn g() { let _ = super::d::D; }\n"),
                ("d.rs", &format!("pub struct D;\n{d_names_a}\n")),
            ])
        };
        let bad = ring("fn h(_: crate::A) {}");
        let problems = circle_problems(bad.path(), &bad.path().join("src/lib.rs"));
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(problems[0].contains("4 files"), "{problems:?}");
        assert!(
            problems[0].contains("src/a.rs -> src/b.rs -> src/c.rs -> src/d.rs -> src/a.rs"),
            "{problems:?}"
        );
        // Test code makes no edge: the same ring closed only by a test is no circle.
        let tested = ring("#[cfg(test)]\nmod tests { fn h(_: crate::A) {} }");
        assert!(circle_problems(tested.path(), &tested.path().join("src/lib.rs")).is_empty());
        let three = write_crate(&[
            ("lib.rs", "mod a;\nmod b;\nmod c;\n"),
            ("a.rs", "use crate::b::B;\npub struct A;\n"),
            ("b.rs", "pub struct B;\nfn f() { crate::c::g(); }\n"),
            ("c.rs", "pub fn g() { let _ = crate::a::A; }\n"),
        ]);
        assert!(circle_problems(three.path(), &three.path().join("src/lib.rs")).is_empty());
    }
}
