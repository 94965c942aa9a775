//! kernel-cache (under construction).
#![forbid(unsafe_code)]
#![deny(missing_docs)]
