//! A scoped memo table for searches that evaluate the same candidate many times.
//!
//! A compiler's autotuner proposes candidate schedules for a kernel and measures each;
//! its search (hill climbing from several starts, beams, evolution) proposes many
//! candidates more than once. [`with_cache`] gives one search its own table, dropped
//! when the search ends (or panics); [`get_or_put`] and [`fetch_or_put`] skip the
//! evaluations already made. Concurrent workers asking for the same candidate compute
//! it once (*single flight*); an evaluation that panics or fails stores nothing and
//! lets the next asker try again ([`try_fetch_or_put`] for fallible ones).
//!
//! Keys are 256-bit digests. A caller builds its own with a [`KeyBuilder`]: a tag of its
//! own, then every part that changes the result (for a measurement: the kernel's key,
//! the schedule, the device, and what the kernel runs on). The builder keeps parts
//! apart (length-prefixed and typed), floats bit-exact, maps sorted and tenants apart;
//! [`Key::of_parts`] hashes raw byte parts the same way. The table answers any call
//! with an equal key, so a part left out is a wrong answer, not a miss: a
//! rename-invariant kernel key (`kernel_cache::kernel_key`) names the code up to the
//! renaming of its own names, parameters included, so when a measurement runs kernels
//! on buffers of your own, the buffer bound to each parameter (in parameter order), the
//! sizes and the input data belong in the key as well.
//!
//! The keys of one adopter, an optimizer of LM programs (LM configurations, predictor
//! states, demos), live in [`lm`]: the same table serves them.
//!
//! # Example: an autotuner's search on worker threads
//!
//! Two workers each search their own neighbourhood of tile sizes; the neighbourhoods
//! overlap, so of 12 evaluations 4 are answered by the table and only 8 candidates are
//! compiled and timed.
//!
//! ```
//! use std::sync::atomic::{AtomicUsize, Ordering};
//! use memo_cache::{fetch_or_put, with_cache, KeyBuilder};
//!
//! /// A candidate schedule of one kernel: a tile size and an unroll factor.
//! #[derive(Clone, Copy)]
//! struct Schedule { tile: u32, unroll: u32 }
//!
//! // Compiling and timing a candidate; a real tuner runs the kernel on the device.
//! static MEASURED: AtomicUsize = AtomicUsize::new(0);
//! fn measure(s: Schedule) -> f64 {
//!     MEASURED.fetch_add(1, Ordering::Relaxed);
//!     f64::from((s.tile as i32 - 32).abs() as u32 + 8 / s.unroll)
//! }
//!
//! // Everything that changes the measurement is in the key, after a tag of our own.
//! let kernel_key = "3b7f09c2"; // the kernel's own cache key (e.g. kernel_cache's)
//! let device = "x86-64/avx2";
//! let key = |s: Schedule| {
//!     KeyBuilder::new("my-tuner/measurement/v1")
//!         .text(kernel_key)
//!         .text(device)
//!         .uint(s.tile.into())
//!         .uint(s.unroll.into())
//!         .finish()
//! };
//! let neighbourhoods = [[8, 16, 32], [16, 32, 64]];
//!
//! let (best, stats) = with_cache(true, |table| {
//!     let best: Vec<(f64, u32, u32)> = std::thread::scope(|s| {
//!         let workers: Vec<_> = neighbourhoods
//!             .iter()
//!             .map(|tiles| {
//!                 s.spawn(move || {
//!                     let mut best = (f64::INFINITY, 0, 0);
//!                     for &tile in tiles {
//!                         for unroll in [1, 2] {
//!                             let c = Schedule { tile, unroll };
//!                             let t = fetch_or_put(table, key(c), || measure(c)).into_value();
//!                             if t < best.0 { best = (t, tile, unroll); }
//!                         }
//!                     }
//!                     best
//!                 })
//!             })
//!             .collect();
//!         workers.into_iter().map(|w| w.join().unwrap()).collect()
//!     });
//!     (best, table.map(|t| t.stats()))
//! });
//! let stats = stats.unwrap();
//! assert_eq!(MEASURED.load(Ordering::Relaxed), 8);
//! assert_eq!((stats.misses, stats.hits, stats.entries), (8, 4, 8));
//! assert_eq!((best[0].1, best[0].2), (32, 2));
//! ```
//!
//! With `with_cache(false, …)` the same code runs with `table == None`: every
//! evaluation runs.
//!
//! # LM calls: an optimizer on worker threads
//!
//! The same table serves an optimizer of LM programs, with the keys of [`lm`].
//! Four candidate programs are evaluated over three questions, one worker thread per
//! candidate. Two pairs of candidates differ only in demo order and demo strategy,
//! which do not change what the LM is asked, so 12 evaluations make 6 LM calls.
//!
//! ```
//! use std::sync::atomic::{AtomicUsize, Ordering};
//! use memo_cache::lm::{
//!     call_key, input_hash, lm_config_hash, predictor_state_hash, Demo, DemoStrategy,
//!     LmConfig, PredictorState,
//! };
//! use memo_cache::{fetch_or_put, with_cache, Fetched, Secret, Value};
//!
//! // The LM is a function here; in a real optimizer it is a request to a model.
//! static LM_CALLS: AtomicUsize = AtomicUsize::new(0);
//! fn ask_lm(lm: &LmConfig, state: &PredictorState, question: &str) -> f64 {
//!     LM_CALLS.fetch_add(1, Ordering::Relaxed);
//!     let score = state.instructions.len() * 7 + state.demos.len() * 3 + question.len();
//!     (score % 10) as f64 / 10.0 + lm.model.len() as f64
//! }
//!
//! let lm = LmConfig::new("small-model")
//!     .with_api_key(Secret::new("sk-tenant-a"))
//!     .with_option("temperature", 0.0);
//! let demo = |q: &str, a: &str| Demo::new([("question", q.into())], [("answer", a.into())]);
//! let (d1, d2) = (demo("2+2?", "4"), demo("capital of France?", "Paris"));
//! let brief = PredictorState {
//!     signature: "question -> answer".into(),
//!     instructions: "Answer briefly.".into(),
//!     demos: vec![d1.clone(), d2.clone()],
//!     demo_strategy: DemoStrategy::Fixed,
//! };
//! let stepwise = PredictorState { instructions: "Think step by step.".into(), ..brief.clone() };
//! let candidates = vec![
//!     brief.clone(),
//!     // Same demos in another order, chosen another way: the same LM calls.
//!     PredictorState {
//!         demos: vec![d2, d1],
//!         demo_strategy: DemoStrategy::Bootstrap { max_demos: 2 },
//!         ..brief
//!     },
//!     stepwise.clone(),
//!     PredictorState { demo_strategy: DemoStrategy::RandomSubset { k: 2, seed: 7 }, ..stepwise },
//! ];
//! let questions = ["1+1?", "largest planet?", "boiling point of water?"];
//!
//! let (scores, stats) = with_cache(true, |table| {
//!     let lm_key = lm_config_hash(&lm);
//!     let scores: Vec<(f64, usize)> = std::thread::scope(|s| {
//!         let workers: Vec<_> = candidates
//!             .iter()
//!             .map(|candidate| {
//!                 let (lm, questions) = (&lm, &questions);
//!                 // Only the handle is shared, explicitly.
//!                 s.spawn(move || {
//!                     let state_key = predictor_state_hash(candidate);
//!                     let (mut total, mut hits) = (0.0, 0);
//!                     for q in questions {
//!                         let input = Value::from(*q);
//!                         let key = call_key(&lm_key, &state_key, &input_hash([("question", &input)]));
//!                         match fetch_or_put(table, key, || ask_lm(lm, candidate, q)) {
//!                             Fetched::Hit(score) => { total += score; hits += 1; }
//!                             Fetched::Miss(score) => total += score,
//!                         }
//!                     }
//!                     (total, hits)
//!                 })
//!             })
//!             .collect();
//!         workers.into_iter().map(|w| w.join().unwrap()).collect()
//!     });
//!     (scores, table.map(|t| t.stats()))
//! });
//! // The table is gone now; the figures remain.
//! let stats = stats.unwrap();
//! assert_eq!(LM_CALLS.load(Ordering::Relaxed), 6);
//! assert_eq!((stats.misses, stats.hits, stats.entries), (6, 6, 6));
//! assert_eq!(scores.iter().map(|(_, hits)| hits).sum::<usize>(), 6);
//! assert_eq!(scores[0].0, scores[1].0);
//! assert_eq!(scores[2].0, scores[3].0);
//! ```
//!
//! With `with_cache(false, …)` the same code runs with `table == None`: all 12
//! evaluations call the LM and every fetch reports [`Fetched::Miss`].
//!
//! # Versions
//!
//! What a minor version (under 0.x semver, a `0.y.z` → `0.y.z+1` release) may add:
//! variants of the `#[non_exhaustive]` enums [`Value`] and [`lm::DemoStrategy`] (so a
//! `match` on them needs a `_` arm), methods of [`KeyBuilder`] (new kinds of part), new
//! functions and modules. It adds no field to [`Stats`] and does not change a key
//! an existing function computes: those are pinned by `tests/hashing.rs` and recomputed by
//! an independent script; a change of encoding comes with a new domain tag version and a
//! breaking release (`0.y` → `0.y+1`). [`Fetched`] stays two-armed: a value was either in the
//! table or computed.
//!
//! A `match` naming every kind of [`Value`] without a `_` arm does not compile, so a new
//! kind never silently falls into an arm meant for another:
//!
//! ```compile_fail,E0004
//! use memo_cache::Value;
//! fn kind(v: &Value) -> u8 {
//!     match v {
//!         Value::Null => 0,
//!         Value::Bool(_) => 1,
//!         Value::Int(_) => 2,
//!         Value::Float(_) => 3,
//!         Value::Text(_) => 4,
//!         Value::List(_) => 5,
//!         Value::Map(_) => 6,
//!         Value::Secret(_) => 7,
//!     }
//! }
//! ```
#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod hit_counter;
pub mod key;
pub mod lm;
mod map_hasher;
mod table;
mod value;

pub use key::{Key, KeyBuilder};
pub use table::{
    Fetched, Stats, Table, fetch_or_put, get_or_put, try_fetch_or_put, try_get_or_put, with_cache,
};
pub use value::{Secret, Value};
