//! `compile`: each partition of a finalized graph bound to the code that computes it — the x86
//! convolution kernels for quantized convolutions and matrix products (weights prepared once,
//! here), the engine's own loops for the partitions that move little data, and the graph's
//! reference for everything else — with a buffer per tensor, allocated once.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use cranelift_entity::SecondaryMap;
use schedules::auto::AutoPoint;
use schedules::x86_conv::Conv2dInt8Knobs;

use super::error::EngineError;
use super::jobs::{Job, Work, compile_jobs};
use super::kernel::Kernel;
use super::native::add::AddParams;
use super::native::max_pool::Window as PoolWindow;
use super::native::{Affine, Int8};
use super::share::{self, Sharing};
use super::slot::{Bytes, Slot};
use super::spec::{auto_spec, partition_name, partition_spec};
use crate::graph::partition::{QAdd, QConv, QGlobalAvgPool, QMaxPool, QuantTensor, Residual};
use crate::graph::{DataType, FinalizedGraph, OpKind, Partition, PartitionKind, TensorId};
use crate::layer::{KernelCache, QConvAutoSpec, QConvSpec, QDenseSpec};
use crate::runtime::CompileOptions;
use crate::runtime::host::Pool;

/// Where a compiled kernel's knobs came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tuning {
    /// A record of the user's tuning database.
    Tuned,
    /// A record of the repository's pre-tuned database.
    Pretuned,
    /// The default knobs for the geometry.
    Default,
}

impl Tuning {
    pub fn name(self) -> &'static str {
        match self {
            Tuning::Tuned => "tuned",
            Tuning::Pretuned => "pretuned",
            Tuning::Default => "default",
        }
    }
}

/// A workload whose knobs a tuning database may hold.
#[derive(Clone, Copy)]
pub enum Workload<'a> {
    Conv(&'a QConvSpec),
    Dense(&'a QDenseSpec),
}

/// Chooses the knobs of a workload (`None`: the defaults). `compile` chooses none.
pub type KnobSource<'a> = &'a dyn Fn(Workload<'_>) -> Option<(Conv2dInt8Knobs, Tuning)>;

/// Chooses the point of the auto-scheduler's space an auto-scheduled convolution is compiled
/// at (`None`: the rules' point, `layer::compile_qconv_auto`). `compile_with` chooses none.
pub type AutoSource<'a> = &'a dyn Fn(&QConvAutoSpec) -> Option<(AutoPoint, Tuning)>;

/// One partition bound to its kernel and buffers.
pub struct Step {
    pub partition: Partition,
    pub kernel: Kernel,
    /// Slots of the partition's inputs and outputs, in its order.
    pub inputs: Vec<usize>,
    pub outputs: Vec<usize>,
    /// Compiling the kernel and preparing its weights.
    pub compile: Duration,
    /// Where a compiled kernel's knobs came from (`None`: not a compiled kernel).
    pub tuning: Option<Tuning>,
}

/// A graph compiled for this CPU: run it with `CompiledGraph::execute`.
pub struct CompiledGraph {
    pub(super) graph: FinalizedGraph,
    pub(super) steps: Vec<Step>,
    pub(super) slots: Vec<Slot>,
    /// The slots of the graph's inputs and outputs, in the graph's order.
    pub(super) inputs: Vec<(TensorId, usize)>,
    pub(super) outputs: Vec<(TensorId, usize)>,
    /// The slot of each tensor the engine keeps.
    pub(super) slot_of: SecondaryMap<TensorId, Option<usize>>,
    pub(super) options: CompileOptions,
    pub(super) compile_time: Duration,
    /// Of `compile_time`, the convolutions and products compiled on every core.
    pub(super) jobs_time: Duration,
    /// Tuning records that could not be applied, and why (their partitions run the defaults).
    pub(super) warnings: Vec<String>,
    /// The weights the layers carry (the weight arena's first pages are faulted in for them
    /// while the layers are planned) and the bytes packed into the arena (`layer_weight_bytes`,
    /// `WeightArena`).
    pub(super) arena_bytes: (usize, usize),
    /// The pool the native kernels split their loops across (`None`: one thread).
    pub(super) pool: Option<Arc<Pool>>,
    /// Which written tensors share buffers (`share::plan`), and each shared buffer's holder:
    /// the slot of the tensor written last into it.
    pub(super) sharing: Sharing,
    pub(super) holders: Vec<usize>,
    /// The graph input the first step quantizes straight from the caller's value, and whether
    /// it also stores it (`quantized_input`).
    pub(super) quantized_input: Option<(usize, bool)>,
}

/// Compiles `partitions` (from `graph.get_partitions`) with `options` (ISA level, threads).
/// Every tensor's shape must be known. A partition no kernel here computes runs on the graph's
/// reference; `CompiledGraph::steps` says which.
pub fn compile(
    graph: FinalizedGraph,
    partitions: Vec<Partition>,
    options: &CompileOptions,
) -> Result<CompiledGraph, EngineError> {
    compile_with(graph, partitions, options, &|_| None)
}

/// `compile` with the knobs of each convolution and product chosen by `knobs`.
pub fn compile_with(
    graph: FinalizedGraph,
    partitions: Vec<Partition>,
    options: &CompileOptions,
    knobs: KnobSource<'_>,
) -> Result<CompiledGraph, EngineError> {
    compile_tuned(graph, partitions, options, knobs, &|_| None)
}

/// `compile_with`, and the point of each auto-scheduled convolution chosen by `auto`. A point
/// its space rejects falls back to the rules' point, its partition `Tuning::Default`, with a
/// warning (`CompiledGraph::warnings`).
pub fn compile_tuned(
    graph: FinalizedGraph,
    partitions: Vec<Partition>,
    options: &CompileOptions,
    knobs: KnobSource<'_>,
    auto: AutoSource<'_>,
) -> Result<CompiledGraph, EngineError> {
    let start = Instant::now();
    let mut slots: Vec<Slot> = Vec::new();
    let mut slot_of: SecondaryMap<TensorId, Option<usize>> = SecondaryMap::new();
    let mut slot = |t: TensorId, slots: &mut Vec<Slot>| -> Result<usize, EngineError> {
        if let Some(s) = slot_of[t] {
            return Ok(s);
        }
        let lt = graph.tensor(t).ok_or(crate::graph::GraphError::UnknownGraphTensor { tensor: t })?;
        let dims = lt.shape.concrete().ok_or_else(|| EngineError::Unknown {
            tensor: lt.name.clone(),
            what: "the shape",
            found: format!("{}", lt.shape),
        })?;
        // A constant's buffer now, the others' once the steps say which share (`share`).
        let s = match graph.graph().constant_value(t) {
            Some(value) => {
                let mut s = Slot::new(lt.dtype, dims);
                s.store(value);
                s
            }
            None => Slot::unallocated(lt.dtype, dims),
        };
        slots.push(s);
        slot_of[t] = Some(slots.len() - 1);
        Ok(slots.len() - 1)
    };
    let inputs = graph
        .graph()
        .inputs()
        .iter()
        .map(|&t| Ok((t, slot(t, &mut slots)?)))
        .collect::<Result<Vec<_>, EngineError>>()?;
    // The layers' packed weights are cut from one reservation (`WeightArena`: fresh pages are
    // faulted one huge page at a time, none left partly used per layer), made before planning
    // from the weights the convolutions and products carry. Packed entries take up to twice
    // the weights' bytes (i16 at levels without VNNI) and panels and rows pad them; the
    // reservation is address space, so it is ample, and a layer that does not fit allocates its own.
    let weights = layer_weight_bytes(&partitions);
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let cache = KernelCache::with_weight_arena(weights.saturating_mul(4));
    // First what each partition needs (the convolutions and products to compile, the others'
    // kernels), then those compiled on every core (`jobs::compile_jobs`). Planning takes one
    // core: meanwhile another faults in the arena's first `weights` bytes, which every packed
    // layout writes (it takes at least a byte per weight), so that the threads packing them do
    // not pay for the fresh pages; it stops when planning ends, so as not to compete with the
    // compiling threads for the cores (the pages it did not reach fault when first written).
    let planned_all = AtomicBool::new(false);
    let (planned, mut compiled, jobs_time) = std::thread::scope(|scope| -> Result<_, EngineError> {
        if cores > 1 {
            scope.spawn(|| cache.populate_weight_arena(weights, &planned_all));
        }
        let mut planned = Vec::with_capacity(partitions.len());
        for partition in partitions {
            let ins = partition.inputs.iter().map(|&t| slot(t, &mut slots)).collect::<Result<Vec<_>, _>>()?;
            let outs = partition.outputs.iter().map(|&t| slot(t, &mut slots)).collect::<Result<Vec<_>, _>>()?;
            let begin = Instant::now();
            let plan = plan(&graph, &partition, &ins, &outs, &slots, (knobs, auto))?;
            planned.push((partition, ins, outs, plan, begin.elapsed()));
        }
        planned_all.store(true, Ordering::Relaxed);
        let jobs = || {
            planned.iter().enumerate().filter_map(|(i, (.., plan, _))| match plan {
                Plan::Job(job) => Some((i, &**job)),
                Plan::Chosen(_) => None,
            })
        };
        let jobs_start = Instant::now();
        let compiled = compile_jobs(jobs(), options, &cache);
        Ok((planned, compiled, jobs_start.elapsed()))
    })?;
    let mut steps = Vec::with_capacity(planned.len());
    let mut warnings = Vec::new();
    for (i, (partition, ins, outs, plan, planning)) in planned.into_iter().enumerate() {
        let (kernel, tuning, compile) = match plan {
            Plan::Chosen((kernel, tuning)) => (kernel, tuning, planning),
            Plan::Job(job) => {
                let (result, time) = compiled.remove(&i).expect("every job is compiled");
                let mut tuning = match job.work {
                    Work::Layer { tuning, .. } => Some(tuning),
                    Work::Auto { tuning, .. } => Some(tuning),
                };
                let kernel = result.map_err(|e| EngineError::Layer {
                    partition: partition_name(&graph, &partition),
                    kind: partition.kind.name(),
                    source: Box::new(e),
                })?;
                if let Kernel::Auto(c) = &kernel
                    && let Some(why) = c.rejected()
                {
                    let name = partition_name(&graph, &partition);
                    warnings.push(format!(
                        "partition {name}: the tuning record is not applied ({why}): the rules' point runs"
                    ));
                    tuning = Some(Tuning::Default);
                }
                (with_sum(&partition.kind, kernel), tuning, planning + time)
            }
        };
        steps.push(Step { partition, kernel, inputs: ins, outputs: outs, compile, tuning });
    }
    let outputs = graph
        .graph()
        .outputs()
        .iter()
        .map(|&t| Ok((t, slot(t, &mut slots)?)))
        .collect::<Result<Vec<_>, EngineError>>()?;
    let quantized = quantized_input(&steps, &slots, &inputs, &outputs);
    let (sharing, holders) = allocate(&steps, &mut slots, &inputs, &outputs, quantized);
    // The pool the compiled kernels' parallel loops run on (`runtime::host::pool`).
    let threads = options
        .threads
        .filter(|&t| t > 0)
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let pool = if threads > 1 {
        Some(crate::runtime::host::pool(threads).map_err(|e| EngineError::Runtime(Box::new(e)))?)
    } else {
        None
    };
    Ok(CompiledGraph {
        pool,
        graph,
        steps,
        slots,
        inputs,
        outputs,
        slot_of,
        options: options.clone(),
        compile_time: start.elapsed(),
        jobs_time,
        warnings,
        arena_bytes: (weights, cache.weight_arena_used()),
        sharing,
        holders,
        quantized_input: quantized,
    })
}

/// Allocates every slot's buffer: the tensors the steps write share buffers where their
/// lifetimes allow (`share::plan`; the graph's inputs and outputs keep their own), each shared
/// buffer allocated once, to the last of its tensors, from which the first takes it at the next
/// run; the other slots get buffers of their own, but an input the first step quantizes
/// straight from the caller's value without storing it (`quantized`, from `quantized_input`). Returns
/// the sharing and each shared buffer's holder.
fn allocate(
    steps: &[Step],
    slots: &mut [Slot],
    inputs: &[(TensorId, usize)],
    outputs: &[(TensorId, usize)],
    quantized: Option<(usize, bool)>,
) -> (Sharing, Vec<usize>) {
    // The constants (stored already) and the graph's inputs and outputs keep their buffers.
    let mut pinned: Vec<bool> = slots.iter().map(|s| s.bytes.holds() && s.bytes.size() > 0).collect();
    for &(_, s) in inputs.iter().chain(outputs) {
        pinned[s] = true;
    }
    let accesses: Vec<_> = steps.iter().map(|s| (s.inputs.clone(), s.outputs.clone())).collect();
    let sizes: Vec<usize> = slots.iter().map(|s| s.bytes.size()).collect();
    let sharing = share::plan(&accesses, &sizes, &pinned);
    let mut holders = Vec::with_capacity(sharing.buffers.len());
    for buffer in &sharing.buffers {
        let last = *buffer.slots.last().expect("a shared buffer has tensors");
        slots[last].bytes = Bytes::zeroed(sizes[last], buffer.bytes);
        holders.push(last);
    }
    let shared: std::collections::HashSet<usize> = sharing.buffers.iter().flat_map(|b| b.slots.clone()).collect();
    // An input read straight from the caller's value and never stored needs no buffer.
    let unstored = quantized.and_then(|(k, kept)| (!kept).then(|| inputs[k].1));
    for (s, slot) in slots.iter_mut().enumerate() {
        if !shared.contains(&s) && !slot.bytes.holds() && unstored != Some(s) {
            slot.bytes = Bytes::zeroed(sizes[s], 0);
        }
    }
    (sharing, holders)
}

/// The bytes of the weights the convolution and product partitions carry, known before the
/// partitions are planned (each layer job's `Job::weight_bytes`).
fn layer_weight_bytes(partitions: &[Partition]) -> usize {
    partitions
        .iter()
        .map(|p| match &p.kind {
            PartitionKind::QuantizedConv(c) => c.weights.len(),
            PartitionKind::QuantizedMatMul(m) => m.weights.len(),
            _ => 0,
        })
        .sum()
}

/// The integer type of a quantized activation.
fn int8(dtype: DataType) -> Option<Int8> {
    match dtype {
        DataType::U8 => Some(Int8::U8),
        DataType::S8 => Some(Int8::S8),
        _ => None,
    }
}

type Chosen = (Kernel, Option<Tuning>);

fn reference(why: impl Into<String>) -> Chosen {
    (Kernel::Reference { why: why.into() }, None)
}

fn native(kernel: Kernel) -> Chosen {
    (kernel, None)
}

/// What one partition needs: its kernel, or a convolution or product to compile.
enum Plan {
    Chosen(Chosen),
    Job(Box<Job>),
}

/// The kernel of one partition, or what to compile for it (a convolution's or product's
/// weights shared with the job, not copied).
fn plan(
    graph: &FinalizedGraph,
    p: &Partition,
    ins: &[usize],
    outs: &[usize],
    slots: &[Slot],
    (knobs, auto): (KnobSource<'_>, AutoSource<'_>),
) -> Result<Plan, EngineError> {
    if outs.len() != 1 {
        return Ok(Plan::Chosen(reference(format!("{} outputs", outs.len()))));
    }
    let out = &slots[outs[0]];
    if let PartitionKind::QuantizedConv(c) = &p.kind
        && let Some(r) = &c.residual
        && let Err(why) = sum_fits(c, r, ins, slots, out)
    {
        return Ok(Plan::Chosen(reference(why)));
    }
    Ok(match &p.kind {
        PartitionKind::QuantizedConv(_) | PartitionKind::QuantizedMatMul(_) => match partition_spec(graph, p) {
            Ok(spec) => {
                let (chosen, tuning) = knobs(spec.workload()).map_or((None, Tuning::Default), |(k, t)| (Some(k), t));
                Plan::Job(Box::new(Job { work: Work::Layer { layer: spec, knobs: chosen, tuning } }))
            }
            // A convolution the x86 path does not take: the auto-scheduled definition.
            Err(why) => match auto_spec(graph, p) {
                Ok(spec) => {
                    let (point, tuning) = auto(&spec).map_or((None, Tuning::Default), |(p, t)| (Some(p), t));
                    Plan::Job(Box::new(Job { work: Work::Auto { spec, point: point.map(Box::new), tuning } }))
                }
                Err(auto_why) => Plan::Chosen(reference(format!("{why}; {auto_why}"))),
            },
        },
        PartitionKind::QuantizedAdd(a) => Plan::Chosen(quantized_add(a, ins, slots)),
        PartitionKind::QuantizedMaxPool(m) => Plan::Chosen(quantized_max_pool(m, ins.first().map(|&i| &slots[i]), out)),
        PartitionKind::QuantizedGlobalAvgPool(g) => {
            Plan::Chosen(quantized_gap(g, ins.first().map(|&i| &slots[i]), out))
        }
        PartitionKind::Single(op) => Plan::Chosen(single(op, ins, slots, out)),
        PartitionKind::Unsupported { reason, .. } => Plan::Chosen(reference(reason.clone())),
    })
}

/// Whether a convolution's residual add can be computed with it (in its requantization, or by
/// the native add in place, `Kernel::Sum`): one integer type throughout, the other operand
/// stored as the output is, or why not.
fn sum_fits(c: &QConv, r: &Residual, ins: &[usize], slots: &[Slot], out: &Slot) -> Result<(), String> {
    let other = ins.last().map(|&i| &slots[i]).ok_or("no residual operand")?;
    let same = other.dims == out.dims && other.nhwc == out.nhwc && other.dtype == out.dtype;
    let ty = c.dst.dtype;
    let types = r.add.a.dtype == ty && r.add.b.dtype == ty && r.add.dst.dtype == ty && int8(ty).is_some();
    if same && types { Ok(()) } else { Err("a residual add of other shapes or mixed types".into()) }
}

/// A compiled convolution with its partition's residual add, if it has one and does not
/// compute it in its own requantization (`QConvSpec::sum`; the auto-scheduled kernel does not).
fn with_sum(kind: &PartitionKind, conv: Kernel) -> Kernel {
    if let Kernel::Conv(c) = &conv
        && c.has_sum()
    {
        return conv;
    }
    let PartitionKind::QuantizedConv(QConv { residual: Some(r), dst, .. }) = kind else { return conv };
    let Some(ty) = int8(dst.dtype) else { return conv };
    let q = |t: &QuantTensor| (t.scale, t.zero_point);
    let params = AddParams { a: q(&r.add.a), b: q(&r.add.b), c: q(&r.add.dst) };
    Kernel::Sum { conv: Box::new(conv), params, ty, clamp: r.add.clamp, conv_is_a: r.conv_is_a }
}

fn quantized_add(a: &QAdd, ins: &[usize], slots: &[Slot]) -> Chosen {
    let same = ins.len() == 2 && slots[ins[0]].dims == slots[ins[1]].dims && slots[ins[0]].nhwc == slots[ins[1]].nhwc;
    let types = a.a.dtype == a.dst.dtype && a.b.dtype == a.dst.dtype;
    match int8(a.dst.dtype) {
        Some(ty) if same && types => {
            let q = |t: &QuantTensor| (t.scale, t.zero_point);
            native(Kernel::Add { params: AddParams { a: q(&a.a), b: q(&a.b), c: q(&a.dst) }, ty, clamp: a.clamp })
        }
        _ => reference("broadcast or mixed types"),
    }
}

fn quantized_max_pool(m: &QMaxPool, src: Option<&Slot>, out: &Slot) -> Chosen {
    let w = &m.window;
    match (int8(m.dtype), src) {
        (Some(ty), Some(src)) if src.nhwc && out.nhwc && w.rank() == 2 => {
            let pair = |v: &[usize]| [v[0], v[1]];
            let window = PoolWindow {
                kernel: pair(&w.kernel),
                stride: pair(&w.strides),
                pad_begin: pair(&w.pads_begin),
                dilation: pair(&w.dilations),
            };
            native(Kernel::MaxPool { window, ty })
        }
        _ => reference("not a 2-D pooling of 8-bit integers"),
    }
}

fn quantized_gap(g: &QGlobalAvgPool, src: Option<&Slot>, out: &Slot) -> Chosen {
    match (int8(g.src.dtype), src) {
        (Some(ty), Some(src)) if src.nhwc && g.dst.dtype == g.src.dtype && out.dims.len() == 4 => {
            let q = |t: &QuantTensor| (t.scale, t.zero_point);
            native(Kernel::GlobalAvgPool { x: q(&g.src), y: q(&g.dst), ty })
        }
        _ => reference("not a 4-D pooling of 8-bit integers"),
    }
}

fn single(op: &OpKind, ins: &[usize], slots: &[Slot], out: &Slot) -> Chosen {
    let src = ins.first().map(|&i| &slots[i]);
    match (op, src) {
        (OpKind::Quantize(q), Some(src)) if q.params.axis.is_none() && src.dtype == DataType::F32 => {
            match int8(q.dtype) {
                Some(ty) => native(Kernel::Quantize(Affine {
                    scale: q.params.scales[0],
                    zero_point: q.params.zero_points[0],
                    ty,
                })),
                None => reference("not an 8-bit quantization"),
            }
        }
        (OpKind::Dequantize(q), Some(src)) if q.axis.is_none() && out.dtype == DataType::F32 => match int8(src.dtype) {
            Some(ty) => native(Kernel::Dequantize(Affine { scale: q.scales[0], zero_point: q.zero_points[0], ty })),
            None => reference("not an 8-bit dequantization"),
        },
        // A reshape keeps the logical order; the stored bytes stay where they are unless one
        // side is NHWC with more than one pixel.
        (OpKind::StaticReshape(_), Some(src))
            if ins.len() == 1
                && (!src.nhwc || src.dims[2] * src.dims[3] == 1)
                && (!out.nhwc || out.dims[2] * out.dims[3] == 1) =>
        {
            native(Kernel::Copy)
        }
        _ => reference("no native kernel for this op"),
    }
}

/// The graph input (its index) that the first step, a native quantization, reads straight from
/// the caller's value (`CompiledGraph::run_quantize_copying`), and whether the step also stores
/// it into its buffer as it reads it: f32 in the logical order, where a later step or the
/// graph's outputs read that buffer, so that one pass over the input replaces a copy and a
/// read; otherwise the buffer is never written, nor allocated (`allocate`;
/// `CompiledGraph::value` says so).
fn quantized_input(
    steps: &[Step],
    slots: &[Slot],
    inputs: &[(TensorId, usize)],
    outputs: &[(TensorId, usize)],
) -> Option<(usize, bool)> {
    let step = steps.first()?;
    let (Kernel::Quantize(_), &[s]) = (&step.kernel, &step.inputs[..]) else { return None };
    let k = inputs.iter().position(|&(_, slot)| slot == s)?;
    let plain = !slots[s].nhwc && slots[s].dtype == DataType::F32;
    let read_later =
        steps[1..].iter().any(|step| step.inputs.contains(&s)) || outputs.iter().any(|&(_, slot)| slot == s);
    plain.then_some((k, read_later))
}
