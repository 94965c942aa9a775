//! Shared test support: random program shapes (independent of symbol and node ids), built into
//! reference IR as many times as wanted, each build with fresh ids and different labels; and
//! random valid schedules over built code.
#![allow(dead_code, unreachable_pub, missing_docs)]

use reference_ir::ir::{BinOp, Code, Expr, Index, Precision, Stmt, Symbol, TensorNode, UnOp};
use reference_ir::schedule::{RefOp, Schedule};
use schedule_cache::{NodeId, Placement};
use std::collections::BTreeMap;

/// A small deterministic PRNG (test-support's xorshift64*), so a shape is a pure function of
/// a seed ([`rng`]).
pub use test_support::Rng;

/// The generator of `seed`'s shapes.
pub fn rng(seed: u64) -> Rng {
    Rng::new(seed ^ 0x9e37_79b9_7f4a_7c15)
}

#[derive(Clone, Debug, PartialEq)]
pub struct NodeSpec {
    pub dims: Vec<usize>,
    pub precision: Precision,
    pub constant: bool,
    pub placement: Placement,
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum VarRef {
    /// The enclosing loop at this nesting level (0 = outermost).
    Loop(usize),
    Static(usize),
}

#[derive(Clone, Debug, PartialEq)]
pub struct SIdx {
    pub constant: i64,
    pub terms: Vec<(i64, VarRef)>,
}

#[derive(Clone, Debug, PartialEq)]
pub enum SExpr {
    Const(f64),
    Get(usize, Vec<SIdx>),
    Un(UnOp, Box<SExpr>),
    Bin(BinOp, Box<SExpr>, Box<SExpr>),
}

#[derive(Clone, Debug, PartialEq)]
pub enum SStmt {
    For {
        from: i64,
        to: i64,
        body: Vec<SStmt>,
    },
    Set {
        node: usize,
        idx: Vec<SIdx>,
        value: SExpr,
    },
}

/// A program shape. Skeleton (so every mutation has a target): `body[0]` is a loop, `body[1]`
/// is a top-level set of node `nodes[body1 node]`.
#[derive(Clone, Debug, PartialEq)]
pub struct Shape {
    pub nodes: Vec<NodeSpec>,
    pub statics: usize,
    pub body: Vec<SStmt>,
}

const PLACEMENTS: [Placement; 4] = [
    Placement::Virtual,
    Placement::Local,
    Placement::OnDevice,
    Placement::Hosted,
];

struct Gen {
    rng: Rng,
    nodes: Vec<NodeSpec>,
    statics: usize,
}

impl Gen {
    fn idx(&mut self, depth: usize) -> SIdx {
        let mut terms = Vec::new();
        let avail = depth + self.statics;
        for _ in 0..self.rng.below(3) {
            if avail == 0 {
                break;
            }
            let r = self.rng.below(avail as u64) as usize;
            let v = if r < depth {
                VarRef::Loop(r)
            } else {
                VarRef::Static(r - depth)
            };
            terms.push((self.rng.range(-3, 4), v));
        }
        SIdx {
            constant: self.rng.range(-2, 5),
            terms,
        }
    }

    fn access(&mut self, depth: usize) -> (usize, Vec<SIdx>) {
        let node = self.rng.below(self.nodes.len() as u64) as usize;
        let n = self.nodes[node].dims.len();
        (node, (0..n).map(|_| self.idx(depth)).collect())
    }

    fn expr(&mut self, depth: usize, size: u32) -> SExpr {
        match if size == 0 {
            self.rng.below(2)
        } else {
            self.rng.below(4)
        } {
            0 => SExpr::Const(self.rng.range(-4, 4) as f64 * 0.5),
            1 => {
                let (n, i) = self.access(depth);
                SExpr::Get(n, i)
            }
            2 => SExpr::Un(
                [UnOp::Neg, UnOp::Exp, UnOp::Sqrt, UnOp::Relu][self.rng.below(4) as usize],
                Box::new(self.expr(depth, size - 1)),
            ),
            _ => SExpr::Bin(
                [BinOp::Add, BinOp::Sub, BinOp::Mul, BinOp::Div, BinOp::Max]
                    [self.rng.below(5) as usize],
                Box::new(self.expr(depth, size - 1)),
                Box::new(self.expr(depth, size - 1)),
            ),
        }
    }

    fn set(&mut self, depth: usize) -> SStmt {
        let (node, idx) = self.access(depth);
        let value = self.expr(depth, 2);
        SStmt::Set { node, idx, value }
    }

    fn for_(&mut self, depth: usize, budget: u32) -> SStmt {
        let from = self.rng.range(0, 2);
        // Extents with divisors, so splits apply often.
        let to = from + [1, 2, 4, 6, 8, 12][self.rng.below(6) as usize];
        let mut body = vec![self.set(depth + 1)];
        body.extend(self.block(depth + 1, budget.saturating_sub(1)));
        SStmt::For { from, to, body }
    }

    fn block(&mut self, depth: usize, budget: u32) -> Vec<SStmt> {
        let mut out = Vec::new();
        for _ in 0..self.rng.below(3) {
            if budget > 0 && depth < 3 && self.rng.below(2) == 0 {
                out.push(self.for_(depth, budget - 1));
            } else {
                out.push(self.set(depth));
            }
        }
        out
    }
}

pub fn gen_shape(seed: u64) -> Shape {
    let mut rng = rng(seed);
    let nodes = (0..1 + rng.below(4))
        .map(|_| NodeSpec {
            dims: (0..1 + rng.below(3))
                .map(|_| 1 + rng.below(8) as usize)
                .collect(),
            precision: Precision::ALL[rng.below(6) as usize],
            constant: rng.below(2) == 0,
            placement: PLACEMENTS[rng.below(4) as usize],
        })
        .collect();
    let statics = rng.below(3) as usize;
    let mut g = Gen {
        rng,
        nodes,
        statics,
    };
    let mut body = vec![g.for_(0, 3), g.set(0)];
    body.extend(g.block(0, 2));
    Shape {
        nodes: g.nodes,
        statics,
        body,
    }
}

/// One build of a shape: fresh symbols and nodes, labels depending on `variant`.
pub struct Built {
    pub code: Code,
    pub statics: Vec<Symbol>,
    pub nodes: Vec<TensorNode>,
    pub placements: BTreeMap<NodeId, Placement>,
}

impl Built {
    pub fn static_ids(&self) -> Vec<schedule_cache::SymId> {
        self.statics.iter().map(Symbol::id).collect()
    }
}

pub fn build(shape: &Shape, variant: u64) -> Built {
    // Burn a variant-dependent number of ids so builds never line up by accident.
    for _ in 0..variant % 7 {
        let _ = Symbol::fresh("burn");
        let _ = TensorNode::new("burn", &[1], Precision::F32);
    }
    let statics: Vec<Symbol> = (0..shape.statics)
        .map(|k| Symbol::fresh(&format!("s{k}v{variant}")))
        .collect();
    let nodes: Vec<TensorNode> = shape
        .nodes
        .iter()
        .enumerate()
        .map(|(i, n)| {
            let label = format!("node{i}_variant{variant}");
            if n.constant {
                TensorNode::constant(&label, &n.dims, n.precision)
            } else {
                TensorNode::new(&label, &n.dims, n.precision)
            }
        })
        .collect();
    let placements = shape
        .nodes
        .iter()
        .zip(&nodes)
        .map(|(s, n)| (n.id(), s.placement))
        .collect();
    let mut stack = Vec::new();
    let body = build_block(&shape.body, &nodes, &statics, &mut stack, variant);
    Built {
        code: Code::new(body),
        statics,
        nodes,
        placements,
    }
}

fn build_idx(i: &SIdx, statics: &[Symbol], stack: &[Symbol]) -> Index {
    let mut ix = Index::constant(i.constant);
    for (c, v) in &i.terms {
        let s = match v {
            VarRef::Loop(l) => &stack[*l],
            VarRef::Static(k) => &statics[*k],
        };
        ix = ix.plus(*c, s);
    }
    ix
}

fn build_expr(e: &SExpr, nodes: &[TensorNode], statics: &[Symbol], stack: &[Symbol]) -> Expr {
    match e {
        SExpr::Const(c) => Expr::Const(*c),
        SExpr::Get(n, idx) => Expr::get(
            &nodes[*n],
            idx.iter().map(|i| build_idx(i, statics, stack)).collect(),
        ),
        SExpr::Un(op, a) => Expr::un(*op, build_expr(a, nodes, statics, stack)),
        SExpr::Bin(op, a, b) => Expr::bin(
            *op,
            build_expr(a, nodes, statics, stack),
            build_expr(b, nodes, statics, stack),
        ),
    }
}

fn build_block(
    stmts: &[SStmt],
    nodes: &[TensorNode],
    statics: &[Symbol],
    stack: &mut Vec<Symbol>,
    variant: u64,
) -> Vec<Stmt> {
    stmts
        .iter()
        .map(|s| match s {
            SStmt::For { from, to, body } => {
                let var = Symbol::fresh(&format!("l{}v{variant}", stack.len()));
                stack.push(var.clone());
                let b = build_block(body, nodes, statics, stack, variant);
                stack.pop();
                Stmt::for_(&var, *from, *to, b)
            }
            SStmt::Set { node, idx, value } => Stmt::set(
                &nodes[*node],
                idx.iter().map(|i| build_idx(i, statics, stack)).collect(),
                build_expr(value, nodes, statics, stack),
            ),
        })
        .collect()
}

/// The mutations the identity must notice.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mutation {
    Bound,
    Dim,
    Precision,
    Index,
    Placement,
    Nesting,
    Hoistable,
}

pub const MUTATIONS: [Mutation; 7] = [
    Mutation::Bound,
    Mutation::Dim,
    Mutation::Precision,
    Mutation::Index,
    Mutation::Placement,
    Mutation::Nesting,
    Mutation::Hoistable,
];

pub fn mutate(shape: &Shape, m: Mutation) -> Shape {
    let mut s = shape.clone();
    let SStmt::Set { node, .. } = &s.body[1] else {
        unreachable!("skeleton: body[1] is a set")
    };
    let node = *node;
    match m {
        Mutation::Bound => {
            if let SStmt::For { to, .. } = &mut s.body[0] {
                *to += 1;
            }
        }
        Mutation::Dim => s.nodes[node].dims[0] += 1,
        Mutation::Precision => {
            let p = s.nodes[node].precision;
            let i = Precision::ALL.iter().position(|q| *q == p).expect("listed");
            s.nodes[node].precision = Precision::ALL[(i + 1) % Precision::ALL.len()];
        }
        Mutation::Index => {
            if let SStmt::Set { idx, .. } = &mut s.body[1] {
                idx[0].constant += 1;
            }
        }
        Mutation::Placement => {
            let p = s.nodes[node].placement;
            let i = PLACEMENTS.iter().position(|q| *q == p).expect("listed");
            s.nodes[node].placement = PLACEMENTS[(i + 1) % PLACEMENTS.len()];
        }
        Mutation::Nesting => {
            let set = s.body.remove(1);
            if let SStmt::For { body, .. } = &mut s.body[0] {
                body.push(set);
            }
        }
        Mutation::Hoistable => {
            // Only observable when the node is never set: make body[1] read-only of a fresh
            // constant node vs a fresh varying node.
            s.nodes.push(NodeSpec {
                dims: vec![2],
                precision: Precision::F32,
                constant: true,
                placement: Placement::Local,
            });
            let k = s.nodes.len() - 1;
            if let SStmt::Set { value, .. } = &mut s.body[1] {
                *value = SExpr::Get(
                    k,
                    vec![SIdx {
                        constant: 0,
                        terms: vec![],
                    }],
                );
            }
            let mut t = s.clone();
            t.nodes[k].constant = false;
            return t;
        }
    }
    s
}

/// The base shape for comparison with [`mutate`]`(shape, Mutation::Hoistable)`.
pub fn hoistable_base(shape: &Shape) -> Shape {
    let mut s = mutate(shape, Mutation::Hoistable);
    let k = s.nodes.len() - 1;
    s.nodes[k].constant = true;
    s
}

/// A random valid schedule over `code`: tries `attempts` random ops, keeping those that apply.
/// Returns the schedule and the transformed code.
pub fn gen_schedule(code: &Code, seed: u64, attempts: usize) -> (Schedule, Code) {
    let mut rng = rng(seed);
    let mut sched = Schedule::new();
    let mut cur = code.clone();
    for _ in 0..attempts {
        let loops = cur.loops();
        if loops.is_empty() {
            break;
        }
        let l = loops[rng.below(loops.len() as u64) as usize].clone();
        let op = match rng.below(5) {
            0 | 1 => RefOp::split(l.var.id(), [1, 2, 3, 4][rng.below(4) as usize]),
            2 => {
                let inner = loops
                    .iter()
                    .find(|m| m.depth == l.depth + 1)
                    .map(|m| m.var.id())
                    .unwrap_or(l.var.id());
                RefOp::Reorder {
                    outer: l.var.id(),
                    inner,
                }
            }
            3 => {
                if rng.below(2) == 0 {
                    RefOp::Unroll { target: l.var.id() }
                } else {
                    RefOp::Vectorize { target: l.var.id() }
                }
            }
            _ => {
                let nodes = cur.nodes();
                let n = &nodes[rng.below(nodes.len() as u64) as usize];
                RefOp::hoist(n.id(), l.var.id())
            }
        };
        if let Ok(next) = op.apply(&cur) {
            cur = next;
            sched.ops.push(op);
        }
    }
    (sched, cur)
}
