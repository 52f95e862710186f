//! Activations between NCHW and NHWC, in plain Rust on the tensors' bytes: the source of a
//! layer run in NHWC, and its output brought back to the definition's layout to be compared.

use crate::runtime::Tensor;

/// `t` moved from NCHW (`[N, C, H, W]`) to NHWC (`[N, H, W, C]`) when `to_last`, else from
/// NHWC to NCHW; a tensor that is not 4-D unchanged.
fn permute(t: &Tensor, to_last: bool) -> Tensor {
    let &[n, d1, d2, d3] = t.shape() else { return t.clone() };
    let [n, d1, d2, d3] = [n, d1, d2, d3].map(|d| d as usize);
    let mut out = vec![0u8; t.as_bytes().len()];
    let size = t.dtype().bytes();
    let shape = if to_last {
        permute_bytes(t.as_bytes(), [n, d1, d2, d3], size, true, &mut out);
        [n, d2, d3, d1]
    } else {
        permute_bytes(t.as_bytes(), [n, d3, d1, d2], size, false, &mut out);
        [n, d3, d1, d2]
    };
    let shape = shape.map(|d| d as i64);
    Tensor::from_le_bytes(t.dtype(), &shape, &out).expect("a permutation keeps the element count")
}

/// The bytes of a tensor of logical dims `[n, c, h, w]` with elements of `size` bytes, from
/// NCHW to NHWC order into `out` when `to_last`, else from NHWC to NCHW.
pub fn permute_bytes(src: &[u8], [n, c, h, w]: [usize; 4], size: usize, to_last: bool, out: &mut [u8]) {
    // NCHW `(n, c, y, x)` at `((n·C + c)·H + y)·W + x`; NHWC `(n, y, x, c)` at `((n·H + y)·W + x)·C + c`.
    for i in 0..n {
        for ch in 0..c {
            for p in 0..h * w {
                let nchw = (i * c + ch) * h * w + p;
                let nhwc = (i * h * w + p) * c + ch;
                let (from, to) = if to_last { (nchw, nhwc) } else { (nhwc, nchw) };
                out[to * size..(to + 1) * size].copy_from_slice(&src[from * size..(from + 1) * size]);
            }
        }
    }
}

/// The `[cols, rows]` transpose of the row-major `[rows, cols]` matrix `src` (which holds
/// `rows · cols` values), in square tiles so that reads and writes both stay within a few cache
/// lines (a dense layer's `[K, N]` weights as the `[N, K]` of its 1×1 convolution).
pub fn transpose_i8(src: &[i8], rows: usize, cols: usize) -> Vec<i8> {
    const TILE: usize = 32;
    let mut out = vec![0i8; rows * cols];
    for r0 in (0..rows).step_by(TILE) {
        for c0 in (0..cols).step_by(TILE) {
            for r in r0..(r0 + TILE).min(rows) {
                let row = &src[r * cols..][..cols];
                for c in c0..(c0 + TILE).min(cols) {
                    out[c * rows + r] = row[c];
                }
            }
        }
    }
    out
}

/// `t: [N, C, H, W]` as `[N, H, W, C]` (a tensor that is not 4-D unchanged).
pub fn nchw_to_nhwc(t: &Tensor) -> Tensor {
    permute(t, true)
}

/// `t: [N, H, W, C]` as `[N, C, H, W]` (a tensor that is not 4-D unchanged).
pub fn nhwc_to_nchw(t: &Tensor) -> Tensor {
    permute(t, false)
}

#[cfg(test)]
mod tests {
    use ir::DType;

    use super::*;

    /// `transpose_i8`'s slow twin: each element from the definition's index mapping in turn.
    fn transpose_i8_scalar(src: &[i8], rows: usize, cols: usize) -> Vec<i8> {
        (0..rows * cols).map(|i| src[(i % rows) * cols + i / rows]).collect()
    }

    #[test]
    fn the_tiled_matrix_transpose_equals_its_scalar_twin() {
        // Sizes below, at and across the tile, and a dense layer's.
        for (rows, cols) in [(1, 1), (3, 5), (32, 32), (33, 65), (70, 31), (512, 1000)] {
            let src: Vec<i8> = (0..rows * cols).map(|i| (i * 37 % 251) as i8).collect();
            assert_eq!(transpose_i8(&src, rows, cols), transpose_i8_scalar(&src, rows, cols), "{rows}x{cols}");
        }
    }

    #[test]
    fn a_transpose_moves_each_element_and_its_inverse_restores_the_tensor() {
        let values: Vec<u16> = (0..2 * 3 * 4 * 5).collect();
        let t = Tensor::from_slice(&[2, 3, 4, 5], &values).unwrap();
        let nhwc = nchw_to_nhwc(&t);
        assert_eq!(nhwc.shape(), [2, 4, 5, 3]);
        let v = nhwc.to_vec::<u16>().unwrap();
        // (n, c, y, x) = (1, 2, 3, 4) is at ((1·4 + 3)·5 + 4)·3 + 2 in NHWC.
        assert_eq!(v[((4 + 3) * 5 + 4) * 3 + 2], ((3 + 2) * 4 + 3) * 5 + 4);
        let back = nhwc_to_nchw(&nhwc);
        assert_eq!((back.shape(), back.to_vec::<u16>().unwrap()), (t.shape(), values));
        let flat = Tensor::zeros(DType::U8, &[3, 4]).unwrap();
        assert_eq!(nchw_to_nhwc(&flat).shape(), [3, 4]);
    }
}
