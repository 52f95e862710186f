//! The window attributes of ONNX's Conv, QLinearConv, MaxPool and AveragePool (`kernel_shape`,
//! `strides`, `pads` as all begins then all ends, `dilations`, `group`, `auto_pad`, `ceil_mode`)
//! as the graph's typed attributes. Values the graph rejects (a zero stride, a negative pad)
//! pass through and become typed errors at the graph op; here only list lengths and the options
//! this importer does not implement are checked.

use crate::graph::{AvgPoolAttrs, ConvAttrs, MaxPoolAttrs};

use super::error::OnnxError;
use super::node::Node;

/// A list attribute with one entry per spatial dimension (`per` entries), or `default` repeated.
fn list(n: &Node<'_>, name: &str, spatial: usize, per: usize, default: i64) -> Result<Vec<i64>, OnnxError> {
    match n.ints(name)? {
        None => Ok(vec![default; spatial * per]),
        Some(v) if v.len() == spatial * per => Ok(v),
        Some(v) => Err(n.attr_err(name, format!("{} entries", spatial * per), format!("{} ({v:?})", v.len()))),
    }
}

/// `auto_pad` must be `NOTSET` (explicit `pads`) or `VALID` (no padding).
fn explicit_pads(n: &Node<'_>, spatial: usize) -> Result<(Vec<i64>, Vec<i64>), OnnxError> {
    match n.string("auto_pad")?.as_deref() {
        None | Some("NOTSET") => {}
        Some("VALID") => return Ok((vec![0; spatial], vec![0; spatial])),
        Some(other) => return Err(n.attr_err("auto_pad", "NOTSET or VALID", other)),
    }
    let pads = list(n, "pads", spatial, 2, 0)?;
    Ok((pads[..spatial].to_vec(), pads[spatial..].to_vec()))
}

/// A convolution's attributes, for weights of kernel size `kernel` (known dimensions only: a
/// `kernel_shape` attribute must agree with them).
pub fn conv(n: &Node<'_>, kernel: &[Option<usize>]) -> Result<ConvAttrs, OnnxError> {
    let spatial = kernel.len();
    if let Some(k) = n.ints("kernel_shape")? {
        let agrees = k.len() == spatial && k.iter().zip(kernel).all(|(&a, b)| b.is_none_or(|b| a == b as i64));
        if !agrees {
            return Err(n.attr_err(
                "kernel_shape",
                format!("the weights' spatial dimensions {kernel:?}"),
                format!("{k:?}"),
            ));
        }
    }
    let (pads_begin, pads_end) = explicit_pads(n, spatial)?;
    Ok(ConvAttrs {
        strides: list(n, "strides", spatial, 1, 1)?,
        pads_begin,
        pads_end,
        dilations: list(n, "dilations", spatial, 1, 1)?,
        groups: n.int("group", 1)?,
    })
}

/// The required `kernel_shape` of a pooling node.
fn kernel(n: &Node<'_>) -> Result<Vec<i64>, OnnxError> {
    match n.ints("kernel_shape")? {
        Some(k) if !k.is_empty() => Ok(k),
        Some(_) => Err(n.attr_err("kernel_shape", "one entry per spatial dimension", "an empty list")),
        None => Err(n.attr_err("kernel_shape", "present", "absent")),
    }
}

/// MaxPool's attributes (`storage_order` only matters to the `Indices` output, not made).
pub fn max_pool(n: &Node<'_>) -> Result<MaxPoolAttrs, OnnxError> {
    let kernel = kernel(n)?;
    let spatial = kernel.len();
    let (pads_begin, pads_end) = explicit_pads(n, spatial)?;
    Ok(MaxPoolAttrs {
        strides: list(n, "strides", spatial, 1, 1)?,
        dilations: list(n, "dilations", spatial, 1, 1)?,
        ceil_mode: n.flag("ceil_mode", false)?,
        kernel,
        pads_begin,
        pads_end,
    })
}

/// AveragePool's attributes; `dilations` (opset 19) must be all 1.
pub fn avg_pool(n: &Node<'_>) -> Result<AvgPoolAttrs, OnnxError> {
    let kernel = kernel(n)?;
    let spatial = kernel.len();
    let dilations = list(n, "dilations", spatial, 1, 1)?;
    if dilations.iter().any(|&d| d != 1) {
        return Err(n.attr_err("dilations", "all 1", format!("{dilations:?}")));
    }
    let (pads_begin, pads_end) = explicit_pads(n, spatial)?;
    Ok(AvgPoolAttrs {
        strides: list(n, "strides", spatial, 1, 1)?,
        ceil_mode: n.flag("ceil_mode", false)?,
        count_include_pad: n.flag("count_include_pad", false)?,
        kernel,
        pads_begin,
        pads_end,
    })
}
