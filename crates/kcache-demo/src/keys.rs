//! How the demo keys its kernels: [`KeyMode`], and the verbatim key it is compared with.

use std::fmt;
use std::str::FromStr;

use canonical_text::digest_of_parts;

/// Names the layout of the parts [`verbatim_key`] hashes.
const VERBATIM_LAYOUT: &[u8] = b"kcache-demo-verbatim-key-1";

/// Which key the demo's kernel cache (and the memo table, whose measurement keys list
/// the kernels' keys) uses for a rendered kernel.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum KeyMode {
    /// kcache's canonical kernel key (`kernel_cache::kernel_key`): kernels that differ
    /// only in the names they own (a renamed twin) share a key and one compile.
    #[default]
    Canonical,
    /// The SHA-256 of the exact text, option list and compiler identity, as Triton's
    /// and ccache's keys amount to: every renamed twin is compiled anew.
    Verbatim,
}

impl KeyMode {
    /// The mode's name, as `--keys` takes it.
    pub fn name(self) -> &'static str {
        match self {
            KeyMode::Canonical => "canonical",
            KeyMode::Verbatim => "verbatim",
        }
    }
}

impl fmt::Display for KeyMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for KeyMode {
    type Err = String;

    fn from_str(s: &str) -> Result<KeyMode, String> {
        match s {
            "canonical" => Ok(KeyMode::Canonical),
            "verbatim" => Ok(KeyMode::Verbatim),
            other => Err(format!(
                "unknown key mode `{other}` (known: canonical, verbatim)"
            )),
        }
    }
}

/// The verbatim key of a kernel: the SHA-256 (64 lowercase hex characters) of its exact
/// `text`, its `options` (in order, counted) and `backend_identity`, each part length
/// prefixed. Two kernels share it only when their bytes are equal.
pub fn verbatim_key(text: &str, options: &[String], backend_identity: &[u8]) -> String {
    let count = (options.len() as u64).to_le_bytes();
    let mut parts: Vec<&[u8]> = Vec::with_capacity(options.len() + 4);
    parts.extend([VERBATIM_LAYOUT, text.as_bytes(), &count]);
    parts.extend(options.iter().map(|o| o.as_bytes()));
    parts.push(backend_identity);
    digest_of_parts(&parts)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn modes_parse_and_print_their_names() {
        for mode in [KeyMode::Canonical, KeyMode::Verbatim] {
            assert_eq!(mode.to_string().parse::<KeyMode>().unwrap(), mode);
        }
        assert_eq!(KeyMode::default(), KeyMode::Canonical);
        assert!("Canonical".parse::<KeyMode>().is_err());
    }

    #[test]
    fn verbatim_keys_differ_for_any_byte_and_option() {
        let o = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let base = verbatim_key("void k1(void) {}", &o(&["-O2"]), b"cc");
        assert_eq!(base.len(), 64);
        assert_eq!(base, verbatim_key("void k1(void) {}", &o(&["-O2"]), b"cc"));
        // A renamed twin is another key (what canonical keys fix).
        assert_ne!(base, verbatim_key("void k2(void) {}", &o(&["-O2"]), b"cc"));
        assert_ne!(base, verbatim_key("void k1(void) {}", &o(&["-O3"]), b"cc"));
        assert_ne!(base, verbatim_key("void k1(void) {}", &o(&["-O2"]), b"gcc"));
        assert_ne!(
            verbatim_key("t", &o(&["-O2"]), b"x"),
            verbatim_key("t", &o(&["-O2", "x"]), b"")
        );
    }
}
