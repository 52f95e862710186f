//! A lower bound of an f32 value that also proves it is a number (never NaN), read off the
//! clamps of a body: what lets a narrowing store leave out its own clamp from below.

use ir::DType;
use ir::expr::{CmpOp, Expr, ExprKind};

/// A bound `b` with `x ≥ b` and `x` never NaN, for every value of the body's inputs; `None`
/// where the shape of `x` proves none. Read from f32 constants (not NaN), `round` (monotone:
/// `round(x) ≥ floor(b)`) and selects, whose value is one of their two branches: the bound of
/// a branch is its own, or for `k < t ? t : …` (also `t > k`), `t > k` on that branch, a
/// number.
pub(super) fn at_least(x: &Expr) -> Option<f64> {
    if x.dtype() != DType::F32 {
        return None;
    }
    match x.kind() {
        ExprKind::Float(v) if !v.is_nan() => Some(f64::from(*v as f32)),
        ExprKind::Round(inner) => at_least(inner).map(f64::floor),
        ExprKind::Select(c, t, f) => {
            let on_true = above_constant(c, t).or_else(|| at_least(t))?;
            Some(on_true.min(at_least(f)?))
        }
        _ => None,
    }
}

/// `k` (the f32 constant's value) where the condition `c` holding means `t > k` (`k` not NaN):
/// `k < t` or `t > k` (ordered comparisons: true only between numbers).
fn above_constant(c: &Expr, t: &Expr) -> Option<f64> {
    let ExprKind::Cmp(op, x, y) = c.kind() else { return None };
    let (low, high) = match op {
        CmpOp::Lt => (x, y),
        CmpOp::Gt => (y, x),
        _ => return None,
    };
    match low.kind() {
        ExprKind::Float(k) if low.dtype() == DType::F32 && !k.is_nan() && high.structurally_eq(t) => {
            Some(f64::from(*k as f32))
        }
        _ => None,
    }
}
