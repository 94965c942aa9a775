//! reference-ir: a reference loop IR ([`ir`]), its schedule language ([`schedule`]) and a C
//! renderer ([`render`]), built on schedule-cache.
//!
//! It is what the kcache demo tunes, and a worked implementation of schedule-cache's two
//! adopter traits: [`ir::Code`] is a [`LoopCode`](schedule_cache::LoopCode) and
//! [`schedule::ReferenceLanguage`] a [`ScheduleLanguage`](schedule_cache::ScheduleLanguage).
//! A backend with its own IR does not need this crate (see schedule-cache's
//! `examples/foreign_ir.rs`). [`space`] holds a schedule space with real spread (a tiled
//! matrix product's 2,000 legal schedules) for tuning figures.
//!
//! Tune a schedule on one build of the code, save it as RON, replay it on another build
//! (fresh ids, as in another process): both give the same transformed code.
//!
//! ```
//! use reference_ir::ir::{BinOp, Code, Expr, Index, Precision, Stmt, Symbol, TensorNode};
//! use reference_ir::schedule::{ReferenceLanguage, Schedule, apply_ops};
//! use schedule_cache::{canonicalize, of_saved, to_saved, Registry, SavedSchedule};
//! use std::collections::BTreeMap;
//!
//! // `for i in 0..64 { y[i] = x[i] * 2 }`, built twice with different ids and labels.
//! let build = |tag: &str| {
//!     let i = Symbol::fresh("i");
//!     let x = TensorNode::new(&format!("x{tag}"), &[64], Precision::F32);
//!     let y = TensorNode::new(&format!("y{tag}"), &[64], Precision::F32);
//!     let value = Expr::bin(BinOp::Mul, Expr::get(&x, vec![Index::var(&i)]), Expr::Const(2.0));
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
//! # Errors
//!
//! The crate has no error type of its own: it returns schedule-cache's
//! [`Error`](schedule_cache::Error), which its traits require of a schedule language
//! ([`Error::ScheduleInapplicable`](schedule_cache::Error::ScheduleInapplicable) for an op
//! whose preconditions fail, [`Error::Render`](schedule_cache::Error::Render) for code the
//! renderer refuses).
//!
//! # Versions
//!
//! What a minor version may add: functions, methods and constants. The IR's and the
//! schedule language's enums are exhaustive (the renderer and the ops match them in full),
//! so a new construct or op, or a change to what a saved op ([`schedule::SavedRefOp`])
//! means, is a breaking release (`0.y` → `0.y+1`). A cache that stores these ops should name
//! their version in its schedule format
//! ([`ScheduleCache::with_schedule_format`](schedule_cache::ScheduleCache::with_schedule_format)),
//! so that entries saved under other semantics are a miss, never a wrong replay.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod ir;
pub mod render;
pub mod schedule;
pub mod space;
