//! Zero segment ranges: a segmented GEMM call whose first or last segments, for some values of
//! the enclosing loop variables, read only elements the function provably stored as the
//! constant 0 (the padding rows of a convolution whose pad value is 0) gets a segment range
//! (`StmtKind::Call::range`) computed from its `A` origin at run time, so the kernel skips them.

use rustc_hash::FxHashMap as HashMap;
use std::rc::Rc;

use crate::dtype::DType;
use crate::expr::{BinOp, CmpOp, Expr, ExprKind, Var, max, min};
use crate::intrin::{Segments, TensorIntrin, segmented_gemm};
use crate::mutator::for_each_stmt;
use crate::stmt::{Buffer, BufferId, Func, Operand, SegmentRange, Stmt, StmtKind};

mod runs;
use runs::ZeroRuns;

/// Elements of an allocation the proof tracks at most; larger buffers are never proven zero.
const MAX_CELLS: i64 = 1 << 22;
/// Evaluation steps the proof spends per function at most (a bound on compile time); past it,
/// nothing more is proven and the rest of the function stays as it is.
const MAX_WORK: u64 = 1 << 22;

/// Gives every `Int8Gemm`/`Int16Gemm` call of `S > 1` segments (or `GemmMap` call of one),
/// without a range, whose `A` buffer provably holds 0 in its first `Z0` elements or its last
/// `len - Z1` ones where the call runs, the range `[first, last)` with (floor division, `o`
/// the flat `A` origin, `lds > 0` the segment stride, `h = (m-1)·lda + k - 1` the offset of a
/// segment's last element from its first, `lda ≥ 0`):
///
/// `first = clamp((Z0 - h - 1 + lds - o) / lds, 0, S)`, `last = clamp((Z1 + lds - 1 - o) / lds, 0, S)`.
///
/// The argument: segment `s` reads `[o + s·lds, o + s·lds + h]`, inside `A`'s buffer (calls
/// read only inside their buffers). For `s < first`, `s·lds ≤ Z0 - h - 1 - o`, so the whole
/// segment lies below `Z0`: zeros. For `s ≥ last`, `s·lds ≥ Z1 - o`, so the segment starts at
/// `Z1` or later: zeros. Segments outside `[first, last)` (all of them when `first ≥ last`)
/// therefore read only zeros, and the call with the range computes what the call without it
/// does (`IntrinKind::Int8Gemm`: the range is the declaration on such an `A`). `o` is the
/// origin as the call evaluates it, for whatever values the loop variables take, so nothing is
/// peeled or split and parallel loops (fused rows and panels, `/` and `%`) are covered alike;
/// `Z0` and `Z1` are constants proven for every iteration. Calls whose range is `[0, S)` at
/// every point of the loops their origin uses (enumerated, within the work budget) are left
/// as they are.
///
/// The proof of `Z0`, `Z1`, in program order: an allocation's elements start unknown; a nest
/// of loops, lets, ifs (whose conditions evaluate on the index variables) and stores sets each
/// element it stores to "zero" or "unknown" by the stored value (an integer 0, a cast of one,
/// or a select whose condition evaluates on the index variables), enumerating its iterations;
/// a fact holds for every value the enclosing loop variables take there. An innermost loop
/// storing `buffer[e + var]` runs at once (`fill_range`): its value's zero test either does not
/// read `var`, or is a select whose condition is a conjunction of comparisons linear in `var`,
/// `coefficient·var + d ≤ 0` each, which holds exactly on the `var` of an interval computed
/// from `d` (the comparison's value at `var = 0`); the elements before, inside and after it
/// get the zero test of the select's one or other value, as enumerating them would. Any other statement
/// that writes a buffer (a call) makes it unknown, as does a loop for the buffers its body
/// writes (at its start: every kind of loop computes what the serial one does). A source whose
/// pad value is not a literal 0 proves nothing, and its calls stay as they are.
///
/// Run after `flatten_buffers` (origins and indices are flat) and `fuse_epilogues` (which then
/// sees the calls as built).
pub fn zero_segment_range(func: &Func) -> Func {
    with_closed_form(func, true)
}

/// `zero_segment_range`, running the stores' innermost loops at once when `closed_form`, or
/// element by element (its slow twin).
fn with_closed_form(func: &Func, closed_form: bool) -> Func {
    // Only a store of a value that can be 0 (`is_zero`) makes an element zero: without one,
    // no call gets a range, and the proof's enumeration of the stores is skipped.
    if !stores_a_possible_zero(&func.body) {
        return func.clone();
    }
    let mut pass = ZeroSegmentRange { work: 0, closed_form };
    let body = pass.stmt(&func.body, &mut Env::default(), &mut Zeros::default());
    Func { name: func.name.clone(), params: func.params.clone(), body }
}

struct ZeroSegmentRange {
    work: u64,
    /// Whether innermost loops `fill_range` accepts are run at once; the enumerating slow
    /// twin (tests) runs every element.
    closed_form: bool,
}

/// The enclosing loops' ranges `[lo, hi)` and the index lets in scope.
#[derive(Default, Clone)]
struct Env {
    loops: Vec<(Var, i64, i64)>,
    lets: Vec<(Var, Expr)>,
}

/// Per tracked allocation, the elements known to hold 0 (for every value of the enclosing loop
/// variables); shared until written.
#[derive(Default, Clone)]
struct Zeros(HashMap<BufferId, Rc<ZeroRuns>>);

impl Zeros {
    fn forget(&mut self, buffers: &[Buffer]) {
        for b in buffers {
            if let Some(bits) = self.0.get_mut(&b.id())
                && bits.any()
            {
                *bits = Rc::new(ZeroRuns::none(bits.len()));
            }
        }
    }
}

fn has_gemm(stmt: &Stmt) -> bool {
    let mut found = false;
    for_each_stmt(stmt, &mut |s| {
        if let StmtKind::Call { intrin, .. } = s.kind() {
            found |= segmented_gemm(intrin).is_some();
        }
    });
    found
}

/// Whether `stmt` holds a segmented GEMM call reading `buffer` as `A`.
fn reads_as_a(stmt: &Stmt, buffer: &Buffer) -> bool {
    let mut found = false;
    for_each_stmt(stmt, &mut |s| {
        if let StmtKind::Call { intrin, operands, .. } = s.kind() {
            found |= segmented_gemm(intrin).is_some() && operands.first().is_some_and(|a| &a.buffer == buffer);
        }
    });
    found
}

/// The buffers `stmt` writes: stored to, or a call's output.
fn written(stmt: &Stmt) -> Vec<Buffer> {
    let mut out: Vec<Buffer> = Vec::new();
    for_each_stmt(stmt, &mut |s| {
        let b = match s.kind() {
            StmtKind::Store { buffer, .. } => buffer,
            StmtKind::Call { operands, .. } => match operands.last() {
                Some(o) => &o.buffer,
                None => return,
            },
            _ => return,
        };
        if !out.contains(b) {
            out.push(b.clone());
        }
    });
    out
}

/// Whether `stmt` is loops, lets, ifs and stores only.
fn is_store_nest(stmt: &Stmt) -> bool {
    let mut ok = true;
    for_each_stmt(stmt, &mut |s| {
        ok &= matches!(
            s.kind(),
            StmtKind::For { .. }
                | StmtKind::Let { .. }
                | StmtKind::If { .. }
                | StmtKind::Store { .. }
                | StmtKind::Seq(_)
        )
    });
    ok
}

/// Values of index variables; `None` for a variable bound to something not evaluable. A few
/// at a time (the loops and lets in scope), found by a scan: the proof looks them up for every
/// element it enumerates, where hashing costs more than the scan.
#[derive(Clone, Default)]
struct Assignment(Vec<(Var, Option<i64>)>);

impl Assignment {
    fn get(&self, v: &Var) -> Option<&Option<i64>> {
        self.0.iter().find(|(x, _)| x == v).map(|(_, value)| value)
    }

    /// Binds `v`; its previous binding, if any.
    fn insert(&mut self, v: Var, value: Option<i64>) -> Option<Option<i64>> {
        match self.0.iter_mut().find(|(x, _)| *x == v) {
            Some(slot) => Some(std::mem::replace(&mut slot.1, value)),
            None => {
                self.0.push((v, value));
                None
            }
        }
    }

    fn remove(&mut self, v: &Var) -> Option<Option<i64>> {
        let at = self.0.iter().position(|(x, _)| x == v)?;
        Some(self.0.swap_remove(at).1)
    }

    fn clear(&mut self) {
        self.0.clear();
    }
}

impl FromIterator<(Var, Option<i64>)> for Assignment {
    fn from_iter<I: IntoIterator<Item = (Var, Option<i64>)>>(iter: I) -> Assignment {
        let mut at = Assignment::default();
        for (v, value) in iter {
            at.insert(v, value);
        }
        at
    }
}

/// `e` evaluated on index (and bool) arithmetic, if every variable it reads has a value.
fn eval(e: &Expr, at: &Assignment) -> Option<i64> {
    let index_or_bool = |d: DType| d == DType::INDEX || d == DType::BOOL;
    if !index_or_bool(e.dtype()) {
        return None;
    }
    match e.kind() {
        ExprKind::Int(v) if e.dtype() == DType::BOOL => Some(i64::from(*v != 0)),
        ExprKind::Int(v) => Some(*v),
        ExprKind::Var(v) => *at.get(v)?,
        ExprKind::Binary(op, a, b) => {
            let (x, y) = (eval(a, at)?, eval(b, at)?);
            Some(match op {
                BinOp::Add => x.checked_add(y)?,
                BinOp::Sub => x.checked_sub(y)?,
                BinOp::Mul => x.checked_mul(y)?,
                BinOp::Div if y == 0 => 0,
                BinOp::Div => x.div_euclid(y) - i64::from(y < 0 && x.rem_euclid(y) != 0),
                BinOp::Mod if y == 0 => 0,
                BinOp::Mod => x - y * (x.div_euclid(y) - i64::from(y < 0 && x.rem_euclid(y) != 0)),
                BinOp::Min => x.min(y),
                BinOp::Max => x.max(y),
                BinOp::And if e.dtype() == DType::BOOL => x & y,
                BinOp::Or if e.dtype() == DType::BOOL => x | y,
                _ => return None,
            })
        }
        ExprKind::Cmp(op, a, b) if a.dtype() == DType::INDEX => {
            let (x, y) = (eval(a, at)?, eval(b, at)?);
            Some(i64::from(match op {
                CmpOp::Lt => x < y,
                CmpOp::Le => x <= y,
                CmpOp::Gt => x > y,
                CmpOp::Ge => x >= y,
                CmpOp::Eq => x == y,
                CmpOp::Ne => x != y,
            }))
        }
        ExprKind::Not(a) if e.dtype() == DType::BOOL => Some(1 - eval(a, at)?),
        _ => None,
    }
}

/// Whether some store of `stmt` into a buffer a segmented GEMM call reads as `A` (the only
/// buffers the proof tracks) writes a value `is_zero` can find 0 at some point.
fn stores_a_possible_zero(stmt: &Stmt) -> bool {
    fn can_be_zero(e: &Expr) -> bool {
        e.dtype().is_int()
            && match e.kind() {
                ExprKind::Int(v) => *v == 0,
                ExprKind::Cast(a) | ExprKind::SaturatingCast(a) | ExprKind::Broadcast(a) => can_be_zero(a),
                ExprKind::Select(_, a, b) => can_be_zero(a) || can_be_zero(b),
                _ => false,
            }
    }
    let mut sources: Vec<BufferId> = Vec::new();
    for_each_stmt(stmt, &mut |s| {
        if let StmtKind::Call { intrin, operands, .. } = s.kind()
            && segmented_gemm(intrin).is_some()
            && let Some(a) = operands.first()
        {
            sources.push(a.buffer.id());
        }
    });
    let mut found = false;
    for_each_stmt(stmt, &mut |s| {
        if let StmtKind::Store { buffer, value, .. } = s.kind() {
            found |= sources.contains(&buffer.id()) && can_be_zero(value);
        }
    });
    found
}

/// Whether the integer value `e` is 0 at `at`, provably.
fn is_zero(e: &Expr, at: &Assignment) -> bool {
    if !e.dtype().is_int() {
        return false;
    }
    match e.kind() {
        ExprKind::Int(v) => *v == 0,
        ExprKind::Cast(a) | ExprKind::SaturatingCast(a) | ExprKind::Broadcast(a) => is_zero(a, at),
        ExprKind::Select(c, a, b) => match eval(c, at) {
            Some(0) => is_zero(b, at),
            Some(_) => is_zero(a, at),
            None => is_zero(a, at) && is_zero(b, at),
        },
        _ => false,
    }
}

/// The variables of `env` that `exprs` read, through the lets in scope.
fn env_vars(env: &Env, exprs: &[&Expr]) -> Vec<(Var, i64, i64)> {
    let mut seen: Vec<Var> = Vec::new();
    let mut stack: Vec<Expr> = exprs.iter().map(|e| (*e).clone()).collect();
    while let Some(e) = stack.pop() {
        e.for_each(&mut |x| {
            if let ExprKind::Var(v) = x.kind()
                && !seen.contains(v)
            {
                seen.push(v.clone());
                if let Some((_, value)) = env.lets.iter().rev().find(|(l, _)| l == v) {
                    stack.push(value.clone());
                }
            }
        });
    }
    env.loops.iter().filter(|(v, _, _)| seen.contains(v)).cloned().collect()
}

/// Calls `f` at every point of `vars`' ranges, with the lets of `env` bound; stops (false) when
/// `f` does or the work budget runs out.
fn for_points(
    work: &mut u64,
    env: &Env,
    vars: &[(Var, i64, i64)],
    f: &mut dyn FnMut(&Assignment, &mut u64) -> bool,
) -> bool {
    let mut at = Assignment::default();
    let mut point: Vec<i64> = vars.iter().map(|(_, lo, _)| *lo).collect();
    if vars.iter().any(|(_, lo, hi)| hi <= lo) {
        return true;
    }
    loop {
        *work += 1;
        if *work > MAX_WORK {
            return false;
        }
        at.clear();
        for ((v, _, _), p) in vars.iter().zip(&point) {
            at.insert(v.clone(), Some(*p));
        }
        for (v, value) in &env.lets {
            let x = eval(value, &at);
            at.insert(v.clone(), x);
        }
        if !f(&at, work) {
            return false;
        }
        let mut d = vars.len();
        loop {
            if d == 0 {
                return true;
            }
            d -= 1;
            point[d] += 1;
            if point[d] < vars[d].2 {
                break;
            }
            point[d] = vars[d].1;
        }
    }
}

impl ZeroSegmentRange {
    /// `stmt` rewritten, and `zeros` updated past it.
    fn stmt(&mut self, stmt: &Stmt, env: &mut Env, zeros: &mut Zeros) -> Stmt {
        if !has_gemm(stmt) {
            if is_store_nest(stmt) {
                self.stores(stmt, env, zeros);
            } else {
                zeros.forget(&written(stmt));
            }
            return stmt.clone();
        }
        match stmt.kind() {
            StmtKind::Seq(stmts) => Stmt::seq(stmts.iter().map(|s| self.stmt(s, env, zeros)).collect()),
            StmtKind::Allocate { buffer, body } => {
                let tracked = buffer.dtype().is_int() && buffer.len() <= MAX_CELLS && reads_as_a(body, buffer);
                if tracked {
                    zeros.0.insert(buffer.id(), Rc::new(ZeroRuns::none(buffer.len() as usize)));
                }
                let body = self.stmt(body, env, zeros);
                zeros.0.remove(&buffer.id());
                Stmt::allocate(buffer.clone(), body)
            }
            StmtKind::Let { var, value, body } => {
                env.lets.push((var.clone(), value.clone()));
                let body = self.stmt(body, env, zeros);
                env.lets.pop();
                Stmt::let_stmt(var.clone(), value.clone(), body)
            }
            StmtKind::If { cond, then_case, else_case } => {
                let then_case = self.stmt(then_case, env, &mut zeros.clone());
                let else_case = else_case.as_ref().map(|e| self.stmt(e, env, &mut zeros.clone()));
                zeros.forget(&written(stmt));
                Stmt::new(StmtKind::If { cond: cond.clone(), then_case, else_case })
            }
            StmtKind::For { var, extent, kind, body } => {
                // What the body writes is unknown at an iteration's start (the previous ones
                // wrote it).
                let mut inner = zeros.clone();
                inner.forget(&written(body));
                env.loops.push((var.clone(), 0, *extent));
                let body = self.stmt(body, env, &mut inner);
                env.loops.pop();
                zeros.forget(&written(stmt));
                Stmt::for_loop(var.clone(), *extent, *kind, body)
            }
            StmtKind::Call { intrin, operands, reset, fallback, range: None } => {
                let out = self.call(intrin, operands, env, zeros).map_or_else(
                    || stmt.clone(),
                    |r| Stmt::call_in_range(intrin.clone(), operands.clone(), *reset, fallback.clone(), Some(r)),
                );
                zeros.forget(&written(stmt));
                out
            }
            _ => {
                zeros.forget(&written(stmt));
                stmt.clone()
            }
        }
    }

    /// Applies the stores of the loops-lets-stores nest `stmt` to `zeros`, for every value of
    /// the enclosing variables it reads (an element is zero after it when it is for all).
    fn stores(&mut self, stmt: &Stmt, env: &Env, zeros: &mut Zeros) {
        let targets: Vec<Buffer> = written(stmt).into_iter().filter(|b| zeros.0.contains_key(&b.id())).collect();
        if targets.is_empty() {
            return;
        }
        let mut exprs: Vec<Expr> = Vec::new();
        crate::mutator::for_each_stmt_expr(stmt, &mut |e| exprs.push(e.clone()));
        let vars = env_vars(env, &exprs.iter().collect::<Vec<_>>());
        // The facts before the nest, taken out of `zeros` (copied only when shared or when
        // the nest runs at more than one point).
        let mut before: HashMap<BufferId, ZeroRuns> = targets
            .iter()
            .filter_map(|b| zeros.0.remove(&b.id()).map(|bits| (b.id(), Rc::unwrap_or_clone(bits))))
            .collect();
        let points: i64 = vars.iter().map(|(_, lo, hi)| (hi - lo).max(0)).product();
        let mut result: Option<HashMap<BufferId, ZeroRuns>> = None;
        let mut fills = Fills::new();
        let closed_form = self.closed_form;
        let complete = for_points(&mut self.work, env, &vars, &mut |at, work| {
            let mut state = if points == 1 { std::mem::take(&mut before) } else { before.clone() };
            let mut at = at.clone();
            if !exec(stmt, &mut at, &mut state, work, closed_form.then_some(&mut fills)) {
                return false;
            }
            match &mut result {
                None => result = Some(state),
                Some(r) => {
                    for (id, bits) in r.iter_mut() {
                        bits.intersect(&state[id]);
                    }
                }
            }
            true
        });
        match (complete, result) {
            (true, Some(r)) => zeros.0.extend(r.into_iter().map(|(id, bits)| (id, Rc::new(bits)))),
            _ => {
                for b in &targets {
                    zeros.0.insert(b.id(), Rc::new(ZeroRuns::none(b.len() as usize)));
                }
            }
        }
    }

    /// The range of a call (see `zero_segment_range`), where `A`'s buffer has a zero prefix or
    /// suffix and the range is not every segment at some point of the loops.
    fn call(&mut self, intrin: &TensorIntrin, operands: &[Operand], env: &Env, zeros: &Zeros) -> Option<SegmentRange> {
        let Segments { count, k, m, .. } = segmented_gemm(intrin)?;
        let (a, out) = (operands.first()?, operands.last()?);
        let (bits, [origin], &[lda, lds, 1]) =
            (zeros.0.get(&a.buffer.id())?, a.origin.as_slice(), a.strides.as_slice())
        else {
            return None;
        };
        if out.buffer == a.buffer || lds <= 0 || lda < 0 || m <= 0 || k <= 0 {
            return None;
        }
        let len = bits.len() as i64;
        let (z0, z1) = (bits.prefix() as i64, bits.suffix_start() as i64);
        if z0 == 0 && z1 == len {
            return None;
        }
        let h = (m - 1) * lda + k - 1;
        let (first_at, last_at) = (z0 - h - 1 + lds, z1 + lds - 1);
        let clamp = |e: Expr| min(max(e, Expr::index(0)), Expr::index(count));
        let first = clamp((Expr::index(first_at) - origin.clone()) / Expr::index(lds));
        let last = clamp((Expr::index(last_at) - origin.clone()) / Expr::index(lds));
        // Whether some point of the loops skips a segment; a point that does not evaluate
        // might, so it counts as one.
        let vars = env_vars(env, &[origin]);
        let mut skips = false;
        let complete = for_points(&mut self.work, env, &vars, &mut |at, _| {
            skips = match eval(origin, at) {
                Some(o) => (first_at - o).div_euclid(lds) > 0 || (last_at - o).div_euclid(lds) < count,
                None => true,
            };
            !skips
        });
        (skips || !complete).then_some(SegmentRange { first, last })
    }
}

/// Runs the loops-lets-stores nest `stmt` at `at` on the zero facts of `state`'s buffers; false
/// when the budget runs out. A store whose index does not evaluate makes its buffer unknown.
fn exec(
    stmt: &Stmt,
    at: &mut Assignment,
    state: &mut HashMap<BufferId, ZeroRuns>,
    work: &mut u64,
    mut fills: Option<&mut Fills>,
) -> bool {
    *work += 1;
    if *work > MAX_WORK {
        return false;
    }
    match stmt.kind() {
        StmtKind::Seq(stmts) => stmts.iter().all(|s| exec(s, at, state, work, fills.as_deref_mut())),
        StmtKind::Let { var, value, body } => {
            let old = at.insert(var.clone(), eval(value, at));
            let ok = exec(body, at, state, work, fills.as_deref_mut());
            restore(at, var, old);
            ok
        }
        StmtKind::For { var, extent, body, .. } => {
            if let Some(fills) = fills.as_deref_mut() {
                let key = std::ptr::from_ref(body.kind()) as usize;
                let at_key = match fills.iter().position(|(k, _)| *k == key) {
                    Some(i) => i,
                    None => {
                        fills.push((key, fill_range(var, *extent, body)));
                        fills.len() - 1
                    }
                };
                if let Some(f) = &fills[at_key].1 {
                    fill(var, f, at, state, work);
                    return true;
                }
            }
            let old = at.remove(var);
            let mut ok = true;
            for i in 0..*extent {
                at.insert(var.clone(), Some(i));
                if !exec(body, at, state, work, fills.as_deref_mut()) {
                    ok = false;
                    break;
                }
            }
            restore(at, var, old);
            ok
        }
        // A condition that does not evaluate (it reads memory) leaves what the branches store
        // unknown: the whole nest then proves nothing.
        StmtKind::If { cond, then_case, else_case } => match eval(cond, at) {
            Some(0) => else_case.as_ref().is_none_or(|e| exec(e, at, state, work, fills.as_deref_mut())),
            Some(_) => exec(then_case, at, state, work, fills),
            None => false,
        },
        StmtKind::Store { buffer, indices, value } => {
            let Some(bits) = state.get_mut(&buffer.id()) else { return true };
            match (indices.as_slice(), value.dtype().lanes) {
                ([index], 1) => match eval(index, at) {
                    Some(i) if (0..bits.len() as i64).contains(&i) => {
                        bits.set(i as usize, i as usize + 1, is_zero(value, at))
                    }
                    _ => bits.clear(),
                },
                _ => bits.clear(),
            }
            true
        }
        _ => false,
    }
}

/// Per loop body (by node), what `fill_range` found; a few per nest, found by a scan.
type Fills = Vec<(usize, Option<Fill>)>;

/// A loop `fill_range` accepted: it stores elements `[e, e + extent)` of `buffer` (`e` is
/// `index` with the loop's variable and `inner` at 0, the lets expanded), each holding `value`.
#[derive(Clone)]
struct Fill {
    buffer: Buffer,
    index: Expr,
    value: Expr,
    extent: i64,
    /// The variables of the loops inside (a nest of fills), 0 at `e` as the loop's own.
    inner: Vec<Var>,
    /// For a value `select(cond, then, else)` whose `cond` reads the loop variable: `cond` as
    /// linear constraints on it, and the two values, whose zero tests do not read it.
    split: Option<(Vec<Constraint>, Expr, Expr)>,
}

/// `sign·(coefficient·var + d) + offset ≤ 0`, `d` the value of `diff` at `var = 0`: one
/// comparison of a conjunction, `diff` being its left side minus its right side (linear in
/// `var`, so at `var = v` it is `coefficient·v + d`).
#[derive(Clone)]
struct Constraint {
    coefficient: i64,
    diff: Expr,
    sign: i64,
    offset: i64,
}

/// `c` (lets expanded) as constraints on `var`, when it is a conjunction of comparisons of
/// index expressions linear in `var` (`!=` is not one interval: refused).
fn constraints(c: &Expr, var: &Var, out: &mut Vec<Constraint>) -> Option<()> {
    match c.kind() {
        ExprKind::Binary(BinOp::And, a, b) if c.dtype() == DType::BOOL => {
            constraints(a, var, out)?;
            constraints(b, var, out)
        }
        ExprKind::Cmp(op, a, b) if a.dtype() == DType::INDEX && b.dtype() == DType::INDEX => {
            let diff = a.clone() - b.clone();
            let form = crate::analysis::linear::Linear::of(&diff);
            let coefficient: i64 = form.terms.iter().filter(|(t, _)| t.as_var() == Some(var)).map(|(_, c)| *c).sum();
            if form.terms.iter().any(|(t, _)| t.as_var() != Some(var) && t.uses_var(var)) {
                return None;
            }
            let mut push = |sign, offset| out.push(Constraint { coefficient, diff: diff.clone(), sign, offset });
            // `a < b` ⇔ `diff + 1 ≤ 0`, `a > b` ⇔ `-diff + 1 ≤ 0`, and so on.
            match op {
                CmpOp::Lt => push(1, 1),
                CmpOp::Le => push(1, 0),
                CmpOp::Gt => push(-1, 1),
                CmpOp::Ge => push(-1, 0),
                CmpOp::Eq => {
                    push(1, 0);
                    push(-1, 0)
                }
                CmpOp::Ne => return None,
            }
            Some(())
        }
        _ => None,
    }
}

/// The values `v` in `[0, extent)` where every constraint holds, as `[lo, hi)` (empty when
/// `lo ≥ hi`); `None` when a `diff` does not evaluate at `at` (`var` bound to 0).
fn interval(constraints: &[Constraint], extent: i64, at: &Assignment) -> Option<(i64, i64)> {
    let (mut lo, mut hi) = (0i128, i128::from(extent));
    for k in constraints {
        // `c·v + r ≤ 0`, exactly (i128 holds every product of two i64).
        let c = i128::from(k.sign) * i128::from(k.coefficient);
        let r = i128::from(k.sign) * i128::from(eval(&k.diff, at)?) + i128::from(k.offset);
        match c.signum() {
            0 if r > 0 => hi = lo,
            0 => {}
            1 => hi = hi.min((-r).div_euclid(c) + 1),
            _ => lo = lo.max(-((-r).div_euclid(-c))),
        }
    }
    let clamp = |x: i128| x.clamp(0, i128::from(extent)) as i64;
    Some((clamp(lo), clamp(hi)))
}

/// Whether a select condition in `e` reads `var` or one of `lets`.
fn varies(e: &Expr, var: &Var, lets: &[(Var, Expr)]) -> bool {
    let mut out = false;
    e.for_each(&mut |x| {
        if let ExprKind::Select(c, _, _) = x.kind() {
            out |= c.uses_var(var) || lets.iter().any(|(v, _)| c.uses_var(v));
        }
    });
    out
}

/// For the innermost loop `for var in 0..extent { let …; buffer[e + var] = value }`, whose
/// value's zero test does not depend on `var` (no select condition in it, the only thing the
/// test evaluates, reads `var` or the lets), or whose value is `select(cond, then, else)` with
/// `cond` a conjunction of comparisons linear in `var` and `then`, `else` of the first kind:
/// the loop stores one range of elements, zero or not by the part of it `cond` holds on.
///
/// Or a loop `for var in 0..extent { for … }` around such a loop (or nest of them), filling
/// `[e, e + n)` with `e` linear in `var` of coefficient `n` and a zero test that does not
/// read `var`: its iterations fill consecutive ranges of `n` elements, together
/// `[e, e + extent·n)` with `e` at `var = 0`, each element holding the same kind of value.
fn fill_range(var: &Var, extent: i64, body: &Stmt) -> Option<Fill> {
    if let StmtKind::For { var: v, extent: n, body: inner, .. } = body.kind() {
        let f = fill_range(v, *n, inner)?;
        let form = crate::analysis::linear::Linear::of(&f.index);
        let coefficient: i64 = form.terms.iter().filter(|(t, _)| t.as_var() == Some(var)).map(|(_, c)| *c).sum();
        let others_use = form.terms.iter().any(|(t, _)| t.as_var() != Some(var) && t.uses_var(var));
        if coefficient != f.extent || others_use || f.split.is_some() || varies(&f.value, var, &[]) || extent <= 0 {
            return None;
        }
        let mut vars = f.inner.clone();
        vars.push(v.clone());
        return Some(Fill { extent: extent.checked_mul(f.extent)?, inner: vars, ..f });
    }
    let mut lets: Vec<(Var, Expr)> = Vec::new();
    let mut s = body;
    while let StmtKind::Let { var: v, value, body } = s.kind() {
        lets.push((v.clone(), value.clone()));
        s = body;
    }
    let StmtKind::Store { buffer, indices, value } = s.kind() else { return None };
    let [index] = indices.as_slice() else { return None };
    if value.dtype().lanes != 1 || extent <= 0 {
        return None;
    }
    let expand = |e: &Expr| {
        let mut expanded = e.clone();
        for (v, value) in lets.iter().rev() {
            expanded = crate::mutator::substitute(&expanded, &[(v.clone(), value.clone())]);
        }
        expanded
    };
    let expanded = expand(index);
    let form = crate::analysis::linear::Linear::of(&expanded);
    let coefficient: i64 = form.terms.iter().filter(|(t, _)| t.as_var() == Some(var)).map(|(_, c)| *c).sum();
    let others_use = form.terms.iter().any(|(t, _)| t.as_var() != Some(var) && t.uses_var(var));
    if coefficient != 1 || others_use {
        return None;
    }
    let split = match value.kind() {
        _ if !varies(value, var, &lets) => None,
        ExprKind::Select(c, a, b) if !varies(a, var, &lets) && !varies(b, var, &lets) => {
            let mut out = Vec::new();
            constraints(&expand(c), var, &mut out)?;
            Some((out, a.clone(), b.clone()))
        }
        _ => return None,
    };
    Some(Fill { buffer: buffer.clone(), index: expanded, value: value.clone(), extent, inner: Vec::new(), split })
}

/// Runs a loop `fill_range` accepted: elements `[e, e + extent)` of `buffer` set at once, or
/// its three parts (before, where and after `cond` holds) for a split select.
fn fill(var: &Var, f: &Fill, at: &mut Assignment, state: &mut HashMap<BufferId, ZeroRuns>, work: &mut u64) {
    *work += 1;
    let Some(bits) = state.get_mut(&f.buffer.id()) else { return };
    let extent = f.extent;
    let old: Vec<_> = f.inner.iter().map(|v| at.insert(v.clone(), Some(0))).collect();
    let old_var = at.insert(var.clone(), Some(0));
    let start = eval(&f.index, at);
    // Per part `[from, to)` of the loop, whether it stores zeros: a select whose condition
    // does not evaluate is zero where both of its values are (as `is_zero` has it).
    let parts: [(i64, i64, bool); 3] = match &f.split {
        None => [(0, extent, is_zero(&f.value, at)), (0, 0, false), (0, 0, false)],
        Some((constraints, then, other)) => {
            let (z_then, z_else) = (is_zero(then, at), is_zero(other, at));
            match interval(constraints, extent, at) {
                Some((lo, hi)) if lo < hi => [(0, lo, z_else), (lo, hi, z_then), (hi, extent, z_else)],
                Some(_) => [(0, extent, z_else), (0, 0, false), (0, 0, false)],
                None => [(0, extent, z_then && z_else), (0, 0, false), (0, 0, false)],
            }
        }
    };
    restore(at, var, old_var);
    for (v, old) in f.inner.iter().zip(old).rev() {
        restore(at, v, old);
    }
    match start {
        Some(s) if s >= 0 && s + extent <= bits.len() as i64 => {
            for (from, to, zero) in parts {
                bits.set((s + from) as usize, (s + to) as usize, zero)
            }
        }
        _ => bits.clear(),
    }
}

fn restore(at: &mut Assignment, var: &Var, old: Option<Option<i64>>) {
    match old {
        Some(v) => at.insert(var.clone(), v),
        None => at.remove(var),
    };
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::composite::call_nest;
    use crate::expr::select;
    use crate::intrin::{Int8GemmSize, IntrinKind, decl_tensor_intrin, int8_gemm_compute};
    use crate::passes::testing::assert_same_results;
    use crate::passes::verify::{VerifyLevel, verify};
    use crate::stmt::ForKind;
    use crate::te::placeholder_vec;
    /// How the hand-built convolution computes its rows, after the schedules' modes.
    #[derive(Clone, Copy, Debug, PartialEq)]
    enum Mode {
        /// The padded source first, then the panels outermost, the output rows inside.
        Whole,
        /// The padded source first, then the output rows outermost, the panels inside.
        PerRow,
        /// Per output row (a parallel loop), its `KH` padded rows copied first.
        PerRowWithSource,
        /// The padded source by a parallel loop, then rows × panels fused into one parallel
        /// loop, indexed with `/` and `%`.
        Fused,
    }

    /// The pad value of the padded source.
    #[derive(Clone, Copy, Debug, PartialEq)]
    enum PadValue {
        Literal(i64),
        /// Read from a parameter: unknown to the pass.
        Param,
    }

    /// A 3×3 convolution over `[H, W·IC]` u8 rows (IC = 4, so a kernel row is a GEMM segment
    /// of 12 bytes), padded by `pad` with `value`, at `stride`, OC = 4·`panels` channels in
    /// panels of 4, one resetting `OW × 4` GEMM call of 3 segments per output row and panel:
    /// what `x86_conv` lowers to, by hand.
    fn conv(pad: i64, stride: i64, value: PadValue, mode: Mode, panels: i64) -> Func {
        let (h, w, ic, kh, nr) = (6, 5, 4, 3, 4);
        let (oh, ow, oc, k) = ((h + 2 * pad - kh) / stride + 1, (w + 2 * pad - kh) / stride + 1, nr * panels, kh * ic);
        let rw = (w + 2 * pad) * ic;
        let src = Buffer::new("src", DType::U8, vec![h * w * ic]);
        let wei = Buffer::new("wei", DType::I8, vec![panels * kh * k / 4 * nr * 4]);
        let pv = Buffer::new("pv", DType::U8, vec![1]);
        let out = Buffer::new("out", DType::I32, vec![oh * ow * oc]);
        let size = Int8GemmSize { m: ow, n: nr, k, segments: kh };
        let a = placeholder_vec(size.a_shape(), DType::U8, "A").unwrap();
        let b = placeholder_vec(vec![kh * k / 4, nr, 4], DType::I8, "B").unwrap();
        let c = int8_gemm_compute(&a, &b, size, false, "C").unwrap();
        let gemm = decl_tensor_intrin(
            &format!("int8_gemm_{ow}x{nr}x{kh}x{k}"),
            IntrinKind::Int8Gemm { m: ow, n: nr, k, segments: kh, saturating: false },
            &c,
            &[&a, &b],
        )
        .unwrap();
        let pad_value = match value {
            PadValue::Literal(v) => Expr::int(DType::U8, v),
            PadValue::Param => Expr::load(&pv, vec![Expr::index(0)]),
        };
        // Row `r` of the padded source into `rows[to·RW ..]`.
        let (t, r_var) = (Var::index("t"), Var::index("r"));
        let pad_row = |rows: &Buffer, r: Expr, to: Expr| {
            let (y, x) = (r - pad, t.to_expr() - pad * ic);
            let inside = y.clone().ge(0) & y.clone().lt(h) & x.clone().ge(0) & x.clone().lt(w * ic);
            let at = min(max(y, 0), h - 1) * (w * ic) + min(max(x, 0), w * ic - 1);
            let value = select(inside, Expr::load(&src, vec![at]), pad_value.clone());
            Stmt::for_loop(t.clone(), rw, ForKind::Serial, Stmt::store(rows, vec![to * rw + t.to_expr()], value))
        };
        let padded = Buffer::new("padded", DType::U8, vec![(h + 2 * pad) * rw]);
        let all_rows =
            |kind| Stmt::for_loop(r_var.clone(), h + 2 * pad, kind, pad_row(&padded, r_var.to_expr(), r_var.to_expr()));
        let (y, l) = (Var::index("y"), Var::index("l"));
        let call = |rows: &Buffer, a_origin: Expr, y: Expr, l: Expr| {
            let operands = vec![
                Operand { buffer: rows.clone(), origin: vec![a_origin], strides: vec![stride * ic, rw, 1] },
                Operand { buffer: wei.clone(), origin: vec![l.clone() * (kh * k * nr)], strides: vec![nr * 4, 4, 1] },
                Operand { buffer: out.clone(), origin: vec![y * (ow * oc) + l * nr], strides: vec![oc, 1] },
            ];
            let fallback = call_nest(&gemm, &operands, true).unwrap();
            Stmt::call(gemm.clone(), operands, true, fallback)
        };
        let source_call = || call(&padded, y.to_expr() * (stride * rw), y.to_expr(), l.to_expr());
        // The padded rows, then the calls in two loops, `outer` around `inner`.
        let padded_then_calls = |(outer, n): (&Var, i64), (inner, m): (&Var, i64)| {
            let calls = Stmt::for_loop(inner.clone(), m, ForKind::Serial, source_call());
            Stmt::seq(vec![all_rows(ForKind::Serial), Stmt::for_loop(outer.clone(), n, ForKind::Serial, calls)])
        };
        let body = match mode {
            Mode::Whole => padded_then_calls((&l, panels), (&y, oh)),
            Mode::PerRow => padded_then_calls((&y, oh), (&l, panels)),
            Mode::PerRowWithSource => {
                let rows = Buffer::new("rows", DType::U8, vec![kh * rw]);
                let j = Var::index("j");
                let copy = Stmt::for_loop(
                    j.clone(),
                    kh,
                    ForKind::Serial,
                    pad_row(&rows, y.to_expr() * stride + j.to_expr(), j.to_expr()),
                );
                let calls = Stmt::for_loop(
                    l.clone(),
                    panels,
                    ForKind::Serial,
                    call(&rows, Expr::index(0), y.to_expr(), l.to_expr()),
                );
                let per_row = Stmt::allocate(rows, Stmt::seq(vec![copy, calls]));
                return Func {
                    name: "conv".into(),
                    params: vec![src, wei, pv, out],
                    body: Stmt::for_loop(y, oh, ForKind::Parallel, per_row),
                };
            }
            Mode::Fused => {
                let f = Var::index("f");
                let (row, panel) = (f.to_expr() / panels, f.to_expr() % panels);
                let fused = call(&padded, row.clone() * (stride * rw), row, panel);
                Stmt::seq(vec![all_rows(ForKind::Parallel), Stmt::for_loop(f, oh * panels, ForKind::Parallel, fused)])
            }
        };
        Func { name: "conv".into(), params: vec![src, wei, pv, out], body: Stmt::allocate(padded, body) }
    }

    /// The segment counts of the GEMM calls of `f`, in order.
    /// The ranges of the GEMM calls of `f`, in order (`None` for a call without one).
    fn ranges(f: &Func) -> Vec<Option<SegmentRange>> {
        let mut out = Vec::new();
        for_each_stmt(&f.body, &mut |s| {
            if let StmtKind::Call { intrin, range, .. } = s.kind()
                && segmented_gemm(intrin).is_some()
            {
                out.push(range.clone());
            }
        });
        out
    }

    /// The range of the one GEMM call of `g`, which must have one.
    fn one_range(g: &Func) -> SegmentRange {
        match ranges(g).as_slice() {
            [Some(range)] => range.clone(),
            other => panic!("one ranged call expected, found {} calls:\n{g}", other.len()),
        }
    }

    #[test]
    fn zero_padding_rows_fall_outside_the_range_with_the_same_results() {
        for mode in [Mode::Whole, Mode::PerRow, Mode::PerRowWithSource, Mode::Fused] {
            for (pad, stride) in [(1, 1), (1, 2), (2, 1), (2, 2), (0, 1)] {
                for value in [PadValue::Literal(0), PadValue::Literal(3), PadValue::Param] {
                    let panels = if mode == Mode::Fused { 8 } else { 2 };
                    let f = conv(pad, stride, value, mode, panels);
                    let g = zero_segment_range(&f);
                    let what = format!("{mode:?}, pad {pad}, stride {stride}, {value:?}:\n{g}");
                    assert_eq!(verify(&g, VerifyLevel::Lowered), Ok(()), "{what}");
                    assert_same_results(&f, &g);
                    let ranged = ranges(&g).iter().any(Option::is_some);
                    // A per-row copy of the source holds the padding on some rows only: no
                    // element is zero on every iteration, nothing is proven.
                    let expected = value == PadValue::Literal(0) && pad > 0 && mode != Mode::PerRowWithSource;
                    assert_eq!(ranged, expected, "{what}");
                }
            }
        }
    }

    #[test]
    fn each_output_row_skips_exactly_the_kernel_rows_in_the_padding() {
        // H = 6, KH = 3: output row y reads padded rows y·stride + s, the padding being rows
        // below `pad` and from `H + pad` on.
        for (pad, stride) in [(1, 1), (1, 2), (2, 1), (2, 2)] {
            for mode in [Mode::Whole, Mode::PerRow, Mode::Fused] {
                let panels = 2;
                let g = zero_segment_range(&conv(pad, stride, PadValue::Literal(0), mode, panels));
                let range = one_range(&g);
                let oh = (6 + 2 * pad - 3) / stride + 1;
                let (var, points) = match mode {
                    Mode::Fused => ("f", oh * panels),
                    _ => ("y", oh),
                };
                let mut vars: Vec<Var> = Vec::new();
                for e in [&range.first, &range.last] {
                    e.for_each(&mut |x| {
                        if let ExprKind::Var(v) = x.kind()
                            && !vars.contains(v)
                        {
                            vars.push(v.clone());
                        }
                    });
                }
                assert!(vars.iter().all(|v| v.name() == var), "{g}");
                for p in 0..points {
                    let at: Assignment = vars.iter().map(|v| (v.clone(), Some(p))).collect();
                    let y = if mode == Mode::Fused { p / panels } else { p };
                    let want = ((pad - y * stride).max(0), (6 + pad - y * stride).min(3));
                    let got = (eval(&range.first, &at).unwrap(), eval(&range.last, &at).unwrap());
                    assert_eq!(got, want, "{mode:?}, pad {pad}, stride {stride}, row {y}:\n{g}");
                }
            }
        }
    }

    #[test]
    fn a_write_between_the_padding_and_the_call_shrinks_what_is_proven() {
        let f = conv(1, 1, PadValue::Literal(0), Mode::PerRow, 1);
        let StmtKind::Allocate { buffer, body } = f.body.kind() else { unreachable!() };
        let StmtKind::Seq(parts) = body.kind() else { unreachable!() };
        let StmtKind::For { var: y, .. } = parts[1].kind() else { unreachable!() };
        // A nonzero element in the top padding row: row 0 computes its first segment, the last
        // row still skips its last.
        let overwrite = Stmt::store(buffer, vec![Expr::index(5)], Expr::int(DType::U8, 1));
        let body = Stmt::seq(vec![parts[0].clone(), overwrite, parts[1].clone()]);
        let f = Func { body: Stmt::allocate(buffer.clone(), body), ..f };
        let g = zero_segment_range(&f);
        let range = one_range(&g);
        let at = |row: i64| Assignment::from_iter([(y.clone(), Some(row))]);
        assert_eq!((eval(&range.first, &at(0)), eval(&range.last, &at(0))), (Some(0), Some(3)), "{g}");
        assert_eq!((eval(&range.first, &at(5)), eval(&range.last, &at(5))), (Some(0), Some(2)), "{g}");
        assert_same_results(&f, &g);
        // Overwritten by a loop of unknown values: nothing is proven.
        let t = Var::index("t");
        let unknown = Stmt::for_loop(
            t.clone(),
            buffer.len(),
            ForKind::Serial,
            Stmt::store(buffer, vec![t.to_expr()], Expr::load(&f.params[0], vec![Expr::index(0)])),
        );
        let StmtKind::Allocate { body, .. } = f.body.kind() else { unreachable!() };
        let StmtKind::Seq(parts) = body.kind() else { unreachable!() };
        let body = Stmt::seq(vec![parts[0].clone(), unknown, parts[2].clone()]);
        let f = Func { body: Stmt::allocate(buffer.clone(), body), ..f };
        assert!(ranges(&zero_segment_range(&f)).iter().all(Option::is_none));
    }

    mod closed_form {
        use super::*;
        use proptest::prelude::*;

        const OPS: [CmpOp; 6] = [CmpOp::Lt, CmpOp::Le, CmpOp::Gt, CmpOp::Ge, CmpOp::Eq, CmpOp::Ne];

        /// The zero facts of `buf` after `nest`, with `y` an enclosing loop of `ys` iterations.
        fn zero_bits(nest: &Stmt, buf: &Buffer, y: &Var, ys: i64, closed_form: bool) -> Vec<bool> {
            let mut pass = ZeroSegmentRange { work: 0, closed_form };
            let mut zeros = Zeros::default();
            zeros.0.insert(buf.id(), Rc::new(ZeroRuns::none(buf.len() as usize)));
            let env = Env { loops: vec![(y.clone(), 0, ys)], lets: Vec::new() };
            pass.stores(nest, &env, &mut zeros);
            zeros.0[&buf.id()].to_bits()
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(400))]
            /// A padded-source nest `for r { for t { let x = t + offset; buf[r·W + t] =
            /// select(cond, 0, src) or select(cond, src, 0) } }` under a loop `y`: the facts
            /// run in closed form, element by element, and as this test computes them agree.
            #[test]
            fn split_selects_agree_with_enumerating_every_element(
                (rows, width, ys, offset) in (1i64..4, 1i64..24, 1i64..4, -6i64..6),
                // Comparisons `a·x + b·r + c·y + d  op  e` (`op` indexes `OPS`).
                cond in prop::collection::vec((0usize..6, -3i64..4, -2i64..3, -2i64..3, -12i64..12, -12i64..12), 1..4),
                zero_then in any::<bool>(),
            ) {
                let (y, r, t, x) = (Var::index("y"), Var::index("r"), Var::index("t"), Var::index("x"));
                let src = Buffer::new("src", DType::U8, vec![1]);
                let buf = Buffer::new("buf", DType::U8, vec![rows * width]);
                let c = cond
                    .iter()
                    .map(|&(op, a, b, c, d, e)| {
                        let lhs = x.to_expr() * a + r.to_expr() * b + y.to_expr() * c + d;
                        Expr::cmp(OPS[op], lhs, Expr::index(e))
                    })
                    .reduce(|p, q| p & q)
                    .unwrap();
                let (zero, load) = (Expr::int(DType::U8, 0), Expr::load(&src, vec![Expr::index(0)]));
                let value = if zero_then { select(c, zero, load) } else { select(c, load, zero) };
                let store = Stmt::store(&buf, vec![r.to_expr() * width + t.to_expr()], value);
                let inner = Stmt::let_stmt(x.clone(), t.to_expr() + offset, store);
                let nest = Stmt::for_loop(
                    r.clone(),
                    rows,
                    ForKind::Serial,
                    Stmt::for_loop(t.clone(), width, ForKind::Serial, inner.clone()),
                );
                // Without `!=`, the inner loop is one the closed form takes.
                let no_ne = cond.iter().all(|k| OPS[k.0] != CmpOp::Ne);
                prop_assert_eq!(fill_range(&t, width, &inner).is_some_and(|f| f.split.is_some()), no_ne);
                let holds = |op: CmpOp, l: i64, e: i64| match op {
                    CmpOp::Lt => l < e,
                    CmpOp::Le => l <= e,
                    CmpOp::Gt => l > e,
                    CmpOp::Ge => l >= e,
                    CmpOp::Eq => l == e,
                    CmpOp::Ne => l != e,
                };
                let want: Vec<bool> = (0..rows * width)
                    .map(|i| {
                        let (ri, ti) = (i / width, i % width);
                        (0..ys).all(|yi| {
                            let c = cond.iter().all(|&(op, a, b, c, d, e)| {
                                holds(OPS[op], a * (ti + offset) + b * ri + c * yi + d, e)
                            });
                            c == zero_then
                        })
                    })
                    .collect();
                let fast = zero_bits(&nest, &buf, &y, ys, true);
                let slow = zero_bits(&nest, &buf, &y, ys, false);
                prop_assert_eq!(&slow, &want);
                prop_assert_eq!(&fast, &want);
            }

            /// A nest `for a { for b { for t { buf[a·SA + b·SB + t] = value } } }` under a loop
            /// `y`, whose strides make it one range of elements or not, the value 0, unknown or
            /// a select on `y`: closed form, enumeration and this test's own run agree.
            #[test]
            fn nests_of_fills_agree_with_enumerating_every_element(
                (a_n, b_n, t_n, ys) in (1i64..4, 1i64..4, 1i64..9, 1i64..4),
                (contiguous, sa, sb) in (any::<bool>(), 0i64..20, 0i64..10),
                (kind, c, e) in (0usize..3, -2i64..3, -3i64..3),
            ) {
                let (y, a, b, t) = (Var::index("y"), Var::index("a"), Var::index("b"), Var::index("t"));
                let (sa, sb) = if contiguous { (b_n * t_n, t_n) } else { (sa, sb) };
                let len = (a_n - 1) * sa + (b_n - 1) * sb + t_n;
                let src = Buffer::new("src", DType::U8, vec![1]);
                let buf = Buffer::new("buf", DType::U8, vec![len]);
                let (zero, load) = (Expr::int(DType::U8, 0), Expr::load(&src, vec![Expr::index(0)]));
                let value = match kind {
                    0 => zero,
                    1 => load,
                    _ => select((y.to_expr() * c).ge(e), zero, load),
                };
                let index = a.to_expr() * sa + b.to_expr() * sb + t.to_expr();
                let store = Stmt::store(&buf, vec![index], value);
                let nest = Stmt::for_loop(
                    a.clone(),
                    a_n,
                    ForKind::Serial,
                    Stmt::for_loop(b.clone(), b_n, ForKind::Serial, Stmt::for_loop(t.clone(), t_n, ForKind::Serial, store)),
                );
                if contiguous {
                    let f = fill_range(&a, a_n, match nest.kind() {
                        StmtKind::For { body, .. } => body,
                        _ => unreachable!(),
                    });
                    prop_assert!(f.is_some() || a_n == 0);
                }
                let mut want = vec![true; len as usize];
                for yi in 0..ys {
                    let zero_here = match kind {
                        0 => true,
                        1 => false,
                        _ => yi * c >= e,
                    };
                    let mut bits = vec![false; len as usize];
                    for ai in 0..a_n {
                        for bi in 0..b_n {
                            for ti in 0..t_n {
                                bits[(ai * sa + bi * sb + ti) as usize] = zero_here;
                            }
                        }
                    }
                    want.iter_mut().zip(&bits).for_each(|(w, z)| *w &= *z);
                }
                let fast = zero_bits(&nest, &buf, &y, ys, true);
                let slow = zero_bits(&nest, &buf, &y, ys, false);
                prop_assert_eq!(&slow, &want);
                prop_assert_eq!(&fast, &want);
            }
        }
    }
}
