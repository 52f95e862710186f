//! Lane-wise construction shared by the passes: scalars are broadcast next to vectors, and
//! integer `+ - *` on ramps and broadcasts stay ramps and broadcasts, so a contiguous access
//! remains recognisable as `ramp(base, 1, n)`.

use crate::expr::{BinOp, Expr, ExprKind};
use crate::interp::scalar::{self, Scalar};

/// Builds the scalar operation inside a ramp or broadcast; each pass decides how much it folds.
pub(crate) type ScalarOp<'a> = &'a mut dyn FnMut(BinOp, Expr, Expr) -> Expr;

/// `e` with `lanes` lanes: a scalar is broadcast, a vector is returned as is.
pub(crate) fn widen(e: &Expr, lanes: u16) -> Expr {
    if e.dtype().lanes == lanes || lanes == 1 { e.clone() } else { Expr::broadcast(e.clone(), lanes) }
}

/// The scalar every lane of `e` holds, if they all hold the same (`e` scalar or a broadcast).
fn uniform(e: &Expr) -> Option<&Expr> {
    match e.kind() {
        ExprKind::Broadcast(x) => Some(x),
        _ if e.dtype().is_scalar() => Some(e),
        _ => None,
    }
}

fn as_ramp(e: &Expr) -> Option<(&Expr, &Expr)> {
    match e.kind() {
        ExprKind::Ramp(b, s) => Some((b, s)),
        _ => None,
    }
}

/// `ramp(base, stride, lanes)`, or a broadcast when the stride is zero.
pub(crate) fn ramp(base: Expr, stride: Expr, lanes: u16) -> Expr {
    if stride.as_int() == Some(0) { Expr::broadcast(base, lanes) } else { Expr::ramp(base, stride, lanes) }
}

/// `a op b` as a ramp or broadcast when one of the exact lane-wise identities applies:
/// broadcast op broadcast (any type), and for integers `ramp ± ramp`, `ramp ± uniform`,
/// `uniform ± ramp`, `ramp * uniform`, `uniform * ramp` (ring identities, exact under wrapping).
/// `None` when the operands are scalars or no identity applies.
pub(crate) fn fold_vectors(op: BinOp, a: &Expr, b: &Expr, scalar: ScalarOp) -> Option<Expr> {
    let lanes = a.dtype().lanes.max(b.dtype().lanes);
    if lanes == 1 {
        return None;
    }
    if let (Some(x), Some(y)) = (uniform(a), uniform(b)) {
        return Some(Expr::broadcast(scalar(op, x.clone(), y.clone()), lanes));
    }
    if !a.dtype().is_int() {
        return None;
    }
    let zero = || Expr::zero(a.dtype().element());
    let result = match (op, as_ramp(a), as_ramp(b), uniform(a), uniform(b)) {
        (BinOp::Add | BinOp::Sub, Some((b1, s1)), Some((b2, s2)), ..) => {
            (scalar(op, b1.clone(), b2.clone()), scalar(op, s1.clone(), s2.clone()))
        }
        (BinOp::Add | BinOp::Sub, Some((base, s)), None, None, Some(x)) => {
            (scalar(op, base.clone(), x.clone()), s.clone())
        }
        (BinOp::Add, None, Some((base, s)), Some(x), None) => (scalar(op, x.clone(), base.clone()), s.clone()),
        (BinOp::Sub, None, Some((base, s)), Some(x), None) => {
            (scalar(op, x.clone(), base.clone()), scalar(BinOp::Sub, zero(), s.clone()))
        }
        (BinOp::Mul, Some((base, s)), None, None, Some(x)) => {
            (scalar(op, base.clone(), x.clone()), scalar(op, s.clone(), x.clone()))
        }
        (BinOp::Mul, None, Some((base, s)), Some(x), None) => {
            (scalar(op, x.clone(), base.clone()), scalar(op, x.clone(), s.clone()))
        }
        _ => return None,
    };
    Some(ramp(result.0, result.1, lanes))
}

/// `a op b` with lane counts matched: `fold_vectors` when it applies, else scalar operands are
/// broadcast to the vector's lanes. Scalar operands go to `scalar`.
pub(crate) fn binary(op: BinOp, a: &Expr, b: &Expr, scalar: ScalarOp) -> Expr {
    let lanes = a.dtype().lanes.max(b.dtype().lanes);
    if lanes == 1 {
        return scalar(op, a.clone(), b.clone());
    }
    fold_vectors(op, a, b, scalar).unwrap_or_else(|| Expr::binary(op, widen(a, lanes), widen(b, lanes)))
}

/// A scalar binary node with the folding every pass may do without a simplifier: constants are
/// computed with `interp::scalar`, and integer `x + 0`, `0 + x`, `x - 0`, `x * 1`, `1 * x` are `x`.
pub(crate) fn fold(op: BinOp, a: Expr, b: Expr) -> Expr {
    let ty = a.dtype().scalar;
    if let (ExprKind::Int(x), ExprKind::Int(y)) = (a.kind(), b.kind()) {
        let v = scalar::binary(op, ty, Scalar::Int(*x), Scalar::Int(*y)).as_int();
        return Expr::int(a.dtype(), v);
    }
    if ty.is_int() {
        match (op, a.as_int(), b.as_int()) {
            (BinOp::Add | BinOp::Sub, _, Some(0)) | (BinOp::Mul, _, Some(1)) => return a,
            (BinOp::Add, Some(0), _) | (BinOp::Mul, Some(1), _) => return b,
            _ => {}
        }
    }
    Expr::binary(op, a, b)
}
