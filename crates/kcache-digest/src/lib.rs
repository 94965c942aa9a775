//! kcache-digest: the one digest-of-parts encoding every kcache key uses.
//!
//! A digest of parts is the SHA-256 of the parts in order, each prefixed by its length as a
//! little-endian `u64`. Because every part is length-prefixed, two different lists of parts
//! never hash the same bytes: `["ab", "c"]`, `["a", "bc"]` and `["abc"]` all differ.
//!
//! ```
//! let d = kcache_digest::digest_of_parts(&[b"ab", b"c"]);
//! assert_eq!(d.len(), 64);
//! assert_ne!(d, kcache_digest::digest_of_parts(&[b"a", b"bc"]));
//! // The same digest, one part at a time.
//! let mut parts = kcache_digest::Parts::new();
//! parts.part(b"ab");
//! parts.part(b"c");
//! assert_eq!(parts.finish_hex(), d);
//! ```
#![forbid(unsafe_code)]
#![deny(missing_docs)]

use sha2::{Digest, Sha256};

/// The length prefix of a part: its length as a little-endian `u64`.
pub fn part_len(len: usize) -> [u8; 8] {
    (len as u64).to_le_bytes()
}

/// A digest of parts built one part at a time (for parts that are not gathered first).
#[derive(Clone, Default)]
pub struct Parts(Sha256);

impl Parts {
    /// No parts yet.
    pub fn new() -> Parts {
        Parts(Sha256::new())
    }

    /// Appends `part` (its length prefix, then its bytes).
    pub fn part(&mut self, part: &[u8]) {
        self.0.update(part_len(part.len()));
        self.0.update(part);
    }

    /// The 32 bytes of the digest of the parts appended.
    pub fn finish(self) -> [u8; 32] {
        self.0.finalize().into()
    }

    /// The digest as 64 lowercase hex digits.
    pub fn finish_hex(self) -> String {
        hex::encode(self.finish())
    }
}

/// The 32 bytes of the digest of `parts`.
pub fn digest_bytes_of_parts(parts: &[&[u8]]) -> [u8; 32] {
    let mut h = Parts::new();
    for p in parts {
        h.part(p);
    }
    h.finish()
}

/// The lowercase hex SHA-256 (64 characters) of `parts`, each part prefixed by its length as
/// a little-endian `u64`.
pub fn digest_of_parts(parts: &[&[u8]]) -> String {
    hex::encode(digest_bytes_of_parts(parts))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digest_is_sha256_of_length_prefixed_parts() {
        // SHA-256 of the empty input.
        assert_eq!(
            digest_of_parts(&[]),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        // SHA-256 of eight zero bytes: one empty part.
        assert_eq!(
            digest_of_parts(&[b""]),
            "af5570f5a1810b7af78caf4bc70a660f0df51e42baf91d4de5b2328de0e83dfc"
        );
        // Worked by hand (Python's hashlib over the same bytes).
        let d = digest_of_parts(&[b"ab", b"c"]);
        assert_eq!(
            d,
            "43ee655579de01ca739b3f95c1c2d3f46d353b2c0df818064ea594506cdb2617"
        );
        assert!(
            d.bytes()
                .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
        );
        assert_ne!(d, digest_of_parts(&[b"a", b"bc"]));
        assert_ne!(d, digest_of_parts(&[b"abc"]));
        assert_ne!(digest_of_parts(&[b""]), digest_of_parts(&[b"", b""]));
    }

    #[test]
    fn parts_one_at_a_time_and_bytes_agree_with_the_hex_digest() {
        let parts: [&[u8]; 3] = [b"kcache", b"", &[0, 255, 7]];
        let mut h = Parts::new();
        for p in parts {
            h.part(p);
        }
        let bytes = digest_bytes_of_parts(&parts);
        assert_eq!(h.clone().finish(), bytes);
        assert_eq!(h.finish_hex(), digest_of_parts(&parts));
        assert_eq!(hex::encode(bytes), digest_of_parts(&parts));
        // The encoding spelled out: length as a little-endian u64, then the bytes.
        let mut flat = Vec::new();
        for p in parts {
            flat.extend_from_slice(&(p.len() as u64).to_le_bytes());
            flat.extend_from_slice(p);
        }
        assert_eq!(bytes, <[u8; 32]>::from(Sha256::digest(&flat)));
    }
}
