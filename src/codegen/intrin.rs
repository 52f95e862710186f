//! Tensor-intrinsic calls (`StmtKind::Call`): a hand-assembled kernel when one implements the
//! declaration exactly at this ISA level, for these strides, dtypes and value ranges; the
//! call's loop-nest fallback otherwise (always correct, since `tensorize` proved it equal).
//!
//! Kernels are defined once per module and shape with `define_function_bytes`, so the same
//! bytes serve the JIT and object export, and are called with the operands' origin addresses:
//! `fn(a, b, c)` for a GEMM, one pointer per operand for a `Map` (whose kernel is compiled
//! from the declaration's body, `kernels::map`) or a resetting `RowFold` (`kernels::map::fold`).
//! A resetting call (`Call::reset`) selects a GEMM kernel that starts from zero. A call with a segment range (`Call::range`) selects the
//! kernel that loops over a run-time count of segments (`assemble_gemm_ranged`; the zmm VNNI
//! one where the level would pick AMX tiles), with `A` and `B` moved to the range's first
//! segment: `fn(a, b, c, count)`, or the count after the addresses of a `GemmMap` block. An
//! `F32Gemm` call runs the exact f32 kernel (`kernels::gemm_f32`) at the level's vector width,
//! from AVX2 up.

use cranelift_codegen::ir::{AbiParam, InstBuilder, Signature, StackSlotData, StackSlotKind, Value, types};
use cranelift_module::{FuncId, Linkage, Module};
use ir::intrin::segmented_gemm;
use ir::intrin::{IntrinKind, TensorIntrin, pair_sums_fit_i16};
use ir::stmt::{Operand, SegmentRange};
use ir::{Buffer, DType, Stmt};

use super::func::{BufLoc, FnTx, ModuleCtx, module_error};
use super::{DefinedFunction, KERNEL_ALIGN};
use crate::error::{CompileError, KernelError};
use crate::isa::{IsaLevel, KernelVariant, VectorWidth};
use crate::kernels::gemm::{Blocking, GemmShape, assemble_gemm, assemble_gemm_ranged};
use crate::kernels::gemm_f32::{F32Blocking, F32GemmShape, assemble_f32_gemm};
use crate::kernels::gemm_map::assemble_gemm_map;
use crate::kernels::map::{MapShape, assemble_map, assemble_row_fold};

/// A kernel as defined in the module: what makes two calls share it.
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub(crate) enum KernelKey {
    Gemm {
        variant: KernelVariant,
        shape: GemmShape,
        /// The segment count is an argument (`assemble_gemm_ranged`).
        ranged: bool,
    },
    F32Gemm {
        width: VectorWidth,
        shape: F32GemmShape,
    },
    /// `declaration` is the structural key of the `Map` part (`workload::intrin_key`);
    /// `row_strides` are the Map's operands'.
    GemmMap {
        shape: GemmShape,
        declaration: String,
        row_strides: Vec<i64>,
        ranged: bool,
    },
    /// `declaration` is the structural key of the `Map` declaration (`workload::intrin_key`).
    Map {
        width: VectorWidth,
        declaration: String,
        shape: MapShape,
    },
    /// As `Map`, for a `RowFold` declaration; `reset` starts from the fold's identity.
    RowFold {
        width: VectorWidth,
        declaration: String,
        shape: MapShape,
        reset: bool,
    },
}

/// A call's operands moved to the first segment of its range, and the segment count
/// (`FnTx::in_range`).
type InRange = (Vec<Operand>, Option<Value>);

/// What the operands' value ranges prove about an `Int8Gemm` call.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) struct Int8GemmFacts {
    /// A is i8 (else u8).
    pub a_signed: bool,
    /// No pair sum `a0·b0 + a1·b1` leaves i16: the `vpmaddubsw` triple is exact.
    pub never_saturates: bool,
    /// B never holds -128: sign transfer is exact.
    pub b_above_min: bool,
}

/// The kernel for `Int8Gemm`, best first, that computes the declaration exactly at `level`.
/// u8 A: AMX `tdpbusd` at level `amx` (`int8_gemm_kernel` falls back to zmm VNNI for the shapes
/// the tile kernel declines), VNNI where the level has it (exact for every input, so it also implements a saturating
/// declaration whose inputs cannot saturate); the `vpmaddubsw` triple for saturating
/// declarations, or for exact ones whose inputs provably never saturate; else exact i16
/// widening. i8 A (exact declarations only): sign transfer when B provably holds no -128, else
/// widening.
pub(crate) fn select_int8_gemm(level: IsaLevel, saturating: bool, facts: Int8GemmFacts) -> Option<KernelVariant> {
    let exact_vnni = match level {
        IsaLevel::Amx => Some(KernelVariant::AMX_INT8),
        IsaLevel::Avx512Vnni => Some(KernelVariant::AVX512_VNNI),
        IsaLevel::AvxVnni => Some(KernelVariant::AVX_VNNI),
        IsaLevel::Avx2 | IsaLevel::Scalar => None,
    };
    let triple = match level {
        IsaLevel::Avx512Vnni | IsaLevel::Amx => Some(KernelVariant::AVX512_MADDUBS),
        IsaLevel::AvxVnni | IsaLevel::Avx2 => Some(KernelVariant::AVX2_MADDUBS),
        IsaLevel::Scalar => None,
    };
    let avx2 = |variant| (level >= IsaLevel::Avx2).then_some(variant);
    if facts.a_signed {
        return match (saturating, facts.b_above_min) {
            (true, _) => None,
            (false, true) => avx2(KernelVariant::AVX2_SIGN),
            (false, false) => avx2(KernelVariant::AVX2_WIDEN),
        };
    }
    match (saturating, facts.never_saturates) {
        (false, _) if exact_vnni.is_some() => exact_vnni,
        (false, true) => triple,
        (false, false) => avx2(KernelVariant::AVX2_WIDEN),
        (true, true) => exact_vnni.or(triple),
        (true, false) => triple,
    }
}

/// Whether the AMX kernel beats zmm VNNI on `shape` by a cycle estimate: a `tdpbusd` issues
/// every 16 cycles whatever the rows and columns of its tiles (1 to 16 each) and k bytes (4 to
/// 64), and a call pays a fixed cost (the tile configuration, C's tiles moved once); two zmm
/// `vpdpbusd` per cycle do 128 multiply-adds at any shape. A few rows or columns, or a short
/// k, leave most of each tile multiply idle.
pub(crate) fn amx_pays_off(shape: &GemmShape) -> bool {
    const TDPBUSD_CYCLES: i64 = 16;
    const CALL_CYCLES: i64 = 150;
    const VNNI_MACS_PER_CYCLE: i64 = 128;
    let chunks = shape.segments * ((shape.k + 63) / 64);
    let tiles = (shape.m + 15) / 16 * ((shape.n + 15) / 16);
    let amx = CALL_CYCLES + TDPBUSD_CYCLES * tiles * chunks;
    let vnni = shape.m * shape.n * shape.k * shape.segments / VNNI_MACS_PER_CYCLE;
    amx < vnni
}

/// Every value a buffer may hold: its declared range, else its dtype's.
fn value_bounds(buffer: &Buffer) -> Option<(i64, i64)> {
    buffer.value_range().or_else(|| {
        let (lo, hi) = buffer.dtype().scalar.int_range()?;
        Some((i64::try_from(lo).ok()?, i64::try_from(hi).ok()?))
    })
}

/// The kernel shape of a GEMM call (`Int8Gemm`: `pack` 4, `Int16Gemm`: 2), if the operands
/// have the layout kernels assume: u8 or i8/i8/i32 buffers (`Int16Gemm`: i16/i16/i32), unit
/// stride along `k` in A, `[ldb, pack, 1]` in B, unit column stride in C, non-negative row (and
/// segment) strides.
fn gemm_shape(kind: IntrinKind, operands: &[Operand], reset: bool) -> Option<GemmShape> {
    let (m, n, k, segments, pack) = match kind {
        IntrinKind::Int8Gemm { m, n, k, segments, .. } => (m, n, k, segments, 4),
        IntrinKind::Int16Gemm { m, n, k, segments } => (m, n, k, segments, 2),
        IntrinKind::F32Gemm { .. }
        | IntrinKind::Map { .. }
        | IntrinKind::GemmMap { .. }
        | IntrinKind::RowFold { .. }
        | IntrinKind::Generic => {
            return None;
        }
    };
    let [a, b, c] = operands else { return None };
    let a_dtype = a.buffer.dtype();
    let b_dtype = if pack == 2 { DType::I16 } else { DType::I8 };
    let a_ok = if pack == 2 { a_dtype == DType::I16 } else { [DType::U8, DType::I8].contains(&a_dtype) };
    let dtypes = [(b, b_dtype), (c, DType::I32)];
    if !a_ok || a.origin.len() != 1 || dtypes.iter().any(|(o, d)| o.buffer.dtype() != *d || o.origin.len() != 1) {
        return None;
    }
    let (lda, lds) = match *a.strides.as_slice() {
        [lda, 1] if segments == 1 => (lda, 0),
        [lda, lds, 1] if segments > 1 => (lda, lds),
        _ => return None,
    };
    match (b.strides.as_slice(), c.strides.as_slice()) {
        (&[ldb, p, 1], &[ldc, 1]) if p == pack && lda >= 0 && lds >= 0 && ldb >= 0 && ldc >= 0 => {
            Some(GemmShape { m, n, k, segments, lda, lds, ldb, ldc, a_dtype, reset })
        }
        _ => None,
    }
}

/// The kernel shape of an `F32Gemm` call, if its operands have the layout the kernel assumes:
/// f32 buffers, one origin each, unit stride along each row, non-negative row strides.
fn f32_gemm_shape(kind: IntrinKind, operands: &[Operand], reset: bool) -> Option<F32GemmShape> {
    let IntrinKind::F32Gemm { m, n, k } = kind else { return None };
    let [a, b, c] = operands else { return None };
    let mut strides = [0; 3];
    for (operand, stride) in [a, b, c].into_iter().zip(&mut strides) {
        match *operand.strides.as_slice() {
            [row, 1] if row >= 0 && operand.buffer.dtype() == DType::F32 && operand.origin.len() == 1 => *stride = row,
            _ => return None,
        }
    }
    let [lda, ldb, ldc] = strides;
    Some(F32GemmShape { m, n, k, lda, ldb, ldc, reset })
}

/// Blocking for one call: the declaration's tile in one register block when it fits, else
/// the variant's default.
fn blocking_for(variant: KernelVariant, shape: &GemmShape) -> Blocking {
    let default = Blocking::default_for(variant);
    let lanes = variant.width.lanes();
    let vectors = ((shape.n.max(1) as usize).div_ceil(lanes)).clamp(1, default.vectors);
    let max_tile = default.rows * default.vectors;
    let mut rows = (max_tile / vectors).clamp(1, shape.m.max(1) as usize);
    while rows > 1 && Blocking::registers(variant, rows, vectors, false) > variant.width.registers() {
        rows -= 1;
    }
    // As many row blocks as needed, as evenly filled as possible.
    let blocks = (shape.m.max(1) as usize).div_ceil(rows);
    Blocking { rows: (shape.m.max(1) as usize).div_ceil(blocks), vectors, unroll: default.unroll }
}

impl<M: Module> FnTx<'_, '_, '_, M> {
    /// Translates a tensor-intrinsic call (see the module doc).
    pub fn call_intrin(
        &mut self,
        intrin: &TensorIntrin,
        operands: &[Operand],
        reset: bool,
        fallback: &Stmt,
        range: Option<&SegmentRange>,
    ) -> Result<(), CompileError> {
        match intrin.kind {
            IntrinKind::F32Gemm { .. } => return self.call_f32_gemm(intrin, operands, reset, fallback),
            IntrinKind::Map { .. } => return self.call_map(intrin, operands, fallback),
            IntrinKind::RowFold { .. } => return self.call_row_fold(intrin, operands, reset, fallback),
            IntrinKind::GemmMap { .. } => return self.call_gemm_map(intrin, operands, fallback, range),
            _ => {}
        }
        let Some(shape) = gemm_shape(intrin.kind, operands, reset) else {
            return self.stmt(fallback);
        };
        let selected = match intrin.kind {
            IntrinKind::Int8Gemm { saturating, .. } => {
                let (a_range, b_range) = (value_bounds(&operands[0].buffer), value_bounds(&operands[1].buffer));
                let facts = Int8GemmFacts {
                    a_signed: shape.a_dtype == DType::I8,
                    never_saturates: matches!((a_range, b_range), (Some(a), Some(b)) if pair_sums_fit_i16(a, b)),
                    b_above_min: b_range.is_some_and(|(lo, _)| lo > i64::from(i8::MIN)),
                };
                select_int8_gemm(self.cx.level, saturating, facts)
            }
            // `vpmaddwd` + `vpaddd` is the declaration for every input.
            _ => (self.cx.level >= IsaLevel::Avx2).then_some(KernelVariant::AVX2_MADD16),
        };
        let Some(mut variant) = selected else {
            return self.stmt(fallback);
        };
        if variant == KernelVariant::AMX_INT8 && (range.is_some() || !amx_pays_off(&shape)) {
            variant = KernelVariant::AVX512_VNNI;
        }
        let Some((operands, count)) = self.in_range(intrin, operands, range)? else { return self.stmt(fallback) };
        let mut pointers = Vec::with_capacity(3);
        for operand in &operands {
            match self.buffers.get(&operand.buffer.id()).cloned() {
                Some(BufLoc::Memory(base)) => pointers.push((base, operand)),
                // Kernels need memory operands (`analysis::promotion` never promotes them).
                _ => return self.stmt(fallback),
            }
        }
        let ranged = count.is_some();
        let kernel = match self.cx.int8_gemm_kernel(variant, shape, &intrin.name, ranged)? {
            // Offsets the tile kernel cannot encode: the zmm kernel, exact for the same inputs.
            None if variant == KernelVariant::AMX_INT8 => {
                self.cx.int8_gemm_kernel(KernelVariant::AVX512_VNNI, shape, &intrin.name, ranged)?
            }
            kernel => kernel,
        };
        let Some(kernel) = kernel else {
            return self.stmt(fallback);
        };
        let mut args = Vec::with_capacity(4);
        for &(base, operand) in &pointers {
            args.push(self.origin_address(base, operand)?);
        }
        args.extend(count);
        let fref = self.cx.module.declare_func_in_func(kernel, self.b.func);
        self.b.ins().call(fref, &args);
        Ok(())
    }

    /// The operands of a call with `A` and `B` moved to the first segment of `range`, and the
    /// count of segments in it (both clamped to `[0, S]`, as `StmtKind::Call::range` reads
    /// them); the operands as they are and no count without a range. `None` for a range on a
    /// call without segments or operands a kernel takes (which the fallback then computes).
    fn in_range(
        &mut self,
        intrin: &TensorIntrin,
        operands: &[Operand],
        range: Option<&SegmentRange>,
    ) -> Result<Option<InRange>, CompileError> {
        let Some(range) = range else { return Ok(Some((operands.to_vec(), None))) };
        let Some(segments) = segmented_gemm(intrin) else { return Ok(None) };
        let (Some(a), Some(b)) = (operands.first(), operands.get(1)) else { return Ok(None) };
        let (&[_, lds, _], &[ldb, ..], [a_origin], [b_origin]) =
            (a.strides.as_slice(), b.strides.as_slice(), a.origin.as_slice(), b.origin.as_slice())
        else {
            return Ok(None);
        };
        use ir::expr::{max, min};
        let clamp = |e: &ir::Expr, lo: ir::Expr| min(max(e.clone(), lo), ir::Expr::index(segments.count));
        let first = clamp(&range.first, ir::Expr::index(0));
        let last = clamp(&range.last, first.clone());
        let mut moved = operands.to_vec();
        moved[0].origin = vec![a_origin.clone() + first.clone() * lds];
        moved[1].origin = vec![b_origin.clone() + first.clone() * (segments.k / segments.pack * ldb)];
        let count = self.expr(&(last - first))?.as_scalar();
        Ok(Some((moved, Some(count))))
    }

    /// An `F32Gemm` call: the exact kernel at the level's width (zmm with AVX-512, else ymm), or
    /// the loop nest below AVX2 or where the operands' layout has no kernel.
    fn call_f32_gemm(
        &mut self,
        intrin: &TensorIntrin,
        operands: &[Operand],
        reset: bool,
        fallback: &Stmt,
    ) -> Result<(), CompileError> {
        let width = match self.cx.level {
            IsaLevel::Avx512Vnni | IsaLevel::Amx => VectorWidth::Zmm,
            IsaLevel::AvxVnni | IsaLevel::Avx2 => VectorWidth::Ymm,
            IsaLevel::Scalar => return self.stmt(fallback),
        };
        let Some(shape) = f32_gemm_shape(intrin.kind, operands, reset) else { return self.stmt(fallback) };
        let mut pointers = Vec::with_capacity(3);
        for operand in operands {
            match self.buffers.get(&operand.buffer.id()).cloned() {
                Some(BufLoc::Memory(base)) => pointers.push((base, operand)),
                _ => return self.stmt(fallback),
            }
        }
        let Some(kernel) = self.cx.f32_gemm_kernel(width, shape, &intrin.name)? else {
            return self.stmt(fallback);
        };
        self.call_kernel(kernel, &pointers)
    }

    /// Calls `kernel` with the address of each operand's origin.
    fn call_kernel(&mut self, kernel: FuncId, pointers: &[(Value, &Operand)]) -> Result<(), CompileError> {
        let mut args: Vec<Value> = Vec::with_capacity(pointers.len());
        for &(base, operand) in pointers {
            args.push(self.origin_address(base, operand)?);
        }
        let fref = self.cx.module.declare_func_in_func(kernel, self.b.func);
        self.b.ins().call(fref, &args);
        Ok(())
    }

    /// The address of `operand`'s origin in the buffer at `base`.
    fn origin_address(&mut self, base: Value, operand: &Operand) -> Result<Value, CompileError> {
        let origin = self.expr(&operand.origin[0])?.as_scalar();
        let bytes = operand.buffer.dtype().bytes() as i64;
        let offset = if bytes == 1 { origin } else { self.b.ins().imul_imm_s(origin, bytes) };
        Ok(self.b.ins().iadd(base, offset))
    }

    /// A `Map` call: the kernel compiled from the declaration at the level's vector width (zmm
    /// with AVX-512, else ymm), or the loop nest where the body or the operands have no kernel.
    fn call_map(&mut self, intrin: &TensorIntrin, operands: &[Operand], fallback: &Stmt) -> Result<(), CompileError> {
        let IntrinKind::Map { m, n } = intrin.kind else { unreachable!("call_intrin checked the kind") };
        let Some((width, pointers, shape)) = self.map_operands(intrin, operands, (m, n)) else {
            return self.stmt(fallback);
        };
        let Some(kernel) = self.cx.map_kernel(width, intrin, shape)? else {
            return self.stmt(fallback);
        };
        self.call_kernel(kernel, &pointers)
    }

    /// What a `Map` or `RowFold` kernel call needs: the level's vector width (zmm with AVX-512,
    /// else ymm), each operand's base pointer and its row stride; `None` where the call must run
    /// its loop nest (the scalar level, an operand without unit stride along its last axis or
    /// not in memory).
    fn map_operands<'o>(
        &mut self,
        intrin: &TensorIntrin,
        operands: &'o [Operand],
        (m, n): (i64, i64),
    ) -> Option<(VectorWidth, KernelPointers<'o>, MapShape)> {
        let width = match self.cx.level {
            IsaLevel::Avx512Vnni | IsaLevel::Amx => VectorWidth::Zmm,
            IsaLevel::AvxVnni | IsaLevel::Avx2 => VectorWidth::Ymm,
            IsaLevel::Scalar => return None,
        };
        let mut pointers = Vec::with_capacity(operands.len());
        let mut row_strides = Vec::with_capacity(operands.len());
        let mut per_row = intrin.map_rows();
        per_row.push(false);
        for ((operand, tensor), per_row) in operands.iter().zip(intrin.operand_tensors()).zip(per_row) {
            row_strides.push(map_row_stride(operand, tensor, per_row)?);
            match self.buffers.get(&operand.buffer.id()).cloned() {
                Some(BufLoc::Memory(base)) => pointers.push((base, operand)),
                _ => return None,
            }
        }
        Some((width, pointers, MapShape { m, n, row_strides }))
    }
}

/// Each operand's base pointer, in the kernel's argument order.
type KernelPointers<'o> = Vec<(Value, &'o Operand)>;

impl<M: Module> FnTx<'_, '_, '_, M> {
    /// A `RowFold` call: the kernel compiled from the declaration at the level's vector width
    /// (`kernels::map::fold`), or the loop nest where the body or the operands have none.
    fn call_row_fold(
        &mut self,
        intrin: &TensorIntrin,
        operands: &[Operand],
        reset: bool,
        fallback: &Stmt,
    ) -> Result<(), CompileError> {
        let IntrinKind::RowFold { m, n, .. } = intrin.kind else { unreachable!("call_intrin checked the kind") };
        let Some((width, pointers, shape)) = self.map_operands(intrin, operands, (m, n)) else {
            return self.stmt(fallback);
        };
        let Some(kernel) = self.cx.row_fold_kernel(width, intrin, shape, reset)? else {
            return self.stmt(fallback);
        };
        self.call_kernel(kernel, &pointers)
    }
}

impl<M: Module> FnTx<'_, '_, '_, M> {
    /// A `GemmMap` call: the fused kernel (`kernels::gemm_map`) where the level selects the zmm
    /// VNNI kernel for the GEMM part and the tile, the Map's body and its operands fit it; else
    /// the fallback, the GEMM and the Map calls on a temporary tile.
    fn call_gemm_map(
        &mut self,
        intrin: &TensorIntrin,
        operands: &[Operand],
        fallback: &Stmt,
        range: Option<&SegmentRange>,
    ) -> Result<(), CompileError> {
        let Some((gemm, map)) = &intrin.parts else { return self.stmt(fallback) };
        let (IntrinKind::Int8Gemm { m, n, saturating, .. }, IntrinKind::Map { .. }) = (gemm.kind, map.kind) else {
            return self.stmt(fallback);
        };
        // The fused kernel addresses its operands per element or per column only.
        let per_row = map.map_rows().contains(&true);
        if per_row || operands.len() != intrin.operand_tensors().len() || !matches!(self.cx.level, IsaLevel::Avx512Vnni)
        {
            return self.stmt(fallback);
        }
        // The GEMM part's shape, as if it wrote a dense `[m, n]` tile.
        let tile = Buffer::new("tile", DType::I32, vec![m, n]);
        let c = Operand { buffer: tile, origin: vec![ir::Expr::index(0)], strides: vec![n, 1] };
        let Some(shape) = gemm_shape(gemm.kind, &[operands[0].clone(), operands[1].clone(), c], true) else {
            return self.stmt(fallback);
        };
        let (a_range, b_range) = (value_bounds(&operands[0].buffer), value_bounds(&operands[1].buffer));
        let facts = Int8GemmFacts {
            a_signed: shape.a_dtype == DType::I8,
            never_saturates: matches!((a_range, b_range), (Some(a), Some(b)) if pair_sums_fit_i16(a, b)),
            b_above_min: b_range.is_some_and(|(lo, _)| lo > i64::from(i8::MIN)),
        };
        if select_int8_gemm(self.cx.level, saturating, facts) != Some(KernelVariant::AVX512_VNNI) {
            return self.stmt(fallback);
        }
        // The Map's operands: input 0 is the tile, then the call's operands after A and B.
        let mut row_strides = vec![n];
        for (operand, tensor) in operands[2..].iter().zip(&intrin.operand_tensors()[2..]) {
            let Some(row_stride) = map_row_stride(operand, tensor, false) else { return self.stmt(fallback) };
            row_strides.push(row_stride);
        }
        let Some((operands, count)) = self.in_range(intrin, operands, range)? else { return self.stmt(fallback) };
        let mut pointers = Vec::with_capacity(operands.len());
        for operand in &operands {
            match self.buffers.get(&operand.buffer.id()).cloned() {
                Some(BufLoc::Memory(base)) => pointers.push((base, operand)),
                _ => return self.stmt(fallback),
            }
        }
        let ranged = count.is_some();
        let Some(kernel) = self.cx.gemm_map_kernel(shape, map, row_strides, &intrin.name, ranged)? else {
            return self.stmt(fallback);
        };
        // The operands' addresses (then the segment count), in a block the kernel reads.
        let size = 8 * (pointers.len() + usize::from(ranged)) as u32;
        let slot = self.b.create_sized_stack_slot(StackSlotData::new(StackSlotKind::ExplicitSlot, size, 3));
        for (k, &(base, operand)) in pointers.iter().enumerate() {
            let address = self.origin_address(base, operand)?;
            self.b.ins().stack_store(types::I64, address, slot, 8 * k as i32);
        }
        if let Some(count) = count {
            self.b.ins().stack_store(types::I64, count, slot, 8 * pointers.len() as i32);
        }
        let block = self.b.ins().stack_addr(types::I64, slot, 0);
        let fref = self.cx.module.declare_func_in_func(kernel, self.b.func);
        self.b.ins().call(fref, &[block]);
        Ok(())
    }
}

/// The row stride of a Map operand as its kernel addresses it (elements; 0 for an `[n]`
/// operand, the stride of its one dimension for a `per_row` `[m]` one), or `None` where the
/// kernel cannot: not contiguous along the columns, more than one origin, or a dtype other
/// than the declaration's.
fn map_row_stride(operand: &Operand, tensor: &ir::te::Tensor, per_row: bool) -> Option<i64> {
    let row_stride = match *operand.strides.as_slice() {
        [row, 1] if row >= 0 => row,
        [row] if per_row && row >= 0 => row,
        [1] => 0,
        _ => return None,
    };
    (operand.origin.len() == 1 && operand.buffer.dtype() == tensor.dtype()).then_some(row_stride)
}

impl<M: Module> ModuleCtx<'_, M> {
    /// The module's kernel for the `Map` declaration `intrin` at `width`, defined on first use;
    /// `None` when its body or operands have no vector form (`KernelError::Unsupported`) or an
    /// offset does not fit.
    fn map_kernel(
        &mut self,
        width: VectorWidth,
        intrin: &TensorIntrin,
        shape: MapShape,
    ) -> Result<Option<FuncId>, CompileError> {
        let key = KernelKey::Map { width, declaration: ir::workload::intrin_key(intrin), shape: shape.clone() };
        if let Some(&id) = self.kernels.get(&key) {
            return Ok(Some(id));
        }
        let bytes = match assemble_map(width, intrin, &shape) {
            Ok(bytes) => bytes,
            Err(KernelError::Unsupported { .. } | KernelError::OffsetTooLarge { .. }) => return Ok(None),
            Err(other) => return Err(other.into()),
        };
        let wide = if width == VectorWidth::Zmm { "zmm" } else { "ymm" };
        let name = format!("{}__{}__{wide}__{}", self.name, intrin.name, self.kernels.len());
        let origin = format!(
            "{wide} map kernel for {}: {}x{}, row strides {:?}",
            intrin.name, shape.m, shape.n, shape.row_strides
        );
        let params = intrin.operand_tensors().len();
        self.define_kernel(key, name, params, &bytes, origin, None).map(Some)
    }

    /// The module's kernel for the `RowFold` declaration `intrin` at `width`, defined on first
    /// use; `None` when its fold or operands have no vector form or an offset does not fit.
    fn row_fold_kernel(
        &mut self,
        width: VectorWidth,
        intrin: &TensorIntrin,
        shape: MapShape,
        reset: bool,
    ) -> Result<Option<FuncId>, CompileError> {
        let declaration = ir::workload::intrin_key(intrin);
        let key = KernelKey::RowFold { width, declaration, shape: shape.clone(), reset };
        if let Some(&id) = self.kernels.get(&key) {
            return Ok(Some(id));
        }
        let bytes = match assemble_row_fold(width, intrin, &shape, reset) {
            Ok(bytes) => bytes,
            Err(KernelError::Unsupported { .. } | KernelError::OffsetTooLarge { .. }) => return Ok(None),
            Err(other) => return Err(other.into()),
        };
        let wide = if width == VectorWidth::Zmm { "zmm" } else { "ymm" };
        let name = format!("{}__{}__{wide}__{}", self.name, intrin.name, self.kernels.len());
        let origin = format!(
            "{wide} row-fold kernel for {}: {}x{}, row strides {:?}{}",
            intrin.name,
            shape.m,
            shape.n,
            shape.row_strides,
            if reset { ", reset" } else { "" }
        );
        let params = intrin.operand_tensors().len();
        self.define_kernel(key, name, params, &bytes, origin, None).map(Some)
    }

    /// The module's `GemmMap` kernel for the zmm VNNI GEMM of `shape` then `map` (its Map part,
    /// whose operands have `row_strides`), defined on first use; `None` where the kernel
    /// generator declines it (`KernelError::Unsupported`, `TooManyRegisters`, `OffsetTooLarge`).
    fn gemm_map_kernel(
        &mut self,
        shape: GemmShape,
        map: &TensorIntrin,
        row_strides: Vec<i64>,
        intrin: &str,
        ranged: bool,
    ) -> Result<Option<FuncId>, CompileError> {
        let declaration = ir::workload::intrin_key(map);
        let key = KernelKey::GemmMap { shape, declaration, row_strides: row_strides.clone(), ranged };
        if let Some(&id) = self.kernels.get(&key) {
            return Ok(Some(id));
        }
        let variant = KernelVariant::AVX512_VNNI;
        let blocking = blocking_for(variant, &shape);
        let bytes = match assemble_gemm_map(variant, &shape, blocking, map, &row_strides, ranged) {
            Ok(bytes) => bytes,
            Err(
                KernelError::Unsupported { .. }
                | KernelError::TooManyRegisters { .. }
                | KernelError::OffsetTooLarge { .. },
            ) => return Ok(None),
            Err(other) => return Err(other.into()),
        };
        let name = format!("{}__{intrin}__zmm__{}", self.name, self.kernels.len());
        let segments = if ranged { "a run-time count of" } else { "" };
        let origin = format!(
            "{variant} kernel for {intrin}: {}x{}x{}, {segments}{} segments, then the map kernel of {} as its epilogue, row strides {row_strides:?}",
            shape.m, shape.n, shape.k, shape.segments, map.name
        );
        self.define_kernel(key, name, 1, &bytes, origin, Some(variant)).map(Some)
    }

    /// The module's f32 kernel for `shape` at `width`, defined on first use; `None` when an
    /// offset does not fit 32 bits, which leaves the call to its fallback.
    fn f32_gemm_kernel(
        &mut self,
        width: VectorWidth,
        shape: F32GemmShape,
        intrin: &str,
    ) -> Result<Option<FuncId>, CompileError> {
        let key = KernelKey::F32Gemm { width, shape };
        if let Some(&id) = self.kernels.get(&key) {
            return Ok(Some(id));
        }
        let blocking = F32Blocking::for_tile(width, shape.m, shape.n);
        let bytes = match assemble_f32_gemm(width, &shape, blocking) {
            Ok(bytes) => bytes,
            Err(KernelError::OffsetTooLarge { .. }) => return Ok(None),
            Err(other) => return Err(other.into()),
        };
        let wide = if width == VectorWidth::Zmm { "zmm" } else { "ymm" };
        let name = format!("{}__{intrin}__f32_{wide}__{}", self.name, self.kernels.len());
        let origin = format!(
            "f32-{wide} kernel for {intrin}: {}x{}x{}, lda {} ldb {} ldc {}, {}x{} register tile, k unrolled {}",
            shape.m,
            shape.n,
            shape.k,
            shape.lda,
            shape.ldb,
            shape.ldc,
            blocking.rows,
            blocking.vectors,
            blocking.unroll
        );
        self.define_kernel(key, name, 3, &bytes, origin, None).map(Some)
    }

    /// The module's kernel for `variant` and `shape`, defined on first use; `None` when the
    /// generator cannot build it (offsets beyond 32 bits), which leaves the call to its fallback.
    fn int8_gemm_kernel(
        &mut self,
        variant: KernelVariant,
        shape: GemmShape,
        intrin: &str,
        ranged: bool,
    ) -> Result<Option<FuncId>, CompileError> {
        let key = KernelKey::Gemm { variant, shape, ranged };
        if let Some(&id) = self.kernels.get(&key) {
            return Ok(Some(id));
        }
        let blocking = blocking_for(variant, &shape);
        let assembled = if ranged {
            assemble_gemm_ranged(variant, &shape, blocking)
        } else {
            assemble_gemm(variant, &shape, blocking)
        };
        let bytes = match assembled {
            Ok(bytes) => bytes,
            Err(KernelError::OffsetTooLarge { .. }) => return Ok(None),
            Err(other) => return Err(other.into()),
        };
        let name = format!("{}__{intrin}__{}__{}", self.name, variant.name().replace('-', "_"), self.kernels.len());
        let segments = match shape.segments {
            1 => String::new(),
            count if ranged => format!(" per segment, a run-time count of {count} segments {} bytes apart", shape.lds),
            count => format!(" per segment, {count} segments {} bytes apart", shape.lds),
        };
        let origin = format!(
            "{variant} kernel for {intrin}: {}x{}x{}{segments}, lda {} ldb {} ldc {}, {}x{} register tile, k unrolled {}",
            shape.m,
            shape.n,
            shape.k,
            shape.lda,
            shape.ldb,
            shape.ldc,
            blocking.rows,
            blocking.vectors,
            blocking.unroll
        );
        self.define_kernel(key, name, 3 + usize::from(ranged), &bytes, origin, Some(variant)).map(Some)
    }

    /// Declares the hand-assembled `bytes` as the module's local function `name` of `params`
    /// pointer arguments (SysV), lists it among the defined functions with `origin` and its
    /// kernel family, and keeps it for `key`.
    fn define_kernel(
        &mut self,
        key: KernelKey,
        name: String,
        params: usize,
        bytes: &[u8],
        origin: String,
        kernel: Option<KernelVariant>,
    ) -> Result<FuncId, CompileError> {
        let mut sig = Signature::new(self.module.target_config().default_call_conv);
        sig.params.extend((0..params).map(|_| AbiParam::new(types::I64)));
        let id = self.module.declare_function(&name, Linkage::Local, &sig).map_err(|e| module_error(&name, e))?;
        self.module.define_function_bytes(id, KERNEL_ALIGN, bytes, &[]).map_err(|e| module_error(&name, e))?;
        self.functions.push(DefinedFunction { name, id, origin, kernel, size: bytes.len() });
        self.kernels.insert(key, id);
        Ok(id)
    }
}
