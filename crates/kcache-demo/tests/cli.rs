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
        // A sample count past the bound panicked (capacity overflow) or aborted.
        &["--reps", "18446744073709551615"],
        &["--reps", "1001"],
        &["--reps", "0"],
        &["--round1", "-1"],
        // No candidate at all was silently run as one.
        &["--round1", "0"],
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

/// Every file and directory under `dir`, with the bytes of each file (`None` for a directory).
fn snapshot(dir: &std::path::Path) -> std::collections::BTreeMap<String, Option<Vec<u8>>> {
    let mut out = std::collections::BTreeMap::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(at) = todo.pop() {
        for item in std::fs::read_dir(&at).expect("list") {
            let path = item.expect("item").path();
            let name = path
                .strip_prefix(dir)
                .expect("under dir")
                .display()
                .to_string();
            if path.is_dir() {
                out.insert(name, None);
                todo.push(path);
            } else {
                out.insert(name, Some(std::fs::read(&path).expect("read")));
            }
        }
    }
    out
}

const TINY_RUN: [&str; 9] = [
    "--kernels",
    "chain",
    "--round1",
    "1",
    "--round2",
    "0",
    "--reps",
    "1",
    "--quiet",
];

/// A user's directory given as the cache (no regime stamp, files named like entries) is
/// refused, with and without `--fresh`, and left byte for byte as it was: nothing deleted,
/// no lock file, no stamp, no kernel store created in it. (`--fresh` deleted `settings.ron`
/// and `notes.keys`; a plain run created `kernels/` in it.)
#[test]
fn a_user_directory_is_refused_and_left_untouched() {
    refused_and_left_untouched(
        |user| {
            std::fs::write(user.join("settings.ron"), "mine\n").expect("write");
            std::fs::write(user.join("notes.keys"), "n\n").expect("write");
        },
        &["no regime stamp", "named like an entry"],
    );
}

/// A directory whose regime stamp is malformed is refused by the store, so the demo refuses
/// it before putting anything in it, with and without `--fresh` (a plain run created
/// `kernels/` in it and stored nothing).
#[test]
fn a_directory_with_a_malformed_stamp_is_refused_and_left_untouched() {
    refused_and_left_untouched(
        |dir| std::fs::write(dir.join("regime.stamp"), "x1\n").expect("write"),
        &["regime stamp \"x1\\n\" is malformed"],
    );
}

/// A tiny run, with and without `--fresh`, over a directory that `fill` stocks: it exits 1
/// naming every one of `said`, and leaves the directory byte for byte as it was.
fn refused_and_left_untouched(fill: impl Fn(&std::path::Path), said: &[&str]) {
    for fresh in [true, false] {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().join("cache");
        std::fs::create_dir(&dir).expect("mkdir");
        fill(&dir);
        let before = snapshot(&dir);
        let mut args = vec!["--cache-dir", dir.to_str().expect("utf-8")];
        if fresh {
            args.push("--fresh");
        }
        args.extend(TINY_RUN);
        let o = demo(&args, None);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(1), "fresh {fresh}: {err}");
        assert!(said.iter().all(|s| err.contains(s)), "fresh {fresh}: {err}");
        assert_eq!(snapshot(&dir), before, "fresh {fresh}: {err}");
    }
}

/// `--fresh` classifies the whole directory before it changes any of it: a directory that
/// holds a foreign file is refused with nothing created, even when its listing shows
/// `kernels/` first (which was adopted, stamped and locked before the foreign file was seen,
/// and the cache directory got a lock file).
#[test]
fn fresh_refuses_a_foreign_file_before_touching_kernels() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let user = tmp.path().join("user");
    std::fs::create_dir_all(user.join("kernels")).expect("mkdir");
    std::fs::write(user.join("kernels").join("mine.txt"), "mine\n").expect("write");
    // A foreign name the directory lists after `kernels`, so the old order-dependent pass
    // reached the kernel store before the refusal.
    let listed_after_kernels = (0..64)
        .map(|i| format!("README{i}.txt"))
        .find(|name| {
            std::fs::write(user.join(name), "r\n").expect("write");
            let order: Vec<String> = std::fs::read_dir(&user)
                .expect("list")
                .map(|e| e.expect("item").file_name().to_string_lossy().into_owned())
                .collect();
            let pos = |n: &str| order.iter().position(|o| o == n);
            let after = pos("kernels") < pos(name);
            if !after {
                std::fs::remove_file(user.join(name)).expect("rm");
            }
            after
        })
        .expect("some name is listed after kernels");
    let before = snapshot(&user);
    let mut args = vec!["--cache-dir", user.to_str().expect("utf-8"), "--fresh"];
    args.extend(TINY_RUN);
    let o = demo(&args, None);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains(&format!("it holds \"{listed_after_kernels}\"")),
        "{err}"
    );
    assert_eq!(snapshot(&user), before, "{err}");
}

/// Flags of which one would be dropped without a word are refused, naming both, before
/// anything is created: `--no-seeds --compare-cold` (no seeded search to compare), `--size`
/// with `--kernels` leaving matmul out (the only kernel with a size). The library refuses the
/// same options (`check_conflicts`).
#[test]
fn conflicting_flags_are_refused_naming_both() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let cache = tmp.path().join("cache");
    let dir = cache.to_str().expect("utf-8");
    for (args, names) in [
        (
            &["--no-seeds", "--compare-cold"][..],
            &["--no-seeds", "--compare-cold"][..],
        ),
        (
            &["--compare-cold", "--no-seeds"][..],
            &["--no-seeds", "--compare-cold"][..],
        ),
        (
            &["--kernels", "chain,softmax", "--size", "96"][..],
            &["--size", "--kernels", "matmul"][..],
        ),
        (
            &["--kernels", "rowdot", "--size", "64"][..],
            &["--size", "--kernels"][..],
        ),
    ] {
        let mut all = vec!["--cache-dir", dir, "--quiet"];
        all.extend_from_slice(args);
        let o = demo(&all, None);
        let err = stderr(&o);
        assert!(!o.status.success(), "{args:?}: {err}");
        for n in names {
            assert!(err.contains(n), "{args:?}: no {n} in {err}");
        }
        assert!(
            !cache.exists(),
            "{args:?}: the refused run created its cache directory"
        );
    }
    // The pairs that are not conflicts still parse: a size with matmul among the kernels.
    let mut options = kcache_demo::DemoOptions::new(&cache);
    options.kernels = Some(vec!["chain".into(), "matmul".into()]);
    options.size = Some(96);
    assert!(kcache_demo::check_conflicts(&options).is_ok());
    options.seeds = false;
    options.compare_cold = true;
    assert!(matches!(
        kcache_demo::run(&options),
        Err(kcache_demo::DemoError::ConflictingOptions(_))
    ));
    assert!(!cache.exists());
}
