//! The float operators, each onto the graph op of the same meaning (the graph's `OpKind` states
//! the semantics): Conv (with a following BatchNormalization folded in, `batchnorm`), Relu,
//! Clip, Add, MaxPool, AveragePool, GlobalAveragePool, Flatten and Reshape (as `StaticReshape`),
//! Gemm and MatMul (as `MatMul`, Gemm's bias as `BiasAdd`). In QDQ models the same operators
//! read the outputs of DequantizeLinear nodes; the graph's partitioning fuses them.

use std::sync::Arc;

use crate::graph::{BiasAddAttrs, ClipAttrs, Data, MatMulAttrs, OpKind, ReshapeAttrs, TensorId, Value};

use super::batchnorm;
use super::error::OnnxError;
use super::geometry;
use super::import::Importer;
use super::node::Node;
use super::tensor::Constant;

/// The dimensions of input `i` (a constant's or a graph tensor's; `None` where unknown).
pub fn input_dims<'m>(
    im: &mut Importer<'m>,
    n: &Node<'m>,
    i: usize,
    what: &'static str,
) -> Result<Vec<Option<usize>>, OnnxError> {
    let t = im.tensor(n, i, what)?;
    Ok(im.describe(n, t)?.1)
}

/// `Conv` → `Convolution(X, W[, B])`; a BatchNormalization that alone reads its output is
/// folded into constant weights (`batchnorm::fold`) and the pair imported as one convolution.
pub fn conv<'m>(im: &mut Importer<'m>, n: &Node<'m>) -> Result<(), OnnxError> {
    im.single_output(n)?;
    let x = im.tensor(n, 0, "X")?;
    let wdims = input_dims(im, n, 1, "W")?;
    if wdims.len() < 3 {
        return Err(OnnxError::Shape {
            node: n.r.clone(),
            what: "W".into(),
            expected: "rank 3 or more [OC, C/group, k..]".into(),
            found: format!("rank {}", wdims.len()),
        });
    }
    let attrs = geometry::conv(n, &wdims[2..])?;
    if let Some(folded) = batchnorm::fold_after(im, n)? {
        let w = im.new_constant(n, "folded_weight", folded.weights);
        let b = im.new_constant(n, "folded_bias", folded.bias);
        let y = im.apply(n, "", OpKind::Convolution(attrs), &[x, w, b])?;
        let bn = Node::new(folded.node, &im.nodes[folded.node]);
        im.folded.insert(folded.node);
        return im.define(&bn, 0, y);
    }
    let w = im.tensor(n, 1, "W")?;
    let mut inputs = vec![x, w];
    inputs.extend(im.opt_tensor(n, 2, "B")?);
    let y = im.apply(n, "", OpKind::Convolution(attrs), &inputs)?;
    im.define(n, 0, y)
}

/// A one-input op.
pub fn unary<'m>(im: &mut Importer<'m>, n: &Node<'m>, kind: OpKind) -> Result<(), OnnxError> {
    im.single_output(n)?;
    let x = im.tensor(n, 0, "X")?;
    let y = im.apply(n, "", kind, &[x])?;
    im.define(n, 0, y)
}

/// A scalar f32 constant (rank 0, or one element).
fn scalar(n: &Node<'_>, c: &Arc<Constant>, what: &str) -> Result<f32, OnnxError> {
    match f32_data(n, c, what)? {
        (dims, [x]) if dims.len() <= 1 => Ok(*x),
        (dims, _) => Err(OnnxError::Shape {
            node: n.r.clone(),
            what: what.into(),
            expected: "a scalar".into(),
            found: format!("{dims:?}"),
        }),
    }
}

/// `Clip(X[, min][, max])` (bounds as constant inputs, since opset 11) → `Clip`; an absent bound
/// is −∞ or +∞.
pub fn clip<'m>(im: &mut Importer<'m>, n: &Node<'m>) -> Result<(), OnnxError> {
    let min = match im.opt_constant(n, 1, "min")? {
        Some(c) => scalar(n, &c, "min")?,
        None => f32::NEG_INFINITY,
    };
    let max = match im.opt_constant(n, 2, "max")? {
        Some(c) => scalar(n, &c, "max")?,
        None => f32::INFINITY,
    };
    unary(im, n, OpKind::Clip(ClipAttrs { min, max }))
}

/// `Add(A, B)` → `Add` (numpy broadcasting).
pub fn add<'m>(im: &mut Importer<'m>, n: &Node<'m>) -> Result<(), OnnxError> {
    let a = im.tensor(n, 0, "A")?;
    let b = im.tensor(n, 1, "B")?;
    let y = im.apply(n, "", OpKind::Add, &[a, b])?;
    im.define(n, 0, y)
}

/// `MaxPool` → `MaxPool` (float, u8 or s8; the `Indices` output is not supported).
pub fn max_pool<'m>(im: &mut Importer<'m>, n: &Node<'m>) -> Result<(), OnnxError> {
    let attrs = geometry::max_pool(n)?;
    unary(im, n, OpKind::MaxPool(attrs))
}

/// `AveragePool` → `AvgPool`.
pub fn avg_pool<'m>(im: &mut Importer<'m>, n: &Node<'m>) -> Result<(), OnnxError> {
    let attrs = geometry::avg_pool(n)?;
    unary(im, n, OpKind::AvgPool(attrs))
}

/// `Flatten(axis)` → `StaticReshape` to `[d0·..·d(axis−1), −1]` (`[0, −1]` for axis 1 when
/// the batch dimension is unknown).
pub fn flatten<'m>(im: &mut Importer<'m>, n: &Node<'m>) -> Result<(), OnnxError> {
    let dims = input_dims(im, n, 0, "input")?;
    let rank = dims.len() as i64;
    let axis = n.int("axis", 1)?;
    if !(-rank..=rank).contains(&axis) {
        return Err(n.attr_err("axis", format!("in {}..={rank}", -rank), axis.to_string()));
    }
    let axis = if axis < 0 { axis + rank } else { axis } as usize;
    let outer: Option<usize> = dims[..axis].iter().try_fold(1usize, |a, d| d.and_then(|d| a.checked_mul(d)));
    let shape = match outer {
        Some(outer) => vec![outer as i64, -1],
        None if axis == 1 => vec![0, -1],
        None => return Err(n.unsupported(format!("Flatten at axis {axis} of dimensions {dims:?}, some unknown"))),
    };
    unary(im, n, OpKind::StaticReshape(ReshapeAttrs { shape }))
}

/// `Reshape(data, shape)` with a constant `shape` → `StaticReshape`; `allowzero = 1` only
/// without zeros in `shape` (where it means the same).
pub fn reshape<'m>(im: &mut Importer<'m>, n: &Node<'m>) -> Result<(), OnnxError> {
    let c = im.constant(n, 1, "shape")?;
    let Constant::I64 { dims, data } = &*c else {
        return Err(OnnxError::DType {
            node: n.r.clone(),
            what: "shape".into(),
            expected: "i64".into(),
            found: c.dtype_name().into(),
        });
    };
    if dims.len() != 1 {
        return Err(OnnxError::Shape {
            node: n.r.clone(),
            what: "shape".into(),
            expected: "rank 1".into(),
            found: format!("{dims:?}"),
        });
    }
    if n.flag("allowzero", false)? && data.contains(&0) {
        return Err(n.attr_err("allowzero", "0 when `shape` has a 0", "1"));
    }
    let shape = data.clone();
    im.single_output(n)?;
    let x = im.tensor(n, 0, "data")?;
    let y = im.apply(n, "", OpKind::StaticReshape(ReshapeAttrs { shape }), &[x])?;
    im.define(n, 0, y)
}

/// Gemm's and QGemm's `alpha` (and Gemm's `beta`): only 1.0.
pub fn unit_factor(n: &Node<'_>, name: &str) -> Result<(), OnnxError> {
    let v = n.float(name, 1.0)?;
    if v != 1.0 {
        return Err(n.attr_err(name, "1.0 (other factors are not supported)", v.to_string()));
    }
    Ok(())
}

/// The `transA`/`transB` flags as `MatMul` attributes.
pub fn transposes(n: &Node<'_>) -> Result<MatMulAttrs, OnnxError> {
    Ok(MatMulAttrs { transpose_a: n.flag("transA", false)?, transpose_b: n.flag("transB", false)? })
}

/// Adds a bias to a matrix product `y: [M, N]`: a tensor of shape `[N]` (or a constant of
/// shape `[1, N]`, read as `[N]`) as `BiasAdd` along axis 1, anything else as a broadcasting
/// `Add`.
pub fn add_bias<'m>(im: &mut Importer<'m>, n: &Node<'m>, y: TensorId, c_index: usize) -> Result<TensorId, OnnxError> {
    if let Some(c) = im.constant_if_any(n, c_index)?
        && let Constant::Value(v) = &*c
        && let [1, len] = *v.dims()
    {
        let row = Value::new(&[len], v.data().clone()).map_err(|e| n.unsupported(e.to_string()))?;
        let b = im.new_constant(n, "bias", row);
        return im.apply(n, "bias_add", OpKind::BiasAdd(BiasAddAttrs { axis: 1 }), &[y, b]);
    }
    let c = im.tensor(n, c_index, "C")?;
    if im.describe(n, c)?.1.len() == 1 {
        return im.apply(n, "bias_add", OpKind::BiasAdd(BiasAddAttrs { axis: 1 }), &[y, c]);
    }
    im.apply(n, "add", OpKind::Add, &[y, c])
}

/// `Gemm(A, B[, C])` → `MatMul(transA, transB)` then the bias (`add_bias`); `alpha` and `beta`
/// must be 1.0.
pub fn gemm<'m>(im: &mut Importer<'m>, n: &Node<'m>) -> Result<(), OnnxError> {
    im.single_output(n)?;
    unit_factor(n, "alpha")?;
    if n.input(2).is_some() {
        unit_factor(n, "beta")?;
    }
    let a = im.tensor(n, 0, "A")?;
    let b = im.tensor(n, 1, "B")?;
    let mut y = im.apply(n, "", OpKind::MatMul(transposes(n)?), &[a, b])?;
    if n.input(2).is_some() {
        y = add_bias(im, n, y, 2)?;
    }
    im.define(n, 0, y)
}

/// `MatMul(A, B)` → `MatMul`.
pub fn matmul<'m>(im: &mut Importer<'m>, n: &Node<'m>) -> Result<(), OnnxError> {
    im.single_output(n)?;
    let a = im.tensor(n, 0, "A")?;
    let b = im.tensor(n, 1, "B")?;
    let y = im.apply(n, "", OpKind::MatMul(MatMulAttrs::default()), &[a, b])?;
    im.define(n, 0, y)
}

/// A constant's f32 data with its dimensions, or a typed error naming `what`.
pub fn f32_data<'c>(n: &Node<'_>, c: &'c Arc<Constant>, what: &str) -> Result<(&'c [usize], &'c [f32]), OnnxError> {
    match &**c {
        Constant::Value(v) => match v.data() {
            Data::F32(x) => Ok((v.dims(), x)),
            d => Err(OnnxError::DType {
                node: n.r.clone(),
                what: what.into(),
                expected: "f32".into(),
                found: d.dtype().to_string(),
            }),
        },
        c => Err(OnnxError::DType {
            node: n.r.clone(),
            what: what.into(),
            expected: "f32".into(),
            found: c.dtype_name().into(),
        }),
    }
}
