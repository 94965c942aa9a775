//! A small RESP2 client for kcache's two Redis levels (the kernel farm and the schedule
//! `RedisStore`) whose every reply is bounded **before** anything is allocated for it.
//!
//! Why not redis-rs's own connection: its reply parser (redis-rs 1.8) reserves what a peer
//! announces. A server (or whatever answers at the Redis address) replying `$4000000000` or
//! `*2000000000` makes it allocate gigabytes, and aborts the process under a memory limit. A
//! cache must treat its server as a peer that can fail in any way: a failing server is a miss
//! or a refusal, never an abort, a hang or an unbounded allocation.
//!
//! What is guaranteed, for every reply read by [`Connection::query`] (all bounds are in
//! [`Limits`]):
//!
//! - a bulk string longer than [`Limits::max_bulk`] is refused from its length line, before
//!   one byte of it is read or allocated;
//! - a reply holds at most [`Limits::max_elements`] array elements in all, nests at most
//!   [`Limits::max_depth`] arrays deep, and an array's slots are counted against
//!   [`Limits::max_total`] before they are reserved;
//! - a status, error or integer line longer than [`Limits::max_line`] is refused;
//! - the memory a reply holds (bulk bytes, line bytes, array slots) never exceeds
//!   [`Limits::max_total`];
//! - the whole reply arrives within the connection's I/O timeout (a deadline over the reply,
//!   not per read: a peer trickling one byte per interval is cut off at the deadline), and a
//!   command's bytes are written within it too;
//! - a TCP connect takes at most the connect timeout per address the host name resolves to,
//!   then `AUTH` and `SELECT` (when the URL asks) at most the I/O timeout each. Not bounded
//!   here: the system resolver's name lookup (use an address, as the tests do, where that
//!   matters) and a Unix socket's connect, which waits only while the listener's backlog is full.
//!
//! - one reply per command: bytes left after a reply, or waiting on the socket when the next
//!   command is about to be sent (a peer that answered one command twice), refuse the command
//!   and drop the connection, so a reply is never read as the answer of a later command (a
//!   surplus reply that arrives only after the next command was sent cannot be told from that
//!   command's reply: that is a peer answering wrongly, like any other).
//!
//! Every violation is a typed [`WireError`]; after any error but a server's error reply the
//! connection's stream may be out of step, so the connection drops itself (every further
//! command is refused at once) and must be replaced (both clients do). Only RESP2 is spoken (no `HELLO 3`): a RESP3
//! type byte is a protocol error. The parser is held equal to redis-rs's own
//! (`redis::parse_redis_value`) on every input it accepts by a property test over every byte.
//!
//! # URLs
//!
//! [`Target::parse`] reads a few URL forms with a small parser of its own (not redis-rs's,
//! whose `url` dependency builds the ICU stack for international host names); a script's
//! SHA-1 is RustCrypto's `sha1`. redis-rs is only a dev-dependency: the tests hold this
//! crate's reply parser and URL parser to its own. The forms:
//!
//! - `redis://[user[:password]@]host[:port][/db][?protocol=P][#fragment]` (scheme `valkey`
//!   too): `host` is a name or IPv4 address of ASCII letters, digits, `.`, `-`, `_` and `~`, or
//!   a bracketed IPv6 address (`[::1]`); never a wildcard (`0.0.0.0`, `::`). `port` is decimal
//!   (default 6379). `db` is a decimal number (default 0), with `/` around it. `user` and
//!   `password` are percent-decoded (`%40` for `@`); an empty one is none.
//! - `unix://[localhost]/path[?db=N][&user=U][&pass=P]` (schemes `redis+unix` and `valkey+unix`
//!   too): the socket's absolute path, percent-decoded; the query is form-decoded (`+` is a
//!   space).
//! - `protocol`, where given, is `2`, `resp2`, `3` or `resp3` (only RESP2 is spoken either
//!   way); other query keys of a TCP URL are ignored.
//! - `rediss://` and `valkeys://` (TLS) are refused: TLS is not supported.
//!
//! Every URL accepted here, redis-rs 1.8 accepts too and reads as the same address, user,
//! password and database (a property test over generated URLs); some it accepts are refused
//! here (international host names, control characters or spaces, a signed database, `.` and
//! `..` in a socket path, spelled or percent-encoded as `%2e`), never the other way round.
//!
//! # Versions
//!
//! What a minor version may add: variants of the `#[non_exhaustive]` [`WireError`] (a new
//! refusal; a `match` on it needs a `_` arm) and new commands. No bound in [`Limits`] is raised
//! by default without a breaking release.

#![forbid(unsafe_code)]
#![deny(missing_docs)]

use std::fmt;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::time::{Duration, Instant};

#[cfg(feature = "testing")]
pub mod testing;
mod url;

/// The bounds on one reply (see the crate docs for what each guarantees).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// The longest bulk string accepted, in bytes.
    pub max_bulk: usize,
    /// The most array elements in one reply, nested ones included.
    pub max_elements: usize,
    /// The deepest nesting of arrays (a top-level array is depth 1). The parser recurses once
    /// per level: keep it small (the defaults use 4).
    pub max_depth: usize,
    /// The longest status, error or integer line, in bytes (without its CRLF).
    pub max_line: usize,
    /// The most memory one reply may hold: bulk and line bytes plus array slots.
    pub max_total: usize,
}

impl Limits {
    /// Limits for replies holding at most one value of `max_bulk` bytes besides small ones:
    /// 4096 elements, depth 4, lines of 64 KiB, in all `max_bulk` plus 1 MiB.
    pub fn for_values_up_to(max_bulk: usize) -> Limits {
        Limits {
            max_bulk,
            max_elements: 4096,
            max_depth: 4,
            max_line: 64 << 10,
            max_total: max_bulk.saturating_add(1 << 20),
        }
    }
}

impl Default for Limits {
    /// [`Limits::for_values_up_to`] 1 MiB.
    fn default() -> Limits {
        Limits::for_values_up_to(1 << 20)
    }
}

/// A RESP2 reply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Value {
    /// A null bulk string or null array (`$-1`, `*-1`).
    Nil,
    /// An integer reply.
    Int(i64),
    /// A status reply (`+OK`), UTF-8.
    SimpleString(String),
    /// A bulk string, any bytes.
    BulkString(Vec<u8>),
    /// An array.
    Array(Vec<Value>),
    /// An error reply nested in an array (a top-level error is [`WireError::Server`]).
    Error(String),
}

/// Why a command got no usable reply.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WireError {
    /// The URL does not parse, or names a transport this client does not speak (TLS).
    #[error("redis URL: {0}")]
    Url(String),
    /// Connecting, writing or reading failed (`kind` `TimedOut` for a deadline passed,
    /// `UnexpectedEof` for a peer that closed mid-reply).
    #[error("{during}: {message}")]
    Io {
        /// What was being done.
        during: &'static str,
        /// The I/O error's kind.
        kind: io::ErrorKind,
        /// The I/O error's text.
        message: String,
    },
    /// The reply passed one of the [`Limits`]; nothing past the bound was read or allocated.
    #[error("reply refused: {0}")]
    Limit(String),
    /// The peer did not speak RESP2.
    #[error("protocol error: {0}")]
    Protocol(String),
    /// The server answered an error reply (its text, e.g. `NOSCRIPT ...`).
    #[error("server error: {0}")]
    Server(String),
}

impl WireError {
    /// The nearest I/O error kind: the I/O error's own kind, `InvalidData` for a limit or a
    /// protocol error, `Other` for a server error or a bad URL.
    pub fn kind(&self) -> io::ErrorKind {
        match self {
            WireError::Io { kind, .. } => *kind,
            WireError::Limit(_) | WireError::Protocol(_) => io::ErrorKind::InvalidData,
            WireError::Server(_) | WireError::Url(_) => io::ErrorKind::Other,
        }
    }

    /// Whether a deadline passed (connecting, writing or reading).
    pub fn is_timeout(&self) -> bool {
        self.kind() == io::ErrorKind::TimedOut
    }

    /// Whether the server is unreachable or misbehaving at the connection level (every error
    /// but a server error reply): the caller should drop the connection and back off.
    pub fn is_connection_level(&self) -> bool {
        !matches!(self, WireError::Server(_))
    }

    fn io(during: &'static str, e: &io::Error) -> WireError {
        let kind = match e.kind() {
            // A socket timeout reads as `WouldBlock` on Unix.
            io::ErrorKind::WouldBlock => io::ErrorKind::TimedOut,
            k => k,
        };
        let message = if kind == io::ErrorKind::TimedOut {
            "timed out (the I/O deadline passed)".to_owned()
        } else {
            e.to_string()
        };
        WireError::Io {
            during,
            kind,
            message,
        }
    }
}

/// Where a server is and how to log in: parsed from a URL, password never shown by `Debug` or
/// [`Target::addr`].
#[derive(Clone)]
pub struct Target {
    addr: Addr,
    username: Option<String>,
    password: Option<String>,
    db: i64,
}

#[derive(Clone, Debug)]
enum Addr {
    Tcp(String, u16),
    Unix(PathBuf),
}

impl fmt::Debug for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Target")
            .field("addr", &self.addr)
            .field("db", &self.db)
            .finish_non_exhaustive()
    }
}

impl Target {
    /// Parses `redis://[user[:password]@]host[:port][/db]` or `unix:///path[?db=N]` (the forms
    /// are listed in the crate docs, "URLs"; every URL accepted, redis-rs reads the same way).
    /// Does not connect.
    ///
    /// # Errors
    /// [`WireError::Url`] if the URL is not one of those forms or asks for TLS.
    pub fn parse(url: &str) -> Result<Target, WireError> {
        let parsed = url::parse(url)?;
        Ok(Target {
            addr: parsed.addr,
            username: parsed.username,
            password: parsed.password,
            db: parsed.db,
        })
    }

    /// The address: `host:port` or the socket's path (never a password).
    pub fn addr(&self) -> String {
        match &self.addr {
            Addr::Tcp(host, port) => format!("{host}:{port}"),
            Addr::Unix(path) => path.display().to_string(),
        }
    }

    /// The database number selected after connecting.
    pub fn db(&self) -> i64 {
        self.db
    }
}

enum Stream {
    Tcp(TcpStream),
    Unix(UnixStream),
}

/// A socket whose every read and write is bounded by one deadline (set per reply / command).
struct Deadlined {
    stream: Stream,
    deadline: Instant,
}

impl Deadlined {
    fn remaining(&self) -> io::Result<Duration> {
        let left = self.deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the reply's deadline passed",
            ))
        } else {
            Ok(left)
        }
    }
}

/// What waits on an idle connection's socket (read without blocking).
enum Idle {
    /// Nothing: the stream is in step.
    Nothing,
    /// Bytes no command asked for (at most one was consumed).
    Bytes,
    /// The peer closed its end.
    Closed,
}

impl Stream {
    fn set_nonblocking(&self, on: bool) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.set_nonblocking(on),
            Stream::Unix(s) => s.set_nonblocking(on),
        }
    }

    fn read_raw(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.read(buf),
            Stream::Unix(s) => s.read(buf),
        }
    }

    /// Whether anything waits on the socket, found by one non-blocking read of at most one
    /// byte (consumed: a connection with bytes waiting is dropped anyway). The socket is
    /// blocking again when this returns `Ok`.
    fn idle(&mut self) -> io::Result<Idle> {
        self.set_nonblocking(true)?;
        let mut byte = [0u8; 1];
        let read = loop {
            match self.read_raw(&mut byte) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                other => break other,
            }
        };
        self.set_nonblocking(false)?;
        match read {
            Ok(0) => Ok(Idle::Closed),
            Ok(_) => Ok(Idle::Bytes),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(Idle::Nothing),
            Err(e) => Err(e),
        }
    }

    fn shutdown(&self) {
        // Best effort: the descriptor is closed when the connection is dropped anyway.
        let _ = match self {
            Stream::Tcp(s) => s.shutdown(std::net::Shutdown::Both),
            Stream::Unix(s) => s.shutdown(std::net::Shutdown::Both),
        };
    }
}

impl Read for Deadlined {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let left = Some(self.remaining()?);
        match &mut self.stream {
            Stream::Tcp(s) => {
                s.set_read_timeout(left)?;
                s.read(buf)
            }
            Stream::Unix(s) => {
                s.set_read_timeout(left)?;
                s.read(buf)
            }
        }
    }
}

impl Write for Deadlined {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let left = Some(self.remaining()?);
        match &mut self.stream {
            Stream::Tcp(s) => {
                s.set_write_timeout(left)?;
                s.write(buf)
            }
            Stream::Unix(s) => {
                s.set_write_timeout(left)?;
                s.write(buf)
            }
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// One connection to a server: commands in, bounded replies out (see the crate docs).
///
/// One reply per command: a reply followed by bytes no command asked for (a peer answering one
/// command twice), or bytes waiting on the socket when the next command is about to be sent,
/// is refused ([`WireError::Protocol`]), and so is every later command on the connection. The
/// stream is then out of step, so the connection is dropped (shut down): a reply is never
/// read as the answer of a later command. After any connection-level error
/// ([`WireError::is_connection_level`]) the connection is likewise dropped and refuses every
/// further command at once ([`WireError::Io`], kind `NotConnected`); connect again.
pub struct Connection {
    io: BufReader<Deadlined>,
    io_timeout: Duration,
    limits: Limits,
    /// Why the connection was dropped, once it was.
    dropped: Option<String>,
}

impl fmt::Debug for Connection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Connection")
            .field("io_timeout", &self.io_timeout)
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

impl Connection {
    /// Connects to `target` within `connect_timeout` per address tried, then logs in
    /// (`AUTH`) and selects the database (`SELECT`) if the URL asks, each reply within
    /// `io_timeout`. Replies are read under `limits`.
    ///
    /// # Errors
    /// [`WireError::Io`] if no address answers in time; any error of a handshake command.
    pub fn connect(
        target: &Target,
        connect_timeout: Duration,
        io_timeout: Duration,
        limits: Limits,
    ) -> Result<Connection, WireError> {
        let stream = match &target.addr {
            Addr::Tcp(host, port) => {
                let addrs = (host.as_str(), *port)
                    .to_socket_addrs()
                    .map_err(|e| WireError::io("resolve the redis host", &e))?;
                let mut last = io::Error::new(io::ErrorKind::NotFound, "no address");
                let mut found = None;
                for a in addrs {
                    match TcpStream::connect_timeout(&a, connect_timeout) {
                        Ok(s) => {
                            found = Some(s);
                            break;
                        }
                        Err(e) => last = e,
                    }
                }
                let s = found.ok_or_else(|| WireError::io("connect to the redis server", &last))?;
                // Commands are written whole; no reason to delay them.
                s.set_nodelay(true)
                    .map_err(|e| WireError::io("connect to the redis server", &e))?;
                Stream::Tcp(s)
            }
            Addr::Unix(path) => Stream::Unix(
                UnixStream::connect(path)
                    .map_err(|e| WireError::io("connect to the redis server", &e))?,
            ),
        };
        let mut con = Connection {
            io: BufReader::with_capacity(
                16 << 10,
                Deadlined {
                    stream,
                    deadline: Instant::now(),
                },
            ),
            io_timeout,
            limits,
            dropped: None,
        };
        if let Some(password) = &target.password {
            let reply = match &target.username {
                Some(user) => con.query(&[b"AUTH", user.as_bytes(), password.as_bytes()])?,
                None => con.query(&[b"AUTH", password.as_bytes()])?,
            };
            expect_ok(&reply, "AUTH")?;
        }
        if target.db != 0 {
            let db = target.db.to_string();
            let reply = con.query(&[b"SELECT", db.as_bytes()])?;
            expect_ok(&reply, "SELECT")?;
        }
        Ok(con)
    }

    /// The limits replies are read under.
    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// Whether the connection was dropped (after a connection-level error or a peer out of
    /// step): every further command is refused at once.
    pub fn is_dropped(&self) -> bool {
        self.dropped.is_some()
    }

    /// Sends one command (its arguments as bulk strings) and reads its reply, all within the
    /// I/O timeout. A top-level error reply is [`WireError::Server`]. The stream must hold
    /// nothing before the command is sent and nothing after its reply (see [`Connection`]).
    ///
    /// # Errors
    /// See [`WireError`]; after any error but `Server` the connection is dropped and refuses
    /// every further command ([`Connection::is_dropped`]): connect again.
    pub fn query(&mut self, args: &[&[u8]]) -> Result<Value, WireError> {
        if let Some(why) = &self.dropped {
            return Err(WireError::Io {
                during: "write a command to the redis server",
                kind: io::ErrorKind::NotConnected,
                message: format!("the connection was dropped: {why}"),
            });
        }
        let result = self.exchange(args);
        if let Err(e) = &result
            && e.is_connection_level()
        {
            self.drop_connection(e.to_string());
        }
        result
    }

    fn drop_connection(&mut self, why: String) {
        self.io.get_ref().stream.shutdown();
        self.dropped = Some(why);
    }

    /// One command and its reply, the stream checked to be in step before and after.
    fn exchange(&mut self, args: &[&[u8]]) -> Result<Value, WireError> {
        // Bytes that arrived since the last reply answer no command this connection sent: a
        // command sent now would read them as its reply.
        let waiting = if self.io.buffer().is_empty() {
            self.io
                .get_mut()
                .stream
                .idle()
                .map_err(|e| WireError::io("check the connection before a command", &e))?
        } else {
            Idle::Bytes
        };
        match waiting {
            Idle::Nothing => {}
            Idle::Bytes => {
                return Err(WireError::Protocol(
                    "the server sent bytes no command asked for (a reply too many)".into(),
                ));
            }
            Idle::Closed => {
                return Err(WireError::Io {
                    during: "check the connection before a command",
                    kind: io::ErrorKind::UnexpectedEof,
                    message: "the server closed the connection".into(),
                });
            }
        }
        let deadline = Instant::now()
            .checked_add(self.io_timeout)
            .unwrap_or_else(|| Instant::now() + Duration::from_secs(86400 * 365));
        self.io.get_mut().deadline = deadline;
        let mut out = Vec::with_capacity(16 + args.iter().map(|a| a.len() + 16).sum::<usize>());
        out.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
        for a in args {
            out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
            out.extend_from_slice(a);
            out.extend_from_slice(b"\r\n");
        }
        self.io
            .get_mut()
            .write_all(&out)
            .map_err(|e| WireError::io("write a command to the redis server", &e))?;
        let reply = read_value(&mut self.io, &self.limits)?;
        // One reply per command: anything after it (a peer answering twice) would be read as
        // the next command's reply.
        let after = if self.io.buffer().is_empty() {
            self.io
                .get_mut()
                .stream
                .idle()
                .map_err(|e| WireError::io("check the connection after a reply", &e))?
        } else {
            Idle::Bytes
        };
        match after {
            Idle::Nothing => {}
            Idle::Bytes => {
                return Err(WireError::Protocol(
                    "the server sent more than one reply to one command".into(),
                ));
            }
            // The reply is whole; the next command finds the connection closed.
            Idle::Closed => self.drop_connection("the server closed the connection".into()),
        }
        match reply {
            Value::Error(e) => Err(WireError::Server(e)),
            v => Ok(v),
        }
    }

    /// Runs a Lua script: `EVALSHA` by its SHA-1, then `EVAL` if the server does not have it
    /// cached (`NOSCRIPT`).
    ///
    /// # Errors
    /// As [`Connection::query`].
    pub fn eval(
        &mut self,
        script: &Script,
        keys: &[&[u8]],
        args: &[&[u8]],
    ) -> Result<Value, WireError> {
        let nkeys = keys.len().to_string();
        let mut cmd: Vec<&[u8]> = Vec::with_capacity(3 + keys.len() + args.len());
        cmd.extend([
            b"EVALSHA".as_slice(),
            script.sha.as_bytes(),
            nkeys.as_bytes(),
        ]);
        cmd.extend_from_slice(keys);
        cmd.extend_from_slice(args);
        match self.query(&cmd) {
            Err(WireError::Server(e)) if e.starts_with("NOSCRIPT") => {
                cmd[0] = b"EVAL";
                cmd[1] = script.source.as_bytes();
                self.query(&cmd)
            }
            other => other,
        }
    }
}

fn expect_ok(reply: &Value, what: &str) -> Result<(), WireError> {
    match reply {
        Value::SimpleString(s) if s == "OK" => Ok(()),
        other => Err(WireError::Protocol(format!(
            "{what} answered {other:?}, not OK"
        ))),
    }
}

/// A Lua script and its SHA-1 (for `EVALSHA`).
#[derive(Clone, Debug)]
pub struct Script {
    source: String,
    sha: String,
}

impl Script {
    /// The script of `source`.
    pub fn new(source: &str) -> Script {
        Script {
            source: source.to_owned(),
            sha: url::script_sha1(source),
        }
    }
}

/// What one reply may still use.
struct Budget<'l> {
    limits: &'l Limits,
    elements: usize,
    total: usize,
}

impl Budget<'_> {
    fn charge(&mut self, bytes: usize, what: &str) -> Result<(), WireError> {
        match self.total.checked_add(bytes) {
            Some(t) if t <= self.limits.max_total => {
                self.total = t;
                Ok(())
            }
            _ => Err(WireError::Limit(format!(
                "{what} would bring the reply past {} bytes",
                self.limits.max_total
            ))),
        }
    }
}

/// Reads one RESP2 value from `r` under `limits` (see the crate docs): nothing past a bound is
/// read or allocated. Trailing bytes are left in `r`.
///
/// # Errors
/// [`WireError::Limit`] for a bound passed, [`WireError::Protocol`] for bytes that are not
/// RESP2, [`WireError::Io`] for a failed read (`UnexpectedEof` at a premature end).
pub fn read_value(r: &mut impl BufRead, limits: &Limits) -> Result<Value, WireError> {
    let mut budget = Budget {
        limits,
        elements: 0,
        total: 0,
    };
    read_at(r, &mut budget, 0)
}

fn read_at(
    r: &mut impl BufRead,
    budget: &mut Budget<'_>,
    depth: usize,
) -> Result<Value, WireError> {
    let mut tag = [0u8; 1];
    r.read_exact(&mut tag)
        .map_err(|e| WireError::io("read a reply", &e))?;
    match tag[0] {
        b'+' => {
            let line = read_line(r, budget)?;
            Ok(Value::SimpleString(utf8(line)?))
        }
        b'-' => {
            let line = read_line(r, budget)?;
            Ok(Value::Error(utf8(line)?))
        }
        b':' => Ok(Value::Int(read_int(r, budget)?)),
        b'$' => {
            let len = read_int(r, budget)?;
            if len == -1 {
                return Ok(Value::Nil);
            }
            let len = usize::try_from(len)
                .map_err(|_| WireError::Protocol(format!("bulk length {len}")))?;
            if len > budget.limits.max_bulk {
                return Err(WireError::Limit(format!(
                    "a bulk string of {len} bytes, past the cap of {} bytes (not read)",
                    budget.limits.max_bulk
                )));
            }
            budget.charge(len, "a bulk string")?;
            let mut bytes = vec![0u8; len];
            r.read_exact(&mut bytes)
                .map_err(|e| WireError::io("read a reply", &e))?;
            let mut crlf = [0u8; 2];
            r.read_exact(&mut crlf)
                .map_err(|e| WireError::io("read a reply", &e))?;
            if &crlf != b"\r\n" {
                return Err(WireError::Protocol(
                    "a bulk string not ended by CRLF".into(),
                ));
            }
            Ok(Value::BulkString(bytes))
        }
        b'*' => {
            let len = read_int(r, budget)?;
            if len == -1 {
                return Ok(Value::Nil);
            }
            let len = usize::try_from(len)
                .map_err(|_| WireError::Protocol(format!("array length {len}")))?;
            if depth + 1 > budget.limits.max_depth {
                return Err(WireError::Limit(format!(
                    "arrays nested past depth {}",
                    budget.limits.max_depth
                )));
            }
            match budget.elements.checked_add(len) {
                Some(n) if n <= budget.limits.max_elements => budget.elements = n,
                _ => {
                    return Err(WireError::Limit(format!(
                        "an array of {len} elements, past the cap of {} in a reply (not read)",
                        budget.limits.max_elements
                    )));
                }
            }
            budget.charge(len.saturating_mul(std::mem::size_of::<Value>()), "an array")?;
            let mut items = Vec::with_capacity(len);
            for _ in 0..len {
                items.push(read_at(r, budget, depth + 1)?);
            }
            Ok(Value::Array(items))
        }
        other => Err(WireError::Protocol(format!(
            "reply type byte {other:#04x} (only RESP2 is spoken)"
        ))),
    }
}

fn utf8(line: Vec<u8>) -> Result<String, WireError> {
    String::from_utf8(line).map_err(|_| WireError::Protocol("a status line not UTF-8".into()))
}

/// An integer line: `-?[0-9]+` fitting an `i64`.
fn read_int(r: &mut impl BufRead, budget: &mut Budget<'_>) -> Result<i64, WireError> {
    let line = read_line(r, budget)?;
    let digits = line.strip_prefix(b"-").unwrap_or(&line);
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return Err(WireError::Protocol(
            "an integer line that is not one".into(),
        ));
    }
    std::str::from_utf8(&line)
        .ok()
        .and_then(|s| s.parse::<i64>().ok())
        .ok_or_else(|| WireError::Protocol("an integer past 64 bits".into()))
}

/// A line up to CRLF (not included), at most `max_line` bytes, charged to the budget.
fn read_line(r: &mut impl BufRead, budget: &mut Budget<'_>) -> Result<Vec<u8>, WireError> {
    let mut line = Vec::new();
    loop {
        let buf = r
            .fill_buf()
            .map_err(|e| WireError::io("read a reply", &e))?;
        if buf.is_empty() {
            return Err(WireError::Io {
                during: "read a reply",
                kind: io::ErrorKind::UnexpectedEof,
                message: "the server closed the connection mid-reply".into(),
            });
        }
        let cap = budget.limits.max_line.saturating_add(2);
        let room = cap - line.len().min(cap);
        let take = buf.len().min(room);
        let newline = buf[..take].iter().position(|&b| b == b'\n');
        let used = newline.map_or(take, |i| i + 1);
        budget.charge(used, "a line")?;
        line.extend_from_slice(&buf[..used]);
        r.consume(used);
        if newline.is_some() {
            if line.len() >= 2 && line[line.len() - 2] == b'\r' {
                line.truncate(line.len() - 2);
                return Ok(line);
            }
            return Err(WireError::Protocol("a line not ended by CRLF".into()));
        }
        if line.len() >= cap {
            return Err(WireError::Limit(format!(
                "a line longer than {} bytes",
                budget.limits.max_line
            )));
        }
    }
}
