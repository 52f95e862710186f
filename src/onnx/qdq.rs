//! The QDQ format's two operators: `DequantizeLinear` → `Dequantize` and `QuantizeLinear` →
//! `Quantize`, per tensor or per axis (`axis`, default 1); blocked quantization (`block_size`,
//! opset 21) is not supported.

use crate::graph::DataType;

use super::error::OnnxError;
use super::import::Importer;
use super::node::Node;
use super::quant::{dequantize, quantize};
use super::tensor::graph_dtype;

/// `block_size` must be absent or 0.
fn no_blocks(n: &Node<'_>) -> Result<(), OnnxError> {
    match n.int("block_size", 0)? {
        0 => Ok(()),
        b => Err(n.attr_err("block_size", "0 (blocked quantization is not supported)", b.to_string())),
    }
}

/// `DequantizeLinear(x, x_scale[, x_zero_point])` → `Dequantize`.
pub fn dequantize_linear<'m>(im: &mut Importer<'m>, n: &Node<'m>) -> Result<(), OnnxError> {
    no_blocks(n)?;
    im.single_output(n)?;
    let y = dequantize(im, n, (0, 1, 2), n.int("axis", 1)?, "")?;
    im.define(n, 0, y)
}

/// `QuantizeLinear(x, y_scale[, y_zero_point])` → `Quantize` into the zero point's type (or
/// `output_dtype`, opset 21; u8 without either).
pub fn quantize_linear<'m>(im: &mut Importer<'m>, n: &Node<'m>) -> Result<(), OnnxError> {
    no_blocks(n)?;
    im.single_output(n)?;
    let default = match n.int("output_dtype", 0)? {
        0 => DataType::U8,
        code => i32::try_from(code)
            .ok()
            .and_then(graph_dtype)
            .filter(|d| d.is_int8())
            .ok_or_else(|| n.attr_err("output_dtype", "u8 or s8 (2 or 3)", code.to_string()))?,
    };
    if n.int("output_dtype", 0)? != 0
        && let Some(zp) = im.constant_if_any(n, 2)?
        && zp.dtype_name() != default.name()
    {
        let found = zp.dtype_name().to_string();
        return Err(OnnxError::DType {
            node: n.r.clone(),
            what: "y_zero_point".into(),
            expected: format!("{default}, as `output_dtype`"),
            found,
        });
    }
    let x = im.tensor(n, 0, "x")?;
    let y = quantize(im, n, x, (1, 2), n.int("axis", 1)?, default, "")?;
    im.define(n, 0, y)
}
