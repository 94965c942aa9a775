//! The canonical, process-independent identity of loop code.
//!
//! A backend exposes its optimized loop code through [`LoopCode`], a preorder walk reported to
//! a [`Visitor`]. [`canonicalize`] numbers what the walk reports (loop binders in preorder,
//! static indices in the order given, tensor nodes by first occurrence) and digests a rendering
//! in which every backend-specific name has been replaced by its number, so two processes that
//! build the same code with different symbol ids, node ids and labels get the same
//! [`Identity::digest`].
//!
//! **Whose concepts.** [`LoopCode`], [`Visitor`], [`canonicalize`] and [`Placement`] (where
//! a tensor node lives: local scratch and a device buffer generate different kernels) are
//! for every adopter. The *placement decision problem*'s identity (OCANNL decides per tensor
//! node whether it is virtual, local or materialized, from the raw code and the lowering's
//! lineage) is [`crate::placement`]'s, over the same walk ([`Canonicalizer::run`]).

use crate::Error;
use std::collections::BTreeMap;
use std::fmt;

/// A backend symbol, by an id unique within one process (never compared across processes).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SymId(pub u64);

/// A backend tensor node, by an id unique within one process (never compared across processes).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NodeId(pub u64);

impl fmt::Display for SymId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "sym#{}", self.0)
    }
}

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "node#{}", self.0)
    }
}

/// The attributes of a tensor node that enter the digest (at the node's first occurrence).
#[derive(Clone, Copy, Debug)]
pub struct NodeAttrs<'a> {
    /// The node's dimensions.
    pub dims: &'a [usize],
    /// The node's precision, spelled by the backend (e.g. `"f32"`).
    pub precision: &'a str,
    /// Whether the node is eligible for hoisted packing as a constant: schedule validity
    /// depends on operand constancy, so it is part of the identity.
    pub hoistable_constant: bool,
}

impl<'a> NodeAttrs<'a> {
    /// A node of `dims` of `precision` (spelled by the backend, e.g. `"f32"`) that is not a
    /// hoistable constant: what a backend without constant packing reports for every node.
    pub fn new(dims: &'a [usize], precision: &'a str) -> NodeAttrs<'a> {
        NodeAttrs {
            dims,
            precision,
            hoistable_constant: false,
        }
    }
}

/// Where a tensor node lives. Identical code over local scratch and over a device buffer
/// generates different kernels, so the placement class enters the (non-structural) digest.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
pub enum Placement {
    /// Inlined away: never materialized.
    Virtual,
    /// Scratch local to one kernel invocation.
    Local,
    /// A buffer on the device, living across kernels.
    OnDevice,
    /// Device memory mirrored on the host.
    Hosted,
}

impl Placement {
    /// The spelling used in canonical renderings (stable across versions).
    pub fn as_str(self) -> &'static str {
        match self {
            Placement::Virtual => "virtual",
            Placement::Local => "local",
            Placement::OnDevice => "on_device",
            Placement::Hosted => "hosted",
        }
    }
}

/// Receives a preorder walk of loop code. Called by [`LoopCode::walk`].
///
/// Scoping: a binder reported by [`Visitor::loop_binder`] or [`Visitor::local_binder`] is in
/// scope from that call until the [`Visitor::close`] of the innermost construct open at that
/// point (or to the end of the walk at top level).
pub trait Visitor {
    /// Opens a construct of the given kind (e.g. `"for"`, `"set"`, `"add"`). The kind is part of
    /// the rendering, so it must not contain process-specific data.
    fn open(&mut self, construct: &str);
    /// Closes the innermost open construct.
    fn close(&mut self);
    /// An integer payload (a bound, a coefficient, an offset).
    fn int(&mut self, value: i64);
    /// A floating-point payload (a constant), compared bit for bit.
    fn float(&mut self, value: f64);
    /// A loop binder: numbered in preorder; shadowing a symbol in scope makes the identity
    /// incomplete.
    fn loop_binder(&mut self, sym: SymId);
    /// A local-variable binder: numbered in order of declaration.
    fn local_binder(&mut self, sym: SymId);
    /// A use of a symbol (loop binder, local, or static index). A use of a symbol not in scope
    /// makes the identity incomplete.
    fn symbol(&mut self, sym: SymId);
    /// A use (set or read) of a tensor node, with its attributes.
    fn node(&mut self, node: NodeId, attrs: &NodeAttrs<'_>);
    /// A construct the canonical rendering cannot capture (e.g. a staged closure); makes the
    /// identity incomplete.
    fn opaque(&mut self, what: &str);
}

/// Loop code a backend can expose for canonicalization.
///
/// Contract: `walk` reports the code in preorder, deterministically, and reports everything
/// that distinguishes two programs (structure, bounds, index expressions, operations, node
/// uses). Anything it cannot express it reports through [`Visitor::opaque`].
///
/// **Everything left out is merged.** Two codes that differ only in a piece the walk does not
/// report get one digest, and a schedule tuned for one is replayed on the other. Check a walk
/// in a test with `walk_check`, which mutates each piece of the code and
/// reports every mutation that leaves the digest unchanged.
///
/// # Runtime sizes and scalar parameters
///
/// A value the kernel receives at run time (a size `n`, a scalar `alpha`) enters the walk as a
/// *symbol*, never as its current value:
///
/// 1. **Declare each parameter first**, in the kernel's parameter order, with its kind: open
///    a construct naming the kind (`"param"`, then the type, e.g. `"i64"` or `"f32"`), close it,
///    then report [`Visitor::local_binder`] at top level, so the symbol is in scope for the
///    whole walk and numbered by its position. (A symbol your *schedules* name, such as a
///    static index the code was lowered with, is given instead as a static index to
///    [`canonicalize`] / `Subject::with_statics`, in order, so saved ops can refer to it;
///    report its kind where it is used.)
/// 2. **Report every use** with [`Visitor::symbol`] inside a construct naming its role (an
///    `"extent"` of a loop, a `"param"` operand of an expression), where the code uses it: a
///    use the walk skips is a parameter that does not matter to the digest.
/// 3. **A value the code was specialized to** (a size fixed when the code was generated) is not
///    a parameter: report it with [`Visitor::int`] / [`Visitor::float`], and each value is a
///    code of its own.
///
/// A symbol used without being declared or given as a static index makes the identity
/// incomplete (never keyed), so forgetting step 1 is refused; forgetting a kind or a use is
/// not, which is what a `walk_check` test finds.
///
/// ```
/// use std::sync::atomic::{AtomicU64, Ordering};
/// use schedule_cache::{LoopCode, NodeAttrs, NodeId, SymId, Visitor, WalkCheck};
///
/// fn fresh() -> u64 {
///     static NEXT: AtomicU64 = AtomicU64::new(1);
///     NEXT.fetch_add(1, Ordering::Relaxed)
/// }
///
/// /// `scale(int64 n, float alpha, float *x, float *y): for i in 0..n { y[i] = alpha * x[i] }`
/// #[derive(Clone, Debug)]
/// struct Scale {
///     n: u64, alpha: u64, i: u64, x: u64, y: u64,
///     n_type: &'static str, alpha_type: &'static str, extent: u64, times_alpha: bool,
/// }
///
/// fn build() -> Scale {
///     let (n, alpha, i, x, y) = (fresh(), fresh(), fresh(), fresh(), fresh());
///     Scale { n, alpha, i, x, y, n_type: "i64", alpha_type: "f32", extent: n, times_alpha: true }
/// }
///
/// impl LoopCode for Scale {
///     fn walk(&self, v: &mut dyn Visitor) {
///         // 1. The parameters, in order, each with its kind, bound for the whole walk.
///         for (sym, kind) in [(self.n, self.n_type), (self.alpha, self.alpha_type)] {
///             v.open("param");
///             v.open(kind);
///             v.close();
///             v.close();
///             v.local_binder(SymId(sym));
///         }
///         let node = |v: &mut dyn Visitor, id: u64| {
///             // A buffer of runtime length: its dims are not known, so none are claimed.
///             v.node(NodeId(id), &NodeAttrs::new(&[], "f32"));
///         };
///         // 2. Each use, in its role: the loop's extent is the runtime size n.
///         v.open("for");
///         v.int(0);
///         v.open("extent");
///         v.symbol(SymId(self.extent));
///         v.close();
///         v.loop_binder(SymId(self.i));
///         v.open("set");
///         node(v, self.y);
///         v.symbol(SymId(self.i));
///         if self.times_alpha {
///             v.open("mul");
///             v.open("param");
///             v.symbol(SymId(self.alpha));
///             v.close();
///         }
///         v.open("get");
///         node(v, self.x);
///         v.symbol(SymId(self.i));
///         v.close();
///         if self.times_alpha {
///             v.close();
///         }
///         v.close();
///         v.close();
///     }
/// }
///
/// let report = WalkCheck::new(build)
///     .render(|k| format!("{k:?}"))
///     .mutation("size type", |k| k.n_type = "i32")
///     .mutation("scalar type", |k| k.alpha_type = "f64")
///     .mutation("scalar use", |k| k.times_alpha = false)
///     .mutation("extent is the scalar", |k| k.extent = k.alpha)
///     .mutation("reads the output", |k| k.x = k.y)
///     .run();
/// assert!(report.is_ok(), "{report}");
/// ```
pub trait LoopCode {
    /// Reports the code to `visitor` in preorder.
    fn walk(&self, visitor: &mut dyn Visitor);
}

/// Which question an identity answers; the kinds never share digests.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum IdentityKind {
    /// The optimized code, with placement classes ([`canonicalize`] with placements).
    Code,
    /// The optimized code's structure only ([`canonicalize`] without placements).
    Structure,
    /// The placement decision problem over the raw source ([`canonicalize_source`](crate::placement::canonicalize_source)).
    PlacementSource,
}

/// The canonical identity of one piece of loop code: its digest and its numberings.
///
/// Guarantees: equal digests mean structurally identical code, hence interchangeable
/// numberings ([`Identity::binders`], [`Identity::statics`], [`Identity::nodes`]). The
/// numberings do not depend on `with_placements`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Identity {
    kind: IdentityKind,
    digest: String,
    rendering: String,
    complete: bool,
    incomplete_because: Vec<String>,
    binders: Vec<SymId>,
    statics: Vec<SymId>,
    nodes: Vec<NodeId>,
}

impl Identity {
    /// Hex SHA-256 digest of the canonical rendering.
    pub fn digest(&self) -> &str {
        &self.digest
    }

    /// What this identity identifies.
    pub fn kind(&self) -> IdentityKind {
        self.kind
    }

    /// The human-readable canonical rendering the digest is computed over (tokens separated by
    /// spaces), for explaining why two identities differ.
    pub fn rendering(&self) -> &str {
        &self.rendering
    }

    /// False when the code contains constructs the rendering cannot capture (opaque
    /// constructs, unbound or shadowed symbols). An incomplete identity never produces a disk
    /// key (see [`Identity::into_complete`]) but supports in-process schedule round trips.
    pub fn is_complete(&self) -> bool {
        self.complete
    }

    /// Why the identity is incomplete (empty when complete): each reason in walk order, such
    /// as `unbound symbol sym#7` or `unbalanced scope: 1 construct left open`, at most
    /// `MAX_REASONS` of them.
    pub(crate) fn incomplete_because(&self) -> &[String] {
        &self.incomplete_because
    }

    /// Loop binders in preorder: `binders()[i]` is `SymRef::Base(i)`. A symbol bound by two
    /// sequential loops appears twice.
    pub fn binders(&self) -> &[SymId] {
        &self.binders
    }

    /// Static index symbols in the order given to [`canonicalize`]: `SymRef::Static(k)`.
    pub fn statics(&self) -> &[SymId] {
        &self.statics
    }

    /// Tensor nodes by first occurrence: canonical index `i` is `nodes()[i]`.
    pub fn nodes(&self) -> &[NodeId] {
        &self.nodes
    }

    /// The tensor node at canonical index `index`.
    ///
    /// # Errors
    /// [`Error::NodeIndexOutOfRange`] if `index >= nodes().len()`.
    pub fn node_at(&self, index: usize) -> Result<NodeId, Error> {
        self.nodes
            .get(index)
            .copied()
            .ok_or(Error::NodeIndexOutOfRange {
                index,
                len: self.nodes.len(),
            })
    }

    /// Why two identities differ, for explaining a miss: `None` when the renderings are
    /// equal, else the first differing token of each with a few tokens of common context.
    pub fn explain_difference(&self, other: &Identity) -> Option<String> {
        let (a, b): (Vec<&str>, Vec<&str>) = (
            self.rendering.split(' ').collect(),
            other.rendering.split(' ').collect(),
        );
        let at = a.iter().zip(&b).position(|(x, y)| x != y);
        let at = match at {
            Some(i) => i,
            None if a.len() == b.len() => return None,
            None => a.len().min(b.len()),
        };
        let ctx = a[at.saturating_sub(4)..at].join(" ");
        let tok = |v: &[&str]| v.get(at).map_or("<end>".to_owned(), |t| (*t).to_owned());
        Some(format!(
            "at token {at} (after `{ctx}`): `{}` vs `{}`",
            tok(&a),
            tok(&b)
        ))
    }

    /// Converts into a [`CompleteIdentity`], the only kind that can produce a disk key.
    ///
    /// # Errors
    /// [`Error::IncompleteIdentity`] (carrying the digest and why) if the identity is
    /// incomplete.
    pub fn into_complete(self) -> Result<CompleteIdentity, Error> {
        if self.complete {
            Ok(CompleteIdentity(self))
        } else {
            Err(Error::IncompleteIdentity {
                digest: self.digest,
                reasons: self.incomplete_because,
            })
        }
    }
}

/// An [`Identity`] known to be complete: the only identity [`crate::cache_key`] accepts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CompleteIdentity(Identity);

impl CompleteIdentity {
    /// The underlying identity.
    pub fn identity(&self) -> &Identity {
        &self.0
    }
}

impl std::ops::Deref for CompleteIdentity {
    type Target = Identity;
    fn deref(&self) -> &Identity {
        &self.0
    }
}

const RENDERING_HEADER: &str = "kcache-identity-1";

/// At most this many reasons are kept by [`Identity::incomplete_because`].
pub(crate) const MAX_REASONS: usize = 8;

/// Computes the canonical identity of `code`.
///
/// `static_indices` must be the symbols the code was lowered with, in order (they become
/// `Static(0)`, `Static(1)`, ...). `placements` gives each node's effective placement class
/// (a node absent from the map renders as undecided). With `with_placements = false` the
/// placement classes are omitted: the result is the structural identity, with the same
/// numberings.
pub fn canonicalize(
    code: &dyn LoopCode,
    static_indices: &[SymId],
    placements: &BTreeMap<NodeId, Placement>,
    with_placements: bool,
) -> Identity {
    let kind = if with_placements {
        IdentityKind::Code
    } else {
        IdentityKind::Structure
    };
    let tag = |node: NodeId| -> Vec<String> {
        if with_placements {
            vec![format!(
                "@{}",
                placements.get(&node).map_or("undecided", |p| p.as_str())
            )]
        } else {
            Vec::new()
        }
    };
    Canonicalizer::run(kind, code, static_indices, &tag)
}

#[derive(Clone, Copy)]
enum Bound {
    Loop(usize),
    Local(usize),
    Static(usize),
}

pub(crate) struct Canonicalizer<'t> {
    tokens: Vec<String>,
    complete: bool,
    reasons: Vec<String>,
    binders: Vec<SymId>,
    statics: Vec<SymId>,
    nodes: Vec<NodeId>,
    node_index: BTreeMap<NodeId, usize>,
    locals: usize,
    /// Symbols in scope, innermost last per symbol.
    scope: BTreeMap<SymId, Vec<Bound>>,
    /// One frame per open construct (plus the top level): the symbols it bound.
    frames: Vec<Vec<SymId>>,
    tag: &'t dyn Fn(NodeId) -> Vec<String>,
}

impl Canonicalizer<'_> {
    /// The canonical walk of `code` with each node's tags given by `tag` (the one walk every
    /// identity kind shares; placement's `canonicalize_source` is another caller).
    pub(crate) fn run(
        kind: IdentityKind,
        code: &dyn LoopCode,
        static_indices: &[SymId],
        tag: &dyn Fn(NodeId) -> Vec<String>,
    ) -> Identity {
        let mut c = Canonicalizer {
            tokens: vec![
                RENDERING_HEADER.to_owned(),
                match kind {
                    IdentityKind::Code => "code",
                    IdentityKind::Structure => "structure",
                    IdentityKind::PlacementSource => "placement-source",
                }
                .to_owned(),
                format!("statics={}", static_indices.len()),
            ],
            complete: true,
            reasons: Vec::new(),
            binders: Vec::new(),
            statics: static_indices.to_vec(),
            nodes: Vec::new(),
            node_index: BTreeMap::new(),
            locals: 0,
            scope: BTreeMap::new(),
            frames: vec![Vec::new()],
            tag,
        };
        for (k, &s) in static_indices.iter().enumerate() {
            if c.scope.contains_key(&s) {
                // The same symbol listed twice: references to it are ambiguous.
                c.incomplete(format!("static index {s} listed twice"));
            }
            c.scope.entry(s).or_default().push(Bound::Static(k));
        }
        code.walk(&mut c);
        if c.frames.len() != 1 {
            // Unbalanced open/close: the walk did not describe a tree.
            let open = c.frames.len() - 1;
            c.incomplete(format!(
                "unbalanced scope: {open} construct{} left open at the end of the walk",
                if open == 1 { "" } else { "s" }
            ));
            c.tokens.push("unbalanced".to_owned());
        }
        let parts: Vec<&[u8]> = c.tokens.iter().map(|t| t.as_bytes()).collect();
        Identity {
            kind,
            digest: kcache_digest::digest_of_parts(&parts),
            rendering: c.tokens.join(" "),
            complete: c.complete,
            incomplete_because: c.reasons,
            binders: c.binders,
            statics: c.statics,
            nodes: c.nodes,
        }
    }

    fn incomplete(&mut self, reason: String) {
        self.complete = false;
        if self.reasons.len() < MAX_REASONS && !self.reasons.contains(&reason) {
            self.reasons.push(reason);
        }
    }

    fn bind(&mut self, sym: SymId, b: Bound) {
        if self.scope.get(&sym).is_some_and(|v| !v.is_empty()) {
            self.incomplete(format!("shadowing: {sym} bound while already in scope"));
        }
        self.scope.entry(sym).or_default().push(b);
        if let Some(frame) = self.frames.last_mut() {
            frame.push(sym);
        }
    }
}

impl Visitor for Canonicalizer<'_> {
    fn open(&mut self, construct: &str) {
        self.tokens.push(format!("({construct}"));
        self.frames.push(Vec::new());
    }

    fn close(&mut self) {
        if self.frames.len() <= 1 {
            self.incomplete("unbalanced scope: a close without an open construct".to_owned());
            self.tokens.push("unbalanced".to_owned());
            return;
        }
        if let Some(frame) = self.frames.pop() {
            for sym in frame {
                if let Some(v) = self.scope.get_mut(&sym) {
                    v.pop();
                }
            }
        }
        self.tokens.push(")".to_owned());
    }

    fn int(&mut self, value: i64) {
        self.tokens.push(value.to_string());
    }

    fn float(&mut self, value: f64) {
        self.tokens.push(format!("f{:016x}", value.to_bits()));
    }

    fn loop_binder(&mut self, sym: SymId) {
        let i = self.binders.len();
        self.binders.push(sym);
        self.bind(sym, Bound::Loop(i));
        self.tokens.push(format!("L{i}="));
    }

    fn local_binder(&mut self, sym: SymId) {
        let i = self.locals;
        self.locals += 1;
        self.bind(sym, Bound::Local(i));
        self.tokens.push(format!("V{i}="));
    }

    fn symbol(&mut self, sym: SymId) {
        let tok = match self.scope.get(&sym).and_then(|v| v.last()) {
            Some(Bound::Loop(i)) => format!("L{i}"),
            Some(Bound::Local(i)) => format!("V{i}"),
            Some(Bound::Static(k)) => format!("S{k}"),
            None => {
                self.incomplete(format!(
                    "unbound symbol {sym} (not a binder in scope nor a static index; a symbol \
                     the code was lowered with is a static index: give it with \
                     `Subject::with_statics`, or to `canonicalize`)"
                ));
                "unbound".to_owned()
            }
        };
        self.tokens.push(tok);
    }

    fn node(&mut self, node: NodeId, attrs: &NodeAttrs<'_>) {
        if let Some(&i) = self.node_index.get(&node) {
            self.tokens.push(format!("T{i}"));
            return;
        }
        let i = self.nodes.len();
        self.nodes.push(node);
        self.node_index.insert(node, i);
        self.tokens.push(format!("T{i}:"));
        let dims: Vec<String> = attrs.dims.iter().map(|d| d.to_string()).collect();
        self.tokens.push(format!("dims={}", dims.join("x")));
        self.tokens.push(format!("prec={}", attrs.precision));
        self.tokens.push(
            if attrs.hoistable_constant {
                "hoistable"
            } else {
                "varying"
            }
            .to_owned(),
        );
        let extra = (self.tag)(node);
        self.tokens.extend(extra);
    }

    fn opaque(&mut self, what: &str) {
        self.incomplete(format!("opaque construct: {what}"));
        self.tokens.push(format!("opaque:{what}"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A backend that is not the reference IR: a script of visitor calls.
    enum Ev {
        Open(&'static str),
        Close,
        Int(i64),
        Loop(u64),
        Local(u64),
        Use(u64),
        Node(u64),
        Opaque,
    }

    struct Script(Vec<Ev>);

    impl LoopCode for Script {
        fn walk(&self, v: &mut dyn Visitor) {
            for e in &self.0 {
                match e {
                    Ev::Open(k) => v.open(k),
                    Ev::Close => v.close(),
                    Ev::Int(i) => v.int(*i),
                    Ev::Loop(s) => v.loop_binder(SymId(*s)),
                    Ev::Local(s) => v.local_binder(SymId(*s)),
                    Ev::Use(s) => v.symbol(SymId(*s)),
                    Ev::Node(n) => v.node(NodeId(*n), &NodeAttrs::new(&[4], "f32")),
                    Ev::Opaque => v.opaque("closure"),
                }
            }
        }
    }

    fn id(evs: Vec<Ev>, statics: &[u64]) -> Identity {
        let statics: Vec<SymId> = statics.iter().map(|&s| SymId(s)).collect();
        canonicalize(&Script(evs), &statics, &BTreeMap::new(), false)
    }

    use Ev::*;

    /// `NodeAttrs::new` is a node that is not a hoistable constant: the same digest as the
    /// attributes spelled out with `false`, another than with `true`.
    #[test]
    fn new_node_attrs_are_not_hoistable_constants() {
        struct One(NodeAttrs<'static>);
        impl LoopCode for One {
            fn walk(&self, v: &mut dyn Visitor) {
                v.node(NodeId(1), &self.0);
            }
        }
        let digest = |a| {
            canonicalize(&One(a), &[], &BTreeMap::new(), false)
                .digest()
                .to_owned()
        };
        let spelled = |hoistable_constant| NodeAttrs {
            dims: &[4],
            precision: "f32",
            hoistable_constant,
        };
        assert_eq!(digest(NodeAttrs::new(&[4], "f32")), digest(spelled(false)));
        assert_ne!(digest(NodeAttrs::new(&[4], "f32")), digest(spelled(true)));
    }

    #[test]
    fn scope_ends_at_the_enclosing_close() {
        // (for L0 (use L0)) then a use of the same symbol after the loop: unbound.
        let inside = id(vec![Open("for"), Loop(5), Use(5), Close], &[]);
        assert!(inside.is_complete());
        let after = id(vec![Open("for"), Loop(5), Close, Use(5)], &[]);
        assert!(!after.is_complete());
        // Sequential reuse of a binder is not shadowing.
        let twice = id(
            vec![Open("for"), Loop(5), Close, Open("for"), Loop(5), Close],
            &[],
        );
        assert!(twice.is_complete());
        assert_eq!(twice.binders(), &[SymId(5), SymId(5)]);
    }

    #[test]
    fn shadowing_statics_locals_or_loops_is_incomplete() {
        assert!(!id(vec![Open("for"), Loop(1), Close], &[1]).is_complete());
        assert!(!id(vec![Local(2), Open("for"), Loop(2), Close], &[]).is_complete());
        assert!(!id(vec![Local(2), Local(2)], &[]).is_complete());
        assert!(!id(vec![], &[3, 3]).is_complete());
        assert!(id(vec![Use(3)], &[3]).is_complete());
    }

    #[test]
    fn unbalanced_walks_and_opaque_constructs_are_incomplete() {
        assert!(!id(vec![Close], &[]).is_complete());
        assert!(!id(vec![Open("x")], &[]).is_complete());
        assert!(!id(vec![Opaque], &[]).is_complete());
    }

    #[test]
    fn an_incomplete_identity_says_why() {
        let cases: Vec<(Vec<Ev>, &[u64], &str)> = vec![
            (vec![Use(7)], &[], "unbound symbol sym#7"),
            // The remedy for the usual cause, an undeclared static index, is named.
            (vec![Use(7)], &[], "give it with `Subject::with_statics`"),
            (
                vec![Open("x")],
                &[],
                "unbalanced scope: 1 construct left open",
            ),
            (
                vec![Close],
                &[],
                "unbalanced scope: a close without an open",
            ),
            (vec![Opaque], &[], "opaque construct: closure"),
            (vec![Local(2), Local(2)], &[], "shadowing: sym#2"),
            (vec![], &[3, 3], "static index sym#3 listed twice"),
        ];
        for (evs, statics, want) in cases {
            let identity = id(evs, statics);
            assert!(!identity.is_complete());
            let err = identity.into_complete().expect_err("incomplete");
            let text = err.to_string();
            assert!(text.contains(want), "{want:?} not in {text:?}");
        }
        assert!(id(vec![Use(3)], &[3]).incomplete_because().is_empty());
        // Many unbound uses: the reasons are capped, the identity stays incomplete.
        let many = id((0..50).map(Use).collect(), &[]);
        assert_eq!(many.incomplete_because().len(), MAX_REASONS);
    }

    #[test]
    fn ids_do_not_matter_structure_does() {
        let a = id(
            vec![Open("for"), Int(4), Loop(10), Node(7), Use(10), Close],
            &[],
        );
        let b = id(
            vec![Open("for"), Int(4), Loop(99), Node(3), Use(99), Close],
            &[],
        );
        assert_eq!(a.digest(), b.digest());
        let c = id(
            vec![Open("for"), Int(5), Loop(99), Node(3), Use(99), Close],
            &[],
        );
        assert_ne!(a.digest(), c.digest());
        // Static vs loop use of the "same" position differs.
        let d = id(
            vec![Open("for"), Int(4), Loop(99), Node(3), Use(1), Close],
            &[1],
        );
        assert_ne!(a.digest(), d.digest());
    }

    #[test]
    fn differences_are_explained() {
        let a = id(vec![Open("for"), Int(4), Loop(1), Close], &[]);
        let b = id(vec![Open("for"), Int(5), Loop(1), Close], &[]);
        assert_eq!(a.explain_difference(&a), None);
        let why = a.explain_difference(&b).expect("differs");
        assert!(why.contains("`4` vs `5`"), "{why}");
        let c = id(vec![Open("for"), Int(4), Loop(1), Close, Opaque], &[]);
        assert!(a.explain_difference(&c).expect("longer").contains("<end>"));
    }

    #[test]
    fn kinds_never_share_digests() {
        let s = Script(vec![Node(1)]);
        let none = BTreeMap::new();
        let a = canonicalize(&s, &[], &none, true);
        let b = canonicalize(&s, &[], &none, false);
        let c = crate::placement::canonicalize_source(
            &s,
            &[],
            &crate::placement::Lineage::default(),
            &|_| String::new(),
        );
        assert_ne!(a.digest(), b.digest());
        assert_ne!(b.digest(), c.digest());
        assert_ne!(a.digest(), c.digest());
        assert_eq!(c.kind(), IdentityKind::PlacementSource);
    }
}

#[cfg(test)]
mod digest_tests {
    /// The digest is the workspace's framing: SHA-256 over length-prefixed parts, hex.
    #[test]
    fn digest_is_length_prefixed_sha256() {
        let d = |p: &[&[u8]]| kcache_digest::digest_of_parts(p);
        assert_ne!(d(&[b"ab", b"c"]), d(&[b"a", b"bc"]));
        // SHA-256 of one empty part: the 8-byte little-endian length 0.
        assert_eq!(
            d(&[b""]),
            "af5570f5a1810b7af78caf4bc70a660f0df51e42baf91d4de5b2328de0e83dfc"
        );
    }
}
