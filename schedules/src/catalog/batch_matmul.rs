//! Batched int8 matrix product.

use ir::te::{Tensor, compute, reduce_axis, sum};
use ir::{DType, TeError};

/// `C[b, i, j] = Σ_k i32(A[b, i, k]) · i32(B[b, k, j])` for `A: u8[B, M, K]`, `B: i8[B, K, N]`,
/// exact in i32.
pub fn batch_matmul_int8(a: &Tensor, b: &Tensor, name: &str) -> Result<Tensor, TeError> {
    let ([bs, m, k], [bs2, k2, n]) = (shape3(a), shape3(b));
    if a.shape().len() != 3 || b.shape().len() != 3 || bs != bs2 || k != k2 {
        return Err(TeError::ShapeMismatch {
            op: format!("batch_matmul_int8 {name}"),
            what: "operand shapes".into(),
            expected: "[B, M, K] and [B, K, N]".into(),
            found: format!("{:?} and {:?}", a.shape(), b.shape()),
        });
    }
    if a.dtype() != DType::U8 || b.dtype() != DType::I8 {
        return Err(TeError::ShapeMismatch {
            op: format!("batch_matmul_int8 {name}"),
            what: "operand dtypes".into(),
            expected: "u8 and i8".into(),
            found: format!("{} and {}", a.dtype(), b.dtype()),
        });
    }
    let r = reduce_axis(k, "k")?;
    compute(
        [bs, m, n],
        |i| {
            sum(
                DType::I32,
                &[&r],
                a.at([&i[0], &i[1], &r]).cast(DType::I32) * b.at([&i[0], &r, &i[2]]).cast(DType::I32),
            )
        },
        name,
    )
}

fn shape3(t: &Tensor) -> [i64; 3] {
    match *t.shape() {
        [a, b, c] => [a, b, c],
        _ => [0; 3],
    }
}
