//! `TableGraph`: a layer of the resnet-18 int8 table (R1..R11, FC) as a graph of one quantized
//! partition, set up the way an imported network's layer is: built op by op
//! (`Dequantize(src u8) · Dequantize(s8 weights, per output channel) → Convolution (FC: MatMul
//! with transposed weights) → BiasAdd(Dequantize(i32 bias)) → Quantize(u8)`), finalized,
//! partitioned with fusion into exactly one `QuantizedConv` / `QuantizedMatMul`, its kernel spec
//! taken from `partition_spec` and compiled by `Spec::compile_in`, the function the engine
//! compiles every partition with. Its reference is the graph's (`reference::run_partition` on
//! the same partition), which shares no code with the compiled path.
//!
//! The data are `layer::LayerData`'s (seeded by the layer's position in the table): the i32
//! bias is the integers drawn (`LayerQuant::bias_q`) at scale `src_scale · w_scale[c]`, so the
//! layer computes onnxruntime's QLinearConv / QGemm on the QDQ model `scripts/peers/layers.py`
//! builds from the same seeds.

use std::cell::OnceCell;

use schedules::resnet18::{Layer, WeightBits};
use schedules::x86_conv::Conv2dInt8Knobs;

use super::error::EngineError;
use super::slot::Slot;
use super::spec::{Spec, partition_spec};
use crate::graph::reference::run_partition;
use crate::graph::{
    BiasAddAttrs, ConvAttrs, DataType, FinalizedGraph, Graph, MatMulAttrs, OpKind, Partition, PartitionKind,
    PartitionPolicy, QuantParams, QuantizeAttrs, Shape, TensorId, Value,
};
use crate::layer::{CompiledQuantized, KernelCache, LayerData, LayerError};
use crate::runtime::CompileOptions;

/// A table layer as a one-partition graph, with its kernel spec and (once asked for) its
/// reference output.
pub struct TableGraph {
    pub data: LayerData,
    pub graph: FinalizedGraph,
    /// The graph's only partition.
    pub partition: Partition,
    /// What the engine compiles for it (`partition_spec`).
    pub spec: Spec,
    /// The graph's input: the source, u8 `[1, IC, H, W]` (FC: `[1, IC]`).
    pub input: Value,
    reference: OnceCell<Value>,
}

impl TableGraph {
    /// `layer` with its data (weights in `weights`' range) as a graph of one quantized
    /// partition. Errors: the data's, the graph's, and a partitioning that is not exactly one
    /// quantized partition the x86 kernels compute (a bug here, reported rather than assumed).
    pub fn new(layer: Layer, weights: WeightBits) -> Result<TableGraph, EngineError> {
        let name = layer.name();
        let data = LayerData::new(layer, weights).map_err(|e| EngineError::Table {
            layer: name,
            what: "its data".into(),
            source: Box::new(e),
        })?;
        let (graph, src) = build(&data)?;
        let input = Value::u8(&dims(&data.quant.src_dims), data.src.to_i64_vec().iter().map(|&v| v as u8).collect())?;
        let mut partitions = graph.get_partitions(PartitionPolicy::Fusion);
        let mismatch = |found: String| EngineError::TablePartition { layer: name, found };
        let partition = match partitions.pop() {
            Some(p) if partitions.is_empty() => p,
            _ => return Err(mismatch(format!("{} partitions", partitions.len() + 1))),
        };
        let quantized = matches!(partition.kind, PartitionKind::QuantizedConv(_) | PartitionKind::QuantizedMatMul(_));
        if !quantized || partition.inputs != [src] {
            return Err(mismatch(format!("one {} partition reading {:?}", partition.kind.name(), partition.inputs)));
        }
        let spec = partition_spec(&graph, &partition).map_err(mismatch)?;
        Ok(TableGraph { data, graph, partition, spec, input, reference: OnceCell::new() })
    }

    pub fn layer(&self) -> Layer {
        self.data.layer
    }

    /// The reference output (`run_partition`), u8 `[1, OC, OH, OW]` (FC: `[1, OC]`); computed
    /// once, when first asked for.
    pub fn reference(&self) -> Result<&Value, EngineError> {
        if let Some(v) = self.reference.get() {
            return Ok(v);
        }
        let output = run_partition(&self.graph, &self.partition, std::slice::from_ref(&self.input)).map_err(|e| {
            EngineError::Reference { partition: self.data.layer.name().to_string(), what: e.to_string() }
        })?;
        Ok(self.reference.get_or_init(|| output))
    }

    /// The source's bytes as the compiled kernel reads them (NHWC; FC: `[1, IC]`).
    pub fn src_bytes(&self) -> Vec<u8> {
        kernel_bytes(&self.input)
    }

    /// The reference's bytes as the compiled kernel writes them (NHWC; FC: `[1, OC]`).
    pub fn expected_bytes(&self) -> Result<Vec<u8>, EngineError> {
        Ok(kernel_bytes(self.reference()?))
    }

    /// The spec compiled with `knobs` (`None`: the engine's defaults), functions and prepared
    /// weights shared through `cache` (`Spec::compile_in`).
    pub fn compile(
        &self,
        cache: &KernelCache,
        knobs: Option<Conv2dInt8Knobs>,
        options: &CompileOptions,
    ) -> Result<CompiledQuantized, LayerError> {
        self.spec.compile_in(cache, knobs, options)
    }

    /// Operations of one call (two per multiply-accumulate).
    pub fn ops(&self) -> u64 {
        self.spec.ops()
    }
}

/// The bytes of `value` as the engine stores them: NHWC for 4-D 8-bit tensors.
pub fn kernel_bytes(value: &Value) -> Vec<u8> {
    let mut slot = Slot::new(value.dtype(), value.dims().to_vec());
    slot.store(value);
    slot.bytes.to_vec()
}

fn dims(d: &[i64]) -> Vec<usize> {
    d.iter().map(|&v| v as usize).collect()
}

/// The graph of `data`'s layer and its input.
fn build(data: &LayerData) -> Result<(FinalizedGraph, TensorId), EngineError> {
    let q = &data.quant;
    let attrs = &q.attrs;
    let (src_scale, src_zp) = (attrs.src.scales.values[0], attrs.src.zero_points.values[0]);
    let w_scales = attrs.wei_scales.values.clone();
    let mut g = Graph::new();
    let src = g.input("src", DataType::U8, Shape::known(&dims(&q.src_dims)));
    let x = g.apply("dq_src", OpKind::Dequantize(QuantParams::per_tensor(src_scale, src_zp)), &[src])?;
    let wei: Vec<i8> = data.wei.to_i64_vec().iter().map(|&v| v as i8).collect();
    let w = g.constant("weights", Value::s8(&dims(&q.wei_dims), wei)?);
    // Per output channel: axis 0 of `[OC, IC, KH, KW]` and of the FC's `[OC, IC]`.
    let w = g.apply("dq_weights", OpKind::Dequantize(QuantParams::per_channel(0, w_scales.clone())), &[w])?;
    let b = g.constant("bias", Value::s32(&[w_scales.len()], q.bias_q.clone())?);
    // The scale fusion requires bitwise: `src_scale · w_scale[c]`, the bias's quantization.
    let b_scales = w_scales.iter().map(|&s| src_scale * s).collect();
    let b = g.apply("dq_bias", OpKind::Dequantize(QuantParams::per_channel(0, b_scales)), &[b])?;
    let name = data.layer.name();
    let y = match data.layer {
        Layer::Conv(c) => g.apply(name, OpKind::Convolution(ConvAttrs::square(c.stride, c.pad)), &[x, w])?,
        Layer::Dense(_) => {
            let attrs = MatMulAttrs { transpose_a: false, transpose_b: true };
            g.apply(name, OpKind::MatMul(attrs), &[x, w])?
        }
    };
    let y = g.apply("bias_add", OpKind::BiasAdd(BiasAddAttrs { axis: 1 }), &[y, b])?;
    let dst = QuantParams::per_tensor(attrs.dst.scales.values[0], attrs.dst.zero_points.values[0]);
    let y = g.apply("q_dst", OpKind::Quantize(QuantizeAttrs { params: dst, dtype: DataType::U8 }), &[y])?;
    g.mark_output(y)?;
    Ok((g.finalize()?, src))
}
