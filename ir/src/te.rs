//! Tensor expressions: `placeholder`, `compute`, `reduce_axis` and reducers.
//!
//! A tensor is either a placeholder (an input) or a `compute`: a pure function from its index
//! space to values, possibly a reduction. Definitions read as math:
//!
//! ```
//! use tensorlift_ir::te::{placeholder, compute, reduce_axis, sum};
//! use tensorlift_ir::DType;
//! let a = placeholder([64, 32], DType::U8, "A").unwrap();
//! let b = placeholder([48, 32], DType::I8, "B").unwrap();
//! let k = reduce_axis(32, "k").unwrap();
//! let c = compute([64, 48], |i| {
//!     sum(DType::I32, &[&k], a.at([&i[0], &k]).cast(DType::I32) * b.at([&i[1], &k]).cast(DType::I32))
//! }, "C").unwrap();
//! assert_eq!(c.dtype(), DType::I32);
//! ```
//!
//! Shapes are compile-time constants, checked where they are written: `placeholder`, `compute`
//! and `reduce_axis` return a typed `TeError` for a dimension or extent that is not positive,
//! and for an element count, byte size or iteration domain that does not fit in `i64`.
//! `compute` type-checks its body and returns a typed `TeError` for any violation (mixed dtypes,
//! wrong index counts, misplaced reductions, reads that can leave their tensor).

use rustc_hash::FxHashSet as HashSet;
use std::fmt;
use std::ops::Deref;
use std::rc::Rc;
use std::sync::atomic::{AtomicU32, Ordering};

use crate::analysis::interval::{Interval, Scope, bounds_of};
use crate::dtype::{DType, ScalarType};
use crate::error::{OutOfBoundsRead, TeError};
use crate::expr::{BinOp, Expr, ExprKind, ReduceData, Var};

/// Identity of a tensor.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, PartialOrd, Ord)]
pub struct TensorId(pub u32);

static NEXT_TENSOR_ID: AtomicU32 = AtomicU32::new(0);

/// Whether an iteration axis indexes the output (data-parallel) or is summed over (reduce).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum IterKind {
    DataPar,
    Reduce,
}

#[derive(Debug)]
pub struct IterVarData {
    pub var: Var,
    /// The axis ranges over `0..extent`.
    pub extent: i64,
    pub kind: IterKind,
    /// `var` as an expression, so an `IterVar` can stand wherever an `&Expr` is expected.
    expr: Expr,
}

/// An iteration axis: a variable with a constant range `0..extent`.
#[derive(Clone, Debug)]
pub struct IterVar(Rc<IterVarData>);

impl IterVar {
    pub fn new(name: impl Into<String>, extent: i64, kind: IterKind) -> IterVar {
        let var = Var::index(name);
        let expr = Expr::var(&var);
        IterVar(Rc::new(IterVarData { var, extent, kind, expr }))
    }

    pub fn var(&self) -> &Var {
        &self.0.var
    }

    pub fn name(&self) -> &str {
        self.0.var.name()
    }

    pub fn extent(&self) -> i64 {
        self.0.extent
    }

    pub fn kind(&self) -> IterKind {
        self.0.kind
    }

    pub fn is_reduce(&self) -> bool {
        self.0.kind == IterKind::Reduce
    }

    pub fn to_expr(&self) -> Expr {
        self.0.expr.clone()
    }
}

impl Deref for IterVar {
    type Target = Expr;
    fn deref(&self) -> &Expr {
        &self.0.expr
    }
}

impl PartialEq for IterVar {
    fn eq(&self, other: &IterVar) -> bool {
        self.0.var == other.0.var
    }
}
impl Eq for IterVar {}
impl std::hash::Hash for IterVar {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.0.var.hash(state)
    }
}

impl fmt::Display for IterVar {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A reduction axis ranging over `0..extent`. Errors unless `extent` is positive (a reduction
/// over no values is rejected like a zero dimension).
pub fn reduce_axis(extent: i64, name: &str) -> Result<IterVar, TeError> {
    if extent <= 0 {
        return Err(TeError::BadReduceExtent { axis: name.to_string(), found: extent });
    }
    Ok(IterVar::new(name, extent, IterKind::Reduce))
}

/// Checks a tensor shape where it is written: every dimension positive, and the element count and
/// byte size representable in `i64` (so no buffer length or flat index downstream can wrap).
fn check_shape(what: &'static str, tensor: &str, shape: &[i64], dtype: DType) -> Result<(), TeError> {
    if let Some((dim, &found)) = shape.iter().enumerate().find(|(_, d)| **d <= 0) {
        return Err(TeError::BadShape { what, tensor: tensor.to_string(), shape: shape.to_vec(), dim, found });
    }
    let too_large = |quantity, count: Option<i128>| TeError::ShapeTooLarge {
        what,
        tensor: tensor.to_string(),
        shape: shape.to_vec(),
        dtype,
        quantity,
        count: count.map_or("more than 2^127".to_string(), |c| c.to_string()),
    };
    let count = product(shape.iter().copied());
    if count.is_none_or(|c| c > i64::MAX as i128) {
        return Err(too_large("elements", count));
    }
    let bytes = count.and_then(|c| c.checked_mul(dtype.bytes() as i128));
    if bytes.is_none_or(|b| b > i64::MAX as i128) {
        return Err(too_large("bytes", bytes));
    }
    Ok(())
}

/// The exact product, or `None` if it overflows `i128`.
fn product(mut values: impl Iterator<Item = i64>) -> Option<i128> {
    values.try_fold(1i128, |acc, v| acc.checked_mul(v as i128))
}

/// A user-defined commutative, associative reducer: `combine(lhs, rhs)` with an identity.
#[derive(Debug)]
pub struct CustomReducer {
    pub name: String,
    pub lhs: Var,
    pub rhs: Var,
    pub combine: Expr,
    pub identity: Expr,
}

/// How a reduction folds its values.
#[derive(Clone, Debug)]
pub enum Reducer {
    /// Wrapping sum for integers (the accumulator type is the result dtype), IEEE sum for floats.
    Sum,
    Max,
    Min,
    Custom(Rc<CustomReducer>),
}

impl PartialEq for Reducer {
    fn eq(&self, other: &Reducer) -> bool {
        match (self, other) {
            (Reducer::Sum, Reducer::Sum) | (Reducer::Max, Reducer::Max) | (Reducer::Min, Reducer::Min) => true,
            (Reducer::Custom(a), Reducer::Custom(b)) => Rc::ptr_eq(a, b),
            _ => false,
        }
    }
}

impl Reducer {
    pub fn name(&self) -> &str {
        match self {
            Reducer::Sum => "sum",
            Reducer::Max => "max",
            Reducer::Min => "min",
            Reducer::Custom(c) => &c.name,
        }
    }

    /// The value the fold starts from.
    pub fn identity(&self, dtype: DType) -> Expr {
        let scalar = dtype.scalar;
        match self {
            Reducer::Sum => Expr::zero(dtype),
            Reducer::Max => match scalar.int_range() {
                Some((lo, _)) => Expr::int(dtype, lo as i64),
                None => Expr::float(dtype, f64::NEG_INFINITY),
            },
            Reducer::Min => match scalar.int_range() {
                Some((_, hi)) => Expr::int(dtype, hi as i64),
                None => Expr::float(dtype, f64::INFINITY),
            },
            Reducer::Custom(c) => c.identity.clone(),
        }
    }

    /// `acc ⊕ value`, as an expression.
    pub fn combine(&self, acc: Expr, value: Expr) -> Expr {
        match self {
            Reducer::Sum => acc + value,
            Reducer::Max => Expr::max(acc, value),
            Reducer::Min => Expr::min(acc, value),
            Reducer::Custom(c) => {
                crate::mutator::substitute(&c.combine, &[(c.lhs.clone(), acc), (c.rhs.clone(), value)])
            }
        }
    }

    /// Folds `source` over `axes` into a value of `out_dtype`. The source must already have
    /// that dtype: the argument makes the accumulator type explicit at the definition site.
    pub fn reduce(&self, out_dtype: DType, axes: &[&IterVar], source: Expr) -> Expr {
        let data = ReduceData {
            reducer: self.clone(),
            source: source.clone(),
            axes: axes.iter().map(|a| (*a).clone()).collect(),
        };
        // The node dtype records what the user asked for; `compute` compares it with the source.
        Expr::new(out_dtype, ExprKind::Reduce(Rc::new(data)))
    }
}

/// Sum of `source` over `axes`; the result dtype is `out_dtype`, which `source` must have.
pub fn sum(out_dtype: DType, axes: &[&IterVar], source: Expr) -> Expr {
    Reducer::Sum.reduce(out_dtype, axes, source)
}

/// Maximum of `source` over `axes`.
pub fn max(out_dtype: DType, axes: &[&IterVar], source: Expr) -> Expr {
    Reducer::Max.reduce(out_dtype, axes, source)
}

/// Minimum of `source` over `axes`.
pub fn min(out_dtype: DType, axes: &[&IterVar], source: Expr) -> Expr {
    Reducer::Min.reduce(out_dtype, axes, source)
}

/// A user-defined reducer on `dtype`: `combine(x, y)` must be commutative and associative and
/// `identity` its neutral element. Checked for dtypes here; algebraic laws are the user's promise.
pub fn comm_reducer(
    name: &str,
    dtype: DType,
    combine: impl FnOnce(&Expr, &Expr) -> Expr,
    identity: Expr,
) -> Result<Reducer, TeError> {
    let lhs = Var::new("x", dtype);
    let rhs = Var::new("y", dtype);
    let combine = combine(&lhs.to_expr(), &rhs.to_expr());
    check_expr(&combine)?;
    for (what, found) in [("combiner", combine.dtype()), ("identity", identity.dtype())] {
        if found != dtype {
            return Err(TeError::ReducerDType { reducer: name.to_string(), what, expected: dtype, found });
        }
    }
    Ok(Reducer::Custom(Rc::new(CustomReducer { name: name.to_string(), lhs, rhs, combine, identity })))
}

/// What a tensor is.
#[derive(Debug)]
pub enum Operation {
    /// An input supplied by the caller.
    Placeholder,
    /// `tensor[axes] = body`; `body` may be a top-level `Reduce`.
    Compute { axes: Vec<IterVar>, body: Expr },
}

#[derive(Debug)]
pub struct TensorData {
    pub id: TensorId,
    pub name: String,
    pub shape: Vec<i64>,
    pub dtype: DType,
    pub op: Operation,
    /// For a placeholder made by `placeholder_in_range`: every element lies in `lo..=hi`.
    pub value_range: Option<(i64, i64)>,
}

/// A tensor: a placeholder or a computed value. Cheap to clone; identity is `TensorId`.
#[derive(Clone, Debug)]
pub struct Tensor(Rc<TensorData>);

impl PartialEq for Tensor {
    fn eq(&self, other: &Tensor) -> bool {
        self.0.id == other.0.id
    }
}
impl Eq for Tensor {}
impl std::hash::Hash for Tensor {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.0.id.hash(state)
    }
}

impl Tensor {
    pub(crate) fn from_parts(name: &str, shape: Vec<i64>, dtype: DType, op: Operation) -> Tensor {
        let id = TensorId(NEXT_TENSOR_ID.fetch_add(1, Ordering::Relaxed));
        Tensor(Rc::new(TensorData { id, name: name.to_string(), shape, dtype, op, value_range: None }))
    }

    pub fn id(&self) -> TensorId {
        self.0.id
    }

    pub fn name(&self) -> &str {
        &self.0.name
    }

    pub fn shape(&self) -> &[i64] {
        &self.0.shape
    }

    pub fn dtype(&self) -> DType {
        self.0.dtype
    }

    pub fn op(&self) -> &Operation {
        &self.0.op
    }

    /// The declared range `(lo, hi)` of every element of a placeholder made by
    /// `placeholder_in_range`; `None` for every other tensor (any value of the dtype).
    pub fn value_range(&self) -> Option<(i64, i64)> {
        self.0.value_range
    }

    pub fn is_placeholder(&self) -> bool {
        matches!(self.0.op, Operation::Placeholder)
    }

    /// The data-parallel axes of a compute (empty for a placeholder).
    pub fn axes(&self) -> &[IterVar] {
        match &self.0.op {
            Operation::Compute { axes, .. } => axes,
            Operation::Placeholder => &[],
        }
    }

    /// Data-parallel axis `i` of a compute. Panics if out of range (a programming error in the
    /// calling Rust code, like slice indexing).
    pub fn axis(&self, i: usize) -> IterVar {
        self.axes()[i].clone()
    }

    /// The reduction axes of a compute whose body is a reduction.
    pub fn reduce_axes(&self) -> Vec<IterVar> {
        match self.body().map(|b| b.kind()) {
            Some(ExprKind::Reduce(r)) => r.axes.clone(),
            _ => Vec::new(),
        }
    }

    pub fn body(&self) -> Option<&Expr> {
        match &self.0.op {
            Operation::Compute { body, .. } => Some(body),
            Operation::Placeholder => None,
        }
    }

    /// The element at `indices`, one `i64` index per dimension.
    pub fn at<const N: usize>(&self, indices: [&Expr; N]) -> Expr {
        self.at_vec(indices.iter().map(|e| (*e).clone()).collect())
    }

    /// `at` for a rank known only at run time.
    pub fn at_vec(&self, indices: Vec<Expr>) -> Expr {
        Expr::new(self.dtype(), ExprKind::TensorRead(self.clone(), indices))
    }

    /// The tensors this one reads directly.
    pub fn inputs(&self) -> Vec<Tensor> {
        let mut seen = HashSet::default();
        let mut res = Vec::new();
        if let Some(body) = self.body() {
            collect_reads(body, &mut seen, &mut res);
        }
        res
    }
}

pub(crate) fn collect_reads(expr: &Expr, seen: &mut HashSet<TensorId>, out: &mut Vec<Tensor>) {
    expr.for_each(&mut |e| {
        if let ExprKind::TensorRead(t, _) = e.kind()
            && seen.insert(t.id())
        {
            out.push(t.clone());
        }
    });
}

impl fmt::Display for Tensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// An input tensor of the given constant shape and element type.
///
/// Errors if a dimension is not positive or the element count or byte size does not fit in
/// `i64` (`TeError::BadShape`, `TeError::ShapeTooLarge`).
pub fn placeholder<const N: usize>(shape: [i64; N], dtype: DType, name: &str) -> Result<Tensor, TeError> {
    placeholder_vec(shape.to_vec(), dtype, name)
}

/// `placeholder` for a rank known only at run time.
pub fn placeholder_vec(shape: Vec<i64>, dtype: DType, name: &str) -> Result<Tensor, TeError> {
    check_shape("placeholder", name, &shape, dtype.element())?;
    Ok(Tensor::from_parts(name, shape, dtype.element(), Operation::Placeholder))
}

/// An integer input tensor whose every element the caller promises to lie in `range`.
///
/// The promise is part of the function's contract: lowering records it on the parameter buffer
/// (`Buffer::value_range`), the reference interpreter and the runtime check every input element
/// against it before anything runs (a violation is an error, never silent), and code generation
/// may rely on it when it chooses an implementation. For example, activations declared `0..=127`
/// (u7) make the pairwise i16 sums of `VPMADDUBSW` exact, so that instruction can implement the
/// exact `Int8Gemm` intrinsic. Errors if the dtype is not an integer type or the range is empty or
/// outside the dtype's range.
pub fn placeholder_in_range<const N: usize>(
    shape: [i64; N],
    dtype: DType,
    range: std::ops::RangeInclusive<i64>,
    name: &str,
) -> Result<Tensor, TeError> {
    placeholder_vec_in_range(shape.to_vec(), dtype, range, name)
}

/// `placeholder_in_range` for a rank known only at run time.
pub fn placeholder_vec_in_range(
    shape: Vec<i64>,
    dtype: DType,
    range: std::ops::RangeInclusive<i64>,
    name: &str,
) -> Result<Tensor, TeError> {
    check_shape("placeholder", name, &shape, dtype.element())?;
    let (lo, hi) = (*range.start(), *range.end());
    let fits = dtype.scalar.int_range().is_some_and(|(min, max)| min <= lo as i128 && hi as i128 <= max);
    if !fits || lo > hi {
        return Err(TeError::BadValueRange { tensor: name.to_string(), dtype: dtype.element(), lo, hi });
    }
    let id = TensorId(NEXT_TENSOR_ID.fetch_add(1, Ordering::Relaxed));
    let data = TensorData {
        id,
        name: name.to_string(),
        shape,
        dtype: dtype.element(),
        op: Operation::Placeholder,
        value_range: Some((lo, hi)),
    };
    Ok(Tensor(Rc::new(data)))
}

/// A computed tensor: `body(indices)` gives the element at `indices`.
///
/// Errors if a dimension is not positive, the shape's element count or byte size or the iteration
/// domain (shape times reduce extents) does not fit in `i64`, or if the body mixes dtypes, indexes
/// a tensor with the wrong number of (non-`i64`) indices, nests a reduction, uses a reduction axis
/// it does not reduce over, or reads outside a tensor at some point of its domain
/// (`TeError::OutOfBounds`, see `check_bounds`).
pub fn compute<const N: usize>(
    shape: [i64; N],
    body: impl FnOnce(&[Expr]) -> Expr,
    name: &str,
) -> Result<Tensor, TeError> {
    compute_vec(shape.to_vec(), body, name)
}

/// `compute` for a rank known only at run time.
pub fn compute_vec(shape: Vec<i64>, body: impl FnOnce(&[Expr]) -> Expr, name: &str) -> Result<Tensor, TeError> {
    // The dtype is the body's; dimensions are checked before the body is built.
    check_shape("compute", name, &shape, DType::U8)?;
    let axes = compute_axes(&shape);
    let index_exprs: Vec<Expr> = axes.iter().map(|a| a.to_expr()).collect();
    let body = body(&index_exprs);
    check_body(name, &axes, &body)?;
    let dtype = body.dtype();
    if dtype.is_vector() {
        return Err(TeError::VectorBody { tensor: name.to_string(), found: dtype });
    }
    check_shape("compute", name, &shape, dtype)?;
    check_domain(name, &shape, &body)?;
    check_bounds(name, &axes, &body)?;
    Ok(Tensor::from_parts(name, shape, dtype, Operation::Compute { axes, body }))
}

/// The data-parallel axes of a compute of `shape`: `i, j, k, l, m, n`, then `ax6, ...`.
fn compute_axes(shape: &[i64]) -> Vec<IterVar> {
    shape.iter().enumerate().map(|(d, &extent)| IterVar::new(compute_axis_name(d), extent, IterKind::DataPar)).collect()
}

/// The name of a compute's axis `d`.
pub(crate) fn compute_axis_name(d: usize) -> String {
    const AXIS_NAMES: [&str; 6] = ["i", "j", "k", "l", "m", "n"];
    AXIS_NAMES.get(d).map(|s| s.to_string()).unwrap_or(format!("ax{d}"))
}

/// `compute_vec` without its checks, for a copy of a compute `compute_vec` accepted whose body
/// differs only in names (`workload`'s canonical copies): the tensor `compute_vec` would make,
/// without walking the body again to check what holds already.
pub(crate) fn compute_vec_renamed(shape: Vec<i64>, body: impl FnOnce(&[Expr]) -> Expr, name: &str) -> Tensor {
    let axes = compute_axes(&shape);
    let index_exprs: Vec<Expr> = axes.iter().map(|a| a.to_expr()).collect();
    let body = body(&index_exprs);
    Tensor::from_parts(name, shape, body.dtype(), Operation::Compute { axes, body })
}

/// Checks that the iteration domain of a compute (output axes times reduce axes) counts in `i64`.
fn check_domain(tensor: &str, shape: &[i64], body: &Expr) -> Result<(), TeError> {
    let axes: &[IterVar] = match body.kind() {
        ExprKind::Reduce(r) => &r.axes,
        _ => &[],
    };
    // `reduce_axis` checks its extent; an axis made with `IterVar::new` is checked here.
    if let Some(bad) = axes.iter().find(|a| a.extent() <= 0) {
        return Err(TeError::BadReduceExtent { axis: bad.name().to_string(), found: bad.extent() });
    }
    let reduce: Vec<i64> = axes.iter().map(|a| a.extent()).collect();
    let count = product(shape.iter().chain(&reduce).copied());
    if count.is_none_or(|c| c > i64::MAX as i128) {
        return Err(TeError::DomainTooLarge {
            tensor: tensor.to_string(),
            shape: shape.to_vec(),
            reduce,
            count: count.map_or("more than 2^127".to_string(), |c| c.to_string()),
        });
    }
    Ok(())
}

/// Rejects a read that leaves its tensor for some point of the iteration domain.
///
/// Each index is bounded by interval analysis (`analysis::interval`) with every axis ranging over
/// `0..extent`. A read in an arm of a `select` is only evaluated when that arm is chosen, so the
/// arm is checked under its condition (true for the first arm, false for the second): a padded
/// read `select(h >= 1 & h < H + 1, A[h - 1], 0)` is in bounds. An index that reads a tensor
/// itself (a gather) is bounded only by the range of the values read (their dtype's, or the
/// `placeholder_in_range` promise); when that does not prove it in bounds it is not an error here
/// but checked at run time by every executor (`passes::check_gathers`).
fn check_bounds(tensor: &str, axes: &[IterVar], body: &Expr) -> Result<(), TeError> {
    check_bounds_collecting(tensor, axes, body, &mut Vec::new())
}

/// The first read of a compute whose index reads a tensor and is not proven inside its
/// dimension (checked at run time, see `check_bounds`), as `(input, index)`.
pub(crate) fn unproven_gather(tensor: &Tensor) -> Option<(String, String)> {
    let mut gathers = Vec::new();
    let body = tensor.body()?;
    // The definition passed `check_bounds` when it was built.
    check_bounds_collecting(tensor.name(), tensor.axes(), body, &mut gathers).ok()?;
    gathers.into_iter().next()
}

/// `check_bounds`, appending every gather it leaves to the run-time check to `gathers`.
fn check_bounds_collecting(
    tensor: &str,
    axes: &[IterVar],
    body: &Expr,
    gathers: &mut Vec<(String, String)>,
) -> Result<(), TeError> {
    let mut scope = Scope::new();
    let mut all_axes: Vec<IterVar> = axes.to_vec();
    let source = match body.kind() {
        ExprKind::Reduce(r) => {
            all_axes.extend(r.axes.iter().cloned());
            &r.source
        }
        _ => body,
    };
    for axis in &all_axes {
        scope.push(axis.var(), Interval::of_extent(axis.extent()));
    }
    check_reads(tensor, source, &mut scope, 0, gathers)
}

/// `check_bounds` of one expression; `guards` counts the `select` conditions assumed.
fn check_reads(
    tensor: &str,
    expr: &Expr,
    scope: &mut Scope,
    guards: usize,
    gathers: &mut Vec<(String, String)>,
) -> Result<(), TeError> {
    match expr.kind() {
        ExprKind::Select(c, t, f) => {
            check_reads(tensor, c, scope, guards, gathers)?;
            for (arm, holds) in [(t, true), (f, false)] {
                let assumed = scope.assume(c, holds);
                let result = check_reads(tensor, arm, scope, guards + 1, gathers);
                scope.forget(assumed);
                result?;
            }
            return Ok(());
        }
        ExprKind::TensorRead(input, indices) => {
            for (dim, (index, &extent)) in indices.iter().zip(input.shape()).enumerate() {
                check_reads(tensor, index, scope, guards, gathers)?;
                let mut gather = false;
                index.for_each(&mut |e| gather |= matches!(e.kind(), ExprKind::TensorRead(..)));
                let range = bounds_of(index, scope);
                // An empty range means contradictory conditions: the read is never evaluated.
                let unreachable = range.min.zip(range.max).is_some_and(|(lo, hi)| lo > hi);
                let inside = unreachable || range.is_within(0, extent as i128 - 1);
                if gather && !inside {
                    gathers.push((input.name().to_string(), index.to_string()));
                }
                if !gather && !inside {
                    return Err(TeError::OutOfBounds(Box::new(OutOfBoundsRead {
                        tensor: tensor.to_string(),
                        input: input.name().to_string(),
                        dim,
                        index: index.to_string(),
                        min: range.min,
                        max: range.max,
                        extent,
                        guarded: guards > 0,
                    })));
                }
            }
            return Ok(());
        }
        _ => {}
    }
    for child in expr.child_iter() {
        check_reads(tensor, child, scope, guards, gathers)?;
    }
    Ok(())
}

/// Checks a compute body: a reduction may only be the whole body, and the whole tree must be
/// well typed with every variable bound by an axis.
fn check_body(tensor: &str, axes: &[IterVar], body: &Expr) -> Result<(), TeError> {
    let mut bound: HashSet<Var> = axes.iter().map(|a| a.var().clone()).collect();
    let source = match body.kind() {
        ExprKind::Reduce(r) => {
            if r.axes.is_empty() {
                return Err(TeError::EmptyReduction { tensor: tensor.to_string() });
            }
            for axis in &r.axes {
                if !axis.is_reduce() {
                    return Err(TeError::NotAReduceAxis { tensor: tensor.to_string(), axis: axis.name().to_string() });
                }
                bound.insert(axis.var().clone());
            }
            if r.source.dtype() != body.dtype() {
                return Err(TeError::ReduceDType {
                    reducer: r.reducer.name().to_string(),
                    expected: body.dtype(),
                    found: r.source.dtype(),
                    expr: r.source.to_string(),
                });
            }
            &r.source
        }
        _ => body,
    };
    check_expr(source)?;
    let mut unbound = None;
    source.for_each(&mut |e| match e.kind() {
        ExprKind::Var(v) if !bound.contains(v) && unbound.is_none() => unbound = Some(v.clone()),
        ExprKind::Reduce(_) if unbound.is_none() => {}
        _ => {}
    });
    if let Some(v) = unbound {
        return Err(TeError::UnboundVar { tensor: tensor.to_string(), var: v.name().to_string() });
    }
    let mut nested = false;
    source.for_each(&mut |e| nested |= matches!(e.kind(), ExprKind::Reduce(_)));
    if nested {
        return Err(TeError::NestedReduction { tensor: tensor.to_string() });
    }
    Ok(())
}

/// Type-checks an expression tree: identical operand dtypes, bool conditions, `i64` indices of
/// the right count, operators defined on their types.
pub fn check_expr(expr: &Expr) -> Result<(), TeError> {
    for child in expr.child_iter() {
        check_expr(child)?;
    }
    let mismatch = |op: &str, a: &Expr, b: &Expr| TeError::DTypeMismatch {
        op: op.to_string(),
        lhs: a.dtype(),
        rhs: b.dtype(),
        expr: expr.to_string(),
    };
    match expr.kind() {
        ExprKind::Binary(op, a, b) => {
            if a.dtype() != b.dtype() {
                return Err(mismatch(op.symbol(), a, b));
            }
            let ty = a.dtype().scalar;
            let defined = match op {
                BinOp::And | BinOp::Or | BinOp::Xor => !ty.is_float(),
                BinOp::Shl | BinOp::Shr => ty.is_int(),
                _ => !ty.is_bool(),
            };
            if !defined {
                return Err(TeError::UndefinedOperator {
                    op: op.symbol().to_string(),
                    dtype: a.dtype(),
                    expr: expr.to_string(),
                });
            }
        }
        ExprKind::Cmp(op, a, b) if a.dtype() != b.dtype() => {
            return Err(mismatch(op.symbol(), a, b));
        }
        ExprKind::Select(c, t, f) => {
            if c.dtype().scalar != ScalarType::Bool {
                return Err(TeError::ConditionNotBool { found: c.dtype(), expr: expr.to_string() });
            }
            if t.dtype() != f.dtype() {
                return Err(mismatch("select", t, f));
            }
        }
        ExprKind::TensorRead(tensor, indices) => {
            if indices.len() != tensor.shape().len() {
                return Err(TeError::IndexCount {
                    tensor: tensor.name().to_string(),
                    expected: tensor.shape().len(),
                    found: indices.len(),
                });
            }
            if let Some(bad) = indices.iter().find(|i| i.dtype() != DType::INDEX) {
                return Err(TeError::IndexDType {
                    tensor: tensor.name().to_string(),
                    found: bad.dtype(),
                    expr: bad.to_string(),
                });
            }
        }
        ExprKind::Round(a) if !a.dtype().is_float() => {
            return Err(TeError::UndefinedOperator {
                op: "round".to_string(),
                dtype: a.dtype(),
                expr: expr.to_string(),
            });
        }
        ExprKind::Fma(a, b, c) => {
            if a.dtype() != b.dtype() {
                return Err(mismatch("fma", a, b));
            }
            if a.dtype() != c.dtype() {
                return Err(mismatch("fma", a, c));
            }
            if a.dtype().scalar != ScalarType::F32 && a.dtype().scalar != ScalarType::F64 {
                return Err(TeError::UndefinedOperator {
                    op: "fma".to_string(),
                    dtype: a.dtype(),
                    expr: expr.to_string(),
                });
            }
        }
        ExprKind::Sqrt(a) if !a.dtype().is_float() => {
            return Err(TeError::UndefinedOperator {
                op: "sqrt".to_string(),
                dtype: a.dtype(),
                expr: expr.to_string(),
            });
        }
        ExprKind::Reinterpret(a)
            if a.dtype().bits() != expr.dtype().bits() || a.dtype().is_bool() || expr.dtype().is_bool() =>
        {
            return Err(TeError::UndefinedOperator {
                op: format!("reinterpret as {}", expr.dtype()),
                dtype: a.dtype(),
                expr: expr.to_string(),
            });
        }
        ExprKind::Not(a) if a.dtype().is_float() => {
            return Err(TeError::UndefinedOperator { op: "!".to_string(), dtype: a.dtype(), expr: expr.to_string() });
        }
        _ => {}
    }
    Ok(())
}
