//! Element-wise quantized operators: ReLU about the zero point and the residual add, which
//! reuses a layer's requantization tail.

use ir::te::{Tensor, compute_vec};
use ir::{DType, Expr};

use super::checks::{dtype_error, per_tensor_zero_point, require_int8_src};
use crate::quant::{
    DST_TYPES, PostOp, QuantError, TensorQuant, ZeroPoints, activation_quant, check_post_ops, f32c, finish, is_dst_type,
};

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
