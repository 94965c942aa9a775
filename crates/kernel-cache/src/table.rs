//! The concurrent map under [`KernelCache`](crate::KernelCache): keys held inline (a
//! kernel key as the 32 bytes its 64 hex digits spell), values inline, in shards of a
//! hash table each behind a read-write lock, and a batch lookup that takes each shard's
//! lock once and looks all of its keys up before copying any value out.
//!
//! Why: at a million entries, a hit costs what it touches in memory (pages and lines
//! spread over hundreds of MB), not what it computes. A key held inline needs no
//! allocation of its own to compare against; a batch whose lookups run without an
//! atomic operation between them lets the processor overlap their cache and TLB misses,
//! where one shard lock and one reference count per key serialize them.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

use hashbrown::HashTable;
use hashbrown::hash_table::Entry;

use crate::cache::{Resolved, Slot};

/// A key as the map holds it. A string of exactly 64 lowercase hex digits (what
/// [`kernel_key`](crate::kernel_key) returns) is held as the 32 bytes it spells; any
/// other string (other length, an uppercase digit, anything not hex) verbatim. Every
/// string has exactly one form, and the digits-to-bytes step is one-to-one on the
/// strings it accepts, so two keys are equal exactly when their strings are: always
/// compared in full, never a prefix or a hash of them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Key {
    /// The 32 bytes of a 64-lowercase-hex-digit string.
    Digest([u8; 32]),
    /// Any other string, shared with the group records that name it.
    Text(Arc<str>),
}

/// A key to look up, borrowed: the form [`Key::as_ref`] gives a held key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum KeyRef<'a> {
    /// The 32 bytes of a 64-lowercase-hex-digit string.
    Digest([u8; 32]),
    /// Any other string.
    Text(&'a str),
}

/// `b` in every byte of a word.
const fn lanes(b: u8) -> u64 {
    0x0101_0101_0101_0101 * b as u64
}

/// The bit 7 of each byte of a word.
const HIGH: u64 = lanes(0x80);

/// The 32 bytes `s` spells if it is exactly 64 lowercase hex digits.
///
/// Eight digits at a time, as one 64-bit word (a lookup decodes every key it is given,
/// so this is on the hit path): per byte, bit 7 of `at_least(lo)` says whether the
/// byte (its low seven bits) is at least `lo`; adding `0x80 - lo` to a byte below
/// `0x80` carries into no other byte. A byte with bit 7 set is no digit.
fn digest(s: &str) -> Option<[u8; 32]> {
    let digits: &[u8; 64] = s.as_bytes().try_into().ok()?;
    let mut out = [0_u8; 32];
    let mut not_hex = 0_u64;
    for (four, eight) in out.chunks_exact_mut(4).zip(digits.chunks_exact(8)) {
        let mut word = [0_u8; 8];
        word.copy_from_slice(eight);
        let w = u64::from_le_bytes(word);
        let low7 = w & !HIGH;
        let at_least = |lo: u8| (low7 + lanes(0x80 - lo)) & HIGH;
        let is_digit = at_least(b'0') & !at_least(b'9' + 1);
        let is_letter = at_least(b'a') & !at_least(b'f' + 1);
        not_hex |= (w & HIGH) | (HIGH & !(is_digit | is_letter));
        // Each byte's value: its low four bits, plus 9 for a letter ('a' is 0x61).
        let v = (w & lanes(0x0F)) + (is_letter >> 7) * 9;
        // Pairs of bytes (first digit, second) into one byte each, in order.
        let v = ((v & 0x00FF_00FF_00FF_00FF) << 4) | ((v >> 8) & 0x00FF_00FF_00FF_00FF);
        let v = (v & 0x0000_00FF_0000_00FF) | ((v >> 8) & 0x0000_FF00_0000_FF00);
        let v = (v & 0xFFFF) | ((v >> 16) & 0xFFFF_0000);
        four.copy_from_slice(&v.to_le_bytes()[..4]);
    }
    (not_hex == 0).then_some(out)
}

impl<'a> KeyRef<'a> {
    /// The form of `s`.
    pub(crate) fn parse(s: &'a str) -> Self {
        match digest(s) {
            Some(bytes) => KeyRef::Digest(bytes),
            None => KeyRef::Text(s),
        }
    }
}

impl Key {
    /// The form of `s`, keeping its allocation when it is held verbatim.
    pub(crate) fn from_string(s: String) -> Key {
        match digest(&s) {
            Some(bytes) => Key::Digest(bytes),
            None => Key::Text(Arc::from(s)),
        }
    }

    /// This key, borrowed, to compare with a [`KeyRef`].
    pub(crate) fn as_ref(&self) -> KeyRef<'_> {
        match self {
            Key::Digest(bytes) => KeyRef::Digest(*bytes),
            Key::Text(s) => KeyRef::Text(s),
        }
    }
}

/// One entry of the map.
pub(crate) struct Stored<P> {
    pub(crate) key: Key,
    pub(crate) slot: Slot<P>,
}

/// The sharded map: each key lives in the shard its hash names.
pub(crate) struct Table<P> {
    shards: Box<[RwLock<HashTable<Stored<P>>>]>,
    /// SipHash under keys random per process and per table, as `std`'s maps: a caller
    /// who chooses keys (or digits that look like a digest) cannot choose collisions.
    hasher: RandomState,
    /// `64 - log2(shards.len())`: the shard is taken from the hash bits just below the
    /// seven that the shard's table reads as a tag.
    shift: u32,
}

/// Reads a shard whose data stays consistent across a panic of a lock holder (no
/// critical section below runs code that can leave a table half-changed).
fn read<T>(lock: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    lock.read().unwrap_or_else(|e| e.into_inner())
}

/// Writes a shard (see [`read`]).
fn write<T>(lock: &RwLock<T>) -> RwLockWriteGuard<'_, T> {
    lock.write().unwrap_or_else(|e| e.into_inner())
}

impl<P> Table<P> {
    /// An empty map with four shards per available thread (at least four), as
    /// `dashmap` sizes its own.
    pub(crate) fn new() -> Self {
        let threads = std::thread::available_parallelism().map_or(1, usize::from);
        let count = (threads * 4).next_power_of_two().clamp(4, 1 << 16);
        Table {
            shards: (0..count).map(|_| RwLock::new(HashTable::new())).collect(),
            hasher: RandomState::new(),
            shift: 64 - count.trailing_zeros(),
        }
    }

    fn hash(&self, key: KeyRef<'_>) -> u64 {
        let mut h = self.hasher.build_hasher();
        match key {
            KeyRef::Digest(bytes) => {
                h.write_u8(0);
                h.write(&bytes);
            }
            KeyRef::Text(s) => {
                h.write_u8(1);
                h.write(s.as_bytes());
            }
        }
        h.finish()
    }

    fn shard(&self, hash: u64) -> usize {
        ((hash << 7) >> self.shift) as usize
    }

    /// The value held under `key`.
    pub(crate) fn get(&self, key: &str) -> Option<Resolved<P>> {
        let key = KeyRef::parse(key);
        let hash = self.hash(key);
        let table = read(&self.shards[self.shard(hash)]);
        table
            .find(hash, |e| e.key.as_ref() == key)
            .map(|e| e.slot.value.clone())
    }

    /// The value held under each of `keys`, in order: one read lock per shard
    /// touched, every key of that shard looked up before any value is copied out.
    pub(crate) fn get_many<'k>(
        &self,
        keys: impl Iterator<Item = &'k str>,
    ) -> Vec<Option<Resolved<P>>> {
        let probes: Vec<(u64, KeyRef<'k>)> = keys
            .map(|k| {
                let key = KeyRef::parse(k);
                (self.hash(key), key)
            })
            .collect();
        let mut out: Vec<Option<Resolved<P>>> = (0..probes.len()).map(|_| None).collect();
        // The probes' indices ordered by shard (a counting sort): `order[ends[s - 1]..
        // ends[s]]` are shard `s`'s.
        let mut ends = vec![0_usize; self.shards.len()];
        for &(hash, _) in &probes {
            ends[self.shard(hash)] += 1;
        }
        let mut next = 0;
        for end in ends.iter_mut() {
            next += *end;
            *end = next - *end;
        }
        let mut order = vec![0_usize; probes.len()];
        for (i, &(hash, _)) in probes.iter().enumerate() {
            let at = &mut ends[self.shard(hash)];
            order[*at] = i;
            *at += 1;
        }
        let mut start = 0;
        for (s, &end) in ends.iter().enumerate() {
            let ours = &order[start..end];
            start = end;
            if ours.is_empty() {
                continue;
            }
            let table = read(&self.shards[s]);
            // Loads only, so the misses of different keys overlap; then the copies
            // (each one a reference-count increment, which the processor does not
            // overlap with other memory operations).
            let found: Vec<(usize, &Stored<P>)> = ours
                .iter()
                .filter_map(|&i| {
                    let (hash, key) = probes[i];
                    table.find(hash, |e| e.key.as_ref() == key).map(|e| (i, e))
                })
                .collect();
            for &(i, e) in &found {
                out[i] = Some(e.slot.value.clone());
            }
        }
        out
    }

    /// Holds `slot` under `key`, replacing what was held. Returns the replaced slot and
    /// the key as held (a cheap copy: bytes, or the shared string).
    pub(crate) fn insert(&self, key: Key, slot: Slot<P>) -> (Option<Slot<P>>, Key) {
        let hash = self.hash(key.as_ref());
        let mut table = write(&self.shards[self.shard(hash)]);
        let entry = table.entry(
            hash,
            |e| e.key.as_ref() == key.as_ref(),
            |e| self.hash(e.key.as_ref()),
        );
        match entry {
            Entry::Occupied(mut held) => {
                let held = held.get_mut();
                (
                    Some(std::mem::replace(&mut held.slot, slot)),
                    held.key.clone(),
                )
            }
            Entry::Vacant(vacant) => {
                vacant.insert(Stored {
                    key: key.clone(),
                    slot,
                });
                (None, key)
            }
        }
    }

    /// Removes `key` if its group is `group`; returns the removed slot (dropped by the
    /// caller, after the shard's lock is released).
    pub(crate) fn remove_if_group(&self, key: &Key, group: u64) -> Option<Slot<P>> {
        let hash = self.hash(key.as_ref());
        let mut table = write(&self.shards[self.shard(hash)]);
        match table.find_entry(hash, |e| e.key.as_ref() == key.as_ref()) {
            Ok(held) if held.get().slot.group == group => Some(held.remove().0.slot),
            _ => None,
        }
    }

    /// The number of keys held.
    pub(crate) fn len(&self) -> usize {
        self.shards.iter().map(|s| read(s).len()).sum()
    }

    /// Whether no key is held.
    pub(crate) fn is_empty(&self) -> bool {
        self.shards.iter().all(|s| read(s).is_empty())
    }

    /// Removes and returns every entry (shard by shard).
    pub(crate) fn drain(&self) -> Vec<Stored<P>> {
        let mut out = Vec::new();
        for shard in &self.shards {
            let table = std::mem::take(&mut *write(shard));
            out.extend(table);
        }
        out
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const HEX: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    fn value(tag: &str) -> Slot<String> {
        Slot {
            value: Resolved::new(Arc::new(tag.to_string()), tag),
            group: 0,
        }
    }

    #[test]
    fn only_64_lowercase_hex_digits_are_held_as_bytes() {
        let KeyRef::Digest(bytes) = KeyRef::parse(HEX) else {
            panic!("a kernel key is a digest");
        };
        assert_eq!(hex::encode(bytes), HEX, "the bytes spell the key back");
        for text in [
            HEX.to_uppercase(),
            HEX.replacen('a', "A", 1),
            HEX[..63].to_string(),
            format!("{HEX}0"),
            HEX.replacen('f', "g", 1),
            HEX.replacen('0', " ", 1),
            // 64 bytes, not 64 hex digits.
            format!("{}é", &HEX[..62]),
            String::new(),
            "k0".to_string(),
        ] {
            assert_eq!(KeyRef::parse(&text), KeyRef::Text(&text), "{text:?}");
            assert!(matches!(Key::from_string(text.clone()), Key::Text(ref s) if **s == *text));
        }
    }

    /// Every byte value at every position of a kernel key: the key is a digest exactly
    /// when the byte is a lowercase hex digit, and then its bytes are `hex`'s decoding.
    #[test]
    fn digest_agrees_with_hex_on_every_byte_at_every_position() {
        for at in 0..64 {
            for byte in 0_u8..=255 {
                let mut bytes = HEX.as_bytes().to_vec();
                bytes[at] = byte;
                let Ok(text) = String::from_utf8(bytes) else {
                    continue;
                };
                let lower_hex = byte.is_ascii_digit() || (b'a'..=b'f').contains(&byte);
                match KeyRef::parse(&text) {
                    KeyRef::Digest(d) => {
                        assert!(lower_hex, "{text:?}");
                        assert_eq!(d.to_vec(), hex::decode(&text).unwrap());
                    }
                    KeyRef::Text(t) => assert!(!lower_hex && t == text, "{text:?}"),
                }
            }
            // A two-byte character at `at`, keeping 64 bytes.
            let text = format!("{}é{}", &HEX[..at.min(62)], &HEX[at.min(62) + 2..]);
            assert_eq!(text.len(), 64);
            assert_eq!(KeyRef::parse(&text), KeyRef::Text(&text));
        }
    }

    #[test]
    fn keys_differing_in_one_digit_or_in_case_are_different_keys() {
        let t = Table::new();
        let mut keys = vec![HEX.to_string(), HEX.to_uppercase()];
        for at in 0..64 {
            for with in ["0", "f", "F"] {
                let mut k = HEX.to_string();
                k.replace_range(at..=at, with);
                keys.push(k);
            }
        }
        keys.sort();
        keys.dedup();
        for k in &keys {
            t.insert(Key::from_string(k.clone()), value(k));
        }
        assert_eq!(t.len(), keys.len());
        for k in &keys {
            assert_eq!(&*t.get(k).unwrap().symbol, k.as_str());
        }
        let many = t.get_many(keys.iter().map(String::as_str));
        for (k, got) in keys.iter().zip(many) {
            assert_eq!(&*got.unwrap().symbol, k.as_str());
        }
    }

    /// Strings over every byte class a key can hold: lowercase and uppercase hex,
    /// other ASCII, multi-byte characters, at lengths around 64; and near-copies of a
    /// few digests (one digit changed, case changed, cut, extended).
    fn any_key() -> impl Strategy<Value = String> {
        let digests = prop::sample::select(vec![
            HEX.to_string(),
            HEX.chars().rev().collect::<String>(),
            "f".repeat(64),
        ]);
        prop_oneof![
            "[0-9a-f]{64}",
            "[0-9a-fA-F]{64}",
            "[0-9a-f]{62,66}",
            "\\PC{0,70}",
            (digests.clone(), 0_usize..64, "[0-9a-fA-Fg-z]").prop_map(|(d, at, c)| {
                let mut d = d;
                d.replace_range(at..=at, &c);
                d
            }),
            (digests.clone(), 0_usize..64).prop_map(|(d, at)| {
                let mut d = d;
                d.replace_range(at..=at, &d[at..=at].to_uppercase());
                d
            }),
            (digests, 0_usize..64, "[0-9a-f]{0,2}")
                .prop_map(|(d, cut, tail)| { format!("{}{tail}", &d[..cut]) }),
        ]
    }

    proptest! {
        /// Two strings are one key exactly when they are equal, and the form of a
        /// string is lossless.
        #[test]
        fn forms_are_one_to_one(a in any_key(), b in any_key()) {
            prop_assert_eq!(KeyRef::parse(&a) == KeyRef::parse(&b), a == b);
            match KeyRef::parse(&a) {
                KeyRef::Digest(bytes) => prop_assert_eq!(hex::encode(bytes), a.clone()),
                KeyRef::Text(s) => prop_assert_eq!(s, a.as_str()),
            }
            let held = Key::from_string(a.clone());
            prop_assert_eq!(held.as_ref(), KeyRef::parse(&a));
        }

        /// The table answers as a `HashMap<String, _>` does, one key at a time and by
        /// batch, for held keys and for keys it never held.
        #[test]
        fn table_matches_a_plain_map(
            held in prop::collection::vec(any_key(), 0..40),
            asked in prop::collection::vec(any_key(), 0..40),
            removed in prop::collection::vec(any::<prop::sample::Index>(), 0..10),
        ) {
            let t = Table::new();
            let mut model = std::collections::HashMap::new();
            for (n, k) in held.iter().enumerate() {
                let tag = format!("{n}");
                let mut slot = value(&tag);
                slot.group = n as u64;
                let (previous, as_held) = t.insert(Key::from_string(k.clone()), slot);
                prop_assert_eq!(as_held, Key::from_string(k.clone()));
                let before = model.insert(k.clone(), (n as u64, tag));
                prop_assert_eq!(previous.map(|s| s.group), before.map(|b| b.0));
            }
            for r in removed {
                if held.is_empty() {
                    break;
                }
                let k = r.get(&held);
                let group = model.get(k).map(|m| m.0);
                // The wrong group removes nothing; the right one removes the key.
                prop_assert!(t.remove_if_group(&Key::from_string(k.clone()), u64::MAX).is_none());
                let gone = t.remove_if_group(&Key::from_string(k.clone()), group.unwrap_or(0));
                prop_assert_eq!(gone.map(|s| s.group), group);
                model.remove(k);
            }
            prop_assert_eq!(t.len(), model.len());
            let all: Vec<&str> = asked.iter().chain(&held).map(String::as_str).collect();
            let many = t.get_many(all.iter().copied());
            prop_assert_eq!(many.len(), all.len());
            for (k, got) in all.iter().zip(many) {
                let want = model.get(*k).map(|m| m.1.clone());
                prop_assert_eq!(got.map(|v| v.symbol.to_string()), want.clone(), "{:?}", k);
                prop_assert_eq!(t.get(k).map(|v| v.symbol.to_string()), want, "{:?}", k);
            }
            let mut drained: Vec<String> = t.drain().into_iter().map(|e| e.slot.value.symbol.to_string()).collect();
            drained.sort();
            let mut want: Vec<String> = model.values().map(|m| m.1.clone()).collect();
            want.sort();
            prop_assert_eq!(drained, want);
            prop_assert!(t.is_empty());
        }
    }
}
