//! Cache entries built to hurt the process that replays them: thousands of splits by 1 (each
//! splitting the previous inner loop, which nested the code thousands of loops deep and
//! overflowed the stack applying, cloning, rendering and dropping it), schedules longer than
//! `MAX_SAVED_OPS`, deeply nested RON, and a schedule that unrolls every loop of a large
//! nest (rendered a copy per iteration). Each is a refusal or a miss, never a crash.
//!
//! The entries go through the real disk store and are looked up through the front door in a
//! child process (this test binary re-invoked with `DEEP_ENTRIES_CHILD` set, running only
//! `deep_child`): a stack overflow aborts the whole process, so the parent sees the child die
//! and fails, instead of dying with it.
#![allow(clippy::unwrap_used)]

use reference_ir::ir::{BinOp, Code, Expr, Index, LoopKind, Precision, Stmt, Symbol, TensorNode};
use reference_ir::render::{MAX_RENDER_BYTES, Naming, render, segments, signature_of};
use reference_ir::schedule::{
    MAX_NEST_DEPTH, RefOp, ReferenceLanguage, SavedRefOp, Schedule, apply_ops,
};
use schedule_cache::Store as _;
use schedule_cache::{Config, DiskCache, admin};
use schedule_cache::{
    Error, MAX_SAVED_OPS, Measurements, Registry, SavedSchedule, ScheduleCache, ScheduleEntry,
    Subject, SymRef, TimingIdentity, canonicalize, of_saved, to_saved,
};
use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

const CHILD_ENV: &str = "DEEP_ENTRIES_CHILD";

/// `for i in 0..64 { y[i] = x[i] * 2 }`.
fn build() -> (Code, Symbol, TensorNode) {
    let i = Symbol::fresh("i");
    let x = TensorNode::new("x", &[64], Precision::F32);
    let y = TensorNode::new("y", &[64], Precision::F32);
    let value = Expr::bin(
        BinOp::Mul,
        Expr::get(&x, vec![Index::var(&i)]),
        Expr::Const(2.0),
    );
    let body = vec![Stmt::set(&y, vec![Index::var(&i)], value)];
    (Code::new(vec![Stmt::for_(&i, 0, 64, body)]), i, x)
}

fn cache(dir: &Path) -> ScheduleCache<ReferenceLanguage> {
    ScheduleCache::new(
        ReferenceLanguage,
        "cc",
        TimingIdentity {
            device: "dev".into(),
            toolchain: None,
        },
        DiskCache::new(dir),
    )
    .with_schedule_format("ops-1")
}

/// `n` splits by 1, each of the previous split's inner loop.
fn splits_by_one(n: usize) -> Vec<SavedRefOp> {
    (0..n)
        .map(|k| SavedRefOp::Split {
            target: if k == 0 {
                SymRef::Base(0)
            } else {
                SymRef::Minted {
                    op: k - 1,
                    role: "inner".into(),
                }
            },
            factor: 1,
        })
        .collect()
}

/// Publishes an entry of `ops` for `build()`'s code through the disk store, as a foreign
/// process would, bypassing `ScheduleCache::store` (which refuses more than
/// `MAX_SAVED_OPS`); returns the entry's path.
fn publish(dir: &Path, ops: Vec<SavedRefOp>) -> std::path::PathBuf {
    let c = cache(dir);
    let (code, ..) = build();
    let identity = Subject::new(&code).identity().unwrap();
    let parts = c.key_parts(&identity).unwrap();
    let key = parts.key().unwrap();
    let schedule = SavedSchedule {
        digest: identity.digest().to_owned(),
        ops,
    };
    let entry = ScheduleEntry::new(&identity, parts, schedule, vec![1e-6], None).unwrap();
    assert!(
        DiskCache::new(dir)
            .store(Some(&key), &entry)
            .unwrap()
            .is_stored()
    );
    dir.join(format!("{key}.ron"))
}

/// What an adopter does with a lookup: on a hit, apply the ops, render each segment to C,
/// clone and drop the result. Returns one line saying how it ended.
fn replay_as_an_adopter(dir: &Path) -> String {
    let (code, ..) = build();
    let hit = match cache(dir).lookup(&code).unwrap() {
        Ok(hit) => hit,
        Err(miss) => return format!("miss: {miss:?}"),
    };
    let done = match apply_ops(&hit.ops, &code) {
        Ok(done) => done,
        Err(e) => return format!("refused after {} ops: {e}", hit.ops.len()),
    };
    let config = Config::new(reference_ir::render::reference_settings());
    for seg in segments(&done) {
        render(&seg, "k", &signature_of(&seg, &[]), Naming::Minted, &config).unwrap();
    }
    let copy = done.clone();
    assert_eq!(copy, done);
    format!("applied: {} loops", done.loops().len())
}

/// The child side: only does something when spawned by the parent test, with
/// `CHILD_ENV=<case>:<dir>`.
#[test]
fn deep_child() {
    let Ok(arg) = std::env::var(CHILD_ENV) else {
        return;
    };
    let (case, dir) = arg.split_once(':').unwrap();
    let dir = Path::new(dir);
    match case {
        "thousands" => {
            publish(dir, splits_by_one(5000));
        }
        "within-the-op-cap" => {
            publish(dir, splits_by_one(MAX_SAVED_OPS));
        }
        "unrolled-2-to-the-40" => {
            // Forty nested unrolled loops of two iterations: 2^40 copies of the statement.
            let x = TensorNode::new("x", &[1], Precision::F32);
            let mut body = vec![Stmt::set(
                &x,
                vec![Index::constant(0)],
                Expr::bin(
                    BinOp::Add,
                    Expr::get(&x, vec![Index::constant(0)]),
                    Expr::Const(1.0),
                ),
            )];
            for k in 0..40 {
                let mut nest = Stmt::for_(&Symbol::fresh(&format!("u{k}")), 0, 2, body);
                if let Stmt::For(l) = &mut nest {
                    l.kind = LoopKind::Unrolled;
                }
                body = vec![nest];
            }
            let code = Code::new(body);
            let config = Config::new(reference_ir::render::reference_settings());
            let sig = signature_of(&code, &[]);
            let got = match render(&code, "k", &sig, Naming::Minted, &config) {
                Ok(r) => format!("rendered {} bytes", r.text.len()),
                Err(e) => format!("refused: {e}"),
            };
            println!("OUTCOME: {got}");
            return;
        }
        nested => {
            // A good entry of one split, then a value nested 100,000 deep written into it.
            let path = publish(dir, splits_by_one(1));
            let good = std::fs::read_to_string(&path).unwrap();
            let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
            let bad = match nested {
                "nested-unknown-field" => good.replacen(
                    "    digest:",
                    &format!("    nested: {deep},\n    digest:"),
                    1,
                ),
                "nested-op" => good.replacen("ops: [", &format!("ops: [{deep},"), 1),
                other => panic!("unknown case {other}"),
            };
            assert_ne!(bad, good);
            std::fs::write(&path, bad).unwrap();
            // The inspection path reads the ops as untyped RON values.
            let found = admin::inventory(dir).unwrap();
            for e in &found.entries {
                let verified = admin::verify_entry(dir, e);
                println!("VERIFY: {verified:?}");
            }
        }
    }
    println!("OUTCOME: {}", replay_as_an_adopter(dir));
}

/// Runs `case` in a child process; returns its stdout, failing if the child did not exit
/// normally (a stack overflow aborts it).
fn in_child(case: &str) -> String {
    in_child_within(case, None)
}

/// [`in_child`], the child's address space limited to `limit_kib` KiB when given (through
/// the shell's `ulimit -v`): an allocation past it aborts the child.
fn in_child_within(case: &str, limit_kib: Option<u64>) -> String {
    let dir = tempfile::tempdir().unwrap();
    let exe = std::env::current_exe().unwrap();
    let mut command = match limit_kib {
        None => Command::new(exe),
        Some(kib) => {
            let mut sh = Command::new("sh");
            sh.arg("-c")
                .arg(format!("ulimit -v {kib} && exec \"$0\" \"$@\""))
                .arg(exe);
            sh
        }
    };
    // A child that died (a stack overflow aborts it) fails here, showing its command (the
    // case is in its environment), status and output.
    test_support::child::stdout_of(
        command
            .args(["--exact", "deep_child", "--nocapture", "--test-threads=1"])
            .env(CHILD_ENV, format!("{case}:{}", dir.path().display())),
    )
}

fn outcome(stdout: &str) -> &str {
    stdout
        .lines()
        .find_map(|l| l.split_once("OUTCOME: ").map(|(_, o)| o))
        .unwrap_or_else(|| panic!("no outcome in:\n{stdout}"))
}

/// Regression: an entry of 5000 splits by 1 was a hit, and applying it nested the code 5000
/// loops deep: the process aborted on a stack overflow, on every run that looked it up. It
/// is a miss: the schedule is longer than `MAX_SAVED_OPS`.
#[test]
fn an_entry_of_thousands_of_splits_is_a_miss_not_a_crash() {
    let stdout = in_child("thousands");
    let got = outcome(&stdout);
    assert!(got.starts_with("miss: Unreplayable"), "{got}");
    assert!(got.contains("5000 ops"), "{got}");
}

/// Regression: within the op cap, the splits are rebuilt (a hit) but applying them stops at
/// the split that would nest the code deeper than `MAX_NEST_DEPTH` loops, a typed refusal
/// before the deeper tree is built.
#[test]
fn an_entry_within_the_op_cap_stops_nesting_at_the_depth_bound() {
    let stdout = in_child("within-the-op-cap");
    let got = outcome(&stdout);
    assert!(
        got.starts_with(&format!(
            "refused after {MAX_SAVED_OPS} ops: schedule op Split"
        )),
        "{got}"
    );
    assert!(
        got.contains(&format!("deeper than {MAX_NEST_DEPTH}")),
        "{got}"
    );
}

/// RON's recursion limit makes a deeply nested value in an entry a parse failure: a miss for
/// the front door, an invalid entry for inspection, never a crash.
#[test]
fn deeply_nested_ron_in_an_entry_is_a_miss_not_a_crash() {
    for case in ["nested-unknown-field", "nested-op"] {
        let stdout = in_child(case);
        let got = outcome(&stdout);
        assert!(got.starts_with("miss: NotFound"), "{case}: {got}");
        assert!(got.contains("Unparsable"), "{case}: {got}");
        let verify: Vec<&str> = stdout
            .lines()
            .filter_map(|l| l.split_once("VERIFY: ").map(|(_, v)| v))
            .collect();
        assert_eq!(verify.len(), 1, "{case}: {stdout}");
        assert!(verify[0].starts_with("Err(Invalid"), "{case}: {stdout}");
    }
}

/// Splits by 1 from one loop: the nest grows one loop per split up to `MAX_NEST_DEPTH`, and
/// the split that would go deeper is refused. At the bound, every walk of the IR (apply,
/// clone, compare, list, canonicalize, render, debug-print, the other ops, drop) fits a
/// 256 KiB stack (a debug build needs about 140 KiB).
#[test]
fn nests_stop_at_the_depth_bound_and_every_walk_fits_a_small_stack() {
    let run = std::thread::Builder::new()
        .stack_size(256 << 10)
        .spawn(|| {
            let (code, i, x) = build();
            let mut done = code.clone();
            let mut target = i.id();
            for loops in 2..=MAX_NEST_DEPTH {
                let op = RefOp::split(target, 1);
                let RefOp::Split { inner, .. } = &op else {
                    unreachable!()
                };
                target = inner.id();
                done = op.apply(&done).unwrap();
                assert_eq!(done.loops().len(), loops);
            }
            let refused = RefOp::split(target, 1).apply(&done).unwrap_err();
            assert!(
                matches!(&refused, Error::ScheduleInapplicable { reason, .. }
                    if reason.contains(&format!("deeper than {MAX_NEST_DEPTH}"))),
                "{refused:?}"
            );
            // Splitting an outer loop would deepen the same nest: refused too.
            let refused = RefOp::split(i.id(), 1).apply(&done);
            assert!(refused.is_err());

            let copy = done.clone();
            assert_eq!(copy, done);
            assert_eq!(done.nodes().len(), 2);
            let id = canonicalize(&done, &[], &BTreeMap::new(), true);
            assert!(id.is_complete());
            assert_eq!(id.binders().len(), MAX_NEST_DEPTH);
            let config = Config::new(reference_ir::render::reference_settings());
            let sig = signature_of(&done, &[]);
            render(&done, "k", &sig, Naming::Minted, &config).unwrap();
            let _ = format!("{done:?}");
            // Every loop unrolled (extent 1 or 64), the innermost vectorized, an invariant
            // read hoisted, two loops interchanged: still renders.
            let loops = done.loops();
            let mut ops: Vec<RefOp> = loops
                .iter()
                .map(|l| RefOp::Unroll { target: l.var.id() })
                .collect();
            let innermost = loops.last().unwrap().var.id();
            ops.push(RefOp::Vectorize { target: innermost });
            ops.push(RefOp::Reorder {
                outer: loops[1].var.id(),
                inner: loops[2].var.id(),
            });
            let unrolled = apply_ops(&ops, &done).unwrap();
            render(&unrolled, "k", &sig, Naming::Stable, &config).unwrap();
            assert!(RefOp::hoist(x.id(), innermost).apply(&done).is_err());
            drop((copy, unrolled, done));
        })
        .unwrap();
    run.join().unwrap();
}

/// The bound is per nest: a loop beside a nest at the bound can still be split.
#[test]
fn the_depth_bound_is_per_nest() {
    let (code, i, _) = build();
    let j = Symbol::fresh("j");
    let z = TensorNode::new("z", &[8], Precision::F32);
    let mut body = code.body.clone();
    body.push(Stmt::for_(
        &j,
        0,
        8,
        vec![Stmt::set(&z, vec![Index::var(&j)], Expr::Const(1.0))],
    ));
    let mut done = Code::new(body);
    let mut target = i.id();
    for _ in 1..MAX_NEST_DEPTH {
        let op = RefOp::split(target, 1);
        if let RefOp::Split { outer, .. } = &op {
            target = outer.id();
        }
        done = op.apply(&done).unwrap();
    }
    assert!(RefOp::split(target, 1).apply(&done).is_err());
    let beside = RefOp::split(j.id(), 2).apply(&done).unwrap();
    assert_eq!(beside.loops().len(), MAX_NEST_DEPTH + 2);
}

/// No schedule longer than `MAX_SAVED_OPS` is saved, appended or replayed.
#[test]
fn schedules_longer_than_the_op_cap_are_refused_everywhere() {
    let (code, i, _) = build();
    let id = canonicalize(&code, &[], &BTreeMap::new(), true);
    let unroll = |n: usize| vec![RefOp::Unroll { target: i.id() }; n];
    let reg = Registry::new(&id);
    let (saved, reg_after) = to_saved(&ReferenceLanguage, &reg, &unroll(MAX_SAVED_OPS)).unwrap();
    assert!(matches!(
        to_saved(&ReferenceLanguage, &reg, &unroll(MAX_SAVED_OPS + 1)),
        Err(Error::TooManyOps { ops, max }) if ops == MAX_SAVED_OPS + 1 && max == MAX_SAVED_OPS
    ));
    // Continuing a full schedule.
    assert!(matches!(
        to_saved(&ReferenceLanguage, &reg_after, &unroll(1)),
        Err(Error::TooManyOps { .. })
    ));
    let mut full = saved.clone();
    let one = SavedSchedule {
        digest: saved.digest.clone(),
        ops: vec![SavedRefOp::Unroll {
            target: SymRef::Base(0),
        }],
    };
    assert!(matches!(
        full.append(one.clone()),
        Err(Error::TooManyOps { .. })
    ));
    assert_eq!(full, saved, "unchanged on error");
    let (ops, _) = of_saved(&ReferenceLanguage, &saved, &id).unwrap();
    assert_eq!(ops.len(), MAX_SAVED_OPS);
    let mut long = saved;
    long.ops.extend(one.ops);
    assert!(matches!(
        of_saved(&ReferenceLanguage, &long, &id),
        Err(Error::TooManyOps { .. })
    ));
    // The front door refuses to store it.
    let dir = tempfile::tempdir().unwrap();
    let err = cache(dir.path())
        .store(
            &code,
            &unroll(MAX_SAVED_OPS + 1),
            Measurements::new(vec![1e-6]),
        )
        .unwrap_err();
    assert!(matches!(err, Error::TooManyOps { .. }), "{err:?}");
}

/// `for i, j, k < 64: c[i,j] = c[i,j] + a[i,k] * b[k,j]`, with its loop variables.
fn matmul() -> (Code, [Symbol; 3]) {
    let n = 64;
    let (i, j, k) = (Symbol::fresh("i"), Symbol::fresh("j"), Symbol::fresh("k"));
    let node = |label: &str| TensorNode::new(label, &[64, 64], Precision::F32);
    let (a, b, c) = (node("a"), node("b"), node("c"));
    let at = |x: &Symbol, y: &Symbol| vec![Index::var(x), Index::var(y)];
    let value = Expr::bin(
        BinOp::Add,
        Expr::get(&c, at(&i, &j)),
        Expr::bin(
            BinOp::Mul,
            Expr::get(&a, at(&i, &k)),
            Expr::get(&b, at(&k, &j)),
        ),
    );
    let set = Stmt::set(&c, at(&i, &j), value);
    let nest = Stmt::for_(
        &i,
        0,
        n,
        vec![Stmt::for_(&j, 0, n, vec![Stmt::for_(&k, 0, n, vec![set])])],
    );
    (Code::new(vec![nest]), [i, j, k])
}

/// Regression: an entry of nine ops (every loop of a 64³ matmul split by 16, every loop
/// unrolled) replayed fine, and rendering it emitted a copy per iteration: 25 MB of C
/// (a 512³ matmul: some 13 GB, exhausting memory). The renderer refuses past
/// `MAX_RENDER_BYTES`, while the unscheduled nest renders as before.
#[test]
fn an_entry_that_unrolls_every_loop_of_a_large_nest_is_refused_by_the_renderer() {
    let dir = tempfile::tempdir().unwrap();
    let c = cache(dir.path());
    let (code, [i, j, k]) = matmul();
    let mut s = Schedule::new();
    for l in [&i, &j, &k] {
        let (outer, inner) = s.split(l, 16);
        s.unroll(&outer);
        s.unroll(&inner);
    }
    assert!(
        c.store(&code, &s.ops, Measurements::new(vec![1e-6]))
            .unwrap()
            .outcome
            .is_stored()
    );

    let (again, _) = matmul();
    let hit = c.lookup(&again).unwrap().unwrap();
    let done = apply_ops(&hit.ops, &again).unwrap();
    let config = Config::new(reference_ir::render::reference_settings());
    let sig = signature_of(&again, &[]);
    let plain = render(&again, "k", &sig, Naming::Minted, &config).unwrap();
    assert!(plain.text.len() < 1000, "{}", plain.text.len());
    let err = render(&done, "k", &sig, Naming::Minted, &config).unwrap_err();
    assert!(
        matches!(&err, Error::Render(why) if why.contains(&format!("longer than {MAX_RENDER_BYTES} bytes"))),
        "{err:?}"
    );
}

/// Regression: the renderer's cap is checked before each unrolled copy, not only on the
/// finished text: forty nested unrolled loops of two iterations (2^40 copies, some 40 TB
/// of C) are refused once the text passes `MAX_RENDER_BYTES`, in a child whose address
/// space is limited to 1 GiB (without the per-copy check the child runs out of memory
/// and aborts).
#[test]
fn copies_stop_at_the_render_cap_not_when_memory_runs_out() {
    let stdout = in_child_within("unrolled-2-to-the-40", Some(1 << 20));
    let got = outcome(&stdout);
    assert!(
        got.starts_with("refused: ")
            && got.contains(&format!("longer than {MAX_RENDER_BYTES} bytes")),
        "{got}"
    );
}
