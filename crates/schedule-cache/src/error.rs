//! The crate's one error type.

/// Everything that can go wrong in schedule-cache, as a typed value.
///
/// Each variant names the failed contract; none of them is raised by a panic.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A cache key string was empty, too long, `.`/`..`, or contained a byte
    /// outside `[A-Za-z0-9_-]`. The string is reported (escaped) with the reason.
    #[error("invalid cache key {key:?}: {reason}")]
    InvalidKey {
        /// The rejected key text.
        key: String,
        /// Why it was rejected.
        reason: &'static str,
    },
    /// A canonical node index was out of range for the identity.
    #[error("canonical node index {index} out of range (the code uses {len} nodes)")]
    NodeIndexOutOfRange {
        /// The index asked for.
        index: usize,
        /// How many nodes the identity numbers.
        len: usize,
    },
    /// An incomplete identity (opaque constructs, unbound or shadowed symbols) was asked for
    /// something only a complete one may do, such as producing a disk key. An unbound
    /// symbol is most often a static index (a symbol the code was lowered with, used but
    /// bound by no loop) that was not declared: give those with
    /// [`Subject::with_statics`](crate::Subject::with_statics).
    #[error("identity {digest} is incomplete: {}", reasons.join("; "))]
    IncompleteIdentity {
        /// The incomplete identity's digest.
        digest: String,
        /// Why (`crate::Identity::incomplete_because`): unbound symbols, unbalanced scopes,
        /// shadowing, opaque constructs.
        reasons: Vec<String>,
    },
    /// A saved schedule was replayed against code with another digest.
    #[error("saved schedule digest {saved} does not match the code's digest {current}")]
    DigestMismatch {
        /// The digest the schedule was saved against.
        saved: String,
        /// The digest of the code it was replayed on.
        current: String,
    },
    /// While saving, an op referenced a symbol that is no loop binder, static index, or symbol
    /// minted by an earlier op.
    #[error("op {op} references {sym}, which the registry cannot name")]
    UnresolvableSymbol {
        /// Index of the op (in the whole saved schedule).
        op: usize,
        /// The symbol.
        sym: crate::identity::SymId,
    },
    /// While saving, an op referenced a symbol that binds several loops.
    #[error("op {op} references {sym}, which binds several loops")]
    AmbiguousSymbol {
        /// Index of the op.
        op: usize,
        /// The symbol.
        sym: crate::identity::SymId,
    },
    /// While saving, an op referenced a tensor node the code does not use.
    #[error("op {op} references {node}, which the code does not use")]
    UnresolvableNode {
        /// Index of the op.
        op: usize,
        /// The node.
        node: crate::identity::NodeId,
    },
    /// An op claimed to mint a symbol that already exists (or a role twice).
    #[error("op {op} mints role {role:?} with a symbol that is not fresh")]
    MintedNotFresh {
        /// Index of the op.
        op: usize,
        /// The role.
        role: String,
    },
    /// While replaying, a saved reference did not resolve (out-of-range binder or static
    /// index, or a minted symbol of a later op or unknown role).
    #[error("op {op}: dangling reference {reference:?}")]
    DanglingRef {
        /// Index of the op.
        op: usize,
        /// The reference.
        reference: crate::saved::SymRef,
    },
    /// A saved schedule has more ops than [`MAX_SAVED_OPS`](crate::MAX_SAVED_OPS): refused
    /// when saving, replaying ([`of_saved`](crate::of_saved)) or appending, before any op is
    /// built.
    #[error("a saved schedule of {ops} ops is longer than the {max} a schedule may have")]
    TooManyOps {
        /// How many ops the schedule has (or would have).
        ops: usize,
        /// [`MAX_SAVED_OPS`](crate::MAX_SAVED_OPS).
        max: usize,
    },
    /// A schedule op's preconditions do not hold on the code it is applied to.
    #[error("schedule op {op} is not applicable: {reason}")]
    ScheduleInapplicable {
        /// The op (debug form).
        op: String,
        /// Which precondition failed.
        reason: String,
    },
    /// A value could not be serialized to RON.
    #[error("could not serialize: {0}")]
    Serialize(String),
    /// RON text could not be parsed.
    #[error("could not parse: {0}")]
    Parse(String),
    /// A setting declaration was rejected.
    #[error("invalid declaration of setting {name:?}: {reason}")]
    InvalidDeclaration {
        /// The setting.
        name: String,
        /// Why.
        reason: &'static str,
    },
    /// The digest-completeness guard saw reads of settings no key component declares.
    #[error("undeclared configuration settings consulted: {0:?}")]
    UndeclaredSettings(Vec<String>),
    /// `disk::store` was handed an entry that records another format version than its type
    /// writes (a caller mistake; the store wrote nothing).
    #[error("entry records version {found}, but its type writes version {expected}")]
    EntryVersion {
        /// The version the entry records.
        found: u32,
        /// The version its type writes.
        expected: u32,
    },
    /// `disk::store` was handed a key that does not start with the entry's digest (a caller
    /// mistake: such an entry could never be found by a lookup; the store wrote nothing).
    #[error("key {key} does not start with the entry's digest {digest:?}")]
    KeyDigestMismatch {
        /// The key.
        key: String,
        /// The entry's digest.
        digest: String,
    },
    /// An entry could not be encoded as RON (the store wrote nothing).
    #[error("could not encode the entry: {message}")]
    Encode {
        /// The encoder's message.
        message: String,
    },
    /// A store was configured with an unusable parameter (a Redis URL that does not parse, a
    /// key prefix with forbidden bytes); nothing was contacted.
    #[error("invalid {what}: {reason}")]
    InvalidStoreConfig {
        /// Which parameter.
        what: &'static str,
        /// Why it was rejected.
        reason: String,
    },
    /// A cache directory could not be inspected (`disk::inventory`).
    #[error("{}: {source}", path.display())]
    Inspect {
        /// The path that failed.
        path: std::path::PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// A C renderer cannot render the code (reference-ir's `render::render` returns it).
    #[error("cannot render to C: {0}")]
    Render(String),
}
