//! A lexer over C, CUDA and Metal C-like kernel text.
//!
//! [`Lexer`] walks a byte slice and yields [`Token`]s whose spans tile the input exactly:
//! every byte belongs to exactly one token, in order. It recognizes identifiers, numbers
//! (C preprocessing numbers), punctuation with multi-character operators (maximal munch
//! over the union of C and C++ operators and digraphs), string and character literals
//! with escapes and encoding prefixes, `//` and `/* */` comments, preprocessor lines
//! (with backslash continuations) and `[[...]]` attributes.
//!
//! Any input lexes without panic: an unterminated comment or attribute runs to the end
//! of the input, an unterminated literal to the end of its line, and a byte that starts
//! no token is a one-byte [`TokenKind::Other`] token.
//!
//! ```
//! use canonical_text::lexer::{tokenize, TokenKind};
//!
//! let src = b"x->y += 1.5e+3f; // done";
//! let kinds: Vec<TokenKind> = tokenize(src)
//!     .iter()
//!     .filter(|t| t.kind != TokenKind::Whitespace)
//!     .map(|t| t.kind)
//!     .collect();
//! use TokenKind::*;
//! assert_eq!(kinds, [Ident, Punct, Ident, Punct, Number, Punct, LineComment]);
//! ```

/// Every punctuator the lexer produces; the first 25 are the single-byte ones.
const PUNCTS: [&[u8]; 58] = [
    b"[", b"]", b"(", b")", b"{", b"}", b".", b"&", b"*", b"+", b"-", b"~", b"!", b"/", b"%", b"<",
    b">", b"^", b"|", b"?", b":", b";", b"=", b",", b"#", //
    b"...", b".*", b"->", b"->*", b"--", b"-=", b"++", b"+=", b"<<", b"<<=", b"<=", b"<=>", b"<:",
    b"<%", b">>", b">>=", b">=", b"&&", b"&=", b"||", b"|=", b"==", b"!=", b"*=", b"/=", b"^=",
    b"%=", b"%>", b"%:", b"%:%:", b"::", b":>", b"##",
];

/// What a token is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TokenKind {
    /// A run of spaces, tabs, newlines, carriage returns, vertical tabs and form feeds.
    Whitespace,
    /// An identifier or keyword: a letter, `_`, `$` or non-ASCII byte, then also digits.
    Ident,
    /// A preprocessing number such as `42`, `0x1f`, `1.5e-3f` or `.5`.
    Number,
    /// An operator or punctuator such as `+`, `->`, `<<=`, `::` or `...`.
    Punct,
    /// A string literal, including any encoding prefix (`L`, `u`, `U`, `u8`).
    Str,
    /// A character literal, including any encoding prefix.
    Char,
    /// A `//` comment up to (not including) the end of its line, backslash
    /// continuations included.
    LineComment,
    /// A `/* */` comment (to the end of input when unterminated).
    BlockComment,
    /// A preprocessor line: `#` (or `%:`) first on its line, up to (not including) the
    /// end of the line, backslash continuations and comments included.
    Preprocessor,
    /// An attribute `[[...]]`, brackets included.
    Attribute,
    /// A single byte that starts no other token (for example `\`, `@` or a control byte).
    Other,
}

/// One token: its kind and its byte span `start..end` in the input.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Token {
    /// What the token is.
    pub kind: TokenKind,
    /// Offset of the first byte.
    pub start: usize,
    /// Offset one past the last byte.
    pub end: usize,
}

impl Token {
    /// The token's bytes in `src` (empty if the span does not fit `src`).
    pub fn bytes<'a>(&self, src: &'a [u8]) -> &'a [u8] {
        src.get(self.start..self.end).unwrap_or(&[])
    }
}

/// Byte classes.
const C_OTHER: u8 = 0;
const C_SPACE: u8 = 1;
const C_IDENT: u8 = 2;
const C_DIGIT: u8 = 3;
const C_PUNCT: u8 = 4;
const C_QUOTE: u8 = 5;

const fn class_table() -> [u8; 256] {
    let mut t = [C_OTHER; 256];
    let mut i = 0;
    while i < 256 {
        let b = i as u8;
        t[i] = if b.is_ascii_alphabetic() || b == b'_' || b == b'$' || b >= 0x80 {
            C_IDENT
        } else if b.is_ascii_digit() {
            C_DIGIT
        } else if matches!(b, b' ' | b'\t' | b'\n' | b'\r' | 0x0b | 0x0c) {
            C_SPACE
        } else if matches!(b, b'"' | b'\'') {
            C_QUOTE
        } else if matches!(
            b,
            b'[' | b']'
                | b'('
                | b')'
                | b'{'
                | b'}'
                | b'.'
                | b'&'
                | b'*'
                | b'+'
                | b'-'
                | b'~'
                | b'!'
                | b'/'
                | b'%'
                | b'<'
                | b'>'
                | b'^'
                | b'|'
                | b'?'
                | b':'
                | b';'
                | b'='
                | b','
                | b'#'
        ) {
            C_PUNCT
        } else {
            C_OTHER
        };
        i += 1;
    }
    t
}

static CLASS: [u8; 256] = class_table();

/// Bytes that may continue an identifier.
const IDENT_CONTINUE: [bool; 256] = {
    let mut t = [false; 256];
    let mut i = 0;
    while i < 256 {
        t[i] = CLASS_TABLE[i] == C_IDENT || CLASS_TABLE[i] == C_DIGIT;
        i += 1;
    }
    t
};
const CLASS_TABLE: [u8; 256] = class_table();

/// Whether `b` may continue an identifier.
#[inline]
pub(crate) fn is_ident_continue(b: u8) -> bool {
    IDENT_CONTINUE[b as usize]
}

/// Whether `b` may start an identifier.
#[inline]
pub(crate) fn is_ident_start(b: u8) -> bool {
    CLASS[b as usize] == C_IDENT
}

/// An iterator over the tokens of a byte slice. See the [module docs](self).
#[derive(Clone, Debug)]
pub struct Lexer<'a> {
    src: &'a [u8],
    pos: usize,
    /// Only whitespace (and block comments) since the start of the line.
    line_start: bool,
}

impl<'a> Lexer<'a> {
    /// A lexer at the start of `src`.
    pub fn new(src: &'a [u8]) -> Self {
        Lexer {
            src,
            pos: 0,
            line_start: true,
        }
    }

    /// Moves past the spaces and tabs at the lexer's position without a token: what
    /// follows is what [`Iterator::next`] would read after the whitespace token holding
    /// them (a token never starts inside white space, and white space without a line end
    /// leaves the line-start state as it was). For readers that skip white space; single
    /// blanks between tokens are most of it (skipping line ends too measured no better).
    #[inline(always)]
    pub(crate) fn skip_blanks(&mut self) {
        while matches!(self.src.get(self.pos), Some(b' ' | b'\t')) {
            self.pos += 1;
        }
    }

    /// A lexer at byte `pos` of `src`, which must start an identifier the lexer reads
    /// there (not at a line start, since the identifier is no white space): from there it
    /// reads the tokens a lexer from the start of `src` reads.
    pub(crate) fn at(src: &'a [u8], pos: usize) -> Self {
        Lexer {
            src,
            pos,
            line_start: false,
        }
    }
}

#[inline(always)]
fn at(src: &[u8], i: usize) -> u8 {
    src.get(i).copied().unwrap_or(0)
}

#[inline(always)]
pub(crate) fn ident_end(src: &[u8], mut p: usize) -> usize {
    while p < src.len() && is_ident_continue(src[p]) {
        p += 1;
    }
    p
}

/// End of a preprocessing number whose first byte is before `p`.
pub(crate) fn number_end(src: &[u8], mut p: usize) -> usize {
    let n = src.len();
    while p < n {
        let b = src[p];
        if is_ident_continue(b) || b == b'.' {
            if matches!(b, b'e' | b'E' | b'p' | b'P') && matches!(at(src, p + 1), b'+' | b'-') {
                p += 2;
            } else {
                p += 1;
            }
        } else {
            // No digit separator: gnu17 has none (`1'000` is `1` and a character
            // literal); canonical_kernel refuses a `'` after a number.
            break;
        }
    }
    p
}

/// End of a literal whose opening quote is at `q`: after the closing quote, or at the
/// unescaped newline (not included) or the end of input if unterminated.
pub(crate) fn literal_end(src: &[u8], q: usize) -> usize {
    let quote = at(src, q);
    let n = src.len();
    let mut p = q + 1;
    while p < n {
        let b = src[p];
        if b == quote {
            return p + 1;
        } else if b == b'\\' {
            p += 2;
        } else if b == b'\n' {
            return p;
        } else {
            p += 1;
        }
    }
    n
}

/// End of a block comment whose `/*` is at `p`.
pub(crate) fn block_comment_end(src: &[u8], p: usize) -> usize {
    let n = src.len();
    let mut i = p + 2;
    while i < n {
        match memchr::memchr(b'*', &src[i..]) {
            None => return n,
            Some(k) => {
                i += k;
                if at(src, i + 1) == b'/' {
                    return i + 2;
                }
                i += 1;
            }
        }
    }
    n
}

/// Whether the newline at `nl` is escaped: preceded by a backslash and then only
/// spaces, tabs or carriage returns (looking no further back than `floor`).
fn newline_escaped(src: &[u8], nl: usize, floor: usize) -> bool {
    let mut i = nl;
    while i > floor {
        match src[i - 1] {
            b' ' | b'\t' | b'\r' => i -= 1,
            b'\\' => return true,
            _ => return false,
        }
    }
    false
}

/// End of a line comment starting at `p` (before its final newline).
pub(crate) fn line_comment_end(src: &[u8], p: usize) -> usize {
    let n = src.len();
    let mut i = p + 2;
    loop {
        match memchr::memchr(b'\n', &src[i.min(n)..]) {
            None => return n,
            Some(k) => {
                let nl = i + k;
                if newline_escaped(src, nl, p + 2) {
                    i = nl + 1;
                } else {
                    return nl;
                }
            }
        }
    }
}

/// End of a preprocessor line whose introducer ends at `p` (before its final newline).
pub(crate) fn preprocessor_end(src: &[u8], p: usize) -> usize {
    let n = src.len();
    let mut i = p + 1;
    while i < n {
        // The line's end, unless a comment or literal starts before it.
        let nl = memchr::memchr(b'\n', &src[i..]).map_or(n, |k| i + k);
        match memchr::memchr3(b'/', b'"', b'\'', &src[i..nl]) {
            Some(k) => {
                let j = i + k;
                match src[j] {
                    b'/' if at(src, j + 1) == b'*' => i = block_comment_end(src, j),
                    b'/' if at(src, j + 1) == b'/' => return line_comment_end(src, j),
                    b'/' => i = j + 1,
                    _ => i = literal_end(src, j),
                }
            }
            None if nl < n && newline_escaped(src, nl, p) => i = nl + 1,
            None => return nl,
        }
    }
    n
}

/// [`preprocessor_end`] a byte at a time: the reference it is tested against.
#[cfg(test)]
fn preprocessor_end_bytewise(src: &[u8], p: usize) -> usize {
    let n = src.len();
    let mut i = p + 1;
    while i < n {
        match src[i] {
            b'\n' => {
                if newline_escaped(src, i, p) {
                    i += 1;
                } else {
                    return i;
                }
            }
            b'/' if at(src, i + 1) == b'*' => i = block_comment_end(src, i),
            b'/' if at(src, i + 1) == b'/' => return line_comment_end(src, i),
            b'"' | b'\'' => i = literal_end(src, i),
            _ => i += 1,
        }
    }
    n
}

/// End of an attribute whose `[[` is at `p`.
pub(crate) fn attribute_end(src: &[u8], p: usize) -> usize {
    let n = src.len();
    let mut i = p + 2;
    let mut depth = 0usize;
    while i < n {
        match src[i] {
            b'[' => {
                depth += 1;
                i += 1;
            }
            b']' => {
                if depth == 0 && at(src, i + 1) == b']' {
                    return i + 2;
                }
                depth = depth.saturating_sub(1);
                i += 1;
            }
            b'"' | b'\'' => i = literal_end(src, i),
            _ => i += 1,
        }
    }
    n
}

/// The index in [`PUNCTS`] of `p` (compile-time helper).
pub(crate) const fn punct_index(p: &[u8]) -> u8 {
    let mut i = 0;
    while i < PUNCTS.len() {
        let q = PUNCTS[i];
        if q.len() == p.len() {
            let mut j = 0;
            while j < q.len() && q[j] == p[j] {
                j += 1;
            }
            if j == q.len() {
                return i as u8;
            }
        }
        i += 1;
    }
    panic!("not a punctuator")
}

/// `(length, index in PUNCTS)` of the punctuator starting at `p` (maximal munch over C
/// and C++ operators and digraphs). A byte that is no punctuator gives `(1, u8::MAX)`.
#[inline(always)]
fn punct_at(src: &[u8], p: usize) -> (usize, u8) {
    macro_rules! t {
        ($s:literal) => {
            ($s.len(), const { punct_index($s) })
        };
    }
    let b0 = at(src, p);
    let b1 = at(src, p + 1);
    let b2 = at(src, p + 2);
    match b0 {
        b'.' => match b1 {
            b'.' if b2 == b'.' => t!(b"..."),
            b'*' => t!(b".*"),
            _ => t!(b"."),
        },
        b'-' => match b1 {
            b'>' if b2 == b'*' => t!(b"->*"),
            b'>' => t!(b"->"),
            b'-' => t!(b"--"),
            b'=' => t!(b"-="),
            _ => t!(b"-"),
        },
        b'+' => match b1 {
            b'+' => t!(b"++"),
            b'=' => t!(b"+="),
            _ => t!(b"+"),
        },
        b'<' => match b1 {
            b'<' if b2 == b'=' => t!(b"<<="),
            b'=' if b2 == b'>' => t!(b"<=>"),
            // C++11: `<::` is `<` `::` unless followed by `:` or `>`.
            b':' if b2 == b':' && !matches!(at(src, p + 3), b':' | b'>') => t!(b"<"),
            b'<' => t!(b"<<"),
            b'=' => t!(b"<="),
            b':' => t!(b"<:"),
            b'%' => t!(b"<%"),
            _ => t!(b"<"),
        },
        b'>' => match b1 {
            b'>' if b2 == b'=' => t!(b">>="),
            b'>' => t!(b">>"),
            b'=' => t!(b">="),
            _ => t!(b">"),
        },
        b'&' => match b1 {
            b'&' => t!(b"&&"),
            b'=' => t!(b"&="),
            _ => t!(b"&"),
        },
        b'|' => match b1 {
            b'|' => t!(b"||"),
            b'=' => t!(b"|="),
            _ => t!(b"|"),
        },
        b'=' if b1 == b'=' => t!(b"=="),
        b'!' if b1 == b'=' => t!(b"!="),
        b'*' if b1 == b'=' => t!(b"*="),
        b'/' if b1 == b'=' => t!(b"/="),
        b'^' if b1 == b'=' => t!(b"^="),
        b'%' => match b1 {
            b':' if b2 == b'%' && at(src, p + 3) == b':' => t!(b"%:%:"),
            b'=' => t!(b"%="),
            b'>' => t!(b"%>"),
            b':' => t!(b"%:"),
            _ => t!(b"%"),
        },
        b':' => match b1 {
            b':' => t!(b"::"),
            b'>' => t!(b":>"),
            _ => t!(b":"),
        },
        b'#' if b1 == b'#' => t!(b"##"),
        _ => match PUNCT_SINGLE[b0 as usize] {
            u8::MAX => (1, u8::MAX),
            i => (1, i),
        },
    }
}

const fn punct_single_table() -> [u8; 256] {
    let mut t = [u8::MAX; 256];
    let mut i = 0;
    while i < PUNCTS.len() {
        if PUNCTS[i].len() == 1 {
            t[PUNCTS[i][0] as usize] = i as u8;
        }
        i += 1;
    }
    t
}

static PUNCT_SINGLE: [u8; 256] = punct_single_table();

/// One scanned token: its kind, its end, and `aux` (for [`TokenKind::Punct`], the index
/// in [`PUNCTS`]; for [`TokenKind::Whitespace`], 1 if it holds a newline).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Scan {
    pub(crate) kind: TokenKind,
    pub(crate) end: usize,
    pub(crate) aux: u8,
}

/// Scans the token starting at `p` (`p < src.len()`); `line_start` says whether only
/// whitespace and block comments precede it on its line. The end is always in
/// `p + 1..=src.len()`.
#[inline(always)]
pub(crate) fn scan(src: &[u8], p: usize, line_start: bool) -> Scan {
    let n = src.len();
    let b = src[p];
    let (kind, end, aux) = match CLASS[b as usize] {
        C_SPACE => {
            let mut e = p + 1;
            let mut nl = b == b'\n';
            while e < n && CLASS[src[e] as usize] == C_SPACE {
                nl |= src[e] == b'\n';
                e += 1;
            }
            (TokenKind::Whitespace, e, nl as u8)
        }
        C_IDENT => {
            let e = ident_end(src, p + 1);
            let q = at(src, e);
            let prefix = &src[p..e];
            // gnu17: `u8` prefixes strings only (`u8'x'` is C23).
            if (q == b'"' && matches!(prefix, b"L" | b"u" | b"U" | b"u8"))
                || (q == b'\'' && matches!(prefix, b"L" | b"u" | b"U"))
            {
                let kind = if q == b'"' {
                    TokenKind::Str
                } else {
                    TokenKind::Char
                };
                (kind, literal_end(src, e), 0)
            } else {
                (TokenKind::Ident, e, 0)
            }
        }
        C_DIGIT => (TokenKind::Number, number_end(src, p + 1), 0),
        C_QUOTE => {
            let kind = if b == b'"' {
                TokenKind::Str
            } else {
                TokenKind::Char
            };
            (kind, literal_end(src, p), 0)
        }
        C_PUNCT => {
            let b1 = at(src, p + 1);
            match b {
                b'/' if b1 == b'/' => (TokenKind::LineComment, line_comment_end(src, p), 0),
                b'/' if b1 == b'*' => (TokenKind::BlockComment, block_comment_end(src, p), 0),
                b'#' if line_start => (TokenKind::Preprocessor, preprocessor_end(src, p), 0),
                b'%' if b1 == b':' && line_start => {
                    (TokenKind::Preprocessor, preprocessor_end(src, p + 1), 0)
                }
                b'[' if b1 == b'[' => (TokenKind::Attribute, attribute_end(src, p), 0),
                b'.' if b1.is_ascii_digit() => (TokenKind::Number, number_end(src, p + 1), 0),
                _ => {
                    let (len, idx) = punct_at(src, p);
                    (TokenKind::Punct, p + len, idx)
                }
            }
        }
        _ => (TokenKind::Other, p + 1, 0),
    };
    // Never stand still and never run past the end, whatever the scanners said.
    Scan {
        kind,
        end: end.clamp(p + 1, n),
        aux,
    }
}

/// Whether `kind` leaves the lexer at the start of a line (`Some(true)`), elsewhere on
/// it (`Some(false)`), or where it was (`None`: a block comment is one space to the
/// preprocessor).
#[inline(always)]
pub(crate) fn next_line_start(s: Scan, line_start: bool) -> bool {
    match s.kind {
        TokenKind::Whitespace => line_start || s.aux != 0,
        TokenKind::BlockComment => line_start,
        _ => false,
    }
}

impl Iterator for Lexer<'_> {
    type Item = Token;

    #[inline]
    fn next(&mut self) -> Option<Token> {
        let start = self.pos;
        if start >= self.src.len() {
            return None;
        }
        let s = scan(self.src, start, self.line_start);
        self.line_start = next_line_start(s, self.line_start);
        self.pos = s.end;
        Some(Token {
            kind: s.kind,
            start,
            end: s.end,
        })
    }
}

/// All tokens of `src`, whitespace included; their spans tile `src`.
pub fn tokenize(src: &[u8]) -> Vec<Token> {
    Lexer::new(src).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use TokenKind::*;

    proptest::proptest! {
        /// The searching preprocessor-line end agrees with the bytewise one.
        #[test]
        fn preprocessor_end_agrees_with_the_bytewise_one(
            s in "([a-z#/*\"'\\ \t\r]|\n){0,80}",
            from in 0usize..80,
        ) {
            let src = s.as_bytes();
            let p = from.min(src.len());
            proptest::prop_assert_eq!(preprocessor_end(src, p), preprocessor_end_bytewise(src, p));
        }
    }

    proptest::proptest! {
        /// Skipping blanks before each token reads the lexer's non-whitespace tokens.
        #[test]
        fn skipping_blanks_reads_the_same_tokens(
            s in r#"([a-z0-9#/*"'\\ \t\r\x0b\x0c%:.<>\[\]{}()_]|\n){0,120}"#,
        ) {
            let src = s.as_bytes();
            let all: Vec<Token> = tokenize(src)
                .into_iter()
                .filter(|t| t.kind != Whitespace)
                .collect();
            let mut skipping = Vec::new();
            let mut lexer = Lexer::new(src);
            loop {
                lexer.skip_blanks();
                let Some(t) = lexer.next() else { break };
                if t.kind != Whitespace {
                    skipping.push(t);
                }
            }
            proptest::prop_assert_eq!(all, skipping);
        }
    }

    /// Non-whitespace tokens as (kind, text).
    fn lex(src: &str) -> Vec<(TokenKind, &str)> {
        tokenize(src.as_bytes())
            .into_iter()
            .filter(|t| t.kind != Whitespace)
            .map(|t| (t.kind, &src[t.start..t.end]))
            .collect()
    }

    #[test]
    fn identifiers_numbers_and_operators() {
        assert_eq!(
            lex("a_1 += $b*0x1fUL>>=3;"),
            [
                (Ident, "a_1"),
                (Punct, "+="),
                (Ident, "$b"),
                (Punct, "*"),
                (Number, "0x1fUL"),
                (Punct, ">>="),
                (Number, "3"),
                (Punct, ";")
            ]
        );
        assert_eq!(
            lex("1.5e+3f .5 1e-x 0x1p-3 1'000"),
            [
                (Number, "1.5e+3f"),
                (Number, ".5"),
                (Number, "1e-x"),
                (Number, "0x1p-3"),
                (Number, "1"),
                (Char, "'000")
            ]
        );
        assert_eq!(
            lex("a->b.c::d ... .* ->* <=> <: :> <% %> %:%: ## a-->b"),
            [
                (Ident, "a"),
                (Punct, "->"),
                (Ident, "b"),
                (Punct, "."),
                (Ident, "c"),
                (Punct, "::"),
                (Ident, "d"),
                (Punct, "..."),
                (Punct, ".*"),
                (Punct, "->*"),
                (Punct, "<=>"),
                (Punct, "<:"),
                (Punct, ":>"),
                (Punct, "<%"),
                (Punct, "%>"),
                (Punct, "%:%:"),
                (Punct, "##"),
                (Ident, "a"),
                (Punct, "--"),
                (Punct, ">"),
                (Ident, "b"),
            ]
        );
        assert_eq!(
            lex("x<::y"),
            [(Ident, "x"), (Punct, "<"), (Punct, "::"), (Ident, "y")]
        );
        assert_eq!(lex("é_1x"), [(Ident, "é_1x")]);
    }

    #[test]
    fn literals_with_escapes_and_prefixes() {
        assert_eq!(
            lex(r#"s = "a\"b" L"w" u8"x" 'c' '\'' U'z';"#),
            [
                (Ident, "s"),
                (Punct, "="),
                (Str, r#""a\"b""#),
                (Str, r#"L"w""#),
                (Str, r#"u8"x""#),
                (Char, "'c'"),
                (Char, r"'\''"),
                (Char, "U'z'"),
                (Punct, ";")
            ]
        );
        // Unterminated literal stops at the end of the line.
        assert_eq!(lex("\"abc\nx"), [(Str, "\"abc"), (Ident, "x")]);
        assert_eq!(lex("'abc"), [(Char, "'abc")]);
        assert_eq!(lex("\"ab\\"), [(Str, "\"ab\\")]);
        // An escaped newline continues a literal.
        assert_eq!(lex("\"a\\\nb\" c"), [(Str, "\"a\\\nb\""), (Ident, "c")]);
        // Comment markers inside a literal are literal.
        assert_eq!(lex("\"//\" x"), [(Str, "\"//\""), (Ident, "x")]);
    }

    #[test]
    fn comments() {
        assert_eq!(
            lex("a // one \\\n two\nb /* x\n y */ c /* open"),
            [
                (Ident, "a"),
                (LineComment, "// one \\\n two"),
                (Ident, "b"),
                (BlockComment, "/* x\n y */"),
                (Ident, "c"),
                (BlockComment, "/* open")
            ]
        );
        assert_eq!(lex("/**/x"), [(BlockComment, "/**/"), (Ident, "x")]);
        assert_eq!(lex("/*/ x"), [(BlockComment, "/*/ x")]);
        assert_eq!(
            lex("// a \\  \r\nb\nc"),
            [(LineComment, "// a \\  \r\nb"), (Ident, "c")]
        );
    }

    #[test]
    fn preprocessor_lines() {
        assert_eq!(
            lex("#define F(x) \\\n  (x + 1)\nF(a) # b\n  #pragma unroll // c\nd"),
            [
                (Preprocessor, "#define F(x) \\\n  (x + 1)"),
                (Ident, "F"),
                (Punct, "("),
                (Ident, "a"),
                (Punct, ")"),
                (Punct, "#"),
                (Ident, "b"),
                (Preprocessor, "#pragma unroll // c"),
                (Ident, "d")
            ]
        );
        assert_eq!(
            lex("/* c */ #if 1 /* a\nb */ x\ny"),
            [
                (BlockComment, "/* c */"),
                (Preprocessor, "#if 1 /* a\nb */ x"),
                (Ident, "y")
            ]
        );
        assert_eq!(
            lex("%:include <a.h>\nx"),
            [(Preprocessor, "%:include <a.h>"), (Ident, "x")]
        );
        assert_eq!(
            lex("#error don't\nx"),
            [(Preprocessor, "#error don't"), (Ident, "x")]
        );
        assert_eq!(lex("#"), [(Preprocessor, "#")]);
    }

    #[test]
    fn attributes() {
        assert_eq!(
            lex("device float *p [[buffer(0)]], uint i [[thread_position_in_grid]]; a[b[c]]"),
            [
                (Ident, "device"),
                (Ident, "float"),
                (Punct, "*"),
                (Ident, "p"),
                (Attribute, "[[buffer(0)]]"),
                (Punct, ","),
                (Ident, "uint"),
                (Ident, "i"),
                (Attribute, "[[thread_position_in_grid]]"),
                (Punct, ";"),
                (Ident, "a"),
                (Punct, "["),
                (Ident, "b"),
                (Punct, "["),
                (Ident, "c"),
                (Punct, "]"),
                (Punct, "]"),
            ]
        );
        assert_eq!(lex("[[a[1]]] x"), [(Attribute, "[[a[1]]]"), (Ident, "x")]);
        assert_eq!(lex("[[x \"]]\"]]"), [(Attribute, "[[x \"]]\"]]")]);
        assert_eq!(lex("[[open"), [(Attribute, "[[open")]);
    }

    #[test]
    fn stray_bytes_are_other() {
        assert_eq!(
            lex("a\\b@`\u{1}"),
            [
                (Ident, "a"),
                (Other, "\\"),
                (Ident, "b"),
                (Other, "@"),
                (Other, "`"),
                (Other, "\u{1}")
            ]
        );
    }

    #[test]
    fn spans_tile_the_input() {
        for src in [
            "",
            "a",
            " x /* \"",
            "#define a \\",
            "'",
            "\"\\",
            "[[",
            "%:",
            "..",
            "\\\n",
        ] {
            let toks = tokenize(src.as_bytes());
            let mut pos = 0;
            for t in &toks {
                assert_eq!(t.start, pos);
                assert!(t.end > t.start);
                pos = t.end;
            }
            assert_eq!(pos, src.len());
        }
    }
}
