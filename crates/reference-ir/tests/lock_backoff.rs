//! A process holding the schedule store's `cache.lock` and stopped with `SIGSTOP` (issue 39): a
//! `ScheduleCache` call waits at most one lock wait however many locks it takes, and after a
//! wait timed out the store backs off, so 20 further calls (lookups, stores of both policies,
//! seeds) only try the lock and are refused at once: one bounded wait per back-off interval,
//! not one per call. Each answer is right: a miss or a refused store while the lock is held,
//! the stored winner once the holder is gone. Waits are told apart by what the store's observer sees
//! (kind `TimedOut`: a wait reached its bound; `WouldBlock`: only tried), never by the clock.
//! The holder is `flock(1)` (test-support's `LockHolder`).

use std::io::ErrorKind;
use std::time::{Duration, Instant};

use cache_dir::LOCK_FILE;
use reference_ir::ir::{Code, Expr, Index, Precision, Stmt, Symbol, TensorNode};
use reference_ir::schedule::{ReferenceLanguage, Schedule};
use schedule_cache::admin::{Observer, Outcome};
use schedule_cache::{
    DiskCache, Limits, Measurements, Miss, NearIndexError, Refusal, ScheduleCache, StoreOutcome,
    StorePolicy, TimingIdentity,
};
use test_support::lock::LockHolder;

const WAIT: Duration = Duration::from_millis(600);

/// `for i in 0..n { y[i] = 2 }` with fresh ids, and its loop symbol.
fn code(n: usize) -> (Code, Symbol) {
    let i = Symbol::fresh("i");
    let y = TensorNode::new("y", &[n], Precision::F32);
    let body = vec![Stmt::set(&y, vec![Index::var(&i)], Expr::Const(2.0))];
    (Code::new(vec![Stmt::for_(&i, 0, n as i64, body)]), i)
}

fn cache(store: DiskCache, codegen: &str) -> ScheduleCache<ReferenceLanguage, DiskCache> {
    let timing = TimingIdentity {
        device: "dev".into(),
        toolchain: None,
    };
    ScheduleCache::new(ReferenceLanguage, "cc", timing, store).with_limits(Limits {
        codegen_tag: codegen.into(),
        ..Limits::default()
    })
}

fn split(n: usize, factor: i64) -> (Code, Vec<reference_ir::schedule::RefOp>) {
    let (code, i) = code(n);
    let mut s = Schedule::new();
    s.split(&i, factor);
    (code, s.ops)
}

/// The kind of a refusal (`None` for anything else).
fn refused_kind(outcome: &Outcome) -> Option<ErrorKind> {
    match outcome {
        Outcome::Refused(Refusal::Io { kind, .. }) => Some(*kind),
        _ => None,
    }
}

fn near_kind(near: &Option<NearIndexError>) -> Option<ErrorKind> {
    match near {
        Some(NearIndexError::Refused(Refusal::Io { kind, .. })) => Some(*kind),
        _ => None,
    }
}

/// A store holding a winner for the 64-wide code under codegen `A`.
fn populated(dir: &std::path::Path) {
    let (code, ops) = split(64, 8);
    let p = cache(DiskCache::new(dir), "A")
        .store(&code, &ops, Measurements::new(vec![2e-6]))
        .expect("store");
    assert_eq!(p.outcome, StoreOutcome::Stored);
}

#[test]
fn a_stopped_holder_costs_one_wait_per_backoff_interval_not_one_per_call() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("c");
    populated(&dir);
    let observer = Observer::new();
    let store = DiskCache::new(&dir)
        .with_lock_wait(WAIT)
        .with_lock_backoff(Duration::from_secs(3600))
        .with_observer(observer.clone());
    let (a, b) = (cache(store.clone(), "A"), cache(store, "B"));
    let mut holder = LockHolder::hold(&dir, LOCK_FILE, true);
    holder.stop();

    let started = Instant::now();
    // The first call takes two locks (its own key's probe, then the near-code index): one
    // wait, timed out; the second lock gets nothing of the call's used-up deadline.
    let (code96, _) = code(96);
    let seeds = b.seeds(&code96).expect("seeds");
    let events = observer.take();
    let first_call = started.elapsed();
    assert!(seeds.is_empty());
    let kinds: Vec<_> = events.iter().map(|e| refused_kind(&e.outcome)).collect();
    assert_eq!(kinds, [Some(ErrorKind::TimedOut)], "{events:?}");
    assert_eq!(near_kind(&seeds.near_index), Some(ErrorKind::WouldBlock));

    // Twenty more calls while the holder is stopped: the store backs off, every lock is only
    // tried, every answer a miss or a refused store, none a wait.
    let (code64, _) = code(64);
    for round in 0..5 {
        let miss = a.lookup(&code64).expect("lookup").expect_err("held");
        assert!(matches!(miss, Miss::Refused(_)), "{miss}");
        let (c, ops) = split(64, 4);
        for policy in [StorePolicy::LastWriteWins, StorePolicy::KeepFaster] {
            let p = a
                .store_with_policy(&c, &ops, Measurements::new(vec![1e-6]), policy)
                .expect("store");
            assert!(
                matches!(p.outcome, StoreOutcome::Refused(_)),
                "{round}: {p:?}"
            );
        }
        let seeds = b.seeds(&code96).expect("seeds");
        assert!(seeds.is_empty());
        assert_eq!(near_kind(&seeds.near_index), Some(ErrorKind::WouldBlock));
    }
    let events = observer.take();
    let all = started.elapsed();
    assert_eq!(events.len(), 20, "{events:?}");
    for e in &events {
        assert_eq!(
            refused_kind(&e.outcome),
            Some(ErrorKind::WouldBlock),
            "{e:?}"
        );
    }
    println!("first call {first_call:?}, 21 calls {all:?} (lock wait {WAIT:?})");

    // The holder gone: the next call's try gets the lock, serves the stored winner (the
    // refused stores wrote nothing) and ends the back-off.
    holder.kill();
    let hit = a
        .lookup(&code64)
        .expect("lookup")
        .expect("the winner stored before");
    assert_eq!(hit.entry.times, [2e-6]);
    let (c, ops) = split(64, 4);
    let p = a
        .store_with_policy(
            &c,
            &ops,
            Measurements::new(vec![1e-6]),
            StorePolicy::KeepFaster,
        )
        .expect("store");
    assert_eq!(p.outcome, StoreOutcome::Stored);
}

#[test]
fn without_a_backoff_each_call_still_waits_at_most_once() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("c");
    populated(&dir);
    let observer = Observer::new();
    let b = cache(
        DiskCache::new(&dir)
            .with_lock_wait(WAIT)
            .with_lock_backoff(Duration::ZERO)
            .with_observer(observer.clone()),
        "B",
    );
    let holder = LockHolder::hold(&dir, LOCK_FILE, true);
    holder.stop();
    let (code96, _) = code(96);
    for _ in 0..2 {
        let seeds = b.seeds(&code96).expect("seeds");
        let events = observer.take();
        let kinds: Vec<_> = events.iter().map(|e| refused_kind(&e.outcome)).collect();
        assert_eq!(kinds, [Some(ErrorKind::TimedOut)], "{events:?}");
        // The index read got what the call's deadline left: nothing, so it only tried.
        assert_eq!(near_kind(&seeds.near_index), Some(ErrorKind::WouldBlock));
    }
}

/// A shared holder blocks only exclusive locks: lookups and last-write-wins stores go on,
/// keep-faster stores wait once, then only try while lookups keep hitting (a shared lock got
/// does not end an exclusive wait's back-off).
#[test]
fn a_stopped_shared_holder_backs_off_only_the_exclusive_stores() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("c");
    populated(&dir);
    let observer = Observer::new();
    let a = cache(
        DiskCache::new(&dir)
            .with_lock_wait(WAIT)
            .with_lock_backoff(Duration::from_secs(3600))
            .with_observer(observer.clone()),
        "A",
    );
    let holder = LockHolder::hold(&dir, LOCK_FILE, false);
    holder.stop();
    let (code64, _) = code(64);
    let (c, ops) = split(64, 4);
    for _ in 0..4 {
        let hit = a
            .lookup(&code64)
            .expect("lookup")
            .expect("a shared lock is free");
        assert_eq!(hit.entry.times, [2e-6]);
        let p = a
            .store_with_policy(
                &c,
                &ops,
                Measurements::new(vec![1e-6]),
                StorePolicy::KeepFaster,
            )
            .expect("store");
        assert!(matches!(p.outcome, StoreOutcome::Refused(_)), "{p:?}");
    }
    let events = observer.take();
    let stores: Vec<_> = events
        .iter()
        .filter(|e| e.op == schedule_cache::admin::Op::Store)
        .map(|e| refused_kind(&e.outcome))
        .collect();
    assert_eq!(
        stores,
        [
            Some(ErrorKind::TimedOut),
            Some(ErrorKind::WouldBlock),
            Some(ErrorKind::WouldBlock),
            Some(ErrorKind::WouldBlock)
        ]
    );
}
