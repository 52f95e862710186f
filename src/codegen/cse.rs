//! Common-subexpression elimination and loop-invariant hoisting of pure expressions.
//!
//! Cranelift at `opt_level=none` does neither, and the loop IR recomputes index arithmetic at
//! every access. Expressions are numbered structurally; a translated value is reused while
//! the block that computed it dominates the translation point (scopes follow loops and
//! branches). Entering a serial loop first evaluates its maximal loop-invariant subexpressions
//! in the preheader. Only pure expressions take part: a load is pure when nothing in the
//! function stores to its buffer, and every load is in bounds (`guard_accesses`), so hoisting
//! one out of a branch is safe.

use std::collections::{HashMap, HashSet};

use ir::expr::VarId;
use ir::stmt::BufferId;
use ir::{DType, Expr, ExprKind, ForKind, Stmt, StmtKind};

use super::types::Val;

/// The structure of one expression node, with children by number.
#[derive(Clone, PartialEq, Eq, Hash)]
struct Key {
    tag: u8,
    dtype: DType,
    payload: u64,
    children: Vec<u32>,
}

/// Structural numbering of pure expressions, and translated values by number.
#[derive(Default)]
pub(crate) struct ExprCache {
    /// Number of each node seen, by address (`None`: impure); holding the node keeps its
    /// address from being reused.
    nodes: HashMap<usize, (Expr, Option<u32>)>,
    keys: HashMap<Key, u32>,
    values: HashMap<u32, Val>,
    /// Numbers inserted in each open scope, innermost last.
    scopes: Vec<Vec<u32>>,
}

fn node_addr(e: &Expr) -> usize {
    std::ptr::from_ref(e.kind()) as usize
}

impl ExprCache {
    /// The structural number of `e`, or `None` if it reads memory that may change.
    pub fn number(&mut self, e: &Expr, readonly: &HashSet<BufferId>) -> Option<u32> {
        if let Some((_, n)) = self.nodes.get(&node_addr(e)) {
            return *n;
        }
        let children: Option<Vec<u32>> = e.children().into_iter().map(|c| self.number(c, readonly)).collect();
        let (tag, payload) = match e.kind() {
            ExprKind::Int(v) => (0, *v as u64),
            ExprKind::Float(f) => (1, f.to_bits()),
            ExprKind::Var(v) => (2, v.id().0 as u64),
            ExprKind::Binary(op, ..) => (3, *op as u64),
            ExprKind::Cmp(op, ..) => (4, *op as u64),
            ExprKind::Not(_) => (5, 0),
            ExprKind::Cast(_) => (6, 0),
            ExprKind::SaturatingCast(_) => (7, 0),
            ExprKind::Select(..) => (8, 0),
            ExprKind::Load(b, _) if readonly.contains(&b.id()) => (9, b.id().0 as u64),
            ExprKind::Ramp(..) => (10, 0),
            ExprKind::Broadcast(_) => (11, 0),
            ExprKind::VectorReduce(op, _) => (12, *op as u64),
            ExprKind::Round(_) => (13, 0),
            ExprKind::Load(..) | ExprKind::TensorRead(..) | ExprKind::Reduce(_) => (u8::MAX, 0),
        };
        let number = match children {
            Some(children) if tag != u8::MAX => {
                let key = Key { tag, dtype: e.dtype(), payload, children };
                let next = self.keys.len() as u32;
                Some(*self.keys.entry(key).or_insert(next))
            }
            _ => None,
        };
        self.nodes.insert(node_addr(e), (e.clone(), number));
        number
    }

    pub fn get(&self, number: u32) -> Option<Val> {
        self.values.get(&number).cloned()
    }

    pub fn insert(&mut self, number: u32, v: Val) {
        self.values.insert(number, v);
        if let Some(scope) = self.scopes.last_mut() {
            scope.push(number);
        }
    }

    /// Opens a region whose values do not dominate the code after it (a loop body, a branch).
    pub fn push_scope(&mut self) {
        self.scopes.push(Vec::new());
    }

    pub fn pop_scope(&mut self) {
        for n in self.scopes.pop().expect("balanced scopes") {
            self.values.remove(&n);
        }
    }
}

/// Constants and variables are cheaper to rematerialize than to keep live.
pub(crate) fn is_trivial(e: &Expr) -> bool {
    matches!(e.kind(), ExprKind::Int(_) | ExprKind::Float(_) | ExprKind::Var(_))
}

/// The maximal non-trivial subexpressions of `body` (outside nested parallel loops, which are
/// other functions) that use no variable bound in `body`, nor `loop_var`, and are pure.
pub(crate) fn loop_invariants(body: &Stmt, loop_var: VarId, readonly: &HashSet<BufferId>) -> Vec<Expr> {
    let mut bound = HashSet::from([loop_var]);
    collect_bound(body, &mut bound);
    let mut out = Vec::new();
    visit_exprs(body, &mut |e, is_index| {
        if invariant_parts(e, &bound, readonly, &mut out) {
            push_candidate(e, is_index, &mut out);
        }
    });
    out
}

/// Records an invariant expression worth hoisting. A memory access evaluates only the parts
/// of a ramp or broadcast index, so for an index those parts are hoisted instead.
fn push_candidate(e: &Expr, is_index: bool, out: &mut Vec<Expr>) {
    match e.kind() {
        ExprKind::Ramp(..) | ExprKind::Broadcast(_) if is_index => {
            e.children().into_iter().for_each(|c| push_candidate(c, false, out))
        }
        _ if is_trivial(e) => {}
        _ => out.push(e.clone()),
    }
}

fn collect_bound(stmt: &Stmt, bound: &mut HashSet<VarId>) {
    match stmt.kind() {
        StmtKind::For { var, body, .. } | StmtKind::Let { var, body, .. } => {
            bound.insert(var.id());
            collect_bound(body, bound);
        }
        StmtKind::If { then_case, else_case, .. } => {
            collect_bound(then_case, bound);
            if let Some(e) = else_case {
                collect_bound(e, bound);
            }
        }
        StmtKind::Seq(stmts) => stmts.iter().for_each(|s| collect_bound(s, bound)),
        StmtKind::Allocate { body, .. } => collect_bound(body, bound),
        StmtKind::Call { fallback, .. } => collect_bound(fallback, bound),
        StmtKind::Store { .. } => {}
    }
}

/// Calls `f(root, is_index)` on every expression root of `stmt`, skipping parallel loop bodies.
fn visit_exprs(stmt: &Stmt, f: &mut dyn FnMut(&Expr, bool)) {
    match stmt.kind() {
        StmtKind::For { kind: ForKind::Parallel, .. } => {}
        StmtKind::For { body, .. } | StmtKind::Allocate { body, .. } => visit_exprs(body, f),
        StmtKind::Let { value, body, .. } => {
            f(value, false);
            visit_exprs(body, f);
        }
        StmtKind::Store { indices, value, .. } => {
            indices.iter().for_each(|i| f(i, true));
            f(value, false);
        }
        StmtKind::If { cond, then_case, else_case } => {
            f(cond, false);
            visit_exprs(then_case, f);
            if let Some(e) = else_case {
                visit_exprs(e, f);
            }
        }
        StmtKind::Seq(stmts) => stmts.iter().for_each(|s| visit_exprs(s, f)),
        StmtKind::Call { fallback, .. } => visit_exprs(fallback, f),
    }
}

/// True if `e` is invariant; otherwise pushes its maximal invariant parts.
fn invariant_parts(e: &Expr, bound: &HashSet<VarId>, readonly: &HashSet<BufferId>, out: &mut Vec<Expr>) -> bool {
    let children = e.children();
    let flags: Vec<bool> = children.iter().map(|c| invariant_parts(c, bound, readonly, out)).collect();
    let local = match e.kind() {
        ExprKind::Var(v) => !bound.contains(&v.id()),
        ExprKind::Load(b, _) => readonly.contains(&b.id()),
        ExprKind::TensorRead(..) | ExprKind::Reduce(_) => false,
        _ => true,
    };
    if local && flags.iter().all(|&f| f) {
        return true;
    }
    let is_load = matches!(e.kind(), ExprKind::Load(..));
    for (c, f) in children.into_iter().zip(flags) {
        if f {
            push_candidate(c, is_load, out);
        }
    }
    false
}
