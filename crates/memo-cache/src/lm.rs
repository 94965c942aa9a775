//! LM calls: the keys of an optimizer of LM programs (the use memo-cache began with, a
//! compile-scoped cache of `(lm, predictor_state, input)` evaluations).
//!
//! These are one adopter's concepts, kept here behind the generic front
//! ([`KeyBuilder`](crate::KeyBuilder), [`Key`]): an LM's configuration ([`LmConfig`],
//! whose model and API key are always in its hash so tenants with different credentials
//! never share a key), a predictor's state ([`PredictorState`] with its [`Demo`]s; the
//! [`DemoStrategy`] is left out of its hash, and demo order does not matter), an input's
//! fields, and the key of one call ([`call_key`]). Each hash is SHA-256 over the encoding
//! documented in [`crate::key`], with its own domain tag; the keys are pinned in
//! `tests/hashing.rs` and recomputed independently by `tests/data/pin_keys.py`.
//!
//! # Example: an optimizer on worker threads
//!
//! The same table serves an optimizer of LM programs, with these keys.
//! Four candidate programs are evaluated over three questions, one worker thread per
//! candidate. Two pairs of candidates differ only in demo order and demo strategy,
//! which do not change what the LM is asked, so 12 evaluations make 6 LM calls.
//!
//! ```
//! use std::sync::atomic::{AtomicUsize, Ordering};
//! use memo_cache::lm::{
//!     call_key, input_hash, lm_config_hash, predictor_state_hash, Demo, DemoStrategy,
//!     LmConfig, PredictorState,
//! };
//! use memo_cache::{fetch_or_put, with_cache, Fetched, Secret, Value};
//!
//! // The LM is a function here; in a real optimizer it is a request to a model.
//! static LM_CALLS: AtomicUsize = AtomicUsize::new(0);
//! fn ask_lm(lm: &LmConfig, state: &PredictorState, question: &str) -> f64 {
//!     LM_CALLS.fetch_add(1, Ordering::Relaxed);
//!     let score = state.instructions.len() * 7 + state.demos.len() * 3 + question.len();
//!     (score % 10) as f64 / 10.0 + lm.model.len() as f64
//! }
//!
//! let lm = LmConfig::new("small-model")
//!     .with_api_key(Secret::new("sk-tenant-a"))
//!     .with_option("temperature", 0.0);
//! let demo = |q: &str, a: &str| Demo::new([("question", q.into())], [("answer", a.into())]);
//! let (d1, d2) = (demo("2+2?", "4"), demo("capital of France?", "Paris"));
//! let brief = PredictorState {
//!     signature: "question -> answer".into(),
//!     instructions: "Answer briefly.".into(),
//!     demos: vec![d1.clone(), d2.clone()],
//!     demo_strategy: DemoStrategy::Fixed,
//! };
//! let stepwise = PredictorState { instructions: "Think step by step.".into(), ..brief.clone() };
//! let candidates = vec![
//!     brief.clone(),
//!     // Same demos in another order, chosen another way: the same LM calls.
//!     PredictorState {
//!         demos: vec![d2, d1],
//!         demo_strategy: DemoStrategy::Bootstrap { max_demos: 2 },
//!         ..brief
//!     },
//!     stepwise.clone(),
//!     PredictorState { demo_strategy: DemoStrategy::RandomSubset { k: 2, seed: 7 }, ..stepwise },
//! ];
//! let questions = ["1+1?", "largest planet?", "boiling point of water?"];
//!
//! let (scores, stats) = with_cache(true, |table| {
//!     let lm_key = lm_config_hash(&lm);
//!     let scores: Vec<(f64, usize)> = std::thread::scope(|s| {
//!         let workers: Vec<_> = candidates
//!             .iter()
//!             .map(|candidate| {
//!                 let (lm, questions) = (&lm, &questions);
//!                 // Only the handle is shared, explicitly.
//!                 s.spawn(move || {
//!                     let state_key = predictor_state_hash(candidate);
//!                     let (mut total, mut hits) = (0.0, 0);
//!                     for q in questions {
//!                         let input = Value::from(*q);
//!                         let key = call_key(&lm_key, &state_key, &input_hash([("question", &input)]));
//!                         match fetch_or_put(table, key, || ask_lm(lm, candidate, q)) {
//!                             Fetched::Hit(score) => { total += score; hits += 1; }
//!                             Fetched::Miss(score) => total += score,
//!                         }
//!                     }
//!                     (total, hits)
//!                 })
//!             })
//!             .collect();
//!         workers.into_iter().map(|w| w.join().unwrap()).collect()
//!     });
//!     (scores, table.map(|t| t.stats()))
//! });
//! // The table is gone now; the figures remain.
//! let stats = stats.unwrap();
//! assert_eq!(LM_CALLS.load(Ordering::Relaxed), 6);
//! assert_eq!((stats.misses, stats.hits, stats.entries), (6, 6, 6));
//! assert_eq!(scores.iter().map(|(_, hits)| hits).sum::<usize>(), 6);
//! assert_eq!(scores[0].0, scores[1].0);
//! assert_eq!(scores[2].0, scores[3].0);
//! ```
//!
//! With `with_cache(false, …)` the same code runs with `table == None`: all 12
//! evaluations call the LM and every fetch reports [`Fetched::Miss`](crate::Fetched::Miss).
//!
//! # Versions
//!
//! `input/v1` and `lm-config/v1` sorted the pairs of one name by their encoding, so a
//! name's values given in two orders shared a key; `v2` keeps their order (the other
//! two tags are unchanged: their encodings did not change).

use std::collections::BTreeMap;

use crate::key::{Key, encode_map, encode_text, sorted_pairs};
use crate::value::{Secret, Value};

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
/// part of the predictor's hash. A minor version may add strategies.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
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

const INPUT_TAG: &[u8] = b"memo-cache/input/v2";
const LM_CONFIG_TAG: &[u8] = b"memo-cache/lm-config/v2";
const PREDICTOR_TAG: &[u8] = b"memo-cache/predictor-state/v1";
const CALL_TAG: &[u8] = b"memo-cache/call/v1";

/// The hash of an LM call's input: its `(field name, value)` pairs, in any order of names.
///
/// The pairs are sorted by name before hashing, so the iteration order of a `HashMap`
/// or the order of a list of pairs of distinct names never changes the key; every
/// name and every value does. A name given more than once counts each time and keeps
/// the order of its values (the sort is stable): `[("t", &a), ("t", &b)]` and
/// `[("t", &b), ("t", &a)]` are different keys, as a consumer that lets the last
/// value win reads them differently.
pub fn input_hash<'a>(fields: impl IntoIterator<Item = (&'a str, &'a Value)>) -> Key {
    let pairs = sorted_pairs(fields);
    let mut parts: Vec<&[u8]> = Vec::with_capacity(pairs.len() + 1);
    parts.push(INPUT_TAG);
    parts.extend(pairs.iter().map(|(_, enc)| enc.as_slice()));
    Key::of_parts(&parts)
}

/// The hash of an LM configuration.
///
/// The model and the API key are always included, so tenants with different
/// credentials never share a key; the options are sorted by name, so the order of
/// options of different names does not matter, while an option given twice keeps the
/// order of its values (`temperature` 0.0 then 0.7 is not 0.7 then 0.0: a client that
/// lets the last value win sends different requests). The secret enters only
/// SHA-256: it is in no output.
pub fn lm_config_hash(config: &LmConfig) -> Key {
    let mut model = Vec::new();
    encode_text(&mut model, &config.model);
    let mut api_key = Vec::new();
    match &config.api_key {
        None => api_key.push(0),
        Some(secret) => {
            api_key.push(1);
            encode_text(&mut api_key, secret.expose());
        }
    }
    let pairs = sorted_pairs(config.options.iter().map(|(k, v)| (k.as_str(), v)));
    let mut parts: Vec<&[u8]> = Vec::with_capacity(pairs.len() + 3);
    parts.extend([LM_CONFIG_TAG, &model, &api_key]);
    parts.extend(pairs.iter().map(|(_, enc)| enc.as_slice()));
    Key::of_parts(&parts)
}

/// The hash of a predictor's state: its signature, instructions and demos.
///
/// The demo strategy is left out (by the time the LM is called it has already
/// produced concrete demos), and the demos are hashed as a set with multiplicity, so
/// their order does not matter; every field of every demo does.
pub fn predictor_state_hash(state: &PredictorState) -> Key {
    let mut signature = Vec::new();
    encode_text(&mut signature, &state.signature);
    let mut instructions = Vec::new();
    encode_text(&mut instructions, &state.instructions);
    let mut demos: Vec<Vec<u8>> = state.demos.iter().map(encode_demo).collect();
    demos.sort_unstable();
    let mut parts: Vec<&[u8]> = Vec::with_capacity(demos.len() + 3);
    parts.extend([PREDICTOR_TAG, &signature, &instructions]);
    parts.extend(demos.iter().map(Vec::as_slice));
    Key::of_parts(&parts)
}

/// The key of one LM call: which LM, which predictor state, which input.
pub fn call_key(lm_config: &Key, predictor_state: &Key, input: &Key) -> Key {
    Key::of_parts(&[
        CALL_TAG,
        lm_config.as_bytes(),
        predictor_state.as_bytes(),
        input.as_bytes(),
    ])
}

fn encode_demo(demo: &Demo) -> Vec<u8> {
    let mut out = Vec::new();
    encode_map(&mut out, &demo.inputs);
    encode_map(&mut out, &demo.outputs);
    out
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
