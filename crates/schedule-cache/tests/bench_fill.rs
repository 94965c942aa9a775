//! The benches' directory fill (`benches/fill`) writes entries the store reads back as it
//! stored them (a test of the bench helper; it lived in test-support before).

#[path = "../benches/fill/mod.rs"]
mod fill;

use fill::fill;
use schedule_cache::placement::PlacementEntry;
use schedule_cache::{CacheKey, DiskCache, Lookup, Store as _};
use test_support::Rng;

/// Entries written directly read back through the store like the one it stored.
#[test]
fn a_filled_directory_reads_back_through_the_store() {
    let tmp = tempfile::tempdir().expect("tmp");
    let keys = fill(tmp.path(), 20, &mut Rng(3));
    let cache = DiskCache::new(tmp.path());
    for (key, digest) in &keys {
        let found = cache.probe::<PlacementEntry>(Some(key), digest);
        assert!(matches!(found, Lookup::Hit(_)), "{key}: {found:?}");
    }
    assert_eq!(key_len(&keys[0].0), 185);
}

fn key_len(k: &CacheKey) -> usize {
    k.to_string().len()
}
