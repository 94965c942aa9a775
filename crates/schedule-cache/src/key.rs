//! A validated, filename-safe cache key.

use crate::Error;
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
