//! User errors of the target-independent compiler, one enum per boundary.
//!
//! Every message says what was expected and what was found. Compiler bugs are not errors: they
//! are assertions and verifier failures, and they panic with the name of the pass.

use thiserror::Error;

use crate::dtype::DType;

/// Errors in a tensor-expression definition (`te::compute`, `te::comm_reducer`).
#[derive(Debug, Error, Clone, PartialEq)]
pub enum TeError {
    #[error(
        "dtype mismatch in `{op}`: left operand is {lhs}, right operand is {rhs}, in `{expr}` (tensorlift never promotes implicitly: add an explicit cast)"
    )]
    DTypeMismatch { op: String, lhs: DType, rhs: DType, expr: String },
    #[error("operator `{op}` is not defined on {dtype}, in `{expr}`")]
    UndefinedOperator { op: String, dtype: DType, expr: String },
    #[error("condition must be bool, found {found}, in `{expr}`")]
    ConditionNotBool { found: DType, expr: String },
    #[error("tensor {tensor} has {expected} dimensions but is indexed with {found} indices")]
    IndexCount { tensor: String, expected: usize, found: usize },
    #[error("index of tensor {tensor} must be i64, found {found} in `{expr}`")]
    IndexDType { tensor: String, found: DType, expr: String },
    #[error(
        "{reducer} reduction declared with result dtype {expected} but its source is {found}: `{expr}` (cast the source explicitly)"
    )]
    ReduceDType { reducer: String, expected: DType, found: DType, expr: String },
    #[error("reducer {reducer}: {what} must be {expected}, found {found}")]
    ReducerDType { reducer: String, what: &'static str, expected: DType, found: DType },
    #[error("compute {tensor}: a reduction must be the whole body, found one nested inside an expression")]
    NestedReduction { tensor: String },
    #[error("compute {tensor}: a reduction needs at least one axis")]
    EmptyReduction { tensor: String },
    #[error("compute {tensor}: axis {axis} is reduced over but is not a reduce_axis")]
    NotAReduceAxis { tensor: String, axis: String },
    #[error("compute {tensor}: variable {var} is used but is neither an output axis nor a reduced axis")]
    UnboundVar { tensor: String, var: String },
    /// `what` is `placeholder` or `compute`.
    #[error("{what} {tensor}: every dimension must be positive, found {found} in dimension {dim} of shape {shape:?}")]
    BadShape { what: &'static str, tensor: String, shape: Vec<i64>, dim: usize, found: i64 },
    /// The element count or the byte size of a tensor does not fit in `i64` (every index and
    /// buffer length in the compiler is an `i64`, and a byte size must fit in `isize`).
    #[error(
        "{what} {tensor}: shape {shape:?} of {dtype} has {count} {quantity}, more than the maximum of {} (i64::MAX)",
        i64::MAX
    )]
    ShapeTooLarge {
        what: &'static str,
        tensor: String,
        shape: Vec<i64>,
        dtype: DType,
        quantity: &'static str,
        count: String,
    },
    #[error("reduce_axis {axis}: extent must be positive, found {found}")]
    BadReduceExtent { axis: String, found: i64 },
    /// The loops of a compute (its output axes and reduce axes) run more iterations than an `i64`
    /// counts, so a fused loop over them could not be represented.
    #[error(
        "compute {tensor}: its iteration domain (output shape {shape:?} times reduce extents {reduce:?}) has {count} points, more than the maximum of {} (i64::MAX)",
        i64::MAX
    )]
    DomainTooLarge { tensor: String, shape: Vec<i64>, reduce: Vec<i64>, count: String },
    #[error("{0}")]
    OutOfBounds(Box<OutOfBoundsRead>),
    #[error("{op}: {what} must be {expected}, found {found}")]
    ShapeMismatch { op: String, what: String, expected: String, found: String },
    #[error("compute {tensor}: the body must be a scalar, found {found}")]
    VectorBody { tensor: String, found: DType },
    #[error("placeholder {tensor}: value range {lo}..={hi} must be non-empty and inside the range of {dtype}")]
    BadValueRange { tensor: String, dtype: DType, lo: i64, hi: i64 },
    #[error("tensor intrinsic {intrin}: {what}: expected {expected}, found {found}")]
    BadIntrinsic { intrin: String, what: String, expected: String, found: String },
}

/// A read in the body of compute `tensor` that leaves `input` for some point of the iteration
/// domain: in dimension `dim`, its index `index` ranges over `min..=max` (`None`: unbounded on
/// that side); `guarded` says whether `select` conditions were assumed. Boxed in `TeError` so
/// the error every definition returns stays small.
#[derive(Debug, Error, Clone, PartialEq)]
#[error("compute {tensor}: {input} is accessed at {index} in dimension {dim}, which ranges over {} but {input} has extent {extent} there (valid indices 0..={}){}", show_range(*.min, *.max), .extent - 1, if *.guarded { " under the enclosing conditions" } else { "" })]
pub struct OutOfBoundsRead {
    pub tensor: String,
    pub input: String,
    pub dim: usize,
    pub index: String,
    pub min: Option<i128>,
    pub max: Option<i128>,
    pub extent: i64,
    pub guarded: bool,
}

fn show_range(min: Option<i128>, max: Option<i128>) -> String {
    let side = |v: Option<i128>, inf: &str| v.map_or(inf.to_string(), |v| v.to_string());
    format!("{}..={}", side(min, "-inf"), side(max, "+inf"))
}

/// Errors from schedule primitives. A schedule that every primitive accepted always lowers.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum ScheduleError {
    #[error("tensor {tensor} is not part of this schedule")]
    UnknownTensor { tensor: String },
    #[error("{primitive}: tensor {tensor} is a placeholder; only computed tensors can be scheduled")]
    NotACompute { primitive: &'static str, tensor: String },
    #[error("{primitive}: axis {axis} is not a loop of stage {stage} (its loops are: {leaves})")]
    UnknownAxis { primitive: &'static str, stage: String, axis: String, leaves: String },
    #[error("split of {stage}.{axis}: factor must be a positive integer, found {found}")]
    BadSplitFactor { stage: String, axis: String, found: i64 },
    #[error("reorder of {stage}: axis {axis} is given more than once")]
    DuplicateAxis { stage: String, axis: String },
    #[error(
        "fuse of {stage}: {outer} and {inner} must be adjacent loops with {outer} directly outside {inner}, found them at positions {outer_pos} and {inner_pos} of ({leaves})"
    )]
    FuseNotAdjacent { stage: String, outer: String, inner: String, outer_pos: usize, inner_pos: usize, leaves: String },
    #[error("fuse of {stage}: cannot fuse reduction axis {reduce} with data-parallel axis {data_par}")]
    FuseMixedKinds { stage: String, reduce: String, data_par: String },
    #[error(
        "{primitive} of {stage}.{axis}: the loop extent must be a compile-time constant, but it is inferred at lowering from the consumer of a compute_at stage (split it by a constant factor first)"
    )]
    NonConstantExtent { primitive: &'static str, stage: String, axis: String },
    #[error("vectorize of {stage}.{axis}: extent {found} exceeds the maximum of {max} lanes")]
    TooManyLanes { stage: String, axis: String, found: i64, max: i64 },
    #[error(
        "parallel of {stage}.{axis}: a reduction axis cannot run in parallel (iterations would race on the same output)"
    )]
    ParallelReduction { stage: String, axis: String },
    #[error("compute_at of {stage}: stage {target} does not consume {stage} (its consumers are: {consumers})")]
    NotAConsumer { stage: String, target: String, consumers: String },
    #[error("compute_at of {stage}: it is also consumed by {other}, which would read it outside {target}")]
    MultipleConsumers { stage: String, target: String, other: String },
    #[error("{primitive} of {stage}: {reason}")]
    BadAttachment { primitive: &'static str, stage: String, reason: String },
    #[error("cache_read of {tensor}: {reader} does not read it")]
    NotAReader { tensor: String, reader: String },
    #[error("{0}")]
    TensorizeMismatch(Box<TensorizeMismatch>),
}

/// A loop nest that differs from a tensor intrinsic's declaration (`Schedule::tensorize`), in
/// `part`, as `what` shows: `expected` and `found` are in the IR's printed syntax. Boxed in
/// `ScheduleError` so the error every primitive returns stays small.
#[derive(Debug, Error, Clone, PartialEq)]
#[error("tensorize of {stage} at {axis} with {intrin}: {part} ({what}): expected {expected}, found {found}")]
pub struct TensorizeMismatch {
    pub stage: String,
    pub axis: String,
    pub intrin: String,
    pub part: MismatchPart,
    pub what: String,
    pub expected: String,
    pub found: String,
}

/// Which part of a loop nest differs from a tensor intrinsic's declaration (`Schedule::tensorize`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MismatchPart {
    /// The stage is not computed at the root, a stage is computed inside the region, or an
    /// operand is not a placeholder or a root stage.
    Placement,
    /// One computes saturating pair sums, the other exact products.
    Saturation,
    /// The number of loops under the axis differs from the declaration's axis count.
    LoopCount,
    /// A loop under the axis is (derived from) a fused loop.
    FusedLoop,
    /// The numbers of data-parallel and reduction loops differ from the declaration's.
    AxisKind,
    OutputDType,
    /// Reduction against element-wise, or different reducers.
    Reducer,
    /// The number of tensors read differs.
    OperandCount,
    OperandDType,
    /// The expression structure (operators, casts, constants) differs.
    Body,
    /// The loop extents cannot be matched to the declaration's axis extents.
    Extent,
    /// An index is not affine in the loops under the axis.
    NonAffine,
    /// An access depends on the loops differently than the declaration's access on its axes.
    AxisDependence,
    /// A stride the intrinsic's kind requires (`IntrinKind::required_strides`) is not met.
    Stride,
    /// A float reduction whose loops are not in the declaration's order (rounding would differ).
    FloatOrder,
}

impl std::fmt::Display for MismatchPart {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            MismatchPart::Placement => "placement",
            MismatchPart::Saturation => "saturation",
            MismatchPart::LoopCount => "loop count",
            MismatchPart::FusedLoop => "fused loop",
            MismatchPart::AxisKind => "axis kinds",
            MismatchPart::OutputDType => "output dtype",
            MismatchPart::Reducer => "reducer",
            MismatchPart::OperandCount => "operand count",
            MismatchPart::OperandDType => "operand dtype",
            MismatchPart::Body => "body",
            MismatchPart::Extent => "extent",
            MismatchPart::NonAffine => "non-affine access",
            MismatchPart::AxisDependence => "axis dependence",
            MismatchPart::Stride => "stride",
            MismatchPart::FloatOrder => "float reduction order",
        })
    }
}

/// Errors when lowering a schedule into a function.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum LowerError {
    #[error("lower: input tensor {tensor} is read but is not among the arguments ({args})")]
    MissingArgument { tensor: String, args: String },
    #[error("lower: output tensor {tensor} is not among the arguments ({args})")]
    MissingOutput { tensor: String, args: String },
    #[error("lower: argument {tensor} is given more than once")]
    DuplicateArgument { tensor: String },
    #[error("lower: argument {tensor} is neither a placeholder nor an output of this schedule")]
    UnusedArgument { tensor: String },
}
