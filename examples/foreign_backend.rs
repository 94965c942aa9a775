//! A complete foreign backend adopting kcache: its own loop IR, its own C renderer (every
//! name minted from a counter, as a real compiler's are), real `cc-backend` signatures, the
//! persistent kernel store under the in-memory kernel cache, and `ScheduleCache` keeping the
//! tuned schedule for the next process.
//!
//! With no arguments it makes a temporary cache directory and runs itself three times as child
//! processes:
//!
//! 1. `tune DIR`: builds `y[i] = x[i] * 3 + 1` over 256 elements, renders four candidate
//!    schedules (tilings and unrolls), compiles them in one batch through the kernel store
//!    (`DIR/kernels`), checks each against the IR's interpreter, times them, and stores the
//!    fastest schedule in `ScheduleCache` (`DIR` itself): the shared `Layout`, so `kcache
//!    stats DIR` and `kcache verify DIR` read both stores;
//! 2. `replay DIR`: builds the same code afresh (other ids, so other C names), looks the
//!    schedule up, replays it, renders it, and gets the kernel from the kernel store: zero
//!    compiles, one program loaded; the result is checked against the interpreter;
//! 3. `lookup DIR` with `FOREIGN_CFLAGS="-O3 -ffp-contract=off"` (the kernels' options, `-O2
//!    -ffp-contract=off` by default): a miss that names the option, `codegen: options -O2 →
//!    -O3`, since the schedule cache's regime is the backend's toolchain (compiler identity,
//!    options, prelude) and the CPU (`TimingIdentity::this_cpu`).
//!
//! The parent checks the replay compiled nothing, loaded one program, and rendered the
//! kernel under another name than the tuning process did.
//!
//! The kcache glue is every line between a `// kcache-glue: begin` and the next
//! `// kcache-glue: end`; `cargo xtask tidy` counts it (at most 100 non-blank lines) and
//! checks that no line outside names a kcache crate.
//!
//! **The kernel's own name.** The renderer mints its kernel names with a counter
//! (`axpb_1207`). By default kcache keys such a name by its role (issue 36:
//! `Names::kernel_name_by_role`), and the renderer also says how it mints them
//! (`Names::with_minted_kernel_names("_")`), which drops the counter where the name must
//! be keyed as spelled (a text the reading cannot read exactly). Without either the name
//! would be keyed as spelled: the replaying process, whose counter differs, would miss the
//! stored program and compile it again (never a wrong hit).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use serde::{Deserialize, Serialize};
use test_support::child::{after, run_self, stdout_of};

type Res<T> = std::result::Result<T, Box<dyn std::error::Error>>;

// ---- The backend's own IR ----------------------------------------------------------------

/// Ids unique in this process and different in every process (drawn from the pid), as a
/// real compiler's counters are: symbols, buffers and the names the renderer mints.
fn fresh() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    (u64::from(std::process::id()) << 20) + NEXT.fetch_add(1, Ordering::Relaxed)
}

/// A buffer of `f32`.
#[derive(Clone, Copy, Debug)]
struct Buf {
    id: u64,
    len: usize,
}

/// A counted loop, unrolled `unroll` times when above 1.
#[derive(Clone, Debug)]
struct Loop {
    var: u64,
    extent: i64,
    unroll: i64,
    body: Vec<Stmt>,
}

/// `out[idx] = input[idx] * scale + bias`, `idx` a sum of `variable * coefficient` terms.
#[derive(Clone, Debug)]
struct Axpb {
    out: Buf,
    input: Buf,
    index: Vec<(u64, i64)>,
    scale: f32,
    bias: f32,
}

#[derive(Clone, Debug)]
enum Stmt {
    Loop(Loop),
    Axpb(Axpb),
}

/// A kernel: its body and its parameters (`y` written, `x` read).
#[derive(Clone, Debug)]
struct Kernel {
    body: Vec<Stmt>,
    y: Buf,
    x: Buf,
}

const N: usize = 256;

/// `for i in 0..N { y[i] = x[i] * 3 + 1 }`, with fresh ids.
fn build() -> (Kernel, u64) {
    let (i, x, y) = (
        fresh(),
        Buf {
            id: fresh(),
            len: N,
        },
        Buf {
            id: fresh(),
            len: N,
        },
    );
    let axpb = Axpb {
        out: y,
        input: x,
        index: vec![(i, 1)],
        scale: 3.0,
        bias: 1.0,
    };
    let outer = Loop {
        var: i,
        extent: N as i64,
        unroll: 1,
        body: vec![Stmt::Axpb(axpb)],
    };
    (
        Kernel {
            body: vec![Stmt::Loop(outer)],
            y,
            x,
        },
        i,
    )
}

/// The IR's meaning: the interpreter every compiled kernel is checked against.
fn interpret(stmts: &[Stmt], env: &mut BTreeMap<u64, i64>, x: &[f32], y: &mut [f32]) {
    for s in stmts {
        match s {
            Stmt::Loop(l) => {
                for k in 0..l.extent {
                    env.insert(l.var, k);
                    interpret(&l.body, env, x, y);
                }
            }
            Stmt::Axpb(a) => {
                let at: i64 = a.index.iter().map(|(v, c)| env[v] * c).sum();
                let at = usize::try_from(at).expect("an index in range");
                y[at] = x[at] * a.scale + a.bias;
            }
        }
    }
}

fn input() -> Vec<f32> {
    (0..N).map(|k| k as f32 * 0.25 - 7.0).collect()
}

fn expected(code: &Kernel) -> Vec<f32> {
    let mut y = vec![0.0; N];
    interpret(&code.body, &mut BTreeMap::new(), &input(), &mut y);
    y
}

// ---- The backend's schedule ops ------------------------------------------------------------

/// What an op does to its target loop: tile it by a factor (into a fresh outer loop and a
/// fresh inner loop of that extent), or unroll it.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
enum Kind {
    Tile(i64),
    Unroll(i64),
}

/// An op on the loop `target`; `minted` are the loops a tile creates (outer, inner).
#[derive(Clone, Debug)]
struct Op {
    kind: Kind,
    target: u64,
    minted: [u64; 2],
}

impl Op {
    fn new(kind: Kind, target: u64) -> Op {
        Op {
            kind,
            target,
            minted: [fresh(), fresh()],
        }
    }
}

fn apply_op(stmts: &[Stmt], op: &Op) -> Res<Vec<Stmt>> {
    let mut out = Vec::new();
    for s in stmts {
        out.push(match s {
            Stmt::Loop(l) if l.var == op.target => match op.kind {
                Kind::Unroll(factor) => Stmt::Loop(Loop {
                    unroll: factor,
                    ..l.clone()
                }),
                Kind::Tile(factor) => {
                    if factor <= 0 || l.extent % factor != 0 {
                        return Err(
                            format!("cannot tile a loop of {} by {factor}", l.extent).into()
                        );
                    }
                    let [outer, inner] = op.minted;
                    let body = apply_op(&l.body, op)?;
                    let inner = Stmt::Loop(Loop {
                        var: inner,
                        extent: factor,
                        unroll: 1,
                        body,
                    });
                    let extent = l.extent / factor;
                    Stmt::Loop(Loop {
                        var: outer,
                        extent,
                        unroll: 1,
                        body: vec![inner],
                    })
                }
            },
            Stmt::Loop(l) => Stmt::Loop(Loop {
                body: apply_op(&l.body, op)?,
                ..l.clone()
            }),
            Stmt::Axpb(a) => {
                let mut index = Vec::new();
                for &(v, c) in &a.index {
                    match op.kind {
                        Kind::Tile(factor) if v == op.target => {
                            index.extend([(op.minted[0], c * factor), (op.minted[1], c)]);
                        }
                        _ => index.push((v, c)),
                    }
                }
                Stmt::Axpb(Axpb { index, ..a.clone() })
            }
        });
    }
    Ok(out)
}

fn apply(code: &Kernel, ops: &[Op]) -> Res<Kernel> {
    let mut body = code.body.clone();
    for op in ops {
        body = apply_op(&body, op)?;
    }
    Ok(Kernel {
        body,
        ..code.clone()
    })
}

// ---- The backend's C renderer: every name minted from the counter -------------------------

/// A rendered kernel: its C text, its name, and the names of `y` and `x` in it.
struct Rendered {
    name: String,
    text: String,
    params: [String; 2],
}

fn render(code: &Kernel) -> Rendered {
    fn stmts(
        out: &mut String,
        s: &[Stmt],
        depth: usize,
        mint: &mut dyn FnMut(u64, &str) -> String,
    ) {
        let pad = "  ".repeat(depth);
        for s in s {
            match s {
                Stmt::Loop(l) => {
                    let v = mint(l.var, "i");
                    if l.unroll > 1 {
                        let _ = writeln!(out, "{pad}#pragma GCC unroll {}", l.unroll);
                    }
                    let _ = writeln!(out, "{pad}for (long {v} = 0; {v} < {}; ++{v}) {{", l.extent);
                    stmts(out, &l.body, depth + 1, mint);
                    let _ = writeln!(out, "{pad}}}");
                }
                Stmt::Axpb(a) => {
                    let terms: Vec<String> = a
                        .index
                        .iter()
                        .map(|(v, c)| format!("{} * {c}", mint(*v, "i")))
                        .collect();
                    let at = terms.join(" + ");
                    let (o, i, s, b) =
                        (mint(a.out.id, "b"), mint(a.input.id, "b"), a.scale, a.bias);
                    let _ = writeln!(out, "{pad}{o}[{at}] = {i}[{at}] * {s:?}f + {b:?}f;");
                }
            }
        }
    }
    let mut names = BTreeMap::new();
    let mut mint = |id: u64, prefix: &str| -> String {
        names
            .entry(id)
            .or_insert_with(|| format!("{prefix}{}", fresh()))
            .clone()
    };
    let (y, x) = (mint(code.y.id, "b"), mint(code.x.id, "b"));
    let name = format!("axpb_{}", fresh());
    let mut text = format!("void {name}(float *restrict {y}, const float *restrict {x}) {{\n");
    stmts(&mut text, &code.body, 1, &mut mint);
    text.push_str("}\n");
    Rendered {
        name,
        text,
        params: [y, x],
    }
}

// kcache-glue: begin
use cc_backend::{Arg, CcBackend, CcError, CcProgram, DEFAULT_PRELUDE, Elem, Extent, Signature};
use kernel_cache::{CachedBackend, Census, Layout, Names, Outcomes, Resolved};
use schedule_cache::{Error, LoopCode, Measurements, NodeAttrs, NodeId, Replayer, Resolver};
use schedule_cache::{ScheduleCache, ScheduleLanguage, SymId, SymRef, Visitor};

/// What the schedule key sees of the code: every piece the renderer prints.
impl LoopCode for Kernel {
    fn walk(&self, v: &mut dyn Visitor) {
        fn walk(s: &Stmt, v: &mut dyn Visitor) {
            match s {
                Stmt::Loop(l) => {
                    v.open("loop");
                    v.int(l.extent);
                    v.int(l.unroll);
                    v.loop_binder(SymId(l.var));
                    l.body.iter().for_each(|s| walk(s, v));
                    v.close();
                }
                Stmt::Axpb(a) => {
                    v.open("axpb");
                    v.node(NodeId(a.out.id), &NodeAttrs::new(&[a.out.len], "f32"));
                    v.node(NodeId(a.input.id), &NodeAttrs::new(&[a.input.len], "f32"));
                    for (var, coefficient) in &a.index {
                        v.symbol(SymId(*var));
                        v.int(*coefficient);
                    }
                    v.float(f64::from(a.scale));
                    v.float(f64::from(a.bias));
                    v.close();
                }
            }
        }
        v.node(NodeId(self.y.id), &NodeAttrs::new(&[self.y.len], "f32"));
        v.node(NodeId(self.x.id), &NodeAttrs::new(&[self.x.len], "f32"));
        self.body.iter().for_each(|s| walk(s, v));
    }
}

/// The schedule language: an op is saved as its kind and its target as a [`SymRef`].
struct Ops;

impl ScheduleLanguage for Ops {
    type Op = Op;
    type SavedOp = (Kind, SymRef);
    fn save_op(&self, op: &Op, refs: &mut Resolver<'_>) -> Result<(Kind, SymRef), Error> {
        Ok((op.kind, refs.sym(SymId(op.target))?))
    }
    fn minted(&self, op: &Op) -> Vec<(String, SymId)> {
        let [outer, inner] = op.minted.map(SymId);
        match op.kind {
            Kind::Tile(_) => vec![("outer".into(), outer), ("inner".into(), inner)],
            Kind::Unroll(_) => Vec::new(),
        }
    }
    fn build_op(&self, (kind, t): &(Kind, SymRef), r: &mut Replayer<'_>) -> Result<Op, Error> {
        Ok(Op::new(*kind, r.sym(t)?.0))
    }
}

/// The C compiler with its caches: the kernel store under the in-memory cache.
type Kernels = CachedBackend<CcBackend>;

/// The backend's kcache state: its kernels and its schedules, in the shared layout (`kcache
/// stats DIR`, `verify DIR` and `gc DIR` read both stores).
fn open(dir: &str) -> Res<(Kernels, ScheduleCache<Ops>)> {
    let layout = Layout::new(dir);
    let kernels = CachedBackend::new(CcBackend::new()?, 64 << 20).with_store_in(&layout)?;
    // The regime: the compiler, the options every kernel is compiled with, the prelude, the CPU.
    let toolchain = schedule_cache::Toolchain::new(kernels.backend.identity(), cflags());
    let timing = schedule_cache::TimingIdentity::this_cpu(None);
    let disk = schedule_cache::DiskCache::new(layout.schedules());
    let schedules = ScheduleCache::new(Ops, "foreign-c", timing, disk)
        .with_toolchain(toolchain.with_prelude(DEFAULT_PRELUDE))
        .with_schedule_format("foreign-ops-1");
    Ok((kernels, schedules))
}

/// Compiles (or loads, or finds) the rendered kernels in one batch, each on its own.
fn compile(k: &Kernels, rendered: &[Rendered]) -> Res<(Outcomes<CcProgram, CcError>, Census)> {
    let batch: Vec<_> = rendered
        .iter()
        .map(|r| {
            let [y, x] = &r.params;
            let signature = Signature::new()
                .buffer_mut(y, Elem::F32, Extent::fixed(N))
                .buffer(x, Elem::F32, Extent::fixed(N));
            let names = Names::new()
                .with_bound([y, x])
                .with_minted_kernel_names("_");
            let source = cc_backend::Source::new(r.text.clone(), signature);
            source.batch_kernel(&r.name, &names, cflags(), k.backend.identity())
        })
        .collect();
    Ok(k.resolve_each(&batch)?)
}

/// Runs a compiled kernel on [`input`]; returns `y` and the time of the call.
fn call(resolved: &Resolved<CcProgram>) -> Res<(Vec<f32>, f64)> {
    let kernel = cc_backend::Kernel::from_resolved(resolved)?;
    let (mut y, started) = (vec![0.0f32; N], Instant::now());
    kernel.call(&mut [Arg::F32Mut(&mut y), Arg::F32(&input())])?;
    Ok((y, started.elapsed().as_secs_f64()))
}

/// Stores the winning schedule; returns the key it is stored at.
fn store_winner(s: &ScheduleCache<Ops>, code: &Kernel, ops: &[Op], t: Vec<f64>) -> Res<String> {
    let published = s.store(code, ops, Measurements::new(t))?;
    let why = || format!("not stored: {:?}", published.outcome);
    Ok(published.stored_key().ok_or_else(why)?.to_string())
}

/// The stored schedule rebuilt on `code`, and the key it was found at.
fn lookup(s: &ScheduleCache<Ops>, code: &Kernel) -> Res<(Vec<Op>, String)> {
    let hit = s.lookup(code)?.map_err(|m| format!("a miss: {m}"))?;
    Ok((hit.ops, hit.key.to_string()))
}
// kcache-glue: end

// ---- The tuner and the replaying process --------------------------------------------------

/// The options every kernel is compiled with: `$FOREIGN_CFLAGS`, else `-O2 -ffp-contract=off`.
fn cflags() -> Vec<String> {
    let flags = std::env::var("FOREIGN_CFLAGS");
    let flags = flags.as_deref().unwrap_or("-O2 -ffp-contract=off");
    flags.split_whitespace().map(String::from).collect()
}

fn tune(dir: &str) -> Res<()> {
    let (kernels, schedules) = open(dir)?;
    let (code, i) = build();
    let tile8 = Op::new(Kind::Tile(8), i);
    let unroll = Op::new(Kind::Unroll(8), tile8.minted[1]);
    let candidates = [
        vec![],
        vec![tile8.clone()],
        vec![Op::new(Kind::Tile(16), i)],
        vec![tile8, unroll],
    ];
    let scheduled = candidates
        .iter()
        .map(|ops| apply(&code, ops))
        .collect::<Res<Vec<_>>>()?;
    let rendered: Vec<Rendered> = scheduled.iter().map(render).collect();
    let (compiled, census) = compile(&kernels, &rendered)?;
    let mut best: Option<(f64, usize, Vec<f64>)> = None;
    for (c, outcome) in compiled.iter().enumerate() {
        let resolved = outcome
            .as_ref()
            .map_err(|e| format!("candidate {c}: {e}"))?;
        let mut times = Vec::new();
        for _ in 0..5 {
            let (y, took) = call(resolved)?;
            assert_eq!(y, expected(&code), "candidate {c} computes something else");
            times.push(took);
        }
        let fastest = times.iter().copied().fold(f64::INFINITY, f64::min);
        if best.as_ref().is_none_or(|(t, ..)| fastest < *t) {
            best = Some((fastest, c, times));
        }
    }
    let (_, winner, times) = best.ok_or("no candidate")?;
    let key = store_winner(&schedules, &code, &candidates[winner], times)?;
    println!("compiled {}", census.kernels_compiled);
    println!("winner {winner} {}", rendered[winner].name);
    println!("stored {key}");
    Ok(())
}

fn replay(dir: &str) -> Res<()> {
    let (kernels, schedules) = open(dir)?;
    let (code, _) = build();
    let (ops, key) = lookup(&schedules, &code)?;
    let rendered = render(&apply(&code, &ops)?);
    let (compiled, census) = compile(&kernels, std::slice::from_ref(&rendered))?;
    let resolved = compiled[0].as_ref().map_err(|e| e.to_string())?;
    let (y, _) = call(resolved)?;
    assert_eq!(
        y,
        expected(&code),
        "the replayed kernel computes something else"
    );
    println!("compiled {}", census.kernels_compiled);
    println!("loaded {}", census.kernels_loaded);
    println!("kernel {}", rendered.name);
    println!("replayed {key}");
    Ok(())
}

fn main() -> Res<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>()
        .as_slice()
    {
        ["tune", dir] => tune(dir),
        ["replay", dir] => replay(dir),
        ["lookup", dir] => match lookup(&open(dir)?.1, &build().0) {
            Ok((_, key)) => Err(format!("a hit at {key}").into()),
            Err(miss) => {
                println!("miss {miss}");
                Ok(())
            }
        },
        [] => {
            let tmp = tempfile::tempdir()?;
            let dir = tmp.path().to_str().ok_or("a UTF-8 temporary path")?;
            let tuned = run_self(&["tune", dir]);
            let replayed = run_self(&["replay", dir]);
            assert_eq!(after(&tuned, "compiled "), "4", "{tuned}");
            assert_eq!(after(&tuned, "stored "), after(&replayed, "replayed "));
            assert_eq!(after(&replayed, "compiled "), "0", "{replayed}");
            assert_eq!(after(&replayed, "loaded "), "1", "{replayed}");
            let first = after(&tuned, "winner ")
                .split(' ')
                .nth(1)
                .ok_or("a winner's name")?;
            let second = after(&replayed, "kernel ");
            assert_ne!(first, second, "the replaying process must mint other names");
            println!("tuned: candidate {}", after(&tuned, "winner "));
            println!("replayed as {second}: 0 compiles, 1 program loaded from the kernel store");
            // Other options: the winner tuned under -O2 is not replayed, and the miss says why.
            let o3 = stdout_of(
                Command::new(std::env::current_exe()?)
                    .args(["lookup", dir])
                    .env("FOREIGN_CFLAGS", "-O3 -ffp-contract=off"),
            );
            let why = after(&o3, "miss ");
            assert!(why.ends_with("(codegen: options -O2 → -O3)"), "{o3}");
            println!("under -O3: {why}");
            Ok(())
        }
        other => {
            Err(format!("usage: foreign_backend [tune|replay|lookup DIR] (got {other:?})").into())
        }
    }
}
