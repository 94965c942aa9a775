//! Generated kernel texts of cc-backend's `Signature::out_a_b_n`,
//! `void name(float *out, const float *a, const float *b, int n)`, for tests and
//! benchmarks:
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

/// A one-line kernel `out[i] = <expr>` of cc-backend's `Signature::out_a_b_n`, where `expr` may use
/// `a[i]`, `b[i]` and `i`.
///
/// ```
/// let text = test_support::kernels::elementwise_kernel("add", "a[i] + b[i]");
/// assert!(text.contains("void add(float *out, const float *a, const float *b, int n)"));
/// ```
pub fn elementwise_kernel(name: &str, expr: &str) -> String {
    format!(
        "void {name}(float *out, const float *a, const float *b, int n) {{\n  \
         for (int i = 0; i < n; ++i) out[i] = {expr};\n}}\n"
    )
}

/// A kernel of cc-backend's `Signature::out_a_b_n` shaped like what a tensor compiler emits for a
/// fused operator: two to four stages chosen by `seed` among a bias-GELU, a row
/// softmax, a row layer-norm, a short convolution with unrolled taps and a small tiled
/// matrix product, each with constants drawn from `seed`, all safe for any `n >= 0`
/// (every access stays below `n`). Equal `(name, seed)` give equal text; different
/// seeds give different kernels.
///
/// ```
/// let k = test_support::kernels::realistic_kernel("fused_7", 7);
/// assert!(k.starts_with("void fused_7(float *out, const float *a, const float *b, int n)"));
/// assert_ne!(k, test_support::kernels::realistic_kernel("fused_7", 8));
/// ```
pub fn realistic_kernel(name: &str, seed: u64) -> String {
    realistic_kernel_numbered(name, seed, 0)
}

/// [`realistic_kernel`] with its loop symbols (`i<digits>`) and scope-locals
/// (`v<digits>_<label>`) numbered from `first_symbol`, as a renderer numbering them
/// from a process-wide counter would: kernels of equal `seed` and different
/// `first_symbol` (or different segment indices in `name`) are the same kernel up to
/// the names it owns, and compute the same results.
///
/// ```
/// let a = test_support::kernels::realistic_kernel_numbered("step__seg1", 3, 0);
/// let b = test_support::kernels::realistic_kernel_numbered("step__seg4", 3, 40);
/// assert!(a.contains("i0") && b.contains("i40") && !b.contains("i0 "));
/// ```
pub fn realistic_kernel_numbered(name: &str, seed: u64, first_symbol: u64) -> String {
    let mut c = Constants(seed ^ 0x6B63_6163_6865);
    let mut next = first_symbol;
    let mut fresh = || {
        next += 1;
        next - 1
    };
    let mut s = String::new();
    let _ = writeln!(
        s,
        "void {name}(float *out, const float *a, const float *b, int n) {{"
    );
    // Stage 0 always initialises `out` from the inputs.
    let (scale, shift) = (c.float(0.5, 1.5), c.float(-0.5, 0.5));
    let (i, v) = (fresh(), fresh());
    let _ = writeln!(
        s,
        "  for (int i{i} = 0; i{i} < n; ++i{i}) {{\n    \
         float v{v}_x = a[i{i}] * {scale} + b[i{i}] + {shift};\n    \
         out[i{i}] = 0.5f * v{v}_x * (1.0f + tanhf(0.7978846f * (v{v}_x + 0.044715f * v{v}_x * v{v}_x * v{v}_x)));\n  }}"
    );
    let stages = 1 + c.below(3);
    for stage in 1..=stages {
        match c.below(4) {
            0 => {
                let width = 8 << c.below(4);
                let temp = c.float(0.5, 2.0);
                let (r, j, m) = (fresh(), fresh(), fresh());
                let _ = writeln!(
                    s,
                    "  /* stage {stage}: row softmax, width {width} */\n  \
                     for (int i{r} = 0; i{r} + {width} <= n; i{r} += {width}) {{\n    \
                     float v{m}_max = out[i{r}];\n    \
                     for (int i{j} = 1; i{j} < {width}; ++i{j}) v{m}_max = fmaxf(v{m}_max, out[i{r} + i{j}]);\n    \
                     float v{m}_sum = 0.0f;\n    \
                     for (int i{j} = 0; i{j} < {width}; ++i{j}) {{ out[i{r} + i{j}] = expf((out[i{r} + i{j}] - v{m}_max) * {temp}); v{m}_sum += out[i{r} + i{j}]; }}\n    \
                     float v{m}_inv = 1.0f / v{m}_sum;\n    \
                     for (int i{j} = 0; i{j} < {width}; ++i{j}) out[i{r} + i{j}] *= v{m}_inv;\n  }}"
                );
            }
            1 => {
                let width = 16 << c.below(3);
                let (gamma, beta) = (c.float(0.8, 1.2), c.float(-0.1, 0.1));
                let (r, j, m) = (fresh(), fresh(), fresh());
                let _ = writeln!(
                    s,
                    "  /* stage {stage}: row layer-norm, width {width} */\n  \
                     for (int i{r} = 0; i{r} + {width} <= n; i{r} += {width}) {{\n    \
                     float v{m}_mean = 0.0f, v{m}_var = 0.0f;\n    \
                     for (int i{j} = 0; i{j} < {width}; ++i{j}) v{m}_mean += out[i{r} + i{j}];\n    \
                     v{m}_mean *= {inv:.8}f;\n    \
                     for (int i{j} = 0; i{j} < {width}; ++i{j}) {{ float v{m}_d = out[i{r} + i{j}] - v{m}_mean; v{m}_var += v{m}_d * v{m}_d; }}\n    \
                     float v{m}_rstd = 1.0f / sqrtf(v{m}_var * {inv:.8}f + 1e-5f);\n    \
                     for (int i{j} = 0; i{j} < {width}; ++i{j}) out[i{r} + i{j}] = (out[i{r} + i{j}] - v{m}_mean) * v{m}_rstd * {gamma} + {beta} * b[i{r} + i{j}];\n  }}",
                    inv = 1.0 / f64::from(width)
                );
            }
            2 => {
                let taps = 3 + c.below(6);
                let (i, m) = (fresh(), fresh());
                let _ = writeln!(
                    s,
                    "  /* stage {stage}: convolution, {taps} taps, plus residual */\n  {{\n    \
                     float v{m}_prev[{taps}] = {{0}};\n    \
                     for (int i{i} = 0; i{i} < n; ++i{i}) {{"
                );
                let _ = write!(s, "      float v{m}_acc = a[i{i}]");
                for t in 0..taps {
                    let w = c.float(-0.3, 0.3);
                    let _ = write!(s, " + {w} * v{m}_prev[{t}]");
                }
                let _ = writeln!(s, ";");
                for t in (1..taps).rev() {
                    let _ = writeln!(s, "      v{m}_prev[{t}] = v{m}_prev[{}];", t - 1);
                }
                let _ = writeln!(
                    s,
                    "      v{m}_prev[0] = out[i{i}];\n      out[i{i}] = v{m}_acc + 0.25f * out[i{i}];\n    }}\n  }}"
                );
            }
            _ => {
                let dim = 4 << c.below(2);
                let alpha = c.float(0.05, 0.2);
                let (i, j, k, m) = (fresh(), fresh(), fresh(), fresh());
                let _ = writeln!(
                    s,
                    "  /* stage {stage}: {dim}x{dim} tiled matrix product into the first tile */\n  \
                     if (n >= {sq}) {{\n    \
                     float v{m}_tile[{sq}];\n    \
                     for (int i{i} = 0; i{i} < {dim}; ++i{i})\n      \
                     for (int i{j} = 0; i{j} < {dim}; ++i{j}) {{\n        \
                     float v{m}_acc = 0.0f;\n        \
                     for (int i{k} = 0; i{k} < {dim}; ++i{k}) v{m}_acc += out[i{i} * {dim} + i{k}] * b[i{k} * {dim} + i{j}];\n        \
                     v{m}_tile[i{i} * {dim} + i{j}] = v{m}_acc;\n      }}\n    \
                     for (int i{i} = 0; i{i} < {sq}; ++i{i}) out[i{i}] = out[i{i}] + {alpha} * v{m}_tile[i{i}];\n  }}",
                    sq = dim * dim
                );
            }
        }
    }
    s.push_str("}\n");
    s
}
