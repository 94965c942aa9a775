//! A real workload for the tuner's tests and bench: reference-IR loop code rendered to C
//! with reference-ir's renderer, compiled by cc-backend, run on deterministic data and
//! checked against a Rust reference.
//!
//! Two matrix products: [`Matmul`], the demo's small space (order x hoist x tile x inner
//! x init: 96 points, 64 legal, many near the best), and [`Tiled`], reference-ir's large
//! space (`space::TiledMatmul`: 2,000 legal points, few near the best).
#![allow(dead_code, unreachable_pub, missing_docs)]

use std::collections::BTreeMap;

use cc_backend::{Arg, CcBackend, CcProgram, Elem, Extent, Kernel, Signature, Source};
use kernel_cache::{BatchKernel, KernelCache, Names, Resolved};
use reference_ir::ir::{Code, Symbol, TensorNode};
use reference_ir::render::{Naming, Param, ParamKind, render, segments, signature_of};
use reference_ir::schedule::{RefOp, ReferenceLanguage, Schedule, apply_ops};
use schedule_cache::{
    Config, DiskCache, LoopCode, Measurements, NodeId, Placement, ScheduleCache, StorePolicy,
    Subject, TimingIdentity, Toolchain, Visitor,
};
use tuner::{Rendered, Space, Workload};

/// Which buffer a node lives in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Buf {
    Out,
    A,
    B,
}

/// A freshly built copy of the code, with handles on its loops and nodes.
#[derive(Debug)]
pub struct Built {
    pub code: Code,
    /// The large space's own handles, for [`Tiled`].
    pub tiled: Option<reference_ir::space::MatmulCode>,
    pub loops: BTreeMap<&'static str, Symbol>,
    pub nodes: BTreeMap<&'static str, TensorNode>,
    pub params: Vec<(NodeId, Buf)>,
}

impl LoopCode for Built {
    fn walk(&self, visitor: &mut dyn Visitor) {
        self.code.walk(visitor)
    }
}

/// A problem: code, its space, a reference.
pub trait Problem {
    fn name(&self) -> String;
    fn len(&self) -> usize;
    fn build(&self) -> Built;
    fn dims(&self) -> Vec<usize>;
    fn schedule(&self, b: &Built, p: &[usize]) -> Option<Schedule>;
    fn reference(&self, a: &[f32], b: &[f32], out: &mut [f32]);
}

/// The n x n x n matrix product, zero-fill then accumulate (two segments).
pub struct Matmul {
    pub n: usize,
}

const TILES: [i64; 4] = [1, 4, 8, 16];

impl Problem for Matmul {
    fn name(&self) -> String {
        "matmul".to_string()
    }
    fn len(&self) -> usize {
        self.n * self.n
    }
    fn build(&self) -> Built {
        let m = reference_ir::space::MatmulCode::new(self.n);
        let ([i0, j0], [i, j, k]) = (m.fill, m.loops);
        Built {
            code: m.code,
            tiled: None,
            loops: [("i0", i0), ("j0", j0), ("i", i), ("j", j), ("k", k)]
                .into_iter()
                .collect(),
            params: vec![(m.c.id(), Buf::Out), (m.a.id(), Buf::A), (m.b.id(), Buf::B)],
            nodes: [("c", m.c), ("a", m.a), ("b", m.b)].into_iter().collect(),
        }
    }
    /// order (ijk, ikj) x hoist (-, a) x tile (1, 4, 8, 16) x inner (serial, unroll,
    /// simd) x init (serial, simd).
    fn dims(&self) -> Vec<usize> {
        vec![2, 2, 4, 3, 2]
    }
    fn schedule(&self, b: &Built, p: &[usize]) -> Option<Schedule> {
        let l = |n: &str| b.loops.get(n).cloned();
        let mut s = Schedule::new();
        if p[4] == 1 {
            s.vectorize(&l("j0")?);
        }
        let ikj = p[0] == 1;
        let inner = if ikj {
            s.reorder(&l("j")?, &l("k")?);
            l("j")?
        } else {
            l("k")?
        };
        if p[1] == 1 {
            if !ikj {
                return None;
            }
            s.hoist(b.nodes.get("a")?.id(), &l("j")?);
        }
        let factor = *TILES.get(p[2])?;
        let inner_loop = if factor > 1 {
            s.split(&inner, factor).1
        } else {
            inner
        };
        match p[3] {
            0 => {}
            1 => s.unroll(&inner_loop),
            // The innermost k of ijk carries the reduction: no simd.
            _ if ikj => s.vectorize(&inner_loop),
            _ => return None,
        }
        Some(s)
    }
    fn reference(&self, a: &[f32], b: &[f32], out: &mut [f32]) {
        let mm = self.n;
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
}

/// reference-ir's large space: a tiled n x n x n matrix product.
pub struct Tiled(pub reference_ir::space::TiledMatmul);

impl Tiled {
    /// The product at `n` (a multiple of 32).
    pub fn new(n: usize) -> Tiled {
        Tiled(reference_ir::space::TiledMatmul::new(n).expect("a multiple of 32"))
    }
}

impl Problem for Tiled {
    fn name(&self) -> String {
        "tiled_matmul".to_string()
    }
    fn len(&self) -> usize {
        self.0.len()
    }
    fn build(&self) -> Built {
        let m = self.0.build();
        Built {
            code: m.code.clone(),
            loops: BTreeMap::new(),
            nodes: BTreeMap::new(),
            params: vec![(m.c.id(), Buf::Out), (m.a.id(), Buf::A), (m.b.id(), Buf::B)],
            tiled: Some(m),
        }
    }
    fn dims(&self) -> Vec<usize> {
        reference_ir::space::TiledMatmul::DIMS
            .iter()
            .map(|(_, c)| c.len())
            .collect()
    }
    fn schedule(&self, b: &Built, p: &[usize]) -> Option<Schedule> {
        self.0.schedule(b.tiled.as_ref()?, p)
    }
    fn reference(&self, a: &[f32], b: &[f32], out: &mut [f32]) {
        self.0.reference(a, b, out)
    }
}

/// A problem as a tuner workload for cc-backend.
pub struct RefWorkload<P> {
    pub problem: P,
    pub name: String,
    pub space: Space,
    pub options: Vec<String>,
    pub backend_identity: String,
    pub config: Config,
    pub a: Vec<f32>,
    pub b: Vec<f32>,
    pub expected: Vec<f32>,
    pub tolerance: f32,
    /// A deliberately broken renderer: a candidate whose schedule unrolls a loop gets a
    /// line that is not C in its last kernel, so it fails to compile alone.
    pub poison_unroll: bool,
    /// Another: a candidate whose schedule vectorizes a loop zero-fills with ones, so it
    /// compiles and runs but computes a wrong result.
    pub miscompute_vectorize: bool,
}

/// The compiler options every kernel gets (the demo's).
pub fn base_options() -> Vec<String> {
    vec!["-ffp-contract=off".to_string(), "-fopenmp-simd".to_string()]
}

/// The renderer's configuration.
pub fn config() -> Config {
    Config::new(reference_ir::render::reference_settings())
        .with(schedule_cache::TIMING_SETTING, "isolated")
}

/// Deterministic data in [-1, 1).
fn data(n: usize, seed: u64) -> Vec<f32> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0
        })
        .collect()
}

impl<P: Problem> RefWorkload<P> {
    pub fn new(problem: P, backend: &CcBackend, options: Vec<String>) -> RefWorkload<P> {
        let dims = problem.dims();
        let probe = problem.build();
        let space = Space::filtered(dims, |p| problem.schedule(&probe, p).is_some())
            .expect("a valid space");
        let len = problem.len();
        let (a, b) = (data(len, 1), data(len, 2));
        let mut expected = vec![0.0; len];
        problem.reference(&a, &b, &mut expected);
        RefWorkload {
            name: problem.name(),
            problem,
            space,
            options,
            backend_identity: backend.identity().to_string(),
            config: config(),
            a,
            b,
            expected,
            tolerance: 1e-4,
            poison_unroll: false,
            miscompute_vectorize: false,
        }
    }

    /// The schedule cache of this workload's regime over `dir`.
    pub fn schedules(
        &self,
        backend: &CcBackend,
        dir: &std::path::Path,
    ) -> ScheduleCache<ReferenceLanguage, DiskCache> {
        let timing = TimingIdentity::this_cpu(Some(backend.compiler_version().to_string()));
        ScheduleCache::new(ReferenceLanguage, "cc", timing, DiskCache::new(dir))
            .with_config(self.config.clone())
            .with_toolchain(Toolchain::new(backend.identity(), &self.options))
    }

    /// Stores `point`'s schedule of this workload's code in `dir` as the winner under its
    /// regime, unchecked (as a foreign or stale writer could), replacing what is there.
    pub fn store_point(&self, backend: &CcBackend, dir: &std::path::Path, point: &[usize]) {
        let schedules = self.schedules(backend, dir);
        let code = self.build();
        let ops = self.ops_at(&code, point).expect("a schedule at that point");
        let placements = self.placements(&code);
        let published = schedules
            .store_with_policy(
                Subject::new(&code).with_placements(&placements),
                &ops,
                Measurements::new(vec![1e-9]),
                StorePolicy::LastWriteWins,
            )
            .expect("stored");
        assert!(published.outcome.is_stored(), "{:?}", published.outcome);
    }
}

/// A candidate's kernels bound to their buffers.
pub struct Bound {
    kernels: Vec<(Kernel, Vec<Buf>)>,
    out: Vec<f32>,
}

impl<P: Problem> Workload<ReferenceLanguage, CcBackend> for RefWorkload<P> {
    type Code = Built;
    type Plan = Vec<Vec<Buf>>;
    type Bound = Bound;

    fn name(&self) -> &str {
        &self.name
    }

    fn space(&self) -> &Space {
        &self.space
    }

    fn build(&self) -> Built {
        self.problem.build()
    }

    fn placements(&self, code: &Built) -> BTreeMap<NodeId, Placement> {
        code.params
            .iter()
            .map(|(id, _)| (*id, Placement::OnDevice))
            .collect()
    }

    fn ops_at(&self, code: &Built, point: &[usize]) -> Option<Vec<RefOp>> {
        self.problem.schedule(code, point).map(|s| s.ops)
    }

    fn render(
        &self,
        code: &Built,
        ops: &[RefOp],
        first_kernel: usize,
    ) -> Result<Rendered<Source, Vec<Vec<Buf>>>, String> {
        let scheduled = apply_ops(ops, &code.code).map_err(|e| e.to_string())?;
        let mut kernels = Vec::new();
        let mut plan = Vec::new();
        let segs = segments(&scheduled);
        let last = segs.len().saturating_sub(1);
        let poison = self.poison_unroll && ops.iter().any(|o| matches!(o, RefOp::Unroll { .. }));
        for (index, segment) in segs.into_iter().enumerate() {
            let symbol = format!("{}__k{}", self.name, first_kernel + kernels.len());
            let params = signature_of(&segment, &[]);
            let rendered = render(&segment, &symbol, &params, Naming::Minted, &self.config)
                .map_err(|e| e.to_string())?;
            let bufs = params
                .iter()
                .map(|p| match p {
                    Param::Node(n) => code
                        .params
                        .iter()
                        .find(|(id, _)| *id == n.id())
                        .map(|(_, b)| *b)
                        .ok_or_else(|| format!("node {} is bound to no buffer", n.label())),
                    Param::Static(s) => Err(format!("static {s} has no argument")),
                })
                .collect::<Result<Vec<Buf>, String>>()?;
            let mut signature = Signature::new();
            for p in &rendered.params {
                signature = match &p.kind {
                    ParamKind::Buffer { writes, len, .. } => {
                        if *writes {
                            signature.buffer_mut(&p.name, Elem::F32, Extent::fixed(*len))
                        } else {
                            signature.buffer(&p.name, Elem::F32, Extent::fixed(*len))
                        }
                    }
                    ParamKind::Index { .. } => return Err("an index parameter".to_string()),
                };
            }
            let mut text = rendered.text.clone();
            if self.miscompute_vectorize && ops.iter().any(|o| matches!(o, RefOp::Vectorize { .. }))
            {
                text = text.replace("= 0.0f;", "= 1.0f;");
            }
            if poison && index == last {
                text = text.replacen('{', "{ this is not C;", 1);
            }
            let source = Source {
                prelude: rendered.prelude.clone(),
                text,
                signature,
            };
            let names = Names::new().with_bound(rendered.owned.iter().cloned());
            let key = source.key(&symbol, &names, &self.options, &self.backend_identity);
            kernels.push(BatchKernel {
                key,
                options: self.options.clone(),
                symbol,
                source,
            });
            plan.push(bufs);
        }
        let memo_tag = format!("n={} data=1,2 bindings={:?}", self.problem.len(), plan);
        Ok(Rendered {
            kernels,
            plan,
            memo_tag,
        })
    }

    fn bind(&self, plan: &Vec<Vec<Buf>>, kernels: &[Resolved<CcProgram>]) -> Result<Bound, String> {
        let kernels = kernels
            .iter()
            .zip(plan)
            .map(|(r, bufs)| {
                Kernel::from_resolved(r)
                    .map(|k| (k, bufs.clone()))
                    .map_err(|e| e.to_string())
            })
            .collect::<Result<Vec<_>, String>>()?;
        Ok(Bound {
            kernels,
            out: vec![0.0; self.problem.len()],
        })
    }

    fn run(&self, bound: &mut Bound) -> Result<(), String> {
        for (kernel, bufs) in &bound.kernels {
            let mut out = Some(&mut bound.out[..]);
            let mut args = Vec::with_capacity(bufs.len());
            for b in bufs {
                args.push(match b {
                    Buf::Out => Arg::F32Mut(out.take().ok_or("two outputs")?),
                    Buf::A => Arg::F32(&self.a),
                    Buf::B => Arg::F32(&self.b),
                });
            }
            kernel.call(&mut args).map_err(|e| e.to_string())?;
        }
        Ok(())
    }

    fn check(&self, bound: &mut Bound) -> Result<(), String> {
        bound.out.iter_mut().for_each(|o| *o = f32::NAN);
        self.run(bound)?;
        let error = bound
            .out
            .iter()
            .zip(&self.expected)
            .map(|(o, e)| {
                let d = (o - e).abs() / e.abs().max(1.0);
                if d.is_nan() { f32::INFINITY } else { d }
            })
            .fold(0.0f32, f32::max);
        if error <= self.tolerance {
            Ok(())
        } else {
            Err(format!("max relative error {error:.2e}"))
        }
    }

    fn describe(&self, point: &[usize]) -> String {
        format!("{point:?}")
    }
}

/// A kernel cache for a test.
pub fn kernel_cache() -> KernelCache<CcProgram> {
    KernelCache::new(256 << 20)
}
