//! Sound transfer, end to end with the real C compiler, each run a real `kcache-demo` process:
//! after a regime change (a compiler option) and after a size change the search is seeded from
//! what earlier runs stored, and a seed that no longer applies, or computes a wrong result, is
//! dropped or rejected, never the winner.

mod common;

use std::path::Path;
use std::process::Command;

use common::line;

/// Runs `kcache-demo` on matmul with a small budget and returns its report (stdout).
fn demo(dir: &Path, extra: &[&str]) -> String {
    common::small_matmul(dir, extra)
}

#[test]
fn seeds_are_offered_after_a_codegen_change_and_after_a_size_change() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("cache");
    let cold = demo(&dir, &[]);
    assert!(
        line(&cold, "matmul   searched").contains("searched"),
        "{cold}"
    );
    assert!(!cold.contains("seeded from"), "{cold}");

    // A compiler option: the same code under another codegen component.
    let codegen = demo(&dir, &["--cflag=-O1"]);
    let seeded = line(&codegen, "seeded from");
    assert!(
        seeded.contains("seeded from 1 entry (differ in: codegen)"),
        "{seeded}"
    );
    assert!(seeded.contains("1 seed trial measured first"), "{seeded}");

    // Another size: other code of the same loop nest.
    let size = demo(&dir, &["--size", "48"]);
    let seeded = line(&size, "seeded from");
    assert!(seeded.contains("matmul 64x64x64"), "{seeded}");
    assert!(
        !seeded.contains("entry"),
        "no same-code entry yet: {seeded}"
    );

    // Without seeding the same miss searches from nothing.
    let unseeded = demo(&dir, &["--size", "32", "--no-seeds"]);
    assert!(!unseeded.contains("seeded from"), "{unseeded}");
}

#[test]
fn a_seed_that_no_longer_applies_is_dropped() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("cache");
    demo(&dir, &[]);
    // Make the stored 64x64x64 winner split the reduction loop k (binder 4) by 16: it applies
    // at 48 (48 = 3 x 16) but not at 40.
    let entry = std::fs::read_dir(&dir)
        .expect("list")
        .map(|e| e.expect("entry").path())
        .find(|p| p.extension().is_some_and(|x| x == "ron"))
        .expect("a stored winner");
    let text = std::fs::read_to_string(&entry).expect("read");
    let start = text.find("ops: [").expect("ops") + "ops: [".len();
    let end = start + text[start..].find("\n        ],").expect("end of ops");
    let split = "\n            Split(target: Base(4), factor: 16),";
    std::fs::write(&entry, format!("{}{split}{}", &text[..start], &text[end..])).expect("write");

    let applies = demo(&dir, &["--size", "48"]);
    assert!(
        line(&applies, "seeded from").contains("matmul 64x64x64"),
        "{applies}"
    );
    assert!(!applies.contains("seed dropped"), "{applies}");

    let report = demo(&dir, &["--size", "40"]);
    let dropped = line(&report, "seed dropped");
    assert!(
        dropped.contains("matmul 64x64x64: it no longer applies"),
        "{dropped}"
    );
    assert!(
        dropped.contains("factor does not divide the extent"),
        "{dropped}"
    );
    // The 48 winner (which does apply at 40, or is dropped too) is the only other seed; the
    // run searched and stored a winner that applies.
    assert!(
        line(&report, "matmul   searched").contains("searched"),
        "{report}"
    );
}

#[test]
fn a_seed_that_computes_a_wrong_result_is_rejected_and_never_wins() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("cache");
    demo(&dir, &[]);
    // Another compiler command (another codegen component): a wrapper around `cc` whose
    // first two C compiles, the seed's two segment kernels (compiled first, in a round of
    // their own), are miscompiled: zero-fill writes 1, multiply-accumulate subtracts.
    let tokens = tmp.path().join("tokens");
    for t in ["1", "2"] {
        std::fs::create_dir_all(tokens.join(t)).expect("token");
    }
    let cc = test_support::cc::wrapper(
        tmp.path(),
        "bad-cc",
        &format!(
            "if rmdir {t}/1 2>/dev/null || rmdir {t}/2 2>/dev/null; then sed -i -e 's/= 0\\.0f;/= 1.0f;/' -e 's/ + (/ - (/' \"$a\"; fi",
            t = tokens.display()
        ),
    );
    let report = demo(&dir, &["--cc", &cc]);
    assert!(
        !tokens.join("1").exists() && !tokens.join("2").exists(),
        "the seed was compiled (miscompiled): {report}"
    );
    let seeded = line(&report, "seeded from");
    assert!(
        seeded.contains(
            "1 seed trial measured first (1 rejected: wrong output, 0 failed to compile)"
        ),
        "{seeded}"
    );
    assert!(
        seeded.contains("the winner is a searched candidate"),
        "{seeded}"
    );
    // The seed was measured, checked and rejected (candidates sharing its miscompiled
    // kernels, answered by the kernel cache, are rejected with it).
    assert!(
        line(&report, "matmul   searched").contains(" rejected: wrong output]"),
        "{report}"
    );
    // What was stored computes the right result: the next run (same compiler, nothing
    // miscompiled) replays it and checks it against the reference.
    let again = demo(&dir, &["--cc", &cc]);
    assert!(line(&again, "matmul   ").contains("replayed"), "{again}");
}

#[test]
fn a_seed_that_fails_to_compile_is_reported_and_skipped_never_a_failed_run() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("cache");
    demo(&dir, &[]);
    // Another compiler command whose first C compile (one of the seed's kernels, compiled
    // first in a round of its own) is refused: an `#error` is added to the unit.
    let token = tmp.path().join("token");
    std::fs::create_dir_all(&token).expect("token");
    let cc = test_support::cc::refusing_once(tmp.path(), "refusing-cc", &token);
    let report = demo(&dir, &["--cc", &cc]);
    assert!(!token.exists(), "the seed was compiled: {report}");
    let seeded = line(&report, "seeded from");
    assert!(
        seeded.contains("(0 rejected: wrong output, 1 failed to compile)"),
        "{seeded}"
    );
    assert!(
        seeded.contains("the winner is a searched candidate"),
        "{seeded}"
    );
    let failed = line(&report, "a candidate failed to compile (skipped)");
    assert!(failed.contains("#error refused"), "{failed}");
    // The winner stored replays in the next run (nothing refused any more).
    let again = demo(&dir, &["--cc", &cc]);
    assert!(line(&again, "matmul   ").contains("replayed"), "{again}");
}

#[test]
fn a_size_outside_the_demos_range_is_a_clear_error() {
    let tmp = tempfile::tempdir().expect("tempdir");
    for size in ["3", "257"] {
        let out = Command::new(env!("CARGO_BIN_EXE_kcache-demo"))
            .arg("--cache-dir")
            .arg(tmp.path().join("cache"))
            .args(["--kernels", "matmul", "--size", size, "-q"])
            .output()
            .expect("run kcache-demo");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert!(
            err.contains(&format!("matmul size {size} is outside 4..=256")),
            "{err}"
        );
        assert!(!tmp.path().join("cache").exists(), "nothing created");
    }
}

#[test]
fn a_seeded_search_compared_with_a_cold_one_reports_both_winners() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("cache");
    demo(&dir, &[]);
    let report = demo(&dir, &["--cflag=-O1", "--compare-cold"]);
    let compared = line(&report, "against a cold search of");
    // Winners that are one program (kernels of equal keys) are timed once; others side by
    // side, interleaved.
    assert!(
        compared.contains("winners the same program, ")
            || compared.contains("winners side by side: seeded "),
        "{compared}"
    );
}
