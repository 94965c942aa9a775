//! The key a kernel is cached under: [`Canonical`], its tagged encoding, and the
//! versioned SHA-256 over it ([`Canonical::key`](crate::Canonical::key)).

use std::sync::OnceLock;

use crate::Refusal;
use crate::declared::TextNames;
use crate::encoding as enc;
use crate::sha::BlockHasher;

/// Domain separation and format version of [`Canonical::key`](crate::Canonical::key). Bump on any change of the
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
/// Unicode spaces as white space: `i1 -\u{a0}i2` and `\u{a0}assert(i1)` were renamed);
/// v6 -- the names the text binds itself are renamed by default (`Names::text_names`);
/// v7 -- the kernel's own name is keyed by its role where sound
/// (`Names::kernel_name_by_role`): its key part is `R` instead of `K` and the token;
/// v8 -- a directive line between a feature test (`__has_attribute`, ...) or an attribute
/// introducer and its `(` no longer ends the region nothing is renamed in (v7 renamed
/// `__has_attribute\n#define Q 1\n(cold)`'s argument).
/// Its length part and it fill exactly one SHA-256 block, so each key starts from a
/// hash state computed once ([`key_state`]).
pub(crate) const KEY_DOMAIN: &[u8] = b"kcache canonical-text v8 -- the key of a kernel encoding";
const _: () = assert!(8 + KEY_DOMAIN.len() == 64);

/// The SHA-256 state after the length-prefixed [`KEY_DOMAIN`] (one whole block).
pub(crate) fn key_state() -> [u32; 8] {
    static STATE: OnceLock<[u32; 8]> = OnceLock::new();
    *STATE.get_or_init(|| {
        let mut block = [0u8; 64];
        let (len, domain) = block.split_at_mut(8);
        len.copy_from_slice(&kcache_digest::part_len(KEY_DOMAIN.len()));
        domain.copy_from_slice(KEY_DOMAIN);
        crate::sha::state_after(&block)
    })
}

/// The kernel text a key is taken over: one kernel's tokens with the names it owns
/// renamed. See [`canonical_kernel`](crate::canonical_kernel).
#[derive(Clone, Debug)]
pub struct Canonical {
    pub(crate) encoding: Vec<u8>,
    /// The kernel token (its first `token_len` bytes, if a kernel name was given), then
    /// the renamed names in number order, each as its length (LEB128) and its bytes.
    pub(crate) side: Vec<u8>,
    pub(crate) token_len: Option<usize>,
    /// Whether the own name was keyed by its role ([`ROLE_TOKEN`] is then the token).
    pub(crate) by_role: bool,
    /// Why the own name was keyed as spelled, when a kernel name was given and it was.
    pub(crate) own_kept: Option<&'static str>,
    pub(crate) renamed_count: usize,
    pub(crate) refusals: Vec<Refusal>,
    pub(crate) pinned: Vec<String>,
    pub(crate) text: OnceLock<String>,
    /// What renaming the text's own names did (see [`TextNames`]).
    pub(crate) text_names: TextNames,
}

impl PartialEq for Canonical {
    fn eq(&self, other: &Self) -> bool {
        self.by_role == other.by_role
            && self.kernel_token() == other.kernel_token()
            && self.encoding == other.encoding
    }
}

impl Eq for Canonical {}

impl Canonical {
    /// The human-readable canonical text: the kernel text as written, with renamed
    /// names spelled `kc<n>` and the kernel's own name spelled as its
    /// [`kernel_token`](crate::kernel_token). Built on first use. Equal keys give equal texts, but not the
    /// other way round: a free identifier spelled `kc0` looks like a renamed one
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
        // hashes, without gathering the parts first, from the state after the domain's
        // block.
        let mut h = BlockHasher::resume(key_state(), 1);
        match self.token_bytes() {
            // By its role: no spelling enters the key.
            Some(_) if self.by_role => {
                h.update(&kcache_digest::part_len(1));
                h.update(b"R");
            }
            Some(t) => {
                h.update(&kcache_digest::part_len(1 + t.len()));
                h.update(b"K");
                h.update(t);
            }
            None => {
                h.update(&kcache_digest::part_len(1));
                h.update(b"N");
            }
        }
        h.update(&kcache_digest::part_len(self.encoding.len()));
        h.update(&self.encoding);
        for p in extra_parts {
            h.update(&kcache_digest::part_len(p.len()));
            h.update(p);
        }
        crate::sha::hex_lower(&h.finish())
    }

    /// The byte stream the key is taken over: the kernel's bytes as written, each
    /// occurrence of a renamed name or of the own name replaced by a tag (a prefix code:
    /// see the crate docs). Useful to compare two kernels byte by byte.
    pub fn encoding(&self) -> &[u8] {
        &self.encoding
    }

    /// The kernel token that replaced the kernel's own name, if a name was given: the
    /// name less a segment index or a declared counter ([`Names::kernel_token`](crate::Names::kernel_token)),
    /// the whole name when the text was keyed over its exact text, or [`ROLE_TOKEN`] when
    /// the name was keyed by its role ([`Canonical::kernel_name_by_role`]).
    pub fn kernel_token(&self) -> Option<&str> {
        // The token was copied from a `&str` at a char boundary, so this never fails.
        self.token_bytes()
            .map(|t| std::str::from_utf8(t).unwrap_or_default())
    }

    fn token_bytes(&self) -> Option<&[u8]> {
        self.token_len
            .map(|l| self.side.get(..l).unwrap_or_default())
    }

    /// The renamed names in number order: the `n`th one became `kc<n>`.
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

    /// Whether the kernel's own name was keyed by its role, not its spelling
    /// ([`Names::kernel_name_by_role`](crate::Names::kernel_name_by_role)): then two
    /// kernels differing only in their names' spellings share the key, and a cache hit
    /// answers one with the other's code, to be called under the other's symbol.
    pub fn kernel_name_by_role(&self) -> bool {
        self.by_role
    }

    /// Why the kernel's own name was keyed as spelled (less a segment index or a declared
    /// counter) rather than by its role; `None` when it was keyed by its role or no
    /// kernel name was given. With [`Canonical::text_names`], [`Canonical::pinned`] and
    /// [`Canonical::refusals`], it says which names made a kernel's key unique to its
    /// spelling; [`Canonical::kept_names`] lists them all.
    ///
    /// ```
    /// use canonical_text::{canonical_kernel, Names};
    /// let c = canonical_kernel("void E_4(float *o) { o[0] = 1; }", Some("E_4"), &Names::new());
    /// assert_eq!(c.kernel_name_kept(), None);
    /// let c = canonical_kernel("void relu(float *o) { o[0] = 1; }", Some("relu"), &Names::new());
    /// assert!(c.kernel_name_kept().unwrap().contains("digit"));
    /// ```
    pub fn kernel_name_kept(&self) -> Option<&'static str> {
        self.own_kept
    }

    /// Every reason this key is tied to spellings, one line each, for a census, a miss
    /// explanation or `kcache key`: the refusals (the exact text was keyed), the own name
    /// kept as spelled and why, each declared name kept and why (the first
    /// [`TextNames::KEPT_LISTED`](crate::TextNames::KEPT_LISTED), then how many more),
    /// why the text's declarations were not read, and the pinned names. Empty when every
    /// name the kernel owns was renamed.
    ///
    /// ```
    /// use canonical_text::{canonical_kernel, Names};
    /// let text = "void E_4(float *o) { { float t = 1; } o[0] = t; }";
    /// let c = canonical_kernel(text, Some("E_4"), &Names::new());
    /// assert_eq!(c.kept_names(), ["name `t`: used outside its declarations' scope"]);
    /// ```
    pub fn kept_names(&self) -> Vec<String> {
        let mut out: Vec<String> = self
            .refusals
            .iter()
            .map(|r| format!("refused: {r}"))
            .collect();
        if let Some(why) = self.own_kept {
            // Keyed by its role but pinned: its spelling is among the pinned names.
            match self.kernel_token().filter(|_| !self.by_role) {
                Some(name) => out.push(format!("kernel name `{name}`: {why}")),
                None => out.push(format!("kernel name: {why}")),
            }
        }
        let t = &self.text_names;
        if let Some(why) = t.refused() {
            out.push(format!("declared names not read: the text holds {why}"));
        }
        for (name, why) in t.kept() {
            out.push(format!("name `{name}`: {why}"));
        }
        if t.kept_total() > t.kept().len() {
            out.push(format!(
                "{} more declared names kept",
                t.kept_total() - t.kept().len()
            ));
        }
        for name in &self.pinned {
            out.push(format!(
                "name `{name}`: pinned (it also occurs where nothing is renamed)"
            ));
        }
        out
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

    /// What renaming the names the text binds itself did ([`Names::text_names`](crate::Names::text_names)):
    /// how many it renamed, which declared names it kept and why, or why it read none.
    /// With [`Canonical::refusals`], it says why a kernel is keyed over its exact names.
    ///
    /// ```
    /// use canonical_text::{canonical_kernel, Names};
    /// let text = "float g; void k(float *out) { float g2 = 1; { float t = g2; out[0] = t; } out[1] = t; }";
    /// let c = canonical_kernel(text, Some("k"), &Names::new());
    /// assert_eq!(c.text_names().renamed(), 2); // `out` and `g2`
    /// assert_eq!(c.text_names().kept()[0].0, "t"); // used outside its block
    /// ```
    pub fn text_names(&self) -> &TextNames {
        &self.text_names
    }
}

/// The token that stands for the kernel's own name when it is keyed by its role (in
/// [`Canonical::text`] and [`Canonical::kernel_token`]; the key holds no spelling then).
pub const ROLE_TOKEN: &str = "kc_kernel";

/// Why the own name is kept as spelled in a text keyed over its exact bytes.
pub(crate) const KEPT_RAW: &str = "the text is keyed over its exact text (see the refusals)";

/// The canonical form that renames nothing: the exact text, and the kernel's own name
/// whole (its segment index included) as the kernel token, since what refused may
/// observe it.
pub(crate) fn raw(src: &[u8], kernel_name: Option<&str>, refusals: Vec<Refusal>) -> Canonical {
    Canonical {
        encoding: src.to_vec(),
        side: kernel_name.map(str::as_bytes).unwrap_or_default().to_vec(),
        token_len: kernel_name.map(str::len),
        by_role: false,
        own_kept: kernel_name.map(|_| KEPT_RAW),
        renamed_count: 0,
        refusals,
        pinned: Vec::new(),
        text: OnceLock::new(),
        text_names: TextNames::default(),
    }
}
