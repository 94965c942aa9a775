//! The regime stamp: which version of a store's filename-key regime a cache directory holds.
//!
//! The stamp is the store's promise that every entry name in the directory means what this
//! regime says it means. A store bumps its regime when the meaning of a name changes; the first
//! opener of a newer regime sweeps every entry (of every version) and then stamps, so a name is
//! never read under another regime's meaning.

use std::io;
use std::path::Path;

use crate::read::read_regular;

/// Name of the regime stamp file inside a cache directory. Part of the on-disk format: its
/// content is the regime version in ASCII decimal followed by one `\n`. Callers must not edit a
/// live cache's stamp; tools and synthetic cache-directory tests may read or write it.
pub const STAMP_FILE: &str = "regime.stamp";

/// A stamp longer than this is malformed without being read (a well-formed one is at most 11
/// bytes).
pub const MAX_STAMP_BYTES: u64 = 64;

/// What a directory's stamp file says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RegimeStamp {
    /// No stamp file: a fresh directory, or one written before stamps existed.
    Absent,
    /// A well-formed stamp with this regime version.
    Version(u32),
    /// A stamp file whose content is not a version (the content, lossily decoded, at most 64
    /// characters; a description for a stamp longer than [`MAX_STAMP_BYTES`]).
    Malformed(String),
}

impl std::fmt::Display for RegimeStamp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RegimeStamp::Absent => f.write_str("absent"),
            RegimeStamp::Version(v) => write!(f, "{v}"),
            RegimeStamp::Malformed(s) => write!(f, "malformed ({s:?})"),
        }
    }
}

/// Parses stamp content: one to ten ASCII digits without a superfluous leading zero, fitting in
/// `u32`, optionally followed by exactly one `\n`.
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

/// The stamp content written for `version`.
pub fn render_stamp(version: u32) -> String {
    format!("{version}\n")
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
        Ok(bytes) => Ok(match parse_stamp(&bytes) {
            Some(v) => RegimeStamp::Version(v),
            None => {
                RegimeStamp::Malformed(String::from_utf8_lossy(&bytes).chars().take(64).collect())
            }
        }),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(RegimeStamp::Absent),
        Err(e) if e.kind() == io::ErrorKind::FileTooLarge => Ok(RegimeStamp::Malformed(format!(
            "<longer than {MAX_STAMP_BYTES} bytes>"
        ))),
        Err(e) => Err(e),
    }
}

/// Atomically replaces the stamp of `dir` with `version` (staged in a `.atomicwrite*` directory,
/// fsynced, renamed), created with `mode` (before the umask).
pub(crate) fn publish_stamp(dir: &Path, version: u32, mode: u32) -> io::Result<()> {
    crate::publish_file(
        &dir.join(STAMP_FILE),
        render_stamp(version).as_bytes(),
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
    fn read_and_publish_round_trip() {
        let dir = tempfile::tempdir().expect("tempdir");
        assert_eq!(read_stamp(dir.path()).expect("read"), RegimeStamp::Absent);
        publish_stamp(dir.path(), 7, 0o666).expect("publish");
        assert_eq!(
            read_stamp(dir.path()).expect("read"),
            RegimeStamp::Version(7)
        );
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
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..16)) {
            if let Some(v) = parse_stamp(&bytes) {
                // A parse is only accepted for the canonical rendering (with or without `\n`).
                let canon = render_stamp(v);
                prop_assert!(bytes == canon.as_bytes() || bytes == canon.trim_end().as_bytes());
            }
        }
    }
}
