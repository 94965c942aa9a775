//! Kernels of arbitrary signatures through the safe call, checked against Rust
//! references; refused calls; one translation unit per kernel; saved programs.

#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;

use cc_backend::{Arg, CcBackend, CcError, CcProgram, Elem, Extent, Signature, Source};
use common::run_abn;
use kernel_cache::{Backend, BatchKernel, KernelCache, Names, Resolver, Split};

fn backend() -> CcBackend {
    CcBackend::new().expect("a C compiler is installed")
}

/// Kernels of 1 to 8 parameters of mixed kinds.
fn mixed() -> Vec<(&'static str, Source)> {
    let n = || Extent::of("n");
    vec![
        (
            "p1",
            Source::new(
                "void p1(int32_t *o) { for (int i = 0; i < 4; ++i) o[i] = i * i - 3; }",
                Signature::new().buffer_mut("o", Elem::I32, Extent::fixed(4)),
            ),
        ),
        (
            "p2",
            Source::new(
                "void p2(double *y, int64_t n) { for (int64_t i = 0; i < n; ++i) y[i] = (double)i * 0.5 - 1.0; }",
                Signature::new()
                    .buffer_mut("y", Elem::F64, n())
                    .scalar("n", Elem::I64),
            ),
        ),
        (
            "p3",
            Source::new(
                "void p3(uint8_t *o, const uint8_t *x, uint8_t n) { for (int i = 0; i < n; ++i) o[i] = (uint8_t)(x[i] ^ 0x5a); }",
                Signature::new()
                    .buffer_mut("o", Elem::U8, n())
                    .buffer("x", Elem::U8, n())
                    .scalar("n", Elem::U8),
            ),
        ),
        (
            "p4",
            Source::new(
                // Negates half-precision values (their sign bit), scaled count.
                "void p4(uint16_t *h, const uint16_t *x, int32_t n, uint16_t bias) {\n\
                   for (int i = 0; i < 2 * n; ++i) h[i] = (uint16_t)((x[i] ^ 0x8000u) + bias);\n}",
                Signature::new()
                    .buffer_mut("h", Elem::F16Bits, n().times(2))
                    .buffer("x", Elem::F16Bits, n().times(2))
                    .scalar("n", Elem::I32)
                    .scalar("bias", Elem::F16Bits),
            ),
        ),
        (
            "p5",
            Source::new(
                "void p5(double *o, const float *a, const int32_t *idx, int32_t n, int32_t m) {\n\
                   for (int i = 0; i < n; ++i) o[i] = (double)a[((idx[i] % m) + m) % m] * 2.0;\n}",
                Signature::new()
                    .buffer_mut("o", Elem::F64, n())
                    .buffer("a", Elem::F32, Extent::of("m"))
                    .buffer("idx", Elem::I32, n())
                    .scalar("n", Elem::I32)
                    .scalar("m", Elem::I32),
            ),
        ),
        (
            "p6",
            Source::new(
                "void p6(int64_t *o, const int64_t *a, const int64_t *b, int64_t k, int32_t rows, int32_t cols) {\n\
                   for (int r = 0; r < rows; ++r) for (int c = 0; c < cols; ++c)\n\
                     o[r * cols + c] = a[r * cols + c] * k + b[c];\n}",
                Signature::new()
                    .buffer_mut("o", Elem::I64, Extent::product(["rows", "cols"]))
                    .buffer("a", Elem::I64, Extent::product(["rows", "cols"]))
                    .buffer("b", Elem::I64, Extent::of("cols"))
                    .scalar("k", Elem::I64)
                    .scalar("rows", Elem::I32)
                    .scalar("cols", Elem::I32),
            ),
        ),
        (
            "p7",
            Source::new(
                "void p7(float *c, const float *a, const float *b, int m, int k, int n, float alpha) {\n\
                   for (int i = 0; i < m; ++i) for (int j = 0; j < n; ++j) {\n\
                     float acc = 0.0f;\n\
                     for (int p = 0; p < k; ++p) acc += a[i * k + p] * b[p * n + j];\n\
                     c[i * n + j] = alpha * acc;\n  }\n}",
                Signature::new()
                    .buffer_mut("c", Elem::F32, Extent::product(["m", "n"]))
                    .buffer("a", Elem::F32, Extent::product(["m", "k"]))
                    .buffer("b", Elem::F32, Extent::product(["k", "n"]))
                    .scalar("m", Elem::I32)
                    .scalar("k", Elem::I32)
                    .scalar("n", Elem::I32)
                    .scalar("alpha", Elem::F32),
            ),
        ),
        (
            "p8",
            Source::new(
                "void p8(float *o1, double *o2, const uint8_t *mask, const float *x, const double *y, int32_t n, float fs, double ds) {\n\
                   for (int i = 0; i < n; ++i) { o1[i] = mask[i] ? x[i] * fs : 0.0f; o2[i] = y[i] * ds + (double)mask[i]; }\n}",
                Signature::new()
                    .buffer_mut("o1", Elem::F32, n())
                    .buffer_mut("o2", Elem::F64, n())
                    .buffer("mask", Elem::U8, n())
                    .buffer("x", Elem::F32, n())
                    .buffer("y", Elem::F64, n())
                    .scalar("n", Elem::I32)
                    .scalar("fs", Elem::F32)
                    .scalar("ds", Elem::F64),
            ),
        ),
    ]
}

fn compile_mixed(b: &CcBackend) -> Arc<CcProgram> {
    let kernels = mixed();
    let refs: Vec<(&str, &Source)> = kernels.iter().map(|(s, k)| (*s, k)).collect();
    Arc::new(b.compile_program(&refs, &[]).unwrap())
}

/// Runs every mixed kernel on inputs of size `n` and checks it against Rust.
fn check_mixed(program: &Arc<CcProgram>, n: usize) {
    let k = |s: &str| program.kernel(s).unwrap();
    let ni = i32::try_from(n).unwrap();

    let mut o = [0i32; 4];
    k("p1").call(&mut [Arg::I32Mut(&mut o)]).unwrap();
    assert_eq!(o, [-3, -2, 1, 6]);

    let mut y = vec![9.0f64; n + 1];
    k("p2")
        .call(&mut [Arg::F64Mut(&mut y), Arg::I64Scalar(n as i64)])
        .unwrap();
    let want: Vec<f64> = (0..n).map(|i| i as f64 * 0.5 - 1.0).collect();
    assert_eq!(y[..n], want[..]);
    assert_eq!(y[n], 9.0, "nothing written past the extent");

    let n8 = n.min(255);
    let x: Vec<u8> = (0..n8).map(|i| (i * 37 % 256) as u8).collect();
    let mut o = vec![0u8; n8];
    k("p3")
        .call(&mut [Arg::U8Mut(&mut o), Arg::U8(&x), Arg::U8Scalar(n8 as u8)])
        .unwrap();
    assert_eq!(o, x.iter().map(|v| v ^ 0x5a).collect::<Vec<_>>());

    let x: Vec<u16> = (0..2 * n).map(|i| (i * 4099 % 65536) as u16).collect();
    let mut h = vec![0u16; 2 * n];
    k("p4")
        .call(&mut [
            Arg::F16BitsMut(&mut h),
            Arg::F16Bits(&x),
            Arg::I32Scalar(ni),
            Arg::F16BitsScalar(3),
        ])
        .unwrap();
    assert_eq!(
        h,
        x.iter()
            .map(|v| (v ^ 0x8000).wrapping_add(3))
            .collect::<Vec<_>>()
    );

    let m = 7usize;
    let a: Vec<f32> = (0..m).map(|i| i as f32 * 1.25 - 2.0).collect();
    let idx: Vec<i32> = (0..n as i32).map(|i| i * 5 - 11).collect();
    let mut o = vec![0.0f64; n];
    k("p5")
        .call(&mut [
            Arg::F64Mut(&mut o),
            Arg::F32(&a),
            Arg::I32(&idx),
            Arg::I32Scalar(ni),
            Arg::I32Scalar(m as i32),
        ])
        .unwrap();
    let want: Vec<f64> = idx
        .iter()
        .map(|&j| f64::from(a[j.rem_euclid(m as i32) as usize]) * 2.0)
        .collect();
    assert_eq!(o, want);

    let (rows, cols) = (3usize, n.max(1));
    let a: Vec<i64> = (0..rows * cols).map(|i| i as i64 * 3 - 7).collect();
    let bb: Vec<i64> = (0..cols).map(|i| 100 - i as i64).collect();
    let mut o = vec![0i64; rows * cols];
    k("p6")
        .call(&mut [
            Arg::I64Mut(&mut o),
            Arg::I64(&a),
            Arg::I64(&bb),
            Arg::I64Scalar(-2),
            Arg::I32Scalar(rows as i32),
            Arg::I32Scalar(cols as i32),
        ])
        .unwrap();
    let want: Vec<i64> = (0..rows * cols).map(|i| a[i] * -2 + bb[i % cols]).collect();
    assert_eq!(o, want);

    let (mm, kk, nn) = (2usize, 3usize, n.max(1));
    let a: Vec<f32> = (0..mm * kk).map(|i| (i as f32 * 0.3).sin()).collect();
    let bm: Vec<f32> = (0..kk * nn).map(|i| (i as f32 * 0.7).cos()).collect();
    let mut c = vec![0.0f32; mm * nn];
    k("p7")
        .call(&mut [
            Arg::F32Mut(&mut c),
            Arg::F32(&a),
            Arg::F32(&bm),
            Arg::I32Scalar(mm as i32),
            Arg::I32Scalar(kk as i32),
            Arg::I32Scalar(nn as i32),
            Arg::F32Scalar(1.5),
        ])
        .unwrap();
    for i in 0..mm {
        for j in 0..nn {
            let acc: f32 = (0..kk).map(|p| a[i * kk + p] * bm[p * nn + j]).sum();
            let want = 1.5 * acc;
            assert!((c[i * nn + j] - want).abs() <= 1e-5 * want.abs().max(1.0));
        }
    }

    let mask: Vec<u8> = (0..n).map(|i| (i % 3 == 0) as u8).collect();
    let x: Vec<f32> = (0..n).map(|i| i as f32 - 4.5).collect();
    let y: Vec<f64> = (0..n).map(|i| i as f64 * 0.25).collect();
    let (mut o1, mut o2) = (vec![1.0f32; n], vec![1.0f64; n]);
    k("p8")
        .call(&mut [
            Arg::F32Mut(&mut o1),
            Arg::F64Mut(&mut o2),
            Arg::U8(&mask),
            Arg::F32(&x),
            Arg::F64(&y),
            Arg::I32Scalar(ni),
            Arg::F32Scalar(-2.0),
            Arg::F64Scalar(4.0),
        ])
        .unwrap();
    for i in 0..n {
        let w1 = if mask[i] != 0 { x[i] * -2.0 } else { 0.0 };
        assert_eq!(o1[i], w1);
        assert_eq!(o2[i], y[i] * 4.0 + f64::from(mask[i]));
    }
}

#[test]
fn kernels_of_one_to_eight_mixed_parameters_match_rust() {
    let program = compile_mixed(&backend());
    for n in [0, 1, 5, 33, 300] {
        check_mixed(&program, n);
    }
}

#[test]
fn wrong_counts_kinds_and_short_buffers_are_refused_before_the_kernel_runs() {
    let program = compile_mixed(&backend());
    let p7 = program.kernel("p7").unwrap();
    let (a, b) = ([1.0f32; 6], [1.0f32; 6]);
    let mut c = [7.0f32; 4];
    let args = |c: &mut [f32], m: i32, alpha: Arg<'static>| -> Result<(), CcError> {
        p7.call(&mut [
            Arg::F32Mut(c),
            Arg::F32(&a),
            Arg::F32(&b),
            Arg::I32Scalar(m),
            Arg::I32Scalar(3),
            Arg::I32Scalar(2),
            alpha,
        ])
    };
    // c needs m*n = 2*2 = 4 elements, a m*k = 6, b k*n = 6: fine.
    args(&mut c, 2, Arg::F32Scalar(1.0)).unwrap();
    assert_eq!(c, [3.0; 4]);
    c = [7.0; 4];
    // m = 3 would need 6 elements of c and 9 of a.
    let err = args(&mut c, 3, Arg::F32Scalar(1.0)).unwrap_err();
    assert!(
        matches!(
            err,
            CcError::BufferTooShort {
                index: 0,
                needed: 6,
                given: 4,
                ..
            }
        ),
        "{err}"
    );
    // A negative extent scalar.
    let err = args(&mut c, -1, Arg::F32Scalar(1.0)).unwrap_err();
    assert!(matches!(err, CcError::BadExtent { .. }), "{err}");
    // A scalar of another type.
    let err = args(&mut c, 2, Arg::F64Scalar(1.0)).unwrap_err();
    assert!(matches!(err, CcError::ArgKind { index: 6, .. }), "{err}");
    assert_eq!(c, [7.0; 4], "no refused call ran the kernel");

    // A shared slice where the kernel writes; a buffer where a scalar is due; another
    // element type; too few and too many arguments.
    let err = p7
        .call(&mut [
            Arg::F32(&c),
            Arg::F32(&a),
            Arg::F32(&b),
            Arg::I32Scalar(2),
            Arg::I32Scalar(3),
            Arg::I32Scalar(2),
            Arg::F32Scalar(1.0),
        ])
        .unwrap_err();
    assert!(matches!(err, CcError::ArgKind { index: 0, .. }), "{err}");
    let err = p7
        .call(&mut [
            Arg::F32Mut(&mut c),
            Arg::F32(&a),
            Arg::F32(&b),
            Arg::I32(&[2]),
            Arg::I32Scalar(3),
            Arg::I32Scalar(2),
            Arg::F32Scalar(1.0),
        ])
        .unwrap_err();
    assert!(matches!(err, CcError::ArgKind { index: 3, .. }), "{err}");
    let ad = [1.0f64; 6];
    let err = p7
        .call(&mut [
            Arg::F32Mut(&mut c),
            Arg::F64(&ad),
            Arg::F32(&b),
            Arg::I32Scalar(2),
            Arg::I32Scalar(3),
            Arg::I32Scalar(2),
            Arg::F32Scalar(1.0),
        ])
        .unwrap_err();
    assert!(matches!(err, CcError::ArgKind { index: 1, .. }), "{err}");
    let err = p7.call(&mut [Arg::F32Mut(&mut c)]).unwrap_err();
    assert!(matches!(
        err,
        CcError::ArgCount {
            expected: 7,
            given: 1,
            ..
        }
    ));
    let err = program
        .kernel("p1")
        .unwrap()
        .call(&mut [Arg::I32Mut(&mut [0; 4]), Arg::I32Scalar(0)])
        .unwrap_err();
    assert!(matches!(err, CcError::ArgCount { .. }));
    // A fixed extent.
    let err = program
        .kernel("p1")
        .unwrap()
        .call(&mut [Arg::I32Mut(&mut [0; 3])])
        .unwrap_err();
    assert!(matches!(err, CcError::BufferTooShort { needed: 4, .. }));
    // An extent product that overflows.
    let p2 = Signature::new()
        .buffer("a", Elem::U8, Extent::product(["x", "y"]))
        .scalar("x", Elem::I64)
        .scalar("y", Elem::I64);
    let k = Source::new(
        "void big(const uint8_t *a, int64_t x, int64_t y) { (void)a; (void)x; (void)y; }",
        p2,
    );
    let big = Arc::new(backend().compile_program(&[("big", &k)], &[]).unwrap());
    let err = big
        .kernel("big")
        .unwrap()
        .call(&mut [Arg::U8(&[]), Arg::I64Scalar(i64::MAX), Arg::I64Scalar(4)])
        .unwrap_err();
    assert!(matches!(err, CcError::BadExtent { .. }), "{err}");
}

/// `definer` defines `SCALE` for the rest of its translation unit; `user` takes the
/// value 1 unless `SCALE` is already defined, and has a `static` helper of the same
/// name as `definer`'s.
fn define_pair() -> [(String, Source); 2] {
    let definer = "#define SCALE 3.0f\nstatic float helper(float x) { return x - 100.0f; }\n\
                   void definer(float *out, const float *a, const float *b, int n) {\n\
                   for (int i = 0; i < n; ++i) out[i] = helper(a[i]) * SCALE; }";
    let user = "#ifndef SCALE\n#define SCALE 1.0f\n#endif\nstatic float helper(float x) { return x; }\n\
                void user(float *out, const float *a, const float *b, int n) {\n\
                for (int i = 0; i < n; ++i) out[i] = helper(a[i]) * SCALE + b[i]; }";
    [
        (
            "definer".into(),
            Source::new(definer, Signature::out_a_b_n()),
        ),
        ("user".into(), Source::new(user, Signature::out_a_b_n())),
    ]
}

#[test]
fn a_define_in_one_kernel_never_reaches_a_companion() {
    let b = backend();
    let [definer, user] = define_pair();
    let together = Arc::new(
        b.compile_program(&[(&definer.0, &definer.1), (&user.0, &user.1)], &[])
            .unwrap(),
    );
    let alone = Arc::new(b.compile_program(&[(&user.0, &user.1)], &[]).unwrap());
    assert_eq!(run_abn(&together, "user"), [11.0, 22.0, 33.0]);
    assert_eq!(run_abn(&together, "user"), run_abn(&alone, "user"));
    assert_eq!(run_abn(&together, "definer"), [-297.0, -294.0, -291.0]);

    // Through the cache, whole and split: the same results.
    let names = Names::new().with_bound(["out", "a", "b", "n"]);
    let batch: Vec<BatchKernel<Source>> = define_pair()
        .into_iter()
        .map(|(s, k)| k.batch_kernel(&s, &names, vec![], b.identity()))
        .collect();
    let whole = {
        Resolver::new(&KernelCache::new(1 << 30), &b)
            .split(Split::WHOLE)
            .resolve_strict(&batch)
            .map(|r| r.answers)
            .unwrap()
    };
    let split = {
        Resolver::new(&KernelCache::new(1 << 30), &b)
            .split(Split::new(2, 1))
            .resolve_strict(&batch)
            .map(|r| r.answers)
            .unwrap()
    };
    assert!(whole[0].same_program(&whole[1]) && !split[0].same_program(&split[1]));
    for (w, s) in whole.iter().zip(&split) {
        assert_eq!(
            run_abn(&w.program, &w.symbol),
            run_abn(&s.program, &s.symbol)
        );
    }

    // Companions that would share a merged unit but for the definer's directive: the
    // definition never reaches the user, whichever comes first.
    let k = |s: &str, before: &str| {
        let text = format!(
            "{before}void {s}(float *out, const float *a, const float *b, int n) {{ \
             for (int i = 0; i < n; ++i) out[i] = expf(a[i]) + b[i]; }}\n"
        );
        (s.to_string(), Source::new(text, Signature::out_a_b_n()))
    };
    let (definer, user) = (k("definer", "#define expf(x) (x)\n"), k("user", ""));
    let alone = Arc::new(b.compile_program(&[(&user.0, &user.1)], &[]).unwrap());
    let want: Vec<f32> = [(1.0f32, 10.0f32), (2.0, 20.0), (3.0, 30.0)]
        .iter()
        .map(|(a, b)| a.exp() + b)
        .collect();
    for pair in [[&definer, &user], [&user, &definer]] {
        let together = Arc::new(
            b.compile_program(&[(&pair[0].0, &pair[0].1), (&pair[1].0, &pair[1].1)], &[])
                .unwrap(),
        );
        assert_eq!(run_abn(&together, "user"), run_abn(&alone, "user"));
        let got = run_abn(&together, "user");
        assert!(
            got.iter().zip(&want).all(|(g, w)| (g - w).abs() < 1e-3),
            "{got:?}"
        );
        assert_eq!(run_abn(&together, "definer"), [11.0, 22.0, 33.0]);
    }
}

#[test]
fn saved_programs_load_in_another_backend_and_compute_the_same() {
    let b = backend();
    let program = compile_mixed(&b);
    let saved = Backend::save(&b, &program)
        .expect("cc-backend saves")
        .unwrap();
    assert_eq!(saved.symbols, program.symbols());

    let other = backend();
    let loaded = Arc::new(
        Backend::load(&other, &saved)
            .expect("cc-backend loads")
            .unwrap()
            .program,
    );
    assert_eq!(other.programs_compiled(), 0, "loading is not compiling");
    assert_ne!(loaded.path(), program.path());
    for s in program.symbols() {
        assert_eq!(loaded.signature(s), program.signature(s));
    }
    check_mixed(&loaded, 17);
    assert_eq!(Backend::identity(&b), Backend::identity(&other));

    // Damaged saves are errors, never a panic or a load of something else.
    let mut wrong_table = saved.clone();
    wrong_table.symbols.swap(0, 1);
    assert!(
        Backend::load(&other, &wrong_table)
            .expect("cc-backend loads")
            .is_err()
    );
    for cut in [0, 10, 40, saved.bytes.len() / 2, saved.bytes.len() - 1] {
        let mut cut_save = saved.clone();
        cut_save.bytes.truncate(cut);
        assert!(
            Backend::load(&other, &cut_save)
                .expect("cc-backend loads")
                .is_err(),
            "cut at {cut}"
        );
    }
    let mut trailing = saved.clone();
    trailing.bytes.push(0);
    assert!(
        Backend::load(&other, &trailing)
            .expect("cc-backend loads")
            .is_err()
    );
}

#[test]
fn the_raw_symbol_is_the_kernel_itself() {
    let b = backend();
    let program = compile_mixed(&b);
    let kernel = program.kernel("p1").unwrap();
    let mut o = [0i32; 4];
    // SAFETY: `p1` is `void p1(int32_t *o)` (its signature's prototype, checked by the
    // compiler) and writes exactly 4 elements (its extent); `o` holds 4, and `kernel`
    // keeps the library loaded across the call.
    #[allow(unsafe_code)]
    unsafe {
        let f: unsafe extern "C" fn(*mut i32) = std::mem::transmute(kernel.raw_function());
        f(o.as_mut_ptr());
    }
    assert_eq!(o, [-3, -2, 1, 6]);
}

/// A kernel that copies what `__FILE__`, `__LINE__`, `__DATE__`, `__TIME__` and
/// `__TIMESTAMP__` expand to into its output, under `symbol` (with an `assert`, whose
/// message names the file, if `assert` is set).
fn environment_observer(symbol: &str, assert: bool) -> Source {
    let (include, check) = if assert {
        ("#include <assert.h>", "assert(n > 0);")
    } else {
        ("", "")
    };
    let text = format!(
        "#include <string.h>\n{include}\n\
         void {symbol}(uint8_t *out) {{\n\
           static const char s[] = __FILE__ \"|\" __DATE__ \"|\" __TIME__ \"|\" __TIMESTAMP__;\n\
           size_t n = strlen(s) < 255 ? strlen(s) : 255;\n\
           memcpy(out, s, n); out[n] = 0; out[256] = (uint8_t)__LINE__;\n\
           {check}\n\
         }}"
    );
    Source::new(
        text,
        Signature::new().buffer_mut("out", Elem::U8, Extent::fixed(257)),
    )
}

/// Two kernels with equal keys compile to the same code wherever and under whichever
/// symbol they are compiled: what the predefined macros that observe the compile's file
/// name and time expand to is the same (the gcc object-code oracle found `assert`'s
/// `__FILE__` in `.rodata` differing between two compiles of one text).
#[test]
fn file_and_time_macros_do_not_depend_on_where_or_when() {
    let names = Names::new();
    let run = |b: &CcBackend, symbol: &str, assert: bool| {
        let source = environment_observer(symbol, assert);
        let program = Arc::new(b.compile_program(&[(symbol, &source)], &[]).unwrap());
        let mut out = [0u8; 257];
        program
            .kernel(symbol)
            .unwrap()
            .call(&mut [Arg::U8Mut(&mut out)])
            .unwrap();
        out
    };
    let key = |b: &CcBackend, symbol: &str, assert: bool| {
        environment_observer(symbol, assert).key(symbol, &names, &[], b.identity())
    };
    let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let a = backend().with_work_dir(dir_a.path());
    let b = backend().with_work_dir(dir_b.path());
    // Renamed twins (the segment index differs) in two directories share a key...
    assert_eq!(key(&a, "step__seg1", false), key(&b, "step__seg6", false));
    let one = run(&a, "step__seg1", false);
    let shown =
        String::from_utf8_lossy(&one[..one.iter().position(|&c| c == 0).unwrap()]).into_owned();
    // ...and compute the same bytes.
    assert_eq!(one, run(&b, "step__seg6", false), "{shown}");
    assert!(shown.starts_with("kernel.c|"), "{shown}");
    assert!(shown.contains("1970"), "{shown}");
    // With `assert` (which observes the function's name) only the same symbol shares a
    // key; in two directories it computes the same bytes too.
    assert_ne!(key(&a, "step__seg1", true), key(&a, "step__seg6", true));
    assert_eq!(key(&a, "step__seg1", true), key(&b, "step__seg1", true));
    assert_eq!(run(&a, "step__seg1", true), run(&b, "step__seg1", true));
    // Compiled again a second later: the same bytes (the time is not the real time).
    std::thread::sleep(std::time::Duration::from_millis(1100));
    assert_eq!(run(&a, "step__seg1", false), one);
}

/// A malformed signature is refused where the kernel is built (`Source::try_new`,
/// `Signature::checked`), naming the parameter at fault; built unchecked
/// (`Source::new`), the backend still refuses it before compiling.
#[test]
fn malformed_signatures_are_refused_when_built_and_again_at_compile() {
    let text = "void k(float *out, int n) { for (int i = 0; i < n; ++i) out[i] = 0; }";
    let out = |extent: Extent| Signature::new().buffer_mut("out", Elem::F32, extent);
    let cases = [
        (out(Extent::of("m")).scalar("n", Elem::I32), "`m`"),
        (out(Extent::of("n")).scalar("n", Elem::F32), "`n`"),
        (out(Extent::fixed(4)).scalar("out", Elem::I32), "`out`"),
        (
            out(Extent::fixed(4)).scalar("n n", Elem::I32),
            "parameter 1",
        ),
    ];
    for (sig, named) in cases {
        let built = Source::try_new(text, sig.clone()).unwrap_err();
        assert!(
            matches!(built, CcError::InvalidSignature(ref why) if why.contains(named)),
            "{built}"
        );
        let checked = sig.clone().checked().unwrap_err();
        assert_eq!(checked.to_string(), built.to_string());
        let compiled = backend()
            .compile_program(&[("k", &Source::new(text, sig))], &[])
            .unwrap_err();
        assert_eq!(compiled.to_string(), built.to_string());
    }
    let good = out(Extent::of("n")).scalar("n", Elem::I32);
    let source = Source::try_new(text, good.clone().checked().unwrap()).unwrap();
    assert_eq!(source, Source::new(text, good));
}
