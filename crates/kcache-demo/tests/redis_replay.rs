//! The demo on a shared Redis server: one process tunes with `redis` set and stores its
//! winners in its directory and on the server; a second process (simulating a second machine)
//! with an empty directory replays them from the server, back-filling its directory.
//!
//! Needs `redis-server`: without it the test fails, saying how to install one (`cargo xtask
//! test` installs it when missing and it may).

use std::process::{Command, Stdio};

use kcache_demo::{DemoOptions, Origin, run};
use test_support::child::{self, stdout_of};
use test_support::redis::RedisServer;

/// Runs the demo binary (a separate process: another "machine") on `dir` with the shared
/// server, and returns the report line of the `chain` kernel.
fn machine(dir: &std::path::Path, url: &str) -> String {
    let stdout = stdout_of(
        Command::new(env!("CARGO_BIN_EXE_kcache-demo"))
            .arg("--cache-dir")
            .arg(dir)
            .args(["--redis", url, "--kernels", "chain", "--quiet"])
            .args(["--round1", "3", "--round2", "1", "--reps", "1"])
            .stdin(Stdio::null()),
    );
    child::line(&stdout, "chain ").to_owned()
}

#[test]
fn a_second_machine_with_an_empty_directory_replays_winners_from_redis() {
    let server = RedisServer::start();
    let url = server.url();
    let tmp = tempfile::tempdir().expect("tempdir");

    // Machine A searches and publishes its winner to its directory and to the server.
    let a = machine(&tmp.path().join("machine-a"), &url);
    assert!(a.split_whitespace().nth(1) == Some("searched"), "{a}");

    // Machine B: an empty directory, the same server: it replays A's winner.
    let b_dir = tmp.path().join("machine-b");
    let b = machine(&b_dir, &url);
    assert!(b.split_whitespace().nth(1) == Some("replayed"), "{b}");

    // The winner was back-filled into B's directory: without the server, B replays it from
    // there (in process, to compare the saved schedules exactly).
    drop(server);
    let mut o = DemoOptions::new(&b_dir);
    o.kernels = Some(vec!["chain".to_string()]);
    (o.round1, o.round2, o.reps, o.progress) = (3, 1, 1, false);
    let local = run(&o).expect("local replay");
    assert_eq!(local.kernels[0].origin, Origin::Replayed);
    assert_eq!(local.kernels[0].disk_lookup, "hit");
    // The same schedule on all three runs (the report's last column).
    let sched = &local.kernels[0].schedule;
    assert!(
        a.contains(sched.as_str()) && b.contains(sched.as_str()),
        "{sched}\n{a}\n{b}"
    );
}
