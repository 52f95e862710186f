//! The registers of a map kernel: the general ones the calling convention and the loops use, and
//! the vector ones the generator allocates: constants loaded once before the loops (the highest
//! registers), and per vector the live value of each node of the body until its last use.

use iced_x86::Register;
use iced_x86::code_asm::registers::{xmm::get_xmm, ymm::get_ymm, zmm::get_zmm};
use iced_x86::code_asm::*;
use ir::DType;
use ir::expr::{Expr, ExprKind};

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
            ExprKind::Cast(x) | ExprKind::SaturatingCast(x) | ExprKind::Round(x) => self.count_uses(x),
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

    /// Loads every constant of the body (and of the narrowing store) before the loops.
    pub(super) fn load_constants(&mut self, e: &Expr) -> Result<(), KernelError> {
        match e.kind() {
            ExprKind::Int(v) if e.dtype() == DType::I32 => {
                self.constant(*v as i32 as u32)?;
            }
            ExprKind::Float(v) if e.dtype() == DType::F32 => {
                self.constant((*v as f32).to_bits())?;
            }
            ExprKind::Binary(_, x, y) | ExprKind::Cmp(_, x, y) => {
                self.load_constants(x)?;
                self.load_constants(y)?;
            }
            ExprKind::Cast(x) | ExprKind::SaturatingCast(x) | ExprKind::Round(x) => self.load_constants(x)?,
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

    fn constant_register(&self, e: &Expr) -> Option<usize> {
        let bits = match e.kind() {
            ExprKind::Int(v) if e.dtype() == DType::I32 => *v as i32 as u32,
            ExprKind::Float(v) if e.dtype() == DType::F32 => (*v as f32).to_bits(),
            _ => return None,
        };
        self.constants.get(&bits).copied()
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
