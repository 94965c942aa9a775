//! The digest every identity and key tag is computed with.
//!
//! Same framing as `canonical_text::digest_of_parts` (SHA-256 over each part prefixed by its
//! length as a little-endian u64, hex encoded); to be replaced by a call to it once that crate
//! is published in this workspace, with a test pinning that both agree.

use sha2::{Digest, Sha256};

/// Hex SHA-256 of length-prefixed parts: different part lists never hash the same bytes.
pub(crate) fn digest_of_parts(parts: &[&[u8]]) -> String {
    let mut h = Sha256::new();
    for p in parts {
        h.update((p.len() as u64).to_le_bytes());
        h.update(p);
    }
    hex::encode(h.finalize())
}

#[cfg(test)]
mod tests {
    #[test]
    fn framing_separates_part_boundaries() {
        let d = |p: &[&[u8]]| super::digest_of_parts(p);
        assert_ne!(d(&[b"ab", b"c"]), d(&[b"a", b"bc"]));
        assert_ne!(d(&[b"abc"]), d(&[b"ab", b"c"]));
        assert_eq!(d(&[]).len(), 64);
        // SHA-256 of the 8-byte little-endian length 0 (one empty part).
        assert_eq!(
            d(&[b""]),
            "af5570f5a1810b7af78caf4bc70a660f0df51e42baf91d4de5b2328de0e83dfc"
        );
    }
}
