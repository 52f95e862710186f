//! Target-neutral declarations of the tensor intrinsics that kernels implement.
//!
//! Each declaration is the exact semantics, written as a tensor expression; `ir` checks it
//! against the intrinsic's kind when it is declared, and `Schedule::tensorize` proves a loop
//! nest equal to it before replacing the nest by a call.

use ir::intrin::{
    Int8GemmSize, IntrinKind, TensorIntrin, decl_tensor_intrin, f32_gemm_compute, int8_gemm_compute, int16_gemm_compute,
};
use ir::te::{compute_vec, placeholder_vec};
use ir::trace::IntrinRef;
use ir::{DType, TeError};

/// The `m × n` u8 × i8 → i32 micro-kernel over a reduction of `k` (a multiple of 4):
/// `C[i, j] += Σ_{ko, ki} i32(A[i, ko*4 + ki]) · i32(B[ko, j, ki])` with `A: u8[m, k]`,
/// `B: i8[k/4, n, 4]` (VNNI packing: four consecutive `k` per column) and `C: i32[m, n]`.
///
/// Exact unless `saturating`: then each pair of adjacent products is summed and saturated to
/// i16 before the exact i32 accumulation, which is what `VPMADDUBSW` + `VPMADDWD` compute
/// (with `255·127 + 255·127` giving 32767 instead of 64770). Named `int8_gemm_{m}x{n}x{k}`,
/// with `_sat` appended for the saturating form. Errors if a size is not positive or `k` is not
/// a multiple of 4.
pub fn int8_gemm_microkernel(m: i64, n: i64, k: i64, saturating: bool) -> Result<TensorIntrin, TeError> {
    int8_gemm_segmented_microkernel(m, n, 1, k, DType::U8, saturating)
}

/// `int8_gemm_microkernel` over `segments` reductions of `k` whose rows of `A` lie at a free
/// stride (`A: a_dtype[m, segments, k]`, `B: i8[segments·k/4, n, 4]`): the kernel rows of a
/// convolution in one call. `a_dtype` is u8, or i8 for an exact i8 × i8 kernel (AVX2 sign
/// transfer). Named `int8_gemm_{m}x{n}x{segments}x{k}` (as `int8_gemm_microkernel` for one
/// segment), `_s8` appended for an i8 A.
pub fn int8_gemm_segmented_microkernel(
    m: i64,
    n: i64,
    segments: i64,
    k: i64,
    a_dtype: DType,
    saturating: bool,
) -> Result<TensorIntrin, TeError> {
    let tile = if segments == 1 { format!("{m}x{n}x{k}") } else { format!("{m}x{n}x{segments}x{k}") };
    let a_suffix = if a_dtype == DType::I8 { "_s8" } else { "" };
    let name = format!("int8_gemm_{tile}{a_suffix}{}", if saturating { "_sat" } else { "" });
    let size = Int8GemmSize { m, n, k, segments };
    let a = placeholder_vec(size.a_shape(), a_dtype, "A")?;
    let b = placeholder_vec(vec![segments * k / 4, n, 4], DType::I8, "B")?;
    let c = int8_gemm_compute(&a, &b, size, saturating, "C")?;
    decl_tensor_intrin(&name, IntrinKind::Int8Gemm { m, n, k, segments, saturating }, &c, &[&a, &b])
}

/// The `m × n` i16 × i16 → i32 micro-kernel over `segments` reductions of `k` (even):
/// `C[i, j] += Σ_{s, ko, ki} i32(A[i, s, ko*2 + ki]) · i32(B[s·k/2 + ko, j, ki])` with
/// `A: i16[m, segments, k]` (`[m, k]` for one segment), `B: i16[segments·k/2, n, 2]` and
/// `C: i32[m, n]` (`IntrinKind::Int16Gemm`): int8 operands widened once, outside the kernel
/// (AVX2 `vpmaddwd`). Named `int16_gemm_{m}x{n}x{k}` or `int16_gemm_{m}x{n}x{segments}x{k}`.
pub fn int16_gemm_segmented_microkernel(m: i64, n: i64, segments: i64, k: i64) -> Result<TensorIntrin, TeError> {
    let tile = if segments == 1 { format!("{m}x{n}x{k}") } else { format!("{m}x{n}x{segments}x{k}") };
    let size = Int8GemmSize { m, n, k, segments };
    let a = placeholder_vec(size.a_shape(), DType::I16, "A")?;
    let b = placeholder_vec(vec![segments * k / 2, n, 2], DType::I16, "B")?;
    let c = int16_gemm_compute(&a, &b, size, "C")?;
    decl_tensor_intrin(&format!("int16_gemm_{tile}"), IntrinKind::Int16Gemm { m, n, k, segments }, &c, &[&a, &b])
}

/// The micro-kernel of a GEMM whose source (A) is `a_dtype`: `int16_gemm_segmented_microkernel`
/// for i16, else the exact `int8_gemm_segmented_microkernel`.
pub fn gemm_segmented_microkernel(
    m: i64,
    n: i64,
    segments: i64,
    k: i64,
    a_dtype: DType,
) -> Result<TensorIntrin, TeError> {
    if a_dtype == DType::I16 {
        int16_gemm_segmented_microkernel(m, n, segments, k)
    } else {
        int8_gemm_segmented_microkernel(m, n, segments, k, a_dtype, false)
    }
}

/// The `m × n` f32 micro-kernel over a reduction of `k` (`IntrinKind::F32Gemm`):
/// `C[i, j] = C[i, j] + A[i, 0]·B[0, j] + … + A[i, k-1]·B[k-1, j]` with `A: f32[m, k]`,
/// `B: f32[k, n]` and `C: f32[m, n]`, each product rounded, the sum in ascending `k` (the
/// fold of a float `sum`). Named `f32_gemm_{m}x{n}x{k}`. Errors if a size is not positive.
pub fn f32_gemm_microkernel(m: i64, n: i64, k: i64) -> Result<TensorIntrin, TeError> {
    let a = placeholder_vec(vec![m, k], DType::F32, "A")?;
    let b = placeholder_vec(vec![k, n], DType::F32, "B")?;
    let c = f32_gemm_compute(&a, &b, (m, n, k), "C")?;
    decl_tensor_intrin(&format!("f32_gemm_{m}x{n}x{k}"), IntrinKind::F32Gemm { m, n, k }, &c, &[&a, &b])
}

/// The copy of an `[m, n]` block of `dtype` (`out[p, c] = x[p, c]`, an `IntrinKind::Map`):
/// what the gathered rows of a convolution (`ops::DirectConvLayer::im2col`) are tensorized
/// with, each kernel row of a row of pixels one call.
pub fn copy_map(m: i64, n: i64, dtype: DType) -> Result<TensorIntrin, TeError> {
    let x = placeholder_vec(vec![m, n], dtype, "x")?;
    let out = compute_vec(vec![m, n], |i| x.at([&i[0], &i[1]]), "copy")?;
    decl_tensor_intrin(&format!("copy_{m}x{n}_{dtype}"), IntrinKind::Map { m, n }, &out, &[&x])
}

/// The declaration of this module that `r` refers to, rebuilt: the resolver for replaying traces
/// of the x86 schedules (`ir::trace::Trace::replay`). `None` for an intrinsic declared elsewhere,
/// such as a layer's requantization (`ops::DirectConvLayer::requantize_row`, which a fresh
/// definition of the layer carries).
pub fn resolve(r: &IntrinRef) -> Option<TensorIntrin> {
    match r.kind {
        IntrinKind::Int8Gemm { m, n, k, segments, saturating } => [DType::U8, DType::I8]
            .into_iter()
            .filter_map(|a| int8_gemm_segmented_microkernel(m, n, segments, k, a, saturating).ok())
            .find(|intrin| r.matches(intrin)),
        IntrinKind::Int16Gemm { m, n, k, segments } => {
            int16_gemm_segmented_microkernel(m, n, segments, k).ok().filter(|intrin| r.matches(intrin))
        }
        IntrinKind::F32Gemm { m, n, k } => f32_gemm_microkernel(m, n, k).ok().filter(|intrin| r.matches(intrin)),
        IntrinKind::Map { m, n } => [DType::U8, DType::I8, DType::I16]
            .into_iter()
            .filter_map(|dtype| copy_map(m, n, dtype).ok())
            .find(|intrin| r.matches(intrin)),
        // Built by lowering (`ir::composite`), never part of a schedule's trace.
        IntrinKind::GemmMap { .. } | IntrinKind::Generic => None,
        // Declared by the auto-scheduler's rules from a stage's body (`auto::fold_stage`).
        IntrinKind::RowFold { .. } => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn declarations_are_named_by_their_tile() {
        let exact = int8_gemm_microkernel(4, 16, 64, false).unwrap();
        assert_eq!(exact.name, "int8_gemm_4x16x64");
        assert_eq!(exact.kind, IntrinKind::Int8Gemm { m: 4, n: 16, k: 64, segments: 1, saturating: false });
        assert_eq!(exact.inputs[1].shape(), &[16, 16, 4]);
        let saturating = int8_gemm_microkernel(8, 48, 8, true).unwrap();
        assert_eq!(saturating.name, "int8_gemm_8x48x8_sat");
        assert_eq!(
            saturating.output.body().unwrap().to_string(),
            "sum[ko in 0..2, kp in 0..2](i32(sat_i16(i32(A[i, ko*4 + kp*2])*i32(B[ko, j, kp*2]) + i32(A[i, ko*4 + (kp*2 + 1)])*i32(B[ko, j, kp*2 + 1]))))"
        );
    }

    #[test]
    fn the_f32_declaration_is_named_by_its_tile_and_resolves() {
        let g = f32_gemm_microkernel(6, 64, 512).unwrap();
        assert_eq!(g.name, "f32_gemm_6x64x512");
        assert_eq!(g.inputs[1].shape(), &[512, 64]);
        let r = IntrinRef::of(&g);
        assert!(resolve(&r).is_some_and(|back| r.matches(&back)));
        assert!(matches!(f32_gemm_microkernel(6, 0, 8), Err(TeError::BadShape { .. })));
    }

    #[test]
    fn sizes_must_fit_the_kind() {
        let err = int8_gemm_microkernel(4, 16, 6, false).unwrap_err();
        assert_eq!(
            err.to_string(),
            "tensor intrinsic int8_gemm_4x16x6: Int8Gemm sizes: expected m, n, segments > 0 and k a positive multiple of 4, found m=4, n=16, k=6, segments=1"
        );
        assert!(matches!(int8_gemm_microkernel(0, 16, 8, false), Err(TeError::BadShape { .. })));
    }
}
