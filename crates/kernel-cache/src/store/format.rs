//! The kernel store's file formats and names: program blobs (`b-<sha256>`), key entries
//! (`k-<digest>`), remembered failures (`f-<digest>`) and per-key compile lock files
//! (`c-<digest>`). See `docs/disk-format.md` ("The kernel store").

use sha2::{Digest, Sha256};

use super::record::MissReason;
use crate::backend::SavedProgram;

/// First line of every blob file (2: the blob lists the kernels it was compiled for).
pub(crate) const BLOB_MAGIC: &str = "kcache kernel blob 2";
/// First line of every key entry file (2: the entry records its host part).
pub(crate) const ENTRY_MAGIC: &str = "kcache kernel entry 2";

/// First line of every remembered failure file.
pub(crate) const FAILURE_MAGIC: &str = "kcache kernel failure 1";

/// The most bytes of a remembered failure's message (a longer one is cut, on a character
/// boundary, and ends with [`CUT_MARK`]).
pub(crate) const MAX_FAILURE_MESSAGE: usize = 2048;

/// What ends a message cut to [`MAX_FAILURE_MESSAGE`].
const CUT_MARK: &str = "\n... (cut)";

/// The largest failure file a lookup reads.
pub(crate) const MAX_FAILURE_FILE: u64 = 4096;

/// Names the layout of the parts an entry name hashes (identity, key).
const ENTRY_NAME_LAYOUT: &[u8] = b"kcache-kernel-store-entry-1";

/// Names the layout of the parts the name of a host-specific entry hashes (identity, key,
/// host part): the entry of a kernel whose options' code depends on the machine
/// (`Backend::host_part` is `Some`). Another domain than [`ENTRY_NAME_LAYOUT`],
/// so no such name equals a name of the other form. Both forms are names of regime 1: a
/// reader never derives anything from a name but looks it up, so a build that knows only
/// the first form reads, evicts and counts the second's entries as any other (it never
/// looks one up), and the entry files are the same.
const HOST_ENTRY_NAME_LAYOUT: &[u8] = b"kcache-kernel-store-host-entry-1";

/// The longest symbol table a blob may declare (a bound on what a parse allocates).
const MAX_SYMBOLS: usize = 1 << 20;

/// The most kernels a blob may say it was compiled for (a bound on what a parse allocates).
const MAX_KERNELS: usize = 1 << 20;

/// One kernel a blob was compiled for, as its blob records it (and an entry must match):
/// the backend identity's digest, the key's SHA-256, the host part (lowercase hex, or `-`)
/// and the kernel's symbol in the program.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct CompiledFor {
    /// [`identity_digest`] of the backend.
    pub(crate) identity: String,
    /// SHA-256 of the kernel key.
    pub(crate) key: String,
    /// The host part in lowercase hex, `-` for none.
    pub(crate) host: String,
    /// The kernel's symbol in the program.
    pub(crate) symbol: String,
}

impl CompiledFor {
    /// `key` compiled for the identity whose [`identity_digest`] is `identity`, under `host`,
    /// as `symbol`.
    pub(crate) fn new(identity: &str, key: &str, host: Option<&[u8; 32]>, symbol: &str) -> Self {
        CompiledFor {
            identity: identity.to_string(),
            key: sha256_hex(key.as_bytes()),
            host: host_text(host),
            symbol: symbol.to_string(),
        }
    }

    /// Whether every field is well-formed (what a blob may hold).
    fn is_valid(&self) -> bool {
        is_hex64(&self.identity)
            && is_hex64(&self.key)
            && is_host_text(&self.host)
            && is_valid_symbol(&self.symbol)
    }

    /// Whether `identity`, `key` and `host` are this kernel's (the symbol is not compared).
    pub(crate) fn names(&self, identity: &str, key: &str, host: &str) -> bool {
        (identity, key, host) == (&self.identity, &self.key, &self.host)
    }
}

/// How a host part is written in blobs and entries: 64 lowercase hex digits, or `-`.
pub(crate) fn host_text(host: Option<&[u8; 32]>) -> String {
    host.map_or_else(|| "-".to_string(), hex::encode)
}

fn is_host_text(s: &str) -> bool {
    s == "-" || is_hex64(s)
}

/// A blob file's content: the program the backend saved, and the kernels it was compiled
/// for (each entry naming the blob must be one of them).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct BlobFile {
    /// The backend's saved program.
    pub(crate) saved: SavedProgram,
    /// The kernels the program was compiled for.
    pub(crate) kernels: Vec<CompiledFor>,
}

/// Lowercase hex SHA-256 of `bytes`.
pub(crate) fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

fn is_hex64(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// `b-<64 hex>`: a program blob named by the SHA-256 of its whole file.
pub(crate) fn is_blob_name(name: &str) -> bool {
    name.strip_prefix("b-").is_some_and(is_hex64)
}

/// `k-<64 hex>`: a key entry.
pub(crate) fn is_entry_name(name: &str) -> bool {
    name.strip_prefix("k-").is_some_and(is_hex64)
}

/// `f-<64 hex>`: a remembered failure, named by the entry digest of its key.
pub(crate) fn is_failure_name(name: &str) -> bool {
    name.strip_prefix("f-").is_some_and(is_hex64)
}

/// A file the store writes besides its entries: a compile lock or the counters file (how a
/// bare legacy stamp's directory is told to be the kernel store's).
pub(crate) fn is_own_file(name: &str) -> bool {
    is_compile_lock_name(name) || name == super::counters::STATS_FILE
}

/// `c-<64 hex>`: a per-key compile lock file (not an entry: never swept by a regime
/// change, removed by garbage collection only when nobody holds it).
pub(crate) fn is_compile_lock_name(name: &str) -> bool {
    name.strip_prefix("c-").is_some_and(is_hex64)
}

/// Every file a regime change deletes.
pub(crate) fn is_store_entry(name: &str) -> bool {
    is_blob_name(name) || is_entry_name(name) || is_failure_name(name)
}

/// The digest naming the entry (and the compile lock, and the farm key) of `key` under
/// `identity` and, for options whose code depends on the machine, the backend's `host`
/// part: `digest_of_parts("kcache-kernel-store-entry-1", identity, key)` without one
/// (the names of every store before host parts), `digest_of_parts
/// ("kcache-kernel-store-host-entry-1", identity, key, host)` (the host part's 32 raw
/// bytes) with one.
pub(crate) fn entry_digest(identity: &str, key: &str, host: Option<&[u8; 32]>) -> String {
    match host {
        None => canonical_text::digest_of_parts(&[
            ENTRY_NAME_LAYOUT,
            identity.as_bytes(),
            key.as_bytes(),
        ]),
        Some(host) => canonical_text::digest_of_parts(&[
            HOST_ENTRY_NAME_LAYOUT,
            identity.as_bytes(),
            key.as_bytes(),
            host,
        ]),
    }
}

/// The digest recorded for an identity inside an entry.
pub(crate) fn identity_digest(identity: &str) -> String {
    canonical_text::digest_of_parts(&[b"kcache-kernel-identity", identity.as_bytes()])
}

/// Whether `s` may be a symbol in a blob's table or an entry: non-empty, no NUL, no
/// line break.
pub(crate) fn is_valid_symbol(s: &str) -> bool {
    !s.is_empty() && !s.bytes().any(|b| matches!(b, 0 | b'\n' | b'\r'))
}

/// The blob file of `saved` compiled for `kernels`: magic line, symbol count, one symbol
/// per line, kernel count, one `<identity> <key> <host> <symbol>` line per kernel, byte
/// count, then the bytes. `None` if a symbol or a kernel's field is invalid.
pub(crate) fn encode_blob(saved: &SavedProgram, kernels: &[CompiledFor]) -> Option<Vec<u8>> {
    if !saved.symbols.iter().all(|s| is_valid_symbol(s)) || saved.symbols.len() > MAX_SYMBOLS {
        return None;
    }
    if kernels.len() > MAX_KERNELS || !kernels.iter().all(CompiledFor::is_valid) {
        return None;
    }
    let mut out = Vec::with_capacity(saved.bytes.len() + 64 + saved.symbols.len() * 16);
    out.extend_from_slice(BLOB_MAGIC.as_bytes());
    out.extend_from_slice(format!("\nsymbols {}\n", saved.symbols.len()).as_bytes());
    for s in &saved.symbols {
        out.extend_from_slice(s.as_bytes());
        out.push(b'\n');
    }
    out.extend_from_slice(format!("kernels {}\n", kernels.len()).as_bytes());
    for k in kernels {
        out.extend_from_slice(
            format!("{} {} {} {}\n", k.identity, k.key, k.host, k.symbol).as_bytes(),
        );
    }
    out.extend_from_slice(format!("bytes {}\n", saved.bytes.len()).as_bytes());
    out.extend_from_slice(&saved.bytes);
    Some(out)
}

/// Splits off one `\n`-terminated UTF-8 line.
fn line<'a>(rest: &mut &'a [u8]) -> Option<&'a str> {
    let end = rest.iter().position(|&b| b == b'\n')?;
    let (l, tail) = rest.split_at(end);
    *rest = &tail[1..];
    std::str::from_utf8(l).ok()
}

/// Splits off one `<tag> <value>` line; the value.
fn field(rest: &mut &[u8], tag: &str) -> Option<String> {
    Some(
        line(rest)?
            .strip_prefix(tag)?
            .strip_prefix(' ')?
            .to_string(),
    )
}

fn count_line(rest: &mut &[u8], tag: &str) -> Option<usize> {
    field(rest, tag)?.parse().ok()
}

/// The program a blob file holds and the kernels it was compiled for, or `None` for
/// anything malformed (never panics).
pub(crate) fn decode_blob(file: &[u8]) -> Option<BlobFile> {
    let mut rest = file;
    if line(&mut rest)? != BLOB_MAGIC {
        return None;
    }
    let n = count_line(&mut rest, "symbols")?;
    if n > MAX_SYMBOLS {
        return None;
    }
    let mut symbols = Vec::with_capacity(n.min(1024));
    for _ in 0..n {
        let s = line(&mut rest)?;
        if !is_valid_symbol(s) {
            return None;
        }
        symbols.push(s.to_string());
    }
    let m = count_line(&mut rest, "kernels")?;
    if m > MAX_KERNELS {
        return None;
    }
    let mut kernels = Vec::with_capacity(m.min(1024));
    for _ in 0..m {
        let mut fields = line(&mut rest)?.splitn(4, ' ');
        let k = CompiledFor {
            identity: fields.next()?.to_string(),
            key: fields.next()?.to_string(),
            host: fields.next()?.to_string(),
            symbol: fields.next()?.to_string(),
        };
        if !k.is_valid() {
            return None;
        }
        kernels.push(k);
    }
    let len = count_line(&mut rest, "bytes")?;
    if rest.len() != len {
        return None;
    }
    Some(BlobFile {
        saved: SavedProgram {
            bytes: rest.to_vec(),
            symbols,
        },
        kernels,
    })
}

/// A key entry: which blob holds the key's program and under which symbol, and for which
/// identity, key and host part it was saved (what the blob must say it was compiled for).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct EntryRecord {
    /// The SHA-256 of the blob file.
    pub(crate) blob: String,
    /// The kernel's symbol in the program.
    pub(crate) symbol: String,
    /// [`identity_digest`] of the backend that saved it.
    pub(crate) identity: String,
    /// SHA-256 of the key.
    pub(crate) key: String,
    /// The host part ([`host_text`]).
    pub(crate) host: String,
    /// How long the compile took, in milliseconds.
    pub(crate) compile_ms: u64,
}

impl EntryRecord {
    pub(crate) fn encode(&self) -> Vec<u8> {
        format!(
            "{ENTRY_MAGIC}\nblob {}\nsymbol {}\nidentity {}\nkey {}\nhost {}\ncompile_ms {}\n",
            self.blob, self.symbol, self.identity, self.key, self.host, self.compile_ms
        )
        .into_bytes()
    }

    /// The kernel this entry says its blob was compiled for.
    pub(crate) fn compiled_for(&self) -> CompiledFor {
        CompiledFor {
            identity: self.identity.clone(),
            key: self.key.clone(),
            host: self.host.clone(),
            symbol: self.symbol.clone(),
        }
    }

    /// Whether this entry is for `want`'s kernel (identity, key and host part).
    pub(crate) fn is_for(&self, want: &CompiledFor) -> bool {
        want.names(&self.identity, &self.key, &self.host)
    }

    /// Whether `saved` (verified by its digest) holds this entry's symbol and says it was
    /// compiled (`kernels`) for this very kernel: an entry rewritten to name another
    /// kernel's blob (or another symbol of its own) is no load of the other kernel.
    pub(crate) fn fits(
        &self,
        saved: &SavedProgram,
        kernels: &[CompiledFor],
    ) -> Result<(), MissReason> {
        if !saved.symbols.contains(&self.symbol) {
            return Err(MissReason::NoSymbol);
        }
        if !kernels.contains(&self.compiled_for()) {
            return Err(MissReason::WrongBlob);
        }
        Ok(())
    }

    /// The entry an entry file holds, or `None` for anything malformed.
    pub(crate) fn decode(file: &[u8]) -> Option<EntryRecord> {
        let mut rest = file;
        if line(&mut rest)? != ENTRY_MAGIC {
            return None;
        }
        let mut field = |tag: &str| field(&mut rest, tag);
        let record = EntryRecord {
            blob: field("blob")?,
            symbol: field("symbol")?,
            identity: field("identity")?,
            key: field("key")?,
            host: field("host")?,
            compile_ms: field("compile_ms")?.parse().ok()?,
        };
        let well_formed = rest.is_empty()
            && is_hex64(&record.blob)
            && is_valid_symbol(&record.symbol)
            && is_hex64(&record.identity)
            && is_hex64(&record.key)
            && is_host_text(&record.host);
        well_formed.then_some(record)
    }
}

/// A remembered failure: for which identity, key and host part the kernel failed alone,
/// and what the failure said.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct FailureRecord {
    /// [`identity_digest`] of the backend.
    pub(crate) identity: String,
    /// SHA-256 of the key.
    pub(crate) key: String,
    /// The host part ([`host_text`]).
    pub(crate) host: String,
    /// The failure's message (at most [`MAX_FAILURE_MESSAGE`] bytes).
    pub(crate) message: String,
}

/// `message` cut to at most [`MAX_FAILURE_MESSAGE`] bytes on a character boundary (a cut
/// one ends with a mark saying so).
pub(crate) fn bounded_message(message: &str) -> String {
    if message.len() <= MAX_FAILURE_MESSAGE {
        return message.to_string();
    }
    let mut end = MAX_FAILURE_MESSAGE - CUT_MARK.len();
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}{CUT_MARK}", &message[..end])
}

impl FailureRecord {
    /// The file: magic line, `identity`, `key` and `host` lines, `message <len>`, then the
    /// message's bytes (cut to [`MAX_FAILURE_MESSAGE`]).
    pub(crate) fn encode(&self) -> Vec<u8> {
        let message = bounded_message(&self.message);
        let mut out = format!(
            "{FAILURE_MAGIC}\nidentity {}\nkey {}\nhost {}\nmessage {}\n",
            self.identity,
            self.key,
            self.host,
            message.len()
        )
        .into_bytes();
        out.extend_from_slice(message.as_bytes());
        out
    }

    /// The failure a failure file holds, or `None` for anything malformed (never panics).
    pub(crate) fn decode(file: &[u8]) -> Option<FailureRecord> {
        let mut rest = file;
        if line(&mut rest)? != FAILURE_MAGIC {
            return None;
        }
        let mut field = |tag: &str| field(&mut rest, tag);
        let identity = field("identity")?;
        let key = field("key")?;
        let host = field("host")?;
        let len: usize = field("message")?.parse().ok()?;
        if len > MAX_FAILURE_MESSAGE || rest.len() != len {
            return None;
        }
        let message = std::str::from_utf8(rest).ok()?.to_string();
        let well_formed = is_hex64(&identity) && is_hex64(&key) && is_host_text(&host);
        well_formed.then_some(FailureRecord {
            identity,
            key,
            host,
            message,
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn blobs_round_trip(bytes in proptest::collection::vec(any::<u8>(), 0..300),
                            symbols in proptest::collection::vec("[^\n\r\u{0}]{1,12}", 0..5),
                            hosts in proptest::collection::vec(any::<Option<[u8; 32]>>(), 0..5)) {
            let kernels: Vec<CompiledFor> = symbols
                .iter()
                .zip(&hosts)
                .enumerate()
                .map(|(i, (symbol, host))| CompiledFor {
                    identity: sha256_hex(b"i"),
                    key: sha256_hex(&[i as u8]),
                    host: host_text(host.as_ref()),
                    symbol: symbol.clone(),
                })
                .collect();
            let saved = SavedProgram { bytes, symbols };
            let file = encode_blob(&saved, &kernels).unwrap();
            prop_assert_eq!(decode_blob(&file), Some(BlobFile { saved, kernels }));
        }

        /// Every strict prefix of a blob and every single-byte change either fails to
        /// parse or parses to something else (the digest catches the rest).
        #[test]
        fn truncated_blobs_never_parse(bytes in proptest::collection::vec(any::<u8>(), 0..100),
                                       cut in any::<prop::sample::Index>()) {
            let saved = SavedProgram { bytes, symbols: vec!["k".into()] };
            let kernels = [CompiledFor {
                identity: sha256_hex(b"i"),
                key: sha256_hex(b"k"),
                host: "-".into(),
                symbol: "k".into(),
            }];
            let file = encode_blob(&saved, &kernels).unwrap();
            let cut = cut.index(file.len());
            prop_assert_eq!(decode_blob(&file[..cut]), None);
        }

        #[test]
        fn arbitrary_bytes_never_panic(file in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = decode_blob(&file);
            let _ = EntryRecord::decode(&file);
            let _ = FailureRecord::decode(&file);
        }

        /// A failure round-trips with its message cut to the bound on a character
        /// boundary; every file it writes fits the lookup's read cap.
        #[test]
        fn failures_round_trip(message in "\\PC{0,3000}", host in any::<Option<[u8; 32]>>()) {
            let r = FailureRecord {
                identity: sha256_hex(b"i"), key: sha256_hex(b"k"),
                host: host_text(host.as_ref()), message: message.clone(),
            };
            let file = r.encode();
            prop_assert!(file.len() as u64 <= MAX_FAILURE_FILE);
            let back = FailureRecord::decode(&file).unwrap();
            prop_assert!(back.message.len() <= MAX_FAILURE_MESSAGE);
            if message.len() <= MAX_FAILURE_MESSAGE {
                prop_assert_eq!(back, r);
            } else {
                prop_assert!(back.message.ends_with(CUT_MARK));
                prop_assert!(message.starts_with(back.message.trim_end_matches(CUT_MARK)));
            }
        }

        #[test]
        fn entries_round_trip(symbol in "[^\n\r\u{0}]{1,20}", ms in any::<u64>(),
                              host in any::<Option<[u8; 32]>>()) {
            let r = EntryRecord {
                blob: sha256_hex(b"b"), symbol, identity: sha256_hex(b"i"), key: sha256_hex(b"k"),
                host: host_text(host.as_ref()), compile_ms: ms,
            };
            prop_assert_eq!(EntryRecord::decode(&r.encode()), Some(r));
        }
    }

    #[test]
    fn names() {
        let d = sha256_hex(b"x");
        assert!(is_blob_name(&format!("b-{d}")));
        assert!(is_entry_name(&format!("k-{d}")));
        assert!(is_compile_lock_name(&format!("c-{d}")));
        assert!(!is_store_entry(&format!("c-{d}")));
        assert!(is_failure_name(&format!("f-{d}")) && is_store_entry(&format!("f-{d}")));
        assert!(!is_blob_name(&format!("b-{}", d.to_uppercase())));
        assert!(!is_blob_name("b-"));
        assert!(cache_dir::validate_name(&format!("b-{d}")).is_ok());
        assert_ne!(entry_digest("a", "bc", None), entry_digest("ab", "c", None));
    }

    /// The names of both forms, pinned (computed outside this crate from the formulas of
    /// `docs/disk-format.md`): the form without a host part is every earlier build's, so
    /// the entries of stores written before host parts keep being found.
    #[test]
    fn entry_names_are_pinned() {
        assert_eq!(
            entry_digest("file-backend 1", "key-0", None),
            "fbf452ab6ea2755f0b42bb8c0caf295095e974b3b8b755b2f9bf5ca0b59705b8"
        );
        assert_eq!(
            entry_digest("file-backend 1", "key-0", Some(&[1; 32])),
            "d05e71941aa9dcba2048d2dbc92716fb937633b06a2db67d6e44f73a696e5ef3"
        );
        assert_ne!(
            entry_digest("file-backend 1", "key-0", Some(&[1; 32])),
            entry_digest("file-backend 1", "key-0", Some(&[2; 32]))
        );
    }
}
