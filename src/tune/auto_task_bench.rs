//! Measuring one point of a model's auto-scheduled convolution (`tasks::AutoTask`): the
//! partition's spec compiled at the point (`layer::compile_qconv_auto_at`, as `tensorlift run`
//! compiles it with a record), its output checked bit for bit against the graph's reference of
//! the partition (`task_bench::partition_data`, which shares no code with the compiled path) on
//! the task's seeded input, then timed against the peak probe (`measure::time_verified`). A
//! point the space rejects is a `BuildError`, never compiled; compiled points are kept, so a
//! validation round compiles nothing again.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use schedules::auto::{AutoPoint, Space};

use super::measure::{Measurement, time_verified};
use super::task_bench::partition_data;
use super::tasks::{AutoTask, ModelTasks};
use crate::CompileOptions;
use crate::graph::reference::ReferenceError;
use crate::isa::IsaLevel;
use crate::layer::{CompiledAuto, LayerError, QConvAutoSpec, compile_qconv_auto_at, qconv_auto_space};
use crate::record::{Status, WorkloadRef};
use crate::runtime::peak::Probe;
use crate::target::Target;

/// Why an auto-scheduled task could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum AutoBenchError {
    #[error(transparent)]
    Reference(#[from] ReferenceError),
    #[error("the definition: {0}")]
    Definition(#[from] LayerError),
}

/// An auto-scheduled convolution of a model set up for tuning at one level on at most
/// `max_threads` threads: its space, the rules' point (`tensorlift run`'s default), a seeded
/// source and the reference's output for it (NHWC), computed here so that no candidate's time
/// limit pays for them.
pub struct AutoTaskBench {
    pub level: IsaLevel,
    pub space: Space,
    /// The point the engine applies without a record.
    pub rules: AutoPoint,
    pub workload: WorkloadRef,
    max_threads: usize,
    spec: QConvAutoSpec,
    src: Vec<u8>,
    expected: Vec<u8>,
    compiled: Mutex<HashMap<AutoPoint, Arc<CompiledAuto>>>,
}

impl AutoTaskBench {
    /// Sets `task` of `model` up for code at `level` on at most `max_threads` threads.
    pub fn new(
        model: &ModelTasks,
        task: &AutoTask,
        level: IsaLevel,
        max_threads: usize,
    ) -> Result<AutoTaskBench, AutoBenchError> {
        let (src, expected) = partition_data(model, &task.partition)?;
        let space = qconv_auto_space(&task.spec, level, max_threads)?;
        Ok(AutoTaskBench {
            level,
            space: space.space,
            rules: space.rules,
            workload: task.workload.clone(),
            max_threads: max_threads.max(1),
            spec: task.spec.clone(),
            src,
            expected,
            compiled: Mutex::new(HashMap::new()),
        })
    }

    /// The reference's output (NHWC).
    pub fn expected(&self) -> &[u8] {
        &self.expected
    }

    /// Compiles `point` (once), runs it on the bench's source, checks the output against the
    /// reference bit for bit and, if equal, times it (`repeat` calls, fewer within `budget`). A
    /// point the space rejects is `BuildError` with the reason, an output that differs
    /// `Mismatch`, untimed.
    pub fn measure(&self, point: &AutoPoint, repeat: usize, budget: Option<Duration>) -> Measurement {
        if let Err(e) = self.space.apply(point) {
            return Measurement::failed(Status::BuildError, e.to_string(), None);
        }
        if !self.level.is_supported() {
            return Measurement::failed(Status::UnsupportedIsa, format!("this CPU lacks {}", self.level), None);
        }
        let known = self.compiled.lock().unwrap_or_else(PoisonError::into_inner).get(point).cloned();
        let compiled = match known {
            Some(c) => c,
            None => {
                let options = CompileOptions {
                    target: Target::Level(self.level),
                    threads: Some(self.max_threads),
                    ..Default::default()
                };
                let compiled = match compile_qconv_auto_at(&self.spec, &options, Some(point)) {
                    Ok(c) => Arc::new(c),
                    Err(e) => return Measurement::failed(Status::BuildError, e.to_string(), None),
                };
                if let Some(why) = compiled.rejected() {
                    return Measurement::failed(Status::BuildError, why.to_string(), None);
                }
                let mut cache = self.compiled.lock().unwrap_or_else(PoisonError::into_inner);
                cache.insert(point.clone(), compiled.clone());
                compiled
            }
        };
        let compile_ms = Some(compiled.compile_time().as_secs_f64() * 1e3);
        // Filled with a value a kernel that skips an output byte is unlikely to leave right.
        let mut dst = vec![0xa5u8; self.expected.len()];
        let start = Instant::now();
        if let Err(e) = compiled.run(&self.src, &mut dst) {
            return Measurement::failed(Status::RunError, e.to_string(), compile_ms);
        }
        let warm_up = start.elapsed();
        if let Some(i) = (0..dst.len()).find(|&i| dst[i] != self.expected[i]) {
            let error = format!(
                "the output differs from the graph reference's: byte {i} (NHWC): expected {}, found {}",
                self.expected[i], dst[i]
            );
            return Measurement::failed(Status::Mismatch, error, compile_ms);
        }
        let probe = Probe::for_function(compiled.func());
        let threads = compiled.func().threads().unwrap_or(1);
        let trace = Some(compiled.trace().clone());
        time_verified((probe, threads), compiled.ops(), (repeat, budget), warm_up, (compile_ms, trace), || {
            compiled.run(&self.src, &mut dst)
        })
    }
}
