//! Element-wise stages as `Map` calls, one row at a time: a two-dimensional f32 stage whose
//! every read is an element `x[r, k]`, a column `x[k]` or a row `x[r]` of an f32 tensor is
//! tensorized per row with a `Map` declaration of its own body, which code generation compiles
//! to a zmm or ymm kernel (softmax's `exp(x - max)` and `e / sum` among them: the expansion
//! of `exp` has vector forms there, but only 128-bit vectors in the loop nest).
//!
//! Only bodies made of the nodes the kernels take are declared (f32 and i32 arithmetic,
//! comparisons and selects, conversions, `round`, `reinterpret`, i32 bitwise operations and
//! shifts by constants); a level without kernels runs the call's loop nest.

use rustc_hash::FxHashMap as HashMap;

use ir::expr::{BinOp, ExprKind};
use ir::intrin::{IntrinKind, TensorIntrin, decl_tensor_intrin};
use ir::mutator::{Mutator, walk_expr};
use ir::schedule::Schedule;
use ir::te::{IterVar, Tensor, compute_vec, placeholder_vec};
use ir::{DType, Expr, ScheduleError, Var};

/// How a stage reads a tensor.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Form {
    Element,
    Column,
    Row,
}

/// The Map declaration of one row of `t` (`<t>.row_1x{n}`), or `None` where `t` is not such a
/// stage: not two-dimensional, not f32, a read in another form, a tensor read in two forms, a
/// node without a kernel form, an axis used outside the reads, or fewer than `min_cols`
/// columns.
pub fn row_map(t: &Tensor, min_cols: i64) -> Option<TensorIntrin> {
    let body = t.body()?;
    let [r, k] = t.axes() else { return None };
    let n = k.extent();
    if t.dtype() != DType::F32 || !t.reduce_axes().is_empty() || n < min_cols {
        return None;
    }
    let (r, k) = (r.var().clone(), k.var().clone());
    let mut forms: Vec<(Tensor, Form)> = Vec::new();
    let mut fits = true;
    body.for_each(&mut |e| {
        if let ExprKind::TensorRead(x, idx) = e.kind() {
            let vars: Vec<Option<&Var>> = idx.iter().map(|i| i.as_var()).collect();
            let form = match vars.as_slice() {
                [Some(a), Some(b)] if **a == r && **b == k => Form::Element,
                [Some(b)] if **b == k => Form::Column,
                [Some(a)] if **a == r => Form::Row,
                _ => {
                    fits = false;
                    return;
                }
            };
            fits &= x.dtype() == DType::F32;
            match forms.iter().find(|(y, _)| y.id() == x.id()) {
                Some((_, f)) => fits &= *f == form,
                None => forms.push((x.clone(), form)),
            }
        }
    });
    if !fits || !fits_map_body(body) || uses_axes_outside_reads(body, &[&r, &k]) {
        return None;
    }
    let mut decl_inputs = Vec::with_capacity(forms.len());
    let mut tensors = HashMap::default();
    for (x, form) in &forms {
        let shape = match form {
            Form::Element => vec![1, n],
            Form::Column => vec![n],
            Form::Row => vec![1],
        };
        let d = placeholder_vec(shape, x.dtype(), x.name()).ok()?;
        tensors.insert(x.id(), d.clone());
        decl_inputs.push(d);
    }
    let out = compute_vec(
        vec![1, n],
        |pc| {
            let vars = HashMap::from_iter([(r.clone(), pc[0].clone()), (k.clone(), pc[1].clone())]);
            ir::mutator::rebind(body, vars, &tensors)
        },
        &format!("{}.row", t.name()),
    )
    .ok()?;
    let refs: Vec<&Tensor> = decl_inputs.iter().collect();
    decl_tensor_intrin(&format!("{}.row_1x{n}", t.name()), IntrinKind::Map { m: 1, n }, &out, &refs).ok()
}

/// Splits `t`'s row axis by 1 and tensorizes the inner loop with `decl` (`row_map`'s); returns
/// the row loop.
pub fn tensorize_rows(s: &mut Schedule, t: &Tensor, decl: &TensorIntrin) -> Result<Vec<IterVar>, ScheduleError> {
    let (outer, inner) = s.split(t, &t.axis(0), 1)?;
    s.tensorize(t, &inner, decl)?;
    Ok(vec![outer])
}

/// Whether every node of `body` has a kernel form (`kernels::map`): f32 and i32 arithmetic
/// without `%`, `min`, `max`, shifts by constants, comparisons and selects, conversions,
/// `round`, `reinterpret`, `fma`, reads, constants and variables.
pub(super) fn fits_map_body(body: &Expr) -> bool {
    let mut fits = true;
    body.for_each(&mut |e| match e.kind() {
        ExprKind::Binary(BinOp::Shl | BinOp::Shr, _, y) => fits &= matches!(y.kind(), ExprKind::Int(_)),
        ExprKind::Binary(op, ..) => fits &= !matches!(op, BinOp::Mod | BinOp::Min | BinOp::Max),
        ExprKind::Float(_)
        | ExprKind::Int(_)
        | ExprKind::Var(_)
        | ExprKind::TensorRead(..)
        | ExprKind::Cmp(..)
        | ExprKind::Select(..)
        | ExprKind::Cast(_)
        | ExprKind::Round(_)
        | ExprKind::Reinterpret(_)
        | ExprKind::Fma(..) => {}
        _ => fits = false,
    });
    fits
}

/// Whether `body` uses one of `axes` other than as a read's index (a kernel's row axis is not
/// the stage's row).
pub(super) fn uses_axes_outside_reads(body: &Expr, axes: &[&Var]) -> bool {
    let opaque = Opaque { done: HashMap::default() }.mutate_expr(body);
    let mut found = false;
    opaque.for_each(&mut |e| found |= e.as_var().is_some_and(|v| axes.contains(&v)));
    found
}

/// Replaces every read by a constant, each distinct node once.
struct Opaque {
    done: HashMap<usize, Expr>,
}

impl Mutator for Opaque {
    fn mutate_expr(&mut self, expr: &Expr) -> Expr {
        let key = std::ptr::from_ref(expr.kind()) as usize;
        if let Some(done) = self.done.get(&key) {
            return done.clone();
        }
        let result = match expr.kind() {
            ExprKind::TensorRead(..) => Expr::float(DType::F32, 0.0),
            _ => walk_expr(self, expr),
        };
        self.done.insert(key, result.clone());
        result
    }
}

#[cfg(test)]
mod tests {
    use ir::schedule::create_schedule;
    use ir::te::{compute, placeholder};

    use super::*;
    use crate::nn::softmax;

    #[test]
    fn softmax_stages_declare_row_maps_and_other_stages_do_not() {
        let x = placeholder([4, 32], DType::F32, "x").unwrap();
        let sm = softmax(&x, "sm").unwrap();
        // `exp(x - max)` and `e / sum`: an element and a per-row input each.
        for (stage, name) in [(&sm.exp, "sm.exp.row_1x32"), (&sm.output, "sm.row_1x32")] {
            let decl = row_map(stage, 8).unwrap();
            assert_eq!((decl.name.as_str(), decl.kind), (name, IntrinKind::Map { m: 1, n: 32 }));
            assert_eq!(decl.map_rows(), [false, true]);
        }
        // A reduction, a row shorter than the vector.
        assert!(row_map(&sm.max_lanes, 8).is_none() && row_map(&sm.exp, 64).is_none());
        // An axis used as a value, a read at other indices, an i32 stage.
        let by_index = compute([4, 32], |i| x.at([&i[0], &i[1]]) + i[1].cast(DType::F32), "ix").unwrap();
        let shifted = compute([4, 31], |i| x.at([&i[0], &(&i[1] + 1)]), "sh").unwrap();
        let ints = compute([4, 32], |i| x.at([&i[0], &i[1]]).cast(DType::I32), "int").unwrap();
        for stage in [&by_index, &shifted, &ints] {
            assert!(row_map(stage, 8).is_none(), "{}", stage.name());
        }
    }

    #[test]
    fn a_row_mapped_stage_lowers_to_one_call_per_row() {
        let x = placeholder([4, 32], DType::F32, "x").unwrap();
        let sm = softmax(&x, "sm").unwrap();
        let mut s = create_schedule(&[&sm.output]);
        let decl = row_map(&sm.exp, 8).unwrap();
        let rows = tensorize_rows(&mut s, &sm.exp, &decl).unwrap();
        assert_eq!(rows.len(), 1);
        let f = ir::lower::lower(&s, &[&x, &sm.output], "f").unwrap().to_string();
        assert!(f.contains("call sm.exp.row_1x32(x[i.outer*32] strides [32, 1], sm.max[i.outer] strides [1]"), "{f}");
    }
}
