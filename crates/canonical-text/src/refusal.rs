//! Why names were kept as spelled: [`Refusal`].

use std::fmt;

/// Why some or all names were left as spelled. Renaming less is always sound: a refusal
/// can cost a cache miss, never a wrong hit.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Refusal {
    /// `name` is both bound and free: no bound name (nor a name derived from one) is
    /// renamed. Loop symbols and scope-locals still are.
    BoundMeetsFree {
        /// The first such name.
        name: String,
    },
    /// `name` is bound but lies in the implementation's reserved namespace (`__x`, `_X`),
    /// so other occurrences might be its builtin or macro meaning: no bound name (nor a
    /// name derived from one) is renamed. Loop symbols and scope-locals still are.
    ReservedBoundName {
        /// The first such name.
        name: String,
    },
    /// The text holds something whose tokenization is not modelled exactly for every
    /// dialect we accept (a line splice anywhere, a carriage return not before a
    /// newline, a `$` or a non-ASCII byte outside string and character literals, a NUL byte, a trigraph, a `'` after a number or an identifier
    /// other than an encoding prefix, a C++ raw string, a backslash in code): nothing is
    /// renamed and the key is taken over the exact text.
    AmbiguousLexing {
        /// Byte offset of the first such thing.
        offset: usize,
        /// What it was.
        what: &'static str,
    },
    /// The text can observe the spelling of a name: `__func__`, `__FUNCTION__`,
    /// `__PRETTY_FUNCTION__`, `__builtin_FUNCTION` (the enclosing function's name), `asm`,
    /// `_Pragma` or a symbol-naming attribute (`alias`, `weakref`, `ifunc`, `symver`:
    /// names read out of strings), a macro in [`Names::observers`](crate::Names::observers), or a preprocessor
    /// line with `#` or `##` after its introducer (a macro that may stringify or paste
    /// its arguments). Nothing is renamed, the key is taken over the exact text, and the
    /// kernel's own name is kept whole (its segment index included).
    SpellingObserved {
        /// Byte offset of the first such thing.
        offset: usize,
        /// What it was.
        what: String,
    },
    /// An identifier in the reserved namespace (`__x`, `_X`) outside comments and
    /// literals whose meaning is not known (not on
    /// [`allow_lists::reserved_names`](crate::allow_lists::reserved_names): keywords,
    /// feature tests, value built-ins, attribute words): compilers and headers
    /// define built-ins and macros that observe a spelling or a column (clang's
    /// `__builtin_COLUMN`, `__builtin_dump_struct`; glibc's `__STRING`, `__CONCAT`). Allow,
    /// don't deny: nothing is renamed, the key is taken over the exact text, and the
    /// kernel's own name is kept whole.
    UnknownReserved {
        /// Byte offset of the first such identifier.
        offset: usize,
        /// The identifier.
        name: String,
    },
    /// A name that would be renamed (or the kernel's own name) occurs inside a GNU or
    /// Microsoft attribute (`__attribute__((...))`, `__attribute((...))`,
    /// `__declspec(...)`), where a word is an attribute's name or argument, as inside
    /// `[[...]]`: renaming it could change the attribute (`always_inline`, `packed`).
    /// Nothing is renamed, the key is taken over the exact text, and the kernel's own
    /// name is kept whole.
    NameInAttribute {
        /// Byte offset of the first such occurrence.
        offset: usize,
        /// The name.
        name: String,
    },
    /// A name that would be renamed (or the kernel's own name) occurs inside a feature
    /// test (`__has_builtin(...)` and every `__has_*`/`__is_*` kin), whose answer depends
    /// on its argument's spelling (`__has_builtin(abs)` is 1, `__has_builtin(n1)` is 0).
    /// Nothing is renamed, the key is taken over the exact text, and the kernel's own
    /// name is kept whole.
    NameInFeatureTest {
        /// Byte offset of the first such occurrence.
        offset: usize,
        /// The name.
        name: String,
    },
    /// Names of the text collide in the renamer's name table: one lookup examined more
    /// than 256 slots, which names that are not made to collide do not do in practice.
    /// Nothing is renamed and the key is taken over the exact text (as for
    /// [`Refusal::AmbiguousLexing`]): names made to collide cost at most 256 slots per
    /// lookup instead of time quadratic in their number.
    NameCollisions {
        /// Byte offset of the name whose lookup gave up (0 for a name from [`Names`](crate::Names)).
        offset: usize,
    },
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::BoundMeetsFree { name } => {
                write!(f, "bound name `{name}` is also free: no bound name renamed")
            }
            Refusal::ReservedBoundName { name } => write!(
                f,
                "bound name `{name}` is in the reserved namespace: no bound name renamed"
            ),
            Refusal::AmbiguousLexing { offset, what } => write!(
                f,
                "{what} at byte {offset}: nothing renamed, key over the exact text"
            ),
            Refusal::NameCollisions { offset } => write!(
                f,
                "names colliding in the name table at byte {offset}: nothing renamed, key over the exact text"
            ),
            Refusal::UnknownReserved { offset, name } => write!(
                f,
                "reserved identifier `{name}` of unknown meaning at byte {offset}: nothing renamed, key over the exact text and the whole kernel name"
            ),
            Refusal::NameInAttribute { offset, name } => write!(
                f,
                "`{name}` at byte {offset} is inside a GNU attribute: nothing renamed, key over the exact text and the whole kernel name"
            ),
            Refusal::NameInFeatureTest { offset, name } => write!(
                f,
                "`{name}` at byte {offset} is inside a feature test: nothing renamed, key over the exact text and the whole kernel name"
            ),
            Refusal::SpellingObserved { offset, what } => write!(
                f,
                "`{what}` at byte {offset} observes spellings: nothing renamed, key over the exact text and the whole kernel name"
            ),
        }
    }
}
