//! Child processes of a test: the current test binary re-run for one test with an environment
//! variable set (the child's body is a test that does nothing unless the variable is set), and
//! an address-space limit for such a child.

use std::process::Command;

/// Runs this test binary again for the one test `test` (`--exact`, output not captured) with
/// `var` set to `value`; returns the child's standard output. Panics, showing both outputs,
/// when the child fails.
pub fn rerun(test: &str, var: &str, value: &str) -> String {
    let exe = std::env::current_exe().expect("the test binary");
    stdout_of(
        Command::new(exe)
            .args(["--exact", test, "--nocapture"])
            .env(var, value),
    )
}

/// Runs `command` to its end and returns its standard output; panics, showing the command,
/// its status and both outputs, when it fails.
pub fn stdout_of(command: &mut Command) -> String {
    let out = command
        .output()
        .unwrap_or_else(|e| panic!("could not run {command:?}: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{command:?}: {:?}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// Runs this program again with `args` ([`stdout_of`] of the current executable).
pub fn run_self(args: &[&str]) -> String {
    stdout_of(Command::new(std::env::current_exe().expect("the current executable")).args(args))
}

/// The rest of the first line of `out` that starts with `prefix` (panics naming it when there
/// is none).
pub fn after<'a>(out: &'a str, prefix: &str) -> &'a str {
    &line(out, prefix)[prefix.len()..]
}

/// The first line of `out` that starts with `prefix` (panics naming it when there is none).
pub fn line<'a>(out: &'a str, prefix: &str) -> &'a str {
    out.lines()
        .find(|l| l.starts_with(prefix))
        .unwrap_or_else(|| panic!("no line starting with {prefix:?} in:\n{out}"))
}

/// The value of the `name=value` word of `line`, parsed (panics naming it when absent).
pub fn field<T: std::str::FromStr>(line: &str, name: &str) -> T {
    let prefix = format!("{name}=");
    line.split_whitespace()
        .find_map(|w| w.strip_prefix(&prefix))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no number {name}= in {line:?}"))
}

/// Limits this process's address space to `bytes` (soft and hard): an allocation past it
/// fails instead of growing the machine's memory use.
pub fn limit_address_space(bytes: u64) {
    use rustix::process::{Resource, Rlimit, setrlimit};
    let limit = Rlimit {
        current: Some(bytes),
        maximum: Some(bytes),
    };
    setrlimit(Resource::As, limit).expect("setrlimit");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_and_fields() {
        let out = "x\nHOSTILE silence peak_kib=812 elapsed_ms=4\n";
        let l = line(out, "HOSTILE ");
        assert_eq!(after(out, "HOSTILE "), "silence peak_kib=812 elapsed_ms=4");
        assert_eq!(field::<u64>(l, "peak_kib"), 812);
        assert_eq!(field::<u64>(l, "elapsed_ms"), 4);
    }

    /// The child's body: prints the variable it was given.
    #[test]
    fn rerun_child() {
        if let Ok(v) = std::env::var("TEST_SUPPORT_RERUN") {
            println!("GOT {v}");
        }
    }

    #[test]
    fn a_failing_command_panics_with_its_output() {
        let failed = std::panic::catch_unwind(|| {
            stdout_of(Command::new("sh").args(["-c", "echo out; echo err >&2; exit 3"]))
        });
        let message = *failed
            .expect_err("a failure")
            .downcast::<String>()
            .expect("a message");
        assert!(
            message.contains("out") && message.contains("err"),
            "{message}"
        );
        assert_eq!(
            stdout_of(Command::new("sh").args(["-c", "echo fine"])),
            "fine\n"
        );
    }

    #[test]
    fn a_rerun_child_sees_its_variable() {
        let out = rerun("child::tests::rerun_child", "TEST_SUPPORT_RERUN", "17");
        assert_eq!(line(&out, "GOT "), "GOT 17");
    }
}

/// A bench that re-runs itself as worker processes (a fresh process per measurement): the
/// worker's role, directory and size, passed in the variables `<prefix>_ROLE`, `_DIR` and `_N`.
#[derive(Clone, Debug)]
pub struct Worker {
    /// What the worker does (the bench's own names).
    pub role: String,
    /// The directory it works in.
    pub dir: std::path::PathBuf,
    /// How many kernels.
    pub n: u64,
}

impl Worker {
    /// This process's assignment, if it was started as a worker by [`Worker::run`].
    pub fn assigned(prefix: &str) -> Option<Worker> {
        let role = std::env::var(format!("{prefix}_ROLE")).ok()?;
        let var = |name: &str| {
            std::env::var(format!("{prefix}_{name}"))
                .unwrap_or_else(|_| panic!("a worker without {prefix}_{name}"))
        };
        Some(Worker {
            role,
            dir: var("DIR").into(),
            n: var("N").parse().expect("a worker's N is a number"),
        })
    }

    /// Runs this executable as worker `role` over `dir` with size `n`; returns the line of
    /// its output that starts with `SECONDS ` (panics, showing its output, when it fails or
    /// prints none).
    pub fn run(prefix: &str, role: &str, dir: &std::path::Path, n: u64) -> String {
        let stdout = stdout_of(
            Command::new(std::env::current_exe().expect("the bench binary"))
                .env(format!("{prefix}_ROLE"), role)
                .env(format!("{prefix}_DIR"), dir)
                .env(format!("{prefix}_N"), n.to_string()),
        );
        stdout
            .lines()
            .find(|l| l.starts_with("SECONDS "))
            .unwrap_or_else(|| panic!("worker {role} printed nothing: {stdout}"))
            .to_string()
    }
}
