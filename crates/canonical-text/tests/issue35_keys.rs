//! Issue 35, the key half, with the real compilers as judges (gcc as `cc`, and clang).
//!
//! - Point 6: the value of a feature test (`__has_builtin(x)` and every `__has_*`/`__is_*`
//!   kin) depends on its argument's spelling, so nothing inside one is renamed, in code
//!   and through a macro the text defines; a text that includes a header itself may call
//!   that header's pasting macros (`<stdint.h>`'s `INT64_C`) on a renamed name, so such a
//!   text renames nothing inside the arguments of a call-like name it does not own.
//! - Point 7: the reserved-name allow list holds every C keyword, the GNU alternate
//!   spellings and the built-ins whose arguments are plain values (each checked to be a
//!   built-in of both installed compilers), so a TVM-style kernel using
//!   `__builtin_expect`, `__restrict__` and an `aligned` attribute keeps its renamed
//!   twin's key; spelling and position built-ins still refuse.
#![allow(clippy::unwrap_used)]

#[path = "support/object_code.rs"]
mod object_code;

use canonical_text::{Names, canonical_kernel};

fn key(text: &str, bound: &[&str]) -> String {
    let names = Names::new().with_bound(bound.iter().copied());
    canonical_kernel(text, Some("k"), &names).key(&[])
}

/// Two texts whose keys must differ, and that both compilers compile to different code.
fn told_apart(cases: &[(&str, &str, &[&str])]) {
    let dir = tempfile::tempdir().unwrap();
    for (n, (a, b, bound)) in cases.iter().enumerate() {
        assert_ne!(key(a, bound), key(b, bound), "equal keys:\n{a}\n{b}");
        for cc in ["cc", "clang"] {
            let (oa, ob) = (
                object_code::compile_with(cc, dir.path(), 2 * n, a),
                object_code::compile_with(cc, dir.path(), 2 * n + 1, b),
            );
            assert!(
                oa.is_some() && ob.is_some() && oa != ob,
                "{cc} compiles both and tells them apart:\n{a}\n{b}"
            );
        }
    }
}

/// Point 6: a bound local named like a library built-in (`abs`, `sqrtf`) answers
/// `__has_builtin` with 1, another name with 0, in gcc and clang alike; so does a macro
/// of the text that expands to the test.
#[test]
fn feature_test_arguments_are_never_renamed() {
    told_apart(&[
        (
            "int k(int sqrtf) { return __has_builtin(sqrtf); }\n",
            "int k(int n1_w) { return __has_builtin(n1_w); }\n",
            &["sqrtf", "n1_w"],
        ),
        (
            "int k(int abs) { return __has_builtin (abs) + abs; }\n",
            "int k(int n1_w) { return __has_builtin (n1_w) + n1_w; }\n",
            &["abs", "n1_w"],
        ),
        (
            "#define HB(x) __has_builtin(x)\nint k(int abs) { return HB(abs); }\n",
            "#define HB(x) __has_builtin(x)\nint k(int n1_w) { return HB(n1_w); }\n",
            &["abs", "n1_w"],
        ),
        (
            "int k(int packed) { return __has_attribute(packed); }\n",
            "int k(int n1_w) { return __has_attribute(n1_w); }\n",
            &["packed", "n1_w"],
        ),
    ]);
    // clang's `__is_identifier`: 1 for a name that is not a keyword. Only clang has it.
    let a = "int k(int i1) { return __is_identifier(i1) + i1; }\n";
    let b = "int k(int i2) { return __is_identifier(i2) + i2; }\n";
    assert_ne!(
        key(a, &[]),
        key(b, &[]),
        "a name inside __is_identifier is renamed"
    );
}

/// Point 6, across a directive line: the preprocessor reads a directive standing between a
/// feature test and its `(` and goes on to the `(` (`__has_attribute\n#define Q 1\n(packed)`
/// is `__has_attribute(packed)`), so nothing inside is renamed there either (found by the
/// object-code oracle, `cargo xtask soundness --cases 100 --seed 4242`, case 81).
#[test]
fn a_directive_between_a_feature_test_and_its_parenthesis_hides_nothing() {
    told_apart(&[
        (
            "int k(int packed) { return __has_attribute\n#define Q 1\n(packed) + packed; }\n",
            "int k(int n1_w) { return __has_attribute\n#define Q 1\n(n1_w) + n1_w; }\n",
            &["packed", "n1_w"],
        ),
        (
            "int k(int abs) { return __has_builtin /* c */\n#pragma kcache note x\n (abs) + abs; }\n",
            "int k(int n1_w) { return __has_builtin /* c */\n#pragma kcache note x\n (n1_w) + n1_w; }\n",
            &["abs", "n1_w"],
        ),
        (
            "int k(int cold) { return __has_attribute\n#if 1\n#endif\n(cold) + cold; }\n",
            "int k(int f7_w) { return __has_attribute\n#if 1\n#endif\n(f7_w) + f7_w; }\n",
            &["cold", "f7_w"],
        ),
    ]);
}

/// Point 6: a text that includes `<stdint.h>` itself calls its pasting `INT64_C` on a
/// renamed local (`x ## L` reads `xL`): keyed with canonical-text alone (no macro table),
/// the two must not share a key.
#[test]
fn a_text_including_a_header_renames_nothing_in_an_unowned_calls_arguments() {
    told_apart(&[(
        "#include <stdint.h>\nlong xL = 10, yL = 20;\nlong k(void) { long x = 1; return INT64_C(x) + x; }\n",
        "#include <stdint.h>\nlong xL = 10, yL = 20;\nlong k(void) { long y = 1; return INT64_C(y) + y; }\n",
        &["x", "y"],
    )]);
}

/// Point 7: a TVM-style kernel (`__builtin_expect`, `__restrict__`, an `aligned`
/// attribute) and its renamed twin share a key, and the attribute's own argument is not a
/// renamed name; both compilers compile the twins to the same object code.
#[test]
fn a_tvm_style_kernel_keeps_its_twins_key() {
    let text = |a: &str, b: &str, n: &str, i: &str| {
        format!(
            "typedef float f32x4 __attribute__((aligned(16)));\n\
             int k(float* __restrict__ {a}, const float* __restrict__ {b}, int {n}) {{\n\
             \x20 if (__builtin_expect(({a} == ((float*)0)), 0)) {{ return -1; }}\n\
             \x20 for (int {i} = 0; {i} < {n}; ++{i}) {{\n\
             \x20   {a}[{i}] = __builtin_fmaf({b}[{i}], 2.0f, __builtin_sqrtf({b}[{i}]));\n\
             \x20 }}\n\
             \x20 return 0;\n}}\n"
        )
    };
    let a = text("T_add", "placeholder", "n", "i0");
    let b = text("T_add_1", "placeholder_1", "m", "i7");
    let bound = ["T_add", "placeholder", "n", "T_add_1", "placeholder_1", "m"];
    let names = Names::new().with_bound(bound);
    let (ca, cb) = (
        canonical_kernel(&a, Some("k"), &names),
        canonical_kernel(&b, Some("k"), &names),
    );
    assert!(ca.refusals().is_empty(), "{:?}", ca.refusals());
    assert_eq!(
        ca.key(&[]),
        cb.key(&[]),
        "the renamed twin misses:\n{a}\n{b}"
    );
    assert!(ca.renamed_count() >= 4, "{}", ca.text());
    let dir = tempfile::tempdir().unwrap();
    for cc in ["cc", "clang"] {
        let (oa, ob) = (
            object_code::compile_with(cc, dir.path(), 0, &a),
            object_code::compile_with(cc, dir.path(), 1, &b),
        );
        assert!(oa.is_some() && oa == ob, "{cc}: twins compile alike");
    }
}

/// Point 7: C keywords spelled `_Keyword` and GNU's alternate spellings, `__VA_ARGS__` in
/// a variadic macro of the text and attribute words spelled `__x__` rename as any text
/// does: the renamed twin keeps the key.
#[test]
fn keywords_and_gnu_spellings_rename() {
    for t in [
        "int k(int n1_w) { return _Generic(n1_w, int: 1, default: 2) + (int)_Alignof(int); }\n",
        "#define F(...) g(__VA_ARGS__)\nint g(int, int);\nint k(int n1_w) { return F(n1_w, 2); }\n",
        "int k(int n1_w) { __typeof__(n1_w) a = n1_w; __extension__ __int128 b = a; return (int)b + (int)__alignof__(a); }\n",
        "int k(int n1_w) { _Static_assert(1, \"x\"); _Bool b = n1_w; return b; }\n",
        "static __inline__ int k(int n1_w) { __signed__ int v = n1_w; __volatile__ int w = v; return w; }\n",
        "struct __attribute__((__packed__, __aligned__(4))) s { char c; int x; };\nint k(int n1_w) { return n1_w + (int)sizeof(struct s); }\n",
        "_Thread_local int t;\n_Noreturn void f(void);\nint k(_Atomic int n1_w) { return n1_w; }\n",
    ] {
        let twin = t.replace("n1_w", "n2_w");
        let bound = ["n1_w", "n2_w"];
        let names = Names::new().with_bound(bound);
        let c = canonical_kernel(t, Some("k"), &names);
        assert!(c.refusals().is_empty(), "{t}: {:?}", c.refusals());
        assert_eq!(key(t, &bound), key(&twin, &bound), "{t}");
    }
}

/// Point 7: built-ins that read a spelling or a position, or take a member name, are not
/// on the allow list: they key the exact text.
#[test]
fn spelling_and_position_builtins_still_refuse() {
    for t in [
        "int k(int n1_w) { return n1_w + __builtin_LINE(); }\n",
        "const char *k(int n1_w) { return n1_w ? __builtin_FILE() : 0; }\n",
        "int k(int n1_w) { return n1_w + __builtin_COLUMN(); }\n",
        "struct s { int n1_w; };\nint k(int n1_w) { return n1_w + (int)__builtin_offsetof(struct s, n1_w); }\n",
        "int k(int n1_w) { return n1_w + __builtin_has_attribute(k, noinline); }\n",
    ] {
        let twin = t.replace("n1_w", "n2_w");
        let bound = ["n1_w", "n2_w"];
        assert_ne!(key(t, &bound), key(&twin, &bound), "{t}");
    }
}

/// Point 7, the allow list derived from the compilers: every `__builtin_*` name on it is a
/// built-in of both gcc and clang (`__has_builtin`, asked of each), save the corpus's
/// clang-only ones; every feature test on it is defined by at least one of them.
#[test]
fn every_allowed_builtin_is_one_of_both_compilers() {
    let clang_only = ["__builtin_bit_cast", "__builtin_elementwise_fma"];
    let mut probe = String::new();
    let mut builtins = 0;
    let mut tests = Vec::new();
    for n in canonical_text::allow_lists::reserved_names() {
        if n.starts_with("__builtin_")
            && !clang_only.contains(&n.as_str())
            && n != "__builtin_va_list"
        {
            probe.push_str(&format!(
                "#if !__has_builtin({n})\nint missing_{n};\n#endif\n"
            ));
            builtins += 1;
        } else if n.starts_with("__has_") || n.starts_with("__is_") {
            tests.push(n);
        }
    }
    assert!(builtins > 200, "{builtins}");
    let dir = tempfile::tempdir().unwrap();
    let preprocess = |cc: &str, text: &str| -> String {
        let path = dir.path().join("probe.c");
        std::fs::write(&path, text).unwrap();
        let out = std::process::Command::new(cc)
            .args(["-E", "-P"])
            .arg(&path)
            .output()
            .unwrap_or_else(|e| panic!("{cc} runs: {e}"));
        assert!(
            out.status.success(),
            "{cc}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    for cc in ["cc", "clang"] {
        let out = preprocess(cc, &probe);
        assert!(!out.contains("missing_"), "{cc} lacks: {out}");
    }
    // A feature test is a macro-like name the preprocessor defines (`defined(x)`).
    let mut known = std::collections::BTreeSet::new();
    for cc in ["cc", "clang"] {
        let text: String = tests
            .iter()
            .map(|t| format!("#if defined({t})\nint known_{t};\n#endif\n"))
            .collect();
        for w in preprocess(cc, &text).split(|c: char| !(c.is_alphanumeric() || c == '_')) {
            if let Some(t) = w.strip_prefix("known_") {
                known.insert(t.to_owned());
            }
        }
    }
    let unknown: Vec<&String> = tests.iter().filter(|t| !known.contains(*t)).collect();
    assert!(
        unknown.is_empty(),
        "no installed compiler defines {unknown:?}"
    );
    assert!(
        known.contains("__has_builtin") && known.contains("__is_identifier"),
        "{known:?}"
    );
}

/// The include rule's lists, held to the compilers: the observing macros of the allowed
/// standard headers (a `#` in the replacement list, a position or feature-test name, or
/// another observer, transitively), outside the reserved namespace, under gcc and clang
/// with and without `_GNU_SOURCE`, are all listed; every listed library function is
/// declared (or defined as a macro) by its header under both.
#[test]
fn the_include_rules_lists_are_the_compilers() {
    use canonical_text::allow_lists::*;
    use std::collections::{BTreeMap, BTreeSet};
    let dir = tempfile::tempdir().unwrap();
    let run = |cc: &str, args: &[&str], text: &str| -> (bool, String) {
        let path = dir.path().join("probe.c");
        std::fs::write(&path, text).unwrap();
        let out = std::process::Command::new(cc)
            .args(args)
            .arg(&path)
            .output()
            .unwrap_or_else(|e| panic!("{cc} runs: {e}"));
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned()
                + &String::from_utf8_lossy(&out.stderr),
        )
    };
    let includes: String = STANDARD_HEADERS
        .iter()
        .map(|h| format!("#include <{h}>\n"))
        .collect();
    let words = |s: &str| -> BTreeSet<String> {
        s.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .filter(|w| !w.is_empty() && !w.as_bytes()[0].is_ascii_digit())
            .map(str::to_owned)
            .collect()
    };
    let reserved = |w: &str| {
        w.starts_with("__")
            || (w.starts_with('_') && w[1..].starts_with(|c: char| c.is_ascii_uppercase()))
    };
    for cc in ["cc", "clang"] {
        for gnu in [false, true] {
            let mut args = vec!["-dM", "-E"];
            if gnu {
                args.push("-D_GNU_SOURCE");
            }
            let (ok, table) = run(cc, &args, &includes);
            assert!(ok, "{cc}: {table}");
            // name -> (observes by itself, its replacement's identifiers, function-like,
            // the replacement's last word when it ends in one)
            let mut macros: BTreeMap<String, (bool, BTreeSet<String>)> = BTreeMap::new();
            let mut shape: BTreeMap<String, (bool, Option<String>)> = BTreeMap::new();
            for line in table.lines() {
                let Some(rest) = line.strip_prefix("#define ") else {
                    continue;
                };
                let n = rest
                    .bytes()
                    .take_while(|&b| b.is_ascii_alphanumeric() || b == b'_')
                    .count();
                let (name, after) = rest.split_at(n);
                let body = match after.strip_prefix('(') {
                    Some(p) => p.split_once(')').map_or("", |(_, b)| b),
                    None => after,
                };
                let last = body
                    .trim_end()
                    .rsplit(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                    .next()
                    .filter(|w| !w.is_empty())
                    .map(str::to_owned);
                shape.insert(name.to_owned(), (after.starts_with('('), last));
                let ids = words(body);
                let direct = body.contains('#')
                    || ids.iter().any(|w| {
                        w.starts_with("__has_")
                            || w.starts_with("__is_")
                            || [
                                "__LINE__",
                                "__FILE__",
                                "__func__",
                                "__FUNCTION__",
                                "__PRETTY_FUNCTION__",
                                "__COUNTER__",
                                "__builtin_LINE",
                                "__builtin_FILE",
                                "__builtin_FUNCTION",
                                "__builtin_COLUMN",
                            ]
                            .contains(&w.as_str())
                    });
                macros.insert(name.to_owned(), (direct, ids));
            }
            let mut observers: BTreeSet<String> = macros
                .iter()
                .filter(|(_, (d, _))| *d)
                .map(|(n, _)| n.clone())
                .collect();
            loop {
                let more: Vec<String> = macros
                    .iter()
                    .filter(|(n, (_, ids))| {
                        !observers.contains(*n) && ids.iter().any(|w| observers.contains(w))
                    })
                    .map(|(n, _)| n.clone())
                    .collect();
                if more.is_empty() {
                    break;
                }
                observers.extend(more);
            }
            let missing: Vec<&String> = observers
                .iter()
                .filter(|o| !reserved(o) && !STANDARD_HEADER_OBSERVERS.contains(&o.as_str()))
                // An object-like one matters only if it ends in an observer's name.
                .filter(|o| match &shape[o.as_str()] {
                    (true, _) => true,
                    (false, last) => last.as_ref().is_some_and(|l| observers.contains(l)),
                })
                .collect();
            assert!(
                missing.is_empty(),
                "{cc} (_GNU_SOURCE: {gnu}): unlisted observers {missing:?}"
            );
        }
        // Every listed function is declared (or a macro) where its header is included.
        let mut probe = String::new();
        for (h, names) in STANDARD_FUNCTIONS {
            probe.push_str(&format!("#include <{h}>\n"));
            for n in *names {
                probe.push_str(&format!(
                    "#ifndef {n}\nextern __typeof__({n}) {n};\n#endif\n"
                ));
            }
        }
        probe.push_str("#include <math.h>\n");
        for m in MATH_FUNCTIONS {
            for suffix in ["", "f", "l"] {
                probe.push_str(&format!(
                    "#ifndef {m}{suffix}\nextern __typeof__({m}{suffix}) {m}{suffix};\n#endif\n"
                ));
            }
        }
        let (ok, out) = run(
            cc,
            &["-fsyntax-only", "-Werror=implicit-function-declaration"],
            &probe,
        );
        assert!(ok, "{cc}: {out}");
        for (h, names) in STANDARD_FUNCTIONS {
            assert!(STANDARD_HEADERS.contains(h), "{h}");
            for n in *names {
                assert!(!STANDARD_HEADER_OBSERVERS.contains(n), "{n}");
            }
        }
    }
}

/// Point 6, the include rule's edges, each told apart by both compilers: a macro of the
/// text wrapping `INT64_C`, one that supplies the call's `(`, a macro's result called
/// (`APPLY(INT64_C)(x)`), and a header of the text's own (not a standard one) whose macro
/// pastes.
#[test]
fn the_include_rule_sees_through_the_texts_macros_and_other_headers() {
    let dir = tempfile::tempdir().unwrap();
    let header = dir.path().join("own_pasting.h");
    std::fs::write(&header, "#define GETV(x) x ## _v\n").unwrap();
    let own = format!("#include \"{}\"\n", header.display());
    let globals = "long xL = 10, yL = 20, x_v = 30, y_v = 40;\n";
    let texts = [
        format!(
            "#include <stdint.h>\n{globals}#define M(a) INT64_C(a)\nlong k(void) {{ long @ = 1; return M(@) + @; }}\n"
        ),
        format!(
            "#include <stdint.h>\n{globals}#define OPEN INT64_C(\nlong k(void) {{ long @ = 1; return OPEN @) + @; }}\n"
        ),
        format!(
            "#include <stdint.h>\n{globals}#define APPLY(m) m\nlong k(void) {{ long @ = 1; return APPLY(INT64_C)(@) + @; }}\n"
        ),
        format!("{own}{globals}long k(void) {{ long @ = 1; return GETV(@) + @; }}\n"),
    ];
    let pairs: Vec<(String, String, &[&str])> = texts
        .iter()
        .map(|t| (t.replace('@', "x"), t.replace('@', "y"), &["x", "y"][..]))
        .collect();
    let refs: Vec<(&str, &str, &[&str])> = pairs
        .iter()
        .map(|(a, b, n)| (a.as_str(), b.as_str(), *n))
        .collect();
    told_apart(&refs);
}

/// The include rule renames less only where a header's macro may paste: a call to a
/// standard library function (reserved as a macro name where its header is included),
/// even beside another header, and a glibc-style `__has_builtin` shim keep the renamed
/// twin's key.
#[test]
fn the_include_rule_keeps_library_calls_renamed() {
    let dir = tempfile::tempdir().unwrap();
    let header = dir.path().join("other.h");
    std::fs::write(&header, "#define TWICE(x) ((x) * 2)\n").unwrap();
    for t in [
        format!("#include <stdio.h>\n#include \"{}\"\nint k(int n1_w) {{ printf(\"%d\", n1_w); return n1_w; }}\n", header.display()),
        "#include <math.h>\n#include <stdint.h>\nfloat k(float n1_w) { return expf(n1_w) + sqrtf(n1_w) + (float)INT64_C(3); }\n".to_owned(),
        "#include <stdio.h>\n#ifndef __has_builtin\n#define __has_builtin(x) 0\n#endif\n#if __has_builtin(__builtin_expect)\n#define LIKELY 1\n#endif\nint k(int n1_w) { fprintf(stderr, \"%d\", n1_w); return n1_w; }\n".to_owned(),
    ] {
        let twin = t.replace("n1_w", "n2_w");
        let bound = ["n1_w", "n2_w"];
        let names = Names::new().with_bound(bound);
        let c = canonical_kernel(&t, Some("k"), &names);
        assert!(c.refusals().is_empty() && c.pinned().is_empty(), "{t}: {:?} {:?}", c.refusals(), c.pinned());
        assert_eq!(key(&t, &bound), key(&twin, &bound), "{t}");
    }
}
