//! Constant interval analysis: the range of values an integer or bool expression can take.
//!
//! Bounds are mathematical values (`u64` above `i64::MAX` included), held as `i128` so sums and
//! products of any two 64-bit bounds are exact. Every operation models the IR's wrapping rules:
//! when an integer result could leave its type's range, its interval is the whole type range,
//! so an interval is sound for the value the program actually computes.

use rustc_hash::FxHashMap as HashMap;

use crate::dtype::{DType, ScalarType};
use crate::expr::{BinOp, CmpOp, Expr, ExprKind, Var, VectorReduceOp};
use crate::interp::scalar::int_value;

/// A closed range `[min, max]`; `None` is an unbounded side. `min > max` is the empty interval
/// (a loop of extent 0, or contradictory facts): code under it never runs.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Interval {
    pub min: Option<i128>,
    pub max: Option<i128>,
}

impl Interval {
    pub const EVERYTHING: Interval = Interval { min: None, max: None };

    pub fn new(min: i128, max: i128) -> Interval {
        Interval { min: Some(min), max: Some(max) }
    }

    pub fn point(value: i128) -> Interval {
        Interval::new(value, value)
    }

    /// The values of a loop variable: `[0, extent - 1]`.
    pub fn of_extent(extent: i64) -> Interval {
        Interval::new(0, extent as i128 - 1)
    }

    /// Every value of a type: the integer range, `[0, 1]` for bool, unbounded otherwise.
    pub fn of_type(dtype: DType) -> Interval {
        match type_range(dtype.scalar) {
            Some((lo, hi)) => Interval::new(lo, hi),
            None => Interval::EVERYTHING,
        }
    }

    /// The single value, if the interval holds exactly one.
    pub fn as_point(&self) -> Option<i128> {
        match (self.min, self.max) {
            (Some(a), Some(b)) if a == b => Some(a),
            _ => None,
        }
    }

    /// True if every value lies in `[lo, hi]`.
    pub fn is_within(&self, lo: i128, hi: i128) -> bool {
        self.min.is_some_and(|m| m >= lo) && self.max.is_some_and(|m| m <= hi)
    }

    /// The smallest interval holding both.
    pub fn union(self, other: Interval) -> Interval {
        Interval { min: both(self.min, other.min, i128::min), max: both(self.max, other.max, i128::max) }
    }

    /// The values in both.
    pub fn intersect(self, other: Interval) -> Interval {
        Interval { min: either(self.min, other.min, i128::max), max: either(self.max, other.max, i128::min) }
    }
}

/// `f(a, b)` if both sides are bounded, else unbounded.
fn both(a: Option<i128>, b: Option<i128>, f: fn(i128, i128) -> i128) -> Option<i128> {
    Some(f(a?, b?))
}

/// `f(a, b)` if both are bounded, else whichever is bounded.
fn either(a: Option<i128>, b: Option<i128>, f: fn(i128, i128) -> i128) -> Option<i128> {
    match (a, b) {
        (Some(a), Some(b)) => Some(f(a, b)),
        (a, b) => a.or(b),
    }
}

fn type_range(ty: ScalarType) -> Option<(i128, i128)> {
    if ty.is_bool() { Some((0, 1)) } else { ty.int_range() }
}

/// Known ranges of variables (pushed and popped as a traversal enters and leaves their scope)
/// and of non-variable expressions learned from `If` conditions.
#[derive(Clone, Debug, Default)]
pub struct Scope {
    vars: HashMap<Var, Vec<Interval>>,
    facts: Vec<(Expr, Interval)>,
}

/// What one `Scope::assume` pushed; hand it back to `Scope::forget`.
#[must_use = "assumptions must be popped with Scope::forget"]
#[derive(Debug)]
pub struct Assumptions {
    vars: Vec<Var>,
    facts: usize,
}

impl Scope {
    pub fn new() -> Scope {
        Scope::default()
    }

    /// Binds `var` to `interval` until the matching `pop` (For: `of_extent`, Let: its value's).
    pub fn push(&mut self, var: &Var, interval: Interval) {
        self.vars.entry(var.clone()).or_default().push(interval);
    }

    pub fn pop(&mut self, var: &Var) {
        let stack = self.vars.get_mut(var).unwrap_or_else(|| panic!("Scope::pop of unpushed variable {var}"));
        stack.pop();
        if stack.is_empty() {
            self.vars.remove(var);
        }
    }

    /// The innermost interval of `var`, if it was pushed.
    pub fn get(&self, var: &Var) -> Option<Interval> {
        self.vars.get(var).and_then(|s| s.last().copied())
    }

    /// Refines the scope with what `cond == holds` implies: comparisons of integers (`x < e`,
    /// `e >= x`, `x == e`, ...) bound each non-constant side by the other side's bounds, through
    /// `&` (when it holds), `|` (when it fails) and `!`. A variable side narrows the variable; any
    /// other side is remembered as a fact about that expression (matched structurally), unless it
    /// reads memory, which a store under the condition could change.
    pub fn assume(&mut self, cond: &Expr, holds: bool) -> Assumptions {
        let mut pushed = Assumptions { vars: Vec::new(), facts: 0 };
        self.assume_into(cond, holds, &mut pushed);
        pushed
    }

    /// Pops what `assume` pushed.
    pub fn forget(&mut self, assumptions: Assumptions) {
        for var in assumptions.vars.iter().rev() {
            self.pop(var);
        }
        let keep = self.facts.len() - assumptions.facts;
        self.facts.truncate(keep);
    }

    fn assume_into(&mut self, cond: &Expr, holds: bool, pushed: &mut Assumptions) {
        if cond.dtype() != DType::BOOL {
            return;
        }
        match cond.kind() {
            ExprKind::Binary(BinOp::And, a, b) if holds => {
                self.assume_into(a, true, pushed);
                self.assume_into(b, true, pushed);
            }
            ExprKind::Binary(BinOp::Or, a, b) if !holds => {
                self.assume_into(a, false, pushed);
                self.assume_into(b, false, pushed);
            }
            ExprKind::Not(a) => self.assume_into(a, !holds, pushed),
            ExprKind::Cmp(op, a, b) if a.dtype().is_int() => {
                let op = if holds { *op } else { negate(*op) };
                let (ia, ib) = (bounds_of(a, self), bounds_of(b, self));
                let dec = |v: Option<i128>| v.map(|v| v - 1);
                let inc = |v: Option<i128>| v.map(|v| v + 1);
                let (for_a, for_b) = match op {
                    CmpOp::Lt => (Interval { min: None, max: dec(ib.max) }, Interval { min: inc(ia.min), max: None }),
                    CmpOp::Le => (Interval { min: None, max: ib.max }, Interval { min: ia.min, max: None }),
                    CmpOp::Gt => (Interval { min: inc(ib.min), max: None }, Interval { min: None, max: dec(ia.max) }),
                    CmpOp::Ge => (Interval { min: ib.min, max: None }, Interval { min: None, max: ia.max }),
                    CmpOp::Eq => (ib, ia),
                    CmpOp::Ne => return,
                };
                self.narrow(a, ia.intersect(for_a), pushed);
                self.narrow(b, ib.intersect(for_b), pushed);
            }
            _ => {}
        }
    }

    fn narrow(&mut self, expr: &Expr, interval: Interval, pushed: &mut Assumptions) {
        let mut reads_memory = false;
        expr.for_each(&mut |e| reads_memory |= matches!(e.kind(), ExprKind::Load(..) | ExprKind::TensorRead(..)));
        match expr.kind() {
            // A load may read a different value after a store in the branch: no fact.
            _ if reads_memory => {}
            ExprKind::Int(_) => {}
            ExprKind::Var(v) => {
                self.push(v, interval);
                pushed.vars.push(v.clone());
            }
            _ => {
                self.facts.push((expr.clone(), interval));
                pushed.facts += 1;
            }
        }
    }
}

/// The comparison that holds exactly when `op` fails, for integers (not for floats: NaN).
pub fn negate(op: CmpOp) -> CmpOp {
    match op {
        CmpOp::Eq => CmpOp::Ne,
        CmpOp::Ne => CmpOp::Eq,
        CmpOp::Lt => CmpOp::Ge,
        CmpOp::Le => CmpOp::Gt,
        CmpOp::Gt => CmpOp::Le,
        CmpOp::Ge => CmpOp::Lt,
    }
}

/// The value of a bool expression if `scope` decides it (over all lanes of a vector).
pub fn prove(cond: &Expr, scope: &Scope) -> Option<bool> {
    bounds_of(cond, scope).as_point().map(|v| v != 0)
}

/// The range of every lane of an integer or bool expression (bool as 0/1) under `scope`;
/// `Interval::EVERYTHING` for floats. Unknown variables range over their type.
///
/// Handles constants, variables, `+ - * / %` (floor semantics) `min max`, comparisons and bool
/// logic, `>>` by a constant, `&` of non-negatives, casts, `Select` (the union of its arms unless
/// the condition is decided), `Ramp` (all lanes), `Broadcast`, `VectorReduce`, and `Load` and
/// `TensorRead` (the `placeholder_in_range` promise of the buffer or tensor, else the element
/// type's range). It does not relate variables to each other: `x - x` is bounded only by the
/// ranges of `x`, so callers simplify first.
pub fn bounds_of(expr: &Expr, scope: &Scope) -> Interval {
    let dtype = expr.dtype();
    let Some((lo, hi)) = type_range(dtype.scalar) else {
        return Interval::EVERYTHING;
    };
    let mut raw = raw_bounds(expr, scope);
    for (fact_expr, fact) in &scope.facts {
        if fact_expr.structurally_eq(expr) {
            raw = raw.intersect(*fact);
        }
    }
    // A result that may leave the type's range wraps, so it can be anything in the type.
    if raw.is_within(lo, hi) { raw } else { Interval::new(lo, hi) }
}

fn raw_bounds(expr: &Expr, scope: &Scope) -> Interval {
    let dtype = expr.dtype();
    match expr.kind() {
        ExprKind::Int(v) => Interval::point(if dtype.is_bool() { *v as i128 } else { int_value(dtype.scalar, *v) }),
        ExprKind::Var(v) => scope.get(v).unwrap_or(Interval::of_type(dtype)),
        ExprKind::Binary(op, a, b) => {
            let (ia, ib) = (bounds_of(a, scope), bounds_of(b, scope));
            binary_bounds(*op, dtype, ia, ib)
        }
        ExprKind::Cmp(op, a, b) => {
            if !(a.dtype().is_int() || a.dtype().is_bool()) {
                return Interval::new(0, 1);
            }
            compare_bounds(*op, bounds_of(a, scope), bounds_of(b, scope))
        }
        ExprKind::Not(a) => {
            let ia = bounds_of(a, scope);
            let flip = |base: i128| Interval { min: ia.max.map(|m| base - m), max: ia.min.map(|m| base - m) };
            if dtype.is_bool() {
                flip(1)
            } else if dtype.is_signed_int() {
                flip(-1)
            } else {
                flip(Interval::of_type(dtype).max.expect("unsigned range"))
            }
        }
        ExprKind::Cast(a) | ExprKind::SaturatingCast(a) => {
            let from = a.dtype();
            if !(from.is_int() || from.is_bool()) {
                return Interval::of_type(dtype);
            }
            let ia = bounds_of(a, scope);
            if dtype.is_bool() {
                return if ia.as_point() == Some(0) {
                    Interval::point(0)
                } else if ia.min.is_some_and(|m| m > 0) || ia.max.is_some_and(|m| m < 0) {
                    Interval::point(1)
                } else {
                    Interval::new(0, 1)
                };
            }
            if matches!(expr.kind(), ExprKind::SaturatingCast(_)) {
                let t = Interval::of_type(dtype);
                let clamp = |v: Option<i128>, default: Option<i128>| {
                    v.map(|v| v.clamp(t.min.unwrap(), t.max.unwrap())).or(default)
                };
                Interval { min: clamp(ia.min, t.min), max: clamp(ia.max, t.max) }
            } else {
                ia
            }
        }
        ExprKind::Select(c, t, f) => match prove(c, scope) {
            Some(true) => bounds_of(t, scope),
            Some(false) => bounds_of(f, scope),
            None => bounds_of(t, scope).union(bounds_of(f, scope)),
        },
        ExprKind::Ramp(base, stride) => {
            let lanes = Interval::new(0, dtype.lanes as i128 - 1);
            let offsets = mul(bounds_of(stride, scope), lanes);
            add(bounds_of(base, scope), offsets)
        }
        ExprKind::Broadcast(v) => bounds_of(v, scope),
        ExprKind::VectorReduce(op, v) => {
            let iv = bounds_of(v, scope);
            match op {
                VectorReduceOp::Add => {
                    let group = (v.dtype().lanes / dtype.lanes) as i128;
                    mul(iv, Interval::point(group))
                }
                VectorReduceOp::Min | VectorReduceOp::Max => iv,
            }
        }
        // Any bit pattern of the target type.
        ExprKind::Reinterpret(_) => Interval::of_type(dtype),
        // Memory holds any value of its type, unless its parameter promises a range.
        ExprKind::Load(buffer, _) => match buffer.value_range() {
            Some((lo, hi)) => Interval::new(lo as i128, hi as i128),
            None => Interval::EVERYTHING,
        },
        ExprKind::TensorRead(tensor, _) => match tensor.value_range() {
            Some((lo, hi)) => Interval::new(lo as i128, hi as i128),
            None => Interval::EVERYTHING,
        },
        // Float values (the domain is integers) and reductions: unknown.
        ExprKind::Float(_) | ExprKind::Round(_) | ExprKind::Sqrt(_) | ExprKind::Fma(..) | ExprKind::Reduce(_) => {
            Interval::EVERYTHING
        }
    }
}

fn binary_bounds(op: BinOp, dtype: DType, a: Interval, b: Interval) -> Interval {
    let bits = dtype.bits() as i128;
    match op {
        BinOp::Add => add(a, b),
        BinOp::Sub => add(a, Interval { min: b.max.map(|v| -v), max: b.min.map(|v| -v) }),
        BinOp::Mul => mul(a, b),
        BinOp::Div => div(a, b),
        BinOp::Mod => modulo(a, b),
        BinOp::Min => min_bounds(a, b),
        BinOp::Max => max_bounds(a, b),
        // Bool `&` and `|` are min and max of 0/1.
        BinOp::And if dtype.is_bool() => min_bounds(a, b),
        BinOp::Or if dtype.is_bool() => max_bounds(a, b),
        BinOp::And if a.min.is_some_and(|m| m >= 0) && b.min.is_some_and(|m| m >= 0) => {
            Interval { min: Some(0), max: either(a.max, b.max, i128::min) }
        }
        BinOp::Shr => match b.as_point() {
            // Shifting right by a constant is floor division by a power of two: monotone.
            Some(s) => {
                let s = s.rem_euclid(bits) as u32;
                Interval { min: a.min.map(|v| v >> s), max: a.max.map(|v| v >> s) }
            }
            None => Interval::EVERYTHING,
        },
        BinOp::Xor if dtype.is_bool() => match (a.as_point(), b.as_point()) {
            (Some(x), Some(y)) => Interval::point(x ^ y),
            _ => Interval::new(0, 1),
        },
        BinOp::And | BinOp::Or | BinOp::Xor | BinOp::Shl => Interval::EVERYTHING,
    }
}

fn min_bounds(a: Interval, b: Interval) -> Interval {
    Interval { min: both(a.min, b.min, i128::min), max: either(a.max, b.max, i128::min) }
}

fn max_bounds(a: Interval, b: Interval) -> Interval {
    Interval { min: either(a.min, b.min, i128::max), max: both(a.max, b.max, i128::max) }
}

fn compare_bounds(op: CmpOp, a: Interval, b: Interval) -> Interval {
    // `lt(x, y)`: Some(true) if every x < every y, Some(false) if no x < any y.
    let lt = |x: Interval, y: Interval| -> Option<bool> {
        if x.max.zip(y.min).is_some_and(|(xm, ym)| xm < ym) {
            Some(true)
        } else if x.min.zip(y.max).is_some_and(|(xm, ym)| xm >= ym) {
            Some(false)
        } else {
            None
        }
    };
    let eq = || -> Option<bool> {
        match (a.as_point(), b.as_point()) {
            (Some(x), Some(y)) if x == y => Some(true),
            _ if lt(a, b).is_some_and(|v| v) || lt(b, a).is_some_and(|v| v) => Some(false),
            _ => None,
        }
    };
    let decided = match op {
        CmpOp::Lt => lt(a, b),
        CmpOp::Ge => lt(a, b).map(|v| !v),
        CmpOp::Gt => lt(b, a),
        CmpOp::Le => lt(b, a).map(|v| !v),
        CmpOp::Eq => eq(),
        CmpOp::Ne => eq().map(|v| !v),
    };
    match decided {
        Some(v) => Interval::point(v as i128),
        None => Interval::new(0, 1),
    }
}

fn add(a: Interval, b: Interval) -> Interval {
    let sum = |x: Option<i128>, y: Option<i128>| x?.checked_add(y?);
    Interval { min: sum(a.min, b.min), max: sum(a.max, b.max) }
}

fn mul(a: Interval, b: Interval) -> Interval {
    if let (Some(a0), Some(a1), Some(b0), Some(b1)) = (a.min, a.max, b.min, b.max) {
        return corners(a0, a1, b0, b1, i128::checked_mul);
    }
    let scale = |iv: Interval, c: i128| match c.signum() {
        0 => Interval::point(0),
        1 => Interval { min: iv.min.and_then(|v| v.checked_mul(c)), max: iv.max.and_then(|v| v.checked_mul(c)) },
        _ => Interval { min: iv.max.and_then(|v| v.checked_mul(c)), max: iv.min.and_then(|v| v.checked_mul(c)) },
    };
    match (a.as_point(), b.as_point()) {
        (Some(c), _) => scale(b, c),
        (_, Some(c)) => scale(a, c),
        _ => Interval::EVERYTHING,
    }
}

/// The hull of `f` at the four corners; right when `f` is monotone in each argument on the box.
fn corners(a0: i128, a1: i128, b0: i128, b1: i128, f: fn(i128, i128) -> Option<i128>) -> Interval {
    let vals = [f(a0, b0), f(a0, b1), f(a1, b0), f(a1, b1)];
    if vals.iter().any(Option::is_none) {
        return Interval::EVERYTHING;
    }
    let vals = vals.map(Option::unwrap);
    Interval::new(*vals.iter().min().unwrap(), *vals.iter().max().unwrap())
}

// Floor division on mathematical bounds (i128), which `interp::scalar` does not represent.
fn floor_div(a: i128, b: i128) -> i128 {
    a.div_euclid(b) - if b < 0 && a.rem_euclid(b) != 0 { 1 } else { 0 }
}

fn floor_mod(a: i128, b: i128) -> i128 {
    a - b * floor_div(a, b)
}

fn div(a: Interval, b: Interval) -> Interval {
    if b.as_point() == Some(0) {
        return Interval::point(0);
    }
    let excludes_zero = b.min.is_some_and(|m| m > 0) || b.max.is_some_and(|m| m < 0);
    if excludes_zero {
        // Floor division by a divisor of one sign is monotone in each argument.
        if let (Some(a0), Some(a1), Some(b0), Some(b1)) = (a.min, a.max, b.min, b.max) {
            return corners(a0, a1, b0, b1, |x, y| Some(floor_div(x, y)));
        }
        if let Some(c) = b.as_point() {
            let fd = |v: Option<i128>| v.map(|v| floor_div(v, c));
            return if c > 0 {
                Interval { min: fd(a.min), max: fd(a.max) }
            } else {
                Interval { min: fd(a.max), max: fd(a.min) }
            };
        }
    }
    // |floor(a / b)| <= |a| for every non-zero b, and x / 0 == 0.
    match (a.min, a.max) {
        (Some(a0), Some(a1)) => {
            let m = a0.abs().max(a1.abs());
            Interval::new(-m, m)
        }
        _ => Interval::EVERYTHING,
    }
}

fn modulo(a: Interval, b: Interval) -> Interval {
    if let Some(c) = b.as_point() {
        if c == 0 {
            return Interval::point(0);
        }
        // Within one period of the divisor, floor modulo is monotone.
        if let (Some(a0), Some(a1)) = (a.min, a.max)
            && floor_div(a0, c) == floor_div(a1, c)
        {
            return Interval::new(floor_mod(a0, c), floor_mod(a1, c));
        }
        return if c > 0 { Interval::new(0, c - 1) } else { Interval::new(c + 1, 0) };
    }
    if b.min.is_some_and(|m| m > 0) {
        // The remainder has the divisor's sign, is below it, and never exceeds a non-negative a.
        let below_b = b.max.map(|m| m - 1);
        let max = if a.min.is_some_and(|m| m >= 0) { either(below_b, a.max, i128::min) } else { below_b };
        return Interval { min: Some(0), max };
    }
    if b.max.is_some_and(|m| m < 0) {
        return Interval { min: b.min.map(|m| m + 1), max: Some(0) };
    }
    match (b.min, b.max) {
        (Some(b0), Some(b1)) => {
            let m = b0.abs().max(b1.abs());
            Interval::new(-(m - 1).max(0), (m - 1).max(0))
        }
        _ => Interval::EVERYTHING,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::expr::{max, min, select};

    fn idx(v: i64) -> Expr {
        Expr::index(v)
    }

    fn in_loop(scope: &mut Scope, name: &str, extent: i64) -> Var {
        let v = Var::index(name);
        scope.push(&v, Interval::of_extent(extent));
        v
    }

    #[test]
    fn affine_index_of_split_loops() {
        let mut s = Scope::new();
        let io = in_loop(&mut s, "io", 4);
        let ii = in_loop(&mut s, "ii", 8);
        let i = io.to_expr() * 8 + ii.to_expr();
        assert_eq!(bounds_of(&i, &s), Interval::new(0, 31));
        assert_eq!(bounds_of(&(i.clone() * 3 - 5), &s), Interval::new(-5, 88));
        assert_eq!(bounds_of(&(idx(100) - i), &s), Interval::new(69, 100));
    }

    #[test]
    fn floor_division_and_modulo() {
        let mut s = Scope::new();
        let x = in_loop(&mut s, "x", 10); // [0, 9]
        let xe = x.to_expr();
        assert_eq!(bounds_of(&(xe.clone() / 4), &s), Interval::new(0, 2));
        assert_eq!(bounds_of(&((xe.clone() - 9) / 4), &s), Interval::new(-3, 0));
        assert_eq!(bounds_of(&((xe.clone() - 9) / -4), &s), Interval::new(0, 2));
        assert_eq!(bounds_of(&(xe.clone() % 4), &s), Interval::new(0, 3));
        assert_eq!(bounds_of(&((xe.clone() - 20) % 4), &s), Interval::new(0, 3));
        assert_eq!(bounds_of(&((xe.clone() + 16) % 32), &s), Interval::new(16, 25));
        assert_eq!(bounds_of(&(xe.clone() % -4), &s), Interval::new(-3, 0));
        assert_eq!(bounds_of(&(xe.clone() / 0), &s), Interval::point(0));
        assert_eq!(bounds_of(&(xe.clone() % 0), &s), Interval::point(0));
        let y = in_loop(&mut s, "y", 5); // divisor [1, 5] after + 1
        let d = y.to_expr() + 1;
        assert_eq!(bounds_of(&(xe.clone() / d.clone()), &s), Interval::new(0, 9));
        assert_eq!(bounds_of(&(xe.clone() % d), &s), Interval::new(0, 4));
    }

    #[test]
    fn min_max_select_ramp_broadcast() {
        let mut s = Scope::new();
        let x = in_loop(&mut s, "x", 10);
        let xe = x.to_expr();
        assert_eq!(bounds_of(&min(&xe, 4), &s), Interval::new(0, 4));
        assert_eq!(bounds_of(&max(&xe, 4), &s), Interval::new(4, 9));
        assert_eq!(bounds_of(&select(xe.lt(5), idx(-1), xe.clone()), &s), Interval::new(-1, 9));
        assert_eq!(bounds_of(&select(xe.lt(20), idx(-1), xe.clone()), &s), Interval::point(-1));
        let r = Expr::ramp(xe.clone() * 8, idx(1), 8);
        assert_eq!(bounds_of(&r, &s), Interval::new(0, 79));
        let back = Expr::ramp(xe.clone(), idx(-2), 4);
        assert_eq!(bounds_of(&back, &s), Interval::new(-6, 9));
        assert_eq!(bounds_of(&Expr::broadcast(xe, 4), &s), Interval::new(0, 9));
    }

    #[test]
    fn casts_and_loads_respect_types() {
        let mut s = Scope::new();
        let x = in_loop(&mut s, "x", 300);
        let xe = x.to_expr();
        assert_eq!(bounds_of(&xe.cast(DType::I32), &s), Interval::new(0, 299));
        // 299 does not fit u8: the cast wraps, so anything is possible.
        assert_eq!(bounds_of(&xe.cast(DType::U8), &s), Interval::new(0, 255));
        assert_eq!(bounds_of(&xe.saturating_cast(DType::I8), &s), Interval::new(0, 127));
        let buf = crate::Buffer::new("A", DType::I16, vec![4]);
        assert_eq!(bounds_of(&Expr::load(&buf, vec![idx(0)]), &s), Interval::new(-32768, 32767));
        let u = Expr::int(DType::U64, -1);
        assert_eq!(bounds_of(&u, &s), Interval::point(u64::MAX as i128));
    }

    #[test]
    fn wrapping_arithmetic_widens_to_the_type() {
        let s = Scope::new();
        let v = Var::new("v", DType::U8);
        let e = v.to_expr() + Expr::int(DType::U8, 1);
        assert_eq!(bounds_of(&e, &s), Interval::new(0, 255));
        let big = Var::index("big");
        assert_eq!(bounds_of(&(big.to_expr() * 2), &s), Interval::of_type(DType::I64));
    }

    #[test]
    fn comparisons_are_decided_by_ranges() {
        let mut s = Scope::new();
        let x = in_loop(&mut s, "x", 10);
        let xe = x.to_expr();
        assert_eq!(prove(&xe.lt(10), &s), Some(true));
        assert_eq!(prove(&xe.ge(10), &s), Some(false));
        assert_eq!(prove(&xe.lt(5), &s), None);
        assert_eq!(prove(&(xe.lt(10) & xe.ge(0)), &s), Some(true));
        assert_eq!(prove(&(xe.lt(5) | xe.ge(0)), &s), Some(true));
        assert_eq!(prove(&!xe.eq(20), &s), Some(true));
    }

    #[test]
    fn if_conditions_refine_a_let_bound_index() {
        // for io in 0..2 { for ii in 0..8 { let i = io*8 + ii; if i < 10 { ... } } }
        let mut s = Scope::new();
        let io = in_loop(&mut s, "io", 2);
        let ii = in_loop(&mut s, "ii", 8);
        let i = Var::index("i");
        let value = io.to_expr() * 8 + ii.to_expr();
        s.push(&i, bounds_of(&value, &s));
        assert_eq!(bounds_of(&i.to_expr(), &s), Interval::new(0, 15));
        let facts = s.assume(&i.to_expr().lt(10), true);
        assert_eq!(bounds_of(&i.to_expr(), &s), Interval::new(0, 9));
        s.forget(facts);
        assert_eq!(bounds_of(&i.to_expr(), &s), Interval::new(0, 15));
        let facts = s.assume(&i.to_expr().lt(10), false);
        assert_eq!(bounds_of(&i.to_expr(), &s), Interval::new(10, 15));
        s.forget(facts);
    }

    #[test]
    fn conjunctions_and_flipped_comparisons_refine() {
        let mut s = Scope::new();
        let x = in_loop(&mut s, "x", 100);
        let y = in_loop(&mut s, "y", 100);
        let cond = idx(50).gt(x.to_expr()) & x.to_expr().ge(3) & y.to_expr().le(7) & !y.to_expr().lt(2);
        let facts = s.assume(&cond, true);
        assert_eq!(s.get(&x), Some(Interval::new(3, 49)));
        assert_eq!(s.get(&y), Some(Interval::new(2, 7)));
        s.forget(facts);
        assert_eq!(s.get(&x), Some(Interval::new(0, 99)));
        // Not (x >= 3 | y > 7): both sides fail.
        let facts = s.assume(&(x.to_expr().ge(3) | y.to_expr().gt(7)), false);
        assert_eq!(s.get(&x), Some(Interval::new(0, 2)));
        assert_eq!(s.get(&y), Some(Interval::new(0, 7)));
        s.forget(facts);
    }

    #[test]
    fn conditions_on_memory_are_not_facts() {
        let mut s = Scope::new();
        let buf = crate::Buffer::new("A", DType::I64, vec![4]);
        let load = Expr::load(&buf, vec![idx(0)]);
        let facts = s.assume(&load.lt(5), true);
        assert_eq!(bounds_of(&load, &s), Interval::of_type(DType::I64));
        s.forget(facts);
    }

    #[test]
    fn conditions_on_expressions_become_facts() {
        let mut s = Scope::new();
        let io = in_loop(&mut s, "io", 2);
        let ii = in_loop(&mut s, "ii", 8);
        let i = io.to_expr() * 8 + ii.to_expr();
        let facts = s.assume(&i.lt(10), true);
        assert_eq!(bounds_of(&(i.clone() * 3), &s), Interval::new(0, 27));
        s.forget(facts);
        assert_eq!(bounds_of(&(i * 3), &s), Interval::new(0, 45));
    }
}
