//! Generated kernels of the backend's signature, for tests, benchmarks and demos:
//! [`realistic_kernel`] (fused stages like a tensor compiler emits) and
//! [`elementwise_kernel`] (one line).

use std::fmt::Write as _;

/// A small deterministic generator of constants (SplitMix64).
struct Constants(u64);

impl Constants {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A float constant in `[lo, hi)`, written as a C float literal.
    fn float(&mut self, lo: f64, hi: f64) -> String {
        let unit = (self.next() >> 11) as f64 / (1u64 << 53) as f64;
        format!("{:.6}f", lo + unit * (hi - lo))
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// A one-line kernel `out[i] = <expr>` of the backend's signature, where `expr` may use
/// `a[i]`, `b[i]` and `i`.
///
/// ```
/// let text = cc_backend::elementwise_kernel("add", "a[i] + b[i]");
/// assert!(text.contains("void add(float *out, const float *a, const float *b, int n)"));
/// ```
pub fn elementwise_kernel(name: &str, expr: &str) -> String {
    format!(
        "void {name}(float *out, const float *a, const float *b, int n) {{\n  \
         for (int i = 0; i < n; ++i) out[i] = {expr};\n}}\n"
    )
}

/// A kernel of the backend's signature shaped like what a tensor compiler emits for a
/// fused operator: three to five stages chosen by `seed` among a bias-GELU, a row
/// softmax, a row layer-norm, a short convolution with unrolled taps and a small tiled
/// matrix product, each with constants drawn from `seed`, all safe for any `n >= 0`
/// (every access stays below `n`). Equal `(name, seed)` give equal text; different
/// seeds give different kernels.
///
/// ```
/// let k = cc_backend::realistic_kernel("fused_7", 7);
/// assert!(k.starts_with("void fused_7(float *out, const float *a, const float *b, int n)"));
/// assert_ne!(k, cc_backend::realistic_kernel("fused_7", 8));
/// ```
pub fn realistic_kernel(name: &str, seed: u64) -> String {
    let mut c = Constants(seed ^ 0x6B63_6163_6865);
    let mut s = String::new();
    let _ = writeln!(
        s,
        "void {name}(float *out, const float *a, const float *b, int n) {{"
    );
    // Stage 0 always initialises `out` from the inputs.
    let (scale, shift) = (c.float(0.5, 1.5), c.float(-0.5, 0.5));
    let _ = writeln!(
        s,
        "  for (int i0 = 0; i0 < n; ++i0) {{\n    \
         float v0 = a[i0] * {scale} + b[i0] + {shift};\n    \
         out[i0] = 0.5f * v0 * (1.0f + tanhf(0.7978846f * (v0 + 0.044715f * v0 * v0 * v0)));\n  }}"
    );
    let stages = 2 + c.below(3);
    for stage in 1..=stages {
        match c.below(4) {
            0 => {
                let width = 8 << c.below(4);
                let temp = c.float(0.5, 2.0);
                let _ = writeln!(
                    s,
                    "  /* stage {stage}: row softmax, width {width} */\n  \
                     for (int r = 0; r + {width} <= n; r += {width}) {{\n    \
                     float m = out[r];\n    \
                     for (int j = 1; j < {width}; ++j) m = fmaxf(m, out[r + j]);\n    \
                     float sum = 0.0f;\n    \
                     for (int j = 0; j < {width}; ++j) {{ out[r + j] = expf((out[r + j] - m) * {temp}); sum += out[r + j]; }}\n    \
                     float inv = 1.0f / sum;\n    \
                     for (int j = 0; j < {width}; ++j) out[r + j] *= inv;\n  }}"
                );
            }
            1 => {
                let width = 16 << c.below(3);
                let (gamma, beta) = (c.float(0.8, 1.2), c.float(-0.1, 0.1));
                let _ = writeln!(
                    s,
                    "  /* stage {stage}: row layer-norm, width {width} */\n  \
                     for (int r = 0; r + {width} <= n; r += {width}) {{\n    \
                     float mean = 0.0f, var = 0.0f;\n    \
                     for (int j = 0; j < {width}; ++j) mean += out[r + j];\n    \
                     mean *= {inv:.8}f;\n    \
                     for (int j = 0; j < {width}; ++j) {{ float d = out[r + j] - mean; var += d * d; }}\n    \
                     float rstd = 1.0f / sqrtf(var * {inv:.8}f + 1e-5f);\n    \
                     for (int j = 0; j < {width}; ++j) out[r + j] = (out[r + j] - mean) * rstd * {gamma} + {beta} * b[r + j];\n  }}",
                    inv = 1.0 / f64::from(width)
                );
            }
            2 => {
                let taps = 3 + c.below(6);
                let _ = writeln!(
                    s,
                    "  /* stage {stage}: convolution, {taps} taps, plus residual */\n  {{\n    \
                     float prev[{taps}] = {{0}};\n    \
                     for (int i1 = 0; i1 < n; ++i1) {{"
                );
                let _ = write!(s, "      float acc = a[i1]");
                for t in 0..taps {
                    let w = c.float(-0.3, 0.3);
                    let _ = write!(s, " + {w} * prev[{t}]");
                }
                let _ = writeln!(s, ";");
                for t in (1..taps).rev() {
                    let _ = writeln!(s, "      prev[{t}] = prev[{}];", t - 1);
                }
                let _ = writeln!(
                    s,
                    "      prev[0] = out[i1];\n      out[i1] = acc + 0.25f * out[i1];\n    }}\n  }}"
                );
            }
            _ => {
                let dim = 4 << c.below(2);
                let alpha = c.float(0.05, 0.2);
                let _ = writeln!(
                    s,
                    "  /* stage {stage}: {dim}x{dim} tiled matrix product into the first tile */\n  \
                     if (n >= {sq}) {{\n    \
                     float tile[{sq}];\n    \
                     for (int i = 0; i < {dim}; ++i)\n      \
                     for (int j = 0; j < {dim}; ++j) {{\n        \
                     float acc = 0.0f;\n        \
                     for (int k = 0; k < {dim}; ++k) acc += out[i * {dim} + k] * b[k * {dim} + j];\n        \
                     tile[i * {dim} + j] = acc;\n      }}\n    \
                     for (int t = 0; t < {sq}; ++t) out[t] = out[t] + {alpha} * tile[t];\n  }}",
                    sq = dim * dim
                );
            }
        }
    }
    s.push_str("}\n");
    s
}
