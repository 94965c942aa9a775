//! `kcache stats`, `kcache verify` and `kcache gc --max-size` on a real kernel store at `DIR/kernels`, filled
//! by real resolves in this process and read by the real binary.

mod common;

use common::kcache;
use kernel_cache::store::KernelStore;
use kernel_cache::{BatchKernel, KernelCache, Resolver};
use test_support::lines::Lines;

fn line<'a>(out: &'a str, prefix: &str) -> &'a str {
    out.lines()
        .find(|l| l.trim_start().starts_with(prefix))
        .unwrap_or_else(|| panic!("no {prefix} line in {out}"))
}

#[test]
fn stats_shows_the_kernel_store_and_gc_trims_it() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path();
    let store = KernelStore::new(dir.join("kernels"));
    for round in 0..2 {
        // Three programs of one kernel each; the second round is all store hits.
        for p in 0..3 {
            let b = vec![BatchKernel {
                key: format!("key-{p}"),
                options: vec![],
                symbol: format!("k{p}"),
                source: format!("kernel {p} {}", "x".repeat(1000)),
            }];
            let cache = KernelCache::new(1 << 20);
            Resolver::new(&cache, &Lines::default())
                .store(Some(&store))
                .resolve_strict(&b)
                .map(|r| r.answers)
                .expect("resolve");
        }
        let _ = round;
    }
    let out = kcache(&["stats", dir.to_str().expect("utf-8")]);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{text}");
    assert!(line(&text, "kernel store:").contains("kernels"));
    assert_eq!(line(&text, "entries: 3"), "  entries: 3 (programs 3)");
    assert!(
        line(&text, "hits:").starts_with("  hits: 3 kernels (50.0%)"),
        "{text}"
    );
    assert_eq!(line(&text, "misses:"), "  misses: 3 kernels");
    // Saves and evictions count programs, lookups kernels: 3 programs of one kernel each.
    assert_eq!(line(&text, "saves:"), "  saves: 3 programs");
    assert_eq!(line(&text, "evictions:"), "  evictions: 0 programs");
    // The store's directory is not a foreign file of the schedule cache.
    assert_eq!(line(&text, "foreign files:"), "foreign files: 0");

    let out = kcache(&["gc", dir.to_str().expect("utf-8"), "--max-size", "2500"]);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{text}");
    assert!(text.contains("kernel store: evicted 2 programs"), "{text}");
    let stats = store.stats().expect("stats");
    assert!(stats.bytes <= 2500, "{stats:?}");
    assert_eq!(stats.counters.evictions, 2);
    // The most recently used program survived.
    assert!(store.probe("lines 1", "key-2").is_ok());
}

/// The kernel store at `dir/kernels`, holding the one program a resolve of `key-0` saved.
fn store_with_one_program(dir: &std::path::Path) -> std::path::PathBuf {
    let kernels = dir.join("kernels");
    let store = KernelStore::new(&kernels);
    let b = vec![BatchKernel {
        key: "key-0".to_string(),
        options: vec![],
        symbol: "k0".to_string(),
        source: "kernel 0".to_string(),
    }];
    Resolver::new(&KernelCache::new(1 << 20), &Lines::default())
        .store(Some(&store))
        .resolve_strict(&b)
        .map(|r| r.answers)
        .expect("resolve");
    kernels
}

/// The counters file is text anyone who writes the store can edit: counters whose sum
/// does not fit in 64 bits are shown as they are, with their rate, not a panic.
#[test]
fn stats_shows_counters_whose_sum_overflows() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path();
    let kernels = store_with_one_program(dir);
    std::fs::write(
        kernels.join("stats"),
        format!(
            "kcache kernel store stats 1\nhits {}\nmisses {}\n",
            u64::MAX,
            u64::MAX
        ),
    )
    .expect("edit the counters");
    let out = kcache(&["stats", dir.to_str().expect("utf-8")]);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        line(&text, "hits:"),
        format!("  hits: {} kernels (50.0%)", u64::MAX)
    );
    assert_eq!(
        line(&text, "misses:"),
        format!("  misses: {} kernels", u64::MAX)
    );
}

/// `kcache stats` changes nothing: a kernel store stamped with another regime is shown, not
/// opened (opening it is the cache-open, which swept every program and entry).
#[test]
fn stats_never_sweeps_a_kernel_store_of_another_regime() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path();
    let kernels = store_with_one_program(dir);
    let listing = |d: &std::path::Path| -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(d)
            .expect("list")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    };
    let ours = kernel_cache::store::REGIME;
    let kind = kernel_cache::store::STORE_KIND;
    let refused =
        format!(", and every open of this {kind} refuses the directory, touching nothing: ");
    for (stamp, shown) in [
        (
            format!("{kind} 0\n"),
            vec![format!(
                "  regime: {kind} 0 (older than this build's {ours}: the next open sweeps every entry); not opened"
            )],
        ),
        (
            format!("{kind} 99\n"),
            vec![format!(
                "  regime: {kind} 99 (newer than this build's {ours}: this build refuses it); not opened"
            )],
        ),
        (
            // A bare stamp of only the kernel store's files is taken as its own.
            format!("{ours}\n"),
            vec![format!(
                "  regime: {ours} (no store kind) (every file is this {kind}'s: the next open stamps it `{kind} {ours}`, sweeping nothing); not opened"
            )],
        ),
        (
            // Another store's stamp: refused by name, both kinds in the line (the path is
            // the section's header, not repeated in the line).
            "kcache-schedule-store 2\n".to_string(),
            vec![
                format!("  regime: kcache-schedule-store 2{refused}"),
                "this directory is a kcache-schedule-store directory".into(),
                format!("not a {kind} directory"),
            ],
        ),
        (
            "x\n".to_string(),
            vec![format!("  regime: malformed (\"x\\n\"){refused}")],
        ),
    ] {
        std::fs::write(kernels.join("regime.stamp"), &stamp).expect("stamp");
        let before = listing(&kernels);
        assert!(before.len() > 3, "{before:?}");
        let out = kcache(&["stats", dir.to_str().expect("utf-8")]);
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        assert_eq!(listing(&kernels), before, "stats changed the store: {text}");
        assert_eq!(
            std::fs::read_to_string(kernels.join("regime.stamp")).expect("stamp"),
            stamp
        );
        // An older regime or a bare stamp of its own files is a store the next open admits
        // (status 0); a newer, another store's or a malformed stamp is refused (status 1).
        let admitted = stamp == format!("{kind} 0\n") || stamp == format!("{ours}\n");
        assert_eq!(
            out.status.code(),
            Some(if admitted { 0 } else { 1 }),
            "{text}"
        );
        let header = format!("kernel store: {}", kernels.display());
        assert!(text.lines().any(|l| l == header), "{text}");
        assert_eq!(
            text.matches(&kernels.display().to_string()).count(),
            1,
            "the store's path once: {text}"
        );
        assert!(
            text.lines().any(|l| l.starts_with("  regime: ")
                && l.ends_with("; not opened")
                && shown.iter().enumerate().all(|(i, want)| if i == 0 {
                    l.starts_with(want.as_str())
                } else {
                    l.contains(want.as_str())
                })),
            "{stamp:?}: {shown:?} not in\n{text}"
        );
    }
    std::fs::remove_file(kernels.join("regime.stamp")).expect("rm");
    let before = listing(&kernels);
    let out = kcache(&["stats", dir.to_str().expect("utf-8")]);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    // Since an open refuses an unstamped directory holding entry-named files (it sweeps
    // nothing), stats says so; it said the next open would stamp it and sweep the entries.
    assert!(
        text.lines().any(|l| l.starts_with(
            "  regime: absent, and every open of this kcache-kernel-store refuses the directory, touching nothing: "
        ) && l.contains("named like an entry")
            && l.ends_with("; not opened")),
        "{text}"
    );
    // The cache directory itself: no stamp and nothing named like an entry, then a user's
    // settings.ron beside it.
    assert!(
        text.lines().any(
            |l| l == "regime: absent (the next open stamps it: no file is named like an entry)"
        ),
        "{text}"
    );
    std::fs::write(dir.join("settings.ron"), "mine\n").expect("write");
    let out = kcache(&["stats", dir.to_str().expect("utf-8")]);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        text.lines().any(|l| l.starts_with(
            "regime: absent, and every open of this kcache-schedule-store refuses the directory, touching nothing: "
        ) && l.contains("\"settings.ron\", named like an entry")),
        "{text}"
    );
    assert!(!dir.join("cache.lock").exists(), "stats created nothing");
    assert_eq!(listing(&kernels), before, "stats changed the store");
}

/// `kcache verify` checks the kernel store too: a damaged or deleted program is a problem
/// (it said "0 problems" with every blob deleted), and nothing is changed.
#[test]
fn verify_checks_the_kernel_store() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path();
    let kernels = store_with_one_program(dir);
    let d = dir.to_str().expect("utf-8");
    let out = kcache(&["verify", d]);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("verified kernel store ")
            && text.ends_with(": 1 entries, 1 programs: 0 problem(s)\n"),
        "{text}"
    );
    let blob = std::fs::read_dir(&kernels)
        .expect("list")
        .map(|e| e.expect("entry").path())
        .find(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("b-"))
        })
        .expect("a blob");
    let mut bytes = std::fs::read(&blob).expect("read");
    bytes.push(b'!');
    std::fs::write(&blob, &bytes).expect("damage");
    let out = kcache(&["verify", d]);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains("does not hash to its name"), "{text}");
    assert!(text.contains(": 2 problem(s)"), "blob and entry: {text}");
    assert_eq!(
        std::fs::read(&blob).expect("still there"),
        bytes,
        "verify changed it"
    );
    std::fs::remove_file(&blob).expect("delete");
    let out = kcache(&["verify", d]);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains("is absent") && text.contains(": 1 problem(s)"),
        "{text}"
    );
    // A stamp every open refuses is a problem; it is not checked further.
    std::fs::write(kernels.join("regime.stamp"), "kcache-schedule-store 2\n").expect("stamp");
    let out = kcache(&["verify", d]);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains("not checked"), "{text}");
}

/// A kernel that failed alone is remembered by the store: `kcache stats` counts it,
/// `kcache failures` lists its message, `kcache gc --failures AGE` keeps a younger one and
/// `kcache gc --failures` forgets it (the next resolve compiles the kernel again).
#[test]
fn stats_counts_remembered_failures_and_gc_forgets_them() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path();
    let d = dir.to_str().expect("utf-8");
    let store = KernelStore::new(dir.join("kernels"));
    let batch = [
        BatchKernel {
            key: "good".into(),
            options: vec![],
            symbol: "k0".into(),
            source: "good kernel".into(),
        },
        BatchKernel {
            key: "bad".into(),
            options: vec![],
            symbol: "k1".into(),
            source: "fail:undefined reference to `kcache_missing'".into(),
        },
    ];
    let lines = Lines::default();
    let resolve = || {
        let cache = KernelCache::new(1 << 20);
        Resolver::new(&cache, &lines)
            .store(Some(&store))
            .resolve(&batch)
            .map(|r| r.answers)
            .expect("resolve")
    };
    resolve();
    let compiles = lines.compiles();
    let again = resolve();
    assert_eq!(
        lines.compiles(),
        compiles,
        "nothing compiled the second time"
    );
    assert!(again[1].as_ref().is_err_and(|e| e.remembered().is_some()));

    let out = kcache(&["stats", d]);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{text}");
    assert!(
        line(&text, "failures:").starts_with("  failures: 1 remembered ("),
        "{text}"
    );
    let out = kcache(&["failures", d]);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("undefined reference to `kcache_missing'"),
        "{text}"
    );
    assert!(text.contains("1 remembered failure(s)"), "{text}");

    let out = kcache(&["gc", d, "--failures", "1h"]);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{text}");
    assert!(text.contains("forgot 0 remembered failures"), "{text}");
    let out = kcache(&["gc", d, "--failures"]);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{text}");
    assert!(text.contains("forgot 1 remembered failures"), "{text}");
    assert_eq!(store.stats().expect("stats").failures, 0);
    resolve();
    assert!(lines.compiles() > compiles, "compiled again once forgotten");
}

/// `gc --older-than` removes the kernel store's programs by last use: of three programs,
/// the two whose last use (the blob's time) is three hours back go, the one used now stays,
/// whatever their publish order.
#[test]
fn gc_older_than_removes_kernel_programs_by_last_use() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path();
    let kernels = dir.join("kernels");
    let store = KernelStore::new(&kernels);
    for p in 0..3 {
        let b = vec![BatchKernel {
            key: format!("key-{p}"),
            options: vec![],
            symbol: format!("k{p}"),
            source: format!("kernel {p}"),
        }];
        Resolver::new(&KernelCache::new(1 << 20), &Lines::default())
            .store(Some(&store))
            .resolve_strict(&b)
            .map(|r| r.answers)
            .expect("resolve");
    }
    // Every program last used three hours ago, then key-0 (the first published) used now.
    let long_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(3 * 3600);
    for item in std::fs::read_dir(&kernels).expect("list") {
        let item = item.expect("item");
        if item.file_name().to_string_lossy().starts_with("b-") {
            std::fs::File::options()
                .write(true)
                .open(item.path())
                .expect("open")
                .set_modified(long_ago)
                .expect("mtime");
        }
    }
    let b = vec![BatchKernel {
        key: "key-0".to_string(),
        options: vec![],
        symbol: "k0".to_string(),
        source: "kernel 0".to_string(),
    }];
    Resolver::new(&KernelCache::new(1 << 20), &Lines::default())
        .store(Some(&store))
        .resolve_strict(&b)
        .map(|r| r.answers)
        .expect("resolve");
    let out = kcache(&["gc", dir.to_str().expect("utf-8"), "--older-than", "1h"]);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("kernel store: evicted 2 programs unused for 3600 s"),
        "{text}"
    );
    assert!(store.probe("lines 1", "key-0").is_ok(), "used now: kept");
    assert!(
        store.probe("lines 1", "key-1").is_err(),
        "unused for 3 h: removed"
    );
    assert!(
        store.probe("lines 1", "key-2").is_err(),
        "unused for 3 h: removed"
    );
}
