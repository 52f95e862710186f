//! `QConvAutoSpec`: a quantized 2-D convolution of any geometry (channel groups, depthwise,
//! per-side pads, dilations, any batch; onnxruntime's QLinearConv with an integer clamp), and
//! `compile_qconv_auto`, which defines it as one tensor expression
//! (`ops::conv2d_nhwc_grouped_int8`: the int8 convolution, onnxruntime's requantization, the
//! clamp), schedules it at a fixed point of the auto-scheduler's `rules` sketch and builds it.
//! The weights are constants: reordered and their compensation computed once, here.
//! `lower_qconv_auto` is the same definition at the same point lowered for one ISA level without
//! compiling (`LoweredAuto`), with its constants: what an exported network links in. The `_at`
//! variants take another point of the same space (a tuning record's: `qconv_auto_space` is the
//! space `tensorlift tune MODEL.onnx` searches); a point the space rejects falls back to the
//! rules' point, and the caller is told why.
//!
//! Semantics, for output `(n, y, x, o)` of group `g = o / (OC/G)` (NHWC in and out):
//!
//! ```text
//! acc = Σ_{ry, rx, i < IC/G} (src[n, y·sh + ry·dh − pt, x·sw + rx·dw − pl, g·IC/G + i] − zp_src) · w[o, i, ry, rx]   (padding: zp_src)
//! dst = clamp(round(f32(acc + bias[o]) · S[o]) + zp_dst, lo, hi),  S[o] = (scale_src · scale_w[o]) / scale_dst
//! ```
//!
//! with `(lo, hi)` the clamp (the destination's range narrowed by a ReLU or Clip); i32
//! arithmetic wraps.

use std::time::{Duration, Instant};

use ir::DType;
use ir::te::placeholder_vec;
use ir::trace::Trace;
use ir::workload::{WorkloadKey, workload_key};
use schedules::auto::{AutoPoint, GENERIC, Scheduled, Space, SpaceOptions};
use schedules::ops::{GroupedConvParams, QuantizedLayer, conv2d_nhwc_grouped_int8, source_shift};
use schedules::quant::{QuantAttrs, QuantError, Requantization, Scales, TensorQuant};

use super::error::{LayerError, SpecError};
use super::qconv::{ActQuant, check_act, check_output_scales, check_weight_scales};
use crate::build::{BuildError, build, lower_at};
use crate::isa::IsaLevel;
use crate::runtime::{Arg, CompileOptions, CompiledFunc, Tensor};

/// A quantized 2-D convolution, activations NHWC, any geometry.
#[derive(Clone, Debug, PartialEq)]
pub struct QConvAutoSpec {
    /// Names the operator in errors and in the compiled function (e.g. the ONNX node).
    pub name: String,
    pub src: ActQuant,
    /// Batch, source height, width and channels.
    pub n: i64,
    pub h: i64,
    pub w: i64,
    pub ic: i64,
    /// Output channels.
    pub oc: i64,
    /// Kernel height and width.
    pub kh: i64,
    pub kw: i64,
    /// Channel groups, dividing `ic` and `oc` (depthwise: `groups = ic`).
    pub groups: i64,
    /// `(height, width)`, each at least 1.
    pub strides: (i64, i64),
    /// ONNX order `[top, left, bottom, right]`, non-negative.
    pub pads: [i64; 4],
    /// `(height, width)`, each at least 1.
    pub dilations: (i64, i64),
    /// i8 `[OC, IC/G, KH, KW]` (OIHW), row-major.
    pub weights: crate::shared::Shared<i8>,
    /// One scale (per tensor) or `OC` (per output channel), finite and positive.
    pub weight_scales: Vec<f32>,
    /// i32 `[OC]`, quantized with scale `scale_src · scale_w[c]` and zero point 0.
    pub bias: Option<Vec<i32>>,
    pub dst: ActQuant,
    /// The stored value's bounds, within the destination type's range.
    pub clamp: (i32, i32),
}

impl QConvAutoSpec {
    fn op(&self) -> String {
        format!("quantized convolution {}", self.name)
    }

    fn error(&self, what: &str, expected: impl Into<String>, found: impl Into<String>) -> SpecError {
        SpecError { op: self.op(), what: what.to_string(), expected: expected.into(), found: found.into() }
    }

    fn window(&self) -> GroupedConvParams {
        let (_, hi) = self.dst_range();
        let high = (self.clamp.1 < hi).then_some(i64::from(self.clamp.1));
        GroupedConvParams {
            strides: self.strides,
            pads: self.pads,
            dilations: self.dilations,
            groups: self.groups,
            high,
        }
    }

    fn dst_range(&self) -> (i32, i32) {
        if self.dst.dtype == DType::I8 { (-128, 127) } else { (0, 255) }
    }

    /// Output height and width (of a spec that `check` accepts; `(0, 0)` otherwise).
    pub fn output_hw(&self) -> (i64, i64) {
        self.window().output_hw((self.h, self.w), (self.kh, self.kw)).unwrap_or((0, 0))
    }

    /// Operations (two per multiply-accumulate).
    pub fn ops(&self) -> u64 {
        let (oh, ow) = self.output_hw();
        let icg = if self.groups > 0 { self.ic / self.groups } else { 0 };
        [self.n, oh, ow, self.oc, icg, self.kh, self.kw].iter().fold(2u64, |n, &d| n.saturating_mul(d.max(0) as u64))
    }

    /// Every field against the others (what `compile_qconv_auto` checks first).
    pub fn check(&self) -> Result<(), SpecError> {
        const MAX: i64 = 1 << 20;
        let sizes = [
            ("n", self.n),
            ("h", self.h),
            ("w", self.w),
            ("ic", self.ic),
            ("oc", self.oc),
            ("kh", self.kh),
            ("kw", self.kw),
            ("groups", self.groups),
        ];
        if let Some((what, v)) = sizes.iter().find(|(_, v)| !(1..=MAX).contains(v)) {
            return Err(self.error(what, format!("in 1..={MAX}"), v.to_string()));
        }
        if self.ic % self.groups != 0 || self.oc % self.groups != 0 {
            let found = format!("{} groups of {} input and {} output channels", self.groups, self.ic, self.oc);
            return Err(self.error("the groups", "dividing both channel counts", found));
        }
        let (s, d) = ([self.strides.0, self.strides.1], [self.dilations.0, self.dilations.1]);
        if s.iter().chain(&d).any(|v| !(1..=MAX).contains(v)) || self.pads.iter().any(|p| !(0..=MAX).contains(p)) {
            let found = format!("strides {:?}, dilations {:?}, pads {:?}", self.strides, self.dilations, self.pads);
            return Err(self.error(
                "the window",
                format!("strides and dilations in 1..={MAX}, pads in 0..={MAX}"),
                found,
            ));
        }
        if self.window().output_hw((self.h, self.w), (self.kh, self.kw)).is_none() {
            let found = format!("{}x{} dilated by {:?} over {}x{}", self.kh, self.kw, self.dilations, self.h, self.w);
            return Err(self.error("the kernel", "no larger than the padded source", found));
        }
        check_act(&self.op(), "the source", &self.src)?;
        check_act(&self.op(), "the destination", &self.dst)?;
        let count = [self.oc, self.ic / self.groups, self.kh, self.kw].iter().map(|&d| i128::from(d)).product::<i128>();
        if self.weights.len() as i128 != count {
            return Err(self.error("the weights", format!("{count} values"), format!("{} values", self.weights.len())));
        }
        check_weight_scales(&self.op(), &self.weight_scales, self.oc)?;
        check_output_scales(&self.op(), self.src.scale, &self.weight_scales, self.dst.scale)?;
        if let Some(b) = &self.bias
            && b.len() as i64 != self.oc
        {
            return Err(self.error("the bias", format!("{} values", self.oc), format!("{} values", b.len())));
        }
        let (lo, hi) = self.dst_range();
        if !(lo <= self.clamp.0 && self.clamp.0 <= self.clamp.1 && self.clamp.1 <= hi) {
            return Err(self.error("the clamp", format!("lo <= hi within {lo}..={hi}"), format!("{:?}", self.clamp)));
        }
        Ok(())
    }

    /// The quantization attributes of the definition: onnxruntime's order, no post-op (the
    /// clamp's lower bound is bound to the `.lower` parameter instead, its upper one is the
    /// definition's `high`).
    fn attrs(&self) -> Result<QuantAttrs, QuantError> {
        let dims = [self.oc, self.ic / self.groups, self.kh, self.kw];
        let mask = u32::from(self.weight_scales.len() > 1);
        Ok(QuantAttrs {
            src: TensorQuant::per_tensor("src", self.src.scale, self.src.zero_point, self.src.dtype)?,
            wei_scales: Scales::new("weights scales", self.weight_scales.clone(), mask, &dims)?,
            dst: TensorQuant::per_tensor("dst", self.dst.scale, self.dst.zero_point, self.dst.dtype)?,
            dst_dtype: self.dst.dtype,
            post_ops: Vec::new(),
            requantization: Requantization::OnnxRuntime,
        })
    }

    /// The weights reordered to the definition's `[KH, KW, IC/G, OC]`.
    fn weights_hwio(&self) -> Vec<i8> {
        let [oc, icg, kh, kw] = [self.oc, self.ic / self.groups, self.kh, self.kw].map(|d| d as usize);
        let mut out = vec![0i8; self.weights.len()];
        for (o, channel) in self.weights.chunks_exact(icg * kh * kw).enumerate() {
            for (t, &v) in channel.iter().enumerate() {
                let (i, k) = (t / (kh * kw), t % (kh * kw));
                out[(k * icg + i) * oc + o] = v;
            }
        }
        out
    }

    /// `comp'[o] = (zp_src + shift) · Σ w[o, ..] − bias[o]` (wrapping i32): what the definition
    /// subtracts from its accumulator.
    pub fn compensation(&self) -> Vec<i32> {
        let factor = self.src.zero_point.wrapping_add(source_shift(self.src.dtype, DType::U8));
        let taps = (self.ic / self.groups * self.kh * self.kw).max(1) as usize;
        self.weights
            .chunks_exact(taps)
            .enumerate()
            .map(|(o, w)| {
                let sum = w.iter().fold(0i32, |s, &v| s.wrapping_add(i32::from(v)));
                sum.wrapping_mul(factor).wrapping_sub(self.bias.as_ref().map_or(0, |b| b[o]))
            })
            .collect()
    }
}

/// A convolution compiled by `compile_qconv_auto`, its constants bound.
pub struct CompiledAuto {
    name: String,
    kernel: CompiledFunc,
    /// The arguments between the source and the output: weights, compensation, parameters.
    constants: Vec<Tensor>,
    point: AutoPoint,
    /// The point's schedule as replayable data (what a tuning record carries).
    trace: Trace,
    /// Why the point asked for was not applied (the rules' point was instead).
    rejected: Option<String>,
    src: (DType, Vec<i64>),
    dst: (DType, Vec<i64>),
    ops: u64,
    compile: Duration,
}

impl CompiledAuto {
    /// Runs the convolution on `src` (NHWC `[N, H, W, IC]` bytes) into `dst` (NHWC `[N, OH, OW,
    /// OC]`). Errors if a buffer's length is not its tensor's.
    pub fn run(&self, src: &[u8], dst: &mut [u8]) -> Result<(), LayerError> {
        for (what, (_, shape), found) in
            [("the source", &self.src, src.len()), ("the destination", &self.dst, dst.len())]
        {
            let expected = shape.iter().product::<i64>() as usize;
            if found != expected {
                return Err(SpecError {
                    op: self.name.clone(),
                    what: format!("the length of {what}"),
                    expected: format!("{expected} bytes ({shape:?})"),
                    found: format!("{found} bytes"),
                }
                .into());
            }
        }
        let (Some(src), Some(dst)) = (Arg::from_bytes(self.src.0, src), Arg::from_mut_bytes(self.dst.0, dst)) else {
            let found = format!("{} and {}", self.src.0, self.dst.0);
            let op = self.name.clone();
            return Err(
                SpecError { op, what: "the activation dtypes".into(), expected: "u8 or i8".into(), found }.into()
            );
        };
        let mut args = vec![src];
        args.extend(self.constants.iter().map(Arg::tensor_ref));
        args.push(dst);
        Ok(self.kernel.call_args(&mut args)?)
    }

    /// Operations per run (two per multiply-accumulate).
    pub fn ops(&self) -> u64 {
        self.ops
    }

    /// The point of the auto-scheduler's space the function was built at.
    pub fn point(&self) -> &AutoPoint {
        &self.point
    }

    /// The compiled function.
    pub fn func(&self) -> &CompiledFunc {
        &self.kernel
    }

    /// The schedule of the function as replayable data.
    pub fn trace(&self) -> &Trace {
        &self.trace
    }

    /// Why the point `compile_qconv_auto_at` was asked for was not applied (`None`: it was, or
    /// none was asked for).
    pub fn rejected(&self) -> Option<&str> {
        self.rejected.as_deref()
    }

    /// Defining, scheduling, lowering and generating code, and preparing the constants.
    pub fn compile_time(&self) -> Duration {
        self.compile
    }

    /// One line: the level and the sketch.
    pub fn kernel_description(&self) -> String {
        format!("{}: auto {}", self.kernel.isa_level().name(), self.point.sketch)
    }
}

/// What the space may use at `level` on `threads` threads.
fn space_options(level: IsaLevel, threads: usize) -> SpaceOptions {
    let vector_bytes = match level {
        IsaLevel::Scalar => 16,
        IsaLevel::Avx2 | IsaLevel::AvxVnni => 32,
        IsaLevel::Avx512Vnni | IsaLevel::Amx => 64,
    };
    SpaceOptions { max_threads: threads.max(1), vector_bytes, vnni: level.has_vnni() }
}

/// A fixed point of the `rules` sketch for the accumulator stage `acc` (axes `n, y, x, o` or `n,
/// y, x, g, o`): on all threads, the output channels in tiles of up to two vectors of i32, four output columns
/// per tile, the tile accumulated in registers (the cache decision), the other tiles unrolled,
/// the reduction unsplit. `None` where the space has no `rules` sketch.
fn rules_point(space: &Space, acc: &ir::Tensor, threads: usize) -> Option<AutoPoint> {
    let sketch = space.sketches().iter().find(|s| s.name == "rules")?;
    let lanes = space.options().vector_bytes / 4;
    let axes: Vec<String> = acc.axes().iter().map(|a| format!("{}.{}.tile", acc.name(), a.name())).collect();
    let largest_within = |choices: &[i64], limit: i64| choices.iter().copied().filter(|&c| c <= limit).max();
    let values = sketch
        .decisions
        .iter()
        .map(|d| {
            let pick = if d.name == "threads" {
                largest_within(&d.choices, threads as i64)
            } else if Some(&d.name) == axes.last() {
                largest_within(&d.choices, 2 * lanes)
            } else if d.name == axes[2] {
                largest_within(&d.choices, 4)
            } else if axes.contains(&d.name) {
                largest_within(&d.choices, 1)
            } else if d.name.ends_with(".unroll") || d.name.ends_with(".cache") {
                d.choices.iter().copied().max()
            } else {
                // The reduction's inner split: none (its whole extent) where that is a choice.
                d.choices.iter().copied().max()
            };
            pick.or_else(|| d.choices.first().copied())
        })
        .collect::<Option<Vec<i64>>>()?;
    Some(AutoPoint { sketch: sketch.name.clone(), values })
}

/// `spec`'s definition in the auto-scheduler's space for one level and thread count, with its
/// constants.
struct DefinedAuto {
    space: Space,
    /// The accumulator stage (whose axes the rules' point tiles).
    acc: ir::Tensor,
    /// The arguments between the source and the output.
    constants: Vec<Tensor>,
    /// The definition's output (what the workload key hashes).
    output: ir::Tensor,
    src_shape: Vec<i64>,
    dst_shape: Vec<i64>,
}

/// `spec` checked and defined (`ops::conv2d_nhwc_grouped_int8`): the source and weights
/// placeholders and the layer.
fn definition(spec: &QConvAutoSpec) -> Result<(ir::Tensor, ir::Tensor, QuantizedLayer), LayerError> {
    spec.check()?;
    let icg = spec.ic / spec.groups;
    let src =
        placeholder_vec(vec![spec.n, spec.h, spec.w, spec.ic], spec.src.dtype, "src").map_err(QuantError::from)?;
    let wei = placeholder_vec(vec![spec.kh, spec.kw, icg, spec.oc], DType::I8, "weights").map_err(QuantError::from)?;
    let layer = conv2d_nhwc_grouped_int8(&src, &wei, spec.window(), &spec.attrs()?, &spec.name)?;
    Ok((src, wei, layer))
}

/// The workload key of `spec`'s definition (`QConvAutoSpace::key`), without its space. Errors:
/// the spec's, the definition's.
pub fn qconv_auto_key(spec: &QConvAutoSpec) -> Result<WorkloadKey, LayerError> {
    let (_, _, layer) = definition(spec)?;
    Ok(workload_key(&[&layer.output]))
}

/// Defines `spec` (`ops::conv2d_nhwc_grouped_int8`, onnxruntime's order) and its space for
/// `level` on `threads`, and prepares its constants: the weights reordered, the compensation
/// with the bias folded in, the per-channel scales, zero points and the clamp's lower bound.
fn define_qconv_auto(spec: &QConvAutoSpec, level: IsaLevel, threads: usize) -> Result<DefinedAuto, LayerError> {
    let (src, wei, layer) = definition(spec)?;
    let (oh, ow) = spec.output_hw();
    let icg = spec.ic / spec.groups;
    let src_shape = vec![spec.n, spec.h, spec.w, spec.ic];
    let dst_shape = vec![spec.n, oh, ow, spec.oc];
    let mut constants = vec![
        Tensor::from_slice(&[spec.kh, spec.kw, icg, spec.oc], &spec.weights_hwio())?,
        Tensor::from_slice(&[spec.oc], &spec.compensation())?,
    ];
    for p in &layer.params {
        let t = if p.tensor.name().ends_with(".lower") {
            Tensor::from_slice(&[spec.oc], &vec![spec.clamp.0 as f32; spec.oc as usize])?
        } else {
            Tensor::from_array(&p.values)
        };
        constants.push(t);
    }
    let mut inputs = vec![src, wei, layer.compensation.clone()];
    inputs.extend(layer.params.iter().map(|p| p.tensor.clone()));
    let space = Space::new(&inputs, std::slice::from_ref(&layer.output), space_options(level, threads));
    Ok(DefinedAuto { space, acc: layer.acc, constants, output: layer.output, src_shape, dst_shape })
}

/// The space of `spec`'s definition at `level` on at most `threads` threads, the point
/// `compile_qconv_auto` applies there (the `rules` sketch's fixed point, else the generic one)
/// and the definition's workload key (independent of names, weights and scales: equal for
/// every convolution of the same geometry, types and quantization layout).
pub struct QConvAutoSpace {
    pub space: Space,
    pub rules: AutoPoint,
    pub key: WorkloadKey,
}

/// `QConvAutoSpace` of `spec`. Errors: the spec's (`QConvAutoSpec::check`), the definition's.
pub fn qconv_auto_space(spec: &QConvAutoSpec, level: IsaLevel, threads: usize) -> Result<QConvAutoSpace, LayerError> {
    let threads = threads.max(1);
    let defined = define_qconv_auto(spec, level, threads)?;
    let rules = rules_point(&defined.space, &defined.acc, threads)
        .filter(|p| defined.space.apply(p).is_ok())
        .unwrap_or_else(|| AutoPoint { sketch: GENERIC.to_string(), values: vec![] });
    Ok(QConvAutoSpace { key: workload_key(&[&defined.output]), space: defined.space, rules })
}

/// `spec` scheduled for one level and thread count, with its constants.
struct ScheduledAuto {
    scheduled: Scheduled,
    point: AutoPoint,
    /// Why the point asked for was not applied.
    rejected: Option<String>,
    constants: Vec<Tensor>,
    output: ir::Tensor,
    src_shape: Vec<i64>,
    dst_shape: Vec<i64>,
}

/// Defines `spec` (`define_qconv_auto`) and schedules it at `point` when given and the space
/// accepts it, else at the `rules` sketch's fixed point (`rules_point`; the generic schedule
/// where that point does not apply). A point with prepare functions (`Scheduled::prepare`) is an
/// error: the space declares no constant, so none is expected.
fn schedule_qconv_auto(
    spec: &QConvAutoSpec,
    level: IsaLevel,
    threads: usize,
    point: Option<&AutoPoint>,
) -> Result<ScheduledAuto, LayerError> {
    let DefinedAuto { space, acc, constants, output, src_shape, dst_shape } = define_qconv_auto(spec, level, threads)?;
    let mut rejected = None;
    let asked = point.and_then(|p| match space.apply(p) {
        Ok(s) => Some((p.clone(), s)),
        Err(e) => {
            rejected = Some(format!("the point {} {:?} does not apply: {e}", p.sketch, p.values));
            None
        }
    });
    let generic = AutoPoint { sketch: GENERIC.to_string(), values: vec![] };
    let chosen =
        asked.or_else(|| rules_point(&space, &acc, threads).and_then(|p| space.apply(&p).ok().map(|s| (p, s))));
    let (point, scheduled) = match chosen {
        Some(found) => found,
        None => {
            let s = space.apply(&generic).map_err(|e| LayerError::Auto(Box::new(e)))?;
            (generic, s)
        }
    };
    if !scheduled.prepare.is_empty() {
        let found = format!("{} prepare functions at point {point:?}", scheduled.prepare.len());
        return Err(spec.error("the schedule", "no prepare function (no input is declared constant)", found).into());
    }
    Ok(ScheduledAuto { scheduled, point, rejected, constants, output, src_shape, dst_shape })
}

/// Defines and schedules `spec` (`schedule_qconv_auto`) on the threads of `options`, builds it
/// with `build::build` and binds its constants. Errors: the spec's (`QConvAutoSpec::check`),
/// the definition's, code generation.
pub fn compile_qconv_auto(spec: &QConvAutoSpec, options: &CompileOptions) -> Result<CompiledAuto, LayerError> {
    compile_qconv_auto_at(spec, options, None)
}

/// `compile_qconv_auto` at `point` of the space (`qconv_auto_space` at the level and threads of
/// `options`) when given; a point the space rejects falls back to the rules' point
/// (`CompiledAuto::rejected` says why).
pub fn compile_qconv_auto_at(
    spec: &QConvAutoSpec,
    options: &CompileOptions,
    point: Option<&AutoPoint>,
) -> Result<CompiledAuto, LayerError> {
    let start = Instant::now();
    let level = options.target.level().map_err(BuildError::from)?;
    let threads = options
        .threads
        .filter(|&t| t > 0)
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let ScheduledAuto { scheduled, point, rejected, constants, src_shape, dst_shape, .. } =
        schedule_qconv_auto(spec, level, threads, point)?;
    let args: Vec<&ir::Tensor> = scheduled.args.iter().collect();
    let build_options = CompileOptions { threads: Some(scheduled.threads), ..options.clone() };
    let kernel = build(&scheduled.schedule, &args, &spec.name, &build_options)?.compiled;
    Ok(CompiledAuto {
        name: spec.name.clone(),
        kernel,
        constants,
        trace: scheduled.schedule.trace(),
        point,
        rejected,
        src: (spec.src.dtype, src_shape),
        dst: (spec.dst.dtype, dst_shape),
        ops: spec.ops(),
        compile: start.elapsed(),
    })
}

/// An auto-scheduled convolution's function lowered for one ISA level but not compiled, with
/// its constants (`lower_qconv_auto`): what an exported network library links in, for levels
/// this CPU may not have.
pub struct LoweredAuto {
    /// Arguments: source, the `constants` in order, output (as `CompiledAuto::run` binds them).
    pub func: ir::Func,
    /// Equal for two convolutions whose functions are equal (definition, point, level, threads):
    /// one function serves both.
    pub key: String,
    pub point: AutoPoint,
    /// Weights reordered, compensation (bias folded in), then the per-channel parameters.
    pub constants: Vec<Tensor>,
}

/// `compile_qconv_auto`'s definition scheduled for `level` on `threads` (its point chosen as
/// `compile_qconv_auto` chooses it there) and lowered, without compiling. Errors: as
/// `compile_qconv_auto`'s, lowering instead of code generation.
pub fn lower_qconv_auto(spec: &QConvAutoSpec, level: IsaLevel, threads: usize) -> Result<LoweredAuto, LayerError> {
    lower_qconv_auto_at(spec, level, threads, None).map(|(lowered, _)| lowered)
}

/// `lower_qconv_auto` at `point` when given and the space accepts it (as
/// `compile_qconv_auto_at`), with why the point was rejected when it was.
pub fn lower_qconv_auto_at(
    spec: &QConvAutoSpec,
    level: IsaLevel,
    threads: usize,
    point: Option<&AutoPoint>,
) -> Result<(LoweredAuto, Option<String>), LayerError> {
    let threads = threads.max(1);
    let ScheduledAuto { scheduled, point, rejected, constants, output, .. } =
        schedule_qconv_auto(spec, level, threads, point)?;
    let key = format!("{} {point:?} {} {}", workload_key(&[&output]).key, scheduled.threads, level.name());
    let args: Vec<&ir::Tensor> = scheduled.args.iter().collect();
    let func = lower_at(&scheduled.schedule, &args, &spec.name, level).map_err(BuildError::from)?;
    Ok((LoweredAuto { func, key, point, constants }, rejected))
}
