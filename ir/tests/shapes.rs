//! Shapes at the edges of `i64`: `placeholder` and `compute` accept exactly the shapes whose
//! dimensions are positive and whose element count and byte size fit in `i64`, and never panic.

use proptest::prelude::*;
use tensorlift_ir::te::{compute_vec, placeholder_vec};
use tensorlift_ir::{DType, Expr, TeError};

/// Dimensions biased towards the interesting values: non-positive, small, near powers of two, huge.
fn dimension() -> impl Strategy<Value = i64> {
    prop_oneof![
        Just(0i64),
        Just(-1i64),
        Just(i64::MIN),
        Just(i64::MAX),
        1i64..5,
        (0u32..63).prop_map(|p| 1i64 << p),
        (0u32..63).prop_map(|p| (1i64 << p) + 1),
        any::<i64>(),
    ]
}

/// The bytes of `shape` of `dtype`, if every dimension is positive and the count is below 2^127.
fn exact_bytes(shape: &[i64], dtype: DType) -> Option<i128> {
    shape.iter().try_fold(dtype.bytes() as i128, |acc, &d| if d > 0 { acc.checked_mul(d as i128) } else { None })
}

proptest! {
    #[test]
    fn placeholders_accept_exactly_the_representable_shapes(
        shape in proptest::collection::vec(dimension(), 0..5),
        dtype in prop_oneof![Just(DType::U8), Just(DType::I16), Just(DType::F32), Just(DType::I64)],
    ) {
        let fits = shape.iter().all(|&d| d > 0) && exact_bytes(&shape, dtype).is_some_and(|b| b <= i64::MAX as i128);
        match placeholder_vec(shape.clone(), dtype, "A") {
            Ok(t) => {
                prop_assert!(fits, "accepted {shape:?} of {dtype}");
                prop_assert_eq!(t.shape(), &shape[..]);
            }
            Err(err) => {
                prop_assert!(!fits, "rejected {shape:?} of {dtype}: {err}");
                let positive = shape.iter().all(|&d| d > 0);
                prop_assert!(
                    matches!(err, TeError::BadShape { .. }) != positive,
                    "{shape:?}: {err}"
                );
            }
        }
        let computed = compute_vec(shape.clone(), |_| Expr::zero(dtype), "C");
        prop_assert_eq!(computed.is_ok(), fits, "compute of {:?} of {}", shape, dtype);
    }
}
