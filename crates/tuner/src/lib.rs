//! The tuning loop as a library, over kcache's caches.
//!
//! An autotuner tries schedules of a kernel, compiles and measures each, and keeps the
//! fastest. This crate is that loop for any schedule language (schedule-cache's
//! [`ScheduleLanguage`](schedule_cache::ScheduleLanguage)) and any backend
//! (kernel-cache's [`Backend`](kernel_cache::Backend)); the caller supplies a
//! [`Workload`]: the code, its [`Space`] of schedules, the renderer (code and ops to
//! kernels) and how to run and check a candidate. [`Tuner`] then:
//!
//! - looks a stored winner up and replays it, checked (applied, compiled, its output
//!   checked) before it is used ([`Tuner::replay`]);
//! - runs a seed round: the schedule cache's seeds re-applied on fresh code, checked and
//!   measured first, dropped and failed seeds counted with their reasons ([`SeedRound`]);
//! - searches within a budget with a [`Strategy`] ([`RandomSearch`],
//!   [`NeighbourhoodSearch`]), its order drawn from a caller-given seed, candidates
//!   compiled in batches through kernel-cache's per-kernel resolve (a failing candidate
//!   skipped and reported, a failure the kernel store remembers not compiled again);
//! - memoizes measurements in a memo-cache table, and measures with warm-up, repeats
//!   until the spread is within a bound or a cap ([`Measure`]), ranks candidates by the
//!   fastest sample unless told otherwise ([`Estimate`]: other processes only add time),
//!   and re-measures the finalists interleaved before one wins; the spread is in the
//!   report, and the stored entry keeps the winner's samples;
//! - stores the winner under keep-faster ([`Tuner::tune`], [`Tuner::store`]);
//! - shows progress: a bar on a terminal, plain lines otherwise, nothing when quiet
//!   ([`ProgressMode`]);
//! - compares a seeded search with a cold one, each with its own memo table and order,
//!   both winners re-measured side by side ([`Tuner::compare_cold`], [`ColdComparison`]).
//!
//! # Example
//!
//! A workload tuned with the real C backend: `out[i] = 2 * a[i]` in the reference loop
//! IR, three schedules (none, vectorize `i`, split `i` by 8 and unroll the inner loop),
//! rendered with reference-ir's renderer. A real workload has a larger space and a
//! reference of its own; the glue is the same.
//!
//! ```
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use cc_backend::{Arg, CcBackend, CcProgram, Elem, Extent, Kernel, Signature, Source};
//! use kernel_cache::{BatchKernel, KernelCache, Names, Resolved};
//! use reference_ir::ir::{BinOp, Code, Expr, Index, Precision, Stmt, Symbol, TensorNode};
//! use reference_ir::render::{Naming, reference_settings, render, signature_of};
//! use reference_ir::schedule::{RefOp, ReferenceLanguage, Schedule, apply_ops};
//! use schedule_cache::{Config, DiskCache, ScheduleCache, TimingIdentity};
//! use tuner::{Measure, ProgressMode, RandomSearch, Rendered, SearchOptions, Space, Tuned};
//! use tuner::{Tuner, Workload};
//!
//! const N: usize = 1024;
//! struct Double { space: Space, backend: String, config: Config, a: Vec<f32> }
//!
//! impl Workload<ReferenceLanguage, CcBackend> for Double {
//!     type Code = Code;
//!     type Plan = ();
//!     type Bound = (Kernel, Vec<f32>);
//!     fn name(&self) -> &str { "double" }
//!     fn space(&self) -> &Space { &self.space }
//!     fn build(&self) -> Code {
//!         let i = Symbol::fresh("i");
//!         let out = TensorNode::new("out", &[N], Precision::F32);
//!         let a = TensorNode::new("a", &[N], Precision::F32);
//!         let twice = Expr::bin(BinOp::Mul, Expr::Const(2.0), Expr::get(&a, vec![Index::var(&i)]));
//!         let set = Stmt::set(&out, vec![Index::var(&i)], twice);
//!         Code::new(vec![Stmt::for_(&i, 0, N as i64, vec![set])])
//!     }
//!     fn ops_at(&self, code: &Code, point: &[usize]) -> Option<Vec<RefOp>> {
//!         let i = code.loops().first()?.var.clone();
//!         let mut s = Schedule::new();
//!         match point.first()? {
//!             0 => {}
//!             1 => s.vectorize(&i),
//!             _ => { let (_, inner) = s.split(&i, 8); s.unroll(&inner) }
//!         }
//!         Some(s.ops)
//!     }
//!     fn render(&self, code: &Code, ops: &[RefOp], first: usize)
//!         -> Result<Rendered<Source, ()>, String> {
//!         let code = apply_ops(ops, code).map_err(|e| e.to_string())?;
//!         let symbol = format!("double_{first}");
//!         let params = signature_of(&code, &[]); // out, a: in the order `run` passes them
//!         let r = render(&code, &symbol, &params, Naming::Minted, &self.config)
//!             .map_err(|e| e.to_string())?;
//!         let signature = Signature::new()
//!             .buffer_mut(&r.params[0].name, Elem::F32, Extent::fixed(N))
//!             .buffer(&r.params[1].name, Elem::F32, Extent::fixed(N));
//!         let source = Source { prelude: r.prelude, text: r.text, signature };
//!         let names = Names::new().with_bound(r.owned);
//!         let options = vec!["-fopenmp-simd".to_string()];
//!         let kernel = source.batch_kernel(&symbol, &names, options, &self.backend);
//!         // What a measurement depends on beyond the kernel keys: the data.
//!         Ok(Rendered { kernels: vec![kernel], plan: (), memo_tag: format!("a=0..{N}") })
//!     }
//!     fn bind(&self, _: &(), kernels: &[Resolved<CcProgram>]) -> Result<Self::Bound, String> {
//!         let k = Kernel::from_resolved(&kernels[0]).map_err(|e| e.to_string())?;
//!         Ok((k, vec![0.0; N]))
//!     }
//!     fn run(&self, (k, out): &mut Self::Bound) -> Result<(), String> {
//!         k.call(&mut [Arg::F32Mut(out), Arg::F32(&self.a)]).map_err(|e| e.to_string())
//!     }
//!     fn check(&self, bound: &mut Self::Bound) -> Result<(), String> {
//!         self.run(bound)?;
//!         let right = bound.1.iter().zip(&self.a).all(|(o, a)| *o == 2.0 * a);
//!         if right { Ok(()) } else { Err("out is not 2a".to_string()) }
//!     }
//! }
//!
//! let backend = CcBackend::new()?;
//! let config = Config::new(reference_settings());
//! let work = Double {
//!     space: Space::new(vec![3], [vec![0], vec![1], vec![2]])?,
//!     backend: backend.identity().to_string(),
//!     config: config.clone(),
//!     a: (0..N).map(|i| i as f32).collect(),
//! };
//! let dir = tempfile::tempdir()?;
//! let timing = TimingIdentity::this_cpu(Some(backend.compiler_version().to_string()));
//! let schedules = ScheduleCache::new(ReferenceLanguage, "cc", timing, DiskCache::new(dir.path()))
//!     .with_config(config);
//! let cache = KernelCache::new(64 << 20);
//! let tuner = Tuner::new(&schedules, &backend, &cache)
//!     .with_measure(Measure::quick())
//!     .with_progress(ProgressMode::Quiet);
//! let options = SearchOptions { budget: 3, order_seed: 7, ..SearchOptions::default() };
//!
//! // Nothing stored yet: a search, whose winner is stored under keep-faster.
//! let tuned = memo_cache::with_cache(true, |memo| {
//!     tuner.tune(&work, &mut RandomSearch::new(), &options, memo)
//! })?;
//! let Tuned::Searched { report, stored, .. } = tuned else { panic!("nothing was stored") };
//! assert_eq!(report.attempts, 3);
//! assert!(stored.is_stored());
//!
//! // Next time: the stored winner, replayed and checked.
//! let again = memo_cache::with_cache(true, |memo| {
//!     tuner.tune(&work, &mut RandomSearch::new(), &options, memo)
//! })?;
//! assert!(matches!(again, Tuned::Replayed(_)));
//! # Ok(())
//! # }
//! ```
#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod cold;
mod error;
mod measure;
mod progress;
mod space;
mod strategy;
mod tuner;
mod workload;

pub use cold::{ColdComparison, ColdOptions, trials_to_match};
pub use error::Error;
pub use measure::{Estimate, Measure, Measurement, median, spread};
pub use progress::ProgressMode;
pub use space::{Point, Space};
pub use strategy::{History, NeighbourhoodSearch, OrderRng, RandomSearch, Strategy};
pub use tuner::{
    DroppedSeed, Failed, Finalist, Origin, ReplayHit, Replayed, SearchOptions, SearchReport,
    SeedRound, Trial, Tuned, Tuner, Winner,
};
pub use workload::{Rendered, Workload};
