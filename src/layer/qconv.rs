//! `QConvSpec`: a quantized convolution as an imported network gives it (onnxruntime's
//! QLinearConv: u8 or s8 activations, s8 weights per tensor or per output channel, an i32 bias),
//! and `compile_qconv`, which builds it on the x86 path in onnxruntime's requantization order
//! (`schedules::quant`, "onnxruntime's order"), NHWC, with its weights prepared once.
//!
//! Semantics, for output pixel `(y, x)` and channel `c` (NHWC, batch 1):
//!
//! ```text
//! acc[y, x, c] = Σ_{ky, kx, i} (src[y·s + ky − p, x·s + kx − p, i] − zp_src) · w[c, i, ky, kx]   (padding: zp_src)
//! dst[y, x, c] = sat(round(f32(acc + bias[c]) · S[c]) + zp_dst),  S[c] = (scale_src · scale_w[c]) / scale_dst
//! ```
//!
//! with `max(·, zp_dst)` before saturating where `relu` is set; i32 arithmetic wraps.

use std::time::Instant;

use ir::DType;
use ir::te::placeholder_vec;
use ir::workload::workload_key;
use schedules::ops::GemmOperands;
use schedules::ops::{Conv2dParams, Layout};
use schedules::ops::{DirectConvLayer, conv2d_int8_direct, space_to_depth_dims, space_to_depth_values};
use schedules::quant::{PostOp, QLinearAdd, QuantAttrs, Requantization, Scales, TensorQuant};
use schedules::resnet18::ConvLayer;
use schedules::x86_conv::{
    Conv2dInt8, Conv2dInt8Error, Conv2dInt8Knobs, conv2d_int8, default_conv_knobs, schedule_conv2d_int8, weight_range,
};

use super::error::{LayerError, SpecError};
use super::kernel_cache::KernelCache;
use super::qcompiled::{CompiledQuantized, Prepared};
use super::qlowered::LoweredQuantized;
use super::qprepare::{PreparedWeights, prepare_weights_in};
use crate::build::{BuildError, build, core_rate, lower_at};
use crate::isa::IsaLevel;
use crate::runtime::{CompileOptions, Tensor, WeightArena};

/// The quantization of an activation: `real = scale · (q − zero_point)`, `q` of `dtype` (u8 or
/// i8), per tensor.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ActQuant {
    pub dtype: DType,
    pub scale: f32,
    pub zero_point: i32,
}

/// A quantized 2-D convolution, batch 1, groups 1, dilation 1, activations NHWC.
#[derive(Clone, Debug, PartialEq)]
pub struct QConvSpec {
    /// Names the operator in errors and in the compiled function (e.g. the ONNX node).
    pub name: String,
    pub src: ActQuant,
    /// Source height, width and channels.
    pub h: i64,
    pub w: i64,
    pub ic: i64,
    /// Output channels.
    pub oc: i64,
    /// Kernel height and width.
    pub kh: i64,
    pub kw: i64,
    /// Strides (height, width), each at least 1; they must be equal.
    pub stride: (i64, i64),
    /// Pads in ONNX order `[top, left, bottom, right]`, non-negative; they must be equal.
    pub pads: [i64; 4],
    /// i8 `[OC, IC, KH, KW]` (OIHW), row-major.
    pub weights: crate::shared::Shared<i8>,
    /// One scale (per tensor) or `OC` (per output channel), finite and positive.
    pub weight_scales: Vec<f32>,
    /// i32 `[OC]`, quantized with scale `scale_src · scale_w[c]` and zero point 0.
    pub bias: Option<Vec<i32>>,
    pub dst: ActQuant,
    /// ReLU fused (`max(q, zp_dst)` before saturating).
    pub relu: bool,
    /// A residual add fused after the requantization (onnxruntime's QLinearAdd of `dst` and a
    /// sum input of the destination's shape and type, `schedules::quant`'s onnxruntime order):
    /// the layer then writes the add's output and `CompiledQuantized::run_with_sum` runs it.
    pub sum: Option<QLinearAdd>,
}

impl QConvSpec {
    /// Output height and width (floor division; of a spec that `check` accepts).
    pub fn output_hw(&self) -> (i64, i64) {
        let p = self.pads[0];
        let (sh, sw) = (self.stride.0.max(1), self.stride.1.max(1));
        ((self.h + 2 * p - self.kh) / sh + 1, (self.w + 2 * p - self.kw) / sw + 1)
    }

    /// Operations (two per multiply-accumulate).
    pub fn ops(&self) -> u64 {
        let (oh, ow) = self.output_hw();
        [oh, ow, self.oc, self.ic, self.kh, self.kw].iter().fold(2u64, |n, &d| n.saturating_mul(d.max(0) as u64))
    }

    /// The operator as errors name it.
    fn op(&self) -> String {
        format!("quantized convolution {}", self.name)
    }

    fn error(&self, what: &str, expected: impl Into<String>, found: impl Into<String>) -> SpecError {
        SpecError { op: self.op(), what: what.to_string(), expected: expected.into(), found: found.into() }
    }

    /// Every field against the others (what `compile_qconv` checks first).
    pub fn check(&self) -> Result<(), SpecError> {
        let sizes = [("h", self.h), ("w", self.w), ("ic", self.ic), ("oc", self.oc), ("kh", self.kh), ("kw", self.kw)];
        // Sizes whose products stay far from overflow (a tensor of 2^40 elements is absurd).
        const MAX: i64 = 1 << 20;
        if let Some((what, v)) = sizes.iter().find(|(_, v)| !(1..=MAX).contains(v)) {
            return Err(self.error(what, format!("in 1..={MAX}"), v.to_string()));
        }
        let (sh, sw) = self.stride;
        if sh < 1 || sw < 1 || sh != sw || sh > MAX {
            return Err(self.error("the strides", "equal and at least 1", format!("{:?}", self.stride)));
        }
        let p = self.pads[0];
        if !(0..=MAX).contains(&p) || self.pads.iter().any(|&q| q != p) {
            return Err(self.error("the pads", "four equal non-negative values", format!("{:?}", self.pads)));
        }
        if self.h + 2 * p < self.kh || self.w + 2 * p < self.kw {
            let found = format!("{}x{} over {}x{} padded by {p}", self.kh, self.kw, self.h, self.w);
            return Err(self.error("the kernel", "no larger than the padded source", found));
        }
        check_act(&self.op(), "the source", &self.src)?;
        check_act(&self.op(), "the destination", &self.dst)?;
        let count = [self.oc, self.ic, self.kh, self.kw].iter().map(|&d| i128::from(d)).product::<i128>();
        if self.weights.len() as i128 != count {
            let expected = format!("{count} values ([{}, {}, {}, {}])", self.oc, self.ic, self.kh, self.kw);
            return Err(self.error("the weights", expected, format!("{} values", self.weights.len())));
        }
        check_weight_scales(&self.op(), &self.weight_scales, self.oc)?;
        check_output_scales(&self.op(), self.src.scale, &self.weight_scales, self.dst.scale)?;
        if let Some(b) = &self.bias
            && b.len() as i64 != self.oc
        {
            return Err(self.error("the bias", format!("{} values", self.oc), format!("{} values", b.len())));
        }
        Ok(())
    }

    /// The quantization attributes of the schedule: onnxruntime's order, ReLU as its post-op.
    pub(super) fn attrs(&self) -> Result<QuantAttrs, LayerError> {
        let wei_dims = [self.oc, self.ic, self.kh, self.kw];
        let mask = u32::from(self.weight_scales.len() > 1);
        Ok(QuantAttrs {
            src: TensorQuant::per_tensor("src", self.src.scale, self.src.zero_point, self.src.dtype)?,
            wei_scales: Scales::new("weights scales", self.weight_scales.clone(), mask, &wei_dims)?,
            dst: TensorQuant::per_tensor("dst", self.dst.scale, self.dst.zero_point, self.dst.dtype)?,
            dst_dtype: self.dst.dtype,
            post_ops: [self.relu.then_some(PostOp::Relu), self.sum.map(PostOp::QLinearAdd)]
                .into_iter()
                .flatten()
                .collect(),
            requantization: Requantization::OnnxRuntime,
        })
    }

    /// The layer the default knobs are chosen for (a square kernel of the kernel's width: what
    /// fixes the output row the tiles cover).
    pub fn knob_layer(&self) -> ConvLayer {
        ConvLayer {
            name: "qconv",
            ic: self.ic,
            oc: self.oc,
            h: self.h,
            w: self.w,
            k: self.kw,
            stride: self.stride.0,
            pad: self.pads[0],
        }
    }
}

/// Checks an activation's dtype (u8 or i8), scale and zero point for the operator `op`.
pub(super) fn check_act(op: &str, what: &str, q: &ActQuant) -> Result<(), SpecError> {
    let error = |what: String, expected: &str, found: String| SpecError {
        op: op.to_string(),
        what,
        expected: expected.to_string(),
        found,
    };
    let range = match q.dtype {
        d if d == DType::U8 => 0..=255,
        d if d == DType::I8 => -128..=127,
        d => return Err(error(format!("the dtype of {what}"), "u8 or i8", d.to_string())),
    };
    if !(q.scale.is_finite() && q.scale > 0.0) {
        return Err(error(format!("the scale of {what}"), "finite and positive", q.scale.to_string()));
    }
    if !range.contains(&q.zero_point) {
        return Err(error(format!("the zero point of {what}"), &format!("in {range:?}"), q.zero_point.to_string()));
    }
    Ok(())
}

/// Checks weight scales for the operator `op`: one, or one per output channel, each finite
/// and positive.
pub(super) fn check_weight_scales(op: &str, scales: &[f32], oc: i64) -> Result<(), SpecError> {
    let error = |expected: String, found: String| SpecError {
        op: op.to_string(),
        what: "the weight scales".to_string(),
        expected,
        found,
    };
    if scales.len() != 1 && scales.len() as i64 != oc {
        return Err(error(format!("1 or {oc} values"), format!("{} values", scales.len())));
    }
    if let Some(s) = scales.iter().find(|s| !(s.is_finite() && **s > 0.0)) {
        return Err(error("finite and positive".to_string(), s.to_string()));
    }
    Ok(())
}

/// Checks that each channel's scale `(src_scale · w_scale[c]) / dst_scale` is finite in f32 (an
/// infinite one would make `0 · ∞` a NaN, which MLAS stores as the lower bound).
pub(super) fn check_output_scales(op: &str, src_scale: f32, scales: &[f32], dst_scale: f32) -> Result<(), SpecError> {
    match scales.iter().map(|&w| src_scale * w / dst_scale).find(|s| !s.is_finite()) {
        Some(s) => Err(SpecError {
            op: op.to_string(),
            what: "the output scale (src scale · weight scale / dst scale)".to_string(),
            expected: "finite in f32".to_string(),
            found: s.to_string(),
        }),
        None => Ok(()),
    }
}

/// Compiles `spec` on the x86 path (`x86_conv::conv2d_int8`, NHWC, onnxruntime's order) with
/// `knobs` (default: `default_conv_knobs` for the level `options` target, on its threads), and
/// prepares the weights once (`prepare_weights`): packed, and the compensation with the bias
/// folded in (`comp − bias`, wrapping i32). The result runs on NHWC bytes (`CompiledQuantized::run`).
/// Errors: the spec's (`QConvSpec::check`), knobs outside their ranges, code generation.
pub fn compile_qconv(
    spec: &QConvSpec,
    knobs: Option<Conv2dInt8Knobs>,
    options: &CompileOptions,
) -> Result<CompiledQuantized, LayerError> {
    compile_qconv_in(&KernelCache::new(), spec, knobs, options)
}

/// `compile_qconv`, taking the per-call function from `cache` where a layer of the same
/// definition and schedule compiled it before (and leaving it there otherwise).
pub fn compile_qconv_in(
    cache: &KernelCache,
    spec: &QConvSpec,
    knobs: Option<Conv2dInt8Knobs>,
    options: &CompileOptions,
) -> Result<CompiledQuantized, LayerError> {
    spec.check()?;
    let level = options.target.level().map_err(BuildError::from)?;
    let threads = options.threads.filter(|&t| t > 0);
    let max_threads = threads.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let knobs = knobs.unwrap_or_else(|| default_conv_knobs(&spec.knob_layer(), core_rate(level), max_threads));
    let (shapes, conv) = conv_shapes(spec);
    build_quantized(cache, spec, &shapes, conv, knobs, options, spec.ops())
}

/// The per-call function's shapes and window of a convolution.
fn conv_shapes(spec: &QConvSpec) -> (Shapes, Conv2dParams) {
    let (oh, ow) = spec.output_hw();
    let shapes = Shapes {
        src: vec![1, spec.h, spec.w, spec.ic],
        wei: vec![spec.oc, spec.ic, spec.kh, spec.kw],
        dst: vec![1, oh, ow, spec.oc],
    };
    (shapes, Conv2dParams { stride: spec.stride.0, pad: spec.pads[0] })
}

/// The shapes of the per-call function's source, weights and output.
struct Shapes {
    src: Vec<i64>,
    wei: Vec<i64>,
    dst: Vec<i64>,
}

/// The per-call function's schedule for `spec` (a convolution; a dense layer as its 1×1
/// convolution) at `level`, and the GEMM operands its knobs give for the weights.
fn schedule_quantized(
    spec: &QConvSpec,
    shapes: &Shapes,
    conv: Conv2dParams,
    knobs: Conv2dInt8Knobs,
    level: IsaLevel,
) -> Result<(Conv2dInt8, GemmOperands), LayerError> {
    let operands = gemm_operands(spec, knobs, level);
    let attrs = spec.attrs()?;
    let src = placeholder_vec(shapes.src.clone(), spec.src.dtype, "src").map_err(schedules::quant::QuantError::from)?;
    let wei = placeholder_vec(shapes.wei.clone(), DType::I8, "weights").map_err(schedules::quant::QuantError::from)?;
    let sum = sum_input(spec, shapes)?;
    let layer = conv2d_int8(&src, &wei, None, sum.as_ref(), conv, &attrs, Layout::Nhwc, knobs, operands, &spec.name)?;
    Ok((layer, operands))
}

/// The GEMM operands `knobs` give for `spec`'s weights at `level`. With VNNI they do not
/// depend on the weights' range (`Conv2dInt8Knobs::operands`), so the weights are not scanned.
fn gemm_operands(spec: &QConvSpec, knobs: Conv2dInt8Knobs, level: IsaLevel) -> GemmOperands {
    let vnni = level.has_vnni();
    let range = if vnni { (i8::MIN, i8::MAX) } else { weight_range(spec.weights.iter().copied()) };
    knobs.operands(vnni, range)
}

/// A definition, its GEMM operands, and the source, weight and sum placeholders it reads.
type Defined = (DirectConvLayer, GemmOperands, (ir::te::Tensor, ir::te::Tensor, Option<ir::te::Tensor>));

/// `schedule_quantized`'s definition without its schedule (`ops::conv2d_int8_direct` for
/// checked `knobs`), the GEMM operands, and the source, weight and sum placeholders it reads.
fn define_quantized(
    spec: &QConvSpec,
    shapes: &Shapes,
    conv: Conv2dParams,
    knobs: Conv2dInt8Knobs,
    level: IsaLevel,
) -> Result<Defined, LayerError> {
    let operands = gemm_operands(spec, knobs, level);
    let attrs = spec.attrs()?;
    let src = placeholder_vec(shapes.src.clone(), spec.src.dtype, "src").map_err(schedules::quant::QuantError::from)?;
    let wei = placeholder_vec(shapes.wei.clone(), DType::I8, "weights").map_err(schedules::quant::QuantError::from)?;
    let rows = knobs.source_rows();
    let sum = sum_input(spec, shapes)?;
    let layer = conv2d_int8_direct(
        &src,
        &wei,
        None,
        sum.as_ref(),
        conv,
        &attrs,
        Layout::Nhwc,
        knobs.nr,
        operands,
        rows,
        &spec.name,
    )?;
    Ok((layer, operands, (src, wei, sum)))
}

/// The placeholder of the fused residual add's other operand (the destination's shape and
/// type), where `spec` has one.
fn sum_input(spec: &QConvSpec, shapes: &Shapes) -> Result<Option<ir::te::Tensor>, LayerError> {
    let Some(_) = spec.sum else { return Ok(None) };
    let sum = placeholder_vec(shapes.dst.clone(), spec.dst.dtype, "sum").map_err(schedules::quant::QuantError::from)?;
    Ok(Some(sum))
}

/// The weights of `spec` prepared for its function's operands and `knobs.nr` (rearranged first
/// where the knobs apply space to depth at `stride`): the per-call function's arguments between
/// source and output, before the definition's parameters. The packed tensor is cut from `arena`
/// where one is given.
fn prepare_quantized(
    spec: &QConvSpec,
    shapes: &Shapes,
    (stride, knobs): (i64, Conv2dInt8Knobs),
    operands: GemmOperands,
    arena: Option<&WeightArena>,
) -> Result<PreparedWeights, LayerError> {
    let dims = [shapes.wei[0], shapes.wei[1], shapes.wei[2], shapes.wei[3]];
    let src_q = (spec.src.dtype, spec.src.zero_point);
    let (k, bias) = (gemm_k(shapes, stride, knobs), spec.bias.as_deref());
    match knobs.space_to_depth(stride, dims[2], dims[3]) {
        Some(s) => {
            let kernel = space_to_depth_values(&spec.weights, dims, s);
            let dims = space_to_depth_dims(dims, s);
            prepare_weights_in(arena, &kernel, dims, (knobs.nr, k), operands, src_q, bias)
        }
        None => prepare_weights_in(arena, &spec.weights, dims, (knobs.nr, k), operands, src_q, bias),
    }
}

/// What tells apart the layouts of the weights prepared for `knobs` at `stride` beyond the panel
/// width and the operands: the reduction length, and the space-to-depth stride if any.
fn weight_layout(shapes: &Shapes, stride: i64, knobs: Conv2dInt8Knobs) -> (i64, Option<i64>) {
    (gemm_k(shapes, stride, knobs), knobs.space_to_depth(stride, shapes.wei[2], shapes.wei[3]))
}

/// The reduction length of the weights prepared for `knobs` (`Conv2dInt8Knobs::gemm_k`).
fn gemm_k(shapes: &Shapes, stride: i64, knobs: Conv2dInt8Knobs) -> i64 {
    knobs.gemm_k(shapes.wei[1], shapes.wei[2], shapes.wei[3], stride)
}

/// The definition's parameters (scales, zero points, bounds) as the function's last arguments.
fn params(layer: &Conv2dInt8) -> Vec<Tensor> {
    layer.layer.params.iter().map(|p| Tensor::from_array(&p.values)).collect()
}

/// Builds the per-call function and the weight preparation of `spec` (a convolution; a dense
/// layer as its 1×1 convolution) and prepares the weights.
fn build_quantized(
    cache: &KernelCache,
    spec: &QConvSpec,
    shapes: &Shapes,
    conv: Conv2dParams,
    knobs: Conv2dInt8Knobs,
    options: &CompileOptions,
    ops: u64,
) -> Result<CompiledQuantized, LayerError> {
    let start = Instant::now();
    let level = options.target.level().map_err(BuildError::from)?;
    // The definition alone first: its key finds a function compiled for an earlier layer, and
    // only a new one is scheduled (as `schedule_quantized` does), lowered and compiled.
    knobs.check().map_err(Conv2dInt8Error::from)?;
    let (definition, operands, (src, wei, sum)) = define_quantized(spec, shapes, conv, knobs, level)?;
    let name = &spec.name;
    let threads = options.threads.filter(|&t| t > 0);
    let key = (workload_key(&[&definition.output]).key, knobs, level, threads, format!("{:?}", options.opt_level));
    let params = definition.params.iter().map(|p| Tensor::from_array(&p.values)).collect();
    let ((kernel, trace), cached) = cache.get_or_build(key, || {
        let layer = schedule_conv2d_int8(definition, &src, &wei, None, sum.as_ref(), Layout::Nhwc, knobs, operands)?;
        let compiled = build(&layer.schedule, &layer.args.iter().collect::<Vec<_>>(), name, options)?.compiled;
        Ok((compiled, layer.schedule.trace()))
    })?;
    let compile = start.elapsed();

    let start = Instant::now();
    let PreparedWeights { packed, compensation } = cache
        .prepared((name.clone(), knobs.nr, operands, weight_layout(shapes, conv.stride, knobs)), || {
            prepare_quantized(spec, shapes, (conv.stride, knobs), operands, cache.weight_arena())
        })?;
    let prepared = Prepared { packed, compensation, params, time: start.elapsed() };
    let io = ((spec.src.dtype, shapes.src.clone()), (spec.dst.dtype, shapes.dst.clone()));
    CompiledQuantized::new(name.clone(), (kernel, cached), knobs, operands, prepared, io, (ops, compile, trace))
        .map(|c| c.with_sum(spec.sum.is_some()))
}

/// `spec`'s per-call function lowered for `level` (not compiled: any level, whatever this CPU
/// supports) with its weights prepared for it, as an exported library runs it.
fn lower_quantized(
    spec: &QConvSpec,
    shapes: &Shapes,
    conv: Conv2dParams,
    knobs: Conv2dInt8Knobs,
    level: IsaLevel,
) -> Result<LoweredQuantized, LayerError> {
    if spec.sum.is_some() {
        // The export's C loops call the function without a sum input (it partitions without).
        return Err(spec.error("the residual add", "none in an exported layer", "a fused QLinearAdd").into());
    }
    let (layer, operands) = schedule_quantized(spec, shapes, conv, knobs, level)?;
    let key = format!("{} {knobs:?} {}", workload_key(&[&layer.layer.output]).key, level.name());
    let func = lower_at(&layer.schedule, &layer.args.iter().collect::<Vec<_>>(), &spec.name, level)
        .map_err(BuildError::from)?;
    let PreparedWeights { packed, compensation } =
        prepare_quantized(spec, shapes, (conv.stride, knobs), operands, None)?;
    let mut weights = vec![packed, compensation];
    weights.extend(params(&layer));
    Ok(LoweredQuantized { func, key, knobs, operands, weights })
}

/// `compile_qconv`'s definition lowered for `level` with its weights prepared, without
/// compiling (`LoweredQuantized`); `knobs` default as `compile_qconv`'s for `max_threads`.
pub fn lower_qconv(
    spec: &QConvSpec,
    knobs: Option<Conv2dInt8Knobs>,
    level: IsaLevel,
    max_threads: usize,
) -> Result<LoweredQuantized, LayerError> {
    spec.check()?;
    let knobs = knobs.unwrap_or_else(|| default_conv_knobs(&spec.knob_layer(), core_rate(level), max_threads));
    let (shapes, conv) = conv_shapes(spec);
    lower_quantized(spec, &shapes, conv, knobs, level)
}

/// `compile_qdense`'s 1×1 convolution lowered (`lower_qconv`).
pub(super) fn lower_as_conv(
    spec: &QConvSpec,
    knobs: Conv2dInt8Knobs,
    level: IsaLevel,
    (rows, k, n): (i64, i64, i64),
) -> Result<LoweredQuantized, LayerError> {
    let shapes = Shapes { src: vec![1, 1, rows, k], wei: vec![n, k, 1, 1], dst: vec![1, 1, rows, n] };
    lower_quantized(spec, &shapes, Conv2dParams { stride: 1, pad: 0 }, knobs, level)
}

/// `compile_qconv`'s builder, for the dense layer's 1×1 convolution (`qdense`).
pub(super) fn build_as_conv(
    cache: &KernelCache,
    spec: &QConvSpec,
    knobs: Conv2dInt8Knobs,
    options: &CompileOptions,
    ops: u64,
    (rows, k, n): (i64, i64, i64),
) -> Result<CompiledQuantized, LayerError> {
    let shapes = Shapes { src: vec![1, 1, rows, k], wei: vec![n, k, 1, 1], dst: vec![1, 1, rows, n] };
    build_quantized(cache, spec, &shapes, Conv2dParams { stride: 1, pad: 0 }, knobs, options, ops)
}
