//! Renaming a kernel's own names to canonical tokens: [`canonical_kernel`].

use std::collections::BTreeSet;
use std::fmt;
use std::sync::OnceLock;

use crate::encoding::{self as enc, push_renamed};
use crate::lexer::{
    attribute_end, block_comment_end, ident_end, is_ident_continue, is_ident_start,
    line_comment_end, literal_end, number_end, preprocessor_end,
};
use sha2::{Digest, Sha256};

use crate::kernel_token;

/// Domain separation and format version of [`Canonical::key`]. Bump on any change of the
/// encoding or of the renaming rules, so no key of an old format can equal a new one.
/// History: v1 -- first format (text runs as length-prefixed elements); v2 -- text kept
/// verbatim, renamed and own names as tag bytes UTF-8 never uses; v3 -- phases 1-2
/// refusals (splices, lone CR, `$`, NUL, digit separators anywhere), spelling observers
/// (`__func__`, `asm`, `#`/`##` macros, `assert`) key the exact text with the whole own
/// name, members across comments ending in white space are no longer renamed; v4 -- a
/// `$` inside a string or character literal no longer refuses renaming (one anywhere
/// else still does), and an observing macro (`assert`) refuses only as a whole
/// identifier, not inside a longer word (`__tvm_assert_parts`); v5 -- a byte from 0x80
/// outside string and character literals refuses renaming (clang reads U+00A0 and other
/// Unicode spaces as white space: `i1 -\u{a0}i2` and `\u{a0}assert(i1)` were renamed).
/// Its length part and it fill exactly one SHA-256 block, so each key starts from a
/// hash state computed once ([`key_prefix`]).
const KEY_DOMAIN: &[u8] = b"kcache canonical-text v5 -- the key of a kernel encoding";
const _: () = assert!(8 + KEY_DOMAIN.len() == 64);

/// The SHA-256 state after the length-prefixed [`KEY_DOMAIN`].
fn key_prefix() -> &'static Sha256 {
    static PREFIX: OnceLock<Sha256> = OnceLock::new();
    PREFIX.get_or_init(|| {
        let mut h = Sha256::new();
        h.update(crate::part_len(KEY_DOMAIN.len()));
        h.update(KEY_DOMAIN);
        h
    })
}

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
///
/// # Contract: a renamed name is declared by the kernel text itself
///
/// Renaming is sound only for names whose meaning the kernel gives them: a parameter,
/// or a local it declares, in `text` (the text handed to [`canonical_kernel`], which
/// for cc-backend includes the prelude). Two kernels whose texts differ only in renamed
/// names get one key, so a name the kernel merely *uses* must never be renamed: a called
/// function, a global, a macro or a type from a header. List in [`Names::bound`] only
/// names your renderer declared in that kernel; if it also listed the functions it calls, a
/// kernel calling `sqrtf` and its copy calling `expf` would share a key, and one is answered with the other's
/// code (a wrong hit). Leaving a declared name out is always safe: it is keyed as
/// spelled, which costs a miss when a twin spells it otherwise, never a wrong hit.
///
/// Besides the names listed here, two name shapes are renamed *without being listed*
/// (they are how OCANNL's renderer spells its loop symbols and scope-locals): `i`
/// followed by digits (`i12`) and `v`, digits, `_`, anything (`v3_acc`). A renderer that
/// uses such a name for anything the kernel does not declare (a helper `v2_load` from a
/// header, a global `i0`) must list it in [`Names::keep`] (or [`Names::free`]), or turn
/// the shapes off ([`Names::with_minted_shapes`]`(false)`: then only listed names are
/// renamed).
///
/// `Names` says nothing about the kernel's own name, which is handled by the
/// `kernel_name` argument of [`canonical_kernel`].
#[derive(Clone, Debug)]
pub struct Names {
    /// Names the kernel declares for its tensor nodes (parameters, locals), bare or
    /// disambiguated. Renamed, unless renaming is refused (see [`canonical_kernel`]).
    /// Each must be declared by the kernel text wherever it occurs in it (see the
    /// contract above): listing a name the kernel only uses makes kernels that differ in
    /// it share a key. A listed name that occurs in the text neither itself nor through
    /// a name [`Names::derivations`] derive from it leaves the key as it is, unless it
    /// refuses renaming (a reserved name, or one also free: see [`Refusal`]).
    pub bound: BTreeSet<String>,
    /// Names the kernel refers to from outside. Never renamed; a bound name that is also
    /// free refuses renaming of all bound names.
    pub free: BTreeSet<String>,
    /// Names never renamed, whatever they look like (builtins, vendor names).
    pub keep: BTreeSet<String>,
    /// Templates of the emitter's own derived names. Every name a template matches
    /// (with a base in `bound`, a loop symbol, or digits) is renamed, so it too must be
    /// declared by the kernel text (see the contract above).
    pub derivations: Vec<Derivation>,
    /// Macros from headers that observe the spelling of their arguments or of the
    /// enclosing function (they stringify `#x`, paste `a##b`, or expand to `__func__`).
    /// Wherever one of these occurs in the text as a whole identifier (not inside a longer
    /// word or number; even in a comment or literal), nothing is renamed
    /// ([`Refusal::SpellingObserved`]). Default: `assert`. Macros
    /// *defined in the text* with `#` or `##` are found without being listed here.
    pub observers: BTreeSet<String>,
    /// Whether names of OCANNL's minted shapes (`i` and digits; `v`, digits, `_`,
    /// anything) are renamed without being listed (default `true`). With `false`, only
    /// [`Names::bound`] names (and names [`Names::derivations`] derive from them or from
    /// digits) are renamed: the safe setting for a renderer whose texts may use such
    /// names for something the kernel does not declare.
    pub minted_shapes: bool,
}

impl Default for Names {
    fn default() -> Self {
        Names {
            bound: BTreeSet::new(),
            free: BTreeSet::new(),
            keep: BTreeSet::new(),
            derivations: Vec::new(),
            observers: BTreeSet::from([crate::phases::DEFAULT_OBSERVER.to_owned()]),
            minted_shapes: true,
        }
    }
}

impl Names {
    /// No names: only loop symbols and scope-locals are renamed; `assert` is the one
    /// observing macro.
    pub fn new() -> Self {
        Names::default()
    }

    /// Sets [`Names::minted_shapes`]: whether `i12` and `v3_acc` shaped names are renamed
    /// without being listed.
    pub fn with_minted_shapes(mut self, on: bool) -> Self {
        self.minted_shapes = on;
        self
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

    /// Adds macros that observe spellings (see [`Names::observers`]).
    pub fn with_observers<S: Into<String>>(mut self, names: impl IntoIterator<Item = S>) -> Self {
        self.observers.extend(names.into_iter().map(Into::into));
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
        Prepared::new(self).refusal
    }
}

/// A 256-bit filter over (first byte, last byte, length) of a set of names: a name not
/// in the filter is surely not in the set, so most lookups skip the set itself.
#[derive(Clone, Copy, Default)]
struct NameFilter([u64; 4]);

impl NameFilter {
    #[inline(always)]
    fn slot(name: &[u8]) -> Option<usize> {
        let (&first, &last) = (name.first()?, name.last()?);
        Some(
            (usize::from(first).wrapping_mul(31) + usize::from(last).wrapping_mul(7) + name.len())
                & 255,
        )
    }

    fn add(&mut self, name: &[u8]) {
        if let Some(s) = Self::slot(name) {
            self.0[s >> 6] |= 1 << (s & 63);
        }
    }

    #[inline(always)]
    fn may_contain(&self, name: &[u8]) -> bool {
        Self::slot(name).is_some_and(|s| (self.0[s >> 6] >> (s & 63)) & 1 != 0)
    }
}

/// What one call needs from [`Names`], computed once per call.
struct Prepared<'n> {
    names: &'n Names,
    /// Keep and free names.
    kept: NameFilter,
    bound: NameFilter,
    refusal: Option<Refusal>,
}

impl<'n> Prepared<'n> {
    fn new(names: &'n Names) -> Self {
        let mut kept = NameFilter::default();
        let mut free = NameFilter::default();
        for n in &names.keep {
            kept.add(n.as_bytes());
        }
        for n in &names.free {
            kept.add(n.as_bytes());
            free.add(n.as_bytes());
        }
        let mut bound = NameFilter::default();
        let mut meets = None;
        let mut reserved = None;
        for n in &names.bound {
            bound.add(n.as_bytes());
            if meets.is_none() && free.may_contain(n.as_bytes()) && names.free.contains(n) {
                meets = Some(n);
            }
            if reserved.is_none() && is_reserved(n) {
                reserved = Some(n);
            }
        }
        let refusal = match (meets, reserved) {
            (Some(name), _) => Some(Refusal::BoundMeetsFree { name: name.clone() }),
            (None, Some(name)) => Some(Refusal::ReservedBoundName { name: name.clone() }),
            (None, None) => None,
        };
        Prepared {
            names,
            kept,
            bound,
            refusal,
        }
    }

    /// Whether `name` is a keep or free name.
    #[inline(always)]
    fn is_kept(&self, name: &[u8]) -> bool {
        self.kept.may_contain(name) && self.in_kept(name)
    }

    /// [`Self::is_kept`] past its filter, out of line (the sets' searches are large).
    #[inline(never)]
    fn in_kept(&self, name: &[u8]) -> bool {
        std::str::from_utf8(name)
            .is_ok_and(|s| self.names.keep.contains(s) || self.names.free.contains(s))
    }

    #[inline(never)]
    fn is_bound(&self, name: &str) -> bool {
        self.bound.may_contain(name.as_bytes()) && self.names.bound.contains(name)
    }
}

/// Why some or all names were left as spelled. Renaming less is always sound: a refusal
/// can cost a cache miss, never a wrong hit.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
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
    /// The text holds something whose tokenization is not modelled exactly for every
    /// dialect we accept (a line splice anywhere, a carriage return not before a
    /// newline, a `$` or a non-ASCII byte outside string and character literals, a NUL byte, a trigraph, a `'` after a number or an identifier
    /// other than an encoding prefix, a C++ raw string, a backslash in code): nothing is
    /// renamed and the key is taken over the exact text.
    AmbiguousLexing {
        /// Byte offset of the first such thing.
        offset: usize,
        /// What it was.
        what: &'static str,
    },
    /// The text can observe the spelling of a name: `__func__`, `__FUNCTION__`,
    /// `__PRETTY_FUNCTION__`, `__builtin_FUNCTION` (the enclosing function's name), `asm`,
    /// `_Pragma` or a symbol-naming attribute (`alias`, `weakref`, `ifunc`, `symver`:
    /// names read out of strings), a macro in [`Names::observers`], or a preprocessor
    /// line with `#` or `##` after its introducer (a macro that may stringify or paste
    /// its arguments). Nothing is renamed, the key is taken over the exact text, and the
    /// kernel's own name is kept whole (its segment index included).
    SpellingObserved {
        /// Byte offset of the first such thing.
        offset: usize,
        /// What it was.
        what: String,
    },
    /// An identifier in the reserved namespace (`__x`, `_X`) outside comments and
    /// literals whose meaning is not known (not on the short allow list of keywords,
    /// attribute introducers and the built-ins real renderers use): compilers and headers
    /// define built-ins and macros that observe a spelling or a column (clang's
    /// `__builtin_COLUMN`, `__builtin_dump_struct`; glibc's `__STRING`, `__CONCAT`). Allow,
    /// don't deny: nothing is renamed, the key is taken over the exact text, and the
    /// kernel's own name is kept whole.
    UnknownReserved {
        /// Byte offset of the first such identifier.
        offset: usize,
        /// The identifier.
        name: String,
    },
    /// A name that would be renamed (or the kernel's own name) occurs inside a GNU or
    /// Microsoft attribute (`__attribute__((...))`, `__attribute((...))`,
    /// `__declspec(...)`), where a word is an attribute's name or argument, as inside
    /// `[[...]]`: renaming it could change the attribute (`always_inline`, `packed`).
    /// Nothing is renamed, the key is taken over the exact text, and the kernel's own
    /// name is kept whole.
    NameInAttribute {
        /// Byte offset of the first such occurrence.
        offset: usize,
        /// The name.
        name: String,
    },
    /// Names of the text collide in the renamer's name table: one lookup examined more
    /// than 256 slots, which names that are not made to collide do not do in practice.
    /// Nothing is renamed and the key is taken over the exact text (as for
    /// [`Refusal::AmbiguousLexing`]): names made to collide cost at most 256 slots per
    /// lookup instead of time quadratic in their number.
    NameCollisions {
        /// Byte offset of the name whose lookup gave up (0 for a name from [`Names`]).
        offset: usize,
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
            Refusal::NameCollisions { offset } => write!(
                f,
                "names colliding in the name table at byte {offset}: nothing renamed, key over the exact text"
            ),
            Refusal::UnknownReserved { offset, name } => write!(
                f,
                "reserved identifier `{name}` of unknown meaning at byte {offset}: nothing renamed, key over the exact text and the whole kernel name"
            ),
            Refusal::NameInAttribute { offset, name } => write!(
                f,
                "`{name}` at byte {offset} is inside a GNU attribute: nothing renamed, key over the exact text and the whole kernel name"
            ),
            Refusal::SpellingObserved { offset, what } => write!(
                f,
                "`{what}` at byte {offset} observes spellings: nothing renamed, key over the exact text and the whole kernel name"
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
    /// The kernel token (its first `token_len` bytes, if a kernel name was given), then
    /// the renamed names in number order, each as its length (LEB128) and its bytes.
    side: Vec<u8>,
    token_len: Option<usize>,
    renamed_count: usize,
    refusals: Vec<Refusal>,
    pinned: Vec<String>,
    text: OnceLock<String>,
}

impl PartialEq for Canonical {
    fn eq(&self, other: &Self) -> bool {
        self.kernel_token() == other.kernel_token() && self.encoding == other.encoding
    }
}

impl Eq for Canonical {}

impl Canonical {
    /// The human-readable canonical text: the kernel text as written, with renamed
    /// names spelled `ocannl_k<n>` and the kernel's own name spelled as its
    /// [`kernel_token`]. Built on first use. Equal keys give equal texts, but not the
    /// other way round: a free identifier spelled `ocannl_k0` looks like a renamed one
    /// here, while the key tells them apart.
    pub fn text(&self) -> &str {
        self.text
            .get_or_init(|| enc::render(&self.encoding, self.kernel_token().unwrap_or("")))
    }

    /// The cache key: lowercase hex SHA-256 over the format version, the kernel token,
    /// the canonical [`encoding`](Self::encoding) and `extra_parts` (for example the
    /// compiler options), each length-prefixed as in [`digest_of_parts`](crate::digest_of_parts).
    ///
    /// Equal keys mean: same extra parts, same kernel token, and kernel texts equal up to
    /// a consistent renaming of the names each one owns.
    pub fn key(&self, extra_parts: &[&[u8]]) -> String {
        // What `digest_of_parts` of [KEY_DOMAIN, token part, encoding, extra parts..]
        // hashes, without gathering the parts first; short parts and length prefixes are
        // gathered in `head` and handed over at once.
        let mut h = key_prefix().clone();
        let mut head = Gather::default();
        match self.token_bytes() {
            Some(t) => {
                head.put(&crate::part_len(1 + t.len()), &mut h);
                head.put(b"K", &mut h);
                head.put(t, &mut h);
            }
            None => {
                head.put(&crate::part_len(1), &mut h);
                head.put(b"N", &mut h);
            }
        }
        head.put(&crate::part_len(self.encoding.len()), &mut h);
        head.flush(&mut h);
        h.update(&self.encoding);
        for p in extra_parts {
            head.put(&crate::part_len(p.len()), &mut h);
            head.put(p, &mut h);
        }
        head.flush(&mut h);
        crate::hex_lower(&h.finalize())
    }

    /// The byte stream the key is taken over: the kernel's bytes as written, each
    /// occurrence of a renamed name or of the own name replaced by a tag (a prefix code:
    /// see the crate docs). Useful to compare two kernels byte by byte.
    pub fn encoding(&self) -> &[u8] {
        &self.encoding
    }

    /// The kernel token that replaced the kernel's own name, if a name was given.
    pub fn kernel_token(&self) -> Option<&str> {
        // The token was copied from a `&str` at a char boundary, so this never fails.
        self.token_bytes()
            .map(|t| std::str::from_utf8(t).unwrap_or_default())
    }

    fn token_bytes(&self) -> Option<&[u8]> {
        self.token_len
            .map(|l| self.side.get(..l).unwrap_or_default())
    }

    /// The renamed names in number order: the `n`th one became `ocannl_k<n>`.
    pub fn renamed(&self) -> impl Iterator<Item = std::borrow::Cow<'_, str>> + '_ {
        let mut at = self.token_len.unwrap_or(0);
        (0..self.renamed_count).map(move |_| {
            let name = enc::read_varint(&self.side, &mut at)
                .and_then(|len| self.side.get(at..at.checked_add(len)?))
                .unwrap_or_default();
            at += name.len();
            String::from_utf8_lossy(name)
        })
    }

    /// How many distinct names were renamed.
    pub fn renamed_count(&self) -> usize {
        self.renamed_count
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

/// Short pieces of a hash input gathered into one update.
struct Gather {
    buf: [u8; 128],
    len: usize,
}

impl Default for Gather {
    fn default() -> Self {
        Gather {
            buf: [0; 128],
            len: 0,
        }
    }
}

impl Gather {
    /// Appends `bytes` to the input of `h` (through the buffer if they fit).
    fn put(&mut self, bytes: &[u8], h: &mut Sha256) {
        match self.buf.get_mut(self.len..self.len + bytes.len()) {
            Some(room) => {
                room.copy_from_slice(bytes);
                self.len += bytes.len();
            }
            None => {
                self.flush(h);
                h.update(bytes);
            }
        }
    }

    fn flush(&mut self, h: &mut Sha256) {
        h.update(&self.buf[..self.len]);
        self.len = 0;
    }
}

/// How a distinct name is treated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Slot {
    Renamed(u32),
    /// A bound name not met yet: renamed (numbered) where it is first met.
    Bound,
    Verbatim,
    Own,
    /// Renamable, but occurs where nothing is renamed: kept as spelled everywhere.
    Pinned,
}

/// The first `l <= 8` bytes of `buf[s..]` as a little-endian word, zero-padded.
/// `buf[s..s + l]` must be in bounds.
#[inline(always)]
fn load(buf: &[u8], s: usize, l: usize) -> u64 {
    if l == 0 {
        return 0;
    }
    match buf.get(s..s + 8) {
        Some(c) => {
            let mut a = [0u8; 8];
            a.copy_from_slice(c);
            let w = u64::from_le_bytes(a);
            if l >= 8 {
                w
            } else {
                w & ((1u64 << (8 * l)) - 1)
            }
        }
        None => {
            let mut w = 0u64;
            for (i, &b) in buf[s..s + l].iter().enumerate() {
                w |= u64::from(b) << (8 * i);
            }
            w
        }
    }
}

/// A name's lookup key: its first 16 bytes as two words, and a hash of all of it.
#[derive(Clone, Copy)]
struct NameKey {
    w0: u64,
    w1: u64,
    hash: u64,
}

const K1: u64 = 0x9E37_79B9_7F4A_7C15;
const K2: u64 = 0xC2B2_AE3D_27D4_EB4F;

/// The key of `buf[s..e]` (`s < e <= buf.len()`); may read (and mask off) bytes of `buf`
/// past `e`, which is what makes it fast.
#[inline(always)]
fn name_key(buf: &[u8], s: usize, e: usize) -> NameKey {
    /// For a name of `l` bytes (`l` at most 16), the masks of its bytes in the first
    /// two words (a table: no branch on the length).
    static LOW: [(u64, u64); 17] = {
        let mut t = [(0u64, 0u64); 17];
        let mut l = 1;
        while l <= 16 {
            t[l] = if l >= 8 {
                (
                    u64::MAX,
                    if l == 16 {
                        u64::MAX
                    } else {
                        (1u64 << (8 * (l - 8))) - 1
                    },
                )
            } else {
                ((1u64 << (8 * l)) - 1, 0)
            };
            l += 1;
        }
        t
    };
    let len = e - s;
    let (w0, w1) = match buf.get(s..s + 16) {
        Some(c) => {
            let mut a = [0u8; 8];
            let mut b = [0u8; 8];
            a.copy_from_slice(&c[..8]);
            b.copy_from_slice(&c[8..]);
            let (m0, m1) = LOW[len.min(16)];
            (u64::from_le_bytes(a) & m0, u64::from_le_bytes(b) & m1)
        }
        None => {
            let w1 = if len > 8 {
                load(buf, s + 8, (len - 8).min(8))
            } else {
                0
            };
            (load(buf, s, len.min(8)), w1)
        }
    };
    let mut h = (w0 ^ (len as u64).rotate_left(40)).wrapping_mul(K1) ^ w1.wrapping_mul(K2);
    let mut i = s + 16;
    while i < e {
        h = (h.rotate_left(23) ^ load(buf, i, (e - i).min(8))).wrapping_mul(K1);
        i += 8;
    }
    NameKey { w0, w1, hash: h }
}

/// [`name_key`] of a whole name, out of line: for the paths that run once per name
/// (setting up, pinning), so the hot scan stays small.
#[inline(never)]
fn whole_name_key(name: &[u8]) -> NameKey {
    // A short name is copied into a zero-padded buffer first, so the key is read in
    // whole words (`name_key` masks off the padding) rather than byte by byte.
    if name.len() < 16 {
        let mut padded = [0u8; 16];
        padded[..name.len()].copy_from_slice(name);
        return name_key(&padded, 0, name.len());
    }
    name_key(name, 0, name.len())
}

#[derive(Clone, Copy)]
struct Entry<'a> {
    w0: u64,
    w1: u64,
    name: &'a [u8],
    slot: Slot,
}

/// How many slots one lookup examines at most. Linear probing at a load of at most
/// one half examines a handful; a lookup that needs more meets names that collide, by
/// construction in all but astronomically rare cases, and renaming is refused
/// ([`Refusal::NameCollisions`]) rather than spending time quadratic in the names.
const PROBE_LIMIT: usize = 256;

/// A lookup examined [`PROBE_LIMIT`] slots without an answer.
#[derive(Clone, Copy, Debug)]
struct Collisions;

/// An open-addressing table from names (borrowed from the text) to their slots.
struct Interner<'a> {
    table: Vec<Option<Entry<'a>>>,
    len: usize,
    /// `64 - log2(table.len())`: a hash shifted right by it is an index.
    shift: u32,
}

impl<'a> Interner<'a> {
    /// A table that holds `n` names without growing (at least 64 slots).
    fn with_capacity(n: usize) -> Self {
        // At most half full: `grow` runs when `len * 2` passes the length.
        let slots = (2 * n + 2).next_power_of_two().max(64);
        Interner {
            table: vec![None; slots],
            len: 0,
            shift: 64 - slots.trailing_zeros(),
        }
    }

    /// The index holding `name`, or the free index where it would go; or
    /// [`Collisions`] after [`PROBE_LIMIT`] slots.
    #[inline(always)]
    fn probe(&self, name: &[u8], k: NameKey) -> Result<(usize, bool), Collisions> {
        let mask = self.table.len() - 1;
        // The hash's top bits are its best mixed (a product's top bits depend on all
        // of the factors' bits): they are the index, with no further mixing.
        let mut i = (k.hash >> self.shift) as usize & mask;
        let holds = |e: &Entry<'_>| {
            e.w0 == k.w0
                && e.w1 == k.w1
                && e.name.len() == name.len()
                && (name.len() <= 16 || e.name == name)
        };
        // The first slot answers most lookups: only the walk on counts its steps.
        match &self.table[i] {
            None => return Ok((i, false)),
            Some(e) if holds(e) => return Ok((i, true)),
            Some(_) => {}
        }
        for _ in 1..PROBE_LIMIT {
            i = (i + 1) & mask;
            match &self.table[i] {
                None => return Ok((i, false)),
                Some(e) if holds(e) => return Ok((i, true)),
                Some(_) => {}
            }
        }
        Err(Collisions)
    }

    #[inline(always)]
    fn get(&self, name: &[u8], k: NameKey) -> Result<Option<Slot>, Collisions> {
        Ok(match self.probe(name, k)? {
            (i, true) => self.table[i].map(|e| e.slot),
            _ => None,
        })
    }

    /// Sets the slot of `name` (inserting it if new).
    #[inline(never)]
    fn set(&mut self, name: &'a [u8], k: NameKey, slot: Slot) -> Result<(), Collisions> {
        let (i, found) = self.probe(name, k)?;
        self.set_at(i, found, name, k, slot);
        Ok(())
    }

    /// [`Self::set`] given what [`Self::probe`] said.
    #[inline(always)]
    fn set_at(&mut self, i: usize, found: bool, name: &'a [u8], k: NameKey, slot: Slot) {
        if found {
            if let Some(e) = &mut self.table[i] {
                e.slot = slot;
            }
            return;
        }
        self.table[i] = Some(Entry {
            w0: k.w0,
            w1: k.w1,
            name,
            slot,
        });
        self.len += 1;
        if self.len * 2 > self.table.len() {
            self.grow();
        }
    }

    fn grow(&mut self) {
        let bigger = vec![None; self.table.len() * 2];
        let old = std::mem::replace(&mut self.table, bigger);
        self.shift -= 1;
        let mask = self.table.len() - 1;
        for e in old.into_iter().flatten() {
            // The names are distinct: each goes to the first free slot from its index
            // (one exists: the table is at most half full).
            let k = whole_name_key(e.name);
            let mut i = (k.hash >> self.shift) as usize & mask;
            while self.table[i].is_some() {
                i = (i + 1) & mask;
            }
            self.table[i] = Some(e);
        }
    }

    fn entries(&self) -> impl Iterator<Item = &Entry<'a>> {
        self.table.iter().flatten()
    }
}

/// Something that makes the tokenization dialect-dependent, or observes a spelling
/// (`observer`); the kernel is then keyed raw.
struct Ambiguous {
    offset: usize,
    what: &'static str,
    observer: bool,
}

impl Ambiguous {
    fn lexing(offset: usize, what: &'static str) -> Self {
        Ambiguous {
            offset,
            what,
            observer: false,
        }
    }
}

struct Renamer<'a, 'n> {
    src: &'a [u8],
    names: &'n Names,
    prepared: &'n Prepared<'n>,
    /// Bound names (and names derived from them) may be renamed.
    bound_ok: bool,
    /// First bytes of names that may be renamed or are the own name, besides symbols
    /// and scope-locals; any other name is kept without a lookup.
    first: FirstBytes,
    /// First bytes of names looked up where met: those in `first`, `i` and `v`.
    look: ByteSet,
    map: Interner<'a>,
    next: u32,
    out: Vec<u8>,
    /// Start of the bytes not yet written to `out`.
    chunk_start: usize,
    /// [`Canonical`]'s `side`: the kernel token, then each renamed name as it is numbered.
    side: Vec<u8>,
    pinned_count: usize,
    /// A name already renamed (or the own name) was pinned: the pass must be redone.
    redo: bool,
    /// Where a lookup first met [`Collisions`] (0 for a name from [`Names`]): renaming
    /// is refused.
    collisions: Option<usize>,
    /// Everything before this is handled, and it is a token boundary.
    done: usize,
    /// End of the last comment or preprocessor line, and the last significant byte
    /// before it (for the `.`/`->`/`::` rule across comments).
    region_end: usize,
    region_sig: Option<usize>,
    /// End of the last block comment, and whether a line started before it.
    block_end: usize,
    block_line_start: bool,
    /// End of the comment being scanned (its words are renamed like code), if any
    /// is: events before it are the comment's words and trigraph candidates.
    comment_until: usize,
    /// The scan read the whole text and met none of the bytes [`Masks::gate`] lists nor
    /// `??`: [`crate::phases::untokenizable`] would refuse nothing.
    gate_clear: bool,
}

impl<'a, 'n: 'a> Renamer<'a, 'n> {
    fn new(
        src: &'a [u8],
        prepared: &'n Prepared<'n>,
        bound_ok: bool,
        own: Option<&'a [u8]>,
        token: &[u8],
        pinned: &[&'a [u8]],
    ) -> Self {
        let names = prepared.names;
        let mut first = FirstBytes::default();
        first.add_scan(b'i');
        first.add_scan(b'v');
        if bound_ok {
            for b in &names.bound {
                first.add_name(b.as_bytes());
            }
        }
        for d in &names.derivations {
            match d.prefix.as_bytes().first() {
                Some(&c) => first.add(c),
                // The base comes first: a bound name or a symbol (digits start no name).
                None => {
                    first.add(b'i');
                    if bound_ok {
                        for b in &names.bound {
                            first.add_name(b.as_bytes());
                        }
                    }
                }
            }
        }
        // Sized for the names known now and some the text adds (a kernel with ~200 bound
        // names grew the table three times, rehashing every name each time).
        let known = if bound_ok { names.bound.len() } else { 0 } + pinned.len() + 1;
        let mut map = Interner::with_capacity(known + 16);
        let mut set = Ok(());
        if bound_ok {
            // Bound names (unless kept) are renamable: known before the text is read, so
            // meeting one costs a single lookup.
            for b in &names.bound {
                let b = b.as_bytes();
                if !b.is_empty() && !prepared.is_kept(b) {
                    set = set.and(map.set(b, whole_name_key(b), Slot::Bound));
                }
            }
        }
        for p in pinned {
            if !p.is_empty() {
                first.add_name(p);
                set = set.and(map.set(p, whole_name_key(p), Slot::Pinned));
            }
        }
        if let Some(own) = own.filter(|o| !o.is_empty()) {
            first.add_name(own);
            let k = whole_name_key(own);
            set = set.and(match map.get(own, k) {
                Ok(Some(Slot::Pinned)) => Ok(()),
                Ok(_) => map.set(own, k, Slot::Own),
                Err(c) => Err(c),
            });
        }
        let collisions = set.err().map(|Collisions| 0);
        let mut look = first.table;
        look.insert(b'i');
        look.insert(b'v');
        Renamer {
            src,
            names,
            prepared,
            bound_ok,
            first,
            look,
            map,
            next: 0,
            // Room for the text and a little: an element is never longer than the name
            // it replaces unless the name is one byte long or its number large (the
            // vector grows then).
            out: Vec::with_capacity(src.len() + src.len() / 8 + 64),
            chunk_start: 0,
            side: {
                let mut side = Vec::with_capacity(token.len() + 128);
                side.extend_from_slice(token);
                side
            },
            pinned_count: pinned.len(),
            redo: false,
            collisions,
            done: 0,
            region_end: usize::MAX,
            region_sig: None,
            block_end: usize::MAX,
            block_line_start: false,
            comment_until: 0,
            gate_clear: false,
        }
    }

    /// Whether a name in no slot yet (so no bound name, unless renaming bound names is
    /// refused or the name is kept) is one the kernel owns.
    fn renamable(&self, name: &[u8]) -> bool {
        let minted = self.names.minted_shapes;
        if minted && (is_symbol(name) || is_scope_local(name)) {
            return !self.prepared.is_kept(name);
        }
        if self.names.derivations.is_empty() || self.prepared.is_kept(name) {
            return false;
        }
        let Ok(s) = std::str::from_utf8(name) else {
            return false;
        };
        self.names.derivations.iter().any(|d| {
            d.base(s).is_some_and(|base| {
                (self.bound_ok && self.prepared.is_bound(base))
                    || (minted && is_symbol(base.as_bytes()))
                    || all_digits(base)
            })
        })
    }

    /// Whether `name` might be renamed, pinned or be the own name (else it is kept as
    /// spelled without a lookup).
    #[inline(always)]
    fn candidate(&self, name: &[u8]) -> bool {
        self.first.contains(name[0]) || is_symbol(name) || is_scope_local(name)
    }

    /// The slot of the candidate `src[s..e]` met where names are renamed.
    #[inline(always)]
    fn slot(&mut self, s: usize, e: usize) -> Slot {
        let src = self.src;
        let name = &src[s..e];
        let k = name_key(src, s, e);
        let Ok((i, found)) = self.map.probe(name, k) else {
            return self.collided(s);
        };
        if found {
            match self.map.table[i] {
                Some(Entry {
                    slot: Slot::Bound, ..
                }) => self.number(i, true, name, k),
                Some(entry) => entry.slot,
                None => Slot::Verbatim,
            }
        } else {
            self.new_slot(i, name, k)
        }
    }

    /// A lookup of the name at `s` met [`Collisions`]: renaming will be refused (the scan
    /// stops at the next block); the name is kept as spelled meanwhile.
    #[cold]
    #[inline(never)]
    fn collided(&mut self, s: usize) -> Slot {
        self.collisions.get_or_insert(s);
        Slot::Verbatim
    }

    /// The slot of a name met for the first time, not in the table (its free index `i`).
    #[cold]
    fn new_slot(&mut self, i: usize, name: &'a [u8], k: NameKey) -> Slot {
        if self.renamable(name) {
            self.number(i, false, name, k)
        } else {
            self.map.set_at(i, false, name, k, Slot::Verbatim);
            Slot::Verbatim
        }
    }

    /// Gives the renamable `name`, met for the first time, the next number (`i` and
    /// `found` as [`Interner::probe`] said).
    #[cold]
    fn number(&mut self, i: usize, found: bool, name: &'a [u8], k: NameKey) -> Slot {
        let n = self.next;
        self.next += 1;
        enc::push_varint(&mut self.side, name.len());
        self.side.extend_from_slice(name);
        let slot = Slot::Renamed(n);
        self.map.set_at(i, found, name, k, slot);
        slot
    }

    /// Notes the name `src[s..e]` met where nothing is renamed: if it is renamable (or
    /// the own name) it is pinned, kept as spelled everywhere.
    fn pin(&mut self, s: usize, e: usize) {
        let src = self.src;
        let name = &src[s..e];
        if !self.candidate(name) {
            return;
        }
        let k = name_key(src, s, e);
        let Ok(slot) = self.map.get(name, k) else {
            self.collided(s);
            return;
        };
        let set = match slot {
            Some(Slot::Renamed(_) | Slot::Own) => {
                self.pinned_count += 1;
                self.redo = true;
                self.map.set(name, k, Slot::Pinned)
            }
            Some(Slot::Bound) => {
                self.pinned_count += 1;
                self.map.set(name, k, Slot::Pinned)
            }
            Some(Slot::Verbatim | Slot::Pinned) => Ok(()),
            None => {
                if self.renamable(name) {
                    self.pinned_count += 1;
                    self.map.set(name, k, Slot::Pinned)
                } else {
                    self.map.set(name, k, Slot::Verbatim)
                }
            }
        };
        if set.is_err() {
            self.collided(s);
        }
    }

    /// Writes the pending bytes before `s`, then the element for `slot` (if it is
    /// renamed or the own name), and moves the pending start to `e`.
    #[inline(always)]
    fn emit(&mut self, slot: Slot, s: usize, e: usize) {
        // `if let` rather than `match`: a jump table mispredicts more.
        if let Slot::Renamed(n) = slot {
            let a = self.chunk_start;
            self.chunk_start = e;
            // Common case in one fixed-size copy: a short run, then a small number.
            let len = s.wrapping_sub(a);
            if len < 16
                && n < 0x80
                && let Some(window) = self.src.get(a..a + 18)
            {
                // Copy the run and more, then write the tag and number over the rest.
                let at = self.out.len() + len;
                self.out.extend_from_slice(window);
                if let Some(tag) = self.out.get_mut(at..at + 2) {
                    tag[0] = enc::RENAMED;
                    tag[1] = n as u8;
                }
                self.out.truncate(at + 2);
                return;
            }
            self.out
                .extend_from_slice(self.src.get(a..s).unwrap_or_default());
            push_renamed(&mut self.out, n);
        } else if slot == Slot::Own {
            let a = self.chunk_start;
            self.out
                .extend_from_slice(self.src.get(a..s).unwrap_or_default());
            self.out.push(enc::OWN);
            self.chunk_start = e;
        }
    }

    /// The last byte before `pos` that is not whitespace, a comment or a preprocessor
    /// line (`None` at the start of the text).
    fn significant_before(&self, pos: usize) -> Option<usize> {
        let src = self.src;
        // Common case: one space after a significant byte outside any comment.
        if pos >= 2
            && src[pos - 1] == b' '
            && BEFORE[src[pos - 2] as usize] != B_SPACE
            && pos != self.region_end
            && pos - 1 != self.region_end
        {
            return Some(pos - 2);
        }
        let mut i = pos;
        while i > 0 {
            // The region's end first: a comment or directive may end in white space
            // (a trailing blank, the `\r` of a CRLF line end) that is not between
            // tokens of code.
            if i == self.region_end {
                return self.region_sig;
            } else if BEFORE[src[i - 1] as usize] == B_SPACE {
                i -= 1;
            } else {
                return Some(i - 1);
            }
        }
        None
    }

    /// Whether only whitespace and block comments precede `pos` on its line.
    fn line_start_before(&self, pos: usize) -> bool {
        let src = self.src;
        let mut i = pos;
        while i > 0 {
            match src[i - 1] {
                b' ' | b'\t' | b'\r' | 0x0b | 0x0c => i -= 1,
                b'\n' => return true,
                _ => return i == self.block_end && self.block_line_start,
            }
        }
        true
    }

    /// Whether the identifier at `s` follows `.`, `->` or `::` (or, conservatively, `...`,
    /// `-->`, `<::`, or the sign of a number's exponent): it is then never renamed.
    /// `before` is the mask of the bytes that are no white space in the 64-byte block
    /// from `base` that holds `s`, below `s`.
    #[inline(always)]
    fn after_member_operator(&self, s: usize, before: u64, base: usize) -> bool {
        let src = self.src;
        // The last significant byte: the block's last non-white byte before `s`, unless
        // there is none or a comment or preprocessor line ends after it (then the walk
        // back decides, which knows where those end).
        let last = (before != 0).then(|| base + 63 - before.leading_zeros() as usize);
        let q = match last {
            Some(last) if self.region_end.wrapping_sub(last + 1) >= s - last => last,
            _ => match self.significant_before(s) {
                Some(q) => q,
                None => return false,
            },
        };
        if BEFORE[src[q] as usize] & (B_MEMBER | B_SIGN) == 0 {
            return false;
        }
        after_member_byte(src, q, s, self.done)
    }

    /// An identifier in code at `src[s..e]`; `before` and `base` as for
    /// [`Self::after_member_operator`].
    #[inline(always)]
    fn ident(&mut self, s: usize, e: usize, before: u64, base: usize) {
        // Names starting with `i` or `v` that are no symbol or scope-local are looked up
        // all the same: that is cheaper than telling them apart, and they are kept.
        // Unless the scan takes every identifier start, it only finds names in `look`.
        if self.first.all && !self.look.contains(self.src[s]) {
            return;
        }
        if self.after_member_operator(s, before, base) {
            self.pin(s, e);
        } else {
            let slot = self.slot(s, e);
            self.emit(slot, s, e);
        }
    }

    /// Records a comment or preprocessor line `start..end` for the look-back rules.
    fn region(&mut self, start: usize, end: usize, block: bool) {
        let sig = self.significant_before(start);
        if block {
            self.block_line_start = self.line_start_before(start);
            self.block_end = end;
        }
        self.region_sig = sig;
        self.region_end = end;
    }

    /// The comment `src[start..end]`: its words are renamed like code, by the events
    /// [`Self::run`] finds in it (see [`Self::comment_event`]); returns where they
    /// start.
    fn comment(&mut self, start: usize, end: usize, block: bool) -> usize {
        self.region(start, end, block);
        self.comment_until = end;
        start + 2
    }

    /// An event at `pos` inside the comment being scanned: a word starting with a
    /// letter, `_` or a non-ASCII byte (ending at `e`; renamed like code), or a
    /// byte that may start a trigraph. Returns where scanning resumes.
    #[inline(always)]
    fn comment_event(&mut self, pos: usize, word: bool, e: usize) -> Result<usize, Ambiguous> {
        let src = self.src;
        let end = self.comment_until;
        if word {
            // A word ends before the comment does (at `*/` or the newline).
            let e = e.min(end);
            if self.candidate(&src[pos..e]) {
                let slot = self.slot(pos, e);
                self.emit(slot, pos, e);
            }
            Ok(e)
        } else if src[pos] == b'?' && trigraph_at(&src[..end], pos) {
            Err(Ambiguous::lexing(pos, "a trigraph"))
        } else if src[pos] == b'$' {
            // Refused by the phases 1-2 gate; here too (see `Self::special`).
            Err(Ambiguous::lexing(pos, crate::phases::DOLLAR))
        } else {
            Ok(pos + 1)
        }
    }

    /// A preprocessor line or attribute `src[start..end]`: kept as written, and every
    /// word in it pinned. In a preprocessor line (`directive`), a `#` or `%:` after the
    /// introducer (`#define S(x) #x`, `a##b`) refuses: a macro that stringifies or pastes
    /// observes the spelling of what it is given. A `'` after a word or number refuses
    /// (a digit separator in some dialects only).
    fn kept_region(&mut self, start: usize, end: usize, directive: bool) -> Result<(), Ambiguous> {
        let src = self.src;
        let mut i = start;
        if directive {
            // Past the introducer (`#`, or `%:` whose `%` is at `start`).
            let body = if src[start] == b'%' {
                start + 2
            } else {
                start + 1
            };
            let body = body.min(end);
            let mut from = body;
            while let Some(k) = memchr::memchr2(b'#', b'%', &src[from..end]) {
                let at = from + k;
                if src[at] == b'#' || src.get(at + 1) == Some(&b':') {
                    return Err(Ambiguous {
                        offset: at,
                        what: "a preprocessor line with `#` or `##` after its introducer",
                        observer: true,
                    });
                }
                from = at + 1;
            }
        }
        while i < end {
            let b = src[i];
            if b == b'\'' && i > start && quote_after_word(src, i) {
                return Err(Ambiguous::lexing(i, DIGIT_SEPARATOR));
            }
            if b == b'$' {
                // Refused by the phases 1-2 gate; here too (see `Self::special`).
                return Err(Ambiguous::lexing(i, crate::phases::DOLLAR));
            }
            if is_ident_continue(b) {
                let s = i;
                while i < end && is_ident_continue(src[i]) {
                    i += 1;
                }
                if is_ident_start(b) {
                    self.pin(s, i);
                }
            } else {
                if b == b'?' && trigraph_at(&src[..end], i) {
                    return Err(Ambiguous::lexing(i, "a trigraph"));
                }
                i += 1;
            }
        }
        Ok(())
    }

    fn literal(&mut self, start: usize, end: usize) -> Result<(), Ambiguous> {
        match find_trigraph(&self.src[start..end]) {
            Some(i) => Err(Ambiguous::lexing(start + i, "a trigraph")),
            None => Ok(()),
        }
    }

    /// The identifier-like run `src[pos..e]` starting with a letter, `_` or a
    /// non-ASCII byte, in code (`before` and `base` as for
    /// [`Self::after_member_operator`]); returns where scanning resumes.
    #[inline(always)]
    fn word(&mut self, pos: usize, e: usize, before: u64, base: usize) -> Result<usize, Ambiguous> {
        let src = self.src;
        // The flags of the byte before (0 at the start), read once for both look-backs.
        let prev = match pos.checked_sub(1) {
            Some(q) => BEFORE[src[q] as usize],
            None => 0,
        };
        // Letters inside a preprocessing number (`1.f`, `0..x`, `1e+x`) are no name.
        if prev & B_NUMBER != 0
            && let Some(end) = number_around(src, self.done, pos - 1)
        {
            return Ok(end.max(e));
        }
        let q = src.get(e).copied().unwrap_or(0);
        if q == b'"' || q == b'\'' {
            let prefix = &src[pos..e];
            // `u8'x'` is no character literal in gnu17: refused at the `'`.
            if matches!(prefix, b"L" | b"u" | b"U") || (q == b'"' && prefix == b"u8") {
                let end = literal_end(src, e);
                self.literal(pos, end)?;
                return Ok(end);
            }
            if q == b'"' && matches!(prefix, b"R" | b"LR" | b"uR" | b"UR" | b"u8R") {
                return Err(Ambiguous::lexing(pos, "a raw string literal"));
            }
        }
        self.ident(pos, e, before, base);
        Ok(e)
    }

    /// The byte at `pos` may start a literal, comment, preprocessor line, attribute,
    /// trigraph or stray backslash; returns where scanning resumes (after `pos`).
    fn special(&mut self, pos: usize) -> Result<usize, Ambiguous> {
        let src = self.src;
        let b = src[pos];
        let b1 = src.get(pos + 1).copied().unwrap_or(0);
        match b {
            // A digit separator (`1'000`) in some dialects, a character literal in
            // others; `u8'x'` likewise.
            b'\'' if quote_after_word(src, pos) => Err(Ambiguous::lexing(pos, DIGIT_SEPARATOR)),
            b'"' | b'\'' => {
                if b == b'"' && pos > 0 && src[pos - 1] == b'R' {
                    let mut s = pos - 1;
                    while s > 0 && is_ident_continue(src[s - 1]) {
                        s -= 1;
                    }
                    if matches!(&src[s..pos], b"R" | b"LR" | b"uR" | b"UR" | b"u8R") {
                        return Err(Ambiguous::lexing(s, "a raw string literal"));
                    }
                }
                let e = literal_end(src, pos);
                self.literal(pos, e)?;
                Ok(e)
            }
            b'/' if b1 == b'/' => {
                let e = line_comment_end(src, pos);
                Ok(self.comment(pos, e, false))
            }
            b'/' if b1 == b'*' => {
                let e = block_comment_end(src, pos);
                Ok(self.comment(pos, e, true))
            }
            b'#' | b'%' if (b == b'#' || b1 == b':') && self.line_start_before(pos) => {
                let from = if b == b'#' { pos } else { pos + 1 };
                let e = preprocessor_end(src, from).max(pos + 1);
                self.kept_region(pos, e, true)?;
                self.region(pos, e, false);
                Ok(e)
            }
            b'[' if b1 == b'[' => {
                let e = attribute_end(src, pos);
                self.kept_region(pos, e, false)?;
                Ok(e)
            }
            b'?' if trigraph_at(src, pos) => Err(Ambiguous::lexing(pos, "a trigraph")),
            // Refused outside literals by the phases 1-2 gate (`phases::untokenizable`);
            // refused here too, so that the scan never reads one as splitting a name.
            b'$' => Err(Ambiguous::lexing(pos, crate::phases::DOLLAR)),
            b'\\' => Err(Ambiguous::lexing(
                pos,
                "a backslash outside literals, comments and preprocessor lines",
            )),
            _ => Ok(pos + 1),
        }
    }

    /// Scans the text 64 bytes at a time: bit masks find the identifiers that may need
    /// renaming (by their first byte) and the bytes that may start something special;
    /// everything else (other names, numbers, operators, whitespace) is kept as written
    /// without being looked at again.
    fn run(&mut self) -> Result<(), Ambiguous> {
        let src = self.src;
        let n = src.len();
        // Everything before `p` is handled.
        let mut p = 0usize;
        let mut base = 0usize;
        // Whether the byte before `base` continues an identifier.
        let mut carry = 0u64;
        // The gate's bytes met so far (see `Masks::gate`), and whether the byte before
        // `base` is a `?`.
        let mut gated = 0u64;
        let mut quest_carry = 0u64;
        let first = self.first;
        // A lookup that met collisions ends the scan (at the next block): the kernel is
        // keyed raw.
        while base < n && self.collisions.is_none() {
            let Masks {
                cont,
                cand,
                special,
                space,
                gate,
                quest,
            } = block_masks(src, base, &first);
            // The second `?` of each `??`, this block's first one after the last block's.
            gated |= gate | (quest & ((quest << 1) | quest_carry));
            quest_carry = quest >> 63;
            // Starts of runs that may be a name needing a look (a digit begins a
            // number; any other name is kept as written without a look).
            let starts = cand & !((cont << 1) | carry);
            carry = cont >> 63;
            let mut events = (starts | special) & from(p, base);
            while events != 0 {
                let i = events.trailing_zeros();
                let pos = base + i as usize;
                let word = (starts >> i) & 1 != 0;
                if !word {
                    // Bytes that start nothing here (`[` not before `[`, `/` not before
                    // `/` or `*`, `?` not before `?`, `%` not before `:`, `&`) are
                    // passed over. None of them can lie inside a preprocessing number,
                    // so the look-back rules are the same without them.
                    let b1 = u16::from(src.get(pos + 1).copied().unwrap_or(0));
                    let (pass, n1, n2) = PASS_UNLESS[src[pos] as usize];
                    let nothing = pass & (b1 != n1) & (b1 != n2);
                    if nothing {
                        events &= events - 1;
                        continue;
                    }
                }
                let run_end = || {
                    let run = (!cont >> i).trailing_zeros();
                    if i + run < 64 {
                        pos + run as usize
                    } else {
                        ident_end(src, base + 64)
                    }
                };
                if pos < self.comment_until {
                    p = self.comment_event(pos, word, if word { run_end() } else { pos })?;
                    events &= from(p, base);
                    continue;
                }
                // Past a comment, everything up to its end is handled.
                p = p.max(self.comment_until);
                self.done = p;
                p = if word {
                    let before = !space & ((1u64 << i) - 1);
                    self.word(pos, run_end(), before, base)?
                } else {
                    self.special(pos)?
                };
                events &= from(p, base);
            }
            base += 64;
        }
        // Every block was read (a lookup that met collisions stops the scan early).
        self.gate_clear = gated == 0 && base >= n;
        self.out.extend_from_slice(&src[self.chunk_start.min(n)..]);
        Ok(())
    }
}

/// Whether the significant byte `src[q]` (a [`B_MEMBER`] or [`B_SIGN`] byte) before the
/// identifier at `s` ends `.`, `->` or `::` (or `...`, `-->`, `<::`), or is the sign of
/// an exponent inside a preprocessing number (`1e+x`; `floor` as for [`in_number`]).
#[cold]
#[inline(never)]
fn after_member_byte(src: &[u8], q: usize, s: usize, floor: usize) -> bool {
    match src[q] {
        b'.' => true,
        b'>' => q > 0 && src[q - 1] == b'-',
        b':' => q > 0 && src[q - 1] == b':',
        // Inside a preprocessing number such as `1e+x`: no identifier at all.
        b'+' | b'-' => {
            q + 1 == s
                && q > 0
                && matches!(src[q - 1], b'e' | b'E' | b'p' | b'P')
                && in_number(src, floor, q - 1)
        }
        _ => false,
    }
}

/// [`BEFORE`] flags: whitespace.
const B_SPACE: u8 = 1;
/// [`BEFORE`] flags: `.`, `>`, `:` (may end a member operator).
const B_MEMBER: u8 = 2;
/// [`BEFORE`] flags: `+`, `-` (may be the sign of an exponent).
const B_SIGN: u8 = 4;
/// [`BEFORE`] flags: `.`, `+`, `-` (may lie inside a preprocessing number).
const B_NUMBER: u8 = 16;

/// What a byte before an identifier may tell about it (table lookups instead of
/// branchy matches in the hot loop).
static BEFORE: [u8; 256] = {
    let mut t = [0u8; 256];
    t[b' ' as usize] = B_SPACE;
    t[b'\t' as usize] = B_SPACE;
    t[b'\n' as usize] = B_SPACE;
    t[b'\r' as usize] = B_SPACE;
    t[0x0b] = B_SPACE;
    t[0x0c] = B_SPACE;
    t[b'.' as usize] = B_MEMBER | B_NUMBER;
    t[b'>' as usize] = B_MEMBER;
    t[b':' as usize] = B_MEMBER;
    t[b'+' as usize] = B_SIGN | B_NUMBER;
    t[b'-' as usize] = B_SIGN | B_NUMBER;
    t
};

/// For a byte that [`Renamer::run`] may pass over: the next bytes that would make it
/// start something (`0x100`: none; bytes not listed are never passed over).
static PASS_UNLESS: [(bool, u16, u16); 256] = {
    let mut t = [(false, 0x100u16, 0x100u16); 256];
    t[b'[' as usize] = (true, b'[' as u16, b'[' as u16);
    t[b'/' as usize] = (true, b'/' as u16, b'*' as u16);
    t[b'?' as usize] = (true, b'?' as u16, b'?' as u16);
    t[b'%' as usize] = (true, b':' as u16, b':' as u16);
    t[b'&' as usize] = (true, 0x100, 0x100);
    t
};

/// The mask of bit positions `i` with `base + i >= p`.
#[inline(always)]
fn from(p: usize, base: usize) -> u64 {
    let d = p.saturating_sub(base);
    if d >= 64 { 0 } else { u64::MAX << d }
}

/// A set of bytes.
#[derive(Clone, Copy, Default)]
struct ByteSet([u64; 4]);

impl ByteSet {
    fn insert(&mut self, b: u8) {
        self.0[usize::from(b >> 6)] |= 1 << (b & 63);
    }

    #[inline(always)]
    fn contains(&self, b: u8) -> bool {
        (self.0[usize::from(b >> 6)] >> (b & 63)) & 1 != 0
    }
}

/// First bytes of names that need a look: a table, and for the vectorized scan up to
/// four of them (unused slots 0, which starts no identifier) or `all` if there are
/// more.
#[derive(Clone, Copy, Default)]
struct FirstBytes {
    table: ByteSet,
    bytes: [u8; 4],
    len: usize,
    all: bool,
}

impl FirstBytes {
    /// Adds `b` as the first byte of names that need a look.
    fn add(&mut self, b: u8) {
        self.table.insert(b);
        self.add_scan(b);
    }

    /// Adds `b` to the scan only: the names starting with it are told by their shape
    /// (symbols `i<digits>`, scope-locals `v<digits>_`), not by the table.
    fn add_scan(&mut self, b: u8) {
        if b == 0 || self.bytes[..self.len].contains(&b) {
            return;
        }
        if self.len == self.bytes.len() {
            self.all = true;
        } else {
            self.bytes[self.len] = b;
            self.len += 1;
        }
    }

    fn add_name(&mut self, name: &[u8]) {
        if let Some(&b) = name.first() {
            self.add(b);
        }
    }

    #[inline(always)]
    fn contains(&self, b: u8) -> bool {
        self.table.contains(b)
    }
}

/// What [`classify64`] tells of 64 bytes: bit `i` of each mask is about byte `i`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Masks {
    /// Bytes that continue an identifier: letters, digits, `_` and bytes from 0x80.
    /// (`$` outside literals is refused by the phases 1-2 gate, see [`crate::phases`];
    /// here it is special, and refused if met.)
    cont: u64,
    /// Identifier start bytes that may begin a name needing a look (see [`FirstBytes`]).
    cand: u64,
    /// Bytes that may start a literal, comment, preprocessor line, attribute, trigraph
    /// or stray backslash (`"` `#` `%` `'` `[` `\\` `/` `?`), or is refused (`$`), and
    /// harmlessly `&`.
    special: u64,
    /// White space (` `, `\t`, `\n`, `\v`, `\f`, `\r`: [`B_SPACE`] in [`BEFORE`]).
    space: u64,
    /// Bytes without which [`crate::phases::untokenizable`] refuses nothing: control
    /// bytes other than `\t` and `\n` (NUL, `\r`), bytes from 0x80, `\\` and `$`.
    gate: u64,
    /// `?` (two in a row may start a trigraph, which the gate also refuses).
    quest: u64,
}

/// The [`Masks`] of 64 bytes. On x86-64, SSE2 compares 16 bytes at a time and
/// `movemask` gathers the results.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn classify64(block: &[u8; 64], first: &FirstBytes) -> Masks {
    use safe_arch::{
        add_i8_m128i, bitand_m128i, bitandnot_m128i, bitor_m128i, cmp_eq_mask_i8_m128i,
        cmp_lt_mask_i8_m128i, m128i, move_mask_i8_m128i, set_splat_i8_m128i,
    };
    let splat = |b: u8| set_splat_i8_m128i(b as i8);
    // Bytes in `lo..=hi` (both below 0x80): shifted to the bottom of the signed range.
    let in_range = |v: m128i, lo: u8, hi: u8| {
        let shifted = add_i8_m128i(v, splat(0x80u8.wrapping_sub(lo)));
        cmp_lt_mask_i8_m128i(shifted, splat(0x80 + (hi - lo + 1)))
    };
    let eq = |v: m128i, b: u8| cmp_eq_mask_i8_m128i(v, splat(b));
    let bits = |v: m128i| u64::from(move_mask_i8_m128i(v) as u16);
    let f = first.bytes;
    let all = splat(if first.all { 0xff } else { 0 });
    let (mut cont, mut either, mut space) = (0u64, 0u64, 0u64);
    let (mut gate, mut quest) = (0u64, 0u64);
    for (k, chunk) in block.chunks_exact(16).enumerate() {
        let mut a = [0u8; 16];
        a.copy_from_slice(chunk);
        let v = m128i::from(a);
        // Letters, `_`, and bytes from 0x80 (negative as signed bytes).
        let is_start = bitor_m128i(
            bitor_m128i(
                in_range(bitor_m128i(v, splat(0x20)), b'a', b'z'),
                eq(v, b'_'),
            ),
            cmp_lt_mask_i8_m128i(v, splat(0)),
        );
        let is_cont = bitor_m128i(is_start, in_range(v, b'0', b'9'));
        let in_first = bitor_m128i(
            bitor_m128i(eq(v, f[0]), eq(v, f[1])),
            bitor_m128i(eq(v, f[2]), eq(v, f[3])),
        );
        let is_cand = bitand_m128i(is_start, bitor_m128i(all, in_first));
        let is_special = bitor_m128i(
            bitor_m128i(in_range(v, b'"', b'\''), in_range(v, b'[', b'\\')),
            bitor_m128i(eq(v, b'/'), eq(v, b'?')),
        );
        // White space: ` `, and `\t` `\n` `\v` `\f` `\r`.
        let is_space = bitor_m128i(in_range(v, 0x09, 0x0d), eq(v, b' '));
        // Below 0x20 as signed bytes: the control bytes and the bytes from 0x80.
        let low_or_high = cmp_lt_mask_i8_m128i(v, splat(0x20));
        let is_gate = bitor_m128i(
            bitandnot_m128i(bitor_m128i(eq(v, b'\t'), eq(v, b'\n')), low_or_high),
            bitor_m128i(eq(v, b'\\'), eq(v, b'$')),
        );
        cont |= bits(is_cont) << (16 * k);
        either |= bits(bitor_m128i(is_cand, is_special)) << (16 * k);
        space |= bits(is_space) << (16 * k);
        gate |= bits(is_gate) << (16 * k);
        quest |= bits(eq(v, b'?')) << (16 * k);
    }
    // No special byte continues an identifier, and candidates do: one mask tells both.
    Masks {
        cont,
        cand: either & cont,
        special: either & !cont,
        space,
        gate,
        quest,
    }
}

/// [`classify64`] in portable code: plain byte comparisons (which the compiler
/// vectorizes) and a multiply that gathers eight high bits at a time.
#[cfg(any(test, not(target_arch = "x86_64")))]
#[inline(always)]
fn classify64_portable(block: &[u8; 64], first: &FirstBytes) -> Masks {
    let f = first.bytes;
    let mut space = [0u8; 64];
    let mut cont = [0u8; 64];
    let mut either = [0u8; 64];
    let mut gate = [0u8; 64];
    let mut quest = [0u8; 64];
    for i in 0..64 {
        let b = block[i];
        let l = b | 0x20;
        let is_start = (l.wrapping_sub(b'a') < 26) | (b == b'_') | (b >= 0x80);
        let is_cont = is_start | (b.wrapping_sub(b'0') < 10);
        let in_first = (b == f[0]) | (b == f[1]) | (b == f[2]) | (b == f[3]);
        let is_cand = is_start & (first.all | in_first);
        // `"` `#` `$` `%` `'` (and, harmlessly, `&`); `[` `\\`; `/`; `?`.
        let is_sp =
            (b.wrapping_sub(b'"') < 6) | (b.wrapping_sub(b'[') < 2) | (b == b'/') | (b == b'?');
        cont[i] = if is_cont { 0x80 } else { 0 };
        either[i] = if is_cand | is_sp { 0x80 } else { 0 };
        space[i] = if b == b' ' || b.wrapping_sub(0x09) < 5 {
            0x80
        } else {
            0
        };
        let is_gate =
            ((b < 0x20) & (b != b'\t') & (b != b'\n')) | (b >= 0x80) | (b == b'\\') | (b == b'$');
        gate[i] = if is_gate { 0x80 } else { 0 };
        quest[i] = if b == b'?' { 0x80 } else { 0 };
    }
    let space = gather_high_bits(&space);
    // No special byte continues an identifier, and candidates do: two gathers tell all
    // three masks apart.
    let cont = gather_high_bits(&cont);
    let either = gather_high_bits(&either);
    Masks {
        cont,
        cand: either & cont,
        special: either & !cont,
        space,
        gate: gather_high_bits(&gate),
        quest: gather_high_bits(&quest),
    }
}

/// Bit `i` of the result is the high bit of `f[i]` (every byte is 0 or 0x80).
#[cfg(any(test, not(target_arch = "x86_64")))]
#[inline(always)]
fn gather_high_bits(f: &[u8; 64]) -> u64 {
    let mut m = 0u64;
    for (k, chunk) in f.chunks_exact(8).enumerate() {
        let mut a = [0u8; 8];
        a.copy_from_slice(chunk);
        let w = u64::from_le_bytes(a);
        m |= (w.wrapping_mul(0x0002_0408_1020_4081) >> 56) << (8 * k);
    }
    m
}

#[cfg(not(target_arch = "x86_64"))]
use classify64_portable as classify64;

/// [`classify64`] of the 64 bytes from `base` (bytes past the end count as spaces).
#[inline(always)]
fn block_masks(src: &[u8], base: usize, first: &FirstBytes) -> Masks {
    match src
        .get(base..base + 64)
        .and_then(|b| <&[u8; 64]>::try_from(b).ok())
    {
        Some(block) => classify64(block, first),
        None => {
            let mut block = [b' '; 64];
            let rest = &src[base.min(src.len())..];
            block[..rest.len()].copy_from_slice(rest);
            classify64(&block, first)
        }
    }
}

/// Whether byte `i` lies inside a preprocessing number as the lexer reads it. Lexes
/// forward, by the lexer's rules, from the nearest earlier byte that must end a token
/// (and no earlier than `floor`, the end of the last token handled, which if after `i`
/// was an identifier).
fn in_number(src: &[u8], floor: usize, i: usize) -> bool {
    number_around(src, floor, i).is_some()
}

/// The end of the preprocessing number holding byte `i`, if one does (see
/// [`in_number`]).
fn number_around(src: &[u8], floor: usize, i: usize) -> Option<usize> {
    // Byte `i` ends a token already handled: an identifier, not a number.
    if i < floor {
        return None;
    }
    let mut j = i;
    while j > floor
        && (is_ident_continue(src[j - 1]) || matches!(src[j - 1], b'.' | b'\'' | b'+' | b'-'))
    {
        j -= 1;
    }
    while j <= i {
        let b = src[j];
        if b.is_ascii_digit() || (b == b'.' && src.get(j + 1).is_some_and(u8::is_ascii_digit)) {
            let e = number_end(src, j + 1);
            if e > i {
                return Some(e);
            }
            j = e;
        } else if is_ident_continue(b) {
            j = ident_end(src, j + 1);
        } else if b == b'\'' {
            let e = literal_end(src, j);
            if e > i {
                return None;
            }
            j = e;
        } else {
            j += 1;
        }
    }
    None
}

/// What [`quote_after_word`] refuses.
const DIGIT_SEPARATOR: &str =
    "a `'` after a number or a name other than `L`, `u`, `U` (a digit separator in some dialects)";

/// Whether the `'` at `i` follows a byte of an identifier or preprocessing number (or a
/// `.`) other than a whole encoding prefix `L`, `u` or `U`: a digit separator in C23 and
/// C++14, a character literal in gnu17, and `u8'x'` is one character literal in C23
/// and two tokens in gnu17.
fn quote_after_word(src: &[u8], i: usize) -> bool {
    let Some(&prev) = i.checked_sub(1).and_then(|q| src.get(q)) else {
        return false;
    };
    if !(is_ident_continue(prev) || prev == b'.') {
        return false;
    }
    let mut s = i;
    while s > 0 && is_ident_continue(src[s - 1]) {
        s -= 1;
    }
    let prefix = &src[s..i];
    let before = s.checked_sub(1).map(|q| src[q]);
    !(matches!(prefix, b"L" | b"u" | b"U")
        && before.is_none_or(|b| !(b == b'.' || is_ident_continue(b))))
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
    while let Some(k) = memchr::memchr(b'?', &bytes[from..]) {
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
/// **The kernel's own name** (`kernel_name`: the name `text` defines the kernel under)
/// stays part of the key except for a segment index: `step__seg3` and `step__seg7`
/// (see [`segment_kernel_name`](crate::segment_kernel_name)) share a key, while names
/// numbered any other way do not (tinygrad's `E_4` and its deduplicated `E_4n1` get
/// different keys: a miss, never a wrong hit). With `None`, the text's function names
/// are treated like any other name.
///
/// **Renamed** (each distinct name to its own number, in order of first occurrence,
/// comments included):
/// * a loop or static-index symbol: `i` then digits (`i12`), unless
///   [`Names::minted_shapes`] is off;
/// * a scope-local: `v`, digits, `_`, anything (`v3_acc`, `v7_`), unless
///   [`Names::minted_shapes`] is off;
/// * a name in `names.bound`;
/// * a name `prefix + base + suffix` for a template in `names.derivations`, with base
///   in `names.bound`, a symbol (unless [`Names::minted_shapes`] is off), or digits.
///
/// **Never renamed:** a name in `names.keep` or `names.free`; an identifier after `.`,
/// `->` or `::`; anything inside an attribute `[[...]]`, a preprocessor line, or a string
/// or character literal. Comments are renamed like code. A name that would be renamed
/// but also occurs in one of these never-renamed places is kept as spelled everywhere
/// ([`Canonical::pinned`]), so a renamed name always stands for the same thing at every
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
/// introducer, a macro of [`Names::observers`]; the kernel's own name is then kept whole,
/// segment index included), or when names collide in the name table
/// ([`Refusal::NameCollisions`]). The crate docs say why each is refused; a refusal costs a
/// miss, never a wrong hit.
///
/// ```
/// use canonical_text::{canonical_kernel, Names, Refusal};
///
/// let names = Names::new().with_bound(["n3_out"]);
/// let text = "void k__seg1(float *n3_out) { n3_out[0] = 1; }";
/// let plain = canonical_kernel(text, Some("k__seg1"), &names);
/// assert!(plain.refusals().is_empty());
/// assert_eq!((plain.renamed_count(), plain.kernel_token()), (1, Some("k__seg")));
/// // The kernel prints its own name: nothing is renamed, the name is kept whole.
/// let logs = "void k__seg1(float *n3_out) { n3_out[0] = 1; puts(__func__); }";
/// let c = canonical_kernel(logs, Some("k__seg1"), &names);
/// assert!(matches!(c.refusals(), [Refusal::SpellingObserved { .. }]));
/// assert_eq!((c.renamed_count(), c.kernel_token()), (0, Some("k__seg1")));
/// ```
///
/// Never panics, whatever the text.
pub fn canonical_kernel(text: &str, kernel_name: Option<&str>, names: &Names) -> Canonical {
    let src = text.as_bytes();
    warm(names, src, kernel_name);
    let prepared = Prepared::new(names);
    let bound_ok = prepared.refusal.is_none();

    let own = kernel_name.map(str::as_bytes);
    let token = kernel_name.map(kernel_token);
    let token_bytes = token.map(str::as_bytes).unwrap_or_default();
    let token_len = token.map(str::len);

    // The scan runs on any text (it never panics and always ends), and its result
    // counts only once the text passed the gates below, in their order: phases 1-2, then
    // the spelling observers, both over the whole text. The scan also tells whether the
    // text holds any byte phases 1-2 may refuse (`Masks::gate`); when it holds none, the
    // first gate's full search is skipped, since it could only answer `None`.
    let mut r = Renamer::new(src, &prepared, bound_ok, own, token_bytes, &[]);
    let mut outcome = r.run();
    if outcome.is_ok() && r.redo && r.collisions.is_none() {
        (r, outcome) = redo(r, src, &prepared, bound_ok, own, token_bytes);
    }
    if !r.gate_clear
        && let Some((offset, what)) = crate::phases::untokenizable(src)
    {
        let refusal = Refusal::AmbiguousLexing { offset, what };
        return refused(src, kernel_name, &prepared, refusal);
    }
    if let Some((offset, what)) = crate::phases::spelling_observer(
        src,
        names.observers.iter().map(String::as_str),
        names.observers.contains(crate::phases::DEFAULT_OBSERVER),
    ) {
        let refusal = Refusal::SpellingObserved { offset, what };
        return refused(src, kernel_name, &prepared, refusal);
    }
    if let Some((offset, name)) = crate::phases::unknown_reserved(src) {
        let refusal = Refusal::UnknownReserved { offset, name };
        return refused(src, kernel_name, &prepared, refusal);
    }
    if let (Ok(()), Some(offset)) = (&outcome, r.collisions) {
        let refusal = Refusal::NameCollisions { offset };
        return refused(src, kernel_name, &prepared, refusal);
    }
    match outcome {
        Ok(()) => {
            let c = Canonical {
                pinned: pinned_names(&r),
                encoding: r.out,
                side: r.side,
                token_len,
                renamed_count: r.next as usize,
                refusals: prepared.refusal.iter().cloned().collect(),
                text: OnceLock::new(),
            };
            match name_in_attribute(src, &c, kernel_name) {
                Some((offset, name)) => {
                    let refusal = Refusal::NameInAttribute { offset, name };
                    refused(src, kernel_name, &prepared, refusal)
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
            refused(src, kernel_name, &prepared, refusal)
        }
    }
}

/// The first word inside a GNU or Microsoft attribute region
/// ([`crate::phases::attribute_regions`]) that `c` renamed, or the kernel's own name when
/// `c` replaced it by another token; read only when `c` renamed something and the text
/// spells an attribute introducer.
fn name_in_attribute(
    src: &[u8],
    c: &Canonical,
    kernel_name: Option<&str>,
) -> Option<(usize, String)> {
    let own = kernel_name.filter(|n| kernel_token(n) != *n);
    if c.renamed_count == 0 && own.is_none() {
        return None;
    }
    if memchr::memmem::find(src, b"__attribute").is_none()
        && memchr::memmem::find(src, b"__declspec").is_none()
    {
        return None;
    }
    let renamed: BTreeSet<String> = c.renamed().map(|r| r.into_owned()).collect();
    let ident = crate::lexer::is_ident_continue;
    for (s, e) in crate::phases::attribute_regions(src) {
        let mut i = s;
        while i < e {
            if ident(src[i]) {
                let j = crate::lexer::ident_end(src, i).min(e);
                if let Ok(w) = std::str::from_utf8(&src[i..j])
                    && (renamed.contains(w) || own == Some(w))
                {
                    return Some((i, w.to_owned()));
                }
                i = j.max(i + 1);
            } else {
                i += 1;
            }
        }
    }
    None
}

/// Starts loading, all at once, what a call reads first from `names` (the sets' nodes
/// and the bytes of their first names) and the start of the text. A caller that built its
/// `Names` long before (as a batch does) has them out of cache, and the sets are read one
/// after another (each node before its names): the misses are paid once in parallel
/// rather than one after another. Hints only: nothing here changes what is computed.
#[inline(always)]
fn warm(names: &Names, src: &[u8], kernel_name: Option<&str>) {
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

/// The second pass of a kernel whose first pass pinned a name it had renamed (or the
/// own name): every name pinned in the first is pinned from the start.
#[cold]
#[inline(never)]
fn redo<'a, 'n: 'a>(
    first: Renamer<'a, 'n>,
    src: &'a [u8],
    prepared: &'n Prepared<'n>,
    bound_ok: bool,
    own: Option<&'a [u8]>,
    token: &[u8],
) -> (Renamer<'a, 'n>, Result<(), Ambiguous>) {
    let pinned: Vec<&[u8]> = first
        .map
        .entries()
        .filter(|e| e.slot == Slot::Pinned)
        .map(|e| e.name)
        .collect();
    let mut r = Renamer::new(src, prepared, bound_ok, own, token, &pinned);
    let outcome = r.run();
    (r, outcome)
}

/// The names `r` pinned, sorted.
fn pinned_names(r: &Renamer<'_, '_>) -> Vec<String> {
    if r.pinned_count == 0 {
        return Vec::new();
    }
    pinned_names_sorted(r)
}

#[cold]
#[inline(never)]
fn pinned_names_sorted(r: &Renamer<'_, '_>) -> Vec<String> {
    let mut pinned: Vec<String> = r
        .map
        .entries()
        .filter(|e| e.slot == Slot::Pinned)
        .map(|e| String::from_utf8_lossy(e.name).into_owned())
        .collect();
    pinned.sort();
    pinned
}

/// [`raw`], with the bound-name refusal (if any) and then `refusal`.
#[cold]
#[inline(never)]
fn refused(
    src: &[u8],
    kernel_name: Option<&str>,
    prepared: &Prepared<'_>,
    refusal: Refusal,
) -> Canonical {
    let mut refusals: Vec<Refusal> = prepared.refusal.iter().cloned().collect();
    refusals.push(refusal);
    raw(src, kernel_name, refusals)
}

/// The canonical form that renames nothing: the exact text, and the kernel's own name
/// whole (its segment index included) as the kernel token, since what refused may
/// observe it.
fn raw(src: &[u8], kernel_name: Option<&str>, refusals: Vec<Refusal>) -> Canonical {
    Canonical {
        encoding: src.to_vec(),
        side: kernel_name.map(str::as_bytes).unwrap_or_default().to_vec(),
        token_len: kernel_name.map(str::len),
        renamed_count: 0,
        refusals,
        pinned: Vec::new(),
        text: OnceLock::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
            "for (int ocannl_k0 = 0; ocannl_k0 < n; ++ocannl_k0) x[ocannl_k1] = ocannl_k0 + ocannl_k1;"
        );
        // Not symbols: `i` alone, `i` then non-digits, keywords.
        assert_eq!(
            plain("int i; i1x; ix2; if (i0) ;"),
            "int i; i1x; ix2; if (ocannl_k0) ;"
        );
        let c = canon("i9 + i3 + i9", &Names::new());
        assert_eq!(c.renamed().collect::<Vec<_>>(), ["i9", "i3"]);
        assert_eq!(c.renamed_count(), 2);
    }

    #[test]
    fn scope_locals_are_renamed_suffix_included() {
        assert_eq!(
            plain("float v3_acc = v12_ + v3_acc * v3_accum; v3acc; v_3; vx_1;"),
            "float ocannl_k0 = ocannl_k1 + ocannl_k0 * ocannl_k2; v3acc; v_3; vx_1;"
        );
    }

    #[test]
    fn bound_names_are_renamed_and_free_and_keep_are_not() {
        let names = Names::new()
            .with_bound(["n17_weights", "out"])
            .with_free(["n_17"])
            .with_keep(["i5", "v1_keep"]);
        let c = canon("out[i5] = n17_weights[i6] * n_17 + v1_keep + v2_x;", &names);
        assert_eq!(
            c.text(),
            "ocannl_k0[i5] = ocannl_k1[ocannl_k2] * n_17 + v1_keep + ocannl_k3;"
        );
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
            "ocannl_k0 + ocannl_k1 + ocannl_k2 + tmp_foo + tmp_ + foo_grad + ocannl_k3"
        );
        // Without the base bound, a derived name stays.
        let unbound = Names::new().with_derivation("", "_grad");
        assert_eq!(
            canon("n1_x_grad + i3_grad", &unbound).text(),
            "n1_x_grad + ocannl_k0"
        );
    }

    #[test]
    fn members_and_qualified_names_are_never_renamed_and_pin_the_name() {
        let names = Names::new().with_bound(["n1_x"]);
        let c = canon("s.v3_acc + p->i12 + ns::n1_x + s . i4 + i5", &names);
        assert_eq!(
            c.text(),
            "s.v3_acc + p->i12 + ns::n1_x + s . i4 + ocannl_k0"
        );
        // A name that also occurs as a member is kept as spelled everywhere, even where
        // it was met first in a renaming position.
        let c = canon("i1 + v3_acc + s.v3_acc + i2 + v3_acc", &names);
        assert_eq!(
            c.text(),
            "ocannl_k0 + v3_acc + s.v3_acc + ocannl_k1 + v3_acc"
        );
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
            "#define TILE 64\n#pragma omp parallel for private(i3)\nfor (i3 = 0; i3 < TILE; i3++) ocannl_k0 += i4;\n  #  if  i4\n#endif"
        );
        assert_eq!(c.pinned(), ["i3", "i4"]);
        // `#` not first on its line is an operator; `%:` is a digraph introducer.
        assert_eq!(
            plain("x # i1\n%:define i2\ni2"),
            "x # ocannl_k0\n%:define i2\ni2"
        );
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
            "device float *ocannl_k0 [[buffer(0)]], uint ocannl_k1 [[thread_position_in_grid]], a[ocannl_k2[ocannl_k3]] [[x(i5)]] i5"
        );
        assert_eq!(c.pinned(), ["i5"]);
    }

    #[test]
    fn literals_are_kept_without_pinning() {
        assert_eq!(
            plain(r#"printf("i1 %d\n", i1); c = 'i'; s = u8"v1_x"; t = L'\''; i1"#),
            r#"printf("i1 %d\n", ocannl_k0); c = 'i'; s = u8"v1_x"; t = L'\''; ocannl_k0"#
        );
        // An unterminated literal ends at the line's end.
        assert_eq!(plain("\"i1\ni1"), "\"i1\nocannl_k0");
    }

    #[test]
    fn numbers_are_kept() {
        // Letters inside a preprocessing number are no names.
        assert_eq!(plain("0...i1 + i2 [[x]]"), "0...i1 + ocannl_k0 [[x]]");
        assert_eq!(
            plain("x = 1.5e+3f + 0x1fu + .5 + i1 + 1e+i2 + 1.i3 + 0x1p-i4 + i2 + i3 + i4"),
            "x = 1.5e+3f + 0x1fu + .5 + ocannl_k0 + 1e+i2 + 1.i3 + 0x1p-i4 + ocannl_k1 + ocannl_k2 + ocannl_k3"
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
            "/* sum of ocannl_k0 over ocannl_k1 */ ocannl_k2 += ocannl_k0[ocannl_k1]; // ocannl_k1 again, s.ocannl_k1\n"
        );
        // Renaming in comments is consistent: a comment mentioning another symbol
        // gives another key.
        assert_ne!(key("i1; // i1", &names), key("i1; // i2", &names));
        assert_eq!(key("i1; // i1", &names), key("i7; // i7", &names));
        // A comment's words count for first occurrence.
        assert_eq!(
            plain("/* i2 */ i1 + i2"),
            "/* ocannl_k0 */ ocannl_k1 + ocannl_k0"
        );
    }

    #[test]
    fn own_name_becomes_its_kernel_token() {
        let a = canonical_kernel(
            "void step__seg3(float *x) { step__seg4(x); }",
            Some("step__seg3"),
            &Names::new(),
        );
        let b = canonical_kernel(
            "void step__seg7(float *x) { step__seg4(x); }",
            Some("step__seg7"),
            &Names::new(),
        );
        assert_eq!(a.text(), "void step__seg(float *x) { step__seg4(x); }");
        assert_eq!(a.kernel_token(), Some("step__seg"));
        assert_eq!(a.key(&[]), b.key(&[]));
        // Another routine: another key, even with the same text shape.
        let c = canonical_kernel(
            "void walk__seg3(float *x) { step__seg4(x); }",
            Some("walk__seg3"),
            &Names::new(),
        );
        assert_ne!(a.key(&[]), c.key(&[]));
        // An identifier spelled like the kernel token is not the own name.
        let d = canonical_kernel(
            "void r__seg3() { r__seg(); }",
            Some("r__seg3"),
            &Names::new(),
        );
        let e = canonical_kernel(
            "void r__seg3() { r__seg3(); }",
            Some("r__seg3"),
            &Names::new(),
        );
        assert_eq!(d.text(), e.text());
        assert_ne!(d.key(&[]), e.key(&[]));
        // No kernel name differs from any kernel name.
        let f = canonical_kernel("void r__seg3() {}", None, &Names::new());
        assert_ne!(
            f.key(&[]),
            canonical_kernel("void r__seg3() {}", Some("q"), &Names::new()).key(&[])
        );
        // A name that is no segment name stays whole.
        let g = canonical_kernel("void main_k() {}", Some("main_k"), &Names::new());
        assert_eq!(g.text(), "void main_k() {}");
    }

    #[test]
    fn bound_meeting_free_refuses_bound_renaming() {
        let names = Names::new()
            .with_bound(["n1_x", "sqrtf"])
            .with_free(["sqrtf"])
            .with_derivation("", "_grad");
        let c = canon("n1_x = sqrtf(n1_x_grad) + i3_grad + i3;", &names);
        assert_eq!(c.text(), "n1_x = sqrtf(n1_x_grad) + ocannl_k0 + ocannl_k1;");
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
            assert_eq!(c.text(), format!("{reserved} n1_x = ocannl_k0;"));
            assert_eq!(
                c.refusals(),
                [Refusal::ReservedBoundName {
                    name: reserved.into()
                }]
            );
        }
        // `_x` (lowercase) and `x__y` are not reserved.
        let c = canon("_x + x__y", &Names::new().with_bound(["_x", "x__y"]));
        assert_eq!(c.text(), "ocannl_k0 + ocannl_k1");
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
        let names = Names::new().with_free(["ocannl_k0"]);
        let a = canon("x = i1 + ocannl_k0;", &names);
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
                format!(
                    "{}ocannl_k0 + ocannl_k1 + s.i3 + ocannl_k0",
                    " ".repeat(pad)
                ),
                "pad {pad}"
            );
        }
        let long = format!("v1_{} + i1", "x".repeat(200));
        assert_eq!(plain(&long), "ocannl_k0 + ocannl_k1");
        assert_eq!(plain("i1"), "ocannl_k0");
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
        assert_eq!(
            c.text(),
            "ocannl_k0[ocannl_k1] = \"€ żółw 🙂\" + '\u{a0}' + ocannl_k0;"
        );
        // Tag bytes only where names were replaced: three renamed occurrences.
        let tags = c.encoding().iter().filter(|&&b| b >= enc::OWN).count();
        assert_eq!(tags, 3);
        assert_eq!(c.renamed().collect::<Vec<_>>(), ["n1", "i1"]);
    }

    #[test]
    fn names_made_to_collide_refuse_renaming() {
        // Names whose hashes share their top 10 bits: they share a home slot in every
        // table of up to 1024 slots, so the 258th one examines more than `PROBE_LIMIT`
        // slots. Without the limit each new one would walk all the others (time
        // quadratic in the names); with it the kernel is keyed raw.
        let target = whole_name_key(b"ibbbbbbb").hash >> 54;
        let mut names = Vec::new();
        let mut n = 0u64;
        while names.len() < 300 {
            // Letters that spell no spelling observer (`asm`, `ifunc`, ...).
            const LETTERS: &[u8; 16] = b"bcdeghjklmnopqrt";
            let mut name = *b"ibbbbbbb";
            let mut m = n;
            for b in name[1..].iter_mut() {
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

    #[test]
    fn block_scan_agrees_with_the_portable_one() {
        let mut firsts = Vec::new();
        for bytes in [&b""[..], b"iv", b"ivnl", b"ivnlx"] {
            let mut f = FirstBytes::default();
            for &b in bytes {
                f.add(b);
            }
            firsts.push(f);
        }
        // Every byte value in every lane, then pseudo-random blocks biased to C text.
        let mut blocks: Vec<[u8; 64]> = (0..4)
            .map(|k| std::array::from_fn(|i| (64 * k + i) as u8))
            .collect();
        let alphabet = b"iv_nl$0a9zAZ\"#%'&[]\\/?*. \n\x80\xff";
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        for _ in 0..2000 {
            blocks.push(std::array::from_fn(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                if x & 3 == 0 {
                    (x >> 8) as u8
                } else {
                    alphabet[(x >> 8) as usize % alphabet.len()]
                }
            }));
        }
        for f in &firsts {
            for block in &blocks {
                let masks = classify64(block, f);
                assert_eq!(masks, classify64_portable(block, f));
                // The scan's white space is the look-back table's.
                for (i, &b) in block.iter().enumerate() {
                    assert_eq!(
                        (masks.space >> i) & 1 == 1,
                        BEFORE[b as usize] == B_SPACE,
                        "{b:#x}"
                    );
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
            ("int i1 = _Generic(i2, int: 1);", "_Generic"),
        ] {
            assert_refused(text, &names, what);
        }
        // Comments and literals observe nothing; known names rename as before.
        for text in [
            "/* __builtin_COLUMN */ float n1_x = i1; puts(\"__STRING\");",
            "_Bool n1_x = __builtin_isnan(i1) ? 0 : 1;",
            "const char* f = __FILE__ __DATE__; int n1_x = __LINE__ + i1;",
            "const char* __tvm_assert_parts[6]; __pool3[i1] = __builtin_nanf(\"\");",
        ] {
            let c = canonical_kernel(text, Some("k__seg3"), &names);
            let unknown = c
                .refusals()
                .iter()
                .any(|r| matches!(r, Refusal::UnknownReserved { .. }));
            if text.contains("isnan") {
                // `__builtin_isnan` is not on the allow list: refused.
                assert!(unknown, "{text:?}");
            } else {
                assert!(
                    !unknown && c.renamed_count() > 0,
                    "{text:?}: {:?}",
                    c.refusals()
                );
            }
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
                .starts_with("s = \"i1 $ \\\"$\"; c = '$'; w = L\"$\"; ocannl_k0")
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
            "x = ocannl_k0;\r\n// ocannl_k0\r\n#define N 4\r\nocannl_k1 = ocannl_k0;\r\n"
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
        assert_eq!(
            a.text(),
            "y = v2_load(ocannl_k0) + i0 + i0_grad + ocannl_k1;"
        );
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

    #[test]
    fn many_names_grow_the_table() {
        let text: String = (0..5000).map(|k| format!("i{k} + ")).collect();
        let c = canon(&text, &Names::new());
        assert_eq!(c.renamed_count(), 5000);
        assert!(c.text().ends_with("ocannl_k4999 + "));
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
