//! The configuration registry: every setting the code generator consults is declared with the
//! key component it enters (or declared irrelevant, with a reason), so no setting can change a
//! kernel without changing its cache key.
//!
//! [`Config::get`] records reads of undeclared settings; [`digest_completeness`] runs code and
//! fails if it read any — the digest-completeness guard tests use.

use crate::Error;
use crate::key::KeyComponent;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Mutex, PoisonError};

/// How a setting relates to the cache key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Relevance {
    /// The setting's value enters this key component.
    Enters(KeyComponent),
    /// The setting never changes a kernel or what a timing measures; the reason says why.
    Irrelevant(&'static str),
}

/// One declared setting.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SettingDecl {
    /// The setting's name.
    pub name: &'static str,
    /// Which key component it enters, or why it enters none.
    pub relevance: Relevance,
}

/// The setting that names the autotuner's timing objective (enters [`KeyComponent::Timing`]).
pub const TIMING_SETTING: &str = "autotune_timing";

/// A set of declared settings. Every registry declares [`TIMING_SETTING`] (entering
/// [`KeyComponent::Timing`]) from the start: the crate itself consults it when keying.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SettingsRegistry {
    decls: BTreeMap<&'static str, Relevance>,
}

/// The declaration every registry starts with.
const TIMING_DECL: SettingDecl = SettingDecl {
    name: TIMING_SETTING,
    relevance: Relevance::Enters(KeyComponent::Timing),
};

impl Default for SettingsRegistry {
    fn default() -> SettingsRegistry {
        SettingsRegistry {
            decls: BTreeMap::from([(TIMING_DECL.name, TIMING_DECL.relevance)]),
        }
    }
}

impl SettingsRegistry {
    /// A registry declaring only [`TIMING_SETTING`] (which the crate consults when keying).
    pub fn new() -> SettingsRegistry {
        SettingsRegistry::default()
    }

    /// Declares a setting.
    ///
    /// Declaring [`TIMING_SETTING`] again as entering [`KeyComponent::Timing`] is accepted (it
    /// is declared from the start).
    ///
    /// # Errors
    /// [`Error::InvalidDeclaration`] if the name is already declared (otherwise), or the
    /// declared component is [`KeyComponent::Digest`], [`KeyComponent::Backend`] or
    /// [`KeyComponent::Format`] (which no setting can enter: the digest names the code, the
    /// backend its name, the format the adopter's schedule-format version; their encodings
    /// hold no settings, so a setting declared there would change no key).
    pub fn declare(&mut self, decl: SettingDecl) -> Result<(), Error> {
        let bad = |reason: &'static str| Error::InvalidDeclaration {
            name: decl.name.to_owned(),
            reason,
        };
        if decl == TIMING_DECL {
            return Ok(());
        }
        if self.decls.contains_key(decl.name) {
            return Err(bad("declared twice"));
        }
        if let Relevance::Enters(
            KeyComponent::Digest | KeyComponent::Backend | KeyComponent::Format,
        ) = decl.relevance
        {
            return Err(bad(
                "no setting can enter the digest, backend or format component",
            ));
        }
        self.decls.insert(decl.name, decl.relevance);
        Ok(())
    }

    /// How `name` was declared, if it was.
    pub fn relevance(&self, name: &str) -> Option<Relevance> {
        self.decls.get(name).copied()
    }

    /// The names declared as entering `component`, sorted.
    pub(crate) fn entering(&self, component: KeyComponent) -> Vec<&'static str> {
        self.decls
            .iter()
            .filter(|(_, r)| **r == Relevance::Enters(component))
            .map(|(n, _)| *n)
            .collect()
    }
}

/// Configuration values plus the registry that classifies them.
///
/// Reading a setting through [`Config::get`] that the registry does not declare is recorded
/// (and logged); [`digest_completeness`] turns such reads into a failure.
#[derive(Debug, Default)]
pub struct Config {
    registry: SettingsRegistry,
    values: BTreeMap<String, String>,
    undeclared_reads: Mutex<BTreeSet<String>>,
}

impl Clone for Config {
    fn clone(&self) -> Config {
        Config {
            registry: self.registry.clone(),
            values: self.values.clone(),
            undeclared_reads: Mutex::new(BTreeSet::new()),
        }
    }
}

impl Config {
    /// A configuration with no values set, classified by `registry`.
    pub fn new(registry: SettingsRegistry) -> Config {
        Config {
            registry,
            values: BTreeMap::new(),
            undeclared_reads: Mutex::new(BTreeSet::new()),
        }
    }

    /// Sets `name` to `value` (builder style).
    pub fn with(mut self, name: &str, value: &str) -> Config {
        self.set(name, value);
        self
    }

    /// Sets `name` to `value`.
    pub fn set(&mut self, name: &str, value: &str) {
        self.values.insert(name.to_owned(), value.to_owned());
    }

    /// Consults a setting: what code generation and tuning must use to read configuration.
    /// Returns the value if set. A read of an undeclared setting is recorded for
    /// [`digest_completeness`] and logged as a warning; the value is still returned.
    pub fn get(&self, name: &str) -> Option<&str> {
        if self.registry.relevance(name).is_none() {
            tracing::warn!(setting = name, "undeclared configuration setting consulted");
            self.undeclared_reads
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .insert(name.to_owned());
        }
        self.values.get(name).map(String::as_str)
    }

    /// The values of the settings declared as entering `component`, in name order (`None` when
    /// unset). This is what the component's tag digests.
    pub(crate) fn component_values(
        &self,
        component: KeyComponent,
    ) -> Vec<(&'static str, Option<&str>)> {
        self.registry
            .entering(component)
            .into_iter()
            .map(|n| (n, self.values.get(n).map(String::as_str)))
            .collect()
    }

    fn take_undeclared(&self) -> BTreeSet<String> {
        std::mem::take(
            &mut *self
                .undeclared_reads
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        )
    }
}

/// The digest-completeness guard: runs `f` with `config` and fails if `f` consulted any setting
/// the registry does not declare. Meant for tests that exercise code generation.
///
/// Reads recorded before the call are discarded; run one guarded scope per `Config` at a time.
///
/// # Errors
/// [`Error::UndeclaredSettings`] listing every undeclared setting `f` read (sorted).
pub fn digest_completeness<R>(config: &Config, f: impl FnOnce(&Config) -> R) -> Result<R, Error> {
    let _ = config.take_undeclared();
    let r = f(config);
    let undeclared = config.take_undeclared();
    if undeclared.is_empty() {
        Ok(r)
    } else {
        Err(Error::UndeclaredSettings(undeclared.into_iter().collect()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LARGE_MODELS: SettingDecl = SettingDecl {
        name: "large_models",
        relevance: Relevance::Enters(KeyComponent::Codegen),
    };

    /// A renderer's registry: one setting entering the codegen component, one irrelevant.
    fn registry() -> SettingsRegistry {
        let mut r = SettingsRegistry::new();
        r.declare(LARGE_MODELS).expect("valid");
        r.declare(SettingDecl {
            name: "log_level",
            relevance: Relevance::Irrelevant("verbosity"),
        })
        .expect("valid");
        r
    }

    #[test]
    fn every_registry_declares_the_timing_setting() {
        let own = Config::new(SettingsRegistry::new()).with(TIMING_SETTING, "queued");
        let v = digest_completeness(&own, |c| c.get(TIMING_SETTING).map(str::to_owned))
            .expect("the crate's own setting is declared for the caller");
        assert_eq!(v.as_deref(), Some("queued"));
        let mut r = SettingsRegistry::new();
        r.declare(TIMING_DECL)
            .expect("re-declaring it as it is is fine");
        let other = SettingDecl {
            name: TIMING_SETTING,
            relevance: Relevance::Enters(KeyComponent::Codegen),
        };
        assert!(r.declare(other).is_err());
        assert_eq!(r.entering(KeyComponent::Timing), vec![TIMING_SETTING]);
    }

    #[test]
    fn declaring_twice_or_into_digest_is_rejected() {
        let mut r = registry();
        assert!(r.declare(LARGE_MODELS).is_err());
        let d = SettingDecl {
            name: "x",
            relevance: Relevance::Enters(KeyComponent::Digest),
        };
        assert!(r.declare(d).is_err());
    }

    #[test]
    fn guard_passes_declared_reads_and_fails_undeclared_ones() {
        let cfg = Config::new(registry()).with("large_models", "true");
        let v = digest_completeness(&cfg, |c| c.get("large_models").map(str::to_owned))
            .expect("declared");
        assert_eq!(v.as_deref(), Some("true"));
        let err = digest_completeness(&cfg, |c| {
            c.get("unroll_threshold");
            c.get("large_models");
        })
        .expect_err("undeclared read must fail the guard");
        assert!(
            matches!(&err, Error::UndeclaredSettings(v) if v == &["unroll_threshold".to_owned()])
        );
        // The guard resets: a clean scope passes again.
        digest_completeness(&cfg, |c| c.get("log_level").is_some()).expect("declared irrelevant");
    }
}
