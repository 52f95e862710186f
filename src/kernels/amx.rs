//! The AMX int8 GEMM kernel generator: the `GemmShape` semantics of `gemm` (u8 A, i8 B packed
//! `[k/4, n, 4]`, i32 C) with `tdpbusd` on tiles, under the same SysV signature
//! `fn(a: *const u8, b: *const i8, c: *mut i32)`.
//!
//! B's packing is the AMX B-tile layout: a tile row is one group of four k values for 16
//! columns (64 bytes), rows `ldb` bytes apart, so B tiles load straight from the operand. An A
//! tile is 16 rows × 64 bytes of k (rows `lda` apart), a C tile 16 rows × 16 i32 columns.
//!
//! Blocks of C are 2 × 2 tiles (32 rows × 32 columns: 4 C tiles, 2 A and 2 B tiles); tall
//! ones of 4 × 1 (`AmxSpec::block_rows`: 64 rows × 16 columns, rows sharing A tiles), which
//! load each B tile once per 64 rows: where a call's B streams from memory (the deep layers'
//! weights), a second row block would re-read it from L2 after the stream; or 1 × 4 (16 rows ×
//! 64 columns: 4 C tiles, 1 A tile, 2 B tiles each loaded twice per chunk) where m is a
//! multiple of 16 but not of 32 and n of 64, with one tile set (below), so that no block
//! recomputes rows (the stem's 112-pixel rows: 7 blocks of 16 rows instead of 4 of 32). When k
//! is not a multiple of 64, the last chunk of each segment needs A and B tiles of another shape,
//! so blocks shrink to one tile row (or column, for n ≤ 16) to leave tiles for them. Partial
//! blocks (m or n not a multiple of the block) use tiles of fewer rows or columns, so nothing
//! outside the operands' footprint is read (prefetches, which never fault, aside) or written;
//! except in a resetting call with at least one whole block, where the last block is a whole
//! one moved back to end at m (or n): it recomputes rows (columns) the block before wrote, to
//! the same values, and the call keeps one configuration. Each combination of block shapes has
//! its own tile configuration (palette 1, built in the red zone); C is stored before a
//! configuration changes, since loading one zeroes the tiles.
//!
//! Configurations outlive calls: a kernel does not `tilerelease`, and before loading one it
//! stores the loaded one (`sttilecfg`, all zeros when none is) and compares: `ldtilecfg` is
//! slow (it zeroes every tile), and consecutive calls of one kernel, the common case, need
//! none. Tile data is never carried between calls (C is zeroed or loaded in every block),
//! so any other tile user on the thread in between only costs a reload. The runtime releases
//! the tiles where a thread's work ends (`isa::release_tiles`).
//!
//! Loops: column blocks outside, row blocks inside (B's panel stays in cache while A streams
//! past), then per segment the loop over 64-byte k chunks, each of which may prefetch the B
//! rows a distance ahead (`AmxSpec::prefetch`; at the end of B, into what follows it: the next
//! call's panel of packed weights). GPRs are caller-saved only; loop counters live in the red
//! zone (the kernel is a leaf). The kernel ends with `vzeroupper`.

use iced_x86::Register;
use iced_x86::code_asm::registers::tmm::get_tmm;
use iced_x86::code_asm::*;

use crate::error::KernelError;
use crate::isa::DotMethod;
use crate::kernels::gemm::GemmShape;
use crate::kernels::imm32;

/// Rows of a tile, i32 columns of a C or B tile, and bytes of k in an A tile.
const TILE_ROWS: i64 = 16;
const TILE_COLS: i64 = 16;
const TILE_K: i64 = 64;
/// Bytes of one full k chunk of a B tile whose rows are adjacent (16 columns packed alone).
const B_CHUNK: i64 = TILE_K / 4 * TILE_COLS * 4;
/// B bytes of one call beyond which the default spec takes it to stream from L2 or further.
const STREAMED_B: usize = 64 << 10;

/// GPR roles: rdi is A; rsi/rdx point at the current column block of B/C; r8/r10 at the
/// current row block of A/C; r9/r11 at the current k chunk of A/B (r11 holds C's row stride
/// while C tiles move); rax and rcx hold A's and B's row strides (tile loads take the stride
/// in an index register).
const A_BASE: AsmRegister64 = rdi;
const B_COLS: AsmRegister64 = rsi;
const C_COLS: AsmRegister64 = rdx;
const A_ROWS: AsmRegister64 = r8;
const C_ROWS: AsmRegister64 = r10;
const A_K: AsmRegister64 = r9;
const B_K: AsmRegister64 = r11;
const C_STRIDE: AsmRegister64 = r11;
const A_STRIDE: AsmRegister64 = rax;
const B_STRIDE: AsmRegister64 = rcx;

/// Red-zone loop counters and the tile configuration (below rsp, which a leaf function may
/// use).
const K_COUNTER: i32 = -8;
const ROW_COUNTER: i32 = -16;
const COL_COUNTER: i32 = -24;
const CONFIG: i32 = -128;
/// Scratch for building a configuration (free outside blocks).
const SCRATCH: AsmRegister64 = r9;

/// Splits `extent` into blocks of `per_block` tiles of `tile` each: the number of full blocks
/// and the tile extents of the last, partial block (empty when there is none).
fn split(extent: i64, tile: i64, per_block: usize) -> (i64, Vec<i64>) {
    let block = tile * per_block as i64;
    let mut rest = extent % block;
    let mut tail = Vec::new();
    while rest > 0 {
        tail.push(rest.min(tile));
        rest -= rest.min(tile);
    }
    (extent / block, tail)
}

/// Consecutive blocks along m or n whose tiles have the same extents: `count` blocks of
/// `tiles`, the first `back` rows (columns) before where the previous kind ended.
struct Kind {
    count: i64,
    tiles: Vec<i64>,
    back: i64,
}

/// The block kinds along `extent`: whole blocks of `per_block` tiles of `tile`, then the
/// partial block's tiles; in a resetting call with a whole block, a whole block moved back
/// to end at `extent` instead (its overlap with the previous block is recomputed to the same
/// values, and the call keeps one tile shape).
fn kinds(extent: i64, tile: i64, per_block: usize, reset: bool) -> Vec<Kind> {
    let (full, tail) = split(extent, tile, per_block);
    let whole = vec![tile; per_block];
    let rest: i64 = tail.iter().sum();
    let mut kinds = Vec::new();
    if full > 0 {
        kinds.push(Kind { count: full, tiles: whole.clone(), back: 0 });
    }
    if rest > 0 {
        if full > 0 && reset {
            kinds.push(Kind { count: 1, tiles: whole, back: tile * per_block as i64 - rest });
        } else {
            kinds.push(Kind { count: 1, tiles: tail, back: 0 });
        }
    }
    kinds
}

/// The generator's parameters beside the shape: how blocks walk the tiles and how far ahead B
/// is prefetched. The result is the same for every spec.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct AmxSpec {
    /// Row tiles of a block: 2 (blocks of 2 × 2 tiles) or 4 (tall blocks of 4 × 1: a B tile is
    /// loaded once per 64 rows of C instead of once per 32, an A tile once per column tile).
    /// Tall blocks need a single tile set, so a k with both whole chunks and a tail keeps 2.
    pub block_rows: usize,
    /// Bytes ahead along B whose rows each k chunk prefetches (`prefetcht0` of the lines the
    /// chunk `prefetch` bytes further would load; past the call's B, the memory after it,
    /// where the next panel of packed weights lies); 0: none.
    pub prefetch: i64,
}

impl AmxSpec {
    /// The spec for `shape`: tall blocks with a prefetch distance where a call has more than two
    /// row tiles and streams B (more of it than `STREAMED_B`), the square blocks without
    /// prefetching otherwise (a B that stays in L1 from one call to the next gains nothing from
    /// either, and its prefetches cost issue slots).
    pub fn default_for(shape: &GemmShape) -> AmxSpec {
        let (_, b_bytes, _) = shape.footprint(DotMethod::Amx);
        if shape.m > 2 * TILE_ROWS && b_bytes > STREAMED_B {
            // Two k chunks of densely packed 16-column B ahead: far enough to cover the latency
            // of weights streamed from beyond L2, near enough not to evict them before use.
            AmxSpec { block_rows: 4, prefetch: 2 * B_CHUNK }
        } else {
            AmxSpec { block_rows: 2, prefetch: 0 }
        }
    }

    fn validate(&self) -> Result<(), KernelError> {
        if ![2, 4].contains(&self.block_rows) {
            let found = self.block_rows as i64;
            return Err(KernelError::BadShape { what: "block_rows", expected: "2 or 4".into(), found });
        }
        if self.prefetch < 0 {
            return Err(KernelError::BadShape {
                what: "prefetch",
                expected: "non-negative".into(),
                found: self.prefetch,
            });
        }
        Ok(())
    }
}

/// Which tile register holds what, for blocks of `rows` × `cols` tiles.
#[derive(Clone, Copy)]
struct Tiles {
    rows: usize,
    cols: usize,
    /// A tiles per set: one per row (square and wide blocks), or 2 in tall blocks (rows before
    /// the last share one, loaded in turn; the last, which may have fewer rows, has its own).
    a_tiles: usize,
    /// B tile registers of a tile set: `cols`, or fewer, each then loaded again for the
    /// columns `b_regs` further (all of whose tiles have the same shape).
    b_regs: usize,
    /// Full 64-byte k chunks per segment, and the bytes of k after them (a multiple of 4).
    k_chunks: i64,
    k_tail: i64,
}

impl Tiles {
    fn plan(shape: &GemmShape, spec: &AmxSpec) -> Tiles {
        let (k_chunks, k_tail) = (shape.k / TILE_K, shape.k % TILE_K);
        let two_sets = k_chunks > 0 && k_tail > 0;
        if !two_sets && spec.block_rows == 4 {
            return Tiles { rows: 4, cols: 1, a_tiles: 2, b_regs: 1, k_chunks, k_tail };
        }
        let rows_of_16 = shape.m % TILE_ROWS == 0 && shape.m % (2 * TILE_ROWS) > 0;
        if !two_sets && rows_of_16 && shape.n % (4 * TILE_COLS) == 0 {
            return Tiles { rows: 1, cols: 4, a_tiles: 1, b_regs: 2, k_chunks, k_tail };
        }
        let (rows, cols) = match (two_sets, shape.n <= TILE_COLS) {
            (false, _) => (2, 2),
            (true, true) => (2, 1),
            (true, false) => (1, 2),
        };
        Tiles { rows, cols, a_tiles: rows, b_regs: cols, k_chunks, k_tail }
    }

    /// Tall blocks: A tiles shared by rows.
    fn tall(&self) -> bool {
        self.a_tiles < self.rows
    }

    fn c(&self, i: usize, j: usize) -> usize {
        i * self.cols + j
    }

    /// A tile of row `i` of a block of `n` row tiles, for full chunks (`tail` false) or the k
    /// tail.
    fn a(&self, i: usize, n: usize, tail: bool) -> usize {
        let slot = if !self.tall() { i } else { usize::from(i + 1 == n) };
        self.rows * self.cols + self.skip(tail) + slot
    }

    fn b(&self, j: usize, tail: bool) -> usize {
        self.rows * self.cols + self.skip(tail) + self.a_tiles + j % self.b_regs
    }

    /// Tiles before the A and B tiles of the tail set: the full set's, when there is one.
    fn skip(&self, tail: bool) -> usize {
        if tail && self.k_chunks > 0 { self.a_tiles + self.b_regs } else { 0 }
    }

    /// The palette-1 configuration for a block with tile rows `rows` and tile columns `cols`.
    fn config(&self, rows: &[i64], cols: &[i64]) -> [u8; 64] {
        let mut cfg = [0u8; 64];
        cfg[0] = 1;
        let mut set = |tile: usize, r: i64, colsb: i64| {
            cfg[16 + 2 * tile..18 + 2 * tile].copy_from_slice(&(colsb as u16).to_le_bytes());
            cfg[48 + tile] = r as u8;
        };
        for (i, &r) in rows.iter().enumerate() {
            for (j, &c) in cols.iter().enumerate() {
                set(self.c(i, j), r, 4 * c);
            }
        }
        for (tail, k) in [(false, if self.k_chunks > 0 { TILE_K } else { 0 }), (true, self.k_tail)] {
            if k == 0 {
                continue;
            }
            for (i, &r) in rows.iter().enumerate() {
                set(self.a(i, rows.len(), tail), r, k);
            }
            for (j, &c) in cols.iter().enumerate() {
                set(self.b(j, tail), k / 4, 4 * c);
            }
        }
        cfg
    }
}

/// Assembles the AMX kernel for `shape` (validated by the caller, A u8) with the default spec
/// (`AmxSpec::default_for`); position independent, no relocations.
pub fn assemble_amx(shape: &GemmShape) -> Result<Vec<u8>, KernelError> {
    assemble_amx_with(shape, &AmxSpec::default_for(shape))
}

/// Assembles the AMX kernel for `shape` with `spec` (a typed error for a spec out of range).
pub fn assemble_amx_with(shape: &GemmShape, spec: &AmxSpec) -> Result<Vec<u8>, KernelError> {
    spec.validate()?;
    let mut g = Gen { a: CodeAssembler::new(64)?, shape: *shape, tiles: Tiles::plan(shape, spec), spec: *spec };
    g.kernel()?;
    Ok(crate::kernels::encode::encode(&mut g.a)?)
}

struct Gen {
    a: CodeAssembler,
    shape: GemmShape,
    tiles: Tiles,
    spec: AmxSpec,
}

impl Gen {
    fn kernel(&mut self) -> Result<(), KernelError> {
        let s = self.shape;
        let t = self.tiles;
        let computes = s.m > 0 && s.n > 0 && ((s.k > 0 && s.segments > 0) || s.reset);
        if computes {
            let col_kinds = kinds(s.n, TILE_COLS, t.cols, s.reset);
            let row_kinds = kinds(s.m, TILE_ROWS, t.rows, s.reset);
            // One configuration for the whole call: load it once.
            let first = t.config(&row_kinds[0].tiles, &col_kinds[0].tiles);
            let single = row_kinds.iter().all(|r| col_kinds.iter().all(|c| t.config(&r.tiles, &c.tiles) == first));
            if single {
                self.load_config(&row_kinds[0].tiles, &col_kinds[0].tiles)?;
            }
            self.a.mov(A_STRIDE, s.lda)?;
            self.a.mov(B_STRIDE, s.ldb)?;
            for (ci, kind) in col_kinds.iter().enumerate() {
                let more = ci + 1 < col_kinds.len();
                if kind.back > 0 {
                    // Columns are 4 bytes apart in B's groups and in C.
                    let back = imm32("an overlapping column block", 4 * kind.back)?;
                    self.a.sub(B_COLS, back)?;
                    self.a.sub(C_COLS, back)?;
                }
                let mut top = self.a.create_label();
                if kind.count > 1 {
                    self.a.mov(qword_ptr(rsp + COL_COUNTER), imm32("column blocks", kind.count)?)?;
                }
                self.a.set_label(&mut top)?;
                self.column(&row_kinds, &kind.tiles, single)?;
                if kind.count > 1 || more {
                    let step = imm32("a column block", TILE_COLS * 4 * t.cols as i64)?;
                    self.a.add(B_COLS, step)?;
                    self.a.add(C_COLS, step)?;
                }
                if kind.count > 1 {
                    self.a.dec(qword_ptr(rsp + COL_COUNTER))?;
                    self.a.jnz(top)?;
                }
            }
        }
        self.a.vzeroupper()?;
        self.a.ret()?;
        Ok(())
    }

    /// Loads the configuration for these tile rows and columns unless it is the loaded one:
    /// `sttilecfg` to the red zone, a qword compare against each of its 8 qwords, and only on a
    /// difference the configuration written there (so the kernel's bytes are code only) and
    /// `ldtilecfg`.
    fn load_config(&mut self, rows: &[i64], cols: &[i64]) -> Result<(), KernelError> {
        let cfg = self.tiles.config(rows, cols);
        let mut load = self.a.create_label();
        let mut done = self.a.create_label();
        self.a.sttilecfg(ptr(rsp + CONFIG))?;
        for (q, bytes) in cfg.chunks_exact(8).enumerate() {
            let value = i64::from_le_bytes(bytes.try_into().unwrap_or([0; 8]));
            let mem = qword_ptr(rsp + (CONFIG + 8 * q as i32));
            match i32::try_from(value) {
                Ok(small) => self.a.cmp(mem, small)?,
                Err(_) => {
                    self.a.mov(SCRATCH, value)?;
                    self.a.cmp(mem, SCRATCH)?;
                }
            }
            self.a.jne(load)?;
        }
        self.a.jmp(done)?;
        self.a.set_label(&mut load)?;
        store_config(&mut self.a, &cfg, SCRATCH, CONFIG)?;
        self.a.ldtilecfg(ptr(rsp + CONFIG))?;
        self.a.set_label(&mut done)?;
        // An instruction for the label alone: a loop's label may come next.
        self.a.nop()?;
        Ok(())
    }

    /// Every row block of one column block whose tiles have `cols` columns.
    fn column(&mut self, row_kinds: &[Kind], cols: &[i64], single: bool) -> Result<(), KernelError> {
        let s = self.shape;
        self.a.mov(A_ROWS, A_BASE)?;
        self.a.mov(C_ROWS, C_COLS)?;
        for (ri, kind) in row_kinds.iter().enumerate() {
            let more = ri + 1 < row_kinds.len();
            if !single {
                self.load_config(&kind.tiles, cols)?;
            }
            if kind.back > 0 {
                self.a.sub(A_ROWS, imm32("an overlapping row block of A", kind.back * s.lda)?)?;
                self.a.sub(C_ROWS, imm32("an overlapping row block of C", kind.back * s.ldc * 4)?)?;
            }
            let mut top = self.a.create_label();
            if kind.count > 1 {
                self.a.mov(qword_ptr(rsp + ROW_COUNTER), imm32("row blocks", kind.count)?)?;
            }
            self.a.set_label(&mut top)?;
            self.block(&kind.tiles, cols)?;
            if kind.count > 1 || more {
                let block_rows = TILE_ROWS * self.tiles.rows as i64;
                self.a.add(A_ROWS, imm32("a row block of A", block_rows * s.lda)?)?;
                self.a.add(C_ROWS, imm32("a row block of C", block_rows * s.ldc * 4)?)?;
            }
            if kind.count > 1 {
                self.a.dec(qword_ptr(rsp + ROW_COUNTER))?;
                self.a.jnz(top)?;
            }
        }
        Ok(())
    }

    fn tmm(index: usize) -> Result<AsmRegisterTmm, KernelError> {
        get_tmm(Register::TMM0 + index as u32)
            .ok_or_else(|| KernelError::Assembler { message: format!("no tile register tmm{index}") })
    }

    /// One block: C tiles zeroed or loaded, the k chunks of every segment, C stored.
    fn block(&mut self, rows: &[i64], cols: &[i64]) -> Result<(), KernelError> {
        let s = self.shape;
        let t = self.tiles;
        let c_off = |i: usize, j: usize| imm32("C", i as i64 * TILE_ROWS * s.ldc * 4 + j as i64 * TILE_COLS * 4);
        if !s.reset {
            self.a.mov(C_STRIDE, s.ldc * 4)?;
        }
        for i in 0..rows.len() {
            for j in 0..cols.len() {
                let c = Self::tmm(t.c(i, j))?;
                if s.reset {
                    self.a.tilezero(c)?;
                } else {
                    self.a.tileloadd(c, ptr(C_ROWS + C_STRIDE * 1 + c_off(i, j)?))?;
                }
            }
        }
        if s.k > 0 {
            for segment in 0..s.segments {
                self.a.lea(A_K, ptr(A_ROWS + imm32("a segment of A", segment * s.lds)?))?;
                self.a.lea(B_K, ptr(B_COLS + imm32("a segment of B", segment * (s.k / 4) * s.ldb)?))?;
                if t.k_chunks > 0 {
                    let mut top = self.a.create_label();
                    if t.k_chunks > 1 {
                        self.a.mov(qword_ptr(rsp + K_COUNTER), imm32("k chunks", t.k_chunks)?)?;
                    }
                    self.a.set_label(&mut top)?;
                    self.chunk(rows.len(), cols.len(), false)?;
                    if t.k_chunks > 1 || t.k_tail > 0 {
                        self.a.add(A_K, imm32("a k chunk of A", TILE_K)?)?;
                        self.a.add(B_K, imm32("a k chunk of B", TILE_K / 4 * s.ldb)?)?;
                    }
                    if t.k_chunks > 1 {
                        self.a.dec(qword_ptr(rsp + K_COUNTER))?;
                        self.a.jnz(top)?;
                    }
                }
                if t.k_tail > 0 {
                    self.chunk(rows.len(), cols.len(), true)?;
                }
            }
        }
        self.a.mov(C_STRIDE, s.ldc * 4)?;
        for i in 0..rows.len() {
            for j in 0..cols.len() {
                self.a.tilestored(ptr(C_ROWS + C_STRIDE * 1 + c_off(i, j)?), Self::tmm(t.c(i, j))?)?;
            }
        }
        Ok(())
    }

    /// One k chunk (full or the tail) of a block of `rows` × `cols` tiles: load A and B tiles,
    /// one `tdpbusd` per C tile. Tall blocks load B first, then each row's A just before its
    /// `tdpbusd`s (rows share A tiles); other blocks load B `b_regs` columns at a time where
    /// columns share registers.
    fn chunk(&mut self, rows: usize, cols: usize, tail: bool) -> Result<(), KernelError> {
        let s = self.shape;
        let t = self.tiles;
        // [bw] B prefetch `spec.prefetch` bytes ahead: the lines of this chunk's B rows there.
        if self.spec.prefetch > 0 {
            let k_rows = if tail { t.k_tail / 4 } else { TILE_K / 4 };
            // Rows closer than a line apart share lines: one prefetch per line.
            let step = (64 / s.ldb.max(1)).max(1) as usize;
            for j in 0..cols {
                for r in (0..k_rows).step_by(step) {
                    let off = imm32("a B prefetch", self.spec.prefetch + r * s.ldb + j as i64 * TILE_COLS * 4)?;
                    self.a.prefetcht0(byte_ptr(B_K + off))?;
                }
            }
        }
        let a_off = |i: usize| imm32("A", i as i64 * TILE_ROWS * s.lda);
        let b_off = |j: usize| imm32("B", j as i64 * TILE_COLS * 4);
        if t.tall() {
            for j in 0..cols {
                self.a.tileloadd(Self::tmm(t.b(j, tail))?, ptr(B_K + B_STRIDE * 1 + b_off(j)?))?;
            }
            for i in 0..rows {
                let a = Self::tmm(t.a(i, rows, tail))?;
                self.a.tileloadd(a, ptr(A_K + A_STRIDE * 1 + a_off(i)?))?;
                for j in 0..cols {
                    self.a.tdpbusd(Self::tmm(t.c(i, j))?, a, Self::tmm(t.b(j, tail))?)?;
                }
            }
            return Ok(());
        }
        for i in 0..rows {
            self.a.tileloadd(Self::tmm(t.a(i, rows, tail))?, ptr(A_K + A_STRIDE * 1 + a_off(i)?))?;
        }
        let columns: Vec<usize> = (0..cols).collect();
        for group in columns.chunks(t.b_regs) {
            for &j in group {
                self.a.tileloadd(Self::tmm(t.b(j, tail))?, ptr(B_K + B_STRIDE * 1 + b_off(j)?))?;
            }
            for i in 0..rows {
                for &j in group {
                    self.a.tdpbusd(Self::tmm(t.c(i, j))?, Self::tmm(t.a(i, rows, tail))?, Self::tmm(t.b(j, tail))?)?;
                }
            }
        }
        Ok(())
    }
}

/// Writes the 64 bytes of `cfg` to `[rsp + at]` with qword stores (`scratch` holds the ones that
/// do not fit a sign-extended immediate).
pub(crate) fn store_config(
    a: &mut CodeAssembler,
    cfg: &[u8; 64],
    scratch: AsmRegister64,
    at: i32,
) -> Result<(), KernelError> {
    for (q, bytes) in cfg.chunks_exact(8).enumerate() {
        let value = i64::from_le_bytes(bytes.try_into().unwrap_or([0; 8]));
        let mem = qword_ptr(rsp + (at + 8 * q as i32));
        match i32::try_from(value) {
            Ok(small) => a.mov(mem, small)?,
            Err(_) => {
                a.mov(scratch, value)?;
                a.mov(mem, scratch)?;
            }
        }
    }
    Ok(())
}
