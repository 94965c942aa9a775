//! The kernels the demo tunes, each as loop code in the reference IR (crate reference-ir), a
//! reference implementation in Rust, and a small schedule space.
//!
//! Every [`Routine::build`] call builds the code afresh, so every candidate gets fresh
//! symbol and node ids (and so fresh C names), as in a real compiler where each
//! candidate is lowered anew.

use std::collections::BTreeMap;

use reference_ir::ir::{BinOp, Code, Expr, Index, Precision, Stmt, Symbol, TensorNode, UnOp};
use reference_ir::schedule::Schedule;
use schedule_cache::NodeId;

/// Which of the demo's three buffers (`out`, `a`, `b`, each of [`Routine::len`]
/// elements) a tensor node lives in; a kernel's parameters are its nodes, each passed
/// the buffer it is bound to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Binding {
    /// `out` (read and written).
    Out,
    /// `a` (read only).
    A,
    /// `b` (read only).
    B,
}

impl Binding {
    /// The buffer's name (`out`, `a`, `b`).
    pub(crate) fn name(self) -> &'static str {
        match self {
            Binding::Out => "out",
            Binding::A => "a",
            Binding::B => "b",
        }
    }
}

/// One freshly built copy of a routine's code, with handles on its loops and nodes so a
/// schedule can name them.
pub(crate) struct Built {
    pub(crate) code: Code,
    pub(crate) loops: BTreeMap<&'static str, Symbol>,
    pub(crate) nodes: BTreeMap<&'static str, TensorNode>,
    pub(crate) params: Vec<(NodeId, Binding)>,
}

impl schedule_cache::LoopCode for Built {
    /// The code's walk: the handles on its loops and nodes are not part of it.
    fn walk(&self, visitor: &mut dyn schedule_cache::Visitor) {
        self.code.walk(visitor)
    }
}

impl Built {
    fn new(
        code: Code,
        loops: &[(&'static str, &Symbol)],
        nodes: &[(&'static str, &TensorNode, Binding)],
    ) -> Built {
        Built {
            code,
            loops: loops.iter().map(|(n, s)| (*n, (*s).clone())).collect(),
            nodes: nodes.iter().map(|(n, t, _)| (*n, (*t).clone())).collect(),
            params: nodes.iter().map(|(_, t, p)| (t.id(), *p)).collect(),
        }
    }

    fn l(&self, name: &str) -> &Symbol {
        // The schedule functions below only name loops their routine's builder made.
        &self.loops[name]
    }

    fn node(&self, name: &str) -> NodeId {
        self.nodes[name].id()
    }
}

/// A schedule-space dimension: its name and its choices (choice 0 is always "do nothing").
pub(crate) type Dim = (&'static str, &'static [&'static str]);

/// A reference implementation: the expected `out` (which starts zeroed) from `a` and `b`.
pub(crate) type Reference = dyn Fn(&[f32], &[f32], &mut [f32]);

/// A kernel to tune.
pub(crate) struct Routine {
    /// The routine's name (segment kernels are `<name>__seg<i>`).
    pub(crate) name: &'static str,
    /// What it computes.
    pub(crate) description: String,
    /// The length of each of `out`, `a` and `b`.
    pub(crate) len: usize,
    /// Builds the unscheduled code afresh.
    pub(crate) build: Box<dyn Fn() -> Built>,
    /// Computes the expected `out` (which starts zeroed) from `a` and `b`.
    pub(crate) reference: Box<Reference>,
    /// The schedule space.
    pub(crate) space: &'static [Dim],
    /// The schedule of a point of the space, or `None` where the point is not legal.
    pub(crate) schedule: fn(&Built, &[usize]) -> Option<Schedule>,
    /// Relative tolerance of the output check.
    pub(crate) tolerance: f32,
}

fn f32n(label: &str, dims: &[usize]) -> TensorNode {
    TensorNode::new(label, dims, Precision::F32)
}

fn ix(s: &Symbol) -> Index {
    Index::var(s)
}

fn get(n: &TensorNode, index: Vec<Index>) -> Expr {
    Expr::get(n, index)
}

fn bin(op: BinOp, a: Expr, b: Expr) -> Expr {
    Expr::bin(op, a, b)
}

// ---------------------------------------------------------------- matmul

/// The matrix product's default size (`n` of n x n x n): [`routines`]'.
pub(crate) const MM: usize = 64;

/// The sizes `--size` accepts for the matrix product.
pub(crate) const MATMUL_SIZES: std::ops::RangeInclusive<usize> = 4..=256;

fn matmul_build(mm: usize) -> Built {
    let m = reference_ir::space::MatmulCode::new(mm);
    let ([i0, j0], [i, j, k]) = (&m.fill, &m.loops);
    Built::new(
        m.code.clone(),
        &[("i0", i0), ("j0", j0), ("i", i), ("j", j), ("k", k)],
        &[
            ("c", &m.c, Binding::Out),
            ("a", &m.a, Binding::A),
            ("b", &m.b, Binding::B),
        ],
    )
}

fn matmul_reference(mm: usize, a: &[f32], b: &[f32], out: &mut [f32]) {
    for i in 0..mm {
        for j in 0..mm {
            let mut acc = 0.0f32;
            for k in 0..mm {
                acc += a[i * mm + k] * b[k * mm + j];
            }
            out[i * mm + j] = acc;
        }
    }
}

const TILES: &[&str] = &["1", "4", "8", "16"];
const INNER: &[&str] = &["serial", "unroll", "simd"];

fn tile(choice: usize, choices: &[&str]) -> i64 {
    choices
        .get(choice)
        .and_then(|c| c.parse().ok())
        .unwrap_or(1)
}

/// Splits `target` by the tile of `tile_choice` (if above 1) and treats the innermost
/// resulting loop as `inner` says. Returns `None` for `simd` when `simd_ok` is false.
fn tile_inner(
    s: &mut Schedule,
    target: &Symbol,
    factor: i64,
    inner: usize,
    simd_ok: bool,
) -> Option<()> {
    let inner_loop = if factor > 1 {
        s.split(target, factor).1
    } else {
        target.clone()
    };
    match inner {
        0 => {}
        1 => s.unroll(&inner_loop),
        _ if simd_ok => s.vectorize(&inner_loop),
        _ => return None,
    }
    Some(())
}

const MATMUL_SPACE: &[Dim] = &[
    ("order", &["ijk", "ikj"]),
    ("hoist", &["-", "a"]),
    ("tile", TILES),
    ("inner", INNER),
    ("init", &["serial", "simd"]),
];

fn matmul_schedule(b: &Built, p: &[usize]) -> Option<Schedule> {
    let mut s = Schedule::new();
    if p[4] == 1 {
        s.vectorize(b.l("j0"));
    }
    let ikj = p[0] == 1;
    let inner = if ikj {
        s.reorder(b.l("j"), b.l("k"));
        b.l("j")
    } else {
        b.l("k")
    };
    if p[1] == 1 {
        if !ikj {
            return None;
        }
        s.hoist(b.node("a"), b.l("j"));
    }
    // In ijk order the innermost loop (k) carries the reduction: no simd.
    tile_inner(&mut s, inner, tile(p[2], TILES), p[3], ikj)?;
    Some(s)
}

// ---------------------------------------------------------------- fused elementwise chain

const EW: usize = 128;

fn chain_build() -> Built {
    let (r, c) = (Symbol::fresh("r"), Symbol::fresh("c"));
    let out = f32n("out", &[EW, EW]);
    let a = f32n("x", &[EW, EW]);
    let b = f32n("y", &[EW, EW]);
    let at = || get(&a, vec![ix(&r), ix(&c)]);
    let bt = || get(&b, vec![ix(&r), ix(&c)]);
    // out = relu(x * y + x) * 0.5 - exp(-(y * y))
    let value = bin(
        BinOp::Sub,
        bin(
            BinOp::Mul,
            Expr::un(
                UnOp::Relu,
                bin(BinOp::Add, bin(BinOp::Mul, at(), bt()), at()),
            ),
            Expr::Const(0.5),
        ),
        Expr::un(UnOp::Exp, Expr::un(UnOp::Neg, bin(BinOp::Mul, bt(), bt()))),
    );
    let e = EW as i64;
    let code = Code::new(vec![Stmt::for_(
        &r,
        0,
        e,
        vec![Stmt::for_(
            &c,
            0,
            e,
            vec![Stmt::set(&out, vec![ix(&r), ix(&c)], value)],
        )],
    )]);
    Built::new(
        code,
        &[("r", &r), ("c", &c)],
        &[
            ("out", &out, Binding::Out),
            ("x", &a, Binding::A),
            ("y", &b, Binding::B),
        ],
    )
}

fn chain_reference(a: &[f32], b: &[f32], out: &mut [f32]) {
    for ((o, x), y) in out.iter_mut().zip(a).zip(b) {
        *o = (x * y + x).max(0.0) * 0.5 - (-(y * y)).exp();
    }
}

const CHAIN_TILES: &[&str] = &["1", "4", "8", "16", "32"];

const CHAIN_SPACE: &[Dim] = &[
    ("order", &["rc", "cr"]),
    ("tile", CHAIN_TILES),
    ("inner", INNER),
];

fn chain_schedule(b: &Built, p: &[usize]) -> Option<Schedule> {
    let mut s = Schedule::new();
    let inner = if p[0] == 1 {
        s.reorder(b.l("r"), b.l("c"));
        b.l("r")
    } else {
        b.l("c")
    };
    tile_inner(&mut s, inner, tile(p[1], CHAIN_TILES), p[2], true)?;
    Some(s)
}

// ---------------------------------------------------------------- row reduction

const RR: usize = 128;

fn rowdot_build() -> Built {
    let (r, c) = (Symbol::fresh("r"), Symbol::fresh("c"));
    let acc = Symbol::fresh("acc");
    let out = f32n("dot", &[RR]);
    let a = f32n("u", &[RR, RR]);
    let b = f32n("w", &[RR, RR]);
    let body = vec![
        Stmt::Local {
            var: acc.clone(),
            precision: Precision::F32,
            value: Expr::Const(0.0),
        },
        Stmt::for_(
            &c,
            0,
            RR as i64,
            vec![Stmt::SetLocal {
                var: acc.clone(),
                value: bin(
                    BinOp::Add,
                    Expr::Local(acc.clone()),
                    bin(
                        BinOp::Mul,
                        get(&a, vec![ix(&r), ix(&c)]),
                        get(&b, vec![ix(&r), ix(&c)]),
                    ),
                ),
            }],
        ),
        Stmt::set(&out, vec![ix(&r)], Expr::Local(acc.clone())),
    ];
    Built::new(
        Code::new(vec![Stmt::for_(&r, 0, RR as i64, body)]),
        &[("r", &r), ("c", &c)],
        &[
            ("dot", &out, Binding::Out),
            ("u", &a, Binding::A),
            ("w", &b, Binding::B),
        ],
    )
}

fn rowdot_reference(a: &[f32], b: &[f32], out: &mut [f32]) {
    for r in 0..RR {
        let mut acc = 0.0f32;
        for c in 0..RR {
            acc += a[r * RR + c] * b[r * RR + c];
        }
        out[r] = acc;
    }
}

const ROWS: &[&str] = &["1", "2", "4"];

const ROWDOT_SPACE: &[Dim] = &[
    ("tile", TILES),
    ("inner", &["serial", "unroll"]),
    ("rows", ROWS),
];

fn rowdot_schedule(b: &Built, p: &[usize]) -> Option<Schedule> {
    let mut s = Schedule::new();
    // The column loop carries the reduction: tile and unroll only, no simd.
    tile_inner(&mut s, b.l("c"), tile(p[0], TILES), p[1], false)?;
    let rows = tile(p[2], ROWS);
    if rows > 1 {
        let (_, inner_rows) = s.split(b.l("r"), rows);
        s.unroll(&inner_rows);
    }
    Some(s)
}

// ---------------------------------------------------------------- softmax (two segments)

const SR: usize = 64;
const SC: usize = 256;

fn softmax_build() -> Built {
    let (r0, c0) = (Symbol::fresh("r"), Symbol::fresh("c"));
    let (r, c, c2) = (Symbol::fresh("r"), Symbol::fresh("c"), Symbol::fresh("c"));
    let (sum, inv) = (Symbol::fresh("sum"), Symbol::fresh("inv"));
    let out = f32n("p", &[SR, SC]);
    let a = f32n("logits", &[SR, SC]);
    let b = f32n("bias", &[SR, SC]);
    let (rows, cols) = (SR as i64, SC as i64);
    let exp = Stmt::for_(
        &r0,
        0,
        rows,
        vec![Stmt::for_(
            &c0,
            0,
            cols,
            vec![Stmt::set(
                &out,
                vec![ix(&r0), ix(&c0)],
                Expr::un(
                    UnOp::Exp,
                    bin(
                        BinOp::Sub,
                        get(&a, vec![ix(&r0), ix(&c0)]),
                        get(&b, vec![ix(&r0), ix(&c0)]),
                    ),
                ),
            )],
        )],
    );
    let normalize = Stmt::for_(
        &r,
        0,
        rows,
        vec![
            Stmt::Local {
                var: sum.clone(),
                precision: Precision::F32,
                value: Expr::Const(0.0),
            },
            Stmt::for_(
                &c,
                0,
                cols,
                vec![Stmt::SetLocal {
                    var: sum.clone(),
                    value: bin(
                        BinOp::Add,
                        Expr::Local(sum.clone()),
                        get(&out, vec![ix(&r), ix(&c)]),
                    ),
                }],
            ),
            Stmt::Local {
                var: inv.clone(),
                precision: Precision::F32,
                value: bin(BinOp::Div, Expr::Const(1.0), Expr::Local(sum.clone())),
            },
            Stmt::for_(
                &c2,
                0,
                cols,
                vec![Stmt::set(
                    &out,
                    vec![ix(&r), ix(&c2)],
                    bin(
                        BinOp::Mul,
                        get(&out, vec![ix(&r), ix(&c2)]),
                        Expr::Local(inv.clone()),
                    ),
                )],
            ),
        ],
    );
    Built::new(
        Code::new(vec![exp, normalize]),
        &[("r0", &r0), ("c0", &c0), ("r", &r), ("c", &c), ("c2", &c2)],
        &[
            ("p", &out, Binding::Out),
            ("logits", &a, Binding::A),
            ("bias", &b, Binding::B),
        ],
    )
}

fn softmax_reference(a: &[f32], b: &[f32], out: &mut [f32]) {
    for r in 0..SR {
        let row = r * SC..(r + 1) * SC;
        let mut sum = 0.0f32;
        for i in row.clone() {
            out[i] = (a[i] - b[i]).exp();
            sum += out[i];
        }
        let inv = 1.0 / sum;
        for i in row {
            out[i] *= inv;
        }
    }
}

const EXP_TILES: &[&str] = &["1", "8"];
const SUM_TILES: &[&str] = &["1", "4", "8"];

const SOFTMAX_SPACE: &[Dim] = &[
    ("exp", &["serial", "simd"]),
    ("exp_tile", EXP_TILES),
    ("sum_tile", SUM_TILES),
    ("scale", &["serial", "simd", "tile8+simd"]),
];

fn softmax_schedule(b: &Built, p: &[usize]) -> Option<Schedule> {
    let mut s = Schedule::new();
    // Segment 0: exp, elementwise.
    tile_inner(
        &mut s,
        b.l("c0"),
        tile(p[1], EXP_TILES),
        if p[0] == 1 { 2 } else { 0 },
        true,
    )?;
    // Segment 1: the row sum (a reduction: tile and unroll) and the scaling loop.
    let sum_tile = tile(p[2], SUM_TILES);
    if sum_tile > 1 {
        tile_inner(&mut s, b.l("c"), sum_tile, 1, false)?;
    }
    match p[3] {
        0 => {}
        1 => s.vectorize(b.l("c2")),
        _ => tile_inner(&mut s, b.l("c2"), 8, 2, true)?,
    }
    Some(s)
}

/// Every routine the demo knows, in report order (the matrix product at its default size).
pub(crate) fn routines() -> Vec<Routine> {
    routines_sized(MM)
}

/// Every routine, the matrix product of `mm` x `mm` x `mm` (the problem-size flag).
pub(crate) fn routines_sized(mm: usize) -> Vec<Routine> {
    vec![
        Routine {
            name: "matmul",
            description: format!(
                "{mm}x{mm}x{mm} matrix product (zero-fill + multiply-accumulate segments)"
            ),
            len: mm * mm,
            build: Box::new(move || matmul_build(mm)),
            reference: Box::new(move |a, b, out| matmul_reference(mm, a, b, out)),
            space: MATMUL_SPACE,
            schedule: matmul_schedule,
            tolerance: 1e-4,
        },
        Routine {
            name: "chain",
            description: "fused elementwise chain relu(x*y+x)*0.5-exp(-y*y), 128x128".to_string(),
            len: EW * EW,
            build: Box::new(chain_build),
            reference: Box::new(chain_reference),
            space: CHAIN_SPACE,
            schedule: chain_schedule,
            tolerance: 1e-5,
        },
        Routine {
            name: "rowdot",
            description: "row-wise dot products (a reduction), 128 rows of 128".to_string(),
            len: RR * RR,
            build: Box::new(rowdot_build),
            reference: Box::new(rowdot_reference),
            space: ROWDOT_SPACE,
            schedule: rowdot_schedule,
            tolerance: 1e-4,
        },
        Routine {
            name: "softmax",
            description: "row softmax of logits-bias, 64x256 (exp + normalize segments)"
                .to_string(),
            len: SR * SC,
            build: Box::new(softmax_build),
            reference: Box::new(softmax_reference),
            space: SOFTMAX_SPACE,
            schedule: softmax_schedule,
            tolerance: 1e-4,
        },
    ]
}

/// The compiler options the renderer asks for, from the configuration. Run under
/// schedule-cache's digest-completeness guard: every setting consulted here must be
/// declared with the key component it enters.
pub(crate) fn compiler_options(config: &schedule_cache::Config) -> Vec<String> {
    let mut options = vec![
        // Keep float results reproducible, so outputs can be checked against Rust.
        "-ffp-contract=off".to_string(),
        // Honour the renderer's `#pragma omp simd` without linking OpenMP.
        "-fopenmp-simd".to_string(),
    ];
    if config.get("numerics.fast_math") == Some("true") {
        options.push("-ffast-math".to_string());
    }
    options
}

/// A routine's input data (deterministic) and expected output.
pub(crate) struct Data {
    pub(crate) seed: u64,
    pub(crate) a: Vec<f32>,
    pub(crate) b: Vec<f32>,
    pub(crate) expected: Vec<f32>,
}

impl Data {
    pub(crate) fn new(routine: &Routine) -> Data {
        let seed = seed_of(routine.name);
        let mut rng = SplitMix(seed);
        let mut values =
            |n: usize| -> Vec<f32> { (0..n).map(|_| rng.unit() * 2.0 - 1.0).collect() };
        let a = values(routine.len);
        let b = values(routine.len);
        let mut expected = vec![0.0; routine.len];
        (routine.reference)(&a, &b, &mut expected);
        Data {
            seed,
            a,
            b,
            expected,
        }
    }
}

/// SplitMix64: a small deterministic generator for data and candidate order.
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn unit(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 24) as f32
    }
}

pub(crate) fn seed_of(name: &str) -> u64 {
    name.bytes().fold(0xCBF2_9CE4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01B3)
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// Every point of every space either is refused up front or applies cleanly, and
    /// the all-zero point is the empty schedule (the baseline).
    #[test]
    fn spaces_apply_and_start_with_the_baseline() {
        for r in routines() {
            let built = (r.build)();
            let zero = vec![0; r.space.len()];
            assert!(
                (r.schedule)(&built, &zero).unwrap().ops.is_empty(),
                "{}",
                r.name
            );
            let mut point = zero.clone();
            let mut legal = 0;
            loop {
                let built = (r.build)();
                if let Some(s) = (r.schedule)(&built, &point) {
                    s.apply(&built.code)
                        .unwrap_or_else(|e| panic!("{} {point:?}: {e}", r.name));
                    legal += 1;
                }
                // Next point, odometer order.
                let mut d = 0;
                while d < point.len() {
                    point[d] += 1;
                    if point[d] < r.space[d].1.len() {
                        break;
                    }
                    point[d] = 0;
                    d += 1;
                }
                if d == point.len() {
                    break;
                }
            }
            assert!(legal >= 12, "{} has only {legal} legal points", r.name);
        }
    }

    /// Two fresh builds of one schedule render (with reference-ir's renderer, minted
    /// names) other names but the same kernel keys; another schedule gives another key.
    /// Checked over every routine's first points.
    #[test]
    fn fresh_renderings_of_one_schedule_share_keys() {
        use canonical_text::segment_kernel_name;
        use cc_backend::{Signature, Source};
        use kernel_cache::Names;
        use reference_ir::render::{Naming, render, segments, signature_of};
        use schedule_cache::Config;
        let config = Config::new(reference_ir::render::reference_settings());
        let render_all = |r: &Routine, point: &[usize], first: usize| {
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
                    let k = render(
                        seg,
                        &symbol,
                        &signature_of(seg, &[]),
                        Naming::Minted,
                        &config,
                    )
                    .unwrap();
                    let names = Names::new().with_bound(k.owned.iter().cloned());
                    // The signature does not matter for this comparison: the same one for all.
                    let source = Source::new(k.text.clone(), Signature::new())
                        .with_prelude(k.prelude.clone());
                    (k.text, source.key(&symbol, &names, &[], "cc"))
                })
                .collect::<Vec<_>>()
        };
        for r in routines() {
            let zero = vec![0; r.space.len()];
            let mut other = zero.clone();
            other[0] = 1;
            let (a, b) = (render_all(&r, &zero, 0), render_all(&r, &zero, 7));
            for ((ta, ka), (tb, kb)) in a.iter().zip(&b) {
                assert_ne!(ta, tb, "{}: fresh names", r.name);
                assert_eq!(ka, kb, "{}: same key", r.name);
            }
            if (r.schedule)(&(r.build)(), &other).is_some() {
                let c = render_all(&r, &other, 0);
                let keys =
                    |v: &[(String, String)]| v.iter().map(|(_, k)| k.clone()).collect::<Vec<_>>();
                assert_ne!(keys(&a), keys(&c), "{}: another schedule", r.name);
            }
        }
    }
}
