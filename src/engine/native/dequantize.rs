//! Dequantize (onnxruntime's `DequantizeLinear`, per tensor): `x = f32(q − zero_point) · scale`,
//! the difference exact in i32, one rounding in the product.

use super::Int8;

/// Dequantizes `src` (stored NHWC `[n, h, w, c]` when `nhwc`, else in the logical order) into
/// `dst` in the logical NCHW order.
pub fn dequantize(src: &[u8], dims: [usize; 4], nhwc: bool, scale: f32, zero_point: i32, ty: Int8, dst: &mut [f32]) {
    let x = |b: u8| (ty.value(b) - zero_point) as f32 * scale;
    if !nhwc {
        for (d, &b) in dst.iter_mut().zip(src) {
            *d = x(b);
        }
        return;
    }
    let [n, c, h, w] = dims;
    let plane = h * w;
    for b in 0..n {
        for ch in 0..c {
            let to = &mut dst[(b * c + ch) * plane..][..plane];
            for (p, d) in to.iter_mut().enumerate() {
                *d = x(src[(b * plane + p) * c + ch]);
            }
        }
    }
}
