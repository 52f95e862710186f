//! A map run as another kernel's epilogue (`kernels::gemm_map`): input 0 is a tile of vector
//! registers (a GEMM's accumulators) instead of memory, the other operands are at base
//! registers and constant offsets, and each vector is computed and stored as the map kernel
//! does it (the same node code, the same narrowing store), one register of the tile at a time.
//! Where the body reads input 0 only as `in0 - c` with `c` an i32 `[n]` operand
//! (`centering_operand`), the GEMM can start its accumulators at `-c` instead of zero, and the
//! tile's registers are then the value of that subtraction.

use rustc_hash::FxHashSet as HashSet;

use iced_x86::code_asm::*;
use ir::DType;
use ir::expr::{BinOp, Expr, ExprKind};
use ir::intrin::{IntrinKind, TensorIntrin};

use super::Gen;
use super::copy::is_copy;
use super::registers::node;
use crate::error::KernelError;
use crate::isa::VectorWidth;
use crate::kernels::imm32;

/// Where the epilogue's operands are.
pub(crate) struct EpilogueTile {
    /// `acc[i][j]`: the register holding row `first_row + i`, column vector `j` of input 0.
    pub acc: Vec<Vec<usize>>,
    /// The Map's row of `acc[0]`: the rows from it are mapped, the others left to other calls.
    pub first_row: usize,
    /// Vector registers the epilogue leaves as they are (another GEMM block's, when it runs
    /// during that block's k loop).
    pub reserved: Vec<usize>,
    /// Lanes of the last column vector inside the block (`lanes()` when it is full).
    pub last_lanes: usize,
    /// Per operand (inputs in call order, then the output): the general register holding the
    /// address of its element `[0, 0]` (or `[0]`); input 0's is never used.
    pub bases: Vec<AsmRegister64>,
    /// Per operand: elements between rows, 0 for an `[n]` operand.
    pub row_strides: Vec<i64>,
    /// The registers hold `in0 - in_k` for this `centering_operand` `k`, not input 0.
    pub centered: Option<usize>,
}

/// The current vector of an epilogue (`Gen::place`).
pub(super) struct Place {
    bases: Vec<AsmRegister64>,
    row_strides: Vec<i64>,
    row: i64,
    vector: i64,
    /// The register of input 0 at the current vector.
    acc: usize,
    /// The body reads input 0 at one node: its register can become that node's value.
    single_read: bool,
    /// `acc` became a node's value (freed at its last use).
    handed: bool,
    /// The node `in0 - in_k` whose value `acc` holds (`EpilogueTile::centered`).
    centered: Option<usize>,
}

impl Place {
    pub(super) fn at(&self, arg: usize, bytes: i32, width: VectorWidth) -> Result<AsmMemoryOperand, KernelError> {
        let elements = self.row * self.row_strides[arg] + self.vector * width.lanes() as i64;
        Ok(self.bases[arg] + imm32("an epilogue operand", elements * i64::from(bytes))?)
    }
}

/// Emits into `a` the map `decl` (an `IntrinKind::Map` whose input 0 is `i32[m, n]`) on
/// `tile` (its rows of the map), zmm only, and returns the assembler. Registers: vector
/// registers outside `tile.acc` and `tile.reserved` (clobbered), each of `tile.acc` after its
/// vector, r11, k2–k4. `Unsupported` where the body or its temporaries do not fit beside the
/// tile, or the shapes do not match.
pub(crate) fn emit_epilogue(
    a: CodeAssembler,
    width: VectorWidth,
    decl: &TensorIntrin,
    tile: &EpilogueTile,
) -> Result<CodeAssembler, KernelError> {
    let unsupported = |what: String| Err(KernelError::Unsupported { what });
    let IntrinKind::Map { m, n } = decl.kind else {
        return unsupported(format!("{} is not a Map declaration", decl.name));
    };
    let lanes = width.lanes();
    let vectors = tile.acc.first().map_or(0, Vec::len);
    let fits = !tile.acc.is_empty()
        && (tile.first_row + tile.acc.len()) as i64 <= m
        && tile.acc.iter().all(|row| row.len() == vectors)
        && vectors > 0
        && ((vectors - 1) * lanes + tile.last_lanes) as i64 == n
        && (1..=lanes).contains(&tile.last_lanes);
    let operands = decl.operand_tensors();
    if width != VectorWidth::Zmm
        || !fits
        || tile.bases.len() != operands.len()
        || tile.row_strides.len() != operands.len()
    {
        return unsupported(format!(
            "an epilogue of {} on a {}-row tile of {vectors} vectors",
            decl.name,
            tile.acc.len()
        ));
    }
    if is_copy(decl) || operands[0].dtype() != ir::DType::I32 {
        return unsupported(format!("an epilogue of {} (input 0 an i32 value to map)", decl.name));
    }
    let mut g = Gen::with(a, width, decl, false);
    let taken: HashSet<usize> = tile.acc.iter().flatten().chain(&tile.reserved).copied().collect();
    g.free.retain(|r| !taken.contains(r));
    let body = decl.output.body().expect("a Map declaration is a compute").clone();
    let single_read = reads_of_first_input(decl, &body) == 1;
    let centered = match tile.centered {
        Some(k) if centering_operand(decl, &tile.row_strides) == Some(k) => centering_node(decl, &body, k),
        Some(_) => return unsupported(format!("an epilogue of {} on a centered tile", decl.name)),
        None => None,
    };
    g.place = Some(Place {
        bases: tile.bases.clone(),
        row_strides: tile.row_strides.clone(),
        row: 0,
        vector: 0,
        acc: 0,
        single_read,
        handed: false,
        centered,
    });
    g.prepare(&body)?;
    if tile.last_lanes < lanes {
        g.a.mov(r11d, (1u32 << tile.last_lanes) - 1)?;
        g.a.kmovw(k2, r11d)?;
        // The lanes past the block, which a check over every lane must ignore.
        g.a.knotw(k4, k2)?;
    }
    for (i, row) in tile.acc.iter().enumerate() {
        for (j, &acc) in row.iter().enumerate() {
            if let Some(place) = g.place.as_mut() {
                (place.row, place.vector, place.acc, place.handed) =
                    ((tile.first_row + i) as i64, j as i64, acc, false);
            }
            g.masked = j + 1 == vectors && tile.last_lanes < lanes;
            g.offset = 0;
            g.vector(&body)?;
            if !g.place.as_ref().is_some_and(|p| p.handed) {
                g.free.push(acc);
            }
        }
    }
    Ok(g.a)
}

/// The input `k` (an i32 `[n]` operand: row stride 0) for which `decl`'s body reads input 0 at
/// exactly one node, the left side of `in0 - in_k`: a GEMM that starts its accumulators at
/// `-in_k` (wrapping, as `vpsubd` and `vpdpbusd`) leaves in them what that node computes.
pub(crate) fn centering_operand(decl: &TensorIntrin, row_strides: &[i64]) -> Option<usize> {
    let body = decl.output.body()?;
    if reads_of_first_input(decl, body) != 1 {
        return None;
    }
    (1..decl.inputs.len()).find(|&k| {
        let t = &decl.inputs[k];
        t.dtype() == DType::I32 && row_strides.get(k) == Some(&0) && centering_node(decl, body, k).is_some()
    })
}

/// The node `in0 - in_k` of `body` (`centering_operand`).
fn centering_node(decl: &TensorIntrin, body: &Expr, k: usize) -> Option<usize> {
    let is_read_of =
        |e: &Expr, arg: usize| matches!(e.kind(), ExprKind::TensorRead(t, _) if t.id() == decl.inputs[arg].id());
    let mut found = None;
    body.for_each(&mut |e| {
        if let ExprKind::Binary(BinOp::Sub, x, y) = e.kind()
            && e.dtype() == DType::I32
            && is_read_of(x, 0)
            && is_read_of(y, k)
        {
            found = Some(node(e));
        }
    });
    found
}

/// Distinct nodes of `body` that read `decl`'s input 0.
fn reads_of_first_input(decl: &TensorIntrin, body: &Expr) -> usize {
    let mut nodes = HashSet::default();
    body.for_each(&mut |e| {
        if let ExprKind::TensorRead(t, _) = e.kind()
            && t.id() == decl.inputs[0].id()
        {
            nodes.insert(node(e));
        }
    });
    nodes.len()
}

impl Gen<'_> {
    /// The tile's register at the current vector where `e` is the node it holds the value of
    /// (`Place::centered`).
    pub(super) fn centered_register(&self, e: &Expr) -> Option<usize> {
        self.place.as_ref().filter(|p| p.centered == Some(node(e))).map(|p| p.acc)
    }

    /// The register of input `arg` at the current vector, in an epilogue: input 0's.
    pub(super) fn register_input(&self, arg: usize) -> Option<usize> {
        self.place.as_ref().filter(|_| arg == 0).map(|p| p.acc)
    }

    /// A read of the register input `reg` as a node's value: `reg` itself where the body reads
    /// it at one node (freed at that node's last use), else a copy.
    pub(super) fn read_register(&mut self, reg: usize) -> Result<usize, KernelError> {
        if let Some(place) = self.place.as_mut()
            && place.single_read
            && !place.handed
        {
            place.handed = true;
            return Ok(reg);
        }
        let dst = self.allocate()?;
        self.copy(dst, reg)?;
        Ok(dst)
    }
}
