//! Cross-crate integration tests live in `tests/tests/`; this library is empty.
#![forbid(unsafe_code)]
