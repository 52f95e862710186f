//! Argument checks shared by the operators, with the typed errors they return (`QuantError`),
//! and the block count `ceil_div` of the blocked shapes.

use ir::DType;
use ir::te::Tensor;

use crate::quant::{QuantError, ZeroPoints};

/// `⌈a / b⌉` for positive `b` and non-negative `a`.
pub(super) fn ceil_div(a: i64, b: i64) -> i64 {
    (a + b - 1) / b
}

pub(super) fn shape_error(op: &str, what: &str, expected: impl Into<String>, found: impl Into<String>) -> QuantError {
    QuantError::Shape { op: op.to_string(), what: what.to_string(), expected: expected.into(), found: found.into() }
}

pub(super) fn dtype_error(op: &str, what: &str, expected: &str, found: DType) -> QuantError {
    QuantError::DType { op: op.to_string(), what: what.to_string(), expected: expected.to_string(), found }
}

pub(super) fn require_int8_src(op: &str, src: &Tensor) -> Result<(), QuantError> {
    if [DType::U8, DType::I8].contains(&src.dtype()) {
        Ok(())
    } else {
        Err(dtype_error(op, "the source", "u8 or i8", src.dtype()))
    }
}

pub(super) fn require_s8_weights(op: &str, weights: &Tensor) -> Result<(), QuantError> {
    if weights.dtype() == DType::I8 { Ok(()) } else { Err(dtype_error(op, "the weights", "i8", weights.dtype())) }
}

pub(super) fn per_tensor_zero_point(op: &str, z: &ZeroPoints, dtype: DType) -> Result<i32, QuantError> {
    if z.mask != 0 {
        let (arg, expected) = ("src zero points".to_string(), "0 (per tensor)".to_string());
        return Err(QuantError::UnsupportedMask { op: op.to_string(), arg, expected, found: z.mask });
    }
    z.check("src zero point", &[], dtype)?;
    Ok(z.values[0])
}

/// i8 convolution weights `[OC, IC, KH, KW]`: their dims, or the typed error naming `op`.
pub(super) fn require_conv_weights(op: &str, weights: &Tensor) -> Result<[i64; 4], QuantError> {
    require_s8_weights(op, weights)?;
    match *weights.shape() {
        [oc, ic, kh, kw] => Ok([oc, ic, kh, kw]),
        _ => Err(shape_error(op, "the weight shape", "[OC, IC, KH, KW]", format!("{:?}", weights.shape()))),
    }
}

pub(super) fn require_nchw(op: &str, src: &Tensor) -> Result<[i64; 4], QuantError> {
    match src.shape() {
        [n, c, h, w] => Ok([*n, *c, *h, *w]),
        other => Err(shape_error(op, "the source shape", "[N, C, H, W]", format!("{other:?}"))),
    }
}
