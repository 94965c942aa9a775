//! Renaming a kernel's own names to canonical tokens: [`canonical_kernel`].

use std::collections::{BTreeSet, HashMap};
use std::fmt;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::OnceLock;

use crate::encoding::{self as enc, push_varint, push_verbatim};
use crate::lexer::{Lexer, TokenKind, is_ident_continue, is_ident_start};
use crate::{digest_of_parts, kernel_token};

/// Domain separation and format version of [`Canonical::key`]. Bump on any change of the
/// encoding or of the renaming rules, so no key of an old format can equal a new one.
/// History: v1 -- first format.
const KEY_DOMAIN: &[u8] = b"kcache canonical-text v1";

/// A derivation template: the emitter derives the name `prefix + base + suffix` from a
/// base name (a bound name, a loop symbol, or digits).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Derivation {
    /// Text before the base name.
    pub prefix: String,
    /// Text after the base name.
    pub suffix: String,
}

impl Derivation {
    /// The template `prefix + base + suffix`.
    pub fn new(prefix: impl Into<String>, suffix: impl Into<String>) -> Self {
        Derivation {
            prefix: prefix.into(),
            suffix: suffix.into(),
        }
    }

    /// The base of `name` under this template, if `name` is `prefix + base + suffix`
    /// with a non-empty base.
    fn base<'n>(&self, name: &'n str) -> Option<&'n str> {
        let rest = name.strip_prefix(self.prefix.as_str())?;
        let base = rest.strip_suffix(self.suffix.as_str())?;
        (!base.is_empty()).then_some(base)
    }
}

/// What the renderer knows about a kernel's names: which ones the kernel binds (and may
/// therefore be renamed) and which ones it must keep.
#[derive(Clone, Debug, Default)]
pub struct Names {
    /// Names the kernel declares for its tensor nodes (parameters, locals), bare or
    /// disambiguated. Renamed, unless renaming is refused (see [`canonical_kernel`]).
    pub bound: BTreeSet<String>,
    /// Names the kernel refers to from outside. Never renamed; a bound name that is also
    /// free refuses renaming of all bound names.
    pub free: BTreeSet<String>,
    /// Names never renamed, whatever they look like (builtins, vendor names).
    pub keep: BTreeSet<String>,
    /// Templates of the emitter's own derived names.
    pub derivations: Vec<Derivation>,
}

impl Names {
    /// No names: only loop symbols and scope-locals are renamed.
    pub fn new() -> Self {
        Names::default()
    }

    /// Adds bound names.
    pub fn with_bound<S: Into<String>>(mut self, names: impl IntoIterator<Item = S>) -> Self {
        self.bound.extend(names.into_iter().map(Into::into));
        self
    }

    /// Adds free names.
    pub fn with_free<S: Into<String>>(mut self, names: impl IntoIterator<Item = S>) -> Self {
        self.free.extend(names.into_iter().map(Into::into));
        self
    }

    /// Adds names to keep.
    pub fn with_keep<S: Into<String>>(mut self, names: impl IntoIterator<Item = S>) -> Self {
        self.keep.extend(names.into_iter().map(Into::into));
        self
    }

    /// Adds the derivation template `prefix + base + suffix`.
    pub fn with_derivation(mut self, prefix: impl Into<String>, suffix: impl Into<String>) -> Self {
        self.derivations.push(Derivation::new(prefix, suffix));
        self
    }

    /// Why bound names may not be renamed, if they may not: the first bound name that is
    /// also free, else the first bound name in the reserved namespace.
    pub fn bound_refusal(&self) -> Option<Refusal> {
        let (small, large) = if self.bound.len() <= self.free.len() {
            (&self.bound, &self.free)
        } else {
            (&self.free, &self.bound)
        };
        if let Some(name) = small.iter().find(|n| large.contains(*n)) {
            return Some(Refusal::BoundMeetsFree { name: name.clone() });
        }
        self.bound
            .iter()
            .find(|n| is_reserved(n))
            .map(|name| Refusal::ReservedBoundName { name: name.clone() })
    }
}

/// Why some or all names were left as spelled. Renaming less is always sound: a refusal
/// can cost a cache miss, never a wrong hit.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Refusal {
    /// `name` is both bound and free: no bound name (nor a name derived from one) is
    /// renamed. Loop symbols and scope-locals still are.
    BoundMeetsFree {
        /// The first such name.
        name: String,
    },
    /// `name` is bound but lies in the implementation's reserved namespace (`__x`, `_X`),
    /// so other occurrences might be its builtin or macro meaning: no bound name (nor a
    /// name derived from one) is renamed. Loop symbols and scope-locals still are.
    ReservedBoundName {
        /// The first such name.
        name: String,
    },
    /// The text holds something whose tokenization depends on the language dialect (a
    /// backslash outside literals, comments and preprocessor lines, a trigraph, a C++
    /// raw string): nothing is renamed and the key is taken over the exact text.
    AmbiguousLexing {
        /// Byte offset of the first such thing.
        offset: usize,
        /// What it was.
        what: &'static str,
    },
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::BoundMeetsFree { name } => {
                write!(f, "bound name `{name}` is also free: no bound name renamed")
            }
            Refusal::ReservedBoundName { name } => write!(
                f,
                "bound name `{name}` is in the reserved namespace: no bound name renamed"
            ),
            Refusal::AmbiguousLexing { offset, what } => write!(
                f,
                "{what} at byte {offset}: nothing renamed, key over the exact text"
            ),
        }
    }
}

/// `__x` or `_X`: the C implementation's reserved namespace.
fn is_reserved(name: &str) -> bool {
    let b = name.as_bytes();
    b.len() >= 2 && b[0] == b'_' && (b[1] == b'_' || b[1].is_ascii_uppercase())
}

/// A loop or static-index symbol: `i` then one or more digits.
fn is_symbol(name: &[u8]) -> bool {
    name.len() >= 2 && name[0] == b'i' && name[1..].iter().all(u8::is_ascii_digit)
}

/// A scope-local: `v`, one or more digits, `_`, anything.
fn is_scope_local(name: &[u8]) -> bool {
    if name.first() != Some(&b'v') {
        return false;
    }
    let digits = name[1..].iter().take_while(|b| b.is_ascii_digit()).count();
    digits > 0 && name.get(1 + digits) == Some(&b'_')
}

fn all_digits(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())
}

/// The kernel text a key is taken over: one kernel's tokens with the names it owns
/// renamed. See [`canonical_kernel`].
#[derive(Clone, Debug)]
pub struct Canonical {
    encoding: Vec<u8>,
    token: Option<String>,
    /// The renamed names, concatenated in number order; `renamed_ends[n]` ends name `n`.
    renamed_names: Vec<u8>,
    renamed_ends: Vec<usize>,
    refusals: Vec<Refusal>,
    pinned: Vec<String>,
    text: OnceLock<String>,
}

impl PartialEq for Canonical {
    fn eq(&self, other: &Self) -> bool {
        self.token == other.token && self.encoding == other.encoding
    }
}

impl Eq for Canonical {}

impl Canonical {
    /// The human-readable canonical text: renamed names spelled `ocannl_k<n>`, the
    /// kernel's own name spelled as its [`kernel_token`], each run of whitespace as one
    /// newline (if it held one) or one space. Equal keys give equal texts, but not the
    /// other way round: a free identifier spelled `ocannl_k0` looks like a renamed one
    /// here, while the key tells them apart.
    pub fn text(&self) -> &str {
        self.text
            .get_or_init(|| enc::render(&self.encoding, self.token.as_deref().unwrap_or("")))
    }

    /// The cache key: lowercase hex SHA-256 over the format version, the kernel token,
    /// the canonical [`encoding`](Self::encoding) and `extra_parts` (for example the
    /// compiler options), each length-prefixed as in [`digest_of_parts`].
    ///
    /// Equal keys mean: same extra parts, same kernel token, and kernel texts equal up to
    /// a consistent renaming of the names each one owns.
    pub fn key(&self, extra_parts: &[&[u8]]) -> String {
        let mut token_part = Vec::with_capacity(1 + self.token.as_ref().map_or(0, String::len));
        match &self.token {
            Some(t) => {
                token_part.push(b'K');
                token_part.extend_from_slice(t.as_bytes());
            }
            None => token_part.push(b'N'),
        }
        let mut parts: Vec<&[u8]> = Vec::with_capacity(3 + extra_parts.len());
        parts.push(KEY_DOMAIN);
        parts.push(&token_part);
        parts.push(&self.encoding);
        parts.extend_from_slice(extra_parts);
        digest_of_parts(&parts)
    }

    /// The compact tagged token stream the key is taken over (a prefix code: see the
    /// crate docs). Useful to compare two kernels byte by byte.
    pub fn encoding(&self) -> &[u8] {
        &self.encoding
    }

    /// The kernel token that replaced the kernel's own name, if a name was given.
    pub fn kernel_token(&self) -> Option<&str> {
        self.token.as_deref()
    }

    /// The renamed names in number order: the `n`th one became `ocannl_k<n>`.
    pub fn renamed(&self) -> impl Iterator<Item = std::borrow::Cow<'_, str>> + '_ {
        let mut start = 0;
        self.renamed_ends.iter().map(move |&end| {
            let name = String::from_utf8_lossy(self.renamed_names.get(start..end).unwrap_or(&[]));
            start = end;
            name
        })
    }

    /// How many distinct names were renamed.
    pub fn renamed_count(&self) -> usize {
        self.renamed_ends.len()
    }

    /// Why renaming was refused, in part or in whole; empty if it was not.
    pub fn refusals(&self) -> &[Refusal] {
        &self.refusals
    }

    /// Names that would have been renamed but also occur where nothing is renamed (after
    /// `.`, `->` or `::`, in a preprocessor line or an attribute), so they are kept as
    /// spelled everywhere; sorted.
    pub fn pinned(&self) -> &[String] {
        &self.pinned
    }
}

/// How a distinct name is treated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Slot {
    Renamed(u32),
    Verbatim,
    Own,
    /// Renamable, but occurs where nothing is renamed: kept as spelled everywhere.
    Pinned,
}

/// FxHash: fast hashing of short identifiers (no HashDoS concern: keys come from one
/// kernel and the map lives for one call).
#[derive(Default, Clone, Copy)]
struct FxHasher {
    hash: u64,
}

const FX_SEED: u64 = 0x51_7c_c1_b7_27_22_0a_95;

impl FxHasher {
    #[inline]
    fn add(&mut self, w: u64) {
        self.hash = (self.hash.rotate_left(5) ^ w).wrapping_mul(FX_SEED);
    }
}

impl Hasher for FxHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            let mut w = [0u8; 8];
            w.copy_from_slice(c);
            self.add(u64::from_le_bytes(w));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut w = [0u8; 8];
            w[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(w));
        }
    }

    #[inline]
    fn write_usize(&mut self, n: usize) {
        self.add(n as u64);
    }

    #[inline]
    fn finish(&self) -> u64 {
        self.hash
    }
}

type FxMap<K, V> = HashMap<K, V, BuildHasherDefault<FxHasher>>;

/// Something that makes the tokenization dialect-dependent; the kernel is then keyed raw.
struct Ambiguous {
    offset: usize,
    what: &'static str,
}

struct Renamer<'a, 'n> {
    src: &'a [u8],
    names: &'n Names,
    /// Bound names (and names derived from them) may be renamed.
    bound_ok: bool,
    map: FxMap<&'a [u8], Slot>,
    next: u32,
    out: Vec<u8>,
    renamed_names: Vec<u8>,
    renamed_ends: Vec<usize>,
    /// A name already renamed (or the own name) was pinned: the pass must be redone.
    redo: bool,
}

impl<'a, 'n> Renamer<'a, 'n> {
    fn new(
        src: &'a [u8],
        names: &'n Names,
        bound_ok: bool,
        own: Option<&'a [u8]>,
        pinned: &[&'a [u8]],
    ) -> Self {
        let mut map = FxMap::default();
        map.reserve(256);
        for p in pinned {
            map.insert(*p, Slot::Pinned);
        }
        if let Some(own) = own {
            map.entry(own).or_insert(Slot::Own);
        }
        Renamer {
            src,
            names,
            bound_ok,
            map,
            next: 0,
            out: Vec::with_capacity(src.len() + 16),
            renamed_names: Vec::new(),
            renamed_ends: Vec::new(),
            redo: false,
        }
    }

    /// Whether a name (in no pre-assigned slot) is one the kernel owns.
    fn renamable(&self, name: &[u8]) -> bool {
        if is_symbol(name) || is_scope_local(name) {
            return !self.kept(name);
        }
        let (bound, derivs) = (self.bound_ok, !self.names.derivations.is_empty());
        if !bound && !derivs {
            return false;
        }
        let Ok(s) = std::str::from_utf8(name) else {
            return false;
        };
        if self.names.keep.contains(s) || self.names.free.contains(s) {
            return false;
        }
        if bound && self.names.bound.contains(s) {
            return true;
        }
        self.names.derivations.iter().any(|d| {
            d.base(s).is_some_and(|base| {
                (bound && self.names.bound.contains(base))
                    || is_symbol(base.as_bytes())
                    || all_digits(base)
            })
        })
    }

    fn kept(&self, name: &[u8]) -> bool {
        if self.names.keep.is_empty() && self.names.free.is_empty() {
            return false;
        }
        match std::str::from_utf8(name) {
            Ok(s) => self.names.keep.contains(s) || self.names.free.contains(s),
            Err(_) => true,
        }
    }

    /// The slot of a name met where names are renamed (code or comment).
    #[inline]
    fn slot(&mut self, name: &'a [u8]) -> Slot {
        if let Some(s) = self.map.get(name) {
            return *s;
        }
        let s = if self.renamable(name) {
            let n = self.next;
            self.next += 1;
            self.renamed_names.extend_from_slice(name);
            self.renamed_ends.push(self.renamed_names.len());
            Slot::Renamed(n)
        } else {
            Slot::Verbatim
        };
        self.map.insert(name, s);
        s
    }

    /// Notes a name met where nothing is renamed: if it is renamable it is pinned.
    fn pin(&mut self, name: &'a [u8]) {
        match self.map.get_mut(name) {
            Some(s @ (Slot::Renamed(_) | Slot::Own)) => {
                *s = Slot::Pinned;
                self.redo = true;
            }
            Some(Slot::Verbatim | Slot::Pinned) => {}
            None => {
                let s = if self.renamable(name) {
                    Slot::Pinned
                } else {
                    Slot::Verbatim
                };
                self.map.insert(name, s);
            }
        }
    }

    /// Pins every identifier-like word in `bytes` (a preprocessor line or attribute).
    fn pin_words(&mut self, bytes: &'a [u8]) {
        let mut i = 0;
        while i < bytes.len() {
            let b = bytes[i];
            if is_ident_continue(b) {
                let s = i;
                while i < bytes.len() && is_ident_continue(bytes[i]) {
                    i += 1;
                }
                if is_ident_start(b) {
                    self.pin(&bytes[s..i]);
                }
            } else {
                i += 1;
            }
        }
    }

    #[inline]
    fn emit_name(&mut self, slot: Slot, name: &[u8]) {
        match slot {
            Slot::Renamed(n) => {
                self.out.push(enc::RENAMED);
                push_varint(&mut self.out, n as usize);
            }
            Slot::Own => self.out.push(enc::OWN),
            Slot::Verbatim | Slot::Pinned => push_verbatim(&mut self.out, enc::IDENT, name),
        }
    }

    /// Emits a comment with its words renamed like code.
    fn comment(&mut self, start: usize, bytes: &'a [u8]) -> Result<(), Ambiguous> {
        self.out.push(enc::COMMENT);
        let mut text_start = 0;
        let mut i = 0;
        while i < bytes.len() {
            let b = bytes[i];
            if is_ident_continue(b) {
                let s = i;
                while i < bytes.len() && is_ident_continue(bytes[i]) {
                    i += 1;
                }
                if is_ident_start(b) {
                    let word = &bytes[s..i];
                    let slot = self.slot(word);
                    if matches!(slot, Slot::Renamed(_) | Slot::Own) {
                        if s > text_start {
                            push_verbatim(&mut self.out, enc::TEXT, &bytes[text_start..s]);
                        }
                        self.emit_name(slot, word);
                        text_start = i;
                    }
                }
            } else {
                if b == b'?' && trigraph_at(bytes, i) {
                    return Err(Ambiguous {
                        offset: start + i,
                        what: "a trigraph",
                    });
                }
                i += 1;
            }
        }
        if bytes.len() > text_start {
            push_verbatim(&mut self.out, enc::TEXT, &bytes[text_start..]);
        }
        self.out.push(enc::COMMENT_END);
        Ok(())
    }

    fn run(&mut self) -> Result<(), Ambiguous> {
        let src = self.src;
        let mut after_member = false;
        for tok in Lexer::new(src) {
            let bytes = &src[tok.start..tok.end];
            match tok.kind {
                TokenKind::Whitespace => {
                    let tag = if bytes.contains(&b'\n') {
                        enc::NEWLINE
                    } else {
                        enc::SPACE
                    };
                    self.out.push(tag);
                }
                TokenKind::Ident => {
                    if after_member {
                        self.pin(bytes);
                        push_verbatim(&mut self.out, enc::IDENT, bytes);
                        after_member = false;
                    } else {
                        let slot = self.slot(bytes);
                        self.emit_name(slot, bytes);
                    }
                    if src.get(tok.end) == Some(&b'"')
                        && matches!(bytes, b"R" | b"LR" | b"uR" | b"UR" | b"u8R")
                    {
                        return Err(Ambiguous {
                            offset: tok.start,
                            what: "a raw string literal",
                        });
                    }
                }
                TokenKind::Punct => {
                    if bytes == b"?" && trigraph_at(src, tok.start) {
                        return Err(Ambiguous {
                            offset: tok.start,
                            what: "a trigraph",
                        });
                    }
                    match enc::punct_tag(bytes) {
                        Some(t) => self.out.push(t),
                        None => push_verbatim(&mut self.out, enc::OTHER, bytes),
                    }
                    after_member = matches!(bytes, b"." | b"->" | b"::");
                }
                TokenKind::Number => {
                    push_verbatim(&mut self.out, enc::NUMBER, bytes);
                    after_member = false;
                }
                TokenKind::Str | TokenKind::Char => {
                    if let Some(i) = find_trigraph(bytes) {
                        return Err(Ambiguous {
                            offset: tok.start + i,
                            what: "a trigraph",
                        });
                    }
                    let tag = if tok.kind == TokenKind::Str {
                        enc::STR
                    } else {
                        enc::CHAR
                    };
                    push_verbatim(&mut self.out, tag, bytes);
                    after_member = false;
                }
                TokenKind::LineComment | TokenKind::BlockComment => {
                    self.comment(tok.start, bytes)?;
                }
                TokenKind::Preprocessor | TokenKind::Attribute => {
                    if let Some(i) = find_trigraph(bytes) {
                        return Err(Ambiguous {
                            offset: tok.start + i,
                            what: "a trigraph",
                        });
                    }
                    self.pin_words(bytes);
                    let tag = if tok.kind == TokenKind::Preprocessor {
                        enc::PREPROC
                    } else {
                        enc::ATTR
                    };
                    push_verbatim(&mut self.out, tag, bytes);
                    after_member = false;
                }
                TokenKind::Other => {
                    if bytes == b"\\" {
                        return Err(Ambiguous {
                            offset: tok.start,
                            what: "a backslash outside literals and comments",
                        });
                    }
                    push_verbatim(&mut self.out, enc::OTHER, bytes);
                    after_member = false;
                }
            }
        }
        Ok(())
    }
}

/// Whether a trigraph (`??` then one of `=/'()!<>-`) starts at `i`.
fn trigraph_at(bytes: &[u8], i: usize) -> bool {
    bytes.get(i) == Some(&b'?')
        && bytes.get(i + 1) == Some(&b'?')
        && matches!(
            bytes.get(i + 2),
            Some(b'=' | b'/' | b'\'' | b'(' | b')' | b'!' | b'<' | b'>' | b'-')
        )
}

fn find_trigraph(bytes: &[u8]) -> Option<usize> {
    let mut from = 0;
    while let Some(k) = bytes[from..].iter().position(|&b| b == b'?') {
        let i = from + k;
        if trigraph_at(bytes, i) {
            return Some(i);
        }
        from = i + 1;
    }
    None
}

/// The canonical form of one kernel's C-like `text`: the names the kernel owns renamed
/// to canonical tokens numbered by first occurrence, and its own name (`kernel_name`,
/// when given) replaced by its [`kernel_token`].
///
/// **Renamed** (each distinct name to its own number, in order of first occurrence,
/// comments included):
/// * a loop or static-index symbol: `i` then digits (`i12`);
/// * a scope-local: `v`, digits, `_`, anything (`v3_acc`, `v7_`);
/// * a name in `names.bound`;
/// * a name `prefix + base + suffix` for a template in `names.derivations`, with base
///   in `names.bound`, a symbol, or digits.
///
/// **Never renamed:** a name in `names.keep` or `names.free`; an identifier after `.`,
/// `->` or `::`; anything inside an attribute `[[...]]`, a preprocessor line, or a string
/// or character literal. Comments are renamed like code. A name that would be renamed
/// but also occurs in one of these never-renamed places is kept as spelled everywhere
/// ([`Canonical::pinned`]), so a renamed name always stands for the same thing at every
/// occurrence.
///
/// **Refusals** ([`Canonical::refusals`]): if a bound name is also free, or a bound name
/// is in the reserved namespace (`__x`, `_X`), no bound name (nor a name derived from
/// one) is renamed: such a kernel may not compile, and its key must not reach the code
/// of a twin that did. If the text contains a backslash in code, a trigraph or a C++ raw
/// string (whose tokenization depends on the dialect), nothing is renamed and the key is
/// taken over the exact text.
///
/// Never panics, whatever the text.
pub fn canonical_kernel(text: &str, kernel_name: Option<&str>, names: &Names) -> Canonical {
    let src = text.as_bytes();
    let mut refusals = Vec::new();
    let bound_refusal = names.bound_refusal();
    let bound_ok = bound_refusal.is_none();
    refusals.extend(bound_refusal);
    let own = kernel_name.map(str::as_bytes);
    let token = kernel_name.map(|k| kernel_token(k).to_owned());

    let mut r = Renamer::new(src, names, bound_ok, own, &[]);
    let mut outcome = r.run();
    if outcome.is_ok() && r.redo {
        let pinned: Vec<&[u8]> = r
            .map
            .iter()
            .filter(|(_, s)| **s == Slot::Pinned)
            .map(|(k, _)| *k)
            .collect();
        r = Renamer::new(src, names, bound_ok, own, &pinned);
        outcome = r.run();
    }
    match outcome {
        Ok(()) => {
            let mut pinned: Vec<String> = r
                .map
                .iter()
                .filter(|(_, s)| **s == Slot::Pinned)
                .map(|(k, _)| String::from_utf8_lossy(k).into_owned())
                .collect();
            pinned.sort();
            Canonical {
                encoding: r.out,
                token,
                renamed_names: r.renamed_names,
                renamed_ends: r.renamed_ends,
                refusals,
                pinned,
                text: OnceLock::new(),
            }
        }
        Err(Ambiguous { offset, what }) => {
            let mut encoding = Vec::with_capacity(src.len() + 1);
            encoding.push(enc::RAW);
            encoding.extend_from_slice(src);
            refusals.push(Refusal::AmbiguousLexing { offset, what });
            Canonical {
                encoding,
                token,
                renamed_names: Vec::new(),
                renamed_ends: Vec::new(),
                refusals,
                pinned: Vec::new(),
                text: OnceLock::new(),
            }
        }
    }
}
