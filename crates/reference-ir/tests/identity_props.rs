//! Property tests for the canonical identity and saved schedules: alpha-renaming invariance,
//! sensitivity to every structural change, placement-only structural identity, and saved
//! schedules that round-trip through RON and replay on a renamed twin.
#![allow(clippy::unwrap_used)]

mod common;

use common::{MUTATIONS, Mutation, build, gen_schedule, gen_shape, hoistable_base, mutate};
use proptest::prelude::*;
use reference_ir::schedule::{ReferenceLanguage, SavedRefOp, apply_ops};
use schedule_cache::{Identity, Registry, SavedSchedule, canonicalize, of_saved, to_saved};

fn ident(b: &common::Built, with_placements: bool) -> Identity {
    canonicalize(&b.code, &b.static_ids(), &b.placements, with_placements)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn alpha_renamed_code_has_the_same_identity(seed in any::<u64>()) {
        let shape = gen_shape(seed);
        let (a, b) = (build(&shape, 1), build(&shape, 2));
        for wp in [true, false] {
            let (ia, ib) = (ident(&a, wp), ident(&b, wp));
            prop_assert_eq!(ia.digest(), ib.digest());
            prop_assert_eq!(ia.rendering(), ib.rendering());
            prop_assert!(ia.is_complete());
            // The numberings correspond: the i-th node of one is the same shape node as the
            // i-th node of the other.
            let pos = |bt: &common::Built, id| bt.nodes.iter().position(|n| n.id() == id);
            let na: Vec<_> = ia.nodes().iter().map(|&id| pos(&a, id)).collect();
            let nb: Vec<_> = ib.nodes().iter().map(|&id| pos(&b, id)).collect();
            prop_assert_eq!(na, nb);
            prop_assert_eq!(ia.binders().len(), ib.binders().len());
        }
        // Ids really differ between the builds.
        prop_assert!(a.nodes.iter().zip(&b.nodes).all(|(x, y)| x.id() != y.id()));
    }

    #[test]
    fn every_structural_change_changes_the_digest(seed in any::<u64>()) {
        let shape = gen_shape(seed);
        let base = build(&shape, 3);
        for m in MUTATIONS {
            let (before, after) = if m == Mutation::Hoistable {
                (build(&hoistable_base(&shape), 4), build(&mutate(&shape, m), 5))
            } else {
                (build(&shape, 4), build(&mutate(&shape, m), 5))
            };
            let _ = &base;
            let (x, y) = (ident(&before, true), ident(&after, true));
            prop_assert_ne!(x.digest(), y.digest(), "{:?} not noticed with placements", m);
            let (xs, ys) = (ident(&before, false), ident(&after, false));
            if m == Mutation::Placement {
                prop_assert_eq!(xs.digest(), ys.digest(), "structural identity saw placement");
                prop_assert_eq!(xs.nodes().len(), ys.nodes().len());
            } else {
                prop_assert_ne!(xs.digest(), ys.digest(), "{:?} not noticed structurally", m);
            }
        }
    }

    #[test]
    fn numbering_does_not_depend_on_placements(seed in any::<u64>()) {
        let b = build(&gen_shape(seed), 6);
        let (x, y) = (ident(&b, true), ident(&b, false));
        prop_assert_ne!(x.digest(), y.digest());
        prop_assert_eq!(x.binders(), y.binders());
        prop_assert_eq!(x.statics(), y.statics());
        prop_assert_eq!(x.nodes(), y.nodes());
    }

    #[test]
    fn saved_schedules_round_trip_and_replay_on_a_renamed_twin(
        seed in any::<u64>(), sseed in any::<u64>(),
    ) {
        let shape = gen_shape(seed);
        let a = build(&shape, 7);
        let ia = ident(&a, true);
        let (sched, done_a) = gen_schedule(&a.code, sseed, 6);
        let (saved, reg) = to_saved(&ReferenceLanguage, &Registry::new(&ia), &sched.ops).unwrap();
        prop_assert_eq!(reg.recorded(), sched.ops.len());
        let text = saved.to_ron().unwrap();
        let back: SavedSchedule<SavedRefOp> = SavedSchedule::from_ron(&text).unwrap();
        prop_assert_eq!(&back, &saved);

        let b = build(&shape, 8);
        let ib = ident(&b, true);
        let (ops_b, reg_b) = of_saved(&ReferenceLanguage, &back, &ib).unwrap();
        prop_assert_eq!(reg_b.recorded(), ops_b.len());
        let done_b = apply_ops(&ops_b, &b.code).unwrap();
        // Same transformed code up to renaming (placements carried over by node).
        let da = canonicalize(&done_a, &a.static_ids(), &a.placements, true);
        let db = canonicalize(&done_b, &b.static_ids(), &b.placements, true);
        prop_assert_eq!(da.rendering(), db.rendering());
        prop_assert_eq!(da.digest(), db.digest());
        // The replayed schedule saves back to the same saved schedule.
        let (again, _) = to_saved(&ReferenceLanguage, &Registry::new(&ib), &ops_b).unwrap();
        prop_assert_eq!(again, saved);
    }

    #[test]
    fn extending_a_replayed_prefix_stays_consistent(
        seed in any::<u64>(), s1 in any::<u64>(), s2 in any::<u64>(),
    ) {
        let shape = gen_shape(seed);
        // Process A: tunes a prefix and saves it.
        let a = build(&shape, 9);
        let ia = ident(&a, false);
        let (prefix, _) = gen_schedule(&a.code, s1, 3);
        let (mut saved, _) =
            to_saved(&ReferenceLanguage, &Registry::new(&ia), &prefix.ops).unwrap();
        // Process B: replays the prefix, extends it, saves the extension.
        let b = build(&shape, 10);
        let ib = ident(&b, false);
        let (ops_b, reg_b) = of_saved(&ReferenceLanguage, &saved, &ib).unwrap();
        let mid_b = apply_ops(&ops_b, &b.code).unwrap();
        let (more, done_b) = gen_schedule(&mid_b, s2, 3);
        let (ext, _) = to_saved(&ReferenceLanguage, &reg_b, &more.ops).unwrap();
        saved.append(ext).unwrap();
        // Process C: replays the whole thing.
        let c = build(&shape, 11);
        let ic = ident(&c, false);
        let (ops_c, _) = of_saved(&ReferenceLanguage, &saved, &ic).unwrap();
        let done_c = apply_ops(&ops_c, &c.code).unwrap();
        let db = canonicalize(&done_b, &b.static_ids(), &b.placements, false);
        let dc = canonicalize(&done_c, &c.static_ids(), &c.placements, false);
        prop_assert_eq!(db.digest(), dc.digest());
    }
}
