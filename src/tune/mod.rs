//! Auto-scheduling of the resnet-18 int8 layers: a typed search space of the `x86_conv` knobs
//! per layer (`space`), search strategies (`search`), measurement — compile, verify bit for bit,
//! time against the peak probe (`task_bench`, on `engine::TableGraph`: a table layer as a
//! one-partition graph, compiled as the engine compiles a network's partition) — in a worker process
//! (`worker`, which keeps the end of its stderr: `tail`), each measurement a `record::Record`.
//!
//! `tune_layer` is what `tensorlift tune resnet18` runs per layer; `tensorlift resnet18` applies
//! the best record of a database (`record_for`, by `record::select`). A model's distinct
//! workloads (`tasks`) are searched in the same space on their own geometry and measured on
//! the model's own partitions (`task_bench`), the budget split over them (`budget`), by
//! `model::tune_model`; `latency` times the whole model with and without the records. A
//! model's auto-scheduled convolutions (`tasks::AutoTask`) are searched in the
//! auto-scheduler's space as `tune op` searches an operator (`op_tune::tune_auto_space`),
//! measured on their partitions (`auto_task_bench`).
//!
//! Any operator of the catalog (`schedules::catalog`) is tuned in the auto-scheduler's space
//! instead (`schedules::auto`): measured against the reference interpreter (`op_bench`), its
//! points proposed by `auto` (features, the learned cost model, evolution), the search loop,
//! validation and applying of records in `op_tune` (`tensorlift tune op`).

pub mod apply;
pub mod auto;
pub mod auto_task_bench;
pub mod budget;
pub mod latency;
pub mod measure;
pub mod model;
pub mod op_bench;
pub mod op_tune;
pub mod plot;
pub mod prior;
pub mod search;
pub mod space;
mod tail;
pub mod task_bench;
pub mod tasks;
pub mod worker;

use std::path::Path;
use std::time::{Duration, Instant};

use schedules::resnet18::{Layer, WeightBits};
use schedules::x86_conv::Conv2dInt8Knobs;
use search::{Searcher, Strategy};
use space::Space;
use worker::{Candidate, Worker};

use crate::isa::IsaLevel;
use crate::layer::{Definition, LayerData};
use crate::record::{DbError, Host, Phase, Phases, Record, WorkloadRef, append, select};

/// The workload of a table layer: the key of its definition (`layer::Definition`: the table's
/// quantization on `ops::conv2d_nchw_int8` or `ops::dense_int8`), independent of how it is
/// scheduled.
pub fn workload(layer: Layer) -> WorkloadRef {
    let definition =
        LayerData::quantization(layer).and_then(|quant| Ok(Definition::new(layer, &quant)?)).map_err(|e| e.to_string());
    match definition {
        Ok(def) => {
            let key = def.key();
            WorkloadRef { key: key.key, op: def.op.into(), summary: format!("{} {}", layer.name(), key.summary) }
        }
        Err(e) => WorkloadRef { key: String::new(), op: "invalid".into(), summary: e },
    }
}

/// Points of the search measured again after it, besides the default.
pub const FINALISTS: usize = 3;
/// Rounds of the validation.
pub const VALIDATION_ROUNDS: usize = 3;

/// How to tune one layer.
#[derive(Clone, Debug)]
pub struct TuneOptions {
    pub level: IsaLevel,
    pub weights: WeightBits,
    /// Most threads a point may use.
    pub max_threads: usize,
    /// Stop after this many measurements ...
    pub trials: usize,
    /// ... or this much time, whichever comes first.
    pub budget: Option<Duration>,
    /// Timed calls per measurement ...
    pub repeat: usize,
    /// ... in the search, as many as fit in this (validation always runs `repeat`).
    pub search_budget: Option<Duration>,
    pub strategy: Strategy,
    pub seed: u64,
}

/// What tuning one layer (or one task of a model) found.
#[derive(Clone, Debug)]
pub struct LayerResult {
    /// The layer's name (`R4`), or the task's summary.
    pub name: String,
    pub workload: WorkloadRef,
    /// Every record, in measurement order: the default point's first, then one per trial, then
    /// (after more than one trial) the default point's again.
    pub records: Vec<Record>,
    /// The leading records measured before the search that are not trials: 1 where the default
    /// point is the baseline rather than the first trial (the auto-scheduler's searches), else 0.
    pub baseline: usize,
    pub elapsed: Duration,
}

impl LayerResult {
    /// The probes of the layer's records (`Phases`).
    pub fn phases(&self) -> Phases {
        Phases::of(&self.records)
    }

    /// The default point's validation record of median corrected time (its first record when
    /// there was no validation).
    pub fn default_record(&self) -> Option<&Record> {
        let default = &self.records.first()?.schedule;
        let validated = self.validated(&self.phases());
        validated.into_iter().find(|r| r.schedule.same_point(default)).or_else(|| self.records.first())
    }

    /// The result: the point whose validation records have the best median corrected time
    /// (`Phases`; the fastest search record when there was no validation), as its record of
    /// median time.
    pub fn best(&self) -> Option<&Record> {
        let phases = self.phases();
        self.validated(&phases).into_iter().min_by(|a, b| phases.by_time(a, b))
    }

    /// Per point, the record of median corrected time, among validation records if any.
    fn validated(&self, phases: &Phases) -> Vec<&Record> {
        phases.representatives(self.records.iter().filter(|r| r.ok()))
    }

    /// Trials of the search (validation measurements and the baseline are not trials).
    pub fn trials(&self) -> usize {
        self.records.iter().filter(|r| !r.is_validation()).count().saturating_sub(self.baseline)
    }

    /// Corrected GOPS (`Phases`) of each trial in order (0 where it failed), the baseline left
    /// out: how many of a random search's draws reach a level, not only when the first did.
    pub fn trial_gops(&self) -> Vec<f64> {
        let phases = self.phases();
        let start = self.baseline.min(self.records.len());
        self.records[start..start + self.trials()]
            .iter()
            .map(|r| phases.gops(r).filter(|_| r.ok()).unwrap_or(0.0))
            .collect()
    }

    /// Best corrected GOPS after each trial (0 until one succeeded), the baseline left out:
    /// the tuning curve, the running maximum of `trial_gops`.
    pub fn curve(&self) -> Vec<f64> {
        let mut best: f64 = 0.0;
        self.trial_gops()
            .into_iter()
            .map(|g| {
                best = best.max(g);
                best
            })
            .collect()
    }
}

/// Tunes `layer` with `worker`, appending every record to `db` (when given) as it is measured;
/// `progress` sees each record. The default point is measured first, so the best record is
/// never slower than the default's (up to the noise of one measurement), and once more after
/// the search (not counted as a trial), so that it is compared warm.
pub fn tune_layer(
    worker: &mut Worker,
    layer: Layer,
    options: &TuneOptions,
    db: Option<&Path>,
    progress: impl FnMut(&Record),
) -> Result<LayerResult, DbError> {
    let space = Space::for_target(layer, options.max_threads, options.level, options.weights.range());
    let template = Candidate {
        layer: layer.name().to_string(),
        model: None,
        task: None,
        isa: options.level.name().to_string(),
        weights: options.weights,
        max_threads: options.max_threads,
        op: None,
        point: Some(space.default_knobs()),
        auto: None,
        repeat: options.repeat,
        budget_ms: None,
        phase: Phase::Search,
    };
    tune_space(worker, (space, workload(layer)), (template, &[]), options, db, progress).map(|(records, elapsed)| {
        LayerResult { name: layer.name().to_string(), workload: workload(layer), records, baseline: 0, elapsed }
    })
}

/// Searches `space` (of the workload `workload`) with `worker`, each point measured as
/// `template` with the point and phase set: the default point first, then `starts` (known good
/// points), then the search, then the validation rounds (`tune_layer`). Returns the records in
/// measurement order and the time.
pub fn tune_space(
    worker: &mut Worker,
    (space, workload): (Space, WorkloadRef),
    (template, starts): (Candidate, &[Conv2dInt8Knobs]),
    options: &TuneOptions,
    db: Option<&Path>,
    mut progress: impl FnMut(&Record),
) -> Result<(Vec<Record>, Duration), DbError> {
    let start = Instant::now();
    let mut searcher = Searcher::new(space, options.strategy, options.seed).starting_at(starts);
    let mut records = Vec::new();
    let candidate = |point: Conv2dInt8Knobs, phase: Phase| Candidate {
        point: Some(point),
        budget_ms: options.search_budget.filter(|_| phase == Phase::Search).map(|b| b.as_secs_f64() * 1e3),
        phase,
        ..template.clone()
    };
    worker.expect_setup();
    while records.len() < options.trials && options.budget.is_none_or(|b| start.elapsed() < b) {
        let Some(point) = searcher.propose() else { break };
        let record = worker.measure(&candidate(point, Phase::Search), workload.clone());
        if let Some(path) = db {
            append(path, std::slice::from_ref(&record))?;
        }
        progress(&record);
        records.push(record);
        let (record, phases) = (&records[records.len() - 1], Phases::of(&records));
        searcher.report(point, phases.seconds(record).filter(|_| record.ok()));
    }
    // Validation: the default, the starts and the fastest few points of the search, measured
    // again in rounds (one point after another, so slow phases of a shared machine hit them
    // alike); the result is the point with the best median of these.
    let phases = Phases::of(&records);
    let mut ranked: Vec<&Record> = records.iter().filter(|r| r.ok()).collect();
    ranked.sort_by(|a, b| phases.by_time(a, b));
    let searched =
        if records.len() < 2 { Vec::new() } else { ranked.iter().filter_map(|r| r.schedule.knobs).collect() };
    let finalists = finalists(space.default_knobs(), starts, &searched);
    for _ in 0..VALIDATION_ROUNDS {
        for &p in &finalists {
            let record = worker.measure(&candidate(p, Phase::Validation), workload.clone());
            if let Some(path) = db {
                append(path, std::slice::from_ref(&record))?;
            }
            records.push(record);
        }
    }
    Ok((records, start.elapsed()))
}

/// The points validated after a search: the default, every start (the knobs `run` would apply
/// without this search, which the winner must then beat head to head, not only by its one
/// search measurement), and the first `FINALISTS` other points of `ranked` (fastest first).
fn finalists(default: Conv2dInt8Knobs, starts: &[Conv2dInt8Knobs], ranked: &[Conv2dInt8Knobs]) -> Vec<Conv2dInt8Knobs> {
    let mut finalists = vec![default];
    for &p in starts {
        if !finalists.contains(&p) {
            finalists.push(p);
        }
    }
    let fixed = finalists.len();
    for &p in ranked {
        if finalists.len() >= fixed + FINALISTS {
            break;
        }
        if !finalists.contains(&p) {
            finalists.push(p);
        }
    }
    finalists
}

/// The record to apply to `layer` with weights in `weights`' range on `host`, from `records`:
/// those with knobs, of that weights range, on at most `max_threads` threads, chosen by
/// `record::select`.
pub fn record_for<'a>(
    records: &'a [Record],
    layer: Layer,
    weights: WeightBits,
    max_threads: usize,
    host: &Host,
) -> Option<&'a Record> {
    let fitting = records
        .iter()
        .filter(|r| r.target.threads <= max_threads && r.schedule.weights == weights && r.schedule.knobs.is_some());
    select(fitting, &table_key(layer), host)
}

/// Computes the key of every table layer (`table_key`) ahead of the lookups that need them:
/// on a core that would otherwise wait (`run` calls it while the model imports), so that
/// choosing the knobs of a network's layers, one after the other, finds them.
pub fn warm_table_keys() {
    for layer in schedules::resnet18::layers() {
        table_key(layer);
    }
}

/// `workload(layer).key`, computed once per table layer in a process (building the definition
/// for its key costs more than the lookup it serves, and every compile of a network asks for
/// the keys of its layers' table geometries).
fn table_key(layer: Layer) -> String {
    static KEYS: std::sync::Mutex<Vec<(Layer, String)>> = std::sync::Mutex::new(Vec::new());
    let known = |keys: &[(Layer, String)]| keys.iter().find(|(l, _)| *l == layer).map(|(_, k)| k.clone());
    if let Some(key) = known(&KEYS.lock().unwrap_or_else(std::sync::PoisonError::into_inner)) {
        return key;
    }
    let key = workload(layer).key;
    KEYS.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push((layer, key.clone()));
    key
}

#[cfg(test)]
mod tests {
    use schedules::x86_conv::{Accumulate, Packing, TileOrder};

    use super::*;

    #[test]
    fn a_remembered_table_key_is_the_one_its_definition_gives() {
        for layer in schedules::resnet18::layers() {
            let key = workload(layer).key;
            assert!(!key.is_empty(), "{layer:?}");
            assert_eq!(table_key(layer), key, "{layer:?} on first use");
            assert_eq!(table_key(layer), key, "{layer:?} remembered");
        }
        warm_table_keys();
        for layer in schedules::resnet18::layers() {
            assert_eq!(table_key(layer), workload(layer).key, "{layer:?} after warming");
        }
    }

    /// A measurement of R5 at `mr`, on `threads`, in `phase`, beside a probe of `probe` GOPS.
    fn record(mr: i64, threads: usize, phase: &str, micros: f64, probe: f64) -> Record {
        serde_json::from_value(serde_json::json!({
            "version": crate::record::RECORD_VERSION,
            "workload": {"key": "k", "op": "conv2d_int8", "summary": "R5"},
            "target": {"isa": "avx512-vnni", "cpu": {"vendor": "AuthenticAMD", "family": 25, "model": 17, "name": "zen4"},
                       "features": [], "threads": threads},
            "schedule": {"knobs": {"mr": mr, "nr": 64, "lanes": 16, "order": "pixels_outer", "threads": threads,
                                   "packing": "i16", "accumulation": "whole"}, "weights": "full", "phase": phase},
            "status": "ok", "median_ns": micros * 1e3, "gops": 231.2e-3 / micros * 1e3, "compile_ms": 1.0,
            "verified": true, "measured_at": "2026-11-25T00:00:00Z", "peak_gops": probe, "peak_probe": "vpdpbusd zmm",
        }))
        .expect("a valid record")
    }

    /// The default and the starts are always validated, each once, besides `FINALISTS` points
    /// of the search, fastest first.
    #[test]
    fn the_starts_are_validated_beside_the_fastest_points() {
        let knobs = |mr: i64| Conv2dInt8Knobs {
            mr,
            nr: 64,
            lanes: 16,
            order: TileOrder::PixelsOuter,
            threads: 1,
            packing: Packing::I16,
            accumulation: Accumulate::PerRow,
        };
        let ranked: Vec<_> = [9, 4, 8, 7, 6, 5].into_iter().map(knobs).collect();
        let got = finalists(knobs(4), &[knobs(3), knobs(3), knobs(4)], &ranked);
        let mrs: Vec<i64> = got.iter().map(|k| k.mr).collect();
        assert_eq!(mrs, [4, 3, 9, 8, 7][..FINALISTS + 2]);
        let without: Vec<i64> = finalists(knobs(4), &[], &ranked).iter().map(|k| k.mr).collect();
        assert_eq!(without, [4, 9, 8, 7][..FINALISTS + 1]);
        assert_eq!(finalists(knobs(4), &[knobs(5)], &[]).iter().map(|k| k.mr).collect::<Vec<_>>(), [4, 5]);
    }

    #[test]
    fn a_candidate_validated_in_a_slow_phase_wins_by_its_probe_corrected_time() {
        // The default (mr 4) and a candidate (mr 7) 7% faster, validated in three rounds; the
        // two-thread probe ran at half speed in most of the layer's records (so its median is
        // the slow state), in two rounds of the candidate and one of the default. By raw
        // medians the default would win; corrected, the candidate does.
        let (full, half) = (940.0, 470.0);
        let mut records = vec![record(4, 2, "search", 300.0, full), record(7, 2, "search", 280.0, full)];
        records.extend((8..11).map(|mr| record(mr, 2, "search", 700.0, half)));
        for (default, candidate) in
            [((300.0, full), (560.0, half)), ((600.0, half), (560.0, half)), ((300.0, full), (280.0, full))]
        {
            records.push(record(4, 2, "validation", default.0, default.1));
            records.push(record(7, 2, "validation", candidate.0, candidate.1));
        }
        // A one-thread record is corrected against one-thread probes only, and a record of
        // another probe (another method: a slower chain) against that probe only.
        records.push(record(5, 1, "search", 450.0, 470.0));
        let mut other_method = record(6, 2, "search", 500.0, 250.0);
        other_method.peak_probe = Some("vpmaddwd+vpaddd ymm".into());
        records.push(other_method);
        let result = LayerResult {
            name: "R5".into(),
            workload: WorkloadRef { key: "k".into(), op: "conv2d_int8".into(), summary: "R5".into() },
            records,
            baseline: 0,
            elapsed: Duration::ZERO,
        };
        let phases = result.phases();
        let point = |r: Option<&Record>| r.and_then(|r| r.schedule.knobs).map(|k| k.mr);
        assert_eq!(point(result.best()), Some(7));
        assert_eq!(point(result.default_record()), Some(4));
        let best = result.best().expect("a best record");
        assert!((phases.seconds(best).unwrap() - 280e-6).abs() < 1e-12);
        let default = result.default_record().expect("a default record");
        let speedup = phases.gops(best).unwrap() / phases.gops(default).unwrap();
        assert!((speedup - 300.0 / 280.0).abs() < 1e-9, "speedup {speedup}");
        for (r, micros) in result.records[11..].iter().zip([450.0, 500.0]) {
            assert!((phases.seconds(r).unwrap() - micros * 1e-6).abs() < 1e-12);
        }
        // By measured time alone the default would have been chosen.
        let measured = |r: &Record| r.median_ns;
        let by_measured = crate::record::representatives(result.records[5..11].iter(), &measured);
        assert_eq!(point(by_measured.into_iter().min_by(|a, b| crate::record::by(&measured, a, b))), Some(4));
    }
}
