//! Measuring one point of a model task's space (`tasks::Task`) or of a resnet-18 table layer's
//! (`engine::TableGraph`, a graph of one partition): the partition's spec compiled with the
//! point's knobs (`Spec::compile_in`, as `tensorlift run` compiles it), its output checked bit
//! for bit against the graph's reference of the partition (`graph::reference::run_partition`,
//! which shares no code with the compiled path) on one input (a task's seeded one, a table
//! layer's own data), then timed against the peak probe (`measure::time_verified`). Compiled
//! functions and prepared weights are kept per bench (`KernelCache::keeping_weights`).

use std::time::{Duration, Instant};

use schedules::x86_conv::Conv2dInt8Knobs;

use super::measure::{Measurement, time_verified};
use super::space::Space;
use super::tasks::{ModelTasks, Task};
use crate::CompileOptions;
use crate::engine::{EngineError, Spec, TableGraph, kernel_bytes, random_input};
use crate::graph::Partition;
use crate::graph::reference::{ReferenceError, run_partition};
use crate::isa::IsaLevel;
use crate::layer::KernelCache;
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

/// The seeded source of `partition` of `model` (`INPUT_SEED`) and the graph reference's output
/// for it, both in the compiled kernels' layout (NHWC, or `[M, K]`).
pub fn partition_data(model: &ModelTasks, partition: &Partition) -> Result<(Vec<u8>, Vec<u8>), ReferenceError> {
    let fail =
        |reason: String| ReferenceError::Partition { partition: partition.id, kind: partition.kind.name(), reason };
    let source = partition.inputs.first().copied().ok_or_else(|| fail("no source".into()))?;
    let (dtype, dims) = model
        .graph
        .tensor(source)
        .and_then(|t| Some((t.dtype, t.shape.concrete()?)))
        .ok_or_else(|| fail("a source of unknown shape".into()))?;
    let input = random_input(dtype, &dims, INPUT_SEED).map_err(|e| fail(e.to_string()))?;
    let output = run_partition(&model.graph, partition, std::slice::from_ref(&input))?;
    Ok((kernel_bytes(&input), kernel_bytes(&output)))
}

impl TaskBench {
    /// Sets `task` of `model` up for code at `level` on at most `max_threads` threads.
    pub fn new(
        model: &ModelTasks,
        task: &Task,
        level: IsaLevel,
        max_threads: usize,
    ) -> Result<TaskBench, ReferenceError> {
        let (src, expected) = partition_data(model, &task.partition)?;
        Ok(TaskBench {
            level,
            space: task.space(max_threads, level),
            workload: task.workload.clone(),
            spec: task.spec.clone(),
            src,
            expected,
            cache: KernelCache::keeping_weights(),
        })
    }

    /// Table layer `table` set up for code at `level` on at most `max_threads` threads, its
    /// records of `workload`: its own data as the source, the graph's reference for it.
    pub fn for_table(
        table: &TableGraph,
        level: IsaLevel,
        max_threads: usize,
        workload: WorkloadRef,
    ) -> Result<TaskBench, EngineError> {
        Ok(TaskBench {
            level,
            space: Space::for_target(table.layer(), max_threads, level, table.data.range),
            workload,
            spec: table.spec.clone(),
            src: table.src_bytes(),
            expected: table.expected_bytes()?,
            cache: KernelCache::keeping_weights(),
        })
    }

    /// The reference's output, in the kernel's layout (NHWC, or `[M, N]`).
    pub fn expected(&self) -> &[u8] {
        &self.expected
    }

    /// Operations of one call.
    pub fn ops(&self) -> u64 {
        self.spec.ops()
    }

    /// `measure_against` the reference's output.
    pub fn measure(&self, point: &Conv2dInt8Knobs, repeat: usize, budget: Option<Duration>) -> Measurement {
        self.measure_against(point, &self.expected, repeat, budget)
    }

    /// Compiles `point`, runs it on the bench's source, checks the output against `expected`
    /// bit for bit and, if equal, times it (`measure::time_verified`). A point the space
    /// rejects is `BuildError` with the reason, an output that differs (or has another length)
    /// `Mismatch`, untimed.
    pub fn measure_against(
        &self,
        point: &Conv2dInt8Knobs,
        expected: &[u8],
        repeat: usize,
        budget: Option<Duration>,
    ) -> Measurement {
        if let Err(reason) = self.space.check(point) {
            return Measurement::failed(Status::BuildError, reason.to_string(), None);
        }
        if !self.level.is_supported() {
            return Measurement::failed(Status::UnsupportedIsa, format!("this CPU lacks {}", self.level), None);
        }
        let options =
            CompileOptions { target: Target::Level(self.level), threads: Some(point.threads), ..Default::default() };
        let compiled = match self.spec.compile_in(&self.cache, Some(*point), &options) {
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
        if expected.len() != dst.len() {
            let error = format!("expected {} output bytes to compare with, found {}", dst.len(), expected.len());
            return Measurement::failed(Status::Mismatch, error, compile_ms);
        }
        if let Some(i) = (0..dst.len()).find(|&i| dst[i] != expected[i]) {
            let error = format!(
                "the output differs from the graph reference's: byte {i} (NHWC): expected {}, found {}",
                expected[i], dst[i]
            );
            return Measurement::failed(Status::Mismatch, error, compile_ms);
        }
        let probe = Probe::for_function(compiled.func());
        let threads = compiled.func().threads().unwrap_or(1);
        let ops = self.spec.ops();
        let trace = Some(compiled.trace().clone());
        time_verified((probe, threads), ops, (repeat, budget), warm_up, (compile_ms, trace), || {
            compiled.run(&self.src, &mut dst)
        })
    }
}
