//! The in-memory hasher of a table's map: one multiply per word, seeded per table.
//!
//! The keys a table is meant for are already SHA-256 digests ([`crate::Key`] hashes as
//! a single word of its digest), so a cryptographic map hash (std's SipHash) would
//! only cost time. The seed is random per table, so the bucket layout of one table
//! says nothing about another's. This hash never leaves the process and is never
//! part of a cache key; the stable hashes are in [`crate::key`].

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};

/// Odd constants from the fractional digits of pi (as in foldhash).
const MUL: u64 = 0x243f_6a88_85a3_08d3;
const LEN: u64 = 0x1319_8a2e_0370_7344;

/// Multiplies two words as a 128-bit product and folds the halves together, so every
/// input bit reaches the high and the low bits of the result.
#[inline(always)]
fn folded_multiply(a: u64, b: u64) -> u64 {
    let p = u128::from(a) * u128::from(b);
    (p as u64) ^ ((p >> 64) as u64)
}

/// Builds [`MapHasher`]s with the table's seed.
#[derive(Clone, Debug)]
pub(crate) struct MapHasherBuilder {
    seed: u64,
}

impl MapHasherBuilder {
    /// A builder with a fresh random seed.
    pub(crate) fn random() -> Self {
        let mut h = RandomState::new().build_hasher();
        h.write_u64(LEN);
        // An odd seed is never zero, so `seed ^ word` never collapses a zero word.
        MapHasherBuilder {
            seed: h.finish() | 1,
        }
    }
}

impl BuildHasher for MapHasherBuilder {
    type Hasher = MapHasher;

    #[inline(always)]
    fn build_hasher(&self) -> MapHasher {
        MapHasher { state: self.seed }
    }
}

/// A fast, non-cryptographic hasher for keys that are already well distributed.
#[derive(Clone, Debug)]
pub(crate) struct MapHasher {
    state: u64,
}

impl MapHasher {
    #[inline(always)]
    fn mix(&mut self, word: u64) {
        self.state = folded_multiply(self.state ^ word, MUL);
    }
}

impl Hasher for MapHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for chunk in &mut chunks {
            let mut word = [0u8; 8];
            word.copy_from_slice(chunk);
            self.mix(u64::from_le_bytes(word));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut word = [0u8; 8];
            word[..rest.len()].copy_from_slice(rest);
            self.mix(u64::from_le_bytes(word));
        }
        self.mix(LEN ^ bytes.len() as u64);
    }

    #[inline(always)]
    fn write_u8(&mut self, i: u8) {
        self.mix(u64::from(i));
    }

    #[inline(always)]
    fn write_u16(&mut self, i: u16) {
        self.mix(u64::from(i));
    }

    #[inline(always)]
    fn write_u32(&mut self, i: u32) {
        self.mix(u64::from(i));
    }

    #[inline(always)]
    fn write_u64(&mut self, i: u64) {
        self.mix(i);
    }

    #[inline(always)]
    fn write_usize(&mut self, i: usize) {
        self.mix(i as u64);
    }

    #[inline(always)]
    fn finish(&self) -> u64 {
        // A second fold spreads the last word's bits over the high bits too (dashmap
        // picks the shard, and hashbrown its tag, from the high bits).
        folded_multiply(self.state, LEN)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;
    use std::hash::BuildHasher;

    #[test]
    fn one_word_spreads_over_high_and_low_bits() {
        let b = MapHasherBuilder::random();
        // Sequential small integers must not share low bits (bucket index) or high
        // bits (dashmap's shard and hashbrown's tag).
        let hashes: Vec<u64> = (0u64..4096).map(|i| b.hash_one(i)).collect();
        let low: HashSet<u64> = hashes.iter().map(|h| h & 0xfff).collect();
        let high: HashSet<u64> = hashes.iter().map(|h| h >> 52).collect();
        assert!(low.len() > 2000, "low bits: {} distinct", low.len());
        assert!(high.len() > 2000, "high bits: {} distinct", high.len());
    }

    #[test]
    fn byte_strings_differing_in_length_or_tail_hash_apart() {
        let b = MapHasherBuilder::random();
        let inputs: [&[u8]; 5] = [b"", b"\0", b"\0\0", b"abcdefgh", b"abcdefgh\0"];
        let hashes: HashSet<u64> = inputs.iter().map(|s| b.hash_one(s)).collect();
        assert_eq!(hashes.len(), inputs.len());
    }

    #[test]
    fn seeds_differ_between_tables() {
        let seeds: HashSet<u64> = (0..8).map(|_| MapHasherBuilder::random().seed).collect();
        assert!(seeds.len() > 1);
    }
}
