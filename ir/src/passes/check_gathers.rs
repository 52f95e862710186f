//! Run-time bounds checks for reads whose index depends on data (gathers).

use crate::analysis::interval::{Scope, bounds_of};
use crate::expr::{BinOp, Expr, ExprKind};
use crate::mutator::{Mutator, for_each_stmt, walk_stmt};
use crate::passes::facts::{FactMutator, mutate_for_with_facts, mutate_if_with_facts};
use crate::stmt::{Buffer, Func, Stmt, StmtKind};

/// Inserts a `BoundsCheck` before every statement that evaluates a gather: a `Load` one of whose
/// indices reads memory and is not proven (interval analysis under the enclosing loops, lets and
/// `If`s) to lie inside its dimension.
///
/// `te::compute` rejects every read that can leave its tensor unless its index reads a tensor,
/// so gathers are the only reads that can leave their buffer at run time. The definition (and the
/// reference interpreters) evaluate only the chosen arm of a `select`, so a gather in an arm is
/// checked only when that arm is chosen: its condition is `!c | in_bounds` (`c` negated for the
/// second arm), and the guarded gather `select(B[i] < 10, A[B[i]], 0)` with `A` of extent 10
/// passes whenever `B[i] >= 0`; a bound the arm's condition states as a conjunct is not checked
/// again (`select(B[i] >= 0 & B[i] < 10, A[B[i]], 0)` has no check). Checks of gathers nested in an index come first, so the innermost
/// read that leaves its buffer is the one reported. Each index is checked against its own
/// dimension, as the interpreters do, so the pass runs before `flatten_buffers`; the indices are
/// still clamped afterwards (`guard_accesses`), which only matters for arms not chosen.
///
/// Generated code returns a status naming the buffer (position in `checked_buffers`); the loop
/// interpreter reports `InterpError::IndexCheck`.
///
/// Only the points a schedule computes are checked, so a stage holding such a gather may not be
/// inlined or computed at a consumer (`Schedule::compute_inline`, `compute_at`): it is computed
/// over its whole domain, as `te_eval` evaluates it.
pub fn check_gathers(func: &Func) -> Func {
    let body = CheckGathers { scope: Scope::new() }.mutate_stmt(&func.body);
    Func { name: func.name.clone(), params: func.params.clone(), body }
}

/// The buffers `BoundsCheck`s of `func` name, each once, in order of first appearance: the
/// numbering generated code and the runtime share to name the buffer of a failed check.
pub fn checked_buffers(func: &Func) -> Vec<Buffer> {
    let mut buffers: Vec<Buffer> = Vec::new();
    for_each_stmt(&func.body, &mut |s| {
        if let StmtKind::BoundsCheck { buffer, .. } = s.kind()
            && !buffers.contains(buffer)
        {
            buffers.push(buffer.clone());
        }
    });
    buffers
}

struct CheckGathers {
    scope: Scope,
}

fn reads_memory(expr: &Expr) -> bool {
    let mut found = false;
    expr.for_each(&mut |e| found |= matches!(e.kind(), ExprKind::Load(..)));
    found
}

impl CheckGathers {
    /// Appends to `out` the checks of the gathers in `expr`, evaluated under the `select` arm
    /// conditions `path`, innermost first.
    fn collect(&mut self, expr: &Expr, path: &mut Vec<Expr>, out: &mut Vec<Stmt>) {
        match expr.kind() {
            ExprKind::Select(c, t, f) => {
                self.collect(c, path, out);
                for (arm, holds) in [(t, true), (f, false)] {
                    let facts = self.scope.assume(c, holds);
                    path.push(if holds { c.clone() } else { !c.clone() });
                    self.collect(arm, path, out);
                    path.pop();
                    self.scope.forget(facts);
                }
            }
            ExprKind::Load(buffer, indices) => {
                for index in indices {
                    self.collect(index, path, out);
                }
                let flat = indices.len() == 1 && buffer.shape().len() != 1;
                let extents = if flat { vec![buffer.len()] } else { buffer.shape().to_vec() };
                // A bound the arm's own condition states (`select(x >= 0 & x < n, A[x], ..)`)
                // needs no check: facts about reads do not enter the interval scope.
                let mut known = Vec::new();
                path.iter().for_each(|p| conjuncts(p, &mut known));
                let mut in_bounds = Vec::new();
                let mut require = |bound: Expr| {
                    if !known.iter().any(|k| k.structurally_eq(&bound)) {
                        in_bounds.push(bound);
                    }
                };
                for (index, &extent) in indices.iter().zip(&extents) {
                    if !reads_memory(index) {
                        continue;
                    }
                    let range = bounds_of(index, &self.scope);
                    if range.min.is_none_or(|m| m < 0) {
                        require(index.ge(0));
                    }
                    if range.max.is_none_or(|m| m >= extent as i128) {
                        require(index.lt(extent));
                    }
                }
                if let Some(ok) = in_bounds.into_iter().reduce(|a, b| a & b) {
                    let cond = match path.iter().cloned().reduce(|a, b| a & b) {
                        Some(taken) => !taken | ok,
                        None => ok,
                    };
                    out.push(Stmt::bounds_check(cond, buffer));
                }
            }
            _ => {
                for child in expr.children() {
                    self.collect(child, path, out);
                }
            }
        }
    }

    fn checks(&mut self, exprs: &[&Expr]) -> Vec<Stmt> {
        let mut out = Vec::new();
        for e in exprs {
            self.collect(e, &mut Vec::new(), &mut out);
        }
        out
    }
}

/// The operands of a chain of bool `&`, or `cond` itself.
fn conjuncts<'e>(cond: &'e Expr, out: &mut Vec<&'e Expr>) {
    match cond.kind() {
        ExprKind::Binary(BinOp::And, a, b) if cond.dtype().is_bool() => {
            conjuncts(a, out);
            conjuncts(b, out);
        }
        _ => out.push(cond),
    }
}

/// `stmt` preceded by `checks`.
fn checked(mut checks: Vec<Stmt>, stmt: Stmt) -> Stmt {
    if checks.is_empty() {
        return stmt;
    }
    checks.push(stmt);
    Stmt::seq(checks)
}

impl FactMutator for CheckGathers {
    fn scope(&mut self) -> &mut Scope {
        &mut self.scope
    }
}

impl Mutator for CheckGathers {
    fn mutate_stmt(&mut self, stmt: &Stmt) -> Stmt {
        match stmt.kind() {
            StmtKind::For { .. } => mutate_for_with_facts(self, stmt),
            StmtKind::Let { var, value, body } => {
                let checks = self.checks(&[value]);
                self.scope.push(var, bounds_of(value, &self.scope));
                let new_body = self.mutate_stmt(body);
                self.scope.pop(var);
                let new_stmt = if new_body.same_node(body) {
                    stmt.clone()
                } else {
                    Stmt::let_stmt(var.clone(), value.clone(), new_body)
                };
                checked(checks, new_stmt)
            }
            StmtKind::Store { indices, value, .. } => {
                let exprs: Vec<&Expr> = indices.iter().chain([value]).collect();
                let checks = self.checks(&exprs);
                checked(checks, stmt.clone())
            }
            StmtKind::If { cond, .. } => {
                let checks = self.checks(&[cond]);
                let new_stmt = mutate_if_with_facts(self, stmt, cond.clone());
                checked(checks, new_stmt)
            }
            // Intrinsic operands are affine (`Schedule::tensorize` requires it); the fallback is
            // walked like any loop nest.
            StmtKind::Seq(_) | StmtKind::Allocate { .. } | StmtKind::Call { .. } | StmtKind::BoundsCheck { .. } => {
                walk_stmt(self, stmt)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtype::DType;
    use crate::expr::{Var, select};
    use crate::interp::{Array, InterpError, run_func};
    use crate::stmt::ForKind;

    fn gather(guarded: bool) -> Func {
        let a = Buffer::new("A", DType::I32, vec![10]);
        let idx = Buffer::new("Idx", DType::I64, vec![4]);
        let out = Buffer::new("Out", DType::I32, vec![4]);
        let i = Var::index("i");
        let at = Expr::load(&idx, vec![i.to_expr()]);
        let read = Expr::load(&a, vec![at.clone()]);
        let value = if guarded { select(at.lt(10), read, Expr::int(DType::I32, -1)) } else { read };
        let body = Stmt::for_loop(i.clone(), 4, ForKind::Serial, Stmt::store(&out, vec![i.to_expr()], value));
        Func { name: "gather".into(), params: vec![a, idx, out], body }
    }

    fn run(f: &Func, idx: &[i64]) -> Result<Vec<i64>, InterpError> {
        let mut args = [
            Array::from_i64(DType::I32, &[10], &(0..10).map(|v| v * 10).collect::<Vec<_>>()),
            Array::from_i64(DType::I64, &[4], idx),
            Array::zeros(DType::I32, &[4]),
        ];
        run_func(f, &mut args)?;
        Ok(args[2].to_i64_vec())
    }

    #[test]
    fn a_gather_is_checked_before_the_statement_that_reads_it() {
        let f = check_gathers(&gather(false));
        assert_eq!(
            f.body.to_string(),
            "for i in 0..4 {\n  check Idx[i] >= 0 & Idx[i] < 10 else out_of_bounds(A)\n  Out[i] = A[Idx[i]]\n}\n"
        );
        assert_eq!(checked_buffers(&f).iter().map(|b| b.name().to_string()).collect::<Vec<_>>(), ["A"]);
        assert_eq!(run(&f, &[9, 0, 3, 3]), Ok(vec![90, 0, 30, 30]));
        assert_eq!(run(&f, &[9, 10, 3, 3]), Err(InterpError::IndexCheck { name: "A".into() }));
        assert_eq!(run(&f, &[9, 1, -1, 3]), Err(InterpError::IndexCheck { name: "A".into() }));
    }

    #[test]
    fn a_gather_guarded_by_both_bounds_needs_no_check() {
        let a = Buffer::new("A", DType::I32, vec![10]);
        let idx = Buffer::new("Idx", DType::I64, vec![4]);
        let out = Buffer::new("Out", DType::I32, vec![4]);
        let i = Var::index("i");
        let at = Expr::load(&idx, vec![i.to_expr()]);
        let inside = at.ge(0) & at.lt(10);
        let value = select(inside, Expr::load(&a, vec![at.clone()]), Expr::int(DType::I32, -1));
        let body = Stmt::for_loop(i.clone(), 4, ForKind::Serial, Stmt::store(&out, vec![i.to_expr()], value));
        let f = Func { name: "f".into(), params: vec![a, idx, out], body };
        assert!(check_gathers(&f).body.same_node(&f.body));
        assert_eq!(run(&f, &[-5, 10, 3, 9]), Ok(vec![-1, -1, 30, 90]));
    }

    #[test]
    fn a_guarded_gather_is_checked_only_when_its_arm_is_chosen() {
        let f = check_gathers(&gather(true));
        assert_eq!(run(&f, &[9, 10, 1000, 0]), Ok(vec![90, -1, -1, 0]));
        assert_eq!(run(&f, &[9, -3, 0, 0]), Err(InterpError::IndexCheck { name: "A".into() }));
    }

    #[test]
    fn a_gather_proven_in_bounds_by_its_index_type_is_not_checked() {
        let a = Buffer::new("A", DType::I32, vec![256]);
        let idx = Buffer::new("Idx", DType::U8, vec![4]);
        let out = Buffer::new("Out", DType::I32, vec![4]);
        let i = Var::index("i");
        let read = Expr::load(&a, vec![Expr::load(&idx, vec![i.to_expr()]).cast(DType::INDEX)]);
        let body = Stmt::for_loop(i.clone(), 4, ForKind::Serial, Stmt::store(&out, vec![i.to_expr()], read));
        let f = Func { name: "f".into(), params: vec![a, idx, out], body };
        assert!(check_gathers(&f).body.same_node(&f.body));
    }
}
