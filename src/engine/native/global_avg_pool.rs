//! Quantized global average pooling, as onnxruntime's x86 `QLinearGlobalAveragePool` computes it
//! (`mlas/lib/qlgavgpool.cpp`, the SSE2 path, which x86 CPUs run):
//!
//! ```text
//! scale = s_x / (s_y · f32(N))                  f32, N = H·W
//! q = saturate(round_half_even(f32(Σ x − z_x·N) · scale) + z_y)
//! ```
//!
//! The sum is exact in i32.

use super::{Int8, round_clamped};

/// Pools `src: [n, h·w, c]` (NHWC) into `dst: [n, c]`: the part of the output from element
/// `first` on that `dst` holds (within one image: `first % c + dst.len() <= c`).
pub fn global_avg_pool(
    src: &[u8],
    [_, hw, c]: [usize; 3],
    x: (f32, i32),
    y: (f32, i32),
    ty: Int8,
    first: usize,
    dst: &mut [u8],
) {
    if c == 0 {
        return;
    }
    let scale = x.0 / (y.0 * hw as f32);
    let bias = (x.1 as i64 * hw as i64) as i32;
    let (b, c0) = (first / c, first % c);
    let mut sums = vec![0i32; dst.len()];
    for p in 0..hw {
        for (s, &v) in sums.iter_mut().zip(&src[(b * hw + p) * c + c0..][..dst.len()]) {
            *s += ty.value(v);
        }
    }
    let (lo, hi) = ty.range();
    for (d, &s) in dst.iter_mut().zip(&sums) {
        let v = round_clamped(s.wrapping_sub(bias) as f32 * scale, (lo - y.1) as f32, (hi - y.1) as f32);
        *d = (v + y.1) as u8;
    }
}
