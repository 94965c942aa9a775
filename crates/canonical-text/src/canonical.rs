//! Renaming a kernel's own names to canonical tokens: [`canonical_kernel`], which runs
//! the block scan and renamer ([`crate::rename`]) and then the gates in their fixed
//! order (phases 1-2, spelling observers, unknown reserved names, collisions, the
//! renamer's own refusals, attribute regions), and keys the text raw when one refuses.

use std::sync::OnceLock;

use crate::interner::{Slot, name_key};
use crate::key::{Canonical, raw};
use crate::names::{NameScope, Names, Prepared};
use crate::refusal::Refusal;
use crate::rename::{Ambiguous, Renamer, pinned_names, redo};

/// The canonical form of one kernel's C-like `text`: the names the kernel owns renamed
/// to canonical tokens numbered by first occurrence, and its own name (`kernel_name`,
/// when given) replaced by its kernel token ([`Names::kernel_token`]).
///
/// **The kernel's own name** (`kernel_name`: the name `text` defines the kernel under)
/// is keyed by its role, not its spelling, where that is sound
/// ([`Names::kernel_name_by_role`], default on): tinygrad's `E_4` and its deduplicated
/// `E_4n1`, `r_16_64_4_577` and `r_16_64_4_578`, `step__seg3` and `step__seg7` share a key
/// when their texts are twins, and a cache hit answers one with the other's code, called
/// under the other's symbol. Where it is not sound (a name the compiler may know, one the
/// caller keeps or frees, one the text does not define, an observed spelling, ...) it is
/// keyed as spelled, except for a segment index
/// (see [`segment_kernel_name`](crate::segment_kernel_name)) or the counter of a renderer
/// that declared how it mints its kernel names ([`Names::with_minted_kernel_names`]), and
/// [`Canonical::kernel_name_kept`] says why. With `None`, the text's function names are
/// treated like any other name.
///
/// **Renamed** (each distinct name to its own number, in order of first occurrence,
/// comments included):
/// * a loop or static-index symbol: `i` then digits (`i12`), unless
///   [`Names::minted_shapes`](crate::Names::minted_shapes) is off;
/// * a scope-local: `v`, digits, `_`, anything (`v3_acc`, `v7_`), unless
///   [`Names::minted_shapes`](crate::Names::minted_shapes) is off;
/// * a name in `names.bound`;
/// * a name `prefix + base + suffix` for a template in `names.derivations`, with base
///   in `names.bound`, a symbol (unless [`Names::minted_shapes`](crate::Names::minted_shapes) is off), or digits.
///
/// **Never renamed:** a name in `names.keep` or `names.free`; an identifier after `.`,
/// `->` or `::`; anything inside an attribute `[[...]]`, a preprocessor line, or a string
/// or character literal. Comments are renamed like code. A name that would be renamed
/// but also occurs in one of these never-renamed places is kept as spelled everywhere
/// ([`Canonical::pinned`](crate::Canonical::pinned)), so a renamed name always stands for the same thing at every
/// occurrence.
///
/// **Refusals** ([`Canonical::refusals`], each a [`Refusal`]): if a bound name is also
/// free, or a bound name is in the reserved namespace (`__x`, `_X`), no bound name (nor a
/// name derived from one) is renamed, while loop symbols and scope-locals still are: such a
/// kernel may not compile, and its key must not reach the code of a twin that did. Nothing
/// at all is renamed, and the key is taken over the exact text, when the text's
/// tokenization depends on the dialect ([`Refusal::AmbiguousLexing`]: a line splice, a
/// carriage return not before a newline, a NUL byte, a trigraph, a `$` or a non-ASCII byte
/// outside string and character literals, a `'` after a number or a name other than an
/// encoding prefix, a C++ raw string, a backslash in code), when the text can observe a
/// name's spelling ([`Refusal::SpellingObserved`]: `__func__` and its kin, `asm`,
/// `_Pragma`, a symbol-naming attribute, a preprocessor line with `#` or `##` after its
/// introducer, a macro of [`Names::observers`](crate::Names::observers); the kernel's own name is then kept whole,
/// segment index included), or when names collide in the name table
/// ([`Refusal::NameCollisions`]); also when a renamed name stands inside a GNU attribute
/// ([`Refusal::NameInAttribute`]) or a feature test such as `__has_builtin(...)`
/// ([`Refusal::NameInFeatureTest`]), or a reserved identifier is not on the allow list
/// ([`Refusal::UnknownReserved`]). In a text that includes a header, a name inside the
/// arguments of a call a header's macro may paste is kept as spelled (pinned; see
/// [`Names::included_macros_known`](crate::Names::included_macros_known)). The crate docs
/// say why each is refused; a refusal costs a miss, never a wrong hit.
///
/// ```
/// use canonical_text::{canonical_kernel, Names, Refusal};
///
/// let names = Names::new().with_bound(["n3_out"]);
/// let text = "void k__seg1(float *n3_out) { n3_out[0] = 1; }";
/// let plain = canonical_kernel(text, Some("k__seg1"), &names);
/// assert!(plain.refusals().is_empty());
/// // A minted own name is keyed by its role...
/// assert!(plain.kernel_name_by_role());
/// assert_eq!((plain.renamed_count(), plain.kernel_token()), (1, Some("kc_kernel")));
/// // ...or, when the caller says so, as spelled less its segment index.
/// let spelled = names.clone().with_kernel_name_by_role(false);
/// let c = canonical_kernel(text, Some("k__seg1"), &spelled);
/// assert_eq!(c.kernel_token(), Some("k__seg"));
/// // The kernel prints its own name: nothing is renamed, the name is kept whole.
/// let logs = "void k__seg1(float *n3_out) { n3_out[0] = 1; puts(__func__); }";
/// let c = canonical_kernel(logs, Some("k__seg1"), &names);
/// assert!(matches!(c.refusals(), [Refusal::SpellingObserved { .. }]));
/// assert_eq!((c.renamed_count(), c.kernel_token()), (0, Some("k__seg1")));
/// ```
///
/// Never panics, whatever the text.
pub fn canonical_kernel(text: &str, kernel_name: Option<&str>, names: &Names) -> Canonical {
    warm(names, text.as_bytes(), kernel_name);
    if names.text_names {
        let filters = crate::names::Filters::new(names);
        return crate::declared::canonical_with_text_names(text, kernel_name, names, filters, &[]);
    }
    canonical_prepared(
        text,
        kernel_name,
        &Prepared::deferred(names),
        Err(KEPT_NO_READING),
    )
}

/// Why the own name is kept as spelled when the text's declarations are not read.
pub(crate) const KEPT_NO_READING: &str =
    "the text's declarations are not read (`Names::text_names` is off)";

impl NameScope {
    /// [`canonical_kernel`] of `text` with the scope's names and `bound`, the names the
    /// renderer declared in this kernel (see [`Names::bound`] for which those are): the
    /// same [`Canonical`] as with a [`Names`] holding both (see [`NameScope`]).
    ///
    /// Never panics, whatever the text.
    pub fn canonical_kernel<S: AsRef<str>>(
        &self,
        text: &str,
        kernel_name: Option<&str>,
        bound: &[S],
    ) -> Canonical {
        let bound: Vec<&str> = bound.iter().map(AsRef::as_ref).collect();
        if self.names().text_names {
            let (names, filters) = self.parts();
            return crate::declared::canonical_with_text_names(
                text,
                kernel_name,
                names,
                filters,
                &bound,
            );
        }
        canonical_prepared(
            text,
            kernel_name,
            &self.prepared(&bound),
            Err(KEPT_NO_READING),
        )
    }
}

/// [`canonical_kernel`] given what the call prepared from its names; `role` is `Ok` when
/// the own name is keyed by its role ([`Names::kernel_name_by_role`]), else why not.
pub(crate) fn canonical_prepared(
    text: &str,
    kernel_name: Option<&str>,
    prepared: &Prepared<'_>,
    role: Result<(), &'static str>,
) -> Canonical {
    let src = text.as_bytes();
    let names = prepared.names;
    let bound_ok = prepared.refusal.is_none();

    let own = kernel_name.map(str::as_bytes);
    let token = kernel_name.map(|n| match role {
        Ok(()) => crate::key::ROLE_TOKEN,
        // State twins would share: the whole name, no index or counter dropped either.
        Err(why) if why == crate::declared::KEEPS_STATE => n,
        Err(why) if why == crate::declared::FILE_SCOPE_OBJECTS => n,
        Err(_) => names.kernel_token(n),
    });
    let token_bytes = token.map(str::as_bytes).unwrap_or_default();
    let token_len = token.map(str::len);

    // The scan runs on any text (it never panics and always ends), and its result
    // counts only once the text passed the gates below, in their order: phases 1-2, then
    // the spelling observers, both over the whole text. The scan also tells whether the
    // text holds any byte phases 1-2 may refuse (`Masks::gate`); when it holds none, the
    // first gate's full search is skipped, since it could only answer `None`.
    let mut r = Renamer::new(src, prepared, bound_ok, own, token_bytes, &[]);
    if let Some(refusal) = r.bound_refusal.take() {
        // The bound names the preparation left unread refuse renaming: again, with
        // them checked (then nothing is left unread).
        drop(r);
        return canonical_prepared(text, kernel_name, &prepared.settled(Some(refusal)), role);
    }
    let mut outcome = r.run();
    if outcome.is_ok() && r.redo && r.collisions.is_none() {
        (r, outcome) = redo(r, src, prepared, bound_ok, own, token_bytes);
    }
    // The include rule: a text that includes a header renames nothing inside the
    // arguments of a call-like name it does not own (a pass with those names pinned).
    // With standard headers only and no macro of the text's, only a call to a standard
    // header's observing macro can paste: the text is read with the lexer only if it
    // spells one (a packed search, as for the built-in observers).
    if outcome.is_ok()
        && r.includes != 0
        && (r.next > 0 || own.is_some_and(|o| o != token_bytes))
        && r.collisions.is_none()
        && !names.included_macros_known
        && (r.includes != crate::rename::INCLUDES_STANDARD
            || r.defines
            || crate::phases::mentions_standard_observer(src))
    {
        let pins = renamed_in_unowned_calls(src, &r, kernel_name);
        if !pins.is_empty() {
            let mut pinned: Vec<&[u8]> = r
                .map
                .entries()
                .filter(|e| e.slot == Slot::Pinned)
                .map(|e| e.name)
                .collect();
            pinned.extend(pins);
            drop(r);
            r = Renamer::new(src, prepared, bound_ok, own, token_bytes, &pinned);
            outcome = r.run();
            if outcome.is_ok() && r.redo && r.collisions.is_none() {
                (r, outcome) = redo(r, src, prepared, bound_ok, own, token_bytes);
            }
        }
    }
    if !r.gate_clear
        && let Some((offset, what)) = crate::phases::untokenizable(src)
    {
        let refusal = Refusal::AmbiguousLexing { offset, what };
        return refused(src, kernel_name, prepared, refusal);
    }
    if let Some((offset, what)) = crate::phases::spelling_observer(
        src,
        names.observers.iter().map(String::as_str),
        names.observers.contains(crate::phases::DEFAULT_OBSERVER),
    ) {
        let refusal = Refusal::SpellingObserved { offset, what };
        return refused(src, kernel_name, prepared, refusal);
    }
    // The scan met every identifier in code, directives and attributes: once it read the
    // whole text, its first reserved one of unknown meaning is the answer of the
    // whole-text search (which runs only when the scan stopped early).
    let reserved = if r.complete {
        r.reserved.map(|s| {
            let w = &src[s..crate::lexer::ident_end(src, s)];
            (s, String::from_utf8_lossy(w).into_owned())
        })
    } else {
        crate::phases::unknown_reserved(src)
    };
    if let Some((offset, name)) = reserved {
        let refusal = Refusal::UnknownReserved { offset, name };
        return refused(src, kernel_name, prepared, refusal);
    }
    if let (Ok(()), Some(offset)) = (&outcome, r.collisions) {
        let refusal = Refusal::NameCollisions { offset };
        return refused(src, kernel_name, prepared, refusal);
    }
    match outcome {
        Ok(()) => {
            let pinned = pinned_names(&r);
            let own_pinned = kernel_name.is_some_and(|n| pinned.iter().any(|p| p == n));
            let own_kept = match (kernel_name, role) {
                (None, _) => None,
                (Some(_), Err(why)) => Some(why),
                (Some(_), Ok(())) if own_pinned => Some(KEPT_PINNED),
                (Some(_), Ok(())) => None,
            };
            let c = Canonical {
                by_role: kernel_name.is_some() && role.is_ok(),
                own_kept,
                pinned,
                encoding: std::mem::take(&mut r.out),
                side: std::mem::take(&mut r.side),
                token_len,
                renamed_count: r.next as usize,
                refusals: prepared.refusal.iter().cloned().collect(),
                text: OnceLock::new(),
                text_names: Default::default(),
            };
            match name_in_attribute(src, &r, &c, kernel_name) {
                Some((offset, name, introducer)) => {
                    let refusal = if crate::phases::is_feature_test(&src[introducer..]) {
                        Refusal::NameInFeatureTest { offset, name }
                    } else {
                        Refusal::NameInAttribute { offset, name }
                    };
                    refused(src, kernel_name, prepared, refusal)
                }
                None => c,
            }
        }
        Err(Ambiguous {
            offset,
            what,
            observer,
        }) => {
            let refusal = if observer {
                Refusal::SpellingObserved {
                    offset,
                    what: what.to_owned(),
                }
            } else {
                Refusal::AmbiguousLexing { offset, what }
            };
            refused(src, kernel_name, prepared, refusal)
        }
    }
}

/// Why an own name keyed by its role is still spelled in the encoding.
const KEPT_PINNED: &str =
    "it also occurs where nothing is renamed (pinned): its spelling is in the key";

/// The first word inside a GNU or Microsoft attribute region or a feature test's
/// ([`crate::phases::attribute_regions_at`]) that `c` renamed, or the kernel's own name
/// when `c` replaced it by another token, with where its region's introducer starts; read
/// only when `c` renamed something and the scan `r` (which read the whole text) met an
/// introducer in code.
pub(crate) fn name_in_attribute(
    src: &[u8],
    r: &Renamer<'_, '_>,
    c: &Canonical,
    kernel_name: Option<&str>,
) -> Option<(usize, String, usize)> {
    let own = kernel_name.filter(|n| c.kernel_token() != Some(*n));
    if c.renamed_count == 0 && own.is_none() {
        return None;
    }
    if r.attributes.is_empty() {
        return None;
    }
    // Whether `w` was renamed: its slot says so unless this pass pinned a name it had
    // renamed (`redo`: the name is then pinned but still among the renamed ones) or the
    // lookup met collisions; then the renamed names are read one by one.
    let renamed = |i: usize, j: usize| -> bool {
        if !r.redo
            && let Ok(slot) = r.map.get(&src[i..j], name_key(src, i, j))
        {
            return matches!(slot, Some(Slot::Renamed(_)));
        }
        c.renamed().any(|n| n.as_bytes() == &src[i..j])
    };
    let ident = crate::lexer::is_ident_continue;
    for (s, e) in crate::phases::attribute_regions_at(src, &r.attributes) {
        let mut i = s;
        while i < e {
            if ident(src[i]) {
                let j = crate::lexer::ident_end(src, i).min(e);
                if let Ok(w) = std::str::from_utf8(&src[i..j])
                    && (own == Some(w) || renamed(i, j))
                {
                    return Some((i, w.to_owned(), s));
                }
                i = j.max(i + 1);
            } else {
                i += 1;
            }
        }
    }
    None
}

/// Words before `(` that no header can make a pasting macro of: C keywords (and their
/// GNU spellings) that take a parenthesized operand or start a statement.
const CALL_LIKE_KEYWORDS: &[&[u8]] = &[
    b"if",
    b"while",
    b"for",
    b"switch",
    b"return",
    b"sizeof",
    b"alignof",
    b"_Alignof",
    b"__alignof__",
    b"typeof",
    b"__typeof__",
    b"typeof_unqual",
    b"_Generic",
    b"_Static_assert",
    b"static_assert",
    b"_Alignas",
    b"alignas",
    b"_Atomic",
    b"do",
    b"else",
    b"case",
    b"void",
    b"char",
    b"short",
    b"int",
    b"long",
    b"float",
    b"double",
    b"signed",
    b"unsigned",
    b"const",
    b"volatile",
    b"restrict",
    b"__restrict__",
    b"__attribute__",
    b"__attribute",
    b"__declspec",
];

/// The include rule's names (see [`Names::included_macros_known`]): every name `r`
/// renamed (or replaced, the own name) that occurs inside the parenthesized arguments of
/// an identifier that may name a header's pasting macro, or anywhere if the parentheses
/// of the code do not balance (a macro may supply one). Those identifiers are the macros
/// the text defines, and: when the text includes only standard headers
/// ([`crate::phases::STANDARD_HEADERS`]), the headers' observing macros
/// ([`crate::phases::STANDARD_HEADER_OBSERVERS`]); otherwise every identifier but a
/// [`CALL_LIKE_KEYWORDS`] word, the kernel's own name and a library function of an
/// included standard header ([`crate::phases::standard_function`]). Read with the lexer:
/// only for a text that includes a header and renamed something.
#[cold]
#[inline(never)]
fn renamed_in_unowned_calls<'a>(
    src: &'a [u8],
    r: &Renamer<'a, '_>,
    kernel_name: Option<&str>,
) -> Vec<&'a [u8]> {
    use crate::lexer::TokenKind as K;
    let all = crate::lexer::tokenize(src);
    let punct = |t: &crate::lexer::Token, p: &[u8]| t.kind == K::Punct && t.bytes(src) == p;
    // The macros the text defines (never taken for a keyword, the kernel or a library
    // function, whatever their name), whether one's replacement list leaves a parenthesis
    // open or closes one it did not open, and whether a directive could not be read.
    let mut defined: Vec<&[u8]> = Vec::new();
    let mut unbalanced_definition = false;
    let mut unreadable = false;
    for t in all.iter().filter(|t| t.kind == K::Preprocessor) {
        match defined_macro(t.bytes(src)) {
            Definition::Of(name, balanced) => {
                defined.push(name);
                unbalanced_definition |= !balanced;
            }
            Definition::Unreadable => unreadable = true,
            Definition::None => {}
        }
    }
    let tokens: Vec<crate::lexer::Token> = all
        .into_iter()
        .filter(|t| {
            !matches!(
                t.kind,
                K::Whitespace | K::LineComment | K::BlockComment | K::Preprocessor
            )
        })
        .collect();
    let renamed = |t: &crate::lexer::Token| -> bool {
        t.kind == K::Ident
            && matches!(
                r.map.get(t.bytes(src), name_key(src, t.start, t.end)),
                Ok(Some(Slot::Renamed(_) | Slot::Own)) | Err(_)
            )
    };
    let standard_only = r.includes == crate::rename::INCLUDES_STANDARD && !unreadable;
    let may_paste = |t: &crate::lexer::Token| -> bool {
        let w = t.bytes(src);
        if t.kind != K::Ident {
            return false;
        }
        if defined.contains(&w) {
            return true;
        }
        if standard_only {
            crate::phases::STANDARD_HEADER_OBSERVERS
                .iter()
                .any(|o| o.as_bytes() == w)
        } else {
            !CALL_LIKE_KEYWORDS.contains(&w)
                && kernel_name.map(str::as_bytes) != Some(w)
                && !crate::phases::standard_function(w, r.standard_headers)
        }
    };
    // A macro may supply a parenthesis the code does not show (`#define OPEN M(` then
    // `OPEN x)` calls `M` on `x`): a text's own definition that leaves one unbalanced, or
    // (when another header may hold such a macro) code whose parentheses do not balance.
    let mut depth = 0i64;
    for t in &tokens {
        if punct(t, b"(") {
            depth += 1;
        } else if punct(t, b")") {
            depth -= 1;
            if depth < 0 {
                break;
            }
        }
    }
    let mut out: Vec<&'a [u8]> = Vec::new();
    if unbalanced_definition || (!standard_only && depth != 0) {
        out.extend(tokens.iter().filter(|t| renamed(t)).map(|t| t.bytes(src)));
    } else {
        // The arguments' ends: the outermost open call's depth is enough (a region inside
        // another is inside it). A call's result followed by `(` (`APPLY(M)(x)`: the
        // expansion may end in a macro's name) continues the region.
        let mut until: Option<i64> = None;
        let mut closed_call_at: Option<usize> = None;
        let mut depth = 0i64;
        for (k, t) in tokens.iter().enumerate() {
            if punct(t, b"(") {
                depth += 1;
                if until.is_none()
                    && k > 0
                    && (may_paste(&tokens[k - 1]) || closed_call_at == Some(k - 1))
                {
                    until = Some(depth);
                }
            } else if punct(t, b")") {
                if until == Some(depth) {
                    until = None;
                    closed_call_at = Some(k);
                }
                depth -= 1;
            } else if until.is_some() && renamed(t) {
                out.push(t.bytes(src));
            }
        }
    }
    out.sort_unstable();
    out.dedup();
    out
}

/// What [`defined_macro`] reads in a directive.
enum Definition<'a> {
    /// A `#define` of this name; whether its replacement list's parentheses balance.
    Of(&'a [u8], bool),
    /// A directive whose name, or whose macro's name, a comment hides.
    Unreadable,
    /// Any other directive.
    None,
}

/// What the directive `d` (from its `#` or `%:`) defines ([`Definition`]).
fn defined_macro(d: &[u8]) -> Definition<'_> {
    let blank = |b: &u8| matches!(b, b' ' | b'\t' | 0x0b | 0x0c);
    let Some(d) = d.strip_prefix(b"#").or_else(|| d.strip_prefix(b"%:")) else {
        return Definition::None;
    };
    let Some(k) = d.iter().position(|b| !blank(b)) else {
        return Definition::None;
    };
    let d = &d[k..];
    if d.starts_with(b"/") {
        return Definition::Unreadable;
    }
    let Some(d) = d.strip_prefix(b"define") else {
        return Definition::None;
    };
    let Some(k) = d.iter().position(|b| !blank(b)) else {
        return Definition::None;
    };
    let d = &d[k..];
    let n = d
        .iter()
        .position(|&b| !crate::lexer::is_ident_continue(b))
        .unwrap_or(d.len());
    if n == 0 {
        return Definition::Unreadable;
    }
    // The replacement list's parentheses, past a function-like macro's parameter list
    // (`(` right after the name), as the lexer reads them.
    let mut rest = &d[n..];
    if rest.first() == Some(&b'(') {
        match rest.iter().position(|&b| b == b')') {
            Some(close) => rest = &rest[close + 1..],
            None => return Definition::Unreadable,
        }
    }
    let mut depth = 0i64;
    let mut balanced = true;
    for t in crate::lexer::Lexer::new(rest) {
        if t.kind == crate::lexer::TokenKind::Punct {
            match t.bytes(rest) {
                b"(" => depth += 1,
                b")" => {
                    depth -= 1;
                    balanced &= depth >= 0;
                }
                _ => {}
            }
        }
    }
    Definition::Of(&d[..n], balanced && depth == 0)
}

/// Starts loading, all at once, what a call reads first from `names` (the sets' nodes
/// and the bytes of their first names) and the start of the text. A caller that built its
/// `Names` long before (as a batch does) has them out of cache, and the sets are read one
/// after another (each node before its names): the misses are paid once in parallel
/// rather than one after another. Hints only: nothing here changes what is computed.
#[inline(always)]
pub(crate) fn warm(names: &Names, src: &[u8], kernel_name: Option<&str>) {
    #[cfg(target_arch = "x86_64")]
    {
        use safe_arch::prefetch_t0;
        if let Some(b) = src.first() {
            prefetch_t0(b);
        }
        if let Some(b) = kernel_name.and_then(|n| n.as_bytes().first()) {
            prefetch_t0(b);
        }
        for set in [&names.bound, &names.free, &names.keep, &names.observers] {
            for name in set.iter().take(32) {
                if let Some(b) = name.as_bytes().first() {
                    prefetch_t0(b);
                }
            }
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (names, src, kernel_name);
}
/// [`raw`], with the bound-name refusal (if any) and then `refusal`.
#[cold]
#[inline(never)]
pub(crate) fn refused(
    src: &[u8],
    kernel_name: Option<&str>,
    prepared: &Prepared<'_>,
    refusal: Refusal,
) -> Canonical {
    let mut refusals: Vec<Refusal> = prepared.refusal.iter().cloned().collect();
    refusals.push(refusal);
    raw(src, kernel_name, refusals)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    use crate::encoding as enc;
    use crate::interner::*;
    use crate::key::*;
    use crate::names::*;

    fn canon(text: &str, names: &Names) -> Canonical {
        canonical_kernel(text, None, names)
    }

    /// The canonical text of `text` with no names given.
    fn plain(text: &str) -> String {
        canon(text, &Names::new()).text().to_owned()
    }

    fn key(text: &str, names: &Names) -> String {
        canon(text, names).key(&[])
    }

    #[test]
    fn symbols_are_renamed_by_first_occurrence() {
        assert_eq!(
            plain("for (int i12 = 0; i12 < n; ++i12) x[i7] = i12 + i7;"),
            "for (int kc0 = 0; kc0 < n; ++kc0) x[kc1] = kc0 + kc1;"
        );
        // Not symbols: `i` alone, `i` then non-digits, keywords.
        assert_eq!(
            plain("int i; i1x; ix2; if (i0) ;"),
            "int i; i1x; ix2; if (kc0) ;"
        );
        let c = canon("i9 + i3 + i9", &Names::new());
        assert_eq!(c.renamed().collect::<Vec<_>>(), ["i9", "i3"]);
        assert_eq!(c.renamed_count(), 2);
    }

    #[test]
    fn scope_locals_are_renamed_suffix_included() {
        assert_eq!(
            plain("float v3_acc = v12_ + v3_acc * v3_accum; v3acc; v_3; vx_1;"),
            "float kc0 = kc1 + kc0 * kc2; v3acc; v_3; vx_1;"
        );
    }

    #[test]
    fn bound_names_are_renamed_and_free_and_keep_are_not() {
        let names = Names::new()
            .with_bound(["n17_weights", "out"])
            .with_free(["n_17"])
            .with_keep(["i5", "v1_keep"]);
        let c = canon("out[i5] = n17_weights[i6] * n_17 + v1_keep + v2_x;", &names);
        assert_eq!(c.text(), "kc0[i5] = kc1[kc2] * n_17 + v1_keep + kc3;");
        assert!(c.refusals().is_empty());
        // A bound name differs from a longer identifier containing it.
        assert_eq!(canon("outer + out_", &names).text(), "outer + out_");
    }

    #[test]
    fn derived_names_are_renamed() {
        let names = Names::new()
            .with_bound(["n1_x"])
            .with_derivation("", "_grad")
            .with_derivation("tmp_", "");
        assert_eq!(
            canon(
                "n1_x_grad + tmp_i12 + tmp_42 + tmp_foo + tmp_ + foo_grad + n1_x",
                &names
            )
            .text(),
            "kc0 + kc1 + kc2 + tmp_foo + tmp_ + foo_grad + kc3"
        );
        // Without the base bound, a derived name stays.
        let unbound = Names::new().with_derivation("", "_grad");
        assert_eq!(
            canon("n1_x_grad + i3_grad", &unbound).text(),
            "n1_x_grad + kc0"
        );
    }

    #[test]
    fn members_and_qualified_names_are_never_renamed_and_pin_the_name() {
        let names = Names::new().with_bound(["n1_x"]);
        let c = canon("s.v3_acc + p->i12 + ns::n1_x + s . i4 + i5", &names);
        assert_eq!(c.text(), "s.v3_acc + p->i12 + ns::n1_x + s . i4 + kc0");
        // A name that also occurs as a member is kept as spelled everywhere, even where
        // it was met first in a renaming position.
        let c = canon("i1 + v3_acc + s.v3_acc + i2 + v3_acc", &names);
        assert_eq!(c.text(), "kc0 + v3_acc + s.v3_acc + kc1 + v3_acc");
        assert_eq!(c.pinned(), ["v3_acc"]);
        // Across a comment.
        assert_eq!(plain("s. /* c */ i1 + i1"), "s. /* c */ i1 + i1");
    }

    #[test]
    fn preprocessor_lines_are_kept_and_pin_their_names() {
        let c = canon(
            "#define TILE 64\n#pragma omp parallel for private(i3)\nfor (i3 = 0; i3 < TILE; i3++) v1_a += i4;\n  #  if  i4\n#endif",
            &Names::new(),
        );
        assert_eq!(
            c.text(),
            "#define TILE 64\n#pragma omp parallel for private(i3)\nfor (i3 = 0; i3 < TILE; i3++) kc0 += i4;\n  #  if  i4\n#endif"
        );
        assert_eq!(c.pinned(), ["i3", "i4"]);
        // `#` not first on its line is an operator; `%:` is a digraph introducer.
        assert_eq!(plain("x # i1\n%:define i2\ni2"), "x # kc0\n%:define i2\ni2");
        // A block comment before `#` keeps it first on its line.
        assert_eq!(plain("/* c */ #define i1\ni1"), "/* c */ #define i1\ni1");
    }

    #[test]
    fn attributes_are_kept_and_pin_their_names() {
        let c = canon(
            "device float *v1_p [[buffer(0)]], uint i2 [[thread_position_in_grid]], a[i3[i4]] [[x(i5)]] i5",
            &Names::new(),
        );
        assert_eq!(
            c.text(),
            "device float *kc0 [[buffer(0)]], uint kc1 [[thread_position_in_grid]], a[kc2[kc3]] [[x(i5)]] i5"
        );
        assert_eq!(c.pinned(), ["i5"]);
    }

    #[test]
    fn literals_are_kept_without_pinning() {
        assert_eq!(
            plain(r#"printf("i1 %d\n", i1); c = 'i'; s = u8"v1_x"; t = L'\''; i1"#),
            r#"printf("i1 %d\n", kc0); c = 'i'; s = u8"v1_x"; t = L'\''; kc0"#
        );
        // An unterminated literal ends at the line's end.
        assert_eq!(plain("\"i1\ni1"), "\"i1\nkc0");
    }

    #[test]
    fn numbers_are_kept() {
        // Letters inside a preprocessing number are no names.
        assert_eq!(plain("0...i1 + i2 [[x]]"), "0...i1 + kc0 [[x]]");
        assert_eq!(
            plain("x = 1.5e+3f + 0x1fu + .5 + i1 + 1e+i2 + 1.i3 + 0x1p-i4 + i2 + i3 + i4"),
            "x = 1.5e+3f + 0x1fu + .5 + kc0 + 1e+i2 + 1.i3 + 0x1p-i4 + kc1 + kc2 + kc3"
        );
    }

    #[test]
    fn comments_are_renamed_like_code() {
        let names = Names::new().with_bound(["n1_x"]);
        let c = canon(
            "/* sum of n1_x over i5 */ v2_s += n1_x[i5]; // i5 again, s.i5\n",
            &names,
        );
        assert_eq!(
            c.text(),
            "/* sum of kc0 over kc1 */ kc2 += kc0[kc1]; // kc1 again, s.kc1\n"
        );
        // Renaming in comments is consistent: a comment mentioning another symbol
        // gives another key.
        assert_ne!(key("i1; // i1", &names), key("i1; // i2", &names));
        assert_eq!(key("i1; // i1", &names), key("i7; // i7", &names));
        // A comment's words count for first occurrence.
        assert_eq!(plain("/* i2 */ i1 + i2"), "/* kc0 */ kc1 + kc0");
    }

    #[test]
    fn own_name_becomes_its_kernel_token() {
        // Keyed as spelled (the by-role tests follow).
        let spelled = Names::new().with_kernel_name_by_role(false);
        let a = canonical_kernel(
            "void step__seg3(float *x) { step__seg4(x); }",
            Some("step__seg3"),
            &spelled,
        );
        let b = canonical_kernel(
            "void step__seg7(float *x) { step__seg4(x); }",
            Some("step__seg7"),
            &spelled,
        );
        assert_eq!(a.text(), "void step__seg(float *x) { step__seg4(x); }");
        assert_eq!(a.kernel_token(), Some("step__seg"));
        assert_eq!(a.key(&[]), b.key(&[]));
        // Another routine: another key, even with the same text shape.
        let c = canonical_kernel(
            "void walk__seg3(float *x) { step__seg4(x); }",
            Some("walk__seg3"),
            &spelled,
        );
        assert_ne!(a.key(&[]), c.key(&[]));
        // An identifier spelled like the kernel token is not the own name.
        let d = canonical_kernel("void r__seg3() { r__seg(); }", Some("r__seg3"), &spelled);
        let e = canonical_kernel("void r__seg3() { r__seg3(); }", Some("r__seg3"), &spelled);
        assert_eq!(d.text(), e.text());
        assert_ne!(d.key(&[]), e.key(&[]));
        // No kernel name differs from any kernel name.
        let f = canonical_kernel("void r__seg3() {}", None, &Names::new());
        assert_ne!(
            f.key(&[]),
            canonical_kernel("void r__seg3() {}", Some("q"), &spelled).key(&[])
        );
        // A name that is no segment name stays whole.
        let g = canonical_kernel("void main_k() {}", Some("main_k"), &spelled);
        assert_eq!(g.text(), "void main_k() {}");
    }

    /// Issue 36: the own name is keyed by its role by default where that is sound, and
    /// as spelled (with the reason) everywhere else.
    #[test]
    fn own_name_is_keyed_by_its_role_where_sound() {
        let key = |text: &str, own: &str, names: &Names| {
            let c = canonical_kernel(text, Some(own), names);
            (
                c.key(&[b"o"]),
                c.kernel_name_by_role(),
                c.kernel_name_kept(),
            )
        };
        let n = Names::new();
        let body = |own: &str| format!("void {own}(float *d0) {{ d0[0] = 1; }}");
        // tinygrad's deduplicated and counter-minted names, segment names.
        for (a, b) in [
            ("E_4", "E_4n1"),
            ("r_16_64_4_577", "r_16_64_4_578"),
            ("step__seg3", "walk__seg7"),
        ] {
            let (ka, ra, wa) = key(&body(a), a, &n);
            let (kb, rb, _) = key(&body(b), b, &n);
            assert!(ra && rb && wa.is_none(), "{a}: {wa:?}");
            assert_eq!(ka, kb, "{a} vs {b}");
        }
        // State kept across calls, or an object defined at file scope, would be shared by
        // twins answered with one function: such an own name is keyed as spelled.
        for text in [
            "void E_4(float *d0) { static float acc = 5.0f; acc += 1.0f; d0[0] = acc; }",
            "void E_4(float *d0) { static _Thread_local int k; d0[0] = k++; }",
            "float g;\nvoid E_4(float *d0) { g += 1; d0[0] = g; }",
            "float h(float);\nvoid E_4(float *d0) { d0[0] = h(1); }",
        ] {
            let (ka, ra, why) = key(text, "E_4", &n);
            let (kb, _, _) = key(&text.replace("E_4", "E_4n1"), "E_4n1", &n);
            assert!(!ra && why.is_some(), "{text}: {why:?}");
            assert_ne!(ka, kb, "{text}");
        }
        // Nor is a segment index or a declared counter dropped from such a name.
        let seg = |own: &str| format!("void {own}(float *d0) {{ static int k; d0[0] = k++; }}");
        let (ka, _, _) = key(&seg("step__seg1"), "step__seg1", &n);
        let (kb, _, _) = key(&seg("step__seg6"), "step__seg6", &n);
        assert_ne!(ka, kb);
        // Read-only static data is no state: the role is kept.
        let table = |own: &str| {
            format!("void {own}(float *d0) {{ static const float t[2] = {{1, 2}}; d0[0] = t[1]; }}")
        };
        let (ka, ra, _) = key(&table("E_4"), "E_4", &n);
        let (kb, _, _) = key(&table("E_4n1"), "E_4n1", &n);
        assert!(ra);
        assert_eq!(ka, kb);
        let ptr = |own: &str| {
            format!("void {own}(float *d0) {{ static const float *p; p = d0; d0[0] = 1; }}")
        };
        assert_ne!(
            key(&ptr("E_4"), "E_4", &n).0,
            key(&ptr("E_4n1"), "E_4n1", &n).0
        );
        let minted = Names::new().with_minted_kernel_names("_");
        let (ka, _, _) = key(&seg("E_16_3"), "E_16_3", &minted);
        let (kb, _, _) = key(&seg("E_16_4"), "E_16_4", &minted);
        assert_ne!(ka, kb);
        // A typedef holds no state: tinygrad's vector types keep the own name by role.
        let vec4 = |own: &str| {
            format!(
                "typedef float float4 __attribute__((aligned(16)));\nvoid {own}(float *d0) {{ d0[0] = 1; }}"
            )
        };
        let (ka, ra, _) = key(&vec4("E_4"), "E_4", &n);
        let (kb, _, _) = key(&vec4("E_4n1"), "E_4n1", &n);
        assert!(ra);
        assert_eq!(ka, kb);
        let c = canonical_kernel(&body("E_4"), Some("E_4"), &n);
        assert_eq!(c.text(), "void kc_kernel(float *kc0) { kc0[0] = 1; }");
        assert_eq!(c.kernel_token(), Some(crate::ROLE_TOKEN));
        // Recursion and a function pointer cast: every occurrence renamed alike.
        let rec = |own: &str| {
            format!(
                "void {own}(float *d0, int n) {{ if (n > 0) {own}(d0, n - 1); \
                 void (*f)(float *, int) = (void (*)(float *, int)){own}; (void)f; d0[0] = 1; }}"
            )
        };
        assert_eq!(
            key(&rec("E_4"), "E_4", &n).0,
            key(&rec("E_4n1"), "E_4n1", &n).0
        );
        // A twin calling another kernel is another kernel.
        let other = "void E_4n1(float *d0, int n) { if (n > 0) E_4(d0, n - 1); \
                     void (*f)(float *, int) = (void (*)(float *, int))E_4n1; (void)f; d0[0] = 1; }";
        assert_ne!(key(&rec("E_4"), "E_4", &n).0, key(other, "E_4n1", &n).0);
        // Keyed as spelled, each with its reason.
        let spelled = |text: &str, own: &str, names: &Names| {
            let (k, role, why) = key(text, own, names);
            assert!(!role, "{own} in {text:?}");
            let why = why.unwrap_or_else(|| panic!("no reason for {own} in {text:?}"));
            (k, why)
        };
        // Caller's choice.
        let off = Names::new().with_kernel_name_by_role(false);
        assert!(spelled(&body("E_4"), "E_4", &off).1.contains("caller"));
        assert_ne!(
            key(&body("E_4"), "E_4", &off).0,
            key(&body("E_4n1"), "E_4n1", &off).0
        );
        // Kept and free names.
        let kept = Names::new().with_keep(["E_4"]);
        assert!(spelled(&body("E_4"), "E_4", &kept).1.contains("kept"));
        let free = Names::new().with_free(["E_4"]);
        assert!(spelled(&body("E_4"), "E_4", &free).1.contains("free"));
        // Reserved, and names the compiler may know (no digit, or no `_`).
        for own in ["_E_4", "__k_1", "memset", "exp10", "main", "relu"] {
            spelled(&body(own), own, &n);
        }
        // Not defined by the text, or the text not read exactly.
        spelled("void E_5(float *d0) { E_4(d0); }", "E_4", &n);
        let cond = "#ifdef X\n#endif\nvoid E_4(float *d0) { d0[0] = 1; }";
        assert!(spelled(cond, "E_4", &n).1.contains("could not be read"));
        // A header whose macros nobody learned may define it.
        let inc = "#include \"mine.h\"\nvoid E_4(float *d0) { d0[0] = 1; }";
        spelled(inc, "E_4", &n);
        let learned = Names::new().with_included_macros_known(true);
        assert!(key(inc, "E_4", &learned).1);
        // Observed: `__func__`, a stringizing macro, `assert`: the exact text, whole name.
        for text in [
            "void E_4(float *d0) { puts(__func__); }",
            "#define S(x) #x\nvoid E_4(float *d0) { puts(S(E_4)); }",
            "void E_4(float *d0) { assert(d0); }",
        ] {
            let (_, why) = spelled(text, "E_4", &n);
            let c = canonical_kernel(text, Some("E_4"), &n);
            assert_eq!((c.kernel_token(), why), (Some("E_4"), crate::key::KEPT_RAW));
        }
        // In a feature test's parentheses: refused, whole name.
        let ft = "void E_4(float *d0) { d0[0] = __has_builtin(E_4); }";
        assert!(spelled(ft, "E_4", &n).1.contains("exact text"));
        // Pinned: also in a string's place nothing is renamed (a directive here); its
        // spelling stays in the key.
        let pin = |own: &str| format!("#define K {own}\nvoid {own}(float *d0) {{ d0[0] = 1; }}");
        let c = canonical_kernel(&pin("E_4"), Some("E_4"), &n);
        assert_eq!(c.pinned(), ["E_4"]);
        assert!(c.kernel_name_kept().is_some_and(|w| w.contains("pinned")));
        assert!(
            c.kept_names()
                .iter()
                .any(|l| l.starts_with("kernel name: ") && l.contains("pinned")),
            "{:?}",
            c.kept_names()
        );
        assert!(c.kept_names().iter().any(|l| l.contains("`E_4`: pinned")));
        assert_ne!(
            key(&pin("E_4"), "E_4", &n).0,
            key(&pin("E_4n1"), "E_4n1", &n).0
        );
        // `R` is no spelled token: a kernel spelled like the role token differs.
        let role = key("void kc_kernel(float *d0) { d0[0] = 1; }", "kc_kernel", &n);
        assert!(!role.1);
        assert_ne!(role.0, key(&body("E_4"), "E_4", &n).0);
    }

    #[test]
    fn bound_meeting_free_refuses_bound_renaming() {
        let names = Names::new()
            .with_bound(["n1_x", "sqrtf"])
            .with_free(["sqrtf"])
            .with_derivation("", "_grad");
        let c = canon("n1_x = sqrtf(n1_x_grad) + i3_grad + i3;", &names);
        assert_eq!(c.text(), "n1_x = sqrtf(n1_x_grad) + kc0 + kc1;");
        assert_eq!(
            c.refusals(),
            [Refusal::BoundMeetsFree {
                name: "sqrtf".into()
            }]
        );
        assert!(c.refusals()[0].to_string().contains("sqrtf"));
        // Its key differs from the twin's that renamed.
        let twin = Names::new()
            .with_bound(["n1_x", "sqrtf"])
            .with_derivation("", "_grad");
        assert_ne!(
            c.key(&[]),
            canon("n1_x = sqrtf(n1_x_grad) + i3_grad + i3;", &twin).key(&[])
        );
    }

    #[test]
    fn reserved_bound_names_refuse_bound_renaming() {
        for reserved in ["__half", "_Float16"] {
            let names = Names::new().with_bound(["n1_x", reserved]);
            let text = format!("{reserved} n1_x = i1;");
            let c = canon(&text, &names);
            assert_eq!(c.text(), format!("{reserved} n1_x = kc0;"));
            assert_eq!(
                c.refusals(),
                [Refusal::ReservedBoundName {
                    name: reserved.into()
                }]
            );
        }
        // `_x` (lowercase) and `x__y` are not reserved.
        let c = canon("_x + x__y", &Names::new().with_bound(["_x", "x__y"]));
        assert_eq!(c.text(), "kc0 + kc1");
        assert!(c.refusals().is_empty());
    }

    #[test]
    fn dialect_dependent_text_is_keyed_raw() {
        for (text, what) in [
            ("i1 = a \\\n+ i1;", "splice"),
            ("i1 = a ??/\n+ i1;", "trigraph"),
            ("i1 ??= i1;", "trigraph"),
            ("s = \"??/\" i1 \"\";", "trigraph"),
            ("// i1 ??/\ni1", "trigraph"),
            ("s = R\"(i1)\" + i1;", "raw string"),
            ("s = u8R\"x(i1)x\";", "raw string"),
            ("a\\u00e9 + i1", "backslash"),
        ] {
            let c = canonical_kernel(text, Some("i1"), &Names::new());
            assert_eq!(c.text(), text, "{what}");
            assert!(
                matches!(c.refusals(), [Refusal::AmbiguousLexing { what: w, .. }] if w.contains(what)),
                "{what}: {:?}",
                c.refusals()
            );
            assert_eq!(c.renamed_count(), 0);
        }
        // Backslashes inside literals, comments and preprocessor lines are fine, but
        // not as line splices.
        let c = canon(
            "#define A(x) x \\ y\ns = \"\\n\"; // a \\ b\ni1",
            &Names::new(),
        );
        assert!(c.refusals().is_empty());
        assert_eq!(c.renamed_count(), 1);
    }

    #[test]
    fn free_identifier_spelled_like_a_canonical_token_is_told_apart() {
        let names = Names::new().with_free(["kc0"]);
        let a = canon("x = i1 + kc0;", &names);
        let b = canon("x = i1 + i1;", &names);
        assert_eq!(a.text(), b.text());
        assert_ne!(a.key(&[]), b.key(&[]));
        assert_ne!(a.encoding(), b.encoding());
    }

    #[test]
    fn key_parts_and_equality() {
        let a = canon("x = i1;", &Names::new());
        let b = canon("x = i2;", &Names::new());
        assert_eq!(a, b);
        assert_eq!(a.key(&[b"-O3"]), b.key(&[b"-O3"]));
        assert_ne!(a.key(&[b"-O3"]), a.key(&[b"-O2"]));
        assert_ne!(a.key(&[b"-O3", b""]), a.key(&[b"-O3"]));
        assert_ne!(a.key(&[]), canon("x = i1; ", &Names::new()).key(&[]));
        assert_eq!(a.key(&[]).len(), 64);
    }

    #[test]
    fn key_is_the_digest_of_its_parts() {
        let long_name = format!("{}__seg4", "r".repeat(300));
        let cases: [(Option<&str>, Vec<Vec<u8>>); 3] = [
            (None, vec![]),
            (Some("k__seg1"), vec![b"-O3".to_vec()]),
            (
                Some(&long_name),
                vec![vec![7u8; 200], vec![], b"-O2".to_vec()],
            ),
        ];
        for (name, extras) in cases {
            let c = canonical_kernel("void f() { i1 = i2; }", name, &Names::new());
            let token_part = match c.kernel_token() {
                Some(t) => [b"K", t.as_bytes()].concat(),
                None => b"N".to_vec(),
            };
            let extras: Vec<&[u8]> = extras.iter().map(Vec::as_slice).collect();
            let mut parts: Vec<&[u8]> = vec![KEY_DOMAIN, &token_part, c.encoding()];
            parts.extend(&extras);
            assert_eq!(c.key(&extras), crate::digest_of_parts(&parts));
        }
    }

    #[test]
    fn names_across_block_boundaries() {
        for pad in 0..70 {
            let text = format!(
                "{}i12345 + v7_abcdefghijklmnopqrstuvwxyz + s.i3 + i12345",
                " ".repeat(pad)
            );
            let c = canon(&text, &Names::new());
            assert_eq!(
                c.text(),
                format!("{}kc0 + kc1 + s.i3 + kc0", " ".repeat(pad)),
                "pad {pad}"
            );
        }
        let long = format!("v1_{} + i1", "x".repeat(200));
        assert_eq!(plain(&long), "kc0 + kc1");
        assert_eq!(plain("i1"), "kc0");
        assert_eq!(plain(""), "");
    }

    #[test]
    fn member_operators_are_seen_across_blocks_comments_and_directives() {
        // The look-back reads the block's white-space mask; the operator, the white
        // space (spaces, tabs, CRLF line ends, a comment, a directive) and the name are
        // put at every offset around a 64-byte block boundary, and the renamer is held
        // to the lexer, which reads the text token by token.
        let gaps = [
            " ",
            "\t \r\n ",
            "                                                                      ",
            " /* c */ ",
            "/* c */",
            " // c \r\n ",
            "\n#define Q 1 \n ",
            "\n#pragma x \r\n\t",
        ];
        for op in [".", "->", "::", ";", ",", "+"] {
            for gap in gaps {
                for pad in 0..70 {
                    let text = format!("{}s{op}{gap}i1 = i1 + i2;", " ".repeat(pad));
                    if let Some(d) = crate::reference::disagreement(&text, None, &Names::new()) {
                        panic!("{text:?}: {d}");
                    }
                    let member = matches!(op, "." | "->" | "::");
                    let c = canon(&text, &Names::new());
                    assert_eq!(
                        c.pinned().contains(&"i1".to_owned()),
                        member,
                        "{text:?}: {:?}",
                        c.text()
                    );
                }
            }
        }
    }

    #[test]
    fn a_listed_name_absent_from_the_text_leaves_the_key_as_it_is() {
        let text = "void k(float *n1) { n1[0] = y_grad; }";
        let key = |names: &Names| canonical_kernel(text, Some("k"), names).key(&[]);
        let base = Names::new().with_bound(["n1"]);
        assert_eq!(key(&base), key(&base.clone().with_bound(["n2", "zz9"])));
        // Unless a derivation derives a name of the text from it: `y` then owns `y_grad`.
        let derived = base.with_derivation("", "_grad");
        assert_ne!(key(&derived), key(&derived.clone().with_bound(["y"])));
    }

    #[test]
    fn non_ascii_text_is_kept_and_decodes() {
        // Outside literals a non-ASCII byte refuses renaming (clang reads U+00A0 and the
        // other Unicode spaces as white space): the exact text is keyed.
        let names = Names::new().with_bound(["n1_é"]);
        let text = "/* żółw i1 */ n1_é[i1] = \"€\" + x_ü + n1_é; // 🙂 i2";
        let c = canonical_kernel(text, Some("x_ü"), &names);
        assert!(
            matches!(
                c.refusals(),
                [Refusal::AmbiguousLexing { offset: 3, what }] if what.contains("non-ASCII")
            ),
            "{:?}",
            c.refusals()
        );
        assert_eq!(c.text(), text);
        assert_eq!(c.renamed().count(), 0);
        // Inside string and character literals it is part of the literal: renaming goes on,
        // and the literals decode as written.
        let names = Names::new().with_bound(["n1"]);
        let text = "n1[i1] = \"€ żółw 🙂\" + '\u{a0}' + n1;";
        let c = canonical_kernel(text, None, &names);
        assert!(c.refusals().is_empty(), "{:?}", c.refusals());
        assert_eq!(c.text(), "kc0[kc1] = \"€ żółw 🙂\" + '\u{a0}' + kc0;");
        // Tag bytes only where names were replaced: three renamed occurrences.
        let tags = c.encoding().iter().filter(|&&b| b >= enc::OWN).count();
        assert_eq!(tags, 3);
        assert_eq!(c.renamed().collect::<Vec<_>>(), ["n1", "i1"]);
    }

    #[test]
    fn renamed_names_of_every_length_are_listed_whole() {
        // The renamer lists a name of at most 16 bytes by copying 16 bytes of the text
        // from it, then cutting the copy back: every length, at the text's end and
        // inside it.
        for len in 2..=40 {
            let name = format!("i{}", "7".repeat(len - 1));
            for text in [
                name.clone(),
                format!("x = {name}"),
                format!("{name} = 1; /* padding past sixteen bytes */"),
                format!("a = {name} + {name} + i1"),
            ] {
                let c = canonical_kernel(&text, None, &Names::new());
                let want: &[&str] = if text.ends_with("i1") {
                    &[&name, "i1"]
                } else {
                    &[&name]
                };
                assert_eq!(c.renamed().collect::<Vec<_>>(), want, "{text:?}");
            }
        }
    }

    #[test]
    fn names_made_to_collide_refuse_renaming() {
        // Names whose hashes share their top 10 bits: they share a home slot in every
        // table of up to 1024 slots, so the 258th one examines more than `PROBE_LIMIT`
        // slots. Without the limit each new one would walk all the others (time
        // quadratic in the names); with it the kernel is keyed raw.
        // They start with `i` and a digit, so the scan looks each one up (when no listed
        // name starts with `i`, it keeps an `i` name with no digit after the `i` as
        // written, without a lookup).
        let target = whole_name_key(b"i0bbbbbb").hash >> 54;
        let mut names = Vec::new();
        let mut n = 0u64;
        while names.len() < 300 {
            // Letters that spell no spelling observer (`asm`, `ifunc`, ...).
            const LETTERS: &[u8; 16] = b"bcdeghjklmnopqrt";
            let mut name = *b"i0bbbbbb";
            let mut m = n;
            for b in name[2..].iter_mut() {
                *b = LETTERS[(m % 16) as usize];
                m /= 16;
            }
            if whole_name_key(&name).hash >> 54 == target {
                names.push(String::from_utf8_lossy(&name).into_owned());
            }
            n += 1;
        }
        let text = format!("int {}; i1 = i2;", names.join(", "));
        let c = canonical_kernel(&text, Some("k__seg1"), &Names::new());
        assert_eq!(c.renamed_count(), 0);
        assert_eq!(c.encoding(), text.as_bytes());
        assert!(
            matches!(c.refusals(), [Refusal::NameCollisions { offset }] if *offset > 4),
            "{:?}",
            c.refusals()
        );
        // The same names, fewer than the limit: renamed as ever.
        let few = format!("int {}; i1 = i2;", names[..200].join(", "));
        let c = canonical_kernel(&few, Some("k__seg1"), &Names::new());
        assert!(c.refusals().is_empty(), "{:?}", c.refusals());
        assert_eq!(c.renamed_count(), 2);
        // Bound names that collide refuse too (offset 0: they come from `Names`).
        let bound = Names::new().with_bound(names.iter().cloned());
        let c = canonical_kernel("i1 = i2;", None, &bound);
        assert!(
            matches!(c.refusals(), [Refusal::NameCollisions { offset: 0 }]),
            "{:?}",
            c.refusals()
        );
    }

    #[test]
    fn a_whole_name_has_the_key_it_has_inside_any_text() {
        // Bound, pinned and own names are keyed whole (`whole_name_key`), names met in
        // the text inside it (`name_key`, which reads past the name's end): the two
        // must agree for every length, position and neighbouring byte.
        let mut x = 0x2545_F491_4F6C_DD1Du64;
        for len in 1..=40 {
            for _ in 0..40 {
                let mut buf: Vec<u8> = (0..len + 40)
                    .map(|_| {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        (x >> 24) as u8
                    })
                    .collect();
                let s = (x % 20) as usize;
                let name = buf[s..s + len].to_vec();
                // In a longer text, then with the name at its very end.
                for end in [buf.len(), s + len] {
                    buf.truncate(end);
                    let (a, b) = (whole_name_key(&name), name_key(&buf, s, s + len));
                    assert_eq!((a.w0, a.w1, a.hash), (b.w0, b.w1, b.hash), "{name:?}");
                }
            }
        }
    }

    /// Whether `src` holds none of the bytes [`Masks::gate`] lists and no `??`, read byte
    /// by byte.
    fn gate_clear_naive(src: &[u8]) -> bool {
        src.iter().all(|&b| {
            !(b < 0x20 && b != b'\t' && b != b'\n') && b < 0x80 && b != b'\\' && b != b'$'
        }) && !src.windows(2).any(|w| w == b"??")
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(3000))]
        /// A call that leaves the bound names to the renamer's pass
        /// ([`Prepared::deferred`], what `canonical_kernel` does) gives what one that
        /// checks them first ([`Prepared::new`]) gives: key, text, refusals, pinned and
        /// renamed names. Bound, free and kept names drawn from one vocabulary (names
        /// both bound and free, reserved names, the own name, empty), with and without a
        /// derivation, over texts spelling them.
        #[test]
        fn deferring_the_bound_names_to_the_renamer_changes_nothing(
            bound in proptest::collection::vec(0usize..12, 0..8),
            free in proptest::collection::vec(0usize..12, 0..4),
            keep in proptest::collection::vec(0usize..12, 0..3),
            derive in proptest::bool::ANY,
            words in proptest::collection::vec(0usize..12, 0..30),
            seps in proptest::collection::vec(
                proptest::sample::select(vec![" ", "(", ") ", "->", ".", " = ", ";\n", "/* ", " */", "\"", "#x\n"]),
                30,
            ),
        ) {
            const VOCAB: [&str; 12] = [
                "x", "n1_x", "i3", "v2_a", "__r", "_R", "sqrtf", "k", "data0", "y_grad", "", "i",
            ];
            let pick = |v: &[usize]| v.iter().map(|&i| VOCAB[i]).collect::<Vec<_>>();
            let mut names = Names::new()
                .with_bound(pick(&bound))
                .with_free(pick(&free))
                .with_keep(pick(&keep))
                .with_text_names(false);
            if derive {
                names = names.with_derivation("", "_grad");
            }
            let mut text = String::from("void k(float *x) { ");
            for (w, sep) in words.iter().zip(&seps) {
                text.push_str(VOCAB[*w]);
                text.push_str(sep);
            }
            text.push('}');
            let deferred = canonical_kernel(&text, Some("k"), &names);
            let eager = canonical_prepared(
                &text,
                Some("k"),
                &Prepared::new(&names),
                Err(KEPT_NO_READING),
            );
            proptest::prop_assert_eq!(deferred.key(&[b"o"]), eager.key(&[b"o"]), "{:?}", text);
            proptest::prop_assert_eq!(deferred.text(), eager.text());
            proptest::prop_assert_eq!(deferred.refusals(), eager.refusals());
            proptest::prop_assert_eq!(deferred.pinned(), eager.pinned());
            proptest::prop_assert_eq!(
                deferred.renamed().collect::<Vec<_>>(),
                eager.renamed().collect::<Vec<_>>()
            );
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(3000))]
        /// The scan skips the phases 1-2 gate's search only where that search finds
        /// nothing: the scan's gate (block masks) says "clear" exactly when a byte-by-byte
        /// reading does, and a clear text is one the gate accepts. Texts of every byte
        /// class, long enough to cross blocks (a `??` split across two).
        #[test]
        fn the_scan_skips_the_gate_only_where_the_gate_refuses_nothing(
            bytes in proptest::collection::vec(
                proptest::prop_oneof![
                    8 => proptest::sample::select(
                        b"iv_nx09 \t\n\r\x0b\x0c\0\x01\x1f\x7f?=/'\"()!<>-*#%[]\\$.:\x80\xa0\xc2\xff".to_vec()
                    ),
                    1 => proptest::prelude::any::<u8>(),
                ],
                0..200,
            )
        ) {
            let clear = gate_clear_naive(&bytes);
            if clear {
                proptest::prop_assert_eq!(crate::phases::untokenizable(&bytes), None);
            }
            let names = Names::new();
            let prepared = Prepared::new(&names);
            let mut r = Renamer::new(&bytes, &prepared, true, None, b"", &[]);
            let outcome = r.run();
            if outcome.is_err() {
                // The scan stopped early: it cannot tell.
                proptest::prop_assert!(!r.gate_clear);
            } else if r.collisions.is_none() {
                proptest::prop_assert_eq!(r.gate_clear, clear);
            }
        }
    }

    proptest::proptest! {
        /// The include rule skips its lexer pass only where the pass would pin nothing:
        /// a text including standard headers only, defining no macro, spelling no
        /// standard header's observing macro.
        #[test]
        fn the_include_rules_skip_loses_no_pin(
            pieces in proptest::collection::vec(
                proptest::sample::select(vec![
                    "\n#include <stdint.h>\n", "\n#include <stdio.h>\n",
                    "\n#include <stdint.h>\n", "\n#define M(a) a\n", "\n#define M(a) a\n",
                    "\n# /* c */ define N 1\n", "M(n1)", "M(n1)", "N(i2)", "f(n1, i1)",
                    "printf(i1)", "(", ")", "i1", "n1", " ", "\n", ";", "if (i1)",
                    "\n#include \"x.h\"\n", "INT64_C(n1)", "assert(n1)", "/* INT64_C */",
                    "\"INT64_C(\"",
                ]),
                0..12,
            ),
        ) {
            let text: String = pieces.concat();
            let src = text.as_bytes();
            let names = Names::new().with_bound(["n1"]);
            let prepared = Prepared::new(&names);
            let mut r = Renamer::new(src, &prepared, true, None, b"", &[]);
            if r.run().is_ok()
                && r.includes == crate::rename::INCLUDES_STANDARD
                && !r.defines
                && !crate::phases::mentions_standard_observer(src)
            {
                proptest::prop_assert!(
                    renamed_in_unowned_calls(src, &r, None).is_empty(),
                    "{:?}",
                    text
                );
            }
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(3000))]
        /// The scan meets every identifier starting with `_` in code, directives and
        /// attributes as the lexer reads them: once it read a whole text the phases 1-2
        /// gate accepts, its first reserved identifier of unknown meaning is what the
        /// whole-text search [`crate::phases::unknown_reserved`] finds, and the attribute
        /// regions read from the introducers it met are those of the whole-text lexing
        /// ([`crate::phases::attribute_regions`]). Pieces that cross blocks, numbers
        /// (`1.__x`), comments, literals, directives, `[[...]]`, with names that need a
        /// look (`i1`, bound `_b`) and names that do not.
        #[test]
        fn the_scan_finds_reserved_names_and_attribute_regions_as_the_lexer_does(
            pieces in proptest::collection::vec(
                proptest::sample::select(vec![
                    "__x", "_X", "__tvm_a", "__pool2", "_Bool", "__func_", "_b", "_", "i1",
                    "__attribute__", "__attribute", "__declspec", "((", "))", "(", ")",
                    " ", "\n", "\t", "1.", "1e+", ".", "->", "+", "0x", "/*", "*/", "//",
                    "\"", "'", "#", "#define ", "[[", "]]", "x", "aligned", ";", ",",
                    "%:", "?", "__FILE__", "__attribute__((", "__declspec(", " __attribute ( (",
                    "__has_builtin", "__has_builtin(", "__is_identifier (", "__has_zz(",
                    "__is_", "__builtin_expect", "__builtin_LINE", "_Generic",
                ]),
                0..80,
            ),
            bound in proptest::bool::ANY,
        ) {
            let text: String = pieces.concat();
            let src = text.as_bytes();
            let names = if bound { Names::new().with_bound(["_b"]) } else { Names::new() };
            let prepared = Prepared::new(&names);
            let bound_ok = prepared.refusal.is_none();
            let mut r = Renamer::new(src, &prepared, bound_ok, None, b"", &[]);
            let outcome = r.run();
            if outcome.is_ok() && r.complete && crate::phases::untokenizable(src).is_none() {
                let want = crate::phases::unknown_reserved(src).map(|(at, _)| at);
                proptest::prop_assert_eq!(r.reserved, want, "{:?}", text);
                proptest::prop_assert_eq!(
                    crate::phases::attribute_regions_at(src, &r.attributes),
                    crate::phases::attribute_regions(src),
                    "{:?}",
                    text
                );
            }
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(5000))]
        /// The scan [`Renamer::run`] runs here (AVX2 on the machines this is built and
        /// tested on) ends as the baseline one does: the same outcome, encoding, renamed
        /// and pinned names, collisions, and what the gates read from it. Texts of every
        /// byte class the scan tells apart (names that need a look or not, every special
        /// byte alone and paired, member operators, numbers, comments, directives,
        /// literals, non-ASCII, control bytes), long enough to cross blocks.
        #[test]
        fn the_avx2_scan_ends_as_the_baseline_scan_does(
            pieces in proptest::collection::vec(
                proptest::sample::select(vec![
                    "i1", "i22", "v3_x", "n1_x", "x", "k__seg1", "int", "void", "_X", "__x",
                    "i", "v", "ix", "vy", "v3",
                    "__attribute__((", "aligned", "R\"", "u8'", "L'", "1e+", "0x1p-", "1.", ".",
                    "->", "::", ":", ">", "+", "-", "[", "[[", "]]", "/", "//", "/*", "*/", "*",
                    "?", "??", "%", "%:", "&", "#", "#define S(a) #a\n", "\"", "'", "\\", "$",
                    " ", "  ", "\n", "\t", "\r", "\x0b", "\0", "\x01", "é", "(", ")", ";",
                    "{", "}", "=", ",", "0", "123", "a1", "c1", "f1", "b",
                ]),
                0..160,
            ),
            names_pick in 0usize..5,
            own in proptest::bool::ANY,
        ) {
            let text: String = pieces.concat();
            let src = text.as_bytes();
            let names = match names_pick {
                0 => Names::new(),
                1 => Names::new().with_bound(["n1_x", "x", "_b"]).with_free(["int"]),
                2 => Names::new().with_bound(["n1_x", "x"]).with_derivation("n", "_x"),
                // Listed names starting with `i` and `v`: every name starting so needs
                // a look, not only those of the minted shapes.
                3 => Names::new().with_bound(["ix", "vy"]),
                // More first bytes than the scan compares against: every identifier
                // start is met (`FirstBytes::all`).
                _ => Names::new().with_bound(["a1", "b1", "c1", "d1", "e1", "f1", "n1_x", "x", "_b"]),
            };
            let prepared = Prepared::new(&names);
            let bound_ok = prepared.refusal.is_none();
            let own = own.then_some(&b"k__seg1"[..]);
            let mut a = Renamer::new(src, &prepared, bound_ok, own, b"k__seg", &[]);
            let mut b = Renamer::new(src, &prepared, bound_ok, own, b"k__seg", &[]);
            let outcome = |r: Result<(), Ambiguous>| r.err().map(|e| (e.offset, e.what, e.observer));
            proptest::prop_assert_eq!(outcome(a.run()), outcome(b.run_baseline()), "{:?}", text);
            proptest::prop_assert_eq!(&a.out, &b.out, "{:?}", text);
            proptest::prop_assert_eq!(&a.side, &b.side);
            proptest::prop_assert_eq!(
                (a.next, a.pinned_count, a.redo, a.collisions, a.complete, a.gate_clear),
                (b.next, b.pinned_count, b.redo, b.collisions, b.complete, b.gate_clear)
            );
            proptest::prop_assert_eq!((a.reserved, &a.attributes), (b.reserved, &b.attributes));
            proptest::prop_assert_eq!(pinned_names(&a), pinned_names(&b));
        }
    }

    #[test]
    fn the_scan_sees_a_double_question_mark_split_across_blocks() {
        for at in [0, 1, 62, 63, 64, 126, 127] {
            let mut text = vec![b' '; 200];
            text[at] = b'?';
            text[at + 1] = b'?';
            let names = Names::new();
            let prepared = Prepared::new(&names);
            let mut r = Renamer::new(&text, &prepared, true, None, b"", &[]);
            assert!(r.run().is_ok(), "{at}");
            assert!(!r.gate_clear, "{at}");
            drop(r);
            // With `=` after it, a trigraph: refused wherever it stands.
            text[at + 2] = b'=';
            let c = canonical_kernel(std::str::from_utf8(&text).expect("ASCII"), None, &names);
            assert!(
                matches!(c.refusals(), [Refusal::AmbiguousLexing { offset, .. }] if *offset == at),
                "{at}: {:?}",
                c.refusals()
            );
        }
    }

    /// Asserts that `text` is keyed raw with a refusal whose description holds `what`.
    fn assert_refused(text: &str, names: &Names, what: &str) {
        let c = canonical_kernel(text, Some("k__seg3"), names);
        assert_eq!(c.renamed_count(), 0, "{text:?}");
        assert_eq!(c.encoding(), text.as_bytes(), "{text:?}");
        assert_eq!(c.kernel_token(), Some("k__seg3"), "{text:?}");
        let said: Vec<String> = c.refusals().iter().map(ToString::to_string).collect();
        assert!(
            said.iter().any(|r| r.contains(what)),
            "{text:?}: {said:?} lacks {what:?}"
        );
    }

    /// Issue 26, class 2: a reserved identifier of unknown meaning anywhere but in a
    /// comment or literal keys the kernel over its exact text (clang's column and
    /// member-name built-ins, glibc's stringifying and pasting macros), while the
    /// reserved names real renderers use rename as before.
    #[test]
    fn unknown_reserved_identifiers_refuse_renaming() {
        let names = Names::new().with_bound(["n1_x"]);
        for (text, what) in [
            (
                "int c = __builtin_COLUMN(); float n1_x = i1;",
                "__builtin_COLUMN",
            ),
            (
                "struct s { int i1; } v; __builtin_dump_struct(&v, printf); i2;",
                "__builtin_dump_struct",
            ),
            ("puts(__STRING(n1_x));", "__STRING"),
            ("int __CONCAT(n1_, x) = i1;", "__CONCAT"),
            ("puts(__FUNCDNAME__); i1;", "__FUNCDNAME__"),
            (
                "#define C __builtin_COLUMN()\nint c = C; i1;",
                "__builtin_COLUMN",
            ),
            (
                "[[gnu::aligned(__builtin_COLUMN())]] int i1;",
                "__builtin_COLUMN",
            ),
            (
                "int i1 = __builtin_has_attribute(i2, packed);",
                "__builtin_has_attribute",
            ),
            (
                "int i1 = (int)__builtin_offsetof(struct s, i2);",
                "__builtin_offsetof",
            ),
            ("int i1 = __has_zz(i2);", "__has_zz"),
        ] {
            assert_refused(text, &names, what);
        }
        // Comments and literals observe nothing; known names rename as before.
        for text in [
            "/* __builtin_COLUMN */ float n1_x = i1; puts(\"__STRING\");",
            "_Bool n1_x = __builtin_isnan(i1) ? 0 : 1;",
            "const char* f = __FILE__ __DATE__; int n1_x = __LINE__ + i1;",
            "const char* __tvm_assert_parts[6]; __pool3[i1] = __builtin_nanf(\"\");",
            "int i1 = _Generic(i2, int: 1) + __builtin_expect(i2, 0);",
        ] {
            let c = canonical_kernel(text, Some("k__seg3"), &names);
            let unknown = c
                .refusals()
                .iter()
                .any(|r| matches!(r, Refusal::UnknownReserved { .. }));
            assert!(
                !unknown && c.renamed_count() > 0,
                "{text:?}: {:?}",
                c.refusals()
            );
        }
    }

    /// Issue 26, class 3: GNU and Microsoft attribute syntax is a region like `[[...]]`:
    /// a name that would be renamed inside one keys the kernel over its exact text.
    #[test]
    fn gnu_attributes_are_regions() {
        let names = Names::new().with_bound(["always_inline", "packed", "noinline", "n1_x"]);
        for text in [
            "static inline __attribute__((always_inline)) int f(int always_inline) { return always_inline; }",
            "struct __attribute((packed)) s { char a; int b; }; int packed = 1;",
            "__declspec(noinline) int g(int noinline);",
            "int f(void) __attribute__ /* c */ ((k__seg3));",
        ] {
            assert_refused(text, &names, "inside a GNU attribute");
        }
        // Asm operands (`: "=r"(x)`) are regions too: any spelling of asm keys the
        // kernel over its exact text, so nothing inside one is renamed.
        for text in [
            "asm volatile(\"add %1, %0\" : \"=r\"(n1_x) : \"r\"(i1));",
            "__asm(\"\" : \"+r\"(n1_x));",
            "__asm__ __volatile__(\"\" : : \"r\"(i1) : \"memory\");",
        ] {
            assert_refused(text, &names, "asm");
        }
        // An attribute without a renamed name inside keeps renaming.
        let c = canonical_kernel(
            "typedef float float4 __attribute__((aligned(16),vector_size(16))); float4 n1_x = i1;",
            Some("k__seg3"),
            &names,
        );
        assert_eq!((c.renamed_count(), c.refusals()), (2, &[][..]));
    }

    /// Class 1 of issue 12: phases 1-2 as gcc performs them. Every construct whose
    /// reading depends on them refuses, wherever it occurs.
    #[test]
    fn phases_one_and_two_refuse_wherever_they_occur() {
        let names = Names::new();
        for (text, what) in [
            // Splices: in a literal, after an escaped backslash, in a comment delimiter,
            // in an identifier, in a line comment, with blanks before the newline, CRLF.
            ("s = \"i1\\\n\"; i1;", "splice"),
            ("s = \"a\\\\\\\n i1\"; i1;", "splice"),
            ("/* *\\\n/ i1 */ i1;", "splice"),
            ("i\\\n1 = i1;", "splice"),
            ("// c \\ \t\ni1 = 0;", "splice"),
            ("#define X \\\r\ni1\ni1;", "splice"),
            ("i1 = 1; \\", "splice"),
            // A lone CR ends a line to gcc (for `//` comments and directives).
            ("// c\ri1 = 1;", "carriage return"),
            ("#define X\ri1 = 2;\ni1;", "carriage return"),
            // `$` in identifiers, numbers, before a digit, in comments, directives and
            // attributes, after a literal that the end of its line ends.
            ("i1$ = i1;", "`$`"),
            ("x = 1$i1 + i1;", "`$`"),
            ("$1 = i1;", "`$`"),
            ("x = i1; // $ \n", "`$`"),
            ("/* i1$ */ i1;", "`$`"),
            ("#define S \"$\"\ni1;", "`$`"),
            ("[[gnu::a$]] int i1;", "`$`"),
            ("s = \"i1\n$\"; i1;", "`$`"),
            // Digit separators and `u8` character literals (dialect-dependent).
            ("x = 1'2 + i1 + '3;", "digit separator"),
            ("x = 0x1'f + i1;", "digit separator"),
            ("x = u8'a' + i1;", "digit separator"),
            ("x = 1.'2' + i1;", "digit separator"),
            ("#if 1'0 /* \n i1 */\ni1;", "digit separator"),
            // NUL (white space to gcc) and trigraphs anywhere.
            ("s.\0i1 + i1;", "NUL"),
            ("s = \"??/\"; i1;", "trigraph"),
        ] {
            assert_refused(text, &names, what);
        }
        // A `$` inside a string or character literal is one character of it.
        let c = canon("s = \"i1 $ \\\"$\"; c = '$'; w = L\"$\"; i1 = i2;", &names);
        assert!(c.refusals().is_empty(), "{:?}", c.refusals());
        assert_eq!(c.renamed_count(), 2);
        assert!(
            c.text()
                .starts_with("s = \"i1 $ \\\"$\"; c = '$'; w = L\"$\"; kc0")
        );
        // Encoding prefixes stay literals; a quote after other bytes is plain.
        let c = canon("x = L'a' + u'b' + U'c' + (i1)'d';", &names);
        assert!(c.refusals().is_empty(), "{:?}", c.refusals());
        assert_eq!(c.renamed_count(), 1);
    }

    /// CRLF line ends are handled exactly: the `\r` is white space.
    #[test]
    fn crlf_is_white_space() {
        let names = Names::new();
        let a = canon("x = i1;\r\n// i1\r\n#define N 4\r\ni2 = i1;\r\n", &names);
        assert!(a.refusals().is_empty());
        assert_eq!(
            a.text(),
            "x = kc0;\r\n// kc0\r\n#define N 4\r\nkc1 = kc0;\r\n"
        );
        // CRLF and LF texts differ (a `\r` is a byte of the text).
        assert_ne!(
            a.key(&[]),
            canon("x = i1;\n// i1\n#define N 4\ni2 = i1;\n", &names).key(&[])
        );
    }

    /// A member name after `.`, `->` or `::` is never renamed, whatever stands between:
    /// comments and directives that end in white space (a trailing blank, the CR of a
    /// CRLF line end) included.
    #[test]
    fn members_across_comments_and_directives_ending_in_white_space() {
        for text in [
            "s. /* c */ i1 + i1",
            "s. /* c */ /* d */ i1 + i1",
            "s.// c \ni1 + i1",
            "s.// c\r\ni1 + i1",
            "s->// c \t\n  i1 + i1",
            "s.\n#define X \ni1 + i1",
            "s.\n#define X\r\ni1 + i1",
            "s.\n#pragma x\n// c \n /* d */ i1 + i1",
        ] {
            let c = canon(text, &Names::new());
            assert_eq!(c.renamed_count(), 0, "{text:?}: {}", c.text());
            assert_eq!(c.pinned(), ["i1"], "{text:?}");
        }
    }

    /// Class 2 of issue 12: the spelling of a renamed name is observable.
    #[test]
    fn spelling_observers_refuse_renaming() {
        let names = Names::new();
        for (text, what) in [
            ("void k__seg3(void) { puts(__func__); i1 = 0; }", "__func__"),
            ("void k__seg3(void) { puts(__FUNCTION__); }", "FUNCTION"),
            ("void i1(void) { puts(__PRETTY_FUNCTION__); }", "FUNCTION"),
            (
                "const char *f(void) { return __builtin_FUNCTION(); }",
                "FUNCTION",
            ),
            ("#define S(x) #x\nputs(S(i1));", "`#` or `##`"),
            ("#define P(a, b) a ## b\nint P(i, 1) = i1;", "`#` or `##`"),
            ("%:define S(x) %:x\nputs(S(i1));", "`#` or `##`"),
            ("assert(i1 > 0);", "assert"),
            ("__asm__(\"call i1\"); void i1(void) {}", "asm"),
            (
                "_Pragma(\"omp parallel for private(i3)\") for (i3 = 0;;) ;",
                "_Pragma",
            ),
            ("void i2(void) __attribute__((alias(\"i1\")));", "alias"),
        ] {
            assert_refused(text, &names, what);
        }
        // `assert` is configurable; so is any other observing macro.
        let quiet = Names {
            observers: BTreeSet::new(),
            ..Names::new()
        };
        assert_eq!(canon("assert(i1 > 0);", &quiet).renamed_count(), 1);
        assert_refused("LOG(i1);", &quiet.clone().with_observers(["LOG"]), "LOG");
        // Without OCANNL's minted shapes only listed names are renamed: a helper
        // `v2_load` from a header and a global `i0` are kept (two kernels calling
        // `v2_load` and `v3_load` differ), a bound name is still renamed.
        let listed = Names::new()
            .with_bound(["n1_x"])
            .with_derivation("", "_grad")
            .with_minted_shapes(false);
        let a = canon("y = v2_load(n1_x) + i0 + i0_grad + n1_x_grad;", &listed);
        let b = canon("y = v3_load(n1_x) + i0 + i0_grad + n1_x_grad;", &listed);
        assert_eq!(a.text(), "y = v2_load(kc0) + i0 + i0_grad + kc1;");
        assert_ne!(a.key(&[]), b.key(&[]));
        assert_eq!(
            canon("y = v2_load(x);", &Names::new()).key(&[]),
            canon("y = v3_load(x);", &Names::new()).key(&[]),
            "the default renames the shapes (the documented contract)"
        );
        // A macro's name inside a longer word invokes nothing (TVM's `__tvm_assert_parts`).
        let c = canon("const char *__tvm_assert_parts[2]; i1 = 0;", &names);
        assert!(c.refusals().is_empty(), "{:?}", c.refusals());
        assert_eq!(c.renamed_count(), 1);
        // The own name keeps its segment index when observed.
        let a = canonical_kernel(
            "void k__seg3(void) { puts(__func__); }",
            Some("k__seg3"),
            &names,
        );
        let b = canonical_kernel(
            "void k__seg4(void) { puts(__func__); }",
            Some("k__seg4"),
            &names,
        );
        assert_ne!(a.key(&[]), b.key(&[]));
        // A `#` in a directive only as its introducer is fine.
        assert!(
            canon("#define N 4\n# pragma x\ni1", &names)
                .refusals()
                .is_empty()
        );
    }

    /// Found by the differential fuzz target: a text that renames nothing but replaces its
    /// own name (`k__seg1` to its token) still meets the include rule, so the own name
    /// inside a pasting call's arguments is kept whole.
    #[test]
    fn the_include_rule_keeps_the_own_name_inside_a_pasting_call() {
        let text =
            "#include <stdint.h>\nlong x = INT64_C(k__seg1);\nint k__seg1(void) { return 0; }\n";
        let c = canonical_kernel(text, Some("k__seg1"), &Names::new());
        // The file-scope object keeps the whole name in the key (no index dropped), so it
        // needs no pin.
        assert_eq!(c.kernel_token(), Some("k__seg1"));
        let twin = text.replace("k__seg1", "k__seg2");
        assert_ne!(
            c.key(&[]),
            canonical_kernel(&twin, Some("k__seg2"), &Names::new()).key(&[])
        );
        assert_eq!(
            crate::reference::disagreement(text, Some("k__seg1"), &Names::new()),
            None
        );
    }

    #[test]
    fn many_names_grow_the_table() {
        let text: String = (0..5000).map(|k| format!("i{k} + ")).collect();
        let c = canon(&text, &Names::new());
        assert_eq!(c.renamed_count(), 5000);
        assert!(c.text().ends_with("kc4999 + "));
    }

    /// Names that differ only in a late byte (`cast10`..`cast99` differ in their fifth
    /// and sixth bytes, `v1_acc0`.. in their seventh) share an index's worth of hash
    /// bits less often than not; every one must still find its own entry, also across
    /// growth, in both orders of first occurrence.
    #[test]
    fn names_differing_late_keep_their_own_numbers() {
        let bound: Vec<String> = (10..400)
            .map(|k| format!("cast{k}"))
            .chain((0..10).map(|k| format!("alu{k}_x")))
            .collect();
        let names = Names::new().with_bound(bound.iter().cloned());
        let uses: String = bound
            .iter()
            .map(|b| format!("{b} = {b} + v1_acc{};\n", b.len()))
            .collect();
        let text = format!(
            "{uses}{}",
            bound
                .iter()
                .rev()
                .map(|b| format!("{b};"))
                .collect::<String>()
        );
        let c = canon(&text, &names);
        assert_eq!(
            crate::reference::disagreement(&text, Some("k__seg3"), &names),
            None
        );
        let renamed: Vec<String> = c.renamed().map(|r| r.into_owned()).collect();
        for b in &bound {
            assert_eq!(renamed.iter().filter(|r| *r == b).count(), 1, "{b}");
        }
        // Each bound name is numbered where first met, in text order.
        let order: Vec<&String> = renamed.iter().filter(|r| r.starts_with("cast")).collect();
        assert_eq!(order.first().map(|s| s.as_str()), Some("cast10"));
        assert_eq!(order.last().map(|s| s.as_str()), Some("cast399"));
    }
}
