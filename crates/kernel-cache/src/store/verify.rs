//! [`KernelStore::verify`]: every entry and blob of a store checked as a lookup would
//! check it, read-only (what `kcache verify` reports for `<DIR>/kernels`).

use std::collections::HashMap;
use std::rc::Rc;

use super::format::{self, EntryRecord, FailureRecord, sha256_hex};
use super::{KernelStore, MissReason, read_private_file};

/// What [`KernelStore::verify`] found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Verified {
    /// Key entries checked.
    pub entries: u64,
    /// Program blobs checked.
    pub blobs: u64,
    /// Remembered failures checked (each must be private and well-formed).
    pub failures: u64,
    /// Each file that a lookup would refuse (its name) and why, sorted by name. A lookup
    /// meeting one of these misses (and removes it); `verify` removes nothing.
    pub problems: Vec<(String, String)>,
}

impl KernelStore {
    /// Checks every entry, blob and remembered failure as a lookup would, without loading any program and
    /// without changing anything (no removal, no use mark; the open only sweeps
    /// crash-stale staging, as every open does): a blob must be private, no larger than
    /// the store's byte limit (at least 1 MiB), named by the SHA-256 of its file and
    /// well-formed; an entry must be private and well-formed, and name a blob that
    /// verifies, holds the entry's symbol and lists the kernel the entry is for (identity,
    /// key, host part, symbol). An entry's name is a digest over the backend identity and
    /// the key, which the entry records only hashed: that the name matches is checked by
    /// the lookup that knows them (a mismatch is a miss there), not here.
    ///
    /// ```
    /// use kernel_cache::store::KernelStore;
    /// let tmp = tempfile::tempdir()?;
    /// let store = KernelStore::new(tmp.path().join("kernels"));
    /// store.create()?;
    /// // A file named like a blob that is not one is a problem, and is left in place.
    /// let forged = format!("b-{}", "0".repeat(64));
    /// std::fs::write(store.dir().join(&forged), "not a program")?;
    /// let v = store.verify()?;
    /// assert_eq!((v.entries, v.blobs), (0, 1));
    /// assert_eq!(v.problems.len(), 1);
    /// assert_eq!(v.problems[0].0, forged);
    /// assert!(store.dir().join(&forged).exists());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// The refusal if the directory is missing, not private, stamped by another store or
    /// a newer regime, or cannot be opened (as [`KernelStore::stats`]).
    pub fn verify(&self) -> Result<Verified, super::DirError> {
        let max_blob = self.max_bytes.max(1 << 20);
        self.dir.with_shared(false, |guard| {
            let mut names: Vec<String> = match guard.entries() {
                Ok(entries) => entries.filter_map(Result::ok).map(|e| e.name).collect(),
                Err(_) => Vec::new(),
            };
            names.sort();
            let mut v = Verified::default();
            // Each blob's verdict: its symbols and kernels, or why it is refused.
            let mut blobs: HashMap<String, Result<Rc<format::BlobFile>, String>> = HashMap::new();
            let mut check_blob = |digest: &str| -> Result<Rc<format::BlobFile>, String> {
                blobs
                    .entry(digest.to_string())
                    .or_insert_with(|| {
                        let path = guard
                            .path(&format!("b-{digest}"))
                            .map_err(|e| e.to_string())?;
                        let (_, bytes) =
                            read_private_file(&path, max_blob).map_err(|why| match why {
                                MissReason::Corrupt => format!("larger than {max_blob} bytes"),
                                other => other.to_string(),
                            })?;
                        if sha256_hex(&bytes) != digest {
                            return Err("its content does not hash to its name".into());
                        }
                        format::decode_blob(&bytes)
                            .map(Rc::new)
                            .ok_or_else(|| "malformed program blob".into())
                    })
                    .clone()
            };
            for name in names {
                if let Some(digest) = name.strip_prefix("b-") {
                    v.blobs += 1;
                    if let Err(why) = check_blob(digest) {
                        v.problems.push((name, why));
                    }
                    continue;
                }
                if format::is_failure_name(&name) {
                    v.failures += 1;
                    let read = guard.path(&name).map_err(|e| e.to_string()).and_then(|p| {
                        read_private_file(&p, format::MAX_FAILURE_FILE).map_err(|w| match w {
                            MissReason::Corrupt => "larger than a remembered failure".into(),
                            other => other.to_string(),
                        })
                    });
                    let why = match read {
                        Err(why) => Some(why),
                        Ok((_, bytes)) => FailureRecord::decode(&bytes)
                            .is_none()
                            .then(|| "malformed remembered failure".to_string()),
                    };
                    if let Some(why) = why {
                        v.problems.push((name, why));
                    }
                    continue;
                }
                v.entries += 1;
                let read = guard
                    .path(&name)
                    .map_err(|e| e.to_string())
                    .and_then(|p| read_private_file(&p, 4096).map_err(|w| w.to_string()));
                let why = match read {
                    Err(why) => Some(why),
                    Ok((_, bytes)) => match EntryRecord::decode(&bytes) {
                        None => Some("malformed entry".into()),
                        Some(entry) => match check_blob(&entry.blob) {
                            Err(why) if why == MissReason::NoEntry.to_string() => {
                                Some(format!("its program blob b-{} is absent", entry.blob))
                            }
                            Err(why) => Some(format!("its program blob b-{}: {why}", entry.blob)),
                            Ok(blob) if !blob.saved.symbols.contains(&entry.symbol) => {
                                Some(format!("its program blob does not hold `{}`", entry.symbol))
                            }
                            Ok(blob) if !blob.kernels.contains(&entry.compiled_for()) => {
                                Some("its program blob was compiled for another kernel".to_string())
                            }
                            Ok(_) => None,
                        },
                    },
                };
                if let Some(why) = why {
                    v.problems.push((name, why));
                }
            }
            v
        })
    }
}
