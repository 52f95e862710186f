//! `LayerData`: a table layer's data, the same in every command that runs it and in
//! `scripts/peers/layers.py`: u8 source (zero point 128), s8 weights in the range of
//! `WeightBits` with per-output-channel scales, an i32 bias (`LayerQuant::bias_q`), u8 output,
//! relu off
//! (`resnet18::quantization`), drawn from seeds that follow the layer's position in the table,
//! so that a layer gets the same data whether it runs alone or with the others.

use ir::DType;
use ir::interp::Array;
use schedules::resnet18::{self, Layer, LayerQuant, WeightBits, uniform};
use schedules::x86_conv::weight_range;

use super::error::{LayerError, NotInTable};

/// A table layer's inputs and quantization, in the definition's layouts.
#[derive(Clone, Debug)]
pub struct LayerData {
    pub layer: Layer,
    pub weights: WeightBits,
    pub quant: LayerQuant,
    /// u8 `[1, IC, H, W]` (NCHW; the dense layer's `[1, IC]`).
    pub src: Array,
    /// i8 `[OC, IC, KH, KW]` (the dense layer's `[OC, IC]`), in `weights`' range.
    pub wei: Array,
    /// The smallest and largest weight: the range the x86 kernels may rely on
    /// (`Conv2dInt8Knobs::operands`).
    pub range: (i8, i8),
}

impl LayerData {
    /// The seed of `layer`'s data: `1000 · (position + 1)` for its position in the table.
    pub fn seed(layer: Layer) -> Result<u64, NotInTable> {
        let position = resnet18::layers()
            .iter()
            .position(|l| *l == layer)
            .ok_or_else(|| NotInTable { found: format!("{layer:?}") })?;
        Ok(1000 * (position as u64 + 1))
    }

    /// `layer`'s quantization (`resnet18::quantization` from its seed).
    pub fn quantization(layer: Layer) -> Result<LayerQuant, LayerError> {
        Ok(resnet18::quantization(layer, LayerData::seed(layer)?)?)
    }

    /// `layer`'s data with weights drawn in `weights`' range.
    pub fn new(layer: Layer, weights: WeightBits) -> Result<LayerData, LayerError> {
        let seed = LayerData::seed(layer)?;
        let quant = resnet18::quantization(layer, seed)?;
        let (lo, hi) = weights.range();
        let count = |dims: &[i64]| dims.iter().product::<i64>() as usize;
        let src = Array::from_i64(DType::U8, &quant.src_dims, &uniform(count(&quant.src_dims), seed, 0, 255));
        let wei_values = uniform(count(&quant.wei_dims), seed + 1, lo.into(), hi.into());
        let range = weight_range(wei_values.iter().map(|&w| w as i8));
        let wei = Array::from_i64(DType::I8, &quant.wei_dims, &wei_values);
        Ok(LayerData { layer, weights, quant, src, wei, range })
    }

    /// The output's shape in the definition's layout: `[1, OC, OH, OW]` (the dense layer's
    /// `[1, OC]`).
    pub fn output_shape(&self) -> Vec<i64> {
        match self.layer {
            Layer::Conv(c) => vec![1, c.oc, c.oh(), c.ow()],
            Layer::Dense(d) => vec![1, d.out_features],
        }
    }
}
