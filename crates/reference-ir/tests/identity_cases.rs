//! Example-based tests of identities, saved-schedule errors, placement-source identities and
//! the reference schedule ops.
#![allow(clippy::unwrap_used)]

mod common;

use reference_ir::ir::{BinOp, Code, Expr, Index, LoopKind, Precision, Stmt, Symbol, TensorNode};
use reference_ir::schedule::{RefOp, ReferenceLanguage, SavedRefOp, Schedule};
use schedule_cache::placement::{Lineage, canonicalize_source};
use schedule_cache::{
    Error, NodeId, Placement, Registry, SavedSchedule, SymRef, canonicalize, of_saved, to_saved,
};
use std::collections::BTreeMap;

/// `for i in 0..8 { for j in 0..4 { y[i] = y[i] + w[j] * x[i*4 + j] } }`
fn matvec() -> (Code, Symbol, Symbol, TensorNode, TensorNode, TensorNode) {
    let (i, j) = (Symbol::fresh("i"), Symbol::fresh("j"));
    let y = TensorNode::new("y", &[8], Precision::F32);
    let w = TensorNode::constant("w", &[4], Precision::F32);
    let x = TensorNode::new("x", &[32], Precision::F32);
    let body = Stmt::set(
        &y,
        vec![Index::var(&i)],
        Expr::bin(
            BinOp::Add,
            Expr::get(&y, vec![Index::var(&i)]),
            Expr::bin(
                BinOp::Mul,
                Expr::get(&w, vec![Index::var(&j)]),
                Expr::get(&x, vec![Index::constant(0).plus(4, &i).plus(1, &j)]),
            ),
        ),
    );
    let code = Code::new(vec![Stmt::for_(
        &i,
        0,
        8,
        vec![Stmt::for_(&j, 0, 4, vec![body])],
    )]);
    (code, i, j, y, w, x)
}

fn no_placements() -> BTreeMap<NodeId, Placement> {
    BTreeMap::new()
}

#[test]
fn numbering_follows_preorder_and_first_occurrence() {
    let (code, i, j, y, w, x) = matvec();
    let id = canonicalize(&code, &[], &no_placements(), true);
    assert!(id.is_complete());
    assert_eq!(id.binders(), &[i.id(), j.id()]);
    assert_eq!(id.nodes(), &[y.id(), w.id(), x.id()]);
    assert_eq!(id.node_at(2).unwrap(), x.id());
    assert!(matches!(
        id.node_at(3),
        Err(Error::NodeIndexOutOfRange { index: 3, len: 3 })
    ));
    assert_eq!(id.digest().len(), 64);
    assert!(id.rendering().contains("prec=f32"));
}

#[test]
fn opaque_unbound_and_shadowed_code_is_incomplete_and_cannot_key() {
    let (i, s) = (Symbol::fresh("i"), Symbol::fresh("s"));
    let y = TensorNode::new("y", &[4], Precision::F32);
    let set = |ix: &Symbol| Stmt::set(&y, vec![Index::var(ix)], Expr::Const(1.0));
    let cases = [
        Code::new(vec![Stmt::Opaque("host closure".into())]),
        // s is used but neither bound nor static.
        Code::new(vec![Stmt::for_(&i, 0, 4, vec![set(&s)])]),
        // i shadows i.
        Code::new(vec![Stmt::for_(
            &i,
            0,
            4,
            vec![Stmt::for_(&i, 0, 4, vec![set(&i)])],
        )]),
    ];
    for code in &cases {
        let id = canonicalize(code, &[], &no_placements(), true);
        assert!(!id.is_complete(), "{code:?}");
        let digest = id.digest().to_owned();
        assert!(matches!(
            id.clone().into_complete(),
            Err(Error::IncompleteIdentity { digest: d, .. }) if d == digest
        ));
    }
    // Declaring s static makes the second case complete.
    let id = canonicalize(&cases[1], &[s.id()], &no_placements(), true);
    assert!(id.is_complete());
    assert_eq!(id.statics(), &[s.id()]);
    assert!(id.into_complete().is_ok());
}

#[test]
fn incomplete_identities_still_round_trip_in_process() {
    let (i, j) = (Symbol::fresh("i"), Symbol::fresh("j"));
    let y = TensorNode::new("y", &[16], Precision::F32);
    let code = Code::new(vec![
        Stmt::Opaque("staged".into()),
        Stmt::for_(
            &i,
            0,
            16,
            vec![Stmt::set(&y, vec![Index::var(&i)], Expr::Const(0.0))],
        ),
        Stmt::for_(&j, 0, 2, vec![]),
    ]);
    let id = canonicalize(&code, &[], &no_placements(), true);
    assert!(!id.is_complete());
    let mut s = Schedule::new();
    let (_, inner) = s.split(&i, 4);
    s.vectorize(&inner);
    let (saved, _) = to_saved(&ReferenceLanguage, &Registry::new(&id), &s.ops).unwrap();
    let (ops, _) = of_saved(&ReferenceLanguage, &saved, &id).unwrap();
    let a = s.apply(&code).unwrap();
    let b = reference_ir::schedule::apply_ops(&ops, &code).unwrap();
    assert_eq!(
        canonicalize(&a, &[], &no_placements(), true).digest(),
        canonicalize(&b, &[], &no_placements(), true).digest()
    );
}

#[test]
fn split_reorder_vectorize_hoist_transform_the_code() {
    let (code, i, j, y, w, _x) = matvec();
    let mut s = Schedule::new();
    let (io, ii) = s.split(&i, 4);
    s.reorder(&io, &ii);
    s.vectorize(&j);
    let h = s.hoist(w.id(), &ii);
    let _ = h;
    // w[j] varies with j, which is inside ii: hoisting out of ii must fail.
    assert!(matches!(
        s.apply(&code),
        Err(Error::ScheduleInapplicable { .. })
    ));
    s.ops.pop();
    // y[i] is set inside the loop: not hoistable either.
    let mut bad = s.clone();
    bad.hoist(y.id(), &j);
    assert!(bad.apply(&code).is_err());
    let done = s.apply(&code).unwrap();
    let loops = done.loops();
    assert_eq!(loops.len(), 3);
    assert_eq!(loops[0].var, ii);
    assert_eq!((loops[0].from, loops[0].to), (0, 4));
    assert_eq!(loops[1].var, io);
    assert_eq!((loops[1].from, loops[1].to), (0, 2));
    assert_eq!(loops[2].kind, LoopKind::Vectorized);
    // i was replaced by 4*io + ii everywhere.
    let text = format!("{done:?}");
    assert!(!text.contains(&format!("id: SymId({}), ", i.id().0)));

    // w[j] varies with j itself: it cannot be hoisted out of j.
    let mut s2 = Schedule::new();
    s2.hoist(w.id(), &j);
    assert!(s2.apply(&code).is_err());
}

#[test]
fn hoist_moves_an_invariant_read_out_of_its_loop() {
    let (i, j) = (Symbol::fresh("i"), Symbol::fresh("j"));
    let y = TensorNode::new("y", &[4, 4], Precision::F64);
    let b = TensorNode::constant("b", &[4], Precision::F64);
    let code = Code::new(vec![Stmt::for_(
        &i,
        0,
        4,
        vec![Stmt::for_(
            &j,
            0,
            4,
            vec![Stmt::set(
                &y,
                vec![Index::var(&i), Index::var(&j)],
                Expr::get(&b, vec![Index::var(&i)]),
            )],
        )],
    )]);
    let mut s = Schedule::new();
    let local = s.hoist(b.id(), &j);
    let done = s.apply(&code).unwrap();
    let Stmt::For(outer) = &done.body[0] else {
        panic!("outer loop kept")
    };
    assert!(
        matches!(&outer.body[0], Stmt::Local { var, precision: Precision::F64, .. } if *var == local)
    );
    assert!(matches!(&outer.body[1], Stmt::For(l) if l.var == j));
    let id = canonicalize(&done, &[], &no_placements(), true);
    assert!(id.is_complete(), "{}", id.rendering());
}

#[test]
fn replay_rejects_other_code_and_dangling_references() {
    let (code, i, _j, _y, w, _x) = matvec();
    let id = canonicalize(&code, &[], &no_placements(), true);
    let mut s = Schedule::new();
    s.split(&i, 2);
    let (saved, _) = to_saved(&ReferenceLanguage, &Registry::new(&id), &s.ops).unwrap();

    // Other code: refused before anything is resolved.
    let (i2, y2) = (
        Symbol::fresh("i"),
        TensorNode::new("y", &[3], Precision::F32),
    );
    let other = Code::new(vec![Stmt::for_(
        &i2,
        0,
        3,
        vec![Stmt::set(&y2, vec![Index::var(&i2)], Expr::Const(0.0))],
    )]);
    let oid = canonicalize(&other, &[], &no_placements(), true);
    assert!(matches!(
        of_saved(&ReferenceLanguage, &saved, &oid),
        Err(Error::DigestMismatch { .. })
    ));

    let with_ops = |ops: Vec<SavedRefOp>| SavedSchedule {
        digest: id.digest().to_owned(),
        ops,
    };
    let dangling = [
        SavedRefOp::Unroll {
            target: SymRef::Base(7),
        },
        SavedRefOp::Unroll {
            target: SymRef::Static(0),
        },
        SavedRefOp::Unroll {
            target: SymRef::Minted {
                op: 0,
                role: "outer".into(),
            },
        },
    ];
    for op in dangling {
        let r = of_saved(&ReferenceLanguage, &with_ops(vec![op.clone()]), &id);
        assert!(
            matches!(r, Err(Error::DanglingRef { op: 0, .. })),
            "{op:?}: {r:?}"
        );
    }
    // A role the op did not mint.
    let r = of_saved(
        &ReferenceLanguage,
        &with_ops(vec![
            SavedRefOp::Split {
                target: SymRef::Base(0),
                factor: 2,
            },
            SavedRefOp::Unroll {
                target: SymRef::Minted {
                    op: 0,
                    role: "middle".into(),
                },
            },
        ]),
        &id,
    );
    assert!(matches!(r, Err(Error::DanglingRef { op: 1, .. })));
    let r = of_saved(
        &ReferenceLanguage,
        &with_ops(vec![SavedRefOp::Hoist {
            node: 9,
            out_of: SymRef::Base(0),
        }]),
        &id,
    );
    assert!(matches!(
        r,
        Err(Error::NodeIndexOutOfRange { index: 9, .. })
    ));

    // Saving ops that name things the registry does not know.
    let stranger = Symbol::fresh("k");
    let r = to_saved(
        &ReferenceLanguage,
        &Registry::new(&id),
        &[RefOp::Unroll {
            target: stranger.id(),
        }],
    );
    assert!(matches!(r, Err(Error::UnresolvableSymbol { op: 0, .. })));
    let r = to_saved(
        &ReferenceLanguage,
        &Registry::new(&id),
        &[RefOp::hoist(
            TensorNode::new("z", &[1], Precision::F32).id(),
            i.id(),
        )],
    );
    assert!(matches!(r, Err(Error::UnresolvableNode { op: 0, .. })));
    // A symbol bound by two sequential loops is ambiguous.
    let k = Symbol::fresh("k");
    let twice = Code::new(vec![
        Stmt::for_(&k, 0, 2, vec![]),
        Stmt::for_(&k, 0, 2, vec![]),
    ]);
    let tid = canonicalize(&twice, &[], &no_placements(), true);
    let r = to_saved(
        &ReferenceLanguage,
        &Registry::new(&tid),
        &[RefOp::Unroll { target: k.id() }],
    );
    assert!(matches!(r, Err(Error::AmbiguousSymbol { .. })));
    let _ = w;
}

#[test]
fn ron_of_a_saved_schedule_is_readable_and_parse_errors_are_typed() {
    let (code, i, ..) = matvec();
    let id = canonicalize(&code, &[], &no_placements(), true);
    let mut s = Schedule::new();
    let (_, inner) = s.split(&i, 4);
    s.unroll(&inner);
    let (saved, _) = to_saved(&ReferenceLanguage, &Registry::new(&id), &s.ops).unwrap();
    let text = saved.to_ron().unwrap();
    assert!(text.contains("Minted"), "{text}");
    assert!(text.contains("role: \"inner\""), "{text}");
    for bad in ["", "(", "(digest: 1, ops: [])", "\u{0}"] {
        assert!(matches!(
            SavedSchedule::<SavedRefOp>::from_ron(bad),
            Err(Error::Parse(_))
        ));
    }
}

#[test]
fn placement_source_identity_numbers_every_node_and_sees_lineage() {
    let (code, _i, _j, y, w, x) = matvec();
    let none = |_: NodeId| String::new();
    let lineage = Lineage::default();
    let a = canonicalize_source(&code, &[], &lineage, &none);
    assert_eq!(a.nodes(), &[y.id(), w.id(), x.id()]);
    assert_eq!(a.node_at(1).unwrap(), w.id());
    assert!(a.node_at(3).is_err());
    // Differs from the code identities of the same code.
    assert_ne!(
        a.digest(),
        canonicalize(&code, &[], &no_placements(), true).digest()
    );

    let mut decided = lineage.clone();
    decided.decided.insert(x.id(), Placement::Local);
    let b = canonicalize_source(&code, &[], &decided, &none);
    assert_ne!(a.digest(), b.digest());
    // Same decided mode, but a heuristic cap's (flippable): a different problem.
    let mut capped = decided.clone();
    capped.cap_flippable.insert(x.id());
    let c = canonicalize_source(&code, &[], &capped, &none);
    assert_ne!(b.digest(), c.digest());
    // Declared intent is the fallback: equal to a decision of the same mode if not a cap's.
    let mut declared = lineage.clone();
    declared.declared.insert(x.id(), Placement::Local);
    assert_eq!(
        canonicalize_source(&code, &[], &declared, &none).digest(),
        b.digest()
    );
    let mut prefs = lineage.clone();
    prefs.inline_prefs.insert(w.id(), true);
    assert_ne!(
        canonicalize_source(&code, &[], &prefs, &none).digest(),
        a.digest()
    );
    // The caller's node tag.
    let y_id = y.id();
    let tagged = move |n: NodeId| {
        if n == y_id {
            "embedded".to_owned()
        } else {
            String::new()
        }
    };
    assert_ne!(
        canonicalize_source(&code, &[], &lineage, &tagged).digest(),
        a.digest()
    );
    // Renamed twin, same lineage by position: same digest.
    let (code2, _, _, y2, w2, x2) = matvec();
    let mut l2 = Lineage::default();
    l2.decided.insert(x2.id(), Placement::Local);
    l2.cap_flippable.insert(x2.id());
    let _ = (y2, w2);
    assert_eq!(
        canonicalize_source(&code2, &[], &l2, &none).digest(),
        c.digest()
    );
}

#[test]
fn random_schedules_exercise_every_op_kind() {
    let mut seen = [0usize; 5];
    let mut transformed = 0;
    for seed in 0..200u64 {
        let shape = common::gen_shape(seed);
        let b = common::build(&shape, 0);
        let (s, done) = common::gen_schedule(&b.code, seed.wrapping_mul(31), 6);
        for op in &s.ops {
            seen[match op {
                RefOp::Split { .. } => 0,
                RefOp::Reorder { .. } => 1,
                RefOp::Unroll { .. } => 2,
                RefOp::Vectorize { .. } => 3,
                RefOp::Hoist { .. } => 4,
            }] += 1;
        }
        if done != b.code {
            transformed += 1;
        }
    }
    assert!(seen.iter().all(|&n| n > 0), "{seen:?}");
    assert!(transformed > 150, "{transformed}");
}

#[test]
fn tile_is_two_splits_and_an_interchange() {
    let (code, i, j, ..) = matvec();
    let mut s = Schedule::new();
    let (io, jo, ii, ji) = s.tile(&i, &j, 4, 2);
    assert_eq!(s.ops.len(), 3);
    let done = s.apply(&code).unwrap();
    let vars: Vec<_> = done.loops().into_iter().map(|l| (l.var, l.to)).collect();
    assert_eq!(vars, vec![(io, 2), (jo, 2), (ii, 4), (ji, 2)]);
    // Saved and replayed on a twin, the tiling gives the same code.
    let id = canonicalize(&code, &[], &no_placements(), true);
    let (saved, _) = to_saved(&ReferenceLanguage, &Registry::new(&id), &s.ops).unwrap();
    let (twin, ..) = matvec();
    let tid = canonicalize(&twin, &[], &no_placements(), true);
    let (ops, _) = of_saved(&ReferenceLanguage, &saved, &tid).unwrap();
    let twin_done = reference_ir::schedule::apply_ops(&ops, &twin).unwrap();
    let a = canonicalize(&done, &[], &no_placements(), true);
    let b = canonicalize(&twin_done, &[], &no_placements(), true);
    assert_eq!(a.explain_difference(&b), None);
    assert!(a.explain_difference(&id).is_some());
}
