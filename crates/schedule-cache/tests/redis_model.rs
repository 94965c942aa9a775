//! Model-based property test of the Redis store's regime protocol against a real
//! `redis-server`: random sequences of stores and lookups by clients of regimes 1 to 3 (and
//! occasional stamp corruption) behave exactly like a model map scoped by the stamp:
//! an absent or older stamp clears the map and takes the client's regime, a newer or malformed
//! one refuses and changes nothing.
#![cfg(feature = "redis")]

mod redis_support;

use std::collections::BTreeMap;

use proptest::prelude::*;
use redis_support::{DIGEST, ServerExt, key, payload};
use schedule_cache::placement::PlacementEntry;
use schedule_cache::{Lookup, MissReason, Refusal, Store, StoreOutcome};

#[derive(Clone, Debug)]
enum Step {
    Store { regime: u32, key: u8, seq: u32 },
    Lookup { regime: u32, key: u8 },
    CorruptStamp,
    RepairStamp,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        6 => (1..=3u32, 0..3u8, 1..500u32).prop_map(|(regime, key, seq)| Step::Store { regime, key, seq }),
        6 => (1..=3u32, 0..3u8).prop_map(|(regime, key)| Step::Lookup { regime, key }),
        1 => Just(Step::CorruptStamp),
        1 => Just(Step::RepairStamp),
    ]
}

/// The model: the stamp (`None` absent, `Some(Err(()))` malformed) and the admitted entries.
#[derive(Default)]
struct Model {
    stamp: Option<Result<u32, ()>>,
    entries: BTreeMap<u8, (u32, u32)>,
}

impl Model {
    /// `Ok(())` if a client of `regime` is admitted (transitioning first if needed), else the
    /// refusal it must see.
    fn open(&mut self, regime: u32) -> Result<(), Refusal> {
        match self.stamp {
            Some(Ok(s)) if s == regime => Ok(()),
            Some(Ok(s)) if s > regime => Err(Refusal::NewerRegime {
                found: s,
                ours: regime,
            }),
            Some(Err(())) => Err(Refusal::MalformedStamp {
                content: "garbage".into(),
            }),
            _ => {
                self.entries.clear();
                self.stamp = Some(Ok(regime));
                Ok(())
            }
        }
    }
}

#[test]
fn the_redis_store_follows_the_regime_model() {
    let server = redis_support::Server::start();
    let raw = std::cell::RefCell::new(server.raw());
    let stores: Vec<_> = (1..=3).map(|r| server.store().with_regime(r)).collect();
    let stamp_key = stores[0].stamp_key();
    let config = ProptestConfig {
        cases: 64,
        failure_persistence: None,
        ..ProptestConfig::default()
    };
    proptest!(config, |(steps in proptest::collection::vec(step(), 1..24))| {
        let _: () = redis::cmd("FLUSHALL").query(&mut *raw.borrow_mut()).expect("FLUSHALL");
        let mut model = Model::default();
        for s in steps {
            match s {
                Step::Store { regime, key: k, seq } => {
                    let store = &stores[regime as usize - 1];
                    let got = store
                        .store(Some(&key(&format!("k{k}"))), &payload(regime, seq, 3))
                        .expect("no caller mistake");
                    match model.open(regime) {
                        Ok(()) => {
                            model.entries.insert(k, (regime, seq));
                            prop_assert_eq!(got, StoreOutcome::Stored);
                        }
                        Err(r) => prop_assert_eq!(got, StoreOutcome::Refused(r)),
                    }
                }
                Step::Lookup { regime, key: k } => {
                    let store = &stores[regime as usize - 1];
                    let got = store.probe::<PlacementEntry>(Some(&key(&format!("k{k}"))), DIGEST);
                    match model.open(regime) {
                        Ok(()) => match model.entries.get(&k) {
                            Some(&(writer, seq)) => prop_assert_eq!(got, Lookup::Hit(payload(writer, seq, 3))),
                            None => prop_assert!(
                                matches!(got, Lookup::Miss(MissReason::NoEntry { .. })),
                                "{:?}", got
                            ),
                        },
                        Err(r) => prop_assert_eq!(got, Lookup::Refused(r)),
                    }
                }
                Step::CorruptStamp => {
                    let _: () = redis::cmd("SET").arg(&stamp_key).arg("garbage").query(&mut *raw.borrow_mut()).expect("SET");
                    model.stamp = Some(Err(()));
                }
                Step::RepairStamp => {
                    // Back to a well-formed stamp of regime 1 (entries untouched, as an operator
                    // restoring a stamp would): the model keeps its entries.
                    if model.stamp == Some(Err(())) {
                        let _: () = redis::cmd("SET").arg(&stamp_key).arg("1\n").query(&mut *raw.borrow_mut()).expect("SET");
                        model.stamp = Some(Ok(1));
                    }
                }
            }
        }
    });
}
