//! Placement: one compiler's concept (a lowering that decides where tensor nodes live), kept
//! under its own name. The decision problem's identity ([`canonicalize_source`] over a
//! [`Lineage`]) and the decisions as the disk store keeps them: which flips of the greedy
//! inline refinement were accepted, and what shipped ([`PlacementEntry`]).

use serde::{Deserialize, Serialize};

use crate::DiskEntry;
use crate::identity::{Canonicalizer, IdentityKind};
use crate::{Identity, LoopCode, NodeId, Placement, SymId};
use std::collections::{BTreeMap, BTreeSet};

/// What one compilation lineage brings to a node's placement decision.
///
/// Rendered (by [`LineageTag::render`]) into the [`canonicalize_source`] identity, so two
/// lineages that pose different decision problems over the same raw code get different keys.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LineageTag {
    /// The node's effective placement: a prior decision, else the declared intent, else none.
    pub placement: Option<Placement>,
    /// Whether that placement is a heuristic cap's, which the decision may flip back (the same
    /// mode imposed by legality or intent is not flippable).
    pub cap_flippable: bool,
    /// The lineage's recorded preference to inline the node, if any.
    pub inline_pref: Option<bool>,
    /// The lineage's recorded preference for a reduced footprint, if any.
    pub footprint_pref: Option<bool>,
}

impl LineageTag {
    /// The stable textual form that enters a [`canonicalize_source`] digest.
    pub fn render(&self) -> String {
        let b = |v: Option<bool>| match v {
            None => "-",
            Some(true) => "y",
            Some(false) => "n",
        };
        format!(
            "{}/{}/{}/{}",
            self.placement.map_or("undecided", Placement::as_str),
            if self.cap_flippable { "cap" } else { "fixed" },
            b(self.inline_pref),
            b(self.footprint_pref),
        )
    }
}

/// The placements and preferences of one compilation lineage (the context a lowering was
/// decided from).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Lineage {
    /// Prior placement decisions.
    pub decided: BTreeMap<NodeId, Placement>,
    /// Declared placement intents (used when no decision exists).
    pub declared: BTreeMap<NodeId, Placement>,
    /// Nodes whose decided placement comes from a heuristic cap (flippable).
    pub cap_flippable: BTreeSet<NodeId>,
    /// Recorded inline preferences.
    pub inline_prefs: BTreeMap<NodeId, bool>,
    /// Recorded footprint preferences.
    pub footprint_prefs: BTreeMap<NodeId, bool>,
}

impl Lineage {
    /// What this lineage brings to `node`'s decision.
    pub(crate) fn tag(&self, node: NodeId) -> LineageTag {
        let decided = self.decided.get(&node).copied();
        LineageTag {
            placement: decided.or_else(|| self.declared.get(&node).copied()),
            cap_flippable: decided.is_some() && self.cap_flippable.contains(&node),
            inline_pref: self.inline_prefs.get(&node).copied(),
            footprint_pref: self.footprint_prefs.get(&node).copied(),
        }
    }
}

/// The identity of the placement decision problem: the same walk as [`canonicalize`](crate::canonicalize), over
/// the raw source code the decision was made over, with every node (set or read) tagged by
/// `lineage`'s [`LineageTag`] and by the caller's `node_tag` (what the caller's own decision
/// space distinguishes per node; return an empty string for nothing).
///
/// The numbering addresses every node the source sets or reads, so a decision can name a node
/// the default policy inlines away; [`Identity::node_at`] resolves it back.
pub fn canonicalize_source(
    source: &dyn LoopCode,
    static_indices: &[SymId],
    lineage: &Lineage,
    node_tag: &dyn Fn(NodeId) -> String,
) -> Identity {
    let tag = |node: NodeId| -> Vec<String> {
        vec![
            format!("lineage={}", lineage.tag(node).render()),
            format!("caller={}", node_tag(node)),
        ]
    };
    Canonicalizer::run(IdentityKind::PlacementSource, source, static_indices, &tag)
}

/// Payload format version of [`PlacementEntry`], independent of the schedule entry's version
/// and of the regime version. Lookup treats an entry of another version as a miss.
///
/// History (one line per bump, with the reason; a test checks one line per version):
/// - v1: initial format: version, digest, accepted flips (node, direction), shipped arm.
pub const PLACEMENT_ENTRY_VERSION: u32 = 1;

/// Which way a flip moved a node's placement.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Direction {
    /// The node was materialized (given its own buffer).
    Materialize,
    /// The node was inlined into its consumers.
    Inline,
    /// The node was given a reduced footprint.
    Footprint,
}

/// One accepted flip of the greedy inline refinement.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Flip {
    /// The node, by its index in the placement decision identity (`canonicalize_source`).
    pub node: u32,
    /// What the flip did to it.
    pub direction: Direction,
}

/// What shipped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Shipped {
    /// Arm A, as the default policy decided it.
    A,
    /// Arm B: every embedded node of the loss materialized (re-derived from the loss at replay,
    /// so the nodes need no structural address).
    B,
    /// Arm A refined by the accepted flips, applied in chain order.
    Refined,
}

/// A placement decision saved for one placement decision identity.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlacementEntry {
    /// Payload format version ([`PLACEMENT_ENTRY_VERSION`] when written by this build).
    pub version: u32,
    /// Digest of the placement decision identity the decision answers.
    pub digest: String,
    /// The accepted flips, in chain order.
    pub flips: Vec<Flip>,
    /// What shipped.
    pub shipped: Shipped,
}

impl PlacementEntry {
    /// An entry of the current version.
    pub fn new(digest: impl Into<String>, flips: Vec<Flip>, shipped: Shipped) -> PlacementEntry {
        PlacementEntry {
            version: PLACEMENT_ENTRY_VERSION,
            digest: digest.into(),
            flips,
            shipped,
        }
    }
}

impl DiskEntry for PlacementEntry {
    const VERSION: u32 = PLACEMENT_ENTRY_VERSION;
    fn version(&self) -> u32 {
        self.version
    }
    fn digest(&self) -> &str {
        &self.digest
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn placement_version_has_a_history_line_per_bump() {
        crate::disk::regime_history_check(
            include_str!("placement.rs"),
            "PLACEMENT_ENTRY_VERSION",
            PLACEMENT_ENTRY_VERSION,
        );
    }

    #[test]
    fn unknown_fields_are_rejected() {
        let text = "(version: 1, digest: \"d\", flips: [], shipped: A, extra: 3)";
        assert!(ron::from_str::<PlacementEntry>(text).is_err());
    }

    fn direction() -> impl Strategy<Value = Direction> {
        prop_oneof![
            Just(Direction::Materialize),
            Just(Direction::Inline),
            Just(Direction::Footprint)
        ]
    }

    proptest! {
        #[test]
        fn entries_round_trip_through_ron(
            digest in "[0-9a-f]{1,64}",
            flips in proptest::collection::vec((any::<u32>(), direction()), 0..20),
            shipped in prop_oneof![Just(Shipped::A), Just(Shipped::B), Just(Shipped::Refined)],
        ) {
            let flips = flips.into_iter().map(|(node, direction)| Flip { node, direction }).collect();
            let e = PlacementEntry::new(digest, flips, shipped);
            let text = ron::ser::to_string_pretty(&e, ron::ser::PrettyConfig::default()).expect("encode");
            prop_assert_eq!(ron::from_str::<PlacementEntry>(&text).expect("decode"), e);
        }
    }
}
