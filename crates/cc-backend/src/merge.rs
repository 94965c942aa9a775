//! The merged unit: kernels of one program that provably cannot affect each other share
//! one translation unit (the prelude parsed once, one compiler process), instead of one
//! unit each.
//!
//! A kernel is merged only when every part of the unit it shares is one whose meaning does
//! not depend on what else the unit holds ([`mergeable`]):
//!
//! - **the prelude** is nothing but `#include <h>` lines of C standard headers
//!   ([`STANDARD_HEADERS`]; no helper, no macro, no object of the caller's that two kernels
//!   would share), and no variable of [`COMPILER_INPUT_ENV`](crate::COMPILER_INPUT_ENV)
//!   that adds include directories is set (so `<math.h>` is the system's);
//! - **the options** are each of a form that changes code generation or warnings only
//!   ([`options_mergeable`]: `-O…`, `-f…` but plugins, `-m…`, `-std=…`, `-W…` but `-Wp,`,
//!   `-w`, `-g…`, `-DNAME[=value]` without `#`, `_Pragma` or `__COUNTER__`, `-UNAME`,
//!   `-pedantic…`); `-include`, `-I` and anything else keep every kernel in its own unit;
//! - **the text** is a single definition `void <symbol>(<parameters>) { <body> }` and
//!   nothing else at file scope ([`text_mergeable`]): no `#`, `%:` or `??` anywhere (no
//!   directive, digraph or trigraph), no `_Pragma`, `__COUNTER__`, `asm` or attribute, no
//!   `$` or byte outside ASCII, no brace in the parameter list, and no identifier naming
//!   another kernel of the program or any generated entry (`…__kcache_entry`).
//!
//! Whatever a body declares (a `static`, a `typedef`, a tag, a block-scope declaration of
//! another name) is then scoped to its own function, and nothing is at file scope but the
//! kernels' prototypes, entries and definitions. The unit puts every prototype and entry
//! first (before the prelude, as a kernel's own unit does), then the prelude, then each
//! text after the `#line 1 "kernel.c"` its own unit has too: `__LINE__`, `__FILE__`, an
//! `assert`'s message and a diagnostic's line number are those of its own unit (the
//! line in the kernel's text).
//! When in doubt, a kernel is compiled alone.

use crate::source::Source;

/// The headers a mergeable prelude may include (C standard headers declaring functions,
/// types and macros, no object a kernel could write).
pub(crate) const STANDARD_HEADERS: &[&str] = &[
    "math.h",
    "stddef.h",
    "stdint.h",
    "stdbool.h",
    "float.h",
    "limits.h",
];

/// The variables of [`COMPILER_INPUT_ENV`](crate::COMPILER_INPUT_ENV) that add include
/// directories ahead of the system's (a `math.h` of the user's could be found there).
pub(crate) const INCLUDE_ENV: &[&str] = &[
    "CPATH",
    "C_INCLUDE_PATH",
    "GCC_EXEC_PREFIX",
    "COMPILER_PATH",
];

/// Whether `prelude` is nothing but blank lines and `#include <h>` of [`STANDARD_HEADERS`].
pub(crate) fn prelude_mergeable(prelude: &str) -> bool {
    prelude.lines().all(|line| {
        let line = line.trim_matches([' ', '\t']);
        if line.is_empty() {
            return true;
        }
        let Some(rest) = line.strip_prefix("#include") else {
            return false;
        };
        let rest = rest.trim_start_matches([' ', '\t']);
        rest.strip_prefix('<')
            .and_then(|r| r.strip_suffix('>'))
            .is_some_and(|h| STANDARD_HEADERS.contains(&h))
    })
}

/// Whether every option is of a form that cannot put anything at file scope (see the
/// module docs).
pub(crate) fn options_mergeable(options: &[String]) -> bool {
    options.iter().all(|o| {
        let o = o.as_str();
        let define_ok = |v: &str| {
            !v.is_empty()
                && !v.contains('#')
                && !v.contains("_Pragma")
                && !v.contains("__COUNTER__")
                && !v.contains("??")
                && !v.contains("%:")
        };
        (o.starts_with("-O") && !o.contains(','))
            || (o.starts_with("-f") && !o.contains("plugin") && !o.contains("preprocessed"))
            || (o.starts_with("-m") && o.len() > 2)
            || o.starts_with("-std=")
            || (o.starts_with("-W")
                && !o.starts_with("-Wp,")
                && !o.starts_with("-Wa,")
                && !o.starts_with("-Wl,"))
            || o == "-w"
            || (o.starts_with("-g") && !o.contains(','))
            || (o.starts_with("-D") && define_ok(&o[2..]))
            || (o.starts_with("-U") && crate::backend::is_c_identifier(&o[2..]))
            || o.starts_with("-pedantic")
    })
}

/// The identifiers of `text` if it is a single definition `void <symbol>(…) { … }` with
/// nothing else at file scope and none of the tokens the module docs exclude; `None`
/// otherwise (also for an unterminated comment, string or brace).
pub(crate) fn text_mergeable(text: &str, symbol: &str) -> Option<Vec<String>> {
    let b = text.as_bytes();
    if !text.is_ascii() || b.contains(&b'#') || b.contains(&b'$') || has_splice(b) {
        return None;
    }
    if text.contains("%:") || text.contains("??") {
        return None;
    }
    // Top-level shape, token by token: `void` symbol `(` … `)` `{` … `}` end.
    #[derive(PartialEq)]
    enum At {
        Void,
        Symbol,
        Open,
        Params,
        Body,
        Done,
    }
    let mut at = At::Void;
    let mut depth = 0usize; // parentheses in Params, braces in Body
    let mut idents = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c.is_ascii_whitespace() {
            i += 1;
            continue;
        }
        if b[i..].starts_with(b"/*") {
            let end = text[i + 2..].find("*/")?;
            i += 2 + end + 2;
            continue;
        }
        if b[i..].starts_with(b"//") {
            i = text[i..].find('\n').map_or(b.len(), |e| i + e);
            continue;
        }
        if c == b'"' || c == b'\'' {
            if at != At::Body {
                return None;
            }
            let mut j = i + 1;
            loop {
                match b.get(j)? {
                    b'\\' => j += 2,
                    b'\n' => return None,
                    &q if q == c => break,
                    _ => j += 1,
                }
            }
            i = j + 1;
            continue;
        }
        if c.is_ascii_alphabetic() || c == b'_' {
            let start = i;
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                i += 1;
            }
            let word = &text[start..i];
            if matches!(
                word,
                "_Pragma"
                    | "__COUNTER__"
                    | "asm"
                    | "__asm"
                    | "__asm__"
                    | "__attribute__"
                    | "__attribute"
                    | "__declspec"
            ) {
                return None;
            }
            match at {
                At::Void if word == "void" => at = At::Symbol,
                At::Symbol if word == symbol => at = At::Open,
                At::Params | At::Body => idents.push(word.to_string()),
                _ => return None,
            }
            continue;
        }
        if c.is_ascii_digit() || c == b'.' {
            // A number (a pp-number may hold letters and signs after e/p).
            if at != At::Body && at != At::Params {
                return None;
            }
            i += 1;
            while i < b.len()
                && (b[i].is_ascii_alphanumeric()
                    || b[i] == b'_'
                    || b[i] == b'.'
                    || ((b[i] == b'+' || b[i] == b'-')
                        && matches!(b[i - 1], b'e' | b'E' | b'p' | b'P')))
            {
                i += 1;
            }
            continue;
        }
        match (&at, c) {
            (At::Open, b'(') => {
                at = At::Params;
                depth = 1;
            }
            (At::Params, b'(') => depth += 1,
            (At::Params, b')') => {
                depth -= 1;
                if depth == 0 {
                    at = At::Body;
                }
            }
            (At::Params, b'{' | b'}' | b';') => return None,
            (At::Params, _) => {}
            (At::Body, b'{') => depth += 1,
            (At::Body, b'}') => {
                depth = depth.checked_sub(1)?;
                if depth == 0 {
                    at = At::Done;
                }
            }
            (At::Body, _) if depth == 0 => return None,
            (At::Body, _) => {}
            _ => return None,
        }
        i += 1;
    }
    (at == At::Done).then_some(idents)
}

/// Whether `b` holds a line splice (a backslash ending a line).
fn has_splice(b: &[u8]) -> bool {
    b.windows(2).any(|w| w == b"\\\n") || b.windows(3).any(|w| w == b"\\\r\n")
}

/// The positions of the kernels of a program (`(symbol, source)` in order, one option
/// list) that are compiled as one merged unit: those passing [`text_mergeable`] with a
/// [`prelude_mergeable`] prelude equal to the others', none naming another kernel of the
/// program. Empty unless at least two qualify, or when the options or `include_env_set`
/// (a variable of [`INCLUDE_ENV`] set) rule merging out.
pub(crate) fn mergeable(
    kernels: &[(&str, &Source)],
    options: &[String],
    include_env_set: bool,
) -> Vec<usize> {
    if include_env_set || !options_mergeable(options) || kernels.len() < 2 {
        return Vec::new();
    }
    let symbols: std::collections::HashSet<&str> = kernels.iter().map(|(s, _)| *s).collect();
    // A definition naming a kernel (`-Dk2=fused_2`) could reach a companion through it.
    let defines_a_kernel = options.iter().any(|o| {
        o.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .any(|w| symbols.contains(w) || w.ends_with(crate::signature::ENTRY_SUFFIX))
    });
    if defines_a_kernel {
        return Vec::new();
    }
    let mut chosen: Vec<usize> = Vec::new();
    let mut prelude: Option<&str> = None;
    for (position, (symbol, source)) in kernels.iter().enumerate() {
        if !prelude_mergeable(&source.prelude) || prelude.is_some_and(|p| p != source.prelude) {
            continue;
        }
        let Some(idents) = text_mergeable(&source.text, symbol) else {
            continue;
        };
        let names_another = idents.iter().any(|w| {
            (w != symbol && symbols.contains(w.as_str()))
                || w.ends_with(crate::signature::ENTRY_SUFFIX)
        });
        if names_another {
            continue;
        }
        prelude.get_or_insert(&source.prelude);
        chosen.push(position);
    }
    if chosen.len() < 2 {
        chosen.clear();
    }
    chosen
}

/// The most kernels one merged unit holds: a program's merged kernels are cut into
/// `ceil(n / MERGED_UNIT_KERNELS)` units of sizes differing by at most one, balanced by
/// the length of their texts ([`merged_groups`]), so a program's merged units can be
/// compiled concurrently and the longest takes about as long as the others. The cut
/// depends on nothing but the kernels (never on the machine's cores): one program's
/// kernels always make the same units.
pub(crate) const MERGED_UNIT_KERNELS: usize = 32;

/// `members` (positions, in kernel order) cut into merged units (see
/// [`MERGED_UNIT_KERNELS`]) by [`kernel_cache::balanced`] over `cost` (a kernel's text
/// length): each unit in kernel order, the units ordered by their first member. Every
/// unit holds at least two kernels when `members` does; empty for empty `members`.
pub(crate) fn merged_groups(members: &[usize], cost: impl Fn(usize) -> u64) -> Vec<Vec<usize>> {
    let units = members.len().div_ceil(MERGED_UNIT_KERNELS);
    if units == 0 {
        return Vec::new();
    }
    kernel_cache::balanced(units, members, |&m| cost(m))
}

/// `f(0)`, …, `f(n - 1)`, in that order, computed on up to as many threads as the machine
/// has cores (each index taken once, in increasing order).
pub(crate) fn concurrently<T: Send>(n: usize, f: impl Fn(usize) -> T + Sync) -> Vec<T> {
    let threads = std::thread::available_parallelism()
        .map_or(1, std::num::NonZeroUsize::get)
        .min(n);
    if threads <= 1 {
        return (0..n).map(f).collect();
    }
    let next = std::sync::atomic::AtomicUsize::new(0);
    let mut done: Vec<(usize, T)> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(|| {
                    let mut mine = Vec::new();
                    loop {
                        let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        if i >= n {
                            break mine;
                        }
                        mine.push((i, f(i)));
                    }
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|w| {
                w.join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
            })
            .collect()
    });
    done.sort_by_key(|(i, _)| *i);
    done.into_iter().map(|(_, t)| t).collect()
}

/// The merged translation unit of `members` (positions in `kernels`): every prototype and
/// entry, the (shared) prelude, then each text after `#line 1 "kernel.c"`, as in its
/// own unit.
pub(crate) fn merged_unit(kernels: &[(&str, &Source)], members: &[usize]) -> String {
    let mut unit = String::new();
    for &m in members {
        let (symbol, source) = kernels[m];
        unit.push_str(&source.signature.prototype(symbol));
        unit.push('\n');
        unit.push_str(&source.signature.entry(symbol));
        unit.push('\n');
    }
    if let Some(&first) = members.first() {
        unit.push_str(&kernels[first].1.prelude);
        unit.push('\n');
    }
    for &m in members {
        unit.push_str(crate::source::TEXT_LINE);
        unit.push('\n');
        unit.push_str(&kernels[m].1.text);
        unit.push('\n');
    }
    unit
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn texts_that_may_merge_and_those_that_may_not() {
        let ok = "void k(float *o, int n) { /* } */ for (int i = 0; i < n; ++i) o[i] = 1.5e+3f; \"}\"; }\n// end\n";
        assert_eq!(
            text_mergeable(ok, "k").map(|v| v.contains(&"o".to_string())),
            Some(true)
        );
        for bad in [
            "#define X 1\nvoid k(void) {}",
            "void k(void) { _Pragma(\"GCC optimize(\\\"O0\\\")\") }",
            "static int c; void k(void) { c++; }",
            "void k(void) { } int x;",
            "void k(void) { } void k2(void) { }",
            "typedef int T; void k(void) { }",
            "void j(void) { }",
            "int k(void) { return 0; }",
            "void k(void) { asm(\"nop\"); }",
            "void k(void) { int a = __COUNTER__; }",
            "void k(struct s { int x; } *p) { }",
            "void k(void) { ",
            "void k(void) { /* ",
            "void k(void) { } }",
            "void k(void) %: ",
            "void k(void) { int a = 1 \\\n; }",
            "__attribute__((noinline)) void k(void) { }",
        ] {
            assert_eq!(text_mergeable(bad, "k"), None, "{bad}");
        }
    }

    #[test]
    fn merged_groups_are_balanced_units_of_at_most_thirty_two() {
        assert!(merged_groups(&[], |_| 1).is_empty());
        // Kernel `m` costs `m % 7` (lengths vary), or 1.
        let units = |n: usize, varied: bool| -> Vec<Vec<usize>> {
            let members: Vec<usize> = (0..n).map(|i| i * 2).collect();
            let cost = |m: usize| if varied { (m % 7) as u64 } else { 1 };
            let groups = merged_groups(&members, cost);
            let mut all = groups.concat();
            all.sort_unstable();
            assert_eq!(all, members, "{n}: every member once");
            for g in &groups {
                assert!(g.windows(2).all(|w| w[0] < w[1]), "{n}: in kernel order");
            }
            let loads: Vec<u64> = groups
                .iter()
                .map(|g| g.iter().map(|&m| cost(m)).sum())
                .collect();
            let spread = loads.iter().max().expect("a unit") - loads.iter().min().expect("a unit");
            assert!(spread <= 6, "{n}: loads {loads:?}");
            groups
        };
        let sizes = |n: usize| -> Vec<usize> {
            let mut s: Vec<usize> = units(n, true).iter().map(Vec::len).collect();
            s.sort_unstable();
            s
        };
        assert_eq!(sizes(2), [2]);
        assert_eq!(sizes(32), [32]);
        assert_eq!(sizes(33), [16, 17]);
        assert_eq!(sizes(65), [21, 22, 22]);
        assert_eq!(sizes(64), [32, 32]);
        for n in 2..200 {
            assert!(
                sizes(n)
                    .iter()
                    .all(|&s| (2..=MERGED_UNIT_KERNELS).contains(&s))
            );
            // Equal lengths: contiguous runs.
            let members: Vec<usize> = (0..n).map(|i| i * 2).collect();
            assert_eq!(units(n, false).concat(), members);
        }
    }

    #[test]
    fn concurrently_answers_in_order() {
        let got = concurrently(50, |i| {
            std::thread::sleep(std::time::Duration::from_micros((50 - i as u64) * 20));
            i * i
        });
        assert_eq!(got, (0..50).map(|i| i * i).collect::<Vec<_>>());
        assert!(concurrently(0, |i| i).is_empty());
    }

    #[test]
    fn preludes_and_options() {
        assert!(prelude_mergeable(crate::DEFAULT_PRELUDE));
        assert!(prelude_mergeable(
            "#include <stdint.h>\n\n#include  <math.h>\n"
        ));
        assert!(!prelude_mergeable("#include \"math.h\"\n"));
        assert!(!prelude_mergeable("#include <stdio.h>\n"));
        assert!(!prelude_mergeable("#include <math.h>\nstatic int calls;\n"));
        assert!(!prelude_mergeable("#define N 4\n"));
        let o =
            |v: &[&str]| options_mergeable(&v.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        assert!(o(&[
            "-O3",
            "-march=native",
            "-ffast-math",
            "-DN=4",
            "-Wall",
            "-std=c11"
        ]));
        for bad in [
            "-include",
            "x.h",
            "-I.",
            "-Wp,-DX",
            "-fplugin=x.so",
            "-DX=__COUNTER__",
            "-D",
            "-isystem",
            "-B.",
        ] {
            assert!(!o(&["-O2", bad]), "{bad}");
        }
    }
}
