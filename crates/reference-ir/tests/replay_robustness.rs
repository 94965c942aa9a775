//! Arbitrary saved schedules (random references, factors and node indices, or random RON text)
//! never panic: replay and application give a result or a typed error.
#![allow(clippy::unwrap_used)]

mod common;

use proptest::prelude::*;
use reference_ir::schedule::{ReferenceLanguage, SavedRefOp, apply_ops};
use schedule_cache::{Error, SavedSchedule, SymRef, canonicalize, of_saved};

fn sym_ref() -> impl Strategy<Value = SymRef> {
    prop_oneof![
        (0usize..8).prop_map(SymRef::Base),
        (0usize..4).prop_map(SymRef::Static),
        (
            0usize..8,
            prop_oneof![
                Just("outer".to_owned()),
                Just("inner".to_owned()),
                Just("local".to_owned()),
                ".{0,6}"
            ]
        )
            .prop_map(|(op, role)| SymRef::Minted { op, role }),
    ]
}

fn factor() -> impl Strategy<Value = i64> {
    prop_oneof![-3i64..10, Just(i64::MAX), Just(i64::MIN), Just(0)]
}

fn saved_op() -> impl Strategy<Value = SavedRefOp> {
    prop_oneof![
        (sym_ref(), factor()).prop_map(|(target, factor)| SavedRefOp::Split { target, factor }),
        (sym_ref(), sym_ref()).prop_map(|(outer, inner)| SavedRefOp::Reorder { outer, inner }),
        sym_ref().prop_map(|target| SavedRefOp::Unroll { target }),
        sym_ref().prop_map(|target| SavedRefOp::Vectorize { target }),
        (0usize..8, sym_ref()).prop_map(|(node, out_of)| SavedRefOp::Hoist { node, out_of }),
    ]
}

proptest! {
    #[test]
    fn arbitrary_saved_schedules_replay_or_fail_with_typed_errors(
        seed in any::<u64>(), ops in prop::collection::vec(saved_op(), 0..8),
    ) {
        let b = common::build(&common::gen_shape(seed), 0);
        let id = canonicalize(&b.code, &b.static_ids(), &b.placements, true);
        let saved = SavedSchedule { digest: id.digest().to_owned(), ops };
        match of_saved(&ReferenceLanguage, &saved, &id) {
            Ok((live, reg)) => {
                prop_assert_eq!(reg.recorded(), live.len());
                match apply_ops(&live, &b.code) {
                    Ok(done) => {
                        let _ = canonicalize(&done, &b.static_ids(), &b.placements, true);
                    }
                    Err(e) => prop_assert!(
                        matches!(e, Error::ScheduleInapplicable { .. }),
                        "{e:?}"
                    ),
                }
            }
            Err(e) => prop_assert!(
                matches!(e, Error::DanglingRef { .. } | Error::NodeIndexOutOfRange { .. }),
                "{e:?}"
            ),
        }
    }

    #[test]
    fn arbitrary_ron_text_parses_or_fails_with_a_typed_error(text in ".{0,200}") {
        let r = SavedSchedule::<SavedRefOp>::from_ron(&text);
        prop_assert!(matches!(r, Ok(_) | Err(Error::Parse(_))), "{:?}", r);
    }
}
