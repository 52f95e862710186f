//! f32 math functions for tensor expressions: `exp`, `log`, `sqrt`, `rsqrt`, `tanh`, `sigmoid`,
//! `erf`.
//!
//! # Semantics
//!
//! `sqrt` is the IEEE 754 square root (`ExprKind::Sqrt`, correctly rounded), and `rsqrt` is
//! `1 / sqrt(x)`: two correctly rounded operations (not a fused reciprocal square root), so
//! within 1.5 ulp of the true `1/√x`.
//!
//! The others have no IEEE instruction. Each is *defined* as the fixed expansion written in its
//! builder below, made only of basic IR operations (`+ - * /` on f32, `round`, comparisons,
//! `select`, `f32 ↔ i32` casts, `reinterpret` of the bits, integer shifts and masks), in a fixed
//! order with separate multiplies and adds (no fused multiply-add). Every f32 operation is
//! correctly rounded in the interpreter and in the JIT alike, so the two compute the same bits,
//! scalar or vectorized. As Halide does for its fast math, this trades the last half ulp of
//! accuracy for one definition every backend shares and vector code for free.
//!
//! Accuracy: the error against the correctly rounded result (f64 `std` functions, `libm::erf`,
//! rounded to f32) stays within the bound below. `tests/it/math.rs::max_ulp_error_of_each_function`
//! asserts it on every 1021st f32 bit pattern (4.2 million inputs over the whole domain, both
//! signs) plus the neighbourhood of each break point, and prints the largest error it finds
//! (`--nocapture`). The sweep is not exhaustive: an input it skips could exceed that largest
//! error slightly.
//!
//! | function  | bound (ulp) | where the expansion comes from                          |
//! |-----------|-------------|---------------------------------------------------------|
//! | `exp`     | 1           | Cephes `expf`: `2^n · p(r)`, `|r| ≤ ln2/2`                |
//! | `log`     | 1           | Cephes `logf`: `e·ln2 + log1p(m - 1)`, `m ∈ [√½, √2)`     |
//! | `sqrt`    | 0.5         | IEEE `sqrt`                                             |
//! | `rsqrt`   | 1.5         | `1 / sqrt(x)`                                           |
//! | `tanh`    | 1.5         | Cephes `tanhf`: odd polynomial to 0.625, else `1 - 2/(e^{2|x|}+1)` |
//! | `sigmoid` | 2.5         | `1/(1+e^{-|x|})` or `e^{-|x|}/(1+e^{-|x|})` by sign     |
//! | `erf`     | 1.5         | `x + x·R(x²)` to 1, else `1 - exp(Q(|x|) - x²)` (fits below) |
//!
//! (Ulps are those of the correctly rounded result; subnormal results are measured in units of
//! the smallest subnormal.) Special values: `exp(±0) = 1`, `exp(+∞) = +∞`, `exp(-∞) = 0`,
//! `exp(x) = +∞` for `x ≥ 88.72284` (overflow), `exp(x)` is subnormal below `x ≈ -87.34`
//! (`ln 2^-126`) and 0 below `-103.97` (`ln 2^-150`); `log(±0) = -∞`, `log(x < 0) = NaN`,
//! `log(+∞) = +∞`, subnormal operands within the same bound; `tanh(±∞) = ±1`, `tanh(±0) = ±0`;
//! `sigmoid(+∞) = 1`, `sigmoid(-∞) = 0`; `erf(±∞) = ±1`, `erf(±0) = ±0`, `erf(x) = ±1` for `|x| ≥ 3.92`. NaN in gives NaN out (the
//! payload is unspecified).
//!
//! The operand must be `f32` (scalar, or a vector before or after vectorization). For an operand
//! of any other type a builder returns `x * 1.0f32` instead of its expansion, which `te::compute`
//! reports as `TeError::DTypeMismatch` naming the operand's type (the loop-IR verifier as a dtype
//! error): cast to f32 first. `sqrt` is the exception: it is defined on every float type.

use crate::dtype::{DType, ScalarType};
use crate::expr::{BinOp, Expr, IntoExpr, select};

/// An f32 constant (`value` rounded to f32) with the lanes of `like`.
fn f(like: &Expr, value: f64) -> Expr {
    splat(like, Expr::float(DType::F32, value))
}

/// An i32 constant with the lanes of `like`.
fn i(like: &Expr, value: i32) -> Expr {
    splat(like, Expr::int(DType::I32, value as i64))
}

fn splat(like: &Expr, c: Expr) -> Expr {
    let lanes = like.dtype().lanes;
    if lanes > 1 { Expr::broadcast(c, lanes) } else { c }
}

/// `((c[0]·x + c[1])·x + c[2])·x + ...`: Horner's scheme, one rounding per multiply and add.
fn horner(x: &Expr, coefficients: &[f64]) -> Expr {
    let mut acc = f(x, coefficients[0]);
    for &c in &coefficients[1..] {
        acc = acc * x + f(x, c);
    }
    acc
}

/// `x` if it is f32; otherwise the ill-typed `x * 1.0f32` that `te::compute` rejects with a
/// dtype mismatch naming `x`'s type.
fn f32_operand(x: impl IntoExpr) -> Result<Expr, Expr> {
    let x = x.into_expr();
    if x.dtype().scalar == ScalarType::F32 {
        Ok(x)
    } else {
        let one = f(&x, 1.0);
        Err(Expr::binary(BinOp::Mul, x, one))
    }
}

/// The bits of an f32 expression as i32.
fn bits(x: &Expr) -> Expr {
    x.reinterpret(ScalarType::I32)
}

/// An i32 expression's bits as f32.
fn from_bits(b: Expr) -> Expr {
    b.reinterpret(ScalarType::F32)
}

/// `|x|`, exactly (clears the sign bit, so `|-0| = +0` and NaN stays NaN).
fn abs(x: &Expr) -> Expr {
    from_bits(bits(x) & i(x, i32::MAX))
}

/// `t` with its sign bit replaced by `x`'s sign bit, for an odd function computed on `|x|`
/// (`t` must be non-negative or NaN).
fn with_sign_of(t: Expr, x: &Expr) -> Expr {
    let sign = bits(x) & i(x, i32::MIN);
    from_bits(bits(&t) | sign)
}

/// `2^k` for an i32 `k` in the normal exponent range `-126..=127`, built from its exponent bits.
fn pow2(k: Expr) -> Expr {
    let like = k.clone();
    from_bits((k + i(&like, 127)) << i(&like, 23))
}

/// `e^x`, within 1 ulp of the correctly rounded result (module doc).
///
/// `x` is clamped to `[-104, 89]` (NaN passes the clamp: both comparisons are false), which
/// changes no result: `e^89` overflows and `e^-104` rounds to 0. Then `n = round(x·log2 e)`,
/// `r = (x - n·C1) - n·C2` with `C1 + C2 = ln 2` and `C1 = 0.693359375` short enough that `n·C1` is
/// exact, `p = ((P(r)·r²) + r) + 1` with Cephes' degree-5 `P`, and the result is
/// `(p · 2^⌊n/2⌋) · 2^(n - ⌊n/2⌋)`: two factors so that `n` in `-150..=128` needs no exponent out
/// of the normal range, and one rounding at the end (to a subnormal, or to ∞ on overflow).
pub fn exp(x: impl IntoExpr) -> Expr {
    let x = match f32_operand(x) {
        Ok(x) => x,
        Err(ill_typed) => return ill_typed,
    };
    let (hi, lo) = (f(&x, 89.0), f(&x, -104.0));
    let x = select(x.gt(&hi), hi, x.clone());
    let x = select(x.lt(&lo), lo, x.clone());
    let n = (&x * f(&x, std::f64::consts::LOG2_E)).round();
    let r = &x - &n * f(&x, 0.693359375);
    let r = &r - &n * f(&x, -2.12194440e-4);
    let z = &r * &r;
    let p = horner(
        &r,
        &[1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2, 1.6666665459e-1, 5.0000001201e-1],
    );
    let p = p * z + &r + f(&x, 1.0);
    let n = n.cast(ScalarType::I32);
    let n1 = &n >> i(&x, 1);
    let n2 = &n - &n1;
    p * pow2(n1) * pow2(n2)
}

/// The natural logarithm, within 1 ulp of the correctly rounded result (module doc).
///
/// A subnormal `x` is first scaled by `2^23` (exactly). The bits then give `x = m·2^e` with
/// `m ∈ [0.5, 1)`; if `m < √½` the pair becomes `(2m, e - 1)`, so `t = m - 1 ∈ [√½ - 1, √2 - 1)`.
/// With Cephes' degree-8 `P`: `y = (P(t)·t)·t²`, `y += e·C2`, `y += -0.5·t²`, `r = t + y`,
/// `r += e·C1` (`C1 + C2 = ln 2` as in `exp`). Then `log(NaN) = NaN`, `log(x < 0) = NaN`,
/// `log(±0) = -∞`, `log(+∞) = +∞` by selects.
pub fn log(x: impl IntoExpr) -> Expr {
    let x = match f32_operand(x) {
        Ok(x) => x,
        Err(ill_typed) => return ill_typed,
    };
    let tiny = x.lt(f(&x, f32::MIN_POSITIVE as f64));
    let scaled = select(tiny.clone(), &x * f(&x, 8388608.0), x.clone());
    let b = bits(&scaled);
    let e = ((&b >> i(&x, 23)) & i(&x, 0xff)) - select(tiny, i(&x, 126 + 23), i(&x, 126));
    let m = from_bits((&b & i(&x, 0x007f_ffff)) | i(&x, 0x3f00_0000));
    let low = m.lt(f(&x, std::f64::consts::FRAC_1_SQRT_2));
    let e = select(low.clone(), &e - i(&x, 1), e.clone());
    let t = select(low, &m + &m - f(&x, 1.0), &m - f(&x, 1.0));
    let z = &t * &t;
    let p = horner(
        &t,
        &[
            7.0376836292e-2,
            -1.1514610310e-1,
            1.1676998740e-1,
            -1.2420140846e-1,
            1.4249322787e-1,
            -1.6668057665e-1,
            2.0000714765e-1,
            -2.4999993993e-1,
            3.3333331174e-1,
        ],
    );
    let fe = e.cast(ScalarType::F32);
    let y = p * &t * &z;
    let y = y + &fe * f(&x, -2.12194440e-4);
    let y = y + &z * f(&x, -0.5);
    let r = &t + y;
    let r = r + &fe * f(&x, 0.693359375);
    let r = select(x.eq(f(&x, f64::INFINITY)), x.clone(), r);
    let r = select(x.eq(f(&x, 0.0)), f(&x, f64::NEG_INFINITY), r);
    let r = select(x.lt(f(&x, 0.0)), f(&x, f64::NAN), r);
    select(x.ne(&x), x.clone(), r)
}

/// The IEEE square root (`ExprKind::Sqrt`): correctly rounded.
pub fn sqrt(x: impl IntoExpr) -> Expr {
    x.into_expr().sqrt()
}

/// `1 / sqrt(x)` as two correctly rounded operations (within 1.5 ulp): `rsqrt(+0) = +∞`,
/// `rsqrt(-0) = -∞`, `rsqrt(+∞) = +0`, NaN for negative operands.
pub fn rsqrt(x: impl IntoExpr) -> Expr {
    let x = match f32_operand(x) {
        Ok(x) => x,
        Err(ill_typed) => return ill_typed,
    };
    f(&x, 1.0) / x.sqrt()
}

/// The hyperbolic tangent, within 1.5 ulp (module doc). On `a = |x|`: for `a ≤ 0.625` Cephes'
/// odd polynomial `((P(a²)·a²)·a) + a`, else `1 - 2/(exp(2a) + 1)` (which saturates to exactly 1
/// once `exp` overflows); then `x`'s sign is copied onto the result, so `tanh(-0) = -0`.
pub fn tanh(x: impl IntoExpr) -> Expr {
    let x = match f32_operand(x) {
        Ok(x) => x,
        Err(ill_typed) => return ill_typed,
    };
    let a = abs(&x);
    let one = f(&x, 1.0);
    let e = exp(&a + &a);
    let big = &one - f(&x, 2.0) / (e + &one);
    let z = &a * &a;
    let p = horner(&z, &[-5.70498872745e-3, 2.06390887954e-2, -5.37397155531e-2, 1.33314422036e-1, -3.33332819422e-1]);
    let small = p * z * &a + &a;
    with_sign_of(select(a.gt(f(&x, 0.625)), big, small), &x)
}

/// The logistic function `1 / (1 + e^-x)`, within 2.5 ulp (module doc). With `e = exp(-|x|)` and
/// `d = 1 + e`: `1/d` for `x ≥ 0` and `e/d` for `x < 0`, so no `exp` overflows and the tail
/// towards -∞ keeps its relative accuracy down to the subnormals.
pub fn sigmoid(x: impl IntoExpr) -> Expr {
    let x = match f32_operand(x) {
        Ok(x) => x,
        Err(ill_typed) => return ill_typed,
    };
    let minus_abs = from_bits(bits(&x) | i(&x, i32::MIN));
    let e = exp(minus_abs);
    let d = f(&x, 1.0) + &e;
    select(x.ge(f(&x, 0.0)), f(&x, 1.0) / &d, e / d)
}

/// The error function, within 1.5 ulp (module doc). On `a = |x|`:
/// * `a ≤ 1`: `a + a·R(a²)`, `R` a degree-6 Chebyshev fit of `erf(√z)/√z - 1` on `z ∈ [0, 1]`
///   (fit error 1.3e-9);
/// * `a > 1`: `1 - exp(Q(a) - a·a)`, `Q` a degree-8 Chebyshev fit in `u = a - 2.5` of
///   `log(erfc(a)) + a²` on `a ∈ [1, 3.92]` (fit error 1.3e-8, relative to `erfc`); `a` is first
///   clamped to 3.92, where `1 - erfc` already rounds to 1.
///
/// The sign of `x` is copied onto the result. Both fits were made with mpmath `chebyfit` at
/// 40 digits and rounded to f32.
pub fn erf(x: impl IntoExpr) -> Expr {
    let x = match f32_operand(x) {
        Ok(x) => x,
        Err(ill_typed) => return ill_typed,
    };
    let a = abs(&x);
    let z = &a * &a;
    let r = horner(
        &z,
        &[
            7.875875062685488e-05,
            -0.000801686428716587,
            0.005189087423433974,
            -0.026854212010626412,
            0.11283594715160218,
            -0.37612626666720334,
            0.12837916584835093,
        ],
    );
    let small = &a + &a * r;
    let limit = f(&x, 3.92);
    let ac = select(a.gt(&limit), limit, a.clone());
    let u = &ac - f(&x, 2.5);
    let q = horner(
        &u,
        &[
            1.6704327477376766e-06,
            -1.3279140360763403e-05,
            7.717127634974766e-05,
            -0.00042023838452032863,
            0.0021654349935406945,
            -0.010858437221674877,
            0.05610625230947429,
            -0.3526806969678907,
            -1.5568152705670073,
        ],
    );
    let big = f(&x, 1.0) - exp(q - &ac * &ac);
    with_sign_of(select(a.gt(f(&x, 1.0)), big, small), &x)
}
