//! The demo stores winners under keep-faster (concurrent runs leave the fastest), and a
//! stored winner it found but could not use is replaced whatever time it claims: each run a
//! real `kcache-demo` process with the real C compiler.

mod common;

use std::path::Path;

/// A small matmul run without the kernel store (so a stored winner's program is compiled
/// again, by the test's compiler wrapper).
fn demo(dir: &Path, extra: &[&str]) -> String {
    let mut args = vec!["--no-kernel-store"];
    args.extend_from_slice(extra);
    common::small_matmul(dir, &args)
}

/// The schedule entries (`*.ron` files) in `dir`, with their text.
fn entries(dir: &Path) -> Vec<(std::path::PathBuf, String)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).expect("read cache dir") {
        let path = e.expect("dir entry").path();
        if path.extension().is_some_and(|x| x == "ron") {
            let text = std::fs::read_to_string(&path).expect("read entry");
            if text.contains("times: [") {
                out.push((path, text));
            }
        }
    }
    out
}

#[test]
fn a_stored_winner_that_cannot_be_used_is_replaced_whatever_time_it_claims() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("cache");
    // A compiler command that refuses its first C compile once a token exists (an `#error`
    // added to the unit); the same command in every run, so every run has the same key.
    let token = tmp.path().join("token");
    let cc = test_support::cc::refusing_once(tmp.path(), "refusing-cc", &token);
    let cold = demo(&dir, &["--cc", &cc]);
    assert!(cold.contains("1 stored"), "{cold}");

    // The stored winner claims a time no search can beat...
    let stored = entries(&dir);
    assert_eq!(stored.len(), 1, "one winner stored");
    let (path, text) = &stored[0];
    let start = text.find("times: [").expect("times");
    let end = start + text[start..].find(']').expect("end of times");
    let claimed = format!("{}times: [1e-12]{}", &text[..start], &text[end + 1..]);
    std::fs::write(path, &claimed).expect("rewrite the entry");

    // ...and its program no longer compiles: the replay is unusable, the kernel is searched
    // again, and the new winner replaces the entry although it measured slower.
    std::fs::create_dir(&token).expect("token");
    let again = demo(&dir, &["--cc", &cc]);
    assert!(!token.exists(), "the replay was compiled: {again}");
    assert!(again.contains("cannot be used"), "{again}");
    assert!(again.contains("1 stored"), "{again}");
    let replaced = entries(&dir);
    assert_eq!(replaced.len(), 1);
    assert!(
        !replaced[0].1.contains("times: [1e-12]"),
        "{}",
        replaced[0].1
    );

    // The next run replays what was stored, and nothing is stored over it.
    let third = demo(&dir, &["--cc", &cc]);
    assert!(third.contains("replayed"), "{third}");
    assert!(third.contains("0 stored"), "{third}");
}
