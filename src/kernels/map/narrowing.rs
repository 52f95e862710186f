//! The store of an f32 value as u8 or i8 (`Cast` and `SaturatingCast` agree on float → int:
//! toward zero, saturated, NaN → 0): converted vector by vector and narrowed by a saturating
//! `vpmovusdb`/`vpmovsdb` (zmm) or packs (ymm), or four vectors at a time saturated by the packs
//! that narrow them; each side the narrowing saturates needs no clamp.

use iced_x86::code_asm::*;
use ir::DType;
use ir::expr::{Expr, ExprKind};

use super::Gen;
use super::bounds::at_least;
use super::registers::{xmm, ymm, zmm};
use super::scaled_rounding::ScaledRounding;
use crate::error::KernelError;
use crate::isa::VectorWidth;

/// The float → int store of a u8 or i8 output: the value it converts.
pub(super) fn narrowing_store(root: &Expr, out: DType) -> Option<&Expr> {
    match root.kind() {
        ExprKind::Cast(x) | ExprKind::SaturatingCast(x)
            if root.dtype() == out && (out == DType::U8 || out == DType::I8) && x.dtype() == DType::F32 =>
        {
            Some(x)
        }
        _ => None,
    }
}

/// The clamp a converted value needs before its narrowing, by the side the narrowing does not
/// saturate correctly on the conversion's result (`0x80000000` for NaN and out-of-range
/// values, both signs).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Clamp {
    /// From above only: the narrowing takes the value as signed and saturates it from below
    /// (packs; `vpmovsdb`), where `0x80000000` is the lowest value.
    Above,
    /// From below only: the narrowing takes the value as unsigned and saturates it from above
    /// (`vpmovusdb` to u8), where `0x80000000` is above 255 and a negative value would be too.
    Below,
}

impl Clamp {
    /// The clamp before the saturating narrowing of one vector to `out` (u8 or i8) at `width`:
    /// zmm narrows with `vpmovusdb` (u8) or `vpmovsdb` (i8), ymm with the packs.
    pub(super) fn for_vector(out: DType, width: VectorWidth) -> Clamp {
        if out == DType::U8 && width == VectorWidth::Zmm { Clamp::Below } else { Clamp::Above }
    }
}

/// Vectors per group of a narrowing store: two `vpackssdw` and one `vpackuswb` (or
/// `vpacksswb`) narrow four i32 vectors to one of bytes.
pub(super) const GROUP: i64 = 4;

impl<'d> Gen<'d> {
    /// The value `x` of a narrowing store as i32 in a fresh register: clamped on the side
    /// `clamp` names (the narrowing saturating the other) and converted, NaN as 0 after the
    /// narrowing. A clamp from below that `x` provably never needs (`bounds::at_least`: a number
    /// at or above the output's lowest value) is left out.
    pub(super) fn converted(&mut self, x: &Expr, clamp: Clamp) -> Result<usize, KernelError> {
        let lowest = if self.decl.output.dtype() == DType::U8 { 0.0 } else { -128.0 };
        let needed = !(clamp == Clamp::Below && at_least(x).is_some_and(|b| b >= lowest));
        let clamped = match ScaledRounding::of(x) {
            Some(r) => {
                let t = self.scaled_by_reciprocal(&r)?;
                let clamped = self.clamped(t, true, clamp, needed)?;
                self.free.push(t);
                clamped
            }
            None => {
                let v = self.value(x)?;
                self.clamped(v, false, clamp, needed)?
            }
        };
        self.release(x);
        Ok(clamped)
    }

    /// `v` clamped (where `needed`) and converted as `converted` says, into a fresh register;
    /// `rounds`: to nearest (the reciprocal path leaves `round` to the conversion; clamping to
    /// integral bounds first commutes with rounding), else truncated.
    fn clamped(&mut self, v: usize, rounds: bool, clamp: Clamp, needed: bool) -> Result<usize, KernelError> {
        let out = self.decl.output.dtype();
        let clamped = self.allocate()?;
        let (lo, hi) = if out == DType::U8 { (0.0f32, 255.0f32) } else { (-128.0, 127.0) };
        let (lo, hi, zero) = (self.constant(lo.to_bits())?, self.constant(hi.to_bits())?, self.constant(0)?);
        let mut source = v;
        if out == DType::I8 {
            // NaN → +0 first: the conversion's 0x80000000 would saturate to -128.
            self.ordered_only(clamped, v, zero)?;
            source = clamped;
        }
        match (clamp, needed) {
            (Clamp::Above, _) => self.below_to_int(clamped, source, hi, rounds)?,
            (Clamp::Below, true) => self.above_to_int(clamped, source, lo, rounds)?,
            (Clamp::Below, false) => self.convert_to_int(clamped, source, rounds)?,
        }
        Ok(clamped)
    }

    /// `GROUP` vectors of a narrowing store from `COLUMN` on, each converted with the clamp
    /// from above only (`converted`), then narrowed by signed saturation to i16 and signed or unsigned
    /// saturation to bytes — which clamps from below: a NaN or a value below `i32::MIN`
    /// converts to `0x80000000`, which saturates to the lowest byte (a u8 NaN: 0, as the
    /// store's semantics; an i8 NaN was zeroed before). The packs interleave the vectors by
    /// 128-bit lanes; `vpermd` with `permutation` puts their dwords back in order.
    pub(super) fn group(&mut self, x: &Expr, permutation: usize) -> Result<(), KernelError> {
        let out = self.decl.output.dtype();
        let lanes = self.width.lanes() as i32;
        let mut held = Vec::new();
        match (ScaledRounding::of(x), self.width) {
            (Some(r), VectorWidth::Zmm) => {
                for t in self.scaled_group(&r)? {
                    held.push(self.clamped(t, true, Clamp::Above, true)?);
                    self.free.push(t);
                }
            }
            _ => {
                for g in 0..GROUP as i32 {
                    self.offset = g * lanes;
                    self.live.clear();
                    held.push(self.converted(x, Clamp::Above)?);
                }
            }
        }
        self.offset = 0;
        let arg = self.decl.inputs.len();
        let [v0, v1, v2, v3] = held[..] else { unreachable!("GROUP is 4") };
        match self.width {
            VectorWidth::Zmm => {
                self.a.vpackssdw(zmm(v0), zmm(v0), zmm(v1))?;
                self.a.vpackssdw(zmm(v2), zmm(v2), zmm(v3))?;
                if out == DType::U8 {
                    self.a.vpackuswb(zmm(v0), zmm(v0), zmm(v2))?;
                } else {
                    self.a.vpacksswb(zmm(v0), zmm(v0), zmm(v2))?;
                }
                self.a.vpermd(zmm(v0), zmm(permutation), zmm(v0))?;
                self.a.vmovdqu8(zmmword_ptr(self.at(arg, 1)?), zmm(v0))?;
            }
            VectorWidth::Ymm => {
                self.a.vpackssdw(ymm(v0), ymm(v0), ymm(v1))?;
                self.a.vpackssdw(ymm(v2), ymm(v2), ymm(v3))?;
                if out == DType::U8 {
                    self.a.vpackuswb(ymm(v0), ymm(v0), ymm(v2))?;
                } else {
                    self.a.vpacksswb(ymm(v0), ymm(v0), ymm(v2))?;
                }
                self.a.vpermd(ymm(v0), ymm(permutation), ymm(v0))?;
                self.a.vmovdqu(ymmword_ptr(self.at(arg, 1)?), ymm(v0))?;
            }
        }
        self.free.extend(held);
        Ok(())
    }

    /// A register holding the dword permutation that undoes the packs' interleaving: after
    /// them, dword `j` of 128-bit lane `i` holds (as 4 bytes) lane `i` of vector `j`, which
    /// belongs at dword `L·j + i` (`L` 128-bit lanes per vector); so dword `p` takes dword
    /// `4·(p % L) + p / L`. Loaded once, like the constants.
    pub(super) fn permutation(&mut self) -> Result<usize, KernelError> {
        let r = self.free.iter().copied().max().ok_or(KernelError::Unsupported {
            what: format!("a body needing more than {} vector registers", self.width.registers()),
        })?;
        self.free.retain(|&f| f != r);
        let l = self.width.lanes() / 4;
        let index: Vec<u8> = (0..self.width.lanes()).map(|p| (4 * (p % l) + p / l) as u8).collect();
        let word = |bytes: &[u8]| u64::from_le_bytes(bytes.try_into().expect("8 indices"));
        // The bytes are assembled in the lowest free register: `vmovq` from a general register
        // takes only xmm0–xmm15.
        let scratch = self.allocate()?;
        self.a.mov(r11, word(&index[..8]) as i64)?;
        self.a.vmovq(xmm(scratch), r11)?;
        if index.len() > 8 {
            self.a.mov(r11, word(&index[8..]) as i64)?;
            self.a.vpinsrq(xmm(scratch), xmm(scratch), r11, 1)?;
        }
        match self.width {
            VectorWidth::Zmm => self.a.vpmovzxbd(zmm(r), xmm(scratch))?,
            VectorWidth::Ymm => self.a.vpmovzxbd(ymm(r), xmm(scratch))?,
        }
        self.free.push(scratch);
        Ok(r)
    }

    /// `dst` = `src` clamped from above to `hi` (a NaN stays NaN) as i32, rounded to nearest
    /// even or truncated; below the output's range it is whatever the packing saturates.
    fn below_to_int(&mut self, dst: usize, src: usize, hi: usize, rounds: bool) -> Result<(), KernelError> {
        // `vminps` returns its second operand where either is NaN.
        match self.width {
            VectorWidth::Zmm => self.a.vminps(zmm(dst), zmm(hi), zmm(src))?,
            VectorWidth::Ymm => self.a.vminps(ymm(dst), ymm(hi), ymm(src))?,
        }
        self.convert_to_int(dst, dst, rounds)
    }

    /// `dst` = `src` clamped from below to `lo` (a NaN gives `lo`) as i32, rounded to nearest
    /// even or truncated; above the output's range it is whatever the unsigned narrowing
    /// saturates (`0x80000000` past `i32::MAX` included).
    fn above_to_int(&mut self, dst: usize, src: usize, lo: usize, rounds: bool) -> Result<(), KernelError> {
        // `vmaxps` returns its second operand where either is NaN.
        match self.width {
            VectorWidth::Zmm => self.a.vmaxps(zmm(dst), zmm(src), zmm(lo))?,
            VectorWidth::Ymm => self.a.vmaxps(ymm(dst), ymm(src), ymm(lo))?,
        }
        self.convert_to_int(dst, dst, rounds)
    }

    /// `dst` = `src` converted from f32 to i32, rounded to nearest even or truncated.
    fn convert_to_int(&mut self, dst: usize, src: usize, rounds: bool) -> Result<(), KernelError> {
        match (self.width, rounds) {
            (VectorWidth::Zmm, true) => self.a.vcvtps2dq(zmm(dst), zmm(src))?,
            (VectorWidth::Zmm, false) => self.a.vcvttps2dq(zmm(dst), zmm(src))?,
            (VectorWidth::Ymm, true) => self.a.vcvtps2dq(ymm(dst), ymm(src))?,
            (VectorWidth::Ymm, false) => self.a.vcvttps2dq(ymm(dst), ymm(src))?,
        }
        Ok(())
    }

    /// `dst = v` with NaN lanes replaced by +0 (`zero` holds +0).
    fn ordered_only(&mut self, dst: usize, v: usize, zero: usize) -> Result<(), KernelError> {
        const ORD_Q: i32 = 7;
        self.compare_select(dst, (v, v, ORD_Q), v, zero)
    }
}
