//! The scale benches' counting global allocator: the system allocator, counting the bytes
//! live (requested and not yet freed), with no limit. The `cap` crate does the counting, so
//! no bench needs an `unsafe impl GlobalAlloc` of its own.
//!
//! A global allocator is one per binary, so a bench declares it itself:
//!
//! ```
//! #[global_allocator]
//! static ALLOCATOR: test_support::alloc::Counting = test_support::alloc::counting();
//!
//! let before = ALLOCATOR.allocated();
//! let v = vec![0u8; 1 << 20];
//! assert!(ALLOCATOR.allocated() >= before + (1 << 20));
//! drop(v);
//! ```

use std::alloc::System;

/// The counting allocator's type: `ALLOCATOR.allocated()` is the bytes live.
pub type Counting = cap::Cap<System>;

/// A counting allocator with no limit, for a `#[global_allocator]` static.
pub const fn counting() -> Counting {
    cap::Cap::new(System, usize::MAX)
}
