//! `kcache-demo`: runs the kcache end-to-end autotuning demo (see the `kcache_demo`
//! library) and prints its report. Run it twice: the second run replays the winners.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, ValueEnum};
use kcache_demo::{DemoOptions, KeyMode, default_cache_dir, run};

/// An autotuning search over real C kernels, cached by kcache.
#[derive(Debug, Parser)]
#[command(name = "kcache-demo", version, about)]
struct Args {
    /// Where winners are stored [default: $KCACHE_DIR, else target/kcache-demo in the
    /// workspace].
    #[arg(long, value_name = "DIR")]
    cache_dir: Option<PathBuf>,
    /// Remove the stored winners first, so this run searches from scratch.
    #[arg(long)]
    fresh: bool,
    /// No progress lines on stderr; only the report.
    #[arg(long, short)]
    quiet: bool,
    /// Tune only these kernels (comma-separated: matmul, chain, rowdot, softmax).
    #[arg(long, value_delimiter = ',', value_name = "NAMES")]
    kernels: Option<Vec<String>>,
    /// Round-1 candidates per kernel.
    #[arg(long, default_value_t = 12, value_name = "N")]
    round1: usize,
    /// Round-2 candidates per kernel (neighbours of round 1's best).
    #[arg(long, default_value_t = 12, value_name = "N")]
    round2: usize,
    /// Timed runs per measurement.
    #[arg(long, default_value_t = 7, value_name = "N")]
    reps: usize,
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
    options.round1 = args.round1;
    options.round2 = args.round2;
    options.reps = args.reps;
    options.redis = args.redis;
    options.keys = match args.keys {
        Keys::Canonical => KeyMode::Canonical,
        Keys::Verbatim => KeyMode::Verbatim,
    };
    options.memo = !args.no_memo;
    options.kernel_store = !args.no_kernel_store;
    match run(&options) {
        Ok(report) => {
            print!("{report}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("kcache-demo: error: {e}");
            let mut source = std::error::Error::source(&e);
            while let Some(s) = source {
                eprintln!("  caused by: {s}");
                source = s.source();
            }
            ExitCode::FAILURE
        }
    }
}
