//! The C renderer for the reference IR: one C function per [`Code`], its signature and
//! naming policy chosen by the caller ([`render`]).
//!
//! It is a code generator in the sense of [`schedule_cache::Config`]: every setting it reads goes
//! through [`Config::get`], and each is declared in
//! [`REFERENCE_SETTINGS`]: `large_models` (64-bit indices),
//! `buffer_aliasing` (no `restrict` when buffers may alias) and `debug_log_from_routines`
//! (a log line on entry).
//!
//! What it emits: loops over the code's symbols (an unrolled loop of at most
//! [`UNROLL_COPIES_MAX`] iterations becomes that many copies with the loop variable folded
//! into the indices; a longer one gets `#pragma GCC unroll 16`; a vectorized one `#pragma
//! omp simd`, honoured under `-fopenmp-simd`), row-major flat indices with constants folded,
//! and arithmetic in the precision of what is assigned (`float` literals and `expf`/`fmaxf`
//! for f32, f16 and bf16 values; `double` for f64). f16 and bf16 tensors are stored as
//! `uint16_t` and converted on every load and store (helpers in the prelude).
//!
//! A function's text (the prelude aside) is at most [`MAX_RENDER_BYTES`]: unrolled loops
//! are copied, so a schedule that unrolls every loop of a large nest (a cache entry of nine
//! ops can) renders a copy per iteration, gigabytes for a 512³ matmul; such code is refused
//! ([`Error::Render`]) as soon as the text passes the cap (checked before each copy), not
//! after it has exhausted memory.
//!
//! ```
//! use schedule_cache::Config;
//! use reference_ir::ir::{BinOp, Code, Expr, Index, Precision, Stmt, Symbol, TensorNode};
//! use reference_ir::render::{Naming, reference_settings, render, signature_of};
//!
//! let i = Symbol::fresh("i");
//! let x = TensorNode::new("x", &[8], Precision::F32);
//! let y = TensorNode::new("y", &[8], Precision::F32);
//! let code = Code::new(vec![Stmt::for_(&i, 0, 8, vec![Stmt::set(
//!     &y, vec![Index::var(&i)],
//!     Expr::bin(BinOp::Mul, Expr::get(&x, vec![Index::var(&i)]), Expr::Const(2.0)),
//! )])]);
//! let config = Config::new(reference_settings());
//! let k = render(&code, "scale__seg0", &signature_of(&code, &[]), Naming::Minted, &config)?;
//! // Parameters in canonical node order: `y` (written) then `x` (read only).
//! assert!(k.text.starts_with(&format!("void scale__seg0(float *restrict n{}_y, const float *restrict n{}_x)", y.id().0, x.id().0)));
//! assert!(k.text.contains(&format!("for (int32_t i{0} = 0; i{0} < 8; ++i{0})", i.id().0)));
//! assert!(k.text.contains("* 2.0f"));
//! assert_eq!(k.params.len(), 2);
//! # Ok::<(), schedule_cache::Error>(())
//! ```
//!
//! **Keying the settings.** The default [`SettingsRegistry`]
//! declares none of the renderer's settings: set there, they would change the C without
//! changing the key (each read is only logged as undeclared). Give a
//! [`ScheduleCache`](schedule_cache::ScheduleCache) `Config::new(reference_settings())`
//! (with your values) and render with its `config()`: then every setting the renderer reads
//! enters the codegen component.
//! [`digest_completeness`](schedule_cache::digest_completeness) checks that in a test.
//!
//! ```
//! use schedule_cache::{digest_completeness, Config, SettingsRegistry};
//! use reference_ir::ir::{Code, Expr, Index, Precision, Stmt, Symbol, TensorNode};
//! use reference_ir::render::{reference_settings, render, signature_of, Naming};
//! use reference_ir::schedule::ReferenceLanguage;
//! use schedule_cache::{DiskCache, ScheduleCache, TimingIdentity};
//!
//! let tmp = tempfile::tempdir()?;
//! let i = Symbol::fresh("i");
//! let y = TensorNode::new("y", &[64], Precision::F32);
//! let body = vec![Stmt::set(&y, vec![Index::var(&i)], Expr::Const(1.0))];
//! let code = Code::new(vec![Stmt::for_(&i, 0, 64, body)]);
//! let cache = |config: Config| {
//!     let timing = TimingIdentity { device: "x86_64 avx2".into(), toolchain: None };
//!     ScheduleCache::new(ReferenceLanguage, "cc", timing, DiskCache::new(tmp.path()))
//!         .with_config(config)
//! };
//! let params = signature_of(&code, &[]);
//! let c_text = |config: &Config| render(&code, "k", &params, Naming::Minted, config);
//!
//! // The default registry: 64-bit indices change the C but not the key.
//! let default = || Config::new(SettingsRegistry::new());
//! let (narrow, wide) = (cache(default()), cache(default().with("large_models", "true")));
//! assert!(digest_completeness(wide.config(), c_text).is_err()); // undeclared reads
//! assert!(c_text(wide.config())?.text.contains("int64_t"));
//! assert_eq!(narrow.key(&code)?, wide.key(&code)?);
//!
//! // The reference registry: every setting the renderer reads is in the key.
//! let reference = || Config::new(reference_settings());
//! let (narrow, wide) = (cache(reference()), cache(reference().with("large_models", "true")));
//! assert!(digest_completeness(wide.config(), c_text)?.is_ok());
//! assert_ne!(narrow.key(&code)?, wide.key(&code)?);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::collections::BTreeMap;
use std::fmt::Write;

use crate::ir::{
    BinOp, Code, Expr, Index, Loop, LoopKind, Precision, Stmt, Symbol, TensorNode, UnOp,
};
use schedule_cache::{
    Config, Error, KeyComponent, Relevance, SettingDecl, SettingsRegistry, SymId, TIMING_SETTING,
};

/// The settings this renderer and the reference autotuner consult, each with the key
/// component it enters (or why it enters none).
pub const REFERENCE_SETTINGS: &[SettingDecl] = &[
    SettingDecl {
        name: "large_models",
        relevance: Relevance::Enters(KeyComponent::Codegen),
    },
    SettingDecl {
        name: "buffer_aliasing",
        relevance: Relevance::Enters(KeyComponent::Codegen),
    },
    SettingDecl {
        name: "debug_log_from_routines",
        relevance: Relevance::Enters(KeyComponent::Codegen),
    },
    SettingDecl {
        name: "prefer_backend_uniformity",
        relevance: Relevance::Enters(KeyComponent::Codegen),
    },
    SettingDecl {
        name: "numerics.allow_tf32",
        relevance: Relevance::Enters(KeyComponent::Numerics),
    },
    SettingDecl {
        name: "numerics.fast_math",
        relevance: Relevance::Enters(KeyComponent::Numerics),
    },
    SettingDecl {
        name: TIMING_SETTING,
        relevance: Relevance::Enters(KeyComponent::Timing),
    },
    SettingDecl {
        name: "log_level",
        relevance: Relevance::Irrelevant(
            "verbosity alone never changes a kernel; kernel logging is debug_log_from_routines",
        ),
    },
    SettingDecl {
        name: "cache_dir",
        relevance: Relevance::Irrelevant("where entries live, not what they mean"),
    },
];

/// The registry of [`REFERENCE_SETTINGS`]: give a
/// [`ScheduleCache`](schedule_cache::ScheduleCache) `Config::new(reference_settings())` (with
/// your values) and every setting [`render`] reads enters the key.
pub fn reference_settings() -> SettingsRegistry {
    let mut r = SettingsRegistry::new();
    for d in REFERENCE_SETTINGS {
        // The reference declarations are valid and distinct (checked by a unit test).
        let _ = r.declare(*d);
    }
    r
}

/// Unrolled loops of at most this many iterations are emitted as copies.
pub const UNROLL_COPIES_MAX: i64 = 16;

/// The most bytes of C text [`render`] produces for one function: past it, the code is
/// refused ([`Error::Render`]). A 64³ matmul with every loop unrolled renders to about
/// 25 MB; the demo's schedules render to about 10 KB.
pub const MAX_RENDER_BYTES: usize = 16 << 20;

/// How the renderer names what the function owns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Naming {
    /// As a tensor compiler mints names from the IR's process-wide ids: loop and static
    /// symbols `i<id>`, locals `v<id>_<name>`, tensor nodes `n<id>_<label>`. Two fresh
    /// builds of one code differ in every name (what canonical-text keys see through).
    Minted,
    /// Readable names that keep the symbol's name first: symbols `v_<name>_<id>`, tensor
    /// nodes `t_<label>_<id>`.
    Stable,
}

/// One parameter of the rendered function, in order.
#[derive(Clone, Debug, PartialEq)]
pub enum Param {
    /// A pointer to the node's elements (`const` unless the code sets the node).
    Node(TensorNode),
    /// A static index symbol, passed by value (`int32_t`, or `int64_t` under
    /// `large_models`).
    Static(Symbol),
}

/// The default signature: every tensor node of `code` in [`Code::nodes`] order (canonical
/// order), then `statics`.
pub fn signature_of(code: &Code, statics: &[Symbol]) -> Vec<Param> {
    code.nodes()
        .into_iter()
        .map(Param::Node)
        .chain(statics.iter().cloned().map(Param::Static))
        .collect()
}

/// What a rendered parameter is, for the caller's calling convention.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ParamKind {
    /// A buffer of `len` elements, each stored as [`c_type`]`(precision)` (f16 and bf16 as
    /// their `uint16_t` bits).
    Buffer {
        /// The node's precision.
        precision: Precision,
        /// Whether the function writes it.
        writes: bool,
        /// Its element count (the product of its dims): the function touches no element
        /// at or beyond it.
        len: usize,
    },
    /// An index value; `wide` when it is `int64_t` (else `int32_t`).
    Index {
        /// 64-bit.
        wide: bool,
    },
}

/// A rendered parameter: its C name and kind.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RenderedParam {
    /// The C name.
    pub name: String,
    /// What it is.
    pub kind: ParamKind,
}

/// A rendered function.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rendered {
    /// What the text needs ahead of it: headers and `static inline` helpers.
    pub prelude: String,
    /// The function definition.
    pub text: String,
    /// Its parameters, in order.
    pub params: Vec<RenderedParam>,
    /// Every name the function owns (binds): parameters, loop variables and locals. Pass
    /// them to `canonical_text::Names::with_bound` to compare renderings up to renaming.
    pub owned: Vec<String>,
}

impl Rendered {
    /// Prelude and text as one C file.
    pub fn file(&self) -> String {
        format!("{}{}", self.prelude, self.text)
    }
}

fn clean(name: &str) -> String {
    name.chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .take(32)
        .collect()
}

impl Naming {
    /// The C name of a loop, static or local symbol.
    pub fn symbol(self, sym: &Symbol) -> String {
        self.symbol_of(sym.id(), sym.name(), false)
    }

    fn symbol_of(self, id: SymId, name: &str, local: bool) -> String {
        match (self, local) {
            (Naming::Minted, false) => format!("i{}", id.0),
            (Naming::Minted, true) => format!("v{}_{}", id.0, clean(name)),
            (Naming::Stable, _) => format!("v_{}_{}", clean(name), id.0),
        }
    }

    /// The C name of a tensor node.
    pub fn node(self, node: &TensorNode) -> String {
        match self {
            Naming::Minted => format!("n{}_{}", node.id().0, clean(node.label())),
            Naming::Stable => format!("t_{}_{}", clean(node.label()), node.id().0),
        }
    }
}

/// The C storage type of a precision. f16 and bf16 are stored as `uint16_t` (their bits)
/// and converted to `float` on every load and back on every store.
pub fn c_type(p: Precision) -> &'static str {
    match p {
        Precision::F16 | Precision::Bf16 => "uint16_t",
        Precision::F32 => "float",
        Precision::F64 => "double",
        Precision::I32 => "int32_t",
        Precision::I64 => "int64_t",
    }
}

/// The type arithmetic for a value of precision `p` is done in.
fn compute_type(p: Precision) -> &'static str {
    match p {
        Precision::F16 | Precision::Bf16 | Precision::F32 => "float",
        p => c_type(p),
    }
}

const F16_HELPERS: &str = "static inline float kc_f16_load(uint16_t b) {\n\
  union { uint16_t u; _Float16 h; } c; c.u = b; return (float)c.h;\n}\n\
static inline uint16_t kc_f16_store(float f) {\n\
  union { uint16_t u; _Float16 h; } c; c.h = (_Float16)f; return c.u;\n}\n";

const BF16_HELPERS: &str = "static inline float kc_bf16_load(uint16_t b) {\n\
  union { uint32_t u; float f; } c; c.u = (uint32_t)b << 16; return c.f;\n}\n\
static inline uint16_t kc_bf16_store(float f) {\n\
  union { uint32_t u; float f; } c; c.f = f; return (uint16_t)(c.u >> 16);\n}\n";

/// A C literal of `c` for arithmetic in precision `p`.
fn literal(c: f64, p: Precision) -> String {
    let float = compute_type(p) == "float";
    if c.is_nan() {
        return "NAN".to_owned();
    }
    if c.is_infinite() {
        return if c > 0.0 { "INFINITY" } else { "(-INFINITY)" }.to_owned();
    }
    if matches!(p, Precision::I32 | Precision::I64) && c.fract() == 0.0 && c.abs() < 9.0e15 {
        return format!("({})", c as i64);
    }
    let s = if float {
        format!("{:?}", c as f32)
    } else {
        format!("{c:?}")
    };
    let s = if s.contains(['.', 'e', 'E']) {
        s
    } else {
        format!("{s}.0")
    };
    let suffix = if float { "f" } else { "" };
    if s.starts_with('-') {
        format!("({s}{suffix})")
    } else {
        format!("{s}{suffix}")
    }
}

struct Renderer<'a> {
    out: String,
    index_type: &'static str,
    naming: Naming,
    /// Loop symbols replaced by constants (inside unrolled copies).
    env: BTreeMap<SymId, i64>,
    /// The node parameters, by id, with their names.
    nodes: BTreeMap<schedule_cache::NodeId, (String, &'a TensorNode)>,
    /// The precision of every local declared so far.
    locals: BTreeMap<SymId, Precision>,
    owned: Vec<String>,
}

fn render_error(why: String) -> Error {
    Error::Render(why)
}

fn too_long() -> Error {
    render_error(format!(
        "the text would be longer than {MAX_RENDER_BYTES} bytes (unrolled loops are copied)"
    ))
}

impl Renderer<'_> {
    fn line(&mut self, depth: usize, text: &str) {
        for _ in 0..depth {
            self.out.push_str("  ");
        }
        self.out.push_str(text);
        self.out.push('\n');
    }

    fn node_name(&self, node: &TensorNode) -> Result<String, Error> {
        self.nodes
            .get(&node.id())
            .map(|(name, _)| name.clone())
            .ok_or_else(|| {
                render_error(format!(
                    "node {} is no parameter of the signature",
                    node.label()
                ))
            })
    }

    /// The row-major flat index of `index` into `node`, constants folded.
    fn flat_index(&self, node: &TensorNode, index: &[Index]) -> Result<String, Error> {
        let dims = node.dims();
        if dims.len() != index.len() {
            return Err(render_error(format!(
                "node {} has {} dims but is indexed with {}",
                node.label(),
                dims.len(),
                index.len()
            )));
        }
        let overflow = || render_error("index arithmetic overflows".to_owned());
        let mut constant: i64 = 0;
        let mut terms: Vec<(SymId, String, i64)> = Vec::new();
        let mut stride: i64 = 1;
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
                } else if let Some(t) = terms.iter_mut().find(|(id, ..)| *id == s.id()) {
                    t.2 = t.2.checked_add(coefficient).ok_or_else(overflow)?;
                } else {
                    terms.push((s.id(), self.naming.symbol(s), coefficient));
                }
            }
            stride = i64::try_from(*d)
                .ok()
                .and_then(|d| stride.checked_mul(d))
                .ok_or_else(overflow)?;
        }
        let mut text = String::new();
        for (_, name, c) in terms.iter().filter(|(.., c)| *c != 0) {
            if !text.is_empty() {
                text.push_str(" + ");
            }
            if *c == 1 {
                text.push_str(name);
            } else {
                let _ = write!(text, "{c} * {name}");
            }
        }
        if text.is_empty() {
            text = constant.to_string();
        } else if constant != 0 {
            let _ = write!(text, " + {constant}");
        }
        Ok(text)
    }

    fn load(&self, node: &TensorNode, index: &[Index]) -> Result<String, Error> {
        let e = format!(
            "{}[{}]",
            self.node_name(node)?,
            self.flat_index(node, index)?
        );
        Ok(match node.precision() {
            Precision::F16 => format!("kc_f16_load({e})"),
            Precision::Bf16 => format!("kc_bf16_load({e})"),
            _ => e,
        })
    }

    /// `e` as C, computed in the arithmetic of precision `p`.
    fn expr(&self, e: &Expr, p: Precision) -> Result<String, Error> {
        let float = compute_type(p) == "float";
        Ok(match e {
            Expr::Const(c) => literal(*c, p),
            Expr::Get(a) => self.load(&a.node, &a.index)?,
            Expr::Local(s) => {
                if !self.locals.contains_key(&s.id()) {
                    return Err(render_error(format!(
                        "local {} is used before it is declared",
                        s.name()
                    )));
                }
                self.naming.symbol_of(s.id(), s.name(), true)
            }
            Expr::Unary(op, a) => {
                let a = self.expr(a, p)?;
                let f = if float { "f" } else { "" };
                match op {
                    UnOp::Neg => format!("(-{a})"),
                    UnOp::Exp => format!("exp{f}({a})"),
                    UnOp::Sqrt => format!("sqrt{f}({a})"),
                    UnOp::Relu => format!("fmax{f}({a}, {})", literal(0.0, p)),
                }
            }
            Expr::Binary(op, a, b) => {
                let (a, b) = (self.expr(a, p)?, self.expr(b, p)?);
                let f = if float { "f" } else { "" };
                match op {
                    BinOp::Add => format!("({a} + {b})"),
                    BinOp::Sub => format!("({a} - {b})"),
                    BinOp::Mul => format!("({a} * {b})"),
                    BinOp::Div => format!("({a} / {b})"),
                    BinOp::Max => format!("fmax{f}({a}, {b})"),
                }
            }
        })
    }

    // `for_` and `stmts` recurse once per nesting level: they keep their frames small (the
    // text of a loop head or a statement is built in helpers that return before the
    // recursion), so nests of `schedule::MAX_NEST_DEPTH` loops render on a small stack.
    fn for_(&mut self, depth: usize, l: &Loop) -> Result<(), Error> {
        let extent = l.to.saturating_sub(l.from);
        if l.kind == LoopKind::Unrolled && extent <= UNROLL_COPIES_MAX {
            for value in l.from..l.to {
                // Copies multiply (a nest of unrolled loops renders the product of their
                // extents): the length is checked before each copy, so the text never
                // grows much past the cap before it is refused.
                if self.out.len() > MAX_RENDER_BYTES {
                    self.env.remove(&l.var.id());
                    return Err(too_long());
                }
                self.env.insert(l.var.id(), value);
                self.line(depth, "{");
                let result = self.stmts(depth + 1, &l.body);
                self.line(depth, "}");
                self.env.remove(&l.var.id());
                result?;
            }
            return Ok(());
        }
        self.loop_head(depth, l);
        self.stmts(depth + 1, &l.body)?;
        self.line(depth, "}");
        Ok(())
    }

    fn loop_head(&mut self, depth: usize, l: &Loop) {
        match l.kind {
            LoopKind::Serial => {}
            LoopKind::Unrolled => self.line(depth, "#pragma GCC unroll 16"),
            LoopKind::Vectorized => self.line(depth, "#pragma omp simd"),
        }
        let v = self.naming.symbol(&l.var);
        self.owned.push(v.clone());
        let head = format!(
            "for ({} {v} = {}; {v} < {}; ++{v}) {{",
            self.index_type, l.from, l.to
        );
        self.line(depth, &head);
    }

    fn stmts(&mut self, depth: usize, stmts: &[Stmt]) -> Result<(), Error> {
        for s in stmts {
            match s {
                Stmt::For(l) => self.for_(depth, l)?,
                _ => self.leaf(depth, s)?,
            }
        }
        Ok(())
    }

    /// A statement that is no loop (`stmts` renders loops itself).
    fn leaf(&mut self, depth: usize, s: &Stmt) -> Result<(), Error> {
        match s {
            Stmt::For(l) => self.for_(depth, l)?,
            Stmt::Set { target, value } => {
                let p = target.node.precision();
                let t = format!(
                    "{}[{}]",
                    self.node_name(&target.node)?,
                    self.flat_index(&target.node, &target.index)?
                );
                let v = self.expr(value, p)?;
                let v = match p {
                    Precision::F16 => format!("kc_f16_store({v})"),
                    Precision::Bf16 => format!("kc_bf16_store({v})"),
                    _ => v,
                };
                self.line(depth, &format!("{t} = {v};"));
            }
            Stmt::Local {
                var,
                precision,
                value,
            } => {
                let v = self.expr(value, *precision)?;
                let name = self.naming.symbol_of(var.id(), var.name(), true);
                if !self.owned.contains(&name) {
                    self.owned.push(name.clone());
                }
                self.locals.insert(var.id(), *precision);
                let decl = format!("{} {name} = {v};", compute_type(*precision));
                self.line(depth, &decl);
            }
            Stmt::SetLocal { var, value } => {
                let p = *self.locals.get(&var.id()).ok_or_else(|| {
                    render_error(format!(
                        "local {} is assigned before it is declared",
                        var.name()
                    ))
                })?;
                let v = self.expr(value, p)?;
                let name = self.naming.symbol_of(var.id(), var.name(), true);
                self.line(depth, &format!("{name} = {v};"));
            }
            Stmt::Opaque(what) => {
                return Err(render_error(format!(
                    "opaque construct {what:?} cannot be rendered to C"
                )));
            }
        }
        Ok(())
    }
}

fn is_c_identifier(s: &str) -> bool {
    let mut chars = s.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Renders `code` as the C function `void <name>(<params>)`, naming what it owns by
/// `naming`. `params` is the signature (see [`signature_of`] for the default): a node the
/// code touches must be one of them. Reads `large_models`, `buffer_aliasing` and
/// `debug_log_from_routines` through `config`.
///
/// # Errors
/// [`Error::Render`] when `name` is not a C identifier, the code touches a node that is no
/// parameter, indexes a node with the wrong number of indices, folds an index past `i64`,
/// holds an opaque construct (which has no C meaning), or the text would be longer than
/// [`MAX_RENDER_BYTES`].
pub fn render(
    code: &Code,
    name: &str,
    params: &[Param],
    naming: Naming,
    config: &Config,
) -> Result<Rendered, Error> {
    if !is_c_identifier(name) {
        return Err(render_error(format!("{name:?} is not a C identifier")));
    }
    let wide = config.get("large_models") == Some("true");
    let index_type = if wide { "int64_t" } else { "int32_t" };
    let restrict = if config.get("buffer_aliasing") == Some("true") {
        ""
    } else {
        "restrict "
    };
    let log = config.get("debug_log_from_routines") == Some("true");
    let mut decls = Vec::with_capacity(params.len());
    let mut rendered_params = Vec::with_capacity(params.len());
    let mut nodes = BTreeMap::new();
    for p in params {
        let (decl, param) = match p {
            Param::Node(n) => {
                let pname = naming.node(n);
                let writes = code.sets(n.id());
                let constness = if writes { "" } else { "const " };
                nodes.insert(n.id(), (pname.clone(), n));
                (
                    format!("{constness}{} *{restrict}{pname}", c_type(n.precision())),
                    RenderedParam {
                        name: pname,
                        kind: ParamKind::Buffer {
                            precision: n.precision(),
                            writes,
                            len: n.len(),
                        },
                    },
                )
            }
            Param::Static(s) => {
                let pname = naming.symbol(s);
                (
                    format!("{index_type} {pname}"),
                    RenderedParam {
                        name: pname,
                        kind: ParamKind::Index { wide },
                    },
                )
            }
        };
        if rendered_params
            .iter()
            .any(|q: &RenderedParam| q.name == param.name)
        {
            return Err(render_error(format!(
                "parameter {} given twice",
                param.name
            )));
        }
        decls.push(decl);
        rendered_params.push(param);
    }
    let mut r = Renderer {
        out: String::new(),
        index_type,
        naming,
        env: BTreeMap::new(),
        nodes,
        locals: BTreeMap::new(),
        owned: rendered_params.iter().map(|p| p.name.clone()).collect(),
    };
    let decls = if decls.is_empty() {
        "void".to_owned()
    } else {
        decls.join(", ")
    };
    r.line(0, &format!("void {name}({decls}) {{"));
    if log {
        r.line(1, &format!("fprintf(stderr, \"enter {name}\\n\");"));
    }
    r.stmts(1, &code.body)?;
    r.line(0, "}");
    if r.out.len() > MAX_RENDER_BYTES {
        return Err(too_long());
    }

    let mut prelude = String::from("#include <stdint.h>\n#include <math.h>\n");
    if log {
        prelude.push_str("#include <stdio.h>\n");
    }
    let precisions: Vec<Precision> = code.nodes().iter().map(TensorNode::precision).collect();
    if precisions.contains(&Precision::F16) {
        prelude.push_str(F16_HELPERS);
    }
    if precisions.contains(&Precision::Bf16) {
        prelude.push_str(BF16_HELPERS);
    }
    Ok(Rendered {
        prelude,
        text: r.out,
        params: rendered_params,
        owned: r.owned,
    })
}

/// Cuts `code` into segments, as a renderer emitting one kernel per segment does: each is
/// a maximal run of top-level statements that ends with a loop (a local hoisted in front
/// of a loop belongs to that loop's segment); trailing statements form a last segment.
pub fn segments(code: &Code) -> Vec<Code> {
    let mut out = Vec::new();
    let mut current = Vec::new();
    for s in &code.body {
        let ends = matches!(s, Stmt::For(_));
        current.push(s.clone());
        if ends {
            out.push(Code::new(std::mem::take(&mut current)));
        }
    }
    if !current.is_empty() {
        out.push(Code::new(current));
    }
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::ir::{Expr, Index};
    use schedule_cache::digest_completeness;

    fn copy_code() -> (Code, Symbol, TensorNode, TensorNode) {
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
        (code, i, x, y)
    }

    #[test]
    fn reference_declarations_are_valid_and_distinct() {
        let mut r = SettingsRegistry::new();
        for d in REFERENCE_SETTINGS {
            r.declare(*d).expect("valid declaration");
        }
        assert_eq!(r, reference_settings());
    }

    #[test]
    fn settings_change_the_text_and_are_all_declared() {
        let (code, ..) = copy_code();
        let sig = signature_of(&code, &[]);
        let base = Config::new(reference_settings());
        let text = |c: &Config| render(&code, "k", &sig, Naming::Stable, c).unwrap().file();
        let plain = digest_completeness(&base, text).expect("declared");
        assert!(plain.contains("const float *restrict t_x_"), "{plain}");
        assert!(plain.contains("int32_t v_i_"), "{plain}");
        let wide = base.clone().with("large_models", "true");
        assert!(text(&wide).contains("int64_t v_i_"));
        let alias = base.clone().with("buffer_aliasing", "true");
        assert!(!text(&alias).contains("restrict"));
        let log = base.with("debug_log_from_routines", "true");
        assert!(text(&log).contains("fprintf"));
    }

    #[test]
    fn naming_policies_and_the_signature_are_the_callers() {
        let (code, i, x, y) = copy_code();
        let cfg = Config::new(reference_settings());
        // The caller's order, not the canonical one.
        let sig = [Param::Node(x.clone()), Param::Node(y.clone())];
        let minted = render(&code, "f__seg0", &sig, Naming::Minted, &cfg).unwrap();
        let (nx, ny, ii) = (
            format!("n{}_x", x.id().0),
            format!("n{}_y", y.id().0),
            format!("i{}", i.id().0),
        );
        assert!(minted.text.starts_with(&format!(
            "void f__seg0(const float *restrict {nx}, float *restrict {ny})"
        )));
        assert!(minted.text.contains(&format!("{ny}[{ii}] = {nx}[{ii}];")));
        assert_eq!(minted.owned, [nx.clone(), ny.clone(), ii]);
        assert_eq!(
            minted.params[1].kind,
            ParamKind::Buffer {
                precision: Precision::F32,
                writes: true,
                len: 8
            }
        );
        let stable = render(&code, "f", &sig, Naming::Stable, &cfg).unwrap();
        assert!(stable.text.contains(&format!("t_y_{}", y.id().0)));
        // A node the code touches must be a parameter.
        let missing = render(&code, "f", &sig[..1], Naming::Minted, &cfg);
        assert!(matches!(missing, Err(Error::Render(_))));
        assert!(render(&code, "not c", &sig, Naming::Minted, &cfg).is_err());
        let opaque = Code::new(vec![Stmt::Opaque("closure".into())]);
        assert!(render(&opaque, "o", &[], Naming::Minted, &cfg).is_err());
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
        let cfg = Config::new(reference_settings());
        let k = render(
            &code,
            "u__seg0",
            &signature_of(&code, &[]),
            Naming::Minted,
            &cfg,
        )
        .unwrap();
        assert_eq!(k.text.matches("#pragma omp simd").count(), 4, "{}", k.text);
        assert!(
            k.text.contains(&format!("[i{} + 96] = 1.0f;", j.id().0)),
            "{}",
            k.text
        );
        assert!(!k.text.contains(&format!("i{} ", i.id().0)), "{}", k.text);
    }

    #[test]
    fn literals_follow_the_precision() {
        assert_eq!(literal(2.0, Precision::F32), "2.0f");
        assert_eq!(literal(0.5, Precision::Bf16), "0.5f");
        assert_eq!(literal(-3.0, Precision::F32), "(-3.0f)");
        assert_eq!(literal(1e-7, Precision::F32), "1e-7f");
        assert_eq!(literal(0.1, Precision::F64), "0.1");
        assert_eq!(literal(3.0, Precision::I64), "(3)");
        assert_eq!(literal(f64::NAN, Precision::F32), "NAN");
    }

    #[test]
    fn segments_end_with_loops() {
        let (code, ..) = copy_code();
        let mut body = code.body.clone();
        body.extend(code.body.clone());
        let two = Code::new(body);
        assert_eq!(segments(&two).len(), 2);
        assert_eq!(segments(&two)[0], code);
    }
}
