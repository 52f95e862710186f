//! The kernel of an `IntrinKind::GemmMap` call: one GEMM register tile (`gemm`), then the Map's
//! body on each accumulator register (`map::emit_epilogue`) and the Map's store — the i32
//! sums never go to memory. Where the Map reads the tile only as `acc - c` with `c` an i32 per
//! column (`map::centering_operand`: the requantization's compensation), the accumulators start
//! at `-c`: one subtraction per column vector before the k loop instead of one per register in
//! the epilogue, whose instructions after the last multiply-add are what a tile costs beyond
//! them.
//!
//! Signature (SysV): `fn(operands: *const *const u8)`, the addresses of the operands' origins
//! in call order (A, B, the Map's inputs after the first, the Map's output), since a Map can
//! have more operands than argument registers; a ranged kernel's segment count follows them. Only the zmm VNNI GEMM, resetting, whose whole
//! `m × n` tile is one register block; anything else is `KernelError::Unsupported` and the
//! call runs its two-call fallback.

use iced_x86::code_asm::*;
use ir::intrin::{IntrinKind, TensorIntrin};

use crate::error::KernelError;
use crate::isa::{KernelVariant, VectorWidth};
use crate::kernels::gemm::{A_BASE, A_BLOCK, B_PANEL, Blocking, GemmShape, Gen, SEGMENTS, check_variant};
use crate::kernels::imm32;
use crate::kernels::map::{EpilogueTile, centering_operand, emit_epilogue};

/// Registers the Map's operands (after input 0) are addressed from during the epilogue: free
/// once the k loop is done; r10 holds the operand block until they are loaded, r11 is the
/// Map's scratch.
const BASES: [AsmRegister64; 7] = [rdx, rcx, rsi, rdi, r8, r9, rax];
const OPERANDS: AsmRegister64 = r10;
/// The address of the accumulators' negated start (`Gen::negated_start`) during the GEMM.
const START: AsmRegister64 = r11;

/// Assembles the kernel of `shape` (a resetting GEMM of `variant`, blocked as `blocking`)
/// followed by `map` (the `Map` part, `[shape.m, n]` for the tile's first `n ≤ shape.n`
/// columns: the last vector it maps is stored under a mask, and the registers past it are
/// never read), whose operands have the row strides `row_strides` (elements; 0 for an `[n]`
/// operand; input 0's is ignored). `ranged`: the GEMM computes a run-time number of its
/// segments (`gemm::assemble_gemm_ranged`), read from the operand block after the addresses
/// (an i64); no segment maps the zero tile.
pub fn assemble_gemm_map(
    variant: KernelVariant,
    shape: &GemmShape,
    blocking: Blocking,
    map: &TensorIntrin,
    row_strides: &[i64],
    ranged: bool,
) -> Result<Vec<u8>, KernelError> {
    let unsupported = |what: String| Err(KernelError::Unsupported { what });
    check_variant(variant, shape)?;
    if variant != KernelVariant::AVX512_VNNI {
        return unsupported(format!("a GEMM epilogue after the {variant} kernel"));
    }
    let lanes = variant.width.lanes();
    let (m, n) = (shape.m.max(0) as usize, shape.n.max(0) as usize);
    let vectors = n.div_ceil(lanes);
    let one_block = m >= 1 && n >= 1 && m <= blocking.rows && vectors <= blocking.vectors;
    if !shape.reset || !one_block || shape.k <= 0 || shape.segments <= 0 {
        return unsupported(format!("a GEMM epilogue on {}x{}x{} (one resetting register block)", m, n, shape.k));
    }
    let map_n = match map.kind {
        IntrinKind::Map { m: map_m, n: map_n } if map_m == shape.m && (1..=shape.n).contains(&map_n) => map_n as usize,
        _ => return unsupported(format!("{} as the epilogue of a {m}x{n} tile", map.name)),
    };
    if row_strides.len() != map.inputs.len() + 1 {
        return unsupported(format!("{} as the epilogue of a {m}x{n} tile", map.name));
    }
    let others = map.inputs.len();
    if others > BASES.len() {
        return unsupported(format!("{others} Map operands after the tile (at most {})", BASES.len()));
    }
    let mut g = Gen::new(variant, *shape, blocking)?;
    g.a.mov(OPERANDS, A_BASE)?;
    if ranged {
        g.ranged = true;
        g.save_segment_registers()?;
        // A, B, then `others` (the Map's operands after the tile, its output): then the count.
        g.a.mov(SEGMENTS, qword_ptr(OPERANDS + imm32("the operand block", 8 * (2 + others as i64))?))?;
    }
    g.a.mov(A_BASE, qword_ptr(OPERANDS))?;
    g.a.mov(B_PANEL, qword_ptr(OPERANDS + 8))?;
    g.a.mov(A_BLOCK, A_BASE)?;
    // The epilogue's `acc - c` as the accumulators' start (`centering_operand`): r11 is free
    // until the epilogue, which then reads the tile as that difference.
    let centered = centering_operand(map, row_strides);
    if let Some(k) = centered {
        g.a.mov(START, qword_ptr(OPERANDS + imm32("the operand block", 16 + 8 * (k as i64 - 1))?))?;
        g.negated_start = Some(START);
    }
    let last_lanes = n - (vectors - 1) * lanes;
    let tile = g.block_with(m, vectors, last_lanes, false)?;
    for (k, &base) in BASES[..others].iter().enumerate() {
        g.a.mov(base, qword_ptr(OPERANDS + imm32("the operand block", 16 + 8 * k as i64)?))?;
    }
    // Input 0 is the tile: its base is never used.
    let bases = std::iter::once(r11).chain(BASES[..others].iter().copied()).collect();
    // The Map's columns: its vectors of the tile, the last one's lanes.
    let map_vectors = map_n.div_ceil(lanes);
    let acc = tile.acc.iter().map(|row| row[..map_vectors].iter().map(|v| v.0).collect()).collect();
    let last_lanes = map_n - (map_vectors - 1) * lanes;
    let epilogue = EpilogueTile { acc, last_lanes, bases, row_strides: row_strides.to_vec(), centered };
    let a = std::mem::replace(&mut g.a, CodeAssembler::new(64)?);
    g.a = emit_epilogue(a, VectorWidth::Zmm, map, &epilogue)?;
    if ranged {
        g.restore_segment_registers()?;
    }
    g.a.vzeroupper()?;
    g.a.ret()?;
    Ok(g.a.assemble(0)?)
}
