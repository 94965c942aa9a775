//! What the demo's process tests share: a small matmul run as a real `kcache-demo` process.

use std::path::Path;
use std::process::Command;

use test_support::child::stdout_of;

/// Runs `kcache-demo` on matmul with a small budget (6 + 2 candidates, 1 sample each) in
/// `dir` and returns its report (stdout); `extra` arguments go last. Fails the test if the
/// run fails.
pub(crate) fn small_matmul(dir: &Path, extra: &[&str]) -> String {
    stdout_of(
        Command::new(env!("CARGO_BIN_EXE_kcache-demo"))
            .arg("--cache-dir")
            .arg(dir)
            .args([
                "--kernels",
                "matmul",
                "--round1",
                "6",
                "--round2",
                "2",
                "--reps",
                "1",
                "-q",
            ])
            .args(extra),
    )
}

/// The first line of `report` containing `needle` (fails the test if none does).
#[allow(dead_code)] // not every test file reads single lines
pub(crate) fn line<'a>(report: &'a str, needle: &str) -> &'a str {
    report
        .lines()
        .find(|l| l.contains(needle))
        .unwrap_or_else(|| panic!("no line with {needle:?} in:\n{report}"))
}
