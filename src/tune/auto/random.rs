//! The random proposer: points uniform over sketches, then over each decision's choices, never
//! one already measured or proposed, never one the space rejects. The baseline the learned
//! search is compared with, and the evolutionary search's source of fresh points.

use std::collections::HashSet;

use rand::Rng;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use schedules::auto::AutoPoint;

use super::space::{SearchSpace, SketchDomain};

/// Spaces of at most this many points are enumerated when sampling stops finding new points.
const ENUMERABLE: f64 = 1e5;
/// Draws per point wanted before enumerating (or giving up on a larger space).
const DRAWS_PER_POINT: usize = 32;

/// A point drawn uniformly: a sketch, then one choice per decision (`None`: no sketch has a
/// point, as when a decision has no choices).
pub fn random_point(domains: &[SketchDomain], rng: &mut StdRng) -> Option<AutoPoint> {
    let usable: Vec<&SketchDomain> = domains.iter().filter(|(_, d)| d.iter().all(|c| !c.is_empty())).collect();
    if usable.is_empty() {
        return None;
    }
    let (sketch, decisions) = usable[rng.random_range(0..usable.len())];
    let values = decisions.iter().map(|c| c[rng.random_range(0..c.len())]).collect();
    Some(AutoPoint { sketch: sketch.clone(), values })
}

/// Up to `batch` distinct points the space accepts (features not `None`) and `excluded` does
/// not hold; fewer only when the space has no more.
pub fn propose_random(
    space: &impl SearchSpace,
    excluded: &HashSet<AutoPoint>,
    batch: usize,
    rng: &mut StdRng,
) -> Vec<AutoPoint> {
    let domains = space.sketches();
    let mut taken: HashSet<AutoPoint> = HashSet::new();
    let mut out = Vec::new();
    let mut accept = |p: AutoPoint, out: &mut Vec<AutoPoint>| {
        if !excluded.contains(&p) && !taken.contains(&p) {
            taken.insert(p.clone());
            if space.features(&p).is_some() {
                out.push(p);
            }
        }
    };
    for _ in 0..batch * DRAWS_PER_POINT {
        if out.len() == batch {
            return out;
        }
        match random_point(&domains, rng) {
            Some(p) => accept(p, &mut out),
            None => return out,
        }
    }
    // Sampling mostly found known points: a small space is nearly exhausted, so take what is
    // left in a random order.
    if size(&domains) <= ENUMERABLE {
        let mut rest = enumerate(&domains);
        rest.shuffle(rng);
        for p in rest {
            if out.len() == batch {
                break;
            }
            accept(p, &mut out);
        }
    }
    out
}

/// The number of points of the space (before `features` rejects any).
pub fn size(domains: &[SketchDomain]) -> f64 {
    domains.iter().map(|(_, d)| d.iter().map(|c| c.len() as f64).product::<f64>()).sum()
}

/// Every point, sketch by sketch, the last decision varying fastest.
fn enumerate(domains: &[SketchDomain]) -> Vec<AutoPoint> {
    let mut out = Vec::new();
    for (sketch, decisions) in domains {
        let mut points = vec![vec![]];
        for choices in decisions {
            points = points
                .into_iter()
                .flat_map(|p: Vec<i64>| {
                    choices.iter().map(move |&v| {
                        let mut q = p.clone();
                        q.push(v);
                        q
                    })
                })
                .collect();
        }
        out.extend(points.into_iter().map(|values| AutoPoint { sketch: sketch.clone(), values }));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    /// Two sketches, one of 3×2 points whose first value 2 is rejected, and one without
    /// decisions.
    struct Small;

    impl SearchSpace for Small {
        fn sketches(&self) -> Vec<SketchDomain> {
            vec![("a".into(), vec![vec![0, 1, 2], vec![5, 6]]), ("b".into(), vec![])]
        }

        fn features(&self, p: &AutoPoint) -> Option<Vec<f32>> {
            (p.values.first() != Some(&2)).then(|| vec![0.0])
        }
    }

    #[test]
    fn random_points_are_new_accepted_and_run_out_with_the_space() {
        let mut rng = StdRng::seed_from_u64(1);
        let first = propose_random(&Small, &HashSet::new(), 3, &mut rng);
        assert_eq!(first.len(), 3);
        let excluded: HashSet<AutoPoint> = first.iter().cloned().collect();
        assert_eq!(excluded.len(), 3, "distinct");
        let rest = propose_random(&Small, &excluded, 10, &mut rng);
        // 4 accepted points of `a` and the one of `b`, minus the three already taken.
        assert_eq!(rest.len(), 2);
        for p in first.iter().chain(&rest) {
            assert_ne!(p.values.first(), Some(&2), "a rejected point was proposed: {p:?}");
        }
        assert!(rest.iter().all(|p| !excluded.contains(p)));
        let all: HashSet<AutoPoint> = excluded.into_iter().chain(rest).collect();
        assert!(propose_random(&Small, &all, 4, &mut rng).is_empty());
        assert_eq!(size(&Small.sketches()), 7.0);
    }
}
