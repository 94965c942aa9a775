//! The C renderer: turns reference-IR loop code into kernels of cc-backend's signature,
//! with the names a tensor compiler mints.
//!
//! Names come from the IR's process-wide counters, exactly as a real renderer's do: loop
//! symbols are `i<id>`, scalar locals `v<id>_<hint>`, tensor nodes `n<id>_<label>`, and
//! segment kernels `<routine>__seg<i>` (`canonical_text::segment_kernel_name`, numbered
//! by position in the batch). Two renderings of the same schedule therefore differ in
//! every name, which is what the kernel keys must see through.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use schedule_cache::identity::{NodeId, SymId};
use schedule_cache::ir::{BinOp, Code, Expr, Index, LoopKind, Precision, Stmt, TensorNode, UnOp};

use crate::error::DemoError;

/// Which argument of the kernel signature
/// (`void name(float *out, const float *a, const float *b, int n)`) holds a tensor node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Param {
    /// `out` (read and written).
    Out,
    /// `a` (read only).
    A,
    /// `b` (read only).
    B,
}

impl Param {
    fn c_name(self) -> &'static str {
        match self {
            Param::Out => "out",
            Param::A => "a",
            Param::B => "b",
        }
    }
}

/// Loops of at most this many iterations marked unrolled are emitted as copies.
const UNROLL_COPIES_MAX: i64 = 16;

/// One rendered segment kernel.
#[derive(Clone, Debug)]
pub(crate) struct RenderedKernel {
    /// Its C text.
    pub(crate) text: String,
    /// The names the renderer declared for tensor nodes (canonical-text's `bound`).
    pub(crate) bound: Vec<String>,
}

/// The name a renderer mints for a tensor node: `n<id>_<label>`.
pub(crate) fn node_name(node: &TensorNode) -> String {
    format!("n{}_{}", node.id().0, node.label())
}

fn sym_name(id: SymId) -> String {
    format!("i{}", id.0)
}

fn local_name(id: SymId, hint: &str) -> String {
    format!("v{}_{hint}", id.0)
}

/// Cuts `code` into segments: each segment is a maximal run of top-level statements that
/// ends with a loop (a local hoisted in front of a loop belongs to that loop's segment).
pub(crate) fn segments(code: &Code) -> Vec<Vec<Stmt>> {
    let mut out = Vec::new();
    let mut current = Vec::new();
    for s in &code.body {
        let ends = matches!(s, Stmt::For(_));
        current.push(s.clone());
        if ends {
            out.push(std::mem::take(&mut current));
        }
    }
    if !current.is_empty() {
        out.push(current);
    }
    out
}

struct Renderer<'a> {
    params: &'a [(NodeId, Param)],
    locals: BTreeMap<SymId, String>,
    /// Loop symbols replaced by constants (inside unrolled copies).
    env: BTreeMap<SymId, i64>,
    out: String,
    /// The largest element count of any node the kernel touches.
    max_len: usize,
    bound: Vec<String>,
    decls: String,
}

impl Renderer<'_> {
    fn node(&mut self, node: &TensorNode) -> Result<String, DemoError> {
        if node.precision() != Precision::F32 {
            return Err(DemoError::Render(format!(
                "node {} has precision {}; the C renderer supports f32 only",
                node.label(),
                node.precision().as_str()
            )));
        }
        let name = node_name(node);
        if !self.bound.contains(&name) {
            let param = self
                .params
                .iter()
                .find(|(id, _)| *id == node.id())
                .map(|(_, p)| *p)
                .ok_or_else(|| {
                    DemoError::Render(format!("node {name} is bound to no kernel argument"))
                })?;
            let qualifier = if param == Param::Out { "" } else { "const " };
            let _ = writeln!(
                self.decls,
                "  {qualifier}float *{name} = {};",
                param.c_name()
            );
            self.bound.push(name.clone());
            self.max_len = self.max_len.max(node.len());
        }
        Ok(name)
    }

    /// The flat (row-major) index of `index` into `node`, as C text.
    fn flat_index(&self, node: &TensorNode, index: &[Index]) -> Result<String, DemoError> {
        let dims = node.dims();
        if dims.len() != index.len() {
            return Err(DemoError::Render(format!(
                "node {} has {} dims but is indexed with {}",
                node.label(),
                dims.len(),
                index.len()
            )));
        }
        let mut constant: i64 = 0;
        let mut terms: Vec<(SymId, i64)> = Vec::new();
        let mut stride: i64 = 1;
        let overflow = || DemoError::Render("index arithmetic overflows".to_string());
        for (d, ix) in dims.iter().zip(index).rev() {
            constant = ix
                .constant
                .checked_mul(stride)
                .and_then(|c| constant.checked_add(c))
                .ok_or_else(overflow)?;
            for (c, s) in &ix.terms {
                let coefficient = c.checked_mul(stride).ok_or_else(overflow)?;
                if let Some(value) = self.env.get(&s.id()) {
                    constant = coefficient
                        .checked_mul(*value)
                        .and_then(|v| constant.checked_add(v))
                        .ok_or_else(overflow)?;
                } else if let Some(t) = terms.iter_mut().find(|(id, _)| *id == s.id()) {
                    t.1 = t.1.checked_add(coefficient).ok_or_else(overflow)?;
                } else {
                    terms.push((s.id(), coefficient));
                }
            }
            stride = i64::try_from(*d)
                .ok()
                .and_then(|d| stride.checked_mul(d))
                .ok_or_else(overflow)?;
        }
        let mut text = String::new();
        for (id, c) in terms.iter().filter(|(_, c)| *c != 0) {
            if !text.is_empty() {
                text.push_str(" + ");
            }
            if *c == 1 {
                text.push_str(&sym_name(*id));
            } else {
                let _ = write!(text, "{c} * {}", sym_name(*id));
            }
        }
        if text.is_empty() {
            text = constant.to_string();
        } else if constant != 0 {
            let _ = write!(text, " + {constant}");
        }
        Ok(text)
    }

    fn expr(&mut self, e: &Expr) -> Result<String, DemoError> {
        Ok(match e {
            Expr::Const(c) => float_literal(*c),
            Expr::Get(a) => {
                let name = self.node(&a.node)?;
                format!("{name}[{}]", self.flat_index(&a.node, &a.index)?)
            }
            Expr::Local(s) => self.locals.get(&s.id()).cloned().ok_or_else(|| {
                DemoError::Render(format!("local {s} used before it is declared"))
            })?,
            Expr::Unary(op, a) => {
                let a = self.expr(a)?;
                match op {
                    UnOp::Neg => format!("(-{a})"),
                    UnOp::Exp => format!("expf({a})"),
                    UnOp::Sqrt => format!("sqrtf({a})"),
                    UnOp::Relu => format!("fmaxf({a}, 0.0f)"),
                }
            }
            Expr::Binary(op, a, b) => {
                let (a, b) = (self.expr(a)?, self.expr(b)?);
                match op {
                    BinOp::Add => format!("({a} + {b})"),
                    BinOp::Sub => format!("({a} - {b})"),
                    BinOp::Mul => format!("({a} * {b})"),
                    BinOp::Div => format!("({a} / {b})"),
                    BinOp::Max => format!("fmaxf({a}, {b})"),
                }
            }
        })
    }

    fn line(&mut self, depth: usize, text: &str) {
        for _ in 0..depth {
            self.out.push_str("  ");
        }
        self.out.push_str(text);
        self.out.push('\n');
    }

    fn stmts(&mut self, stmts: &[Stmt], depth: usize) -> Result<(), DemoError> {
        for s in stmts {
            self.stmt(s, depth)?;
        }
        Ok(())
    }

    fn stmt(&mut self, s: &Stmt, depth: usize) -> Result<(), DemoError> {
        match s {
            Stmt::For(l) => {
                let extent = l.to.saturating_sub(l.from);
                if l.kind == LoopKind::Unrolled && extent <= UNROLL_COPIES_MAX {
                    for value in l.from..l.to {
                        self.env.insert(l.var.id(), value);
                        self.line(depth, "{");
                        let result = self.stmts(&l.body, depth + 1);
                        self.line(depth, "}");
                        self.env.remove(&l.var.id());
                        result?;
                    }
                    return Ok(());
                }
                match l.kind {
                    LoopKind::Serial => {}
                    LoopKind::Unrolled => self.line(0, "#pragma GCC unroll 16"),
                    LoopKind::Vectorized => self.line(0, "#pragma omp simd"),
                }
                let v = sym_name(l.var.id());
                let header = format!("for (int {v} = {}; {v} < {}; ++{v}) {{", l.from, l.to);
                self.line(depth, &header);
                self.stmts(&l.body, depth + 1)?;
                self.line(depth, "}");
            }
            Stmt::Set { target, value } => {
                let name = self.node(&target.node)?;
                let index = self.flat_index(&target.node, &target.index)?;
                let value = self.expr(value)?;
                self.line(depth, &format!("{name}[{index}] = {value};"));
            }
            Stmt::Local {
                var,
                precision,
                value,
            } => {
                if *precision != Precision::F32 {
                    return Err(DemoError::Render(format!(
                        "local {var} has precision {}; the C renderer supports f32 only",
                        precision.as_str()
                    )));
                }
                let value = self.expr(value)?;
                let name = local_name(var.id(), var.name());
                self.line(depth, &format!("float {name} = {value};"));
                self.locals.insert(var.id(), name);
            }
            Stmt::SetLocal { var, value } => {
                let value = self.expr(value)?;
                let name = self.locals.get(&var.id()).cloned().ok_or_else(|| {
                    DemoError::Render(format!("local {var} assigned before it is declared"))
                })?;
                self.line(depth, &format!("{name} = {value};"));
            }
            Stmt::Opaque(what) => {
                return Err(DemoError::Render(format!(
                    "opaque construct {what:?} cannot be rendered to C"
                )));
            }
        }
        Ok(())
    }
}

/// A C float literal that reads back as `c` (as an `f32`).
fn float_literal(c: f64) -> String {
    let s = format!("{:?}", c as f32);
    if s.contains(['.', 'e', 'E']) || !s.chars().all(|ch| ch.is_ascii_digit() || ch == '-') {
        format!("{s}f")
    } else {
        format!("{s}.0f")
    }
}

/// Renders one segment (a list of top-level statements) as the kernel `symbol`.
pub(crate) fn render_segment(
    symbol: &str,
    stmts: &[Stmt],
    params: &[(NodeId, Param)],
) -> Result<RenderedKernel, DemoError> {
    let mut r = Renderer {
        params,
        locals: BTreeMap::new(),
        env: BTreeMap::new(),
        out: String::new(),
        max_len: 0,
        bound: Vec::new(),
        decls: String::new(),
    };
    r.stmts(stmts, 1)?;
    let mut text = String::new();
    let _ = writeln!(
        text,
        "void {symbol}(float *out, const float *a, const float *b, int n) {{"
    );
    // Every array is `n` floats long: refuse to touch anything when it is too short.
    let _ = writeln!(text, "  if (n < {}) return;", r.max_len);
    text.push_str(&r.decls);
    text.push_str(&r.out);
    text.push_str("}\n");
    Ok(RenderedKernel {
        text,
        bound: r.bound,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use schedule_cache::ir::{Symbol, TensorNode};

    #[test]
    fn renders_minted_names_and_a_guard() {
        let i = Symbol::fresh("i");
        let x = TensorNode::new("x", &[8], Precision::F32);
        let y = TensorNode::new("y", &[8], Precision::F32);
        let code = Code::new(vec![Stmt::for_(
            &i,
            0,
            8,
            vec![Stmt::set(
                &y,
                vec![Index::var(&i)],
                Expr::bin(
                    BinOp::Mul,
                    Expr::get(&x, vec![Index::var(&i)]),
                    Expr::Const(2.0),
                ),
            )],
        )]);
        let params = [(x.id(), Param::A), (y.id(), Param::Out)];
        let k = render_segment("f__seg0", &segments(&code)[0], &params).unwrap();
        assert!(
            k.text
                .starts_with("void f__seg0(float *out, const float *a")
        );
        assert!(k.text.contains("if (n < 8) return;"));
        assert!(
            k.text
                .contains(&format!("for (int i{0} = 0; i{0} < 8; ++i{0})", i.id().0))
        );
        assert!(
            k.text
                .contains(&format!("const float *{} = a;", node_name(&x)))
        );
        assert_eq!(k.bound, vec![node_name(&y), node_name(&x)]);
    }

    /// Two fresh builds of one schedule render other names but the same kernel keys;
    /// another schedule gives another key. Checked over every routine's first points.
    #[test]
    fn fresh_renderings_of_one_schedule_share_keys() {
        use canonical_text::segment_kernel_name;
        use kernel_cache::{Names, kernel_key};
        let render = |r: &crate::kernels::Routine, point: &[usize], first: usize| {
            let built = (r.build)();
            let code = (r.schedule)(&built, point)
                .unwrap()
                .apply(&built.code)
                .unwrap();
            segments(&code)
                .iter()
                .enumerate()
                .map(|(i, seg)| {
                    let symbol = segment_kernel_name(r.name, first + i);
                    let k = render_segment(&symbol, seg, &built.params).unwrap();
                    let names = Names::new().with_bound(k.bound.iter().cloned());
                    (
                        k.text.clone(),
                        kernel_key(&k.text, &symbol, &names, &[], b"cc"),
                    )
                })
                .collect::<Vec<_>>()
        };
        for r in crate::kernels::routines() {
            let zero = vec![0; r.space.len()];
            let mut other = zero.clone();
            other[0] = 1;
            let (a, b) = (render(&r, &zero, 0), render(&r, &zero, 7));
            for ((ta, ka), (tb, kb)) in a.iter().zip(&b) {
                assert_ne!(ta, tb, "{}: fresh names", r.name);
                assert_eq!(ka, kb, "{}: same key", r.name);
            }
            if (r.schedule)(&(r.build)(), &other).is_some() {
                let c = render(&r, &other, 0);
                let keys =
                    |v: &[(String, String)]| v.iter().map(|(_, k)| k.clone()).collect::<Vec<_>>();
                assert_ne!(keys(&a), keys(&c), "{}: another schedule", r.name);
            }
        }
    }

    #[test]
    fn unrolled_loops_become_copies_and_vectorized_loops_get_a_pragma() {
        let (i, j) = (Symbol::fresh("i"), Symbol::fresh("j"));
        let y = TensorNode::new("y", &[4, 32], Precision::F32);
        let set = Stmt::set(&y, vec![Index::var(&i), Index::var(&j)], Expr::Const(1.0));
        let mut code = Code::new(vec![Stmt::for_(
            &i,
            0,
            4,
            vec![Stmt::for_(&j, 0, 32, vec![set])],
        )]);
        if let Stmt::For(outer) = &mut code.body[0] {
            outer.kind = LoopKind::Unrolled;
            if let Stmt::For(inner) = &mut outer.body[0] {
                inner.kind = LoopKind::Vectorized;
            }
        }
        let params = [(y.id(), Param::Out)];
        let k = render_segment("u__seg0", &segments(&code)[0], &params).unwrap();
        assert_eq!(k.text.matches("#pragma omp simd").count(), 4, "{}", k.text);
        assert!(
            k.text
                .contains(&format!("[{} + 96] = 1.0f;", sym_name(j.id()))),
            "{}",
            k.text
        );
        assert!(!k.text.contains(&sym_name(i.id())), "{}", k.text);
    }

    #[test]
    fn float_literals_are_c_floats() {
        assert_eq!(float_literal(2.0), "2.0f");
        assert_eq!(float_literal(0.5), "0.5f");
        assert_eq!(float_literal(-3.0), "-3.0f");
        assert_eq!(float_literal(1e-7), "1e-7f");
    }
}
