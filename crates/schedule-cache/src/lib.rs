//! schedule-cache: process-independent identity of loop code, saved schedules that replay in
//! another process, and the keys under which they are stored on disk.
//!
//! ```
//! use schedule_cache::CacheKey;
//! let key = CacheKey::new("abc-123").expect("filename-safe");
//! assert_eq!(key.as_str(), "abc-123");
//! assert!(CacheKey::new("../escape").is_err());
//! ```
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod entry;
pub mod error;
pub mod key;

pub use entry::DiskEntry;
pub use error::Error;
pub use key::CacheKey;
