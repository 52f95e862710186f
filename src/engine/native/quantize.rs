//! Quantize (onnxruntime's `QuantizeLinear`, per tensor): `q = saturate(round_half_even(x / scale)
//! + zero_point)`, a true division; NaN stores the type's minimum (onnxruntime clamps with
//! `maxps`, which returns the bound for NaN, before converting).

use super::{Int8, round_clamped};

/// Quantizes `src` (NCHW `[n, c, h, w]`, or any shape with `nhwc == false`) into `dst`, written
/// in NHWC order when `nhwc`.
pub fn quantize(src: &[f32], dims: [usize; 4], nhwc: bool, scale: f32, zero_point: i32, ty: Int8, dst: &mut [u8]) {
    let (lo, hi) = ty.range();
    let (lo, hi) = ((lo - zero_point) as f32, (hi - zero_point) as f32);
    let q = |x: f32| (round_clamped(x / scale, lo, hi) + zero_point) as u8;
    if !nhwc {
        for (d, &x) in dst.iter_mut().zip(src) {
            *d = q(x);
        }
        return;
    }
    let [n, c, h, w] = dims;
    let plane = h * w;
    for b in 0..n {
        for ch in 0..c {
            let from = &src[(b * c + ch) * plane..][..plane];
            for (p, &x) in from.iter().enumerate() {
                dst[(b * plane + p) * c + ch] = q(x);
            }
        }
    }
}
