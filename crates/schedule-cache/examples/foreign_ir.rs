//! A worked adoption of schedule-cache by a backend with its own loop IR (not the reference
//! IR of the reference-ir crate): a tiny loop language implementing [`LoopCode`], a schedule
//! language of one op (tile a loop) implementing [`ScheduleLanguage`], and the [`ScheduleCache`] front door
//! saving a tuned schedule in one process and replaying it in another.
//!
//! Run it with `cargo run -p schedule-cache --example foreign_ir`: with no arguments it creates
//! a temporary cache directory and runs itself as child processes, one per step:
//!
//! 1. `save DIR`: builds the code, "tunes" it (tiles `i` by 8, then the inner loop by 2),
//!    checks the scheduled code computes what the unscheduled code does, stores the schedule;
//! 2. `replay DIR`: builds the same code again (other symbol and buffer ids: they are drawn
//!    from the process id), looks it up, replays the stored ops on it, checks the result, and
//!    prints the scheduled code's canonical digest, which must equal the first process's;
//! 3. `format2 DIR`: the same lookup after the adopter changed what its ops mean (schedule
//!    format `tiny-ops-2`): a miss that names the `format` component;
//! 4. `seeds DIR`: after a regime change (another codegen tag) and at other sizes (96, 60)
//!    the lookup misses and `ScheduleCache::seeds` offers the saved schedule as a seed (the
//!    same code under other components; code of the same loop nest at another size), which
//!    `ScheduleCache::candidate` rebuilds on the new code; applied and checked against the
//!    unscheduled code (a tuner would measure it too) before it could be stored; at 60 the
//!    tile of 8 does not apply and the seed is dropped;
//! 5. `deep DIR`: stores 4096 tiles by 1, each of the previous inner loop (as many ops as a
//!    saved schedule may have), looks them up and replays them: applying them stops at
//!    `MAX_NEST_DEPTH` with an error instead of overflowing the stack.
//!
//! Last, in the parent, `check_the_walk` checks the IR's `LoopCode` walk with
//! `schedule_cache::WalkCheck`: each piece of the IR mutated once must change the digest.
//!
//! It is also a test (`test = true, harness = false` in Cargo.toml): `cargo test` runs it.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};

use schedule_cache::{DiskCache, LoopCode, NodeAttrs, NodeId, Replayer, Resolver, SymId, Visitor};
use schedule_cache::{
    Error, Limits, Measurements, ScheduleCache, ScheduleLanguage, SymRef, TimingIdentity,
    Toolchain, canonicalize,
};
use serde::{Deserialize, Serialize};
use test_support::child::{after, run_self};

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

// ---- The foreign IR ------------------------------------------------------------------------

/// Ids unique within this process, and different in every process (drawn from the pid), as a
/// real compiler's symbol counters are.
fn fresh() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    (u64::from(std::process::id()) << 24) + NEXT.fetch_add(1, Ordering::Relaxed)
}

/// A one-dimensional buffer of `f64`.
#[derive(Clone, Copy, Debug)]
struct Buf {
    id: u64,
    len: usize,
}

/// A statement: a counted loop, or `out[idx] = input[idx] * scale + bias` where `idx` is a sum
/// of `coefficient * variable` terms.
#[derive(Clone, Debug)]
enum Stmt {
    Loop {
        var: u64,
        extent: i64,
        body: Vec<Stmt>,
    },
    Axpb {
        out: Buf,
        input: Buf,
        index: Vec<(u64, i64)>,
        scale: f64,
        bias: f64,
    },
}

#[derive(Clone, Debug)]
struct Kernel {
    body: Vec<Stmt>,
}

fn walk_stmt(s: &Stmt, v: &mut dyn Visitor) {
    let buf = |v: &mut dyn Visitor, b: &Buf| {
        v.node(NodeId(b.id), &NodeAttrs::new(&[b.len], "f64"));
    };
    match s {
        Stmt::Loop { var, extent, body } => {
            v.open("loop");
            v.int(*extent);
            v.loop_binder(SymId(*var));
            for s in body {
                walk_stmt(s, v);
            }
            v.close();
        }
        Stmt::Axpb {
            out,
            input,
            index,
            scale,
            bias,
        } => {
            v.open("axpb");
            buf(v, out);
            buf(v, input);
            for (var, coefficient) in index {
                v.open("term");
                v.symbol(SymId(*var));
                v.int(*coefficient);
                v.close();
            }
            v.float(*scale);
            v.float(*bias);
            v.close();
        }
    }
}

impl LoopCode for Kernel {
    fn walk(&self, v: &mut dyn Visitor) {
        for s in &self.body {
            walk_stmt(s, v);
        }
    }
}

/// `for i in 0..64 { y[i] = x[i] * 3 + 1 }`, with fresh ids.
fn build() -> (Kernel, u64, [Buf; 2]) {
    build_n(64)
}

/// `for i in 0..n { y[i] = x[i] * 3 + 1 }`, with fresh ids.
fn build_n(n: usize) -> (Kernel, u64, [Buf; 2]) {
    let i = fresh();
    let x = Buf {
        id: fresh(),
        len: n,
    };
    let y = Buf {
        id: fresh(),
        len: n,
    };
    let body = vec![Stmt::Axpb {
        out: y,
        input: x,
        index: vec![(i, 1)],
        scale: 3.0,
        bias: 1.0,
    }];
    let code = Kernel {
        body: vec![Stmt::Loop {
            var: i,
            extent: i64::try_from(n).expect("a small extent"),
            body,
        }],
    };
    (code, i, [x, y])
}

/// Runs the kernel on `buffers` (by buffer id).
fn run(stmts: &[Stmt], env: &mut BTreeMap<u64, i64>, buffers: &mut BTreeMap<u64, Vec<f64>>) {
    for s in stmts {
        match s {
            Stmt::Loop { var, extent, body } => {
                for k in 0..*extent {
                    env.insert(*var, k);
                    run(body, env, buffers);
                }
                env.remove(var);
            }
            Stmt::Axpb {
                out,
                input,
                index,
                scale,
                bias,
            } => {
                let at: i64 = index.iter().map(|(v, c)| env[v] * c).sum();
                let at = usize::try_from(at).expect("index in range");
                let value = buffers[&input.id][at] * scale + bias;
                buffers.get_mut(&out.id).expect("output")[at] = value;
            }
        }
    }
}

fn outputs(code: &Kernel, [x, y]: [Buf; 2]) -> Vec<f64> {
    let mut buffers = BTreeMap::from([
        (x.id, (0..x.len).map(|k| k as f64 * 0.5).collect()),
        (y.id, vec![0.0; y.len]),
    ]);
    run(&code.body, &mut BTreeMap::new(), &mut buffers);
    buffers.remove(&y.id).expect("output")
}

// ---- The foreign schedule language ----------------------------------------------------------

/// A live op: tile `target` by `factor` into fresh `outer` and `inner` loops.
#[derive(Clone, Debug)]
struct Tile {
    target: u64,
    factor: i64,
    outer: u64,
    inner: u64,
}

impl Tile {
    fn new(target: u64, factor: i64) -> Tile {
        Tile {
            target,
            factor,
            outer: fresh(),
            inner: fresh(),
        }
    }
}

/// The saved form: symbols as [`SymRef`]s (process-independent).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
enum SavedTile {
    Tile { target: SymRef, factor: i64 },
}

struct TinyLanguage;

impl ScheduleLanguage for TinyLanguage {
    type Op = Tile;
    type SavedOp = SavedTile;

    fn save_op(&self, op: &Tile, refs: &mut Resolver<'_>) -> std::result::Result<SavedTile, Error> {
        Ok(SavedTile::Tile {
            target: refs.sym(SymId(op.target))?,
            factor: op.factor,
        })
    }

    fn minted(&self, op: &Tile) -> Vec<(String, SymId)> {
        vec![
            ("outer".to_owned(), SymId(op.outer)),
            ("inner".to_owned(), SymId(op.inner)),
        ]
    }

    fn build_op(
        &self,
        saved: &SavedTile,
        refs: &mut Replayer<'_>,
    ) -> std::result::Result<Tile, Error> {
        let SavedTile::Tile { target, factor } = saved;
        Ok(Tile::new(refs.sym(target)?.0, *factor))
    }
}

fn tile_stmts(stmts: &[Stmt], op: &Tile) -> Result<Vec<Stmt>> {
    stmts.iter().map(|s| tile_stmt(s, op)).collect()
}

fn tile_stmt(s: &Stmt, op: &Tile) -> Result<Stmt> {
    Ok(match s {
        Stmt::Loop { var, extent, body } if *var == op.target => {
            if op.factor <= 0 || extent % op.factor != 0 {
                return Err(format!("cannot tile a loop of {extent} by {}", op.factor).into());
            }
            Stmt::Loop {
                var: op.outer,
                extent: extent / op.factor,
                body: vec![Stmt::Loop {
                    var: op.inner,
                    extent: op.factor,
                    body: tile_stmts(body, op)?,
                }],
            }
        }
        Stmt::Loop { var, extent, body } => Stmt::Loop {
            var: *var,
            extent: *extent,
            body: tile_stmts(body, op)?,
        },
        Stmt::Axpb {
            out,
            input,
            index,
            scale,
            bias,
        } => {
            let mut terms = Vec::new();
            for &(v, c) in index {
                if v == op.target {
                    terms.push((op.outer, c * op.factor));
                    terms.push((op.inner, c));
                } else {
                    terms.push((v, c));
                }
            }
            Stmt::Axpb {
                out: *out,
                input: *input,
                index: terms,
                scale: *scale,
                bias: *bias,
            }
        }
    })
}

/// The deepest loop nest a schedule may build here. Each tile nests the code one loop
/// deeper and every walk of this IR recurses once per level, so without a bound a cache
/// entry of thousands of tiles would overflow the stack of the process replaying it (the
/// crate bounds how many ops a saved schedule has, `MAX_SAVED_OPS`, not what they build).
const MAX_NEST_DEPTH: usize = 64;

fn nest_depth(stmts: &[Stmt]) -> usize {
    stmts
        .iter()
        .map(|s| match s {
            Stmt::Loop { body, .. } => 1 + nest_depth(body),
            Stmt::Axpb { .. } => 0,
        })
        .max()
        .unwrap_or(0)
}

fn apply(code: &Kernel, ops: &[Tile]) -> Result<Kernel> {
    let mut body = code.body.clone();
    for op in ops {
        body = tile_stmts(&body, op)?;
        // One level past the bound at most: refused before the next op deepens it.
        if nest_depth(&body) > MAX_NEST_DEPTH {
            return Err(format!("the schedule nests loops deeper than {MAX_NEST_DEPTH}").into());
        }
    }
    Ok(Kernel { body })
}

fn digest(code: &Kernel) -> String {
    canonicalize(code, &[], &BTreeMap::new(), true)
        .digest()
        .to_owned()
}

// ---- The adopter's cache, built once ---------------------------------------------------------

fn cache(dir: &str, format: &str) -> ScheduleCache<TinyLanguage> {
    cache_with(dir, format, "tiny-interpreter 0.1")
}

fn cache_with(dir: &str, format: &str, codegen: &str) -> ScheduleCache<TinyLanguage> {
    ScheduleCache::new(
        TinyLanguage,
        "tiny-interpreter",
        TimingIdentity::this_cpu(None),
        DiskCache::new(dir),
    )
    // The interpreter is the toolchain: its version, no options (a compiler's go here).
    .with_toolchain(Toolchain::new(codegen, Vec::<String>::new()))
    .with_limits(Limits {
        worker_pool_tag: "single-thread".into(),
        max_threads: 1,
        ..Limits::default()
    })
    .with_schedule_format(format)
}

fn save(dir: &str) -> Result<()> {
    let (code, i, bufs) = build();
    // "Tuning": tile i by 8, then the minted inner loop by 2.
    let first = Tile::new(i, 8);
    let second = Tile::new(first.inner, 2);
    let ops = vec![first, second];
    let scheduled = apply(&code, &ops)?;
    assert_eq!(outputs(&scheduled, bufs), outputs(&code, bufs));
    let published = cache(dir, "tiny-ops-1").store(&code, &ops, Measurements::new(vec![1e-6]))?;
    assert!(published.outcome.is_stored(), "{:?}", published.outcome);
    println!("stored {}", published.key.ok_or("no key")?);
    println!("scheduled {}", digest(&scheduled));
    Ok(())
}

fn replay(dir: &str) -> Result<()> {
    let (code, _, bufs) = build();
    let hit = cache(dir, "tiny-ops-1")
        .lookup(&code)?
        .map_err(|miss| format!("expected a hit: {miss}"))?;
    let scheduled = apply(&code, &hit.ops)?;
    assert_eq!(outputs(&scheduled, bufs), outputs(&code, bufs));
    println!("replayed {}", hit.key);
    println!("scheduled {}", digest(&scheduled));
    Ok(())
}

fn format2(dir: &str) -> Result<()> {
    let (code, _, _) = build();
    match cache(dir, "tiny-ops-2").lookup(&code)? {
        Ok(_) => Err("an entry of another schedule format replayed".into()),
        Err(miss) => {
            println!("miss {miss}");
            Ok(())
        }
    }
}

/// After a regime change (codegen `tiny-interpreter 0.2`) and at other sizes: a miss, then
/// the seeds the cache offers, each rebuilt on the code, applied, checked against the
/// unscheduled code (and, in a real tuner, measured) before it could be stored. A seed that
/// does not apply (a tile of 8 on a loop of 60) is dropped.
fn seeds(dir: &str) -> Result<()> {
    for (codegen, n) in [
        ("tiny-interpreter 0.2", 64),
        ("tiny-interpreter 0.1", 96),
        ("tiny-interpreter 0.1", 60),
    ] {
        let c = cache_with(dir, "tiny-ops-1", codegen);
        let (code, _, bufs) = build_n(n);
        let miss = match c.lookup(&code)? {
            Ok(_) => return Err(format!("{codegen} at {n}: a hit").into()),
            Err(miss) => miss,
        };
        let found = c.seeds(&code)?;
        if let Some(e) = &found.near_index {
            return Err(format!("no near-code index: {e}").into());
        }
        let seed = found.seeds.first().ok_or("no seed offered")?;
        let candidate = match c.candidate(seed, &code) {
            Ok(candidate) => candidate,
            Err(dropped) => return Err(format!("{dropped}").into()),
        };
        match apply(&code, &candidate.ops) {
            Ok(scheduled) => {
                // Checked (and, in a tuner, measured) before it may be stored.
                assert_eq!(outputs(&scheduled, bufs), outputs(&code, bufs));
                println!(
                    "seed n={n} {codegen}: {} seed(s), first from {} (miss: {miss})",
                    found.seeds.len(),
                    seed.origin()
                );
            }
            Err(e) => println!("dropped n={n}: {e}"),
        }
    }
    Ok(())
}

fn deep(dir: &str) -> Result<()> {
    let (code, i, _) = build();
    let mut ops = vec![Tile::new(i, 1)];
    while ops.len() < schedule_cache::MAX_SAVED_OPS {
        let inner = ops[ops.len() - 1].inner;
        ops.push(Tile::new(inner, 1));
    }
    let c = cache(dir, "tiny-ops-1");
    assert!(
        c.store(&code, &ops, Measurements::new(vec![1e-6]))?
            .outcome
            .is_stored()
    );
    let (again, _, _) = build();
    let hit = c
        .lookup(&again)?
        .map_err(|miss| format!("expected a hit: {miss}"))?;
    match apply(&again, &hit.ops) {
        Ok(_) => Err(format!("{} nested tiles applied", hit.ops.len()).into()),
        Err(e) => {
            println!("refused {e}");
            Ok(())
        }
    }
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>()
        .as_slice()
    {
        ["save", dir] => save(dir),
        ["replay", dir] => replay(dir),
        ["format2", dir] => format2(dir),
        ["deep", dir] => deep(dir),
        ["seeds", dir] => seeds(dir),
        [] => {
            let tmp = tempfile::tempdir()?;
            let dir = tmp.path().to_str().ok_or("a UTF-8 temporary path")?;
            let saved = run_self(&["save", dir]);
            let replayed = run_self(&["replay", dir]);
            assert_eq!(after(&saved, "stored "), after(&replayed, "replayed "));
            assert_eq!(
                after(&saved, "scheduled "),
                after(&replayed, "scheduled "),
                "the replayed schedule must give the same code"
            );
            let missed = run_self(&["format2", dir]);
            let why = after(&missed, "miss ");
            assert!(
                why.ends_with("differ in: format (format: tiny-ops-1 → tiny-ops-2)"),
                "{why}"
            );
            println!(
                "saved in one process, replayed in another: {}",
                after(&saved, "stored ")
            );
            println!("after a schedule-format change: {why}");
            let seeded = run_self(&["seeds", dir]);
            let codegen = after(&seeded, "seed n=64 ");
            assert!(
                codegen.contains("first from the same code (differs in: codegen)"),
                "{codegen}"
            );
            let size = after(&seeded, "seed n=96 ");
            assert!(
                size.contains("first from code of the same structure, other sizes"),
                "{size}"
            );
            let dropped = after(&seeded, "dropped n=60: ");
            assert!(
                dropped.contains("cannot tile a loop of 60 by 8"),
                "{dropped}"
            );
            println!("after a codegen change: {codegen}");
            println!("at another size: {size}");
            // Last: it overwrites the entry.
            let deep = run_self(&["deep", dir]);
            println!("{}", after(&deep, "refused "));
            check_the_walk()
        }
        other => Err(format!("usage: foreign_ir [save|replay|format2 DIR] (got {other:?})").into()),
    }
}

// ---- Checking the walk -----------------------------------------------------------------------

/// The adopter's test of its `LoopCode` walk: each piece of the IR mutated once (an omission in
/// `walk_stmt` would merge two kernels under one digest). The `Debug` form stands in for a
/// renderer, so each mutation must change the code.
fn check_the_walk() -> Result<()> {
    use schedule_cache::WalkCheck;
    fn axpb(k: &mut Kernel) -> &mut Stmt {
        match &mut k.body[0] {
            Stmt::Loop { body, .. } => &mut body[0],
            s => s,
        }
    }
    let report = WalkCheck::new(|| build().0)
        .render(|k| format!("{k:?}"))
        .mutation("extent", |k| {
            if let Stmt::Loop { extent, .. } = &mut k.body[0] {
                *extent = 32;
            }
        })
        .mutation("coefficient", |k| {
            if let Stmt::Axpb { index, .. } = axpb(k) {
                index[0].1 = 2;
            }
        })
        .mutation("scale", |k| {
            if let Stmt::Axpb { scale, .. } = axpb(k) {
                *scale = 4.0;
            }
        })
        .mutation("bias", |k| {
            if let Stmt::Axpb { bias, .. } = axpb(k) {
                *bias = -1.0;
            }
        })
        .mutation("input buffer", |k| {
            if let Stmt::Axpb { out, input, .. } = axpb(k) {
                *input = *out;
            }
        })
        .mutation("buffer length", |k| {
            if let Stmt::Axpb { input, .. } = axpb(k) {
                input.len = 128;
            }
        })
        .run();
    if !report.is_ok() {
        return Err(format!("the walk leaves something out:\n{report}").into());
    }
    println!("walk check: {report}");
    Ok(())
}
