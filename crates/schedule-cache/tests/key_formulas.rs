//! docs/disk-format.md's worked example of a schedule key, recomputed from the document's
//! formulas alone ("### Entry names"): SHA-256 and hex are the only tools and no
//! schedule-cache function hashes or encodes anything (the crate is not even imported), so a
//! formula the document states wrongly or leaves out fails here while `keys.rs`, which holds
//! the same example to the code, still passes. This is what an independent implementation
//! reading the document would compute.

use sha2::{Digest, Sha256};
use std::collections::BTreeMap;

/// The document under test.
const DOC: &str = include_str!("../../../docs/disk-format.md");

/// One field of the document's encoding `E(…)`.
#[derive(Clone, Copy, Debug)]
enum Field<'a> {
    /// A string: `S`.
    S(&'a str),
    /// An absent value: `N`.
    N,
    /// An integer: `U`.
    U(u64),
    /// A list header with its item count: `L`.
    L(u64),
}

/// `E(fields)`, as "Encoding" says: "A string `s` is `S` + `len(s)` as a little-endian `u64` +
/// its UTF-8 bytes; an absent value is `N`; an integer is `U` + 8 little-endian bytes; a list
/// is `L` + its item count as a little-endian `u64`, followed by the items."
fn encode(fields: &[Field<'_>]) -> Vec<u8> {
    let mut e = Vec::new();
    for f in fields {
        match *f {
            Field::S(s) => {
                e.push(b'S');
                e.extend_from_slice(&(s.len() as u64).to_le_bytes());
                e.extend_from_slice(s.as_bytes());
            }
            Field::N => e.push(b'N'),
            Field::U(v) => {
                e.push(b'U');
                e.extend_from_slice(&v.to_le_bytes());
            }
            Field::L(n) => {
                e.push(b'L');
                e.extend_from_slice(&n.to_le_bytes());
            }
        }
    }
    e
}

/// `H(fields)`, as "Digest" says: the SHA-256 of `len(E)` as a little-endian `u64` followed by
/// the bytes of `E`, as 64 lowercase hex digits; `E` is the encoding of all the fields in
/// order (one length prefix for the whole).
fn h(fields: &[Field<'_>]) -> String {
    let e = encode(fields);
    let mut sha = Sha256::new();
    sha.update((e.len() as u64).to_le_bytes());
    sha.update(&e);
    hex::encode(sha.finalize())
}

/// The fields in the document's own notation (`L 2, S "x", N, U 8`), to find them in its text.
fn notation(fields: &[Field<'_>]) -> String {
    let one = |f: &Field<'_>| match *f {
        Field::S(s) => format!("S {s:?}"),
        Field::N => "N".to_owned(),
        Field::U(v) => format!("U {v}"),
        Field::L(n) => format!("L {n}"),
    };
    fields.iter().map(one).collect::<Vec<_>>().join(", ")
}

/// The worked example's inputs, as its prose states them (each is required to appear there).
/// The settings the registry declares as entering a component: the reference settings that
/// enter one, plus the example's `pool_mode`, `dev_clock` and `warmup`.
const DECLARED: [(&str, &str); 10] = [
    ("large_models", "codegen"),
    ("buffer_aliasing", "codegen"),
    ("debug_log_from_routines", "codegen"),
    ("prefer_backend_uniformity", "codegen"),
    ("numerics.allow_tf32", "numerics"),
    ("numerics.fast_math", "numerics"),
    ("autotune_timing", "timing"),
    ("pool_mode", "pool"),
    ("dev_clock", "device"),
    ("warmup", "timing"),
];
/// The values set (the example's `name=value` list).
const VALUES: [(&str, &str); 6] = [
    ("numerics.fast_math", "1"),
    ("large_models", "yes"),
    ("pool_mode", "spin"),
    ("dev_clock", "boost"),
    ("warmup", "3"),
    ("autotune_timing", "Queue"),
];
const BACKEND: &str = "cc";
const FORMAT: &str = "ops-1";
const CODEGEN_TAG: &str = "gcc-13";
const WORKER_POOL_TAG: &str = "pool8";
const MAX_THREADS: u64 = 8;
const VECTOR_BYTES: u64 = 32;
const LOCAL_MEMORY_BYTES: u64 = 1_048_576;
/// `extra`, in the order the prose writes it (the formula sorts it).
const EXTRA: [(&str, &str); 2] = [("a", "1"), ("b", "2")];
const DEVICE: &str = "x86 avx2";
const TOOLCHAIN: &str = "gcc 13.2";
/// The domain `D`'s string.
const DOMAIN: &str = "kcache-schedule-key-2";

/// `SET(c)`: `L n`, then for each setting declared as entering `c`, in byte order of the names,
/// `S name` and `S value` (or `N` when unset); `skip` is left out altogether (the timing
/// component's "without the `autotune_timing` setting").
fn set(component: &str, skip: Option<&str>) -> Vec<Field<'static>> {
    let values = BTreeMap::from(VALUES);
    let mut names: Vec<&str> = DECLARED
        .iter()
        .filter(|(n, c)| *c == component && Some(*n) != skip)
        .map(|(n, _)| *n)
        .collect();
    names.sort_unstable_by(|a, b| a.as_bytes().cmp(b.as_bytes()));
    let mut fields = vec![Field::L(names.len() as u64)];
    for name in names {
        fields.push(Field::S(name));
        fields.push(values.get(name).map_or(Field::N, |v| Field::S(v)));
    }
    fields
}

/// The objective's normalization, as the document states it.
fn normalize_objective(backend: &str, objective: &str) -> String {
    let o = objective.trim().to_ascii_lowercase();
    match o.as_str() {
        "isolated" | "isolation" | "iso" | "single" => "isolated".to_owned(),
        "queued" | "queue" | "batched" | "pipelined" => {
            let b = backend.to_ascii_lowercase();
            if b == "cuda" || b == "hip" {
                "queued2"
            } else {
                "queued"
            }
            .to_owned()
        }
        _ => o,
    }
}

/// The codegen component's fields for the example's limits record (no toolchain), as its row
/// of the table says.
fn codegen_fields() -> Vec<Field<'static>> {
    let mut extra = EXTRA.to_vec();
    extra.sort_unstable_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
    let mut codegen = vec![Field::S(DOMAIN), Field::S("codegen")];
    codegen.extend(set("codegen", None));
    codegen.extend([
        Field::S(CODEGEN_TAG),
        Field::S(WORKER_POOL_TAG),
        Field::U(MAX_THREADS),
        Field::U(VECTOR_BYTES),
        Field::U(LOCAL_MEMORY_BYTES),
        Field::L(extra.len() as u64),
    ]);
    for (k, v) in extra {
        codegen.extend([Field::S(k), Field::S(v)]);
    }
    codegen
}

/// The text of the fenced block after `fence` (` ```text `, ` ```ron `) in `section`.
fn block<'a>(section: &'a str, fence: &str) -> &'a str {
    let start = section.find(fence).expect("the fenced block") + fence.len();
    let len = section[start..].find("```").expect("the block's end");
    &section[start..start + len]
}

/// The worked example in docs/disk-format.md, recomputed from the formulas of "Entry names"
/// (and nothing of schedule-cache): every component's `H(D, …)`, `SET(numerics)` as the
/// example spells it, `<whole>`, each hint (letter and six hex digits), the key string and its
/// 185 bytes equal the values the example lists, and the entry shown after it records those
/// components. Inputs are this file's literals, each required to appear in the example's prose;
/// the expected values are read from the document.
#[test]
fn the_worked_key_example_follows_from_the_documented_formulas() {
    let from = DOC.find("**Worked example**").expect("the worked example");
    let example = &DOC[from..];
    let prose = &example[..example.find("```").expect("the example's first block")];
    // The prose wraps lines anywhere: compare with its white space runs made single spaces.
    let prose = prose.split_whitespace().collect::<Vec<_>>().join(" ");
    let says = |text: &str| assert!(prose.contains(text), "the example says {text}");
    says(&format!("Backend `{BACKEND}`"));
    says(&format!("format `{FORMAT}`"));
    // Which component each declared setting enters, in the prose's words.
    for declarations in [
        "`large_models`, `buffer_aliasing`, `debug_log_from_routines`, \
         `prefer_backend_uniformity` enter `codegen`",
        "`numerics.allow_tf32`, `numerics.fast_math` enter `numerics`",
        "`autotune_timing` enters `timing`",
        "plus `pool_mode` (`pool`), `dev_clock` (`device`) and `warmup` (`timing`)",
    ] {
        says(declarations);
    }
    for (name, value) in VALUES {
        says(&format!("`{name}={value}`"));
    }
    says(&format!("`codegen_tag: {CODEGEN_TAG:?}`"));
    says(&format!("`worker_pool_tag: {WORKER_POOL_TAG:?}`"));
    says(&format!("`max_threads: {MAX_THREADS}`"));
    says(&format!("`vector_bytes: {VECTOR_BYTES}`"));
    says(&format!("`local_memory_bytes: {LOCAL_MEMORY_BYTES}`"));
    says(r#"`extra: {"a": "1", "b": "2"}`"#);
    says(&format!("device `{DEVICE}`"));
    says(&format!("toolchain `{TOOLCHAIN}`"));
    let after = "code digest `";
    let at = prose.find(after).expect("the example's code digest") + after.len();
    let digest = prose.get(at..at + 64).expect("64 hex digits");
    assert!(
        digest
            .bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()),
        "{digest}"
    );
    let d_at = DOC.find("`D` = `S \"").expect("the domain's definition") + "`D` = `S \"".len();
    assert!(
        DOC[d_at..].starts_with(&format!("{DOMAIN}\"`")),
        "the domain D"
    );

    // The example's expected values: `name value` lines of its text block.
    let listed: BTreeMap<&str, &str> = block(example, "```text\n")
        .lines()
        .filter_map(|l| l.split_once(char::is_whitespace))
        .map(|(name, v)| (name, v.trim()))
        .collect();
    assert_eq!(listed.len(), 8, "seven components and the key: {listed:?}");

    // Every component, as its row of the table says.
    let d = Field::S(DOMAIN);
    let numerics_set = set("numerics", None);
    says(&format!("`SET(numerics)` is `{}`", notation(&numerics_set)));
    let codegen = codegen_fields();
    let objective_setting = "autotune_timing";
    let given = BTreeMap::from(VALUES);
    let objective = normalize_objective(
        BACKEND,
        given.get(objective_setting).copied().unwrap_or("isolated"),
    );
    assert_eq!(objective, "queued", "the example's normalized objective");
    let components: [(&str, &str, Vec<Field<'_>>); 7] = [
        (
            "backend",
            "b",
            vec![d, Field::S("backend"), Field::S(BACKEND)],
        ),
        ("format", "f", vec![d, Field::S("format"), Field::S(FORMAT)]),
        (
            "numerics",
            "n",
            [vec![d, Field::S("numerics")], numerics_set].concat(),
        ),
        ("codegen", "c", codegen),
        (
            "pool",
            "p",
            [
                vec![d, Field::S("pool")],
                set("pool", None),
                vec![Field::S(WORKER_POOL_TAG)],
            ]
            .concat(),
        ),
        (
            "device",
            "d",
            [
                vec![d, Field::S("device")],
                set("device", None),
                vec![Field::S(DEVICE), Field::S(TOOLCHAIN)],
            ]
            .concat(),
        ),
        (
            "timing",
            "t",
            [
                vec![d, Field::S("timing"), Field::S(&objective)],
                set("timing", Some(objective_setting)),
            ]
            .concat(),
        ),
    ];
    let mut parts = vec![("digest", String::new(), digest.to_owned())];
    for (name, letter, fields) in &components {
        let value = h(fields);
        assert_eq!(
            listed.get(name),
            Some(&value.as_str()),
            "component {name}: {}",
            notation(fields)
        );
        parts.push((name, (*letter).to_owned(), value));
    }

    // `<whole>`: every (component name, value) in key order, after `S "key", L 8`.
    let mut whole = vec![d, Field::S("key"), Field::L(parts.len() as u64)];
    for (name, _, value) in &parts {
        whole.extend([Field::S(name), Field::S(value)]);
    }
    let whole = h(&whole);
    let hints: Vec<String> = parts[1..]
        .iter()
        .map(|(_, letter, value)| format!("{letter}{}", &value[..6]))
        .collect();
    let key = format!("{digest}-{whole}-{}", hints.join("_"));

    // The listed key, field by field, then whole.
    let listed_key = *listed.get("key").expect("the example's key");
    let fields: Vec<&str> = listed_key.split('-').collect();
    assert_eq!(fields.len(), 3, "<digest>-<whole>-<hints>: {listed_key}");
    assert_eq!(fields[0], digest, "the key's digest field");
    assert_eq!(fields[1], whole, "the key's <whole>");
    assert_eq!(
        fields[2].split('_').collect::<Vec<_>>(),
        hints,
        "the key's hints"
    );
    assert_eq!(listed_key, key);
    assert_eq!(key.len(), 185, "the document's key length");
    assert!(
        key.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'),
        "{key}"
    );

    // The entry shown after the example records the digest and every full component.
    let entry = block(example, "```ron\n");
    // Its `(Variant, "value"),` lines; the variant is the component's name capitalized.
    let recorded: Vec<(String, &str)> = entry
        .lines()
        .filter_map(|l| {
            let (variant, value) = l
                .trim()
                .strip_prefix('(')?
                .strip_suffix("\"),")?
                .split_once(", \"")?;
            Some((variant.to_owned(), value))
        })
        .collect();
    let expected: Vec<(String, &str)> = parts
        .iter()
        .map(|(name, _, value)| {
            let mut variant = (*name).to_owned();
            variant[..1].make_ascii_uppercase();
            (variant, value.as_str())
        })
        .collect();
    assert_eq!(recorded, expected, "the entry's key_parts");
    assert_eq!(
        entry.matches(&format!("digest: \"{digest}\"")).count(),
        2,
        "the entry's and its schedule's digest"
    );
}

/// The worked example "with a toolchain", recomputed from the codegen row's toolchain fields:
/// `S "toolchain", S identity, L m, S o₁, …, S oₘ, S prelude_digest`, the digest being
/// `H(S "prelude", S prelude)`; the identity, options and prelude are required to appear in
/// its prose.
#[test]
fn the_toolchain_example_follows_from_the_documented_formulas() {
    const IDENTITY: &str = "cc 12.2";
    const OPTIONS: [&str; 2] = ["-O2", "-ffp-contract=off"];
    const PRELUDE: &str = "#include <math.h>\n";
    let from = DOC
        .find("**With a toolchain**")
        .expect("the toolchain example");
    let example = &DOC[from..from + DOC[from..].find("\n\n").expect("its paragraph's end")];
    let prose = example.split_whitespace().collect::<Vec<_>>().join(" ");
    for says in [
        format!("identity `{IDENTITY}`"),
        format!("options `{}` and `{}`", OPTIONS[0], OPTIONS[1]),
        "prelude `#include <math.h>` and a newline".to_owned(),
    ] {
        assert!(prose.contains(&says), "the example says {says}");
    }
    let after = "give codegen `";
    let at = prose.find(after).expect("its codegen value") + after.len();
    let listed = prose.get(at..at + 64).expect("64 hex digits");

    let row = DOC
        .lines()
        .find(|l| l.starts_with("  | `codegen` |"))
        .expect("the codegen row");
    assert!(
        row.contains("`S \"toolchain\", S identity, L m, S o₁, …, S oₘ, S prelude_digest` or `N`")
            && row.contains("`prelude_digest` is `H(S \"prelude\", S prelude)`"),
        "{row}"
    );
    let prelude_digest = h(&[Field::S("prelude"), Field::S(PRELUDE)]);
    let mut codegen = codegen_fields();
    codegen.extend([
        Field::S("toolchain"),
        Field::S(IDENTITY),
        Field::L(OPTIONS.len() as u64),
    ]);
    codegen.extend(OPTIONS.map(Field::S));
    codegen.push(Field::S(&prelude_digest));
    assert_eq!(h(&codegen), listed, "{}", notation(&codegen));
}
