//! The key components a cache key is built from, and [`cache_key`].
//!
//! [`KEY_COMPONENTS`] drives [`key_parts`]: the key is exactly the listed components, in
//! order, each computed by one match arm, so the list is a complete and current enumeration of
//! what the cache's identity depends on (and what [`crate::config`] classifies settings
//! against).

use crate::config::{Config, TIMING_SETTING};
use crate::identity::CompleteIdentity;
use crate::key::CacheKey;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// One component of a cache key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum KeyComponent {
    /// The canonical digest of the code.
    Digest,
    /// The backend's name.
    Backend,
    /// The numerics policy (a short digest of the settings entering it).
    Numerics,
    /// The codegen environment: settings entering it and the whole [`Limits`] record,
    /// including the backend's own codegen tag.
    Codegen,
    /// The worker-pool signature ([`Limits::worker_pool_tag`]).
    Pool,
    /// The concrete device ([`TimingIdentity`]).
    Device,
    /// The normalized timing objective.
    Timing,
}

/// The components of every cache key, in key order. This list drives [`key_parts`].
pub const KEY_COMPONENTS: [KeyComponent; 7] = [
    KeyComponent::Digest,
    KeyComponent::Backend,
    KeyComponent::Numerics,
    KeyComponent::Codegen,
    KeyComponent::Pool,
    KeyComponent::Device,
    KeyComponent::Timing,
];

impl KeyComponent {
    /// The component's name: `"digest"`, `"backend"`, `"numerics"`, `"codegen"`, `"pool"`,
    /// `"device"`, `"timing"`.
    pub fn name(self) -> &'static str {
        match self {
            KeyComponent::Digest => "digest",
            KeyComponent::Backend => "backend",
            KeyComponent::Numerics => "numerics",
            KeyComponent::Codegen => "codegen",
            KeyComponent::Pool => "pool",
            KeyComponent::Device => "device",
            KeyComponent::Timing => "timing",
        }
    }

    /// The letter prefixed to the component in a key (empty for digest and backend), so a file
    /// name shows which regime wrote it.
    pub fn prefix(self) -> &'static str {
        match self {
            KeyComponent::Digest | KeyComponent::Backend => "",
            KeyComponent::Numerics => "n",
            KeyComponent::Codegen => "c",
            KeyComponent::Pool => "p",
            KeyComponent::Device => "d",
            KeyComponent::Timing => "t",
        }
    }
}

/// The backend's description of the device that candidates are generated, rendered and timed
/// against. The whole record enters the codegen component, so a field added here reaches every
/// key without touching call sites.
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
    /// Further backend-specific limits.
    pub extra: BTreeMap<String, String>,
}

/// The concrete device capabilities timings were measured on (and, optionally, observed
/// toolchain metadata). Without it there is no cache key.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TimingIdentity {
    /// The concrete device (model, capabilities).
    pub device: String,
    /// Observed toolchain metadata, if any.
    pub toolchain: Option<String>,
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
    /// An explicitly resolved timing objective; `None` uses [`objective_tag`] of the config.
    pub objective: Option<&'a str>,
}

const SHORT: usize = 12;
const MAX_PLAIN: usize = 24;

/// A filename-safe short digest (12 hex digits) of length-prefixed parts.
pub fn short_digest(parts: &[&[u8]]) -> String {
    let d = canonical_text::digest_of_parts(parts);
    d.chars().take(SHORT).collect()
}

fn settings_parts(config: &Config, c: KeyComponent) -> Vec<Vec<u8>> {
    let mut v = vec![c.name().as_bytes().to_vec()];
    for (name, value) in config.component_values(c) {
        v.push(name.as_bytes().to_vec());
        v.push(match value {
            None => b"\x00unset".to_vec(),
            Some(s) => format!("={s}").into_bytes(),
        });
    }
    v
}

fn digest_owned(parts: &[Vec<u8>]) -> String {
    let refs: Vec<&[u8]> = parts.iter().map(Vec::as_slice).collect();
    short_digest(&refs)
}

/// Short digest of the numerics policy: the settings declared as entering
/// [`KeyComponent::Numerics`]. The policy is consulted at codegen, so it cannot enter the code
/// digest, yet a schedule tuned under one policy must never replay under another.
pub fn numerics_tag(config: &Config) -> String {
    digest_owned(&settings_parts(config, KeyComponent::Numerics))
}

/// Short digest of the codegen environment: the settings declared as entering
/// [`KeyComponent::Codegen`] and the whole `limits` record (including its `codegen_tag`).
pub fn codegen_tag(config: &Config, limits: &Limits) -> String {
    let mut parts = settings_parts(config, KeyComponent::Codegen);
    parts.push(limits_bytes(limits));
    digest_owned(&parts)
}

fn limits_bytes(limits: &Limits) -> Vec<u8> {
    // RON of a struct of strings, integers and a BTreeMap cannot fail; if it ever did, the
    // Debug form still distinguishes every field.
    ron::to_string(limits)
        .unwrap_or_else(|_| format!("{limits:?}"))
        .into_bytes()
}

fn plain_or_digest(s: &str, letter: &str) -> String {
    if !s.is_empty()
        && s.len() <= MAX_PLAIN
        && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
    {
        s.to_owned()
    } else {
        format!("{letter}{}", short_digest(&[s.as_bytes()]))
    }
}

/// Normalizes a timing-objective spelling to the one keys carry: `"isolated"` or `"queued"`
/// (for CUDA/HIP backends, queued keys carry policy generation 2: `"queued2"`). An unknown
/// spelling passes through (lowercased; as a short digest if not filename-safe), so unlike
/// regimes stay apart.
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
        _ => plain_or_digest(&o, "x"),
    }
}

/// The configured timing objective ([`TIMING_SETTING`], default `"isolated"`), normalized: what
/// [`cache_key`] uses when its caller resolved none.
pub fn objective_tag(backend: &str, config: &Config) -> String {
    normalize_objective(backend, config.get(TIMING_SETTING).unwrap_or("isolated"))
}

/// The named parts of one cache key, in [`KEY_COMPONENTS`] order. Comparing two explains a
/// miss: [`KeyParts::differing`] says which components differ.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyParts {
    /// `(component, rendered value without prefix)`, in key order.
    pub parts: Vec<(KeyComponent, String)>,
}

impl KeyParts {
    /// The key: each part prefixed by its component letter, joined with `-`.
    ///
    /// # Errors
    /// [`crate::Error::InvalidKey`] if the joined text is not a valid key (cannot happen for
    /// parts built by [`key_parts`]).
    pub fn key(&self) -> Result<CacheKey, crate::Error> {
        let s: Vec<String> = self
            .parts
            .iter()
            .map(|(c, v)| format!("{}{v}", c.prefix()))
            .collect();
        CacheKey::new(&s.join("-"))
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

/// The parts of the cache key of `identity` under `inputs`, or `None` when the timing identity
/// is unavailable. Only a [`CompleteIdentity`] can produce a key.
pub fn key_parts(identity: &CompleteIdentity, inputs: &KeyInputs<'_>) -> Option<KeyParts> {
    let timing = inputs.timing_identity?;
    let parts = KEY_COMPONENTS
        .iter()
        .map(|&c| {
            let v = match c {
                KeyComponent::Digest => identity.digest().to_owned(),
                KeyComponent::Backend => plain_or_digest(inputs.backend, "b"),
                KeyComponent::Numerics => numerics_tag(inputs.config),
                KeyComponent::Codegen => codegen_tag(inputs.config, inputs.limits),
                KeyComponent::Pool => {
                    let mut p = settings_parts(inputs.config, c);
                    p.push(inputs.limits.worker_pool_tag.as_bytes().to_vec());
                    digest_owned(&p)
                }
                KeyComponent::Device => {
                    let mut p = settings_parts(inputs.config, c);
                    p.push(timing.device.as_bytes().to_vec());
                    p.push(match &timing.toolchain {
                        None => b"\x00none".to_vec(),
                        Some(t) => format!("={t}").into_bytes(),
                    });
                    digest_owned(&p)
                }
                KeyComponent::Timing => {
                    let objective = match inputs.objective {
                        Some(o) => normalize_objective(inputs.backend, o),
                        None => objective_tag(inputs.backend, inputs.config),
                    };
                    // Settings other than the objective itself that enter timing.
                    let others: Vec<_> = inputs
                        .config
                        .component_values(c)
                        .into_iter()
                        .filter(|(n, _)| *n != TIMING_SETTING)
                        .collect();
                    if others.is_empty() {
                        objective
                    } else {
                        let mut p = vec![c.name().as_bytes().to_vec()];
                        for (n, v) in others {
                            p.push(n.as_bytes().to_vec());
                            p.push(v.map_or(b"\x00unset".to_vec(), |v| v.as_bytes().to_vec()));
                        }
                        format!("{objective}_{}", digest_owned(&p))
                    }
                }
            };
            (c, v)
        })
        .collect();
    Some(KeyParts { parts })
}

/// The filename-safe cache key of `identity` under `inputs`: the parts of [`key_parts`] joined
/// in [`KEY_COMPONENTS`] order. `None` when the timing identity is unavailable; all cache I/O
/// with `None` is a no-op.
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
