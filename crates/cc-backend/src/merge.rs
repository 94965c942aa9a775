//! The merged unit: kernels of one program that provably cannot affect each other share
//! one translation unit (the prelude parsed once, one compiler process), instead of one
//! unit each (the rule as a whole: [`CcBackend`](crate::CcBackend)'s docs).
//!
//! The rule says what is allowed, never what is denied, and reads text as the compiler
//! does: a kernel is merged only when its prelude ([`prelude_mergeable`]), its options
//! ([`options_mergeable`]), its text as written ([`text_mergeable`]) and its text as the
//! compiler's preprocessor reads it ([`expanded_mergeable`]) each pass, and when no variable
//! that adds include directories is set (so `<math.h>` is the system's). Whatever a body
//! then declares is scoped to its own function, and nothing is at file scope but the
//! kernels' prototypes, entries and definitions. [`merged_unit`] writes every prototype and
//! entry first, then the prelude, then each text after the `#line 1 "kernel.c"` its own
//! unit has too, so `__LINE__`, `__FILE__`, an `assert`'s message and a diagnostic's line
//! are those of its own unit. When in doubt, a kernel is compiled alone; a merged unit
//! that fails to compile or to link falls back to one unit per kernel.

use std::collections::HashSet;
use std::sync::Arc;

use canonical_text::lexer::{TokenKind, tokenize};

use crate::observers::PreludeNames;
use crate::signature::{RESERVED_INFIX, is_c_identifier};
use crate::source::Source;
use crate::toolchain::TEXT_LINE;
use crate::words::{
    C_KEYWORDS, PreludeFacts, TYPE_KEYWORDS, allowed_keyword, significant, word_allowed, words,
};

/// The headers a mergeable prelude may include (C standard headers declaring functions,
/// types and macros, no object a kernel could write).
pub(crate) const STANDARD_HEADERS: &[&str] = &[
    "math.h",
    "stddef.h",
    "stdint.h",
    "stdbool.h",
    "float.h",
    "limits.h",
];

/// Whether `prelude` is nothing but blank lines and `#include <h>` of [`STANDARD_HEADERS`].
pub(crate) fn prelude_mergeable(prelude: &str) -> bool {
    prelude.lines().all(|line| {
        let line = line.trim_matches([' ', '\t']);
        if line.is_empty() {
            return true;
        }
        let Some(rest) = line.strip_prefix("#include") else {
            return false;
        };
        let rest = rest.trim_start_matches([' ', '\t']);
        rest.strip_prefix('<')
            .and_then(|r| r.strip_suffix('>'))
            .is_some_and(|h| STANDARD_HEADERS.contains(&h))
    })
}

/// Whether every option is of a form that cannot put anything at file scope (see the
/// module docs).
pub(crate) fn options_mergeable(options: &[String]) -> bool {
    options.iter().all(|o| {
        let o = o.as_str();
        let define_ok = |v: &str| {
            !v.is_empty()
                && !v.contains('#')
                && !v.contains("_Pragma")
                && !v.contains("__COUNTER__")
                && !v.contains("??")
                && !v.contains("%:")
        };
        (o.starts_with("-O") && !o.contains(','))
            || (o.starts_with("-f") && !o.contains("plugin") && !o.contains("preprocessed"))
            || (o.starts_with("-m") && o.len() > 2)
            || o.starts_with("-std=")
            || (o.starts_with("-W")
                && !o.starts_with("-Wp,")
                && !o.starts_with("-Wa,")
                && !o.starts_with("-Wl,"))
            || o == "-w"
            || (o.starts_with("-g") && !o.contains(','))
            || (o.starts_with("-D") && define_ok(&o[2..]))
            || (o.starts_with("-U") && is_c_identifier(&o[2..]))
            || o.starts_with("-pedantic")
    })
}

/// Punctuators a merged text may not hold: a directive's `#` and `##`, and the digraphs
/// (which would spell them, or brackets the shape check reads by their usual spelling).
const REFUSED_PUNCT: &[&[u8]] = &[b"#", b"##", b"%:", b"%:%:", b"<:", b":>", b"<%", b"%>"];

/// Whether the text of a kernel, as written, may go into a merged unit (the first of the
/// two checks; the second, [`expanded_mergeable`], reads what the compiler made of it):
/// the lexer reads it exactly as the compiler does (no splice in any form, no lone carriage
/// return, trigraph, NUL, `$` or byte outside ASCII: [`canonical_text::inexact_reading`]),
/// every comment and literal is closed, it holds no directive, attribute, digraph or byte
/// that starts no token, and each word is a macro of `facts` that is safe to expand (see
/// [`PreludeFacts`]) or, when no macro has that name, [`word_allowed`].
///
/// So nothing in the text changes the preprocessor's state (no directive, no `_Pragma`
/// however reached, no `__COUNTER__`): what the compiler reads of each text in a merged
/// unit is what it reads of it alone.
pub(crate) fn text_mergeable(text: &str, facts: &PreludeFacts) -> bool {
    let src = text.as_bytes();
    if canonical_text::inexact_reading(src).is_some() {
        return false;
    }
    tokenize(src).iter().all(|t| {
        let b = t.bytes(src);
        match t.kind {
            TokenKind::Whitespace | TokenKind::Number | TokenKind::LineComment => true,
            TokenKind::BlockComment => b.len() >= 4 && b.ends_with(b"*/"),
            TokenKind::Str | TokenKind::Char => {
                let quote = if t.kind == TokenKind::Str {
                    b'"'
                } else {
                    b'\''
                };
                let open = b.iter().position(|&c| c == quote);
                open.is_some_and(|o| b.len() >= o + 2 && b.ends_with(&[quote]))
                    && !b.contains(&b'\n')
            }
            TokenKind::Punct => !REFUSED_PUNCT.contains(&b),
            TokenKind::Ident => match std::str::from_utf8(b) {
                Ok(w) if facts.macros.contains(w) => facts.safe_macros.contains(w),
                _ => word_allowed(b),
            },
            TokenKind::Preprocessor | TokenKind::Attribute | TokenKind::Other => false,
        }
    })
}

/// Whether the tokens the compiler's preprocessor made of one text (`expanded`: its part
/// of the `-E` output, without line markers) are exactly one definition `void <symbol>(…)
/// { … }` whose meaning cannot depend on a companion, judged by what is allowed:
///
/// - every word is [`word_allowed`] (no `extern`, `inline`, `asm`, `_Noreturn`,
///   attribute, `_Pragma` or other reserved name but the compiler's built-ins);
/// - no directive (`#pragma` included), digraph, `[[` or byte that starts no token;
/// - a word right before `(` is a keyword, a built-in, or a function `facts` says the
///   prelude declares: the text calls nothing else, and declares no function (a
///   block-scope function declaration names the file-scope function, and an attribute or
///   type it gives reaches every companion's calls);
/// - a `)` right before `(` closes a cast (a type of keywords, the prelude's type names,
///   tags, `*` and brackets): so no parenthesized function declarator, `T (f)(int)`;
/// - the parameter list holds no brace, the body's braces balance and nothing follows it.
pub(crate) fn expanded_mergeable(expanded: &[u8], symbol: &str, facts: &PreludeFacts) -> bool {
    let tokens = significant(expanded);
    let text_of = |i: usize| tokens.get(i).map(|&(_, t)| t);
    // The shape: `void` symbol `(` params `)` `{` body `}`, nothing after.
    if text_of(0) != Some(b"void")
        || text_of(1) != Some(symbol.as_bytes())
        || text_of(2) != Some(b"(")
    {
        return false;
    }
    // The parameter list holds no brace or `;`; the body's braces close at the last token.
    let Some(params_end) = closing(&tokens, 2, b"(", b")", &[b"{", b"}", b";"]) else {
        return false;
    };
    if text_of(params_end + 1) != Some(b"{")
        || closing(&tokens, params_end + 1, b"{", b"}", &[]) != Some(tokens.len() - 1)
    {
        return false;
    }
    // Every token, from the parameters on.
    tokens
        .iter()
        .enumerate()
        .skip(2)
        .all(|(i, &(kind, t))| match kind {
            TokenKind::Whitespace
            | TokenKind::LineComment
            | TokenKind::BlockComment
            | TokenKind::Number
            | TokenKind::Str
            | TokenKind::Char => true,
            TokenKind::Punct => {
                let attribute = t == b"[" && text_of(i + 1) == Some(b"[");
                let call_of_parenthesized =
                    t == b")" && text_of(i + 1) == Some(b"(") && !closes_cast(&tokens, i, facts);
                !(REFUSED_PUNCT.contains(&t) || attribute || call_of_parenthesized)
            }
            TokenKind::Ident => {
                word_allowed(t)
                    && !std::str::from_utf8(t).is_ok_and(|w| facts.function_types.contains(w))
                    && (text_of(i + 1) != Some(b"(") || callable(t, facts))
            }
            TokenKind::Preprocessor | TokenKind::Attribute | TokenKind::Other => false,
        })
}

/// The position of the token closing the `open` at `start` (nesting counted), or `None` when
/// none does or a token of `refused` comes first.
fn closing(
    tokens: &[(TokenKind, &[u8])],
    start: usize,
    open: &[u8],
    close: &[u8],
    refused: &[&[u8]],
) -> Option<usize> {
    let mut depth = 0usize;
    for (i, &(_, t)) in tokens.iter().enumerate().skip(start) {
        if t == open {
            depth += 1;
        } else if t == close {
            depth -= 1;
            if depth == 0 {
                return Some(i);
            }
        } else if refused.contains(&t) {
            return None;
        }
    }
    None
}

/// Whether a merged text may put `(` right after the word `w`: a keyword (its own
/// grammar, judged with the other rules), a built-in, or a function the prelude declares.
fn callable(w: &[u8], facts: &PreludeFacts) -> bool {
    let Ok(s) = std::str::from_utf8(w) else {
        return false;
    };
    C_KEYWORDS.contains(&s)
        || allowed_keyword(s)
        || s.starts_with("__builtin_")
        || facts.functions.contains(s)
}

/// Whether the `)` at `close` ends a cast: what lies between it and its `(` is only type
/// keywords, the prelude's type names, tags (a word after `struct`, `union` or `enum`),
/// `*`, brackets and numbers.
fn closes_cast(tokens: &[(TokenKind, &[u8])], close: usize, facts: &PreludeFacts) -> bool {
    let mut depth = 0usize;
    let mut i = close;
    loop {
        let (kind, t) = tokens[i];
        match t {
            b")" => depth += 1,
            b"(" => {
                depth -= 1;
                if depth == 0 {
                    return true;
                }
            }
            b"*" | b"[" | b"]" => {}
            _ if kind == TokenKind::Number => {}
            _ if kind == TokenKind::Ident => {
                let s = std::str::from_utf8(t).unwrap_or("");
                let tag = i > 0 && matches!(tokens[i - 1].1, b"struct" | b"union" | b"enum");
                if !(TYPE_KEYWORDS.contains(&s)
                    || matches!(s, "struct" | "union" | "enum")
                    || facts.typedefs.contains(s)
                    || tag)
                {
                    return false;
                }
            }
            _ => return false,
        }
        if i == 0 {
            return false;
        }
        i -= 1;
    }
}

/// The file name each candidate text follows in the unit [`check_unit`] writes, so its
/// part of the preprocessed output can be told apart (never a unit's: only the check
/// preprocesses it).
fn region_name(n: usize) -> String {
    format!("kcache-merge-{n}")
}

/// The unit the merge check preprocesses: the prelude, then each text of `candidates`
/// (positions in `kernels`) after a `#line` naming it ([`region_name`]).
pub(crate) fn check_unit(kernels: &[(&str, &Source)], candidates: &[usize]) -> String {
    let mut unit = String::new();
    if let Some(&first) = candidates.first() {
        unit.push_str(&kernels[first].1.prelude);
        unit.push('\n');
    }
    for (n, &m) in candidates.iter().enumerate() {
        unit.push_str(&format!("#line 1 \"{}\"\n", region_name(n)));
        unit.push_str(&kernels[m].1.text);
        unit.push('\n');
    }
    unit
}

/// The candidates (positions in `kernels`, as given to [`check_unit`]) whose part of the
/// preprocessor's output `preprocessed` (`-E` of that unit, line markers kept) is
/// [`expanded_mergeable`]. A part holding any other line starting with `#` than a line
/// marker (a `#pragma` the expansion made), or missing, is refused.
pub(crate) fn mergeable_after_expansion(
    kernels: &[(&str, &Source)],
    candidates: &[usize],
    preprocessed: &[u8],
    facts: &PreludeFacts,
) -> Vec<usize> {
    let names: Vec<String> = (0..candidates.len()).map(region_name).collect();
    let mut parts: Vec<Option<Vec<u8>>> = vec![None; candidates.len()];
    let mut refused = vec![false; candidates.len()];
    let mut current: Option<usize> = None;
    for line in preprocessed.split(|&b| b == b'\n') {
        let trimmed = line.trim_ascii_start();
        if trimmed.first() == Some(&b'#') {
            // A line marker: `# <line> "<file>" <flags>`.
            let rest = trimmed[1..].trim_ascii_start();
            if rest.first().is_some_and(u8::is_ascii_digit) {
                let file = rest
                    .iter()
                    .position(|&b| b == b'"')
                    .and_then(|q| {
                        let after = &rest[q + 1..];
                        after.iter().position(|&b| b == b'"').map(|e| &after[..e])
                    })
                    .unwrap_or(b"");
                current = names.iter().position(|n| n.as_bytes() == file);
            } else if let Some(c) = current {
                refused[c] = true;
            }
            continue;
        }
        if let Some(c) = current {
            let part = parts[c].get_or_insert_with(Vec::new);
            part.extend_from_slice(line);
            part.push(b'\n');
        }
    }
    candidates
        .iter()
        .enumerate()
        .filter(|&(n, &m)| {
            !refused[n]
                && parts[n]
                    .as_deref()
                    .is_some_and(|p| expanded_mergeable(p, kernels[m].0, facts))
        })
        .map(|(_, &m)| m)
        .collect()
}

/// The kernels of a program (`(symbol, source)` in order, one option list) that may go
/// into merged units before the compiler expanded them: those whose prelude is
/// [`prelude_mergeable`] and equal to the others', whose text is [`text_mergeable`] under
/// `facts` (what the compiler said of that prelude and options; `None`: it could not
/// preprocess it, and nothing merges) and names no other kernel of the program nor any
/// generated entry. Empty unless at least two qualify, or when the options or
/// `include_env_set` (a variable of [`INCLUDE_ENV`] set) rule merging out.
pub(crate) fn candidates(
    kernels: &[(&str, &Source)],
    options: &[String],
    include_env_set: bool,
    facts: impl Fn(&str) -> Option<Arc<PreludeNames>>,
) -> Vec<usize> {
    if include_env_set || !options_mergeable(options) || kernels.len() < 2 {
        return Vec::new();
    }
    let symbols: HashSet<&str> = kernels.iter().map(|(s, _)| *s).collect();
    // A definition naming a kernel (`-Dk2=fused_2`) could reach a companion through it.
    let defines_a_kernel = options.iter().any(|o| {
        o.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .any(|w| symbols.contains(w) || w.contains(RESERVED_INFIX))
    });
    if defines_a_kernel {
        return Vec::new();
    }
    let Some(prelude) = kernels
        .iter()
        .map(|(_, s)| s.prelude.as_str())
        .find(|p| prelude_mergeable(p))
    else {
        return Vec::new();
    };
    let Some(learned) = facts(prelude) else {
        return Vec::new();
    };
    let mut chosen: Vec<usize> = Vec::new();
    for (position, (symbol, source)) in kernels.iter().enumerate() {
        if source.prelude != prelude || !text_mergeable(&source.text, &learned.merge) {
            continue;
        }
        let names_another = words(source.text.as_bytes())
            .into_iter()
            .any(|w| (w != *symbol && symbols.contains(w)) || w.contains(RESERVED_INFIX));
        if names_another {
            continue;
        }
        chosen.push(position);
    }
    if chosen.len() < 2 {
        chosen.clear();
    }
    chosen
}

/// The most kernels one merged unit holds: a program's merged kernels are cut into
/// `ceil(n / MERGED_UNIT_KERNELS)` units of sizes differing by at most one, balanced by
/// the length of their texts ([`merged_groups`]), so a program's merged units can be
/// compiled concurrently and the longest takes about as long as the others. The cut
/// depends on nothing but the kernels (never on the machine's cores): one program's
/// kernels always make the same units.
pub(crate) const MERGED_UNIT_KERNELS: usize = 32;

/// `members` (positions, in kernel order) cut into merged units (see
/// [`MERGED_UNIT_KERNELS`]) by [`kernel_cache::balanced`] over `cost` (a kernel's text
/// length): each unit in kernel order, the units ordered by their first member. Every
/// unit holds at least two kernels when `members` does; empty for empty `members`.
pub(crate) fn merged_groups(members: &[usize], cost: impl Fn(usize) -> u64) -> Vec<Vec<usize>> {
    let units = members.len().div_ceil(MERGED_UNIT_KERNELS);
    if units == 0 {
        return Vec::new();
    }
    kernel_cache::balanced(units, members, |&m| cost(m))
}

/// `f(0)`, …, `f(n - 1)`, in that order, computed on up to as many threads as the machine
/// has cores (each index taken once, in increasing order).
pub(crate) fn concurrently<T: Send>(n: usize, f: impl Fn(usize) -> T + Sync) -> Vec<T> {
    let threads = std::thread::available_parallelism()
        .map_or(1, std::num::NonZeroUsize::get)
        .min(n);
    if threads <= 1 {
        return (0..n).map(f).collect();
    }
    let next = std::sync::atomic::AtomicUsize::new(0);
    let mut done: Vec<(usize, T)> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(|| {
                    let mut mine = Vec::new();
                    loop {
                        let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        if i >= n {
                            break mine;
                        }
                        mine.push((i, f(i)));
                    }
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|w| {
                w.join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
            })
            .collect()
    });
    done.sort_by_key(|(i, _)| *i);
    done.into_iter().map(|(_, t)| t).collect()
}

/// The merged translation unit of `members` (positions in `kernels`): every prototype and
/// entry, the (shared) prelude, then each text after `#line 1 "kernel.c"`, as in its
/// own unit.
pub(crate) fn merged_unit(kernels: &[(&str, &Source)], members: &[usize]) -> String {
    let mut unit = String::new();
    for &m in members {
        let (symbol, source) = kernels[m];
        unit.push_str(&source.signature.prototype(symbol));
        unit.push('\n');
        unit.push_str(&source.signature.entry(symbol));
        unit.push('\n');
    }
    if let Some(&first) = members.first() {
        unit.push_str(&kernels[first].1.prelude);
        unit.push('\n');
    }
    for &m in members {
        unit.push_str(TEXT_LINE);
        unit.push('\n');
        unit.push_str(&kernels[m].1.text);
        unit.push('\n');
    }
    unit
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A small prelude's facts: a safe macro, macros reaching `_Pragma`, an asm label and
    /// `__COUNTER__` (directly or through another), a function and two type names.
    fn facts() -> PreludeFacts {
        PreludeFacts::learn(
            "#define ONE 1\n#define TWICE(x) ((x) + (x))\n#define ISNAN(x) __builtin_isnan (x)\n\
             #define WARN(m) _Pragma(#m)\n#define LOUD(x) WARN(x) x\n#define REDIR(n) n __asm__(\"other\")\n\
             #define CNT __COUNTER__\n#define C64(c) c ## L\n",
            b"extern float expf (float __x) __attribute__ ((__nothrow__));\n\
              typedef float float_t;\ntypedef struct { int a; } pair_t;\n\
              typedef unsigned char fn_t (void);\n",
        )
    }

    #[test]
    fn texts_that_may_merge_and_those_that_may_not() {
        let f = facts();
        let ok = "void k(float *o, int n) { /* } */ for (int i = 0; i < n; ++i) o[i] = ONE + \
                  TWICE(1.5e+3f) + ISNAN(o[i]) + C64(1); \"}\"; __LINE__; }\n// end\n";
        assert!(text_mergeable(ok, &f));
        for bad in [
            "#define X 1\nvoid k(void) {}",
            "void k(void) { _Pragma(\"GCC optimize(\\\"O0\\\")\") }",
            "void k(void) { LOUD(1); }",
            "void k(void) { WARN(x); }",
            "void k(void) { int REDIR(x); }",
            "void k(void) { int a = CNT; }",
            "void k(void) { int a = __COUNTER__; }",
            "void k(void) { asm(\"nop\"); }",
            "void k(void) { extern float expf(float); }",
            "void k(void) { _Noreturn void f(void); }",
            "void k(void) { inline int f(void); }",
            "__attribute__((noinline)) void k(void) { }",
            "void k(void) { [[gnu::const]] float expf(float); }",
            "void k(void) { /* ",
            "void k(void) { \"x }",
            "void k(void) %: ",
            "void k(void) <% %>",
            "void k(void) { int a = 1 \\\n; }",
            "void k(void) { int a = 1; } // x \\ \n int b;",
            "void k(void) { int a = 1; } // x\rint b;",
            "void k(void) { int a = 1; } \\",
            "void k(void) { int a = 1; } ??=",
        ] {
            assert!(!text_mergeable(bad, &f), "{bad:?}");
        }
    }

    #[test]
    fn what_the_compiler_made_of_a_text_merges_only_as_one_void_definition() {
        let f = facts();
        let ok = [
            "void k(float *o, int n) { for (int i = 0; i < n; ++i) o[i] = expf((float)(o[i])); }",
            "void k(float *o) { static float acc; typedef int T; struct S { T x; }; o[0] = (float_t)(acc) + sizeof(struct S) + __builtin_sqrtf(2.0f); }",
            "void k(float *o) { float a[2][2] = {{0}}; o[0] = a[1][0] + (pair_t *)(0) == 0; }",
            "void k(void) { if (1) { } else { } }",
        ];
        for t in ok {
            assert!(expanded_mergeable(t.as_bytes(), "k", &f), "{t}");
        }
        for bad in [
            "void j(void) { }",
            "int k(void) { return 0; }",
            "void k(void) { } int x;",
            "void k(void) { } void k2(void) { }",
            "void k(void) { } }",
            "void k(void) {",
            "void k(struct s { int x; } *p) { }",
            "void k(void) { double foo(double); }",
            "void k(void) { double (foo)(double); }",
            "void k(void) { float y = undeclared(1.0f); }",
            "void k(void) { float (*fp)(float) = 0; }",
            "void k(void) { k(); }",
            "void k(void) { extern int e; }",
            "void k(void) { __asm__(\"nop\"); }",
            "void k(void) { int x __attribute__((aligned(8))); }",
            "void k(void) { [[gnu::unused]] int x; }",
            "void k(void) { int x; x = __COUNTER__; }",
            "void k(void) { fn_t atoi; }",
            "void k(void) { typedef unsigned char F(); F atoi; }",
        ] {
            assert!(!expanded_mergeable(bad.as_bytes(), "k", &f), "{bad}");
        }
    }

    #[test]
    fn the_prelude_facts_are_read_from_the_compiler_output() {
        let f = facts();
        assert!(f.functions.contains("expf"));
        assert!(f.typedefs.contains("float_t") && f.typedefs.contains("pair_t"));
        assert!(f.function_types.contains("fn_t") && !f.functions.contains("fn_t"));
        for safe in ["ONE", "TWICE", "ISNAN", "C64"] {
            assert!(f.safe_macros.contains(safe), "{safe}");
        }
        for unsafe_ in ["WARN", "LOUD", "REDIR", "CNT"] {
            assert!(
                f.macros.contains(unsafe_) && !f.safe_macros.contains(unsafe_),
                "{unsafe_}"
            );
        }
    }

    #[test]
    fn parts_of_the_preprocessed_unit_are_told_apart_by_their_line_markers() {
        let f = facts();
        let sig = crate::Signature::new();
        let a = Source::new("void a(void) { }", sig.clone());
        let b = Source::new("void b(void) { }", sig.clone());
        let c = Source::new("void c(void) { }", sig);
        let kernels = [("a", &a), ("b", &b), ("c", &c)];
        let out = b"# 1 \"kernel.c\"\nint prelude;\n# 1 \"kcache-merge-0\"\nvoid a(void) {\n# 1 \"kcache-merge-0\" 3 4\n}\n\
                    # 1 \"kcache-merge-1\"\nvoid b(void) {\n#pragma GCC optimize(\"O0\")\n}\n";
        // `a` passes; `b` holds a pragma; `c` has no part.
        assert_eq!(
            mergeable_after_expansion(&kernels, &[0, 1, 2], out, &f),
            [0]
        );
    }

    #[test]
    fn merged_groups_are_balanced_units_of_at_most_thirty_two() {
        assert!(merged_groups(&[], |_| 1).is_empty());
        // Kernel `m` costs `m % 7` (lengths vary), or 1.
        let units = |n: usize, varied: bool| -> Vec<Vec<usize>> {
            let members: Vec<usize> = (0..n).map(|i| i * 2).collect();
            let cost = |m: usize| if varied { (m % 7) as u64 } else { 1 };
            let groups = merged_groups(&members, cost);
            let mut all = groups.concat();
            all.sort_unstable();
            assert_eq!(all, members, "{n}: every member once");
            for g in &groups {
                assert!(g.windows(2).all(|w| w[0] < w[1]), "{n}: in kernel order");
            }
            let loads: Vec<u64> = groups
                .iter()
                .map(|g| g.iter().map(|&m| cost(m)).sum())
                .collect();
            let spread = loads.iter().max().expect("a unit") - loads.iter().min().expect("a unit");
            assert!(spread <= 6, "{n}: loads {loads:?}");
            groups
        };
        let sizes = |n: usize| -> Vec<usize> {
            let mut s: Vec<usize> = units(n, true).iter().map(Vec::len).collect();
            s.sort_unstable();
            s
        };
        assert_eq!(sizes(2), [2]);
        assert_eq!(sizes(32), [32]);
        assert_eq!(sizes(33), [16, 17]);
        assert_eq!(sizes(65), [21, 22, 22]);
        assert_eq!(sizes(64), [32, 32]);
        for n in 2..200 {
            assert!(
                sizes(n)
                    .iter()
                    .all(|&s| (2..=MERGED_UNIT_KERNELS).contains(&s))
            );
            // Equal lengths: contiguous runs.
            let members: Vec<usize> = (0..n).map(|i| i * 2).collect();
            assert_eq!(units(n, false).concat(), members);
        }
    }

    #[test]
    fn concurrently_answers_in_order() {
        let got = concurrently(50, |i| {
            std::thread::sleep(std::time::Duration::from_micros((50 - i as u64) * 20));
            i * i
        });
        assert_eq!(got, (0..50).map(|i| i * i).collect::<Vec<_>>());
        assert!(concurrently(0, |i| i).is_empty());
    }

    #[test]
    fn preludes_and_options() {
        assert!(prelude_mergeable(crate::DEFAULT_PRELUDE));
        assert!(prelude_mergeable(
            "#include <stdint.h>\n\n#include  <math.h>\n"
        ));
        assert!(!prelude_mergeable("#include \"math.h\"\n"));
        assert!(!prelude_mergeable("#include <stdio.h>\n"));
        assert!(!prelude_mergeable("#include <math.h>\nstatic int calls;\n"));
        assert!(!prelude_mergeable("#define N 4\n"));
        let o =
            |v: &[&str]| options_mergeable(&v.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        assert!(o(&[
            "-O3",
            "-march=native",
            "-ffast-math",
            "-DN=4",
            "-Wall",
            "-std=c11"
        ]));
        for bad in [
            "-include",
            "x.h",
            "-I.",
            "-Wp,-DX",
            "-fplugin=x.so",
            "-DX=__COUNTER__",
            "-D",
            "-isystem",
            "-B.",
        ] {
            assert!(!o(&["-O2", bad]), "{bad}");
        }
    }
}
