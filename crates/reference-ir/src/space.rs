//! A schedule space with real spread: a tiled matrix product ([`TiledMatmul`]) whose
//! 2,000 legal schedules (tiles x loop orders x unroll x vectorize) differ several-fold in
//! time, so that a search has something to find and a seed something to save.
//!
//! A point is one choice per dimension of [`TiledMatmul::DIMS`]: a tile for each of the
//! loops `i`, `j` and `k` of `c[i,j] += a[i,k] * b[k,j]` (1 is no split), the order of the
//! three point loops (the tile loops stay outside, in `i j k` order), and what is done
//! with the innermost loop (serial, unrolled, vectorized). Vectorizing an innermost `k`
//! (the reduction) is not legal: those 250 points are left out of
//! [`TiledMatmul::points`], which lists the other 2,000 in odometer order.
//!
//! The tiles divide every size of [`TiledMatmul::SIZES`] (multiples of 32), so a schedule
//! found at one size replays at another (a *size change*: the same loop nest over other
//! extents).
//!
//! ```
//! use reference_ir::space::TiledMatmul;
//!
//! let mm = TiledMatmul::new(TiledMatmul::DEFAULT_SIZE).expect("a multiple of 32");
//! let points = mm.points();
//! assert_eq!(points.len(), 2000);
//! let built = mm.build();
//! // tile_i=8 tile_j=32 tile_k=1 order=ikj inner=simd: two splits, the reorders, a vectorize.
//! let point = [2, 4, 0, 1, 2];
//! assert!(points.contains(&point.to_vec()));
//! let schedule = mm.schedule(&built, &point).expect("a legal point");
//! let code = schedule.apply(&built.code)?;
//! // Zero fill (2 loops), then i.o j.o | i.i k j.i, the innermost vectorized.
//! let loops = code.loops();
//! assert_eq!(loops.len(), 2 + 5);
//! assert_eq!(loops[6].to, 32);
//! assert_eq!(loops[6].kind, reference_ir::ir::LoopKind::Vectorized);
//! // Vectorizing the reduction (k innermost) is not a point of the space.
//! assert!(mm.schedule(&built, &[0, 0, 0, 0, 2]).is_none());
//! # Ok::<(), schedule_cache::Error>(())
//! ```

use crate::ir::{BinOp, Code, Expr, Index, Precision, Stmt, Symbol, TensorNode};
use crate::schedule::Schedule;

/// One dimension of a space: its name and its choices (choice 0 is "do nothing").
pub type Dim = (&'static str, &'static [&'static str]);

/// The tiles of each loop (1: not split).
const TILES: &[&str] = &["1", "4", "8", "16", "32"];

/// The orders of the point loops, outermost first, as indices into `[i, j, k]`.
const ORDERS: [[usize; 3]; 6] = [
    [0, 1, 2],
    [0, 2, 1],
    [1, 0, 2],
    [1, 2, 0],
    [2, 0, 1],
    [2, 1, 0],
];

/// A tiled `n x n x n` matrix product `c = a * b` (row-major `f32`), zero-filled then
/// accumulated, and its schedule space (see the module doc).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TiledMatmul {
    n: usize,
}

/// One freshly built copy of a [`TiledMatmul`]'s code (fresh symbol and node ids), with
/// handles on its loops and nodes.
#[derive(Clone, Debug)]
pub struct MatmulCode {
    /// Two top-level loop nests: the zero fill of `c`, then the accumulation.
    pub code: Code,
    /// The output, `n x n`, set by both nests.
    pub c: TensorNode,
    /// The left operand, `n x n`, read only.
    pub a: TensorNode,
    /// The right operand, `n x n`, read only.
    pub b: TensorNode,
    /// The accumulation's loops `i`, `j` and `k`, outermost first (`i` binds rows of `c`
    /// and `a`, `j` columns of `c` and `b`, `k` the reduction).
    pub loops: [Symbol; 3],
    /// The zero fill's loops (rows, then columns of `c`).
    pub fill: [Symbol; 2],
}

impl MatmulCode {
    /// The plain (unscheduled) `n x n x n` product at any size `n`, built afresh (fresh
    /// symbol and node ids on every call, as a compiler lowering anew); the labels are
    /// always the same (`i`, `j`, `k`; `c`, `a`, `b`), so two builds at one size have
    /// one identity. [`TiledMatmul`] sizes are multiples of 32; other callers (tests, the
    /// demo) build any size.
    pub fn new(n: usize) -> MatmulCode {
        let m = n as i64;
        let (i0, j0) = (Symbol::fresh("i"), Symbol::fresh("j"));
        let (i, j, k) = (Symbol::fresh("i"), Symbol::fresh("j"), Symbol::fresh("k"));
        let f32n = |label: &str| TensorNode::new(label, &[n, n], Precision::F32);
        let (c, a, b) = (f32n("c"), f32n("a"), f32n("b"));
        let ix = Index::var;
        let init = Stmt::for_(
            &i0,
            0,
            m,
            vec![Stmt::for_(
                &j0,
                0,
                m,
                vec![Stmt::set(&c, vec![ix(&i0), ix(&j0)], Expr::Const(0.0))],
            )],
        );
        let update = Stmt::set(
            &c,
            vec![ix(&i), ix(&j)],
            Expr::bin(
                BinOp::Add,
                Expr::get(&c, vec![ix(&i), ix(&j)]),
                Expr::bin(
                    BinOp::Mul,
                    Expr::get(&a, vec![ix(&i), ix(&k)]),
                    Expr::get(&b, vec![ix(&k), ix(&j)]),
                ),
            ),
        );
        let nest = Stmt::for_(
            &i,
            0,
            m,
            vec![Stmt::for_(
                &j,
                0,
                m,
                vec![Stmt::for_(&k, 0, m, vec![update])],
            )],
        );
        MatmulCode {
            code: Code::new(vec![init, nest]),
            c,
            a,
            b,
            loops: [i, j, k],
            fill: [i0, j0],
        }
    }
}

impl TiledMatmul {
    /// The space's dimensions: `tile_i`, `tile_j`, `tile_k`, `order` (of the point loops),
    /// `inner` (what is done with the innermost loop).
    pub const DIMS: &'static [Dim] = &[
        ("tile_i", TILES),
        ("tile_j", TILES),
        ("tile_k", TILES),
        ("order", &["ijk", "ikj", "jik", "jki", "kij", "kji"]),
        ("inner", &["serial", "unroll", "simd"]),
    ];

    /// The size the space was sized for: a measurement is about a millisecond unscheduled
    /// and the best point several times faster.
    pub const DEFAULT_SIZE: usize = 128;

    /// Sizes for a size change (every tile divides them), the default among them.
    pub const SIZES: &'static [usize] = &[64, 96, 128, 160, 192];

    /// The product at size `n`, or `None` unless `n` is a positive multiple of 32 of at
    /// most 1024 (so every tile divides it and the indices fit in 32 bits).
    pub fn new(n: usize) -> Option<TiledMatmul> {
        (n > 0 && n.is_multiple_of(32) && n <= 1024).then_some(TiledMatmul { n })
    }

    /// The size `n`.
    pub fn n(&self) -> usize {
        self.n
    }

    /// Elements of each of `c`, `a` and `b` (`n * n`).
    pub fn len(&self) -> usize {
        self.n * self.n
    }

    /// Always false (kept for the `len` convention).
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The code, built afresh (fresh ids on every call, as a compiler lowering anew):
    /// [`MatmulCode::new`] at this size.
    pub fn build(&self) -> MatmulCode {
        MatmulCode::new(self.n)
    }

    /// The schedule of `point` (one choice index per dimension of [`Self::DIMS`]) on
    /// `built`, or `None` where the point is not legal (a choice out of range, or an
    /// innermost `k` vectorized). Every legal point's schedule applies to freshly built
    /// code.
    pub fn schedule(&self, built: &MatmulCode, point: &[usize]) -> Option<Schedule> {
        if point.len() != Self::DIMS.len()
            || point
                .iter()
                .zip(Self::DIMS)
                .any(|(&c, (_, ch))| c >= ch.len())
        {
            return None;
        }
        let order = ORDERS[point[3]];
        let inner = point[4];
        if inner == 2 && order[2] == 2 {
            return None;
        }
        let mut s = Schedule::new();
        // Split each tiled loop: the nest becomes i.o i.i j.o j.i k.o k.i (an untiled loop
        // is its own point loop).
        let mut nest = Vec::new();
        let mut tile_loops = Vec::new();
        let mut point_loops = Vec::new();
        for (d, var) in built.loops.iter().enumerate() {
            let tile: i64 = TILES[point[d]].parse().ok()?;
            let point_loop = if tile > 1 {
                let (outer, inner) = s.split(var, tile);
                nest.push(outer.clone());
                tile_loops.push(outer);
                inner
            } else {
                var.clone()
            };
            nest.push(point_loop.clone());
            point_loops.push(point_loop);
        }
        // The target: the tile loops in i j k order, then the point loops in `order`.
        let mut target = tile_loops.clone();
        target.extend(order.iter().map(|&d| point_loops[d].clone()));
        // Adjacent interchanges (a bubble sort) bring the nest to the target order.
        for (at, want) in target.iter().enumerate() {
            let from = nest.iter().position(|v| v == want)?;
            for q in (at + 1..=from).rev() {
                s.reorder(&nest[q - 1], &nest[q]);
                nest.swap(q - 1, q);
            }
        }
        let innermost = nest.last()?.clone();
        match inner {
            0 => {}
            1 => s.unroll(&innermost),
            _ => s.vectorize(&innermost),
        }
        Some(s)
    }

    /// Every legal point, in odometer order (the first dimension varies fastest).
    pub fn points(&self) -> Vec<Vec<usize>> {
        let built = self.build();
        let mut out = Vec::new();
        let mut point = vec![0; Self::DIMS.len()];
        loop {
            if self.schedule(&built, &point).is_some() {
                out.push(point.clone());
            }
            let mut d = 0;
            while d < point.len() {
                point[d] += 1;
                if point[d] < Self::DIMS[d].1.len() {
                    break;
                }
                point[d] = 0;
                d += 1;
            }
            if d == point.len() {
                return out;
            }
        }
    }

    /// A point in words: `tile_i=8 tile_j=32 tile_k=1 order=ikj inner=simd`.
    pub fn label(point: &[usize]) -> String {
        Self::DIMS
            .iter()
            .zip(point)
            .map(|((name, choices), &c)| {
                format!("{name}={}", choices.get(c).copied().unwrap_or("?"))
            })
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// The expected `c` of `a * b` (each of [`Self::len`] elements, row-major), summed in
    /// `k` order as every schedule's C does within rounding.
    pub fn reference(&self, a: &[f32], b: &[f32], c: &mut [f32]) {
        let n = self.n;
        for i in 0..n {
            for j in 0..n {
                let mut acc = 0.0f32;
                for k in 0..n {
                    acc += a[i * n + k] * b[k * n + j];
                }
                c[i * n + j] = acc;
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::ir::LoopKind;

    #[test]
    fn two_thousand_legal_points_each_applying_to_fresh_code() {
        let mm = TiledMatmul::new(64).unwrap();
        let points = mm.points();
        assert_eq!(points.len(), 2000);
        for p in &points {
            let built = mm.build();
            let s = mm.schedule(&built, p).unwrap();
            let code = s
                .apply(&built.code)
                .unwrap_or_else(|e| panic!("{}: {e}", TiledMatmul::label(p)));
            // The accumulation nest: tile loops first, then the point loops in order.
            let loops = code.loops();
            let nest: Vec<_> = loops.iter().skip(2).collect();
            let tiled = p[..3].iter().filter(|&&c| c != 0).count();
            assert_eq!(nest.len(), 3 + tiled);
            let last = nest.last().unwrap();
            assert!(last.innermost);
            let kind = [LoopKind::Serial, LoopKind::Unrolled, LoopKind::Vectorized][p[4]];
            assert_eq!(last.kind, kind, "{}", TiledMatmul::label(p));
            // The innermost loop runs the tile of the dimension the order puts last.
            let d = ORDERS[p[3]][2];
            let extent: i64 = match TILES[p[d]] {
                "1" => 64,
                t => t.parse().unwrap(),
            };
            assert_eq!(last.to - last.from, extent, "{}", TiledMatmul::label(p));
        }
    }

    #[test]
    fn vectorizing_the_reduction_and_out_of_range_choices_are_refused() {
        let mm = TiledMatmul::new(128).unwrap();
        let built = mm.build();
        assert!(mm.schedule(&built, &[0, 0, 0, 0, 2]).is_none(), "ijk simd");
        assert!(mm.schedule(&built, &[0, 0, 0, 1, 2]).is_some(), "ikj simd");
        assert!(mm.schedule(&built, &[5, 0, 0, 0, 0]).is_none());
        assert!(mm.schedule(&built, &[0, 0, 0, 0]).is_none());
        assert!(
            mm.schedule(&built, &[0, 0, 0, 0, 0])
                .unwrap()
                .ops
                .is_empty()
        );
        assert!(TiledMatmul::new(100).is_none());
        assert!(TiledMatmul::new(0).is_none());
        for &n in TiledMatmul::SIZES {
            assert_eq!(TiledMatmul::new(n).unwrap().points().len(), 2000);
        }
    }
}
