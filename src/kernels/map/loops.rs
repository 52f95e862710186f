//! The loop nest of a map kernel: rows, then per row the groups of a narrowing store, the full
//! vectors and the masked partial one; and one vector's evaluation and store.

use iced_x86::code_asm::*;
use iced_x86::{Instruction, OpKind, Register};
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
        // Whole vectors: two at a time where the body fits (`vector_pair`), then the odd one.
        self.masked = false;
        let pairs = (full - groups) / (2 * lanes);
        let pair = if pairs > 0 { self.vector_pair(&body)? } else { None };
        let mut single_from = groups;
        if let Some(pair) = pair {
            let mut pair_top = self.a.create_label();
            self.a.set_label(&mut pair_top)?;
            for instruction in pair {
                self.a.add_instruction(instruction)?;
            }
            single_from = groups + pairs * 2 * lanes;
            self.a.add(COLUMN, 2 * lanes as i32)?;
            self.a.cmp(COLUMN, imm32("n", single_from)?)?;
            self.a.jb(pair_top)?;
        }
        if full > single_from {
            let mut column_top = self.a.create_label();
            self.a.set_label(&mut column_top)?;
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

    /// The instructions of two whole vectors of outputs, at `COLUMN` and one vector past it,
    /// interleaved one for one: each vector's chain of dependent instructions (a polynomial's
    /// Horner steps) issues between the other's, so the core's schedulers hold independent
    /// work rather than a chain waiting on its own latency. Each vector is evaluated as
    /// `vector` evaluates it, in its own half of the free registers (interleaved, they must not
    /// share one); `None`, with nothing emitted, where the body does not fit half of them.
    fn vector_pair(&mut self, body: &Expr) -> Result<Option<Vec<Instruction>>, KernelError> {
        let free = self.free.clone();
        let halves: [Vec<usize>; 2] =
            [free.iter().copied().step_by(2).collect(), free.iter().copied().skip(1).step_by(2).collect()];
        let main = std::mem::replace(&mut self.a, CodeAssembler::new(64)?);
        let mut streams = Vec::with_capacity(2);
        let mut result = Ok(());
        for (k, half) in halves.into_iter().enumerate() {
            self.free = half;
            self.offset = (k * self.width.lanes()) as i32;
            result = self.vector(body);
            if result.is_err() {
                break;
            }
            streams.push(self.a.take_instructions());
        }
        self.a = main;
        self.free = free;
        self.offset = 0;
        // A label set inside the body (its own branches) belongs to the other assembler; the
        // general register and the opmasks other than k3 a body may use are not renamed.
        let pairable = streams.iter().flatten().all(|i| i.ip() == 0 && !uses_fixed_registers(i));
        match result {
            Ok(()) if !pairable => Ok(None),
            Ok(()) => {
                let [first, mut second]: [Vec<Instruction>; 2] = streams.try_into().expect("two vectors");
                // The second vector's comparisons in their own opmask.
                for i in &mut second {
                    rename_mask(i, Register::K3, Register::K5);
                }
                let mut pair = Vec::with_capacity(first.len() + second.len());
                let (mut x, mut y) = (first.into_iter(), second.into_iter());
                loop {
                    match (x.next(), y.next()) {
                        (None, None) => break,
                        (a, b) => pair.extend(a.into_iter().chain(b)),
                    }
                }
                Ok(Some(pair))
            }
            Err(KernelError::Unsupported { .. }) => Ok(None),
            Err(e) => Err(e),
        }
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

/// Whether `i` reads or writes r11 or an opmask other than k3 (a vector's temporaries that
/// `Gen::vector_pair` does not rename).
fn uses_fixed_registers(i: &Instruction) -> bool {
    let fixed = |r: Register| r.full_register() == Register::R11 || (r.is_k() && r != Register::K3);
    let operands = (0..i.op_count()).any(|k| i.op_kind(k) == OpKind::Register && fixed(i.op_register(k)));
    operands || fixed(i.memory_base()) || fixed(i.memory_index()) || fixed(i.op_mask())
}

/// `i` with opmask `from` replaced by `to`, as an operand and as its write mask.
fn rename_mask(i: &mut Instruction, from: Register, to: Register) {
    for k in 0..i.op_count() {
        if i.op_kind(k) == OpKind::Register && i.op_register(k) == from {
            i.set_op_register(k, to);
        }
    }
    if i.op_mask() == from {
        i.set_op_mask(to);
    }
}
