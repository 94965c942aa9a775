//! The subcommands: each writes its report to `out` and returns the exit status.

use std::collections::BTreeSet;
use std::io::{self, Write};
use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use cache_dir::RegimeStamp;
use schedule_cache::DiskCache;
use schedule_cache::admin::{CACHE_REGIME_VERSION, EntryFile, Found, MAX_ENTRY_BYTES, Space};

/// What went wrong in a way that is not a finding (exit status 2).
pub(crate) type Failure = Box<dyn std::error::Error>;

/// What `stats` or `verify` found about one store, the worse of two winning when combined
/// ([`Verdict::and`]): each maps to an exit status ([`Verdict::code`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Verdict {
    /// A store was read (or checked) and found sound: status 0.
    Fine,
    /// No store and nothing to check: `stats` found no store (no stamp, no entry, no kernel
    /// store); `verify` checked no entry in either store. Status 3: "verified 0 entries" is
    /// no proof of anything (a typo in the path reads as an empty directory).
    Nothing,
    /// A store every open of this build refuses (another store kind's stamp, a malformed or
    /// newer one, a user's directory), or `verify` found a problem: status 1.
    Refused,
}

impl Verdict {
    /// The worse of the two (a refusal over nothing found over fine), for `stats` and
    /// `verify` of both stores. `Nothing` and `Fine` give `Fine`: one store found is enough.
    pub(crate) fn and(self, other: Verdict) -> Verdict {
        match (self, other) {
            (Verdict::Refused, _) | (_, Verdict::Refused) => Verdict::Refused,
            (Verdict::Fine, _) | (_, Verdict::Fine) => Verdict::Fine,
            (Verdict::Nothing, Verdict::Nothing) => Verdict::Nothing,
        }
    }

    /// The exit status: 0, 3 or 1.
    pub(crate) fn code(self) -> ExitCode {
        match self {
            Verdict::Fine => ExitCode::SUCCESS,
            Verdict::Nothing => ExitCode::from(3),
            Verdict::Refused => ExitCode::from(1),
        }
    }
}

/// Whether every open of this build (store kind `ours` at regime `version`) refuses a
/// directory with `stamp` and the store's `adoption` verdict: a refusal, or a newer regime.
pub(crate) fn refuses<E>(stamp: &RegimeStamp, ours: u32, adoption: &Result<(), E>) -> bool {
    adoption.is_err()
        || matches!(stamp, RegimeStamp::Kind { version: v, .. } | RegimeStamp::Bare(v) if *v > ours)
        || matches!(stamp, RegimeStamp::Malformed(_))
}

/// A store's stamp against this build's store kind `kind` and regime version `ours`, and what
/// the next open does. `adoption` is the store's adoption rule read on the directory
/// (`check_adoptable`): a refusal (another store kind's stamp, a bare legacy stamp in a
/// directory holding a file this store never writes, a malformed stamp, an absent stamp with a
/// file named like an entry) means every open refuses the directory, touching nothing.
pub(crate) fn regime_line<E: std::fmt::Display>(
    stamp: &RegimeStamp,
    kind: &str,
    ours: u32,
    adoption: Result<(), E>,
) -> String {
    if let Err(why) = adoption {
        return format!(
            "{stamp}, and every open of this {kind} refuses the directory, touching nothing: {}",
            printable(&why.to_string())
        );
    }
    match stamp {
        RegimeStamp::Kind { version: v, .. } if *v == ours => format!("{stamp} (current)"),
        RegimeStamp::Kind { version: v, .. } | RegimeStamp::Bare(v) if *v > ours => {
            format!("{stamp} (newer than this build's {ours}: this build refuses it)")
        }
        RegimeStamp::Kind { .. } => {
            format!("{stamp} (older than this build's {ours}: the next open sweeps every entry)")
        }
        RegimeStamp::Bare(v) if *v == ours => format!(
            "{stamp} (every file is this {kind}'s: the next open stamps it `{kind} {ours}`, \
             sweeping nothing)"
        ),
        RegimeStamp::Bare(_) => format!(
            "{stamp} (every file is this {kind}'s, of an older regime than this build's {ours}: \
             the next open sweeps every entry and stamps it `{kind} {ours}`)"
        ),
        RegimeStamp::Absent => {
            "absent (the next open stamps it: no file is named like an entry)".into()
        }
        RegimeStamp::Malformed(s) => format!("malformed {s:?} (every open refuses it)"),
    }
}

/// The schedule store's [`regime_line`] for directory `dir`.
fn schedule_regime_line(dir: &Path, stamp: &RegimeStamp) -> String {
    let adoption = DiskCache::new(dir).check_adoptable();
    regime_line(
        stamp,
        schedule_cache::admin::STORE_KIND,
        CACHE_REGIME_VERSION,
        adoption,
    )
}

/// `text` with every control character but newline and tab escaped (`\u{1b}`), so an entry's
/// content (anyone who can write the cache directory chooses it) never reaches a terminal as
/// escape sequences.
fn printable(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if c.is_control() && c != '\n' && c != '\t' {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

/// Fails unless `dir` is a directory (following a link), with a message naming `dir` itself
/// rather than the first file of it that could not be read.
fn require_dir(dir: &Path) -> Result<(), Failure> {
    match std::fs::metadata(dir) {
        Ok(m) if m.is_dir() => Ok(()),
        Ok(_) => Err(format!("{}: not a directory", dir.display()).into()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            Err(format!("{}: no such directory", dir.display()).into())
        }
        Err(e) => Err(format!("{}: {e}", dir.display()).into()),
    }
}

/// The entry version this build reads in `space`.
fn current_version(space: Space) -> u32 {
    match space {
        Space::Schedule => schedule_cache::ENTRY_VERSION,
        Space::Placement => schedule_cache::placement::PLACEMENT_ENTRY_VERSION,
    }
}

/// `kcache stats DIR`: one streamed pass over the directory (nothing is collected, so memory
/// stays bounded at any size); each entry costs a `stat` and a read of its first bytes (the
/// version header, [`schedule_cache::admin::entry_version`]); `kcache verify` parses entries whole.
///
/// [`Verdict::Refused`] if every open of this build refuses the directory, [`Verdict::Nothing`]
/// if it holds no schedule store (no stamp and no entry).
pub(crate) fn stats(
    out: &mut impl Write,
    dir: &Path,
    stale_after: Duration,
) -> Result<Verdict, Failure> {
    require_dir(dir)?;
    #[derive(Default)]
    struct Counts {
        lock_file: bool,
        schedule: usize,
        placement: usize,
        bytes: u64,
        unreadable: usize,
        other_version: usize,
        staging: usize,
        stale: usize,
        stale_bytes: u64,
        index: usize,
        foreign: usize,
    }
    let mut c = Counts::default();
    let regime = schedule_cache::admin::scan(dir, |found| match found {
        Found::LockFile => c.lock_file = true,
        Found::Entry(e) => {
            match e.space {
                Space::Schedule => c.schedule += 1,
                Space::Placement => c.placement += 1,
            }
            c.bytes = c.bytes.saturating_add(e.bytes);
            match schedule_cache::admin::entry_version(dir, &e) {
                Ok(v) if v == current_version(e.space) => {}
                Ok(_) => c.other_version += 1,
                Err(_) => c.unreadable += 1,
            }
        }
        Found::Staging(s) => {
            c.staging += 1;
            if s.age >= stale_after {
                c.stale += 1;
                c.stale_bytes = c.stale_bytes.saturating_add(s.bytes);
            }
        }
        Found::Index(_) => c.index += 1,
        // The kernel store's directory is shown in its own section, not as foreign.
        Found::Foreign(name) if crate::kernels::is_store(dir, &name) => {}
        // Foreign files, and any kind of item this tool does not know yet.
        _ => c.foreign += 1,
    })?;
    writeln!(out, "directory: {}", dir.display())?;
    writeln!(out, "regime: {}", schedule_regime_line(dir, &regime))?;
    writeln!(
        out,
        "lock file: {}",
        if c.lock_file { "present" } else { "absent" }
    )?;
    writeln!(
        out,
        "entries: {} (schedule {}, placement {})",
        c.schedule + c.placement,
        c.schedule,
        c.placement
    )?;
    writeln!(out, "bytes: {}", c.bytes)?;
    writeln!(out, "unreadable entries: {}", c.unreadable)?;
    writeln!(out, "other-version entries: {}", c.other_version)?;
    writeln!(
        out,
        "staging: {} ({} stale, {} bytes)",
        c.staging, c.stale, c.stale_bytes
    )?;
    writeln!(out, "sibling indexes: {}", c.index)?;
    writeln!(out, "foreign files: {}", c.foreign)?;
    let adoption = DiskCache::new(dir).check_adoptable();
    Ok(if refuses(&regime, CACHE_REGIME_VERSION, &adoption) {
        Verdict::Refused
    } else if regime == RegimeStamp::Absent && c.schedule + c.placement == 0 {
        Verdict::Nothing
    } else {
        Verdict::Fine
    })
}

/// `kcache verify DIR`: one streamed pass; each problem is printed as it is found (directory
/// order), nothing is collected. Returns the entries checked and the problems found.
pub(crate) fn verify(out: &mut impl Write, dir: &Path) -> Result<(usize, usize), Failure> {
    require_dir(dir)?;
    let (mut entries, mut problems) = (0usize, 0usize);
    let mut write_error: Option<io::Error> = None;
    let regime = schedule_cache::admin::scan(dir, |found| {
        let Found::Entry(e) = found else { return };
        entries += 1;
        if let Err(p) = schedule_cache::admin::verify_entry(dir, &e) {
            problems += 1;
            if write_error.is_none()
                && let Err(err) = writeln!(out, "{}: {}", e.name, printable(&p.to_string()))
            {
                write_error = Some(err);
            }
        }
    })?;
    if let Some(e) = write_error {
        return Err(e.into());
    }
    // A stamp every open refuses (malformed, newer, another store kind's, an unkinded legacy
    // one in a directory of another store's files, none in a user's directory) is a problem:
    // this is no schedule store to trust.
    if refuses(
        &regime,
        CACHE_REGIME_VERSION,
        &DiskCache::new(dir).check_adoptable(),
    ) {
        writeln!(
            out,
            "{}: {}",
            cache_dir::STAMP_FILE,
            schedule_regime_line(dir, &regime)
        )?;
        problems += 1;
    }
    writeln!(
        out,
        "verified {entries} entries: {problems} problem(s); regime {}",
        schedule_regime_line(dir, &regime)
    )?;
    Ok((entries, problems))
}

/// `kcache gc DIR`.
pub(crate) fn gc(
    out: &mut impl Write,
    dir: &Path,
    older_than: Option<Duration>,
    staging_older_than: Duration,
) -> Result<ExitCode, Failure> {
    require_dir(dir)?;
    // A directory no schedule store has adopted is not ours to clean: opening one the store
    // would adopt creates its lock file and stamp. (One it would refuse, holding files named
    // like entries, goes on to the open, whose refusal says why.)
    let cache = DiskCache::new(dir).with_stale_staging_after(staging_older_than);
    if cache_dir::read_stamp(dir)? == RegimeStamp::Absent && cache.check_adoptable().is_ok() {
        writeln!(
            out,
            "no schedule store at {} (no {}): nothing removed",
            dir.display(),
            cache_dir::STAMP_FILE
        )?;
        return Ok(ExitCode::SUCCESS);
    }
    let report = cache
        .gc(older_than)
        .map_err(|r| io::Error::other(format!("{}: {r}", dir.display())))?;
    writeln!(
        out,
        "removed {} entries ({} bytes) and {} stale staging artifacts",
        report.entries_removed, report.bytes_freed, report.staging_removed
    )?;
    Ok(ExitCode::SUCCESS)
}

/// `kcache canon FILE`: the canonical text, then `key: <hex>`, then what was renamed, pinned
/// or refused (so a surprising key can be explained).
pub(crate) fn canon(
    out: &mut impl Write,
    file: &Path,
    name: Option<&str>,
    names: &canonical_text::Names,
    parts: &[String],
    key_only: bool,
) -> Result<ExitCode, Failure> {
    let text = String::from_utf8(crate::key::read(file)?)
        .map_err(|_| format!("{}: not UTF-8 text", file.display()))?;
    let canonical = canonical_text::canonical_kernel(&text, name, names);
    let parts: Vec<&[u8]> = parts.iter().map(|p| p.as_bytes()).collect();
    let key = canonical.key(&parts);
    if key_only {
        writeln!(out, "{key}")?;
        return Ok(ExitCode::SUCCESS);
    }
    writeln!(out, "{}", canonical.text())?;
    writeln!(out, "key: {key}")?;
    let renamed: Vec<String> = canonical
        .renamed()
        .enumerate()
        .map(|(i, n)| format!("kc{i}={n}"))
        .collect();
    writeln!(out, "renamed: {}", renamed.join(" "))?;
    if !canonical.pinned().is_empty() {
        writeln!(out, "pinned: {}", canonical.pinned().join(" "))?;
    }
    for r in canonical.refusals() {
        writeln!(out, "refusal: {r}")?;
    }
    if let (Some(name), Some(why)) = (name, canonical.kernel_name_kept()) {
        writeln!(out, "kernel name kept: {name}: {why}")?;
    }
    for (n, why) in canonical.text_names().kept() {
        writeln!(out, "kept: {n}: {why}")?;
    }
    if let Some(why) = canonical.text_names().refused() {
        writeln!(out, "declared names not read: the text holds {why}")?;
    }
    Ok(ExitCode::SUCCESS)
}

/// An entry space, as `--space` spells it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum SpaceArg {
    /// Saved schedules (`<key>.ron`).
    Schedule,
    /// Placement decisions (`<key>.placement.ron`).
    Placement,
}

impl SpaceArg {
    fn space(self) -> Space {
        match self {
            SpaceArg::Schedule => Space::Schedule,
            SpaceArg::Placement => Space::Placement,
        }
    }
}

/// How many candidates an ambiguous `show` lists.
const MAX_LISTED: usize = 8;

/// What `show`'s one streamed pass keeps of the entries its key matches: counts, the first
/// exact and the first prefix match, and the [`MAX_LISTED`] smallest names, so memory stays
/// bounded at any directory size (a listing of every entry cost about 0.5 KiB per entry).
#[derive(Default)]
struct Matches {
    /// Entries whose key starts with the key given.
    count: usize,
    /// Entries whose key is the key given (one per space at most).
    exact_count: usize,
    /// The first entry whose key is the key given.
    exact: Option<EntryFile>,
    /// The first entry whose key starts with the key given.
    first: Option<EntryFile>,
    /// The smallest names of the matching entries, at most [`MAX_LISTED`].
    names: BTreeSet<String>,
}

impl Matches {
    /// Counts `e` if its key starts with `key` (an empty `key` matches nothing).
    fn add(&mut self, e: EntryFile, key: &str) {
        if key.is_empty() || !e.key.as_str().starts_with(key) {
            return;
        }
        self.count += 1;
        self.names.insert(e.name.clone());
        if self.names.len() > MAX_LISTED {
            self.names.pop_last();
        }
        if e.key.as_str() == key {
            self.exact_count += 1;
            if self.exact.is_none() {
                self.exact = Some(e.clone());
            }
        }
        if self.first.is_none() {
            self.first = Some(e);
        }
    }

    /// The one entry meant: the only exact match, else the only prefix match. `Ok(None)`: no
    /// match; `Err`: several (an exact key wins over longer keys it prefixes).
    fn chosen(self, key: &str) -> Result<Option<EntryFile>, Failure> {
        match (self.exact_count, self.count) {
            (1, _) => Ok(self.exact),
            (0, 1) => Ok(self.first),
            (0, 0) => Ok(None),
            (_, many) => {
                let names: Vec<&str> = self.names.iter().map(String::as_str).collect();
                let more = many.saturating_sub(names.len());
                Err(format!(
                    "{many} entries match {key:?} (give more of the key, or --space): {}{}",
                    names.join(", "),
                    if more > 0 {
                        format!(" and {more} more")
                    } else {
                        String::new()
                    }
                )
                .into())
            }
        }
    }
}

/// `kcache show DIR KEY`: one entry, found by its key or an unambiguous prefix of it (an exact
/// key wins over longer keys it prefixes), in one streamed pass (see [`Matches`]). With `all`,
/// every entry whose key starts with KEY (the code digest names every entry of one code, one
/// per regime of key components), in the directory's order, each as `show` prints one.
pub(crate) fn show(
    out: &mut impl Write,
    dir: &Path,
    key: &str,
    space: Option<SpaceArg>,
    key_only: bool,
    all: bool,
) -> Result<ExitCode, Failure> {
    require_dir(dir)?;
    let wanted = |e: &EntryFile| space.is_none_or(|s| s.space() == e.space);
    if all {
        let mut shown = 0usize;
        let mut failed: Option<io::Error> = None;
        schedule_cache::admin::scan(dir, |found| {
            if let Found::Entry(e) = found
                && wanted(&e)
                && !key.is_empty()
                && e.key.as_str().starts_with(key)
                && failed.is_none()
            {
                let separated = if shown > 0 && !key_only {
                    writeln!(out)
                } else {
                    Ok(())
                };
                if let Err(err) = separated.and_then(|()| print_entry(out, dir, &e, key_only)) {
                    failed = Some(err);
                }
                shown += 1;
            }
        })?;
        if let Some(err) = failed {
            return Err(err.into());
        }
        if shown == 0 {
            eprintln!("kcache: no entry in {} matches {key:?}", dir.display());
            return Ok(ExitCode::from(1));
        }
        return Ok(ExitCode::SUCCESS);
    }
    let mut matches = Matches::default();
    schedule_cache::admin::scan(dir, |found| {
        if let Found::Entry(e) = found
            && wanted(&e)
        {
            matches.add(e, key);
        }
    })?;
    let Some(chosen) = matches.chosen(key)? else {
        eprintln!("kcache: no entry in {} matches {key:?}", dir.display());
        return Ok(ExitCode::from(1));
    };
    print_entry(out, dir, &chosen, key_only)?;
    Ok(ExitCode::SUCCESS)
}

/// Prints one entry as `show` does: its key alone with `key_only`, else its key, file, space,
/// size, age, the verdict of a full parse, and its text (non-printing characters escaped).
fn print_entry(
    out: &mut impl Write,
    dir: &Path,
    chosen: &EntryFile,
    key_only: bool,
) -> io::Result<()> {
    if key_only {
        return writeln!(out, "{}", chosen.key);
    }
    let path = dir.join(&chosen.name);
    writeln!(out, "key: {}", chosen.key)?;
    writeln!(out, "file: {}", path.display())?;
    writeln!(
        out,
        "space: {}",
        match chosen.space {
            Space::Schedule => "schedule",
            Space::Placement => "placement",
        }
    )?;
    writeln!(out, "bytes: {}", chosen.bytes)?;
    writeln!(out, "age: {}s", chosen.age.as_secs())?;
    match schedule_cache::admin::verify_entry(dir, chosen) {
        Ok(_) => writeln!(out, "verify: ok")?,
        Err(problem) => writeln!(out, "verify: {}", printable(&problem.to_string()))?,
    }
    if !chosen.is_file {
        return Ok(());
    }
    match cache_dir::read_regular(&path, MAX_ENTRY_BYTES) {
        Ok(bytes) => {
            writeln!(out)?;
            out.write_all(printable(&String::from_utf8_lossy(&bytes)).as_bytes())?;
            if !bytes.ends_with(b"\n") {
                writeln!(out)?;
            }
        }
        Err(e) => writeln!(out, "text: unreadable ({e})")?,
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use schedule_cache::CacheKey;

    fn entry(key: &str) -> EntryFile {
        EntryFile {
            name: format!("{key}.ron"),
            space: Space::Schedule,
            key: CacheKey::new(key).expect("key"),
            bytes: 0,
            age: Duration::ZERO,
            is_file: true,
        }
    }

    #[test]
    fn show_keeps_a_bounded_listing_of_many_matches_in_name_order() {
        let mut m = Matches::default();
        // In reverse order, as a directory may list them.
        for i in (0..10_000u32).rev() {
            m.add(entry(&format!("ab12-{i:05}")), "ab12");
        }
        m.add(entry("cd34-x"), "ab12");
        assert_eq!((m.count, m.exact_count), (10_000, 0));
        assert_eq!(m.names.len(), MAX_LISTED);
        let err = m.chosen("ab12").map(|_| ()).expect_err("ambiguous");
        assert_eq!(
            err.to_string(),
            "10000 entries match \"ab12\" (give more of the key, or --space): ab12-00000.ron, \
             ab12-00001.ron, ab12-00002.ron, ab12-00003.ron, ab12-00004.ron, ab12-00005.ron, \
             ab12-00006.ron, ab12-00007.ron and 9992 more"
        );
    }

    #[test]
    fn show_prefers_the_exact_key_then_the_only_prefix_match() {
        let mut m = Matches::default();
        for k in ["ab12-x-y", "ab12-x", "ab12-xz"] {
            m.add(entry(k), "ab12-x");
        }
        let chosen = m.chosen("ab12-x").expect("one").expect("found");
        assert_eq!(chosen.key.as_str(), "ab12-x");

        let mut m = Matches::default();
        for k in ["ab12-x-y", "cd34"] {
            m.add(entry(k), "ab12");
        }
        let chosen = m.chosen("ab12").expect("one").expect("found");
        assert_eq!(chosen.key.as_str(), "ab12-x-y");

        let mut m = Matches::default();
        m.add(entry("ab12"), "");
        assert!(m.chosen("").expect("no error").is_none());
    }
}
