//! `kcache stats`, `verify` and `gc` on a schedule-store directory of 100,000 entries
//! (issue 15): wall time of the real command (a child process), in seconds in all and per
//! 1,000 entries, and the command's peak resident set at the large size over the small one
//! (bounded memory: no command holds every entry at once).
//!
//! A measured bench binary (`harness = false`) for `cargo xtask bench --scale`; each command
//! runs `--rounds` times (default 3), alternating small and large directory; with `--bench` it
//! prints `FIGURE <name> <subject> <baseline>` lines (times: seconds against 1 s; memory: the
//! peak at the large size against the peak at the small size) and `#` lines with every
//! round. Without `--bench` (as `cargo xtask test` runs it) it runs a small version (500
//! entries). The directories are filled by writing entry files directly (the bytes `store`
//! writes, without its `fsync`s). Arguments (after `--`): `--entries N` (100000), `--small N`
//! (1000), `--rounds R` (3).

use std::fs;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use test_support::Rng;
use test_support::bench::{arg, summary};
#[path = "../../schedule-cache/benches/fill/mod.rs"]
mod fill;
use fill::fill;

const KCACHE: &str = env!("CARGO_BIN_EXE_kcache");

/// Runs `kcache <args>`; returns its wall time and peak resident set (KiB, sampled from
/// `/proc/<pid>/status` while it runs: `VmHWM` only grows, so the last sample is close to
/// the peak).
fn run(args: &[&str]) -> (Duration, u64) {
    let t = Instant::now();
    let mut child = Command::new(KCACHE)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn kcache");
    let status_path = format!("/proc/{}/status", child.id());
    let mut peak = 0u64;
    loop {
        if let Ok(text) = fs::read_to_string(&status_path)
            && let Some(kib) = text
                .lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        {
            peak = peak.max(kib);
        }
        if let Some(status) = child.try_wait().expect("wait") {
            // verify exits 1 when it finds problems; there are none here.
            assert!(status.success(), "kcache {args:?}: {status}");
            break;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    (t.elapsed(), peak)
}

/// Prints `FIGURE name <median> <baseline>` and the rounds.
fn figure(name: &str, values: &mut [f64], baseline: f64) {
    let rounds: Vec<String> = values.iter().map(|v| format!("{v:.4}")).collect();
    let (m, _, _) = summary(values);
    println!("FIGURE {name} {m:.6} {baseline:.6}");
    println!("# {name}: rounds {}", rounds.join(" "));
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let full = args.iter().any(|a| a == "--bench");
    let entries = arg(&args, "--entries", if full { 100_000 } else { 500 });
    let small_n = arg(&args, "--small", if full { 1000 } else { 100 });
    let rounds = arg(&args, "--rounds", if full { 3 } else { 1 }).max(1);
    let tmp = tempfile::tempdir().expect("tempdir");
    let (small, large) = (tmp.path().join("small"), tmp.path().join("large"));
    let mut rng = Rng(0x853c_49e6_748f_ea9b);
    fill(&small, small_n, &mut rng);
    let t = Instant::now();
    fill(&large, entries, &mut rng);
    println!(
        "# filled {entries} entries in {:.1} s; small directory: {small_n}",
        t.elapsed().as_secs_f64()
    );
    let (s, l) = (
        small.to_str().expect("utf8").to_owned(),
        large.to_str().expect("utf8").to_owned(),
    );
    for cmd in ["stats", "verify", "gc"] {
        let extra: &[&str] = if cmd == "gc" {
            &["--older-than", "3650d"]
        } else {
            &[]
        };
        let (mut total, mut per_k, mut large_mem, mut small_mem) = (vec![], vec![], vec![], vec![]);
        for _ in 0..rounds {
            let (_, small_peak) = run(&[&[cmd, s.as_str()], extra].concat());
            let (took, large_peak) = run(&[&[cmd, l.as_str()], extra].concat());
            total.push(took.as_secs_f64());
            per_k.push(took.as_secs_f64() / entries as f64 * 1000.0);
            large_mem.push(large_peak as f64);
            small_mem.push(small_peak.max(1) as f64);
        }
        let (small_peak, _, _) = summary(&mut small_mem);
        figure(&format!("kcache_{cmd}_s_total"), &mut total, 1.0);
        figure(&format!("kcache_{cmd}_s_per_1000"), &mut per_k, 1.0);
        figure(
            &format!("kcache_{cmd}_peak_memory_growth"),
            &mut large_mem,
            small_peak,
        );
    }
    // The names above, spelled out for xtask's table check:
    // FIGURE kcache_stats_s_total , FIGURE kcache_stats_s_per_1000 ,
    // FIGURE kcache_stats_peak_memory_growth , FIGURE kcache_verify_s_per_1000 ,
    // FIGURE kcache_verify_peak_memory_growth , FIGURE kcache_gc_s_per_1000 ,
    // FIGURE kcache_gc_peak_memory_growth .
}
