//! The declaration of an intrinsic over fewer points of one data-parallel axis: what the last,
//! partial tile of a non-dividing split runs (`lower::build_loop_nests`), so that it is a kernel
//! call of its own height instead of the full call's fallback loops.

use rustc_hash::FxHashMap as HashMap;

use crate::error::TeError;
use crate::expr::{Expr, ExprKind, Var};
use crate::intrin::{IntrinKind, TensorIntrin, decl_tensor_intrin};
use crate::te::{Tensor, TensorId, compute_vec, placeholder_vec, placeholder_vec_in_range};

/// `intrin`'s declaration with its data-parallel axis `axis` (a position in the output's axes)
/// over `extent` points instead of its own: the same body, each input dimension indexed by that
/// axis alone `extent` long (same names, dtypes and value ranges), the kind's size along the
/// axis `extent` (`m` for axis 0, `n` for axis 1 of the GEMM and Map kinds), named
/// `<intrin>_<axis name><extent>`; `intrin` itself when `extent` is its own. The result computes,
/// at every point it has, what `intrin` computes there (its output and the inputs it reads are
/// the first `extent` rows of `intrin`'s along the axis).
///
/// Errors (`TeError::BadIntrinsic`) for an axis that is not one of the output's, an extent not
/// in `1..=` the axis's, a composite (`GemmMap`) or an input read along the axis at anything
/// other than the axis itself (`x[m + 1]` would need rows the smaller input does not have), and
/// as `decl_tensor_intrin` does.
pub fn shrink_axis(intrin: &TensorIntrin, axis: usize, extent: i64) -> Result<TensorIntrin, TeError> {
    let bad = |what: &str, expected: String, found: String| TeError::BadIntrinsic {
        intrin: intrin.name.clone(),
        what: what.to_string(),
        expected,
        found,
    };
    let output = &intrin.output;
    let Some(old) = output.axes().get(axis) else {
        return Err(bad("axis", format!("one of the output's {} axes", output.axes().len()), axis.to_string()));
    };
    if !(1..=old.extent()).contains(&extent) {
        return Err(bad(&format!("extent of {old}"), format!("1..={}", old.extent()), extent.to_string()));
    }
    if extent == old.extent() {
        return Ok(intrin.clone());
    }
    if intrin.parts.is_some() {
        return Err(bad("kind", "a declaration by a compute".into(), format!("{:?}", intrin.kind)));
    }
    let body = output.body().expect("a declaration is a compute");
    let var = old.var();
    // Per input, the dimensions indexed by the axis; any other use of it is refused.
    let mut along: HashMap<TensorId, Vec<bool>> =
        intrin.inputs.iter().map(|t| (t.id(), vec![false; t.shape().len()])).collect();
    let mut refused = None;
    body.for_each(&mut |e| {
        if let ExprKind::TensorRead(t, idx) = e.kind() {
            for (d, i) in idx.iter().enumerate() {
                if i.as_var() == Some(var) {
                    along.get_mut(&t.id()).expect("a declaration reads its inputs")[d] = true;
                } else if i.uses_var(var) {
                    refused.get_or_insert_with(|| format!("`{i}` in a read of {t}"));
                }
            }
        }
    });
    if let Some(found) = refused {
        return Err(bad(&format!("reads along {old}"), format!("indexed by {old} itself"), found));
    }
    let mut tensors = HashMap::default();
    let mut inputs = Vec::with_capacity(intrin.inputs.len());
    for input in &intrin.inputs {
        let dims = &along[&input.id()];
        let shape: Vec<i64> = input.shape().iter().zip(dims).map(|(&e, &a)| if a { extent } else { e }).collect();
        let resized = match input.value_range() {
            Some((lo, hi)) => placeholder_vec_in_range(shape, input.dtype(), lo..=hi, input.name())?,
            None => placeholder_vec(shape, input.dtype(), input.name())?,
        };
        tensors.insert(input.id(), resized.clone());
        inputs.push(resized);
    }
    let mut shape = output.shape().to_vec();
    shape[axis] = extent;
    let old_axes: Vec<Var> = output.axes().iter().map(|a| a.var().clone()).collect();
    let shrunk = compute_vec(
        shape,
        |axes| {
            let vars: HashMap<Var, Expr> = old_axes.iter().cloned().zip(axes.iter().cloned()).collect();
            crate::mutator::rebind(body, vars, &tensors)
        },
        output.name(),
    )?;
    let kind = match (intrin.kind, axis) {
        (IntrinKind::Int8Gemm { n, k, segments, saturating, .. }, 0) => {
            IntrinKind::Int8Gemm { m: extent, n, k, segments, saturating }
        }
        (IntrinKind::Int8Gemm { m, k, segments, saturating, .. }, _) => {
            IntrinKind::Int8Gemm { m, n: extent, k, segments, saturating }
        }
        (IntrinKind::Int16Gemm { n, k, segments, .. }, 0) => IntrinKind::Int16Gemm { m: extent, n, k, segments },
        (IntrinKind::Int16Gemm { m, k, segments, .. }, _) => IntrinKind::Int16Gemm { m, n: extent, k, segments },
        (IntrinKind::F32Gemm { n, k, .. }, 0) => IntrinKind::F32Gemm { m: extent, n, k },
        (IntrinKind::F32Gemm { m, k, .. }, _) => IntrinKind::F32Gemm { m, n: extent, k },
        (IntrinKind::Map { n, .. }, 0) => IntrinKind::Map { m: extent, n },
        (IntrinKind::Map { m, .. }, _) => IntrinKind::Map { m, n: extent },
        (IntrinKind::RowFold { n, lanes, .. }, 0) => IntrinKind::RowFold { m: extent, n, lanes },
        // Fewer lanes than declared: no kernel's layout, the loop nest only.
        (IntrinKind::RowFold { .. }, _) => IntrinKind::Generic,
        (kind @ (IntrinKind::GemmMap { .. } | IntrinKind::Generic), _) => kind,
    };
    let input_refs: Vec<&Tensor> = inputs.iter().collect();
    decl_tensor_intrin(&format!("{}_{}{extent}", intrin.name, old.name()), kind, &shrunk, &input_refs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtype::DType;
    use crate::interp::{Array, eval_te};
    use crate::intrin::{Int8GemmSize, int8_gemm_compute};
    use crate::te::placeholder;

    fn gemm(m: i64, n: i64, k: i64, segments: i64) -> TensorIntrin {
        let size = Int8GemmSize { m, n, k, segments };
        let a = placeholder_vec(size.a_shape(), DType::U8, "A").unwrap();
        let b = placeholder([segments * k / 4, n, 4], DType::I8, "B").unwrap();
        let c = int8_gemm_compute(&a, &b, size, false, "C").unwrap();
        let kind = IntrinKind::Int8Gemm { m, n, k, segments, saturating: false };
        decl_tensor_intrin(&format!("g_{m}x{n}"), kind, &c, &[&a, &b]).unwrap()
    }

    fn pattern(t: &Tensor, seed: i64) -> Array {
        let len: i64 = t.shape().iter().product();
        let values: Vec<i64> = (0..len).map(|i| (i * 37 + seed * 11) % 251 - 100).collect();
        let values: Vec<i64> = match t.dtype() {
            d if d == DType::U8 => values.iter().map(|&v| v.rem_euclid(256)).collect(),
            _ => values.iter().map(|&v| v.clamp(-128, 127)).collect(),
        };
        Array::from_i64(t.dtype(), t.shape(), &values)
    }

    /// The first `rows` rows (of `[R, ...]` values) of `a`.
    fn first_rows(a: &Array, rows: i64) -> Vec<i64> {
        let per_row = a.shape()[1..].iter().product::<i64>();
        a.to_i64_vec()[..(rows * per_row) as usize].to_vec()
    }

    #[test]
    fn a_gemm_over_fewer_rows_is_the_first_rows_of_the_full_one() {
        for segments in [1, 3] {
            let full = gemm(9, 16, 8, segments);
            let tail = shrink_axis(&full, 0, 5).unwrap();
            assert_eq!(tail.kind, IntrinKind::Int8Gemm { m: 5, n: 16, k: 8, segments, saturating: false });
            assert_eq!(tail.name, "g_9x16_i5");
            assert_eq!(tail.inputs[0].shape()[0], 5);
            assert_eq!(tail.inputs[1].shape(), full.inputs[1].shape());
            let (a, b) = (pattern(&full.inputs[0], 1), pattern(&full.inputs[1], 2));
            let want = eval_te(&[&full.output], &[(&full.inputs[0], &a), (&full.inputs[1], &b)]).unwrap().remove(0);
            let a_tail = Array::from_i64(DType::U8, tail.inputs[0].shape(), &first_rows(&a, 5));
            let got = eval_te(&[&tail.output], &[(&tail.inputs[0], &a_tail), (&tail.inputs[1], &b)]).unwrap().remove(0);
            assert_eq!(got.to_i64_vec(), first_rows(&want, 5));
        }
    }

    #[test]
    fn a_gemm_over_fewer_columns_keeps_its_rows_and_narrows_b() {
        let tail = shrink_axis(&gemm(4, 32, 8, 1), 1, 20).unwrap();
        assert_eq!(tail.kind, IntrinKind::Int8Gemm { m: 4, n: 20, k: 8, segments: 1, saturating: false });
        assert_eq!(tail.inputs[1].shape(), [2, 20, 4]);
        assert_eq!(tail.output.shape(), [4, 20]);
    }

    #[test]
    fn extents_outside_the_axis_and_composites_are_refused() {
        let g = gemm(4, 16, 8, 1);
        assert!(shrink_axis(&g, 2, 1).is_err());
        assert!(shrink_axis(&g, 0, 0).is_err());
        assert!(shrink_axis(&g, 0, 5).is_err());
        assert_eq!(shrink_axis(&g, 0, 4).unwrap(), g);
    }

    #[test]
    fn a_read_shifted_along_the_axis_is_refused() {
        let x = placeholder([9], DType::I32, "x").unwrap();
        let out = crate::te::compute([8], |i| x.at([&(&i[0] + 1)]), "out").unwrap();
        let intrin = decl_tensor_intrin("shift", IntrinKind::Generic, &out, &[&x]).unwrap();
        let err = shrink_axis(&intrin, 0, 3).unwrap_err();
        assert!(err.to_string().contains("indexed by"), "{err}");
    }
}
