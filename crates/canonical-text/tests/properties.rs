//! Property tests over generated kernels: keys are invariant under a consistent renaming
//! of the names a kernel owns, and change with anything else.
#![allow(clippy::unwrap_used)]

use canonical_text::lexer::{TokenKind, tokenize};
use canonical_text::{Canonical, Names, canonical_kernel};
use proptest::prelude::*;

const FREE: [&str; 5] = ["f_a", "f_b", "kc0", "kc1", "step__seg"];
const KEEP: [&str; 4] = ["sqrtf", "fmaxf", "i999", "v9_keep"];
const MEMBER_OPS: [&str; 3] = [".", "->", "::"];
const MEMBERS: [&str; 3] = ["x", "len", "data"];
const LITS: [&str; 7] = ["1", "2.0f", "0x1f", "\"s\"", "'c'", "\"i1\"", "1e-3f"];
const OPS: [&str; 16] = [
    "+", "-", "*", "/", "=", "==", "<", "(", ")", "[", "]", ";", ",", "{", "}", "+=",
];
const PREPROC: [&str; 3] = ["#pragma unroll", "#define TILE 64", "#include <math.h>"];
const ATTRS: [&str; 2] = ["[[buffer(0)]]", "[[thread_position_in_grid]]"];
const SEPS: [&str; 5] = [" ", "\n", "  ", "\r\n", " /* c */ "];
/// Roles per kind of renamable name.
const ROLES: usize = 4;

/// One piece of a generated kernel.
#[derive(Clone, Debug, PartialEq)]
enum Piece {
    Bound(usize),
    Sym(usize),
    Local(usize),
    Derived(usize),
    Own,
    Free(usize),
    Keep(usize),
    Member(usize, usize),
    Lit(usize),
    Op(usize),
    Preproc(usize),
    Attr(usize),
    /// A comment mentioning a name piece.
    Comment(Box<Piece>),
}

impl Piece {
    fn renamable(&self) -> bool {
        matches!(
            self,
            Piece::Bound(_) | Piece::Sym(_) | Piece::Local(_) | Piece::Derived(_)
        )
    }
}

/// How the renamable roles are spelled in one rendering.
#[derive(Clone, Debug)]
struct Naming {
    bound: Vec<u32>,
    sym: Vec<u32>,
    local: Vec<u32>,
    own_index: u32,
    /// The kernel's own name minted as `step_<n>` under `Names::with_minted_kernel_names("_")`
    /// instead of as the segment name `step__seg<n>`.
    minted: bool,
}

impl Naming {
    fn bound(&self, k: usize) -> String {
        format!("n{}_w", self.bound[k])
    }
    fn kernel_name(&self) -> String {
        if self.minted {
            format!("step_{}", self.own_index)
        } else {
            format!("step__seg{}", self.own_index)
        }
    }
    /// The kernel token of every [`Naming::kernel_name`] of this scheme.
    fn token(&self) -> &'static str {
        if self.minted { "step_" } else { "step__seg" }
    }
    fn names(&self) -> Names {
        let names = Names::new()
            .with_bound((0..ROLES).map(|k| self.bound(k)))
            .with_free(FREE)
            .with_keep(KEEP)
            .with_derivation("", "_grad");
        if self.minted {
            names.with_minted_kernel_names("_")
        } else {
            names
        }
    }
    /// The same spellings with the own name minted by `minted`'s scheme.
    fn scheme(mut self, minted: bool) -> Naming {
        self.minted = minted;
        self
    }
    fn spell(&self, p: &Piece) -> String {
        match p {
            Piece::Bound(k) => self.bound(*k),
            Piece::Sym(k) => format!("i{}", self.sym[*k]),
            Piece::Local(k) => format!("v{}_acc", self.local[*k]),
            Piece::Derived(k) => format!("{}_grad", self.bound(*k)),
            Piece::Own => self.kernel_name(),
            Piece::Free(k) => FREE[*k].to_owned(),
            Piece::Keep(k) => KEEP[*k].to_owned(),
            Piece::Member(o, m) => format!("s{}{}", MEMBER_OPS[*o], MEMBERS[*m]),
            Piece::Lit(k) => LITS[*k].to_owned(),
            Piece::Op(k) => OPS[*k].to_owned(),
            Piece::Preproc(k) => format!("\n{}\n", PREPROC[*k]),
            Piece::Attr(k) => ATTRS[*k].to_owned(),
            Piece::Comment(inner) => format!("/* see {} */", self.spell(inner)),
        }
    }
}

type Kernel = Vec<(Piece, usize)>;

fn render(kernel: &Kernel, naming: &Naming) -> String {
    let mut out = String::new();
    for (p, sep) in kernel {
        out.push_str(&naming.spell(p));
        out.push_str(SEPS[*sep]);
    }
    out
}

fn canon(kernel: &Kernel, naming: &Naming) -> Canonical {
    canonical_kernel(
        &render(kernel, naming),
        Some(&naming.kernel_name()),
        &naming.names(),
    )
}

fn key(kernel: &Kernel, naming: &Naming) -> String {
    canon(kernel, naming).key(&[b"-O3"])
}

fn name_piece() -> impl Strategy<Value = Piece> {
    prop_oneof![
        (0..ROLES).prop_map(Piece::Bound),
        (0..ROLES).prop_map(Piece::Sym),
        (0..ROLES).prop_map(Piece::Local),
        (0..ROLES).prop_map(Piece::Derived),
        Just(Piece::Own),
        (0..FREE.len()).prop_map(Piece::Free),
        (0..KEEP.len()).prop_map(Piece::Keep),
    ]
}

fn piece() -> impl Strategy<Value = Piece> {
    prop_oneof![
        6 => name_piece(),
        1 => (0..MEMBER_OPS.len(), 0..MEMBERS.len()).prop_map(|(o, m)| Piece::Member(o, m)),
        2 => (0..LITS.len()).prop_map(Piece::Lit),
        4 => (0..OPS.len()).prop_map(Piece::Op),
        1 => (0..PREPROC.len()).prop_map(Piece::Preproc),
        1 => (0..ATTRS.len()).prop_map(Piece::Attr),
        1 => name_piece().prop_map(|p| Piece::Comment(Box::new(p))),
    ]
}

fn kernel() -> impl Strategy<Value = Kernel> {
    proptest::collection::vec((piece(), 0..SEPS.len()), 1..40)
}

/// `n` distinct ids below 900 (so no symbol is spelled like the kept `i999`), shuffled.
fn ids(n: usize) -> impl Strategy<Value = Vec<u32>> {
    proptest::sample::subsequence((0u32..900).collect::<Vec<_>>(), n).prop_shuffle()
}

fn naming() -> impl Strategy<Value = Naming> {
    (ids(ROLES), ids(ROLES), ids(ROLES), 0u32..100).prop_map(|(bound, sym, local, own_index)| {
        Naming {
            bound,
            sym,
            local,
            own_index,
            minted: false,
        }
    })
}

/// A different value for a piece that is never renamed, if it has one.
fn mutate(p: &Piece, d: usize) -> Option<Piece> {
    let other = |k: usize, n: usize| (k + 1 + d % (n - 1)) % n;
    Some(match p {
        Piece::Free(k) => Piece::Free(other(*k, FREE.len())),
        Piece::Keep(k) => Piece::Keep(other(*k, KEEP.len())),
        Piece::Member(o, m) if d.is_multiple_of(2) => {
            Piece::Member(other(*o, MEMBER_OPS.len()), *m)
        }
        Piece::Member(o, m) => Piece::Member(*o, other(*m, MEMBERS.len())),
        Piece::Lit(k) => Piece::Lit(other(*k, LITS.len())),
        Piece::Op(k) => Piece::Op(other(*k, OPS.len())),
        Piece::Preproc(k) => Piece::Preproc(other(*k, PREPROC.len())),
        Piece::Attr(k) => Piece::Attr(other(*k, ATTRS.len())),
        Piece::Comment(inner) => Piece::Comment(Box::new(mutate(inner, d)?)),
        _ => return None,
    })
}

proptest! {
    /// (1) A consistent renaming of bound names, symbols, scope-locals, derived names
    /// and the segment index gives the same key and the same canonical text.
    #[test]
    fn consistent_renaming_keeps_the_key(
        k in kernel(), a in naming(), b in naming(), minted in any::<bool>(),
    ) {
        let (a, b) = (a.scheme(minted), b.scheme(minted));
        let (ca, cb) = (canon(&k, &a), canon(&k, &b));
        prop_assert_eq!(ca.text(), cb.text());
        prop_assert_eq!(ca.key(&[b"-O3"]), cb.key(&[b"-O3"]));
        prop_assert!(ca.refusals().is_empty(), "{:?}", ca.refusals());
    }

    /// (2) Changing a free name, a kept name, a member name or operator, a literal, an
    /// operator, a preprocessor line or an attribute changes the key.
    #[test]
    fn changing_anything_not_owned_changes_the_key(
        k in kernel(), a in naming(), at in any::<prop::sample::Index>(), d in 0usize..8,
        minted in any::<bool>(),
    ) {
        let a = a.scheme(minted);
        let candidates: Vec<usize> =
            (0..k.len()).filter(|&i| mutate(&k[i].0, d).is_some()).collect();
        prop_assume!(!candidates.is_empty());
        let i = candidates[at.index(candidates.len())];
        let mut changed = k.clone();
        changed[i].0 = mutate(&k[i].0, d).unwrap();
        prop_assert_ne!(key(&k, &a), key(&changed, &a));
    }

    /// (3) Changing the binding structure (`a + b` to `a + a`) changes the key.
    #[test]
    fn changing_binding_structure_changes_the_key(
        k in kernel(), a in naming(), b in naming(),
        at in any::<prop::sample::Index>(), from in any::<prop::sample::Index>(),
    ) {
        let renamable: Vec<usize> = (0..k.len()).filter(|&i| k[i].0.renamable()).collect();
        prop_assume!(renamable.len() >= 2);
        let p = renamable[at.index(renamable.len())];
        let others: Vec<usize> =
            renamable.iter().copied().filter(|&q| k[q].0 != k[p].0).collect();
        prop_assume!(!others.is_empty());
        let q = others[from.index(others.len())];
        let mut changed = k.clone();
        changed[p].0 = k[q].0.clone();
        // Under any renaming of either kernel.
        prop_assert_ne!(key(&k, &a), key(&changed, &b));
    }

    /// (4) A free identifier spelled like a canonical token never merges two kernels:
    /// replacing a renamed occurrence by a free name spelled like its canonical token
    /// may leave the text as it is, but never the key.
    #[test]
    fn free_name_spelled_like_a_canonical_token_is_told_apart(
        k in kernel(), a in naming(), at in any::<prop::sample::Index>(),
        minted in any::<bool>(),
    ) {
        let a = a.scheme(minted);
        let renamable: Vec<usize> = (0..k.len()).filter(|&i| k[i].0.renamable()).collect();
        prop_assume!(!renamable.is_empty());
        let p = renamable[at.index(renamable.len())];
        let c = canon(&k, &a);
        let spelled = a.spell(&k[p].0);
        let n = c.renamed().position(|r| r == spelled).unwrap();
        let token = format!("kc{n}");
        let text = render(&k, &a);
        // Replace the p-th piece's spelling by the token, keeping everything else.
        let mut changed = String::new();
        for (i, (piece, sep)) in k.iter().enumerate() {
            let spelled = if i == p { token.clone() } else { a.spell(piece) };
            changed.push_str(&spelled);
            changed.push_str(SEPS[*sep]);
        }
        let mut names = a.names();
        names.free.insert(token.clone());
        let cc = canonical_kernel(&changed, Some(&a.kernel_name()), &names);
        prop_assert_ne!(cc.key(&[]), c.key(&[]), "{} vs {}", text, changed);
        // The own name's token is told apart from an identifier spelled like it too.
        let own_like = text.replace(&a.kernel_name(), a.token());
        let co = canonical_kernel(&own_like, Some(&a.kernel_name()), &a.names());
        if own_like != text {
            prop_assert_ne!(co.key(&[]), c.key(&[]));
        }
    }

    /// (5) The lexer and the canonicalizer never panic, whatever the text; tokens tile
    /// it; with nothing renamed the canonical text is the text itself.
    #[test]
    fn never_panics_on_arbitrary_strings(s in any::<String>()) {
        check_total(&s);
    }

    #[test]
    fn never_panics_on_arbitrary_bytes(b in proptest::collection::vec(any::<u8>(), 0..400)) {
        check_total(&String::from_utf8_lossy(&b));
    }

    #[test]
    fn never_panics_on_c_like_soup(s in "[a-z0-9_$ \\n\\r\\t\\x00#/*\"'\\[\\]\\\\.:<>%?+=;(){}-]{0,300}") {
        check_total(&s);
    }
}

fn check_total(s: &str) {
    let mut pos = 0;
    for t in tokenize(s.as_bytes()) {
        assert_eq!(t.start, pos);
        assert!(t.end > t.start);
        if t.kind == TokenKind::Ident {
            assert!(!t.bytes(s.as_bytes()).is_empty());
        }
        pos = t.end;
    }
    assert_eq!(pos, s.len());
    let names = Names::new()
        .with_bound(["a", "b", "__x"])
        .with_derivation("t_", "");
    for kernel_name in [None, Some("a"), Some("i1__seg2")] {
        let c = canonical_kernel(s, kernel_name, &Names::new());
        let _ = c.key(&[s.as_bytes()]);
        if c.renamed_count() == 0 && kernel_name.is_none() {
            assert_eq!(c.text(), s);
        } else {
            let _ = c.text();
        }
        let c = canonical_kernel(s, kernel_name, &names);
        let _ = (c.text(), c.key(&[]));
    }
}

/// A fixed kernel whose key is pinned below.
fn pinned_kernel() -> (String, Names) {
    let text = "/* relu over n17_x */\n#define TILE 64\n\
                void step__seg3(const float *restrict n17_x, float *restrict n18_y) {\n\
                \x20 for (int i12 = 0; i12 < TILE; ++i12) {\n\
                \x20   float v3_t = n17_x[i12];\n\
                \x20   n18_y[i12] = v3_t > 0.0f ? v3_t : 0.0f; // max(v3_t, 0)\n\
                \x20 }\n}\n";
    let names = Names::new().with_bound(["n17_x", "n18_y"]);
    (text.to_owned(), names)
}

/// (6) Determinism across runs: the key of a fixed kernel is a fixed value (a change of
/// the encoding must bump the format version and this literal together).
#[test]
fn key_is_pinned() {
    let (text, names) = pinned_kernel();
    let c = canonical_kernel(&text, Some("step__seg3"), &names);
    assert_eq!(
        c.text(),
        "/* relu over kc0 */\n#define TILE 64\n\
         void kc_kernel(const float *restrict kc0, float *restrict kc1) {\n\
         \x20 for (int kc2 = 0; kc2 < TILE; ++kc2) {\n\
         \x20   float kc3 = kc0[kc2];\n\
         \x20   kc1[kc2] = kc3 > 0.0f ? kc3 : 0.0f; // max(kc3, 0)\n\
         \x20 }\n}\n"
    );
    assert!(c.kernel_name_by_role());
    assert_eq!(c.key(&[b"-O3"]), PINNED_KEY);
}

/// Computed independently by `tests/data/pinned_key.py`.
const PINNED_KEY: &str = "1f73d1cafd362dfa8256d568b9feedd5edb3997d1c22576bb4fca5c854797665";

/// (6) Determinism across threads: every thread computes the same keys.
#[test]
fn keys_agree_across_threads() {
    let (text, names) = pinned_kernel();
    let expected = canonical_kernel(&text, Some("step__seg3"), &names).key(&[b"-O3"]);
    let keys: Vec<String> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..4)
            .map(|t| {
                let (text, names) = (&text, &names);
                s.spawn(move || {
                    let mut last = String::new();
                    for _ in 0..50 + t {
                        last = canonical_kernel(text, Some("step__seg3"), names).key(&[b"-O3"]);
                    }
                    last
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert!(keys.iter().all(|k| *k == expected));
}

/// A local spelled like a function called after its block (issue 36) is never renamed,
/// and the differential check says so if it were.
#[test]
fn a_name_used_outside_its_block_is_not_renamed_from_the_text() {
    let text = "void k(float *a) { { float expf = 1; a[1] = expf; } a[0] = expf(2); }";
    assert_eq!(
        canonical_text::reference::disagreement(text, None, &Names::new()),
        None
    );
    let c = canonical_kernel(text, Some("k"), &Names::new());
    assert_eq!(c.renamed().collect::<Vec<_>>(), ["a"]);
    assert!(
        c.text_names()
            .kept()
            .contains(&("expf".into(), "used outside its declarations' scope"))
    );
}

/// The differential check, with a bound name, a derivation and a segment-named kernel,
/// with OCANNL's minted shapes renamed and not, and with nothing listed (the names the
/// text binds itself only): without minted shapes and text names, only the bound name
/// and its derivation are ever renamed.
fn agrees(s: &str) -> Result<(), TestCaseError> {
    let names = Names::new().with_bound(["n_b"]).with_derivation("", "_g");
    let listed = names
        .clone()
        .with_minted_shapes(false)
        .with_text_names(false);
    for names in [names, listed, Names::new().with_free(["x"])] {
        for own in [Some("x"), Some("i1__seg2"), None] {
            if let Some(d) = canonical_text::reference::disagreement(s, own, &names) {
                return Err(TestCaseError::fail(format!("{d} in {s:?}")));
            }
            if !names.minted_shapes && !names.text_names {
                let c = canonical_kernel(s, own, &names);
                if let Some(r) = c.renamed().find(|r| *r != "n_b" && *r != "n_b_g") {
                    return Err(TestCaseError::fail(format!("{r} renamed in {s:?}")));
                }
            }
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    /// The fast scanner agrees with the lexer (see `reference::disagreement`) on C-like
    /// text that it mostly accepts.
    #[test]
    fn renamer_agrees_with_the_lexer(
        s in "(i[0-9]|v1_a|n_b|n_b_g|x|i1__seg2|[0-9]|e|u8|L|R|\\[\\[|\\]\\]|%:|\\.\\.\\.|\r\n|->|::|[ \\n\\t#/*\"'\\[\\].:<>%?+=;(){}-]){0,120}",
    ) {
        agrees(&s)?;
    }

    /// The same on text holding every byte class: `$`, `\r`, backslash-newline, quotes,
    /// `'`, `#`, NUL, trigraph marks and observers.
    #[test]
    fn renamer_agrees_with_the_lexer_on_every_byte_class(
        s in "(i[0-9]|v1_a|n_b|x|[0-9]|e|u8|L|\\[\\[|\\]\\]|%:|\\\\\n|\\\\ \n|\r\n|->|__func__|assert|\\?\\?/|[ \\n\\r\\t\\x00$\\\\#/*\"'\\[\\].:<>%?+=;(){}-]){0,120}",
    ) {
        agrees(&s)?;
    }

    /// The same on text holding the reserved namespace (allowed and unknown names), every
    /// attribute syntax and asm operands, with bound names inside and outside them
    /// (issue 26, classes 2 and 3).
    #[test]
    fn renamer_agrees_with_the_lexer_on_attributes_and_reserved_names(
        s in "(n_b|n_b_g|i1|x|i1__seg2|always_inline|__attribute__|__attribute|__declspec|\\(\\(|\\)\\)|\\[\\[|\\]\\]|__builtin_COLUMN|__builtin_dump_struct|__STRING|__CONCAT|_Bool|_X|__restrict__|__tvm_a|__pool3|__pool|__FUNCDNAME__|__LINE__|asm|__asm|__asm__|__volatile__|: \"=r\"|[0-9]|[ \n#/*\"',.:;(){}-]){0,100}",
    ) {
        agrees(&s)?;
    }

    /// The same on text built around one attribute region, so that bound names and the
    /// own name stand inside one often.
    #[test]
    fn renamer_agrees_with_the_lexer_around_attribute_regions(
        s in "(n_b|x|i1|int|;| |=){0,6}(__attribute__|__attribute|__declspec|\\[\\[)( |/\\*c\\*/)?\\(\\(?(n_b|n_b_g|x|i1__seg2|always_inline|aligned|, |\\(|\\)|[0-9]|\"n_b\"){0,8}\\)?\\)?(\\]\\])?(n_b|n_b_g|x|i1__seg2|i1|int|;| |\\{|\\}|\\(|\\)|=){0,20}",
    ) {
        agrees(&s)?;
    }

    /// The same on text declaring names (issue 36: parameters, locals, loops, labels,
    /// blocks, `extern`, members) among bytes of every class, so that names the text binds
    /// itself are renamed often: each one the slow reading of the declarations finds.
    #[test]
    fn renamer_agrees_with_the_lexer_on_declarations(
        s in "(void k\\(float \\*a, int n\\) \\{|int |float |extern |struct S |typedef |x|acc0|i1|n_b|y|\\{|\\}|\\(|\\)|;|=|,|\\*|for \\(|if |goto |:|\\$|\\\\\n|\r|\n#define M 1\n|\n#if 0\n|/\\*c\\*/|//c\n|\"s\"|'c'|[0-9]|\\.|->| |\n){0,120}",
    ) {
        agrees(&s)?;
    }

    /// The same without the bytes that refuse renaming, so declarations are read often.
    #[test]
    fn renamer_agrees_with_the_lexer_on_readable_declarations(
        s in "void k\\(float \\*a, int n\\) \\{(int |float |extern |struct S |x|acc0|y|\\{|\\}|\\(|\\)|;|=|,|\\*|for \\(|if |goto |:|/\\*c\\*/|[0-9]|\\.|->| ){0,100}",
    ) {
        agrees(&s)?;
    }

    /// And on arbitrary bytes.
    #[test]
    fn renamer_agrees_with_the_lexer_on_arbitrary_text(s in any::<String>()) {
        agrees(&s)?;
    }
}

/// What a [`Canonical`] tells, all of it.
fn everything(c: &Canonical) -> (String, String, Vec<String>, usize, Option<String>) {
    (
        c.key(&[b"-O3"]),
        format!("{:?}", c.refusals()),
        c.pinned().to_vec(),
        c.renamed_count(),
        c.kernel_token().map(str::to_owned),
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]
    /// A [`NameScope`](canonical_text::NameScope) call with a kernel's declared names (in
    /// any order, repeated, some also free, some reserved) gives what
    /// [`canonical_kernel`] gives with a `Names` holding the scope's names and those:
    /// key, refusals, pinned names, renamed count, kernel token.
    #[test]
    fn a_name_scope_keys_as_the_whole_names_do(
        k in kernel(),
        a in naming(),
        shared in proptest::collection::vec(0usize..ROLES, 0..3),
        declared in proptest::collection::vec(0usize..ROLES + 3, 0..8),
        derive in any::<bool>(),
    ) {
        let text = render(&k, &a);
        let spell = |i: usize| match i {
            i if i < ROLES => a.bound(i),
            i if i == ROLES => "f_a".to_owned(),   // also free
            i if i == ROLES + 1 => "__n1".to_owned(), // reserved
            _ => "absent_name".to_owned(),
        };
        let mut base = Names::new().with_free(FREE).with_keep(KEEP);
        if derive {
            base = base.with_derivation("", "_grad");
        }
        base = base.with_bound(shared.iter().map(|&i| spell(i)));
        let declared: Vec<String> = declared.iter().map(|&i| spell(i)).collect();
        let whole = base.clone().with_bound(declared.iter().cloned());
        let scope = canonical_text::NameScope::new(base);
        let own = a.kernel_name();
        let got = scope.canonical_kernel(&text, Some(&own), &declared);
        let want = canonical_kernel(&text, Some(&own), &whole);
        prop_assert_eq!(everything(&got), everything(&want), "{:?}", text);
    }
}

proptest! {
    /// (M) Under a minted-name declaration only the counter after the separator is dropped:
    /// another separator, no separator, or digits not right after the separator keep the
    /// name whole, another stem keeps its stem, and none of them shares a key with
    /// `step_<n>`.
    #[test]
    fn only_the_minted_counter_leaves_the_key(
        k in kernel(), a in naming(), n in 0u32..1000, m in 0u32..1000,
        other in prop::sample::select(vec!["stop_", "step-", "step", "step_x", "_"]),
    ) {
        let names = a.clone().scheme(true).names();
        let text = |own: &str| render(&k, &a).replace(&a.clone().scheme(true).kernel_name(), own);
        let key = |own: &str| canonical_kernel(&text(own), Some(own), &names).key(&[]);
        let (x, y) = (format!("step_{n}"), format!("step_{m}"));
        prop_assert_eq!(key(&x), key(&y));
        let odd = if other == "step" { format!("step{n}") } else { format!("{other}{n}") };
        prop_assume!(!text(&x).contains(&odd));
        prop_assert_ne!(key(&x), key(&odd), "{} vs {}", x, odd);
        // Another stem drops its counter too; every other form is kept whole.
        let token = if other == "stop_" { "stop_" } else { odd.as_str() };
        prop_assert_eq!(names.kernel_token(&odd), token);
    }
}
