//! The loop nest of a map kernel: rows, then per row the groups of a narrowing store, the full
//! vectors and the masked partial one; and one vector's evaluation and store.

use iced_x86::code_asm::*;
use ir::DType;
use ir::expr::Expr;

use super::narrowing::{Clamp, GROUP, narrowing_store};
use super::nodes::lane_of;
use super::registers::{ARGS, COLUMN, ROW_COUNT, xmm, ymm, zmm};
use super::scaled_rounding::ScaledRounding;
use super::{Gen, MapShape};
use crate::error::KernelError;
use crate::isa::VectorWidth;
use crate::kernels::imm32;

impl<'d> Gen<'d> {
    /// Loads every constant the body and its store use, once.
    pub(super) fn prepare(&mut self, body: &Expr) -> Result<(), KernelError> {
        let out = self.decl.output.dtype();
        // The store's constants first: they stay in registers whatever the body's budget.
        if let Some(x) = narrowing_store(body, out) {
            let (lo, hi) = if out == DType::U8 { (0.0f32, 255.0f32) } else { (-128.0, 127.0) };
            self.constant(lo.to_bits())?;
            self.constant(hi.to_bits())?;
            self.constant(0.0f32.to_bits())?;
            if let Some(r) = ScaledRounding::of(x) {
                for c in r.constants() {
                    self.constant(c.to_bits())?;
                }
            }
        }
        self.load_constants(body)
    }

    pub(super) fn kernel(&mut self, shape: &MapShape) -> Result<(), KernelError> {
        let body = self.decl.output.body().expect("a Map declaration is a compute").clone();
        self.prepare(&body)?;
        let out = self.decl.output.dtype();
        let lanes = self.width.lanes() as i64;
        let (full, tail) = (shape.n / lanes * lanes, shape.n % lanes);
        let narrowed = narrowing_store(&body, out);
        let groups = match narrowed {
            Some(_) if self.grouped => shape.n / (GROUP * lanes) * (GROUP * lanes),
            _ => 0,
        };
        let permutation = if groups > 0 { Some(self.permutation()?) } else { None };
        let zmm_tail = tail > 0 && self.width == VectorWidth::Zmm;
        if zmm_tail {
            self.a.mov(r11d, (1u32 << tail) - 1)?;
            self.a.kmovw(k2, r11d)?;
            // The lanes past the block, which a check over every lane must ignore.
            self.a.knotw(k4, k2)?;
        }
        let mut row_top = self.a.create_label();
        if shape.m > 1 {
            self.a.mov(ROW_COUNT, shape.m)?;
        }
        self.a.set_label(&mut row_top)?;
        self.a.xor(eax, eax)?;
        if let (Some(x), Some(permutation)) = (narrowed, permutation) {
            let mut group_top = self.a.create_label();
            self.a.set_label(&mut group_top)?;
            self.masked = false;
            self.group(x, permutation)?;
            self.a.add(COLUMN, (GROUP * lanes) as i32)?;
            self.a.cmp(COLUMN, imm32("n", groups)?)?;
            self.a.jb(group_top)?;
        }
        if full > groups {
            let mut column_top = self.a.create_label();
            self.a.set_label(&mut column_top)?;
            self.masked = false;
            self.vector(&body)?;
            self.a.add(COLUMN, lanes as i32)?;
            self.a.cmp(COLUMN, imm32("n", full)?)?;
            self.a.jb(column_top)?;
        }
        if zmm_tail {
            self.masked = true;
            self.vector(&body)?;
        } else if tail > 0 {
            // ymm: the row's last whole vector, overlapping the previous one. An element-wise
            // map writes an output no input aliases, so the overlap stores the same values again.
            let last = imm32("n", shape.n - lanes)?;
            self.a.mov(COLUMN, i64::from(last))?;
            self.masked = false;
            self.vector(&body)?;
        }
        if shape.m > 1 {
            for (arg, tensor) in self.decl.operand_tensors().into_iter().enumerate() {
                let step = shape.row_strides[arg] * tensor.dtype().bytes() as i64;
                if step != 0 {
                    let step = imm32("a row", step)?;
                    self.a.add(ARGS[arg], step)?;
                }
            }
            self.a.dec(ROW_COUNT)?;
            self.a.jnz(row_top)?;
        }
        self.a.vzeroupper()?;
        self.a.ret()?;
        self.emit_pool()
    }

    /// One vector of outputs at column `COLUMN` of the current row.
    pub(super) fn vector(&mut self, body: &Expr) -> Result<(), KernelError> {
        self.live.clear();
        let out = self.decl.output.dtype();
        let arg = self.decl.inputs.len();
        if let Some(x) = narrowing_store(body, out) {
            let clamped = self.converted(x, Clamp::for_vector(out, self.width))?;
            match self.width {
                VectorWidth::Zmm => {
                    let mem = xmmword_ptr(self.at(arg, 1)?);
                    let mem = if self.masked { mem.k2() } else { mem };
                    if out == DType::U8 {
                        self.a.vpmovusdb(mem, zmm(clamped))?;
                    } else {
                        self.a.vpmovsdb(mem, zmm(clamped))?;
                    }
                }
                VectorWidth::Ymm => {
                    let high = self.allocate()?;
                    self.a.vextracti128(xmm(high), ymm(clamped), 1)?;
                    self.a.vpackssdw(xmm(clamped), xmm(clamped), xmm(high))?;
                    if out == DType::U8 {
                        self.a.vpackuswb(xmm(clamped), xmm(clamped), xmm(clamped))?;
                    } else {
                        self.a.vpacksswb(xmm(clamped), xmm(clamped), xmm(clamped))?;
                    }
                    let mem = self.at(arg, 1)?;
                    self.a.vmovq(qword_ptr(mem), xmm(clamped))?;
                    self.free.push(high);
                }
            }
            self.free.push(clamped);
            return Ok(());
        }
        if lane_of(out).is_none() || body.dtype() != out {
            return self.unsupported(format!("a store of {} as {out}", body.dtype()));
        }
        let v = self.value(body)?;
        let mem = self.at(arg, 4)?;
        match (self.width, self.masked) {
            (VectorWidth::Zmm, false) => self.a.vmovdqu32(zmmword_ptr(mem), zmm(v))?,
            (VectorWidth::Zmm, true) => self.a.vmovdqu32(zmmword_ptr(mem).k2(), zmm(v))?,
            (VectorWidth::Ymm, _) => self.a.vmovdqu(ymmword_ptr(mem), ymm(v))?,
        }
        self.release(body);
        Ok(())
    }
}
