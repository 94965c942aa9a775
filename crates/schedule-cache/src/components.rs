//! The key components a cache key is built from, and [`cache_key`].
//!
//! [`KEY_COMPONENTS`] drives [`key_parts`]: the key is exactly the listed components, in
//! order, each computed by one match arm, so the list is a complete and current enumeration of
//! what the cache's identity depends on (and what [`crate::config`] classifies settings
//! against).
//!
//! Every component is a full-width SHA-256 (64 hex digits, 128-bit collision resistance) of
//! one tagged, length-prefixed encoding ([`PartEncoding`]) of everything that enters it; the
//! digest component is the code's canonical digest. The key ([`KeyParts::key`]) is
//! `<code digest>-<SHA-256 over every component>-<hints>`: the file name stays 185 bytes and
//! filename-safe, and two keys are equal only if every full component is (up to a SHA-256
//! collision). The hints (six hex digits of each component, after its letter) only explain a
//! miss from the key alone ([`key_differences`]); the entry keeps the full components.

use crate::config::{Config, TIMING_SETTING};
use crate::device::TimingIdentity;
use crate::identity::CompleteIdentity;
use crate::key::{CacheKey, KEY_COMPONENTS, KeyComponent, PartEncoding};
use crate::toolchain::{SUMMARY_LABELS, Toolchain};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The backend's description of the device that candidates are generated, rendered and timed
/// against. The whole record enters the codegen component (every field, through
/// `PartEncoding`; a field added here must be added to the encoding, which the compiler
/// enforces by destructuring).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Limits {
    /// The backend's own codegen contribution (compiler version, flags, ...).
    pub codegen_tag: String,
    /// The worker-pool signature (CPU winners do not transfer across pools).
    pub worker_pool_tag: String,
    /// Maximum threads per kernel.
    pub max_threads: u32,
    /// Vector register width in bytes.
    pub vector_bytes: u32,
    /// Fast local memory per kernel, in bytes.
    pub local_memory_bytes: u64,
    /// Further backend-specific limits, and the home of an adopter's **tuning context**:
    /// what its search tuned for besides the code and the device, such as a shape bucket
    /// (`"shape_bucket" => "64-127"`) or a batch class. Each pair enters the codegen
    /// component, so a winner tuned for one bucket is never replayed for another, and a
    /// miss names the pair itself, first on the codegen line: `differ in: codegen (codegen:
    /// shape_bucket=64-127 → shape_bucket=128-255)`. A value the code's digest already
    /// covers (a static extent) need not be here.
    ///
    /// ```
    /// use schedule_cache::Limits;
    /// let limits = Limits {
    ///     extra: [("shape_bucket".to_string(), "64-127".to_string())].into(),
    ///     ..Limits::default()
    /// };
    /// # let _ = limits;
    /// ```
    pub extra: BTreeMap<String, String>,
    /// The compiling backend's toolchain (compiler identity, options, prelude digest), set by
    /// [`ScheduleCache::with_toolchain`](crate::ScheduleCache::with_toolchain): it enters the
    /// codegen component after the fields above, and only when set, so a record without one
    /// keys as it did before toolchains existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub toolchain: Option<Toolchain>,
}

/// Everything besides the code that a key depends on.
#[derive(Clone, Copy, Debug)]
pub struct KeyInputs<'a> {
    /// The backend's name.
    pub backend: &'a str,
    /// The configuration (numerics, codegen and timing settings).
    pub config: &'a Config,
    /// The backend's limits record, whole.
    pub limits: &'a Limits,
    /// The timing identity; `None` means no key (every disk operation is then a no-op).
    pub timing_identity: Option<&'a TimingIdentity>,
    /// An explicitly resolved timing objective; `None` uses `objective_tag` of the config.
    pub objective: Option<&'a str>,
    /// The adopter's own schedule-format version (for example `"my-ir-ops-3"`; `""` when it
    /// declares none). It enters [`KeyComponent::Format`]: bump it whenever the meaning of
    /// the saved schedule ops changes, and entries saved under the old meaning never replay.
    pub schedule_format: &'a str,
}

/// Domain of every component digest; changes with [`crate::disk::CACHE_REGIME_VERSION`].
const DOMAIN: &str = "kcache-schedule-key-2";

/// How many hex digits of a component its hint in the key shows.
pub const HINT_DIGITS: usize = 6;

/// The start of a component's encoding: the domain and the component's name.
fn component_encoding(c: KeyComponent) -> PartEncoding {
    let mut e = PartEncoding::new();
    e.str(DOMAIN).str(c.name());
    e
}

/// Appends the settings declared as entering `c` (name order), except `skip`.
fn push_settings(e: &mut PartEncoding, config: &Config, c: KeyComponent, skip: Option<&str>) {
    let values: Vec<_> = config
        .component_values(c)
        .into_iter()
        .filter(|(n, _)| Some(*n) != skip)
        .collect();
    e.list(values.len());
    for (name, value) in values {
        e.str(name).opt(value);
    }
}

fn push_limits(e: &mut PartEncoding, limits: &Limits) {
    let Limits {
        codegen_tag,
        worker_pool_tag,
        max_threads,
        vector_bytes,
        local_memory_bytes,
        extra,
        toolchain,
    } = limits;
    e.str(codegen_tag)
        .str(worker_pool_tag)
        .int(u64::from(*max_threads))
        .int(u64::from(*vector_bytes))
        .int(*local_memory_bytes)
        .list(extra.len());
    for (k, v) in extra {
        e.str(k).str(v);
    }
    // Only when set (a record without one keys as before): the fields that follow the
    // `extra` list then start with `S "toolchain"`, which no record without one has.
    if let Some(t) = toolchain {
        t.encode(e);
    }
}

/// Full-width digest of the numerics policy: the settings declared as entering
/// [`KeyComponent::Numerics`]. The policy is consulted at codegen, so it cannot enter the code
/// digest, yet a schedule tuned under one policy must never replay under another.
pub(crate) fn numerics_tag(config: &Config) -> String {
    let mut e = component_encoding(KeyComponent::Numerics);
    push_settings(&mut e, config, KeyComponent::Numerics, None);
    e.digest()
}

/// Full-width digest of the codegen environment: the settings declared as entering
/// [`KeyComponent::Codegen`] and every field of `limits` (including its `codegen_tag`).
pub fn codegen_tag(config: &Config, limits: &Limits) -> String {
    let mut e = component_encoding(KeyComponent::Codegen);
    push_settings(&mut e, config, KeyComponent::Codegen, None);
    push_limits(&mut e, limits);
    e.digest()
}

/// Normalizes a timing-objective spelling to the one keys carry: `"isolated"` or `"queued"`
/// (for CUDA/HIP backends, queued keys carry policy generation 2: `"queued2"`). An unknown
/// spelling passes through (trimmed and lowercased), so unlike regimes stay apart.
pub fn normalize_objective(backend: &str, objective: &str) -> String {
    let o = objective.trim().to_ascii_lowercase();
    match o.as_str() {
        "isolated" | "isolation" | "iso" | "single" => "isolated".to_owned(),
        "queued" | "queue" | "batched" | "pipelined" => {
            let b = backend.to_ascii_lowercase();
            if b == "cuda" || b == "hip" {
                "queued2".to_owned()
            } else {
                "queued".to_owned()
            }
        }
        _ => o,
    }
}

/// The configured timing objective ([`TIMING_SETTING`], default `"isolated"`), normalized: what
/// [`cache_key`] uses when its caller resolved none.
pub(crate) fn objective_tag(backend: &str, config: &Config) -> String {
    normalize_objective(backend, config.get(TIMING_SETTING).unwrap_or("isolated"))
}

/// The named parts of one cache key, in [`KEY_COMPONENTS`] order, each full width. Comparing
/// two explains a miss: [`KeyParts::differing`] says which components differ.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyParts {
    /// `(component, value)`, in key order: the code digest, then each component's SHA-256
    /// (64 hex digits).
    pub parts: Vec<(KeyComponent, String)>,
}

impl KeyParts {
    /// The key: `<code digest>-<SHA-256 over every component>-<hints>`, the hints being each
    /// other component's letter and first [`HINT_DIGITS`] hex digits, joined with `_`.
    ///
    /// # Errors
    /// [`crate::Error::InvalidKey`] if the text is not a valid key (cannot happen for parts
    /// built by [`key_parts`]).
    pub fn key(&self) -> Result<CacheKey, crate::Error> {
        let mut whole = PartEncoding::new();
        whole.str(DOMAIN).str("key").list(self.parts.len());
        for (c, v) in &self.parts {
            whole.str(c.name()).str(v);
        }
        let digest = self.get(KeyComponent::Digest).unwrap_or("");
        let hints: Vec<String> = self
            .parts
            .iter()
            .filter(|(c, _)| *c != KeyComponent::Digest)
            .map(|(c, v)| {
                let hint: String = v.chars().take(HINT_DIGITS).collect();
                format!("{}{hint}", c.prefix())
            })
            .collect();
        CacheKey::new(&format!("{digest}-{}-{}", whole.digest(), hints.join("_")))
    }

    /// The value of one component.
    pub fn get(&self, c: KeyComponent) -> Option<&str> {
        self.parts
            .iter()
            .find(|(k, _)| *k == c)
            .map(|(_, v)| v.as_str())
    }

    /// The components whose values differ between `self` and `other`.
    pub fn differing(&self, other: &KeyParts) -> Vec<KeyComponent> {
        KEY_COMPONENTS
            .iter()
            .copied()
            .filter(|c| self.get(*c) != other.get(*c))
            .collect()
    }
}

/// Which components differ between two keys of this regime, computed from the keys alone
/// (the code digest, then the hints). `None` if either key is not of this regime's shape.
/// Keys that differ while every hint agrees give an empty list (a component differs beyond its
/// hint digits: rare, and only the explanation suffers, never the key).
pub fn key_differences(ours: &CacheKey, other: &CacheKey) -> Option<Vec<KeyComponent>> {
    fn split(key: &CacheKey) -> Option<(&str, Vec<(KeyComponent, &str)>)> {
        let mut fields = key.as_str().split('-');
        let (digest, _whole, hints, None) = (
            fields.next()?,
            fields.next()?,
            fields.next()?,
            fields.next(),
        ) else {
            return None;
        };
        let hints: Vec<(KeyComponent, &str)> = hints
            .split('_')
            .zip(
                KEY_COMPONENTS
                    .iter()
                    .filter(|c| **c != KeyComponent::Digest),
            )
            .map(|(h, c)| Some((*c, h.strip_prefix(c.prefix())?)))
            .collect::<Option<_>>()?;
        (hints.len() + 1 == KEY_COMPONENTS.len()).then_some((digest, hints))
    }
    let (d1, h1) = split(ours)?;
    let (d2, h2) = split(other)?;
    let mut out = Vec::new();
    if d1 != d2 {
        out.push(KeyComponent::Digest);
    }
    out.extend(
        h1.iter()
            .zip(&h2)
            .filter(|(a, b)| a.1 != b.1)
            .map(|(a, _)| a.0),
    );
    Some(out)
}

/// The parts of the cache key of `identity` under `inputs`, or `None` when the timing identity
/// is unavailable. Only a [`CompleteIdentity`] can produce a key.
pub fn key_parts(identity: &CompleteIdentity, inputs: &KeyInputs<'_>) -> Option<KeyParts> {
    let timing = inputs.timing_identity?;
    let parts = KEY_COMPONENTS
        .iter()
        .map(|&c| {
            let v = match c {
                KeyComponent::Digest => identity.digest().to_owned(),
                KeyComponent::Backend => component_encoding(c).str(inputs.backend).digest(),
                KeyComponent::Format => component_encoding(c).str(inputs.schedule_format).digest(),
                KeyComponent::Numerics => numerics_tag(inputs.config),
                KeyComponent::Codegen => codegen_tag(inputs.config, inputs.limits),
                KeyComponent::Pool => {
                    let mut e = component_encoding(c);
                    push_settings(&mut e, inputs.config, c, None);
                    e.str(&inputs.limits.worker_pool_tag);
                    e.digest()
                }
                KeyComponent::Device => {
                    let mut e = component_encoding(c);
                    push_settings(&mut e, inputs.config, c, None);
                    e.str(&timing.device).opt(timing.toolchain.as_deref());
                    e.digest()
                }
                KeyComponent::Timing => {
                    let objective = match inputs.objective {
                        Some(o) => normalize_objective(inputs.backend, o),
                        None => objective_tag(inputs.backend, inputs.config),
                    };
                    let mut e = component_encoding(c);
                    e.str(&objective);
                    // Settings other than the objective itself that enter timing.
                    push_settings(&mut e, inputs.config, c, Some(TIMING_SETTING));
                    e.digest()
                }
            };
            (c, v)
        })
        .collect();
    Some(KeyParts { parts })
}

/// The most characters a [`key_summary`] value keeps (longer ones are cut, marked `…`).
pub(crate) const SUMMARY_CHARS: usize = 1024;

/// A readable line for each key component but the digest, in key order: what its hash in
/// [`key_parts`] was computed from, for people (`kcache show`, a miss saying what differed),
/// never compared by the cache. Settings are `name=value` (`name` alone when unset), limits and
/// tags as given, control characters turned into spaces, each cut to [`SUMMARY_CHARS`]. `None`
/// without a timing identity. What a backend puts in its tags and settings is shown as is:
/// keep secrets out of them (they never belonged in a key's inputs).
pub(crate) fn key_summary(inputs: &KeyInputs<'_>) -> Option<Vec<(KeyComponent, String)>> {
    let timing = inputs.timing_identity?;
    let settings = |c: KeyComponent, skip: Option<&str>| -> Vec<String> {
        inputs
            .config
            .component_values(c)
            .into_iter()
            .filter(|(n, _)| Some(*n) != skip)
            .map(|(n, v)| match v {
                Some(v) => format!("{n}={v}"),
                None => n.to_string(),
            })
            .collect()
    };
    let line = |words: Vec<String>| -> String {
        let joined = words
            .iter()
            .filter(|w| !w.is_empty())
            .cloned()
            .collect::<Vec<_>>()
            .join(" ");
        let clean: String = joined
            .chars()
            .map(|c| if c.is_control() { ' ' } else { c })
            .collect();
        let clean = clean.split_whitespace().collect::<Vec<_>>().join(" ");
        if clean.chars().count() > SUMMARY_CHARS {
            let mut cut: String = clean.chars().take(SUMMARY_CHARS - 1).collect();
            cut.push('…');
            cut
        } else {
            clean
        }
    };
    let l = inputs.limits;
    let out = KEY_COMPONENTS
        .iter()
        .filter(|&&c| c != KeyComponent::Digest)
        .map(|&c| {
            let words = match c {
                KeyComponent::Digest | KeyComponent::Backend => vec![inputs.backend.to_string()],
                KeyComponent::Format => vec![inputs.schedule_format.to_string()],
                KeyComponent::Numerics => settings(c, None),
                KeyComponent::Codegen => {
                    // The adopter's pairs (its tuning context) first: a long codegen tag
                    // cut by the line's cap never hides them.
                    let mut w = settings(c, None);
                    w.extend(l.extra.iter().map(|(k, v)| format!("{k}={v}")));
                    let limits = format!(
                        "threads={} vector={}B local={}B",
                        l.max_threads, l.vector_bytes, l.local_memory_bytes
                    );
                    match &l.toolchain {
                        None => w.extend([l.codegen_tag.clone(), limits]),
                        // Labelled groups, so a miss names the one that changed
                        // (`options -O2 → -O3`); the compiler's long identity comes last
                        // but for the tag and the limits.
                        Some(t) => {
                            w.push(t.summary());
                            if !l.codegen_tag.is_empty() {
                                w.extend(["tag:".to_string(), l.codegen_tag.clone()]);
                            }
                            w.extend(["limits:".to_string(), limits]);
                        }
                    }
                    w
                }
                KeyComponent::Pool => {
                    let mut w = settings(c, None);
                    w.push(l.worker_pool_tag.clone());
                    w
                }
                KeyComponent::Device => {
                    let mut w = settings(c, None);
                    w.push(timing.device.clone());
                    w.extend(timing.toolchain.clone());
                    w
                }
                KeyComponent::Timing => {
                    let objective = match inputs.objective {
                        Some(o) => normalize_objective(inputs.backend, o),
                        None => objective_tag(inputs.backend, inputs.config),
                    };
                    let mut w = vec![objective];
                    w.extend(settings(c, Some(TIMING_SETTING)));
                    w
                }
            };
            (c, line(words))
        })
        .collect();
    Some(out)
}

/// What changed in one key component, word by word, between two [`key_summary`] lines:
/// `"-O2 → -O3"` (the words only the stored line has, then the words only `here` has), or
/// `"reordered"` when both hold the same words. A line holding labelled groups (a
/// [`Toolchain`]'s summary: `options: -O2 …`, one of [`SUMMARY_LABELS`]) is compared group by
/// group, each changed group named: `"options -O2 → -O3"`, several joined with `", "`.
pub(crate) fn summary_change(stored: &str, here: &str) -> String {
    // A word cut by `SUMMARY_CHARS` (ending in `…`) says nothing about a change.
    let words = |s: &'_ str| -> Vec<(Option<String>, String)> {
        let mut label: Option<String> = None;
        let mut out = Vec::new();
        for w in s.split_whitespace().filter(|w| !w.ends_with('…')) {
            if SUMMARY_LABELS.contains(&w) {
                label = Some(w.trim_end_matches(':').to_string());
            } else {
                out.push((label.clone(), w.to_string()));
            }
        }
        out
    };
    let (a, b) = (words(stored), words(here));
    let gone: Vec<&(Option<String>, String)> = a.iter().filter(|w| !b.contains(w)).collect();
    let new: Vec<&(Option<String>, String)> = b.iter().filter(|w| !a.contains(w)).collect();
    // The groups that changed, in the order they first appear (unlabelled words first).
    let mut groups: Vec<&Option<String>> = Vec::new();
    for (label, _) in gone.iter().chain(&new).copied() {
        if !groups.contains(&label) {
            groups.push(label);
        }
    }
    groups.sort_by_key(|g| g.is_some());
    if groups.is_empty() {
        return "reordered".to_string();
    }
    let side = |ws: &[&(Option<String>, String)], g: &Option<String>| -> String {
        let mine: Vec<&str> = ws
            .iter()
            .filter(|(l, _)| l == g)
            .map(|(_, w)| w.as_str())
            .collect();
        if mine.is_empty() {
            "(none)".to_string()
        } else {
            mine.join(" ")
        }
    };
    groups
        .iter()
        .map(|g| {
            let change = format!("{} → {}", side(&gone, g), side(&new, g));
            match g {
                Some(label) => format!("{label} {change}"),
                None => change,
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The filename-safe cache key of `identity` under `inputs` ([`KeyParts::key`] of
/// [`key_parts`]). `None` when the timing identity is unavailable; all cache I/O with `None` is
/// a no-op.
pub fn cache_key(identity: &CompleteIdentity, inputs: &KeyInputs<'_>) -> Option<CacheKey> {
    let parts = key_parts(identity, inputs)?;
    match parts.key() {
        Ok(k) => Some(k),
        Err(e) => {
            tracing::warn!(error = %e, "cache key construction failed; treating as no key");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// One field of a [`PartEncoding`], as a reference model.
    #[derive(Clone, Debug, PartialEq, Eq)]
    enum Field {
        Str(String),
        Absent,
        Int(u64),
        List(usize),
    }

    fn encode(fields: &[Field]) -> PartEncoding {
        let mut e = PartEncoding::new();
        for f in fields {
            match f {
                Field::Str(s) => e.str(s),
                Field::Absent => e.opt(None),
                Field::Int(v) => e.int(*v),
                Field::List(n) => e.list(*n),
            };
        }
        e
    }

    /// The inverse of [`encode`]: `None` on bytes no field sequence encodes to.
    fn decode(mut b: &[u8]) -> Option<Vec<Field>> {
        let mut out = Vec::new();
        let word =
            |b: &[u8]| -> Option<u64> { Some(u64::from_le_bytes(b.get(..8)?.try_into().ok()?)) };
        while let Some((&tag, rest)) = b.split_first() {
            b = rest;
            out.push(match tag {
                b'N' => Field::Absent,
                b'U' => {
                    let v = word(b)?;
                    b = &b[8..];
                    Field::Int(v)
                }
                b'L' => {
                    let v = word(b)?;
                    b = &b[8..];
                    Field::List(usize::try_from(v).ok()?)
                }
                b'S' => {
                    let n = usize::try_from(word(b)?).ok()?;
                    let s = b.get(8..8 + n)?;
                    b = &b[8 + n..];
                    Field::Str(String::from_utf8(s.to_vec()).ok()?)
                }
                _ => return None,
            });
        }
        Some(out)
    }

    fn field() -> impl Strategy<Value = Field> {
        prop_oneof![
            // Every byte class, including the tag letters, NUL and what once meant "unset".
            "(\\PC|[\\x00\\r\\n\\\\'\"#$-]|SNUL|\\x00unset){0,12}".prop_map(Field::Str),
            Just(Field::Absent),
            any::<u64>().prop_map(Field::Int),
            (0usize..4).prop_map(Field::List),
        ]
    }

    proptest! {
        /// The encoding is injective: it decodes back to the very fields it encoded.
        #[test]
        fn the_encoding_decodes_to_its_fields(fields in proptest::collection::vec(field(), 0..8)) {
            prop_assert_eq!(decode(encode(&fields).as_bytes()), Some(fields));
        }

        /// Two different field sequences never share an encoding (nor, therefore, a digest).
        #[test]
        fn different_fields_never_share_an_encoding(
            a in proptest::collection::vec(field(), 0..6),
            b in proptest::collection::vec(field(), 0..6),
        ) {
            prop_assert_eq!(a == b, encode(&a).as_bytes() == encode(&b).as_bytes());
            prop_assert_eq!(a == b, encode(&a).digest() == encode(&b).digest());
        }
    }

    #[test]
    fn an_absent_value_and_every_spelling_of_it_differ() {
        let mut unset = PartEncoding::new();
        unset.str("x").opt(None);
        for mimic in ["", "\0unset", "unset", "N", "=", "\0none"] {
            let mut set = PartEncoding::new();
            set.str("x").opt(Some(mimic));
            assert_ne!(unset.digest(), set.digest(), "{mimic:?}");
        }
    }

    /// The hints are diagnostic only: two key-part sets whose components agree on every hint
    /// but differ beyond it (what brute force finds for short prefixes) still get different
    /// keys, and the explanation from keys says it cannot name the component.
    #[test]
    fn equal_hints_never_make_equal_keys() {
        let digest = "ab".repeat(32);
        let parts = |tail: char| KeyParts {
            parts: KEY_COMPONENTS
                .iter()
                .map(|&c| match c {
                    KeyComponent::Digest => (c, digest.clone()),
                    _ => (
                        c,
                        format!("{}{}", "0".repeat(HINT_DIGITS), tail.to_string().repeat(58)),
                    ),
                })
                .collect(),
        };
        let (a, b) = (parts('1'), parts('2'));
        let (ka, kb) = (a.key().expect("key"), b.key().expect("key"));
        assert_ne!(ka, kb);
        assert_eq!(ka.as_str().len(), 185);
        assert_eq!(key_differences(&ka, &kb), Some(vec![]));
        assert_eq!(a.differing(&b).len(), KEY_COMPONENTS.len() - 1);
        // Keys of other shapes are not explained.
        let other = CacheKey::new("abc-cc").expect("key");
        assert_eq!(key_differences(&ka, &other), None);
    }

    #[test]
    fn digests_are_full_width() {
        let d = PartEncoding::new().digest();
        assert_eq!(d.len(), 64);
        assert!(d.bytes().all(|b| b.is_ascii_hexdigit()));
    }

    #[test]
    fn a_summary_change_names_the_words_that_went_and_came() {
        assert_eq!(summary_change("cc -O2 -fPIC", "cc -O3 -fPIC"), "-O2 → -O3");
        assert_eq!(
            summary_change("cc", "cc -ffast-math"),
            "(none) → -ffast-math"
        );
        assert_eq!(summary_change("cc -g", "cc"), "-g → (none)");
        assert_eq!(summary_change("a b", "b a"), "reordered");
        // A word cut short by the summary's length cap is no change.
        assert_eq!(
            summary_change("cc -O2 -fno-stri…", "cc -O3 -fno-str…"),
            "-O2 → -O3"
        );
    }

    #[test]
    fn a_summary_change_of_labelled_groups_names_each_group() {
        assert_eq!(
            summary_change(
                "unroll=4 options: -O2 -g compiler: cc 12 #aa limits: threads=1",
                "unroll=8 options: -O3 -g compiler: cc 13 #bb limits: threads=1"
            ),
            "unroll=4 → unroll=8, options -O2 → -O3, compiler 12 #aa → 13 #bb"
        );
        // A word moving between groups is a change of both.
        assert_eq!(
            summary_change("options: -g compiler: cc", "options: compiler: cc -g"),
            "options -g → (none), compiler (none) → -g"
        );
        assert_eq!(
            summary_change("options: -O2 -g", "options: -g -O2"),
            "reordered"
        );
    }

    #[test]
    fn the_key_summary_reads_each_component_on_one_capped_line() {
        let config = Config::new(crate::config::SettingsRegistry::new());
        let limits = Limits {
            codegen_tag: format!("cc\n-O2\t{}", "x".repeat(3 * SUMMARY_CHARS)),
            ..Limits::default()
        };
        let timing = TimingIdentity {
            device: "cpu-a".into(),
            toolchain: Some("gcc 12".into()),
        };
        let inputs = KeyInputs {
            backend: "cc",
            config: &config,
            limits: &limits,
            timing_identity: Some(&timing),
            objective: None,
            schedule_format: "ops-1",
        };
        let summary = key_summary(&inputs).expect("a timing identity");
        let get = |c: KeyComponent| &summary.iter().find(|(k, _)| *k == c).expect("component").1;
        assert_eq!(
            summary.len(),
            KEY_COMPONENTS.len() - 1,
            "every component but the digest"
        );
        assert_eq!(get(KeyComponent::Backend), "cc");
        assert_eq!(get(KeyComponent::Format), "ops-1");
        assert_eq!(get(KeyComponent::Device), "cpu-a gcc 12");
        let codegen = get(KeyComponent::Codegen);
        assert!(
            codegen.starts_with("cc -O2 x") || codegen.contains(" cc -O2 x"),
            "{codegen}"
        );
        assert!(!codegen.contains(['\n', '\t']), "{codegen}");
        assert_eq!(codegen.chars().count(), SUMMARY_CHARS);
        assert!(codegen.ends_with('…'));
        let mut no_timing = inputs;
        no_timing.timing_identity = None;
        assert_eq!(key_summary(&no_timing), None);
    }

    #[test]
    fn a_shape_bucket_in_the_limits_changes_the_key_and_a_miss_names_it() {
        let config = Config::new(crate::config::SettingsRegistry::new());
        let timing = TimingIdentity {
            device: "cpu-a".into(),
            toolchain: None,
        };
        let limits = |bucket: &str| Limits {
            // A codegen tag long enough to be cut by the summary's cap.
            codegen_tag: format!("cc -O2 {}", "-fflag ".repeat(SUMMARY_CHARS)),
            extra: [("shape_bucket".to_string(), bucket.to_string())].into(),
            ..Limits::default()
        };
        let (small, large) = (limits("64-127"), limits("128-255"));
        let inputs = |l| KeyInputs {
            backend: "cc",
            config: &config,
            limits: l,
            timing_identity: Some(&timing),
            objective: None,
            schedule_format: "ops-1",
        };
        struct Empty;
        impl crate::LoopCode for Empty {
            fn walk(&self, _: &mut dyn crate::Visitor) {}
        }
        let code = crate::canonicalize(&Empty, &[], &BTreeMap::new(), true)
            .into_complete()
            .expect("complete");
        let (a, b) = (
            cache_key(&code, &inputs(&small)).expect("key"),
            cache_key(&code, &inputs(&large)).expect("key"),
        );
        assert_eq!(key_differences(&a, &b), Some(vec![KeyComponent::Codegen]));
        let line = |l| {
            key_summary(&inputs(l))
                .expect("summary")
                .into_iter()
                .find(|(c, _)| *c == KeyComponent::Codegen)
                .expect("codegen")
                .1
        };
        assert_eq!(
            summary_change(&line(&small), &line(&large)),
            "shape_bucket=64-127 → shape_bucket=128-255"
        );
    }
}
