//! A scoped memo table for search-based optimizers that evaluate a program many times.
//!
//! An optimizer that tries candidate programs over a data set makes the same LM call
//! (same LM, same predictor state, same input) again and again. [`with_cache`] gives
//! one search its own table, dropped when the search ends (or panics); [`get_or_put`]
//! and [`fetch_or_put`] skip the calls already made. Concurrent workers asking for the
//! same call compute it once (*single flight*); a call that panics or fails stores
//! nothing and lets the next asker try again. Keys are 256-bit digests built by the
//! stable hashes in [`key`] ([`input_hash`], [`lm_config_hash`],
//! [`predictor_state_hash`], [`call_key`]), identical across processes and runs, and
//! including the model and API key so tenants never share an entry.
//!
//! # Example: an optimizer on worker threads
//!
//! Four candidate programs are evaluated over three questions, one worker thread per
//! candidate. Two pairs of candidates differ only in demo order and demo strategy,
//! which do not change what the LM is asked, so 12 evaluations make 6 LM calls.
//!
//! ```
//! use std::sync::atomic::{AtomicUsize, Ordering};
//! use memo_cache::{
//!     call_key, fetch_or_put, input_hash, lm_config_hash, predictor_state_hash, with_cache,
//!     Demo, DemoStrategy, Fetched, LmConfig, PredictorState, Secret, Value,
//! };
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
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod call;
mod hit_counter;
pub mod key;
mod map_hasher;
mod table;

pub use call::{Demo, DemoStrategy, LmConfig, PredictorState, Secret, Value};
pub use key::{Key, call_key, input_hash, lm_config_hash, predictor_state_hash};
pub use table::{
    Fetched, Stats, Table, fetch_or_put, get_or_put, try_fetch_or_put, try_get_or_put, with_cache,
};
