//! A shared store on a Redis server (cargo feature `redis`), for tuning farms and CI runners
//! that share winners: the directory store's contract over Redis keys. docs/disk-format.md,
//! section "The Redis store", is its one specification: the keys under a prefix, one atomic
//! Lua script per operation, the regime transition, unreachable servers and command
//! timeouts, and the bounds on what the server sends.

use std::io;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redis_wire::{Connection, Limits, Script, Target, Value, WireError};

use cache_dir::{parse_stamp, render_stamp};

use crate::disk::{
    self, CACHE_REGIME_VERSION, KeptExisting, Lookup, MAX_SIBLINGS, MissReason, Observer, Refusal,
    Space, StoreOutcome, StorePolicy, Stored,
};
use crate::store::Store;
use crate::{CacheKey, Error};

/// Default prefix of every Redis key the store uses.
pub(crate) const DEFAULT_PREFIX: &str = "kcache";
/// Default bound on establishing a connection (TCP connect and handshake).
pub(crate) const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_millis(500);
/// Default bound on one command's write and reply.
pub(crate) const DEFAULT_IO_TIMEOUT: Duration = Duration::from_secs(2);
/// Default pause after a connection failure before the store tries to connect again.
pub(crate) const DEFAULT_RETRY_AFTER: Duration = Duration::from_secs(2);

/// At most this many names of a digest set are fetched to explain a miss.
const SIBLING_FETCH: usize = 64;
/// How many times an operation re-reads the stamp after transitioning it.
const SETTLE_ATTEMPTS: usize = 3;

/// The operation script. KEYS: stamp, entry, index, digest set, claim. ARGV: canonical stamp,
/// stamp without newline, op (`set`/`keep`/`get`), payload, key, sibling fetch bound, entry
/// size cap, longest key, the payload's best time (`''`: none), its claim identity.
/// Returns `{0}` / `{0, stamp}` when the stamp is absent / not ours (nothing done; at most 65
/// bytes of the stamp are sent, a longer one is malformed anyway); `{1}` stored; `{1, value}`
/// found; `{2, siblings}` no entry (members longer than a key are left out); `{3, error}`
/// unreadable; `{4, length}` a value past the cap (not sent); `{5, time}` a `keep` (keep
/// faster) that left the existing entry, whose best time is `time`. The write order and the
/// claim rules are docs/disk-format.md's ("Operations").
const OP_SCRIPT: &str = r"
local s = redis.call('GET', KEYS[1])
if s ~= ARGV[1] and s ~= ARGV[2] then
  if s == false then return {0} end
  return {0, string.sub(s, 1, 65)}
end
if ARGV[3] ~= 'get' then
  if ARGV[3] == 'keep' then
    local cur = redis.pcall('GET', KEYS[2])
    if type(cur) == 'string' then
      local c = redis.pcall('HMGET', KEYS[5], 'sha', 'id', 'time')
      if type(c) == 'table' and not c.err and c[1] == redis.sha1hex(cur) and c[2] == ARGV[10] then
        local old = tonumber(c[3])
        if old and old >= 0 and old < math.huge then
          local new = tonumber(ARGV[9])
          if not new or not (new < old) then return {5, c[3]} end
        end
      end
    end
  end
  redis.call('SADD', KEYS[3], KEYS[2], KEYS[4], KEYS[5])
  redis.call('SADD', KEYS[4], ARGV[5])
  redis.call('SET', KEYS[2], ARGV[4])
  redis.call('DEL', KEYS[5])
  if ARGV[9] ~= '' then
    redis.call('HSET', KEYS[5], 'sha', redis.sha1hex(ARGV[4]), 'id', ARGV[10], 'time', ARGV[9])
  end
  return {1}
end
local n = redis.pcall('STRLEN', KEYS[2])
if type(n) == 'table' and n.err then return {3, n.err} end
if n > tonumber(ARGV[7]) then return {4, n} end
local v = redis.call('GET', KEYS[2])
if v then return {1, v} end
local ok, c = pcall(redis.call, 'SCARD', KEYS[4])
if not ok or c == 0 then return {2, {}} end
local names = {}
for _, m in ipairs(redis.call('SRANDMEMBER', KEYS[4], tonumber(ARGV[6]))) do
  if #m <= tonumber(ARGV[8]) then names[#names + 1] = m end
end
return {2, names}
";

/// The transition script. KEYS: stamp, index. ARGV: `absent` or `present`, the stamp observed
/// (when present), the new stamp. Returns -1 if the stamp changed since it was observed
/// (nothing done), else the number of names deleted.
const TRANSITION_SCRIPT: &str = r"
local s = redis.call('GET', KEYS[1])
if ARGV[1] == 'absent' then
  if s ~= false then return -1 end
elseif s ~= ARGV[2] then
  return -1
end
local removed = 0
local cursor = '0'
repeat
  local r = redis.call('SSCAN', KEYS[2], cursor, 'COUNT', 500)
  cursor = r[1]
  for _, name in ipairs(r[2]) do removed = removed + redis.call('DEL', name) end
until cursor == '0'
redis.call('DEL', KEYS[2])
redis.call('SET', KEYS[1], ARGV[3])
return removed
";

/// A schedule-cache store on a Redis server: same keys, entry types and versions, regime stamp
/// semantics and refusal rules as the directory store (docs/disk-format.md, "The Redis
/// store"). Every operation is one atomic server-side script; an unreachable, slow or
/// refusing server, or a reply past a bound, is a refusal (a miss), never a panic, a hang or
/// an unbounded allocation.
///
/// Safe to share between threads (operations of one store take turns on one connection).
/// Construct with [`RedisStore::open`]; nothing is contacted until the first operation.
pub struct RedisStore {
    target: Target,
    location: String,
    prefix: String,
    regime: u32,
    connect_timeout: Duration,
    io_timeout: Duration,
    retry_after: Duration,
    op_script: Script,
    transition_script: Script,
    state: Mutex<ConnState>,
    unreachable: AtomicU64,
    observer: Option<Arc<Observer>>,
}

impl std::fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStore")
            .field("location", &self.location)
            .field("regime", &self.regime)
            .finish_non_exhaustive()
    }
}

#[derive(Default)]
struct ConnState {
    conn: Option<Connection>,
    /// After a connection failure: no new attempt before this instant (`None`: none at all,
    /// for a pause past what `Instant` can count), and the failure.
    down: Option<(Option<Instant>, io::ErrorKind, String)>,
}

/// What the operation script answered (after the stamp check).
enum Answer {
    /// The stamp was absent (`None`) or not ours: nothing was done.
    Stamp(Option<Vec<u8>>),
    Stored,
    Found(Vec<u8>),
    NoEntry(Vec<String>),
    Unreadable(String),
    /// A value of this many bytes, past [`disk::MAX_ENTRY_BYTES`] (not fetched).
    TooLarge(i64),
    /// A keep-faster store left the existing entry, whose best time is this (as stored).
    KeptExisting(Vec<u8>),
}

/// What a store asks the operation script to write.
struct Write<'a> {
    /// The entry's encoding.
    payload: &'a str,
    policy: StorePolicy,
    /// The entry's claim identity and best time.
    identity: String,
    time: Option<f64>,
}

/// Checks a key prefix: 1 to 100 bytes of `[A-Za-z0-9_.-]`, not containing `:`.
fn check_prefix(prefix: &str) -> Result<(), Error> {
    let ok = !prefix.is_empty()
        && prefix.len() <= 100
        && prefix
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'));
    if ok {
        Ok(())
    } else {
        Err(Error::InvalidStoreConfig {
            what: "redis key prefix",
            reason: format!("{prefix:?} is not 1 to 100 bytes of [A-Za-z0-9_.-]"),
        })
    }
}

fn refusal_of(during: &'static str, e: &WireError) -> Refusal {
    Refusal::Io {
        during,
        kind: e.kind(),
        message: disk::short(&e.to_string()),
    }
}

fn bytes_of(v: &Value) -> Option<Vec<u8>> {
    match v {
        Value::BulkString(b) => Some(b.clone()),
        Value::SimpleString(s) => Some(s.clone().into_bytes()),
        _ => None,
    }
}

fn int_of(v: &Value) -> Option<i64> {
    match v {
        Value::Int(i) => Some(*i),
        _ => None,
    }
}

fn parse_answer(v: Value) -> Option<Answer> {
    let Value::Array(items) = v else { return None };
    let code = int_of(items.first()?)?;
    let second = items.get(1);
    Some(match code {
        0 => Answer::Stamp(match second {
            None | Some(Value::Nil) => None,
            Some(v) => Some(bytes_of(v)?),
        }),
        1 => match second {
            None => Answer::Stored,
            Some(v) => Answer::Found(bytes_of(v)?),
        },
        2 => Answer::NoEntry(match second {
            Some(Value::Array(names)) => names
                .iter()
                .filter_map(|n| String::from_utf8(bytes_of(n)?).ok())
                .collect(),
            _ => Vec::new(),
        }),
        3 => Answer::Unreadable(
            second
                .and_then(bytes_of)
                .map(|b| String::from_utf8_lossy(&b).into_owned())
                .unwrap_or_default(),
        ),
        4 => Answer::TooLarge(int_of(second?)?),
        5 => Answer::KeptExisting(bytes_of(second?)?),
        _ => return None,
    })
}

impl RedisStore {
    /// A store on the server at `url` (`redis://[user:password@]host[:port][/db]`, or
    /// `unix:///path`), with keys under `DEFAULT_PREFIX`, this build's regime and the default
    /// timeouts. Does not connect.
    ///
    /// # Errors
    /// [`Error::InvalidStoreConfig`] if the URL cannot be parsed.
    pub fn open(url: &str) -> Result<RedisStore, Error> {
        let target = Target::parse(url).map_err(|e| Error::InvalidStoreConfig {
            what: "redis URL",
            reason: e.to_string(),
        })?;
        // Built from the parsed address, so a password in the URL never reaches a log line.
        let location = format!("redis://{}/{}", target.addr(), target.db());
        Ok(RedisStore {
            target,
            location,
            prefix: DEFAULT_PREFIX.to_owned(),
            regime: CACHE_REGIME_VERSION,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            io_timeout: DEFAULT_IO_TIMEOUT,
            retry_after: DEFAULT_RETRY_AFTER,
            op_script: Script::new(OP_SCRIPT),
            transition_script: Script::new(TRANSITION_SCRIPT),
            state: Mutex::new(ConnState::default()),
            unreachable: AtomicU64::new(0),
            observer: None,
        })
    }

    /// Keys live under `prefix` (`<prefix>:regime`, `<prefix>:entry:…`), so several caches can
    /// share one server. Stores with different prefixes never see each other.
    ///
    /// # Errors
    /// [`Error::InvalidStoreConfig`] unless `prefix` is 1 to 100 bytes of `[A-Za-z0-9_.-]`.
    pub fn with_prefix(mut self, prefix: &str) -> Result<RedisStore, Error> {
        check_prefix(prefix)?;
        self.prefix = prefix.to_owned();
        Ok(self)
    }

    /// The same store as seen by a build with regime version `regime` (tests simulating an
    /// upgrade, tools). Never use it to write a live cache under a regime you do not implement.
    pub fn with_regime(mut self, regime: u32) -> RedisStore {
        self.regime = regime;
        self
    }

    /// Bounds on connecting (TCP connect and handshake) and on each command's write and reply.
    /// An operation that exceeds one is refused (a miss), never waited for longer; the server
    /// may still apply a command that timed out (docs/disk-format.md).
    pub fn with_timeouts(mut self, connect: Duration, io: Duration) -> RedisStore {
        self.connect_timeout = connect;
        self.io_timeout = io;
        self
    }

    /// After a connection failure, operations are refused without contacting the server for
    /// `pause` (default `DEFAULT_RETRY_AFTER`); `Duration::ZERO` retries on every operation,
    /// and a pause past what the clock can count (`Duration::MAX`) never retries: after its
    /// first connection failure the store refuses every operation.
    pub fn with_retry_after(mut self, pause: Duration) -> RedisStore {
        self.retry_after = pause;
        self
    }

    /// The same store, reporting every store and lookup to `observer` ([`Observer`]), as
    /// `DiskCache::with_observer` does. Without one, operations are only logged through
    /// `tracing`.
    pub fn with_observer(mut self, observer: Arc<Observer>) -> RedisStore {
        self.observer = Some(observer);
        self
    }

    /// The key prefix.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The regime version this handle writes and admits.
    pub fn regime(&self) -> u32 {
        self.regime
    }

    /// How many times this store failed to reach the server (a failed connect, a timeout or a
    /// dropped connection); operations refused during the pause after a failure are not counted
    /// here (they are counted as refusals by the store's [`Observer`]).
    pub fn unreachable_count(&self) -> u64 {
        self.unreachable.load(Ordering::Relaxed)
    }

    /// The Redis key of the regime stamp.
    pub fn stamp_key(&self) -> String {
        format!("{}:regime", self.prefix)
    }

    /// The Redis key of the entry at `key` in `space`.
    pub fn entry_key(&self, space: Space, key: &CacheKey) -> String {
        self.space_key("entry", space, key.as_str())
    }

    /// The Redis key of the claim of the entry at `key` in `space` (a hash read by keep-faster
    /// stores: `sha`, `id`, `time`; see docs/disk-format.md).
    pub fn claim_key(&self, space: Space, key: &CacheKey) -> String {
        self.space_key("claim", space, key.as_str())
    }

    /// The Redis key of the set of keys holding entries of `space` for `digest`.
    pub fn digest_key(&self, space: Space, digest: &str) -> String {
        self.space_key("digest", space, digest)
    }

    /// `<prefix>:<what>:<space>:<name>`, the space `schedule` or `placement`.
    fn space_key(&self, what: &str, space: Space, name: &str) -> String {
        let space = match space {
            Space::Schedule => "schedule",
            Space::Placement => "placement",
        };
        format!("{}:{what}:{space}:{name}", self.prefix)
    }

    /// The Redis key of the set of every name a regime transition deletes.
    pub fn index_key(&self) -> String {
        format!("{}:index", self.prefix)
    }

    /// A connected connection, or the refusal (during the pause after a failure, immediately).
    fn connection<'a>(&self, state: &'a mut ConnState) -> Result<&'a mut Connection, Refusal> {
        if state.conn.is_none() {
            if let Some((until, kind, message)) = &state.down
                && until.is_none_or(|until| Instant::now() < until)
            {
                return Err(Refusal::Io {
                    during: "connect to the redis server",
                    kind: *kind,
                    message: format!("server unreachable, not retried yet: {message}"),
                });
            }
            // One entry (the script never sends one past the cap) and small replies.
            let limits = Limits::for_values_up_to(disk::MAX_ENTRY_BYTES as usize);
            let connected =
                Connection::connect(&self.target, self.connect_timeout, self.io_timeout, limits);
            match connected {
                Ok(c) => {
                    state.down = None;
                    state.conn = Some(c);
                }
                Err(e) => {
                    let refusal = refusal_of("connect to the redis server", &e);
                    self.mark_unreachable(state, &refusal);
                    return Err(refusal);
                }
            }
        }
        state.conn.as_mut().ok_or_else(|| Refusal::Io {
            during: "connect to the redis server",
            kind: io::ErrorKind::NotConnected,
            message: "no connection".into(),
        })
    }

    fn mark_unreachable(&self, state: &mut ConnState, refusal: &Refusal) {
        self.unreachable.fetch_add(1, Ordering::Relaxed);
        state.conn = None;
        let (kind, message) = match refusal {
            Refusal::Io { kind, message, .. } => (*kind, message.clone()),
            other => (io::ErrorKind::Other, other.to_string()),
        };
        tracing::warn!(
            target: "schedule_cache::redis",
            location = %self.location,
            error = %message,
            retry_after_ms = self.retry_after.as_millis() as u64,
            "redis server unreachable; operations are misses until it answers"
        );
        state.down = Some((Instant::now().checked_add(self.retry_after), kind, message));
    }

    /// Runs `script`; on a connection-level failure (I/O, a timeout, a reply past a bound or
    /// not Redis's protocol) drops the connection (its reply stream may be out of step) and
    /// starts the pause.
    fn run(
        &self,
        state: &mut ConnState,
        during: &'static str,
        script: &Script,
        keys: &[&[u8]],
        args: &[&[u8]],
    ) -> Result<Value, Refusal> {
        let conn = self.connection(state)?;
        match conn.eval(script, keys, args) {
            Ok(v) => Ok(v),
            Err(e) => {
                let refusal = refusal_of(during, &e);
                if e.is_connection_level() {
                    self.mark_unreachable(state, &refusal);
                }
                Err(refusal)
            }
        }
    }

    /// Runs the operation script, transitioning an absent or older stamp first (then retrying).
    fn operate(
        &self,
        space: Space,
        key: &CacheKey,
        digest: &str,
        write: Option<&Write<'_>>,
    ) -> Result<Answer, Refusal> {
        let canonical = render_stamp(self.regime);
        let bare = self.regime.to_string();
        let stamp_key = self.stamp_key();
        let index_key = self.index_key();
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let entry_key = self.entry_key(space, key);
        let digest_key = self.digest_key(space, digest);
        let claim_key = self.claim_key(space, key);
        // Shortest round-trip notation: the script's `tonumber` reads the same double.
        let time = write
            .and_then(|w| w.time)
            .map_or(String::new(), |t| format!("{t:e}"));
        let (sibling_fetch, max_entry, max_key) = (
            SIBLING_FETCH.to_string(),
            disk::MAX_ENTRY_BYTES.to_string(),
            crate::key::MAX_KEY_LEN.to_string(),
        );
        for _ in 0..SETTLE_ATTEMPTS {
            let keys = [
                stamp_key.as_bytes(),
                entry_key.as_bytes(),
                index_key.as_bytes(),
                digest_key.as_bytes(),
                claim_key.as_bytes(),
            ];
            let args = [
                canonical.as_bytes(),
                bare.as_bytes(),
                match write.map(|w| w.policy) {
                    None => b"get".as_slice(),
                    Some(StorePolicy::LastWriteWins) => b"set",
                    Some(StorePolicy::KeepFaster) => b"keep",
                },
                write.map_or("", |w| w.payload).as_bytes(),
                key.as_str().as_bytes(),
                sibling_fetch.as_bytes(),
                max_entry.as_bytes(),
                max_key.as_bytes(),
                time.as_bytes(),
                write.map_or("", |w| w.identity.as_str()).as_bytes(),
            ];
            let value = self.run(
                &mut state,
                "run the cache script",
                &self.op_script,
                &keys,
                &args,
            )?;
            let answer = parse_answer(value).ok_or_else(|| Refusal::Io {
                during: "run the cache script",
                kind: io::ErrorKind::InvalidData,
                message: "unexpected reply from the server".into(),
            })?;
            let Answer::Stamp(observed) = answer else {
                return Ok(answer);
            };
            match observed.as_deref().map(parse_stamp) {
                Some(Some(v)) if v > self.regime => {
                    return Err(Refusal::NewerRegime {
                        found: v,
                        ours: self.regime,
                    });
                }
                Some(None) => {
                    let bytes = observed.unwrap_or_default();
                    return Err(Refusal::MalformedStamp {
                        content: String::from_utf8_lossy(&bytes).chars().take(64).collect(),
                    });
                }
                // Equal cannot be observed (both spellings are admitted); absent or older:
                Some(Some(_)) | None => {
                    let (seen, stamp): (&[u8], &[u8]) = match &observed {
                        None => (b"absent", b""),
                        Some(b) => (b"present", b.as_slice()),
                    };
                    let removed = self.run(
                        &mut state,
                        "sweep entries for a new regime",
                        &self.transition_script,
                        &[stamp_key.as_bytes(), index_key.as_bytes()],
                        &[seen, stamp, canonical.as_bytes()],
                    )?;
                    if let Some(removed) = int_of(&removed).filter(|n| *n >= 0) {
                        tracing::info!(
                            target: "schedule_cache::redis",
                            location = %self.location,
                            prefix = %self.prefix,
                            from = %observed.as_deref().map(String::from_utf8_lossy).unwrap_or("absent".into()).trim_end(),
                            to = self.regime,
                            removed,
                            "redis cache moved to a new regime"
                        );
                    }
                }
            }
        }
        Err(Refusal::Io {
            during: "settle the regime stamp",
            kind: io::ErrorKind::Other,
            message: format!("the stamp changed {SETTLE_ATTEMPTS} times while opening"),
        })
    }
}

impl crate::TwoLevel<crate::DiskCache, RedisStore> {
    /// The directory store at `dir` in front of the Redis server at `url` (default prefix and
    /// timeouts). Touches nothing and does not connect: an unreachable server shows up as
    /// refusals (misses) of the shared level.
    ///
    /// # Errors
    /// [`Error::InvalidStoreConfig`] if `url` does not parse.
    pub fn disk_then_redis(
        dir: impl Into<std::path::PathBuf>,
        url: &str,
    ) -> Result<crate::TwoLevel<crate::DiskCache, RedisStore>, Error> {
        Ok(crate::TwoLevel::new(
            crate::DiskCache::new(dir),
            RedisStore::open(url)?,
        ))
    }
}

impl Store for RedisStore {
    /// Under [`StorePolicy::KeepFaster`] the comparison happens inside the store's Lua script,
    /// against the claim the last store of the key recorded with its entry.
    fn store_with<E: Stored>(
        &self,
        key: Option<&CacheKey>,
        entry: &E,
        policy: StorePolicy,
    ) -> Result<StoreOutcome, Error> {
        let at = PathBuf::from(self.location());
        disk::level_store((&at, self.observer.as_deref()), key, entry, |key, text| {
            let write = Write {
                payload: text,
                policy,
                identity: entry.claim_identity(),
                time: entry.best_time(),
            };
            let unexpected = || Refusal::Io {
                during: "run the cache script",
                kind: io::ErrorKind::InvalidData,
                message: "unexpected reply to a store".into(),
            };
            match self.operate(E::SPACE, key, entry.digest(), Some(&write))? {
                Answer::Stored => Ok(StoreOutcome::Stored),
                Answer::KeptExisting(time) if policy == StorePolicy::KeepFaster => {
                    match std::str::from_utf8(&time)
                        .ok()
                        .and_then(|t| t.parse::<f64>().ok())
                    {
                        Some(existing_time)
                            if existing_time.is_finite() && existing_time >= 0.0 =>
                        {
                            Ok(StoreOutcome::KeptExisting(KeptExisting {
                                existing_time: existing_time + 0.0,
                                new_time: write.time,
                            }))
                        }
                        _ => Err(unexpected()),
                    }
                }
                _ => Err(unexpected()),
            }
        })
    }

    fn probe<E: Stored>(&self, key: Option<&CacheKey>, digest: &str) -> Lookup<E> {
        let at = PathBuf::from(self.location());
        disk::level_probe((&at, self.observer.as_deref()), key, |key| {
            match self.operate(E::SPACE, key, digest, None) {
                Ok(Answer::Found(bytes)) => match disk::decode_entry::<E>(&bytes, Some(digest)) {
                    Ok(e) => Lookup::Hit(e),
                    Err(m) => Lookup::Miss(m),
                },
                Ok(Answer::NoEntry(mut same_digest)) => {
                    // Only keys of this digest, as the directory store's sibling index.
                    same_digest.retain(|k| {
                        k != key.as_str()
                            && CacheKey::new(k).is_ok()
                            && disk::key_starts_with_digest(k, digest)
                    });
                    same_digest.sort();
                    same_digest.truncate(MAX_SIBLINGS);
                    Lookup::Miss(MissReason::NoEntry { same_digest })
                }
                Ok(Answer::Unreadable(message)) => Lookup::Miss(MissReason::Unreadable {
                    kind: io::ErrorKind::InvalidData,
                    message: disk::short(&message),
                }),
                Ok(Answer::TooLarge(len)) => Lookup::Miss(MissReason::Unreadable {
                    kind: io::ErrorKind::FileTooLarge,
                    message: format!(
                        "a value of {len} bytes, larger than the cap of {} bytes",
                        disk::MAX_ENTRY_BYTES
                    ),
                }),
                Ok(Answer::Stored | Answer::Stamp(_) | Answer::KeptExisting(_)) => {
                    Lookup::Refused(Refusal::Io {
                        during: "run the cache script",
                        kind: io::ErrorKind::InvalidData,
                        message: "unexpected reply to a lookup".into(),
                    })
                }
                Err(r) => Lookup::Refused(r),
            }
        })
    }

    fn location(&self) -> String {
        format!("{}#{}", self.location, self.prefix)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::disk::Outcome;

    #[test]
    fn prefixes_are_checked_and_urls_parsed_without_connecting() {
        assert!(RedisStore::open("not a url").is_err());
        let s = RedisStore::open("redis://user:secret@127.0.0.1:1/3").expect("parses");
        assert!(!s.location().contains("secret"), "{}", s.location());
        assert_eq!(s.location(), "redis://127.0.0.1:1/3#kcache");
        for bad in ["", "a:b", "a b", &"x".repeat(101)] {
            assert!(
                RedisStore::open("redis://127.0.0.1:1")
                    .expect("parses")
                    .with_prefix(bad)
                    .is_err(),
                "{bad:?}"
            );
        }
        let s = s.with_prefix("farm-1.v2").expect("prefix");
        let key = CacheKey::new("ab-cc").expect("key");
        assert_eq!(s.stamp_key(), "farm-1.v2:regime");
        assert_eq!(
            s.entry_key(Space::Placement, &key),
            "farm-1.v2:entry:placement:ab-cc"
        );
        assert_eq!(
            s.digest_key(Space::Schedule, "ab"),
            "farm-1.v2:digest:schedule:ab"
        );
    }

    #[test]
    fn script_replies_are_parsed_defensively() {
        let bulk = |s: &str| Value::BulkString(s.as_bytes().to_vec());
        assert!(matches!(
            parse_answer(Value::Array(vec![Value::Int(0)])),
            Some(Answer::Stamp(None))
        ));
        assert!(matches!(
            parse_answer(Value::Array(vec![Value::Int(0), bulk("2\n")])),
            Some(Answer::Stamp(Some(b))) if b == b"2\n"
        ));
        assert!(matches!(
            parse_answer(Value::Array(vec![Value::Int(2), Value::Array(vec![bulk("k")])])),
            Some(Answer::NoEntry(v)) if v == ["k"]
        ));
        for junk in [
            Value::Nil,
            Value::Int(1),
            Value::Array(vec![]),
            Value::Array(vec![Value::Int(9)]),
            Value::Array(vec![bulk("1")]),
            Value::Array(vec![Value::Int(1), Value::Int(5)]),
        ] {
            assert!(parse_answer(junk).is_none());
        }
    }

    /// A pause past what the clock can count is no deadline, not a panic: the failure is a
    /// refusal, and so is every operation after it, without contacting the server.
    #[test]
    fn an_endless_retry_pause_refuses_without_retrying() {
        let store = RedisStore::open("redis://127.0.0.1:1")
            .expect("parses")
            .with_timeouts(Duration::from_millis(200), Duration::from_millis(200))
            .with_retry_after(Duration::MAX);
        let key = CacheKey::new("ab-cc").expect("key");
        for _ in 0..2 {
            let found = store.probe::<crate::placement::PlacementEntry>(Some(&key), "ab");
            assert!(
                matches!(found, Lookup::Refused(Refusal::Io { .. })),
                "{found:?}"
            );
        }
        assert_eq!(store.unreachable_count(), 1);
    }

    #[test]
    fn an_unreachable_server_is_a_refusal_then_a_paused_refusal() {
        // Port 1 on loopback: nothing listens there, the connect is refused at once.
        let store = RedisStore::open("redis://127.0.0.1:1")
            .expect("parses")
            .with_timeouts(Duration::from_millis(200), Duration::from_millis(200));
        let key = CacheKey::new("ab-cc").expect("key");
        let observer = disk::Observer::new();
        let store = store.with_observer(observer.clone());
        let found = store.probe::<crate::placement::PlacementEntry>(Some(&key), "ab");
        let events = observer.take();
        assert!(
            matches!(found, Lookup::Refused(Refusal::Io { .. })),
            "{found:?}"
        );
        assert_eq!(store.unreachable_count(), 1);
        assert!(matches!(events[0].outcome, Outcome::Refused(_)));
        // During the pause the server is not contacted again.
        let again = store.probe::<crate::placement::PlacementEntry>(Some(&key), "ab");
        assert!(
            matches!(&again, Lookup::Refused(Refusal::Io { message, .. }) if message.contains("not retried")),
            "{again:?}"
        );
        assert_eq!(store.unreachable_count(), 1);
    }
}
