//! The demo's persistent kernel store, with the real C compiler: the second run loads its
//! winners' programs from `<cache-dir>/kernels` and compiles nothing (the report says so);
//! `--fresh` empties the store too; `kernel_store: false` keeps programs in memory only.

use kcache_demo::{DemoOptions, KERNEL_STORE_DIR, Origin, run};

fn options(dir: &std::path::Path) -> DemoOptions {
    let mut options = DemoOptions::new(dir.join("cache"));
    options.kernels = Some(vec!["softmax".to_string(), "chain".to_string()]);
    (
        options.round1,
        options.round2,
        options.reps,
        options.progress,
    ) = (3, 1, 1, false);
    options
}

#[test]
fn the_second_run_loads_its_winners_programs_and_compiles_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let first = run(&options(dir.path())).expect("first run");
    assert!(first.kernels.iter().all(|k| k.origin == Origin::Searched));
    assert!(first.totals.kernels_compiled > 0);
    assert_eq!(first.totals.kernels_loaded, 0);
    assert!(dir.path().join("cache").join(KERNEL_STORE_DIR).is_dir());

    let second = run(&options(dir.path())).expect("second run");
    assert!(
        second.kernels.iter().all(|k| k.origin == Origin::Replayed),
        "{second}"
    );
    let t = second.totals;
    assert_eq!(t.kernels_compiled, 0, "{second}");
    assert_eq!(t.programs_compiled, 0, "{second}");
    assert!(t.kernels_loaded > 0, "{second}");
    let line = format!(
        "kernel store: {} kernel{} loaded from the kernel store",
        t.kernels_loaded,
        if t.kernels_loaded == 1 { "" } else { "s" }
    );
    assert!(second.to_string().contains(&line), "{second}");
    assert!(second.to_string().contains(", 0 compiled"), "{second}");

    // Without the store the replay compiles its winners again.
    let mut memory_only = options(dir.path());
    memory_only.kernel_store = false;
    let third = run(&memory_only).expect("third run");
    assert_eq!(third.totals.kernels_loaded, 0);
    assert!(third.totals.kernels_compiled > 0, "{third}");

    // --fresh empties the kernel store as well: a cold search compiles again.
    let mut fresh = options(dir.path());
    fresh.fresh = true;
    let fourth = run(&fresh).expect("fresh run");
    assert!(fourth.kernels.iter().all(|k| k.origin == Origin::Searched));
    assert_eq!(fourth.totals.kernels_loaded, 0, "{fourth}");
    assert!(fourth.totals.kernels_compiled > 0);
}
