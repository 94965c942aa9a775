//! The demo run twice on one cache directory: the second run replays every winner from
//! disk, loads only the winners' programs from the kernel store (compiling nothing), and
//! chooses the same schedules. Real C compiles,
//! real files.

use schedule_cache::Store as _;
use std::path::Path;

use kcache_demo::{DemoOptions, Origin, Report, run};
use schedule_cache::admin;

/// A bounded configuration: two kernels (four segment kernels per candidate pair), a
/// handful of candidates, one timed run each.
fn small(dir: &Path, kernels: &[&str]) -> DemoOptions {
    let mut o = DemoOptions::new(dir);
    o.kernels = Some(kernels.iter().map(|k| k.to_string()).collect());
    o.round1 = 4;
    o.round2 = 2;
    o.reps = 1;
    o.progress = false;
    o
}

fn schedules(r: &Report) -> Vec<(String, String, String)> {
    r.kernels
        .iter()
        .map(|k| (k.name.clone(), k.schedule.clone(), k.schedule_ron.clone()))
        .collect()
}

#[test]
fn second_run_replays_every_winner_and_compiles_only_the_winners() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("cache");
    let options = small(&dir, &["matmul", "softmax"]);

    let first = run(&options).expect("first run");
    assert!(first.kernels.iter().all(|k| k.origin == Origin::Searched));
    assert_eq!(first.totals.disk_lookups, 2);
    assert_eq!(first.totals.disk_hits, 0);
    assert_eq!(first.totals.disk_stored, 2);
    assert!(
        first
            .kernels
            .iter()
            .all(|k| k.disk_lookup.starts_with("miss"))
    );
    // Candidates share segment kernels under other names: fewer compiles than renders.
    assert!(first.totals.kernels_compiled < first.totals.kernels_rendered);
    assert_eq!(first.replayed(), 0);

    // The entries are real files in the documented layout, and every one verifies.
    let inventory = admin::inventory(&dir).expect("inventory");
    assert_eq!(inventory.entries.len(), 2);
    assert!(inventory.lock_file);
    // Beside the entries, only the kernel store's directory (`kernels`).
    assert_eq!(
        inventory.foreign,
        [kcache_demo::KERNEL_STORE_DIR],
        "{:?}",
        inventory.foreign
    );
    for entry in &inventory.entries {
        admin::verify_entry(&dir, entry).expect("entry verifies");
        assert!(first.kernels.iter().any(|k| k.key == entry.key.as_str()));
    }

    let second = run(&options).expect("second run");
    assert_eq!(second.replayed(), 2);
    assert!(second.kernels.iter().all(|k| k.disk_lookup == "hit"));
    assert_eq!(second.totals.disk_hits, 2);
    assert_eq!(second.totals.disk_stored, 0);
    // Only the winners' segment kernels are resolved (two segments per routine here),
    // and their programs come from the first run's kernel store: nothing is compiled.
    assert_eq!(second.totals.kernels_rendered, 4);
    assert_eq!(second.totals.kernels_compiled, 0);
    assert_eq!(second.totals.kernels_loaded, 4);
    assert_eq!(second.totals.programs_compiled, 0);
    assert_eq!(second.totals.memo_hits + second.totals.memo_misses, 2);
    assert_eq!(schedules(&first), schedules(&second));
    for (a, b) in first.kernels.iter().zip(&second.kernels) {
        assert_eq!(a.key, b.key);
        assert_eq!(
            a.baseline_seconds, b.baseline_seconds,
            "baseline comes from the entry"
        );
        assert!(b.stored_best_seconds.is_some());
    }
    let text = second.to_string();
    assert!(text.contains("replayed 2/2 winners from disk"), "{text}");
    assert!(text.contains(&dir.display().to_string()), "{text}");
}

#[test]
fn fresh_searches_again_and_a_damaged_entry_is_searched_and_rewritten() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("cache");
    let options = small(&dir, &["chain"]);
    let first = run(&options).expect("first run");
    assert_eq!(first.totals.disk_stored, 1);

    // A torn entry (as a crashed foreign writer might leave) is a miss, never an error.
    let entry = dir.join(format!("{}.ron", first.kernels[0].key));
    std::fs::write(&entry, "(version: 1, digest: \"trunc").expect("damage the entry");
    let second = run(&options).expect("second run");
    assert_eq!(second.kernels[0].origin, Origin::Searched);
    assert!(
        second.kernels[0].disk_lookup.contains("unparsable"),
        "{}",
        second.kernels[0].disk_lookup
    );
    assert_eq!(second.totals.disk_stored, 1);

    // The rewritten entry replays.
    let third = run(&options).expect("third run");
    assert_eq!(third.kernels[0].origin, Origin::Replayed);

    // --fresh removes the entries first, so the run searches again.
    let mut fresh = options.clone();
    fresh.fresh = true;
    let fourth = run(&fresh).expect("fresh run");
    assert_eq!(fourth.kernels[0].origin, Origin::Searched);
    assert!(fourth.kernels[0].disk_lookup.contains("no entry"));
}

#[test]
fn another_compiler_is_another_key_and_the_miss_says_which_component() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("cache");
    let mut options = small(&dir, &["rowdot"]);
    options.compiler = Some("cc".to_string());
    let first = run(&options).expect("first run");
    assert_eq!(first.totals.disk_stored, 1);

    // Same code, another compiler command: the codegen component differs, nothing
    // else, and the miss says so instead of silently searching.
    options.compiler = Some("cc -fno-strict-aliasing".to_string());
    let second = run(&options).expect("second run");
    assert_eq!(second.kernels[0].origin, Origin::Searched);
    let why = &second.kernels[0].disk_lookup;
    // ...and what changed in it, from the stored entry's readable summary: the compiler
    // (its command is part of the toolchain the demo gives the cache), naming the flag.
    assert!(
        why.contains("differ in: codegen (codegen: compiler "),
        "{why}"
    );
    assert!(
        why.ends_with(")") && why.contains("-fno-strict-aliasing"),
        "{why}"
    );
    assert_ne!(first.kernels[0].key, second.kernels[0].key);
    assert_eq!(
        first.kernels[0].key.split('-').next(),
        second.kernels[0].key.split('-').next(),
        "same code digest"
    );
}

#[test]
fn an_unusable_cache_directory_is_a_refusal_not_a_failed_run() {
    let tmp = tempfile::tempdir().expect("tempdir");
    // A file where the cache directory should be: every disk operation is refused.
    let file = tmp.path().join("not-a-dir");
    std::fs::write(&file, "mine").expect("write");
    let report = run(&small(&file, &["chain"])).expect("the run still succeeds");
    let k = &report.kernels[0];
    assert_eq!(k.origin, Origin::Searched);
    assert!(k.disk_lookup.starts_with("refused"), "{}", k.disk_lookup);
    assert_eq!(report.totals.disk_stored, 0);
    assert!(report.to_string().contains("the disk cache refused"));
    assert_eq!(std::fs::read_to_string(&file).expect("read"), "mine");
}

/// Rewrites the entry at `key` in `dir` through the disk store itself (valid RON, right
/// digest, same key components) with `ops` as its saved schedule.
fn rewrite_ops(dir: &Path, key: &str, ops: Vec<reference_ir::schedule::SavedRefOp>) {
    let key = schedule_cache::CacheKey::new(key).expect("key");
    let digest = key.as_str().split('-').next().expect("digest").to_string();
    let store = schedule_cache::DiskCache::new(dir);
    let mut entry: schedule_cache::ScheduleEntry<reference_ir::schedule::SavedRefOp> =
        store.lookup(Some(&key), &digest).expect("entry");
    entry.schedule.ops = ops;
    assert!(store.store(Some(&key), &entry).expect("store").is_stored());
}

#[test]
fn a_stored_winner_that_does_not_apply_is_a_miss_searched_and_replaced() {
    use reference_ir::schedule::SavedRefOp;
    use schedule_cache::SymRef;
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("cache");
    let options = small(&dir, &["chain"]);
    let first = run(&options).expect("first run");
    assert_eq!(first.totals.disk_stored, 1);

    // A schedule that parses, names loops of this code and replays (its references
    // resolve), but cannot apply: chain's loops run 128 times, 7 does not divide 128.
    let key = first.kernels[0].key.clone();
    rewrite_ops(
        &dir,
        &key,
        vec![SavedRefOp::Split {
            target: SymRef::Base(0),
            factor: 7,
        }],
    );
    let second = run(&options).expect("an entry that does not apply is a miss, not a failed run");
    let k = &second.kernels[0];
    assert_eq!(k.origin, Origin::Searched);
    assert!(k.disk_lookup.starts_with("miss"), "{}", k.disk_lookup);
    assert!(
        k.disk_lookup.contains("not applicable"),
        "{}",
        k.disk_lookup
    );
    assert_eq!(second.totals.disk_hits, 0);
    // The new winner replaces the bad entry (same key), and the next run replays it.
    assert_eq!(second.totals.disk_stored, 1);
    assert_eq!(k.key, key);
    let text = second.to_string();
    assert!(text.contains("chain: disk lookup miss"), "{text}");
    let third = run(&options).expect("third run");
    assert_eq!(third.kernels[0].origin, Origin::Replayed);
    assert_eq!(third.kernels[0].schedule_ron, k.schedule_ron);
}

#[test]
fn a_stored_winner_too_deep_or_too_large_to_replay_is_a_miss_not_a_crash_or_a_long_compile() {
    use reference_ir::schedule::SavedRefOp;
    use schedule_cache::SymRef;
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("cache");
    let options = small(&dir, &["chain"]);
    let first = run(&options).expect("first run");
    let key = first.kernels[0].key.clone();
    let minted = |op: usize, role: &str| SymRef::Minted {
        op,
        role: role.to_string(),
    };

    // 100 splits by 1, each of the previous one's inner loop: within the library's caps
    // on saved ops (4096), but more than the demo replays (64; its schedules have at most
    // 6). (5000 such splits once overflowed the stack applying them: the run aborted; the
    // library now refuses them on its own, see schedule-cache's deep_entries tests.)
    let mut deep = vec![SavedRefOp::Split {
        target: SymRef::Base(1),
        factor: 1,
    }];
    deep.extend((1..100).map(|i| SavedRefOp::Split {
        target: minted(i - 1, "inner"),
        factor: 1,
    }));
    rewrite_ops(&dir, &key, deep);
    let second = run(&options).expect("a deep entry is a miss");
    let k = &second.kernels[0];
    assert_eq!(k.origin, Origin::Searched);
    assert!(
        k.disk_lookup
            .contains("it has 100 ops, more than the 64 the demo replays"),
        "{}",
        k.disk_lookup
    );
    assert_eq!(second.totals.disk_stored, 1, "replaced");

    // Both loops tiled by 16 and three of the four loops unrolled: 2048 copies of the
    // statement, hundreds of kilobytes of C (every loop unrolled in matmul would be
    // 262144 copies for the compiler).
    let mut unrolled = vec![
        SavedRefOp::Split {
            target: SymRef::Base(0),
            factor: 16,
        },
        SavedRefOp::Split {
            target: SymRef::Base(1),
            factor: 16,
        },
    ];
    for (op, role) in [(0, "inner"), (0, "outer"), (1, "inner")] {
        unrolled.push(SavedRefOp::Unroll {
            target: minted(op, role),
        });
    }
    rewrite_ops(&dir, &key, unrolled);
    let third = run(&options).expect("a huge entry is a miss");
    let k = &third.kernels[0];
    assert_eq!(k.origin, Origin::Searched);
    assert!(k.disk_lookup.contains("bytes of C"), "{}", k.disk_lookup);
    assert_eq!(third.totals.disk_stored, 1, "replaced");
    assert_eq!(run(&options).expect("fourth run").replayed(), 1);
}
