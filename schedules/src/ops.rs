//! Quantized (int8) operators and layout transforms as tensor expressions, following the model
//! of `quant` (oneDNN's). The default schedule (`generic::default_schedule`) of each is the
//! reference; target schedules must compute the same values bit for bit.
//!
//! Activations are NCHW at the API (batch `N` is any positive size; resnet-18 uses 1); the
//! direct convolution that x86 schedules tensorize (`conv2d_int8_direct`) also takes and gives
//! NHWC (`Layout`), and `convert_layout` moves between the two. A weight
//! preparation function (`compensation`) is separate from the per-call graph: it runs once when
//! the weights are packed, and the per-call operators read its result through a placeholder.

use ir::expr::{max as index_max, min as index_min, select};
use ir::intrin::{IntrinKind, TensorIntrin, decl_tensor_intrin};
use ir::te::{Tensor, compute_vec, max, placeholder_vec, placeholder_vec_in_range, reduce_axis, sum};
use ir::{DType, Expr};

use crate::quant::{
    DST_TYPES, Param, Params, PostOp, QuantAttrs, QuantError, Scales, TensorQuant, ZeroPoints, activation_quant,
    check_post_ops, f32c, finish, is_dst_type,
};

/// `⌈a / b⌉` for positive `b` and non-negative `a`.
fn ceil_div(a: i64, b: i64) -> i64 {
    (a + b - 1) / b
}

fn shape_error(op: &str, what: &str, expected: impl Into<String>, found: impl Into<String>) -> QuantError {
    QuantError::Shape { op: op.to_string(), what: what.to_string(), expected: expected.into(), found: found.into() }
}

fn dtype_error(op: &str, what: &str, expected: &str, found: DType) -> QuantError {
    QuantError::DType { op: op.to_string(), what: what.to_string(), expected: expected.to_string(), found }
}

fn require_int8_src(op: &str, src: &Tensor) -> Result<(), QuantError> {
    if [DType::U8, DType::I8].contains(&src.dtype()) {
        Ok(())
    } else {
        Err(dtype_error(op, "the source", "u8 or i8", src.dtype()))
    }
}

fn require_s8_weights(op: &str, weights: &Tensor) -> Result<(), QuantError> {
    if weights.dtype() == DType::I8 { Ok(()) } else { Err(dtype_error(op, "the weights", "i8", weights.dtype())) }
}

/// What is added to a source of type `src` to read it as `gemm` (u8, i8 or i16) without
/// changing the products' differences: 128 for i8 → u8, -128 for u8 → i8, else 0 (i16 holds
/// either as it is).
fn source_shift(src: DType, gemm: DType) -> i32 {
    match (src, gemm) {
        (DType::I8, DType::U8) => 128,
        (DType::U8, DType::I8) => -128,
        _ => 0,
    }
}

/// The weight preparation of an int8 convolution or dense layer (run once, at packing time).
#[derive(Clone, Debug)]
pub struct Compensation {
    /// `Σ_{ic,kh,kw} i32(wei[oc, ..])` (`<name>.wsum`).
    pub weight_sum: Tensor,
    /// `(zp_src + shift) · weight_sum[oc]` in i32 (`<name>`), with the shift that makes the
    /// source the GEMM's dtype (128 for an i8 source read as u8, -128 for a u8 source read as
    /// i8, else 0): what the per-call operator subtracts from its accumulator (`quant` module
    /// doc).
    pub compensation: Tensor,
}

/// The compensation of `weights` (i8, `[OC, IC]` or `[OC, IC, KH, KW]`) for a per-tensor source
/// zero point of a `src_dtype` (u8 or i8) source, for a GEMM that reads the source as u8.
pub fn compensation(
    weights: &Tensor,
    src_dtype: DType,
    src_zero_point: &ZeroPoints,
    name: &str,
) -> Result<Compensation, QuantError> {
    compensation_for_gemm(weights, src_dtype, DType::U8, src_zero_point, name)
}

/// `compensation` for a GEMM that reads the source as `gemm_dtype` (u8; i8 for the x86
/// sign-transfer kernels, i16 for the pre-widened ones: `conv2d_int8_direct` with that
/// `GemmOperands::source`).
pub fn compensation_for_gemm(
    weights: &Tensor,
    src_dtype: DType,
    gemm_dtype: DType,
    src_zero_point: &ZeroPoints,
    name: &str,
) -> Result<Compensation, QuantError> {
    let op = format!("compensation {name}");
    require_s8_weights(&op, weights)?;
    if ![DType::U8, DType::I8].contains(&src_dtype) {
        return Err(dtype_error(&op, "the source", "u8 or i8", src_dtype));
    }
    if !GemmOperands::SOURCES.contains(&gemm_dtype) {
        return Err(dtype_error(&op, "the GEMM source", "u8, i8 or i16", gemm_dtype));
    }
    let zp = per_tensor_zero_point(&op, src_zero_point, src_dtype)?;
    let dims = weights.shape().to_vec();
    if dims.len() != 2 && dims.len() != 4 {
        return Err(shape_error(&op, "the weight shape", "[OC, IC] or [OC, IC, KH, KW]", format!("{dims:?}")));
    }
    let axes = dims[1..]
        .iter()
        .enumerate()
        .map(|(d, &n)| reduce_axis(n, ["ic", "kh", "kw"][d]))
        .collect::<Result<Vec<_>, _>>()?;
    let axis_refs: Vec<&_> = axes.iter().collect();
    let weight_sum = compute_vec(
        vec![dims[0]],
        |o| {
            let mut idx = vec![o[0].clone()];
            idx.extend(axes.iter().map(|a| a.to_expr()));
            sum(DType::I32, &axis_refs, weights.at_vec(idx).cast(DType::I32))
        },
        &format!("{name}.wsum"),
    )?;
    let factor = Expr::int(DType::I32, (zp + source_shift(src_dtype, gemm_dtype)) as i64);
    let compensation = compute_vec(vec![dims[0]], |o| weight_sum.at([&o[0]]) * factor, name)?;
    Ok(Compensation { weight_sum, compensation })
}

fn per_tensor_zero_point(op: &str, z: &ZeroPoints, dtype: DType) -> Result<i32, QuantError> {
    if z.mask != 0 {
        let (arg, expected) = ("src zero points".to_string(), "0 (per tensor)".to_string());
        return Err(QuantError::UnsupportedMask { op: op.to_string(), arg, expected, found: z.mask });
    }
    z.check("src zero point", &[], dtype)?;
    Ok(z.values[0])
}

/// Stride and symmetric zero padding (in source zero points) of a square-kernel convolution.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Conv2dParams {
    pub stride: i64,
    pub pad: i64,
}

/// The stages of an int8 convolution or dense layer.
#[derive(Clone, Debug)]
pub struct QuantizedLayer {
    /// Placeholder `i32[OC]`: bind the `compensation` computed when the weights were prepared.
    pub compensation: Tensor,
    /// `u8(src) + 128` for an i8 source (`<name>.shifted`).
    pub shifted: Option<Tensor>,
    /// The source padded with its (shifted) zero point (`<name>.pad`), when `pad > 0`.
    pub padded: Option<Tensor>,
    /// The exact i32 accumulator of u8 × i8 products (`<name>.acc`).
    pub acc: Tensor,
    /// The requantized output.
    pub output: Tensor,
    /// The requantization multipliers `src_scale · wei_scale[oc]` in f32 (a parameter when the
    /// weight scale mask is 1).
    pub params: Vec<Param>,
}

/// A per-tensor (scale, zero point).
type PerTensor = (f32, i32);

/// Checks the attributes shared by convolution and dense; returns the per-tensor source and
/// destination (scale, zero point).
fn check_layer_attrs(
    op: &str,
    src: &Tensor,
    weights: &Tensor,
    bias: Option<&Tensor>,
    out_dims: &[i64],
    sum_input: Option<&Tensor>,
    attrs: &QuantAttrs,
) -> Result<(PerTensor, PerTensor), QuantError> {
    require_int8_src(op, src)?;
    require_s8_weights(op, weights)?;
    if !is_dst_type(attrs.dst_dtype) {
        return Err(dtype_error(op, "the destination", DST_TYPES, attrs.dst_dtype));
    }
    let src_q = activation_quant(op, "src", &attrs.src, src.shape(), src.dtype())?;
    let dst_q = activation_quant(op, "dst", &attrs.dst, out_dims, attrs.dst_dtype)?;
    if attrs.wei_scales.mask > 1 {
        return Err(QuantError::UnsupportedMask {
            op: op.to_string(),
            arg: "weights scales".to_string(),
            expected: "0 (per tensor) or 1 (per output channel)".to_string(),
            found: attrs.wei_scales.mask,
        });
    }
    attrs.wei_scales.check("weights scales", weights.shape())?;
    let oc = weights.shape()[0];
    if let Some(b) = bias {
        if b.dtype() != DType::F32 {
            return Err(dtype_error(op, "the bias", "f32", b.dtype()));
        }
        if b.shape() != [oc] {
            return Err(shape_error(op, "the shape of the bias", format!("[{oc}]"), format!("{:?}", b.shape())));
        }
    }
    check_post_ops(op, &attrs.post_ops, sum_input, out_dims)?;
    Ok((src_q, dst_q))
}

/// The requantized output of a layer and what it reads besides the accumulator.
struct Requantized {
    /// Placeholder `i32[OC]` (`<name>.compensation`): bind the `compensation` computed when the
    /// weights were prepared.
    compensation: Tensor,
    output: Tensor,
    params: Vec<Param>,
}

/// `x = f32(acc − comp[oc]) · M[oc] + bias[oc]`, then post-ops and the destination (see `quant`),
/// over an output of shape `dims` whose element at `i` has the accumulator `read_acc(i)` and its
/// output channel at `i[channel_axis]`.
#[allow(clippy::too_many_arguments)]
fn requantize_layer(
    dims: Vec<i64>,
    read_acc: impl Fn(&[Expr]) -> Expr,
    channel_axis: usize,
    weights_dims: &[i64],
    bias: Option<&Tensor>,
    sum_input: Option<&Tensor>,
    (src_scale, dst_q): (f32, (f32, i32)),
    attrs: &QuantAttrs,
    name: &str,
) -> Result<Requantized, QuantError> {
    let compensation = placeholder_vec(vec![weights_dims[0]], DType::I32, &format!("{name}.compensation"))?;
    let mut params = Params::default();
    let w = &attrs.wei_scales;
    let output = compute_vec(
        dims,
        |i| {
            let oc = &i[channel_axis];
            let mut oc_index = vec![oc.clone()];
            oc_index.extend(weights_dims[1..].iter().map(|_| Expr::index(0)));
            // The products src_scale · wei_scale[oc] in f32, formed here once rather than per
            // element (the same IEEE products either way).
            let products = Scales { values: w.values.iter().map(|&v| src_scale * v).collect(), mask: w.mask };
            let multiplier = params.scale(&products, weights_dims, &oc_index, &format!("{name}.multiplier"));
            let centered = (read_acc(i) - compensation.at([oc])).cast(DType::F32);
            let mut x = centered * multiplier;
            if let Some(b) = bias {
                x = x + b.at([oc]);
            }
            finish(x, &attrs.post_ops, sum_input, i, dst_q, attrs.dst_dtype)
        },
        name,
    )?;
    Ok(Requantized { compensation, output, params: params.0 })
}

/// The requantization of `requantize_layer` over an `[m, n]` block of accumulators (`n` output
/// channels, contiguous in every operand) as an `IntrinKind::Map` declaration named
/// `requantize_{m}x{n}`: inputs `acc: i32[m, n]`, the compensation `[n]`, the bias `[n]` and
/// the sum input `[m, n]` where the layer has them, then the parameters, in that order. Built
/// by the same code as the layer's output, so that it is the same computation by construction.
#[allow(clippy::too_many_arguments)]
fn requantize_map(
    (m, n): (i64, i64),
    weights_dims: &[i64],
    bias: Option<&Tensor>,
    sum_input: Option<&Tensor>,
    quant: (f32, (f32, i32)),
    attrs: &QuantAttrs,
) -> Result<TensorIntrin, QuantError> {
    let acc = placeholder_vec(vec![m, n], DType::I32, "acc")?;
    let bias = bias.map(|b| placeholder_vec(vec![n], b.dtype(), "bias")).transpose()?;
    let sum = sum_input.map(|r| placeholder_vec(vec![m, n], r.dtype(), "sum")).transpose()?;
    let read_acc = |i: &[Expr]| acc.at([&i[0], &i[1]]);
    let Requantized { compensation, output, params } = requantize_layer(
        vec![m, n],
        read_acc,
        1,
        weights_dims,
        bias.as_ref(),
        sum.as_ref(),
        quant,
        attrs,
        "requantize",
    )?;
    let mut inputs = vec![&acc, &compensation];
    inputs.extend(bias.as_ref());
    inputs.extend(sum.as_ref());
    inputs.extend(params.iter().map(|p| &p.tensor));
    Ok(decl_tensor_intrin(&format!("requantize_{m}x{n}"), IntrinKind::Map { m, n }, &output, &inputs)?)
}

/// `src` as `gemm` (u8 or i8): itself, or `gemm(src) + source_shift` (wrapping, i.e. the top bit
/// flipped: `u8(x) + 128` for i8 → u8, `i8(x) - 128` for u8 → i8) as the stage `<name>.shifted`.
fn shifted_source(src: &Tensor, gemm: DType, name: &str) -> Result<(Tensor, Option<Tensor>), QuantError> {
    if src.dtype() == gemm {
        return Ok((src.clone(), None));
    }
    let shift = i64::from(source_shift(src.dtype(), gemm));
    let read = |i: &[Expr]| src.at_vec(i.to_vec()).cast(gemm);
    let shifted = compute_vec(
        src.shape().to_vec(),
        |i| if shift == 0 { read(i) } else { read(i) + shift },
        &format!("{name}.shifted"),
    )?;
    Ok((shifted.clone(), Some(shifted)))
}

/// The sizes of a convolution: source `[n, ic, h, w]`, weights `[oc, ic, kh, kw]`, output
/// `[n, oc, oh, ow]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct ConvGeometry {
    n: i64,
    ic: i64,
    h: i64,
    w: i64,
    oc: i64,
    kh: i64,
    kw: i64,
    oh: i64,
    ow: i64,
}

/// Checks the shapes, stride and padding of a convolution whose source is in `layout` and
/// derives its output size.
fn conv_geometry(
    op: &str,
    src: &Tensor,
    layout: Layout,
    weights: &Tensor,
    conv: Conv2dParams,
) -> Result<ConvGeometry, QuantError> {
    let (Some([n, ic, h, w]), &[oc, wic, kh, kw]) = (layout.nchw_dims(src.shape()), weights.shape()) else {
        let found = format!("{:?} and {:?}", src.shape(), weights.shape());
        let source = if layout == Layout::Nchw { "[N, IC, H, W]" } else { "[N, H, W, IC]" };
        return Err(shape_error(op, "the source and weight shapes", format!("{source} and [OC, IC, KH, KW]"), found));
    };
    if wic != ic {
        return Err(shape_error(op, "the input channels of the weights", ic.to_string(), wic.to_string()));
    }
    if conv.stride < 1 || conv.pad < 0 {
        let found = format!("stride {} and pad {}", conv.stride, conv.pad);
        return Err(shape_error(op, "the stride and padding", "stride >= 1 and pad >= 0", found));
    }
    let (oh, ow) = ((h + 2 * conv.pad - kh) / conv.stride + 1, (w + 2 * conv.pad - kw) / conv.stride + 1);
    if h + 2 * conv.pad < kh || w + 2 * conv.pad < kw {
        let found = format!("{kh}x{kw} over {h}x{w} padded by {}", conv.pad);
        return Err(shape_error(op, "the kernel", "no larger than the padded source", found));
    }
    Ok(ConvGeometry { n, ic, h, w, oc, kh, kw, oh, ow })
}

/// The int8 convolution `src: [N, IC, H, W]` (u8 or i8) ⊛ `weights: [OC, IC, KH, KW]` (i8) with
/// stride and padding, requantized as `attrs` say (`quant` module doc), plus the post-ops'
/// `sum_input` (shape of the output) and an optional f32 `bias: [OC]`. The output is
/// `[N, OC, OH, OW]` with `OH = (H + 2·pad − KH) / stride + 1` (floor), likewise `OW`.
///
/// Padding is a separate stage holding the (shifted) source zero point, so a padded tap
/// contributes a real zero. Errors: every shape, dtype and attribute mismatch is typed.
pub fn conv2d_nchw_int8(
    src: &Tensor,
    weights: &Tensor,
    bias: Option<&Tensor>,
    sum_input: Option<&Tensor>,
    conv: Conv2dParams,
    attrs: &QuantAttrs,
    name: &str,
) -> Result<QuantizedLayer, QuantError> {
    let op = format!("conv2d_nchw_int8 {name}");
    let ConvGeometry { n, ic, h, w, oc, kh, kw, oh, ow } = conv_geometry(&op, src, Layout::Nchw, weights, conv)?;
    let out_dims = [n, oc, oh, ow];
    let ((src_scale, src_zp), dst_q) = check_layer_attrs(&op, src, weights, bias, &out_dims, sum_input, attrs)?;
    let (unsigned, shifted) = shifted_source(src, DType::U8, name)?;
    let pad_value = Expr::int(DType::U8, (src_zp + source_shift(src.dtype(), DType::U8)) as i64);
    let (padded, padded_stage) = if conv.pad > 0 {
        let p = conv.pad;
        let padded = compute_vec(
            vec![n, ic, h + 2 * p, w + 2 * p],
            |i| {
                let (y, x) = (&i[2] - p, &i[3] - p);
                let inside = y.ge(0) & y.lt(h) & x.ge(0) & x.lt(w);
                select(inside, unsigned.at([&i[0], &i[1], &y, &x]), pad_value)
            },
            &format!("{name}.pad"),
        )?;
        (padded.clone(), Some(padded))
    } else {
        (unsigned, None)
    };
    let (ric, rkh, rkw) = (reduce_axis(ic, "ic")?, reduce_axis(kh, "kh")?, reduce_axis(kw, "kw")?);
    let s = conv.stride;
    let acc = compute_vec(
        out_dims.to_vec(),
        |i| {
            let x = padded.at([&i[0], &ric, &(&i[2] * s + &rkh), &(&i[3] * s + &rkw)]).cast(DType::I32);
            let wv = weights.at([&i[1], &ric, &rkh, &rkw]).cast(DType::I32);
            sum(DType::I32, &[&ric, &rkh, &rkw], x * wv)
        },
        &format!("{name}.acc"),
    )?;
    let Requantized { compensation, output, params } = requantize_layer(
        acc.shape().to_vec(),
        |i| acc.at_vec(i.to_vec()),
        1,
        weights.shape(),
        bias,
        sum_input,
        (src_scale, dst_q),
        attrs,
        name,
    )?;
    Ok(QuantizedLayer { compensation, shifted, padded: padded_stage, acc, output, params })
}

/// The bytes of one kernel row in the x86 layouts: the `KW·IC` source bytes a pixel reads for one
/// kernel row (contiguous channels last), rounded up to a multiple of 4 (one VNNI group).
pub fn conv_row_bytes(ic: i64, kw: i64) -> i64 {
    ceil_div(kw * ic, 4) * 4
}

/// The weight preparation of `conv2d_int8_direct` (run once, when the weights are packed):
/// `weights: i8[OC, IC, KH, KW]` as the VNNI panels `[⌈OC/nr⌉, K/4, nr, 4]` of the GEMM operand
/// `B[k, oc]`, i.e. `packed[p, ko, j, ki] = B[ko·4 + ki, p·nr + j]` as `nn::pack_b_vnni` lays it
/// out, with `k = kh·R + kw·IC + ic`, `R = conv_row_bytes(IC, KW)` and `K = KH·R`; for an i16
/// `operands.source`, widened to i16 in pairs, `[⌈OC/nr⌉, K/2, nr, 2]`
/// (`packed[p, ko, j, ki] = B[ko·2 + ki, p·nr + j]`). Entries for the `R - KW·IC` bytes that
/// round a kernel row up, or for `oc ≥ OC`, are 0, so they add nothing to the accumulator.
pub fn pack_conv2d_weights(
    weights: &Tensor,
    nr: i64,
    operands: GemmOperands,
    name: &str,
) -> Result<Tensor, QuantError> {
    let op = format!("pack_conv2d_weights {name}");
    require_s8_weights(&op, weights)?;
    let [oc, ic, kh, kw] = *weights.shape() else {
        return Err(shape_error(&op, "the weight shape", "[OC, IC, KH, KW]", format!("{:?}", weights.shape())));
    };
    if nr < 1 {
        return Err(shape_error(&op, "the panel width nr", "positive", nr.to_string()));
    }
    let row = conv_row_bytes(ic, kw);
    let (pack, dtype) = (operands.pack(), operands.weight_dtype());
    Ok(compute_vec(
        vec![ceil_div(oc, nr), kh * row / pack, nr, pack],
        |i| {
            let o = &i[0] * nr + &i[2];
            let k = &i[1] * pack + &i[3];
            let (ky, r) = (&k / row, &k % row);
            let inside = r.lt(kw * ic) & o.lt(oc);
            select(inside, weights.at([&o, &(&r % ic), &ky, &(&r / ic)]).cast(dtype), Expr::int(dtype, 0))
        },
        name,
    )?)
}

/// The order of an activation tensor's dimensions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    /// `[N, C, H, W]`: each channel's plane contiguous (the layout of `conv2d_nchw_int8`).
    Nchw,
    /// `[N, H, W, C]`: each pixel's channels contiguous. The x86 convolution computes in it, so
    /// layers chained in NHWC need no transposes between them.
    Nhwc,
}

impl Layout {
    /// The shape of an activation with `n` images of `c` channels of `h × w` pixels.
    pub fn shape(self, [n, c, h, w]: [i64; 4]) -> [i64; 4] {
        match self {
            Layout::Nchw => [n, c, h, w],
            Layout::Nhwc => [n, h, w, c],
        }
    }

    /// `[n, c, h, w]` of a tensor of this layout (`None` unless 4-D).
    fn nchw_dims(self, shape: &[i64]) -> Option<[i64; 4]> {
        let &[a, b, c, d] = shape else { return None };
        Some(match self {
            Layout::Nchw => [a, b, c, d],
            Layout::Nhwc => [a, d, b, c],
        })
    }

    /// `(n, c, y, x)` of the index `i` of a tensor in this layout.
    pub fn nchw_of(self, i: &[Expr]) -> [&Expr; 4] {
        match self {
            Layout::Nchw => [&i[0], &i[1], &i[2], &i[3]],
            Layout::Nhwc => [&i[0], &i[3], &i[1], &i[2]],
        }
    }

    /// The index, in this layout, of image `n`, channel `c`, row `y`, column `x`.
    pub fn index(self, n: &Expr, c: &Expr, y: &Expr, x: &Expr) -> [Expr; 4] {
        let [n, c, y, x] = [n, c, y, x].map(Expr::clone);
        match self {
            Layout::Nchw => [n, c, y, x],
            Layout::Nhwc => [n, y, x, c],
        }
    }
}

/// How the GEMM of `conv2d_int8_direct` reads its operands: the x86 kernel family's choice.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GemmOperands {
    /// The dtype of the padded source: u8 (VNNI, the `vpmaddubsw` triple, widening), i8, the
    /// source shifted by -128 (AVX2 sign transfer), or i16, the source widened (AVX2
    /// `vpmaddwd` on pre-widened operands: the weights are then packed as i16 pairs); the
    /// compensation must be computed for it (`compensation_for_gemm`).
    pub source: DType,
    /// The range the packed weights are declared to lie in, so that code generation may rely
    /// on it (e.g. the triple is exact when `255·(w0 + w1)` fits i16) and every call checks it
    /// before generated code runs (a range covering all of i8 is not scanned). It must contain
    /// 0 (the packing's padding). Not declared for an i16 source, whose kernels are exact on any
    /// i16.
    pub weights: (i8, i8),
}

impl GemmOperands {
    /// A u8 source and any i8 weights.
    pub const U8: GemmOperands = GemmOperands { source: DType::U8, weights: (i8::MIN, i8::MAX) };

    /// The GEMM source dtypes there are kernels for.
    pub const SOURCES: [DType; 3] = [DType::U8, DType::I8, DType::I16];

    /// Consecutive `k` per column in the packed weights: 4 bytes, or 2 i16 for an i16 source.
    pub fn pack(self) -> i64 {
        if self.source == DType::I16 { 2 } else { 4 }
    }

    /// The packed weights' dtype: i16 for an i16 source, else i8.
    pub fn weight_dtype(self) -> DType {
        if self.source == DType::I16 { DType::I16 } else { DType::I8 }
    }
}

/// The stages of `conv2d_int8_direct`, with `R = conv_row_bytes(IC, KW)`.
#[derive(Clone, Debug)]
pub struct DirectConvLayer {
    /// Placeholder `i32[OC]`: bind `compensation(weights, ..)` (as for `conv2d_nchw_int8`).
    pub compensation: Tensor,
    /// Placeholder `i8[⌈OC/nr⌉, KH·R/4, nr, 4]` (`i16[⌈OC/nr⌉, KH·R/2, nr, 2]` for an i16
    /// source): bind `pack_conv2d_weights(weights, nr, operands)`.
    pub packed_weights: Tensor,
    /// The source as `GemmOperands::source` when it is not already (`<name>.shifted`: shifted
    /// by -128 to i8, or widened to i16).
    pub shifted: Option<Tensor>,
    /// `u8[N, HS, RS]` (`<name>.pad`; of the `GemmOperands::source` dtype): the source channels
    /// last, row by row (pixel `x`'s `IC` channels at `x·IC`), padded by `pad` pixels with the
    /// (shifted) source zero point; each row holds at least `WS·IC + R - KW·IC` elements (the last
    /// pixel's kernel row reads up to `R`), rounded up to a multiple of 16 so that rows vectorize
    /// whole. A 1×1
    /// kernel reads its source here already subsampled by the stride (`HS = OH`, `WS = OW`; the
    /// accumulator then runs at stride 1).
    pub padded: Tensor,
    /// `i32[N, OH, OW, ⌈OC/nr⌉·nr]` (`<name>.acc`): reduction axes `ky` (`KH`), `ko` (`R/P`)
    /// and `ki` (`P`, `GemmOperands::pack`). For a fixed `ky`, the `R` elements a pixel reads
    /// are contiguous in `padded`, and consecutive pixels of a row are `stride·IC` apart: a GEMM of `mr` pixels ×
    /// `nr` channels × `R` per `ky` with no copy of the source.
    pub acc: Tensor,
    /// The requantized output, `[N, OC, OH, OW]` or `[N, OH, OW, OC]` by the layout.
    pub output: Tensor,
    /// The requantization multipliers `src_scale · wei_scale[oc]` in f32 (a parameter when the
    /// weight scale mask is 1).
    pub params: Vec<Param>,
    /// The requantization of one output row of `OW` pixels × `OC` channels (`requantize_map`):
    /// what an NHWC schedule tensorizes the output's pixel loop with.
    pub requantize_row: TensorIntrin,
}

/// The int8 convolution of `conv2d_nchw_int8` (same meaning, bit for bit) with source and output
/// (and sum input) in `layout`, defined as the direct convolution an x86 schedule tensorizes
/// (`DirectConvLayer`): the weights come packed by `pack_conv2d_weights(weights, nr, operands)`
/// (`weights` is only the shape and dtype here), the accumulator has `nr`-padded channels, the
/// GEMM reads its operands as `operands` says. Errors also for a weight range without 0 or a
/// source dtype other than u8 or i8.
#[allow(clippy::too_many_arguments)]
pub fn conv2d_int8_direct(
    src: &Tensor,
    weights: &Tensor,
    bias: Option<&Tensor>,
    sum_input: Option<&Tensor>,
    conv: Conv2dParams,
    attrs: &QuantAttrs,
    layout: Layout,
    nr: i64,
    operands: GemmOperands,
    name: &str,
) -> Result<DirectConvLayer, QuantError> {
    let op = format!("conv2d_int8_direct {name}");
    let ConvGeometry { n, ic, h, w, oc, kh, kw, oh, ow } = conv_geometry(&op, src, layout, weights, conv)?;
    if nr < 1 {
        return Err(shape_error(&op, "the panel width nr", "positive", nr.to_string()));
    }
    let (w_lo, w_hi) = operands.weights;
    if !(w_lo <= 0 && 0 <= w_hi) {
        return Err(shape_error(&op, "the weight range", "lo ≤ 0 ≤ hi", format!("{w_lo}..={w_hi}")));
    }
    let gemm = operands.source;
    if !GemmOperands::SOURCES.contains(&gemm) {
        return Err(dtype_error(&op, "the GEMM source", "u8, i8 or i16", gemm));
    }
    let out_dims = layout.shape([n, oc, oh, ow]);
    let ((src_scale, src_zp), dst_q) = check_layer_attrs(&op, src, weights, bias, &out_dims, sum_input, attrs)?;
    let (source, shifted) = shifted_source(src, gemm, name)?;
    let pad_value = Expr::int(gemm, (src_zp + source_shift(src.dtype(), gemm)) as i64);
    let (p, row) = (conv.pad, conv_row_bytes(ic, kw));
    // A 1×1 kernel subsamples while padding and then runs at stride 1.
    let (step, s) = if kh == 1 && kw == 1 { (conv.stride, 1) } else { (1, conv.stride) };
    let (hs, ws) = if step > 1 { (oh, ow) } else { (h + 2 * p, w + 2 * p) };
    let row_width = ceil_div(ws * ic + row - kw * ic, 16) * 16;
    let padded = compute_vec(
        vec![n, hs, row_width],
        |i| {
            let y = &i[1] * step - p;
            // Reads are clamped into the source, so that they need no guard when vectorized
            // (the select discards them outside).
            let clamp = |v: Expr, size: i64| index_min(index_max(v, Expr::index(0)), size - 1);
            let (inside_row, x, c) = if step == 1 {
                // The pixels of a row in the source are contiguous too: one offset `t`, whose
                // clamp `partition_loops` removes in the interior of the row.
                let t = &i[2] - p * ic;
                let ct = clamp(t.clone(), w * ic);
                (t.clone().ge(0) & t.lt(w * ic), &ct / ic, &ct % ic)
            } else {
                let x = &i[2] / ic * step - p;
                let inside = x.clone().ge(0) & x.clone().lt(w) & i[2].clone().lt(ws * ic);
                (inside, clamp(x, w), &i[2] % ic)
            };
            let inside = y.clone().ge(0) & y.clone().lt(h) & inside_row;
            select(inside, source.at_vec(layout.index(&i[0], &c, &clamp(y, h), &x).to_vec()), pad_value)
        },
        &format!("{name}.pad"),
    )?;
    let panels = ceil_div(oc, nr);
    let pack = operands.pack();
    let (packed_shape, packed_name) = (vec![panels, kh * row / pack, nr, pack], format!("{name}.packed_weights"));
    // The i16 kernels are exact on every i16: no range to declare (and none to check per call).
    let packed_weights = if gemm == DType::I16 {
        placeholder_vec(packed_shape, DType::I16, &packed_name)?
    } else {
        placeholder_vec_in_range(packed_shape, DType::I8, i64::from(w_lo)..=i64::from(w_hi), &packed_name)?
    };
    let (ky, ko, ki) = (reduce_axis(kh, "ky")?, reduce_axis(row / pack, "ko")?, reduce_axis(pack, "ki")?);
    let acc = compute_vec(
        vec![n, oh, ow, panels * nr],
        |i| {
            let a = padded.at([&i[0], &(&i[1] * s + &ky), &(&i[2] * (s * ic) + &ko * pack + &ki)]).cast(DType::I32);
            let group = &ky * (row / pack) + &ko;
            let b = packed_weights.at([&(&i[3] / nr), &group, &(&i[3] % nr), &ki.to_expr()]).cast(DType::I32);
            sum(DType::I32, &[&ky, &ko, &ki], a * b)
        },
        &format!("{name}.acc"),
    )?;
    let channel_axis = if layout == Layout::Nchw { 1 } else { 3 };
    let Requantized { compensation, output, params } = requantize_layer(
        out_dims.to_vec(),
        |i| {
            let [b, o, y, x] = layout.nchw_of(i);
            acc.at([b, y, x, o])
        },
        channel_axis,
        weights.shape(),
        bias,
        sum_input,
        (src_scale, dst_q),
        attrs,
        name,
    )?;
    let requantize_row = requantize_map((ow, oc), weights.shape(), bias, sum_input, (src_scale, dst_q), attrs)?;
    Ok(DirectConvLayer { compensation, packed_weights, shifted, padded, acc, output, params, requantize_row })
}

/// The int8 dense layer `out[m, oc] = requant(Σ_ic src[m, ic] · weights[oc, ic])` for
/// `src: [M, IC]` (u8 or i8) and `weights: [OC, IC]` (i8); requantization, bias and sum input
/// as for `conv2d_nchw_int8`.
pub fn dense_int8(
    src: &Tensor,
    weights: &Tensor,
    bias: Option<&Tensor>,
    sum_input: Option<&Tensor>,
    attrs: &QuantAttrs,
    name: &str,
) -> Result<QuantizedLayer, QuantError> {
    let op = format!("dense_int8 {name}");
    let ([m, ic], [oc, wic]) = (src.shape(), weights.shape()) else {
        let found = format!("{:?} and {:?}", src.shape(), weights.shape());
        return Err(shape_error(&op, "the source and weight shapes", "[M, IC] and [OC, IC]", found));
    };
    let (m, ic, oc) = (*m, *ic, *oc);
    if *wic != ic {
        return Err(shape_error(&op, "the input channels of the weights", ic.to_string(), wic.to_string()));
    }
    let out_dims = [m, oc];
    let ((src_scale, _), dst_q) = check_layer_attrs(&op, src, weights, bias, &out_dims, sum_input, attrs)?;
    let (unsigned, shifted) = shifted_source(src, DType::U8, name)?;
    let k = reduce_axis(ic, "ic")?;
    let acc = compute_vec(
        out_dims.to_vec(),
        |i| {
            let x = unsigned.at([&i[0], &k]).cast(DType::I32);
            sum(DType::I32, &[&k], x * weights.at([&i[1], &k]).cast(DType::I32))
        },
        &format!("{name}.acc"),
    )?;
    let Requantized { compensation, output, params } = requantize_layer(
        acc.shape().to_vec(),
        |i| acc.at_vec(i.to_vec()),
        1,
        weights.shape(),
        bias,
        sum_input,
        (src_scale, dst_q),
        attrs,
        name,
    )?;
    Ok(QuantizedLayer { compensation, shifted, padded: None, acc, output, params })
}

fn require_nchw(op: &str, src: &Tensor) -> Result<[i64; 4], QuantError> {
    match src.shape() {
        [n, c, h, w] => Ok([*n, *c, *h, *w]),
        other => Err(shape_error(op, "the source shape", "[N, C, H, W]", format!("{other:?}"))),
    }
}

/// Max pooling of an integer `src: [N, C, H, W]` with a `k × k` window, `stride` and symmetric
/// `pad`. Padded positions never win: they hold the dtype's minimum (a separate `<name>.pad`
/// stage), so the maximum is over the window's positions inside the source, and `pad < k`
/// (checked) guarantees every window has one. Output `(H + 2·pad − k) / stride + 1` (floor) per
/// spatial dimension; the dtype and quantization are the source's (max commutes with them).
pub fn max_pool2d(src: &Tensor, k: i64, stride: i64, pad: i64, name: &str) -> Result<Tensor, QuantError> {
    let op = format!("max_pool2d {name}");
    let [n, c, h, w] = require_nchw(&op, src)?;
    let Some((lo, _)) = src.dtype().scalar.int_range() else {
        return Err(dtype_error(&op, "the source", "an integer type", src.dtype()));
    };
    if k < 1 || stride < 1 || pad < 0 || pad >= k || h + 2 * pad < k || w + 2 * pad < k {
        let found = format!("window {k}, stride {stride}, pad {pad} over {h}x{w}");
        return Err(shape_error(
            &op,
            "the window",
            "k >= 1, stride >= 1, 0 <= pad < k, window within the padded source",
            found,
        ));
    }
    let padded = compute_vec(
        vec![n, c, h + 2 * pad, w + 2 * pad],
        |i| {
            let (y, x) = (&i[2] - pad, &i[3] - pad);
            let inside = y.ge(0) & y.lt(h) & x.ge(0) & x.lt(w);
            select(inside, src.at([&i[0], &i[1], &y, &x]), Expr::int(src.dtype(), lo as i64))
        },
        &format!("{name}.pad"),
    )?;
    let (ry, rx) = (reduce_axis(k, "ky")?, reduce_axis(k, "kx")?);
    let (oh, ow) = ((h + 2 * pad - k) / stride + 1, (w + 2 * pad - k) / stride + 1);
    Ok(compute_vec(
        vec![n, c, oh, ow],
        |i| max(src.dtype(), &[&ry, &rx], padded.at([&i[0], &i[1], &(&i[2] * stride + &ry), &(&i[3] * stride + &rx)])),
        name,
    )?)
}

/// Global average pooling of `src: [N, C, H, W]` (u8 or i8) to `[N, C, 1, 1]` of the same dtype
/// and quantization: the exact i32 sum over `H·W` (`<name>.sum`), divided by `H·W` rounding half
/// to even, computed exactly in integers: `q = ⌊s / n⌋`, `r = s − q·n`, and `q + 1` when
/// `2r > n` or `2r == n` with `q` odd. The average of the source values lies in their range, so
/// the final cast is exact.
pub fn global_avg_pool(src: &Tensor, name: &str) -> Result<Tensor, QuantError> {
    let op = format!("global_avg_pool {name}");
    require_int8_src(&op, src)?;
    let [n, c, h, w] = require_nchw(&op, src)?;
    let (ry, rx) = (reduce_axis(h, "y")?, reduce_axis(w, "x")?);
    let total = compute_vec(
        vec![n, c],
        |i| sum(DType::I32, &[&ry, &rx], src.at([&i[0], &i[1], &ry, &rx]).cast(DType::I32)),
        &format!("{name}.sum"),
    )?;
    let count = h * w;
    Ok(compute_vec(
        vec![n, c, 1, 1],
        |i| {
            let s = total.at([&i[0], &i[1]]);
            let q = &s / count;
            let r = s - &q * count;
            let twice = r * 2;
            let up = twice.gt(count) | (twice.eq(count) & (&q % 2).eq(1));
            select(up, &q + 1, q).cast(src.dtype())
        },
        name,
    )?)
}

/// ReLU of a quantized tensor: `max(x, zp)`, the real zero being the zero point. Same dtype.
pub fn relu_int8(src: &Tensor, zero_point: &ZeroPoints, name: &str) -> Result<Tensor, QuantError> {
    let op = format!("relu_int8 {name}");
    require_int8_src(&op, src)?;
    let zp = per_tensor_zero_point(&op, zero_point, src.dtype())?;
    Ok(compute_vec(
        src.shape().to_vec(),
        |i| Expr::max(src.at_vec(i.to_vec()), Expr::int(src.dtype(), zp as i64)),
        name,
    )?)
}

/// The residual add `dst = sat(round(post(sa · f32(i32(a) − zpa)) / s_dst + f32(zp_dst)))` with
/// `post = [Sum { sb, zpb } over b, then Relu if relu]`: exactly a layer's requantization tail
/// (`quant` module doc) with `a` in place of the scaled accumulator. `a` and `b` are u8 or i8 of
/// one shape; all quantizations per tensor; `dst_dtype` u8, i8, i32 or f32.
pub fn add_int8(
    (a, a_q): (&Tensor, &TensorQuant),
    (b, b_q): (&Tensor, &TensorQuant),
    relu: bool,
    (dst_dtype, dst_q): (DType, &TensorQuant),
    name: &str,
) -> Result<Tensor, QuantError> {
    let op = format!("add_int8 {name}");
    require_int8_src(&op, a)?;
    require_int8_src(&op, b)?;
    if !is_dst_type(dst_dtype) {
        return Err(dtype_error(&op, "the destination", DST_TYPES, dst_dtype));
    }
    let dims = a.shape().to_vec();
    let (sa, zpa) = activation_quant(&op, "a", a_q, &dims, a.dtype())?;
    let (sb, zpb) = activation_quant(&op, "b", b_q, b.shape(), b.dtype())?;
    let dst = activation_quant(&op, "dst", dst_q, &dims, dst_dtype)?;
    let mut post_ops = vec![PostOp::Sum { scale: sb, zero_point: zpb }];
    if relu {
        post_ops.push(PostOp::Relu);
    }
    check_post_ops(&op, &post_ops, Some(b), &dims)?;
    Ok(compute_vec(
        dims.clone(),
        |i| {
            let centered = (a.at_vec(i.to_vec()).cast(DType::I32) - Expr::int(DType::I32, zpa as i64)).cast(DType::F32);
            finish(f32c(sa) * centered, &post_ops, Some(b), i, dst, dst_dtype)
        },
        name,
    )?)
}

/// `NCHW → NCHW[x]c`: `out[n, cb, h, w, ci] = src[n, cb·x + ci, h, w]`, shape
/// `[N, ⌈C/x⌉, H, W, x]`; channels past `C` hold `pad_value` (the zero point, for activations).
pub fn nchw_to_nchwc(src: &Tensor, x: i64, pad_value: i64, name: &str) -> Result<Tensor, QuantError> {
    let op = format!("nchw_to_nchwc {name}");
    let [n, c, h, w] = require_nchw(&op, src)?;
    if x < 1 {
        return Err(shape_error(&op, "the channel block", "a positive size", x.to_string()));
    }
    let fits = src.dtype().scalar.int_range().is_none_or(|(lo, hi)| (lo..=hi).contains(&(pad_value as i128)));
    if !fits {
        return Err(shape_error(&op, "the pad value", format!("a value of {}", src.dtype()), pad_value.to_string()));
    }
    let pad = if src.dtype().is_float() {
        Expr::float(src.dtype(), pad_value as f64)
    } else {
        Expr::int(src.dtype(), pad_value)
    };
    Ok(compute_vec(
        vec![n, ceil_div(c, x), h, w, x],
        |i| {
            let ch = &i[1] * x + &i[4];
            select(ch.lt(c), src.at([&i[0], &ch, &i[2], &i[3]]), pad)
        },
        name,
    )?)
}

/// `NCHW[x]c → NCHW` keeping the first `channels` channels: `out[n, c, h, w] = src[n, c / x, h,
/// w, c % x]`. `channels` must need all `⌈channels/x⌉` blocks of `src`.
pub fn nchwc_to_nchw(src: &Tensor, channels: i64, name: &str) -> Result<Tensor, QuantError> {
    let op = format!("nchwc_to_nchw {name}");
    let [n, cb, h, w, x] = *src.shape() else {
        return Err(shape_error(&op, "the source shape", "[N, C/x, H, W, x]", format!("{:?}", src.shape())));
    };
    if channels < 1 || ceil_div(channels, x) != cb {
        let expected = format!("{} to {} (for {cb} blocks of {x})", (cb - 1) * x + 1, cb * x);
        return Err(shape_error(&op, "the channel count", expected, channels.to_string()));
    }
    Ok(compute_vec(vec![n, channels, h, w], |i| src.at([&i[0], &(&i[1] / x), &i[2], &i[3], &(&i[1] % x)]), name)?)
}

/// The activation `src` in layout `from` rewritten in layout `to` (e.g. `NCHW → NHWC`:
/// `out[n, h, w, c] = src[n, c, h, w]`): the transposes between the API layout and the one the
/// x86 convolution computes in.
pub fn convert_layout(src: &Tensor, from: Layout, to: Layout, name: &str) -> Result<Tensor, QuantError> {
    let op = format!("convert_layout {name}");
    let Some(dims) = from.nchw_dims(src.shape()) else {
        let expected = if from == Layout::Nchw { "[N, C, H, W]" } else { "[N, H, W, C]" };
        return Err(shape_error(&op, "the source shape", expected, format!("{:?}", src.shape())));
    };
    Ok(compute_vec(
        to.shape(dims).to_vec(),
        |i| {
            let [n, c, y, x] = to.nchw_of(i);
            src.at_vec(from.index(n, c, y, x).to_vec())
        },
        name,
    )?)
}

/// `OIHW → OIHW[x/4]i[y]o4i`, the VNNI-blocked weights: `out[ob, ib, kh, kw, i4, oi, ii] =
/// wei[ob·y + oi, ib·x + i4·4 + ii, kh, kw]`, shape `[⌈O/y⌉, ⌈I/x⌉, KH, KW, x/4, y, 4]`, so one
/// `(kh, kw, i4)` step of a `y`-channel block is `4·y` consecutive bytes (four consecutive input
/// channels per output channel, what `vpdpbusd` reads). Channels past `O` or `I` are zero (they
/// add nothing to the accumulator or the compensation). `x` must be a positive multiple of 4.
pub fn oihw_to_vnni_blocked(weights: &Tensor, x: i64, y: i64, name: &str) -> Result<Tensor, QuantError> {
    let op = format!("oihw_to_vnni_blocked {name}");
    let [o, i_ch, kh, kw] = *weights.shape() else {
        return Err(shape_error(&op, "the weight shape", "[O, I, KH, KW]", format!("{:?}", weights.shape())));
    };
    if x < 4 || x % 4 != 0 || y < 1 {
        return Err(shape_error(
            &op,
            "the blocks (x, y)",
            "x a positive multiple of 4 and y >= 1",
            format!("({x}, {y})"),
        ));
    }
    let zero =
        if weights.dtype().is_float() { Expr::float(weights.dtype(), 0.0) } else { Expr::int(weights.dtype(), 0) };
    Ok(compute_vec(
        vec![ceil_div(o, y), ceil_div(i_ch, x), kh, kw, x / 4, y, 4],
        |i| {
            let oc = &i[0] * y + &i[5];
            let ic = &i[1] * x + &i[4] * 4 + &i[6];
            let inside = oc.lt(o) & ic.lt(i_ch);
            select(inside, weights.at([&oc, &ic, &i[2], &i[3]]), zero)
        },
        name,
    )?)
}
