//! Data types: a scalar element type plus a lane count.
//!
//! Every expression carries exactly one `DType`. There is no implicit promotion anywhere in
//! tensorlift: two operands of a binary operator must have the same `DType`, and changing a type
//! is always an explicit cast node (see `expr.rs` for the cast semantics).

use std::fmt;

/// The element type of a value.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, PartialOrd, Ord)]
pub enum ScalarType {
    Bool,
    U8,
    I8,
    U16,
    I16,
    U32,
    I32,
    U64,
    I64,
    /// IEEE 754 binary16, stored as `half::f16`.
    F16,
    /// bfloat16 (the upper half of an f32), stored as `half::bf16`.
    BF16,
    F32,
    F64,
}

impl ScalarType {
    pub const ALL: [ScalarType; 13] = [
        ScalarType::Bool,
        ScalarType::U8,
        ScalarType::I8,
        ScalarType::U16,
        ScalarType::I16,
        ScalarType::U32,
        ScalarType::I32,
        ScalarType::U64,
        ScalarType::I64,
        ScalarType::F16,
        ScalarType::BF16,
        ScalarType::F32,
        ScalarType::F64,
    ];

    /// Width in bits of one element. `Bool` is stored as one byte but has one significant bit;
    /// `bits` reports 8 because that is its storage and register width.
    pub fn bits(self) -> u32 {
        match self {
            ScalarType::Bool | ScalarType::U8 | ScalarType::I8 => 8,
            ScalarType::U16 | ScalarType::I16 | ScalarType::F16 | ScalarType::BF16 => 16,
            ScalarType::U32 | ScalarType::I32 | ScalarType::F32 => 32,
            ScalarType::U64 | ScalarType::I64 | ScalarType::F64 => 64,
        }
    }

    pub fn bytes(self) -> usize {
        (self.bits() / 8) as usize
    }

    pub fn is_int(self) -> bool {
        matches!(
            self,
            ScalarType::U8
                | ScalarType::I8
                | ScalarType::U16
                | ScalarType::I16
                | ScalarType::U32
                | ScalarType::I32
                | ScalarType::U64
                | ScalarType::I64
        )
    }

    pub fn is_signed_int(self) -> bool {
        matches!(self, ScalarType::I8 | ScalarType::I16 | ScalarType::I32 | ScalarType::I64)
    }

    pub fn is_unsigned_int(self) -> bool {
        matches!(self, ScalarType::U8 | ScalarType::U16 | ScalarType::U32 | ScalarType::U64)
    }

    pub fn is_float(self) -> bool {
        matches!(self, ScalarType::F16 | ScalarType::BF16 | ScalarType::F32 | ScalarType::F64)
    }

    pub fn is_bool(self) -> bool {
        self == ScalarType::Bool
    }

    /// The smallest and largest value of an integer type, as i128 so every type fits.
    pub fn int_range(self) -> Option<(i128, i128)> {
        if !self.is_int() {
            return None;
        }
        let bits = self.bits();
        Some(if self.is_signed_int() {
            (-(1i128 << (bits - 1)), (1i128 << (bits - 1)) - 1)
        } else {
            (0, (1i128 << bits) - 1)
        })
    }

    /// The integer type of twice the width, with the same signedness; `None` past 64 bits.
    pub fn widened(self) -> Option<ScalarType> {
        Some(match self {
            ScalarType::U8 => ScalarType::U16,
            ScalarType::I8 => ScalarType::I16,
            ScalarType::U16 => ScalarType::U32,
            ScalarType::I16 => ScalarType::I32,
            ScalarType::U32 => ScalarType::U64,
            ScalarType::I32 => ScalarType::I64,
            _ => return None,
        })
    }

    /// The signed integer type of the given width in bits.
    pub fn signed_of_bits(bits: u32) -> Option<ScalarType> {
        Some(match bits {
            8 => ScalarType::I8,
            16 => ScalarType::I16,
            32 => ScalarType::I32,
            64 => ScalarType::I64,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            ScalarType::Bool => "bool",
            ScalarType::U8 => "u8",
            ScalarType::I8 => "i8",
            ScalarType::U16 => "u16",
            ScalarType::I16 => "i16",
            ScalarType::U32 => "u32",
            ScalarType::I32 => "i32",
            ScalarType::U64 => "u64",
            ScalarType::I64 => "i64",
            ScalarType::F16 => "f16",
            ScalarType::BF16 => "bf16",
            ScalarType::F32 => "f32",
            ScalarType::F64 => "f64",
        }
    }

    pub fn from_name(name: &str) -> Option<ScalarType> {
        ScalarType::ALL.into_iter().find(|ty| ty.name() == name)
    }
}

/// A scalar type and a number of lanes; `lanes == 1` is a scalar.
///
/// Vectors of any lane count are legal in the IR. Code generation splits them into the
/// target's native registers (128-bit pieces on x64 Cranelift), so the IR never has to care.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, PartialOrd, Ord)]
pub struct DType {
    pub scalar: ScalarType,
    pub lanes: u16,
}

impl DType {
    pub const BOOL: DType = DType::scalar(ScalarType::Bool);
    pub const U8: DType = DType::scalar(ScalarType::U8);
    pub const I8: DType = DType::scalar(ScalarType::I8);
    pub const U16: DType = DType::scalar(ScalarType::U16);
    pub const I16: DType = DType::scalar(ScalarType::I16);
    pub const U32: DType = DType::scalar(ScalarType::U32);
    pub const I32: DType = DType::scalar(ScalarType::I32);
    pub const U64: DType = DType::scalar(ScalarType::U64);
    pub const I64: DType = DType::scalar(ScalarType::I64);
    pub const F16: DType = DType::scalar(ScalarType::F16);
    pub const BF16: DType = DType::scalar(ScalarType::BF16);
    pub const F32: DType = DType::scalar(ScalarType::F32);
    pub const F64: DType = DType::scalar(ScalarType::F64);

    /// The type of loop variables and all index arithmetic.
    pub const INDEX: DType = DType::I64;

    pub const fn scalar(scalar: ScalarType) -> DType {
        DType { scalar, lanes: 1 }
    }

    pub fn with_lanes(self, lanes: u16) -> DType {
        assert!(lanes >= 1, "a dtype has at least one lane");
        DType { scalar: self.scalar, lanes }
    }

    /// The scalar type of one lane.
    pub fn element(self) -> DType {
        DType::scalar(self.scalar)
    }

    pub fn is_scalar(self) -> bool {
        self.lanes == 1
    }

    pub fn is_vector(self) -> bool {
        self.lanes > 1
    }

    pub fn bits(self) -> u32 {
        self.scalar.bits()
    }

    pub fn bytes(self) -> usize {
        self.scalar.bytes()
    }

    pub fn is_int(self) -> bool {
        self.scalar.is_int()
    }

    pub fn is_signed_int(self) -> bool {
        self.scalar.is_signed_int()
    }

    pub fn is_unsigned_int(self) -> bool {
        self.scalar.is_unsigned_int()
    }

    pub fn is_float(self) -> bool {
        self.scalar.is_float()
    }

    pub fn is_bool(self) -> bool {
        self.scalar.is_bool()
    }
}

impl From<ScalarType> for DType {
    fn from(scalar: ScalarType) -> DType {
        DType::scalar(scalar)
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.lanes == 1 {
            write!(f, "{}", self.scalar.name())
        } else {
            write!(f, "{}x{}", self.scalar.name(), self.lanes)
        }
    }
}

impl fmt::Display for ScalarType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// `x` rounded to the binary float format with `man_bits` stored mantissa bits and exponent
/// bias `bias` (16 bits wide in all): IEEE 754 roundTiesToEven, overflow to ±inf, underflow
/// through subnormals to ±0. A NaN stays a quiet NaN with its sign and top payload bits.
fn half_bits_from_f64(x: f64, man_bits: u32, bias: i64) -> u16 {
    let bits = x.to_bits();
    let sign = ((bits >> 48) & 0x8000) as u16;
    let exp_field = ((bits >> 52) & 0x7ff) as i64;
    let man = bits & ((1u64 << 52) - 1);
    let inf = ((2 * bias + 1) << man_bits) as u16;
    if exp_field == 0x7ff {
        let nan = if man == 0 { 0 } else { (1u64 << (man_bits - 1)) | (man >> (52 - man_bits)) };
        return sign | inf | nan as u16;
    }
    if exp_field == 0 {
        // f64 subnormals and zero are far below half of the smallest subnormal of any 16-bit format.
        return sign;
    }
    // |x| = m · 2^(e - 52) with a 53-bit m; the result is a multiple of 2^q.
    let (m, e) = (man | (1u64 << 52), exp_field - 1023);
    let q = e.max(1 - bias) - man_bits as i64;
    let shift = q - (e - 52);
    let units = if shift >= 64 {
        0
    } else {
        let (kept, rest) = (m >> shift, m & ((1u64 << shift) - 1));
        let half = 1u64 << (shift - 1);
        kept + u64::from(rest > half || (rest == half && kept & 1 == 1))
    };
    // Normal results carry the hidden bit into the exponent field; a rounding carry moves up.
    let magnitude = if e < 1 - bias { units } else { (((e + bias) as u64) << man_bits) + units - (1u64 << man_bits) };
    if magnitude >= u64::from(inf) { sign | inf } else { sign | magnitude as u16 }
}

/// The bits of the IEEE binary16 value nearest to `x` (ties to even), as `F16` casts round.
pub fn f16_bits_from_f64(x: f64) -> u16 {
    half_bits_from_f64(x, 10, 15)
}

/// The bits of the bfloat16 value nearest to `x` (ties to even), as `BF16` casts round.
pub fn bf16_bits_from_f64(x: f64) -> u16 {
    half_bits_from_f64(x, 7, 127)
}

#[cfg(test)]
mod half_tests {
    use super::*;

    /// Every finite value of the format, each midpoint to its successor and the points just
    /// beside it: exact values stay, midpoints go to the even neighbour, the rest to the nearer.
    fn check(to_bits: fn(f64) -> u16, from_bits: fn(u16) -> f64, inf: u16) {
        for b in 0..inf {
            let lo = from_bits(b);
            // Past the largest finite value, the next step is where rounding overflows to inf.
            let hi = if b + 1 == inf { 2.0 * lo - from_bits(b - 1) } else { from_bits(b + 1) };
            assert_eq!(to_bits(lo), b, "{lo} exact");
            assert_eq!(to_bits(-lo), b | 0x8000, "-{lo} exact");
            let mid = (lo + hi) / 2.0;
            let even = if b & 1 == 0 { b } else { b + 1 };
            assert_eq!(to_bits(mid), even, "midpoint {mid}");
            assert_eq!(to_bits(mid.next_down()), b, "below midpoint {mid}");
            assert_eq!(to_bits(mid.next_up()), b + 1, "above midpoint {mid}");
        }
        assert_eq!(to_bits(f64::INFINITY), inf);
        assert_eq!(to_bits(f64::NEG_INFINITY), inf | 0x8000);
        assert_eq!(to_bits(1e300), inf);
        assert_eq!(to_bits(f64::MIN_POSITIVE / 4.0), 0);
        assert_eq!(to_bits(-0.0), 0x8000);
        let nan = to_bits(f64::NAN);
        assert!(nan & 0x7fff > inf, "NaN stays NaN: {nan:#x}");
    }

    #[test]
    fn f16_and_bf16_rounding_is_correct_on_every_value_and_midpoint() {
        check(f16_bits_from_f64, |b| half::f16::from_bits(b).to_f64(), 0x7c00);
        check(bf16_bits_from_f64, |b| half::bf16::from_bits(b).to_f64(), 0x7f80);
    }
}
