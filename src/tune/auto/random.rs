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
/// not hold; fewer only when the space has no more. A listed space (`SearchSpace::listed`)
/// draws uniformly from its list.
pub fn propose_random(
    space: &impl SearchSpace,
    excluded: &HashSet<AutoPoint>,
    batch: usize,
    rng: &mut StdRng,
) -> Vec<AutoPoint> {
    if let Some(list) = space.listed() {
        let mut rest: Vec<AutoPoint> = list.into_iter().filter(|p| !excluded.contains(p)).collect();
        rest.shuffle(rng);
        let mut seen: HashSet<AutoPoint> = HashSet::new();
        let fresh = rest.into_iter().filter(|p| seen.insert(p.clone()) && space.features(p).is_some());
        return fresh.take(batch).collect();
    }
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

/// Up to `batch` distinct new points as `propose_random` draws them, but stratified by sketch:
/// the sketches in a random order, one point of each in turn, so a batch at least as large as
/// the number of sketches holds a point of every sketch that has one left.
pub fn propose_stratified(
    space: &impl SearchSpace,
    excluded: &HashSet<AutoPoint>,
    batch: usize,
    rng: &mut StdRng,
) -> Vec<AutoPoint> {
    let mut names: Vec<String> = match space.listed() {
        Some(list) => {
            let mut names: Vec<String> = Vec::new();
            for p in list {
                if !names.contains(&p.sketch) {
                    names.push(p.sketch);
                }
            }
            names
        }
        None => space.sketches().into_iter().map(|(name, _)| name).collect(),
    };
    names.shuffle(rng);
    let mut taken = excluded.clone();
    let mut out = Vec::new();
    let mut open = names;
    while out.len() < batch && !open.is_empty() {
        let mut still = Vec::new();
        for name in open {
            if out.len() == batch {
                break;
            }
            let one = OneSketch { space, name: &name };
            if let Some(p) = propose_random(&one, &taken, 1, rng).pop() {
                taken.insert(p.clone());
                out.push(p);
                still.push(name);
            }
        }
        open = still;
    }
    out
}

/// The points of one sketch of a space.
struct OneSketch<'a, S> {
    space: &'a S,
    name: &'a str,
}

impl<S: SearchSpace> SearchSpace for OneSketch<'_, S> {
    fn sketches(&self) -> Vec<SketchDomain> {
        self.space.sketches().into_iter().filter(|(name, _)| name == self.name).collect()
    }

    fn features(&self, point: &AutoPoint) -> Option<Vec<f32>> {
        (point.sketch == self.name).then(|| self.space.features(point)).flatten()
    }

    fn listed(&self) -> Option<Vec<AutoPoint>> {
        self.space.listed().map(|list| list.into_iter().filter(|p| p.sketch == self.name).collect())
    }
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

    #[test]
    fn a_stratified_batch_holds_a_point_of_every_sketch_that_has_one() {
        // Three sketches of very different sizes: uniform draws over sketches would often
        // miss one in a batch of three; stratified draws never do.
        struct Three;
        impl SearchSpace for Three {
            fn sketches(&self) -> Vec<SketchDomain> {
                vec![("big".into(), vec![(0..50).collect(); 3]), ("one".into(), vec![vec![1]]), ("none".into(), vec![])]
            }
            fn features(&self, p: &AutoPoint) -> Option<Vec<f32>> {
                Some(vec![p.values.len() as f32])
            }
        }
        for seed in 0..20 {
            let mut rng = StdRng::seed_from_u64(seed);
            let batch = propose_stratified(&Three, &HashSet::new(), 3, &mut rng);
            let mut sketches: Vec<&str> = batch.iter().map(|p| p.sketch.as_str()).collect();
            sketches.sort();
            assert_eq!(sketches, ["big", "none", "one"], "seed {seed}");
            // With `one` and `none` measured, a larger batch fills up from `big`, distinct.
            let excluded: HashSet<AutoPoint> = batch.into_iter().collect();
            let more = propose_stratified(&Three, &excluded, 6, &mut rng);
            assert_eq!(more.len(), 6);
            assert!(more.iter().all(|p| p.sketch == "big" && !excluded.contains(p)));
            assert_eq!(more.iter().collect::<HashSet<_>>().len(), 6);
        }
        // A space without points left gives nothing.
        let all: HashSet<AutoPoint> =
            propose_random(&Small, &HashSet::new(), 10, &mut StdRng::seed_from_u64(0)).into_iter().collect();
        assert_eq!(all.len(), 5);
        assert!(propose_stratified(&Small, &all, 3, &mut StdRng::seed_from_u64(0)).is_empty());
    }
}
