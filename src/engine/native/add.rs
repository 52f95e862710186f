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
