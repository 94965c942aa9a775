//! How long the directory store waits for its lock: one deadline per front-door call for
//! every lock the call takes ([`one_call`]), and a back-off after a lock wait timed out, as
//! [`DiskCache::with_lock_wait`](super::DiskCache::with_lock_wait) and
//! [`DiskCache::with_lock_backoff`](super::DiskCache::with_lock_backoff) state and
//! docs/disk-format.md ("Lock waits") specifies.

use std::cell::Cell;
use std::io;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use cache_dir::Mode;

/// How long, by default, a directory store only tries its lock after a lock wait timed out
/// ([`DiskCache::with_lock_backoff`](super::DiskCache::with_lock_backoff)).
pub(super) const DEFAULT_LOCK_BACKOFF: Duration = Duration::from_secs(300);

thread_local! {
    /// The front-door call running on this thread: how many [`one_call`] scopes are open,
    /// and the deadline its first lock wait set.
    static CALL: Cell<(usize, Option<Instant>)> = const { Cell::new((0, None)) };
}

/// Runs `f` as one front-door call: every lock wait of the directory stores inside it shares
/// one deadline, set by the first wait (see the module docs). Nested calls join the outer
/// one. The scope ends even if `f` panics.
pub(crate) fn one_call<R>(f: impl FnOnce() -> R) -> R {
    struct Leave;
    impl Drop for Leave {
        fn drop(&mut self) {
            CALL.with(|c| {
                let (depth, deadline) = c.get();
                let depth = depth.saturating_sub(1);
                c.set((depth, if depth == 0 { None } else { deadline }));
            });
        }
    }
    CALL.with(|c| {
        let (depth, deadline) = c.get();
        c.set((depth + 1, deadline));
    });
    let _leave = Leave;
    f()
}

/// The longest a wait starting `now` may take: `wait`, or inside a call what is left of the
/// call's deadline (set to `now + wait` by its first wait).
fn call_budget(now: Instant, wait: Duration) -> Duration {
    CALL.with(|c| match c.get() {
        (0, _) => wait,
        (_, Some(deadline)) => wait.min(deadline.saturating_duration_since(now)),
        (depth, None) => {
            c.set((depth, now.checked_add(wait)));
            wait
        }
    })
}

/// The back-off state of one store value, shared by its clones.
#[derive(Debug, Default)]
struct State {
    /// `None`: not backing off. `Some(None)`: for good (an interval past what the clock
    /// counts). `Some(Some(t))`: until `t`.
    until: Option<Option<Instant>>,
    /// The mode whose wait timed out (`Shared`: an exclusive holder; every mode backs off).
    mode: Option<Mode>,
    /// When the wait that started it timed out.
    since: Option<Instant>,
}

/// A store value's lock policy: its back-off interval and state.
#[derive(Clone, Debug)]
pub(crate) struct LockPolicy {
    backoff: Duration,
    state: Arc<Mutex<State>>,
}

impl Default for LockPolicy {
    fn default() -> LockPolicy {
        LockPolicy {
            backoff: DEFAULT_LOCK_BACKOFF,
            state: Arc::default(),
        }
    }
}

/// How one operation may take its lock.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Attempt {
    /// The longest wait (zero: only tried).
    pub(crate) wait: Duration,
    /// The store is backing off: the lock is only tried.
    backing_off: bool,
}

fn lock(m: &Mutex<State>) -> MutexGuard<'_, State> {
    // Plain data, consistent at every step: a panic elsewhere leaves nothing to repair.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl LockPolicy {
    /// This policy backing off for `interval` (zero: never; past what the clock counts: for
    /// good once a wait timed out).
    pub(crate) fn with_backoff(self, interval: Duration) -> LockPolicy {
        LockPolicy {
            backoff: interval,
            state: self.state,
        }
    }

    /// How an operation starting now may take its lock when the store's lock wait is `wait`:
    /// what the call's deadline leaves of it, or nothing while backing off. The first
    /// operation after the interval passed waits again; the interval is renewed meanwhile,
    /// so the others keep only trying.
    pub(crate) fn attempt(&self, wait: Duration) -> Attempt {
        let now = Instant::now();
        let mut s = lock(&self.state);
        let backing_off = match s.until {
            None => false,
            Some(Some(until)) if now >= until => {
                s.until = Some(now.checked_add(self.backoff));
                false
            }
            Some(_) => true,
        };
        drop(s);
        Attempt {
            wait: if backing_off {
                Duration::ZERO
            } else {
                call_budget(now, wait)
            },
            backing_off,
        }
    }

    /// Accounts for an operation's lock in `mode`: got, timed out after a wait, or neither
    /// (not free at once, or the open failed otherwise).
    pub(crate) fn settle(
        &self,
        attempt: Attempt,
        mode: Mode,
        got: bool,
        timed_out: bool,
        dir: &std::path::Path,
    ) {
        let mut s = lock(&self.state);
        if got {
            // A lock at least as strong as the one that timed out: the holder let go.
            if mode == Mode::Exclusive || s.mode == Some(Mode::Shared) {
                *s = State::default();
            }
            return;
        }
        if !timed_out || attempt.wait.is_zero() || self.backoff.is_zero() {
            return;
        }
        let now = Instant::now();
        if s.until.is_none() {
            tracing::warn!(
                target: "schedule_cache::disk",
                dir = %dir.display(),
                backoff_ms = u64::try_from(self.backoff.as_millis()).unwrap_or(u64::MAX),
                "cache lock wait timed out: the store only tries its lock, never waits, during the back-off"
            );
        }
        s.until = Some(now.checked_add(self.backoff));
        // A shared wait that timed out (an exclusive holder) blocks every mode.
        s.mode = match (s.mode, mode) {
            (Some(Mode::Shared), _) | (_, Mode::Shared) => Some(Mode::Shared),
            _ => Some(Mode::Exclusive),
        };
        s.since = Some(now);
    }

    /// Why an operation that only tried its lock (held) was given up.
    pub(crate) fn not_waited(&self, attempt: Attempt) -> (io::ErrorKind, String) {
        if !attempt.backing_off {
            return (
                io::ErrorKind::WouldBlock,
                "the lock is held by another process or thread and this call's lock wait was \
                 used up by an earlier wait"
                    .to_owned(),
            );
        }
        let s = lock(&self.state);
        let ago = s.since.map(|t| t.elapsed()).unwrap_or_default();
        let left = match s.until {
            Some(Some(until)) => format!(
                "for {:?} more",
                until.saturating_duration_since(Instant::now())
            ),
            _ => "for good".to_owned(),
        };
        (
            io::ErrorKind::WouldBlock,
            format!(
                "the lock is held by another process or thread, not waited for: a lock wait \
                 timed out {ago:?} ago, so the store only tries its lock {left}"
            ),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_of_one_call_share_its_deadline_and_nested_calls_join() {
        let wait = Duration::from_secs(60);
        assert_eq!(call_budget(Instant::now(), wait), wait, "outside a call");
        one_call(|| {
            let start = Instant::now();
            assert_eq!(call_budget(start, wait), wait, "the first wait sets it");
            let later = start + Duration::from_secs(45);
            assert_eq!(call_budget(later, wait), Duration::from_secs(15));
            one_call(|| {
                assert_eq!(call_budget(later, wait), Duration::from_secs(15), "joined");
            });
            assert_eq!(
                call_budget(start + Duration::from_secs(61), wait),
                Duration::ZERO
            );
        });
        assert_eq!(call_budget(Instant::now(), wait), wait, "the call ended");
        let caught = std::panic::catch_unwind(|| one_call(|| panic!("user code")));
        assert!(caught.is_err());
        CALL.with(|c| assert_eq!(c.get(), (0, None)));
    }

    #[test]
    fn a_timeout_backs_off_until_a_strong_enough_lock_is_got() {
        let p = LockPolicy::default().with_backoff(Duration::from_secs(3600));
        let dir = std::path::Path::new("d");
        let wait = Duration::from_secs(1);
        let a = p.attempt(wait);
        assert_eq!(a.wait, wait);
        p.settle(a, Mode::Exclusive, false, true, dir);
        let b = p.attempt(wait);
        assert!(b.backing_off && b.wait.is_zero());
        // A shared lock got does not end an exclusive wait's back-off (a shared holder).
        p.settle(b, Mode::Shared, true, false, dir);
        assert!(p.attempt(wait).backing_off);
        p.settle(p.attempt(wait), Mode::Exclusive, true, false, dir);
        assert!(!p.attempt(wait).backing_off);
        // A shared wait that timed out: any lock got ends it.
        p.settle(p.attempt(wait), Mode::Shared, false, true, dir);
        assert!(p.attempt(wait).backing_off);
        p.settle(p.attempt(wait), Mode::Shared, true, false, dir);
        assert!(!p.attempt(wait).backing_off);
        // A zero interval never backs off.
        let never = LockPolicy::default().with_backoff(Duration::ZERO);
        never.settle(never.attempt(wait), Mode::Shared, false, true, dir);
        assert!(!never.attempt(wait).backing_off);
    }

    #[test]
    fn after_the_interval_one_operation_waits_again() {
        let p = LockPolicy::default().with_backoff(Duration::from_millis(1));
        let dir = std::path::Path::new("d");
        let wait = Duration::from_secs(1);
        p.settle(p.attempt(wait), Mode::Shared, false, true, dir);
        std::thread::sleep(Duration::from_millis(5));
        let retry = p.attempt(wait);
        assert!(!retry.backing_off && retry.wait == wait);
    }
}
