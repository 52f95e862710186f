//! The text format of expressions and the loop IR. It is an API: golden tests compare it.
//!
//! ```text
//! func C(A: u8[64, 32], B: i8[48, 32], C: i32[64, 48]) {
//!   parallel i.outer in 0..16 {
//!     let i = i.outer*4 + i.inner
//!     C[i*48 + j] = 0i32
//!   }
//! }
//! ```
//!
//! Integer constants of type `i64` print bare and others carry their type (`0i32`, `255u8`);
//! casts print as calls (`i32(x)`, `sat_u8(x)`). A tensor-intrinsic call prints each operand as
//! its origin and strides, `call int8_gemm_4x16x64(A[i*64] strides [64, 1], ...)`; its fallback
//! is not printed (print the fallback statement to see it). In a `Func`, two different variables with one
//! name print as `name`, `name.1`, ... in order of first appearance, so the text is deterministic.

use rustc_hash::FxHashMap as HashMap;
use std::fmt::{self, Write};

use crate::expr::{BinOp, Expr, ExprKind, VarId};
use crate::stmt::{Func, Stmt, StmtKind};
use crate::te::TensorId;

/// Names variables for printing: unique within one printed unit, stable in appearance order.
#[derive(Default)]
struct Names {
    by_id: HashMap<VarId, String>,
    taken: HashMap<String, u32>,
}

impl Names {
    fn get(&mut self, id: VarId, name: &str) -> String {
        if let Some(n) = self.by_id.get(&id) {
            return n.clone();
        }
        let count = self.taken.entry(name.to_string()).or_insert(0);
        let unique = if *count == 0 { name.to_string() } else { format!("{name}.{count}") };
        *count += 1;
        self.by_id.insert(id, unique.clone());
        unique
    }
}

/// Binding strength, higher binds tighter. Calls and atoms are `ATOM`.
fn precedence(expr: &Expr) -> u8 {
    match expr.kind() {
        ExprKind::Binary(op, ..) => match op {
            BinOp::Or => 1,
            BinOp::Xor => 2,
            BinOp::And => 3,
            BinOp::Shl | BinOp::Shr => 5,
            BinOp::Add | BinOp::Sub => 6,
            BinOp::Mul | BinOp::Div | BinOp::Mod => 7,
            BinOp::Min | BinOp::Max => ATOM,
        },
        ExprKind::Cmp(..) => 4,
        ExprKind::Not(_) => 8,
        ExprKind::Int(v) if *v < 0 => 8,
        ExprKind::Float(v) if *v < 0.0 => 8,
        _ => ATOM,
    }
}

const ATOM: u8 = 10;

struct Printer<'r> {
    out: String,
    names: Names,
    indent: usize,
    rename: Option<Renaming<'r>>,
}

/// Names printed instead of variables' and tensors' own (`expr_renamed`).
#[derive(Clone, Copy)]
pub(crate) struct Renaming<'r> {
    pub vars: &'r HashMap<VarId, String>,
    pub tensors: &'r HashMap<TensorId, String>,
}

impl<'r> Renaming<'r> {
    fn var<'a>(&self, id: VarId, own: &'a str) -> &'a str
    where
        'r: 'a,
    {
        self.vars.get(&id).map_or(own, String::as_str)
    }
}

/// `expr` as `Display` prints it, with the names of `rename` in place of the variables' and
/// tensors' own: the text of a copy renamed so, without making the copy.
pub(crate) fn expr_renamed(expr: &Expr, rename: Renaming<'_>) -> String {
    let mut p = Printer { out: String::new(), names: Names::default(), indent: 0, rename: Some(rename) };
    p.expr(expr);
    p.out
}

impl Printer<'_> {
    fn expr(&mut self, expr: &Expr) {
        let dtype = expr.dtype();
        match expr.kind() {
            ExprKind::Int(v) => {
                if dtype.is_bool() {
                    let _ = write!(self.out, "{}", *v != 0);
                } else if dtype.is_unsigned_int() {
                    let bits = dtype.bits();
                    let u = if bits == 64 { *v as u64 } else { (*v as u64) & ((1u64 << bits) - 1) };
                    let _ = write!(self.out, "{u}{dtype}");
                } else if dtype == crate::DType::INDEX {
                    let _ = write!(self.out, "{v}");
                } else {
                    let _ = write!(self.out, "{v}{dtype}");
                }
            }
            ExprKind::Float(v) => {
                let _ = write!(self.out, "{v:?}{dtype}");
            }
            ExprKind::Var(v) => {
                let own = v.name();
                let name = self.names.get(v.id(), self.rename.map_or(own, |r| r.var(v.id(), own)));
                self.out.push_str(&name);
            }
            ExprKind::Binary(op, a, b) if op.is_call_syntax() => self.call(op.symbol(), &[a, b]),
            ExprKind::Binary(op, a, b) => self.infix(expr, op.symbol(), a, b),
            ExprKind::Cmp(op, a, b) => self.infix(expr, op.symbol(), a, b),
            ExprKind::Not(a) => {
                self.out.push('!');
                self.operand(a, precedence(expr) + 1);
            }
            ExprKind::Cast(a) => self.call(&dtype.to_string(), &[a]),
            ExprKind::SaturatingCast(a) => self.call(&format!("sat_{dtype}"), &[a]),
            ExprKind::Round(a) => self.call("round", &[a]),
            ExprKind::Sqrt(a) => self.call("sqrt", &[a]),
            ExprKind::Reinterpret(a) => self.call(&format!("reinterpret_{dtype}"), &[a]),
            ExprKind::Select(c, t, f) => self.call("select", &[c, t, f]),
            ExprKind::Fma(a, b, c) => self.call("fma", &[a, b, c]),
            ExprKind::TensorRead(t, idx) => {
                let rename = self.rename;
                let name = rename.and_then(|r| r.tensors.get(&t.id())).map_or(t.name(), String::as_str);
                self.access(name, idx)
            }
            ExprKind::Load(b, idx) => self.access(b.name(), idx),
            ExprKind::Reduce(r) => {
                let _ = write!(self.out, "{}[", r.reducer.name());
                for (i, axis) in r.axes.iter().enumerate() {
                    if i > 0 {
                        self.out.push_str(", ");
                    }
                    let (id, own) = (axis.var().id(), axis.name());
                    let name = self.names.get(id, self.rename.map_or(own, |r| r.var(id, own)));
                    let _ = write!(self.out, "{name} in 0..{}", axis.extent());
                }
                self.out.push_str("](");
                self.expr(&r.source);
                self.out.push(')');
            }
            ExprKind::Ramp(base, stride) => {
                self.out.push_str("ramp(");
                self.expr(base);
                self.out.push_str(", ");
                self.expr(stride);
                let _ = write!(self.out, ", {})", dtype.lanes);
            }
            ExprKind::Broadcast(v) => {
                self.out.push_str("broadcast(");
                self.expr(v);
                let _ = write!(self.out, ", {})", dtype.lanes);
            }
            ExprKind::VectorReduce(op, v) => {
                let _ = write!(self.out, "vector_reduce_{}(", op.name());
                self.expr(v);
                let _ = write!(self.out, ", {})", dtype.lanes);
            }
        }
    }

    fn operand(&mut self, e: &Expr, min_prec: u8) {
        if precedence(e) < min_prec {
            self.out.push('(');
            self.expr(e);
            self.out.push(')');
        } else {
            self.expr(e);
        }
    }

    fn infix(&mut self, whole: &Expr, symbol: &str, a: &Expr, b: &Expr) {
        let prec = precedence(whole);
        self.operand(a, prec);
        let spaced = !matches!(whole.kind(), ExprKind::Binary(BinOp::Mul | BinOp::Div | BinOp::Mod, ..));
        if spaced {
            let _ = write!(self.out, " {symbol} ");
        } else {
            self.out.push_str(symbol);
        }
        // Left-associative printing: a right operand of equal precedence keeps its parentheses.
        self.operand(b, prec + 1);
    }

    fn call(&mut self, name: &str, args: &[&Expr]) {
        self.out.push_str(name);
        self.out.push('(');
        for (i, a) in args.iter().enumerate() {
            if i > 0 {
                self.out.push_str(", ");
            }
            self.expr(a);
        }
        self.out.push(')');
    }

    fn access(&mut self, name: &str, indices: &[Expr]) {
        self.out.push_str(name);
        self.out.push('[');
        for (i, idx) in indices.iter().enumerate() {
            if i > 0 {
                self.out.push_str(", ");
            }
            self.expr(idx);
        }
        self.out.push(']');
    }

    fn line_start(&mut self) {
        for _ in 0..self.indent {
            self.out.push_str("  ");
        }
    }

    fn block(&mut self, body: &Stmt) {
        self.out.push_str(" {\n");
        self.indent += 1;
        self.stmt(body);
        self.indent -= 1;
        self.line_start();
        self.out.push('}');
    }

    fn stmt(&mut self, stmt: &Stmt) {
        match stmt.kind() {
            StmtKind::Seq(stmts) => {
                for s in stmts {
                    self.stmt(s);
                }
            }
            StmtKind::For { var, extent, kind, body } => {
                self.line_start();
                let name = self.names.get(var.id(), var.name());
                let _ = write!(self.out, "{} {name} in 0..{extent}", kind.keyword());
                self.block(body);
                self.out.push('\n');
            }
            StmtKind::Let { var, value, body } => {
                self.line_start();
                let name = self.names.get(var.id(), var.name());
                let _ = write!(self.out, "let {name} = ");
                self.expr(value);
                self.out.push('\n');
                self.stmt(body);
            }
            StmtKind::Store { buffer, indices, value } => {
                self.line_start();
                self.access(buffer.name(), indices);
                self.out.push_str(" = ");
                self.expr(value);
                self.out.push('\n');
            }
            StmtKind::If { cond, then_case, else_case } => {
                self.line_start();
                self.out.push_str("if ");
                self.expr(cond);
                self.block(then_case);
                if let Some(e) = else_case {
                    self.out.push_str(" else");
                    self.block(e);
                }
                self.out.push('\n');
            }
            StmtKind::Allocate { buffer, body } => {
                self.line_start();
                let _ = write!(self.out, "allocate {}: {}{:?}", buffer.name(), buffer.dtype(), buffer.shape());
                self.out.push('\n');
                self.stmt(body);
            }
            StmtKind::BoundsCheck { cond, buffer } => {
                self.line_start();
                self.out.push_str("check ");
                self.expr(cond);
                let _ = writeln!(self.out, " else out_of_bounds({})", buffer.name());
            }
            StmtKind::Call { intrin, operands, reset, range, .. } => {
                self.line_start();
                let _ = write!(self.out, "call {}{}(", if *reset { "reset " } else { "" }, intrin.name);
                for (i, op) in operands.iter().enumerate() {
                    if i > 0 {
                        self.out.push_str(", ");
                    }
                    self.access(op.buffer.name(), &op.origin);
                    let _ = write!(self.out, " strides {:?}", op.strides);
                }
                self.out.push(')');
                if let Some(r) = range {
                    self.out.push_str(" segments [");
                    self.expr(&r.first);
                    self.out.push_str(", ");
                    self.expr(&r.last);
                    self.out.push(')');
                }
                self.out.push('\n');
            }
        }
    }
}

fn new_printer() -> Printer<'static> {
    Printer { out: String::new(), names: Names::default(), indent: 0, rename: None }
}

impl fmt::Display for Expr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut p = new_printer();
        p.expr(self);
        f.write_str(&p.out)
    }
}

impl fmt::Display for Stmt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut p = new_printer();
        p.stmt(self);
        f.write_str(&p.out)
    }
}

impl fmt::Display for Func {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut p = new_printer();
        let _ = write!(p.out, "func {}(", self.name);
        for (i, b) in self.params.iter().enumerate() {
            if i > 0 {
                p.out.push_str(", ");
            }
            let _ = write!(p.out, "{}: {}{:?}", b.name(), b.dtype(), b.shape());
        }
        p.out.push_str(") {\n");
        p.indent = 1;
        p.stmt(&self.body);
        p.out.push_str("}\n");
        f.write_str(&p.out)
    }
}
