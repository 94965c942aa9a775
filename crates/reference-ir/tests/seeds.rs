//! Seeds through the front door: what `ScheduleCache::seeds` offers after a miss, what
//! `ScheduleCache::candidate` rebuilds, and what it refuses.
#![allow(clippy::unwrap_used)]

use reference_ir::ir::{Code, Expr, Index, Precision, Stmt, Symbol, TensorNode};
use reference_ir::schedule::{ReferenceLanguage, Schedule, apply_ops};
use schedule_cache::{
    CacheKey, Error, KeyComponent, Limits, Measurements, ScheduleCache, SeedOrigin, TimingIdentity,
    size_free_digest,
};
use schedule_cache::{DiskCache, Lookup, NearIndexError, Store, StoreOutcome, StorePolicy, Stored};

/// `for i in 0..n { for j in 0..n { y[i*n+j] = x[i*n+j] * 2 } }` with fresh ids; with
/// `extra`, one more statement (another loop nest).
fn build(n: usize, extra: bool) -> (Code, Symbol) {
    let (i, j) = (Symbol::fresh("i"), Symbol::fresh("j"));
    let x = TensorNode::new("x", &[n * n], Precision::F32);
    let y = TensorNode::new("y", &[n * n], Precision::F32);
    let at = || Index::var(&j).plus(n as i64, &i);
    let mut body = vec![Stmt::set(
        &y,
        vec![at()],
        Expr::bin(
            reference_ir::ir::BinOp::Mul,
            Expr::get(&x, vec![at()]),
            Expr::Const(2.0),
        ),
    )];
    if extra {
        body.push(Stmt::set(&y, vec![at()], Expr::Const(1.0)));
    }
    let m = n as i64;
    let code = Code::new(vec![Stmt::for_(&i, 0, m, vec![Stmt::for_(&j, 0, m, body)])]);
    (code, i)
}

fn cache<S: Store>(store: S, codegen: &str) -> ScheduleCache<ReferenceLanguage, S> {
    ScheduleCache::new(
        ReferenceLanguage,
        "cc",
        TimingIdentity {
            device: "dev".into(),
            toolchain: None,
        },
        store,
    )
    .with_limits(Limits {
        codegen_tag: codegen.into(),
        ..Limits::default()
    })
}

/// Stores `split(i, 8)` for the n x n code under `codegen`.
fn store_split<S: Store>(c: &ScheduleCache<ReferenceLanguage, S>, n: usize, time: f64) {
    let (code, i) = build(n, false);
    let mut s = Schedule::new();
    s.split(&i, 8);
    let p = c
        .store(&code, &s.ops, Measurements::new(vec![time]))
        .unwrap();
    assert_eq!(p.outcome, StoreOutcome::Stored);
}

#[test]
fn same_code_and_near_code_seeds_are_offered_ranked_and_rebuilt() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("c");
    store_split(&cache(DiskCache::new(&dir), "A"), 64, 2e-6);

    // A codegen change: the same code's entry, differing in codegen.
    let b = cache(DiskCache::new(&dir), "B");
    let (code, _) = build(64, false);
    assert!(b.lookup(&code).unwrap().is_err());
    let seeds = b.seeds(&code).unwrap();
    assert_eq!(seeds.near_index, None);
    assert_eq!(seeds.seeds.len(), 1, "{seeds:?}");
    assert_eq!(
        seeds.seeds[0].origin(),
        &SeedOrigin::SameCode {
            differing: vec![KeyComponent::Codegen]
        }
    );
    let candidate = b.candidate(&seeds.seeds[0], &code).unwrap();
    apply_ops(&candidate.ops, &code).unwrap();

    // A size change: code of the same loop nest at 96, near code from the 64 entry, under
    // the same regime ranked before... nothing else: one seed, and after B stores its own
    // 64 winner the same code's seed under A comes first for 64 code under a third regime.
    let a = cache(DiskCache::new(&dir), "A");
    let (code96, _) = build(96, false);
    let seeds = a.seeds(&code96).unwrap();
    assert_eq!(seeds.seeds.len(), 1, "{seeds:?}");
    assert!(
        matches!(seeds.seeds[0].origin(), SeedOrigin::NearCode { differing, .. } if differing.is_empty()),
        "{:?}",
        seeds.seeds[0].origin()
    );
    let candidate = a.candidate(&seeds.seeds[0], &code96).unwrap();
    let done = apply_ops(&candidate.ops, &code96).unwrap();
    assert_ne!(format!("{done:?}"), format!("{code96:?}"));

    // The seed does not apply at 60 (8 does not divide it): the caller's apply refuses.
    let (code60, _) = build(60, false);
    let seeds = a.seeds(&code60).unwrap();
    let candidate = a.candidate(&seeds.seeds[0], &code60).unwrap();
    assert!(apply_ops(&candidate.ops, &code60).is_err());

    // Code of another loop nest is offered nothing, and a seed found for one shape is
    // dropped on code of another.
    let (other, _) = build(64, true);
    assert!(a.seeds(&other).unwrap().is_empty());
    let seed = a.seeds(&code96).unwrap().seeds.remove(0);
    let dropped = a.candidate(&seed, &other).unwrap_err();
    assert!(
        dropped.reason.contains("another loop-nest structure"),
        "{dropped}"
    );

    // Ranking: same code before near code, then fewer differing components.
    store_split(&b, 64, 1e-6);
    let c = cache(DiskCache::new(&dir), "C");
    let seeds = c.seeds(&code).unwrap();
    let origins: Vec<_> = seeds.seeds.iter().map(|s| s.origin().clone()).collect();
    assert_eq!(origins.len(), 2, "{origins:?}");
    assert!(
        origins
            .iter()
            .all(|o| matches!(o, SeedOrigin::SameCode { .. }))
    );
    assert_eq!(seeds.seeds[0].origin_best_time(), Some(1e-6));
}

#[test]
fn the_size_free_identity_ignores_extents_only() {
    let id = |n, extra| {
        let (code, _) = build(n, extra);
        size_free_digest(&(&code).into()).unwrap()
    };
    assert_eq!(id(64, false), id(96, false));
    assert_ne!(id(64, false), id(64, true));
    let (code, _) = build(64, false);
    let digest = schedule_cache::Subject::new(&code)
        .identity()
        .unwrap()
        .digest()
        .to_owned();
    assert_ne!(id(64, false), digest, "never a code digest");
}

/// A store of the caller's own, without a near-code index.
struct Plain(DiskCache);

impl Store for Plain {
    fn store_with<E: Stored>(
        &self,
        key: Option<&CacheKey>,
        entry: &E,
        policy: StorePolicy,
    ) -> Result<StoreOutcome, Error> {
        self.0.store_with(key, entry, policy)
    }
    fn probe<E: Stored>(&self, key: Option<&CacheKey>, digest: &str) -> Lookup<E> {
        self.0.probe(key, digest)
    }
    fn location(&self) -> String {
        "plain".into()
    }
}

#[test]
fn a_store_without_a_near_code_index_says_so_and_still_offers_the_same_code() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("c");
    store_split(&cache(Plain(DiskCache::new(&dir)), "A"), 64, 2e-6);
    let b = cache(Plain(DiskCache::new(&dir)), "B");
    let (code, _) = build(64, false);
    let seeds = b.seeds(&code).unwrap();
    assert_eq!(
        seeds.near_index,
        Some(NearIndexError::Unsupported {
            store: "plain".into()
        })
    );
    assert_eq!(seeds.seeds.len(), 1);
    let (code96, _) = build(96, false);
    assert!(b.seeds(&code96).unwrap().is_empty());
}

/// The seeds offered, against a reference computed from a model of what was stored: after
/// random stores of codes of two loop nests at three sizes under three regimes, every query
/// offers exactly the stored entries of the same code under other components and of the
/// same nest at other sizes (the indexes are a fast path for a scan of everything stored).
#[test]
fn seeds_match_a_reference_model_of_the_stores() {
    use std::collections::{BTreeMap, BTreeSet};
    let mut rng = 0x5eed_u64;
    let mut next = move |n: u64| {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng % n
    };
    let sizes = [8usize, 16, 24];
    let codegens = ["A", "B", "C"];
    for round in 0..12 {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("c");
        // key -> (digest, shape)
        let mut model: BTreeMap<String, (String, String)> = BTreeMap::new();
        for _ in 0..5 {
            let n = sizes[next(3) as usize];
            let extra = next(2) == 1;
            let codegen = codegens[next(3) as usize];
            let c = cache(DiskCache::new(&dir), codegen);
            let (code, i) = build(n, extra);
            let mut s = Schedule::new();
            s.split(&i, 8);
            let p = c
                .store(&code, &s.ops, Measurements::new(vec![1e-6]))
                .unwrap();
            let digest = schedule_cache::Subject::new(&code)
                .identity()
                .unwrap()
                .digest()
                .to_owned();
            let shape = size_free_digest(&(&code).into()).unwrap();
            model.insert(p.key.unwrap().to_string(), (digest, shape));
        }
        for n in sizes {
            for extra in [false, true] {
                for codegen in codegens {
                    let c = cache(DiskCache::new(&dir), codegen);
                    let (code, _) = build(n, extra);
                    let own = c.key(&code).unwrap().unwrap().to_string();
                    let digest = schedule_cache::Subject::new(&code)
                        .identity()
                        .unwrap()
                        .digest()
                        .to_owned();
                    let shape = size_free_digest(&(&code).into()).unwrap();
                    let expected: BTreeSet<String> = model
                        .iter()
                        .filter(|(k, (d, s))| **k != own && (*d == digest || *s == shape))
                        .map(|(k, _)| k.clone())
                        .collect();
                    let seeds = c.seeds(&code).unwrap();
                    let got: BTreeSet<String> =
                        seeds.seeds.iter().map(|s| s.key().to_string()).collect();
                    assert_eq!(
                        got, expected,
                        "round {round}: n={n} extra={extra} {codegen}"
                    );
                    for s in &seeds.seeds {
                        let same = model[&s.key().to_string()].0 == digest;
                        assert_eq!(matches!(s.origin(), SeedOrigin::SameCode { .. }), same);
                    }
                }
            }
        }
    }
}

/// Regression (issue 39): a near-code index line is only a hint of where to look; a seed's
/// structure was taken from the caller's own size-free identity, so a line naming an entry of
/// code of another loop nest made a near-code seed of it. A forged line is now passed over
/// (the entry records its own code's size-free identity), the honest line still offers its
/// seed, and an entry that records none (written before entries recorded it) is not offered
/// as near code, while it still is as the same code under other components.
#[test]
fn a_forged_near_code_line_naming_another_structure_offers_no_seed() {
    use std::io::Write;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("c");
    let a = cache(DiskCache::new(&dir), "A");
    store_split(&a, 64, 2e-6);
    let honest = a.key(&build(64, false).0).unwrap().unwrap();
    // An entry of another loop nest (one more statement), stored honestly under its own shape.
    let (other, i) = build(64, true);
    let mut s = Schedule::new();
    s.split(&i, 8);
    let foreign = a
        .store(&other, &s.ops, Measurements::new(vec![1e-9]))
        .unwrap()
        .key
        .unwrap();

    // The forgery: a line naming the other nest's entry in the index of the 64/96 nest.
    let (code96, _) = build(96, false);
    let shape = size_free_digest(&(&code96).into()).unwrap();
    assert_ne!(shape, size_free_digest(&(&other).into()).unwrap());
    let mut index = std::fs::OpenOptions::new()
        .append(true)
        .open(dir.join(format!("{shape}.keys")))
        .unwrap();
    writeln!(index, "n {foreign}").unwrap();
    drop(index);
    assert_eq!(DiskCache::new(&dir).near_keys(&shape).unwrap().len(), 2);

    let seeds = a.seeds(&code96).unwrap();
    let offered: Vec<String> = seeds.seeds.iter().map(|s| s.key().to_string()).collect();
    assert_eq!(offered, [honest.to_string()], "{seeds:?}");
    assert!(
        seeds.skipped.iter().any(
            |(k, why)| *k == foreign.to_string() && why.contains("another loop-nest structure")
        ),
        "{:?}",
        seeds.skipped
    );
    // The honest seed still rebuilds and applies on the caller's code.
    let candidate = a.candidate(&seeds.seeds[0], &code96).unwrap();
    apply_ops(&candidate.ops, &code96).unwrap();

    // An entry without the recorded identity (an older entry): no near-code seed; as the
    // same code under another codegen it is still offered, behind the digest guard.
    let path = dir.join(format!("{honest}.ron"));
    let text = std::fs::read_to_string(&path).unwrap();
    let older: String = text
        .lines()
        .filter(|l| !l.trim_start().starts_with("size_free:"))
        .collect::<Vec<_>>()
        .join("\n");
    assert_ne!(older, text, "the entry recorded its size-free identity");
    std::fs::write(&path, older).unwrap();
    let seeds = a.seeds(&code96).unwrap();
    assert!(seeds.is_empty(), "{seeds:?}");
    assert!(
        seeds
            .skipped
            .iter()
            .any(|(k, why)| *k == honest.to_string() && why.contains("an older entry")),
        "{:?}",
        seeds.skipped
    );
    let b = cache(DiskCache::new(&dir), "B");
    let (code64, _) = build(64, false);
    let seeds = b.seeds(&code64).unwrap();
    assert_eq!(seeds.seeds.len(), 1, "{seeds:?}");
    assert!(matches!(
        seeds.seeds[0].origin(),
        SeedOrigin::SameCode { .. }
    ));
    apply_ops(&b.candidate(&seeds.seeds[0], &code64).unwrap().ops, &code64).unwrap();
}
