//! The fast renamer held against the simple reference: the [`lexer`](crate::lexer)'s
//! tokens. [`disagreement`] is what the property tests and the differential fuzz target
//! check on every input.

use std::collections::BTreeSet;

use crate::encoding::{self as enc};
use crate::lexer::{Token, TokenKind, is_ident_continue, is_ident_start, tokenize};
use crate::{Names, canonical_kernel};

/// The names a kernel text binds itself, read the slow way: see
/// [`Names::text_names`](crate::Names::text_names); `(names, why none)`.
pub use crate::declared::reference_text_bound as text_bound;
use crate::declared::reference_text_bound as text_bound_reference;

/// Where [`canonical_kernel`] disagrees with the lexer on `text`, described; `None` if
/// it agrees. It agrees when:
///
/// * the encoding decodes to the text (every tag stands for the name it replaced);
/// * text that phases 1-2 or an observer make unsafe to tokenize (checked here
///   bytewise, independently of the renamer: a `$`, a NUL, a lone CR, a backslash before
///   a line end, a trigraph, `__func__`) renames nothing;
/// * every renamed occurrence (and own-name occurrence) is an identifier token in code,
///   or a whole word inside a comment token;
/// * a text with a reserved identifier (`__x`, `_X`) not on the allow list outside
///   comments and literals renames nothing, and no renamed name stands inside a GNU
///   attribute (`__attribute__((...))`, `__attribute((...))`, `__declspec(...)`) nor a
///   feature test (`__has_builtin(...)` and every `__has_*`/`__is_*` kin);
/// * a text with a `#include` renames no identifier token inside the arguments of a
///   standard header's observing macro (`INT64_C(...)`) nor of a macro the text defines
///   (unless the caller vouched for its headers' macros:
///   [`Names::included_macros_known`]); words of a comment there may be renamed;
/// * a renamed name is renamed at every identifier token in code spelled like it, and
///   occurs in no preprocessor line or attribute token as a word, and never as an
///   identifier right after `.`, `->` or `::` (comments, white space and
///   directives between them skipped).
pub fn disagreement(text: &str, kernel_name: Option<&str>, names: &Names) -> Option<String> {
    let c = canonical_kernel(text, kernel_name, names);
    let src = text.as_bytes();
    let renamed: Vec<String> = c.renamed().map(|r| r.into_owned()).collect();
    // Decode the encoding into spans (start, end, Some(number) or None for the own name).
    let e = c.encoding();
    let mut spans: Vec<(usize, usize, Option<usize>)> = Vec::new();
    let (mut i, mut pos) = (0usize, 0usize);
    while i < e.len() {
        let tag = e[i];
        i += 1;
        if tag == enc::RENAMED {
            let Some(n) = enc::read_varint(e, &mut i) else {
                return Some(format!("truncated number at {i}"));
            };
            let Some(name) = renamed.get(n) else {
                return Some(format!("number {n} names nothing"));
            };
            if src.get(pos..pos + name.len()) != Some(name.as_bytes()) {
                return Some(format!("renamed {name} does not stand at {pos}"));
            }
            spans.push((pos, pos + name.len(), Some(n)));
            pos += name.len();
        } else if tag == enc::OWN {
            let Some(own) = kernel_name else {
                return Some("own-name tag without a kernel name".into());
            };
            if src.get(pos..pos + own.len()) != Some(own.as_bytes()) {
                return Some(format!("own name does not stand at {pos}"));
            }
            spans.push((pos, pos + own.len(), None));
            pos += own.len();
        } else if tag >= 0xF8 {
            return Some(format!("unknown tag {tag:#x}"));
        } else {
            if src.get(pos) != Some(&tag) {
                return Some(format!("byte {pos} changed"));
            }
            pos += 1;
        }
    }
    if pos != src.len() {
        return Some("the encoding is shorter than the text".into());
    }
    let tokens = tokenize(src);
    if !spans.is_empty()
        && let Some(what) = unsafe_bytes(src, &tokens)
    {
        return Some(format!("renamed although the text holds {what}"));
    }
    if !spans.is_empty()
        && let Some(w) = unknown_reserved_word(src, &tokens)
    {
        return Some(format!("renamed although the text holds reserved `{w}`"));
    }
    let token_at = |i: usize| token_at(&tokens, i);
    // The own name counts as renamed only where its token differs from it (a segment
    // index dropped); otherwise its tag stands for the very same spelling.
    let own_changes = kernel_name.is_some_and(|n| c.kernel_token() != Some(n));
    // The own name keyed by its role: only a minted, unreserved name the caller neither
    // keeps nor frees, which the text defines as a function.
    if c.kernel_name_by_role()
        && let Some(n) = kernel_name
    {
        let minted = n.contains('_') && n.bytes().any(|b| b.is_ascii_digit());
        if !minted
            || crate::names::is_reserved(n)
            || names.keep.contains(n)
            || names.free.contains(n)
        {
            return Some(format!(
                "own name {n:?} keyed by its role although it may not be"
            ));
        }
        if !c.pinned().iter().any(|p| p == n) && !spans.iter().any(|s| s.2.is_none()) {
            return Some(format!("own name {n:?} keyed by its role but never met"));
        }
    }
    let attributes = gnu_attribute_spans(src, &tokens);
    let calls = if names.included_macros_known {
        Vec::new()
    } else {
        observing_call_spans(src, &tokens)
    };
    for &(a, b, number) in &spans {
        if (number.is_some() || own_changes) && attributes.iter().any(|&(s, e)| s <= a && a < e) {
            return Some(format!(
                "renamed {:?} at {a} inside a GNU attribute or a feature test",
                text.get(a..b)
            ));
        }
        // Only in code: a comment inside the arguments is gone before any macro runs.
        if (number.is_some() || own_changes)
            && calls.iter().any(|&(s, e)| s <= a && a < e)
            && token_at(a).is_some_and(|t| t.kind == TokenKind::Ident)
        {
            return Some(format!(
                "renamed {:?} at {a} inside a call a header's macro may paste",
                text.get(a..b)
            ));
        }
        let ok = token_at(a).is_some_and(|t| match t.kind {
            TokenKind::Ident => t.start == a && t.end == b,
            TokenKind::LineComment | TokenKind::BlockComment => {
                t.start + 2 <= a
                    && b <= t.end
                    && !src
                        .get(a.wrapping_sub(1))
                        .is_some_and(|&x| is_ident_continue(x))
                    && !src.get(b).is_some_and(|&x| is_ident_continue(x))
                    && b <= src.len()
                    && is_ident_start(src[a])
            }
            _ => false,
        });
        if !ok {
            return Some(format!(
                "renamed {:?} at {a}..{b} is no identifier in code nor a word in a comment",
                &text.get(a..b)
            ));
        }
    }
    let renamed_set: BTreeSet<&str> = renamed.iter().map(String::as_str).collect();
    let span_set: BTreeSet<(usize, usize)> = spans.iter().map(|s| (s.0, s.1)).collect();
    let own = kernel_name.filter(|_| spans.iter().any(|s| s.2.is_none()));
    let mut last_sig: Option<&[u8]> = None;
    for t in &tokens {
        let tt = t.bytes(src);
        let word = std::str::from_utf8(tt).unwrap_or("");
        match t.kind {
            TokenKind::Ident => {
                let is_renamed = renamed_set.contains(word) || own == Some(word);
                if is_renamed {
                    if !span_set.contains(&(t.start, t.end)) {
                        return Some(format!("{word} at {} kept, renamed elsewhere", t.start));
                    }
                    if matches!(last_sig, Some(b"." | b"->" | b"::")) {
                        return Some(format!("member {word} at {} renamed", t.start));
                    }
                }
                last_sig = Some(tt);
            }
            TokenKind::Preprocessor | TokenKind::Attribute => {
                for w in tt.split(|&x| !is_ident_continue(x)) {
                    let w = std::str::from_utf8(w).unwrap_or("");
                    if renamed_set.contains(w) || own == Some(w) {
                        return Some(format!("{w} renamed but in {:?}", t.kind));
                    }
                }
                if t.kind == TokenKind::Attribute {
                    last_sig = Some(tt);
                }
            }
            TokenKind::Whitespace | TokenKind::LineComment | TokenKind::BlockComment => {}
            _ => last_sig = Some(tt),
        }
    }
    // A renamed name nobody listed (not bound, not derived, not a minted shape) is one
    // the slow reading of the text's declarations finds bound by the text, and never a
    // kept or free name.
    let mut text_bound: Option<BTreeSet<String>> = None;
    for name in &renamed {
        let b = name.as_bytes();
        if names.bound.contains(name)
            || names.derivations.iter().any(|d| d.base(name).is_some())
            || (names.minted_shapes
                && (crate::names::is_symbol(b) || crate::names::is_scope_local(b)))
        {
            continue;
        }
        if names.free.contains(name) || names.keep.contains(name) {
            return Some(format!("{name} renamed although free or kept"));
        }
        let bound = text_bound.get_or_insert_with(|| {
            if names.text_names {
                text_bound_reference(text).0.into_iter().collect()
            } else {
                BTreeSet::new()
            }
        });
        if !bound.contains(name) {
            return Some(format!("{name} renamed but not bound by the text"));
        }
    }
    None
}

/// The token holding byte `i` (`tokens` are sorted and cover the text).
fn token_at(tokens: &[Token], i: usize) -> Option<&Token> {
    let k = tokens.partition_point(|t| t.end <= i);
    tokens.get(k).filter(|t| t.start <= i)
}

/// Text the renamer must refuse, found bytewise (a second, independent reading of
/// [`crate::phases`]); a `$` or a byte from 0x80 is allowed only inside a string or
/// character literal token of `tokens`.
fn unsafe_bytes(src: &[u8], tokens: &[Token]) -> Option<&'static str> {
    let in_literal = |i: usize| {
        token_at(tokens, i).is_some_and(|t| matches!(t.kind, TokenKind::Str | TokenKind::Char))
    };
    for (i, &b) in src.iter().enumerate() {
        match b {
            b'$' if !in_literal(i) => return Some("a `$` outside literals"),
            0x80.. if !in_literal(i) => return Some("a non-ASCII byte outside literals"),
            0 => return Some("a NUL"),
            b'\r' if src.get(i + 1) != Some(&b'\n') => return Some("a lone CR"),
            b'\\' => {
                let rest = &src[i + 1..];
                let blanks = rest
                    .iter()
                    .take_while(|&&x| matches!(x, b' ' | b'\t' | 0x0b | 0x0c))
                    .count();
                if matches!(rest.get(blanks), None | Some(b'\n' | b'\r')) {
                    return Some("a line splice");
                }
            }
            b'?' if src.get(i + 1) == Some(&b'?')
                && src.get(i + 2).is_some_and(|x| b"=/'()!<>-".contains(x)) =>
            {
                return Some("a trigraph");
            }
            _ => {}
        }
    }
    let hay = String::from_utf8_lossy(src);
    ["__func__", "FUNCTION", "asm", "_Pragma", "alias"]
        .into_iter()
        .find(|o| hay.contains(o))
        .map(|_| "a spelling observer")
}

/// The first identifier in the reserved namespace (`__x`, `_X`) that the allow list does
/// not hold, read word by word from the lexer's identifier, directive and attribute
/// tokens (comments and literals observe nothing).
fn unknown_reserved_word(src: &[u8], tokens: &[Token]) -> Option<String> {
    tokens
        .iter()
        .filter(|t| {
            matches!(
                t.kind,
                TokenKind::Ident | TokenKind::Preprocessor | TokenKind::Attribute
            )
        })
        .flat_map(|t| t.bytes(src).split(|&x| !is_ident_continue(x)))
        .find(|w| {
            (w.starts_with(b"__") || (w.len() > 1 && w[0] == b'_' && w[1].is_ascii_uppercase()))
                && !crate::phases::reserved_allowed(w)
        })
        .map(|w| String::from_utf8_lossy(w).into_owned())
}

/// The GNU and Microsoft attribute regions and the feature tests', read from the tokens on
/// their own: an `__attribute__`, `__attribute`, `__declspec`, `__has_*` or `__is_*`
/// identifier, then (past white space, comments and directive lines, which the
/// preprocessor reads while it looks for the `(`) a `(`, up to the `)` that balances it or
/// the end of the text.
fn gnu_attribute_spans(src: &[u8], tokens: &[Token]) -> Vec<(usize, usize)> {
    let code: Vec<&Token> = tokens
        .iter()
        .filter(|t| {
            !matches!(
                t.kind,
                TokenKind::Whitespace
                    | TokenKind::LineComment
                    | TokenKind::BlockComment
                    | TokenKind::Preprocessor
            )
        })
        .collect();
    call_spans(src, &code, |w| {
        matches!(w, b"__attribute__" | b"__attribute" | b"__declspec")
            || w.starts_with(b"__has_")
            || w.starts_with(b"__is_")
    })
}

/// The spans of `code` (the text's tokens as the caller filtered them: no white space or
/// comments) from each identifier `name` accepts that is followed by a `(`, through the `)`
/// that balances it or the end of the text.
fn call_spans(src: &[u8], code: &[&Token], name: impl Fn(&[u8]) -> bool) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    for (k, t) in code.iter().enumerate() {
        if t.kind != TokenKind::Ident || !name(t.bytes(src)) {
            continue;
        }
        if code
            .get(k + 1)
            .is_none_or(|u| u.kind != TokenKind::Punct || u.bytes(src) != b"(")
        {
            continue;
        }
        let mut depth = 0i64;
        let mut end = src.len();
        for u in &code[k + 1..] {
            if u.kind == TokenKind::Punct {
                depth += match u.bytes(src) {
                    b"(" => 1,
                    b")" => -1,
                    _ => 0,
                };
                if depth == 0 {
                    end = u.end;
                    break;
                }
            }
        }
        out.push((t.start, end));
    }
    out
}

/// In a text with an `#include`: the argument lists of calls to a standard header's
/// observing macro ([`crate::allow_lists::STANDARD_HEADER_OBSERVERS`]) or to a macro the
/// text defines (`#define NAME` read plainly), from the `(` after the name (past white
/// space, comments and directives) to the `)` that balances it or the end of the text.
fn observing_call_spans(src: &[u8], tokens: &[Token]) -> Vec<(usize, usize)> {
    let directives = tokens.iter().filter(|t| t.kind == TokenKind::Preprocessor);
    let mut includes = false;
    let mut defined: Vec<&[u8]> = Vec::new();
    for d in directives {
        // The directive's name is the identifier right after the `#` (or `%:`), past
        // blanks and comments, as the preprocessor reads it: `#]include` names nothing.
        let line = d.bytes(src);
        let mut rest = line
            .strip_prefix(b"#")
            .or_else(|| line.strip_prefix(b"%:"))
            .unwrap_or(line);
        loop {
            rest = rest.trim_ascii_start();
            match rest.strip_prefix(b"/*") {
                Some(r) => {
                    rest = r
                        .windows(2)
                        .position(|w| w == b"*/")
                        .map_or(&[][..], |k| &r[k + 2..]);
                }
                None => break,
            }
        }
        if !rest.first().is_some_and(|&b| is_ident_continue(b)) {
            continue;
        }
        let words: Vec<&[u8]> = rest
            .split(|&x| !is_ident_continue(x))
            .filter(|w| !w.is_empty())
            .collect();
        match words.first() {
            Some(&b"include") => includes = true,
            Some(&b"define") => defined.extend(words.get(1)),
            _ => {}
        }
    }
    if !includes {
        return Vec::new();
    }
    let code: Vec<&Token> = tokens
        .iter()
        .filter(|t| {
            !matches!(
                t.kind,
                TokenKind::Whitespace
                    | TokenKind::LineComment
                    | TokenKind::BlockComment
                    | TokenKind::Preprocessor
            )
        })
        .collect();
    call_spans(src, &code, |w| {
        crate::allow_lists::STANDARD_HEADER_OBSERVERS
            .iter()
            .any(|o| o.as_bytes() == w)
            || defined.contains(&w)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn feature_tests_and_pasting_calls_rename_nothing_inside() {
        let names = Names::new().with_bound(["n1_x", "abs"]);
        for text in [
            "int k(int abs) { return __has_builtin(abs) + abs; }",
            "#include <stdint.h>\nlong k(long n1_x) { return INT64_C(n1_x) + n1_x; }",
            "#include <x.h>\n#define M(a) GET(a)\nlong k(long n1_x) { return M(n1_x); }",
        ] {
            assert_eq!(disagreement(text, Some("k"), &names), None, "{text:?}");
            assert_eq!(
                canonical_kernel(text, Some("k"), &names).renamed_count(),
                0,
                "{text:?}"
            );
        }
    }

    /// Found by the differential fuzz target: a comment inside an observing call's
    /// arguments is renamed like any comment: the macro never sees it.
    #[test]
    fn comments_inside_a_pasting_calls_arguments_may_be_renamed() {
        let names = Names::new().with_bound(["n1_x"]);
        let text = "#include <stdio.h>\nlong k(long n1_x) { return INT64_C(1 /* n1_x */) + n1_x; }";
        assert_eq!(disagreement(text, Some("k"), &names), None);
        assert_eq!(canonical_kernel(text, Some("k"), &names).renamed_count(), 1);
    }

    /// Found by the differential fuzz target: `#]include <stdio.h>` names no directive
    /// (the preprocessor reads the identifier right after the `#`), so the text includes
    /// nothing and an observing call's arguments may be renamed; a comment before the name
    /// (`# /* c */ include`) still makes an include.
    #[test]
    fn a_directive_is_named_by_the_word_right_after_its_hash() {
        let names = Names::new().with_bound(["n_b"]);
        for (text, renamed) in [
            (
                "#]include <stdint.h>\nlong k(long n_b) { return INT64_C(n_b) + n_b; }",
                1,
            ),
            (
                "# /* c */ include <stdint.h>\nlong k(long n_b) { return INT64_C(n_b) + n_b; }",
                0,
            ),
            (
                "#include <stdint.h>\nlong k(long n_b) { return INT64_C(n_b) + n_b; }",
                0,
            ),
        ] {
            assert_eq!(disagreement(text, Some("k"), &names), None, "{text:?}");
            let c = canonical_kernel(text, Some("k"), &names);
            assert_eq!(c.renamed_count(), renamed, "{text:?}");
        }
        let found = "#incl2`_d<stdint.h>\n#]include\u{16} <stdio.h>\n#inclu _4 + 2.5e+3f + .5 + 07;\n_has_attribute`(n_b);\n  long x = INT64_C(n_b\u{4}  n_b[i12] = v3_0cc > 0.0?????????????f ? v3_acc : 8888888888888888888888888888f;\n d/* tiled) + M(7_(n1_wt(alu_typeof__(alu0) nclud`";
        assert_eq!(disagreement(found, Some("k__seg1"), &names), None);
    }

    #[test]
    fn agrees_on_examples_and_catches_a_member() {
        let names = Names::new().with_bound(["n1_x"]);
        for text in [
            "s. /* c */ i1 + i1",
            "x = i1; // i1\n#define A i2\ni2 + n1_x",
            "s.// c \ni1 + i1",
            "k__seg1(i3) { i3 = \"i3\"; }",
        ] {
            assert_eq!(
                disagreement(text, Some("k__seg1"), &names),
                None,
                "{text:?}"
            );
        }
    }
}
