//! The object backend with the real compiler (clang, as tinygrad runs it; `cc` where clang
//! is absent): renamed twins share a key and one compiled object; a second cache over the
//! same store compiles nothing and hands out the very bytes the first compiled; kernels
//! with different meanings never share a key, and kernels with equal keys compile to the
//! same code (an oracle that compiles every kernel alone, with a naive key it catches);
//! a text that reads a header is used but not saved; commands that name their own input
//! or output are refused.

#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;

use cc_backend::{CcError, ObjectBackend, defined_function};
use kernel_cache::{Backend, BatchKernel, CachedBackend, Layout, Names, kernel_key};

/// tinygrad's command for this machine, without input and output (its `ClangCompiler`
/// adds `- -o -`), with clang; `cc` and its flags when clang is absent.
fn argv(native: bool) -> Vec<String> {
    let clang = std::process::Command::new("clang")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    let mut argv: Vec<String> = if clang {
        [
            "clang",
            "-c",
            "-x",
            "c",
            "-O2",
            "-fPIC",
            "-ffreestanding",
            "-fno-math-errno",
            "-nostdlib",
            "-fno-ident",
        ]
        .map(String::from)
        .to_vec()
    } else {
        ["cc", "-c", "-x", "c", "-O2", "-fPIC", "-fno-math-errno"]
            .map(String::from)
            .to_vec()
    };
    if clang {
        argv.push(format!(
            "--target={}-none-unknown-elf",
            std::env::consts::ARCH
        ));
    }
    if native {
        argv.push("-march=native".to_string());
    }
    argv
}

/// A tinygrad-shaped elementwise kernel named `name`: `out[i] = a[i] <op> <c>` over `n`.
fn elementwise(name: &str, n: usize, op: &str, c: &str, ty: &str) -> String {
    format!(
        "void {name}({ty}* restrict data0_{n}, {ty}* restrict data1_{n}) {{\n  \
         for (int Lidx0 = 0; Lidx0 < {n}; Lidx0++) {{\n    \
         {ty} val0 = (*(data1_{n}+Lidx0));\n    \
         *(data0_{n}+Lidx0) = (val0{op}{c});\n  }}\n}}\n"
    )
}

/// A tinygrad-shaped reduce kernel with a vector typedef.
fn reduce(name: &str, n: usize) -> String {
    format!(
        "typedef float float4 __attribute__((aligned(16),ext_vector_type(4)));\n\
         void {name}(float* restrict data0_1, float* restrict data1_{n}) {{\n  \
         float4 acc0 = (float4){{0.0f,0.0f,0.0f,0.0f}};\n  \
         for (int Ridx0 = 0; Ridx0 < {q}; Ridx0++) {{\n    \
         float4 val0 = (*((float4*)((data1_{n}+(Ridx0<<2)))));\n    \
         acc0 = (acc0+val0);\n  }}\n  \
         *(data0_1+0) = (acc0[0]+acc0[1]+acc0[2]+acc0[3]);\n}}\n",
        q = n / 4
    )
}

/// The kernels of the oracle: twins under tinygrad's names (`E_4`, `E_4n1`, `E_4n2`) and
/// kernels that differ in meaning by one constant, operator, bound or type.
fn kernels() -> Vec<(String, String)> {
    let mut out = Vec::new();
    for name in ["E_4", "E_4n1", "E_4n2"] {
        out.push((name.to_string(), elementwise(name, 4, "+", "1.0f", "float")));
    }
    out.push((
        "E_4n3".into(),
        elementwise("E_4n3", 4, "+", "2.0f", "float"),
    ));
    out.push((
        "E_4n4".into(),
        elementwise("E_4n4", 4, "*", "2.0f", "float"),
    ));
    out.push(("E_8".into(), elementwise("E_8", 8, "+", "1.0f", "float")));
    out.push(("E_4n5".into(), elementwise("E_4n5", 4, "+", "1", "int")));
    out.push(("E_4n6".into(), elementwise("E_4n6", 4, "+", "1", "int")));
    for name in ["r_64", "r_64n1"] {
        out.push((name.to_string(), reduce(name, 64)));
    }
    out.push(("r_128".into(), reduce("r_128", 128)));
    out
}

/// An object's sections and symbols, as [`code`] lists them.
type Code = Vec<(String, Vec<u8>)>;

/// The object's code as a loader sees it: every section's name and bytes but the symbol
/// and string tables, then the symbols (with `symbol` written `KERNEL`): what must be
/// equal for two objects to run alike under any name.
fn code(symbol: &str, bytes: &[u8]) -> Code {
    use object::{Object as _, ObjectSection as _, ObjectSymbol as _};
    let file = object::File::parse(bytes).unwrap();
    let mut out: Vec<(String, Vec<u8>)> = file
        .sections()
        .filter(|s| !matches!(s.name(), Ok(".symtab" | ".strtab")))
        .map(|s| {
            let relocs: Vec<String> = s
                .relocations()
                .map(|(at, r)| format!("{at}:{:?}:{:?}:{}", r.kind(), r.target(), r.addend()))
                .collect();
            (
                format!("{} {relocs:?}", s.name().unwrap()),
                s.data().unwrap().to_vec(),
            )
        })
        .collect();
    for s in file.symbols() {
        let name = s.name().unwrap();
        let name = if name == symbol { "KERNEL" } else { name };
        out.push((
            format!("sym {name} {:?} {} {}", s.section(), s.address(), s.size()),
            Vec::new(),
        ));
    }
    out
}

/// Compiles every kernel alone (a fresh backend, no cache, no store) and returns the
/// pairs whose keys (by `key`) are equal but whose code differs.
fn violations(
    kernels: &[(String, String)],
    key: impl Fn(&str, &str) -> String,
) -> Vec<(String, String)> {
    let compiled: Vec<(String, Code)> = kernels
        .iter()
        .map(|(name, text)| {
            let alone = CachedBackend::new(ObjectBackend::new(&argv(false)).unwrap(), 1 << 20);
            let (outcomes, _) = alone
                .resolve_each(&[alone.backend.batch_kernel(name, text)])
                .unwrap();
            let answer = outcomes[0].as_ref().unwrap();
            let object = answer.program.object(&answer.symbol).unwrap();
            (key(name, text), code(name, object.bytes()))
        })
        .collect();
    let mut bad = Vec::new();
    for i in 0..kernels.len() {
        for j in i + 1..kernels.len() {
            if compiled[i].0 == compiled[j].0 && compiled[i].1 != compiled[j].1 {
                bad.push((kernels[i].0.clone(), kernels[j].0.clone()));
            }
        }
    }
    bad
}

#[test]
fn equal_keys_compile_to_the_same_code_and_a_naive_key_is_caught() {
    let backend = ObjectBackend::new(&argv(false)).unwrap();
    let kernels = kernels();
    let real = |name: &str, text: &str| backend.batch_kernel(name, text).key;
    // The twins share keys; every kernel of another meaning has its own.
    let keys: BTreeMap<String, String> = kernels
        .iter()
        .map(|(n, t)| (n.clone(), real(n, t)))
        .collect();
    assert_eq!(keys["E_4"], keys["E_4n1"]);
    assert_eq!(keys["E_4"], keys["E_4n2"]);
    assert_eq!(keys["r_64"], keys["r_64n1"]);
    assert_eq!(keys["E_4n5"], keys["E_4n6"]);
    for other in ["E_4n3", "E_4n4", "E_8", "E_4n5", "r_64", "r_128"] {
        assert_ne!(keys["E_4"], keys[other], "{other}");
    }
    assert_ne!(keys["r_64"], keys["r_128"]);
    assert_eq!(violations(&kernels, real), Vec::new());
    // A naive key that reads every number as 0 joins kernels of other constants and
    // bounds: the oracle sees their code differ.
    let naive = |name: &str, text: &str| {
        let digitless: String = text
            .chars()
            .map(|c| if c.is_ascii_digit() { '0' } else { c })
            .collect();
        kernel_key(
            &digitless,
            &name.replace(|c: char| c.is_ascii_digit(), "0"),
            &Names::default(),
            backend.flags(),
            backend.identity().as_bytes(),
        )
    };
    let caught = violations(&kernels, naive);
    assert!(
        caught.contains(&("E_4".to_string(), "E_4n3".to_string())),
        "{caught:?}"
    );
}

#[test]
fn renamed_twins_compile_once_and_a_second_cache_loads_the_same_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let layout = Layout::new(dir.path());
    let first = CachedBackend::new(ObjectBackend::new(&argv(true)).unwrap(), 1 << 20)
        .with_store_in(&layout)
        .unwrap();
    let batch: Vec<BatchKernel<String>> = kernels()
        .iter()
        .map(|(n, t)| first.backend.batch_kernel(n, t))
        .collect();
    let (outcomes, census) = first.resolve_each(&batch).unwrap();
    // 11 kernels, 4 twins among them: 7 objects.
    assert_eq!(census.kernels_compiled, 7);
    assert_eq!(first.backend.objects_compiled(), 7);
    let twin = outcomes[1].as_ref().unwrap();
    assert_eq!(
        &*twin.symbol, "E_4",
        "the twin is answered with E_4's object"
    );
    let bytes: Vec<Vec<u8>> = outcomes
        .iter()
        .map(|o| {
            let a = o.as_ref().unwrap();
            let object = a.program.object(&a.symbol).unwrap();
            assert!(object.defines().iter().any(|d| d == &*a.symbol));
            object.bytes().to_vec()
        })
        .collect();
    assert_eq!(bytes[0], bytes[1]);
    // Its host part is the processor's: -march=native.
    assert!(
        first
            .backend
            .host_part(first.backend.flags())
            .unwrap()
            .is_some()
    );
    drop(first);
    // Another process's cache over the same store: nothing compiled, the same bytes.
    let second = CachedBackend::new(ObjectBackend::new(&argv(true)).unwrap(), 1 << 20)
        .with_store_in(&layout)
        .unwrap();
    let (again, census) = second.resolve_each(&batch).unwrap();
    assert_eq!(census.kernels_compiled, 0);
    assert_eq!(second.backend.objects_compiled(), 0);
    assert_eq!(census.kernels_loaded, 7);
    for (o, want) in again.iter().zip(&bytes) {
        let a = o.as_ref().unwrap();
        assert_eq!(a.program.object(&a.symbol).unwrap().bytes(), &want[..]);
    }
}

#[test]
fn a_text_that_reads_a_header_is_used_but_not_saved() {
    let dir = tempfile::tempdir().unwrap();
    let headers = tempfile::tempdir().unwrap();
    std::fs::write(headers.path().join("k.h"), "#define K 3.0f\n").unwrap();
    let mut command = argv(false);
    command.push(format!("-I{}", headers.path().display()));
    let layout = Layout::new(dir.path());
    let text = "#include \"k.h\"\nvoid E_2(float* restrict d) { d[0] = K; d[1] = K; }\n";
    for round in 0..2 {
        let cached = CachedBackend::new(ObjectBackend::new(&command).unwrap(), 1 << 20)
            .with_store_in(&layout)
            .unwrap();
        let (outcomes, census) = cached
            .resolve_each(&[cached.backend.batch_kernel("E_2", text)])
            .unwrap();
        assert!(outcomes[0].is_ok(), "round {round}");
        assert_eq!(census.kernels_compiled, 1, "round {round}: compiled again");
        assert_eq!(census.kernels_loaded, 0);
    }
    // A text that fails to compile fails alone, with the compiler's message.
    let cached = CachedBackend::new(ObjectBackend::new(&command).unwrap(), 1 << 20);
    let (outcomes, _) = cached
        .resolve_each(&[
            cached
                .backend
                .batch_kernel("bad", "void bad(void) { nope; }"),
            cached.backend.batch_kernel("E_2", text),
        ])
        .unwrap();
    let err = outcomes[0].as_ref().unwrap_err().to_string();
    assert!(err.contains("nope"), "{err}");
    assert!(outcomes[1].is_ok());
}

#[test]
fn commands_naming_their_own_input_or_output_are_refused() {
    let refused = |words: &[&str]| {
        let argv: Vec<String> = words.iter().map(|w| w.to_string()).collect();
        ObjectBackend::new(&argv).unwrap_err()
    };
    for words in [
        &["clang", "-c", "-"][..],
        &["clang", "-c", "k.c"],
        &["clang", "-c", "-o", "x.o"],
        &["clang", "-E"],
        &["clang", "@opts"],
        &[],
    ] {
        let err = refused(words);
        assert!(
            matches!(
                err,
                CcError::ObjectCommand { .. } | CcError::UnlistedInput { .. }
            ),
            "{words:?}: {err}"
        );
    }
    assert!(matches!(
        refused(&["clang", "-MMD"]),
        CcError::DependencyOption { .. }
    ));
    for missing in [
        &["no-such-compiler-kcache", "-c"][..],
        &["/no/such/kcache-cc"],
    ] {
        assert!(
            matches!(refused(missing), CcError::Spawn { .. }),
            "{missing:?}"
        );
    }
    // A language after -x is no input file.
    assert!(ObjectBackend::new(&argv(false)).is_ok());
}

#[test]
fn the_kernel_is_the_texts_last_definition() {
    for (name, text) in kernels() {
        assert_eq!(defined_function(&text).as_deref(), Some(name.as_str()));
    }
    let text = "static float f(float x) { return x; }\n/* g(void) {} */\nvoid g2(float *d) { d[0] = f(1); }";
    assert_eq!(defined_function(text).as_deref(), Some("g2"));
}
