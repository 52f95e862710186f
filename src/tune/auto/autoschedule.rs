//! One call that auto-schedules a user's own definition in this process: the rules' space
//! (`schedules::auto::Space`) searched by the learned evolutionary search (`search`), every
//! point compiled, checked bit for bit against the reference interpreter and timed
//! (`op_bench::OpBench`), the fastest few measured again, and the best point applied.
//!
//! Measurement runs in the calling process (the definition is Rust code there): a point that
//! crashed would take the process down, which the checks before generated code runs make a
//! defect, not a risk of the search. `tensorlift tune op` measures catalog operators in worker
//! processes instead.

use std::sync::Arc;
use std::time::{Duration, Instant};

use schedules::auto::{AutoPoint, Scheduled};
use schedules::catalog::Definition;
use thiserror::Error;

use super::compiled_point::CompiledPoint;
use super::search::{SearchError, SearchLog, SearchOptions, Strategy, Trial, resume};
use super::space::LoweredSpace;
use crate::bench::median;
use crate::build::BuildError;
use crate::isa::IsaLevel;
use crate::record::{Status, WorkloadRef};
use crate::runtime::CompileOptions;
use crate::target::Target;
use crate::tune::op_bench::{OpBench, OpBenchError, OpReference};

/// How to auto-schedule.
#[derive(Clone, Debug)]
pub struct AutoOptions {
    pub level: IsaLevel,
    pub max_threads: usize,
    /// Search measurements after the generic point's (the baseline, measured first, is not a
    /// trial).
    pub trials: usize,
    pub strategy: Strategy,
    /// Timed calls per measurement, as many as fit in `search_budget` during the search.
    pub repeat: usize,
    pub search_budget: Option<Duration>,
    /// Points measured again, after the search, with the generic one.
    pub finalists: usize,
    /// Rounds of those measurements.
    pub rounds: usize,
    pub seed: u64,
    /// Whether the learned model starts from the shipped prior (`tune::prior`, the catalog's
    /// kinds measured at other shapes).
    pub prior: bool,
}

impl AutoOptions {
    /// `trials` measurements by the learned search at `level`, all of this machine's threads.
    pub fn new(level: IsaLevel, trials: usize) -> AutoOptions {
        AutoOptions {
            level,
            max_threads: std::thread::available_parallelism().map_or(1, |n| n.get()),
            trials,
            strategy: Strategy::Evolutionary,
            repeat: 10,
            search_budget: Some(Duration::from_millis(6)),
            finalists: 3,
            rounds: 3,
            seed: 1,
            prior: true,
        }
    }
}

/// The result: the best point applied, and the report.
pub struct AutoScheduled {
    /// The best point, applied to the definition: schedule (with its trace), the call's
    /// arguments, threads, and the functions that prepare its constants once (`prepare`: a
    /// constant `B` packed). `compile` builds them all.
    pub scheduled: Scheduled,
    /// The level it was measured at.
    pub level: IsaLevel,
    pub point: AutoPoint,
    /// The generic schedule's and the best point's median seconds per call, measured again
    /// after the search, interleaved.
    pub default_seconds: f64,
    pub best_seconds: f64,
    /// Every search measurement, in order (the generic point's first, `resumed`: 1), with the
    /// cost model's held-out correlations.
    pub log: SearchLog,
    /// The space's sketches, decisions and rule notes (`Space::listing`).
    pub listing: String,
    pub elapsed: Duration,
    /// The definition's name (what `compile` names the function).
    pub workload_name: String,
}

impl AutoScheduled {
    /// The best point compiled at its level on its threads: `prepare` the definition's inputs
    /// once (constants packed), then call `main` on them and the outputs as often as needed.
    pub fn compile(&self) -> Result<CompiledPoint, BuildError> {
        let options = CompileOptions {
            target: Target::Level(self.level),
            threads: Some(self.scheduled.threads),
            ..Default::default()
        };
        CompiledPoint::build(&self.scheduled, &self.workload_name, &options)
    }

    /// How many times faster than the generic schedule.
    pub fn speedup(&self) -> f64 {
        self.default_seconds / self.best_seconds
    }
}

#[derive(Debug, Error)]
pub enum AutoscheduleError {
    #[error(transparent)]
    Setup(#[from] OpBenchError),
    #[error(transparent)]
    Search(#[from] SearchError),
    #[error(transparent)]
    Prior(#[from] crate::tune::prior::PriorError),
    #[error("{name}: no point of the space was verified and timed (the generic one: {generic})")]
    NothingMeasured { name: String, generic: String },
}

/// Auto-schedules `definition` (`name` labels it in errors and its workload): searches
/// `options.trials` points, measures the generic point and the fastest `finalists` again in
/// `rounds`, and returns the fastest applied. Every measured point was checked bit for bit
/// against `ir::interp::eval_te` of the definition on deterministic inputs.
pub fn autoschedule(
    name: &str,
    definition: Definition,
    options: &AutoOptions,
) -> Result<AutoScheduled, AutoscheduleError> {
    let start = Instant::now();
    let reference = Arc::new(OpReference::of(name, &definition)?);
    let key = ir::workload::workload_key(&definition.output_refs());
    let workload = WorkloadRef { key: key.key, op: name.to_string(), summary: key.summary };
    let bench = OpBench::of(definition, workload, options.level, options.max_threads, reference);
    let seconds = |point: &AutoPoint, budget: Option<Duration>| {
        let m = bench.measure(point, options.repeat, budget);
        let ok = m.status == Status::Ok && m.verified;
        m.median_ns.filter(|_| ok).map(|ns| ns * 1e-9).ok_or(m.error.unwrap_or_default())
    };
    let default = bench.space.default_point();
    let mut search_options = SearchOptions::new(options.trials, options.strategy);
    search_options.seed = options.seed;
    if options.prior {
        let shipped = crate::tune::prior::shipped()?;
        search_options.prior =
            crate::tune::prior::samples(&shipped, options.level, options.max_threads, &bench.workload.key);
    }
    let lowered = LoweredSpace::new(&bench.space);
    let mut measure = |points: &[AutoPoint]| -> Vec<Option<f64>> {
        points.iter().map(|p| seconds(p, options.search_budget).ok()).collect()
    };
    // The generic point first, as the baseline the search starts from, not one of its trials.
    let baseline =
        Trial { point: default.clone(), seconds: seconds(&default, options.search_budget).ok(), predicted: None };
    let log = resume(&lowered, &[baseline], &mut measure, &search_options)?;
    // The finalists: the generic point first, then the fastest of the search.
    let mut ranked: Vec<_> = log.trials.iter().filter(|t| t.seconds.is_some()).collect();
    ranked.sort_by(|a, b| a.seconds.unwrap_or(f64::INFINITY).total_cmp(&b.seconds.unwrap_or(f64::INFINITY)));
    let mut finalists = vec![default.clone()];
    for t in ranked {
        if finalists.len() > options.finalists {
            break;
        }
        if !finalists.contains(&t.point) {
            finalists.push(t.point.clone());
        }
    }
    let mut times: Vec<Vec<f64>> = vec![Vec::new(); finalists.len()];
    let mut generic_error = String::new();
    for _ in 0..options.rounds.max(1) {
        for (i, p) in finalists.iter().enumerate() {
            match seconds(p, None) {
                Ok(s) => times[i].push(s),
                Err(e) if i == 0 => generic_error = e,
                Err(_) => {}
            }
        }
    }
    let medians: Vec<Option<f64>> = times.into_iter().map(|t| (!t.is_empty()).then(|| median(t))).collect();
    let best = (0..finalists.len())
        .filter_map(|i| Some((i, medians[i]?)))
        .min_by(|a, b| a.1.total_cmp(&b.1))
        .ok_or_else(|| AutoscheduleError::NothingMeasured { name: name.to_string(), generic: generic_error.clone() })?;
    let default_seconds = medians[0]
        .ok_or_else(|| AutoscheduleError::NothingMeasured { name: name.to_string(), generic: generic_error })?;
    let point = finalists[best.0].clone();
    let scheduled = bench.space.apply(&point).map_err(|e| AutoscheduleError::NothingMeasured {
        name: name.to_string(),
        generic: format!("the best point no longer applies: {e}"),
    })?;
    Ok(AutoScheduled {
        scheduled,
        level: options.level,
        workload_name: name.to_string(),
        point,
        default_seconds,
        best_seconds: best.1,
        log,
        listing: bench.space.listing(),
        elapsed: start.elapsed(),
    })
}
