//! `cargo xtask loc [CRATE…]`: the source lines of each crate's `src/` that are not test code
//! (every line of every `.rs` file under `src/`, blank lines and comments included, less the
//! lines of `#[cfg(test)]` items, found by parsing with `syn`, at any depth of inline modules).
//! The figure issue 40's line budget is stated in; `cargo xtask loc` with no crate counts every
//! crate under `crates/`; a crate given as a path (holding a `/`) is that directory's, so
//! another checkout can be counted with the same rule.

use std::path::Path;

use syn::spanned::Spanned;

use crate::modules::is_test;

/// The line ranges (1-based, inclusive) of the `#[cfg(test)]` items of `items`, recursing into
/// inline modules that are not themselves test code.
fn test_ranges(items: &[syn::Item], out: &mut Vec<(usize, usize)>) {
    for item in items {
        let attrs = crate::modules::item_attrs(item);
        if is_test(attrs) {
            let start = attrs
                .iter()
                .map(|a| a.span().start().line)
                .chain([item.span().start().line])
                .min()
                .unwrap_or(0);
            out.push((start, item.span().end().line));
        } else if let syn::Item::Mod(m) = item
            && let Some((_, inner)) = &m.content
        {
            test_ranges(inner, out);
        }
    }
}

/// The non-test lines of one file's text.
pub(crate) fn count_text(text: &str) -> Result<usize, String> {
    let file = syn::parse_file(text).map_err(|e| e.to_string())?;
    let mut ranges = Vec::new();
    test_ranges(&file.items, &mut ranges);
    let total = text.lines().count();
    let mut test = vec![false; total + 2];
    for (a, b) in ranges {
        test[a..=b.min(total)].fill(true);
    }
    Ok((1..=total).filter(|l| !test[*l]).count())
}

fn count_dir(dir: &Path) -> Result<usize, String> {
    let mut n = 0;
    let entries = std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    for e in entries {
        let p = e.map_err(|e| e.to_string())?.path();
        if p.is_dir() {
            n += count_dir(&p)?;
        } else if p.extension().is_some_and(|x| x == "rs") {
            let text = std::fs::read_to_string(&p).map_err(|e| format!("{}: {e}", p.display()))?;
            n += count_text(&text).map_err(|e| format!("{}: {e}", p.display()))?;
        }
    }
    Ok(n)
}

/// Prints `LOC <crate> <lines>` for each crate (all under `crates/` when none is named) and
/// `LOC total <lines>`.
pub(crate) fn command(root: &Path, crates: &[String]) -> Result<(), String> {
    let mut names: Vec<String> = crates.to_vec();
    if names.is_empty() {
        for e in std::fs::read_dir(root.join("crates")).map_err(|e| e.to_string())? {
            let e = e.map_err(|e| e.to_string())?;
            if e.path().join("src").is_dir() {
                names.push(e.file_name().to_string_lossy().into_owned());
            }
        }
        names.sort();
    }
    let mut total = 0;
    for name in &names {
        // A name with a `/` is a crate directory (another checkout's, to compare with).
        let src = if name.contains('/') {
            Path::new(name).join("src")
        } else {
            root.join("crates").join(name).join("src")
        };
        if !src.is_dir() {
            return Err(format!("no crate {name:?} under crates/"));
        }
        let n = count_dir(&src)?;
        println!("LOC {name} {n}");
        total += n;
    }
    println!("LOC total {total}");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::count_text;

    #[test]
    fn test_items_are_not_counted_whatever_their_strings_hold() {
        let text =
            "fn a() {}\n\n#[cfg(test)]\nmod tests {\n    const S: &str = \"{\";\n}\nfn b() {}\n";
        assert_eq!(count_text(text).expect("parses"), 3);
        let nested = "mod m {\n    fn a() {}\n    #[cfg(test)]\n    fn t() {}\n}\n";
        assert_eq!(count_text(nested).expect("parses"), 3);
    }
}
