//! The kernel store's shared level on a Redis server (cargo feature `redis`): one machine's
//! compile serves every machine of a tuning farm.
//!
//! A [`KernelStore`](super::KernelStore) given a [`FarmLevel`] looks a key up in its local
//! directory first, then on the server; a program found there is verified, back-filled into
//! the local directory and loaded. A program saved locally is also pushed to the server.
//!
//! Every value on the server carries an HMAC-SHA256 keyed by the farm's secret (given by
//! the caller, never logged, never shown by `Debug`): whoever can write to the server but
//! does not hold the secret cannot make a machine load their code. A value without a valid
//! MAC is a miss ([`MissReason::BadSignature`](super::MissReason::BadSignature)). Blobs are
//! also verified against their SHA-256 name, as local ones are. A value longer than the
//! local caps (4 KiB for an entry, the store's blob cap for a blob) is a miss the server
//! never sends (a `STRLEN`-then-`GET` script), so writing to the server cannot make a
//! lookup read without bound.
//!
//! Keys, for a prefix `P` (default `kcache`): `P:kernels1:entry:<entry digest>` (a local
//! entry file's bytes; the digest is the one naming the local entry `k-<entry digest>`,
//! the backend's host part included, so machines of different processors each have their
//! own entry for a `-march=native` key) and `P:kernels1:blob:<sha256>` (a local blob
//! file's bytes); each value is `<64 hex HMAC>\n<bytes>`. The regime is in the key
//! (`kernels1`): a format change moves to new keys. The server bounds its own size (`maxmemory` with an LRU policy);
//! an unreachable or failing server is a miss and a warning, never a failed resolve.

use std::fmt;
use std::sync::Mutex;
use std::time::Duration;

use hmac::{Hmac, KeyInit, Mac};
use redis::{Client, Connection};
use sha2::Sha256;

use super::record::MissReason;

/// The key segment naming the store's regime on the server.
const REGIME_SEGMENT: &str = "kernels1";

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
/// Default bound on one command.
pub const DEFAULT_IO_TIMEOUT: Duration = Duration::from_secs(5);

/// The farm's secret: the key of every MAC. Never printed.
#[derive(Clone)]
struct Secret(Vec<u8>);

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<secret>")
    }
}

/// A Redis server shared by a farm's kernel stores (see the module docs).
pub struct FarmLevel {
    client: Client,
    location: String,
    prefix: String,
    secret: Secret,
    connect_timeout: Duration,
    io_timeout: Duration,
    connection: Mutex<Option<Connection>>,
}

impl fmt::Debug for FarmLevel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FarmLevel")
            .field("location", &self.location)
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

/// What a MAC covers: a domain, the value's name, its bytes.
fn mac(secret: &Secret, kind: &str, name: &str, bytes: &[u8]) -> Hmac<Sha256> {
    let mut m = <Hmac<Sha256> as KeyInit>::new_from_slice(&secret.0)
        .unwrap_or_else(|_| unreachable!("HMAC takes a key of any length"));
    m.update(b"kcache kernel farm 1\0");
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
    /// scripting (`EVAL`: each lookup is a one-line script that bounds the read); a user
    /// denied scripts has every lookup refused (a `Refused` miss), while its saves still
    /// reach the server.
    ///
    /// # Errors
    /// The URL does not parse.
    pub fn open(url: &str, secret: impl Into<Vec<u8>>) -> Result<FarmLevel, redis::RedisError> {
        let client = Client::open(url)?;
        let location = client.get_connection_info().addr().to_string();
        Ok(FarmLevel {
            client,
            location,
            prefix: "kcache".into(),
            secret: Secret(secret.into()),
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            io_timeout: DEFAULT_IO_TIMEOUT,
            connection: Mutex::new(None),
        })
    }

    /// The same level under key prefix `prefix` (farms sharing a server keep apart).
    pub fn with_prefix(mut self, prefix: impl Into<String>) -> FarmLevel {
        self.prefix = prefix.into();
        self
    }

    /// The same level with other connect and command timeouts.
    pub fn with_timeouts(mut self, connect: Duration, io: Duration) -> FarmLevel {
        self.connect_timeout = connect;
        self.io_timeout = io;
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

    fn with_connection<T>(
        &self,
        f: impl FnOnce(&mut Connection) -> redis::RedisResult<T>,
    ) -> Result<T, String> {
        let mut slot = self.connection.lock().unwrap_or_else(|e| e.into_inner());
        if slot.is_none() {
            let con = self
                .client
                .get_connection_with_timeout(self.connect_timeout)
                .and_then(|c| {
                    c.set_read_timeout(Some(self.io_timeout))?;
                    c.set_write_timeout(Some(self.io_timeout))?;
                    Ok(c)
                })
                .map_err(|e| format!("redis {}: {e}", self.location))?;
            *slot = Some(con);
        }
        let Some(con) = slot.as_mut() else {
            return Err(format!("redis {}: no connection", self.location));
        };
        match f(con) {
            Ok(v) => Ok(v),
            Err(e) => {
                // A failed command may leave the connection out of step: drop it.
                *slot = None;
                Err(format!("redis {}: {e}", self.location))
            }
        }
    }

    fn sign(&self, kind: &str, name: &str, bytes: &[u8]) -> Vec<u8> {
        let tag = mac(&self.secret, kind, name, bytes).finalize().into_bytes();
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
        mac(&self.secret, kind, name, bytes)
            .verify_slice(&tag)
            .ok()
            .map(|()| bytes.to_vec())
    }

    /// The value of `key` if it holds at most `max` bytes (the server sends nothing
    /// longer); `None` if absent.
    fn bounded_get(&self, key: &str, max: u64) -> Result<Option<Vec<u8>>, MissReason> {
        let value: redis::Value = self
            .with_connection(|c| {
                redis::cmd("EVAL")
                    .arg(BOUNDED_GET)
                    .arg(1)
                    .arg(key)
                    .arg(max)
                    .query(c)
            })
            .map_err(MissReason::Refused)?;
        match value {
            redis::Value::Nil => Ok(None),
            redis::Value::BulkString(bytes) => Ok(Some(bytes)),
            redis::Value::Int(len) => Err(MissReason::Refused(format!(
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
    /// longer than a local entry's cap (4 KiB) or than `max_blob` bytes is refused by
    /// the server without being sent: whoever can write to the server cannot make a
    /// lookup read without bound.
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
        let Some(value) = self.bounded_get(&key, max_blob.saturating_add(65))? else {
            return Err(MissReason::NoBlob);
        };
        let blob = self
            .verify("blob", &blob_digest, &value)
            .ok_or(MissReason::BadSignature)?;
        Ok((entry, blob))
    }

    /// Pushes a blob and its entries, signed.
    pub(crate) fn push(
        &self,
        blob_digest: &str,
        blob: &[u8],
        entries: &[(String, Vec<u8>)],
    ) -> Result<(), String> {
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
            redis::cmd("SET")
                .arg(&blob_key)
                .arg(&blob_value)
                .query::<String>(c)?;
            for (key, value) in &entry_values {
                redis::cmd("SET").arg(key).arg(value).query::<String>(c)?;
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
    fn macs_verify_only_with_the_same_secret_name_and_bytes() {
        let a = FarmLevel::open("redis://127.0.0.1:1/0", b"secret-a".to_vec()).unwrap();
        let b = FarmLevel::open("redis://127.0.0.1:1/0", b"secret-b".to_vec()).unwrap();
        let signed = a.sign("blob", "d1", b"bytes");
        assert_eq!(a.verify("blob", "d1", &signed), Some(b"bytes".to_vec()));
        assert_eq!(b.verify("blob", "d1", &signed), None);
        assert_eq!(a.verify("blob", "d2", &signed), None);
        assert_eq!(a.verify("entry", "d1", &signed), None);
        let mut tampered = signed.clone();
        *tampered.last_mut().unwrap() ^= 1;
        assert_eq!(a.verify("blob", "d1", &tampered), None);
        assert_eq!(a.verify("blob", "d1", b"bytes"), None);
        assert!(!format!("{a:?}").contains("secret-a"));
    }
}
