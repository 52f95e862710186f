//! The element types of logical tensors (oneDNN Graph's `data_type`): what each holds, and the
//! integer ranges quantization saturates to.

use std::fmt;

/// The element type of a logical tensor.
///
/// Floating-point types are IEEE binary32 (`F32`), binary16 (`F16`) and bfloat16 (`Bf16`, the
/// top half of a binary32: 8 exponent bits, 7 fraction bits). `S32`, `S8` and `U8` are two's
/// complement and unsigned integers; `Boolean` holds `false`/`true`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DataType {
    F16,
    Bf16,
    F32,
    S32,
    S8,
    U8,
    Boolean,
}

impl DataType {
    /// `F32`, `F16` or `Bf16`.
    pub fn is_float(self) -> bool {
        matches!(self, DataType::F32 | DataType::F16 | DataType::Bf16)
    }

    /// `S8` or `U8`: the types quantized activations and weights use.
    pub fn is_int8(self) -> bool {
        matches!(self, DataType::S8 | DataType::U8)
    }

    /// The smallest and largest value of an integer type (`None` for floats and booleans).
    pub fn int_range(self) -> Option<(i32, i32)> {
        match self {
            DataType::S8 => Some((i8::MIN as i32, i8::MAX as i32)),
            DataType::U8 => Some((0, u8::MAX as i32)),
            DataType::S32 => Some((i32::MIN, i32::MAX)),
            _ => None,
        }
    }

    /// The size of one element in bytes (a boolean takes one byte).
    pub fn size(self) -> usize {
        match self {
            DataType::F32 | DataType::S32 => 4,
            DataType::F16 | DataType::Bf16 => 2,
            DataType::S8 | DataType::U8 | DataType::Boolean => 1,
        }
    }

    /// The name used in printed graphs and messages (`f32`, `u8`, ...).
    pub fn name(self) -> &'static str {
        match self {
            DataType::F16 => "f16",
            DataType::Bf16 => "bf16",
            DataType::F32 => "f32",
            DataType::S32 => "s32",
            DataType::S8 => "s8",
            DataType::U8 => "u8",
            DataType::Boolean => "boolean",
        }
    }
}

impl fmt::Display for DataType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
