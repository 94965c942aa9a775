//! Isolation by construction (issue 35, classes 1-5): **no companion can change a kernel's
//! code.** Each case is a companion `k_companion` and a subject `k_subject` (both of
//! signature `Signature::out_a_b_n()`), compiled by gcc and by clang as a user would:
//!
//! - `CcBackend::compile_program` of each kernel alone (the reference), then of the pair;
//! - a real `KernelCache` resolving the pair per kernel (`Resolver::resolve`), then the subject
//!   alone again in the pair's cache (the story: every later request for the
//!   subject is a hit answered with the pair's program).
//!
//! The subject (and the companion) must compute bit for bit what it computes in a program
//! of its own, on the same inputs; a subject that fails alone must fail beside the
//! companion too (strict: the program fails naming it; per kernel: it fails alone, naming
//! it, and the companion is still answered and computes its own result). Each case also
//! says which kernels must compile alone ([`Alone`]), so that none passes because
//! everything is refused.
//!
//! The classes, as the issue numbers them:
//! 1. the merge rule reads text differently from the compiler (a backslash and blanks
//!    before a line end in a `//` comment, a lone `\r` ending a line comment, a text
//!    ending in a backslash);
//! 2. pragmas and asm labels through the prelude's glibc macros (`__glibc_macro_warning1`,
//!    `__REDIRECT`), an option's macro, clang's `__pragma`;
//! 3. block-scope redeclarations of prelude functions with an attribute or `_Noreturn`
//!    (checked in a child process: the subject may crash), or typing a companion's
//!    undeclared call (clang);
//! 4. a definition in one text interposing for a companion (a library function, a
//!    tentative definition under `-fcommon` or with the `common` attribute), and what the
//!    link gathers over every object (a named section and its `__start_`/`__stop_`
//!    symbols), or joins again (`-flto`);
//! 5. a kernel referring to a companion kernel's symbols.
//!
//! Plus: a kernel with an undefined reference in a batch of twelve fails alone, naming
//! itself, while the eleven others are answered; and a kernel's raw address still works.
//!
//! Some cases show only with one compiler (clang ignores gcc's `scalar_storage_order`,
//! gcc ignores `clang optimize`); every case runs under both, and a case whose companion
//! is not C for one compiler (clang's `__pragma`) runs under the other only.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use cc_backend::{Arg, CcBackend, CcError, CcProgram, Kernel, Signature, Source};
use kernel_cache::{BatchKernel, KernelCache, KernelError, Names, Resolver};

const HEAD: &str = "(float *out, const float *a, const float *b, int n)";
const COMPANION: &str = "k_companion";
const SUBJECT: &str = "k_subject";
const BOTH: &[&str] = &["gcc", "clang"];

/// The inputs every kernel runs on: 64 elements of varied sign and magnitude (a sum's
/// order shows in its bits).
fn inputs() -> (Vec<f32>, Vec<f32>) {
    let a = (0..64)
        .map(|i| ((i * 37 % 29) as f32 - 14.0) / 3.0 + 1e-3 * i as f32)
        .collect();
    let b = (0..64)
        .map(|i| (i % 5) as f32 / 7.0 + 1e3 * (i % 3) as f32)
        .collect();
    (a, b)
}

/// The bits `kernel` writes on [`inputs`].
fn run(kernel: &Kernel) -> Vec<u32> {
    let (a, b) = inputs();
    let mut out = vec![0.0f32; a.len()];
    kernel
        .call(&mut [
            Arg::F32Mut(&mut out),
            Arg::F32(&a),
            Arg::F32(&b),
            Arg::I32Scalar(a.len() as i32),
        ])
        .unwrap();
    out.iter().map(|x| x.to_bits()).collect()
}

fn run_in(program: &Arc<CcProgram>, symbol: &str) -> Vec<u32> {
    run(&program.kernel(symbol).unwrap())
}

/// An error's display and every source's, one line.
fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut s = e.to_string();
    let mut next = e.source();
    while let Some(cause) = next {
        s.push_str(" <- ");
        s.push_str(&cause.to_string());
        next = cause.source();
    }
    s
}

fn backend(cc: &str) -> CcBackend {
    CcBackend::with_compiler(cc).unwrap_or_else(|e| panic!("{cc} is installed: {e}"))
}

fn batch_kernel(
    backend: &CcBackend,
    symbol: &str,
    text: &str,
    options: &[String],
) -> BatchKernel<Source> {
    Source::new(text, Signature::out_a_b_n()).batch_kernel(
        symbol,
        &Names::new().with_bound(["out", "a", "b", "n"]),
        options.to_vec(),
        backend.identity(),
    )
}

/// `void <symbol>(HEAD) { <body> }`.
fn def(symbol: &str, body: &str) -> String {
    format!("void {symbol}{HEAD} {{ {body} }}")
}

/// A plain companion body: copies `a`.
const COPY: &str = "for (int i = 0; i < n; ++i) out[i] = a[i];";

/// A per-kernel outcome checked against the kernel alone (`Some(bits)`: it computes them
/// alone; `None`: it fails alone). Pushes what is wrong to `v`.
fn check_outcome(
    v: &mut Vec<String>,
    what: &str,
    symbol: &str,
    outcome: &Result<kernel_cache::Resolved<CcProgram>, Arc<KernelError<CcError>>>,
    alone: &Option<Vec<u32>>,
) {
    match (outcome, alone) {
        (Ok(resolved), Some(bits)) => {
            let got = run(&Kernel::from_resolved(resolved).unwrap());
            if &got != bits {
                v.push(format!("{what}: {symbol} computes otherwise than alone"));
            }
        }
        (Ok(_), None) => v.push(format!(
            "{what}: {symbol} fails alone but was answered beside its companion"
        )),
        (Err(e), Some(_)) => v.push(format!(
            "{what}: {symbol} works alone but failed beside its companion: {}",
            chain(&**e)
        )),
        (Err(e), None) => {
            let symbols = e.compile_failure().map(|f| f.symbols.clone());
            if !e.is_alone() || symbols != Some(vec![symbol.to_string()]) {
                v.push(format!(
                    "{what}: {symbol} did not fail alone (symbols {symbols:?}): {}",
                    chain(&**e)
                ));
            }
            if !chain(&**e).contains(symbol) {
                v.push(format!(
                    "{what}: the error does not name {symbol}: {}",
                    chain(&**e)
                ));
            }
        }
    }
}

/// Which kernels of a case must compile in a program of their own, so that a case is never
/// passed by refusing everything.
#[derive(Clone, Copy, PartialEq)]
enum Alone {
    /// Both: plain C the backend has no reason to refuse.
    Both,
    /// The companion; the subject fails alone (it refers to something only a companion has).
    Companion,
    /// Either may be refused (a construct the backend may refuse outright).
    Any,
}

/// Every way the pair (`companion`, `subject`) under `options` may differ from each kernel
/// alone with compiler `cc` (see the module docs); empty when isolated.
fn violations(
    cc: &str,
    companion: &str,
    subject: &str,
    options: &[String],
    alone: Alone,
) -> Vec<String> {
    let backend = backend(cc);
    let (sa, sb) = (
        Source::new(companion, Signature::out_a_b_n()),
        Source::new(subject, Signature::out_a_b_n()),
    );
    let compile_alone = |symbol: &str, source: &Source| {
        backend
            .compile_program(&[(symbol, source)], options)
            .ok()
            .map(|p| run_in(&Arc::new(p), symbol))
    };
    let companion_alone = compile_alone(COMPANION, &sa);
    let subject_alone = compile_alone(SUBJECT, &sb);
    let mut v = Vec::new();
    if alone != Alone::Any && companion_alone.is_none() {
        v.push("the companion does not compile alone".into());
    }
    match alone {
        Alone::Both if subject_alone.is_none() => {
            v.push("the subject does not compile alone".into())
        }
        Alone::Companion if subject_alone.is_some() => {
            v.push("the subject compiles alone (it must not: it refers to a companion)".into())
        }
        _ => {}
    }
    // Strict: one program of both.
    match backend.compile_program(&[(COMPANION, &sa), (SUBJECT, &sb)], options) {
        Ok(p) => {
            let p = Arc::new(p);
            // The companion first: what it leaves behind must not reach the subject.
            match &companion_alone {
                Some(bits) if &run_in(&p, COMPANION) != bits => {
                    v.push("program: the companion computes otherwise than alone".into())
                }
                Some(_) => {}
                None => v.push("program: the companion fails alone but compiled beside".into()),
            }
            match &subject_alone {
                Some(bits) if &run_in(&p, SUBJECT) != bits => {
                    v.push("program: the subject computes otherwise than alone".into())
                }
                Some(_) => {}
                None => v.push("program: the subject fails alone but compiled beside".into()),
            }
        }
        // A strict program fails at its first failing unit: the companion's, if it fails
        // alone too.
        Err(_) if companion_alone.is_none() => {}
        Err(e) => match &subject_alone {
            Some(_) => v.push(format!("program: failed beside, not alone: {}", chain(&e))),
            None if !chain(&e).contains(SUBJECT) => v.push(format!(
                "program: the error does not name {SUBJECT}: {}",
                chain(&e)
            )),
            None => {}
        },
    }
    // Per kernel, through a cache; then the subject alone, in a fresh cache and in this one.
    let cache = KernelCache::new(1 << 30);
    let pair = [
        batch_kernel(&backend, COMPANION, companion, options),
        batch_kernel(&backend, SUBJECT, subject, options),
    ];
    match Resolver::new(&cache, &backend)
        .resolve(&pair)
        .map(|r| r.answers)
    {
        Ok(outcomes) => {
            check_outcome(
                &mut v,
                "resolve_each",
                COMPANION,
                &outcomes[0],
                &companion_alone,
            );
            check_outcome(
                &mut v,
                "resolve_each",
                SUBJECT,
                &outcomes[1],
                &subject_alone,
            );
        }
        Err(e) => v.push(format!("resolve_each refused the batch: {}", chain(&e))),
    }
    let later = Resolver::new(&cache, &backend)
        .resolve(&pair[1..])
        .map(|r| r.answers)
        .unwrap();
    match (&later[0], &subject_alone) {
        (Ok(_), None) | (Err(_), Some(_)) => {
            v.push("a later request for the subject alone, same cache: answered otherwise".into())
        }
        (Ok(r), Some(bits)) if &run(&Kernel::from_resolved(r).unwrap()) != bits => {
            v.push("a later request for the subject alone, same cache: computes otherwise".into())
        }
        _ => {}
    }
    v
}

/// Panics listing every violation of the pair under each compiler of `compilers`; both
/// kernels must compile alone.
fn assert_isolated(compilers: &[&str], companion: &str, subject: &str, options: &[&str]) {
    assert_isolated_as(compilers, companion, subject, options, Alone::Both);
}

/// [`assert_isolated`] where `alone` says which kernels must compile alone.
fn assert_isolated_as(
    compilers: &[&str],
    companion: &str,
    subject: &str,
    options: &[&str],
    alone: Alone,
) {
    let options: Vec<String> = options.iter().map(|o| o.to_string()).collect();
    let mut all = Vec::new();
    for cc in compilers {
        for violation in violations(cc, companion, subject, &options, alone) {
            all.push(format!("{cc}: {violation}"));
        }
    }
    assert!(
        all.is_empty(),
        "the companion changes the subject:\n{}\n--- companion:\n{companion}\n--- subject:\n{subject}",
        all.join("\n")
    );
}

/// A subject whose result shows struct packing: `sizeof(struct { char; int; })`.
fn packing_subject() -> String {
    def(
        SUBJECT,
        "struct P { char c; int i; }; for (int i = 0; i < n; ++i) out[i] = a[i] + (float)sizeof(struct P);",
    )
}

/// A subject calling `expf`.
fn expf_subject() -> String {
    def(
        SUBJECT,
        "for (int i = 0; i < n; ++i) out[i] = expf(a[i] * 0.25f);",
    )
}

// ---- Class 1: the merge rule reads text differently from the compiler. ----

/// `// \` followed by blanks splices the next line into the comment for the compiler, not
/// for a rule that splices only `\` right before the line end: the `/*` the rule sees
/// opening a comment is swallowed, and `_Pragma("pack(1)")` is at file scope.
#[test]
fn c1_a_backslash_and_blanks_in_a_line_comment_hide_a_pragma() {
    let companion = format!(
        "{}\n// \\  \n/*\n_Pragma(\"pack(1)\")\n// */\n",
        def(COMPANION, COPY)
    );
    assert_isolated(BOTH, &companion, &packing_subject(), &[]);
}

/// A lone `\r` ends a line comment for the compiler: what follows it on the "line" is a
/// file-scope definition of `expf` the subject's calls bind to.
#[test]
fn c1_a_lone_carriage_return_ends_a_line_comment_before_a_library_definition() {
    let companion = format!(
        "{} // fast\rfloat expf(float x) {{ return x + 1.0f; }}\n",
        def(COMPANION, COPY)
    );
    assert_isolated(BOTH, &companion, &expf_subject(), &[]);
}

/// A text ending in a backslash splices into the line after it: in a unit of several
/// texts, the next text's `#line 1` directive, so its `__LINE__` is no longer its own.
#[test]
fn c1_a_text_ending_in_a_backslash_swallows_the_next_line_directive() {
    let companion = format!("{} //\\", def(COMPANION, COPY));
    let subject = def(
        SUBJECT,
        "for (int i = 0; i < n; ++i) out[i] = a[i] + (float)__LINE__;",
    );
    assert_isolated(BOTH, &companion, &subject, &[]);
}

/// A lone `\r` ending a line comment hides `_Pragma("redefine_extname expf sinf")` from
/// the rule: the subject's `expf` calls `sinf`.
#[test]
fn c1_a_lone_carriage_return_hides_redefine_extname() {
    let companion = format!(
        "{} //\r_Pragma(\"redefine_extname expf sinf\")\n",
        def(COMPANION, COPY)
    );
    assert_isolated(BOTH, &companion, &expf_subject(), &[]);
}

// ---- Class 2: pragmas and asm labels through the prelude's macros. ----

/// glibc's `__glibc_macro_warning1(x)` expands to `_Pragma(#x)`: `pack(1)` packs every
/// later struct of the unit.
#[test]
fn c2_a_glibc_macro_expanding_to_a_pack_pragma() {
    let companion = def(
        COMPANION,
        &format!("__glibc_macro_warning1(pack(1)) {COPY}"),
    );
    assert_isolated(BOTH, &companion, &packing_subject(), &[]);
}

/// `redefine_extname expf sinf` through the same macro: the subject's `expf` calls `sinf`.
#[test]
fn c2_a_glibc_macro_expanding_to_redefine_extname() {
    let companion = def(
        COMPANION,
        &format!("__glibc_macro_warning1(redefine_extname expf sinf) {COPY}"),
    );
    assert_isolated(BOTH, &companion, &expf_subject(), &[]);
}

/// gcc's `scalar_storage_order big-endian`: the subject's union sees the other byte first.
#[test]
fn c2_a_glibc_macro_expanding_to_scalar_storage_order() {
    let companion = def(
        COMPANION,
        &format!("__glibc_macro_warning1(scalar_storage_order big-endian) {COPY}"),
    );
    let subject = def(
        SUBJECT,
        "for (int i = 0; i < n; ++i) { union { struct { int x; } s; unsigned char c[4]; } u; \
         u.s.x = (int)(a[i] * 100.0f); out[i] = (float)u.c[0]; }",
    );
    assert_isolated(BOTH, &companion, &subject, &[]);
}

/// clang's `clang optimize off`: the subject's reduction is no longer vectorized (under
/// `-ffast-math`, so the sum's order, and its bits, change).
#[test]
fn c2_a_glibc_macro_expanding_to_clang_optimize_off() {
    let companion = def(
        COMPANION,
        &format!("__glibc_macro_warning1(clang optimize off) {COPY}"),
    );
    let subject = def(
        SUBJECT,
        "float s = 0.0f; for (int i = 0; i < n; ++i) s += a[i] / (b[i] + 0.37f); \
         for (int i = 0; i < n; ++i) out[i] = s;",
    );
    assert_isolated(BOTH, &companion, &subject, &["-ffast-math"]);
}

/// glibc's `__REDIRECT(expf, (float), sinf)` is `expf (float) __asm__ ("sinf")`: a
/// block-scope redeclaration with an asm label renames the subject's `expf` calls.
#[test]
fn c2_a_glibc_asm_label_macro_renames_a_library_call() {
    let companion = def(
        COMPANION,
        &format!("extern float __REDIRECT_NTH(expf, (float), sinf); {COPY}"),
    );
    assert_isolated(BOTH, &companion, &expf_subject(), &[]);
}

/// clang's `__pragma(x)` under `-fms-extensions` (gcc has no such operator: the companion
/// is not C there).
#[test]
fn c2_clangs_pragma_operator_under_ms_extensions() {
    let companion = def(COMPANION, &format!("__pragma(pack(1)) {COPY}"));
    assert_isolated(
        &["clang"],
        &companion,
        &packing_subject(),
        &["-fms-extensions"],
    );
}

/// A function-like macro of the options (`-DPACK(x)=...`, no `#` nor `_Pragma` spelled)
/// expanding to glibc's pragma macro.
#[test]
fn c2_an_option_macro_expanding_to_a_pragma() {
    let companion = def(COMPANION, &format!("PACK(pack(1)) {COPY}"));
    assert_isolated(
        BOTH,
        &companion,
        &packing_subject(),
        &["-DPACK(x)=__glibc_macro_warning1(x)"],
    );
}

// ---- Class 3: block-scope redeclarations reach the file-scope entity. ----

/// A subject whose result shows whether `frexpf` ran: its exponent, or 7 if the call was
/// dropped (a `const` function's unused result).
fn frexpf_subject() -> String {
    def(
        SUBJECT,
        "for (int i = 0; i < n; ++i) { int e = 7; (void)frexpf(a[i], &e); out[i] = (float)e; }",
    )
}

/// glibc's `__attribute_const__` on a block-scope redeclaration of `frexpf`: the subject's
/// call, whose result it ignores, is dropped.
#[test]
fn c3_a_block_scope_redeclaration_with_a_glibc_attribute_macro() {
    let companion = def(
        COMPANION,
        &format!("extern float frexpf(float, int *) __attribute_const__; {COPY}"),
    );
    assert_isolated(BOTH, &companion, &frexpf_subject(), &[]);
}

/// The same with `[[gnu::const]]` (C2x attribute syntax).
#[test]
fn c3_a_block_scope_redeclaration_with_a_standard_attribute() {
    let companion = def(
        COMPANION,
        &format!("[[gnu::const]] extern float frexpf(float, int *); {COPY}"),
    );
    assert_isolated(BOTH, &companion, &frexpf_subject(), &["-std=gnu2x"]);
}

/// With clang, a later undeclared call (`atoi`, not declared by the prelude) takes the type
/// of a companion's block-scope redeclaration: `unsigned char`, so 1000 reads 232.
#[test]
fn c3_an_undeclared_call_takes_a_companions_block_scope_redeclaration() {
    let companion = def(COMPANION, &format!("extern unsigned char atoi(); {COPY}"));
    let subject = def(
        SUBJECT,
        "for (int i = 0; i < n; ++i) out[i] = a[i] + (float)atoi(\"1000\");",
    );
    assert_isolated(BOTH, &companion, &subject, &[]);
}

/// The same without the word `extern`: a block-scope function declaration needs none.
#[test]
fn c3_a_block_scope_declaration_without_extern_types_an_undeclared_call() {
    let companion = def(COMPANION, &format!("unsigned char atoi(); {COPY}"));
    let subject = def(
        SUBJECT,
        "for (int i = 0; i < n; ++i) out[i] = a[i] + (float)atoi(\"1000\");",
    );
    assert_isolated(BOTH, &companion, &subject, &[]);
}

/// The same through a block-scope typedef of a function type: `F atoi;` declares a
/// function, with no parenthesis after its name.
#[test]
fn c3_a_block_scope_declaration_through_a_function_typedef() {
    let companion = def(
        COMPANION,
        &format!("typedef unsigned char F(); F atoi; {COPY}"),
    );
    let subject = def(
        SUBJECT,
        "for (int i = 0; i < n; ++i) out[i] = a[i] + (float)atoi(\"1000\");",
    );
    assert_isolated(BOTH, &companion, &subject, &[]);
}

/// `_Noreturn` on a block-scope redeclaration of `expf`: gcc drops what follows the
/// subject's `expf` call (its loop, its return), so the subject runs into whatever code
/// comes next. The pair is checked in a child process (this test binary re-run), whose
/// crash is a violation like any other.
#[test]
fn c3_a_block_scope_noreturn_redeclaration() {
    const CHILD: &str = "KCACHE_ISOLATION_NORETURN_CHILD";
    if std::env::var_os(CHILD).is_some() {
        let companion = def(
            COMPANION,
            &format!("extern _Noreturn float expf(float); {COPY}"),
        );
        assert_isolated(BOTH, &companion, &expf_subject(), &[]);
        println!("CHILD isolated");
        return;
    }
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "c3_a_block_scope_noreturn_redeclaration",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD, "1")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("CHILD isolated"),
        "the pair's child failed ({}):\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

// ---- Class 4: a definition in one text interposes for every kernel of the program. ----

/// A renderer's fast `expf`, defined (not `static`) in the companion's own unit: linked
/// into the shared object, it serves the subject's `expf` calls.
#[test]
fn c4_a_library_function_defined_by_a_companion_interposes() {
    let companion = format!(
        "float expf(float x) {{ return 1.0f + x; }}\n{}",
        def(
            COMPANION,
            "for (int i = 0; i < n; ++i) out[i] = expf(a[i]);"
        )
    );
    assert_isolated(BOTH, &companion, &expf_subject(), &[]);
}

/// Tentative definitions of one name under `-fcommon` are common symbols, which the link
/// merges into one object: the companion's write reaches the subject. (`objcopy
/// --keep-global-symbol` leaves common symbols global: localizing defined symbols does not
/// cover them.)
#[test]
fn c4_common_symbols_of_one_name_are_one_object() {
    let companion = format!(
        "float kcache_shared;\n{}",
        def(COMPANION, &format!("kcache_shared = 3.0f; {COPY}"))
    );
    let subject = format!(
        "float kcache_shared;\n{}",
        def(
            SUBJECT,
            "for (int i = 0; i < n; ++i) out[i] = a[i] + kcache_shared;"
        )
    );
    assert_isolated_as(BOTH, &companion, &subject, &["-fcommon"], Alone::Any);
}

/// The same without `-fcommon`: the `common` attribute makes a common symbol under the
/// compilers' default `-fno-common` too (a link-level isolation must allocate or refuse
/// common symbols, `ld -r -d` allocates them, before making symbols local).
#[test]
fn c4_common_attribute_symbols_of_one_name_are_one_object() {
    let companion = format!(
        "float kcache_shared __attribute__((common));\n{}",
        def(COMPANION, &format!("kcache_shared = 3.0f; {COPY}"))
    );
    let subject = format!(
        "float kcache_shared __attribute__((common));\n{}",
        def(
            SUBJECT,
            "for (int i = 0; i < n; ++i) out[i] = a[i] + kcache_shared;"
        )
    );
    assert_isolated_as(BOTH, &companion, &subject, &[], Alone::Any);
}

/// A named section is gathered across the program's objects, and the link defines
/// `__start_<section>` and `__stop_<section>` over all of it: the subject, summing its own
/// section's entries, also sums the companion's (no symbol of the companion is referred to,
/// so making symbols local does not separate them).
#[test]
fn c4_a_named_section_is_gathered_across_kernels() {
    let entry = |value: &str| {
        format!(
            "static const float entry_{value} __attribute__((section(\"kcache_set\"), used)) = {value}.0f;\n"
        )
    };
    let companion = format!("{}{}", entry("5"), def(COMPANION, COPY));
    let subject = format!(
        "{}extern const float __start_kcache_set[], __stop_kcache_set[];\n{}",
        entry("1"),
        def(
            SUBJECT,
            "float s = 0.0f; for (const float *p = __start_kcache_set; p < __stop_kcache_set; ++p) s += *p; \
             for (int i = 0; i < n; ++i) out[i] = a[i] + s;"
        )
    );
    assert_isolated_as(BOTH, &companion, &subject, &[], Alone::Any);
}

/// Under `-flto` the objects hold the compiler's intermediate code and the code is made at
/// the link, over every unit at once: a library function defined by the companion serves
/// the subject again, whatever was done to the objects' symbol tables (gcc's slim LTO
/// objects keep their own symbol table; clang's are bitcode, which objcopy does not read).
#[test]
fn c4_link_time_optimization_joins_the_units_again() {
    let companion = format!(
        "float expf(float x) {{ return 1.0f + x; }}\n{}",
        def(
            COMPANION,
            "for (int i = 0; i < n; ++i) out[i] = expf(a[i]);"
        )
    );
    assert_isolated_as(BOTH, &companion, &expf_subject(), &["-flto"], Alone::Any);
}

// ---- Class 5: a kernel referring to a companion kernel. ----

/// The subject calls the companion kernel: alone it does not link (nor load), so beside
/// it, it must fail too, alone, naming itself; the companion is still answered.
#[test]
fn c5_a_kernel_calling_a_companion_kernel_fails_alone() {
    let subject = format!(
        "void {COMPANION}{HEAD};\n{}",
        def(
            SUBJECT,
            &format!("{COMPANION}(out, a, b, n); for (int i = 0; i < n; ++i) out[i] += 1.0f;")
        )
    );
    assert_isolated_as(BOTH, &def(COMPANION, COPY), &subject, &[], Alone::Companion);
}

/// A weak reference to the companion kernel: null alone, so null beside it too.
#[test]
fn c5_a_weak_reference_to_a_companion_kernel_stays_null() {
    let subject = format!(
        "#pragma weak {COMPANION}\nvoid {COMPANION}{HEAD};\n{}",
        def(
            SUBJECT,
            &format!("for (int i = 0; i < n; ++i) out[i] = a[i] + ({COMPANION} ? 1.0f : 0.0f);")
        )
    );
    assert_isolated(BOTH, &def(COMPANION, COPY), &subject, &[]);
}

/// A call of the companion's generated entry (`<symbol>__kcache_entry`, which the program
/// must export for the loader): alone it does not link, so beside it, it must fail too.
#[test]
fn c5_a_kernel_calling_a_companions_entry_fails_alone() {
    let subject = format!(
        "void {COMPANION}__kcache_entry(void *const *);\n{}",
        def(
            SUBJECT,
            &format!(
                "void *args[4] = {{ out, (void *)a, (void *)b, &n }}; {COMPANION}__kcache_entry(args); \
                 for (int i = 0; i < n; ++i) out[i] += 1.0f;"
            )
        )
    );
    assert_isolated_as(BOTH, &def(COMPANION, COPY), &subject, &[], Alone::Companion);
}

/// A weak reference to the companion's entry: null alone, so null beside it too.
#[test]
fn c5_a_weak_reference_to_a_companions_entry_stays_null() {
    let subject = format!(
        "#pragma weak {COMPANION}__kcache_entry\nvoid {COMPANION}__kcache_entry(void *const *);\n{}",
        def(
            SUBJECT,
            &format!(
                "for (int i = 0; i < n; ++i) out[i] = a[i] + ({COMPANION}__kcache_entry ? 1.0f : 0.0f);"
            )
        )
    );
    assert_isolated_as(BOTH, &def(COMPANION, COPY), &subject, &[], Alone::Any);
}

// ---- A kernel with an undefined reference in a batch of twelve. ----

/// Kernel `j` of the batch: `out[i] = a[i] * (j + 1) + b[i]`.
fn good(j: usize) -> String {
    def(
        &format!("k{j}"),
        &format!(
            "for (int i = 0; i < n; ++i) out[i] = a[i] * {}.0f + b[i];",
            j + 1
        ),
    )
}

/// Twelve kernels, one of which (`bad`) calls a function nothing defines, resolved per
/// kernel (whole and split, gcc and clang): the bad one fails alone, naming itself (and
/// the missing function); the eleven are answered and compute their own results.
/// `declared`: the missing function is declared at file scope (the kernel has a unit of
/// its own); otherwise it is called undeclared in a text the merge rule accepts.
fn undefined_reference_in_a_batch_of_twelve(declared: bool) {
    const BAD: usize = 5;
    const MISSING: &str = "kcache_test_missing_fn";
    let (a, b) = inputs();
    for cc in BOTH {
        let backend = backend(cc);
        let batch: Vec<BatchKernel<Source>> = (0..12)
            .map(|j| {
                let text = if j != BAD {
                    good(j)
                } else if declared {
                    format!(
                        "void {MISSING}(float *, int);\n{}",
                        def("k5", &format!("{MISSING}(out, n);"))
                    )
                } else {
                    def("k5", &format!("{MISSING}(out, n);"))
                };
                batch_kernel(&backend, &format!("k{j}"), &text, &[])
            })
            .collect();
        for (how, outcomes) in [
            (
                "resolve_each",
                Resolver::new(&KernelCache::new(1 << 30), &backend)
                    .resolve(&batch)
                    .map(|r| r.answers),
            ),
            (
                "resolve_split_each",
                Resolver::new(&KernelCache::new(1 << 30), &backend)
                    .split(backend.split())
                    .resolve(&batch)
                    .map(|r| r.answers),
            ),
        ] {
            let outcomes = outcomes.unwrap_or_else(|e| panic!("{cc} {how}: {}", chain(&e)));
            for (j, outcome) in outcomes.iter().enumerate() {
                if j == BAD {
                    let e = outcome.as_ref().err().unwrap_or_else(|| {
                        panic!("{cc} {how}: k5 calls an undefined function but was answered")
                    });
                    let text = chain(&**e);
                    assert!(e.is_alone(), "{cc} {how}: k5 did not fail alone: {text}");
                    assert_eq!(
                        e.compile_failure().unwrap().symbols,
                        ["k5"],
                        "{cc} {how}: {text}"
                    );
                    assert!(
                        text.contains("k5") && text.contains(MISSING),
                        "{cc} {how}: the error names neither k5 nor {MISSING}: {text}"
                    );
                    continue;
                }
                let resolved = outcome.as_ref().unwrap_or_else(|e| {
                    panic!("{cc} {how}: k{j} failed beside k5: {}", chain(&**e))
                });
                let want: Vec<u32> = a
                    .iter()
                    .zip(&b)
                    .map(|(x, y)| (x * (j + 1) as f32 + y).to_bits())
                    .collect();
                assert_eq!(
                    run(&Kernel::from_resolved(resolved).unwrap()),
                    want,
                    "{cc} {how}: k{j}"
                );
            }
        }
    }
}

#[test]
fn an_undefined_reference_fails_alone_in_a_batch_of_twelve() {
    undefined_reference_in_a_batch_of_twelve(true);
}

#[test]
fn an_undeclared_undefined_call_fails_alone_in_a_batch_of_twelve() {
    undefined_reference_in_a_batch_of_twelve(false);
}

// ---- The raw address. ----

/// A kernel's own C function (`Kernel::raw_function`) is still its kernel, beside
/// companions, merged or not: called through FFI it writes what the safe call writes.
#[test]
#[allow(unsafe_code)]
fn raw_addresses_of_kernels_beside_companions_still_work() {
    let (a, b) = inputs();
    for cc in BOTH {
        let backend = backend(cc);
        // k0..k2 may share a merged unit; k3 has its own (a file-scope declaration).
        let texts: Vec<(String, Source)> = (0..4)
            .map(|j| {
                let text = if j == 3 {
                    format!(
                        "static float three(void) {{ return 3.0f; }}\n{}",
                        def(
                            "k3",
                            "for (int i = 0; i < n; ++i) out[i] = a[i] * three() + b[i];"
                        )
                    )
                } else {
                    good(j)
                };
                (format!("k{j}"), Source::new(text, Signature::out_a_b_n()))
            })
            .collect();
        let pairs: Vec<(&str, &Source)> = texts.iter().map(|(s, k)| (s.as_str(), k)).collect();
        let program = Arc::new(backend.compile_program(&pairs, &[]).unwrap());
        for (symbol, _) in &pairs {
            let kernel = program.kernel(symbol).unwrap();
            let mut out = vec![0.0f32; a.len()];
            // SAFETY: the kernel's type is `void (float *, const float *, const float *,
            // int)` (its signature's prototype); the buffers hold `n` elements each.
            unsafe {
                let f: unsafe extern "C" fn(*mut f32, *const f32, *const f32, i32) =
                    std::mem::transmute(kernel.raw_function());
                f(out.as_mut_ptr(), a.as_ptr(), b.as_ptr(), a.len() as i32);
            }
            let bits: Vec<u32> = out.iter().map(|x| x.to_bits()).collect();
            assert_eq!(bits, run(&kernel), "{cc}: {symbol}");
        }
    }
}
