//! Expressions, shared by tensor expressions and the loop IR.
//!
//! # Semantics of expressions
//!
//! These rules are the definition; `interp` implements them and every other part of the
//! compiler (simplifier, JIT) must agree with `interp` bit for bit on integers.
//!
//! * **Types.** Every node has one `DType`. Binary operands always have identical dtypes;
//!   mixing types without a cast is a user error reported by `te::compute`
//!   (`TeError::DTypeMismatch`). There is no implicit promotion, ever.
//! * **Integers wrap** at their type's width (two's complement), for `+ - *`, shifts and casts.
//!   Index arithmetic is `i64` and tensor shapes are small enough that it never wraps.
//! * **Division and modulo of integers are floor division and floor modulo** (Python's `//` and
//!   `%`): `-7 / 2 == -4`, `-7 % 2 == 1`; the remainder has the sign of the divisor.
//!   Division by zero gives 0 and modulo by zero gives 0 (as in Halide). `MIN / -1` wraps to `MIN`
//!   and `MIN % -1` is 0. Floats use IEEE 754 division and `fmod`-free floor modulo
//!   `a - b * floor(a / b)`.
//! * **Shifts** take the shift amount modulo the bit width; `>>` is arithmetic for signed and
//!   logical for unsigned types.
//! * **Floats** follow IEEE 754 with round-to-nearest-even. `f16` and `bf16` arithmetic is
//!   computed exactly in `f32` and rounded once to the 16-bit type, which is correctly rounded
//!   for `+ - * /`. `min`/`max` of floats return the non-NaN operand if exactly one is NaN.
//! * **Comparisons** produce `bool`; `bool` supports `&`, `|`, `^` and `!` (logical).
//! * **Vectors** are lane-wise: a vector op applies its scalar rule to each lane. `Ramp` and
//!   `Broadcast` build index vectors; `VectorReduce` folds groups of adjacent lanes.
//! * **Evaluation.** Expressions are pure. A read outside its tensor is an error: `te::compute`
//!   rejects a read that can leave its tensor at some point where it is evaluated (only the
//!   chosen arm of a `Select` is, so its condition narrows the check), and a read whose index
//!   depends on data is checked when it runs (`passes::check_gathers`, `InterpError::IndexCheck`,
//!   `RuntimeError::IndexOutOfBounds`). Code generation may still evaluate both arms of a
//!   `Select`; memory safety of the arm not chosen is guaranteed by `passes::guard_accesses`,
//!   which clamps every access it cannot prove in bounds.
//!
//! `Cast` semantics (one definition for the whole compiler):
//! * int → int: wrap (keep the low bits, then sign- or zero-extend by the target's signedness).
//! * float → int: round toward zero and saturate to the target range; NaN gives 0 (Rust `as`).
//! * int → float, float → float: round to nearest even.
//! * bool → number: 0 or 1. number → bool: `x != 0`.
//!
//! `SaturatingCast` is the same as `Cast` except that int → int clamps to the target range.
//!
//! `Round` rounds a float to the nearest integral value of the same float type, ties to even
//! (`f64::round_ties_even`: `0.5 → 0`, `1.5 → 2`, `2.5 → 2`, `-0.5 → -0`, `-2.5 → -2`); ±0, ±∞
//! and NaN are returned unchanged. It is defined on floats only. Requantization to an integer
//! type is `saturating_cast(round(x))`: the float → int cast then only saturates.
//! `Sqrt` is the IEEE 754 square root, correctly rounded in the operand's float type:
//! `sqrt(-0) == -0`, `sqrt(+∞) == +∞`, NaN for any other negative operand or NaN.
//! `Reinterpret` reads the operand's bits as another type of the same width (`f32` ↔ `i32`/`u32`,
//! `f64` ↔ `i64`/`u64`, `f16`/`bf16` ↔ `i16`/`u16`, integers of one width): no conversion.
//! The only caveat is NaN payloads: a signalling NaN read as a float may come back quiet (the
//! interpreter holds floats as f64), so code must not rely on the payload bits of a NaN.
//! The f32 math functions (`exp`, `log`, `tanh`, ...) are not nodes: they are expression builders
//! in `crate::math` that expand into these basic operations, so every backend evaluates one
//! sequence of correctly rounded IEEE operations (see that module for each one's error bound).
//! `widening_mul` and `widening_add` are exact: they cast both operands to the type of twice the
//! width (signed if either operand is signed) before the operation, so the result never wraps.

use std::fmt;
use std::ops;
use std::rc::Rc;
use std::sync::atomic::{AtomicU32, Ordering};

use crate::dtype::{DType, ScalarType};
use crate::stmt::Buffer;
use crate::te::{IterVar, Reducer, Tensor};

/// Identity of a variable. Names are for printing only; two variables with the same name are
/// different variables.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, PartialOrd, Ord)]
pub struct VarId(pub u32);

static NEXT_VAR_ID: AtomicU32 = AtomicU32::new(0);

#[derive(Debug)]
pub struct VarData {
    pub id: VarId,
    pub name: String,
    pub dtype: DType,
}

/// A variable: a loop counter, a let binding, an iteration axis of a tensor expression.
#[derive(Clone, Debug)]
pub struct Var(Rc<VarData>);

impl Var {
    pub fn new(name: impl Into<String>, dtype: DType) -> Var {
        let id = VarId(NEXT_VAR_ID.fetch_add(1, Ordering::Relaxed));
        Var(Rc::new(VarData { id, name: name.into(), dtype }))
    }

    /// A new `i64` index variable.
    pub fn index(name: impl Into<String>) -> Var {
        Var::new(name, DType::INDEX)
    }

    pub fn id(&self) -> VarId {
        self.0.id
    }

    pub fn name(&self) -> &str {
        &self.0.name
    }

    pub fn dtype(&self) -> DType {
        self.0.dtype
    }

    pub fn to_expr(&self) -> Expr {
        Expr::var(self)
    }
}

impl PartialEq for Var {
    fn eq(&self, other: &Var) -> bool {
        self.0.id == other.0.id
    }
}
impl Eq for Var {}
impl std::hash::Hash for Var {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.0.id.hash(state)
    }
}
impl PartialOrd for Var {
    fn partial_cmp(&self, other: &Var) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Var {
    fn cmp(&self, other: &Var) -> std::cmp::Ordering {
        self.0.id.cmp(&other.0.id)
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum BinOp {
    Add,
    Sub,
    Mul,
    /// Floor division; x / 0 == 0 (see the module doc).
    Div,
    /// Floor modulo; x % 0 == 0.
    Mod,
    /// The smaller operand. Floats: a NaN operand gives the other one; a tie (zeros of either
    /// sign included) gives the first.
    Min,
    /// The larger operand. Floats: a NaN operand gives the other one; a tie (zeros of either
    /// sign included) gives the first.
    Max,
    /// Bitwise for integers, logical for bool.
    And,
    Or,
    Xor,
    /// Shift amount taken modulo the bit width.
    Shl,
    /// Arithmetic for signed, logical for unsigned.
    Shr,
}

impl BinOp {
    pub fn symbol(self) -> &'static str {
        match self {
            BinOp::Add => "+",
            BinOp::Sub => "-",
            BinOp::Mul => "*",
            BinOp::Div => "/",
            BinOp::Mod => "%",
            BinOp::Min => "min",
            BinOp::Max => "max",
            BinOp::And => "&",
            BinOp::Or => "|",
            BinOp::Xor => "^",
            BinOp::Shl => "<<",
            BinOp::Shr => ">>",
        }
    }

    /// `min` and `max` print as calls, the rest as infix operators.
    pub fn is_call_syntax(self) -> bool {
        matches!(self, BinOp::Min | BinOp::Max)
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum CmpOp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

impl CmpOp {
    pub fn symbol(self) -> &'static str {
        match self {
            CmpOp::Eq => "==",
            CmpOp::Ne => "!=",
            CmpOp::Lt => "<",
            CmpOp::Le => "<=",
            CmpOp::Gt => ">",
            CmpOp::Ge => ">=",
        }
    }
}

/// How `VectorReduce` folds a group of adjacent lanes.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum VectorReduceOp {
    Add,
    Min,
    Max,
}

impl VectorReduceOp {
    pub fn name(self) -> &'static str {
        match self {
            VectorReduceOp::Add => "add",
            VectorReduceOp::Min => "min",
            VectorReduceOp::Max => "max",
        }
    }
}

/// A reduction in a tensor expression: `reducer` folds `source` over every point of `axes`,
/// starting from the reducer's identity. Only legal as the whole body of a `compute`.
#[derive(Debug)]
pub struct ReduceData {
    pub reducer: Reducer,
    pub source: Expr,
    pub axes: Vec<IterVar>,
}

#[derive(Debug)]
pub enum ExprKind {
    /// An integer or bool constant. The value is the constant's two's-complement bits
    /// sign-extended to 64 (so `u64::MAX` is stored as -1); the node dtype says how to read it.
    Int(i64),
    /// A float constant, already rounded to the node dtype.
    Float(f64),
    Var(Var),
    /// `a op b`; both operands and the result have the node dtype.
    Binary(BinOp, Expr, Expr),
    /// `a op b` on two operands of one dtype; the result is `bool` with the operands' lanes.
    Cmp(CmpOp, Expr, Expr),
    /// Bitwise not for integers, logical not for bool.
    Not(Expr),
    /// Conversion to the node dtype (module doc: int narrowing wraps, float → int saturates).
    Cast(Expr),
    /// Conversion that clamps integers to the node dtype's range instead of wrapping.
    SaturatingCast(Expr),
    /// Round to the nearest integral value, ties to even, in the operand's float type (which is
    /// the node dtype): `round(2.5) == 2.0`, `round(-0.5) == -0.0`; NaN and ±∞ are unchanged.
    /// Floats only (`te::check_expr` reports `TeError::UndefinedOperator` otherwise).
    Round(Expr),
    /// IEEE square root, correctly rounded in the node's float type (the operand's type):
    /// `sqrt(-0.0) == -0.0`, `sqrt(+∞) == +∞`, negative operands and NaN give NaN. Floats only.
    Sqrt(Expr),
    /// The operand's bits read as the node dtype, which has the same bit width and lane count
    /// (e.g. `f32` ↔ `i32`); never `bool`. A NaN's payload is not guaranteed to survive (module
    /// doc). This is how the math builders reach a float's exponent and sign bits.
    Reinterpret(Expr),
    /// `cond ? t : f`, lane-wise when `cond` is a vector. Both arms may be evaluated.
    Select(Expr, Expr, Expr),
    /// `a · b + c` fused: the exact product plus `c`, rounded once to the node's float type
    /// (IEEE 754 `fusedMultiplyAdd`, Rust's `f32::mul_add`); all three operands have the node
    /// dtype. Floats only (`te::check_expr`). Never contracted from or split into `*` and `+`.
    Fma(Expr, Expr, Expr),
    /// Element of a tensor at the given indices (one per dimension). Tensor expressions only:
    /// lowering replaces every `TensorRead` by a `Load`.
    TensorRead(Tensor, Vec<Expr>),
    /// A reduction (see `ReduceData`). Tensor expressions only.
    Reduce(Rc<ReduceData>),
    /// Element of a buffer. Before `flatten_buffers` there is one index per dimension; after, a
    /// single flat element index. A vector index loads one element per lane.
    Load(Buffer, Vec<Expr>),
    /// The vector `[base, base + stride, ..., base + (lanes-1)*stride]`; `base` and `stride` are
    /// scalars of the element type.
    Ramp(Expr, Expr),
    /// The scalar repeated in every lane of the node dtype.
    Broadcast(Expr),
    /// Folds each group of `input_lanes / output_lanes` adjacent lanes of the operand into one
    /// output lane. Integer `Add` wraps at the element width.
    VectorReduce(VectorReduceOp, Expr),
}

#[derive(Debug)]
pub struct ExprData {
    pub dtype: DType,
    pub kind: ExprKind,
}

/// An immutable, shared expression tree. Cloning is cheap; passes rebuild only what changes.
#[derive(Clone, Debug)]
pub struct Expr(Rc<ExprData>);

impl Expr {
    pub fn new(dtype: DType, kind: ExprKind) -> Expr {
        Expr(Rc::new(ExprData { dtype, kind }))
    }

    pub fn dtype(&self) -> DType {
        self.0.dtype
    }

    pub fn kind(&self) -> &ExprKind {
        &self.0.kind
    }

    /// True if both handles point at the same node (not a structural comparison).
    pub fn same_node(&self, other: &Expr) -> bool {
        Rc::ptr_eq(&self.0, &other.0)
    }

    // ---- Constructors --------------------------------------------------------------------

    /// An integer constant of the given scalar integer (or bool) type; the value wraps to it.
    pub fn int(dtype: DType, value: i64) -> Expr {
        assert!(dtype.is_int() || dtype.is_bool(), "Expr::int of {dtype}");
        Expr::new(dtype, ExprKind::Int(wrap_int(dtype.scalar, value as i128)))
    }

    /// An `i64` index constant.
    pub fn index(value: i64) -> Expr {
        Expr::int(DType::INDEX, value)
    }

    pub fn bool(value: bool) -> Expr {
        Expr::new(DType::BOOL, ExprKind::Int(value as i64))
    }

    /// A float constant, rounded to the given float type.
    pub fn float(dtype: DType, value: f64) -> Expr {
        assert!(dtype.is_float(), "Expr::float of {dtype}");
        Expr::new(dtype, ExprKind::Float(round_float(dtype.scalar, value)))
    }

    /// The constant zero of any scalar type.
    pub fn zero(dtype: DType) -> Expr {
        if dtype.is_float() { Expr::float(dtype, 0.0) } else { Expr::int(dtype, 0) }
    }

    pub fn var(var: &Var) -> Expr {
        Expr::new(var.dtype(), ExprKind::Var(var.clone()))
    }

    /// A binary node. The caller must pass operands of one dtype; `te::compute` reports
    /// violations made through the operator overloads as typed errors.
    pub fn binary(op: BinOp, a: Expr, b: Expr) -> Expr {
        let dtype = a.dtype();
        Expr::new(dtype, ExprKind::Binary(op, a, b))
    }

    pub fn cmp(op: CmpOp, a: Expr, b: Expr) -> Expr {
        let dtype = DType::BOOL.with_lanes(a.dtype().lanes);
        Expr::new(dtype, ExprKind::Cmp(op, a, b))
    }

    pub fn min(a: Expr, b: Expr) -> Expr {
        Expr::binary(BinOp::Min, a, b)
    }

    pub fn max(a: Expr, b: Expr) -> Expr {
        Expr::binary(BinOp::Max, a, b)
    }

    pub fn select(cond: Expr, t: Expr, f: Expr) -> Expr {
        let dtype = t.dtype();
        Expr::new(dtype, ExprKind::Select(cond, t, f))
    }

    /// Conversion to `dtype` (semantics in the module doc). A cast to the same type is the
    /// operand itself. The target's lane count is taken from the operand.
    pub fn cast(&self, dtype: impl Into<DType>) -> Expr {
        let dtype = dtype.into().element().with_lanes(self.dtype().lanes);
        if dtype == self.dtype() {
            return self.clone();
        }
        Expr::new(dtype, ExprKind::Cast(self.clone()))
    }

    /// Conversion that clamps integers to the target range.
    pub fn saturating_cast(&self, dtype: impl Into<DType>) -> Expr {
        let dtype = dtype.into().element().with_lanes(self.dtype().lanes);
        if dtype == self.dtype() {
            return self.clone();
        }
        Expr::new(dtype, ExprKind::SaturatingCast(self.clone()))
    }

    /// Round to nearest, ties to even, keeping the float type (see `ExprKind::Round`).
    pub fn round(&self) -> Expr {
        Expr::new(self.dtype(), ExprKind::Round(self.clone()))
    }

    /// `self · b + c`, rounded once (see `ExprKind::Fma`).
    pub fn fma(&self, b: &Expr, c: &Expr) -> Expr {
        Expr::new(self.dtype(), ExprKind::Fma(self.clone(), b.clone(), c.clone()))
    }

    /// IEEE square root, correctly rounded (see `ExprKind::Sqrt`).
    pub fn sqrt(&self) -> Expr {
        Expr::new(self.dtype(), ExprKind::Sqrt(self.clone()))
    }

    /// The same bits read as `dtype` (see `ExprKind::Reinterpret`). The target's lane count is
    /// taken from the operand; a reinterpretation to the same type is the operand itself.
    pub fn reinterpret(&self, dtype: impl Into<DType>) -> Expr {
        let dtype = dtype.into().element().with_lanes(self.dtype().lanes);
        if dtype == self.dtype() {
            return self.clone();
        }
        Expr::new(dtype, ExprKind::Reinterpret(self.clone()))
    }

    pub fn ramp(base: Expr, stride: Expr, lanes: u16) -> Expr {
        let dtype = base.dtype().with_lanes(lanes);
        Expr::new(dtype, ExprKind::Ramp(base, stride))
    }

    pub fn broadcast(value: Expr, lanes: u16) -> Expr {
        let dtype = value.dtype().with_lanes(lanes);
        Expr::new(dtype, ExprKind::Broadcast(value))
    }

    pub fn vector_reduce(op: VectorReduceOp, value: Expr, output_lanes: u16) -> Expr {
        assert!(value.dtype().lanes.is_multiple_of(output_lanes), "vector_reduce lane count");
        let dtype = value.dtype().with_lanes(output_lanes);
        Expr::new(dtype, ExprKind::VectorReduce(op, value))
    }

    pub fn load(buffer: &Buffer, indices: Vec<Expr>) -> Expr {
        let lanes = indices.iter().map(|it| it.dtype().lanes).max().unwrap_or(1);
        Expr::new(buffer.dtype().with_lanes(lanes), ExprKind::Load(buffer.clone(), indices))
    }

    // ---- Queries ---------------------------------------------------------------------------

    /// The value of an integer or bool constant, read according to its dtype.
    pub fn as_int(&self) -> Option<i64> {
        match self.kind() {
            ExprKind::Int(v) => Some(*v),
            _ => None,
        }
    }

    pub fn as_var(&self) -> Option<&Var> {
        match self.kind() {
            ExprKind::Var(v) => Some(v),
            _ => None,
        }
    }

    pub fn is_const(&self) -> bool {
        matches!(self.kind(), ExprKind::Int(_) | ExprKind::Float(_))
    }

    /// The direct children, in evaluation order.
    pub fn children(&self) -> Vec<&Expr> {
        self.child_iter().collect()
    }

    /// The direct children, in evaluation order, without collecting them (the walks over every
    /// node use this: no allocation per node).
    pub fn child_iter(&self) -> impl Iterator<Item = &Expr> + Clone {
        let (fixed, indices): ([Option<&Expr>; 3], &[Expr]) = match self.kind() {
            ExprKind::Int(_) | ExprKind::Float(_) | ExprKind::Var(_) => ([None; 3], &[]),
            ExprKind::Binary(_, a, b) | ExprKind::Cmp(_, a, b) => ([Some(a), Some(b), None], &[]),
            ExprKind::Not(a)
            | ExprKind::Cast(a)
            | ExprKind::SaturatingCast(a)
            | ExprKind::Round(a)
            | ExprKind::Sqrt(a)
            | ExprKind::Reinterpret(a)
            | ExprKind::Broadcast(a)
            | ExprKind::VectorReduce(_, a) => ([Some(a), None, None], &[]),
            ExprKind::Select(a, b, c) | ExprKind::Fma(a, b, c) => ([Some(a), Some(b), Some(c)], &[]),
            ExprKind::TensorRead(_, idx) | ExprKind::Load(_, idx) => ([None; 3], idx),
            ExprKind::Reduce(r) => ([Some(&r.source), None, None], &[]),
            ExprKind::Ramp(b, s) => ([Some(b), Some(s), None], &[]),
        };
        fixed.into_iter().flatten().chain(indices)
    }

    /// Calls `f` on this node and every descendant, parents first.
    pub fn for_each(&self, f: &mut dyn FnMut(&Expr)) {
        f(self);
        for child in self.child_iter() {
            child.for_each(f);
        }
    }

    /// True if `var` occurs anywhere in this expression.
    pub fn uses_var(&self, var: &Var) -> bool {
        let mut found = false;
        self.for_each(&mut |e| {
            if let ExprKind::Var(v) = e.kind() {
                found |= v == var;
            }
        });
        found
    }

    /// Structural equality: same dtypes, same node kinds, same variables by identity.
    pub fn structurally_eq(&self, other: &Expr) -> bool {
        if self.same_node(other) {
            return true;
        }
        self.same_head(other)
            && self.children().len() == other.children().len()
            && self.children().iter().zip(other.children()).all(|(a, b)| a.structurally_eq(b))
    }

    /// True if both nodes have the same dtype and the same kind with the same non-expression
    /// parts (constant, operator, variable, tensor or buffer, reduction by identity), ignoring
    /// their children.
    pub fn same_head(&self, other: &Expr) -> bool {
        if self.dtype() != other.dtype() {
            return false;
        }
        match (self.kind(), other.kind()) {
            (ExprKind::Int(a), ExprKind::Int(b)) => a == b,
            (ExprKind::Float(a), ExprKind::Float(b)) => a.to_bits() == b.to_bits(),
            (ExprKind::Var(a), ExprKind::Var(b)) => a == b,
            (ExprKind::Binary(a, ..), ExprKind::Binary(b, ..)) => a == b,
            (ExprKind::Cmp(a, ..), ExprKind::Cmp(b, ..)) => a == b,
            (ExprKind::Not(_), ExprKind::Not(_))
            | (ExprKind::Cast(_), ExprKind::Cast(_))
            | (ExprKind::SaturatingCast(_), ExprKind::SaturatingCast(_))
            | (ExprKind::Round(_), ExprKind::Round(_))
            | (ExprKind::Sqrt(_), ExprKind::Sqrt(_))
            | (ExprKind::Reinterpret(_), ExprKind::Reinterpret(_))
            | (ExprKind::Select(..), ExprKind::Select(..))
            | (ExprKind::Fma(..), ExprKind::Fma(..))
            | (ExprKind::Ramp(..), ExprKind::Ramp(..))
            | (ExprKind::Broadcast(_), ExprKind::Broadcast(_)) => true,
            (ExprKind::VectorReduce(a, _), ExprKind::VectorReduce(b, _)) => a == b,
            (ExprKind::TensorRead(a, ai), ExprKind::TensorRead(b, bi)) => a == b && ai.len() == bi.len(),
            (ExprKind::Load(a, ai), ExprKind::Load(b, bi)) => a == b && ai.len() == bi.len(),
            (ExprKind::Reduce(a), ExprKind::Reduce(b)) => Rc::ptr_eq(a, b),
            _ => false,
        }
    }
}

/// Wraps `value` to the integer type `ty` and returns it sign-extended to 64 bits, the storage
/// form of `ExprKind::Int`. Bool keeps only "is non-zero".
pub fn wrap_int(ty: ScalarType, value: i128) -> i64 {
    match ty {
        ScalarType::Bool => (value != 0) as i64,
        ScalarType::U8 => value as u8 as i64,
        ScalarType::I8 => value as i8 as i64,
        ScalarType::U16 => value as u16 as i64,
        ScalarType::I16 => value as i16 as i64,
        ScalarType::U32 => value as u32 as i64,
        ScalarType::I32 => value as i32 as i64,
        ScalarType::U64 | ScalarType::I64 => value as i64,
        _ => panic!("wrap_int of float type {ty}"),
    }
}

/// Rounds an f64 to the nearest value of the float type `ty` (round to nearest even).
pub fn round_float(ty: ScalarType, value: f64) -> f64 {
    match ty {
        ScalarType::F64 => value,
        ScalarType::F32 => value as f32 as f64,
        ScalarType::F16 => half::f16::from_bits(crate::dtype::f16_bits_from_f64(value)).to_f64(),
        ScalarType::BF16 => half::bf16::from_bits(crate::dtype::bf16_bits_from_f64(value)).to_f64(),
        _ => panic!("round_float of non-float type {ty}"),
    }
}

// ---- Math-like construction -----------------------------------------------------------------

/// Anything that reads as an expression in a `compute` body: expressions, variables, axes, and
/// integer literals (an integer literal next to a typed operand takes that operand's dtype).
pub trait IntoExpr {
    fn into_expr(self) -> Expr;
}

impl IntoExpr for Expr {
    fn into_expr(self) -> Expr {
        self
    }
}
impl IntoExpr for &Expr {
    fn into_expr(self) -> Expr {
        self.clone()
    }
}
impl IntoExpr for &Var {
    fn into_expr(self) -> Expr {
        Expr::var(self)
    }
}
impl IntoExpr for &IterVar {
    fn into_expr(self) -> Expr {
        Expr::var(self.var())
    }
}
impl IntoExpr for IterVar {
    fn into_expr(self) -> Expr {
        Expr::var(self.var())
    }
}
impl IntoExpr for Var {
    fn into_expr(self) -> Expr {
        Expr::var(&self)
    }
}
impl IntoExpr for i64 {
    fn into_expr(self) -> Expr {
        Expr::index(self)
    }
}
impl IntoExpr for i32 {
    fn into_expr(self) -> Expr {
        Expr::index(self as i64)
    }
}

/// Converts `rhs` for use next to `lhs`: a bare integer literal adopts `lhs`'s dtype (it is a
/// literal, not a typed value, so this is not promotion).
fn literal_like(lhs: &Expr, rhs: i64) -> Expr {
    let dtype = lhs.dtype();
    let scalar = dtype.element();
    let c = if scalar.is_float() { Expr::float(scalar, rhs as f64) } else { Expr::int(scalar, rhs) };
    if dtype.is_vector() { Expr::broadcast(c, dtype.lanes) } else { c }
}

/// One side of an overloaded operator: a typed expression or a bare integer literal, which
/// takes the other side's dtype (`literal_like`).
enum Term {
    Typed(Expr),
    Literal(i64),
}

/// What may stand on either side of `+ - * / % & | ^ << >>`: `Expr`, `IterVar` and `Var`, owned
/// or borrowed, and `i64` literals (never on both sides).
trait IntoTerm {
    fn into_term(self) -> Term;
}

macro_rules! typed_term {
    ($($t:ty),*) => {$(
        impl IntoTerm for $t {
            fn into_term(self) -> Term {
                Term::Typed(self.into_expr())
            }
        }
    )*};
}
typed_term!(Expr, &Expr, IterVar, &IterVar, Var, &Var);

impl IntoTerm for i64 {
    fn into_term(self) -> Term {
        Term::Literal(self)
    }
}

/// `a op b` for the overloaded operators.
fn overloaded(op: BinOp, a: Term, b: Term) -> Expr {
    match (a, b) {
        (Term::Typed(a), Term::Typed(b)) => Expr::binary(op, a, b),
        (Term::Typed(a), Term::Literal(b)) => {
            let b = literal_like(&a, b);
            Expr::binary(op, a, b)
        }
        (Term::Literal(a), Term::Typed(b)) => Expr::binary(op, literal_like(&b, a), b),
        (Term::Literal(_), Term::Literal(_)) => unreachable!("no operator is implemented on two literals"),
    }
}

/// Every operator for one pair of operand types.
macro_rules! impl_operators {
    ($lhs:ty, $rhs:ty) => {
        impl_operators!(@each $lhs, $rhs, Add add Add, Sub sub Sub, Mul mul Mul, Div div Div, Rem rem Mod,
            BitAnd bitand And, BitOr bitor Or, BitXor bitxor Xor, Shl shl Shl, Shr shr Shr);
    };
    (@each $lhs:ty, $rhs:ty, $($trait:ident $method:ident $op:ident),*) => {$(
        impl ops::$trait<$rhs> for $lhs {
            type Output = Expr;
            fn $method(self, rhs: $rhs) -> Expr {
                overloaded(BinOp::$op, self.into_term(), rhs.into_term())
            }
        }
    )*};
}

/// `impl_operators` for one left operand type and each right operand type.
macro_rules! impl_operators_for {
    ($lhs:ty; $($rhs:ty),*) => {$( impl_operators!($lhs, $rhs); )*};
}

impl_operators_for!(Expr; Expr, &Expr, IterVar, &IterVar, Var, &Var, i64);
impl_operators_for!(&Expr; Expr, &Expr, IterVar, &IterVar, Var, &Var, i64);
impl_operators_for!(IterVar; Expr, &Expr, IterVar, &IterVar, Var, &Var, i64);
impl_operators_for!(&IterVar; Expr, &Expr, IterVar, &IterVar, Var, &Var, i64);
impl_operators_for!(Var; Expr, &Expr, IterVar, &IterVar, Var, &Var, i64);
impl_operators_for!(&Var; Expr, &Expr, IterVar, &IterVar, Var, &Var, i64);
impl_operators_for!(i64; Expr, &Expr, IterVar, &IterVar, Var, &Var);

/// `-x` is `0 - x` in `x`'s dtype.
macro_rules! impl_neg {
    ($($t:ty),*) => {$(
        impl ops::Neg for $t {
            type Output = Expr;
            fn neg(self) -> Expr {
                overloaded(BinOp::Sub, Term::Literal(0), self.into_term())
            }
        }
    )*};
}
impl_neg!(Expr, &Expr, IterVar, &IterVar, Var, &Var);

impl ops::Not for Expr {
    type Output = Expr;
    fn not(self) -> Expr {
        let dtype = self.dtype();
        Expr::new(dtype, ExprKind::Not(self))
    }
}

/// Comparison builders (Rust's `PartialOrd` must return `bool`, so these are methods).
impl Expr {
    pub fn eq(&self, rhs: impl IntoExpr) -> Expr {
        self.compare(CmpOp::Eq, rhs)
    }
    pub fn ne(&self, rhs: impl IntoExpr) -> Expr {
        self.compare(CmpOp::Ne, rhs)
    }
    pub fn lt(&self, rhs: impl IntoExpr) -> Expr {
        self.compare(CmpOp::Lt, rhs)
    }
    pub fn le(&self, rhs: impl IntoExpr) -> Expr {
        self.compare(CmpOp::Le, rhs)
    }
    pub fn gt(&self, rhs: impl IntoExpr) -> Expr {
        self.compare(CmpOp::Gt, rhs)
    }
    pub fn ge(&self, rhs: impl IntoExpr) -> Expr {
        self.compare(CmpOp::Ge, rhs)
    }

    fn compare(&self, op: CmpOp, rhs: impl IntoExpr) -> Expr {
        let rhs = rhs.into_expr();
        // A bare index literal next to a non-index operand is a literal of that operand's type.
        let rhs = match rhs.kind() {
            ExprKind::Int(v) if rhs.dtype() == DType::INDEX && self.dtype() != DType::INDEX => literal_like(self, *v),
            _ => rhs,
        };
        Expr::cmp(op, self.clone(), rhs)
    }
}

/// Exact product: both operands are cast to the integer type of twice the wider operand's
/// width (signed if either is signed), so `u8 * i8` is an exact `i16`.
pub fn widening_mul(a: impl IntoExpr, b: impl IntoExpr) -> Expr {
    let (a, b) = (a.into_expr(), b.into_expr());
    let wide = widened_type(a.dtype(), b.dtype());
    a.cast(wide) * b.cast(wide)
}

/// Exact sum, with the same result type rule as `widening_mul`.
pub fn widening_add(a: impl IntoExpr, b: impl IntoExpr) -> Expr {
    let (a, b) = (a.into_expr(), b.into_expr());
    let wide = widened_type(a.dtype(), b.dtype());
    a.cast(wide) + b.cast(wide)
}

fn widened_type(a: DType, b: DType) -> DType {
    let bits = a.bits().max(b.bits());
    let signed = a.is_signed_int() || b.is_signed_int();
    let wide = if signed {
        ScalarType::signed_of_bits(bits * 2)
    } else {
        match bits * 2 {
            16 => Some(ScalarType::U16),
            32 => Some(ScalarType::U32),
            64 => Some(ScalarType::U64),
            _ => None,
        }
    };
    // Operands wider than 32 bits have no wider type; the checker reports the mismatch.
    DType::scalar(wide.unwrap_or(a.scalar))
}

/// `cond ? t : f`.
pub fn select(cond: impl IntoExpr, t: impl IntoExpr, f: impl IntoExpr) -> Expr {
    Expr::select(cond.into_expr(), t.into_expr(), f.into_expr())
}

pub fn min(a: impl IntoExpr, b: impl IntoExpr) -> Expr {
    Expr::min(a.into_expr(), b.into_expr())
}

pub fn max(a: impl IntoExpr, b: impl IntoExpr) -> Expr {
    Expr::max(a.into_expr(), b.into_expr())
}

impl fmt::Display for Var {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
