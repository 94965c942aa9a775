//! A real, private `redis-server` per test: on a free loopback port and a Unix socket in a
//! temporary directory, no persistence, killed and reaped on drop.
//!
//! The binary is `$REDIS_SERVER` if set, else `redis-server` on `PATH`. Without it
//! [`RedisServer::start`] panics saying how to install one: a test that needs the server fails,
//! never skips (`cargo xtask test` installs it when missing and it may).

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The `redis-server` binary: `$REDIS_SERVER` if set, else `redis-server` on `PATH`.
fn binary() -> String {
    std::env::var("REDIS_SERVER").unwrap_or_else(|_| "redis-server".to_owned())
}

/// A `redis-server` child process, killed (and reaped) on drop.
#[derive(Debug)]
pub struct RedisServer {
    child: Option<Child>,
    port: u16,
    dir: tempfile::TempDir,
}

impl RedisServer {
    /// Starts a private server and waits (at most 10 s per try, 5 tries on other ports) until
    /// it answers `PING` on its port and its socket exists. Panics when there is no
    /// `redis-server` binary (saying how to install one) or it never becomes ready.
    pub fn start() -> RedisServer {
        for _ in 0..5 {
            let port = TcpListener::bind("127.0.0.1:0")
                .and_then(|l| l.local_addr())
                .expect("a free loopback port")
                .port();
            let dir = tempfile::tempdir().expect("a temporary directory");
            let mut server = RedisServer {
                child: None,
                port,
                dir,
            };
            match server.spawn() {
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => panic!(
                    "redis-server not found ({}: {e}); this test needs it: install the Debian \
                     package (`apt-get install redis-server`; `cargo xtask test` and `.ci/run` \
                     do this when run as root) or set REDIS_SERVER to the binary",
                    binary()
                ),
                Err(e) => panic!("could not start {}: {e}", binary()),
                Ok(()) => {}
            }
            if server.wait_ready() {
                return server;
            }
            // Lost a race for the port (or a slow start): another port.
        }
        panic!("redis-server did not become ready on any of 5 ports");
    }

    fn spawn(&mut self) -> std::io::Result<()> {
        let child = Command::new(binary())
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .arg("--unixsocket")
            .arg(self.socket())
            .arg("--dir")
            .arg(self.dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?;
        self.child = Some(child);
        Ok(())
    }

    /// Polls `PING` until the server answers and its socket exists (at most 10 s), or the
    /// child exits.
    fn wait_ready(&mut self) -> bool {
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Some(child) = self.child.as_mut()
                && child.try_wait().expect("try_wait").is_some()
            {
                self.child = None;
                return false;
            }
            if answers_ping(self.port) && self.socket().exists() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }

    /// The server's TCP port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:<port>/0`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }

    /// The server's Unix socket.
    pub fn socket(&self) -> PathBuf {
        self.dir.path().join("sock")
    }

    /// SIGKILLs the server and reaps it (a no-op when it is not running).
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts a fresh (empty) server on the same port, killing the running one first.
    pub fn restart(&mut self) {
        self.kill();
        self.spawn().expect("respawn redis-server");
        assert!(self.wait_ready(), "restarted redis-server not ready");
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Whether a Redis server answers `PING` on 127.0.0.1:`port` within half a second.
fn answers_ping(port: u16) -> bool {
    let Ok(mut s) = TcpStream::connect_timeout(
        &std::net::SocketAddr::from(([127, 0, 0, 1], port)),
        Duration::from_millis(500),
    ) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_millis(500)));
    let mut buf = [0u8; 7];
    s.write_all(b"*1\r\n$4\r\nPING\r\n").is_ok()
        && s.read_exact(&mut buf).is_ok()
        && &buf == b"+PONG\r\n"
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A real server: answers, restarts empty on its port, and is gone after drop.
    #[test]
    fn a_private_server_starts_restarts_and_dies() {
        let mut server = RedisServer::start();
        let port = server.port();
        assert!(answers_ping(port));
        assert!(server.socket().exists());
        assert_eq!(server.url(), format!("redis://127.0.0.1:{port}/0"));
        server.kill();
        assert!(!answers_ping(port));
        server.restart();
        assert!(answers_ping(port));
        drop(server);
        assert!(!answers_ping(port));
    }
}
