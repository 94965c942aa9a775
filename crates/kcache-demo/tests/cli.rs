//! The real `kcache-demo` binary: bad flag values and a failing compiler end in a clear
//! error and a failure status, never a panic, and the compiler's diagnostics are shown once.

use std::process::{Command, Output};

fn demo(args: &[&str], cc: Option<&str>) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_kcache-demo"));
    command.args(args).env_remove("KCACHE_DIR");
    if let Some(cc) = cc {
        command.env("CC", cc);
    }
    command.output().expect("run kcache-demo")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn a_failing_compile_shows_the_compilers_diagnostics_once() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let missing = tmp.path().join("missing-header.h");
    // The real C compiler, told to include a header that does not exist: every compile fails.
    let cc = format!("cc -include {}", missing.display());
    let cache = tmp.path().join("cache");
    let o = demo(
        &[
            "--cache-dir",
            cache.to_str().expect("utf-8"),
            "--kernels",
            "rowdot",
            "--round1",
            "1",
            "--round2",
            "0",
            "--reps",
            "1",
            "--quiet",
        ],
        Some(&cc),
    );
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.starts_with("kcache-demo: error: resolving rowdot"),
        "{err}"
    );
    assert!(!err.contains("panicked"), "{err}");
    // The diagnostic names the header; it must appear once (it was printed twice: once in
    // the compile failure's message, again as that failure's source).
    let diagnostic = "missing-header.h: No such file or directory";
    assert_eq!(err.matches(diagnostic).count(), 1, "{err}");
}

#[test]
fn bad_flag_values_are_refused_with_a_usage_error() {
    for args in [
        &["--keys", "bogus"][..],
        &["--reps", "x"],
        &["--round1", "-1"],
        &["--no-such-flag"],
    ] {
        let o = demo(args, None);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.starts_with("error: "), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
    let o = demo(&["--kernels", "matmul,nope"], None);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains(
            "unknown kernel \"nope\"; the demo's kernels are matmul, chain, rowdot, softmax"
        ),
        "{err}"
    );
}
