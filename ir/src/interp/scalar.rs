//! Scalar semantics: the one executable definition of every operator on every type.
//!
//! The interpreters evaluate with these functions and the simplifier folds constants with them,
//! so the three can never disagree. The rules are stated in `expr.rs`.
//!
//! The operators are `#[inline(always)]`: the interpreters build one closure per operator and
//! type, and inlining lets each fold the dispatch away.

use crate::dtype::ScalarType;
use crate::expr::{BinOp, CmpOp, round_float, wrap_int};

/// A scalar value. Integers and bools use the storage form of `ExprKind::Int` (the value's bits
/// sign-extended to 64, so a `u64` above `i64::MAX` is negative); floats are f64 already rounded
/// to their type.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Scalar {
    Int(i64),
    Float(f64),
}

impl Scalar {
    pub fn as_int(self) -> i64 {
        match self {
            Scalar::Int(v) => v,
            Scalar::Float(f) => panic!("expected an integer scalar, found float {f}"),
        }
    }

    pub fn as_float(self) -> f64 {
        match self {
            Scalar::Float(f) => f,
            Scalar::Int(v) => panic!("expected a float scalar, found integer {v}"),
        }
    }

    pub fn as_bool(self) -> bool {
        self.as_int() != 0
    }

    /// Bitwise identity: floats compare by bits so NaN equals itself.
    pub fn bits_eq(self, other: Scalar) -> bool {
        match (self, other) {
            (Scalar::Int(a), Scalar::Int(b)) => a == b,
            (Scalar::Float(a), Scalar::Float(b)) => a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()),
            _ => false,
        }
    }
}

/// The mathematical value of an integer in storage form.
#[inline(always)]
pub fn int_value(ty: ScalarType, v: i64) -> i128 {
    if ty == ScalarType::U64 { v as u64 as i128 } else { v as i128 }
}

fn floor_div(a: i128, b: i128) -> i128 {
    let q = a / b;
    if (a % b != 0) && ((a < 0) != (b < 0)) { q - 1 } else { q }
}

fn floor_mod(a: i128, b: i128) -> i128 {
    let r = a % b;
    if r != 0 && ((r < 0) != (b < 0)) { r + b } else { r }
}

/// `a op b` on type `ty`.
#[inline(always)]
pub fn binary(op: BinOp, ty: ScalarType, a: Scalar, b: Scalar) -> Scalar {
    if ty.is_float() {
        let (x, y) = (a.as_float(), b.as_float());
        let r = match op {
            BinOp::Add => x + y,
            BinOp::Sub => x - y,
            BinOp::Mul => x * y,
            BinOp::Div => x / y,
            BinOp::Mod => x - y * (x / y).floor(),
            BinOp::Min => {
                // `y` NaN or a tie keeps `x`: zeros of opposite sign compare equal.
                if x.is_nan() || y < x { y } else { x }
            }
            BinOp::Max => {
                // `y` NaN or a tie keeps `x`: zeros of opposite sign compare equal.
                if x.is_nan() || y > x { y } else { x }
            }
            BinOp::And | BinOp::Or | BinOp::Xor | BinOp::Shl | BinOp::Shr => {
                panic!("operator {} on float type {ty}", op.symbol())
            }
        };
        // f16/bf16: the f64 operation rounds once to the 16-bit type, which equals computing
        // in f32 and rounding (both are exact before the final rounding for + - * /).
        return Scalar::Float(round_float(ty, r));
    }
    let (x, y) = (int_value(ty, a.as_int()), int_value(ty, b.as_int()));
    let bits = ty.bits();
    let r: i128 = match op {
        BinOp::Add => x + y,
        BinOp::Sub => x - y,
        BinOp::Mul => x.wrapping_mul(y),
        BinOp::Div => {
            if y == 0 {
                0
            } else {
                floor_div(x, y)
            }
        }
        BinOp::Mod => {
            if y == 0 {
                0
            } else {
                floor_mod(x, y)
            }
        }
        BinOp::Min => x.min(y),
        BinOp::Max => x.max(y),
        BinOp::And => x & y,
        BinOp::Or => x | y,
        BinOp::Xor => x ^ y,
        BinOp::Shl => x << (y.rem_euclid(bits as i128) as u32),
        // Arithmetic for signed, logical for unsigned: `x` is already the mathematical value.
        BinOp::Shr => x >> (y.rem_euclid(bits as i128) as u32),
    };
    Scalar::Int(wrap_int(ty, r))
}

/// `a op b` on type `ty`, as a bool.
#[inline(always)]
pub fn compare(op: CmpOp, ty: ScalarType, a: Scalar, b: Scalar) -> bool {
    if ty.is_float() {
        let (x, y) = (a.as_float(), b.as_float());
        return match op {
            CmpOp::Eq => x == y,
            CmpOp::Ne => x != y,
            CmpOp::Lt => x < y,
            CmpOp::Le => x <= y,
            CmpOp::Gt => x > y,
            CmpOp::Ge => x >= y,
        };
    }
    let (x, y) = (int_value(ty, a.as_int()), int_value(ty, b.as_int()));
    match op {
        CmpOp::Eq => x == y,
        CmpOp::Ne => x != y,
        CmpOp::Lt => x < y,
        CmpOp::Le => x <= y,
        CmpOp::Gt => x > y,
        CmpOp::Ge => x >= y,
    }
}

/// Bitwise not for integers, logical not for bool.
#[inline(always)]
pub fn not(ty: ScalarType, a: Scalar) -> Scalar {
    let v = a.as_int();
    if ty.is_bool() { Scalar::Int((v == 0) as i64) } else { Scalar::Int(wrap_int(ty, !(v as i128))) }
}

/// Round to nearest, ties to even, in the float type `ty` (`ExprKind::Round`). The result of
/// rounding a value of `ty` is again exactly representable in `ty`.
#[inline(always)]
pub fn round(ty: ScalarType, a: Scalar) -> Scalar {
    Scalar::Float(round_float(ty, a.as_float().round_ties_even()))
}

/// `a · b + c` rounded once in `ty`, f32 or f64 (`ExprKind::Fma`): the standard library's
/// `mul_add` of that type, correctly rounded on every host.
#[inline(always)]
pub fn fma(ty: ScalarType, a: Scalar, b: Scalar, c: Scalar) -> Scalar {
    let (a, b, c) = (a.as_float(), b.as_float(), c.as_float());
    Scalar::Float(if ty == ScalarType::F32 {
        f64::from((a as f32).mul_add(b as f32, c as f32))
    } else {
        a.mul_add(b, c)
    })
}

/// IEEE square root in the float type `ty` (`ExprKind::Sqrt`). The f64 root of a narrower
/// float rounded once to `ty` is correctly rounded: f64 has more than `2p + 2` bits for f32,
/// f16 and bf16, so the double rounding is innocuous.
#[inline(always)]
pub fn sqrt(ty: ScalarType, a: Scalar) -> Scalar {
    Scalar::Float(round_float(ty, a.as_float().sqrt()))
}

/// The bits of `v` (of type `from`) read as type `to` of the same width (`ExprKind::Reinterpret`).
#[inline(always)]
pub fn reinterpret(from: ScalarType, to: ScalarType, v: Scalar) -> Scalar {
    let bits: u64 = match (from, v) {
        (ScalarType::F64, Scalar::Float(f)) => f.to_bits(),
        (ScalarType::F32, Scalar::Float(f)) => (f as f32).to_bits() as u64,
        (ScalarType::F16, Scalar::Float(f)) => half::f16::from_f64(f).to_bits() as u64,
        (ScalarType::BF16, Scalar::Float(f)) => half::bf16::from_f64(f).to_bits() as u64,
        (_, Scalar::Int(i)) => i as u64,
        (_, Scalar::Float(f)) => panic!("float value {f} of non-float type {from}"),
    };
    match to {
        ScalarType::F64 => Scalar::Float(f64::from_bits(bits)),
        ScalarType::F32 => Scalar::Float(f32::from_bits(bits as u32) as f64),
        ScalarType::F16 => Scalar::Float(half::f16::from_bits(bits as u16).to_f64()),
        ScalarType::BF16 => Scalar::Float(half::bf16::from_bits(bits as u16).to_f64()),
        _ => Scalar::Int(wrap_int(to, bits as i64 as i128)),
    }
}

/// Converts `v` of type `from` to type `to`. `saturating` clamps integer results to the target
/// range; float → int always saturates (NaN gives 0), as Rust's `as` does.
#[inline(always)]
pub fn cast(from: ScalarType, to: ScalarType, v: Scalar, saturating: bool) -> Scalar {
    if to.is_bool() {
        let nonzero = match v {
            Scalar::Int(x) => x != 0,
            Scalar::Float(f) => f != 0.0,
        };
        return Scalar::Int(nonzero as i64);
    }
    if to.is_float() {
        let x = match v {
            Scalar::Float(f) => f,
            Scalar::Int(i) => return Scalar::Float(int_to_float(int_value(from, i), to)),
        };
        return Scalar::Float(round_float(to, x));
    }
    let (lo, hi) = to.int_range().expect("integer target");
    match v {
        Scalar::Float(f) => {
            let r = if f.is_nan() {
                0
            } else if f <= lo as f64 {
                lo
            } else if f >= hi as f64 {
                hi
            } else {
                f.trunc() as i128
            };
            Scalar::Int(wrap_int(to, r))
        }
        Scalar::Int(i) => {
            let value = if from.is_bool() { (i != 0) as i128 } else { int_value(from, i) };
            let value = if saturating { value.clamp(lo, hi) } else { value };
            Scalar::Int(wrap_int(to, value))
        }
    }
}

/// Round-to-nearest-even conversion of an integer to a float type.
///
/// Integers below 2^53 are exact in f64, so the only rounding is the final one. Larger values
/// round twice for f16 (irrelevant: they overflow to infinity) and for bf16 (a documented
/// deviation of at most one bf16 ulp for |x| >= 2^53).
fn int_to_float(value: i128, to: ScalarType) -> f64 {
    match to {
        ScalarType::F64 => value as f64,
        ScalarType::F32 => value as f32 as f64,
        _ => round_float(to, value as f64),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn int(op: BinOp, ty: ScalarType, a: i64, b: i64) -> i64 {
        binary(op, ty, Scalar::Int(wrap_int(ty, a as i128)), Scalar::Int(wrap_int(ty, b as i128))).as_int()
    }

    #[test]
    fn division_is_floor_and_zero_safe() {
        assert_eq!(int(BinOp::Div, ScalarType::I32, -7, 2), -4);
        assert_eq!(int(BinOp::Mod, ScalarType::I32, -7, 2), 1);
        assert_eq!(int(BinOp::Mod, ScalarType::I32, 7, -2), -1);
        assert_eq!(int(BinOp::Div, ScalarType::I32, 5, 0), 0);
        assert_eq!(int(BinOp::Mod, ScalarType::I32, 5, 0), 0);
        assert_eq!(int(BinOp::Div, ScalarType::I32, i32::MIN as i64, -1), i32::MIN as i64);
        assert_eq!(int(BinOp::Mod, ScalarType::I32, i32::MIN as i64, -1), 0);
        assert_eq!(int(BinOp::Div, ScalarType::U8, 200, 3), 66);
    }

    #[test]
    fn float_min_max_skip_nans_and_keep_the_first_of_a_tie() {
        let f = |op, a: f64, b: f64| binary(op, ScalarType::F32, Scalar::Float(a), Scalar::Float(b)).as_float();
        for op in [BinOp::Min, BinOp::Max] {
            // Zeros of opposite sign compare equal: the first operand, with its sign.
            assert_eq!(f(op, -0.0, 0.0).to_bits(), (-0.0f64).to_bits());
            assert_eq!(f(op, 0.0, -0.0).to_bits(), 0.0f64.to_bits());
            assert_eq!(f(op, f64::NAN, 2.0), 2.0);
            assert_eq!(f(op, 2.0, f64::NAN), 2.0);
            assert!(f(op, f64::NAN, f64::NAN).is_nan());
        }
        assert_eq!(f(BinOp::Max, 1.0, 3.0), 3.0);
        assert_eq!(f(BinOp::Max, 3.0, 1.0), 3.0);
        assert_eq!(f(BinOp::Min, 1.0, 3.0), 1.0);
        assert_eq!(f(BinOp::Min, 3.0, 1.0), 1.0);
    }

    #[test]
    fn fma_rounds_once() {
        // (1 + 2^-12)² = 1 + 2^-11 + 2^-24: rounded alone it is 1 + 2^-11 (a tie to even), so
        // a product then a sum gives 0 where the fused operation keeps 2^-24.
        let a = 1.0 + 2f64.powi(-12);
        let c = -(1.0 + 2f64.powi(-11));
        let fused = fma(ScalarType::F32, Scalar::Float(a), Scalar::Float(a), Scalar::Float(c)).as_float();
        assert_eq!(fused, 2f64.powi(-24));
        assert_eq!((a as f32) * (a as f32) + c as f32, 0.0);
        // In f64 the product is exact: the same result.
        let wide = fma(ScalarType::F64, Scalar::Float(a), Scalar::Float(a), Scalar::Float(c)).as_float();
        assert_eq!(wide, 2f64.powi(-24));
        let nan = fma(ScalarType::F32, Scalar::Float(f64::INFINITY), Scalar::Float(0.0), Scalar::Float(1.0));
        assert!(nan.as_float().is_nan());
    }

    #[test]
    fn integers_wrap_at_their_width() {
        assert_eq!(int(BinOp::Add, ScalarType::U8, 250, 10), 4);
        assert_eq!(int(BinOp::Mul, ScalarType::I8, 100, 3), 44);
        assert_eq!(int(BinOp::Sub, ScalarType::U64, 0, 1), -1);
        assert_eq!(int(BinOp::Shr, ScalarType::U8, 0x80, 7), 1);
        assert_eq!(int(BinOp::Shr, ScalarType::I8, -128, 7), -1);
        assert_eq!(int(BinOp::Shl, ScalarType::I32, 1, 33), 2);
    }

    #[test]
    fn casts_wrap_narrow_and_saturate_float() {
        let c = |from, to, v, sat| cast(from, to, Scalar::Int(v), sat).as_int();
        assert_eq!(c(ScalarType::I32, ScalarType::U8, 300, false), 44);
        assert_eq!(c(ScalarType::I32, ScalarType::U8, 300, true), 255);
        assert_eq!(c(ScalarType::I32, ScalarType::I8, -300, true), -128);
        assert_eq!(c(ScalarType::I8, ScalarType::U32, -1, false), u32::MAX as i64);
        assert_eq!(c(ScalarType::U8, ScalarType::I32, 255, false), 255);
        let f = |to, x: f64| cast(ScalarType::F32, to, Scalar::Float(x), false).as_int();
        assert_eq!(f(ScalarType::U8, 300.7), 255);
        assert_eq!(f(ScalarType::I8, -1e9), -128);
        assert_eq!(f(ScalarType::I32, f64::NAN), 0);
        assert_eq!(f(ScalarType::I32, -2.9), -2);
    }

    #[test]
    fn round_is_to_nearest_with_ties_to_even() {
        let r = |ty, x: f64| round(ty, Scalar::Float(round_float(ty, x))).as_float();
        for ty in [ScalarType::F16, ScalarType::BF16, ScalarType::F32, ScalarType::F64] {
            assert_eq!(r(ty, 0.5), 0.0);
            assert_eq!(r(ty, 1.5), 2.0);
            assert_eq!(r(ty, 2.5), 2.0);
            assert_eq!(r(ty, -2.5), -2.0);
            assert_eq!(r(ty, 2.75), 3.0);
            assert_eq!(r(ty, -0.5).to_bits(), (-0.0f64).to_bits());
            assert_eq!(r(ty, f64::INFINITY), f64::INFINITY);
            assert!(r(ty, f64::NAN).is_nan());
        }
        assert_eq!(r(ScalarType::F32, 8388609.0), 8388609.0);
        assert_eq!(r(ScalarType::F64, 4503599627370497.0), 4503599627370497.0);
    }

    #[test]
    fn f16_arithmetic_rounds_once() {
        let a = Scalar::Float(round_float(ScalarType::F16, 1.0));
        let b = Scalar::Float(round_float(ScalarType::F16, 0.0004));
        let r = binary(BinOp::Add, ScalarType::F16, a, b).as_float();
        assert_eq!(r, half::f16::from_f32(1.0 + 0.0004f32).to_f64());
    }
}
