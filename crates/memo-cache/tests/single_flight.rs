//! Concurrent misses on one key compute once; a computation that panics or fails
//! stores nothing, poisons nothing, and lets a waiter compute afresh.
#![allow(clippy::unwrap_used)]

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Barrier, mpsc};
use std::thread;

use memo_cache::{
    Fetched, Key, Stats, Table, fetch_or_put, get_or_put, try_fetch_or_put, try_get_or_put,
    with_cache,
};

fn key(i: u8) -> Key {
    Key::of_parts(&[b"test", &[i]])
}

/// Spins (yielding) until `n` calls are blocked on a computation in progress. The
/// table's own count is the signal, so the test never depends on timing.
fn wait_for_waiters(table: &Table<Key, u64>, n: u64) {
    while table.stats().waits < n {
        thread::yield_now();
    }
}

#[test]
fn eight_threads_asking_one_key_compute_once() {
    let computed = AtomicUsize::new(0);
    let barrier = Barrier::new(8);
    with_cache(true, |table| {
        let results: Vec<Fetched<u64>> = thread::scope(|s| {
            let handles: Vec<_> = (0..8)
                .map(|_| {
                    s.spawn(|| {
                        barrier.wait();
                        fetch_or_put(table, key(1), || {
                            computed.fetch_add(1, Ordering::SeqCst);
                            // Stay in the computation until the other seven wait on
                            // it (bounded, so a broken table fails instead of hanging).
                            let t = table.expect("enabled");
                            for _ in 0..1_000_000 {
                                if t.stats().waits >= 7 {
                                    break;
                                }
                                thread::yield_now();
                            }
                            42u64
                        })
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert_eq!(computed.load(Ordering::SeqCst), 1);
        assert!(results.iter().all(|r| *r.value() == 42));
        assert_eq!(results.iter().filter(|r| !r.is_hit()).count(), 1);
        let stats = table.expect("enabled").stats();
        assert_eq!((stats.misses, stats.hits, stats.entries), (1, 7, 1));
        assert_eq!(stats.waits, 7);
    });
}

#[test]
fn concurrent_misses_on_many_keys_compute_each_once() {
    let computed = AtomicUsize::new(0);
    let barrier = Barrier::new(4);
    with_cache(true, |table| {
        thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    barrier.wait();
                    for i in 0..200u8 {
                        let v = get_or_put(table, key(i), || {
                            computed.fetch_add(1, Ordering::SeqCst);
                            u64::from(i) * 3
                        });
                        assert_eq!(v, u64::from(i) * 3);
                    }
                });
            }
        });
        assert_eq!(computed.load(Ordering::SeqCst), 200);
        let stats = table.expect("enabled").stats();
        assert_eq!(stats.misses + stats.hits, 800);
        assert_eq!(stats.entries, 200);
    });
}

#[test]
fn a_panicking_computation_stores_nothing_and_poisons_nothing() {
    with_cache(true, |table: Option<&Table<Key, u64>>| {
        let result = catch_unwind(AssertUnwindSafe(|| {
            get_or_put(table, key(1), || panic!("model unavailable"))
        }));
        let payload = result.expect_err("the panic reaches the computing caller");
        assert_eq!(payload.downcast_ref::<&str>(), Some(&"model unavailable"));
        let t = table.expect("enabled");
        assert_eq!(t.len(), 0);
        // The next caller computes afresh and succeeds; then it is stored.
        assert_eq!(fetch_or_put(table, key(1), || 5), Fetched::Miss(5));
        assert_eq!(fetch_or_put(table, key(1), || 6), Fetched::Hit(5));
        assert_eq!(
            t.stats(),
            Stats {
                hits: 1,
                misses: 1,
                failures: 1,
                waits: 0,
                entries: 1
            }
        );
    });
}

#[test]
fn an_error_stores_nothing() {
    with_cache(true, |table: Option<&Table<Key, u64>>| {
        assert_eq!(
            try_get_or_put(table, key(1), || Err("rate limited")),
            Err("rate limited")
        );
        assert_eq!(table.expect("enabled").len(), 0);
        assert_eq!(
            try_fetch_or_put(table, key(1), || Ok::<_, &str>(9)),
            Ok(Fetched::Miss(9))
        );
        assert_eq!(
            try_fetch_or_put(table, key(1), || Err::<u64, _>("not called")),
            Ok(Fetched::Hit(9))
        );
        assert_eq!(table.expect("enabled").stats().failures, 1);
    });
}

/// Three callers wait on a computation that then fails (`panics` chooses how); exactly
/// one of them computes afresh and the others get its value.
fn waiters_recompute_after_failure(panics: bool) {
    const WAITERS: u64 = 3;
    let recomputed = AtomicUsize::new(0);
    with_cache(true, |table: Option<&Table<Key, u64>>| {
        let t = table.expect("enabled");
        let (started_tx, started_rx) = mpsc::channel();
        let (fail_tx, fail_rx) = mpsc::channel::<()>();
        thread::scope(|s| {
            let first = s.spawn(move || {
                try_fetch_or_put(table, key(1), || {
                    started_tx.send(()).unwrap();
                    fail_rx.recv().unwrap();
                    if panics {
                        panic!("computation failed");
                    }
                    Err("computation failed")
                })
            });
            started_rx.recv().unwrap();
            let waiters: Vec<_> = (0..WAITERS)
                .map(|_| {
                    s.spawn(|| {
                        try_fetch_or_put(table, key(1), || {
                            recomputed.fetch_add(1, Ordering::SeqCst);
                            Ok::<_, &str>(77)
                        })
                    })
                })
                .collect();
            wait_for_waiters(t, WAITERS);
            fail_tx.send(()).unwrap();
            match first.join() {
                Ok(result) => {
                    assert!(!panics);
                    assert_eq!(result, Err("computation failed"));
                }
                Err(payload) => {
                    assert!(panics);
                    assert_eq!(payload.downcast_ref::<&str>(), Some(&"computation failed"));
                }
            }
            let results: Vec<_> = waiters.into_iter().map(|w| w.join().unwrap()).collect();
            assert!(
                results
                    .iter()
                    .all(|r| r.as_ref().map(|f| *f.value()) == Ok(77))
            );
            assert_eq!(
                results
                    .iter()
                    .filter(|r| matches!(r, Ok(Fetched::Miss(_))))
                    .count(),
                1
            );
        });
        assert_eq!(recomputed.load(Ordering::SeqCst), 1);
        let stats = t.stats();
        assert_eq!(
            (stats.failures, stats.misses, stats.hits),
            (1, 1, WAITERS - 1)
        );
        assert_eq!(fetch_or_put(table, key(1), || 0), Fetched::Hit(77));
    });
}

#[test]
fn waiters_on_a_panicked_computation_recompute() {
    waiters_recompute_after_failure(true);
}

#[test]
fn waiters_on_a_failed_computation_recompute() {
    waiters_recompute_after_failure(false);
}

#[test]
fn a_computation_may_use_the_table_for_other_keys() {
    with_cache(true, |table: Option<&Table<Key, u64>>| {
        let v = get_or_put(table, key(1), || {
            get_or_put(table, key(2), || 2) + get_or_put(table, key(3), || 3)
        });
        assert_eq!(v, 5);
        assert_eq!(table.expect("enabled").len(), 3);
    });
}

#[test]
fn a_computation_asking_for_its_own_key_computes_instead_of_deadlocking() {
    with_cache(true, |table: Option<&Table<Key, u64>>| {
        let v = get_or_put(table, key(1), || {
            let inner = fetch_or_put(table, key(1), || 10);
            assert_eq!(inner, Fetched::Miss(10));
            inner.into_value() + 1
        });
        assert_eq!(v, 11);
        assert_eq!(fetch_or_put(table, key(1), || 0), Fetched::Hit(11));
    });
}

#[test]
fn a_panicking_clone_stores_nothing() {
    #[derive(Debug, PartialEq)]
    struct Fragile(u32);
    impl Clone for Fragile {
        fn clone(&self) -> Self {
            assert!(self.0 != 0, "cannot clone zero");
            Fragile(self.0)
        }
    }
    with_cache(true, |table: Option<&Table<Key, Fragile>>| {
        let result = catch_unwind(AssertUnwindSafe(|| {
            get_or_put(table, key(1), || Fragile(0))
        }));
        assert!(result.is_err());
        let t = table.expect("enabled");
        assert_eq!(t.len(), 0);
        assert_eq!(t.stats().failures, 1);
        assert_eq!(get_or_put(table, key(1), || Fragile(4)), Fragile(4));
        assert_eq!(
            fetch_or_put(table, key(1), || Fragile(5)),
            Fetched::Hit(Fragile(4))
        );
    });
}

/// Threads making mixed calls (some computations succeed, some return `Err`, some
/// panic) on a few keys: each key's value is computed successfully at most once, every
/// value returned is that key's, and the statistics account for every call.
#[test]
fn mixed_successes_errors_and_panics_keep_every_invariant() {
    const THREADS: usize = 4;
    const CALLS: usize = 300;
    const KEYS: usize = 12;
    let successes: Vec<AtomicUsize> = (0..KEYS).map(|_| AtomicUsize::new(0)).collect();
    let failures = AtomicUsize::new(0);
    let barrier = Barrier::new(THREADS);
    with_cache(true, |table: Option<&Table<Key, u64>>| {
        thread::scope(|s| {
            for t in 0..THREADS {
                let (successes, failures, barrier) = (&successes, &failures, &barrier);
                s.spawn(move || {
                    let mut rng = 0x9e37_79b9_7f4a_7c15_u64 ^ (t as u64 + 1);
                    barrier.wait();
                    for _ in 0..CALLS {
                        rng ^= rng << 13;
                        rng ^= rng >> 7;
                        rng ^= rng << 17;
                        let k = (rng % KEYS as u64) as usize;
                        let outcome = (rng >> 32) % 10;
                        let call = catch_unwind(AssertUnwindSafe(|| {
                            try_get_or_put(table, key(k as u8), || {
                                if outcome < 2 {
                                    failures.fetch_add(1, Ordering::SeqCst);
                                    return Err("refused");
                                }
                                if outcome < 4 {
                                    failures.fetch_add(1, Ordering::SeqCst);
                                    panic!("crashed");
                                }
                                successes[k].fetch_add(1, Ordering::SeqCst);
                                Ok(k as u64 * 10)
                            })
                        }));
                        if let Ok(Ok(v)) = call {
                            assert_eq!(v, k as u64 * 10);
                        }
                    }
                });
            }
        });
        let t = table.expect("enabled");
        let stats = t.stats();
        let computed: Vec<usize> = successes.iter().map(|c| c.load(Ordering::SeqCst)).collect();
        assert!(computed.iter().all(|&c| c <= 1), "{computed:?}");
        let stored = computed.iter().sum::<usize>();
        assert_eq!(stats.entries, stored);
        assert_eq!(stats.misses, stored as u64);
        assert_eq!(stats.failures, failures.load(Ordering::SeqCst) as u64);
        assert_eq!(
            stats.hits + stats.misses + stats.failures,
            (THREADS * CALLS) as u64
        );
    });
}

/// `Key`'s in-memory hash feeds only its first 8 bytes: keys that share them land in one
/// bucket and must still never answer for each other (equality compares all 32 bytes), with
/// eight threads filling and reading them at once.
#[test]
fn keys_sharing_their_hash_word_never_answer_for_each_other() {
    let keys: Vec<Key> = (0..64u8)
        .map(|i| {
            let mut bytes = [7u8; 32];
            bytes[31] = i;
            Key::from_bytes(bytes)
        })
        .collect();
    with_cache(true, |table: Option<&Table<Key, u64>>| {
        let barrier = Barrier::new(8);
        thread::scope(|s| {
            for t in 0..8 {
                let (keys, barrier) = (&keys, &barrier);
                s.spawn(move || {
                    barrier.wait();
                    for round in 0..20 {
                        for i in 0..keys.len() {
                            let j = (i + t * 7 + round) % keys.len();
                            let v = get_or_put(table, keys[j], || {
                                thread::yield_now();
                                j as u64
                            });
                            assert_eq!(v, j as u64);
                        }
                    }
                });
            }
        });
        let stats = table.unwrap().stats();
        assert_eq!((stats.entries, stats.misses), (64, 64));
    });
}

/// A call answered from the table whose `V::clone` panics still counts once (as the hit it
/// is), so `hits + misses + failures` stays the number of calls.
#[test]
fn a_hit_whose_clone_panics_counts_once() {
    use std::sync::atomic::{AtomicBool, Ordering};
    static REFUSE: AtomicBool = AtomicBool::new(false);
    #[derive(Debug, PartialEq)]
    struct Touchy(u32);
    impl Clone for Touchy {
        fn clone(&self) -> Self {
            assert!(!REFUSE.load(Ordering::SeqCst), "clone refused");
            Touchy(self.0)
        }
    }
    with_cache(true, |table: Option<&Table<Key, Touchy>>| {
        let t = table.expect("enabled");
        assert_eq!(get_or_put(table, key(1), || Touchy(1)), Touchy(1));
        REFUSE.store(true, Ordering::SeqCst);
        // The lookup path.
        let hit = catch_unwind(AssertUnwindSafe(|| get_or_put(table, key(1), || Touchy(2))));
        assert!(hit.is_err());
        REFUSE.store(false, Ordering::SeqCst);
        let stats = t.stats();
        assert_eq!((stats.hits, stats.misses, stats.failures), (1, 1, 0));
        assert_eq!(
            fetch_or_put(table, key(1), || Touchy(3)),
            Fetched::Hit(Touchy(1))
        );
        assert_eq!(t.stats().hits, 2);
    });
}
