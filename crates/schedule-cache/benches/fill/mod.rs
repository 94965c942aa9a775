//! schedule-cache placement entries of today's key shape, and a directory filled with many of
//! them fast (the scale benches' large directories; kcache-cli's `commands_scale` includes this
//! file too). Kept with the benches, not in test-support, so test-support never depends on
//! schedule-cache (no dev-dependency cycle).
#![allow(dead_code, unreachable_pub)]

use schedule_cache::Store as _;
use std::fs;
use std::path::Path;

use schedule_cache::admin::Space;
use schedule_cache::placement::{Direction, Flip, PlacementEntry, Shipped};
use schedule_cache::{CacheKey, DiskCache, StoreOutcome};

use test_support::Rng;

/// `count` flips: flip `i` on node `i * stride + offset`, directions in turn.
pub fn flips(count: u32, stride: u32, offset: u32) -> Vec<Flip> {
    let directions = [
        Direction::Materialize,
        Direction::Inline,
        Direction::Footprint,
    ];
    (0..count)
        .map(|i| Flip {
            node: i * stride + offset,
            direction: directions[(i % 3) as usize],
        })
        .collect()
}

/// An entry of 24 flips and its key of today's shape (`<digest>-<whole>-<hints>`, 185 bytes),
/// drawn from `rng`.
pub fn entry(rng: &mut Rng) -> (CacheKey, PlacementEntry) {
    let digest = rng.hex(64);
    let hints: Vec<String> = ["b", "f", "n", "c", "p", "d", "t"]
        .iter()
        .map(|l| format!("{l}{}", rng.hex(6)))
        .collect();
    let key = CacheKey::new(&format!("{digest}-{}-{}", rng.hex(64), hints.join("_"))).expect("key");
    let entry = PlacementEntry::new(&digest, flips(24, 5, 1), Shipped::Refined);
    (key, entry)
}

/// Fills `dir` with `n` entries of [`entry`]: the first through the store (for the lock file
/// and the stamp), the rest written directly with the bytes the store writes (without its two
/// `fsync`s per entry, which would make 100,000 stores take many minutes). Returns each
/// entry's key and digest.
pub fn fill(dir: &Path, n: usize, rng: &mut Rng) -> Vec<(CacheKey, String)> {
    let mut keys = Vec::with_capacity(n);
    for i in 0..n {
        let (key, e) = entry(rng);
        if i == 0 {
            let out = DiskCache::new(dir).store(Some(&key), &e).expect("store");
            assert_eq!(out, StoreOutcome::Stored);
        } else {
            let text =
                ron::ser::to_string_pretty(&e, ron::ser::PrettyConfig::default()).expect("encode");
            fs::write(dir.join(Space::Placement.file_name(&key)), text).expect("write");
        }
        keys.push((key, e.digest.clone()));
    }
    keys
}
