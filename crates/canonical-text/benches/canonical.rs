//! Canonical key of a 1 MiB batch of realistic rendered C kernels, against plain SHA-256
//! of the same bytes: `canonical_key_1mib` (kernels of about 1 KiB declaring three bound
//! names, OCANNL style) and `canonical_key_bound200` (kernels of about 8 KiB declaring
//! about 200 names each, all passed as bound, as tinygrad's C renderer declares them);
//! `canonical_key_corpus`, the real kernel corpus (tinygrad, TVM, OCANNL) beside the
//! project; and `canonical_key_corpus_names`, the same corpus with each kernel's declared
//! names handed over inside the timed loop, as a backend keys it: through a `NameScope`
//! prepared once (`subject`), and, for comparison, through a whole `Names` built for each
//! kernel (`names_per_kernel`).
use std::hint::black_box;

#[path = "../tests/support/corpus.rs"]
mod corpus;

use canonical_text::{NameScope, Names, canonical_kernel};
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

/// A kernel shaped like tinygrad's C renderer output: its parameters, loop variables and
/// about 200 `val#`, `alu#` and `cast#` locals, every one of them declared (bound).
fn tinygrad_kernel(k: usize) -> (String, String, Names) {
    let name = format!("r_{}_16_4", k % 13);
    let mut bound = vec![
        "data0_1024".to_string(),
        "data1_1024".to_string(),
        "data2_1024".to_string(),
        "Lidx0".to_string(),
        "Ridx1".to_string(),
    ];
    let mut text = format!(
        "void {name}(float* restrict data0_1024, const float* restrict data1_1024, const float* restrict data2_1024) {{\n\
         \x20 for (int Lidx0 = 0; Lidx0 < 16; Lidx0++) {{\n\
         \x20   for (int Ridx1 = 0; Ridx1 < 4; Ridx1++) {{\n"
    );
    for v in 0..50 {
        text.push_str(&format!(
            "      float val{v} = (*(data{}_1024+((Lidx0*64)+(Ridx1*16)+{})));\n",
            1 + v % 2,
            (v * 7 + k) % 16
        ));
        bound.push(format!("val{v}"));
    }
    for a in 0..100 {
        let (x, y) = if a < 25 {
            (format!("val{}", 2 * a), format!("val{}", 2 * a + 1))
        } else {
            (format!("alu{}", a - 25), format!("alu{}", a - 1))
        };
        let op = ["+", "*", "-"][a % 3];
        text.push_str(&format!("      float alu{a} = ({x}{op}{y});\n"));
        bound.push(format!("alu{a}"));
    }
    for c in 0..48 {
        text.push_str(&format!("      int cast{c} = ((int)(alu{}));\n", 52 + c));
        bound.push(format!("cast{c}"));
    }
    text.push_str(
        "      *(data0_1024+((Lidx0*4)+Ridx1)) = (alu99+((float)(cast47)));\n    }\n  }\n}\n",
    );
    (text, name, Names::new().with_bound(bound))
}

/// The bound-name load of real renderers: ~1 MiB of kernels with ~200 bound names each.
fn bench_bound200(c: &mut Criterion) {
    let mut batch = Vec::new();
    let mut total = 0;
    while total < 1 << 20 {
        let kn = tinygrad_kernel(batch.len());
        total += kn.0.len();
        batch.push(kn);
    }
    let bytes: usize = batch.iter().map(|(t, _, _)| t.len()).sum();
    // What the figure claims: about 200 names renamed per kernel, nothing refused.
    let (t, n, ns) = &batch[0];
    let first = canonical_kernel(t, Some(n), ns);
    assert!(first.refusals().is_empty() && first.renamed_count() >= 200);
    let mut g = c.benchmark_group("canonical_key_bound200");
    g.throughput(Throughput::Bytes(bytes as u64));
    g.bench_function("subject", |bch| {
        bch.iter(|| {
            for (text, name, names) in &batch {
                let canon = canonical_kernel(black_box(text), Some(name), names);
                black_box(canon.key(&[b"-O3"]));
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

/// The real corpus (`../shared/corpus`: tinygrad's C renderer with its declared names
/// bound, TVM, OCANNL with its node arrays bound), each kernel keyed on its own, against
/// SHA-256 of the same bytes. Without the corpus the group says so and measures nothing
/// (and `cargo xtask bench` then fails naming the figure).
fn bench_corpus(c: &mut Criterion) {
    let Some(dir) = corpus::dir() else {
        eprintln!("canonical_key_corpus: SKIPPED, the kernel corpus is not at ../shared/corpus");
        return;
    };
    let ks = corpus::load(&dir);
    let bytes: usize = ks.iter().map(|k| k.text.len()).sum();
    let mut g = c.benchmark_group("canonical_key_corpus");
    g.throughput(Throughput::Bytes(bytes as u64));
    g.bench_function("subject", |bch| {
        bch.iter(|| {
            for k in &ks {
                let canon = canonical_kernel(black_box(&k.text), k.name.as_deref(), &k.names);
                black_box(canon.key(&[b"-O3"]));
            }
        })
    });
    g.bench_function("baseline", |bch| {
        bch.iter(|| {
            let mut h = Sha256::new();
            for k in &ks {
                h.update(black_box(k.text.as_bytes()));
            }
            black_box(h.finalize())
        })
    });
    g.finish();
}

/// The real corpus as a backend keys it: for each kernel, the names its renderer declared
/// (tinygrad's `params`, `locals` and `ranges`; OCANNL's node arrays; none for TVM) handed
/// over inside the timed loop, then its key; against SHA-256 of the same bytes.
/// Without the corpus the group says so and measures nothing.
fn bench_corpus_names(c: &mut Criterion) {
    let Some(dir) = corpus::dir() else {
        eprintln!(
            "canonical_key_corpus_names: SKIPPED, the kernel corpus is not at ../shared/corpus"
        );
        return;
    };
    // Each kernel with its declared names as the renderer holds them: plain strings.
    let ks: Vec<(String, Option<String>, Vec<String>)> = corpus::load(&dir)
        .into_iter()
        .map(|k| (k.text, k.name, k.names.bound.into_iter().collect()))
        .collect();
    let bytes: usize = ks.iter().map(|(t, _, _)| t.len()).sum();
    let mut g = c.benchmark_group("canonical_key_corpus_names");
    g.throughput(Throughput::Bytes(bytes as u64));
    // The renderers' shared names (here the default ones), prepared once.
    let scope = NameScope::new(Names::new());
    g.bench_function("subject", |bch| {
        bch.iter(|| {
            for (text, name, declared) in &ks {
                let canon = scope.canonical_kernel(black_box(text), name.as_deref(), declared);
                black_box(canon.key(&[b"-O3"]));
            }
        })
    });
    // The same through a whole `Names` built for each kernel.
    g.bench_function("names_per_kernel", |bch| {
        bch.iter(|| {
            for (text, name, declared) in &ks {
                let names = Names::new().with_bound(declared.iter().map(String::as_str));
                let canon = canonical_kernel(black_box(text), name.as_deref(), &names);
                black_box(canon.key(&[b"-O3"]));
            }
        })
    });
    g.bench_function("baseline", |bch| {
        bch.iter(|| {
            let mut h = Sha256::new();
            for (text, _, _) in &ks {
                h.update(black_box(text.as_bytes()));
            }
            black_box(h.finalize())
        })
    });
    g.finish();
}

criterion_group!(
    benches,
    bench,
    bench_bound200,
    bench_corpus,
    bench_corpus_names
);
criterion_main!(benches);
