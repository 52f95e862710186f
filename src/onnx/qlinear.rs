//! The QOperator format's operators, each expressed in graph ops so that the graph's fusion
//! recovers the quantized operator (`Dequantize` of each quantized input, the float op,
//! `Quantize` of its output):
//!
//! | ONNX node | graph ops |
//! |---|---|
//! | `QLinearConv(x, xs, xz, w, ws, wz, ys, yz[, B])` | `Dequantize(x)`, `Dequantize(w)` (per channel along 0 when `ws` has one scale per output channel), `Dequantize(B)` (s32, scale `xs·ws[c]` in f32, zero point 0), `Convolution(x, w[, B])`, `Quantize(ys, yz)` |
//! | `QLinearMatMul(a, as, az, b, bs, bz, ys, yz)` | `Dequantize(a)`, `Dequantize(b)` (per column when `bs` has one scale per column), `MatMul`, `Quantize` |
//! | `com.microsoft.QGemm(A, as, az, B, bs, bz[, C][, ys, yz])` | `Dequantize(A)`, `Dequantize(B)` (per output column: axis 0 with `transB`, else 1), `MatMul(transA, transB)`, `BiasAdd(Dequantize(C))` (scale `as·bs[n]`), `Quantize` (absent `ys`: a float output, no `Quantize`); `alpha` must be 1 |
//! | `com.microsoft.QLinearAdd(A, as, az, B, bs, bz, cs, cz)` | `Dequantize(A)`, `Dequantize(B)`, `Add`, `Quantize` |
//! | `com.microsoft.QLinearGlobalAveragePool(X, xs, xz, ys, yz)` | `Dequantize`, `GlobalAveragePool`, `Quantize` (`channels_last = 0` only) |
//!
//! `MaxPool` on u8 and `QuantizeLinear`/`DequantizeLinear` need nothing special (`float_ops`,
//! `qdq`). The activations' scales and zero points are per tensor, as onnxruntime requires.

use crate::graph::{DataType, MatMulAttrs, OpKind};

use super::error::OnnxError;
use super::float_ops::{input_dims, transposes, unit_factor};
use super::geometry;
use super::import::Importer;
use super::node::Node;
use super::quant::{dequantize, dequantize_bias, quantize, scales};

/// Checks that each listed scale input has one element (per tensor).
fn per_tensor<'m>(
    im: &mut Importer<'m>,
    n: &Node<'m>,
    inputs: &[(usize, &'static str)],
) -> Result<Vec<f32>, OnnxError> {
    let mut out = Vec::new();
    for &(i, what) in inputs {
        let s = scales(im, n, i, what)?;
        if s.len() != 1 {
            return Err(OnnxError::Shape {
                node: n.r.clone(),
                what: what.into(),
                expected: "one element (per tensor)".into(),
                found: format!("{} elements", s.len()),
            });
        }
        out.push(s[0]);
    }
    Ok(out)
}

/// `QLinearConv` (table in the module doc).
pub fn conv<'m>(im: &mut Importer<'m>, n: &Node<'m>) -> Result<(), OnnxError> {
    im.single_output(n)?;
    let xs = per_tensor(im, n, &[(1, "x_scale"), (6, "y_scale")])?[0];
    let wdims = input_dims(im, n, 3, "w")?;
    if wdims.len() < 3 {
        return Err(OnnxError::Shape {
            node: n.r.clone(),
            what: "w".into(),
            expected: "rank 3 or more [OC, C/group, k..]".into(),
            found: format!("rank {}", wdims.len()),
        });
    }
    let attrs = geometry::conv(n, &wdims[2..])?;
    let x = dequantize(im, n, (0, 1, 2), 1, "dq_x")?;
    let w = dequantize(im, n, (3, 4, 5), 0, "dq_w")?;
    let mut inputs = vec![x, w];
    if n.input(8).is_some() {
        let bias_scales = scales(im, n, 4, "w_scale")?.iter().map(|&ws| xs * ws).collect();
        inputs.push(dequantize_bias(im, n, 8, bias_scales)?);
    }
    let y = im.apply(n, "conv", OpKind::Convolution(attrs), &inputs)?;
    let q = quantize(im, n, y, (6, 7), 1, DataType::U8, "")?;
    im.define(n, 0, q)
}

/// `QLinearMatMul` (table in the module doc).
pub fn matmul<'m>(im: &mut Importer<'m>, n: &Node<'m>) -> Result<(), OnnxError> {
    im.single_output(n)?;
    per_tensor(im, n, &[(1, "a_scale"), (6, "y_scale")])?;
    let a = dequantize(im, n, (0, 1, 2), 1, "dq_a")?;
    let b = dequantize(im, n, (3, 4, 5), -1, "dq_b")?;
    let y = im.apply(n, "matmul", OpKind::MatMul(MatMulAttrs::default()), &[a, b])?;
    let q = quantize(im, n, y, (6, 7), 1, DataType::U8, "")?;
    im.define(n, 0, q)
}

/// `com.microsoft.QGemm` (table in the module doc).
pub fn gemm<'m>(im: &mut Importer<'m>, n: &Node<'m>) -> Result<(), OnnxError> {
    im.single_output(n)?;
    unit_factor(n, "alpha")?;
    let attrs = transposes(n)?;
    let a_scale = per_tensor(im, n, &[(1, "a_scale")])?[0];
    let a = dequantize(im, n, (0, 1, 2), 1, "dq_a")?;
    let b = dequantize(im, n, (3, 4, 5), if attrs.transpose_b { 0 } else { 1 }, "dq_b")?;
    let mut y = im.apply(n, "matmul", OpKind::MatMul(attrs), &[a, b])?;
    if n.input(6).is_some() {
        let bias_scales = scales(im, n, 4, "b_scale")?.iter().map(|&bs| a_scale * bs).collect();
        let c = dequantize_bias(im, n, 6, bias_scales)?;
        y = im.apply(n, "bias_add", OpKind::BiasAdd(crate::graph::BiasAddAttrs { axis: 1 }), &[y, c])?;
    }
    if n.input(7).is_some() {
        per_tensor(im, n, &[(7, "y_scale")])?;
        y = quantize(im, n, y, (7, 8), 1, DataType::U8, "")?;
    }
    im.define(n, 0, y)
}

/// `com.microsoft.QLinearAdd` (table in the module doc).
pub fn add<'m>(im: &mut Importer<'m>, n: &Node<'m>) -> Result<(), OnnxError> {
    im.single_output(n)?;
    per_tensor(im, n, &[(1, "A_scale"), (4, "B_scale"), (6, "C_scale")])?;
    let a = dequantize(im, n, (0, 1, 2), 1, "dq_a")?;
    let b = dequantize(im, n, (3, 4, 5), 1, "dq_b")?;
    let y = im.apply(n, "add", OpKind::Add, &[a, b])?;
    let q = quantize(im, n, y, (6, 7), 1, DataType::U8, "")?;
    im.define(n, 0, q)
}

/// `com.microsoft.QLinearGlobalAveragePool` (table in the module doc).
pub fn global_average_pool<'m>(im: &mut Importer<'m>, n: &Node<'m>) -> Result<(), OnnxError> {
    im.single_output(n)?;
    if n.flag("channels_last", false)? {
        return Err(n.attr_err("channels_last", "0 (NCHW)", "1"));
    }
    per_tensor(im, n, &[(1, "x_scale"), (3, "y_scale")])?;
    let x = dequantize(im, n, (0, 1, 2), 1, "dq_x")?;
    let y = im.apply(n, "pool", OpKind::GlobalAveragePool, &[x])?;
    let q = quantize(im, n, y, (3, 4), 1, DataType::U8, "")?;
    im.define(n, 0, q)
}
