//! Search strategies over a `Space`: which point to measure next, given what was measured.
//!
//! Both strategies measure the default point first (then any known good points they are given)
//! and never propose a point twice or one the space rejects; with the same seed and the same measurements they propose the same points.

use std::collections::HashSet;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};

use schedules::x86_conv::Conv2dInt8Knobs;

use super::space::{Choices, Space};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Strategy {
    /// Tournament selection among the measured points, then one or two knobs of the winner
    /// moved (to a neighbouring value, or anywhere in their range): local refinement around
    /// what is fast, with jumps.
    Evolutionary,
    /// Uniformly random points: the baseline the evolutionary search must beat.
    Random,
}

/// Proposes points and takes their measured costs.
pub struct Searcher {
    space: Space,
    choices: Choices,
    strategy: Strategy,
    rng: StdRng,
    seen: HashSet<Conv2dInt8Knobs>,
    /// Measured points with their time (seconds); `None`: the measurement failed.
    measured: Vec<(Conv2dInt8Knobs, Option<f64>)>,
    /// Points to propose right after the default (`starting_at`).
    starts: Vec<Conv2dInt8Knobs>,
}

/// Tries to find an unseen point this many times before the space counts as exhausted.
const ATTEMPTS: usize = 2000;

impl Searcher {
    pub fn new(space: Space, strategy: Strategy, seed: u64) -> Searcher {
        Searcher {
            choices: space.choices(),
            space,
            strategy,
            rng: StdRng::seed_from_u64(seed),
            seen: HashSet::new(),
            measured: Vec::new(),
            starts: Vec::new(),
        }
    }

    /// The searcher proposing `starts` (known good points: a record's) right after the default,
    /// those the space accepts and not proposed yet.
    pub fn starting_at(mut self, starts: &[Conv2dInt8Knobs]) -> Searcher {
        self.starts = starts.iter().rev().copied().collect();
        self
    }

    /// The next point to measure, or `None` when every point of the space was proposed.
    pub fn propose(&mut self) -> Option<Conv2dInt8Knobs> {
        let default = self.space.default_knobs();
        if self.seen.insert(default) {
            return Some(default);
        }
        while let Some(p) = self.starts.pop() {
            if self.space.check(&p).is_ok() && self.seen.insert(p) {
                return Some(p);
            }
        }
        for _ in 0..ATTEMPTS {
            let p = match self.strategy {
                Strategy::Random => self.random_point(),
                // From the first measurement on (the default, usually a good start): its
                // neighbourhood first, then the winners'.
                Strategy::Evolutionary => match self.parent() {
                    Some(parent) => self.mutate(parent),
                    None => self.random_point(),
                },
            };
            if self.space.check(&p).is_ok() && self.seen.insert(p) {
                return Some(p);
            }
        }
        None
    }

    /// Records the time of `p` (`None`: failed), for the strategy's next choices.
    pub fn report(&mut self, p: Conv2dInt8Knobs, seconds: Option<f64>) {
        self.measured.push((p, seconds));
    }

    /// The fastest point measured so far.
    pub fn best(&self) -> Option<(Conv2dInt8Knobs, f64)> {
        self.measured.iter().filter_map(|&(p, s)| s.map(|s| (p, s))).min_by(|a, b| a.1.total_cmp(&b.1))
    }

    fn pick<T: Copy>(rng: &mut StdRng, values: &[T]) -> T {
        values[rng.random_range(0..values.len())]
    }

    fn random_point(&mut self) -> Conv2dInt8Knobs {
        let c = &self.choices;
        Conv2dInt8Knobs {
            mr: Self::pick(&mut self.rng, &c.mr),
            nr: Self::pick(&mut self.rng, &c.nr),
            lanes: Self::pick(&mut self.rng, &c.lanes),
            order: Self::pick(&mut self.rng, &c.orders),
            threads: Self::pick(&mut self.rng, &c.threads),
            packing: Self::pick(&mut self.rng, &c.packings),
            accumulation: Self::pick(&mut self.rng, &c.accumulations),
        }
    }

    /// The faster of two measured points drawn at random (tournament of two; failures lose).
    fn parent(&mut self) -> Option<Conv2dInt8Knobs> {
        let ok: Vec<(Conv2dInt8Knobs, f64)> = self.measured.iter().filter_map(|&(p, s)| s.map(|s| (p, s))).collect();
        if ok.is_empty() {
            return None;
        }
        let a = ok[self.rng.random_range(0..ok.len())];
        let b = ok[self.rng.random_range(0..ok.len())];
        Some(if a.1 <= b.1 { a.0 } else { b.0 })
    }

    /// `value` moved to a neighbour in `values` (70%) or anywhere in it.
    fn step<T: Copy + PartialEq>(rng: &mut StdRng, values: &[T], value: T) -> T {
        let i = values.iter().position(|v| *v == value).unwrap_or(0);
        if rng.random_bool(0.7) {
            let j = if rng.random_bool(0.5) { i.saturating_sub(1) } else { (i + 1).min(values.len() - 1) };
            values[j]
        } else {
            Self::pick(rng, values)
        }
    }

    /// `mr` moved to the nearest value above or below it that divides the row (70%), or
    /// anywhere: a step by one mostly lands on a tile that leaves part of each row to the
    /// fallback loops.
    fn step_mr(rng: &mut StdRng, c: &Choices, mr: i64) -> i64 {
        let below = c.mr_dividing_rows.iter().rev().find(|&&m| m < mr);
        let above = c.mr_dividing_rows.iter().find(|&&m| m > mr);
        match (rng.random_bool(0.7), below, above) {
            (true, Some(&b), Some(&a)) => {
                if rng.random_bool(0.5) {
                    a
                } else {
                    b
                }
            }
            (true, Some(&m), None) | (true, None, Some(&m)) => m,
            _ => Self::pick(rng, &c.mr),
        }
    }

    fn mutate(&mut self, parent: Conv2dInt8Knobs) -> Conv2dInt8Knobs {
        let mut p = parent;
        let moves = if self.rng.random_bool(0.3) { 2 } else { 1 };
        // Only knobs with a choice move (a layer may fix some: threads of FC, lanes).
        let c = &self.choices;
        let sizes = [
            c.mr.len(),
            c.nr.len(),
            c.lanes.len(),
            c.orders.len(),
            c.packings.len(),
            c.accumulations.len(),
            c.threads.len(),
        ];
        let movable: Vec<usize> = (0..sizes.len()).filter(|&k| sizes[k] > 1).collect();
        if movable.is_empty() {
            return p;
        }
        for _ in 0..moves {
            let c = &self.choices;
            match movable[self.rng.random_range(0..movable.len())] {
                0 => p.mr = Self::step_mr(&mut self.rng, c, p.mr),
                1 => p.nr = Self::step(&mut self.rng, &c.nr, p.nr),
                2 => p.lanes = Self::step(&mut self.rng, &c.lanes, p.lanes),
                3 => p.order = Self::step(&mut self.rng, &c.orders, p.order),
                4 => p.packing = Self::step(&mut self.rng, &c.packings, p.packing),
                5 => p.accumulation = Self::step(&mut self.rng, &c.accumulations, p.accumulation),
                _ => p.threads = Self::step(&mut self.rng, &c.threads, p.threads),
            }
        }
        p
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use schedules::resnet18;

    /// A cost with one best point and smooth slopes: what a register tile's speed looks like.
    fn synthetic_cost(p: &Conv2dInt8Knobs) -> f64 {
        let order = if p.order == schedules::x86_conv::TileOrder::ChannelsOuter { 0.0 } else { 0.3 };
        1.0 + 0.05 * (p.mr - 7).pow(2) as f64
            + 0.4 * ((p.nr / 16) as f64 - 2.0).abs()
            + order
            + 0.2 * (p.lanes != 16) as u8 as f64
            + 0.5 * (p.threads != 2) as u8 as f64
    }

    fn run(strategy: Strategy, seed: u64, trials: usize) -> Vec<Conv2dInt8Knobs> {
        let space = Space::new(resnet18::layer("R2").unwrap(), 2);
        let mut s = Searcher::new(space, strategy, seed);
        let mut proposed = Vec::new();
        for _ in 0..trials {
            let Some(p) = s.propose() else { break };
            s.report(p, Some(synthetic_cost(&p)));
            proposed.push(p);
        }
        proposed
    }

    #[test]
    fn searches_start_at_the_default_never_repeat_and_are_reproducible() {
        let space = Space::new(resnet18::layer("R2").unwrap(), 2);
        for strategy in [Strategy::Evolutionary, Strategy::Random] {
            let points = run(strategy, 7, 60);
            assert_eq!(points[0], space.default_knobs());
            assert_eq!(points.iter().collect::<HashSet<_>>().len(), points.len(), "{strategy:?} repeated a point");
            assert!(points.iter().all(|p| space.check(p).is_ok()));
            assert_eq!(points, run(strategy, 7, 60), "{strategy:?}: same seed, same points");
        }
        // A space smaller than the budget is proposed in full, then the search stops.
        let fc = Space::new(resnet18::layers()[11], 1);
        let all = run_space(fc, 10_000);
        assert_eq!(all.len(), fc.size());
    }

    fn run_space(space: Space, trials: usize) -> Vec<Conv2dInt8Knobs> {
        let mut s = Searcher::new(space, Strategy::Evolutionary, 1);
        std::iter::from_fn(|| s.propose().inspect(|&p| s.report(p, Some(synthetic_cost(&p))))).take(trials).collect()
    }

    #[test]
    fn known_points_come_right_after_the_default_once_and_only_if_they_fit() {
        let space = Space::new(resnet18::layer("R2").unwrap(), 2);
        let default = space.default_knobs();
        let known = Conv2dInt8Knobs { mr: 7, threads: 1, ..default };
        let outside = Conv2dInt8Knobs { nr: 48, ..default };
        let mut s = Searcher::new(space, Strategy::Evolutionary, 3).starting_at(&[outside, known, default, known]);
        let points: Vec<_> = std::iter::from_fn(|| s.propose().inspect(|&p| s.report(p, Some(1.0)))).take(5).collect();
        assert_eq!(&points[..2], &[default, known]);
        assert!(!points[2..].contains(&known) && !points.contains(&outside), "{points:?}");
    }

    #[test]
    fn mr_steps_to_the_neighbouring_tiles_that_divide_the_row() {
        // R2's rows hold 56 pixels: 1, 2, 4, 7, 8, 14 divide them (of 1..=16); its flat rows'
        // 56·58 - 2 = 2·3·541 pixels add 3 and 6.
        let c = Space::new(resnet18::layer("R2").unwrap(), 1).choices();
        assert_eq!(c.mr_dividing_rows, [1, 2, 3, 4, 6, 7, 8, 14]);
        let mut rng = StdRng::seed_from_u64(5);
        let steps: Vec<i64> = (0..1000).map(|_| Searcher::step_mr(&mut rng, &c, 4)).collect();
        let neighbours = steps.iter().filter(|&&m| m == 3 || m == 6).count();
        // 70% to a neighbour, plus the random jumps that land on one.
        assert!((700..=800).contains(&neighbours), "{neighbours}");
        assert!(steps.iter().all(|m| c.mr.contains(m)));
        // From the largest divisor the step goes down; R11's 7-pixel rows leave 1 and 7 (its
        // 61 flat pixels are prime).
        let r11 = Space::new(resnet18::layer("R11").unwrap(), 1).choices();
        assert_eq!(r11.mr_dividing_rows, [1, 7]);
        let down = (0..100).filter(|_| Searcher::step_mr(&mut rng, &r11, 7) == 1).count();
        assert!(down >= 70, "{down}");
    }

    #[test]
    fn evolution_beats_random_search_at_equal_trials_on_a_smooth_cost() {
        // Best cost after 40 trials, summed over 20 seeds: lower is better.
        let best = |strategy| -> f64 {
            (0..20).map(|seed| run(strategy, seed, 40).iter().map(synthetic_cost).fold(f64::MAX, f64::min)).sum()
        };
        let (evolved, random) = (best(Strategy::Evolutionary), best(Strategy::Random));
        assert!(evolved < random, "evolutionary {evolved} vs random {random}");
    }
}
