//! Seeds: what other regimes and sizes learned, offered after a miss ([`Seeds`] says how).

use std::fmt;

use crate::cache::{ScheduleCache, Subject};
use crate::disk::{Lookup, MissReason};
use crate::entry::ScheduleEntry;
use crate::identity::{LoopCode, NodeAttrs, NodeId, SymId, Visitor};
use crate::key::KeyComponent;
use crate::saved::{Registry, SavedSchedule, ScheduleLanguage, of_saved};
use crate::store::{NearIndexError, Store};
use crate::{CacheKey, Error};

/// At most this many seeds are offered.
pub(crate) const MAX_SEEDS: usize = 16;

/// The domain tag a size-free digest hashes before the size-free rendering's digest (bump it
/// when what is erased changes: old near-code index lines then name no shape anyone asks for).
const SIZE_FREE_TAG: &[u8] = b"schedule-cache size-free identity 1";

/// Forwards a walk with every integer payload read as 0 and every node's dimensions as zeros.
struct Erase<'v> {
    inner: &'v mut dyn Visitor,
    zeros: Vec<usize>,
}

impl Visitor for Erase<'_> {
    fn open(&mut self, construct: &str) {
        self.inner.open(construct);
    }
    fn close(&mut self) {
        self.inner.close();
    }
    fn int(&mut self, _value: i64) {
        self.inner.int(0);
    }
    fn float(&mut self, value: f64) {
        self.inner.float(value);
    }
    fn loop_binder(&mut self, sym: SymId) {
        self.inner.loop_binder(sym);
    }
    fn local_binder(&mut self, sym: SymId) {
        self.inner.local_binder(sym);
    }
    fn symbol(&mut self, sym: SymId) {
        self.inner.symbol(sym);
    }
    fn node(&mut self, node: NodeId, attrs: &NodeAttrs<'_>) {
        self.zeros.clear();
        self.zeros.resize(attrs.dims.len(), 0);
        self.inner.node(
            node,
            &NodeAttrs {
                dims: &self.zeros,
                precision: attrs.precision,
                hoistable_constant: attrs.hoistable_constant,
            },
        );
    }
    fn opaque(&mut self, what: &str) {
        self.inner.opaque(what);
    }
}

/// The code seen without its sizes.
struct SizeFree<'a>(&'a dyn LoopCode);

impl LoopCode for SizeFree<'_> {
    fn walk(&self, visitor: &mut dyn Visitor) {
        self.0.walk(&mut Erase {
            inner: visitor,
            zeros: Vec::new(),
        });
    }
}

/// The size-free identity of `subject`: a hex SHA-256 over a domain tag and the digest of the
/// subject's canonical walk with every integer payload read as 0 and every node's dimensions
/// as zeros of the same rank (precision, constancy, placement classes, operations, floats and
/// the binder and node numberings are kept). Two codes that differ only in extents, index
/// coefficients and offsets share it, and number their loop binders, static indices and nodes
/// alike, so a schedule saved on one names the same loops on the other. It is never a code
/// digest (the tag keeps the spaces apart).
///
/// # Errors
/// [`Error::IncompleteIdentity`] if the code cannot be keyed.
pub fn size_free_digest(subject: &Subject<'_>) -> Result<String, Error> {
    let erased = SizeFree(subject.code());
    let identity = Subject::new(&erased)
        .with_statics(subject.static_indices())
        .with_placements_opt(subject.placements())
        .identity()?;
    Ok(kcache_digest::digest_of_parts(&[
        SIZE_FREE_TAG,
        identity.digest().as_bytes(),
    ]))
}

/// Where a seed came from.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SeedOrigin {
    /// The same code (same digest), stored under other key components.
    SameCode {
        /// The components its key differs in from the caller's, in key order.
        differing: Vec<KeyComponent>,
    },
    /// Code with the same loop-nest structure and other extents (another digest).
    NearCode {
        /// The digest of the code the schedule was tuned on.
        digest: String,
        /// The components its key differs in besides the digest, in key order.
        differing: Vec<KeyComponent>,
    },
}

impl SeedOrigin {
    /// The key components other than the digest in which the seed's key differs.
    pub fn differing(&self) -> &[KeyComponent] {
        match self {
            SeedOrigin::SameCode { differing } | SeedOrigin::NearCode { differing, .. } => {
                differing
            }
        }
    }
}

fn names(components: &[KeyComponent]) -> String {
    match components {
        [] => "nothing else".to_owned(),
        some => crate::cache::names(some),
    }
}

impl fmt::Display for SeedOrigin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SeedOrigin::SameCode { differing } => {
                write!(f, "the same code (differs in: {})", names(differing))
            }
            SeedOrigin::NearCode { digest, differing } => write!(
                f,
                "code of the same structure, other sizes ({}; differs in: {})",
                digest.get(..12).unwrap_or(digest),
                names(differing)
            ),
        }
    }
}

/// A saved schedule a search may start from (see [`Seeds`]). Not a hit: it holds no
/// live ops; [`ScheduleCache::candidate`] rebuilds them on the caller's code.
#[derive(Clone, Debug, PartialEq)]
pub struct Seed<Op> {
    origin: SeedOrigin,
    key: CacheKey,
    entry: ScheduleEntry<Op>,
    shape: String,
}

impl<Op> Seed<Op> {
    /// Where it came from.
    pub fn origin(&self) -> &SeedOrigin {
        &self.origin
    }

    /// The key of the entry it was read from.
    pub fn key(&self) -> &CacheKey {
        &self.key
    }

    /// The saved schedule, as stored (saved against [`SeedOrigin`]'s code).
    pub fn saved(&self) -> &SavedSchedule<Op> {
        &self.entry.schedule
    }

    /// The best (smallest finite non-negative) time stored with the seed's entry: measured
    /// under the origin's regime and size, so it ranks seeds and is nobody's time here.
    pub fn origin_best_time(&self) -> Option<f64> {
        crate::disk::best_time(&self.entry.times)
    }
}

/// Seeds: where a search can start after a miss, from what was learned under other regimes
/// and on other sizes. Front door: [`ScheduleCache::seeds`], then
/// [`ScheduleCache::candidate`] for each seed.
///
/// A [`Seed`] is a saved schedule found for
///
/// - **the same code** (the same digest) stored under other key components ([`SeedOrigin::SameCode`]:
///   another codegen environment, toolchain, numerics policy, pool, device, objective or
///   schedule format), from the store's sibling index; or
/// - **near code** ([`SeedOrigin::NearCode`]): code with the same loop-nest structure and other
///   extents, found through a *size-free identity* ([`size_free_digest`]: the canonical walk
///   with every integer payload (bounds, coefficients, offsets) read as 0 and every node's
///   dimensions as zeros of the same rank), which [`ScheduleCache::store`] records in the
///   entry ([`ScheduleEntry::size_free`]) and notes in the store's near-code index
///   ([`Store::note_near`]; the directory store keeps it beside its entries, see
///   docs/disk-format.md; a store without one says so in [`Seeds::near_index`]). An index
///   line only says where to look: an entry is offered as near code only if the size-free
///   identity it records is the caller's (an entry of another structure, or one written
///   before entries recorded it, is [`Seeds::skipped`]).
///
/// **A seed is never a hit.** It carries no live ops and no time of the caller's regime:
/// [`ScheduleCache::candidate`] rebuilds its ops on the caller's code (the digest guard for the
/// same code; for near code the size-free identity the seed's entry records must be the
/// caller's and the references resolve through the caller's own numbering), which is all the library can check. The caller then
/// applies them (its language checks legality: a seed that no longer applies is dropped),
/// checks the output against its reference (a seed that computes a wrong result is dropped)
/// and measures it under the current regime; only a measured candidate may be stored, with
/// the caller's measurements (a seed's own times were taken under another regime or size,
/// and rank seeds only: a tf32-tuned winner replayed under default numerics ran 5.9x slower
/// than no tuning; CPU winners do not transfer across worker pools).
///
/// Ranking: same-code seeds first, then near code; within each, fewer differing key
/// components first, then the smaller best time stored with the seed.
///
/// What [`ScheduleCache::seeds`] found.
#[derive(Clone, Debug, PartialEq)]
pub struct Seeds<Op> {
    /// The seeds, ranked (see [`Seeds`]), at most `MAX_SEEDS`.
    pub seeds: Vec<Seed<Op>>,
    /// Why near code was not consulted (`None` when it was).
    pub near_index: Option<NearIndexError>,
    /// Entries the indexes named that were not offered: `(key, why)` (gone, unparsable, of
    /// another version, ...).
    pub skipped: Vec<(String, String)>,
}

impl<Op> Seeds<Op> {
    /// No seed.
    pub fn is_empty(&self) -> bool {
        self.seeds.is_empty()
    }
}

/// A seed's ops rebuilt on the caller's code: something to apply, check and measure, never a
/// result (store it only with the caller's own measurements).
pub struct Candidate<L: ScheduleLanguage> {
    /// The live ops, built against the caller's code.
    pub ops: Vec<L::Op>,
    /// The registry after the rebuild.
    pub registry: Registry,
    /// Where the seed came from.
    pub origin: SeedOrigin,
}

impl<L: ScheduleLanguage> fmt::Debug for Candidate<L> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Candidate")
            .field("ops", &self.ops)
            .field("origin", &self.origin)
            .finish_non_exhaustive()
    }
}

/// Why a seed could not be rebuilt on the caller's code (it is dropped, never used).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("the seed at {key} does not apply: {reason}")]
pub struct Dropped {
    /// The seed's key.
    pub key: String,
    /// Why (at most [`crate::disk::MAX_MESSAGE_CHARS`] characters).
    pub reason: String,
}

impl<L, S> ScheduleCache<L, S>
where
    L: ScheduleLanguage,
    S: Store,
{
    /// The seeds for `subject` (see [`Seeds`]): entries of the same code under other
    /// key components (from the store's sibling index of the subject's digest) and entries of
    /// code with the same size-free identity (named by the store's near-code index, offered
    /// only if the entry records that size-free identity), ranked.
    /// Without a timing identity there is no key to compare with: no seeds. The subject's
    /// own key is never a seed (a lookup answers it). Cost: a probe of the subject's key
    /// and one of each key the indexes name (at most 8 + `MAX_NEAR`),
    /// each reported to the store's [`Observer`](crate::disk::Observer) as the lookup it is. On a directory store all of them wait for its lock at most one lock wait
    /// in all ([`DiskCache::with_lock_wait`](crate::disk::DiskCache::with_lock_wait)).
    ///
    /// # Errors
    /// [`Error::IncompleteIdentity`] if the code cannot be keyed.
    pub fn seeds<'a>(&self, subject: impl Into<Subject<'a>>) -> Result<Seeds<L::SavedOp>, Error> {
        let subject = subject.into();
        crate::disk::one_call(|| self.seeds_once(subject))
    }

    /// [`seeds`](ScheduleCache::seeds), inside its call's lock deadline.
    fn seeds_once(&self, subject: Subject<'_>) -> Result<Seeds<L::SavedOp>, Error> {
        let identity = subject.identity()?;
        let shape = size_free_digest(&subject)?;
        let mut out = Seeds {
            seeds: Vec::new(),
            near_index: None,
            skipped: Vec::new(),
        };
        let Some(parts) = self.key_parts(&identity) else {
            return Ok(out);
        };
        let own = parts.key()?;
        let store = self.store_ref();
        let mut keys: Vec<CacheKey> = Vec::new();
        if let Lookup::Miss(MissReason::NoEntry { same_digest }) =
            store.probe::<ScheduleEntry<L::SavedOp>>(Some(&own), identity.digest())
        {
            keys.extend(same_digest.iter().filter_map(|k| CacheKey::new(k).ok()));
        }
        match store.near_keys(&shape) {
            Ok(near) => keys.extend(near),
            Err(e) => out.near_index = Some(e),
        }
        let mut seen = Vec::new();
        for key in keys {
            if key == own || seen.contains(&key) {
                continue;
            }
            seen.push(key.clone());
            let digest = key.as_str().split('-').next().unwrap_or("").to_owned();
            let entry = match store.probe::<ScheduleEntry<L::SavedOp>>(Some(&key), &digest) {
                Lookup::Hit(entry) => entry,
                Lookup::Miss(reason) => {
                    out.skipped.push((key.to_string(), reason.to_string()));
                    continue;
                }
                Lookup::Refused(r) => {
                    out.skipped.push((key.to_string(), r.to_string()));
                    continue;
                }
                Lookup::Skipped => continue,
            };
            let differing: Vec<KeyComponent> = entry
                .key_parts
                .differing(&parts)
                .into_iter()
                .filter(|c| *c != KeyComponent::Digest)
                .collect();
            // The seed's shape is that of the code its entry was stored for: for the same code
            // (the same digest) the caller's; for near code the one the entry records, which
            // must be the caller's. The index line only said where to look (whoever can
            // append a line can name any entry).
            let (origin, seed_shape) = if entry.digest == identity.digest() {
                if differing.is_empty() {
                    // An entry of this very regime at another key: a lookup's business.
                    continue;
                }
                (SeedOrigin::SameCode { differing }, shape.clone())
            } else {
                let stored = match &entry.size_free {
                    Some(stored) if *stored == shape => stored.clone(),
                    Some(_) => {
                        out.skipped.push((
                            key.to_string(),
                            "stored for code of another loop-nest structure".to_owned(),
                        ));
                        continue;
                    }
                    None => {
                        out.skipped.push((
                            key.to_string(),
                            "stored without the size-free identity of its code (an older \
                             entry): not offered as near code"
                                .to_owned(),
                        ));
                        continue;
                    }
                };
                let origin = SeedOrigin::NearCode {
                    digest: entry.digest.clone(),
                    differing,
                };
                (origin, stored)
            };
            out.seeds.push(Seed {
                origin,
                key,
                entry,
                shape: seed_shape,
            });
        }
        out.seeds.sort_by(|a, b| {
            let rank = |s: &Seed<L::SavedOp>| {
                (
                    matches!(s.origin, SeedOrigin::NearCode { .. }),
                    s.origin.differing().len(),
                )
            };
            rank(a).cmp(&rank(b)).then_with(|| {
                let t = |s: &Seed<L::SavedOp>| s.origin_best_time().unwrap_or(f64::INFINITY);
                t(a).total_cmp(&t(b))
            })
        });
        out.seeds.truncate(MAX_SEEDS);
        Ok(out)
    }

    /// Rebuilds `seed`'s ops on `subject`'s code: for a same-code seed behind the digest
    /// guard; for near code only if the subject's size-free identity is the one the seed's
    /// entry records, its saved references then resolving through the subject's own
    /// numbering. The result is a
    /// [`Candidate`] to apply, check and measure, never a hit.
    ///
    /// # Errors
    /// [`Dropped`], saying why, if the seed was found for another size-free identity, for
    /// other code, or its references do not resolve on the subject (the seed is dropped).
    /// An incomplete identity is also a `Dropped`.
    pub fn candidate<'a>(
        &self,
        seed: &Seed<L::SavedOp>,
        subject: impl Into<Subject<'a>>,
    ) -> Result<Candidate<L>, Dropped> {
        let subject = subject.into();
        let drop = |reason: String| Dropped {
            key: seed.key.to_string(),
            reason: crate::disk::short(&reason),
        };
        let identity = subject.identity().map_err(|e| drop(e.to_string()))?;
        let rebuilt = match &seed.origin {
            SeedOrigin::SameCode { .. } => seed.entry.replay(self.language(), &identity),
            SeedOrigin::NearCode { .. } => {
                let shape = size_free_digest(&subject).map_err(|e| drop(e.to_string()))?;
                if shape != seed.shape {
                    return Err(drop("the code has another loop-nest structure".to_owned()));
                }
                let saved = SavedSchedule {
                    digest: identity.digest().to_owned(),
                    ops: seed.entry.schedule.ops.clone(),
                };
                of_saved(self.language(), &saved, &identity)
            }
        };
        let (ops, registry) = rebuilt.map_err(|e| drop(e.to_string()))?;
        Ok(Candidate {
            ops,
            registry,
            origin: seed.origin.clone(),
        })
    }
}
