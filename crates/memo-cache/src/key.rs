//! Cache keys: wide digests, and the stable hashes that build them from an input, an
//! LM configuration and a predictor state.
//!
//! Every hash here is SHA-256 over an explicit byte encoding defined below, so it is
//! identical across processes, runs, platforms and compiler versions (std's `Hash`
//! promises none of that). Changing the encoding changes every key; the domain tags
//! carry a version (`…/v2`) to bump when that happens.
//!
//! # Encoding
//!
//! A digest is SHA-256 over its *parts*, each written as its length (u64,
//! little-endian) followed by its bytes. The first part is a domain tag naming the
//! hash, so keys of different kinds never coincide. A [`Value`] is encoded with a
//! one-byte tag: `0` null; `1` bool (one byte); `2` int (i64 LE); `3` float (its IEEE
//! bits, u64 LE); `4` text (u64 LE length, UTF-8); `5` list (u64 LE count, items);
//! `6` map (u64 LE count, then per entry the key as text without tag, then the
//! value, keys ascending); `7` secret (as text). Each encoding is self-delimiting,
//! so two different values never encode alike.
//!
//! A keyword list (the fields of an input, the options of an LM configuration) is
//! one part per `(name, value)` pair, the name as text then the value, the pairs
//! ordered by name (bytewise) and, among pairs of one name, **in the order given**.
//! So pairs of different names may come in any order, while a name given twice keeps
//! the order of its values: a consumer that lets the last value win reads
//! `[("t", 1), ("t", 2)]` and `[("t", 2), ("t", 1)]` differently, and so do the keys.
//!
//! # Versions
//!
//! `input/v1` and `lm-config/v1` sorted the pairs of one name by their encoding, so a
//! name's values given in two orders shared a key; `v2` keeps their order (the other
//! two tags are unchanged: their encodings did not change).

use std::fmt;
use std::hash::{Hash, Hasher};

use sha2::{Digest, Sha256};

use crate::call::{Demo, LmConfig, PredictorState, Value};

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
/// of this crate's hashes); keys built by hand with [`Key::from_bytes`] should be
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
    /// (`canonical_text::digest_of_parts`, which returns it as hex), as raw bytes.
    pub fn of_parts(parts: &[&[u8]]) -> Self {
        let mut h = Sha256::new();
        for part in parts {
            h.update((part.len() as u64).to_le_bytes());
            h.update(part);
        }
        Key(h.finalize().into())
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

const INPUT_TAG: &[u8] = b"memo-cache/input/v2";
const LM_CONFIG_TAG: &[u8] = b"memo-cache/lm-config/v2";
const PREDICTOR_TAG: &[u8] = b"memo-cache/predictor-state/v1";
const CALL_TAG: &[u8] = b"memo-cache/call/v1";

/// The hash of an input: its `(field name, value)` pairs, in any order of names.
///
/// The pairs are sorted by name before hashing, so the iteration order of a `HashMap`
/// or the order of a list of pairs of distinct names never changes the key; every
/// name and every value does. A name given more than once counts each time and keeps
/// the order of its values (the sort is stable): `[("t", &a), ("t", &b)]` and
/// `[("t", &b), ("t", &a)]` are different keys, as a consumer that lets the last
/// value win reads them differently.
pub fn input_hash<'a>(fields: impl IntoIterator<Item = (&'a str, &'a Value)>) -> Key {
    let pairs = sorted_pairs(fields);
    let mut parts: Vec<&[u8]> = Vec::with_capacity(pairs.len() + 1);
    parts.push(INPUT_TAG);
    parts.extend(pairs.iter().map(|(_, enc)| enc.as_slice()));
    Key::of_parts(&parts)
}

/// The hash of an LM configuration.
///
/// The model and the API key are always included, so tenants with different
/// credentials never share a key; the options are sorted by name, so the order of
/// options of different names does not matter, while an option given twice keeps the
/// order of its values (`temperature` 0.0 then 0.7 is not 0.7 then 0.0: a client that
/// lets the last value win sends different requests). The secret enters only
/// SHA-256: it is in no output.
pub fn lm_config_hash(config: &LmConfig) -> Key {
    let mut model = Vec::new();
    encode_text(&mut model, &config.model);
    let mut api_key = Vec::new();
    match &config.api_key {
        None => api_key.push(0),
        Some(secret) => {
            api_key.push(1);
            encode_text(&mut api_key, secret.expose());
        }
    }
    let pairs = sorted_pairs(config.options.iter().map(|(k, v)| (k.as_str(), v)));
    let mut parts: Vec<&[u8]> = Vec::with_capacity(pairs.len() + 3);
    parts.extend([LM_CONFIG_TAG, &model, &api_key]);
    parts.extend(pairs.iter().map(|(_, enc)| enc.as_slice()));
    Key::of_parts(&parts)
}

/// The hash of a predictor's state: its signature, instructions and demos.
///
/// The demo strategy is left out (by the time the LM is called it has already
/// produced concrete demos), and the demos are hashed as a set with multiplicity, so
/// their order does not matter; every field of every demo does.
pub fn predictor_state_hash(state: &PredictorState) -> Key {
    let mut signature = Vec::new();
    encode_text(&mut signature, &state.signature);
    let mut instructions = Vec::new();
    encode_text(&mut instructions, &state.instructions);
    let mut demos: Vec<Vec<u8>> = state.demos.iter().map(encode_demo).collect();
    demos.sort_unstable();
    let mut parts: Vec<&[u8]> = Vec::with_capacity(demos.len() + 3);
    parts.extend([PREDICTOR_TAG, &signature, &instructions]);
    parts.extend(demos.iter().map(Vec::as_slice));
    Key::of_parts(&parts)
}

/// The key of one LM call: which LM, which predictor state, which input.
pub fn call_key(lm_config: &Key, predictor_state: &Key, input: &Key) -> Key {
    Key::of_parts(&[
        CALL_TAG,
        lm_config.as_bytes(),
        predictor_state.as_bytes(),
        input.as_bytes(),
    ])
}

/// Encodes each pair as name-then-value and sorts by name, keeping the given order of
/// the pairs of one name (a stable sort).
fn sorted_pairs<'a>(
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

fn encode_demo(demo: &Demo) -> Vec<u8> {
    let mut out = Vec::new();
    encode_map(&mut out, &demo.inputs);
    encode_map(&mut out, &demo.outputs);
    out
}

fn encode_len(out: &mut Vec<u8>, len: usize) {
    out.extend_from_slice(&(len as u64).to_le_bytes());
}

fn encode_text(out: &mut Vec<u8>, s: &str) {
    encode_len(out, s.len());
    out.extend_from_slice(s.as_bytes());
}

fn encode_map(out: &mut Vec<u8>, map: &std::collections::BTreeMap<String, Value>) {
    encode_len(out, map.len());
    for (k, v) in map {
        encode_text(out, k);
        encode_value(out, v);
    }
}

fn encode_value(out: &mut Vec<u8>, value: &Value) {
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
