//! Row-fold kernels (`IntrinKind::RowFold`): `m` rows, each folded into `lanes` partials, the
//! declaration's fold source compiled node by node as a map body (`nodes`), one vector
//! accumulator per `lanes`-wide slice of a row's partials — `lanes / 8` per row on ymm,
//! `lanes / 16` on zmm. Column chunk `c` of every row is folded into the accumulators in
//! increasing `c`, so each partial folds its columns in the declaration's order, and the rows
//! of a call are independent chains that fill the pipeline where one row's accumulators wait
//! on their own latency.
//!
//! Under the SysV signature `fn(in_0, …, in_last, out)` (at most six operands), `[m, n]`
//! inputs and the `[m, lanes]` output are at their row strides, `[m]` inputs (per row) at
//! theirs, their element broadcast. The fold is exact:
//! * `sum`: `vaddps acc, acc, v`, IEEE addition rounded to nearest even as the IR's `+` of
//!   `acc + v`;
//! * `max`: `vmaxps acc, v, acc`, which returns `v` where `v > acc` (ordered) and `acc`
//!   otherwise — NaN `v`, equal values and zeros of either sign — as the IR's `max(acc, v)`
//!   does for every `acc` that is not NaN (`interp::scalar`: a NaN operand yields the other,
//!   a tie the first). The fold starts from −∞ and no step makes a number NaN, so `acc`
//!   never is.
//!
//! Only resetting calls (`Call::reset`: the call covers the whole fold) have kernels; they
//! start from the fold's identity (+0 or −∞). A call that continues a fold from its output
//! (which might hold a NaN for `max`), any other reducer, dtype or layout is
//! `KernelError::Unsupported`, and the call runs its loop nest.

use iced_x86::code_asm::*;
use ir::expr::{Expr, ExprKind};
use ir::intrin::{IntrinKind, TensorIntrin};
use ir::te::Reducer;

use super::registers::{ARGS, COLUMN, ymm, zmm};
use super::{Gen, MapShape};
use crate::error::KernelError;
use crate::isa::VectorWidth;
use crate::kernels::imm32;

/// Assembles the kernel of `decl` (an `IntrinKind::RowFold` declaration) at `width`, starting
/// from the fold's identity where `reset`.
pub fn assemble_row_fold(
    width: VectorWidth,
    decl: &TensorIntrin,
    shape: &MapShape,
    reset: bool,
) -> Result<Vec<u8>, KernelError> {
    let unsupported = |what: String| Err(KernelError::Unsupported { what });
    let IntrinKind::RowFold { m, n, lanes } = decl.kind else {
        return unsupported(format!("{} is not a RowFold declaration", decl.name));
    };
    let operands = decl.operand_tensors();
    if (m, n) != (shape.m, shape.n) || shape.row_strides.len() != operands.len() {
        return unsupported(format!("a shape for {m}x{n} with {} operands", operands.len()));
    }
    if operands.len() > ARGS.len() {
        return unsupported(format!("{} operands (at most {} are passed in registers)", operands.len(), ARGS.len()));
    }
    let width_lanes = width.lanes() as i64;
    if lanes % width_lanes != 0 || n % lanes != 0 {
        return unsupported(format!("{lanes} partials of {n} columns in vectors of {width_lanes}"));
    }
    let Some(ExprKind::Reduce(fold)) = decl.output.body().map(|b| b.kind()) else {
        return unsupported(format!("{}, whose body is no fold", decl.name));
    };
    if !reset {
        return unsupported(format!("{}: a call continuing its fold from the output", decl.name));
    }
    let max = match fold.reducer {
        Reducer::Sum => false,
        Reducer::Max => true,
        _ => return unsupported(format!("a {} fold", fold.reducer.name())),
    };
    // A body whose constants leave too few registers for its values and the accumulators
    // keeps fewer of them in registers, the rest loaded from the pool where used.
    let registers = width.registers();
    let mut result = unsupported("no register budget".into());
    for budget in [usize::MAX, registers / 2, registers / 4, 0] {
        let mut g = Gen::new(width, decl, false)?;
        g.budget = budget;
        g.uses.clear();
        g.count_uses(&fold.source);
        result = g.fold(shape, &fold.source, max).and_then(|()| Ok(crate::kernels::encode::encode(&mut g.a)?));
        if result.is_ok() {
            break;
        }
    }
    result
}

impl Gen<'_> {
    /// The kernel's code: accumulators set, the chunk loop over every row, the stores.
    fn fold(&mut self, shape: &MapShape, source: &Expr, max: bool) -> Result<(), KernelError> {
        self.load_constants(source)?;
        let IntrinKind::RowFold { lanes, .. } = self.decl.kind else { unreachable!("assemble_row_fold checked") };
        let width_lanes = self.width.lanes() as i64;
        let per_row = (lanes / width_lanes) as usize;
        let out = self.decl.inputs.len();
        let bytes = |arg: usize, rows: i64| imm32("a row", rows * shape.row_strides[arg] * 4);
        let mut accumulators = Vec::with_capacity(shape.m as usize * per_row);
        for _ in 0..shape.m as usize * per_row {
            let acc = self.allocate()?;
            match max {
                false => self.zero(acc)?,
                true => self.broadcast(acc, f32::NEG_INFINITY.to_bits())?,
            }
            accumulators.push(acc);
        }
        self.a.xor(eax, eax)?;
        let mut chunk_top = self.a.create_label();
        self.a.set_label(&mut chunk_top)?;
        for p in 0..shape.m {
            self.shift = (0..out).map(|arg| bytes(arg, p)).collect::<Result<_, _>>()?;
            for j in 0..per_row {
                self.offset = (j as i64 * width_lanes) as i32;
                self.live.clear();
                let acc = accumulators[p as usize * per_row + j];
                let v = self.value(source)?;
                match (self.width, max) {
                    (VectorWidth::Zmm, false) => self.a.vaddps(zmm(acc), zmm(acc), zmm(v))?,
                    (VectorWidth::Zmm, true) => self.a.vmaxps(zmm(acc), zmm(v), zmm(acc))?,
                    (VectorWidth::Ymm, false) => self.a.vaddps(ymm(acc), ymm(acc), ymm(v))?,
                    (VectorWidth::Ymm, true) => self.a.vmaxps(ymm(acc), ymm(v), ymm(acc))?,
                }
                self.release(source);
            }
        }
        self.shift.clear();
        self.offset = 0;
        self.a.add(COLUMN, imm32("lanes", lanes)?)?;
        self.a.cmp(COLUMN, imm32("n", shape.n)?)?;
        self.a.jb(chunk_top)?;
        for p in 0..shape.m {
            for j in 0..per_row {
                let acc = accumulators[p as usize * per_row + j];
                let at = ARGS[out] + bytes(out, p)? + (j as i32) * (width_lanes as i32) * 4;
                match self.width {
                    VectorWidth::Zmm => self.a.vmovups(zmmword_ptr(at), zmm(acc))?,
                    VectorWidth::Ymm => self.a.vmovups(ymmword_ptr(at), ymm(acc))?,
                }
            }
        }
        self.a.vzeroupper()?;
        self.a.ret()?;
        self.emit_pool()
    }

    fn zero(&mut self, r: usize) -> Result<(), KernelError> {
        match self.width {
            VectorWidth::Zmm => self.a.vpxord(zmm(r), zmm(r), zmm(r))?,
            VectorWidth::Ymm => self.a.vpxor(ymm(r), ymm(r), ymm(r))?,
        }
        Ok(())
    }

    fn broadcast(&mut self, r: usize, bits: u32) -> Result<(), KernelError> {
        self.a.mov(r11d, bits)?;
        match self.width {
            VectorWidth::Zmm => self.a.vpbroadcastd(zmm(r), r11d)?,
            VectorWidth::Ymm => {
                self.a.vmovd(super::registers::xmm(r), r11d)?;
                self.a.vpbroadcastd(ymm(r), super::registers::xmm(r))?;
            }
        }
        Ok(())
    }
}
