//! Cross-crate integration tests live in `tests/tests/`; this library holds no code.
//!
//! It does compile and run the Rust examples of the workspace README as doc tests, so
//! the README's usage examples always match the real APIs.
#![forbid(unsafe_code)]

/// The workspace README; its Rust code blocks are this crate's doc tests.
#[doc = include_str!("../../README.md")]
#[cfg(doctest)]
pub struct ReadmeExamples;
