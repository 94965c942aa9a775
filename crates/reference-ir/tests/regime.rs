//! The regime from the backend and the device from the machine, through the front door on a
//! real directory: a toolchain's option, compiler or prelude change is a miss that names what
//! changed, never a hit; two CPUs never share a key and the miss names what differs.
#![allow(clippy::unwrap_used)]

use reference_ir::ir::{Code, Expr, Index, Precision, Stmt, Symbol, TensorNode};
use reference_ir::schedule::{ReferenceLanguage, Schedule};
use schedule_cache::DiskCache;
use schedule_cache::{
    Cpu, KeyComponent, Limits, Measurements, Miss, ScheduleCache, TimingIdentity, Toolchain,
};
use std::path::Path;

/// `for i in 0..64 { y[i] = 1 }` with fresh ids, and its loop variable.
fn build() -> (Code, Symbol) {
    let i = Symbol::fresh("i");
    let y = TensorNode::new("y", &[64], Precision::F32);
    let body = vec![Stmt::set(&y, vec![Index::var(&i)], Expr::Const(1.0))];
    (Code::new(vec![Stmt::for_(&i, 0, 64, body)]), i)
}

/// A compiler identity as `cc-backend` gives one: command, version, fixed flags.
fn identity(version: &str) -> String {
    format!("cc\ncc (Debian {version}) {version}\n-O2 -shared -fPIC\ntarget x86_64-linux")
}

const PRELUDE: &str = "#include <math.h>\n";

fn toolchain(version: &str, options: &[&str], prelude: &str) -> Toolchain {
    Toolchain::new(&identity(version), options.iter().copied()).with_prelude(prelude)
}

fn cpu(model: &str, features: &[&str]) -> Cpu {
    let info = format!(
        "processor\t: 0\nvendor_id\t: GenuineIntel\ncpu family\t: 6\nmodel\t\t: 143\nmodel name\t: {model}\ncache size\t: 107520 KB\n"
    );
    let features = features.iter().map(|f| f.to_string()).collect();
    Cpu::from_cpuinfo(Some(&info), "x86_64", features, 8)
}

fn cache(dir: &Path, timing: TimingIdentity) -> ScheduleCache<ReferenceLanguage> {
    ScheduleCache::new(ReferenceLanguage, "cc", timing, DiskCache::new(dir))
        .with_schedule_format("ref-ops-1")
}

fn here() -> TimingIdentity {
    cpu(
        "Intel(R) Xeon(R) Platinum 8480+",
        &["avx2", "fma", "avx512f"],
    )
    .timing_identity(None)
}

/// Tunes (splits `i` by 8) and stores under `c`.
fn store(c: &ScheduleCache<ReferenceLanguage>) {
    let (code, i) = build();
    let mut s = Schedule::new();
    s.split(&i, 8);
    let p = c
        .store(&code, &s.ops, Measurements::new(vec![1e-6]))
        .unwrap();
    assert!(p.outcome.is_stored(), "{p:?}");
}

fn lookup(c: &ScheduleCache<ReferenceLanguage>) -> Result<(), Miss> {
    let (code, _) = build();
    c.lookup(&code).unwrap().map(|_| ())
}

/// The examples' path: one option list for the compile and the toolchain. `-O2` → `-O3` is a
/// miss in the codegen component that names the option; the same toolchain hits.
#[test]
fn an_option_change_is_a_miss_that_names_the_option() {
    let tmp = tempfile::tempdir().unwrap();
    let with = |options: &[&str]| {
        cache(tmp.path(), here()).with_toolchain(toolchain("12.2.0-14", options, PRELUDE))
    };
    store(&with(&["-O2", "-ffp-contract=off"]));
    assert_eq!(lookup(&with(&["-O2", "-ffp-contract=off"])), Ok(()));
    // What `kcache show` prints of the entry: the toolchain's labelled groups.
    let (code, _) = build();
    let hit = with(&["-O2", "-ffp-contract=off"])
        .lookup(&code)
        .unwrap()
        .unwrap();
    let (_, line) = hit
        .entry
        .key_summary
        .iter()
        .find(|(c, _)| *c == KeyComponent::Codegen)
        .unwrap();
    assert!(
        line.starts_with("options: -O2 -ffp-contract=off prelude: #")
            && line.contains(" compiler: cc cc (Debian 12.2.0-14) 12.2.0-14 #")
            && line.ends_with(" limits: threads=0 vector=0B local=0B")
            && !line.contains("tag:"),
        "{line}"
    );
    let miss = lookup(&with(&["-O3", "-ffp-contract=off"])).unwrap_err();
    assert!(
        matches!(&miss, Miss::NotFound { differing, .. } if differing == &[KeyComponent::Codegen]),
        "{miss:?}"
    );
    assert_eq!(
        miss.to_string(),
        "no entry at this key; the same code has 1 entry under keys that differ in: codegen (codegen: options -O2 → -O3)"
    );
    // An option added, one removed.
    let added = lookup(&with(&["-O2", "-ffp-contract=off", "-march=native"])).unwrap_err();
    assert!(
        added
            .to_string()
            .ends_with("(codegen: options (none) → -march=native)"),
        "{added}"
    );
}

/// A compiler upgrade and another prelude: each a miss naming its group.
#[test]
fn a_compiler_or_prelude_change_is_a_miss_that_names_it() {
    let tmp = tempfile::tempdir().unwrap();
    let with = |version: &str, prelude: &str| {
        cache(tmp.path(), here()).with_toolchain(toolchain(version, &["-O2"], prelude))
    };
    store(&with("12.2.0-14", PRELUDE));
    let upgraded = lookup(&with("13.2.0-1", PRELUDE)).unwrap_err().to_string();
    assert!(
        upgraded.contains("(codegen: compiler 12.2.0-14) 12.2.0-14 #"),
        "{upgraded}"
    );
    assert!(upgraded.contains(" → 13.2.0-1) 13.2.0-1 #"), "{upgraded}");
    let prelude = lookup(&with("12.2.0-14", "#include <stdint.h>\n"))
        .unwrap_err()
        .to_string();
    assert!(prelude.contains("(codegen: prelude #"), "{prelude}");
    assert!(!prelude.contains("options"), "{prelude}");
}

/// The naive regime the examples had (the codegen tag from the compiler identity alone, the
/// options passed per kernel) replays the `-O2` winner under `-O3`: the hit the toolchain
/// prevents.
#[test]
fn the_identity_alone_replays_across_options() {
    let tmp = tempfile::tempdir().unwrap();
    let naive = || {
        cache(tmp.path(), here()).with_limits(Limits {
            codegen_tag: identity("12.2.0-14"),
            ..Limits::default()
        })
    };
    store(&naive()); // tuned under -O2, which the key never saw
    assert_eq!(
        lookup(&naive()),
        Ok(()),
        "compiled with -O3 now: a silent hit"
    );
    let told = naive().with_toolchain(toolchain("12.2.0-14", &["-O3"], PRELUDE));
    assert!(lookup(&told).is_err());
}

/// `with_limits` after `with_toolchain` keeps the toolchain (a record of one's own wins).
#[test]
fn limits_given_later_keep_the_toolchain() {
    let tmp = tempfile::tempdir().unwrap();
    let o2 = toolchain("12.2.0-14", &["-O2"], PRELUDE);
    let a = cache(tmp.path(), here())
        .with_toolchain(o2.clone())
        .with_limits(Limits::default());
    let b = cache(tmp.path(), here()).with_toolchain(o2.clone());
    let (code, _) = build();
    assert_eq!(a.key(&code).unwrap(), b.key(&code).unwrap());
    let own = Limits {
        toolchain: Some(toolchain("12.2.0-14", &["-O3"], PRELUDE)),
        ..Limits::default()
    };
    let c = cache(tmp.path(), here())
        .with_toolchain(o2)
        .with_limits(own);
    assert_ne!(c.key(&code).unwrap(), b.key(&code).unwrap());
    // No toolchain at all keys as before toolchains existed: not as an empty one.
    let none = cache(tmp.path(), here());
    let empty = cache(tmp.path(), here()).with_toolchain(Toolchain::default());
    assert_ne!(none.key(&code).unwrap(), empty.key(&code).unwrap());
}

/// Two CPUs (constructed): different keys, a miss in the device component naming what
/// differs, and readable forms that show the difference.
#[test]
fn two_cpus_never_share_a_key_and_the_miss_names_the_difference() {
    let tmp = tempfile::tempdir().unwrap();
    let sapphire = cpu(
        "Intel(R) Xeon(R) Platinum 8480+",
        &["avx2", "fma", "avx512f"],
    );
    let older = cpu("Intel(R) Xeon(R) Platinum 8480+", &["avx2", "fma"]);
    let other = cpu("Intel(R) Xeon(R) Gold 6148", &["avx2", "fma", "avx512f"]);
    assert_ne!(sapphire.readable(), older.readable());
    assert!(
        sapphire.readable().contains("avx512"),
        "{}",
        sapphire.readable()
    );
    assert!(
        older.readable().contains("x86_64 avx2;"),
        "{}",
        older.readable()
    );
    assert!(other.readable().starts_with("Intel(R) Xeon(R) Gold 6148 ("));

    let on = |c: &Cpu| cache(tmp.path(), c.timing_identity(None));
    store(&on(&sapphire));
    assert_eq!(lookup(&on(&sapphire)), Ok(()));
    let (code, _) = build();
    for (cpu, change) in [
        (&older, "device: +avx512f → (none)"),
        (&other, "device: Platinum 8480+\" → Gold 6148\""),
    ] {
        assert_ne!(
            on(cpu).key(&code).unwrap(),
            on(&sapphire).key(&code).unwrap()
        );
        let miss = lookup(&on(cpu)).unwrap_err();
        assert!(
            matches!(&miss, Miss::NotFound { differing, .. } if differing == &[KeyComponent::Device]),
            "{miss:?}"
        );
        assert!(miss.to_string().ends_with(&format!("({change})")), "{miss}");
    }
    // The machine this runs on: its own key, stable within the process.
    let here = Cpu::this_machine();
    assert_eq!(
        on(&here).key(&code).unwrap(),
        on(&Cpu::this_machine()).key(&code).unwrap()
    );
    assert_ne!(
        on(&here).key(&code).unwrap(),
        on(&sapphire).key(&code).unwrap()
    );
}
