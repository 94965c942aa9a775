//! The kcache demo.
fn main() {}
