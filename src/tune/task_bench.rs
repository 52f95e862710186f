//! Measuring one point of a model task's space (`tasks::Task`): the task's spec compiled with
//! the point's knobs (`layer::compile_qconv`, `compile_qdense`, as `tensorlift run` compiles
//! it), its output checked bit for bit against the graph's reference of the task's partition
//! (`graph::reference::run_partition`, which shares no code with the compiled path) on one
//! seeded input, then timed against the peak probe as a table layer is (`measure`). Compiled
//! functions and prepared weights are kept per task (`KernelCache::keeping_weights`).

use std::time::{Duration, Instant};

use schedules::x86_conv::Conv2dInt8Knobs;

use super::measure::{Measurement, time_verified};
use super::space::Space;
use super::tasks::{ModelTasks, Task};
use crate::CompileOptions;
use crate::engine::{Slot, Spec, random_input};
use crate::graph::Value;
use crate::graph::reference::{ReferenceError, run_partition};
use crate::isa::IsaLevel;
use crate::layer::{CompiledQuantized, KernelCache, compile_qconv_in, compile_qdense_in};
use crate::record::{Status, WorkloadRef};
use crate::runtime::peak::Probe;
use crate::target::Target;

/// The seed of every task's input.
pub const INPUT_SEED: u64 = 0x7a5c;

/// A model task set up for tuning at one level: its spec, space, a seeded source and the
/// reference's output for it (both in the compiled kernel's layout: NHWC, or `[M, K]`),
/// computed here so that no candidate's time limit pays for them.
pub struct TaskBench {
    pub level: IsaLevel,
    pub space: Space,
    pub workload: WorkloadRef,
    spec: Spec,
    src: Vec<u8>,
    expected: Vec<u8>,
    /// Functions and prepared weights of the points measured so far (a validation round
    /// compiles nothing again, a panel width prepares the weights once).
    cache: KernelCache,
}

/// The bytes of `value` as the engine stores them, the compiled kernels' layout (NHWC for 4-D).
fn kernel_bytes(value: &Value) -> Vec<u8> {
    let mut slot = Slot::new(value.dtype(), value.dims().to_vec());
    slot.store(value);
    slot.bytes
}

impl TaskBench {
    /// Sets `task` of `model` up for code at `level` on at most `max_threads` threads.
    pub fn new(
        model: &ModelTasks,
        task: &Task,
        level: IsaLevel,
        max_threads: usize,
    ) -> Result<TaskBench, ReferenceError> {
        let source = task.partition.inputs[0];
        let (dtype, dims) =
            model.graph.tensor(source).and_then(|t| Some((t.dtype, t.shape.concrete()?))).ok_or_else(|| {
                ReferenceError::Partition {
                    partition: task.partition.id,
                    kind: task.partition.kind.name(),
                    reason: "a source of unknown shape".into(),
                }
            })?;
        let fail = |reason: String| ReferenceError::Partition {
            partition: task.partition.id,
            kind: task.partition.kind.name(),
            reason,
        };
        let input = random_input(dtype, &dims, INPUT_SEED).map_err(|e| fail(e.to_string()))?;
        let output = run_partition(&model.graph, &task.partition, std::slice::from_ref(&input))?;
        Ok(TaskBench {
            level,
            space: task.space(max_threads, level),
            workload: task.workload.clone(),
            spec: task.spec.clone(),
            src: kernel_bytes(&input),
            expected: kernel_bytes(&output),
            cache: KernelCache::keeping_weights(),
        })
    }

    /// Compiles `point`, runs it on the task's source, checks the output against the
    /// reference's bit for bit and, if equal, times it (`measure::time_verified`). A point the
    /// space rejects is `BuildError` with the reason, an output that differs `Mismatch`.
    pub fn measure(&self, point: &Conv2dInt8Knobs, repeat: usize, budget: Option<Duration>) -> Measurement {
        if let Err(reason) = self.space.check(point) {
            return Measurement::failed(Status::BuildError, reason.to_string(), None);
        }
        if !self.level.is_supported() {
            return Measurement::failed(Status::UnsupportedIsa, format!("this CPU lacks {}", self.level), None);
        }
        let options =
            CompileOptions { target: Target::Level(self.level), threads: Some(point.threads), ..Default::default() };
        let compiled: Result<CompiledQuantized, _> = match &self.spec {
            Spec::Conv(c) => compile_qconv_in(&self.cache, c, Some(*point), &options),
            Spec::Dense(d) => compile_qdense_in(&self.cache, d, Some(*point), &options),
        };
        let compiled = match compiled {
            Ok(c) => c,
            Err(e) => return Measurement::failed(Status::BuildError, e.to_string(), None),
        };
        let compile_ms = Some((compiled.compile_time() + compiled.prepare_time()).as_secs_f64() * 1e3);
        // Filled (so that its pages are mapped before the verification call, which may be the
        // timed one) with a value a kernel that skips an output byte is unlikely to leave right.
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
        let ops = self.spec.ops();
        time_verified((probe, threads), ops, (repeat, budget), warm_up, (compile_ms, None), || {
            compiled.run(&self.src, &mut dst)
        })
    }
}
