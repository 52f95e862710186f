//! The loop IR: statements, buffers and functions produced by lowering.
//!
//! # Semantics of statements
//!
//! * A `Func` runs its body once. Its parameters are buffers owned by the caller; inputs are
//!   read-only by convention (nothing in a lowered function stores to a buffer that is only
//!   read by the definition).
//! * `For` runs `body` for `var = 0, 1, ..., extent - 1` (loops are zero-based and their
//!   extents are compile-time constants, because every tensor shape is). The kind says how the
//!   iterations may be executed; every kind must produce the same result as `Serial`:
//!   `Parallel` iterations run on a thread pool in any order (the schedule guarantees they write
//!   disjoint memory); `Vectorized` and `Unrolled` are requests that `vectorize_loops` and
//!   `unroll_loops` carry out, and none survive the pipeline.
//! * `Let` binds `var` to `value`, evaluated once, within `body`.
//! * `Store` writes `value` to `buffer` at `indices` (one per dimension before
//!   `flatten_buffers`, one flat element index after). A vector store writes one element per
//!   lane, lanes in increasing order.
//! * `If` runs `then_case` when the scalar bool `cond` is true, `else_case` otherwise.
//! * `Seq` runs its statements in order.
//! * `Allocate` provides a fresh, uninitialized buffer for the duration of `body`.
//!   Lowering never reads an element it has not written.
//! * `Call` computes a tensor intrinsic's declaration on regions of buffers (see `StmtKind::Call`).
//! * `BoundsCheck` stops the function with an out-of-bounds error naming a buffer when its
//!   condition fails (see `StmtKind::BoundsCheck`).

use std::rc::Rc;
use std::sync::atomic::{AtomicU32, Ordering};

use crate::dtype::DType;
use crate::expr::{Expr, Var};
use crate::intrin::TensorIntrin;

/// Identity of a buffer.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, PartialOrd, Ord)]
pub struct BufferId(pub u32);

static NEXT_BUFFER_ID: AtomicU32 = AtomicU32::new(0);

#[derive(Debug)]
pub struct BufferData {
    pub id: BufferId,
    pub name: String,
    /// Element type (always scalar).
    pub dtype: DType,
    /// Dimensions, outermost first; row-major, dense.
    pub shape: Vec<i64>,
    /// For a parameter lowered from `te::placeholder_in_range`: every element lies in `lo..=hi`,
    /// which the caller's arguments are checked against before the function runs, so code may
    /// rely on it.
    pub value_range: Option<(i64, i64)>,
}

/// A dense, row-major array of scalars: a function parameter or an `Allocate`d temporary.
#[derive(Clone, Debug)]
pub struct Buffer(Rc<BufferData>);

impl Buffer {
    pub fn new(name: impl Into<String>, dtype: DType, shape: Vec<i64>) -> Buffer {
        Buffer::new_in_range(name, dtype, shape, None)
    }

    /// A buffer whose elements are promised to lie in `value_range` (see `BufferData`).
    pub fn new_in_range(
        name: impl Into<String>,
        dtype: DType,
        shape: Vec<i64>,
        value_range: Option<(i64, i64)>,
    ) -> Buffer {
        assert!(dtype.is_scalar(), "buffer element type must be scalar, got {dtype}");
        assert!(shape.iter().all(|&d| d >= 0), "buffer shape {shape:?} has a negative dimension");
        // `te` rejects larger tensors, so every length and byte offset below fits in an i64.
        let bytes = shape.iter().try_fold(dtype.bytes() as i64, |n, &d| n.checked_mul(d));
        assert!(bytes.is_some(), "buffer shape {shape:?} of {dtype} has more than i64::MAX bytes");
        let id = BufferId(NEXT_BUFFER_ID.fetch_add(1, Ordering::Relaxed));
        Buffer(Rc::new(BufferData { id, name: name.into(), dtype, shape, value_range }))
    }

    pub fn id(&self) -> BufferId {
        self.0.id
    }

    pub fn name(&self) -> &str {
        &self.0.name
    }

    pub fn dtype(&self) -> DType {
        self.0.dtype
    }

    pub fn shape(&self) -> &[i64] {
        &self.0.shape
    }

    /// The promised range of every element, if any (see `BufferData::value_range`).
    pub fn value_range(&self) -> Option<(i64, i64)> {
        self.0.value_range
    }

    /// Number of elements.
    pub fn len(&self) -> i64 {
        self.0.shape.iter().product()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Row-major element strides, one per dimension.
    pub fn strides(&self) -> Vec<i64> {
        let mut strides = vec![1; self.0.shape.len()];
        for d in (0..self.0.shape.len().saturating_sub(1)).rev() {
            strides[d] = strides[d + 1] * self.0.shape[d + 1];
        }
        strides
    }
}

impl PartialEq for Buffer {
    fn eq(&self, other: &Buffer) -> bool {
        self.0.id == other.0.id
    }
}
impl Eq for Buffer {}
impl std::hash::Hash for Buffer {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.0.id.hash(state)
    }
}

/// How the iterations of a `For` are executed (see the module doc).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum ForKind {
    Serial,
    Parallel,
    Vectorized,
    Unrolled,
}

impl ForKind {
    pub fn keyword(self) -> &'static str {
        match self {
            ForKind::Serial => "for",
            ForKind::Parallel => "parallel",
            ForKind::Vectorized => "vectorized",
            ForKind::Unrolled => "unrolled",
        }
    }
}

/// The region of `buffer` standing for one tensor of an intrinsic's declaration: declaration
/// element `(p_0, .., p_{r-1})` is the buffer element at flat index
/// `flat(origin) + Σ p_d · strides[d]`.
///
/// `origin` has one index per buffer dimension before `flatten_buffers` (`flat` is then the
/// row-major element index of that point, which itself need not lie inside every dimension) and
/// one flat index after; `strides` are flat element strides, one per dimension of the declaration
/// tensor. Every element of the region must lie inside the buffer when the call runs.
#[derive(Clone, Debug)]
pub struct Operand {
    pub buffer: Buffer,
    pub origin: Vec<Expr>,
    pub strides: Vec<i64>,
}

impl Operand {
    /// `flat(origin)`: the row-major element index of the origin (the origin itself once flat).
    pub fn flat_origin(&self) -> Expr {
        if self.origin.len() == 1 {
            return self.origin[0].clone();
        }
        let term = |(i, s): (&Expr, i64)| if s == 1 { i.clone() } else { i.clone() * s };
        self.origin
            .iter()
            .zip(self.buffer.strides())
            .map(term)
            .reduce(|acc, t| acc + t)
            .unwrap_or_else(|| Expr::index(0))
    }

    /// The smallest and largest flat offset from `flat(origin)` of an element of the region of a
    /// declaration tensor with the given shape (no element: `(0, -1)`).
    pub fn span(&self, shape: &[i64]) -> (i64, i64) {
        if shape.iter().any(|&e| e <= 0) {
            return (0, -1);
        }
        let (mut lo, mut hi) = (0, 0);
        for (&stride, &extent) in self.strides.iter().zip(shape) {
            let reach = stride * (extent - 1);
            if reach < 0 { lo += reach } else { hi += reach }
        }
        (lo, hi)
    }
}

/// The segments `first ≤ s < last` a segmented GEMM call computes (`StmtKind::Call::range`).
#[derive(Clone, Debug)]
pub struct SegmentRange {
    pub first: Expr,
    pub last: Expr,
}

#[derive(Debug)]
pub enum StmtKind {
    For {
        var: Var,
        extent: i64,
        kind: ForKind,
        body: Stmt,
    },
    Let {
        var: Var,
        value: Expr,
        body: Stmt,
    },
    Store {
        buffer: Buffer,
        indices: Vec<Expr>,
        value: Expr,
    },
    If {
        cond: Expr,
        then_case: Stmt,
        else_case: Option<Stmt>,
    },
    Seq(Vec<Stmt>),
    Allocate {
        buffer: Buffer,
        body: Stmt,
    },
    /// Computes the declaration of `intrin` (`TensorIntrinData::output`) on buffer regions.
    /// `operands` are the regions (`Operand`) of the declaration's inputs, in declaration order,
    /// then of its output. The call reads every input region as it is before the call, then
    /// evaluates the declaration at every point of the output's shape: a declaration whose body
    /// is a reduction updates each output element, folding the reduction's values into the
    /// element's current value in row-major order of the reduce axes (the reset is an ordinary
    /// store before the call, or the call's own with `reset`); any other declaration overwrites the element. Every region element
    /// must lie inside its buffer (`guard_accesses` ensures it).
    ///
    /// `fallback` is a loop nest that computes exactly the same (`Schedule::tensorize` proves
    /// it), so an implementation may run it instead, e.g. where no kernel for the intrinsic
    /// exists. The reference interpreter executes the declaration, never the fallback, so tests
    /// can compare the two. The printer shows the call, not the fallback (print the fallback
    /// statement itself to see it).
    ///
    /// With `reset` (declarations whose body is a reduction with a constant identity), the call
    /// first sets its output region to the reduction's identity, then updates it: the
    /// compiler's init statement is part of the call. `build_loop_nests` emits this where the
    /// init nest covers exactly the call's output region, so that a kernel can start from the
    /// identity instead of reading the output; the fallback then holds the init nest before
    /// the update loops.
    ///
    /// With `range` (an `Int8Gemm` or `Int16Gemm` declaration of `S > 1` segments, or a
    /// `GemmMap` whose GEMM part is one), the call computes only the segments `s` with
    /// `first ≤ s < last` (index expressions evaluated before the call; an empty range when
    /// `first ≥ last` after clamping both to `[0, S]`): exactly the declaration on an `A` whose
    /// elements in the other segments were 0 (`IntrinKind::Int8Gemm`). A reset still sets the
    /// output first, so a resetting call with an empty range writes the identity (a `GemmMap`
    /// maps the zero tile). The fallback computes every segment: a range is only set where the
    /// other segments provably read zeros (`passes::zero_segment_range`), so the two agree.
    Call {
        intrin: TensorIntrin,
        operands: Vec<Operand>,
        reset: bool,
        fallback: Stmt,
        range: Option<SegmentRange>,
    },
    /// A run-time check of reads whose index depends on data (`passes::check_gathers` inserts
    /// them; a vectorized loop checks all its lanes at once): if `cond` is false (in any lane,
    /// for a vector), the function stops here and reports
    /// an index out of the bounds of `buffer`; statements before it have run, none after it do.
    BoundsCheck {
        cond: Expr,
        buffer: Buffer,
    },
}

/// An immutable, shared statement tree.
#[derive(Clone, Debug)]
pub struct Stmt(Rc<StmtKind>);

impl Stmt {
    pub fn new(kind: StmtKind) -> Stmt {
        Stmt(Rc::new(kind))
    }

    pub fn kind(&self) -> &StmtKind {
        &self.0
    }

    pub fn same_node(&self, other: &Stmt) -> bool {
        Rc::ptr_eq(&self.0, &other.0)
    }

    pub fn for_loop(var: Var, extent: i64, kind: ForKind, body: Stmt) -> Stmt {
        Stmt::new(StmtKind::For { var, extent, kind, body })
    }

    pub fn let_stmt(var: Var, value: Expr, body: Stmt) -> Stmt {
        Stmt::new(StmtKind::Let { var, value, body })
    }

    pub fn store(buffer: &Buffer, indices: Vec<Expr>, value: Expr) -> Stmt {
        Stmt::new(StmtKind::Store { buffer: buffer.clone(), indices, value })
    }

    pub fn if_then(cond: Expr, then_case: Stmt) -> Stmt {
        Stmt::new(StmtKind::If { cond, then_case, else_case: None })
    }

    /// A sequence; nested sequences are flattened and a single statement is returned as is.
    pub fn seq(stmts: Vec<Stmt>) -> Stmt {
        let mut flat = Vec::with_capacity(stmts.len());
        for stmt in stmts {
            match stmt.kind() {
                StmtKind::Seq(inner) => flat.extend(inner.iter().cloned()),
                _ => flat.push(stmt),
            }
        }
        if flat.len() == 1 { flat.pop().unwrap() } else { Stmt::new(StmtKind::Seq(flat)) }
    }

    pub fn no_op() -> Stmt {
        Stmt::new(StmtKind::Seq(Vec::new()))
    }

    pub fn is_no_op(&self) -> bool {
        matches!(self.kind(), StmtKind::Seq(s) if s.is_empty())
    }

    pub fn allocate(buffer: Buffer, body: Stmt) -> Stmt {
        Stmt::new(StmtKind::Allocate { buffer, body })
    }

    pub fn call(intrin: TensorIntrin, operands: Vec<Operand>, reset: bool, fallback: Stmt) -> Stmt {
        Stmt::new(StmtKind::Call { intrin, operands, reset, fallback, range: None })
    }

    /// A call computing only the segments `range` (see `StmtKind::Call`).
    pub fn call_in_range(
        intrin: TensorIntrin,
        operands: Vec<Operand>,
        reset: bool,
        fallback: Stmt,
        range: Option<SegmentRange>,
    ) -> Stmt {
        Stmt::new(StmtKind::Call { intrin, operands, reset, fallback, range })
    }

    pub fn bounds_check(cond: Expr, buffer: &Buffer) -> Stmt {
        Stmt::new(StmtKind::BoundsCheck { cond, buffer: buffer.clone() })
    }
}

/// A lowered function: the unit of code generation.
#[derive(Clone, Debug)]
pub struct Func {
    pub name: String,
    /// The caller-provided buffers, in call order.
    pub params: Vec<Buffer>,
    pub body: Stmt,
}
