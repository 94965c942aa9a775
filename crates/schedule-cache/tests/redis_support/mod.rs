//! Helpers shared by the `redis_*` integration tests: a private `redis-server` per test, raw
//! access to it, and self-checking entries.
#![allow(dead_code, unreachable_pub)]

use std::time::Duration;

use schedule_cache::placement::{Direction, Flip, PlacementEntry, Shipped};
use schedule_cache::{CacheKey, RedisStore};

/// The digest every test entry uses (the first key component).
pub const DIGEST: &str = "5eed0000bb";

/// A key `DIGEST-<rest>`.
pub fn key(rest: &str) -> CacheKey {
    CacheKey::new(&format!("{DIGEST}-{rest}")).expect("valid key")
}

/// A private `redis-server` per test (test-support's), killed and reaped on drop.
pub use test_support::redis::RedisServer as Server;

/// What the Redis store tests do with a server besides starting it.
pub trait ServerExt {
    /// A store on this server with short timeouts and a short retry pause.
    fn store(&self) -> RedisStore;
    /// A raw connection for inspecting and corrupting the server's keys.
    fn raw(&self) -> redis::Connection;
}

impl ServerExt for Server {
    fn store(&self) -> RedisStore {
        RedisStore::open(&self.url())
            .expect("url")
            .with_timeouts(Duration::from_millis(500), Duration::from_secs(2))
            .with_retry_after(Duration::from_millis(50))
    }

    fn raw(&self) -> redis::Connection {
        redis::Client::open(self.url())
            .expect("url")
            .get_connection_with_timeout(Duration::from_secs(2))
            .expect("connect")
    }
}

/// A placement entry of `flips` flips that encodes `(writer, seq)` in every flip, so a reader
/// can tell whether an entry is one some writer produced whole ([`decode`]).
pub fn payload(writer: u32, seq: u32, flips: u32) -> PlacementEntry {
    let dirs = [
        Direction::Materialize,
        Direction::Inline,
        Direction::Footprint,
    ];
    let flips = (0..flips)
        .map(|i| Flip {
            node: writer << 24 | (seq & 0xffff) << 8 | (i & 0xff),
            direction: dirs[(i % 3) as usize],
        })
        .collect();
    let shipped = [Shipped::A, Shipped::B, Shipped::Refined][(seq % 3) as usize];
    PlacementEntry::new(DIGEST, flips, shipped)
}

/// `(writer, seq, flips)` if `e` is exactly `payload(writer, seq, flips)`.
pub fn decode(e: &PlacementEntry) -> Option<(u32, u32, u32)> {
    let first = e.flips.first()?.node;
    let (writer, seq) = (first >> 24, (first >> 8) & 0xffff);
    let n = u32::try_from(e.flips.len()).ok()?;
    (payload(writer, seq, n) == *e).then_some((writer, seq, n))
}
