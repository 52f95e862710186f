//! Dequantize (onnxruntime's `DequantizeLinear`, per tensor): `x = f32(q − zero_point) · scale`,
//! the difference exact in i32, one rounding in the product.

use super::Affine;

/// Dequantizes `src` (stored NHWC `[n, h, w, c]` when `nhwc`, else in the logical order) into
/// `dst`, f32 in little-endian bytes in the logical NCHW order: the part of the output from
/// element `first` on that `dst` holds (whole planes of `h · w` elements when `nhwc`).
pub fn dequantize(src: &[u8], dims: [usize; 4], nhwc: bool, q: Affine, first: usize, dst: &mut [u8]) {
    let Affine { scale, zero_point, ty } = q;
    let x = |b: u8| ((ty.value(b) - zero_point) as f32 * scale).to_le_bytes();
    if !nhwc {
        for (d, &b) in dst.chunks_exact_mut(4).zip(&src[first..]) {
            d.copy_from_slice(&x(b));
        }
        return;
    }
    let [_, c, h, w] = dims;
    let plane = h * w;
    if plane == 0 {
        return;
    }
    // Output plane `k` is channel `k % c` of image `k / c`.
    for (k, to) in dst.chunks_exact_mut(plane * 4).enumerate() {
        let (b, ch) = ((first / plane + k) / c, (first / plane + k) % c);
        for (p, d) in to.chunks_exact_mut(4).enumerate() {
            d.copy_from_slice(&x(src[(b * plane + p) * c + ch]));
        }
    }
}
