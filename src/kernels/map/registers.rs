//! The registers of a map kernel: the general ones the calling convention and the loops use, and
//! the vector ones the generator allocates: constants loaded once before the loops (the highest
//! registers), and per vector the live value of each node of the body until its last use.

use iced_x86::Register;
use iced_x86::code_asm::registers::{xmm::get_xmm, ymm::get_ymm, zmm::get_zmm};
use iced_x86::code_asm::*;
use ir::DType;
use ir::expr::{BinOp, Expr, ExprKind};

use super::Gen;
use crate::error::KernelError;
use crate::isa::VectorWidth;

/// Argument registers of the SysV calling convention, in order.
pub(super) const ARGS: [AsmRegister64; 6] = [rdi, rsi, rdx, rcx, r8, r9];
/// The column of the current vector.
pub(super) const COLUMN: AsmRegister64 = rax;
pub(super) const ROW_COUNT: AsmRegister64 = r10;

/// A node's identity within the declaration's body (shared subtrees are evaluated once).
pub(super) fn node(e: &Expr) -> usize {
    std::ptr::from_ref(e.kind()) as usize
}

impl<'d> Gen<'d> {
    pub(super) fn count_uses(&mut self, e: &Expr) {
        let count = self.uses.entry(node(e)).or_insert(0);
        *count += 1;
        if *count > 1 {
            return;
        }
        match e.kind() {
            ExprKind::Binary(_, x, y) | ExprKind::Cmp(_, x, y) => {
                self.count_uses(x);
                self.count_uses(y);
            }
            ExprKind::Cast(x) | ExprKind::SaturatingCast(x) | ExprKind::Round(x) | ExprKind::Reinterpret(x) => {
                self.count_uses(x)
            }
            // A select evaluates its comparison's operands and releases them once per select,
            // also where selects share the comparison node: they are counted per select.
            ExprKind::Select(c, t, f) if matches!(c.kind(), ExprKind::Cmp(..)) => {
                let ExprKind::Cmp(_, x, y) = c.kind() else { unreachable!("matched above") };
                for e in [x, y, t, f] {
                    self.count_uses(e);
                }
            }
            ExprKind::Select(c, t, f) | ExprKind::Fma(c, t, f) => {
                self.count_uses(c);
                self.count_uses(t);
                self.count_uses(f);
            }
            _ => {}
        }
    }

    pub(super) fn allocate(&mut self) -> Result<usize, KernelError> {
        match self.free.pop() {
            Some(r) => Ok(r),
            None => self.unsupported(format!("a body needing more than {} vector registers", self.width.registers())),
        }
    }

    /// A register holding `bits` in every lane, loaded before the loops.
    pub(super) fn constant(&mut self, bits: u32) -> Result<usize, KernelError> {
        if let Some(&r) = self.constants.get(&bits) {
            return Ok(r);
        }
        // Constants take the highest registers, loaded once; temporaries the lowest.
        let r = self.free.iter().copied().max().ok_or(KernelError::Unsupported {
            what: format!("a body needing more than {} vector registers", self.width.registers()),
        })?;
        self.free.retain(|&f| f != r);
        self.a.mov(r11d, bits)?;
        match self.width {
            VectorWidth::Zmm => self.a.vpbroadcastd(zmm(r), r11d)?,
            VectorWidth::Ymm => {
                self.a.vmovd(xmm(r), r11d)?;
                self.a.vpbroadcastd(ymm(r), xmm(r))?;
            }
        }
        self.constants.insert(bits, r);
        Ok(r)
    }

    /// A constant of the body: in a register while fewer than `budget` hold constants, else in
    /// the pool after the code (`pooled`), loaded where used.
    fn body_constant(&mut self, bits: u32) -> Result<(), KernelError> {
        if self.constants.contains_key(&bits) || self.pool.iter().any(|&(b, _)| b == bits) {
            return Ok(());
        }
        if self.constants.len() < self.budget {
            self.constant(bits)?;
        } else {
            let label = self.a.create_label();
            self.pool.push((bits, label));
        }
        Ok(())
    }

    /// A register holding the constant `bits` for the current vector, and whether it is a
    /// temporary (loaded from the pool: the caller frees it).
    pub(super) fn constant_value(&mut self, bits: u32) -> Result<(usize, bool), KernelError> {
        if let Some(&r) = self.constants.get(&bits) {
            return Ok((r, false));
        }
        let Some(&(_, label)) = self.pool.iter().find(|&&(b, _)| b == bits) else {
            return self.unsupported(format!("the constant {bits:#x}, neither in a register nor pooled"));
        };
        let dst = self.allocate()?;
        match self.width {
            VectorWidth::Zmm => self.a.vbroadcastss(zmm(dst), dword_ptr(label))?,
            VectorWidth::Ymm => self.a.vbroadcastss(ymm(dst), dword_ptr(label))?,
        }
        Ok((dst, true))
    }

    /// The pool's constants, after the kernel's code.
    pub(super) fn emit_pool(&mut self) -> Result<(), KernelError> {
        for (bits, mut label) in std::mem::take(&mut self.pool) {
            self.a.set_label(&mut label)?;
            self.a.dd(&[bits])?;
        }
        Ok(())
    }

    /// Loads every constant of the body before the loops (`body_constant`); shift amounts are
    /// immediates.
    pub(super) fn load_constants(&mut self, e: &Expr) -> Result<(), KernelError> {
        match e.kind() {
            ExprKind::Int(v) if e.dtype() == DType::I32 => self.body_constant(*v as i32 as u32)?,
            ExprKind::Float(v) if e.dtype() == DType::F32 => self.body_constant((*v as f32).to_bits())?,
            ExprKind::Binary(BinOp::Shl | BinOp::Shr, x, y) if shift_amount(y).is_some() => self.load_constants(x)?,
            ExprKind::Binary(_, x, y) | ExprKind::Cmp(_, x, y) => {
                self.load_constants(x)?;
                self.load_constants(y)?;
            }
            ExprKind::Cast(x) if e.dtype() == DType::I32 && x.dtype() == DType::F32 => {
                // The conversion's saturation bound (`nodes::Gen::truncate`).
                self.body_constant(TWO_POW_31)?;
                self.load_constants(x)?;
            }
            ExprKind::Cast(x) | ExprKind::SaturatingCast(x) | ExprKind::Round(x) | ExprKind::Reinterpret(x) => {
                self.load_constants(x)?
            }
            ExprKind::Select(c, t, f) | ExprKind::Fma(c, t, f) => {
                self.load_constants(c)?;
                self.load_constants(t)?;
                self.load_constants(f)?;
            }
            _ => {}
        }
        Ok(())
    }

    /// One use of `e` done: its register is free after the last.
    pub(super) fn release(&mut self, e: &Expr) {
        let key = node(e);
        if let Some((reg, left)) = self.live.get_mut(&key) {
            *left -= 1;
            if *left == 0 {
                let reg = *reg;
                self.live.remove(&key);
                self.free.push(reg);
            }
        }
    }

    /// The register holding `e` for the current vector (evaluated on first use).
    pub(super) fn value(&mut self, e: &Expr) -> Result<usize, KernelError> {
        if let Some(&(reg, _)) = self.live.get(&node(e)) {
            return Ok(reg);
        }
        if let Some(reg) = self.constant_register(e) {
            return Ok(reg);
        }
        let reg = self.evaluate(e)?;
        self.live.insert(node(e), (reg, self.uses[&node(e)]));
        Ok(reg)
    }

    pub(super) fn constant_register(&self, e: &Expr) -> Option<usize> {
        let bits = match e.kind() {
            ExprKind::Int(v) if e.dtype() == DType::I32 => *v as i32 as u32,
            ExprKind::Float(v) if e.dtype() == DType::F32 => (*v as f32).to_bits(),
            _ => return None,
        };
        self.constants.get(&bits).copied()
    }
}

/// The bits of `2^31` as f32: the first value past `i32`'s range.
pub(super) const TWO_POW_31: u32 = 0x4f00_0000;

/// The amount of a shift by the i32 constant `y`, taken modulo 32 (`ir::expr`).
pub(super) fn shift_amount(y: &Expr) -> Option<u32> {
    match y.kind() {
        ExprKind::Int(v) if y.dtype() == DType::I32 => Some(v.rem_euclid(32) as u32),
        _ => None,
    }
}

// Register numbers come from `Gen::allocate` and `Gen::constant`, below the width's register
// count, so these lookups cannot fail.
pub(super) fn zmm(r: usize) -> AsmRegisterZmm {
    get_zmm(Register::ZMM0 + r as u32).expect("allocated zmm register")
}

pub(super) fn ymm(r: usize) -> AsmRegisterYmm {
    get_ymm(Register::YMM0 + r as u32).expect("allocated ymm register")
}

pub(super) fn xmm(r: usize) -> AsmRegisterXmm {
    get_xmm(Register::XMM0 + r as u32).expect("allocated xmm register")
}
