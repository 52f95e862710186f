//! Max pooling on 8-bit integers in NHWC: the largest value of each window's positions inside
//! the source (padding never wins). Exact: quantization is monotone, so the maximum of the
//! integers is the integer of the maximum.

use super::Int8;

/// A 2-D pooling window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Window {
    pub kernel: [usize; 2],
    pub stride: [usize; 2],
    pub pad_begin: [usize; 2],
    pub dilation: [usize; 2],
}

/// Pools `src: [n, h, w, c]` into `dst: [n, oh, ow, c]`.
pub fn max_pool(src: &[u8], [n, h, w, c]: [usize; 4], [oh, ow]: [usize; 2], win: Window, ty: Int8, dst: &mut [u8]) {
    let mut best = vec![0i32; c];
    for b in 0..n {
        for oy in 0..oh {
            for ox in 0..ow {
                best.fill(i32::MIN);
                for ky in 0..win.kernel[0] {
                    let y = (oy * win.stride[0] + ky * win.dilation[0]).wrapping_sub(win.pad_begin[0]);
                    if y >= h {
                        continue;
                    }
                    for kx in 0..win.kernel[1] {
                        let x = (ox * win.stride[1] + kx * win.dilation[1]).wrapping_sub(win.pad_begin[1]);
                        if x >= w {
                            continue;
                        }
                        let row = &src[((b * h + y) * w + x) * c..][..c];
                        for (m, &v) in best.iter_mut().zip(row) {
                            *m = (*m).max(ty.value(v));
                        }
                    }
                }
                let out = &mut dst[((b * oh + oy) * ow + ox) * c..][..c];
                for (o, &m) in out.iter_mut().zip(&best) {
                    // A window entirely in the padding (not possible with pads below the
                    // kernel) would store the type's minimum.
                    *o = ty.saturate(m.max(ty.range().0));
                }
            }
        }
    }
}
