//! A schedule saved by this process replays in a second, spawned process on code that process
//! builds independently (its own symbol and node ids), producing the same transformed code.
//!
//! The second process is this test binary re-invoked (`std::env::current_exe`) with
//! `REPLAY_CHILD_DIR` set, running only `replay_child`.
#![allow(clippy::unwrap_used)]

use reference_ir::ir::{BinOp, Code, Expr, Index, Precision, Stmt, Symbol, TensorNode};
use reference_ir::schedule::{ReferenceLanguage, SavedRefOp, Schedule, apply_ops};
use schedule_cache::{
    Identity, NodeId, Placement, Registry, SavedSchedule, canonicalize, of_saved, to_saved,
};
use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

const CHILD_ENV: &str = "REPLAY_CHILD_DIR";

struct Program {
    code: Code,
    s: Symbol,
    i: Symbol,
    j: Symbol,
    k: Symbol,
    a: TensorNode,
    placements: BTreeMap<NodeId, Placement>,
}

/// `for i<16, j<16, k<8: C[i,j] = C[i,j] + A[s+i,k] * B[k,j]`, with static offset `s`.
fn program(variant: &str) -> Program {
    let s = Symbol::fresh(&format!("offset_{variant}"));
    let (i, j, k) = (
        Symbol::fresh(&format!("row_{variant}")),
        Symbol::fresh(&format!("col_{variant}")),
        Symbol::fresh(&format!("red_{variant}")),
    );
    let c = TensorNode::new(&format!("C_{variant}"), &[16, 16], Precision::F32);
    let a = TensorNode::constant(&format!("A_{variant}"), &[32, 8], Precision::F32);
    let b = TensorNode::new(&format!("B_{variant}"), &[8, 16], Precision::F32);
    let cij = vec![Index::var(&i), Index::var(&j)];
    let body = Stmt::set(
        &c,
        cij.clone(),
        Expr::bin(
            BinOp::Add,
            Expr::get(&c, cij),
            Expr::bin(
                BinOp::Mul,
                Expr::get(&a, vec![Index::var(&s).plus(1, &i), Index::var(&k)]),
                Expr::get(&b, vec![Index::var(&k), Index::var(&j)]),
            ),
        ),
    );
    let code = Code::new(vec![Stmt::for_(
        &i,
        0,
        16,
        vec![Stmt::for_(
            &j,
            0,
            16,
            vec![Stmt::for_(&k, 0, 8, vec![body])],
        )],
    )]);
    let placements = [
        (c.id(), Placement::OnDevice),
        (a.id(), Placement::Hosted),
        (b.id(), Placement::OnDevice),
    ]
    .into_iter()
    .collect();
    Program {
        code,
        s,
        i,
        j,
        k,
        a,
        placements,
    }
}

fn identity(p: &Program, code: &Code) -> Identity {
    canonicalize(code, &[p.s.id()], &p.placements, true)
}

/// The child side: only does something when spawned by the parent test.
#[test]
fn replay_child() {
    let Ok(dir) = std::env::var(CHILD_ENV) else {
        return;
    };
    let dir = Path::new(&dir);
    // Shift this process's ids so nothing lines up with the parent by accident.
    for _ in 0..37 {
        let _ = Symbol::fresh("noise");
    }
    let p = program("child");
    let id = identity(&p, &p.code);
    let text = std::fs::read_to_string(dir.join("saved.ron")).unwrap();
    let saved: SavedSchedule<SavedRefOp> = SavedSchedule::from_ron(&text).unwrap();
    let (ops, _) = of_saved(&ReferenceLanguage, &saved, &id).unwrap();
    let done = apply_ops(&ops, &p.code).unwrap();
    let (resaved, _) = to_saved(&ReferenceLanguage, &Registry::new(&id), &ops).unwrap();
    std::fs::write(dir.join("resaved.ron"), resaved.to_ron().unwrap()).unwrap();
    std::fs::write(
        dir.join("result.txt"),
        identity(&p, &done).rendering().as_bytes(),
    )
    .unwrap();
    std::fs::write(
        dir.join("ids.txt"),
        format!("{:?} {:?}", p.i.id(), p.a.id()),
    )
    .unwrap();
}

#[test]
fn a_schedule_saved_here_replays_in_a_spawned_process() {
    let p = program("parent");
    let id = identity(&p, &p.code);
    assert!(id.is_complete());
    let mut s = Schedule::new();
    s.reorder(&p.j, &p.k); // i, k, j
    s.hoist(p.a.id(), &p.j); // A[s+i,k] is invariant in j
    let (_jo, ji) = s.split(&p.j, 4);
    s.vectorize(&ji);
    let (_io, ii) = s.split(&p.i, 4);
    s.unroll(&ii);
    let done = s.apply(&p.code).unwrap();
    assert_ne!(identity(&p, &done).digest(), id.digest());
    let (saved, _) = to_saved(&ReferenceLanguage, &Registry::new(&id), &s.ops).unwrap();

    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("saved.ron"), saved.to_ron().unwrap()).unwrap();
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "replay_child", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, dir.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "child failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let child_rendering = std::fs::read_to_string(dir.path().join("result.txt")).unwrap();
    assert_eq!(child_rendering, identity(&p, &done).rendering());
    let resaved: SavedSchedule<SavedRefOp> =
        SavedSchedule::from_ron(&std::fs::read_to_string(dir.path().join("resaved.ron")).unwrap())
            .unwrap();
    assert_eq!(resaved, saved);
    // The child really worked on its own ids.
    let ids = std::fs::read_to_string(dir.path().join("ids.txt")).unwrap();
    assert_ne!(ids, format!("{:?} {:?}", p.i.id(), p.a.id()));
}
