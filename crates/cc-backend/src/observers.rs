//! What a kernel's prelude makes of names, learned from the compiler itself (issue 26,
//! class 1): a list of observing macros written by hand is never as large as the real
//! headers.
//!
//! For each backend identity, prelude and option list, the compiler is asked once (run
//! in `/`, as the backend's other probes are, with the prelude on its standard input):
//!
//! * `cc <base flags> <options> -dM -E -x c -` gives the macro table. A macro *observes*
//!   spellings when its replacement list holds `#` (stringifies a parameter, or pastes
//!   with `##`), a position or file macro or built-in (`__LINE__`, `__FILE__`,
//!   `__COUNTER__`, `__func__`, `__builtin_COLUMN`, ...), a feature test (`__has_builtin`
//!   and every `__has_*`/`__is_*`: its answer is its argument's spelling), or,
//!   transitively, another observing macro's name. Option macros (`-DHB(x)=...`) are in
//!   the table too. Each one the keyed text names is handed to canonical-text
//!   as an observer ([`Names::observers`]): the kernel is keyed over its exact text.
//! * `cc <base flags> <options> -E -P -x c -` gives the declarations. Every identifier
//!   in it (typedefs, tags, functions, their parameters: a superset of what the prelude
//!   declares), every macro name and every C keyword is a name no kernel may rename: each
//!   one the keyed text names is added to [`Names::free`], so it is never renamed, and a
//!   bound name equal to one refuses renaming of all bound names.
//!
//! A kernel text that includes a header itself (`#include`, `#include_next`, `#import`)
//! is learned the same way over the prelude followed by the text's directive lines, so its
//! headers' macros are known as the prelude's are; canonical-text is then told so
//! ([`Names::included_macros_known`]), and its own include rule (for callers without a
//! macro table) stays off.
//!
//! When the compiler cannot preprocess the prelude (a header it cannot find), nothing is
//! renamed and the kernel's symbol is an observer (its whole name is kept): the compile
//! fails anyway, and a key then covers the exact text. An identity no [`CcBackend`] of
//! this process made (a test's made-up string) is keyed with the caller's names as given.
//!
//! [`CcBackend`]: crate::CcBackend

use std::borrow::Cow;
use std::collections::{BTreeSet, HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use kernel_cache::Names;

use crate::toolchain::Toolchain;
use crate::words::{C_KEYWORDS, PreludeFacts, for_each_word, macro_definitions, words};
use crate::workdir::WorkDir;

/// Predefined macros and built-ins whose value depends on where they are spelled or on
/// the spelling of names around them: a macro expanding to one observes a position.
const POSITION: &[&str] = &[
    "__LINE__",
    "__FILE__",
    "__FILE_NAME__",
    "__BASE_FILE__",
    "__COUNTER__",
    "__INCLUDE_LEVEL__",
    "__TIMESTAMP__",
    "__func__",
    "__FUNCTION__",
    "__PRETTY_FUNCTION__",
    "__FUNCDNAME__",
    "__FUNCSIG__",
    "__builtin_LINE",
    "__builtin_FILE",
    "__builtin_FUNCTION",
    "__builtin_COLUMN",
    "__builtin_dump_struct",
    "__builtin_source_location",
];

/// What the compiler makes of one prelude under one option list.
#[derive(Debug, Default)]
pub(crate) struct PreludeNames {
    /// Macros whose expansion observes spellings or positions (see the module docs).
    pub(crate) observers: HashSet<String>,
    /// Names the prelude (or the compiler) declares or defines, and the C keywords.
    pub(crate) declared: HashSet<String>,
    /// Each name of `observers` and `declared`, with which of the two hold it
    /// ([`OBSERVER`], [`DECLARED`]), under a fast hash: a kernel's every word is looked up
    /// once. Built from the two sets at the first lookup (they are complete by then: a
    /// `PreludeNames` is shared, behind an `Arc`, only once learned).
    index: OnceLock<HashMap<Box<[u8]>, u8, BuildHasherDefault<WordHash>>>,
    /// What decides which texts may share a merged unit (see [`crate::merge`]).
    pub(crate) merge: PreludeFacts,
}

/// [`PreludeNames::index`]: the name is an observer.
const OBSERVER: u8 = 1;
/// [`PreludeNames::index`]: the name is declared.
const DECLARED: u8 = 2;

impl PreludeNames {
    /// Which of `observers` ([`OBSERVER`]) and `declared` ([`DECLARED`]) hold `word`.
    fn kinds(&self, word: &[u8]) -> u8 {
        let index = self.index.get_or_init(|| {
            let mut index: HashMap<Box<[u8]>, u8, BuildHasherDefault<WordHash>> =
                HashMap::default();
            for n in &self.observers {
                *index.entry(n.as_bytes().into()).or_default() |= OBSERVER;
            }
            for n in &self.declared {
                *index.entry(n.as_bytes().into()).or_default() |= DECLARED;
            }
            index
        });
        index.get(word).copied().unwrap_or(0)
    }
}

/// A fast hash for short names, eight bytes per multiply. The index it serves is built
/// from what the compiler printed and only looked up with a kernel's words (never grown by
/// them), so a text cannot make its lookups slow by choosing colliding names beyond what
/// the index already holds.
#[derive(Default)]
struct WordHash(u64);

impl Hasher for WordHash {
    fn finish(&self) -> u64 {
        self.0 ^ (self.0 >> 29)
    }

    fn write(&mut self, bytes: &[u8]) {
        const K: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut h = self.0;
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            let mut a = [0u8; 8];
            a.copy_from_slice(c);
            h = (h ^ u64::from_le_bytes(a)).wrapping_mul(K).rotate_left(31);
        }
        let rest = chunks.remainder();
        let mut a = [0u8; 8];
        a[..rest.len()].copy_from_slice(rest);
        h = (h ^ u64::from_le_bytes(a) ^ ((rest.len() as u64) << 59))
            .wrapping_mul(K)
            .rotate_left(31);
        self.0 = h;
    }
}

/// How to run a backend's compiler ([`Toolchain`]), and what it said of each (prelude,
/// options) so far.
#[derive(Debug)]
struct Probe {
    toolchain: Toolchain,
    /// The work directory of the backend that registered the identity last: checked (as
    /// [`WorkDir::check`] does) before each probe, whose compiler gets it (or the private
    /// directory the check makes in it) as `TMPDIR`, `TMP` and `TEMP`.
    work_dir: Mutex<PathBuf>,
    /// Per prelude, then per option list (two levels, so a lookup borrows both instead
    /// of copying the prelude).
    memo: Mutex<HashMap<String, HashMap<Vec<String>, Learned>>>,
}

/// What the compiler said of one prelude (`None`: it could not preprocess it).
pub(crate) type Learned = Option<Arc<PreludeNames>>;

type Registry = Mutex<HashMap<String, Arc<Probe>>>;

fn registry() -> &'static Registry {
    static REGISTRY: OnceLock<Registry> = OnceLock::new();
    REGISTRY.get_or_init(Registry::default)
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Records how to run the compiler of the backend whose identity is `identity` (the
/// identity names the command and the environment, so one identity is one compiler).
///
/// `work_dir` is where the probes' compiler may write temporaries (see
/// [`Probe::work_dir`]); a later registration of the same identity only replaces it.
pub(crate) fn register(identity: &str, toolchain: &Toolchain, work_dir: &Path) {
    let mut registry = lock(registry());
    match registry.get(identity) {
        Some(probe) => *lock(&probe.work_dir) = work_dir.to_path_buf(),
        None => {
            registry.insert(
                identity.to_owned(),
                Arc::new(Probe {
                    toolchain: toolchain.clone(),
                    work_dir: Mutex::new(work_dir.to_path_buf()),
                    memo: Mutex::default(),
                }),
            );
        }
    }
}

/// The names to key a kernel with: `names`, plus (for an identity a backend of this
/// process registered) the prelude's observing macros and declared names that `text`
/// (the keyed text: prelude and kernel) spells as words. When the compiler cannot
/// preprocess the prelude: no name renamed, and `symbol` an observer (its whole name
/// kept).
pub(crate) fn keyed_names<'n>(
    identity: &str,
    prelude: &str,
    options: &[String],
    text: &str,
    symbol: &str,
    names: &'n Names,
) -> Cow<'n, Names> {
    // The prelude and the text's own include lines: the headers the text includes itself
    // are learned like the prelude's.
    let learned_over = learning_prelude(prelude, text);
    let Some(learned) = learned(identity, &learned_over, options) else {
        return Cow::Borrowed(names);
    };
    let Some(learned) = learned else {
        return Cow::Owned(
            Names::new()
                .with_minted_shapes(false)
                .with_observers([symbol]),
        );
    };
    let (free, observers) = spelled(&learned, text);
    if names.included_macros_known
        && free.iter().all(|f| names.free.contains(f))
        && observers.iter().all(|o| names.observers.contains(o))
    {
        return Cow::Borrowed(names);
    }
    let mut out = names.clone();
    out.free.extend(free);
    out.observers.extend(observers);
    // Every header the keyed text includes (the prelude's and the text's own) was
    // learned: canonical-text's include rule, for callers without a macro table, is off.
    out.included_macros_known = true;
    Cow::Owned(out)
}

/// What the compiler is asked about for a keyed `text` (prelude, a newline, the kernel's
/// text): the prelude, and when the kernel's text has a directive that may include a
/// header itself (`#include`, `#include_next`, `#import`, or a directive with a comment
/// before its name), then every directive line of the kernel's text, in order (its
/// conditionals and definitions decide what its includes read). A header the text
/// includes is so learned like the prelude's: its observing macros and declared names.
/// A directive line read out of a comment only adds to what is learned (or makes the
/// compiler fail: then nothing is renamed).
fn learning_prelude<'p>(prelude: &'p str, text: &str) -> Cow<'p, str> {
    let own = text
        .strip_prefix(prelude)
        .and_then(|t| t.strip_prefix('\n'))
        .unwrap_or(text);
    fn directive(line: &str) -> Option<&str> {
        let l = line.trim_start_matches([' ', '\t', '\x0b', '\x0c']);
        l.strip_prefix('#').or_else(|| l.strip_prefix("%:"))
    }
    let includes = own.lines().filter_map(directive).any(|d| {
        let d = d.trim_start_matches([' ', '\t', '\x0b', '\x0c']);
        d.starts_with("include") || d.starts_with("import") || d.starts_with('/')
    });
    if !includes {
        return Cow::Borrowed(prelude);
    }
    let mut out = format!("{prelude}\n");
    for line in own.lines().filter(|l| directive(l).is_some()) {
        out.push_str(line);
        out.push('\n');
    }
    Cow::Owned(out)
}

/// What the compiler of the backend whose identity is `identity` makes of `prelude` under
/// `options`, asked once and kept: `None` for an identity no backend of this process
/// registered, `Some(None)` when the compiler could not preprocess the prelude.
pub(crate) fn learned(identity: &str, prelude: &str, options: &[String]) -> Option<Learned> {
    let probe = lock(registry()).get(identity).cloned()?;
    let known = lock(&probe.memo)
        .get(prelude)
        .and_then(|by_options| by_options.get(options))
        .cloned();
    Some(match known {
        Some(l) => l,
        None => {
            let l = probe.learn(prelude, options).map(Arc::new);
            lock(&probe.memo)
                .entry(prelude.to_owned())
                .or_default()
                .insert(options.to_vec(), l.clone());
            l
        }
    })
}

/// The declared names and the observers of `learned` that `text` spells as words (see
/// [`words`]): each word is read where it stands and looked up once in the index.
fn spelled(learned: &PreludeNames, text: &str) -> (BTreeSet<String>, BTreeSet<String>) {
    let (mut free, mut observers) = (BTreeSet::new(), BTreeSet::new());
    for_each_word(text.as_bytes(), |w| {
        let kinds = learned.kinds(w);
        if kinds == 0 {
            return;
        }
        // A word is ASCII: always UTF-8.
        let w = String::from_utf8_lossy(w);
        if kinds & OBSERVER != 0 && !observers.contains(w.as_ref()) {
            observers.insert(w.clone().into_owned());
        }
        if kinds & DECLARED != 0 && !free.contains(w.as_ref()) {
            free.insert(w.into_owned());
        }
    });
    (free, observers)
}

impl Probe {
    fn learn(&self, prelude: &str, options: &[String]) -> Option<PreludeNames> {
        // The compiler's temporaries go where no other user can reach them; a work
        // directory that fails the check teaches nothing (nothing is renamed, nothing
        // merged).
        let work_dir = lock(&self.work_dir).clone();
        let work = WorkDir::check(&work_dir).ok()?;
        let tmp = work.path();
        let run = |args: &[&str]| self.toolchain.preprocess(options, args, prelude, tmp);
        // Two independent runs of the preprocessor, concurrently: they are on the path of
        // a fresh process's first key.
        let (table, declarations) = std::thread::scope(|scope| {
            let table = scope.spawn(|| run(&["-dM", "-E"]));
            let declarations = run(&["-E", "-P"]);
            let table = table
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
            (table, declarations)
        });
        let (table, declarations) = (table?, declarations?);
        let table = String::from_utf8_lossy(&table);
        let mut learned = analyse_macros(&table);
        learned.merge = PreludeFacts::learn(&table, &declarations);
        learned.declared.extend(
            words(&declarations)
                .into_iter()
                .chain(C_KEYWORDS.iter().copied())
                .map(str::to_owned),
        );
        Some(learned)
    }
}

/// Whether a macro whose replacement list is `body` (its identifiers `idents`) observes
/// spellings or positions by itself: it holds `#` (stringifies or pastes), a position or
/// file macro or built-in ([`POSITION`]), or a feature test (`__has_builtin` and every
/// `__has_*`/`__is_*` kin, whose answer is its argument's spelling: issue 35).
fn replacement_observes(body: &str, idents: &[&str]) -> bool {
    body.contains('#')
        || idents
            .iter()
            .any(|w| POSITION.contains(w) || w.starts_with("__has_") || w.starts_with("__is_"))
}

/// The observing macros of a `-dM` macro table (see the module docs) and every macro's
/// name as declared.
pub(crate) fn analyse_macros(table: &str) -> PreludeNames {
    // name -> (observes by itself, identifiers of its replacement list)
    let macros: HashMap<&str, (bool, Vec<&str>)> = macro_definitions(table)
        .map(|(name, _, body)| {
            let idents: Vec<&str> = words(body.as_bytes()).into_iter().collect();
            (name, (replacement_observes(body, &idents), idents))
        })
        .collect();
    let mut observers: HashSet<String> = macros
        .iter()
        .filter(|(_, (direct, _))| *direct)
        .map(|(n, _)| (*n).to_owned())
        .collect();
    // Transitively: a macro whose replacement names an observer observes too.
    loop {
        let more: Vec<String> = macros
            .iter()
            .filter(|(n, (_, idents))| {
                !observers.contains(**n) && idents.iter().any(|w| observers.contains(*w))
            })
            .map(|(n, _)| (*n).to_owned())
            .collect();
        if more.is_empty() {
            break;
        }
        observers.extend(more);
    }
    PreludeNames {
        observers,
        declared: macros.keys().map(|n| (*n).to_owned()).collect(),
        index: OnceLock::new(),
        merge: PreludeFacts::default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn observing_macros_are_found_transitively() {
        let table = "#define S(x) #x\n#define STR(x) S(x)\n#define CAT(a,b) a ## b\n\
                     #define C64(c) c ## L\n#define HERE() __LINE__\n#define F __func__\n\
                     #define G(x) (F + x)\n#define ALIAS STR\n#define PLAIN(x) ((x) + 1)\n\
                     #define ONE 1\n#define __cplusplus_not 2\n";
        let learned = analyse_macros(table);
        let mut observers: Vec<&str> = learned.observers.iter().map(String::as_str).collect();
        observers.sort_unstable();
        assert_eq!(
            observers,
            ["ALIAS", "C64", "CAT", "F", "G", "HERE", "S", "STR"]
        );
        for name in ["PLAIN", "ONE", "S", "__cplusplus_not"] {
            assert!(learned.declared.contains(name), "{name}");
        }
    }

    /// Issue 35: a replacement list naming a feature test observes (its answer is its
    /// argument's spelling), and so does a macro naming such a macro; a text's own
    /// directive lines are learned only when it includes a header.
    #[test]
    fn feature_tests_observe_and_own_includes_are_learned() {
        let table = "#define HB(x) __has_builtin(x)\n#define WRAP(x) HB(x)\n\
                     #define ID(x) __is_identifier(x)\n#define PLAIN(x) ((x) + 1)\n";
        let learned = analyse_macros(table);
        let mut observers: Vec<&str> = learned.observers.iter().map(String::as_str).collect();
        observers.sort_unstable();
        assert_eq!(observers, ["HB", "ID", "WRAP"]);
        let prelude = "#include <math.h>\n";
        let plain = format!("{prelude}\n#define N 4\nvoid k(void) {{}}\n");
        assert_eq!(learning_prelude(prelude, &plain), prelude);
        let own = format!("{prelude}\n#define N 4\n  #  include <stdint.h>\nvoid k(void) {{}}\n");
        assert_eq!(
            learning_prelude(prelude, &own),
            format!("{prelude}\n#define N 4\n  #  include <stdint.h>\n")
        );
    }

    /// The reference: every distinct word ([`words`]) looked up in both sets.
    fn spelled_naive(learned: &PreludeNames, text: &str) -> (BTreeSet<String>, BTreeSet<String>) {
        let (mut free, mut observers) = (BTreeSet::new(), BTreeSet::new());
        for w in words(text.as_bytes()) {
            if learned.observers.contains(w) {
                observers.insert(w.to_owned());
            }
            if learned.declared.contains(w) {
                free.insert(w.to_owned());
            }
        }
        (free, observers)
    }

    proptest::proptest! {
        #[test]
        fn spelled_words_are_the_naive_ones(
            text in proptest::collection::vec(proptest::prelude::any::<char>(), 0..200),
            picks in proptest::collection::vec(0usize..12, 0..40),
        ) {
            // Words from a small vocabulary (so many are in the sets), glued with any
            // characters: every byte class, multi-byte characters included.
            let vocab = ["expf", "x", "S", "a1", "_Z", "float", "n_3", "STR", "é", "1e", "tanhf", "F"];
            let mut t = String::new();
            for (k, c) in text.iter().enumerate() {
                t.push(*c);
                if let Some(&p) = picks.get(k) {
                    t.push_str(vocab[p]);
                }
            }
            let mut learned = analyse_macros("#define S(x) #x\n#define F(x) S(x)\n#define x 1\n");
            learned.declared.extend(["expf", "float", "a1", "_Z", "tanhf"].map(String::from));
            proptest::prop_assert_eq!(spelled(&learned, &t), spelled_naive(&learned, &t));
        }
    }

    #[test]
    fn words_skip_numbers() {
        let mut w: Vec<&str> = words(b"int a1 = 12u + b_2; /* c */").into_iter().collect();
        w.sort_unstable();
        assert_eq!(w, ["a1", "b_2", "c", "int"]);
    }
}
