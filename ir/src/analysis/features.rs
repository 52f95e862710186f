//! Features of a lowered function: a fixed-length vector of numbers that a learned cost model
//! reads (Ansor's per-store features, simplified and aggregated over the function).
//!
//! Everything is counted statically from the loop IR, target-independently: extents are
//! compile-time constants, so the dynamic count of a statement is the product of its enclosing
//! loops' extents (both arms of an `If` counted, as if always taken). Counts that span orders of
//! magnitude are given as `log2(1 + x)` so that a tree model splits them evenly.
//!
//! The *hot statement* is the store or intrinsic call with the most dynamic work (scalar
//! operations, lanes included); the per-level entries describe the loops around it, innermost
//! first. After `lower::lower` no `Vectorized` or `Unrolled` loop remains: vectorization shows
//! as vector lanes, unrolling as copies of the statement in one loop body (`hot.copies`).

use std::collections::{HashMap, HashSet};

use crate::analysis::linear::Linear;
use crate::expr::{Expr, ExprKind, VarId};
use crate::stmt::{ForKind, Func, Stmt, StmtKind};

/// Loop levels described around the hot statement, innermost first (deeper nests are cut).
pub const LEVELS: usize = 5;

/// The function-wide entries, in order (`Features::names` appends the per-level ones).
const GLOBAL: [&str; 24] = [
    "scalar_stores_log2",
    "stores",
    "loops",
    "parallel_loops",
    "vectorized_loops",
    "unrolled_loops",
    "calls",
    "calls_dynamic_log2",
    "call_output_elements_log2",
    "call_input_elements_log2",
    "call_work_log2",
    "float_ops_log2",
    "int_ops_log2",
    "bytes_loaded_log2",
    "bytes_stored_log2",
    "max_lanes",
    "vector_store_fraction",
    "parallel_extent_log2",
    "allocations",
    "allocated_bytes_log2",
    "guards",
    "guards_dynamic_log2",
    "max_depth",
    "total_work_log2",
];

/// The position of `parallel_extent_log2` in `GLOBAL`.
const PARALLEL_EXTENT: usize = 17;

/// The hot statement's entries.
const HOT: [&str; 10] = [
    "hot.work_log2",
    "hot.dynamic_log2",
    "hot.ops",
    "hot.float_ops",
    "hot.loads",
    "hot.lanes",
    "hot.is_call",
    "hot.copies",
    "hot.contiguous_fraction",
    "hot.invariant_fraction",
];

/// The entries of each loop level around the hot statement.
const PER_LEVEL: [&str; 4] = ["present", "extent_log2", "parallel", "bytes_log2"];

/// A function's features: `values[i]` is the entry named `Features::names()[i]`.
#[derive(Clone, Debug, PartialEq)]
pub struct Features {
    pub values: Vec<f32>,
}

impl Features {
    /// The number of entries, the same for every function.
    pub fn len() -> usize {
        GLOBAL.len() + HOT.len() + LEVELS * PER_LEVEL.len()
    }

    /// The name of every entry, in order; `level0.*` is the innermost loop around the hot
    /// statement.
    pub fn names() -> Vec<String> {
        let mut names: Vec<String> = GLOBAL.iter().chain(&HOT).map(|s| s.to_string()).collect();
        for level in 0..LEVELS {
            names.extend(PER_LEVEL.iter().map(|s| format!("level{level}.{s}")));
        }
        names
    }

    /// The entry named `name`, if there is one.
    pub fn get(&self, name: &str) -> Option<f32> {
        Features::names().iter().position(|n| n == name).map(|i| self.values[i])
    }
}

/// The features of `func` (see the module doc).
pub fn features(func: &Func) -> Features {
    let mut walk = Walk::default();
    walk.copies.push(direct_statements(&func.body));
    walk.stmt(&func.body, &mut Vec::new());
    walk.finish()
}

/// `log2(1 + x)`.
fn log2p(x: f64) -> f32 {
    (1.0 + x.max(0.0)).log2() as f32
}

/// A loop around the statement being visited.
#[derive(Clone)]
struct Loop {
    /// Index into `Walk::loops` (its footprint accumulator).
    id: usize,
    var: VarId,
    extent: i64,
    kind: ForKind,
}

/// One memory access of a statement: bytes per execution and the loop variables its index
/// depends on.
struct Access {
    bytes: f64,
    vars: HashSet<VarId>,
    /// The index is a unit-stride ramp, or moves by one element per iteration of the innermost
    /// enclosing loop.
    contiguous: bool,
}

/// What a store or call does per execution.
struct Work {
    ops: f64,
    float_ops: f64,
    loads: f64,
    lanes: f64,
    is_call: bool,
    accesses: Vec<Access>,
}

/// The hot statement found so far.
struct Hot {
    work: f64,
    dynamic: f64,
    stmt: Work,
    path: Vec<Loop>,
    copies: usize,
}

#[derive(Default)]
struct Walk {
    /// Loop variables each let-bound variable depends on.
    lets: HashMap<VarId, HashSet<VarId>>,
    /// Per enclosing loop body (the function's body first): `direct_statements` of it.
    copies: Vec<usize>,
    /// Per loop (by `Loop::id`): bytes touched by all its iterations, summed over accesses.
    loops: Vec<f64>,
    scalar_stores: f64,
    stores: usize,
    parallel_loops: usize,
    vectorized_loops: usize,
    unrolled_loops: usize,
    calls: usize,
    calls_dynamic: f64,
    call_output: f64,
    call_input: f64,
    call_work: f64,
    float_ops: f64,
    int_ops: f64,
    bytes_loaded: f64,
    bytes_stored: f64,
    max_lanes: f64,
    vector_stores: f64,
    allocations: usize,
    allocated_bytes: f64,
    guards: usize,
    guards_dynamic: f64,
    max_depth: usize,
    total_work: f64,
    hot: Option<Hot>,
}

impl Walk {
    fn stmt(&mut self, stmt: &Stmt, path: &mut Vec<Loop>) {
        match stmt.kind() {
            StmtKind::For { var, extent, kind, body } => {
                match kind {
                    ForKind::Parallel => self.parallel_loops += 1,
                    ForKind::Vectorized => self.vectorized_loops += 1,
                    ForKind::Unrolled => self.unrolled_loops += 1,
                    ForKind::Serial => {}
                }
                self.loops.push(0.0);
                path.push(Loop { id: self.loops.len() - 1, var: var.id(), extent: *extent, kind: *kind });
                self.max_depth = self.max_depth.max(path.len());
                self.copies.push(direct_statements(body));
                self.stmt(body, path);
                self.copies.pop();
                path.pop();
            }
            StmtKind::Let { var, value, body } => {
                let deps = self.vars_of(value);
                self.lets.insert(var.id(), deps);
                self.stmt(body, path);
            }
            StmtKind::Store { buffer, indices, value } => {
                let lanes = value.dtype().lanes as f64;
                let mut work = self.expr_work(value, path);
                let bytes = buffer.dtype().bytes() as f64 * lanes;
                work.accesses.push(self.access(indices, bytes, path));
                self.stores += 1;
                let dynamic = dynamic(path);
                self.scalar_stores += dynamic * lanes;
                self.bytes_stored += dynamic * bytes;
                self.max_lanes = self.max_lanes.max(lanes);
                if lanes > 1.0 {
                    self.vector_stores += dynamic * lanes;
                }
                self.record(work, path);
            }
            StmtKind::Call { intrin, operands, .. } => {
                self.calls += 1;
                let dynamic = dynamic(path);
                self.calls_dynamic += dynamic;
                let elements = |shape: &[i64]| shape.iter().map(|&e| e as f64).product::<f64>();
                let output = elements(intrin.output.shape());
                // A `GemmMap` reduces as its GEMM part does.
                let reducing = intrin.parts.as_ref().map_or(&intrin.output, |(gemm, _)| &gemm.output);
                let reduction: f64 = reducing.reduce_axes().iter().map(|a| a.extent() as f64).product();
                let input: f64 = intrin.inputs.iter().map(|t| elements(t.shape())).sum();
                self.call_output = self.call_output.max(output);
                self.call_input = self.call_input.max(input);
                let ops = 2.0 * output * reduction;
                self.call_work += dynamic * ops;
                let accesses = operands
                    .iter()
                    .zip(intrin.operand_tensors())
                    .map(|(op, t)| self.access(&op.origin, elements(t.shape()) * t.dtype().bytes() as f64, path))
                    .collect::<Vec<_>>();
                let loaded: f64 = accesses.iter().rev().skip(1).map(|a| a.bytes).sum();
                self.bytes_loaded += dynamic * loaded;
                self.bytes_stored += dynamic * accesses.last().map_or(0.0, |a| a.bytes);
                let float = if intrin.output.dtype().is_float() { ops } else { 0.0 };
                let work = Work {
                    ops,
                    float_ops: float,
                    loads: accesses.len().saturating_sub(1) as f64,
                    lanes: 1.0,
                    is_call: true,
                    accesses,
                };
                self.record(work, path);
            }
            StmtKind::If { cond, then_case, else_case } => {
                self.guard(cond, path);
                self.stmt(then_case, path);
                if let Some(e) = else_case {
                    self.stmt(e, path);
                }
            }
            StmtKind::Seq(stmts) => stmts.iter().for_each(|s| self.stmt(s, path)),
            StmtKind::Allocate { buffer, body } => {
                self.allocations += 1;
                self.allocated_bytes += buffer.len() as f64 * buffer.dtype().bytes() as f64;
                self.stmt(body, path);
            }
            StmtKind::BoundsCheck { cond, .. } => self.guard(cond, path),
        }
    }

    fn guard(&mut self, cond: &Expr, path: &[Loop]) {
        self.guards += 1;
        self.guards_dynamic += dynamic(path) * cond.dtype().lanes as f64;
    }

    /// Counts a store's or call's work and its accesses' footprints, and keeps the hot one.
    fn record(&mut self, work: Work, path: &[Loop]) {
        let copies = self.copies.last().copied().unwrap_or(1);
        let dynamic = dynamic(path);
        if !work.is_call {
            self.float_ops += dynamic * work.float_ops;
            self.int_ops += dynamic * (work.ops - work.float_ops);
        }
        for access in &work.accesses {
            // Within loop `d` (and all loops inside it) the access touches one element per
            // combination of the loops its index depends on.
            for d in 0..path.len() {
                let distinct: f64 =
                    path[d..].iter().filter(|l| access.vars.contains(&l.var)).map(|l| l.extent as f64).product();
                self.loops[path[d].id] += access.bytes * distinct;
            }
        }
        let total = dynamic * work.ops.max(1.0);
        self.total_work += total;
        if self.hot.as_ref().is_none_or(|h| total > h.work) {
            self.hot = Some(Hot { work: total, dynamic, stmt: work, path: path.to_vec(), copies });
        }
    }

    /// The scalar operations, loads and accesses of a stored value.
    fn expr_work(&mut self, value: &Expr, path: &[Loop]) -> Work {
        let mut work = Work {
            ops: 0.0,
            float_ops: 0.0,
            loads: 0.0,
            lanes: value.dtype().lanes as f64,
            is_call: false,
            accesses: vec![],
        };
        let mut loads = Vec::new();
        value.for_each(&mut |e| {
            let lanes = e.dtype().lanes as f64;
            match e.kind() {
                ExprKind::Binary(..)
                | ExprKind::Cmp(..)
                | ExprKind::Not(_)
                | ExprKind::Select(..)
                | ExprKind::Fma(..)
                | ExprKind::Round(_)
                | ExprKind::Sqrt(_)
                | ExprKind::VectorReduce(..)
                | ExprKind::Cast(_)
                | ExprKind::SaturatingCast(_) => {
                    work.ops += lanes;
                    if e.dtype().is_float() {
                        work.float_ops += lanes;
                    }
                }
                ExprKind::Load(buffer, indices) => {
                    work.loads += 1.0;
                    loads.push((indices.clone(), buffer.dtype().bytes() as f64 * lanes));
                }
                _ => {}
            }
        });
        let dynamic = dynamic(path);
        for (indices, bytes) in loads {
            self.bytes_loaded += dynamic * bytes;
            work.accesses.push(self.access(&indices, bytes, path));
        }
        work
    }

    fn access(&self, indices: &[Expr], bytes: f64, path: &[Loop]) -> Access {
        let mut vars = HashSet::new();
        for index in indices {
            vars.extend(self.vars_of(index));
        }
        let contiguous = indices.last().is_some_and(|index| match index.kind() {
            ExprKind::Ramp(_, stride) => stride.as_int() == Some(1),
            _ => path.last().is_some_and(|inner| {
                Linear::of(index).terms.iter().any(|(t, c)| *c == 1 && t.as_var().is_some_and(|v| v.id() == inner.var))
            }),
        });
        Access { bytes, vars, contiguous }
    }

    /// The loop variables `e` depends on, through let bindings.
    fn vars_of(&self, e: &Expr) -> HashSet<VarId> {
        let mut vars = HashSet::new();
        e.for_each(&mut |n| {
            if let ExprKind::Var(v) = n.kind() {
                match self.lets.get(&v.id()) {
                    Some(deps) => vars.extend(deps.iter().copied()),
                    None => {
                        vars.insert(v.id());
                    }
                }
            }
        });
        vars
    }

    fn finish(self) -> Features {
        let mut values = vec![
            log2p(self.scalar_stores),
            log2p(self.stores as f64),
            log2p(self.loops.len() as f64),
            self.parallel_loops as f32,
            self.vectorized_loops as f32,
            self.unrolled_loops as f32,
            log2p(self.calls as f64),
            log2p(self.calls_dynamic),
            log2p(self.call_output),
            log2p(self.call_input),
            log2p(self.call_work),
            log2p(self.float_ops),
            log2p(self.int_ops),
            log2p(self.bytes_loaded),
            log2p(self.bytes_stored),
            self.max_lanes as f32,
            if self.scalar_stores > 0.0 { (self.vector_stores / self.scalar_stores) as f32 } else { 0.0 },
            0.0, // parallel_extent_log2 (`PARALLEL_EXTENT`), from the hot path below
            self.allocations as f32,
            log2p(self.allocated_bytes),
            self.guards as f32,
            log2p(self.guards_dynamic),
            self.max_depth as f32,
            log2p(self.total_work),
        ];
        let Some(hot) = self.hot else {
            values.resize(Features::len(), 0.0);
            return Features { values };
        };
        let parallel: f64 = hot.path.iter().filter(|l| l.kind == ForKind::Parallel).map(|l| l.extent as f64).product();
        values[PARALLEL_EXTENT] =
            log2p(if hot.path.iter().any(|l| l.kind == ForKind::Parallel) { parallel } else { 0.0 });
        let n = hot.stmt.accesses.len().max(1) as f64;
        let contiguous = hot.stmt.accesses.iter().filter(|a| a.contiguous).count() as f64 / n;
        let invariant = match hot.path.last() {
            Some(inner) => hot.stmt.accesses.iter().filter(|a| !a.vars.contains(&inner.var)).count() as f64 / n,
            None => 1.0,
        };
        values.extend([
            log2p(hot.work),
            log2p(hot.dynamic),
            hot.stmt.ops as f32,
            hot.stmt.float_ops as f32,
            hot.stmt.loads as f32,
            hot.stmt.lanes as f32,
            hot.stmt.is_call as u8 as f32,
            hot.copies as f32,
            contiguous as f32,
            invariant as f32,
        ]);
        for level in 0..LEVELS {
            match hot.path.iter().rev().nth(level) {
                Some(l) => values.extend([
                    1.0,
                    log2p(l.extent as f64),
                    (l.kind == ForKind::Parallel) as u8 as f32,
                    log2p(self.loops[l.id]),
                ]),
                None => values.extend([0.0; PER_LEVEL.len()]),
            }
        }
        debug_assert_eq!(values.len(), Features::len());
        Features { values }
    }
}

/// How many times a statement at the end of `path` runs.
fn dynamic(path: &[Loop]) -> f64 {
    path.iter().map(|l| l.extent as f64).product()
}

/// The stores and calls of a loop body outside any inner loop: unrolling leaves one copy of a
/// statement per unrolled iteration there.
fn direct_statements(stmt: &Stmt) -> usize {
    match stmt.kind() {
        StmtKind::Store { .. } | StmtKind::Call { .. } => 1,
        StmtKind::For { .. } | StmtKind::BoundsCheck { .. } => 0,
        StmtKind::Let { body, .. } | StmtKind::Allocate { body, .. } => direct_statements(body),
        StmtKind::If { then_case, else_case, .. } => {
            direct_statements(then_case) + else_case.as_ref().map_or(0, direct_statements)
        }
        StmtKind::Seq(stmts) => stmts.iter().map(direct_statements).sum(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtype::DType;
    use crate::lower::lower;
    use crate::schedule::{Schedule, create_schedule};
    use crate::te::{Tensor, compute, placeholder, reduce_axis, sum};

    /// `C = A·B` (f32, 64×64×32) and its default schedule.
    fn matmul() -> (Schedule, Vec<Tensor>) {
        let a = placeholder([64, 32], DType::F32, "A").unwrap();
        let b = placeholder([32, 64], DType::F32, "B").unwrap();
        let r = reduce_axis(32, "k").unwrap();
        let c = compute([64, 64], |i| sum(DType::F32, &[&r], a.at([&i[0], &r]) * b.at([&r, &i[1]])), "C").unwrap();
        (create_schedule(&[&c]), vec![a, b, c])
    }

    fn of(schedule: &Schedule, args: &[Tensor]) -> Features {
        let args: Vec<&Tensor> = args.iter().collect();
        let f = features(&lower(schedule, &args, "f").unwrap());
        assert_eq!(f.values.len(), Features::len());
        f
    }

    #[test]
    fn names_match_the_values() {
        let names = Features::names();
        assert_eq!(names[PARALLEL_EXTENT], "parallel_extent_log2");
        assert_eq!(names.len(), Features::len());
        assert_eq!(names.iter().collect::<HashSet<_>>().len(), names.len(), "names are distinct");
        let (s, args) = matmul();
        assert_eq!(of(&s, &args).get("level0.present"), Some(1.0));
        assert_eq!(of(&s, &args).get("no such entry"), None);
    }

    #[test]
    fn the_default_matmul_is_a_serial_scalar_nest() {
        let (s, args) = matmul();
        let f = of(&s, &args);
        let get = |n: &str| f.get(n).unwrap();
        // i, j, k around the update: 64·64·32 multiply-adds, two flops each.
        assert_eq!(get("hot.dynamic_log2"), log2p(64.0 * 64.0 * 32.0));
        assert_eq!(get("level0.extent_log2"), log2p(32.0));
        assert_eq!(get("level1.extent_log2"), log2p(64.0));
        assert_eq!(get("level2.extent_log2"), log2p(64.0));
        assert_eq!(get("level3.present"), 0.0);
        assert_eq!(get("parallel_loops"), 0.0);
        assert_eq!(get("parallel_extent_log2"), 0.0);
        assert_eq!(get("max_lanes"), 1.0);
        assert_eq!(get("hot.lanes"), 1.0);
        assert_eq!(get("hot.float_ops"), 2.0);
        assert_eq!(get("hot.loads"), 3.0);
        assert_eq!(get("float_ops_log2"), log2p(2.0 * 64.0 * 64.0 * 32.0));
        // Within the k loop: a row of A, a column of B and one element of C (read and
        // written), four bytes each.
        assert_eq!(get("level0.bytes_log2"), log2p(4.0 * (32.0 + 32.0 + 1.0 + 1.0)));
        // C[i, j] does not move with k; A[i, k] moves by one element.
        assert!(get("hot.invariant_fraction") > 0.0);
        assert!(get("hot.contiguous_fraction") > 0.0);
    }

    #[test]
    fn vectorize_unroll_and_parallel_show_in_their_entries() {
        let (mut s, args) = matmul();
        let c = &args[2];
        let (i, j) = (c.axis(0), c.axis(1));
        let k = c.reduce_axes()[0].clone();
        let (jo, ji) = s.split(c, &j, 8).unwrap();
        let (io, ii) = s.split(c, &i, 4).unwrap();
        s.reorder(c, &[&io, &jo, &k, &ii, &ji]).unwrap();
        s.vectorize(c, &ji).unwrap();
        s.unroll(c, &ii).unwrap();
        s.parallel(c, &io).unwrap();
        let tiled = of(&s, &args);
        let (base_s, base_args) = matmul();
        let base = of(&base_s, &base_args);
        let get = |f: &Features, n: &str| f.get(n).unwrap();
        assert_eq!(get(&tiled, "max_lanes"), 8.0);
        assert_eq!(get(&tiled, "hot.lanes"), 8.0);
        assert!(get(&tiled, "vector_store_fraction") > 0.9);
        assert_eq!(get(&tiled, "hot.copies"), 4.0, "four unrolled rows");
        assert_eq!(get(&base, "hot.copies"), 1.0);
        assert_eq!(get(&tiled, "parallel_loops"), 1.0);
        assert_eq!(get(&tiled, "parallel_extent_log2"), log2p(16.0));
        // The loops left around the update are io (parallel), jo, k; k is innermost.
        assert_eq!(get(&tiled, "level0.extent_log2"), log2p(32.0));
        assert_eq!(get(&tiled, "level2.parallel"), 1.0);
        assert_eq!(get(&tiled, "level2.extent_log2"), log2p(16.0));
        // The same arithmetic, whatever the schedule.
        assert_eq!(get(&tiled, "float_ops_log2"), get(&base, "float_ops_log2"));
        assert_eq!(get(&tiled, "scalar_stores_log2"), get(&base, "scalar_stores_log2"));
        // Vector stores: eight lanes per store, eight times fewer executions.
        assert_eq!(get(&tiled, "hot.dynamic_log2"), log2p(64.0 * 64.0 * 32.0 / 8.0 / 4.0));
        assert_ne!(tiled.values, base.values);
    }
}
