//! The kernel store's lines of `kcache stats`, `kcache verify` and `kcache gc --max-size`:
//! the persistent store of compiled programs kept at `<DIR>/kernels` (where `kcache-demo`
//! puts it), as `ccache -s` shows its cache.

use std::io::Write;
use std::path::{Path, PathBuf};

use cache_dir::RegimeStamp;
use kernel_cache::store::{KernelStore, REGIME, STORE_KIND};

use crate::report::{Failure, Verdict};

/// Where the kernel store of cache directory `dir` lives (`cache_dir::Layout::kernels`).
pub(crate) fn store_dir(dir: &Path) -> PathBuf {
    cache_dir::Layout::new(dir).kernels()
}

/// Whether `name` in cache directory `dir` is the kernel store's directory.
pub(crate) fn is_store(dir: &Path, name: &str) -> bool {
    name == cache_dir::Layout::KERNELS && store_dir(dir).is_dir()
}

/// Whether every open of this build refuses the kernel store at `kernels` with `stamp`.
fn refused(kernels: &Path, stamp: &RegimeStamp) -> bool {
    let adoption = KernelStore::new(kernels).check_adoptable();
    crate::report::refuses(stamp, REGIME, &adoption)
}

/// The kernel store section of `kcache stats DIR` (nothing if `DIR/kernels` is absent:
/// [`Verdict::Nothing`]).
///
/// Removes nothing but the store's crash-stale staging (as any open does): the store is opened
/// (the cache-open, which sweeps a store of another regime) only when its stamp is this
/// build's; otherwise the section shows the stamp alone ([`Verdict::Refused`] if every open
/// refuses it).
pub(crate) fn stats(out: &mut impl Write, dir: &Path) -> Result<Verdict, Failure> {
    let kernels = store_dir(dir);
    if !kernels.is_dir() {
        return Ok(Verdict::Nothing);
    }
    let stamp = cache_dir::read_stamp(&kernels)
        .map_err(|e| format!("kernel store {}: regime stamp: {e}", kernels.display()))?;
    let current = RegimeStamp::Kind {
        kind: STORE_KIND.into(),
        version: REGIME,
    };
    writeln!(out, "kernel store: {}", kernels.display())?;
    if stamp != current {
        writeln!(
            out,
            "  regime: {}; not opened",
            regime_line(&kernels, &stamp)
        )?;
        return Ok(if refused(&kernels, &stamp) {
            Verdict::Refused
        } else {
            Verdict::Fine
        });
    }
    let s = KernelStore::new(&kernels)
        .stats()
        .map_err(|e| format!("kernel store {}: {e}", kernels.display()))?;
    let c = s.counters;
    // In floating point: the counters are a file anyone who writes the store can edit, so
    // their integer sum may overflow.
    let looked = c.hits as f64 + c.misses as f64;
    let rate = if looked == 0.0 {
        0.0
    } else {
        100.0 * c.hits as f64 / looked
    };
    writeln!(out, "  entries: {} (programs {})", s.entries, s.blobs)?;
    writeln!(out, "  bytes: {}", s.bytes)?;
    // Each counter says what it counts: lookups count kernels (a program of eight kernels
    // found is eight hits), saves and evictions count programs, removals count files.
    writeln!(out, "  hits: {} kernels ({rate:.1}%)", c.hits)?;
    writeln!(out, "  misses: {} kernels", c.misses)?;
    writeln!(out, "  saves: {} programs", c.saves)?;
    writeln!(out, "  evictions: {} programs", c.evictions)?;
    writeln!(
        out,
        "  removed corrupt or dangling: {} files (blobs or entries)",
        c.removed_bad
    )?;
    stats_failures(out, &s)?;
    Ok(Verdict::Fine)
}

/// The remembered failures line of the kernel store's `kcache stats` section.
fn stats_failures(
    out: &mut impl Write,
    s: &kernel_cache::store::StoreStats,
) -> Result<(), Failure> {
    writeln!(
        out,
        "  failures: {} remembered ({} bytes; `kcache failures` lists them, `kcache gc --failures` forgets them)",
        s.failures, s.failure_bytes
    )?;
    Ok(())
}

/// `kcache failures DIR`: the remembered failures of `DIR/kernels`, oldest first, each with
/// its age, key digest and message (control characters escaped).
pub(crate) fn failures(out: &mut impl Write, dir: &Path) -> Result<(), Failure> {
    let kernels = store_dir(dir);
    if !kernels.is_dir() {
        writeln!(out, "no kernel store at {}", kernels.display())?;
        return Ok(());
    }
    let listed = KernelStore::new(&kernels)
        .failures()
        .map_err(|e| format!("kernel store {}: {e}", kernels.display()))?;
    let now = std::time::SystemTime::now();
    for f in &listed {
        let age = now.duration_since(f.remembered).map_or(0, |d| d.as_secs());
        writeln!(out, "{} ({age} s ago) key sha256 {}", f.name, f.key_sha256)?;
        match &f.message {
            Some(message) => {
                for line in message.lines() {
                    let shown: String = line
                        .chars()
                        .map(|c| {
                            if c.is_control() {
                                c.escape_default().to_string()
                            } else {
                                c.to_string()
                            }
                        })
                        .collect();
                    writeln!(out, "  {shown}")?;
                }
            }
            None => writeln!(out, "  (malformed: the next lookup removes it)")?,
        }
    }
    writeln!(
        out,
        "{} remembered failure(s) in {}",
        listed.len(),
        kernels.display()
    )?;
    Ok(())
}

/// `kcache gc DIR --failures [AGE]`: forgets the remembered failures of `DIR/kernels`
/// remembered at least `age` ago (0: all).
pub(crate) fn forget_failures(
    out: &mut impl Write,
    dir: &Path,
    age: std::time::Duration,
) -> Result<(), Failure> {
    let kernels = store_dir(dir);
    if !kernels.is_dir() {
        writeln!(out, "no kernel store at {}", kernels.display())?;
        return Ok(());
    }
    let older_than = (!age.is_zero()).then_some(age);
    let removed = KernelStore::new(&kernels)
        .forget_failures(older_than)
        .map_err(|e| format!("kernel store {}: {e}", kernels.display()))?;
    writeln!(out, "kernel store: forgot {removed} remembered failures")?;
    Ok(())
}

/// The kernel store's regime line (the refusal's own message names the path, which the
/// section's header already shows: it is given without it).
fn regime_line(kernels: &Path, stamp: &RegimeStamp) -> String {
    let adoption = KernelStore::new(kernels).check_adoptable().map_err(|e| {
        let message = e.to_string();
        let prefix = format!("{}: ", kernels.display());
        message
            .strip_prefix(&prefix)
            .map_or_else(|| message.clone(), str::to_string)
    });
    crate::report::regime_line(stamp, STORE_KIND, REGIME, adoption)
}

/// The kernel store section of `kcache verify DIR` (nothing if `DIR/kernels` is absent):
/// every blob and entry checked as a lookup would check it, read-only
/// ([`KernelStore::verify`]), one line per problem. A store whose stamp is not this
/// build's is not opened (an open would sweep an older one): a stamp every open refuses
/// is a problem (a newer regime too), an older regime is reported and not checked. Returns
/// the entries and programs checked and the number of problems.
pub(crate) fn verify(out: &mut impl Write, dir: &Path) -> Result<(usize, usize), Failure> {
    let kernels = store_dir(dir);
    if !kernels.is_dir() {
        return Ok((0, 0));
    }
    let stamp = cache_dir::read_stamp(&kernels)
        .map_err(|e| format!("kernel store {}: regime stamp: {e}", kernels.display()))?;
    let current = RegimeStamp::Kind {
        kind: STORE_KIND.into(),
        version: REGIME,
    };
    if stamp != current {
        writeln!(
            out,
            "kernel store {}: regime {}; not checked",
            kernels.display(),
            regime_line(&kernels, &stamp)
        )?;
        return Ok((0, usize::from(refused(&kernels, &stamp))));
    }
    let v = KernelStore::new(&kernels)
        .verify()
        .map_err(|e| format!("kernel store {}: {e}", kernels.display()))?;
    for (name, why) in &v.problems {
        writeln!(out, "kernels/{name}: {why}")?;
    }
    writeln!(
        out,
        "verified kernel store {}: {} entries, {} programs: {} problem(s)",
        kernels.display(),
        v.entries,
        v.blobs,
        v.problems.len()
    )?;
    let checked = usize::try_from(v.entries.saturating_add(v.blobs)).unwrap_or(usize::MAX);
    Ok((checked, v.problems.len()))
}

/// `kcache gc DIR --max-size SIZE`: trims `DIR/kernels` to `max` bytes, least recently
/// used programs first.
pub(crate) fn trim(out: &mut impl Write, dir: &Path, max: u64) -> Result<(), Failure> {
    let kernels = store_dir(dir);
    if !kernels.is_dir() {
        writeln!(out, "no kernel store at {}", kernels.display())?;
        return Ok(());
    }
    let t = KernelStore::new(&kernels)
        .trim(max)
        .map_err(|e| format!("kernel store {}: {e}", kernels.display()))?;
    writeln!(
        out,
        "kernel store: evicted {} programs, removed {} entries and {} unheld compile locks; {} bytes left (limit {max})",
        t.evicted_blobs, t.removed_entries, t.removed_locks, t.bytes_left
    )?;
    Ok(())
}

/// `kcache gc DIR --older-than D`, the kernel store's part: removes every program of
/// `DIR/kernels` not used for `age` or longer (by last use, which the store records).
pub(crate) fn remove_unused(
    out: &mut impl Write,
    dir: &Path,
    age: std::time::Duration,
) -> Result<(), Failure> {
    let kernels = store_dir(dir);
    if !kernels.is_dir() {
        return Ok(());
    }
    let t = KernelStore::new(&kernels)
        .remove_unused_for(age)
        .map_err(|e| format!("kernel store {}: {e}", kernels.display()))?;
    writeln!(
        out,
        "kernel store: evicted {} programs unused for {} s or more, removed {} entries and {} unheld compile locks; {} bytes left",
        t.evicted_blobs,
        age.as_secs(),
        t.removed_entries,
        t.removed_locks,
        t.bytes_left
    )?;
    Ok(())
}

/// Parses a size: bytes, or a number with a `K`, `M`, `G` suffix (powers of 1024).
pub(crate) fn parse_size(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let (digits, shift) = match s.char_indices().last() {
        Some((i, 'K' | 'k')) => (&s[..i], 10),
        Some((i, 'M' | 'm')) => (&s[..i], 20),
        Some((i, 'G' | 'g')) => (&s[..i], 30),
        _ => (s, 0),
    };
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("{s:?} is not a size (bytes, or a number with K, M or G)"))?;
    n.checked_mul(1 << shift)
        .ok_or_else(|| format!("{s:?} is too large"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("512"), Ok(512));
        assert_eq!(parse_size("4K"), Ok(4096));
        assert_eq!(parse_size("2m"), Ok(2 << 20));
        assert_eq!(parse_size("1G"), Ok(1 << 30));
        assert!(parse_size("x").is_err());
        assert!(parse_size("").is_err());
        assert!(parse_size("99999999999G").is_err());
    }
}
