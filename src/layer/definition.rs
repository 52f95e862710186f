//! `Definition`: a table layer as the operator library defines it (`ops::conv2d_nchw_int8` or
//! `ops::dense_int8` with the table's quantization), with its weight preparation
//! (`ops::compensation`). Its workload key is what tuning records name (`tune::workload`); the
//! layer runs as a one-partition graph (`engine::TableGraph`), not from this definition.

use ir::DType;
use ir::te::{Tensor as TeTensor, placeholder_vec};
use ir::workload::{WorkloadKey, workload_key};
use schedules::ops::{Compensation, Conv2dParams, QuantizedLayer, compensation, conv2d_nchw_int8, dense_int8};
use schedules::quant::QuantError;
use schedules::resnet18::{Layer, LayerQuant};

/// A table layer's definition on placeholders of the data's shapes (`LayerData`).
#[derive(Clone, Debug)]
pub struct Definition {
    /// The operator family: `conv2d_int8` or `dense_int8`.
    pub op: &'static str,
    pub src: TeTensor,
    pub wei: TeTensor,
    pub bias: TeTensor,
    /// The per-call stages; `layer.output` is the result.
    pub layer: QuantizedLayer,
    /// The weight preparation: `prep.compensation` is what `layer.compensation` is bound to.
    pub prep: Compensation,
}

impl Definition {
    /// `layer` defined with `quant` (`LayerData::quantization`), named after the layer.
    pub fn new(layer: Layer, quant: &LayerQuant) -> Result<Definition, QuantError> {
        let name = layer.name();
        let src = placeholder_vec(quant.src_dims.clone(), DType::U8, "src")?;
        let wei = placeholder_vec(quant.wei_dims.clone(), DType::I8, "weights")?;
        let bias = placeholder_vec(vec![quant.wei_dims[0]], DType::F32, "bias")?;
        let (op, def) = match layer {
            Layer::Conv(c) => {
                let conv = Conv2dParams { stride: c.stride, pad: c.pad };
                ("conv2d_int8", conv2d_nchw_int8(&src, &wei, Some(&bias), None, conv, &quant.attrs, name)?)
            }
            Layer::Dense(_) => ("dense_int8", dense_int8(&src, &wei, Some(&bias), None, &quant.attrs, name)?),
        };
        let prep = compensation(&wei, DType::U8, &quant.attrs.src.zero_points, &format!("{name}.prep"))?;
        Ok(Definition { op, src, wei, bias, layer: def, prep })
    }

    /// The per-call function's parameters: source, weights, compensation, bias, per-channel
    /// multipliers, output.
    pub fn args(&self) -> Vec<&TeTensor> {
        let mut args = vec![&self.src, &self.wei, &self.layer.compensation, &self.bias];
        args.extend(self.layer.params.iter().map(|p| &p.tensor));
        args.push(&self.layer.output);
        args
    }

    /// The workload key of the definition (independent of how it is scheduled).
    pub fn key(&self) -> WorkloadKey {
        workload_key(&[&self.layer.output])
    }
}
