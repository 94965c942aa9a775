//! A peer at the Redis store's address that is not a Redis server but a hostile one: huge bulk
//! lengths, huge arrays, many bulk strings each within the cap (32 GiB in all), deep nesting, an
//! endless line, trickled bytes, silence. Each case runs
//! in its own process (this test binary re-run with `KCACHE_REDIS_HOSTILE` set) under a 1 GiB
//! address-space limit: every operation is a refusal within its bound, the peer is contacted
//! once per retry pause, the process never aborts, and its peak resident memory stays under
//! 64 MiB. Also: a peer answering one command with two replies, whose second reply no later
//! lookup reads.
#![cfg(feature = "redis")]

mod redis_support;

use std::time::{Duration, Instant};

use redis_support::{DIGEST, key, payload};
use redis_wire::testing::{self, Hostile};
use schedule_cache::placement::PlacementEntry;
use schedule_cache::{Lookup, RedisStore, Refusal, Store, StoreOutcome};
use test_support::child;

const HOSTILE: &str = "KCACHE_REDIS_HOSTILE";

/// The child's body; a no-op unless this process was spawned with [`HOSTILE`] set.
#[test]
fn hostile_redis_peer_child() {
    let Ok(name) = std::env::var(HOSTILE) else {
        return;
    };
    let behaviour = Hostile::from_name(&name).expect("a behaviour");
    child::limit_address_space(1 << 30);
    let port = testing::spawn(behaviour);
    let store = RedisStore::open(&format!("redis://127.0.0.1:{port}/0"))
        .expect("url")
        .with_timeouts(Duration::from_millis(500), Duration::from_secs(1))
        .with_retry_after(Duration::from_secs(600));
    let k = key("hostile");
    let start = Instant::now();
    let first = store.probe::<PlacementEntry>(Some(&k), DIGEST);
    let elapsed = start.elapsed();
    let Lookup::Refused(Refusal::Io { message, .. }) = &first else {
        panic!("{name}: not a refusal: {first:?}");
    };
    assert!(!message.contains("not retried"), "{name}: {message}");
    // In the pause: refused at once, the peer not contacted again.
    match store
        .store(Some(&k), &payload(1, 1, 50))
        .expect("a store is refused, not an error")
    {
        StoreOutcome::Refused(Refusal::Io { message, .. }) => {
            assert!(message.contains("not retried"), "{name}: {message}")
        }
        other => panic!("{name}: {other:?}"),
    }
    let again = store.probe::<PlacementEntry>(Some(&k), DIGEST);
    assert!(
        matches!(&again, Lookup::Refused(Refusal::Io { message, .. }) if message.contains("not retried")),
        "{name}: {again:?}"
    );
    assert_eq!(store.unreachable_count(), 1, "{name}");
    // Generous: the bound is one connect plus one reply deadline (1.5 s); a hang never ends.
    assert!(elapsed < Duration::from_secs(20), "{name}: {elapsed:?}");
    let peak = testing::peak_rss_kib().expect("VmHWM");
    println!(
        "HOSTILE {name} peak_kib={peak} elapsed_ms={} first={message:?}",
        elapsed.as_millis()
    );
}

#[test]
fn a_hostile_redis_peer_is_a_refusal_in_bounded_memory() {
    for behaviour in Hostile::ALL {
        let out = child::rerun("hostile_redis_peer_child", HOSTILE, behaviour.name());
        let line = child::line(&out, "HOSTILE ");
        eprintln!("{line}");
        let peak: u64 = child::field(line, "peak_kib");
        assert!(peak < 64 << 10, "{line}");
    }
}

/// Regression (issue 39): a peer answering one command with two replies made the next command
/// read the second. Here the surplus is a `Found` reply holding a valid entry, which the next
/// lookup (of another key) took as its hit. Now the first lookup is refused and its connection
/// dropped; the next lookups, each on a fresh connection (no retry pause), never read it.
#[test]
fn a_second_reply_to_one_command_is_never_a_later_lookups_hit() {
    use redis_wire::testing::Answer;
    let entry = payload(1, 1, 3);
    let text = ron::ser::to_string_pretty(&entry, ron::ser::PrettyConfig::default()).expect("ron");
    let found = format!("*2\r\n:1\r\n${}\r\n{text}\r\n", text.len());
    let nothing = "*1\r\n:2\r\n";
    let port = testing::spawn_answers(vec![
        Answer::now(format!("{nothing}{found}").as_bytes()),
        Answer::now(nothing.as_bytes()),
    ]);
    let store = RedisStore::open(&format!("redis://127.0.0.1:{port}/0"))
        .expect("url")
        .with_timeouts(Duration::from_millis(500), Duration::from_secs(2))
        .with_retry_after(Duration::ZERO);
    let first = store.probe::<PlacementEntry>(Some(&key("a")), DIGEST);
    assert!(
        matches!(&first, Lookup::Refused(Refusal::Io { message, .. }) if message.contains("more than one reply")),
        "{first:?}"
    );
    for _ in 0..3 {
        let next = store.probe::<PlacementEntry>(Some(&key("b")), DIGEST);
        assert!(matches!(next, Lookup::Refused(_)), "{next:?}");
    }
}
