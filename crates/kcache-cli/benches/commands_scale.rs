//! `kcache stats`, `verify` and `gc` on a schedule-store directory of 100,000 entries
//! (issue 15): wall time of the real command (a child process), in seconds in all and per
//! 1,000 entries, and the command's peak resident set at the large size over the small one
//! (bounded memory: no command holds every entry at once).
//!
//! A measured bench binary (`harness = false`); each command runs `--rounds` times (default
//! 5), alternating small and large directory; figures are medians with the spread
//! (lowest–highest), printed as `BENCH <name> <value> <unit> <spread>`. The directories are
//! filled by writing entry files directly (the bytes `store` writes, without its `fsync`s).
//! Arguments (after `--`): `--entries N` (100000), `--small N` (1000), `--rounds R` (5).

use std::fs;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use schedule_cache::CacheKey;
use schedule_cache::disk::{DiskCache, Space, StoreOutcome};
use schedule_cache::placement::{Direction, Flip, PlacementEntry, Shipped};

const KCACHE: &str = env!("CARGO_BIN_EXE_kcache");

fn hex(state: &mut u64, n: usize) -> String {
    let mut s = String::with_capacity(n + 16);
    while s.len() < n {
        *state ^= *state >> 12;
        *state ^= *state << 25;
        *state ^= *state >> 27;
        s.push_str(&format!(
            "{:016x}",
            state.wrapping_mul(0x2545_f491_4f6c_dd1d)
        ));
    }
    s.truncate(n);
    s
}

/// Fills `dir` with `n` placement entries of today's key shape (one through `store`, for the
/// lock file and the stamp; the rest written directly).
fn fill(dir: &Path, n: usize, state: &mut u64) {
    for i in 0..n {
        let digest = hex(state, 64);
        let key = CacheKey::new(&format!(
            "{digest}-{}-b{}_f{}_n{}_c{}_p{}_d{}_t{}",
            hex(state, 64),
            hex(state, 6),
            hex(state, 6),
            hex(state, 6),
            hex(state, 6),
            hex(state, 6),
            hex(state, 6),
            hex(state, 6)
        ))
        .expect("key");
        let flips = (0..24)
            .map(|j| Flip {
                node: j * 5 + 1,
                direction: [
                    Direction::Materialize,
                    Direction::Inline,
                    Direction::Footprint,
                ][(j % 3) as usize],
            })
            .collect();
        let e = PlacementEntry::new(&digest, flips, Shipped::Refined);
        if i == 0 {
            let out = DiskCache::new(dir).store(Some(&key), &e).expect("store");
            assert_eq!(out, StoreOutcome::Stored);
        } else {
            let text =
                ron::ser::to_string_pretty(&e, ron::ser::PrettyConfig::default()).expect("encode");
            fs::write(dir.join(Space::Placement.file_name(&key)), text).expect("write");
        }
    }
}

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

fn summary(values: &mut [f64]) -> (f64, f64, f64) {
    values.sort_by(f64::total_cmp);
    (
        values[values.len() / 2],
        values[0],
        values[values.len() - 1],
    )
}

fn line(name: &str, values: &mut [f64], unit: &str) {
    let (m, lo, hi) = summary(values);
    println!("BENCH {name} {m:.3} {unit} {lo:.3}-{hi:.3}");
}

fn arg(args: &[String], flag: &str, default: usize) -> usize {
    args.iter()
        .position(|a| a == flag)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let entries = arg(&args, "--entries", 100_000);
    let small_n = arg(&args, "--small", 1000);
    let rounds = arg(&args, "--rounds", 5).max(1);
    let tmp = tempfile::tempdir().expect("tempdir");
    let (small, large) = (tmp.path().join("small"), tmp.path().join("large"));
    let mut state = 0x853c_49e6_748f_ea9b_u64;
    fill(&small, small_n, &mut state);
    let t = Instant::now();
    fill(&large, entries, &mut state);
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
        let (mut total, mut per_k, mut mem) = (vec![], vec![], vec![]);
        for _ in 0..rounds {
            let (_, small_peak) = run(&[&[cmd, s.as_str()], extra].concat());
            let (took, large_peak) = run(&[&[cmd, l.as_str()], extra].concat());
            total.push(took.as_secs_f64());
            per_k.push(took.as_secs_f64() / entries as f64 * 1000.0);
            mem.push(large_peak as f64 / small_peak.max(1) as f64);
        }
        line(&format!("kcache_{cmd}_total"), &mut total, "s");
        line(&format!("kcache_{cmd}_per_1000"), &mut per_k, "s");
        line(&format!("kcache_{cmd}_peak_memory_growth"), &mut mem, "x");
    }
}
