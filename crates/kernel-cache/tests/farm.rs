//! The kernel store's farm level against a real `redis-server` on 127.0.0.1 (one private
//! server per test): one machine's compile serves another (back-filled into its local
//! directory), and an unsigned, mis-signed or tampered value is a miss. The hostile-peer tests at
//! the end need no server: their peer is redis-wire's fake one, in a child process.
//!
//! Without a `redis-server` binary each test fails, saying how to install one
//! (`cargo xtask test` and `.ci/run` install it when missing and they may).

use std::net::TcpListener;
use std::time::{Duration, Instant};

use kernel_cache::store::{FarmLevel, KernelStore, MissReason, Outcome, StoreEvent};
use kernel_cache::{BatchKernel, KernelCache, Resolver};
use test_support::child;
use test_support::lines::Lines;
use test_support::lines::misses;
use test_support::lines::recorded;
use test_support::redis::RedisServer as Server;

/// A raw connection to `server`, for inspecting and corrupting its keys.
fn raw(server: &Server) -> redis::RedisResult<redis::Connection> {
    redis::Client::open(server.url())?.get_connection_with_timeout(Duration::from_millis(300))
}

fn batch() -> Vec<BatchKernel<String>> {
    (0..3)
        .map(|i| BatchKernel {
            key: format!("key-{i}"),
            options: vec![],
            symbol: format!("k{i}"),
            source: format!("kernel text {i}"),
        })
        .collect()
}

/// Resolves the batch through `store` on a fresh cache; census and store events.
fn resolve(store: &KernelStore) -> (kernel_cache::Census, Vec<StoreEvent>) {
    resolve_on(store, None)
}

/// [`resolve`] on a machine whose backend gives the batch's options the host part
/// `[host; 32]` (`None`: none).
fn resolve_on(store: &KernelStore, host: Option<u8>) -> (kernel_cache::Census, Vec<StoreEvent>) {
    let backend = Lines::on_host(host);
    let ((out, census), events) = recorded(
        Resolver::new(&KernelCache::new(1 << 20), &backend)
            .store(Some(store))
            .resolve_strict(&batch()),
    );
    let answers = out.expect("resolve never fails for the store");
    for (k, a) in batch().iter().zip(&answers) {
        let text = String::from_utf8(a.program.bytes.clone()).expect("utf-8");
        assert!(text.contains(&k.source));
    }
    (census, events)
}

fn farm(server: &Server, secret: &str) -> FarmLevel {
    FarmLevel::open(&server.url(), secret.as_bytes().to_vec())
        .expect("url")
        .with_timeouts(Duration::from_millis(500), Duration::from_secs(2))
}

/// The farm's keys of one kind (`blob` or `entry`) under the default prefix, at the store's
/// regime segment (`kernels2`; the farm unit test pins the segment to `kernels<REGIME>`).
fn farm_keys(raw: &mut redis::Connection, kind: &str) -> Vec<String> {
    redis::cmd("KEYS")
        .arg(format!("kcache:kernels2:{kind}:*"))
        .query(raw)
        .expect("keys")
}

#[test]
fn one_machines_compile_serves_another_and_is_back_filled() {
    let server = Server::start();
    let tmp = tempfile::tempdir().expect("tmp");
    let a = KernelStore::new(tmp.path().join("a")).with_farm(farm(&server, "farm secret"));
    let b = KernelStore::new(tmp.path().join("b")).with_farm(farm(&server, "farm secret"));
    let (census, _) = resolve(&a);
    assert_eq!(census.kernels_compiled, 3);
    let (census, events) = resolve(&b);
    assert_eq!(census.kernels_compiled, 0, "{events:?}");
    assert_eq!(census.kernels_loaded, 3);
    let shared = events
        .iter()
        .filter(|e| matches!(e.outcome, Outcome::SharedHit { .. }))
        .count();
    assert_eq!(shared, 3, "{events:?}");
    // Back-filled: b answers locally now, even with the server gone.
    drop(server);
    let local = KernelStore::new(tmp.path().join("b"));
    let (census, events) = resolve(&local);
    assert_eq!(census.kernels_loaded, 3, "{events:?}");
    assert!(
        events
            .iter()
            .all(|e| matches!(e.outcome, Outcome::Hit { .. }))
    );
}

/// Machines of two processors on one farm each get their own program from it (the farm
/// key is the entry's name, which holds the host part): a machine of each compiles, then
/// a second machine of each, its local directory empty, loads its processor's program
/// from the farm. With one farm entry per key, the second processor's save replaced the
/// first one's, whose next machine then found a program it refused and compiled.
#[test]
fn machines_of_two_processors_on_one_farm_each_get_their_own_program() {
    let server = Server::start();
    let tmp = tempfile::tempdir().expect("tmp");
    let machine =
        |name: &str| KernelStore::new(tmp.path().join(name)).with_farm(farm(&server, "secret"));
    let (census, _) = resolve_on(&machine("one-a"), Some(1));
    assert_eq!(census.kernels_compiled, 3);
    let (census, events) = resolve_on(&machine("two-a"), Some(2));
    assert_eq!(census.kernels_compiled, 3, "{events:?}");
    for (name, host) in [("one-b", 1), ("two-b", 2)] {
        let (census, events) = resolve_on(&machine(name), Some(host));
        assert_eq!(census.kernels_loaded, 3, "{name}: {events:?}");
        let shared = events
            .iter()
            .filter(|e| matches!(e.outcome, Outcome::SharedHit { .. }))
            .count();
        assert_eq!(shared, 3, "{name}: {events:?}");
    }
    let mut raw = raw(&server).expect("raw");
    assert_eq!(farm_keys(&mut raw, "entry").len(), 6);
    assert_eq!(farm_keys(&mut raw, "blob").len(), 2);
}

#[test]
fn an_unsigned_mis_signed_or_tampered_value_is_a_miss() {
    let server = Server::start();
    let tmp = tempfile::tempdir().expect("tmp");
    let a = KernelStore::new(tmp.path().join("a")).with_farm(farm(&server, "farm secret"));
    resolve(&a);

    // Another secret: every value is mis-signed for it.
    let other = KernelStore::new(tmp.path().join("other")).with_farm(farm(&server, "wrong"));
    let (census, events) = resolve(&other);
    assert_eq!(census.kernels_loaded, 0);
    assert_eq!(misses(&events)[0], MissReason::BadSignature, "{events:?}");

    // Tampered blob bytes under the old MAC, then an unsigned blob.
    let mut raw = raw(&server).expect("raw");
    let keys: Vec<String> = farm_keys(&mut raw, "blob");
    assert_eq!(keys.len(), 1);
    let value: Vec<u8> = redis::cmd("GET")
        .arg(&keys[0])
        .query(&mut raw)
        .expect("get");
    let mut tampered = value.clone();
    *tampered.last_mut().expect("bytes") ^= 1;
    let unsigned = value[65..].to_vec();
    for (what, bad) in [("tampered", tampered), ("unsigned", unsigned)] {
        redis::cmd("SET")
            .arg(&keys[0])
            .arg(&bad)
            .query::<()>(&mut raw)
            .expect("set");
        let fresh = KernelStore::new(tmp.path().join(what)).with_farm(farm(&server, "farm secret"));
        let (census, events) = resolve(&fresh);
        assert_eq!(census.kernels_loaded, 0, "{what}");
        assert_eq!(census.kernels_compiled, 3, "{what}");
        assert_eq!(
            misses(&events)[0],
            MissReason::BadSignature,
            "{what}: {events:?}"
        );
    }
}

/// `BadSignature` is the miss of an entry without a valid MAC as well as a blob's: entries
/// tampered with under the right secret (their blob untouched) give it too.
#[test]
fn a_tampered_entry_is_a_bad_signature_miss_too() {
    let server = Server::start();
    let tmp = tempfile::tempdir().expect("tmp");
    let a = KernelStore::new(tmp.path().join("a")).with_farm(farm(&server, "farm secret"));
    resolve(&a);
    let mut raw = raw(&server).expect("raw");
    let keys: Vec<String> = farm_keys(&mut raw, "entry");
    assert!(!keys.is_empty());
    for key in &keys {
        let mut value: Vec<u8> = redis::cmd("GET").arg(key).query(&mut raw).expect("get");
        *value.last_mut().expect("bytes") ^= 1;
        redis::cmd("SET")
            .arg(key)
            .arg(&value)
            .query::<()>(&mut raw)
            .expect("set");
    }
    let fresh = KernelStore::new(tmp.path().join("b")).with_farm(farm(&server, "farm secret"));
    let (census, events) = resolve(&fresh);
    assert_eq!(census.kernels_loaded, 0);
    assert_eq!(misses(&events)[0], MissReason::BadSignature, "{events:?}");
}

#[test]
fn an_unreachable_server_is_a_miss_never_a_failed_resolve() {
    let port = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("port")
        .port();
    let tmp = tempfile::tempdir().expect("tmp");
    let dead = FarmLevel::open(&format!("redis://127.0.0.1:{port}/0"), b"s".to_vec())
        .expect("url")
        .with_timeouts(Duration::from_millis(200), Duration::from_millis(200));
    let store = KernelStore::new(tmp.path().join("k")).with_farm(dead);
    let (census, events) = resolve(&store);
    assert_eq!(census.kernels_compiled, 3);
    assert!(
        matches!(&misses(&events)[0], MissReason::Refused(_)),
        "{events:?}"
    );
    // Saved locally all the same.
    let (census, _) = resolve(&KernelStore::new(tmp.path().join("k")));
    assert_eq!(census.kernels_loaded, 3);
}

/// Whoever can write to the server (without the secret) cannot make a lookup read
/// without bound: an entry value past a local entry's cap, or a blob value past the
/// store's blob cap, is refused by the server without being sent.
#[test]
fn a_value_past_the_cap_is_refused_without_being_fetched() {
    let server = Server::start();
    let tmp = tempfile::tempdir().expect("tmp");
    let a = KernelStore::new(tmp.path().join("a")).with_farm(farm(&server, "farm secret"));
    resolve(&a);
    let mut raw = raw(&server).expect("raw");
    let blob_keys = farm_keys(&mut raw, "blob");
    assert_eq!(blob_keys.len(), 1);
    // A blob of 8 MiB, for a store whose blobs are capped at 1 MiB.
    redis::cmd("SET")
        .arg(&blob_keys[0])
        .arg(vec![b'x'; 8 << 20])
        .query::<()>(&mut raw)
        .expect("set");
    let small = |name: &str| {
        KernelStore::new(tmp.path().join(name))
            .with_max_bytes(1 << 20)
            .with_farm(farm(&server, "farm secret"))
    };
    let (census, events) = resolve(&small("b"));
    assert_eq!(census.kernels_loaded, 0);
    assert!(
        matches!(&misses(&events)[0], MissReason::Refused(m) if m.contains("past the cap")),
        "{events:?}"
    );
    // An entry of 1 MiB (a local entry is at most 4 KiB).
    for key in farm_keys(&mut raw, "entry") {
        redis::cmd("SET")
            .arg(&key)
            .arg(vec![b'y'; 1 << 20])
            .query::<()>(&mut raw)
            .expect("set");
    }
    let (census, events) = resolve(&small("c"));
    assert_eq!(census.kernels_loaded, 0);
    assert!(
        matches!(&misses(&events)[0], MissReason::Refused(m) if m.contains("past the cap")),
        "{events:?}"
    );
}

/// A bad value at a blob's name (written by someone without the secret) costs a miss
/// until the next save, which repairs it: a save rewrites the blob rather than keeping
/// whatever the server holds under its name.
#[test]
fn a_bad_blob_value_is_repaired_by_the_next_save() {
    let server = Server::start();
    let tmp = tempfile::tempdir().expect("tmp");
    let a = KernelStore::new(tmp.path().join("a")).with_farm(farm(&server, "farm secret"));
    resolve(&a);
    let mut raw = raw(&server).expect("raw");
    let blob_keys: Vec<String> = farm_keys(&mut raw, "blob");
    assert_eq!(blob_keys.len(), 1);
    redis::cmd("SET")
        .arg(&blob_keys[0])
        .arg(b"garbage".to_vec())
        .query::<()>(&mut raw)
        .expect("set");
    let b = KernelStore::new(tmp.path().join("b")).with_farm(farm(&server, "farm secret"));
    let (census, events) = resolve(&b);
    assert_eq!(census.kernels_compiled, 3, "{events:?}");
    let c = KernelStore::new(tmp.path().join("c")).with_farm(farm(&server, "farm secret"));
    let (census, events) = resolve(&c);
    assert_eq!(
        census.kernels_loaded, 3,
        "the bad value was kept: {events:?}"
    );
}

/// A farm user whose server ACL denies scripts (`-@scripting`): its lookups, each a
/// one-line script (the bounded read), are refused by the server, a `Refused` miss naming
/// the permission, never a failed resolve; its saves (plain `SET`s) still reach the farm,
/// and a machine whose user may run scripts loads what it saved.
#[test]
fn a_farm_user_denied_scripts_misses_but_still_saves() {
    let server = Server::start();
    let mut raw = raw(&server).expect("raw");
    redis::cmd("ACL")
        .arg(
            &[
                "SETUSER",
                "noscript",
                "on",
                ">pw",
                "~*",
                "+@all",
                "-@scripting",
            ][..],
        )
        .query::<()>(&mut raw)
        .expect("acl setuser");
    let tmp = tempfile::tempdir().expect("tmp");
    let limited = FarmLevel::open(
        &format!("redis://noscript:pw@127.0.0.1:{}/0", server.port()),
        b"secret".to_vec(),
    )
    .expect("url")
    .with_timeouts(Duration::from_millis(500), Duration::from_secs(2));
    let store = KernelStore::new(tmp.path().join("limited")).with_farm(limited);
    let (census, events) = resolve(&store);
    assert_eq!(census.kernels_compiled, 3, "{events:?}");
    assert!(
        matches!(&misses(&events)[0], MissReason::Refused(why) if why.contains("no permissions")),
        "{events:?}"
    );
    let full = KernelStore::new(tmp.path().join("full")).with_farm(farm(&server, "secret"));
    let (census, events) = resolve(&full);
    assert_eq!(census.kernels_compiled, 0, "{events:?}");
    assert_eq!(census.kernels_loaded, 3, "{events:?}");
}

/// Names the hostile peer's behaviour in a child process (see below).
const HOSTILE: &str = "KCACHE_FARM_HOSTILE";

/// The child's body; a no-op unless this process was spawned with [`HOSTILE`] set. Under a
/// 1 GiB address-space limit (as the abort was shown), a store whose farm is a hostile
/// peer resolves a batch: every farm lookup is a `Refused` miss, the batch compiles locally,
/// only the first lookup reaches the peer (the rest are refused in the retry pause), and the
/// process's peak resident memory is printed for the parent.
#[test]
fn hostile_farm_peer_child() {
    use redis_wire::testing::{self, Hostile};
    let Ok(name) = std::env::var(HOSTILE) else {
        return;
    };
    let behaviour = Hostile::from_name(&name).expect("a behaviour");
    child::limit_address_space(1 << 30);
    let port = testing::spawn(behaviour);
    let tmp = tempfile::tempdir().expect("tmp");
    let io_timeout = Duration::from_secs(1);
    let farm = FarmLevel::open(&format!("redis://127.0.0.1:{port}/0"), b"s".to_vec())
        .expect("url")
        .with_timeouts(Duration::from_millis(500), io_timeout)
        .with_retry_after(Duration::from_secs(600));
    let store = KernelStore::new(tmp.path().join("k")).with_farm(farm);
    let start = Instant::now();
    let (census, events) = resolve(&store);
    let elapsed = start.elapsed();
    assert_eq!(census.kernels_compiled, 3, "{events:?}");
    let refusals: Vec<String> = misses(&events)
        .into_iter()
        .map(|m| match m {
            MissReason::Refused(why) => why,
            other => panic!("{name}: a miss other than a refusal: {other:?}"),
        })
        .collect();
    assert_eq!(refusals.len(), 3, "{name}: {events:?}");
    let reached = refusals
        .iter()
        .filter(|w| !w.contains("not retried yet"))
        .count();
    assert_eq!(
        reached, 1,
        "{name}: the peer was contacted past the first failure: {refusals:?}"
    );
    // Generous: the bound is one connect plus one reply deadline (1.5 s); a hang never ends.
    assert!(elapsed < Duration::from_secs(20), "{name}: {elapsed:?}");
    let peak = testing::peak_rss_kib().expect("VmHWM");
    println!(
        "HOSTILE {name} peak_kib={peak} elapsed_ms={} first={:?}",
        elapsed.as_millis(),
        refusals[0]
    );
}

/// A peer at the farm's address sending huge bulk lengths, huge arrays, many bulk strings each
/// within the cap (32 GiB in all), deep nesting, an endless line, trickled bytes or nothing: each case, run in its own process under a 1 GiB
/// address-space limit, is a refused miss within its bound, never an abort, with the child's
/// peak resident memory under 64 MiB.
#[test]
fn a_hostile_farm_peer_is_a_refused_miss_in_bounded_memory() {
    for behaviour in redis_wire::testing::Hostile::ALL {
        let out = child::rerun("hostile_farm_peer_child", HOSTILE, behaviour.name());
        let line = child::line(&out, "HOSTILE ");
        eprintln!("{line}");
        let peak: u64 = child::field(line, "peak_kib");
        assert!(peak < 64 << 10, "{line}");
    }
}

/// The farm's own blob cap ([`kernel_cache::store::DEFAULT_MAX_BLOB_BYTES`], 16 MiB) bounds a
/// fetch even for a store allowed 1 GiB of blobs (its default): a 17 MiB value is refused
/// without being sent, and a farm allowed more fetches it (then refuses its MAC).
#[test]
fn a_blob_past_the_farm_cap_is_refused_whatever_the_store_allows() {
    let server = Server::start();
    let tmp = tempfile::tempdir().expect("tmp");
    let a = KernelStore::new(tmp.path().join("a")).with_farm(farm(&server, "farm secret"));
    resolve(&a);
    let mut raw = raw(&server).expect("raw");
    let blob_keys: Vec<String> = farm_keys(&mut raw, "blob");
    assert_eq!(blob_keys.len(), 1);
    redis::cmd("SET")
        .arg(&blob_keys[0])
        .arg(vec![b'x'; 17 << 20])
        .query::<()>(&mut raw)
        .expect("set");
    let b = KernelStore::new(tmp.path().join("b")).with_farm(farm(&server, "farm secret"));
    let (_, events) = resolve(&b);
    assert!(
        matches!(&misses(&events)[0], MissReason::Refused(m) if m.contains("past the cap of 16777281")),
        "{events:?}"
    );
    // b's save repaired the blob: plant it again.
    redis::cmd("SET")
        .arg(&blob_keys[0])
        .arg(vec![b'x'; 17 << 20])
        .query::<()>(&mut raw)
        .expect("set");
    let roomy = farm(&server, "farm secret").with_max_blob_bytes(32 << 20);
    let c = KernelStore::new(tmp.path().join("c")).with_farm(roomy);
    let (_, events) = resolve(&c);
    assert!(
        matches!(&misses(&events)[0], MissReason::BadSignature),
        "{events:?}"
    );
}

/// A blob past the farm's blob cap is not pushed (no lookup of the level would fetch it): the
/// save is local only, reported `NotSaved` for the farm, and the server holds no blob.
#[test]
fn a_blob_past_the_farm_cap_is_not_pushed() {
    let server = Server::start();
    let tmp = tempfile::tempdir().expect("tmp");
    let tiny = farm(&server, "farm secret").with_max_blob_bytes(8);
    let a = KernelStore::new(tmp.path().join("a")).with_farm(tiny);
    let (census, events) = resolve(&a);
    assert_eq!(census.kernels_compiled, 3);
    assert!(
        events.iter().any(|e| matches!(&e.outcome,
            Outcome::NotSaved(why) if format!("{why:?}").contains("not pushed"))),
        "{events:?}"
    );
    let mut raw = raw(&server).expect("raw");
    let blobs: Vec<String> = farm_keys(&mut raw, "blob");
    assert!(blobs.is_empty(), "{blobs:?}");
    // Saved locally all the same.
    let (census, _) = resolve(&KernelStore::new(tmp.path().join("a")));
    assert_eq!(census.kernels_loaded, 3);
}
