//! How a layer's GEMM reads its operands: `GemmOperands`, the x86 kernel family's choice of
//! source dtype and declared weight range, and the shift that reads a u8 or i8 source as that
//! dtype (`source_shift`, and the stage `shifted_source` that applies it).

use ir::te::{Tensor, compute_vec};
use ir::{DType, Expr};

use crate::quant::QuantError;

/// How the GEMM of `conv2d_int8_direct` reads its operands: the x86 kernel family's choice.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GemmOperands {
    /// The dtype of the padded source: u8 (VNNI, the `vpmaddubsw` triple, widening), i8, the
    /// source shifted by -128 (AVX2 sign transfer), or i16, the source widened (AVX2
    /// `vpmaddwd` on pre-widened operands: the weights are then packed as i16 pairs); the
    /// compensation must be computed for it (`compensation_for_gemm`).
    pub source: DType,
    /// The range the packed weights are declared to lie in, so that code generation may rely
    /// on it (e.g. the triple is exact when `255·(w0 + w1)` fits i16) and every call checks it
    /// before generated code runs (a range covering all of i8 is not scanned). It must contain
    /// 0 (the packing's padding). Not declared for an i16 source, whose kernels are exact on any
    /// i16.
    pub weights: (i8, i8),
}

impl GemmOperands {
    /// A u8 source and any i8 weights.
    pub const U8: GemmOperands = GemmOperands { source: DType::U8, weights: (i8::MIN, i8::MAX) };

    /// The GEMM source dtypes there are kernels for.
    pub const SOURCES: [DType; 3] = [DType::U8, DType::I8, DType::I16];

    /// Consecutive `k` per column in the packed weights: 4 bytes, or 2 i16 for an i16 source.
    pub fn pack(self) -> i64 {
        if self.source == DType::I16 { 2 } else { 4 }
    }

    /// The packed weights' dtype: i16 for an i16 source, else i8.
    pub fn weight_dtype(self) -> DType {
        if self.source == DType::I16 { DType::I16 } else { DType::I8 }
    }
}

/// What is added to a source of type `src` to read it as `gemm` (u8, i8 or i16) without
/// changing the products' differences: 128 for i8 → u8, -128 for u8 → i8, else 0 (i16 holds
/// either as it is).
pub fn source_shift(src: DType, gemm: DType) -> i32 {
    match (src, gemm) {
        (DType::I8, DType::U8) => 128,
        (DType::U8, DType::I8) => -128,
        _ => 0,
    }
}

/// `src` as `gemm` (u8 or i8): itself, or `gemm(src) + source_shift` (wrapping, i.e. the top bit
/// flipped: `u8(x) + 128` for i8 → u8, `i8(x) - 128` for u8 → i8) as the stage `<name>.shifted`.
pub(super) fn shifted_source(src: &Tensor, gemm: DType, name: &str) -> Result<(Tensor, Option<Tensor>), QuantError> {
    if src.dtype() == gemm {
        return Ok((src.clone(), None));
    }
    let shift = i64::from(source_shift(src.dtype(), gemm));
    let read = |i: &[Expr]| src.at_vec(i.to_vec()).cast(gemm);
    let shifted = compute_vec(
        src.shape().to_vec(),
        |i| if shift == 0 { read(i) } else { read(i) + shift },
        &format!("{name}.shifted"),
    )?;
    Ok((shifted.clone(), Some(shifted)))
}
