//! `cargo xtask fuzz TARGET [--seconds N]`: coverage-guided fuzzing with cargo-fuzz 0.13
//! (installed with `cargo install cargo-fuzz --locked` if missing) on the pinned stable
//! toolchain (`RUSTC_BOOTSTRAP=1`, sanitizer `none`: the crates forbid unsafe code).
//!
//! Targets (in `fuzz/fuzz_targets/`): `differential` (the fast renamer agrees with the
//! lexer), `canonical_kernel`, `saved_schedule` (`SavedSchedule::from_ron`) and
//! `schedule_entry` (entry decoding through the disk store's lookup), the last three
//! never panicking. The committed seeds in `fuzz/corpus/TARGET` are read, never written:
//! new inputs go to `target/fuzz-corpus/TARGET`.

use std::process::Command;

use crate::project_root;

/// The fuzz targets.
pub(crate) const TARGETS: [&str; 4] = [
    "differential",
    "canonical_kernel",
    "saved_schedule",
    "schedule_entry",
];

/// Runs one target (or `all`, one after another) for the given seconds.
pub(crate) fn run(rest: &[String]) -> Result<(), String> {
    let mut target = None;
    let mut seconds = "60".to_string();
    let mut it = rest.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--seconds" => match it.next() {
                Some(s) if s.parse::<u64>().is_ok() => seconds = s.clone(),
                _ => return Err("--seconds needs a number".into()),
            },
            t if target.is_none() && (TARGETS.contains(&t) || t == "all") => {
                target = Some(t.to_string())
            }
            other => {
                return Err(format!(
                    "unknown argument {other}: use TARGET [--seconds N], TARGET one of {} or all",
                    TARGETS.join(", ")
                ));
            }
        }
    }
    let target = target.ok_or_else(|| format!("name a target: {} or all", TARGETS.join(", ")))?;
    ensure_cargo_fuzz()?;
    let targets: Vec<&str> = if target == "all" {
        TARGETS.to_vec()
    } else {
        TARGETS.iter().copied().filter(|t| *t == target).collect()
    };
    for t in targets {
        run_one(t, &seconds)?;
    }
    Ok(())
}

fn run_one(target: &str, seconds: &str) -> Result<(), String> {
    let root = project_root();
    let work = root.join("target/fuzz-corpus").join(target);
    std::fs::create_dir_all(&work).map_err(|e| format!("{}: {e}", work.display()))?;
    let seeds = root.join("fuzz/corpus").join(target);
    let max_time = format!("-max_total_time={seconds}");
    let args = [
        "fuzz",
        "run",
        "-s",
        "none",
        target,
        work.to_str().unwrap_or("target/fuzz-corpus"),
        seeds.to_str().unwrap_or("fuzz/corpus"),
        "--",
        &max_time,
        "-max_len=4096",
        "-print_final_stats=1",
    ];
    eprintln!("$ RUSTC_BOOTSTRAP=1 cargo {}", args.join(" "));
    let status = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .args(args)
        .env("RUSTC_BOOTSTRAP", "1")
        .current_dir(&root)
        .status()
        .map_err(|e| format!("could not run cargo fuzz: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!(
            "fuzz target {target} failed ({status}); a crashing input is in fuzz/artifacts/{target}"
        ))
    }
}

/// Installs cargo-fuzz 0.13 if `cargo fuzz` is missing.
fn ensure_cargo_fuzz() -> Result<(), String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let present = Command::new(&cargo)
        .args(["fuzz", "--version"])
        .output()
        .is_ok_and(|o| o.status.success());
    if present {
        return Ok(());
    }
    eprintln!("$ cargo install cargo-fuzz --version ^0.13 --locked");
    let status = Command::new(&cargo)
        .args(["install", "cargo-fuzz", "--version", "^0.13", "--locked"])
        .status()
        .map_err(|e| format!("could not run cargo install: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err("could not install cargo-fuzz".into())
    }
}
