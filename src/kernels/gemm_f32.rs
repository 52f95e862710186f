//! The f32 GEMM kernel generator (`IntrinKind::F32Gemm`).
//!
//! A kernel computes, for one shape with compile-time strides,
//! `C[i, j] = C[i, j] + A[i, 0]·B[0, j] + … + A[i, k-1]·B[k-1, j]` in f32 (`A` rows `lda`
//! elements apart, `B` rows `ldb` apart, `C` rows `ldc` apart, each row contiguous), under the
//! SysV signature `fn(a: *const f32, b: *const f32, c: *mut f32)`.
//!
//! Exactness: every product is a `vmulps` (rounded to f32), added to its accumulator by a
//! `vaddps` in ascending `k`, the accumulator first: the fold of the declaration's float `sum`,
//! lane by lane, with no fused multiply-add and no reassociation. A resetting call starts the
//! accumulators at +0.0 (the sum's identity), an updating one at C. The kernels run under the
//! default MXCSR (round to nearest, denormals kept), as the interpreter's arithmetic does.
//! Separate multiplies and adds cost no throughput where the CPU has separate add pipes,
//! given enough independent accumulators to cover the add's latency.
//!
//! Loop structure, as the int8 kernels (`gemm`): column panels of `vectors` registers, row
//! blocks of `rows` rows, then the k loop, unrolled; the accumulator tile lives in registers
//! for the whole k loop; each k step loads one vector per column group of B and broadcasts one
//! element of A per row. Partial panels use opmask k1 (zmm) or `vmaskmovps` (ymm), so nothing
//! outside the operands is read or written; a partial row block is the same code with fewer
//! rows. Only caller-saved registers; every kernel ends with `vzeroupper`.

use iced_x86::code_asm::*;

use crate::error::KernelError;
use crate::isa::VectorWidth;
use crate::kernels::imm32;
use crate::kernels::vreg::{V, xmm, ymm, zmm};

/// One kernel's problem: sizes and strides (elements), all compile-time constants.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct F32GemmShape {
    pub m: i64,
    pub n: i64,
    pub k: i64,
    pub lda: i64,
    pub ldb: i64,
    pub ldc: i64,
    /// `C = A·B` from +0.0 instead of `C += A·B`: C is only written.
    pub reset: bool,
}

impl F32GemmShape {
    /// Dense operands: `A: [m, k]`, `B: [k, n]`, `C: [m, n]`.
    pub fn dense(m: i64, n: i64, k: i64) -> F32GemmShape {
        F32GemmShape { m, n, k, lda: k, ldb: n, ldc: n, reset: false }
    }

    /// Elements of A, B and C the kernel accesses from each base pointer.
    pub fn footprint(&self) -> (usize, usize, usize) {
        let span = |outer: i64, stride: i64, inner: i64| (outer - 1).saturating_mul(stride).saturating_add(inner);
        let size = |elements: i64| usize::try_from(elements).unwrap_or(usize::MAX);
        if self.m <= 0 || self.n <= 0 {
            return (0, 0, 0);
        }
        if self.k <= 0 {
            return (0, 0, if self.reset { size(span(self.m, self.ldc, self.n)) } else { 0 });
        }
        (
            size(span(self.m, self.lda, self.k)),
            size(span(self.k, self.ldb, self.n)),
            size(span(self.m, self.ldc, self.n)),
        )
    }

    fn validate(&self) -> Result<(), KernelError> {
        let fields =
            [("m", self.m), ("n", self.n), ("k", self.k), ("lda", self.lda), ("ldb", self.ldb), ("ldc", self.ldc)];
        match fields.into_iter().find(|(_, v)| *v < 0) {
            Some((what, found)) => Err(KernelError::BadShape { what, expected: "non-negative".into(), found }),
            None => Ok(()),
        }
    }
}

/// Register blocking: `rows` × `vectors` accumulators, the k loop unrolled `unroll` times.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct F32Blocking {
    pub rows: usize,
    pub vectors: usize,
    pub unroll: usize,
}

impl F32Blocking {
    /// The largest tile of the width: 6 × 4 zmm (24 accumulators, 4 B vectors, the A broadcast
    /// and two product temporaries of 32) or 6 × 2 ymm (12, 2, 1 and 1 of 16). Six rows reuse
    /// each B vector six times per load.
    pub fn default_for(width: VectorWidth) -> F32Blocking {
        match width {
            VectorWidth::Zmm => F32Blocking { rows: 6, vectors: 4, unroll: 4 },
            VectorWidth::Ymm => F32Blocking { rows: 6, vectors: 2, unroll: 4 },
        }
    }

    /// Vector registers a block needs besides its product temporaries (`masked`: the last
    /// column vector is partial; a ymm mask takes a register).
    pub fn registers(width: VectorWidth, rows: usize, vectors: usize, masked: bool) -> usize {
        rows * vectors + vectors + 1 + usize::from(masked && width == VectorWidth::Ymm)
    }

    /// The blocking for a call's `m × n` tile: as many column vectors as the tile has, up to the
    /// default's, and rows filling the default's accumulator count, in evenly filled blocks.
    pub fn for_tile(width: VectorWidth, m: i64, n: i64) -> F32Blocking {
        let default = F32Blocking::default_for(width);
        let vectors = (n.max(1) as usize).div_ceil(width.lanes()).clamp(1, default.vectors);
        let masked = n % width.lanes() as i64 != 0;
        let mut rows = (default.rows * default.vectors / vectors).clamp(1, m.max(1) as usize);
        while rows > 1 && F32Blocking::registers(width, rows, vectors, masked) + 1 > width.registers() {
            rows -= 1;
        }
        let blocks = (m.max(1) as usize).div_ceil(rows);
        F32Blocking { rows: (m.max(1) as usize).div_ceil(blocks), vectors, unroll: default.unroll }
    }
}

/// Assembles the kernel for `shape` at `width` (see the module doc); position independent, no
/// relocations.
pub fn assemble_f32_gemm(
    width: VectorWidth,
    shape: &F32GemmShape,
    blocking: F32Blocking,
) -> Result<Vec<u8>, KernelError> {
    shape.validate()?;
    for (what, v) in [("rows", blocking.rows), ("vectors", blocking.vectors), ("unroll", blocking.unroll)] {
        if v == 0 {
            return Err(KernelError::BadShape { what, expected: "at least 1".into(), found: 0 });
        }
    }
    if F32Blocking::registers(width, blocking.rows, blocking.vectors, false) + 1 > width.registers() {
        let expected = format!("a tile that leaves a temporary of the {} vector registers", width.registers());
        return Err(KernelError::BadShape {
            what: "rows × vectors",
            expected,
            found: (blocking.rows * blocking.vectors) as i64,
        });
    }
    let mut g = Gen { a: CodeAssembler::new(64)?, width, shape: *shape, blocking };
    g.kernel()?;
    Ok(crate::kernels::encode::encode(&mut g.a)?)
}

/// GPR roles (caller-saved), as in `gemm`: the arguments advance per panel; r8/r10 point at
/// the row block of A/C, r9 at the k step of B; rax counts k steps, r11 row blocks, rcx panels.
const A_BASE: AsmRegister64 = rdi;
const B_PANEL: AsmRegister64 = rsi;
const C_PANEL: AsmRegister64 = rdx;
const A_BLOCK: AsmRegister64 = r8;
const B_STEP: AsmRegister64 = r9;
const C_BLOCK: AsmRegister64 = r10;
const K_COUNT: AsmRegister64 = rax;
const ROW_COUNT: AsmRegister64 = r11;
const PANEL_COUNT: AsmRegister64 = rcx;

/// Registers of one block.
struct Tile {
    rows: usize,
    vectors: usize,
    /// Lanes of the last column vector inside C.
    last_lanes: usize,
    acc: Vec<Vec<V>>,
    b: Vec<V>,
    a: V,
    /// Product temporaries, used in turn.
    tmp: Vec<V>,
    /// The ymm lane mask (unused with zmm, which masks with k1).
    mask: V,
}

impl Tile {
    fn masked(&self, j: usize, width: VectorWidth) -> bool {
        j + 1 == self.vectors && self.last_lanes < width.lanes()
    }
}

struct Gen {
    a: CodeAssembler,
    width: VectorWidth,
    shape: F32GemmShape,
    blocking: F32Blocking,
}

impl Gen {
    fn kernel(&mut self) -> Result<(), KernelError> {
        let s = self.shape;
        let lanes = self.width.lanes();
        let panel_cols = (self.blocking.vectors * lanes) as i64;
        if s.m > 0 && s.n > 0 && (s.k > 0 || s.reset) {
            let full_panels = s.n / panel_cols;
            let tail_cols = s.n % panel_cols;
            if full_panels > 0 {
                let mut top = self.a.create_label();
                if full_panels > 1 {
                    self.a.mov(PANEL_COUNT, full_panels)?;
                }
                self.a.set_label(&mut top)?;
                self.panel(self.blocking.vectors, lanes)?;
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
                let vectors = (tail_cols as usize).div_ceil(lanes);
                self.panel(vectors, tail_cols as usize - (vectors - 1) * lanes)?;
            }
        }
        self.a.vzeroupper()?;
        self.a.ret()?;
        Ok(())
    }

    /// Every row block of one column panel.
    fn panel(&mut self, vectors: usize, last_lanes: usize) -> Result<(), KernelError> {
        let s = self.shape;
        let masked = last_lanes < self.width.lanes();
        let mut block_rows = self.blocking.rows;
        while block_rows > 1
            && F32Blocking::registers(self.width, block_rows, vectors, masked) + 1 > self.width.registers()
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
                self.a.add(A_BLOCK, imm32("a row block of A", rows * s.lda * 4)?)?;
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

    fn allocate(&self, rows: usize, vectors: usize, last_lanes: usize) -> Tile {
        let masked = last_lanes < self.width.lanes();
        let base = F32Blocking::registers(self.width, rows, vectors, masked);
        let temporaries = self.width.registers().saturating_sub(base).clamp(1, 2);
        let mut next = 0;
        let mut take = |count: usize| {
            let regs: Vec<V> = (next..next + count).map(V).collect();
            next += count;
            regs
        };
        let acc = (0..rows).map(|_| take(vectors)).collect();
        let b = take(vectors);
        let a = take(1)[0];
        let tmp = take(temporaries);
        let mask = if masked && self.width == VectorWidth::Ymm { take(1)[0] } else { a };
        Tile { rows, vectors, last_lanes, acc, b, a, tmp, mask }
    }

    /// One row block: zero or load the accumulators, the k loop, store C.
    fn block(&mut self, rows: usize, vectors: usize, last_lanes: usize) -> Result<(), KernelError> {
        let t = self.allocate(rows, vectors, last_lanes);
        let s = self.shape;
        if last_lanes < self.width.lanes() {
            self.set_mask(&t)?;
        }
        for i in 0..rows {
            for j in 0..vectors {
                if s.reset {
                    self.zero(t.acc[i][j])?;
                } else {
                    let mem = self.c_mem(i, j)?;
                    self.load(&t, j, t.acc[i][j], mem)?;
                }
            }
        }
        self.a.mov(B_STEP, B_PANEL)?;
        self.a.xor(K_COUNT, K_COUNT)?;
        let unroll = self.blocking.unroll as i64;
        let loops = s.k / unroll;
        let ldb_bytes = s.ldb * 4;
        if loops > 0 {
            let mut top = self.a.create_label();
            self.a.set_label(&mut top)?;
            for u in 0..unroll {
                self.step(&t, u)?;
            }
            self.a.add(B_STEP, imm32("an unrolled k step of B", unroll * ldb_bytes)?)?;
            if loops > 1 || s.k % unroll > 0 {
                self.a.add(K_COUNT, imm32("k steps", unroll)?)?;
            }
            if loops > 1 {
                self.a.cmp(K_COUNT, imm32("k steps", loops * unroll)?)?;
                self.a.jb(top)?;
            }
        }
        for u in 0..s.k % unroll {
            self.step(&t, u)?;
        }
        for i in 0..rows {
            for j in 0..vectors {
                let mem = self.c_mem(i, j)?;
                self.store(&t, j, mem, t.acc[i][j])?;
            }
        }
        Ok(())
    }

    /// One k step, `u` steps past `K_COUNT`/`B_STEP`: per row, `acc += a · b` as a rounded
    /// product then a rounded sum.
    fn step(&mut self, t: &Tile, u: i64) -> Result<(), KernelError> {
        let s = self.shape;
        let vbytes = self.width.bytes() as i64;
        for j in 0..t.vectors {
            let mem = B_STEP + imm32("B", u * s.ldb * 4 + j as i64 * vbytes)?;
            self.load(t, j, t.b[j], mem)?;
        }
        let mut turn = 0;
        for i in 0..t.rows {
            let a_mem = A_BLOCK + K_COUNT * 4 + imm32("A", i as i64 * s.lda * 4 + 4 * u)?;
            match self.width {
                VectorWidth::Zmm => self.a.vbroadcastss(zmm(t.a), dword_ptr(a_mem))?,
                VectorWidth::Ymm => self.a.vbroadcastss(ymm(t.a), dword_ptr(a_mem))?,
            }
            for j in 0..t.vectors {
                let tmp = t.tmp[turn % t.tmp.len()];
                turn += 1;
                let acc = t.acc[i][j];
                match self.width {
                    VectorWidth::Zmm => {
                        self.a.vmulps(zmm(tmp), zmm(t.a), zmm(t.b[j]))?;
                        self.a.vaddps(zmm(acc), zmm(acc), zmm(tmp))?;
                    }
                    VectorWidth::Ymm => {
                        self.a.vmulps(ymm(tmp), ymm(t.a), ymm(t.b[j]))?;
                        self.a.vaddps(ymm(acc), ymm(acc), ymm(tmp))?;
                    }
                }
            }
        }
        Ok(())
    }

    fn c_mem(&self, i: usize, j: usize) -> Result<AsmMemoryOperand, KernelError> {
        Ok(C_BLOCK + imm32("C", i as i64 * self.shape.ldc * 4 + (j * self.width.bytes()) as i64)?)
    }

    /// Loads column vector `j` of a row; the lanes outside C (a partial last vector) are
    /// zeroed and never accessed.
    fn load(&mut self, t: &Tile, j: usize, dst: V, mem: AsmMemoryOperand) -> Result<(), KernelError> {
        match (self.width, t.masked(j, self.width)) {
            (VectorWidth::Zmm, false) => self.a.vmovups(zmm(dst), zmmword_ptr(mem))?,
            (VectorWidth::Zmm, true) => self.a.vmovups(zmm(dst).k1().z(), zmmword_ptr(mem))?,
            (VectorWidth::Ymm, false) => self.a.vmovups(ymm(dst), ymmword_ptr(mem))?,
            (VectorWidth::Ymm, true) => self.a.vmaskmovps(ymm(dst), ymm(t.mask), ymmword_ptr(mem))?,
        }
        Ok(())
    }

    fn store(&mut self, t: &Tile, j: usize, mem: AsmMemoryOperand, src: V) -> Result<(), KernelError> {
        match (self.width, t.masked(j, self.width)) {
            (VectorWidth::Zmm, false) => self.a.vmovups(zmmword_ptr(mem), zmm(src))?,
            (VectorWidth::Zmm, true) => self.a.vmovups(zmmword_ptr(mem).k1(), zmm(src))?,
            (VectorWidth::Ymm, false) => self.a.vmovups(ymmword_ptr(mem), ymm(src))?,
            (VectorWidth::Ymm, true) => self.a.vmaskmovps(ymmword_ptr(mem), ymm(t.mask), ymm(src))?,
        }
        Ok(())
    }

    /// +0.0 in every lane.
    fn zero(&mut self, dst: V) -> Result<(), KernelError> {
        match self.width {
            VectorWidth::Zmm => self.a.vxorps(zmm(dst), zmm(dst), zmm(dst))?,
            VectorWidth::Ymm => self.a.vxorps(ymm(dst), ymm(dst), ymm(dst))?,
        }
        Ok(())
    }

    /// The lane mask of a partial last column vector: k1 (zmm) or `t.mask` (ymm, all-ones
    /// dwords for the lanes inside C).
    fn set_mask(&mut self, t: &Tile) -> Result<(), KernelError> {
        match self.width {
            VectorWidth::Zmm => {
                self.a.mov(eax, (1u32 << t.last_lanes) - 1)?;
                self.a.kmovw(k1, eax)?;
            }
            VectorWidth::Ymm => {
                let bytes = if t.last_lanes == 0 { 0 } else { u64::MAX >> (64 - 8 * t.last_lanes) };
                self.a.mov(rax, bytes)?;
                self.a.vmovq(xmm(t.mask), rax)?;
                self.a.vpmovsxbd(ymm(t.mask), xmm(t.mask))?;
            }
        }
        Ok(())
    }
}
