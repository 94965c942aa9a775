//! Helpers shared by kcache-cli's integration tests.
#![allow(dead_code, unreachable_pub)]

use std::process::{Command, Output};

use schedule_cache::CacheKey;
use schedule_cache::placement::{Direction, Flip, PlacementEntry, Shipped};

/// The digest of every test entry (the first key component).
pub const DIGEST: &str = "ab12cd34";

/// A key `DIGEST-<rest>`.
pub fn key(rest: &str) -> CacheKey {
    CacheKey::new(&format!("{DIGEST}-{rest}")).expect("key")
}

/// A placement entry for [`DIGEST`] with one flip, of node `n`.
pub fn entry(n: u32) -> PlacementEntry {
    PlacementEntry::new(
        DIGEST,
        vec![Flip {
            node: n,
            direction: Direction::Footprint,
        }],
        Shipped::Refined,
    )
}

/// Runs the real `kcache` binary with `args` (its logging off) to its end.
pub fn kcache(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kcache"))
        .args(args)
        .env("KCACHE_LOG", "off")
        .output()
        .expect("run kcache")
}
