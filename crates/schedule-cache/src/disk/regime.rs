//! The schedule store's regime version: which filename-key regime a cache directory holds. The
//! stamp itself (file, grammar, reading and publishing) is the directory protocol's
//! ([`cache_dir::STAMP_FILE`], [`cache_dir::read_stamp`]).

/// Version of the filename-key regime, recorded once per cache directory in [`STAMP_FILE`](cache_dir::STAMP_FILE).
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

/// The store kind the schedule store's directory stamp names (`kcache-schedule-store 2`):
/// another store (the kernel store) opening a schedule store's directory is refused by name,
/// with nothing swept, and the schedule store refuses theirs ([`super::Refusal::OtherStore`]).
/// A bare stamp (`2`, written before stamps named their kind) is taken as the schedule
/// store's only if every file in the directory is one it writes. (The Redis store's stamp
/// lives in its own key namespace and stays a bare version.)
pub const STORE_KIND: &str = "kcache-schedule-store";

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

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
}
