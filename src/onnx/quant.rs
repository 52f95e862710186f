//! Scales and zero points (constant inputs of the quantized operators) as the graph's
//! `QuantParams`, and the `Dequantize`/`Quantize` graph ops made from them. A scale of one
//! element (rank 0 or 1) is per tensor, as onnxruntime treats it; a longer one is per channel
//! along `axis`. A zero point has the integer type of the quantized tensor and as many elements
//! as the scale; an absent one is 0 (of type u8 where it decides a type).

use crate::graph::{Data, DataType, OpKind, QuantParams, QuantizeAttrs, TensorId};

use super::error::OnnxError;
use super::float_ops::f32_data;
use super::import::Importer;
use super::node::Node;
use super::tensor::Constant;

/// The f32 scales of constant input `i` (rank 0 or 1, at least one element).
pub fn scales<'m>(im: &mut Importer<'m>, n: &Node<'m>, i: usize, what: &'static str) -> Result<Vec<f32>, OnnxError> {
    let c = im.constant(n, i, what)?;
    let (dims, v) = f32_data(n, &c, what)?;
    if dims.len() > 1 || v.is_empty() {
        return Err(OnnxError::Shape {
            node: n.r.clone(),
            what: what.into(),
            expected: "a scalar or a 1-D list".into(),
            found: format!("{dims:?}"),
        });
    }
    Ok(v.to_vec())
}

/// The zero points of input `i` (absent: none) with their type.
fn zero_points<'m>(
    im: &mut Importer<'m>,
    n: &Node<'m>,
    i: usize,
    what: &'static str,
) -> Result<Option<(Vec<i32>, DataType)>, OnnxError> {
    let Some(c) = im.opt_constant(n, i, what)? else { return Ok(None) };
    let dtype_err = |found: String| OnnxError::DType {
        node: n.r.clone(),
        what: what.into(),
        expected: "u8, s8 or s32".into(),
        found,
    };
    let Constant::Value(v) = &*c else { return Err(dtype_err(c.dtype_name().into())) };
    if v.dims().len() > 1 {
        return Err(OnnxError::Shape {
            node: n.r.clone(),
            what: what.into(),
            expected: "a scalar or a 1-D list".into(),
            found: format!("{:?}", v.dims()),
        });
    }
    match v.data() {
        Data::U8(_) | Data::S8(_) | Data::S32(_) => Ok(Some((v.data().to_i32().unwrap_or_default(), v.dtype()))),
        d => Err(dtype_err(d.dtype().to_string())),
    }
}

/// The quantization parameters of scale input `scale_i` and zero-point input `zp_i` for a
/// tensor of rank `rank` (per channel along `axis` when the scale has more than one element),
/// and the zero points' type if given.
pub fn params<'m>(
    im: &mut Importer<'m>,
    n: &Node<'m>,
    scale_i: usize,
    zp_i: usize,
    rank: usize,
    axis: i64,
) -> Result<(QuantParams, Option<DataType>), OnnxError> {
    let scales = scales(im, n, scale_i, "scale")?;
    let zp = zero_points(im, n, zp_i, "zero point")?;
    let (zero_points, dtype) = match zp {
        Some((z, dtype)) => (z, Some(dtype)),
        None => (vec![0; scales.len()], None),
    };
    if zero_points.len() != scales.len() {
        return Err(OnnxError::Shape {
            node: n.r.clone(),
            what: "zero point".into(),
            expected: format!("{} elements, as the scale", scales.len()),
            found: zero_points.len().to_string(),
        });
    }
    let axis = if scales.len() == 1 {
        None
    } else {
        let r = rank as i64;
        if !(-r..r).contains(&axis) {
            return Err(n.attr_err("axis", format!("in {}..{r}", -r), axis.to_string()));
        }
        Some(if axis < 0 { axis + r } else { axis })
    };
    Ok((QuantParams { scales, zero_points, axis }, dtype))
}

/// `Dequantize` of input `x_i` (u8, s8 or s32) with the scale and zero point of inputs
/// `scale_i`, `zp_i`; the zero point's type must be the input's.
pub fn dequantize<'m>(
    im: &mut Importer<'m>,
    n: &Node<'m>,
    (x_i, scale_i, zp_i): (usize, usize, usize),
    axis: i64,
    suffix: &str,
) -> Result<TensorId, OnnxError> {
    let x = im.tensor(n, x_i, "quantized input")?;
    let (dtype, dims) = im.describe(n, x)?;
    if !matches!(dtype, DataType::U8 | DataType::S8 | DataType::S32) {
        return Err(OnnxError::DType {
            node: n.r.clone(),
            what: format!("input {x_i}"),
            expected: "u8, s8 or s32".into(),
            found: dtype.to_string(),
        });
    }
    let (params, zp_dtype) = params(im, n, scale_i, zp_i, dims.len(), axis)?;
    if let Some(z) = zp_dtype.filter(|&z| z != dtype) {
        return Err(OnnxError::DType {
            node: n.r.clone(),
            what: format!("zero point (input {zp_i})"),
            expected: format!("{dtype}, the type of input {x_i}"),
            found: z.to_string(),
        });
    }
    im.apply(n, suffix, OpKind::Dequantize(params), &[x])
}

/// `Quantize` of `x` (f32) with the scale and zero point of inputs `scale_i`, `zp_i`, into the
/// zero point's type (`default` without one).
pub fn quantize<'m>(
    im: &mut Importer<'m>,
    n: &Node<'m>,
    x: TensorId,
    (scale_i, zp_i): (usize, usize),
    axis: i64,
    default: DataType,
    suffix: &str,
) -> Result<TensorId, OnnxError> {
    let (_, dims) = im.describe(n, x)?;
    let (params, zp_dtype) = params(im, n, scale_i, zp_i, dims.len(), axis)?;
    let dtype = zp_dtype.unwrap_or(default);
    if !dtype.is_int8() {
        return Err(OnnxError::DType {
            node: n.r.clone(),
            what: format!("zero point (input {zp_i})"),
            expected: "u8 or s8".into(),
            found: dtype.to_string(),
        });
    }
    im.apply(n, suffix, OpKind::Quantize(QuantizeAttrs { params, dtype }), &[x])
}

/// `Dequantize` of an s32 bias (input `i`, shape `[C]`) with zero point 0 and the given scales
/// (one, or one per channel along axis 0).
pub fn dequantize_bias<'m>(
    im: &mut Importer<'m>,
    n: &Node<'m>,
    i: usize,
    scales: Vec<f32>,
) -> Result<TensorId, OnnxError> {
    let b = im.tensor(n, i, "bias")?;
    let (dtype, dims) = im.describe(n, b)?;
    if dtype != DataType::S32 {
        return Err(OnnxError::DType {
            node: n.r.clone(),
            what: format!("bias (input {i})"),
            expected: "s32".into(),
            found: dtype.to_string(),
        });
    }
    if dims.len() != 1 {
        return Err(OnnxError::Shape {
            node: n.r.clone(),
            what: format!("bias (input {i})"),
            expected: "rank 1".into(),
            found: format!("{dims:?}"),
        });
    }
    let params =
        if scales.len() == 1 { QuantParams::per_tensor(scales[0], 0) } else { QuantParams::per_channel(0, scales) };
    im.apply(n, "dq_bias", OpKind::Dequantize(params), &[b])
}
