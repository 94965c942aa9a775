//! The reference C renderer: rendered code (original and scheduled) compiles with the system C
//! compiler, and a schedule replayed on a renamed twin renders to the same C up to the names
//! the kernel owns (checked with canonical-text).
#![allow(clippy::unwrap_used)]

mod common;

use canonical_text::{Names, canonical_kernel};
use reference_ir::ir::{Code, Symbol};
use reference_ir::render::{Naming, Rendered, render, signature_of};
use reference_ir::schedule::{ReferenceLanguage, apply_ops};
use schedule_cache::{Config, Registry, canonicalize, digest_completeness, of_saved, to_saved};
use std::process::Command;

/// Renders `code` as `kern` with the default signature and stable names.
fn render_c(code: &Code, statics: &[Symbol], config: &Config) -> Rendered {
    render(
        code,
        "kern",
        &signature_of(code, statics),
        Naming::Stable,
        config,
    )
    .unwrap()
}

fn compiles(dir: &std::path::Path, name: &str, text: &str) -> Result<(), String> {
    let path = dir.join(format!("{name}.c"));
    std::fs::write(&path, text).unwrap();
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".to_owned());
    let out = Command::new(cc)
        .args([
            "-std=c11",
            "-fsyntax-only",
            "-Werror=implicit-function-declaration",
        ])
        .arg(&path)
        .output()
        .map_err(|e| format!("cannot run cc: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{}\n---\n{text}",
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

#[test]
fn rendered_code_compiles_before_and_after_scheduling() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = Config::new(reference_ir::render::reference_settings()).with("large_models", "true");
    // Bounded: each compile is a real `cc` run.
    for seed in 0..12u64 {
        let b = common::build(&common::gen_shape(seed), 0);
        let (_, done) = common::gen_schedule(&b.code, seed ^ 0x55, 6);
        for (tag, code) in [("orig", &b.code), ("sched", &done)] {
            let text = digest_completeness(&cfg, |c| render_c(code, &b.statics, c).file())
                .expect("the renderer consults only declared settings");
            compiles(dir.path(), &format!("s{seed}_{tag}"), &text).unwrap();
        }
    }
}

#[test]
fn a_replayed_schedule_renders_the_same_kernel_up_to_owned_names() {
    let cfg = Config::new(reference_ir::render::reference_settings());
    for seed in 0..40u64 {
        let shape = common::gen_shape(seed);
        let a = common::build(&shape, 1);
        let ia = canonicalize(&a.code, &a.static_ids(), &a.placements, true);
        let (sched, done_a) = common::gen_schedule(&a.code, seed.wrapping_mul(7), 6);
        let (saved, _) = to_saved(&ReferenceLanguage, &Registry::new(&ia), &sched.ops).unwrap();
        let b = common::build(&shape, 2);
        let ib = canonicalize(&b.code, &b.static_ids(), &b.placements, true);
        let (ops, _) = of_saved(&ReferenceLanguage, &saved, &ib).unwrap();
        let done_b = apply_ops(&ops, &b.code).unwrap();
        let (ra, rb) = (
            render_c(&done_a, &a.statics, &cfg),
            render_c(&done_b, &b.statics, &cfg),
        );
        let (ta, tb) = (ra.file(), rb.file());
        assert_ne!(ta, tb, "builds must differ in names");
        let names = |r: &Rendered| Names::new().with_bound(r.owned.iter().cloned());
        let ka = canonical_kernel(&ta, None, &names(&ra));
        let kb = canonical_kernel(&tb, None, &names(&rb));
        assert_eq!(ka.text(), kb.text(), "seed {seed}");
        assert_eq!(ka.key(&[]), kb.key(&[]));
        // And the schedule mattered whenever it had ops.
        if !sched.ops.is_empty() && done_a != a.code {
            let orig = render_c(&a.code, &a.statics, &cfg);
            let ko = canonical_kernel(&orig.file(), None, &names(&orig));
            assert_ne!(ko.key(&[]), ka.key(&[]), "seed {seed}");
        }
    }
}
