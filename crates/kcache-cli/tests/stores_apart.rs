//! The kernel store and the schedule store never confuse each other's directories: each
//! direction (a schedule store on a kernel store's directory, a kernel store on a schedule
//! store's), through the stores' front doors and through the real `kcache gc/stats/verify`, is
//! refused with a message naming the path and both store kinds, and nothing in the directory
//! changes (every file's name, content and mode compared). Real directories, real processes.

mod common;

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Output;

use common::{DIGEST, entry, kcache, key};
use kernel_cache::store::{DirError, KernelStore, MissReason, STORE_KIND as KERNEL_KIND};
use kernel_cache::{BatchKernel, KernelCache, Resolver};
use schedule_cache::Store as _;
use schedule_cache::admin::STORE_KIND as SCHEDULE_KIND;
use schedule_cache::placement::PlacementEntry;
use schedule_cache::{DiskCache, Lookup, Refusal, StoreOutcome};
use test_support::lines::Lines;

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Every path under `dir` with its mode and content (directories as `<dir>`).
fn snapshot(dir: &Path) -> BTreeMap<String, (u32, Vec<u8>)> {
    let mut out = BTreeMap::new();
    for item in std::fs::read_dir(dir).expect("list") {
        let item = item.expect("item");
        let meta = std::fs::symlink_metadata(item.path()).expect("lstat");
        let name = item.file_name().to_string_lossy().into_owned();
        let mode = meta.permissions().mode();
        if meta.is_dir() {
            out.insert(name.clone(), (mode, b"<dir>".to_vec()));
            for (sub, v) in snapshot(&item.path()) {
                out.insert(format!("{name}/{sub}"), v);
            }
        } else {
            out.insert(name, (mode, std::fs::read(item.path()).expect("read")));
        }
    }
    out
}

/// Asserts that `message` names `path` and both store kinds, the directory's and the
/// intruder's.
#[track_caller]
fn names_both(message: &str, path: &Path, found: &str, ours: &str) {
    for want in [
        path.display().to_string(),
        format!("is a {found} directory"),
        format!("not a {ours} directory"),
        "nothing swept".to_string(),
    ] {
        assert!(message.contains(&want), "{want:?} not in {message:?}");
    }
}

fn kernels(n: usize) -> Vec<BatchKernel<String>> {
    (0..n)
        .map(|p| BatchKernel {
            key: format!("key-{p}"),
            options: vec![],
            symbol: format!("k{p}"),
            source: format!("kernel {p}"),
        })
        .collect()
}

#[test]
fn a_schedule_store_refuses_a_kernel_stores_directory_and_sweeps_nothing() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("kernels");
    let store = KernelStore::new(&dir);
    for b in kernels(3) {
        Resolver::new(&KernelCache::new(1 << 20), &Lines::default())
            .store(Some(&store))
            .resolve_strict(&[b])
            .map(|r| r.answers)
            .expect("resolve");
    }
    let before = snapshot(&dir);
    assert!(before.keys().any(|n| n.starts_with("b-")), "{before:?}");
    let at = |v: &str| v.to_string();
    assert_eq!(
        std::fs::read_to_string(dir.join("regime.stamp")).expect("stamp"),
        format!("{KERNEL_KIND} {}\n", kernel_cache::store::REGIME)
    );

    // The front door, at this build's regime and at a newer one (whose open sweeps an older
    // regime's entries: it must not see the kernel store's as such).
    for schedule in [DiskCache::new(&dir), DiskCache::new(&dir).with_regime(9)] {
        let refusal = |r: Refusal| match r {
            Refusal::OtherStore(e) => {
                assert!(
                    matches!(e.error(), cache_dir::Error::ForeignStore { .. }),
                    "{e}"
                );
                names_both(&e.to_string(), &dir, KERNEL_KIND, SCHEDULE_KIND)
            }
            other => panic!("{other:?}"),
        };
        match schedule.store(Some(&key("a")), &entry(1)).expect("store") {
            StoreOutcome::Refused(r) => refusal(r),
            other => panic!("{other:?}"),
        }
        match schedule.probe::<PlacementEntry>(Some(&key("a")), DIGEST) {
            Lookup::Refused(r) => refusal(r),
            other => panic!("{other:?}"),
        }
        refusal(schedule.gc(None).expect_err("gc"));
        refusal(schedule.check_adoptable().expect_err("adoptable"));
        assert_eq!(snapshot(&dir), before);
    }

    // The CLI, which takes DIR for a schedule store.
    let path = dir.to_str().expect("utf-8");
    let gc = kcache(&["gc", path]);
    assert!(!gc.status.success(), "{}", text(&gc));
    names_both(&text(&gc), &dir, KERNEL_KIND, SCHEDULE_KIND);
    let verify = kcache(&["verify", path]);
    assert_eq!(verify.status.code(), Some(1), "{}", text(&verify));
    names_both(&text(&verify), &dir, KERNEL_KIND, SCHEDULE_KIND);
    let stats = kcache(&["stats", path]);
    names_both(&text(&stats), &dir, KERNEL_KIND, SCHEDULE_KIND);
    assert!(
        !text(&stats).contains("sweeps every entry"),
        "{}",
        text(&stats)
    );
    assert_eq!(
        snapshot(&dir),
        before,
        "{}",
        at("the CLI changed the kernel store")
    );

    // The kernel store still answers from its own directory.
    assert!(store.probe("lines 1", "key-0").is_ok());
}

#[test]
fn a_kernel_store_refuses_a_schedule_stores_directory_and_sweeps_nothing() {
    let tmp = tempfile::tempdir().expect("tmp");
    // `kcache` looks for the kernel store at DIR/kernels: make that a schedule store.
    let dir = tmp.path().join("kernels");
    std::fs::create_dir(&dir).expect("mkdir");
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).expect("chmod");
    let schedule = DiskCache::new(&dir);
    for (i, k) in ["a", "b"].iter().enumerate() {
        assert_eq!(
            schedule
                .store(Some(&key(k)), &entry(i as u32))
                .expect("store"),
            StoreOutcome::Stored
        );
    }
    let before = snapshot(&dir);

    let store = KernelStore::new(&dir);
    match store.create() {
        Err(e @ DirError::ForeignStore { .. }) => {
            names_both(&e.to_string(), &dir, SCHEDULE_KIND, KERNEL_KIND)
        }
        other => panic!("{other:?}"),
    }
    match store.probe("lines 1", "key-0") {
        Err(MissReason::Refused(message)) => names_both(&message, &dir, SCHEDULE_KIND, KERNEL_KIND),
        other => panic!("{other:?}"),
    }
    match store.trim(0) {
        Err(e @ DirError::ForeignStore { .. }) => {
            names_both(&e.to_string(), &dir, SCHEDULE_KIND, KERNEL_KIND)
        }
        other => panic!("{other:?}"),
    }
    // A resolve through it compiles and answers, saving nothing there.
    let b = kernels(2);
    let got = Resolver::new(&KernelCache::new(1 << 20), &Lines::default())
        .store(Some(&store))
        .resolve_strict(&b)
        .map(|r| r.answers)
        .expect("resolve");
    assert_eq!(got.len(), 2);
    assert_eq!(snapshot(&dir), before);

    // The CLI, which takes DIR/kernels for the kernel store.
    let parent = tmp.path().to_str().expect("utf-8");
    let stats = kcache(&["stats", parent]);
    names_both(&text(&stats), &dir, SCHEDULE_KIND, KERNEL_KIND);
    assert!(
        !text(&stats).contains("sweeps every entry"),
        "{}",
        text(&stats)
    );
    let gc = kcache(&["gc", parent, "--max-size", "0"]);
    assert!(!gc.status.success(), "{}", text(&gc));
    names_both(&text(&gc), &dir, SCHEDULE_KIND, KERNEL_KIND);
    let verify = kcache(&["verify", parent]);
    assert!(
        !text(&verify).contains("sweeps every entry"),
        "{}",
        text(&verify)
    );
    assert_eq!(snapshot(&dir), before, "the CLI changed the schedule store");

    // The schedule store still answers from its own directory.
    assert_eq!(schedule.lookup(Some(&key("a")), DIGEST), Some(entry(0)));
}

/// Directories stamped before stamps named their kind (a bare `1` or `2`, either store's):
/// the wrong store refuses them naming the path, its kind and a file it never writes, with
/// nothing swept; the right store takes them as its own and names its kind in the stamp.
#[test]
fn a_legacy_bare_stamp_is_never_swept_by_the_wrong_store() {
    let tmp = tempfile::tempdir().expect("tmp");
    let kdir = tmp.path().join("kernels");
    let store = KernelStore::new(&kdir);
    Resolver::new(&KernelCache::new(1 << 20), &Lines::default())
        .store(Some(&store))
        .resolve_strict(&kernels(2))
        .map(|r| r.answers)
        .expect("resolve");
    let sdir = tmp.path().join("schedule");
    let schedule = DiskCache::new(&sdir);
    assert_eq!(
        schedule.store(Some(&key("a")), &entry(0)).expect("store"),
        StoreOutcome::Stored
    );
    std::fs::set_permissions(&sdir, std::fs::Permissions::from_mode(0o700)).expect("chmod");
    for bare in ["1\n", "2\n"] {
        std::fs::write(kdir.join("regime.stamp"), bare).expect("stamp");
        std::fs::write(sdir.join("regime.stamp"), bare).expect("stamp");
        let (kbefore, sbefore) = (snapshot(&kdir), snapshot(&sdir));
        let unkinded = |message: &str, path: &Path, ours: &str| {
            for want in [
                path.display().to_string(),
                "names no store kind".into(),
                format!("no {ours} writes"),
                "nothing swept".into(),
            ] {
                assert!(message.contains(&want), "{want:?} not in {message:?}");
            }
        };
        match DiskCache::new(&kdir)
            .store(Some(&key("a")), &entry(1))
            .expect("store")
        {
            StoreOutcome::Refused(Refusal::OtherStore(e)) => {
                assert!(
                    matches!(e.error(), cache_dir::Error::UnkindedStamp { .. }),
                    "{e}"
                );
                unkinded(&e.to_string(), &kdir, SCHEDULE_KIND)
            }
            other => panic!("{other:?}"),
        }
        match KernelStore::new(&sdir).create() {
            Err(e @ DirError::UnkindedStamp { .. }) => unkinded(&e.to_string(), &sdir, KERNEL_KIND),
            other => panic!("{other:?}"),
        }
        let gc = kcache(&["gc", kdir.to_str().expect("utf-8")]);
        assert!(!gc.status.success(), "{}", text(&gc));
        unkinded(&text(&gc), &kdir, SCHEDULE_KIND);
        assert_eq!(snapshot(&kdir), kbefore, "{bare:?}");
        assert_eq!(snapshot(&sdir), sbefore, "{bare:?}");
    }
    // Each store takes its own legacy directory (at its regime 2: nothing swept).
    assert!(store.probe("lines 1", "key-0").is_ok());
    assert_eq!(
        std::fs::read_to_string(kdir.join("regime.stamp")).expect("stamp"),
        format!("{KERNEL_KIND} 2\n")
    );
    assert_eq!(schedule.lookup(Some(&key("a")), DIGEST), Some(entry(0)));
    assert_eq!(
        std::fs::read_to_string(sdir.join("regime.stamp")).expect("stamp"),
        format!("{SCHEDULE_KIND} 2\n")
    );
}
