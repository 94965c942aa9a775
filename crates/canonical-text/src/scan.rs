//! The 64-byte block scan: [`classify64`] tells of each byte whether it continues an
//! identifier, may start a name needing a look, may start something special (a literal,
//! comment, directive, attribute, trigraph), is white space, or is one the phases 1-2
//! gate may refuse; and the small look-back rules the renamer applies to what it meets
//! (preprocessing numbers, digit separators, trigraphs).

use crate::lexer::{ident_end, is_ident_continue, literal_end, number_end};

/// [`BEFORE`] flags: whitespace.
pub(crate) const B_SPACE: u8 = 1;
/// [`BEFORE`] flags: `.`, `>`, `:` (may end a member operator).
pub(crate) const B_MEMBER: u8 = 2;
/// [`BEFORE`] flags: `+`, `-` (may be the sign of an exponent).
pub(crate) const B_SIGN: u8 = 4;
/// [`BEFORE`] flags: `.`, `+`, `-` (may lie inside a preprocessing number).
pub(crate) const B_NUMBER: u8 = 16;

/// What a byte before an identifier may tell about it (table lookups instead of
/// branchy matches in the hot loop). A `const`, as the scan's other tables are, not a
/// `static`: in a position-independent executable a `static` of another codegen unit is
/// reached through the global offset table, one more dependent load per lookup.
pub(crate) const BEFORE: [u8; 256] = {
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

/// For a byte that [`crate::rename::Renamer::run`] may pass over: the next bytes that would make it
/// start something (`0x100`: none; bytes not listed are never passed over).
pub(crate) const PASS_UNLESS: [(bool, u16, u16); 256] = {
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
pub(crate) fn from(p: usize, base: usize) -> u64 {
    let d = p.saturating_sub(base);
    if d >= 64 { 0 } else { u64::MAX << d }
}

/// A set of bytes.
#[derive(Clone, Copy, Default)]
pub(crate) struct ByteSet([u64; 4]);

impl ByteSet {
    pub(crate) fn insert(&mut self, b: u8) {
        self.0[usize::from(b >> 6)] |= 1 << (b & 63);
    }

    #[inline(always)]
    pub(crate) fn contains(&self, b: u8) -> bool {
        (self.0[usize::from(b >> 6)] >> (b & 63)) & 1 != 0
    }
}

/// First bytes of names that need a look: a table, and for the vectorized scan up to
/// eight of them (unused slots 0, which starts no identifier) or `all` if there are
/// more; and up to two first bytes whose names need a look only by their shape
/// (`shapes`: the symbols `i<digits>` and scope-locals `v<digits>_`), which only
/// a name with a digit after its first byte has.
#[derive(Clone, Copy, Default)]
pub(crate) struct FirstBytes {
    pub(crate) table: ByteSet,
    pub(crate) bytes: [u8; 8],
    pub(crate) len: usize,
    pub(crate) all: bool,
    /// Bytes added by [`FirstBytes::add_scan`] and not by [`FirstBytes::add`] (unused
    /// slots 0); never in `bytes`.
    pub(crate) shapes: [u8; 2],
}

impl FirstBytes {
    /// Adds `b` as the first byte of names that need a look.
    pub(crate) fn add(&mut self, b: u8) {
        self.table.insert(b);
        for s in &mut self.shapes {
            if *s == b {
                *s = 0;
            }
        }
        self.add_byte(b);
    }

    fn add_byte(&mut self, b: u8) {
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

    /// Adds `b` to the scan only: the names starting with it are told by their shape
    /// (symbols `i<digits>`, scope-locals `v<digits>_`), not by the table, so only
    /// those with a digit after `b` need a look (unless `b` is also [`FirstBytes::add`]ed).
    pub(crate) fn add_scan(&mut self, b: u8) {
        if b == 0 || self.shapes.contains(&b) || self.bytes[..self.len].contains(&b) {
            return;
        }
        match self.shapes.iter_mut().find(|s| **s == 0) {
            Some(s) => *s = b,
            None => self.add_byte(b),
        }
    }

    pub(crate) fn add_name(&mut self, name: &[u8]) {
        if let Some(&b) = name.first() {
            self.add(b);
        }
    }

    #[inline(always)]
    pub(crate) fn contains(&self, b: u8) -> bool {
        self.table.contains(b)
    }

    /// Whether names starting with `b` need a look only by their shape: then only one
    /// with a digit after `b` does (the scan passes over the others).
    #[inline(always)]
    pub(crate) fn shape_only(&self, b: u8) -> bool {
        b != 0 && (self.shapes[0] == b || self.shapes[1] == b)
    }

    /// Whether the scan passes over a name starting with `b` when `next` follows `b`
    /// (`0` where the text ends): `b` is [`Self::shape_only`] and `next` no digit. A
    /// classifier that [`Classify::PASSES`] leaves such names out of `cand`.
    #[inline(always)]
    pub(crate) fn shape_passed_over(&self, b: u8, next: u8) -> bool {
        self.shape_only(b) && !next.is_ascii_digit()
    }
}

/// What [`classify64`] tells of 64 bytes: bit `i` of each mask is about byte `i`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Masks {
    /// Bytes that continue an identifier: letters, digits, `_` and bytes from 0x80.
    /// (`$` outside literals is refused by the phases 1-2 gate, see [`crate::phases`];
    /// here it is special, and refused if met.)
    pub(crate) cont: u64,
    /// Identifier start bytes that may begin a name needing a look (see [`FirstBytes`]).
    /// A classifier whose [`Classify::PASSES`] is set leaves out those of
    /// [`FirstBytes::shapes`] with no digit after them.
    pub(crate) cand: u64,
    /// Bytes that may start a literal, comment, preprocessor line, attribute, trigraph
    /// or stray backslash (`"` `#` `%` `'` `[` `\\` `/` `?`), or is refused (`$`), and
    /// harmlessly `&`. A classifier whose [`Classify::PASSES`] is set leaves out the
    /// ones that start nothing by the byte after them ([`passed_over`]).
    pub(crate) special: u64,
    /// White space (` `, `\t`, `\n`, `\v`, `\f`, `\r`: [`B_SPACE`] in [`BEFORE`]).
    pub(crate) space: u64,
    /// Bytes without which [`crate::phases::untokenizable`] refuses nothing: control
    /// bytes other than `\t` and `\n` (NUL, `\r`), bytes from 0x80, `\\` and `$`.
    pub(crate) gate: u64,
    /// `?` (two in a row may start a trigraph, which the gate also refuses).
    pub(crate) quest: u64,
    /// `_`: the identifiers starting with one are the reserved ones the renamer checks
    /// ([`crate::phases::reserved_allowed`]) whether or not they need a look.
    pub(crate) under: u64,
}

impl Masks {
    /// The masks from `either`, the candidates and special bytes together: no special
    /// byte continues an identifier, and candidates do, so `cont` tells them apart.
    #[inline(always)]
    pub(crate) fn split(
        cont: u64,
        either: u64,
        space: u64,
        gate: u64,
        quest: u64,
        under: u64,
    ) -> Masks {
        Masks {
            cont,
            cand: either & cont,
            special: either & !cont,
            space,
            gate,
            quest,
            under,
        }
    }
}

/// The [`Masks`] of 64 bytes. On x86-64, SSE2 compares 16 bytes at a time and
/// `movemask` gathers the results.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(crate) fn classify64(block: &[u8; 64], first: &FirstBytes) -> Masks {
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
    let [s0, s1] = first.shapes;
    let all = splat(if first.all { 0xff } else { 0 });
    let (mut cont, mut either, mut space) = (0u64, 0u64, 0u64);
    let (mut gate, mut quest, mut under) = (0u64, 0u64, 0u64);
    for (k, chunk) in block.chunks_exact(16).enumerate() {
        let mut a = [0u8; 16];
        a.copy_from_slice(chunk);
        let v = m128i::from(a);
        // Letters, `_`, and bytes from 0x80 (negative as signed bytes).
        let is_under = eq(v, b'_');
        let is_start = bitor_m128i(
            bitor_m128i(in_range(bitor_m128i(v, splat(0x20)), b'a', b'z'), is_under),
            cmp_lt_mask_i8_m128i(v, splat(0)),
        );
        let is_cont = bitor_m128i(is_start, in_range(v, b'0', b'9'));
        let in_first = bitor_m128i(
            bitor_m128i(
                bitor_m128i(eq(v, f[0]), eq(v, f[1])),
                bitor_m128i(eq(v, f[2]), eq(v, f[3])),
            ),
            bitor_m128i(
                bitor_m128i(eq(v, f[4]), eq(v, f[5])),
                bitor_m128i(eq(v, f[6]), eq(v, f[7])),
            ),
        );
        let in_shapes = bitor_m128i(eq(v, s0), eq(v, s1));
        let is_cand = bitand_m128i(is_start, bitor_m128i(bitor_m128i(all, in_first), in_shapes));
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
        under |= bits(is_under) << (16 * k);
    }
    Masks::split(cont, either, space, gate, quest, under)
}

/// The AVX2 instructions, when this CPU has them (x86-64-v3, detected once): then
/// [`classify64_avx2`] classifies a block instead of [`classify64`].
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(crate) fn avx2() -> Option<pulp::x86::V3> {
    pulp::x86::V3::try_new()
}

/// [`classify64`] with AVX2, of `window`'s first 64 bytes: the same compares 32 bytes
/// at a time, and one `movemask` per 32 bytes; and, since each byte's next one is at
/// hand, without the special bytes [`passed_over`] nor the candidates of
/// [`FirstBytes::shapes`] with no digit after them (see [`Classify`]). Held to the
/// portable masks by `block_scan_agrees_with_the_portable_one` and the property test
/// beside it. Inlined only into code that `simd` vectorizes (its helpers are functions,
/// not closures: a closure is compiled without the target's features, and the
/// intrinsics in it become calls).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(crate) fn classify64_avx2(simd: pulp::x86::V3, window: &[u8; 65], first: &FirstBytes) -> Masks {
    use avx2_ops::*;
    let f = first.bytes;
    let all = splat(simd, if first.all { 0xff } else { 0 });
    let shapes = first.shapes;
    let lo = classify32_avx2(simd, load32(window, 0), load32(window, 1), f, shapes, all);
    // Opaque to the optimizer: seeing both halves' compares at once, LLVM joined the
    // two `movemask`s into one 64-lane mask, which AVX2 has no instruction for; it
    // built it byte by byte, and the scan ran 1.6 times slower.
    let hi = classify32_avx2(simd, load32(window, 32), load32(window, 33), f, shapes, all)
        .map(std::hint::black_box);
    let join = |i: usize| u64::from(lo[i]) | (u64::from(hi[i]) << 32);
    let (cont, either, space) = (join(0), join(1), join(2));
    let (gate, quest, under) = (join(3), join(4), join(5));
    Masks::split(cont, either, space, gate, quest, under)
}

/// [`classify64_avx2`]'s masks of the 32 bytes `v` (`v1`: the bytes after each): `cont`,
/// `either`, `space`, `gate`, `quest`, `under` (as in [`classify64`], with no byte
/// [`passed_over`] in `either`, nor a byte of `shapes` with no digit after it).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn classify32_avx2(
    simd: pulp::x86::V3,
    v: avx2_ops::V,
    v1: avx2_ops::V,
    f: [u8; 8],
    shapes: [u8; 2],
    all: avx2_ops::V,
) -> [u32; 6] {
    use avx2_ops::*;
    let s = simd;
    // Letters, `_`, and bytes from 0x80 (negative as signed bytes).
    let is_under = eq(s, v, b'_');
    let is_start = or(
        s,
        or(
            s,
            in_range(s, or(s, v, splat(s, 0x20)), b'a', b'z'),
            is_under,
        ),
        lt(s, v, splat(s, 0)),
    );
    let is_cont = or(s, is_start, in_range(s, v, b'0', b'9'));
    let in_first = or(
        s,
        or(
            s,
            or(s, eq(s, v, f[0]), eq(s, v, f[1])),
            or(s, eq(s, v, f[2]), eq(s, v, f[3])),
        ),
        or(
            s,
            or(s, eq(s, v, f[4]), eq(s, v, f[5])),
            or(s, eq(s, v, f[6]), eq(s, v, f[7])),
        ),
    );
    // A name starting with a byte of `shapes` needs a look only with a digit after it.
    let in_shapes = or(s, eq(s, v, shapes[0]), eq(s, v, shapes[1]));
    let shaped = and(s, in_shapes, in_range(s, v1, b'0', b'9'));
    let is_cand = and(
        s,
        is_start,
        or(s, or(s, andnot(s, in_shapes, all), in_first), shaped),
    );
    let is_quest = eq(s, v, b'?');
    let is_slash = eq(s, v, b'/');
    let is_special = or(
        s,
        or(s, in_range(s, v, b'"', b'\''), in_range(s, v, b'[', b'\\')),
        or(s, is_slash, is_quest),
    );
    // The special bytes that start nothing by the byte after them (`passed_over`):
    // `[` not before `[`, `?` not before `?`, `/` not before `/` or `*`, `%` not
    // before `:`, and `&`.
    let same = s.avx2._mm256_cmpeq_epi8(v, v1);
    let passed = or(
        s,
        or(
            s,
            andnot(s, same, eq(s, v, b'[')),
            andnot(s, same, is_quest),
        ),
        or(
            s,
            andnot(s, or(s, same, eq(s, v1, b'*')), is_slash),
            or(
                s,
                andnot(s, eq(s, v1, b':'), eq(s, v, b'%')),
                eq(s, v, b'&'),
            ),
        ),
    );
    // White space: ` `, and `\t` `\n` `\v` `\f` `\r`.
    let is_space = or(s, in_range(s, v, 0x09, 0x0d), eq(s, v, b' '));
    // Below 0x20 as signed bytes: the control bytes and the bytes from 0x80.
    let low_or_high = lt(s, v, splat(s, 0x20));
    let is_gate = or(
        s,
        andnot(s, or(s, eq(s, v, b'\t'), eq(s, v, b'\n')), low_or_high),
        or(s, eq(s, v, b'\\'), eq(s, v, b'$')),
    );
    [
        bits(s, is_cont),
        bits(s, or(s, is_cand, andnot(s, passed, is_special))),
        bits(s, is_space),
        bits(s, is_gate),
        bits(s, is_quest),
        bits(s, is_under),
    ]
}

/// The AVX2 operations [`classify64_avx2`] uses, each inlined where it is called.
#[cfg(target_arch = "x86_64")]
mod avx2_ops {
    use pulp::x86::V3;
    pub(super) type V = std::arch::x86_64::__m256i;

    /// The 32 bytes of `window` from `at` (at most 33).
    #[inline(always)]
    pub(super) fn load32(window: &[u8; 65], at: usize) -> V {
        if let Some(bytes) = window.get(at..at + 32)
            && let Ok(bytes) = <&[u8; 32]>::try_from(bytes)
        {
            pulp::bytemuck::cast(*bytes)
        } else {
            pulp::bytemuck::cast([b' '; 32])
        }
    }

    #[inline(always)]
    pub(super) fn splat(s: V3, b: u8) -> V {
        s.avx._mm256_set1_epi8(b as i8)
    }
    #[inline(always)]
    pub(super) fn or(s: V3, a: V, b: V) -> V {
        s.avx2._mm256_or_si256(a, b)
    }
    #[inline(always)]
    pub(super) fn and(s: V3, a: V, b: V) -> V {
        s.avx2._mm256_and_si256(a, b)
    }
    /// `!a & b`.
    #[inline(always)]
    pub(super) fn andnot(s: V3, a: V, b: V) -> V {
        s.avx2._mm256_andnot_si256(a, b)
    }
    #[inline(always)]
    pub(super) fn eq(s: V3, v: V, b: u8) -> V {
        s.avx2._mm256_cmpeq_epi8(v, splat(s, b))
    }
    /// Signed `a < b`.
    #[inline(always)]
    pub(super) fn lt(s: V3, a: V, b: V) -> V {
        s.avx2._mm256_cmpgt_epi8(b, a)
    }
    /// Bytes in `lo..=hi` (both below 0x80): shifted to the bottom of the signed range.
    #[inline(always)]
    pub(super) fn in_range(s: V3, v: V, lo: u8, hi: u8) -> V {
        let shifted = s.avx2._mm256_add_epi8(v, splat(s, 0x80u8.wrapping_sub(lo)));
        lt(s, shifted, splat(s, 0x80 + (hi - lo + 1)))
    }
    #[inline(always)]
    pub(super) fn bits(s: V3, v: V) -> u32 {
        s.avx2._mm256_movemask_epi8(v) as u32
    }
}

/// [`classify64`] in portable code: plain byte comparisons (which the compiler
/// vectorizes) and a multiply that gathers eight high bits at a time.
#[cfg(any(test, not(target_arch = "x86_64")))]
#[inline(always)]
pub(crate) fn classify64_portable(block: &[u8; 64], first: &FirstBytes) -> Masks {
    let f = first.bytes;
    let mut space = [0u8; 64];
    let mut cont = [0u8; 64];
    let mut either = [0u8; 64];
    let mut gate = [0u8; 64];
    let mut quest = [0u8; 64];
    let mut under = [0u8; 64];
    for i in 0..64 {
        let b = block[i];
        let l = b | 0x20;
        let is_start = (l.wrapping_sub(b'a') < 26) | (b == b'_') | (b >= 0x80);
        let is_cont = is_start | (b.wrapping_sub(b'0') < 10);
        let in_first = f.contains(&b) || first.shape_only(b);
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
        under[i] = if b == b'_' { 0x80 } else { 0 };
    }
    let space = gather_high_bits(&space);
    // No special byte continues an identifier, and candidates do: two gathers tell all
    // three masks apart.
    let cont = gather_high_bits(&cont);
    Masks::split(
        cont,
        gather_high_bits(&either),
        space,
        gather_high_bits(&gate),
        gather_high_bits(&quest),
        gather_high_bits(&under),
    )
}

/// Bit `i` of the result is the high bit of `f[i]` (every byte is 0 or 0x80).
#[cfg(any(test, not(target_arch = "x86_64")))]
#[inline(always)]
pub(crate) fn gather_high_bits(f: &[u8; 64]) -> u64 {
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

/// A way to compute the [`Masks`] of a block: every one gives [`classify64_portable`]'s
/// masks, except that one with [`Classify::PASSES`] leaves out what the scan passes over.
pub(crate) trait Classify {
    /// `special` holds no byte [`passed_over`], and `cand` no byte of
    /// [`FirstBytes::shapes`] without a digit after it (else both hold them all).
    const PASSES: bool;

    /// The masks of `window`'s first 64 bytes (`window[64]` is the byte after them).
    fn classify(&self, window: &[u8; 65], first: &FirstBytes) -> Masks;
}

/// [`classify64`]: the target's baseline instructions (SSE2 on x86-64).
pub(crate) struct Baseline;

impl Classify for Baseline {
    const PASSES: bool = false;

    #[inline(always)]
    fn classify(&self, window: &[u8; 65], first: &FirstBytes) -> Masks {
        match window.first_chunk::<64>() {
            Some(block) => classify64(block, first),
            None => classify64(&[b' '; 64], first),
        }
    }
}

/// [`classify64_avx2`], for code compiled with AVX2 (see [`avx2`]).
#[cfg(target_arch = "x86_64")]
pub(crate) struct Avx2(pub(crate) pulp::x86::V3);

#[cfg(target_arch = "x86_64")]
impl Classify for Avx2 {
    const PASSES: bool = true;

    #[inline(always)]
    fn classify(&self, window: &[u8; 65], first: &FirstBytes) -> Masks {
        classify64_avx2(self.0, window, first)
    }
}

/// Whether the special byte `b` starts nothing when `next` follows it (`0` where the text
/// ends; the AVX2 scan reads a space there, which no rule tells from `0`): `[` not before
/// `[`, `/` not before `/` or `*`, `?` not before `?`, `%` not before `:`, and `&`
/// ([`PASS_UNLESS`]). The scan passes over them.
#[inline(always)]
pub(crate) fn passed_over(b: u8, next: u16) -> bool {
    let (pass, n1, n2) = PASS_UNLESS[b as usize];
    pass & (next != n1) & (next != n2)
}

/// `classify`'s [`Masks`] of the 64 bytes from `base` (bytes past the end count as
/// spaces).
#[inline(always)]
pub(crate) fn block_masks(
    src: &[u8],
    base: usize,
    first: &FirstBytes,
    classify: &impl Classify,
) -> Masks {
    match src
        .get(base..base + 65)
        .and_then(|b| <&[u8; 65]>::try_from(b).ok())
    {
        Some(window) => classify.classify(window, first),
        None => {
            let mut window = [b' '; 65];
            let rest = &src[base.min(src.len())..];
            let n = rest.len().min(65);
            window[..n].copy_from_slice(&rest[..n]);
            classify.classify(&window, first)
        }
    }
}

/// Whether byte `i` lies inside a preprocessing number as the lexer reads it. Lexes
/// forward, by the lexer's rules, from the nearest earlier byte that must end a token
/// (and no earlier than `floor`, the end of the last token handled, which if after `i`
/// was an identifier).
pub(crate) fn in_number(src: &[u8], floor: usize, i: usize) -> bool {
    number_around(src, floor, i).is_some()
}

/// The end of the preprocessing number holding byte `i`, if one does (see
/// [`in_number`]).
pub(crate) fn number_around(src: &[u8], floor: usize, i: usize) -> Option<usize> {
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
pub(crate) const DIGIT_SEPARATOR: &str =
    "a `'` after a number or a name other than `L`, `u`, `U` (a digit separator in some dialects)";

/// Whether the `'` at `i` follows a byte of an identifier or preprocessing number (or a
/// `.`) other than a whole encoding prefix `L`, `u` or `U`: a digit separator in C23 and
/// C++14, a character literal in gnu17, and `u8'x'` is one character literal in C23
/// and two tokens in gnu17.
pub(crate) fn quote_after_word(src: &[u8], i: usize) -> bool {
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
pub(crate) fn trigraph_at(bytes: &[u8], i: usize) -> bool {
    bytes.get(i) == Some(&b'?')
        && bytes.get(i + 1) == Some(&b'?')
        && matches!(
            bytes.get(i + 2),
            Some(b'=' | b'/' | b'\'' | b'(' | b')' | b'!' | b'<' | b'>' | b'-')
        )
}

pub(crate) fn find_trigraph(bytes: &[u8]) -> Option<usize> {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// [`classify64_avx2`] of `block` followed by `next`, if this CPU has AVX2 (called
    /// outside a vectorized function: slower, the same result).
    fn classify_avx2_if_here(block: &[u8; 64], next: u8, first: &FirstBytes) -> Option<Masks> {
        #[cfg(target_arch = "x86_64")]
        if let Some(simd) = avx2() {
            let window: [u8; 65] = std::array::from_fn(|i| block.get(i).copied().unwrap_or(next));
            return Some(classify64_avx2(simd, &window, first));
        }
        let _ = (block, next, first);
        None
    }

    /// `masks` as a classifier that [`Classify::PASSES`] gives them: without the special
    /// bytes [`passed_over`] nor the candidates of `first`'s shapes with no digit after
    /// them (`next` follows the block), read byte by byte.
    fn passing(mut masks: Masks, block: &[u8; 64], next: u8, first: &FirstBytes) -> Masks {
        for (i, &b) in block.iter().enumerate() {
            let after = block.get(i + 1).copied().unwrap_or(next);
            if passed_over(b, u16::from(after)) {
                masks.special &= !(1 << i);
            }
            if first.shape_passed_over(b, after) {
                masks.cand &= !(1 << i);
            }
        }
        masks
    }

    #[test]
    fn a_byte_added_whole_is_no_shape() {
        let mut f = FirstBytes::default();
        f.add_scan(b'i');
        f.add_scan(b'v');
        assert!(f.shape_only(b'i') && f.shape_only(b'v') && !f.shape_only(0));
        assert!(!f.contains(b'i') && f.len == 0);
        // Added whole (a listed name starts with it): every name starting so needs a
        // look.
        f.add(b'i');
        assert!(!f.shape_only(b'i') && f.shape_only(b'v') && f.contains(b'i'));
        assert_eq!(f.bytes[..f.len], [b'i']);
        // And stays whole if added to the scan again.
        f.add_scan(b'i');
        assert!(!f.shape_only(b'i'));
        // A third shape byte has no slot: it needs a look whatever follows it, and
        // stays so when it is added to the scan again after a slot is freed.
        f.add_scan(b'x');
        f.add_scan(b'y');
        assert!(f.shape_only(b'x') && !f.shape_only(b'y'));
        assert_eq!(f.bytes[..f.len], [b'i', b'y']);
        f.add(b'x');
        f.add_scan(b'y');
        assert!(!f.shape_only(b'x') && !f.shape_only(b'y'));
        assert_eq!(f.shapes, [0, b'v']);
    }

    /// This machine runs the AVX2 scan (the bench and CI machines have it): the property
    /// below then compares it, not only the baseline one.
    #[test]
    #[cfg(target_arch = "x86_64")]
    fn this_machine_has_the_avx2_scan() {
        assert!(
            avx2().is_some(),
            "no AVX2 here: the AVX2 block scan is not checked on this machine"
        );
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(20_000))]
        /// Every block scan gives the portable one's masks (without the bytes passed over,
        /// for one that [`Classify::PASSES`]): any 64 bytes (every byte class, C-like
        /// bytes more often) and the byte after them, with up to nine first bytes (the
        /// ninth turns `all` on).
        #[test]
        fn every_block_scan_gives_the_portable_masks(
            block in proptest::collection::vec(
                proptest::prop_oneof![
                    3 => proptest::num::u8::ANY,
                    5 => proptest::sample::select(
                        b"iv_nlx09azAZ \t\n\r\x0b\x0c\0\x1f\x7f?/'\"#$%&[]\\*:.\x80\xff".to_vec()
                    ),
                ],
                64,
            ),
            next in proptest::sample::select(b"[/*?:% x\0\xff05i".to_vec()),
            firsts in proptest::collection::vec(
                (
                    proptest::bool::ANY,
                    proptest::prop_oneof![
                        proptest::num::u8::ANY,
                        proptest::sample::select(b"iv_nx0".to_vec()),
                    ],
                ),
                0..12,
            ),
        ) {
            let block: [u8; 64] = block.try_into().unwrap_or([b' '; 64]);
            // First bytes added whole or to the scan only (as shapes), in any order.
            let mut f = FirstBytes::default();
            for (whole, b) in firsts {
                if whole {
                    f.add(b);
                } else {
                    f.add_scan(b);
                }
            }
            let want = classify64_portable(&block, &f);
            proptest::prop_assert_eq!(classify64(&block, &f), want);
            if let Some(avx2) = classify_avx2_if_here(&block, next, &f) {
                proptest::prop_assert_eq!(avx2, passing(want, &block, next, &f));
            }
        }
    }

    #[test]
    fn block_scan_agrees_with_the_portable_one() {
        let mut firsts = Vec::new();
        for bytes in [
            &b""[..],
            b"iv",
            b"ivnl",
            b"ivnlx",
            b"ivnlxdaR",
            b"ivnlxdaRc",
        ] {
            let mut f = FirstBytes::default();
            for &b in bytes {
                f.add(b);
            }
            firsts.push(f);
            // `i` and `v` as shapes, as the renamer adds them, then the rest whole.
            let mut f = FirstBytes::default();
            f.add_scan(b'i');
            f.add_scan(b'v');
            for &b in bytes.get(2..).unwrap_or_default() {
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
                for next in [b' ', b'[', b'/', b'*', b'?', b':', b'7'] {
                    let want = passing(masks, block, next, f);
                    assert_eq!(want, classify_avx2_if_here(block, next, f).unwrap_or(want));
                }
                // `under` is exactly the `_` bytes.
                for (i, &b) in block.iter().enumerate() {
                    assert_eq!((masks.under >> i) & 1 == 1, b == b'_', "{b:#x}");
                }
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
}
