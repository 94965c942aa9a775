//! `cargo xtask soundness [--cases N] [--seed S] [--cc COMPILER]`: a long soak of the
//! object-code oracle (`crates/canonical-text/tests/gcc_oracle.rs`): N adversarial
//! templates (four kernels and six pairs each; one in three adds the renamed twins of a
//! template holding nothing that refuses renaming) compiled by the real `cc`, or the
//! `--cc` given (`clang`; one template in eight by `clang` whatever it is, with Unicode
//! outside and inside literals), in release mode; the templates draw from that
//! compiler's macro table (`-dM -E`), clang's and gcc's spelling and position built-ins,
//! every attribute syntax and asm operands. Fails on any pair with equal keys and
//! different object code, and prints the counts. Then the merged unit's oracle
//! (`crates/cc-backend/tests/merged_oracle.rs`): N / 10 generated programs (at least one),
//! their companions drawn from issue 35's classes (splices and line ends, the prelude's
//! macro table, block-scope redeclarations, external definitions, references to
//! companions), whose kernels, merged where the rule allows and resolved per kernel, must
//! compute bit for bit what each computes alone (or fail in both); and the same oracle
//! must catch a naive merge and a naive link (their counts are printed).

use crate::cargo_with_env;

/// Runs the oracle with the options in `rest`.
pub(crate) fn run(rest: &[String]) -> Result<(), String> {
    let mut cases = "2000".to_string();
    let mut seed = None;
    let mut cc = None;
    let mut it = rest.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--cases" => cases = value(it.next(), "--cases")?,
            "--seed" => seed = Some(value(it.next(), "--seed")?),
            "--cc" => match it.next() {
                Some(c) if !c.trim().is_empty() => cc = Some(c.clone()),
                _ => return Err("--cc needs a compiler".into()),
            },
            other => {
                return Err(format!(
                    "unknown option {other}: use --cases N [--seed S] [--cc COMPILER]"
                ));
            }
        }
    }
    let programs = (cases.parse::<u64>().unwrap_or(0) / 10).max(1).to_string();
    let mut env = vec![
        ("KCACHE_SOUNDNESS_CASES", cases),
        ("KCACHE_MERGED_ORACLE_PROGRAMS", programs),
    ];
    if let Some(s) = seed {
        env.push(("KCACHE_SOUNDNESS_SEED", s));
    }
    if let Some(c) = cc {
        env.push(("CC", c));
    }
    cargo_with_env(
        &[
            "test",
            "--release",
            "-p",
            "canonical-text",
            "--test",
            "gcc_oracle",
            "--",
            "--nocapture",
        ],
        &env,
    )?;
    cargo_with_env(
        &[
            "test",
            "--release",
            "-p",
            "cc-backend",
            "--test",
            "merged_oracle",
            "--",
            "--nocapture",
        ],
        &env,
    )
}

/// The number after an option.
fn value(v: Option<&String>, option: &str) -> Result<String, String> {
    match v {
        Some(v) if v.parse::<u64>().is_ok() => Ok(v.clone()),
        _ => Err(format!("{option} needs a number")),
    }
}
