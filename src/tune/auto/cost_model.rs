//! The learned cost model of the search: gradient-boosted regression trees (`gbdt`) from a
//! point's features (`ir::analysis::features`) to a score, trained online on the measured
//! records of a workload.
//!
//! The score of a measurement is relative to its workload, so workloads of any size train one
//! model: by default (`Target::Rank`) its speed's rank among the workload's successes, from 0
//! (slowest) to 1 (fastest), a failure below both; or (`Target::LogSpeed`) `ln(best / seconds)`,
//! 0 for the fastest point measured, a failure one below the slowest success. Ranks keep a
//! prior of operators whose generic points run thousands of times slower than their tensorized
//! ones from spending the trees on those gaps rather than on the order near the top.
//! Only the order of predictions matters to the search; `spearman` measures how well that
//! order matches measured times on records the model was not trained on.

use gbdt::config::Config;
use gbdt::decision_tree::{Data, DataVec};
use gbdt::gradient_boost::GBDT;
use thiserror::Error;

/// One measured point: its features and its time in seconds (`None`: the measurement failed).
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    pub features: Vec<f32>,
    pub seconds: Option<f64>,
}

/// What the trees learn of a workload's measurements.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    /// `ln(best / seconds)`: 0 for the fastest point, negative for slower ones; a failure one
    /// below the slowest success.
    LogSpeed,
    /// The speed's rank among the workload's successes, from 0 (slowest) to 1 (fastest); a
    /// failure -0.5. Insensitive to how far apart the times are, so a few very slow points do
    /// not dominate the squared error.
    Rank,
}

/// How the trees are grown.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelOptions {
    pub target: Target,
    pub trees: usize,
    pub max_depth: u32,
    /// The learning rate: each tree's share of the prediction.
    pub shrinkage: f32,
    /// The fewest samples in a leaf.
    pub min_leaf: usize,
}

impl Default for ModelOptions {
    fn default() -> ModelOptions {
        ModelOptions { target: Target::Rank, trees: 60, max_depth: 5, shrinkage: 0.15, min_leaf: 2 }
    }
}

#[derive(Debug, Error, PartialEq)]
pub enum ModelError {
    #[error("sample {index} has {found} features, expected {expected} (as the first sample)")]
    FeatureLength { index: usize, expected: usize, found: usize },
    #[error("a point to predict has {found} features, the model was trained on {expected}")]
    PredictLength { expected: usize, found: usize },
}

/// A model trained on the samples given to `fit` (untrained until a fit saw two successful
/// measurements of one workload: before that, every prediction is 0).
pub struct CostModel {
    options: ModelOptions,
    /// The trees and the feature count they were trained on.
    trained: Option<(GBDT, usize)>,
}

impl CostModel {
    pub fn new(options: ModelOptions) -> CostModel {
        CostModel { options, trained: None }
    }

    pub fn is_trained(&self) -> bool {
        self.trained.is_some()
    }

    /// Trains a new model on `workloads`, each the samples of one workload (scores are
    /// normalized within a workload, see the module doc), replacing the previous one. Training
    /// is deterministic.
    pub fn fit(&mut self, workloads: &[&[Sample]]) -> Result<(), ModelError> {
        let expected = workloads.iter().flat_map(|w| w.first()).map(|s| s.features.len()).next();
        let Some(expected) = expected else { return Ok(()) };
        let mut data: DataVec = Vec::new();
        for samples in workloads {
            for (index, sample) in samples.iter().enumerate() {
                if sample.features.len() != expected {
                    return Err(ModelError::FeatureLength { index, expected, found: sample.features.len() });
                }
            }
            if samples.iter().filter(|s| s.seconds.is_some_and(is_time)).count() < 2 {
                continue;
            }
            let targets = match self.options.target {
                Target::LogSpeed => scores(samples),
                Target::Rank => rank_scores(samples),
            };
            for (sample, score) in samples.iter().zip(targets) {
                data.push(Data::new_training_data(sample.features.clone(), 1.0, score, None));
            }
        }
        if data.is_empty() {
            return Ok(());
        }
        let mut config = Config::new();
        config.set_feature_size(expected);
        config.set_max_depth(self.options.max_depth);
        config.set_iterations(self.options.trees);
        config.set_shrinkage(self.options.shrinkage);
        config.set_min_leaf_size(self.options.min_leaf);
        config.set_loss("SquaredError");
        // Sampling ratios of 1 keep training deterministic (`gbdt` samples with `thread_rng`).
        config.set_data_sample_ratio(1.0);
        config.set_feature_sample_ratio(1.0);
        let mut gbdt = GBDT::new(&config);
        gbdt.fit(&mut data);
        self.trained = Some((gbdt, expected));
        Ok(())
    }

    /// The predicted score of each point (higher: predicted faster); all 0 when untrained.
    pub fn predict(&self, features: &[Vec<f32>]) -> Result<Vec<f32>, ModelError> {
        let Some((gbdt, expected)) = &self.trained else { return Ok(vec![0.0; features.len()]) };
        if let Some(f) = features.iter().find(|f| f.len() != *expected) {
            return Err(ModelError::PredictLength { expected: *expected, found: f.len() });
        }
        if features.is_empty() {
            return Ok(vec![]);
        }
        let data: DataVec = features.iter().map(|f| Data::new_test_data(f.clone(), None)).collect();
        Ok(gbdt.predict(&data))
    }
}

/// A usable time: positive and finite.
fn is_time(seconds: f64) -> bool {
    seconds.is_finite() && seconds > 0.0
}

/// The training score of each sample of one workload (see the module doc).
pub fn scores(samples: &[Sample]) -> Vec<f32> {
    let times = || samples.iter().filter_map(|s| s.seconds.filter(|&t| is_time(t)));
    let Some(best) = times().min_by(f64::total_cmp) else { return vec![0.0; samples.len()] };
    let score = |t: f64| (best / t).ln() as f32;
    let failed = times().map(score).min_by(f32::total_cmp).unwrap_or(0.0) - 1.0;
    samples.iter().map(|s| s.seconds.filter(|&t| is_time(t)).map_or(failed, score)).collect()
}

/// The `Target::Rank` score of each sample of one workload: its speed's rank among the
/// successes scaled to 0 (slowest) ..= 1 (fastest), ties sharing their mean rank; -0.5 for a
/// failure.
pub fn rank_scores(samples: &[Sample]) -> Vec<f32> {
    let ok: Vec<(usize, f64)> =
        samples.iter().enumerate().filter_map(|(i, s)| s.seconds.filter(|&t| is_time(t)).map(|t| (i, -t))).collect();
    let mut out = vec![-0.5; samples.len()];
    let speeds: Vec<f64> = ok.iter().map(|&(_, v)| v).collect();
    let ranks = ranks(&speeds);
    let top = (ok.len().max(2) - 1) as f64;
    for (&(i, _), r) in ok.iter().zip(ranks) {
        out[i] = (r / top) as f32;
    }
    out
}

/// Spearman's rank correlation of `x` and `y` (ties get their average rank): 1 when they are
/// ordered alike, -1 when reversed. `None` for fewer than two pairs, lengths that differ, or a
/// side whose values are all equal.
pub fn spearman(x: &[f64], y: &[f64]) -> Option<f64> {
    if x.len() != y.len() || x.len() < 2 {
        return None;
    }
    let (rx, ry) = (ranks(x), ranks(y));
    let mean = (x.len() as f64 - 1.0) / 2.0;
    let (mut cov, mut vx, mut vy) = (0.0, 0.0, 0.0);
    for (a, b) in rx.iter().zip(&ry) {
        cov += (a - mean) * (b - mean);
        vx += (a - mean) * (a - mean);
        vy += (b - mean) * (b - mean);
    }
    if vx == 0.0 || vy == 0.0 {
        return None;
    }
    Some(cov / (vx * vy).sqrt())
}

/// The rank of each value (0-based; tied values share the mean of their ranks).
fn ranks(values: &[f64]) -> Vec<f64> {
    let mut order: Vec<usize> = (0..values.len()).collect();
    order.sort_by(|&a, &b| values[a].total_cmp(&values[b]));
    let mut ranks = vec![0.0; values.len()];
    let mut start = 0;
    while start < order.len() {
        let mut end = start + 1;
        while end < order.len() && values[order[end]].total_cmp(&values[order[start]]).is_eq() {
            end += 1;
        }
        let rank = (start + end - 1) as f64 / 2.0;
        order[start..end].iter().for_each(|&i| ranks[i] = rank);
        start = end;
    }
    ranks
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spearman_of_known_data() {
        let x = [1.0, 2.0, 3.0, 4.0, 5.0];
        assert_eq!(spearman(&x, &[10.0, 20.0, 30.0, 40.0, 50.0]), Some(1.0));
        assert_eq!(spearman(&x, &[5.0, 4.0, 3.0, 2.0, 1.0]), Some(-1.0));
        // Monotone but not linear: still 1.
        assert_eq!(spearman(&x, &[1.0, 8.0, 27.0, 64.0, 1000.0]), Some(1.0));
        // d = (0, 0, 1, -1, 0): 1 - 6·2 / (5·24) = 0.9.
        let rho = spearman(&x, &[1.0, 2.0, 4.0, 3.0, 5.0]).unwrap();
        assert!((rho - 0.9).abs() < 1e-12, "{rho}");
        // Ties take their mean rank: ranks (0.5, 0.5, 2) against (0, 1, 2).
        let rho = spearman(&[1.0, 1.0, 2.0], &[1.0, 2.0, 3.0]).unwrap();
        assert!((rho - 0.75f64.sqrt()).abs() < 1e-12, "{rho}");
        assert_eq!(spearman(&[1.0], &[1.0]), None);
        assert_eq!(spearman(&[1.0, 2.0], &[3.0, 3.0]), None);
        assert_eq!(spearman(&[1.0, 2.0], &[3.0]), None);
    }

    #[test]
    fn scores_are_relative_to_the_best_and_failures_score_lowest() {
        let sample = |seconds| Sample { features: vec![0.0], seconds };
        let s = scores(&[sample(Some(2.0)), sample(Some(1.0)), sample(None), sample(Some(4.0))]);
        assert_eq!(s[1], 0.0);
        assert!((s[0] - 0.5f32.ln()).abs() < 1e-6);
        assert!((s[3] - 0.25f32.ln()).abs() < 1e-6);
        assert!((s[2] - (0.25f32.ln() - 1.0)).abs() < 1e-6);
        // Ranks: 4 s slowest (0), 2 s in the middle (0.5), 1 s fastest (1), the failure -0.5.
        assert_eq!(
            rank_scores(&[sample(Some(2.0)), sample(Some(1.0)), sample(None), sample(Some(4.0))]),
            vec![0.5, 1.0, -0.5, 0.0]
        );
    }

    #[test]
    fn the_default_rank_target_orders_the_fast_points_past_very_slow_ones() {
        // As an operator's space: points with `a` < 3 (generic-like) run a thousand times
        // slower; among the others the time is a shallow bowl in `b` around 5.
        let time = |a: f32, b: f32| {
            let bowl = 1.0 + 0.02 * ((b - 5.0) as f64).powi(2) + 0.001 * a as f64;
            if a < 3.0 { 1e3 * bowl } else { bowl }
        };
        let point = |i: usize| [(i * 7 % 10) as f32, (i * 3 % 11) as f32 + (i % 5) as f32 * 0.13];
        let train: Vec<Sample> =
            (0..150).map(point).map(|f| Sample { features: f.to_vec(), seconds: Some(time(f[0], f[1])) }).collect();
        assert_eq!(ModelOptions::default().target, Target::Rank);
        let mut model = CostModel::new(ModelOptions::default());
        model.fit(&[&train]).unwrap();
        // Held out: fast points only, whose order is what the search needs.
        let held: Vec<[f32; 2]> = (0..60).map(|i| [3.5 + (i % 6) as f32, (i / 6) as f32 * 1.05 + 0.2]).collect();
        let speed: Vec<f64> = held.iter().map(|f| -time(f[0], f[1])).collect();
        let predicted = model.predict(&held.iter().map(|f| f.to_vec()).collect::<Vec<_>>()).unwrap();
        let rho = spearman(&predicted.iter().map(|&p| p as f64).collect::<Vec<_>>(), &speed).unwrap();
        assert!(rho > 0.8, "held-out rank correlation among the fast points: {rho}");
    }

    #[test]
    fn the_model_orders_a_known_function_and_rejects_bad_lengths() {
        // Time grows with the distance of (a, b) from (3, 5); a third feature is noise-free
        // but irrelevant.
        let time = |a: f32, b: f32| 1e-3 * (0.1 * ((a - 3.0).powi(2) + (b - 5.0).powi(2)) as f64).exp();
        let point = |i: usize| [(i * 7 % 11) as f32, (i * 5 % 9) as f32, (i % 4) as f32];
        let train: Vec<Sample> =
            (0..120).map(point).map(|f| Sample { features: f.to_vec(), seconds: Some(time(f[0], f[1])) }).collect();
        let mut model = CostModel::new(ModelOptions::default());
        assert_eq!(model.predict(&[vec![0.0; 3]]).unwrap(), vec![0.0]);
        model.fit(&[&train]).unwrap();
        assert!(model.is_trained());
        let held: Vec<[f32; 3]> = (0..50).map(|i| [(i % 10) as f32 + 0.5, (i / 5) as f32 * 0.9, 1.0]).collect();
        let predicted = model.predict(&held.iter().map(|f| f.to_vec()).collect::<Vec<_>>()).unwrap();
        let measured: Vec<f64> = held.iter().map(|f| -time(f[0], f[1])).collect();
        let rho = spearman(&predicted.iter().map(|&p| p as f64).collect::<Vec<_>>(), &measured).unwrap();
        assert!(rho > 0.8, "rank correlation {rho}");
        assert_eq!(model.predict(&[vec![0.0; 2]]), Err(ModelError::PredictLength { expected: 3, found: 2 }));
        let bad =
            [Sample { features: vec![0.0; 3], seconds: Some(1.0) }, Sample { features: vec![0.0], seconds: None }];
        assert_eq!(model.fit(&[&bad]), Err(ModelError::FeatureLength { index: 1, expected: 3, found: 1 }));
    }
}
