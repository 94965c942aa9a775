//! Helpers shared by kcache-cli's integration tests.
#![allow(dead_code, unreachable_pub)]

use std::process::{Command, Output};

/// Runs the real `kcache` binary with `args` (its logging off) to its end.
pub fn kcache(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kcache"))
        .args(args)
        .env("KCACHE_LOG", "off")
        .output()
        .expect("run kcache")
}
