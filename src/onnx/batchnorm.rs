//! Folding an inference-mode `BatchNormalization` into the `Conv` before it, at import, so that
//! the graph has one convolution with new constant weights and bias (onnxruntime's optimizer does
//! the same, and its quantizer's pre-processing folds before quantizing).
//!
//! With `γ = scale`, `β = B`, `μ = mean`, `σ² = var`, `ε = epsilon` and the Conv's `W`, `b`
//! (`b = 0` without a bias), for each output channel `c`, in f32, each operation rounded once:
//!
//! ```text
//! s[c]          = γ[c] / sqrt(σ²[c] + ε)
//! W'[c, ...]    = W[c, ...] · s[c]
//! b'[c]         = (b[c] − μ[c]) · s[c] + β[c]
//! ```
//!
//! (`sqrt` is IEEE's correctly rounded square root.) The folded network is not bit-identical
//! to evaluating Conv then BatchNormalization: the scaling moves before the sum.

use crate::graph::Value;

use super::error::OnnxError;
use super::float_ops::f32_data;
use super::import::Importer;
use super::node::Node;

/// A folded convolution: the new weights and bias, and the index of the folded BatchNormalization.
pub struct Folded {
    pub weights: Value,
    pub bias: Value,
    pub node: usize,
}

/// Folds the BatchNormalization that alone reads `conv`'s output, if there is one and `conv`'s
/// weights and bias are f32 constants; `None` when there is nothing to fold.
pub fn fold_after<'m>(im: &mut Importer<'m>, conv: &Node<'m>) -> Result<Option<Folded>, OnnxError> {
    let Some(out) = conv.output(0) else { return Ok(None) };
    let Some(index) = im.only_consumer(out) else { return Ok(None) };
    let nodes = im.nodes;
    let bn = Node::new(index, &nodes[index]);
    if !matches!(bn.proto.domain(), "" | "ai.onnx")
        || bn.proto.op_type() != "BatchNormalization"
        || bn.input(0) != Some(out)
    {
        return Ok(None);
    }
    let Some(w) = im.constant_if_any(conv, 1)? else { return Ok(None) };
    let b = match conv.input(2) {
        None => None,
        Some(_) => match im.constant_if_any(conv, 2)? {
            Some(b) => Some(b),
            None => return Ok(None),
        },
    };
    if bn.flag("training_mode", false)? {
        return Err(bn.attr_err("training_mode", "0 (inference)", "1"));
    }
    im.single_output(&bn)?;
    let eps = bn.float("epsilon", 1e-5)?;
    let (wdims, w) = f32_data(conv, &w, "W")?;
    let oc = wdims.first().copied().unwrap_or(0);
    let per_channel = |what: &'static str, i: usize, im: &mut Importer<'m>| -> Result<Vec<f32>, OnnxError> {
        let c = im.constant(&bn, i, what)?;
        let (dims, v) = f32_data(&bn, &c, what)?;
        if dims != [oc] {
            return Err(OnnxError::Shape {
                node: bn.r.clone(),
                what: what.into(),
                expected: format!("[{oc}]"),
                found: format!("{dims:?}"),
            });
        }
        Ok(v.to_vec())
    };
    let gamma = per_channel("scale", 1, im)?;
    let beta = per_channel("B", 2, im)?;
    let mean = per_channel("input_mean", 3, im)?;
    let var = per_channel("input_var", 4, im)?;
    let bias = match &b {
        Some(b) => {
            let (dims, v) = f32_data(conv, b, "B")?;
            if dims != [oc] {
                return Err(OnnxError::Shape {
                    node: conv.r.clone(),
                    what: "B".into(),
                    expected: format!("[{oc}]"),
                    found: format!("{dims:?}"),
                });
            }
            v.to_vec()
        }
        None => vec![0.0; oc],
    };
    let s: Vec<f32> = (0..oc).map(|c| gamma[c] / (var[c] + eps).sqrt()).collect();
    let per = w.len().checked_div(oc).unwrap_or(0);
    let weights: Vec<f32> = w.iter().enumerate().map(|(i, &x)| x * s[i / per.max(1)]).collect();
    let bias: Vec<f32> = (0..oc).map(|c| (bias[c] - mean[c]) * s[c] + beta[c]).collect();
    let weights = Value::f32(wdims, weights).map_err(|e| conv.unsupported(e.to_string()))?;
    let bias = Value::f32(&[oc], bias).map_err(|e| conv.unsupported(e.to_string()))?;
    Ok(Some(Folded { weights, bias, node: index }))
}
