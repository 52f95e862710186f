//! Operator definitions as tensor expressions.

use ir::te::{compute, reduce_axis, sum, Tensor};
use ir::{DType, TeError};

/// `C[i, j] = Σ_k out(A[i, k]) · out(B[k, j])` for `A: [M, K]`, `B: [K, N]`, where `out` is an
/// exact cast to `out_dtype` (so u8 × i8 → i32 never saturates).
pub fn matmul(a: &Tensor, b: &Tensor, out_dtype: DType, name: &str) -> Result<Tensor, TeError> {
    let mismatch = |what: &str, expected: String, found: String| TeError::ShapeMismatch {
        op: format!("matmul {name}"),
        what: what.to_string(),
        expected,
        found,
    };
    if a.shape().len() != 2 || b.shape().len() != 2 {
        let found = format!("{:?} and {:?}", a.shape(), b.shape());
        return Err(mismatch("operand ranks", "2 and 2".to_string(), found));
    }
    let (m, k) = (a.shape()[0], a.shape()[1]);
    let n = b.shape()[1];
    if b.shape()[0] != k {
        return Err(mismatch("rows of B (the reduction extent of A)", k.to_string(), b.shape()[0].to_string()));
    }
    let r = reduce_axis(k, "k");
    compute(
        [m, n],
        |i| sum(out_dtype, &[&r], a.at([&i[0], &r]).cast(out_dtype) * b.at([&r, &i[1]]).cast(out_dtype)),
        name,
    )
}
