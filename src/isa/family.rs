//! Kernel families: which dot-product method a hand-assembled int8 GEMM kernel uses, at which
//! vector width, and which ISA level may run it. Facts shared by the assemblers (`kernels`),
//! the code generator's kernel selection, the machine-code listings (`disasm`) and the errors.

use std::fmt;

use ir::DType;

use super::IsaLevel;

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
    /// AMX `tdpbusd` (u8 × i8) on tiles of 16 rows × 64 bytes: exact, like `Vnni`.
    Amx,
}

impl DotMethod {
    /// Whether the method reads A of this element type.
    pub fn accepts_a(self, a_dtype: DType) -> bool {
        match self {
            DotMethod::Vnni | DotMethod::MaddUbs | DotMethod::Amx => a_dtype == DType::U8,
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
    /// AMX `tdpbusd` on tiles (the width is bookkeeping: a C tile row is one zmm of i32).
    pub const AMX_INT8: KernelVariant = KernelVariant { method: DotMethod::Amx, width: VectorWidth::Zmm };

    pub const ALL: [KernelVariant; 8] = [
        KernelVariant::AVX512_VNNI,
        KernelVariant::AVX_VNNI,
        KernelVariant::AVX2_WIDEN,
        KernelVariant::AVX2_MADDUBS,
        KernelVariant::AVX512_MADDUBS,
        KernelVariant::AVX2_SIGN,
        KernelVariant::AVX2_MADD16,
        KernelVariant::AMX_INT8,
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
            (DotMethod::Amx, _) => "amx-int8",
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
            (DotMethod::Vnni, VectorWidth::Zmm) | (DotMethod::MaddUbs, VectorWidth::Zmm) => level.has_avx512(),
            (DotMethod::Amx, VectorWidth::Zmm) => level == IsaLevel::Amx,
            (DotMethod::Amx, VectorWidth::Ymm) => false,
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
