//! The stable hashes, generic (`KeyBuilder`) and LM (`memo_cache::lm`): order-independent
//! where the spec says so, sensitive to every other field, and pinned (a change of
//! encoding fails here first).
#![allow(clippy::unwrap_used)]

use std::collections::{BTreeMap, HashMap};

use memo_cache::lm::{
    Demo, DemoStrategy, LmConfig, PredictorState, call_key, input_hash, lm_config_hash,
    predictor_state_hash,
};
use memo_cache::{Key, KeyBuilder, Secret, Value};
use proptest::prelude::*;
use proptest::sample::Index;

fn value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::Int),
        any::<f64>().prop_map(Value::Float),
        "[a-c]{0,3}".prop_map(Value::Text),
        "[a-c]{0,3}".prop_map(|s| Value::Secret(Secret::new(s))),
    ];
    leaf.prop_recursive(3, 12, 3, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..3).prop_map(Value::List),
            prop::collection::btree_map("[a-c]{0,2}", inner, 0..3).prop_map(Value::Map),
        ]
    })
}

/// Fields with distinct names (a map), in a canonical order.
fn fields() -> impl Strategy<Value = Vec<(String, Value)>> {
    prop::collection::btree_map("[a-d]{0,3}", value(), 0..5).prop_map(|m| m.into_iter().collect())
}

fn demo() -> impl Strategy<Value = Demo> {
    (
        prop::collection::btree_map("[a-c]{1,2}", value(), 0..3),
        prop::collection::btree_map("[a-c]{1,2}", value(), 0..3),
    )
        .prop_map(|(inputs, outputs)| Demo { inputs, outputs })
}

fn strategy() -> impl Strategy<Value = DemoStrategy> {
    prop_oneof![
        Just(DemoStrategy::Fixed),
        any::<u32>().prop_map(|max_demos| DemoStrategy::Bootstrap { max_demos }),
        (any::<u32>(), any::<u64>()).prop_map(|(k, seed)| DemoStrategy::RandomSubset { k, seed }),
    ]
}

fn predictor() -> impl Strategy<Value = PredictorState> {
    (
        "[a-c]{0,4}",
        "[a-c]{0,4}",
        prop::collection::vec(demo(), 0..4),
        strategy(),
    )
        .prop_map(
            |(signature, instructions, demos, demo_strategy)| PredictorState {
                signature,
                instructions,
                demos,
                demo_strategy,
            },
        )
}

fn lm_config() -> impl Strategy<Value = LmConfig> {
    (
        "[a-c]{0,4}",
        prop::option::of("[a-c]{0,4}".prop_map(Secret::new)),
        fields(),
    )
        .prop_map(|(model, api_key, options)| LmConfig {
            model,
            api_key,
            options,
        })
}

fn hash_fields(fields: &[(String, Value)]) -> Key {
    input_hash(fields.iter().map(|(k, v)| (k.as_str(), v)))
}

/// A value surely different from `v`: wrapping changes the encoding's tag.
fn changed(v: &Value) -> Value {
    Value::List(vec![v.clone()])
}

/// One edit that changes a list of fields (a map or a keyword list).
#[derive(Clone, Debug)]
enum FieldEdit {
    Value(Index),
    Name(Index),
    Remove(Index),
    Add(String),
}

fn field_edit() -> impl Strategy<Value = FieldEdit> {
    prop_oneof![
        any::<Index>().prop_map(FieldEdit::Value),
        any::<Index>().prop_map(FieldEdit::Name),
        any::<Index>().prop_map(FieldEdit::Remove),
        "[e-f]{1,2}".prop_map(FieldEdit::Add),
    ]
}

/// Applies `edit`; `false` when it does not apply (no fields to edit).
fn apply(fields: &mut Vec<(String, Value)>, edit: &FieldEdit) -> bool {
    match edit {
        FieldEdit::Add(name) => fields.push((name.clone(), Value::Null)),
        _ if fields.is_empty() => return false,
        FieldEdit::Value(i) => {
            let at = i.index(fields.len());
            let (_, v) = &mut fields[at];
            *v = changed(v);
        }
        // Names are made of a-d: an appended `z` makes a name no other field has.
        FieldEdit::Name(i) => {
            let at = i.index(fields.len());
            fields[at].0.push('z');
        }
        FieldEdit::Remove(i) => {
            fields.remove(i.index(fields.len()));
        }
    }
    true
}

/// One edit that changes what an LM is asked by a predictor.
#[derive(Clone, Debug)]
enum StateEdit {
    Signature,
    Instructions,
    SwapSignatureAndInstructions,
    DemoInputs(Index, FieldEdit),
    DemoOutputs(Index, FieldEdit),
    MoveInputToOutputs(Index),
    DuplicateDemo(Index),
    RemoveDemo(Index),
}

fn state_edit() -> impl Strategy<Value = StateEdit> {
    prop_oneof![
        Just(StateEdit::Signature),
        Just(StateEdit::Instructions),
        Just(StateEdit::SwapSignatureAndInstructions),
        (any::<Index>(), field_edit()).prop_map(|(i, e)| StateEdit::DemoInputs(i, e)),
        (any::<Index>(), field_edit()).prop_map(|(i, e)| StateEdit::DemoOutputs(i, e)),
        any::<Index>().prop_map(StateEdit::MoveInputToOutputs),
        any::<Index>().prop_map(StateEdit::DuplicateDemo),
        any::<Index>().prop_map(StateEdit::RemoveDemo),
    ]
}

fn edit_map(map: &mut BTreeMap<String, Value>, edit: &FieldEdit) -> bool {
    let mut fields: Vec<(String, Value)> = std::mem::take(map).into_iter().collect();
    let applies = apply(&mut fields, edit);
    let len = fields.len();
    *map = fields.into_iter().collect();
    // An added name may replace an existing one in a map; then nothing changed.
    applies && map.len() == len
}

fn edit_state(s: &mut PredictorState, edit: &StateEdit) -> bool {
    let n = s.demos.len();
    match edit {
        StateEdit::Signature => s.signature.push('z'),
        StateEdit::Instructions => s.instructions.push('z'),
        StateEdit::SwapSignatureAndInstructions => {
            if s.signature == s.instructions {
                return false;
            }
            std::mem::swap(&mut s.signature, &mut s.instructions);
        }
        _ if n == 0 => return false,
        StateEdit::DemoInputs(i, e) => return edit_map(&mut s.demos[i.index(n)].inputs, e),
        StateEdit::DemoOutputs(i, e) => return edit_map(&mut s.demos[i.index(n)].outputs, e),
        StateEdit::MoveInputToOutputs(i) => {
            let d = &mut s.demos[i.index(n)];
            let Some((k, v)) = d.inputs.pop_first() else {
                return false;
            };
            if d.outputs.contains_key(&k) {
                return false;
            }
            d.outputs.insert(k, v);
        }
        StateEdit::DuplicateDemo(i) => s.demos.push(s.demos[i.index(n)].clone()),
        StateEdit::RemoveDemo(i) => {
            s.demos.remove(i.index(n));
        }
    }
    true
}

proptest! {
    #[test]
    fn input_hash_ignores_field_order(
        (fields, shuffled) in fields().prop_flat_map(|f| (Just(f.clone()), Just(f).prop_shuffle()))
    ) {
        prop_assert_eq!(hash_fields(&fields), hash_fields(&shuffled));
        // A HashMap (random iteration order) gives the same key as the list.
        let map: HashMap<&str, &Value> = fields.iter().map(|(k, v)| (k.as_str(), v)).collect();
        prop_assert_eq!(input_hash(map), hash_fields(&fields));
    }

    #[test]
    fn input_hash_sees_every_name_and_value(fields in fields(), edit in field_edit()) {
        let mut edited = fields.clone();
        prop_assume!(apply(&mut edited, &edit));
        prop_assert_ne!(hash_fields(&fields), hash_fields(&edited));
    }

    #[test]
    fn lm_config_hash_ignores_option_order(
        (config, shuffled) in lm_config().prop_flat_map(|c| {
            let options = Just(c.options.clone()).prop_shuffle();
            (Just(c), options)
        })
    ) {
        let reordered = LmConfig { options: shuffled, ..config.clone() };
        prop_assert_eq!(lm_config_hash(&config), lm_config_hash(&reordered));
    }

    #[test]
    fn lm_config_hash_sees_model_key_and_every_option(
        config in lm_config(),
        edit in field_edit(),
        which in 0..4u8,
    ) {
        let mut edited = config.clone();
        match which {
            0 => edited.model.push('z'),
            1 => edited.api_key = match &config.api_key {
                None => Some(Secret::new("")),
                Some(s) => Some(Secret::new(format!("{}z", s.expose()))),
            },
            2 => edited.api_key = match &config.api_key {
                None => Some(Secret::new(config.model.clone())),
                Some(_) => None,
            },
            _ => prop_assume!(apply(&mut edited.options, &edit)),
        }
        prop_assert_ne!(lm_config_hash(&config), lm_config_hash(&edited));
    }

    #[test]
    fn predictor_hash_ignores_demo_order_and_strategy(
        (state, demos) in predictor().prop_flat_map(|s| {
            let demos = Just(s.demos.clone()).prop_shuffle();
            (Just(s), demos)
        }),
        other_strategy in strategy(),
    ) {
        let same = PredictorState { demos, demo_strategy: other_strategy, ..state.clone() };
        prop_assert_eq!(predictor_state_hash(&state), predictor_state_hash(&same));
    }

    #[test]
    fn predictor_hash_sees_every_other_field(state in predictor(), edit in state_edit()) {
        let mut edited = state.clone();
        prop_assume!(edit_state(&mut edited, &edit));
        prop_assert_ne!(predictor_state_hash(&state), predictor_state_hash(&edited));
    }

    #[test]
    fn call_key_sees_each_component_and_its_position(
        a in any::<[u8; 32]>(), b in any::<[u8; 32]>(), c in any::<[u8; 32]>(), d in any::<[u8; 32]>(),
    ) {
        let (a, b, c, d) = (Key::from_bytes(a), Key::from_bytes(b), Key::from_bytes(c), Key::from_bytes(d));
        prop_assume!(a != b && b != c && a != c && d != a && d != b && d != c);
        let k = call_key(&a, &b, &c);
        for other in [call_key(&d, &b, &c), call_key(&a, &d, &c), call_key(&a, &b, &d),
                      call_key(&b, &a, &c), call_key(&a, &c, &b), call_key(&c, &b, &a)] {
            prop_assert_ne!(k, other);
        }
    }

    #[test]
    fn key_digest_is_the_workspace_digest(
        parts in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..40), 0..6)
    ) {
        let parts: Vec<&[u8]> = parts.iter().map(Vec::as_slice).collect();
        prop_assert_eq!(Key::of_parts(&parts).to_hex(), kcache_digest::digest_of_parts(&parts));
        // The encoding spelled out: each part's length as a little-endian u64, then its bytes.
        let mut flat = Vec::new();
        for p in &parts {
            flat.extend_from_slice(&(p.len() as u64).to_le_bytes());
            flat.extend_from_slice(p);
        }
        let spelled: [u8; 32] = <sha2::Sha256 as sha2::Digest>::digest(&flat).into();
        let key = Key::of_parts(&parts);
        prop_assert_eq!(key.as_bytes(), &spelled);
    }

    #[test]
    fn values_hash_alike_exactly_when_equal(a in value(), b in value()) {
        let (ha, hb) = (input_hash([("f", &a)]), input_hash([("f", &b)]));
        prop_assert_eq!(canon(&a) == canon(&b), ha == hb);
        prop_assert_eq!(input_hash([("f", &a)]), ha);
    }
}

/// Keyword lists over few names and few values, so duplicates and equal lists are common.
fn dup_fields() -> impl Strategy<Value = Vec<(String, Value)>> {
    let value = prop_oneof![
        Just(Value::Int(0)),
        Just(Value::Int(1)),
        Just(Value::from("0")),
    ];
    prop::collection::vec(("[ab]", value), 0..5)
}

/// What a keyword list means to a consumer that may read every value of a name in order
/// (and so also to one that lets the last value win): each name's values, in order.
fn per_name(fields: &[(String, Value)]) -> BTreeMap<String, Vec<String>> {
    let mut m: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (k, v) in fields {
        m.entry(k.clone()).or_default().push(canon(v));
    }
    m
}

proptest! {
    #[test]
    fn input_keys_are_equal_exactly_when_each_name_has_the_same_values_in_order(
        a in dup_fields(), b in dup_fields(),
    ) {
        prop_assert_eq!(per_name(&a) == per_name(&b), hash_fields(&a) == hash_fields(&b));
    }

    #[test]
    fn lm_keys_are_equal_exactly_when_each_option_has_the_same_values_in_order(
        a in dup_fields(), b in dup_fields(),
    ) {
        let lm = |options: &[(String, Value)]| lm_config_hash(&LmConfig {
            options: options.to_vec(),
            ..LmConfig::new("m")
        });
        prop_assert_eq!(per_name(&a) == per_name(&b), lm(&a) == lm(&b));
    }
}

/// A value's identity as text: floats by their bits, secrets revealed.
fn canon(v: &Value) -> String {
    match v {
        Value::Float(f) => format!("Float({:#x})", f.to_bits()),
        Value::Secret(s) => format!("Secret({:?})", s.expose()),
        Value::List(items) => format!(
            "List[{}]",
            items.iter().map(canon).collect::<Vec<_>>().join(",")
        ),
        Value::Map(m) => format!(
            "Map{{{}}}",
            m.iter()
                .map(|(k, v)| format!("{k:?}:{}", canon(v)))
                .collect::<Vec<_>>()
                .join(",")
        ),
        other => format!("{other:?}"),
    }
}

#[test]
fn a_field_never_moves_between_name_and_value() {
    let ab = Value::from("b");
    let b = Value::from("");
    // "a" = "b" vs "ab" = "": same bytes if unframed.
    assert_ne!(input_hash([("a", &ab)]), input_hash([("ab", &b)]));
    assert_ne!(
        input_hash([("f", &Value::from("a"))]),
        input_hash([("f", &Value::Secret(Secret::new("a")))])
    );
    assert_ne!(
        input_hash([("f", &Value::Float(0.0))]),
        input_hash([("f", &Value::Float(-0.0))])
    );
}

#[test]
fn tenants_never_share_a_key() {
    let a = LmConfig::new("m").with_api_key(Secret::new("sk-a"));
    let b = LmConfig::new("m").with_api_key(Secret::new("sk-b"));
    let none = LmConfig::new("m");
    assert_ne!(lm_config_hash(&a), lm_config_hash(&b));
    assert_ne!(lm_config_hash(&a), lm_config_hash(&none));
    // The option named like the field is a different thing from the field.
    let as_option = LmConfig::new("m").with_option("api_key", Value::Secret(Secret::new("sk-a")));
    assert_ne!(lm_config_hash(&a), lm_config_hash(&as_option));
    let shown = format!("{a:?} {} {:?}", lm_config_hash(&a), lm_config_hash(&a));
    assert!(!shown.contains("sk-a"), "{shown}");
}

/// Fixed inputs and their keys. These literals are the compatibility promise: if one
/// changes, every stored key changes, so bump the domain tags' version. They were
/// computed independently of this crate, by `tests/data/pin_keys.py` (Python's
/// `hashlib`, following the encoding documented in `memo_cache::key`).
#[test]
fn hashes_are_pinned() {
    let question = Value::from("What is 2+2?");
    let context = Value::Map(BTreeMap::from([
        ("n".to_owned(), Value::Int(-3)),
        ("t".to_owned(), Value::Float(0.5)),
        ("ok".to_owned(), Value::Bool(true)),
        (
            "xs".to_owned(),
            Value::List(vec![Value::Null, Value::from("x")]),
        ),
    ]));
    let input = input_hash([("question", &question), ("context", &context)]);
    let lm = lm_config_hash(
        &LmConfig::new("small-model")
            .with_api_key(Secret::new("sk-test-0000"))
            .with_option("temperature", 0.0)
            .with_option("max_tokens", 256),
    );
    let state = predictor_state_hash(&PredictorState {
        signature: "question -> answer".into(),
        instructions: "Answer briefly.".into(),
        demos: vec![
            Demo::new([("question", "1+1?".into())], [("answer", "2".into())]),
            Demo::new([("question", "3+3?".into())], [("answer", "6".into())]),
        ],
        demo_strategy: DemoStrategy::Bootstrap { max_demos: 4 },
    });
    let call = call_key(&lm, &state, &input);
    let empty = Key::of_parts(&[]);
    assert_eq!(
        empty.to_hex(),
        // SHA-256 of no bytes at all: no parts means nothing is hashed.
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    );
    assert_eq!(input.to_hex(), PINS["input"]);
    assert_eq!(lm.to_hex(), PINS["lm"]);
    assert_eq!(state.to_hex(), PINS["state"]);
    assert_eq!(call.to_hex(), PINS["call"]);
    // A name given twice keeps the order of its values.
    let dup_input = input_hash([
        ("n", &Value::Int(2)),
        ("m", &Value::from("x")),
        ("n", &Value::Int(1)),
    ]);
    assert_eq!(dup_input.to_hex(), PINS["dup_input"]);
    let dup_lm = lm_config_hash(
        &LmConfig::new("small-model")
            .with_option("temperature", 0.7)
            .with_option("temperature", 0.0),
    );
    assert_eq!(dup_lm.to_hex(), PINS["dup_lm"]);
    // The generic builder: one part of each kind.
    let builder = KeyBuilder::new("memo-cache/pin/v1")
        .tenant(&Secret::new("tenant-a"))
        .text("matmul")
        .int(-3)
        .uint(7)
        .float(-0.0)
        .bool(true)
        .bytes(&[0, 1])
        .key(&Key::of_parts(&[b"k"]))
        .value(&context)
        .fields([
            ("n", &Value::Int(2)),
            ("m", &Value::from("x")),
            ("n", &Value::Int(1)),
        ])
        .finish();
    assert_eq!(builder.to_hex(), PINS["builder"]);
    assert_eq!(
        KeyBuilder::new("memo-cache/pin/v1").finish(),
        Key::of_parts(&[b"memo-cache/pin/v1"])
    );
}

/// The pinned keys, as `tests/data/pin_keys.py` prints them.
static PINS: std::sync::LazyLock<BTreeMap<&'static str, &'static str>> =
    std::sync::LazyLock::new(|| {
        BTreeMap::from([
            (
                "input",
                "f5406356b0508557b493ef284409eb97adde937ec4eccc3f17c13c3aaf2d4014",
            ),
            (
                "lm",
                "9913721c4b451238550b13035bba5d1d518aa767ed1a30ebbfcaf8523439f09b",
            ),
            (
                "state",
                "015a4c33b3f27b062bcb0ce0686ad008a94399b4998fa4ef89e6f5a766030211",
            ),
            (
                "call",
                "b1e677c0832d3ac4053f799b3ee391745475d0891b7982caecb7ee6a560e6d8b",
            ),
            (
                "dup_input",
                "044d4312e49a001c7aa7f1d250e2d5ee8da8700b5471b71471c663392841f668",
            ),
            (
                "builder",
                "ba7bf8c096523b5fe081706cb4966e8f317934580cf18a2cc9d8d3da7205549d",
            ),
            (
                "dup_lm",
                "5fa6d9665f47cd36de68175d6a018d34694ec25b6cf9103f767044e2d67fdf2a",
            ),
        ])
    });

/// The independent Python script still prints exactly the pinned keys (`python3` is
/// required: `cargo xtask test` installs it on a fresh machine).
#[test]
fn the_pins_are_what_the_independent_script_computes() {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/pin_keys.py");
    let out = std::process::Command::new("python3")
        .arg(script)
        .output()
        .unwrap_or_else(|e| panic!("python3 {script}: {e} (install the Debian package python3)"));
    assert!(out.status.success(), "{script} failed: {out:?}");
    let printed: BTreeMap<String, String> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .filter_map(|l| l.split_once(' '))
        .map(|(n, k)| (n.to_owned(), k.to_owned()))
        .collect();
    let pinned: BTreeMap<String, String> = PINS
        .iter()
        .map(|(n, k)| ((*n).to_owned(), (*k).to_owned()))
        .collect();
    assert_eq!(printed, pinned);
}

#[test]
fn an_option_given_twice_keeps_the_order_of_its_values() {
    let lm = |first: f64, then: f64| {
        lm_config_hash(
            &LmConfig::new("m")
                .with_option("temperature", first)
                .with_option("max_tokens", 8)
                .with_option("temperature", then),
        )
    };
    // A client that lets the last value win sends temperature 0.7, then 0.0.
    assert_ne!(lm(0.0, 0.7), lm(0.7, 0.0));
    assert_eq!(lm(0.0, 0.7), lm(0.0, 0.7));
    let (one, two) = (Value::Int(1), Value::Int(2));
    assert_ne!(
        input_hash([("n", &one), ("n", &two)]),
        input_hash([("n", &two), ("n", &one)])
    );
    // Other names still move freely around them.
    let x = Value::from("x");
    assert_eq!(
        input_hash([("n", &one), ("m", &x), ("n", &two)]),
        input_hash([("m", &x), ("n", &one), ("n", &two)])
    );
}

#[test]
fn key_shows_as_hex() {
    let k = Key::from_bytes([0xab; 32]);
    assert_eq!(k.to_string(), "ab".repeat(32));
    assert_eq!(format!("{k:?}"), format!("Key({})", "ab".repeat(32)));
    assert_eq!(Key::from_bytes(*k.as_bytes()), k);
}

/// `Value`'s `==` compares floats by their bits, as its docs say and as the hashes do: a
/// NaN equals itself, `0.0` is not `-0.0`, and a configuration holding them follows.
#[test]
fn values_compare_floats_by_their_bits_as_the_hashes_do() {
    let (zero, minus_zero) = (Value::Float(0.0), Value::Float(-0.0));
    assert_ne!(zero, minus_zero);
    assert_ne!(input_hash([("f", &zero)]), input_hash([("f", &minus_zero)]));
    let nan = Value::Float(f64::NAN);
    assert_eq!(nan, nan.clone());
    assert_eq!(
        Value::List(vec![nan.clone()]),
        Value::List(vec![nan.clone()])
    );
    let other_nan = Value::Float(f64::from_bits(f64::NAN.to_bits() ^ 1));
    assert_ne!(nan, other_nan);
    assert_eq!(
        LmConfig::new("m").with_option("t", nan.clone()),
        LmConfig::new("m").with_option("t", nan)
    );
    assert_ne!(
        LmConfig::new("m").with_option("t", 0.0),
        LmConfig::new("m").with_option("t", -0.0)
    );
    assert_eq!(Value::from("a"), Value::from("a"));
    assert_ne!(Value::from("a"), Value::Secret(Secret::new("a")));
}

/// One part given to a [`KeyBuilder`].
#[derive(Clone, Debug)]
enum Part {
    Tenant(String),
    Text(String),
    Int(i64),
    Uint(u64),
    Float(f64),
    Bool(bool),
    Bytes(Vec<u8>),
    Key(u8),
    Value(Value),
    Fields(Vec<(String, Value)>),
}

fn build(parts: &[Part]) -> Key {
    let mut b = KeyBuilder::new("t");
    for p in parts {
        b = match p {
            Part::Tenant(t) => b.tenant(&Secret::new(t.clone())),
            Part::Text(t) => b.text(t),
            Part::Int(i) => b.int(*i),
            Part::Uint(u) => b.uint(*u),
            Part::Float(f) => b.float(*f),
            Part::Bool(x) => b.bool(*x),
            Part::Bytes(x) => b.bytes(x),
            Part::Key(k) => b.key(&Key::from_bytes([*k; 32])),
            Part::Value(v) => b.value(v),
            Part::Fields(f) => b.fields(f.iter().map(|(k, v)| (k.as_str(), v))),
        };
    }
    b.finish()
}

/// What a part means: the shorthands are the value parts they document
/// (`.int(i)` is `.value(&Value::Int(i))`), fields are each name's values in order.
fn canon_part(p: &Part) -> String {
    match p {
        Part::Text(t) => canon(&Value::from(t.as_str())),
        Part::Int(i) => canon(&Value::Int(*i)),
        Part::Float(f) => canon(&Value::Float(*f)),
        Part::Bool(x) => canon(&Value::Bool(*x)),
        Part::Value(v) => canon(v),
        Part::Fields(f) => format!("Fields{:?}", per_name(f)),
        other => format!("{other:?}"),
    }
}

/// Parts from small domains, so equal sequences (and near misses) are common.
fn part() -> impl Strategy<Value = Part> {
    prop_oneof![
        "[01]?".prop_map(Part::Tenant),
        "[01]?".prop_map(Part::Text),
        (0i64..2).prop_map(Part::Int),
        (0u64..2).prop_map(Part::Uint),
        prop_oneof![Just(0.0), Just(-0.0), Just(1.0), Just(f64::NAN)].prop_map(Part::Float),
        any::<bool>().prop_map(Part::Bool),
        prop::collection::vec(0u8..2, 0..2).prop_map(Part::Bytes),
        (0u8..2).prop_map(Part::Key),
        prop_oneof![
            Just(Value::Int(0)),
            Just(Value::from("0")),
            Just(Value::Null)
        ]
        .prop_map(Part::Value),
        dup_fields().prop_map(Part::Fields),
    ]
}

proptest! {
    /// Every part counts, in order, with its kind; floats by their bits; fields by each
    /// name's values in order (the order of different names does not count).
    #[test]
    fn builder_keys_are_equal_exactly_when_their_parts_are(
        a in prop::collection::vec(part(), 0..4),
        b in prop::collection::vec(part(), 0..4),
    ) {
        let ca: Vec<String> = a.iter().map(canon_part).collect();
        let cb: Vec<String> = b.iter().map(canon_part).collect();
        prop_assert_eq!(ca == cb, build(&a) == build(&b), "{:?} / {:?}", ca, cb);
    }

    #[test]
    fn builder_fields_ignore_the_order_of_names(fields in fields(), seed in any::<u64>()) {
        let mut shuffled = fields.clone();
        // Names are distinct here: any permutation is the same map.
        let n = shuffled.len();
        if n > 1 {
            shuffled.rotate_left((seed as usize) % n);
        }
        prop_assert_eq!(build(&[Part::Fields(fields)]), build(&[Part::Fields(shuffled)]));
    }
}

#[test]
fn builder_keeps_tenants_kinds_and_float_bits_apart() {
    let t = |tenant: Option<&str>| {
        let b = KeyBuilder::new("t");
        let b = match tenant {
            Some(x) => b.tenant(&Secret::new(x)),
            None => b,
        };
        b.text("same").finish()
    };
    assert_ne!(t(Some("a")), t(Some("b")));
    assert_ne!(t(Some("a")), t(None));
    assert_ne!(t(Some("")), t(None));
    // A tenant is not a text part of the same string.
    assert_ne!(
        KeyBuilder::new("t").tenant(&Secret::new("a")).finish(),
        KeyBuilder::new("t").text("a").finish()
    );
    let one = |f: fn(KeyBuilder) -> KeyBuilder| f(KeyBuilder::new("t")).finish();
    let keys = [
        one(|b| b.int(1)),
        one(|b| b.uint(1)),
        one(|b| b.float(1.0)),
        one(|b| b.text("1")),
        one(|b| b.bytes(b"1")),
        one(|b| b.bool(true)),
    ];
    for (i, a) in keys.iter().enumerate() {
        for b in &keys[i + 1..] {
            assert_ne!(a, b);
        }
    }
    assert_ne!(one(|b| b.float(0.0)), one(|b| b.float(-0.0)));
    assert_eq!(one(|b| b.float(f64::NAN)), one(|b| b.float(f64::NAN)));
    assert_ne!(
        one(|b| b.text("ab").text("c")),
        one(|b| b.text("a").text("bc"))
    );
    // The secret never prints.
    let shown = format!("{:?}", KeyBuilder::new("t").tenant(&Secret::new("sk-9")));
    assert!(!shown.contains("sk-9"), "{shown}");
}
