//! The names a kernel text binds itself: [`text_bound`] reads the text's declarations
//! (parameters of its function definitions, block-scope declarations, `for`-init
//! declarations, labels) from the [`lexer`](crate::lexer)'s tokens and returns the names
//! every occurrence of which lies inside the scope of one of the text's own declarations
//! of it. Those names mean only what the text makes them mean, so renaming them
//! consistently changes nothing the compiler sees; [`canonical_kernel`](crate::canonical_kernel)
//! renames them by default ([`Names::text_names`](crate::Names::text_names)).
//!
//! # The scope rule, and what it never reads as a declaration
//!
//! A block-scope declaration's scope starts right after its declarator and ends at its
//! block's closing brace; a parameter's runs from its declarator to the end of the
//! function body; a `for`-init declaration's ends with the `for` statement; a label's is
//! its function. A name is text-bound only when it has at least one such declaration and
//! *no* occurrence outside all of them: `{ float expf = 1; } y = expf(x);` and
//! `x = 1; int x;` keep `expf` and `x`.
//!
//! Reading a declaration as an expression only makes fewer names text-bound (its name
//! then needs a cover of its own); reading an expression as a declaration could make a
//! global look local. So a statement is read as a declaration only when it starts with a
//! type keyword, a qualifier or storage class, `struct`/`union`/`enum`, or a type name
//! the text itself declared with a file-scope `typedef` (or a standard `<stdint.h>` /
//! `<stddef.h>` name) that no recognized declaration shadows; anything else starting
//! with a name the text has not declared is an *unknown statement* whose names are all
//! kept. Kept as well, at every occurrence: names at file scope (functions, globals,
//! typedefs, their prototypes' parameters), `extern` and `typedef` declarations in
//! blocks, function declarators, parenthesized declarators, struct, union and enum
//! bodies (members and enumerators), tags, names inside GNU attributes, `asm`, `typeof`
//! and `_Alignas`, the arguments of a function-like macro the text defines, and the
//! parameters of a K&R definition. A text whose structure cannot be read as that (a
//! conditional directive, an `#include` inside a function, a text macro whose body holds
//! a brace, a semicolon or an unbalanced bracket, a digraph, a statement expression,
//! a type name redeclared or used in an unread construct, unbalanced braces) has no
//! text-bound names at all, and says why.
//!
//! Macros from headers are the one thing the text cannot show: like a bound name's, a
//! text-bound name is renamed on the premise that no header macro the text uses observes
//! a spelling (those are [`Names::observers`](crate::Names::observers); cc-backend learns
//! them from the compiler) or expands to an `extern` declaration or an unbalanced brace.
//!
//! [`reference_text_bound`] computes the same answer the slow, obvious way (every
//! declaration's scope as a token interval, every occurrence checked against all of
//! them); the property tests hold the two together.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use crate::key::Canonical;
use crate::lexer::{Lexer, TokenKind};
use crate::names::{Filters, Names, Prepared, is_reserved, is_scope_local, is_symbol};

/// What [`text_bound`] found in a text.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct TextBound<'t> {
    /// The text-bound names, in order of first occurrence.
    pub(crate) names: Vec<&'t str>,
    /// Names the text declares (a recognized declaration) but that are kept, each with
    /// why, in order of first occurrence.
    pub(crate) kept: Vec<(&'t str, &'static str)>,
    /// Why the text has no text-bound names at all, when its structure cannot be read.
    pub(crate) refused: Option<&'static str>,
    /// The names of the function definitions the text holds.
    pub(crate) functions: Vec<&'t str>,
    /// Whether the text has an `#include`, `#include_next` or `#import` line.
    pub(crate) includes: bool,
    /// Whether every file-scope construct of the text is a function definition or a
    /// `typedef` (no object or prototype declared at file scope).
    pub(crate) only_functions: bool,
    /// Whether the text spells a storage class that keeps state across calls (`static`,
    /// `_Thread_local`, `thread_local`, `__thread`).
    pub(crate) keeps_state: bool,
}

/// Why an own name is keyed whole (not by its role, nor less a segment index or a
/// declared counter): twins keyed alike share one compiled function, and so would share
/// this state.
pub(crate) const KEEPS_STATE: &str =
    "the text keeps state across calls (writable `static` or thread-local storage)";
/// As [`KEEPS_STATE`], for an object (or a prototype) declared at file scope.
pub(crate) const FILE_SCOPE_OBJECTS: &str =
    "the text declares something at file scope besides function definitions and typedefs";

/// Why a declared name is kept: used outside its declarations' scope.
pub(crate) const OUTSIDE: &str = "used outside its declarations' scope";

/// The names `src` binds itself (see the module docs).
pub(crate) fn text_bound(src: &str) -> TextBound<'_> {
    let mut p = Parser::new(src);
    p.run(false);
    p.finish()
}

/// The names the text binds itself (what the fast reading in `declared` finds), computed the slow way: the same reading of declarations, but each
/// declaration's scope recorded as a token interval and each occurrence checked against
/// every interval afterwards (no running counts, no frames).
pub fn reference_text_bound(src: &str) -> (Vec<String>, Option<&'static str>) {
    let mut p = Parser::new(src);
    p.run(true);
    let refused = p.refused;
    if refused.is_some() {
        return (Vec::new(), refused);
    }
    let mut ok = vec![true; p.names.len()];
    let mut declared = vec![false; p.names.len()];
    for d in &p.log.decls {
        declared[d.name as usize] = true;
    }
    for &(id, _) in &p.log.poisoned {
        ok[id as usize] = false;
    }
    for &(id, at, func) in &p.log.uses {
        let covered = p
            .log
            .decls
            .iter()
            .any(|d| d.name == id && d.from <= at && at < d.to);
        let label = func != 0 && p.log.labels.contains(&(id, func));
        if !(covered || label && p.log.goto_at.contains(&at)) {
            ok[id as usize] = false;
        }
    }
    for &(id, func) in &p.log.gotos {
        if !p.log.labels.contains(&(id, func)) {
            ok[id as usize] = false;
        }
    }
    for &(id, _) in &p.log.labels {
        declared[id as usize] = true;
    }
    let names = (0..p.names.len())
        .filter(|&i| declared[i] && ok[i])
        .map(|i| p.spelling(i as u32).to_owned())
        .collect();
    (names, None)
}

/// What renaming the names a kernel text binds itself did for one kernel
/// ([`Canonical::text_names`](crate::Canonical::text_names)): how many it renamed, which
/// declared names it kept and why, or why it read none. It tells a census or a miss
/// explanation why a kernel was keyed over its exact names ("keyed over its exact text
/// because ...").
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TextNames {
    pub(crate) renamed: usize,
    pub(crate) kept: Vec<(String, &'static str)>,
    pub(crate) kept_total: usize,
    pub(crate) refused: Option<&'static str>,
}

impl TextNames {
    /// How many distinct names were renamed because the text declares them (names the
    /// caller also listed as bound, and minted shapes, not counted).
    pub fn renamed(&self) -> usize {
        self.renamed
    }

    /// Names the text declares that were kept as spelled, each with why, in order of
    /// first occurrence: the first [`TextNames::KEPT_LISTED`] of them.
    pub fn kept(&self) -> &[(String, &'static str)] {
        &self.kept
    }

    /// How many declared names were kept in all (the list holds the first few).
    pub fn kept_total(&self) -> usize {
        self.kept_total
    }

    /// Why no name was read from the text at all (its structure could not be read
    /// exactly: a conditional directive, a text macro holding a brace, ...); `None` when
    /// it was read, or when text-derived names are off ([`Names::text_names`](crate::Names::text_names)).
    pub fn refused(&self) -> Option<&'static str> {
        self.refused
    }

    /// How many kept names [`TextNames::kept`] lists at most.
    pub const KEPT_LISTED: usize = 8;
}

/// [`canonical_kernel`](crate::canonical_kernel) with the names `text` binds itself
/// added to the caller's bound names (`extra`: a [`NameScope`](crate::NameScope) call's
/// declared names): none the caller keeps or frees, none in the reserved namespace, not
/// the kernel's own name.
pub(crate) fn canonical_with_text_names(
    text: &str,
    kernel_name: Option<&str>,
    names: &Names,
    filters: Filters,
    extra: &[&str],
) -> Canonical {
    let found = text_bound(text);
    let mut all: Vec<&str> = extra.to_vec();
    // The caller's declared names, sorted once for the lookups below (not a scan per
    // name: a tinygrad kernel declares about 200).
    let mut listed: Vec<&str> = extra.to_vec();
    listed.sort_unstable();
    let mut kept: Vec<(&str, &'static str)> = Vec::new();
    for &n in &found.names {
        let kept_why = if Some(n) == kernel_name {
            continue;
        } else if is_reserved(n) {
            "in the reserved namespace"
        } else if filters.kept.may_contain(n.as_bytes())
            && (names.keep.contains(n) || names.free.contains(n))
        {
            "a free or kept name"
        } else {
            // A minted shape or a listed name is renamed anyway: not entered twice.
            let minted =
                names.minted_shapes && (is_symbol(n.as_bytes()) || is_scope_local(n.as_bytes()));
            if !minted && listed.binary_search(&n).is_err() && !names.bound.contains(n) {
                all.push(n);
            }
            continue;
        };
        kept.push((n, kept_why));
    }
    kept.extend(found.kept.iter().copied());
    let from_text = &all[extra.len()..];
    let role = match kernel_name {
        Some(own) => own_role(own, names, filters, &found, &listed),
        None => Ok(()),
    };
    let mut c = if all.is_empty() {
        // Nothing to add: the call as without text names.
        crate::canonical::canonical_prepared(text, kernel_name, &Prepared::deferred(names), role)
    } else {
        crate::canonical::canonical_prepared(
            text,
            kernel_name,
            &Prepared::with(names, filters, &all),
            role,
        )
    };
    let renamed = if c.renamed_count == 0 {
        0
    } else {
        from_text
            .iter()
            .filter(|n| c.pinned.binary_search_by(|p| p.as_str().cmp(n)).is_err())
            .count()
    };
    c.text_names = TextNames {
        renamed,
        kept_total: kept.len(),
        kept: kept
            .iter()
            .take(TextNames::KEPT_LISTED)
            .map(|&(n, why)| (n.to_owned(), why))
            .collect(),
        refused: found.refused,
    };
    c
}

/// Whether the kernel's own name `own` may be keyed by its role
/// ([`Names::kernel_name_by_role`](crate::Names::kernel_name_by_role)), else why it is
/// keyed as spelled. `found` is the text's reading, `listed` the caller's declared names
/// of a [`NameScope`](crate::NameScope) call, sorted. The observers, the pins and the
/// attribute regions are the renamer's to apply afterwards (an observed spelling keys the
/// exact text with the whole name, a pinned one stays in the encoding).
pub(crate) fn own_role(
    own: &str,
    names: &Names,
    filters: Filters,
    found: &TextBound<'_>,
    listed: &[&str],
) -> Result<(), &'static str> {
    let b = own.as_bytes();
    if !names.kernel_name_by_role {
        return Err("keyed as spelled by the caller (`Names::kernel_name_by_role` is off)");
    }
    if !names.text_names {
        return Err(crate::canonical::KEPT_NO_READING);
    }
    if found.refused.is_some() {
        return Err("the text's declarations could not be read exactly");
    }
    if is_reserved(own) {
        return Err("in the reserved namespace");
    }
    let minted = b.contains(&b'_')
        && b.iter().any(u8::is_ascii_digit)
        && b.first().is_some_and(u8::is_ascii_alphabetic)
        && b.iter().all(|c| c.is_ascii_alphanumeric() || *c == b'_');
    if !minted {
        return Err(
            "not a minted name (a letter first, then letters, digits and `_`, with a `_` and a digit): the compiler may give its spelling a meaning",
        );
    }
    if (filters.kept.may_contain(b) && (names.keep.contains(own) || names.free.contains(own)))
        || names.bound.contains(own)
        || listed.binary_search(&own).is_ok()
    {
        return Err("a free, kept or bound name of the caller");
    }
    if !found.functions.contains(&own) {
        return Err("the text defines no function of that name");
    }
    // Twins keyed alike share one compiled function: state it keeps across calls, or an
    // object the text defines at file scope, would then be shared by two kernels that each
    // have their own when compiled apart.
    if found.keeps_state {
        return Err(KEEPS_STATE);
    }
    if !found.only_functions {
        return Err(FILE_SCOPE_OBJECTS);
    }
    if found.includes && !names.included_macros_known {
        return Err(
            "the text includes a header whose macros were not learned (`Names::included_macros_known`)",
        );
    }
    Ok(())
}

/// A multiply-rotate hash over 8-byte words (the names of one text, in a table of one
/// call: no adversary gains anything from collisions but time, and a text's names are
/// few).
#[derive(Default)]
struct WordHasher(u64);

impl Hasher for WordHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            let mut w = [0u8; 8];
            w.copy_from_slice(c);
            self.mix(u64::from_le_bytes(w));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut w = [0u8; 8];
            w[..rest.len()].copy_from_slice(rest);
            self.mix(u64::from_le_bytes(w));
        }
    }

    #[inline]
    fn write_usize(&mut self, n: usize) {
        self.mix(n as u64);
    }

    #[inline]
    fn finish(&self) -> u64 {
        self.0
    }
}

impl WordHasher {
    #[inline]
    fn mix(&mut self, w: u64) {
        self.0 = (self.0.rotate_left(5) ^ w).wrapping_mul(0x517c_c1b7_2722_0a95);
    }
}

type Index<'t> = HashMap<&'t [u8], u32, BuildHasherDefault<WordHasher>>;

/// What kind of word an identifier is, for reading declarations.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kw {
    /// Not a keyword.
    None,
    /// A type specifier keyword.
    Type,
    /// A qualifier, storage class or function specifier that cannot make a declaration
    /// refer outside the text.
    Spec,
    Extern,
    Typedef,
    /// `struct`, `union`.
    Tag,
    Enum,
    /// Takes a parenthesized group whose words are kept: attributes, `asm`, `typeof`,
    /// `_Alignas`, `_Atomic(..)`, static assertions.
    Paren,
    /// `__extension__`.
    Ext,
    /// Starts a statement: `if`, `for`, `return`, ...
    Stmt,
    /// Any other keyword (`sizeof`, `_Generic`, ...).
    Other,
}

fn keyword(w: &[u8]) -> Kw {
    match w {
        b"void" | b"char" | b"short" | b"int" | b"long" | b"float" | b"double" | b"signed"
        | b"unsigned" | b"_Bool" | b"bool" | b"_Complex" | b"__complex__" | b"__int128"
        | b"__fp16" | b"_Float16" | b"__bf16" | b"_Float32" | b"_Float64" | b"_Float128"
        | b"__float128" | b"__signed__" | b"__signed" => Kw::Type,
        b"const" | b"volatile" | b"restrict" | b"__restrict" | b"__restrict__" | b"__const"
        | b"__const__" | b"__volatile" | b"__volatile__" | b"static" | b"register" | b"inline"
        | b"__inline" | b"__inline__" | b"_Noreturn" | b"constexpr" => Kw::Spec,
        // Thread-locals and C23 `auto` are read as unknown statements (never declared).
        b"extern" | b"_Thread_local" | b"thread_local" | b"__thread" | b"auto" => Kw::Extern,
        b"typedef" => Kw::Typedef,
        b"struct" | b"union" => Kw::Tag,
        b"enum" => Kw::Enum,
        b"__attribute__" | b"__attribute" | b"__declspec" | b"_Alignas" | b"alignas"
        | b"typeof" | b"__typeof__" | b"__typeof" | b"typeof_unqual" | b"_Atomic" | b"asm"
        | b"__asm__" | b"__asm" | b"_Static_assert" | b"static_assert" => Kw::Paren,
        b"__extension__" => Kw::Ext,
        b"if" | b"else" | b"for" | b"while" | b"do" | b"switch" | b"case" | b"default"
        | b"return" | b"break" | b"continue" | b"goto" => Kw::Stmt,
        b"sizeof"
        | b"_Alignof"
        | b"alignof"
        | b"__alignof__"
        | b"__alignof"
        | b"_Generic"
        | b"true"
        | b"false"
        | b"nullptr"
        | b"__builtin_offsetof"
        | b"__builtin_va_arg"
        | b"__builtin_types_compatible_p"
        | b"__real__"
        | b"__imag__" => Kw::Other,
        _ => Kw::None,
    }
}

/// Type names from `<stdint.h>` and `<stddef.h>`: the C standard reserves them for
/// these types.
fn standard_type(w: &[u8]) -> bool {
    matches!(
        w,
        b"size_t"
            | b"ptrdiff_t"
            | b"intptr_t"
            | b"uintptr_t"
            | b"int8_t"
            | b"int16_t"
            | b"int32_t"
            | b"int64_t"
            | b"uint8_t"
            | b"uint16_t"
            | b"uint32_t"
            | b"uint64_t"
    )
}

/// One significant token (no white space, comment or directive).
#[derive(Clone, Copy)]
struct Tk {
    /// The name's id for an identifier, else [`PUNCT`] or [`OTHER`].
    id: u32,
    /// For a punctuator, its first byte (and a second byte for `->`, `::`, `...`).
    p: [u8; 2],
}

const PUNCT: u32 = u32::MAX;
const OTHER: u32 = u32::MAX - 1;
/// A `[[...]]` attribute (its words are never renamed: the renamer pins them).
const ATTR: u32 = u32::MAX - 2;

#[derive(Clone, Copy)]
struct NameState {
    kw: Kw,
    /// A recognized declaration (or label) of it was read.
    declared: bool,
    /// Why it is kept, once it must be.
    bad: Option<&'static str>,
    /// How many of its recognized declarations are in scope here.
    active: u32,
    /// A type name: a file-scope `typedef` of the text, or a standard one.
    typedef: bool,
    /// A macro defined in the text (`fn_macro`: function-like).
    macro_: bool,
    fn_macro: bool,
}

/// Declarations and uses, kept by the reference reading.
#[derive(Default)]
struct Log {
    /// (name, first token of its scope, end of its scope) of each recognized declaration.
    decls: Vec<Decl>,
    /// (name, token, function) of each occurrence that needs a declaration in scope.
    uses: Vec<(u32, usize, u32)>,
    poisoned: Vec<(u32, usize)>,
    labels: Vec<(u32, u32)>,
    gotos: Vec<(u32, u32)>,
    goto_at: Vec<usize>,
    /// Open declarations per frame (indices into `decls`), closed when the frame ends.
    open: Vec<Vec<usize>>,
}

struct Decl {
    name: u32,
    from: usize,
    to: usize,
}

struct Parser<'t> {
    src: &'t str,
    toks: Vec<Tk>,
    names: Vec<NameState>,
    spans: Vec<(u32, u32)>,
    /// Each open scope's recognized declarations, to end when it ends.
    frames: Vec<Vec<u32>>,
    refused: Option<&'static str>,
    /// The function being read (1-based; 0 at file scope).
    func: u32,
    labels: Vec<(u32, u32)>,
    gotos: Vec<(u32, u32)>,
    /// The names of the function definitions read.
    defined: Vec<u32>,
    /// File-scope constructs read (`typedef`s aside), and how many of them were function
    /// definitions.
    constructs: usize,
    functions: usize,
    /// Whether a directive includes a header.
    includes: bool,
    /// The reference's log, when `logging`.
    logging: bool,
    log: Log,
}

/// Where an expression stops at depth 0.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Stop {
    /// `;`
    Semi,
    /// `;` or `,`
    SemiComma,
    /// Only at an unmatched closer.
    Close,
    /// `:` not matching a `?`.
    Colon,
}

impl<'t> Parser<'t> {
    fn new(src: &'t str) -> Self {
        let mut p = Parser {
            src,
            toks: Vec::new(),
            names: Vec::new(),
            spans: Vec::new(),
            frames: Vec::new(),
            refused: None,
            func: 0,
            labels: Vec::new(),
            gotos: Vec::new(),
            defined: Vec::new(),
            constructs: 0,
            functions: 0,
            includes: false,
            logging: false,
            log: Log::default(),
        };
        p.collect();
        p
    }

    fn spelling(&self, id: u32) -> &'t str {
        let (s, e) = self.spans[id as usize];
        self.src.get(s as usize..e as usize).unwrap_or_default()
    }

    fn refuse(&mut self, why: &'static str) {
        if self.refused.is_none() {
            self.refused = Some(why);
        }
    }

    /// Tokenizes, interns the names, and reads the directives.
    fn collect(&mut self) {
        let bytes = self.src.as_bytes();
        let mut index: Index<'t> =
            Index::with_capacity_and_hasher(bytes.len() / 32 + 16, Default::default());
        self.toks.reserve(bytes.len() / 4);
        let mut depth = 0i64;
        // The last name seen per (first byte, last byte, length) slot: most names repeat,
        // and a hit here costs one compare instead of a table lookup.
        let mut recent = [u32::MAX; 256];
        let mut lexer = Lexer::new(bytes);
        loop {
            // Blanks are skipped without a token (the tokens read are the lexer's all the
            // same): about 5% of this reading's instructions.
            lexer.skip_blanks();
            let Some(t) = lexer.next() else { break };
            let b = t.bytes(bytes);
            match t.kind {
                TokenKind::Whitespace | TokenKind::LineComment | TokenKind::BlockComment => {}
                TokenKind::Ident => {
                    let slot = crate::names::NameFilter::slot(b).unwrap_or(0);
                    let r = recent[slot];
                    if r != u32::MAX {
                        let (s, e) = self.spans[r as usize];
                        if bytes.get(s as usize..e as usize) == Some(b) {
                            self.toks.push(Tk { id: r, p: [0, 0] });
                            continue;
                        }
                    }
                    let n = self.names.len() as u32;
                    let id = *index.entry(b).or_insert(n);
                    recent[slot] = id;
                    if id == n {
                        self.names.push(NameState {
                            kw: keyword(b),
                            declared: false,
                            bad: None,
                            active: 0,
                            typedef: standard_type(b),
                            macro_: false,
                            fn_macro: false,
                        });
                        self.spans.push((t.start as u32, t.end as u32));
                    }
                    self.toks.push(Tk { id, p: [0, 0] });
                }
                TokenKind::Punct => {
                    let p = match b {
                        b"{" => {
                            depth += 1;
                            [b'{', 0]
                        }
                        b"}" => {
                            depth -= 1;
                            [b'}', 0]
                        }
                        b"<%" | b"%>" | b"<:" | b":>" | b"%:" | b"%:%:" => {
                            self.refuse("a digraph");
                            [b'?', b'?']
                        }
                        [a] => [*a, 0],
                        [a, c, ..] => [*a, *c],
                        [] => [0, 0],
                    };
                    self.toks.push(Tk { id: PUNCT, p });
                }
                TokenKind::Preprocessor => self.directive(b, depth, &mut index),
                TokenKind::Attribute => self.toks.push(Tk {
                    id: ATTR,
                    p: [0, 0],
                }),
                _ => self.toks.push(Tk {
                    id: OTHER,
                    p: [0, 0],
                }),
            }
        }
        if bytes.len() > u32::MAX as usize / 2 {
            self.refuse("a text over 2 GiB");
        }
    }

    /// Reads one directive: a conditional or an `#include` inside a function refuses, a
    /// `#define` names a macro (whose body must be balanced and hold no brace or `;`).
    fn directive(&mut self, line: &'t [u8], depth: i64, index: &mut Index<'t>) {
        let rest = line
            .strip_prefix(b"#")
            .or_else(|| line.strip_prefix(b"%:"))
            .unwrap_or(line);
        let word = |s: &'t [u8]| -> (&'t [u8], &'t [u8]) {
            let s = s.trim_ascii_start();
            let n = s
                .iter()
                .take_while(|b| b.is_ascii_alphanumeric() || **b == b'_')
                .count();
            (&s[..n], &s[n..])
        };
        let (name, after) = word(rest);
        match name {
            b"" if after.trim_ascii().is_empty() => {}
            b"if" | b"ifdef" | b"ifndef" | b"elif" | b"else" | b"endif" | b"elifdef"
            | b"elifndef" => self.refuse("a conditional directive"),
            b"include" | b"include_next" | b"import" if depth != 0 => {
                self.refuse("an #include inside a function")
            }
            b"include" | b"include_next" | b"import" => self.includes = true,
            b"define" => {
                let (m, body) = word(after);
                if m.is_empty() {
                    return self.refuse("a directive it cannot read");
                }
                let function_like = body.first() == Some(&b'(');
                let (mut round, mut square) = (0i64, 0i64);
                for &c in body {
                    match c {
                        b'{' | b'}' | b';' => return self.refuse("a macro holding a brace or `;`"),
                        b'(' => round += 1,
                        b')' => round -= 1,
                        b'[' => square += 1,
                        b']' => square -= 1,
                        _ => {}
                    }
                    if round < 0 || square < 0 {
                        break;
                    }
                }
                if round != 0 || square != 0 {
                    return self.refuse("a macro with unbalanced brackets");
                }
                let n = self.names.len() as u32;
                let id = *index.entry(m).or_insert(n);
                if id == n {
                    let start = m.as_ptr() as usize - self.src.as_ptr() as usize;
                    self.names.push(NameState {
                        kw: keyword(m),
                        declared: false,
                        bad: None,
                        active: 0,
                        typedef: false,
                        macro_: true,
                        fn_macro: function_like,
                    });
                    self.spans.push((start as u32, (start + m.len()) as u32));
                }
                let s = &mut self.names[id as usize];
                s.macro_ = true;
                s.fn_macro |= function_like;
                s.bad.get_or_insert("a macro of the text");
            }
            b"" => self.refuse("a directive it cannot read"),
            _ => {}
        }
    }

    fn finish(self) -> TextBound<'t> {
        let mut out = TextBound {
            refused: self.refused,
            includes: self.includes,
            ..TextBound::default()
        };
        if out.refused.is_some() {
            return out;
        }
        out.functions = self.defined.iter().map(|&id| self.spelling(id)).collect();
        out.only_functions = self.constructs == self.functions;
        out.keeps_state = (0..self.toks.len()).any(|i| self.keeps_state_at(i));
        for (i, s) in self.names.iter().enumerate() {
            if !s.declared {
                continue;
            }
            let name = self.spelling(i as u32);
            match s.bad {
                None => out.names.push(name),
                Some(why) => out.kept.push((name, why)),
            }
        }
        out
    }

    // --- reading -------------------------------------------------------------------

    fn run(&mut self, logging: bool) {
        self.logging = logging;
        if self.refused.is_some() {
            return;
        }
        let mut i = 0;
        while i < self.toks.len() && self.refused.is_none() {
            // A `typedef` declares a type: it holds no state, as a function definition.
            let typedef = self
                .ident(i)
                .is_some_and(|id| self.spelling(id) == "typedef");
            self.constructs += usize::from(!typedef);
            i = self.external(i);
        }
    }

    /// Whether the token at `i` begins storage that keeps state across calls: thread-local
    /// storage, or `static` storage that is not `const` all through (a `static const`
    /// declaration with no `*` before its `;`, `=` or `{` is read-only; anything else,
    /// `static` functions included, counts).
    fn keeps_state_at(&self, i: usize) -> bool {
        let word = |k: usize| self.ident(k).map(|id| self.spelling(id));
        match word(i) {
            Some("_Thread_local" | "thread_local" | "__thread") => true,
            Some("static") => {
                if word(i + 1) != Some("const") {
                    return true;
                }
                let mut k = i + 2;
                while let Some(t) = self.toks.get(k) {
                    if t.id == PUNCT {
                        match t.p {
                            [b'*', 0] => return true,
                            [b';' | b'=' | b'{', 0] => return false,
                            _ => {}
                        }
                    }
                    k += 1;
                }
                true
            }
            _ => false,
        }
    }

    fn punct(&self, i: usize) -> Option<[u8; 2]> {
        self.toks.get(i).filter(|t| t.id == PUNCT).map(|t| t.p)
    }

    fn is(&self, i: usize, c: u8) -> bool {
        self.punct(i) == Some([c, 0])
    }

    fn ident(&self, i: usize) -> Option<u32> {
        self.toks.get(i).map(|t| t.id).filter(|&id| id < ATTR)
    }

    /// `i`, or the index after the `[[...]]` attributes starting there.
    fn attrs(&self, mut i: usize) -> usize {
        while self.toks.get(i).is_some_and(|t| t.id == ATTR) {
            i += 1;
        }
        i
    }

    fn kw(&self, i: usize) -> Option<Kw> {
        self.ident(i).map(|id| self.names[id as usize].kw)
    }

    /// A name kept at every occurrence. `may_shadow`: the occurrence may declare the
    /// name as an ordinary identifier, so a type name there makes the text unreadable.
    fn poison(&mut self, id: u32, at: usize, why: &'static str, may_shadow: bool) {
        let s = &mut self.names[id as usize];
        if s.kw != Kw::None {
            return;
        }
        s.bad.get_or_insert(why);
        if may_shadow && s.typedef {
            self.refuse("a type name redeclared or in an unread construct");
        }
        if self.logging {
            self.log.poisoned.push((id, at));
        }
    }

    /// An occurrence that needs a recognized declaration in scope.
    fn occurrence(&mut self, id: u32, at: usize) {
        let s = &mut self.names[id as usize];
        if s.kw != Kw::None {
            return;
        }
        if s.active == 0 {
            s.bad.get_or_insert(OUTSIDE);
        }
        if self.logging {
            self.log.uses.push((id, at, self.func));
        }
    }

    /// A recognized declaration of `id` whose scope starts at token `at`.
    fn declare(&mut self, id: u32, at: usize) {
        let s = &mut self.names[id as usize];
        s.declared = true;
        s.active += 1;
        if let Some(f) = self.frames.last_mut() {
            f.push(id);
        }
        if self.logging {
            self.log.decls.push(Decl {
                name: id,
                from: at,
                to: usize::MAX,
            });
            let k = self.log.decls.len() - 1;
            if let Some(f) = self.log.open.last_mut() {
                f.push(k);
            }
        }
    }

    fn open(&mut self) {
        self.frames.push(Vec::new());
        if self.logging {
            self.log.open.push(Vec::new());
        }
    }

    /// Ends the innermost scope at token `at` (exclusive).
    fn close(&mut self, at: usize) {
        for id in self.frames.pop().unwrap_or_default() {
            let s = &mut self.names[id as usize];
            s.active = s.active.saturating_sub(1);
        }
        if self.logging {
            for k in self.log.open.pop().unwrap_or_default() {
                self.log.decls[k].to = at;
            }
        }
    }

    /// Keeps every name from `i` to the matching closer of the group opened at `i`
    /// (`(`, `[` or `{`); returns the index after it.
    fn skip_group(&mut self, i: usize, why: &'static str, may_shadow: bool) -> usize {
        let mut depth = 0i64;
        let mut j = i;
        while j < self.toks.len() {
            match self.punct(j) {
                Some([b'(' | b'[' | b'{', 0]) => depth += 1,
                Some([b')' | b']' | b'}', 0]) => {
                    depth -= 1;
                    if depth <= 0 {
                        return j + 1;
                    }
                }
                _ => {
                    if let Some(id) = self.ident(j) {
                        self.poison(id, j, why, may_shadow);
                    }
                }
            }
            j += 1;
        }
        self.refuse("unbalanced brackets");
        j
    }

    /// Whether the identifier at `i` follows `.` or `->` (a member).
    fn member(&self, i: usize) -> bool {
        i > 0 && matches!(self.punct(i - 1), Some([b'.', 0] | [b'-', b'>']))
    }

    /// Scans an expression from `i` to a stop at depth 0 (not consumed) or an unmatched
    /// closer (not consumed), noting its names.
    fn expr(&mut self, mut i: usize, stop: Stop) -> usize {
        let mut depth = 0i64;
        let mut questions = 0i64;
        while i < self.toks.len() && self.refused.is_none() {
            let t = self.toks[i];
            if t.id == PUNCT {
                match t.p {
                    [b'(' | b'[' | b'{', 0] => {
                        if t.p[0] == b'{' && i > 0 && self.is(i - 1, b'(') {
                            self.refuse("a statement expression");
                        }
                        depth += 1;
                    }
                    [b')' | b']' | b'}', 0] => {
                        if depth == 0 {
                            return i;
                        }
                        depth -= 1;
                    }
                    [b';', 0] if depth == 0 && stop != Stop::Close => return i,
                    [b',', 0] if depth == 0 && stop == Stop::SemiComma => return i,
                    [b'?', 0] if depth == 0 => questions += 1,
                    [b':', 0] if depth == 0 && stop == Stop::Colon => {
                        if questions == 0 {
                            return i;
                        }
                        questions -= 1;
                    }
                    _ => {}
                }
                i += 1;
                continue;
            }
            let Some(id) = self.ident(i) else {
                i += 1;
                continue;
            };
            let s = self.names[id as usize];
            if self.member(i) {
                i += 1;
            } else if s.kw == Kw::Paren && self.is(i + 1, b'(') {
                i = self.skip_group(i + 1, "inside an attribute, asm or typeof", false);
            } else if s.fn_macro && self.is(i + 1, b'(') {
                i = self.skip_group(i + 1, "an argument of a macro of the text", true);
            } else {
                self.occurrence(id, i);
                i += 1;
            }
        }
        i
    }

    /// Keeps every name to the end of an unknown statement (`;` at depth 0, consumed,
    /// or an unmatched closer, not consumed).
    fn unknown(&mut self, mut i: usize) -> usize {
        let mut depth = 0i64;
        while i < self.toks.len() {
            match self.punct(i) {
                Some([b'(' | b'[' | b'{', 0]) => depth += 1,
                Some([b')' | b']' | b'}', 0]) => {
                    if depth == 0 {
                        return i;
                    }
                    depth -= 1;
                }
                Some([b';', 0]) if depth == 0 => return i + 1,
                _ => {
                    if let Some(id) = self.ident(i)
                        && !self.member(i)
                    {
                        self.poison(id, i, "in a statement it cannot read", true);
                    }
                }
            }
            i += 1;
        }
        i
    }

    fn expect(&mut self, i: usize, c: u8) -> Option<usize> {
        if self.is(i, c) {
            Some(i + 1)
        } else {
            self.refuse("a statement it cannot read");
            None
        }
    }

    /// Whether a declaration may start at `i`.
    fn declaration_start(&self, i: usize) -> bool {
        let Some(id) = self.ident(i) else {
            return false;
        };
        let s = &self.names[id as usize];
        match s.kw {
            Kw::Type | Kw::Spec | Kw::Extern | Kw::Typedef | Kw::Tag | Kw::Enum | Kw::Paren => true,
            Kw::Ext => true,
            Kw::None => s.typedef && s.active == 0 && !s.macro_,
            Kw::Stmt | Kw::Other => false,
        }
    }

    /// One statement at `i`; the index after it.
    fn stmt(&mut self, i: usize) -> usize {
        if self.refused.is_some() {
            return self.toks.len();
        }
        let Some(t) = self.toks.get(i).copied() else {
            self.refuse("unbalanced braces");
            return i;
        };
        if t.id == PUNCT {
            return match t.p {
                [b'{', 0] => self.block(i),
                [b';', 0] => i + 1,
                [b'}', 0] => {
                    self.refuse("a statement it cannot read");
                    i
                }
                _ => self.expr_stmt(i),
            };
        }
        let Some(id) = self.ident(i) else {
            return self.expr_stmt(i);
        };
        let s = self.names[id as usize];
        if s.kw == Kw::Stmt {
            return self.control(i);
        }
        if s.kw == Kw::None && self.is(i + 1, b':') {
            // A label.
            if s.typedef || s.macro_ {
                self.refuse("a statement it cannot read");
                return self.toks.len();
            }
            self.names[id as usize].declared = true;
            self.labels.push((id, self.func));
            if self.logging {
                self.log.labels.push((id, self.func));
            }
            return self.labelled(i + 2);
        }
        if self.declaration_start(i) {
            return match self.decl(i, false) {
                Some(e) => e,
                None => self.unknown(i),
            };
        }
        // A name not declared here followed by an assignment, a subscript, a member
        // access or `++`/`--` starts no declaration: an expression, its names checked.
        let assigned = self.punct(i + 1).is_some_and(|p| {
            matches!(
                p,
                [b'=' | b'[' | b'.', 0] | [b'-', b'>'] | [b'+', b'+'] | [b'-', b'-']
            ) || (p[1] == b'=' && !matches!(p[0], b'=' | b'!' | b'<' | b'>'))
        });
        if s.kw == Kw::Other
            || (s.kw == Kw::None && (s.active > 0 || assigned || self.call(i + 1)) && !s.macro_)
        {
            return self.expr_stmt(i);
        }
        self.unknown(i)
    }

    /// Whether the group at `i` is a call's argument list, never a parenthesized
    /// declarator (`T (x);` declares `x`): it holds a literal or a comma at its own depth.
    fn call(&self, i: usize) -> bool {
        if !self.is(i, b'(') {
            return false;
        }
        let mut depth = 0i64;
        for j in i..self.toks.len() {
            let t = self.toks[j];
            match (t.id, t.p) {
                (PUNCT, [b'(' | b'[' | b'{', 0]) => depth += 1,
                (PUNCT, [b')' | b']' | b'}', 0]) => {
                    depth -= 1;
                    if depth == 0 {
                        return false;
                    }
                }
                (PUNCT, [b',', 0]) if depth == 1 => return true,
                (OTHER, _) if depth == 1 => return true,
                _ => {}
            }
        }
        false
    }

    /// The statement after a label (none before a closing brace).
    fn labelled(&mut self, i: usize) -> usize {
        if self.is(i, b'}') { i } else { self.stmt(i) }
    }

    fn expr_stmt(&mut self, i: usize) -> usize {
        let j = self.expr(i, Stop::Semi);
        self.expect(j, b';').unwrap_or(self.toks.len())
    }

    /// A parenthesized expression at `i`; the index after its `)`.
    fn paren(&mut self, i: usize) -> Option<usize> {
        let j = self.expect(i, b'(')?;
        let j = self.expr(j, Stop::Close);
        self.expect(j, b')')
    }

    fn control(&mut self, i: usize) -> usize {
        let end = self.toks.len();
        let word = self.spelling(self.toks[i].id).as_bytes();
        match word {
            b"if" => {
                let Some(j) = self.paren(i + 1) else {
                    return end;
                };
                let k = self.stmt(j);
                if self.kw(k) == Some(Kw::Stmt) && self.spelling(self.toks[k].id) == "else" {
                    self.stmt(k + 1)
                } else {
                    k
                }
            }
            b"while" | b"switch" => {
                let Some(j) = self.paren(i + 1) else {
                    return end;
                };
                self.stmt(j)
            }
            b"for" => {
                let Some(mut j) = self.expect(i + 1, b'(') else {
                    return end;
                };
                self.open();
                if self.declaration_start(j) {
                    j = match self.decl(j, false) {
                        Some(e) => e,
                        None => self.unknown(j),
                    };
                } else if self.ident(j).is_some_and(|id| {
                    let s = self.names[id as usize];
                    s.kw == Kw::None && (s.active == 0 || s.macro_)
                }) {
                    j = self.unknown(j);
                } else {
                    j = self.expr(j, Stop::Semi);
                    j = self.expect(j, b';').unwrap_or(end);
                }
                j = self.expr(j, Stop::Semi);
                let Some(j) = self.expect(j, b';') else {
                    return end;
                };
                let j = self.expr(j, Stop::Close);
                let Some(j) = self.expect(j, b')') else {
                    return end;
                };
                let k = self.stmt(j);
                self.close(k);
                k
            }
            b"do" => {
                let k = self.stmt(i + 1);
                if self.ident(k).is_none_or(|id| self.spelling(id) != "while") {
                    self.refuse("a statement it cannot read");
                    return end;
                }
                let Some(j) = self.paren(k + 1) else {
                    return end;
                };
                self.expect(j, b';').unwrap_or(end)
            }
            b"return" => self.expr_stmt(i + 1),
            b"break" | b"continue" => self.expect(i + 1, b';').unwrap_or(end),
            b"goto" => match self.ident(i + 1) {
                Some(id) if self.names[id as usize].kw == Kw::None => {
                    self.gotos.push((id, self.func));
                    if self.logging {
                        self.log.gotos.push((id, self.func));
                        self.log.goto_at.push(i + 1);
                        self.log.uses.push((id, i + 1, self.func));
                    }
                    self.expect(i + 2, b';').unwrap_or(end)
                }
                _ => self.expr_stmt(i + 1),
            },
            b"case" => {
                let j = self.expr(i + 1, Stop::Colon);
                let Some(j) = self.expect(j, b':') else {
                    return end;
                };
                self.labelled(j)
            }
            b"default" => {
                let Some(j) = self.expect(i + 1, b':') else {
                    return end;
                };
                self.labelled(j)
            }
            _ => {
                // A stray `else`.
                self.refuse("a statement it cannot read");
                end
            }
        }
    }

    /// A block at `i` (`{`); the index after its `}`.
    fn block(&mut self, i: usize) -> usize {
        self.open();
        let mut j = i + 1;
        while self.refused.is_none() {
            if j >= self.toks.len() {
                self.refuse("unbalanced braces");
                break;
            }
            if self.is(j, b'}') {
                break;
            }
            j = self.stmt(j);
        }
        self.close(j);
        j + 1
    }

    /// A declaration at `i`, read to its `;` (`param`: one parameter, to its `,` or
    /// `)`, not consumed). `None` when `i` starts no declaration it can read (nothing
    /// was noted then, except kept names).
    fn decl(&mut self, i: usize, param: bool) -> Option<usize> {
        let mut j = i;
        let mut type_seen = false;
        let mut mode = Kw::None;
        // Declaration specifiers.
        while let Some(id) = self.ident(self.attrs(j)) {
            j = self.attrs(j);
            let s = self.names[id as usize];
            match s.kw {
                Kw::Type => type_seen = true,
                Kw::Spec | Kw::Ext => {}
                Kw::Extern | Kw::Typedef => mode = s.kw,
                Kw::Paren => {
                    if self.is(j + 1, b'(') {
                        j = self.skip_group(j + 1, "inside an attribute, asm or typeof", false);
                        if s.kw == Kw::Paren
                            && matches!(
                                self.spelling(id),
                                "typeof" | "__typeof__" | "__typeof" | "typeof_unqual" | "_Atomic"
                            )
                        {
                            type_seen = true;
                        }
                        continue;
                    }
                }
                Kw::Tag | Kw::Enum => {
                    type_seen = true;
                    j += 1;
                    while self.kw(j) == Some(Kw::Paren) && self.is(j + 1, b'(') {
                        j = self.skip_group(j + 1, "inside an attribute, asm or typeof", false);
                    }
                    if let Some(tag) = self.ident(j)
                        && self.names[tag as usize].kw == Kw::None
                    {
                        self.poison(tag, j, "a tag", false);
                        j += 1;
                    }
                    if self.is(j, b'{') {
                        let enumerators = s.kw == Kw::Enum;
                        j = self.skip_group(j, "a member or enumerator", enumerators);
                    }
                    continue;
                }
                Kw::None => {
                    let type_name = if param {
                        !s.macro_
                            && (self.ident(j + 1).is_some() || self.is(j + 1, b'*'))
                            && s.active == 0
                    } else {
                        s.typedef && s.active == 0 && !s.macro_
                    };
                    if type_seen {
                        break;
                    }
                    if !type_name {
                        return None;
                    }
                    if param && !s.typedef {
                        // An unknown type name of a parameter: kept.
                        self.poison(id, j, "a type name", false);
                    }
                    type_seen = true;
                }
                Kw::Stmt | Kw::Other => return None,
            }
            j += 1;
        }
        if !type_seen {
            return None;
        }
        if self.is(j, b';') && !param {
            return Some(j + 1);
        }
        // libgccjit's dumps write arrays as `float[16] n412;`: not C (a compiler rejects
        // it), read as a declaration of `n412`, since texts that differ in its spelling
        // fail alike.
        while !param && self.is(j, b'[') {
            let k = self.expr(j + 1, Stop::Close);
            j = self.expect(k, b']').unwrap_or(self.toks.len());
        }
        let end = self.toks.len();
        loop {
            // Pointers, qualifiers and attributes before the name.
            loop {
                j = self.attrs(j);
                if self.is(j, b'*') || self.kw(j) == Some(Kw::Spec) {
                    j += 1;
                } else if self.kw(j) == Some(Kw::Paren) && self.is(j + 1, b'(') {
                    j = self.skip_group(j + 1, "inside an attribute, asm or typeof", false);
                } else {
                    break;
                }
            }
            let name = match self.ident(j) {
                Some(id) if self.names[id as usize].kw == Kw::None => id,
                _ if param && (self.is(j, b',') || self.is(j, b')') || self.is(j, b'[')) => {
                    // An unnamed parameter.
                    let k = self.expr(j, Stop::SemiComma);
                    return Some(k);
                }
                _ => {
                    // A parenthesized or unreadable declarator.
                    return Some(self.rest_kept(j, param));
                }
            };
            let at = j;
            j += 1;
            let ns = self.names[name as usize];
            if ns.typedef {
                self.refuse("a type name redeclared or in an unread construct");
                return Some(end);
            }
            let mut kept: Option<&'static str> = match mode {
                Kw::Extern => Some("declared extern, thread-local or auto"),
                Kw::Typedef => Some("a typedef name"),
                _ if ns.macro_ => Some("a macro of the text"),
                _ => None,
            };
            // Array and function suffixes, attributes, asm labels.
            loop {
                j = self.attrs(j);
                if self.is(j, b'[') {
                    let k = self.expr(j + 1, Stop::Close);
                    j = self.expect(k, b']').unwrap_or(end);
                } else if self.is(j, b'(') {
                    kept = Some("declares a function");
                    j = self.skip_group(j, "a parameter of a function declarator", true);
                } else if self.kw(j) == Some(Kw::Paren) && self.is(j + 1, b'(') {
                    if matches!(self.spelling(self.toks[j].id), "asm" | "__asm__" | "__asm") {
                        kept = Some("an asm label");
                    }
                    j = self.skip_group(j + 1, "inside an attribute, asm or typeof", false);
                } else {
                    break;
                }
                if self.refused.is_some() {
                    return Some(end);
                }
            }
            match kept {
                Some(why) => self.poison(name, at, why, true),
                None => self.declare(name, at + 1),
            }
            if self.is(j, b'=') && !param {
                j = self.expr(j + 1, Stop::SemiComma);
            }
            if param {
                if self.is(j, b',') || self.is(j, b')') {
                    return Some(j);
                }
                self.poison(name, at, "in a declaration it cannot read", true);
                return Some(self.rest_kept(j, true));
            }
            if self.is(j, b',') {
                j += 1;
                continue;
            }
            if self.is(j, b';') {
                return Some(j + 1);
            }
            self.poison(name, at, "in a declaration it cannot read", true);
            return Some(self.rest_kept(j, false));
        }
    }

    /// Keeps every name to the end of a declaration (`param`: to the `,` or `)` of a
    /// parameter, not consumed).
    fn rest_kept(&mut self, mut i: usize, param: bool) -> usize {
        if !param {
            return self.unknown(i);
        }
        let mut depth = 0i64;
        while i < self.toks.len() {
            match self.punct(i) {
                Some([b'(' | b'[' | b'{', 0]) => depth += 1,
                Some([b')' | b']' | b'}', 0]) => {
                    if depth == 0 {
                        return i;
                    }
                    depth -= 1;
                }
                Some([b',', 0]) if depth == 0 => return i,
                _ => {
                    if let Some(id) = self.ident(i)
                        && !self.member(i)
                    {
                        self.poison(id, i, "in a declaration it cannot read", true);
                    }
                }
            }
            i += 1;
        }
        i
    }

    /// One file-scope construct at `i`: a declaration (its names kept, a `typedef`'s
    /// simple name noted as a type name) or a function definition; the index after it.
    fn external(&mut self, i: usize) -> usize {
        let n = self.toks.len();
        let mut depth = 0i64;
        let mut j = i;
        let (mut after_tag, mut after_eq) = (false, false);
        let mut last_plain: Option<usize> = None;
        loop {
            if j >= n {
                self.file_names(i, j, last_plain);
                return n;
            }
            let t = self.toks[j];
            if t.id == PUNCT {
                match t.p {
                    [b'(' | b'[', 0] => {
                        if depth == 0 && t.p[0] == b'(' {
                            // `struct S f(void) {`: a function after all.
                            after_tag = false;
                        }
                        depth += 1;
                    }
                    [b')' | b']', 0] => {
                        depth -= 1;
                        if depth < 0 {
                            self.refuse("unbalanced brackets");
                            return n;
                        }
                    }
                    [b';', 0] if depth == 0 => {
                        self.file_names(i, j, last_plain);
                        return j + 1;
                    }
                    [b'=', 0] if depth == 0 => after_eq = true,
                    [b'{', 0] if depth == 0 => {
                        if !(after_tag || after_eq) {
                            // A function body (after its parameters, attributes, or K&R
                            // declarations, all read by `function`).
                            return self.function(i, j);
                        }
                        // A struct, union or enum body, or an initializer.
                        j = self.skip_group(j, "a member or enumerator", false);
                        after_tag = false;
                        last_plain = None;
                        continue;
                    }
                    [b'}', 0] => {
                        self.refuse("unbalanced braces");
                        return n;
                    }
                    _ => {}
                }
            } else if let Some(id) = self.ident(j) {
                let kw = self.names[id as usize].kw;
                if depth == 0 && (kw == Kw::Tag || kw == Kw::Enum) {
                    after_tag = true;
                }
                if depth == 0 && kw == Kw::None {
                    last_plain = Some(j);
                }
                if kw == Kw::Paren && self.is(j + 1, b'(') {
                    j = self.skip_group(j + 1, "at file scope", false);
                    continue;
                }
            }
            j += 1;
        }
    }

    /// Keeps every name of the file-scope declaration `i..j`; a `typedef`'s last plain
    /// name at depth 0 (`last`) becomes a type name.
    fn file_names(&mut self, i: usize, j: usize, last: Option<usize>) {
        for k in i..j {
            if let Some(id) = self.ident(k) {
                self.poison(id, k, "declared at file scope", false);
            }
        }
        if self.kw(i) == Some(Kw::Typedef)
            && let Some(l) = last
            && let Some(id) = self.ident(l)
            && !self.names[id as usize].macro_
        {
            self.names[id as usize].typedef = true;
        }
    }

    /// A function definition `i..brace` with its body at `brace`; the index after it.
    fn function(&mut self, i: usize, brace: usize) -> usize {
        self.functions += 1;
        // The parameter list follows the first plain name followed by `(`.
        let mut params = None;
        let mut k = i;
        while k < brace {
            if let Some(id) = self.ident(k) {
                let kw = self.names[id as usize].kw;
                if kw == Kw::Paren && self.is(k + 1, b'(') {
                    k = self.skip_group(k + 1, "at file scope", false);
                    continue;
                }
                if kw == Kw::None && self.is(k + 1, b'(') {
                    params = Some(k + 1);
                    self.defined.push(id);
                    break;
                }
            }
            k += 1;
        }
        self.func += 1;
        self.open();
        let mut kept_from = i;
        if let Some(open) = params {
            for m in i..open {
                if let Some(id) = self.ident(m) {
                    self.poison(id, m, "declared at file scope", false);
                }
            }
            let close = self.read_params(open);
            // Only attributes may stand between the parameters and the body.
            let mut m = close;
            while m < brace && self.kw(m) == Some(Kw::Paren) && self.is(m + 1, b'(') {
                m = self.skip_group(m + 1, "at file scope", false);
            }
            kept_from = if m == brace { brace } else { close };
        }
        for m in kept_from..brace {
            if let Some(id) = self.ident(m) {
                self.poison(id, m, "declared at file scope or by K&R", true);
            }
        }
        let after = self.block(brace);
        self.close(after);
        let func = self.func;
        let gotos: Vec<u32> = self
            .gotos
            .iter()
            .filter(|g| g.1 == func)
            .map(|g| g.0)
            .collect();
        for id in gotos {
            if !self.labels.contains(&(id, func)) {
                self.poison(id, after, "a goto to no label", false);
            }
        }
        after
    }

    /// The parameter list opened at `open`; the index after its `)`.
    fn read_params(&mut self, open: usize) -> usize {
        let mut j = open + 1;
        let end = self.toks.len();
        if self.kw(j) == Some(Kw::Type)
            && self.spelling(self.toks[j].id) == "void"
            && self.is(j + 1, b')')
        {
            return j + 2;
        }
        if self.is(j, b')') {
            return j + 1;
        }
        loop {
            if self.refused.is_some() {
                return end;
            }
            if self.punct(j) == Some([b'.', b'.']) {
                j += 1;
            } else {
                j = match self.decl(j, true) {
                    Some(k) => k,
                    None => self.rest_kept(j, true),
                };
            }
            if self.is(j, b',') {
                j += 1;
                continue;
            }
            return match self.expect(j, b')') {
                Some(k) => k,
                None => end,
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bound(src: &str) -> Vec<&str> {
        let t = text_bound(src);
        assert_eq!(t.refused, None, "{src}");
        t.names
    }

    fn check(src: &str, want: &[&str]) {
        assert_eq!(bound(src), want, "{src}");
        let (r, refused) = reference_text_bound(src);
        assert_eq!(refused, None);
        assert_eq!(r, want, "reference: {src}");
    }

    #[test]
    fn parameters_locals_loops_and_labels_are_text_bound() {
        check(
            "void r_16_577(float* restrict data0, const float* restrict data1) {\n\
             float acc578 = 0.0f;\n\
             for (int ridx2 = 0; ridx2 < 16; ridx2++) { float alu3 = data1[ridx2]; acc578 += alu3; }\n\
             again: data0[0] = acc578; if (acc578 < 0) goto again;\n}",
            &["data0", "data1", "acc578", "ridx2", "alu3", "again"],
        );
    }

    #[test]
    fn a_name_used_outside_its_scope_is_kept() {
        check(
            "float f(float x) { float y; { float expf = 1; y = expf; } y = expf(x); return y; }",
            &["x", "y"],
        );
        check(
            "int g(void) { int a; x = 1; int x; a = x; return a; }",
            &["a"],
        );
        // The for-init's scope ends with the `for` statement.
        check(
            "int g(int n) { for (int k = 0; k < n; k++) if (k) { } n = k; return n; }",
            &["n"],
        );
        let t = text_bound("void h(void) { for (int k = 0; k < 2; k++) ; k = 1; }");
        assert_eq!(t.kept, [("k", OUTSIDE)]);
    }

    #[test]
    fn file_scope_extern_members_and_unknown_statements_are_kept() {
        check(
            "int gl; typedef float float4 __attribute__((aligned(16),ext_vector_type(4)));\n\
             struct S { int m; };\n\
             void k(float *out, struct S *s) {\n\
               float4 v = (float4){0.0f,0.0f,0.0f,0.0f}; int m = s->m; { extern int e; e = m; }\n\
               T t; gl = t + m; out[0] = v[0]; }",
            &["out", "s", "v"],
        );
        // A type name redeclared makes the text unreadable.
        let t = text_bound("typedef int T; void k(void) { int T = 1; T * x; }");
        assert!(t.refused.is_some());
        assert!(
            text_bound("void k(void) {\n#if 1\n int a;\n#endif\n}")
                .refused
                .is_some()
        );
    }

    #[test]
    fn enumerators_and_block_typedefs_are_kept() {
        check(
            "void k(int *o) { enum { A, B } e = A; typedef int U; U u = 1; o[0] = e + u + B; }",
            &["o", "e"],
        );
    }

    /// Pieces of C drawn by the property below: names (some shadowing, some free),
    /// every kind of word the reading tells apart, brackets, and bytes of every class
    /// (white space, comments, literals, directives, `$`, non-ASCII, backslashes, NUL).
    const PIECES: &[&str] = &[
        "a",
        "b",
        "acc0",
        "gidx1",
        "expf",
        "T",
        "float4",
        "x",
        "L",
        " ",
        "\n",
        "\t",
        "int ",
        "float ",
        "const ",
        "static ",
        "extern ",
        "typedef ",
        "struct S ",
        "enum ",
        "union ",
        "unsigned ",
        "size_t ",
        "void ",
        "(",
        ")",
        "[",
        "]",
        "{",
        "}",
        ";",
        ",",
        "=",
        "*",
        ":",
        "?",
        ".",
        "->",
        "++",
        "+=",
        "&&",
        "0",
        "1.5f",
        "'c'",
        "\"s,\"",
        "/* c */",
        "// c\n",
        "\n#define M(p) p\n",
        "\n#define N 4\n",
        "\n#if 1\n",
        "\n#pragma x\n",
        "if ",
        "else ",
        "for ",
        "while ",
        "do ",
        "goto ",
        "return ",
        "case ",
        "default ",
        "break",
        "sizeof ",
        "__attribute__((aligned(4))) ",
        "asm ",
        "({",
        "$",
        "\u{e9}",
        "\\",
        "\u{0}",
        "<%",
        "...",
        "void k(int a, float *b) {",
        "float4 v = ",
        "for (int i = 0; i < 4; i++) ",
    ];

    fn text_of(pick: &[usize]) -> String {
        pick.iter().map(|&i| PIECES[i % PIECES.len()]).collect()
    }

    /// A function of nested statements drawn from `choices`: declarations (plain, extern,
    /// typedef, arrays, several declarators), uses, blocks, `for` loops with and without
    /// braces, `if`/`else`, labels and gotos, unknown statements, calls, struct bodies,
    /// over a few names that shadow each other; now and then a raw piece.
    fn structured(choices: &[u8]) -> String {
        const NAMES: [&str; 5] = ["a", "acc0", "expf", "x", "float4"];
        let mut it = choices.iter().copied().cycle().take(choices.len() * 2);
        let mut next = move || it.next().unwrap_or(0) as usize;
        let mut out = String::from("typedef float float4;\nint x;\nvoid k(float *a, int n) {\n");
        let mut depth = 1usize;
        for _ in 0..choices.len() / 2 {
            let n = NAMES[next() % NAMES.len()];
            let m = NAMES[next() % NAMES.len()];
            match next() % 16 {
                0 | 1 => out += &format!("float {n} = {m};\n"),
                2 => out += &format!("{n} = {m} + 1;\n"),
                3 if depth < 5 => {
                    out += "{\n";
                    depth += 1;
                }
                4 if depth > 1 => {
                    out += "}\n";
                    depth -= 1;
                }
                5 => out += &format!("for (int {n} = 0; {n} < {m}; {n}++) {m} += {n};\n"),
                6 if depth < 5 => {
                    out += &format!("for (int {n} = 0; {n} < 4; {n}++) {{\n");
                    depth += 1;
                }
                7 => out += &format!("if ({n}) {m} = 1; else {n} = 2;\n"),
                8 => out += &format!("{n}: goto {m};\n"),
                9 => out += &format!("extern int {n}; {n} = {m};\n"),
                10 => out += &format!("T {n}; {m}({n}, 1);\n"),
                11 => out += &format!("struct S {{ int {n}; }} s; s.{m} = 1;\n"),
                12 => out += &format!("int {n}[4], {m} = {n}[0];\n"),
                13 => out += &format!("typedef int {n}; {m} * {n};\n"),
                14 => out += &format!("float4 {n} = ({m})(float4){{1,2}};\n"),
                _ => out += PIECES[next() % PIECES.len()],
            }
        }
        for _ in 0..depth {
            out += "}\n";
        }
        out
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2000))]
        /// The same on structured functions (most texts read, names declared, shadowed
        /// and used out of scope).
        #[test]
        fn the_fast_reading_agrees_with_the_reference_on_functions(
            choices in proptest::collection::vec(proptest::num::u8::ANY, 0..120),
        ) {
            let text = structured(&choices);
            let fast = text_bound(&text);
            let (want, refused) = reference_text_bound(&text);
            proptest::prop_assert_eq!(fast.refused, refused, "{}", text);
            let got: Vec<String> = fast.names.iter().map(|s| (*s).to_owned()).collect();
            proptest::prop_assert_eq!(got, want, "{}", text);
        }

        /// The one-pass reading (running counts per name, frames) gives the reference's
        /// answer (every scope an interval, every occurrence checked against all), on
        /// texts built from C pieces and on arbitrary bytes.
        #[test]
        fn the_fast_reading_agrees_with_the_reference(
            pick in proptest::collection::vec(0usize..1000, 0..60),
            wrap in proptest::bool::ANY,
        ) {
            let mut text = text_of(&pick);
            if wrap {
                text = format!("typedef float float4;\nvoid k(float *out, int n) {{ {text} }}");
            }
            let fast = text_bound(&text);
            let (want, refused) = reference_text_bound(&text);
            proptest::prop_assert_eq!(fast.refused, refused, "{:?}", text);
            let got: Vec<String> = fast.names.iter().map(|s| (*s).to_owned()).collect();
            proptest::prop_assert_eq!(got, want, "{:?}", text);
        }

        #[test]
        fn any_bytes_read_alike_and_never_panic(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..200)) {
            let text = String::from_utf8_lossy(&bytes);
            let fast = text_bound(&text);
            let (want, refused) = reference_text_bound(&text);
            proptest::prop_assert_eq!(fast.refused, refused);
            let got: Vec<String> = fast.names.iter().map(|s| (*s).to_owned()).collect();
            proptest::prop_assert_eq!(got, want);
        }
    }
}
