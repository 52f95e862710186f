//! The weight preparation of an int8 convolution or dense layer: the compensation of the source
//! zero point, computed once when the weights are packed and bound to the per-call layer's
//! placeholder.

use ir::te::{Tensor, compute_vec, reduce_axis, sum};
use ir::{DType, Expr};

use super::checks::{dtype_error, per_tensor_zero_point, require_s8_weights, shape_error};
use super::gemm_operands::{GemmOperands, source_shift};
use crate::quant::{QuantError, ZeroPoints};

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
