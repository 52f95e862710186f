//! Walking a `for` with its range known and an `if` with its condition known: shared by the
//! passes that track interval facts.

use crate::analysis::interval::{Interval, Scope};
use crate::expr::Expr;
use crate::mutator::Mutator;
use crate::stmt::{Stmt, StmtKind};

/// A mutator that keeps interval facts about the statement it is in.
pub(crate) trait FactMutator: Mutator {
    fn scope(&mut self) -> &mut Scope;
}

/// Rebuilds `for var in 0..extent { body }` (a `For` statement), mutating the body with `var`'s
/// range in scope. Returns `stmt` itself when nothing changed.
pub(crate) fn mutate_for_with_facts<M: FactMutator>(m: &mut M, stmt: &Stmt) -> Stmt {
    let StmtKind::For { var, extent, kind, body } = stmt.kind() else {
        panic!("mutate_for_with_facts of a statement that is not a for loop");
    };
    m.scope().push(var, Interval::of_extent(*extent));
    let new_body = m.mutate_stmt(body);
    m.scope().pop(var);
    if new_body.same_node(body) {
        return stmt.clone();
    }
    Stmt::for_loop(var.clone(), *extent, *kind, new_body)
}

/// Rebuilds `if cond { then_case } else { else_case }` (an `If` statement) with the already
/// mutated `new_cond`, mutating each arm with the condition assumed true, respectively false.
/// Returns `stmt` itself when nothing changed.
pub(crate) fn mutate_if_with_facts<M: FactMutator>(m: &mut M, stmt: &Stmt, new_cond: Expr) -> Stmt {
    let StmtKind::If { cond, then_case, else_case } = stmt.kind() else {
        panic!("mutate_if_with_facts of a statement that is not an if");
    };
    let facts = m.scope().assume(&new_cond, true);
    let new_then = m.mutate_stmt(then_case);
    m.scope().forget(facts);
    let new_else = else_case.as_ref().map(|e| {
        let facts = m.scope().assume(&new_cond, false);
        let new_e = m.mutate_stmt(e);
        m.scope().forget(facts);
        new_e
    });
    let else_same = match (else_case, &new_else) {
        (Some(a), Some(b)) => a.same_node(b),
        _ => true,
    };
    if new_cond.same_node(cond) && new_then.same_node(then_case) && else_same {
        return stmt.clone();
    }
    Stmt::new(StmtKind::If { cond: new_cond, then_case: new_then, else_case: new_else })
}
