//! schedule-cache: the process-independent identity of loop code, saved schedules that
//! replay in another process, the keys under which they are stored, and the on-disk store.
//!
//! **Start with the front door, [`ScheduleCache`]** (module [`cache`], with an example): one
//! handle built from the regime (your [`ScheduleLanguage`], backend name, [`Limits`],
//! [`Config`], a [`Timing`] (the [`TimingIdentity`] timings are measured on, or
//! [`Timing::Unavailable`]: a no-op by choice), your schedule-format version and a store: a directory,
//! Redis, or both) with `lookup(code)` (digest guard and replay inside; a [`Miss`] says which
//! key components differ) and `store(code, ops, measurements)` (last write wins; with
//! `with_store_policy(`[`StorePolicy::KeepFaster`]`)` an entry is replaced only by a winner
//! measured faster, decided atomically by the store, and the outcome says which was kept).
//! After a miss, `seeds(code)` ([`seeds`]) offers what was learned under other regimes and at
//! other sizes, each only a candidate to rebuild ([`ScheduleCache::candidate`]), apply, check
//! and measure. `examples/foreign_ir.rs` is
//! a complete adopter with its own loop IR. The pieces below stay public for callers who need
//! them.
//!
//! A backend exposes its optimized loop code through [`LoopCode`]; [`canonicalize`] gives its
//! [`Identity`] (a digest that ignores symbol ids, node ids and labels, plus numberings of loop
//! binders, static indices and tensor nodes). A schedule built against one compile is saved
//! with [`to_saved`] (symbols become [`SymRef`]s, nodes canonical indices), serialized as RON,
//! and replayed against another compile of the same code with [`of_saved`], which refuses a
//! different digest. Only a [`CompleteIdentity`] produces a [`cache_key`], built from the
//! [`KEY_COMPONENTS`] in order. The crate ships a reference loop IR ([`ir`]) and schedule
//! language ([`schedule`]). [`walk_check`] checks an adopter's [`LoopCode`] walk in a test: it
//! mutates each piece of the code and reports a mutation that leaves the digest unchanged.
//!
//! ```
//! use schedule_cache::ir::{Code, Expr, Index, Precision, Stmt, Symbol, TensorNode};
//! use schedule_cache::schedule::{ReferenceLanguage, Schedule, apply_ops};
//! use schedule_cache::{canonicalize, of_saved, to_saved, Registry, SavedSchedule};
//! use std::collections::BTreeMap;
//!
//! // `for i in 0..64 { y[i] = x[i] * 2 }`, built twice with different ids and labels.
//! let build = |tag: &str| {
//!     let i = Symbol::fresh("i");
//!     let x = TensorNode::new(&format!("x{tag}"), &[64], Precision::F32);
//!     let y = TensorNode::new(&format!("y{tag}"), &[64], Precision::F32);
//!     let value = Expr::bin(
//!         schedule_cache::ir::BinOp::Mul,
//!         Expr::get(&x, vec![Index::var(&i)]),
//!         Expr::Const(2.0),
//!     );
//!     let body = vec![Stmt::set(&y, vec![Index::var(&i)], value)];
//!     (Code::new(vec![Stmt::for_(&i, 0, 64, body)]), i)
//! };
//! let (code_a, i_a) = build("a");
//! let (code_b, _) = build("b");
//! let id_a = canonicalize(&code_a, &[], &BTreeMap::new(), true);
//! let id_b = canonicalize(&code_b, &[], &BTreeMap::new(), true);
//! assert_eq!(id_a.digest(), id_b.digest());
//!
//! // Tune on A: split i by 8 and vectorize the inner loop; save as RON.
//! let mut sched = Schedule::new();
//! let (_outer, inner) = sched.split(&i_a, 8);
//! sched.vectorize(&inner);
//! let (saved, _) = to_saved(&ReferenceLanguage, &Registry::new(&id_a), &sched.ops)?;
//! let text = saved.to_ron()?;
//!
//! // Replay on B (in practice: another process).
//! let saved = SavedSchedule::from_ron(&text)?;
//! let (ops, _) = of_saved(&ReferenceLanguage, &saved, &id_b)?;
//! let done_a = sched.apply(&code_a)?;
//! let done_b = apply_ops(&ops, &code_b)?;
//! let digest = |c: &Code| canonicalize(c, &[], &BTreeMap::new(), true).digest().to_owned();
//! assert_eq!(digest(&done_a), digest(&done_b));
//! # Ok::<(), schedule_cache::Error>(())
//! ```
//!
//! # Versions
//!
//! What a minor version may add: variants of the `#[non_exhaustive]` enums ([`Miss`],
//! [`Error`], [`KeyComponent`], [`StorePolicy`], [`Timing`], [`SeedOrigin`],
//! the disk store's [`StoreOutcome`](disk::StoreOutcome), [`Refusal`](disk::Refusal),
//! [`MissReason`](disk::MissReason) and its inspection enums; a `match` on them needs a `_` arm),
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

pub mod cache;
pub mod components;
pub mod config;
pub mod disk;
pub mod entry;
pub mod error;
pub mod identity;
pub mod ir;
pub mod key;
pub mod placement;
#[cfg(feature = "redis")]
pub mod redis_store;
pub mod render;
pub mod saved;
pub mod schedule;
pub mod seeds;
pub mod store;
pub mod walk_check;

pub use cache::{Hit, Measurements, Miss, Published, ScheduleCache, Subject, Timing};
pub use components::{
    HINT_DIGITS, KEY_COMPONENTS, KeyComponent, KeyInputs, KeyParts, Limits, PartEncoding,
    TimingIdentity, cache_key, codegen_tag, key_differences, key_parts, normalize_objective,
    numerics_tag, objective_tag,
};
pub use config::{Config, Relevance, SettingDecl, SettingsRegistry, digest_completeness};
pub use disk::{KeptExisting, StorePolicy};
pub use entry::{DiskEntry, ENTRY_VERSION, ScheduleEntry};
pub use error::Error;
pub use identity::{
    CompleteIdentity, Identity, IdentityKind, Lineage, LineageTag, LoopCode, NodeAttrs, NodeId,
    Placement, SymId, Visitor, canonicalize, canonicalize_source,
};
pub use key::CacheKey;
pub use saved::{
    MAX_SAVED_OPS, Registry, SavedSchedule, ScheduleLanguage, SymRef, of_saved, to_saved,
};
pub use seeds::{Candidate, Dropped, Seed, SeedOrigin, Seeds, size_free_digest};
