//! What `kcache --help` says, held to what the real binary does: the exit statuses are
//! listed, `key --help`'s own example gives the key cc-backend gives the same source, and
//! `gc --older-than` goes by publish time on the schedule store (which keeps no last-use
//! mark), as its help says.

mod common;

use schedule_cache::Store as _;
use std::fs;
use std::process::Command;
use std::time::{Duration, SystemTime};

use cc_backend::{DEFAULT_PRELUDE, Elem, Extent, Signature, Source};
use common::{DIGEST, entry, kcache, key};
use schedule_cache::placement::PlacementEntry;

fn help(args: &[&str]) -> String {
    let o = kcache(args);
    assert!(o.status.success(), "{o:?}");
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn help_lists_every_exit_status() {
    let text = help(&["--help"]);
    for status in [
        "  0  success",
        "  1  a finding",
        "  2  usage or I/O error",
        "  3  nothing there",
    ] {
        assert!(text.contains(status), "no {status:?} in:\n{text}");
    }
    assert!(text.contains("DIR/kernels"), "{text}");
}

/// The example of `kcache key --help`, run as printed (its indented lines, by `sh`, with
/// `PRELUDE` and `TEXT` set), prints the key `cc_backend::Source::key` gives the source it
/// describes.
#[test]
fn key_helps_own_example_gives_cc_backends_key() {
    let text = help(&["key", "--help"]);
    let (_, example) = text
        .split_once("For example")
        .expect("an example in key --help");
    let script: Vec<&str> = example
        .lines()
        .skip_while(|l| !l.starts_with("    "))
        .take_while(|l| l.starts_with("    "))
        .map(str::trim)
        .collect();
    assert_eq!(script.len(), 3, "{text}");
    assert!(script[2].starts_with("kcache key "), "{script:?}");

    let kernel = "void k(float *y, const float *x, int n) {\n  for (int i = 0; i < 256; ++i) y[i] = x[i % n] * 2.0f;\n}\n";
    let signature = Signature::new()
        .buffer_mut("y", Elem::F32, Extent::fixed(256))
        .buffer("x", Elem::F32, Extent::of("n"))
        .scalar("n", Elem::I32);
    let source = Source::new(kernel, signature).with_prelude(DEFAULT_PRELUDE);
    let names = kernel_cache::Names::new().with_bound(["y", "x"]);
    let expected = source.key("k", &names, &["-O2".to_string()], "cc-1");

    let dir = tempfile::tempdir().expect("tmp");
    let bin = std::path::Path::new(env!("CARGO_BIN_EXE_kcache"));
    let path = format!(
        "{}:{}",
        bin.parent().expect("bin dir").display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let o = Command::new("sh")
        .args(["-c", &script.join("\n")])
        .current_dir(dir.path())
        .env("PATH", path)
        .env("PRELUDE", DEFAULT_PRELUDE)
        .env("TEXT", kernel)
        .env("KCACHE_LOG", "off")
        .output()
        .expect("sh");
    assert!(o.status.success(), "{o:?}");
    assert_eq!(
        String::from_utf8_lossy(&o.stdout),
        format!("{expected}\n"),
        "the example of key --help gives another key than cc-backend's; script:\n{}",
        script.join("\n")
    );
}

/// A schedule entry published long ago and looked up a moment ago is removed by `gc
/// --older-than`: the schedule store keeps no last-use mark (a lookup writes nothing), so
/// the age is the publish time, as `gc --help` says.
#[test]
fn gc_older_than_goes_by_publish_time_on_the_schedule_store() {
    let help_text = help(&["gc", "--help"]);
    assert!(
        help_text.contains("By publish time, not last use"),
        "{help_text}"
    );

    let tmp = tempfile::tempdir().expect("tmp");
    let k = key("old");
    schedule_cache::DiskCache::new(tmp.path())
        .store(Some(&k), &entry(0))
        .expect("store");
    let file = tmp.path().join(format!("{k}.placement.ron"));
    let published = SystemTime::now() - Duration::from_secs(3 * 3600);
    fs::File::options()
        .write(true)
        .open(&file)
        .expect("open")
        .set_modified(published)
        .expect("mtime");
    // Used now: a hit, and the file's time is still its publish time.
    let hit: Option<PlacementEntry> =
        schedule_cache::DiskCache::new(tmp.path()).lookup(Some(&k), DIGEST);
    assert!(hit.is_some());
    let mtime = fs::metadata(&file)
        .expect("meta")
        .modified()
        .expect("mtime");
    assert_eq!(mtime, published, "a lookup marks no use");
    let o = kcache(&[
        "gc",
        tmp.path().to_str().expect("utf-8"),
        "--older-than",
        "1h",
    ]);
    assert!(o.status.success(), "{o:?}");
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("removed 1 entries"),
        "{o:?}"
    );
    assert!(!file.exists());
}
