//! Worked adoptions of kcache by backends of their own; this library holds no code.
//!
//! Each example is a program at the top of `examples/` that `cargo test` runs as a test
//! (`test = true, harness = false`), so it always builds against the real APIs and its
//! checks always run:
//!
//! - `foreign_backend.rs`: a backend with its own loop IR, a C renderer that mints every
//!   name from a counter, real `cc-backend` signatures, the persistent kernel store and
//!   `ScheduleCache`. One process tunes (compiles candidates, checks and times them,
//!   stores the winner), a second process replays the winner with no compile. The lines
//!   that touch kcache's APIs sit between `// kcache-glue: begin` and `// kcache-glue: end`
//!   markers; `cargo xtask tidy` counts them (at most 100) and checks that no line outside
//!   the markers names a kcache crate.
//! - `tinygrad_style.rs`: a backend whose renderer declares no names (tinygrad's spellings,
//!   `gidx<N>`, `acc<N>`, `alu<N>`, shape-named kernels, every number from a process-wide
//!   counter), keyed with `Names::default()`: one process tunes three kernels' opts and
//!   stores the winners, a second replays them with no compile.
//!
//! Run one with `cargo run -p kcache-examples --example foreign_backend` (or
//! `--example tinygrad_style`).
#![forbid(unsafe_code)]
