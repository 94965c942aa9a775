//! [`Toolchain`]: what a compiling backend contributes to the codegen component, in one value
//! a caller fills from its backend: the compiler's identity, the option list kernels are
//! compiled with, and the digest of the prelude compiled ahead of every kernel.

use serde::{Deserialize, Serialize};

use crate::key::PartEncoding;

/// The labels of a toolchain's [`summary`](Toolchain::summary) (and of the codegen line that
/// holds one): a word of a summary line equal to one starts its group, and a miss names the
/// group of each word that changed ([`crate::components::summary_change`]).
pub(crate) const SUMMARY_LABELS: [&str; 5] =
    ["options:", "prelude:", "compiler:", "tag:", "limits:"];

/// How many hex digits of a digest a summary shows (after `#`).
const SHOWN_DIGITS: usize = 12;

/// The most characters of the compiler's identity a summary shows (its first two lines).
const SHOWN_COMPILER_CHARS: usize = 120;

/// A compiling backend's part of the codegen component: the compiler's identity, the option
/// list and the prelude's digest. Every field enters the key (through
/// [`Limits::toolchain`](crate::Limits::toolchain)); [`summary`](Toolchain::summary) is its
/// readable form.
///
/// The crate knows no backend (it cannot depend on one), so the caller fills it, in one line:
///
/// ```
/// use schedule_cache::Toolchain;
/// # let identity = "cc\ncc (Debian 12.2.0-14) 12.2.0\n-O2 -shared -fPIC";
/// # let prelude = "#include <math.h>\n";
/// let options = ["-O2", "-ffp-contract=off"];
/// let toolchain = Toolchain::new(identity, options).with_prelude(prelude);
/// // options: -O2 -ffp-contract=off prelude: #… compiler: cc cc (Debian 12.2.0-14) 12.2.0 #…
/// let summary = toolchain.summary();
/// assert!(summary.starts_with("options: -O2 -ffp-contract=off prelude: #"));
/// assert!(summary.contains(" compiler: cc cc (Debian 12.2.0-14) 12.2.0 #"));
/// ```
///
/// Given to [`ScheduleCache::with_toolchain`](crate::ScheduleCache::with_toolchain) (or set as
/// [`Limits::toolchain`](crate::Limits::toolchain)), every field enters the codegen component:
/// a schedule tuned under `-O2` is never replayed under `-O3`, and the miss names the flag
/// (`codegen: options -O2 → -O3`). The options must be the very list the kernels are compiled
/// with: build both from one value.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Toolchain {
    /// What identifies the compiler's output, whole (for `cc-backend`, `CcBackend::identity()`:
    /// command, version, fixed flags, target). It enters the key as given.
    pub identity: String,
    /// The option list every kernel is compiled with, in order.
    pub options: Vec<String>,
    /// The SHA-256 (64 hex digits) of the prelude compiled ahead of every kernel's text
    /// ([`with_prelude`](Toolchain::with_prelude)); `None` when there is none, or when the
    /// prelude follows from what the key already holds (the code and declared settings).
    pub prelude_digest: Option<String>,
}

impl Toolchain {
    /// The toolchain of a compiler of `identity` compiling with `options`, no prelude.
    pub fn new<S: Into<String>>(identity: &str, options: impl IntoIterator<Item = S>) -> Toolchain {
        Toolchain {
            identity: identity.to_owned(),
            options: options.into_iter().map(Into::into).collect(),
            prelude_digest: None,
        }
    }

    /// The same toolchain, with every kernel compiled after `prelude` (its digest enters the
    /// key).
    pub fn with_prelude(mut self, prelude: &str) -> Toolchain {
        self.prelude_digest = Some(PartEncoding::new().str("prelude").str(prelude).digest());
        self
    }

    /// Appends the fields to a component's encoding: `S "toolchain"`, `S identity`, `L n`,
    /// `S option` for each option, then `S prelude_digest` or `N` (`docs/disk-format.md`).
    pub(crate) fn encode(&self, e: &mut PartEncoding) {
        let Toolchain {
            identity,
            options,
            prelude_digest,
        } = self;
        e.str("toolchain").str(identity).list(options.len());
        for o in options {
            e.str(o);
        }
        e.opt(prelude_digest.as_deref());
    }

    /// A readable line for people (`kcache show`, a miss), never compared: `options: …`, then
    /// `prelude: #<12 hex digits>` when there is one, then `compiler: ` with the first two
    /// lines of the identity (cut to 120 characters) and `#<12 hex digits>` of the whole
    /// identity, so a change past those lines still shows.
    pub fn summary(&self) -> String {
        let mut words = vec!["options:".to_owned()];
        words.extend(self.options.iter().cloned());
        if let Some(d) = &self.prelude_digest {
            words.push("prelude:".to_owned());
            words.push(format!("#{}", short(d)));
        }
        words.push("compiler:".to_owned());
        let head: String = self
            .identity
            .lines()
            .take(2)
            .collect::<Vec<_>>()
            .join(" ")
            .chars()
            .take(SHOWN_COMPILER_CHARS)
            .collect();
        words.push(head);
        let whole = PartEncoding::new().str(&self.identity).digest();
        words.push(format!("#{}", short(&whole)));
        let line = words.join(" ");
        let clean: String = line
            .chars()
            .map(|c| if c.is_control() { ' ' } else { c })
            .collect();
        clean.split_whitespace().collect::<Vec<_>>().join(" ")
    }
}

fn short(digest: &str) -> &str {
    digest.get(..SHOWN_DIGITS).unwrap_or(digest)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_field_changes_the_encoding() {
        let base = Toolchain::new("cc 12", ["-O2"]).with_prelude("#include <math.h>\n");
        let enc = |t: &Toolchain| {
            let mut e = PartEncoding::new();
            t.encode(&mut e);
            e.digest()
        };
        let variants = [
            Toolchain::new("cc 13", ["-O2"]).with_prelude("#include <math.h>\n"),
            Toolchain::new("cc 12", ["-O3"]).with_prelude("#include <math.h>\n"),
            Toolchain::new("cc 12", ["-O2", ""]).with_prelude("#include <math.h>\n"),
            Toolchain::new("cc 12", ["-O2"]).with_prelude("#include <stdint.h>\n"),
            Toolchain::new("cc 12", ["-O2"]),
            // An option list that joins to the same text.
            Toolchain::new("cc 12", ["-O2 -g"]).with_prelude("#include <math.h>\n"),
        ];
        for v in &variants {
            assert_ne!(enc(v), enc(&base), "{v:?}");
        }
        assert_eq!(enc(&base.clone()), enc(&base));
    }

    #[test]
    fn the_summary_is_one_line_of_labelled_groups() {
        let t = Toolchain::new(
            "cc\ncc (Debian 12.2.0-14) 12.2.0\nlong\nrest",
            ["-O3", "-g"],
        );
        let s = t.summary();
        assert!(s.starts_with("options: -O3 -g compiler: cc cc (Debian 12.2.0-14) 12.2.0 #"));
        assert!(!s.contains("long"), "{s}");
        // A change past the shown lines still changes the line (its digest).
        let other = Toolchain::new(
            "cc\ncc (Debian 12.2.0-14) 12.2.0\nlong\nRest",
            ["-O3", "-g"],
        );
        assert_ne!(other.summary(), s);
        assert!(!s.contains('\n'));
    }
}
