//! schedule-cache's front door over the Redis store on the reference IR, against a real
//! `redis-server` (moved from schedule-cache's `redis_store` tests, so that schedule-cache
//! needs no dev-dependency on this crate).

#[path = "../../schedule-cache/tests/redis_support/mod.rs"]
mod redis_support;

use redis_support::ServerExt as _;
use reference_ir::ir::{Code, Expr, Index, Precision, Stmt, Symbol, TensorNode};
use reference_ir::schedule::{ReferenceLanguage, Schedule};
use schedule_cache::{
    DiskCache, KeyComponent, Measurements, Miss, RedisStore, ScheduleCache, TimingIdentity,
    TwoLevel,
};

/// The front door over the Redis store alone, and over a directory in front of it: a stored
/// schedule replays from the server, and a miss names the differing component computed from
/// the keys the server lists for the same code.
#[test]
fn the_front_door_explains_misses_over_redis_too() {
    let server = redis_support::Server::start();
    let build = || {
        let i = Symbol::fresh("i");
        let y = TensorNode::new("y", &[32], Precision::F32);
        let body = vec![Stmt::set(&y, vec![Index::var(&i)], Expr::Const(3.0))];
        (Code::new(vec![Stmt::for_(&i, 0, 32, body)]), i)
    };
    let front = |store: RedisStore, device: &str| {
        ScheduleCache::new(
            ReferenceLanguage,
            "cc",
            TimingIdentity {
                device: device.into(),
                toolchain: None,
            },
            store,
        )
    };
    let (code, i) = build();
    let mut s = Schedule::new();
    s.split(&i, 4);
    let published = front(server.store(), "gpu-a")
        .store(&code, &s.ops, Measurements::new(vec![1e-6]))
        .expect("store");
    assert!(published.outcome.is_stored(), "{:?}", published.outcome);

    let (again, _) = build();
    let hit = front(server.store(), "gpu-a")
        .lookup(&again)
        .expect("lookup")
        .expect("a hit from the server");
    assert_eq!(hit.ops.len(), 1);
    let miss = front(server.store(), "gpu-b")
        .lookup(&again)
        .expect("lookup")
        .expect_err("another device");
    assert!(
        matches!(&miss, Miss::NotFound { differing, .. } if differing == &[KeyComponent::Device]),
        "{miss}"
    );
    assert!(
        miss.to_string()
            .ends_with("differ in: device (device: gpu-a → gpu-b)"),
        "{miss}"
    );

    // A directory in front of the server: the shared level's siblings explain the miss.
    let tmp = tempfile::tempdir().expect("tempdir");
    let both = ScheduleCache::new(
        ReferenceLanguage,
        "cc",
        TimingIdentity {
            device: "gpu-b".into(),
            toolchain: None,
        },
        TwoLevel::new(DiskCache::new(tmp.path()), server.store()),
    );
    let miss = both.lookup(&again).expect("lookup").expect_err("miss");
    assert!(
        miss.to_string()
            .ends_with("differ in: device (device: gpu-a → gpu-b)"),
        "{miss}"
    );
}
