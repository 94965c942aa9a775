//! A small reference loop IR: loops over integer ranges, statements that set tensor nodes at
//! affine indices, scalar locals, constants and unary/binary operations.
//!
//! It implements [`LoopCode`], so it can be canonicalized, and the reference schedule language
//! in [`crate::schedule`] transforms it. Symbols and tensor nodes get process-wide fresh ids on
//! creation, so two independently built copies of one program never share ids.

use schedule_cache::{LoopCode, NodeAttrs, NodeId, SymId, Visitor};
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

fn fresh_id() -> u64 {
    NEXT_ID.fetch_add(1, Ordering::Relaxed)
}

/// A symbol (loop variable, local, or static index) with a process-wide fresh id and a name
/// hint for printing. Two symbols are the same iff their ids are equal.
#[derive(Clone, Debug)]
pub struct Symbol {
    id: SymId,
    name: Arc<str>,
}

impl Symbol {
    /// A new symbol, distinct from every other symbol of this process.
    pub fn fresh(name: &str) -> Symbol {
        Symbol {
            id: SymId(fresh_id()),
            name: Arc::from(name),
        }
    }

    /// The process-unique id.
    pub fn id(&self) -> SymId {
        self.id
    }

    /// The name hint (not unique; renderers should append the id).
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl PartialEq for Symbol {
    fn eq(&self, other: &Symbol) -> bool {
        self.id == other.id
    }
}
impl Eq for Symbol {}

impl fmt::Display for Symbol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}_{}", self.name, self.id.0)
    }
}

/// Element precision of a tensor node or local.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
pub enum Precision {
    /// IEEE binary16.
    F16,
    /// bfloat16.
    Bf16,
    /// IEEE binary32.
    F32,
    /// IEEE binary64.
    F64,
    /// 32-bit signed integer.
    I32,
    /// 64-bit signed integer.
    I64,
}

impl Precision {
    /// All precisions.
    pub const ALL: [Precision; 6] = [
        Precision::F16,
        Precision::Bf16,
        Precision::F32,
        Precision::F64,
        Precision::I32,
        Precision::I64,
    ];

    /// The stable spelling used in canonical renderings.
    pub fn as_str(self) -> &'static str {
        match self {
            Precision::F16 => "f16",
            Precision::Bf16 => "bf16",
            Precision::F32 => "f32",
            Precision::F64 => "f64",
            Precision::I32 => "i32",
            Precision::I64 => "i64",
        }
    }
}

/// A tensor node: an array of `dims` elements of `precision`, with a process-wide fresh id.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorNode {
    id: NodeId,
    label: Arc<str>,
    dims: Vec<usize>,
    precision: Precision,
    constant: bool,
}

impl TensorNode {
    /// A new (non-constant) node, distinct from every other node of this process.
    pub fn new(label: &str, dims: &[usize], precision: Precision) -> TensorNode {
        TensorNode {
            id: NodeId(fresh_id()),
            label: Arc::from(label),
            dims: dims.to_vec(),
            precision,
            constant: false,
        }
    }

    /// A new node whose values are fixed for the program's lifetime (weights, literals): it is
    /// eligible for hoisted packing when the code never sets it.
    pub fn constant(label: &str, dims: &[usize], precision: Precision) -> TensorNode {
        TensorNode {
            constant: true,
            ..TensorNode::new(label, dims, precision)
        }
    }

    /// The process-unique id.
    pub fn id(&self) -> NodeId {
        self.id
    }
    /// The label (for printing; not part of the identity).
    pub fn label(&self) -> &str {
        &self.label
    }
    /// Dimensions.
    pub fn dims(&self) -> &[usize] {
        &self.dims
    }
    /// Element precision.
    pub fn precision(&self) -> Precision {
        self.precision
    }
    /// Whether the node was declared constant.
    pub fn is_constant(&self) -> bool {
        self.constant
    }
    /// Number of elements (product of dims; 1 for a scalar).
    pub fn len(&self) -> usize {
        self.dims.iter().product()
    }
    /// Whether the node has no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// An affine index expression: `constant + Σ coefficient * symbol`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Index {
    /// The constant offset.
    pub constant: i64,
    /// The `(coefficient, symbol)` terms, in the order written.
    pub terms: Vec<(i64, Symbol)>,
}

impl Index {
    /// The index `sym`.
    pub fn var(sym: &Symbol) -> Index {
        Index {
            constant: 0,
            terms: vec![(1, sym.clone())],
        }
    }
    /// The constant index `c`.
    pub fn constant(c: i64) -> Index {
        Index {
            constant: c,
            terms: Vec::new(),
        }
    }
    /// `self + coefficient * sym`.
    pub fn plus(mut self, coefficient: i64, sym: &Symbol) -> Index {
        self.terms.push((coefficient, sym.clone()));
        self
    }
    /// `self + c`.
    pub fn offset(mut self, c: i64) -> Index {
        self.constant = self.constant.saturating_add(c);
        self
    }
    /// Whether `sym` occurs with a nonzero coefficient.
    pub fn mentions(&self, sym: SymId) -> bool {
        self.terms.iter().any(|(c, s)| *c != 0 && s.id() == sym)
    }
}

/// A read or write position: a node at one index expression per dimension.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Access {
    /// The node.
    pub node: TensorNode,
    /// One index per dimension.
    pub index: Vec<Index>,
}

/// Unary operations.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum UnOp {
    /// Negation.
    Neg,
    /// Exponential.
    Exp,
    /// Square root.
    Sqrt,
    /// `max(x, 0)`.
    Relu,
}

/// Binary operations.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum BinOp {
    /// Addition.
    Add,
    /// Subtraction.
    Sub,
    /// Multiplication.
    Mul,
    /// Division.
    Div,
    /// Maximum.
    Max,
}

impl UnOp {
    /// Stable spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            UnOp::Neg => "neg",
            UnOp::Exp => "exp",
            UnOp::Sqrt => "sqrt",
            UnOp::Relu => "relu",
        }
    }
}

impl BinOp {
    /// Stable spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            BinOp::Add => "add",
            BinOp::Sub => "sub",
            BinOp::Mul => "mul",
            BinOp::Div => "div",
            BinOp::Max => "max",
        }
    }
}

/// A scalar expression.
#[derive(Clone, Debug, PartialEq)]
pub enum Expr {
    /// A constant.
    Const(f64),
    /// A tensor element.
    Get(Access),
    /// A local variable.
    Local(Symbol),
    /// A unary operation.
    Unary(UnOp, Box<Expr>),
    /// A binary operation.
    Binary(BinOp, Box<Expr>, Box<Expr>),
}

impl Expr {
    /// `node[index]`.
    pub fn get(node: &TensorNode, index: Vec<Index>) -> Expr {
        Expr::Get(Access {
            node: node.clone(),
            index,
        })
    }
    /// `op(a, b)`.
    pub fn bin(op: BinOp, a: Expr, b: Expr) -> Expr {
        Expr::Binary(op, Box::new(a), Box::new(b))
    }
    /// `op(a)`.
    pub fn un(op: UnOp, a: Expr) -> Expr {
        Expr::Unary(op, Box::new(a))
    }
}

/// How a loop is executed (set by schedules).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum LoopKind {
    /// A plain sequential loop.
    Serial,
    /// Fully unrolled by the code generator.
    Unrolled,
    /// Vectorized (innermost loops only).
    Vectorized,
}

/// `for var in from..to { body }` (upper bound exclusive).
#[derive(Clone, Debug, PartialEq)]
pub struct Loop {
    /// The loop variable.
    pub var: Symbol,
    /// Inclusive lower bound.
    pub from: i64,
    /// Exclusive upper bound.
    pub to: i64,
    /// Execution kind.
    pub kind: LoopKind,
    /// The body.
    pub body: Vec<Stmt>,
}

/// A statement.
#[derive(Clone, Debug, PartialEq)]
pub enum Stmt {
    /// A loop.
    For(Loop),
    /// `node[index] = value`.
    Set {
        /// Where to write.
        target: Access,
        /// What to write.
        value: Expr,
    },
    /// Declares a local of `precision` initialized to `value`, in scope until the end of the
    /// enclosing block.
    Local {
        /// The local.
        var: Symbol,
        /// Its precision.
        precision: Precision,
        /// Initial value.
        value: Expr,
    },
    /// `var = value` for a declared local.
    SetLocal {
        /// The local.
        var: Symbol,
        /// New value.
        value: Expr,
    },
    /// A construct the canonical form cannot capture (e.g. a staged host closure), by label.
    Opaque(String),
}

impl Stmt {
    /// `for var in from..to { body }`, serial.
    pub fn for_(var: &Symbol, from: i64, to: i64, body: Vec<Stmt>) -> Stmt {
        Stmt::For(Loop {
            var: var.clone(),
            from,
            to,
            kind: LoopKind::Serial,
            body,
        })
    }
    /// `node[index] = value`.
    pub fn set(node: &TensorNode, index: Vec<Index>, value: Expr) -> Stmt {
        Stmt::Set {
            target: Access {
                node: node.clone(),
                index,
            },
            value,
        }
    }
}

/// A piece of loop code: a block of statements, the unit the identity and schedules work on.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Code {
    /// The top-level statements.
    pub body: Vec<Stmt>,
}

impl Code {
    /// Code consisting of `body`.
    pub fn new(body: Vec<Stmt>) -> Code {
        Code { body }
    }

    /// Every loop in preorder, as `(variable, from, to, kind, contains another loop)`.
    pub fn loops(&self) -> Vec<LoopInfo> {
        fn go(stmts: &[Stmt], depth: usize, out: &mut Vec<LoopInfo>) {
            for s in stmts {
                if let Stmt::For(l) = s {
                    out.push(LoopInfo {
                        var: l.var.clone(),
                        from: l.from,
                        to: l.to,
                        kind: l.kind,
                        depth,
                        innermost: !l.body.iter().any(|s| matches!(s, Stmt::For(_))),
                    });
                    go(&l.body, depth + 1, out);
                }
            }
        }
        let mut out = Vec::new();
        go(&self.body, 0, &mut out);
        out
    }

    /// Every distinct tensor node used (set or read), by first occurrence in preorder.
    pub fn nodes(&self) -> Vec<TensorNode> {
        let mut out: Vec<TensorNode> = Vec::new();
        let mut add = |n: &TensorNode| {
            if !out.iter().any(|m| m.id() == n.id()) {
                out.push(n.clone());
            }
        };
        visit_nodes(&self.body, &mut add);
        out
    }

    /// Whether `node` is set anywhere in the code.
    pub fn sets(&self, node: NodeId) -> bool {
        sets_in(&self.body, node)
    }
}

/// One loop of a [`Code`], as listed by [`Code::loops`].
#[derive(Clone, Debug, PartialEq)]
pub struct LoopInfo {
    /// The loop variable.
    pub var: Symbol,
    /// Inclusive lower bound.
    pub from: i64,
    /// Exclusive upper bound.
    pub to: i64,
    /// Execution kind.
    pub kind: LoopKind,
    /// Nesting depth (0 = top level).
    pub depth: usize,
    /// Whether the body contains no loop.
    pub innermost: bool,
}

pub(crate) fn sets_in(stmts: &[Stmt], node: NodeId) -> bool {
    stmts.iter().any(|s| match s {
        Stmt::For(l) => sets_in(&l.body, node),
        Stmt::Set { target, .. } => target.node.id() == node,
        _ => false,
    })
}

fn visit_nodes(stmts: &[Stmt], f: &mut dyn FnMut(&TensorNode)) {
    fn expr(e: &Expr, f: &mut dyn FnMut(&TensorNode)) {
        match e {
            Expr::Get(a) => f(&a.node),
            Expr::Unary(_, a) => expr(a, f),
            Expr::Binary(_, a, b) => {
                expr(a, f);
                expr(b, f);
            }
            Expr::Const(_) | Expr::Local(_) => {}
        }
    }
    for s in stmts {
        match s {
            Stmt::For(l) => visit_nodes(&l.body, f),
            Stmt::Set { target, value } => {
                f(&target.node);
                expr(value, f);
            }
            Stmt::Local { value, .. } | Stmt::SetLocal { value, .. } => expr(value, f),
            Stmt::Opaque(_) => {}
        }
    }
}

/// Walking context: whether nodes are set anywhere (a set node is never a hoistable constant).
struct Walk<'a> {
    code: &'a Code,
}

impl Walk<'_> {
    fn node(&self, v: &mut dyn Visitor, n: &TensorNode) {
        v.node(
            n.id(),
            &NodeAttrs {
                dims: n.dims(),
                precision: n.precision().as_str(),
                hoistable_constant: n.is_constant() && !self.code.sets(n.id()),
            },
        );
    }

    fn index(&self, v: &mut dyn Visitor, index: &[Index]) {
        for ix in index {
            v.open("idx");
            v.int(ix.constant);
            for (c, s) in &ix.terms {
                v.int(*c);
                v.symbol(s.id());
            }
            v.close();
        }
    }

    fn expr(&self, v: &mut dyn Visitor, e: &Expr) {
        match e {
            Expr::Const(c) => {
                v.open("const");
                v.float(*c);
                v.close();
            }
            Expr::Get(a) => {
                v.open("get");
                self.node(v, &a.node);
                self.index(v, &a.index);
                v.close();
            }
            Expr::Local(s) => {
                v.open("local");
                v.symbol(s.id());
                v.close();
            }
            Expr::Unary(op, a) => {
                v.open(op.as_str());
                self.expr(v, a);
                v.close();
            }
            Expr::Binary(op, a, b) => {
                v.open(op.as_str());
                self.expr(v, a);
                self.expr(v, b);
                v.close();
            }
        }
    }

    fn stmts(&self, v: &mut dyn Visitor, stmts: &[Stmt]) {
        for s in stmts {
            match s {
                Stmt::For(l) => {
                    v.open(match l.kind {
                        LoopKind::Serial => "for",
                        LoopKind::Unrolled => "for-unrolled",
                        LoopKind::Vectorized => "for-vectorized",
                    });
                    v.int(l.from);
                    v.int(l.to);
                    v.loop_binder(l.var.id());
                    self.stmts(v, &l.body);
                    v.close();
                }
                Stmt::Set { target, value } => {
                    v.open("set");
                    self.node(v, &target.node);
                    self.index(v, &target.index);
                    self.expr(v, value);
                    v.close();
                }
                Stmt::Local {
                    var,
                    precision,
                    value,
                } => {
                    v.open("decl");
                    v.open(precision.as_str());
                    v.close();
                    self.expr(v, value);
                    v.close();
                    // Bound after the initializer, for the rest of the enclosing block.
                    v.local_binder(var.id());
                }
                Stmt::SetLocal { var, value } => {
                    v.open("assign");
                    v.symbol(var.id());
                    self.expr(v, value);
                    v.close();
                }
                Stmt::Opaque(what) => v.opaque(what),
            }
        }
    }
}

impl LoopCode for Code {
    fn walk(&self, visitor: &mut dyn Visitor) {
        Walk { code: self }.stmts(visitor, &self.body);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fresh_ids_are_distinct() {
        let a = Symbol::fresh("i");
        let b = Symbol::fresh("i");
        assert_ne!(a, b);
        assert_ne!(
            TensorNode::new("x", &[1], Precision::F32).id(),
            TensorNode::new("x", &[1], Precision::F32).id()
        );
    }

    #[test]
    fn loops_and_nodes_are_listed_in_preorder() {
        let (i, j) = (Symbol::fresh("i"), Symbol::fresh("j"));
        let x = TensorNode::new("x", &[4, 4], Precision::F32);
        let w = TensorNode::constant("w", &[4], Precision::F32);
        let code = Code::new(vec![Stmt::for_(
            &i,
            0,
            4,
            vec![Stmt::for_(
                &j,
                0,
                4,
                vec![Stmt::set(
                    &x,
                    vec![Index::var(&i), Index::var(&j)],
                    Expr::get(&w, vec![Index::var(&j)]),
                )],
            )],
        )]);
        let loops = code.loops();
        assert_eq!(loops.len(), 2);
        assert_eq!(loops[0].var, i);
        assert!(!loops[0].innermost);
        assert!(loops[1].innermost);
        let ids: Vec<_> = code.nodes().iter().map(TensorNode::id).collect();
        assert_eq!(ids, vec![x.id(), w.id()]);
        assert!(code.sets(x.id()));
        assert!(!code.sets(w.id()));
    }
}
