//! A resnet-18 table layer on the x86 path (`table_layer`): its weight preparation and its
//! per-call function from the table's quantization, as `tensorlift resnet18`, the tuner and the
//! export build them.

use ir::DType;
use ir::te::placeholder_vec;

use super::knobs::Conv2dInt8Knobs;
use super::schedule::{
    Conv2dInt8, Conv2dInt8Error, Conv2dInt8Prepare, conv2d_int8, dense_int8, prepare_conv2d_int8, prepare_dense_int8,
};
use crate::ops::{Conv2dParams, GemmOperands, Layout};
use crate::quant::QuantError;
use crate::resnet18::{Layer, LayerQuant};

/// A resnet-18 table layer on the x86 path, defined with `quant` (`resnet18::quantization`) and
/// scheduled by `knobs` on `operands` (`Conv2dInt8Knobs::operands`): its weight preparation and
/// its per-call function (the convolution with its source and output in `layout`, on
/// `src: u8[1, H, W, IC]` in NHWC or `u8[1, IC, H, W]` in NCHW; the dense layer, which has no
/// layout, on `src: u8[1, IC]`), both named `name`.
pub fn table_layer(
    layer: Layer,
    quant: &LayerQuant,
    knobs: Conv2dInt8Knobs,
    operands: GemmOperands,
    layout: Layout,
    name: &str,
) -> Result<(Conv2dInt8Prepare, Conv2dInt8), Conv2dInt8Error> {
    let wei = placeholder_vec(quant.wei_dims.clone(), DType::I8, "weights").map_err(QuantError::from)?;
    let bias = placeholder_vec(vec![quant.wei_dims[0]], DType::F32, "bias").map_err(QuantError::from)?;
    let zero_point = &quant.attrs.src.zero_points;
    Ok(match layer {
        Layer::Conv(c) => {
            let src_dims = layout.shape([1, c.ic, c.h, c.w]).to_vec();
            let src = placeholder_vec(src_dims, DType::U8, "src").map_err(QuantError::from)?;
            let params = Conv2dParams { stride: c.stride, pad: c.pad };
            (
                prepare_conv2d_int8(&wei, c.stride, DType::U8, zero_point, knobs, operands, name)?,
                conv2d_int8(&src, &wei, Some(&bias), None, params, &quant.attrs, layout, knobs, operands, name)?,
            )
        }
        Layer::Dense(_) => {
            let src = placeholder_vec(quant.src_dims.clone(), DType::U8, "src").map_err(QuantError::from)?;
            (
                prepare_dense_int8(&wei, DType::U8, zero_point, knobs, operands, name)?,
                dense_int8(&src, &wei, Some(&bias), &quant.attrs, knobs, operands, name)?,
            )
        }
    })
}
