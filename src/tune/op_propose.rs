//! The proposer of `tune op` (`op_tune`): which points of an operator's space to measure next,
//! given what was measured. For now uniformly random points over the space's sketches and
//! their decisions — the baseline — until the evolutionary search with its learned cost model
//! takes this function's place (its one caller is `op_tune::next_points`).

use std::collections::HashSet;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use schedules::auto::{AutoPoint, Space};

/// Tries to find an unproposed point this many times per point before the space counts as
/// exhausted.
const ATTEMPTS: usize = 2000;

/// Up to `count` distinct points of `space`, none of them in `measured` (points with their
/// corrected time in seconds, `None` when the measurement failed): each a sketch drawn
/// uniformly, then a value drawn uniformly from each decision's choices. Deterministic for the
/// same `seed` and `measured`; fewer than `count` when the space has no more points.
pub fn propose(space: &Space, measured: &[(AutoPoint, Option<f64>)], count: usize, seed: u64) -> Vec<AutoPoint> {
    let sketches = space.sketches();
    let seen: HashSet<&AutoPoint> = measured.iter().map(|(p, _)| p).collect();
    let mut rng = StdRng::seed_from_u64(seed ^ (measured.len() as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15));
    let mut points: Vec<AutoPoint> = Vec::new();
    if sketches.is_empty() {
        return points;
    }
    'points: while points.len() < count {
        for _ in 0..ATTEMPTS {
            let sketch = &sketches[rng.random_range(0..sketches.len())];
            let values: Option<Vec<i64>> = sketch
                .decisions
                .iter()
                .map(|d| (!d.choices.is_empty()).then(|| d.choices[rng.random_range(0..d.choices.len())]))
                .collect();
            let Some(values) = values else { continue };
            let point = AutoPoint { sketch: sketch.name.clone(), values };
            if !seen.contains(&point) && !points.contains(&point) {
                points.push(point);
                continue 'points;
            }
        }
        break;
    }
    points
}

#[cfg(test)]
mod tests {
    use schedules::auto::SpaceOptions;
    use schedules::catalog::{MatmulDtype, OpSpec};

    use super::*;

    #[test]
    fn points_are_new_distinct_and_deterministic() {
        let def = OpSpec::Matmul { m: 8, n: 8, k: 8, dtype: MatmulDtype::U8 }.build().unwrap();
        let space = Space::new(&def.inputs, &def.outputs, SpaceOptions::default());
        let size: usize =
            space.sketches().iter().map(|s| s.decisions.iter().map(|d| d.choices.len()).product::<usize>()).sum();
        let all = propose(&space, &[], 64, 1);
        assert_eq!(all.len(), size.min(64));
        assert!(all.iter().all(|p| space.apply(p).is_ok()), "{all:?}");
        let distinct: HashSet<&AutoPoint> = all.iter().collect();
        assert_eq!(distinct.len(), all.len());
        assert_eq!(propose(&space, &[], 64, 1), all);
        // Measured points are never proposed again; once all are, nothing is left.
        let measured: Vec<(AutoPoint, Option<f64>)> = all.iter().map(|p| (p.clone(), None)).collect();
        let more = propose(&space, &measured, 4, 1);
        assert!(more.iter().all(|p| !all.contains(p)), "{more:?}");
        assert_eq!(more.is_empty(), size <= 64);
    }
}
