//! The front door, [`ScheduleCache`] (the crate docs show it at work): canonicalizing, keying,
//! probing, the digest and full-component checks, replay, explained misses and keep-faster
//! stores happen inside.

use std::collections::BTreeMap;
use std::fmt;

use crate::components::{KeyInputs, KeyParts, Limits, key_summary, summary_change};
use crate::config::{Config, SettingsRegistry};
use crate::device::TimingIdentity;
use crate::disk::DiskCache;
use crate::disk::{Lookup, MissReason, Refusal, StoreOutcome, StorePolicy};
use crate::entry::ScheduleEntry;
use crate::identity::{CompleteIdentity, LoopCode, NodeId, Placement, SymId, canonicalize};
use crate::key::KeyComponent;
use crate::saved::{Registry, SavedSchedule, ScheduleLanguage, to_saved};
use crate::store::Store;
use crate::{CacheKey, Error, key_differences, key_parts};

/// The code a lookup or store is about: the loop code, the static indices it was lowered with
/// and the placement class of its nodes (see [`canonicalize`]). `&code` converts into a subject
/// with neither.
#[derive(Clone, Copy)]
pub struct Subject<'a> {
    code: &'a dyn LoopCode,
    static_indices: &'a [SymId],
    placements: Option<&'a BTreeMap<NodeId, Placement>>,
}

impl<'a> Subject<'a> {
    /// `code`, with no static indices and every node's placement undecided.
    pub fn new(code: &'a dyn LoopCode) -> Subject<'a> {
        Subject {
            code,
            static_indices: &[],
            placements: None,
        }
    }

    /// The symbols the code was lowered with, in order.
    pub fn with_statics(mut self, static_indices: &'a [SymId]) -> Subject<'a> {
        self.static_indices = static_indices;
        self
    }

    /// Each node's effective placement class.
    pub fn with_placements(mut self, placements: &'a BTreeMap<NodeId, Placement>) -> Subject<'a> {
        self.placements = Some(placements);
        self
    }

    pub(crate) fn code(&self) -> &'a dyn LoopCode {
        self.code
    }

    pub(crate) fn static_indices(&self) -> &'a [SymId] {
        self.static_indices
    }

    pub(crate) fn placements(&self) -> Option<&'a BTreeMap<NodeId, Placement>> {
        self.placements
    }

    pub(crate) fn with_placements_opt(
        mut self,
        placements: Option<&'a BTreeMap<NodeId, Placement>>,
    ) -> Subject<'a> {
        self.placements = placements;
        self
    }

    /// The complete identity of the subject (with placement classes).
    ///
    /// # Errors
    /// [`Error::IncompleteIdentity`], saying why, if the code cannot be keyed.
    pub fn identity(&self) -> Result<CompleteIdentity, Error> {
        let none = BTreeMap::new();
        canonicalize(
            self.code,
            self.static_indices,
            self.placements.unwrap_or(&none),
            true,
        )
        .into_complete()
    }
}

impl<'a, C: LoopCode> From<&'a C> for Subject<'a> {
    fn from(code: &'a C) -> Subject<'a> {
        Subject::new(code)
    }
}

/// What a run measured for a stored schedule: stored as the entry's
/// [`times`](ScheduleEntry::times) and [`baseline_time`](ScheduleEntry::baseline_time),
/// under the same names.
///
/// ```
/// use schedule_cache::Measurements;
/// let m = Measurements::new(vec![2.1e-5, 2.0e-5]).with_baseline_time(5.9e-5);
/// assert_eq!(m.baseline_time, Some(5.9e-5)); // read back from a hit's entry by the same name
/// ```
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Measurements {
    /// Run times of the scheduled code, in seconds, in measurement order.
    pub times: Vec<f64>,
    /// Run time of the unscheduled code, in seconds, if measured.
    pub baseline_time: Option<f64>,
}

impl Measurements {
    /// Run times of the scheduled code, without a baseline.
    pub fn new(times: Vec<f64>) -> Measurements {
        Measurements {
            times,
            baseline_time: None,
        }
    }

    /// With the unscheduled code's run time, in seconds (the entry's
    /// [`baseline_time`](ScheduleEntry::baseline_time)).
    pub fn with_baseline_time(mut self, seconds: f64) -> Measurements {
        self.baseline_time = Some(seconds);
        self
    }
}

/// A hit: the stored entry, replayed on the code looked up.
pub struct Hit<L: ScheduleLanguage> {
    /// The live ops, rebuilt against the looked-up code (apply them to it).
    pub ops: Vec<L::Op>,
    /// The registry after the replay (the looked-up code's symbols and those the ops minted).
    pub registry: Registry,
    /// The entry as stored (saved schedule, key components, measured times).
    pub entry: ScheduleEntry<L::SavedOp>,
    /// The key it was found at.
    pub key: CacheKey,
    /// The looked-up code's identity.
    pub identity: CompleteIdentity,
}

impl<L: ScheduleLanguage> fmt::Debug for Hit<L> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Hit")
            .field("ops", &self.ops)
            .field("entry", &self.entry)
            .field("key", &self.key)
            .finish_non_exhaustive()
    }
}

/// Why a lookup did not hit. `Display` explains it in one line.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Miss {
    /// The cache was built with [`Timing::Unavailable`]: it is a no-op by choice (no timing
    /// identity, so no key), and the store was not consulted.
    NoTiming,
    /// The store refused (newer or malformed regime stamp, filesystem or server refusal).
    Refused(Refusal),
    /// The store had no usable entry at the key. `differing` lists the key components in
    /// which the store's other entries for the same code differ from the key looked up
    /// (empty when there are none, or when only components beyond the keys' hints differ).
    NotFound {
        /// What the store answered.
        reason: MissReason,
        /// The components where same-code entries differ, in key order.
        differing: Vec<KeyComponent>,
        /// What changed in each differing component against the first same-code entry that
        /// keeps a readable key summary (`key_summary`): `(component, "-O2 → -O3")`, in key
        /// order; empty when no such entry could be read (entries written before summaries).
        changes: Vec<(KeyComponent, String)>,
    },
    /// An entry sat at the key but was stored under other full key components (the file
    /// name collided, or the entry was copied by hand): never replayed.
    OtherComponents {
        /// The components that differ, in key order.
        differing: Vec<KeyComponent>,
    },
    /// An entry of this code under the same key components sat at the key, but its schedule
    /// could not be rebuilt on the code (a corrupted or hand-edited entry, one of more than
    /// [`MAX_SAVED_OPS`](crate::MAX_SAVED_OPS) ops, or a schedule language whose saved ops
    /// changed meaning without a new schedule format): never replayed.
    Unreplayable {
        /// The replay's error, cut to [`crate::disk::MAX_MESSAGE_CHARS`] characters.
        error: String,
    },
}

/// The components' names, comma-separated.
pub(crate) fn names(components: &[KeyComponent]) -> String {
    components
        .iter()
        .map(|c| c.name())
        .collect::<Vec<_>>()
        .join(", ")
}

impl fmt::Display for Miss {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Miss::NoTiming => f.write_str(
                "no timing identity: this cache was built with Timing::Unavailable and is a no-op by choice",
            ),
            Miss::Refused(r) => write!(f, "refused: {r}"),
            Miss::NotFound {
                reason: MissReason::NoEntry { same_digest },
                differing,
                changes,
            } if !same_digest.is_empty() => {
                let n = same_digest.len();
                let entries = if n == 1 { "entry" } else { "entries" };
                if differing.is_empty() {
                    write!(
                        f,
                        "no entry at this key; the same code has {n} {entries} under other keys"
                    )
                } else {
                    write!(
                        f,
                        "no entry at this key; the same code has {n} {entries} under keys that differ in: {}",
                        names(differing)
                    )?;
                    if !changes.is_empty() {
                        let shown: Vec<String> = changes
                            .iter()
                            .map(|(c, change)| format!("{}: {change}", c.name()))
                            .collect();
                        write!(f, " ({})", shown.join("; "))?;
                    }
                    Ok(())
                }
            }
            Miss::NotFound { reason, .. } => write!(f, "{reason}"),
            Miss::OtherComponents { differing } => write!(
                f,
                "the entry at this key was stored under other key components ({})",
                names(differing)
            ),
            Miss::Unreplayable { error } => {
                write!(f, "the entry at this key cannot be replayed: {error}")
            }
        }
    }
}

/// What [`ScheduleCache::store`] did.
#[derive(Clone, Debug, PartialEq)]
pub struct Published<SavedOp> {
    /// The store's outcome: [`StoreOutcome::Skipped`] exactly when the cache was built with
    /// [`Timing::Unavailable`] (nothing keyed, nothing written); `KeptExisting` when a
    /// keep-faster store left a faster entry in place.
    pub outcome: StoreOutcome,
    /// The key (`None` exactly when the cache was built with [`Timing::Unavailable`]).
    pub key: Option<CacheKey>,
    /// The saved schedule (also what an entry holds).
    pub saved: SavedSchedule<SavedOp>,
}

impl<SavedOp> Published<SavedOp> {
    /// The key the entry was published at, or `None` when nothing was published (the store
    /// was skipped, refused, or kept a faster entry: [`Published::outcome`] says which).
    pub fn stored_key(&self) -> Option<&CacheKey> {
        self.key.as_ref().filter(|_| self.outcome.is_stored())
    }
}

impl StoreOutcome {
    /// Whether the entry was published.
    pub fn is_stored(&self) -> bool {
        matches!(self, StoreOutcome::Stored)
    }

    /// What a [`StorePolicy::KeepFaster`] store kept instead of the new entry, if it did.
    pub fn kept_existing(&self) -> Option<&crate::KeptExisting> {
        match self {
            StoreOutcome::KeptExisting(k) => Some(k),
            _ => None,
        }
    }
}

/// How a [`ScheduleCache`] keys timings, chosen at construction ([`ScheduleCache::new`]).
///
/// The seed makes a missing timing identity a no-op on purpose (timings of an unknown device
/// mean nothing); the choice is spelled out here so that it is never made by accident.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Timing {
    /// Timings are measured on this device (and toolchain): it enters every key.
    Known(TimingIdentity),
    /// No timing identity is available: the cache is a no-op by choice. Nothing is keyed or
    /// written; every lookup is [`Miss::NoTiming`], every store [`StoreOutcome::Skipped`] with
    /// no key.
    Unavailable,
}

impl From<TimingIdentity> for Timing {
    fn from(timing: TimingIdentity) -> Timing {
        Timing::Known(timing)
    }
}

/// The schedule cache's front door: built once from the regime, then `lookup` and `store`.
///
/// The [`Timing`] is chosen at construction: the [`TimingIdentity`] timings are measured on,
/// or [`Timing::Unavailable`], a no-op by choice (without knowing the device, timings mean
/// nothing, so nothing is keyed: [`lookup`](ScheduleCache::lookup) answers
/// [`Miss::NoTiming`] and [`store`](ScheduleCache::store) [`StoreOutcome::Skipped`] with no
/// key, neither an error, and nothing is written).
///
/// Defaults: [`Limits::default`], a configuration over [`SettingsRegistry::new`] (which
/// declares the timing setting), no schedule format (`""`) and the configured timing
/// objective.
///
/// Only what the regime names is in the key: with the default limits, a schedule tuned
/// under one compiler or set of flags is found under another. Name yours with
/// [`with_toolchain`](ScheduleCache::with_toolchain) (compiler, options, prelude) or in
/// [`Limits::codegen_tag`], the worker pool in [`Limits::worker_pool_tag`], and the machine
/// with [`TimingIdentity::this_cpu`]. A hit is
/// still replayed only on code of the stored digest, so what another regime costs is a
/// schedule tuned for other conditions, never one for other code.
///
/// **A renderer's settings.** A renderer that reads settings through a [`Config`] must find
/// each declared in the cache's [`SettingsRegistry`] (give the cache that configuration with
/// [`with_config`](ScheduleCache::with_config) and render with
/// [`config`](ScheduleCache::config)): an undeclared setting would change the code without
/// changing the key (each read is only logged as undeclared).
/// [`digest_completeness`](crate::config::digest_completeness) checks that in a test; the
/// reference-ir crate's `render` module shows it for its renderer.
pub struct ScheduleCache<L, S = DiskCache> {
    lang: L,
    backend: String,
    schedule_format: String,
    limits: Limits,
    config: Config,
    timing: Option<TimingIdentity>,
    objective: Option<String>,
    policy: StorePolicy,
    store: S,
}

impl<L: ScheduleLanguage, S: Store> ScheduleCache<L, S> {
    /// The cache of schedules in language `lang`, for backend `backend`, timed as `timing`
    /// says, kept in `store`. `timing` is a [`TimingIdentity`] (entries are keyed by it) or
    /// [`Timing::Unavailable`] (the cache is a no-op by choice; see [`Miss::NoTiming`]).
    pub fn new(lang: L, backend: &str, timing: impl Into<Timing>, store: S) -> ScheduleCache<L, S> {
        ScheduleCache {
            lang,
            backend: backend.to_owned(),
            schedule_format: String::new(),
            limits: Limits::default(),
            config: Config::new(SettingsRegistry::new()),
            timing: match timing.into() {
                Timing::Known(t) => Some(t),
                Timing::Unavailable => None,
            },
            objective: None,
            policy: StorePolicy::LastWriteWins,
            store,
        }
    }

    /// What [`store`](ScheduleCache::store) does when the key already holds an entry:
    /// [`StorePolicy::LastWriteWins`] (the default) replaces it; [`StorePolicy::KeepFaster`]
    /// replaces it only with a winner measured faster under the same key (the smallest finite
    /// non-negative of [`Measurements::times`] against the stored entry's, strictly smaller;
    /// an entry a lookup would not return is replaced), decided atomically by the store, so
    /// tuners storing one key concurrently leave the fastest winner. The store's outcome says
    /// which was kept ([`StoreOutcome::KeptExisting`]).
    pub fn with_store_policy(mut self, policy: StorePolicy) -> ScheduleCache<L, S> {
        self.policy = policy;
        self
    }

    /// The store policy.
    pub fn store_policy(&self) -> StorePolicy {
        self.policy
    }

    /// The backend's limits record (enters the codegen and pool components). A toolchain
    /// given by [`with_toolchain`](ScheduleCache::with_toolchain) is kept unless `limits`
    /// holds one of its own.
    pub fn with_limits(mut self, limits: Limits) -> ScheduleCache<L, S> {
        let toolchain = self.limits.toolchain.take();
        self.limits = limits;
        if self.limits.toolchain.is_none() {
            self.limits.toolchain = toolchain;
        }
        self
    }

    /// The compiling backend's toolchain (compiler identity, the option list kernels are
    /// compiled with, the prelude's digest: [`Toolchain`](crate::Toolchain)), whole: it
    /// enters the codegen component ([`Limits::toolchain`]), so a schedule tuned under one
    /// compiler, option list or prelude is never replayed under another, and the miss names
    /// what changed (`codegen: options -O2 → -O3`). Build it from the very options the
    /// kernels are compiled with.
    pub fn with_toolchain(mut self, toolchain: crate::Toolchain) -> ScheduleCache<L, S> {
        self.limits.toolchain = Some(toolchain);
        self
    }

    /// The configuration (its settings enter the components they are declared for).
    pub fn with_config(mut self, config: Config) -> ScheduleCache<L, S> {
        self.config = config;
        self
    }

    /// The timing identity entries are keyed by (`None` for a cache built with
    /// [`Timing::Unavailable`], which keys and stores nothing).
    pub fn timing_identity(&self) -> Option<&TimingIdentity> {
        self.timing.as_ref()
    }

    /// An explicitly resolved timing objective (else the configured one).
    pub fn with_objective(mut self, objective: &str) -> ScheduleCache<L, S> {
        self.objective = Some(objective.to_owned());
        self
    }

    /// The adopter's own schedule-format version (enters [`KeyComponent::Format`]): change it
    /// whenever what the saved ops mean changes, and old entries never replay.
    pub fn with_schedule_format(mut self, format: &str) -> ScheduleCache<L, S> {
        self.schedule_format = format.to_owned();
        self
    }

    /// The store.
    pub fn store_ref(&self) -> &S {
        &self.store
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The schedule language (for [`to_saved`](crate::to_saved) and
    /// [`of_saved`](crate::of_saved) outside the front door).
    pub fn language(&self) -> &L {
        &self.lang
    }

    fn inputs(&self) -> KeyInputs<'_> {
        KeyInputs {
            backend: &self.backend,
            config: &self.config,
            limits: &self.limits,
            timing_identity: self.timing.as_ref(),
            objective: self.objective.as_deref(),
            schedule_format: &self.schedule_format,
        }
    }

    /// The full key components of `identity` under this regime (`None` without a timing
    /// identity).
    pub fn key_parts(&self, identity: &CompleteIdentity) -> Option<KeyParts> {
        key_parts(identity, &self.inputs())
    }

    /// The key of `subject` under this regime (`None` without a timing identity).
    ///
    /// # Errors
    /// [`Error::IncompleteIdentity`] if the code cannot be keyed.
    pub fn key<'a>(&self, subject: impl Into<Subject<'a>>) -> Result<Option<CacheKey>, Error> {
        let identity = subject.into().identity()?;
        Ok(self.key_parts(&identity).and_then(|p| p.key().ok()))
    }

    /// Looks `subject` up and, on a hit, replays the stored schedule on it. The entry must be
    /// of the current version, saved for the subject's digest, stored under the same full
    /// key components and replayable on the subject's code; anything else is a [`Miss`] that
    /// says why (an entry whose schedule cannot be rebuilt is [`Miss::Unreplayable`]: cache
    /// content never fails a run). On a directory store the call waits for its lock at most
    /// one lock wait in all, however many entries it reads
    /// ([`DiskCache::with_lock_wait`](crate::disk::DiskCache::with_lock_wait)).
    ///
    /// Why two `Result`s: the outer one is a caller's mistake (`?` passes it on), the inner
    /// one is the lookup's answer, a hit or a miss that explains itself; a miss is never an
    /// error, so no store problem can turn into a failed run:
    ///
    /// ```text
    /// match cache.lookup(&code)? {
    ///     Ok(hit) => use_it(hit.ops),
    ///     Err(miss) => { eprintln!("{miss}"); search() }
    /// }
    /// ```
    ///
    /// # Errors
    /// [`Error::IncompleteIdentity`] if the code cannot be keyed.
    pub fn lookup<'a>(
        &self,
        subject: impl Into<Subject<'a>>,
    ) -> Result<Result<Hit<L>, Miss>, Error> {
        let subject = subject.into();
        crate::disk::one_call(|| self.lookup_once(subject))
    }

    /// [`lookup`](ScheduleCache::lookup), inside its call's lock deadline.
    fn lookup_once(&self, subject: Subject<'_>) -> Result<Result<Hit<L>, Miss>, Error> {
        let identity = subject.identity()?;
        let Some(parts) = self.key_parts(&identity) else {
            // Reported to the store's observer like every skipped operation.
            let _ = self
                .store
                .probe::<ScheduleEntry<L::SavedOp>>(None, identity.digest());
            return Ok(Err(Miss::NoTiming));
        };
        let key = parts.key()?;
        let entry = match self
            .store
            .probe::<ScheduleEntry<L::SavedOp>>(Some(&key), identity.digest())
        {
            Lookup::Hit(entry) => entry,
            Lookup::Skipped => return Ok(Err(Miss::NoTiming)),
            Lookup::Refused(r) => return Ok(Err(Miss::Refused(r))),
            Lookup::Miss(reason) => {
                let (differing, changes) = match &reason {
                    MissReason::NoEntry { same_digest } => {
                        let differing = differing_siblings(&key, same_digest);
                        let changes = if differing.is_empty() {
                            Vec::new()
                        } else {
                            self.changes_against(same_digest, identity.digest(), &differing)
                        };
                        (differing, changes)
                    }
                    _ => (Vec::new(), Vec::new()),
                };
                return Ok(Err(Miss::NotFound {
                    reason,
                    differing,
                    changes,
                }));
            }
        };
        let differing = entry.key_parts.differing(&parts);
        if !differing.is_empty() {
            return Ok(Err(Miss::OtherComponents { differing }));
        }
        let (ops, registry) = match entry.replay(&self.lang, &identity) {
            Ok(rebuilt) => rebuilt,
            Err(e) => {
                return Ok(Err(Miss::Unreplayable {
                    error: crate::disk::short(&e.to_string()),
                }));
            }
        };
        Ok(Ok(Hit {
            ops,
            registry,
            entry,
            key,
            identity,
        }))
    }

    /// What changed in `differing` between the first readable same-code entry (of the keys
    /// `same_digest`) that has a key summary and this cache's own summary. Best effort: an
    /// entry that cannot be read, or has no summary, is passed over. Each sibling read is a
    /// probe like any lookup's (counted as one; over a [`TwoLevel`](crate::store::TwoLevel)
    /// store a shared hit is back-filled into the local level, a valid entry either way).
    fn changes_against(
        &self,
        same_digest: &[String],
        digest: &str,
        differing: &[KeyComponent],
    ) -> Vec<(KeyComponent, String)> {
        let Some(here) = key_summary(&self.inputs()) else {
            return Vec::new();
        };
        for sibling in same_digest {
            let Ok(key) = CacheKey::new(sibling) else {
                continue;
            };
            let Lookup::Hit(entry) = self
                .store
                .probe::<ScheduleEntry<L::SavedOp>>(Some(&key), digest)
            else {
                continue;
            };
            if entry.key_summary.is_empty() {
                continue;
            }
            return differing
                .iter()
                .filter_map(|c| {
                    let stored = entry.key_summary.iter().find(|(k, _)| k == c)?;
                    let ours = here.iter().find(|(k, _)| k == c)?;
                    Some((*c, summary_change(&stored.1, &ours.1)))
                })
                .collect();
        }
        Vec::new()
    }

    /// Saves `ops` (live ops built against `subject`'s code) and publishes them with
    /// `measurements` at the subject's key, under the cache's
    /// [store policy](ScheduleCache::with_store_policy). A store refusal, and a faster entry
    /// kept under [`StorePolicy::KeepFaster`], are outcomes, not errors. On a directory store
    /// the call (entry and near-code index) waits for its lock at most one lock wait in all.
    ///
    /// # Errors
    /// [`Error::IncompleteIdentity`] if the code cannot be keyed; [`Error::TooManyOps`] for
    /// more than [`MAX_SAVED_OPS`](crate::MAX_SAVED_OPS) ops; the language's errors if an op
    /// cannot be saved; the store's caller-mistake errors.
    pub fn store<'a>(
        &self,
        subject: impl Into<Subject<'a>>,
        ops: &[L::Op],
        measurements: Measurements,
    ) -> Result<Published<L::SavedOp>, Error> {
        self.store_with_policy(subject, ops, measurements, self.policy)
    }

    /// [`store`](ScheduleCache::store) under `policy` for this one store, whatever the cache's
    /// policy. The case it is for: under [`StorePolicy::KeepFaster`], an entry that a lookup
    /// returned but the caller rejected (its ops do not apply, its program fails to compile or
    /// computes a wrong result) still holds its measured time, and a new winner measured
    /// slower would leave it in place for good; store the new winner with
    /// [`StorePolicy::LastWriteWins`] to replace it.
    ///
    /// # Errors
    /// As [`store`](ScheduleCache::store).
    pub fn store_with_policy<'a>(
        &self,
        subject: impl Into<Subject<'a>>,
        ops: &[L::Op],
        measurements: Measurements,
        policy: StorePolicy,
    ) -> Result<Published<L::SavedOp>, Error> {
        let subject = subject.into();
        crate::disk::one_call(|| self.store_once(subject, ops, measurements, policy))
    }

    /// [`store_with_policy`](ScheduleCache::store_with_policy), inside its call's lock
    /// deadline.
    fn store_once(
        &self,
        subject: Subject<'_>,
        ops: &[L::Op],
        measurements: Measurements,
        policy: StorePolicy,
    ) -> Result<Published<L::SavedOp>, Error> {
        let identity = subject.identity()?;
        let (saved, _) = to_saved(&self.lang, &Registry::new(&identity), ops)?;
        let Some(parts) = self.key_parts(&identity) else {
            let outcome = self
                .store
                .store::<ScheduleEntry<L::SavedOp>>(None, &placeholder(&identity, &saved))?;
            return Ok(Published {
                outcome,
                key: None,
                saved,
            });
        };
        let key = parts.key()?;
        // The size-free identity goes into the entry (a near-code seed is checked against
        // it) and names the near-code index line.
        let shape = crate::seeds::size_free_digest(&subject)?;
        let mut entry = ScheduleEntry::new(
            &identity,
            parts,
            saved.clone(),
            measurements.times,
            measurements.baseline_time,
        )?;
        entry.key_summary = key_summary(&self.inputs()).unwrap_or_default();
        entry.size_free = Some(shape.clone());
        let outcome = self.store.store_with(Some(&key), &entry, policy)?;
        if outcome.is_stored() {
            // The near-code index (a hint: a store without one, or a lost note, only means
            // fewer seeds for code of this structure at other sizes).
            if let Err(e) = self.store.note_near(&shape, &key) {
                tracing::debug!(target: "schedule_cache::seeds", key = %key, error = %e, "near-code index not noted");
            }
        }
        Ok(Published {
            outcome,
            key: Some(key),
            saved,
        })
    }
}

/// An entry for a store with no key (never written; the store only reports the skip).
fn placeholder<Op: Clone>(
    identity: &CompleteIdentity,
    saved: &SavedSchedule<Op>,
) -> ScheduleEntry<Op> {
    ScheduleEntry {
        version: crate::ENTRY_VERSION,
        digest: identity.digest().to_owned(),
        key_parts: KeyParts { parts: Vec::new() },
        schedule: saved.clone(),
        times: Vec::new(),
        baseline_time: None,
        key_summary: Vec::new(),
        size_free: None,
    }
}

/// The components in which the sibling keys (same code, other components) differ from `key`,
/// in key order, from the keys alone.
pub(crate) fn differing_siblings(key: &CacheKey, same_digest: &[String]) -> Vec<KeyComponent> {
    let mut out: Vec<KeyComponent> = Vec::new();
    for other in same_digest {
        let Ok(other) = CacheKey::new(other) else {
            continue;
        };
        for c in key_differences(key, &other).unwrap_or_default() {
            if !out.contains(&c) {
                out.push(c);
            }
        }
    }
    out.sort();
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Relevance, SettingDecl};
    use crate::test_ir::{Code, Stmt, Unroll, fresh, one_loop};

    fn build() -> (Code, SymId) {
        one_loop()
    }

    fn timing() -> TimingIdentity {
        TimingIdentity {
            device: "dev".into(),
            toolchain: None,
        }
    }

    fn cache(dir: &std::path::Path, format: &str) -> ScheduleCache<Unroll> {
        ScheduleCache::new(Unroll, "cc", timing(), DiskCache::new(dir)).with_schedule_format(format)
    }

    fn store_unroll(c: &ScheduleCache<Unroll>) {
        let (code, i) = build();
        let p = c
            .store(
                &code,
                &[i],
                Measurements::new(vec![1e-6]).with_baseline_time(2e-6),
            )
            .expect("store");
        assert!(p.outcome.is_stored());
    }

    #[test]
    fn a_stored_schedule_replays_and_another_format_misses_with_the_reason() {
        let tmp = tempfile::tempdir().expect("tempdir");
        store_unroll(&cache(tmp.path(), "ops-1"));
        let (code, _) = build();
        let hit = cache(tmp.path(), "ops-1")
            .lookup(&code)
            .expect("lookup")
            .expect("hit");
        assert_eq!(hit.entry.baseline_time, Some(2e-6));
        let miss = cache(tmp.path(), "ops-2")
            .lookup(&code)
            .expect("lookup")
            .expect_err("another format misses");
        assert_eq!(
            miss.to_string(),
            "no entry at this key; the same code has 1 entry under keys that differ in: format (format: ops-1 → ops-2)"
        );
    }

    #[test]
    fn a_caller_registry_needs_no_timing_declaration_and_settings_explain_misses() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let mut reg = SettingsRegistry::new();
        reg.declare(SettingDecl {
            name: "unroll",
            relevance: Relevance::Enters(KeyComponent::Codegen),
        })
        .expect("declare");
        let with =
            |v: &str| cache(tmp.path(), "").with_config(Config::new(reg.clone()).with("unroll", v));
        store_unroll(&with("4"));
        let (code, _) = build();
        let miss = with("8").lookup(&code).expect("lookup").expect_err("miss");
        assert!(
            matches!(&miss, Miss::NotFound { differing, .. } if differing == &[KeyComponent::Codegen]),
            "{miss}"
        );
    }

    #[test]
    fn an_entry_under_other_full_components_is_never_replayed() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let a = cache(tmp.path(), "ops-1");
        let b = cache(tmp.path(), "ops-2");
        store_unroll(&a);
        let (code, _) = build();
        // Copy a's entry to b's key by hand (what a file-name collision would look like).
        let (ka, kb) = (
            a.key(&code).expect("key").expect("timing"),
            b.key(&code).expect("key").expect("timing"),
        );
        std::fs::copy(
            tmp.path().join(format!("{ka}.ron")),
            tmp.path().join(format!("{kb}.ron")),
        )
        .expect("copy");
        let miss = b
            .lookup(&code)
            .expect("lookup")
            .expect_err("never replayed");
        assert_eq!(
            miss,
            Miss::OtherComponents {
                differing: vec![KeyComponent::Format]
            }
        );
    }

    /// Regression: an entry of this very code whose schedule cannot be rebuilt (a corrupted
    /// or hand-edited file; a language that changed what its saved ops mean) made every
    /// lookup an error, failing each run until someone removed the file. It is a miss that
    /// says why.
    #[test]
    fn an_entry_that_cannot_be_replayed_is_a_miss_not_an_error() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let c = cache(tmp.path(), "ops-1");
        store_unroll(&c);
        let (code, _) = build();
        let key = c.key(&code).expect("key").expect("timing");
        let path = tmp.path().join(format!("{key}.ron"));
        let good = std::fs::read_to_string(&path).expect("read");
        let digest = c
            .key_parts(&Subject::new(&code).identity().expect("id"))
            .expect("parts");
        let digest = digest.get(KeyComponent::Digest).expect("digest").to_owned();
        let inner = format!("digest: \"{digest}\",\n        ops");
        let corruptions = [
            (
                "a dangling reference",
                good.replacen("Base(0)", "Base(99)", 1),
            ),
            (
                "a schedule saved for other code",
                good.replacen(
                    &inner,
                    &format!("digest: \"{}\",\n        ops", "0".repeat(64)),
                    1,
                ),
            ),
        ];
        for (what, bad) in corruptions {
            assert_ne!(bad, good, "{what}: the corruption applies");
            std::fs::write(&path, &bad).expect("write");
            let miss = c
                .lookup(&code)
                .expect("a corrupted entry is no error of the run")
                .expect_err(what);
            assert!(
                matches!(miss, Miss::Unreplayable { .. }),
                "{what}: {miss:?}"
            );

            let text = miss.to_string();
            assert!(
                text.starts_with("the entry at this key cannot be replayed: "),
                "{text}"
            );
            assert!(text.len() < 400, "{text}");
        }
    }

    #[test]
    fn without_a_timing_identity_nothing_is_keyed_or_written() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let c = ScheduleCache::new(
            Unroll,
            "cc",
            Timing::Unavailable,
            DiskCache::new(tmp.path().join("c")),
        );
        assert_eq!(c.timing_identity(), None);
        let (code, i) = build();
        let p = c
            .store(&code, &[i], Measurements::default())
            .expect("store");
        assert_eq!(p.stored_key(), None);
        assert_eq!((p.outcome, p.key), (StoreOutcome::Skipped, None));
        let miss = c.lookup(&code).expect("lookup").expect_err("miss");
        assert_eq!(miss, Miss::NoTiming);
        // The miss says it is a choice made at construction, not an accident.
        assert_eq!(
            miss.to_string(),
            "no timing identity: this cache was built with Timing::Unavailable and is a no-op by choice"
        );
        assert!(!tmp.path().join("c").exists());
        // With a timing identity the same calls key and write.
        let known =
            ScheduleCache::new(Unroll, "cc", timing(), DiskCache::new(tmp.path().join("c")));
        assert_eq!(known.timing_identity(), Some(&timing()));
        let p = known
            .store(&code, &[i], Measurements::default())
            .expect("store");
        assert!(p.outcome.is_stored() && p.key.is_some(), "{p:?}");
        assert_eq!(p.stored_key(), p.key.as_ref());
        // Keep-faster: a slower store leaves the entry in place, so it names no stored key.
        let keep = known.with_store_policy(StorePolicy::KeepFaster);
        let fast = keep.store(&code, &[i], Measurements::new(vec![0.5]));
        assert!(fast.expect("store").stored_key().is_some());
        let slower = keep
            .store(&code, &[i], Measurements::new(vec![1.0]))
            .expect("store");
        assert!(
            matches!(slower.outcome, StoreOutcome::KeptExisting(_)),
            "{slower:?}"
        );
        assert_eq!((slower.stored_key(), slower.key.is_some()), (None, true));
    }

    #[test]
    fn an_incomplete_identity_is_an_error_that_says_why() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let (i, stray) = (SymId(fresh()), SymId(fresh()));
        let fill = Stmt::Fill {
            out: NodeId(fresh()),
            at: stray,
            value: 2.0,
        };
        let code = Code(vec![Stmt::Loop {
            var: i,
            extent: 64,
            body: vec![fill],
        }]);
        let err = cache(tmp.path(), "").lookup(&code).expect_err("incomplete");
        assert!(err.to_string().contains("unbound symbol"), "{err}");
    }
}
