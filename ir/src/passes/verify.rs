//! The verifier: the invariants of the loop IR, checked all at once.
//!
//! `verify(func, VerifyLevel::Final)` is the precondition of code generation: a function that
//! passes it can be compiled without further checks, and codegen may assume every item below.
//! All violations are collected, each naming its statement in printed syntax.
//!
//! # Checklist
//!
//! At every level:
//!
//! - Variables: every variable used is bound by an enclosing `For` or `Let`; loop variables
//!   are `i64`; a `Let` value has its variable's dtype.
//! - Buffers: every `Load` and `Store` names a parameter or a buffer of an enclosing `Allocate`;
//!   an access has one index per dimension or one flat index; indices are `i64` whose lane counts
//!   are 1 or the access's lane count.
//! - Types: constants have integer/bool or float dtypes as their kind says; the operands of a
//!   binary operator or comparison have one dtype; a binary node has its operands' dtype and a
//!   comparison is `bool` with their lanes; `!` keeps its dtype; casts keep lanes; a `Select`
//!   condition is `bool`, scalar or with the arms' lanes, and both arms have the node's dtype; a
//!   `Load` has its buffer's element type with its index lanes.
//! - Vectors: `Ramp` base and stride are scalars of the node's element type; `Broadcast` takes a
//!   scalar of the element type; `VectorReduce` keeps the element type and reduces a whole number
//!   of lanes per output lane.
//! - Statements: a `Store` value has the buffer's element type and the index's lane count; an
//!   `If` condition is a scalar `bool`; `For` extents are non-negative.
//! - Calls: one operand per declaration input plus one for the output; each operand's buffer is
//!   known and has its declaration tensor's dtype, one stride per dimension of that tensor, and
//!   an origin with one index per buffer dimension or one flat index (scalar `i64`s); the
//!   fallback is checked like any statement.
//! - No tensor-expression nodes (`TensorRead`, `Reduce`) remain.
//!
//! At `VerifyLevel::Final` additionally:
//!
//! - Every access and every call origin is flat: exactly one index.
//! - No `Vectorized` or `Unrolled` loops remain (only `Serial` and `Parallel`).

use rustc_hash::FxHashMap as HashMap;

use thiserror::Error;

use crate::dtype::{DType, ScalarType};
use crate::expr::{Expr, ExprKind, Var};
use crate::intrin::segmented_gemm;
use crate::stmt::{Buffer, ForKind, Func, Stmt, StmtKind};

/// How much of the pipeline has run.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum VerifyLevel {
    /// Any loop IR after lowering: multi-dimensional accesses and every loop kind are allowed.
    Lowered,
    /// The input of code generation (see the module checklist).
    Final,
}

/// One violated invariant. `stmt` is the first line of the offending statement as printed.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum VerifyError {
    #[error("variable {var} is not bound by an enclosing For or Let, in `{stmt}`")]
    UnboundVar { var: String, stmt: String },
    #[error("buffer {buffer} is neither a parameter nor allocated by an enclosing Allocate, in `{stmt}`")]
    UnknownBuffer { buffer: String, stmt: String },
    #[error("{what} must be {expected}, found {found}, in `{stmt}`")]
    DType { what: String, expected: String, found: DType, stmt: String },
    #[error(
        "buffer {buffer} has {dims} dimensions and is accessed with {found} indices (expected {expected}), in `{stmt}`"
    )]
    IndexCount { buffer: String, dims: usize, found: usize, expected: String, stmt: String },
    #[error("tensor-expression node `{expr}` in loop IR (lowering must replace it), in `{stmt}`")]
    TensorExpr { expr: String, stmt: String },
    #[error("loop extent must be non-negative, found {extent}, in `{stmt}`")]
    NegativeExtent { extent: i64, stmt: String },
    #[error("{kind} loops must be carried out before code generation, in `{stmt}`")]
    LoopKind { kind: &'static str, stmt: String },
    #[error("call of {intrin}: {what} must be {expected}, found {found}, in `{stmt}`")]
    Call { intrin: String, what: String, expected: String, found: String, stmt: String },
}

/// Checks every invariant of the module checklist for `level`; `Err` holds all violations, in
/// program order and without duplicates.
///
/// Does not check semantics the types cannot show: bounds of accesses (`guard_accesses` makes
/// them safe), reads of uninitialized memory, or races between `Parallel` iterations.
pub fn verify(func: &Func, level: VerifyLevel) -> Result<(), Vec<VerifyError>> {
    let mut v =
        Verifier { level, vars: HashMap::default(), buffers: HashMap::default(), errors: Vec::new(), current: None };
    for param in &func.params {
        *v.buffers.entry(param.clone()).or_default() += 1;
    }
    v.stmt(&func.body);
    if v.errors.is_empty() { Ok(()) } else { Err(v.errors) }
}

struct Verifier<'f> {
    level: VerifyLevel,
    /// How many enclosing scopes bind each variable / provide each buffer.
    vars: HashMap<Var, u32>,
    buffers: HashMap<Buffer, u32>,
    errors: Vec<VerifyError>,
    /// The statement being checked (the innermost that is not a `Seq`), printed only when an
    /// error names it: printing every statement's subtree as it is entered would make the
    /// verifier quadratic in the nesting depth.
    current: Option<&'f Stmt>,
}

fn headline(stmt: &Stmt) -> String {
    format!("{stmt}").lines().next().unwrap_or("").trim().to_string()
}

fn enter<K: std::hash::Hash + Eq + Clone>(map: &mut HashMap<K, u32>, key: &K) {
    *map.entry(key.clone()).or_default() += 1;
}

fn leave<K: std::hash::Hash + Eq>(map: &mut HashMap<K, u32>, key: &K) {
    let count = map.get_mut(key).expect("verify: leaving a scope that was entered");
    *count -= 1;
    if *count == 0 {
        map.remove(key);
    }
}

impl<'f> Verifier<'f> {
    /// The first line of the statement being checked, as printed.
    fn stmt_line(&self) -> String {
        self.current.map(headline).unwrap_or_default()
    }

    fn report(&mut self, error: VerifyError) {
        if !self.errors.contains(&error) {
            self.errors.push(error);
        }
    }

    fn expect_dtype(&mut self, what: impl FnOnce() -> String, expected: DType, found: DType) {
        if expected != found {
            let stmt = self.stmt_line();
            self.report(VerifyError::DType { what: what(), expected: expected.to_string(), found, stmt });
        }
    }

    fn dtype_error(&mut self, what: String, expected: String, found: DType) {
        let stmt = self.stmt_line();
        self.report(VerifyError::DType { what, expected, found, stmt });
    }

    fn stmt(&mut self, s: &'f Stmt) {
        if !matches!(s.kind(), StmtKind::Seq(_)) {
            self.current = Some(s);
        }
        match s.kind() {
            StmtKind::For { var, extent, kind, body } => {
                if *extent < 0 {
                    self.report(VerifyError::NegativeExtent { extent: *extent, stmt: self.stmt_line() });
                }
                self.expect_dtype(|| format!("loop variable {var}"), DType::INDEX, var.dtype());
                if self.level == VerifyLevel::Final && matches!(kind, ForKind::Vectorized | ForKind::Unrolled) {
                    self.report(VerifyError::LoopKind { kind: kind.keyword(), stmt: self.stmt_line() });
                }
                enter(&mut self.vars, var);
                self.stmt(body);
                leave(&mut self.vars, var);
            }
            StmtKind::Let { var, value, body } => {
                self.expr(value);
                self.expect_dtype(|| format!("the value of let {var}"), var.dtype(), value.dtype());
                enter(&mut self.vars, var);
                self.stmt(body);
                leave(&mut self.vars, var);
            }
            StmtKind::Store { buffer, indices, value } => {
                indices.iter().for_each(|i| self.expr(i));
                self.expr(value);
                let lanes = self.access(buffer, indices);
                let expected = buffer.dtype().with_lanes(lanes);
                self.expect_dtype(|| format!("the value stored to {}", buffer.name()), expected, value.dtype());
            }
            StmtKind::If { cond, then_case, else_case } => {
                self.expr(cond);
                self.expect_dtype(|| "an if condition".to_string(), DType::BOOL, cond.dtype());
                self.stmt(then_case);
                if let Some(e) = else_case {
                    self.stmt(e);
                }
            }
            StmtKind::Seq(stmts) => stmts.iter().for_each(|s| self.stmt(s)),
            StmtKind::BoundsCheck { cond, .. } => {
                self.expr(cond);
                let expected = DType::BOOL.with_lanes(cond.dtype().lanes);
                self.expect_dtype(|| "a bounds check condition".to_string(), expected, cond.dtype());
            }
            StmtKind::Allocate { buffer, body } => {
                enter(&mut self.buffers, buffer);
                self.stmt(body);
                leave(&mut self.buffers, buffer);
            }
            StmtKind::Call { intrin, operands, reset, fallback, range } => {
                let tensors = intrin.operand_tensors();
                if *reset && crate::intrin::reset_value(intrin).is_none() {
                    let stmt = self.stmt_line();
                    self.report(VerifyError::Call {
                        intrin: intrin.name.clone(),
                        what: "a reset".into(),
                        expected: "a declaration that reduces, with a constant identity".into(),
                        found: format!("`{}`", intrin.output.body().map(|b| b.to_string()).unwrap_or_default()),
                        stmt,
                    });
                }
                let call_error = |what: String, expected: String, found: String, v: &mut Verifier<'f>| {
                    let stmt = v.stmt_line();
                    v.report(VerifyError::Call { intrin: intrin.name.clone(), what, expected, found, stmt });
                };
                if operands.len() != tensors.len() {
                    let expected = format!("{} (inputs, then the output)", tensors.len());
                    call_error("the operand count".into(), expected, operands.len().to_string(), self);
                }
                for (op, tensor) in operands.iter().zip(&tensors) {
                    op.origin.iter().for_each(|i| self.expr(i));
                    let lanes = self.access(&op.buffer, &op.origin);
                    if lanes != 1 {
                        let what = format!("the origin of operand {}", op.buffer.name());
                        call_error(what, "scalar indices".into(), format!("{lanes} lanes"), self);
                    }
                    if op.buffer.dtype() != tensor.dtype() {
                        let what = format!("the element type of operand {} (for {tensor})", op.buffer.name());
                        call_error(what, tensor.dtype().to_string(), op.buffer.dtype().to_string(), self);
                    }
                    if op.strides.len() != tensor.shape().len() {
                        let (name, shape) = (op.buffer.name(), tensor.shape());
                        let what = format!("the stride count of operand {name} (for {tensor}{shape:?})");
                        call_error(what, tensor.shape().len().to_string(), op.strides.len().to_string(), self);
                    }
                }
                if let Some(r) = range {
                    if segmented_gemm(intrin).is_none() {
                        let expected = "a segmented Int8Gemm or Int16Gemm declaration, or a GemmMap of one".into();
                        call_error("a segment range".into(), expected, format!("{:?}", intrin.kind), self);
                    }
                    for e in [&r.first, &r.last] {
                        self.expr(e);
                        self.expect_dtype(|| "a segment range bound".to_string(), DType::INDEX, e.dtype());
                    }
                }
                self.stmt(fallback);
            }
        }
    }

    /// Checks the buffer and indices of an access; returns its lane count.
    fn access(&mut self, buffer: &Buffer, indices: &[Expr]) -> u16 {
        if !self.buffers.contains_key(buffer) {
            self.report(VerifyError::UnknownBuffer { buffer: buffer.name().to_string(), stmt: self.stmt_line() });
        }
        let dims = buffer.shape().len();
        let ok = match self.level {
            VerifyLevel::Final => indices.len() == 1,
            VerifyLevel::Lowered => indices.len() == dims || indices.len() == 1,
        };
        if !ok {
            let expected = match self.level {
                VerifyLevel::Final => "1 flat index".to_string(),
                VerifyLevel::Lowered => format!("{dims} or 1 flat index"),
            };
            let stmt = self.stmt_line();
            self.report(VerifyError::IndexCount {
                buffer: buffer.name().to_string(),
                dims,
                found: indices.len(),
                expected,
                stmt,
            });
        }
        let lanes = indices.iter().map(|i| i.dtype().lanes).max().unwrap_or(1);
        for index in indices {
            let found = index.dtype();
            if found.scalar != DType::INDEX.scalar || (found.lanes != 1 && found.lanes != lanes) {
                self.dtype_error(
                    format!("index `{index}` of {}", buffer.name()),
                    format!("i64 with 1 or {lanes} lanes"),
                    found,
                );
            }
        }
        lanes
    }

    fn expr(&mut self, e: &Expr) {
        for child in e.child_iter() {
            self.expr(child);
        }
        let dtype = e.dtype();
        match e.kind() {
            ExprKind::Int(_) if !(dtype.is_int() || dtype.is_bool()) || dtype.is_vector() => {
                self.dtype_error(format!("integer constant `{e}`"), "a scalar integer or bool".into(), dtype)
            }
            ExprKind::Float(_) if !dtype.is_float() || dtype.is_vector() => {
                self.dtype_error(format!("float constant `{e}`"), "a scalar float".into(), dtype)
            }
            ExprKind::Int(_) | ExprKind::Float(_) => {}
            ExprKind::Var(v) => {
                if !self.vars.contains_key(v) {
                    self.report(VerifyError::UnboundVar { var: v.name().to_string(), stmt: self.stmt_line() });
                }
            }
            ExprKind::Binary(op, a, b) => {
                self.expect_dtype(|| format!("right operand of `{}` in `{e}`", op.symbol()), a.dtype(), b.dtype());
                self.expect_dtype(|| format!("`{e}`"), a.dtype(), dtype);
            }
            ExprKind::Cmp(op, a, b) => {
                self.expect_dtype(|| format!("right operand of `{}` in `{e}`", op.symbol()), a.dtype(), b.dtype());
                self.expect_dtype(|| format!("`{e}`"), DType::BOOL.with_lanes(a.dtype().lanes), dtype);
            }
            ExprKind::Not(a) => self.expect_dtype(|| format!("`{e}`"), a.dtype(), dtype),
            ExprKind::Round(a) => {
                self.expect_dtype(|| format!("`{e}`"), a.dtype(), dtype);
                if !dtype.is_float() {
                    self.dtype_error(format!("`{e}`"), "a float type".to_string(), dtype);
                }
            }
            ExprKind::Sqrt(a) => {
                self.expect_dtype(|| format!("`{e}`"), a.dtype(), dtype);
                if !dtype.is_float() {
                    self.dtype_error(format!("`{e}`"), "a float type".to_string(), dtype);
                }
            }
            ExprKind::Fma(a, b, c) => {
                self.expect_dtype(|| format!("second operand of `{e}`"), a.dtype(), b.dtype());
                self.expect_dtype(|| format!("third operand of `{e}`"), a.dtype(), c.dtype());
                self.expect_dtype(|| format!("`{e}`"), a.dtype(), dtype);
                if dtype.scalar != ScalarType::F32 && dtype.scalar != ScalarType::F64 {
                    self.dtype_error(format!("`{e}`"), "f32 or f64".to_string(), dtype);
                }
            }
            ExprKind::Reinterpret(a) => {
                let from = a.dtype();
                if from.lanes != dtype.lanes || from.bits() != dtype.bits() || from.is_bool() || dtype.is_bool() {
                    let expected = format!("a non-bool type of {} bits with {} lanes", from.bits(), from.lanes);
                    self.dtype_error(format!("`{e}`"), expected, dtype);
                }
            }
            ExprKind::Cast(a) | ExprKind::SaturatingCast(a) => {
                if a.dtype().lanes != dtype.lanes {
                    self.dtype_error(format!("`{e}`"), format!("a type with {} lanes", a.dtype().lanes), dtype);
                }
            }
            ExprKind::Select(c, t, f) => {
                let lanes = t.dtype().lanes;
                if !c.dtype().is_bool() || (c.dtype().lanes != 1 && c.dtype().lanes != lanes) {
                    let expected =
                        if lanes == 1 { "a scalar bool".to_string() } else { format!("bool with 1 or {lanes} lanes") };
                    self.dtype_error(format!("condition of `{e}`"), expected, c.dtype());
                }
                self.expect_dtype(|| format!("else arm of `{e}`"), t.dtype(), f.dtype());
                self.expect_dtype(|| format!("`{e}`"), t.dtype(), dtype);
            }
            ExprKind::TensorRead(..) | ExprKind::Reduce(_) => {
                self.report(VerifyError::TensorExpr { expr: e.to_string(), stmt: self.stmt_line() })
            }
            ExprKind::Load(buffer, indices) => {
                let lanes = self.access(buffer, indices);
                self.expect_dtype(|| format!("`{e}`"), buffer.dtype().with_lanes(lanes), dtype);
            }
            ExprKind::Ramp(base, stride) => {
                let element = dtype.element();
                self.expect_dtype(|| format!("base of `{e}`"), element, base.dtype());
                self.expect_dtype(|| format!("stride of `{e}`"), element, stride.dtype());
            }
            ExprKind::Broadcast(v) => self.expect_dtype(|| format!("operand of `{e}`"), dtype.element(), v.dtype()),
            ExprKind::VectorReduce(_, v) => {
                if v.dtype().element() != dtype.element() || v.dtype().lanes % dtype.lanes != 0 {
                    let expected = format!("{} with a multiple of {} lanes", dtype.element(), dtype.lanes);
                    self.dtype_error(format!("operand of `{e}`"), expected, v.dtype());
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::expr::select;
    use crate::te::placeholder;

    fn valid() -> Func {
        let a = Buffer::new("A", DType::F32, vec![4, 8]);
        let b = Buffer::new("B", DType::F32, vec![32]);
        let tmp = Buffer::new("T", DType::F32, vec![8]);
        let (i, j, t) = (Var::index("i"), Var::index("j"), Var::new("t", DType::F32));
        let v = Expr::ramp(i.to_expr() * 8, Expr::index(1), 8);
        let body = Stmt::seq(vec![
            Stmt::store(&tmp, vec![Expr::ramp(Expr::index(0), Expr::index(1), 8)], Expr::load(&b, vec![v.clone()])),
            Stmt::for_loop(
                j.clone(),
                8,
                ForKind::Serial,
                Stmt::let_stmt(
                    t.clone(),
                    Expr::load(&tmp, vec![j.to_expr()]),
                    Stmt::if_then(j.to_expr().lt(4), Stmt::store(&b, vec![i.to_expr() * 8 + j.to_expr()], t.to_expr())),
                ),
            ),
        ]);
        let body = Stmt::allocate(tmp, body);
        Func { name: "f".into(), params: vec![a, b], body: Stmt::for_loop(i, 4, ForKind::Parallel, body) }
    }

    #[test]
    fn well_formed_final_ir_passes() {
        assert_eq!(verify(&valid(), VerifyLevel::Lowered), Ok(()));
        assert_eq!(verify(&valid(), VerifyLevel::Final), Ok(()));
    }

    #[test]
    fn sqrt_of_an_integer_and_a_reinterpret_across_widths_are_reported() {
        let a = Buffer::new("A", DType::I32, vec![4]);
        let b = Buffer::new("B", DType::F64, vec![4]);
        let i = Var::index("i");
        let int = Expr::load(&a, vec![i.to_expr()]);
        let body = Stmt::seq(vec![
            Stmt::store(&a, vec![i.to_expr()], int.sqrt()),
            Stmt::store(&b, vec![i.to_expr()], int.reinterpret(DType::F64)),
            Stmt::store(
                &a,
                vec![i.to_expr()],
                Expr::load(&b, vec![i.to_expr()]).reinterpret(DType::I64).cast(DType::I32),
            ),
        ]);
        let f = Func { name: "f".into(), params: vec![a, b], body: Stmt::for_loop(i, 4, ForKind::Serial, body) };
        let errors: Vec<String> = verify(&f, VerifyLevel::Lowered).unwrap_err().iter().map(|e| e.to_string()).collect();
        assert_eq!(errors.len(), 2, "{errors:?}");
        assert!(errors[0].contains("sqrt(A[i])") && errors[0].contains("a float type"), "{}", errors[0]);
        assert!(errors[1].contains("reinterpret_f64(A[i])") && errors[1].contains("32 bits"), "{}", errors[1]);
    }

    #[test]
    fn every_violation_is_reported() {
        let a = Buffer::new("A", DType::F32, vec![4, 8]);
        let stray = Buffer::new("S", DType::F32, vec![4]);
        let (i, free, t) = (Var::index("i"), Var::index("free"), Var::index("t"));
        let read = placeholder([4], DType::F32, "P").unwrap().at([&i.to_expr()]);
        let body = Stmt::seq(vec![
            Stmt::store(&a, vec![i.to_expr(), free.to_expr()], Expr::float(DType::F32, 0.0)),
            Stmt::store(&a, vec![i.to_expr(), Expr::index(0)], Expr::int(DType::I32, 1)),
            Stmt::store(&stray, vec![i.to_expr()], read),
            Stmt::let_stmt(t, Expr::int(DType::I32, 3) + Expr::index(1), Stmt::no_op()),
            Stmt::if_then(
                i.to_expr(),
                Stmt::store(
                    &a,
                    vec![Expr::index(0)],
                    select(
                        Expr::broadcast(Expr::bool(true), 4),
                        Expr::float(DType::F32, 1.0),
                        Expr::float(DType::F32, 2.0),
                    ),
                ),
            ),
            Stmt::for_loop(Var::index("k"), -1, ForKind::Serial, Stmt::no_op()),
            Stmt::store(
                &a,
                vec![Expr::ramp(Expr::index(0), Expr::broadcast(Expr::index(1), 4), 4)],
                Expr::broadcast(Expr::float(DType::F32, 1.0), 4),
            ),
        ]);
        let f = Func { name: "f".into(), params: vec![a], body: Stmt::for_loop(i, 4, ForKind::Vectorized, body) };
        let errors: Vec<String> = verify(&f, VerifyLevel::Lowered).unwrap_err().iter().map(|e| e.to_string()).collect();
        assert_eq!(
            errors,
            [
                "variable free is not bound by an enclosing For or Let, in `A[i, free] = 0.0f32`",
                "the value stored to A must be f32, found i32, in `A[i, 0] = 1i32`",
                "tensor-expression node `P[i]` in loop IR (lowering must replace it), in `S[i] = P[i]`",
                "buffer S is neither a parameter nor allocated by an enclosing Allocate, in `S[i] = P[i]`",
                "right operand of `+` in `3i32 + 1` must be i32, found i64, in `let t = 3i32 + 1`",
                "the value of let t must be i64, found i32, in `let t = 3i32 + 1`",
                "an if condition must be bool, found i64, in `if i {`",
                "condition of `select(broadcast(true, 4), 1.0f32, 2.0f32)` must be a scalar bool, found boolx4, in `A[0] = select(broadcast(true, 4), 1.0f32, 2.0f32)`",
                "loop extent must be non-negative, found -1, in `for k in 0..-1 {`",
                "stride of `ramp(0, broadcast(1, 4), 4)` must be i64, found i64x4, in `A[ramp(0, broadcast(1, 4), 4)] = broadcast(1.0f32, 4)`",
            ]
        );
        let final_errors: Vec<String> =
            verify(&f, VerifyLevel::Final).unwrap_err().iter().map(|e| e.to_string()).collect();
        assert!(final_errors.contains(
            &"vectorized loops must be carried out before code generation, in `vectorized i in 0..4 {`".to_string()
        ));
        assert!(final_errors.contains(
            &"buffer A has 2 dimensions and is accessed with 2 indices (expected 1 flat index), in `A[i, free] = 0.0f32`".to_string()
        ));
    }
}
