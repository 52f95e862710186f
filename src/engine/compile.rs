//! `compile`: each partition of a finalized graph bound to the code that computes it — the x86
//! convolution kernels for quantized convolutions and matrix products (weights prepared once,
//! here), the engine's own loops for the partitions that move little data, and the graph's
//! reference for everything else — with a buffer per tensor, allocated once.

use std::time::{Duration, Instant};

use cranelift_entity::SecondaryMap;
use ir::DType;
use schedules::x86_conv::Conv2dInt8Knobs;

use super::error::EngineError;
use super::kernel::Kernel;
use super::native::Int8;
use super::native::add::AddParams;
use super::native::max_pool::Window as PoolWindow;
use super::slot::Slot;
use crate::graph::partition::{QAdd, QConv, QGlobalAvgPool, QMatMul, QMaxPool, QuantTensor};
use crate::graph::window::Window;
use crate::graph::{DataType, FinalizedGraph, OpKind, Partition, PartitionKind, TensorId};
use crate::layer::{ActQuant, KernelCache, LayerError, QConvSpec, QDenseSpec, compile_qconv_in, compile_qdense_in};
use crate::runtime::CompileOptions;

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
pub enum Workload<'a> {
    Conv(&'a QConvSpec),
    Dense(&'a QDenseSpec),
}

/// A quantized convolution or product as the engine compiled it (`Step::spec`): what an export
/// lowers again for other ISA levels.
#[derive(Clone, Debug)]
pub enum Spec {
    Conv(QConvSpec),
    Dense(QDenseSpec),
}

impl Spec {
    pub fn workload(&self) -> Workload<'_> {
        match self {
            Spec::Conv(c) => Workload::Conv(c),
            Spec::Dense(d) => Workload::Dense(d),
        }
    }
}

/// Chooses the knobs of a workload (`None`: the defaults). `compile` chooses none.
pub type KnobSource<'a> = &'a dyn Fn(Workload<'_>) -> Option<(Conv2dInt8Knobs, Tuning)>;

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
    /// The definition a compiled kernel was compiled from (`None`: not a compiled kernel).
    pub spec: Option<Spec>,
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
        let mut s = Slot::new(lt.dtype, dims);
        if let Some(value) = graph.graph().constant_value(t) {
            s.store(value);
        }
        slots.push(s);
        slot_of[t] = Some(slots.len() - 1);
        Ok(slots.len() - 1)
    };
    // Layers of the same definition and knobs share one compiled function.
    let cache = KernelCache::new();
    let inputs = graph
        .graph()
        .inputs()
        .iter()
        .map(|&t| Ok((t, slot(t, &mut slots)?)))
        .collect::<Result<Vec<_>, EngineError>>()?;
    let mut steps = Vec::with_capacity(partitions.len());
    for partition in partitions {
        let ins = partition.inputs.iter().map(|&t| slot(t, &mut slots)).collect::<Result<Vec<_>, _>>()?;
        let outs = partition.outputs.iter().map(|&t| slot(t, &mut slots)).collect::<Result<Vec<_>, _>>()?;
        let begin = Instant::now();
        let ((kernel, tuning), spec) = choose(&graph, &partition, &ins, &outs, &slots, (options, &cache), knobs)?;
        steps.push(Step { partition, kernel, inputs: ins, outputs: outs, compile: begin.elapsed(), tuning, spec });
    }
    let outputs = graph
        .graph()
        .outputs()
        .iter()
        .map(|&t| Ok((t, slot(t, &mut slots)?)))
        .collect::<Result<Vec<_>, EngineError>>()?;
    Ok(CompiledGraph {
        graph,
        steps,
        slots,
        inputs,
        outputs,
        slot_of,
        options: options.clone(),
        compile_time: start.elapsed(),
    })
}

/// The integer type of a quantized activation.
fn int8(dtype: DataType) -> Option<Int8> {
    match dtype {
        DataType::U8 => Some(Int8::U8),
        DataType::S8 => Some(Int8::S8),
        _ => None,
    }
}

fn act(q: &QuantTensor) -> ActQuant {
    let dtype = if q.dtype == DataType::S8 { DType::I8 } else { DType::U8 };
    ActQuant { dtype, scale: q.scale, zero_point: q.zero_point }
}

/// Whether an activation's integer effect is a ReLU (`Some(true)`), nothing (`Some(false)`) or
/// something the compiled kernels do not express (`None`).
fn relu(clamp: (i32, i32), dst: &QuantTensor) -> Option<bool> {
    let (lo, hi) = dst.range();
    if clamp == (lo, hi) {
        Some(false)
    } else if clamp == (dst.zero_point.max(lo), hi) {
        Some(true)
    } else {
        None
    }
}

/// The name of a partition's first op (its ONNX node, for an imported model).
fn partition_name(graph: &FinalizedGraph, p: &Partition) -> String {
    let op = p.ops.iter().rev().find_map(|&o| graph.op(o)).map(|op| op.name.clone()).unwrap_or_default();
    format!("{} {}", p.id, op)
}

/// A 2-D window with equal strides and equal pads everywhere and no dilation: `(stride, pad)`.
fn square_window(w: &Window) -> Option<(usize, usize)> {
    let (s, p) = (*w.strides.first()?, *w.pads_begin.first()?);
    let square = w.rank() == 2
        && w.strides.iter().all(|&x| x == s)
        && w.pads_begin.iter().chain(&w.pads_end).all(|&x| x == p)
        && w.dilations.iter().all(|&d| d == 1);
    square.then_some((s, p))
}

type Chosen = (Kernel, Option<Tuning>);

/// A kernel, with the definition of a compiled one.
type ChosenSpec = (Chosen, Option<Spec>);

fn reference(why: impl Into<String>) -> Chosen {
    (Kernel::Reference { why: why.into() }, None)
}

fn native(kernel: Kernel) -> Chosen {
    (kernel, None)
}

/// The kernel of one partition.
fn choose(
    graph: &FinalizedGraph,
    p: &Partition,
    ins: &[usize],
    outs: &[usize],
    slots: &[Slot],
    (options, cache): (&CompileOptions, &KernelCache),
    knobs: KnobSource<'_>,
) -> Result<ChosenSpec, EngineError> {
    let layer_error =
        |e| EngineError::Layer { partition: partition_name(graph, p), kind: p.kind.name(), source: Box::new(e) };
    if outs.len() != 1 {
        return Ok((reference(format!("{} outputs", outs.len())), None));
    }
    let out = &slots[outs[0]];
    match &p.kind {
        PartitionKind::QuantizedConv(c) => {
            conv(graph, p, c, ins.first().map(|&i| &slots[i]), (options, cache), knobs).map_err(layer_error)
        }
        PartitionKind::QuantizedMatMul(m) => {
            dense(graph, p, m, ins.first().map(|&i| &slots[i]), (options, cache), knobs).map_err(layer_error)
        }
        PartitionKind::QuantizedAdd(a) => Ok((quantized_add(a, ins, slots), None)),
        PartitionKind::QuantizedMaxPool(m) => Ok((quantized_max_pool(m, ins.first().map(|&i| &slots[i]), out), None)),
        PartitionKind::QuantizedGlobalAvgPool(g) => Ok((quantized_gap(g, ins.first().map(|&i| &slots[i]), out), None)),
        PartitionKind::Single(op) => Ok((single(op, ins, slots, out), None)),
        PartitionKind::Unsupported { reason, .. } => Ok((reference(reason.clone()), None)),
    }
}

fn conv(
    graph: &FinalizedGraph,
    p: &Partition,
    c: &QConv,
    src: Option<&Slot>,
    (options, cache): (&CompileOptions, &KernelCache),
    knobs: KnobSource<'_>,
) -> Result<ChosenSpec, LayerError> {
    let Some(src) = src else { return Ok((reference("no source"), None)) };
    let Some((stride, pad)) = square_window(&c.window) else {
        return Ok((reference("strides, pads or dilations differ between dimensions"), None));
    };
    let Some(relu) = relu(c.clamp, &c.dst) else { return Ok((reference("a clip the kernels do not fuse"), None)) };
    let [n, ic, h, w] = src.nchw();
    if n != 1 || c.groups != 1 || c.weight_dims.len() != 4 {
        return Ok((reference(format!("batch {n}, groups {}", c.groups)), None));
    }
    let spec = QConvSpec {
        name: partition_name(graph, p).replace(' ', "_"),
        src: act(&c.src),
        h: h as i64,
        w: w as i64,
        ic: ic as i64,
        oc: c.weight_dims[0] as i64,
        kh: c.weight_dims[2] as i64,
        kw: c.weight_dims[3] as i64,
        stride: (stride as i64, stride as i64),
        pads: [pad as i64; 4],
        weights: c.weights.clone(),
        weight_scales: c.weight_scales.clone(),
        bias: c.bias.clone(),
        dst: act(&c.dst),
        relu,
    };
    let (chosen, tuning) = knobs(Workload::Conv(&spec)).map_or((None, Tuning::Default), |(k, t)| (Some(k), t));
    let compiled = compile_qconv_in(cache, &spec, chosen, options)?;
    Ok(((Kernel::Conv(Box::new(compiled)), Some(tuning)), Some(Spec::Conv(spec))))
}

fn dense(
    graph: &FinalizedGraph,
    p: &Partition,
    m: &QMatMul,
    src: Option<&Slot>,
    (options, cache): (&CompileOptions, &KernelCache),
    knobs: KnobSource<'_>,
) -> Result<ChosenSpec, LayerError> {
    let Some(src) = src else { return Ok((reference("no source"), None)) };
    let Some(relu) = relu(m.clamp, &m.dst) else { return Ok((reference("a clip the kernels do not fuse"), None)) };
    let &[rows, k] = &src.dims[..] else { return Ok((reference("a source that is not 2-D"), None)) };
    let spec = QDenseSpec {
        name: partition_name(graph, p).replace(' ', "_"),
        src: act(&m.src),
        m: rows as i64,
        k: k as i64,
        n: m.weight_dims[1] as i64,
        weights: m.weights.clone(),
        weight_scales: m.weight_scales.clone(),
        bias: m.bias.clone(),
        alpha: 1.0,
        dst: act(&m.dst),
        relu,
    };
    let (chosen, tuning) = knobs(Workload::Dense(&spec)).map_or((None, Tuning::Default), |(k, t)| (Some(k), t));
    let compiled = compile_qdense_in(cache, &spec, chosen, options)?;
    Ok(((Kernel::Dense(Box::new(compiled)), Some(tuning)), Some(Spec::Dense(spec))))
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
                Some(ty) => {
                    native(Kernel::Quantize { scale: q.params.scales[0], zero_point: q.params.zero_points[0], ty })
                }
                None => reference("not an 8-bit quantization"),
            }
        }
        (OpKind::Dequantize(q), Some(src)) if q.axis.is_none() && out.dtype == DataType::F32 => match int8(src.dtype) {
            Some(ty) => native(Kernel::Dequantize { scale: q.scales[0], zero_point: q.zero_points[0], ty }),
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
