//! Project automation for the kcache workspace, in the rust-analyzer style:
//! `cargo xtask <command>` (the alias lives in `.cargo/config.toml`).
//!
//! - `test`: every test of the workspace (unit, integration, property, doc tests,
//!   and each benchmark run once in test mode so it cannot rot). First it makes sure
//!   the binaries the tests need are present, installing them on a fresh machine when
//!   it may (see [`setup`]); a test that needs `redis-server` fails without it, never skips.
//!   Then the Python package: its wheel into a venv with the pinned numpy, pytest and
//!   tinygrad, and `pytest crates/kcache-py/tests` ([`python`]); a missing Python, venv or
//!   pip fails, never skips.
//!   Without the kernel corpus (`../shared/corpus`, or `$KCACHE_CORPUS`) canonical-text's
//!   corpus tests check nothing: `test` warns, and fails when `CI` is set.
//! - `ci`: `cargo fmt --check`, clippy with `-D warnings` on all targets, tidy, a type
//!   check of the fuzz targets (`fuzz/`, a workspace of its own), `cargo doc` with
//!   `-D warnings` (every doc link resolves), then `test`.
//! - `wheel [--release]`: the Python package's wheel (`crates/kcache-py`, built by maturin
//!   into `target/wheels`) installed into the venv `target/kcache-venv` (see [`python`]).
//! - `pytest`: only the Python package's part of `test` (wheel, venv, pytest).
//! - `tidy`: the repository rules of [`tidy`] (also run by `cargo test` as a plain test),
//!   the import-circle rule of [`imports`] and the public-API snapshot of [`api`] among them.
//! - `api [--bless] [--count]`: the public-API snapshot alone (see [`api`]): checks
//!   `docs/api/<crate>.txt` against the source, `--bless` rewrites them, `--count` prints
//!   each library's number of public names.
//! - `bench [--quick] [--scale] [--rounds N] [--only NAME,…]`: measures every figure (a
//!   criterion group or a figure a bench binary prints) over several rounds and prints one
//!   `BENCH <name> <ratio> <unit> <min>-<max> load <lo>-<hi> quiet <n>` line per figure
//!   (see [`mod@bench`]).
//! - `demo [ARGS…]`: the end-to-end autotuning demo (`kcache-demo`), built in release mode
//!   with cargo's progress shown (a line says the first build takes minutes), then run with
//!   the arguments (`--help`: the demo's flags).
//! - `soundness [--cases N] [--seed S] [--cc COMPILER]`: a long soak of the object-code
//!   oracle (gcc, or the compiler given: clang).
//! - `fuzz TARGET|all [--seconds N]`: coverage-guided fuzzing (see [`fuzz`]).
//!
//! `cargo xtask <command> --help` (or `-h`) prints the command's usage and flags, and does
//! nothing else; `test`, `ci` and `tidy` take no arguments and refuse any.

mod api;
mod bench;
mod fuzz;
mod imports;
mod loc;
mod modules;
mod python;
mod setup;
mod soundness;
mod tidy;

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

/// Every command with its flags (printed for `help`, `--help` and an unknown command).
const USAGE: &str = "usage: cargo xtask <command>   (`cargo xtask <command> --help`: its flags)
  test                      every test (unit, property, integration, doc tests, benches once)
  ci                        fmt --check, clippy -D warnings, tidy, check fuzz/, doc -D warnings, then test
  wheel [--release]         the Python package's wheel, installed into target/kcache-venv
  pytest                    the Python package's tests alone (wheel, venv, pytest)
  tidy                      the repository rules (import circles and the API snapshot among them)
  api [--bless] [--count]   the public-API snapshot docs/api/<crate>.txt: check, rewrite, count
  loc [CRATE…]              non-test source lines per crate
  bench [--quick] [--scale] [--rounds N] [--only NAME,…]
                            the BENCH figures
  demo [ARGS…]              the autotuning demo (`cargo xtask demo --help` lists its flags)
  soundness [--cases N] [--seed S] [--cc COMPILER]
                            a long soak of the gcc object-code oracle
  fuzz TARGET|all [--seconds N]
                            coverage-guided fuzzing";

/// `cargo xtask api --help`.
const API_USAGE: &str = "usage: cargo xtask api [--bless] [--count]
Checks each library's public API (crate-root items, `pub use` re-exports, items of `pub mod`s,
pub methods of pub types with one-line signatures; see xtask/src/api.rs for what is approximated)
against docs/api/<crate>.txt and prints the difference; tidy checks the same.
  --bless   rewrite docs/api/<crate>.txt from the source
  --count   print each library's number of public names";

/// `cargo xtask bench --help`.
const BENCH_USAGE: &str =
    "usage: cargo xtask bench [--quick] [--scale] [--rounds N] [--settle S] [--only NAME,…]
Measures every figure (a criterion group or a figure a bench binary prints) over several
interleaved rounds and prints one `BENCH <name> <ratio> <unit> <min>-<max> load <lo>-<hi>
quiet <n>` line per figure, then a table against each figure's target.
  --quick        5 rounds in criterion's quick mode, the slow (scale) figures left out
  --scale        the scale figures too in a --quick run (a full run has them)
  --rounds N     exactly N rounds (default 7, or 5 with --quick; cheap binaries get more)
  --settle S     before each round, wait up to S seconds for the load average to fall
  --only a,b     only the figures whose names contain a or b (one matching none is an error)
How figures are measured and added: xtask/src/bench.rs.";

/// `cargo xtask wheel --help`.
const WHEEL_USAGE: &str = "usage: cargo xtask wheel [--release]
Builds the Python package (crates/kcache-py) with maturin into target/wheels and installs it
into the venv target/kcache-venv (made with python3 -m venv, maturin installed from the package
registry at the version crates/kcache-py/requirements.txt pins). Then:
  target/kcache-venv/bin/python -c 'import kcache'
  --release   build with the release profile (default: debug, reusing the workspace's build)";

/// `cargo xtask soundness --help`.
const SOUNDNESS_USAGE: &str = "usage: cargo xtask soundness [--cases N] [--seed S] [--cc COMPILER]
A long soak of the object-code oracle: N adversarial templates compiled by the real compiler
(fails on two texts with equal keys and different object code), then N / 10 merged programs
checked against their kernels compiled alone.
  --cases N      templates (default 2000)
  --seed S       the generator's seed (default: a fixed one, 0x5EED0012)
  --cc COMPILER  the compiler (default cc; clang for the other family)";

/// `cargo xtask fuzz --help` (the targets are listed after it).
const FUZZ_USAGE: &str = "usage: cargo xtask fuzz TARGET|all [--seconds N]
Coverage-guided fuzzing with cargo-fuzz (installed if missing); new inputs go to
target/fuzz-corpus/TARGET, the committed seeds in fuzz/corpus/TARGET are only read.
  TARGET         one of the targets below, or all (one after another)
  --seconds N    how long each target runs (default 60)
targets:";

/// The usage `cargo xtask <cmd> --help` (or `-h`) prints: `None` for `demo`, which passes
/// its arguments on (the demo prints its own flags), and for an unknown command.
fn usage_of(cmd: &str) -> Option<String> {
    Some(match cmd {
        "test" => "usage: cargo xtask test\nEvery test of the workspace (unit, property, integration, doc tests, each bench once); no flags.".into(),
        "ci" => "usage: cargo xtask ci\nfmt --check, clippy -D warnings, tidy, a check of fuzz/, doc -D warnings, then test; no flags.".into(),
        "wheel" => WHEEL_USAGE.into(),
        "pytest" => "usage: cargo xtask pytest\nThe Python package's part of `cargo xtask test`: the wheel into target/kcache-venv with every pin of crates/kcache-py/requirements.txt, tinygrad's test/ from its source distribution, then pytest crates/kcache-py/tests; no flags.".into(),
        "tidy" => "usage: cargo xtask tidy\nThe repository rules (xtask/src/tidy.rs); no flags.".into(),
        "api" => API_USAGE.into(),
        "loc" => "usage: cargo xtask loc [CRATE…]\nNon-test source lines of each crate's src/ (all crates when none is named): every line less the #[cfg(test)] items.".into(),
        "bench" => BENCH_USAGE.into(),
        "soundness" => SOUNDNESS_USAGE.into(),
        "fuzz" => format!("{FUZZ_USAGE} {}", fuzz::TARGETS.join(", ")),
        _ => return None,
    })
}

/// Whether `rest` asks for help (`--help` or `-h` anywhere).
fn wants_help(rest: &[String]) -> bool {
    rest.iter().any(|a| a == "--help" || a == "-h")
}

/// `test`, `ci` and `tidy` take no arguments: one given is refused rather than ignored.
fn no_arguments(cmd: &str, rest: &[String]) -> Result<(), String> {
    match rest.first() {
        None => Ok(()),
        Some(a) => Err(format!(
            "takes no arguments (got {a:?}; `cargo xtask {cmd} --help`)"
        )),
    }
}

/// `cargo xtask wheel [--release]`.
fn wheel_command(rest: &[String]) -> Result<(), String> {
    if let Some(a) = rest.iter().find(|a| a.as_str() != "--release") {
        return Err(format!(
            "unknown argument {a:?} (`cargo xtask wheel --help`)"
        ));
    }
    let release = rest.iter().any(|a| a == "--release");
    python::wheel(&project_root(), release, &["maturin"]).map(|_| ())
}

/// `cargo xtask api [--bless] [--count]`.
fn api_command(rest: &[String]) -> Result<(), String> {
    if let Some(a) = rest
        .iter()
        .find(|a| !matches!(a.as_str(), "--bless" | "--count"))
    {
        return Err(format!("unknown argument {a:?} (`cargo xtask api --help`)"));
    }
    let flag = |f: &str| rest.iter().any(|a| a == f);
    api::command(&project_root(), flag("--bless"), flag("--count"))
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (cmd, rest) = match args.split_first() {
        Some((c, r)) => (c.as_str(), r),
        None => ("help", &[][..]),
    };
    if wants_help(rest)
        && let Some(usage) = usage_of(cmd)
    {
        println!("{usage}");
        return ExitCode::SUCCESS;
    }
    let result = match cmd {
        "test" => no_arguments(cmd, rest).and_then(|()| test()),
        "ci" => no_arguments(cmd, rest).and_then(|()| ci()),
        "tidy" => no_arguments(cmd, rest).and_then(|()| {
            tidy::check(&project_root()).map_err(|problems| {
                for p in &problems {
                    eprintln!("tidy: {p}");
                }
                format!("{} tidy problem(s)", problems.len())
            })
        }),
        "api" => api_command(rest),
        "wheel" => wheel_command(rest),
        "pytest" => no_arguments(cmd, rest).and_then(|()| {
            let root = project_root();
            let corpus = setup::corpus_dir(&root, std::env::var_os("KCACHE_CORPUS")).ok();
            python::pytest(&root, corpus.as_deref())
        }),
        "loc" => loc::command(&project_root(), rest),
        "bench" => setup::ensure_tools().and_then(|()| bench::run(&project_root(), rest)),
        "demo" => demo(rest),
        "soundness" => soundness::run(rest),
        "fuzz" => fuzz::run(rest),
        _ => {
            let help = matches!(cmd, "help" | "-h" | "--help");
            if !help {
                eprintln!("xtask: unknown command {cmd:?}");
            }
            eprintln!("{USAGE}");
            return if help {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            };
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask {cmd}: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The workspace root (the parent of this crate's directory).
pub(crate) fn project_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."))
}

/// Runs `cargo` with `args` in the workspace root, failing on a non-zero exit.
pub(crate) fn cargo(args: &[&str]) -> Result<(), String> {
    cargo_with_env(args, &[])
}

/// [`cargo`] with extra environment variables.
pub(crate) fn cargo_with_env(args: &[&str], env: &[(&str, String)]) -> Result<(), String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    eprintln!("$ cargo {}", args.join(" "));
    let status = Command::new(cargo)
        .args(args)
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .current_dir(project_root())
        .status()
        .map_err(|e| format!("could not run cargo: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("`cargo {}` failed ({status})", args.join(" ")))
    }
}

fn test() -> Result<(), String> {
    setup::ensure_tools()?;
    // canonical-text's corpus tests pass without checking anything when the corpus is
    // absent, and say so only on the test's captured output: CI must not pass that way,
    // and a developer is told where libtest would not show it.
    let corpus = setup::corpus_dir(&project_root(), std::env::var_os("KCACHE_CORPUS"));
    let missing_corpus = match &corpus {
        Ok(_) => None,
        Err(looked) => Some(format!(
            "the kernel corpus is not at {} (a directory holding README.md; \
             $KCACHE_CORPUS names another), so canonical-text's corpus tests \
             (crates/canonical-text/tests/corpus.rs) check nothing",
            looked.display()
        )),
    };
    if let Some(why) = &missing_corpus {
        if setup::is_ci(std::env::var_os("CI")) {
            return Err(format!("{why}; CI does not pass without them"));
        }
        eprintln!("xtask test: warning: {why}");
    }
    // One build of every target (benches included, run once each in test mode),
    // then the doc tests, which `--all-targets` leaves out.
    // `--all-features` turns on optional stores (schedule-cache's `redis`), so
    // their tests run too.
    cargo(&["test", "--workspace", "--all-features", "--all-targets"])?;
    cargo(&["test", "--workspace", "--all-features", "--doc"])?;
    // The Python package: its wheel in a venv, then its pytest suite (tinygrad's included).
    python::pytest(&project_root(), corpus.as_deref().ok())?;
    if let Some(why) = &missing_corpus {
        eprintln!("xtask test: warning: {why}");
    }
    Ok(())
}

fn ci() -> Result<(), String> {
    cargo(&["fmt", "--all", "--", "--check"])?;
    cargo(&[
        "clippy",
        "--workspace",
        "--all-features",
        "--all-targets",
        "--",
        "-D",
        "warnings",
    ])?;
    // Users build the libraries with default features: what only an optional
    // feature uses must not warn there.
    cargo(&["clippy", "--workspace", "--lib", "--", "-D", "warnings"])?;
    tidy::check(&project_root()).map_err(|problems| problems.join("\n"))?;
    // The fuzz targets are a workspace of their own, built only by `cargo xtask fuzz`:
    // type-check them here, so a change that breaks one fails CI, not the next soak.
    cargo(&[
        "check",
        "--manifest-path",
        "fuzz/Cargo.toml",
        "--bins",
        "--locked",
    ])?;
    // Every doc link resolves: a renamed or moved item otherwise breaks one silently.
    cargo_with_env(
        &["doc", "--workspace", "--no-deps", "--all-features"],
        &[("RUSTDOCFLAGS", "-D warnings".to_string())],
    )?;
    test()
}

/// `cargo xtask demo [ARGS…]`: builds the demo in release mode with cargo's progress shown
/// (the first build compiles every dependency: minutes, which a quiet `cargo run` spent
/// printing nothing), then runs it with `rest` (`--help` included: the demo's own flags).
fn demo(rest: &[String]) -> Result<(), String> {
    eprintln!(
        "xtask demo: building the demo in release mode (the first run compiles its \
         dependencies: a few minutes)…"
    );
    cargo(&["build", "--release", "--package", "kcache-demo"])?;
    let mut args = vec![
        "run",
        "--release",
        "--quiet",
        "--package",
        "kcache-demo",
        "--",
    ];
    args.extend(rest.iter().map(String::as_str));
    cargo(&args)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    /// Every command with flags answers `--help` and `-h` with a usage naming each flag its
    /// parser accepts; `demo` is left to the demo.
    #[test]
    fn every_command_with_flags_has_a_usage_naming_its_flags() {
        for (cmd, flags) in [
            (
                "bench",
                &["--quick", "--scale", "--rounds", "--settle", "--only"][..],
            ),
            ("soundness", &["--cases", "--seed", "--cc"][..]),
            ("fuzz", &["--seconds", "all"][..]),
            ("api", &["--bless", "--count"][..]),
        ] {
            let usage = usage_of(cmd).expect(cmd);
            assert!(
                usage.starts_with(&format!("usage: cargo xtask {cmd}")),
                "{usage}"
            );
            for f in flags {
                assert!(usage.contains(f), "{cmd}: no {f} in\n{usage}");
            }
        }
        for t in fuzz::TARGETS {
            assert!(usage_of("fuzz").expect("fuzz").contains(t), "{t}");
        }
        for cmd in ["test", "ci", "tidy"] {
            assert!(usage_of(cmd).is_some(), "{cmd}");
        }
        assert!(
            usage_of("demo").is_none(),
            "demo's --help is the demo's own"
        );
        assert!(wants_help(&args("--quick -h")) && wants_help(&args("--help")));
        assert!(!wants_help(&args("--quick --only help")));
        assert!(no_arguments("test", &args("--workspace")).is_err());
        assert!(no_arguments("test", &[]).is_ok());
    }
}
