//! An int8 contraction of the catalog ending as the quantized layers end: its i32 accumulator
//! requantized to u8 by the layers' own stage (`ops::requantize_accumulator`) in the order the
//! resnet-18 table's layers and imported networks compute (onnxruntime's), so that the rules
//! schedule the same work as the `x86_conv` template's layer.

use ir::{DType, TeError};

use super::{Definition, MatmulDtype, OpSpec};
use crate::ops::{Requantized, requantize_accumulator};
use crate::quant::{QuantAttrs, QuantError, Requantization, Scales, TensorQuant};

/// The source scale of the requantized definitions (as the resnet-18 table's layers have one
/// per tensor).
const SRC_SCALE: f32 = 1.0 / 64.0;
/// The destination scale. The measurement's data (`tune::op_bench`) fill the i32 compensation
/// with values over the whole i32 range; with the weight scales (`weight_scale`) this makes
/// the per-channel scale `S[c]` between 0.75 and 1 times 2^-24, which maps them inside u8, so
/// that the bit-exact check compares rounded values rather than outputs all at the clamps.
const DST_SCALE: f32 = 2048.0;
/// The destination zero point: mid-range, as the table's layers have it.
const DST_ZERO_POINT: i32 = 128;

/// Weight scale of output channel `c`: 0.75, 0.875 or 1 times 2^-7 (per channel, as the
/// layers' weights are quantized).
fn weight_scale(c: i64) -> f32 {
    (6 + c % 3) as f32 / 8.0 / 128.0
}

/// The definition of `of` (a u8 `matmul` or a `conv2d`, whose output is the i32 accumulator
/// with the output channel last) followed by the layers' requantization in onnxruntime's order
/// (`quant::Requantization::OnnxRuntime`, what the table's layers and imported networks
/// compute): `u8 = sat(max(round(f32(acc − comp[oc]) · S[oc]) + zp, lower))`, the i32 bias
/// folded into the compensation. Its inputs are the accumulator's, then
/// `<out>.compensation: i32[OC]` and the per-channel `<out>.scale`, `<out>.zp` and
/// `<out>.lower` (f32[OC]), bound per call as the template binds them (the last three are
/// `Definition::params`, with their values); the weights stay the one constant. Operations:
/// the accumulator's.
pub fn requantized(of: &OpSpec) -> Result<Definition, TeError> {
    let weights_dims = |def: &Definition| -> Option<Vec<i64>> {
        match (of, def.inputs.get(1).map(|w| w.shape())) {
            // B: [K, N], the output channel is N.
            (OpSpec::Matmul { dtype: MatmulDtype::U8, .. }, Some(&[k, n])) => Some(vec![n, k]),
            // OHWI weights: the output channel first.
            (OpSpec::Conv2d { .. }, Some(dims)) => Some(dims.to_vec()),
            _ => None,
        }
    };
    let inner = of.build()?;
    let (Some(dims), [acc]) = (weights_dims(&inner), &inner.outputs[..]) else {
        return Err(TeError::ShapeMismatch {
            op: format!("requantized {}", of.label()),
            what: "the operator requantized".into(),
            expected: "a u8 x i8 matmul or an int8 conv2d (an i32 accumulator)".into(),
            found: of.label(),
        });
    };
    let quant_error = |e: QuantError| match e {
        QuantError::Te(e) => e,
        other => TeError::ShapeMismatch {
            op: format!("requantized {}", of.label()),
            what: "the requantization".into(),
            expected: "attributes the layers accept".into(),
            found: other.to_string(),
        },
    };
    let oc = dims[0];
    let attrs = QuantAttrs {
        src: TensorQuant::per_tensor("src", SRC_SCALE, 0, DType::U8).map_err(quant_error)?,
        // One multiplier per output channel (mask 1): a parameter tensor the call binds.
        wei_scales: Scales::new("weights scales", (0..oc).map(weight_scale).collect(), 1, &dims)
            .map_err(quant_error)?,
        dst: TensorQuant::per_tensor("dst", DST_SCALE, DST_ZERO_POINT, DType::U8).map_err(quant_error)?,
        dst_dtype: DType::U8,
        post_ops: Vec::new(),
        requantization: Requantization::OnnxRuntime,
    };
    let name = format!("{}.u8", acc.name());
    let Requantized { compensation, output, params } =
        requantize_accumulator(acc, &dims, None, None, &attrs, &name).map_err(quant_error)?;
    let mut inputs = inner.inputs.clone();
    inputs.push(compensation);
    inputs.extend(params.iter().map(|p| p.tensor.clone()));
    Ok(Definition { inputs, outputs: vec![output], constants: inner.constants, ops: inner.ops, params })
}
