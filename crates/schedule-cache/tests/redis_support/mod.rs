//! Helpers shared by the `redis_*` integration tests: a private `redis-server` per test, raw
//! access to it, and self-checking entries.
#![allow(dead_code, unreachable_pub)]

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use schedule_cache::CacheKey;
use schedule_cache::placement::{Direction, Flip, PlacementEntry, Shipped};
use schedule_cache::redis_store::RedisStore;

/// The digest every test entry uses (the first key component).
pub const DIGEST: &str = "5eed0000bb";

/// A key `DIGEST-<rest>`.
pub fn key(rest: &str) -> CacheKey {
    CacheKey::new(&format!("{DIGEST}-{rest}")).expect("valid key")
}

/// The `redis-server` binary: `$REDIS_SERVER` if set, else `redis-server` on `PATH`.
fn binary() -> String {
    std::env::var("REDIS_SERVER").unwrap_or_else(|_| "redis-server".to_owned())
}

/// A `redis-server` child process on a free loopback port, killed (and reaped) on drop.
pub struct Server {
    child: Option<Child>,
    port: u16,
    dir: tempfile::TempDir,
}

/// There is no `redis-server`: the test fails (never skips), saying how to get one.
fn absent(why: &str) -> ! {
    panic!(
        "redis-server not found ({why}); the Redis store tests need it: install the Debian \
         package (`apt-get install redis-server`; `cargo xtask test` and `.ci/run` do this \
         when run as root) or set REDIS_SERVER to the binary"
    );
}

impl Server {
    /// Starts a private server (no persistence); panics when there is no `redis-server`
    /// binary, saying how to install one: a test that needs the server never passes
    /// without it.
    pub fn start() -> Server {
        for _ in 0..5 {
            let port = TcpListener::bind("127.0.0.1:0")
                .expect("bind an ephemeral port")
                .local_addr()
                .expect("local addr")
                .port();
            let mut server = Server {
                child: None,
                port,
                dir: tempfile::tempdir().expect("tempdir"),
            };
            match server.spawn() {
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    absent(&format!("{}: {e}", binary()));
                }
                Err(e) => panic!("could not start {}: {e}", binary()),
                Ok(()) => {}
            }
            if server.wait_ready() {
                return server;
            }
            // Lost a race for the port (or a slow start): try another one.
        }
        panic!("redis-server did not become ready on any of 5 ports");
    }

    fn spawn(&mut self) -> std::io::Result<()> {
        let child = Command::new(binary())
            .args(["--port", &self.port.to_string()])
            .args(["--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(self.dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?;
        self.child = Some(child);
        Ok(())
    }

    /// Polls PING until the server answers (at most 10 s) or the child exits.
    fn wait_ready(&mut self) -> bool {
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Some(child) = self.child.as_mut()
                && child.try_wait().expect("try_wait").is_some()
            {
                self.child = None;
                return false;
            }
            if let Ok(client) = redis::Client::open(self.url())
                && let Ok(mut con) = client.get_connection_with_timeout(Duration::from_millis(200))
                && redis::cmd("PING").query::<String>(&mut con).is_ok()
            {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }

    /// `redis://127.0.0.1:<port>/0`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }

    /// A store on this server with short timeouts and a short retry pause.
    pub fn store(&self) -> RedisStore {
        RedisStore::open(&self.url())
            .expect("url")
            .with_timeouts(Duration::from_millis(500), Duration::from_secs(2))
            .with_retry_after(Duration::from_millis(50))
    }

    /// A raw connection for inspecting and corrupting the server's keys.
    pub fn raw(&self) -> redis::Connection {
        redis::Client::open(self.url())
            .expect("url")
            .get_connection_with_timeout(Duration::from_secs(2))
            .expect("connect")
    }

    /// SIGKILLs the server and reaps it.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts a fresh (empty) server on the same port after [`Server::kill`].
    pub fn restart(&mut self) {
        self.kill();
        self.spawn().expect("respawn redis-server");
        assert!(self.wait_ready(), "restarted redis-server not ready");
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A placement entry of `flips` flips that encodes `(writer, seq)` in every flip, so a reader
/// can tell whether an entry is one some writer produced whole ([`decode`]).
pub fn payload(writer: u32, seq: u32, flips: u32) -> PlacementEntry {
    let dirs = [
        Direction::Materialize,
        Direction::Inline,
        Direction::Footprint,
    ];
    let flips = (0..flips)
        .map(|i| Flip {
            node: writer << 24 | (seq & 0xffff) << 8 | (i & 0xff),
            direction: dirs[(i % 3) as usize],
        })
        .collect();
    let shipped = [Shipped::A, Shipped::B, Shipped::Refined][(seq % 3) as usize];
    PlacementEntry::new(DIGEST, flips, shipped)
}

/// `(writer, seq, flips)` if `e` is exactly `payload(writer, seq, flips)`.
pub fn decode(e: &PlacementEntry) -> Option<(u32, u32, u32)> {
    let first = e.flips.first()?.node;
    let (writer, seq) = (first >> 24, (first >> 8) & 0xffff);
    let n = u32::try_from(e.flips.len()).ok()?;
    (payload(writer, seq, n) == *e).then_some((writer, seq, n))
}
