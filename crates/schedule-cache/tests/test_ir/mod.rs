//! A tiny loop IR and one-op schedule language for this crate's unit tests (the reference IR
//! is the reference-ir crate's, which depends on this one).

use std::sync::atomic::{AtomicU64, Ordering};

use crate::Error;
use crate::identity::{LoopCode, NodeAttrs, NodeId, SymId, Visitor};
use crate::saved::{Replayer, Resolver, ScheduleLanguage, SymRef};

/// A fresh id, distinct from every other of this process.
pub(crate) fn fresh() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// A statement: a loop over `0..extent`, or `out[at] = value`.
#[derive(Clone, Debug)]
pub(crate) enum Stmt {
    Loop {
        var: SymId,
        extent: i64,
        body: Vec<Stmt>,
    },
    Fill {
        out: NodeId,
        at: SymId,
        value: f64,
    },
}

/// A list of statements.
#[derive(Clone, Debug)]
pub(crate) struct Code(pub(crate) Vec<Stmt>);

fn walk(s: &Stmt, v: &mut dyn Visitor) {
    match s {
        Stmt::Loop { var, extent, body } => {
            v.open("loop");
            v.int(*extent);
            v.loop_binder(*var);
            for s in body {
                walk(s, v);
            }
            v.close();
        }
        Stmt::Fill { out, at, value } => {
            v.open("fill");
            v.node(*out, &NodeAttrs::new(&[64], "f32"));
            v.symbol(*at);
            v.float(*value);
            v.close();
        }
    }
}

impl LoopCode for Code {
    fn walk(&self, v: &mut dyn Visitor) {
        for s in &self.0 {
            walk(s, v);
        }
    }
}

/// `for i in 0..64 { y[i] = 2 }` with fresh ids, and its `i`.
pub(crate) fn one_loop() -> (Code, SymId) {
    let i = SymId(fresh());
    let fill = Stmt::Fill {
        out: NodeId(fresh()),
        at: i,
        value: 2.0,
    };
    let code = Code(vec![Stmt::Loop {
        var: i,
        extent: 64,
        body: vec![fill],
    }]);
    (code, i)
}

/// The schedule language: an op unrolls the loop its symbol binds (nothing is minted).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Unroll;

impl ScheduleLanguage for Unroll {
    type Op = SymId;
    type SavedOp = SymRef;

    fn save_op(&self, op: &SymId, refs: &mut Resolver<'_>) -> Result<SymRef, Error> {
        refs.sym(*op)
    }

    fn minted(&self, _: &SymId) -> Vec<(String, SymId)> {
        Vec::new()
    }

    fn build_op(&self, saved: &SymRef, refs: &mut Replayer<'_>) -> Result<SymId, Error> {
        refs.sym(saved)
    }
}
