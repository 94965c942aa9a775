//! Benchmark (under construction).
fn main() {}
