//! The int8 convolution at the API, NCHW (`conv2d_nchw_int8`): the reference every convolution
//! schedule must match bit for bit, and the geometry checks every convolution shares.

use ir::expr::select;
use ir::te::{Tensor, compute_vec, reduce_axis, sum};
use ir::{DType, Expr};

use super::checks::shape_error;
use super::gemm_operands::{shifted_source, source_shift};
use super::layer::{QuantizedLayer, Requantized, check_layer_attrs, requantize_layer};
use super::layout::Layout;
use crate::quant::{QuantAttrs, QuantError};

/// Stride and symmetric zero padding (in source zero points) of a square-kernel convolution.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Conv2dParams {
    pub stride: i64,
    pub pad: i64,
}

/// The sizes of a convolution: source `[n, ic, h, w]`, weights `[oc, ic, kh, kw]`, output
/// `[n, oc, oh, ow]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct ConvGeometry {
    pub(super) n: i64,
    pub(super) ic: i64,
    pub(super) h: i64,
    pub(super) w: i64,
    pub(super) oc: i64,
    pub(super) kh: i64,
    pub(super) kw: i64,
    pub(super) oh: i64,
    pub(super) ow: i64,
}

/// Checks the shapes, stride and padding of a convolution whose source is in `layout` and
/// derives its output size.
pub(super) fn conv_geometry(
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
