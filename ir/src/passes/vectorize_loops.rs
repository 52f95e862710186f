//! Vectorization: `Vectorized` loops become straight-line code on vectors of their extent.

use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};

use crate::analysis::interval::{Interval, Scope, bounds_of};
use crate::analysis::linear::Linear;
use crate::dtype::DType;
use crate::expr::{BinOp, Expr, ExprKind, Var, VectorReduceOp};
use crate::mutator::{Mutator, for_each_stmt, for_each_stmt_expr, rebuild_expr, walk_stmt};
use crate::passes::lanewise;
use crate::stmt::{Buffer, ForKind, Func, Stmt, StmtKind};

/// Replaces every `For` of kind `Vectorized` and extent `n` by its body with the loop variable
/// replaced by `ramp(0, 1, n)` and every expression widened lane-wise.
///
/// Does:
/// * lane-invariant expressions stay scalar and are broadcast only where they meet a vector;
///   integer `x + ramp(b, s, n)`, `ramp * x`, ... stay ramps, so contiguous accesses remain
///   `ramp(base, 1, n)`;
/// * a `Let` whose value becomes a ramp or broadcast of scalars is substituted; any other vector
///   value is bound to a new vector-typed variable of the same name;
/// * serial and unrolled loops inside keep their kind and get vectorized bodies;
/// * a store whose index depends on the lane becomes a vector store (value broadcast if needed);
/// * an integer reduction over the lane, `B[idx] = B[idx] op e` with `op` in `+ min max`, `idx`
///   independent of the lane and `B[idx]` the left operand, becomes
///   `B[idx] = B[idx] op vector_reduce_op(e, 1)` (exact: wrapping `+`, `min` and `max` are
///   associative and commutative);
/// * a `Vectorized` loop over `k` (extent `m`) nested directly in this one (over `j`, extent `n`)
///   whose body is lets and one such integer reduction with `idx` independent of `k` joins it in
///   one lane space of `n*m` lanes, lane `j*m + k`: `B[idx] = B[idx] op vector_reduce_op(e, n)`
///   with `idx` a vector over `j` (or a scalar, reducing to 1 lane) and `e` over `j` and `k`.
///   Index expressions there are affine in `j` and `k` and print as `ramp(base, s, n*m)` when
///   `j`'s stride is `m` times `k`'s (as for a packed operand), otherwise as
///   `broadcast(base, n*m) + ramp(0, 1, n*m)/broadcast(m, n*m)*broadcast(s_j, n*m) +
///   ramp(0, 1, n*m)%broadcast(m, n*m)*broadcast(s_k, n*m)` (terms with a zero stride left out).
///   So the u8×i8 matmul update with `j.inner` and `k.inner` vectorized becomes
///   `C[ramp(c, 1, 4)] = C[ramp(c, 1, 4)] + vector_reduce_add(i32x16(A[..])*i32x16(B[..]), 4)`,
///   the VPDPBUSD shape. Exact because for each `j` the reduction over `k` only reassociates,
///   and `e` may not read a buffer the body stores to (checked with the accesses below);
/// * such a nested loop whose body is lets and one store that is not a reduction, at an index
///   that depends on the lanes, joins it the same way: one vector store over the `n*m` lanes
///   (a packing of `B` writing `Bp[ramp(base, 1, n*m)]` from `B[.. + j + k*N]`), under the
///   same check of lane-disjoint accesses as any store, over the `n*m` lanes;
///
/// Vectorizing runs the lanes of each statement together instead of one lane after another, so
/// it is applied only when that cannot change results: every buffer the body stores to must
/// either be touched only by one such reduction, or be accessed, in some dimension, only through
/// `ramp(base, s, n)` with one constant `s != 0`, bases that agree on their loop-invariant terms,
/// and loop-varying parts proven (`separates_lanes`) never to map two lanes to one element. So
/// `C[ramp(i*48 + j.outer*8, 1, 8)]` inside a reduction loop qualifies, as do `C[ramp(j, 8, 4)]`
/// for an inner `j` in `0..8` and `C[ramp(k*8, 1, 8)]` for any inner `k`.
///
/// Everything else falls back to a `Serial` loop (vectorized loops inside are still
/// vectorized): an `If` whose condition depends on the lane (such as the tail guard of a split
/// that does not divide the extent), an `Allocate`, an intrinsic `Call` (its fallback is still
/// vectorized), a `Parallel` loop, a nested `Vectorized` loop that is not such a reduction, a
/// lane-invariant store that is not such a reduction, float reductions (reassociation changes
/// rounding), accesses it cannot prove lane-disjoint, extents below 2 or above `u16::MAX`, and
/// bodies already holding vectors.
///
/// Does not simplify (run `simplify` afterwards) or check bounds.
pub fn vectorize_loops(func: &Func) -> Func {
    let body = VectorizeLoops.mutate_stmt(&func.body);
    Func { name: func.name.clone(), params: func.params.clone(), body }
}

struct VectorizeLoops;

impl Mutator for VectorizeLoops {
    fn mutate_stmt(&mut self, stmt: &Stmt) -> Stmt {
        let StmtKind::For { var, extent, kind: ForKind::Vectorized, body } = stmt.kind() else {
            return walk_stmt(self, stmt);
        };
        if let Some(lanes) = u16::try_from(*extent).ok().filter(|n| *n >= 2) {
            let mut v = Vectorizer {
                lanes,
                inner: 1,
                map: HashMap::from_iter([(var.clone(), lane_ramp(lanes))]),
                affine: HashMap::default(),
                reductions: Vec::new(),
                joint: Vec::new(),
            };
            if let Some(vector_body) = v.stmt(body)
                && lanes_independent(&vector_body, lanes, &v.reductions, &v.joint)
            {
                return vector_body;
            }
        }
        Stmt::for_loop(var.clone(), *extent, ForKind::Serial, self.mutate_stmt(body))
    }
}

fn lane_ramp(lanes: u16) -> Expr {
    Expr::ramp(Expr::index(0), Expr::index(1), lanes)
}

struct Vectorizer {
    lanes: u16,
    /// 1 for one vectorized loop. For a nested reduction (see `vectorize_loops`), the inner
    /// loop's extent: lane `l` is outer lane `l / inner` and inner lane `l % inner`.
    inner: u16,
    /// The lane variables and vector-valued lets, to their vector replacements.
    map: HashMap<Var, Expr>,
    /// With two lane variables, the index variables among `map` as affine forms of the lane.
    affine: HashMap<Var, Affine>,
    /// Buffers written by a reduction over the lanes.
    reductions: Vec<Buffer>,
    /// Buffers stored by a nested store, with the lanes of its two lane spaces: every access to
    /// them must be over those lanes.
    joint: Vec<(Buffer, u16)>,
}

/// The index `base + outer_stride * (l / inner) + inner_stride * (l % inner)` in lane `l` of a
/// lane space of two loops (`inner` = `Vectorizer::inner`); `base` is lane-invariant.
#[derive(Clone)]
struct Affine {
    base: Expr,
    outer_stride: i64,
    inner_stride: i64,
}

impl Vectorizer {
    /// `e` widened lane-wise: a scalar if it does not depend on the lane (then `e` itself), else a
    /// vector of `self.lanes`. `None` if `e` cannot be vectorized.
    fn expr(&mut self, e: &Expr) -> Option<Expr> {
        if e.dtype().is_vector() {
            return None;
        }
        if let Some(a) = self.lane_affine(e) {
            return Some(self.materialize(&a));
        }
        let children: Vec<Expr> = e.children().into_iter().map(|c| self.expr(c)).collect::<Option<_>>()?;
        if e.children().iter().zip(&children).all(|(a, b)| a.same_node(b)) {
            return match e.kind() {
                ExprKind::Var(v) => Some(self.map.get(v).cloned().unwrap_or_else(|| e.clone())),
                ExprKind::TensorRead(..) | ExprKind::Reduce(_) => None,
                _ => Some(e.clone()),
            };
        }
        let lanes = self.lanes;
        let uniform = |x: &Expr| match x.kind() {
            ExprKind::Broadcast(v) => Some(v.clone()),
            _ if x.dtype().is_scalar() => Some(x.clone()),
            _ => None,
        };
        Some(match e.kind() {
            ExprKind::Binary(op, ..) => lanewise::binary(*op, &children[0], &children[1], &mut lanewise::fold),
            ExprKind::Not(_)
            | ExprKind::Cast(_)
            | ExprKind::SaturatingCast(_)
            | ExprKind::Round(_)
            | ExprKind::Sqrt(_)
            | ExprKind::Reinterpret(_)
            | ExprKind::Cmp(..)
            | ExprKind::Fma(..)
            | ExprKind::Select(..) => {
                match children.iter().map(uniform).collect::<Option<Vec<Expr>>>() {
                    // All operands the same in every lane: compute once and broadcast.
                    Some(scalars) => Expr::broadcast(rebuild_expr(e, scalars), lanes),
                    None => {
                        let mut widened: Vec<Expr> = children.iter().map(|c| lanewise::widen(c, lanes)).collect();
                        if let ExprKind::Select(..) = e.kind() {
                            // A scalar condition may select between vectors.
                            widened[0] = children[0].clone();
                        }
                        rebuild_expr(e, widened)
                    }
                }
            }
            ExprKind::Load(buffer, _) => Expr::load(buffer, children),
            _ => return None,
        })
    }

    fn stmt(&mut self, s: &Stmt) -> Option<Stmt> {
        if self.inner > 1 && !matches!(s.kind(), StmtKind::Let { .. } | StmtKind::Store { .. }) {
            // Two lane spaces hold only the inner loop's lets and its reduction.
            return None;
        }
        match s.kind() {
            StmtKind::Store { buffer, indices, value } if self.inner > 1 => {
                match as_reduction(buffer, indices, value) {
                    Some(_) => self.nested_reduction_store(buffer, indices, value),
                    None => self.nested_store(buffer, indices, value),
                }
            }
            StmtKind::Store { buffer, indices, value } => {
                let new_indices: Vec<Expr> = indices.iter().map(|i| self.expr(i)).collect::<Option<_>>()?;
                if new_indices.iter().any(|i| i.dtype().is_vector()) {
                    let new_value = lanewise::widen(&self.expr(value)?, self.lanes);
                    return Some(Stmt::store(buffer, new_indices, new_value));
                }
                self.reduction(buffer, indices, value)
            }
            StmtKind::Let { var, value, body } => {
                if let Some(a) = self.lane_affine(value) {
                    // Substituted as an affine form, so accesses through it keep their shape.
                    self.bind_affine(var, a);
                    let new_body = self.stmt(body);
                    self.map.remove(var);
                    self.affine.remove(var);
                    return new_body;
                }
                let new_value = self.expr(value)?;
                if new_value.dtype().is_scalar() {
                    return Some(Stmt::let_stmt(var.clone(), new_value, self.stmt(body)?));
                }
                if matches!(new_value.kind(), ExprKind::Ramp(..) | ExprKind::Broadcast(_)) {
                    self.map.insert(var.clone(), new_value);
                    let new_body = self.stmt(body);
                    self.map.remove(var);
                    return new_body;
                }
                let vector_var = Var::new(var.name(), new_value.dtype());
                self.map.insert(var.clone(), vector_var.to_expr());
                let new_body = self.stmt(body);
                self.map.remove(var);
                Some(Stmt::let_stmt(vector_var, new_value, new_body?))
            }
            StmtKind::For { var, extent, kind, body } => match kind {
                ForKind::Serial | ForKind::Unrolled => {
                    Some(Stmt::for_loop(var.clone(), *extent, *kind, self.stmt(body)?))
                }
                ForKind::Vectorized => self.nested_reduction(var, *extent, body),
                ForKind::Parallel => None,
            },
            StmtKind::If { cond, then_case, else_case } => {
                let new_cond = self.expr(cond)?;
                if new_cond.dtype().is_vector() {
                    return None;
                }
                let then_case = self.stmt(then_case)?;
                let else_case = match else_case {
                    Some(e) => Some(self.stmt(e)?),
                    None => None,
                };
                Some(Stmt::new(StmtKind::If { cond: new_cond, then_case, else_case }))
            }
            StmtKind::Seq(stmts) => Some(Stmt::seq(stmts.iter().map(|s| self.stmt(s)).collect::<Option<_>>()?)),
            // Every lane is checked before the statements after it run in any lane; on failure
            // the function stops either way, so only which partial results it left can differ.
            StmtKind::BoundsCheck { cond, buffer } => Some(Stmt::bounds_check(self.expr(cond)?, buffer)),
            StmtKind::Allocate { .. } | StmtKind::Call { .. } => None,
        }
    }

    /// A lane-invariant store: only `B[idx] = B[idx] op e` on integers is vectorizable.
    fn reduction(&mut self, buffer: &Buffer, indices: &[Expr], value: &Expr) -> Option<Stmt> {
        let (op, reduce_op, e) = as_reduction(buffer, indices, value)?;
        let lanes_of_e = lanewise::widen(&self.expr(e)?, self.lanes);
        self.reductions.push(buffer.clone());
        let reduced = Expr::vector_reduce(reduce_op, lanes_of_e, 1);
        Some(Stmt::store(buffer, indices.to_vec(), Expr::binary(op, Expr::load(buffer, indices.to_vec()), reduced)))
    }

    /// The `Vectorized` loop `var` inside this one, vectorized together with it when its body is
    /// lets and a reduction over `var` or a store over both lanes (see `vectorize_loops`).
    fn nested_reduction(&mut self, var: &Var, extent: i64, body: &Stmt) -> Option<Stmt> {
        let inner = u16::try_from(extent).ok().filter(|n| *n >= 2 && self.inner == 1)?;
        let lanes = self.lanes.checked_mul(inner)?;
        let mut v = Vectorizer {
            lanes,
            inner,
            map: HashMap::default(),
            affine: HashMap::default(),
            reductions: Vec::new(),
            joint: Vec::new(),
        };
        for (outer_var, value) in &self.map {
            match value.kind() {
                ExprKind::Ramp(base, stride) if value.dtype().element() == DType::INDEX => {
                    let a = Affine { base: base.clone(), outer_stride: stride.as_int()?, inner_stride: 0 };
                    v.bind_affine(outer_var, a);
                }
                ExprKind::Broadcast(x) => {
                    v.map.insert(outer_var.clone(), Expr::broadcast(x.clone(), lanes));
                }
                // A vector variable of the outer lanes cannot be spread over the inner ones.
                _ => return None,
            }
        }
        v.bind_affine(var, Affine { base: Expr::index(0), outer_stride: 0, inner_stride: 1 });
        let vector_body = v.stmt(body)?;
        self.reductions.extend(v.reductions);
        self.joint.extend(v.joint);
        Some(vector_body)
    }

    /// The reduction of a nested loop, `B[idx] = B[idx] op e` with `idx` independent of the
    /// inner lanes: `e` is reduced over them, into one lane per outer lane if `idx` depends on
    /// the outer lanes, else into one lane.
    fn nested_reduction_store(&mut self, buffer: &Buffer, indices: &[Expr], value: &Expr) -> Option<Stmt> {
        let (op, reduce_op, e) = as_reduction(buffer, indices, value)?;
        let outer_lanes = self.lanes / self.inner;
        let new_indices: Vec<Expr> = indices.iter().map(|i| self.outer_index(i, outer_lanes)).collect::<Option<_>>()?;
        let out_lanes = if new_indices.iter().any(|i| i.dtype().is_vector()) { outer_lanes } else { 1 };
        if out_lanes == 1 {
            self.reductions.push(buffer.clone());
        }
        let lanes_of_e = lanewise::widen(&self.expr(e)?, self.lanes);
        let reduced = Expr::vector_reduce(reduce_op, lanes_of_e, out_lanes);
        let acc = Expr::load(buffer, new_indices.clone());
        Some(Stmt::store(buffer, new_indices, Expr::binary(op, acc, reduced)))
    }

    /// A store of every lane of two lane spaces to its own element (`nested_store` in
    /// `vectorize_loops`): an index affine in both lanes, as a vector over all of them; whether
    /// two lanes meet one element is left to `lanes_independent`.
    fn nested_store(&mut self, buffer: &Buffer, indices: &[Expr], value: &Expr) -> Option<Stmt> {
        let new_indices: Vec<Expr> = indices.iter().map(|i| self.expr(i)).collect::<Option<_>>()?;
        if !new_indices.iter().any(|i| i.dtype().is_vector()) {
            return None;
        }
        let new_value = lanewise::widen(&self.expr(value)?, self.lanes);
        self.joint.push((buffer.clone(), self.lanes));
        Some(Stmt::store(buffer, new_indices, new_value))
    }

    /// An index of a nested reduction's element over the outer lanes: lane-invariant, or
    /// `ramp(base, s, outer_lanes)`; `None` if it depends on the inner lanes.
    fn outer_index(&self, index: &Expr, outer_lanes: u16) -> Option<Expr> {
        if !self.uses_lanes(index) {
            return Some(index.clone());
        }
        match self.affine_of(index)? {
            Affine { base, outer_stride: 0, inner_stride: 0 } => Some(base),
            Affine { base, outer_stride, inner_stride: 0 } => {
                Some(Expr::ramp(base, Expr::index(outer_stride), outer_lanes))
            }
            _ => None,
        }
    }

    fn uses_lanes(&self, e: &Expr) -> bool {
        self.map.keys().any(|v| e.uses_var(v))
    }

    /// In a lane space of two loops, a lane-dependent index `e` as an affine form, if it is one.
    fn lane_affine(&self, e: &Expr) -> Option<Affine> {
        if self.inner == 1 || e.dtype() != DType::INDEX || !self.uses_lanes(e) {
            return None;
        }
        self.affine_of(e)
    }

    /// `e` as an affine form: a linear combination of lane-invariant terms and affine
    /// variables.
    fn affine_of(&self, e: &Expr) -> Option<Affine> {
        let lin = Linear::of(e);
        let mut base = Linear { terms: Vec::new(), constant: lin.constant };
        let (mut outer_stride, mut inner_stride) = (0i64, 0i64);
        for (term, c) in &lin.terms {
            if let Some(a) = term.as_var().and_then(|v| self.affine.get(v)) {
                base.add(&a.base, *c);
                outer_stride = outer_stride.wrapping_add(c.wrapping_mul(a.outer_stride));
                inner_stride = inner_stride.wrapping_add(c.wrapping_mul(a.inner_stride));
            } else if self.uses_lanes(term) {
                return None;
            } else {
                base.add_term(term.clone(), *c);
            }
        }
        Some(Affine { base: base.to_expr(), outer_stride, inner_stride })
    }

    /// The vector of an affine form's lanes.
    fn materialize(&self, a: &Affine) -> Expr {
        let (n, inner) = (self.lanes, self.inner as i64);
        if a.outer_stride == a.inner_stride.wrapping_mul(inner) {
            return lanewise::ramp(a.base.clone(), Expr::index(a.inner_stride), n);
        }
        let splat = |v: i64| Expr::broadcast(Expr::index(v), n);
        let scaled = |x: Expr, s: i64| if s == 1 { x } else { x * splat(s) };
        let lane = lane_ramp(n);
        let parts = [
            (a.base.as_int() != Some(0)).then(|| Expr::broadcast(a.base.clone(), n)),
            (a.outer_stride != 0).then(|| scaled(lane.clone() / splat(inner), a.outer_stride)),
            (a.inner_stride != 0).then(|| scaled(lane.clone() % splat(inner), a.inner_stride)),
        ];
        parts.into_iter().flatten().reduce(|acc, t| acc + t).expect("the strides differ, so one is not zero")
    }

    fn bind_affine(&mut self, var: &Var, a: Affine) {
        self.map.insert(var.clone(), self.materialize(&a));
        self.affine.insert(var.clone(), a);
    }
}

/// `(op, reduce_op, e)` if `value`, stored to `buffer[indices]`, is the integer reduction
/// `buffer[indices] op e` with `op` in `+ min max`.
fn as_reduction<'a>(buffer: &Buffer, indices: &[Expr], value: &'a Expr) -> Option<(BinOp, VectorReduceOp, &'a Expr)> {
    let ExprKind::Binary(op, lhs, e) = value.kind() else {
        return None;
    };
    let reduce_op = match op {
        BinOp::Add => VectorReduceOp::Add,
        BinOp::Min => VectorReduceOp::Min,
        BinOp::Max => VectorReduceOp::Max,
        _ => return None,
    };
    let ExprKind::Load(loaded, load_indices) = lhs.kind() else {
        return None;
    };
    let same_element = loaded == buffer
        && load_indices.len() == indices.len()
        && load_indices.iter().zip(indices).all(|(a, b)| a.structurally_eq(b));
    (same_element && buffer.dtype().is_int()).then_some((*op, reduce_op, e))
}

/// True if no two lanes of a vectorized body can touch one element of a buffer the body stores
/// to (see `vectorize_loops`), so running lanes together equals running them in order.
fn lanes_independent(body: &Stmt, lanes: u16, reductions: &[Buffer], joint: &[(Buffer, u16)]) -> bool {
    // Variables whose value changes while the vectorized loop runs (inner loop counters, vector
    // lets, and lets computed from them), with their ranges. Variables are bound once, so one
    // flat scope serves the whole body.
    let mut varying: HashSet<Var> = HashSet::default();
    let mut scope = Scope::new();
    for_each_stmt(body, &mut |s| match s.kind() {
        StmtKind::For { var, extent, .. } => {
            scope.push(var, Interval::of_extent(*extent));
            varying.insert(var.clone());
        }
        StmtKind::Let { var, value, .. } if value.dtype().is_vector() || varying.iter().any(|v| value.uses_var(v)) => {
            scope.push(var, bounds_of(value, &scope));
            varying.insert(var.clone());
        }
        _ => {}
    });
    let mut stored: Vec<Buffer> = Vec::new();
    let mut accesses: Vec<(Buffer, Vec<Expr>)> = Vec::new();
    for_each_stmt(body, &mut |s| {
        if let StmtKind::Store { buffer, indices, .. } = s.kind() {
            if !stored.contains(buffer) {
                stored.push(buffer.clone());
            }
            accesses.push((buffer.clone(), indices.clone()));
        }
    });
    for_each_stmt_expr(body, &mut |e| {
        e.for_each(&mut |n| {
            if let ExprKind::Load(buffer, indices) = n.kind() {
                accesses.push((buffer.clone(), indices.clone()));
            }
        })
    });
    stored.iter().all(|buffer| {
        let of_buffer: Vec<&Vec<Expr>> = accesses.iter().filter(|(b, _)| b == buffer).map(|(_, i)| i).collect();
        if reductions.contains(buffer) {
            // The reduction's store and its own load of `B[idx]`, nothing else.
            return of_buffer.len() == 2 && reductions.iter().filter(|b| *b == buffer).count() == 1;
        }
        // A nested store's buffer: lanes of both loops (one count for all its stores).
        let joint_lanes: Vec<u16> = joint.iter().filter(|(b, _)| b == buffer).map(|(_, n)| *n).collect();
        let lanes = match joint_lanes[..] {
            [] => lanes,
            [n, ..] if joint_lanes.iter().all(|&m| m == n) => n,
            _ => return false,
        };
        let dims = of_buffer[0].len();
        of_buffer.iter().all(|idx| idx.len() == dims)
            && (0..dims).any(|d| separates_lanes(of_buffer.iter().map(|idx| &idx[d]), lanes, &varying, &scope))
    })
}

/// True if the indices (one dimension of every access to one buffer) differ between any two
/// lanes, whatever values the varying variables take.
///
/// Every index must be `ramp(base, s, n)` (`n` = `lanes`) with one constant `s != 0`. Each base
/// is split into a loop-invariant part (the same for all accesses), terms whose coefficient is a
/// multiple of `|s| * n`, and a rest. Lane `l` of one access and lane `l' != l` of another can then only meet
/// if the rests differ by a non-zero multiple of `s` below `|s| * n`, which cannot happen when all
/// rests lie within a range narrower than `|s|`.
fn separates_lanes<'a>(
    indices: impl Iterator<Item = &'a Expr>,
    lanes: u16,
    varying: &HashSet<Var>,
    scope: &Scope,
) -> bool {
    let mut stride: Option<i64> = None;
    let mut invariant: Option<Linear> = None;
    let mut rests = Interval::new(i128::MAX, i128::MIN);
    for index in indices {
        let ExprKind::Ramp(base, s) = index.kind() else {
            return false;
        };
        if index.dtype().lanes != lanes {
            // A nested reduction's operand: its lane `l` is not the loop's lane `l`.
            return false;
        }
        let s = match s.as_int() {
            Some(s) if s != 0 && stride.is_none_or(|first| first == s) => s,
            _ => return false,
        };
        stride = Some(s);
        let period = (s as i128).abs() * lanes as i128;
        let (mut fixed, mut rest) = (Linear::default(), Linear::default());
        let lin = Linear::of(base);
        rest.constant = lin.constant;
        for (term, coeff) in lin.terms {
            if !varying.iter().any(|v| term.uses_var(v)) {
                fixed.add_term(term, coeff);
            } else if coeff as i128 % period != 0 {
                rest.add_term(term, coeff);
            }
        }
        if invariant.get_or_insert_with(|| fixed.clone()).same_as(&fixed) {
            rests = rests.union(bounds_of(&rest.to_expr(), scope));
        } else {
            return false;
        }
    }
    match (stride, rests.min, rests.max) {
        (Some(s), Some(lo), Some(hi)) => hi - lo < (s as i128).abs(),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtype::DType;
    use crate::expr::{max, select};
    use crate::passes::testing::assert_same_results;

    fn check(f: &Func, want: &str) {
        let v = vectorize_loops(f);
        assert_eq!(format!("{v}"), want);
        assert_same_results(f, &v);
    }

    #[test]
    fn elementwise_loop_becomes_contiguous_vectors() {
        let a = Buffer::new("A", DType::F32, vec![16, 32]);
        let b = Buffer::new("B", DType::F32, vec![32]);
        let c = Buffer::new("C", DType::F32, vec![16, 32]);
        let (i, jo, ji, j) = (Var::index("i"), Var::index("j.outer"), Var::index("j.inner"), Var::index("j"));
        let value = Expr::load(&a, vec![i.to_expr(), j.to_expr()]) * Expr::load(&b, vec![j.to_expr()])
            + Expr::load(&a, vec![i.to_expr(), Expr::index(0)]);
        let body = Stmt::let_stmt(
            j.clone(),
            jo.to_expr() * 8 + ji.to_expr(),
            Stmt::store(&c, vec![i.to_expr(), j.to_expr()], value),
        );
        let nest = Stmt::for_loop(
            i.clone(),
            16,
            ForKind::Parallel,
            Stmt::for_loop(jo.clone(), 4, ForKind::Serial, Stmt::for_loop(ji.clone(), 8, ForKind::Vectorized, body)),
        );
        let f = Func { name: "f".into(), params: vec![a, b, c], body: nest };
        check(
            &f,
            "func f(A: f32[16, 32], B: f32[32], C: f32[16, 32]) {
  parallel i in 0..16 {
    for j.outer in 0..4 {
      C[i, ramp(j.outer*8, 1, 8)] = A[i, ramp(j.outer*8, 1, 8)]*B[ramp(j.outer*8, 1, 8)] + broadcast(A[i, 0], 8)
    }
  }
}
",
        );
    }

    #[test]
    fn inner_serial_loops_stay_loops_and_vector_lets_get_vector_vars() {
        // C[i] = max over k of (A[k, i] * 2), vectorized over i, with an accumulator let.
        let a = Buffer::new("A", DType::I32, vec![3, 8]);
        let c = Buffer::new("C", DType::I32, vec![8]);
        let (i, k, t) = (Var::index("i"), Var::index("k"), Var::new("t", DType::I32));
        let init = Stmt::store(&c, vec![i.to_expr()], Expr::int(DType::I32, i32::MIN as i64));
        let update = Stmt::let_stmt(
            t.clone(),
            Expr::load(&a, vec![k.to_expr(), i.to_expr()]) * Expr::int(DType::I32, 2),
            Stmt::store(&c, vec![i.to_expr()], max(Expr::load(&c, vec![i.to_expr()]), t.to_expr())),
        );
        let body = Stmt::seq(vec![init, Stmt::for_loop(k.clone(), 3, ForKind::Serial, update)]);
        let f = Func { name: "f".into(), params: vec![a, c], body: Stmt::for_loop(i, 8, ForKind::Vectorized, body) };
        check(
            &f,
            "func f(A: i32[3, 8], C: i32[8]) {
  C[ramp(0, 1, 8)] = broadcast(-2147483648i32, 8)
  for k in 0..3 {
    let t = A[k, ramp(0, 1, 8)]*broadcast(2i32, 8)
    C[ramp(0, 1, 8)] = max(C[ramp(0, 1, 8)], t)
  }
}
",
        );
    }

    #[test]
    fn integer_reduction_over_the_lanes() {
        let a = Buffer::new("A", DType::I32, vec![4, 16]);
        let s = Buffer::new("S", DType::I32, vec![4]);
        let (i, k) = (Var::index("i"), Var::index("k"));
        let update = Stmt::store(
            &s,
            vec![i.to_expr()],
            Expr::load(&s, vec![i.to_expr()]) + Expr::load(&a, vec![i.to_expr(), k.to_expr()]),
        );
        let body = Stmt::for_loop(k.clone(), 16, ForKind::Vectorized, update);
        let f =
            Func { name: "f".into(), params: vec![a, s], body: Stmt::for_loop(i.clone(), 4, ForKind::Serial, body) };
        check(
            &f,
            "func f(A: i32[4, 16], S: i32[4]) {
  for i in 0..4 {
    S[i] = S[i] + vector_reduce_add(A[i, ramp(0, 1, 16)], 1)
  }
}
",
        );
    }

    #[test]
    fn what_cannot_be_vectorized_exactly_runs_serially() {
        let a = Buffer::new("A", DType::F32, vec![8]);
        let s = Buffer::new("S", DType::F32, vec![1]);
        let i = Var::index("i");
        let ie = i.to_expr();
        let zero = Expr::index(0);
        let serial = |body: Stmt| Stmt::for_loop(i.clone(), 8, ForKind::Vectorized, body);
        let cases = vec![
            // Float reduction: reassociation would change rounding.
            serial(Stmt::store(
                &s,
                vec![zero.clone()],
                Expr::load(&s, vec![zero.clone()]) + Expr::load(&a, vec![ie.clone()]),
            )),
            // Lane-dependent condition.
            serial(Stmt::if_then(ie.lt(3), Stmt::store(&a, vec![ie.clone()], Expr::float(DType::F32, 1.0)))),
            // Lanes read what other lanes write.
            serial(Stmt::store(
                &a,
                vec![ie.clone()],
                Expr::load(&a, vec![select(ie.gt(0), ie.clone() - 1, zero.clone())]),
            )),
            // Last lane wins.
            serial(Stmt::store(&s, vec![zero.clone()], Expr::load(&a, vec![ie.clone()]))),
        ];
        for body in cases {
            let f = Func { name: "f".into(), params: vec![a.clone(), s.clone()], body };
            let v = vectorize_loops(&f);
            let StmtKind::For { kind, body, .. } = v.body.kind() else { panic!("expected a loop:\n{v}") };
            assert_eq!(*kind, ForKind::Serial);
            assert!(!format!("{body}").contains("ramp"), "{v}");
            assert_same_results(&f, &v);
        }
    }

    #[test]
    fn flat_accesses_inside_inner_loops_are_proven_lane_disjoint() {
        let a = Buffer::new("A", DType::I32, vec![32]);
        let c = Buffer::new("C", DType::I32, vec![32]);
        let (i, j) = (Var::index("i"), Var::index("j"));
        let one = Expr::int(DType::I32, 1);
        // Lane i owns elements i*8 .. i*8+7: the inner offset j spans less than the stride 8.
        let rows = |stride: i64| {
            let idx = i.to_expr() * stride + j.to_expr();
            let store =
                Stmt::store(&c, vec![idx.clone()], Expr::load(&c, vec![idx.clone()]) + Expr::load(&a, vec![idx]));
            let inner = Stmt::for_loop(j.clone(), 8, ForKind::Serial, Stmt::seq(vec![store.clone(), store]));
            Func {
                name: "f".into(),
                params: vec![a.clone(), c.clone()],
                body: Stmt::for_loop(i.clone(), 4, ForKind::Vectorized, inner),
            }
        };
        check(
            &rows(8),
            "func f(A: i32[32], C: i32[32]) {
  for j in 0..8 {
    C[ramp(j, 8, 4)] = C[ramp(j, 8, 4)] + A[ramp(j, 8, 4)]
    C[ramp(j, 8, 4)] = C[ramp(j, 8, 4)] + A[ramp(j, 8, 4)]
  }
}
",
        );
        // With stride 4, lane 1 at j = 0 meets lane 0 at j = 4: serial.
        let overlapping = rows(4);
        let v = vectorize_loops(&overlapping);
        assert!(!format!("{v}").contains("ramp"), "{v}");
        assert_same_results(&overlapping, &v);
        // The boundary: offsets 0..=2 and stride 2, so lane 1 at j = 0 meets lane 0 at j = 2, and
        // the last writer of C[2] must stay lane 1.
        let last_writer = Stmt::store(&c, vec![i.to_expr() * 2 + j.to_expr()], j.to_expr().cast(DType::I32));
        let nest = Stmt::for_loop(
            i.clone(),
            4,
            ForKind::Vectorized,
            Stmt::for_loop(j.clone(), 3, ForKind::Serial, last_writer),
        );
        let f = Func { name: "f".into(), params: vec![a.clone(), c.clone()], body: nest };
        let v = vectorize_loops(&f);
        assert!(!format!("{v}").contains("ramp"), "{v}");
        assert_same_results(&f, &v);
        // Lane j owns column j of every row k: the row offset k*8 is a multiple of 8 lanes * 1.
        let (k, jj) = (Var::index("k"), Var::index("jj"));
        let idx = k.to_expr() * 8 + jj.to_expr();
        let store = Stmt::store(&c, vec![idx.clone()], Expr::load(&a, vec![idx]) + one);
        let columns = Stmt::for_loop(jj, 8, ForKind::Vectorized, Stmt::for_loop(k, 4, ForKind::Serial, store));
        check(
            &Func { name: "f".into(), params: vec![a.clone(), c.clone()], body: columns },
            "func f(A: i32[32], C: i32[32]) {
  for k in 0..4 {
    C[ramp(k*8, 1, 8)] = A[ramp(k*8, 1, 8)] + broadcast(1i32, 8)
  }
}
",
        );
    }

    #[test]
    fn nested_vectorized_loops_vectorize_the_inner_one() {
        let a = Buffer::new("A", DType::U8, vec![4, 8]);
        let (i, j) = (Var::index("i"), Var::index("j"));
        let store = Stmt::store(
            &a,
            vec![i.to_expr(), j.to_expr()],
            Expr::load(&a, vec![i.to_expr(), j.to_expr()]) + (i.to_expr() + j.to_expr()).cast(DType::U8),
        );
        let nest =
            Stmt::for_loop(i.clone(), 4, ForKind::Vectorized, Stmt::for_loop(j.clone(), 8, ForKind::Vectorized, store));
        let f = Func { name: "f".into(), params: vec![a], body: nest };
        check(
            &f,
            "func f(A: u8[4, 8]) {
  for i in 0..4 {
    A[i, ramp(0, 1, 8)] = A[i, ramp(0, 1, 8)] + u8x8(ramp(i, 1, 8))
  }
}
",
        );
    }

    /// Builds the update of `C` from `C`, the index `i*8 + j`, the product and `k`.
    type Update = dyn Fn(&Buffer, Expr, Expr, Expr) -> Stmt;

    /// `C[i, j] += Σ_k i32(A[i, k]) * i32(B[j*k_stride + k])` over flat `A: u8[2*12]`,
    /// `B: i8[8*12]` (`B` packed 4 `k` per column when `packed`), `C: i32[2*8]`, as lowering
    /// produces it for `split(j, 4)`, `split(k, 4)`, order `i, j.outer, k.outer, j.inner,
    /// k.inner` with both inner loops vectorized.
    fn dot_nest(packed: bool, store: &Update) -> Func {
        let a = Buffer::new("A", DType::U8, vec![24]);
        let b = Buffer::new("B", DType::I8, vec![96]);
        let c = Buffer::new("C", DType::I32, vec![16]);
        let names = ["i", "j.outer", "k.outer", "j.inner", "k.inner", "j", "k"];
        let [i, jo, ko, ji, ki, j, k] = names.map(Var::index);
        // Packed: the 4 `k` of each `j` are adjacent, 4 columns per `k.outer` block of 16.
        let b_index =
            if packed { ko.to_expr() * 32 + j.to_expr() * 4 + ki.to_expr() } else { j.to_expr() * 12 + k.to_expr() };
        let product = Expr::load(&a, vec![i.to_expr() * 12 + k.to_expr()]).cast(DType::I32)
            * Expr::load(&b, vec![b_index]).cast(DType::I32);
        let update = store(&c, i.to_expr() * 8 + j.to_expr(), product, k.to_expr());
        let update = Stmt::let_stmt(k, ko.to_expr() * 4 + ki.to_expr(), update);
        let lanes = Stmt::for_loop(ki, 4, ForKind::Vectorized, update);
        let lanes = Stmt::for_loop(
            ji.clone(),
            4,
            ForKind::Vectorized,
            Stmt::let_stmt(j, jo.to_expr() * 4 + ji.to_expr(), lanes),
        );
        let nest = Stmt::for_loop(jo, 2, ForKind::Serial, Stmt::for_loop(ko, 3, ForKind::Serial, lanes));
        Func { name: "f".into(), params: vec![a, b, c], body: Stmt::for_loop(i, 2, ForKind::Serial, nest) }
    }

    fn accumulate(c: &Buffer, index: Expr, value: Expr, _: Expr) -> Stmt {
        Stmt::store(c, vec![index.clone()], Expr::load(c, vec![index]) + value)
    }

    #[test]
    fn a_nested_reduction_joins_the_outer_lanes() {
        check(
            &dot_nest(false, &accumulate),
            "func f(A: u8[24], B: i8[96], C: i32[16]) {
  for i in 0..2 {
    for j.outer in 0..2 {
      for k.outer in 0..3 {
        C[ramp(i*8 + j.outer*4, 1, 4)] = C[ramp(i*8 + j.outer*4, 1, 4)] + vector_reduce_add(i32x16(A[broadcast(i*12 + k.outer*4, 16) + ramp(0, 1, 16)%broadcast(4, 16)])*i32x16(B[broadcast(j.outer*48 + k.outer*4, 16) + ramp(0, 1, 16)/broadcast(4, 16)*broadcast(12, 16) + ramp(0, 1, 16)%broadcast(4, 16)]), 4)
      }
    }
  }
}
",
        );
        // Packed, lane `j*4 + k` of B is element `j*4 + k` of the block: one contiguous ramp.
        check(
            &dot_nest(true, &accumulate),
            "func f(A: u8[24], B: i8[96], C: i32[16]) {
  for i in 0..2 {
    for j.outer in 0..2 {
      for k.outer in 0..3 {
        C[ramp(i*8 + j.outer*4, 1, 4)] = C[ramp(i*8 + j.outer*4, 1, 4)] + vector_reduce_add(i32x16(A[broadcast(i*12 + k.outer*4, 16) + ramp(0, 1, 16)%broadcast(4, 16)])*i32x16(B[ramp(k.outer*32 + j.outer*16, 1, 16)]), 4)
      }
    }
  }
}
",
        );
        // An element independent of both lanes reduces all 16 lanes into one.
        let total = |c: &Buffer, index: Expr, value: Expr, k| accumulate(c, index.clone() - index + 3, value, k);
        check(
            &dot_nest(true, &total),
            "func f(A: u8[24], B: i8[96], C: i32[16]) {
  for i in 0..2 {
    for j.outer in 0..2 {
      for k.outer in 0..3 {
        C[3] = C[3] + vector_reduce_add(i32x16(A[broadcast(i*12 + k.outer*4, 16) + ramp(0, 1, 16)%broadcast(4, 16)])*i32x16(B[ramp(k.outer*32 + j.outer*16, 1, 16)]), 1)
      }
    }
  }
}
",
        );
    }

    #[test]
    fn nested_loops_that_are_not_such_a_reduction_run_the_outer_one_serially() {
        let max_update = |c: &Buffer, index: Expr, value: Expr, _| {
            Stmt::store(c, vec![index.clone()], max(Expr::load(c, vec![index]), value))
        };
        let cases: Vec<(&str, &Update)> = vec![
            // The element depends on the inner lane: no reduction.
            ("C[(i*8 + j + k % 2) % 16]", &|c, index, value, k| accumulate(c, (index + k.clone() % 2) % 16, value, k)),
            // The reduction reads its own buffer.
            ("C[(i*8 + j + 1) % 16]", &|c, index, value, k| {
                let other = Expr::load(c, vec![(index.clone() + 1) % 16]);
                accumulate(c, index, value + other, k)
            }),
            // Not the accumulator on the left.
            ("value + C[..]", &|c, index, value, _| {
                Stmt::store(c, vec![index.clone()], value + Expr::load(c, vec![index]))
            }),
        ];
        for (what, store) in cases {
            let f = dot_nest(false, store);
            let v = vectorize_loops(&f);
            assert!(v.to_string().contains("for j.inner in 0..4"), "{what}:\n{v}");
            assert_same_results(&f, &v);
        }
        // `max` reduces like `+`.
        let f = dot_nest(true, &max_update);
        let v = vectorize_loops(&f);
        assert!(v.to_string().contains("max(C[ramp(i*8 + j.outer*4, 1, 4)], vector_reduce_max("), "{v}");
        assert_same_results(&f, &v);
    }

    #[test]
    fn a_nested_store_over_both_lanes_is_one_vector_store() {
        // The packing of `B: i8[8, 16]` into `Bp[jo, ko, ji, ki] = B[ko*4 + ki, jo*8 + ji]`
        // (panels of 8 columns, 4 `k` per group) with `ji` and `ki` vectorized.
        let b = Buffer::new("B", DType::I8, vec![128]);
        let bp = Buffer::new("Bp", DType::I8, vec![128]);
        let [jo, ko, ji, ki] = ["jo", "ko", "ji", "ki"].map(Var::index);
        let read = Expr::load(&b, vec![(ko.to_expr() * 4 + ki.to_expr()) * 16 + jo.to_expr() * 8 + ji.to_expr()]);
        let index = jo.to_expr() * 64 + ko.to_expr() * 32 + ji.to_expr() * 4 + ki.to_expr();
        let lanes = Stmt::for_loop(ki, 4, ForKind::Vectorized, Stmt::store(&bp, vec![index], read));
        let lanes = Stmt::for_loop(ji, 8, ForKind::Vectorized, lanes);
        let nest = Stmt::for_loop(jo, 2, ForKind::Serial, Stmt::for_loop(ko, 2, ForKind::Serial, lanes));
        let f = Func { name: "f".into(), params: vec![b, bp], body: nest };
        check(
            &f,
            "func f(B: i8[128], Bp: i8[128]) {
  for jo in 0..2 {
    for ko in 0..2 {
      Bp[ramp(jo*64 + ko*32, 1, 32)] = B[broadcast(ko*64 + jo*8, 32) + ramp(0, 1, 32)/broadcast(4, 32) + ramp(0, 1, 32)%broadcast(4, 32)*broadcast(16, 32)]
    }
  }
}
",
        );
        // Two lanes storing one element: the outer loop runs serially.
        let c = Buffer::new("C", DType::I8, vec![8]);
        let (i, k) = (Var::index("i"), Var::index("k"));
        let store = Stmt::store(&c, vec![i.to_expr()], k.to_expr().cast(DType::I8));
        let nest = Stmt::for_loop(i.clone(), 8, ForKind::Vectorized, Stmt::for_loop(k, 4, ForKind::Vectorized, store));
        let f = Func { name: "g".into(), params: vec![c], body: nest };
        let v = vectorize_loops(&f);
        assert!(v.to_string().contains("for i in 0..8"), "{v}");
        assert_same_results(&f, &v);
    }

    #[test]
    fn lane_invariant_code_stays_scalar() {
        let a = Buffer::new("A", DType::I64, vec![8]);
        let b = Buffer::new("B", DType::I64, vec![8]);
        let (n, i, t) = (Var::index("n"), Var::index("i"), Var::index("t"));
        let body = Stmt::let_stmt(
            t.clone(),
            Expr::load(&b, vec![n.to_expr()]) * 3,
            Stmt::if_then(
                n.to_expr().lt(4),
                Stmt::store(&a, vec![Expr::index(7) - i.to_expr()], t.to_expr() + i.to_expr() * 2),
            ),
        );
        let nest = Stmt::for_loop(n.clone(), 8, ForKind::Serial, Stmt::for_loop(i, 8, ForKind::Vectorized, body));
        let f = Func { name: "f".into(), params: vec![a, b], body: nest };
        check(
            &f,
            "func f(A: i64[8], B: i64[8]) {
  for n in 0..8 {
    let t = B[n]*3
    if n < 4 {
      A[ramp(7, -1, 8)] = ramp(t, 2, 8)
    }
  }
}
",
        );
    }

    mod prop {
        use super::*;
        use crate::passes::testing::{arb_index_expr, run};
        use proptest::prelude::*;

        /// `for x in 0..3 { vectorized v in 0..4 { for w in 0..3 { S1; S2 } } }` (the `w` loop
        /// optional) over `A: i64[64]` and `Out: i64[64]`, with random indices (offset by 32).
        /// S1 is `Out[s1] = A[l] + Out[o1] + id`, or with `reduce` the reduction
        /// `Out[s1] = Out[s1] + (A[l] + id)`; S2 (optional) is `Out[s2] = Out[o2] * 2 + id`, where
        /// `id = v*3 + w` differs between iterations.
        fn arb_func() -> impl Strategy<Value = Func> {
            let (x, v, w) = (Var::index("x"), Var::index("v"), Var::index("w"));
            let e = || arb_index_expr(vec![x.clone(), v.clone(), w.clone()], 2);
            let shape = (any::<bool>(), any::<bool>(), any::<bool>());
            (e(), e(), e(), e(), e(), shape).prop_map(move |(s1, l, o1, s2, o2, (reduce, two, inner))| {
                let a = Buffer::new("A", DType::I64, vec![64]);
                let out = Buffer::new("Out", DType::I64, vec![64]);
                let at = |b: &Buffer, e: Expr| Expr::load(b, vec![e + 32]);
                // A value unique to the iteration makes any change in write order visible.
                let id = v.to_expr() * 3 + w.to_expr();
                let first = if reduce {
                    Stmt::store(&out, vec![s1.clone() + 32], at(&out, s1) + (at(&a, l) + id.clone()))
                } else {
                    Stmt::store(&out, vec![s1 + 32], at(&a, l) + at(&out, o1) + id.clone())
                };
                let second = Stmt::store(&out, vec![s2 + 32], at(&out, o2) * 2 + id);
                let mut body = if two { Stmt::seq(vec![first, second]) } else { first };
                body = if inner {
                    Stmt::for_loop(w.clone(), 3, ForKind::Serial, body)
                } else {
                    Stmt::let_stmt(w.clone(), Expr::index(1), body)
                };
                let lanes = Stmt::for_loop(v.clone(), 4, ForKind::Vectorized, body);
                Func {
                    name: "p".into(),
                    params: vec![a, out],
                    body: Stmt::for_loop(x.clone(), 3, ForKind::Serial, lanes),
                }
            })
        }

        /// `for x in 0..3 { vectorized v in 0..4 { S2; let u = v*2 + x; vectorized w in 0..3 {
        /// let t = w + u; Out[s1] = Out[s1] op (A[l] + src) } } }` (S2 optional, before or
        /// after the inner loop) with random indices (offset by 32): `s1` over `x, v, u` and, in
        /// some cases, `w`; `l` over all of them; `op` is `+` or `max`; `src` is `v*3 + w` or a
        /// read of `Out`.
        fn arb_nested() -> impl Strategy<Value = Func> {
            let (x, v, w, u, t) = (Var::index("x"), Var::index("v"), Var::index("w"), Var::index("u"), Var::index("t"));
            let outer = arb_index_expr(vec![x.clone(), v.clone(), u.clone()], 2);
            let all = || arb_index_expr(vec![x.clone(), v.clone(), u.clone(), w.clone(), t.clone()], 2);
            let s1 = prop_oneof![3 => outer, 1 => all()];
            let shape = (any::<bool>(), any::<bool>(), 0..3u8);
            (s1, all(), all(), all(), all(), shape).prop_map(move |(s1, l, o1, s2, o2, (max_op, reads_out, second))| {
                let a = Buffer::new("A", DType::I64, vec![64]);
                let out = Buffer::new("Out", DType::I64, vec![64]);
                let at = |b: &Buffer, e: Expr| Expr::load(b, vec![e + 32]);
                let src = if reads_out { at(&out, o1) } else { v.to_expr() * 3 + w.to_expr() };
                let value = at(&a, l) + src;
                let update = if max_op { max(at(&out, s1.clone()), value) } else { at(&out, s1.clone()) + value };
                let reduction = Stmt::store(&out, vec![s1 + 32], update);
                let inner = Stmt::let_stmt(t.clone(), w.to_expr() + u.to_expr(), reduction);
                let inner = Stmt::for_loop(w.clone(), 3, ForKind::Vectorized, inner);
                let inner = Stmt::let_stmt(u.clone(), v.to_expr() * 2 + x.to_expr(), inner);
                let other = Stmt::store(&out, vec![s2 + 32], at(&out, o2) * 2 + v.to_expr());
                let body = match second {
                    0 => inner,
                    1 => Stmt::seq(vec![other, inner]),
                    _ => Stmt::seq(vec![inner, other]),
                };
                let lanes = Stmt::for_loop(v.clone(), 4, ForKind::Vectorized, body);
                Func {
                    name: "p".into(),
                    params: vec![a, out],
                    body: Stmt::for_loop(x.clone(), 3, ForKind::Serial, lanes),
                }
            })
        }

        /// Vectorizes `f` and checks it computes the same, if `f` stays in bounds (only such
        /// programs have a result to preserve).
        fn same_results(f: &Func) -> Result<(), TestCaseError> {
            let Ok(want) = run(f) else { return Ok(()) };
            let v = vectorize_loops(f);
            let got = run(&v).unwrap_or_else(|e| panic!("{e}\n{f}\n{v}"));
            for (w, g) in want.iter().zip(&got) {
                prop_assert!(w.bits_eq(g), "results differ\n{}\n{}", f, v);
            }
            Ok(())
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(500))]
            #[test]
            fn vectorizing_never_changes_results(f in arb_func()) {
                same_results(&f)?;
            }

            #[test]
            fn vectorizing_nested_reductions_never_changes_results(f in arb_nested()) {
                same_results(&f)?;
            }
        }
    }
}
