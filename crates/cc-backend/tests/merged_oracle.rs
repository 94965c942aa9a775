//! The merged unit against its oracle: **a kernel compiled in a program computes bit for
//! bit what it computes in a program of its own** (a program of one kernel is never
//! merged: its own unit is the reference).
//!
//! A generator writes programs of 2 to 70 kernels mixing what may be merged (block-scope
//! statics, typedefs, tags and enumerators of the same names in every kernel, `__LINE__`
//! and `__FILE__` at varying lines, braces and companion names inside string literals,
//! `<math.h>` calls, realistic kernels) with what must not reach a companion if it were
//! merged: `#define expf exp`, `#define sqrtf(x) (x)`, `#pragma pack(1)` before a struct
//! whose size a companion reads, `#pragma GCC optimize`, a file-scope object of a shared
//! name, a block-scope variable named like a companion. Each program is compiled once
//! (merged where the rule allows), each kernel once alone, and every kernel run on the same
//! inputs in both: the results must be equal bit for bit. The merged kernels' share and the
//! merged units compiled are printed.
//!
//! `KCACHE_MERGED_ORACLE_PROGRAMS` (default 3) sets the number of programs,
//! `KCACHE_SOUNDNESS_SEED` the seed; `cargo xtask soundness --cases N` runs N / 10 of them.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use cc_backend::{Arg, CcBackend, CcProgram, Signature, Source, realistic_kernel};
use test_support::Rng;

const HEAD: &str = "(float *out, const float *a, const float *b, int n)";

/// One kernel's text: `symbol`'s definition, sometimes with something before it or inside
/// it that must never reach a companion. `companion` names another kernel of the program.
fn kernel(rng: &mut Rng, symbol: &str, companion: &str) -> String {
    let c = rng.range(1, 9);
    let lines = "\n".repeat(rng.below(4usize));
    let piece = |rng: &mut Rng| -> String {
        match rng.below(9u32) {
            0 => format!(
                "static float acc = {c}.0f; acc += 1.0f; for (int i = 0; i < n; ++i) out[i] = a[i] * acc;"
            ),
            1 => format!(
                "typedef {} T; struct S {{ T x; char c; }}; enum E {{ A = {c} }}; for (int i = 0; i < n; ++i) out[i] = a[i] + (float)sizeof(struct S) + A;",
                ["float", "double", "char", "long"][rng.below(4usize)]
            ),
            2 => format!(
                "{lines}for (int i = 0; i < n; ++i) out[i] = b[i] + (float)__LINE__ + (float)sizeof(__FILE__);"
            ),
            3 => format!(
                "const char *s = \"}} {{ {companion} \"; for (int i = 0; i < n; ++i) out[i] = a[i] + (float)s[0] * {c}.0f;"
            ),
            4 => "for (int i = 0; i < n; ++i) out[i] = expf(a[i] * 0.25f) + sqrtf(b[i] * b[i] + 1.0f);"
                .to_string(),
            5 => format!(
                "struct P {{ char c; int i; }}; for (int i = 0; i < n; ++i) out[i] = a[i] + (float)sizeof(struct P) * {c}.0f;"
            ),
            6 => format!(
                "double t = 0.0; for (int i = 0; i < n; ++i) {{ t += (double)a[i] / {c}.0; out[i] = (float)t; }}"
            ),
            7 => format!(
                "for (int i = 0; i < n; ++i) {{ float x = a[i] - b[i]; out[i] = x > 0.0f ? x : x * 0.{c}f; }}"
            ),
            _ => String::new(),
        }
    };
    if rng.below(3u32) == 0 {
        return realistic_kernel(symbol, rng.next_u64() % 100_000);
    }
    let mut body = piece(rng);
    if body.is_empty() {
        body = "for (int i = 0; i < n; ++i) out[i] = a[i] + b[i];".to_string();
    }
    // What must stay in this kernel's unit, one time in three.
    let (before, extra) = match rng.below(21u32) {
        0 => ("#define expf exp\n#define sqrtf(x) (x)\n".to_string(), ""),
        1 => ("#pragma pack(1)\n".to_string(), ""),
        2 => ("#pragma GCC optimize(\"O0\")\n".to_string(), ""),
        3 => (format!("static float acc = {c}.5f;\n"), ""),
        4 => ("typedef double T;\nstruct S { T x; };\n".to_string(), ""),
        5 => (String::new(), "float "),
        6 => ("#define SCALE 3.0f\n".to_string(), ""),
        _ => (String::new(), ""),
    };
    let extra = if extra.is_empty() {
        String::new()
    } else {
        format!("{extra}{companion} = 2.0f; (void){companion}; ")
    };
    format!("{before}void {symbol}{HEAD} {{ {extra}{body} }}\n")
}

fn call(p: &Arc<CcProgram>, symbol: &str, a: &[f32], b: &[f32]) -> Vec<u32> {
    let mut out = vec![0.0f32; a.len()];
    p.kernel(symbol)
        .unwrap()
        .call(&mut [
            Arg::F32Mut(&mut out),
            Arg::F32(a),
            Arg::F32(b),
            Arg::I32Scalar(a.len() as i32),
        ])
        .unwrap();
    out.iter().map(|x| x.to_bits()).collect()
}

#[test]
fn kernels_compute_in_a_program_what_they_compute_alone() {
    let programs: usize = std::env::var("KCACHE_MERGED_ORACLE_PROGRAMS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3);
    let seed = std::env::var("KCACHE_SOUNDNESS_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64)
        });
    println!("merged oracle: seed {seed} (KCACHE_SOUNDNESS_SEED), {programs} programs");
    let mut rng = Rng::new(seed);
    let backend = CcBackend::new().expect("a C compiler is installed");
    let (mut kernels, mut merged_units, mut alone_units, mut compared) = (0u64, 0, 0, 0u64);
    for p in 0..programs {
        let count = 2 + rng.below(69usize);
        let symbols: Vec<String> = (0..count).map(|i| format!("k{p}_{i}")).collect();
        let sources: Vec<(String, Source)> = (0..count)
            .map(|i| {
                let companion = &symbols[(i + 1 + rng.below(count - 1)) % count];
                let text = kernel(&mut rng, &symbols[i], companion);
                (
                    symbols[i].clone(),
                    Source::new(text, Signature::out_a_b_n()),
                )
            })
            .collect();
        let pairs: Vec<(&str, &Source)> = sources.iter().map(|(s, k)| (s.as_str(), k)).collect();
        let (m0, u0) = (backend.merged_compiles(), backend.units_compiled());
        let together = Arc::new(
            backend
                .compile_program(&pairs, &[])
                .unwrap_or_else(|e| panic!("program {p} (seed {seed}): {e}")),
        );
        merged_units += backend.merged_compiles() - m0;
        alone_units += backend.units_compiled() - u0;
        kernels += count as u64;
        let len = 1 + rng.below(70usize);
        let a: Vec<f32> = (0..len)
            .map(|_| (rng.range(-4000, 4000) as f32) / 97.0)
            .collect();
        let b: Vec<f32> = (0..len)
            .map(|_| (rng.range(-4000, 4000) as f32) / 89.0)
            .collect();
        for (symbol, source) in &pairs {
            let alone = Arc::new(backend.compile_program(&[(symbol, source)], &[]).unwrap());
            assert_eq!(
                call(&together, symbol, &a, &b),
                call(&alone, symbol, &a, &b),
                "seed {seed}, program {p}: {symbol} differs in its program from alone; its text:\n{}",
                source.text
            );
            compared += 1;
        }
    }
    println!(
        "merged oracle: {programs} programs, {kernels} kernels, {merged_units} merged units, \
         {alone_units} own units in programs, {compared} kernels equal to alone, 0 violations"
    );
    assert!(
        programs < 3 || merged_units > 0,
        "the generator must make mergeable programs"
    );
}
