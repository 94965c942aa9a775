//! The demo's regime from its backend and its device from the machine, each run a real
//! `kcache-demo` process with the real C compiler: a compiler option added is a miss whose
//! explanation names the option, and the report names the CPU it tuned on.

mod common;

use common::line;

#[test]
fn an_added_option_is_a_miss_naming_it_and_the_report_names_the_cpu() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("cache");
    let cold = common::small_matmul(&dir, &[]);
    let device = line(&cold, "device: ");
    assert!(device.contains(std::env::consts::ARCH), "{device}");
    assert!(device.contains(" worker"), "{device}");
    let again = common::small_matmul(&dir, &[]);
    assert!(line(&again, "matmul ").contains(" replayed "), "{again}");
    let o3 = common::small_matmul(&dir, &["--cflag=-O3"]);
    let why = line(&o3, "disk lookup");
    assert!(
        why.ends_with("differ in: codegen (codegen: options (none) → -O3)"),
        "{why}"
    );
}
