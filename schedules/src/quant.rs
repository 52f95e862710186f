//! The int8 quantization model (oneDNN's): scales and zero points shaped by dimension masks,
//! post-ops, and requantization written as tensor expressions.
//!
//! # Model
//!
//! A quantized tensor `x_int` stands for `x_f32 = scale · (x_int − zp)`. Scales are f32 (finite
//! and positive), zero points i32. Their shape is a **mask** over the dimensions of the tensor
//! they describe: bit `d` set means one value per index of dimension `d`, so
//! `mask = Σ 2^d` and the number of values is `Π dims[d]` over the set bits. Mask 0 is one value
//! for the whole tensor; mask `1 << 0` on `[OC, IC, KH, KW]` weights is one value per output
//! channel. With several bits set, values are laid out row-major over the selected dimensions
//! (the lowest selected dimension varies slowest). Any other count is `QuantError::MaskCount`.
//!
//! # Requantization of an int8 contraction (convolution, dense)
//!
//! oneDNN's quantization model (the seed document "Quantization", convolution with bias)
//! defines the result as
//!
//! ```text
//! dst_int8 = f32_to_int8((scale_src · scale_wei · s32_to_f32(conv_s32(src_int8, wei_int8)
//!                         − zp_src · comp_s32) + bias_f32) / scale_dst + zp_dst)
//! ```
//!
//! and tensorlift evaluates exactly that formula, left to right, one IEEE f32 rounding per
//! operation. Sources are u8 or s8, weights s8 and symmetric (no zero point), accumulation i32.
//! For output channel `oc`, with `acc` the exact i32 sum of `src · wei` products:
//!
//! ```text
//! M   = scale_src · scale_wei[oc]                    f32 product of the two scales, rounded once
//! x   = M · f32(acc − comp[oc]) + bias[oc]           s32 → f32 (round to nearest even), one multiply, then + bias
//! x   = post_ops(x)                                  in list order (see `PostOp`), in f32
//! y   = x / scale_dst + f32(zp_dst)                  a true division, then + zero point
//! dst = sat(round(y))   for u8, s8 and i32 (round half to even, then saturate)
//! dst = y               for f32 (not rounded)
//! ```
//!
//! The order matters to the last bit, and each choice is oneDNN's formula as written:
//! * the scales are multiplied together first and the accumulator once by their product
//!   (`(scale_src · scale_wei) · acc`), not by each scale in turn (`(scale_src · acc) · scale_wei`
//!   rounds twice); `M[oc]` is formed once per channel when the operator is built, which gives
//!   the same f32 product as forming it per element;
//! * the bias is added after the scaling and before the post-ops;
//! * the destination scale divides (`x / scale_dst`); multiplying by a precomputed reciprocal
//!   `1 / scale_dst` (what some optimized kernels do) differs by an ulp on some inputs;
//! * `f32_to_int8` rounds "according to the current HW setting", which is round to nearest even
//!   by default (MXCSR), and saturates; rounding first and clamping to the integer bounds after
//!   is the same as the other way round. A NaN (only from NaN or infinite inputs) stores 0.
//!
//! So an f32 destination is bit-identical to the formula computed in f32 step by step; the test
//! `tests/it/quant.rs::requantization_follows_onednns_formula_to_the_bit` checks that over random
//! accumulators, scales and biases, and shows that each alternative order above differs from it
//! on some of those inputs (so the check can fail).
//!
//! `comp[oc] = (zp_src + shift) · Σ_{ic,kh,kw} wei[oc, ic, kh, kw]` is the compensation, computed
//! once when the weights are prepared (`compensation`), not per call. An s8 source is shifted to
//! u8 (`x + 128`, exact) so that a u8 × s8 kernel computes the products; `shift = 128` then
//! removes the `128 · Σ wei` the shift added (oneDNN's s8 × s8 trick), and `shift = 0` for u8.
//! Padding stores the source zero point (shifted like every other element), so padded taps
//! contribute exactly `(zp_src + shift) · wei`, which the compensation removes: padding means
//! a real zero. The i32 arithmetic wraps, which is exact whenever the true result fits in i32.
//!
//! # onnxruntime's order
//!
//! onnxruntime's CPU provider requantizes QLinearConv, QGemm and QLinearMatMul in another order
//! (`Requantization::OnnxRuntime`), which imported ONNX networks follow. Read from its source:
//! `QLinearConv::ComputeOutputScale` forms one f32 scale per output channel as
//! `x_scale · w_scale[c] / y_scale` (C++ float arithmetic, left to right); QGemm forms
//! `alpha · a_scale · b_scale[c]`, then divides by `y_scale` (with `alpha = 1` the same value;
//! an `alpha` enters here by passing `alpha · a_scale` as the source scale); the bias is an
//! i32 added to the accumulator before any conversion (QLinearConv's `MlasRequantizeOutput`
//! adds it, its symmetric path folds it into the column sums, QGemm pre-fills the accumulator
//! with it). MLAS's `MlasRequantizeOutputVector` then converts to f32, multiplies by the scale,
//! clamps to `[lo − zp_y, hi − zp_y]` in f32, converts with `cvtps2dq` (round to nearest even)
//! and adds `zp_y` in i32. Because the clamp bounds are integers, that equals
//!
//! ```text
//! S[c] = (scale_src · scale_wei[c]) / scale_dst          f32, formed once per channel
//! x    = f32(acc − comp'[c]) · S[c]                      comp' = comp − bias_i32 (wrapping)
//! q    = round(x) + f32(zp_dst)                          round half to even; exact below 2^24
//! q    = max(q, f32(zp_dst))                             only with `PostOp::Relu`
//! dst  = sat(q)                                          u8 or i8
//! ```
//!
//! where `comp'` is the compensation with the i32 bias folded in when the weights are prepared
//! (`acc − (comp − bias) = Σ (x − zp_x)·w + bias`, exact in wrapping i32, so a call reads one
//! i32 per channel as in oneDNN's order). The relu is `max(q, zp_dst)`, which is exactly ReLU
//! before quantization (rounding is monotone and keeps 0); where `|round(x)| ≥ 2^24` the sum
//! may round, but it then saturates either way.
//!
//! In this order the functions read `S[c]`, `f32(zp_dst)` and the lower bound of the `max` as
//! per-channel f32 arguments (one value repeated for per-tensor quantities), and the padding
//! value `zp_src + shift` as a one-element argument: layers that differ only in their
//! quantization share one compiled function. Without ReLU the lower bound is the lowest value
//! of the destination type, where the `max` changes nothing the saturation would not (`round(x)`
//! is never NaN: `f32(acc − comp')` is finite and `S[c]` finite).
//!
//! A residual add may follow in the same stage (`PostOp::QLinearAdd`, onnxruntime's QLinearAdd
//! of `dst` and the sum input `r`, as MLAS computes it with FMAs): with `(a, b) = (dst, r)`, or
//! `(r, dst)` where the convolution is the add's second operand,
//!
//! ```text
//! c   = fma(f32(a), ra, fma(f32(b), rb, fixed))      ra, rb, fixed as onnxruntime forms them
//! out = sat(round(min(max(c, lo), hi)))            NaN gives lo; lo, hi the add's bounds
//! ```
//!
//! `dst` is the saturated integer above (held in f32, exact); its zero point and lower bound are
//! then constants of the definition, and the sum input of the destination's type and shape.
//!
//! The symmetric convolution kernels (`MlasConvSym`) requantize in their own assembly, which
//! was not read; `examples/qconv_against_ort.rs` runs onnxruntime itself on QLinearConv cases
//! (`scripts/peers/qlinearconv_cases.py`) and agrees bit for bit wherever onnxruntime's
//! accumulation is exact (its AVX2 u8 × s8 kernels saturate pair sums on full-range weights).
//!
//! Where the two orders differ: oneDNN scales by `scale_src · scale_wei` and divides by
//! `scale_dst` per element (two roundings, then the zero point before rounding), adds an f32
//! bias after scaling, and applies ReLU in f32; onnxruntime folds the three scales into one
//! (one rounding per element), adds an i32 bias before the conversion, and adds the zero point
//! after rounding. The two give different integers on some inputs
//! (`tests/it/ort_requant.rs` shows one). In onnxruntime's order the destination is u8 or i8,
//! there is no f32 bias (it is folded into the compensation), and the only post-op is ReLU.

use ir::expr::select;
use ir::interp::Array;
use ir::te::{Tensor, placeholder_vec};
use ir::{DType, Expr, TeError};
use thiserror::Error;

/// Errors in quantization attributes and in the shapes and dtypes of quantized operators.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum QuantError {
    #[error("{arg}: mask {mask:#b} selects dimension {dim}, but the tensor has {rank} dimensions {dims:?}")]
    MaskOutOfRange { arg: String, mask: u32, dim: u32, rank: usize, dims: Vec<i64> },
    #[error("{arg}: mask {mask:#b} over dimensions {dims:?} needs {expected} values, found {found}")]
    MaskCount { arg: String, mask: u32, dims: Vec<i64>, expected: usize, found: usize },
    #[error("{op}: {arg} must have mask {expected}, found mask {found:#b}")]
    UnsupportedMask { op: String, arg: String, expected: String, found: u32 },
    #[error("{arg}: a scale must be finite and positive, found {value} at index {index}")]
    BadScale { arg: String, index: usize, value: f32 },
    #[error("{arg}: a zero point must lie in the range of {dtype} ({lo}..={hi}), found {value} at index {index}")]
    ZeroPointRange { arg: String, dtype: DType, lo: i64, hi: i64, value: i32, index: usize },
    #[error("{op}: dtype of {what} must be {expected}, found {found}")]
    DType { op: String, what: String, expected: String, found: DType },
    #[error("{op}: {what} must be {expected}, found {found}")]
    Shape { op: String, what: String, expected: String, found: String },
    #[error(transparent)]
    Te(#[from] TeError),
}

/// Checks that `mask` selects only dimensions of `dims` and that `found` values fill it.
fn check_mask(arg: &str, mask: u32, found: usize, dims: &[i64]) -> Result<(), QuantError> {
    if let Some(dim) = (0..32).find(|&d| mask & (1 << d) != 0 && d as usize >= dims.len()) {
        let dims = dims.to_vec();
        return Err(QuantError::MaskOutOfRange { arg: arg.to_string(), mask, dim, rank: dims.len(), dims });
    }
    let expected = mask_count(mask, dims);
    if expected != found {
        return Err(QuantError::MaskCount { arg: arg.to_string(), mask, dims: dims.to_vec(), expected, found });
    }
    Ok(())
}

/// `Π dims[d]` over the dimensions `d` that `mask` selects (1 for mask 0).
pub fn mask_count(mask: u32, dims: &[i64]) -> usize {
    dims.iter().enumerate().filter(|(d, _)| mask & (1 << d) != 0).map(|(_, &n)| n as usize).product()
}

/// The position, in a mask-shaped value list, of the value for the element at `indices`:
/// row-major over the selected dimensions.
pub fn mask_index(mask: u32, dims: &[i64], indices: &[Expr]) -> Expr {
    let mut index = Expr::index(0);
    for (d, (&n, i)) in dims.iter().zip(indices).enumerate() {
        if mask & (1 << d) != 0 {
            index = index * n + i;
        }
    }
    index
}

/// Quantization scales of one tensor: `values` shaped by `mask` (module doc).
#[derive(Clone, Debug, PartialEq)]
pub struct Scales {
    pub values: Vec<f32>,
    pub mask: u32,
}

impl Scales {
    /// Scales for a tensor of shape `dims`. Errors if `mask` selects a dimension `dims` lacks,
    /// the count is not the mask's, or a scale is zero, negative or not finite. `arg` names the
    /// scales in messages.
    pub fn new(arg: &str, values: Vec<f32>, mask: u32, dims: &[i64]) -> Result<Scales, QuantError> {
        let scales = Scales { values, mask };
        scales.check(arg, dims)?;
        Ok(scales)
    }

    /// One scale for the whole tensor (mask 0).
    pub fn per_tensor(arg: &str, value: f32) -> Result<Scales, QuantError> {
        Scales::new(arg, vec![value], 0, &[])
    }

    /// Validates these scales for a tensor of shape `dims` (as `new` does).
    pub fn check(&self, arg: &str, dims: &[i64]) -> Result<(), QuantError> {
        check_mask(arg, self.mask, self.values.len(), dims)?;
        if let Some((index, &value)) = self.values.iter().enumerate().find(|(_, v)| !(v.is_finite() && **v > 0.0)) {
            return Err(QuantError::BadScale { arg: arg.to_string(), index, value });
        }
        Ok(())
    }
}

/// Zero points of one tensor: `values` shaped by `mask` (module doc).
#[derive(Clone, Debug, PartialEq)]
pub struct ZeroPoints {
    pub values: Vec<i32>,
    pub mask: u32,
}

impl ZeroPoints {
    /// Zero points for a tensor of shape `dims` and element type `dtype`. Errors as
    /// `Scales::new` for the mask, and if a value lies outside the range of an integer `dtype`
    /// (it must be a value of the tensor: padding stores it).
    pub fn new(arg: &str, values: Vec<i32>, mask: u32, dims: &[i64], dtype: DType) -> Result<ZeroPoints, QuantError> {
        let zps = ZeroPoints { values, mask };
        zps.check(arg, dims, dtype)?;
        Ok(zps)
    }

    /// One zero point for the whole tensor (mask 0).
    pub fn per_tensor(arg: &str, value: i32, dtype: DType) -> Result<ZeroPoints, QuantError> {
        ZeroPoints::new(arg, vec![value], 0, &[], dtype)
    }

    /// Validates these zero points for a tensor of shape `dims` and type `dtype`.
    pub fn check(&self, arg: &str, dims: &[i64], dtype: DType) -> Result<(), QuantError> {
        check_mask(arg, self.mask, self.values.len(), dims)?;
        if let Some((lo, hi)) = dtype.scalar.int_range() {
            let (lo, hi) = (lo.max(i64::MIN as i128) as i64, hi.min(i64::MAX as i128) as i64);
            if let Some((index, &value)) =
                self.values.iter().enumerate().find(|(_, v)| !(lo..=hi).contains(&(**v as i64)))
            {
                return Err(QuantError::ZeroPointRange { arg: arg.to_string(), dtype, lo, hi, value, index });
            }
        }
        Ok(())
    }
}

/// The quantization of one tensor: `x_f32 = scale · (x − zp)`.
#[derive(Clone, Debug, PartialEq)]
pub struct TensorQuant {
    pub scales: Scales,
    pub zero_points: ZeroPoints,
}

impl TensorQuant {
    /// Per-tensor scale and zero point for a tensor of type `dtype`.
    pub fn per_tensor(arg: &str, scale: f32, zero_point: i32, dtype: DType) -> Result<TensorQuant, QuantError> {
        Ok(TensorQuant {
            scales: Scales::per_tensor(&format!("{arg} scale"), scale)?,
            zero_points: ZeroPoints::per_tensor(&format!("{arg} zero point"), zero_point, dtype)?,
        })
    }

    /// Validates both parts for a tensor of shape `dims` and type `dtype`.
    pub fn check(&self, arg: &str, dims: &[i64], dtype: DType) -> Result<(), QuantError> {
        self.scales.check(&format!("{arg} scales"), dims)?;
        self.zero_points.check(&format!("{arg} zero points"), dims, dtype)
    }

    /// Errors unless both masks are 0 (what operators support for activations).
    pub(crate) fn require_per_tensor(&self, op: &str, arg: &str) -> Result<(f32, i32), QuantError> {
        for (what, mask) in [("scales", self.scales.mask), ("zero points", self.zero_points.mask)] {
            if mask != 0 {
                return Err(QuantError::UnsupportedMask {
                    op: op.to_string(),
                    arg: format!("{arg} {what}"),
                    expected: "0 (per tensor)".to_string(),
                    found: mask,
                });
            }
        }
        Ok((self.scales.values[0], self.zero_points.values[0]))
    }
}

/// An operation applied in f32 after the scaled accumulator and the bias, before the
/// destination quantization (oneDNN post-ops), in list order.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum PostOp {
    /// `x = x > 0 ? x : +0` (`max(x, 0)`, with NaN and -0 giving +0).
    Relu,
    /// The residual sum: `x = x + scale · (f32(r) − f32(zero_point))` for the element `r` of
    /// the operator's sum input at the same index (`scale` and the zero point quantize `r`).
    Sum { scale: f32, zero_point: i32 },
    /// onnxruntime's order only, last: the quantized add of the saturated destination and the
    /// sum input (module doc, "onnxruntime's order"), written as the add's output.
    QLinearAdd(QLinearAdd),
}

/// The constants of a fused QLinearAdd (`PostOp::QLinearAdd`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct QLinearAdd {
    /// `sa / sc`, `sb / sc` and `f32(zc) − (ra · f32(za) + rb · f32(zb))`, as onnxruntime forms
    /// them (the caller's).
    pub ra: f32,
    pub rb: f32,
    pub fixed: f32,
    /// Whether the layer's destination is the add's first operand `a` (else `b`).
    pub dst_is_a: bool,
    /// The add's integer bounds (its activation's), within the destination type.
    pub clamp: (i32, i32),
}

/// The float order in which an int8 contraction's accumulator is requantized (module doc).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Requantization {
    /// oneDNN's: `M·f32(acc − comp) + bias_f32`, post-ops, `/ scale_dst + zp`, round, saturate.
    #[default]
    OneDnn,
    /// onnxruntime's QLinearConv/QGemm/QLinearMatMul: `round(f32(acc − comp') · S) + zp`,
    /// optionally `max(·, zp)`, saturate; the i32 bias folded into `comp'`.
    OnnxRuntime,
}

/// The quantization attributes of an int8 convolution or dense layer (module doc).
#[derive(Clone, Debug, PartialEq)]
pub struct QuantAttrs {
    /// Per tensor (mask 0); the source dtype is u8 or s8.
    pub src: TensorQuant,
    /// Per tensor (mask 0) or per output channel (mask 1) over the weight dimensions.
    pub wei_scales: Scales,
    /// Per tensor (mask 0).
    pub dst: TensorQuant,
    /// u8, i8, i32 or f32.
    pub dst_dtype: DType,
    pub post_ops: Vec<PostOp>,
    /// The float order of the requantization.
    pub requantization: Requantization,
}

impl QuantAttrs {
    /// Per-tensor attributes without post-ops; each part validated.
    pub fn per_tensor(
        (src_scale, src_zp, src_dtype): (f32, i32, DType),
        wei_scale: f32,
        (dst_scale, dst_zp, dst_dtype): (f32, i32, DType),
    ) -> Result<QuantAttrs, QuantError> {
        Ok(QuantAttrs {
            src: TensorQuant::per_tensor("src", src_scale, src_zp, src_dtype)?,
            wei_scales: Scales::per_tensor("weights scale", wei_scale)?,
            dst: TensorQuant::per_tensor("dst", dst_scale, dst_zp, dst_dtype)?,
            dst_dtype,
            post_ops: Vec::new(),
            requantization: Requantization::OneDnn,
        })
    }
}

/// A parameter of an operator whose values are fixed when it is prepared (per-channel scales
/// or zero points): a placeholder of the operator's graph and the contents to bind to it.
#[derive(Clone, Debug)]
pub struct Param {
    pub tensor: Tensor,
    pub values: Array,
}

/// Collects the parameter tensors an operator's expressions read.
#[derive(Default, Debug)]
pub(crate) struct Params(pub Vec<Param>);

impl Params {
    /// `scales[mask index of indices]` as an f32 expression: a constant for mask 0, else a read
    /// of a new parameter tensor named `name`.
    pub fn scale(&mut self, s: &Scales, dims: &[i64], indices: &[Expr], name: &str) -> Expr {
        if s.mask == 0 {
            return Expr::float(DType::F32, s.values[0] as f64);
        }
        let values: Vec<f64> = s.values.iter().map(|&v| v as f64).collect();
        self.read(DType::F32, Array::from_f64(DType::F32, &[values.len() as i64], &values), s.mask, dims, indices, name)
    }

    /// `zero_points[mask index of indices]` as an i32 expression (constant for mask 0).
    pub fn zero_point(&mut self, z: &ZeroPoints, dims: &[i64], indices: &[Expr], name: &str) -> Expr {
        if z.mask == 0 {
            return Expr::int(DType::I32, z.values[0] as i64);
        }
        let values: Vec<i64> = z.values.iter().map(|&v| v as i64).collect();
        self.read(DType::I32, Array::from_i64(DType::I32, &[values.len() as i64], &values), z.mask, dims, indices, name)
    }

    /// `values[indices[0]]` as an f32 expression: a read of a new parameter tensor named `name`
    /// of one value per output channel (the first dimension of `dims`), even where they are all
    /// equal, so that the function does not depend on them.
    pub fn per_channel(&mut self, values: Vec<f32>, dims: &[i64], indices: &[Expr], name: &str) -> Expr {
        let values: Vec<f64> = values.iter().map(|&v| v as f64).collect();
        self.read(DType::F32, Array::from_f64(DType::F32, &[values.len() as i64], &values), 1, dims, indices, name)
    }

    /// One value of `dtype` (an integer type) as an expression: a read of a new one-element
    /// parameter tensor named `name`.
    pub fn scalar(&mut self, dtype: DType, value: i64, name: &str) -> Expr {
        self.read(dtype, Array::from_i64(dtype, &[1], &[value]), 0, &[], &[], name)
    }

    fn read(&mut self, dtype: DType, values: Array, mask: u32, dims: &[i64], indices: &[Expr], name: &str) -> Expr {
        // `check_mask` matched the length to a dimension of a checked (positive) shape.
        let tensor = placeholder_vec(vec![values.len() as i64], dtype, name)
            .expect("per-channel parameters have a positive length");
        let read = tensor.at_vec(vec![mask_index(mask, dims, indices)]);
        self.0.push(Param { tensor, values });
        read
    }
}

/// An f32 constant.
pub(crate) fn f32c(v: f32) -> Expr {
    Expr::float(DType::F32, v as f64)
}

/// Destination types of requantization.
pub(crate) const DST_TYPES: &str = "u8, i8, i32 or f32";

pub(crate) fn is_dst_type(d: DType) -> bool {
    [DType::U8, DType::I8, DType::I32, DType::F32].contains(&d)
}

/// Stores an f32 value `y` as `dtype`: unchanged for f32, else round half to even and saturate.
pub(crate) fn store_as(y: Expr, dtype: DType) -> Expr {
    if dtype == DType::F32 { y } else { y.round().saturating_cast(dtype) }
}

/// `post_ops(x) / scale_dst + f32(zp_dst)` stored as `dst_dtype` (module doc), for the element
/// at `indices` of an output of shape `dims`; `sum_input` is read by a `PostOp::Sum`.
pub(crate) fn finish(
    x: Expr,
    post_ops: &[PostOp],
    sum_input: Option<&Tensor>,
    indices: &[Expr],
    (dst_scale, dst_zp): (f32, i32),
    dst_dtype: DType,
) -> Expr {
    let mut x = x;
    for op in post_ops {
        x = match *op {
            // `x > 0 ? x : +0`: NaN and both zeros give +0 (as `max(x, 0)` would up to the sign
            // of zero), and the form is one `maxps`.
            PostOp::Relu => select(f32c(0.0).lt(&x), x, f32c(0.0)),
            // onnxruntime's order only (`check_layer_attrs` rejects it in this one).
            PostOp::QLinearAdd(_) => x,
            PostOp::Sum { scale, zero_point } => {
                let r = sum_input.expect("checked by check_post_ops").at_vec(indices.to_vec()).cast(DType::F32);
                x + f32c(scale) * (r - f32c(zero_point as f32))
            }
        };
    }
    let scaled = x / f32c(dst_scale);
    // Adding a zero zero point only turns -0 into +0, which an integer destination cannot tell
    // apart: skip it there (a float destination keeps the sign of zero as written).
    let shifted = if dst_zp == 0 && !dst_dtype.is_float() { scaled } else { scaled + f32c(dst_zp as f32) };
    store_as(shifted, dst_dtype)
}

/// onnxruntime's requantization of a centered accumulator (module doc): `centered` is the i32
/// `acc − comp'[c]`, `scale` the f32 `S[c]`, `zp` the f32 `f32(zp_dst)` and `lower` the f32
/// lower bound (`f32(zp_dst)` for a ReLU, else the lowest value of `dst_dtype`);
/// `max(round(f32(centered) · S) + zp, lower)`, saturated to `dst_dtype` (u8 or i8). The value
/// stored is integral, so the store's conversion (toward zero) is exact. The operands are
/// expressions so that a function can take them as arguments.
pub(crate) fn finish_onnxruntime(centered: Expr, scale: Expr, zp: Expr, lower: Expr, dst_dtype: DType) -> Expr {
    let q = (centered.cast(DType::F32) * scale).round() + zp;
    // `lower < q ? q : lower`: `max(q, lower)`, one `maxps`.
    select(lower.clone().lt(&q), q, lower).saturating_cast(dst_dtype)
}

/// onnxruntime's requantization followed by its QLinearAdd (module doc, "onnxruntime's order"):
/// `centered` and `scale` as `finish_onnxruntime` takes them, the destination's zero point and
/// lower bound as constants, `r` the sum input's element (`None` only for an unchecked
/// definition: the add then reads zero). The saturation of the destination is a clamp in f32,
/// exact on the integral `q`.
pub(crate) fn finish_qlinear_add(
    centered: Expr,
    scale: Expr,
    (zp, lower): (i32, f32),
    r: Option<Expr>,
    add: &QLinearAdd,
    dst_dtype: DType,
) -> Expr {
    let hi = dst_dtype.scalar.int_range().map_or(0, |(_, hi)| hi as i64);
    let q = (centered.cast(DType::F32) * scale).round() + f32c(zp as f32);
    let q = select(f32c(lower).lt(&q), q, f32c(lower));
    let q = select(q.clone().lt(f32c(hi as f32)), q, f32c(hi as f32));
    let r = r.map_or(f32c(0.0), |r| r.cast(DType::F32));
    let (a, b) = if add.dst_is_a { (q, r) } else { (r, q) };
    let c = a.fma(&f32c(add.ra), &b.fma(&f32c(add.rb), &f32c(add.fixed)));
    let (add_lo, add_hi) = (f32c(add.clamp.0 as f32), f32c(add.clamp.1 as f32));
    // `lo < c ? c : lo` where MLAS has `c >= lo ? c : lo` (and `<` for `<=` at `hi`): they
    // differ only where `c` equals the bound, a value that rounds to the same integer; the
    // strict forms are one `vmaxps`/`vminps` each in a map kernel.
    let c = select(add_lo.lt(&c), c, add_lo);
    // Past the `max` `c` is a number: at the type's top the saturation is the upper clamp.
    let c = if i64::from(add.clamp.1) >= hi { c } else { select(c.lt(&add_hi), c, add_hi) };
    c.round().saturating_cast(dst_dtype)
}

/// Checks post-ops and the sum input against an output of shape `dims`: at most one `Sum`, which
/// needs a sum input (u8, i8, i32 or f32) of exactly that shape whose zero point it can hold; a
/// sum input without a `Sum` is an error too.
pub(crate) fn check_post_ops(
    op: &str,
    post_ops: &[PostOp],
    sum_input: Option<&Tensor>,
    dims: &[i64],
) -> Result<(), QuantError> {
    let sums: Vec<(f32, i32)> = post_ops
        .iter()
        .filter_map(|p| match *p {
            PostOp::Sum { scale, zero_point } => Some((scale, zero_point)),
            PostOp::Relu | PostOp::QLinearAdd(_) => None,
        })
        .collect();
    let shape_error = |what: &str, expected: String, found: String| QuantError::Shape {
        op: op.to_string(),
        what: what.to_string(),
        expected,
        found,
    };
    let adds = post_ops.iter().filter(|p| matches!(p, PostOp::QLinearAdd(_))).count();
    match (sums.as_slice(), sum_input) {
        ([], None) if adds == 0 => Ok(()),
        ([], Some(r)) if adds == 1 => {
            if r.dtype() != DType::U8 && r.dtype() != DType::I8 {
                return Err(QuantError::DType {
                    op: op.to_string(),
                    what: "the sum input of a QLinearAdd".to_string(),
                    expected: "u8 or i8".to_string(),
                    found: r.dtype(),
                });
            }
            if r.shape() != dims {
                return Err(shape_error("the shape of the sum input", format!("{dims:?}"), format!("{:?}", r.shape())));
            }
            Ok(())
        }
        ([(scale, zero_point)], Some(r)) => {
            if !is_dst_type(r.dtype()) {
                return Err(QuantError::DType {
                    op: op.to_string(),
                    what: "the sum input".to_string(),
                    expected: DST_TYPES.to_string(),
                    found: r.dtype(),
                });
            }
            if r.shape() != dims {
                return Err(shape_error("the shape of the sum input", format!("{dims:?}"), format!("{:?}", r.shape())));
            }
            Scales::per_tensor("sum post-op scale", *scale)?;
            ZeroPoints::per_tensor("sum post-op zero point", *zero_point, r.dtype())?;
            Ok(())
        }
        (s, r) if adds > 0 => Err(shape_error(
            "the QLinearAdd post-ops and sum inputs",
            "one QLinearAdd, no Sum, one sum input".to_string(),
            format!("{adds} QLinearAdds, {} Sums and {} sum inputs", s.len(), r.is_some() as usize),
        )),
        (s, r) => Err(shape_error(
            "the sum post-ops and sum inputs",
            "as many sum inputs as sum post-ops, at most one".to_string(),
            format!("{} sum post-ops and {} sum inputs", s.len(), r.is_some() as usize),
        )),
    }
}

/// The per-tensor (scale, zero point) of an activation, checked for `dtype` and shape `dims`.
pub(crate) fn activation_quant(
    op: &str,
    arg: &str,
    q: &TensorQuant,
    dims: &[i64],
    dtype: DType,
) -> Result<(f32, i32), QuantError> {
    let per_tensor = q.require_per_tensor(op, arg)?;
    q.check(arg, dims, dtype)?;
    Ok(per_tensor)
}

/// The result of a standalone quantization operator.
#[derive(Clone, Debug)]
pub struct QuantOp {
    pub output: Tensor,
    /// Parameter tensors read by `output` (per-channel scales and zero points), with values.
    pub params: Vec<Param>,
}

fn require_dtype(op: &str, what: &str, found: DType, allowed: &[DType], expected: &str) -> Result<(), QuantError> {
    if allowed.contains(&found) {
        Ok(())
    } else {
        Err(QuantError::DType { op: op.to_string(), what: what.to_string(), expected: expected.to_string(), found })
    }
}

/// `dst = sat(round(x / scale + f32(zp)))` of an f32 tensor `x`, stored as `dtype` (u8, i8 or
/// i32); scales and zero points of any mask over `x`'s shape.
pub fn quantize(x: &Tensor, q: &TensorQuant, dtype: DType, name: &str) -> Result<QuantOp, QuantError> {
    let op = format!("quantize {name}");
    require_dtype(&op, "the source", x.dtype(), &[DType::F32], "f32")?;
    require_dtype(&op, "the destination", dtype, &[DType::U8, DType::I8, DType::I32], "u8, i8 or i32")?;
    q.check("quantize", x.shape(), dtype)?;
    let dims = x.shape().to_vec();
    let mut params = Params::default();
    let output = ir::te::compute_vec(
        dims.clone(),
        |i| {
            let scale = params.scale(&q.scales, &dims, i, &format!("{name}.scale"));
            let zp = params.zero_point(&q.zero_points, &dims, i, &format!("{name}.zero_point"));
            store_as(x.at_vec(i.to_vec()) / scale + zp.cast(DType::F32), dtype)
        },
        name,
    )?;
    Ok(QuantOp { output, params: params.0 })
}

/// `dst = scale · f32(i32(x) − zp)` of an integer tensor `x` (u8, i8 or i32), as f32.
pub fn dequantize(x: &Tensor, q: &TensorQuant, name: &str) -> Result<QuantOp, QuantError> {
    let op = format!("dequantize {name}");
    require_dtype(&op, "the source", x.dtype(), &[DType::U8, DType::I8, DType::I32], "u8, i8 or i32")?;
    q.check("dequantize", x.shape(), x.dtype())?;
    let dims = x.shape().to_vec();
    let mut params = Params::default();
    let output = ir::te::compute_vec(
        dims.clone(),
        |i| {
            let scale = params.scale(&q.scales, &dims, i, &format!("{name}.scale"));
            let zp = params.zero_point(&q.zero_points, &dims, i, &format!("{name}.zero_point"));
            scale * (x.at_vec(i.to_vec()).cast(DType::I32) - zp).cast(DType::F32)
        },
        name,
    )?;
    Ok(QuantOp { output, params: params.0 })
}

/// `dst = sat(round(scale_in · f32(i32(x) − zp_in) / scale_out + f32(zp_out)))`: from one
/// quantization of an integer tensor to another, stored as `dtype` (u8, i8, i32; f32 unrounded).
pub fn requantize(
    x: &Tensor,
    input: &TensorQuant,
    output_q: &TensorQuant,
    dtype: DType,
    name: &str,
) -> Result<QuantOp, QuantError> {
    let op = format!("requantize {name}");
    require_dtype(&op, "the source", x.dtype(), &[DType::U8, DType::I8, DType::I32], "u8, i8 or i32")?;
    require_dtype(&op, "the destination", dtype, &[DType::U8, DType::I8, DType::I32, DType::F32], DST_TYPES)?;
    input.check("requantize input", x.shape(), x.dtype())?;
    output_q.check("requantize output", x.shape(), dtype)?;
    let dims = x.shape().to_vec();
    let mut params = Params::default();
    let output = ir::te::compute_vec(
        dims.clone(),
        |i| {
            let s_in = params.scale(&input.scales, &dims, i, &format!("{name}.in_scale"));
            let z_in = params.zero_point(&input.zero_points, &dims, i, &format!("{name}.in_zero_point"));
            let s_out = params.scale(&output_q.scales, &dims, i, &format!("{name}.out_scale"));
            let z_out = params.zero_point(&output_q.zero_points, &dims, i, &format!("{name}.out_zero_point"));
            let real = s_in * (x.at_vec(i.to_vec()).cast(DType::I32) - z_in).cast(DType::F32);
            store_as(real / s_out + z_out.cast(DType::F32), dtype)
        },
        name,
    )?;
    Ok(QuantOp { output, params: params.0 })
}
