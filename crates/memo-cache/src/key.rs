//! Cache keys: wide digests, built from any caller's parts with [`KeyBuilder`] (or
//! [`Key::of_parts`] from raw bytes).
//!
//! Every key is SHA-256 over an explicit byte encoding defined below, so it is identical
//! across processes, runs, platforms and compiler versions (std's `Hash` promises none of
//! that). Changing an encoding changes every key built with it; domain tags carry a
//! version (`…/v1`) to bump when that happens.
//!
//! # Encoding
//!
//! A digest is SHA-256 over its *parts*, each written as its length (u64,
//! little-endian) followed by its bytes ([`Key::of_parts`]). The first part is a domain
//! tag naming the kind of key, so keys of different kinds never coincide. A [`Value`] is
//! encoded with a one-byte tag: `0` null; `1` bool (one byte); `2` int (i64 LE); `3`
//! float (its IEEE bits, u64 LE); `4` text (u64 LE length, UTF-8); `5` list (u64 LE
//! count, items); `6` map (u64 LE count, then per entry the key as text without tag,
//! then the value, keys ascending); `7` secret (as text). Each encoding is
//! self-delimiting, so two different values never encode alike.
//!
//! A [`KeyBuilder`] writes its tag as the first part (raw bytes), then one part per
//! call, each starting with a one-byte kind, so a part of one kind never equals a part
//! of another: a value ([`KeyBuilder::value`] and its shorthands [`text`](KeyBuilder::text),
//! [`int`](KeyBuilder::int), [`float`](KeyBuilder::float), …) is its value encoding
//! (kinds `0`–`7` above); `8` bytes (u64 LE length, bytes); `9` unsigned (u64 LE); `10`
//! fields (u64 LE count, then each pair's name as text and its value, pairs ordered by
//! name); `11` key (its 32 bytes); `12` tenant (as text).
//!
//! A keyword list (the fields of [`KeyBuilder::fields`], of an LM input, the options of
//! an LM configuration) is written pair by pair, the name as text then the value, the
//! pairs ordered by name (bytewise) and, among pairs of one name, **in the order
//! given**. So pairs of different names may come in any order, while a name given twice
//! keeps the order of its values: a consumer that lets the last value win reads
//! `[("t", 1), ("t", 2)]` and `[("t", 2), ("t", 1)]` differently, and so do the keys.
//!
//! `tests/data/pin_keys.py` recomputes pinned keys of each kind from this description
//! alone (Python's `hashlib`); `tests/hashing.rs` checks the crate against them.

use std::fmt;
use std::hash::{Hash, Hasher};

use kcache_digest::Parts;

use crate::value::{Secret, Value};

/// A cache key: a 256-bit SHA-256 digest.
///
/// Keys are wide so that two different calls never share an entry in practice. By the
/// birthday bound, `n` distinct calls collide with probability at most
/// `n² / 2^(b+1)` for a `b`-bit key: for `n = 2^32` calls that is about `2^-65` with
/// 128 bits, and about `2^-193` with the full 256 bits kept here. (A 32-bit hash, as
/// in the system this crate replaces, already collides with probability ½ after
/// about 77,000 calls.)
///
/// Equality compares all 32 bytes. `Hash` (for in-memory maps only) feeds just the
/// first 8 bytes, which are uniformly distributed for every key made by SHA-256 (all
/// of this crate's keys); keys built by hand with [`Key::from_bytes`] should be
/// digests too.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Key([u8; 32]);

impl Key {
    /// The key whose digest is `bytes` (e.g. one read back from [`Key::as_bytes`]).
    pub const fn from_bytes(bytes: [u8; 32]) -> Self {
        Key(bytes)
    }

    /// The 32 bytes of the digest.
    pub const fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// The digest as 64 lowercase hex digits (also what `Display` prints).
    pub fn to_hex(&self) -> String {
        hex::encode(self.0)
    }

    /// The SHA-256 digest of `parts`, each length-prefixed as described in the
    /// [module documentation](self), so `["ab", "c"]` and `["a", "bc"]` differ. Start
    /// with a tag of your own (e.g. `b"my-app/metric/v1"`) so your keys never coincide
    /// with another kind's. This is the workspace's digest of parts
    /// (`kcache_digest::digest_of_parts`, which returns it as hex), as raw bytes.
    pub fn of_parts(parts: &[&[u8]]) -> Self {
        Key(kcache_digest::digest_bytes_of_parts(parts))
    }
}

impl Hash for Key {
    #[inline]
    fn hash<H: Hasher>(&self, state: &mut H) {
        let mut word = [0u8; 8];
        word.copy_from_slice(&self.0[..8]);
        state.write_u64(u64::from_le_bytes(word));
    }
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Key({})", self.to_hex())
    }
}

/// Builds a [`Key`] from a caller's own parts: a domain tag, then any sequence of
/// typed parts, each changing the key.
///
/// Guarantees (each shown by `tests/hashing.rs`):
/// - **Every part counts, in order.** Parts are length-prefixed and typed, so
///   `.text("ab").text("c")`, `.text("a").text("bc")` and `.text("c").text("ab")` are three
///   keys, and a part of one kind never equals a part of another (`.int(1)`,
///   `.uint(1)`, `.float(1.0)`, `.text("1")`, `.bytes(b"1")` are five keys).
/// - **Floats are bit-exact.** `0.0` and `-0.0` are different parts, as are NaNs with
///   different payloads: what a computation can tell apart, the key tells apart.
/// - **Maps are sorted.** [`fields`](KeyBuilder::fields) orders `(name, value)` pairs by
///   name, so a `HashMap`'s iteration order never changes the key; a name given twice
///   keeps the order of its values. A [`Value::Map`] is sorted by construction.
/// - **Tenants are kept apart.** [`tenant`](KeyBuilder::tenant) adds a part of its own
///   kind: keys of two tenants never coincide, nor does a tenant's key with a key that has
///   no tenant. The tenant is a [`Secret`] (an API key, a user id): it enters only SHA-256
///   and is never printed.
/// - **Stable.** The encoding (module docs) is fixed: the same parts give the same key in
///   every process, run and platform.
///
/// What the builder cannot know is whether you gave it *every* part that changes the
/// result: the table answers any call with an equal key, so a part left out is a wrong
/// answer, not a miss.
///
/// ```
/// use std::collections::HashMap;
/// use memo_cache::{KeyBuilder, Secret, Value};
///
/// let sizes: HashMap<&str, Value> = [("m", Value::Int(64)), ("n", Value::Int(128))].into();
/// let key = |tile: u32, tenant: &str| {
///     KeyBuilder::new("my-tuner/measurement/v1")
///         .tenant(&Secret::new(tenant))
///         .text("matmul")
///         .uint(tile.into())
///         .float(0.5)
///         .fields(sizes.iter().map(|(k, v)| (*k, v)))
///         .finish()
/// };
/// assert_eq!(key(32, "team-a"), key(32, "team-a"));
/// assert_ne!(key(32, "team-a"), key(64, "team-a"));
/// assert_ne!(key(32, "team-a"), key(32, "team-b"));
/// ```
#[derive(Clone)]
pub struct KeyBuilder {
    hasher: Parts,
    scratch: Vec<u8>,
}

/// The kinds of [`KeyBuilder`] parts beyond the value tags `0`–`7`.
const PART_BYTES: u8 = 8;
const PART_UINT: u8 = 9;
const PART_FIELDS: u8 = 10;
const PART_KEY: u8 = 11;
const PART_TENANT: u8 = 12;

impl KeyBuilder {
    /// A builder whose first part is `tag`: name the kind of key and its version (e.g.
    /// `"my-app/measurement/v1"`) so your keys never coincide with another kind's. With no
    /// more parts, [`finish`](KeyBuilder::finish) is `Key::of_parts(&[tag.as_bytes()])`.
    pub fn new(tag: &str) -> KeyBuilder {
        let mut b = KeyBuilder {
            hasher: Parts::new(),
            scratch: Vec::new(),
        };
        b.part(tag.as_bytes());
        b
    }

    fn part(&mut self, part: &[u8]) {
        self.hasher.part(part);
    }

    fn scratch_part(mut self, write: impl FnOnce(&mut Vec<u8>)) -> KeyBuilder {
        let mut scratch = std::mem::take(&mut self.scratch);
        scratch.clear();
        write(&mut scratch);
        self.part(&scratch);
        self.scratch = scratch;
        self
    }

    /// The tenant the result belongs to (credentials, a user or team id): keys of
    /// different tenants never coincide, and none equals a key built without a tenant.
    pub fn tenant(self, tenant: &Secret) -> KeyBuilder {
        self.scratch_part(|out| {
            out.push(PART_TENANT);
            encode_text(out, tenant.expose());
        })
    }

    /// A value (its encoding in the module docs; a map's entries are sorted by key,
    /// floats are compared by their bits).
    pub fn value(self, value: &Value) -> KeyBuilder {
        self.scratch_part(|out| encode_value(out, value))
    }

    /// A string (the part of `Value::Text`).
    pub fn text(self, text: &str) -> KeyBuilder {
        self.scratch_part(|out| {
            out.push(4);
            encode_text(out, text);
        })
    }

    /// A signed integer (the part of `Value::Int`).
    pub fn int(self, int: i64) -> KeyBuilder {
        self.scratch_part(|out| encode_value(out, &Value::Int(int)))
    }

    /// An unsigned integer (a part of its own kind: `uint(1)` is not `int(1)`).
    pub fn uint(self, uint: u64) -> KeyBuilder {
        self.scratch_part(|out| {
            out.push(PART_UINT);
            out.extend_from_slice(&uint.to_le_bytes());
        })
    }

    /// A float, by its bits (the part of `Value::Float`): `0.0` is not `-0.0`.
    pub fn float(self, float: f64) -> KeyBuilder {
        self.scratch_part(|out| encode_value(out, &Value::Float(float)))
    }

    /// A boolean (the part of `Value::Bool`).
    pub fn bool(self, b: bool) -> KeyBuilder {
        self.scratch_part(|out| encode_value(out, &Value::Bool(b)))
    }

    /// Raw bytes (a part of its own kind, length-prefixed).
    pub fn bytes(self, bytes: &[u8]) -> KeyBuilder {
        self.scratch_part(|out| {
            out.push(PART_BYTES);
            encode_len(out, bytes.len());
            out.extend_from_slice(bytes);
        })
    }

    /// Another key (a kernel's key, an earlier [`KeyBuilder`]'s result) as one part.
    pub fn key(self, key: &Key) -> KeyBuilder {
        self.scratch_part(|out| {
            out.push(PART_KEY);
            out.extend_from_slice(key.as_bytes());
        })
    }

    /// `(name, value)` pairs as one part, sorted by name (bytewise): the iteration order of
    /// a map never changes the key; every name and value does. Pairs of one name keep the
    /// order given (a consumer that lets the last value win reads them differently).
    pub fn fields<'a>(self, fields: impl IntoIterator<Item = (&'a str, &'a Value)>) -> KeyBuilder {
        let pairs = sorted_pairs(fields);
        self.scratch_part(|out| {
            out.push(PART_FIELDS);
            encode_len(out, pairs.len());
            for (_, enc) in &pairs {
                out.extend_from_slice(enc);
            }
        })
    }

    /// The key of the tag and every part given, in order.
    pub fn finish(&self) -> Key {
        Key(self.hasher.clone().finish())
    }
}

impl fmt::Debug for KeyBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The parts may hold secrets; the hasher's state shows nothing useful anyway.
        f.write_str("KeyBuilder { .. }")
    }
}

/// Encodes each pair as name-then-value and sorts by name, keeping the given order of
/// the pairs of one name (a stable sort).
pub(crate) fn sorted_pairs<'a>(
    fields: impl IntoIterator<Item = (&'a str, &'a Value)>,
) -> Vec<(&'a str, Vec<u8>)> {
    let mut pairs: Vec<(&str, Vec<u8>)> = fields
        .into_iter()
        .map(|(name, value)| {
            let mut enc = Vec::new();
            encode_text(&mut enc, name);
            encode_value(&mut enc, value);
            (name, enc)
        })
        .collect();
    pairs.sort_by(|a, b| a.0.cmp(b.0));
    pairs
}

pub(crate) fn encode_len(out: &mut Vec<u8>, len: usize) {
    out.extend_from_slice(&(len as u64).to_le_bytes());
}

pub(crate) fn encode_text(out: &mut Vec<u8>, s: &str) {
    encode_len(out, s.len());
    out.extend_from_slice(s.as_bytes());
}

pub(crate) fn encode_map(out: &mut Vec<u8>, map: &std::collections::BTreeMap<String, Value>) {
    encode_len(out, map.len());
    for (k, v) in map {
        encode_text(out, k);
        encode_value(out, v);
    }
}

pub(crate) fn encode_value(out: &mut Vec<u8>, value: &Value) {
    match value {
        Value::Null => out.push(0),
        Value::Bool(b) => out.extend_from_slice(&[1, u8::from(*b)]),
        Value::Int(i) => {
            out.push(2);
            out.extend_from_slice(&i.to_le_bytes());
        }
        Value::Float(f) => {
            out.push(3);
            out.extend_from_slice(&f.to_bits().to_le_bytes());
        }
        Value::Text(s) => {
            out.push(4);
            encode_text(out, s);
        }
        Value::List(items) => {
            out.push(5);
            encode_len(out, items.len());
            for item in items {
                encode_value(out, item);
            }
        }
        Value::Map(map) => {
            out.push(6);
            encode_map(out, map);
        }
        Value::Secret(secret) => {
            out.push(7);
            encode_text(out, secret.expose());
        }
    }
}
