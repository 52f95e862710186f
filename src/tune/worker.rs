//! Measurement in a worker process, so that a candidate that crashes, hangs or aborts is
//! recorded with its status and never takes the tuner down.
//!
//! The protocol is JSON lines: the tuner writes `Candidate`s to the worker's stdin (`tensorlift
//! measure`), the worker answers each with one `Record` on stdout. The same command serves any
//! engine that fans candidates out to other machines (Ray, Slurm, Kubernetes jobs). The end of
//! the worker's stderr goes into the record of a candidate it crashed or hung on. A candidate
//! names a table layer, or a model file and one of its tasks (`tasks`, `task_bench`), with
//! `x86_conv` knobs; or a model file and one of its auto-scheduled convolutions
//! (`auto_task_bench`), or an operator of the catalog (`op_bench`), with a point of the
//! auto-scheduler's space.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::Arc;
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::time::Duration;

use schedules::auto::AutoPoint;
use schedules::catalog::OpSpec;
use schedules::resnet18::{self, WeightBits};
use schedules::x86_conv::Conv2dInt8Knobs;
use serde::{Deserialize, Serialize};

use super::auto_task_bench::AutoTaskBench;
use super::measure::Measurement;
use super::op_bench::{OpBench, OpReference};
use super::tail::Tail;
use super::task_bench::TaskBench;
use super::tasks::{ModelTasks, extract};
use crate::engine::TableGraph;
use crate::isa::IsaLevel;
use crate::record::{
    CpuRef, Phase, RECORD_VERSION, Record, RecordSchedule, Status, TargetRef, WorkloadRef, now_rfc3339,
};

/// One point to measure.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Candidate {
    /// A resnet-18 table layer (`R1`..`R11`, `FC`); empty for a model's task or an operator.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub layer: String,
    /// A model's task instead: the ONNX file ...
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// ... and the task's workload key (`tasks::workload_key`, or `tasks::auto_workload_key`
    /// with an `auto` point).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task: Option<String>,
    /// An operator of the catalog instead (`{"kind": "matmul", "m": 64, ...}`), measured at
    /// the point `auto` of its space.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub op: Option<OpSpec>,
    /// `IsaLevel::name`.
    pub isa: String,
    /// `full` or `7bit` (default `full`; an operator's inputs are fixed patterns).
    #[serde(default = "full_weights")]
    pub weights: WeightBits,
    /// The threads the layer's (or operator's) space allows (the point picks its own).
    pub max_threads: usize,
    /// The knobs to measure (a layer or a model's task).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub point: Option<Conv2dInt8Knobs>,
    /// The point of the operator's (or the model's auto-scheduled task's) space to measure
    /// (`schedules::auto::AutoPoint`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auto: Option<AutoPoint>,
    pub repeat: usize,
    /// Time for the timed calls, in milliseconds: fewer than `repeat` when they would take
    /// longer (at least 1). The search uses a budget; validation does not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget_ms: Option<f64>,
    /// `search` (when missing), or `validation` for the re-measurements that pick the result.
    #[serde(default)]
    pub phase: Phase,
}

fn full_weights() -> WeightBits {
    WeightBits::Eight
}

/// Layers set up in this process, by (layer, level, weights, max threads); models imported
/// (once each) and their tasks set up, by (model, task key, level, max threads); operators'
/// references (once each) and the operators set up, by (operator, level, max threads).
#[derive(Default)]
pub struct Benches {
    benches: HashMap<(String, IsaLevel, WeightBits, usize), TaskBench>,
    models: HashMap<String, ModelTasks>,
    tasks: HashMap<(String, String, IsaLevel, usize), TaskBench>,
    auto_tasks: HashMap<(String, String, IsaLevel, usize), AutoTaskBench>,
    references: HashMap<OpSpec, Arc<OpReference>>,
    ops: HashMap<(OpSpec, IsaLevel, usize), OpBench>,
}

/// The record of a candidate that could not be measured at all.
pub fn failed_record(c: &Candidate, workload: WorkloadRef, status: Status, error: String) -> Record {
    record(c, workload, &Measurement::failed(status, error, None))
}

/// The record of `c` measured as `m`.
pub fn record(c: &Candidate, workload: WorkloadRef, m: &Measurement) -> Record {
    let level = IsaLevel::from_name(&c.isa).ok();
    Record {
        version: RECORD_VERSION,
        workload,
        target: TargetRef {
            isa: c.isa.clone(),
            cpu: crate::isa::cpu_id().as_ref().map(CpuRef::from).unwrap_or(CpuRef {
                vendor: String::new(),
                family: 0,
                model: 0,
                name: "unknown CPU".into(),
            }),
            features: level.map(|l| l.features().into_iter().map(String::from).collect()).unwrap_or_default(),
            threads: c.point.map(|k| k.threads).or(m.threads).unwrap_or(1),
        },
        schedule: RecordSchedule {
            knobs: c.point,
            auto: c.auto.clone(),
            weights: c.weights,
            phase: c.phase,
            trace: m.trace.clone(),
        },
        status: m.status,
        median_ns: m.median_ns,
        gops: m.gops,
        compile_ms: m.compile_ms,
        verified: m.verified,
        measured_at: now_rfc3339(),
        error: m.error.clone(),
        peak_gops: m.peak_gops,
        peak_probe: m.probe.map(|p| p.to_string()),
        point_features: None,
    }
}

impl Benches {
    /// Measures `c` in this process (setting its layer, task or operator up on first use).
    pub fn measure(&mut self, c: &Candidate) -> Record {
        let unknown = |what: &str| WorkloadRef { key: String::new(), op: String::new(), summary: what.to_string() };
        if let Some(op) = &c.op {
            return self.measure_op(c, op);
        }
        if let (Some(model), Some(task), Some(point)) = (&c.model, &c.task, &c.auto) {
            return self.measure_auto_task(c, model, task, point);
        }
        let Some(point) = c.point else {
            let error = "a candidate names a layer or a model's task with `point` (knobs), or an `op` with `auto`: found no `point` and no `op`";
            return failed_record(c, unknown(&c.layer), Status::BuildError, error.to_string());
        };
        if let (Some(model), Some(task)) = (&c.model, &c.task) {
            return self.measure_task(c, model, task, &point);
        }
        let Some(layer) = resnet18::layer(&c.layer) else {
            return failed_record(
                c,
                unknown(&c.layer),
                Status::BuildError,
                format!("no layer {:?} in the table", c.layer),
            );
        };
        let level = match IsaLevel::from_name(&c.isa) {
            Ok(l) => l,
            Err(e) => return failed_record(c, unknown(&c.layer), Status::UnsupportedIsa, e.to_string()),
        };
        let workload = super::workload(layer);
        if !level.is_supported() {
            return failed_record(c, workload, Status::UnsupportedIsa, format!("this CPU does not support {level}"));
        }
        let key = (c.layer.clone(), level, c.weights, c.max_threads);
        if !self.benches.contains_key(&key) {
            let bench = TableGraph::new(layer, c.weights)
                .and_then(|table| TaskBench::for_table(&table, level, c.max_threads, workload.clone()));
            match bench {
                Ok(b) => {
                    self.benches.insert(key.clone(), b);
                }
                Err(e) => {
                    return failed_record(c, workload, Status::BuildError, format!("setting up {}: {e}", c.layer));
                }
            }
        }
        let bench = &self.benches[&key];
        let budget = search_budget(c);
        record(c, workload, &bench.measure(&point, c.repeat, budget))
    }
}

impl Benches {
    /// Measures `c`, a candidate for the task of workload `key` of `model` (importing the model
    /// and setting the task up on first use).
    fn measure_task(&mut self, c: &Candidate, model: &str, key: &str, point: &Conv2dInt8Knobs) -> Record {
        let unknown = WorkloadRef { key: key.to_string(), op: String::new(), summary: format!("{model}: {key}") };
        let level = match self.model_at_level(c, model) {
            Ok(l) => l,
            Err((status, e)) => return failed_record(c, unknown, status, e),
        };
        let tasks = &self.models[model];
        let task = match tasks.task(key) {
            Ok(t) => t,
            Err(e) => return failed_record(c, unknown, Status::BuildError, e.to_string()),
        };
        let id = (model.to_string(), key.to_string(), level, c.max_threads);
        if !self.tasks.contains_key(&id) {
            match TaskBench::new(tasks, task, level, c.max_threads) {
                Ok(b) => {
                    self.tasks.insert(id.clone(), b);
                }
                Err(e) => {
                    let error = format!("setting up {}: {e}", task.workload.summary);
                    return failed_record(c, task.workload.clone(), Status::BuildError, error);
                }
            }
        }
        let bench = &self.tasks[&id];
        let budget = search_budget(c);
        record(c, bench.workload.clone(), &bench.measure(point, c.repeat, budget))
    }

    /// The level `c` asks for, where this CPU has it, with `model` imported (`import`); else
    /// the failed record's status and error.
    fn model_at_level(&mut self, c: &Candidate, model: &str) -> Result<IsaLevel, (Status, String)> {
        let level = IsaLevel::from_name(&c.isa).map_err(|e| (Status::UnsupportedIsa, e.to_string()))?;
        if !level.is_supported() {
            return Err((Status::UnsupportedIsa, format!("this CPU does not support {level}")));
        }
        self.import(model).map_err(|e| (Status::BuildError, e))?;
        Ok(level)
    }

    /// Imports `model` and extracts its tasks, once.
    fn import(&mut self, model: &str) -> Result<(), String> {
        if !self.models.contains_key(model) {
            let m = extract(Path::new(model)).map_err(|e| e.to_string())?;
            self.models.insert(model.to_string(), m);
        }
        Ok(())
    }

    /// Measures `c`, a candidate at `point` for the auto-scheduled task of workload `key` of
    /// `model` (importing the model and setting the task up on first use).
    fn measure_auto_task(&mut self, c: &Candidate, model: &str, key: &str, point: &AutoPoint) -> Record {
        let unknown = WorkloadRef { key: key.to_string(), op: String::new(), summary: format!("{model}: {key}") };
        let level = match self.model_at_level(c, model) {
            Ok(l) => l,
            Err((status, e)) => return failed_record(c, unknown, status, e),
        };
        let tasks = &self.models[model];
        let task = match tasks.auto_task(key) {
            Ok(t) => t,
            Err(e) => return failed_record(c, unknown, Status::BuildError, e.to_string()),
        };
        let id = (model.to_string(), key.to_string(), level, c.max_threads);
        if !self.auto_tasks.contains_key(&id) {
            match AutoTaskBench::new(tasks, task, level, c.max_threads) {
                Ok(b) => {
                    self.auto_tasks.insert(id.clone(), b);
                }
                Err(e) => {
                    let error = format!("setting up {}: {e}", task.workload.summary);
                    return failed_record(c, task.workload.clone(), Status::BuildError, error);
                }
            }
        }
        let bench = &self.auto_tasks[&id];
        let budget = search_budget(c);
        record(c, bench.workload.clone(), &bench.measure(point, c.repeat, budget))
    }

    /// Measures `c`, a candidate for the operator `op` at the point `c.auto` (computing the
    /// operator's reference and setting it up at the level on first use).
    fn measure_op(&mut self, c: &Candidate, op: &OpSpec) -> Record {
        let workload = match super::op_bench::spec_workload(op) {
            Ok(w) => w,
            Err(e) => {
                let unknown = WorkloadRef { key: String::new(), op: op.kind().to_string(), summary: op.label() };
                return failed_record(c, unknown, Status::BuildError, e.to_string());
            }
        };
        let Some(point) = &c.auto else {
            let error = format!("a candidate for the operator {} names no `auto` point", op.label());
            return failed_record(c, workload, Status::BuildError, error);
        };
        let level = match IsaLevel::from_name(&c.isa) {
            Ok(l) => l,
            Err(e) => return failed_record(c, workload, Status::UnsupportedIsa, e.to_string()),
        };
        if !level.is_supported() {
            return failed_record(c, workload, Status::UnsupportedIsa, format!("this CPU does not support {level}"));
        }
        let id = (op.clone(), level, c.max_threads);
        if !self.ops.contains_key(&id) {
            if !self.references.contains_key(op) {
                match OpReference::new(op) {
                    Ok(r) => {
                        self.references.insert(op.clone(), Arc::new(r));
                    }
                    Err(e) => return failed_record(c, workload, Status::BuildError, e.to_string()),
                }
            }
            match OpBench::new(op, level, c.max_threads, self.references[op].clone()) {
                Ok(b) => {
                    self.ops.insert(id.clone(), b);
                }
                Err(e) => return failed_record(c, workload, Status::BuildError, e.to_string()),
            }
        }
        let bench = &self.ops[&id];
        let budget = search_budget(c);
        record(c, workload, &bench.measure(point, c.repeat, budget))
    }
}

/// `tensorlift measure`: candidates from `input`, one record per line to `output` (flushed
/// after each), each also given to `on_record` (e.g. to append it to a database).
pub fn serve(
    input: impl BufRead,
    mut output: impl Write,
    mut on_record: impl FnMut(&Record) -> std::io::Result<()>,
) -> std::io::Result<usize> {
    let mut benches = Benches::default();
    let mut count = 0;
    for line in input.lines() {
        let line = line?;
        if line.trim().is_empty() {
            continue;
        }
        let record = match serde_json::from_str::<Candidate>(&line) {
            Ok(c) => benches.measure(&c),
            Err(e) => {
                let error =
                    std::io::Error::new(std::io::ErrorKind::InvalidData, format!("candidate line {}: {e}", count + 1));
                return Err(error);
            }
        };
        writeln!(output, "{}", serde_json::to_string(&record).expect("records serialize"))?;
        output.flush()?;
        on_record(&record)?;
        count += 1;
    }
    Ok(count)
}

/// A running `tensorlift measure` process.
struct Process {
    child: Child,
    stdin: ChildStdin,
    lines: Receiver<String>,
    /// The end of its stderr.
    stderr: Tail,
}

/// How long a worker that died or was killed may take to close its stderr.
const STDERR_CLOSE: Duration = Duration::from_secs(2);

/// `error`, followed by the end of the worker's stderr when it printed anything.
fn with_stderr(error: String, tail: &str) -> String {
    match tail {
        "" => error,
        tail => format!("{error}; the end of its stderr:\n{tail}"),
    }
}

/// Measures candidates in a worker process, restarting it after a crash or a timeout.
pub struct Worker {
    program: PathBuf,
    args: Vec<String>,
    process: Option<Process>,
    /// How long one candidate may take, and how much longer the first one on a fresh worker
    /// may take (it sets the layer up: data, weights, the generic reference).
    pub timeout: Duration,
    pub setup_timeout: Duration,
    fresh: bool,
}

impl Worker {
    /// A worker running `program args...` (normally `tensorlift measure`).
    pub fn new(program: PathBuf, args: Vec<String>) -> Worker {
        Worker {
            program,
            args,
            process: None,
            timeout: Duration::from_secs(20),
            setup_timeout: Duration::from_secs(300),
            fresh: true,
        }
    }

    fn spawn(&mut self) -> std::io::Result<&mut Process> {
        if self.process.is_none() {
            let mut child = Command::new(&self.program)
                .args(&self.args)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()?;
            let stdin = child.stdin.take().expect("piped stdin");
            let stdout = child.stdout.take().expect("piped stdout");
            let stderr = Tail::keep(child.stderr.take().expect("piped stderr"));
            let (send, lines) = channel();
            std::thread::spawn(move || {
                for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                    if send.send(line).is_err() {
                        break;
                    }
                }
            });
            self.process = Some(Process { child, stdin, lines, stderr });
            self.fresh = true;
        }
        Ok(self.process.as_mut().expect("just spawned"))
    }

    /// Gives the next candidate the setup time of a fresh worker (its first of a new layer or
    /// task: a model imported, a reference computed).
    pub fn expect_setup(&mut self) {
        self.fresh = true;
    }

    /// Ends the worker (if it still runs) and returns the end of its stderr.
    fn kill(&mut self) -> String {
        let Some(mut p) = self.process.take() else { return String::new() };
        let _ = p.child.kill();
        let _ = p.child.wait();
        p.stderr.text(STDERR_CLOSE)
    }

    /// Measures `c` in the worker: its record, or a `run_error` (the worker died) or `timeout`
    /// record, after which the next candidate gets a fresh worker.
    pub fn measure(&mut self, c: &Candidate, workload: WorkloadRef) -> Record {
        let timeout = if self.fresh { self.timeout + self.setup_timeout } else { self.timeout };
        let line = serde_json::to_string(c).expect("candidates serialize");
        let process = match self.spawn() {
            Ok(p) => p,
            Err(e) => return failed_record(c, workload, Status::RunError, format!("starting the worker: {e}")),
        };
        if writeln!(process.stdin, "{line}").and_then(|()| process.stdin.flush()).is_err() {
            let tail = self.kill();
            return failed_record(c, workload, Status::RunError, with_stderr("the worker exited".into(), &tail));
        }
        let answer = process.lines.recv_timeout(timeout);
        match answer {
            Ok(text) => match serde_json::from_str::<Record>(&text) {
                Ok(r) => {
                    self.fresh = false;
                    r
                }
                Err(e) => {
                    let tail = self.kill();
                    let error = with_stderr(format!("the worker answered {text:?}: {e}"), &tail);
                    failed_record(c, workload, Status::RunError, error)
                }
            },
            Err(RecvTimeoutError::Timeout) => {
                let tail = self.kill();
                let error = with_stderr(format!("no answer within {} s", timeout.as_secs_f64()), &tail);
                failed_record(c, workload, Status::Timeout, error)
            }
            Err(RecvTimeoutError::Disconnected) => {
                let status = self.process.as_mut().and_then(|p| p.child.wait().ok());
                let tail = self.kill();
                let how = status.map_or("exited".to_string(), |s| s.to_string());
                let error = with_stderr(format!("the worker crashed ({how})"), &tail);
                failed_record(c, workload, Status::RunError, error)
            }
        }
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        if let Some(mut p) = self.process.take() {
            let _ = p.child.kill();
            let _ = p.child.wait();
        }
    }
}

/// The time a search-phase measurement may take (`Candidate::budget_ms`, when positive).
fn search_budget(c: &Candidate) -> Option<std::time::Duration> {
    c.budget_ms.filter(|b| b.is_finite() && *b > 0.0).map(|b| std::time::Duration::from_secs_f64(b / 1e3))
}

#[cfg(test)]
mod tests {
    use schedules::x86_conv::{Accumulate, Packing, TileOrder};

    use super::*;

    /// The candidate lists of `tuning/ab` and the README's fan-out example (knobs without
    /// `accumulation`, or without `packing`, and no `phase`) are candidates.
    #[test]
    fn candidate_lists_and_the_readmes_example_parse() {
        let lines: Vec<&str> = include_str!("../../tuning/ab/packing-avx2-1t.jsonl").lines().collect();
        let candidates: Vec<Candidate> = lines.iter().map(|l| serde_json::from_str(l).expect(l)).collect();
        assert!(candidates.len() >= 2);
        for (line, c) in lines.iter().zip(&candidates) {
            let packing = if line.contains(r#""packing": "i16""#) { Packing::I16 } else { Packing::Bytes };
            assert_eq!(
                (c.point.unwrap().packing, c.point.unwrap().accumulation, c.phase),
                (packing, Accumulate::Whole, Phase::Validation)
            );
            assert_eq!(c.weights, WeightBits::Eight);
        }
        let readme = r#"{"layer": "R4", "isa": "avx2", "weights": "full", "max_threads": 2,
            "point": {"mr": 7, "nr": 64, "lanes": 16, "order": "pixels_outer", "threads": 2}, "repeat": 10}"#;
        let c: Candidate = serde_json::from_str(readme).unwrap();
        let point = c.point.unwrap();
        assert_eq!(
            (point.mr, point.order, point.packing, c.phase),
            (7, TileOrder::PixelsOuter, Packing::Bytes, Phase::Search)
        );
        let bad = readme.replace("\"full\"", "\"8bit\"");
        let err = serde_json::from_str::<Candidate>(&bad).unwrap_err().to_string();
        assert!(err.contains("unknown variant `8bit`, expected `full` or `7bit`"), "{err}");
    }
}
