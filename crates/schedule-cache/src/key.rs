//! A validated, filename-safe cache key, the components it is built from and the one encoding
//! of each component part.

use crate::Error;
use serde::{Deserialize, Serialize};
use std::fmt;

/// Longest accepted key, in bytes.
pub(crate) const MAX_KEY_LEN: usize = 200;

/// A cache key that is safe to use as a file name component.
///
/// Guarantees: non-empty, at most `MAX_KEY_LEN` bytes, only `[A-Za-z0-9_-]`,
/// and therefore never `.`, `..`, never containing `/`, and never starting with a dot.
/// The only way to build one is [`CacheKey::new`] (or deserializing, which validates the same way).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CacheKey(String);

impl CacheKey {
    /// Validates `s` as a key.
    ///
    /// # Errors
    /// [`Error::InvalidKey`] if `s` is empty, longer than `MAX_KEY_LEN` bytes, or contains
    /// any byte outside `[A-Za-z0-9_-]`.
    pub fn new(s: &str) -> Result<CacheKey, Error> {
        let bad = |reason| {
            Err(Error::InvalidKey {
                key: s.chars().take(MAX_KEY_LEN + 8).collect(),
                reason,
            })
        };
        if s.is_empty() {
            return bad("empty");
        }
        if s.len() > MAX_KEY_LEN {
            return bad("longer than 200 bytes");
        }
        if s == "." || s == ".." {
            return bad("is a relative path component");
        }
        if !s
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        {
            return bad("contains a byte outside [A-Za-z0-9_-]");
        }
        Ok(CacheKey(s.to_owned()))
    }

    /// The key text (always filename-safe).
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for CacheKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl AsRef<str> for CacheKey {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl std::str::FromStr for CacheKey {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self, Error> {
        CacheKey::new(s)
    }
}

impl serde::Serialize for CacheKey {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

impl<'de> serde::Deserialize<'de> for CacheKey {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        CacheKey::new(&s).map_err(serde::de::Error::custom)
    }
}

/// One component of a cache key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[non_exhaustive]
pub enum KeyComponent {
    /// The canonical digest of the code.
    Digest,
    /// The backend's name.
    Backend,
    /// The adopter's own schedule-format version ([`KeyInputs::schedule_format`](crate::KeyInputs::schedule_format)): changing
    /// what its saved schedule ops mean changes it, so old entries never replay.
    Format,
    /// The numerics policy (the settings entering it).
    Numerics,
    /// The codegen environment: settings entering it and the whole [`Limits`](crate::Limits) record,
    /// including the backend's own codegen tag.
    Codegen,
    /// The worker-pool signature ([`Limits::worker_pool_tag`](crate::Limits::worker_pool_tag)).
    Pool,
    /// The concrete device ([`TimingIdentity`](crate::TimingIdentity)).
    Device,
    /// The normalized timing objective and the other settings entering timing.
    Timing,
}

/// The components of every cache key, in key order. This list drives [`key_parts`](crate::key_parts).
pub const KEY_COMPONENTS: [KeyComponent; 8] = [
    KeyComponent::Digest,
    KeyComponent::Backend,
    KeyComponent::Format,
    KeyComponent::Numerics,
    KeyComponent::Codegen,
    KeyComponent::Pool,
    KeyComponent::Device,
    KeyComponent::Timing,
];

impl KeyComponent {
    /// The component's name: `"digest"`, `"backend"`, `"format"`, `"numerics"`, `"codegen"`,
    /// `"pool"`, `"device"`, `"timing"`.
    pub fn name(self) -> &'static str {
        match self {
            KeyComponent::Digest => "digest",
            KeyComponent::Backend => "backend",
            KeyComponent::Format => "format",
            KeyComponent::Numerics => "numerics",
            KeyComponent::Codegen => "codegen",
            KeyComponent::Pool => "pool",
            KeyComponent::Device => "device",
            KeyComponent::Timing => "timing",
        }
    }

    /// The letter of the component's hint in a key (empty for the digest, which leads the key
    /// whole).
    pub fn prefix(self) -> &'static str {
        match self {
            KeyComponent::Digest => "",
            KeyComponent::Backend => "b",
            KeyComponent::Format => "f",
            KeyComponent::Numerics => "n",
            KeyComponent::Codegen => "c",
            KeyComponent::Pool => "p",
            KeyComponent::Device => "d",
            KeyComponent::Timing => "t",
        }
    }
}

/// The one encoding every key part goes through: a sequence of tagged fields, each a tag byte
/// followed by its content: `S` + length (`u64`, little-endian) + bytes for a string, `N` for
/// an absent value, `U` + 8 bytes (little-endian) for an integer, `L` + count (`u64`) before
/// the items of a list. Every field says its own kind and length, so two different sequences
/// of fields never encode to the same bytes (a property test holds this): no value can mimic
/// "unset", and no field can run into its neighbour.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct PartEncoding {
    bytes: Vec<u8>,
}

impl PartEncoding {
    /// An empty encoding.
    pub(crate) fn new() -> PartEncoding {
        PartEncoding::default()
    }

    /// Appends a string field.
    pub(crate) fn str(&mut self, s: &str) -> &mut PartEncoding {
        self.bytes.push(b'S');
        self.bytes
            .extend_from_slice(&(s.len() as u64).to_le_bytes());
        self.bytes.extend_from_slice(s.as_bytes());
        self
    }

    /// Appends an optional string: `N` when absent, else the string field.
    pub(crate) fn opt(&mut self, v: Option<&str>) -> &mut PartEncoding {
        match v {
            None => {
                self.bytes.push(b'N');
                self
            }
            Some(s) => self.str(s),
        }
    }

    /// Appends an integer field.
    pub(crate) fn int(&mut self, v: u64) -> &mut PartEncoding {
        self.bytes.push(b'U');
        self.bytes.extend_from_slice(&v.to_le_bytes());
        self
    }

    /// Appends a list header: the number of items that follow.
    pub(crate) fn list(&mut self, len: usize) -> &mut PartEncoding {
        self.bytes.push(b'L');
        self.bytes.extend_from_slice(&(len as u64).to_le_bytes());
        self
    }

    /// The encoded bytes.
    #[cfg(test)]
    pub(crate) fn as_bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// The full-width SHA-256 of the encoding (64 lowercase hex digits).
    pub(crate) fn digest(&self) -> String {
        kcache_digest::digest_of_parts(&[&self.bytes])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_safe_keys() {
        for k in ["a", "abc-DEF_019", &"x".repeat(MAX_KEY_LEN)] {
            assert_eq!(CacheKey::new(k).expect("valid").as_str(), k);
        }
    }

    #[test]
    fn rejects_unsafe_keys() {
        let long = "x".repeat(MAX_KEY_LEN + 1);
        for k in [
            "", ".", "..", "a/b", "../x", "a.b", "a b", "é", "a\0", &long,
        ] {
            assert!(CacheKey::new(k).is_err(), "{k:?} accepted");
        }
    }

    #[test]
    fn deserialize_validates() {
        assert!(ron::from_str::<CacheKey>("\"../etc\"").is_err());
        let k: CacheKey = ron::from_str("\"ok-1\"").expect("valid");
        assert_eq!(k.as_str(), "ok-1");
    }
}
