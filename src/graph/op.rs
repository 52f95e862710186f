//! Ops: one kind per variant, each with its exact semantics written at its definition (inputs,
//! outputs, formula, rounding, saturation, shapes, attributes). `reference` evaluates exactly
//! this; `shape` infers output types and shapes; `validate` checks the attributes.
//!
//! Conventions for every op below:
//! * Tensors are indexed row-major; `x[n, c, i]` with `i` a spatial multi-index.
//! * Floating-point ops accept `f32`, `f16` or `bf16`, all operands of one type. An `f16` or
//!   `bf16` operand is widened exactly to f32, the op is computed in f32 as written, and each
//!   output element is rounded once (to nearest, ties to even) to the output type. Each written
//!   `+`, `·` and `/` is one IEEE f32 operation rounded to nearest even — no fused multiply-add —
//!   in the order written; sums run in the stated order starting from `+0.0`.
//! * "Window" ops (convolution, pooling) place output position `o` of a spatial dimension at
//!   input positions `o·s − pb + k·d` for kernel taps `k = 0..K` (stride `s`, pad `pb`,
//!   dilation `d`); positions outside `0..D` are padding.

use cranelift_entity::entity_impl;

use super::attrs::{
    AvgPoolAttrs, BiasAddAttrs, ClipAttrs, ConvAttrs, MatMulAttrs, MaxPoolAttrs, QuantParams, QuantizeAttrs,
    ReduceMeanAttrs, ReshapeAttrs, TransposeAttrs, TypeCastAttrs,
};
use super::tensor::TensorId;

/// The identity of an op in one graph.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OpId(u32);
entity_impl!(OpId, "op");

/// An op: a kind with its attributes, reading `inputs` and writing `outputs`.
#[derive(Clone, Debug, PartialEq)]
pub struct Op {
    /// For printing only.
    pub name: String,
    pub kind: OpKind,
    pub inputs: Vec<TensorId>,
    pub outputs: Vec<TensorId>,
}

/// What an op computes.
#[derive(Clone, Debug, PartialEq)]
pub enum OpKind {
    /// `y = conv(x, w) [+ b]`, inputs `x, w[, b]`, one output.
    ///
    /// `x: [N, C, D1..Dk]` (NCHW for k = 2), `w: [OC, C/groups, K1..Kk]` (OIHW, as ONNX gives
    /// weights), optional `b: [OC]`, float; `1 ≤ k ≤ 3`. With `G = groups`, `Cg = C/G`,
    /// `OCg = OC/G` and `g = oc / OCg`:
    ///
    /// ```text
    /// acc = Σ_{ic < Cg} Σ_{k ∈ K1×..×Kk, row-major} x[n, g·Cg + ic, o·s − pb + k·d] · w[oc, ic, k]
    /// y[n, oc, o] = acc + b[oc]            (or acc without a bias)
    /// ```
    ///
    /// summed in that order (ic slowest), padded taps skipped (they read zeros). Output size per
    /// spatial dimension: `O = ⌊(D + pb + pe − ((K − 1)·d + 1)) / s⌋ + 1`, which must be ≥ 1.
    /// Errors: zero or negative stride or dilation, negative pad, groups not dividing `C` or
    /// `OC`, `w`'s second dimension not `C/groups`, lists not one entry per spatial dimension.
    Convolution(ConvAttrs),
    /// `y = op(a) · op(b)`, inputs `a, b`, one output; float.
    ///
    /// `op(a)` is `a: [.., M, K]`, or the transpose of `a: [.., K, M]` with `transpose_a`;
    /// likewise `op(b): [.., K, N]`. Both ranks ≥ 2; the leading (batch) dimensions broadcast as
    /// numpy does. `y[.., m, n] = Σ_{k < K} op(a)[.., m, k] · op(b)[.., k, n]`, k ascending.
    MatMul(MatMulAttrs),
    /// `y = x + b` along one axis, inputs `x, b`, one output; float.
    ///
    /// `b: [dims[axis]]`; `y[i] = x[i] + b[i_axis]`.
    BiasAdd(BiasAddAttrs),
    /// `y = a + b` with numpy broadcasting, inputs `a, b`, one output; float, same type.
    ///
    /// Shapes align at the last dimension; each pair of dimensions must be equal or one of them
    /// 1 (a missing leading dimension counts as 1); the output takes the larger.
    Add,
    /// `y = x < 0 ? +0 : x`, one input, one output; float. NaN stays NaN, −0 stays −0.
    ReLU,
    /// `y = x < min ? min : (x > max ? max : x)`, one input, one output; float. NaN stays NaN.
    Clip(ClipAttrs),
    /// `y[n, c, o] = max` of `x[n, c, o·s − pb + k·d]` over the window taps inside the input;
    /// one input, one output. Float, `u8` or `s8` (exact: no arithmetic).
    ///
    /// Padded taps are ignored. A window with no tap inside the input (possible only with
    /// `ceil_mode`) yields the type's lowest finite value. A NaN never replaces the maximum
    /// (the running maximum is replaced when `v > max`, starting from the lowest value).
    /// Output size: `⌊(D + pb + pe − ((K − 1)·d + 1)) / s⌋ + 1`, or with `ceil_mode` the
    /// ceiling of the same quotient plus 1 (onnxruntime's `pool_attributes.h`, no adjustment).
    MaxPool(MaxPoolAttrs),
    /// `y[n, c, o] = (Σ x[n, c, o·s − pb + k]) / count`, one input, one output; float.
    ///
    /// The sum runs over the window taps inside the input, row-major. `count` is the number of
    /// taps inside the padded extent `−pb..D + pe` with `count_include_pad` (padding counts,
    /// positions past the end padding that `ceil_mode` adds do not), else the number inside the
    /// input; the division is one f32 division by `f32(count)` (0/0 is NaN for an empty
    /// window). Output size as `MaxPool` with dilation 1.
    AvgPool(AvgPoolAttrs),
    /// `y[n, c, 1, .., 1] = (Σ_i x[n, c, i]) / f32(D1·..·Dk)`, one input `[N, C, D1..Dk]`
    /// (rank ≥ 3), one output; float. The sum runs row-major over the spatial positions.
    GlobalAveragePool,
    /// `y = (Σ x over the reduced axes) / f32(count)`, one input, one output; float.
    ///
    /// For each output element the sum runs row-major over the reduced positions; `count` is
    /// the product of the reduced dimensions. With `keep_dims` each reduced axis stays as size
    /// 1, else it is removed.
    ReduceMean(ReduceMeanAttrs),
    /// `y = f32(x − zero_point) · scale`, one input (`u8`, `s8` or `s32`), one `f32` output.
    ///
    /// `x − zero_point` is an i32 subtraction (wrapping, as onnxruntime's; exact for 8-bit
    /// inputs), converted to f32 (to nearest even), then one f32 multiply. Per channel, the
    /// scale and zero point of `x[i]` are those of index `i_axis`. Errors: a scale that is not
    /// finite and positive, a zero point outside the input type (non-zero for `s32`), a scale
    /// count that is not 1 (per tensor) or `dims[axis]` (per channel), zero points not as many.
    Dequantize(QuantParams),
    /// `y = saturate(round_half_even(x / scale) + zero_point)`, one `f32` input, one `u8` or
    /// `s8` output (ONNX `QuantizeLinear`).
    ///
    /// `x / scale` is one f32 division, clamped to `[lo − zp, hi − zp]` (the type's range less
    /// the zero point), rounded to the nearest integer with ties to even, plus the zero point:
    /// the same as rounding first and saturating after. ±∞ saturate; NaN gives `lo` (the
    /// clamp's `v > lower ? v : lower` picks the bound, as onnxruntime's MLAS kernels do).
    /// Parameters as `Dequantize`.
    Quantize(QuantizeAttrs),
    /// A floating-point conversion, one input, one output: `f32 → f16` and `f32 → bf16` round
    /// each value once to nearest, ties to even (correctly rounded: overflow gives ±∞, NaN stays
    /// NaN); `f16 → f32` and `bf16 → f32` are exact. Other pairs are errors.
    TypeCast(TypeCastAttrs),
    /// The same elements in row-major order under a new shape; one input, one output, any type.
    /// Errors: an entry below -1, more than one -1, a 0 past the input's rank, element counts
    /// that differ (when known).
    StaticReshape(ReshapeAttrs),
    /// `y[i_0, .., i_{r-1}] = x[j]` with `j_{perm[a]} = i_a`; one input, one output, any type.
    /// Output dimension `a` is input dimension `perm[a]`.
    StaticTranspose(TransposeAttrs),
    /// `y = x` with another layout (the output tensor's); one input, one output, any type, the
    /// same shape. A layout change never changes values.
    Reorder,
}

impl OpKind {
    /// The op's name in printed graphs and messages.
    pub fn name(&self) -> &'static str {
        match self {
            OpKind::Convolution(_) => "Convolution",
            OpKind::MatMul(_) => "MatMul",
            OpKind::BiasAdd(_) => "BiasAdd",
            OpKind::Add => "Add",
            OpKind::ReLU => "ReLU",
            OpKind::Clip(_) => "Clip",
            OpKind::MaxPool(_) => "MaxPool",
            OpKind::AvgPool(_) => "AvgPool",
            OpKind::GlobalAveragePool => "GlobalAveragePool",
            OpKind::ReduceMean(_) => "ReduceMean",
            OpKind::Dequantize(_) => "Dequantize",
            OpKind::Quantize(_) => "Quantize",
            OpKind::TypeCast(_) => "TypeCast",
            OpKind::StaticReshape(_) => "StaticReshape",
            OpKind::StaticTranspose(_) => "StaticTranspose",
            OpKind::Reorder => "Reorder",
        }
    }

    /// How many inputs the op takes: the smallest and largest count.
    pub fn input_count(&self) -> (usize, usize) {
        match self {
            OpKind::Convolution(_) => (2, 3),
            OpKind::MatMul(_) | OpKind::BiasAdd(_) | OpKind::Add => (2, 2),
            _ => (1, 1),
        }
    }

    /// Every op has exactly one output.
    pub fn output_count(&self) -> usize {
        1
    }
}
