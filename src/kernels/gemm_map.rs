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
//! have more operands than argument registers; a ranged kernel's segment count follows them.
//! Only the zmm VNNI GEMM, resetting, whose `n` columns fit one register block; a taller tile
//! runs as row blocks (`assemble_row_blocks`), each block's epilogue within the next block's
//! first k steps. Anything else is `KernelError::Unsupported` and the call runs its two-call
//! fallback.

use iced_x86::code_asm::*;
use iced_x86::{FlowControl, Instruction, InstructionInfoFactory, OpAccess, Register};
use ir::intrin::{IntrinKind, TensorIntrin};

use crate::error::KernelError;
use crate::isa::{KernelVariant, VectorWidth};
use crate::kernels::gemm::{
    A_BASE, A_BLOCK, B_PANEL, Blocking, GemmShape, Gen, RegisterLayout, SEGMENTS, check_variant,
};
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
    let blocks = m >= 1 && n >= 1 && vectors <= blocking.vectors;
    if !shape.reset || !(one_block || blocks) || shape.k <= 0 || shape.segments <= 0 {
        return unsupported(format!(
            "a GEMM epilogue on {}x{}x{} (a resetting tile of one register block, or of row blocks)",
            m, n, shape.k
        ));
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
    if !one_block {
        return assemble_row_blocks(variant, shape, blocking, map, map_n, row_strides, ranged);
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
    let epilogue = EpilogueTile {
        acc,
        first_row: 0,
        reserved: Vec::new(),
        last_lanes,
        bases,
        row_strides: row_strides.to_vec(),
        centered,
    };
    let a = std::mem::replace(&mut g.a, CodeAssembler::new(64)?);
    g.a = emit_epilogue(a, VectorWidth::Zmm, map, &epilogue)?;
    if ranged {
        g.restore_segment_registers()?;
    }
    g.a.vzeroupper()?;
    g.a.ret()?;
    Ok(crate::kernels::encode::encode(&mut g.a)?)
}

/// The Map's operands after the tile, in a kernel of row blocks: registers the k loop leaves
/// alone (it uses rdi, rsi, r8, r9 and rax, and with a segment range rbx, r12 and r13; r11 is
/// the Map's scratch). The callee-saved ones are saved and restored.
const BLOCK_BASES: [AsmRegister64; 9] = [rdx, rcx, r10, rbp, r14, r15, rbx, r12, r13];
/// Of `BLOCK_BASES`, those a ranged kernel can take (the others hold its segments).
const RANGED_BLOCK_BASES: usize = 6;
/// Callee-saved registers.
const CALLEE_SAVED: [AsmRegister64; 6] = [rbx, rbp, r12, r13, r14, r15];

/// `assemble_gemm_map` for a tile taller than one register block and no segment range: row
/// blocks of at most `blocking.rows` rows, as evenly filled as possible, each with its own
/// register tile, alternating between two sets of accumulator registers (`RegisterLayout`), so
/// that the epilogue of a block runs within the first k steps of the next one
/// (`Gen::interleaved`), its conversions and stores issued beside the next block's
/// multiply-adds instead of after the last of its own; the last block's epilogue follows its k
/// loop. Every element gets the same instructions as in a one-block kernel, in the same order;
/// only the schedule moves. Falls back to fewer rows per block where the two tiles and the
/// Map's registers do not fit; `Unsupported` where none fits.
fn assemble_row_blocks(
    variant: KernelVariant,
    shape: &GemmShape,
    blocking: Blocking,
    map: &TensorIntrin,
    map_n: usize,
    row_strides: &[i64],
    ranged: bool,
) -> Result<Vec<u8>, KernelError> {
    let m = shape.m as usize;
    let mut tried = None;
    for rows in (1..=blocking.rows.min(m)).rev() {
        let even = m.div_ceil(m.div_ceil(rows));
        match assemble_blocks_of(variant, shape, Blocking { rows: even, ..blocking }, map, map_n, row_strides, ranged) {
            Err(e @ (KernelError::Unsupported { .. } | KernelError::TooManyRegisters { .. })) => tried = Some(e),
            done => return done,
        }
    }
    Err(tried.unwrap_or(KernelError::Unsupported { what: format!("{} as the epilogue of row blocks", map.name) }))
}

/// `assemble_row_blocks` with blocks of `blocking.rows` rows (the last one the rest).
fn assemble_blocks_of(
    variant: KernelVariant,
    shape: &GemmShape,
    blocking: Blocking,
    map: &TensorIntrin,
    map_n: usize,
    row_strides: &[i64],
    ranged: bool,
) -> Result<Vec<u8>, KernelError> {
    let rows = blocking.rows;
    let lanes = variant.width.lanes();
    let (m, n) = (shape.m as usize, shape.n as usize);
    let vectors = n.div_ceil(lanes);
    let last_lanes = n - (vectors - 1) * lanes;
    let others = map.inputs.len();
    let block_starts: Vec<usize> = (0..m).step_by(rows).collect();
    // Two accumulator sets, then the B vectors and the A broadcast.
    let set = rows * vectors;
    let layouts =
        [RegisterLayout { accumulators: 0, rest: 2 * set }, RegisterLayout { accumulators: set, rest: 2 * set }];
    let free_bases = if ranged { &BLOCK_BASES[..RANGED_BLOCK_BASES] } else { &BLOCK_BASES[..] };
    if others > free_bases.len() {
        return Err(KernelError::Unsupported { what: format!("{others} Map operands after row blocks") });
    }
    let block_bases = &free_bases[..others];
    let mut g = Gen::new(variant, *shape, blocking)?;
    g.ranged = ranged;
    if ranged {
        g.save_segment_registers()?;
    }
    let saved: Vec<AsmRegister64> = block_bases.iter().copied().filter(|r| CALLEE_SAVED.contains(r)).collect();
    for &r in &saved {
        g.a.push(r)?;
    }
    let operand = |k: i64| imm32("the operand block", 8 * k);
    g.a.mov(OPERANDS, A_BASE)?;
    g.a.mov(A_BASE, qword_ptr(OPERANDS))?;
    g.a.mov(B_PANEL, qword_ptr(OPERANDS + 8))?;
    if ranged {
        // A, B, then `others` (the Map's operands after the tile, its output): then the count.
        g.a.mov(SEGMENTS, qword_ptr(OPERANDS + operand(2 + others as i64)?))?;
    }
    // The accumulators' negated start: on the stack, into r11 (the Map's scratch) before each
    // block.
    let centered = centering_operand(map, row_strides);
    if let Some(k) = centered {
        g.a.push(qword_ptr(OPERANDS + operand(2 + k as i64 - 1)?))?;
        g.negated_start = Some(r11);
    }
    // OPERANDS (r10) last: it may be a base.
    let mut loads: Vec<(usize, AsmRegister64)> = block_bases.iter().copied().enumerate().collect();
    loads.sort_by_key(|&(_, r)| r == OPERANDS);
    for (k, base) in loads {
        g.a.mov(base, qword_ptr(OPERANDS + operand(2 + k as i64)?))?;
    }
    let bases: Vec<AsmRegister64> = std::iter::once(r11).chain(block_bases.iter().copied()).collect();
    let map_vectors = map_n.div_ceil(lanes);
    let map_last_lanes = map_n - (map_vectors - 1) * lanes;
    let lda = shape.lda * shape.a_dtype.bytes() as i64;
    for (b, &first_row) in block_starts.iter().enumerate() {
        let block_rows = rows.min(m - first_row);
        g.layout = Some(layouts[b % 2]);
        if centered.is_some() {
            g.a.mov(r11, qword_ptr(rsp))?;
        }
        g.a.mov(A_BLOCK, A_BASE)?;
        if first_row > 0 {
            g.a.add(A_BLOCK, imm32("a row block of A", first_row as i64 * lda)?)?;
        }
        let tile = g.block_with(block_rows, vectors, last_lanes, false)?;
        // What the epilogue must leave alone: the next block's registers, if any.
        let reserved = match block_starts.get(b + 1) {
            Some(&next) => {
                g.layout = Some(layouts[(b + 1) % 2]);
                g.allocate(rows.min(m - next), vectors, last_lanes)?.registers()
            }
            None => Vec::new(),
        };
        let acc = tile.acc.iter().map(|row| row[..map_vectors].iter().map(|v| v.0).collect()).collect();
        let epilogue = EpilogueTile {
            acc,
            first_row,
            reserved,
            last_lanes: map_last_lanes,
            bases: bases.clone(),
            row_strides: row_strides.to_vec(),
            centered,
        };
        // Only straight-line code that writes no general register but the Map's scratch can
        // run inside the next block's steps; anything else, and the last block's, runs here,
        // emitted into this kernel's assembler itself: a scratch assembler's labels would
        // collide with this one's.
        if b + 1 < block_starts.len() {
            let code = emit_epilogue(CodeAssembler::new(64)?, VectorWidth::Zmm, map, &epilogue)?;
            let mut info = InstructionInfoFactory::new();
            if code.instructions().iter().all(|i| straight_line(&mut info, i)) {
                // No branch reaches them: a label the scratch assembler left on one goes.
                let mut instructions = code.instructions().to_vec();
                instructions.iter_mut().for_each(|i| i.set_ip(0));
                g.interleaved = instructions;
                continue;
            }
        }
        let a = std::mem::replace(&mut g.a, CodeAssembler::new(64)?);
        g.a = emit_epilogue(a, VectorWidth::Zmm, map, &epilogue)?;
    }
    if centered.is_some() {
        g.a.pop(r11)?;
    }
    for &r in saved.iter().rev() {
        g.a.pop(r)?;
    }
    if ranged {
        g.restore_segment_registers()?;
    }
    g.a.vzeroupper()?;
    g.a.ret()?;
    Ok(crate::kernels::encode::encode(&mut g.a)?)
}

/// `instruction` falls through, addresses no memory relative to itself and writes no general
/// register other than r11 and no flags: it can run between two k steps.
fn straight_line(info: &mut InstructionInfoFactory, instruction: &Instruction) -> bool {
    let info = info.info(instruction);
    let writes_gpr = info.used_registers().iter().any(|u| {
        let r = u.register();
        r.is_gpr() && r.full_register() != Register::R11 && !matches!(u.access(), OpAccess::Read | OpAccess::CondRead)
    });
    instruction.flow_control() == FlowControl::Next
        && !instruction.is_ip_rel_memory_operand()
        && !writes_gpr
        && instruction.rflags_modified() == 0
}
