//! `cargo xtask bench [--quick]`: runs every criterion benchmark of the workspace
//! and prints one `BENCH <name> <ratio> <unit>` line per figure.
//!
//! The convention every benchmark follows: a criterion *group* is one figure, named
//! for it, holding a function `subject` (what kcache does) and a function
//! `baseline` (what it is compared with), measured in the same process and run.
//! The figure is the ratio of their median times, so it survives a noisy, shared
//! machine far better than an absolute time. [`TARGETS`] names each figure's
//! baseline and the target the issue set for it.

use std::fs;
use std::path::{Path, PathBuf};

/// `(figure, baseline it is measured against, target ratio at most)`.
const TARGETS: &[(&str, &str, f64)] = &[
    ("canonical_key_1mib", "SHA-256 of the same bytes", 4.0),
    ("resolve_all_hit_1000", "1,000 raw dashmap gets", 3.0),
    (
        "resolve_all_hit_1000_vs_quick_cache",
        "1,000 quick_cache gets",
        f64::NAN,
    ),
    (
        "compile_64_split2",
        "the same 64 kernels compiled whole",
        0.6,
    ),
    ("disk_lookup", "std::fs::read + RON parse of the file", 3.0),
    (
        "disk_store",
        "a plain atomic write of the same bytes",
        f64::NAN,
    ),
    (
        "redis_lookup",
        "a raw GET + RON parse of the same entry",
        f64::NAN,
    ),
    (
        "redis_two_level_local_hit",
        "the Redis store's lookup of the same entry",
        f64::NAN,
    ),
    ("memo_hit_vs_dashmap", "a raw dashmap get", 1.5),
    ("memo_hit_vs_moka", "moka get_with on the same keys", 1.0),
];

/// Runs the benchmarks, then reads criterion's estimates and prints the figures.
pub(crate) fn run(root: &Path, args: &[String]) -> Result<(), String> {
    let quick = args.iter().any(|a| a == "--quick");
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"));
    let criterion_dir = target.join("criterion");
    // Only figures measured in this run are reported.
    let _ = fs::remove_dir_all(&criterion_dir);
    // `--bench '*'` selects the benchmark targets only: a library's own test
    // harness would reject criterion's flags.
    let mut cargo_args = vec![
        "bench",
        "--workspace",
        "--all-features",
        "--bench",
        "*",
        "--",
    ];
    if quick {
        cargo_args.extend(["--quick", "--warm-up-time", "1", "--noplot"]);
    } else {
        cargo_args.push("--noplot");
    }
    crate::cargo(&cargo_args)?;
    let figures = collect(&criterion_dir)?;
    if figures.is_empty() {
        return Err(format!(
            "no figures found under {}",
            criterion_dir.display()
        ));
    }
    println!();
    for f in &figures {
        println!("BENCH {} {:.3} x", f.name, f.ratio);
    }
    println!();
    println!(
        "{:<38} {:>8} {:>8}  {:<7} baseline",
        "figure", "ratio", "target", "met"
    );
    for f in &figures {
        let (baseline, target) = TARGETS
            .iter()
            .find(|(n, _, _)| *n == f.name)
            .map(|(_, b, t)| (*b, *t))
            .unwrap_or(("baseline", f64::NAN));
        let (target_s, met) = if target.is_nan() {
            ("-".to_string(), "-")
        } else if f.ratio <= target {
            (format!("<= {target}"), "yes")
        } else {
            (format!("<= {target}"), "NO")
        };
        println!(
            "{:<38} {:>8.3} {:>8}  {:<7} {} (subject {:.1} µs, baseline {:.1} µs)",
            f.name,
            f.ratio,
            target_s,
            met,
            baseline,
            f.subject_ns / 1e3,
            f.baseline_ns / 1e3
        );
    }
    Ok(())
}

struct Figure {
    name: String,
    ratio: f64,
    subject_ns: f64,
    baseline_ns: f64,
}

fn collect(dir: &Path) -> Result<Vec<Figure>, String> {
    let mut out = Vec::new();
    let Ok(rd) = fs::read_dir(dir) else {
        return Ok(out);
    };
    let mut groups: Vec<PathBuf> = rd.flatten().map(|e| e.path()).collect();
    groups.sort();
    for group in groups {
        let subject = median_ns(&group.join("subject/new/estimates.json"));
        let baseline = median_ns(&group.join("baseline/new/estimates.json"));
        if let (Some(s), Some(b)) = (subject, baseline) {
            let name = group
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            out.push(Figure {
                name,
                ratio: s / b,
                subject_ns: s,
                baseline_ns: b,
            });
        }
    }
    Ok(out)
}

fn median_ns(path: &Path) -> Option<f64> {
    let text = fs::read_to_string(path).ok()?;
    let v: serde_json::Value = serde_json::from_str(&text).ok()?;
    v.get("median")?.get("point_estimate")?.as_f64()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_criterion_estimates() {
        let dir = std::env::temp_dir().join(format!("xtask-bench-{}", std::process::id()));
        for (f, v) in [("subject", 30.0), ("baseline", 10.0)] {
            let p = dir.join("g").join(f).join("new");
            fs::create_dir_all(&p).expect("mkdir");
            fs::write(
                p.join("estimates.json"),
                format!("{{\"median\":{{\"point_estimate\":{v}}}}}"),
            )
            .expect("write");
        }
        fs::create_dir_all(dir.join("lonely/subject/new")).expect("mkdir");
        let figs = collect(&dir).expect("collect");
        let _ = fs::remove_dir_all(&dir);
        assert_eq!(figs.len(), 1);
        assert_eq!(figs[0].name, "g");
        assert!((figs[0].ratio - 3.0).abs() < 1e-9);
    }
}
