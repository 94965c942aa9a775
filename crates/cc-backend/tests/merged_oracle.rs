//! The merged unit and the link against their oracle: **a kernel compiled in a program
//! computes bit for bit what it computes in a program of its own, and a kernel that fails
//! alone fails beside its companions** (a program of one kernel is never merged: its own
//! unit is the reference).
//!
//! A generator writes programs of 2 to 70 kernels mixing what may be merged (block-scope
//! statics, typedefs, tags and enumerators of the same names in every kernel, `__LINE__`
//! and `__FILE__` at varying lines, braces and companion names inside string literals,
//! `<math.h>` calls, realistic kernels) with what must not reach a companion, drawn from
//! the classes of issue 35:
//!
//! - directives and file-scope state: `#define expf exp`, `#pragma pack(1)`, `#pragma GCC
//!   optimize`, a file-scope object of a shared name, a block-scope variable named like a
//!   companion;
//! - text the compiler reads otherwise than a naive rule (class 1): `// \` and blanks
//!   splicing a `/*` away before a `_Pragma`, a lone `\r` ending a line comment before a
//!   definition of `expf` or a `_Pragma`, a text ending in a backslash;
//! - the prelude's macro table (class 2): glibc's `__glibc_macro_warning1` expanding to
//!   `pack`, `redefine_extname`, `scalar_storage_order` and `clang optimize` pragmas, its
//!   `__REDIRECT_NTH` asm label;
//! - block-scope redeclarations (class 3): `frexpf` made `const` by `__attribute_const__`,
//!   `atoi` given another return type before a companion's undeclared call (with `extern`,
//!   without, and through a function typedef: `F atoi;`);
//! - external definitions (class 4): a non-`static` `expf`, a tentative definition of a
//!   shared name (a common symbol under `-fcommon`), a `common` attribute, an entry of a
//!   named section the link gathers (read through `__start_`/`__stop_`);
//! - references to companions (class 5): a call of an earlier kernel or of its generated
//!   entry, weak references to a companion or its entry, a call of a function nothing
//!   defines;
//!
//! and subjects that show them (struct sizes, `expf` and `frexpf` results, `atoi("1000")`,
//! a union's first byte, a reduction under `-ffast-math`). Programs are compiled under no
//! option, `-ffast-math`, `-fcommon` or `-flto` (the link makes every unit's code at once).
//!
//! Each program is resolved per kernel (`Resolver::resolve`, a fresh `KernelCache`), each kernel
//! compiled alone (`compile_program`), and every kernel run on the same inputs in both, in
//! kernel order: equal bits, or a failure in both; anything else is a violation. The
//! merged units compiled and the kernels failing alone are counted and printed.
//!
//! Deliberately naive variants, written here without the library's help, must be caught
//! by the same comparison: the naive merge (one `Source` whose text is every companion's
//! text followed by the kernel's: one translation unit) and the naive link (the
//! companions' own objects, compiled by `cc -c`, given to the kernel's link as inputs, as
//! a link without isolation would).
//!
//! `KCACHE_MERGED_ORACLE_PROGRAMS` (default 3) sets the number of programs,
//! `KCACHE_SOUNDNESS_SEED` the seed; `cargo xtask soundness --cases N` runs N / 10 of them.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use cc_backend::{Arg, CcBackend, CcProgram, Kernel, Signature, Source};
use kernel_cache::{KernelCache, Names, Resolver};
use test_support::Rng;
use test_support::kernels::realistic_kernel;

const HEAD: &str = "(float *out, const float *a, const float *b, int n)";

/// What a kernel carries besides its body: text before its definition, statements before
/// and after its body, text after its definition (the definition's closing brace is
/// followed by nothing else, not even a line end, when it ends in a backslash).
#[derive(Default)]
struct Carry {
    before: String,
    prefix: String,
    suffix: String,
    after: String,
}

/// One kernel's text: `symbol`'s definition, sometimes with something before it, inside it
/// or after it that must never reach a companion. `companion` names another kernel of the
/// program, `earlier` one of a lower position (so that calls between kernels never cycle).
fn kernel(rng: &mut Rng, symbol: &str, companion: &str, earlier: Option<&str>) -> String {
    let c = rng.range(1, 9);
    let lines = "\n".repeat(rng.below(4usize));
    let piece = |rng: &mut Rng| -> String {
        match rng.below(14u32) {
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
            8 => "for (int i = 0; i < n; ++i) { int e = 7; (void)frexpf(a[i], &e); out[i] = (float)e + b[i]; }"
                .to_string(),
            9 => "for (int i = 0; i < n; ++i) out[i] = a[i] + (float)atoi(\"1000\");".to_string(),
            10 => "for (int i = 0; i < n; ++i) { union { struct { int x; } s; unsigned char c[4]; } u; \
                   u.s.x = (int)(a[i] * 100.0f); out[i] = (float)u.c[0]; }"
                .to_string(),
            11 => "float s = 0.0f; for (int i = 0; i < n; ++i) s += a[i] / (b[i] + 0.37f); \
                   for (int i = 0; i < n; ++i) out[i] = s;"
                .to_string(),
            12 => "for (int i = 0; i < n; ++i) out[i] = expf(a[i] * 0.125f) - b[i];".to_string(),
            _ => String::new(),
        }
    };
    if rng.below(4u32) == 0 {
        return realistic_kernel(symbol, rng.next_u64() % 100_000);
    }
    let mut body = piece(rng);
    if body.is_empty() {
        body = "for (int i = 0; i < n; ++i) out[i] = a[i] + b[i];".to_string();
    }
    let s = |x: &str| x.to_string();
    let mut carry = Carry::default();
    // What must stay in this kernel's unit, a little more often than one time in two.
    match rng.below(48u32) {
        0 => carry.before = s("#define expf exp\n#define sqrtf(x) (x)\n"),
        1 => carry.before = s("#pragma pack(1)\n"),
        2 => carry.before = s("#pragma GCC optimize(\"O0\")\n"),
        3 => carry.before = format!("static float acc = {c}.5f;\n"),
        4 => carry.before = s("typedef double T;\nstruct S { T x; };\n"),
        5 => carry.prefix = format!("float {companion} = 2.0f; (void){companion}; "),
        6 => carry.before = s("#define SCALE 3.0f\n"),
        // Class 1: text the compiler reads otherwise.
        7 => carry.after = s("\n// \\  \n/*\n_Pragma(\"pack(1)\")\n// */\n"),
        8 => carry.after = s(" // fast\rfloat expf(float x) { return x + 1.0f; }\n"),
        9 => carry.after = s(" //\r_Pragma(\"redefine_extname expf sinf\")\n"),
        10 => carry.after = s(" //\\"),
        // Class 2: the prelude's macros.
        11 => carry.prefix = s("__glibc_macro_warning1(pack(1)) "),
        12 => carry.prefix = s("__glibc_macro_warning1(redefine_extname expf sinf) "),
        13 => carry.prefix = s("__glibc_macro_warning1(scalar_storage_order big-endian) "),
        14 => carry.prefix = s("__glibc_macro_warning1(clang optimize off) "),
        15 => carry.prefix = s("extern float __REDIRECT_NTH(expf, (float), sinf); "),
        // Class 3: block-scope redeclarations.
        16 => carry.prefix = s("extern float frexpf(float, int *) __attribute_const__; "),
        17 => carry.prefix = s("extern unsigned char atoi(); "),
        27 => carry.prefix = s("unsigned char atoi(); "),
        28 => carry.prefix = s("typedef unsigned char F(); F atoi; "),
        // Class 4: external definitions.
        18 => carry.before = s("float expf(float x) { return 1.0f + x; }\n"),
        19 => {
            carry.before = s("float kcache_shared;\n");
            carry.suffix = s("kcache_shared += 1.0f; if (n > 0) out[0] += kcache_shared;");
        }
        // Class 5: references to companions.
        20 => {
            if let Some(e) = earlier {
                carry.before = format!("void {e}{HEAD};\n");
                carry.prefix = format!("{e}(out, a, b, n); ");
            }
        }
        21 => {
            carry.before = format!("#pragma weak {companion}\nvoid {companion}{HEAD};\n");
            carry.suffix = format!("if (n > 0) out[0] += ({companion} ? 1.0f : 0.0f);");
        }
        22 => {
            if let Some(e) = earlier {
                carry.before = format!("void {e}__kcache_entry(void *const *);\n");
                carry.prefix = format!(
                    "{{ void *args[4] = {{ out, (void *)a, (void *)b, &n }}; {e}__kcache_entry(args); }} "
                );
            }
        }
        23 => {
            carry.before = format!(
                "#pragma weak {companion}__kcache_entry\nvoid {companion}__kcache_entry(void *const *);\n"
            );
            carry.suffix =
                format!("if (n > 0) out[0] += ({companion}__kcache_entry ? 1.0f : 0.0f);");
        }
        25 => {
            carry.before = s("float kcache_common __attribute__((common));\n");
            carry.suffix = s("kcache_common += 1.0f; if (n > 0) out[0] += kcache_common;");
        }
        26 => {
            carry.before = format!(
                "static const float kcache_set_{symbol} __attribute__((section(\"kcache_set\"), used)) = {c}.0f;\n\
                 extern const float __start_kcache_set[], __stop_kcache_set[];\n"
            );
            carry.suffix = s(
                "{ float s = 0.0f; for (const float *p = __start_kcache_set; p < __stop_kcache_set; ++p) s += *p; \
                 if (n > 0) out[0] += s; }",
            );
        }
        24 => {
            carry.before = s("void kcache_missing_fn(void);\n");
            carry.prefix = s("kcache_missing_fn(); ");
        }
        _ => {}
    }
    let Carry {
        before,
        prefix,
        suffix,
        after,
    } = carry;
    let end = if after.is_empty() { "\n" } else { "" };
    format!("{before}void {symbol}{HEAD} {{ {prefix}{body} {suffix} }}{after}{end}")
}

/// A generated program: its option list and its kernels.
struct Program {
    options: Vec<String>,
    kernels: Vec<(String, Source)>,
}

/// Program `p` of at most `max` kernels.
fn program(rng: &mut Rng, p: usize, max: usize) -> Program {
    let count = 2 + rng.below(max - 1);
    let symbols: Vec<String> = (0..count).map(|i| format!("k{p}_{i}")).collect();
    let kernels = (0..count)
        .map(|i| {
            let companion = &symbols[(i + 1 + rng.below(count - 1)) % count];
            let earlier = (i > 0).then(|| symbols[rng.below(i)].as_str());
            let text = kernel(rng, &symbols[i], companion, earlier);
            (
                symbols[i].clone(),
                Source::new(text, Signature::out_a_b_n()),
            )
        })
        .collect();
    let options = match rng.below(8u32) {
        0 => vec!["-ffast-math".to_string()],
        1 => vec!["-fcommon".to_string()],
        2 => vec!["-flto".to_string()],
        _ => Vec::new(),
    };
    Program { options, kernels }
}

/// A kernel's outcome: the bits it writes, or why it has no code (first line).
type Outcome = Result<Vec<u32>, String>;

fn first_line(e: &dyn std::fmt::Display) -> String {
    e.to_string().lines().next().unwrap_or("").to_string()
}

fn call(kernel: &Kernel, a: &[f32], b: &[f32]) -> Vec<u32> {
    let mut out = vec![0.0f32; a.len()];
    kernel
        .call(&mut [
            Arg::F32Mut(&mut out),
            Arg::F32(a),
            Arg::F32(b),
            Arg::I32Scalar(a.len() as i32),
        ])
        .unwrap();
    out.iter().map(|x| x.to_bits()).collect()
}

/// Something to compile each kernel of a program beside its companions with: the
/// library, or a naive variant written here.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Variant {
    /// The backend: the program resolved per kernel through a `KernelCache`.
    Backend,
    /// One translation unit: every companion's text, then the kernel's.
    NaiveMerge,
    /// The kernel's own unit linked with the companions' own objects, unisolated.
    NaiveLink,
}

/// Each kernel of `prog` beside its companions, compiled as `variant` says, run in kernel
/// order on `a`, `b`.
fn beside(
    variant: Variant,
    backend: &CcBackend,
    prog: &Program,
    a: &[f32],
    b: &[f32],
) -> Vec<Outcome> {
    match variant {
        Variant::Backend => {
            let names = Names::new().with_bound(["out", "a", "b", "n"]);
            let batch: Vec<_> = prog
                .kernels
                .iter()
                .map(|(symbol, source)| {
                    source.clone().batch_kernel(
                        symbol,
                        &names,
                        prog.options.clone(),
                        backend.identity(),
                    )
                })
                .collect();
            let cache = KernelCache::new(1 << 30);
            let outcomes = Resolver::new(&cache, backend)
                .resolve(&batch)
                .map(|r| r.answers)
                .unwrap();
            outcomes
                .iter()
                .map(|o| match o {
                    Ok(resolved) => Ok(call(&Kernel::from_resolved(resolved).unwrap(), a, b)),
                    Err(e) => Err(first_line(&**e)),
                })
                .collect()
        }
        Variant::NaiveMerge => (0..prog.kernels.len())
            .map(|k| {
                let mut text = String::new();
                for (j, (_, source)) in prog.kernels.iter().enumerate() {
                    if j != k {
                        text.push_str(&source.text);
                        text.push('\n');
                    }
                }
                let (symbol, source) = &prog.kernels[k];
                text.push_str(&source.text);
                let merged = Source::new(text, Signature::out_a_b_n());
                let program = backend.compile_program(&[(symbol, &merged)], &prog.options);
                run_in_owned(program, symbol, a, b)
            })
            .collect(),
        Variant::NaiveLink => {
            // Each companion's own object, as `cc -c` of its prelude and text makes it.
            let dir = tempfile::tempdir().unwrap();
            let objects: Vec<Option<String>> = prog
                .kernels
                .iter()
                .enumerate()
                .map(|(j, (_, source))| {
                    let c = dir.path().join(format!("{j}.c"));
                    let o = dir.path().join(format!("{j}.o"));
                    std::fs::write(&c, format!("{}\n{}\n", source.prelude, source.text)).unwrap();
                    let status = std::process::Command::new(compiler())
                        .args(["-O2", "-fPIC", "-w", "-c", "-o"])
                        .arg(&o)
                        .arg(&c)
                        .args(&prog.options)
                        .status()
                        .unwrap();
                    status.success().then(|| o.display().to_string())
                })
                .collect();
            (0..prog.kernels.len())
                .map(|k| {
                    let mut options = prog.options.clone();
                    options.extend(
                        objects
                            .iter()
                            .enumerate()
                            .filter(|(j, _)| *j != k)
                            .filter_map(|(_, o)| o.clone()),
                    );
                    let (symbol, source) = &prog.kernels[k];
                    let program = backend.compile_program(&[(symbol, source)], &options);
                    run_in_owned(program, symbol, a, b)
                })
                .collect()
        }
    }
}

fn run_in_owned(
    program: Result<CcProgram, cc_backend::CcError>,
    symbol: &str,
    a: &[f32],
    b: &[f32],
) -> Outcome {
    match program {
        Ok(p) => Ok(call(&Arc::new(p).kernel(symbol).unwrap(), a, b)),
        Err(e) => Err(first_line(&e)),
    }
}

/// The compiler command of `$CC` (else `cc`), its first word.
fn compiler() -> String {
    std::env::var("CC")
        .ok()
        .and_then(|c| c.split_whitespace().next().map(str::to_string))
        .unwrap_or_else(|| "cc".to_string())
}

/// What the comparisons found.
#[derive(Debug, Default)]
struct Tally {
    programs: usize,
    kernels: u64,
    merged_units: u64,
    equal: u64,
    failed_in_both: u64,
    /// Answered beside its companions with other bits than alone.
    differs: u64,
    /// Answered beside its companions, failing alone.
    answered_failing_alone: u64,
    /// Failing beside its companions, answered alone.
    failed_answered_alone: u64,
    /// The first violations, described.
    first: Vec<String>,
}

impl Tally {
    /// Kernels answered with code that is not theirs: computing otherwise, or answered
    /// while failing alone.
    fn wrong_answers(&self) -> u64 {
        self.differs + self.answered_failing_alone
    }

    fn violations(&self) -> u64 {
        self.differs + self.answered_failing_alone + self.failed_answered_alone
    }
}

/// Runs the oracle over `programs` generated programs (of at most `max` kernels) from
/// `seed`, each kernel beside its companions as `variant` compiles it against alone.
fn oracle(variant: Variant, backend: &CcBackend, seed: u64, programs: usize, max: usize) -> Tally {
    let mut rng = Rng::new(seed);
    let mut t = Tally::default();
    for p in 0..programs {
        let prog = program(&mut rng, p, max);
        let len = 1 + rng.below(70usize);
        let a: Vec<f32> = (0..len)
            .map(|_| (rng.range(-4000, 4000) as f32) / 97.0)
            .collect();
        let b: Vec<f32> = (0..len)
            .map(|_| (rng.range(-4000, 4000) as f32) / 89.0)
            .collect();
        let m0 = backend.merged_compiles();
        let together = beside(variant, backend, &prog, &a, &b);
        t.merged_units += backend.merged_compiles() - m0;
        t.programs += 1;
        for ((symbol, source), got) in prog.kernels.iter().zip(together) {
            t.kernels += 1;
            let alone = run_in_owned(
                backend.compile_program(&[(symbol, source)], &prog.options),
                symbol,
                &a,
                &b,
            );
            let what = match (&got, &alone) {
                (Ok(x), Ok(y)) if x == y => {
                    t.equal += 1;
                    continue;
                }
                (Err(_), Err(_)) => {
                    t.failed_in_both += 1;
                    continue;
                }
                (Ok(_), Ok(_)) => {
                    t.differs += 1;
                    "computes otherwise than alone".to_string()
                }
                (Ok(_), Err(e)) => {
                    t.answered_failing_alone += 1;
                    format!("is answered beside its companions but fails alone ({e})")
                }
                (Err(e), Ok(_)) => {
                    t.failed_answered_alone += 1;
                    format!("fails beside its companions ({e}) but not alone")
                }
            };
            if t.first.len() < 8 {
                t.first.push(format!(
                    "seed {seed}, program {p} (options {:?}): {symbol} {what}; its text:\n{}",
                    prog.options, source.text
                ));
            }
        }
    }
    t
}

fn seed() -> u64 {
    std::env::var("KCACHE_SOUNDNESS_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64)
        })
}

#[test]
fn kernels_compute_in_a_program_what_they_compute_alone() {
    let programs: usize = std::env::var("KCACHE_MERGED_ORACLE_PROGRAMS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3);
    let seed = seed();
    println!("merged oracle: seed {seed} (KCACHE_SOUNDNESS_SEED), {programs} programs");
    let backend = CcBackend::new().expect("a C compiler is installed");
    let t = oracle(Variant::Backend, &backend, seed, programs, 70);
    println!(
        "merged oracle: {} programs, {} kernels, {} merged units, {} kernels equal to alone, \
         {} failing alone and beside, {} violations",
        t.programs,
        t.kernels,
        t.merged_units,
        t.equal,
        t.failed_in_both,
        t.violations()
    );
    assert_eq!(t.violations(), 0, "{t:#?}\n{}", t.first.join("\n\n"));
    assert!(
        programs < 3 || t.merged_units > 0,
        "the generator must make mergeable programs"
    );
}

/// The most programs a naive variant is run over before it must have been caught, and
/// their most kernels.
const NAIVE_PROGRAMS: usize = 24;
const NAIVE_MAX: usize = 14;

/// Runs the oracle over `variant`, one program at a time (seeds `seed`, `seed + 1`, ...),
/// until it has found a wrong answer (a kernel computing otherwise beside its companions,
/// or answered beside them while failing alone), or [`NAIVE_PROGRAMS`] programs; the tally.
fn until_caught(variant: Variant) -> Tally {
    let seed = seed();
    let backend = CcBackend::new().expect("a C compiler is installed");
    let mut all = Tally::default();
    for i in 0..NAIVE_PROGRAMS as u64 {
        let t = oracle(variant, &backend, seed.wrapping_add(i), 1, NAIVE_MAX);
        all.programs += t.programs;
        all.kernels += t.kernels;
        all.equal += t.equal;
        all.failed_in_both += t.failed_in_both;
        all.differs += t.differs;
        all.answered_failing_alone += t.answered_failing_alone;
        all.failed_answered_alone += t.failed_answered_alone;
        all.first.extend(t.first.into_iter().take(2));
        if all.wrong_answers() > 0 {
            break;
        }
    }
    println!(
        "{variant:?} (seed {seed}): {} programs, {} kernels: {} equal, {} failing in both, \
         {} computing otherwise, {} answered but failing alone, {} failing but answered alone",
        all.programs,
        all.kernels,
        all.equal,
        all.failed_in_both,
        all.differs,
        all.answered_failing_alone,
        all.failed_answered_alone
    );
    all
}

/// The naive merge (every companion's text in the kernel's translation unit) is caught:
/// some kernel computes otherwise beside its companions than alone, or is answered beside
/// them while failing alone (not only failures: a wrong answer).
#[test]
fn the_oracle_catches_a_naive_merge() {
    let t = until_caught(Variant::NaiveMerge);
    assert!(
        t.wrong_answers() > 0,
        "the oracle did not catch the naive merge: {t:#?}"
    );
}

/// The naive link (the companions' own objects linked with the kernel's as they are) is
/// caught the same way.
#[test]
fn the_oracle_catches_a_naive_link() {
    let t = until_caught(Variant::NaiveLink);
    assert!(
        t.wrong_answers() > 0,
        "the oracle did not catch the naive link: {t:#?}"
    );
}
