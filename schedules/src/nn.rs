//! Operator definitions as tensor expressions.

use ir::expr::select;
use ir::te::{Tensor, compute, compute_vec, reduce_axis, sum};
use ir::{DType, Expr, TeError};

/// `C[i, j] = Σ_k out(A[i, k]) · out(B[k, j])` for `A: [M, K]`, `B: [K, N]`, where `out` is an
/// exact cast to `out_dtype` (so u8 × i8 → i32 never saturates).
pub fn matmul(a: &Tensor, b: &Tensor, out_dtype: DType, name: &str) -> Result<Tensor, TeError> {
    let mismatch = |what: &str, expected: String, found: String| TeError::ShapeMismatch {
        op: format!("matmul {name}"),
        what: what.to_string(),
        expected,
        found,
    };
    if a.shape().len() != 2 || b.shape().len() != 2 {
        let found = format!("{:?} and {:?}", a.shape(), b.shape());
        return Err(mismatch("operand ranks", "2 and 2".to_string(), found));
    }
    let (m, k) = (a.shape()[0], a.shape()[1]);
    let n = b.shape()[1];
    if b.shape()[0] != k {
        return Err(mismatch("rows of B (the reduction extent of A)", k.to_string(), b.shape()[0].to_string()));
    }
    let r = reduce_axis(k, "k")?;
    compute(
        [m, n],
        |i| sum(out_dtype, &[&r], a.at([&i[0], &r]).cast(out_dtype) * b.at([&r, &i[1]]).cast(out_dtype)),
        name,
    )
}

/// `B: i8[K, N]` in the VNNI layout of the `Int8Gemm` micro-kernel:
/// `Bp[jo, ko, ji, ki] = B[ko*4 + ki, jo*nr + ji]`, shape `[⌈N/nr⌉, ⌈K/4⌉, nr, 4]`, so one `ko`
/// step of an `nr`-column panel is `4·nr` consecutive bytes (four consecutive `k` per column).
///
/// Any `K` and `N`: where `B` has no element (rows `K..` of the last group, columns `N..` of the
/// last panel) `Bp` holds zeros, which add nothing to a product. When `4` divides `K` and `nr`
/// divides `N` the packing is a plain copy. Errors for `nr < 1` or a `B` not of rank 2.
pub fn pack_b_vnni(b: &Tensor, nr: i64, name: &str) -> Result<Tensor, TeError> {
    pack_b(b, nr, (4, None), &format!("pack_b_vnni {name}"), name)
}

/// `B: i8[K, N]` widened to i16 in the layout of the `Int16Gemm` micro-kernel:
/// `Bp[jo, ko, ji, ki] = i16(B[ko*2 + ki, jo*nr + ji])`, shape `[⌈N/nr⌉, ⌈K/2⌉, nr, 2]` (two
/// consecutive `k` per column), zero-padded as `pack_b_vnni`.
pub fn pack_b_i16(b: &Tensor, nr: i64, name: &str) -> Result<Tensor, TeError> {
    pack_b(b, nr, (2, Some(DType::I16)), &format!("pack_b_i16 {name}"), name)
}

fn ceil_div(a: i64, b: i64) -> i64 {
    (a + b - 1) / b
}

/// `Bp[jo, ko, ji, ki] = B[ko*pack + ki, jo*nr + ji]` (cast to `dtype` if given), zero outside
/// `B`, errors named after `op`.
fn pack_b(b: &Tensor, nr: i64, (pack, dtype): (i64, Option<DType>), op: &str, name: &str) -> Result<Tensor, TeError> {
    let mismatch = |what: &str, expected: String, found: String| TeError::ShapeMismatch {
        op: op.to_string(),
        what: what.to_string(),
        expected,
        found,
    };
    let [k, n] = b.shape() else {
        return Err(mismatch("shape of B", "[K, N]".to_string(), format!("{:?}", b.shape())));
    };
    let (k, n) = (*k, *n);
    if nr <= 0 {
        return Err(mismatch("panel width nr", "at least 1".to_string(), nr.to_string()));
    }
    let padded = k % pack != 0 || n % nr != 0;
    let out_dtype = dtype.unwrap_or(b.dtype());
    compute_vec(
        vec![ceil_div(n, nr), ceil_div(k, pack), nr, pack],
        |i| {
            let (row, col) = (&i[1] * pack + &i[3], &i[0] * nr + &i[2]);
            let value = b.at([&row, &col]);
            let value = dtype.map_or(value.clone(), |d| value.cast(d));
            if padded { select(row.lt(k) & col.lt(n), value, Expr::int(out_dtype, 0)) } else { value }
        },
        name,
    )
}

/// The `A` operand of `matmul_packed` for `B` packed in groups of `pack` rows (`pack_b_vnni`: 4,
/// `pack_b_i16`: 2) with elements of `dtype`: `None` when `A: [M, K]` is that already (`dtype`
/// and `pack` divides `K`) and is read in place; else the stage (`name`)
/// `A'[i, k] = dtype(A[i, k])` for `k < K`, `0` for `K ≤ k < ⌈K/pack⌉·pack`, the copy that pads
/// the reduction to whole groups (its zeros meet the packing's zero rows) and widens.
pub fn gemm_source(a: &Tensor, pack: i64, dtype: DType, name: &str) -> Result<Option<Tensor>, TeError> {
    let [m, k] = a.shape() else {
        return Err(TeError::ShapeMismatch {
            op: format!("gemm_source {name}"),
            what: "shape of A".to_string(),
            expected: "[M, K]".to_string(),
            found: format!("{:?}", a.shape()),
        });
    };
    let (m, k) = (*m, *k);
    if pack <= 0 {
        return Err(TeError::ShapeMismatch {
            op: format!("gemm_source {name}"),
            what: "packing".to_string(),
            expected: "at least 1".to_string(),
            found: pack.to_string(),
        });
    }
    if k % pack == 0 && a.dtype() == dtype {
        return Ok(None);
    }
    let source = compute(
        [m, ceil_div(k, pack) * pack],
        |i| {
            let value = a.at([&i[0], &i[1]]).cast(dtype);
            if k % pack == 0 { value } else { select(i[1].lt(k), value, Expr::int(dtype, 0)) }
        },
        name,
    )?;
    Ok(Some(source))
}

/// `C[i, j] = Σ_{ko, ki} out(A[i, ko*P + ki]) · out(Bp[j/nr, ko, j%nr, ki])` for `A: [M, K']`,
/// `Bp = pack_b_vnni(B, nr)` (`P = 4`) or `pack_b_i16(B, nr)` (`P = 2`, then `A` is i16 too for
/// the kernel) of shape `[⌈N/nr⌉, K'/P, nr, P]`, and `C: [M, n]` with `n` the columns of `B`:
/// exactly `matmul(A, B, out_dtype)` (with `A` from `gemm_source` where `K` needed padding:
/// the padding multiplies zeros), reading `B` in the packed layout so that `x86::gemm_int8` can
/// tensorize it. Reduction axes `ko` (`K'/P`) and `ki` (`P`).
pub fn matmul_packed(a: &Tensor, bp: &Tensor, n: i64, out_dtype: DType, name: &str) -> Result<Tensor, TeError> {
    let mismatch = |what: &str, expected: String, found: String| TeError::ShapeMismatch {
        op: format!("matmul_packed {name}"),
        what: what.to_string(),
        expected,
        found,
    };
    let ([m, k], [panels, groups, nr, pack]) = (a.shape(), bp.shape()) else {
        let found = format!("{:?} and {:?}", a.shape(), bp.shape());
        return Err(mismatch("operand shapes", "[M, K] and [N/nr, K/P, nr, P]".to_string(), found));
    };
    let pack = *pack;
    if ![2, 4].contains(&pack) || groups * pack != *k {
        let expected = format!("[N/nr, {}, nr, 4] or [N/nr, {}, nr, 2]", k / 4, k / 2);
        return Err(mismatch("shape of Bp", expected, format!("{:?}", bp.shape())));
    }
    let (m, nr) = (*m, *nr);
    // Every panel holds at least one of the `n` columns.
    if n <= (panels - 1) * nr || n > panels * nr {
        let expected = format!("{}..={} (every panel of Bp holding some)", (panels - 1) * nr + 1, panels * nr);
        return Err(mismatch("columns n", expected, n.to_string()));
    }
    let ko = reduce_axis(*groups, "ko")?;
    let ki = reduce_axis(pack, "ki")?;
    compute(
        [m, n],
        |i| {
            let a_ik = a.at([&i[0], &(&ko * pack + &ki)]).cast(out_dtype);
            let b_kj = bp.at([&(&i[1] / nr), &ko.to_expr(), &(&i[1] % nr), &ki.to_expr()]).cast(out_dtype);
            sum(out_dtype, &[&ko, &ki], a_ik * b_kj)
        },
        name,
    )
}

/// The stages of `matmul_s8s8_via_u8`.
#[derive(Clone, Debug)]
pub struct S8S8Matmul {
    /// `A + 128` as u8 (`<name>.a_u8`), zero-padded along K to a multiple of 4.
    pub shifted_a: Tensor,
    /// `pack_b_vnni(B, nr)` (`<name>.b_vnni`).
    pub packed_b: Tensor,
    /// The u8 × i8 → i32 product of the two (`<name>.u8s8`), the stage a u8 × s8 kernel computes.
    pub product: Tensor,
    /// `comp[j] = Σ_k 128 · i32(B[k, j])` (`<name>.compensation`), computed from `B` alone.
    pub compensation: Tensor,
    /// `C[i, j] = product[i, j] - comp[j]`, equal to `matmul(A, B, i32)`.
    pub output: Tensor,
}

/// The s8 × s8 → i32 matmul of `A: i8[M, K]` and `B: i8[K, N]` computed with a u8 × s8 kernel, as
/// oneDNN does: `Σ_k a·b = Σ_k (a + 128)·b - 128·Σ_k b`. The shift is exact (`a + 128` is in
/// `0..=255`) and the identity holds exactly in wrapping i32, so `output` equals
/// `matmul(A, B, i32)` for every input, of any shape (padded as `pack_b_vnni` and `gemm_source`
/// pad).
///
/// With an exact u8 × s8 kernel this is exact; with the saturating `VPMADDUBSW` sequence the
/// shifted activations reach 255 and pair sums saturate: `{127, 127, 0, 0}·{127, 127, 0, 0}`
/// gives `32767 - 128·254 = 255` instead of 32258.
pub fn matmul_s8s8_via_u8(a: &Tensor, b: &Tensor, nr: i64, name: &str) -> Result<S8S8Matmul, TeError> {
    let mismatch = |what: &str, expected: String, found: String| TeError::ShapeMismatch {
        op: format!("matmul_s8s8_via_u8 {name}"),
        what: what.to_string(),
        expected,
        found,
    };
    if a.dtype() != DType::I8 || b.dtype() != DType::I8 {
        return Err(mismatch("operand dtypes", "i8 and i8".to_string(), format!("{} and {}", a.dtype(), b.dtype())));
    }
    let [m, k] = a.shape() else {
        return Err(mismatch("shape of A", "[M, K]".to_string(), format!("{:?}", a.shape())));
    };
    let (m, k) = (*m, *k);
    let packed_b = pack_b_vnni(b, nr, &format!("{name}.b_vnni"))?;
    if b.shape()[0] != k {
        return Err(mismatch("rows of B (the reduction extent of A)", k.to_string(), b.shape()[0].to_string()));
    }
    let n = b.shape()[1];
    // i8 → u8 keeps the bits (x + 256 for negative x); adding 128 then wraps to x + 128. Zero
    // past K, where the packing's rows are zero.
    let shifted_a = compute(
        [m, ceil_div(k, 4) * 4],
        |i| {
            let shifted = a.at([&i[0], &i[1]]).cast(DType::U8) + 128;
            if k % 4 == 0 { shifted } else { select(i[1].lt(k), shifted, Expr::int(DType::U8, 0)) }
        },
        &format!("{name}.a_u8"),
    )?;
    let product = matmul_packed(&shifted_a, &packed_b, n, DType::I32, &format!("{name}.u8s8"))?;
    let r = reduce_axis(k, "k")?;
    let compensation = compute(
        [n],
        |j| sum(DType::I32, &[&r], b.at([&r.to_expr(), &j[0]]).cast(DType::I32) * 128),
        &format!("{name}.compensation"),
    )?;
    let output = compute([m, n], |i| product.at([&i[0], &i[1]]) - compensation.at([&i[1]]), name)?;
    Ok(S8S8Matmul { shifted_a, packed_b, product, compensation, output })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::intrin::int8_gemm_microkernel;
    use crate::x86::{GemmInt8Knobs, schedule_gemm_int8};
    use ir::interp::{Array, eval_te, run_func};
    use ir::schedule::create_schedule;
    use ir::te::placeholder;
    use ir::{MismatchPart, ScheduleError};

    fn values(len: i64, mul: i64, lo: i64) -> Vec<i64> {
        (0..len).map(|x| (x * mul + 11) % 256 + lo).collect()
    }

    #[test]
    fn packing_is_a_layout_transform_and_the_packed_matmul_is_the_matmul() {
        let a = placeholder([3, 8], DType::U8, "A").unwrap();
        let b = placeholder([8, 32], DType::I8, "B").unwrap();
        let bp = pack_b_vnni(&b, 16, "Bp").unwrap();
        assert_eq!(bp.shape(), &[2, 2, 16, 4]);
        let packed = matmul_packed(&a, &bp, 32, DType::I32, "C").unwrap();
        let plain = matmul(&a, &b, DType::I32, "R").unwrap();
        let a_arr = Array::from_i64(DType::U8, &[3, 8], &values(24, 37, 0));
        let b_arr = Array::from_i64(DType::I8, &[8, 32], &values(256, 53, -128));
        let out = eval_te(&[&bp, &packed, &plain], &[(&a, &a_arr), (&b, &b_arr)]).unwrap();
        let (b_vals, packed_vals) = (b_arr.to_i64_vec(), out[0].to_i64_vec());
        // Bp[jo, ko, ji, ki] = B[ko*4 + ki, jo*16 + ji]
        assert_eq!(packed_vals[((2 + 1) * 16 + 5) * 4 + 2], b_vals[(4 + 2) * 32 + 16 + 5]);
        assert!(out[1].bits_eq(&out[2]));
    }

    /// Pre-widened operands: B packed in i16 pairs times an i16 A is the matmul, and the x86
    /// schedule tensorizes it into the `Int16Gemm` micro-kernel.
    #[test]
    fn i16_pairs_are_a_layout_transform_and_their_packed_matmul_is_the_matmul() {
        let a = placeholder([3, 8], DType::U8, "A").unwrap();
        let b = placeholder([8, 32], DType::I8, "B").unwrap();
        let a16 = compute([3, 8], |i| a.at([&i[0], &i[1]]).cast(DType::I16), "A16").unwrap();
        let bp = pack_b_i16(&b, 16, "Bp").unwrap();
        assert_eq!((bp.shape(), bp.dtype()), (&[2, 4, 16, 2][..], DType::I16));
        let packed = matmul_packed(&a16, &bp, 32, DType::I32, "C").unwrap();
        let plain = matmul(&a, &b, DType::I32, "R").unwrap();
        let a_arr = Array::from_i64(DType::U8, &[3, 8], &values(24, 37, 0));
        let b_arr = Array::from_i64(DType::I8, &[8, 32], &values(256, 53, -128));
        let out = eval_te(&[&bp, &packed, &plain], &[(&a, &a_arr), (&b, &b_arr)]).unwrap();
        let (b_vals, packed_vals) = (b_arr.to_i64_vec(), out[0].to_i64_vec());
        // Bp[jo, ko, ji, ki] = B[ko*2 + ki, jo*16 + ji]
        assert_eq!(packed_vals[((4 + 3) * 16 + 5) * 2 + 1], b_vals[(3 * 2 + 1) * 32 + 16 + 5]);
        assert!(out[1].bits_eq(&out[2]));
        let mut s = create_schedule(&[&packed]);
        schedule_gemm_int8(&mut s, &packed, GemmInt8Knobs { mr: 3, nr: 16, parallel: false }).unwrap();
        let text = ir::lower::lower(&s, &[&a, &b, &packed], "f").unwrap().to_string();
        assert!(text.contains("call reset int16_gemm_3x16x8("), "{text}");
    }

    #[test]
    fn packing_pads_k_and_n_with_zeros_and_the_padded_product_is_the_matmul() {
        // K = 6 (two zero rows in the last group), N = 20 (12 zero columns in the last panel).
        let (m, k, n) = (3, 6, 20);
        let a = placeholder([m, k], DType::U8, "A").unwrap();
        let b = placeholder([k, n], DType::I8, "B").unwrap();
        let (bp, bp16) = (pack_b_vnni(&b, 16, "Bp").unwrap(), pack_b_i16(&b, 16, "Bp16").unwrap());
        assert_eq!((bp.shape(), bp16.shape()), (&[2, 2, 16, 4][..], &[2, 3, 16, 2][..]));
        let a4 = gemm_source(&a, 4, DType::U8, "A4").unwrap().expect("K = 6 needs padding");
        let a16 = gemm_source(&a, 2, DType::I16, "A16").unwrap().expect("i16 needs widening");
        assert_eq!((a4.shape(), a16.shape()), (&[3, 8][..], &[3, 6][..]));
        let c = matmul_packed(&a4, &bp, n, DType::I32, "C").unwrap();
        let c16 = matmul_packed(&a16, &bp16, n, DType::I32, "C16").unwrap();
        let plain = matmul(&a, &b, DType::I32, "R").unwrap();
        let a_arr = Array::from_i64(DType::U8, &[m, k], &values(m * k, 37, 0));
        let b_arr = Array::from_i64(DType::I8, &[k, n], &values(k * n, 53, -128));
        let out = eval_te(&[&bp, &a4, &c, &c16, &plain], &[(&a, &a_arr), (&b, &b_arr)]).unwrap();
        let (b_vals, packed) = (b_arr.to_i64_vec(), out[0].to_i64_vec());
        let at = |jo: usize, ko: usize, ji: usize, ki: usize| packed[((jo * 2 + ko) * 16 + ji) * 4 + ki];
        assert_eq!(at(1, 1, 3, 1), b_vals[5 * 20 + 19]);
        assert_eq!((at(1, 1, 3, 2), at(1, 0, 4, 0), at(0, 1, 0, 3)), (0, 0, 0));
        assert_eq!(out[1].to_i64_vec()[6..8], [0, 0]);
        assert!(out[2].bits_eq(&out[4]) && out[3].bits_eq(&out[4]));
        // A u8 A with whole groups is read in place.
        let whole = placeholder([m, 8], DType::U8, "W").unwrap();
        assert!(gemm_source(&whole, 4, DType::U8, "W4").unwrap().is_none());
    }

    #[test]
    fn shapes_that_do_not_pack_are_typed_errors() {
        let b = placeholder([6, 32], DType::I8, "B").unwrap();
        let err = pack_b_vnni(&b, 0, "Bp").unwrap_err();
        assert_eq!(err.to_string(), "pack_b_vnni Bp: panel width nr must be at least 1, found 0");
        let err = pack_b_i16(&placeholder([6], DType::I8, "B").unwrap(), 16, "Bp").unwrap_err();
        assert_eq!(err.to_string(), "pack_b_i16 Bp: shape of B must be [K, N], found [6]");
        let a = placeholder([3, 12], DType::U8, "A").unwrap();
        let bp = pack_b_vnni(&placeholder([8, 32], DType::I8, "B").unwrap(), 16, "Bp").unwrap();
        let err = matmul_packed(&a, &bp, 32, DType::I32, "C").unwrap_err();
        assert_eq!(
            err.to_string(),
            "matmul_packed C: shape of Bp must be [N/nr, 3, nr, 4] or [N/nr, 6, nr, 2], found [2, 2, 16, 4]"
        );
        let a = placeholder([3, 8], DType::U8, "A").unwrap();
        for n in [16, 33] {
            let err = matmul_packed(&a, &bp, n, DType::I32, "C").unwrap_err();
            let expected =
                format!("matmul_packed C: columns n must be 17..=32 (every panel of Bp holding some), found {n}");
            assert_eq!(err.to_string(), expected);
        }
        let err = matmul_s8s8_via_u8(&a, &placeholder([12, 16], DType::I8, "B").unwrap(), 16, "C").unwrap_err();
        assert!(err.to_string().contains("operand dtypes must be i8 and i8, found u8 and i8"), "{err}");
    }

    /// `a = (127, 127, 0, 0)`, `b = (127, 127, 0, 0)` in row 0 / column 0 of a 1 × 16 product.
    fn onednn_example() -> (Tensor, Tensor, S8S8Matmul, Array, Array) {
        let a = placeholder([1, 4], DType::I8, "A").unwrap();
        let b = placeholder([4, 16], DType::I8, "B").unwrap();
        let mm = matmul_s8s8_via_u8(&a, &b, 16, "C").unwrap();
        let a_arr = Array::from_i64(DType::I8, &[1, 4], &[127, 127, 0, 0]);
        let mut b_vals: Vec<i64> = values(64, 29, -128);
        for (k, v) in [127, 127, 0, 0].into_iter().enumerate() {
            b_vals[k * 16] = v;
        }
        let b_arr = Array::from_i64(DType::I8, &[4, 16], &b_vals);
        (a, b, mm, a_arr, b_arr)
    }

    #[test]
    fn s8_times_s8_through_the_exact_u8_kernel_is_exact() {
        let (a, b, mm, a_arr, b_arr) = onednn_example();
        let reference = matmul(&a, &b, DType::I32, "R").unwrap();
        let out = eval_te(&[&mm.output, &reference], &[(&a, &a_arr), (&b, &b_arr)]).unwrap();
        assert_eq!(out[0].to_i64_vec()[0], 32258);
        assert!(out[0].bits_eq(&out[1]));
        // The same through the tensorized product: the call runs the exact declaration.
        let mut s = create_schedule(&[&mm.output]);
        schedule_gemm_int8(&mut s, &mm.product, GemmInt8Knobs { mr: 1, nr: 16, parallel: false }).unwrap();
        let f = ir::lower::lower(&s, &[&a, &b, &mm.output], "s8s8").unwrap();
        assert!(f.to_string().contains("call reset int8_gemm_1x16x4("), "{f}");
        let mut args = vec![a_arr, b_arr, Array::zeros(DType::I32, &[1, 16])];
        run_func(&f, &mut args).unwrap();
        assert!(args[2].bits_eq(&out[1]));
        // The saturating kernel does not compute this stage, and tensorize says so.
        let mut s = create_schedule(&[&mm.output]);
        let ko = mm.product.reduce_axes()[0].clone();
        let saturating = int8_gemm_microkernel(1, 16, 4, true).unwrap();
        let err = s.tensorize(&mm.product, &ko, &saturating).unwrap_err();
        assert!(matches!(&err, ScheduleError::TensorizeMismatch(m) if m.part == MismatchPart::Saturation), "{err}");
    }

    #[test]
    fn s8_times_s8_through_the_saturating_declaration_gives_255() {
        let (a, b, mm, a_arr, b_arr) = onednn_example();
        let stages = eval_te(&[&mm.shifted_a, &mm.packed_b, &mm.compensation], &[(&a, &a_arr), (&b, &b_arr)]).unwrap();
        assert_eq!(stages[0].to_i64_vec(), vec![255, 255, 128, 128]);
        let saturating = int8_gemm_microkernel(1, 16, 4, true).unwrap();
        // The single 16-column panel of the packed B is the declaration's B: [1, 16, 4].
        let panel = Array::from_i64(DType::I8, &[1, 16, 4], &stages[1].to_i64_vec());
        let inputs = [(&saturating.inputs[0], &stages[0]), (&saturating.inputs[1], &panel)];
        let product = eval_te(&[&saturating.output], &inputs).unwrap().remove(0);
        assert_eq!(product.to_i64_vec()[0], 32767);
        assert_eq!(product.to_i64_vec()[0] - stages[2].to_i64_vec()[0], 255);
    }
}

/// The stages of `softmax`, for scheduling.
#[derive(Clone, Debug)]
pub struct Softmax {
    /// `max_lanes[r, l] = max` of `x[r, k]` over `k ≡ l (mod FOLD_LANES)` (`<name>.max_lanes`).
    pub max_lanes: Tensor,
    /// `max[r] = max_l max_lanes[r, l]` (`<name>.max`).
    pub max: Tensor,
    /// `e[r, k] = exp(x[r, k] − max[r])` (`<name>.exp`).
    pub exp: Tensor,
    /// `sum_lanes[r, l] = Σ e[r, k]` over `k ≡ l (mod FOLD_LANES)` in increasing `k`
    /// (`<name>.sum_lanes`).
    pub sum_lanes: Tensor,
    /// `sum[r] = Σ_l sum_lanes[r, l]` in increasing `l` (`<name>.sum`).
    pub sum: Tensor,
    /// `y[r, k] = e[r, k] / sum[r]`.
    pub output: Tensor,
}

/// The number of partial folds of a row reduction (`lane_fold`): a row's sum is defined as
/// `FOLD_LANES` partial sums, lane `l` taking the elements `k ≡ l (mod FOLD_LANES)` in
/// increasing `k`, then the partials added in increasing `l` — the order a 16-lane vector
/// accumulator computes, so schedules vectorize the row (contiguous loads) and still give
/// the interpreter's bits. Fixed by the definition, not by the target's vector width.
pub const FOLD_LANES: i64 = 16;

/// The two stages of a row reduction of `source(r, k)` over `k < n` in the lane order of
/// `FOLD_LANES`: `(<name>_lanes[r, l], <name>[r])`. A lane past the row's end (`n` not a
/// multiple of the lanes) takes the reducer's identity for its missing elements.
fn lane_fold(
    rows: &[i64],
    n: i64,
    reducer: &ir::te::Reducer,
    source: impl Fn(&[Expr], Expr) -> Expr,
    name: &str,
) -> Result<(Tensor, Tensor), TeError> {
    let chunks = (n + FOLD_LANES - 1) / FOLD_LANES;
    let m = reduce_axis(chunks, "m")?;
    let mut lanes_shape = rows.to_vec();
    lanes_shape.push(FOLD_LANES);
    let lanes = compute_vec(
        lanes_shape,
        |i| {
            let (r, l) = (&i[..i.len() - 1], &i[i.len() - 1]);
            let k = m.to_expr() * FOLD_LANES + l;
            let value = source(r, k.clone());
            let value = if n % FOLD_LANES == 0 {
                value
            } else {
                let identity = reducer.identity(value.dtype());
                select(k.lt(n), value, identity)
            };
            reducer.reduce(value.dtype(), &[&m], value)
        },
        &format!("{name}_lanes"),
    )?;
    let l = reduce_axis(FOLD_LANES, "l")?;
    let fold = compute_vec(
        rows.to_vec(),
        |r| reducer.reduce(lanes.dtype(), &[&l], lanes.at_vec(with_last(r, l.to_expr()))),
        name,
    )?;
    Ok((lanes, fold))
}

/// Checks that `x` is f32 of rank at least 2 and returns (row dimensions, last extent).
fn rows_and_last(op: &str, x: &Tensor) -> Result<(Vec<i64>, i64), TeError> {
    let mismatch = |what: &str, expected: &str, found: String| TeError::ShapeMismatch {
        op: op.to_string(),
        what: what.to_string(),
        expected: expected.to_string(),
        found,
    };
    if x.dtype() != DType::F32 {
        return Err(mismatch("the element type of x", "f32", x.dtype().to_string()));
    }
    match x.shape() {
        [rows @ .., last] if !rows.is_empty() => Ok((rows.to_vec(), *last)),
        other => Err(mismatch("the shape of x", "[rows..., N] (rank 2 or more)", format!("{other:?}"))),
    }
}

/// `x` with its last index `k` appended to the row indices `r`.
fn with_last(r: &[Expr], k: Expr) -> Vec<Expr> {
    let mut indices = r.to_vec();
    indices.push(k);
    indices
}

/// Softmax of an f32 `x: [rows..., N]` over its last axis, numerically stable:
/// `y[r, k] = exp(x[r, k] − max_j x[r, j]) / Σ_j exp(x[r, j] − max_j x[r, j])`.
///
/// Every exponent is at most 0, so no `exp` overflows and the largest term of each row is
/// exactly 1 (the sum is at least 1). `exp` is `ir::math::exp` (within 1 ulp); the max and
/// the sum are row folds in the lane order of `FOLD_LANES` (the sum in f32: 16 partial sums in
/// increasing `k`, then added in increasing lane), which schedules keep, so every schedule
/// gives the interpreter's bits. A NaN in a row is skipped by the max and makes that row NaN;
/// a row of all −∞ is NaN (−∞ − −∞).
pub fn softmax(x: &Tensor, name: &str) -> Result<Softmax, TeError> {
    let (rows, n) = rows_and_last(&format!("softmax {name}"), x)?;
    let mut full = rows.clone();
    full.push(n);
    let (max_lanes, max) =
        lane_fold(&rows, n, &ir::te::Reducer::Max, |r, k| x.at_vec(with_last(r, k)), &format!("{name}.max"))?;
    let exp = compute_vec(
        full.clone(),
        |i| {
            let r = &i[..i.len() - 1];
            ir::math::exp(x.at_vec(i.to_vec()) - max.at_vec(r.to_vec()))
        },
        &format!("{name}.exp"),
    )?;
    let (sum_lanes, sum_t) =
        lane_fold(&rows, n, &ir::te::Reducer::Sum, |r, k| exp.at_vec(with_last(r, k)), &format!("{name}.sum"))?;
    let output = compute_vec(full, |i| exp.at_vec(i.to_vec()) / sum_t.at_vec(i[..i.len() - 1].to_vec()), name)?;
    Ok(Softmax { max_lanes, max, exp, sum_lanes, sum: sum_t, output })
}

/// The stages of `layernorm`, for scheduling.
#[derive(Clone, Debug)]
pub struct LayerNorm {
    /// `sum_lanes[r, l] = Σ x[r, k]` over `k ≡ l (mod FOLD_LANES)` in increasing `k`
    /// (`<name>.sum_lanes`).
    pub sum_lanes: Tensor,
    /// `sum[r] = Σ_l sum_lanes[r, l]` in increasing `l` (`<name>.sum`).
    pub sum: Tensor,
    /// `mean[r] = sum[r] / N` (`<name>.mean`).
    pub mean: Tensor,
    /// `sq_lanes[r, l] = Σ (x[r, k] − mean[r])²` over `k ≡ l (mod FOLD_LANES)` in increasing
    /// `k` (`<name>.sq_lanes`).
    pub sq_lanes: Tensor,
    /// `sq[r] = Σ_l sq_lanes[r, l]` in increasing `l` (`<name>.sq`).
    pub sq: Tensor,
    /// `inv_std[r] = rsqrt(sq[r] / N + eps)` (`<name>.inv_std`).
    pub inv_std: Tensor,
    /// `y[r, k] = ((x[r, k] − mean[r]) · inv_std[r]) · gamma[k] + beta[k]`.
    pub output: Tensor,
}

/// Layer normalization of an f32 `x: [rows..., N]` over its last axis with f32 `gamma, beta: [N]`:
/// `y = (x − mean) / sqrt(var + eps) · gamma + beta`, with the biased variance
/// `var = Σ (x − mean)² / N` computed in two passes (no cancellation of `E[x²] − mean²`).
///
/// All in f32 in the order written on the stages of `LayerNorm`; the sums are row folds in the
/// lane order of `FOLD_LANES`, which schedules keep, so every schedule gives the interpreter's bits. `1/sqrt` is
/// `ir::math::rsqrt` (two correctly rounded operations). `eps` must be finite and non-negative.
pub fn layernorm(x: &Tensor, gamma: &Tensor, beta: &Tensor, eps: f32, name: &str) -> Result<LayerNorm, TeError> {
    let op = format!("layernorm {name}");
    let (rows, n) = rows_and_last(&op, x)?;
    for (what, t) in [("gamma", gamma), ("beta", beta)] {
        if t.dtype() != DType::F32 || t.shape() != [n] {
            return Err(TeError::ShapeMismatch {
                op: op.clone(),
                what: format!("{what} (element type and shape)"),
                expected: format!("f32 [{n}]"),
                found: format!("{} {:?}", t.dtype(), t.shape()),
            });
        }
    }
    if !(eps.is_finite() && eps >= 0.0) {
        return Err(TeError::ShapeMismatch {
            op,
            what: "epsilon".to_string(),
            expected: "finite and non-negative".to_string(),
            found: eps.to_string(),
        });
    }
    let mut full = rows.clone();
    full.push(n);
    let count = Expr::float(DType::F32, n as f64);
    let (sum_lanes, sum_t) =
        lane_fold(&rows, n, &ir::te::Reducer::Sum, |r, k| x.at_vec(with_last(r, k)), &format!("{name}.sum"))?;
    let mean = compute_vec(rows.clone(), |r| sum_t.at_vec(r.to_vec()) / &count, &format!("{name}.mean"))?;
    let (sq_lanes, sq) = lane_fold(
        &rows,
        n,
        &ir::te::Reducer::Sum,
        |r, k| {
            let d = x.at_vec(with_last(r, k)) - mean.at_vec(r.to_vec());
            &d * &d
        },
        &format!("{name}.sq"),
    )?;
    let eps = Expr::float(DType::F32, eps as f64);
    let inv_std =
        compute_vec(rows, |r| ir::math::rsqrt(sq.at_vec(r.to_vec()) / &count + &eps), &format!("{name}.inv_std"))?;
    let output = compute_vec(
        full,
        |i| {
            let (r, last) = (&i[..i.len() - 1], &i[i.len() - 1]);
            let centered = x.at_vec(i.to_vec()) - mean.at_vec(r.to_vec());
            centered * inv_std.at_vec(r.to_vec()) * gamma.at([last]) + beta.at([last])
        },
        name,
    )?;
    Ok(LayerNorm { sum_lanes, sum: sum_t, mean, sq_lanes, sq, inv_std, output })
}

/// GELU of an f32 tensor of any shape, exact form (not the tanh approximation):
/// `y = (0.5 · x) · (1 + erf(x · (1/√2)))` in f32 in that order, with `ir::math::erf`. The
/// error is a few ulp of `max(|y|, 1)`, not of `y`: for `x ≪ 0` the sum `1 + erf` cancels (as
/// in every implementation of this formula).
pub fn gelu(x: &Tensor, name: &str) -> Result<Tensor, TeError> {
    if x.dtype() != DType::F32 {
        return Err(TeError::ShapeMismatch {
            op: format!("gelu {name}"),
            what: "the element type of x".to_string(),
            expected: "f32".to_string(),
            found: x.dtype().to_string(),
        });
    }
    let c = |v: f64| Expr::float(DType::F32, v);
    compute_vec(
        x.shape().to_vec(),
        |i| {
            let v = x.at_vec(i.to_vec());
            (&v * c(0.5)) * (c(1.0) + ir::math::erf(&v * c(std::f64::consts::FRAC_1_SQRT_2)))
        },
        name,
    )
}
