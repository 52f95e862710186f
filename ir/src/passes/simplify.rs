//! Simplification: constant folding, exact identities, linear index normalization, and removal of
//! control flow that interval analysis decides.

use crate::passes::facts::{FactMutator, mutate_for_with_facts, mutate_if_with_facts};
use rustc_hash::FxHashMap as HashMap;

use rustc_hash::FxHashMap;

use crate::analysis::interval::{Interval, Scope, bounds_of, negate, prove};
use crate::analysis::linear::Linear;
use crate::dtype::DType;
use crate::expr::{BinOp, CmpOp, Expr, ExprKind, Var};
use crate::interp::scalar::{self, Scalar, int_value};
use crate::mutator::{Mutator, rebuild_expr, substitute_map, walk_expr, walk_stmt};
use crate::passes::lanewise;
use crate::stmt::{Func, Stmt, StmtKind};

/// Simplifies every expression and statement of `func`, preserving its results bit for bit.
///
/// Does:
/// * constant folding of every operator on every dtype with `interp::scalar` (broadcasts of
///   constants included);
/// * integer identities that are exact under wrapping (`x + 0`, `x * 1`, `x * 0`, `x - x`,
///   `x / 1`, `x % 1`, `x / 0 == x % 0 == 0`, `!!x`, double int casts through a wider type),
///   bool `&`/`|` with a constant, `min`/`max`/comparisons decided by interval analysis,
///   `select` with a decided condition or equal arms, and integer ramp/broadcast algebra;
/// * linear normalization of scalar `i64` arithmetic (like terms and constants collected, terms
///   in order of first appearance, positive terms first): `(a*4 + b)*8 + c - a*32` is `b*8 + c`;
/// * `(a / c)*c + a % c` is `a` (any common factor of both terms, `c > 0` constant);
/// * floor division and modulo of `i64` by a positive constant split off the multiples of the
///   divisor and use intervals for the rest: `(x*8 + y)/8` is `x` and `(x*8 + y)%8` is `y` when
///   `y` is in `[0, 8)`; nested `(a/c1)/c2` is `a/(c1*c2)`, and `(a%c1)%c2` is `a%c2` if `c2 | c1`;
/// * `If` with a decided condition is replaced by the chosen branch (or a no-op), and the
///   condition refines variable ranges inside the branches; `For` of extent 0 is a no-op and of
///   extent 1 is its body with the variable replaced by 0; `Let` of a constant or a variable is
///   substituted into its body.
///
/// Linear normalization is exact under wrapping; the division and modulo rules rely on the IR's
/// rule that `i64` index arithmetic never wraps, which is why both are limited to `i64`.
///
/// Does not: apply float identities (`x + 0.0` is not `x` for `-0.0`), reassociate other types,
/// relate variables through their lets beyond one rule (`let i = ...` stays opaque beyond its
/// interval, except that `i / d` and `i % d` expand an `i64` let value when that puts the
/// remainder within one period: `let i = x*8 + y` with `y` in `[0, 8)` makes `i/8` `x`), remove
/// statements that became no-ops (`remove_no_ops` does), or move code between loops. A tree it
/// cannot simplify is returned as the identical `Rc`.
pub fn simplify(func: &Func) -> Func {
    let mut s = Simplifier { scope: Scope::new(), subst: FxHashMap::default(), lets: HashMap::default() };
    let body = s.mutate_stmt(&func.body);
    Func { name: func.name.clone(), params: func.params.clone(), body }
}

/// `expr` simplified as `simplify` would inside loops binding each variable of `ranges` to
/// `0..extent`: `RangedSimplifier` of one expression (its twin in the tests).
#[cfg(test)]
pub(crate) fn simplify_expr(expr: &Expr, ranges: &[(Var, i64)]) -> Expr {
    RangedSimplifier::new(ranges).simplify(expr)
}

/// Expressions simplified as `simplify` would inside loops binding each variable of `ranges`
/// to `0..extent` (used to normalize tensor-expression indices, e.g. by `Schedule::tensorize`),
/// many over the same ranges: their scope made once (each expression leaves it as it was).
pub(crate) struct RangedSimplifier(Simplifier);

impl RangedSimplifier {
    pub(crate) fn new(ranges: &[(Var, i64)]) -> RangedSimplifier {
        let mut s = Simplifier { scope: Scope::new(), subst: FxHashMap::default(), lets: HashMap::default() };
        for (var, extent) in ranges {
            s.scope.push(var, Interval::of_extent(*extent));
        }
        RangedSimplifier(s)
    }

    /// `expr` simplified within the ranges.
    pub(crate) fn simplify(&mut self, expr: &Expr) -> Expr {
        self.0.mutate_expr(expr)
    }
}

struct Simplifier {
    scope: Scope,
    /// Let-bound variables replaced by their constant or variable value.
    subst: FxHashMap<Var, Expr>,
    /// The values of the enclosing `i64` lets that stay (for the division rule).
    lets: HashMap<Var, Expr>,
}

/// `a - b` normalized, for scalar `i64` operands.
fn difference(a: &Expr, b: &Expr) -> Expr {
    let mut lin = Linear::of(a);
    lin.add(b, -1);
    lin.to_expr()
}

fn is_linear_node(e: &Expr) -> bool {
    e.dtype() == DType::INDEX && matches!(e.kind(), ExprKind::Binary(BinOp::Add | BinOp::Sub | BinOp::Mul, ..))
}

/// The value of a scalar constant.
fn constant_of(e: &Expr) -> Option<Scalar> {
    match e.kind() {
        ExprKind::Int(v) => Some(Scalar::Int(*v)),
        ExprKind::Float(f) => Some(Scalar::Float(*f)),
        _ => None,
    }
}

/// The integer every lane of `e` holds, if `e` is a constant or a broadcast of one.
fn int_lanes(e: &Expr) -> Option<i64> {
    match e.kind() {
        ExprKind::Broadcast(x) => x.as_int(),
        _ => e.as_int(),
    }
}

/// A constant of `dtype` (broadcast if `dtype` is a vector).
fn constant(dtype: DType, value: Scalar) -> Expr {
    let c = match value {
        Scalar::Int(v) => Expr::int(dtype.element(), v),
        Scalar::Float(f) => Expr::float(dtype.element(), f),
    };
    lanewise::widen(&c, dtype.lanes)
}

fn int_constant(dtype: DType, value: i128) -> Expr {
    constant(dtype, Scalar::Int(crate::expr::wrap_int(dtype.scalar, value)))
}

fn floor_div(a: i64, b: i64) -> i64 {
    scalar::binary(BinOp::Div, DType::INDEX.scalar, Scalar::Int(a), Scalar::Int(b)).as_int()
}

impl FactMutator for Simplifier {
    fn scope(&mut self) -> &mut Scope {
        &mut self.scope
    }
}

impl Mutator for Simplifier {
    fn mutate_expr(&mut self, expr: &Expr) -> Expr {
        if let ExprKind::Var(v) = expr.kind() {
            return self.subst.get(v).cloned().unwrap_or_else(|| expr.clone());
        }
        if is_linear_node(expr) {
            return self.normalize(expr, true);
        }
        let walked = walk_expr(self, expr);
        self.node(walked)
    }

    fn mutate_stmt(&mut self, stmt: &Stmt) -> Stmt {
        match stmt.kind() {
            StmtKind::For { var, extent, body, .. } => {
                if *extent <= 0 {
                    return Stmt::no_op();
                }
                if *extent == 1 {
                    return self.with_subst(var, Expr::index(0), body);
                }
                mutate_for_with_facts(self, stmt)
            }
            StmtKind::Let { var, value, body } => {
                let new_value = self.mutate_expr(value);
                if new_value.is_const() || new_value.as_var().is_some() {
                    return self.with_subst(var, new_value, body);
                }
                let interval = bounds_of(&new_value, &self.scope);
                self.scope.push(var, interval);
                let index = new_value.dtype() == DType::INDEX;
                let shadowed = index.then(|| self.lets.insert(var.clone(), new_value.clone())).flatten();
                let new_body = self.mutate_stmt(body);
                match shadowed {
                    Some(old) => self.lets.insert(var.clone(), old),
                    None => self.lets.remove(var),
                };
                self.scope.pop(var);
                if new_value.same_node(value) && new_body.same_node(body) {
                    return stmt.clone();
                }
                Stmt::let_stmt(var.clone(), new_value, new_body)
            }
            StmtKind::If { cond, then_case, else_case } => {
                let new_cond = self.mutate_expr(cond);
                match prove(&new_cond, &self.scope) {
                    Some(true) => return self.mutate_stmt(then_case),
                    Some(false) => return else_case.as_ref().map_or_else(Stmt::no_op, |e| self.mutate_stmt(e)),
                    None => {}
                }
                mutate_if_with_facts(self, stmt, new_cond)
            }
            StmtKind::Store { .. }
            | StmtKind::Seq(_)
            | StmtKind::Allocate { .. }
            | StmtKind::Call { .. }
            | StmtKind::BoundsCheck { .. } => walk_stmt(self, stmt),
        }
    }
}

impl Simplifier {
    /// `body` simplified with `var` replaced by `value`.
    fn with_subst(&mut self, var: &Var, value: Expr, body: &Stmt) -> Stmt {
        let shadowed = self.subst.insert(var.clone(), value);
        let new_body = self.mutate_stmt(body);
        match shadowed {
            Some(old) => self.subst.insert(var.clone(), old),
            None => self.subst.remove(var),
        };
        new_body
    }

    /// Simplifies a node whose children are already simplified.
    fn node(&mut self, e: Expr) -> Expr {
        if is_linear_node(&e) {
            return self.normalize(&e, false);
        }
        match self.rewrite(&e) {
            Some(r) => r,
            None => e,
        }
    }

    fn scalar_op(&mut self) -> impl FnMut(BinOp, Expr, Expr) -> Expr + '_ {
        |op, a, b| self.node(Expr::binary(op, a, b))
    }

    /// The linear normal form of an `i64` `+ - *` tree; `expr` itself if already normal.
    fn normalize(&mut self, expr: &Expr, simplify_leaves: bool) -> Expr {
        let mut lin = if simplify_leaves {
            let mut lin = Linear::default();
            self.collect(expr, 1, &mut lin);
            lin
        } else {
            Linear::of(expr)
        };
        lin.recombine_div_mod();
        let built = lin.to_expr();
        if built.structurally_eq(expr) { expr.clone() } else { built }
    }

    /// Adds `scale * e` to `lin`, simplifying each non-linear subterm exactly once.
    fn collect(&mut self, e: &Expr, scale: i64, lin: &mut Linear) {
        match e.kind() {
            ExprKind::Binary(BinOp::Add, a, b) => {
                self.collect(a, scale, lin);
                self.collect(b, scale, lin);
            }
            ExprKind::Binary(BinOp::Sub, a, b) => {
                self.collect(a, scale, lin);
                self.collect(b, scale.wrapping_neg(), lin);
            }
            ExprKind::Binary(BinOp::Mul, a, b) => {
                if let Some(c) = b.as_int() {
                    return self.collect(a, scale.wrapping_mul(c), lin);
                }
                if let Some(c) = a.as_int() {
                    return self.collect(b, scale.wrapping_mul(c), lin);
                }
                let (na, nb) = (self.mutate_expr(a), self.mutate_expr(b));
                if let Some(c) = nb.as_int() {
                    return lin.add(&na, scale.wrapping_mul(c));
                }
                if let Some(c) = na.as_int() {
                    return lin.add(&nb, scale.wrapping_mul(c));
                }
                let term = if na.same_node(a) && nb.same_node(b) { e.clone() } else { rebuild_expr(e, vec![na, nb]) };
                lin.add_term(term, scale);
            }
            _ => {
                let s = self.mutate_expr(e);
                lin.add(&s, scale);
            }
        }
    }

    /// True if `a <= b` in every lane, for simplified integer operands.
    fn prove_le(&mut self, a: &Expr, b: &Expr) -> bool {
        if a.dtype() == DType::INDEX {
            let d = difference(a, b);
            return prove(&d.le(Expr::index(0)), &self.scope) == Some(true);
        }
        prove(&Expr::cmp(CmpOp::Le, a.clone(), b.clone()), &self.scope) == Some(true)
    }

    /// One rewrite at the root of `e` (children already simplified), or `None`.
    fn rewrite(&mut self, e: &Expr) -> Option<Expr> {
        let dtype = e.dtype();
        match e.kind() {
            ExprKind::Binary(op, a, b) => self.rewrite_binary(*op, a, b, dtype),
            ExprKind::Cmp(op, a, b) => {
                if let (Some(x), Some(y)) = (constant_of(a), constant_of(b)) {
                    return Some(Expr::bool(scalar::compare(*op, a.dtype().scalar, x, y)));
                }
                if let (ExprKind::Broadcast(x), ExprKind::Broadcast(y)) = (a.kind(), b.kind()) {
                    let inner = self.node(Expr::cmp(*op, x.clone(), y.clone()));
                    return Some(Expr::broadcast(inner, dtype.lanes));
                }
                if !a.dtype().is_int() {
                    return None;
                }
                let decided = prove(e, &self.scope).or_else(|| {
                    if a.dtype() == DType::INDEX {
                        let d = difference(a, b);
                        prove(&Expr::cmp(*op, d, Expr::index(0)), &self.scope)
                    } else if a.structurally_eq(b) {
                        Some(matches!(op, CmpOp::Eq | CmpOp::Le | CmpOp::Ge))
                    } else {
                        None
                    }
                });
                decided.map(|v| constant(dtype, Scalar::Int(v as i64)))
            }
            ExprKind::Not(a) => match a.kind() {
                ExprKind::Int(v) => Some(constant(dtype, scalar::not(dtype.scalar, Scalar::Int(*v)))),
                ExprKind::Not(x) => Some(x.clone()),
                ExprKind::Cmp(op, x, y) if x.dtype().is_int() => {
                    Some(self.node(Expr::cmp(negate(*op), x.clone(), y.clone())))
                }
                ExprKind::Broadcast(x) => {
                    let inner = self.node(!x.clone());
                    Some(Expr::broadcast(inner, dtype.lanes))
                }
                _ => None,
            },
            ExprKind::Cast(a) | ExprKind::SaturatingCast(a) => {
                let saturating = matches!(e.kind(), ExprKind::SaturatingCast(_));
                let from = a.dtype();
                if let Some(v) = constant_of(a) {
                    return Some(constant(dtype, scalar::cast(from.scalar, dtype.scalar, v, saturating)));
                }
                match a.kind() {
                    ExprKind::Broadcast(x) => {
                        let c = if saturating { x.saturating_cast(dtype.element()) } else { x.cast(dtype.element()) };
                        let inner = self.node(c);
                        Some(Expr::broadcast(inner, dtype.lanes))
                    }
                    // Wrapping to a type at least as wide and back is the identity.
                    ExprKind::Cast(x)
                        if !saturating
                            && x.dtype() == dtype
                            && dtype.is_int()
                            && from.is_int()
                            && from.bits() >= dtype.bits() =>
                    {
                        Some(x.clone())
                    }
                    _ => None,
                }
            }
            ExprKind::Round(a) => match a.kind() {
                ExprKind::Float(f) => Some(constant(dtype, scalar::round(dtype.scalar, Scalar::Float(*f)))),
                ExprKind::Broadcast(x) => {
                    let inner = self.node(x.round());
                    Some(Expr::broadcast(inner, dtype.lanes))
                }
                _ => None,
            },
            ExprKind::Select(c, t, f) => {
                let chosen = match prove(c, &self.scope) {
                    Some(true) => t,
                    Some(false) => f,
                    None if t.structurally_eq(f) => t,
                    None => return None,
                };
                Some(lanewise::widen(chosen, dtype.lanes))
            }
            ExprKind::Ramp(base, stride) if stride.as_int() == Some(0) => {
                Some(Expr::broadcast(base.clone(), dtype.lanes))
            }
            ExprKind::VectorReduce(op, v) => match v.kind() {
                _ if v.dtype().lanes == dtype.lanes => Some(v.clone()),
                ExprKind::Broadcast(x) if *op != crate::expr::VectorReduceOp::Add => {
                    Some(lanewise::widen(x, dtype.lanes))
                }
                _ => None,
            },
            _ => None,
        }
    }

    fn rewrite_binary(&mut self, op: BinOp, a: &Expr, b: &Expr, dtype: DType) -> Option<Expr> {
        if let (Some(x), Some(y)) = (constant_of(a), constant_of(b)) {
            return Some(constant(dtype, scalar::binary(op, dtype.scalar, x, y)));
        }
        if let Some(r) = lanewise::fold_vectors(op, a, b, &mut self.scalar_op()) {
            return Some(r);
        }
        if matches!(op, BinOp::Min | BinOp::Max) && a.structurally_eq(b) {
            return Some(a.clone());
        }
        if dtype.is_bool() {
            return match (op, a.as_int(), b.as_int()) {
                (BinOp::And, Some(0), _) | (BinOp::Or, Some(1), _) => Some(a.clone()),
                (BinOp::And, _, Some(0)) | (BinOp::Or, _, Some(1)) => Some(b.clone()),
                (BinOp::And, Some(1), _) | (BinOp::Or, Some(0), _) => Some(b.clone()),
                (BinOp::And, _, Some(1)) | (BinOp::Or, _, Some(0)) => Some(a.clone()),
                (BinOp::And | BinOp::Or, ..) if a.structurally_eq(b) => Some(a.clone()),
                _ => None,
            };
        }
        if !dtype.is_int() {
            return None;
        }
        let zero = || int_constant(dtype, 0);
        let (ca, cb) = (int_lanes(a), int_lanes(b));
        match op {
            BinOp::Add if ca == Some(0) => Some(b.clone()),
            BinOp::Add | BinOp::Sub if cb == Some(0) => Some(a.clone()),
            BinOp::Sub if a.structurally_eq(b) => Some(zero()),
            BinOp::Mul if ca == Some(0) || cb == Some(0) => Some(zero()),
            BinOp::Mul if ca == Some(1) => Some(b.clone()),
            BinOp::Mul if cb == Some(1) => Some(a.clone()),
            BinOp::Div if cb == Some(1) => Some(a.clone()),
            BinOp::Div | BinOp::Mod if cb == Some(0) => Some(zero()),
            BinOp::Mod if cb == Some(1) => Some(zero()),
            BinOp::Div | BinOp::Mod => self.rewrite_div_mod(op, a, int_value(dtype.scalar, cb?), dtype),
            BinOp::Min | BinOp::Max => {
                let (lo, hi) = if self.prove_le(a, b) {
                    (a, b)
                } else if self.prove_le(b, a) {
                    (b, a)
                } else {
                    return None;
                };
                Some(if op == BinOp::Min { lo.clone() } else { hi.clone() })
            }
            BinOp::And | BinOp::Or if a.structurally_eq(b) => Some(a.clone()),
            _ => None,
        }
    }

    /// `a / d` or `a % d` for a constant `d` (its mathematical value) other than 0 and 1.
    fn rewrite_div_mod(&mut self, op: BinOp, a: &Expr, d: i128, dtype: DType) -> Option<Expr> {
        if d > 0 && dtype == DType::INDEX {
            return self.index_div_mod(op, a, d as i64);
        }
        // Otherwise only what intervals decide: `a` within one period `[m*d, (m+1)*d)`.
        let ia = bounds_of(a, &self.scope);
        let (lo, hi) = (ia.min?, ia.max?);
        let m = lo.div_euclid(d) - if d < 0 && lo.rem_euclid(d) != 0 { 1 } else { 0 };
        let (first, last) = if d > 0 { (m * d, m * d + d - 1) } else { (m * d + d + 1, m * d) };
        if lo < first || hi > last {
            return None;
        }
        match op {
            BinOp::Div => Some(int_constant(dtype, m)),
            _ if m == 0 => Some(a.clone()),
            _ => None,
        }
    }

    /// Floor `a / d` and `a % d` on `i64` for `d > 0`: `a = q*d + r` with the multiples of `d`
    /// split off, so `a / d = q + r / d` and `a % d = r % d`, and `r / d` is a constant when the
    /// interval of `r` lies within one period.
    fn index_div_mod(&mut self, op: BinOp, a: &Expr, d: i64) -> Option<Expr> {
        match (op, a.kind()) {
            (BinOp::Div, ExprKind::Binary(BinOp::Div, x, c1)) => {
                if let Some(prod) = c1.as_int().filter(|c| *c > 0).and_then(|c| c.checked_mul(d)) {
                    return Some(self.node(x.clone() / Expr::index(prod)));
                }
            }
            (BinOp::Mod, ExprKind::Binary(BinOp::Mod, x, c1)) if c1.as_int().is_some_and(|c| c > 0 && c % d == 0) => {
                return Some(self.node(x.clone() % Expr::index(d)));
            }
            _ => {}
        }
        if let Some(expanded) = self.expand_lets(a, d)
            && let Some(result) = self.index_div_mod_linear(op, &expanded, d, a)
        {
            return Some(result);
        }
        self.index_div_mod_linear(op, a, d, a)
    }

    /// `a` with the let-bound variables of its linear form replaced by their values, when that
    /// leaves a remainder modulo `d` within one period (else `None`: the lets stay opaque).
    fn expand_lets(&self, a: &Expr, d: i64) -> Option<Expr> {
        let lin = Linear::of(a);
        if !lin.terms.iter().any(|(t, _)| t.as_var().is_some_and(|v| self.lets.contains_key(v))) {
            return None;
        }
        let expanded = Linear::of(&substitute_map(a, &self.lets)).to_expr();
        let mut rest = Linear::of(&expanded);
        rest.terms.retain(|(_, c)| c % d != 0);
        rest.constant = rest.constant.rem_euclid(d);
        let ir = bounds_of(&rest.to_expr(), &self.scope);
        match (ir.min, ir.max) {
            (Some(lo), Some(hi)) if lo.div_euclid(d as i128) == hi.div_euclid(d as i128) => Some(expanded),
            _ => None,
        }
    }

    /// `index_div_mod` on the linear form of `a` (`original` is the node being rewritten).
    fn index_div_mod_linear(&mut self, op: BinOp, a: &Expr, d: i64, original: &Expr) -> Option<Expr> {
        let lin = Linear::of(a);
        let mut quotient = Linear::default();
        let mut rest = Linear::default();
        for (t, c) in lin.terms {
            if c % d == 0 {
                quotient.add_term(t, c / d);
            } else {
                rest.add_term(t, c);
            }
        }
        quotient.constant = floor_div(lin.constant, d);
        rest.constant = lin.constant - quotient.constant * d;
        let r = rest.to_expr();
        let ir = bounds_of(&r, &self.scope);
        let period = match (ir.min, ir.max) {
            (Some(lo), Some(hi)) if lo.div_euclid(d as i128) == hi.div_euclid(d as i128) => {
                Some(lo.div_euclid(d as i128) as i64)
            }
            _ => None,
        };
        // Nothing split off and no period: `a` is already as simple as this rule makes it.
        if period.is_none() && quotient.terms.is_empty() && quotient.constant == 0 && r.structurally_eq(original) {
            return None;
        }
        let result = match (op, period) {
            (BinOp::Div, Some(m)) => {
                quotient.constant = quotient.constant.wrapping_add(m);
                quotient.to_expr()
            }
            (BinOp::Div, None) => {
                let term = self.node(r / Expr::index(d));
                quotient.add_term(term, 1);
                quotient.to_expr()
            }
            (_, Some(m)) => {
                rest.constant = rest.constant.wrapping_sub(m.wrapping_mul(d));
                rest.to_expr()
            }
            (_, None) => self.node(r % Expr::index(d)),
        };
        Some(result)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::expr::{max, min, select};
    use crate::passes::testing::assert_same_results;
    use crate::stmt::{Buffer, ForKind};

    fn idx(v: i64) -> Expr {
        Expr::index(v)
    }

    /// `func f(A: i64[64], B: i64[64]) { body }` with `body` built from A and B.
    fn func(body: impl FnOnce(&Buffer, &Buffer) -> Stmt) -> Func {
        let a = Buffer::new("A", DType::I64, vec![64]);
        let b = Buffer::new("B", DType::I64, vec![64]);
        let body = body(&a, &b);
        Func { name: "f".into(), params: vec![a, b], body }
    }

    fn simplified(f: &Func) -> String {
        format!("{}", simplify(f))
    }

    /// The simplified function, printed, after checking it computes what `f` does.
    fn checked(f: &Func) -> String {
        let s = simplify(f);
        assert_same_results(f, &s);
        format!("{s}")
    }

    fn store_expr(e: Expr) -> Func {
        func(|_, b| Stmt::store(b, vec![idx(0)], e))
    }

    /// One simplifier over fixed ranges, reused, gives what a fresh one gives each expression:
    /// divisions and remainders the ranges decide, conditions that assume facts in their
    /// branches, and min/max the ranges bound, in turn and repeated.
    #[test]
    fn a_reused_ranged_simplifier_is_a_fresh_one() {
        let (x, y, z) = (Var::index("x"), Var::index("y"), Var::index("z"));
        let ranges = [(x.clone(), 8), (y.clone(), 3), (z.clone(), 16)];
        let (xe, ye, ze) = (x.to_expr(), y.to_expr(), z.to_expr());
        let exprs = [
            (xe.clone() * 3 + ye.clone()) / 3,
            (xe.clone() * 3 + ye.clone()) % 3,
            select(xe.lt(4), (xe.clone() + 4) / 8, idx(1)),
            select((ze.clone() - 2).ge(0), ze.clone() - 2, idx(0)),
            min(xe.clone() + ye.clone(), idx(12)),
            max(ze.clone() - 16, idx(-1)) + xe.clone() * idx(0),
            ((ze.clone() * 4 + 1) / 4 + ye.clone() - ye.clone()) * 2,
        ];
        let mut reused = RangedSimplifier::new(&ranges);
        for round in 0..2 {
            for e in &exprs {
                let fresh = simplify_expr(e, &ranges);
                assert_eq!(reused.simplify(e).to_string(), fresh.to_string(), "round {round}: {e}");
            }
        }
        assert_eq!(simplify_expr(&exprs[0], &ranges).to_string(), "x");
        assert_eq!(simplify_expr(&exprs[1], &ranges).to_string(), "y");
    }

    #[test]
    fn linear_normalization_collects_like_terms() {
        let (a, b, c) = (Var::index("a"), Var::index("b"), Var::index("c"));
        let e = (a.to_expr() * 4 + b.to_expr()) * 8 + c.to_expr() - a.to_expr() * 32;
        let f = func(|_, out| Stmt::store(out, vec![idx(0)], e));
        assert_eq!(simplified(&f), "func f(A: i64[64], B: i64[64]) {\n  B[0] = b*8 + c\n}\n");
        let e = idx(3) - a.to_expr() + (a.to_expr() + 2) * 2 - 5;
        assert_eq!(simplified(&store_expr(e)), "func f(A: i64[64], B: i64[64]) {\n  B[0] = a + 2\n}\n");
        let e = idx(1) - a.to_expr() * 3 - b.to_expr();
        assert_eq!(simplified(&store_expr(e)), "func f(A: i64[64], B: i64[64]) {\n  B[0] = 1 - a*3 - b\n}\n");
        let e = b.to_expr() - a.to_expr() + 7 - 7;
        assert_eq!(simplified(&store_expr(e)), "func f(A: i64[64], B: i64[64]) {\n  B[0] = b - a\n}\n");
    }

    #[test]
    fn constants_fold_on_every_dtype() {
        let cases = [
            (Expr::int(DType::U8, 250) + Expr::int(DType::U8, 10), "4u8"),
            (Expr::int(DType::I32, -7) / Expr::int(DType::I32, 2), "-4i32"),
            (Expr::float(DType::F32, 1.5) * Expr::float(DType::F32, 2.0), "3.0f32"),
            (Expr::int(DType::I32, 300).cast(DType::U8), "44u8"),
            (Expr::float(DType::F32, 300.7).saturating_cast(DType::U8), "255u8"),
            (Expr::int(DType::I16, 5).lt(Expr::int(DType::I16, 9)), "true"),
            (!Expr::int(DType::U8, 1), "254u8"),
        ];
        for (e, want) in cases {
            let b = Buffer::new("B", e.dtype(), vec![1]);
            let f = Func { name: "f".into(), params: vec![b.clone()], body: Stmt::store(&b, vec![idx(0)], e) };
            let s = simplify(&f);
            let StmtKind::Store { value, .. } = s.body.kind() else { panic!("not a store") };
            assert_eq!(value.to_string(), want);
        }
    }

    #[test]
    fn wrapping_integer_identities_only() {
        let x = Var::new("x", DType::I32);
        let xe = x.to_expr();
        let zero = Expr::int(DType::I32, 0);
        let one = Expr::int(DType::I32, 1);
        let b = Buffer::new("B", DType::I32, vec![1]);
        let run = |e: Expr| {
            let f = Func { name: "f".into(), params: vec![b.clone()], body: Stmt::store(&b, vec![idx(0)], e) };
            let s = simplify(&f);
            let StmtKind::Store { value, .. } = s.body.kind() else { panic!("not a store") };
            value.to_string()
        };
        assert_eq!(run(xe.clone() + zero.clone()), "x");
        assert_eq!(run(xe.clone() * one.clone()), "x");
        assert_eq!(run(xe.clone() * zero.clone()), "0i32");
        assert_eq!(run(xe.clone() - xe.clone()), "0i32");
        assert_eq!(run(xe.clone() / one.clone()), "x");
        assert_eq!(run(xe.clone() % one), "0i32");
        assert_eq!(run(xe.clone() / zero), "0i32");
        // Reassociation is limited to i64 index arithmetic.
        assert_eq!(run((xe.clone() + Expr::int(DType::I32, 1)) - Expr::int(DType::I32, 1)), "x + 1i32 - 1i32");
        // Float identities are never applied (-0.0 + 0.0 is +0.0).
        let fx = Var::new("fx", DType::F32);
        let fb = Buffer::new("F", DType::F32, vec![1]);
        let e = fx.to_expr() + Expr::float(DType::F32, 0.0);
        let f = Func { name: "f".into(), params: vec![fb.clone()], body: Stmt::store(&fb, vec![idx(0)], e) };
        assert!(simplify(&f).body.same_node(&f.body));
        // Unsigned divisors are their mathematical value: u64::MAX is not -1.
        let i = Var::index("i");
        let small = i.to_expr().cast(DType::U64);
        let umax = Expr::int(DType::U64, -1);
        let ub = Buffer::new("U", DType::U64, vec![2, 10]);
        let body = Stmt::seq(vec![
            Stmt::store(&ub, vec![idx(0), i.to_expr()], small.clone() / umax.clone()),
            Stmt::store(&ub, vec![idx(1), i.to_expr()], small % umax),
        ]);
        let f = Func { name: "u".into(), params: vec![ub], body: Stmt::for_loop(i, 10, ForKind::Serial, body) };
        let s = simplify(&f);
        assert_same_results(&f, &s);
        assert_eq!(
            format!("{s}"),
            "func u(U: u64[2, 10]) {\n  for i in 0..10 {\n    U[0, i] = 0u64\n    U[1, i] = u64(i)\n  }\n}\n"
        );
    }

    #[test]
    fn floor_div_mod_cancel_with_intervals() {
        let (x, y) = (Var::index("x"), Var::index("y"));
        let body = |e: Expr| -> Func {
            let e = e.clone();
            func(|_, out| {
                Stmt::for_loop(
                    x.clone(),
                    4,
                    ForKind::Serial,
                    Stmt::for_loop(y.clone(), 8, ForKind::Serial, Stmt::store(out, vec![idx(0)], e)),
                )
            })
        };
        let inner = |f: &Func| {
            let s = simplify(f);
            let mut found = String::new();
            crate::mutator::for_each_stmt(&s.body, &mut |st| {
                if let StmtKind::Store { value, .. } = st.kind() {
                    found = value.to_string();
                }
            });
            found
        };
        let (xe, ye) = (x.to_expr(), y.to_expr());
        let lin = xe.clone() * 8 + ye.clone();
        assert_eq!(inner(&body(lin.clone() / 8)), "x");
        assert_eq!(inner(&body(lin.clone() % 8)), "y");
        assert_eq!(inner(&body((lin.clone() + 16) / 8)), "x + 2");
        assert_eq!(inner(&body((lin.clone() + 3) / 4)), "x*2 + (y + 3)/4");
        assert_eq!(inner(&body((lin.clone() + 11) % 8)), "(y + 3)%8");
        assert_eq!(inner(&body((xe.clone() * 16 + ye.clone()) / 4 / 2)), "x*2");
        assert_eq!(inner(&body(((xe.clone() + ye.clone() * 3) / 2) / 4)), "(x + y*3)/8");
        assert_eq!(inner(&body((xe.clone() * 5 + ye.clone()) % 16 % 8)), "(x*5 + y)%8");
        assert_eq!(inner(&body(ye.clone() / 8 + ye.clone() % 8)), "y");
        // Negative numerators use floor semantics.
        assert_eq!(inner(&body((ye.clone() - 8) / 8)), "-1");
        assert_eq!(inner(&body((ye.clone() - 8) % 8)), "y");
    }

    #[test]
    fn division_by_a_constant_sees_through_a_let_when_the_remainder_fits_one_period() {
        let (x, y, i) = (Var::index("x"), Var::index("y"), Var::index("i"));
        let (xe, ye, ie) = (x.to_expr(), y.to_expr(), i.to_expr());
        let f = func(|a, out| {
            let stores = Stmt::seq(vec![
                Stmt::store(out, vec![idx(0)], ie.clone() / 8 + ie.clone() % 8),
                Stmt::store(out, vec![idx(1)], ie.clone() / 16 % 3),
                Stmt::store(out, vec![idx(2)], ie.clone() / 3),
                Stmt::store(a, vec![idx(0)], ie.clone()),
            ]);
            let body = Stmt::let_stmt(i.clone(), xe.clone() * 8 + ye.clone(), stores);
            Stmt::for_loop(x.clone(), 4, ForKind::Serial, Stmt::for_loop(y.clone(), 8, ForKind::Serial, body))
        });
        let text = checked(&f);
        assert!(text.contains("B[0] = x + y"), "{text}");
        // `x*8 + y` spans two periods of 16, so the let stays opaque (`%3` of `0..=1` goes).
        assert!(text.contains("B[1] = i/16\n"), "{text}");
        assert!(text.contains("B[2] = i/3"), "{text}");
    }

    #[test]
    fn min_max_and_comparisons_decided_by_ranges() {
        let (x, y) = (Var::index("x"), Var::index("y"));
        let (xe, ye) = (x.to_expr(), y.to_expr());
        let e = min(xe.clone(), 15)
            + max(xe.clone() + 1, xe.clone())
            + min(ye.clone(), xe.clone())
            + select(xe.lt(ye.clone() + 20), idx(1), idx(2));
        let f = func(|_, out| {
            Stmt::for_loop(
                x.clone(),
                10,
                ForKind::Serial,
                Stmt::for_loop(y.clone(), 10, ForKind::Serial, Stmt::store(out, vec![xe.clone()], e)),
            )
        });
        assert_eq!(
            checked(&f),
            "func f(A: i64[64], B: i64[64]) {\n  for x in 0..10 {\n    for y in 0..10 {\n      B[x] = x*2 + min(y, x) + 2\n    }\n  }\n}\n"
        );
    }

    #[test]
    fn control_flow_decided_by_intervals() {
        let (io, ii, i) = (Var::index("io"), Var::index("ii"), Var::index("i"));
        let f = func(|a, b| {
            let store = Stmt::store(b, vec![i.to_expr()], Expr::load(a, vec![i.to_expr()]));
            // The inner `if` is implied by the outer one and disappears.
            let inner = Stmt::if_then(i.to_expr().lt(12), store);
            let guarded = Stmt::if_then(i.to_expr().lt(10), inner);
            let body = Stmt::let_stmt(i.clone(), io.to_expr() * 8 + ii.to_expr(), guarded);
            let never = Stmt::if_then(io.to_expr().ge(2), Stmt::store(b, vec![idx(0)], idx(1)));
            Stmt::for_loop(
                io.clone(),
                2,
                ForKind::Serial,
                Stmt::seq(vec![Stmt::for_loop(ii.clone(), 8, ForKind::Serial, body), never]),
            )
        });
        assert_eq!(
            checked(&f),
            "func f(A: i64[64], B: i64[64]) {\n  for io in 0..2 {\n    for ii in 0..8 {\n      let i = io*8 + ii\n      if i < 10 {\n        B[i] = A[i]\n      }\n    }\n  }\n}\n"
        );
    }

    #[test]
    fn loops_of_extent_zero_and_one_and_trivial_lets() {
        let (i, j, t) = (Var::index("i"), Var::index("j"), Var::index("t"));
        let f = func(|a, b| {
            let one = Stmt::for_loop(
                i.clone(),
                1,
                ForKind::Vectorized,
                Stmt::let_stmt(
                    t.clone(),
                    j.to_expr(),
                    Stmt::store(b, vec![i.to_expr() + t.to_expr()], Expr::load(a, vec![i.to_expr() * 3])),
                ),
            );
            let zero = Stmt::for_loop(i.clone(), 0, ForKind::Serial, Stmt::store(b, vec![idx(0)], idx(0)));
            Stmt::for_loop(j.clone(), 4, ForKind::Serial, Stmt::seq(vec![one, zero]))
        });
        assert_eq!(checked(&f), "func f(A: i64[64], B: i64[64]) {\n  for j in 0..4 {\n    B[j] = A[0]\n  }\n}\n");
    }

    #[test]
    fn else_branch_knows_the_condition_failed() {
        let x = Var::index("x");
        let xe = x.to_expr();
        let f = func(|_, b| {
            let e = Stmt::store(b, vec![xe.clone()], min(xe.clone(), 3));
            let t = Stmt::store(b, vec![xe.clone()], max(xe.clone(), 8));
            let branch = Stmt::new(StmtKind::If { cond: xe.lt(5), then_case: t, else_case: Some(e) });
            Stmt::for_loop(x.clone(), 10, ForKind::Serial, branch)
        });
        assert_eq!(
            checked(&f),
            "func f(A: i64[64], B: i64[64]) {\n  for x in 0..10 {\n    if x < 5 {\n      B[x] = 8\n    } else {\n      B[x] = 3\n    }\n  }\n}\n"
        );
    }

    #[test]
    fn vectors_keep_ramps_and_fold_broadcasts() {
        let x = Var::index("x");
        let ramp = Expr::ramp(idx(0), idx(1), 8);
        let base = Expr::broadcast(x.to_expr() * 8, 8);
        let index = (ramp + base) * Expr::broadcast(idx(2), 8) + Expr::broadcast(idx(1), 8);
        let value = Expr::broadcast(idx(3), 8) * Expr::broadcast(idx(4), 8);
        let f = func(|_, b| Stmt::for_loop(x.clone(), 4, ForKind::Serial, Stmt::store(b, vec![index], value)));
        assert_eq!(
            checked(&f),
            "func f(A: i64[64], B: i64[64]) {\n  for x in 0..4 {\n    B[ramp(x*16 + 1, 2, 8)] = broadcast(12, 8)\n  }\n}\n"
        );
    }

    #[test]
    fn unchanged_trees_are_returned_identically() {
        let (x, y) = (Var::index("x"), Var::index("y"));
        let f = func(|a, b| {
            let v = Expr::load(a, vec![x.to_expr() * 8 + y.to_expr()]) + Expr::load(a, vec![y.to_expr() / 3]);
            let s = Stmt::store(b, vec![x.to_expr() * 8 - y.to_expr() + 1], v);
            Stmt::for_loop(x.clone(), 4, ForKind::Parallel, Stmt::for_loop(y.clone(), 8, ForKind::Serial, s))
        });
        assert!(simplify(&f).body.same_node(&f.body));
        let once = simplify(&store_expr((x.to_expr() + 1) * 2 - x.to_expr()));
        assert!(simplify(&once).body.same_node(&once.body));
    }

    mod prop {
        use super::*;
        use crate::passes::testing::arb_index_expr;
        use proptest::prelude::*;

        const EXTENTS: [i64; 3] = [3, 5, 4];

        /// Evaluates an `i64` expression with `interp::scalar`.
        fn eval(e: &Expr, env: &HashMap<Var, i64>) -> i64 {
            let ty = DType::INDEX.scalar;
            match e.kind() {
                ExprKind::Int(v) => *v,
                ExprKind::Var(v) => env[v],
                ExprKind::Binary(op, a, b) => {
                    scalar::binary(*op, ty, Scalar::Int(eval(a, env)), Scalar::Int(eval(b, env))).as_int()
                }
                ExprKind::Cmp(op, a, b) => {
                    scalar::compare(*op, ty, Scalar::Int(eval(a, env)), Scalar::Int(eval(b, env))) as i64
                }
                ExprKind::Select(c, t, f) => {
                    if eval(c, env) != 0 {
                        eval(t, env)
                    } else {
                        eval(f, env)
                    }
                }
                other => panic!("unexpected node {other:?}"),
            }
        }

        fn nest(vars: &[Var], e: Expr) -> Func {
            let out = Buffer::new("Out", DType::I64, vec![1]);
            let mut body = Stmt::store(&out, vec![idx(0)], e);
            for (v, extent) in vars.iter().zip(EXTENTS).rev() {
                body = Stmt::for_loop(v.clone(), extent, ForKind::Serial, body);
            }
            Func { name: "p".into(), params: vec![out], body }
        }

        fn stored(f: &Func) -> Expr {
            let mut found = None;
            crate::mutator::for_each_stmt(&f.body, &mut |s| {
                if let StmtKind::Store { value, .. } = s.kind() {
                    found = Some(value.clone());
                }
            });
            found.expect("the store survives")
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(400))]
            #[test]
            fn simplify_preserves_values_and_is_idempotent(
                e in arb_index_expr(vec![Var::index("x"), Var::index("y"), Var::index("z")], 4)
            ) {
                let mut vars: Vec<Var> = Vec::new();
                e.for_each(&mut |n| if let ExprKind::Var(v) = n.kind() && !vars.contains(v) {
                    vars.push(v.clone())
                });
                vars.sort_by_key(|v| v.name().to_string());
                // Bind all three names so every variable has a range.
                while vars.len() < 3 { vars.push(Var::index(format!("pad{}", vars.len()))); }
                let f = nest(&vars, e.clone());
                let s = simplify(&f);
                let simple = stored(&s);
                for p in 0..EXTENTS.iter().product::<i64>() {
                    let env: HashMap<Var, i64> = vars.iter().zip([p % 3, p / 3 % 5, p / 15])
                        .map(|(v, x)| (v.clone(), x)).collect();
                    prop_assert_eq!(eval(&e, &env), eval(&simple, &env), "{} became {}", e, simple);
                }
                let twice = simplify(&s);
                prop_assert!(twice.body.same_node(&s.body), "not idempotent: {} then {}", s, twice);
            }
        }
    }
}
