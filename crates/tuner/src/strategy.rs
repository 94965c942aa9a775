//! Search strategies: which points of a space to try next.

use std::collections::HashSet;

use rand::seq::SliceRandom;

use crate::space::{Point, Space};

/// The random-number generator that orders a search's candidates. It is seeded by the
/// caller ([`SearchOptions::order_seed`](crate::SearchOptions::order_seed)), never by the
/// workload's name, so two searches of one workload can try independent orders.
pub type OrderRng = rand::rngs::StdRng;

/// What a search has done so far, as a strategy sees it.
#[derive(Clone, Debug, Default)]
pub struct History {
    proposed: HashSet<Point>,
    measured: Vec<(Point, f64)>,
}

impl History {
    /// An empty history.
    pub fn new() -> History {
        History::default()
    }

    /// Whether `point` was proposed (or tried as a seed) in this search.
    pub fn was_proposed(&self, point: &[usize]) -> bool {
        self.proposed.contains(point)
    }

    /// The number of points proposed (or tried as seeds) so far.
    pub fn proposed(&self) -> usize {
        self.proposed.len()
    }

    /// The points measured with a correct result and their median times (seconds), in
    /// the order they were measured.
    pub fn measured(&self) -> &[(Point, f64)] {
        &self.measured
    }

    /// Records `point` as proposed; false if it already was.
    pub fn propose(&mut self, point: &[usize]) -> bool {
        self.proposed.insert(point.to_vec())
    }

    /// Records a correct measurement of `point`.
    pub fn record(&mut self, point: &[usize], seconds: f64) {
        self.measured.push((point.to_vec(), seconds));
    }
}

/// A search strategy. The search calls [`Strategy::propose`] once per batch with what it
/// has measured so far and runs what it gets, in order.
///
/// Contract: the points returned are legal points of `space`, none already proposed in
/// `history`, no two equal, at most `want` of them. Returning none ends the search
/// (the space is exhausted, as far as the strategy knows). The search enforces the
/// contract too (a point that breaks it is dropped), but a strategy that relies on that
/// wastes its budget's share of batches.
pub trait Strategy {
    /// A short name for reports and progress lines.
    fn name(&self) -> &str;

    /// Up to `want` points to try next (see the trait's contract). All randomness comes
    /// from `rng`, so a search is reproducible from its order seed.
    fn propose(
        &mut self,
        space: &Space,
        history: &History,
        want: usize,
        rng: &mut OrderRng,
    ) -> Vec<Point>;
}

/// Random search: the legal points in an order drawn from the order seed.
#[derive(Clone, Debug, Default)]
pub struct RandomSearch {
    order: Option<Vec<Point>>,
    next: usize,
}

impl RandomSearch {
    /// A random search (its order is drawn at the first proposal).
    pub fn new() -> RandomSearch {
        RandomSearch::default()
    }
}

impl Strategy for RandomSearch {
    fn name(&self) -> &str {
        "random"
    }

    fn propose(
        &mut self,
        space: &Space,
        history: &History,
        want: usize,
        rng: &mut OrderRng,
    ) -> Vec<Point> {
        let order = self.order.get_or_insert_with(|| {
            let mut all = space.legal().to_vec();
            all.shuffle(rng);
            all
        });
        let mut out = Vec::new();
        while out.len() < want && self.next < order.len() {
            let p = &order[self.next];
            self.next += 1;
            if !history.was_proposed(p) {
                out.push(p.clone());
            }
        }
        out
    }
}

/// Neighbourhood search, as the demo's two rounds generalised: first `explore` trials
/// (seeds included) of random points, then the untried legal neighbours (one dimension
/// changed) of the `leaders` fastest points measured so far, fastest leader first; when
/// no leader has an untried neighbour, random points again. With seeds measured first,
/// the search starts around them.
#[derive(Clone, Debug)]
pub struct NeighbourhoodSearch {
    explore: usize,
    leaders: usize,
    random: RandomSearch,
}

impl NeighbourhoodSearch {
    /// A neighbourhood search exploring `explore` trials at random first, then around the
    /// best `leaders` points (at least one).
    pub fn new(explore: usize, leaders: usize) -> NeighbourhoodSearch {
        NeighbourhoodSearch {
            explore,
            leaders: leaders.max(1),
            random: RandomSearch::new(),
        }
    }
}

impl Strategy for NeighbourhoodSearch {
    fn name(&self) -> &str {
        "neighbourhood"
    }

    fn propose(
        &mut self,
        space: &Space,
        history: &History,
        want: usize,
        rng: &mut OrderRng,
    ) -> Vec<Point> {
        if history.proposed() < self.explore {
            let n = want.min(self.explore - history.proposed());
            return self.random.propose(space, history, n, rng);
        }
        let mut leaders: Vec<&(Point, f64)> = history
            .measured()
            .iter()
            .filter(|(p, _)| space.contains(p))
            .collect();
        leaders.sort_by(|a, b| a.1.total_cmp(&b.1));
        let mut out: Vec<Point> = Vec::new();
        for (leader, _) in leaders.iter().take(self.leaders) {
            for q in space.neighbours(leader) {
                if out.len() >= want {
                    return out;
                }
                if !history.was_proposed(&q) && !out.contains(&q) {
                    out.push(q);
                }
            }
        }
        if out.len() < want {
            // Nothing (more) around the leaders: random points the search has not tried.
            let mut seen = history.clone();
            for p in &out {
                seen.propose(p);
            }
            let more = self.random.propose(space, &seen, want - out.len(), rng);
            out.extend(more);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;

    use super::*;

    fn space() -> Space {
        Space::filtered(vec![3, 4, 2], |p| p != [2, 3, 1]).expect("valid")
    }

    #[test]
    fn random_search_orders_by_its_seed_not_by_name() {
        let s = space();
        let order = |seed| {
            let mut r = OrderRng::seed_from_u64(seed);
            RandomSearch::new().propose(&s, &History::new(), 100, &mut r)
        };
        assert_eq!(order(1), order(1));
        assert_ne!(order(1), order(2));
        assert_eq!(order(1).len(), s.len());
    }

    #[test]
    fn neighbourhood_search_explores_around_the_best() {
        let s = space();
        let mut rng = OrderRng::seed_from_u64(7);
        let mut n = NeighbourhoodSearch::new(2, 1);
        let mut h = History::new();
        let first = n.propose(&s, &h, 5, &mut rng);
        assert_eq!(first.len(), 2, "explores exactly `explore` points first");
        for (i, p) in first.iter().enumerate() {
            h.propose(p);
            h.record(p, i as f64 + 1.0);
        }
        let next = n.propose(&s, &h, 3, &mut rng);
        let best = &first[0];
        for q in &next {
            let differ = q.iter().zip(best).filter(|(a, b)| a != b).count();
            assert_eq!(differ, 1, "{q:?} is a neighbour of the best {best:?}");
        }
    }

    proptest::proptest! {
        /// Driven as a search drives it (a batch at a time, every proposal recorded and
        /// measured), neither strategy proposes a point twice, an illegal point, or more
        /// than asked; and together they cover the space before saying they are done.
        #[test]
        fn strategies_never_propose_a_point_twice(
            dims in proptest::collection::vec(1usize..5, 1..4),
            hole in 0usize..7,
            seed in 0u64..1000,
            want in 1usize..9,
            explore in 0usize..6,
            neighbourhood in proptest::bool::ANY,
        ) {
            let space = Space::filtered(dims, |p| p.iter().sum::<usize>() % 7 != hole)
                .expect("valid");
            let mut strategy: Box<dyn Strategy> = if neighbourhood {
                Box::new(NeighbourhoodSearch::new(explore, 2))
            } else {
                Box::new(RandomSearch::new())
            };
            let mut rng = OrderRng::seed_from_u64(seed);
            let mut history = History::new();
            loop {
                let batch = strategy.propose(&space, &history, want, &mut rng);
                proptest::prop_assert!(batch.len() <= want);
                if batch.is_empty() {
                    break;
                }
                for p in &batch {
                    proptest::prop_assert!(space.contains(p), "{:?} is not legal", p);
                    proptest::prop_assert!(history.propose(p), "{:?} proposed twice", p);
                    // A time that depends on the point, so leaders change.
                    let t = p.iter().enumerate().map(|(i, c)| (i + 1) * (c + 1)).sum::<usize>();
                    history.record(p, t as f64);
                }
            }
            proptest::prop_assert_eq!(history.proposed(), space.len());
        }
    }
}
