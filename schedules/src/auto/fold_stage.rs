//! Row folds as `RowFold` calls: a two-dimensional f32 stage `out[r, l]` that is one `sum` or
//! `max` over an axis `c` of `f(…)`, whose every read is an element `x[r, c·L + l]` or a row
//! `x[r]` of an f32 tensor (`L` the stage's last extent: the lane stage of `nn`'s row folds,
//! softmax's max and sum, layernorm's sum and squared deviations), is tensorized a few rows at
//! a time with a `RowFold` declaration of its own body. Code generation compiles it to a ymm or
//! zmm kernel with one accumulator per vector of lanes and row (`kernels::map::fold`): the
//! rows of a call are independent chains, where a single row's lanes fill only one or two
//! registers whose additions wait on each other.
//!
//! The declaration's body is the stage's, so every partial folds its columns in the stage's
//! order: the interpreter's result. Only bodies made of the nodes `map_stage` accepts are
//! declared.

use rustc_hash::FxHashMap as HashMap;

use ir::analysis::linear::Linear;
use ir::expr::ExprKind;
use ir::intrin::{IntrinKind, TensorIntrin, decl_tensor_intrin};
use ir::schedule::Schedule;
use ir::te::{IterVar, Reducer, Tensor, compute_vec, placeholder_vec, reduce_axis};
use ir::{DType, Expr, ScheduleError, Var};

use super::map_stage::{fits_map_body, uses_axes_outside_reads};

/// The `RowFold` declaration of `rows` rows of `t` (`<t>.fold_{rows}x{n}`), or `None` where `t`
/// is not such a stage: not two-dimensional, not f32, not one `sum` or `max` over one axis, a
/// read in another form, a node without a kernel form, an axis used outside the reads, or
/// `rows` not dividing its rows.
pub fn row_fold(t: &Tensor, rows: i64) -> Option<TensorIntrin> {
    let body = t.body()?;
    let [r, l] = t.axes() else { return None };
    let ExprKind::Reduce(fold) = body.kind() else { return None };
    let [c] = fold.axes.as_slice() else { return None };
    let lanes = l.extent();
    if t.dtype() != DType::F32
        || !matches!(fold.reducer, Reducer::Sum | Reducer::Max)
        || rows < 1
        || r.extent() % rows != 0
    {
        return None;
    }
    let n = c.extent() * lanes;
    let (r, l, c) = (r.var().clone(), l.var().clone(), c.var().clone());
    let source = &fold.source;
    // Per tensor read: whether per row (`x[r]`), else an element (`x[r, c·L + l]`).
    let mut forms: Vec<(Tensor, bool)> = Vec::new();
    let mut fits = true;
    source.for_each(&mut |e| {
        if let ExprKind::TensorRead(x, idx) = e.kind() {
            let is = |index: &Expr, want: &[(&Var, i64)]| Linear::of(index).is_sum_of(want);
            let per_row = match idx.as_slice() {
                [a, b] if is(a, &[(&r, 1)]) && is(b, &[(&c, lanes), (&l, 1)]) => false,
                [a] if is(a, &[(&r, 1)]) => true,
                _ => {
                    fits = false;
                    return;
                }
            };
            fits &= x.dtype() == DType::F32 && (per_row || x.shape().last() == Some(&n));
            match forms.iter().find(|(y, _)| y.id() == x.id()) {
                Some((_, f)) => fits &= *f == per_row,
                None => forms.push((x.clone(), per_row)),
            }
        }
    });
    if !fits || !fits_map_body(source) || uses_axes_outside_reads(source, &[&r, &l, &c]) {
        return None;
    }
    let mut decl_inputs = Vec::with_capacity(forms.len());
    let mut tensors = HashMap::default();
    for (x, per_row) in &forms {
        let shape = if *per_row { vec![rows] } else { vec![rows, n] };
        let d = placeholder_vec(shape, x.dtype(), x.name()).ok()?;
        tensors.insert(x.id(), d.clone());
        decl_inputs.push(d);
    }
    let chunk = reduce_axis(n / lanes, "c").ok()?;
    let out = compute_vec(
        vec![rows, lanes],
        |pl| {
            let vars = HashMap::from_iter([
                (r.clone(), pl[0].clone()),
                (l.clone(), pl[1].clone()),
                (c.clone(), chunk.to_expr()),
            ]);
            fold.reducer.reduce(DType::F32, &[&chunk], ir::mutator::rebind(source, vars, &tensors))
        },
        &format!("{}.fold", t.name()),
    )
    .ok()?;
    let refs: Vec<&Tensor> = decl_inputs.iter().collect();
    let kind = IntrinKind::RowFold { m: rows, n, lanes };
    decl_tensor_intrin(&format!("{}.fold_{rows}x{n}", t.name()), kind, &out, &refs).ok()
}

/// The choices of rows per call for `t`: 1, 2 and 4 where they divide its rows.
pub fn rows_choices(t: &Tensor) -> Vec<i64> {
    let rows = t.shape().first().copied().unwrap_or(1);
    [1, 2, 4].into_iter().filter(|k| rows % k == 0).collect()
}

/// Splits `t`'s row axis by `decl`'s rows and tensorizes the inner loop with `decl`
/// (`row_fold`'s); returns the row loop.
pub fn tensorize_fold_rows(s: &mut Schedule, t: &Tensor, decl: &TensorIntrin) -> Result<Vec<IterVar>, ScheduleError> {
    // Another kind's declaration fails `tensorize`'s proof.
    let rows = if let IntrinKind::RowFold { m, .. } = decl.kind { m } else { 1 };
    let (outer, inner) = s.split(t, &t.axis(0), rows)?;
    s.tensorize(t, &inner, decl)?;
    Ok(vec![outer])
}

#[cfg(test)]
mod tests {
    use ir::schedule::create_schedule;
    use ir::te::{compute, placeholder};

    use super::*;
    use crate::nn::{layernorm, softmax};

    #[test]
    fn lane_stages_of_row_folds_declare_row_folds_and_other_stages_do_not() {
        let x = placeholder([4, 64], DType::F32, "x").unwrap();
        let sm = softmax(&x, "sm").unwrap();
        for (stage, name) in [(&sm.max_lanes, "sm.max_lanes.fold_2x64"), (&sm.sum_lanes, "sm.sum_lanes.fold_2x64")] {
            let decl = row_fold(stage, 2).unwrap();
            assert_eq!((decl.name.as_str(), decl.kind), (name, IntrinKind::RowFold { m: 2, n: 64, lanes: 16 }));
        }
        let g = placeholder([64], DType::F32, "g").unwrap();
        let ln = layernorm(&x, &g, &g, 1e-5, "ln").unwrap();
        // The squared deviations read the row's mean: a per-row input.
        let decl = row_fold(&ln.sq_lanes, 4).unwrap();
        assert_eq!(decl.map_rows(), [false, true]);
        // Rows not divided, the second-level folds, element-wise stages.
        assert!(row_fold(&sm.max_lanes, 3).is_none());
        for stage in [&sm.max, &sm.sum, &sm.exp, &sm.output, &ln.mean] {
            assert!(row_fold(stage, 1).is_none(), "{}", stage.name());
        }
        // A row whose length is no multiple of the lanes guards its last chunk (a select on
        // the column): no kernel form.
        let short = placeholder([4, 60], DType::F32, "s").unwrap();
        assert!(row_fold(&softmax(&short, "s").unwrap().max_lanes, 1).is_none());
        // A min, a read at other indices.
        let m = reduce_axis(4, "m").unwrap();
        let min =
            compute([4, 16], |i| ir::te::min(DType::F32, &[&m], x.at([&i[0], &(m.to_expr() * 16 + &i[1])])), "min")
                .unwrap();
        let m2 = reduce_axis(3, "m").unwrap();
        let shifted = compute(
            [4, 16],
            |i| ir::te::sum(DType::F32, &[&m2], x.at([&i[0], &(m2.to_expr() * 16 + &i[1] + 1)])),
            "sh",
        )
        .unwrap();
        assert!(row_fold(&min, 1).is_none() && row_fold(&shifted, 1).is_none());
    }

    #[test]
    fn a_row_folded_stage_lowers_to_one_resetting_call_per_block_of_rows() {
        let x = placeholder([4, 32], DType::F32, "x").unwrap();
        let sm = softmax(&x, "sm").unwrap();
        let mut s = create_schedule(&[&sm.output]);
        let decl = row_fold(&sm.max_lanes, 2).unwrap();
        tensorize_fold_rows(&mut s, &sm.max_lanes, &decl).unwrap();
        let f = ir::lower::lower(&s, &[&x, &sm.output], "f").unwrap().to_string();
        assert!(f.contains("call reset sm.max_lanes.fold_2x32(x["), "{f}");
    }
}
