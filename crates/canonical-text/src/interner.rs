//! The renamer's name table: names borrowed from the text, looked up by a key read in
//! whole words ([`name_key`]), in an open-addressing table whose lookups are bounded
//! ([`PROBE_LIMIT`]).

use std::cell::Cell;

/// How a distinct name is treated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Slot {
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
pub(crate) fn load(buf: &[u8], s: usize, l: usize) -> u64 {
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
pub(crate) struct NameKey {
    pub(crate) w0: u64,
    pub(crate) w1: u64,
    pub(crate) hash: u64,
}

pub(crate) const K1: u64 = 0x9E37_79B9_7F4A_7C15;
pub(crate) const K2: u64 = 0xC2B2_AE3D_27D4_EB4F;

/// The key of `buf[s..e]` (`s < e <= buf.len()`); may read (and mask off) bytes of `buf`
/// past `e`, which is what makes it fast.
#[inline(always)]
pub(crate) fn name_key(buf: &[u8], s: usize, e: usize) -> NameKey {
    /// For a name of `l` bytes (`l` at most 16), the masks of its bytes in the first
    /// two words (a table: no branch on the length).
    const LOW: [(u64, u64); 17] = {
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
pub(crate) fn whole_name_key(name: &[u8]) -> NameKey {
    let len = name.len();
    if len >= 16 {
        return name_key(name, 0, len);
    }
    // A short name's two words read from the name itself, in loads that overlap rather
    // than past its end (copying it into a zero-padded buffer first made each key wait
    // for the copy's stores).
    let (w0, w1) = short_words(name);
    let h = (w0 ^ (len as u64).rotate_left(40)).wrapping_mul(K1) ^ w1.wrapping_mul(K2);
    NameKey { w0, w1, hash: h }
}

/// The first two little-endian words of `name` (shorter than 16 bytes), zero-padded:
/// [`name_key`]'s `w0` and `w1`.
#[inline(always)]
fn short_words(name: &[u8]) -> (u64, u64) {
    let len = name.len();
    let word = |at: usize| -> u64 {
        let mut a = [0u8; 8];
        a.copy_from_slice(&name[at..at + 8]);
        u64::from_le_bytes(a)
    };
    let half = |at: usize| -> u64 {
        let mut a = [0u8; 4];
        a.copy_from_slice(&name[at..at + 4]);
        u64::from(u32::from_le_bytes(a))
    };
    match len {
        // Bytes 8.. of the name are the last 8 bytes shifted down past those before 8.
        9..=15 => (word(0), word(len - 8) >> (8 * (16 - len))),
        8 => (word(0), 0),
        // Two 4-byte loads that overlap (agreeing where they do).
        4..=7 => (half(0) | half(len - 4) << (8 * (len - 4)), 0),
        1..=3 => {
            let b = |i: usize| u64::from(name[i]) << (8 * i);
            (b(0) | b(len / 2) | b(len - 1), 0)
        }
        _ => (0, 0),
    }
}

#[derive(Clone, Copy)]
pub(crate) struct Entry<'a> {
    pub(crate) w0: u64,
    pub(crate) w1: u64,
    pub(crate) name: &'a [u8],
    pub(crate) slot: Slot,
}

/// How many slots one lookup examines at most. Linear probing at a load of at most
/// one half examines a handful; a lookup that needs more meets names that collide, by
/// construction in all but astronomically rare cases, and renaming is refused
/// ([`Refusal::NameCollisions`](crate::Refusal::NameCollisions)) rather than spending time quadratic in the names.
pub(crate) const PROBE_LIMIT: usize = 256;

/// A lookup examined [`PROBE_LIMIT`] slots without an answer.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Collisions;

/// The largest name table a thread keeps for its next call (in slots: 80 KiB), so that
/// a call that met many names does not hold their memory for good.
const SPARE_SLOTS: usize = 2048;

thread_local! {
    /// The table of this thread's last [`Interner`], emptied, for the next one: a call
    /// allocates and frees none (a table of a 1 KiB kernel is 2.5 KiB, above glibc's
    /// per-thread cache), and its memory is warm.
    static SPARE: Cell<Vec<Option<Entry<'static>>>> = const { Cell::new(Vec::new()) };
}

/// An empty table for entries of another lifetime, in the same allocation: the standard
/// library collects a `vec::IntoIter` mapped to elements of the same size in place
/// (and would allocate anew if it did not; either way no entry crosses, since there is
/// none).
fn retyped<'b>(mut table: Vec<Option<Entry<'_>>>) -> Vec<Option<Entry<'b>>> {
    table.clear();
    table.into_iter().map(|_| None).collect()
}

impl Drop for Interner<'_> {
    /// Hands the emptied table to the thread's next [`Interner`] (see [`SPARE`]).
    fn drop(&mut self) {
        let table = std::mem::take(&mut self.table);
        if table.capacity() <= SPARE_SLOTS {
            // Gone in the thread's teardown: the table is freed instead.
            let _ = SPARE.try_with(|spare| spare.set(retyped(table)));
        }
    }
}

/// An open-addressing table from names (borrowed from the text) to their slots.
pub(crate) struct Interner<'a> {
    pub(crate) table: Vec<Option<Entry<'a>>>,
    pub(crate) len: usize,
    /// `64 - log2(table.len())`: a hash shifted right by it is an index.
    pub(crate) shift: u32,
}

impl<'a> Interner<'a> {
    /// A table that holds `n` names without growing (at least 64 slots).
    pub(crate) fn with_capacity(n: usize) -> Self {
        // At most half full: `grow` runs when `len * 2` passes the length.
        let slots = (2 * n + 2).next_power_of_two().max(64);
        // (`try_with`: during the thread's teardown the spare may be gone already.)
        let mut table = retyped(SPARE.try_with(Cell::take).unwrap_or_default());
        table.resize(slots, None);
        Interner {
            table,
            len: 0,
            shift: 64 - slots.trailing_zeros(),
        }
    }

    /// The index holding `name`, or the free index where it would go; or
    /// [`Collisions`] after [`PROBE_LIMIT`] slots.
    #[inline(always)]
    pub(crate) fn probe(&self, name: &[u8], k: NameKey) -> Result<(usize, bool), Collisions> {
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
    pub(crate) fn get(&self, name: &[u8], k: NameKey) -> Result<Option<Slot>, Collisions> {
        Ok(match self.probe(name, k)? {
            (i, true) => self.table[i].map(|e| e.slot),
            _ => None,
        })
    }

    /// Sets the slot of `name` (inserting it if new).
    #[inline(never)]
    pub(crate) fn set(&mut self, name: &'a [u8], k: NameKey, slot: Slot) -> Result<(), Collisions> {
        let (i, found) = self.probe(name, k)?;
        self.set_at(i, found, name, k, slot);
        Ok(())
    }

    /// [`Self::set`] given what [`Self::probe`] said.
    #[inline(always)]
    pub(crate) fn set_at(&mut self, i: usize, found: bool, name: &'a [u8], k: NameKey, slot: Slot) {
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

    pub(crate) fn grow(&mut self) {
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

    pub(crate) fn entries(&self) -> impl Iterator<Item = &Entry<'a>> {
        self.table.iter().flatten()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Keys a kernel from a thread-local's destructor, after the spare table may be
    /// gone: no panic, the same key as anywhere else.
    #[test]
    fn a_call_in_a_thread_teardown_needs_no_spare() {
        struct KeysOnDrop(std::sync::mpsc::Sender<String>);
        impl Drop for KeysOnDrop {
            fn drop(&mut self) {
                let c = crate::canonical_kernel("i1 = i2;", None, &crate::Names::new());
                let _ = self.0.send(c.key(&[]));
            }
        }
        thread_local! {
            static LATE: std::cell::RefCell<Option<KeysOnDrop>> = const { std::cell::RefCell::new(None) };
        }
        let (tx, rx) = std::sync::mpsc::channel();
        let worker = std::thread::spawn(move || {
            // `LATE` is made (and its destructor registered) before the spare table, so
            // it is destroyed after it: thread-local destructors run in reverse order.
            LATE.with(|late| *late.borrow_mut() = Some(KeysOnDrop(tx)));
            let _ = crate::canonical_kernel("i1;", None, &crate::Names::new());
        });
        assert!(worker.join().is_ok());
        let want = crate::canonical_kernel("i1 = i2;", None, &crate::Names::new()).key(&[]);
        assert_eq!(rx.recv().ok(), Some(want));
    }

    #[test]
    fn a_thread_reuses_its_last_table_emptied() {
        let text = b"i1 i2 i3";
        let mut a = Interner::with_capacity(5);
        for (s, e) in [(0, 2), (3, 5), (6, 8)] {
            let name = &text[s..e];
            assert!(a.set(name, whole_name_key(name), Slot::Verbatim).is_ok());
        }
        let at = a.table.as_ptr() as usize;
        drop(a);
        // The next table is the same allocation, with no entry left in it.
        let b = Interner::with_capacity(5);
        assert_eq!(b.table.as_ptr() as usize, at);
        assert_eq!(b.table.len(), 64);
        assert!(b.table.iter().all(Option::is_none));
        assert!(matches!(b.get(b"i1", whole_name_key(b"i1")), Ok(None)));
        drop(b);
        // A larger one than that is allocated, and kept only up to `SPARE_SLOTS`.
        let big = Interner::with_capacity(SPARE_SLOTS);
        assert!(big.table.len() > SPARE_SLOTS);
        drop(big);
        let c = Interner::with_capacity(5);
        assert!(c.table.capacity() <= SPARE_SLOTS);
        assert_eq!(c.table.len(), 64);
    }
}
