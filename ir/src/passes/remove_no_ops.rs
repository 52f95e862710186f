//! Removal of statements that do nothing.

use crate::mutator::{Mutator, for_each_stmt_expr, walk_stmt};
use crate::stmt::{Func, Stmt, StmtKind};

/// Removes no-ops bottom-up: empty statements from sequences; `For`, `Allocate` and `Let` whose
/// body is a no-op; `Let`s whose variable the body never uses (values are pure, so dropping one
/// changes nothing); `If`s with two no-op branches. An `If` whose then-branch is a no-op becomes
/// `if !cond` with the else-branch; a no-op else-branch is dropped.
///
/// Does not evaluate conditions or extents (`simplify` removes provably dead code and loops of
/// extent 0), and does not remove stores, even ones that rewrite the value already stored.
pub fn remove_no_ops(func: &Func) -> Func {
    let body = RemoveNoOps.mutate_stmt(&func.body);
    Func { name: func.name.clone(), params: func.params.clone(), body }
}

struct RemoveNoOps;

fn stmt_uses_var(stmt: &Stmt, var: &crate::expr::Var) -> bool {
    let mut used = false;
    for_each_stmt_expr(stmt, &mut |e| used |= e.uses_var(var));
    used
}

impl Mutator for RemoveNoOps {
    fn mutate_stmt(&mut self, stmt: &Stmt) -> Stmt {
        let walked = walk_stmt(self, stmt);
        match walked.kind() {
            StmtKind::Seq(stmts) if stmts.iter().any(Stmt::is_no_op) => {
                Stmt::seq(stmts.iter().filter(|s| !s.is_no_op()).cloned().collect())
            }
            StmtKind::For { body, .. } | StmtKind::Allocate { body, .. } if body.is_no_op() => Stmt::no_op(),
            StmtKind::Let { body, .. } if body.is_no_op() => Stmt::no_op(),
            StmtKind::Let { var, body, .. } if !stmt_uses_var(body, var) => body.clone(),
            StmtKind::If { cond, then_case, else_case } => {
                let else_empty = else_case.as_ref().is_none_or(Stmt::is_no_op);
                match (then_case.is_no_op(), else_empty) {
                    (true, true) => Stmt::no_op(),
                    (true, false) => Stmt::if_then(!cond.clone(), else_case.clone().expect("non-empty else")),
                    (false, true) if else_case.is_some() => Stmt::if_then(cond.clone(), then_case.clone()),
                    _ => walked,
                }
            }
            _ => walked,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtype::DType;
    use crate::expr::{Expr, Var};
    use crate::passes::testing::assert_same_results;
    use crate::stmt::{Buffer, ForKind};

    #[test]
    fn empty_structure_disappears() {
        let a = Buffer::new("A", DType::F32, vec![4]);
        let tmp = Buffer::new("T", DType::F32, vec![4]);
        let (i, j, t, u) = (Var::index("i"), Var::index("j"), Var::index("t"), Var::index("u"));
        let ie = i.to_expr();
        let keep = Stmt::store(&a, vec![ie.clone()], Expr::float(DType::F32, 1.0));
        let body = Stmt::new(StmtKind::Seq(vec![
            Stmt::no_op(),
            Stmt::for_loop(j.clone(), 3, ForKind::Serial, Stmt::new(StmtKind::Seq(vec![Stmt::no_op(), Stmt::no_op()]))),
            Stmt::allocate(tmp, Stmt::no_op()),
            Stmt::let_stmt(t, ie.clone() * 2, Stmt::no_op()),
            Stmt::let_stmt(u, ie.clone() + 1, keep),
            Stmt::if_then(ie.lt(2), Stmt::no_op()),
            Stmt::new(StmtKind::If {
                cond: ie.lt(3),
                then_case: Stmt::no_op(),
                else_case: Some(Stmt::store(&a, vec![ie.clone()], Expr::float(DType::F32, 2.0))),
            }),
            Stmt::new(StmtKind::If {
                cond: ie.eq(0),
                then_case: Stmt::store(&a, vec![ie.clone()], Expr::float(DType::F32, 3.0)),
                else_case: Some(Stmt::no_op()),
            }),
        ]));
        let f = Func { name: "f".into(), params: vec![a], body: Stmt::for_loop(i, 4, ForKind::Serial, body) };
        let r = remove_no_ops(&f);
        assert_eq!(
            format!("{r}"),
            "func f(A: f32[4]) {
  for i in 0..4 {
    A[i] = 1.0f32
    if !(i < 3) {
      A[i] = 2.0f32
    }
    if i == 0 {
      A[i] = 3.0f32
    }
  }
}
"
        );
        assert_same_results(&f, &r);
        assert!(remove_no_ops(&r).body.same_node(&r.body));
    }

    #[test]
    fn a_loop_of_only_no_ops_is_removed_entirely() {
        let (i, j) = (Var::index("i"), Var::index("j"));
        let body = Stmt::for_loop(i, 8, ForKind::Parallel, Stmt::for_loop(j, 8, ForKind::Serial, Stmt::no_op()));
        let f = Func { name: "f".into(), params: vec![], body };
        assert_eq!(format!("{}", remove_no_ops(&f)), "func f() {\n}\n");
    }
}
