//! canonical-text on real kernel text no one here wrote: the corpus of kernels printed by
//! tinygrad's C renderer, TVM (`target="c"`) and OCANNL (see `../shared/corpus/README.md`),
//! each with the names its renderer declares.
//!
//! - Every kernel is keyed without a panic, and the fast renamer agrees with the lexer
//!   ([`reference::disagreement`]) with and without the declared names.
//! - A renamed twin (every owned name respelled, as the renderer would in another run)
//!   has the kernel's key unless renaming was refused or a name was pinned, and a kernel
//!   with one digit or operator changed never has it.
//! - The real compilers as the oracle: every kernel of the corpus that compiles on its
//!   own (with the compiler its renderer targets: `clang` for tinygrad, `cc` for the
//!   others) is compiled with its renamed twin; equal keys must mean identical object
//!   code.
//!
//! The corpus lives outside the repository; without it these tests say so and pass (as
//! the corpus README asks). `$KCACHE_CORPUS` points at another copy.

#[path = "support/corpus.rs"]
mod corpus;
#[path = "support/object_code.rs"]
mod object_code;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};

use canonical_text::{canonical_kernel, reference};
use corpus::Kernel;

fn kernels() -> Option<Vec<Kernel>> {
    match corpus::dir() {
        Some(d) => Some(corpus::load(&d)),
        None => {
            eprintln!("SKIPPED: the kernel corpus is not at ../shared/corpus (nor $KCACHE_CORPUS)");
            None
        }
    }
}

fn key(k: &Kernel) -> String {
    canonical_kernel(&k.text, k.name.as_deref(), &k.names).key(&[b"-O2"])
}

#[test]
fn every_corpus_kernel_agrees_with_the_lexer() {
    let Some(ks) = kernels() else { return };
    assert!(ks.len() > 150, "{} kernels", ks.len());
    let mut renamed = BTreeMap::<&str, (usize, usize)>::new();
    for k in &ks {
        for names in [&k.names, &canonical_text::Names::new()] {
            if let Some(d) = reference::disagreement(&k.text, k.name.as_deref(), names) {
                panic!("{}: the renamer disagrees with the lexer: {d}", k.label);
            }
        }
        let c = canonical_kernel(&k.text, k.name.as_deref(), &k.names);
        let e = renamed.entry(k.renderer).or_default();
        e.0 += 1;
        e.1 += usize::from(c.renamed_count() > 0);
    }
    eprintln!("kernels (with renamed names): {renamed:?}");
}

/// Every corpus kernel and its renamed twin key alike through a `NameScope` handed the
/// kernel's declared names and through a whole `Names` holding them.
#[test]
fn corpus_kernels_key_alike_through_a_name_scope() {
    let Some(ks) = kernels() else { return };
    let scope = canonical_text::NameScope::new(canonical_text::Names::new());
    for k in &ks {
        for k in [k, &corpus::renamed_twin(k)] {
            let declared: Vec<&str> = k.names.bound.iter().map(String::as_str).collect();
            let got = scope.canonical_kernel(&k.text, k.name.as_deref(), &declared);
            let want = canonical_kernel(&k.text, k.name.as_deref(), &k.names);
            assert_eq!(got.key(&[b"-O2"]), want.key(&[b"-O2"]), "{}", k.label);
            assert_eq!(got.refusals(), want.refusals(), "{}", k.label);
            assert_eq!(got.pinned(), want.pinned(), "{}", k.label);
        }
    }
}

#[test]
fn renamed_corpus_twins_share_a_key_and_changed_kernels_do_not() {
    let Some(ks) = kernels() else { return };
    let mut equal = BTreeMap::<&str, usize>::new();
    let mut mutants = 0;
    for k in &ks {
        let c = canonical_kernel(&k.text, k.name.as_deref(), &k.names);
        let original = c.key(&[b"-O2"]);
        let twin = corpus::renamed_twin(k);
        if twin.text != k.text && c.refusals().is_empty() && c.pinned().is_empty() {
            assert_eq!(
                key(&twin),
                original,
                "{}: a renamed twin has another key\n{}",
                k.label,
                twin.text
            );
            *equal.entry(k.renderer).or_default() += 1;
        }
        // One byte of a number or an operator changed, at up to 16 places spread over
        // the kernel: never the same key.
        let points = corpus::mutation_points(&k.text);
        let step = points.len().div_ceil(16).max(1);
        for &(at, to) in points.iter().step_by(step) {
            let mut bytes = k.text.clone().into_bytes();
            bytes[at] = to;
            let text = String::from_utf8(bytes).expect("an ASCII byte replaced");
            let changed = canonical_kernel(&text, k.name.as_deref(), &k.names).key(&[b"-O2"]);
            assert_ne!(
                changed, original,
                "{}: byte {at} changed, same key",
                k.label
            );
            mutants += 1;
        }
    }
    eprintln!("renamed twins with the kernel's key: {equal:?}; changed kernels: {mutants}");
    // The twins are no formality: real text of each renamer that renames is renamed alike.
    for r in ["tinygrad", "ocannl"] {
        assert!(equal.get(r).copied().unwrap_or(0) > 0, "{r}: no twin keyed");
    }
}

/// What the object-code oracle saw of one renderer's kernels.
#[derive(Clone, Copy, Debug, Default)]
struct Seen {
    /// Kernels that compile on their own.
    compiled: usize,
    /// Renamed twins with the kernel's key (their object code was identical).
    equal_keys: usize,
    /// Renamed twins with another key.
    other_keys: usize,
    /// Kernels with one number or operator changed that compiled to other object code.
    changes_caught: usize,
}

#[test]
fn equal_corpus_keys_mean_identical_object_code() {
    let Some(ks) = kernels() else { return };
    let dir = tempfile::tempdir().expect("a temporary directory");
    let next = AtomicUsize::new(0);
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
    let seen: Vec<BTreeMap<&str, Seen>> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    let mut seen = BTreeMap::new();
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some(k) = ks.get(i) else { break seen };
                        check_twin(dir.path(), i, k, seen.entry(k.renderer).or_default());
                    }
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect()
    });
    let mut total = BTreeMap::<&str, Seen>::new();
    for (r, s) in seen.into_iter().flatten() {
        let t = total.entry(r).or_default();
        t.compiled += s.compiled;
        t.equal_keys += s.equal_keys;
        t.other_keys += s.other_keys;
        t.changes_caught += s.changes_caught;
    }
    eprintln!("the object-code oracle on the corpus: {total:#?}");
    // tinygrad's kernels compile with clang, OCANNL's C builds with cc: the oracle ran on
    // real renderer output of both, and it can tell programs apart.
    for r in ["tinygrad", "ocannl"] {
        let t = total.get(r).copied().unwrap_or_default();
        assert!(t.equal_keys > 0 && t.changes_caught > 0, "{r}: {t:?}");
    }
}

/// Compiles kernel `i` and its renamed twin with the kernel's compiler: equal keys must
/// mean identical object code. Of every eighth kernel, also a copy with a digit of a
/// number changed (never the kernel's key, see above), to show the comparison can fail.
fn check_twin(dir: &std::path::Path, i: usize, k: &Kernel, seen: &mut Seen) {
    let Some(a) = object_code::compile_with(k.compiler, dir, 3 * i, &k.text) else {
        return;
    };
    seen.compiled += 1;
    let twin = corpus::renamed_twin(k);
    let b = object_code::compile_with(k.compiler, dir, 3 * i + 1, &twin.text)
        .unwrap_or_else(|| panic!("{}: the renamed twin does not compile", k.label));
    if key(k) == key(&twin) {
        seen.equal_keys += 1;
        assert!(
            a == b,
            "{}: equal keys, different object code\n{}",
            k.label,
            twin.text
        );
    } else {
        seen.other_keys += 1;
    }
    if !i.is_multiple_of(8) {
        return;
    }
    // A digit changed (an operator changed seldom compiles): the first change that
    // compiles, of the first three tried.
    let digits = corpus::mutation_points(&k.text)
        .into_iter()
        .filter(|&(at, _)| k.text.as_bytes()[at].is_ascii_digit());
    for (at, to) in digits.take(3) {
        let mut bytes = k.text.clone().into_bytes();
        bytes[at] = to;
        let text = String::from_utf8(bytes).expect("an ASCII byte replaced");
        if let Some(m) = object_code::compile_with(k.compiler, dir, 3 * i + 2, &text) {
            seen.changes_caught += usize::from(m != a);
            break;
        }
    }
}

/// The share of renamed twins (twins whose text differs from the kernel's) that keep the
/// kernel's key, per renderer: what refusals cost on real text. Printed, so a change to
/// the rules can be compared before and after; it must stay above zero for the renderers
/// that rename.
#[test]
fn share_of_renamed_twins_with_the_kernels_key() {
    let Some(ks) = kernels() else { return };
    let mut share = BTreeMap::<&str, (usize, usize)>::new();
    for k in &ks {
        let twin = corpus::renamed_twin(k);
        if twin.text == k.text {
            continue;
        }
        let e = share.entry(k.renderer).or_default();
        e.1 += 1;
        e.0 += usize::from(key(&twin) == key(k));
    }
    let (eq, all) = share
        .values()
        .fold((0, 0), |(a, b), &(x, y)| (a + x, b + y));
    eprintln!("renamed twins with the kernel's key (equal, twins): {share:?}; all: {eq}/{all}");
    for r in ["tinygrad", "ocannl"] {
        assert!(share.get(r).is_some_and(|&(e, _)| e > 0), "{r}: {share:?}");
    }
}

/// Issue 36: with **default** [`canonical_text::Names`] (no declared names: the names the
/// text binds itself are renamed), renamed twins keep the kernel's key at least as often
/// as with each renderer's declared names alone (text-derived names off, as before).
/// Prints both counts, per renderer.
#[test]
fn default_names_keep_twins_keys_as_often_as_declared_names() {
    let Some(ks) = kernels() else { return };
    // Per renderer: (twins, equal with declared names only, equal with default names).
    let mut seen = BTreeMap::<&str, (usize, usize, usize)>::new();
    let mut reasons = BTreeMap::<&'static str, usize>::new();
    for k in &ks {
        let twin = corpus::renamed_twin(k);
        if twin.text == k.text {
            continue;
        }
        let with = |k: &Kernel, names: &canonical_text::Names| {
            canonical_kernel(&k.text, k.name.as_deref(), names).key(&[b"-O2"])
        };
        let declared = with(k, &k.names.clone().with_text_names(false))
            == with(&twin, &twin.names.clone().with_text_names(false));
        let default = canonical_text::Names::new();
        let c = canonical_kernel(&k.text, k.name.as_deref(), &default);
        let same = c.key(&[b"-O2"]) == with(&twin, &default);
        if !same {
            let t = c.text_names();
            let why = t
                .refused()
                .or(t.kept().first().map(|k| k.1))
                .unwrap_or("other");
            *reasons.entry(why).or_default() += 1;
        }
        let e = seen.entry(k.renderer).or_default();
        e.0 += 1;
        e.1 += usize::from(declared);
        e.2 += usize::from(same);
    }
    let total = seen
        .values()
        .fold((0, 0, 0), |a, v| (a.0 + v.0, a.1 + v.1, a.2 + v.2));
    eprintln!(
        "renamed twins with the kernel's key, (twins, declared names only, default names): \
         {seen:?}; all: declared {}/{}, default {}/{}; default misses by first reason: {reasons:?}",
        total.1, total.0, total.2, total.0
    );
    for (r, &(_, declared, default)) in &seen {
        assert!(
            default >= declared,
            "{r}: default {default} < declared {declared}"
        );
    }
}

/// Issue 36: renamed twins whose own name is respelled too (`E_4` and `E_4n1`): with
/// default [`canonical_text::Names`] the own name is keyed by its role, so they keep the
/// kernel's key wherever that is sound; with the declared names and the own name keyed as
/// spelled (as before), never. Prints both counts per renderer, and the reasons the own
/// name was kept.
#[test]
fn twins_with_another_own_name_keep_their_key_with_default_names() {
    let Some(ks) = kernels() else { return };
    // Per renderer: (twins, equal keyed as spelled, equal with default names).
    let mut seen = BTreeMap::<&str, (usize, usize, usize)>::new();
    let mut kept = BTreeMap::<&'static str, usize>::new();
    for k in &ks {
        let Some(twin) = corpus::own_name_respelled(&corpus::renamed_twin(k)) else {
            continue;
        };
        let with = |k: &Kernel, names: &canonical_text::Names| {
            canonical_kernel(&k.text, k.name.as_deref(), names).key(&[b"-O2"])
        };
        let spelled = |n: &canonical_text::Names| {
            n.clone()
                .with_text_names(false)
                .with_kernel_name_by_role(false)
        };
        let declared = with(k, &spelled(&k.names)) == with(&twin, &spelled(&twin.names));
        let default = canonical_text::Names::new();
        let c = canonical_kernel(&k.text, k.name.as_deref(), &default);
        let same = c.key(&[b"-O2"]) == with(&twin, &default);
        if let Some(why) = c.kernel_name_kept() {
            *kept.entry(why).or_default() += 1;
        }
        let e = seen.entry(k.renderer).or_default();
        e.0 += 1;
        e.1 += usize::from(declared);
        e.2 += usize::from(same);
    }
    let total = seen
        .values()
        .fold((0, 0, 0), |a, v| (a.0 + v.0, a.1 + v.1, a.2 + v.2));
    eprintln!(
        "twins with another own name keeping the kernel's key, (twins, declared names and \
         own name as spelled, default names): {seen:?}; all: as spelled {}/{}, default {}/{}; \
         own name kept, by reason: {kept:?}",
        total.1, total.0, total.2, total.0
    );
    assert_eq!(
        total.1, 0,
        "an own name respelled changes the key when keyed as spelled"
    );
    assert!(
        seen.get("tinygrad").is_some_and(|&(_, _, d)| d > 0),
        "tinygrad's twins keep their key: {seen:?}"
    );
}
