//! The int8 GEMM kernel generator.
//!
//! A kernel computes, for one shape with compile-time strides,
//! `C[i, j] += Σ_{s < segments, ko < k/4, ki < 4} i32(A[i, s, 4·ko + ki]) · i32(B[s·k/4 + ko, j, ki])`
//! (`A` u8 with rows `lda` and segments `lds` bytes apart; `B` i8 packed four k values per
//! column, groups `ldb` bytes apart; `C` i32 with rows `ldc` elements apart), under the SysV
//! signature `fn(a: *const u8, b: *const i8, c: *mut i32)`.
//!
//! Loop structure: column panels of `vectors` registers (the panel of B stays in L1 while every
//! row block of A streams past it), row blocks of `rows` rows, then per segment the k loop,
//! unrolled (segments are emitted one after the other, B continuing where it stopped). The
//! accumulator tile (`rows × vectors` registers) lives in registers for the whole k loop; each
//! k step loads one vector per column group of B and broadcasts 4 bytes of A per row. Partial
//! panels use opmask k1 (zmm) or `vpmaskmovd` (ymm) so nothing outside the operands is read or
//! written; a partial row block is the same code with fewer rows. A VNNI call that reads one
//! large panel of packed weights also prefetches the panel after it (`next_panel_prefetch`).
//!
//! With an i8 A (`C += Σ i32(A)·i32(B)`, both signed): the sign-transfer kernel
//! (`DotMethod::SignTransfer`) or the widening one. `DotMethod::Madd16` reads both operands
//! as i16 (`A[i, s, 2·ko + ki]`, `B: [s·k/2 + ko, j, ki]`, two k values per group).
//!
//! Registers: only caller-saved ones (rax, rcx, rdx, rsi, rdi, r8–r11, vector registers, k1),
//! so no prologue is needed; every kernel ends with `vzeroupper` (Cranelift's own code uses
//! legacy-SSE encodings, which would pay the AVX transition penalty).

use iced_x86::Instruction;
use iced_x86::code_asm::*;

use ir::DType;

use crate::error::KernelError;
use crate::isa::{DotMethod, KernelVariant, VectorWidth};
use crate::kernels::amx::{AmxSpec, assemble_amx, assemble_amx_with};
use crate::kernels::imm32;
use crate::kernels::vreg::{V, xmm, ymm, zmm};

/// One kernel's problem: sizes and strides, all compile-time constants.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct GemmShape {
    pub m: i64,
    pub n: i64,
    /// Reduction length of one segment, a multiple of 4.
    pub k: i64,
    /// Reduction segments (1: `A` is a plain `[m, k]` matrix).
    pub segments: i64,
    /// Elements (bytes) between rows of A.
    pub lda: i64,
    /// Elements (bytes) between segments of A.
    pub lds: i64,
    /// Elements between groups of four k values in B (`ko` stride; `Madd16`: groups of two
    /// i16); columns are one group (4 bytes) apart.
    pub ldb: i64,
    /// Elements (i32) between rows of C; columns are adjacent.
    pub ldc: i64,
    /// The element type of A: u8, i8 (sign transfer, widening) or i16 (`Madd16`).
    pub a_dtype: DType,
    /// `C = a·b` instead of `C += a·b`: the accumulators start at zero, C is only written (a
    /// resetting call, `StmtKind::Call::reset`).
    pub reset: bool,
}

impl GemmShape {
    /// Dense operands: `A: [m, k]`, `B: [k/4, n, 4]`, `C: [m, n]`.
    pub fn dense(m: i64, n: i64, k: i64) -> GemmShape {
        GemmShape { m, n, k, segments: 1, lda: k, lds: 0, ldb: 4 * n, ldc: n, a_dtype: DType::U8, reset: false }
    }

    /// Dense operands for a kernel of `method` (A u8, or i8 for sign transfer, i16 for
    /// `Madd16`, whose `B` is `[k/2, n, 2]` i16 pairs).
    pub fn dense_for(method: DotMethod, m: i64, n: i64, k: i64) -> GemmShape {
        let a_dtype = match method {
            DotMethod::SignTransfer => DType::I8,
            DotMethod::Madd16 => DType::I16,
            DotMethod::Vnni | DotMethod::MaddUbs | DotMethod::Widen | DotMethod::Amx => DType::U8,
        };
        GemmShape { ldb: pack_of(method) * n, a_dtype, ..GemmShape::dense(m, n, k) }
    }

    /// Elements of A, B and C a kernel of `method` accesses, from each base pointer.
    pub fn footprint(&self, method: DotMethod) -> (usize, usize, usize) {
        // Saturating: an absurd shape asks for more memory than any slice has.
        let span = |outer: i64, stride: i64, inner: i64| (outer - 1).saturating_mul(stride).saturating_add(inner);
        let size = |elements: i64| usize::try_from(elements).unwrap_or(usize::MAX);
        if self.m <= 0 || self.n <= 0 {
            return (0, 0, 0);
        }
        if self.k <= 0 || self.segments <= 0 {
            // No reduction: only a reset writes C (zeros).
            return (0, 0, if self.reset { size(span(self.m, self.ldc, self.n)) } else { 0 });
        }
        let a = span(self.segments, self.lds, span(self.m, self.lda, self.k));
        let pack = pack_of(method);
        let b = span(self.segments * self.k / pack, self.ldb, pack * self.n);
        (size(a), size(b), size(span(self.m, self.ldc, self.n)))
    }

    fn validate(&self, method: DotMethod) -> Result<(), KernelError> {
        let bad = |what, expected: &str, found| Err(KernelError::BadShape { what, expected: expected.into(), found });
        for (what, v) in [("m", self.m), ("n", self.n), ("k", self.k), ("segments", self.segments)] {
            if v < 0 {
                return bad(what, "non-negative", v);
            }
        }
        if self.k % pack_of(method) != 0 {
            return bad("k", if method == DotMethod::Madd16 { "a multiple of 2" } else { "a multiple of 4" }, self.k);
        }
        if self.lda < 0 {
            return bad("lda", "non-negative", self.lda);
        }
        if self.lds < 0 {
            return bad("lds", "non-negative", self.lds);
        }
        if self.ldb < 0 {
            return bad("ldb", "non-negative", self.ldb);
        }
        if self.ldc < 0 {
            return bad("ldc", "non-negative", self.ldc);
        }
        Ok(())
    }
}

/// Consecutive k values of one column packed together in B: four bytes, or two i16 for
/// `Madd16`. Either way a group is 4 bytes.
fn pack_of(method: DotMethod) -> i64 {
    if method == DotMethod::Madd16 { 2 } else { 4 }
}

/// Rows of A a VNNI call needs before it prefetches the next panel of B
/// (`next_panel_prefetch`): with fewer, the call does too little work per byte of B to hide
/// the extra traffic (a one-row product streaming its weights ran slower with it).
const PREFETCH_MIN_ROWS: i64 = 4;
/// Bytes of B a VNNI call needs to read before it prefetches the next panel: smaller panels
/// stay in the caches from one inference to the next.
const PREFETCH_MIN_PANEL: i64 = 16 * 1024;

/// How far past B a kernel prefetches (`prefetcht1`, into L2), in bytes; 0: not at all. A VNNI
/// call whose B is one register panel, held as the packed weights hold it (groups of exactly
/// its `n` columns, so that a caller's panels lie end to end), of at least
/// `PREFETCH_MIN_PANEL` bytes, and with at least `PREFETCH_MIN_ROWS` rows, prefetches the
/// panel after its own: each k step the lines one panel ahead of those it loads. A convolution
/// calls its kernel for every row of pixels on one panel before the next (channels outermost),
/// and where the network's weights overflow the caches the first of those calls waits on
/// memory; with the prefetch its panel arrives during the previous panel's calls. Prefetches
/// never fault, so the last panel's reach past the weights is harmless. Every row block of a
/// taller call prefetches again (from L2 then).
fn next_panel_prefetch(variant: KernelVariant, shape: &GemmShape, blocking: Blocking) -> i64 {
    let one_panel = shape.n as usize <= blocking.vectors * variant.width.lanes();
    let panel = shape.segments.saturating_mul(shape.k / 4).saturating_mul(shape.ldb);
    let applies = variant.method == DotMethod::Vnni
        && one_panel
        && shape.ldb == 4 * shape.n
        && shape.m >= PREFETCH_MIN_ROWS
        && panel >= PREFETCH_MIN_PANEL;
    if applies { panel } else { 0 }
}

/// Register blocking: a tile of `rows` × `vectors` accumulator registers, k loop unrolled
/// `unroll` times.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct Blocking {
    pub rows: usize,
    pub vectors: usize,
    pub unroll: usize,
}

impl Blocking {
    /// The default for `variant`: the blocking that `examples/kernel_sweep.rs` measures best, or
    /// within noise of the best, on shapes whose tiles stay in L1 as the convolution's and GEMM's
    /// calls do. On zmm the large tiles win (more independent chains, more multiply-adds per
    /// load of A and B) and small ones lose clearly. AVX-VNNI was not swept: its 4×3 tile is the
    /// largest that fits 16 ymm registers, the shape that is best for zmm. Of the AVX2 exact
    /// kernels, sign transfer takes 2 × 4 (2 `vpabsb` of A per 8 chains) and widening 2 × 2.
    pub fn default_for(variant: KernelVariant) -> Blocking {
        match (variant.method, variant.width) {
            (DotMethod::Vnni, VectorWidth::Zmm) => Blocking { rows: 6, vectors: 4, unroll: 4 },
            (DotMethod::MaddUbs, VectorWidth::Zmm) => Blocking { rows: 6, vectors: 4, unroll: 2 },
            (DotMethod::Vnni, VectorWidth::Ymm) => Blocking { rows: 4, vectors: 3, unroll: 4 },
            (DotMethod::MaddUbs, VectorWidth::Ymm) => Blocking { rows: 5, vectors: 2, unroll: 2 },
            (DotMethod::Widen, _) => Blocking { rows: 2, vectors: 2, unroll: 4 },
            (DotMethod::SignTransfer, _) => Blocking { rows: 2, vectors: 4, unroll: 4 },
            (DotMethod::Madd16, _) => Blocking { rows: 4, vectors: 2, unroll: 4 },
            // Tiles, not registers: 2 × 2 tiles of 16 × 16 (`amx`), no unrolling.
            (DotMethod::Amx, _) => Blocking { rows: 32, vectors: 2, unroll: 1 },
        }
    }

    /// Vector registers a block of `rows` × `vectors` needs (`masked`: its last column vector is
    /// partial).
    pub fn registers(variant: KernelVariant, rows: usize, vectors: usize, masked: bool) -> usize {
        // A ymm mask lives in a vector register; zmm uses k1.
        let mask = usize::from(masked && variant.width == VectorWidth::Ymm);
        let tile = rows * vectors;
        mask + match variant.method {
            // Accumulators, B vectors, the A broadcast.
            DotMethod::Vnni => tile + vectors + 1,
            // ... plus the i16 ones and the product temporary.
            DotMethod::MaddUbs => tile + vectors + 3,
            // Two accumulators and two widened B halves per column vector, A words, temporary.
            DotMethod::Widen => 2 * tile + 2 * vectors + 2,
            // ... plus A's absolute value, the signed product operand and the i16 ones.
            DotMethod::SignTransfer => tile + vectors + 4,
            // Accumulators, B vectors, the widened A pair, the product temporary.
            DotMethod::Madd16 => tile + vectors + 2,
            // Accumulates in tiles (`amx`).
            DotMethod::Amx => 0,
        }
    }
}

/// Assembles the kernel for `shape` (see the module doc; `KernelVariant::AMX_INT8` is
/// `amx::assemble_amx`); position independent, no relocations.
pub fn assemble_gemm(variant: KernelVariant, shape: &GemmShape, blocking: Blocking) -> Result<Vec<u8>, KernelError> {
    check_variant(variant, shape)?;
    for (what, v) in [("rows", blocking.rows), ("vectors", blocking.vectors), ("unroll", blocking.unroll)] {
        if v == 0 {
            return Err(KernelError::BadShape { what, expected: "at least 1".into(), found: 0 });
        }
    }
    if variant.method == DotMethod::Amx {
        return assemble_amx(shape);
    }
    let mut g = Gen::new(variant, *shape, blocking)?;
    g.kernel()?;
    Ok(crate::kernels::encode::encode(&mut g.a)?)
}

/// The kernel for `shape` computing a run-time number of its segments, under the SysV
/// signature `fn(a, b, c, segments: i64)`: `C (+)= Σ_{s < segments}` of the segments read from
/// `a` (`lds` apart) and `b` (`k/pack` groups per segment), `segments` in `[0, shape.segments]`
/// (the caller moves `a` and `b` to the first segment of a range, `StmtKind::Call::range`). No
/// segment leaves C as it is, or zeroes it for a resetting shape. The segment loop replaces
/// `assemble_gemm`'s unrolled segments; every k step is the same. Not the AMX kernel
/// (`KernelError::Unsupported`).
pub fn assemble_gemm_ranged(
    variant: KernelVariant,
    shape: &GemmShape,
    blocking: Blocking,
) -> Result<Vec<u8>, KernelError> {
    check_variant(variant, shape)?;
    for (what, v) in [("rows", blocking.rows), ("vectors", blocking.vectors), ("unroll", blocking.unroll)] {
        if v == 0 {
            return Err(KernelError::BadShape { what, expected: "at least 1".into(), found: 0 });
        }
    }
    if variant.method == DotMethod::Amx {
        return Err(KernelError::Unsupported { what: "a run-time segment count on AMX tiles".into() });
    }
    let mut g = Gen::new(variant, *shape, blocking)?;
    g.ranged = true;
    g.kernel()?;
    Ok(crate::kernels::encode::encode(&mut g.a)?)
}

/// The AMX kernel for `shape` with `spec` instead of `AmxSpec::default_for(shape)`: the same
/// checks and results as `assemble_gemm` with `KernelVariant::AMX_INT8`.
pub fn assemble_amx_gemm(shape: &GemmShape, spec: &AmxSpec) -> Result<Vec<u8>, KernelError> {
    check_variant(KernelVariant::AMX_INT8, shape)?;
    assemble_amx_with(shape, spec)
}

/// The shape is valid, and `variant` exists and takes its A.
pub(super) fn check_variant(variant: KernelVariant, shape: &GemmShape) -> Result<(), KernelError> {
    shape.validate(variant.method)?;
    if !variant.runs_at_any_level() {
        return Err(KernelError::NoSuchVariant { variant });
    }
    if !variant.method.accepts_a(shape.a_dtype) {
        return Err(KernelError::ADType { variant, found: shape.a_dtype });
    }
    Ok(())
}

/// GPR roles (all caller-saved): the three arguments advance per panel; r8/r10 point at the
/// current row block of A/C, r9 at the current k step of B, rax counts k steps, r11 row
/// blocks, rcx panels.
pub(super) const A_BASE: AsmRegister64 = rdi;
pub(super) const B_PANEL: AsmRegister64 = rsi;
const C_PANEL: AsmRegister64 = rdx;
pub(super) const A_BLOCK: AsmRegister64 = r8;
const B_STEP: AsmRegister64 = r9;
const C_BLOCK: AsmRegister64 = r10;
const K_COUNT: AsmRegister64 = rax;
const ROW_COUNT: AsmRegister64 = r11;
const PANEL_COUNT: AsmRegister64 = rcx;
/// A ranged kernel's segment count (callee-saved, so pushed and popped): the count, the
/// segments left in a block, the row block's A while the segments advance it.
pub(super) const SEGMENTS: AsmRegister64 = r12;
const SEGMENTS_LEFT: AsmRegister64 = rbx;
const A_SAVED: AsmRegister64 = r13;

pub(super) struct Gen {
    pub(super) a: CodeAssembler,
    variant: KernelVariant,
    shape: GemmShape,
    blocking: Blocking,
    /// The segments come at run time (`assemble_gemm_ranged`): a loop over `SEGMENTS` of them.
    pub(super) ranged: bool,
    /// A resetting zmm block starts its accumulators at `0 - v` (wrapping) instead of zero, `v`
    /// the i32 vector at this register (column vector `j` at `64·j` bytes; a partial one read
    /// under k1): `gemm_map` folds its epilogue's `acc - v` into the start.
    pub(super) negated_start: Option<AsmRegister64>,
    /// Where a block's registers go (`RegisterLayout`); `None`: from register 0 up.
    pub(super) layout: Option<RegisterLayout>,
    /// Instructions to spread over the first k steps of the next block (`block_with`): another
    /// block's epilogue, issued beside this block's multiply-adds instead of after its own.
    /// Straight-line code that touches no register the block uses and no flags across a step.
    pub(super) interleaved: Vec<Instruction>,
    /// `next_panel_prefetch` of the kernel.
    prefetch: i64,
}

/// Registers of a block whose accumulators must not meet those of the block before it (the
/// epilogue of one runs during the k loop of the next, `gemm_map`): the accumulators from
/// `accumulators`, the B vectors and the A broadcast from `rest`; one accumulator set.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RegisterLayout {
    pub(crate) accumulators: usize,
    pub(crate) rest: usize,
}

/// Unrolled k loop iterations of a block's first segment peeled to carry `Gen::interleaved`
/// (at most).
const SPREAD_ITERATIONS: i64 = 4;

/// Registers of one block.
pub(super) struct Tile {
    rows: usize,
    vectors: usize,
    /// Lanes of the last column vector that are inside C (`lanes()` when it is full).
    last_lanes: usize,
    /// `acc[i][j]` (Widen: `acc[i][2j + h]`, the partial sums of column half `h`).
    pub(super) acc: Vec<Vec<V>>,
    /// More accumulator sets for a VNNI tile with few accumulators (`Gen::accumulator_sets`):
    /// k step `u` goes to set `u mod (1 + extra.len())`, set 0 being `acc`; they are added into
    /// `acc` before C is stored.
    extra: Vec<Vec<Vec<V>>>,
    /// B vectors of the current k step (Widen: two widened halves per vector).
    b: Vec<V>,
    a: V,
    /// `|A|` (sign transfer).
    abs: V,
    tmp: V,
    ones: V,
    mask: V,
}

impl Tile {
    /// Every vector register the block uses.
    pub(super) fn registers(&self) -> Vec<usize> {
        let mut regs: Vec<usize> = self.acc.iter().chain(self.extra.iter().flatten()).flatten().map(|v| v.0).collect();
        regs.extend(self.b.iter().map(|v| v.0));
        regs.extend([self.a, self.abs, self.tmp, self.ones, self.mask].map(|v| v.0));
        regs.sort_unstable();
        regs.dedup();
        regs
    }

    fn masked(&self, j: usize, width: VectorWidth) -> bool {
        j + 1 == self.vectors && self.last_lanes < width.lanes()
    }
}

impl Gen {
    pub(super) fn new(variant: KernelVariant, shape: GemmShape, blocking: Blocking) -> Result<Gen, KernelError> {
        Ok(Gen {
            a: CodeAssembler::new(64)?,
            variant,
            shape,
            blocking,
            ranged: false,
            negated_start: None,
            layout: None,
            interleaved: Vec::new(),
            prefetch: next_panel_prefetch(variant, &shape, blocking),
        })
    }

    /// Saves the callee-saved registers a ranged kernel uses (before anything else).
    pub(super) fn save_segment_registers(&mut self) -> Result<(), KernelError> {
        for r in [SEGMENTS_LEFT, SEGMENTS, A_SAVED] {
            self.a.push(r)?;
        }
        Ok(())
    }

    /// Restores what `save_segment_registers` saved (before returning).
    pub(super) fn restore_segment_registers(&mut self) -> Result<(), KernelError> {
        for r in [A_SAVED, SEGMENTS, SEGMENTS_LEFT] {
            self.a.pop(r)?;
        }
        Ok(())
    }

    fn width(&self) -> VectorWidth {
        self.variant.width
    }

    fn kernel(&mut self) -> Result<(), KernelError> {
        let s = self.shape;
        let lanes = self.width().lanes() as i64;
        let panel_cols = self.blocking.vectors as i64 * lanes;
        if self.ranged {
            self.save_segment_registers()?;
            // The fourth argument.
            self.a.mov(SEGMENTS, rcx)?;
        }
        // A reset over an empty reduction still writes C (zeros).
        if s.m > 0 && s.n > 0 && ((s.k > 0 && s.segments > 0) || s.reset) {
            let full_panels = s.n / panel_cols;
            let tail_cols = s.n % panel_cols;
            if full_panels > 0 {
                let mut top = self.a.create_label();
                if full_panels > 1 {
                    self.a.mov(PANEL_COUNT, full_panels)?;
                }
                self.a.set_label(&mut top)?;
                self.panel(self.blocking.vectors, self.width().lanes())?;
                if full_panels > 1 || tail_cols > 0 {
                    let step = imm32("a column panel", panel_cols * 4)?;
                    self.a.add(B_PANEL, step)?;
                    self.a.add(C_PANEL, step)?;
                }
                if full_panels > 1 {
                    self.a.dec(PANEL_COUNT)?;
                    self.a.jnz(top)?;
                }
            }
            if tail_cols > 0 {
                let vectors = (tail_cols as usize).div_ceil(self.width().lanes());
                let last_lanes = tail_cols as usize - (vectors - 1) * self.width().lanes();
                self.panel(vectors, last_lanes)?;
            }
        }
        if self.ranged {
            self.restore_segment_registers()?;
        }
        self.a.vzeroupper()?;
        self.a.ret()?;
        Ok(())
    }

    /// Every row block of one column panel.
    fn panel(&mut self, vectors: usize, last_lanes: usize) -> Result<(), KernelError> {
        let s = self.shape;
        // A ymm mask takes a register: partial panels drop rows until the tile fits.
        let masked = last_lanes < self.width().lanes();
        let mut block_rows = self.blocking.rows;
        while masked
            && block_rows > 1
            && Blocking::registers(self.variant, block_rows, vectors, true) > self.width().registers()
        {
            block_rows -= 1;
        }
        let rows = block_rows as i64;
        self.a.mov(A_BLOCK, A_BASE)?;
        self.a.mov(C_BLOCK, C_PANEL)?;
        let full_blocks = s.m / rows;
        let tail_rows = (s.m % rows) as usize;
        if full_blocks > 0 {
            let mut top = self.a.create_label();
            if full_blocks > 1 {
                self.a.mov(ROW_COUNT, full_blocks)?;
            }
            self.a.set_label(&mut top)?;
            self.block(block_rows, vectors, last_lanes)?;
            if full_blocks > 1 || tail_rows > 0 {
                self.a.add(A_BLOCK, imm32("a row block of A", rows * s.lda * s.a_dtype.bytes() as i64)?)?;
                self.a.add(C_BLOCK, imm32("a row block of C", rows * s.ldc * 4)?)?;
            }
            if full_blocks > 1 {
                self.a.dec(ROW_COUNT)?;
                self.a.jnz(top)?;
            }
        }
        if tail_rows > 0 {
            self.block(tail_rows, vectors, last_lanes)?;
        }
        Ok(())
    }

    /// Independent accumulator chains a `vpdpbusd` tile needs to cover the instruction's latency
    /// at its throughput (the latency in cycles times the instructions issued per cycle).
    const VNNI_CHAINS: usize = 8;

    /// Accumulator sets for a tile: 1, except a VNNI tile of fewer than `VNNI_CHAINS`
    /// accumulators, whose `vpdpbusd` chains would wait on their own latency (a one-row GEMV
    /// with one zmm of columns would run at a fraction of the instruction's rate), which takes
    /// as many as fit the registers.
    fn accumulator_sets(&self, rows: usize, vectors: usize, masked: bool) -> usize {
        let tile = rows * vectors;
        if self.variant.method != DotMethod::Vnni || tile >= Self::VNNI_CHAINS {
            return 1;
        }
        let base = Blocking::registers(self.variant, rows, vectors, masked);
        let room = self.width().registers().saturating_sub(base) / tile;
        Self::VNNI_CHAINS.div_ceil(tile).min(room + 1).max(1)
    }

    pub(super) fn allocate(&self, rows: usize, vectors: usize, last_lanes: usize) -> Result<Tile, KernelError> {
        let variant = self.variant;
        let masked = last_lanes < self.width().lanes();
        let needed = Blocking::registers(variant, rows, vectors, masked);
        let available = self.width().registers();
        if needed > available {
            return Err(KernelError::TooManyRegisters { variant, rows, vectors, needed, available });
        }
        let per_vector = if variant.method == DotMethod::Widen { 2 } else { 1 };
        // The accumulators row by row from `first`, the other registers from `next`.
        let row = vectors * per_vector;
        let (first, mut next) = match self.layout {
            Some(layout) => (layout.accumulators, layout.rest),
            None => (0, rows * row),
        };
        let acc = (0..rows).map(|i| (0..row).map(|j| V(first + i * row + j)).collect()).collect();
        let mut take = |count: usize| {
            let regs: Vec<V> = (next..next + count).map(V).collect();
            next += count;
            regs
        };
        let b = take(vectors * per_vector);
        let a = take(1)[0];
        // Registers a method does not use alias the last one; they are never emitted.
        let tmp = if variant.method == DotMethod::Vnni { a } else { take(1)[0] };
        let uses_ones = matches!(variant.method, DotMethod::MaddUbs | DotMethod::SignTransfer);
        let ones = if uses_ones { take(1)[0] } else { a };
        let abs = if variant.method == DotMethod::SignTransfer { take(1)[0] } else { a };
        let mask = if masked && self.width() == VectorWidth::Ymm { take(1)[0] } else { a };
        let sets = if self.layout.is_some() { 1 } else { self.accumulator_sets(rows, vectors, masked) };
        let extra = (1..sets).map(|_| (0..rows).map(|_| take(vectors)).collect()).collect();
        let tile = Tile { rows, vectors, last_lanes, acc, extra, b, a, abs, tmp, ones, mask };
        if tile.registers().iter().any(|&r| r >= available) {
            return Err(KernelError::TooManyRegisters { variant, rows, vectors, needed, available });
        }
        Ok(tile)
    }

    /// One row block: load or zero the accumulators, the k loop, add/store C.
    fn block(&mut self, rows: usize, vectors: usize, last_lanes: usize) -> Result<(), KernelError> {
        self.block_with(rows, vectors, last_lanes, true).map(|_| ())
    }

    /// `block`, storing C only with `store`; the tile, whose `acc[i][j]` (Widen: `acc[i][2j]`)
    /// then holds the sums of row `i`, column vector `j`.
    pub(super) fn block_with(
        &mut self,
        rows: usize,
        vectors: usize,
        last_lanes: usize,
        store: bool,
    ) -> Result<Tile, KernelError> {
        let t = self.allocate(rows, vectors, last_lanes)?;
        let s = self.shape;
        if last_lanes < self.width().lanes() {
            self.set_mask(&t)?;
        }
        if matches!(self.variant.method, DotMethod::MaddUbs | DotMethod::SignTransfer) {
            self.ones16(t.ones)?;
        }
        for i in 0..rows {
            for j in 0..vectors {
                match self.variant.method {
                    DotMethod::Widen => {
                        self.zero(t.acc[i][2 * j])?;
                        self.zero(t.acc[i][2 * j + 1])?;
                    }
                    _ if s.reset && self.negated_start.is_some() => self.negated_start(&t, i, j)?,
                    _ if s.reset => self.zero(t.acc[i][j])?,
                    _ => self.load_c(&t, t.acc[i][j], i, j)?,
                }
                for set in &t.extra {
                    self.zero(set[i][j])?;
                }
            }
        }
        self.a.mov(B_STEP, B_PANEL)?;
        let steps = s.k / self.k_step();
        // Every accumulator set gets steps of each unrolled iteration.
        let sets = t.extra.len() + 1;
        let unroll = self.blocking.unroll.next_multiple_of(sets) as i64;
        let mut spread = std::mem::take(&mut self.interleaved);
        if self.ranged {
            self.segment_loop(&t, steps, unroll, std::mem::take(&mut spread))?;
        }
        for segment in 0..if self.ranged { 0 } else { s.segments } {
            let a_offset = segment * s.lds * s.a_dtype.bytes() as i64;
            let peeled = self.spread_over_steps(&t, a_offset, steps, unroll, std::mem::take(&mut spread))?;
            self.k_loop(&t, a_offset + 4 * peeled, steps - peeled, unroll)?;
            if segment + 1 < s.segments && steps % unroll > 0 {
                self.a.add(B_STEP, imm32("the k steps of B after the loop", steps % unroll * self.ldb_bytes())?)?;
            }
        }
        for i in 0..rows {
            for j in 0..vectors {
                if self.variant.method == DotMethod::Widen {
                    self.reduce_widened(&t, i, j)?;
                }
                for set in &t.extra {
                    self.vpaddd(t.acc[i][j], t.acc[i][j], set[i][j])?;
                }
                if store {
                    self.store_c(&t, t.acc[i][j * if self.variant.method == DotMethod::Widen { 2 } else { 1 }], i, j)?;
                }
            }
        }
        Ok(t)
    }

    /// The k loop of `steps` steps (`unroll` per iteration) for each of `SEGMENTS` segments,
    /// A_BLOCK advanced `lds` per segment and restored after, B continuing where it stopped.
    /// `spread` (`spread_over_steps`) goes into the first segment's first steps, or runs alone
    /// when there is no segment.
    fn segment_loop(&mut self, t: &Tile, steps: i64, unroll: i64, spread: Vec<Instruction>) -> Result<(), KernelError> {
        let mut done = self.a.create_label();
        let mut top = self.a.create_label();
        self.a.mov(A_SAVED, A_BLOCK)?;
        self.a.mov(SEGMENTS_LEFT, SEGMENTS)?;
        self.a.test(SEGMENTS_LEFT, SEGMENTS_LEFT)?;
        if spread.is_empty() {
            self.a.jle(done)?;
        } else {
            let mut first = self.a.create_label();
            self.a.jg(first)?;
            for instruction in spread.iter().cloned() {
                self.a.add_instruction(instruction)?;
            }
            self.a.jmp(done)?;
            self.a.set_label(&mut first)?;
            let peeled = self.spread_over_steps(t, 0, steps, unroll, spread)?;
            self.k_loop(t, 4 * peeled, steps - peeled, unroll)?;
            self.next_segment(steps, unroll)?;
            self.a.jz(done)?;
        }
        self.a.set_label(&mut top)?;
        self.k_loop(t, 0, steps, unroll)?;
        self.next_segment(steps, unroll)?;
        self.a.jnz(top)?;
        self.a.set_label(&mut done)?;
        self.a.mov(A_BLOCK, A_SAVED)?;
        Ok(())
    }

    /// After a segment of `segment_loop`: B past the steps after the loop, A to the next
    /// segment, one segment less left (the flags of that count).
    fn next_segment(&mut self, steps: i64, unroll: i64) -> Result<(), KernelError> {
        let s = self.shape;
        if steps % unroll > 0 {
            self.a.add(B_STEP, imm32("the k steps of B after the loop", steps % unroll * self.ldb_bytes())?)?;
        }
        self.a.add(A_BLOCK, imm32("a segment of A", s.lds * s.a_dtype.bytes() as i64)?)?;
        self.a.dec(SEGMENTS_LEFT)?;
        Ok(())
    }

    /// The first k steps of a segment (a whole number of unrolled iterations, at most
    /// `SPREAD_ITERATIONS`, or none when `spread` is empty or the segment is shorter) as
    /// straight-line code with `spread`'s instructions in equal parts after each step (all of
    /// them before the loop where no step is peeled); B_STEP advanced past them. Returns the
    /// steps peeled: the loop does the rest, A `4 ·` that many bytes further.
    fn spread_over_steps(
        &mut self,
        t: &Tile,
        a_offset: i64,
        steps: i64,
        unroll: i64,
        spread: Vec<Instruction>,
    ) -> Result<i64, KernelError> {
        if spread.is_empty() {
            return Ok(0);
        }
        let peeled = (steps / unroll).min(SPREAD_ITERATIONS) * unroll;
        if peeled == 0 {
            for instruction in spread {
                self.a.add_instruction(instruction)?;
            }
            return Ok(0);
        }
        let per_step = spread.len().div_ceil(peeled as usize);
        let mut rest = spread.into_iter();
        self.a.xor(K_COUNT, K_COUNT)?;
        for u in 0..peeled {
            self.step(t, a_offset, u)?;
            for instruction in rest.by_ref().take(per_step) {
                self.a.add_instruction(instruction)?;
            }
        }
        self.a.add(B_STEP, imm32("the peeled k steps of B", peeled * self.ldb_bytes())?)?;
        Ok(peeled)
    }

    /// One segment's k loop: `steps` steps, `unroll` per iteration, then the remainder, reading
    /// A at `a_offset` bytes from A_BLOCK and advancing B_STEP by the unrolled iterations (not
    /// past the remainder: the caller's choice).
    fn k_loop(&mut self, t: &Tile, a_offset: i64, steps: i64, unroll: i64) -> Result<(), KernelError> {
        let loops = steps / unroll;
        self.a.xor(K_COUNT, K_COUNT)?;
        if loops > 0 {
            let mut top = self.a.create_label();
            self.a.set_label(&mut top)?;
            for u in 0..unroll {
                self.step(t, a_offset, u)?;
            }
            self.a.add(B_STEP, imm32("an unrolled k step of B", unroll * self.ldb_bytes())?)?;
            if loops > 1 || steps % unroll > 0 {
                self.a.add(K_COUNT, imm32("k steps", unroll)?)?;
            }
            if loops > 1 {
                self.a.cmp(K_COUNT, imm32("k steps", loops * unroll)?)?;
                self.a.jb(top)?;
            }
        }
        for u in 0..steps % unroll {
            self.step(t, a_offset, u)?;
        }
        Ok(())
    }

    /// k values per step: one packed group of B.
    fn k_step(&self) -> i64 {
        pack_of(self.variant.method)
    }

    /// Bytes between k groups of B.
    fn ldb_bytes(&self) -> i64 {
        self.shape.ldb * 4 / self.k_step()
    }

    /// One k step (`k_step` values of k), `u` steps past `K_COUNT`/`B_STEP`, in the segment of A
    /// `a_offset` bytes past the row block.
    fn step(&mut self, t: &Tile, a_offset: i64, u: i64) -> Result<(), KernelError> {
        let s = self.shape;
        let ab = s.a_dtype.bytes() as i64;
        let vbytes = self.width().bytes() as i64;
        for j in 0..t.vectors {
            let off = imm32("B", u * self.ldb_bytes() + j as i64 * vbytes)?;
            match self.variant.method {
                DotMethod::Widen => self.load_b_widened(t, j, B_STEP + off)?,
                _ if t.masked(j, self.width()) => self.load_masked(t, t.b[j], B_STEP + off)?,
                _ => self.load(t.b[j], B_STEP + off)?,
            }
            // One prefetch per line of this step's B, one panel ahead.
            let line = u * self.ldb_bytes() + j as i64 * vbytes;
            if self.prefetch > 0 && line % 64 == 0 {
                self.a.prefetcht1(byte_ptr(B_STEP + imm32("the next panel of B", line + self.prefetch)?))?;
            }
        }
        for i in 0..t.rows {
            // A k step is 4 bytes of A: four u8/i8 or two i16.
            let a_mem = A_BLOCK + K_COUNT * 4 + imm32("A", a_offset + i as i64 * s.lda * ab + 4 * u)?;
            match self.variant.method {
                // Assembled by `amx`, never here.
                DotMethod::Amx => return Err(KernelError::NoSuchVariant { variant: self.variant }),
                DotMethod::Vnni => {
                    self.broadcast_d(t.a, a_mem)?;
                    let set = u as usize % (t.extra.len() + 1);
                    for j in 0..t.vectors {
                        let acc = if set == 0 { t.acc[i][j] } else { t.extra[set - 1][i][j] };
                        self.vpdpbusd(acc, t.a, t.b[j])?;
                    }
                }
                DotMethod::MaddUbs => {
                    self.broadcast_d(t.a, a_mem)?;
                    for j in 0..t.vectors {
                        self.vpmaddubsw(t.tmp, t.a, t.b[j])?;
                        self.vpmaddwd(t.tmp, t.tmp, t.ones)?;
                        self.vpaddd(t.acc[i][j], t.acc[i][j], t.tmp)?;
                    }
                }
                DotMethod::SignTransfer => {
                    // s·b = |s|·(sign(s)·b): |s| ≤ 128 is a valid u8 operand and each product
                    // is at most 128·127 in magnitude when no b is -128, so the pair sums of
                    // vpmaddubsw (≤ 32512) never saturate.
                    self.a.vpbroadcastd(ymm(t.a), dword_ptr(a_mem))?;
                    self.a.vpabsb(ymm(t.abs), ymm(t.a))?;
                    for j in 0..t.vectors {
                        self.a.vpsignb(ymm(t.tmp), ymm(t.b[j]), ymm(t.a))?;
                        self.a.vpmaddubsw(ymm(t.tmp), ymm(t.abs), ymm(t.tmp))?;
                        self.a.vpmaddwd(ymm(t.tmp), ymm(t.tmp), ymm(t.ones))?;
                        self.a.vpaddd(ymm(t.acc[i][j]), ymm(t.acc[i][j]), ymm(t.tmp))?;
                    }
                }
                DotMethod::Madd16 => {
                    // The i16 pair [a0 a1] in every dword.
                    self.a.vpbroadcastd(ymm(t.a), dword_ptr(a_mem))?;
                    for j in 0..t.vectors {
                        self.a.vpmaddwd(ymm(t.tmp), ymm(t.a), ymm(t.b[j]))?;
                        self.a.vpaddd(ymm(t.acc[i][j]), ymm(t.acc[i][j]), ymm(t.tmp))?;
                    }
                }
                DotMethod::Widen => {
                    // [a0 a1 a2 a3] as words, repeated for the 4 columns of a widened half.
                    self.a.vpbroadcastd(xmm(t.a), dword_ptr(a_mem))?;
                    if s.a_dtype == DType::I8 {
                        self.a.vpmovsxbw(ymm(t.a), xmm(t.a))?;
                    } else {
                        self.a.vpmovzxbw(ymm(t.a), xmm(t.a))?;
                    }
                    for h in 0..2 * t.vectors {
                        self.a.vpmaddwd(ymm(t.tmp), ymm(t.b[h]), ymm(t.a))?;
                        self.a.vpaddd(ymm(t.acc[i][h]), ymm(t.acc[i][h]), ymm(t.tmp))?;
                    }
                }
            }
        }
        Ok(())
    }

    /// Widened halves of B vector `j`: columns 0–3 and 4–7 as i16, 4 k values per column.
    fn load_b_widened(&mut self, t: &Tile, j: usize, mem: AsmMemoryOperand) -> Result<(), KernelError> {
        let (lo, hi) = (t.b[2 * j], t.b[2 * j + 1]);
        if t.masked(j, self.width()) {
            self.a.vpmaskmovd(ymm(t.tmp), ymm(t.mask), ymmword_ptr(mem))?;
            self.a.vpmovsxbw(ymm(lo), xmm(t.tmp))?;
            self.a.vextracti128(xmm(t.tmp), ymm(t.tmp), 1)?;
            self.a.vpmovsxbw(ymm(hi), xmm(t.tmp))?;
        } else {
            self.a.vpmovsxbw(ymm(lo), xmmword_ptr(mem))?;
            self.a.vpmovsxbw(ymm(hi), xmmword_ptr(mem + 16))?;
        }
        Ok(())
    }

    /// Folds the two pair-sum accumulators of column vector `j` into `acc[i][2j]`, columns in
    /// order, plus C.
    fn reduce_widened(&mut self, t: &Tile, i: usize, j: usize) -> Result<(), KernelError> {
        let (lo, hi) = (t.acc[i][2 * j], t.acc[i][2 * j + 1]);
        // lo = [c0 c0' c1 c1' | c2 c2' c3 c3'] (two pair sums per column), hi likewise for
        // c4..c7; hadd gives [c0 c1 c4 c5 | c2 c3 c6 c7], and qword order 0,2,1,3 fixes it.
        self.a.vphaddd(ymm(lo), ymm(lo), ymm(hi))?;
        self.a.vpermq(ymm(lo), ymm(lo), 0xD8)?;
        if !self.shape.reset {
            self.load_c(t, t.tmp, i, j)?;
            self.a.vpaddd(ymm(lo), ymm(lo), ymm(t.tmp))?;
        }
        Ok(())
    }

    fn c_mem(&self, i: usize, j: usize) -> Result<AsmMemoryOperand, KernelError> {
        let off = i as i64 * self.shape.ldc * 4 + (j * self.width().bytes()) as i64;
        Ok(C_BLOCK + imm32("C", off)?)
    }

    fn load_c(&mut self, t: &Tile, dst: V, i: usize, j: usize) -> Result<(), KernelError> {
        let mem = self.c_mem(i, j)?;
        if t.masked(j, self.width()) { self.load_masked(t, dst, mem) } else { self.load(dst, mem) }
    }

    fn store_c(&mut self, t: &Tile, src: V, i: usize, j: usize) -> Result<(), KernelError> {
        let mem = self.c_mem(i, j)?;
        match (self.width(), t.masked(j, self.width())) {
            (VectorWidth::Zmm, false) => self.a.vmovdqu32(zmmword_ptr(mem), zmm(src))?,
            (VectorWidth::Zmm, true) => self.a.vmovdqu32(zmmword_ptr(mem).k1(), zmm(src))?,
            (VectorWidth::Ymm, false) => self.a.vmovdqu(ymmword_ptr(mem), ymm(src))?,
            (VectorWidth::Ymm, true) => self.a.vpmaskmovd(ymmword_ptr(mem), ymm(t.mask), ymm(src))?,
        }
        Ok(())
    }

    /// The lane mask of a partial last column vector: k1 (zmm) or `t.mask` (ymm, all-ones
    /// dwords for the lanes inside C).
    fn set_mask(&mut self, t: &Tile) -> Result<(), KernelError> {
        match self.width() {
            VectorWidth::Zmm => {
                self.a.mov(eax, (1u32 << t.last_lanes) - 1)?;
                self.a.kmovw(k1, eax)?;
            }
            VectorWidth::Ymm => {
                // One 0xff byte per lane inside C, sign-extended to dwords.
                let bytes = if t.last_lanes == 0 { 0 } else { u64::MAX >> (64 - 8 * t.last_lanes) };
                self.a.mov(rax, bytes)?;
                self.a.vmovq(xmm(t.mask), rax)?;
                self.a.vpmovsxbd(ymm(t.mask), xmm(t.mask))?;
            }
        }
        Ok(())
    }

    fn load(&mut self, dst: V, mem: AsmMemoryOperand) -> Result<(), KernelError> {
        match self.width() {
            VectorWidth::Zmm => self.a.vmovdqu32(zmm(dst), zmmword_ptr(mem))?,
            VectorWidth::Ymm => self.a.vmovdqu(ymm(dst), ymmword_ptr(mem))?,
        }
        Ok(())
    }

    /// Loads the lanes inside C and zeroes the others; masked-off lanes are never accessed.
    fn load_masked(&mut self, t: &Tile, dst: V, mem: AsmMemoryOperand) -> Result<(), KernelError> {
        match self.width() {
            VectorWidth::Zmm => self.a.vmovdqu32(zmm(dst).k1().z(), zmmword_ptr(mem))?,
            VectorWidth::Ymm => self.a.vpmaskmovd(ymm(dst), ymm(t.mask), ymmword_ptr(mem))?,
        }
        Ok(())
    }

    /// `acc[i][j] = 0 - v[j]` (`negated_start`): computed in row 0, copied to the rows below.
    fn negated_start(&mut self, t: &Tile, i: usize, j: usize) -> Result<(), KernelError> {
        let (Some(base), VectorWidth::Zmm) = (self.negated_start, self.width()) else {
            return Err(KernelError::Unsupported { what: "a negated start outside a zmm block".into() });
        };
        let dst = t.acc[i][j];
        if i > 0 {
            self.a.vmovdqa32(zmm(dst), zmm(t.acc[0][j]))?;
            return Ok(());
        }
        self.zero(dst)?;
        let mem = zmmword_ptr(base + imm32("a start vector", (j * self.width().bytes()) as i64)?);
        if t.masked(j, self.width()) {
            self.a.vpsubd(zmm(dst).k1().z(), zmm(dst), mem)?;
        } else {
            self.a.vpsubd(zmm(dst), zmm(dst), mem)?;
        }
        Ok(())
    }

    fn zero(&mut self, dst: V) -> Result<(), KernelError> {
        match self.width() {
            VectorWidth::Zmm => self.a.vpxord(zmm(dst), zmm(dst), zmm(dst))?,
            VectorWidth::Ymm => self.a.vpxor(ymm(dst), ymm(dst), ymm(dst))?,
        }
        Ok(())
    }

    /// Every i16 lane = 1.
    fn ones16(&mut self, dst: V) -> Result<(), KernelError> {
        match self.width() {
            VectorWidth::Zmm => {
                self.a.vpternlogd(zmm(dst), zmm(dst), zmm(dst), 0xff)?;
                self.a.vpsrlw(zmm(dst), zmm(dst), 15)?;
            }
            VectorWidth::Ymm => {
                self.a.vpcmpeqw(ymm(dst), ymm(dst), ymm(dst))?;
                self.a.vpsrlw(ymm(dst), ymm(dst), 15)?;
            }
        }
        Ok(())
    }

    fn broadcast_d(&mut self, dst: V, mem: AsmMemoryOperand) -> Result<(), KernelError> {
        match self.width() {
            VectorWidth::Zmm => self.a.vpbroadcastd(zmm(dst), dword_ptr(mem))?,
            VectorWidth::Ymm => self.a.vpbroadcastd(ymm(dst), dword_ptr(mem))?,
        }
        Ok(())
    }

    /// `acc += dot4(u8 a, i8 b)` per i32 lane; ymm is VEX encoded (AVX-VNNI).
    fn vpdpbusd(&mut self, acc: V, a: V, b: V) -> Result<(), KernelError> {
        match self.width() {
            VectorWidth::Zmm => self.a.vpdpbusd(zmm(acc), zmm(a), zmm(b))?,
            VectorWidth::Ymm => self.a.vex().vpdpbusd(ymm(acc), ymm(a), ymm(b))?,
        }
        Ok(())
    }

    /// `dst = sat_i16(a0·b0 + a1·b1)` per i16 lane, `a` unsigned, `b` signed.
    fn vpmaddubsw(&mut self, dst: V, a: V, b: V) -> Result<(), KernelError> {
        match self.width() {
            VectorWidth::Zmm => self.a.vpmaddubsw(zmm(dst), zmm(a), zmm(b))?,
            VectorWidth::Ymm => self.a.vpmaddubsw(ymm(dst), ymm(a), ymm(b))?,
        }
        Ok(())
    }

    fn vpmaddwd(&mut self, dst: V, x: V, y: V) -> Result<(), KernelError> {
        match self.width() {
            VectorWidth::Zmm => self.a.vpmaddwd(zmm(dst), zmm(x), zmm(y))?,
            VectorWidth::Ymm => self.a.vpmaddwd(ymm(dst), ymm(x), ymm(y))?,
        }
        Ok(())
    }

    fn vpaddd(&mut self, dst: V, x: V, y: V) -> Result<(), KernelError> {
        match self.width() {
            VectorWidth::Zmm => self.a.vpaddd(zmm(dst), zmm(x), zmm(y))?,
            VectorWidth::Ymm => self.a.vpaddd(ymm(dst), ymm(x), ymm(y))?,
        }
        Ok(())
    }
}
