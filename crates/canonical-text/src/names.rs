//! What the renderer says about a kernel's names ([`Names`], [`Derivation`]), and what
//! one call prepares from it ([`Prepared`]): the filters and the bound-name refusal.

use std::collections::BTreeSet;

use crate::Refusal;

/// A derivation template: the emitter derives the name `prefix + base + suffix` from a
/// base name (a bound name, a loop symbol, or digits).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Derivation {
    /// Text before the base name.
    pub prefix: String,
    /// Text after the base name.
    pub suffix: String,
}

impl Derivation {
    /// The template `prefix + base + suffix`.
    pub fn new(prefix: impl Into<String>, suffix: impl Into<String>) -> Self {
        Derivation {
            prefix: prefix.into(),
            suffix: suffix.into(),
        }
    }

    /// The base of `name` under this template, if `name` is `prefix + base + suffix`
    /// with a non-empty base.
    pub(crate) fn base<'n>(&self, name: &'n str) -> Option<&'n str> {
        let rest = name.strip_prefix(self.prefix.as_str())?;
        let base = rest.strip_suffix(self.suffix.as_str())?;
        (!base.is_empty()).then_some(base)
    }
}

/// What the renderer knows about a kernel's names: which ones the kernel binds (and may
/// therefore be renamed) and which ones it must keep.
///
/// # Contract: a renamed name is declared by the kernel text itself
///
/// Renaming is sound only for names whose meaning the kernel gives them: a parameter,
/// or a local it declares, in `text` (the text handed to [`canonical_kernel`](crate::canonical_kernel), which
/// for cc-backend includes the prelude). Two kernels whose texts differ only in renamed
/// names get one key, so a name the kernel merely *uses* must never be renamed: a called
/// function, a global, a macro or a type from a header. List in [`Names::bound`](crate::Names::bound) only
/// names your renderer declared in that kernel; if it also listed the functions it calls, a
/// kernel calling `sqrtf` and its copy calling `expf` would share a key, and one is answered with the other's
/// code (a wrong hit). Leaving a declared name out is always safe: it is keyed as
/// spelled, which costs a miss when a twin spells it otherwise, never a wrong hit.
///
/// Besides the names listed here, the names the text binds itself are renamed *without
/// being listed* ([`Names::text_names`](crate::Names::text_names), default on): those the
/// text declares (parameters, block-scope and `for`-init declarations, labels) and never
/// uses outside the scope of those declarations. The reading is the crate's, from the
/// text alone; it trusts, as listing a name does, that no header macro the text uses
/// expands to an `extern` declaration or an unbalanced brace, and that the header macros
/// observing spellings are in [`Names::observers`](crate::Names::observers).
///
/// Also, two name shapes are renamed *without being listed*
/// (they are how OCANNL's renderer spells its loop symbols and scope-locals): `i`
/// followed by digits (`i12`) and `v`, digits, `_`, anything (`v3_acc`). A renderer that
/// uses such a name for anything the kernel does not declare (a helper `v2_load` from a
/// header, a global `i0`) must list it in [`Names::keep`](crate::Names::keep) (or [`Names::free`](crate::Names::free)), or turn
/// the shapes off ([`Names::with_minted_shapes`](crate::Names::with_minted_shapes)`(false)`: then only listed names are
/// renamed).
///
/// The kernel's own name is the `kernel_name` argument of
/// [`canonical_kernel`](crate::canonical_kernel); `Names` says only how it is keyed
/// ([`Names::kernel_name_by_role`](crate::Names::kernel_name_by_role),
/// [`Names::minted_kernel_separator`](crate::Names::minted_kernel_separator)).
#[derive(Clone, Debug)]
pub struct Names {
    /// Names the kernel declares for its tensor nodes (parameters, locals), bare or
    /// disambiguated. Renamed, unless renaming is refused (see [`canonical_kernel`](crate::canonical_kernel)).
    /// Each must be declared by the kernel text wherever it occurs in it (see the
    /// contract above): listing a name the kernel only uses makes kernels that differ in
    /// it share a key. A listed name that occurs in the text neither itself nor through
    /// a name [`Names::derivations`](crate::Names::derivations) derive from it leaves the key as it is, unless it
    /// refuses renaming (a reserved name, or one also free: see [`Refusal`]).
    pub bound: BTreeSet<String>,
    /// Names the kernel refers to from outside. Never renamed; a bound name that is also
    /// free refuses renaming of all bound names.
    pub free: BTreeSet<String>,
    /// Names never renamed, whatever they look like (builtins, vendor names).
    pub keep: BTreeSet<String>,
    /// Templates of the emitter's own derived names. Every name a template matches
    /// (with a base in `bound`, a loop symbol, or digits) is renamed, so it too must be
    /// declared by the kernel text (see the contract above).
    pub derivations: Vec<Derivation>,
    /// Macros from headers that observe the spelling of their arguments or of the
    /// enclosing function (they stringify `#x`, paste `a##b`, or expand to `__func__`).
    /// Wherever one of these occurs in the text as a whole identifier (not inside a longer
    /// word or number; even in a comment or literal), nothing is renamed
    /// ([`Refusal::SpellingObserved`]). Default: `assert`. Macros
    /// *defined in the text* with `#` or `##` (or naming a feature test such as
    /// `__has_builtin`) are found without being listed here; macros the compile's
    /// options define (`-DHB(x)=__has_builtin(x)`) are not in the text and must be listed
    /// when they observe (cc-backend learns them from the compiler's macro table).
    pub observers: BTreeSet<String>,
    /// Whether names of OCANNL's minted shapes (`i` and digits; `v`, digits, `_`,
    /// anything) are renamed without being listed (default `true`). With `false`, only
    /// [`Names::bound`](crate::Names::bound) names (and names [`Names::derivations`](crate::Names::derivations) derive from them or from
    /// digits) are renamed: the safe setting for a renderer whose texts may use such
    /// names for something the kernel does not declare.
    pub minted_shapes: bool,
    /// How the renderer mints its kernels' own names, when not as
    /// [`segment_kernel_name`](crate::segment_kernel_name) does: the separator before a
    /// counter (`Some("_")` for `foo_17`). A kernel name `<stem><separator><digits>` then
    /// loses its digits in the key, as a segment index does (`foo_17` and `foo_18` give the
    /// token `foo_`), so renders that differ only in the counter share a key. `None`
    /// (the default): only a `__seg<digits>` index is dropped. See
    /// [`Names::kernel_token`].
    pub minted_kernel_separator: Option<String>,
    /// Whether the caller learned the macros of every header the text includes itself
    /// (as cc-backend does, from the compiler's macro table over the prelude and the
    /// text's own directives) and listed each that observes a spelling in
    /// [`Names::observers`](crate::Names::observers). Default `false`: a text that
    /// includes a header (`#include`, `#include_next`, `#import`) renames no name inside
    /// the arguments of a call-like name other than a C keyword or the kernel's own name
    /// (such a name is pinned), since a header's function-like macro may paste its
    /// argument (`<stdint.h>`'s `INT64_C(x)` reads `xL`).
    pub included_macros_known: bool,
    /// Whether the names the kernel text binds itself are renamed without being listed
    /// (default `true`): its function definitions' parameters, block-scope declarations,
    /// `for`-init declarations and labels, whatever their spelling, each only when every
    /// occurrence of it lies inside the scope of one of the text's own declarations of
    /// it and none is `extern`, a member, an enumerator, a file-scope name, or in a
    /// construct the reading cannot tell apart (the module `declared` says exactly which;
    /// [`Canonical::text_names`](crate::Canonical::text_names) says what it did). Never a
    /// name in [`Names::keep`](crate::Names::keep) or [`Names::free`](crate::Names::free)
    /// (cc-backend puts every name its prelude and compiler declare there) and never one
    /// in the reserved namespace. With `false`, only listed names and the minted shapes are
    /// renamed.
    pub text_names: bool,
    /// Whether the kernel's own name (`kernel_name`) is keyed by its role rather than its
    /// spelling (default `true`): every occurrence of it stands for "the kernel", so
    /// `E_4` and `E_4n1`, or `r_16_64_4_577` and `r_16_64_4_578`, give twins one key.
    /// Only with [`Names::text_names`](crate::Names::text_names) on (the reading tells
    /// that the text defines it), and only where that is sound; otherwise the own name is
    /// keyed as spelled (less a segment index or a declared counter, see
    /// [`Names::kernel_token`]) and [`Canonical::kernel_name_kept`](crate::Canonical::kernel_name_kept)
    /// says why. Sound means: the text defines a function of that name (and its reading
    /// was exact), the name holds a `_` and a digit (the shape of a minted name; no
    /// function a C compiler or its library knows outside the reserved namespace has
    /// both, so the compiler gives the spelling no meaning), it is not reserved, not in
    /// [`Names::keep`](crate::Names::keep), [`Names::free`](crate::Names::free) or
    /// [`Names::bound`](crate::Names::bound), the text includes no header whose macros
    /// the caller did not learn ([`Names::included_macros_known`](crate::Names::included_macros_known)),
    /// no observer sees it (an observed spelling keys the exact text with the whole
    /// name; an occurrence where nothing is renamed pins it), and the text keeps no state
    /// two kernels would share once keyed alike and answered with one compiled function:
    /// no thread-local or writable `static` storage (`static const` data without a `*` is
    /// read-only), nothing at file scope but function
    /// definitions and `typedef`s (otherwise the whole name is keyed, no segment index or
    /// declared counter dropped either).
    pub kernel_name_by_role: bool,
}

impl Default for Names {
    fn default() -> Self {
        Names {
            bound: BTreeSet::new(),
            free: BTreeSet::new(),
            keep: BTreeSet::new(),
            derivations: Vec::new(),
            observers: BTreeSet::from([crate::phases::DEFAULT_OBSERVER.to_owned()]),
            minted_shapes: true,
            minted_kernel_separator: None,
            included_macros_known: false,
            text_names: true,
            kernel_name_by_role: true,
        }
    }
}

impl Names {
    /// No names: only loop symbols and scope-locals are renamed; `assert` is the one
    /// observing macro.
    pub fn new() -> Self {
        Names::default()
    }

    /// Sets [`Names::minted_shapes`](crate::Names::minted_shapes): whether `i12` and `v3_acc` shaped names are renamed
    /// without being listed.
    pub fn with_minted_shapes(mut self, on: bool) -> Self {
        self.minted_shapes = on;
        self
    }

    /// Sets [`Names::text_names`](crate::Names::text_names): whether the names the kernel
    /// text declares itself are renamed without being listed.
    ///
    /// ```
    /// use canonical_text::{canonical_kernel, Names};
    /// let a = "void k(float *buf0) { float acc3 = buf0[0]; buf0[1] = acc3; }";
    /// let b = "void k(float *data7) { float alu9 = data7[0]; data7[1] = alu9; }";
    /// let key = |t: &str, n: &Names| canonical_kernel(t, Some("k"), n).key(&[]);
    /// assert_eq!(key(a, &Names::new()), key(b, &Names::new()));
    /// let listed_only = Names::new().with_text_names(false);
    /// assert_ne!(key(a, &listed_only), key(b, &listed_only));
    /// ```
    pub fn with_text_names(mut self, on: bool) -> Self {
        self.text_names = on;
        self
    }

    /// Sets [`Names::kernel_name_by_role`](crate::Names::kernel_name_by_role): whether the
    /// kernel's own name is keyed by its role where that is sound.
    ///
    /// ```
    /// use canonical_text::{canonical_kernel, Names};
    /// let text = |name: &str| format!("void {name}(float *out) {{ out[0] = 0; }}");
    /// let key = |name: &str, n: &Names| canonical_kernel(&text(name), Some(name), n).key(&[]);
    /// assert_eq!(key("E_4", &Names::new()), key("E_4n1", &Names::new()));
    /// let spelled = Names::new().with_kernel_name_by_role(false);
    /// assert_ne!(key("E_4", &spelled), key("E_4n1", &spelled));
    /// ```
    pub fn with_kernel_name_by_role(mut self, on: bool) -> Self {
        self.kernel_name_by_role = on;
        self
    }

    /// Sets [`Names::minted_kernel_separator`](crate::Names::minted_kernel_separator): the
    /// renderer names its kernels `<stem><separator><counter>`, and the counter is not part of
    /// the key.
    ///
    /// ```
    /// use canonical_text::{canonical_kernel, Names};
    /// // (with the own name keyed as spelled; by default `relu_17` is keyed by its role)
    /// let names = Names::new()
    ///     .with_bound(["out"])
    ///     .with_kernel_name_by_role(false)
    ///     .with_minted_kernel_names("_");
    /// let a = canonical_kernel("void relu_17(float *out) { out[0] = 0; }", Some("relu_17"), &names);
    /// let b = canonical_kernel("void relu_18(float *out) { out[0] = 0; }", Some("relu_18"), &names);
    /// assert_eq!(a.key(&[]), b.key(&[]));
    /// assert_eq!(a.kernel_token(), Some("relu_"));
    /// // The stem still counts: another routine is another key.
    /// let c = canonical_kernel("void gelu_17(float *out) { out[0] = 0; }", Some("gelu_17"), &names);
    /// assert_ne!(a.key(&[]), c.key(&[]));
    /// // Without the declaration the counter is part of the name, and of the key.
    /// let plain = Names::new().with_bound(["out"]).with_kernel_name_by_role(false);
    /// let d = canonical_kernel("void relu_18(float *out) { out[0] = 0; }", Some("relu_18"), &plain);
    /// assert_eq!(d.kernel_token(), Some("relu_18"));
    /// ```
    pub fn with_minted_kernel_names(mut self, separator: impl Into<String>) -> Self {
        self.minted_kernel_separator = Some(separator.into());
        self
    }

    /// What a kernel's own name contributes to its key under these names: `name` without
    /// the counter after [`Names::minted_kernel_separator`](crate::Names::minted_kernel_separator)
    /// when it ends in the separator and at least one digit after a non-empty stem,
    /// otherwise [`kernel_token`](crate::kernel_token) (a `__seg<digits>` index dropped).
    pub fn kernel_token<'a>(&self, name: &'a str) -> &'a str {
        if let Some(separator) = self
            .minted_kernel_separator
            .as_deref()
            .filter(|s| !s.is_empty())
        {
            let b = name.as_bytes();
            let digits = b.iter().rev().take_while(|c| c.is_ascii_digit()).count();
            let end = b.len() - digits;
            if digits > 0 && end > separator.len() && b[..end].ends_with(separator.as_bytes()) {
                // `end` follows an ASCII digit run's start: a char boundary.
                return name.get(..end).unwrap_or(name);
            }
        }
        kernel_token(name)
    }

    /// Sets [`Names::included_macros_known`](crate::Names::included_macros_known): the
    /// caller listed every observing macro of the headers the text includes itself.
    pub fn with_included_macros_known(mut self, known: bool) -> Self {
        self.included_macros_known = known;
        self
    }

    /// Adds bound names.
    pub fn with_bound<S: Into<String>>(mut self, names: impl IntoIterator<Item = S>) -> Self {
        add_all(&mut self.bound, names);
        self
    }

    /// Adds free names.
    pub fn with_free<S: Into<String>>(mut self, names: impl IntoIterator<Item = S>) -> Self {
        add_all(&mut self.free, names);
        self
    }

    /// Adds names to keep.
    pub fn with_keep<S: Into<String>>(mut self, names: impl IntoIterator<Item = S>) -> Self {
        add_all(&mut self.keep, names);
        self
    }

    /// Adds macros that observe spellings (see [`Names::observers`](crate::Names::observers)).
    pub fn with_observers<S: Into<String>>(mut self, names: impl IntoIterator<Item = S>) -> Self {
        add_all(&mut self.observers, names);
        self
    }

    /// Adds the derivation template `prefix + base + suffix`.
    pub fn with_derivation(mut self, prefix: impl Into<String>, suffix: impl Into<String>) -> Self {
        self.derivations.push(Derivation::new(prefix, suffix));
        self
    }

    /// Why bound names may not be renamed, if they may not: the first bound name that is
    /// also free, else the first bound name in the reserved namespace.
    pub fn bound_refusal(&self) -> Option<Refusal> {
        Prepared::new(self).refusal
    }
}

/// Adds `names` to `set`. Into an empty set (the usual case: a fresh [`Names`] per kernel)
/// the names are collected and the set built from them at once (`BTreeSet`'s
/// `FromIterator` sorts, then builds the tree bottom-up), which costs a fraction of
/// inserting them one by one; the set is the same either way.
fn add_all<S: Into<String>>(set: &mut BTreeSet<String>, names: impl IntoIterator<Item = S>) {
    let names = names.into_iter().map(Into::into);
    if set.is_empty() {
        *set = names.collect();
    } else {
        set.extend(names);
    }
}

/// A 256-bit filter over (first byte, last byte, length) of a set of names: a name not
/// in the filter is surely not in the set, so most lookups skip the set itself.
#[derive(Clone, Copy, Default)]
pub(crate) struct NameFilter([u64; 4]);

impl NameFilter {
    #[inline(always)]
    pub(crate) fn slot(name: &[u8]) -> Option<usize> {
        let (&first, &last) = (name.first()?, name.last()?);
        Some(
            (usize::from(first).wrapping_mul(31) + usize::from(last).wrapping_mul(7) + name.len())
                & 255,
        )
    }

    pub(crate) fn add(&mut self, name: &[u8]) {
        if let Some(s) = Self::slot(name) {
            self.0[s >> 6] |= 1 << (s & 63);
        }
    }

    #[inline(always)]
    pub(crate) fn may_contain(&self, name: &[u8]) -> bool {
        Self::slot(name).is_some_and(|s| (self.0[s >> 6] >> (s & 63)) & 1 != 0)
    }
}

/// The filters over a [`Names`]' keep and free names: computed once per call, or once
/// per [`NameScope`].
#[derive(Clone, Copy, Default)]
pub(crate) struct Filters {
    /// Keep and free names.
    pub(crate) kept: NameFilter,
    pub(crate) free: NameFilter,
}

impl Filters {
    pub(crate) fn new(names: &Names) -> Self {
        let mut f = Filters::default();
        for n in &names.keep {
            f.kept.add(n.as_bytes());
        }
        for n in &names.free {
            f.kept.add(n.as_bytes());
            f.free.add(n.as_bytes());
        }
        f
    }
}

/// What one call needs from [`Names`] (and, for a [`NameScope`] call, the kernel's own
/// bound names), computed once per call.
pub(crate) struct Prepared<'n> {
    pub(crate) names: &'n Names,
    /// Bound names given besides `names.bound` (a [`NameScope`] call's), as given.
    pub(crate) extra: &'n [&'n str],
    /// `extra` sorted, only where derivations need to look names up in it.
    pub(crate) extra_sorted: Vec<&'n str>,
    /// Keep and free names.
    pub(crate) kept: NameFilter,
    /// Free names.
    pub(crate) free: NameFilter,
    pub(crate) bound: NameFilter,
    pub(crate) refusal: Option<Refusal>,
    /// `names.bound` was not read here (`refusal` is `None` for now): the renamer's one
    /// pass over the bound names ([`crate::rename::Renamer::new`]) checks them with a
    /// [`BoundCheck`], and a call whose check finds a refusal starts again from
    /// [`Prepared::settled`]. Only without derivations and extra names (`bound` is then
    /// never read).
    pub(crate) deferred: bool,
}

/// The bound-name refusal of some bound names, noted one by one: the least name also
/// free, else the least name in the reserved namespace.
pub(crate) struct BoundCheck<'n> {
    meets: Option<&'n str>,
    reserved: Option<&'n str>,
}

impl<'n> BoundCheck<'n> {
    pub(crate) fn new() -> Self {
        BoundCheck {
            meets: None,
            reserved: None,
        }
    }

    /// Notes the bound name `n` (`free`: the filter over `names.free`).
    #[inline(always)]
    pub(crate) fn note(&mut self, n: &'n str, free: &NameFilter, names: &Names) {
        if free.may_contain(n.as_bytes())
            && self.meets.is_none_or(|m| n < m)
            && names.free.contains(n)
        {
            self.meets = Some(n);
        }
        if is_reserved(n) && self.reserved.is_none_or(|r| n < r) {
            self.reserved = Some(n);
        }
    }

    pub(crate) fn refusal(&self) -> Option<Refusal> {
        match (self.meets, self.reserved) {
            (Some(name), _) => Some(Refusal::BoundMeetsFree {
                name: name.to_owned(),
            }),
            (None, Some(name)) => Some(Refusal::ReservedBoundName {
                name: name.to_owned(),
            }),
            (None, None) => None,
        }
    }
}

impl<'n> Prepared<'n> {
    pub(crate) fn new(names: &'n Names) -> Self {
        Prepared::with(names, Filters::new(names), &[])
    }

    /// [`Prepared::new`], but without derivations `names.bound` is left to the renamer's
    /// pass (see the `deferred` field): the bound names are read once per
    /// call instead of twice.
    pub(crate) fn deferred(names: &'n Names) -> Self {
        let filters = Filters::new(names);
        if !names.derivations.is_empty() {
            return Prepared::with(names, filters, &[]);
        }
        Prepared {
            names,
            extra: &[],
            extra_sorted: Vec::new(),
            kept: filters.kept,
            free: filters.free,
            bound: NameFilter::default(),
            refusal: None,
            deferred: true,
        }
    }

    /// This call's preparation with `names.bound` checked: `refusal` is what the
    /// renamer's [`BoundCheck`] found (as [`Prepared::with`] would have).
    pub(crate) fn settled(&self, refusal: Option<Refusal>) -> Prepared<'n> {
        Prepared {
            names: self.names,
            extra: self.extra,
            extra_sorted: self.extra_sorted.clone(),
            kept: self.kept,
            free: self.free,
            bound: self.bound,
            refusal,
            deferred: false,
        }
    }

    /// The bound names are those of `names` and `extra`: the refusal is that of a
    /// [`Names`] holding both (the least offending name, as the first of a sorted set).
    pub(crate) fn with(names: &'n Names, filters: Filters, extra: &'n [&'n str]) -> Self {
        let Filters { kept, free } = filters;
        let mut bound = NameFilter::default();
        let mut check = BoundCheck::new();
        let mut note = |n: &'n str| {
            bound.add(n.as_bytes());
            check.note(n, &free, names);
        };
        for n in &names.bound {
            note(n);
        }
        for &n in extra {
            note(n);
        }
        let refusal = check.refusal();
        let mut extra_sorted = Vec::new();
        if !names.derivations.is_empty() && !extra.is_empty() {
            extra_sorted = extra.to_vec();
            extra_sorted.sort_unstable();
        }
        Prepared {
            names,
            extra,
            extra_sorted,
            kept,
            free,
            bound,
            refusal,
            deferred: false,
        }
    }

    /// Calls `f` with every bound name: `names.bound`, then the extra ones (a name may
    /// come twice). Two plain loops rather than a chained iterator, which the set-up
    /// paths inline less well.
    #[inline(always)]
    pub(crate) fn each_bound(&self, mut f: impl FnMut(&'n str)) {
        let names: &'n Names = self.names;
        for b in &names.bound {
            f(b);
        }
        for &b in self.extra {
            f(b);
        }
    }

    /// How many bound names [`Self::each_bound`] gives.
    pub(crate) fn bound_len(&self) -> usize {
        self.names.bound.len() + self.extra.len()
    }

    /// Whether `name` is a keep or free name.
    #[inline(always)]
    pub(crate) fn is_kept(&self, name: &[u8]) -> bool {
        self.kept.may_contain(name) && self.in_kept(name)
    }

    /// [`Self::is_kept`] past its filter, out of line (the sets' searches are large).
    #[inline(never)]
    pub(crate) fn in_kept(&self, name: &[u8]) -> bool {
        std::str::from_utf8(name)
            .is_ok_and(|s| self.names.keep.contains(s) || self.names.free.contains(s))
    }

    #[inline(never)]
    pub(crate) fn is_bound(&self, name: &str) -> bool {
        self.bound.may_contain(name.as_bytes())
            && (self.names.bound.contains(name) || self.extra_sorted.binary_search(&name).is_ok())
    }
}

/// The names one renderer's kernels share, prepared once: a [`Names`] without the
/// per-kernel bound names, whose [`NameScope::canonical_kernel`] takes each kernel's
/// declared names as borrowed strings. Keying a kernel this way gives the [`Canonical`](crate::Canonical)
/// (key, text, refusals, pinned names) that [`canonical_kernel`](crate::canonical_kernel) gives with a [`Names`]
/// holding the scope's names and the kernel's bound names, without building that
/// `Names` (a `String` and a set node per name) for every kernel.
///
/// ```
/// use canonical_text::{canonical_kernel, NameScope, Names};
///
/// // Once per renderer: what every kernel shares (here the default observers and a
/// // free name), without bound names.
/// let scope = NameScope::new(Names::new().with_free(["expf"]));
/// let text = "void E_4(float* data0, const float* data1) { data0[0] = expf(data1[0]); }";
/// // Per kernel: the names the renderer declared in it.
/// let declared = ["data0", "data1"];
/// let c = scope.canonical_kernel(text, Some("E_4"), &declared);
/// assert_eq!(c.renamed_count(), 2);
/// // The same as building the whole `Names` for the kernel.
/// let names = Names::new().with_free(["expf"]).with_bound(declared);
/// assert_eq!(c.key(&[b"-O2"]), canonical_kernel(text, Some("E_4"), &names).key(&[b"-O2"]));
/// ```
///
/// Only which of some names made to collide in the renamer's table refuse renaming
/// ([`Refusal::NameCollisions`]) may depend on the order and repetition of the declared
/// names; either way is sound.
#[derive(Clone)]
pub struct NameScope {
    names: Names,
    filters: Filters,
}

impl std::fmt::Debug for NameScope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NameScope")
            .field("names", &self.names)
            .finish_non_exhaustive()
    }
}

impl NameScope {
    /// Prepares `names` (its bound names, if any, count for every kernel) for many calls.
    pub fn new(names: Names) -> Self {
        let filters = Filters::new(&names);
        NameScope { names, filters }
    }

    /// The names every kernel of this scope shares.
    pub fn names(&self) -> &Names {
        &self.names
    }

    pub(crate) fn parts(&self) -> (&Names, Filters) {
        (&self.names, self.filters)
    }

    pub(crate) fn prepared<'n>(&'n self, extra: &'n [&'n str]) -> Prepared<'n> {
        Prepared::with(&self.names, self.filters, extra)
    }
}

/// `__x` or `_X`: the C implementation's reserved namespace.
pub(crate) fn is_reserved(name: &str) -> bool {
    let b = name.as_bytes();
    b.len() >= 2 && b[0] == b'_' && (b[1] == b'_' || b[1].is_ascii_uppercase())
}

/// A loop or static-index symbol: `i` then one or more digits.
pub(crate) fn is_symbol(name: &[u8]) -> bool {
    name.len() >= 2 && name[0] == b'i' && name[1..].iter().all(u8::is_ascii_digit)
}

/// A scope-local: `v`, one or more digits, `_`, anything.
pub(crate) fn is_scope_local(name: &[u8]) -> bool {
    if name.first() != Some(&b'v') {
        return false;
    }
    let digits = name[1..].iter().take_while(|b| b.is_ascii_digit()).count();
    digits > 0 && name.get(1 + digits) == Some(&b'_')
}

pub(crate) fn all_digits(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())
}

/// The name a fissioned routine's segment kernel `i` is given: `<routine>__seg<i>`.
pub fn segment_kernel_name(routine: &str, i: usize) -> String {
    format!("{routine}__seg{i}")
}

/// What a kernel's own name contributes to its canonical text: a name made by
/// [`segment_kernel_name`] (`<routine>__seg<digits>`) loses its positional index and
/// becomes `<routine>__seg`; any other name is returned unchanged.
///
/// The routine's name stays because it can decide whether the text compiles at all; the
/// segment index never can, and adding or removing a segment shifts every later index.
pub fn kernel_token(name: &str) -> &str {
    // The index is the trailing run of digits; it must be non-empty and follow `__seg`
    // (the last `__seg` in the name, since the digits hold no `__seg`).
    let b = name.as_bytes();
    let digits = b.iter().rev().take_while(|c| c.is_ascii_digit()).count();
    let end = b.len() - digits;
    if digits > 0 && b[..end].ends_with(b"__seg") {
        // `end` follows an ASCII byte, so it is a char boundary.
        return name.get(..end).unwrap_or(name);
    }
    name
}
