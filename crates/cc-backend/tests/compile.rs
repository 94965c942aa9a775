//! The backend against the real C compiler: compiling, loading, calling, and the
//! errors of each step.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use cc_backend::{Arg, CcBackend, CcError, Kernel, Signature, Source};
use test_support::kernels::{elementwise_kernel, realistic_kernel};

fn backend() -> CcBackend {
    CcBackend::new().expect("a C compiler is installed")
}

/// A kernel text of the generators' signature `(out, a, b, n)`.
fn abn(text: impl Into<String>) -> Source {
    Source::new(text, Signature::out_a_b_n())
}

/// Calls a `(out, a, b, n)` kernel with `n = out.len()`.
fn call(kernel: &Kernel, out: &mut [f32], a: &[f32], b: &[f32]) -> Result<(), CcError> {
    let n = i32::try_from(out.len()).unwrap();
    kernel.call(&mut [
        Arg::F32Mut(out),
        Arg::F32(a),
        Arg::F32(b),
        Arg::I32Scalar(n),
    ])
}

#[test]
fn compiled_kernels_compute() {
    let b = backend();
    let add = abn(elementwise_kernel("add", "a[i] + b[i]"));
    let idx = abn(elementwise_kernel("scaled_index", "2.0f * (float)i - a[i]"));
    let program = Arc::new(
        b.compile_program(&[("add", &add), ("scaled_index", &idx)], &[])
            .expect("compiles"),
    );
    assert!(program.size() > 0);
    assert_eq!(program.symbols(), ["add", "scaled_index"]);
    let mut out = vec![0.0f32; 4];
    call(
        &program.kernel("add").unwrap(),
        &mut out,
        &[1.0, 2.0, 3.0, 4.0],
        &[10.0, 20.0, 30.0, 40.0],
    )
    .unwrap();
    assert_eq!(out, [11.0, 22.0, 33.0, 44.0]);
    call(
        &program.kernel("scaled_index").unwrap(),
        &mut out,
        &[1.0, 1.0, 1.0, 1.0],
        &[0.0; 4],
    )
    .unwrap();
    assert_eq!(out, [-1.0, 1.0, 3.0, 5.0]);
}

#[test]
fn option_lists_reach_the_compiler() {
    let b = backend();
    let k = abn(elementwise_kernel("k", "a[i] + (float)SHIFT"));
    let program = Arc::new(
        b.compile_program(&[("k", &k)], &["-DSHIFT=5".to_string()])
            .unwrap(),
    );
    let mut out = [0.0f32; 2];
    call(
        &program.kernel("k").unwrap(),
        &mut out,
        &[1.0, 2.0],
        &[0.0, 0.0],
    )
    .unwrap();
    assert_eq!(out, [6.0, 7.0]);
    // Without the definition the same text does not compile.
    let err = b.compile_program(&[("k", &k)], &[]).unwrap_err();
    assert!(
        matches!(err, CcError::Compiler { ref stderr, .. } if stderr.contains("SHIFT")),
        "{err}"
    );
}

#[test]
fn diagnostics_number_the_lines_of_the_kernel_text() {
    // The error is on the text's third line, whatever the prelude and generated lines
    // before it; the same line alone (as its own unit) and beside a companion that
    // shares a merged unit with it (a failed merged compile falls back to own units).
    let text = "void bad(float *out, const float *a, const float *b, int n) {\n\
                for (int i = 0; i < n; ++i)\n\
                out[i] = a[i] +;\n\
                }";
    let bad = abn(text);
    let long_prelude = abn(text).with_prelude(
        "#include <math.h>\n#include <stdint.h>\n#include <stddef.h>\n#include <string.h>\n",
    );
    let good = abn(elementwise_kernel("good", "a[i]"));
    for (kernels, what) in [
        (vec![("bad", &bad)], "alone"),
        (vec![("bad", &long_prelude)], "with a longer prelude"),
        (vec![("good", &good), ("bad", &bad)], "beside a companion"),
    ] {
        match backend().compile_program(&kernels, &[]) {
            Err(CcError::Compiler {
                stderr, symbols, ..
            }) => {
                assert_eq!(symbols, ["bad"], "{what}");
                assert!(stderr.contains("kernel.c:3:"), "{what}: {stderr}");
            }
            other => panic!("{what}: unexpected {other:?}"),
        }
    }
}

#[test]
fn leading_compiler_arguments_are_kept() {
    let b = CcBackend::with_compiler("cc -DSHIFT=2").unwrap();
    let k = abn(elementwise_kernel("k", "a[i] * (float)SHIFT"));
    let program = Arc::new(b.compile_program(&[("k", &k)], &[]).unwrap());
    let mut out = [0.0f32; 1];
    call(&program.kernel("k").unwrap(), &mut out, &[3.0], &[0.0]).unwrap();
    assert_eq!(out, [6.0]);
}

#[test]
fn compiler_errors_carry_stderr_and_show_its_first_lines() {
    let bad = abn("void bad(float *out, const float *a, const float *b, int n) { out[0] = ; }");
    let err = backend()
        .compile_program(&[("bad", &bad)], &[])
        .unwrap_err();
    let shown = err.to_string();
    assert!(
        shown.contains("kernel.c:") && shown.contains("bad") && shown.contains("error"),
        "the display names the unit, the kernel's function and the diagnostic: {shown}"
    );
    match err {
        CcError::Compiler {
            stderr, symbols, ..
        } => {
            assert!(stderr.contains("error"), "{stderr}");
            assert_eq!(symbols, ["bad"]);
        }
        other => panic!("unexpected {other:?}"),
    }
    // Beside a kernel that compiles, the one that does not is named alone.
    let good = abn(elementwise_kernel("good", "a[i]"));
    match backend().compile_program(&[("good", &good), ("bad", &bad)], &[]) {
        Err(CcError::Compiler { symbols, .. }) => assert_eq!(symbols, ["bad"]),
        other => panic!("unexpected {other:?}"),
    }
    // Many diagnostics: the display is cut, the field keeps them all.
    let noisy: String = (0..40).map(|i| format!("int x{i} = ;\n")).collect();
    let noisy = abn(format!(
        "{noisy}void noisy(float *out, const float *a, const float *b, int n) {{}}"
    ));
    let err = backend()
        .compile_program(&[("noisy", &noisy)], &[])
        .unwrap_err();
    let shown = err.to_string();
    assert!(shown.contains("more lines)"), "{shown}");
    assert!(matches!(err, CcError::Compiler { ref stderr, .. } if stderr.lines().count() > 40));
}

#[test]
fn a_kernel_of_another_signature_does_not_compile() {
    let k = abn("void k(double *out, int n) { out[0] = n; }");
    let err = backend().compile_program(&[("k", &k)], &[]).unwrap_err();
    assert!(
        matches!(err, CcError::Compiler { ref stderr, .. } if stderr.contains("conflicting")),
        "{err}"
    );
    // Const-ness is part of the type: a kernel writing a buffer the signature declares
    // read-only does not compile either.
    let k = abn("void k(float *out, float *a, const float *b, int n) { a[0] = 1; }");
    assert!(matches!(
        backend().compile_program(&[("k", &k)], &[]),
        Err(CcError::Compiler { .. })
    ));
}

#[test]
fn symbols_must_be_identifiers_distinct_and_defined() {
    let b = backend();
    let empty = abn("");
    let err = b
        .compile_program(&[("x(); int y", &empty)], &[])
        .unwrap_err();
    assert!(matches!(err, CcError::InvalidSymbol(_)));
    let err = b
        .compile_program(&[("k__kcache_entry", &empty)], &[])
        .unwrap_err();
    assert!(matches!(err, CcError::InvalidSymbol(_)), "{err}");
    let k = abn(elementwise_kernel("k", "a[i]"));
    let err = b.compile_program(&[("k", &k), ("k", &k)], &[]).unwrap_err();
    assert!(matches!(err, CcError::DuplicateSymbol(ref s) if s == "k"));
    // Declared by the prototype but defined under another name: the error says so (not
    // the loader's `undefined symbol`), naming the kernel.
    let other = abn(elementwise_kernel("other", "a[i]"));
    let err = b.compile_program(&[("wanted", &other)], &[]).unwrap_err();
    assert!(
        matches!(err, CcError::UndefinedKernel { ref symbol } if symbol == "wanted"),
        "{err}"
    );
    assert_eq!(
        err.to_string(),
        "the text of kernel `wanted` does not define `wanted`"
    );
    // Defined, but hidden: not in the program's dynamic symbol table either.
    let hidden = abn(format!(
        "__attribute__((visibility(\"hidden\"))) {}",
        elementwise_kernel("wanted", "a[i]")
    ));
    let err = b.compile_program(&[("wanted", &hidden)], &[]).unwrap_err();
    assert!(matches!(err, CcError::UndefinedKernel { .. }), "{err}");
}

/// A kernel named like a C library function whose text does not define it: the loader
/// would bind the entry's call (and `dlsym`) to the library's function, so the kernel
/// "loads" and calling it runs `getpid`. It is refused before the loader sees it.
#[test]
fn a_kernel_named_like_a_libc_function_must_be_defined_by_its_text() {
    let sig =
        Signature::new().buffer_mut("out", cc_backend::Elem::I32, cc_backend::Extent::fixed(1));
    let elsewhere = Source::new("void not_getpid(int32_t *out) { out[0] = 7; }", sig);
    let err = backend()
        .compile_program(&[("getpid", &elsewhere)], &[])
        .unwrap_err();
    assert!(
        matches!(err, CcError::UndefinedKernel { ref symbol } if symbol == "getpid"),
        "{err}"
    );
}

/// An undefined function is a link error (`-z defs`) naming the kernel, never a program
/// the loader refuses (or, lazily bound, a crash at the call).
#[test]
fn a_kernel_calling_an_undefined_function_fails_to_link() {
    let text = abn(
        "void nowhere_defined_fn(void);\nvoid k(float *out, const float *a, const float *b, int n) { nowhere_defined_fn(); }",
    );
    let err = backend().compile_program(&[("k", &text)], &[]).unwrap_err();
    assert!(
        matches!(err, CcError::Compiler { ref symbols, .. } if symbols == &["k".to_string()]),
        "{err}"
    );
    // The display says why: the linker's message names the missing function.
    assert!(err.to_string().contains("nowhere_defined_fn"), "{err}");
}

#[test]
fn a_kernel_keeps_its_program_loaded() {
    let k = abn(elementwise_kernel("k", "a[i] - b[i]"));
    let work = tempfile::tempdir().unwrap();
    let in_work = || std::fs::read_dir(work.path()).unwrap().count();
    let b = backend().with_work_dir(work.path());
    let program = Arc::new(b.compile_program(&[("k", &k)], &[]).unwrap());
    let path = program.path().to_path_buf();
    let kernel = program.kernel("k").unwrap();
    drop(program);
    assert!(path.exists());
    assert_eq!(in_work(), 1, "the program's directory");
    let mut out = [0.0f32; 2];
    call(&kernel, &mut out, &[5.0, 5.0], &[1.0, 2.0]).unwrap();
    assert_eq!(out, [4.0, 3.0]);
    drop(kernel);
    assert_eq!(
        in_work(),
        0,
        "the program's directory goes with the last handle"
    );
}

#[test]
fn realistic_kernels_compile_and_run_within_bounds() {
    let names: Vec<String> = (0..12).map(|i| format!("fused_{i}")).collect();
    let sources: Vec<Source> = names
        .iter()
        .enumerate()
        .map(|(i, n)| abn(realistic_kernel(n, i as u64)))
        .collect();
    let kernels: Vec<(&str, &Source)> = names.iter().map(String::as_str).zip(&sources).collect();
    let program = Arc::new(backend().compile_program(&kernels, &[]).unwrap());
    for n in [0usize, 1, 15, 64, 257] {
        let a: Vec<f32> = (0..n).map(|i| (i as f32 * 0.37).sin()).collect();
        let b: Vec<f32> = (0..n).map(|i| (i as f32 * 0.11).cos()).collect();
        for name in &names {
            let mut out = vec![f32::NAN; n];
            call(&program.kernel(name).unwrap(), &mut out, &a, &b).unwrap();
            assert!(out.iter().all(|v| v.is_finite()), "{name} n={n}: {out:?}");
        }
    }
}

#[test]
fn a_missing_compiler_is_a_spawn_error() {
    let err = CcBackend::with_compiler("/nonexistent/kcache-no-such-cc").unwrap_err();
    assert!(matches!(err, CcError::Spawn { .. }));
}

/// A kernel may be named like a function the process already has (here libc's `getpid`):
/// the safe call still runs the kernel, not the process's function of that name. The
/// entry calls the kernel by its exported name, which the dynamic loader would bind to the
/// first definition in the global scope (libc's `getpid` here, libc's `free` for a kernel
/// named `free`: a free of the caller's buffer) without `-Bsymbolic` at the link.
#[test]
fn a_kernel_named_like_a_libc_function_is_the_one_called() {
    let sig =
        Signature::new().buffer_mut("out", cc_backend::Elem::I32, cc_backend::Extent::fixed(1));
    let getpid = Source::new("void getpid(int32_t *out) { out[0] = 7; }", sig);
    let program = Arc::new(
        backend()
            .compile_program(&[("getpid", &getpid)], &[])
            .unwrap(),
    );
    let kernel = program.kernel("getpid").unwrap();
    let mut out = [0i32];
    kernel.call(&mut [Arg::I32Mut(&mut out)]).unwrap();
    assert_eq!(
        out,
        [7],
        "the entry called another function than the kernel"
    );
}

/// A `Kernel` is `Send + Sync` and safe calls of one kernel may overlap (as the kernel text
/// contract says): four threads call one kernel at once, each on its own buffers, and each
/// gets its own result.
#[test]
fn one_kernel_called_from_several_threads_at_once_computes_each_call() {
    fn shareable<T: Send + Sync>(t: T) -> T {
        t
    }
    let k = abn(elementwise_kernel("k", "a[i] * b[i]"));
    let program = Arc::new(backend().compile_program(&[("k", &k)], &[]).unwrap());
    let kernel = shareable(program.kernel("k").unwrap());
    let barrier = std::sync::Barrier::new(4);
    std::thread::scope(|s| {
        for t in 0..4u16 {
            let (kernel, barrier) = (&kernel, &barrier);
            s.spawn(move || {
                let a: Vec<f32> = (0..4096u16).map(f32::from).collect();
                let b = vec![f32::from(t); 4096];
                let mut out = vec![f32::NAN; 4096];
                barrier.wait();
                for _ in 0..50 {
                    call(kernel, &mut out, &a, &b).unwrap();
                }
                let want: Vec<f32> = a.iter().map(|x| x * f32::from(t)).collect();
                assert_eq!(out, want, "thread {t}");
            });
        }
    });
}
