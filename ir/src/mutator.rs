//! Rebuilding traversals over expressions and statements.
//!
//! A pass implements `Mutator` and overrides only the nodes it cares about; the default methods
//! recurse and rebuild a node only when one of its children changed, returning the very same
//! `Rc` otherwise (Halide's `IRMutator`). Tests rely on that: a pass that changes nothing must
//! return the identical tree.

use rustc_hash::FxHashMap as HashMap;
use std::rc::Rc;

use crate::expr::{Expr, ExprKind, ReduceData, Var};
use crate::stmt::{Operand, SegmentRange, Stmt, StmtKind};
use crate::te::{Tensor, TensorId};

pub trait Mutator {
    fn mutate_expr(&mut self, expr: &Expr) -> Expr {
        walk_expr(self, expr)
    }

    fn mutate_stmt(&mut self, stmt: &Stmt) -> Stmt {
        walk_stmt(self, stmt)
    }
}

fn changed(old: &[&Expr], new: &[Expr]) -> bool {
    old.iter().zip(new).any(|(a, b)| !a.same_node(b))
}

/// Mutates the children of `expr` and rebuilds it if any changed.
pub fn walk_expr<M: Mutator + ?Sized>(m: &mut M, expr: &Expr) -> Expr {
    let old = expr.child_iter();
    let new: Vec<Expr> = old.clone().map(|c| m.mutate_expr(c)).collect();
    if old.zip(&new).all(|(a, b)| a.same_node(b)) {
        return expr.clone();
    }
    rebuild_expr(expr, new)
}

/// `expr` with its children (in `Expr::children` order) replaced by `children`.
pub fn rebuild_expr(expr: &Expr, mut children: Vec<Expr>) -> Expr {
    let dtype = expr.dtype();
    let mut next = || children.remove(0);
    let kind = match expr.kind() {
        ExprKind::Int(_) | ExprKind::Float(_) | ExprKind::Var(_) => return expr.clone(),
        ExprKind::Binary(op, ..) => ExprKind::Binary(*op, next(), next()),
        ExprKind::Cmp(op, ..) => ExprKind::Cmp(*op, next(), next()),
        ExprKind::Not(_) => ExprKind::Not(next()),
        ExprKind::Cast(_) => ExprKind::Cast(next()),
        ExprKind::SaturatingCast(_) => ExprKind::SaturatingCast(next()),
        ExprKind::Round(_) => ExprKind::Round(next()),
        ExprKind::Sqrt(_) => ExprKind::Sqrt(next()),
        ExprKind::Reinterpret(_) => ExprKind::Reinterpret(next()),
        ExprKind::Select(..) => ExprKind::Select(next(), next(), next()),
        ExprKind::Fma(..) => ExprKind::Fma(next(), next(), next()),
        ExprKind::TensorRead(t, _) => ExprKind::TensorRead(t.clone(), children),
        ExprKind::Load(b, _) => ExprKind::Load(b.clone(), children),
        ExprKind::Reduce(r) => {
            ExprKind::Reduce(Rc::new(ReduceData { reducer: r.reducer.clone(), source: next(), axes: r.axes.clone() }))
        }
        ExprKind::Ramp(..) => ExprKind::Ramp(next(), next()),
        ExprKind::Broadcast(_) => ExprKind::Broadcast(next()),
        ExprKind::VectorReduce(op, _) => ExprKind::VectorReduce(*op, next()),
    };
    // Children may have changed lane counts (vectorization); recompute the dtype's lanes.
    let lanes = match &kind {
        ExprKind::Binary(_, a, _) => a.dtype().lanes,
        ExprKind::Cmp(_, a, _)
        | ExprKind::Not(a)
        | ExprKind::Cast(a)
        | ExprKind::SaturatingCast(a)
        | ExprKind::Round(a)
        | ExprKind::Sqrt(a)
        | ExprKind::Reinterpret(a) => a.dtype().lanes,
        ExprKind::Select(c, t, _) => c.dtype().lanes.max(t.dtype().lanes),
        ExprKind::Fma(a, b, c) => a.dtype().lanes.max(b.dtype().lanes).max(c.dtype().lanes),
        ExprKind::Load(_, idx) | ExprKind::TensorRead(_, idx) => idx.iter().map(|i| i.dtype().lanes).max().unwrap_or(1),
        _ => dtype.lanes,
    };
    Expr::new(dtype.with_lanes(lanes), kind)
}

/// Mutates the children of `stmt` and rebuilds it if any changed.
pub fn walk_stmt<M: Mutator + ?Sized>(m: &mut M, stmt: &Stmt) -> Stmt {
    match stmt.kind() {
        StmtKind::For { var, extent, kind, body } => {
            let new_body = m.mutate_stmt(body);
            if new_body.same_node(body) {
                return stmt.clone();
            }
            Stmt::for_loop(var.clone(), *extent, *kind, new_body)
        }
        StmtKind::Let { var, value, body } => {
            let new_value = m.mutate_expr(value);
            let new_body = m.mutate_stmt(body);
            if new_value.same_node(value) && new_body.same_node(body) {
                return stmt.clone();
            }
            Stmt::let_stmt(var.clone(), new_value, new_body)
        }
        StmtKind::Store { buffer, indices, value } => {
            let new_indices: Vec<Expr> = indices.iter().map(|i| m.mutate_expr(i)).collect();
            let new_value = m.mutate_expr(value);
            let old: Vec<&Expr> = indices.iter().collect();
            if !changed(&old, &new_indices) && new_value.same_node(value) {
                return stmt.clone();
            }
            Stmt::store(buffer, new_indices, new_value)
        }
        StmtKind::If { cond, then_case, else_case } => {
            let new_cond = m.mutate_expr(cond);
            let new_then = m.mutate_stmt(then_case);
            let new_else = else_case.as_ref().map(|e| m.mutate_stmt(e));
            let else_same = match (else_case, &new_else) {
                (Some(a), Some(b)) => a.same_node(b),
                _ => true,
            };
            if new_cond.same_node(cond) && new_then.same_node(then_case) && else_same {
                return stmt.clone();
            }
            Stmt::new(StmtKind::If { cond: new_cond, then_case: new_then, else_case: new_else })
        }
        StmtKind::Seq(stmts) => {
            let new: Vec<Stmt> = stmts.iter().map(|s| m.mutate_stmt(s)).collect();
            if stmts.iter().zip(&new).all(|(a, b)| a.same_node(b)) {
                return stmt.clone();
            }
            Stmt::seq(new)
        }
        StmtKind::Allocate { buffer, body } => {
            let new_body = m.mutate_stmt(body);
            if new_body.same_node(body) {
                return stmt.clone();
            }
            Stmt::allocate(buffer.clone(), new_body)
        }
        StmtKind::Call { intrin, operands, reset, fallback, range } => {
            let origins: Vec<Vec<Expr>> =
                operands.iter().map(|op| op.origin.iter().map(|i| m.mutate_expr(i)).collect()).collect();
            let new_fallback = m.mutate_stmt(fallback);
            let new_range =
                range.as_ref().map(|r| SegmentRange { first: m.mutate_expr(&r.first), last: m.mutate_expr(&r.last) });
            let same_origins =
                operands.iter().zip(&origins).all(|(op, new)| !changed(&op.origin.iter().collect::<Vec<_>>(), new));
            let same_range = match (range, &new_range) {
                (Some(r), Some(n)) => r.first.same_node(&n.first) && r.last.same_node(&n.last),
                _ => true,
            };
            if same_origins && same_range && new_fallback.same_node(fallback) {
                return stmt.clone();
            }
            let operands = operands
                .iter()
                .zip(origins)
                .map(|(op, origin)| Operand { buffer: op.buffer.clone(), origin, strides: op.strides.clone() })
                .collect();
            Stmt::call_in_range(intrin.clone(), operands, *reset, new_fallback, new_range)
        }
        StmtKind::BoundsCheck { cond, buffer } => {
            let new_cond = m.mutate_expr(cond);
            if new_cond.same_node(cond) {
                return stmt.clone();
            }
            Stmt::bounds_check(new_cond, buffer)
        }
    }
}

/// Calls `f` on every statement, parents first (a `Call`'s fallback is a child of the call).
pub fn for_each_stmt(stmt: &Stmt, f: &mut dyn FnMut(&Stmt)) {
    f(stmt);
    match stmt.kind() {
        StmtKind::For { body, .. }
        | StmtKind::Let { body, .. }
        | StmtKind::Allocate { body, .. }
        | StmtKind::Call { fallback: body, .. } => for_each_stmt(body, f),
        StmtKind::If { then_case, else_case, .. } => {
            for_each_stmt(then_case, f);
            if let Some(e) = else_case {
                for_each_stmt(e, f);
            }
        }
        StmtKind::Seq(stmts) => stmts.iter().for_each(|s| for_each_stmt(s, f)),
        StmtKind::Store { .. } | StmtKind::BoundsCheck { .. } => {}
    }
}

/// Calls `f` on every expression directly held by a statement in the tree (not descending into
/// expressions; use `Expr::for_each` inside `f` for that).
pub fn for_each_stmt_expr(stmt: &Stmt, f: &mut dyn FnMut(&Expr)) {
    for_each_stmt(stmt, &mut |s| match s.kind() {
        StmtKind::Let { value, .. } => f(value),
        StmtKind::Store { indices, value, .. } => {
            indices.iter().for_each(&mut *f);
            f(value)
        }
        StmtKind::If { cond, .. } | StmtKind::BoundsCheck { cond, .. } => f(cond),
        StmtKind::Call { operands, range, .. } => {
            operands.iter().flat_map(|op| &op.origin).for_each(&mut *f);
            if let Some(r) = range {
                f(&r.first);
                f(&r.last);
            }
        }
        StmtKind::For { .. } | StmtKind::Seq(_) | StmtKind::Allocate { .. } => {}
    });
}

struct Substitute<'a> {
    map: &'a HashMap<Var, Expr>,
}

impl Mutator for Substitute<'_> {
    fn mutate_expr(&mut self, expr: &Expr) -> Expr {
        if let ExprKind::Var(v) = expr.kind()
            && let Some(replacement) = self.map.get(v)
        {
            return replacement.clone();
        }
        walk_expr(self, expr)
    }
}

/// `expr` with every occurrence of each variable replaced by its expression.
pub fn substitute(expr: &Expr, pairs: &[(Var, Expr)]) -> Expr {
    let map: HashMap<Var, Expr> = pairs.iter().cloned().collect();
    substitute_map(expr, &map)
}

pub fn substitute_map(expr: &Expr, map: &HashMap<Var, Expr>) -> Expr {
    Substitute { map }.mutate_expr(expr)
}

/// `stmt` with every occurrence of each variable replaced by its expression.
pub fn substitute_stmt(stmt: &Stmt, map: &HashMap<Var, Expr>) -> Stmt {
    Substitute { map }.mutate_stmt(stmt)
}

/// `body` with the variables of `vars` and the reads of the tensors in `tensors` (by id, same
/// indices) replaced, each distinct node rewritten once: nodes the body shares stay shared.
/// How a declaration is rebuilt over new axes and inputs (composites, tails, per-row maps).
pub fn rebind<S: std::hash::BuildHasher, T: std::hash::BuildHasher>(
    body: &Expr,
    vars: std::collections::HashMap<Var, Expr, S>,
    tensors: &std::collections::HashMap<TensorId, Tensor, T>,
) -> Expr {
    Rebind { vars, tensors, done: HashMap::default() }.mutate_expr(body)
}

struct Rebind<'a, S, T> {
    vars: std::collections::HashMap<Var, Expr, S>,
    tensors: &'a std::collections::HashMap<TensorId, Tensor, T>,
    /// Rewritten nodes by identity.
    done: HashMap<usize, Expr>,
}

impl<S: std::hash::BuildHasher, T: std::hash::BuildHasher> Mutator for Rebind<'_, S, T> {
    fn mutate_expr(&mut self, expr: &Expr) -> Expr {
        let key = std::ptr::from_ref(expr.kind()) as usize;
        if let Some(done) = self.done.get(&key) {
            return done.clone();
        }
        let walked = walk_expr(self, expr);
        let result = match walked.kind() {
            ExprKind::Var(v) if self.vars.contains_key(v) => self.vars[v].clone(),
            ExprKind::TensorRead(t, idx) if self.tensors.contains_key(&t.id()) => {
                self.tensors[&t.id()].at_vec(idx.clone())
            }
            _ => walked,
        };
        self.done.insert(key, result.clone());
        result
    }
}
