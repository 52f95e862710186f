//! Layout changes between the logical NCHW order and the engine's NHWC buffers, for any element
//! size.

/// `src` in NCHW `[n, c, h, w]` to `dst` in NHWC, elements of `size` bytes.
pub fn nchw_to_nhwc(src: &[u8], [n, c, h, w]: [usize; 4], size: usize, dst: &mut [u8]) {
    let plane = h * w;
    for b in 0..n {
        for ch in 0..c {
            for p in 0..plane {
                let from = ((b * c + ch) * plane + p) * size;
                let to = ((b * plane + p) * c + ch) * size;
                dst[to..to + size].copy_from_slice(&src[from..from + size]);
            }
        }
    }
}

/// `src` in NHWC to `dst` in NCHW `[n, c, h, w]`, elements of `size` bytes.
pub fn nhwc_to_nchw(src: &[u8], [n, c, h, w]: [usize; 4], size: usize, dst: &mut [u8]) {
    let plane = h * w;
    for b in 0..n {
        for ch in 0..c {
            for p in 0..plane {
                let to = ((b * c + ch) * plane + p) * size;
                let from = ((b * plane + p) * c + ch) * size;
                dst[to..to + size].copy_from_slice(&src[from..from + size]);
            }
        }
    }
}
