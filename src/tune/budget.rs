//! How a model's search budget is spread over its tasks: by each task's share of the model's
//! time — measured (`latency::task_times`: the model run with the defaults, profiled per
//! partition), or estimated as its operations times its uses where nothing is measured (the
//! template's kernels run within a small factor of one another's speed; an auto-scheduled
//! depthwise convolution does not, which is why the tuner measures).

use std::time::Duration;

use super::tasks::Task;

/// Each task's share of the model's estimated time (`ops × uses`), summing to 1.
pub fn shares(tasks: &[Task]) -> Vec<f64> {
    shares_of(&tasks.iter().map(|t| t.ops() as f64 * t.uses as f64).collect::<Vec<_>>())
}

/// Each of `weights` (times, or estimates of them; negative or NaN counts as 0) as a share of
/// their sum, summing to 1 (equal shares when the sum is 0).
pub fn shares_of(weights: &[f64]) -> Vec<f64> {
    let weight = |w: &f64| if *w > 0.0 { *w } else { 0.0 };
    let total: f64 = weights.iter().map(weight).sum();
    weights.iter().map(|w| if total > 0.0 { weight(w) / total } else { 1.0 / weights.len() as f64 }).collect()
}

/// `total` trials split by `shares` (largest remainders), each task at least one (its default
/// point), so the sum exceeds `total` only when `total` is smaller than the task count.
pub fn split_trials(total: usize, shares: &[f64]) -> Vec<usize> {
    let exact: Vec<f64> = shares.iter().map(|s| s * total as f64).collect();
    let mut trials: Vec<usize> = exact.iter().map(|e| (e.floor() as usize).max(1)).collect();
    let mut order: Vec<usize> = (0..shares.len()).collect();
    order.sort_by(|&a, &b| (exact[b] - exact[b].floor()).total_cmp(&(exact[a] - exact[a].floor())));
    for &i in order.iter().cycle().take(shares.len() * 2) {
        if trials.iter().sum::<usize>() >= total {
            break;
        }
        trials[i] += 1;
    }
    trials
}

/// `total` time split by `shares`.
pub fn split_time(total: Duration, shares: &[f64]) -> Vec<Duration> {
    shares.iter().map(|s| total.mul_f64(*s)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trials_follow_the_shares_and_every_task_keeps_its_default_point() {
        assert_eq!(split_trials(100, &[0.5, 0.3, 0.2]), [50, 30, 20]);
        assert_eq!(split_trials(10, &[0.66, 0.34]), [7, 3]);
        // A tiny share still measures the default point.
        assert_eq!(split_trials(10, &[0.99, 0.01]), [9, 1]);
        assert_eq!(split_trials(2, &[0.4, 0.3, 0.3]), [1, 1, 1]);
        // Measured times as shares: a negative or NaN time counts as none; all none, equal.
        assert_eq!(shares_of(&[3.0, 1.0, -2.0, f64::NAN]), [0.75, 0.25, 0.0, 0.0]);
        assert_eq!(shares_of(&[0.0, 0.0]), [0.5, 0.5]);
        assert_eq!(
            split_time(Duration::from_secs(10), &[0.25, 0.75]),
            [Duration::from_millis(2500), Duration::from_millis(7500)]
        );
    }
}
