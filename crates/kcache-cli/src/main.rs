//! The `kcache` tool: inspect, verify and garbage-collect schedule-cache directories, and print
//! the canonical text and key of a C kernel.
//!
//! ```text
//! kcache stats DIR                      entries, bytes, regime, stale staging, unreadable entries
//!                                       (and the kernel store at DIR/kernels: entries, bytes, hits and misses (kernels), saves and evictions (programs))
//! kcache verify DIR                     every entry parses, is current, and its digest heads its key
//!                                       (and the kernel store at DIR/kernels: every program hashes
//!                                       to its name, every entry's program holds its kernel)
//! kcache gc DIR [--older-than D]        remove stale staging (and schedule entries published D
//!                                       ago or more: by publish time, the schedule store keeps
//!                                       no last-use mark; and kernel-store programs unused for
//!                                       D or more: by last use)
//!        [--max-size S]                 trim the kernel store at DIR/kernels to S bytes (least
//!                                       recently used programs first)
//!        [--failures [AGE]]             forget the kernel store's remembered failures (all, or AGE old)
//! kcache failures DIR                   the kernel store's remembered failures, oldest first
//! kcache canon FILE.c [--name K [--minted SEP]] [--bound a,b] [--free c] [--keep d] [--part P]... [--key-only]
//! kcache show DIR KEY [--space S] [--key-only] [--all]
//!                                       one entry (KEY: a key or an unambiguous prefix, such as
//!                                       the code digest): where it is, whether it verifies, its text;
//!                                       --all: every entry the prefix matches
//! kcache key FILE.c --symbol K [--minted SEP] [--option OPT]... [--bound a,b] [--free c] [--keep d]
//!        [--identity ID | --identity-file F]   the kernel-cache key (kernel_cache::kernel_key)
//! ```
//!
//! `--key-only` prints only the key, on one line (`canon`: the kernel's key; `show`: the
//! matched entry's full key).
//!
//! DIR is a kcache directory as `cache_dir::Layout` lays it out: the schedule store at DIR, the
//! kernel store at DIR/kernels.
//!
//! Exit status (also in `kcache --help`):
//!
//! - 0 success;
//! - 1 a finding: `verify` found a problem; `stats` or `verify` found a store every open of
//!   this build refuses (another store's stamp, a newer or malformed one, a user's directory);
//!   `show` found no entry;
//! - 2 usage or I/O error (an ambiguous `show` prefix included);
//! - 3 nothing there: `stats` found no store (no stamp, no entry, no kernel store); `verify`
//!   checked no entry in either store ("verified 0 entries" proves nothing: a mistyped path
//!   reads as an empty directory).
//!
//! Log events of the cache (refusals, sweeps) go to stderr, filtered by `KCACHE_LOG` (default
//! `warn`).

#![forbid(unsafe_code)]

mod duration;
mod kernels;
mod key;
mod report;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};

/// What `kcache key --help` says: how to reproduce cc-backend's key, with an example that
/// `tests/documented.rs` runs and compares with `Source::key`.
const KEY_HELP: &str = "\
Print the kernel-cache key of a C kernel: the same bytes as `kernel_cache::kernel_key`
over the file's text, the symbol, the names, the option list and the backend identity.

To reproduce the key cc-backend gives a `Source` (`Source::key`): FILE holds the
source's prelude, a newline, then its text (`Source::keyed_text`); the identity is the
backend identity the source was keyed with, a newline, `signature ` and the signature's
keyed form (`Signature::keyed_form`: each parameter's access, element type and extent,
parameter names left out; an extent's scalar named by its position, `#1`), not the
builder calls that made it. For example, for the source `Source::new(TEXT,
Signature::new().buffer_mut(\"y\", Elem::F32, Extent::fixed(256)).buffer(\"x\", Elem::F32,
Extent::of(\"n\")).scalar(\"n\", Elem::I32))` keyed as kernel `k` with names bound `y` and
`x`, options `-O2` and backend identity `cc-1`:

    printf '%s\\n%s' \"$PRELUDE\" \"$TEXT\" > k.c
    printf 'cc-1\\nsignature (mut [f32; >= 256], const [f32; >= 1*#2], i32)' > id
    kcache key k.c --symbol k --bound y,x --option -O2 --identity-file id

cc-backend keys more where its compiler says so, which this command does not ask: a
name the prelude declares is never renamed, and a text naming a prelude macro that
observes spellings is keyed over its exact text (for such a kernel the keys differ).
Having learned the macros of the headers the text includes, cc-backend also keys the
kernel's own name by its role in a text that includes headers; this command keys it as
spelled there, and says so.

On standard error, a note says whether the kernel's own name was keyed by its role, and
one line per reason the key is tied to spellings: a refusal (the exact text is keyed),
the own name kept as spelled and why, a declared name kept and why, a pinned name.";

/// What `kcache --help` prints after the commands: the exit statuses and the layout.
const AFTER_HELP: &str = "\
A kcache directory DIR holds the schedule store at DIR and the kernel store at DIR/kernels
(`cache_dir::Layout`, re-exported by schedule-cache and kernel-cache: open your stores there).

Exit status:
  0  success
  1  a finding: `verify` found a problem; `stats` or `verify` found a store every open of
     this build refuses (another store's stamp, a newer or malformed one, a user's
     directory); `show` found no entry
  2  usage or I/O error (an ambiguous `show` prefix included)
  3  nothing there: `stats` found no store (no stamp, no entry, no kernel store); `verify`
     checked no entry in either store";

/// Inspect and maintain kcache directories.
#[derive(Parser, Debug)]
#[command(name = "kcache", version, about, after_help = AFTER_HELP)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Count entries, bytes, stale staging and unreadable entries; show the regime stamp. One
    /// streamed pass reading each entry's version header only (`verify` parses entries whole).
    /// Removes nothing but the crash-stale staging of the kernel store at DIR/kernels (as any
    /// open of it does); a kernel store of another regime is not opened. Exit status 1 if
    /// every open of this build refuses either store, 3 if DIR holds neither.
    Stats {
        /// The cache directory.
        dir: PathBuf,
        /// Staging older than this counts as stale (e.g. 30s, 15m, 1h, 7d).
        #[arg(long, default_value = "1h", value_parser = duration::parse)]
        stale_after: Duration,
    },
    /// Check every entry: it parses as its space's entry type at this build's version, and the
    /// digest it records is the first `-`-separated component of its key. Then the kernel store
    /// at DIR/kernels, read-only: every program blob hashes to its name and parses, every entry
    /// names a blob that holds its symbol and lists its kernel (a store of another regime is
    /// not opened; a stamp every open refuses is a problem). Exit status 1 if a problem was
    /// found, 3 if no entry of either store was checked.
    Verify {
        /// The cache directory.
        dir: PathBuf,
    },
    /// Remove crash-stale staging, and with --older-than every schedule entry published that
    /// long ago and every kernel-store program unused that long; with --max-size trim the
    /// kernel store, least recently used programs first.
    /// Never removes the lock file or the stamp; takes the cache's exclusive lock.
    Gc {
        /// The cache directory.
        dir: PathBuf,
        /// Remove schedule entries published at least this long ago (e.g. 30s, 15m, 2h, 7d).
        /// By publish time, not last use: the schedule store keeps no last-use mark (a
        /// lookup writes nothing, so a read-only shared directory serves lookups). In the
        /// kernel store, which marks each program's last use, every program unused this long
        /// is removed (by last use).
        #[arg(long, value_parser = duration::parse)]
        older_than: Option<Duration>,
        /// Staging untouched this long counts as crash-stale.
        #[arg(long, default_value = "1h", value_parser = duration::parse)]
        staging_older_than: Duration,
        /// Trim the kernel store at DIR/kernels to this size, least recently used programs
        /// first (bytes, or with a K, M, G suffix).
        #[arg(long, value_parser = kernels::parse_size)]
        max_size: Option<u64>,
        /// Forget the kernel store's remembered failures (kernels that failed alone, answered
        /// without a compile): all of them, or with AGE those remembered at least AGE ago
        /// (e.g. 7d). The next resolve of a forgotten kernel compiles it.
        #[arg(long, value_name = "AGE", num_args = 0..=1, default_missing_value = "0s",
              value_parser = duration::parse)]
        failures: Option<Duration>,
    },
    /// List the kernel store's remembered failures at DIR/kernels, oldest first: each file,
    /// its age, the key's SHA-256 and the message the kernel failed with.
    Failures {
        /// The cache directory.
        dir: PathBuf,
    },
    /// Print the canonical text of a C kernel and its key.
    Canon {
        /// The C source file ("-" for standard input); at most 64 MiB.
        file: PathBuf,
        /// The kernel's own name: keyed by its role where sound, else as spelled (a segment
        /// name `<routine>__seg<i>` loses its index).
        #[arg(long)]
        name: Option<String>,
        /// The renderer mints kernel names `<stem><SEP><counter>`: the counter leaves the key
        /// (`Names::with_minted_kernel_names`).
        #[arg(long, value_name = "SEP")]
        minted: Option<String>,
        /// Key the kernel's own name as spelled, not by its role
        /// (`Names::with_kernel_name_by_role(false)`).
        #[arg(long)]
        spelled_kernel_name: bool,
        /// Names the kernel binds for its tensor nodes (renamed), comma-separated.
        #[arg(long, value_delimiter = ',')]
        bound: Vec<String>,
        /// Names the kernel refers to from outside (never renamed), comma-separated.
        #[arg(long, value_delimiter = ',')]
        free: Vec<String>,
        /// Names never renamed (builtins, vendor names), comma-separated.
        #[arg(long, value_delimiter = ',')]
        keep: Vec<String>,
        /// Extra key parts (compiler options, backend tags), in order; may start with `-`.
        #[arg(long, allow_hyphen_values = true)]
        part: Vec<String>,
        /// Print only the key.
        #[arg(long)]
        key_only: bool,
    },
    /// Print one entry of a cache directory: its key, file, size, age, whether it verifies,
    /// and its text (size-capped, control characters escaped; never follows a link or blocks on
    /// a FIFO).
    Show {
        /// The cache directory.
        dir: PathBuf,
        /// The entry's key, or an unambiguous prefix of it (the code digest, say).
        key: String,
        /// Only entries of this space.
        #[arg(long, value_enum)]
        space: Option<report::SpaceArg>,
        /// Print only the matched entry's full key.
        #[arg(long)]
        key_only: bool,
        /// Print every entry whose key starts with KEY (after a regime change one code digest
        /// names several), rather than refusing an ambiguous KEY.
        #[arg(long)]
        all: bool,
    },
    /// Print the kernel-cache key of a C kernel: the same bytes as `kernel_cache::kernel_key`
    /// over the file's text, the symbol, the names, the option list and the backend identity
    /// (`--help`: how to reproduce cc-backend's key, [`KEY_HELP`]).
    #[command(long_about = KEY_HELP)]
    Key {
        /// The kernel's text ("-" for standard input), hashed exactly as read; at most 64 MiB.
        file: PathBuf,
        /// The kernel's own name, its symbol: keyed by its role where sound, else as spelled (a
        /// segment name `<routine>__seg<i>` loses its index).
        #[arg(long)]
        symbol: String,
        /// The renderer mints kernel names `<stem><SEP><counter>`: the counter leaves the key
        /// (`Names::with_minted_kernel_names`).
        #[arg(long, value_name = "SEP")]
        minted: Option<String>,
        /// Key the kernel's own name as spelled, not by its role
        /// (`Names::with_kernel_name_by_role(false)`).
        #[arg(long)]
        spelled_kernel_name: bool,
        /// A compiler option, repeated in order (a compiler reads flags in order); may start
        /// with `-`.
        #[arg(long = "option", allow_hyphen_values = true)]
        options: Vec<String>,
        /// Names the kernel binds for its tensor nodes (renamed), comma-separated or repeated.
        #[arg(long, value_delimiter = ',')]
        bound: Vec<String>,
        /// Names the kernel refers to from outside (never renamed), comma-separated.
        #[arg(long, value_delimiter = ',')]
        free: Vec<String>,
        /// Names never renamed (builtins, vendor names), comma-separated.
        #[arg(long, value_delimiter = ',')]
        keep: Vec<String>,
        /// The backend identity, as text (default: empty).
        #[arg(long, conflicts_with = "identity_file")]
        identity: Option<String>,
        /// A file holding the backend identity's exact bytes ("-" for standard input); at most
        /// 64 MiB.
        #[arg(long)]
        identity_file: Option<PathBuf>,
    },
}

fn main() -> ExitCode {
    let filter = tracing_subscriber::EnvFilter::try_from_env("KCACHE_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let mut out = std::io::stdout().lock();
    let result = match cli.command {
        Command::Stats { dir, stale_after } => {
            report::stats(&mut out, &dir, stale_after).and_then(|schedules| {
                let verdict = schedules.and(kernels::stats(&mut out, &dir)?);
                if verdict == report::Verdict::Nothing {
                    nothing_there(&dir, "no schedule store and no kernel store");
                }
                Ok(verdict.code())
            })
        }
        Command::Verify { dir } => {
            report::verify(&mut out, &dir).and_then(|(entries, problems)| {
                let (kernel_items, kernel_problems) = kernels::verify(&mut out, &dir)?;
                Ok(if problems + kernel_problems > 0 {
                    report::Verdict::Refused.code()
                } else if entries + kernel_items == 0 {
                    nothing_there(&dir, "no entry in either store: nothing checked");
                    report::Verdict::Nothing.code()
                } else {
                    ExitCode::SUCCESS
                })
            })
        }
        Command::Gc {
            dir,
            older_than,
            staging_older_than,
            max_size,
            failures,
        } => report::gc(&mut out, &dir, older_than, staging_older_than)
            .and_then(|code| {
                if let Some(age) = older_than {
                    kernels::remove_unused(&mut out, &dir, age)?;
                }
                match max_size {
                    Some(max) => kernels::trim(&mut out, &dir, max).map(|()| code),
                    None => Ok(code),
                }
            })
            .and_then(|code| match failures {
                Some(age) => kernels::forget_failures(&mut out, &dir, age).map(|()| code),
                None => Ok(code),
            }),
        Command::Failures { dir } => kernels::failures(&mut out, &dir).map(|()| ExitCode::SUCCESS),
        Command::Canon {
            file,
            name,
            minted,
            spelled_kernel_name,
            bound,
            free,
            keep,
            part,
            key_only,
        } => {
            let names = canonical_text::Names::new()
                .with_bound(bound)
                .with_free(free)
                .with_keep(keep)
                .with_kernel_name_by_role(!spelled_kernel_name);
            let names = match minted {
                Some(separator) => names.with_minted_kernel_names(separator),
                None => names,
            };
            report::canon(&mut out, &file, name.as_deref(), &names, &part, key_only)
        }
        Command::Show {
            dir,
            key,
            space,
            key_only,
            all,
        } => report::show(&mut out, &dir, &key, space, key_only, all),
        Command::Key {
            file,
            symbol,
            minted,
            spelled_kernel_name,
            options,
            bound,
            free,
            keep,
            identity,
            identity_file,
        } => {
            let names = kernel_cache::Names::new()
                .with_bound(bound)
                .with_free(free)
                .with_keep(keep)
                .with_kernel_name_by_role(!spelled_kernel_name);
            let names = match minted {
                Some(separator) => names.with_minted_kernel_names(separator),
                None => names,
            };
            let inputs = key::KeyInputs {
                file: &file,
                symbol: &symbol,
                names: &names,
                options: &options,
                identity: identity.as_deref(),
                identity_file: identity_file.as_deref(),
            };
            key::key(&mut out, &mut std::io::stderr(), &inputs)
        }
    };
    match result {
        Ok(code) => code,
        // A reader that stopped reading (`kcache canon f | head`) is not an error of ours: Rust
        // ignores SIGPIPE, so the write fails with EPIPE; end quietly, as `cat` would.
        Err(e) if is_broken_pipe(e.as_ref()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("kcache: error: {e}");
            ExitCode::from(2)
        }
    }
}

/// Says on stderr why `stats` or `verify` exits with status 3, and where a schedule store
/// of the layout the foreign-backend example once used (`DIR/schedules`) is, if one is there.
fn nothing_there(dir: &std::path::Path, what: &str) {
    eprintln!(
        "kcache: {}: {what} (exit status 3; the schedule store is read at DIR, the kernel \
         store at DIR/{}: `cache_dir::Layout`)",
        dir.display(),
        cache_dir::Layout::KERNELS
    );
    let beside = dir.join("schedules");
    if beside.join(cache_dir::STAMP_FILE).is_file() {
        eprintln!(
            "kcache: {} holds a store: open your schedule store at DIR itself \
             (`Layout::schedules`), or run kcache on {}",
            beside.display(),
            beside.display()
        );
    }
}

/// Whether `e` (or an error it wraps) is the standard output's reader having gone away.
fn is_broken_pipe(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut next = Some(e);
    while let Some(e) = next {
        if e.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
        {
            return true;
        }
        next = e.source();
    }
    false
}
