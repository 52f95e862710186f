//! What the int8 convolutions and the dense layer share: the stages of the reference ones
//! (`QuantizedLayer`), the checks of their attributes, and the requantization of the
//! accumulator, as a stage and as the `Map` declaration an x86 schedule tensorizes it with.

use ir::intrin::{IntrinKind, TensorIntrin, decl_tensor_intrin};
use ir::te::{Tensor, compute_vec, placeholder_vec};
use ir::{DType, Expr};

use super::checks::{dtype_error, require_int8_src, require_s8_weights, shape_error};
use crate::quant::{
    DST_TYPES, Param, Params, PostOp, QuantAttrs, QuantError, Requantization, Scales, activation_quant, check_post_ops,
    finish, finish_onnxruntime, finish_qlinear_add, is_dst_type,
};

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
pub(super) fn check_layer_attrs(
    op: &str,
    src: &Tensor,
    weights: &Tensor,
    bias: Option<&Tensor>,
    out_dims: &[i64],
    sum_input: Option<&Tensor>,
    attrs: &QuantAttrs,
) -> Result<(PerTensor, PerTensor), QuantError> {
    check_layer_attrs_dims(op, src, weights, weights.shape(), bias, out_dims, sum_input, attrs)
}

/// `check_layer_attrs` for weights stored in another order than the one the attributes name:
/// `weights_dims` are their dimensions in that order (`[OC, ...]`).
#[allow(clippy::too_many_arguments)]
pub(super) fn check_layer_attrs_dims(
    op: &str,
    src: &Tensor,
    weights: &Tensor,
    weights_dims: &[i64],
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
    let dst_q = check_requantization(op, weights_dims, bias, out_dims, sum_input, attrs)?;
    Ok((src_q, dst_q))
}

/// The checks of a layer's requantization of its accumulator (of shape `out_dims`; the weights'
/// dimensions `weights_dims`, output channel first): the destination's quantization, which it
/// returns, the weights scales, the bias, the post-ops and onnxruntime's order. The caller
/// checks the destination's type and the source first.
fn check_requantization(
    op: &str,
    weights_dims: &[i64],
    bias: Option<&Tensor>,
    out_dims: &[i64],
    sum_input: Option<&Tensor>,
    attrs: &QuantAttrs,
) -> Result<PerTensor, QuantError> {
    let dst_q = activation_quant(op, "dst", &attrs.dst, out_dims, attrs.dst_dtype)?;
    if attrs.wei_scales.mask > 1 {
        return Err(QuantError::UnsupportedMask {
            op: op.to_string(),
            arg: "weights scales".to_string(),
            expected: "0 (per tensor) or 1 (per output channel)".to_string(),
            found: attrs.wei_scales.mask,
        });
    }
    attrs.wei_scales.check("weights scales", weights_dims)?;
    let oc = weights_dims.first().copied().unwrap_or(0);
    if let Some(b) = bias {
        if b.dtype() != DType::F32 {
            return Err(dtype_error(op, "the bias", "f32", b.dtype()));
        }
        if b.shape() != [oc] {
            return Err(shape_error(op, "the shape of the bias", format!("[{oc}]"), format!("{:?}", b.shape())));
        }
    }
    check_post_ops(op, &attrs.post_ops, sum_input, out_dims)?;
    if attrs.requantization == Requantization::OnnxRuntime {
        check_onnxruntime_attrs(op, bias, sum_input, attrs)?;
    } else if attrs.post_ops.iter().any(|p| matches!(p, PostOp::QLinearAdd(_))) {
        let found = format!("{:?}", attrs.post_ops);
        return Err(shape_error(
            op,
            "the post-ops in oneDNN's order",
            "ReLU and Sum (QLinearAdd: onnxruntime's)",
            found,
        ));
    }
    Ok(dst_q)
}

/// What onnxruntime's order (`quant` module doc) adds: a u8 or i8 destination, no f32 bias
/// (its i32 bias is folded into the compensation), ReLU as the only post-op.
fn check_onnxruntime_attrs(
    op: &str,
    bias: Option<&Tensor>,
    sum_input: Option<&Tensor>,
    attrs: &QuantAttrs,
) -> Result<(), QuantError> {
    if ![DType::U8, DType::I8].contains(&attrs.dst_dtype) {
        return Err(dtype_error(op, "the destination in onnxruntime's order", "u8 or i8", attrs.dst_dtype));
    }
    if let Some(b) = bias {
        let found = format!("{} {:?}", b.dtype(), b.shape());
        let expected = "no bias tensor (onnxruntime's i32 bias is folded into the compensation)";
        return Err(shape_error(op, "the bias in onnxruntime's order", expected, found));
    }
    // A ReLU, then a QLinearAdd last (with the sum input of the destination's type), or neither.
    let body = match attrs.post_ops.last() {
        Some(PostOp::QLinearAdd(_)) => &attrs.post_ops[..attrs.post_ops.len() - 1],
        _ => &attrs.post_ops[..],
    };
    let add = body.len() < attrs.post_ops.len();
    let sum_fits = match sum_input {
        Some(r) => add && r.dtype() == attrs.dst_dtype,
        None => !add,
    };
    if !sum_fits || body.iter().any(|p| *p != PostOp::Relu) {
        let found = format!("{:?} with {} sum input", attrs.post_ops, if sum_input.is_some() { "a" } else { "no" });
        let expected = "ReLU, then a QLinearAdd with a sum input of the destination's type, or neither";
        return Err(shape_error(op, "the post-ops in onnxruntime's order", expected, found));
    }
    Ok(())
}

/// The requantized output of a layer and what it reads besides the accumulator.
#[derive(Clone, Debug)]
pub struct Requantized {
    /// Placeholder `i32[OC]` (`<name>.compensation`): bind the `compensation` computed when the
    /// weights were prepared.
    pub compensation: Tensor,
    pub output: Tensor,
    pub params: Vec<Param>,
}

/// The layers' requantization (`requantize_layer`, the stage `conv2d_nchw_int8` and
/// `dense_int8` end with) applied to an existing i32 accumulator stage `acc` whose last axis is
/// the output channel: what an operator that ends at the accumulator becomes when it ends as
/// the layer does. `weights_dims` are the weights' dimensions with the output channel first
/// (they shape the per-channel scales). The source and destination quantization must be per
/// tensor, as the layers require.
pub fn requantize_accumulator(
    acc: &Tensor,
    weights_dims: &[i64],
    bias: Option<&Tensor>,
    sum_input: Option<&Tensor>,
    attrs: &QuantAttrs,
    name: &str,
) -> Result<Requantized, QuantError> {
    let op = format!("requantize_accumulator {name}");
    if acc.dtype() != DType::I32 {
        return Err(dtype_error(&op, "the accumulator", "i32", acc.dtype()));
    }
    let dims = acc.shape().to_vec();
    let channels = dims.last().copied().unwrap_or(0);
    if weights_dims.first() != Some(&channels) {
        let found = format!("{weights_dims:?} for an accumulator of shape {dims:?}");
        return Err(shape_error(&op, "the weights' dimensions", "the output channels (last axis) first", found));
    }
    if !is_dst_type(attrs.dst_dtype) {
        return Err(dtype_error(&op, "the destination", DST_TYPES, attrs.dst_dtype));
    }
    let (src_scale, _) = attrs.src.require_per_tensor(&op, "src")?;
    let dst_q = check_requantization(&op, weights_dims, bias, &dims, sum_input, attrs)?;
    let channel_axis = dims.len() - 1;
    requantize_layer(
        dims,
        |i| acc.at_vec(i.to_vec()),
        channel_axis,
        weights_dims,
        bias,
        sum_input,
        (src_scale, dst_q),
        attrs,
        name,
    )
}

/// `x = f32(acc − comp[oc]) · M[oc] + bias[oc]`, then post-ops and the destination (see `quant`),
/// over an output of shape `dims` whose element at `i` has the accumulator `read_acc(i)` and its
/// output channel at `i[channel_axis]`.
#[allow(clippy::too_many_arguments)]
pub(super) fn requantize_layer(
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
            let centered = read_acc(i) - compensation.at([oc]);
            if attrs.requantization == Requantization::OnnxRuntime {
                // onnxruntime's `(x_scale · w_scale[c]) / y_scale`, formed once per channel; it,
                // the zero point and the lower bound are arguments (per channel, even where one
                // value serves all), so layers of one geometry share their function.
                let (dst_scale, dst_zp) = dst_q;
                let oc = weights_dims[0] as usize;
                let mut values: Vec<f32> = w.values.iter().map(|&v| src_scale * v / dst_scale).collect();
                if values.len() == 1 {
                    values = vec![values[0]; oc];
                }
                let scale = params.per_channel(values, weights_dims, &oc_index, &format!("{name}.scale"));
                if let Some(PostOp::QLinearAdd(add)) = attrs.post_ops.last() {
                    let lower = onnxruntime_lower_bound(&attrs.post_ops, dst_zp, attrs.dst_dtype);
                    let r = sum_input.map(|r| r.at_vec(i.to_vec()));
                    return finish_qlinear_add(centered, scale, (dst_zp, lower), r, add, attrs.dst_dtype);
                }
                let zp = params.per_channel(vec![dst_zp as f32; oc], weights_dims, &oc_index, &format!("{name}.zp"));
                let lower = onnxruntime_lower_bound(&attrs.post_ops, dst_zp, attrs.dst_dtype);
                let lower = params.per_channel(vec![lower; oc], weights_dims, &oc_index, &format!("{name}.lower"));
                return finish_onnxruntime(centered, scale, zp, lower, attrs.dst_dtype);
            }
            // The products src_scale · wei_scale[oc] in f32, formed here once rather than per
            // element (the same IEEE products either way).
            let products = Scales { values: w.values.iter().map(|&v| src_scale * v).collect(), mask: w.mask };
            let multiplier = params.scale(&products, weights_dims, &oc_index, &format!("{name}.multiplier"));
            let centered = centered.cast(DType::F32);
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

/// The lower bound of onnxruntime's order before saturating: `f32(zp_dst)` with a ReLU, else
/// the lowest value of `dst_dtype` (u8 or i8), where `max` changes nothing the saturation would
/// not (the rounded value is never NaN: a finite scale times an i32 is a number or ±∞).
fn onnxruntime_lower_bound(post_ops: &[PostOp], dst_zp: i32, dst_dtype: DType) -> f32 {
    if post_ops.contains(&PostOp::Relu) {
        dst_zp as f32
    } else {
        dst_dtype.scalar.int_range().map_or(0.0, |(lo, _)| lo as f32)
    }
}

/// The requantization of `requantize_layer` over an `[m, n]` block of accumulators (`n` output
/// channels, contiguous in every operand) as an `IntrinKind::Map` declaration named
/// `requantize_{m}x{n}`: inputs `acc: i32[m, n]`, the compensation `[n]`, the bias `[n]` and
/// the sum input `[m, n]` where the layer has them, then the parameters, in that order. Built
/// by the same code as the layer's output, so that it is the same computation by construction.
#[allow(clippy::too_many_arguments)]
pub(super) fn requantize_map(
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
