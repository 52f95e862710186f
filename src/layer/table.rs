//! `TableLayer`: a table layer ready to run on the x86 path (`x86_conv::table_layer`) with any
//! knobs: its data, its definition, its weights prepared once per panel width and GEMM
//! operands (the preparation depends on nothing else, and under its generic schedule it is slow
//! for the large layers), and its reference output, computed once when first asked for.

use std::cell::{OnceCell, RefCell};
use std::collections::HashMap;
use std::time::{Duration, Instant};

use ir::DType;
use ir::interp::Array;
use schedules::ops::{GemmOperands, Layout};
use schedules::resnet18::{Layer, WeightBits};
use schedules::x86_conv::{Conv2dInt8Knobs, Conv2dInt8Prepare, table_layer};

use super::compiled::CompiledLayer;
use super::data::LayerData;
use super::definition::Definition;
use super::error::LayerError;
use super::reference::Reference;
use super::transpose::nchw_to_nhwc;
use crate::build::build;
use crate::runtime::{CompileOptions, Tensor};

/// What a weight preparation depends on: the panel width and the GEMM operands (source dtype,
/// declared weight range). Its result is exact integer data, the same at every ISA level.
type PreparationKey = (i64, DType, (i8, i8));

/// Packed weights and compensation, and how long preparing them took.
#[derive(Clone)]
struct Prepared {
    packed: Tensor,
    compensation: Tensor,
    time: Duration,
}

/// A table layer set up once for any number of schedules.
pub struct TableLayer {
    pub data: LayerData,
    pub definition: Definition,
    /// How `reference` is computed.
    pub reference_kind: Reference,
    reference: OnceCell<Array>,
    prepared: RefCell<HashMap<PreparationKey, Prepared>>,
}

/// `t`'s bytes as a tensor of `shape` (the same element count).
fn reshaped(t: &Tensor, shape: &[i64]) -> Result<Tensor, LayerError> {
    Ok(Tensor::from_le_bytes(t.dtype(), shape, t.as_bytes())?)
}

impl TableLayer {
    /// `layer` with its data (weights in `weights`' range) and definition.
    pub fn new(layer: Layer, weights: WeightBits) -> Result<TableLayer, LayerError> {
        let data = LayerData::new(layer, weights)?;
        let definition = Definition::new(layer, &data.quant)?;
        Ok(TableLayer {
            data,
            definition,
            reference_kind: Reference::for_layer(layer),
            reference: OnceCell::new(),
            prepared: RefCell::default(),
        })
    }

    /// The reference output (`Reference`), in the definition's layout.
    pub fn reference(&self) -> Result<&Array, LayerError> {
        if let Some(output) = self.reference.get() {
            return Ok(output);
        }
        let output = self.reference_kind.output(&self.data, &self.definition)?;
        Ok(self.reference.get_or_init(|| output))
    }

    /// The layer under `x86_conv::table_layer` with `knobs` on `operands` (from
    /// `Conv2dInt8Knobs::operands` for the level and `data.range`), a convolution's source and
    /// output in `layout`, compiled with `options` and bound to the data and the prepared
    /// weights.
    pub fn compile(
        &self,
        knobs: Conv2dInt8Knobs,
        operands: GemmOperands,
        layout: Layout,
        options: &CompileOptions,
    ) -> Result<CompiledLayer, LayerError> {
        let start = Instant::now();
        let name = self.data.layer.name();
        let (prep, layer) = table_layer(self.data.layer, &self.data.quant, knobs, operands, layout, name)?;
        let trace = layer.schedule.trace();
        let kernel = build(&layer.schedule, &layer.args.iter().collect::<Vec<_>>(), name, options)?;
        let compile = start.elapsed();
        let prepared = self.prepare(&prep, (knobs.nr, operands.source, operands.weights), options)?;
        // The dense layer runs as one NHWC row of pixels: its `[1, IC]` source has the bytes of
        // that row.
        let channels_last = layout == Layout::Nhwc || matches!(self.data.layer, Layer::Dense(_));
        let src = Tensor::from_array(&self.data.src);
        let src = if channels_last { nchw_to_nhwc(&src) } else { src };
        let mut args = vec![
            reshaped(&src, layer.args[0].shape())?,
            prepared.packed,
            prepared.compensation,
            Tensor::from_array(&self.data.bias),
        ];
        args.extend(layer.layer.params.iter().map(|p| Tensor::from_array(&p.values)));
        args.push(Tensor::zeros(layer.layer.output.dtype(), layer.layer.output.shape())?);
        let args = kernel.compiled.bind(args)?;
        let times = (compile, prepared.time);
        Ok(CompiledLayer::new(kernel, trace, times, args, channels_last, self.data.output_shape()))
    }

    /// The packed weights and compensation of `prep`, prepared now unless prepared before
    /// under `key`.
    fn prepare(
        &self,
        prep: &Conv2dInt8Prepare,
        key: PreparationKey,
        options: &CompileOptions,
    ) -> Result<Prepared, LayerError> {
        if let Some(prepared) = self.prepared.borrow().get(&key) {
            return Ok(prepared.clone());
        }
        let start = Instant::now();
        let func = build(&prep.schedule, &prep.args.iter().collect::<Vec<_>>(), "prep", options)?;
        let mut args = [
            reshaped(&Tensor::from_array(&self.data.wei), prep.args[0].shape())?,
            Tensor::zeros(prep.packed_weights.dtype(), prep.packed_weights.shape())?,
            Tensor::zeros(DType::I32, prep.compensation.compensation.shape())?,
        ];
        func.compiled.call(&mut args.iter_mut().collect::<Vec<_>>())?;
        let [_, packed, compensation] = args;
        let prepared = Prepared { packed, compensation, time: start.elapsed() };
        self.prepared.borrow_mut().insert(key, prepared.clone());
        Ok(prepared)
    }
}
