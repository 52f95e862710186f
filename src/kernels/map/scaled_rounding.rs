//! The requantization's rounding `round(x / s + zp)` by one FMA with the reciprocal of `s`: the
//! proof of where that gives the division's integer (`ScaledRounding`) and the code that checks
//! it per vector, or per group of four zmm vectors, falling back to the division.

use iced_x86::code_asm::*;
use ir::DType;
use ir::expr::{BinOp, Expr, ExprKind};

use super::Gen;
use super::narrowing::GROUP;
use super::registers::{ymm, zmm};
use crate::error::KernelError;
use crate::isa::VectorWidth;

/// `round(x / s + zp)` (`zp` 0 when the body has no addition) in f32, with constants `s` and
/// `zp` for which the reciprocal `y = 1/s` (rounded to f32, `|y - 1/s| ≤ (2^-24 + 2^-53)·|1/s|`)
/// decides the rounding exactly wherever `t = RN(x·y + zp)` (one FMA) lies farther than
/// `0.5 - 2^-10` from the half-integers around `k = round(t)`: then `round(x / s + zp) = k`.
///
/// Why: with `q = x / s` (real) and `v = RN(RN(q) + zp)` the value the body rounds,
/// `|x·y - q| ≤ 2^-24·(1 + 2^-29)·|q|` and `|RN(q) - q| ≤ 2^-24·|q|`, and each of `t` and `v`
/// is one more rounding (`≤ 2^-24` relative). Where `|t| ≤ 2^10` (and `|zp| ≤ 2^9`, so
/// `|q| < 2^10.6`), `|t - v| < 2^-12.3 + 2^-14 + 2^-13.3 < 2^-11`; so `|t - k| < 0.5 - 2^-10`
/// gives `|v - k| < 0.5`, and `v` rounds to `k` (no tie). Where `|t| > 2^10` (finite), `v` is
/// within a relative `2^-20` of `t`: both lie beyond every integer destination's range on the
/// same side, and the store saturates them alike — and the check still runs (it fails only
/// for a fraction near one half, or NaN and ±∞, which take the exact path).
pub(super) struct ScaledRounding<'e> {
    x: &'e Expr,
    s: f32,
    y: f32,
    zp: f32,
}

impl<'e> ScaledRounding<'e> {
    pub(super) fn of(e: &'e Expr) -> Option<ScaledRounding<'e>> {
        let f32_const = |e: &Expr| match e.kind() {
            ExprKind::Float(v) if e.dtype() == DType::F32 => Some(*v as f32),
            _ => None,
        };
        let ExprKind::Round(inner) = e.kind() else { return None };
        let (quotient, zp) = match inner.kind() {
            ExprKind::Binary(BinOp::Add, q, zp) => (q, f32_const(zp)?),
            _ => (inner, 0.0),
        };
        let ExprKind::Binary(BinOp::Div, x, s) = quotient.kind() else { return None };
        let s = f32_const(s)?;
        let y = (1.0 / f64::from(s)) as f32;
        let exact_types = [e, inner, quotient, x].iter().all(|n| n.dtype() == DType::F32);
        (exact_types && s.is_normal() && y.is_normal() && zp.is_finite() && zp.abs() <= 512.0)
            .then_some(ScaledRounding { x, s, y, zp })
    }

    /// `[y, s, zp, |·| mask, margin]`, as f32 bits in the kernel's constant registers.
    pub(super) fn constants(&self) -> [f32; 5] {
        [self.y, self.s, self.zp, f32::from_bits(0x7fff_ffff), 0.5 - 1.0 / 1024.0]
    }
}

impl<'d> Gen<'d> {
    /// `x / s + zp` into a fresh register, to be rounded to nearest even by the store's
    /// conversion (`ScaledRounding`): `t = x·(1/s) + zp` in one FMA, kept when every lane lies
    /// farther than `0.5 - 2^-10` from the half-integers around its rounding; else the vector is
    /// recomputed by the body's own operations (`vdivps`, `vaddps`).
    pub(super) fn scaled_by_reciprocal(&mut self, r: &ScaledRounding<'_>) -> Result<usize, KernelError> {
        let vx = self.value(r.x)?;
        let [y, s, zp, abs, margin] = r.constants().map(|c| self.constant(c.to_bits()));
        let (y, s, zp, abs, margin) = (y?, s?, zp?, abs?, margin?);
        let (t, d) = (self.allocate()?, self.allocate()?);
        let mut done = self.a.create_label();
        const LT_OQ: i32 = 0x11;
        match self.width {
            VectorWidth::Zmm => {
                self.a.vmovaps(zmm(t), zmm(vx))?;
                self.a.vfmadd213ps(zmm(t), zmm(y), zmm(zp))?;
                // `t - round(t)`, exact.
                self.a.vreduceps(zmm(d), zmm(t), 0)?;
                self.a.vandps(zmm(d), zmm(d), zmm(abs))?;
                self.a.vcmpps(k3, zmm(d), zmm(margin), LT_OQ)?;
                if self.masked {
                    self.a.kortestw(k3, k4)?;
                } else {
                    self.a.kortestw(k3, k3)?;
                }
                // CF: every lane passed.
                self.a.jb(done)?;
                self.a.vdivps(zmm(t), zmm(vx), zmm(s))?;
                self.a.vaddps(zmm(t), zmm(t), zmm(zp))?;
            }
            VectorWidth::Ymm => {
                self.a.vmovaps(ymm(t), ymm(vx))?;
                self.a.vfmadd213ps(ymm(t), ymm(y), ymm(zp))?;
                self.a.vroundps(ymm(d), ymm(t), 0)?;
                self.a.vsubps(ymm(d), ymm(t), ymm(d))?;
                self.a.vandps(ymm(d), ymm(d), ymm(abs))?;
                self.a.vcmpps(ymm(d), ymm(d), ymm(margin), LT_OQ)?;
                self.a.vmovmskps(r11d, ymm(d))?;
                self.a.cmp(r11d, 0xff)?;
                self.a.je(done)?;
                self.a.vdivps(ymm(t), ymm(vx), ymm(s))?;
                self.a.vaddps(ymm(t), ymm(t), ymm(zp))?;
            }
        }
        self.a.set_label(&mut done)?;
        self.free.push(d);
        self.release(r.x);
        Ok(t)
    }

    /// `scaled_by_reciprocal` for the `GROUP` zmm vectors of a group, into fresh registers, with
    /// one check for all of them: `vrangeps` keeps the largest `|t - round(t)|` of the four
    /// (a NaN stays NaN and fails), so a group takes three `vrangeps`, one compare and one
    /// branch instead of an `and`, a compare and a branch per vector; where any lane of the
    /// group fails, the division recomputes the whole group (`x` evaluated again: its registers
    /// are freed meanwhile).
    pub(super) fn scaled_group(&mut self, r: &ScaledRounding<'_>) -> Result<Vec<usize>, KernelError> {
        let lanes = self.width.lanes() as i32;
        let [y, s, zp, _, margin] = r.constants().map(|c| self.constant(c.to_bits()));
        let (y, s, zp, margin) = (y?, s?, zp?, margin?);
        const MAX_ABS_SIGN_CLEARED: i32 = 0b1011;
        const LT_OQ: i32 = 0x11;
        let (mut scaled, mut worst) = (Vec::new(), None);
        for g in 0..GROUP as i32 {
            self.offset = g * lanes;
            self.live.clear();
            let vx = self.value(r.x)?;
            let t = self.allocate()?;
            self.a.vmovaps(zmm(t), zmm(vx))?;
            self.a.vfmadd213ps(zmm(t), zmm(y), zmm(zp))?;
            self.release(r.x);
            let d = self.allocate()?;
            // `t - round(t)`, exact.
            self.a.vreduceps(zmm(d), zmm(t), 0)?;
            match worst {
                None => worst = Some(d),
                Some(w) => {
                    self.a.vrangeps(zmm(w), zmm(w), zmm(d), MAX_ABS_SIGN_CLEARED)?;
                    self.free.push(d);
                }
            }
            scaled.push(t);
        }
        let worst = worst.expect("a group has vectors");
        let mut done = self.a.create_label();
        self.a.vcmpps(k3, zmm(worst), zmm(margin), LT_OQ)?;
        self.a.kortestw(k3, k3)?;
        // CF: every lane passed.
        self.a.jb(done)?;
        self.free.push(worst);
        for (g, &t) in scaled.iter().enumerate() {
            self.offset = g as i32 * lanes;
            self.live.clear();
            let vx = self.value(r.x)?;
            self.a.vdivps(zmm(t), zmm(vx), zmm(s))?;
            self.a.vaddps(zmm(t), zmm(t), zmm(zp))?;
            self.release(r.x);
        }
        self.a.set_label(&mut done)?;
        Ok(scaled)
    }
}
