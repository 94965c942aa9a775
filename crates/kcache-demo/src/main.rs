//! `kcache-demo`: runs the kcache end-to-end autotuning demo (see the `kcache_demo`
//! library) and prints its report. Run it twice: the second run replays the winners.

#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, ValueEnum};
use kcache_demo::{DemoOptions, KeyMode, MAX_REPS, default_cache_dir, run};

/// An autotuning search over real C kernels, cached by kcache.
#[derive(Debug, Parser)]
#[command(name = "kcache-demo", version, about)]
struct Args {
    /// Where winners are stored, a directory of its own: a directory without a regime
    /// stamp that holds files named like entries (`*.ron`, `*.keys`), or with a malformed
    /// stamp, is refused, left untouched [default: $KCACHE_DIR, else target/kcache-demo in
    /// the workspace].
    #[arg(long, value_name = "DIR")]
    cache_dir: Option<PathBuf>,
    /// Remove the stored winners first (and the kernel store's programs), so this run
    /// searches from scratch; with --redis the directory only: the server's winners are
    /// still found.
    #[arg(long)]
    fresh: bool,
    /// No progress lines on stderr; only the report.
    #[arg(long, short)]
    quiet: bool,
    /// Tune only these kernels (comma-separated: matmul, chain, rowdot, softmax).
    #[arg(long, value_delimiter = ',', value_name = "NAMES")]
    kernels: Option<Vec<String>>,
    /// Round-1 candidates per kernel (at least 1: the first is the unscheduled code).
    #[arg(long, default_value_t = 12, value_name = "N",
          value_parser = clap::value_parser!(u64).range(1..))]
    round1: u64,
    /// Round-2 candidates per kernel (neighbours of round 1's best).
    #[arg(long, default_value_t = 12, value_name = "N")]
    round2: usize,
    /// Timed samples per measurement, at least (up to 25 while their spread is above 3%;
    /// at most N when N is below 5), each running the candidate for at least 0.2 ms (1 to
    /// 1000).
    #[arg(long, default_value_t = 7, value_name = "N",
          value_parser = clap::value_parser!(u16).range(1..=MAX_REPS as i64))]
    reps: u16,
    /// Share winners through this Redis server (e.g. redis://127.0.0.1:6379/0): look up the
    /// cache directory first, then the server (copying hits into the directory); store in both.
    #[arg(long, value_name = "URL")]
    redis: Option<String>,
    /// How kernels are keyed: `canonical` (kcache's keys: renamed twins share a compile)
    /// or `verbatim` (SHA-256 of the exact text and options, as Triton's and ccache's
    /// keys amount to), for comparison.
    #[arg(long, value_name = "MODE", value_enum, default_value_t = Keys::Canonical)]
    keys: Keys,
    /// Run every measurement, without the memo table (for comparison).
    #[arg(long)]
    no_memo: bool,
    /// Keep compiled programs only in memory: no persistent kernel store at
    /// DIR/kernels (for comparison).
    #[arg(long)]
    no_kernel_store: bool,
    /// The matrix product's size n (n x n x n, 4 to 256; default 64): another size is other
    /// code, searched from the seeds of the sizes tuned before. Only matmul has a size: with
    /// --kernels leaving matmul out, another size is refused.
    #[arg(long, value_name = "N")]
    size: Option<usize>,
    /// A compiler option added to the demo's own (repeatable, e.g. --cflag=-O3): it enters
    /// the codegen key component, so earlier winners become seeds rather than hits.
    #[arg(long = "cflag", value_name = "OPTION", allow_hyphen_values = true)]
    cflags: Vec<String>,
    /// The C compiler command (default: $CC, else cc).
    #[arg(long, value_name = "COMMAND")]
    cc: Option<String>,
    /// Search from scratch after a miss, without the seeds the cache offers.
    #[arg(long)]
    no_seeds: bool,
    /// Also run an unseeded search of each seeded kernel (same budget, not stored) and
    /// compare the winners side by side (not with --no-seeds, which leaves no seeded search).
    #[arg(long, conflicts_with = "no_seeds")]
    compare_cold: bool,
}

/// `--keys` values (the library's [`KeyMode`]).
#[derive(Clone, Copy, Debug, ValueEnum)]
enum Keys {
    Canonical,
    Verbatim,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let mut options = DemoOptions::new(args.cache_dir.unwrap_or_else(default_cache_dir));
    options.fresh = args.fresh;
    options.progress = !args.quiet;
    options.kernels = args.kernels;
    // A count past the kernel's legal candidates is taken as all of them.
    options.round1 = usize::try_from(args.round1).unwrap_or(usize::MAX);
    options.round2 = args.round2;
    options.reps = usize::from(args.reps);
    options.redis = args.redis;
    options.keys = match args.keys {
        Keys::Canonical => KeyMode::Canonical,
        Keys::Verbatim => KeyMode::Verbatim,
    };
    options.memo = !args.no_memo;
    options.kernel_store = !args.no_kernel_store;
    options.size = args.size;
    options.extra_options = args.cflags;
    if args.cc.is_some() {
        options.compiler = args.cc;
    }
    options.seeds = !args.no_seeds;
    options.compare_cold = args.compare_cold;
    match run(&options) {
        Ok(report) => {
            print!("{report}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprint!("{}", error_report(&e));
            ExitCode::FAILURE
        }
    }
}

/// The error and its chain of causes, one `caused by` line each, leaving out a cause that
/// the message printed before it already quotes (whose first line it contains): a compile
/// failure quotes the compiler's first diagnostics, and its source, the backend's error,
/// would show them again. The causes below a left-out one are still shown.
fn error_report(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = format!("kcache-demo: error: {e}\n");
    let mut shown = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        let first = text.lines().next().unwrap_or("");
        if first.is_empty() || !shown.contains(first) {
            out.push_str(&format!("  caused by: {text}\n"));
            shown = text;
        }
        source = s.source();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::error_report;

    /// An error with a message and an optional source.
    #[derive(Debug)]
    struct E(String, Option<Box<E>>);

    impl std::fmt::Display for E {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(&self.0)
        }
    }

    impl std::error::Error for E {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            self.1.as_deref().map(|e| e as _)
        }
    }

    fn chain(messages: &[&str]) -> E {
        messages
            .iter()
            .rev()
            .fold(None, |below, m| {
                Some(E((*m).to_string(), below.map(Box::new)))
            })
            .expect("one message at least")
    }

    #[test]
    fn a_cause_the_previous_message_quotes_is_shown_once() {
        let e = chain(&[
            "resolving x failed",
            "compile failed: the C compiler failed:\n  a.c:1: error: boom",
            "the C compiler failed:\na.c:1: error: boom",
        ]);
        assert_eq!(
            error_report(&e),
            "kcache-demo: error: resolving x failed\n  caused by: compile failed: the C compiler failed:\n  a.c:1: error: boom\n"
        );
        // A cause below the quoted one is still shown.
        let e = chain(&[
            "resolving x failed",
            "compile failed: could not run `cc`",
            "could not run `cc`",
            "No such file or directory",
        ]);
        assert_eq!(
            error_report(&e),
            "kcache-demo: error: resolving x failed\n  caused by: compile failed: could not run `cc`\n  caused by: No such file or directory\n"
        );
    }
}
