//! Ready-made operators for `export` (what `tensorlift export` builds).

use ir::{DType, LowerError, ScheduleError, TeError};
use schedules::nn::{matmul_packed, pack_b_vnni};
use schedules::x86::{GemmInt8Knobs, schedule_gemm_int8};
use thiserror::Error;

use super::Operator;
use crate::runtime::IsaLevel;

/// Errors from defining an operator for export.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum OperatorError {
    #[error("{what}: expected {expected}, found {found}")]
    Size { what: &'static str, expected: &'static str, found: i64 },
    #[error(transparent)]
    Te(#[from] TeError),
    #[error(transparent)]
    Schedule(#[from] ScheduleError),
    #[error(transparent)]
    Lower(#[from] LowerError),
}

/// `matmul`: `C: i32[M, N] = A: u8[M, K] · B: i8[K, N]`, exact, with plain row-major operands.
/// Inside one call `B` is packed into VNNI panels of `nr` columns (32, or 16 when 32 does not
/// divide `N`), then `schedules::x86` tensorizes the product into the best micro-kernel of the
/// level (`vpdpbusd`, or exact widening on AVX2, or the loop nest). Needs `K` a multiple of 4 and
/// `N` a multiple of 16.
pub fn matmul(m: i64, n: i64, k: i64, levels: &[IsaLevel]) -> Result<Operator, OperatorError> {
    for (what, v) in [("M", m), ("N", n), ("K", k)] {
        if v <= 0 {
            return Err(OperatorError::Size { what, expected: "a positive size", found: v });
        }
    }
    if k % 4 != 0 {
        return Err(OperatorError::Size { what: "K", expected: "a multiple of 4", found: k });
    }
    let nr = [32, 16].into_iter().find(|nr| n % nr == 0).ok_or(OperatorError::Size {
        what: "N",
        expected: "a multiple of 16",
        found: n,
    })?;
    let a = ir::te::placeholder([m, k], DType::U8, "A");
    let b = ir::te::placeholder([k, n], DType::I8, "B");
    let packed = pack_b_vnni(&b, nr, "Bp")?;
    let c = matmul_packed(&a, &packed, DType::I32, "C")?;
    let mut s = ir::schedule::create_schedule(&[&c]);
    s.parallel(&packed, &packed.axis(0))?;
    schedule_gemm_int8(&mut s, &c, GemmInt8Knobs { nr, ..GemmInt8Knobs::default() })?;
    let func = ir::lower::lower(&s, &[&a, &b, &c], "matmul")?;
    Ok(Operator::portable("matmul", &func, levels))
}
