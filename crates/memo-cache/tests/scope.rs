//! A table lives exactly as long as its `with_cache` scope: it is dropped with all its
//! values on a normal exit and on a panic; a disabled scope computes everything.
#![allow(clippy::unwrap_used)]

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::{AtomicIsize, Ordering};

use memo_cache::{Fetched, Key, fetch_or_put, get_or_put, try_fetch_or_put, with_cache};

/// A value that counts how many of its copies are alive.
struct Tracked {
    live: Arc<AtomicIsize>,
    n: u32,
}

impl Tracked {
    fn new(live: &Arc<AtomicIsize>, n: u32) -> Self {
        live.fetch_add(1, Ordering::SeqCst);
        Tracked {
            live: Arc::clone(live),
            n,
        }
    }
}

impl Clone for Tracked {
    fn clone(&self) -> Self {
        Tracked::new(&self.live, self.n)
    }
}

impl Drop for Tracked {
    fn drop(&mut self) {
        self.live.fetch_sub(1, Ordering::SeqCst);
    }
}

fn key(i: u8) -> Key {
    Key::of_parts(&[b"test", &[i]])
}

#[test]
fn normal_exit_drops_the_table_and_every_value() {
    let live = Arc::new(AtomicIsize::new(0));
    let sum = with_cache(true, |table| {
        let mut sum = 0;
        for i in 0..5u8 {
            sum += get_or_put(table, key(i), || Tracked::new(&live, u32::from(i))).n;
        }
        // The returned copies are gone; the five stored ones are alive.
        assert_eq!(live.load(Ordering::SeqCst), 5);
        assert_eq!(table.map(|t| t.len()), Some(5));
        sum
    });
    assert_eq!(sum, 10);
    assert_eq!(live.load(Ordering::SeqCst), 0, "values outlived the scope");
}

#[test]
fn panic_drops_the_table_and_propagates_the_panic() {
    let live = Arc::new(AtomicIsize::new(0));
    let result = catch_unwind(AssertUnwindSafe(|| {
        with_cache(true, |table| {
            for i in 0..3u8 {
                get_or_put(table, key(i), || Tracked::new(&live, 0));
            }
            assert_eq!(live.load(Ordering::SeqCst), 3);
            panic!("the search failed");
        })
    }));
    let payload = result.expect_err("the panic must reach the caller");
    assert_eq!(payload.downcast_ref::<&str>(), Some(&"the search failed"));
    assert_eq!(live.load(Ordering::SeqCst), 0, "values outlived the scope");
}

#[test]
fn each_scope_starts_empty() {
    for _ in 0..2 {
        with_cache(true, |table| {
            assert_eq!(fetch_or_put(table, key(1), || 1), Fetched::Miss(1));
            assert_eq!(fetch_or_put(table, key(1), || 2), Fetched::Hit(1));
        });
    }
    // Nested scopes are independent tables too.
    with_cache(true, |outer| {
        get_or_put(outer, key(1), || 1);
        with_cache(true, |inner| {
            assert_eq!(fetch_or_put(inner, key(1), || 2), Fetched::Miss(2));
        });
        assert_eq!(fetch_or_put(outer, key(1), || 3), Fetched::Hit(1));
    });
}

#[test]
fn disabled_scope_computes_everything_and_reports_misses() {
    let live = Arc::new(AtomicIsize::new(0));
    let mut computed = 0;
    with_cache(false, |table: Option<&memo_cache::Table<Key, Tracked>>| {
        assert!(table.is_none());
        for _ in 0..3 {
            let got = fetch_or_put(table, key(7), || {
                computed += 1;
                Tracked::new(&live, 7)
            });
            assert!(!got.is_hit());
            assert_eq!(got.value().n, 7);
        }
        let failed: Result<Fetched<Tracked>, &str> = try_fetch_or_put(table, key(7), || Err("no"));
        assert_eq!(failed.err(), Some("no"));
        // Nothing was kept anywhere.
        assert_eq!(live.load(Ordering::SeqCst), 0);
    });
    assert_eq!(computed, 3);
}
