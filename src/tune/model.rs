//! `tune_model`: every task of a model (`tasks::extract`) searched in turn with the layer
//! tuner's search, validation and records, the budget spread by `budget`. What `tensorlift
//! tune MODEL.onnx` runs.

use std::path::Path;
use std::time::Duration;

use super::apply::RecordKnobs;
use super::budget::{shares, split_time, split_trials};
use super::tasks::{ModelTasks, Task};
use super::worker::{Candidate, Worker};
use super::{LayerResult, TuneOptions, tune_space};
use crate::record::{Database, DbError, Host, Phase, Record, pretuned};

/// The budget of each task of `model`: `options.trials` and `options.budget` are the model's
/// totals, split by the tasks' shares of its time.
pub fn task_options(model: &ModelTasks, options: &TuneOptions) -> Vec<TuneOptions> {
    let shares = shares(&model.tasks);
    let trials = split_trials(options.trials, &shares);
    let budgets: Vec<Option<Duration>> = match options.budget {
        Some(b) => split_time(b, &shares).into_iter().map(Some).collect(),
        None => vec![None; shares.len()],
    };
    trials
        .into_iter()
        .zip(budgets)
        .enumerate()
        .map(|(i, (trials, budget))| TuneOptions { trials, budget, seed: options.seed + i as u64, ..options.clone() })
        .collect()
}

/// Tunes every task of `model` (the file `model.path`, which the worker imports itself) with
/// `worker`, appending every record to `db` when given; `progress` sees each record with its
/// task. A task's weights range is its own (`Task::weights`), not `options.weights`. The point
/// `tensorlift run` would apply without this run's records (of `db`, else pre-tuned:
/// `apply::RecordKnobs`) is measured right after the default, so the result is never slower
/// than either, up to noise.
pub fn tune_model(
    worker: &mut Worker,
    model: &ModelTasks,
    options: &TuneOptions,
    db: Option<&Path>,
    mut progress: impl FnMut(&Task, &Record),
) -> Result<Vec<LayerResult>, DbError> {
    let path = std::fs::canonicalize(&model.path).unwrap_or_else(|_| model.path.clone());
    let known = RecordKnobs {
        user: match db {
            Some(db) => Database::load(db)?.records,
            None => Vec::new(),
        },
        pretuned: pretuned()?.records,
        host: Host::this(options.level),
        max_threads: options.max_threads,
    };
    let mut results = Vec::with_capacity(model.tasks.len());
    for (task, options) in model.tasks.iter().zip(task_options(model, options)) {
        let space = task.space(options.max_threads, options.level);
        let template = Candidate {
            layer: String::new(),
            model: Some(path.display().to_string()),
            task: Some(task.workload.key.clone()),
            isa: options.level.name().to_string(),
            weights: task.weights,
            max_threads: options.max_threads,
            op: None,
            point: Some(space.default_knobs()),
            auto: None,
            repeat: options.repeat,
            budget_ms: None,
            phase: Phase::Search,
        };
        let starts: Vec<_> = known.knobs(task.spec.workload()).map(|(k, _)| k).into_iter().collect();
        let (records, elapsed) =
            tune_space(worker, (space, task.workload.clone()), (template, &starts), &options, db, |r| {
                progress(task, r)
            })?;
        results.push(LayerResult {
            name: task.workload.summary.clone(),
            workload: task.workload.clone(),
            records,
            elapsed,
        });
    }
    Ok(results)
}
