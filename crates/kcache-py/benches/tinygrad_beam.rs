//! tinygrad's BEAM search over a small model (`tinygrad_beam_model.py`: two convolutions
//! and two matmul layers) on its CPU device, each run a fresh Python process, through kcache
//! (`python -m kcache.tinygrad`, a kernel store) and through tinygrad's own compile cache
//! (its `CACHEDB`), a first process then a second one over the same caches:
//!
//! - `tinygrad_beam_second_run_vs_first`: kcache's second process over its first (seconds
//!   of search and run; tinygrad's BEAM result cache on, as it is by default, so the second
//!   process compiles only the chosen kernels, all from the store);
//! - `tinygrad_beam_second_run_vs_tinygrad_cache`: that second process over tinygrad's own
//!   second process (its compile cache and BEAM result cache);
//! - `tinygrad_beam_first_run_vs_tinygrad`: kcache's first process over tinygrad's own
//!   first (what routing every compile through kcache costs or saves cold);
//! - `tinygrad_beam_research_second_run_vs_first`: the same with `IGNORE_BEAM_CACHE=1`: the
//!   second process searches again (its candidates follow its own timings, so it meets
//!   kernels the first never compiled);
//! - `tinygrad_beam_disk_bytes_vs_tinygrad_cache`: kcache's store after the two processes
//!   (bytes) over tinygrad's cache database after its two.
//!
//! Compiles (kcache's, from `KCACHE_TINYGRAD_LOG` across the workers) are printed as `INFO`
//! lines. With `--bench` it prints `FIGURE` lines (`cargo xtask bench`, which builds the
//! release wheel into the venv first); `KCACHE_BENCH_QUICK=1` or no `--bench` (a test run)
//! makes the model one matmul layer. It needs the venv `target/kcache-venv` with the kcache wheel
//! and tinygrad (`cargo xtask wheel` and the pins): under `--bench` a missing one fails;
//! a test run without it says so and measures nothing.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

/// The venv's Python (`target/kcache-venv/bin/python` of the workspace, or
/// `$KCACHE_VENV_PYTHON`).
fn python() -> PathBuf {
    std::env::var_os("KCACHE_VENV_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/kcache-venv/bin/python")
        })
}

/// One process's measurement.
struct Run {
    /// Seconds of search and run, as the script measured them.
    seconds: f64,
    /// Wall seconds of the whole process.
    wall: f64,
    /// kcache's compiles, loads and in-memory answers (from its log), if through kcache.
    counts: [u64; 3],
}

/// Runs the model once: through kcache with `store`, else with tinygrad's own compiler.
fn run(py: &Path, dir: &Path, store: Option<&Path>, cachedb: &Path, env: &[(&str, &str)]) -> Run {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/tinygrad_beam_model.py");
    let log = dir.join(format!("log-{}", std::process::id()));
    let _ = std::fs::remove_file(&log);
    let mut cmd = Command::new(py);
    if let Some(store) = store {
        cmd.args(["-m", "kcache.tinygrad"])
            .env("KCACHE_TINYGRAD", store)
            .env("KCACHE_TINYGRAD_LOG", &log);
    }
    cmd.arg(&script)
        .env("DEV", "CPU")
        .env("CACHEDB", cachedb)
        .envs(env.iter().copied())
        .env_remove("DEBUG");
    let start = Instant::now();
    let out = cmd.output().expect("the venv's Python runs");
    let wall = start.elapsed().as_secs_f64();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "tinygrad_beam_model.py failed ({}):\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let seconds = stdout
        .lines()
        .find_map(|l| l.strip_prefix("seconds "))
        .and_then(|s| s.trim().parse().ok())
        .expect("the script prints its seconds");
    let mut counts = [0u64; 3];
    for line in std::fs::read_to_string(&log).unwrap_or_default().lines() {
        match line.split_whitespace().nth(1) {
            Some("compiled") => counts[0] += 1,
            Some("from_store") => counts[1] += 1,
            Some("from_memory") => counts[2] += 1,
            _ => {}
        }
    }
    let _ = std::fs::remove_file(&log);
    Run {
        seconds,
        wall,
        counts,
    }
}

/// Bytes of a SQLite database `path` with its write-ahead log and shared-memory files.
fn db_bytes(path: &Path) -> u64 {
    ["", "-wal", "-shm", "-journal"]
        .iter()
        .map(|suffix| {
            let mut p = path.as_os_str().to_owned();
            p.push(suffix);
            disk_bytes(Path::new(&p))
        })
        .sum()
}

/// Bytes of the files under `path`.
fn disk_bytes(path: &Path) -> u64 {
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return 0;
    };
    if !meta.is_dir() {
        return meta.len();
    }
    std::fs::read_dir(path)
        .map(|entries| entries.flatten().map(|e| disk_bytes(&e.path())).sum())
        .unwrap_or(0)
}

fn main() {
    let bench = std::env::args().any(|a| a == "--bench");
    let quick = !bench || std::env::var("KCACHE_BENCH_QUICK").is_ok_and(|v| v == "1");
    let py = python();
    let ready = Command::new(&py)
        .args(["-c", "import kcache.tinygrad"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !ready {
        assert!(
            !bench,
            "{} cannot import kcache.tinygrad: build the wheel into the venv (cargo xtask wheel \
             --release) and install the pins (crates/kcache-py/requirements.txt)",
            py.display()
        );
        eprintln!(
            "tinygrad_beam: {} cannot import kcache.tinygrad; nothing measured (cargo xtask wheel)",
            py.display()
        );
        return;
    }
    let dir = std::env::temp_dir().join(format!("kcache-tinygrad-beam-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temporary directory");
    // Quick: one matmul layer over 4x4 images, upcasts up to 4; full: two convolutions and
    // two matmul layers over 8x8, tinygrad's default upcasts.
    let (size, layers, upcast) = if quick {
        ("4", "tiny", "4")
    } else {
        ("8", "full", "256")
    };
    let model = [
        ("BEAM", "1"),
        ("MODEL_SIZE", size),
        ("MODEL_LAYERS", layers),
        ("BEAM_UPCAST_MAX", upcast),
    ];
    let mut research = model.to_vec();
    research.push(("IGNORE_BEAM_CACHE", "1"));
    let store = dir.join("store");
    let k_db = dir.join("kcache.db");
    let k1 = run(&py, &dir, Some(&store), &k_db, &model);
    let k2 = run(&py, &dir, Some(&store), &k_db, &model);
    let o_db = dir.join("own.db");
    let o1 = run(&py, &dir, None, &o_db, &model);
    let o2 = run(&py, &dir, None, &o_db, &model);
    let store_bytes = disk_bytes(&store);
    let own_bytes = db_bytes(&o_db);
    let r_store = dir.join("store-research");
    let r_db = dir.join("research.db");
    let r1 = run(&py, &dir, Some(&r_store), &r_db, &research);
    let r2 = run(&py, &dir, Some(&r_store), &r_db, &research);
    for (name, r) in [
        ("kcache_first", &k1),
        ("kcache_second", &k2),
        ("tinygrad_first", &o1),
        ("tinygrad_second", &o2),
        ("research_first", &r1),
        ("research_second", &r2),
    ] {
        println!(
            "INFO {name} seconds {:.3} wall {:.3} compiled {} from_store {} from_memory {}",
            r.seconds, r.wall, r.counts[0], r.counts[1], r.counts[2]
        );
    }
    println!(
        "INFO disk kcache_store {store_bytes} kcache_cachedb {} tinygrad_cachedb {own_bytes}",
        db_bytes(&k_db)
    );
    // The second kcache process compiles nothing: every kernel comes from the store.
    assert_eq!(
        k2.counts[0], 0,
        "the second process compiled {} kernels",
        k2.counts[0]
    );
    println!(
        "FIGURE tinygrad_beam_second_run_vs_first {} {}",
        k2.seconds, k1.seconds
    );
    println!(
        "FIGURE tinygrad_beam_second_run_vs_tinygrad_cache {} {}",
        k2.seconds, o2.seconds
    );
    println!(
        "FIGURE tinygrad_beam_first_run_vs_tinygrad {} {}",
        k1.seconds, o1.seconds
    );
    println!(
        "FIGURE tinygrad_beam_research_second_run_vs_first {} {}",
        r2.seconds, r1.seconds
    );
    println!(
        "FIGURE tinygrad_beam_disk_bytes_vs_tinygrad_cache {} {}",
        store_bytes.max(1),
        own_bytes.max(1)
    );
    let _ = std::fs::remove_dir_all(&dir);
}
