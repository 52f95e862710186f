//! `tune_model`: every task of a model (`tasks::extract`) searched in turn with the layer
//! tuner's search, validation and records, and every auto-scheduled convolution
//! (`tasks::AutoTask`) with the auto-scheduler's (`op_tune::tune_auto_space`), the budget spread
//! over both by `budget`. What `tensorlift tune MODEL.onnx` runs.

use std::path::Path;
use std::time::Duration;

use schedules::auto::AutoPoint;
use schedules::resnet18::WeightBits;

use super::apply::RecordKnobs;
use super::auto;
use super::budget::{shares_of, split_time, split_trials};
use super::op_tune::{self, AutoSearch, OpTuneError, OpTuneOptions, history, tune_auto_space};
use super::search::Strategy;
use super::tasks::{AutoTask, ModelTasks};
use super::worker::{Candidate, Worker};
use super::{LayerResult, TuneOptions, tune_space};
use crate::layer::qconv_auto_space;
use crate::record::{Database, Host, Phase, Record, WorkloadRef, pretuned};

/// Each task's share of `model`'s time (`ModelTasks::all`'s order) estimated as operations ×
/// uses (`budget`), for when the model's time per task is not measured
/// (`latency::task_times`).
pub fn estimated_shares(model: &ModelTasks) -> Vec<f64> {
    shares_of(&model.all().iter().map(|&(_, ops, uses)| ops as f64 * uses as f64).collect::<Vec<_>>())
}

/// The budget of each task (`ModelTasks::all`'s order: the template's tasks, then the
/// auto-scheduled ones): `options.trials` and `options.budget` are the model's totals, split by
/// `shares` (of the model's time, `budget::shares_of`).
pub fn task_options(shares: &[f64], options: &TuneOptions) -> Vec<TuneOptions> {
    let trials = split_trials(options.trials, shares);
    let budgets: Vec<Option<Duration>> = match options.budget {
        Some(b) => split_time(b, shares).into_iter().map(Some).collect(),
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
/// `worker`, each with its options of `per_task` (`task_options`; `options` gives the level and
/// threads), appending every record to `db` when given; `progress` sees each record with its
/// task's workload. The results are in `ModelTasks::all`'s order. A task's weights range is
/// its own (`Task::weights`), not `options.weights`. The point `tensorlift run` would apply
/// without this run's records (of `db`, else pre-tuned: `apply::RecordKnobs`) is measured right
/// after the default, so the result is never slower than either, up to noise.
pub fn tune_model(
    worker: &mut Worker,
    model: &ModelTasks,
    (options, per_task): (&TuneOptions, &[TuneOptions]),
    db: Option<&Path>,
    mut progress: impl FnMut(&WorkloadRef, &Record),
) -> Result<Vec<LayerResult>, OpTuneError> {
    let path = std::fs::canonicalize(&model.path).unwrap_or_else(|_| model.path.clone());
    let known = RecordKnobs {
        user: match db {
            Some(db) => Database::load(db).map_err(Box::new)?.records,
            None => Vec::new(),
        },
        pretuned: pretuned().map_err(Box::new)?.records,
        host: Host::this(options.level),
        max_threads: options.max_threads,
    };
    let mut results = Vec::with_capacity(model.tasks.len() + model.auto_tasks.len());
    for (task, options) in model.tasks.iter().zip(per_task) {
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
            tune_space(worker, (space, task.workload.clone()), (template, &starts), options, db, |r| {
                progress(&task.workload, r)
            })
            .map_err(Box::new)?;
        results.push(LayerResult {
            name: task.workload.summary.clone(),
            workload: task.workload.clone(),
            records,
            baseline: 0,
            elapsed,
        });
    }
    for (task, options) in model.auto_tasks.iter().zip(per_task.iter().skip(model.tasks.len())) {
        let result = tune_auto_task(worker, (&path, task), (&known, &options_for_auto(options)), db, |r| {
            progress(&task.workload, r)
        })?;
        results.push(result);
    }
    Ok(results)
}

/// The auto-scheduler's search options for a task tuned with `options`.
fn options_for_auto(options: &TuneOptions) -> OpTuneOptions {
    OpTuneOptions {
        level: options.level,
        max_threads: options.max_threads,
        // The task's trials include its baseline, as a template task's include its default.
        trials: options.trials.saturating_sub(1),
        budget: options.budget,
        repeat: options.repeat,
        search_budget: options.search_budget,
        batch: AUTO_BATCH,
        seed: options.seed,
        strategy: match options.strategy {
            Strategy::Evolutionary => auto::Strategy::Evolutionary,
            Strategy::Random => auto::Strategy::Random,
        },
        // A model's convolutions start from the database's records only: the prior's
        // convolutions are the catalog's, not the requantized ones of a model.
        shipped_prior: false,
    }
}

/// Points proposed per round of an auto-scheduled task's search (`tune op`'s default).
pub const AUTO_BATCH: usize = 8;

/// Tunes the auto-scheduled convolution `task` of the model at `path`: its space at the level
/// and threads of `options`, the rules' point (what `tensorlift run` applies without a record)
/// as the baseline, the point `known` would apply next, the history of `known.user` for its
/// workload at this level, then `tune_auto_space`.
fn tune_auto_task(
    worker: &mut Worker,
    (path, task): (&Path, &AutoTask),
    (known, options): (&RecordKnobs, &OpTuneOptions),
    db: Option<&Path>,
    progress: impl FnMut(&Record),
) -> Result<LayerResult, OpTuneError> {
    let label = task.workload.summary.clone();
    let space = qconv_auto_space(&task.spec, options.level, options.max_threads)
        .map_err(|e| OpTuneError::Definition { op: label.clone(), source: Box::new(e) })?;
    let history = history(&op_tune::known(&known.user, &task.workload.key, options.level, options.max_threads));
    let search = AutoSearch {
        label,
        workload: task.workload.clone(),
        space: &space.space,
        default: space.rules.clone(),
        known: known.auto_point(&task.spec).map(|(p, _)| p).into_iter().collect(),
        history,
        prior: op_tune::prior(&known.user, &task.workload.key, &known.host, options.max_threads),
    };
    let candidate = |point: AutoPoint, phase: Phase| Candidate {
        layer: String::new(),
        model: Some(path.display().to_string()),
        task: Some(task.workload.key.clone()),
        isa: options.level.name().to_string(),
        weights: WeightBits::Eight,
        max_threads: options.max_threads,
        op: None,
        point: None,
        auto: Some(point),
        repeat: options.repeat,
        budget_ms: options.search_budget.filter(|_| phase == Phase::Search).map(|b| b.as_secs_f64() * 1e3),
        phase,
    };
    Ok(tune_auto_space(worker, search, &candidate, options, db, progress)?.result)
}
