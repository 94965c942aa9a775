//! The kernel store's shared level on a Redis server (always built): one machine's
//! compile serves every machine of a tuning farm.
//!
//! A [`KernelStore`](super::KernelStore) given a [`FarmLevel`] looks a key up in its local
//! directory first, then on the server; a program found there is verified (the farm's
//! HMAC-SHA256 over prefix, kind, name and bytes, then the blob's SHA-256 name), back-filled
//! into the local directory and loaded. A program saved locally is also pushed to the
//! server. Whatever the server does is a miss or a refusal, never a panic, a hang or an
//! unbounded allocation: values past the caps are never sent ([`DEFAULT_MAX_BLOB_BYTES`]),
//! replies are read by [`redis_wire`] under limits checked before allocation, within
//! [`DEFAULT_CONNECT_TIMEOUT`] and [`DEFAULT_IO_TIMEOUT`], and after a connection-level
//! failure the level pauses ([`DEFAULT_RETRY_AFTER`]). Keys, values, MAC domain and bounds:
//! `docs/disk-format.md`, "The farm level".

use std::fmt;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use hmac::{Hmac, KeyInit, Mac};
use redis_wire::{Connection, Limits, Script, Target, Value};
use sha2::Sha256;

pub use redis_wire::WireError;

use super::record::MissReason;

/// The key segment naming the store's regime on the server: `kernels<REGIME>`, so a bump of
/// the local format moves the farm to new keys too (a test holds the two together).
const REGIME_SEGMENT: &str = "kernels2";

/// The largest entry value a lookup accepts from the server (a local entry's cap, 4 KiB,
/// and its MAC line).
const MAX_ENTRY_VALUE: u64 = 4096 + 65;

/// `GET KEYS[1]` if its value holds at most `ARGV[1]` bytes; otherwise its length (the
/// value is not sent). A missing key is `nil`.
const BOUNDED_GET: &str = "local n = redis.call('STRLEN', KEYS[1])\n\
    if n > tonumber(ARGV[1]) then return n end\n\
    return redis.call('GET', KEYS[1])";

/// Default bound on establishing a connection.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_millis(500);
/// Default bound on one command (its write and its whole reply).
pub const DEFAULT_IO_TIMEOUT: Duration = Duration::from_secs(5);
/// Default pause after a connection-level failure before the server is contacted again.
pub const DEFAULT_RETRY_AFTER: Duration = Duration::from_secs(10);
/// Default farm-level cap on a blob fetched from the server (16 MiB): far below the local
/// store's byte limit (1 GiB by default), so a lookup holds at most this much of one value.
pub const DEFAULT_MAX_BLOB_BYTES: u64 = 16 << 20;

/// A Redis server shared by a farm's kernel stores (see the module docs).
pub struct FarmLevel {
    target: Target,
    location: String,
    prefix: String,
    /// The key of every MAC; never printed (the `Debug` below leaves it out).
    secret: Vec<u8>,
    connect_timeout: Duration,
    io_timeout: Duration,
    retry_after: Duration,
    max_blob: u64,
    script: Script,
    state: Mutex<ConnState>,
}

/// The connection, or the pause after a connection-level failure.
#[derive(Default)]
struct ConnState {
    conn: Option<Connection>,
    /// No new attempt before this instant (`None` inside: a pause past what the clock can
    /// count, never again), and the failure.
    down: Option<(Option<Instant>, String)>,
}

impl fmt::Debug for FarmLevel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FarmLevel")
            .field("location", &self.location)
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

/// What a MAC covers: a domain, the key prefix, the value's kind and name, its bytes (each
/// length-prefixed, so no two different tuples feed the same bytes).
fn mac(secret: &[u8], prefix: &str, kind: &str, name: &str, bytes: &[u8]) -> Hmac<Sha256> {
    let mut m = <Hmac<Sha256> as KeyInit>::new_from_slice(secret)
        .unwrap_or_else(|_| unreachable!("HMAC takes a key of any length"));
    // Domain 2: the prefix joined the MAC (values signed under domain 1 are refused, and
    // repaired by the next save).
    m.update(b"kcache kernel farm 2\0");
    m.update(&(prefix.len() as u64).to_le_bytes());
    m.update(prefix.as_bytes());
    m.update(kind.as_bytes());
    m.update(b"\0");
    m.update(name.as_bytes());
    m.update(b"\0");
    m.update(bytes);
    m
}

impl FarmLevel {
    /// A level on the server at `url` (`redis://host:port/db`, or
    /// `redis://user:password@host:port/db` for an ACL user), signing and checking every
    /// value with `secret`. Does not connect. The user needs `GET`, `SET`, `STRLEN` and
    /// scripting (`EVALSHA`, then `EVAL` if the server has not cached the script: each lookup
    /// is a one-line script that bounds the read); a user
    /// denied scripts has every lookup refused (a `Refused` miss), while its saves still
    /// reach the server.
    ///
    /// # Errors
    /// [`WireError::Url`]: the URL does not parse, or asks for TLS (not spoken).
    pub fn open(url: &str, secret: impl Into<Vec<u8>>) -> Result<FarmLevel, WireError> {
        let target = Target::parse(url)?;
        let location = target.addr();
        Ok(FarmLevel {
            target,
            location,
            prefix: "kcache".into(),
            secret: secret.into(),
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            io_timeout: DEFAULT_IO_TIMEOUT,
            retry_after: DEFAULT_RETRY_AFTER,
            max_blob: DEFAULT_MAX_BLOB_BYTES,
            script: Script::new(BOUNDED_GET),
            state: Mutex::new(ConnState::default()),
        })
    }

    /// The same level under key prefix `prefix` (farms sharing a server keep apart).
    pub fn with_prefix(mut self, prefix: impl Into<String>) -> FarmLevel {
        self.prefix = prefix.into();
        self
    }

    /// The same level with other connect and command timeouts (the I/O timeout bounds a
    /// command's write and its whole reply).
    pub fn with_timeouts(mut self, connect: Duration, io: Duration) -> FarmLevel {
        self.connect_timeout = connect;
        self.io_timeout = io;
        self
    }

    /// After a connection-level failure the server is not contacted for `pause` (default
    /// [`DEFAULT_RETRY_AFTER`]): lookups are `Refused` misses and pushes refused at once.
    /// `Duration::ZERO` retries every time; a pause past what the clock counts never retries.
    pub fn with_retry_after(mut self, pause: Duration) -> FarmLevel {
        self.retry_after = pause;
        self
    }

    /// The same level fetching blobs of at most `max` bytes (default
    /// [`DEFAULT_MAX_BLOB_BYTES`]; the store's own blob cap still applies if smaller): a
    /// longer blob is a `Refused` miss, never sent by the server. Every reply is then read
    /// under at most `max` plus 1 MiB of memory.
    pub fn with_max_blob_bytes(mut self, max: u64) -> FarmLevel {
        self.max_blob = max;
        self
    }

    /// Where the server is (host and port; never a password).
    pub fn location(&self) -> &str {
        &self.location
    }

    /// The server key of an entry, by the digest naming the local entry (`k-<entry
    /// digest>`: of identity, key and host part; `docs/disk-format.md`).
    pub fn entry_key(&self, entry_digest: &str) -> String {
        format!("{}:{REGIME_SEGMENT}:entry:{entry_digest}", self.prefix)
    }

    /// The server key of a blob.
    pub fn blob_key(&self, blob_digest: &str) -> String {
        format!("{}:{REGIME_SEGMENT}:blob:{blob_digest}", self.prefix)
    }

    /// The limits every reply is read under: one value of the blob cap and its MAC line.
    fn limits(&self) -> Limits {
        let max = usize::try_from(self.max_blob.saturating_add(65)).unwrap_or(usize::MAX);
        Limits::for_values_up_to(max)
    }

    fn with_connection<T>(
        &self,
        f: impl FnOnce(&mut Connection) -> Result<T, WireError>,
    ) -> Result<T, String> {
        // No user code runs under this lock; a poisoned state is still a valid state.
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if state.conn.is_none() {
            if let Some((until, why)) = &state.down
                && until.is_none_or(|until| Instant::now() < until)
            {
                return Err(format!(
                    "redis {}: server failed, not retried yet: {why}",
                    self.location
                ));
            }
            match Connection::connect(
                &self.target,
                self.connect_timeout,
                self.io_timeout,
                self.limits(),
            ) {
                Ok(c) => {
                    state.down = None;
                    state.conn = Some(c);
                }
                Err(e) => return Err(self.mark_down(&mut state, &e)),
            }
        }
        let Some(con) = state.conn.as_mut() else {
            return Err(format!("redis {}: no connection", self.location));
        };
        match f(con) {
            Ok(v) => Ok(v),
            Err(e) if e.is_connection_level() => Err(self.mark_down(&mut state, &e)),
            // A server error reply leaves the stream in step: keep the connection.
            Err(e) => Err(format!("redis {}: {e}", self.location)),
        }
    }

    /// Drops the connection (its stream may be out of step) and starts the retry pause.
    fn mark_down(&self, state: &mut ConnState, e: &WireError) -> String {
        let why = e.to_string();
        tracing::warn!(
            target: "kernel_cache::store",
            location = %self.location,
            error = %why,
            retry_after_ms = self.retry_after.as_millis() as u64,
            "farm server failed; its lookups are misses until it answers"
        );
        state.conn = None;
        state.down = Some((Instant::now().checked_add(self.retry_after), why.clone()));
        format!("redis {}: {why}", self.location)
    }

    fn sign(&self, kind: &str, name: &str, bytes: &[u8]) -> Vec<u8> {
        let tag = mac(&self.secret, &self.prefix, kind, name, bytes)
            .finalize()
            .into_bytes();
        let mut out = Vec::with_capacity(65 + bytes.len());
        out.extend_from_slice(hex::encode(tag).as_bytes());
        out.push(b'\n');
        out.extend_from_slice(bytes);
        out
    }

    fn verify(&self, kind: &str, name: &str, value: &[u8]) -> Option<Vec<u8>> {
        if value.len() < 65 || value[64] != b'\n' {
            return None;
        }
        let tag = hex::decode(&value[..64]).ok()?;
        let bytes = &value[65..];
        mac(&self.secret, &self.prefix, kind, name, bytes)
            .verify_slice(&tag)
            .ok()
            .map(|()| bytes.to_vec())
    }

    /// The value of `key` if it holds at most `max` bytes (the server sends nothing
    /// longer); `None` if absent.
    fn bounded_get(&self, key: &str, max: u64) -> Result<Option<Vec<u8>>, MissReason> {
        let max = max.to_string();
        let value = self
            .with_connection(|c| c.eval(&self.script, &[key.as_bytes()], &[max.as_bytes()]))
            .map_err(MissReason::Refused)?;
        match value {
            Value::Nil => Ok(None),
            Value::BulkString(bytes) => Ok(Some(bytes)),
            Value::Int(len) => Err(MissReason::Refused(format!(
                "redis {}: a value of {len} bytes, past the cap of {max} bytes (not fetched)",
                self.location
            ))),
            _ => Err(MissReason::Refused(format!(
                "redis {}: an unexpected reply",
                self.location
            ))),
        }
    }

    /// The signed entry bytes of `entry_digest` and the signed blob file they name
    /// (`blob_of` reads the blob digest from entry bytes), verified; or why not. A value
    /// longer than a local entry's cap (4 KiB) or than the smaller of `max_blob` and the
    /// farm's blob cap is refused by the server without being sent, and every reply is read
    /// under the bounds of the module docs: whoever can write to the server, or answers at
    /// its address, cannot make a lookup read or wait without bound.
    pub(crate) fn fetch(
        &self,
        entry_digest: &str,
        max_blob: u64,
        blob_of: impl FnOnce(&[u8]) -> Option<String>,
    ) -> Result<(Vec<u8>, Vec<u8>), MissReason> {
        let key = self.entry_key(entry_digest);
        let Some(value) = self.bounded_get(&key, MAX_ENTRY_VALUE)? else {
            return Err(MissReason::NoEntry);
        };
        let entry = self
            .verify("entry", entry_digest, &value)
            .ok_or(MissReason::BadSignature)?;
        let blob_digest = blob_of(&entry).ok_or(MissReason::BadEntry)?;
        let key = self.blob_key(&blob_digest);
        let max_blob = max_blob.min(self.max_blob);
        let Some(value) = self.bounded_get(&key, max_blob.saturating_add(65))? else {
            return Err(MissReason::NoBlob);
        };
        let blob = self
            .verify("blob", &blob_digest, &value)
            .ok_or(MissReason::BadSignature)?;
        Ok((entry, blob))
    }

    /// Pushes a blob and its entries, signed; a blob past the farm's blob cap is not pushed
    /// (no lookup of this level would fetch it), an error saying so.
    pub(crate) fn push(
        &self,
        blob_digest: &str,
        blob: &[u8],
        entries: &[(String, Vec<u8>)],
    ) -> Result<(), String> {
        if blob.len() as u64 > self.max_blob {
            return Err(format!(
                "redis {}: a blob of {} bytes, past the farm's cap of {} bytes (not pushed)",
                self.location,
                blob.len(),
                self.max_blob
            ));
        }
        let blob_value = self.sign("blob", blob_digest, blob);
        let blob_key = self.blob_key(blob_digest);
        let entry_values: Vec<(String, Vec<u8>)> = entries
            .iter()
            .map(|(digest, bytes)| (self.entry_key(digest), self.sign("entry", digest, bytes)))
            .collect();
        self.with_connection(|c| {
            // Blob before entries, as on disk: an entry never names a blob the server
            // does not have (unless the server evicted it: then a `NoBlob` miss). Always
            // written, never `NX`: the name is the content's digest, so an equal value is
            // rewritten unchanged, and a bad one (written by someone without the secret)
            // is repaired by the next save rather than kept for good.
            c.query(&[b"SET", blob_key.as_bytes(), &blob_value])?;
            for (key, value) in &entry_values {
                c.query(&[b"SET", key.as_bytes(), value])?;
            }
            Ok(())
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn the_farm_keys_name_the_local_regime() {
        // A format bump must move the farm to new keys, as it moves the local store.
        assert_eq!(REGIME_SEGMENT, format!("kernels{}", super::super::REGIME));
    }

    #[test]
    fn macs_verify_only_with_the_same_secret_name_and_bytes() {
        let a = FarmLevel::open("redis://127.0.0.1:1/0", b"secret-a".to_vec()).unwrap();
        let b = FarmLevel::open("redis://127.0.0.1:1/0", b"secret-b".to_vec()).unwrap();
        let signed = a.sign("blob", "d1", b"bytes");
        assert_eq!(a.verify("blob", "d1", &signed), Some(b"bytes".to_vec()));
        assert_eq!(b.verify("blob", "d1", &signed), None);
        assert_eq!(a.verify("blob", "d2", &signed), None);
        assert_eq!(a.verify("entry", "d1", &signed), None);
        // The prefix is bound: the same value under another farm's prefix is refused.
        let other = FarmLevel::open("redis://127.0.0.1:1/0", b"secret-a".to_vec())
            .unwrap()
            .with_prefix("farm-b");
        assert_eq!(other.verify("blob", "d1", &signed), None);
        let mut tampered = signed.clone();
        *tampered.last_mut().unwrap() ^= 1;
        assert_eq!(a.verify("blob", "d1", &tampered), None);
        assert_eq!(a.verify("blob", "d1", b"bytes"), None);
        assert!(!format!("{a:?}").contains("secret-a"));
    }
}
