//! A winner stored by one process is replayed by another: this test re-runs its own
//! binary as a child process (a real second process, with its own symbol counters),
//! which finds the winner on disk, replays it (loading its kernels' programs from the
//! first process's kernel store, compiling nothing) and reports the same saved schedule.

use std::process::Command;

use kcache_demo::{DemoOptions, Origin, run};

const CHILD_ENV: &str = "KCACHE_TESTS_CHILD_CACHE_DIR";

fn options(dir: &std::path::Path) -> DemoOptions {
    let mut o = DemoOptions::new(dir);
    o.kernels = Some(vec!["softmax".to_string()]);
    (o.round1, o.round2, o.reps, o.progress) = (3, 1, 1, false);
    o
}

#[test]
fn a_second_process_replays_the_winner_of_the_first() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("cache");
    let first = run(&options(&dir)).expect("first run");
    assert_eq!(first.kernels[0].origin, Origin::Searched);

    let exe = std::env::current_exe().expect("test binary");
    let out = Command::new(exe)
        .args([
            "child_replays",
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, &dir)
        .output()
        .expect("spawn the child");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "child failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let line = stdout
        .lines()
        .find_map(|l| l.split_once("CHILD-SCHEDULE ").map(|(_, s)| s))
        .unwrap_or_else(|| panic!("the child printed no schedule:\n{stdout}"));
    assert_eq!(line, first.kernels[0].schedule_ron.replace('\n', " "));
}

/// The child half of the test above; does nothing when run on its own.
#[test]
#[ignore = "run by a_second_process_replays_the_winner_of_the_first as a child process"]
fn child_replays() {
    let Some(dir) = std::env::var_os(CHILD_ENV) else {
        return;
    };
    let report = run(&options(std::path::Path::new(&dir))).expect("child run");
    assert_eq!(report.kernels[0].origin, Origin::Replayed);
    assert_eq!(report.totals.disk_hits, 1);
    // The winner's two kernels come from the first process's kernel store: no compile.
    assert_eq!(report.totals.kernels_compiled, 0);
    assert_eq!(report.totals.kernels_loaded, 2);
    println!(
        "CHILD-SCHEDULE {}",
        report.kernels[0].schedule_ron.replace('\n', " ")
    );
}

const SEARCH_CHILD_ENV: &str = "KCACHE_TESTS_SEARCH_CHILD_CACHE_DIR";

fn two_kernels(dir: &std::path::Path) -> DemoOptions {
    let mut o = DemoOptions::new(dir);
    o.kernels = Some(vec!["chain".to_string(), "rowdot".to_string()]);
    (o.round1, o.round2, o.reps, o.progress) = (3, 1, 1, false);
    o
}

#[test]
fn concurrent_processes_share_one_directory_without_errors() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("cache");
    let exe = std::env::current_exe().expect("test binary");
    // Two demo processes search the same kernels at once and both store their winners
    // (last write wins); neither may fail, and no torn entry or staging may remain.
    let children: Vec<_> = (0..2)
        .map(|_| {
            Command::new(&exe)
                .args([
                    "child_searches",
                    "--exact",
                    "--ignored",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env(SEARCH_CHILD_ENV, &dir)
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .expect("spawn a child")
        })
        .collect();
    for child in children {
        let out = child.wait_with_output().expect("child ran");
        assert!(
            out.status.success(),
            "child failed:\n{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let inventory = schedule_cache::admin::inventory(&dir).expect("inventory");
    assert_eq!(inventory.entries.len(), 2);
    assert!(inventory.staging.is_empty(), "{:?}", inventory.staging);
    for entry in &inventory.entries {
        schedule_cache::admin::verify_entry(&dir, entry).expect("whole entry");
    }
    let after = run(&two_kernels(&dir)).expect("run after the children");
    assert_eq!(after.replayed(), 2);
}

/// The child half of the test above; does nothing when run on its own.
#[test]
#[ignore = "run by concurrent_processes_share_one_directory_without_errors as a child process"]
fn child_searches() {
    let Some(dir) = std::env::var_os(SEARCH_CHILD_ENV) else {
        return;
    };
    let report = run(&two_kernels(std::path::Path::new(&dir))).expect("child run");
    assert_eq!(report.kernels.len(), 2);
}
