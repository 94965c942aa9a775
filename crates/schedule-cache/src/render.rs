//! A reference C renderer for the reference IR: one C function per [`Code`], parameters in
//! canonical node order, statics as trailing index parameters.
//!
//! It is a code generator in the sense of [`crate::config`]: every setting it reads goes
//! through [`Config::get`], and each is declared in
//! [`REFERENCE_SETTINGS`](crate::config::REFERENCE_SETTINGS): `large_models` (64-bit indices),
//! `buffer_aliasing` (no `restrict` when buffers may alias) and `debug_log_from_routines`
//! (a log line on entry).

use crate::config::Config;
use crate::ir::{
    BinOp, Code, Expr, Index, Loop, LoopKind, Precision, Stmt, Symbol, TensorNode, UnOp,
};
use std::fmt::Write;

fn ident(prefix: &str, name: &str, id: u64) -> String {
    let clean: String = name
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .take(32)
        .collect();
    format!("{prefix}{clean}_{id}")
}

/// The C identifier the renderer uses for a symbol (`v_<name>_<id>`).
pub fn symbol_name(sym: &Symbol) -> String {
    ident("v_", sym.name(), sym.id().0)
}

/// The C identifier the renderer uses for a tensor node parameter (`t_<label>_<id>`).
pub fn node_name(node: &TensorNode) -> String {
    ident("t_", node.label(), node.id().0)
}

/// The C element (storage) type of a precision. bf16 has no portable C type: it is stored as
/// `uint16_t` (the high half of a float) and converted on every load and store.
pub fn c_type(p: Precision) -> &'static str {
    match p {
        Precision::F16 => "_Float16",
        // No portable C type: stored as the high half of an IEEE single (see `render_c`).
        Precision::Bf16 => "uint16_t",
        Precision::F32 => "float",
        Precision::F64 => "double",
        Precision::I32 => "int32_t",
        Precision::I64 => "int64_t",
    }
}

const BF16_HELPERS: &str = "static inline float kc_bf16_load(uint16_t b) {\n\
  union { uint32_t u; float f; } c; c.u = (uint32_t)b << 16; return c.f;\n}\n\
static inline uint16_t kc_bf16_store(float f) {\n\
  union { uint32_t u; float f; } c; c.f = f; return (uint16_t)(c.u >> 16);\n}";

/// Every name the rendered function owns (binds): node and static parameters, loop variables
/// and locals. Pass them to `canonical_text::Names::with_bound` to compare renderings up to
/// renaming.
pub fn owned_names(code: &Code, statics: &[Symbol]) -> Vec<String> {
    fn walk(stmts: &[Stmt], out: &mut Vec<String>) {
        for s in stmts {
            match s {
                Stmt::For(l) => {
                    out.push(symbol_name(&l.var));
                    walk(&l.body, out);
                }
                Stmt::Local { var, .. } => out.push(symbol_name(var)),
                Stmt::Set { .. } | Stmt::SetLocal { .. } | Stmt::Opaque(_) => {}
            }
        }
    }
    let mut out: Vec<String> = code.nodes().iter().map(node_name).collect();
    out.extend(statics.iter().map(symbol_name));
    walk(&code.body, &mut out);
    out
}

struct Renderer<'a> {
    out: String,
    index_type: &'static str,
    code: &'a Code,
}

impl Renderer<'_> {
    fn line(&mut self, depth: usize, text: &str) {
        for _ in 0..depth {
            self.out.push_str("  ");
        }
        self.out.push_str(text);
        self.out.push('\n');
    }

    fn index(&self, node: &TensorNode, index: &[Index]) -> String {
        // Row-major flattening: ((i0) * d1 + (i1)) * d2 + (i2) ...
        let mut flat = String::new();
        for (k, ix) in index.iter().enumerate() {
            let mut term = format!("{}", ix.constant);
            for (c, s) in &ix.terms {
                let _ = write!(term, " + {c} * {}", symbol_name(s));
            }
            if k == 0 {
                flat = format!("({term})");
            } else {
                let d = node.dims().get(k).copied().unwrap_or(1);
                flat = format!("({flat} * {d} + ({term}))");
            }
        }
        if flat.is_empty() {
            flat.push('0');
        }
        format!("{}[{flat}]", node_name(node))
    }

    fn load(&self, node: &TensorNode, index: &[Index]) -> String {
        let e = self.index(node, index);
        if node.precision() == Precision::Bf16 {
            format!("kc_bf16_load({e})")
        } else {
            e
        }
    }

    fn expr(&self, e: &Expr) -> String {
        match e {
            Expr::Const(c) if c.is_nan() => "NAN".to_owned(),
            Expr::Const(c) if c.is_infinite() => {
                if *c > 0.0 { "INFINITY" } else { "(-INFINITY)" }.to_owned()
            }
            Expr::Const(c) => format!("({c:?})"),
            Expr::Get(a) => self.load(&a.node, &a.index),
            Expr::Local(s) => symbol_name(s),
            Expr::Unary(op, a) => {
                let a = self.expr(a);
                match op {
                    UnOp::Neg => format!("(-({a}))"),
                    UnOp::Exp => format!("exp({a})"),
                    UnOp::Sqrt => format!("sqrt({a})"),
                    UnOp::Relu => format!("fmax({a}, 0.0)"),
                }
            }
            Expr::Binary(op, a, b) => {
                let (a, b) = (self.expr(a), self.expr(b));
                match op {
                    BinOp::Add => format!("({a} + {b})"),
                    BinOp::Sub => format!("({a} - {b})"),
                    BinOp::Mul => format!("({a} * {b})"),
                    BinOp::Div => format!("({a} / {b})"),
                    BinOp::Max => format!("fmax({a}, {b})"),
                }
            }
        }
    }

    fn for_(&mut self, depth: usize, l: &Loop) {
        match l.kind {
            LoopKind::Serial => {}
            LoopKind::Unrolled => self.line(depth, "#pragma GCC unroll 64"),
            LoopKind::Vectorized => self.line(depth, "#pragma GCC ivdep"),
        }
        let v = symbol_name(&l.var);
        let head = format!(
            "for ({} {v} = {}; {v} < {}; ++{v}) {{",
            self.index_type, l.from, l.to
        );
        self.line(depth, &head);
        self.stmts(depth + 1, &l.body);
        self.line(depth, "}");
    }

    fn stmts(&mut self, depth: usize, stmts: &[Stmt]) {
        for s in stmts {
            match s {
                Stmt::For(l) => self.for_(depth, l),
                Stmt::Set { target, value } => {
                    let t = self.index(&target.node, &target.index);
                    let mut v = self.expr(value);
                    if target.node.precision() == Precision::Bf16 {
                        v = format!("kc_bf16_store({v})");
                    }
                    self.line(depth, &format!("{t} = {v};"));
                }
                Stmt::Local {
                    var,
                    precision,
                    value,
                } => {
                    let v = self.expr(value);
                    let ty = match precision {
                        Precision::Bf16 => "float",
                        p => c_type(*p),
                    };
                    let decl = format!("{ty} {} = {v};", symbol_name(var));
                    self.line(depth, &decl);
                }
                Stmt::SetLocal { var, value } => {
                    let v = self.expr(value);
                    self.line(depth, &format!("{} = {v};", symbol_name(var)));
                }
                Stmt::Opaque(what) => {
                    let safe: String = what
                        .chars()
                        .filter(|c| c.is_ascii_alphanumeric() || *c == ' ')
                        .collect();
                    self.line(depth, &format!("/* opaque: {safe} */"));
                }
            }
        }
    }
}

/// Renders `code` as a C function `void <name>(<nodes>, <statics>)`: one pointer parameter per
/// tensor node in [`Code::nodes`] order (`const` when the code never sets it), then one index
/// parameter per static symbol. The text includes the headers it needs and compiles as C11
/// with GCC or Clang. Reads `large_models`, `buffer_aliasing` and `debug_log_from_routines`
/// through `config`.
pub fn render_c(code: &Code, name: &str, statics: &[Symbol], config: &Config) -> String {
    let index_type = if config.get("large_models") == Some("true") {
        "int64_t"
    } else {
        "int32_t"
    };
    let restrict = if config.get("buffer_aliasing") == Some("true") {
        ""
    } else {
        " restrict"
    };
    let log = config.get("debug_log_from_routines") == Some("true");
    let fname = ident("k_", name, 0);
    let mut params: Vec<String> = code
        .nodes()
        .iter()
        .map(|n| {
            let constness = if code.sets(n.id()) { "" } else { "const " };
            format!(
                "{constness}{} *{restrict} {}",
                c_type(n.precision()),
                node_name(n)
            )
        })
        .collect();
    params.extend(
        statics
            .iter()
            .map(|s| format!("{index_type} {}", symbol_name(s))),
    );
    if params.is_empty() {
        params.push("void".to_owned());
    }
    let mut r = Renderer {
        out: String::new(),
        index_type,
        code,
    };
    r.line(0, "#include <stdint.h>");
    r.line(0, "#include <math.h>");
    if log {
        r.line(0, "#include <stdio.h>");
    }
    if code
        .nodes()
        .iter()
        .any(|n| n.precision() == Precision::Bf16)
    {
        r.line(0, BF16_HELPERS);
    }
    r.line(0, &format!("void {fname}({}) {{", params.join(", ")));
    if log {
        r.line(1, &format!("fprintf(stderr, \"enter {fname}\\n\");"));
    }
    let body = &r.code.body;
    r.stmts(1, body);
    r.line(0, "}");
    r.out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{SettingsRegistry, digest_completeness};
    use crate::ir::{Expr, Index};

    #[test]
    fn settings_change_the_text_and_are_all_declared() {
        let i = Symbol::fresh("i");
        let x = TensorNode::constant("x", &[8], Precision::F32);
        let y = TensorNode::new("y", &[8], Precision::F32);
        let code = Code::new(vec![Stmt::for_(
            &i,
            0,
            8,
            vec![Stmt::set(
                &y,
                vec![Index::var(&i)],
                Expr::get(&x, vec![Index::var(&i)]),
            )],
        )]);
        let base = Config::new(SettingsRegistry::reference());
        let plain = digest_completeness(&base, |c| render_c(&code, "k", &[], c)).expect("declared");
        assert!(plain.contains("const float * restrict t_x_"), "{plain}");
        assert!(plain.contains("int32_t v_i_"), "{plain}");
        let wide = base.clone().with("large_models", "true");
        assert!(render_c(&code, "k", &[], &wide).contains("int64_t v_i_"));
        let alias = base.clone().with("buffer_aliasing", "true");
        assert!(!render_c(&code, "k", &[], &alias).contains("restrict"));
        let log = base.with("debug_log_from_routines", "true");
        assert!(render_c(&code, "k", &[], &log).contains("fprintf"));
    }
}
