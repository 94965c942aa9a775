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
//! states, demos), live in `lm` (cargo feature `lm`): the same table serves them.
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
//! # Versions
//!
//! What a minor version (under 0.x semver, a `0.y.z` → `0.y.z+1` release) may add:
//! variants of the `#[non_exhaustive]` enums [`Value`] and `lm::DemoStrategy` (so a
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
#[cfg(feature = "lm")]
pub mod lm;
mod map_hasher;
mod table;
mod value;

pub use key::{Key, KeyBuilder};
pub use table::{
    Fetched, Stats, Table, fetch_or_put, get_or_put, try_fetch_or_put, try_get_or_put, with_cache,
};
pub use value::{Secret, Value};
