//! The crate's one error type.

/// Everything that can go wrong in schedule-cache, as a typed value.
///
/// Each variant names the failed contract; none of them is raised by a panic.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A cache key string was empty, too long, `.`/`..`, or contained a byte
    /// outside `[A-Za-z0-9_-]`. The string is reported (escaped) with the reason.
    #[error("invalid cache key {key:?}: {reason}")]
    InvalidKey {
        /// The rejected key text.
        key: String,
        /// Why it was rejected.
        reason: &'static str,
    },
}
