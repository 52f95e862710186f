//! Hand-assembled x86-64 micro-kernels (iced-x86), for what Cranelift cannot emit: ymm/zmm
//! registers, `vpdpbusd` on 256/512 bits, opmasks.
//!
//! `gemm` generates int8 GEMM kernels `fn(a: *const u8, b: *const i8, c: *mut i32)` (SysV)
//! for one `Int8Gemm` shape with compile-time strides; `map` compiles the body of an
//! element-wise `Map` declaration (a requantization) to zmm or ymm code; `peak` measures the `vpdpbusd`
//! throughput they are judged against; `disasm` prints machine code in Intel syntax. The bytes
//! are position independent and carry no relocations, so `Module::define_function_bytes` puts
//! the same kernel into the JIT or an object file.

pub mod disasm;
pub mod gemm;
pub mod map;
pub mod peak;

use std::fmt;

use ir::DType;
use thiserror::Error;

use crate::codegen::jit::{self, JitCode};
use crate::error::{CompileError, RuntimeError};
use crate::runtime::{IsaLevel, OptLevel, Target, build_isa};

pub use disasm::disassemble;
pub use gemm::{Blocking, GemmShape, assemble_gemm};
pub use map::{MapShape, assemble_map};

/// How a kernel sums the four int8 products of one i32 lane.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum DotMethod {
    /// `vpdpbusd` (u8 × i8): exact.
    Vnni,
    /// Both operands widened to i16, then `vpmaddwd` (u8 or i8 × i8): exact.
    Widen,
    /// `vpmaddubsw` + `vpmaddwd(ones)` + `vpaddd` (u8 × i8): each pair of adjacent products
    /// saturates to i16 before the exact i32 sums (the `saturating` declaration; exact when the
    /// operands' ranges keep every pair sum in i16).
    MaddUbs,
    /// i8 × i8 by sign transfer: `vpsignb` moves the sign of `a` onto `b`, then the triple on
    /// `|a|`: `vpabsb`, `vpsignb` + `vpmaddubsw` + `vpmaddwd(ones)` + `vpaddd`. Exact when no
    /// `b` is -128 (`|a|·|b| ≤ 128·127`, pair sums ≤ 32512); `vpsignb` negates -128 to itself,
    /// so a -128 weight gives a wrong product — callers prove its absence (value ranges).
    SignTransfer,
    /// Pre-widened operands: A and B as i16 (`B: i16[k/2, n, 2]`, the weights widened once when
    /// they are prepared, the source when it is padded), `vpbroadcastd` of an A pair, then
    /// `vpmaddwd` + `vpaddd` only: exact for every input in wrapping i32 arithmetic
    /// (`vpmaddwd`'s one overflowing case, `(-32768)²·2`, wraps to the same value).
    Madd16,
}

impl DotMethod {
    /// Whether the method reads A of this element type.
    pub fn accepts_a(self, a_dtype: DType) -> bool {
        match self {
            DotMethod::Vnni | DotMethod::MaddUbs => a_dtype == DType::U8,
            DotMethod::SignTransfer => a_dtype == DType::I8,
            DotMethod::Widen => [DType::U8, DType::I8].contains(&a_dtype),
            DotMethod::Madd16 => a_dtype == DType::I16,
        }
    }

    /// The element type of B: i16 pairs for `Madd16`, else i8.
    pub fn b_dtype(self) -> DType {
        if self == DotMethod::Madd16 { DType::I16 } else { DType::I8 }
    }
}

/// Vector register width of a kernel.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum VectorWidth {
    /// 256-bit, VEX encoded, ymm0–ymm15.
    Ymm,
    /// 512-bit, EVEX encoded, zmm0–zmm31 and opmask k1.
    Zmm,
}

impl VectorWidth {
    /// i32 lanes (output columns) per register.
    pub fn lanes(self) -> usize {
        match self {
            VectorWidth::Ymm => 8,
            VectorWidth::Zmm => 16,
        }
    }

    pub fn bytes(self) -> usize {
        self.lanes() * 4
    }

    /// Architectural vector registers available to a kernel of this width.
    pub fn registers(self) -> usize {
        match self {
            VectorWidth::Ymm => 16,
            VectorWidth::Zmm => 32,
        }
    }
}

/// One int8 GEMM kernel family: a dot-product method at a vector width.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct KernelVariant {
    pub method: DotMethod,
    pub width: VectorWidth,
}

impl KernelVariant {
    /// EVEX `vpdpbusd zmm` (AVX512-VNNI).
    pub const AVX512_VNNI: KernelVariant = KernelVariant { method: DotMethod::Vnni, width: VectorWidth::Zmm };
    /// VEX `{vex} vpdpbusd ymm` (AVX-VNNI).
    pub const AVX_VNNI: KernelVariant = KernelVariant { method: DotMethod::Vnni, width: VectorWidth::Ymm };
    /// Exact AVX2: `vpmovsxbw`/`vpmovzxbw` + `vpmaddwd` on ymm.
    pub const AVX2_WIDEN: KernelVariant = KernelVariant { method: DotMethod::Widen, width: VectorWidth::Ymm };
    /// Saturating AVX2 triple on ymm.
    pub const AVX2_MADDUBS: KernelVariant = KernelVariant { method: DotMethod::MaddUbs, width: VectorWidth::Ymm };
    /// Saturating triple on zmm (AVX512-BW).
    pub const AVX512_MADDUBS: KernelVariant = KernelVariant { method: DotMethod::MaddUbs, width: VectorWidth::Zmm };
    /// Exact i8 × i8 (no -128 in B) by sign transfer on ymm (AVX2; AVX-512 has no `vpsignb`).
    pub const AVX2_SIGN: KernelVariant = KernelVariant { method: DotMethod::SignTransfer, width: VectorWidth::Ymm };
    /// Exact AVX2 on i16-pair B: `vpmaddwd` + `vpaddd` on ymm.
    pub const AVX2_MADD16: KernelVariant = KernelVariant { method: DotMethod::Madd16, width: VectorWidth::Ymm };

    pub const ALL: [KernelVariant; 7] = [
        KernelVariant::AVX512_VNNI,
        KernelVariant::AVX_VNNI,
        KernelVariant::AVX2_WIDEN,
        KernelVariant::AVX2_MADDUBS,
        KernelVariant::AVX512_MADDUBS,
        KernelVariant::AVX2_SIGN,
        KernelVariant::AVX2_MADD16,
    ];

    pub fn name(self) -> &'static str {
        match (self.method, self.width) {
            (DotMethod::Vnni, VectorWidth::Zmm) => "avx512-vnni",
            (DotMethod::Vnni, VectorWidth::Ymm) => "avx-vnni",
            (DotMethod::Widen, VectorWidth::Ymm) => "avx2-widen",
            (DotMethod::Widen, VectorWidth::Zmm) => "avx512-widen",
            (DotMethod::MaddUbs, VectorWidth::Ymm) => "avx2-maddubs",
            (DotMethod::MaddUbs, VectorWidth::Zmm) => "avx512-maddubs",
            (DotMethod::SignTransfer, VectorWidth::Ymm) => "avx2-sign",
            (DotMethod::SignTransfer, VectorWidth::Zmm) => "avx512-sign",
            (DotMethod::Madd16, VectorWidth::Ymm) => "avx2-madd16",
            (DotMethod::Madd16, VectorWidth::Zmm) => "avx512-madd16",
        }
    }

    /// Whether the kernel computes exact sums (otherwise: the saturating declaration); sign
    /// transfer is exact under its precondition (no -128 in B).
    pub fn is_exact(self) -> bool {
        self.method != DotMethod::MaddUbs
    }

    /// The lowest level whose code may use this kernel.
    pub fn min_level(self) -> Option<IsaLevel> {
        IsaLevel::ALL.into_iter().find(|&l| self.runs_at(l))
    }

    /// Whether some level can run this kernel (the family exists).
    pub fn runs_at_any_level(self) -> bool {
        self.min_level().is_some()
    }

    /// Whether code built for `level` may use this kernel.
    pub fn runs_at(self, level: IsaLevel) -> bool {
        match (self.method, self.width) {
            (DotMethod::Vnni, VectorWidth::Zmm) | (DotMethod::MaddUbs, VectorWidth::Zmm) => {
                level == IsaLevel::Avx512Vnni
            }
            (DotMethod::Vnni, VectorWidth::Ymm) => level == IsaLevel::AvxVnni,
            (DotMethod::Widen | DotMethod::MaddUbs | DotMethod::SignTransfer | DotMethod::Madd16, VectorWidth::Ymm) => {
                level >= IsaLevel::Avx2
            }
            (DotMethod::Widen | DotMethod::SignTransfer | DotMethod::Madd16, VectorWidth::Zmm) => false,
        }
    }
}

impl fmt::Display for KernelVariant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Why a kernel could not be generated.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum KernelError {
    #[error("int8 GEMM kernel: {what} must be {expected}, found {found}")]
    BadShape { what: &'static str, expected: String, found: i64 },
    #[error(
        "{variant} kernel: {rows}x{vectors} register block needs {needed} vector registers, expected at most {available}"
    )]
    TooManyRegisters { variant: KernelVariant, rows: usize, vectors: usize, needed: usize, available: usize },
    #[error("{variant} kernel: no such kernel family")]
    NoSuchVariant { variant: KernelVariant },
    #[error("{variant} kernel: A of {found} is not one it reads")]
    ADType { variant: KernelVariant, found: DType },
    #[error("int8 GEMM kernel: byte offset {offset} of {what} does not fit a 32-bit displacement")]
    OffsetTooLarge { what: &'static str, offset: i64 },
    /// A map kernel meets what it has no exact vector form for (the call runs its loop nest).
    #[error("map kernel: no vector form for {what}")]
    Unsupported { what: String },
    #[error("assembler: {message}")]
    Assembler { message: String },
}

impl From<iced_x86::IcedError> for KernelError {
    fn from(e: iced_x86::IcedError) -> Self {
        KernelError::Assembler { message: e.to_string() }
    }
}

/// One GEMM kernel loaded on its own (outside any compiled function), with checked calls:
/// what tests and the kernel sweep run.
pub struct GemmKernel {
    code: JitCode,
    pub variant: KernelVariant,
    pub shape: GemmShape,
    pub blocking: Blocking,
}

impl GemmKernel {
    /// Assembles and loads the kernel; the CPU must support `variant`.
    pub fn new(variant: KernelVariant, shape: GemmShape, blocking: Blocking) -> Result<GemmKernel, CompileError> {
        let level = variant.min_level().ok_or(CompileError::Kernel(KernelError::NoSuchVariant { variant }))?;
        let (isa, _) = build_isa(Target::Level(level), OptLevel::None)?;
        let bytes = assemble_gemm(variant, &shape, blocking)?;
        let code = jit::load_bytes(isa, variant.name(), &bytes, 3)?;
        Ok(GemmKernel { code, variant, shape, blocking })
    }

    /// `c += a · b` by a kernel with byte operands (every method but `Madd16`; A's bytes are
    /// read as the shape's u8 or i8); every slice must cover what the shape reaches.
    pub fn run(&self, a: &[u8], b: &[i8], c: &mut [i32]) -> Result<(), RuntimeError> {
        let a_dtype = if self.shape.a_dtype == DType::I8 { DType::I8 } else { DType::U8 };
        self.run_raw((a.as_ptr(), a.len(), a_dtype), (b.as_ptr().cast(), b.len(), DType::I8), c)
    }

    /// `c += a · b` by a `Madd16` kernel (i16 operands).
    pub fn run_i16(&self, a: &[i16], b: &[i16], c: &mut [i32]) -> Result<(), RuntimeError> {
        self.run_raw((a.as_ptr().cast(), a.len(), DType::I16), (b.as_ptr().cast(), b.len(), DType::I16), c)
    }

    fn run_raw(
        &self,
        (a, a_len, a_dtype): (*const u8, usize, DType),
        (b, b_len, b_dtype): (*const u8, usize, DType),
        c: &mut [i32],
    ) -> Result<(), RuntimeError> {
        for (index, name, expected, found) in
            [(0, "A", self.shape.a_dtype, a_dtype), (1, "B", self.variant.method.b_dtype(), b_dtype)]
        {
            if found != expected {
                return Err(RuntimeError::ArgumentDType { index, name: name.into(), expected, found });
            }
        }
        let (need_a, need_b, need_c) = self.shape.footprint(self.variant.method);
        for (index, name, expected, found) in
            [(0, "A", need_a, a_len), (1, "B", need_b, b_len), (2, "C", need_c, c.len())]
        {
            if found < expected {
                return Err(RuntimeError::BufferTooSmall { index, name: name.into(), expected, found });
            }
        }
        // SAFETY: the kernel has the SysV signature `fn(*const A, *const B, *mut i32)` with A
        // and B of the element types checked above, accesses only the footprint checked above,
        // uses only caller-saved registers, and `self` keeps its code alive.
        let f: extern "C" fn(*const u8, *const u8, *mut i32) = unsafe { std::mem::transmute(self.code.entry()) };
        f(a, b, c.as_mut_ptr());
        Ok(())
    }
}
