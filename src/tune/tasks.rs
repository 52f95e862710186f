//! Task extraction (TVM's): the distinct workloads of an imported model's quantized
//! convolutions and matrix products, each counted with how many of the model's partitions use
//! it. A workload is keyed by what the compiled code depends on — geometry, activation dtypes,
//! the fused ReLU, per-tensor or per-channel scales and the weights' range (7-bit weights pick
//! another kernel family) — not by weight values, scales or zero points, so that a record
//! measured on one model applies to every layer of the same shape.
//!
//! The convolutions the x86 template does not take (grouped, depthwise, dilated: the engine's
//! `Kernel::Auto`) are tasks of their own (`AutoTask`), keyed by their definition
//! (`layer::qconv_auto_key`, which names neither weights nor scales) and
//! searched in the auto-scheduler's space.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use ir::intrin::pair_sums_fit_i16;
use schedules::resnet18::{DenseLayer, Layer, WeightBits};
use schedules::x86_conv::weight_range;
use thiserror::Error;

use super::space::Space;
use crate::engine::{Spec, Workload, auto_spec, partition_spec};
use crate::graph::{FinalizedGraph, Partition, PartitionId, PartitionKind, PartitionPolicy};
use crate::isa::IsaLevel;
use crate::layer::{ActQuant, LayerError, QConvAutoSpec, qconv_auto_key};
use crate::onnx::OnnxError;
use crate::record::WorkloadRef;

/// Why a model's tasks could not be extracted or found.
#[derive(Debug, Error)]
pub enum TaskError {
    #[error("{path}: {source}")]
    Import { path: PathBuf, source: Box<OnnxError> },
    #[error(
        "{path}: expected at least one quantized convolution or matmul the x86 kernels or the auto-scheduler compute, found none among its {partitions} partitions"
    )]
    NoTasks { path: PathBuf, partitions: usize },
    #[error("{path}: expected a task of workload {key:?}, found none")]
    UnknownTask { path: PathBuf, key: String },
}

/// The key, summary and weights range of a workload (`Task`, `tune::apply::RecordKnobs`).
pub fn workload_key(w: Workload<'_>) -> (WorkloadRef, WeightBits) {
    let dtype = |a: &ActQuant| a.dtype.to_string();
    let scales = |n: usize| if n == 1 { "tensor" } else { "channel" };
    // 7-bit: every u8 × s8 pair sum fits i16 (`vpmaddubsw` exact: another kernel family),
    // onnxruntime's reduced range [-64, 64] included.
    // The bound holds for a range iff for every weight in it (the extreme pair sums are
    // 255·min(lo, 0) and 255·max(hi, 0)), so the scan stops at the first block that breaks it.
    let bits = |weights: &[i8]| {
        let exact = weights.chunks(4096).all(|block| {
            let (lo, hi) = weight_range(block.iter().copied());
            pair_sums_fit_i16((0, 255), (i64::from(lo.min(0)), i64::from(hi.max(0))))
        });
        if exact { WeightBits::Seven } else { WeightBits::Eight }
    };
    match w {
        Workload::Conv(c) => {
            let weights = bits(&c.weights);
            let key = format!(
                "conv2d_int8:src={},dst={},h={},w={},ic={},oc={},kh={},kw={},stride={},pad={},relu={},scales={},weights={}",
                dtype(&c.src),
                dtype(&c.dst),
                c.h,
                c.w,
                c.ic,
                c.oc,
                c.kh,
                c.kw,
                c.stride.0,
                c.pads[0],
                u8::from(c.relu),
                scales(c.weight_scales.len()),
                weights.name()
            );
            let summary = format!(
                "conv {}x{}x{}→{} k{}x{} s{} p{} {}{}",
                c.h,
                c.w,
                c.ic,
                c.oc,
                c.kh,
                c.kw,
                c.stride.0,
                c.pads[0],
                dtype(&c.src),
                if c.relu { " relu" } else { "" }
            );
            (WorkloadRef { key, op: "conv2d_int8".into(), summary }, weights)
        }
        Workload::Dense(d) => {
            let weights = bits(&d.weights);
            let key = format!(
                "dense_int8:src={},dst={},m={},k={},n={},relu={},scales={},weights={}",
                dtype(&d.src),
                dtype(&d.dst),
                d.m,
                d.k,
                d.n,
                u8::from(d.relu),
                scales(d.weight_scales.len()),
                weights.name()
            );
            let summary =
                format!("dense {}x{}→{} {}{}", d.m, d.k, d.n, dtype(&d.src), if d.relu { " relu" } else { "" });
            (WorkloadRef { key, op: "dense_int8".into(), summary }, weights)
        }
    }
}

/// One distinct workload of a model.
#[derive(Clone, Debug)]
pub struct Task {
    pub workload: WorkloadRef,
    pub weights: WeightBits,
    /// The spec of its first partition (what the worker compiles) ...
    pub spec: Spec,
    /// ... and that partition (what the reference evaluates).
    pub partition: Partition,
    /// Partitions of the model with this workload.
    pub uses: usize,
}

impl Task {
    /// Operations of one call.
    pub fn ops(&self) -> u64 {
        self.spec.ops()
    }

    /// The search space of the task for code at `level` on at most `max_threads` threads: the
    /// table layers' space on the task's geometry (its default point the engine's default).
    pub fn space(&self, max_threads: usize, level: IsaLevel) -> Space {
        let range = match &self.spec {
            Spec::Conv(c) => weight_range(c.weights.iter().copied()),
            Spec::Dense(d) => weight_range(d.weights.iter().copied()),
        };
        match &self.spec {
            Spec::Conv(c) => Space::for_target(Layer::Conv(c.knob_layer()), max_threads, level, range),
            Spec::Dense(d) => {
                let layer = Layer::Dense(DenseLayer { name: "dense", in_features: d.k, out_features: d.n });
                Space { rows: d.m, ..Space::for_target(layer, max_threads, level, range) }
            }
        }
    }
}

/// One distinct workload of a model's auto-scheduled convolutions.
#[derive(Clone, Debug)]
pub struct AutoTask {
    pub workload: WorkloadRef,
    /// The spec of its first partition (what the worker compiles) ...
    pub spec: QConvAutoSpec,
    /// ... and that partition (what the reference evaluates).
    pub partition: Partition,
    /// Partitions of the model with this workload.
    pub uses: usize,
}

impl AutoTask {
    /// Operations of one call.
    pub fn ops(&self) -> u64 {
        self.spec.ops()
    }
}

/// The workload of an auto-scheduled convolution: its definition's key (`qconv_auto_key`),
/// and a summary naming its geometry. Errors: the spec's.
pub fn auto_workload_key(spec: &QConvAutoSpec) -> Result<WorkloadRef, LayerError> {
    let key = qconv_auto_key(spec)?;
    let pads = if spec.pads.iter().all(|&p| p == spec.pads[0]) {
        spec.pads[0].to_string()
    } else {
        format!("{:?}", spec.pads)
    };
    let stride = if spec.strides.0 == spec.strides.1 {
        spec.strides.0.to_string()
    } else {
        format!("{}x{}", spec.strides.0, spec.strides.1)
    };
    let dilation = match spec.dilations {
        (1, 1) => String::new(),
        (a, b) => format!(" d{a}x{b}"),
    };
    let summary = format!(
        "{}conv {}x{}x{}→{} k{}x{} s{stride} p{pads}{dilation} g{} {}",
        if spec.groups == spec.ic && spec.groups > 1 { "dw" } else { "" },
        spec.h,
        spec.w,
        spec.ic,
        spec.oc,
        spec.kh,
        spec.kw,
        spec.groups,
        spec.src.dtype,
    );
    Ok(WorkloadRef { key: key.key, op: "qconv_auto".into(), summary })
}

/// A model's graph and its tasks, in the order of their first partition.
pub struct ModelTasks {
    pub path: PathBuf,
    pub graph: FinalizedGraph,
    pub partitions: Vec<Partition>,
    /// The x86 template's (knobs) ...
    pub tasks: Vec<Task>,
    /// ... and the auto-scheduler's (points of its space).
    pub auto_tasks: Vec<AutoTask>,
}

impl ModelTasks {
    /// The task of workload `key`.
    pub fn task(&self, key: &str) -> Result<&Task, TaskError> {
        self.tasks
            .iter()
            .find(|t| t.workload.key == key)
            .ok_or_else(|| TaskError::UnknownTask { path: self.path.clone(), key: key.to_string() })
    }

    /// The auto-scheduled task of workload `key`.
    pub fn auto_task(&self, key: &str) -> Result<&AutoTask, TaskError> {
        self.auto_tasks
            .iter()
            .find(|t| t.workload.key == key)
            .ok_or_else(|| TaskError::UnknownTask { path: self.path.clone(), key: key.to_string() })
    }

    /// The index in `all` of the task of each partition that has one.
    pub fn task_of_partitions(&self) -> HashMap<PartitionId, usize> {
        let all = self.all();
        let mut found = HashMap::new();
        for p in &self.partitions {
            let key = match partition_spec(&self.graph, p) {
                Ok(spec) => workload_key(spec.workload()).0.key,
                Err(_) => match auto_spec(&self.graph, p).map(|s| auto_workload_key(&s)) {
                    Ok(Ok(w)) => w.key,
                    _ => continue,
                },
            };
            if let Some(i) = all.iter().position(|(w, ..)| w.key == key) {
                found.insert(p.id, i);
            }
        }
        found
    }

    /// Every task's workload, operations of one call and uses: the template's tasks, then the
    /// auto-scheduled ones.
    pub fn all(&self) -> Vec<(&WorkloadRef, u64, usize)> {
        let template = self.tasks.iter().map(|t| (&t.workload, t.ops(), t.uses));
        template.chain(self.auto_tasks.iter().map(|t| (&t.workload, t.ops(), t.uses))).collect()
    }
}

/// Imports the model at `path`, partitions it (`PartitionPolicy::Fusion`, as `tensorlift run`)
/// and groups its quantized convolutions and products that the x86 kernels compute by
/// workload, and the convolutions the engine auto-schedules (`engine::auto_spec`) by theirs.
/// Errors: the import's, and a model without such a partition.
pub fn extract(path: &Path) -> Result<ModelTasks, TaskError> {
    let model =
        crate::onnx::load(path).map_err(|e| TaskError::Import { path: path.to_path_buf(), source: Box::new(e) })?;
    let graph = model.graph;
    let partitions = graph.get_partitions(PartitionPolicy::Fusion);
    let mut tasks: Vec<Task> = Vec::new();
    let mut auto_tasks: Vec<AutoTask> = Vec::new();
    for p in &partitions {
        if !matches!(p.kind, PartitionKind::QuantizedConv(_) | PartitionKind::QuantizedMatMul(_)) {
            continue;
        }
        // A fused residual add is not tuned: the task is the convolution alone.
        let p = &p.without_residual();
        let Ok(spec) = partition_spec(&graph, p) else {
            // The engine's choice: the auto-scheduled kernel, else the reference (no task).
            let Ok((spec, workload)) = auto_spec(&graph, p).and_then(|s| {
                let w = auto_workload_key(&s).map_err(|e| e.to_string())?;
                Ok((s, w))
            }) else {
                continue;
            };
            match auto_tasks.iter_mut().find(|t| t.workload.key == workload.key) {
                Some(t) => t.uses += 1,
                None => auto_tasks.push(AutoTask { workload, spec, partition: p.clone(), uses: 1 }),
            }
            continue;
        };
        let (workload, weights) = workload_key(spec.workload());
        match tasks.iter_mut().find(|t| t.workload.key == workload.key) {
            Some(t) => t.uses += 1,
            None => tasks.push(Task { workload, weights, spec, partition: p.clone(), uses: 1 }),
        }
    }
    if tasks.is_empty() && auto_tasks.is_empty() {
        return Err(TaskError::NoTasks { path: path.to_path_buf(), partitions: partitions.len() });
    }
    Ok(ModelTasks { path: path.to_path_buf(), graph, partitions, tasks, auto_tasks })
}
