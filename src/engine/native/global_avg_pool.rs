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

/// Pools `src: [n, h·w, c]` (NHWC) into `dst: [n, c]`.
pub fn global_avg_pool(src: &[u8], [n, hw, c]: [usize; 3], x: (f32, i32), y: (f32, i32), ty: Int8, dst: &mut [u8]) {
    let scale = x.0 / (y.0 * hw as f32);
    let bias = (x.1 as i64 * hw as i64) as i32;
    let mut sums = vec![0i32; c];
    for b in 0..n {
        sums.fill(0);
        for p in 0..hw {
            for (s, &v) in sums.iter_mut().zip(&src[(b * hw + p) * c..][..c]) {
                *s += ty.value(v);
            }
        }
        for (d, &s) in dst[b * c..][..c].iter_mut().zip(&sums) {
            let (lo, hi) = ty.range();
            let v = round_clamped(s.wrapping_sub(bias) as f32 * scale, (lo - y.1) as f32, (hi - y.1) as f32);
            *d = (v + y.1) as u8;
        }
    }
}
