//! Loop nests that fill or copy one contiguous range of memory become one `memset` or `memmove`
//! call (libc's, through Cranelift's libcalls): a convolution's padded source is written by
//! such nests (rows of zeros around the source's rows). The call replaces the unrolled vector
//! stores Cranelift would otherwise compile (fewer instructions to compile), and a function
//! whose every loop then makes a call takes the single-pass register allocator (`regalloc`).
//! Only in the entry function (`FnTx::memory_idioms`): at one thread a layer's entry function
//! writes its padded source itself; a parallel body's fills are a row each and its loops stay.
//!
//! A nest qualifies when it is perfect (each loop's body the next loop, the innermost body one
//! `Store`), every loop is serial with a positive extent, and the store writes `L` consecutive
//! elements (`ramp(base, 1, L)`, or one element) whose start moves by `L` with the innermost
//! variable and by the whole extent of the loops inside with each outer one, so that the nest
//! writes one contiguous range in order. The stored value is either a constant whose bytes are
//! all equal (any constant of a one-byte type, zero of any type) or a load of the same shape
//! from another buffer, whose start moves the same way. Anything else is translated as loops.

use rustc_hash::FxHashMap as HashMap;

use cranelift_codegen::ir::{Value, types};
use cranelift_module::Module;
use ir::analysis::linear::Linear;
use ir::mutator::substitute_map;
use ir::{Buffer, Expr, ExprKind, ForKind, Stmt, StmtKind, Var};

use super::func::{BufLoc, FnTx};
use crate::error::CompileError;

/// What a qualifying nest writes.
pub(crate) struct Idiom {
    dst: Buffer,
    /// The first element written: the store's start with every loop variable at 0.
    dst_start: Expr,
    /// Elements written (the extents' product times the lanes).
    elements: i64,
    value: Source,
}

enum Source {
    /// Every byte of the range is this byte.
    Fill(u8),
    /// The same range of `src` from `start` on.
    Copy { src: Buffer, start: Expr },
}

/// The idiom `nest` implements, if it qualifies (module doc).
pub(crate) fn recognize(nest: &Stmt) -> Option<Idiom> {
    let mut loops: Vec<(&Var, i64)> = Vec::new();
    let mut stmt = nest;
    while let StmtKind::For { var, extent, kind: ForKind::Serial, body } = stmt.kind() {
        if *extent <= 0 {
            return None;
        }
        loops.push((var, *extent));
        stmt = body;
    }
    let StmtKind::Store { buffer, indices, value } = stmt.kind() else { return None };
    let [index] = indices.as_slice() else { return None };
    if loops.is_empty() || buffer.dtype().is_bool() || value.dtype().scalar != buffer.dtype().scalar {
        return None;
    }
    let lanes = index.dtype().lanes as i64;
    let start = |index: &Expr| -> Option<Expr> {
        match index.kind() {
            ExprKind::Ramp(start, stride) if stride.as_int() == Some(1) => Some(start.clone()),
            _ if index.dtype().is_scalar() => Some(index.clone()),
            _ => None,
        }
    };
    let (dst_start, elements) = contiguous(&start(index)?, &loops, lanes)?;
    let source = match value.kind() {
        ExprKind::Load(src, src_indices) if src.id() != buffer.id() && src.dtype() == buffer.dtype() => {
            let [src_index] = src_indices.as_slice() else { return None };
            if src_index.dtype().lanes as i64 != lanes {
                return None;
            }
            Source::Copy { src: src.clone(), start: contiguous(&start(src_index)?, &loops, lanes)?.0 }
        }
        _ => Source::Fill(fill_byte(value, buffer.dtype().scalar.bytes())?),
    };
    Some(Idiom { dst: buffer.clone(), dst_start, elements, value: source })
}

/// `start` with every loop variable at 0 and the elements the nest writes, if `start` moves by
/// `lanes` with the innermost loop's variable and by the elements of all the loops inside with
/// each outer one (`loops` outermost first), and no other term of it involves a loop variable.
fn contiguous(start: &Expr, loops: &[(&Var, i64)], lanes: i64) -> Option<(Expr, i64)> {
    let linear = Linear::of(start);
    let mut step = lanes;
    for &(var, extent) in loops.iter().rev() {
        let coefficient: i64 = linear
            .terms
            .iter()
            .filter(|(term, _)| matches!(term.kind(), ExprKind::Var(v) if v == var))
            .map(|(_, c)| *c)
            .sum();
        if coefficient != step {
            return None;
        }
        step = step.checked_mul(extent)?;
    }
    let in_nest = |e: &Expr| loops.iter().any(|(var, _)| e.uses_var(var));
    if linear.terms.iter().any(|(term, _)| !matches!(term.kind(), ExprKind::Var(_)) && in_nest(term)) {
        return None;
    }
    let zeros: HashMap<Var, Expr> = loops.iter().map(|&(var, _)| (var.clone(), Expr::index(0))).collect();
    Some((substitute_map(start, &zeros), step))
}

/// The byte every byte of `value` (broadcast or not) holds, where all its bytes are equal: any
/// integer constant of a one-byte type, or zero of any type.
fn fill_byte(value: &Expr, bytes: usize) -> Option<u8> {
    let constant = match value.kind() {
        ExprKind::Broadcast(v) => v,
        _ => value,
    };
    match constant.kind() {
        ExprKind::Int(v) if bytes == 1 => Some(*v as u8),
        ExprKind::Int(0) => Some(0),
        ExprKind::Float(f) if f.to_bits() == 0 => Some(0),
        _ => None,
    }
}

/// What `emit_idiom` writes: from a source in memory (its base address, its start) or a byte.
enum Written<'a> {
    From(Value, &'a Expr),
    Byte(u8),
}

impl<M: Module> FnTx<'_, '_, '_, M> {
    /// Emits `idiom` as one libc call; false (nothing emitted) where a buffer it names lives in
    /// SSA variables rather than memory.
    pub(crate) fn emit_idiom(&mut self, idiom: &Idiom) -> Result<bool, CompileError> {
        let in_memory = |tx: &Self, buffer: &Buffer| match tx.buffers.get(&buffer.id()) {
            Some(BufLoc::Memory(base)) => Some(*base),
            _ => None,
        };
        let Some(dst_base) = in_memory(self, &idiom.dst) else { return Ok(false) };
        // The source's base address, checked before anything is emitted.
        let from = match &idiom.value {
            Source::Copy { src, start } => match in_memory(self, src) {
                Some(base) => Written::From(base, start),
                None => return Ok(false),
            },
            Source::Fill(byte) => Written::Byte(*byte),
        };
        let bytes = idiom.dst.dtype().scalar.bytes();
        let config = self.cx.module.target_config();
        let start = self.expr(&idiom.dst_start)?.as_scalar();
        let dst = self.address(dst_base, start, bytes);
        let size = self.iconst(types::I64, idiom.elements * bytes as i64);
        match from {
            Written::From(src_base, src_start) => {
                let start = self.expr(src_start)?.as_scalar();
                let src = self.address(src_base, start, bytes);
                // `memmove`: two parameters could be views of one tensor.
                self.b.call_memmove(config, dst, src, size);
            }
            Written::Byte(byte) => {
                let byte = self.iconst(types::I8, i64::from(byte));
                self.b.call_memset(config, dst, byte, size);
            }
        }
        Ok(true)
    }
}
