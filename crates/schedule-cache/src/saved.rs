//! Saved schedules: a backend's schedule ops with every symbol replaced by a process-independent
//! [`SymRef`] and every tensor node by its canonical index, so another process can replay them
//! against its own compile of the same code.
//!
//! The backend plugs in through [`ScheduleLanguage`]; [`to_saved`] and [`of_saved`] do the
//! bookkeeping (which op minted which symbol) with a [`Registry`].
//!
//! A saved schedule has at most [`MAX_SAVED_OPS`] ops, whatever the language: saving,
//! appending and replaying refuse a longer one ([`Error::TooManyOps`]), so a cache entry
//! (up to 16 MiB, hundreds of thousands of ops) never makes a replaying process build and apply an
//! absurd number of ops; through the front door such an entry is a
//! [`Miss::Unreplayable`](crate::Miss::Unreplayable). The cap bounds how many ops, not what
//! they build: a language whose ops nest the code (a split, a tile) must bound the nesting
//! its walks recurse through, as the reference language does (reference-ir's
//! `schedule::MAX_NEST_DEPTH`) and `examples/foreign_ir.rs` does
//! for its own IR; else 4096 splits by 1 nest the code 4096 loops deep.

use crate::Error;
use crate::identity::{Identity, NodeId, SymId};
use serde::{Deserialize, Serialize, de::DeserializeOwned};
use std::collections::BTreeMap;
use std::fmt::Debug;

/// The most ops a saved schedule may have, in any schedule language (the demo's schedules
/// have at most 6; tiling every loop of a deep nest on several levels takes tens); a
/// longer one is refused by [`to_saved`], [`SavedSchedule::append`] and [`of_saved`]
/// ([`Error::TooManyOps`]).
pub const MAX_SAVED_OPS: usize = 4096;

fn check_len(ops: usize) -> Result<(), Error> {
    if ops > MAX_SAVED_OPS {
        return Err(Error::TooManyOps {
            ops,
            max: MAX_SAVED_OPS,
        });
    }
    Ok(())
}

/// A process-independent name for a symbol occurring in a schedule.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum SymRef {
    /// The i-th loop binder, in preorder, of the code the schedule applies to.
    Base(usize),
    /// The k-th static index.
    Static(usize),
    /// The fresh symbol in `role` minted by the `op`-th (0-based) op of the same saved schedule.
    Minted {
        /// Index of the minting op in the whole saved schedule.
        op: usize,
        /// Which of that op's fresh symbols (e.g. `"outer"`).
        role: String,
    },
}

/// A backend's schedule language, as far as saving and replaying needs it.
pub trait ScheduleLanguage {
    /// A live op, naming this process's symbols and nodes.
    type Op: Clone + Debug;
    /// The saved form of an op: symbols as [`SymRef`], nodes as canonical indices.
    type SavedOp: Serialize + DeserializeOwned + Clone + Debug + PartialEq;

    /// The saved form of `op`, resolving each symbol and node it references (not the ones it
    /// mints) through `refs`.
    ///
    /// # Errors
    /// Whatever `refs` returns for an unresolvable reference.
    fn save_op(&self, op: &Self::Op, refs: &mut Resolver<'_>) -> Result<Self::SavedOp, Error>;

    /// The fresh symbols `op` mints, by role. Roles are distinct within one op.
    fn minted(&self, op: &Self::Op) -> Vec<(String, SymId)>;

    /// Rebuilds a live op from its saved form through the backend's schedule builders (which
    /// mint fresh symbols), resolving references through `refs`.
    ///
    /// # Errors
    /// Whatever `refs` returns for a dangling reference, or a backend error.
    fn build_op(&self, saved: &Self::SavedOp, refs: &mut Replayer<'_>) -> Result<Self::Op, Error>;
}

/// The symbols a saved schedule can name, for one compile: the identity's numberings plus the
/// symbols minted by the ops recorded so far.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Registry {
    digest: String,
    binders: Vec<SymId>,
    statics: Vec<SymId>,
    nodes: Vec<NodeId>,
    minted: BTreeMap<SymId, (usize, String)>,
    by_ref: BTreeMap<(usize, String), SymId>,
    recorded: usize,
}

impl Registry {
    /// An empty registry (no ops recorded) for the compile `identity` describes.
    pub fn new(identity: &Identity) -> Registry {
        Registry {
            digest: identity.digest().to_owned(),
            binders: identity.binders().to_vec(),
            statics: identity.statics().to_vec(),
            nodes: identity.nodes().to_vec(),
            minted: BTreeMap::new(),
            by_ref: BTreeMap::new(),
            recorded: 0,
        }
    }

    /// The digest of the identity this registry was built from.
    pub fn digest(&self) -> &str {
        &self.digest
    }

    /// Number of ops recorded so far (the index the next saved op gets).
    pub fn recorded(&self) -> usize {
        self.recorded
    }

    /// The symbol a reference names, if it resolves.
    pub fn resolve(&self, r: &SymRef) -> Option<SymId> {
        match r {
            SymRef::Base(i) => self.binders.get(*i).copied(),
            SymRef::Static(k) => self.statics.get(*k).copied(),
            SymRef::Minted { op, role } => self.by_ref.get(&(*op, role.clone())).copied(),
        }
    }

    fn record(&mut self, minted: Vec<(String, SymId)>) -> Result<(), Error> {
        let op = self.recorded;
        for (role, sym) in minted {
            if self.minted.contains_key(&sym)
                || self.binders.contains(&sym)
                || self.statics.contains(&sym)
                || self.by_ref.contains_key(&(op, role.clone()))
            {
                return Err(Error::MintedNotFresh { op, role });
            }
            self.minted.insert(sym, (op, role.clone()));
            self.by_ref.insert((op, role), sym);
        }
        self.recorded += 1;
        Ok(())
    }
}

/// Resolves live references to saved ones while saving (see [`ScheduleLanguage::save_op`]).
pub struct Resolver<'a> {
    registry: &'a Registry,
    op: usize,
}

impl Resolver<'_> {
    /// The [`SymRef`] of a symbol referenced by the op being saved.
    ///
    /// # Errors
    /// [`Error::UnresolvableSymbol`] if the symbol is neither a binder, a static index, nor
    /// minted by an earlier op; [`Error::AmbiguousSymbol`] if it binds several loops.
    pub fn sym(&mut self, sym: SymId) -> Result<SymRef, Error> {
        let r = self.registry;
        if let Some((op, role)) = r.minted.get(&sym) {
            return Ok(SymRef::Minted {
                op: *op,
                role: role.clone(),
            });
        }
        let mut bases = r.binders.iter().enumerate().filter(|(_, s)| **s == sym);
        if let Some((i, _)) = bases.next() {
            if bases.next().is_some() {
                return Err(Error::AmbiguousSymbol { op: self.op, sym });
            }
            return Ok(SymRef::Base(i));
        }
        if let Some(k) = r.statics.iter().position(|s| *s == sym) {
            return Ok(SymRef::Static(k));
        }
        Err(Error::UnresolvableSymbol { op: self.op, sym })
    }

    /// The canonical index of a node referenced by the op being saved.
    ///
    /// # Errors
    /// [`Error::UnresolvableNode`] if the code does not use the node.
    pub fn node(&mut self, node: NodeId) -> Result<usize, Error> {
        self.registry
            .nodes
            .iter()
            .position(|n| *n == node)
            .ok_or(Error::UnresolvableNode { op: self.op, node })
    }
}

/// Resolves saved references to live ones while replaying (see [`ScheduleLanguage::build_op`]).
pub struct Replayer<'a> {
    registry: &'a Registry,
    op: usize,
}

impl Replayer<'_> {
    /// The live symbol a saved reference names.
    ///
    /// # Errors
    /// [`Error::DanglingRef`] if the reference names a binder or static index out of range, an
    /// op that is not earlier in the schedule, or a role that op did not mint.
    pub fn sym(&mut self, r: &SymRef) -> Result<SymId, Error> {
        let dangling = || Error::DanglingRef {
            op: self.op,
            reference: r.clone(),
        };
        if let SymRef::Minted { op, .. } = r
            && *op >= self.op
        {
            return Err(dangling());
        }
        self.registry.resolve(r).ok_or_else(dangling)
    }

    /// The live node at a saved canonical index.
    ///
    /// # Errors
    /// [`Error::NodeIndexOutOfRange`] if the index is out of range.
    pub fn node(&mut self, index: usize) -> Result<NodeId, Error> {
        self.registry
            .nodes
            .get(index)
            .copied()
            .ok_or(Error::NodeIndexOutOfRange {
                index,
                len: self.registry.nodes.len(),
            })
    }
}

/// A saved schedule: the digest of the code it was saved against and its saved ops.
///
/// Replaying ([`of_saved`]) checks the digest, so a schedule is never applied to different code.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SavedSchedule<Op> {
    /// Hex digest of the identity the ops were saved against.
    pub digest: String,
    /// The ops, in order; `SymRef::Minted { op, .. }` indexes this list.
    pub ops: Vec<Op>,
}

impl<Op> SavedSchedule<Op> {
    /// Appends the ops of `more` (an extension saved with the registry this schedule's replay
    /// or save returned).
    ///
    /// # Errors
    /// [`Error::DigestMismatch`] if `more` was saved against a different identity;
    /// [`Error::TooManyOps`] if the result would have more than [`MAX_SAVED_OPS`] ops. On
    /// error `self` is unchanged.
    pub fn append(&mut self, more: SavedSchedule<Op>) -> Result<(), Error> {
        if more.digest != self.digest {
            return Err(Error::DigestMismatch {
                saved: more.digest,
                current: self.digest.clone(),
            });
        }
        check_len(self.ops.len().saturating_add(more.ops.len()))?;
        self.ops.extend(more.ops);
        Ok(())
    }
}

impl<Op: Serialize + DeserializeOwned> SavedSchedule<Op> {
    /// The RON text of this schedule.
    ///
    /// # Errors
    /// [`Error::Serialize`] if an op cannot be represented in RON.
    pub fn to_ron(&self) -> Result<String, Error> {
        ron::ser::to_string_pretty(self, ron::ser::PrettyConfig::default())
            .map_err(|e| Error::Serialize(e.to_string()))
    }

    /// Parses RON text produced by [`SavedSchedule::to_ron`].
    ///
    /// # Errors
    /// [`Error::Parse`] on malformed text.
    pub fn from_ron(text: &str) -> Result<SavedSchedule<Op>, Error> {
        ron::from_str(text).map_err(|e| Error::Parse(e.to_string()))
    }
}

/// Saves `ops`, built against `registry`'s compile, as the continuation of the ops already
/// recorded there: op indices start at [`Registry::recorded`], so extending a replayed prefix
/// stays consistent. Returns the saved ops (to append to the prefix) and the registry with each
/// op's minted symbols recorded.
///
/// # Errors
/// [`Error::UnresolvableSymbol`], [`Error::AmbiguousSymbol`] or [`Error::UnresolvableNode`] when
/// an op references something the registry cannot name; [`Error::MintedNotFresh`] when an op
/// claims to mint a symbol that already exists; [`Error::TooManyOps`] when the ops recorded
/// and `ops` together are more than [`MAX_SAVED_OPS`]. The input registry is unchanged on
/// error.
pub fn to_saved<L: ScheduleLanguage>(
    lang: &L,
    registry: &Registry,
    ops: &[L::Op],
) -> Result<(SavedSchedule<L::SavedOp>, Registry), Error> {
    check_len(registry.recorded.saturating_add(ops.len()))?;
    let mut reg = registry.clone();
    let mut saved = Vec::with_capacity(ops.len());
    for op in ops {
        let s = lang.save_op(
            op,
            &mut Resolver {
                registry: &reg,
                op: reg.recorded,
            },
        )?;
        reg.record(lang.minted(op))?;
        saved.push(s);
    }
    Ok((
        SavedSchedule {
            digest: reg.digest.clone(),
            ops: saved,
        },
        reg,
    ))
}

/// Replays a saved schedule against a fresh compile's identity: base and static references
/// resolve through `identity`, minting ops go through the backend's builders and their fresh
/// symbols are recorded for later references. Returns the live ops and the registry (whose
/// [`Registry::recorded`] equals the number of ops, ready for [`to_saved`] extensions).
///
/// # Errors
/// [`Error::DigestMismatch`] if `saved.digest` is not `identity`'s digest (checked before
/// anything else); [`Error::TooManyOps`] if it has more than [`MAX_SAVED_OPS`] ops (checked
/// before any op is built); [`Error::DanglingRef`] / [`Error::NodeIndexOutOfRange`] on
/// references that do not resolve; backend errors from [`ScheduleLanguage::build_op`].
pub fn of_saved<L: ScheduleLanguage>(
    lang: &L,
    saved: &SavedSchedule<L::SavedOp>,
    identity: &Identity,
) -> Result<(Vec<L::Op>, Registry), Error> {
    if saved.digest != identity.digest() {
        return Err(Error::DigestMismatch {
            saved: saved.digest.clone(),
            current: identity.digest().to_owned(),
        });
    }
    check_len(saved.ops.len())?;
    let mut reg = Registry::new(identity);
    let mut ops = Vec::with_capacity(saved.ops.len());
    for s in &saved.ops {
        let op = lang.build_op(
            s,
            &mut Replayer {
                registry: &reg,
                op: reg.recorded,
            },
        )?;
        reg.record(lang.minted(&op))?;
        ops.push(op);
    }
    Ok((ops, reg))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::identity::canonicalize;
    use crate::test_ir::{Code, Stmt, fresh};

    fn two_loops() -> (Identity, SymId, SymId) {
        let (i, j) = (SymId(fresh()), SymId(fresh()));
        let inner = Stmt::Loop {
            var: j,
            extent: 4,
            body: vec![],
        };
        let code = Code(vec![Stmt::Loop {
            var: i,
            extent: 4,
            body: vec![inner],
        }]);
        (canonicalize(&code, &[], &BTreeMap::new(), true), i, j)
    }

    #[test]
    fn registry_resolves_bases_and_records_minted_symbols_with_continuing_indices() {
        let (id, i, j) = two_loops();
        let mut reg = Registry::new(&id);
        assert_eq!(reg.resolve(&SymRef::Base(0)), Some(i));
        assert_eq!(reg.resolve(&SymRef::Base(1)), Some(j));
        assert_eq!(reg.resolve(&SymRef::Base(2)), None);
        let m = SymId(fresh());
        reg.record(vec![("outer".into(), m)]).expect("fresh");
        reg.record(vec![]).expect("nothing minted");
        assert_eq!(reg.recorded(), 2);
        let r = SymRef::Minted {
            op: 0,
            role: "outer".into(),
        };
        assert_eq!(reg.resolve(&r), Some(m));
        // Not fresh: an existing binder, or the same symbol again.
        assert!(reg.record(vec![("x".into(), i)]).is_err());
        assert!(reg.record(vec![("x".into(), m)]).is_err());
    }

    #[test]
    fn replayer_refuses_references_to_later_ops() {
        let (id, ..) = two_loops();
        let reg = Registry::new(&id);
        let mut r = Replayer {
            registry: &reg,
            op: 0,
        };
        let later = SymRef::Minted {
            op: 0,
            role: "outer".into(),
        };
        assert!(matches!(
            r.sym(&later),
            Err(Error::DanglingRef { op: 0, .. })
        ));
        assert!(r.sym(&SymRef::Base(1)).is_ok());
        assert!(r.node(0).is_err());
    }

    #[test]
    fn append_refuses_other_digests() {
        let mut a = SavedSchedule::<u8> {
            digest: "a".into(),
            ops: vec![1],
        };
        let b = SavedSchedule::<u8> {
            digest: "b".into(),
            ops: vec![2],
        };
        assert!(a.append(b).is_err());
        let c = SavedSchedule::<u8> {
            digest: "a".into(),
            ops: vec![3],
        };
        a.append(c).expect("same digest");
        assert_eq!(a.ops, vec![1, 3]);
    }
}
