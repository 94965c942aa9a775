//! The one place that says which text the renamer may tokenize: C translation phases 1
//! to 3 as gcc (gnu17, and every other dialect we accept) performs them, for the text
//! whose tokenization we model exactly, and a refusal for everything else.
//!
//! What the [`lexer`](crate::lexer) and the fast renamer make of a text counts only once
//! this gate has accepted it (the renamer scans first, since its block masks tell whether
//! the text holds any byte this gate may refuse, and [`untokenizable`] runs only if it
//! does; it always ends and never panics on a text the gate refuses, and its result is
//! then dropped). For accepted text phases 1 and 2 change nothing: there is no
//! line splice (so every token lies on the lines it appears on), no trigraph, no lone
//! carriage return (so a line ends at `\n` and nowhere else; the `\r` of a CRLF line end
//! is white space, as gcc reads it), no NUL byte, and no `$` and no byte from 0x80 outside
//! string and character literals (clang reads U+00A0 and other Unicode spaces as white
//! space, other code points as identifier characters; gcc rejects some). Phase 3 (comments, literals,
//! preprocessing numbers, identifiers, punctuators, directives) is then the lexer's, and
//! the constructs whose phase-3 reading depends on the dialect are refused where they
//! are met (a `'` after a preprocessing number or an identifier other than an encoding
//! prefix, a C++ raw string, a backslash in code: see [`crate::canonical_kernel`]).
//!
//! [`spelling_observer`] finds the text that can observe the *spelling* of a name (so a
//! renamed twin would compile differently): `__func__` and its kin, `asm` (whose
//! template and operand names are strings), `_Pragma`, the string-taking attributes that
//! name symbols (`alias`, `weakref`, `ifunc`, `symver`), and the configured macros from
//! headers that stringify their arguments (`assert` by default). A kernel holding one is
//! keyed over its exact text, with its own name whole.
//!
//! The allow lists live here too: the reserved names of known meaning
//! ([`RESERVED_KEYWORDS`] and the lists after it), the feature tests whose arguments are
//! regions ([`is_feature_test`]), and the standard headers, their observing macros and
//! their library functions, which the include rule reads.

use std::sync::OnceLock;

use aho_corasick::packed;

use crate::lexer::TokenKind;

/// What [`untokenizable`] says of a `$` outside literals.
pub(crate) const DOLLAR: &str =
    "a `$` outside string and character literals (an identifier byte in some dialects only)";

/// What [`untokenizable`] says of a byte from 0x80 outside literals.
pub(crate) const NON_ASCII: &str = "a non-ASCII byte outside string and character literals \
     (white space to clang for some code points, an identifier character for others)";

/// The first byte of text no dialect-independent tokenization exists for, and what it
/// starts: a line splice (a backslash, then optional blanks, then a line end or the end
/// of the text), a trigraph, a carriage return not followed by `\n` or a NUL byte, found
/// wherever it occurs (in code, literals, comments and directives alike); and a `$` or a
/// byte from 0x80 anywhere but inside a string or character literal.
///
/// A `$` inside a literal is one character of it in every dialect (OCANNL's logging
/// kernels print `:=$`); anywhere else it may continue an identifier or not, so it is
/// refused. So is a non-ASCII byte: clang reads U+00A0 (and the other Unicode spaces) as
/// white space, so `\u{a0}assert(i1)` invokes `assert` and `i1 -\u{a0}i2` names `i2`,
/// where a reading of every such byte as an identifier byte would see one longer word.
/// Which bytes lie in a literal is the [`lexer`](crate::lexer)'s reading, exact for text
/// with none of the other constructs, and looked at only when the text holds a `$` or a
/// non-ASCII byte.
pub(crate) fn untokenizable(src: &[u8]) -> Option<(usize, &'static str)> {
    let mut first: Option<(usize, &'static str)> = None;
    // The lexer's string and character literals, as sorted spans; read at the first `$`
    // or non-ASCII byte.
    let mut literals: Option<Vec<(usize, usize)>> = None;
    if !src.is_ascii() {
        let spans = literals.get_or_insert_with(|| literal_spans(src));
        first = src
            .iter()
            .enumerate()
            .position(|(i, &b)| b >= 0x80 && !inside(spans, i))
            .map(|i| (i, NON_ASCII));
    }
    // Splices, lone carriage returns and `$`, before the first non-ASCII refusal.
    let end = first.map_or(src.len(), |(f, _)| f);
    let mut from = 0;
    while let Some(k) = memchr::memchr3(b'\\', b'\r', b'$', &src[from..end]) {
        let i = from + k;
        let what = match src[i] {
            b'\\' => {
                let mut j = i + 1;
                while j < src.len() && matches!(src[j], b' ' | b'\t' | 0x0b | 0x0c | 0) {
                    j += 1;
                }
                matches!(src.get(j), None | Some(b'\n' | b'\r'))
                    .then_some("a line splice (backslash-newline)")
            }
            b'\r' => (src.get(i + 1) != Some(&b'\n'))
                .then_some("a carriage return not followed by a newline"),
            _ => {
                let spans = literals.get_or_insert_with(|| literal_spans(src));
                (!inside(spans, i)).then_some(DOLLAR)
            }
        };
        if let Some(what) = what {
            first = Some((i, what));
            break;
        }
        from = i + 1;
    }
    // NUL bytes and trigraphs, in one pass over the text before the first refusal.
    let bound = first.map_or(src.len(), |(f, _)| f);
    let mut from = 0;
    while let Some(k) = memchr::memchr2(0, b'?', &src[from..bound]) {
        let i = from + k;
        if src[i] == 0 {
            return Some((i, "a NUL byte (white space to gcc)"));
        }
        if src.get(i + 1) == Some(&b'?')
            && matches!(
                src.get(i + 2),
                Some(b'=' | b'/' | b'\'' | b'(' | b')' | b'!' | b'<' | b'>' | b'-')
            )
        {
            return Some((i, "a trigraph"));
        }
        from = i + 1;
    }
    first
}

/// The spans of the string and character literals of `src`, as the lexer reads them.
fn literal_spans(src: &[u8]) -> Vec<(usize, usize)> {
    crate::lexer::Lexer::new(src)
        .filter(|t| matches!(t.kind, TokenKind::Str | TokenKind::Char))
        .map(|t| (t.start, t.end))
        .collect()
}

/// Whether byte `i` lies inside one of the sorted, disjoint `spans`.
fn inside(spans: &[(usize, usize)], i: usize) -> bool {
    let k = spans.partition_point(|&(s, _)| s <= i);
    k > 0 && i < spans[k - 1].1
}

/// Names that observe a spelling whatever [`Names`](crate::Names) says: the enclosing
/// function's name (`__func__` and kin, all caught by `FUNCTION` and `__func__`), and the
/// constructs that read names out of strings (`asm` in all its spellings, `_Pragma`, and
/// the attributes `alias`, `weakref`, `ifunc`, `symver`). Matched as substrings anywhere,
/// which over-approximates (a comment saying `alias` refuses too).
const BUILTIN_OBSERVERS: [&str; 8] = [
    "__func__", "FUNCTION", "asm", "_Pragma", "alias", "weakref", "ifunc", "symver",
];

/// The default observing macro from a header: `assert` stringifies its argument and
/// names the enclosing function. Observing macros are found as whole identifiers only
/// (anywhere, literals and comments included), the built-in observers as substrings.
pub(crate) const DEFAULT_OBSERVER: &str = "assert";

fn builtin_searcher() -> Option<&'static packed::Searcher> {
    static S: OnceLock<Option<packed::Searcher>> = OnceLock::new();
    S.get_or_init(|| {
        packed::Config::new()
            .match_kind(packed::MatchKind::LeftmostFirst)
            .builder()
            .extend(BUILTIN_OBSERVERS.iter().copied().chain([DEFAULT_OBSERVER]))
            .build()
    })
    .as_ref()
}

/// The first occurrence (anywhere) of a construct that observes the spelling of a name: a
/// built-in one as a substring (see the [module docs](self)) or one of `observers` as a
/// whole identifier (see [`whole_word`]); its offset and the observer.
pub(crate) fn spelling_observer<'o>(
    src: &[u8],
    observers: impl Iterator<Item = &'o str>,
    default_observed: bool,
) -> Option<(usize, String)> {
    let mut best: Option<(usize, String)> = None;
    match builtin_searcher() {
        Some(s) => {
            for m in s.find_iter(src) {
                let pat = m.pattern().as_usize();
                let name = BUILTIN_OBSERVERS.get(pat).copied();
                match name {
                    Some(n) => {
                        best = Some((m.start(), n.to_owned()));
                        break;
                    }
                    // The default observer, only if configured, and only as a whole
                    // identifier (no builtin pattern can start inside `assert`, so
                    // skipping a match inside a longer word skips no builtin).
                    None if default_observed && whole_word(src, m.start(), m.end()) => {
                        best = Some((m.start(), DEFAULT_OBSERVER.to_owned()));
                        break;
                    }
                    None => {}
                }
            }
        }
        // Cannot happen (fixed patterns), but stay sound: search them one by one.
        None => {
            for n in BUILTIN_OBSERVERS {
                if let Some(i) = memchr::memmem::find(src, n.as_bytes())
                    && best.as_ref().is_none_or(|(b, _)| i < *b)
                {
                    best = Some((i, n.to_owned()));
                }
            }
        }
    }
    for o in observers {
        if o.is_empty() || (o == DEFAULT_OBSERVER && builtin_searcher().is_some()) {
            continue;
        }
        let hay = &src[..best.as_ref().map_or(src.len(), |(b, _)| *b)];
        let finder = memchr::memmem::Finder::new(o.as_bytes());
        let mut from = 0;
        while let Some(k) = finder.find(&hay[from..]) {
            let i = from + k;
            if whole_word(src, i, i + o.len()) {
                best = Some((i, o.to_owned()));
                break;
            }
            from = i + 1;
        }
    }
    best
}

/// Whether `src[s..e]` is no part of a longer identifier or preprocessing number: the byte
/// before it (if the match starts with an identifier byte) and the byte after it (if it
/// ends with one) continue none. A macro is invoked only by an identifier token spelled
/// exactly like it, so an observing macro's name inside a longer word
/// (`__tvm_assert_parts`, `1assert`) observes nothing. (Pasting `ass ## ert` needs `##`,
/// which refuses on its own; a `$` outside literals refuses on its own.)
fn whole_word(src: &[u8], s: usize, e: usize) -> bool {
    let ident = crate::lexer::is_ident_continue;
    let open_before = s == 0 || !ident(src[s]) || !ident(src[s - 1]);
    let open_after = e >= src.len() || e == s || !ident(src[e - 1]) || !ident(src[e]);
    open_before && open_after
}

/// Identifiers in the implementation's reserved namespace (`__x`, `_X`) whose meaning is
/// known not to depend on any spelling or position in the text. Any other reserved
/// identifier outside comments and literals keys the kernel over its exact text
/// ([`unknown_reserved`]): compilers and headers define more such names than any deny
/// list holds (clang's `__builtin_COLUMN`, `__builtin_dump_struct`, glibc's `__STRING`
/// and `__CONCAT`). The list is the union of [`RESERVED_KEYWORDS`],
/// [`FEATURE_TESTS`], [`VALUE_BUILTINS`], the math built-ins of [`LIBM_BUILTINS`],
/// [`GNU_ATTRIBUTE_WORDS`] and [`RESERVED_CORPUS`].
pub(crate) const RESERVED_KEYWORDS: &[&str] = &[
    // Every `_Keyword` of C11, C17 and C23, and the `_FloatN` types (keywords to gcc).
    "_Alignas",
    "_Alignof",
    "_Atomic",
    "_BitInt",
    "_Bool",
    "_Complex",
    "_Decimal128",
    "_Decimal32",
    "_Decimal64",
    "_Generic",
    "_Imaginary",
    "_Noreturn",
    "_Static_assert",
    "_Thread_local",
    "_Float16",
    "_Float32",
    "_Float64",
    "_Float128",
    "_Float32x",
    "_Float64x",
    "_Float128x",
    // GNU alternate keywords and GNU keywords of the reserved namespace.
    "__restrict",
    "__restrict__",
    "__inline",
    "__inline__",
    "__const",
    "__const__",
    "__volatile",
    "__volatile__",
    "__signed",
    "__signed__",
    "__typeof",
    "__typeof__",
    "__typeof_unqual__",
    "__alignof",
    "__alignof__",
    "__extension__",
    "__label__",
    "__real",
    "__real__",
    "__imag",
    "__imag__",
    "__complex",
    "__complex__",
    "__int128",
    "__int128_t",
    "__uint128_t",
    "__auto_type",
    "__thread",
    "__builtin_va_list",
    // Attribute introducers: their parenthesized arguments are attribute regions.
    "__attribute__",
    "__attribute",
    "__declspec",
    // The compile's file, line and time: renaming changes no line, and what the others
    // expand to is the backend's to fix (cc-backend compiles every unit as `kernel.c`,
    // dated 1970-01-01, under SOURCE_DATE_EPOCH=0), as the crate documents.
    "__FILE__",
    "__LINE__",
    "__DATE__",
    "__TIME__",
    "__TIMESTAMP__",
    // A variadic macro's arguments: a macro of the text that stringifies or pastes them
    // refuses by its `#` (see `Renamer::kept_region`).
    "__VA_ARGS__",
    "__VA_OPT__",
];

/// The feature tests gcc 12 or clang 14 defines (`defined(x)` holds; checked by
/// `tests/issue35_keys.rs`; newer ones such as `__has_embed` refuse until listed): each answers for its argument's *spelling*, so each starts a region nothing is
/// renamed in, like an attribute's (see [`is_feature_test`]; [`attribute_regions_at`]).
pub(crate) const FEATURE_TESTS: &[&str] = &[
    "__has_attribute",
    "__has_builtin",
    "__has_c_attribute",
    "__has_cpp_attribute",
    "__has_declspec_attribute",
    "__has_extension",
    "__has_feature",
    "__has_include",
    "__has_include_next",
    "__has_warning",
    "__is_identifier",
    "__is_target_arch",
    "__is_target_environment",
    "__is_target_os",
    "__is_target_vendor",
];

/// Built-ins whose arguments are plain values (or types) and whose result depends on
/// nothing else: neither on a spelling (`__builtin_has_attribute`, `__builtin_offsetof`'s
/// member, `__builtin_dump_struct`) nor on a position (`__builtin_LINE`, `__builtin_FILE`,
/// `__builtin_FUNCTION`, `__builtin_COLUMN`, `__builtin_source_location`), which stay
/// off. Every one is a built-in of both gcc 12 and clang 14 (`__has_builtin`, checked by
/// `tests/issue35_keys.rs`).
pub(crate) const VALUE_BUILTINS: &[&str] = &[
    "__builtin_expect",
    "__builtin_expect_with_probability",
    "__builtin_unreachable",
    "__builtin_trap",
    "__builtin_assume_aligned",
    "__builtin_prefetch",
    "__builtin_constant_p",
    "__builtin_types_compatible_p",
    "__builtin_choose_expr",
    "__builtin_classify_type",
    "__builtin_shufflevector",
    "__builtin_convertvector",
    "__builtin_memcpy",
    "__builtin_memmove",
    "__builtin_memset",
    "__builtin_memcmp",
    "__builtin_alloca",
    "__builtin_abs",
    "__builtin_labs",
    "__builtin_llabs",
    "__builtin_popcount",
    "__builtin_popcountl",
    "__builtin_popcountll",
    "__builtin_clz",
    "__builtin_clzl",
    "__builtin_clzll",
    "__builtin_ctz",
    "__builtin_ctzl",
    "__builtin_ctzll",
    "__builtin_ffs",
    "__builtin_ffsl",
    "__builtin_ffsll",
    "__builtin_parity",
    "__builtin_parityl",
    "__builtin_parityll",
    "__builtin_clrsb",
    "__builtin_bswap16",
    "__builtin_bswap32",
    "__builtin_bswap64",
    "__builtin_add_overflow",
    "__builtin_sub_overflow",
    "__builtin_mul_overflow",
    "__builtin_huge_val",
    "__builtin_huge_valf",
    "__builtin_huge_vall",
    "__builtin_inf",
    "__builtin_inff",
    "__builtin_infl",
    "__builtin_nan",
    "__builtin_nanf",
    "__builtin_nanl",
    "__builtin_nans",
    "__builtin_nansf",
    "__builtin_isnan",
    "__builtin_isinf",
    "__builtin_isfinite",
    "__builtin_isnormal",
    "__builtin_isinf_sign",
    "__builtin_fpclassify",
    "__builtin_signbit",
    "__builtin_isgreater",
    "__builtin_isgreaterequal",
    "__builtin_isless",
    "__builtin_islessequal",
    "__builtin_islessgreater",
    "__builtin_isunordered",
];

/// The C library's math functions whose built-in `__builtin_<name>`, `__builtin_<name>f`
/// and `__builtin_<name>l` take and return plain values (every one a built-in of both
/// gcc 12 and clang 14, checked as [`VALUE_BUILTINS`] are).
pub(crate) const LIBM_BUILTINS: &[&str] = &[
    "acos",
    "acosh",
    "asin",
    "asinh",
    "atan",
    "atan2",
    "atanh",
    "cbrt",
    "ceil",
    "copysign",
    "cos",
    "cosh",
    "erf",
    "erfc",
    "exp",
    "exp2",
    "expm1",
    "fabs",
    "fdim",
    "floor",
    "fma",
    "fmax",
    "fmin",
    "fmod",
    "frexp",
    "hypot",
    "ilogb",
    "ldexp",
    "lgamma",
    "llrint",
    "llround",
    "log",
    "log10",
    "log1p",
    "log2",
    "logb",
    "lrint",
    "lround",
    "modf",
    "nearbyint",
    "nextafter",
    "pow",
    "remainder",
    "remquo",
    "rint",
    "round",
    "scalbn",
    "scalbln",
    "sin",
    "sinh",
    "sqrt",
    "tan",
    "tanh",
    "tgamma",
    "trunc",
];

/// GNU attribute names spelled `__name__` (as glibc and portable code write them inside
/// `__attribute__((...))`): the attribute's own meaning, whatever the names around it.
/// The symbol-naming ones (`alias`, `weakref`, `ifunc`, `symver`) refuse as spelling
/// observers wherever they occur.
pub(crate) const GNU_ATTRIBUTE_WORDS: &[&str] = &[
    "__aligned__",
    "__packed__",
    "__always_inline__",
    "__noinline__",
    "__unused__",
    "__used__",
    "__pure__",
    "__noreturn__",
    "__vector_size__",
    "__may_alias__",
    "__cold__",
    "__hot__",
    "__nonnull__",
    "__returns_nonnull__",
    "__warn_unused_result__",
    "__deprecated__",
    "__malloc__",
    "__nothrow__",
    "__leaf__",
    "__artificial__",
    "__gnu_inline__",
    "__flatten__",
    "__fallthrough__",
    "__ext_vector_type__",
    "__transparent_union__",
];

/// What the real corpus (`../shared/corpus`: tinygrad, TVM, OCANNL) uses besides: clang's
/// newer built-ins (tinygrad targets clang 17 and later), CUDA and Metal types and
/// qualifiers, and predefined value macros.
pub(crate) const RESERVED_CORPUS: &[&str] = &[
    "__builtin_bit_cast",
    "__builtin_elementwise_fma",
    "__global__",
    "__half",
    "__nv_bfloat16",
    "__int_as_float",
    "__FLT16_MAX__",
    "__AVX2__",
    "__ARM_NEON",
    "__APPLE__",
    "__cplusplus",
];

/// Every name on the reserved-name allow list (see [`RESERVED_KEYWORDS`]), the math
/// built-ins spelled out.
pub(crate) fn reserved_allow_list() -> impl Iterator<Item = String> {
    let fixed = [
        RESERVED_KEYWORDS,
        FEATURE_TESTS,
        VALUE_BUILTINS,
        GNU_ATTRIBUTE_WORDS,
        RESERVED_CORPUS,
    ];
    fixed.into_iter().flatten().map(|s| (*s).to_owned()).chain(
        LIBM_BUILTINS
            .iter()
            .flat_map(|b| ["", "f", "l"].map(move |suffix| format!("__builtin_{b}{suffix}"))),
    )
}

/// Whether `w` names a feature test of some compiler (`__has_` or `__is_` then anything):
/// its parenthesized argument is a region nothing is renamed in, whether or not `w` is a
/// test this compiler knows ([`FEATURE_TESTS`] lists those the allow list admits).
#[inline(always)]
pub(crate) fn is_feature_test(w: &[u8]) -> bool {
    w.starts_with(b"__has_") || w.starts_with(b"__is_")
}

/// The C standard headers (C11 to C23) a text may include without the include rule
/// pinning every unowned call's arguments: their function-like macros that observe a
/// spelling (outside the reserved namespace) are exactly [`STANDARD_HEADER_OBSERVERS`],
/// under gcc and clang, with and without `_GNU_SOURCE` (checked by
/// `tests/issue35_keys.rs`). `<tgmath.h>` is not one: glibc's type-generic macros paste.
pub(crate) const STANDARD_HEADERS: &[&str] = &[
    "assert.h",
    "complex.h",
    "ctype.h",
    "errno.h",
    "fenv.h",
    "float.h",
    "inttypes.h",
    "iso646.h",
    "limits.h",
    "locale.h",
    "math.h",
    "setjmp.h",
    "signal.h",
    "stdalign.h",
    "stdarg.h",
    "stdatomic.h",
    "stdbool.h",
    "stddef.h",
    "stdint.h",
    "stdio.h",
    "stdlib.h",
    "stdnoreturn.h",
    "string.h",
    "threads.h",
    "time.h",
    "uchar.h",
    "wchar.h",
    "wctype.h",
];

/// The function-like macros of [`STANDARD_HEADERS`] (outside the reserved namespace) that
/// stringify or paste an argument, directly or through another macro (no object-like one
/// ends in such a macro's name, so none forms a call with the text's `(`): in a text that
/// includes only standard headers, the include rule pins the arguments of these.
pub(crate) const STANDARD_HEADER_OBSERVERS: &[&str] = &[
    "INT64_C",
    "INTMAX_C",
    "UINT32_C",
    "UINT64_C",
    "UINTMAX_C",
    "assert",
    "assert_perror",
    "iscanonical",
    "iseqsig",
    "issignaling",
    "sigmask",
];

/// Whether `src` spells one of [`STANDARD_HEADER_OBSERVERS`] anywhere (as a substring:
/// over-approximating only reads more texts with the lexer).
pub(crate) fn mentions_standard_observer(src: &[u8]) -> bool {
    static S: OnceLock<Option<packed::Searcher>> = OnceLock::new();
    match S
        .get_or_init(|| {
            packed::Config::new()
                .builder()
                .extend(STANDARD_HEADER_OBSERVERS.iter().copied())
                .build()
        })
        .as_ref()
    {
        Some(s) => s.find(src).is_some(),
        None => true,
    }
}

/// The library functions (and function-like macros of function meaning) that some of
/// [`STANDARD_HEADERS`] declare, per header (C17 Annex B; the math functions are
/// [`LIBM_BUILTINS`]' with their `f` and `l` forms). Where their header is included, C
/// reserves each as a macro name (C17 7.1.3): no other header of a valid program defines
/// one, and the standard's own must act as the function, each argument evaluated as a
/// value. So a call to one is no pasting macro, whatever other headers the text includes.
/// Each is declared by its header under gcc and clang (checked by `tests/issue35_keys.rs`).
pub(crate) const STANDARD_FUNCTIONS: &[(&str, &[&str])] = &[
    (
        "stdio.h",
        &[
            "remove",
            "rename",
            "tmpfile",
            "tmpnam",
            "fclose",
            "fflush",
            "fopen",
            "freopen",
            "setbuf",
            "setvbuf",
            "fprintf",
            "fscanf",
            "printf",
            "scanf",
            "snprintf",
            "sprintf",
            "sscanf",
            "vfprintf",
            "vfscanf",
            "vprintf",
            "vscanf",
            "vsnprintf",
            "vsprintf",
            "vsscanf",
            "fgetc",
            "fgets",
            "fputc",
            "fputs",
            "getc",
            "getchar",
            "putc",
            "putchar",
            "puts",
            "ungetc",
            "fread",
            "fwrite",
            "fgetpos",
            "fseek",
            "fsetpos",
            "ftell",
            "rewind",
            "clearerr",
            "feof",
            "ferror",
            "perror",
        ],
    ),
    (
        "stdlib.h",
        &[
            "atof",
            "atoi",
            "atol",
            "atoll",
            "strtod",
            "strtof",
            "strtold",
            "strtol",
            "strtoll",
            "strtoul",
            "strtoull",
            "rand",
            "srand",
            "aligned_alloc",
            "calloc",
            "free",
            "malloc",
            "realloc",
            "abort",
            "atexit",
            "at_quick_exit",
            "exit",
            "getenv",
            "quick_exit",
            "system",
            "bsearch",
            "qsort",
            "abs",
            "labs",
            "llabs",
            "div",
            "ldiv",
            "lldiv",
            "mblen",
            "mbtowc",
            "wctomb",
            "mbstowcs",
            "wcstombs",
        ],
    ),
    (
        "string.h",
        &[
            "memcpy", "memmove", "strcpy", "strncpy", "strcat", "strncat", "memcmp", "strcmp",
            "strcoll", "strncmp", "strxfrm", "memchr", "strchr", "strcspn", "strpbrk", "strrchr",
            "strspn", "strstr", "strtok", "memset", "strerror", "strlen",
        ],
    ),
    (
        "math.h",
        &[
            "nan",
            "nanf",
            "nanl",
            "nexttoward",
            "nexttowardf",
            "nexttowardl",
            "fpclassify",
            "isfinite",
            "isinf",
            "isnan",
            "isnormal",
            "signbit",
            "isgreater",
            "isgreaterequal",
            "isless",
            "islessequal",
            "islessgreater",
            "isunordered",
        ],
    ),
];

/// Whether `w` is one of [`STANDARD_FUNCTIONS`] of a header whose bit (its index in
/// [`STANDARD_HEADERS`]) is set in `included`.
pub(crate) fn standard_function(w: &[u8], included: u64) -> bool {
    let has = |h: &str| {
        STANDARD_HEADERS
            .iter()
            .position(|s| *s == h)
            .is_some_and(|k| included & (1 << k) != 0)
    };
    if has("math.h") {
        let base = w
            .strip_suffix(b"f")
            .filter(|b| LIBM_BUILTINS.iter().any(|m| m.as_bytes() == *b))
            .or_else(|| {
                w.strip_suffix(b"l")
                    .filter(|b| LIBM_BUILTINS.iter().any(|m| m.as_bytes() == *b))
            })
            .unwrap_or(w);
        if LIBM_BUILTINS.iter().any(|m| m.as_bytes() == base) {
            return true;
        }
    }
    STANDARD_FUNCTIONS
        .iter()
        .any(|(h, names)| has(h) && names.iter().any(|n| n.as_bytes() == w))
}

/// Whether `w` lies in the reserved namespace: `__` then anything, or `_` then an
/// uppercase letter.
pub(crate) fn is_reserved_word(w: &[u8]) -> bool {
    matches!(w, [b'_', b'_', ..] | [b'_', b'A'..=b'Z', ..])
}

/// Whether reserved identifier `w` has a known meaning: on the allow list (see
/// [`RESERVED_KEYWORDS`]), or a
/// name of the families renderers declare themselves and no compiler or C library
/// defines (TVM's `__tvm_*`, OCANNL Metal's `__pool<N>`, `__pools`, `__pool_slots`).
pub(crate) fn reserved_allowed(w: &[u8]) -> bool {
    // The whole list, sorted once: a word is met for every reserved identifier in code
    // until an unknown one, so a binary search (about nine compares) over the 300 names.
    static SORTED: OnceLock<Vec<Box<[u8]>>> = OnceLock::new();
    let sorted = SORTED.get_or_init(|| {
        let mut v: Vec<Box<[u8]>> = reserved_allow_list()
            .map(|s| s.into_bytes().into_boxed_slice())
            .collect();
        v.sort_unstable();
        v.dedup();
        v
    });
    if sorted.binary_search_by(|a| (**a).cmp(w)).is_ok() {
        return true;
    }
    if w.starts_with(b"__tvm_") {
        return true;
    }
    match w.strip_prefix(b"__pool") {
        Some(rest) => {
            matches!(rest, b"s" | b"_slots")
                || (!rest.is_empty() && rest.iter().all(u8::is_ascii_digit))
        }
        None => false,
    }
}

/// The first identifier in the reserved namespace that is not [`reserved_allowed`],
/// outside comments and string and character literals (in code, directives and
/// attributes alike), with its offset. A quick scan for reserved words anywhere comes
/// first; the lexer is read only if it finds one that is not allowed.
pub(crate) fn unknown_reserved(src: &[u8]) -> Option<(usize, String)> {
    let ident = crate::lexer::is_ident_continue;
    let word_at = |i: usize| &src[i..crate::lexer::ident_end(src, i)];
    let mut any = false;
    let mut from = 0;
    while let Some(k) = memchr::memchr(b'_', &src[from..]) {
        let i = from + k;
        if (i == 0 || !ident(src[i - 1])) && is_reserved_word(&src[i..]) {
            let w = word_at(i);
            if !reserved_allowed(w) {
                any = true;
                break;
            }
            from = i + w.len().max(1);
        } else {
            from = i + 1;
        }
    }
    if !any {
        return None;
    }
    for t in crate::lexer::Lexer::new(src) {
        match t.kind {
            TokenKind::Ident | TokenKind::Preprocessor | TokenKind::Attribute => {
                let mut i = t.start;
                while i < t.end {
                    if ident(src[i]) {
                        let e = crate::lexer::ident_end(src, i).min(t.end);
                        let w = &src[i..e];
                        if (i == t.start || !ident(src[i - 1]))
                            && is_reserved_word(w)
                            && !reserved_allowed(w)
                        {
                            return Some((i, String::from_utf8_lossy(w).into_owned()));
                        }
                        i = e.max(i + 1);
                    } else {
                        i += 1;
                    }
                }
            }
            _ => {}
        }
    }
    None
}

/// The GNU and Microsoft attribute regions and the feature-test regions of `src` as the
/// lexer reads them: from an identifier `__attribute__`, `__attribute`, `__declspec` or
/// a feature test ([`is_feature_test`]) whose next token (white space, comments and
/// directive lines skipped) is `(`, to the `)` that balances it (or the end of the text). Like `[[...]]`,
/// nothing inside one may be renamed: a bound name spelled like an attribute word
/// (`always_inline`, `packed`, `aligned`) would change the attribute, one spelled like a
/// built-in (`abs`) the answer of `__has_builtin`.
///
/// The reference for [`attribute_regions_at`], which lexes only from the introducers.
#[cfg(test)]
pub(crate) fn attribute_regions(src: &[u8]) -> Vec<(usize, usize)> {
    let starts: Vec<usize> = crate::lexer::tokenize(src)
        .iter()
        .filter(|t| {
            t.kind == TokenKind::Ident
                && (matches!(
                    t.bytes(src),
                    b"__attribute__" | b"__attribute" | b"__declspec"
                ) || is_feature_test(t.bytes(src)))
        })
        .map(|t| t.start)
        .collect();
    attribute_regions_at(src, &starts)
}

/// The attribute regions (see `attribute_regions`, the reference in the tests) given where the introducer identifiers the lexer reads in code
/// start (`introducers`, ascending: what the renamer's scan met). Each region is found by
/// lexing from its introducer only, which reads the tokens the lexer reads from the start
/// of the text (an identifier starts a token and is not at a line start); an introducer
/// inside an earlier region starts none.
pub(crate) fn attribute_regions_at(src: &[u8], introducers: &[usize]) -> Vec<(usize, usize)> {
    let mut out: Vec<(usize, usize)> = Vec::new();
    for &at in introducers {
        if out.last().is_some_and(|&(_, end)| at < end) {
            continue;
        }
        let mut tokens = crate::lexer::Lexer::at(src, at);
        // The introducer itself.
        if tokens.next().is_none() {
            continue;
        }
        let mut next = tokens.next();
        // A directive line may stand between the introducer and its `(`: the preprocessor
        // reads it and goes on looking for the `(` (`__has_attribute\n#define Q 1\n(cold)`
        // is `__has_attribute(cold)`), so the region spans it.
        while next.is_some_and(|u| {
            matches!(
                u.kind,
                TokenKind::Whitespace
                    | TokenKind::LineComment
                    | TokenKind::BlockComment
                    | TokenKind::Preprocessor
            )
        }) {
            next = tokens.next();
        }
        if !next.is_some_and(|u| u.kind == TokenKind::Punct && u.bytes(src) == b"(") {
            continue;
        }
        let mut depth = 1usize;
        let mut end = src.len();
        for u in tokens {
            if u.kind == TokenKind::Punct {
                match u.bytes(src) {
                    b"(" => depth += 1,
                    b")" => {
                        depth -= 1;
                        if depth == 0 {
                            end = u.end;
                            break;
                        }
                    }
                    _ => {}
                }
            }
        }
        out.push((at, end));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// [`untokenizable`] byte by byte: the reference the fast scans are held to.
    fn untokenizable_naive(src: &[u8]) -> Option<usize> {
        (0..src.len()).find(|&i| match src[i] {
            b'\\' => {
                let mut j = i + 1;
                while j < src.len() && matches!(src[j], b' ' | b'\t' | 0x0b | 0x0c | 0) {
                    j += 1;
                }
                matches!(src.get(j), None | Some(b'\n' | b'\r'))
            }
            b'\r' => src.get(i + 1) != Some(&b'\n'),
            b'$' => !super::inside(&super::literal_spans(src), i),
            0x80.. => !super::inside(&super::literal_spans(src), i),
            0 => true,
            b'?' => {
                src.get(i + 1) == Some(&b'?')
                    && matches!(
                        src.get(i + 2),
                        Some(b'=' | b'/' | b'\'' | b'(' | b')' | b'!' | b'<' | b'>' | b'-')
                    )
            }
            _ => false,
        })
    }

    /// Which bytes of `src` lie inside a string or character literal, by a reading of its
    /// own (not the lexer's), exact for text without letters but `x`, digits, `#`, `?`,
    /// `\r` or NUL: a `"` or `'` in code opens a literal that a backslash escapes within
    /// and its own quote or a newline ends; `//` and `/*` open comments, in which quotes
    /// open nothing.
    fn in_literal_naive(src: &[u8]) -> Vec<bool> {
        #[derive(PartialEq)]
        enum S {
            Code,
            Lit(u8),
            Line,
            Block,
        }
        let mut inside = vec![false; src.len()];
        let (mut s, mut i) = (S::Code, 0);
        while i < src.len() {
            let b = src[i];
            match s {
                S::Code => match b {
                    b'"' | b'\'' => {
                        inside[i] = true;
                        s = S::Lit(b);
                    }
                    b'/' if src.get(i + 1) == Some(&b'/') => {
                        s = S::Line;
                        i += 1;
                    }
                    b'/' if src.get(i + 1) == Some(&b'*') => {
                        s = S::Block;
                        i += 1;
                    }
                    _ => {}
                },
                S::Lit(q) => {
                    if b == b'\n' {
                        s = S::Code;
                    } else {
                        inside[i] = true;
                        if b == q {
                            s = S::Code;
                        } else if b == b'\\' && src.get(i + 1).is_some_and(|&n| n != b'\n') {
                            inside[i + 1] = true;
                            i += 1;
                        }
                    }
                }
                S::Line => {
                    if b == b'\n' {
                        s = S::Code;
                    }
                }
                S::Block => {
                    if b == b'*' && src.get(i + 1) == Some(&b'/') {
                        s = S::Code;
                        i += 1;
                    }
                }
            }
            i += 1;
        }
        inside
    }

    /// The first byte [`untokenizable`] must refuse, with literals read by
    /// [`in_literal_naive`]: for the alphabet it is exact for.
    fn untokenizable_independent(src: &[u8]) -> Option<usize> {
        let lit = in_literal_naive(src);
        (0..src.len()).find(|&i| match src[i] {
            b'\\' => {
                let mut j = i + 1;
                while j < src.len() && matches!(src[j], b' ' | b'\t') {
                    j += 1;
                }
                matches!(src.get(j), None | Some(b'\n'))
            }
            b'$' | 0x80.. => !lit[i],
            _ => false,
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]
        #[test]
        fn untokenizable_is_the_first_offending_byte(
            bytes in proptest::collection::vec(
                proptest::sample::select(b"??=/'()!<>-\\\r\n \t$\0ax\"\x80\xa0\xc2\xff".to_vec()),
                0..40,
            )
        ) {
            prop_assert_eq!(untokenizable(&bytes).map(|(i, _)| i), untokenizable_naive(&bytes));
        }

        /// Which `$` and non-ASCII bytes lie in a literal, read independently of the lexer
        /// (the test above shares its reading of literals).
        #[test]
        fn literal_bytes_are_read_as_an_independent_scanner_reads_them(
            bytes in proptest::collection::vec(
                proptest::sample::select(b"\"'\\\n/* \tx$\xa0\xc2".to_vec()),
                0..40,
            )
        ) {
            prop_assert_eq!(untokenizable(&bytes).map(|(i, _)| i), untokenizable_independent(&bytes));
        }
    }

    #[test]
    fn untokenizable_constructs_are_found_everywhere() {
        for (text, at, what) in [
            ("a\\\nb", 1, "splice"),
            ("\"a\\\\\n\"", 3, "splice"),
            ("// x \\  \t\nb", 5, "splice"),
            ("x \\\r\ny", 2, "splice"),
            ("x \\", 2, "splice"),
            ("/* a *\\\n/ */", 6, "splice"),
            ("// a\rb", 4, "carriage"),
            ("x\r", 1, "carriage"),
            ("int a$b;", 5, "$"),
            ("// $\n\"$\"", 3, "$"),
            ("/* \"$\" */", 4, "$"),
            ("#define S \"$\"\n", 11, "$"),
            ("\"$\" $", 4, "$"),
            ("\"\\\"$\n$", 5, "$"),
            ("a\0b", 1, "NUL"),
            ("x ??= y", 2, "trigraph"),
            ("\"??/\"", 1, "trigraph"),
            ("?\\\n?=", 1, "splice"),
            ("a ???= b", 3, "trigraph"),
            ("a ????/ b", 4, "trigraph"),
            ("? ?? ??x ??!", 9, "trigraph"),
            ("x ??= \0", 2, "trigraph"),
            ("\0 ??=", 0, "NUL"),
            // Non-ASCII outside literals: U+00A0 is white space to clang.
            ("int x = i1 -\u{a0}i2;", 12, "non-ASCII"),
            ("{ \u{a0}assert(i1); }", 2, "non-ASCII"),
            ("\u{a0}#define S(x) #x\n", 0, "non-ASCII"),
            ("// é\n", 3, "non-ASCII"),
            ("s = \"é\"; t = é;", 14, "non-ASCII"),
            ("a\\\n \u{a0}", 1, "splice"),
            ("\u{a0} a\\\n", 0, "non-ASCII"),
        ] {
            let got = untokenizable(text.as_bytes());
            assert!(
                got.is_some_and(|(o, w)| o == at && w.contains(what)),
                "{text:?}: {got:?}"
            );
        }
        for ok in [
            "a\r\nb\r\n",
            "\"\\n\" '\\\\' \\x",
            "?? ?x ???",
            "",
            "\"é\" '\u{a0}' u8\"\u{2028}\" \\u00e9",
            "s = \"$\"; c = '$'; t = \"a\\\"$\";",
        ] {
            assert_eq!(untokenizable(ok.as_bytes()), None, "{ok:?}");
        }
    }

    /// The sorted lookup holds exactly the listed names (and the renderers' families):
    /// each listed name, and none of its neighbours one byte longer or shorter.
    #[test]
    fn the_allow_list_lookup_is_the_list() {
        let listed: Vec<String> = reserved_allow_list().collect();
        assert!(listed.len() > 250, "{}", listed.len());
        for n in &listed {
            assert!(reserved_allowed(n.as_bytes()), "{n}");
            for longer in [format!("{n}x"), format!("{n}_")] {
                let want = listed.contains(&longer);
                assert_eq!(reserved_allowed(longer.as_bytes()), want, "{longer}");
            }
            let shorter = &n[..n.len() - 1];
            assert_eq!(
                reserved_allowed(shorter.as_bytes()),
                listed.iter().any(|l| l == shorter),
                "{shorter}"
            );
        }
        for family in ["__tvm_x", "__pool3", "__pools", "__pool_slots"] {
            assert!(reserved_allowed(family.as_bytes()), "{family}");
        }
        for unknown in [
            "__builtin_LINE",
            "__builtin_offsetof",
            "__STRING",
            "__has_zz",
            "__pool",
        ] {
            assert!(!reserved_allowed(unknown.as_bytes()), "{unknown}");
        }
    }

    #[test]
    fn observers_are_found() {
        let none = std::iter::empty();
        assert_eq!(
            spelling_observer(b"puts(__func__)", none, true),
            Some((5, "__func__".into()))
        );
        for (text, what) in [
            ("x = __PRETTY_FUNCTION__;", "FUNCTION"),
            ("__builtin_FUNCTION()", "FUNCTION"),
            ("__asm__ volatile(\"\")", "asm"),
            ("_Pragma(\"omp\")", "_Pragma"),
            ("__attribute__((alias(\"f\")))", "alias"),
            ("assert(i1 > 0);", "assert"),
        ] {
            let got = spelling_observer(text.as_bytes(), std::iter::empty(), true);
            assert_eq!(got.map(|(_, w)| w), Some(what.to_owned()), "{text}");
        }
        // `assert` only when configured; other configured observers too.
        assert_eq!(
            spelling_observer(b"assert(x)", std::iter::empty(), false),
            None
        );
        assert_eq!(
            spelling_observer(b"LOG(x); assert(y)", ["LOG"].into_iter(), false),
            Some((0, "LOG".into()))
        );
        assert_eq!(
            spelling_observer(b"float i1 = 0;", ["LOG"].into_iter(), true),
            None
        );
        // Observing macros as whole identifiers only: TVM's `__tvm_assert_parts` invokes
        // no `assert`; a later whole one still counts.
        for (text, at) in [
            ("const char* __tvm_assert_parts[6];", None),
            ("x = 1assert + assertion + my_assert;", None),
            ("__tvm_assert_parts; assert(i1);", Some(20)),
            ("assert", Some(0)),
            ("(assert)", Some(1)),
            ("\"assert\"", Some(1)),
        ] {
            let got = spelling_observer(text.as_bytes(), std::iter::empty(), true);
            assert_eq!(got.map(|(i, _)| i), at, "{text}");
        }
        assert_eq!(
            spelling_observer(b"LOGGER(x); MY_LOG(y); LOG(z)", ["LOG"].into_iter(), false),
            Some((22, "LOG".into()))
        );
        // Built-in observers stay substrings (`__PRETTY_FUNCTION__`, `__asm__`).
        assert_eq!(
            spelling_observer(b"x__func__y", std::iter::empty(), false),
            Some((1, "__func__".into()))
        );
    }
}
