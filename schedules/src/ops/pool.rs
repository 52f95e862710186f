//! Pooling: max pooling of an integer tensor and global average pooling of an int8 one, both
//! exact in the source's dtype and quantization.

use ir::expr::select;
use ir::te::{Tensor, compute_vec, max, reduce_axis, sum};
use ir::{DType, Expr};

use super::checks::{dtype_error, require_int8_src, require_nchw, shape_error};
use crate::quant::QuantError;

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
