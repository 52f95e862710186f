//! Element-wise map kernels (`IntrinKind::Map`): the declaration's body compiled, node by node,
//! to zmm or ymm code, for what Cranelift's 128-bit vectors make slow (a requantization is
//! about a dozen vector operations per 16 outputs on zmm, four times as many on xmm).
//!
//! A kernel computes `out[p, c] = f(…)` for `p < m`, `c < n` under the SysV signature
//! `fn(in_0, …, in_last, out)`: one pointer per operand (at most six), each at the operand's
//! origin; `[m, n]` operands advance by their row stride per row, `[n]` operands do not, and
//! per-row `[m]` operands (read at `[p]`) advance by theirs, their element broadcast. The
//! columns run in vectors of 16 (zmm) or 8 (ymm) lanes; a zmm kernel finishes a row's partial
//! vector under opmask k2 (masked-off lanes are never accessed), a ymm kernel with the row's last
//! 8 columns, overlapping the vector before (the output aliases no input, so the columns computed
//! twice are stored twice with the same values), and needs `n ≥ 8`.
//!
//! Each node becomes instructions that give the IR's result for every input (`ir::expr`):
//! * i32 `+ - *`: `vpaddd`, `vpsubd`, `vpmulld` (wrapping); f32 `+ - * /`: `vaddps`, `vsubps`,
//!   `vmulps`, `vdivps` (IEEE, round to nearest even: the MXCSR default, never changed by
//!   this process);
//! * f32 `fma(x, y, z)`: `vfmadd213ps` (one rounding, as the IR's `Fma`);
//! * `f32(x)` of i32: `vcvtdq2ps` (round to nearest even); of a u8 or i8 input: `vpmovzxbd` or
//!   `vpmovsxbd` from memory first (exact);
//! * `round(x)`: `vrndscaleps`/`vroundps` with immediate 0 (nearest, ties to even; NaN, ±0 and
//!   ±∞ unchanged);
//! * i32 `& | ^`: `vpandd`/`vpand`, `vpord`/`vpor`, `vpxord`/`vpxor`; i32 `<<` and `>>` by a
//!   constant: `vpslld` and `vpsrad` (arithmetic, as `>>` of a signed type) by the amount
//!   modulo 32 (the IR's shift rule), an immediate; shifts by a value are unsupported;
//! * `reinterpret` between f32 and i32: nothing (the same register at the operand's last use,
//!   else a copy);
//! * `i32(x)` of f32 (toward zero, saturated, NaN → 0): `vcvttps2dq`, exact in `[-2^31, 2^31)`
//!   and `0x80000000` elsewhere, which is right below that range; lanes at or above `2^31`
//!   (ordered compare) take its complement `i32::MAX`, NaN lanes (unordered with themselves) 0;
//! * `a < b ? b : a` and `a < b ? a : b` (a clamp): `vmaxps b, a` and `vminps a, b`, whose
//!   second operand is returned exactly where the ordered `<` is false (NaN, equal values,
//!   zeros of either sign);
//! * any other `c ? t : f` with `c` a float comparison: `vcmpps` with the ordered predicate (false on
//!   NaN, as the IR's comparisons; `!=` unordered: true on NaN), then a blend;
//! * the store of an f32 value as u8 or i8 (`Cast` and `SaturatingCast` agree on float → int:
//!   toward zero, saturated, NaN → 0): a clamp on the one side the narrowing does not
//!   saturate, the conversion (`vcvttps2dq`, exact on the clamped integral or truncated value),
//!   then a saturating narrowing. The conversion gives `0x80000000` for NaN and for values past
//!   `i32`'s range of either sign. zmm u8: `vmaxps` with the lower bound 0 as second operand
//!   (returned for NaN), then `vpmovusdb`, which takes the dword as unsigned and saturates it
//!   from above (`0x80000000` too: only values past `i32::MAX` convert to it there); left out
//!   where the body's own clamps prove the value a number at or above 0 (`bounds`). i8 (zmm
//!   `vpmovsdb`, ymm packs) and ymm u8 (`vpackssdw` + `vpackuswb`): NaN lanes zeroed (i8 only),
//!   `vminps` with the upper bound, then signed saturation, where `0x80000000` is the lowest
//!   value. Where a row holds four vectors or more, they go four at a time through the packs
//!   (the same clamp from above), and `vpermd` undoes their interleaving by 128-bit lanes;
//! * that store of `round(x / s + zp)` with constants `s` and `zp` (a requantization): the
//!   quotient by one FMA with the reciprocal of `s` wherever that provably rounds to the same
//!   integer, the division itself in the rare vectors where it may not (`ScaledRounding`):
//!   `vdivps` has a small fraction of an FMA's throughput, and would otherwise bound the
//!   requantization. A zmm group of four vectors takes one check for all four
//!   (`Gen::scaled_group`).
//!
//! The f32 math functions of `ir::math` (`exp`, `log`, `tanh`, `sigmoid`, `erf`) expand into
//! these nodes only, so their bodies compile to kernels.
//!
//! Any other node, dtype or operand layout is `KernelError::Unsupported`, and the call runs its
//! loop nest. Registers: only caller-saved ones (rax, rcx, rdx, rsi, rdi, r8–r11, vector
//! registers, k2–k4); the kernel ends with `vzeroupper`. Constants are loaded into registers
//! once, before the loops; a body with more constants than leave it registers for its values
//! keeps some of them in a pool after the code instead, broadcast from there where used.
//!
//! A copy (the body one read of an input of the output's dtype) is not evaluated node by node:
//! `copy` moves its bytes.
//!
//! A row fold (`IntrinKind::RowFold`) compiles its fold's source the same way, into vector
//! accumulators (`fold`).
//!
//! Files: `bounds` (a value's lower bound read off the body's clamps), `copy` (the copy
//! kernel), `fold` (row-fold kernels), `loops` (the loop nest and one vector's store), `nodes` (the code of each node
//! family), `narrowing` (the store of f32 as u8 or i8), `scaled_rounding` (the requantization's
//! rounding by the reciprocal, and its proof), `registers` (general and vector registers,
//! constants, live values).

mod bounds;
mod copy;
mod epilogue;
mod fold;
mod loops;
mod narrowing;
mod nodes;
mod registers;
mod scaled_rounding;

use rustc_hash::FxHashMap as HashMap;

use iced_x86::code_asm::{AsmMemoryOperand, CodeAssembler, CodeLabel};
use ir::intrin::{IntrinKind, TensorIntrin};

use crate::error::KernelError;
use crate::isa::VectorWidth;
use registers::{ARGS, COLUMN};

pub(crate) use epilogue::{EpilogueTile, centering_operand, emit_epilogue};
pub use fold::assemble_row_fold;

/// The problem of one map kernel: the block and each operand's row stride.
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub struct MapShape {
    pub m: i64,
    pub n: i64,
    /// Per operand (the inputs in call order, then the output): elements between rows, 0 for an
    /// `[n]` operand.
    pub row_strides: Vec<i64>,
}

/// Assembles the kernel of `decl` (an `IntrinKind::Map` declaration) at `width`.
pub fn assemble_map(width: VectorWidth, decl: &TensorIntrin, shape: &MapShape) -> Result<Vec<u8>, KernelError> {
    let unsupported = |what: String| Err(KernelError::Unsupported { what });
    let IntrinKind::Map { m, n } = decl.kind else {
        return unsupported(format!("{} is not a Map declaration", decl.name));
    };
    let operands = decl.operand_tensors();
    if (m, n) != (shape.m, shape.n) || shape.row_strides.len() != operands.len() {
        return unsupported(format!("a shape for {}x{} with {} operands", m, n, operands.len()));
    }
    if operands.len() > ARGS.len() {
        return unsupported(format!("{} operands (at most {} are passed in registers)", operands.len(), ARGS.len()));
    }
    if copy::is_copy(decl) {
        return copy::assemble_copy(width, shape, decl.output.dtype().bytes() as i64);
    }
    let lanes = width.lanes() as i64;
    if width == VectorWidth::Ymm && n < lanes {
        return unsupported(format!("{n} columns on ymm (at least {lanes})"));
    }
    // Groups of four vectors need four more registers across the body; a body that does not
    // fit with them runs vector by vector. A body whose constants leave too few registers for
    // its values keeps fewer of them in registers, the rest loaded from the pool where used.
    let assemble = |grouped: bool, budget: usize| -> Result<Vec<u8>, KernelError> {
        let mut g = Gen::new(width, decl, grouped)?;
        g.budget = budget;
        g.kernel(shape)?;
        Ok(crate::kernels::encode::encode(&mut g.a)?)
    };
    let registers = width.registers();
    let mut result = assemble(true, usize::MAX);
    for budget in [usize::MAX, registers / 2, registers / 4, 0] {
        if result.is_ok() {
            break;
        }
        result = assemble(false, budget);
    }
    result
}

/// The code generator of one kernel: its assembler, and the state of the vector registers
/// (`registers`) as it goes through the loops (`loops`).
struct Gen<'d> {
    a: CodeAssembler,
    width: VectorWidth,
    decl: &'d TensorIntrin,
    /// f32 or i32 constants by bits, in registers loaded once.
    constants: HashMap<u32, usize>,
    /// At most this many of the body's constants in registers (`registers::body_constant`).
    budget: usize,
    /// The body's other constants by bits, each at its label after the code.
    pool: Vec<(u32, CodeLabel)>,
    /// Per input: a per-row operand (`TensorIntrin::map_rows`), one value broadcast per row.
    rows: Vec<bool>,
    /// Registers not holding a constant or a live value.
    free: Vec<usize>,
    /// Live values of the current vector: node → (register, uses left).
    live: HashMap<usize, (usize, usize)>,
    /// Uses of each node by its parents in the body.
    uses: HashMap<usize, usize>,
    /// Whether the current vector is the masked partial one (zmm only).
    masked: bool,
    /// Whether a narrowing store runs in groups of `GROUP` vectors, saturated by packing.
    grouped: bool,
    /// Elements from `COLUMN` to the current vector (within a group).
    offset: i32,
    /// Per input: bytes from its pointer to the current row (a row fold's rows), none if empty.
    shift: Vec<i32>,
    /// Set when the map runs as another kernel's epilogue (`epilogue`): where the operands
    /// and the current vector are.
    place: Option<epilogue::Place>,
}

impl<'d> Gen<'d> {
    fn new(width: VectorWidth, decl: &'d TensorIntrin, grouped: bool) -> Result<Gen<'d>, KernelError> {
        Ok(Gen::with(CodeAssembler::new(64)?, width, decl, grouped))
    }

    /// A generator emitting into `a`, after what it holds.
    fn with(a: CodeAssembler, width: VectorWidth, decl: &'d TensorIntrin, grouped: bool) -> Gen<'d> {
        let mut g = Gen {
            a,
            width,
            decl,
            constants: HashMap::default(),
            budget: usize::MAX,
            pool: Vec::new(),
            rows: decl.map_rows(),
            free: (0..width.registers()).rev().collect(),
            live: HashMap::default(),
            uses: HashMap::default(),
            masked: false,
            grouped,
            offset: 0,
            shift: Vec::new(),
            place: None,
        };
        let body = decl.output.body().expect("a Map declaration is a compute");
        g.count_uses(body);
        g
    }

    /// The memory operand of operand `arg`'s elements (of `bytes` bytes) at the current vector.
    fn at(&self, arg: usize, bytes: i32) -> Result<AsmMemoryOperand, KernelError> {
        match (&self.place, bytes) {
            (Some(place), _) => place.at(arg, bytes, self.width),
            (None, 1) => Ok(ARGS[arg] + COLUMN + self.offset + self.row_shift(arg)),
            (None, _) => Ok(ARGS[arg] + COLUMN * 4 + self.offset * 4 + self.row_shift(arg)),
        }
    }

    /// Bytes from operand `arg`'s pointer to the current row (`shift`).
    fn row_shift(&self, arg: usize) -> i32 {
        self.shift.get(arg).copied().unwrap_or(0)
    }

    fn unsupported<T>(&self, what: impl Into<String>) -> Result<T, KernelError> {
        Err(KernelError::Unsupported { what: what.into() })
    }
}
