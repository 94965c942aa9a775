//! `with_cold_caches` with the real C backend. Every test of this file takes `SERIAL`:
//! a cold scope empties every cache of the process, so tests that publish must not
//! overlap one.

#![allow(clippy::unwrap_used)]

mod common;

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Mutex;

use common::*;
use kernel_cache::{KernelCache, resolve, with_cold_caches};

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

#[test]
fn a_cold_scope_recompiles_and_restores_on_return() {
    let _serial = serial();
    let b = backend();
    let cache = KernelCache::new(1 << 30);
    let warm = elementwise("warm", "a[i] + b[i]", &[]);
    let outside = resolve(&cache, std::slice::from_ref(&warm), &b).unwrap();
    let stats = cache.stats();
    let inside = with_cold_caches(|| {
        assert!(cache.is_empty());
        assert_eq!(cache.stats().retained_bytes, 0);
        // A compile inside reuses nothing published before.
        let inside = resolve(&cache, std::slice::from_ref(&warm), &b).unwrap();
        assert_eq!(b.programs_compiled(), 2);
        assert!(!inside[0].same_program(&outside[0]));
        let fresh = resolve(&cache, &[elementwise("fresh", "a[i]", &[])], &b).unwrap();
        assert!(cache.find(&elementwise("fresh", "a[i]", &[]).key).is_some());
        (inside, fresh)
    });
    // What the cache held is back; what the scope published is gone.
    let again = cache.find(&warm.key).unwrap();
    assert!(again.same_program(&outside[0]));
    assert!(cache.find(&elementwise("fresh", "a[i]", &[]).key).is_none());
    let after = cache.stats();
    assert_eq!(
        (after.retained_bytes, after.groups, after.entries),
        (stats.retained_bytes, stats.groups, stats.entries)
    );
    // Values handed out inside stay valid.
    assert_eq!(run(&inside.0[0], 4), run(&outside[0], 4));
    assert_eq!(run(&inside.1[0], 4), inputs(4).0);
}

#[test]
fn a_cold_scope_restores_on_panic_and_the_panic_continues() {
    let _serial = serial();
    let b = backend();
    let cache = KernelCache::new(1 << 30);
    let warm = elementwise("warm_p", "a[i] * b[i]", &[]);
    resolve(&cache, std::slice::from_ref(&warm), &b).unwrap();
    let mut handed_out = None;
    let caught = catch_unwind(AssertUnwindSafe(|| {
        with_cold_caches(|| {
            assert!(cache.find(&warm.key).is_none());
            handed_out = Some(resolve(&cache, &[elementwise("doomed", "b[i]", &[])], &b).unwrap());
            panic!("test panic inside the cold scope");
        })
    }));
    let payload = caught.unwrap_err();
    assert_eq!(
        payload.downcast_ref::<&str>(),
        Some(&"test panic inside the cold scope")
    );
    assert!(cache.find(&warm.key).is_some(), "restored on panic");
    assert!(
        cache
            .find(&elementwise("doomed", "b[i]", &[]).key)
            .is_none(),
        "the scope's publishes are discarded"
    );
    assert_eq!(cache.stats().groups, 1);
    assert_eq!(run(&handed_out.unwrap()[0], 3), inputs(3).1);
}

#[test]
fn scopes_nest_and_caches_created_inside_end_empty() {
    let _serial = serial();
    let b = backend();
    let outer_cache = KernelCache::new(1 << 30);
    let k0 = elementwise("n0", "a[i] + 1.0f", &[]);
    let k1 = elementwise("n1", "a[i] + 2.0f", &[]);
    let k2 = elementwise("n2", "a[i] + 3.0f", &[]);
    resolve(&outer_cache, std::slice::from_ref(&k0), &b).unwrap();
    let created_inside = with_cold_caches(|| {
        resolve(&outer_cache, std::slice::from_ref(&k1), &b).unwrap();
        let inner_cache = KernelCache::new(1 << 30);
        resolve(&inner_cache, std::slice::from_ref(&k2), &b).unwrap();
        with_cold_caches(|| {
            assert!(outer_cache.is_empty() && inner_cache.is_empty());
            resolve(&outer_cache, std::slice::from_ref(&k2), &b).unwrap();
        });
        // The inner scope put back what the outer scope had published.
        assert!(outer_cache.find(&k1.key).is_some());
        assert!(outer_cache.find(&k2.key).is_none());
        assert!(inner_cache.find(&k2.key).is_some());
        inner_cache
    });
    assert!(outer_cache.find(&k0.key).is_some());
    assert!(outer_cache.find(&k1.key).is_none());
    assert!(
        created_inside.is_empty(),
        "a cache created inside ends empty"
    );
    assert_eq!(created_inside.stats().retained_bytes, 0);
}
