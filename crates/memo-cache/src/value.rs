//! Plain data values and redacted secrets: what [`KeyBuilder`](crate::KeyBuilder) parts
//! and the [`lm`](crate::lm) hashes are made of.

use std::collections::BTreeMap;
use std::fmt;

/// A plain data value: a part of a key, a field of an input, a demo, or an LM option.
///
/// A minor version may add kinds of value (hence `#[non_exhaustive]`); an existing
/// kind keeps its encoding.
///
/// Floats are compared and hashed by their bits, so `0.0` and `-0.0` (or two NaNs
/// with different payloads) are different values: a cache key built from them never
/// merges two calls that a consumer could tell apart. `==` agrees with the hashes: a NaN
/// equals itself, `0.0` does not equal `-0.0`.
#[derive(Clone, Debug)]
#[non_exhaustive]
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
/// [`Secret::expose`] where it is really needed (e.g. the request to a server).
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_never_print() {
        let s = Secret::new("sk-live-abc123");
        assert_eq!(format!("{s}"), "<redacted>");
        assert_eq!(format!("{s:?}"), "Secret(<redacted>)");
        let v = Value::List(vec![Value::Secret(s.clone())]);
        let shown = format!("{v:?} {v:#?}");
        assert!(!shown.contains("abc123"), "{shown}");
        assert_eq!(s.expose(), "sk-live-abc123");
    }
}
