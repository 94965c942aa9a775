//! The regime stamp: which store kind a cache directory belongs to, and which version of that
//! store's filename-key regime it holds.
//!
//! The stamp is the store's promise that every entry name in the directory means what this
//! regime of this store kind says it means. A store bumps its regime when the meaning of a name
//! changes; the first opener of a newer regime sweeps every entry (of every version) and then
//! stamps, so a name is never read under another regime's meaning. A stamp naming another store
//! kind is refused by every open, with nothing swept or changed: two stores never confuse each
//! other's directories.

use std::io;
use std::path::Path;

use crate::read::read_regular;

/// Name of the regime stamp file inside a cache directory. Part of the on-disk format: its
/// content is `<kind> <version>\n` (the store kind, one space, the regime version in ASCII
/// decimal, one `\n`: `kcache-kernel-store 2\n`); stamps written before kinds existed hold the
/// version alone (`2\n`, [`RegimeStamp::Bare`]). Callers must not edit a live cache's stamp;
/// tools and synthetic cache-directory tests may read or write it.
pub const STAMP_FILE: &str = "regime.stamp";

/// A stamp longer than this is malformed without being read (a well-formed one is at most
/// [`MAX_KIND_LEN`] + 12 bytes).
pub const MAX_STAMP_BYTES: u64 = 64;

/// The longest store kind ([`is_valid_kind`]).
pub const MAX_KIND_LEN: usize = 48;

/// What a directory's stamp file says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RegimeStamp {
    /// No stamp file: a fresh directory, or one written before stamps existed.
    Absent,
    /// A well-formed stamp naming its store kind and regime version.
    Kind {
        /// The store kind (`kcache-kernel-store`).
        kind: String,
        /// The regime version.
        version: u32,
    },
    /// A stamp written before stamps named their store (the version alone): any store kind
    /// may have written it. See [`CacheDir::check_adoptable`](crate::CacheDir::check_adoptable)
    /// for when a store takes it as its own.
    Bare(u32),
    /// A stamp file whose content is not a stamp (the content, lossily decoded, at most 64
    /// characters; a description for a stamp longer than [`MAX_STAMP_BYTES`]).
    Malformed(String),
}

impl std::fmt::Display for RegimeStamp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RegimeStamp::Absent => f.write_str("absent"),
            RegimeStamp::Kind { kind, version } => write!(f, "{kind} {version}"),
            RegimeStamp::Bare(v) => write!(f, "{v} (no store kind)"),
            RegimeStamp::Malformed(s) => write!(f, "malformed ({s:?})"),
        }
    }
}

/// Whether `kind` is a valid store kind: 1 to [`MAX_KIND_LEN`] bytes of lowercase ASCII
/// letters, digits and `-`, starting with a letter.
pub fn is_valid_kind(kind: &str) -> bool {
    !kind.is_empty()
        && kind.len() <= MAX_KIND_LEN
        && kind.as_bytes()[0].is_ascii_lowercase()
        && kind
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

/// Parses a version: one to ten ASCII digits without a superfluous leading zero, fitting in
/// `u32`, optionally followed by exactly one `\n` (the bare stamp of the legacy format, and the
/// stamp a Redis store keeps).
///
/// ```
/// assert_eq!(cache_dir::parse_stamp(b"7\n"), Some(7));
/// assert_eq!(cache_dir::parse_stamp(b"07\n"), None);
/// ```
pub fn parse_stamp(bytes: &[u8]) -> Option<u32> {
    let digits = bytes.strip_suffix(b"\n").unwrap_or(bytes);
    if digits.is_empty()
        || digits.len() > 10
        || !digits.iter().all(u8::is_ascii_digit)
        || (digits.len() > 1 && digits[0] == b'0')
    {
        return None;
    }
    std::str::from_utf8(digits).ok()?.parse().ok()
}

/// The bare version content for `version` (`7\n`: a Redis store's stamp; a cache directory's
/// stamp is [`render_kind_stamp`]).
pub fn render_stamp(version: u32) -> String {
    format!("{version}\n")
}

/// Parses a directory stamp's content: [`RegimeStamp::Kind`] for `<kind> <version>` with a
/// valid kind and a version as [`parse_stamp`] takes it, [`RegimeStamp::Bare`] for a version
/// alone, [`RegimeStamp::Malformed`] for anything else (never `Absent`).
///
/// ```
/// use cache_dir::{RegimeStamp, parse_kind_stamp};
/// assert_eq!(
///     parse_kind_stamp(b"kcache-kernel-store 2\n"),
///     RegimeStamp::Kind { kind: "kcache-kernel-store".into(), version: 2 }
/// );
/// assert_eq!(parse_kind_stamp(b"2\n"), RegimeStamp::Bare(2));
/// ```
pub fn parse_kind_stamp(bytes: &[u8]) -> RegimeStamp {
    if let Some(v) = parse_stamp(bytes) {
        return RegimeStamp::Bare(v);
    }
    let malformed =
        || RegimeStamp::Malformed(String::from_utf8_lossy(bytes).chars().take(64).collect());
    let body = bytes.strip_suffix(b"\n").unwrap_or(bytes);
    let Some(space) = body.iter().position(|&b| b == b' ') else {
        return malformed();
    };
    let (kind, version) = (&body[..space], &body[space + 1..]);
    match (std::str::from_utf8(kind), parse_stamp(version)) {
        // The version's own optional `\n` was already stripped: a second one is malformed.
        (Ok(kind), Some(version)) if is_valid_kind(kind) && !version_has_newline(body) => {
            RegimeStamp::Kind {
                kind: kind.to_owned(),
                version,
            }
        }
        _ => malformed(),
    }
}

fn version_has_newline(body: &[u8]) -> bool {
    body.last() == Some(&b'\n')
}

/// The stamp content written for store `kind` at `version`: `<kind> <version>\n`.
pub fn render_kind_stamp(kind: &str, version: u32) -> String {
    format!("{kind} {version}\n")
}

/// Reads the stamp of `dir` (no lock taken: callers hold the directory lock). The stamp is read
/// as every protocol file is ([`read_regular`]): never blocking, never through a link, at most
/// [`MAX_STAMP_BYTES`].
///
/// # Errors
/// Any read failure other than a missing stamp file, including a stamp that is not a regular
/// file (a directory, a FIFO, a link).
pub fn read_stamp(dir: &Path) -> io::Result<RegimeStamp> {
    match read_regular(&dir.join(STAMP_FILE), MAX_STAMP_BYTES) {
        Ok(bytes) => Ok(parse_kind_stamp(&bytes)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(RegimeStamp::Absent),
        Err(e) if e.kind() == io::ErrorKind::FileTooLarge => Ok(RegimeStamp::Malformed(format!(
            "<longer than {MAX_STAMP_BYTES} bytes>"
        ))),
        Err(e) => Err(e),
    }
}

/// Atomically replaces the stamp of `dir` with store `kind` at `version` (staged in a
/// `.atomicwrite*` directory, fsynced, renamed), created with `mode` (before the umask).
pub(crate) fn publish_stamp(dir: &Path, kind: &str, version: u32, mode: u32) -> io::Result<()> {
    crate::publish_file(
        &dir.join(STAMP_FILE),
        render_kind_stamp(kind, version).as_bytes(),
        mode,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::fs;

    #[test]
    fn stamp_parsing_is_strict() {
        assert_eq!(parse_stamp(b"1\n"), Some(1));
        assert_eq!(parse_stamp(b"42"), Some(42));
        assert_eq!(parse_stamp(b"4294967295\n"), Some(u32::MAX));
        for bad in [
            &b""[..],
            b"\n",
            b"01\n",
            b"1\n\n",
            b" 1\n",
            b"1 \n",
            b"-1\n",
            b"4294967296\n",
            b"v1\n",
            b"\xff\n",
        ] {
            assert_eq!(parse_stamp(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn kind_stamps_are_strict() {
        let kind = |k: &str, v| RegimeStamp::Kind {
            kind: k.into(),
            version: v,
        };
        assert_eq!(
            parse_kind_stamp(b"kcache-kernel-store 2\n"),
            kind("kcache-kernel-store", 2)
        );
        assert_eq!(parse_kind_stamp(b"a 0"), kind("a", 0));
        assert_eq!(parse_kind_stamp(b"2\n"), RegimeStamp::Bare(2));
        for bad in [
            &b""[..],
            b"\n",
            b"kcache-kernel-store 2\n\n",
            b"kcache-kernel-store  2\n",
            b"kcache-kernel-store 02\n",
            b"kcache-kernel-store\n",
            b" 2\n",
            b"Kcache 2\n",
            b"1kcache 2\n",
            b"kcache_x 2\n",
            b"kcache 2 3\n",
            b"kcache 4294967296\n",
        ] {
            assert!(
                matches!(parse_kind_stamp(bad), RegimeStamp::Malformed(_)),
                "{bad:?}"
            );
        }
        assert!(is_valid_kind(&"a".repeat(MAX_KIND_LEN)));
        assert!(!is_valid_kind(&"a".repeat(MAX_KIND_LEN + 1)));
        let longest = render_kind_stamp(&"a".repeat(MAX_KIND_LEN), u32::MAX);
        assert!(longest.len() as u64 <= MAX_STAMP_BYTES);
    }

    #[test]
    fn read_and_publish_round_trip() {
        let dir = tempfile::tempdir().expect("tempdir");
        assert_eq!(read_stamp(dir.path()).expect("read"), RegimeStamp::Absent);
        publish_stamp(dir.path(), "test-store", 7, 0o666).expect("publish");
        assert_eq!(
            read_stamp(dir.path()).expect("read"),
            RegimeStamp::Kind {
                kind: "test-store".into(),
                version: 7
            }
        );
        assert_eq!(
            fs::read_to_string(dir.path().join(STAMP_FILE)).expect("read"),
            "test-store 7\n"
        );
        fs::write(dir.path().join(STAMP_FILE), "7\n").expect("write");
        assert_eq!(read_stamp(dir.path()).expect("read"), RegimeStamp::Bare(7));
        fs::write(dir.path().join(STAMP_FILE), "seven").expect("write");
        assert_eq!(
            read_stamp(dir.path()).expect("read"),
            RegimeStamp::Malformed("seven".into())
        );
        fs::write(dir.path().join(STAMP_FILE), "7".repeat(1000)).expect("write");
        assert!(matches!(
            read_stamp(dir.path()).expect("read"),
            RegimeStamp::Malformed(s) if s.contains("longer than")
        ));
    }

    proptest! {
        #[test]
        fn every_version_round_trips_through_its_stamp(v in any::<u32>()) {
            prop_assert_eq!(parse_stamp(render_stamp(v).as_bytes()), Some(v));
        }

        #[test]
        fn every_kind_stamp_round_trips(k in "[a-z][a-z0-9-]{0,47}", v in any::<u32>()) {
            prop_assert_eq!(
                parse_kind_stamp(render_kind_stamp(&k, v).as_bytes()),
                RegimeStamp::Kind { kind: k.clone(), version: v }
            );
        }

        #[test]
        fn a_kind_stamp_is_accepted_only_in_its_rendering(
            bytes in proptest::collection::vec(any::<u8>(), 0..24),
        ) {
            if let RegimeStamp::Kind { kind, version } = parse_kind_stamp(&bytes) {
                let canon = render_kind_stamp(&kind, version);
                prop_assert!(bytes == canon.as_bytes() || bytes == canon.trim_end().as_bytes());
            }
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..16)) {
            if let Some(v) = parse_stamp(&bytes) {
                // A parse is only accepted for the canonical rendering (with or without `\n`).
                let canon = render_stamp(v);
                prop_assert!(bytes == canon.as_bytes() || bytes == canon.trim_end().as_bytes());
            }
        }
    }
}
