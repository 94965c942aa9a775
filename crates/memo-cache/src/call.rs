//! What one LM call is made of: plain values, a redacted secret, the LM's
//! configuration and a predictor's state. These are the inputs of the stable
//! hashes in [`crate::key`]; nothing here talks to an LM.

use std::collections::BTreeMap;
use std::fmt;

/// A plain data value: a field of an input, a demo, or an LM option.
///
/// Floats are compared and hashed by their bits, so `0.0` and `-0.0` (or two NaNs
/// with different payloads) are different values: a cache key built from them never
/// merges two calls that an LM could tell apart. `==` agrees with the hashes: a NaN
/// equals itself, `0.0` does not equal `-0.0`.
#[derive(Clone, Debug)]
pub enum Value {
    /// No value.
    Null,
    /// A boolean.
    Bool(bool),
    /// A signed integer.
    Int(i64),
    /// A floating-point number.
    Float(f64),
    /// A string.
    Text(String),
    /// A sequence; its order is part of the value.
    List(Vec<Value>),
    /// A map; its keys are kept sorted, so insertion order is not part of the value.
    Map(BTreeMap<String, Value>),
    /// A secret (a token, a password): hashed like a string, never shown.
    Secret(Secret),
}

impl PartialEq for Value {
    /// Structural, with floats compared by their bits (see [`Value`]).
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Value::Null, Value::Null) => true,
            (Value::Bool(a), Value::Bool(b)) => a == b,
            (Value::Int(a), Value::Int(b)) => a == b,
            (Value::Float(a), Value::Float(b)) => a.to_bits() == b.to_bits(),
            (Value::Text(a), Value::Text(b)) => a == b,
            (Value::List(a), Value::List(b)) => a == b,
            (Value::Map(a), Value::Map(b)) => a == b,
            (Value::Secret(a), Value::Secret(b)) => a == b,
            _ => false,
        }
    }
}

impl From<&str> for Value {
    fn from(s: &str) -> Self {
        Value::Text(s.to_owned())
    }
}

impl From<String> for Value {
    fn from(s: String) -> Self {
        Value::Text(s)
    }
}

impl From<i64> for Value {
    fn from(i: i64) -> Self {
        Value::Int(i)
    }
}

impl From<f64> for Value {
    fn from(f: f64) -> Self {
        Value::Float(f)
    }
}

impl From<bool> for Value {
    fn from(b: bool) -> Self {
        Value::Bool(b)
    }
}

/// A secret string, such as an API key.
///
/// Its `Debug` and `Display` print `<redacted>`, so a secret never appears in a log,
/// a panic message or an assertion failure of anything that contains it. It enters
/// cache keys only through SHA-256, which does not reveal it. Read it with
/// [`Secret::expose`] where it is really needed (the request to the LM).
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps a secret.
    pub fn new(secret: impl Into<String>) -> Self {
        Secret(secret.into())
    }

    /// The secret itself. Every use is a place where it can leak: keep them few.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

/// The configuration of the LM a call goes to.
///
/// `model` and `api_key` are always part of its hash, so two tenants with different
/// credentials (or models) never share a cache entry; `options` (temperature,
/// max tokens, endpoint, …) are a keyword list: options of different names may come
/// in any order, and an option given twice keeps the order of its values (the last
/// one usually wins, so the order is part of the key).
#[derive(Clone, Debug, PartialEq)]
pub struct LmConfig {
    /// The model name, e.g. `"gpt-4o-mini"`.
    pub model: String,
    /// The credentials the calls are made with, if any.
    pub api_key: Option<Secret>,
    /// Every other option, as `(name, value)` pairs; only the order of one name's
    /// values matters.
    pub options: Vec<(String, Value)>,
}

impl LmConfig {
    /// A configuration for `model` with no key and no options.
    pub fn new(model: impl Into<String>) -> Self {
        LmConfig {
            model: model.into(),
            api_key: None,
            options: Vec::new(),
        }
    }

    /// The same configuration with `key` as its credentials.
    pub fn with_api_key(mut self, key: Secret) -> Self {
        self.api_key = Some(key);
        self
    }

    /// The same configuration with one more option.
    pub fn with_option(mut self, name: impl Into<String>, value: impl Into<Value>) -> Self {
        self.options.push((name.into(), value.into()));
        self
    }
}

/// One worked example shown to the LM: the inputs of a call and the outputs expected.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Demo {
    /// The input fields.
    pub inputs: BTreeMap<String, Value>,
    /// The output fields.
    pub outputs: BTreeMap<String, Value>,
}

impl Demo {
    /// A demo from `(name, value)` pairs of inputs and of outputs.
    pub fn new<'a>(
        inputs: impl IntoIterator<Item = (&'a str, Value)>,
        outputs: impl IntoIterator<Item = (&'a str, Value)>,
    ) -> Self {
        Demo {
            inputs: inputs.into_iter().map(|(k, v)| (k.to_owned(), v)).collect(),
            outputs: outputs
                .into_iter()
                .map(|(k, v)| (k.to_owned(), v))
                .collect(),
        }
    }
}

/// How an optimizer chose a predictor's demos. It is history, not input: by the
/// time the LM is called the strategy has produced concrete demos, so it is not
/// part of the predictor's hash.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum DemoStrategy {
    /// Demos given by hand.
    #[default]
    Fixed,
    /// Demos bootstrapped from the program's own successful runs.
    Bootstrap {
        /// The most demos kept.
        max_demos: u32,
    },
    /// A random subset of labelled examples.
    RandomSubset {
        /// How many examples were drawn.
        k: u32,
        /// The seed of the draw.
        seed: u64,
    },
}

/// The state of one predictor of a program, as an optimizer edits it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PredictorState {
    /// The signature, e.g. `"question -> answer"`.
    pub signature: String,
    /// The instructions given to the LM.
    pub instructions: String,
    /// The demos shown to the LM; their order does not matter.
    pub demos: Vec<Demo>,
    /// How the demos were chosen (not part of the hash).
    pub demo_strategy: DemoStrategy,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_never_print() {
        let s = Secret::new("sk-live-abc123");
        assert_eq!(format!("{s}"), "<redacted>");
        assert_eq!(format!("{s:?}"), "Secret(<redacted>)");
        let config = LmConfig::new("m")
            .with_api_key(s.clone())
            .with_option("org_token", Value::Secret(Secret::new("tok-xyz789")));
        let shown = format!("{config:?} {config:#?}");
        assert!(!shown.contains("abc123"), "{shown}");
        assert!(!shown.contains("xyz789"), "{shown}");
        assert_eq!(s.expose(), "sk-live-abc123");
    }
}
