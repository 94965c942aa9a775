//! The tagged byte encoding of a canonical token stream, and its human-readable rendering.
//!
//! Every element starts with a tag byte that says what it is and how long it is:
//!
//! | tag | element | followed by |
//! |-----|---------|-------------|
//! | `SPACE` / `NEWLINE` | a run of whitespace (with / without a newline) | nothing |
//! | `RENAMED` | a renamed name | its number, LEB128 |
//! | `OWN` | the kernel's own name | nothing (the kernel token is a separate key part) |
//! | `IDENT`, `NUMBER`, `STR`, `CHAR`, `PREPROC`, `ATTR`, `OTHER` | a token kept as spelled | length (LEB128), bytes |
//! | `COMMENT` | a comment | `TEXT` (length, bytes), `RENAMED` and `OWN` elements, then `COMMENT_END` |
//! | `RAW` | the whole input, nothing renamed | all remaining bytes |
//! | `PUNCT + i` | the punctuator `PUNCTS[i]` | nothing |
//!
//! So the encoding is a prefix code: it decodes uniquely, element by element.

pub(crate) const SPACE: u8 = 0x01;
pub(crate) const NEWLINE: u8 = 0x02;
pub(crate) const RENAMED: u8 = 0x03;
pub(crate) const OWN: u8 = 0x04;
pub(crate) const IDENT: u8 = 0x05;
pub(crate) const NUMBER: u8 = 0x06;
pub(crate) const STR: u8 = 0x07;
pub(crate) const CHAR: u8 = 0x08;
pub(crate) const PREPROC: u8 = 0x09;
pub(crate) const ATTR: u8 = 0x0A;
pub(crate) const OTHER: u8 = 0x0B;
pub(crate) const COMMENT: u8 = 0x0C;
pub(crate) const TEXT: u8 = 0x0D;
pub(crate) const COMMENT_END: u8 = 0x0E;
pub(crate) const RAW: u8 = 0x0F;
pub(crate) const PUNCT: u8 = 0x20;

/// Every punctuator the lexer produces; the first 25 are the single-byte ones.
pub(crate) const PUNCTS: [&[u8]; 58] = [
    b"[", b"]", b"(", b")", b"{", b"}", b".", b"&", b"*", b"+", b"-", b"~", b"!", b"/", b"%", b"<",
    b">", b"^", b"|", b"?", b":", b";", b"=", b",", b"#", //
    b"...", b".*", b"->", b"->*", b"--", b"-=", b"++", b"+=", b"<<", b"<<=", b"<=", b"<=>", b"<:",
    b"<%", b">>", b">>=", b">=", b"&&", b"&=", b"||", b"|=", b"==", b"!=", b"*=", b"/=", b"^=",
    b"%=", b"%>", b"%:", b"%:%:", b"::", b":>", b"##",
];

const fn single_table() -> [u8; 256] {
    let mut t = [0u8; 256];
    let mut i = 0;
    while i < 25 {
        t[PUNCTS[i][0] as usize] = PUNCT + i as u8;
        i += 1;
    }
    t
}

static SINGLE: [u8; 256] = single_table();

/// The tag of a punctuator, if it is one the lexer produces.
#[inline]
pub(crate) fn punct_tag(p: &[u8]) -> Option<u8> {
    if let [b] = p {
        let t = SINGLE[*b as usize];
        return (t != 0).then_some(t);
    }
    PUNCTS[25..]
        .iter()
        .position(|q| *q == p)
        .map(|i| PUNCT + 25 + i as u8)
}

/// Appends `v` as LEB128.
#[inline]
pub(crate) fn push_varint(out: &mut Vec<u8>, mut v: usize) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Appends a token kept as spelled.
#[inline]
pub(crate) fn push_verbatim(out: &mut Vec<u8>, tag: u8, bytes: &[u8]) {
    out.push(tag);
    push_varint(out, bytes.len());
    out.extend_from_slice(bytes);
}

/// Reads a LEB128 value at `*i`, advancing `*i`; `None` if truncated or too long.
fn read_varint(enc: &[u8], i: &mut usize) -> Option<usize> {
    let mut v: usize = 0;
    let mut shift = 0u32;
    loop {
        let b = *enc.get(*i)?;
        *i += 1;
        if shift >= usize::BITS {
            return None;
        }
        v |= ((b & 0x7f) as usize) << shift;
        if b & 0x80 == 0 {
            return Some(v);
        }
        shift += 7;
    }
}

/// How a renamed name is spelled in the human-readable text.
pub(crate) fn canonical_name(n: usize) -> String {
    format!("ocannl_k{n}")
}

/// Renders an encoding as human-readable text: renamed names as `ocannl_k<n>`, the
/// kernel's own name as `token`, whitespace runs as one space or one newline. Stops
/// quietly at anything it cannot decode (never panics).
pub(crate) fn render(enc: &[u8], token: &str) -> String {
    let mut out: Vec<u8> = Vec::with_capacity(enc.len() + enc.len() / 4);
    let mut i = 0;
    while let Some(&tag) = enc.get(i) {
        i += 1;
        match tag {
            SPACE => out.push(b' '),
            NEWLINE => out.push(b'\n'),
            RENAMED => match read_varint(enc, &mut i) {
                Some(n) => out.extend_from_slice(canonical_name(n).as_bytes()),
                None => break,
            },
            OWN => out.extend_from_slice(token.as_bytes()),
            IDENT | NUMBER | STR | CHAR | PREPROC | ATTR | OTHER | TEXT => {
                let Some(len) = read_varint(enc, &mut i) else {
                    break;
                };
                let Some(bytes) = i.checked_add(len).and_then(|e| enc.get(i..e)) else {
                    break;
                };
                out.extend_from_slice(bytes);
                i += len;
            }
            COMMENT | COMMENT_END => {}
            RAW => {
                out.extend_from_slice(&enc[i..]);
                break;
            }
            t if t >= PUNCT => match PUNCTS.get(usize::from(t - PUNCT)) {
                Some(p) => out.extend_from_slice(p),
                None => break,
            },
            _ => break,
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn punct_tags_are_distinct_and_round_trip() {
        let mut seen = std::collections::BTreeSet::new();
        for (i, p) in PUNCTS.iter().enumerate() {
            let t = punct_tag(p).expect("known punctuator");
            assert_eq!(usize::from(t - PUNCT), i);
            assert!(seen.insert(t));
        }
        assert_eq!(punct_tag(b"@"), None);
        assert_eq!(punct_tag(b"+-"), None);
        assert!(PUNCTS[..25].iter().all(|p| p.len() == 1));
        assert!(PUNCTS[25..].iter().all(|p| p.len() > 1));
    }

    #[test]
    fn varints_round_trip() {
        for v in [0usize, 1, 127, 128, 300, 1 << 20, usize::MAX] {
            let mut out = Vec::new();
            push_varint(&mut out, v);
            let mut i = 0;
            assert_eq!(read_varint(&out, &mut i), Some(v));
            assert_eq!(i, out.len());
        }
        assert_eq!(read_varint(&[0x80], &mut 0), None);
        assert_eq!(read_varint(&[0xff; 20], &mut 0), None);
    }

    #[test]
    fn render_never_panics_on_garbage() {
        for enc in [
            &[IDENT, 5, b'a'][..],
            &[RENAMED],
            &[0xff],
            &[RAW],
            &[TEXT, 0x80],
        ] {
            let _ = render(enc, "k");
        }
    }
}
