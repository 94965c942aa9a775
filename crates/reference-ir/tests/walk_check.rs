//! `walk_check`: the reference IR's walk passes a mutation of every piece of its code, and
//! walks that leave a piece out (or leak ids) are caught.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use reference_ir::ir::{
    BinOp, Code, Expr, Index, Loop, LoopKind, Precision, Stmt, Symbol, TensorNode, UnOp,
};
use reference_ir::render::{Naming, render, signature_of};
use schedule_cache::{Config, LoopCode, NodeAttrs, NodeId, SymId, Visitor, WalkCheck, WalkProblem};

/// Reference-IR code with a runtime size `n` (a static index: a parameter of the rendered
/// function), a constant weight, a local, unary and binary operators:
///
/// ```text
/// for i in 0..16 { for j in 0..8 {
///     f32 acc = w[j] * x[8i + j + n];
///     acc = max(acc, 0.5);
///     y[i, j] = neg(acc);
/// } }
/// ```
#[derive(Clone, Debug)]
struct Kernel {
    code: Code,
    n: Symbol,
}

impl LoopCode for Kernel {
    fn walk(&self, v: &mut dyn Visitor) {
        self.code.walk(v);
    }
}

fn build() -> Kernel {
    let (i, j, n, acc) = (
        Symbol::fresh("i"),
        Symbol::fresh("j"),
        Symbol::fresh("n"),
        Symbol::fresh("acc"),
    );
    let x = TensorNode::new("x", &[256], Precision::F32);
    let w = TensorNode::constant("w", &[8], Precision::F32);
    let y = TensorNode::new("y", &[16, 8], Precision::F32);
    let read = Expr::bin(
        BinOp::Mul,
        Expr::get(&w, vec![Index::var(&j)]),
        Expr::get(
            &x,
            vec![Index::constant(0).plus(8, &i).plus(1, &j).plus(1, &n)],
        ),
    );
    let inner = vec![
        Stmt::Local {
            var: acc.clone(),
            precision: Precision::F32,
            value: read,
        },
        Stmt::SetLocal {
            var: acc.clone(),
            value: Expr::bin(BinOp::Max, Expr::Local(acc.clone()), Expr::Const(0.5)),
        },
        Stmt::set(
            &y,
            vec![Index::var(&i), Index::var(&j)],
            Expr::un(UnOp::Neg, Expr::Local(acc)),
        ),
    ];
    let code = Code::new(vec![Stmt::for_(
        &i,
        0,
        16,
        vec![Stmt::for_(&j, 0, 8, inner)],
    )]);
    Kernel { code, n }
}

fn outer(k: &mut Kernel) -> &mut Loop {
    match &mut k.code.body[0] {
        Stmt::For(l) => l,
        other => panic!("not a loop: {other:?}"),
    }
}

fn inner(k: &mut Kernel) -> &mut Loop {
    match &mut outer(k).body[0] {
        Stmt::For(l) => l,
        other => panic!("not a loop: {other:?}"),
    }
}

fn stmt(k: &mut Kernel, at: usize) -> &mut Stmt {
    &mut inner(k).body[at]
}

/// The local's initializer `w[j] * x[...]`.
fn read(k: &mut Kernel) -> (&mut BinOp, &mut Expr, &mut Expr) {
    match stmt(k, 0) {
        Stmt::Local {
            value: Expr::Binary(op, a, b),
            ..
        } => (op, a, b),
        other => panic!("not the local: {other:?}"),
    }
}

fn x_index(k: &mut Kernel) -> &mut Index {
    match read(k).2 {
        Expr::Get(a) => &mut a.index[0],
        other => panic!("not a read: {other:?}"),
    }
}

fn render_c(k: &Kernel) -> String {
    let config = Config::new(reference_ir::render::reference_settings());
    let params = signature_of(&k.code, std::slice::from_ref(&k.n));
    render(&k.code, "k", &params, Naming::Minted, &config)
        .expect("render")
        .text
}

/// Every piece of the reference code, mutated one at a time: extents, bounds, loop kinds,
/// scalars, operators, tensor nodes (which one, dims, precision, constancy), index
/// coefficients, offsets and symbols, the runtime size, the local's precision.
type Mutation = (&'static str, fn(&mut Kernel));

fn every_mutation() -> Vec<Mutation> {
    vec![
        ("outer extent", |k| outer(k).to = 17),
        ("outer lower bound", |k| outer(k).from = 1),
        ("inner extent", |k| inner(k).to = 7),
        ("loop kind", |k| inner(k).kind = LoopKind::Unrolled),
        ("scalar constant", |k| {
            if let Stmt::SetLocal {
                value: Expr::Binary(_, _, c),
                ..
            } = stmt(k, 1)
            {
                **c = Expr::Const(0.25);
            }
        }),
        ("binary operator", |k| *read(k).0 = BinOp::Add),
        ("max operator", |k| {
            if let Stmt::SetLocal {
                value: Expr::Binary(op, _, _),
                ..
            } = stmt(k, 1)
            {
                *op = BinOp::Sub;
            }
        }),
        ("unary operator", |k| {
            if let Stmt::Set {
                value: Expr::Unary(op, _),
                ..
            } = stmt(k, 2)
            {
                *op = UnOp::Exp;
            }
        }),
        ("operand order", |k| {
            let (_, a, b) = read(k);
            std::mem::swap(a, b);
        }),
        ("which tensor is read", |k| {
            // Read y (written below) instead of x.
            let y = match stmt(k, 2) {
                Stmt::Set { target, .. } => target.node.clone(),
                other => panic!("{other:?}"),
            };
            if let Expr::Get(a) = read(k).2 {
                a.node = y;
                a.index = vec![Index::constant(0), Index::constant(0)];
            }
        }),
        ("tensor dims", |k| {
            if let Stmt::Set { target, .. } = stmt(k, 2) {
                target.node = TensorNode::new("y", &[16, 9], Precision::F32);
            }
        }),
        ("tensor precision", |k| {
            if let Expr::Get(a) = read(k).1 {
                a.node = TensorNode::constant("w", &[8], Precision::F64);
            }
        }),
        ("tensor constancy", |k| {
            if let Expr::Get(a) = read(k).1 {
                a.node = TensorNode::new("w", &[8], Precision::F32);
            }
        }),
        ("index coefficient", |k| x_index(k).terms[0].0 = 9),
        ("index offset", |k| x_index(k).constant = 1),
        ("index symbol", |k| {
            let i = x_index(k).terms[0].1.clone();
            x_index(k).terms[1].1 = i;
        }),
        ("runtime size dropped", |k| {
            x_index(k).terms.pop();
        }),
        ("local precision", |k| {
            if let Stmt::Local { precision, .. } = stmt(k, 0) {
                *precision = Precision::F64;
            }
        }),
    ]
}

#[test]
fn the_reference_walk_passes_a_mutation_of_every_piece() {
    let mut check = WalkCheck::new(build)
        .statics(|k| vec![k.n.id()])
        .render(render_c);
    for (what, apply) in every_mutation() {
        check = check.mutation(what, apply);
    }
    let report = check.run();
    assert!(report.is_ok(), "{report}");
    assert_eq!(report.mutations_checked(), 18);
}

/// A walk that forgets part of the code: it passes everything on but floats (`forget_floats`)
/// or spells every precision alike (`forget_precision`), or leaks each node's process-specific
/// id as an int (`leak_ids`).
#[derive(Clone, Debug)]
struct Forgetful {
    kernel: Kernel,
    forget_floats: bool,
    forget_precision: bool,
    leak_ids: bool,
}

struct Filter<'v> {
    inner: &'v mut dyn Visitor,
    of: &'v Forgetful,
}

impl Visitor for Filter<'_> {
    fn open(&mut self, construct: &str) {
        self.inner.open(construct);
    }
    fn close(&mut self) {
        self.inner.close();
    }
    fn int(&mut self, value: i64) {
        self.inner.int(value);
    }
    fn float(&mut self, value: f64) {
        if !self.of.forget_floats {
            self.inner.float(value);
        }
    }
    fn loop_binder(&mut self, sym: SymId) {
        self.inner.loop_binder(sym);
    }
    fn local_binder(&mut self, sym: SymId) {
        self.inner.local_binder(sym);
    }
    fn symbol(&mut self, sym: SymId) {
        self.inner.symbol(sym);
    }
    fn node(&mut self, node: NodeId, attrs: &NodeAttrs<'_>) {
        if self.of.leak_ids {
            self.inner.int(node.0 as i64);
        }
        let precision = if self.of.forget_precision {
            "any"
        } else {
            attrs.precision
        };
        self.inner.node(
            node,
            &NodeAttrs {
                precision,
                ..*attrs
            },
        );
    }
    fn opaque(&mut self, what: &str) {
        self.inner.opaque(what);
    }
}

impl LoopCode for Forgetful {
    fn walk(&self, v: &mut dyn Visitor) {
        self.kernel.walk(&mut Filter { inner: v, of: self });
    }
}

fn forgetful(floats: bool, precision: bool, leak: bool) -> WalkCheck<Forgetful> {
    let build = move || Forgetful {
        kernel: build(),
        forget_floats: floats,
        forget_precision: precision,
        leak_ids: leak,
    };
    // The same mutations, applied to the wrapped kernel.
    let mut check = WalkCheck::new(build)
        .statics(|f: &Forgetful| vec![f.kernel.n.id()])
        .render(|f| render_c(&f.kernel));
    for (what, apply) in every_mutation() {
        check = check.mutation(what, move |f: &mut Forgetful| apply(&mut f.kernel));
    }
    check
}

/// A walk that leaves a piece out is caught, by the name of the mutation it misses, and
/// only that one.
#[test]
fn a_walk_that_forgets_a_piece_is_caught() {
    let report = forgetful(false, false, false).run();
    assert!(report.is_ok(), "the faithful wrapper: {report}");
    let report = forgetful(true, false, false).run();
    assert_eq!(report.omissions(), ["scalar constant"], "{report}");
    assert!(
        report
            .to_string()
            .contains("mutation `scalar constant` does not change the digest"),
        "{report}"
    );
    let report = forgetful(false, true, false).run();
    assert_eq!(report.omissions(), ["tensor precision"], "{report}");
}

/// A walk that reports a process-specific id gives two builds two digests.
#[test]
fn a_walk_that_leaks_ids_is_caught() {
    let report = forgetful(false, false, true).run();
    assert!(
        matches!(report.problems(), [WalkProblem::DependsOnIds(_)]),
        "{report}"
    );
}

/// A mutation that changes nothing the renderer emits is reported, so a check never passes
/// on mutations that prove nothing; without a renderer only the digest is compared.
#[test]
fn a_mutation_that_changes_nothing_is_reported() {
    let check = || WalkCheck::new(build).statics(|k| vec![k.n.id()]);
    let report = check().render(render_c).mutation("nothing", |_| {}).run();
    assert_eq!(
        report.problems(),
        [WalkProblem::IneffectiveMutation {
            mutation: "nothing".into()
        }]
    );
    let report = check().mutation("nothing", |_| {}).run();
    assert_eq!(report.omissions(), ["nothing"]);
}

/// Code whose walk is incomplete (here: the runtime size not given as a static index) is
/// reported, whatever the mutations.
#[test]
fn an_incomplete_walk_is_reported() {
    let report = WalkCheck::new(build).run();
    assert!(
        matches!(&report.problems()[0], WalkProblem::Incomplete(why) if why[0].contains("unbound symbol")),
        "{report}"
    );
}
