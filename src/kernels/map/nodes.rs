//! The code of the body's nodes, family by family: reads (as memory operands where used once;
//! per-row inputs broadcast), constants (from the pool where not in a register), i32 and f32
//! arithmetic (f32 `fma` included), i32 bitwise operations and shifts by constants,
//! conversions (f32 to i32 among them) and widening reads, `reinterpret`, `round`, and selects
//! on f32 comparisons. Any other node is `KernelError::Unsupported`.

use iced_x86::code_asm::*;
use ir::expr::{BinOp, CmpOp, Expr, ExprKind};
use ir::{DType, Tensor};

use super::Gen;
use super::registers::{TWO_POW_31, node, shift_amount, ymm, zmm};
use crate::error::KernelError;
use crate::isa::VectorWidth;

/// The type of a vector value: 32-bit lanes of integers or floats.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Lane {
    I32,
    F32,
}

pub(super) fn lane_of(dtype: DType) -> Option<Lane> {
    match dtype {
        d if d == DType::I32 => Some(Lane::I32),
        d if d == DType::F32 => Some(Lane::F32),
        _ => None,
    }
}

impl<'d> Gen<'d> {
    /// Emits `e` into a fresh register; its operands are released.
    pub(super) fn evaluate(&mut self, e: &Expr) -> Result<usize, KernelError> {
        let Some(lane) = lane_of(e.dtype()) else {
            return self.unsupported(format!("`{e}` of {}", e.dtype()));
        };
        if let Some(reg) = self.centered_register(e) {
            return self.read_register(reg);
        }
        match e.kind() {
            ExprKind::TensorRead(t, _) => {
                let arg = self.input(t)?;
                if let Some(reg) = self.register_input(arg) {
                    return self.read_register(reg);
                }
                if lane_of(t.dtype()).is_none() {
                    return self.unsupported(format!("a read of {} {t} outside a conversion", t.dtype()));
                }
                if self.rows[arg] {
                    return self.per_row(arg, t);
                }
                let dst = self.allocate()?;
                let mem = self.at(arg, 4)?;
                self.load(dst, mem)?;
                Ok(dst)
            }
            ExprKind::Int(_) | ExprKind::Float(_) => {
                let bits = match e.kind() {
                    ExprKind::Int(v) => *v as i32 as u32,
                    ExprKind::Float(v) => (*v as f32).to_bits(),
                    _ => unreachable!("matched above"),
                };
                let (r, temporary) = self.constant_value(bits)?;
                if temporary {
                    return Ok(r);
                }
                let dst = self.allocate()?;
                self.copy(dst, r)?;
                Ok(dst)
            }
            ExprKind::Binary(op @ (BinOp::Shl | BinOp::Shr), x, y) if lane == Lane::I32 => {
                let Some(amount) = shift_amount(y) else {
                    return self.unsupported(format!("`{e}` (a shift by a value, not a constant)"));
                };
                let vx = self.value(x)?;
                let dst = self.allocate()?;
                // `>>` of i32 is arithmetic (`ir::expr`).
                match (self.width, op) {
                    (VectorWidth::Zmm, BinOp::Shl) => self.a.vpslld(zmm(dst), zmm(vx), amount)?,
                    (VectorWidth::Zmm, _) => self.a.vpsrad(zmm(dst), zmm(vx), amount)?,
                    (VectorWidth::Ymm, BinOp::Shl) => self.a.vpslld(ymm(dst), ymm(vx), amount)?,
                    (VectorWidth::Ymm, _) => self.a.vpsrad(ymm(dst), ymm(vx), amount)?,
                }
                self.release(x);
                Ok(dst)
            }
            ExprKind::Reinterpret(x) if lane_of(x.dtype()).is_some() => {
                // The same bits: the operand's register itself at its last use, else a copy.
                let vx = self.value(x)?;
                if self.live.get(&node(x)).is_some_and(|&(_, left)| left == 1) {
                    self.live.remove(&node(x));
                    return Ok(vx);
                }
                let dst = self.allocate()?;
                self.copy(dst, vx)?;
                self.release(x);
                Ok(dst)
            }
            ExprKind::Binary(op, x, y) => {
                let vx = self.value(x)?;
                // A read used only here is the instruction's memory operand: one instruction
                // fewer per input and vector (the requantization reads three per vector).
                let vy = match self.folded_read(y, lane)? {
                    Some(mem) => Operand::Memory(mem),
                    None => Operand::Register(self.value(y)?),
                };
                let dst = self.allocate()?;
                self.binary(lane, *op, dst, vx, vy, e)?;
                self.release(x);
                self.release(y);
                Ok(dst)
            }
            ExprKind::Cast(x) => self.convert(lane, x, e),
            ExprKind::Round(x) if lane == Lane::F32 => {
                let vx = self.value(x)?;
                let dst = self.allocate()?;
                match self.width {
                    VectorWidth::Zmm => self.a.vrndscaleps(zmm(dst), zmm(vx), 0)?,
                    VectorWidth::Ymm => self.a.vroundps(ymm(dst), ymm(vx), 0)?,
                }
                self.release(x);
                Ok(dst)
            }
            ExprKind::Select(c, t, f) => self.select(c, t, f),
            ExprKind::Fma(x, y, z) if lane == Lane::F32 => {
                let (vx, vy, vz) = (self.value(x)?, self.value(y)?, self.value(z)?);
                // dst = x, then dst·y + z rounded once; at `x`'s last use its own register
                // (no copy).
                let last = self.live.get(&node(x)).is_some_and(|&(_, left)| left == 1);
                let dst = if last {
                    self.live.remove(&node(x));
                    vx
                } else {
                    let dst = self.allocate()?;
                    self.copy(dst, vx)?;
                    self.release(x);
                    dst
                };
                match self.width {
                    VectorWidth::Zmm => self.a.vfmadd213ps(zmm(dst), zmm(vy), zmm(vz))?,
                    VectorWidth::Ymm => self.a.vfmadd213ps(ymm(dst), ymm(vy), ymm(vz))?,
                }
                self.release(y);
                self.release(z);
                Ok(dst)
            }
            _ => self.unsupported(format!("`{e}`")),
        }
    }

    /// The argument position of the declaration input `t`.
    fn input(&self, t: &Tensor) -> Result<usize, KernelError> {
        match self.decl.inputs.iter().position(|i| i.id() == t.id()) {
            Some(arg) => Ok(arg),
            None => self.unsupported(format!("a read of {t}, which is not an input")),
        }
    }

    fn load(&mut self, dst: usize, mem: AsmMemoryOperand) -> Result<(), KernelError> {
        match (self.width, self.masked) {
            (VectorWidth::Zmm, false) => self.a.vmovdqu32(zmm(dst), zmmword_ptr(mem))?,
            (VectorWidth::Zmm, true) => self.a.vmovdqu32(zmm(dst).k2().z(), zmmword_ptr(mem))?,
            (VectorWidth::Ymm, _) => self.a.vmovdqu(ymm(dst), ymmword_ptr(mem))?,
        }
        Ok(())
    }

    /// The value of the per-row input `arg` (`t`) in every lane: its element at the row, which
    /// the row loop advances to. An epilogue has no row pointer: unsupported there.
    fn per_row(&mut self, arg: usize, t: &Tensor) -> Result<usize, KernelError> {
        if self.place.is_some() {
            return self.unsupported(format!("a per-row read of {t} in an epilogue"));
        }
        let dst = self.allocate()?;
        let at = super::registers::ARGS[arg] + self.row_shift(arg);
        match self.width {
            VectorWidth::Zmm => self.a.vbroadcastss(zmm(dst), dword_ptr(at))?,
            VectorWidth::Ymm => self.a.vbroadcastss(ymm(dst), dword_ptr(at))?,
        }
        Ok(dst)
    }

    /// The memory operand of `y` when it is a full-vector read of an input of `lane`'s type
    /// used nowhere else (a masked vector loads it under k2 instead).
    fn folded_read(&self, y: &Expr, lane: Lane) -> Result<Option<AsmMemoryOperand>, KernelError> {
        let ExprKind::TensorRead(t, _) = y.kind() else { return Ok(None) };
        let arg = self.input(t)?;
        let in_register = self.register_input(arg).is_some() || self.rows[arg];
        if self.masked || in_register || lane_of(t.dtype()) != Some(lane) || self.uses[&node(y)] != 1 {
            return Ok(None);
        }
        Ok(Some(self.at(arg, 4)?))
    }

    fn binary(&mut self, lane: Lane, op: BinOp, d: usize, x: usize, y: Operand, e: &Expr) -> Result<(), KernelError> {
        // One instruction per (width, lane, op); `$zy`/`$yy` are the second operand at zmm/ymm.
        macro_rules! emit {
            ($zy:expr, $yy:expr) => {
                match (self.width, lane, op) {
                    (VectorWidth::Zmm, Lane::I32, BinOp::Add) => self.a.vpaddd(zmm(d), zmm(x), $zy)?,
                    (VectorWidth::Zmm, Lane::I32, BinOp::Sub) => self.a.vpsubd(zmm(d), zmm(x), $zy)?,
                    (VectorWidth::Zmm, Lane::I32, BinOp::Mul) => self.a.vpmulld(zmm(d), zmm(x), $zy)?,
                    (VectorWidth::Zmm, Lane::F32, BinOp::Add) => self.a.vaddps(zmm(d), zmm(x), $zy)?,
                    (VectorWidth::Zmm, Lane::F32, BinOp::Sub) => self.a.vsubps(zmm(d), zmm(x), $zy)?,
                    (VectorWidth::Zmm, Lane::F32, BinOp::Mul) => self.a.vmulps(zmm(d), zmm(x), $zy)?,
                    (VectorWidth::Zmm, Lane::F32, BinOp::Div) => self.a.vdivps(zmm(d), zmm(x), $zy)?,
                    (VectorWidth::Zmm, Lane::I32, BinOp::And) => self.a.vpandd(zmm(d), zmm(x), $zy)?,
                    (VectorWidth::Zmm, Lane::I32, BinOp::Or) => self.a.vpord(zmm(d), zmm(x), $zy)?,
                    (VectorWidth::Zmm, Lane::I32, BinOp::Xor) => self.a.vpxord(zmm(d), zmm(x), $zy)?,
                    (VectorWidth::Ymm, Lane::I32, BinOp::Add) => self.a.vpaddd(ymm(d), ymm(x), $yy)?,
                    (VectorWidth::Ymm, Lane::I32, BinOp::Sub) => self.a.vpsubd(ymm(d), ymm(x), $yy)?,
                    (VectorWidth::Ymm, Lane::I32, BinOp::Mul) => self.a.vpmulld(ymm(d), ymm(x), $yy)?,
                    (VectorWidth::Ymm, Lane::F32, BinOp::Add) => self.a.vaddps(ymm(d), ymm(x), $yy)?,
                    (VectorWidth::Ymm, Lane::F32, BinOp::Sub) => self.a.vsubps(ymm(d), ymm(x), $yy)?,
                    (VectorWidth::Ymm, Lane::F32, BinOp::Mul) => self.a.vmulps(ymm(d), ymm(x), $yy)?,
                    (VectorWidth::Ymm, Lane::F32, BinOp::Div) => self.a.vdivps(ymm(d), ymm(x), $yy)?,
                    (VectorWidth::Ymm, Lane::I32, BinOp::And) => self.a.vpand(ymm(d), ymm(x), $yy)?,
                    (VectorWidth::Ymm, Lane::I32, BinOp::Or) => self.a.vpor(ymm(d), ymm(x), $yy)?,
                    (VectorWidth::Ymm, Lane::I32, BinOp::Xor) => self.a.vpxor(ymm(d), ymm(x), $yy)?,
                    _ => return self.unsupported(format!("`{e}`")),
                }
            };
        }
        match y {
            Operand::Register(y) => emit!(zmm(y), ymm(y)),
            Operand::Memory(m) => emit!(zmmword_ptr(m), ymmword_ptr(m)),
        }
        Ok(())
    }

    /// `Cast` to i32 or f32: of i32 to f32, or of a u8/i8 input widened from memory.
    fn convert(&mut self, lane: Lane, x: &Expr, e: &Expr) -> Result<usize, KernelError> {
        if let ExprKind::TensorRead(t, _) = x.kind()
            && (t.dtype() == DType::U8 || t.dtype() == DType::I8)
        {
            let arg = self.input(t)?;
            if self.register_input(arg).is_some() {
                return self.unsupported(format!("a widening read of {t}, which is in a register"));
            }
            let dst = self.allocate()?;
            let mem = self.at(arg, 1)?;
            let signed = t.dtype() == DType::I8;
            match (self.width, self.masked, signed) {
                (VectorWidth::Zmm, false, false) => self.a.vpmovzxbd(zmm(dst), xmmword_ptr(mem))?,
                (VectorWidth::Zmm, false, true) => self.a.vpmovsxbd(zmm(dst), xmmword_ptr(mem))?,
                (VectorWidth::Zmm, true, false) => self.a.vpmovzxbd(zmm(dst).k2().z(), xmmword_ptr(mem))?,
                (VectorWidth::Zmm, true, true) => self.a.vpmovsxbd(zmm(dst).k2().z(), xmmword_ptr(mem))?,
                (VectorWidth::Ymm, _, false) => self.a.vpmovzxbd(ymm(dst), qword_ptr(mem))?,
                (VectorWidth::Ymm, _, true) => self.a.vpmovsxbd(ymm(dst), qword_ptr(mem))?,
            }
            if lane == Lane::F32 {
                self.cvtdq2ps(dst, dst)?;
            }
            // The read node itself is not live: it has no vector of its own.
            return Ok(dst);
        }
        match (lane_of(x.dtype()), lane) {
            (Some(Lane::I32), Lane::F32) => {
                let vx = self.value(x)?;
                let dst = self.allocate()?;
                self.cvtdq2ps(dst, vx)?;
                self.release(x);
                Ok(dst)
            }
            (Some(Lane::F32), Lane::I32) => {
                let vx = self.value(x)?;
                let dst = self.truncate(vx)?;
                self.release(x);
                Ok(dst)
            }
            (Some(from), to) if from == to => {
                let vx = self.value(x)?;
                let dst = self.allocate()?;
                self.copy(dst, vx)?;
                self.release(x);
                Ok(dst)
            }
            _ => self.unsupported(format!("`{e}`")),
        }
    }

    /// `i32(x)` of f32 as `Cast` defines it: toward zero, saturated, NaN → 0. `vcvttps2dq`
    /// truncates every `x` in `[-2^31, 2^31)` exactly and gives `0x80000000` for the rest: right
    /// for `x < -2^31` (and -∞); where `x ≥ 2^31` (ordered: +∞ too) its complement `i32::MAX`
    /// replaces it, and where `x` is NaN (unordered with itself) 0.
    fn truncate(&mut self, x: usize) -> Result<usize, KernelError> {
        const ORD_Q: i32 = 0x07;
        const GE_OQ: i32 = 0x1d;
        let (bound, temporary) = self.constant_value(TWO_POW_31)?;
        let dst = self.allocate()?;
        match self.width {
            VectorWidth::Zmm => {
                self.a.vcmpps(k3, zmm(x), zmm(x), ORD_Q)?;
                self.a.vcvttps2dq(zmm(dst).k3().z(), zmm(x))?;
                self.a.vcmpps(k3, zmm(x), zmm(bound), GE_OQ)?;
                // Truth table 0x0f: the complement of the first operand, where k3 is set.
                self.a.vpternlogd(zmm(dst).k3(), zmm(dst), zmm(dst), 0x0f)?;
            }
            VectorWidth::Ymm => {
                let mask = self.allocate()?;
                self.a.vcvttps2dq(ymm(dst), ymm(x))?;
                self.a.vcmpps(ymm(mask), ymm(x), ymm(bound), GE_OQ)?;
                self.a.vpxor(ymm(dst), ymm(dst), ymm(mask))?;
                self.a.vcmpps(ymm(mask), ymm(x), ymm(x), ORD_Q)?;
                self.a.vpand(ymm(dst), ymm(dst), ymm(mask))?;
                self.free.push(mask);
            }
        }
        if temporary {
            self.free.push(bound);
        }
        Ok(dst)
    }

    fn cvtdq2ps(&mut self, dst: usize, x: usize) -> Result<(), KernelError> {
        match self.width {
            VectorWidth::Zmm => self.a.vcvtdq2ps(zmm(dst), zmm(x))?,
            VectorWidth::Ymm => self.a.vcvtdq2ps(ymm(dst), ymm(x))?,
        }
        Ok(())
    }

    pub(super) fn copy(&mut self, dst: usize, x: usize) -> Result<(), KernelError> {
        match self.width {
            VectorWidth::Zmm => self.a.vmovaps(zmm(dst), zmm(x))?,
            VectorWidth::Ymm => self.a.vmovaps(ymm(dst), ymm(x))?,
        }
        Ok(())
    }

    /// `c ? t : f` for a comparison `c` of two f32 values.
    fn select(&mut self, c: &Expr, t: &Expr, f: &Expr) -> Result<usize, KernelError> {
        let ExprKind::Cmp(op, x, y) = c.kind() else {
            return self.unsupported(format!("a select on `{c}`"));
        };
        if x.dtype() != DType::F32 || lane_of(t.dtype()).is_none() {
            return self.unsupported(format!("a select on `{c}`"));
        }
        if let Some(dst) = self.min_max(*op, (x, y), t, f)? {
            return Ok(dst);
        }
        // Ordered predicates (false when either side is NaN); `!=` is true on NaN.
        const EQ_OQ: i32 = 0x00;
        const NEQ_UQ: i32 = 0x04;
        const LT_OQ: i32 = 0x11;
        const LE_OQ: i32 = 0x12;
        let (a, b, predicate) = match op {
            CmpOp::Eq => (x, y, EQ_OQ),
            CmpOp::Ne => (x, y, NEQ_UQ),
            CmpOp::Lt => (x, y, LT_OQ),
            CmpOp::Le => (x, y, LE_OQ),
            CmpOp::Gt => (y, x, LT_OQ),
            CmpOp::Ge => (y, x, LE_OQ),
        };
        let (va, vb) = (self.value(a)?, self.value(b)?);
        let (vt, vf) = (self.value(t)?, self.value(f)?);
        let dst = self.allocate()?;
        self.compare_select(dst, (va, vb, predicate), vt, vf)?;
        for e in [a, b, t, f] {
            self.release(e);
        }
        Ok(dst)
    }

    /// `a < b ? b : a` as `vmaxps(b, a)` and `a < b ? a : b` as `vminps(a, b)` (`a > b` read
    /// as `b < a`), or `None` for any other select. Exact on every input: where the ordered
    /// `<` is false (NaN on either side, equal values, zeros of either sign) the select takes
    /// `f`, and the instructions return their second operand, which is `f`.
    fn min_max(&mut self, op: CmpOp, (x, y): (&Expr, &Expr), t: &Expr, f: &Expr) -> Result<Option<usize>, KernelError> {
        let (a, b) = match op {
            CmpOp::Lt => (x, y),
            CmpOp::Gt => (y, x),
            _ => return Ok(None),
        };
        // The same node, or equal constants (which live in registers of their own).
        let same = |p: &Expr, q: &Expr| node(p) == node(q) || (p.is_const() && p.structurally_eq(q));
        let (max, min) = (same(t, b) && same(f, a), same(t, a) && same(f, b));
        if !(max || min) {
            return Ok(None);
        }
        let (first, second) = if max { (b, a) } else { (a, b) };
        let (v1, v2) = (self.value(first)?, self.value(second)?);
        let dst = self.allocate()?;
        match (self.width, max) {
            (VectorWidth::Zmm, true) => self.a.vmaxps(zmm(dst), zmm(v1), zmm(v2))?,
            (VectorWidth::Zmm, false) => self.a.vminps(zmm(dst), zmm(v1), zmm(v2))?,
            (VectorWidth::Ymm, true) => self.a.vmaxps(ymm(dst), ymm(v1), ymm(v2))?,
            (VectorWidth::Ymm, false) => self.a.vminps(ymm(dst), ymm(v1), ymm(v2))?,
        }
        for e in [x, y, t, f] {
            self.release(e);
        }
        Ok(Some(dst))
    }

    /// `dst = a <predicate> b ? t : f`, lane by lane (`vcmpps` immediate predicates).
    pub(super) fn compare_select(
        &mut self,
        dst: usize,
        (a, b, predicate): (usize, usize, i32),
        t: usize,
        f: usize,
    ) -> Result<(), KernelError> {
        match self.width {
            VectorWidth::Zmm => {
                self.a.vcmpps(k3, zmm(a), zmm(b), predicate)?;
                self.a.vblendmps(zmm(dst).k3(), zmm(f), zmm(t))?;
            }
            VectorWidth::Ymm => {
                self.a.vcmpps(ymm(dst), ymm(a), ymm(b), predicate)?;
                self.a.vblendvps(ymm(dst), ymm(f), ymm(t), ymm(dst))?;
            }
        }
        Ok(())
    }
}

/// A binary instruction's second operand.
#[derive(Clone, Copy)]
enum Operand {
    Register(usize),
    Memory(AsmMemoryOperand),
}
