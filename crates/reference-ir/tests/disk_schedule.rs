//! The disk store with real schedule entries built by the full pipeline (the reference-ir
//! crate's IR, canonical identity, saved schedule, key parts), next to placement entries at the
//! same key.

use schedule_cache::Store as _;
use std::collections::BTreeMap;

use reference_ir::ir::{Code, Expr, Index, Precision, Stmt, Symbol, TensorNode};
use reference_ir::schedule::{ReferenceLanguage, SavedRefOp, Schedule};
use schedule_cache::admin::Space;
use schedule_cache::placement::{PlacementEntry, Shipped};
use schedule_cache::{
    CompleteIdentity, Config, KeyComponent, KeyInputs, Limits, Registry, ScheduleEntry,
    TimingIdentity, cache_key, canonicalize, key_parts, to_saved,
};
use schedule_cache::{DiskCache, Lookup, MissReason, StoreOutcome};

struct World {
    config: Config,
    limits: Limits,
    device: TimingIdentity,
}

impl World {
    fn new() -> World {
        World {
            config: Config::new(reference_ir::render::reference_settings()),
            limits: Limits {
                codegen_tag: "gcc-13-O2".into(),
                worker_pool_tag: "pool8".into(),
                max_threads: 8,
                vector_bytes: 32,
                local_memory_bytes: 1 << 20,
                extra: BTreeMap::new(),
                toolchain: None,
            },
            device: TimingIdentity {
                device: "x86_64 avx2 8 cores".into(),
                toolchain: Some("gcc 13.2".into()),
            },
        }
    }

    fn inputs(&self, objective: Option<&'static str>) -> KeyInputs<'_> {
        KeyInputs {
            backend: "cc",
            config: &self.config,
            limits: &self.limits,
            timing_identity: Some(&self.device),
            objective,
            schedule_format: "",
        }
    }
}

/// Builds a loop nest, a split schedule for it and the schedule entry stored under `inputs`.
fn entry(inputs: &KeyInputs<'_>) -> (CompleteIdentity, ScheduleEntry<SavedRefOp>) {
    let i = Symbol::fresh("i");
    let y = TensorNode::new("y", &[64], Precision::F32);
    let code = Code::new(vec![Stmt::for_(
        &i,
        0,
        64,
        vec![Stmt::set(&y, vec![Index::var(&i)], Expr::Const(2.0))],
    )]);
    let id = canonicalize(&code, &[], &BTreeMap::new(), true)
        .into_complete()
        .expect("complete");
    let mut s = Schedule::new();
    s.split(&i, 8);
    let (saved, _) = to_saved(&ReferenceLanguage, &Registry::new(&id), &s.ops).expect("save");
    let parts = key_parts(&id, inputs).expect("timing identity");
    let e =
        ScheduleEntry::new(&id, parts, saved, vec![1.0e-6, 0.9e-6], Some(2.0e-6)).expect("entry");
    (id, e)
}

#[test]
fn a_schedule_entry_round_trips_and_replays() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let w = World::new();
    let inputs = w.inputs(None);
    let (id, e) = entry(&inputs);
    let key = cache_key(&id, &inputs).expect("key");
    assert_eq!(
        schedule_cache::DiskCache::new(tmp.path())
            .store(Some(&key), &e)
            .expect("store"),
        StoreOutcome::Stored
    );
    assert!(tmp.path().join(format!("{key}.ron")).is_file());
    let back: ScheduleEntry<SavedRefOp> = schedule_cache::DiskCache::new(tmp.path())
        .lookup(Some(&key), id.digest())
        .expect("hit");
    assert_eq!(back, e);
    let (ops, _) = back.replay(&ReferenceLanguage, &id).expect("replay");
    assert_eq!(ops.len(), 1);

    // The tools read it without knowing the op type, and it verifies.
    let inv = schedule_cache::admin::inventory(tmp.path()).expect("inventory");
    assert_eq!(inv.entries.len(), 1);
    assert_eq!(inv.entries[0].space, Space::Schedule);
    assert_eq!(
        schedule_cache::admin::verify_entry(tmp.path(), &inv.entries[0]),
        Ok(id.digest().to_owned())
    );
}

#[test]
fn no_timing_identity_means_no_key_and_no_disk_io() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("cache");
    let w = World::new();
    let mut inputs = w.inputs(None);
    let (id, e) = entry(&inputs);
    inputs.timing_identity = None;
    let key = cache_key(&id, &inputs);
    assert!(key.is_none());
    assert_eq!(
        schedule_cache::DiskCache::new(&dir)
            .store(key.as_ref(), &e)
            .expect("store"),
        StoreOutcome::Skipped
    );
    assert_eq!(
        schedule_cache::DiskCache::new(&dir)
            .lookup::<ScheduleEntry<SavedRefOp>>(key.as_ref(), id.digest()),
        None
    );
    assert!(!dir.exists());
}

#[test]
fn schedule_and_placement_spaces_share_keys_without_colliding() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let w = World::new();
    let inputs = w.inputs(None);
    let (id, e) = entry(&inputs);
    let key = cache_key(&id, &inputs).expect("key");
    let p = PlacementEntry::new(id.digest(), vec![], Shipped::B);
    schedule_cache::DiskCache::new(tmp.path())
        .store(Some(&key), &e)
        .expect("store");
    schedule_cache::DiskCache::new(tmp.path())
        .store(Some(&key), &p)
        .expect("store");
    assert_eq!(
        schedule_cache::DiskCache::new(tmp.path()).lookup(Some(&key), id.digest()),
        Some(e)
    );
    assert_eq!(
        schedule_cache::DiskCache::new(tmp.path()).lookup(Some(&key), id.digest()),
        Some(p)
    );
    // A regime transition sweeps both spaces.
    let next =
        DiskCache::new(tmp.path()).with_regime(schedule_cache::admin::CACHE_REGIME_VERSION + 1);
    assert_eq!(
        next.lookup::<ScheduleEntry<SavedRefOp>>(Some(&key), id.digest()),
        None
    );
    assert_eq!(next.lookup::<PlacementEntry>(Some(&key), id.digest()), None);
}

#[test]
fn a_miss_under_another_objective_is_explained_by_the_differing_component() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let w = World::new();
    let isolated = w.inputs(Some("isolated"));
    let queued = w.inputs(Some("queued"));
    let (id, e) = entry(&isolated);
    let stored_key = cache_key(&id, &isolated).expect("key");
    schedule_cache::DiskCache::new(tmp.path())
        .store(Some(&stored_key), &e)
        .expect("store");

    let wanted = key_parts(&id, &queued).expect("parts");
    let wanted_key = wanted.key().expect("key");
    assert_ne!(wanted_key, stored_key);
    let got = DiskCache::new(tmp.path())
        .probe::<ScheduleEntry<SavedRefOp>>(Some(&wanted_key), id.digest());
    let Lookup::Miss(MissReason::NoEntry { same_digest }) = got else {
        panic!("{got:?}")
    };
    assert_eq!(same_digest, vec![stored_key.as_str().to_owned()]);
    // The sibling's recorded key parts say which component made the difference.
    let sibling = schedule_cache::CacheKey::new(&same_digest[0]).expect("key");
    let found: ScheduleEntry<SavedRefOp> = schedule_cache::DiskCache::new(tmp.path())
        .lookup(Some(&sibling), id.digest())
        .expect("hit");
    assert_eq!(
        found.key_parts.differing(&wanted),
        vec![KeyComponent::Timing]
    );
}
