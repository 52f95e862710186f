//! Tuning an operator of the catalog in the auto-scheduler's space (`tensorlift tune op`): the
//! generic point measured first as the baseline (not a trial, so that neither search spends a
//! trial on it), the best point a database already has for this CPU next, then
//! rounds of points the search proposes (`auto::resume`: evolution
//! guided by the learned cost model, or random), each measured in a worker process (`worker`, so a
//! crash or a hang is a record), then the fastest few measured again in rounds (as
//! `tune_space` validates), every record appended to the database as it comes. That loop is
//! `tune_auto_space`, any space's: `tune MODEL.onnx` runs it on a model's auto-scheduled
//! convolutions, their rules' point as the baseline.
//!
//! `propose_candidates` is the same search run from a database alone (`tune op --propose N`):
//! a driver that measures elsewhere (Ray) asks it for the next batch, measures it with
//! `tensorlift measure` and appends the records. `best_point` is what applies the records: the
//! point of the best verified record for this operator on this CPU (`schedule_op` applies it).

use std::path::Path;
use std::time::{Duration, Instant};

use schedules::auto::{AutoError, AutoPoint, Scheduled, Space};
use schedules::catalog::Definition;
use schedules::catalog::{MatmulDtype, OpSpec};
use thiserror::Error;

use super::auto::{LoweredSpace, Sample, SearchError, SearchOptions, SearchSpace, Strategy, Trial, propose, resume};
use super::op_bench::{OpBenchError, definition, op_workload, space_options};
use super::worker::{Candidate, Worker};
use super::{FINALISTS, LayerResult, VALIDATION_ROUNDS};
use crate::isa::IsaLevel;
use crate::record::{DbError, Host, Phase, Phases, Record, WorkloadRef, append, select};

/// Errors of `tune_op`, `propose_candidates` and `template`.
#[derive(Debug, Error)]
pub enum OpTuneError {
    #[error(transparent)]
    Bench(#[from] Box<OpBenchError>),
    #[error(transparent)]
    Db(#[from] Box<DbError>),
    #[error("{op}: the search: {source}")]
    Search {
        op: String,
        #[source]
        source: SearchError,
    },
    #[error("no template for {kind}: {reason}")]
    NoTemplate { kind: &'static str, reason: &'static str },
    #[error("{op}: the point of the record to apply: {source}")]
    Apply {
        op: String,
        #[source]
        source: Box<AutoError>,
    },
    #[error(transparent)]
    Prior(#[from] Box<super::prior::PriorError>),
    #[error("{op}: the definition: {source}")]
    Definition {
        op: String,
        #[source]
        source: Box<crate::layer::LayerError>,
    },
}

/// How to tune one operator.
#[derive(Clone, Debug)]
pub struct OpTuneOptions {
    pub level: IsaLevel,
    /// Most threads a point may use.
    pub max_threads: usize,
    /// Stop after this many search measurements (the baseline, measured before them, is not
    /// one) ...
    pub trials: usize,
    /// ... or this much time, whichever comes first.
    pub budget: Option<Duration>,
    /// Timed calls per measurement ...
    pub repeat: usize,
    /// ... in the search, as many as fit in this (validation always runs `repeat`).
    pub search_budget: Option<Duration>,
    /// Points proposed per round of the search.
    pub batch: usize,
    pub seed: u64,
    /// How points are proposed: evolution guided by the learned cost model, or at random.
    pub strategy: Strategy,
    /// Whether the learned model also starts from the shipped prior (`tune::prior`), besides
    /// the database's records of other workloads on this CPU.
    pub shipped_prior: bool,
}

/// What `tune_op` did: the records and, per batch the learned model scored before it was
/// measured, Spearman's correlation of its predictions with the measured speed.
pub struct OpTuned {
    pub result: LayerResult,
    pub held_out_spearman: Vec<Option<f64>>,
}

/// The candidate measuring `point` of `spec` in `phase`.
pub fn op_candidate(spec: &OpSpec, point: AutoPoint, options: &OpTuneOptions, phase: Phase) -> Candidate {
    Candidate {
        layer: String::new(),
        model: None,
        task: None,
        op: Some(spec.clone()),
        isa: options.level.name().to_string(),
        weights: schedules::resnet18::WeightBits::Eight,
        max_threads: options.max_threads,
        point: None,
        auto: Some(point),
        repeat: options.repeat,
        budget_ms: options.search_budget.filter(|_| phase == Phase::Search).map(|b| b.as_secs_f64() * 1e3),
        phase,
    }
}

/// `spec`'s workload and space at `level` on at most `max_threads` threads.
fn setup(spec: &OpSpec, level: IsaLevel, max_threads: usize) -> Result<(WorkloadRef, Space), OpBenchError> {
    let def = definition(spec)?;
    let space = Space::of(&def, space_options(level, max_threads));
    Ok((op_workload(spec, &def), space))
}

/// The records of `records` that measured a point of `workload` at `level` on at most
/// `max_threads` threads: what the search already knows.
pub fn known<'a>(records: &'a [Record], workload: &str, level: IsaLevel, max_threads: usize) -> Vec<&'a Record> {
    let same = |r: &&Record| {
        r.workload.key == workload
            && r.schedule.auto.is_some()
            && r.target.isa == level.name()
            && r.target.threads <= max_threads
    };
    records.iter().filter(same).collect()
}

/// A point and its corrected time in seconds (`None`: it failed).
pub type Measured = (AutoPoint, Option<f64>);

/// Per point of `records` (auto points), its corrected time (`Phases`) where it was measured
/// and verified: what the proposer learns from.
pub fn history(records: &[&Record]) -> Vec<Measured> {
    let phases = Phases::of(records.iter().copied());
    records.iter().filter_map(|r| Some((r.schedule.auto.clone()?, phases.seconds(r).filter(|_| r.ok())))).collect()
}

/// `history` as the search's trials.
fn trials(history: &[(AutoPoint, Option<f64>)]) -> Vec<Trial> {
    history.iter().map(|(point, seconds)| Trial { point: point.clone(), seconds: *seconds, predicted: None }).collect()
}

/// The search's options for `options`, starting at `starts`, with `prior` (`prior`).
fn search_options(
    options: &OpTuneOptions,
    trials: usize,
    starts: Vec<AutoPoint>,
    prior: Vec<Vec<Sample>>,
) -> SearchOptions {
    let mut search = SearchOptions::new(trials, options.strategy);
    search.batch = options.batch.max(1);
    search.seed = options.seed;
    search.starts = starts;
    search.prior = prior;
    search
}

/// What `records` measured of other workloads than `workload` on `host`'s CPU at `level` on
/// at most `max_threads` threads, where they kept their points' features: per workload (in the
/// order they first appear), each search measurement's features and corrected time (`None`:
/// it failed). The learned search's model trains on them before its first batch
/// (`SearchOptions::prior`).
pub fn prior(records: &[Record], workload: &str, host: &Host, max_threads: usize) -> Vec<Vec<Sample>> {
    let width = ir::analysis::features::Features::len();
    let mut groups: Vec<(&str, Vec<&Record>)> = Vec::new();
    for r in records {
        let other = r.workload.key != workload
            && r.schedule.auto.is_some()
            && !r.is_validation()
            && r.target.isa == host.level.name()
            && r.target.threads <= max_threads
            && host.cpu.as_ref() == Some(&r.target.cpu)
            && r.point_features.as_ref().is_some_and(|f| f.len() == width);
        if !other {
            continue;
        }
        match groups.iter_mut().find(|(k, _)| *k == r.workload.key) {
            Some((_, group)) => group.push(r),
            None => groups.push((&r.workload.key, vec![r])),
        }
    }
    groups
        .into_iter()
        .map(|(_, group)| {
            let phases = Phases::of(group.iter().copied());
            group
                .iter()
                .filter_map(|r| {
                    let seconds = phases.seconds(r).filter(|_| r.ok());
                    Some(Sample { features: r.point_features.clone()?, seconds })
                })
                .collect()
        })
        .collect()
}

/// What the learned model of a search of `workload` starts from: the database's measurements
/// of other workloads on this CPU (`prior`), then, where `options.shipped_prior`, the shipped
/// prior's at this level (`tune::prior::samples`). Each workload weighs as its samples count.
pub fn starting_prior(
    records: &[Record],
    workload: &str,
    host: &Host,
    options: &OpTuneOptions,
) -> Result<Vec<Vec<Sample>>, OpTuneError> {
    let mut out = prior(records, workload, host, options.max_threads);
    if options.shipped_prior {
        let shipped = super::prior::shipped().map_err(Box::new)?;
        out.extend(super::prior::samples(&shipped, options.level, options.max_threads, workload));
    }
    Ok(out)
}

/// The point of the best verified record for `spec` on `host` among `records`, on at most
/// `max_threads` threads (`record::select` among the records that carry an auto point), with
/// that record; `None` when no record applies (the generic schedule then serves). The point
/// applies to `spec`'s space at the record's level (`Space::of` with `space_options` of the
/// record's level and threads, then `Space::apply`).
pub fn best_point<'a>(
    spec: &OpSpec,
    records: &'a [Record],
    host: &Host,
    max_threads: usize,
) -> Result<Option<(AutoPoint, &'a Record)>, OpBenchError> {
    let (workload, _) = setup(spec, host.level, max_threads)?;
    let fitting = records.iter().filter(|r| r.schedule.auto.is_some() && r.target.threads <= max_threads);
    Ok(select(fitting, &workload.key, host).and_then(|r| Some((r.schedule.auto.clone()?, r))))
}

/// `spec`'s definition scheduled at `host`'s level on at most `max_threads` threads by the
/// point of the best verified record of `records` (`best_point`), or by the generic point when
/// none applies: the definition, the applied point (its schedule, the call's arguments, its
/// threads, the functions that prepare its constants: build them with
/// `tune::auto::CompiledPoint`) and the record it came from. A record whose point this space rejects is an error.
pub fn schedule_op<'a>(
    spec: &OpSpec,
    records: &'a [Record],
    host: &Host,
    max_threads: usize,
) -> Result<(Definition, Scheduled, Option<&'a Record>), OpTuneError> {
    let def = definition(spec).map_err(Box::new)?;
    let space = Space::of(&def, space_options(host.level, max_threads));
    let best = best_point(spec, records, host, max_threads).map_err(Box::new)?;
    let point = best.as_ref().map_or_else(|| space.default_point(), |(p, _)| p.clone());
    let scheduled = space.apply(&point).map_err(|e| OpTuneError::Apply { op: spec.label(), source: Box::new(e) })?;
    Ok((def, scheduled, best.map(|(_, r)| r)))
}

/// Tunes `spec` with `worker`: the generic point, the best point of `db_records` for this CPU
/// (when the space at this level accepts it), then rounds of `options.batch` proposed points
/// not measured before (in this run or in `db_records` at this level) until `options.trials`
/// search measurements or `options.budget`, then the validation rounds of the generic point
/// and the fastest `FINALISTS` (`tune_auto_space`). Every record is appended to `db` (when
/// given) as it comes and shown to `progress`.
pub fn tune_op(
    worker: &mut Worker,
    spec: &OpSpec,
    options: &OpTuneOptions,
    (db_records, db): (&[Record], Option<&Path>),
    progress: impl FnMut(&Record),
) -> Result<OpTuned, OpTuneError> {
    let (workload, space) = setup(spec, options.level, options.max_threads).map_err(Box::new)?;
    let host = Host::this(options.level);
    let default = space.default_point();
    let best_known = best_point(spec, db_records, &host, options.max_threads).map_err(Box::new)?.map(|(p, _)| p);
    let history = history(&known(db_records, &workload.key, options.level, options.max_threads));
    let prior = starting_prior(db_records, &workload.key, &host, options)?;
    let search = AutoSearch {
        label: spec.label(),
        workload,
        space: &space,
        default,
        known: best_known.into_iter().collect(),
        history,
        prior,
    };
    tune_auto_space(worker, search, &|point, phase| op_candidate(spec, point, options, phase), options, db, progress)
}

/// One space of the auto-scheduler to search (`tune_auto_space`).
pub struct AutoSearch<'a> {
    /// Names the space in errors.
    pub label: String,
    pub workload: WorkloadRef,
    pub space: &'a Space,
    /// The baseline, measured first and not counted as a trial: an operator's generic point,
    /// a model convolution's rules' point (what runs without a record).
    pub default: AutoPoint,
    /// Points measured right after it, whatever the history holds: the database's best.
    pub known: Vec<AutoPoint>,
    /// What the search already knows: points of earlier runs with their corrected times.
    pub history: Vec<Measured>,
    /// Other workloads' measurements the cost model starts from (`prior`).
    pub prior: Vec<Vec<Sample>>,
}

/// Searches `search.space` with `worker`, each point measured as `candidate` makes it: the
/// default point (the baseline, not a trial), the known ones the space accepts, then rounds of
/// `options.batch` proposed points not measured before (`auto::resume`: evolution guided by the
/// learned cost model, or random) until `options.trials` search measurements besides the
/// baseline or `options.budget`, then the validation
/// rounds of the default and the fastest `FINALISTS`. Every record is appended to `db` (when
/// given) as it comes; `progress` sees each search record.
pub fn tune_auto_space(
    worker: &mut Worker,
    search: AutoSearch<'_>,
    candidate: &dyn Fn(AutoPoint, Phase) -> Candidate,
    options: &OpTuneOptions,
    db: Option<&Path>,
    mut progress: impl FnMut(&Record),
) -> Result<OpTuned, OpTuneError> {
    let start = Instant::now();
    let AutoSearch { label, workload, space, default, known, history: mut measured, prior } = search;
    let mut records: Vec<Record> = Vec::new();
    let lowered = LoweredSpace::new(space);
    worker.expect_setup();
    let mut measure = |point: AutoPoint, phase: Phase, records: &mut Vec<Record>| -> Result<(), DbError> {
        let features = if phase == Phase::Search { lowered.features(&point) } else { None };
        let mut record = worker.measure(&candidate(point, phase), workload.clone());
        record.point_features = features;
        if let Some(path) = db {
            append(path, std::slice::from_ref(&record))?;
        }
        if phase == Phase::Search {
            progress(&record);
        }
        records.push(record);
        Ok(())
    };
    let known = known.into_iter().filter(|p| *p != default && space.apply(p).is_ok());
    // The default and the database's best first, measured whatever the history holds (they
    // are the report's baselines), then the search after every known measurement.
    let mut firsts: Vec<AutoPoint> = vec![default.clone()];
    for p in known {
        if !firsts.contains(&p) {
            firsts.push(p);
        }
    }
    // The baseline is measured whatever the trials; the trials follow it.
    let within_budget = |records: &[Record]| {
        records.is_empty() || records.len() <= options.trials && options.budget.is_none_or(|b| start.elapsed() < b)
    };
    let mut failure: Option<DbError> = None;
    let mut run = |points: &[AutoPoint], records: &mut Vec<Record>| -> Vec<Option<f64>> {
        let mut times = Vec::new();
        for point in points {
            if failure.is_some() || !within_budget(records) {
                break;
            }
            if let Err(e) = measure(point.clone(), Phase::Search, records) {
                failure = Some(e);
                break;
            }
            let phases = Phases::of(records.iter());
            let last = &records[records.len() - 1];
            times.push(phases.seconds(last).filter(|_| last.ok()));
        }
        times
    };
    let first_times = run(&firsts, &mut records);
    measured.extend(firsts.iter().cloned().zip(first_times));
    let baseline = records.len().min(1);
    let mut search = search_options(options, (options.trials + baseline).saturating_sub(records.len()), vec![], prior);
    search.deadline = options.budget.map(|b| start + b);
    let log = resume(&lowered, &trials(&measured), &mut |points| run(points, &mut records), &search)
        .map_err(|source| OpTuneError::Search { op: label.clone(), source })?;
    if let Some(e) = failure {
        return Err(Box::new(e).into());
    }
    // Validation: the default point and the fastest few of the search, again in rounds.
    let phases = Phases::of(&records);
    let mut ranked: Vec<&Record> = records.iter().filter(|r| r.ok()).collect();
    ranked.sort_by(|a, b| phases.by_time(a, b));
    let mut finalists = vec![default];
    for p in ranked.iter().filter_map(|r| r.schedule.auto.clone()) {
        if finalists.len() > FINALISTS || records.len() < 2 {
            break;
        }
        if !finalists.contains(&p) {
            finalists.push(p);
        }
    }
    if records.len() >= 2 {
        for _ in 0..VALIDATION_ROUNDS {
            for p in &finalists {
                measure(p.clone(), Phase::Validation, &mut records).map_err(Box::new)?;
            }
        }
    }
    let result = LayerResult { name: label, workload, records, baseline, elapsed: start.elapsed() };
    Ok(OpTuned { result, held_out_spearman: log.held_out_spearman })
}

/// `count` candidates for `spec` that `records` (a database) has not measured at this level:
/// the generic point first when it has not, then the proposer's points given what the records
/// measured (`tune op --propose N`). Distinct, and fewer than `count` when the space has no
/// more points.
pub fn propose_candidates(
    spec: &OpSpec,
    options: &OpTuneOptions,
    records: &[Record],
    count: usize,
) -> Result<Vec<Candidate>, OpTuneError> {
    let (workload, space) = setup(spec, options.level, options.max_threads).map_err(Box::new)?;
    let known = known(records, &workload.key, options.level, options.max_threads);
    let searched = known.iter().filter(|r| !r.is_validation()).count();
    let count = count.min(options.trials.saturating_sub(searched));
    let history = trials(&history(&known));
    let prior = starting_prior(records, &workload.key, &Host::this(options.level), options)?;
    let search = search_options(options, count, vec![space.default_point()], prior);
    let points = propose(&LoweredSpace::new(&space), &history, count, &search)
        .map_err(|source| OpTuneError::Search { op: spec.label(), source })?;
    Ok(points.into_iter().map(|p| op_candidate(spec, p, options, Phase::Search)).collect())
}

/// `spec`'s space at `level` on at most `max_threads` threads, and what the search phase of
/// `records` measured of it: each point with its corrected time (`None`: it failed), in the
/// records' order, validation records left out. The table an offline replay of the search
/// reads (`auto::replay`).
pub fn op_table(
    spec: &OpSpec,
    level: IsaLevel,
    max_threads: usize,
    records: &[Record],
) -> Result<(Space, Vec<Measured>), OpBenchError> {
    let (workload, space) = setup(spec, level, max_threads)?;
    let known = known(records, &workload.key, level, max_threads);
    let searched: Vec<&Record> = known.into_iter().filter(|r| !r.is_validation()).collect();
    Ok((space, history(&searched)))
}

/// A hand-written template this operator's knob search could run instead of the rules
/// (`--strategy template`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Template {
    /// `schedules::x86::gemm_int8` on B packed in the VNNI layout.
    GemmInt8,
}

/// The template of `spec`, or why it has none.
pub fn template(spec: &OpSpec) -> Result<Template, OpTuneError> {
    let none = |reason| Err(OpTuneError::NoTemplate { kind: spec.kind(), reason });
    match spec {
        OpSpec::Matmul { dtype: MatmulDtype::U8, .. } => Ok(Template::GemmInt8),
        OpSpec::Matmul { dtype: MatmulDtype::F32, .. } => {
            none("expected a u8 x i8 matmul (the x86 int8 GEMM), found f32 operands")
        }
        OpSpec::Conv2d { .. } => none(
            "the x86_conv template computes a requantized u8 convolution of OIHW weights; this definition is an i32 NHWC convolution of OHWI weights",
        ),
        OpSpec::BatchMatmul { .. } | OpSpec::Pool { .. } | OpSpec::Softmax { .. } | OpSpec::Layernorm { .. } => {
            none("only the auto-scheduler's rules schedule it")
        }
        OpSpec::Requantized { .. } => {
            none("the template of a requantized layer runs as `tensorlift resnet18 --layer L` and `tune resnet18`")
        }
    }
}
