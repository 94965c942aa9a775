//! The reference schedule language for the reference IR ([`crate::ir`]): split a loop (minting
//! two loop variables), interchange two perfectly nested loops, unroll, vectorize, and hoist a
//! loop-invariant read of a tensor node into a local (minting the local).
//!
//! [`Schedule::apply`] really rewrites the code, so a replayed schedule can be checked to
//! produce the same transformed code (up to renaming) as the original.
//!
//! No op builds a loop nest deeper than [`MAX_NEST_DEPTH`] loops: a split that would is
//! refused ([`Error::ScheduleInapplicable`]) before anything is built. The IR's walks
//! (applying, cloning, comparing, canonicalizing, rendering, dropping) recurse once per
//! nesting level, so a saved schedule from anywhere (a cache entry of thousands of splits
//! by 1) cannot nest the code deep enough to overflow the stack of the process replaying it.

use crate::ir::{Access, Code, Expr, Index, Loop, LoopKind, Stmt, Symbol};
use schedule_cache::{Error, NodeId, Replayer, Resolver, ScheduleLanguage, SymId, SymRef};
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;

/// The deepest loop nest (loops on one path from the top level down) a [`RefOp`] builds: a
/// split that would nest the split loop's code deeper is refused. Real schedules nest about
/// 20 loops at most (seven loops of a convolution tiled on several levels); the IR's recursive
/// walks stay within a 256 KiB stack at this depth in a debug build (tested). Code built
/// deeper by hand is the caller's: the ops refuse only to deepen it further.
pub const MAX_NEST_DEPTH: usize = 64;

/// One schedule op over live symbols and nodes.
#[derive(Clone, Debug, PartialEq)]
pub enum RefOp {
    /// `for t in a..b` becomes `for outer in 0..(b-a)/factor { for inner in 0..factor }` with
    /// `t = a + factor*outer + inner`. Requires `factor >= 1` dividing `b - a`.
    Split {
        /// The loop to split.
        target: SymId,
        /// The inner extent.
        factor: i64,
        /// Minted outer variable (role `"outer"`).
        outer: Symbol,
        /// Minted inner variable (role `"inner"`).
        inner: Symbol,
    },
    /// Interchanges loop `outer` with loop `inner`, which must be its whole body.
    Reorder {
        /// The enclosing loop.
        outer: SymId,
        /// The loop that is `outer`'s only statement.
        inner: SymId,
    },
    /// Marks a loop for full unrolling.
    Unroll {
        /// The loop.
        target: SymId,
    },
    /// Vectorizes an innermost loop.
    Vectorize {
        /// The loop.
        target: SymId,
    },
    /// Reads `node` at its one index that is invariant in loop `out_of` into a local declared
    /// just before the loop, and uses the local inside. Requires that the loop never sets `node`.
    Hoist {
        /// The node read.
        node: NodeId,
        /// The loop the read is hoisted out of.
        out_of: SymId,
        /// Minted local (role `"local"`).
        local: Symbol,
    },
}

/// The saved form of a [`RefOp`]: minted symbols are implicit (named by role).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum SavedRefOp {
    /// See [`RefOp::Split`].
    Split {
        /// The loop to split.
        target: SymRef,
        /// The inner extent.
        factor: i64,
    },
    /// See [`RefOp::Reorder`].
    Reorder {
        /// The enclosing loop.
        outer: SymRef,
        /// The inner loop.
        inner: SymRef,
    },
    /// See [`RefOp::Unroll`].
    Unroll {
        /// The loop.
        target: SymRef,
    },
    /// See [`RefOp::Vectorize`].
    Vectorize {
        /// The loop.
        target: SymRef,
    },
    /// See [`RefOp::Hoist`].
    Hoist {
        /// Canonical index of the node.
        node: usize,
        /// The loop.
        out_of: SymRef,
    },
}

/// The reference schedule language, for [`schedule_cache::to_saved`] / [`schedule_cache::of_saved`].
#[derive(Clone, Copy, Debug, Default)]
pub struct ReferenceLanguage;

impl ScheduleLanguage for ReferenceLanguage {
    type Op = RefOp;
    type SavedOp = SavedRefOp;

    fn save_op(&self, op: &RefOp, refs: &mut Resolver<'_>) -> Result<SavedRefOp, Error> {
        Ok(match op {
            RefOp::Split { target, factor, .. } => SavedRefOp::Split {
                target: refs.sym(*target)?,
                factor: *factor,
            },
            RefOp::Reorder { outer, inner } => SavedRefOp::Reorder {
                outer: refs.sym(*outer)?,
                inner: refs.sym(*inner)?,
            },
            RefOp::Unroll { target } => SavedRefOp::Unroll {
                target: refs.sym(*target)?,
            },
            RefOp::Vectorize { target } => SavedRefOp::Vectorize {
                target: refs.sym(*target)?,
            },
            RefOp::Hoist { node, out_of, .. } => SavedRefOp::Hoist {
                node: refs.node(*node)?,
                out_of: refs.sym(*out_of)?,
            },
        })
    }

    fn minted(&self, op: &RefOp) -> Vec<(String, SymId)> {
        match op {
            RefOp::Split { outer, inner, .. } => vec![
                ("outer".to_owned(), outer.id()),
                ("inner".to_owned(), inner.id()),
            ],
            RefOp::Hoist { local, .. } => vec![("local".to_owned(), local.id())],
            RefOp::Reorder { .. } | RefOp::Unroll { .. } | RefOp::Vectorize { .. } => Vec::new(),
        }
    }

    fn build_op(&self, saved: &SavedRefOp, refs: &mut Replayer<'_>) -> Result<RefOp, Error> {
        Ok(match saved {
            SavedRefOp::Split { target, factor } => RefOp::split(refs.sym(target)?, *factor),
            SavedRefOp::Reorder { outer, inner } => RefOp::Reorder {
                outer: refs.sym(outer)?,
                inner: refs.sym(inner)?,
            },
            SavedRefOp::Unroll { target } => RefOp::Unroll {
                target: refs.sym(target)?,
            },
            SavedRefOp::Vectorize { target } => RefOp::Vectorize {
                target: refs.sym(target)?,
            },
            SavedRefOp::Hoist { node, out_of } => {
                RefOp::hoist(refs.node(*node)?, refs.sym(out_of)?)
            }
        })
    }
}

impl RefOp {
    /// Builder: split `target` by `factor`, minting fresh outer and inner variables.
    pub fn split(target: SymId, factor: i64) -> RefOp {
        RefOp::Split {
            target,
            factor,
            outer: Symbol::fresh("o"),
            inner: Symbol::fresh("i"),
        }
    }

    /// Builder: hoist `node`'s invariant read out of `out_of`, minting a fresh local.
    pub fn hoist(node: NodeId, out_of: SymId) -> RefOp {
        RefOp::Hoist {
            node,
            out_of,
            local: Symbol::fresh("h"),
        }
    }

    /// The code with this op applied.
    ///
    /// # Errors
    /// [`Error::ScheduleInapplicable`] if the op's preconditions do not hold (loop not found or
    /// bound by several loops, factor not dividing the extent, a split that would nest loops
    /// deeper than [`MAX_NEST_DEPTH`], loops not perfectly nested, no single invariant read,
    /// ...). Never panics.
    pub fn apply(&self, code: &Code) -> Result<Code, Error> {
        let target = match self {
            RefOp::Split { target, .. }
            | RefOp::Unroll { target }
            | RefOp::Vectorize { target } => *target,
            RefOp::Reorder { outer, .. } => *outer,
            RefOp::Hoist { out_of, .. } => *out_of,
        };
        let loops = code.loops();
        let n = loops.iter().filter(|l| l.var.id() == target).count();
        if n != 1 {
            return Err(inapplicable(
                self,
                if n == 0 {
                    "no loop binds the target"
                } else {
                    "several loops bind the target"
                },
            ));
        }
        if matches!(self, RefOp::Split { .. })
            && nest_depth_through(&loops, target) >= MAX_NEST_DEPTH
        {
            return Err(inapplicable(
                self,
                &format!("the split would nest loops deeper than {MAX_NEST_DEPTH}"),
            ));
        }
        let mut body = code.body.clone();
        rewrite_loop(&mut body, target, &mut |l| self.rewrite(l))?;
        Ok(Code { body })
    }

    fn rewrite(&self, l: Loop) -> Result<Vec<Stmt>, Error> {
        match self {
            RefOp::Split {
                factor,
                outer,
                inner,
                ..
            } => {
                let extent = l.to.checked_sub(l.from).filter(|e| *e >= 0);
                let Some(extent) = extent.filter(|e| *factor >= 1 && e % factor == 0) else {
                    return Err(inapplicable(self, "factor does not divide the extent"));
                };
                let mut body = l.body;
                substitute_stmts(&mut body, l.var.id(), l.from, *factor, outer, inner)
                    .ok_or_else(|| inapplicable(self, "index arithmetic overflows"))?;
                let inner_loop = Stmt::For(Loop {
                    var: inner.clone(),
                    from: 0,
                    to: *factor,
                    kind: l.kind,
                    body,
                });
                Ok(vec![Stmt::For(Loop {
                    var: outer.clone(),
                    from: 0,
                    to: extent / factor,
                    kind: LoopKind::Serial,
                    body: vec![inner_loop],
                })])
            }
            RefOp::Reorder { inner, .. } => match l.body.as_slice() {
                [Stmt::For(il)] if il.var.id() == *inner => {
                    let il = il.clone();
                    Ok(vec![Stmt::For(Loop {
                        body: vec![Stmt::For(Loop { body: il.body, ..l })],
                        ..il
                    })])
                }
                _ => Err(inapplicable(
                    self,
                    "inner loop is not the outer loop's whole body",
                )),
            },
            RefOp::Unroll { .. } => Ok(vec![Stmt::For(Loop {
                kind: LoopKind::Unrolled,
                ..l
            })]),
            RefOp::Vectorize { .. } => {
                if l.body.iter().any(|s| matches!(s, Stmt::For(_))) {
                    return Err(inapplicable(self, "loop is not innermost"));
                }
                Ok(vec![Stmt::For(Loop {
                    kind: LoopKind::Vectorized,
                    ..l
                })])
            }
            RefOp::Hoist { node, local, .. } => hoist(self, l, *node, local),
        }
    }
}

/// The number of loops on the deepest path from the top level through the loop binding
/// `target` (its enclosing loops, itself, and the deepest nest in its body), from the
/// preorder listing of [`Code::loops`]; 0 if no loop binds it.
fn nest_depth_through(loops: &[crate::ir::LoopInfo], target: SymId) -> usize {
    let Some(at) = loops.iter().position(|l| l.var.id() == target) else {
        return 0;
    };
    let depth = loops[at].depth;
    // The loops of its body follow it in preorder, deeper than it, up to the next loop
    // that is not.
    let deepest = loops[at + 1..]
        .iter()
        .take_while(|l| l.depth > depth)
        .map(|l| l.depth)
        .max()
        .unwrap_or(depth);
    deepest + 1
}

fn inapplicable(op: &RefOp, reason: &str) -> Error {
    Error::ScheduleInapplicable {
        op: format!("{op:?}"),
        reason: reason.to_owned(),
    }
}

/// Replaces the (unique) loop binding `target` by `f(loop)`.
fn rewrite_loop(
    stmts: &mut Vec<Stmt>,
    target: SymId,
    f: &mut dyn FnMut(Loop) -> Result<Vec<Stmt>, Error>,
) -> Result<bool, Error> {
    for i in 0..stmts.len() {
        if let Stmt::For(l) = &mut stmts[i] {
            if l.var.id() == target {
                let l = l.clone();
                let new = f(l)?;
                stmts.splice(i..=i, new);
                return Ok(true);
            }
            if rewrite_loop(&mut l.body, target, f)? {
                return Ok(true);
            }
        }
    }
    Ok(false)
}

fn substitute_index(
    ix: &mut Index,
    var: SymId,
    from: i64,
    factor: i64,
    outer: &Symbol,
    inner: &Symbol,
) -> Option<()> {
    let mut terms = Vec::with_capacity(ix.terms.len() + 1);
    for (c, s) in ix.terms.drain(..) {
        if s.id() == var {
            ix.constant = ix.constant.checked_add(c.checked_mul(from)?)?;
            terms.push((c.checked_mul(factor)?, outer.clone()));
            terms.push((c, inner.clone()));
        } else {
            terms.push((c, s));
        }
    }
    ix.terms = terms;
    Some(())
}

fn substitute_expr(
    e: &mut Expr,
    var: SymId,
    from: i64,
    factor: i64,
    outer: &Symbol,
    inner: &Symbol,
) -> Option<()> {
    match e {
        Expr::Get(a) => {
            for ix in &mut a.index {
                substitute_index(ix, var, from, factor, outer, inner)?;
            }
        }
        Expr::Unary(_, a) => substitute_expr(a, var, from, factor, outer, inner)?,
        Expr::Binary(_, a, b) => {
            substitute_expr(a, var, from, factor, outer, inner)?;
            substitute_expr(b, var, from, factor, outer, inner)?;
        }
        Expr::Const(_) | Expr::Local(_) => {}
    }
    Some(())
}

fn substitute_stmts(
    stmts: &mut [Stmt],
    var: SymId,
    from: i64,
    factor: i64,
    outer: &Symbol,
    inner: &Symbol,
) -> Option<()> {
    for s in stmts {
        match s {
            Stmt::For(l) => substitute_stmts(&mut l.body, var, from, factor, outer, inner)?,
            Stmt::Set { target, value } => {
                for ix in &mut target.index {
                    substitute_index(ix, var, from, factor, outer, inner)?;
                }
                substitute_expr(value, var, from, factor, outer, inner)?;
            }
            Stmt::Local { value, .. } | Stmt::SetLocal { value, .. } => {
                substitute_expr(value, var, from, factor, outer, inner)?;
            }
            Stmt::Opaque(_) => {}
        }
    }
    Some(())
}

/// Symbols bound (loop variables, locals) or assigned (locals) inside `stmts`.
fn varying_symbols(stmts: &[Stmt], out: &mut BTreeSet<SymId>) {
    for s in stmts {
        match s {
            Stmt::For(l) => {
                out.insert(l.var.id());
                varying_symbols(&l.body, out);
            }
            Stmt::Local { var, .. } | Stmt::SetLocal { var, .. } => {
                out.insert(var.id());
            }
            Stmt::Set { .. } | Stmt::Opaque(_) => {}
        }
    }
}

fn collect_reads(stmts: &[Stmt], node: NodeId, out: &mut Vec<Vec<Index>>) {
    fn expr(e: &Expr, node: NodeId, out: &mut Vec<Vec<Index>>) {
        match e {
            Expr::Get(a) => {
                if a.node.id() == node && !out.contains(&a.index) {
                    out.push(a.index.clone());
                }
            }
            Expr::Unary(_, a) => expr(a, node, out),
            Expr::Binary(_, a, b) => {
                expr(a, node, out);
                expr(b, node, out);
            }
            Expr::Const(_) | Expr::Local(_) => {}
        }
    }
    for s in stmts {
        match s {
            Stmt::For(l) => collect_reads(&l.body, node, out),
            Stmt::Set { value, .. } | Stmt::Local { value, .. } | Stmt::SetLocal { value, .. } => {
                expr(value, node, out)
            }
            Stmt::Opaque(_) => {}
        }
    }
}

fn replace_reads(stmts: &mut [Stmt], node: NodeId, index: &[Index], local: &Symbol) {
    fn expr(e: &mut Expr, node: NodeId, index: &[Index], local: &Symbol) {
        match e {
            Expr::Get(a) if a.node.id() == node && a.index == index => {
                *e = Expr::Local(local.clone());
            }
            Expr::Unary(_, a) => expr(a, node, index, local),
            Expr::Binary(_, a, b) => {
                expr(a, node, index, local);
                expr(b, node, index, local);
            }
            Expr::Get(_) | Expr::Const(_) | Expr::Local(_) => {}
        }
    }
    for s in stmts {
        match s {
            Stmt::For(l) => replace_reads(&mut l.body, node, index, local),
            Stmt::Set { value, .. } | Stmt::Local { value, .. } | Stmt::SetLocal { value, .. } => {
                expr(value, node, index, local)
            }
            Stmt::Opaque(_) => {}
        }
    }
}

fn hoist(op: &RefOp, mut l: Loop, node: NodeId, local: &Symbol) -> Result<Vec<Stmt>, Error> {
    if crate::ir::sets_in(&l.body, node) {
        return Err(inapplicable(op, "the loop sets the node"));
    }
    let mut varying = BTreeSet::new();
    varying.insert(l.var.id());
    varying_symbols(&l.body, &mut varying);
    let mut reads = Vec::new();
    collect_reads(&l.body, node, &mut reads);
    let invariant: Vec<&Vec<Index>> = reads
        .iter()
        .filter(|ix| !ix.iter().any(|i| varying.iter().any(|v| i.mentions(*v))))
        .collect();
    let [index] = invariant.as_slice() else {
        return Err(inapplicable(
            op,
            "not exactly one invariant read of the node",
        ));
    };
    let index: Vec<Index> = (*index).clone();
    // The node itself: take it from any read (all reads of one node carry the same node).
    let Some(tn) = find_node(&l.body, node) else {
        return Err(inapplicable(op, "node not read in the loop"));
    };
    replace_reads(&mut l.body, node, &index, local);
    Ok(vec![
        Stmt::Local {
            var: local.clone(),
            precision: tn.precision(),
            value: Expr::Get(Access { node: tn, index }),
        },
        Stmt::For(l),
    ])
}

fn find_node(stmts: &[Stmt], node: NodeId) -> Option<crate::ir::TensorNode> {
    Code {
        body: stmts.to_vec(),
    }
    .nodes()
    .into_iter()
    .find(|n| n.id() == node)
}

/// A schedule for the reference IR: ops applied in order. The builder methods mint fresh symbols
/// and return them so later ops can name them.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Schedule {
    /// The ops, in application order.
    pub ops: Vec<RefOp>,
}

impl Schedule {
    /// An empty schedule.
    pub fn new() -> Schedule {
        Schedule::default()
    }

    /// Appends a split of `target` by `factor`; returns the minted `(outer, inner)` variables.
    pub fn split(&mut self, target: &Symbol, factor: i64) -> (Symbol, Symbol) {
        let (outer, inner) = (Symbol::fresh("o"), Symbol::fresh("i"));
        self.ops.push(RefOp::Split {
            target: target.id(),
            factor,
            outer: outer.clone(),
            inner: inner.clone(),
        });
        (outer, inner)
    }

    /// Appends a 2-D tiling of the perfect nest `outer { inner { .. } }` (inner must be
    /// outer's whole body) by `outer_factor` x `inner_factor`: two splits and an interchange,
    /// giving `outer_o { inner_o { outer_i { inner_i { .. } } } }`. Returns the minted
    /// `(outer_o, inner_o, outer_i, inner_i)`.
    pub fn tile(
        &mut self,
        outer: &Symbol,
        inner: &Symbol,
        outer_factor: i64,
        inner_factor: i64,
    ) -> (Symbol, Symbol, Symbol, Symbol) {
        let (oo, oi) = self.split(outer, outer_factor);
        let (io, ii) = self.split(inner, inner_factor);
        self.reorder(&oi, &io);
        (oo, io, oi, ii)
    }

    /// Appends an interchange of `outer` with its only statement, loop `inner`.
    pub fn reorder(&mut self, outer: &Symbol, inner: &Symbol) {
        self.ops.push(RefOp::Reorder {
            outer: outer.id(),
            inner: inner.id(),
        });
    }

    /// Appends unrolling of `target`.
    pub fn unroll(&mut self, target: &Symbol) {
        self.ops.push(RefOp::Unroll {
            target: target.id(),
        });
    }

    /// Appends vectorization of `target`.
    pub fn vectorize(&mut self, target: &Symbol) {
        self.ops.push(RefOp::Vectorize {
            target: target.id(),
        });
    }

    /// Appends hoisting of `node`'s invariant read out of `out_of`; returns the minted local.
    pub fn hoist(&mut self, node: NodeId, out_of: &Symbol) -> Symbol {
        let local = Symbol::fresh("h");
        self.ops.push(RefOp::Hoist {
            node,
            out_of: out_of.id(),
            local: local.clone(),
        });
        local
    }

    /// The code with every op applied in order.
    ///
    /// # Errors
    /// The first op's [`Error::ScheduleInapplicable`].
    pub fn apply(&self, code: &Code) -> Result<Code, Error> {
        apply_ops(&self.ops, code)
    }
}

/// `code` with `ops` applied in order.
///
/// # Errors
/// The first failing op's [`Error::ScheduleInapplicable`].
pub fn apply_ops(ops: &[RefOp], code: &Code) -> Result<Code, Error> {
    let mut c = code.clone();
    for op in ops {
        c = op.apply(&c)?;
    }
    Ok(c)
}
