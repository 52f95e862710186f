//! The quantized residual add, as onnxruntime's x86 `QLinearAdd` kernel computes it
//! (`mlas/lib/intrinsics/avx2/qladd_avx2.cpp`, `MlasQLinearAddKernelAvx2Helper`, which the
//! platform selects on every CPU with AVX2):
//!
//! ```text
//! ra = sa / sc, rb = sb / sc                                   f32 divisions
//! fixed = f32(zc) − (ra · f32(za) + rb · f32(zb))              f32, left to right
//! c = fma(f32(a), ra, fma(f32(b), rb, fixed))                  two fused multiply-adds
//! q = saturate(round_half_even(c))                             NaN and overflow: the minimum
//! ```
//!
//! The raw integers enter the FMAs (the zero points are folded into `fixed`), so this differs
//! from the plain formula `round((sa·(a − za) + sb·(b − zb)) / sc) + zc` by one on rare ties.

use super::{Build, Int8, round_clamped};

/// The constants of one add.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AddParams {
    pub a: (f32, i32),
    pub b: (f32, i32),
    pub c: (f32, i32),
}

impl AddParams {
    /// `(ra, rb, fixed)` as onnxruntime forms them.
    pub fn constants(&self) -> (f32, f32, f32) {
        let ((sa, za), (sb, zb), (sc, zc)) = (self.a, self.b, self.c);
        let (ra, rb) = (sa / sc, sb / sc);
        (ra, rb, zc as f32 - (ra * za as f32 + rb * zb as f32))
    }
}

/// `c[i] = clamp(a[i] ⊕ b[i], clamp)` for same-shaped operands of type `ty` (any common
/// layout); `clamp` lies in the type's range (the activation's bounds).
pub fn add(a: &[u8], b: &[u8], params: &AddParams, ty: Int8, clamp: (i32, i32), c: &mut [u8]) {
    let ran = add_in(Build::best(), a, b, params, ty, clamp, c);
    debug_assert!(ran.is_some(), "the best build is available");
}

native_builds! {
    /// `add` compiled for `build` (with FMA, `mul_add` is one instruction and vectorizes;
    /// portable, it is the standard library's, correctly rounded everywhere).
    pub(crate) fn add_in(a: &[u8], b: &[u8], params: &AddParams, ty: Int8, clamp: (i32, i32), c: &mut [u8]) => add_loop
}

#[inline(always)]
fn add_loop(a: &[u8], b: &[u8], params: &AddParams, ty: Int8, clamp: (i32, i32), c: &mut [u8]) {
    // One loop per element type, so that each vectorizes.
    match ty {
        Int8::U8 => add_typed(a, b, params, clamp, c, |x| x as f32),
        Int8::S8 => add_typed(a, b, params, clamp, c, |x| x as i8 as f32),
    }
}

#[inline(always)]
fn add_typed(a: &[u8], b: &[u8], params: &AddParams, (lo, hi): (i32, i32), c: &mut [u8], value: impl Fn(u8) -> f32) {
    let (ra, rb, fixed) = params.constants();
    let (lo, hi) = (lo as f32, hi as f32);
    for ((c, &a), &b) in c.iter_mut().zip(a).zip(b) {
        let t = value(b).mul_add(rb, fixed);
        let v = value(a).mul_add(ra, t);
        *c = round_clamped(v, lo, hi) as u8;
    }
}

/// `acc[i] = clamp(acc[i] ⊕ other[i], clamp)` (`conv_is_a`) or `clamp(other[i] ⊕ acc[i], clamp)`:
/// `add` with one operand read from, and the sum written to, the same buffer (a convolution's
/// fused residual, `graph::Residual`). The same arithmetic as `add`, operands in that order.
pub fn add_in_place(acc: &mut [u8], other: &[u8], conv_is_a: bool, params: &AddParams, ty: Int8, clamp: (i32, i32)) {
    let ran = add_in_place_in(Build::best(), acc, other, conv_is_a, params, ty, clamp);
    debug_assert!(ran.is_some(), "the best build is available");
}

native_builds! {
    /// `add_in_place` compiled for `build`.
    pub(crate) fn add_in_place_in(acc: &mut [u8], other: &[u8], conv_is_a: bool, params: &AddParams, ty: Int8, clamp: (i32, i32)) => add_in_place_loop
}

#[inline(always)]
fn add_in_place_loop(acc: &mut [u8], other: &[u8], conv_is_a: bool, params: &AddParams, ty: Int8, clamp: (i32, i32)) {
    match (ty, conv_is_a) {
        (Int8::U8, true) => in_place_typed::<true>(acc, other, params, clamp, |x| x as f32),
        (Int8::U8, false) => in_place_typed::<false>(acc, other, params, clamp, |x| x as f32),
        (Int8::S8, true) => in_place_typed::<true>(acc, other, params, clamp, |x| x as i8 as f32),
        (Int8::S8, false) => in_place_typed::<false>(acc, other, params, clamp, |x| x as i8 as f32),
    }
}

#[inline(always)]
fn in_place_typed<const ACC_IS_A: bool>(
    acc: &mut [u8],
    other: &[u8],
    params: &AddParams,
    (lo, hi): (i32, i32),
    value: impl Fn(u8) -> f32,
) {
    let (ra, rb, fixed) = params.constants();
    let (lo, hi) = (lo as f32, hi as f32);
    for (c, &o) in acc.iter_mut().zip(other) {
        let (a, b) = if ACC_IS_A { (value(*c), value(o)) } else { (value(o), value(*c)) };
        let t = b.mul_add(rb, fixed);
        let v = a.mul_add(ra, t);
        *c = round_clamped(v, lo, hi) as u8;
    }
}

#[cfg(test)]
mod tests {
    use super::{AddParams, add_in, add_in_place_in};
    use crate::engine::native::{Build, Int8};

    /// The QAdd formula, plainly: no shared code with the loops.
    fn plain(a: i32, b: i32, p: &AddParams, (lo, hi): (i32, i32)) -> i32 {
        let (ra, rb) = (p.a.0 / p.c.0, p.b.0 / p.c.0);
        let fixed = p.c.1 as f32 - (ra * p.a.1 as f32 + rb * p.b.1 as f32);
        let v = (a as f32).mul_add(ra, (b as f32).mul_add(rb, fixed));
        if v.is_nan() { lo } else { (v.clamp(lo as f32, hi as f32).round_ties_even() as i32).clamp(lo, hi) }
    }

    #[test]
    fn the_in_place_sum_is_the_add_with_either_operand_in_the_buffer() {
        let mut state = 12345u64;
        let mut next = move || {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (state >> 33) as u32
        };
        // Power-of-two ratios make many exact ties; the others exercise the FMAs' rounding.
        let cases = [
            AddParams { a: (0.5, 3), b: (0.25, 7), c: (1.0, 5) },
            AddParams { a: (0.5, 0), b: (0.5, 1), c: (1.0, 0) },
            AddParams { a: (0.0173, 131), b: (0.0311, 90), c: (0.0457, 101) },
        ];
        for build in Build::ALL.into_iter().filter(|b| b.available()) {
            for p in &cases {
                for (ty, clamp) in [(Int8::U8, (0, 255)), (Int8::U8, (5, 255)), (Int8::S8, (-128, 127))] {
                    let n = 333;
                    let x: Vec<u8> = (0..n).map(|_| next() as u8).collect();
                    let y: Vec<u8> = (0..n).map(|_| next() as u8).collect();
                    let mut full = vec![0u8; n];
                    add_in(build, &x, &y, p, ty, clamp, &mut full).unwrap();
                    for conv_is_a in [true, false] {
                        let mut acc = x.clone();
                        add_in_place_in(build, &mut acc, &y, conv_is_a, p, ty, clamp).unwrap();
                        for i in 0..n {
                            let (cv, ov) = (ty.value(x[i]), ty.value(y[i]));
                            let (a, b) = if conv_is_a { (cv, ov) } else { (ov, cv) };
                            let want = ty.saturate(plain(a, b, p, clamp));
                            assert_eq!(acc[i], want, "{build:?} {p:?} {ty:?} a={a} b={b}");
                        }
                        if conv_is_a {
                            assert_eq!(acc, full, "{build:?}: the same as `add`");
                        }
                    }
                }
            }
        }
    }
}
