//! The tuner's one error type.

/// What can stop a tuner call. A candidate that fails to compile, cannot be rendered or
/// computes a wrong result is never an error: it is skipped and reported in the
/// [`SearchReport`](crate::SearchReport). An error is what leaves no answer at all.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A [`Space`](crate::Space) was given points outside its dimensions, or no dimension.
    #[error("invalid space: {0}")]
    InvalidSpace(String),
    /// A setting is out of its range ([`Measure`](crate::Measure),
    /// [`SearchOptions`](crate::SearchOptions), [`ColdOptions`](crate::ColdOptions)).
    #[error("invalid setting: {0}")]
    InvalidSetting(String),
    /// The schedule store (lookup, seeds, store) failed.
    #[error("{workload}: the schedule cache failed")]
    Schedule {
        /// The workload's name.
        workload: String,
        /// The schedule cache's error.
        #[source]
        source: schedule_cache::Error,
    },
    /// A batch could not be resolved at all (not one kernel's failure: those are skipped).
    #[error("{workload}: resolving a batch of {kernels} kernels failed")]
    Resolve {
        /// The workload's name.
        workload: String,
        /// The batch's kernel count.
        kernels: usize,
        /// kernel-cache's error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A candidate that computed the right result failed when run again for timing.
    #[error("{workload}: candidate {candidate} failed while being timed: {why}")]
    Run {
        /// The workload's name.
        workload: String,
        /// The candidate, as progress lines name it.
        candidate: String,
        /// The workload's reason.
        why: String,
    },
    /// Every candidate of the search failed to compile, failed to render or computed a
    /// wrong result: there is no winner.
    #[error(
        "{workload}: no candidate computed a correct result ({measured} measured, {failed} failed{first})",
        first = .first_failure.as_deref().map(|f| format!("; first failure: {f}")).unwrap_or_default()
    )]
    NoCorrectCandidate {
        /// The workload's name.
        workload: String,
        /// Candidates compiled and checked.
        measured: usize,
        /// Candidates skipped (render or compile failure).
        failed: usize,
        /// The first skipped candidate's reason, if any.
        first_failure: Option<String>,
    },
}
