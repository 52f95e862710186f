//! The int8 dense (fully connected) layer.

use ir::DType;
use ir::te::{Tensor, compute_vec, reduce_axis, sum};

use super::checks::shape_error;
use super::gemm_operands::shifted_source;
use super::layer::{QuantizedLayer, Requantized, check_layer_attrs, requantize_layer};
use crate::quant::{QuantAttrs, QuantError};

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
