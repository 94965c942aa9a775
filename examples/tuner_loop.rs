//! An adopter's tuning loop written against the tuner crate (issue 37): a backend with a
//! kernel language of its own and no loop IR worth the name: a *map kernel* computes
//! `y[i] = (c0 * x[i] + c1) * x[i] + c2` over `N` elements, and its schedule is a list of
//! tinygrad-like opts, `Tile(t)` (blocks of `t` elements) and `Unroll(u)` (the inner loop
//! unrolled `u` times), that its renderer reads directly. Every C name the renderer prints
//! is minted from a counter, as a real compiler's are. The backend writes what only it
//! knows (its code as the schedule key sees it, its opts as saved, its renderer, its data
//! and its reference) and the tuner does the loop: replay, search in batches through the
//! kernel cache and the kernel store, measurement with warm-up and repeats, finalists,
//! the store under keep-faster.
//!
//! With no arguments it runs itself twice as child processes, both `tune DIR`:
//!
//! 1. the first finds nothing stored: it searches 10 of the 16 points of the opts space
//!    (random order, seed 7) and stores the winner;
//! 2. the second finds that winner, replays it on freshly built code (other names), checks
//!    and times it: nothing compiled, the kernel loaded from the first process's store.
//!
//! The kcache glue is every line between a `// kcache-glue: begin` and the next
//! `// kcache-glue: end`; `cargo xtask tidy` counts it (at most 100 non-blank lines).

use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Serialize};
use test_support::child::{after, run_self};

type Res<T> = std::result::Result<T, Box<dyn std::error::Error>>;

// ---- The backend's own kernel language ----------------------------------------------------

/// Ids unique in this process and different in every process (drawn from the pid).
fn fresh() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    (u64::from(std::process::id()) << 20) + NEXT.fetch_add(1, Ordering::Relaxed)
}

const N: usize = 1 << 14;

/// A map kernel: `y = (c0 * x + c1) * x + c2` elementwise over `n`; `x` and `y` are ids.
#[derive(Clone, Debug)]
struct MapKernel {
    n: usize,
    coeffs: [f32; 3],
    x: u64,
    y: u64,
}

fn build() -> MapKernel {
    MapKernel {
        n: N,
        coeffs: [0.5, -1.25, 2.0],
        x: fresh(),
        y: fresh(),
    }
}

/// An opt, read by the renderer.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
enum Opt {
    Tile(i64),
    Unroll(i64),
}

const TILES: [i64; 4] = [1, 16, 64, 256];
const UNROLLS: [i64; 4] = [1, 2, 4, 8];

/// The opts of a point (tile choice, unroll choice); choice 0 is "no opt".
fn opts_at(point: &[usize]) -> Option<Vec<Opt>> {
    let (t, u) = (*TILES.get(*point.first()?)?, *UNROLLS.get(*point.get(1)?)?);
    let mut opts = Vec::new();
    if t > 1 {
        opts.push(Opt::Tile(t));
    }
    if u > 1 {
        opts.push(Opt::Unroll(u));
    }
    Some(opts)
}

/// A rendered kernel: its name, its C text, the names it binds (`y`, `x` first).
struct Rendered {
    name: String,
    text: String,
    bound: Vec<String>,
}

/// The C renderer: a loop over blocks of the tile, the inner loop unrolled.
fn render(k: &MapKernel, opts: &[Opt]) -> Result<Rendered, String> {
    let (mut tile, mut unroll) = (k.n as i64, 1);
    for opt in opts {
        match *opt {
            Opt::Tile(t) if t > 0 && k.n as i64 % t == 0 => tile = t,
            Opt::Unroll(u) if u > 0 => unroll = u,
            other => return Err(format!("{other:?} does not apply to {} elements", k.n)),
        }
    }
    if tile % unroll != 0 {
        return Err(format!("unroll {unroll} does not divide the tile {tile}"));
    }
    let [y, x, b, i] = [k.y, k.x, fresh(), fresh()].map(|id| format!("v{id}"));
    let name = format!("map_{}", fresh());
    let [c0, c1, c2] = k.coeffs;
    let blocks = k.n as i64 / tile;
    let text = format!(
        "void {name}(float *restrict {y}, const float *restrict {x}) {{\n\
         \x20 for (long {b} = 0; {b} < {blocks}; ++{b}) {{\n\
         \x20   #pragma GCC unroll {unroll}\n\
         \x20   for (long {i} = {b} * {tile}; {i} < ({b} + 1) * {tile}; ++{i})\n\
         \x20     {y}[{i}] = ({c0:?}f * {x}[{i}] + {c1:?}f) * {x}[{i}] + {c2:?}f;\n\
         \x20 }}\n}}\n"
    );
    Ok(Rendered {
        name,
        text,
        bound: vec![y, x, b, i],
    })
}

fn input() -> Vec<f32> {
    (0..N).map(|k| (k % 97) as f32 * 0.125 - 6.0).collect()
}

/// The language's meaning, what every compiled candidate is checked against.
fn interpret(k: &MapKernel, x: &[f32]) -> Vec<f32> {
    let [c0, c1, c2] = k.coeffs;
    x.iter().map(|x| (c0 * x + c1) * x + c2).collect()
}

/// Whether a point of the opts space renders.
fn legal(point: &[usize]) -> bool {
    opts_at(point).is_some_and(|o| render(&build(), &o).is_ok())
}

/// Whether a candidate's output is the interpreter's, bit for bit.
fn same_as(y: &[f32], expected: &[f32]) -> Result<(), String> {
    (y == expected)
        .then_some(())
        .ok_or_else(|| "y is not what the interpreter says".into())
}

/// What a tuning process did: candidates searched, kernels compiled and loaded, the opts.
fn show(searched: usize, opts: &[Opt], compiled: u64, loaded: u64) {
    println!("searched {searched} compiled {compiled} loaded {loaded}");
    println!("ops {opts:?}");
}

/// The options every kernel is compiled with (exact float results: no contraction).
fn cflags() -> Vec<String> {
    vec!["-ffp-contract=off".to_string()]
}

// kcache-glue: begin
use cc_backend::{Arg, CcBackend, CcProgram, Elem, Extent, Kernel, Signature, Source};
use kernel_cache::{KernelCache, Names, Resolved, store::KernelStore};
use schedule_cache::{DiskCache, Error, LoopCode, NodeAttrs, NodeId, Replayer, Resolver};
use schedule_cache::{ScheduleCache, ScheduleLanguage, SymId, TimingIdentity, Toolchain, Visitor};
use tuner::{Measure, ProgressMode, RandomSearch, SearchOptions, Space, Tuned, Tuner, Workload};

/// What the schedule key sees of the code: everything the renderer prints but names.
impl LoopCode for MapKernel {
    fn walk(&self, v: &mut dyn Visitor) {
        v.node(NodeId(self.y), &NodeAttrs::new(&[self.n], "f32"));
        v.node(NodeId(self.x), &NodeAttrs::new(&[self.n], "f32"));
        v.open("map");
        self.coeffs.iter().for_each(|c| v.float(f64::from(*c)));
        v.close();
    }
}

/// The schedule language: opts name no loop, so they are saved as they are.
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

/// A rendered candidate as the tuner takes it: one kernel, nothing to plan.
type Out = tuner::Rendered<Source, ()>;

/// The map kernel as the tuner's workload: its space, the backend's identity, its input.
struct Map(Space, String, Vec<f32>);

impl Workload<Opts, CcBackend> for Map {
    type Code = MapKernel;
    type Plan = ();
    type Bound = (Kernel, Vec<f32>, Vec<f32>);
    fn name(&self) -> &str {
        "map"
    }
    fn space(&self) -> &Space {
        &self.0
    }
    fn build(&self) -> MapKernel {
        build()
    }
    fn ops_at(&self, _: &MapKernel, point: &[usize]) -> Option<Vec<Opt>> {
        opts_at(point)
    }
    fn render(&self, k: &MapKernel, ops: &[Opt], _: usize) -> Result<Out, String> {
        let r = render(k, ops)?;
        let signature = Signature::new()
            .buffer_mut(&r.bound[0], Elem::F32, Extent::fixed(k.n))
            .buffer(&r.bound[1], Elem::F32, Extent::fixed(k.n));
        let names = Names::new().with_bound(r.bound);
        let source = Source::new(r.text, signature);
        let kernel = source.batch_kernel(&r.name, &names, cflags(), &self.1);
        Ok(tuner::Rendered {
            kernels: vec![kernel],
            plan: (),
            memo_tag: format!("x=input() n={}", k.n),
        })
    }
    fn bind(&self, _: &(), kernels: &[Resolved<CcProgram>]) -> Result<Self::Bound, String> {
        let kernel = Kernel::from_resolved(&kernels[0]).map_err(|e| e.to_string())?;
        Ok((kernel, vec![0.0; N], interpret(&build(), &self.2)))
    }
    fn run(&self, (kernel, y, _): &mut Self::Bound) -> Result<(), String> {
        let mut args = [Arg::F32Mut(y), Arg::F32(&self.2)];
        kernel.call(&mut args).map_err(|e| e.to_string())
    }
    fn check(&self, bound: &mut Self::Bound) -> Result<(), String> {
        self.run(bound)?;
        same_as(&bound.1, &bound.2)
    }
}

/// Tunes the map kernel with the stores in `dir`: replayed when a winner is stored.
fn tune(dir: &str) -> Res<()> {
    let backend = CcBackend::new()?;
    let layout = cache_dir::Layout::new(dir);
    let timing = TimingIdentity::this_cpu(Some(backend.compiler_version().to_string()));
    let schedules = ScheduleCache::new(Opts, "map-c", timing, DiskCache::new(layout.schedules()))
        .with_toolchain(Toolchain::new(backend.identity(), cflags()))
        .with_schedule_format("map-opts-1");
    let cache = KernelCache::new(64 << 20);
    let store = KernelStore::new(layout.kernels());
    let tuner = Tuner::new(&schedules, &backend, &cache)
        .with_kernel_store(Some(&store))
        .with_measure(Measure::quick())
        .with_progress(ProgressMode::Lines);
    let space = Space::filtered(vec![TILES.len(), UNROLLS.len()], legal)?;
    let work = Map(space, backend.identity().to_string(), input());
    let mut options = SearchOptions::default();
    (options.budget, options.batch, options.order_seed) = (10, 5, 7);
    let tuned = memo_cache::with_cache(true, |memo| {
        tuner.tune(&work, &mut RandomSearch::new(), &options, memo)
    })?;
    let (searched, ops, c) = match tuned {
        Tuned::Searched { report, .. } => (report.trials.len(), report.winner.ops, report.census),
        Tuned::Replayed(hit) => (0, hit.ops, hit.census),
    };
    show(searched, &ops, c.kernels_compiled, c.kernels_loaded);
    Ok(())
}
// kcache-glue: end

fn main() -> Res<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        ["tune", dir] => tune(dir),
        [] => {
            let tmp = tempfile::tempdir()?;
            let dir = tmp.path().to_str().ok_or("a UTF-8 temporary path")?;
            let first = run_self(&["tune", dir]);
            print!("{first}");
            // A search of 10 candidates, each its own kernel text: 10 compiled.
            assert_eq!(
                after(&first, "searched "),
                "10 compiled 10 loaded 0",
                "{first}"
            );
            let second = run_self(&["tune", dir]);
            print!("{second}");
            // Replayed (no search), nothing compiled, the winner loaded from the store.
            assert_eq!(
                after(&second, "searched "),
                "0 compiled 0 loaded 1",
                "{second}"
            );
            let (stored, replayed) = (after(&first, "ops "), after(&second, "ops "));
            assert_eq!(
                stored, replayed,
                "the second process replays the stored opts"
            );
            println!("the second process replayed the winner: 0 compiles, 1 kernel loaded");
            Ok(())
        }
        _ => Err(format!("usage: tuner_loop [tune DIR] (got {args:?})").into()),
    }
}
