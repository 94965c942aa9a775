//! The tagged byte encoding of a canonical kernel, and its human-readable rendering.
//!
//! The encoding is the kernel's bytes as written, except that each occurrence of a
//! renamed name and of the kernel's own name is replaced by a tag:
//!
//! | bytes | stands for |
//! |-------|------------|
//! | any byte below `0xF8` | itself: a byte of the kernel text kept exactly as written |
//! | `RENAMED` (`0xFF`), then a number (LEB128) | one occurrence of the renamed name with that number |
//! | `OWN` (`0xFE`) | one occurrence of the kernel's own name (the kernel token is a separate key part) |
//!
//! The kernel text is UTF-8, in which bytes `0xF8` to `0xFF` never occur, so a tag can
//! never be mistaken for text: the encoding decodes uniquely byte by byte (a prefix
//! code), and each kernel has exactly one encoding.

/// Tag of one occurrence of a renamed name; its number follows (LEB128).
pub(crate) const RENAMED: u8 = 0xFF;
/// Tag of one occurrence of the kernel's own name.
pub(crate) const OWN: u8 = 0xFE;

/// Appends `v` as LEB128.
#[inline]
pub(crate) fn push_varint(out: &mut Vec<u8>, mut v: usize) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
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
pub(crate) fn read_varint(enc: &[u8], i: &mut usize) -> Option<usize> {
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
    format!("kc{n}")
}

/// Renders an encoding as text: text bytes as written, renamed names as `kc<n>`,
/// the kernel's own name as `token`. Stops quietly at anything it cannot decode (never
/// panics).
pub(crate) fn render(enc: &[u8], token: &str) -> String {
    let mut out: Vec<u8> = Vec::with_capacity(enc.len() + enc.len() / 8);
    let mut i = 0;
    while i < enc.len() {
        // The text up to the next tag, as written.
        let run = enc[i..]
            .iter()
            .position(|&b| b >= OWN)
            .unwrap_or(enc.len() - i);
        out.extend_from_slice(&enc[i..i + run]);
        i += run;
        match enc.get(i) {
            Some(&RENAMED) => {
                i += 1;
                match read_varint(enc, &mut i) {
                    Some(n) => out.extend_from_slice(canonical_name(n).as_bytes()),
                    None => break,
                }
            }
            Some(&OWN) => {
                i += 1;
                out.extend_from_slice(token.as_bytes());
            }
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
        for n in [0u32, 127, 128, 254, 255, 70000] {
            let mut out = Vec::new();
            push_renamed(&mut out, n);
            assert_eq!(render(&out, ""), canonical_name(n as usize));
        }
    }

    #[test]
    fn tags_are_no_utf8_bytes() {
        // Every byte of every UTF-8 encoded char is below both tags.
        for c in [
            '\0',
            'a',
            '\u{7f}',
            '\u{80}',
            '\u{7ff}',
            '\u{ffff}',
            char::MAX,
        ] {
            let mut buf = [0u8; 4];
            assert!(c.encode_utf8(&mut buf).bytes().all(|b| b < OWN));
        }
    }

    #[test]
    fn render_decodes_and_never_panics_on_garbage() {
        let mut e = b"a ".to_vec();
        push_renamed(&mut e, 3);
        e.push(OWN);
        push_renamed(&mut e, 255);
        e.extend_from_slice("é;".as_bytes());
        assert_eq!(render(&e, "k__seg"), "a kc3k__segkc255é;");
        for enc in [
            &[RENAMED][..],
            &[RENAMED, 0x80],
            &[0xfd, RENAMED],
            &[OWN, OWN],
        ] {
            let _ = render(enc, "k");
        }
    }
}
