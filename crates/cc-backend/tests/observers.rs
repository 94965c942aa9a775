//! Issue 26, class 1: what the prelude makes of names is learned from the real compiler.
//! Macros that stringify or paste their arguments (glibc's `<stdint.h>` constant macros,
//! a header's `#define S(x) #x`) key a kernel naming them over its exact text, and a
//! bound name the prelude declares is never renamed. Each test resolves two kernels
//! through one cache and calls the second: with a shared key it would run the first's
//! program.

#![allow(clippy::unwrap_used)]

use cc_backend::{Arg, CcBackend, Kernel, Signature, Source};
use kernel_cache::{KernelCache, Names, Resolver};

/// Resolves `a` then `b` (each `void <symbol>(float *out, const float *a, const float
/// *b, int n)`) through one cache and returns what each computes into `out[0]`, and
/// whether their keys are equal.
fn both(
    backend: &CcBackend,
    prelude: &str,
    options: &[String],
    names: &Names,
    a: (&str, &str),
    b: (&str, &str),
) -> (f32, f32, bool) {
    let cache = KernelCache::new(64 << 20);
    let kernel = |(symbol, text): (&str, &str)| {
        Source::new(text, Signature::out_a_b_n())
            .with_prelude(prelude)
            .batch_kernel(symbol, names, options.to_vec(), backend.identity())
    };
    let (ka, kb) = (kernel(a), kernel(b));
    let equal = ka.key == kb.key;
    let run = |k| {
        let answers = Resolver::new(&cache, backend)
            .split((backend).split())
            .resolve_strict(&[k])
            .map(|r| r.answers)
            .unwrap();
        let kernel = Kernel::from_resolved(&answers[0]).unwrap();
        let mut out = [0.0f32; 1];
        kernel
            .call(&mut [
                Arg::F32Mut(&mut out),
                Arg::F32(&[0.0]),
                Arg::F32(&[0.0]),
                Arg::I32Scalar(1),
            ])
            .unwrap();
        out[0]
    };
    (run(ka), run(kb), equal)
}

fn backend() -> CcBackend {
    CcBackend::new().expect("a C compiler is installed")
}

const HEAD: &str = "(float *out, const float *a, const float *b, int n)";

/// `INT64_C(c)` pastes `L` onto its argument (`c ## L`): renamed, it reads another
/// variable. From the default prelude's `<stdint.h>`.
#[test]
fn a_pasting_macro_of_the_prelude_keys_the_exact_text() {
    let backend = backend();
    let names = Names::new().with_bound(["x", "y"]);
    let text = |v: &str| {
        format!(
            "void k{HEAD} {{ long {v} = 1; long xL = 10; long yL = 20; out[0] = (float)INT64_C({v}); }}"
        )
    };
    let (a, b, equal) = both(
        &backend,
        cc_backend::DEFAULT_PRELUDE,
        &[],
        &names,
        ("k", &text("x")),
        ("k", &text("y")),
    );
    assert_eq!((a, b, equal), (10.0, 20.0, false));
    // Without the macro the two are renamed twins and share a key.
    let plain = |v: &str| format!("void k{HEAD} {{ long {v} = 1; out[0] = (float){v}; }}");
    let (a, b, equal) = both(
        &backend,
        cc_backend::DEFAULT_PRELUDE,
        &[],
        &names,
        ("k", &plain("x")),
        ("k", &plain("y")),
    );
    assert_eq!((a, b, equal), (1.0, 1.0, true));
}

/// A header's stringifying macro, reached through another macro: the string's length
/// depends on the renamed local's spelling.
#[test]
fn a_stringifying_header_macro_keys_the_exact_text() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("obs.h"),
        "#define S(x) #x\n#define NAME_OF(x) S(x)\n",
    )
    .unwrap();
    let options = vec![format!("-I{}", dir.path().display())];
    let prelude = "#include \"obs.h\"\n#include <string.h>\n";
    let backend = backend();
    let names = Names::new().with_bound(["v", "longer_name"]);
    let text = |v: &str| {
        format!("void k{HEAD} {{ int {v} = 0; out[0] = (float)(strlen(NAME_OF({v})) + {v}); }}")
    };
    let (a, b, equal) = both(
        &backend,
        prelude,
        &options,
        &names,
        ("k", &text("v")),
        ("k", &text("longer_name")),
    );
    assert_eq!((a, b, equal), (1.0, 11.0, false));
}

/// A bound name the prelude declares (a function of `<math.h>`) is never renamed: two
/// kernels calling different functions listed as bound do not share a key.
#[test]
fn a_bound_name_the_prelude_declares_refuses_renaming() {
    let backend = backend();
    let names = Names::new().with_bound(["sqrtf", "cbrtf"]);
    let text = |f: &str| format!("void k{HEAD} {{ out[0] = {f}(64.0f); }}");
    let (a, b, equal) = both(
        &backend,
        cc_backend::DEFAULT_PRELUDE,
        &[],
        &names,
        ("k", &text("sqrtf")),
        ("k", &text("cbrtf")),
    );
    assert_eq!((a, b, equal), (8.0, 4.0, false));
}

/// A prelude the compiler cannot preprocess renames nothing (the compile fails anyway).
#[test]
fn an_unreadable_prelude_renames_nothing() {
    let backend = backend();
    let names = Names::new().with_bound(["x", "y"]);
    let key = |v: &str| {
        Source::new(
            format!("void k__seg1{HEAD} {{ int {v} = 0; out[0] = {v}; }}"),
            Signature::out_a_b_n(),
        )
        .with_prelude("#include <no_such_header_kcache.h>\n")
        .key("k__seg1", &names, &[], backend.identity())
    };
    assert_ne!(key("x"), key("y"));
}

/// Issue 35, point 6: a feature test's answer is its argument's spelling
/// (`__has_builtin(abs)` is 1, `__has_builtin(n1_w)` 0, with gcc and clang alike). Named
/// in the text, through an option macro (`-DHB(x)=__has_builtin(x)`) or through a
/// prelude macro that expands to it, the two kernels must not share a key.
#[test]
fn a_feature_test_keys_the_exact_text_through_options_and_the_prelude() {
    for cc in ["cc", "clang"] {
        let backend = CcBackend::with_compiler(cc).expect("the compiler runs");
        let names = Names::new().with_bound(["abs", "n1_w"]);
        let cases: [(&str, Vec<String>, &str); 3] = [
            (cc_backend::DEFAULT_PRELUDE, vec![], "__has_builtin({v})"),
            (
                cc_backend::DEFAULT_PRELUDE,
                vec!["-DHB(x)=__has_builtin(x)".to_owned()],
                "HB({v})",
            ),
            (
                "#include <stddef.h>\n#define HB2(x) __has_builtin(x)\n#define HB(x) HB2(x)\n",
                vec![],
                "HB({v})",
            ),
        ];
        for (prelude, options, call) in &cases {
            let text = |v: &str| {
                let call = call.replace("{v}", v);
                format!("void k{HEAD} {{ int {v} = 0; out[0] = (float)({call} + {v}); }}")
            };
            let (a, b, equal) = both(
                &backend,
                prelude,
                options,
                &names,
                ("k", &text("abs")),
                ("k", &text("n1_w")),
            );
            assert_eq!((a, b, equal), (1.0, 0.0, false), "{cc}: {call} {options:?}");
        }
    }
}

/// Issue 35, point 6: a header the text includes itself (not through the prelude) is
/// learned like the prelude: `<stdint.h>`'s pasting `INT64_C` keys the exact text,
/// with gcc and clang.
#[test]
fn a_header_the_text_includes_itself_is_learned_like_the_prelude() {
    for cc in ["cc", "clang"] {
        let backend = CcBackend::with_compiler(cc).expect("the compiler runs");
        let names = Names::new().with_bound(["x", "y"]);
        let text = |v: &str| {
            format!(
                "#include <stdint.h>\nvoid k{HEAD} {{ long {v} = 1; long xL = 10; long yL = 20; out[0] = (float)INT64_C({v}); }}"
            )
        };
        let (a, b, equal) = both(
            &backend,
            "#include <stddef.h>\n",
            &[],
            &names,
            ("k", &text("x")),
            ("k", &text("y")),
        );
        assert_eq!((a, b, equal), (10.0, 20.0, false), "{cc}");
        // Renamed twins that include a header and call nothing of it share a key.
        let plain = |v: &str| {
            format!("#include <stdint.h>\nvoid k{HEAD} {{ int64_t {v} = 1; out[0] = (float){v}; }}")
        };
        let (a, b, equal) = both(
            &backend,
            "#include <stddef.h>\n",
            &[],
            &names,
            ("k", &plain("x")),
            ("k", &plain("y")),
        );
        assert_eq!((a, b, equal), (1.0, 1.0, true), "{cc}");
    }
}
