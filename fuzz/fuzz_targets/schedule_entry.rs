//! Entry decoding through the public lookup path never panics: whatever bytes lie at an
//! entry's path in a cache directory (set up once with a real stamp), `probe` answers.
#![no_main]

use std::path::PathBuf;
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use reference_ir::schedule::SavedRefOp;
use schedule_cache::admin::Space;
use schedule_cache::placement::{PlacementEntry, Shipped};
use schedule_cache::{CacheKey, DiskCache, ScheduleEntry, Store as _};

/// A cache directory with a stamp (one real store), kept for the whole run.
fn dir() -> &'static (tempfile::TempDir, PathBuf, CacheKey) {
    static DIR: OnceLock<(tempfile::TempDir, PathBuf, CacheKey)> = OnceLock::new();
    DIR.get_or_init(|| {
        let tmp = tempfile::tempdir().expect("a temporary directory");
        let dir = tmp.path().join("cache");
        let key = CacheKey::new("d-fuzz").expect("a valid key");
        DiskCache::new(&dir)
            .store(
                Some(&key),
                &PlacementEntry::new("d", Vec::new(), Shipped::A),
            )
            .expect("a first store sets the directory up");
        (tmp, dir, key)
    })
}

fuzz_target!(|data: &[u8]| {
    let (_, dir, key) = dir();
    let cache = DiskCache::new(dir);
    std::fs::write(dir.join(Space::Schedule.file_name(key)), data).expect("write");
    std::fs::write(dir.join(Space::Placement.file_name(key)), data).expect("write");
    let _ = cache.probe::<ScheduleEntry<SavedRefOp>>(Some(key), "d");
    let _ = cache.probe::<PlacementEntry>(Some(key), "d");
});
