//! Max pooling in NHWC.

use ir::TeError;
use ir::te::{Tensor, compute_vec, max, reduce_axis};

/// `out[0, y, x, c] = max_{ry, rx} src[0, y·stride + ry, x·stride + rx, c]` for an integer
/// `src: [1, h, w, c]`, no padding: output `(h − k) / stride + 1` (floor) per spatial dimension,
/// in the source's dtype (max commutes with quantization).
pub fn max_pool_nhwc(src: &Tensor, k: i64, stride: i64, name: &str) -> Result<Tensor, TeError> {
    let bad = |found: String| TeError::ShapeMismatch {
        op: format!("max_pool_nhwc {name}"),
        what: "source and window".into(),
        expected: "an integer [1, H, W, C], k ≥ 1 within H and W, stride ≥ 1".into(),
        found,
    };
    let &[1, h, w, c] = src.shape() else { return Err(bad(format!("{:?}", src.shape()))) };
    if !src.dtype().is_int() || k < 1 || stride < 1 || k > h || k > w {
        return Err(bad(format!("{} {:?}, k {k}, stride {stride}", src.dtype(), src.shape())));
    }
    let (ry, rx) = (reduce_axis(k, "ry")?, reduce_axis(k, "rx")?);
    let (oh, ow) = ((h - k) / stride + 1, (w - k) / stride + 1);
    compute_vec(
        vec![1, oh, ow, c],
        |i| max(src.dtype(), &[&ry, &rx], src.at([&i[0], &(&i[1] * stride + &ry), &(&i[2] * stride + &rx), &i[3]])),
        name,
    )
}
