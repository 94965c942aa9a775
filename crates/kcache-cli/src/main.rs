//! The `kcache` tool.
fn main() {}
