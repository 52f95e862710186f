//! The search loop, independent of how points are measured: propose a batch of new points,
//! measure it (the caller's function: worker processes, Ray tasks, a synthetic cost), retrain
//! the cost model on every measurement so far, repeat until the trials are spent or the space
//! has no new point.

use std::collections::HashSet;
use std::time::Instant;

use rand::SeedableRng;
use rand::rngs::StdRng;
use schedules::auto::AutoPoint;
use thiserror::Error;

use super::cost_model::{CostModel, ModelError, ModelOptions, Sample, spearman};
use super::evolve::{EvolveOptions, propose_evolutionary};
use super::random::{propose_random, propose_stratified};
use super::space::SearchSpace;

/// How batches are proposed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Strategy {
    /// Evolution guided by the learned cost model (`evolve`); the first batch, before the
    /// model has anything to learn from, is drawn as `SearchOptions::first` says.
    Evolutionary,
    /// Uniform random points (`random`): the baseline.
    Random,
}

/// How the learned search draws its points before the model is trained.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FirstBatch {
    /// As the random search (`random::propose_random`).
    Random,
    /// One point of each sketch in turn (`random::propose_stratified`), so the model sees
    /// every sketch from its first training.
    Stratified,
}

#[derive(Clone, Debug, PartialEq)]
pub struct SearchOptions {
    /// New measurements to make, at most.
    pub trials: usize,
    /// Points proposed and measured together.
    pub batch: usize,
    pub seed: u64,
    pub strategy: Strategy,
    /// Points measured first, in the first batch (such as `Space::default_point`), where new
    /// and accepted by the space.
    pub starts: Vec<AutoPoint>,
    /// The learned search's points before its model is trained (the random search always
    /// draws at random).
    pub first: FirstBatch,
    pub evolve: EvolveOptions,
    pub model: ModelOptions,
    /// Measurements of other workloads on this CPU (one list per workload, features of the same
    /// kind): the learned search's model trains on them with its own measurements from the start
    /// (each workload's scores normalized on its own, `cost_model`), so that even its first
    /// proposals are ranked. Empty: the model starts untrained.
    pub prior: Vec<Vec<Sample>>,
    /// No batch is proposed after this instant (a time budget).
    pub deadline: Option<Instant>,
}

impl SearchOptions {
    /// `trials` measurements by `strategy`, in batches of 16, seed 0, a random first batch,
    /// default evolution and model.
    pub fn new(trials: usize, strategy: Strategy) -> SearchOptions {
        SearchOptions {
            trials,
            batch: 16,
            seed: 0,
            strategy,
            starts: vec![],
            first: FirstBatch::Random,
            evolve: EvolveOptions::default(),
            model: ModelOptions::default(),
            prior: vec![],
            deadline: None,
        }
    }
}

/// One measurement.
#[derive(Clone, Debug, PartialEq)]
pub struct Trial {
    pub point: AutoPoint,
    /// Seconds per call; `None`: the measurement failed.
    pub seconds: Option<f64>,
    /// The model's score for the point when it was proposed (`None`: no trained model then).
    pub predicted: Option<f32>,
}

/// What a search did: every measurement in order (the resumed history first).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SearchLog {
    pub trials: Vec<Trial>,
    /// The leading trials of `trials` that came from the history passed to `resume`.
    pub resumed: usize,
    /// Per batch measured with a trained model: Spearman's correlation between the scores the
    /// model predicted and the measured speed (`-seconds`) of the batch's successful points,
    /// none of which it was trained on (`None`: fewer than two, or all equal).
    pub held_out_spearman: Vec<Option<f64>>,
}

impl SearchLog {
    /// The fastest successful trial.
    pub fn best(&self) -> Option<&Trial> {
        let ok = self.trials.iter().filter(|t| t.seconds.is_some());
        ok.min_by(|a, b| a.seconds.unwrap_or(f64::INFINITY).total_cmp(&b.seconds.unwrap_or(f64::INFINITY)))
    }

    /// The best time after each trial (`None` until one succeeded): the tuning curve.
    pub fn curve(&self) -> Vec<Option<f64>> {
        let mut best: Option<f64> = None;
        let time = |t: &Trial| t.seconds;
        self.trials
            .iter()
            .map(|t| {
                best = match (best, time(t)) {
                    (Some(b), Some(s)) => Some(b.min(s)),
                    (b, s) => b.or(s),
                };
                best
            })
            .collect()
    }

    /// The number of trials after which the best time was at most `seconds`, if it ever was.
    pub fn trials_to_reach(&self, seconds: f64) -> Option<usize> {
        self.curve().iter().position(|b| b.is_some_and(|b| b <= seconds)).map(|i| i + 1)
    }
}

#[derive(Debug, Error, PartialEq)]
pub enum SearchError {
    #[error("the search space's features do not fit the cost model: {0}")]
    Model(#[from] ModelError),
}

/// Searches `space` from scratch: `resume` with no history.
pub fn search(
    space: &impl SearchSpace,
    measure: &mut dyn FnMut(&[AutoPoint]) -> Vec<Option<f64>>,
    options: &SearchOptions,
) -> Result<SearchLog, SearchError> {
    resume(space, &[], measure, options)
}

/// Searches `space` after the measurements of `history` (a search interrupted, or records of a
/// database): up to `options.trials` new points, in batches, each batch passed to `measure`,
/// which returns one time per point in order (a missing entry counts as a failure). No point
/// is measured twice, none the space rejects is measured, and the proposals depend only on
/// the seed, the space, the history and the measured times.
pub fn resume(
    space: &impl SearchSpace,
    history: &[Trial],
    measure: &mut dyn FnMut(&[AutoPoint]) -> Vec<Option<f64>>,
    options: &SearchOptions,
) -> Result<SearchLog, SearchError> {
    let mut rng = StdRng::seed_from_u64(options.seed);
    let mut model = CostModel::new(options.model.clone());
    let mut log = SearchLog { trials: history.to_vec(), resumed: history.len(), held_out_spearman: vec![] };
    let mut measured: HashSet<AutoPoint> = history.iter().map(|t| t.point.clone()).collect();
    let mut samples: Vec<Sample> = Vec::new();
    let learn = |samples: &mut Vec<Sample>, trials: &[Trial]| {
        for t in trials {
            if let Some(features) = space.features(&t.point) {
                samples.push(Sample { features, seconds: t.seconds });
            }
        }
    };
    learn(&mut samples, history);
    if options.strategy == Strategy::Evolutionary {
        fit(&mut model, &options.prior, &samples)?;
    }
    let mut starts: Vec<AutoPoint> = Vec::new();
    for p in &options.starts {
        if !measured.contains(p) && !starts.contains(p) && space.features(p).is_some() {
            starts.push(p.clone());
        }
    }
    let mut spent = 0;
    while spent < options.trials && options.deadline.is_none_or(|d| Instant::now() < d) {
        let want = options.batch.max(1).min(options.trials - spent);
        let batch = next_batch(space, &model, (&measured, &log.trials), &mut starts, want, options, &mut rng)?;
        if batch.is_empty() {
            break;
        }
        let predicted: Vec<Option<f32>> = if model.is_trained() {
            let features: Vec<Vec<f32>> = batch.iter().map(|p| space.features(p).unwrap_or_default()).collect();
            model.predict(&features)?.into_iter().map(Some).collect()
        } else {
            vec![None; batch.len()]
        };
        let mut times = measure(&batch);
        times.resize(batch.len(), None);
        let trials: Vec<Trial> = batch
            .into_iter()
            .zip(times)
            .zip(predicted)
            .map(|((point, seconds), predicted)| Trial { point, seconds, predicted })
            .collect();
        if model.is_trained() {
            let ok: Vec<&Trial> = trials.iter().filter(|t| t.seconds.is_some()).collect();
            let p: Vec<f64> = ok.iter().map(|t| t.predicted.unwrap_or(0.0) as f64).collect();
            let s: Vec<f64> = ok.iter().map(|t| -t.seconds.unwrap_or(0.0)).collect();
            log.held_out_spearman.push(spearman(&p, &s));
        }
        spent += trials.len();
        measured.extend(trials.iter().map(|t| t.point.clone()));
        learn(&mut samples, &trials);
        log.trials.extend(trials);
        if options.strategy == Strategy::Evolutionary {
            fit(&mut model, &options.prior, &samples)?;
        }
    }
    Ok(log)
}

/// Trains `model` on the prior workloads and this one's `samples`.
fn fit(model: &mut CostModel, prior: &[Vec<Sample>], samples: &[Sample]) -> Result<(), ModelError> {
    let workloads: Vec<&[Sample]> = prior.iter().map(Vec::as_slice).chain([samples]).collect();
    model.fit(&workloads)
}

/// The next `want` points: the start points not yet measured first, then the strategy's
/// proposals (evolution once `model` is trained, else random), none in `measured`.
fn next_batch(
    space: &impl SearchSpace,
    model: &CostModel,
    (measured, trials): (&HashSet<AutoPoint>, &[Trial]),
    starts: &mut Vec<AutoPoint>,
    want: usize,
    options: &SearchOptions,
    rng: &mut StdRng,
) -> Result<Vec<AutoPoint>, SearchError> {
    let mut batch: Vec<AutoPoint> = starts.drain(..starts.len().min(want)).collect();
    let excluded: HashSet<AutoPoint> = measured.iter().chain(&batch).cloned().collect();
    let rest = want - batch.len();
    let proposed = match options.strategy {
        Strategy::Evolutionary if model.is_trained() => {
            let best = fastest(trials);
            propose_evolutionary(space, model, (&excluded, best.as_slice()), rest, &options.evolve, rng)?
        }
        Strategy::Evolutionary if options.first == FirstBatch::Stratified => {
            propose_stratified(space, &excluded, rest, rng)
        }
        _ => propose_random(space, &excluded, rest, rng),
    };
    batch.extend(proposed);
    Ok(batch)
}

/// The batch `resume` would measure next after `history`, without measuring it: up to `count`
/// new points (the start points first), the model trained on `history`. What a driver that
/// measures elsewhere asks for (`tune op --propose`); deterministic for the same seed and
/// history.
pub fn propose(
    space: &impl SearchSpace,
    history: &[Trial],
    count: usize,
    options: &SearchOptions,
) -> Result<Vec<AutoPoint>, SearchError> {
    let mut rng = StdRng::seed_from_u64(options.seed ^ (history.len() as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15));
    let mut model = CostModel::new(options.model.clone());
    let samples: Vec<Sample> = history
        .iter()
        .filter_map(|t| Some(Sample { features: space.features(&t.point)?, seconds: t.seconds }))
        .collect();
    if options.strategy == Strategy::Evolutionary {
        fit(&mut model, &options.prior, &samples)?;
    }
    let measured: HashSet<AutoPoint> = history.iter().map(|t| t.point.clone()).collect();
    let mut starts: Vec<AutoPoint> = Vec::new();
    for p in &options.starts {
        if !measured.contains(p) && !starts.contains(p) && space.features(p).is_some() {
            starts.push(p.clone());
        }
    }
    next_batch(space, &model, (&measured, history), &mut starts, count, options, &mut rng)
}

/// The successful trials' points, fastest first.
fn fastest(trials: &[Trial]) -> Vec<AutoPoint> {
    let mut ok: Vec<&Trial> = trials.iter().filter(|t| t.seconds.is_some()).collect();
    ok.sort_by(|a, b| a.seconds.unwrap_or(f64::INFINITY).total_cmp(&b.seconds.unwrap_or(f64::INFINITY)));
    ok.into_iter().map(|t| t.point.clone()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tune::auto::space::SketchDomain;

    /// A synthetic space: sketch `bowl` has four decisions of twelve choices whose time is a
    /// bowl around (7, 3, 9, 5) with ±3% noise; sketch `flat` has two decisions and is four
    /// times slower than the bowl's bottom everywhere. A bowl point with (x0 + 2·x1) % 7 == 3
    /// is rejected. The features expose the decisions.
    struct Synthetic;

    const CENTER: [i64; 4] = [7, 3, 9, 5];

    impl Synthetic {
        /// The squared distance from the bottom (`None`: not a bowl point).
        fn distance(p: &AutoPoint) -> Option<i64> {
            (p.sketch == "bowl").then(|| p.values.iter().zip(CENTER).map(|(x, c)| (x - c) * (x - c)).sum())
        }

        fn time(p: &AutoPoint) -> f64 {
            // Deterministic noise from the point's values.
            let h = p.values.iter().fold(p.sketch.len() as u64, |h, &v| {
                h.wrapping_mul(6364136223846793005).wrapping_add(v as u64 + 1442695040888963407)
            });
            let noise = 1.0 + 0.03 * (((h >> 33) % 2001) as f64 / 1000.0 - 1.0);
            let base = match Synthetic::distance(p) {
                Some(d) => (0.08 * d as f64).exp(),
                None => 4.0,
            };
            1e-3 * base * noise
        }
    }

    impl SearchSpace for Synthetic {
        fn sketches(&self) -> Vec<SketchDomain> {
            vec![("bowl".into(), vec![(0..12).collect(); 4]), ("flat".into(), vec![(0..6).collect(); 2])]
        }

        fn features(&self, p: &AutoPoint) -> Option<Vec<f32>> {
            let rejected = p.sketch == "bowl" && (p.values[0] + 2 * p.values[1]) % 7 == 3;
            if rejected {
                return None;
            }
            let mut f = vec![(p.sketch == "bowl") as u8 as f32];
            f.extend((0..4).map(|i| p.values.get(i).copied().unwrap_or(-1) as f32));
            Some(f)
        }
    }

    fn measure_synthetic() -> impl FnMut(&[AutoPoint]) -> Vec<Option<f64>> {
        |points: &[AutoPoint]| points.iter().map(|p| Some(Synthetic::time(p))).collect()
    }

    /// Trials until a point within squared distance 2 of the bottom (33 of the ~21,000 points)
    /// is measured, at most `cap`.
    fn trials_to_region(strategy: Strategy, seed: u64, cap: usize) -> usize {
        let options = SearchOptions { seed, ..SearchOptions::new(cap, strategy) };
        let log = search(&Synthetic, &mut measure_synthetic(), &options).unwrap();
        log.trials.iter().position(|t| Synthetic::distance(&t.point).is_some_and(|d| d <= 2)).map_or(cap, |i| i + 1)
    }

    #[test]
    fn the_learned_search_finds_the_optimum_region_in_fewer_than_half_the_random_trials() {
        let seeds = [1, 2, 3, 4];
        let cap = 1500;
        let mean = |strategy| seeds.iter().map(|&s| trials_to_region(strategy, s, cap)).sum::<usize>() as f64 / 4.0;
        let (evolutionary, random) = (mean(Strategy::Evolutionary), mean(Strategy::Random));
        assert!(evolutionary * 2.0 <= random, "mean trials: evolutionary {evolutionary}, random {random}");
    }

    #[test]
    fn a_prior_of_a_sibling_workload_finds_the_optimum_region_sooner() {
        // Another workload of the same shape, ten times slower: its measurements (other points
        // than this search draws) train the model before this workload's first batch.
        let sibling = SearchOptions { seed: 99, ..SearchOptions::new(300, Strategy::Random) };
        let log = search(&Synthetic, &mut measure_synthetic(), &sibling).unwrap();
        let prior: Vec<Sample> = log
            .trials
            .iter()
            .map(|t| Sample { features: Synthetic.features(&t.point).unwrap(), seconds: t.seconds.map(|s| 10.0 * s) })
            .collect();
        let cap = 1500;
        let trials = |seed, prior: &Vec<Sample>| {
            let options = SearchOptions {
                seed,
                prior: if prior.is_empty() { vec![] } else { vec![prior.clone()] },
                ..SearchOptions::new(cap, Strategy::Evolutionary)
            };
            let log = search(&Synthetic, &mut measure_synthetic(), &options).unwrap();
            let region = |t: &Trial| Synthetic::distance(&t.point).is_some_and(|d| d <= 2);
            log.trials.iter().position(region).map_or(cap, |i| i + 1)
        };
        let seeds = [1, 2, 3, 4];
        let mean = |prior: &Vec<Sample>| seeds.iter().map(|&s| trials(s, prior)).sum::<usize>() as f64 / 4.0;
        let (with, without) = (mean(&prior), mean(&vec![]));
        assert!(with * 2.0 <= without, "mean trials to the region: with the prior {with}, without {without}");
    }

    #[test]
    fn the_model_ranks_held_out_points_well() {
        let points = |seed| {
            let options = SearchOptions { seed, ..SearchOptions::new(200, Strategy::Random) };
            search(&Synthetic, &mut measure_synthetic(), &options).unwrap().trials
        };
        let (train, held) = (points(10), points(11));
        let sample = |t: &Trial| Sample { features: Synthetic.features(&t.point).unwrap(), seconds: t.seconds };
        let mut model = CostModel::new(ModelOptions::default());
        model.fit(&[&train.iter().map(sample).collect::<Vec<_>>()]).unwrap();
        let train_points: HashSet<&AutoPoint> = train.iter().map(|t| &t.point).collect();
        let held: Vec<&Trial> = held.iter().filter(|t| !train_points.contains(&t.point)).collect();
        assert!(held.len() > 150);
        let features: Vec<Vec<f32>> = held.iter().map(|t| Synthetic.features(&t.point).unwrap()).collect();
        let predicted: Vec<f64> = model.predict(&features).unwrap().into_iter().map(f64::from).collect();
        let speed: Vec<f64> = held.iter().map(|t| -t.seconds.unwrap()).collect();
        let rho = spearman(&predicted, &speed).unwrap();
        assert!(rho > 0.7, "held-out rank correlation {rho}");
    }

    #[test]
    fn proposals_are_new_accepted_and_deterministic() {
        let start = AutoPoint { sketch: "flat".into(), values: vec![0, 0] };
        let options =
            SearchOptions { seed: 5, starts: vec![start.clone()], ..SearchOptions::new(200, Strategy::Evolutionary) };
        let log = search(&Synthetic, &mut measure_synthetic(), &options).unwrap();
        assert_eq!(log.trials.len(), 200);
        assert_eq!(log.trials[0].point, start);
        let distinct: HashSet<&AutoPoint> = log.trials.iter().map(|t| &t.point).collect();
        assert_eq!(distinct.len(), 200, "a point was measured twice");
        assert!(log.trials.iter().all(|t| Synthetic.features(&t.point).is_some()), "a rejected point was proposed");
        // One correlation per batch after the first, and the model ranks batches better than
        // chance on average.
        assert_eq!(log.held_out_spearman.len(), 200 / 16);
        let rhos: Vec<f64> = log.held_out_spearman.iter().flatten().copied().collect();
        assert!(rhos.iter().sum::<f64>() / rhos.len() as f64 > 0.2, "{rhos:?}");
        assert_eq!(search(&Synthetic, &mut measure_synthetic(), &options).unwrap(), log, "same seed, same search");
        let other = SearchOptions { seed: 6, ..options.clone() };
        assert_ne!(search(&Synthetic, &mut measure_synthetic(), &other).unwrap(), log);
        // Resumed from its first half, the search measures none of those points again.
        let half = &log.trials[..100];
        let resumed =
            resume(&Synthetic, half, &mut measure_synthetic(), &SearchOptions::new(50, Strategy::Evolutionary))
                .unwrap();
        assert_eq!((resumed.resumed, resumed.trials.len()), (100, 150));
        let distinct: HashSet<&AutoPoint> = resumed.trials.iter().map(|t| &t.point).collect();
        assert_eq!(distinct.len(), 150);
    }

    #[test]
    fn failures_are_logged_and_a_small_space_runs_out() {
        // Only `flat` (36 points) and failures for odd first values.
        struct Flat;
        impl SearchSpace for Flat {
            fn sketches(&self) -> Vec<SketchDomain> {
                vec![("flat".into(), vec![(0..6).collect(); 2])]
            }
            fn features(&self, p: &AutoPoint) -> Option<Vec<f32>> {
                Some(p.values.iter().map(|&v| v as f32).collect())
            }
        }
        let mut measure = |points: &[AutoPoint]| -> Vec<Option<f64>> {
            // One entry short: the last point of each batch counts as failed.
            points
                .iter()
                .take(points.len() - 1)
                .map(|p| (p.values[0] % 2 == 0).then(|| 1.0 + p.values[1] as f64))
                .collect()
        };
        let log = search(&Flat, &mut measure, &SearchOptions::new(100, Strategy::Evolutionary)).unwrap();
        assert_eq!(log.trials.len(), 36);
        assert!(log.trials.iter().any(|t| t.seconds.is_none()));
        assert_eq!(log.best().and_then(|t| t.seconds), Some(1.0));
        assert_eq!(log.trials_to_reach(1.0), log.curve().iter().position(|b| *b == Some(1.0)).map(|i| i + 1));
    }
}
