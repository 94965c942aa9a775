//! The real `kcache` binary on real cache directories.

mod common;

use schedule_cache::Store as _;
use std::fs;
use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, SystemTime};

use cache_dir::STAMP_FILE;
use common::{DIGEST, entry, kcache, key};
use schedule_cache::StoreOutcome;

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Asserts that `o` printed `text` on its standard output, showing what it printed if not.
#[track_caller]
fn assert_prints(o: &Output, text: &str) {
    let out = stdout(o);
    assert!(out.contains(text), "no {text:?} in:\n{out}");
}

/// A cache with two good entries, one garbage entry (truncated inside its version header, so
/// both the header check of `stats` and the full parse of `verify` catch it), one renamed (misplaced) entry and one
/// stale staging directory.
fn populated(dir: &Path) {
    for (i, k) in ["a", "b"].iter().enumerate() {
        let out = schedule_cache::DiskCache::new(dir)
            .store(Some(&key(k)), &entry(i as u32))
            .expect("store");
        assert_eq!(out, StoreOutcome::Stored);
    }
    fs::write(dir.join(format!("{DIGEST}-c.placement.ron")), "(vers").expect("write");
    fs::copy(
        dir.join(format!("{DIGEST}-a.placement.ron")),
        dir.join("ffff0000-d.placement.ron"),
    )
    .expect("copy");
    let staging = dir.join(".atomicwriteSTALE1");
    fs::create_dir(&staging).expect("mkdir");
    fs::write(staging.join("tmpfile.tmp"), "half").expect("write");
    let old = SystemTime::now() - Duration::from_secs(7200);
    for p in [staging.join("tmpfile.tmp"), staging] {
        fs::File::open(&p)
            .expect("open")
            .set_modified(old)
            .expect("mtime");
    }
}

#[test]
fn stats_counts_what_is_there() {
    let tmp = tempfile::tempdir().expect("tempdir");
    populated(tmp.path());
    let o = kcache(&["stats", tmp.path().to_str().expect("utf8")]);
    assert!(o.status.success(), "{o:?}");
    let s = stdout(&o);
    for line in [
        "regime: kcache-schedule-store 2 (current)",
        "lock file: present",
        "entries: 4 (schedule 0, placement 4)",
        "unreadable entries: 1",
        "other-version entries: 0",
        "staging: 1 (1 stale, 4 bytes)",
    ] {
        assert!(s.lines().any(|l| l == line), "missing {line:?} in\n{s}");
    }
    let bytes: u64 = fs::read_dir(tmp.path())
        .expect("list")
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".ron"))
        .map(|e| e.metadata().expect("meta").len())
        .sum();
    assert!(s.contains(&format!("bytes: {bytes}\n")), "{s}");
    // stats changes nothing (the stale staging is still there).
    assert!(tmp.path().join(".atomicwriteSTALE1").exists());
}

#[test]
fn verify_reports_each_bad_entry_and_fails() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().to_str().expect("utf8");
    schedule_cache::DiskCache::new(tmp.path())
        .store(Some(&key("a")), &entry(1))
        .expect("store");
    let clean = kcache(&["verify", dir]);
    assert!(clean.status.success(), "{clean:?}");
    assert_prints(&clean, "verified 1 entries: 0 problem(s)");

    populated(tmp.path());
    let o = kcache(&["verify", dir]);
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    let s = stdout(&o);
    assert!(
        s.contains(&format!("{DIGEST}-c.placement.ron: entry unparsable")),
        "{s}"
    );
    assert!(
        s.contains("ffff0000-d.placement.ron: digest \"ab12cd34\" is not the first component"),
        "{s}"
    );
    assert!(s.contains("verified 4 entries: 2 problem(s)"), "{s}");

    fs::write(tmp.path().join(STAMP_FILE), "x").expect("stamp");
    let o = kcache(&["verify", dir]);
    assert_prints(&o, "regime.stamp: malformed");
}

#[test]
fn gc_removes_stale_staging_and_old_entries_only() {
    let tmp = tempfile::tempdir().expect("tempdir");
    populated(tmp.path());
    let old = tmp.path().join(format!("{DIGEST}-b.placement.ron"));
    fs::File::options()
        .write(true)
        .open(&old)
        .expect("open")
        .set_modified(SystemTime::now() - Duration::from_secs(10 * 86400))
        .expect("mtime");
    let dir = tmp.path().to_str().expect("utf8");
    let o = kcache(&["gc", dir]);
    assert!(o.status.success(), "{o:?}");
    assert_prints(
        &o,
        "removed 0 entries (0 bytes) and 1 stale staging artifacts",
    );
    assert!(old.exists());
    let o = kcache(&["gc", dir, "--older-than", "7d"]);
    assert_prints(&o, "removed 1 entries");
    assert!(!old.exists());
    assert!(
        tmp.path()
            .join(format!("{DIGEST}-a.placement.ron"))
            .exists()
    );
    assert!(tmp.path().join(cache_dir::LOCK_FILE).exists());
    assert!(tmp.path().join(STAMP_FILE).exists());
}

/// `kcache gc` follows the store's adoption rule: a directory without a stamp that holds
/// files named like entries (a home directory's `settings.ron`) is refused, nothing removed
/// and no lock file created. (It removed every such file older than `--older-than`.)
#[test]
fn gc_refuses_a_user_directory_and_leaves_it_untouched() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let user = tmp.path();
    let files = [
        ("settings.ron", "mine\n"),
        ("notes.keys", "n\n"),
        ("README.txt", "r\n"),
    ];
    for (name, text) in files {
        fs::write(user.join(name), text).expect("write");
        fs::File::options()
            .write(true)
            .open(user.join(name))
            .expect("open")
            .set_modified(SystemTime::now() - Duration::from_secs(2 * 86400))
            .expect("mtime");
    }
    let o = kcache(&["gc", user.to_str().expect("utf8"), "--older-than", "1d"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{o:?}");
    assert!(err.contains("no regime stamp"), "{err}");
    let mut left: Vec<(String, String)> = fs::read_dir(user)
        .expect("list")
        .map(|e| {
            let e = e.expect("item");
            let text = fs::read_to_string(e.path()).expect("a file");
            (e.file_name().to_string_lossy().into_owned(), text)
        })
        .collect();
    left.sort();
    let mut want: Vec<(String, String)> = files
        .iter()
        .map(|(n, t)| ((*n).to_string(), (*t).to_string()))
        .collect();
    want.sort();
    assert_eq!(left, want, "gc changed the directory: {err}");
}

#[test]
fn errors_exit_with_status_2() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let missing = tmp.path().join("missing");
    let missing = missing.to_str().expect("utf8");
    for args in [
        vec!["stats", missing],
        vec!["verify", missing],
        vec!["gc", missing],
        vec!["gc", missing, "--older-than", "3 parsecs"],
        vec!["canon", missing],
        vec!["frobnicate"],
    ] {
        let o = kcache(&args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {o:?}");
        assert!(!o.stderr.is_empty());
    }
    assert!(
        !tmp.path().join("missing").exists(),
        "no command creates the directory"
    );
    // A file or a missing path as DIR: the message names DIR itself.
    let file = tmp.path().join("file");
    fs::write(&file, "x").expect("write");
    for (path, why) in [
        (file.as_path(), "not a directory"),
        (Path::new(missing), "no such directory"),
    ] {
        let p = path.to_str().expect("utf8");
        for args in [
            vec!["stats", p],
            vec!["verify", p],
            vec!["gc", p],
            vec!["show", p, "ab"],
        ] {
            let o = kcache(&args);
            assert_eq!(o.status.code(), Some(2), "{args:?}: {o:?}");
            assert_eq!(
                String::from_utf8_lossy(&o.stderr),
                format!("kcache: error: {p}: {why}\n"),
                "{args:?}"
            );
        }
    }
}

#[test]
fn canon_prints_the_library_text_and_key() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let src = "void step__seg3(float *n17_w, float *n18_o) {\n  for (int i12 = 0; i12 < 8; ++i12) { n18_o[i12] = n17_w[i12] * 2.0f; }\n}\n";
    let file = tmp.path().join("k.c");
    fs::write(&file, src).expect("write");
    let file = file.to_str().expect("utf8");
    // `canon` of the file with the kernel's name, its bound names and a key part, then `more`.
    let canon = |more: &[&str]| {
        let args = [
            "canon",
            file,
            "--name",
            "step__seg3",
            "--bound",
            "n17_w,n18_o",
            "--part",
            "-O3",
        ];
        kcache(&[&args[..], more].concat())
    };
    let o = canon(&[]);
    assert!(o.status.success(), "{o:?}");
    let names = canonical_text::Names::new().with_bound(["n17_w", "n18_o"]);
    let c = canonical_text::canonical_kernel(src, Some("step__seg3"), &names);
    let want = format!("{}\nkey: {}\n", c.text(), c.key(&[b"-O3"]));
    let s = stdout(&o);
    assert!(s.starts_with(&want), "{s}");
    assert!(s.contains("kc0=n17_w"), "{s}");
    // A bound name that is also free: renaming of bound names is refused, and said so.
    let refused = kcache(&["canon", file, "--bound", "n17_w", "--free", "n17_w"]);
    assert_prints(&refused, "refusal: ");
    let only = canon(&["--key-only"]);
    assert_eq!(stdout(&only), format!("{}\n", c.key(&[b"-O3"])));
    // A counter-minted kernel name: keyed by its role by default; keyed as spelled
    // (--spelled-kernel-name), --minted drops its counter, as the library's
    // Names::with_minted_kernel_names does; without, it stays.
    let minted = |name: &str, more: &[&str]| {
        fs::write(tmp.path().join("m.c"), src.replace("step__seg3", name)).expect("write");
        let m = tmp.path().join("m.c");
        let args = [
            "canon",
            m.to_str().expect("utf8"),
            "--name",
            name,
            "--key-only",
        ];
        stdout(&kcache(&[&args[..], more].concat()))
    };
    assert_eq!(minted("relu_17", &[]), minted("relu_18", &[]));
    let spelled = ["--spelled-kernel-name"];
    let spelled_minted = ["--spelled-kernel-name", "--minted", "_"];
    assert_eq!(
        minted("relu_17", &spelled_minted),
        minted("relu_18", &spelled_minted)
    );
    assert_ne!(minted("relu_17", &spelled), minted("relu_18", &spelled));
    assert_ne!(minted("relu_17", &spelled_minted), minted("relu_17", &[]));
    let names = canonical_text::Names::new()
        .with_kernel_name_by_role(false)
        .with_minted_kernel_names("_");
    let lib = canonical_text::canonical_kernel(
        &src.replace("step__seg3", "relu_17"),
        Some("relu_17"),
        &names,
    );
    assert_eq!(
        minted("relu_17", &spelled_minted),
        format!("{}\n", lib.key(&[]))
    );
}

#[test]
fn show_prints_one_entry_by_key_or_prefix_and_key_only_prints_its_key() {
    let tmp = tempfile::tempdir().expect("tempdir");
    populated(tmp.path());
    let dir = tmp.path().to_str().expect("utf8");
    let full = key("a");
    let o = kcache(&["show", dir, full.as_str()]);
    assert!(o.status.success(), "{o:?}");
    let s = stdout(&o);
    let text = fs::read_to_string(tmp.path().join(format!("{full}.placement.ron"))).expect("read");
    assert!(s.starts_with(&format!("key: {full}\n")), "{s}");
    assert!(s.contains("space: placement\nbytes: "), "{s}");
    assert!(s.contains("verify: ok\n"), "{s}");
    assert!(
        s.ends_with(&format!("\n{text}\n")) || s.ends_with(&format!("\n{text}")),
        "{s}"
    );

    // A prefix that names one entry resolves to it; --key-only prints just the key.
    let o = kcache(&["show", dir, &format!("{DIGEST}-b"), "--key-only"]);
    assert!(o.status.success(), "{o:?}");
    assert_eq!(stdout(&o), format!("{}\n", key("b")));

    // A damaged entry is shown with its problem.
    let o = kcache(&["show", dir, &format!("{DIGEST}-c")]);
    assert_prints(&o, "verify: entry unparsable");

    // The digest alone matches three entries: ambiguous, status 2, the candidates listed.
    let o = kcache(&["show", dir, DIGEST]);
    assert_eq!(o.status.code(), Some(2), "{o:?}");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("3 entries match") && err.contains("-a.placement.ron"),
        "{err}"
    );

    // With --all, the digest shows all three, each as one entry is shown; --key-only lists keys.
    let o = kcache(&["show", dir, DIGEST, "--all"]);
    assert!(o.status.success(), "{o:?}");
    let s = stdout(&o);
    assert_eq!(s.matches("\nspace: placement\n").count(), 3, "{s}");
    for k in ["a", "b", "c"] {
        assert!(s.contains(&format!("key: {}\n", key(k))), "{s}");
    }
    let o = kcache(&["show", dir, DIGEST, "--all", "--key-only"]);
    let mut keys: Vec<String> = stdout(&o).lines().map(str::to_string).collect();
    keys.sort();
    assert_eq!(keys, ["a", "b", "c"].map(|k| key(k).as_str().to_string()));
    let o = kcache(&["show", dir, "0000", "--all"]);
    assert_eq!(o.status.code(), Some(1), "{o:?}");

    // Nothing matches: status 1; the wrong space: nothing matches either.
    let o = kcache(&["show", dir, "0000"]);
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    assert!(stdout(&o).is_empty());
    let o = kcache(&["show", dir, full.as_str(), "--space", "schedule"]);
    assert_eq!(o.status.code(), Some(1), "{o:?}");
}

#[test]
fn show_reads_a_schedule_entry_of_the_front_door_and_never_blocks_on_a_fifo() {
    use reference_ir::ir::{Code, Expr, Index, Precision, Stmt, Symbol, TensorNode};
    use reference_ir::schedule::{ReferenceLanguage, Schedule};
    use schedule_cache::{DiskCache, Measurements, ScheduleCache, TimingIdentity};

    let tmp = tempfile::tempdir().expect("tempdir");
    let cache = ScheduleCache::new(
        ReferenceLanguage,
        "cc",
        TimingIdentity {
            device: "dev".into(),
            toolchain: None,
        },
        DiskCache::new(tmp.path()),
    );
    let i = Symbol::fresh("i");
    let y = TensorNode::new("y", &[16], Precision::F32);
    let code = Code::new(vec![Stmt::for_(
        &i,
        0,
        16,
        vec![Stmt::set(&y, vec![Index::var(&i)], Expr::Const(1.0))],
    )]);
    let mut s = Schedule::new();
    s.split(&i, 4);
    let published = cache
        .store(&code, &s.ops, Measurements::new(vec![2.5e-6]))
        .expect("store");
    let full = published.key.expect("key");
    let digest = full.as_str().split('-').next().expect("digest");
    let dir = tmp.path().to_str().expect("utf8");

    let o = kcache(&["show", dir, digest, "--key-only"]);
    assert!(o.status.success(), "{o:?}");
    assert_eq!(stdout(&o), format!("{full}\n"));
    let o = kcache(&["show", dir, digest]);
    let s = stdout(&o);
    assert!(
        s.contains("space: schedule") && s.contains("verify: ok"),
        "{s}"
    );
    assert!(
        s.contains("key_parts") && s.contains("Format") && s.contains("2.5e-6"),
        "{s}"
    );

    // A FIFO at an entry name: shown as not a regular file, without blocking.
    let fifo = tmp.path().join(format!("{digest}-fifo.placement.ron"));
    let made = Command::new("mkfifo").arg(&fifo).status().expect("mkfifo");
    assert!(made.success());
    let o = kcache(&["show", dir, &format!("{digest}-fifo")]);
    assert!(o.status.success(), "{o:?}");
    assert_prints(&o, "verify: not a regular file");
}

/// `kcache key` prints exactly `kernel_cache::kernel_key` of the same inputs: text (from a
/// file or standard input, CRLF and `$` included), symbol, names, options in order (leading
/// `-`, spaces, `=`) and a backend identity with newlines (from a file, byte for byte).
#[test]
fn key_prints_the_kernel_cache_key() {
    let dir = tempfile::tempdir().expect("tempdir");
    let kernels = [
        (
            "step__seg3",
            "void step__seg3(float *n17_w, float *n18_o) {\n  for (int i4 = 0; i4 < 8; ++i4) n18_o[i4] = n17_w[i4] * 2.0f;\n}\n",
        ),
        (
            "k",
            "/* crlf */\r\nvoid k(float *out) {\r\n  float a$b = 1.0f; out[0] = a$b;\r\n}\r\n",
        ),
        ("empty", ""),
    ];
    let option_lists: [&[&str]; 3] = [&[], &["-O2", "-ffast-math"], &["-D X=1 2", "--param=a"]];
    let identities: [&[u8]; 3] = [b"", b"cc\ncc (Debian 14.2.0) 14.2.0\n-O2 -fPIC", b"clang"];
    for (symbol, text) in kernels {
        let file = dir.path().join(format!("{symbol}.c"));
        fs::write(&file, text).expect("write");
        for options in option_lists {
            for identity in identities {
                let id_file = dir.path().join("identity");
                fs::write(&id_file, identity).expect("write");
                let bound = ["n17_w", "n18_o"];
                let mut args = vec![
                    "key".to_string(),
                    file.display().to_string(),
                    "--symbol".into(),
                    symbol.into(),
                    "--bound".into(),
                    bound.join(","),
                    "--identity-file".into(),
                    id_file.display().to_string(),
                ];
                for o in options {
                    args.push(format!("--option={o}"));
                }
                let args: Vec<&str> = args.iter().map(String::as_str).collect();
                let out = kcache(&args);
                assert!(out.status.success(), "{args:?}: {out:?}");
                let names = kernel_cache::Names::new().with_bound(bound);
                let options: Vec<String> = options.iter().map(|o| o.to_string()).collect();
                let expected = kernel_cache::kernel_key(text, symbol, &names, &options, identity);
                assert_eq!(stdout(&out), format!("{expected}\n"), "{args:?}");
            }
        }
    }
    // `--option -O2` (a separate argument starting with `-`), `--identity` inline, stdin.
    let text = kernels[0].1;
    let mut child = Command::new(env!("CARGO_BIN_EXE_kcache"))
        .args(["key", "-", "--symbol", "step__seg7", "--option", "-O2"])
        .args(["--option", "-g", "--identity", "cc"])
        .env("KCACHE_LOG", "off")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    std::io::Write::write_all(&mut child.stdin.take().expect("stdin"), text.as_bytes())
        .expect("write");
    let out = child.wait_with_output().expect("wait");
    let expected = kernel_cache::kernel_key(
        text,
        "step__seg7",
        &kernel_cache::Names::new(),
        &["-O2".to_string(), "-g".to_string()],
        b"cc",
    );
    assert_eq!(stdout(&out), format!("{expected}\n"));
    // `--minted _`: the key of a counter-minted name is the library's under
    // `Names::with_minted_kernel_names("_")`.
    let file = dir.path().join("relu_17.c");
    fs::write(&file, text.replace("step__seg3", "relu_17")).expect("write");
    let out = kcache(&[
        "key",
        file.to_str().expect("utf8"),
        "--symbol",
        "relu_17",
        "--minted",
        "_",
    ]);
    let names = kernel_cache::Names::new().with_minted_kernel_names("_");
    let expected = kernel_cache::kernel_key(
        &text.replace("step__seg3", "relu_17"),
        "relu_17",
        &names,
        &[],
        b"",
    );
    assert_eq!(stdout(&out), format!("{expected}\n"));
    // Both identities at once, or a missing file, is a usage error, not a key.
    let out = kcache(&["key", "nope.c", "--symbol", "k"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stdout(&out).is_empty());
    let file = dir.path().join("step__seg3.c");
    let file = file.display().to_string();
    let out = kcache(&[
        "key",
        &file,
        "--symbol",
        "k",
        "--identity",
        "a",
        "--identity-file",
        &file,
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stdout(&out).is_empty());
}

/// The peak resident set (KiB) of `kcache <args>`, measured by the kernel (`ru_maxrss` of a
/// waited-for child, read through python3, which the tests need anyway).
fn peak_kib(args: &[&str]) -> u64 {
    let script = "import resource, subprocess, sys\n\
                  subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n\
                  print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)";
    let o = Command::new("python3")
        .args(["-c", script, env!("CARGO_BIN_EXE_kcache")])
        .args(args)
        .output()
        .expect("python3 runs (the tests need it)");
    assert!(o.status.success(), "{o:?}");
    stdout(&o).trim().parse().expect("a number of KiB")
}

/// `kcache show` streams the directory: its memory does not grow with the number of entries
/// (it held every entry's name and key, about 0.5 KiB each, before finding one).
#[test]
fn show_memory_does_not_grow_with_the_directory() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (small, large) = (tmp.path().join("small"), tmp.path().join("large"));
    fs::create_dir(&small).expect("mkdir");
    fs::create_dir(&large).expect("mkdir");
    // Entry names of today's length (the content is never read: nothing matches).
    for i in 0..40_000u64 {
        let digest = format!("{:064x}", u128::from(i) * 0x9e37_79b9_7f4a_7c15);
        let name = format!(
            "{digest}-{}-b{i:06x}_f000000_n000000_c000000_p000000_d000000_t000000.placement.ron",
            "e".repeat(64)
        );
        if i < 10 {
            fs::write(small.join(&name), "").expect("write");
        }
        fs::write(large.join(&name), "").expect("write");
    }
    let small_peak = peak_kib(&["show", small.to_str().expect("utf8"), "ffff"]);
    let large_peak = peak_kib(&["show", large.to_str().expect("utf8"), "ffff"]);
    // 40,000 entries held at once would add about 20 MiB.
    assert!(
        large_peak < small_peak + 6 * 1024,
        "peak {large_peak} KiB on 40,000 entries, {small_peak} KiB on 10"
    );
}

/// `canon` and `key` refuse an input larger than their cap (64 MiB) instead of reading until
/// memory runs out: `/dev/zero` never ends. Run under a 2 GiB address-space limit, so a reader
/// without a cap fails for want of memory (another message) rather than taking the machine's.
#[test]
fn canon_and_key_refuse_an_endless_input() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let kernel = tmp.path().join("k.c");
    fs::write(&kernel, "void f(float *a) { a[0] = 1.0f; }\n").expect("write");
    let kernel = kernel.to_str().expect("utf8");
    for args in [
        &["canon", "/dev/zero"][..],
        &["key", "/dev/zero", "--symbol", "f"],
        &[
            "key",
            kernel,
            "--symbol",
            "f",
            "--identity-file",
            "/dev/zero",
        ],
    ] {
        let o = Command::new("sh")
            .args(["-c", "ulimit -v 2097152 && exec \"$0\" \"$@\""])
            .arg(env!("CARGO_BIN_EXE_kcache"))
            .args(args)
            .env("KCACHE_LOG", "off")
            .output()
            .expect("run kcache under sh");
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(
            err.contains("/dev/zero: larger than the cap of 67108864 bytes"),
            "{args:?}: {err}"
        );
    }
}

/// An entry's content is shown with its control characters escaped: a file in the cache
/// directory cannot send escape sequences to the terminal of whoever inspects it.
#[test]
fn show_escapes_control_characters_of_an_entry() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let name = format!("{DIGEST}-esc.ron");
    fs::write(
        tmp.path().join(&name),
        "\u{1b}]0;title\u{7}\u{1b}[2J\r(version: 2,\n\tdigest: \"x\")",
    )
    .expect("write");
    let dir = tmp.path().to_str().expect("utf8");
    let o = kcache(&["show", dir, &format!("{DIGEST}-esc")]);
    assert!(o.status.success(), "{o:?}");
    let s = stdout(&o);
    assert!(
        !s.chars().any(|c| c.is_control() && c != '\n' && c != '\t'),
        "{s:?}"
    );
    assert!(
        s.ends_with("\n\\u{1b}]0;title\\u{7}\\u{1b}[2J\\r(version: 2,\n\tdigest: \"x\")\n"),
        "{s:?}"
    );
    let o = kcache(&["verify", dir]);
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    let s = stdout(&o);
    assert!(!s.chars().any(|c| c.is_control() && c != '\n'), "{s:?}");
}

#[test]
fn canon_into_a_closed_pipe_ends_quietly() {
    // `kcache canon f | head`: the reader is gone before kcache writes, so every write fails
    // with EPIPE (Rust ignores SIGPIPE). That is the reader's choice, not an error of ours.
    let tmp = tempfile::tempdir().expect("tempdir");
    let file = tmp.path().join("k.c");
    let body: String = (0..2000)
        .map(|i| format!("  out[{i}] = in[{i}] * 2.0f;\n"))
        .collect();
    fs::write(
        &file,
        format!("void k(float *out, const float *in) {{\n{body}}}\n"),
    )
    .expect("write");
    let mut child = Command::new(env!("CARGO_BIN_EXE_kcache"))
        .args(["canon", file.to_str().expect("utf8")])
        .env("KCACHE_LOG", "off")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn kcache");
    drop(child.stdout.take());
    let o = child.wait_with_output().expect("wait");
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    assert!(
        o.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// `kcache gc` on a directory no store has adopted (no stamp, nothing named like an entry)
/// removes nothing and creates nothing: it created `cache.lock` and `regime.stamp` there.
#[test]
fn gc_on_an_unadopted_directory_creates_nothing() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    fs::write(dir.join("README.txt"), "r\n").expect("write");
    let o = kcache(&["gc", dir.to_str().expect("utf8")]);
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    assert_prints(&o, "nothing removed");
    let left: Vec<String> = fs::read_dir(dir)
        .expect("list")
        .map(|e| e.expect("item").file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(left, ["README.txt"], "gc wrote into the directory");
}

/// Issue 36: `kcache key` says on stderr when the kernel's own name was keyed by its role,
/// and each reason the key is tied to a spelling (`Canonical::kept_names`); `canon` prints
/// the own name's and the declared names' reasons.
#[test]
fn key_and_canon_say_which_names_were_kept_and_why() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = |name: &str, text: &str| {
        let p = dir.path().join(name);
        fs::write(&p, text).expect("write");
        p.display().to_string()
    };
    let stderr = |o: &Output| String::from_utf8_lossy(&o.stderr).into_owned();
    // A minted name the text defines: keyed by its role, a twin shares the key.
    let a = file("a.c", "void E_4(float *d0) { d0[0] = 1; }");
    let b = file("b.c", "void E_4n1(float *d1) { d1[0] = 1; }");
    let oa = kcache(&["key", &a, "--symbol", "E_4"]);
    let ob = kcache(&["key", &b, "--symbol", "E_4n1"]);
    assert!(oa.status.success(), "{oa:?}");
    assert_eq!(stdout(&oa), stdout(&ob));
    assert!(
        stderr(&oa).contains("`E_4` keyed by its role"),
        "{}",
        stderr(&oa)
    );
    // A name the compiler may know, and a declared name used outside its scope: each kept,
    // each said why.
    let c = file(
        "c.c",
        "void relu(float *d0) { { float t = 1; } d0[0] = t; }",
    );
    let oc = kcache(&["key", &c, "--symbol", "relu"]);
    let err = stderr(&oc);
    assert!(
        err.contains("kernel name `relu`: not a minted name"),
        "{err}"
    );
    assert!(
        err.contains("name `t`: used outside its declarations' scope"),
        "{err}"
    );
    assert!(!err.contains("keyed by its role"), "{err}");
    let canon = kcache(&["canon", &c, "--name", "relu"]);
    let out = stdout(&canon);
    assert!(
        out.contains("kernel name kept: relu: not a minted name"),
        "{out}"
    );
    assert!(out.contains("kept: t: used outside"), "{out}");
    // Observed: the exact text, the refusal said.
    let d = file("d.c", "void E_4(float *d0) { puts(__func__); }");
    let err = stderr(&kcache(&["key", &d, "--symbol", "E_4"]));
    assert!(err.contains("refused: "), "{err}");
    assert!(
        err.contains("kernel name `E_4`: the text is keyed over its exact text"),
        "{err}"
    );
}
