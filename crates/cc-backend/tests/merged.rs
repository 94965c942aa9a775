//! The merged unit (kernels that provably cannot affect each other share one translation
//! unit): companions that would affect each other if they shared a unit naively (a
//! `#pragma`, statics, file-scope objects, typedefs and tags of one name, a block-scope
//! declaration of a companion's name) each compute their own result, merged or not, and a
//! merged unit's failure falls back to one unit each.

#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;

use cc_backend::{Arg, CcBackend, CcError, CcProgram, Signature, Source};
use common::run_abn;
use kernel_cache::{KernelCache, Names, Resolver};
use test_support::kernels::realistic_kernel;

fn backend() -> CcBackend {
    CcBackend::new().expect("a C compiler is installed")
}

const HEAD: &str = "(float *out, const float *a, const float *b, int n)";

/// A case: two kernels (symbol, text, the result on a = [1, 2, 3], b = [10, 20, 30]) and
/// whether the pair is merged.
struct Case {
    name: &'static str,
    kernels: [(&'static str, String, [f32; 3]); 2],
    merged: bool,
}

fn cases() -> Vec<Case> {
    let k = |s: &'static str, body: &str, want: [f32; 3]| {
        (s, format!("void {s}{HEAD} {{ {body} }}\n"), want)
    };
    let with = |s: &'static str, before: &str, body: &str, want: [f32; 3]| {
        (s, format!("{before}\nvoid {s}{HEAD} {{ {body} }}\n"), want)
    };
    vec![
        Case {
            name: "#pragma GCC optimize and #pragma pack in one kernel",
            kernels: [
                with(
                    "k1",
                    "#pragma GCC optimize(\"O0\")\n#pragma pack(1)",
                    "struct P { char c; int i; }; for (int i = 0; i < n; ++i) out[i] = a[i] + (float)sizeof(struct P);",
                    [6.0, 7.0, 8.0],
                ),
                k(
                    "k2",
                    "struct P { char c; int i; }; for (int i = 0; i < n; ++i) out[i] = a[i] + (float)sizeof(struct P);",
                    [9.0, 10.0, 11.0],
                ),
            ],
            merged: false,
        },
        Case {
            name: "block-scope statics of one name",
            kernels: [
                k(
                    "k1",
                    "static float acc = 100.0f; for (int i = 0; i < n; ++i) out[i] = a[i] + acc;",
                    [101.0, 102.0, 103.0],
                ),
                k(
                    "k2",
                    "static float acc = 5.0f; for (int i = 0; i < n; ++i) out[i] = a[i] * acc;",
                    [5.0, 10.0, 15.0],
                ),
            ],
            merged: true,
        },
        Case {
            name: "file-scope statics and objects of one name",
            kernels: [
                with(
                    "k1",
                    "static float acc = 100.0f;\nstatic const float table[3] = {1, 1, 1};",
                    "for (int i = 0; i < n; ++i) out[i] = a[i] + acc + table[i];",
                    [102.0, 103.0, 104.0],
                ),
                with(
                    "k2",
                    "static float acc = 5.0f;\nstatic const float table[3] = {7, 8, 9};",
                    "for (int i = 0; i < n; ++i) out[i] = a[i] * acc + table[i];",
                    [12.0, 18.0, 24.0],
                ),
            ],
            merged: false,
        },
        Case {
            name: "block-scope typedefs and tags of one name",
            kernels: [
                k(
                    "k1",
                    "typedef double T; struct S { T x; }; enum E { A = 3 }; for (int i = 0; i < n; ++i) out[i] = (float)sizeof(struct S) + A;",
                    [11.0, 11.0, 11.0],
                ),
                k(
                    "k2",
                    "typedef char T; struct S { T x[2]; }; enum E { A = 40 }; for (int i = 0; i < n; ++i) out[i] = (float)sizeof(struct S) + A;",
                    [42.0, 42.0, 42.0],
                ),
            ],
            merged: true,
        },
        Case {
            name: "file-scope typedefs and tags of one name",
            kernels: [
                with(
                    "k1",
                    "typedef double T; struct S { T x; };",
                    "for (int i = 0; i < n; ++i) out[i] = (float)sizeof(struct S);",
                    [8.0, 8.0, 8.0],
                ),
                with(
                    "k2",
                    "typedef char T; struct S { T x[2]; };",
                    "for (int i = 0; i < n; ++i) out[i] = (float)sizeof(struct S);",
                    [2.0, 2.0, 2.0],
                ),
            ],
            merged: false,
        },
        Case {
            name: "a block-scope declaration of the companion's name with another type",
            kernels: [
                k(
                    "k1",
                    "float k2 = 4.0f; for (int i = 0; i < n; ++i) out[i] = a[i] * k2;",
                    [4.0, 8.0, 12.0],
                ),
                k(
                    "k2",
                    "for (int i = 0; i < n; ++i) out[i] = b[i] - a[i];",
                    [9.0, 18.0, 27.0],
                ),
            ],
            // k1 names k2: k1 is compiled alone, and k2 has no companion left to merge with.
            merged: false,
        },
        Case {
            name: "__LINE__ and __FILE__ as in the kernel's own unit",
            kernels: [
                k(
                    "k1",
                    "for (int i = 0; i < n; ++i) out[i] = (float)__LINE__ + (float)sizeof(__FILE__);",
                    [0.0; 3],
                ),
                k(
                    "k2",
                    "\n\n\nfor (int i = 0; i < n; ++i) out[i] = (float)__LINE__ + (float)sizeof(__FILE__);",
                    [0.0; 3],
                ),
            ],
            merged: true,
        },
    ]
}

#[test]
fn companions_compute_their_own_results_merged_or_not() {
    let b = backend();
    for case in cases() {
        let sources: Vec<(&str, Source)> = case
            .kernels
            .iter()
            .map(|(s, text, _)| (*s, Source::new(text.clone(), Signature::out_a_b_n())))
            .collect();
        let pairs: Vec<(&str, &Source)> = sources.iter().map(|(s, k)| (*s, k)).collect();
        let merged_before = b.merged_compiles();
        let together = b
            .compile_program(&pairs, &[])
            .map(Arc::new)
            .unwrap_or_else(|e| panic!("{}: {e}", case.name));
        assert_eq!(
            b.merged_compiles() - merged_before,
            u64::from(case.merged),
            "{}: merged or not as expected",
            case.name
        );
        for ((symbol, _, want), pair) in case.kernels.iter().zip(&pairs) {
            let alone = b.compile_program(&[*pair], &[]).map(Arc::new).unwrap();
            let got = run_abn(&together, symbol);
            assert_eq!(
                got,
                run_abn(&alone, symbol),
                "{}: {symbol} as alone",
                case.name
            );
            if *want != [0.0; 3] {
                assert_eq!(got, want, "{}: {symbol}", case.name);
            }
        }
        // Through the cache: one program, the same results.
        let names = Names::new().with_bound(["out", "a", "b", "n"]);
        let batch: Vec<_> = sources
            .iter()
            .map(|(s, k)| k.clone().batch_kernel(s, &names, vec![], b.identity()))
            .collect();
        let resolved = Resolver::new(&KernelCache::new(1 << 30), &b)
            .resolve_strict(&batch)
            .map(|r| r.answers)
            .unwrap();
        for (r, (symbol, _, want)) in resolved.iter().zip(&case.kernels) {
            let alone = b
                .compile_program(
                    &[(
                        symbol,
                        &sources.iter().find(|(s, _)| s == symbol).unwrap().1,
                    )],
                    &[],
                )
                .map(Arc::new)
                .unwrap();
            assert_eq!(
                run_abn(&r.program, &r.symbol),
                run_abn(&alone, symbol),
                "{}: {symbol} resolved",
                case.name
            );
            if *want != [0.0; 3] {
                assert_eq!(
                    run_abn(&r.program, &r.symbol),
                    want,
                    "{}: {symbol} resolved",
                    case.name
                );
            }
        }
    }
}

/// Realistic kernels compiled in merged units (35 kernels: two units of 18 and 17,
/// compiled concurrently) compute bit for bit what each computes in its own unit (the
/// reference), on inputs of several lengths.
#[test]
fn merged_realistic_kernels_match_their_own_units() {
    let b = backend();
    let sources: Vec<(String, Source)> = (0..35u64)
        .map(|i| {
            let s = format!("fused_{i}");
            (
                s.clone(),
                Source::new(realistic_kernel(&s, 77 + i), Signature::out_a_b_n()),
            )
        })
        .collect();
    let pairs: Vec<(&str, &Source)> = sources.iter().map(|(s, k)| (s.as_str(), k)).collect();
    let (merged_before, units_before) = (b.merged_compiles(), b.units_compiled());
    let together = Arc::new(b.compile_program(&pairs, &[]).unwrap());
    assert_eq!(
        b.merged_compiles() - merged_before,
        2,
        "35 kernels: 2 merged units"
    );
    assert_eq!(
        b.units_compiled() - units_before,
        0,
        "every kernel was merged"
    );
    for pair in &pairs {
        let alone = b.compile_program(&[*pair], &[]).map(Arc::new).unwrap();
        for n in [0usize, 5, 64, 300] {
            let a: Vec<f32> = (0..n).map(|i| (i as f32 * 0.37).sin()).collect();
            let bb: Vec<f32> = (0..n).map(|i| (i as f32 * 0.11).cos()).collect();
            let call = |p: &Arc<CcProgram>| {
                let mut out = vec![0.0f32; n];
                p.kernel(pair.0)
                    .unwrap()
                    .call(&mut [
                        Arg::F32Mut(&mut out),
                        Arg::F32(&a),
                        Arg::F32(&bb),
                        Arg::I32Scalar(n as i32),
                    ])
                    .unwrap();
                out.iter().map(|x| x.to_bits()).collect::<Vec<u32>>()
            };
            assert_eq!(call(&together), call(&alone), "{} n={n}", pair.0);
        }
    }
}

/// A merged unit that fails to compile falls back to one unit per kernel: the failing
/// kernel's error holds only its own diagnostics, and with the failing kernel left out the
/// others compile merged again.
#[test]
fn a_failed_merged_unit_falls_back_to_one_unit_each() {
    let b = backend();
    let good = |s: &str| {
        Source::new(
            test_support::kernels::elementwise_kernel(s, "a[i] + b[i]"),
            Signature::out_a_b_n(),
        )
    };
    let bad = Source::new(
        format!("void bad{HEAD} {{ for (int i = 0; i < n; ++i) out[i] = no_such_name; }}"),
        Signature::out_a_b_n(),
    );
    let (g1, g2) = (good("g1"), good("g2"));
    let (merged_before, units_before) = (b.merged_compiles(), b.units_compiled());
    let err = b
        .compile_program(&[("g1", &g1), ("bad", &bad), ("g2", &g2)], &[])
        .unwrap_err();
    assert_eq!(b.merged_compiles() - merged_before, 1);
    // Strict: g1 compiles alone, then bad fails and stops the compile.
    assert_eq!(b.units_compiled() - units_before, 2);
    match err {
        CcError::Compiler {
            symbols, stderr, ..
        } => {
            assert_eq!(symbols, ["bad"]);
            assert!(stderr.contains("no_such_name"), "{stderr}");
            assert!(!stderr.contains("g1") && !stderr.contains("g2"), "{stderr}");
        }
        other => panic!("{other:?}"),
    }
    let program = b
        .compile_program(&[("g1", &g1), ("g2", &g2)], &[])
        .map(Arc::new)
        .unwrap();
    assert_eq!(b.merged_compiles() - merged_before, 2);
    assert_eq!(run_abn(&program, "g2"), [11.0, 22.0, 33.0]);
}

/// The merged unit's rule and the link's isolation are part of the backend's identity (so
/// of every key and of the kernel store's identity): programs compiled under another rule
/// never meet these.
#[test]
fn the_merged_unit_is_in_the_identity() {
    let identity = backend().identity().to_string();
    assert!(
        identity.lines().any(|l| l.starts_with("merged 2: ")),
        "{identity}"
    );
    assert!(
        identity.lines().any(|l| l.starts_with("isolated: ")),
        "{identity}"
    );
    assert!(
        identity.lines().any(|l| l.starts_with("objcopy ")),
        "{identity}"
    );
}
