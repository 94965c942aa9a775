//! Cache keys: the component list drives the key, each component separates its regime, no key
//! without a timing identity or from an incomplete identity, and the digest-completeness guard.
#![allow(clippy::unwrap_used)]

use proptest::prelude::*;
use reference_ir::ir::{Code, Expr, Index, Precision, Stmt, Symbol, TensorNode};
use reference_ir::render::REFERENCE_SETTINGS;
use reference_ir::schedule::SavedRefOp;
use schedule_cache::TIMING_SETTING;
use schedule_cache::{
    CacheKey, CompleteIdentity, Config, DiskEntry, ENTRY_VERSION, Error, HINT_DIGITS,
    KEY_COMPONENTS, KeyComponent, KeyInputs, Limits, Registry, Relevance, ScheduleEntry,
    SettingDecl, SettingsRegistry, TimingIdentity, Toolchain, cache_key, canonicalize,
    digest_completeness, key_parts, normalize_objective, to_saved,
};
use std::collections::BTreeMap;

fn code(n: i64) -> CompleteIdentity {
    let i = Symbol::fresh("i");
    let y = TensorNode::new("y", &[16], Precision::F32);
    let c = Code::new(vec![Stmt::for_(
        &i,
        0,
        n,
        vec![Stmt::set(&y, vec![Index::var(&i)], Expr::Const(1.0))],
    )]);
    canonicalize(&c, &[], &BTreeMap::new(), true)
        .into_complete()
        .unwrap()
}

fn limits() -> Limits {
    Limits {
        codegen_tag: "gcc-13-O2".into(),
        worker_pool_tag: "pool8".into(),
        max_threads: 8,
        vector_bytes: 32,
        local_memory_bytes: 1 << 20,
        extra: BTreeMap::new(),
        toolchain: None,
    }
}

/// A toolchain or none, over small alphabets (so equal ones are drawn often): identity,
/// options (the separator `-` and the empty option included), prelude digest.
fn toolchain() -> impl Strategy<Value = Option<Toolchain>> {
    proptest::option::of(
        (
            "[ab]{0,2}",
            proptest::collection::vec("[ab-]{0,2}", 0..3),
            proptest::option::of("[ab]{0,1}"),
        )
            .prop_map(|(identity, options, prelude_digest)| Toolchain {
                identity,
                options,
                prelude_digest,
            }),
    )
}

fn device() -> TimingIdentity {
    TimingIdentity {
        device: "x86_64 avx2 8 cores".into(),
        toolchain: Some("gcc 13.2".into()),
    }
}

fn cfg() -> Config {
    Config::new(reference_ir::render::reference_settings())
}

/// The inputs the tests key under: backend `cc`, the objective the configuration gives, no
/// schedule format. A test that changes one says so: `KeyInputs { field, ..key_inputs(…) }`.
fn key_inputs<'a>(
    config: &'a Config,
    limits: &'a Limits,
    timing_identity: Option<&'a TimingIdentity>,
) -> KeyInputs<'a> {
    KeyInputs {
        backend: "cc",
        config,
        limits,
        timing_identity,
        objective: None,
        schedule_format: "",
    }
}

#[test]
fn key_is_the_listed_components_in_order() {
    let (c, l, d) = (cfg(), limits(), device());
    let id = code(16);
    let inputs = key_inputs(&c, &l, Some(&d));
    let parts = key_parts(&id, &inputs).unwrap();
    let names: Vec<_> = parts.parts.iter().map(|(c, _)| c.name()).collect();
    assert_eq!(
        names,
        [
            "digest", "backend", "format", "numerics", "codegen", "pool", "device", "timing"
        ]
    );
    assert_eq!(
        parts.parts.iter().map(|(c, _)| *c).collect::<Vec<_>>(),
        KEY_COMPONENTS
    );
    // Every component other than the code digest is a full-width SHA-256.
    for (c, v) in &parts.parts[1..] {
        assert_eq!(v.len(), 64, "{c:?}");
        assert!(v.bytes().all(|b| b.is_ascii_hexdigit()), "{c:?}");
    }
    let key = cache_key(&id, &inputs).unwrap();
    let fields: Vec<&str> = key.as_str().split('-').collect();
    assert_eq!(fields.len(), 3, "digest, digest over all components, hints");
    assert_eq!(fields[0], id.digest());
    assert_eq!(fields[1].len(), 64);
    let hints: Vec<&str> = fields[2].split('_').collect();
    assert_eq!(hints.len(), KEY_COMPONENTS.len() - 1);
    for (h, (c, v)) in hints.iter().zip(&parts.parts[1..]) {
        assert_eq!(*h, format!("{}{}", c.prefix(), &v[..HINT_DIGITS]));
    }
    assert!(key.as_str().starts_with(id.digest()));
    // Deterministic.
    assert_eq!(cache_key(&id, &inputs), Some(key));
}

#[test]
fn no_timing_identity_means_no_key() {
    let (c, l) = (cfg(), limits());
    let inputs = key_inputs(&c, &l, None);
    assert_eq!(cache_key(&code(16), &inputs), None);
    assert!(key_parts(&code(16), &inputs).is_none());
}

#[test]
fn each_component_separates_its_regime_and_only_its_part() {
    let (c, l, d) = (cfg(), limits(), device());
    let id = code(16);
    let base = key_inputs(&c, &l, Some(&d));
    let p0 = key_parts(&id, &base).unwrap();

    let other_code = code(8);
    let numerics = cfg().with("numerics.allow_tf32", "true");
    let codegen = cfg().with("large_models", "true");
    let mut backend_limits = limits();
    backend_limits.codegen_tag = "gcc-13-O3".into();
    let mut extra_limits = limits();
    extra_limits
        .extra
        .insert("l2_bytes".into(), "1048576".into());
    let mut pool = limits();
    pool.worker_pool_tag = "pool4".into();
    let dev2 = TimingIdentity {
        device: "x86_64 avx512".into(),
        ..device()
    };
    let queued = cfg().with(TIMING_SETTING, "queued");

    let cases: Vec<(KeyComponent, Option<&CompleteIdentity>, KeyInputs<'_>)> = vec![
        (KeyComponent::Digest, Some(&other_code), base),
        (
            KeyComponent::Backend,
            None,
            KeyInputs {
                backend: "metal",
                ..base
            },
        ),
        (
            KeyComponent::Numerics,
            None,
            KeyInputs {
                config: &numerics,
                ..base
            },
        ),
        (
            KeyComponent::Codegen,
            None,
            KeyInputs {
                config: &codegen,
                ..base
            },
        ),
        (
            KeyComponent::Codegen,
            None,
            KeyInputs {
                limits: &backend_limits,
                ..base
            },
        ),
        (
            KeyComponent::Codegen,
            None,
            KeyInputs {
                limits: &extra_limits,
                ..base
            },
        ),
        (
            KeyComponent::Device,
            None,
            KeyInputs {
                timing_identity: Some(&dev2),
                ..base
            },
        ),
        (
            KeyComponent::Timing,
            None,
            KeyInputs {
                config: &queued,
                ..base
            },
        ),
        (
            KeyComponent::Timing,
            None,
            KeyInputs {
                objective: Some("queued"),
                schedule_format: "",
                ..base
            },
        ),
    ];
    for (component, ident, inputs) in cases {
        let p = key_parts(ident.unwrap_or(&id), &inputs).unwrap();
        assert_eq!(p0.differing(&p), vec![component], "{component:?}");
        assert_ne!(p0.key().unwrap(), p.key().unwrap());
    }
    // The pool signature changes the pool part (and, being in the limits record, codegen).
    let p = key_parts(
        &id,
        &KeyInputs {
            limits: &pool,
            ..base
        },
    )
    .unwrap();
    assert_eq!(
        p0.differing(&p),
        vec![KeyComponent::Codegen, KeyComponent::Pool]
    );
    // An irrelevant setting changes nothing.
    let verbose = cfg().with("log_level", "3");
    let p = key_parts(
        &id,
        &KeyInputs {
            config: &verbose,
            ..base
        },
    )
    .unwrap();
    assert!(p0.differing(&p).is_empty());
}

#[test]
fn objectives_normalize_and_unknown_spellings_pass_through() {
    assert_eq!(normalize_objective("cc", "Isolated"), "isolated");
    assert_eq!(normalize_objective("cc", " queue "), "queued");
    assert_eq!(normalize_objective("cuda", "queued"), "queued2");
    assert_eq!(normalize_objective("hip", "batched"), "queued2");
    assert_eq!(normalize_objective("cc", "wallclock"), "wallclock");
    // Unknown spellings stay apart (the objective is hashed, so any text is fine).
    assert_eq!(normalize_objective("cc", " A/b-C "), "a/b-c");
    assert_ne!(
        normalize_objective("cc", "a/b-c"),
        normalize_objective("cc", "a/b-d")
    );
}

proptest! {
    #[test]
    fn keys_are_always_filename_safe(backend in ".{0,40}", objective in ".{0,40}",
                                     tag in ".{0,40}", dev in ".{0,40}") {
        let c = cfg().with("large_models", &tag);
        let mut l = limits();
        l.codegen_tag = tag.clone();
        l.worker_pool_tag = tag;
        let d = TimingIdentity { device: dev, toolchain: None };
        let id = code(4);
        let key = cache_key(&id, &KeyInputs {
            backend: &backend, config: &c, limits: &l, timing_identity: Some(&d),
            objective: Some(&objective),
            schedule_format: "",
        });
        let key = key.expect("a key whenever the timing identity is present");
        prop_assert_eq!(key.as_str().split('-').count(), 3);
        prop_assert!(CacheKey::new(key.as_str()).is_ok());
        prop_assert!(key.as_str().len() <= 200);
    }
}

/// The digest-completeness guard over everything this crate consults while keying: with the
/// reference registry it passes; if a consumer read a setting that no key component
/// declares, this test fails.
#[test]
fn keying_consults_only_declared_settings() {
    let c = cfg()
        .with(TIMING_SETTING, "queued")
        .with("large_models", "1");
    let (l, d) = (limits(), device());
    let id = code(16);
    let key = digest_completeness(&c, |c| cache_key(&id, &key_inputs(c, &l, Some(&d))))
        .expect("every consulted setting is declared");
    // The configured objective is the one an explicit `queued` gives.
    let explicit = cache_key(
        &id,
        &KeyInputs {
            objective: Some("queued"),
            ..key_inputs(&cfg().with("large_models", "1"), &l, Some(&d))
        },
    );
    assert_eq!(key, explicit);
}

/// A code generator that grows a new setting without declaring it fails the guard: this is the
/// failure a developer sees when adding `config.get("...")` to codegen without a declaration.
#[test]
fn a_new_undeclared_setting_fails_the_guard() {
    fn codegen(c: &Config) -> usize {
        let unroll = c
            .get("unroll_threshold")
            .and_then(|v| v.parse().ok())
            .unwrap_or(4);
        let wide = c.get("large_models") == Some("true");
        unroll + usize::from(wide)
    }
    let c = cfg().with("unroll_threshold", "8");
    let err = digest_completeness(&c, codegen).unwrap_err();
    assert!(matches!(&err, Error::UndeclaredSettings(v) if v == &["unroll_threshold".to_owned()]));
    // Declaring it (as entering codegen) fixes the guard and puts it in the key.
    let mut reg = reference_ir::render::reference_settings();
    reg.declare(SettingDecl {
        name: "unroll_threshold",
        relevance: Relevance::Enters(KeyComponent::Codegen),
    })
    .unwrap();
    let declared = Config::new(reg.clone()).with("unroll_threshold", "8");
    assert_eq!(digest_completeness(&declared, codegen).unwrap(), 8);
    let other = Config::new(reg).with("unroll_threshold", "16");
    let l = limits();
    assert_ne!(
        schedule_cache::codegen_tag(&declared, &l),
        schedule_cache::codegen_tag(&other, &l)
    );
}

#[test]
fn every_reference_setting_is_classified() {
    let reg = reference_ir::render::reference_settings();
    for d in REFERENCE_SETTINGS {
        assert_eq!(reg.relevance(d.name), Some(d.relevance));
        if let Relevance::Irrelevant(reason) = d.relevance {
            assert!(!reason.is_empty());
        }
    }
}

#[test]
fn schedule_entries_round_trip_and_check_their_digest() {
    let (c, l, d) = (cfg(), limits(), device());
    let i = Symbol::fresh("i");
    let y = TensorNode::new("y", &[16], Precision::F32);
    let code = Code::new(vec![Stmt::for_(
        &i,
        0,
        16,
        vec![Stmt::set(&y, vec![Index::var(&i)], Expr::Const(1.0))],
    )]);
    let id = canonicalize(&code, &[], &BTreeMap::new(), true)
        .into_complete()
        .unwrap();
    let mut s = reference_ir::schedule::Schedule::new();
    s.split(&i, 4);
    let (saved, _) = to_saved(
        &reference_ir::schedule::ReferenceLanguage,
        &Registry::new(&id),
        &s.ops,
    )
    .unwrap();
    let inputs = key_inputs(&c, &l, Some(&d));
    let parts = key_parts(&id, &inputs).unwrap();
    let entry =
        ScheduleEntry::new(&id, parts, saved.clone(), vec![1.5e-6, 1.25e-6], Some(3e-6)).unwrap();
    assert_eq!(entry.version(), ENTRY_VERSION);
    assert_eq!(
        <ScheduleEntry<SavedRefOp> as DiskEntry>::VERSION,
        ENTRY_VERSION
    );
    assert_eq!(DiskEntry::digest(&entry), id.digest());
    let text = ron::ser::to_string_pretty(&entry, Default::default()).unwrap();
    let back: ScheduleEntry<SavedRefOp> = ron::from_str(&text).unwrap();
    assert_eq!(back, entry);
    // Tools can read any entry without knowing the op type.
    let generic: ScheduleEntry<ron::Value> = ron::from_str(&text).unwrap();
    assert_eq!(generic.digest, entry.digest);
    // Replay checks the digest.
    let (ops, _) = back
        .replay(&reference_ir::schedule::ReferenceLanguage, &id)
        .unwrap();
    assert_eq!(ops.len(), 1);
    let other = {
        let j = Symbol::fresh("j");
        let c2 = Code::new(vec![Stmt::for_(&j, 0, 8, vec![])]);
        canonicalize(&c2, &[], &BTreeMap::new(), true)
            .into_complete()
            .unwrap()
    };
    assert!(matches!(
        back.replay(&reference_ir::schedule::ReferenceLanguage, &other),
        Err(Error::DigestMismatch { .. })
    ));
    assert!(matches!(
        ScheduleEntry::new(
            &other,
            key_parts(&other, &inputs).unwrap(),
            saved,
            vec![],
            None
        ),
        Err(Error::DigestMismatch { .. })
    ));
}

/// The reference registry with each `(name, component)` of `extra` declared as entering
/// that component.
fn reference_with(extra: &[(&'static str, KeyComponent)]) -> SettingsRegistry {
    let mut reg = reference_ir::render::reference_settings();
    for &(name, c) in extra {
        reg.declare(SettingDecl {
            name,
            relevance: Relevance::Enters(c),
        })
        .unwrap();
    }
    reg
}

/// A registry with one extra setting entering each of numerics, codegen, pool, device and
/// timing (besides the objective), so every component's settings encoding is exercised.
fn wide_registry() -> SettingsRegistry {
    reference_with(&[
        ("x.numerics", KeyComponent::Numerics),
        ("x.codegen", KeyComponent::Codegen),
        ("x.pool", KeyComponent::Pool),
        ("x.device", KeyComponent::Device),
        ("x.timing", KeyComponent::Timing),
    ])
}

fn key_under(c: &Config) -> schedule_cache::KeyParts {
    let (l, d) = (limits(), device());
    key_parts(&code(16), &key_inputs(c, &l, Some(&d))).unwrap()
}

/// Regression (issue 12): the extra timing settings were hashed as `\0unset` when unset, so a
/// value spelled `\0unset` shared the key of no value. Every component now tells them apart.
#[test]
fn a_value_that_mimicked_unset_now_differs() {
    let unset = key_under(&Config::new(wide_registry()));
    for (name, c) in [
        ("x.numerics", KeyComponent::Numerics),
        ("x.codegen", KeyComponent::Codegen),
        ("x.pool", KeyComponent::Pool),
        ("x.device", KeyComponent::Device),
        ("x.timing", KeyComponent::Timing),
    ] {
        for mimic in ["\0unset", "=\0unset", "", "unset"] {
            let set = key_under(&Config::new(wide_registry()).with(name, mimic));
            assert_eq!(unset.differing(&set), vec![c], "{name}={mimic:?}");
            assert_ne!(unset.key().unwrap(), set.key().unwrap());
        }
    }
}

/// The schedule format enters its own component.
#[test]
fn the_schedule_format_separates_entries() {
    let (c, l, d) = (cfg(), limits(), device());
    let inputs = |f| KeyInputs {
        schedule_format: f,
        ..key_inputs(&c, &l, Some(&d))
    };
    let a = key_parts(&code(16), &inputs("ops-1")).unwrap();
    let b = key_parts(&code(16), &inputs("ops-2")).unwrap();
    assert_eq!(a.differing(&b), vec![KeyComponent::Format]);
    let (ka, kb) = (a.key().unwrap(), b.key().unwrap());
    assert_eq!(
        schedule_cache::key_differences(&ka, &kb),
        Some(vec![KeyComponent::Format])
    );
}

fn value() -> impl Strategy<Value = Option<String>> {
    proptest::option::of("(\\PC|[\\x00=\\-_'\"#$\\\\]|\\x00unset|unset){0,6}")
}

proptest! {
    /// Injectivity over settings: two configurations give equal keys exactly when every
    /// declared setting has the same value (or is unset in both), and the differing
    /// components are exactly those of the settings that differ.
    #[test]
    fn keys_are_injective_in_the_settings(
        a in proptest::collection::vec(value(), 5),
        b in proptest::collection::vec(value(), 5),
    ) {
        let names = ["x.numerics", "x.codegen", "x.pool", "x.device", "x.timing"];
        let comps = [
            KeyComponent::Numerics, KeyComponent::Codegen, KeyComponent::Pool,
            KeyComponent::Device, KeyComponent::Timing,
        ];
        let config = |vals: &[Option<String>]| {
            let mut c = Config::new(wide_registry());
            for (n, v) in names.iter().zip(vals) {
                if let Some(v) = v {
                    c.set(n, v);
                }
            }
            c
        };
        let (pa, pb) = (key_under(&config(&a)), key_under(&config(&b)));
        let want: Vec<KeyComponent> = comps
            .iter()
            .zip(a.iter().zip(&b))
            .filter(|(_, (x, y))| x != y)
            .map(|(c, _)| *c)
            .collect();
        prop_assert_eq!(pa.differing(&pb), want);
        prop_assert_eq!(a == b, pa.key().unwrap() == pb.key().unwrap());
    }

    /// Injectivity over the limits record and the timing identity.
    #[test]
    fn keys_are_injective_in_limits_and_device(
        t1 in "[a-c-]{0,3}", t2 in "[a-c-]{0,3}", n1 in 0u32..3, n2 in 0u32..3,
        e1 in proptest::collection::btree_map("[ab]{0,2}", "[ab]{0,2}", 0..3),
        e2 in proptest::collection::btree_map("[ab]{0,2}", "[ab]{0,2}", 0..3),
        tc1 in proptest::option::of("[ab]{0,2}"), tc2 in proptest::option::of("[ab]{0,2}"),
        ch1 in toolchain(), ch2 in toolchain(),
    ) {
        let c = cfg();
        let lim = |t: &str, n: u32, e: &BTreeMap<String, String>, ch: &Option<Toolchain>| Limits {
            codegen_tag: t.to_owned(),
            worker_pool_tag: "pool".into(),
            max_threads: n,
            vector_bytes: 16,
            local_memory_bytes: 0,
            extra: e.clone(),
            toolchain: ch.clone(),
        };
        let (l1, l2) = (lim(&t1, n1, &e1, &ch1), lim(&t2, n2, &e2, &ch2));
        let (d1, d2) = (
            TimingIdentity { device: "dev".into(), toolchain: tc1.clone() },
            TimingIdentity { device: "dev".into(), toolchain: tc2.clone() },
        );
        let parts = |l: &Limits, d: &TimingIdentity| {
            key_parts(&code(4), &key_inputs(&c, l, Some(d))).unwrap()
        };
        let (p1, p2) = (parts(&l1, &d1), parts(&l2, &d2));
        prop_assert_eq!(
            p1.get(KeyComponent::Codegen) == p2.get(KeyComponent::Codegen),
            l1 == l2
        );
        prop_assert_eq!(p1.get(KeyComponent::Device) == p2.get(KeyComponent::Device), tc1 == tc2);
    }
}

/// Regression: a setting could be declared as entering the format component, whose encoding
/// holds no settings, so two configurations differing in it shared a key (a wrong hit). Every
/// declaration the registry accepts now makes the setting's value change the key, in exactly
/// the declared component; the rest are refused.
#[test]
fn every_accepted_declaration_changes_the_key_in_its_component() {
    for component in KEY_COMPONENTS {
        let mut reg = SettingsRegistry::new();
        let declared = reg.declare(SettingDecl {
            name: "x.setting",
            relevance: Relevance::Enters(component),
        });
        let Ok(()) = declared else {
            assert!(
                matches!(declared, Err(Error::InvalidDeclaration { .. })),
                "{component:?}: {declared:?}"
            );
            continue;
        };
        let a = key_under(&Config::new(reg.clone()).with("x.setting", "a"));
        let b = key_under(&Config::new(reg).with("x.setting", "b"));
        assert_eq!(a.differing(&b), vec![component], "{component:?}");
        assert_ne!(a.key().unwrap(), b.key().unwrap(), "{component:?}");
    }
}

/// docs/disk-format.md's worked example, held to the code: the components and the key it
/// lists are what `key_parts` computes for its inputs, and the entry it shows, written by hand
/// into a directory stamped as the doc says, is a hit of the front door.
#[test]
fn the_disk_format_worked_example_matches_the_code() {
    use reference_ir::schedule::ReferenceLanguage;
    use schedule_cache::{DiskCache, ScheduleCache, canonicalize};

    let doc = include_str!("../../../docs/disk-format.md");
    let example = &doc[doc.find("**Worked example**").expect("the example")..];
    let block = |fence: &str| {
        let start = example.find(fence).expect("the fenced block") + fence.len();
        &example[start..start + example[start..].find("```").expect("its end")]
    };
    let listed: BTreeMap<&str, &str> = block("```text\n")
        .lines()
        .filter_map(|l| l.split_once(char::is_whitespace))
        .map(|(name, v)| (name, v.trim()))
        .collect();

    let i = Symbol::fresh("i");
    let y = TensorNode::new("y", &[16], Precision::F32);
    let body = vec![Stmt::set(&y, vec![Index::var(&i)], Expr::Const(1.0))];
    let code = Code::new(vec![Stmt::for_(&i, 0, 16, body)]);
    let reg = reference_with(&[
        ("pool_mode", KeyComponent::Pool),
        ("dev_clock", KeyComponent::Device),
        ("warmup", KeyComponent::Timing),
    ]);
    let config = Config::new(reg)
        .with("numerics.fast_math", "1")
        .with("large_models", "yes")
        .with("pool_mode", "spin")
        .with("dev_clock", "boost")
        .with("warmup", "3")
        .with(TIMING_SETTING, "Queue");
    let limits = Limits {
        codegen_tag: "gcc-13".into(),
        worker_pool_tag: "pool8".into(),
        max_threads: 8,
        vector_bytes: 32,
        local_memory_bytes: 1 << 20,
        extra: BTreeMap::from([("b".into(), "2".into()), ("a".into(), "1".into())]),
        toolchain: None,
    };
    let device = TimingIdentity {
        device: "x86 avx2".into(),
        toolchain: Some("gcc 13.2".into()),
    };
    let id = canonicalize(&code, &[], &BTreeMap::new(), true)
        .into_complete()
        .unwrap();
    assert!(example.contains(id.digest()), "the example's code digest");
    let inputs = KeyInputs {
        backend: "cc",
        config: &config,
        limits: &limits,
        timing_identity: Some(&device),
        objective: None,
        schedule_format: "ops-1",
    };
    let parts = key_parts(&id, &inputs).unwrap();
    for (c, v) in &parts.parts[1..] {
        assert_eq!(listed.get(c.name()), Some(&v.as_str()), "{c:?}");
    }
    let key = cache_key(&id, &inputs).unwrap();
    assert_eq!(listed.get("key"), Some(&key.as_str()));

    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("regime.stamp"), "2\n").unwrap();
    std::fs::write(tmp.path().join(format!("{key}.ron")), block("```ron\n")).unwrap();
    let cache = ScheduleCache::new(ReferenceLanguage, "cc", device, DiskCache::new(tmp.path()))
        .with_limits(limits)
        .with_config(config)
        .with_schedule_format("ops-1");
    let hit = cache
        .lookup(&code)
        .unwrap()
        .expect("the hand-written entry");
    assert_eq!(hit.key, key);
    assert_eq!(hit.entry.times, [1e-6, 2e-6]);
    assert_eq!(hit.entry.baseline_time, Some(3e-6));
    assert!(hit.ops.is_empty());
}

/// docs/disk-format.md's worked example "with a toolchain", held to the code: the codegen
/// component it lists is what `key_parts` computes for the example's inputs with the toolchain
/// it names, and every other component is the worked example's.
#[test]
fn the_disk_format_toolchain_example_matches_the_code() {
    let doc = include_str!("../../../docs/disk-format.md");
    let example = &doc[doc.find("**Worked example**").expect("the example")..];
    let with = &example[example
        .find("**With a toolchain**")
        .expect("the toolchain example")..];
    let after = "give codegen\n`";
    let at = with.find(after).expect("its codegen value") + after.len();
    let listed = &with[at..at + 64];
    let config = Config::new(reference_with(&[
        ("pool_mode", KeyComponent::Pool),
        ("dev_clock", KeyComponent::Device),
        ("warmup", KeyComponent::Timing),
    ]))
    .with("numerics.fast_math", "1")
    .with("large_models", "yes")
    .with("pool_mode", "spin")
    .with("dev_clock", "boost")
    .with("warmup", "3")
    .with(TIMING_SETTING, "Queue");
    let limits = Limits {
        codegen_tag: "gcc-13".into(),
        worker_pool_tag: "pool8".into(),
        max_threads: 8,
        vector_bytes: 32,
        local_memory_bytes: 1 << 20,
        extra: BTreeMap::from([("b".into(), "2".into()), ("a".into(), "1".into())]),
        toolchain: None,
    };
    let device = TimingIdentity {
        device: "x86 avx2".into(),
        toolchain: Some("gcc 13.2".into()),
    };
    let inputs = |limits| KeyInputs {
        backend: "cc",
        config: &config,
        limits,
        timing_identity: Some(&device),
        objective: None,
        schedule_format: "ops-1",
    };
    let with_toolchain = Limits {
        toolchain: Some(
            Toolchain::new("cc 12.2", ["-O2", "-ffp-contract=off"])
                .with_prelude("#include <math.h>\n"),
        ),
        ..limits.clone()
    };
    let before = key_parts(&code(16), &inputs(&limits)).unwrap();
    let after = key_parts(&code(16), &inputs(&with_toolchain)).unwrap();
    assert_eq!(after.get(KeyComponent::Codegen), Some(listed));
    assert_eq!(after.differing(&before), vec![KeyComponent::Codegen]);
}
