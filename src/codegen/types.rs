//! How IR dtypes map to Cranelift types, and the translated form of a value (`Val`).
//!
//! Cranelift on x64 lowers only 128-bit vectors, so a logical vector is either a list of
//! 128-bit pieces (when `lanes * bits` is a multiple of 128) or a list of per-lane scalars.

use cranelift_codegen::ir::{Type, Value, types};
use ir::{DType, ScalarType};

/// The Cranelift type of one lane. Bool is a byte holding 0 or 1; f16 and bf16 are kept as
/// their raw 16 bits and converted through host helpers for arithmetic.
pub(crate) fn lane_type(scalar: ScalarType) -> Type {
    match scalar {
        ScalarType::Bool | ScalarType::U8 | ScalarType::I8 => types::I8,
        ScalarType::U16 | ScalarType::I16 | ScalarType::F16 | ScalarType::BF16 => types::I16,
        ScalarType::U32 | ScalarType::I32 => types::I32,
        ScalarType::U64 | ScalarType::I64 => types::I64,
        ScalarType::F32 => types::F32,
        ScalarType::F64 => types::F64,
    }
}

/// Lanes of one 128-bit piece of this scalar type.
pub(crate) fn lanes_per_piece(scalar: ScalarType) -> u16 {
    (128 / scalar.bits()) as u16
}

/// The 128-bit vector type holding `lanes_per_piece` lanes.
pub(crate) fn piece_type(scalar: ScalarType) -> Type {
    lane_type(scalar).by(lanes_per_piece(scalar) as u32).expect("128-bit vector type")
}

/// The integer vector type of 128 bits with lanes of `bits` bits (the shape of a bool mask).
pub(crate) fn mask_type(bits: u32) -> Type {
    Type::int(bits as u16).and_then(|t| t.by(128 / bits)).expect("128-bit mask type")
}

/// True if values of `dtype` are held as 128-bit pieces (its natural layout).
pub(crate) fn is_pieces(dtype: DType) -> bool {
    dtype.lanes > 1 && (dtype.lanes as u32 * dtype.bits()).is_multiple_of(128)
}

/// A translated value of some dtype.
///
/// Invariant: non-bool values are always in the natural layout of their dtype (`is_pieces`).
/// Bool vectors may be per-lane bytes or lane masks of any width that fills whole pieces,
/// because a comparison produces masks as wide as its operands and a select wants masks as
/// wide as its arms; converting eagerly would waste work.
#[derive(Clone, Debug)]
pub(crate) enum Val {
    /// One Cranelift value per lane; a scalar is a single lane. Bool lanes are I8 0 or 1.
    Lanes(Vec<Value>),
    /// 128-bit vectors holding the lanes in order. Bool pieces are lane masks (0 or all ones)
    /// of the piece's integer lane type.
    Pieces(Vec<Value>),
}

impl Val {
    pub(crate) fn scalar(value: Value) -> Val {
        Val::Lanes(vec![value])
    }

    /// The single Cranelift value of a scalar.
    pub(crate) fn as_scalar(&self) -> Value {
        match self {
            Val::Lanes(lanes) if lanes.len() == 1 => lanes[0],
            _ => panic!("expected a scalar value, found {self:?}"),
        }
    }

    /// Every Cranelift value making up this value, in lane order.
    pub(crate) fn parts(&self) -> &[Value] {
        match self {
            Val::Lanes(v) | Val::Pieces(v) => v,
        }
    }
}
