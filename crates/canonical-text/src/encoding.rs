//! The tagged byte encoding of a canonical kernel, and its human-readable rendering.
//!
//! The encoding is a sequence of elements, each starting with a tag byte:
//!
//! | tag | element | followed by |
//! |-----|---------|-------------|
//! | `TEXT` | a run of the kernel's bytes kept exactly as written | length (LEB128), the bytes |
//! | `RENAMED` | one occurrence of a renamed name | its number (LEB128) |
//! | `OWN` | one occurrence of the kernel's own name | nothing (the kernel token is a separate key part) |
//!
//! Two `TEXT` elements are never adjacent and none is empty, so each kernel has exactly
//! one encoding, and the encoding decodes uniquely element by element (a prefix code).

pub(crate) const TEXT: u8 = 0x01;
pub(crate) const RENAMED: u8 = 0x02;
pub(crate) const OWN: u8 = 0x03;

/// Appends `v` as LEB128.
#[inline]
pub(crate) fn push_varint(out: &mut Vec<u8>, mut v: usize) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Appends a `TEXT` element holding `bytes` (nothing if `bytes` is empty).
#[inline]
pub(crate) fn push_text(out: &mut Vec<u8>, bytes: &[u8]) {
    if !bytes.is_empty() {
        out.push(TEXT);
        push_varint(out, bytes.len());
        out.extend_from_slice(bytes);
    }
}

/// Appends a `TEXT` element holding `src[a..b]` (nothing if empty); short runs are
/// copied as a fixed 16 bytes and cut back, which avoids a call per run.
#[inline(always)]
pub(crate) fn push_text_of(out: &mut Vec<u8>, src: &[u8], a: usize, b: usize) {
    let len = b.saturating_sub(a);
    if len == 0 {
        return;
    }
    out.push(TEXT);
    push_varint(out, len);
    match src.get(a..a + 16) {
        Some(window) if len <= 16 => {
            let at = out.len();
            out.extend_from_slice(window);
            out.truncate(at + len);
        }
        _ => out.extend_from_slice(&src[a..b]),
    }
}

/// Appends a `RENAMED` element.
#[inline]
pub(crate) fn push_renamed(out: &mut Vec<u8>, n: u32) {
    if n < 0x80 {
        out.extend_from_slice(&[RENAMED, n as u8]);
    } else {
        out.push(RENAMED);
        push_varint(out, n as usize);
    }
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

/// How the `n`th renamed name is spelled in the human-readable text.
pub(crate) fn canonical_name(n: usize) -> String {
    format!("ocannl_k{n}")
}

/// Renders an encoding as text: `TEXT` as written, renamed names as `ocannl_k<n>`, the
/// kernel's own name as `token`. Stops quietly at anything it cannot decode (never
/// panics).
pub(crate) fn render(enc: &[u8], token: &str) -> String {
    let mut out: Vec<u8> = Vec::with_capacity(enc.len() + enc.len() / 8);
    let mut i = 0;
    while let Some(&tag) = enc.get(i) {
        i += 1;
        match tag {
            TEXT => {
                let Some(len) = read_varint(enc, &mut i) else {
                    break;
                };
                let Some(bytes) = i.checked_add(len).and_then(|e| enc.get(i..e)) else {
                    break;
                };
                out.extend_from_slice(bytes);
                i += len;
            }
            RENAMED => match read_varint(enc, &mut i) {
                Some(n) => out.extend_from_slice(canonical_name(n).as_bytes()),
                None => break,
            },
            OWN => out.extend_from_slice(token.as_bytes()),
            _ => break,
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

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
        for n in [0u32, 127, 128, 70000] {
            let mut out = Vec::new();
            push_renamed(&mut out, n);
            assert_eq!(render(&out, ""), canonical_name(n as usize));
        }
    }

    #[test]
    fn render_decodes_and_never_panics_on_garbage() {
        let mut e = Vec::new();
        push_text(&mut e, b"a ");
        push_renamed(&mut e, 3);
        push_text(&mut e, b"");
        e.push(OWN);
        assert_eq!(render(&e, "k__seg"), "a ocannl_k3k__seg");
        for enc in [
            &[TEXT, 5, b'a'][..],
            &[RENAMED],
            &[0xff],
            &[TEXT, 0x80],
            &[TEXT],
        ] {
            let _ = render(enc, "k");
        }
    }
}
