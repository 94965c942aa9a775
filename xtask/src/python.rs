//! The Python package's plumbing: the virtual environment, the wheel, and its pytest suite.
//!
//! - [`venv`]: `target/kcache-venv`, made with `python3 -m venv` (or `$KCACHE_PYTHON -m venv`)
//!   when absent, then the pins of `crates/kcache-py/requirements.txt` installed into it with
//!   pip from the package registry (all of them, or only maturin for a wheel alone). A missing
//!   `python3` or `venv` module is installed from Debian's packages when running as root with
//!   `apt-get` (as `setup` does for the other tools); otherwise it, a missing `pip`, or a
//!   failed install fails loudly with the reason: never a skip.
//! - [`wheel`]: `maturin build` of `crates/kcache-py` into `target/wheels` (the debug profile
//!   by default, so the workspace's debug build of the dependencies is reused; `--release`
//!   for timing), then the wheel installed into the venv.
//! - [`pytest`]: the wheel, every pin, tinygrad's `test/test_tiny.py` taken from its source
//!   distribution on the registry (never committed), then `pytest crates/kcache-py/tests`
//!   (every directory under it) with `KCACHE_CORPUS`, `KCACHE_CLI`, `KCACHE_PEER` and
//!   `TINYGRAD_TEST_DIR` set.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The venv's directory under the workspace's target directory.
pub(crate) fn venv_dir(root: &Path) -> PathBuf {
    root.join("target").join("kcache-venv")
}

/// The requirements file: every pin, in one place.
fn requirements(root: &Path) -> PathBuf {
    root.join("crates/kcache-py/requirements.txt")
}

/// The pins of the requirements file (`name==version` lines, comments dropped).
fn pins(root: &Path) -> Result<Vec<String>, String> {
    let path = requirements(root);
    let text = std::fs::read_to_string(&path)
        .map_err(|e| format!("could not read {}: {e}", path.display()))?;
    Ok(parse_pins(&text))
}

fn parse_pins(text: &str) -> Vec<String> {
    text.lines()
        .map(|l| l.split('#').next().unwrap_or("").trim())
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect()
}

/// Runs `program args` in `root`, failing with `what` and the exit status.
fn run(root: &Path, program: &Path, args: &[&str], env: &[(&str, String)]) -> Result<(), String> {
    eprintln!("$ {} {}", program.display(), args.join(" "));
    let status = Command::new(program)
        .args(args)
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .current_dir(root)
        .status()
        .map_err(|e| format!("could not run {}: {e}", program.display()))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!(
            "`{} {}` failed ({status})",
            program.display(),
            args.join(" ")
        ))
    }
}

/// The venv's Python, made (and the pins installed) if needed. `only` limits the pins
/// installed to those whose name starts with one of its entries (empty: all of them).
pub(crate) fn venv(root: &Path, only: &[&str]) -> Result<PathBuf, String> {
    let dir = venv_dir(root);
    let python = dir.join("bin/python");
    if !python.is_file() {
        let base = std::env::var("KCACHE_PYTHON").unwrap_or_else(|_| "python3".to_string());
        if let Err(why) = base_python(&base) {
            // As for the other tools (see `setup`): Debian's packages, when this may install.
            if !crate::setup::is_root() || crate::setup::find_on_path("apt-get").is_none() {
                return Err(format!(
                    "{why}; not installing them here (needs root and apt-get)"
                ));
            }
            eprintln!("xtask: {why}: installing python3 python3-venv python3-pip now");
            crate::setup::apt(&["update", "-qq"])?;
            crate::setup::apt(&[
                "install",
                "-y",
                "-qq",
                "python3",
                "python3-venv",
                "python3-pip",
            ])?;
            base_python(&base)?;
        }
        run(
            root,
            Path::new(&base),
            &["-m", "venv", &dir.to_string_lossy()],
            &[],
        )
        .map_err(|e| {
            format!("{e}: could not make the venv (Debian: `apt-get install python3-venv`)")
        })?;
    }
    let has_pip = Command::new(&python)
        .args(["-m", "pip", "--version"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !has_pip {
        return Err(format!(
            "{} has no pip (remove {} and install python3-pip / python3-venv)",
            python.display(),
            dir.display()
        ));
    }
    let wanted: Vec<String> = pins(root)?
        .into_iter()
        .filter(|p| only.is_empty() || only.iter().any(|o| p.starts_with(o)))
        .collect();
    let mut args = vec![
        "-m",
        "pip",
        "install",
        "--quiet",
        "--disable-pip-version-check",
    ];
    args.extend(wanted.iter().map(String::as_str));
    run(root, &python, &args, &[]).map_err(|e| {
        format!(
            "{e}: could not install {} from the package registry",
            wanted.join(" ")
        )
    })?;
    Ok(python)
}

/// Checks that `base` runs as a Python 3 interpreter, else says what to install.
fn base_python(base: &str) -> Result<(), String> {
    let found = Command::new(base)
        .args(["-c", "import sys, venv; assert sys.version_info >= (3, 9)"])
        .output()
        .is_ok_and(|o| o.status.success());
    if found {
        Ok(())
    } else {
        Err(format!(
            "`{base}` is not a Python 3.9+ with its venv module: the Python package's tests \
             need Python 3 with venv and pip (Debian: `apt-get install python3 python3-venv \
             python3-pip`; or set KCACHE_PYTHON to an interpreter)"
        ))
    }
}

/// Builds the wheel into `target/wheels` and installs it into the venv; returns its path.
pub(crate) fn wheel(root: &Path, release: bool, only: &[&str]) -> Result<PathBuf, String> {
    let python = venv(root, only)?;
    let out = root.join("target/wheels");
    // One kcache wheel in the directory: the one this build made.
    if let Ok(entries) = std::fs::read_dir(&out) {
        for e in entries.flatten() {
            if is_kcache_wheel(&e.file_name().to_string_lossy()) {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }
    let maturin = venv_dir(root).join("bin/maturin");
    let mut args = vec![
        "build",
        "--manifest-path",
        "crates/kcache-py/Cargo.toml",
        "--out",
        "target/wheels",
        "--interpreter",
    ];
    let py = python.to_string_lossy().into_owned();
    args.push(&py);
    if release {
        args.push("--release");
    }
    run(root, &maturin, &args, &[])?;
    let built = std::fs::read_dir(&out)
        .map_err(|e| format!("could not read {}: {e}", out.display()))?
        .flatten()
        .map(|e| e.path())
        .find(|p| is_kcache_wheel(&p.file_name().unwrap_or_default().to_string_lossy()))
        .ok_or_else(|| format!("maturin built no kcache wheel into {}", out.display()))?;
    let wheel = built.to_string_lossy().into_owned();
    run(
        root,
        &python,
        &[
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "--no-deps",
            "--force-reinstall",
            &wheel,
        ],
        &[],
    )?;
    eprintln!("xtask: installed {wheel} into {}", venv_dir(root).display());
    Ok(built)
}

fn is_kcache_wheel(name: &str) -> bool {
    name.starts_with("kcache-") && name.ends_with(".whl")
}

/// tinygrad's `test/` directory from its source distribution (the version pinned), unpacked
/// under `target/tinygrad-sdist` once.
fn tinygrad_tests(root: &Path, python: &Path) -> Result<PathBuf, String> {
    let pin = pins(root)?
        .into_iter()
        .find(|p| p.starts_with("tinygrad=="))
        .ok_or("crates/kcache-py/requirements.txt pins no tinygrad")?;
    let version = pin.trim_start_matches("tinygrad==");
    let dir = root.join("target/tinygrad-sdist");
    let tests = dir.join(format!("tinygrad-{version}/test"));
    if tests.join("test_tiny.py").is_file() {
        return Ok(tests);
    }
    let d = dir.to_string_lossy().into_owned();
    run(
        root,
        python,
        &[
            "-m",
            "pip",
            "download",
            "--quiet",
            "--disable-pip-version-check",
            "--no-binary",
            ":all:",
            "--no-deps",
            "--dest",
            &d,
            &pin,
        ],
        &[],
    )
    .map_err(|e| format!("{e}: could not download tinygrad's source distribution"))?;
    let archive = dir.join(format!("tinygrad-{version}.tar.gz"));
    let a = archive.to_string_lossy().into_owned();
    run(
        root,
        python,
        &[
            "-c",
            "import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2], filter='data')",
            &a,
            &d,
        ],
        &[],
    )?;
    if tests.join("test_tiny.py").is_file() {
        Ok(tests)
    } else {
        Err(format!("{} holds no test/test_tiny.py", archive.display()))
    }
}

/// The wheel, every pin, then pytest over `crates/kcache-py/tests`.
pub(crate) fn pytest(root: &Path, corpus: Option<&Path>) -> Result<(), String> {
    wheel(root, false, &[])?;
    let python = venv_dir(root).join("bin/python");
    let tinygrad = tinygrad_tests(root, &python)?;
    // The Rust side of the key and shared-store tests: the `kcache` command and the
    // kernel-store peer (an example of kcache-tests: built by `cargo test --workspace
    // --all-targets` already, and away from kcache-py, whose pyo3 maturin builds with other
    // settings, so neither build undoes the other's).
    crate::cargo(&["build", "--package", "kcache-cli"])?;
    crate::cargo(&[
        "build",
        "--package",
        "kcache-tests",
        "--example",
        "kernel_store_peer",
    ])?;
    let cli = root.join("target/debug/kcache");
    let peer = root.join("target/debug/examples/kernel_store_peer");
    let mut env = vec![
        ("KCACHE_CLI", cli.to_string_lossy().into_owned()),
        ("KCACHE_PEER", peer.to_string_lossy().into_owned()),
        ("TINYGRAD_TEST_DIR", tinygrad.to_string_lossy().into_owned()),
    ];
    if let Some(c) = corpus {
        env.push(("KCACHE_CORPUS", c.to_string_lossy().into_owned()));
    }
    run(
        root,
        &python,
        &["-m", "pytest", "-q", "crates/kcache-py/tests"],
        &env,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pins_are_read_without_comments() {
        let text = "# a comment\nmaturin==1.0  # why\n\nnumpy==2.0\n";
        assert_eq!(parse_pins(text), ["maturin==1.0", "numpy==2.0"]);
    }

    #[test]
    fn the_requirements_file_pins_every_package_the_plumbing_needs() {
        let root = crate::project_root();
        let pins = pins(&root).expect("requirements.txt");
        for name in ["maturin==", "numpy==", "pytest==", "tinygrad=="] {
            assert!(
                pins.iter().any(|p| p.starts_with(name)),
                "{name} in {pins:?}"
            );
        }
    }

    #[test]
    fn a_missing_python_fails_saying_what_to_install() {
        let e = base_python("/nonexistent/python3").expect_err("no such interpreter");
        assert!(
            e.contains("python3-venv") && e.contains("KCACHE_PYTHON"),
            "{e}"
        );
        assert!(base_python("false").is_err());
    }

    #[test]
    fn only_kcache_wheels_are_replaced() {
        assert!(is_kcache_wheel("kcache-0.1.0-cp311-cp311-linux_x86_64.whl"));
        assert!(!is_kcache_wheel("numpy-2.0-cp311.whl"));
        assert!(!is_kcache_wheel("kcache-0.1.0.tar.gz"));
    }
}
