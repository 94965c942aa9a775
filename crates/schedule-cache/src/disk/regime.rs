//! The regime stamp: which version of the filename-key regime a cache directory holds.

use std::fs;
use std::io::{self, Write};
use std::path::Path;

use atomicwrites::{AllowOverwrite, AtomicFile};

use super::lock::retry;

/// Version of the filename-key regime, recorded once per cache directory in [`STAMP_FILE`].
///
/// Bump it when the schema of the key components changes (which components, their order,
/// their spelling or the tag of one of them). It is independent of the entry versions, which
/// version the payload stored at one key. A directory stamped with an older regime is swept
/// (every entry, placement entries too) by the first process that opens it; one stamped with a
/// newer regime is refused by this build (a miss, nothing touched).
///
/// History (one line per bump, with the reason; a test checks one line per version):
/// - v1: initial regime, keys `digest-backend-n…-c…-p…-d…-t…` over SHA-256 digests.
/// - v2: every component full-width (SHA-256 of one tagged, length-prefixed encoding), a new
///   `format` component, keys `digest-<SHA-256 over all components>-<hints>` (issue 12).
pub const CACHE_REGIME_VERSION: u32 = 2;

/// Name of the regime stamp file inside a cache directory. Part of the on-disk format: its
/// content is the regime version in ASCII decimal followed by one `\n`. Callers must not edit a
/// live cache's stamp; tools and synthetic cache-directory tests may read or write it.
pub const STAMP_FILE: &str = "regime.stamp";

/// What a directory's stamp file says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RegimeStamp {
    /// No stamp file: a fresh directory, or one written before stamps existed.
    Absent,
    /// A well-formed stamp with this regime version.
    Version(u32),
    /// A stamp file whose content is not a version (the content, lossily decoded, at most 64
    /// characters).
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

/// The stamp content this crate writes for `version`.
pub fn render_stamp(version: u32) -> String {
    format!("{version}\n")
}

/// Reads the stamp of `dir` (no lock taken: callers hold the directory lock).
///
/// # Errors
/// Any read failure other than a missing stamp file.
pub fn read_stamp(dir: &Path) -> io::Result<RegimeStamp> {
    match retry(|| fs::read(dir.join(STAMP_FILE))) {
        Ok(bytes) => Ok(match parse_stamp(&bytes) {
            Some(v) => RegimeStamp::Version(v),
            None => {
                RegimeStamp::Malformed(String::from_utf8_lossy(&bytes).chars().take(64).collect())
            }
        }),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(RegimeStamp::Absent),
        Err(e) => Err(e),
    }
}

/// Atomically replaces the stamp of `dir` with `version` (staged in a `.atomicwrite*` directory,
/// fsynced, renamed).
pub(crate) fn publish_stamp(dir: &Path, version: u32) -> io::Result<()> {
    AtomicFile::new(dir.join(STAMP_FILE), AllowOverwrite)
        .write(|f| f.write_all(render_stamp(version).as_bytes()))
        .map_err(io::Error::from)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Checks that the doc comment of `const NAME: u32 = N;` in `source` carries a history list
    /// with exactly one `/// - vK:` line for each K in 1..=N, in order.
    pub(crate) fn check_history(source: &str, name: &str, current: u32) {
        let decl = format!("pub const {name}: u32 = {current};");
        let at = source
            .find(&decl)
            .unwrap_or_else(|| panic!("`{decl}` not found: keep the declaration on one line"));
        let doc: Vec<&str> = source[..at]
            .lines()
            .rev()
            .take_while(|l| l.trim_start().starts_with("///"))
            .collect();
        let mut versions: Vec<u32> = doc
            .iter()
            .filter_map(|l| l.trim_start().strip_prefix("/// - v"))
            .map(|rest| {
                let (n, reason) = rest.split_once(':').expect("`/// - vN: reason`");
                assert!(
                    !reason.trim().is_empty(),
                    "history line v{n} gives no reason"
                );
                n.parse::<u32>().expect("history version number")
            })
            .collect();
        versions.reverse();
        let want: Vec<u32> = (1..=current).collect();
        assert_eq!(
            versions, want,
            "{name}: one history line per bump, in order"
        );
    }

    #[test]
    fn regime_version_has_a_history_line_per_bump() {
        check_history(
            include_str!("regime.rs"),
            "CACHE_REGIME_VERSION",
            CACHE_REGIME_VERSION,
        );
    }

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
        publish_stamp(dir.path(), 7).expect("publish");
        assert_eq!(
            read_stamp(dir.path()).expect("read"),
            RegimeStamp::Version(7)
        );
        fs::write(dir.path().join(STAMP_FILE), "seven").expect("write");
        assert_eq!(
            read_stamp(dir.path()).expect("read"),
            RegimeStamp::Malformed("seven".into())
        );
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
