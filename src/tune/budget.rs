//! How a model's search budget is spread over its tasks: by each task's share of the model's
//! time, estimated as its operations times its uses (the kernels run within a small factor of
//! one another's speed, so operations are a fair proxy before anything is measured).

use std::time::Duration;

use super::tasks::Task;

/// Each task's share of the model's estimated time (`ops × uses`), summing to 1.
pub fn shares(tasks: &[Task]) -> Vec<f64> {
    let weight = |t: &Task| t.ops() as f64 * t.uses as f64;
    let total: f64 = tasks.iter().map(weight).sum();
    tasks.iter().map(|t| if total > 0.0 { weight(t) / total } else { 1.0 / tasks.len() as f64 }).collect()
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
        assert_eq!(
            split_time(Duration::from_secs(10), &[0.25, 0.75]),
            [Duration::from_millis(2500), Duration::from_millis(7500)]
        );
    }
}
