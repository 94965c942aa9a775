//! The C words the observers and the merge rule read: the keywords, the identifiers of a
//! text, the words a merged text may spell, and what the compiler's preprocessing of a
//! prelude tells the merge rule ([`PreludeFacts`]).

use std::collections::{HashMap, HashSet};

use canonical_text::lexer::{TokenKind, tokenize};

/// C keywords (C23, with the GNU spellings that are not in the reserved namespace):
/// renaming one changes the program's grammar.
pub(crate) const C_KEYWORDS: &[&str] = &[
    "alignas",
    "alignof",
    "asm",
    "auto",
    "bool",
    "break",
    "case",
    "char",
    "const",
    "constexpr",
    "continue",
    "default",
    "do",
    "double",
    "else",
    "enum",
    "extern",
    "false",
    "float",
    "for",
    "goto",
    "if",
    "inline",
    "int",
    "long",
    "nullptr",
    "register",
    "restrict",
    "return",
    "short",
    "signed",
    "sizeof",
    "static",
    "static_assert",
    "struct",
    "switch",
    "thread_local",
    "true",
    "typedef",
    "typeof",
    "typeof_unqual",
    "union",
    "unsigned",
    "void",
    "volatile",
    "while",
];

/// Calls `f` with each identifier of `src`, in order, repeats included: runs of identifier
/// bytes that do not start with a digit (over-reading literals and comments only finds
/// more names).
pub(crate) fn for_each_word<'t>(src: &'t [u8], mut f: impl FnMut(&'t [u8])) {
    let ident = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    let mut i = 0;
    while i < src.len() {
        if ident(src[i]) {
            let s = i;
            while i < src.len() && ident(src[i]) {
                i += 1;
            }
            if !src[s].is_ascii_digit() {
                f(&src[s..i]);
            }
        } else {
            i += 1;
        }
    }
}

/// The distinct words of `src` ([`for_each_word`]).
pub(crate) fn words(src: &[u8]) -> HashSet<&str> {
    let mut out = HashSet::new();
    for_each_word(src, |w| {
        if let Ok(w) = std::str::from_utf8(w) {
            out.insert(w);
        }
    });
    out
}

/// The macros of a `-dM -E` table: each `#define` line's name, parameter names (one empty
/// name for an object-like macro) and replacement list.
pub(crate) fn macro_definitions(table: &str) -> impl Iterator<Item = (&str, Vec<&str>, &str)> {
    table.lines().filter_map(|line| {
        let rest = line.trim_start().strip_prefix("#define ")?.trim_start();
        let name_len = rest
            .bytes()
            .take_while(|&b| b.is_ascii_alphanumeric() || b == b'_')
            .count();
        let (name, after) = rest.split_at(name_len);
        if name.is_empty() {
            return None;
        }
        // A function-like macro's parameter list follows its name at once.
        let (params, body) = match after.strip_prefix('(') {
            Some(p) => p.split_once(')').unwrap_or(("", "")),
            None => ("", after),
        };
        let params = params
            .split(',')
            .map(|p| p.trim_matches([' ', '\t']))
            .collect();
        Some((name, params, body))
    })
}

/// Keywords that name a type, or qualify one: what a cast's parentheses may hold.
pub(crate) const TYPE_KEYWORDS: &[&str] = &[
    "void",
    "char",
    "short",
    "int",
    "long",
    "float",
    "double",
    "signed",
    "unsigned",
    "_Bool",
    "bool",
    "_Complex",
    "const",
    "volatile",
    "restrict",
    "_Atomic",
    "__restrict",
    "__restrict__",
    "__const",
    "__const__",
    "__volatile",
    "__volatile__",
    "__signed",
    "__signed__",
    "__int128",
    "_Float16",
    "_Float32",
    "_Float64",
    "_Float128",
    "_Float32x",
    "_Float64x",
];

/// Keywords a merged text may spell besides [`TYPE_KEYWORDS`]: each one's meaning stays
/// inside the function that spells it (a block-scope `static` is a new object of that
/// function, a block-scope `typedef` or tag is that block's). Every C keyword not listed here (`extern`,
/// `inline`, `asm`, `_Noreturn` and the GNU spellings of the last three, which reach the
/// file-scope entity a block-scope declaration names or the assembler's state) keeps a
/// kernel out of a merged unit.
const OTHER_ALLOWED_KEYWORDS: &[&str] = &[
    // Types, qualifiers, storage inside a block.
    "static",
    "register",
    "auto",
    "struct",
    "union",
    "enum",
    "typedef",
    "_Alignas",
    "alignas",
    "_Thread_local",
    "thread_local",
    "constexpr",
    "typeof",
    "typeof_unqual",
    // Statements and operators.
    "if",
    "else",
    "for",
    "while",
    "do",
    "switch",
    "case",
    "default",
    "break",
    "continue",
    "return",
    "goto",
    "sizeof",
    "_Alignof",
    "alignof",
    "_Static_assert",
    "static_assert",
    "_Generic",
    "true",
    "false",
    "nullptr",
    // GNU spellings of the same.
    "__extension__",
    "__typeof",
    "__typeof__",
    "__alignof",
    "__alignof__",
    "__real",
    "__real__",
    "__imag",
    "__imag__",
    "__label__",
    // The function's own name, and the text's own line in `kernel.c`: the same in a merged
    // unit as in the kernel's own (each text follows `#line 1 "kernel.c"` in both).
    "__func__",
    "__FUNCTION__",
    "__PRETTY_FUNCTION__",
    "__LINE__",
    "__FILE__",
];

/// Whether `s` is a keyword a merged text may spell: one of [`TYPE_KEYWORDS`] or of the
/// other allowed keywords.
pub(crate) fn allowed_keyword(s: &str) -> bool {
    TYPE_KEYWORDS.contains(&s) || OTHER_ALLOWED_KEYWORDS.contains(&s)
}

/// Whether `w` is in the implementation's reserved namespace (`__x`, `_X`).
pub(crate) fn reserved(w: &[u8]) -> bool {
    w.starts_with(b"__") || (w.len() > 1 && w[0] == b'_' && w[1].is_ascii_uppercase())
}

/// Whether a merged text may spell the word `w` (after its macros are expanded): a keyword
/// [`allowed_keyword`], a built-in function of the compiler (`__builtin_…`: evaluated
/// where it is called), or any other name that is neither a C keyword nor reserved.
pub(crate) fn word_allowed(w: &[u8]) -> bool {
    let Ok(s) = std::str::from_utf8(w) else {
        return false;
    };
    if allowed_keyword(s) {
        return true;
    }
    if s.len() > "__builtin_".len() && s.starts_with("__builtin_") {
        return true;
    }
    !reserved(w) && !C_KEYWORDS.contains(&s)
}

/// What the compiler says of one prelude under one option list that decides which texts
/// may share a merged unit: learned from its macro table (`-dM -E`) and its preprocessed
/// declarations (`-E -P`), kept with the observers (see [`crate::observers`]).
#[derive(Debug, Default)]
pub(crate) struct PreludeFacts {
    /// Every macro name of the table (the prelude's, the options' and the compiler's).
    pub(crate) macros: HashSet<String>,
    /// The macros a merged text may name: every word of the replacement list, but the
    /// macro's own parameters, is [`word_allowed`] or such a macro, transitively.
    pub(crate) safe_macros: HashSet<String>,
    /// The functions the prelude declares at file scope (a name followed by `(` outside
    /// any bracket of its preprocessed text): what a merged text may call.
    pub(crate) functions: HashSet<String>,
    /// The type names the prelude declares (the names a file-scope `typedef` ends on):
    /// what a cast in a merged text may name.
    pub(crate) typedefs: HashSet<String>,
    /// The prelude's typedef names of a function type (`typedef int F(int);`): a merged
    /// text may not spell one, since `F f;` declares a function without a parenthesis.
    pub(crate) function_types: HashSet<String>,
}

impl PreludeFacts {
    /// The facts of a macro `table` (`-dM -E`) and the prelude's preprocessed
    /// `declarations` (`-E -P`).
    pub(crate) fn learn(table: &str, declarations: &[u8]) -> PreludeFacts {
        // name -> the words of its replacement list that are not its parameters.
        let bodies: HashMap<&str, Vec<&str>> = macro_definitions(table)
            .map(|(name, params, body)| {
                let words = words(body.as_bytes())
                    .into_iter()
                    .filter(|w| !params.contains(w) && !matches!(*w, "__VA_ARGS__" | "__VA_OPT__"));
                (name, words.collect())
            })
            .collect();
        // Every macro is safe until one of its words is neither allowed nor a safe macro.
        let mut safe: HashSet<&str> = bodies.keys().copied().collect();
        loop {
            let unsafe_now: Vec<&str> = safe
                .iter()
                .copied()
                .filter(|name| {
                    bodies[name].iter().any(|w| {
                        if bodies.contains_key(w) {
                            !safe.contains(w)
                        } else {
                            !word_allowed(w.as_bytes())
                        }
                    })
                })
                .collect();
            if unsafe_now.is_empty() {
                break;
            }
            for name in unsafe_now {
                safe.remove(name);
            }
        }
        let (functions, typedefs, function_types) = declared_functions_and_types(declarations);
        PreludeFacts {
            macros: bodies.keys().map(|n| (*n).to_owned()).collect(),
            safe_macros: safe.into_iter().map(str::to_owned).collect(),
            functions,
            typedefs,
            function_types,
        }
    }
}

/// The functions, type names and function type names a preprocessed prelude declares (see
/// [`PreludeFacts`]): words followed by `(` outside any bracket (in a `typedef`: a function
/// type), and words right before `;` or `,` outside any bracket after a `typedef`. Reserved
/// words are left out (a merged text may not spell them anyway).
fn declared_functions_and_types(src: &[u8]) -> (HashSet<String>, HashSet<String>, HashSet<String>) {
    let tokens = significant(src);
    let (mut functions, mut typedefs, mut function_types) =
        (HashSet::new(), HashSet::new(), HashSet::new());
    let mut depth = 0usize;
    let mut in_typedef = false;
    for (i, &(kind, t)) in tokens.iter().enumerate() {
        let next = tokens.get(i + 1).map(|&(_, n)| n);
        match (kind, t) {
            (TokenKind::Punct, b"(" | b"[" | b"{") => depth += 1,
            (TokenKind::Punct, b")" | b"]" | b"}") => depth = depth.saturating_sub(1),
            (TokenKind::Punct, b";") if depth == 0 => in_typedef = false,
            (TokenKind::Ident, b"typedef") if depth == 0 => in_typedef = true,
            (TokenKind::Ident, w) if depth == 0 && !reserved(w) => {
                let name = String::from_utf8_lossy(w).into_owned();
                if next == Some(b"(") && in_typedef {
                    function_types.insert(name);
                } else if next == Some(b"(") {
                    functions.insert(name);
                } else if in_typedef && matches!(next, Some(b";" | b",")) {
                    typedefs.insert(name);
                }
            }
            _ => {}
        }
    }
    (functions, typedefs, function_types)
}

/// The tokens of `src` that are neither white space nor comments, with their kinds.
pub(crate) fn significant(src: &[u8]) -> Vec<(TokenKind, &[u8])> {
    tokenize(src)
        .into_iter()
        .filter(|t| {
            !matches!(
                t.kind,
                TokenKind::Whitespace | TokenKind::LineComment | TokenKind::BlockComment
            )
        })
        .map(|t| (t.kind, t.bytes(src)))
        .collect()
}
