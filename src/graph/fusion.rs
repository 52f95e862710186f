//! Pattern matching for `PartitionPolicy::Fusion`: finds the quantized patterns of
//! `PartitionKind` and resolves them (constant weights and biases read, scales checked and
//! combined), leaving every other op a partition of its own.
//!
//! Rules every pattern obeys:
//! * It starts at Dequantize ops (of an activation, of constant weights and biases) and ends at
//!   a Quantize; a Quantize followed by a Dequantize is never fused away (a convolution's
//!   residual add, `QConv::residual`, goes on past one but computes both exactly).
//! * Every tensor strictly inside (the float results between the anchor and the Quantize) has
//!   exactly one reader, the next op of the pattern, and is not a graph output: a tensor read
//!   elsewhere stops the fusion.
//! * A Dequantize whose output other ops also read is listed in each partition that reads
//!   through it, and is a partition of its own as well when a reader is not fused.
//! * Anything that does not fit exactly (a float bias, a bias scale not bitwise
//!   `x_scale · w_scale[c]`, non-zero weight zero points, per-channel activations) is not fused.

use std::collections::BTreeSet;

use super::attrs::QuantParams;
use super::dtype::DataType;
use super::finalize::FinalizedGraph;
use super::op::{Op, OpId, OpKind};
use super::partition::{
    Activation, PartitionKind, QAdd, QConv, QGlobalAvgPool, QMatMul, QMaxPool, QuantTensor, Residual, activation_clamp,
};
use super::shape::{conv_window, max_pool_window, reduce_axes};
use super::tensor::{Dim, TensorId};
use super::value::Data;
use crate::shared::Shared;

/// A partition before it is numbered.
#[derive(Clone, Debug)]
pub(super) struct Group {
    pub ops: Vec<OpId>,
    pub inputs: Vec<TensorId>,
    pub outputs: Vec<TensorId>,
    pub kind: PartitionKind,
}

/// Op `id` alone: `Single`, or `Unsupported` with the reason.
pub(super) fn single(g: &FinalizedGraph, id: OpId) -> Group {
    let Some(op) = g.op(id) else {
        return Group {
            ops: vec![id],
            inputs: vec![],
            outputs: vec![],
            kind: PartitionKind::Unsupported {
                op: OpKind::Reorder,
                reason: format!("{id} is not an op of this graph"),
            },
        };
    };
    let mut inputs = Vec::new();
    for &t in &op.inputs {
        if !inputs.contains(&t) {
            inputs.push(t);
        }
    }
    let kind = match unsupported(g, op) {
        Some(reason) => PartitionKind::Unsupported { op: op.kind.clone(), reason },
        None => PartitionKind::Single(op.kind.clone()),
    };
    Group { ops: vec![id], inputs, outputs: op.outputs.clone(), kind }
}

/// Why no backend computes `op` alone, if none does: arithmetic on f16/bf16 (only conversions
/// and data movement are supported in those types), and windows other than 2-D.
fn unsupported(g: &FinalizedGraph, op: &Op) -> Option<String> {
    let arithmetic = matches!(
        op.kind,
        OpKind::Convolution(_)
            | OpKind::MatMul(_)
            | OpKind::BiasAdd(_)
            | OpKind::Add
            | OpKind::ReLU
            | OpKind::Clip(_)
            | OpKind::MaxPool(_)
            | OpKind::AvgPool(_)
            | OpKind::GlobalAveragePool
            | OpKind::ReduceMean(_)
    );
    let dtype = op.inputs.first().and_then(|&t| g.tensor(t)).map(|t| t.dtype)?;
    if arithmetic && matches!(dtype, DataType::F16 | DataType::Bf16) {
        return Some(format!("{} on {dtype}: no backend computes in {dtype} (TypeCast to f32 first)", op.kind.name()));
    }
    let window = matches!(op.kind, OpKind::Convolution(_) | OpKind::MaxPool(_) | OpKind::AvgPool(_));
    let rank = op.inputs.first().and_then(|&t| g.tensor(t)).and_then(|t| t.shape.rank());
    if window && rank != Some(4) {
        let spatial = rank.map_or("unknown".to_string(), |r| r.saturating_sub(2).to_string());
        return Some(format!(
            "{} over {spatial} spatial dimensions: only 2-D windows (NCHW) are compiled",
            op.kind.name()
        ));
    }
    None
}

/// The groups of `PartitionPolicy::Fusion`, in no particular order.
pub(super) fn fuse(g: &FinalizedGraph, sum: bool) -> Vec<Group> {
    let mut m = Matcher { g, claimed: BTreeSet::new(), sum };
    let mut groups = Vec::new();
    for &id in g.order() {
        if m.claimed.contains(&id) {
            continue;
        }
        let Some(op) = g.op(id) else { continue };
        let fused = match &op.kind {
            OpKind::Convolution(_) => m.conv(id),
            OpKind::MatMul(_) => m.matmul(id),
            OpKind::Add => m.add(id),
            OpKind::MaxPool(_) => m.max_pool(id),
            OpKind::GlobalAveragePool | OpKind::ReduceMean(_) => m.global_avg_pool(id),
            _ => None,
        };
        if let Some(group) = fused {
            for &o in &group.ops {
                if !matches!(g.op(o).map(|op| &op.kind), Some(OpKind::Dequantize(_))) {
                    m.claimed.insert(o);
                }
            }
            groups.push(group);
        }
    }
    // Every op not claimed is a partition of its own; so is a Dequantize that fused partitions
    // read through but that someone else reads too.
    let listed: BTreeSet<OpId> = groups.iter().flat_map(|gr| gr.ops.iter().copied()).collect();
    for &id in g.order() {
        if m.claimed.contains(&id) {
            continue;
        }
        let Some(op) = g.op(id) else { continue };
        let needed = !listed.contains(&id)
            || op
                .outputs
                .iter()
                .any(|&t| g.graph().outputs().contains(&t) || g.consumers(t).iter().any(|c| !m.claimed.contains(c)));
        if needed {
            groups.push(single(g, id));
        }
    }
    groups
}

/// A Dequantize producing a tensor: the op, its parameters and the integer tensor it reads.
struct Dq<'a> {
    op: OpId,
    params: &'a QuantParams,
    src: TensorId,
    dtype: DataType,
}

/// Constant s8 weights behind a Dequantize with zero points 0.
struct Weights {
    op: OpId,
    values: Shared<i8>,
    dims: Vec<usize>,
    /// One (per tensor) or one per channel.
    scales: Vec<f32>,
}

struct Matcher<'a> {
    g: &'a FinalizedGraph,
    /// Ops (other than Dequantize) already in a fused group.
    claimed: BTreeSet<OpId>,
    /// Whether a convolution takes in a residual add after its Quantize (`QConv::residual`).
    sum: bool,
}

impl<'a> Matcher<'a> {
    fn op(&self, id: OpId) -> Option<&'a Op> {
        self.g.op(id)
    }

    fn dims(&self, t: TensorId) -> Option<Vec<Dim>> {
        self.g.tensor(t)?.shape.dims().map(<[Dim]>::to_vec)
    }

    /// The Dequantize that writes `t`.
    fn dq(&self, t: TensorId) -> Option<Dq<'a>> {
        let id = self.g.graph().producer(t)?;
        let op = self.op(id)?;
        let OpKind::Dequantize(params) = &op.kind else { return None };
        let src = *op.inputs.first()?;
        Some(Dq { op: id, params, src, dtype: self.g.tensor(src)?.dtype })
    }

    /// A Dequantize of a per-tensor u8/s8 activation.
    fn dq_activation(&self, t: TensorId) -> Option<(Dq<'a>, QuantTensor)> {
        let dq = self.dq(t)?;
        let q = per_tensor(dq.params, dq.dtype)?;
        Some((dq, q))
    }

    /// The only reader of `t`, reading it as its input 0 (or any input with `any_input`), if
    /// `t` is no graph output and that reader is not fused yet.
    fn next(&self, t: TensorId, any_input: bool) -> Option<(OpId, &'a Op)> {
        if self.g.graph().outputs().contains(&t) {
            return None;
        }
        let [id] = self.g.consumers(t) else { return None };
        let op = self.op(*id)?;
        let reads = if any_input { op.inputs.contains(&t) } else { op.inputs.first() == Some(&t) };
        (reads && !self.claimed.contains(id) && op.inputs.iter().filter(|&&i| i == t).count() == 1).then_some((*id, op))
    }

    /// `[→ ReLU | Clip] → Quantize` after `t`: the activation, the Quantize's op and output, and
    /// the destination quantization.
    fn tail(&self, t: TensorId, ops: &mut Vec<OpId>) -> Option<(Activation, QuantTensor, TensorId)> {
        let (mut id, mut op) = self.next(t, false)?;
        let mut activation = Activation::None;
        match &op.kind {
            OpKind::ReLU => activation = Activation::ReLU,
            OpKind::Clip(c) => activation = Activation::Clip { min: c.min, max: c.max },
            _ => {}
        }
        if activation != Activation::None {
            ops.push(id);
            (id, op) = self.next(op.outputs[0], false)?;
        }
        let OpKind::Quantize(q) = &op.kind else { return None };
        let dst = per_tensor(&q.params, q.dtype)?;
        ops.push(id);
        Some((activation, dst, op.outputs[0]))
    }

    /// A constant i32 bias behind a Dequantize with zero points 0 and scale `x_scale ·
    /// w_scale[c]` bitwise for each of `n` channels (`dims` allowed: `[n]`, or `[1, n]` with
    /// `row`).
    fn bias(&self, t: TensorId, x_scale: f32, w_scales: &[f32], n: usize, row: bool) -> Option<(OpId, Vec<i32>)> {
        let dq = self.dq(t)?;
        let value = self.g.graph().constant_value(dq.src)?;
        let Data::S32(bias) = value.data() else { return None };
        let shape_ok = value.dims() == [n] || (row && value.dims() == [1, n]);
        if !shape_ok || dq.params.zero_points.iter().any(|&z| z != 0) {
            return None;
        }
        let per_axis = match dq.params.axis {
            None => true,
            Some(a) => a as usize == value.dims().len() - 1,
        };
        if !per_axis {
            return None;
        }
        let w = |c: usize| if w_scales.len() == 1 { w_scales[0] } else { w_scales[c] };
        let exact = (0..n).all(|c| dq.params.get(c).0.to_bits() == (x_scale * w(c)).to_bits());
        exact.then(|| (dq.op, bias.clone()))
    }

    /// Constant s8 weights behind a Dequantize, zero points 0, per tensor or per `axis` (of size
    /// `channels`): the op, the values and dims, and the scales.
    fn weights(&self, t: TensorId, axis: usize) -> Option<Weights> {
        let dq = self.dq(t)?;
        let value = self.g.graph().constant_value(dq.src)?;
        let Data::S8(values) = value.data() else { return None };
        let p = dq.params;
        if p.zero_points.iter().any(|&z| z != 0) {
            return None;
        }
        let per_tensor = p.scales.len() == 1 && (p.axis.is_none() || value.dims().get(axis) == Some(&1));
        let per_channel = p.axis == Some(axis as i64) && value.dims().get(axis) == Some(&p.scales.len());
        (per_tensor || per_channel).then(|| Weights {
            op: dq.op,
            values: values.clone(),
            dims: value.dims().to_vec(),
            scales: p.scales.clone(),
        })
    }

    fn conv(&self, id: OpId) -> Option<Group> {
        let op = self.op(id)?;
        let OpKind::Convolution(attrs) = &op.kind else { return None };
        let (src_dq, src) = self.dq_activation(op.inputs[0])?;
        let Weights { op: w_op, values: weights, dims: weight_dims, scales: weight_scales } =
            self.weights(op.inputs[1], 0)?;
        let oc = weight_dims[0];
        let mut ops = vec![src_dq.op, w_op];
        let mut bias = None;
        if let Some(&b) = op.inputs.get(2) {
            let (b_op, values) = self.bias(b, src.scale, &weight_scales, oc, false)?;
            ops.push(b_op);
            bias = Some(values);
        }
        ops.push(id);
        let mut out = op.outputs[0];
        if bias.is_none()
            && let Some((add_id, add)) = self.next(out, false)
            && let OpKind::BiasAdd(a) = &add.kind
            && a.axis == 1
            && let Some((b_op, values)) = self.bias(add.inputs[1], src.scale, &weight_scales, oc, false)
        {
            ops.extend([b_op, add_id]);
            bias = Some(values);
            out = add.outputs[0];
        }
        let (activation, dst, q_out) = self.tail(out, &mut ops)?;
        let dst_dims = self.dims(q_out)?;
        let mut inputs = vec![src_dq.src];
        let mut output = q_out;
        let mut residual = None;
        if self.sum
            && let Some((r, r_ops, r_out, other)) = self.residual(q_out, dst, &dst_dims)
        {
            ops.extend(r_ops);
            if other != src_dq.src {
                inputs.push(other);
            }
            output = r_out;
            residual = Some(Box::new(r));
        }
        let window = conv_window(&self.g.graph().op_ref(id), attrs, &weight_dims[2..]).ok()?;
        let requant_scales = (0..oc).map(|c| src.scale * pick(&weight_scales, c) / dst.scale).collect();
        let kind = PartitionKind::QuantizedConv(QConv {
            src,
            src_dims: self.dims(src_dq.src)?,
            weights,
            weight_dims,
            weight_scales,
            bias,
            requant_scales,
            window,
            groups: usize::try_from(attrs.groups).ok()?,
            activation,
            clamp: activation_clamp(activation, &dst),
            dst,
            dst_dims,
            residual,
        });
        Some(Group { ops, inputs, outputs: vec![output], kind })
    }

    /// `Dequantize → Add ← Dequantize(other) [→ ReLU | Clip] → Quantize` after a convolution's
    /// Quantize output `q_out` (quantized as `conv_dst`, dims `dims`), the other operand of the
    /// same dims: the residual, its ops, its output, and the other operand's integer tensor.
    fn residual(
        &self,
        q_out: TensorId,
        conv_dst: QuantTensor,
        dims: &[Dim],
    ) -> Option<(Residual, Vec<OpId>, TensorId, TensorId)> {
        let (dq_id, dq_op) = self.next(q_out, false)?;
        let OpKind::Dequantize(params) = &dq_op.kind else { return None };
        let y = per_tensor(params, conv_dst.dtype)?;
        let y_t = dq_op.outputs[0];
        let (add_id, add) = self.next(y_t, true)?;
        if !matches!(add.kind, OpKind::Add) || add.inputs.len() != 2 {
            return None;
        }
        let conv_is_a = add.inputs[0] == y_t;
        let (other_dq, other) = self.dq_activation(add.inputs[if conv_is_a { 1 } else { 0 }])?;
        if other_dq.src == q_out || self.dims(other_dq.src)? != dims || !dims.iter().all(|d| d.known().is_some()) {
            return None;
        }
        let mut ops = vec![dq_id, other_dq.op, add_id];
        let (activation, dst, r_out) = self.tail(add.outputs[0], &mut ops)?;
        let (a, b) = if conv_is_a { (y, other) } else { (other, y) };
        let add = QAdd {
            a,
            a_dims: dims.to_vec(),
            b,
            b_dims: dims.to_vec(),
            activation,
            clamp: activation_clamp(activation, &dst),
            dst,
            dst_dims: self.dims(r_out)?,
        };
        Some((Residual { add, conv_is_a }, ops, r_out, other_dq.src))
    }

    fn matmul(&self, id: OpId) -> Option<Group> {
        let op = self.op(id)?;
        let OpKind::MatMul(attrs) = &op.kind else { return None };
        if attrs.transpose_a {
            return None;
        }
        let (src_dq, src) = self.dq_activation(op.inputs[0])?;
        let src_dims = self.dims(src_dq.src)?;
        if src_dims.len() != 2 {
            return None;
        }
        // Per column: axis 1 of [K, N], or axis 0 of [N, K] when transposed.
        let axis = if attrs.transpose_b { 0 } else { 1 };
        let Weights { op: w_op, values: w, dims, scales: weight_scales } = self.weights(op.inputs[1], axis)?;
        let [d0, d1] = dims[..] else { return None };
        let (k, n) = if attrs.transpose_b { (d1, d0) } else { (d0, d1) };
        let mut ops = vec![src_dq.op, w_op, id];
        let mut bias = None;
        let mut out = op.outputs[0];
        if let Some((add_id, add)) = self.next(out, true) {
            let other = match &add.kind {
                OpKind::BiasAdd(a) if a.axis == 1 && add.inputs[0] == out => Some(add.inputs[1]),
                OpKind::Add => add.inputs.iter().copied().find(|&t| t != out),
                _ => None,
            };
            if let Some((b_op, values)) = other.and_then(|b| self.bias(b, src.scale, &weight_scales, n, true)) {
                ops.extend([b_op, add_id]);
                bias = Some(values);
                out = add.outputs[0];
            }
        }
        let (activation, dst, q_out) = self.tail(out, &mut ops)?;
        let requant_scales = (0..n).map(|c| src.scale * pick(&weight_scales, c) / dst.scale).collect();
        let kind = PartitionKind::QuantizedMatMul(QMatMul {
            src,
            src_dims,
            weights: w,
            weight_dims: [k, n],
            weights_transposed: attrs.transpose_b,
            weight_scales,
            bias,
            requant_scales,
            activation,
            clamp: activation_clamp(activation, &dst),
            dst,
            dst_dims: self.dims(q_out)?,
        });
        Some(Group { ops, inputs: vec![src_dq.src], outputs: vec![q_out], kind })
    }

    fn add(&self, id: OpId) -> Option<Group> {
        let op = self.op(id)?;
        let (a_dq, a) = self.dq_activation(op.inputs[0])?;
        let (b_dq, b) = self.dq_activation(op.inputs[1])?;
        let mut ops = vec![a_dq.op];
        if b_dq.op != a_dq.op {
            ops.push(b_dq.op);
        }
        ops.push(id);
        let (activation, dst, q_out) = self.tail(op.outputs[0], &mut ops)?;
        let mut inputs = vec![a_dq.src];
        if b_dq.src != a_dq.src {
            inputs.push(b_dq.src);
        }
        let kind = PartitionKind::QuantizedAdd(QAdd {
            a,
            a_dims: self.dims(a_dq.src)?,
            b,
            b_dims: self.dims(b_dq.src)?,
            activation,
            clamp: activation_clamp(activation, &dst),
            dst,
            dst_dims: self.dims(q_out)?,
        });
        Some(Group { ops, inputs, outputs: vec![q_out], kind })
    }

    fn max_pool(&self, id: OpId) -> Option<Group> {
        let op = self.op(id)?;
        let OpKind::MaxPool(attrs) = &op.kind else { return None };
        let x = op.inputs[0];
        let x_dims = self.dims(x)?;
        let window = max_pool_window(&self.g.graph().op_ref(id), attrs, x_dims.len().checked_sub(2)?).ok()?;
        let x_dtype = self.g.tensor(x)?.dtype;
        if x_dtype.is_int8() {
            let kind = PartitionKind::QuantizedMaxPool(QMaxPool {
                dtype: x_dtype,
                quant: None,
                window,
                src_dims: x_dims,
                dst_dims: self.dims(op.outputs[0])?,
            });
            return Some(Group { ops: vec![id], inputs: vec![x], outputs: op.outputs.clone(), kind });
        }
        let (dq, src) = self.dq_activation(x)?;
        let (q_id, q_op) = self.next(op.outputs[0], false)?;
        let OpKind::Quantize(q) = &q_op.kind else { return None };
        let dst = per_tensor(&q.params, q.dtype)?;
        let same =
            dst.dtype == src.dtype && dst.scale.to_bits() == src.scale.to_bits() && dst.zero_point == src.zero_point;
        if !same {
            return None;
        }
        let kind = PartitionKind::QuantizedMaxPool(QMaxPool {
            dtype: src.dtype,
            quant: Some(src),
            window,
            src_dims: self.dims(dq.src)?,
            dst_dims: self.dims(q_op.outputs[0])?,
        });
        Some(Group { ops: vec![dq.op, id, q_id], inputs: vec![dq.src], outputs: vec![q_op.outputs[0]], kind })
    }

    fn global_avg_pool(&self, id: OpId) -> Option<Group> {
        let op = self.op(id)?;
        let (dq, src) = self.dq_activation(op.inputs[0])?;
        let src_dims = self.dims(dq.src)?;
        if src_dims.len() < 3 {
            return None;
        }
        if let OpKind::ReduceMean(a) = &op.kind {
            let axes = reduce_axes(&self.g.graph().op_ref(id), a, src_dims.len()).ok()?;
            if !a.keep_dims || axes != (2..src_dims.len()).collect::<Vec<_>>() {
                return None;
            }
        }
        let (q_id, q_op) = self.next(op.outputs[0], false)?;
        let OpKind::Quantize(q) = &q_op.kind else { return None };
        let dst = per_tensor(&q.params, q.dtype)?;
        let positions: Option<usize> =
            src_dims[2..].iter().try_fold(1usize, |acc, d| d.known().and_then(|n| acc.checked_mul(n)));
        let scale = positions.map(|p| src.scale / (dst.scale * p as f32));
        let kind = PartitionKind::QuantizedGlobalAvgPool(QGlobalAvgPool {
            src,
            src_dims,
            scale,
            dst,
            dst_dims: self.dims(q_op.outputs[0])?,
        });
        Some(Group { ops: vec![dq.op, id, q_id], inputs: vec![dq.src], outputs: vec![q_op.outputs[0]], kind })
    }
}

/// Per-tensor parameters of an 8-bit tensor.
fn per_tensor(p: &QuantParams, dtype: DataType) -> Option<QuantTensor> {
    if !dtype.is_int8() || p.scales.len() != 1 || p.zero_points.len() != 1 {
        return None;
    }
    Some(QuantTensor { dtype, scale: p.scales[0], zero_point: p.zero_points[0] })
}

/// Scale `c` of a per-tensor (one value) or per-channel list.
fn pick(scales: &[f32], c: usize) -> f32 {
    if scales.len() == 1 { scales[0] } else { scales[c] }
}
