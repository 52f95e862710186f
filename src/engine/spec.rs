//! `partition_spec`: the kernel spec (`layer::QConvSpec`, `QDenseSpec`) of a quantized
//! convolution or matrix-product partition, or why the x86 kernels do not compute it. The
//! engine compiles from it, and the tuner's task extraction (`tune::tasks`) keys workloads by
//! it, so that both see the same geometry.

use ir::DType;

use schedules::quant::QLinearAdd;
use schedules::x86_conv::Conv2dInt8Knobs;

use super::compile::Workload;
use super::native::add::AddParams;
use crate::graph::partition::{QConv, QMatMul, QuantTensor, Residual};
use crate::graph::window::Window;
use crate::graph::{FinalizedGraph, Partition, PartitionKind};
use crate::layer::{
    ActQuant, CompiledQuantized, KernelCache, LayerError, QConvAutoSpec, QConvSpec, QDenseSpec, compile_qconv_in,
    compile_qdense_in,
};
use crate::runtime::CompileOptions;

/// The spec of a partition the x86 kernels compute.
#[derive(Clone, Debug, PartialEq)]
pub enum Spec {
    Conv(QConvSpec),
    Dense(QDenseSpec),
}

impl Spec {
    /// The spec as the knob sources see it.
    pub fn workload(&self) -> Workload<'_> {
        match self {
            Spec::Conv(c) => Workload::Conv(c),
            Spec::Dense(d) => Workload::Dense(d),
        }
    }

    /// Operations per call (two per multiply-accumulate).
    pub fn ops(&self) -> u64 {
        match self {
            Spec::Conv(c) => c.ops(),
            Spec::Dense(d) => d.ops(),
        }
    }

    /// The weights (`[OC, IC, KH, KW]` of a convolution; `[K, N]` of a product, or `[N, K]` where
    /// `QDenseSpec::weights_transposed`).
    pub fn weights(&self) -> &[i8] {
        match self {
            Spec::Conv(c) => &c.weights,
            Spec::Dense(d) => &d.weights,
        }
    }

    /// Compiles the spec with `knobs` (`None`: the defaults for its geometry), taking the
    /// function from `cache` where an earlier spec compiled it (`layer::compile_qconv_in`,
    /// `compile_qdense_in`): what the engine compiles each partition with.
    pub fn compile_in(
        &self,
        cache: &KernelCache,
        knobs: Option<Conv2dInt8Knobs>,
        options: &CompileOptions,
    ) -> Result<CompiledQuantized, LayerError> {
        match self {
            Spec::Conv(c) => compile_qconv_in(cache, c, knobs, options),
            Spec::Dense(d) => compile_qdense_in(cache, d, knobs, options),
        }
    }
}

/// The spec of `p` (a `QuantizedConv` or `QuantizedMatMul` partition of `graph`), or why the
/// x86 kernels do not compute it (the engine then runs the graph's reference).
pub fn partition_spec(graph: &FinalizedGraph, p: &Partition) -> Result<Spec, String> {
    let src = p.inputs.first().and_then(|&t| graph.tensor(t)).ok_or("no source")?;
    let dims = src.shape.concrete().ok_or_else(|| format!("a source of unknown shape {}", src.shape))?;
    let name = partition_name(graph, p).replace(' ', "_");
    match &p.kind {
        PartitionKind::QuantizedConv(c) => conv(name, c, &dims).map(Spec::Conv),
        PartitionKind::QuantizedMatMul(m) => dense(name, m, &dims).map(Spec::Dense),
        other => Err(format!("a {} partition, not a quantized convolution or matmul", other.name())),
    }
}

/// The name of a partition's first op (its ONNX node, for an imported model).
pub(super) fn partition_name(graph: &FinalizedGraph, p: &Partition) -> String {
    let op = p.ops.iter().rev().find_map(|&o| graph.op(o)).map(|op| op.name.clone()).unwrap_or_default();
    format!("{} {}", p.id, op)
}

fn act(q: &QuantTensor) -> ActQuant {
    let dtype = if q.dtype == crate::graph::DataType::S8 { DType::I8 } else { DType::U8 };
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

/// A 2-D window with equal strides and equal pads everywhere and no dilation: `(stride, pad)`.
fn square_window(w: &Window) -> Option<(usize, usize)> {
    let (s, p) = (*w.strides.first()?, *w.pads_begin.first()?);
    let square = w.rank() == 2
        && w.strides.iter().all(|&x| x == s)
        && w.pads_begin.iter().chain(&w.pads_end).all(|&x| x == p)
        && w.dilations.iter().all(|&d| d == 1);
    square.then_some((s, p))
}

fn conv(name: String, c: &QConv, dims: &[usize]) -> Result<QConvSpec, String> {
    let (stride, pad) = square_window(&c.window).ok_or("strides, pads or dilations differ between dimensions")?;
    let relu = relu(c.clamp, &c.dst).ok_or("a clip the kernels do not fuse")?;
    let &[n, ic, h, w] = dims else { return Err(format!("a source of rank {}, not 4", dims.len())) };
    if n != 1 || c.groups != 1 || c.weight_dims.len() != 4 {
        return Err(format!("batch {n}, groups {}", c.groups));
    }
    Ok(QConvSpec {
        name,
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
        sum: c.residual.as_deref().map(qlinear_add),
    })
}

/// A convolution's residual add as the layer's fused QLinearAdd, its constants formed as the
/// native add forms them (`AddParams::constants`).
fn qlinear_add(r: &Residual) -> QLinearAdd {
    let q = |t: &QuantTensor| (t.scale, t.zero_point);
    let (ra, rb, fixed) = AddParams { a: q(&r.add.a), b: q(&r.add.b), c: q(&r.add.dst) }.constants();
    QLinearAdd { ra, rb, fixed, dst_is_a: r.conv_is_a, clamp: r.add.clamp }
}

fn dense(name: String, m: &QMatMul, dims: &[usize]) -> Result<QDenseSpec, String> {
    let relu = relu(m.clamp, &m.dst).ok_or("a clip the kernels do not fuse")?;
    let &[rows, k] = dims else { return Err("a source that is not 2-D".into()) };
    Ok(QDenseSpec {
        name,
        src: act(&m.src),
        m: rows as i64,
        k: k as i64,
        n: m.weight_dims[1] as i64,
        weights: m.weights.clone(),
        weights_transposed: m.weights_transposed,
        weight_scales: m.weight_scales.clone(),
        bias: m.bias.clone(),
        alpha: 1.0,
        dst: act(&m.dst),
        relu,
    })
}

/// The spec of a `QuantizedConv` partition for the auto-scheduled kernel
/// (`layer::compile_qconv_auto`): any 2-D geometry, or why not (the engine then runs the graph's
/// reference). The export lowers an `Auto` step's convolution again from it, per level.
pub fn auto_spec(graph: &FinalizedGraph, p: &Partition) -> Result<QConvAutoSpec, String> {
    let PartitionKind::QuantizedConv(c) = &p.kind else {
        return Err(format!("a {} partition, not a quantized convolution", p.kind.name()));
    };
    let src = p.inputs.first().and_then(|&t| graph.tensor(t)).ok_or("no source")?;
    let dims = src.shape.concrete().ok_or_else(|| format!("a source of unknown shape {}", src.shape))?;
    let (&[n, ic, h, w], &[oc, _, kh, kw]) = (dims.as_slice(), c.weight_dims.as_slice()) else {
        return Err(format!("a source of rank {} and weights of rank {}, not 2-D", dims.len(), c.weight_dims.len()));
    };
    let w2 = &c.window;
    if w2.rank() != 2 || w2.pads_begin.len() != 2 || w2.pads_end.len() != 2 || w2.dilations.len() != 2 {
        return Err(format!("a window of rank {}, not 2", w2.rank()));
    }
    if w2.ceil_mode {
        return Err("output sizes rounded up".into());
    }
    let i = |v: usize| v as i64;
    let spec = QConvAutoSpec {
        name: partition_name(graph, p).replace(' ', "_"),
        src: act(&c.src),
        n: i(n),
        h: i(h),
        w: i(w),
        ic: i(ic),
        oc: i(oc),
        kh: i(kh),
        kw: i(kw),
        groups: i(c.groups),
        strides: (i(w2.strides[0]), i(w2.strides[1])),
        pads: [i(w2.pads_begin[0]), i(w2.pads_begin[1]), i(w2.pads_end[0]), i(w2.pads_end[1])],
        dilations: (i(w2.dilations[0]), i(w2.dilations[1])),
        weights: c.weights.clone(),
        weight_scales: c.weight_scales.clone(),
        bias: c.bias.clone(),
        dst: act(&c.dst),
        clamp: c.clamp,
    };
    let (oh, ow) = spec.output_hw();
    let out = p.outputs.first().and_then(|&t| graph.tensor(t)).and_then(|t| t.shape.concrete());
    if out.as_deref() != Some(&[n, oc, oh as usize, ow as usize][..]) {
        return Err(format!("an output of {out:?}, expected [{n}, {oc}, {oh}, {ow}]"));
    }
    Ok(spec)
}
