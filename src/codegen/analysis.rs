//! Queries over the loop IR that code generation needs before translating a statement.

use std::collections::BTreeMap;

use rustc_hash::FxHashSet as HashSet;

use ir::expr::VarId;
use ir::stmt::BufferId;
use ir::{Buffer, Expr, ExprKind, ForKind, Stmt, StmtKind, Var};

use super::types::{is_pieces, lanes_per_piece};

/// Calls `on_stmt` for every statement and `on_expr` for every expression node under `stmt`;
/// `in_parallel` tells whether the node sits inside the body of a `Parallel` loop.
fn walk(stmt: &Stmt, in_parallel: bool, on_stmt: &mut dyn FnMut(&Stmt, bool), on_expr: &mut dyn FnMut(&Expr, bool)) {
    on_stmt(stmt, in_parallel);
    let mut exprs = |e: &Expr| e.for_each(&mut |node| on_expr(node, in_parallel));
    match stmt.kind() {
        StmtKind::For { kind, body, .. } => walk(body, in_parallel || *kind == ForKind::Parallel, on_stmt, on_expr),
        StmtKind::Let { value, body, .. } => {
            exprs(value);
            walk(body, in_parallel, on_stmt, on_expr);
        }
        StmtKind::Store { indices, value, .. } => {
            indices.iter().for_each(&mut exprs);
            exprs(value);
        }
        StmtKind::BoundsCheck { cond, .. } => exprs(cond),
        StmtKind::If { cond, then_case, else_case } => {
            exprs(cond);
            walk(then_case, in_parallel, on_stmt, on_expr);
            if let Some(e) = else_case {
                walk(e, in_parallel, on_stmt, on_expr);
            }
        }
        StmtKind::Seq(stmts) => stmts.iter().for_each(|s| walk(s, in_parallel, on_stmt, on_expr)),
        StmtKind::Allocate { body, .. } => walk(body, in_parallel, on_stmt, on_expr),
        // Code generation runs a kernel on the operands or the fallback, so both are uses.
        StmtKind::Call { operands, fallback, range, .. } => {
            operands.iter().flat_map(|o| &o.origin).for_each(&mut exprs);
            if let Some(r) = range {
                exprs(&r.first);
                exprs(&r.last);
            }
            walk(fallback, in_parallel, on_stmt, on_expr)
        }
    }
}

/// Buffers that some `Store` or intrinsic call (its output, the last operand) under `stmt`
/// writes.
pub(crate) fn stored_buffers(stmt: &Stmt) -> HashSet<BufferId> {
    let mut stored = HashSet::default();
    walk(
        stmt,
        false,
        &mut |s, _| match s.kind() {
            StmtKind::Store { buffer, .. } => {
                stored.insert(buffer.id());
            }
            StmtKind::Call { operands, .. } => {
                stored.extend(operands.last().map(|o| o.buffer.id()));
            }
            _ => {}
        },
        &mut |_, _| {},
    );
    stored
}

/// What the body of an outlined loop uses from its surroundings, ordered by id.
pub(crate) struct Captures {
    pub vars: Vec<Var>,
    pub buffers: Vec<Buffer>,
}

/// Variables and buffers used in `body` but bound outside it. Ids are unique per binding, so
/// "bound anywhere inside" equals "bound in scope".
pub(crate) fn captures(body: &Stmt) -> Captures {
    let mut used_vars = BTreeMap::new();
    let mut used_bufs = BTreeMap::new();
    let mut stmt_bufs = BTreeMap::new();
    let mut bound_vars = HashSet::default();
    let mut bound_bufs = HashSet::default();
    walk(
        body,
        false,
        &mut |s, _| match s.kind() {
            StmtKind::For { var, .. } | StmtKind::Let { var, .. } => {
                bound_vars.insert(var.id());
            }
            StmtKind::Allocate { buffer, .. } => {
                bound_bufs.insert(buffer.id());
            }
            StmtKind::Store { buffer, .. } => {
                stmt_bufs.insert(buffer.id(), buffer.clone());
            }
            StmtKind::Call { operands, .. } => {
                for o in operands {
                    stmt_bufs.insert(o.buffer.id(), o.buffer.clone());
                }
            }
            _ => {}
        },
        &mut |e, _| match e.kind() {
            ExprKind::Var(v) => {
                used_vars.insert(v.id(), v.clone());
            }
            ExprKind::Load(b, _) => {
                used_bufs.insert(b.id(), b.clone());
            }
            _ => {}
        },
    );
    used_bufs.append(&mut stmt_bufs);
    let keep_vars = |id: &VarId| !bound_vars.contains(id);
    Captures {
        vars: used_vars.into_iter().filter(|(id, _)| keep_vars(id)).map(|(_, v)| v).collect(),
        buffers: used_bufs.into_iter().filter(|(id, _)| !bound_bufs.contains(id)).map(|(_, b)| b).collect(),
    }
}

/// How an `Allocate`d buffer is kept in SSA variables instead of memory.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Promotion {
    /// One variable per 128-bit piece; every access is a piece-aligned contiguous vector.
    Pieces(usize),
    /// One variable per element; every access has a constant index.
    Elements(usize),
}

/// Most variables a promoted buffer may use: x64 has 16 vector registers, and a register-blocked
/// accumulator tile that does not fit would spill anyway.
const MAX_PROMOTED_PIECES: usize = 32;
const MAX_PROMOTED_ELEMENTS: usize = 64;

/// Whether `buffer`, allocated around `body`, can live in variables: every access uses a
/// constant index (a scalar `Int` or a `Ramp(Int, 1)`), none happens inside a parallel loop
/// (that code is a different function), no intrinsic call takes it as an operand, and the
/// buffer is small. This is what turns a
/// register-blocked accumulator tile into registers.
pub(crate) fn promotion(buffer: &Buffer, body: &Stmt) -> Option<Promotion> {
    let len = usize::try_from(buffer.len()).ok()?;
    let mut store_indices = Vec::new();
    let mut load_indices = Vec::new();
    let mut call_operand = false;
    walk(
        body,
        false,
        &mut |s, par| match s.kind() {
            StmtKind::Store { buffer: b, indices, .. } if b == buffer => store_indices.push((indices.clone(), par)),
            StmtKind::Call { operands, .. } => call_operand |= operands.iter().any(|o| &o.buffer == buffer),
            _ => {}
        },
        &mut |e, par| {
            if let ExprKind::Load(b, indices) = e.kind()
                && b == buffer
            {
                load_indices.push((indices.clone(), par));
            }
        },
    );
    // A kernel reads and writes its operands in memory.
    if call_operand {
        return None;
    }
    let mut accesses = Vec::new();
    for (indices, in_parallel) in store_indices.iter().chain(&load_indices) {
        match (indices.as_slice(), *in_parallel) {
            ([index], false) => match constant_access(index) {
                Some((start, lanes)) if start >= 0 && start as usize + lanes as usize <= len => {
                    accesses.push((start as usize, lanes))
                }
                _ => return None,
            },
            _ => return None,
        }
    }
    if accesses.is_empty() {
        return None;
    }
    let scalar = buffer.dtype().scalar;
    let n = lanes_per_piece(scalar) as usize;
    let piece_aligned =
        accesses.iter().all(|&(start, lanes)| is_pieces(buffer.dtype().with_lanes(lanes)) && start % n == 0);
    let pieces = len.div_ceil(n);
    if piece_aligned && pieces <= MAX_PROMOTED_PIECES {
        Some(Promotion::Pieces(pieces))
    } else if len <= MAX_PROMOTED_ELEMENTS {
        Some(Promotion::Elements(len))
    } else {
        None
    }
}

/// `(start, lanes)` of an index that is a constant scalar or a constant contiguous ramp.
pub(crate) fn constant_access(index: &Expr) -> Option<(i64, u16)> {
    match index.kind() {
        ExprKind::Int(c) => Some((*c, 1)),
        ExprKind::Ramp(base, stride) if stride.as_int() == Some(1) => Some((base.as_int()?, index.dtype().lanes)),
        _ => None,
    }
}
