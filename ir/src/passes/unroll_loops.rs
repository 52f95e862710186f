//! Unrolling: `Unrolled` loops become one copy of their body per iteration.

use rustc_hash::FxHashMap as HashMap;

use crate::expr::Expr;
use crate::mutator::{Mutator, substitute_stmt, walk_stmt};
use crate::stmt::{ForKind, Func, Stmt, StmtKind};

/// Replaces every `For` of kind `Unrolled` and extent `n` by a `Seq` of `n` copies of its body,
/// copy `i` with the loop variable replaced by the constant `i` (extent 0 gives a no-op, extent
/// 1 the single copy). Unrolled loops nested inside are unrolled first.
///
/// Does not simplify the copies (`simplify` folds the constants afterwards), limit code size
/// (the schedule chose the extent), or rename the `Let` and `For` variables inside the body:
/// the copies bind them again in sibling scopes, which the IR allows.
pub fn unroll_loops(func: &Func) -> Func {
    let body = UnrollLoops.mutate_stmt(&func.body);
    Func { name: func.name.clone(), params: func.params.clone(), body }
}

struct UnrollLoops;

impl Mutator for UnrollLoops {
    fn mutate_stmt(&mut self, stmt: &Stmt) -> Stmt {
        let walked = walk_stmt(self, stmt);
        let StmtKind::For { var, extent, kind: ForKind::Unrolled, body } = walked.kind() else {
            return walked;
        };
        let copies =
            (0..*extent).map(|i| substitute_stmt(body, &HashMap::from_iter([(var.clone(), Expr::index(i))]))).collect();
        Stmt::seq(copies)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtype::DType;
    use crate::expr::Var;
    use crate::passes::testing::assert_same_results;
    use crate::stmt::Buffer;

    #[test]
    fn unrolled_loops_become_copies() {
        let a = Buffer::new("A", DType::I32, vec![2, 3]);
        let b = Buffer::new("B", DType::I32, vec![2, 3]);
        let (i, j, t) = (Var::index("i"), Var::index("j"), Var::new("t", DType::I32));
        let body = Stmt::let_stmt(
            t.clone(),
            Expr::load(&a, vec![i.to_expr(), j.to_expr()]),
            Stmt::store(&b, vec![i.to_expr(), j.to_expr()], t.to_expr() * t.to_expr()),
        );
        let nest = Stmt::for_loop(i, 2, ForKind::Serial, Stmt::for_loop(j, 3, ForKind::Unrolled, body));
        let f = Func { name: "f".into(), params: vec![a, b], body: nest };
        let u = unroll_loops(&f);
        assert_eq!(
            format!("{u}"),
            "func f(A: i32[2, 3], B: i32[2, 3]) {
  for i in 0..2 {
    let t = A[i, 0]
    B[i, 0] = t*t
    let t = A[i, 1]
    B[i, 1] = t*t
    let t = A[i, 2]
    B[i, 2] = t*t
  }
}
"
        );
        assert_same_results(&f, &u);
    }

    #[test]
    fn nested_and_degenerate_unrolled_loops() {
        let a = Buffer::new("A", DType::I64, vec![4]);
        let (i, j, k) = (Var::index("i"), Var::index("j"), Var::index("k"));
        let inner = Stmt::for_loop(
            j.clone(),
            2,
            ForKind::Unrolled,
            Stmt::store(&a, vec![i.to_expr() * 2 + j.to_expr()], i.to_expr()),
        );
        let empty = Stmt::for_loop(k, 0, ForKind::Unrolled, Stmt::store(&a, vec![Expr::index(0)], Expr::index(9)));
        let body = Stmt::seq(vec![Stmt::for_loop(i, 2, ForKind::Unrolled, inner), empty]);
        let f = Func { name: "f".into(), params: vec![a], body };
        let u = unroll_loops(&f);
        assert_eq!(
            format!("{u}"),
            "func f(A: i64[4]) {
  A[0*2 + 0] = 0
  A[0*2 + 1] = 0
  A[1*2 + 0] = 1
  A[1*2 + 1] = 1
}
"
        );
        assert_same_results(&f, &u);
        let serial = Func { body: Stmt::for_loop(Var::index("s"), 3, ForKind::Serial, Stmt::no_op()), ..f };
        assert!(unroll_loops(&serial).body.same_node(&serial.body));
    }
}
