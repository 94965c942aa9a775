//! A schedule space: dimensions of choices and the legal points among them.

use std::collections::HashSet;

use crate::Error;

/// A point of a [`Space`]: one choice index per dimension (choice 0 is the workload's
/// "do nothing" by convention, so the all-zero point is the unscheduled baseline).
pub type Point = Vec<usize>;

/// The legal points of a schedule space, in a fixed order (the order they were given in,
/// duplicates dropped). A strategy proposes only points of this list; the search never
/// tries a point outside it (seeds may lie outside: they are tried as they are).
#[derive(Clone, Debug)]
pub struct Space {
    dims: Vec<usize>,
    legal: Vec<Point>,
    index: HashSet<Point>,
}

impl Space {
    /// A space of `dims.len()` dimensions, dimension `d` having `dims[d]` choices, whose
    /// legal points are `legal`. Errors when there is no dimension, a dimension has no
    /// choice, or a point has the wrong length or a choice out of range.
    pub fn new(dims: Vec<usize>, legal: impl IntoIterator<Item = Point>) -> Result<Space, Error> {
        if dims.is_empty() || dims.contains(&0) {
            return Err(Error::InvalidSpace(format!(
                "dimensions {dims:?}: at least one, each with at least one choice"
            )));
        }
        let mut index = HashSet::new();
        let mut kept = Vec::new();
        for p in legal {
            if p.len() != dims.len() || p.iter().zip(&dims).any(|(c, n)| c >= n) {
                return Err(Error::InvalidSpace(format!(
                    "point {p:?} is outside dimensions {dims:?}"
                )));
            }
            if index.insert(p.clone()) {
                kept.push(p);
            }
        }
        Ok(Space {
            dims,
            legal: kept,
            index,
        })
    }

    /// The space of every point of `dims` for which `legal` says yes, in lexicographic
    /// order.
    pub fn filtered(dims: Vec<usize>, legal: impl Fn(&[usize]) -> bool) -> Result<Space, Error> {
        if dims.is_empty() || dims.contains(&0) {
            return Space::new(dims, []);
        }
        let mut points = Vec::new();
        let mut p = vec![0; dims.len()];
        'all: loop {
            if legal(&p) {
                points.push(p.clone());
            }
            for d in (0..dims.len()).rev() {
                p[d] += 1;
                if p[d] < dims[d] {
                    continue 'all;
                }
                p[d] = 0;
            }
            break;
        }
        Space::new(dims, points)
    }

    /// The number of choices of each dimension.
    pub fn dims(&self) -> &[usize] {
        &self.dims
    }

    /// The legal points, in the space's order.
    pub fn legal(&self) -> &[Point] {
        &self.legal
    }

    /// The number of legal points.
    pub fn len(&self) -> usize {
        self.legal.len()
    }

    /// Whether no point is legal.
    pub fn is_empty(&self) -> bool {
        self.legal.is_empty()
    }

    /// Whether `point` is a legal point of the space.
    pub fn contains(&self, point: &[usize]) -> bool {
        self.index.contains(point)
    }

    /// The legal points that differ from `point` in exactly one dimension, dimension by
    /// dimension and choice by choice.
    pub fn neighbours(&self, point: &[usize]) -> Vec<Point> {
        let mut out = Vec::new();
        if point.len() != self.dims.len() {
            return out;
        }
        for (d, &n) in self.dims.iter().enumerate() {
            for c in 0..n {
                if c == point[d] {
                    continue;
                }
                let mut q = point.to_vec();
                q[d] = c;
                if self.index.contains(&q) {
                    out.push(q);
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filtered_keeps_the_legal_points_and_neighbours_stay_legal() {
        let space = Space::filtered(vec![2, 3], |p| p != [1, 2]).expect("valid");
        assert_eq!(space.len(), 5);
        assert!(!space.contains(&[1, 2]));
        let n = space.neighbours(&[0, 2]);
        assert_eq!(n, vec![vec![0, 0], vec![0, 1]]);
        assert!(n.iter().all(|p| space.contains(p)));
    }

    #[test]
    fn bad_points_and_dims_are_refused() {
        assert!(Space::new(vec![], []).is_err());
        assert!(Space::new(vec![2, 0], []).is_err());
        assert!(Space::new(vec![2], [vec![2]]).is_err());
        assert!(Space::new(vec![2], [vec![0, 0]]).is_err());
        let s = Space::new(vec![2], [vec![1], vec![1], vec![0]]).expect("valid");
        assert_eq!(s.legal(), &[vec![1], vec![0]]);
    }
}
