//! The backend against the real C compiler: compiling, loading, calling, and the
//! errors of each step.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use cc_backend::{CcBackend, CcError, elementwise_kernel, realistic_kernel};

fn backend() -> CcBackend {
    CcBackend::new().expect("a C compiler is installed")
}

#[test]
fn compiled_kernels_compute() {
    let b = backend();
    let add = elementwise_kernel("add", "a[i] + b[i]");
    let idx = elementwise_kernel("scaled_index", "2.0f * (float)i - a[i]");
    let program = Arc::new(
        b.compile_program(&[("add", &add), ("scaled_index", &idx)], &[])
            .expect("compiles"),
    );
    assert!(program.size() > 0);
    assert_eq!(program.symbols(), ["add", "scaled_index"]);
    let mut out = vec![0.0f32; 4];
    program
        .kernel("add")
        .unwrap()
        .call(&mut out, &[1.0, 2.0, 3.0, 4.0], &[10.0, 20.0, 30.0, 40.0])
        .unwrap();
    assert_eq!(out, [11.0, 22.0, 33.0, 44.0]);
    program
        .kernel("scaled_index")
        .unwrap()
        .call(&mut out, &[1.0, 1.0, 1.0, 1.0], &[0.0; 4])
        .unwrap();
    assert_eq!(out, [-1.0, 1.0, 3.0, 5.0]);
}

#[test]
fn option_lists_reach_the_compiler() {
    let b = backend();
    let k = elementwise_kernel("k", "a[i] + (float)SHIFT");
    let program = Arc::new(
        b.compile_program(&[("k", &k)], &["-DSHIFT=5".to_string()])
            .unwrap(),
    );
    let mut out = [0.0f32; 2];
    program
        .kernel("k")
        .unwrap()
        .call(&mut out, &[1.0, 2.0], &[0.0, 0.0])
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
fn leading_compiler_arguments_are_kept() {
    let b = CcBackend::with_compiler("cc -DSHIFT=2").unwrap();
    let k = elementwise_kernel("k", "a[i] * (float)SHIFT");
    let program = Arc::new(b.compile_program(&[("k", &k)], &[]).unwrap());
    let mut out = [0.0f32; 1];
    program
        .kernel("k")
        .unwrap()
        .call(&mut out, &[3.0], &[0.0])
        .unwrap();
    assert_eq!(out, [6.0]);
}

#[test]
fn compiler_errors_carry_stderr() {
    let err = backend()
        .compile_program(
            &[(
                "bad",
                "void bad(float *out, const float *a, const float *b, int n) { out[0] = ; }",
            )],
            &[],
        )
        .unwrap_err();
    match err {
        CcError::Compiler {
            stderr, symbols, ..
        } => {
            assert!(stderr.contains("error"), "{stderr}");
            assert_eq!(symbols, ["bad"]);
        }
        other => panic!("unexpected {other:?}"),
    }
}

#[test]
fn a_kernel_of_another_signature_does_not_compile() {
    let err = backend()
        .compile_program(&[("k", "void k(double *out, int n) { out[0] = n; }")], &[])
        .unwrap_err();
    assert!(
        matches!(err, CcError::Compiler { ref stderr, .. } if stderr.contains("conflicting")),
        "{err}"
    );
}

#[test]
fn symbols_must_be_identifiers_and_defined() {
    let b = backend();
    let err = b.compile_program(&[("x(); int y", "")], &[]).unwrap_err();
    assert!(matches!(err, CcError::InvalidSymbol(_)));
    let other = elementwise_kernel("other", "a[i]");
    let err = b.compile_program(&[("wanted", &other)], &[]).unwrap_err();
    assert!(
        matches!(err, CcError::MissingSymbol { ref symbol, .. } if symbol == "wanted"),
        "{err}"
    );
}

#[test]
fn a_kernel_calling_an_undefined_function_fails_to_load() {
    let text = "void nowhere_defined_fn(void);\nvoid k(float *out, const float *a, const float *b, int n) { nowhere_defined_fn(); }";
    let err = backend().compile_program(&[("k", text)], &[]).unwrap_err();
    assert!(matches!(err, CcError::Load { .. }), "{err}");
}

#[test]
fn calls_check_lengths() {
    let k = elementwise_kernel("k", "a[i]");
    let program = Arc::new(backend().compile_program(&[("k", &k)], &[]).unwrap());
    let kernel = program.kernel("k").unwrap();
    let err = kernel.call(&mut [0.0; 2], &[1.0], &[1.0, 2.0]).unwrap_err();
    assert!(matches!(
        err,
        CcError::Length {
            out: 2,
            a: 1,
            b: 2,
            ..
        }
    ));
    kernel.call(&mut [], &[], &[]).unwrap();
}

#[test]
fn a_kernel_keeps_its_program_loaded() {
    let k = elementwise_kernel("k", "a[i] - b[i]");
    let program = Arc::new(backend().compile_program(&[("k", &k)], &[]).unwrap());
    let path = program.path().to_path_buf();
    let kernel = program.kernel("k").unwrap();
    drop(program);
    assert!(path.exists());
    let mut out = [0.0f32; 2];
    kernel.call(&mut out, &[5.0, 5.0], &[1.0, 2.0]).unwrap();
    assert_eq!(out, [4.0, 3.0]);
    drop(kernel);
    assert!(
        !path.exists(),
        "the program's directory goes with the last handle"
    );
}

#[test]
fn realistic_kernels_compile_and_run_within_bounds() {
    let names: Vec<String> = (0..12).map(|i| format!("fused_{i}")).collect();
    let texts: Vec<String> = names
        .iter()
        .enumerate()
        .map(|(i, n)| realistic_kernel(n, i as u64))
        .collect();
    let kernels: Vec<(&str, &str)> = names
        .iter()
        .map(String::as_str)
        .zip(texts.iter().map(String::as_str))
        .collect();
    let program = Arc::new(backend().compile_program(&kernels, &[]).unwrap());
    for n in [0usize, 1, 15, 64, 257] {
        let a: Vec<f32> = (0..n).map(|i| (i as f32 * 0.37).sin()).collect();
        let b: Vec<f32> = (0..n).map(|i| (i as f32 * 0.11).cos()).collect();
        for name in &names {
            let mut out = vec![f32::NAN; n];
            program
                .kernel(name)
                .unwrap()
                .call(&mut out, &a, &b)
                .unwrap();
            assert!(out.iter().all(|v| v.is_finite()), "{name} n={n}: {out:?}");
        }
    }
}

#[test]
fn a_missing_compiler_is_a_spawn_error() {
    let err = CcBackend::with_compiler("/nonexistent/kcache-no-such-cc").unwrap_err();
    assert!(matches!(err, CcError::Spawn { .. }));
}
