//! Auto-scheduling of the resnet-18 int8 layers: a typed search space per layer (`space`),
//! search strategies (`search`), measurement — compile, verify bit for bit, time against the
//! peak probe (`measure`) — in a worker process (`worker`), and the record database (`db`).
//!
//! `tune_layer` is what `tensorlift tune resnet18` runs per layer; `tensorlift resnet18` applies
//! the best record of a database (`db::select`).

pub mod db;
pub mod measure;
pub mod plot;
pub mod search;
pub mod space;
pub mod worker;

use std::path::Path;
use std::time::{Duration, Instant};

use ir::DType;
use schedules::ops::{Conv2dParams, conv2d_nchw_int8, dense_int8};
use schedules::resnet18::{Layer, WeightBits, quantization};

use db::{DbError, Record, Status, WorkloadRef};
use search::{Searcher, Strategy};
use space::{Point, Space};
use worker::{Candidate, Worker};

use crate::IsaLevel;

/// The workload of a table layer: the key of its definition (`ops::conv2d_nchw_int8` or
/// `ops::dense_int8` with the table's quantization), independent of how it is scheduled.
pub fn workload(layer: Layer) -> WorkloadRef {
    let position = schedules::resnet18::layers().iter().position(|l| *l == layer).unwrap_or(0);
    let (op, key) = match definition_key(layer, position) {
        Ok(k) => k,
        Err(e) => return WorkloadRef { key: String::new(), op: "invalid".into(), summary: e },
    };
    WorkloadRef { key: key.key, op: op.into(), summary: format!("{} {}", layer.name(), key.summary) }
}

fn definition_key(layer: Layer, position: usize) -> Result<(&'static str, ir::workload::WorkloadKey), String> {
    let quant = quantization(layer, 1000 * (position as u64 + 1)).map_err(|e| e.to_string())?;
    let src = ir::te::placeholder_vec(quant.src_dims.clone(), DType::U8, "src").map_err(|e| e.to_string())?;
    let wei = ir::te::placeholder_vec(quant.wei_dims.clone(), DType::I8, "weights").map_err(|e| e.to_string())?;
    let bias = ir::te::placeholder_vec(vec![quant.wei_dims[0]], DType::F32, "bias").map_err(|e| e.to_string())?;
    let (op, def) = match layer {
        Layer::Conv(c) => {
            let conv = Conv2dParams { stride: c.stride, pad: c.pad };
            ("conv2d_int8", conv2d_nchw_int8(&src, &wei, Some(&bias), None, conv, &quant.attrs, layer.name()))
        }
        Layer::Dense(_) => ("dense_int8", dense_int8(&src, &wei, Some(&bias), None, &quant.attrs, layer.name())),
    };
    let def = def.map_err(|e| e.to_string())?;
    Ok((op, ir::workload::workload_key(&[&def.output])))
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

/// What tuning one layer found.
#[derive(Clone, Debug)]
pub struct LayerResult {
    pub layer: Layer,
    pub workload: WorkloadRef,
    /// Every record, in measurement order: the default point's first, then one per trial, then
    /// (after more than one trial) the default point's again.
    pub records: Vec<Record>,
    pub elapsed: Duration,
}

impl LayerResult {
    /// The default point's validation record of median time (its first record when there was
    /// no validation).
    pub fn default_record(&self) -> Option<&Record> {
        let default = record_point(self.records.first()?)?;
        self.validated().into_iter().find(|r| record_point(r) == Some(default)).or_else(|| self.records.first())
    }

    /// The result: the point whose validation records have the best median (the fastest search
    /// record when there was no validation), as its record of median time.
    pub fn best(&self) -> Option<&Record> {
        self.validated().into_iter().min_by(db::by_time)
    }

    /// Per point, the record of median time, among validation records if any.
    fn validated(&self) -> Vec<&Record> {
        db::representatives(
            self.records.iter().filter(|r| r.status == Status::Ok && r.verified && r.median_ns.is_some()),
        )
    }

    /// Trials of the search (validation measurements are not trials).
    pub fn trials(&self) -> usize {
        self.records.iter().filter(|r| !db::is_validation(r)).count()
    }

    /// Best GOPS after each trial (0 until one succeeded): the tuning curve.
    pub fn curve(&self) -> Vec<f64> {
        let mut best: f64 = 0.0;
        self.records[..self.trials()]
            .iter()
            .map(|r| {
                best = best.max(r.gops.filter(|_| r.status == Status::Ok && r.verified).unwrap_or(0.0));
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
    mut progress: impl FnMut(&Record),
) -> Result<LayerResult, DbError> {
    let start = Instant::now();
    let workload = workload(layer);
    let space = Space::for_target(layer, options.max_threads, options.level, options.weights.range());
    let mut searcher = Searcher::new(space, options.strategy, options.seed);
    let mut records = Vec::new();
    let candidate = |point: Point, phase: &str| Candidate {
        layer: layer.name().to_string(),
        isa: options.level.name().to_string(),
        weights: options.weights.name().into(),
        max_threads: options.max_threads,
        point,
        repeat: options.repeat,
        budget_ms: options.search_budget.filter(|_| phase == "search").map(|b| b.as_secs_f64() * 1e3),
        phase: phase.to_string(),
    };
    while records.len() < options.trials && options.budget.is_none_or(|b| start.elapsed() < b) {
        let Some(point) = searcher.propose() else { break };
        let record = worker.measure(&candidate(point, "search"), workload.clone());
        let seconds = record.median_ns.filter(|_| record.status == Status::Ok && record.verified).map(|ns| ns * 1e-9);
        searcher.report(point, seconds);
        if let Some(path) = db {
            db::append(path, std::slice::from_ref(&record))?;
        }
        progress(&record);
        records.push(record);
    }
    // Validation: the default and the fastest few points of the search, measured again in
    // rounds (one point after another, so slow phases of a shared machine hit them alike); the
    // result is the point with the best median of these.
    let default = space.default_point();
    let mut finalists = vec![default];
    let mut ranked: Vec<&Record> = records.iter().filter(|r| r.status == Status::Ok && r.verified).collect();
    ranked.sort_by(db::by_time);
    for p in ranked.iter().filter_map(|r| record_point(r)) {
        if finalists.len() > FINALISTS || records.len() < 2 {
            break;
        }
        if !finalists.contains(&p) {
            finalists.push(p);
        }
    }
    for _ in 0..VALIDATION_ROUNDS {
        for &p in &finalists {
            let record = worker.measure(&candidate(p, "validation"), workload.clone());
            if let Some(path) = db {
                db::append(path, std::slice::from_ref(&record))?;
            }
            records.push(record);
        }
    }
    Ok(LayerResult { layer, workload, records, elapsed: start.elapsed() })
}

/// The repository's pre-tuned database: the best record per layer and target of the CPUs this
/// project was measured on (`tuning/pretuned.jsonl`, written by `tensorlift tune resnet18 --db`
/// and `tensorlift db best`), applied by `tensorlift resnet18` unless another database has a
/// record for the layer.
pub const PRETUNED: &str = include_str!("../../tuning/pretuned.jsonl");

/// `PRETUNED` parsed; a malformed line is an error (the file is part of the repository).
pub fn pretuned() -> Result<db::Database, DbError> {
    let mut parsed = db::Database::parse(PRETUNED, Path::new("tuning/pretuned.jsonl"));
    match parsed.errors.is_empty() {
        true => Ok(parsed),
        false => Err(parsed.errors.remove(0)),
    }
}

/// The record to apply to `layer` with weights in `weights`' range on `host`, from `records`:
/// those of that weights range on at most `max_threads` threads, chosen by `db::select`.
pub fn record_for<'a>(
    records: &'a [Record],
    layer: Layer,
    weights: WeightBits,
    max_threads: usize,
    host: &db::Host,
) -> Option<&'a Record> {
    let fitting = records.iter().filter(|r| r.target.threads <= max_threads && r.schedule["weights"] == weights.name());
    db::select(fitting, &workload(layer).key, host)
}

/// The point a record's schedule holds.
pub fn record_point(record: &Record) -> Option<Point> {
    serde_json::from_value(record.schedule.get("knobs")?.clone()).ok()
}
