//! Canonical key of a 1 MiB batch of realistic rendered C kernels, against plain SHA-256
//! of the same bytes.
use std::hint::black_box;

use canonical_text::{Names, canonical_kernel};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use sha2::{Digest, Sha256};

/// One kernel as a tensor compiler renders it, with ids drawn from `seed`.
fn kernel(k: usize, seed: usize) -> (String, String, Names) {
    let (a, b, c, d) = (seed, seed + 1, seed + 2, seed + 3);
    let (n0, n1, n2) = (100 + seed, 101 + seed, 102 + seed);
    let name = format!("layer{}__seg{}", k % 7, k % 5);
    let params = [
        format!("n{n0}_weights"),
        format!("n{n1}_x"),
        format!("n{n2}_out"),
    ];
    let [w, x, o] = &params;
    let text = format!(
        "/* kernel {k}: tiled matmul with bias and relu over {w} */\n\
         #define TILE 64\n\
         void {name}(const float *restrict {w}, const float *restrict {x}, float *restrict {o}, int n_{k}) {{\n\
         \x20 #pragma GCC ivdep\n\
         \x20 for (int i{a} = 0; i{a} < 64; ++i{a}) {{\n\
         \x20   float v{a}_acc = 0.0f;\n\
         \x20   float v{b}_scale = 1.0f / (float)n_{k};\n\
         \x20   for (int i{b} = 0; i{b} < 128; ++i{b}) {{\n\
         \x20     v{a}_acc += {w}[i{a} * 128 + i{b}] * {x}[i{b}];\n\
         \x20     v{a}_acc = v{a}_acc * 0.999f + 1.0e-6f;\n\
         \x20   }}\n\
         \x20   for (int i{c} = 0; i{c} < TILE; i{c} += 4) {{\n\
         \x20     float v{c}_t = {x}[(i{c} + i{a}) % 128] * v{b}_scale;\n\
         \x20     {o}[i{a} * TILE + i{c}] = v{c}_t > 0.0f ? v{c}_t : 0.0f; // relu\n\
         \x20     {o}[i{a} * TILE + i{c} + 1] = fmaxf(v{c}_t, -1.5f) - (v{a}_acc / 2.0f);\n\
         \x20   }}\n\
         \x20   for (int i{d} = 0; i{d} < 16; ++i{d}) {{\n\
         \x20     {o}[i{d}] += (i{d} & 1) ? {w}[i{d} << 2] : -{w}[(i{d} >> 1) + 3];\n\
         \x20   }}\n\
         \x20   {o}[i{a}] = sqrtf(v{a}_acc * v{a}_acc + 1e-5f);\n\
         \x20 }}\n\
         }}\n"
    );
    let names = Names::new()
        .with_bound(params)
        .with_free([format!("n_{k}")]);
    (text, name, names)
}

/// About 1 MiB of kernels.
fn batch() -> Vec<(String, String, Names)> {
    let mut out = Vec::new();
    let mut total = 0;
    let mut k = 0;
    while total < 1 << 20 {
        let kn = kernel(k, 10 + 7 * k);
        total += kn.0.len();
        out.push(kn);
        k += 1;
    }
    out
}

fn bench(c: &mut Criterion) {
    let batch = batch();
    let bytes: usize = batch.iter().map(|(t, _, _)| t.len()).sum();
    let mut g = c.benchmark_group("canonical_key_1mib");
    g.throughput(Throughput::Bytes(bytes as u64));
    g.bench_function("subject", |bch| {
        bch.iter(|| {
            for (text, name, names) in &batch {
                let canon = canonical_kernel(black_box(text), Some(name), names);
                black_box(canon.key(&[b"-O3"]));
            }
        })
    });
    // The subject's two halves, to tell where its time goes (`cargo xtask bench` reports
    // only subject / baseline).
    g.bench_function("canonical_kernel_only", |bch| {
        bch.iter(|| {
            for (text, name, names) in &batch {
                let canon = canonical_kernel(black_box(text), Some(name), names);
                black_box(canon.encoding().len());
            }
        })
    });
    let canons: Vec<_> = batch
        .iter()
        .map(|(t, n, ns)| canonical_kernel(t, Some(n), ns))
        .collect();
    g.bench_function("key_only", |bch| {
        bch.iter(|| {
            for c in &canons {
                black_box(c.key(&[b"-O3"]));
            }
        })
    });
    g.bench_function("baseline", |bch| {
        bch.iter(|| {
            let mut h = Sha256::new();
            for (text, _, _) in &batch {
                h.update(black_box(text.as_bytes()));
            }
            black_box(h.finalize())
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
