//! How a batch's kernels are cut into programs: [`Split`], [`programs_for`],
//! [`chunks`], [`balanced`].

/// How a resolve ([`Resolver::split`](crate::Resolver::split)) cuts one option list's
/// kernels into programs compiled at once.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Split {
    /// The most programs one option list's kernels are cut into.
    pub max_programs: usize,
    /// The fewest kernels a program should hold (0 counts as 1).
    pub min_kernels: usize,
}

impl Split {
    /// Never split: every option list compiles as one program.
    pub const WHOLE: Split = Split {
        max_programs: 1,
        min_kernels: 1,
    };

    /// Up to `max_programs` programs of at least `min_kernels` kernels each.
    pub const fn new(max_programs: usize, min_kernels: usize) -> Self {
        Split {
            max_programs,
            min_kernels,
        }
    }
}

/// How many programs `n` kernels of one option list compile as:
/// `min(max_programs, n / min_kernels)`, at least 1, at most `n` (so 0 for `n == 0`).
///
/// ```
/// use kernel_cache::{Split, programs_for};
/// assert_eq!(programs_for(Split::new(2, 8), 64), 2);
/// assert_eq!(programs_for(Split::new(4, 8), 20), 2);
/// assert_eq!(programs_for(Split::new(4, 8), 5), 1);
/// ```
pub fn programs_for(split: Split, n: usize) -> usize {
    let by_size = n / split.min_kernels.max(1);
    split.max_programs.min(by_size).max(1).min(n)
}

/// `idxs` cut into `k` contiguous runs balanced by count (run `t` is
/// `idxs[t * n / k .. (t + 1) * n / k]`), empty runs dropped. Concatenated, the runs
/// are `idxs`; their lengths differ by at most one. `k == 0` counts as 1, and a `k` past
/// `idxs.len()` as `idxs.len()` (the runs past it would all be empty), so the time is
/// `idxs.len()`'s, whatever `k`.
///
/// ```
/// use kernel_cache::chunks;
/// assert_eq!(chunks(2, &[1, 2, 3, 4, 5]), vec![&[1, 2][..], &[3, 4, 5][..]]);
/// assert_eq!(chunks(4, &[1, 2]).len(), 2);
/// ```
pub fn chunks<T>(k: usize, idxs: &[T]) -> Vec<&[T]> {
    let k = k.min(idxs.len()).max(1) as u128;
    let n = idxs.len() as u128;
    let bound = |t: u128| (t * n / k) as usize;
    (0..k)
        .map(|t| &idxs[bound(t)..bound(t + 1)])
        .filter(|run| !run.is_empty())
        .collect()
}

/// `items` cut into `k` groups of the sizes [`chunks`] gives (as many groups, lengths
/// differing by at most one), balanced by `cost`: each item, costliest first (ties in
/// `items` order), joins the group of least total cost (ties: the earlier group) among
/// those not yet full. Each group keeps its items in `items` order, and the groups are
/// ordered by their first item. When every item costs the same the groups are exactly
/// [`chunks`]' contiguous runs.
///
/// Used where groups compile concurrently: the slowest group is the wait, and a group
/// never holds more items than a count cut would give it (a backend may bound its units
/// by count, as cc-backend's merged units are). On the greedy cut, the costliest and the
/// cheapest group differ by at most the largest single cost (checked by a property
/// test, not proven).
///
/// ```
/// use kernel_cache::balanced;
/// let cost = |&i: &u64| i;
/// assert_eq!(balanced(2, &[9, 1, 1, 9], cost), vec![vec![9, 1], vec![1, 9]]);
/// // Equal costs: the contiguous runs of `chunks`.
/// assert_eq!(balanced(2, &[4, 4, 4], cost), vec![vec![4], vec![4, 4]]);
/// ```
pub fn balanced<T: Clone>(k: usize, items: &[T], cost: impl Fn(&T) -> u64) -> Vec<Vec<T>> {
    let costs: Vec<u64> = items.iter().map(&cost).collect();
    let runs = chunks(k, items);
    if costs.windows(2).all(|w| w[0] == w[1]) {
        return runs.into_iter().map(<[T]>::to_vec).collect();
    }
    let room: Vec<usize> = runs.iter().map(|r| r.len()).collect();
    let mut order: Vec<usize> = (0..items.len()).collect();
    order.sort_by_key(|&p| (std::cmp::Reverse(costs[p]), p));
    let mut groups: Vec<Vec<usize>> = room.iter().map(|&r| Vec::with_capacity(r)).collect();
    let mut load = vec![0u64; room.len()];
    for p in order {
        let open = (0..groups.len()).filter(|&g| groups[g].len() < room[g]);
        // Some group has room: the sizes add up to the item count.
        if let Some(g) = open.min_by_key(|&g| (load[g], g)) {
            groups[g].push(p);
            load[g] = load[g].saturating_add(costs[p]);
        }
    }
    for g in &mut groups {
        g.sort_unstable();
    }
    groups.sort_by_key(|g| g.first().copied());
    groups
        .into_iter()
        .map(|g| g.into_iter().map(|p| items[p].clone()).collect())
        .collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn programs_for_edges() {
        assert_eq!(programs_for(Split::new(2, 8), 0), 0);
        assert_eq!(programs_for(Split::new(0, 8), 64), 1);
        assert_eq!(programs_for(Split::new(8, 0), 3), 3);
        assert_eq!(programs_for(Split::WHOLE, 100), 1);
    }

    /// Asking for more runs than there are items gives one run per item, as many as
    /// asked for among items: the loop runs over the items, not over `k` (`chunks` walked
    /// all `usize::MAX` would-be runs, dropping the empty ones, and never returned).
    #[test]
    fn chunks_past_the_item_count_are_one_per_item() {
        let idxs = [7, 8, 9];
        let single: Vec<&[i32]> = vec![&[7], &[8], &[9]];
        for k in [3, 4, 1 << 40, usize::MAX] {
            assert_eq!(chunks(k, &idxs), single, "k = {k}");
        }
        assert!(chunks::<i32>(usize::MAX, &[]).is_empty());
    }

    proptest! {
        #[test]
        fn programs_for_is_bounded(max in 0usize..20, min in 0usize..20, n in 0usize..500) {
            let k = programs_for(Split::new(max, min), n);
            if n == 0 {
                prop_assert_eq!(k, 0);
            } else {
                prop_assert!(k >= 1 && k <= n);
                prop_assert!(k <= max.max(1));
                // Every program holds at least min_kernels kernels unless only one is made.
                if k > 1 {
                    prop_assert!(n / k >= min.max(1));
                }
            }
        }

        #[test]
        fn chunks_cover_in_order_and_balance(k in 0usize..40, n in 0usize..300) {
            let idxs: Vec<usize> = (0..n).map(|i| i * 3 + 1).collect();
            let runs = chunks(k, &idxs);
            // Coverage and order: the runs concatenate back to the input.
            let joined: Vec<usize> = runs.iter().flat_map(|r| r.iter().copied()).collect();
            prop_assert_eq!(&joined, &idxs);
            // No empty run; as many runs as possible up to k.
            prop_assert!(runs.iter().all(|r| !r.is_empty()));
            prop_assert_eq!(runs.len(), k.max(1).min(n));
            // Balance: lengths differ by at most one.
            if let (Some(lo), Some(hi)) = (runs.iter().map(|r| r.len()).min(), runs.iter().map(|r| r.len()).max()) {
                prop_assert!(hi - lo <= 1);
            }
        }

        /// `balanced` holds every item once, in groups of `chunks`' sizes, each in item
        /// order and ordered by first item; equal costs give `chunks`' runs; the
        /// costliest and cheapest groups differ by at most the largest cost.
        #[test]
        fn balanced_groups_cover_with_chunk_sizes_and_balance(
            k in 0usize..8,
            costs in proptest::collection::vec(
                prop_oneof![0u64..4, 0u64..1000, Just(u64::MAX / 64)],
                0..40,
            ),
        ) {
            let items: Vec<usize> = (0..costs.len()).collect();
            let groups = balanced(k, &items, |&i| costs[i]);
            let runs = chunks(k, &items);
            let mut sizes: Vec<usize> = groups.iter().map(Vec::len).collect();
            let mut want: Vec<usize> = runs.iter().map(|r| r.len()).collect();
            sizes.sort_unstable();
            want.sort_unstable();
            prop_assert_eq!(sizes, want);
            let mut all: Vec<usize> = groups.iter().flatten().copied().collect();
            all.sort_unstable();
            prop_assert_eq!(&all, &items);
            for g in &groups {
                prop_assert!(g.windows(2).all(|w| w[0] < w[1]));
            }
            prop_assert!(groups.windows(2).all(|w| w[0][0] < w[1][0]));
            let loads: Vec<u64> = groups.iter().map(|g| g.iter().map(|&i| costs[i]).sum()).collect();
            if let (Some(lo), Some(hi), Some(top)) =
                (loads.iter().min(), loads.iter().max(), costs.iter().max())
            {
                prop_assert!(hi - lo <= *top, "loads {:?}", loads);
            }
            let same = balanced(k, &items, |_| 7);
            let runs: Vec<Vec<usize>> = runs.iter().map(|r| r.to_vec()).collect();
            prop_assert_eq!(same, runs);
        }

        #[test]
        fn chunks_of_programs_for_respect_min_kernels(max in 1usize..10, min in 1usize..10, n in 1usize..200) {
            let split = Split::new(max, min);
            let idxs: Vec<usize> = (0..n).collect();
            let runs = chunks(programs_for(split, n), &idxs);
            if runs.len() > 1 {
                prop_assert!(runs.iter().all(|r| r.len() >= min));
            }
            prop_assert!(runs.len() <= max);
        }
    }
}
