//! The evolutionary proposer (Ansor's): a population of points, scored by the cost model, bred
//! for a few generations by mutation and crossover; the best-scored points never measured are
//! the batch, a few of them replaced by random points (ε-greedy) so that the model also sees
//! points it does not yet like.
//!
//! The population starts from the best measured points and random samples. A child is a
//! mutation of one parent (one decision moved to a neighbouring choice or to any other) or a
//! crossover of two parents of one sketch (each decision from either); parents are picked by
//! tournament on the predicted score. A child the space rejects (`SearchSpace::features` is
//! `None`) is dropped. Everything is drawn from one seeded generator, so a proposal is a
//! function of the seed, the space, the model and the measured points.

use std::collections::HashSet;

use rand::Rng;
use rand::rngs::StdRng;
use schedules::auto::AutoPoint;

use super::cost_model::{CostModel, ModelError};
use super::random::{propose_random, random_point};
use super::space::{SearchSpace, SketchDomain};

/// The evolution's parameters.
#[derive(Clone, Debug, PartialEq)]
pub struct EvolveOptions {
    pub population: usize,
    pub generations: usize,
    /// The best measured points in the first population, at most.
    pub measured_seeds: usize,
    /// The probability that a child is a crossover (else a mutation) when its parent's sketch
    /// has another member in the population.
    pub crossover: f64,
    /// The share of each batch drawn at random (ε-greedy).
    pub epsilon: f64,
    /// Points compared per parent picked.
    pub tournament: usize,
}

impl Default for EvolveOptions {
    fn default() -> EvolveOptions {
        EvolveOptions {
            population: 128,
            generations: 4,
            measured_seeds: 16,
            crossover: 0.2,
            epsilon: 0.1,
            tournament: 3,
        }
    }
}

/// A member of the population.
struct Member {
    point: AutoPoint,
    score: f32,
}

/// Up to `batch` new points (none in `measured`, none rejected by the space, all distinct):
/// the best predicted by `model` among the points the evolution visited, with
/// `epsilon · batch` of them random. `best_measured` are measured points, fastest first.
pub fn propose_evolutionary(
    space: &impl SearchSpace,
    model: &CostModel,
    (measured, best_measured): (&HashSet<AutoPoint>, &[AutoPoint]),
    batch: usize,
    options: &EvolveOptions,
    rng: &mut StdRng,
) -> Result<Vec<AutoPoint>, ModelError> {
    let domains = space.sketches();
    let population = options.population.max(2);
    // The first population: the best measured points, then random ones.
    let mut seen: HashSet<AutoPoint> = HashSet::new();
    let mut points: Vec<AutoPoint> = Vec::new();
    for p in best_measured.iter().take(options.measured_seeds) {
        if seen.insert(p.clone()) && space.features(p).is_some() {
            points.push(p.clone());
        }
    }
    let fresh = propose_random(space, &seen, population.saturating_sub(points.len()), rng);
    seen.extend(fresh.iter().cloned());
    points.extend(fresh);
    let mut members = score(space, model, points)?;
    // Every point visited, unmeasured, with its score: the candidates of the batch.
    let mut candidates: Vec<(usize, Member)> = Vec::new();
    let keep = |members: &[Member], candidates: &mut Vec<(usize, Member)>| {
        for m in members.iter().filter(|m| !measured.contains(&m.point)) {
            let order = candidates.len();
            candidates.push((order, Member { point: m.point.clone(), score: m.score }));
        }
    };
    keep(&members, &mut candidates);
    for _ in 0..options.generations {
        if members.is_empty() {
            break;
        }
        let mut children = Vec::new();
        let mut attempts = 0;
        while children.len() < population && attempts < population * 8 {
            attempts += 1;
            let parent = tournament(&members, options.tournament, rng);
            let mate = if rng.random::<f64>() < options.crossover {
                let same: Vec<&Member> = members.iter().filter(|m| m.point.sketch == parent.point.sketch).collect();
                (same.len() > 1).then(|| tournament_of(&same, options.tournament, rng))
            } else {
                None
            };
            let child = match mate {
                Some(mate) => crossover(&parent.point, &mate.point, rng),
                None => mutate(&parent.point, &domains, rng),
            };
            if seen.insert(child.clone()) && space.features(&child).is_some() {
                children.push(child);
            }
        }
        let scored = score(space, model, children)?;
        keep(&scored, &mut candidates);
        // The next population: the best of parents and children.
        members.extend(scored);
        members.sort_by(|a, b| b.score.total_cmp(&a.score));
        members.truncate(population);
    }
    candidates.sort_by(|(i, a), (j, b)| b.score.total_cmp(&a.score).then(i.cmp(j)));
    let greedy = batch - ((batch as f64 * options.epsilon).round() as usize).min(batch);
    let mut out: Vec<AutoPoint> = candidates.into_iter().map(|(_, m)| m.point).take(greedy).collect();
    let excluded: HashSet<AutoPoint> = measured.iter().chain(&out).cloned().collect();
    // The random share, and whatever the evolution could not fill.
    out.extend(propose_random(space, &excluded, batch - out.len(), rng));
    Ok(out)
}

/// The members of `points` with their predicted scores.
fn score(space: &impl SearchSpace, model: &CostModel, points: Vec<AutoPoint>) -> Result<Vec<Member>, ModelError> {
    // Points here were accepted by the space, whose features are remembered or cheap.
    let features: Vec<Vec<f32>> = points.iter().map(|p| space.features(p).unwrap_or_default()).collect();
    let scores = model.predict(&features)?;
    Ok(points.into_iter().zip(scores).map(|(point, score)| Member { point, score }).collect())
}

/// The best-scored of `size` members drawn at random.
fn tournament<'a>(members: &'a [Member], size: usize, rng: &mut StdRng) -> &'a Member {
    let refs: Vec<&Member> = members.iter().collect();
    tournament_of(&refs, size, rng)
}

fn tournament_of<'a>(members: &[&'a Member], size: usize, rng: &mut StdRng) -> &'a Member {
    let mut best = members[rng.random_range(0..members.len())];
    for _ in 1..size.max(1) {
        let other = members[rng.random_range(0..members.len())];
        if other.score > best.score {
            best = other;
        }
    }
    best
}

/// `point` with one decision changed: to a neighbouring choice (half the time) or to any other
/// choice. A point whose sketch has no decision with two choices becomes a random point.
pub fn mutate(point: &AutoPoint, domains: &[SketchDomain], rng: &mut StdRng) -> AutoPoint {
    let decisions = domains.iter().find(|(name, _)| *name == point.sketch).map(|(_, d)| d);
    let open: Vec<usize> = decisions
        .map(|d| (0..d.len().min(point.values.len())).filter(|&i| d[i].len() > 1).collect())
        .unwrap_or_default();
    let (Some(decisions), false) = (decisions, open.is_empty()) else {
        return random_point(domains, rng).unwrap_or_else(|| point.clone());
    };
    let i = open[rng.random_range(0..open.len())];
    let choices = &decisions[i];
    let at = choices.iter().position(|&v| v == point.values[i]).unwrap_or(0);
    let next = if rng.random::<bool>() {
        // A neighbour: one step up or down, reflected at the ends.
        match (at, rng.random::<bool>()) {
            (0, _) => 1,
            (a, _) if a == choices.len() - 1 => a - 1,
            (a, true) => a + 1,
            (a, false) => a - 1,
        }
    } else {
        let other = rng.random_range(0..choices.len() - 1);
        if other >= at { other + 1 } else { other }
    };
    let mut values = point.values.clone();
    values[i] = choices[next];
    AutoPoint { sketch: point.sketch.clone(), values }
}

/// Each decision of two points of one sketch from either, at random.
pub fn crossover(a: &AutoPoint, b: &AutoPoint, rng: &mut StdRng) -> AutoPoint {
    let values = a.values.iter().zip(&b.values).map(|(&x, &y)| if rng.random::<bool>() { x } else { y }).collect();
    AutoPoint { sketch: a.sketch.clone(), values }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn a_mutation_changes_one_decision_within_its_domain() {
        let domains: Vec<SketchDomain> = vec![("s".into(), vec![vec![1, 2, 4, 8], vec![7], vec![0, 1]])];
        let mut rng = StdRng::seed_from_u64(3);
        let p = AutoPoint { sketch: "s".into(), values: vec![2, 7, 0] };
        for _ in 0..100 {
            let q = mutate(&p, &domains, &mut rng);
            let changed: Vec<usize> = (0..3).filter(|&i| p.values[i] != q.values[i]).collect();
            assert_eq!(changed.len(), 1, "{q:?}");
            assert!(domains[0].1[changed[0]].contains(&q.values[changed[0]]));
            assert_ne!(changed[0], 1, "a decision of one choice never changes");
        }
        let a = AutoPoint { sketch: "s".into(), values: vec![1, 7, 0] };
        let b = AutoPoint { sketch: "s".into(), values: vec![8, 7, 1] };
        for _ in 0..20 {
            let c = crossover(&a, &b, &mut rng);
            assert!((0..3).all(|i| c.values[i] == a.values[i] || c.values[i] == b.values[i]));
        }
    }
}
