//! The real kernel corpus: text printed by tinygrad's C renderer, TVM's `target="c"` and
//! OCANNL, kept beside the project (`../shared/corpus` from the workspace root, or
//! `$KCACHE_CORPUS`), each kernel with the names its renderer declares. Shared by the
//! corpus tests and the `canonical_key_corpus` bench (`#[path]`-included by both).
#![allow(dead_code)] // each includer uses part of it

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};

use canonical_text::Names;
use canonical_text::lexer::{TokenKind, tokenize};

/// One kernel of the corpus.
pub(crate) struct Kernel {
    /// `tinygrad`, `tvm` or `ocannl`.
    pub(crate) renderer: &'static str,
    /// Where it comes from: the file, and for tinygrad the record's workload and name.
    pub(crate) label: String,
    /// The kernel's own name, as its renderer names it (tinygrad's records only: the
    /// files of TVM and OCANNL hold several functions).
    pub(crate) name: Option<String>,
    pub(crate) text: String,
    /// The names the renderer declares (tinygrad: the record's `params`, `locals` and
    /// `ranges`; OCANNL: its node arrays `n<digits>`, beside the loop symbols and
    /// scope-locals every `Names` renames; TVM: none).
    pub(crate) names: Names,
    /// The compiler its renderer targets: `clang` for tinygrad's C renderer (whose
    /// vector types are clang's), `cc` for the others.
    pub(crate) compiler: &'static str,
}

/// The corpus directory, if it is there.
pub(crate) fn dir() -> Option<PathBuf> {
    let d = match std::env::var_os("KCACHE_CORPUS") {
        Some(d) => PathBuf::from(d),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/corpus"),
    };
    d.join("README.md").is_file().then_some(d)
}

/// Every kernel of the corpus at `dir`, in a fixed order.
pub(crate) fn load(dir: &Path) -> Vec<Kernel> {
    let mut out = Vec::new();
    for path in files(&dir.join("tinygrad")) {
        let file = std::fs::File::open(&path).expect("a corpus file opens");
        let lines = BufReader::new(flate2::read::GzDecoder::new(file)).lines();
        for line in lines {
            let line = line.expect("a corpus file is gzip'd UTF-8 JSON lines");
            let r: serde_json::Value = serde_json::from_str(&line).expect("a record is JSON");
            let field = |k: &str| r[k].as_str().unwrap_or_default().to_owned();
            let declared = ["params", "locals", "ranges"].iter().flat_map(|k| {
                r[*k]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|v| v.as_str().map(str::to_owned))
            });
            let name = field("name");
            out.push(Kernel {
                renderer: "tinygrad",
                label: format!(
                    "{} {} {} {name}",
                    file_name(&path),
                    field("workload"),
                    field("phase")
                ),
                names: Names::new().with_bound(declared),
                name: Some(name),
                text: field("src"),
                compiler: "clang",
            });
        }
    }
    for path in files(&dir.join("tvm")) {
        out.push(Kernel {
            renderer: "tvm",
            label: file_name(&path),
            name: None,
            text: std::fs::read_to_string(&path).expect("a TVM file is UTF-8"),
            names: Names::new(),
            compiler: "cc",
        });
    }
    for path in files(&dir.join("ocannl")) {
        let text = std::fs::read_to_string(&path).expect("an OCANNL file is UTF-8");
        let nodes: BTreeSet<String> = code_words(&text)
            .into_iter()
            .filter(|w| is_ocannl_node(w))
            .collect();
        out.push(Kernel {
            renderer: "ocannl",
            label: file_name(&path),
            name: None,
            names: Names::new().with_bound(nodes),
            text,
            compiler: "cc",
        });
    }
    out
}

fn files(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|rd| rd.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    v.sort();
    v
}

fn file_name(p: &Path) -> String {
    p.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// An OCANNL node array: `n`, digits, then nothing or `_` and a label.
fn is_ocannl_node(w: &str) -> bool {
    let rest = w.strip_prefix('n').unwrap_or_default();
    let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
    digits > 0 && (digits == rest.len() || rest.as_bytes()[digits] == b'_')
}

/// The identifiers of `text` in code (not in literals, comments, directives, attributes).
fn code_words(text: &str) -> Vec<String> {
    let src = text.as_bytes();
    tokenize(src)
        .iter()
        .filter(|t| t.kind == TokenKind::Ident)
        .map(|t| String::from_utf8_lossy(t.bytes(src)).into_owned())
        .collect()
}

/// A loop symbol `i<digits>` or a scope-local `v<digits>_…`: renamed whatever the names.
fn is_minted(w: &str) -> bool {
    let b = w.as_bytes();
    let digits = |from: usize| b[from..].iter().take_while(|c| c.is_ascii_digit()).count();
    match b.first() {
        Some(b'i') => b.len() >= 2 && digits(1) == b.len() - 1,
        Some(b'v') => {
            let d = digits(1);
            d > 0 && b.get(1 + d) == Some(&b'_')
        }
        _ => false,
    }
}

/// The kernel as its renderer would print it in another run: every name it owns (its
/// declared names, loop symbols and scope-locals) respelled, in code and as whole words in
/// comments, everywhere else (literals, directives, attributes) left alone. A loop symbol
/// `iN` becomes `i(N+100000)`, a scope-local `vN_x` becomes `v(N+100000)_x`, a declared
/// name gets a suffix `_r` (more `r`s until the spelling is new).
pub(crate) fn renamed_twin(k: &Kernel) -> Kernel {
    let src = k.text.as_bytes();
    let tokens = tokenize(src);
    let words: BTreeSet<String> = tokens
        .iter()
        .filter(|t| t.kind == TokenKind::Ident)
        .map(|t| String::from_utf8_lossy(t.bytes(src)).into_owned())
        .collect();
    let mut map: BTreeMap<String, String> = BTreeMap::new();
    let mut taken: BTreeSet<String> = words.clone();
    for w in &words {
        let fresh = if is_minted(w) {
            let digits: String = w[1..].chars().take_while(char::is_ascii_digit).collect();
            let n: u64 = digits.parse().unwrap_or(0);
            format!("{}{}{}", &w[..1], n + 100_000, &w[1 + digits.len()..])
        } else if k.names.bound.contains(w) {
            let mut f = format!("{w}_r");
            while taken.contains(&f) {
                f.push('r');
            }
            f
        } else {
            continue;
        };
        taken.insert(fresh.clone());
        map.insert(w.clone(), fresh);
    }
    let mut out = String::with_capacity(k.text.len() + 64);
    for t in &tokens {
        let piece = &k.text[t.start..t.end];
        match t.kind {
            TokenKind::Ident => out.push_str(map.get(piece).map_or(piece, String::as_str)),
            TokenKind::LineComment | TokenKind::BlockComment => {
                out.push_str(&respell_words(piece, &map))
            }
            _ => out.push_str(piece),
        }
    }
    let bound = k
        .names
        .bound
        .iter()
        .map(|b| map.get(b).cloned().unwrap_or_else(|| b.clone()));
    let mut names = Names::new().with_bound(bound);
    names.free = k.names.free.clone();
    names.keep = k.names.keep.clone();
    Kernel {
        renderer: k.renderer,
        label: format!("{} (renamed twin)", k.label),
        name: k.name.clone(),
        text: out,
        names,
        compiler: k.compiler,
    }
}

/// `k` with its own name respelled as a deduplicating renderer would (`E_4` becomes
/// `E_4n1`, tinygrad's spelling of a second kernel of one shape), in code and as a whole
/// word in comments; `None` when it has no own name.
pub(crate) fn own_name_respelled(k: &Kernel) -> Option<Kernel> {
    let name = k.name.as_deref()?;
    let src = k.text.as_bytes();
    let tokens = tokenize(src);
    let mut fresh = format!("{name}n1");
    while k.text.contains(&fresh) {
        fresh.push('1');
    }
    let map = BTreeMap::from([(name.to_owned(), fresh.clone())]);
    let mut out = String::with_capacity(k.text.len() + 16);
    for t in &tokens {
        let piece = &k.text[t.start..t.end];
        match t.kind {
            TokenKind::Ident => out.push_str(map.get(piece).map_or(piece, String::as_str)),
            TokenKind::LineComment | TokenKind::BlockComment => {
                out.push_str(&respell_words(piece, &map))
            }
            _ => out.push_str(piece),
        }
    }
    Some(Kernel {
        renderer: k.renderer,
        label: format!("{} (own name respelled)", k.label),
        name: Some(fresh),
        text: out,
        names: k.names.clone(),
        compiler: k.compiler,
    })
}

/// `s` with every whole word (a maximal run of letters, digits and `_`) that `map` holds
/// respelled.
fn respell_words(s: &str, map: &BTreeMap<String, String>) -> String {
    let mut out = String::with_capacity(s.len());
    let mut word = String::new();
    let flush = |word: &mut String, out: &mut String| {
        out.push_str(map.get(word.as_str()).map_or(word.as_str(), String::as_str));
        word.clear();
    };
    for c in s.chars() {
        if c.is_ascii_alphanumeric() || c == '_' {
            word.push(c);
        } else {
            flush(&mut word, &mut out);
            out.push(c);
        }
    }
    flush(&mut word, &mut out);
    out
}

/// Offsets in code where one byte can be changed to make a different kernel that still
/// tokenizes alike: digits of numbers, and `+`, `-`, `*`, `<` operators. With the byte
/// that replaces it.
pub(crate) fn mutation_points(text: &str) -> Vec<(usize, u8)> {
    let src = text.as_bytes();
    let mut out = Vec::new();
    for t in tokenize(src) {
        match t.kind {
            TokenKind::Number => {
                for (i, &b) in src.iter().enumerate().take(t.end).skip(t.start) {
                    if b.is_ascii_digit() {
                        out.push((i, if b == b'9' { b'8' } else { b + 1 }));
                    }
                }
            }
            TokenKind::Punct if t.end == t.start + 1 => {
                let to = match src[t.start] {
                    b'+' => b'-',
                    b'-' => b'+',
                    b'*' => b'+',
                    b'<' => b'>',
                    _ => continue,
                };
                out.push((t.start, to));
            }
            _ => {}
        }
    }
    out
}
