//! SHA-256 fed straight to `sha2`'s compression function ([`BlockHasher`]): a key starts
//! from a state computed once (after the key's domain block) and hashes its parts
//! without a hasher to clone and with one buffer of its own. Held equal to
//! `sha2::Sha256` over the same bytes by the property test below.

use sha2::block_api::compress256;

/// SHA-256's initial hash value (FIPS 180-4, 5.3.3).
const IV: [u32; 8] = [
    0x6a09_e667,
    0xbb67_ae85,
    0x3c6e_f372,
    0xa54f_f53a,
    0x510e_527f,
    0x9b05_688c,
    0x1f83_d9ab,
    0x5be0_cd19,
];

/// The SHA-256 state after `block`, the message's first 64 bytes.
pub(crate) fn state_after(block: &[u8; 64]) -> [u32; 8] {
    let mut state = IV;
    compress256(&mut state, std::slice::from_ref(block));
    state
}

/// A SHA-256 hash in progress: the state after the whole blocks so far, the bytes of the
/// block not yet whole, and how many bytes were hashed in all.
pub(crate) struct BlockHasher {
    state: [u32; 8],
    buf: [u8; 64],
    len: usize,
    total: u64,
}

impl BlockHasher {
    /// Goes on from `state`, the state after the first `blocks` whole blocks.
    #[inline(always)]
    pub(crate) fn resume(state: [u32; 8], blocks: u64) -> Self {
        BlockHasher {
            state,
            buf: [0; 64],
            len: 0,
            total: 64 * blocks,
        }
    }

    /// Hashes `bytes` next: whole blocks straight from `bytes`, the rest through the
    /// buffer.
    #[inline(always)]
    pub(crate) fn update(&mut self, mut bytes: &[u8]) {
        self.total += bytes.len() as u64;
        if self.len > 0 {
            let room = 64 - self.len;
            if bytes.len() < room {
                self.buf[self.len..self.len + bytes.len()].copy_from_slice(bytes);
                self.len += bytes.len();
                return;
            }
            let (head, rest) = bytes.split_at(room);
            self.buf[self.len..].copy_from_slice(head);
            compress256(&mut self.state, std::slice::from_ref(&self.buf));
            self.len = 0;
            bytes = rest;
        }
        let (blocks, tail) = bytes.as_chunks::<64>();
        if !blocks.is_empty() {
            compress256(&mut self.state, blocks);
        }
        self.buf[..tail.len()].copy_from_slice(tail);
        self.len = tail.len();
    }

    /// The digest: the padding (a `1` bit, zeros, the length in bits, big-endian), then
    /// the state's words big-endian.
    #[inline(always)]
    pub(crate) fn finish(mut self) -> [u8; 32] {
        let mut last = [0u8; 128];
        last[..self.len].copy_from_slice(&self.buf[..self.len]);
        last[self.len] = 0x80;
        // The length fits after the `1` bit in this block, or takes one more.
        let end = if self.len + 9 <= 64 { 64 } else { 128 };
        last[end - 8..end].copy_from_slice(&(self.total.wrapping_mul(8)).to_be_bytes());
        let (blocks, _) = last[..end].as_chunks::<64>();
        compress256(&mut self.state, blocks);
        let mut out = [0u8; 32];
        for (bytes, word) in out.chunks_exact_mut(4).zip(self.state) {
            bytes.copy_from_slice(&word.to_be_bytes());
        }
        out
    }
}

/// `bytes` as lowercase hex.
pub(crate) fn hex_lower(bytes: &[u8]) -> String {
    /// Each byte's two hex digits.
    static PAIRS: [[u8; 2]; 256] = {
        const DIGITS: &[u8; 16] = b"0123456789abcdef";
        let mut t = [[0u8; 2]; 256];
        let mut b = 0;
        while b < 256 {
            t[b] = [DIGITS[b >> 4], DIGITS[b & 15]];
            b += 1;
        }
        t
    };
    let mut out = String::with_capacity(2 * bytes.len());
    // A digest at a time through a stack buffer (one UTF-8 check per 32 bytes).
    for chunk in bytes.chunks(32) {
        let mut buf = [0u8; 64];
        for (pair, &b) in buf.chunks_exact_mut(2).zip(chunk) {
            pair.copy_from_slice(&PAIRS[usize::from(b)]);
        }
        // Only ASCII digits and letters were written.
        out.push_str(std::str::from_utf8(&buf[..2 * chunk.len()]).unwrap_or_default());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use sha2::{Digest, Sha256};

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(5000))]
        /// `BlockHasher` gives `sha2::Sha256`'s digest of the same bytes, however they
        /// are cut into updates (empty ones, ones within a block, ones across several),
        /// from the initial state and from the state after a first block; every length
        /// of the last block, so both paddings.
        #[test]
        fn block_hasher_is_sha256(
            first in proptest::collection::vec(proptest::num::u8::ANY, 64),
            pieces in proptest::collection::vec(
                proptest::collection::vec(proptest::num::u8::ANY, 0..150),
                0..8,
            ),
            resumed in proptest::bool::ANY,
        ) {
            let mut h = if resumed {
                let block: [u8; 64] = first.clone().try_into().unwrap_or([0; 64]);
                BlockHasher::resume(state_after(&block), 1)
            } else {
                BlockHasher::resume(IV, 0)
            };
            let mut want = Sha256::new();
            if resumed {
                want.update(&first);
            }
            for p in &pieces {
                h.update(p);
                want.update(p);
            }
            proptest::prop_assert_eq!(h.finish(), <[u8; 32]>::from(want.finalize()));
        }
    }

    #[test]
    fn every_length_around_the_padding_boundary() {
        for n in 0..200 {
            let bytes: Vec<u8> = (0..n).map(|i| i as u8).collect();
            let mut h = BlockHasher::resume(IV, 0);
            h.update(&bytes);
            let want: [u8; 32] = Sha256::digest(&bytes).into();
            assert_eq!(h.finish(), want, "{n} bytes");
        }
    }
}
