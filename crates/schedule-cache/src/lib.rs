//! schedule-cache: the process-independent identity of loop code, saved schedules that
//! replay in another process, the keys under which they are stored, and the on-disk store.
//!
//! **Start with the front door, [`ScheduleCache`]** (example below): one
//! handle built from the regime (your [`ScheduleLanguage`], backend name, [`Limits`], your
//! backend's [`Toolchain`] (compiler identity, options, prelude: `with_toolchain`),
//! [`Config`], a [`Timing`] (the [`TimingIdentity`] timings are measured on,
//! [`TimingIdentity::this_cpu`] for this machine's [`Cpu`], or
//! [`Timing::Unavailable`]: a no-op by choice), your schedule-format version and a store: a directory,
//! Redis, or both) with `lookup(code)` (digest guard and replay inside; a [`Miss`] says which
//! key components differ) and `store(code, ops, measurements)` (last write wins; with
//! `with_store_policy(`[`StorePolicy::KeepFaster`]`)` an entry is replaced only by a winner
//! measured faster, decided atomically by the store, and the outcome says which was kept).
//! After a miss, [`seeds(code)`](ScheduleCache::seeds) offers what was learned under other regimes and at
//! other sizes, each only a candidate to rebuild ([`ScheduleCache::candidate`]), apply, check
//! and measure. `examples/foreign_ir.rs` is a complete adopter with its own loop IR. The
//! pieces the front door is built from stay at the root for callers who need them; what the
//! `kcache` tool needs to inspect a directory is in [`admin`], one compiler's placement concept
//! in [`placement`].
//!
//! A backend exposes its optimized loop code through [`LoopCode`]; [`canonicalize`] gives its
//! [`Identity`] (a digest that ignores symbol ids, node ids and labels, plus numberings of loop
//! binders, static indices and tensor nodes). A schedule built against one compile is saved
//! with [`to_saved`] (symbols become [`SymRef`]s, nodes canonical indices), serialized as RON,
//! and replayed against another compile of the same code with [`of_saved`], which refuses a
//! different digest. Only a [`CompleteIdentity`] produces a [`cache_key`], built from the
//! [`KEY_COMPONENTS`] in order. [`WalkCheck`] checks an adopter's [`LoopCode`] walk in a
//! test: it mutates each piece of the code and reports a mutation that leaves the digest
//! unchanged. The reference loop IR, its schedule language and C renderer are the
//! `reference-ir` crate's; this crate knows only the two traits.
//!
//! An adopter's IR of one loop, `for i in 0..64 { out[i] = value }`, and a schedule language
//! of one op (unroll a loop), through the front door:
//!
//! ```
//! use schedule_cache::{LoopCode, NodeAttrs, NodeId, SymId, Visitor, Replayer, Resolver, DiskCache, Error, Measurements, ScheduleCache, ScheduleLanguage, SymRef, TimingIdentity};
//! use std::sync::atomic::{AtomicU64, Ordering};
//!
//! /// The IR: `var` and `out` are this process's ids (fresh on every build).
//! struct Fill { var: u64, out: u64, value: f64 }
//! impl LoopCode for Fill {
//!     fn walk(&self, v: &mut dyn Visitor) {
//!         v.open("loop");
//!         v.int(64);
//!         v.loop_binder(SymId(self.var));
//!         v.open("fill");
//!         v.node(NodeId(self.out), &NodeAttrs::new(&[64], "f32"));
//!         v.symbol(SymId(self.var));
//!         v.float(self.value);
//!         v.close();
//!         v.close();
//!     }
//! }
//! /// The schedule language: an op unrolls the loop of its symbol.
//! struct Unroll;
//! impl ScheduleLanguage for Unroll {
//!     type Op = SymId;
//!     type SavedOp = SymRef;
//!     fn save_op(&self, op: &SymId, refs: &mut Resolver<'_>) -> Result<SymRef, Error> {
//!         refs.sym(*op)
//!     }
//!     fn minted(&self, _: &SymId) -> Vec<(String, SymId)> {
//!         Vec::new()
//!     }
//!     fn build_op(&self, saved: &SymRef, refs: &mut Replayer<'_>) -> Result<SymId, Error> {
//!         refs.sym(saved)
//!     }
//! }
//! fn fresh() -> u64 {
//!     static NEXT: AtomicU64 = AtomicU64::new(1);
//!     NEXT.fetch_add(1, Ordering::Relaxed)
//! }
//!
//! let tmp = tempfile::tempdir()?;
//! let timing = TimingIdentity { device: "x86_64 avx2".into(), toolchain: None };
//! let cache = ScheduleCache::new(Unroll, "cc", timing, DiskCache::new(tmp.path().join("cache")))
//!     .with_schedule_format("unroll-1");
//!
//! // Tune (here: decide to unroll `i`), measure, store.
//! let code = Fill { var: fresh(), out: fresh(), value: 2.0 };
//! let miss = cache.lookup(&code)?.expect_err("an empty cache misses");
//! assert_eq!(miss.to_string(), "no cache directory");
//! let stored = cache.store(&code, &[SymId(code.var)], Measurements::new(vec![1.0e-6]))?;
//! assert!(stored.outcome.is_stored());
//!
//! // Another compile (in practice, another process): fresh ids, same code: a hit, replayed
//! // onto this compile's symbol.
//! let again = Fill { var: fresh(), out: fresh(), value: 2.0 };
//! let hit = cache.lookup(&again)?.expect("stored above");
//! assert_eq!(hit.ops, [SymId(again.var)]);
//! assert_eq!(hit.entry.times, [1.0e-6]);
//!
//! // Other code (another value) misses.
//! let other = Fill { var: fresh(), out: fresh(), value: 3.0 };
//! assert!(cache.lookup(&other)?.is_err());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Versions
//!
//! What a minor version may add: variants of the `#[non_exhaustive]` enums ([`Miss`],
//! [`Error`], [`KeyComponent`], [`StorePolicy`], [`Timing`], [`SeedOrigin`],
//! the stores' [`StoreOutcome`], [`Refusal`], [`MissReason`] and the inspection enums of
//! [`admin`]; a `match` on them needs a `_` arm),
//! and new functions. A change to what enters a key, or to an entry's format, comes with a new
//! entry version or store regime, so an old entry is a miss, never a wrong hit.
//!
//! A `match` naming every kind of [`Miss`] without a `_` arm does not compile, so a new kind
//! never silently falls into an arm meant for another:
//!
//! ```compile_fail,E0004
//! use schedule_cache::Miss;
//! fn retry(m: &Miss) -> bool {
//!     match m {
//!         Miss::NoTiming => false,
//!         Miss::Refused(_) => false,
//!         Miss::NotFound { .. } => true,
//!         Miss::OtherComponents { .. } => true,
//!         Miss::Unreplayable { .. } => true,
//!     }
//! }
//! ```
#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod cache;
mod components;
mod config;
mod device;
mod disk;
mod entry;
mod error;
mod identity;
mod key;
pub mod placement;
#[cfg(feature = "redis")]
mod redis_store;
mod saved;
mod seeds;
mod store;
// Test-only: the unit tests' small IR, kept with the other test support.
#[cfg(test)]
#[path = "../tests/test_ir/mod.rs"]
mod test_ir;
mod toolchain;
mod walk_check;

pub use cache::{Hit, Measurements, Miss, Published, ScheduleCache, Subject, Timing};
pub use components::{
    HINT_DIGITS, KeyInputs, KeyParts, Limits, cache_key, codegen_tag, key_differences, key_parts,
    normalize_objective,
};
pub use config::{
    Config, Relevance, SettingDecl, SettingsRegistry, TIMING_SETTING, digest_completeness,
};
pub use device::{Cpu, TimingIdentity};
pub use disk::{
    DirRefusal, DiskCache, KeptExisting, Lookup, MissReason, Refusal, StoreOutcome, StorePolicy,
    Stored,
};
pub use entry::{DiskEntry, ENTRY_VERSION, ScheduleEntry};
pub use error::Error;
pub use identity::{
    CompleteIdentity, Identity, LoopCode, NodeAttrs, NodeId, Placement, SymId, Visitor,
    canonicalize,
};
pub use key::{CacheKey, KEY_COMPONENTS, KeyComponent};
#[cfg(feature = "redis")]
pub use redis_store::RedisStore;
pub use saved::{
    MAX_SAVED_OPS, Registry, Replayer, Resolver, SavedSchedule, ScheduleLanguage, SymRef, of_saved,
    to_saved,
};
pub use seeds::{Candidate, Dropped, Seed, SeedOrigin, Seeds, size_free_digest};
pub use store::{NearIndexError, Store, TwoLevel};
pub use toolchain::Toolchain;
pub use walk_check::{WalkCheck, WalkProblem, WalkReport};

/// What the `kcache` tool needs to inspect, verify, garbage-collect and count a schedule
/// store's directory, and the observer that says what each store operation did. An adopter
/// needs none of it to look up and store schedules.
pub mod admin {
    pub use crate::disk::inspect::{
        EntryFile, EntryProblem, Found, GcReport, Inventory, StagingArtifact, entry_version,
        inventory, scan, verify_entry,
    };
    pub use crate::disk::{CACHE_REGIME_VERSION, STORE_KIND};
    pub use crate::disk::{
        DiskEvent, DiskStats, MAX_ENTRY_BYTES, MAX_MESSAGE_CHARS, MAX_SIBLINGS_BYTES, Observer, Op,
        Outcome, Space, is_entry_of_any_version, short, siblings_file_name,
    };
}
