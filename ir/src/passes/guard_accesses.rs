//! Memory safety by construction: every access the compiler cannot prove in bounds is clamped.

use crate::analysis::interval::{Scope, bounds_of};
use crate::expr::{Expr, ExprKind};
use crate::mutator::{Mutator, walk_expr, walk_stmt};
use crate::passes::facts::{FactMutator, mutate_for_with_facts, mutate_if_with_facts};
use crate::passes::lanewise;
use crate::stmt::{Buffer, Func, Stmt, StmtKind};

/// Makes every `Load` and `Store` of `func` stay inside its buffer, whatever the inputs.
///
/// For each access, the interval of its index (all lanes) is computed under the ranges of the
/// enclosing loops, lets and `If` conditions (`analysis::interval`). An index proven inside
/// `[0, extent)` is left untouched, so a provable access costs nothing. Otherwise the unproven
/// side is clamped: `min(max(idx, 0), extent - 1)`, lane-wise with broadcast constants for
/// vectors (just `max(idx, 0)` or `min(idx, extent - 1)` when the other side is proven). The
/// extent is the buffer's length for a flat index and each dimension's size otherwise. `Select`
/// conditions are deliberately not used as facts: code generation evaluates both arms, so a load
/// in the arm not chosen is clamped too. A buffer with no elements cannot be accessed at all: its
/// loads become 0 and its stores no-ops (a valid program never executes them).
///
/// Does not change any access that stays in bounds, so results of valid programs are unchanged;
/// an access that would be out of bounds reads or writes the nearest element instead of memory
/// outside the buffer. Run it last, on flat IR after `simplify` (which sharpens the intervals).
///
/// A tensor-intrinsic `Call` is kept when every operand region (`flat(origin)` plus the span of
/// the declaration's shape under its strides) is proven inside its buffer; otherwise it becomes
/// `if <every unproven region bound holds> { call } else { fallback }`, so the call only runs
/// in bounds and the fallback, whose own accesses are guarded like any others, covers the rest.
pub fn guard_accesses(func: &Func) -> Func {
    let body = Guard { scope: Scope::new() }.mutate_stmt(&func.body);
    Func { name: func.name.clone(), params: func.params.clone(), body }
}

struct Guard {
    scope: Scope,
}

impl Guard {
    /// The indices of an access to `buffer` with unprovable ones clamped, or `None` if all are
    /// proven in bounds.
    fn guard(&self, buffer: &Buffer, indices: &[Expr]) -> Option<Vec<Expr>> {
        let extents: Vec<i64> = if indices.len() == 1 { vec![buffer.len()] } else { buffer.shape().to_vec() };
        assert_eq!(
            indices.len(),
            extents.len(),
            "guard_accesses: {} has shape {:?} but is accessed with {} indices",
            buffer.name(),
            buffer.shape(),
            indices.len()
        );
        let mut changed = false;
        let guarded = indices
            .iter()
            .zip(extents)
            .map(|(index, extent)| {
                let interval = bounds_of(index, &self.scope);
                let low_ok = interval.min.is_some_and(|m| m >= 0);
                let high_ok = interval.max.is_some_and(|m| m < extent as i128);
                let lanes = index.dtype().lanes;
                let mut clamped = index.clone();
                if !low_ok {
                    clamped = Expr::max(clamped, lanewise::widen(&Expr::index(0), lanes));
                }
                if !high_ok {
                    clamped = Expr::min(clamped, lanewise::widen(&Expr::index(extent - 1), lanes));
                }
                changed |= !(low_ok && high_ok);
                clamped
            })
            .collect();
        changed.then_some(guarded)
    }
}

impl FactMutator for Guard {
    fn scope(&mut self) -> &mut Scope {
        &mut self.scope
    }
}

impl Mutator for Guard {
    fn mutate_expr(&mut self, expr: &Expr) -> Expr {
        let walked = walk_expr(self, expr);
        let ExprKind::Load(buffer, indices) = walked.kind() else {
            return walked;
        };
        if buffer.is_empty() {
            let zero = Expr::zero(walked.dtype().element());
            return lanewise::widen(&zero, walked.dtype().lanes);
        }
        match self.guard(buffer, indices) {
            Some(guarded) => Expr::load(buffer, guarded),
            None => walked,
        }
    }

    fn mutate_stmt(&mut self, stmt: &Stmt) -> Stmt {
        match stmt.kind() {
            StmtKind::For { .. } => mutate_for_with_facts(self, stmt),
            StmtKind::Let { var, value, body } => {
                let new_value = self.mutate_expr(value);
                let interval = bounds_of(&new_value, &self.scope);
                self.scope.push(var, interval);
                let new_body = self.mutate_stmt(body);
                self.scope.pop(var);
                if new_value.same_node(value) && new_body.same_node(body) {
                    return stmt.clone();
                }
                Stmt::let_stmt(var.clone(), new_value, new_body)
            }
            StmtKind::If { cond, .. } => {
                let new_cond = self.mutate_expr(cond);
                mutate_if_with_facts(self, stmt, new_cond)
            }
            StmtKind::Store { buffer, .. } if buffer.is_empty() => Stmt::no_op(),
            StmtKind::Store { .. } => {
                let walked = walk_stmt(self, stmt);
                let StmtKind::Store { buffer, indices, value } = walked.kind() else {
                    unreachable!("guard_accesses: a store rebuilds as a store")
                };
                match self.guard(buffer, indices) {
                    Some(guarded) => Stmt::store(buffer, guarded, value.clone()),
                    None => walked,
                }
            }
            StmtKind::Seq(_) | StmtKind::Allocate { .. } | StmtKind::BoundsCheck { .. } => walk_stmt(self, stmt),
            StmtKind::Call { .. } => {
                let walked = walk_stmt(self, stmt);
                let StmtKind::Call { intrin, operands, fallback, .. } = walked.kind() else {
                    unreachable!("guard_accesses: a call rebuilds as a call")
                };
                let mut conditions = Vec::new();
                for (op, tensor) in operands.iter().zip(intrin.operand_tensors()) {
                    let (lo, hi) = op.span(tensor.shape());
                    if hi < lo {
                        continue;
                    }
                    let origin = op.flat_origin();
                    let at = |offset: i64| if offset == 0 { origin.clone() } else { origin.clone() + offset };
                    let interval = bounds_of(&origin, &self.scope);
                    if interval.min.is_none_or(|m| m + (lo as i128) < 0) {
                        conditions.push(at(lo).ge(Expr::index(0)));
                    }
                    if interval.max.is_none_or(|m| m + (hi as i128) >= op.buffer.len() as i128) {
                        conditions.push(at(hi).lt(Expr::index(op.buffer.len())));
                    }
                }
                match conditions.into_iter().reduce(|a, b| a & b) {
                    None => walked,
                    Some(cond) => {
                        let else_case = Some(fallback.clone());
                        Stmt::new(StmtKind::If { cond, then_case: walked.clone(), else_case })
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtype::DType;
    use crate::expr::{Var, select};
    use crate::interp::InterpError;
    use crate::passes::testing::{assert_same_results, run};
    use crate::stmt::ForKind;

    #[test]
    fn provable_accesses_are_untouched() {
        let a = Buffer::new("A", DType::F32, vec![4, 8]);
        let b = Buffer::new("B", DType::F32, vec![32]);
        let (i, j) = (Var::index("i"), Var::index("j"));
        let idx = i.to_expr() * 8 + j.to_expr();
        let vector = Expr::ramp(i.to_expr() * 8, Expr::index(1), 8);
        let body = Stmt::seq(vec![
            Stmt::store(&b, vec![idx.clone()], Expr::load(&a, vec![idx.clone()])),
            Stmt::store(&b, vec![vector.clone()], Expr::load(&a, vec![vector])),
        ]);
        let nest = Stmt::for_loop(i, 4, ForKind::Parallel, Stmt::for_loop(j, 8, ForKind::Serial, body));
        let f = Func { name: "f".into(), params: vec![a, b], body: nest };
        assert!(guard_accesses(&f).body.same_node(&f.body));
    }

    #[test]
    fn unprovable_indices_are_clamped_on_the_unproven_side() {
        let a = Buffer::new("A", DType::I32, vec![10]);
        let idx = Buffer::new("Idx", DType::I64, vec![4]);
        let out = Buffer::new("Out", DType::I32, vec![12]);
        let i = Var::index("i");
        let ie = i.to_expr();
        let gathered = Expr::load(&a, vec![Expr::load(&idx, vec![ie.clone()])]);
        let shifted = Expr::load(&a, vec![ie.clone() + 8]);
        let vector = Expr::load(&a, vec![Expr::ramp(ie.clone() - 1, Expr::index(1), 4)]);
        let body = Stmt::seq(vec![
            Stmt::store(&out, vec![ie.clone()], gathered + shifted),
            Stmt::store(&out, vec![Expr::ramp(ie.clone() * 3, Expr::index(1), 4)], vector),
        ]);
        let f = Func { name: "f".into(), params: vec![a, idx, out], body: Stmt::for_loop(i, 4, ForKind::Serial, body) };
        let g = guard_accesses(&f);
        assert_eq!(
            format!("{g}"),
            "func f(A: i32[10], Idx: i64[4], Out: i32[12]) {
  for i in 0..4 {
    Out[i] = A[min(max(Idx[i], 0), 9)] + A[min(i + 8, 9)]
    Out[min(ramp(i*3, 1, 4), broadcast(11, 4))] = A[max(ramp(i - 1, 1, 4), broadcast(0, 4))]
  }
}
"
        );
        // The original reads out of bounds; the guarded function runs.
        assert!(matches!(run(&f), Err(InterpError::OutOfBounds { .. })));
        run(&g).expect("guarded accesses stay in bounds");
    }

    #[test]
    fn if_facts_are_used_but_select_conditions_are_not() {
        // for io in 0..2, ii in 0..8: let i = io*8 + ii; if i < 10 { B[i] = select(i < 9, A[i + 1], 0) }
        let a = Buffer::new("A", DType::F32, vec![10]);
        let b = Buffer::new("B", DType::F32, vec![10]);
        let (io, ii, i) = (Var::index("io"), Var::index("ii"), Var::index("i"));
        let ie = i.to_expr();
        let value = select(ie.lt(9), Expr::load(&a, vec![ie.clone() + 1]), Expr::float(DType::F32, 0.0));
        let guarded = Stmt::if_then(ie.lt(10), Stmt::store(&b, vec![ie.clone()], value));
        let body = Stmt::let_stmt(i, io.to_expr() * 8 + ii.to_expr(), guarded);
        let nest = Stmt::for_loop(io, 2, ForKind::Serial, Stmt::for_loop(ii, 8, ForKind::Serial, body));
        let f = Func { name: "f".into(), params: vec![a, b], body: nest };
        let g = guard_accesses(&f);
        assert_eq!(
            format!("{g}"),
            "func f(A: f32[10], B: f32[10]) {
  for io in 0..2 {
    for ii in 0..8 {
      let i = io*8 + ii
      if i < 10 {
        B[i] = select(i < 9, A[min(i + 1, 9)], 0.0f32)
      }
    }
  }
}
"
        );
        assert_same_results(&f, &g);
    }

    #[test]
    fn empty_buffers_are_never_touched() {
        let e = Buffer::new("E", DType::U8, vec![0, 4]);
        let out = Buffer::new("Out", DType::U8, vec![1]);
        let zero = Expr::index(0);
        let body = Stmt::seq(vec![
            Stmt::store(&e, vec![zero.clone()], Expr::int(DType::U8, 1)),
            Stmt::store(&out, vec![zero.clone()], Expr::load(&e, vec![zero])),
        ]);
        let f = Func { name: "f".into(), params: vec![e, out], body };
        assert_eq!(format!("{}", guard_accesses(&f)), "func f(E: u8[0, 4], Out: u8[1]) {\n  Out[0] = 0u8\n}\n");
    }

    mod prop {
        use super::*;
        use crate::passes::testing::arb_index_expr;
        use crate::passes::{simplify, vectorize_loops};
        use proptest::prelude::*;

        /// `for x in 0..3 { for v in 0..4 { Out[s] = A[l] } }` with random indices, once with `v`
        /// vectorized (vector accesses) and once serial.
        fn arb_func() -> impl Strategy<Value = Func> {
            let (x, v) = (Var::index("x"), Var::index("v"));
            let e = || arb_index_expr(vec![x.clone(), v.clone()], 3);
            (e(), e(), any::<bool>()).prop_map(move |(s, l, vectorized)| {
                let a = Buffer::new("A", DType::I64, vec![10]);
                let out = Buffer::new("Out", DType::I64, vec![10]);
                let body = Stmt::store(&out, vec![s], Expr::load(&a, vec![l]));
                let kind = if vectorized { ForKind::Vectorized } else { ForKind::Serial };
                let nest = Stmt::for_loop(x.clone(), 3, ForKind::Serial, Stmt::for_loop(v.clone(), 4, kind, body));
                vectorize_loops(&Func { name: "p".into(), params: vec![a, out], body: nest })
            })
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(500))]
            #[test]
            fn guarded_functions_never_leave_their_buffers(f in arb_func()) {
                for input in [f.clone(), simplify(&f)] {
                    let g = guard_accesses(&input);
                    let got = run(&g).unwrap_or_else(|e| panic!("{e}\n{g}"));
                    // In-bounds programs keep their results.
                    if let Ok(want) = run(&input) {
                        for (w, o) in want.iter().zip(&got) {
                            prop_assert!(w.bits_eq(o), "results differ\n{}\n{}", input, g);
                        }
                    }
                }
            }
        }
    }
}
