//! The concurrent map under [`KernelCache`](crate::KernelCache): keys held inline (a
//! kernel key as the 32 bytes its 64 hex digits spell), values inline, in shards of a
//! hash table each behind a read-write lock, and a batch lookup that read-locks each
//! shard it needs once and looks every key up before copying any value out.
//!
//! Why: at a million entries, a hit costs what it touches in memory (pages and lines
//! spread over hundreds of MB), not what it computes. A key held inline needs no
//! allocation of its own to compare against; a batch whose lookups run without an
//! atomic operation between them lets the processor overlap their cache and TLB misses,
//! where one shard lock and one reference count per key serialize them.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::sync::{Arc, OnceLock, RwLock, RwLockReadGuard, RwLockWriteGuard};

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

/// The 32 bytes `s` spells if it is exactly 64 lowercase hex digits. Every lookup
/// decodes its key, so this is on the hit path: on x86-64, SSE2 (part of its baseline,
/// through `safe_arch`) decodes 16 digits at a time; elsewhere a table does one.
fn digest(s: &str) -> Option<[u8; 32]> {
    let digits: &[u8; 64] = s.as_bytes().try_into().ok()?;
    #[cfg(target_arch = "x86_64")]
    return digest_sse2(digits);
    #[cfg(not(target_arch = "x86_64"))]
    return digest_portable(digits);
}

/// [`digest`] of 64 bytes, one digit at a time.
#[cfg(any(test, not(target_arch = "x86_64")))]
fn digest_portable(digits: &[u8; 64]) -> Option<[u8; 32]> {
    let value = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    };
    let mut out = [0_u8; 32];
    for (byte, pair) in out.iter_mut().zip(digits.chunks_exact(2)) {
        *byte = (value(pair[0])? << 4) | value(pair[1])?;
    }
    Some(out)
}

/// [`digest`] of 64 bytes, 16 at a time: per byte, `c - '0'` at most 9 (unsigned) is a
/// decimal digit, `c - 'a'` at most 5 a letter; every byte must be one of them. Each
/// pair of values becomes one byte (`first << 4 | second` in a 16-bit lane, then the
/// lanes packed to bytes).
#[cfg(target_arch = "x86_64")]
fn digest_sse2(digits: &[u8; 64]) -> Option<[u8; 32]> {
    use safe_arch::{
        add_i8_m128i, bitand_m128i, bitor_m128i, cmp_eq_mask_i8_m128i, m128i, min_u8_m128i,
        move_mask_i8_m128i, pack_i16_to_u8_m128i, set_splat_i8_m128i, set_splat_i16_m128i,
        shl_imm_u16_m128i, shr_imm_u16_m128i, sub_i8_m128i,
    };
    let splat = |b: u8| set_splat_i8_m128i(b as i8);
    let mut all_hex = true;
    // 16 digits: their values in pairs, one 16-bit lane per output byte.
    let mut pairs = |chunk: &[u8]| {
        let mut a = [0_u8; 16];
        a.copy_from_slice(chunk);
        let v = m128i::from(a);
        let digit = sub_i8_m128i(v, splat(b'0'));
        let letter = sub_i8_m128i(v, splat(b'a'));
        let is_digit = cmp_eq_mask_i8_m128i(min_u8_m128i(digit, splat(9)), digit);
        let is_letter = cmp_eq_mask_i8_m128i(min_u8_m128i(letter, splat(5)), letter);
        all_hex &= move_mask_i8_m128i(bitor_m128i(is_digit, is_letter)) == 0xFFFF;
        let value = bitor_m128i(
            bitand_m128i(is_digit, digit),
            bitand_m128i(is_letter, add_i8_m128i(letter, splat(10))),
        );
        bitor_m128i(
            bitand_m128i(shl_imm_u16_m128i::<4>(value), set_splat_i16_m128i(0xF0)),
            shr_imm_u16_m128i::<8>(value),
        )
    };
    let mut out = [0_u8; 32];
    for (half, digits) in out.chunks_exact_mut(16).zip(digits.chunks_exact(32)) {
        let (first, second) = (pairs(&digits[..16]), pairs(&digits[16..]));
        half.copy_from_slice(&<[u8; 16]>::from(pack_i16_to_u8_m128i(first, second)));
    }
    all_hex.then_some(out)
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

/// One shard: its lock and table on cache lines of their own, so a lock taken on one
/// shard does not take the line another shard's readers read.
#[repr(align(128))]
struct Shard<P>(RwLock<HashTable<Stored<P>>>);

impl<P> std::ops::Deref for Shard<P> {
    type Target = RwLock<HashTable<Stored<P>>>;
    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

/// The sharded map: each key lives in the shard its hash names.
pub(crate) struct Table<P> {
    shards: Box<[Shard<P>]>,
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
        // Asked once per process (it reads the scheduler's affinity and cgroup limits).
        static SHARDS: OnceLock<usize> = OnceLock::new();
        let count = *SHARDS.get_or_init(|| {
            let threads = std::thread::available_parallelism().map_or(1, usize::from);
            threads
                .saturating_mul(4)
                .clamp(4, 1 << 16)
                .next_power_of_two()
        });
        Table {
            shards: (0..count)
                .map(|_| Shard(RwLock::new(HashTable::new())))
                .collect(),
            hasher: RandomState::new(),
            shift: 64 - count.trailing_zeros(),
        }
    }

    /// The key's bytes, hashed (a digest and a string of the same bytes may hash alike:
    /// equality, not the hash, tells keys apart).
    fn hash(&self, key: KeyRef<'_>) -> u64 {
        let mut h = self.hasher.build_hasher();
        match key {
            KeyRef::Digest(bytes) => h.write(&bytes),
            KeyRef::Text(s) => h.write(s.as_bytes()),
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

    /// The value held under each of `keys`, in order, as one batch: each shard holding
    /// any of the keys is read-locked once (all of them in shard order, then released
    /// together: a writer holds one shard at a time, so this cannot deadlock), and
    /// every key is looked up before any value is copied out.
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
        let mut needed = vec![false; self.shards.len()];
        for &(hash, _) in &probes {
            needed[self.shard(hash)] = true;
        }
        let guards: Vec<Option<RwLockReadGuard<'_, HashTable<Stored<P>>>>> = self
            .shards
            .iter()
            .zip(needed)
            .map(|(shard, needed)| needed.then(|| read(shard)))
            .collect();
        // Loads only, so the misses of different keys overlap; then the copies (each
        // one a reference-count increment, which the processor does not overlap with
        // other memory operations).
        let found: Vec<Option<&Stored<P>>> = probes
            .iter()
            .map(|&(hash, key)| {
                guards[self.shard(hash)]
                    .as_ref()
                    .and_then(|table| table.find(hash, |e| e.key.as_ref() == key))
            })
            .collect();
        let out = found
            .iter()
            .map(|e| e.map(|e| e.slot.value.clone()))
            .collect();
        drop(found);
        drop(guards);
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

    /// Removes every entry. Each shard's table is taken out under its lock and dropped
    /// after it (a value's drop may unload a program), without gathering the entries.
    pub(crate) fn clear(&self) {
        for shard in &self.shards {
            let table = std::mem::take(&mut *write(shard));
            drop(table);
        }
    }

    /// Removes and returns every entry (shard by shard).
    #[cfg(test)]
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
                let digits: &[u8; 64] = text.as_bytes().try_into().unwrap();
                assert_eq!(digest(&text), digest_portable(digits), "{text:?}");
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

    /// Batch lookups on two threads while a third inserts and removes across every
    /// shard: no deadlock (a batch holds several shards' read locks at once), and every
    /// answer is the value of its own key (each value names its key).
    #[test]
    fn batches_and_writers_at_once_never_cross_keys() {
        let t = Arc::new(Table::new());
        let keys: Vec<String> = (0..256_u32)
            .map(|i| {
                if i % 4 == 3 {
                    format!("text-{i}")
                } else {
                    format!("{:064x}", u128::from(i) * 0x9E37_79B9_7F4A_7C15)
                }
            })
            .collect();
        let done = std::sync::atomic::AtomicBool::new(false);
        std::thread::scope(|s| {
            s.spawn(|| {
                for round in 0..200_u64 {
                    for k in &keys {
                        let mut slot = value(k);
                        slot.group = round;
                        t.insert(Key::from_string(k.clone()), slot);
                    }
                    for k in keys.iter().step_by(3) {
                        drop(t.remove_if_group(&Key::from_string(k.clone()), round));
                    }
                }
                done.store(true, std::sync::atomic::Ordering::Relaxed);
            });
            for _ in 0..2 {
                s.spawn(|| {
                    while !done.load(std::sync::atomic::Ordering::Relaxed) {
                        let got = t.get_many(keys.iter().rev().map(String::as_str));
                        for (k, v) in keys.iter().rev().zip(got) {
                            if let Some(v) = v {
                                assert_eq!(&*v.symbol, k.as_str());
                            }
                        }
                    }
                });
            }
        });
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
