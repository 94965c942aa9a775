//! An exact counter for the hit path that a thread bumps without a locked instruction.
//!
//! A shared `fetch_add` costs a locked read-modify-write on every hit (about as much
//! as the rest of a hit) and makes threads hitting the same table fight over one
//! cache line. Instead, each live thread owns one *lane* index (process-wide, handed
//! out from a free list and returned when the thread exits), and every counter has
//! one cache line per lane. Only the lane's owner writes it, so a plain load and
//! store count exactly; a thread that gets no lane (more than [`LANES`] live threads
//! use tables at once) falls back to a shared `fetch_add`. The count read by
//! [`HitCounter::get`] includes every bump that happens-before the read (e.g. by
//! threads already joined).

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};

/// How many threads at once get a lane of their own.
pub(crate) const LANES: usize = 32;

/// The lanes not owned by a live thread, and how many were ever handed out.
static FREE_LANES: Mutex<(Vec<usize>, usize)> = Mutex::new((Vec::new(), 0));

/// The lane a thread owns, returned to [`FREE_LANES`] when the thread exits.
struct Lane(Option<usize>);

impl Lane {
    fn claim() -> Self {
        let mut free = FREE_LANES.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(lane) = free.0.pop() {
            return Lane(Some(lane));
        }
        if free.1 < LANES {
            free.1 += 1;
            return Lane(Some(free.1 - 1));
        }
        Lane(None)
    }
}

impl Drop for Lane {
    fn drop(&mut self) {
        if let Some(lane) = self.0 {
            // From now on this thread counts in the shared word: the lane is not its own.
            let _ = LANE_ID.try_with(|id| id.set(NO_LANE));
            // The mutex orders this thread's last bumps before the next owner's.
            let mut free = FREE_LANES.lock().unwrap_or_else(PoisonError::into_inner);
            free.0.push(lane);
        }
    }
}

/// [`LANE_ID`] before the thread's first bump.
const UNCLAIMED: usize = usize::MAX;
/// [`LANE_ID`] of a thread that has no lane (all taken, or the thread is exiting).
const NO_LANE: usize = usize::MAX - 1;

thread_local! {
    /// The lane this thread owns: a plain word, so reading it costs one load.
    static LANE_ID: Cell<usize> = const { Cell::new(UNCLAIMED) };
    /// Owns the lane and gives it back when the thread exits.
    static LANE: Lane = Lane::claim();
}

/// This thread's lane, claiming one on the first call.
#[inline(always)]
fn lane_id() -> usize {
    let id = LANE_ID.try_with(Cell::get).unwrap_or(NO_LANE);
    if id != UNCLAIMED {
        return id;
    }
    claim_lane_id()
}

#[cold]
fn claim_lane_id() -> usize {
    let id = LANE
        .try_with(|lane| lane.0)
        .ok()
        .flatten()
        .unwrap_or(NO_LANE);
    let _ = LANE_ID.try_with(|cell| cell.set(id));
    id
}

/// A word on its own cache line (two lines: adjacent-line prefetch pairs them).
#[repr(align(128))]
#[derive(Default)]
pub(crate) struct Padded(pub(crate) AtomicU64);

/// An exact event counter, cheap to bump from many threads.
pub(crate) struct HitCounter {
    lanes: [Padded; LANES],
    shared: Padded,
}

impl Default for HitCounter {
    fn default() -> Self {
        HitCounter {
            lanes: std::array::from_fn(|_| Padded::default()),
            shared: Padded::default(),
        }
    }
}

impl HitCounter {
    /// Counts one event.
    #[inline(always)]
    pub(crate) fn bump(&self) {
        match self.lanes.get(lane_id()) {
            Some(lane) => {
                // Only this thread writes this lane: load and store cannot lose a bump.
                lane.0.store(
                    lane.0.load(Ordering::Relaxed).wrapping_add(1),
                    Ordering::Relaxed,
                );
            }
            // No lane (all taken, or the thread is exiting): the shared, locked word.
            None => {
                self.shared.0.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// The number of events counted.
    pub(crate) fn get(&self) -> u64 {
        self.lanes
            .iter()
            .chain(std::iter::once(&self.shared))
            .map(|p| p.0.load(Ordering::Relaxed))
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Barrier;

    #[test]
    fn counts_exactly_from_more_threads_than_lanes() {
        // More threads than lanes, all alive at once: some use the shared fallback.
        let threads = LANES + 8;
        let counter = HitCounter::default();
        let barrier = Barrier::new(threads);
        std::thread::scope(|s| {
            for _ in 0..threads {
                s.spawn(|| {
                    barrier.wait();
                    for _ in 0..1000 {
                        counter.bump();
                    }
                    // Keep the lane until everyone counted.
                    barrier.wait();
                });
            }
        });
        assert_eq!(counter.get(), 1000 * threads as u64);
    }

    #[test]
    fn lanes_are_reused_by_later_threads() {
        let counter = HitCounter::default();
        for _ in 0..(3 * LANES) {
            std::thread::scope(|s| {
                s.spawn(|| counter.bump());
            });
        }
        assert_eq!(counter.get(), 3 * LANES as u64);
        let free = FREE_LANES.lock().unwrap_or_else(PoisonError::into_inner);
        assert!(free.1 <= LANES);
    }
}
