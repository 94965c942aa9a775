//! The fast renamer: [`Renamer::run`] walks the text once, 64 bytes at a time
//! ([`crate::scan`]), renaming the names the kernel owns as it meets them and pinning
//! those met where nothing is renamed. Held equal to the lexer's reading by
//! [`crate::reference`] (property tests, the differential fuzzer).

use crate::Refusal;
use crate::encoding::{self as enc, push_renamed};
use crate::interner::{Collisions, Entry, Interner, NameKey, Slot, name_key, whole_name_key};
use crate::lexer::{
    attribute_end, block_comment_end, ident_end, is_ident_continue, is_ident_start,
    line_comment_end, literal_end, preprocessor_end,
};
use crate::names::{BoundCheck, Names, Prepared, all_digits, is_scope_local, is_symbol};
use crate::scan::*;

/// Something that makes the tokenization dialect-dependent, or observes a spelling
/// (`observer`); the kernel is then keyed raw.
pub(crate) struct Ambiguous {
    pub(crate) offset: usize,
    pub(crate) what: &'static str,
    pub(crate) observer: bool,
}

impl Ambiguous {
    pub(crate) fn lexing(offset: usize, what: &'static str) -> Self {
        Ambiguous {
            offset,
            what,
            observer: false,
        }
    }
}

pub(crate) struct Renamer<'a, 'n> {
    pub(crate) src: &'a [u8],
    pub(crate) names: &'n Names,
    pub(crate) prepared: &'n Prepared<'n>,
    /// Bound names (and names derived from them) may be renamed.
    pub(crate) bound_ok: bool,
    /// First bytes of names that may be renamed or are the own name, besides symbols
    /// and scope-locals; any other name is kept without a lookup.
    pub(crate) first: FirstBytes,
    /// First bytes of names looked up where met: those in `first`, `i` and `v`.
    pub(crate) look: ByteSet,
    pub(crate) map: Interner<'a>,
    pub(crate) next: u32,
    pub(crate) out: Vec<u8>,
    /// Start of the bytes not yet written to `out`.
    pub(crate) chunk_start: usize,
    /// [`Canonical`](crate::Canonical)'s `side`: the kernel token, then each renamed name as it is numbered.
    pub(crate) side: Vec<u8>,
    pub(crate) pinned_count: usize,
    /// A name already renamed (or the own name) was pinned: the pass must be redone.
    pub(crate) redo: bool,
    /// Where a lookup first met [`Collisions`] (0 for a name from [`Names`]): renaming
    /// is refused.
    pub(crate) collisions: Option<usize>,
    /// Everything before this is handled, and it is a token boundary.
    pub(crate) done: usize,
    /// End of the last comment or preprocessor line, and the last significant byte
    /// before it (for the `.`/`->`/`::` rule across comments).
    pub(crate) region_end: usize,
    pub(crate) region_sig: Option<usize>,
    /// End of the last block comment, and whether a line started before it.
    pub(crate) block_end: usize,
    pub(crate) block_line_start: bool,
    /// End of the comment being scanned (its words are renamed like code), if any
    /// is: events before it are the comment's words and trigraph candidates.
    pub(crate) comment_until: usize,
    /// The scan read the whole text and met none of the bytes [`Masks::gate`] lists nor
    /// `??`: [`crate::phases::untokenizable`] would refuse nothing.
    pub(crate) gate_clear: bool,
    /// The first identifier in the reserved namespace not known to be harmless
    /// ([`crate::phases::reserved_allowed`]) in code, a directive or an attribute, as the
    /// scan met it; an answer only once the scan read the whole text (`complete`).
    pub(crate) reserved: Option<usize>,
    /// The scan read every block (no refusal, no collisions stopped it).
    pub(crate) complete: bool,
    /// Where the attribute introducers (`__attribute__`, `__attribute`, `__declspec`)
    /// met in code start, in order: the GNU and Microsoft attribute regions start at
    /// those followed by `(` ([`crate::phases::attribute_regions_at`]).
    pub(crate) attributes: Vec<usize>,
    /// What the directives the scan met may include (0: nothing,
    /// [`INCLUDES_STANDARD`], [`INCLUDES_OTHER`]): a header's function-like macros may
    /// paste their arguments (see [`crate::canonical`]'s include rule).
    pub(crate) includes: u8,
    /// Which of [`crate::phases::STANDARD_HEADERS`] the text includes (bit `k` for the
    /// `k`th).
    pub(crate) standard_headers: u64,
    /// The scan met a `#define` (or a directive with a comment before its name).
    pub(crate) defines: bool,
    /// The bound-name refusal this pass found in names the preparation left unread
    /// ([`Prepared`]'s `deferred`): the call starts again from
    /// [`Prepared::settled`], since these names were entered as renamable.
    pub(crate) bound_refusal: Option<Refusal>,
}

impl<'a, 'n: 'a> Renamer<'a, 'n> {
    pub(crate) fn new(
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
        for d in &names.derivations {
            match d.prefix.as_bytes().first() {
                Some(&c) => first.add(c),
                // The base comes first: a bound name or a symbol (digits start no name).
                None => {
                    first.add(b'i');
                    if bound_ok {
                        prepared.each_bound(|b| first.add_name(b.as_bytes()));
                    }
                }
            }
        }
        // Sized for the names known now and some the text adds (a kernel with ~200 bound
        // names grew the table three times, rehashing every name each time).
        let known = if bound_ok { prepared.bound_len() } else { 0 } + pinned.len() + 1;
        let mut map = Interner::with_capacity(known + 16);
        let mut set = Ok(());
        let mut check = BoundCheck::new();
        if bound_ok {
            // Bound names (unless kept) are renamable: known before the text is read, so
            // meeting one costs a single lookup. One pass gives the scan their first
            // bytes and the table their slots (and, when the preparation left them
            // unread, checks them for the bound-name refusal).
            let mut enter = |b: &'a [u8]| {
                first.add_name(b);
                if !b.is_empty() && !prepared.is_kept(b) {
                    set = set.and(map.set(b, whole_name_key(b), Slot::Bound));
                }
            };
            // Two loops, so the usual one has no check in it.
            if prepared.deferred {
                prepared.each_bound(|name| {
                    check.note(name, &prepared.free, names);
                    enter(name.as_bytes());
                });
            } else {
                prepared.each_bound(|name| enter(name.as_bytes()));
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
            reserved: None,
            complete: false,
            attributes: Vec::new(),
            includes: 0,
            standard_headers: 0,
            defines: false,
            bound_refusal: if prepared.deferred {
                check.refusal()
            } else {
                None
            },
        }
    }

    /// Whether a name in no slot yet (so no bound name, unless renaming bound names is
    /// refused or the name is kept) is one the kernel owns.
    pub(crate) fn renamable(&self, name: &[u8]) -> bool {
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
    pub(crate) fn candidate(&self, name: &[u8]) -> bool {
        self.first.contains(name[0]) || is_symbol(name) || is_scope_local(name)
    }

    /// The slot of the candidate `src[s..e]` met where names are renamed.
    #[inline(always)]
    pub(crate) fn slot(&mut self, s: usize, e: usize) -> Slot {
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
                }) => self.number(i, true, s, e, k),
                Some(entry) => entry.slot,
                None => Slot::Verbatim,
            }
        } else {
            self.new_slot(i, s, e, k)
        }
    }

    /// A lookup of the name at `s` met [`Collisions`]: renaming will be refused (the scan
    /// stops at the next block); the name is kept as spelled meanwhile.
    #[cold]
    #[inline(never)]
    pub(crate) fn collided(&mut self, s: usize) -> Slot {
        self.collisions.get_or_insert(s);
        Slot::Verbatim
    }

    /// The slot of the name `src[s..e]`, met for the first time, not in the table (its
    /// free index `i`).
    #[cold]
    pub(crate) fn new_slot(&mut self, i: usize, s: usize, e: usize, k: NameKey) -> Slot {
        let name = &self.src[s..e];
        if self.renamable(name) {
            self.number(i, false, s, e, k)
        } else {
            self.map.set_at(i, false, name, k, Slot::Verbatim);
            Slot::Verbatim
        }
    }

    /// Gives the renamable name `src[s..e]`, met for the first time, the next number
    /// (`i` and `found` as [`Interner::probe`] said).
    #[cold]
    pub(crate) fn number(&mut self, i: usize, found: bool, s: usize, e: usize, k: NameKey) -> Slot {
        let src = self.src;
        let name = &src[s..e];
        let n = self.next;
        self.next += 1;
        // Common case in one fixed-size copy (no call to `memcpy`): a name of at most 16
        // bytes, its length in one byte (as `push_varint` writes it), then 16 bytes of
        // the text from the name, cut back to the name.
        let len = name.len();
        if len <= 16
            && let Some(window) = src.get(s..s + 16)
        {
            let at = self.side.len() + 1 + len;
            self.side.push(len as u8);
            self.side.extend_from_slice(window);
            self.side.truncate(at);
        } else {
            enc::push_varint(&mut self.side, len);
            self.side.extend_from_slice(name);
        }
        let slot = Slot::Renamed(n);
        self.map.set_at(i, found, name, k, slot);
        slot
    }

    /// Notes the name `src[s..e]` met where nothing is renamed: if it is renamable (or
    /// the own name) it is pinned, kept as spelled everywhere.
    pub(crate) fn pin(&mut self, s: usize, e: usize) {
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
    pub(crate) fn emit(&mut self, slot: Slot, s: usize, e: usize) {
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
    pub(crate) fn significant_before(&self, pos: usize) -> Option<usize> {
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
    pub(crate) fn line_start_before(&self, pos: usize) -> bool {
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
    pub(crate) fn after_member_operator(&self, s: usize, before: u64, base: usize) -> bool {
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
    pub(crate) fn ident(&mut self, s: usize, e: usize, before: u64, base: usize) {
        // Names starting with `i` or `v` (with a digit after it) that are no symbol or
        // scope-local are looked up all the same: that is cheaper than telling them
        // apart, and they are kept. Unless the scan takes every identifier start, it only
        // finds names in `look`.
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

    /// Notes the identifier-like run `src[s..e]` starting with `_`, met in code (not in a
    /// comment, literal, directive or attribute): unless it lies inside a preprocessing
    /// number (`1.__x`, `1e+__x`; `floor` as for [`in_number`], which [`Self::word`]
    /// rules out the same way), an attribute introducer (`__attribute__`, `__attribute`,
    /// `__declspec`) is recorded in [`Self::attributes`], and the first reserved
    /// identifier of unknown meaning in [`Self::reserved`]. Changes nothing else.
    #[inline(never)]
    pub(crate) fn underscore_word(&mut self, s: usize, e: usize, floor: usize) {
        let src = self.src;
        let w = &src[s..e];
        if !crate::phases::is_reserved_word(w) {
            return;
        }
        let introducer = matches!(w, b"__attribute__" | b"__attribute" | b"__declspec")
            || crate::phases::is_feature_test(w);
        if !introducer && (self.reserved.is_some() || crate::phases::reserved_allowed(w)) {
            return;
        }
        if s > 0
            && BEFORE[src[s - 1] as usize] & B_NUMBER != 0
            && number_around(src, floor, s - 1).is_some()
        {
            return;
        }
        if introducer {
            self.attributes.push(s);
            if self.reserved.is_none() && !crate::phases::reserved_allowed(w) {
                self.reserved = Some(s);
            }
        } else {
            self.reserved = Some(s);
        }
    }

    /// Notes the identifier `src[s..e]` starting with `_` met in a directive or an
    /// attribute `[[...]]`: the first reserved one of unknown meaning (see
    /// [`Self::reserved`]).
    pub(crate) fn reserved_in_kept(&mut self, s: usize, e: usize) {
        let w = &self.src[s..e];
        if self.reserved.is_none()
            && crate::phases::is_reserved_word(w)
            && !crate::phases::reserved_allowed(w)
        {
            self.reserved = Some(s);
        }
    }

    /// Records a comment or preprocessor line `start..end` for the look-back rules.
    pub(crate) fn region(&mut self, start: usize, end: usize, block: bool) {
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
    pub(crate) fn comment(&mut self, start: usize, end: usize, block: bool) -> usize {
        self.region(start, end, block);
        self.comment_until = end;
        start + 2
    }

    /// An event at `pos` inside the comment being scanned: a word starting with a
    /// letter, `_` or a non-ASCII byte (ending at `e`; renamed like code), or a
    /// byte that may start a trigraph. Returns where scanning resumes.
    #[inline(always)]
    pub(crate) fn comment_event(
        &mut self,
        pos: usize,
        word: bool,
        e: usize,
    ) -> Result<usize, Ambiguous> {
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
    /// observes the spelling of what it is given; so does a directive other than a
    /// conditional naming a feature test (`#define HB(x) __has_builtin(x)`: its answer is its argument's spelling). A
    /// `'` after a word or number refuses (a digit separator in some dialects only).
    pub(crate) fn kept_region(
        &mut self,
        start: usize,
        end: usize,
        directive: bool,
    ) -> Result<(), Ambiguous> {
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
                    if b == b'_' {
                        self.reserved_in_kept(s, i);
                        if directive
                            && crate::phases::is_feature_test(&src[s..i])
                            && feature_test_reaches_code(src, start, end, s)
                        {
                            return Err(Ambiguous {
                                offset: s,
                                what: "a macro of the text naming a feature test (`__has_*`, `__is_*`)",
                                observer: true,
                            });
                        }
                    }
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

    pub(crate) fn literal(&mut self, start: usize, end: usize) -> Result<(), Ambiguous> {
        match find_trigraph(&self.src[start..end]) {
            Some(i) => Err(Ambiguous::lexing(start + i, "a trigraph")),
            None => Ok(()),
        }
    }

    /// The identifier-like run `src[pos..e]` starting with a letter, `_` or a
    /// non-ASCII byte, in code (`before` and `base` as for
    /// [`Self::after_member_operator`]); returns where scanning resumes.
    #[inline(always)]
    pub(crate) fn word(
        &mut self,
        pos: usize,
        e: usize,
        before: u64,
        base: usize,
    ) -> Result<usize, Ambiguous> {
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
    pub(crate) fn special(&mut self, pos: usize) -> Result<usize, Ambiguous> {
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
                match included(src, pos, e) {
                    Some(Some(k)) => {
                        self.includes = self.includes.max(INCLUDES_STANDARD);
                        self.standard_headers |= 1 << k;
                    }
                    Some(None) => self.includes = INCLUDES_OTHER,
                    None => {}
                }
                self.defines |= defines(src, pos, e);
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
    ///
    /// Where the CPU has AVX2 ([`avx2`]), the whole scan is compiled for it and classifies
    /// with [`classify64_avx2`]; elsewhere with [`classify64`]. Both give the same masks
    /// (the AVX2 ones without the special bytes and the shape-only names the loop would
    /// pass over: see [`Classify::PASSES`]), so the same result
    /// (`the_avx2_scan_ends_as_the_baseline_scan_does`).
    pub(crate) fn run(&mut self) -> Result<(), Ambiguous> {
        #[cfg(target_arch = "x86_64")]
        if let Some(simd) = avx2() {
            return pulp::Simd::vectorize(simd, ScanAvx2 { r: self, simd });
        }
        self.scan(Baseline)
    }

    /// [`Self::run`] with the baseline block scan whatever the CPU has, for tests that
    /// hold the AVX2 scan to it.
    #[cfg(test)]
    pub(crate) fn run_baseline(&mut self) -> Result<(), Ambiguous> {
        self.scan(Baseline)
    }

    /// [`Self::run`]'s scan, with `classify` telling the bytes of each block apart.
    #[inline(always)]
    fn scan<C: Classify>(&mut self, classify: C) -> Result<(), Ambiguous> {
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
                under,
            } = block_masks(src, base, &first, &classify);
            // The second `?` of each `??`, this block's first one after the last block's.
            gated |= gate | (quest & ((quest << 1) | quest_carry));
            quest_carry = quest >> 63;
            // Starts of runs that may be a name needing a look (a digit begins a
            // number; any other name is kept as written without a look).
            let word_starts = !((cont << 1) | carry);
            let starts = cand & word_starts;
            // Starts of the other runs beginning with `_`: met only to check them against
            // the reserved namespace's allow list.
            let reserved_starts = under & word_starts & !starts;
            carry = cont >> 63;
            let mut events = (starts | reserved_starts | special) & from(p, base);
            while events != 0 {
                let i = events.trailing_zeros();
                let pos = base + i as usize;
                let word = (starts >> i) & 1 != 0;
                // A name whose first byte needs a look only by the name's shape, with no
                // digit after it, is kept without one (a classifier that `PASSES` left
                // it out of `cand`): no bound, pinned, own or derived name starts with
                // that byte (`Self::new` adds their first bytes whole), so only a symbol
                // `i<digits>` or a scope-local `v<digits>_` starting with it may be
                // renamed or pinned, and both have a digit there. Looked up, it would be
                // kept as spelled: entered in the name table as such, which only a
                // lookup meeting `PROBE_LIMIT` (astronomically rare) could tell.
                if word
                    && !C::PASSES
                    && first.shape_passed_over(src[pos], src.get(pos + 1).map_or(0, |&b| b))
                {
                    events &= events - 1;
                    continue;
                }
                if !word {
                    if (reserved_starts >> i) & 1 != 0 {
                        // Nothing changes here: the scan goes on as if the word were not
                        // met.
                        if pos >= self.comment_until {
                            let run = (!cont >> i).trailing_zeros();
                            let e = if i + run < 64 {
                                pos + run as usize
                            } else {
                                ident_end(src, base + 64)
                            };
                            self.underscore_word(pos, e, p.max(self.comment_until));
                        }
                        events &= events - 1;
                        continue;
                    }
                    // Bytes that start nothing here (`[` not before `[`, `/` not before
                    // `/` or `*`, `?` not before `?`, `%` not before `:`, `&`) are
                    // passed over. None of them can lie inside a preprocessing number,
                    // so the look-back rules are the same without them.
                    // (A classifier that `PASSES` left them out of `special`.)
                    if !C::PASSES
                        && passed_over(src[pos], src.get(pos + 1).map_or(0, |&b| b.into()))
                    {
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
                    let e = run_end();
                    if (under >> i) & 1 != 0 {
                        self.underscore_word(pos, e, p);
                    }
                    self.word(pos, e, before, base)?
                } else {
                    self.special(pos)?
                };
                events &= from(p, base);
            }
            base += 64;
        }
        // Every block was read (a lookup that met collisions stops the scan early).
        self.complete = base >= n;
        self.gate_clear = gated == 0 && self.complete;
        self.out.extend_from_slice(&src[self.chunk_start.min(n)..]);
        Ok(())
    }
}

/// [`Renamer::run`]'s scan compiled for AVX2 (`pulp` calls [`pulp::WithSimd::with_simd`]
/// inside a function with the target's features, where everything it inlines is
/// compiled with them).
#[cfg(target_arch = "x86_64")]
struct ScanAvx2<'r, 'a, 'n> {
    r: &'r mut Renamer<'a, 'n>,
    simd: pulp::x86::V3,
}

#[cfg(target_arch = "x86_64")]
impl<'a, 'n: 'a> pulp::WithSimd for ScanAvx2<'_, 'a, 'n> {
    type Output = Result<(), Ambiguous>;

    #[inline(always)]
    fn with_simd<S: pulp::Simd>(self, _: S) -> Self::Output {
        self.r.scan(Avx2(self.simd))
    }
}

/// Whether the significant byte `src[q]` (a [`B_MEMBER`] or [`B_SIGN`] byte) before the
/// identifier at `s` ends `.`, `->` or `::` (or `...`, `-->`, `<::`), or is the sign of
/// an exponent inside a preprocessing number (`1e+x`; `floor` as for [`in_number`]).
#[cold]
#[inline(never)]
pub(crate) fn after_member_byte(src: &[u8], q: usize, s: usize, floor: usize) -> bool {
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

/// What the directive `src[start..end]` (its `#` or `%:` at `start`) may include:
/// `Some(Some(k))` for `#include <h>` with `h` the `k`th of
/// [`crate::phases::STANDARD_HEADERS`], `Some(None)` for any other `#include`,
/// `#include_next` or `#import`, or a directive with a comment before its name (read as
/// one, whatever it hides), `None` for the rest.
fn included(src: &[u8], start: usize, end: usize) -> Option<Option<usize>> {
    let blank = |b: u8| matches!(b, b' ' | b'\t' | 0x0b | 0x0c);
    let mut i = if src[start] == b'%' {
        start + 2
    } else {
        start + 1
    };
    while i < end && blank(src[i]) {
        i += 1;
    }
    let line = &src[i.min(end)..end];
    if line.starts_with(b"/") || line.starts_with(b"import") {
        return Some(None);
    }
    let rest = line.strip_prefix(b"include")?;
    let rest = match rest.iter().position(|&b| !blank(b)) {
        Some(k) => &rest[k..],
        None => return Some(None),
    };
    let header = rest
        .strip_prefix(b"<")
        .and_then(|r| Some(&r[..r.iter().position(|&b| b == b'>')?]));
    let standard = header.and_then(|h| {
        let after = &rest[h.len() + 2..];
        if !after.iter().all(|&b| blank(b) || b == b'\r' || b == b'\n') {
            return None;
        }
        crate::phases::STANDARD_HEADERS
            .iter()
            .position(|s| s.as_bytes() == h)
    });
    Some(standard)
}

/// Whether the directive `src[start..end]` (its `#` or `%:` at `start`) may define a
/// macro: a `#define`, or a directive with a comment before its name.
fn defines(src: &[u8], start: usize, end: usize) -> bool {
    let mut i = if src[start] == b'%' {
        start + 2
    } else {
        start + 1
    };
    while i < end && matches!(src[i], b' ' | b'\t' | 0x0b | 0x0c) {
        i += 1;
    }
    let line = &src[i.min(end)..end];
    line.starts_with(b"define") || line.starts_with(b"/")
}

/// [`Renamer::includes`]: the text includes standard C headers only.
pub(crate) const INCLUDES_STANDARD: u8 = 1;
/// [`Renamer::includes`]: the text may include another header.
pub(crate) const INCLUDES_OTHER: u8 = 2;

/// Whether the feature test at `src[s..]` in the directive `src[start..end]` (its `#` or
/// `%:` at `start`) can reach code with an argument the directive does not pin: it lies in
/// the replacement list of a `#define` (`#define HB(x) __has_builtin(x)`), or in a
/// directive read with a comment before its name. A conditional (`#if
/// __has_builtin(x)`) pins its words, and a `#define` of the test itself (glibc-style
/// shims: `#define __has_builtin(x) 0`) names it only as the macro defined.
fn feature_test_reaches_code(src: &[u8], start: usize, end: usize, s: usize) -> bool {
    let blank = |b: u8| matches!(b, b' ' | b'\t' | 0x0b | 0x0c);
    let mut i = if src[start] == b'%' {
        start + 2
    } else {
        start + 1
    };
    while i < end && blank(src[i]) {
        i += 1;
    }
    let line = &src[i.min(end)..end];
    if line.starts_with(b"/") {
        return true;
    }
    if !line.starts_with(b"define") {
        return false;
    }
    let mut j = i + b"define".len();
    while j < end && blank(src[j]) {
        j += 1;
    }
    if j < end && src[j] == b'/' {
        return true;
    }
    // Past the macro's name.
    while j < end && is_ident_continue(src[j]) {
        j += 1;
    }
    s >= j
}

/// The second pass of a kernel whose first pass pinned a name it had renamed (or the
/// own name): every name pinned in the first is pinned from the start.
#[cold]
#[inline(never)]
pub(crate) fn redo<'a, 'n: 'a>(
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
pub(crate) fn pinned_names(r: &Renamer<'_, '_>) -> Vec<String> {
    if r.pinned_count == 0 {
        return Vec::new();
    }
    pinned_names_sorted(r)
}

#[cold]
#[inline(never)]
pub(crate) fn pinned_names_sorted(r: &Renamer<'_, '_>) -> Vec<String> {
    let mut pinned: Vec<String> = r
        .map
        .entries()
        .filter(|e| e.slot == Slot::Pinned)
        .map(|e| String::from_utf8_lossy(e.name).into_owned())
        .collect();
    pinned.sort();
    pinned
}
