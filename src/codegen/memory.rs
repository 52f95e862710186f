//! Loads and stores: contiguous vectors as 128-bit memory operations, other vector indices
//! as per-lane gathers and scatters, and promoted buffers as SSA variables.

use cranelift_codegen::ir::{InstBuilder, MemFlagsData, Value};
use cranelift_frontend::Variable;
use cranelift_module::Module;
use ir::{Buffer, DType, Expr, ExprKind};

use super::analysis::constant_access;
use super::func::{BufLoc, FnTx};
use super::types::{Val, is_pieces, lane_type, lanes_per_piece, piece_type};
use crate::error::CompileError;

impl<M: Module> FnTx<'_, '_, '_, M> {
    fn single_index<'e>(&self, buffer: &Buffer, indices: &'e [Expr]) -> Result<&'e Expr, CompileError> {
        match indices {
            [index] if index.dtype().scalar == DType::INDEX.scalar => Ok(index),
            _ => Err(self.unsupported(format!(
                "access to {} with {} indices (expected one flat i64 index)",
                buffer.name(),
                indices.len()
            ))),
        }
    }

    fn location(&self, buffer: &Buffer) -> Result<BufLoc, CompileError> {
        self.buffers
            .get(&buffer.id())
            .cloned()
            .ok_or_else(|| self.unsupported(format!("buffer {} is not in scope", buffer.name())))
    }

    /// `base + index * bytes`.
    pub(super) fn address(&mut self, base: Value, index: Value, bytes: usize) -> Value {
        let offset = match bytes {
            1 => index,
            _ => self.b.ins().ishl_imm_u(index, bytes.trailing_zeros() as i64),
        };
        self.b.ins().iadd(base, offset)
    }

    /// Index lanes of a vector index, computed directly for a ramp.
    fn index_lanes(&mut self, index: &Expr) -> Result<Vec<Value>, CompileError> {
        let lanes = index.dtype().lanes;
        if let ExprKind::Ramp(base, stride) = index.kind() {
            let base = self.expr(base)?.as_scalar();
            if let Some(c) = stride.as_int() {
                return Ok((0..lanes as i64).map(|j| self.b.ins().iadd_imm_s(base, j * c)).collect());
            }
            let stride = self.expr(stride)?.as_scalar();
            return Ok((0..lanes as i64)
                .map(|j| {
                    let step = self.b.ins().imul_imm_s(stride, j);
                    self.b.ins().iadd(base, step)
                })
                .collect());
        }
        let v = self.expr(index)?;
        Ok(self.lanes(&v, index.dtype()))
    }

    pub fn load(&mut self, dtype: DType, buffer: &Buffer, indices: &[Expr]) -> Result<Val, CompileError> {
        let index = self.single_index(buffer, indices)?;
        let base = match self.location(buffer)? {
            BufLoc::Memory(base) => base,
            BufLoc::Promoted { pieces, vars } => return Ok(self.load_promoted(dtype, index, pieces, &vars)),
        };
        let scalar = dtype.scalar;
        let bytes = scalar.bytes();
        // Every access is clamped in bounds (`guard_accesses`), so loads cannot trap; loads from
        // buffers nothing stores to are also pure and may be hoisted.
        let mut flags = MemFlagsData::new().with_notrap();
        if self.cx.readonly.contains(&buffer.id()) {
            flags = flags.with_readonly().with_can_move();
        }
        let ty = lane_type(scalar);
        if dtype.is_scalar() {
            let i = self.expr(index)?.as_scalar();
            let addr = self.address(base, i, bytes);
            return Ok(Val::scalar(self.b.ins().load(ty, flags, addr, 0)));
        }
        match index.kind() {
            ExprKind::Ramp(start, stride) if stride.as_int() == Some(1) => {
                let start = self.expr(start)?.as_scalar();
                let addr = self.address(base, start, bytes);
                if is_pieces(dtype) {
                    let count = (dtype.lanes / lanes_per_piece(scalar)) as i32;
                    let pty = piece_type(scalar);
                    let pieces = (0..count)
                        .map(|k| {
                            let p = self.b.ins().load(pty, flags, addr, k * 16);
                            // Bool bytes are 0 or 1; bool pieces are lane masks.
                            if scalar.is_bool() { self.b.ins().ineg(p) } else { p }
                        })
                        .collect();
                    Ok(Val::Pieces(pieces))
                } else {
                    let lanes =
                        (0..dtype.lanes as i32).map(|j| self.b.ins().load(ty, flags, addr, j * bytes as i32)).collect();
                    Ok(Val::Lanes(lanes))
                }
            }
            ExprKind::Broadcast(i) => {
                let i = self.expr(i)?.as_scalar();
                let addr = self.address(base, i, bytes);
                let x = self.b.ins().load(ty, flags, addr, 0);
                Ok(self.broadcast(dtype, x))
            }
            _ => {
                let lanes = self
                    .index_lanes(index)?
                    .into_iter()
                    .map(|i| {
                        let addr = self.address(base, i, bytes);
                        self.b.ins().load(ty, flags, addr, 0)
                    })
                    .collect::<Vec<_>>();
                Ok(self.pack_lanes(dtype, &lanes))
            }
        }
    }

    pub fn store(&mut self, buffer: &Buffer, indices: &[Expr], value: &Expr) -> Result<(), CompileError> {
        let index = self.single_index(buffer, indices)?;
        let dtype = value.dtype();
        if dtype.scalar != buffer.dtype().scalar || index.dtype().lanes != dtype.lanes {
            return Err(self.unsupported(format!(
                "store of {dtype} to {} of {} at an index of {} lanes",
                buffer.name(),
                buffer.dtype(),
                index.dtype().lanes
            )));
        }
        let v = self.expr(value)?;
        let v = self.natural(v, dtype);
        let base = match self.location(buffer)? {
            BufLoc::Memory(base) => base,
            BufLoc::Promoted { pieces, vars } => {
                self.store_promoted(dtype, index, pieces, &vars, v);
                return Ok(());
            }
        };
        let bytes = buffer.dtype().bytes();
        let flags = MemFlagsData::new().with_notrap();
        if dtype.is_scalar() {
            let i = self.expr(index)?.as_scalar();
            let addr = self.address(base, i, bytes);
            self.b.ins().store(flags, v.as_scalar(), addr, 0);
            return Ok(());
        }
        if let ExprKind::Ramp(start, stride) = index.kind()
            && stride.as_int() == Some(1)
        {
            let start = self.expr(start)?.as_scalar();
            let addr = self.address(base, start, bytes);
            let (parts, step) = match &v {
                Val::Pieces(p) => (p.clone(), 16),
                Val::Lanes(l) => (l.clone(), bytes as i32),
            };
            for (k, p) in parts.into_iter().enumerate() {
                let p = if dtype.is_bool() && step == 16 { self.b.ins().ineg(p) } else { p };
                self.b.ins().store(flags, p, addr, k as i32 * step);
            }
            return Ok(());
        }
        // Scatter, lanes in increasing order (a later lane wins on equal indices).
        let addrs = self.index_lanes(index)?;
        let lanes = self.lanes(&v, dtype);
        for (i, x) in addrs.into_iter().zip(lanes) {
            let addr = self.address(base, i, bytes);
            self.b.ins().store(flags, x, addr, 0);
        }
        Ok(())
    }

    fn load_promoted(&mut self, dtype: DType, index: &Expr, pieces: bool, vars: &[Variable]) -> Val {
        let (start, lanes) = constant_access(index).expect("promoted buffers have constant indices");
        let start = start as usize;
        if pieces {
            let n = lanes_per_piece(dtype.scalar) as usize;
            let first = start / n;
            let values = (first..first + lanes as usize / n).map(|k| self.b.use_var(vars[k])).collect();
            Val::Pieces(values)
        } else {
            let values: Vec<Value> = (start..start + lanes as usize).map(|k| self.b.use_var(vars[k])).collect();
            self.pack_lanes(dtype, &values)
        }
    }

    fn store_promoted(&mut self, dtype: DType, index: &Expr, pieces: bool, vars: &[Variable], v: Val) {
        let (start, _) = constant_access(index).expect("promoted buffers have constant indices");
        let start = start as usize;
        if pieces {
            let first = start / lanes_per_piece(dtype.scalar) as usize;
            for (k, p) in v.parts().iter().enumerate() {
                self.b.def_var(vars[first + k], *p);
            }
        } else {
            for (k, x) in self.lanes(&v, dtype).into_iter().enumerate() {
                self.b.def_var(vars[start + k], x);
            }
        }
    }
}
