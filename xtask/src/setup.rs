//! What the tests and benchmarks need from the machine, and getting it on a fresh one.
//!
//! The Redis store's tests start their own `redis-server` (one per test, on loopback) and
//! fail, never skip, without the binary; memo-cache's pinned keys are checked against an
//! independent Python script (`python3`); canonical-text's corpus oracle compiles
//! tinygrad's kernels with `clang`; the kernel-store benchmark compiles beside Debian's
//! `ccache`. [`ensure_tools`] finds each binary on `PATH` (or at `$REDIS_SERVER` for Redis)
//! and installs the missing ones from Debian's packages when it may (running as root with
//! `apt-get`, as `.ci/run` does), else fails saying what to install.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A binary the tests or benchmarks run, and the Debian package that brings it.
struct Tool {
    binary: &'static str,
    package: &'static str,
    /// An environment variable naming the binary instead of `PATH` (the tests honour it).
    env: Option<&'static str>,
    why: &'static str,
}

const TOOLS: &[Tool] = &[
    Tool {
        binary: "redis-server",
        package: "redis-server",
        env: Some("REDIS_SERVER"),
        why: "the Redis store tests start their own server",
    },
    Tool {
        binary: "python3",
        package: "python3",
        env: None,
        why: "memo-cache's pinned keys are recomputed by an independent Python script",
    },
    Tool {
        binary: "clang",
        package: "clang",
        env: None,
        why: "canonical-text's corpus oracle compiles tinygrad's kernels with clang, the \
              compiler its C renderer targets (clang vector types)",
    },
    Tool {
        binary: "ccache",
        package: "ccache",
        env: None,
        why: "the kernel-store benchmark compiles beside ccache",
    },
];

/// Makes sure every binary the tests and benchmarks need is present: installs the missing
/// ones (`apt-get install`) when running as root on a machine with `apt-get`, else fails with
/// a message naming the packages to install.
pub(crate) fn ensure_tools() -> Result<(), String> {
    for t in TOOLS {
        if let Some(path) = t.env.and_then(std::env::var_os)
            && !Path::new(&path).is_file()
        {
            return Err(format!(
                "{} is set to {}, which is not a file (it names the `{}` binary: {})",
                t.env.unwrap_or_default(),
                Path::new(&path).display(),
                t.binary,
                t.why
            ));
        }
    }
    let missing: Vec<&Tool> = TOOLS.iter().filter(|t| !present(t)).collect();
    if missing.is_empty() {
        return Ok(());
    }
    let packages: Vec<&str> = missing.iter().map(|t| t.package).collect();
    let reasons: Vec<String> = missing
        .iter()
        .map(|t| format!("`{}` ({})", t.binary, t.why))
        .collect();
    let advice = format!(
        "missing {}; install the Debian package(s) with `apt-get install {}`{}",
        reasons.join(", "),
        packages.join(" "),
        if missing.iter().any(|t| t.env.is_some()) {
            " (or set REDIS_SERVER to a redis-server binary)"
        } else {
            ""
        }
    );
    if !is_root() || find_on_path("apt-get").is_none() {
        return Err(format!(
            "{advice}; not installing them here (needs root and apt-get)"
        ));
    }
    eprintln!("xtask: {advice}: installing them now");
    apt(&["update", "-qq"])?;
    let mut install = vec!["install", "-y", "-qq"];
    install.extend(&packages);
    apt(&install)?;
    if packages.contains(&"redis-server") {
        // The package may start a system service; the tests start their own servers.
        for stop in [
            &["service", "redis-server", "stop"][..],
            &["systemctl", "stop", "redis-server"][..],
        ] {
            let quiet = Command::new(stop[0])
                .args(&stop[1..])
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .status();
            if quiet.is_ok_and(|s| s.success()) {
                break;
            }
        }
    }
    let still: Vec<&str> = missing
        .iter()
        .filter(|t| !present(t))
        .map(|t| t.binary)
        .collect();
    if still.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "installed {} but still cannot find {}",
            packages.join(" "),
            still.join(", ")
        ))
    }
}

pub(crate) fn apt(args: &[&str]) -> Result<(), String> {
    eprintln!("$ apt-get {}", args.join(" "));
    let status = Command::new("apt-get")
        .args(args)
        .env("DEBIAN_FRONTEND", "noninteractive")
        .stdout(std::process::Stdio::null())
        .status()
        .map_err(|e| format!("could not run apt-get: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("`apt-get {}` failed ({status})", args.join(" ")))
    }
}

fn present(tool: &Tool) -> bool {
    match tool.env.and_then(std::env::var_os) {
        Some(path) => is_executable(Path::new(&path)),
        None => find_on_path(tool.binary).is_some(),
    }
}

/// The first `PATH` entry holding an executable file `name`.
pub(crate) fn find_on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|p| is_executable(p))
}

/// Whether `path` is a file (a link to one counts) with an execute bit set: what a tool's
/// variable or a `PATH` entry must name.
fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    path.metadata()
        .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// The kernel corpus canonical-text's corpus tests read (their `support/corpus.rs` looks it
/// up the same way): `$KCACHE_CORPUS` if given, else `shared/corpus` beside the checkout; a
/// directory holding `README.md`. `Err` is the path looked at.
pub(crate) fn corpus_dir(root: &Path, env: Option<OsString>) -> Result<PathBuf, PathBuf> {
    let dir = match env {
        Some(d) => PathBuf::from(d),
        None => root.join("../shared/corpus"),
    };
    if dir.join("README.md").is_file() {
        Ok(dir)
    } else {
        Err(dir)
    }
}

/// Whether the `CI` variable says this is a CI run (set, and neither empty, `0` nor
/// `false`).
pub(crate) fn is_ci(var: Option<OsString>) -> bool {
    var.is_some_and(|v| !v.is_empty() && v != "0" && !v.eq_ignore_ascii_case("false"))
}

pub(crate) fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.status.success() && String::from_utf8_lossy(&o.stdout).trim() == "0")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    /// A tool's variable (`$REDIS_SERVER`) must name an executable file: a data file there
    /// was taken as the tool, and the tests then failed spawning it instead of `test`
    /// installing or asking for the real one.
    #[test]
    fn a_tool_variable_must_name_an_executable_file() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile_dir("xtask-exec");
        let file = dir.join("redis-server");
        fs::write(&file, "not a program\n").expect("write");
        fs::set_permissions(&file, fs::Permissions::from_mode(0o644)).expect("chmod");
        assert!(!is_executable(&file));
        fs::set_permissions(&file, fs::Permissions::from_mode(0o755)).expect("chmod");
        assert!(is_executable(&file));
        assert!(!is_executable(&dir), "a directory is no tool");
        assert!(!is_executable(&dir.join("absent")));
        fs::remove_dir_all(&dir).expect("clean up");
    }

    /// A fresh directory under the system's temporary directory.
    fn tempfile_dir(prefix: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("{prefix}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).expect("mkdir");
        dir
    }

    #[test]
    fn the_corpus_is_found_only_where_its_readme_is() {
        let root = std::env::temp_dir().join(format!("xtask-corpus-{}", std::process::id()));
        let checkout = root.join("checkout");
        let shared = root.join("shared/corpus");
        fs::create_dir_all(&checkout).expect("mkdir");
        fs::create_dir_all(&shared).expect("mkdir");
        let absent = corpus_dir(&checkout, None);
        fs::write(shared.join("README.md"), "corpus\n").expect("write");
        let beside = corpus_dir(&checkout, None);
        let elsewhere = corpus_dir(&checkout, Some(root.join("elsewhere").into()));
        let _ = fs::remove_dir_all(&root);
        assert_eq!(absent, Err(checkout.join("../shared/corpus")));
        assert_eq!(beside, Ok(checkout.join("../shared/corpus")));
        assert_eq!(elsewhere, Err(root.join("elsewhere")));
    }

    #[test]
    fn ci_is_told_by_its_variable() {
        for (v, ci) in [
            (None, false),
            (Some(""), false),
            (Some("0"), false),
            (Some("False"), false),
            (Some("true"), true),
            (Some("1"), true),
        ] {
            assert_eq!(is_ci(v.map(OsString::from)), ci, "{v:?}");
        }
    }

    #[test]
    fn finds_a_binary_every_machine_has_and_not_a_made_up_one() {
        assert!(find_on_path("sh").is_some());
        assert!(find_on_path("no-such-binary-kcache-xtask").is_none());
    }
}
