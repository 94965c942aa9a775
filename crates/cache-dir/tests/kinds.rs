//! Two store kinds never confuse each other's directories: a stamp names its store kind, every
//! cross-kind open is refused naming the path and both kinds with nothing swept or changed, and
//! a bare legacy stamp is taken as a store's own only when every file in the directory is one
//! that store writes. Real directories and files.

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;

use cache_dir::{CacheDir, Error, Mode, RegimeStamp, STAMP_FILE, read_stamp};

fn is_a(name: &str) -> bool {
    name.ends_with(".a")
}

fn is_b(name: &str) -> bool {
    name.ends_with(".b")
}

fn a_store(dir: &Path, regime: u32) -> CacheDir {
    CacheDir::new(dir, "a-store", regime, is_a)
}

fn b_store(dir: &Path, regime: u32) -> CacheDir {
    CacheDir::new(dir, "b-store", regime, is_b).with_own_files(|n| n == "stats")
}

/// Every name in `dir` with its content (directories as `<dir>`).
fn snapshot(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    fs::read_dir(dir)
        .expect("list")
        .map(|item| {
            let item = item.expect("item");
            let name = item.file_name().into_string().expect("utf-8");
            let content = if item.file_type().expect("type").is_dir() {
                b"<dir>".to_vec()
            } else {
                fs::read(item.path()).expect("read")
            };
            (name, content)
        })
        .collect()
}

/// Every way `store` opens or locks a directory for its own use refuses it with `check`.
fn every_open_refuses(store: &CacheDir, check: impl Fn(Error)) {
    check(store.with_shared(false, |_| ()).expect_err("shared open"));
    check(
        store
            .with_shared(true, |_| ())
            .expect_err("shared open, create"),
    );
    check(
        store
            .with_exclusive(true, |_| ())
            .expect_err("exclusive open"),
    );
    check(
        store
            .lock_adopted(Mode::Exclusive)
            .err()
            .expect("lock_adopted"),
    );
    check(store.sweep_stale_staging().expect_err("sweep"));
    check(store.check_adoptable().expect_err("check_adoptable"));
}

#[test]
fn a_store_refuses_another_kinds_directory_by_name_sweeping_nothing() {
    let tmp = tempfile::tempdir().expect("tempdir");
    for (owner, intruder) in [("a-store", "b-store"), ("b-store", "a-store")] {
        let dir = tmp.path().join(owner);
        let (own, other) = if owner == "a-store" {
            (a_store(&dir, 2), b_store(&dir, 2))
        } else {
            (b_store(&dir, 2), a_store(&dir, 2))
        };
        own.with_shared(true, |g| {
            g.publish("x.a", b"a entry").expect("publish");
            g.publish("x.b", b"b entry").expect("publish");
        })
        .expect("owner opens");
        // The intruder at an older, equal and newer regime: refused alike.
        for regime in [1, 2, 3] {
            let other = CacheDir::new(&dir, other.kind(), regime, is_a);
            let before = snapshot(&dir);
            every_open_refuses(&other, |e| {
                let text = e.to_string();
                assert!(
                    matches!(&e, Error::ForeignStore { found, version: 2, ours, path }
                        if found == owner && *ours == intruder && *path == dir),
                    "{e:?}"
                );
                for want in [owner, intruder, &dir.display().to_string()] {
                    assert!(text.contains(want), "{text:?} lacks {want:?}");
                }
            });
            assert_eq!(
                snapshot(&dir),
                before,
                "{intruder} at regime {regime} changed {owner}'s directory"
            );
        }
        assert_eq!(
            read_stamp(&dir).expect("stamp"),
            RegimeStamp::Kind {
                kind: owner.into(),
                version: 2
            }
        );
        own.with_shared(false, |g| {
            assert_eq!(g.read("x.a", 64).expect("read"), b"a entry")
        })
        .expect("the owner still opens its directory");
    }
}

#[test]
fn a_bare_legacy_stamp_is_adopted_only_when_every_file_is_the_stores_own() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("legacy");
    fs::create_dir(&dir).expect("mkdir");
    fs::write(dir.join(STAMP_FILE), "2\n").expect("stamp");
    fs::write(dir.join("k1.a"), "a entry").expect("entry");
    // The b store cannot tell whose it is: refused, naming the file it never writes.
    let before = snapshot(&dir);
    every_open_refuses(&b_store(&dir, 2), |e| {
        assert!(
            matches!(&e, Error::UnkindedStamp { version: 2, ours: "b-store", name, path }
                if name == "k1.a" && *path == dir),
            "{e:?}"
        );
        let text = e.to_string();
        assert!(
            text.contains(&dir.display().to_string()) && text.contains("b-store"),
            "{text}"
        );
    });
    // Newer or older, still unkinded: the refusal names what it holds, nothing swept.
    every_open_refuses(&b_store(&dir, 3), |e| {
        assert!(matches!(e, Error::UnkindedStamp { .. }), "{e:?}")
    });
    every_open_refuses(&b_store(&dir, 1), |e| {
        assert!(matches!(e, Error::UnkindedStamp { .. }), "{e:?}")
    });
    assert_eq!(snapshot(&dir), before);
    // The a store, at a newer regime than it: refused naming the path and kind.
    let err = a_store(&dir, 1)
        .with_shared(false, |_| ())
        .expect_err("newer");
    assert!(
        matches!(&err, Error::NewerRegime { kind: "a-store", found: 2, ours: 1, path } if *path == dir),
        "{err:?}"
    );
    assert!(
        err.to_string().contains(&dir.display().to_string()),
        "{err}"
    );
    // (Its own directory at a newer regime gets the lock file, as before kinds; nothing else.)
    let mut after = snapshot(&dir);
    after.remove(cache_dir::LOCK_FILE);
    assert_eq!(after, before);
    // At its own regime: the stamp gains the kind, the entry stays.
    a_store(&dir, 2)
        .with_shared(false, |g| {
            assert_eq!(g.read("k1.a", 64).expect("read"), b"a entry")
        })
        .expect("adopted");
    assert_eq!(
        fs::read_to_string(dir.join(STAMP_FILE)).expect("stamp"),
        "a-store 2\n"
    );
    // And the b store is now refused by name.
    every_open_refuses(&b_store(&dir, 2), |e| {
        assert!(matches!(e, Error::ForeignStore { .. }), "{e:?}")
    });
}

#[test]
fn an_older_bare_stamp_of_the_stores_own_files_is_swept_and_kinded() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("legacy");
    fs::create_dir(&dir).expect("mkdir");
    fs::write(dir.join(STAMP_FILE), "1\n").expect("stamp");
    fs::write(dir.join("k1.b"), "old b entry").expect("entry");
    fs::write(dir.join("stats"), "counters").expect("own file");
    // The a store: `k1.b` and `stats` are no files of its own.
    every_open_refuses(&a_store(&dir, 2), |e| {
        assert!(matches!(e, Error::UnkindedStamp { .. }), "{e:?}")
    });
    assert!(dir.join("k1.b").exists());
    b_store(&dir, 2)
        .with_shared(false, |_| ())
        .expect("adopted");
    assert!(
        !dir.join("k1.b").exists(),
        "an older regime's entry is swept"
    );
    assert_eq!(fs::read(dir.join("stats")).expect("own file"), b"counters");
    assert_eq!(
        fs::read_to_string(dir.join(STAMP_FILE)).expect("stamp"),
        "b-store 2\n"
    );
}
