//! Common-subexpression elimination and loop-invariant hoisting of pure expressions.
//!
//! Cranelift at `opt_level=none` does neither, and the loop IR recomputes index arithmetic at
//! every access. Expressions are numbered structurally; a translated value is reused while
//! the block that computed it dominates the translation point (scopes follow loops and
//! branches). Entering a serial loop first evaluates its maximal loop-invariant subexpressions
//! in the preheader. A load is pure when nothing in the function stores to its buffer, and
//! every load is in bounds (`guard_accesses`), so hoisting one out of a branch is safe. A load
//! of a buffer the function writes is numbered within one memory epoch only: the translator
//! starts a new epoch at every store, call and region boundary, so such a load is reused within
//! one expression or a run of lets (the accumulator that `relu`'s `select(0 < x, x, 0)` reads
//! twice) but never across a write, and never hoisted.

use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};

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
    /// The memory epoch, for a load of a buffer the function writes (or a node above one).
    epoch: Option<u32>,
}

/// The number of a node; `epoch` is set when it is valid in that memory epoch only.
#[derive(Clone, Copy)]
struct Numbered {
    number: Option<u32>,
    epoch: Option<u32>,
}

/// Structural numbering of pure expressions, and translated values by number.
#[derive(Default)]
pub(crate) struct ExprCache {
    /// Number of each node seen, by address; holding the node keeps its address from being
    /// reused.
    nodes: HashMap<usize, (Expr, Numbered)>,
    keys: HashMap<Key, u32>,
    values: HashMap<u32, Val>,
    /// Numbers inserted in each open scope, innermost last.
    scopes: Vec<Vec<u32>>,
    /// The current memory epoch.
    epoch: u32,
}

fn node_addr(e: &Expr) -> usize {
    std::ptr::from_ref(e.kind()) as usize
}

impl ExprCache {
    /// The structural number of `e`, or `None` if it reads memory the function writes in a
    /// way numbering cannot follow (a tensor read, a reduction).
    pub fn number(&mut self, e: &Expr, readonly: &HashSet<BufferId>) -> Option<u32> {
        self.numbered(e, readonly).number
    }

    fn numbered(&mut self, e: &Expr, readonly: &HashSet<BufferId>) -> Numbered {
        let epoch = self.epoch;
        if let Some((_, n)) = self.nodes.get(&node_addr(e))
            && n.epoch.is_none_or(|at| at == epoch)
        {
            return *n;
        }
        let children: Vec<Numbered> = e.children().into_iter().map(|c| self.numbered(c, readonly)).collect();
        let mut volatile = children.iter().any(|c| c.epoch.is_some());
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
            ExprKind::Load(b, _) => {
                volatile |= !readonly.contains(&b.id());
                (9, b.id().0 as u64)
            }
            ExprKind::Ramp(..) => (10, 0),
            ExprKind::Broadcast(_) => (11, 0),
            ExprKind::VectorReduce(op, _) => (12, *op as u64),
            ExprKind::Round(_) => (13, 0),
            ExprKind::Sqrt(_) => (14, 0),
            ExprKind::Reinterpret(_) => (15, 0),
            ExprKind::Fma(..) => (16, 0),
            ExprKind::TensorRead(..) | ExprKind::Reduce(_) => (u8::MAX, 0),
        };
        let children: Option<Vec<u32>> = children.iter().map(|c| c.number).collect();
        let number = match children {
            Some(children) if tag != u8::MAX => {
                let key = Key { tag, dtype: e.dtype(), payload, children, epoch: volatile.then_some(epoch) };
                let next = self.keys.len() as u32;
                Some(*self.keys.entry(key).or_insert(next))
            }
            _ => None,
        };
        let numbered = Numbered { number, epoch: volatile.then_some(epoch) };
        self.nodes.insert(node_addr(e), (e.clone(), numbered));
        numbered
    }

    /// Memory may have changed: values read from written buffers are no longer reusable.
    pub fn memory_changed(&mut self) {
        self.epoch += 1;
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
        self.memory_changed();
        self.scopes.push(Vec::new());
    }

    pub fn pop_scope(&mut self) {
        self.memory_changed();
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
    let mut bound = HashSet::from_iter([loop_var]);
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
        StmtKind::Store { .. } | StmtKind::BoundsCheck { .. } => {}
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
        StmtKind::BoundsCheck { cond, .. } => f(cond, false),
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
