//! kcache side by side with ccache on the demo's stream of rendered kernels, in a second
//! process (printed figures, see `xtask/src/bench.rs`):
//!
//! - `kcache_vs_ccache_compiles`: kernels the second process compiles with kcache's
//!   persistent kernel store, against the compiles ccache performs (its cache misses) on
//!   the same second stream after it compiled the first;
//! - `kcache_vs_ccache_seconds`: the second process's resolve time (loads and compiles)
//!   against ccache's wall time on its stream (each kernel `ccache cc -c`, then linked
//!   into a shared object, as a ccache user builds one).
//!
//! The two processes are two tuning jobs sharing one kernel store (and one ccache
//! directory) with separate schedule stores, so both search: the first tunes softmax
//! and chain; the second tunes rowdot, chain and softmax, in that order, so it renders
//! the shared kernels under other names (ccache keys on text; kcache's
//! canonical keys do not see names). Each demo run is this binary re-run as a worker.
//! With `--bench` it prints the two `FIGURE` lines; without (as `cargo xtask test` runs
//! it) a smaller search, checking that kcache compiled fewer.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use kcache_demo::{DemoOptions, run};

const ROLE: &str = "KCACHE_VS_CCACHE_ROLE";

/// One demo run as a worker: prints `RESULT <compiled> <resolve s> <rendered>`.
fn worker(job: &str) {
    let var = |n: &str| PathBuf::from(std::env::var(n).expect(n));
    let small = std::env::var("KCACHE_VS_CCACHE_SMALL").is_ok();
    let mut o = DemoOptions::new(var("KCACHE_VS_CCACHE_SCHEDULES"));
    o.kernel_store_dir = Some(var("KCACHE_VS_CCACHE_KERNELS"));
    o.dump_kernels = Some(var("KCACHE_VS_CCACHE_DUMP"));
    let kernels: &[&str] = if job == "first" {
        &["softmax", "chain"]
    } else {
        &["rowdot", "chain", "softmax"]
    };
    o.kernels = Some(kernels.iter().map(|k| k.to_string()).collect());
    (o.round1, o.round2, o.reps, o.progress) = if small {
        (2, 0, 1, false)
    } else {
        (4, 2, 1, false)
    };
    let report = run(&o).expect("the demo runs");
    let t = report.totals;
    println!(
        "RESULT {} {:.6} {}",
        t.kernels_compiled, t.compile_seconds, t.kernels_rendered
    );
}

struct Dirs {
    root: PathBuf,
    kernels: PathBuf,
    ccache: PathBuf,
}

fn demo(job: &str, dirs: &Dirs, dump: &Path, small: bool) -> (u64, f64, u64) {
    let mut cmd = Command::new(std::env::current_exe().expect("bench binary"));
    cmd.env(ROLE, job)
        .env("KCACHE_VS_CCACHE_SCHEDULES", dirs.root.join(job))
        .env("KCACHE_VS_CCACHE_KERNELS", &dirs.kernels)
        .env("KCACHE_VS_CCACHE_DUMP", dump);
    if small {
        cmd.env("KCACHE_VS_CCACHE_SMALL", "1");
    }
    let out = cmd.output().expect("spawn the demo worker");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "demo worker {job} failed: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let line = stdout
        .lines()
        .find_map(|l| l.strip_prefix("RESULT "))
        .unwrap_or_else(|| panic!("no RESULT from {job}: {stdout}"));
    let w: Vec<&str> = line.split_whitespace().collect();
    (
        w[0].parse().expect("compiled"),
        w[1].parse().expect("seconds"),
        w[2].parse().expect("rendered"),
    )
}

fn ccache(dirs: &Dirs) -> Command {
    let mut cmd = Command::new("ccache");
    // Only the text decides, as in a plain ccache set-up (no sloppiness).
    cmd.env("CCACHE_DIR", &dirs.ccache)
        .env_remove("CCACHE_SLOPPINESS")
        .env_remove("CCACHE_DISABLE");
    cmd
}

/// Compiles every dumped kernel through `ccache cc -c` and links it into a shared
/// object; returns the wall time.
fn ccache_stream(dirs: &Dirs, dump: &Path) -> f64 {
    let options: Vec<String> = std::fs::read_to_string(dump.join("options"))
        .unwrap_or_default()
        .lines()
        .filter(|l| !l.is_empty())
        .map(String::from)
        .collect();
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let out = dump.join("out");
    std::fs::create_dir_all(&out).expect("out dir");
    let mut n = 0;
    let start = Instant::now();
    while dump.join(format!("{n}.c")).is_file() {
        let c = dump.join(format!("{n}.c"));
        let o = out.join(format!("{n}.o"));
        let status = ccache(dirs)
            .arg(&cc)
            .args(["-O2", "-fPIC"])
            .args(&options)
            .arg("-c")
            .arg(&c)
            .arg("-o")
            .arg(&o)
            .status()
            .expect("run ccache (Debian's ccache: cargo xtask test and .ci/run install it)");
        assert!(status.success(), "ccache cc failed on {}", c.display());
        let status = Command::new(&cc)
            .arg("-shared")
            .arg(&o)
            .arg("-o")
            .arg(out.join(format!("{n}.so")))
            .status()
            .expect("link");
        assert!(status.success(), "linking {} failed", o.display());
        n += 1;
    }
    start.elapsed().as_secs_f64()
}

/// ccache's cache misses (compiles it performed) since its statistics were zeroed.
fn ccache_misses(dirs: &Dirs) -> u64 {
    let out = ccache(dirs).arg("--print-stats").output().expect("ccache");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("cache_miss\t"))
        .and_then(|v| v.trim().parse().ok())
        .expect("ccache --print-stats has cache_miss")
}

fn main() {
    if let Ok(job) = std::env::var(ROLE) {
        worker(&job);
        return;
    }
    let bench = std::env::args().any(|a| a == "--bench");
    let tmp = tempfile::tempdir().expect("tmp");
    let dirs = Dirs {
        root: tmp.path().to_path_buf(),
        kernels: tmp.path().join("kernels"),
        ccache: tmp.path().join("ccache"),
    };
    let (d1, d2) = (tmp.path().join("dump1"), tmp.path().join("dump2"));
    // The first job, then ccache compiles the first job's stream (filling its cache).
    demo("first", &dirs, &d1, !bench);
    ccache_stream(&dirs, &d1);
    // The second job; ccache on the second job's stream.
    let (kcache_compiled, kcache_seconds, rendered) = demo("second", &dirs, &d2, !bench);
    let zeroed = ccache(&dirs)
        .arg("-z")
        .stdout(std::process::Stdio::null())
        .status()
        .expect("ccache -z");
    assert!(zeroed.success());
    let ccache_seconds = ccache_stream(&dirs, &d2);
    let ccache_compiled = ccache_misses(&dirs);
    assert!(
        kcache_compiled < ccache_compiled,
        "kcache compiled {kcache_compiled}, ccache {ccache_compiled} of {rendered} kernels"
    );
    if bench {
        println!("FIGURE kcache_vs_ccache_compiles {kcache_compiled} {ccache_compiled}");
        println!("FIGURE kcache_vs_ccache_seconds {kcache_seconds:.6} {ccache_seconds:.6}");
    }
    println!(
        "second process, {rendered} kernels rendered: kcache compiled {kcache_compiled} in {kcache_seconds:.2} s; ccache compiled {ccache_compiled} in {ccache_seconds:.2} s"
    );
}
