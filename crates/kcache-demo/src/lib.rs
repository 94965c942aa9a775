//! The kcache end-to-end demo: a small autotuning search over real C kernels that uses
//! every kcache crate, and replays its winners from disk on the next run.
//!
//! [`run`] tunes a few kernels (a matrix product, a fused elementwise chain, a row
//! reduction and a two-segment softmax) with the tuner crate's loop; what is the demo's
//! own is the workload: rendering, data, checking output. Each kernel is loop code in the
//! reference IR (crate reference-ir); candidate schedules (split, reorder, unroll, vectorize, hoist) are
//! applied to freshly built code and rendered to C by reference-ir's renderer with the
//! names a real renderer mints (`i<id>` loop symbols, `v<id>_…` locals, `n<id>_<label>`
//! nodes, `<routine>__seg<i>` segment kernels), one kernel per segment whose parameters
//! are the segment's tensor nodes (a real C signature: `float *` or `const float *`, each
//! declared as long as its node). Kernel keys come from canonical-text, so renamed but
//! identical kernels are compiled once; kernel-cache resolves each batch with cc-backend
//! (the system C compiler, one translation unit per kernel, split compile on), and each
//! kernel is called through cc-backend's checked safe call. Candidates are run on real data, checked
//! against a Rust reference (a wrong schedule is rejected) and timed, with repeated
//! measurements answered by memo-cache. Each winner is saved with schedule-cache under
//! its full cache key; the next run finds it, replays the saved schedule on fresh code
//! (guarded by the code digest) and compiles only the winners. A stored winner that
//! cannot be used (it does not apply to the code, is beyond the demo's replay caps on ops
//! and rendered C, or computes a wrong result when replayed) is a miss: the kernel is searched again and the new winner replaces it.
//! A search after a miss starts from the seeds schedule-cache offers (the same code's winners
//! under other key components, the same loop nest's at other sizes: `--cflag`, `--cc` and
//! `--size` change them), each rebuilt, applied, checked and measured before it can win; a
//! candidate that fails to compile is reported and skipped.
//!
//! ```
//! use kcache_demo::{DemoOptions, Origin, run};
//!
//! let dir = tempfile::tempdir()?;
//! let mut options = DemoOptions::new(dir.path().join("cache"));
//! options.kernels = Some(vec!["chain".to_string()]);
//! (options.round1, options.round2, options.reps, options.progress) = (3, 1, 1, false);
//!
//! let first = run(&options)?;
//! assert_eq!(first.kernels[0].origin, Origin::Searched);
//! assert_eq!(first.totals.disk_stored, 1);
//!
//! let second = run(&options)?;
//! assert_eq!(second.kernels[0].origin, Origin::Replayed);
//! assert_eq!(second.kernels[0].schedule_ron, first.kernels[0].schedule_ron);
//! assert!(second.totals.kernels_compiled < first.totals.kernels_compiled);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod error;
mod kernels;
mod keys;
mod plain;
mod report;
mod search;

use std::path::{Path, PathBuf};
use std::time::Instant;

use cache_dir::Layout;
use cc_backend::CcBackend;
use kernel_cache::store::KernelStore;
use schedule_cache::{DiskCache, Refusal, TwoLevel};

pub use error::DemoError;
pub use keys::{KeyMode, verbatim_key};
pub use plain::{PlainCandidate, PlainOptions, PlainReport, plain_loop};
pub use report::{
    ColdComparison, KernelReport, Measured, Origin, Report, Seeding, Totals, load_average,
    timing_note,
};

use kernels::Routine;
use search::Session;

/// The most timed samples a measurement takes ([`DemoOptions::reps`]): more would only make
/// a run last hours (and a count near `usize::MAX` could not be allocated).
pub const MAX_REPS: usize = 1000;

/// The environment variable that overrides the default cache directory.
pub const CACHE_DIR_ENV: &str = "KCACHE_DIR";

/// How a demo run is configured. [`DemoOptions::new`] gives the full demo's settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DemoOptions {
    /// Where winners are stored (schedule-cache's disk store): a directory of its own, since
    /// a directory without a regime stamp that holds files named like entries
    /// (`schedule_cache::admin::is_entry_of_any_version`: `*.ron`, `*.keys`) is refused
    /// ([`DemoError::Unadopted`], with or without `fresh`), as is one whose stamp is malformed
    /// ([`DemoError::MalformedStamp`]), and left untouched: nothing in it is deleted and no
    /// lock file, stamp or kernel store is created.
    pub cache_dir: PathBuf,
    /// Remove the stored winners (entry files) before running, so the run searches.
    pub fresh: bool,
    /// Print a line per kernel and phase to stderr while working.
    pub progress: bool,
    /// Tune only these kernels (by name); `None` tunes all of them.
    pub kernels: Option<Vec<String>>,
    /// Candidates of round 1 per kernel (the first is the unscheduled code); 0 is taken
    /// as 1, and a count past a kernel's legal schedules as all of them.
    pub round1: usize,
    /// At most this many candidates of round 2 per kernel (neighbours of round 1's best).
    pub round2: usize,
    /// The fewest timed samples per measurement (the median is kept; the tuner takes up to
    /// 25 while their spread is above 3%, and at most `reps` when `reps` is below 5), each
    /// running the candidate for at least 0.2 ms; 1 to [`MAX_REPS`] (a value outside is
    /// taken as the nearer bound).
    pub reps: usize,
    /// The C compiler command (a program and its leading arguments); `None` uses `$CC`,
    /// else `cc`.
    pub compiler: Option<String>,
    /// A Redis server (`redis://host:port/db`) shared by several machines: winners are looked
    /// up in `cache_dir` first, then on the server (a server hit is copied into `cache_dir`),
    /// and stored in both. An unreachable server is a miss, never an error. `None`: the
    /// directory alone. `fresh` clears only the directory.
    pub redis: Option<String>,
    /// How kernels are keyed: kcache's canonical keys, or (for comparison) the SHA-256 of
    /// their exact text as Triton's and ccache's keys amount to. Either way the report
    /// counts what verbatim keys compile over the same candidate stream.
    pub keys: KeyMode,
    /// Answer repeated measurements from the memo table; `false` runs every measurement
    /// (a session without the memo table, for comparison).
    pub memo: bool,
    /// Keep compiled programs across runs in the persistent kernel store at
    /// `<cache_dir>/kernels` ([`KERNEL_STORE_DIR`]): a later run loads the programs it
    /// needs instead of compiling them. `fresh` empties it too. `false`: compiled
    /// programs live only in this process's memory (for comparison).
    pub kernel_store: bool,
    /// Where the kernel store is, when not `<cache_dir>/kernels` (several runs with
    /// separate schedule stores sharing one kernel store, as a farm's machines would).
    pub kernel_store_dir: Option<PathBuf>,
    /// Write every kernel handed to the kernel cache, in order, as a C file
    /// `<n>.c` (the text the compiler sees: prelude and kernel) into this directory,
    /// with the compiler options in `options` (one per line): the demo's stream of
    /// rendered kernels, for comparisons with text-keyed compiler caches (ccache).
    pub dump_kernels: Option<PathBuf>,
    /// The matrix product's size `n` (n x n x n; 4 to 256); `None`: 64. Another size is
    /// other code: its winners are other entries, and a search at one size is seeded from
    /// the winners of the others (same loop nest, other extents).
    pub size: Option<usize>,
    /// Compiler options added after the demo's own (`-O3`, `-march=native`): they enter
    /// the codegen key component, so winners stored under other options are misses, and
    /// seeds.
    pub extra_options: Vec<String>,
    /// Start each search from the seeds the schedule cache offers after a miss (winners of
    /// the same code under other key components, and of the same loop nest at other sizes):
    /// each is rebuilt on fresh code, applied, checked and measured before it can win.
    pub seeds: bool,
    /// For each seeded search, also run an unseeded search of the same budget (nothing of
    /// it stored) and re-measure both winners side by side, interleaved
    /// ([`Seeding::cold`]). Only with `seeds`: without, [`run`] refuses the pair
    /// ([`check_conflicts`]).
    pub compare_cold: bool,
}

/// The kernel store's directory inside the cache directory: the shared layout's
/// ([`cache_dir::Layout`]), which `kcache stats DIR` reads.
pub const KERNEL_STORE_DIR: &str = cache_dir::Layout::KERNELS;

impl DemoOptions {
    /// The full demo's settings (12 + 12 candidates per kernel, 7 timed runs each,
    /// progress on, canonical keys, memo table on) with winners stored in `cache_dir`.
    pub fn new(cache_dir: impl Into<PathBuf>) -> DemoOptions {
        DemoOptions {
            cache_dir: cache_dir.into(),
            fresh: false,
            progress: true,
            kernels: None,
            round1: 12,
            round2: 12,
            reps: 7,
            compiler: None,
            redis: None,
            keys: KeyMode::Canonical,
            memo: true,
            kernel_store: true,
            kernel_store_dir: None,
            dump_kernels: None,
            size: None,
            extra_options: Vec::new(),
            seeds: true,
            compare_cold: false,
        }
    }
}

/// The default cache directory: `$KCACHE_DIR` when set and not empty, else
/// `target/kcache-demo` under the workspace root this binary was built from.
pub fn default_cache_dir() -> PathBuf {
    match std::env::var_os(CACHE_DIR_ENV) {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => normalize(
            &Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("..")
                .join("..")
                .join("target")
                .join("kcache-demo"),
        ),
    }
}

/// `path` made absolute, with `.` and `..` components resolved lexically (for display:
/// symbolic links are left alone).
fn normalize(path: &Path) -> PathBuf {
    let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    let mut out = PathBuf::new();
    for c in absolute.components() {
        match c {
            std::path::Component::CurDir => {}
            std::path::Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

/// The names of the kernels the demo can tune, in report order.
pub fn kernel_names() -> Vec<&'static str> {
    kernels::routines().iter().map(|r| r.name).collect()
}

/// Runs the demo: for each kernel, replays its winner from `options.cache_dir` when one
/// is stored for the same code and key, else searches and stores the winner.
///
/// # Errors
/// [`DemoError::NoCompiler`] when no C compiler can be run; a candidate that fails to
/// compile is reported ([`KernelReport::failed_to_compile`]) and skipped, never a failed run,
/// and only a search none of whose candidates compiles is [`DemoError::NothingCompiled`]
/// (with the compiler's first error); [`DemoError::Resolve`] when the kernel cache refuses
/// a batch as a whole; [`DemoError::UnknownKernel`]
/// for a bad `kernels` list; [`DemoError::Unadopted`] when the cache directory has no regime
/// stamp yet holds files named like entries (a user's `settings.ron`: nothing in it is
/// created, deleted or stamped, with or without `fresh`); [`DemoError::NotACacheDir`] when
/// `fresh` is asked to clear a directory holding foreign files (nothing is changed); others
/// as documented on [`DemoError`]. A disk
/// cache that cannot be written is not an error (the winner is a future miss), and no
/// cache content is: a stored winner that cannot be used (refused or unreadable, stored
/// under other key components, not replayable on the code, with more ops than the demo
/// replays, not applying to it, rendering to more C than the demo compiles, or computing
/// a wrong result when run) is a miss whose reason the report gives; the
/// kernel is searched and its new winner replaces the entry.
pub fn run(options: &DemoOptions) -> Result<Report, DemoError> {
    let start = Instant::now();
    check_conflicts(options)?;
    let selected = select(options.kernels.as_deref(), options.size)?;
    // A user's directory given as the cache, or one whose stamp is no regime version, is
    // refused before anything is put in it (the schedule store would refuse it, but the
    // kernel store would be created inside).
    match DiskCache::new(&options.cache_dir).check_adoptable() {
        Err(Refusal::Unadopted { name }) => {
            return Err(DemoError::Unadopted {
                path: options.cache_dir.clone(),
                name,
            });
        }
        Err(Refusal::MalformedStamp { content }) => {
            return Err(DemoError::MalformedStamp {
                path: options.cache_dir.clone(),
                content,
            });
        }
        _ => {}
    }
    if options.fresh {
        clear_cache_dir(&options.cache_dir)?;
    }
    let backend = match &options.compiler {
        Some(command) => CcBackend::with_compiler(command),
        None => CcBackend::new(),
    }
    .map_err(DemoError::NoCompiler)?;
    let compiler = match backend.compiler_version() {
        "" => "cc".to_string(),
        version => version.to_string(),
    };
    // The machine winners are tuned on (its full form keys them: `TimingIdentity::this_cpu`).
    let device = schedule_cache::Cpu::this_machine().readable();
    let cache_dir = normalize(&options.cache_dir);
    let (mut cold_search_candidates, mut cold_search_kernels) = (0, 0);
    for r in &selected {
        let legal = search::legal_points(r).len();
        let candidates = options.round1.max(1).min(legal) + options.round2.min(legal);
        cold_search_candidates += candidates;
        cold_search_kernels += candidates * reference_ir::render::segments(&(r.build)().code).len();
    }
    if options.progress {
        eprintln!(
            "[kcache-demo] {} kernels, compiler {compiler}, {} keys, cache directory {}",
            selected.len(),
            options.keys,
            cache_dir.display()
        );
    }
    let (kernels, totals) = memo_cache::with_cache(options.memo, |memo| {
        let session = Session::new(
            backend,
            match &options.redis {
                None => TwoLevel::local_only(DiskCache::new(
                    Layout::new(&options.cache_dir).schedules(),
                )),
                Some(url) => {
                    TwoLevel::disk_then_redis(Layout::new(&options.cache_dir).schedules(), url)
                        .map_err(|source| DemoError::Schedule {
                            routine: "(the --redis store)".to_string(),
                            source,
                        })?
                }
            },
            memo,
            options,
        )?;
        let mut reports = Vec::with_capacity(selected.len());
        for routine in &selected {
            reports.push(session.tune(routine)?);
        }
        Ok::<_, DemoError>((reports, session.finish()))
    })?;
    let store = match &options.redis {
        None => "disk".to_string(),
        Some(_) => "the cache directory, then Redis".to_string(),
    };
    Ok(Report {
        cache_dir,
        store,
        compiler,
        device,
        keys: options.keys,
        memo: options.memo,
        kernels,
        totals,
        cold_search_candidates,
        cold_search_kernels,
        total_seconds: start.elapsed().as_secs_f64(),
        measure: search::measure_of(options.reps),
    })
}

/// Refuses options of which one would be dropped without a word
/// ([`DemoError::ConflictingOptions`]): `compare_cold` without `seeds` (the comparison runs
/// only beside a seeded search), and a matrix `size` given (`Some`) with `kernels` that
/// leave out the matrix product (the only kernel the size changes).
pub fn check_conflicts(options: &DemoOptions) -> Result<(), DemoError> {
    if options.compare_cold && !options.seeds {
        return Err(DemoError::ConflictingOptions(
            "--compare-cold compares a seeded search with a cold one, and --no-seeds leaves \
             no seeded search: give one of them"
                .into(),
        ));
    }
    if let (Some(size), Some(names)) = (options.size, options.kernels.as_deref())
        && !names.iter().any(|n| n == "matmul")
    {
        return Err(DemoError::ConflictingOptions(format!(
            "--size {size} sets the matrix product's size, and --kernels {} leaves matmul \
             out: add matmul to --kernels, or drop --size",
            names.join(",")
        )));
    }
    Ok(())
}

fn select(names: Option<&[String]>, size: Option<usize>) -> Result<Vec<Routine>, DemoError> {
    let size = size.unwrap_or(kernels::MM);
    if !kernels::MATMUL_SIZES.contains(&size) {
        return Err(DemoError::BadSize {
            size,
            min: *kernels::MATMUL_SIZES.start(),
            max: *kernels::MATMUL_SIZES.end(),
        });
    }
    let all = kernels::routines_sized(size);
    let Some(names) = names else {
        return Ok(all);
    };
    for name in names {
        if !all.iter().any(|r| r.name == name) {
            return Err(DemoError::UnknownKernel {
                name: name.clone(),
                known: kernel_names().join(", "),
            });
        }
    }
    Ok(all
        .into_iter()
        .filter(|r| names.iter().any(|n| n == r.name))
        .collect())
}

/// `--fresh`: empties the cache directory `dir` (see [`clear_entries`]). A directory the
/// store would not adopt (no regime stamp, a file named like an entry: a user's
/// `settings.ron`) or holding a foreign file is refused before anything is created, deleted
/// or stamped, not even the lock file; a missing directory has nothing to clear.
fn clear_cache_dir(dir: &Path) -> Result<(), DemoError> {
    if !dir.is_dir() {
        // Nothing to clear, or not a directory (then `clear_entries` reports why).
        return clear_entries(dir);
    }
    // Validated before the lock file is created: a refused directory is left as it was.
    classify(dir)?;
    // Under the cache's exclusive lock, which refuses an unadopted directory first: no store
    // or lookup of any process runs while entries are removed.
    DiskCache::new(dir)
        .with_exclusive_lock(|| clear_entries(dir))
        .map_err(|refusal| match refusal {
            Refusal::Unadopted { name } => DemoError::Unadopted {
                path: dir.to_path_buf(),
                name,
            },
            other => DemoError::Io {
                path: dir.to_path_buf(),
                source: std::io::Error::other(other.to_string()),
            },
        })?
}

/// What [`clear_entries`] removes, found by [`classify`] before anything is removed.
#[derive(Debug, Default)]
struct Doomed {
    /// Entry files of any version, sibling indexes and staging leftovers.
    paths: Vec<PathBuf>,
    /// The kernel store's directory, to be emptied through its own protocol.
    kernel_store: Option<PathBuf>,
}

/// Classifies every item of cache directory `dir` before any is touched: lock file and stamp
/// are kept; entries of any version, sibling indexes and staging leftovers are doomed;
/// `kernels/` must be a kernel store its store would adopt; anything else (a foreign file, a
/// directory at an entry's name) refuses the whole directory.
fn classify(dir: &Path) -> Result<Doomed, DemoError> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| DemoError::Io { path, source }
    };
    let listing = match std::fs::read_dir(dir) {
        Ok(listing) => listing,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Doomed::default()),
        Err(e) => return Err(io(dir)(e)),
    };
    let mut doomed = Doomed::default();
    for item in listing {
        let item = item.map_err(io(dir))?;
        let name = item.file_name().to_string_lossy().into_owned();
        if name == cache_dir::LOCK_FILE || name == cache_dir::STAMP_FILE {
            continue;
        }
        // `file_type` does not follow a link: a link named `kernels` is foreign.
        let is_dir = item.file_type().map_err(io(&item.path()))?.is_dir();
        if name == KERNEL_STORE_DIR && is_dir {
            let store = item.path();
            KernelStore::new(&store)
                .check_adoptable()
                .map_err(|e| match e {
                    kernel_cache::store::DirError::Unadopted { name, .. } => DemoError::Unadopted {
                        path: store.clone(),
                        name,
                    },
                    e => io(&store)(std::io::Error::other(e.to_string())),
                })?;
            doomed.kernel_store = Some(store);
            continue;
        }
        // A directory at an entry's name is not an entry (a store writes files): its
        // contents could be anything, so it is refused, never removed with them.
        if cache_dir::is_staging(&name)
            || (schedule_cache::admin::is_entry_of_any_version(&name) && !is_dir)
        {
            doomed.paths.push(item.path());
        } else {
            return Err(DemoError::NotACacheDir {
                path: dir.to_path_buf(),
                entry: name,
            });
        }
    }
    Ok(doomed)
}

/// Removes the entry files of any version, the sibling indexes (and staging leftovers) of a
/// cache directory and empties its kernel store, keeping its lock file and regime stamp;
/// refuses a directory that holds anything else. Every item is classified first
/// ([`classify`]): a refused directory loses nothing.
fn clear_entries(dir: &Path) -> Result<(), DemoError> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| DemoError::Io { path, source }
    };
    let doomed = classify(dir)?;
    if let Some(store) = &doomed.kernel_store {
        // The kernel store: emptied through its own protocol (its exclusive lock).
        KernelStore::new(store)
            .trim(0)
            .map_err(|e| io(store)(std::io::Error::other(e.to_string())))?;
    }
    for path in doomed.paths {
        // Only staging directories are removed whole (`file_type` does not follow a link, and
        // a link is removed itself).
        let staging_dir = std::fs::symlink_metadata(&path).is_ok_and(|m| m.is_dir());
        let removed = if staging_dir {
            std::fs::remove_dir_all(&path)
        } else {
            std::fs::remove_file(&path)
        };
        removed.map_err(io(&path))?;
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// A sample count past [`MAX_REPS`] is the bound, not a panic (`usize::MAX` overflowed
    /// the samples' vector).
    #[test]
    fn reps_past_the_bound_run_the_bound() {
        let tmp = tempfile::tempdir().unwrap();
        let mut options = DemoOptions::new(tmp.path().join("cache"));
        options.progress = false;
        options.kernels = Some(vec!["rowdot".to_string()]);
        (options.round1, options.round2, options.reps) = (1, 0, usize::MAX);
        options.kernel_store = false;
        let report = run(&options).unwrap();
        assert_eq!(report.kernels.len(), 1);
    }

    #[test]
    fn paths_are_shown_normalized() {
        assert_eq!(
            normalize(Path::new("/a/b/../c/./d")),
            PathBuf::from("/a/c/d")
        );
        if std::env::var_os(CACHE_DIR_ENV).is_none() {
            assert!(default_cache_dir().ends_with("target/kcache-demo"));
            assert!(default_cache_dir().is_absolute());
        }
    }

    #[test]
    fn unknown_kernels_are_refused_with_the_known_names() {
        let err = select(Some(&["nope".to_string()]), None)
            .map(|_| ())
            .unwrap_err();
        assert!(
            err.to_string().contains("matmul, chain, rowdot, softmax"),
            "{err}"
        );
        assert_eq!(
            select(Some(&["softmax".to_string()]), None).unwrap().len(),
            1
        );
    }

    #[test]
    fn fresh_clears_entries_and_refuses_foreign_directories() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        std::fs::write(dir.join("abc-cc.ron"), "x").unwrap();
        std::fs::write(dir.join(cache_dir::STAMP_FILE), "1").unwrap();
        std::fs::create_dir(dir.join(".atomicwrite123")).unwrap();
        clear_entries(dir).unwrap();
        assert!(!dir.join("abc-cc.ron").exists());
        assert!(!dir.join(".atomicwrite123").exists());
        assert!(dir.join(cache_dir::STAMP_FILE).exists());
        std::fs::write(dir.join("notes.txt"), "mine").unwrap();
        assert!(matches!(
            clear_entries(dir),
            Err(DemoError::NotACacheDir { .. })
        ));
        assert!(dir.join("notes.txt").exists());
        std::fs::remove_file(dir.join("notes.txt")).unwrap();
        // A directory at an entry's name is refused, and its contents kept.
        std::fs::create_dir(dir.join("src.ron")).unwrap();
        std::fs::write(dir.join("src.ron").join("main.rs"), "mine").unwrap();
        assert!(matches!(
            clear_entries(dir),
            Err(DemoError::NotACacheDir { entry, .. }) if entry == "src.ron"
        ));
        assert!(dir.join("src.ron").join("main.rs").exists());
        // A link at an entry's name is removed itself, never what it points to.
        std::fs::remove_dir_all(dir.join("src.ron")).unwrap();
        let elsewhere = tempfile::tempdir().unwrap();
        std::fs::write(elsewhere.path().join("keep.txt"), "mine").unwrap();
        std::os::unix::fs::symlink(elsewhere.path(), dir.join("link.ron")).unwrap();
        clear_entries(dir).unwrap();
        assert!(!dir.join("link.ron").exists());
        assert!(elsewhere.path().join("keep.txt").exists());
        clear_entries(&dir.join("missing")).unwrap();
    }
}
