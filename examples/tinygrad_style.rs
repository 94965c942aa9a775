//! A tinygrad-style backend adopting kcache whose renderer declares **no** names: its C
//! spells every name the way tinygrad's C renderer does (`data<N>_<size>` parameters,
//! `gidx<N>` / `ridx<N>` loop variables, `acc<N>` accumulators, `val<N>` loads, `alu<N>`
//! operations, `cast<N>` conversions, kernels named from their shapes, `r_32_64_16_4_577`,
//! `E_1024_4_578`), every `<N>` drawn from one process-wide counter that starts at the
//! process id, so two processes (and two renders in one process) spell an unchanged kernel
//! differently. The kernels are compiled with real `cc-backend` signatures through the
//! persistent kernel store, and their tuned opts are kept in `ScheduleCache`.
//!
//! With no arguments it makes a temporary cache directory and runs itself twice:
//!
//! 1. `tune DIR`: three kernels (an elementwise `E`, a row-sum reduction `r`, a matmul `r`),
//!    eleven candidates (upcasts and unrolls, as tinygrad's opts) compiled in one batch,
//!    each checked against the IR's interpreter and timed; the fastest opts of each kernel
//!    are stored in `ScheduleCache`. The winners are then built and rendered again (new
//!    names): the in-memory cache answers them, no compile;
//! 2. `replay DIR`: the same three kernels built afresh, their opts looked up and replayed,
//!    rendered (other names again) and resolved through the kernel store: **zero compiles**,
//!    three kernels loaded, each result checked against the interpreter.
//!
//! The parent asserts both counts from the processes' census and that the replaying
//! process spelled the kernels otherwise.
//!
//! **What is declared.** Nothing: the kernel keys use `Names::default()`, so kcache
//! renames the names the text binds itself (parameters, block-scope and `for`
//! declarations) whatever their spelling, and keys each kernel's own name by its role
//! (`r_16_64_4_577` and `r_16_64_4_578` alike; a hit is called under the stored twin's
//! symbol, `Resolved::symbol`). This needs canonical-text's names from the text and the
//! own name by its role (issue 36); without them the text is keyed as spelled and the
//! replay compiles its three kernels again, which the parent reports as a failed
//! assertion naming the count.
//!
//! The kcache glue is every line between a `// kcache-glue: begin` and the next
//! `// kcache-glue: end`; `cargo xtask tidy` counts it (at most 100 non-blank lines).

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use serde::{Deserialize, Serialize};
use test_support::child::{after, run_self};

type Res<T> = std::result::Result<T, Box<dyn std::error::Error>>;

// ---- The backend's own IR ----------------------------------------------------------------

/// The process-wide counter every id and every minted name comes from; it starts at the
/// process id, so another process counts from elsewhere.
fn mint() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    u64::from(std::process::id()) + NEXT.fetch_add(1, Ordering::Relaxed)
}

/// A buffer of `f32`.
#[derive(Clone, Copy, Debug)]
struct Buf {
    id: u64,
    len: usize,
}

impl Buf {
    fn new(len: usize) -> Buf {
        Buf { id: mint(), len }
    }
}

/// What a kernel computes.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Kind {
    /// `out[i] = max(x[i] * alpha + float(i) * beta, 0)` over `m` elements.
    Elementwise { alpha: f32, beta: f32 },
    /// `out[i] = sum_k x[i * k + r]` over an `m` x `k` input.
    RowSum,
    /// `out[i * n + j] = sum_r a[i * k + r] * b[r * n + j]`.
    Matmul,
}

/// A kernel: what it computes, its shape (`m` rows, `n` columns, `k` reduced), its output
/// and its inputs.
#[derive(Clone, Debug)]
struct Kernel {
    kind: Kind,
    shape: [usize; 3],
    out: Buf,
    ins: Vec<Buf>,
}

/// The three kernels of the model, with fresh buffers.
fn build() -> Vec<Kernel> {
    let (m, n, k) = (32, 64, 64);
    let elementwise = Kind::Elementwise {
        alpha: 2.0,
        beta: 0.5,
    };
    vec![
        Kernel {
            kind: elementwise,
            shape: [4096, 1, 1],
            out: Buf::new(4096),
            ins: vec![Buf::new(4096)],
        },
        Kernel {
            kind: Kind::RowSum,
            shape: [64, 1, 512],
            out: Buf::new(64),
            ins: vec![Buf::new(64 * 512)],
        },
        Kernel {
            kind: Kind::Matmul,
            shape: [m, n, k],
            out: Buf::new(m * n),
            ins: vec![Buf::new(m * k), Buf::new(k * n)],
        },
    ]
}

/// Small integers, so every sum is exact whatever order a schedule adds in.
fn input(len: usize, salt: usize) -> Vec<f32> {
    (0..len)
        .map(|i| ((i * 7 + salt) % 9) as f32 - 4.0)
        .collect()
}

fn inputs(code: &Kernel) -> Vec<Vec<f32>> {
    code.ins
        .iter()
        .enumerate()
        .map(|(s, b)| input(b.len, s))
        .collect()
}

/// The IR's meaning: what every compiled candidate is checked against.
fn interpret(code: &Kernel) -> Vec<f32> {
    let [m, n, k] = code.shape;
    let ins = inputs(code);
    match code.kind {
        Kind::Elementwise { alpha, beta } => (0..m)
            .map(|i| (ins[0][i] * alpha + i as f32 * beta).max(0.0))
            .collect(),
        Kind::RowSum => (0..m).map(|i| ins[0][i * k..][..k].iter().sum()).collect(),
        Kind::Matmul => (0..m * n)
            .map(|o| {
                (0..k)
                    .map(|r| ins[0][o / n * k + r] * ins[1][r * n + o % n])
                    .sum()
            })
            .collect(),
    }
}

// ---- The backend's opts (its schedule language) ------------------------------------------

/// tinygrad's opts, simplified: compute `Upcast(u)` outputs per iteration of the last global
/// axis, or load `Unroll(r)` elements per iteration of the reduce axis.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
enum Opt {
    Upcast(usize),
    Unroll(usize),
}

/// The upcast and unroll amounts `opts` give `code`, or why they do not apply.
fn plan(code: &Kernel, opts: &[Opt]) -> Res<(usize, usize)> {
    let [m, n, k] = code.shape;
    let (mut upcast, mut unroll) = (1, 1);
    for opt in opts {
        match opt {
            Opt::Upcast(u) => upcast *= u,
            Opt::Unroll(r) => unroll *= r,
        }
    }
    let axis = if code.kind == Kind::Matmul { n } else { m };
    let reduces = !matches!(code.kind, Kind::Elementwise { .. });
    if axis % upcast != 0 || k % unroll != 0 || (!reduces && unroll > 1) {
        return Err(format!("{opts:?} do not apply to {:?}", code.kind).into());
    }
    Ok((upcast, unroll))
}

// ---- The backend's C renderer: tinygrad's spellings, every number from the counter -------

/// A rendered kernel: its name, its C text and its parameters (name, length), output first.
struct Rendered {
    name: String,
    text: String,
    params: Vec<(String, usize)>,
}

/// `g * amount + lane` as tinygrad prints an upcast index.
fn lane(g: &str, amount: usize, lane: usize) -> String {
    match (amount, lane) {
        (1, _) => g.to_string(),
        (_, 0) => format!("({g}*{amount})"),
        _ => format!("(({g}*{amount})+{lane})"),
    }
}

fn render(code: &Kernel, opts: &[Opt]) -> Res<Rendered> {
    let (u, r) = plan(code, opts)?;
    let [m, n, k] = code.shape;
    let var = |stem: &str| format!("{stem}{}", mint());
    let params: Vec<(String, usize)> = std::iter::once(&code.out)
        .chain(&code.ins)
        .map(|b| (format!("data{}_{}", mint(), b.len), b.len))
        .collect();
    let (out, x) = (&params[0].0, &params[1].0);
    let dims: Vec<usize> = match code.kind {
        Kind::Elementwise { .. } => vec![m / u, u],
        Kind::RowSum => vec![m / u, u, k / r, r],
        Kind::Matmul => vec![m, n / u, u, k / r, r],
    };
    let prefix = if matches!(code.kind, Kind::Elementwise { .. }) {
        "E"
    } else {
        "r"
    };
    let mut name = prefix.to_string();
    for d in dims.iter().filter(|&&d| d > 1) {
        let _ = write!(name, "_{d}");
    }
    let _ = write!(name, "_{}", mint());
    let mut t = String::new();
    let decl: Vec<String> = params
        .iter()
        .enumerate()
        .map(|(i, (p, _))| {
            let constness = if i == 0 { "" } else { "const " };
            format!("{constness}float* restrict {p}")
        })
        .collect();
    let _ = writeln!(t, "void {name}({}) {{", decl.join(", "));
    let g0 = var("gidx");
    let (row_extent, pad) = if code.kind == Kind::Matmul {
        (m, "    ")
    } else {
        (m / u, "  ")
    };
    let _ = writeln!(t, "  for (int {g0} = 0; {g0} < {row_extent}; {g0}++) {{");
    let g = if code.kind == Kind::Matmul {
        let g1 = var("gidx");
        let _ = writeln!(t, "    for (int {g1} = 0; {g1} < {}; {g1}++) {{", n / u);
        g1
    } else {
        g0.clone()
    };
    match code.kind {
        Kind::Elementwise { alpha, beta } => {
            for l in 0..u {
                let i = lane(&g, u, l);
                let (val, cast, alu) = (var("val"), var("cast"), var("alu"));
                let _ = writeln!(t, "{pad}  float {val} = (*({x}+{i}));");
                let _ = writeln!(t, "{pad}  float {cast} = ((float)({i}));");
                let _ = writeln!(
                    t,
                    "{pad}  float {alu} = (({val}*{alpha:?}f)+({cast}*{beta:?}f));"
                );
                let _ = writeln!(t, "{pad}  *({out}+{i}) = (({alu}<0.0f)?0.0f:{alu});");
            }
        }
        Kind::RowSum | Kind::Matmul => {
            let accs: Vec<String> = (0..u).map(|_| var("acc")).collect();
            for acc in &accs {
                let _ = writeln!(t, "{pad}  float {acc} = 0.0f;");
            }
            let ri = var("ridx");
            let _ = writeln!(t, "{pad}  for (int {ri} = 0; {ri} < {}; {ri}++) {{", k / r);
            for j in 0..r {
                let kk = lane(&ri, r, j);
                if code.kind == Kind::RowSum {
                    for (l, acc) in accs.iter().enumerate() {
                        let val = var("val");
                        let row = lane(&g, u, l);
                        let _ = writeln!(t, "{pad}    float {val} = (*({x}+(({row}*{k})+{kk})));");
                        let _ = writeln!(t, "{pad}    {acc} = ({acc}+{val});");
                    }
                } else {
                    let b = &params[2].0;
                    let va = var("val");
                    let _ = writeln!(t, "{pad}    float {va} = (*({x}+(({g0}*{k})+{kk})));");
                    for (l, acc) in accs.iter().enumerate() {
                        let (vb, alu) = (var("val"), var("alu"));
                        let col = lane(&g, u, l);
                        let _ = writeln!(t, "{pad}    float {vb} = (*({b}+(({kk}*{n})+{col})));");
                        let _ = writeln!(t, "{pad}    float {alu} = ({va}*{vb});");
                        let _ = writeln!(t, "{pad}    {acc} = ({acc}+{alu});");
                    }
                }
            }
            let _ = writeln!(t, "{pad}  }}");
            for (l, acc) in accs.iter().enumerate() {
                let at = if code.kind == Kind::Matmul {
                    format!("(({g0}*{n})+{})", lane(&g, u, l))
                } else {
                    lane(&g, u, l)
                };
                let _ = writeln!(t, "{pad}  *({out}+{at}) = {acc};");
            }
        }
    }
    if code.kind == Kind::Matmul {
        let _ = writeln!(t, "    }}");
    }
    t.push_str("  }\n}\n");
    Ok(Rendered {
        name,
        text: t,
        params,
    })
}

/// What a kernel's key sees of it besides its buffers: its kind and constants.
fn kind_name(kind: Kind) -> &'static str {
    match kind {
        Kind::Elementwise { .. } => "elementwise",
        Kind::RowSum => "rowsum",
        Kind::Matmul => "matmul",
    }
}

/// The options every kernel is compiled with.
const OPTIONS: [&str; 2] = ["-O2", "-ffp-contract=off"];

// kcache-glue: begin
use cache_dir::Layout;
use cc_backend::{Arg, CcBackend, CcProgram, DEFAULT_PRELUDE, Elem, Extent, Signature, Source};
use kernel_cache::{CachedBackend, Census, Names, Resolved};
use schedule_cache::{
    DiskCache, Error, LoopCode, Measurements, NodeAttrs, NodeId, Replayer, Resolver, ScheduleCache,
    ScheduleLanguage, SymId, TimingIdentity, Toolchain, Visitor,
};

/// What the schedule key sees of a kernel: everything the renderer prints but the opts.
impl LoopCode for Kernel {
    fn walk(&self, v: &mut dyn Visitor) {
        v.open(kind_name(self.kind));
        if let Kind::Elementwise { alpha, beta } = self.kind {
            v.float(f64::from(alpha));
            v.float(f64::from(beta));
        }
        self.shape.iter().for_each(|&d| v.int(d as i64));
        for b in std::iter::once(&self.out).chain(&self.ins) {
            v.node(NodeId(b.id), &NodeAttrs::new(&[b.len], "f32"));
        }
        v.close();
    }
}

/// The schedule language: an opt names no loop symbol, so it is saved as it is.
struct Opts;

impl ScheduleLanguage for Opts {
    type Op = Opt;
    type SavedOp = Opt;
    fn save_op(&self, op: &Opt, _: &mut Resolver<'_>) -> Result<Opt, Error> {
        Ok(*op)
    }
    fn minted(&self, _: &Opt) -> Vec<(String, SymId)> {
        Vec::new()
    }
    fn build_op(&self, op: &Opt, _: &mut Replayer<'_>) -> Result<Opt, Error> {
        Ok(*op)
    }
}

/// The backend's kcache state: the C compiler with its caches, and the opts' cache.
struct Kcache {
    kernels: CachedBackend<CcBackend>,
    schedules: ScheduleCache<Opts>,
}

fn open(dir: &str) -> Res<Kcache> {
    // The shared layout: `kcache stats DIR` / `verify DIR` / `gc DIR` read both stores.
    let layout = Layout::new(dir);
    let kernels = CachedBackend::new(CcBackend::new()?, 64 << 20).with_store_in(&layout)?;
    // The regime: the compiler, the options, the prelude, and this CPU.
    let toolchain =
        Toolchain::new(kernels.backend.identity(), OPTIONS).with_prelude(DEFAULT_PRELUDE);
    let (timing, disk) = (
        TimingIdentity::this_cpu(None),
        DiskCache::new(layout.schedules()),
    );
    let schedules =
        ScheduleCache::new(Opts, "tinygrad-style-c", timing, disk).with_toolchain(toolchain);
    Ok(Kcache { kernels, schedules })
}

/// Compiles (or finds, or loads) rendered kernels in one batch, each answered on its own.
/// No name is declared, not even how kernel names are minted.
fn compile(k: &Kcache, rendered: &[Rendered]) -> Res<(Vec<Res<Resolved<CcProgram>>>, Census)> {
    let names = Names::default();
    let batch: Vec<_> = rendered
        .iter()
        .map(|r| {
            let (out, ins) = r.params.split_first().expect("an output");
            let signature = ins.iter().fold(
                Signature::new().buffer_mut(&out.0, Elem::F32, Extent::fixed(out.1)),
                |s, (p, len)| s.buffer(p, Elem::F32, Extent::fixed(*len)),
            );
            let options = OPTIONS.map(String::from).to_vec();
            let source = Source::new(r.text.clone(), signature);
            source.batch_kernel(&r.name, &names, options, k.kernels.backend.identity())
        })
        .collect();
    let (outcomes, census) = k.kernels.resolve_each(&batch)?;
    let outcomes = outcomes
        .into_iter()
        .map(|o| Ok(o.map_err(|e| e.to_string())?));
    Ok((outcomes.collect(), census))
}

/// Runs a compiled kernel on `code`'s inputs; returns its output and the time of the call.
fn call(resolved: &Resolved<CcProgram>, code: &Kernel) -> Res<(Vec<f32>, f64)> {
    let (kernel, ins) = (cc_backend::Kernel::from_resolved(resolved)?, inputs(code));
    let mut out = vec![0.0f32; code.out.len];
    let mut args = vec![Arg::F32Mut(&mut out)];
    args.extend(ins.iter().map(|x| Arg::F32(x)));
    let started = Instant::now();
    kernel.call(&mut args)?;
    Ok((out, started.elapsed().as_secs_f64()))
}

/// Stores the winning opts of `code`; returns the key they are stored at.
fn store_winner(k: &Kcache, code: &Kernel, opts: &[Opt], times: Vec<f64>) -> Res<String> {
    let published = k.schedules.store(code, opts, Measurements::new(times))?;
    let key = published
        .stored_key()
        .ok_or_else(|| format!("{:?}", published.outcome))?;
    Ok(key.to_string())
}

/// The stored opts of `code`, and the key they were found at.
fn lookup(k: &Kcache, code: &Kernel) -> Res<(Vec<Opt>, String)> {
    let hit = k
        .schedules
        .lookup(code)?
        .map_err(|m| format!("a miss: {m}"))?;
    Ok((hit.ops, hit.key.to_string()))
}
// kcache-glue: end

// ---- The tuner and the replaying process --------------------------------------------------

/// The candidates the tuner tries on `code`.
fn candidates(code: &Kernel) -> Vec<Vec<Opt>> {
    let mut all = vec![vec![], vec![Opt::Upcast(4)]];
    if matches!(code.kind, Kind::Elementwise { .. }) {
        all.push(vec![Opt::Upcast(8)]);
    } else {
        all.push(vec![Opt::Unroll(4)]);
        all.push(vec![Opt::Upcast(4), Opt::Unroll(4)]);
    }
    all
}

/// Runs a compiled kernel five times, checking each result; returns the times.
fn measure(resolved: &Resolved<CcProgram>, code: &Kernel, what: &str) -> Res<Vec<f64>> {
    let expected = interpret(code);
    let mut times = Vec::new();
    for _ in 0..5 {
        let (out, took) = call(resolved, code)?;
        if out != expected {
            return Err(format!("{what} computes something else").into());
        }
        times.push(took);
    }
    Ok(times)
}

fn tune(dir: &str) -> Res<()> {
    let k = open(dir)?;
    let codes = build();
    let (mut tried, mut rendered) = (Vec::new(), Vec::new()); // (kernel, opts), its text
    for (c, code) in codes.iter().enumerate() {
        for opts in candidates(code) {
            rendered.push(render(code, &opts)?);
            tried.push((c, opts));
        }
    }
    let (compiled, census) = compile(&k, &rendered)?;
    let mut best: Vec<Option<(f64, usize, Vec<f64>)>> = vec![None; codes.len()];
    for (t, (((c, _), r), outcome)) in tried.iter().zip(&rendered).zip(&compiled).enumerate() {
        let resolved = outcome.as_ref().map_err(|e| format!("{}: {e}", r.name))?;
        let times = measure(resolved, &codes[*c], &r.name)?;
        let fastest = times.iter().copied().fold(f64::INFINITY, f64::min);
        if best[*c].as_ref().is_none_or(|(f, ..)| fastest < *f) {
            best[*c] = Some((fastest, t, times));
        }
    }
    println!("compiled {}", census.kernels_compiled);
    let mut winners = Vec::new();
    for (c, b) in best.into_iter().enumerate() {
        let (_, t, times) = b.ok_or("no candidate")?;
        let ((_, opts), r) = (&tried[t], &rendered[t]);
        let key = store_winner(&k, &codes[c], opts, times)?;
        println!("winner {c} {} {opts:?} stored {key}", r.name);
        winners.push(render(&codes[c], opts)?);
    }
    // The winners rendered again in this process: other names, the same keys.
    let (again, census) = compile(&k, &winners)?;
    for (r, outcome) in winners.iter().zip(&again) {
        outcome.as_ref().map_err(|e| format!("{}: {e}", r.name))?;
    }
    println!("rerendered {}", winners[0].name);
    println!("rerendered compiled {}", census.kernels_compiled);
    println!("rerendered reused {}", census.kernels_reused);
    Ok(())
}

fn replay(dir: &str) -> Res<()> {
    let k = open(dir)?;
    let codes = build();
    let mut rendered = Vec::new();
    for (c, code) in codes.iter().enumerate() {
        let (opts, key) = lookup(&k, code)?;
        let r = render(code, &opts)?;
        println!("replayed {c} {} {opts:?} from {key}", r.name);
        rendered.push(r);
    }
    let (compiled, census) = compile(&k, &rendered)?;
    for ((code, r), outcome) in codes.iter().zip(&rendered).zip(&compiled) {
        let resolved = outcome.as_ref().map_err(|e| format!("{}: {e}", r.name))?;
        measure(resolved, code, &r.name)?;
    }
    println!("compiled {}", census.kernels_compiled);
    println!("loaded {}", census.kernels_loaded);
    print!("the matmul as rendered here:\n{}", rendered[2].text);
    Ok(())
}

fn main() -> Res<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        ["tune", dir] => tune(dir),
        ["replay", dir] => replay(dir),
        [] => {
            let tmp = tempfile::tempdir()?;
            let dir = tmp.path().to_str().ok_or("a UTF-8 temporary path")?;
            let tuned = run_self(&["tune", dir]);
            print!("{tuned}");
            let replayed = run_self(&["replay", dir]);
            print!("{replayed}");
            assert_eq!(after(&tuned, "compiled "), "11", "{tuned}");
            assert_eq!(
                after(&tuned, "rerendered compiled "),
                "0",
                "renamed twins in one process must share their keys:\n{tuned}"
            );
            assert_eq!(after(&tuned, "rerendered reused "), "3", "{tuned}");
            for c in 0..3 {
                let stored = after(&tuned, &format!("winner {c} "));
                let replayed_c = after(&replayed, &format!("replayed {c} "));
                let (name_t, rest_t) = stored.split_once(' ').ok_or("a winner line")?;
                let (name_r, rest_r) = replayed_c.split_once(' ').ok_or("a replay line")?;
                assert_ne!(name_t, name_r, "the replaying process mints other names");
                let key_t = rest_t.rsplit(' ').next();
                let key_r = rest_r.rsplit(' ').next();
                assert_eq!(key_t, key_r, "the opts are replayed from their key");
            }
            assert_eq!(
                after(&replayed, "compiled "),
                "0",
                "the second process must compile nothing (kcache renames the names the text \
                 binds itself):\n{replayed}"
            );
            assert_eq!(after(&replayed, "loaded "), "3", "{replayed}");
            println!("replayed with other names: 0 compiles, 3 kernels loaded from the store");
            Ok(())
        }
        _ => Err(format!("usage: tinygrad_style [tune|replay DIR] (got {args:?})").into()),
    }
}
