//! Partitions (oneDNN Graph's `partition`): the units a backend compiles. Each partition is a
//! set of ops, the tensors it reads and writes, and a kind that carries everything a backend
//! needs, fully resolved (constant weights as integers, scales, zero points, biases, geometry),
//! so that no backend re-derives a pattern. Each kind states its semantics below; where a kind
//! follows onnxruntime's arithmetic, the source files it was checked against are named.
//!
//! Execution order: a partition comes after every partition that writes one of its inputs.

use std::fmt;

use cranelift_entity::entity_impl;

use super::dtype::DataType;
use super::finalize::FinalizedGraph;
use super::fusion;
use super::op::{OpId, OpKind};
use super::tensor::{Dim, TensorId};
use super::window::Window;

/// The identity of a partition in one `get_partitions` result (its index in execution order).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PartitionId(u32);
entity_impl!(PartitionId, "p");

/// How ops are grouped into partitions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PartitionPolicy {
    /// The quantized patterns of `PartitionKind` become one partition each; every other op is a
    /// partition of its own.
    Fusion,
    /// `Fusion`, except that a convolution's residual add (`QConv::residual`) stays a
    /// `QuantizedAdd` partition of its own: for backends without a fused sum (the export).
    FusionWithoutSum,
    /// One op per partition (`Single` or `Unsupported`): every Dequantize, float op and
    /// Quantize computed as written, for debugging a fused result.
    Debug,
}

/// A partition: ops a backend computes together.
#[derive(Clone, Debug, PartialEq)]
pub struct Partition {
    pub id: PartitionId,
    /// The ops it computes, in dependency order. A Dequantize read by several fused partitions
    /// is listed in each (each computes it in its integer form).
    pub ops: Vec<OpId>,
    /// The tensors it reads that it does not write, in order of first use. Constants folded into
    /// the kind (weights, biases) are not inputs; a `Single` op's constant operands are.
    pub inputs: Vec<TensorId>,
    /// The tensors it writes for others: a fused partition's last output (its Quantize's), a
    /// single op's output.
    pub outputs: Vec<TensorId>,
    pub kind: PartitionKind,
}

/// A per-tensor quantized activation: `real = scale · (int − zero_point)`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct QuantTensor {
    /// `U8` or `S8`.
    pub dtype: DataType,
    /// Finite and positive.
    pub scale: f32,
    /// In the range of `dtype`.
    pub zero_point: i32,
}

impl QuantTensor {
    /// The smallest and largest value of `dtype`.
    pub fn range(&self) -> (i32, i32) {
        self.dtype.int_range().unwrap_or((0, 0))
    }
}

/// The activation a fused partition applies between its requantization and its output, as the
/// graph wrote it (for printing); `QConv::clamp` and the others hold its integer effect.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Activation {
    None,
    ReLU,
    Clip { min: f32, max: f32 },
}

/// The integer bounds an activation followed by a Quantize to `dst` gives:
/// `Quantize(act(r)) = clamp(Quantize(r), lo, hi)`.
///
/// Quantize (`saturate(round_half_even(v / scale) + zp)`) is monotone, and for any monotone
/// `q`, `q(clamp(v, a, b)) = clamp(q(v), q(a), q(b))`: so ReLU gives `[zp, hi]` and
/// `Clip(min, max)` gives `[Quantize(min), Quantize(max)]` exactly, whatever the bounds.
pub fn activation_clamp(act: Activation, dst: &QuantTensor) -> (i32, i32) {
    let (lo, hi) = dst.range();
    let q = |v: f32| -> i32 {
        let x = v / dst.scale;
        if x.is_nan() {
            return lo;
        }
        let r = (x.clamp((lo - dst.zero_point) as f32, (hi - dst.zero_point) as f32)).round_ties_even();
        r as i32 + dst.zero_point
    };
    match act {
        Activation::None => (lo, hi),
        Activation::ReLU => (dst.zero_point.max(lo), hi),
        Activation::Clip { min, max } => (q(min), q(max)),
    }
}

/// What a partition computes.
#[derive(Clone, Debug, PartialEq)]
pub enum PartitionKind {
    /// `Dequantize(src) + Dequantize(constant s8 weights) → Convolution [+ i32 bias]
    /// [→ ReLU | Clip] → Quantize`, computed in integers with onnxruntime's QLinearConv
    /// requantization. See `QConv`.
    QuantizedConv(QConv),
    /// The same for a matrix product. See `QMatMul`.
    QuantizedMatMul(QMatMul),
    /// `Dequantize(a) + Dequantize(b) → Add [→ ReLU | Clip] → Quantize` with onnxruntime's
    /// QLinearAdd arithmetic. See `QAdd`.
    QuantizedAdd(QAdd),
    /// Max pooling on the integers. See `QMaxPool`.
    QuantizedMaxPool(QMaxPool),
    /// `Dequantize → GlobalAveragePool (or ReduceMean over every spatial axis, keeping them) →
    /// Quantize` with onnxruntime's QLinearGlobalAveragePool arithmetic. See `QGlobalAvgPool`.
    QuantizedGlobalAvgPool(QGlobalAvgPool),
    /// One op computed exactly as `OpKind` defines it.
    Single(OpKind),
    /// One op no backend supports, and why; `reference` still evaluates it as `op` defines.
    Unsupported { op: OpKind, reason: String },
}

impl PartitionKind {
    /// The kind's name in printed partitions.
    pub fn name(&self) -> &'static str {
        match self {
            PartitionKind::QuantizedConv(_) => "QuantizedConv",
            PartitionKind::QuantizedMatMul(_) => "QuantizedMatMul",
            PartitionKind::QuantizedAdd(_) => "QuantizedAdd",
            PartitionKind::QuantizedMaxPool(_) => "QuantizedMaxPool",
            PartitionKind::QuantizedGlobalAvgPool(_) => "QuantizedGlobalAvgPool",
            PartitionKind::Single(_) => "Single",
            PartitionKind::Unsupported { .. } => "Unsupported",
        }
    }
}

/// A quantized convolution, NCHW (`src: [N, C, D1..Dk]`), weights OIHW.
///
/// ```text
/// acc[n, oc, o] = Σ_{ic < C/G} Σ_k (x[n, g·C/G + ic, o·s − pb + k·d] − zp_x) · w[oc, ic, k]
///                 (exact in i32; padded taps contribute 0, i.e. read zp_x)
/// S[oc]         = (x_scale · w_scale[oc]) / y_scale          (two f32 operations, this order)
/// v             = f32(acc + bias[oc]) · S[oc]                (i32 add; f32 conversion and multiply)
/// dst           = clamp(round_half_even(v) + zp_y, clamp.0, clamp.1)
/// ```
///
/// `clamp` is the destination type's range narrowed by the activation (`activation_clamp`):
/// ReLU is `max(q, zp_y)`. This is onnxruntime's QLinearConv: the scales in
/// `onnxruntime/core/providers/cpu/quantization/qlinearconv.cc` (`output_scales[i] =
/// X_scale * W_scale[i] / Y_scale`), the requantization in `MlasRequantizeOutput`
/// (`onnxruntime/core/mlas/lib/quantize.cpp`: i32 bias added to the accumulator, `float(v) *
/// scale`, clamped to `[lo − zp, hi − zp]`, rounded to nearest even by the magic-number add,
/// plus the zero point), which equals rounding then saturating.
#[derive(Clone, Debug, PartialEq)]
pub struct QConv {
    /// The source activation (the partition's only input).
    pub src: QuantTensor,
    /// `[N, C, D1..Dk]`.
    pub src_dims: Vec<Dim>,
    /// The weights, row-major `[OC, C/groups, K1..Kk]`.
    pub weights: crate::shared::Shared<i8>,
    pub weight_dims: Vec<usize>,
    /// One scale (per tensor) or `OC` (per output channel); weight zero points are all 0.
    pub weight_scales: Vec<f32>,
    /// `OC` values at scale `x_scale · w_scale[oc]` (checked bitwise), or none.
    pub bias: Option<Vec<i32>>,
    /// `S[oc]` as above, `OC` values (repeated when the weights are per tensor).
    pub requant_scales: Vec<f32>,
    /// Strides, pads and dilations (the kernel is `weight_dims[2..]`).
    pub window: Window,
    /// Channel groups (1 in the fused patterns backends are expected to support).
    pub groups: usize,
    pub activation: Activation,
    /// The destination's integer bounds after the activation.
    pub clamp: (i32, i32),
    /// The convolution's own destination (its Quantize): the partition's output, or with a
    /// `residual` the operand of the add.
    pub dst: QuantTensor,
    /// `[N, OC, O1..Ok]`.
    pub dst_dims: Vec<Dim>,
    /// A residual add fused after the Quantize (OpenVINO's "sum" post-op), or none.
    pub residual: Option<Box<Residual>>,
}

/// The residual add a `QConv` partition ends with:
/// `Quantize → Dequantize → Add ← Dequantize(other) [→ ReLU | Clip] → Quantize`.
///
/// ```text
/// y   = the QConv's destination integers (its formula above, `dst` and `clamp`), unchanged
/// out = QAdd(y, other)   when conv_is_a,  QAdd(other, y) otherwise      (`add`'s formula)
/// ```
///
/// The Quantize → Dequantize pair between the convolution and the add is kept: `y` is rounded
/// and clamped to the conv's integers before the add reads it, exactly as the unfused graph
/// computes it; only the add's output is written. `add.a` and `add.b` are the two Dequantizes'
/// parameters in the Add's operand order; `other` is the partition's last input (its only one
/// when it is also the convolution's source) and has the destination's shape (no broadcasting).
#[derive(Clone, Debug, PartialEq)]
pub struct Residual {
    /// The add, operands in the graph's order; `add.dst` is the partition's output.
    pub add: QAdd,
    /// Whether the convolution is the Add's first operand (the formula is asymmetric).
    pub conv_is_a: bool,
}

/// A quantized matrix product `src[M, K] · W[K, N]`.
///
/// ```text
/// acc[m, n] = Σ_{k < K} (x[m, k] − zp_x) · w[k, n]        (exact in i32)
/// S[n]      = (x_scale · w_scale[n]) / y_scale
/// dst[m, n] = clamp(round_half_even(f32(acc + bias[n]) · S[n]) + zp_y, clamp.0, clamp.1)
/// ```
///
/// The same requantization as `QConv`; onnxruntime's QLinearMatMul computes the same scales
/// (`onnxruntime/core/providers/cpu/quantization/quantize_linear_matmul.cc`: `a_scale *
/// b_scale[i] / y_scale`) and requantizes with `MlasRequantizeOutput`.
#[derive(Clone, Debug, PartialEq)]
pub struct QMatMul {
    pub src: QuantTensor,
    /// `[M, K]`.
    pub src_dims: Vec<Dim>,
    /// Row-major in the orientation the graph gave: `[K, N]`, or `[N, K]` where
    /// `weights_transposed` (shared with the graph's constant, not copied).
    pub weights: crate::shared::Shared<i8>,
    /// `[K, N]`, whatever the orientation of `weights`.
    pub weight_dims: [usize; 2],
    /// The graph gave the weights as `[N, K]` (`transpose_b`), and `weights` holds them so.
    pub weights_transposed: bool,
    /// One scale or `N` (per column); zero points all 0.
    pub weight_scales: Vec<f32>,
    /// `N` values at scale `x_scale · w_scale[n]` (checked bitwise), or none.
    pub bias: Option<Vec<i32>>,
    /// `S[n]`, `N` values.
    pub requant_scales: Vec<f32>,
    pub activation: Activation,
    pub clamp: (i32, i32),
    pub dst: QuantTensor,
    /// `[M, N]`.
    pub dst_dims: Vec<Dim>,
}

/// A quantized elementwise sum with numpy broadcasting (inputs `a`, `b` in that order).
///
/// ```text
/// r_a   = a_scale / y_scale,  r_b = b_scale / y_scale                      (f32 divisions)
/// fixed = f32(zp_y) − (r_a · f32(zp_a) + r_b · f32(zp_b))                  (f32, no FMA)
/// v     = fma(f32(a), r_a, fma(f32(b), r_b, fixed))                        (two fused multiply-adds)
/// dst   = clamp(round_half_even(v), clamp.0, clamp.1)
/// ```
///
/// This is onnxruntime's AVX2 QLinearAdd kernel for two full vectors
/// (`onnxruntime/core/mlas/lib/intrinsics/avx2/qladd_avx2.cpp`, `MlasQLinearAddKernelAvx2Helper`:
/// `_mm256_fmadd_ps(b, ratio_BC, fixed)` then `_mm256_fmadd_ps(a, ratio_AC, ·)`,
/// `_mm256_cvtps_epi32` under round-to-nearest-even, then saturating packs). The zero point
/// is inside `fixed`, so a tie rounds `v + zp_y` to even, not `v`: with an odd `zp_y` this
/// differs by one from rounding first and adding the zero point after. Its scalar
/// kernel (`onnxruntime/core/mlas/lib/qladd.cpp`) computes `nearbyintf(r_a·(a − zp_a) +
/// r_b·(b − zp_b)) + zp_y` instead, and its AVX2 path for a one-element operand folds that
/// operand into `fixed` with a separate multiply and add; both can differ by one in the last
/// place before rounding. Whether the compiler contracts `fixed` into an FMA depends on how
/// onnxruntime was built; ours does not.
#[derive(Clone, Debug, PartialEq)]
pub struct QAdd {
    pub a: QuantTensor,
    pub a_dims: Vec<Dim>,
    pub b: QuantTensor,
    pub b_dims: Vec<Dim>,
    pub activation: Activation,
    pub clamp: (i32, i32),
    pub dst: QuantTensor,
    pub dst_dims: Vec<Dim>,
}

/// Max pooling on 8-bit integers: `dst = max` of the window's taps inside the input (padded
/// taps ignored; an empty window gives the type's lowest value), exactly `MaxPool`'s formula
/// on the integers. Either a MaxPool reading u8/s8 directly, or Dequantize → MaxPool →
/// Quantize with the same type, scale (bitwise) and zero point on both sides, where the
/// float path returns the same integers (dequantization is monotone and quantization
/// inverts it exactly on its image).
#[derive(Clone, Debug, PartialEq)]
pub struct QMaxPool {
    /// The integer type; the quantization when the graph wrote Dequantize/Quantize around it.
    pub dtype: DataType,
    pub quant: Option<QuantTensor>,
    pub window: Window,
    pub src_dims: Vec<Dim>,
    pub dst_dims: Vec<Dim>,
}

/// A quantized global average pooling over the spatial positions of `[N, C, D1..Dk]`.
///
/// ```text
/// P     = D1·..·Dk
/// acc   = Σ_i x[n, c, i] − zp_x · P                           (exact in i32)
/// S     = x_scale / (y_scale · f32(P))                          (f32: the product first)
/// dst   = saturate(round_half_even(f32(acc) · S) + zp_y)
/// ```
///
/// onnxruntime's QLinearGlobalAveragePool (`onnxruntime/core/mlas/lib/qlgavgpool.cpp`:
/// the bias `-ZeroPointInput * ImageSize`, `scale = ScaleInput / (ScaleOutput *
/// float(ImageSize))`, then `MlasRequantizeOutput` without bias). onnxruntime rejects a
/// scale outside `[2^-32, 256)` and images of 2^24 positions or more; we compute them.
#[derive(Clone, Debug, PartialEq)]
pub struct QGlobalAvgPool {
    pub src: QuantTensor,
    pub src_dims: Vec<Dim>,
    /// `S` above, when `P` is known.
    pub scale: Option<f32>,
    pub dst: QuantTensor,
    /// `[N, C, 1, .., 1]`.
    pub dst_dims: Vec<Dim>,
}

impl Partition {
    /// A `QuantizedConv` partition's convolution alone: its residual dropped and its source its
    /// only input (what the tuner measures; the output keeps the add's tensor, of the same
    /// shape). Any other partition unchanged.
    pub fn without_residual(&self) -> Partition {
        let mut p = self.clone();
        if let PartitionKind::QuantizedConv(c) = &mut p.kind
            && c.residual.take().is_some()
        {
            p.inputs.truncate(1);
        }
        p
    }
}

impl FinalizedGraph {
    /// The partitions of the graph under `policy`, in execution order (module doc). Every op is
    /// in at least one partition.
    pub fn get_partitions(&self, policy: PartitionPolicy) -> Vec<Partition> {
        let groups = match policy {
            PartitionPolicy::Fusion => fusion::fuse(self, true),
            PartitionPolicy::FusionWithoutSum => fusion::fuse(self, false),
            PartitionPolicy::Debug => self.order().iter().map(|&op| fusion::single(self, op)).collect(),
        };
        let position = |op: OpId| self.order().iter().position(|&o| o == op).unwrap_or(usize::MAX);
        let mut groups: Vec<fusion::Group> = groups;
        for g in &mut groups {
            g.ops.sort_by_key(|&o| position(o));
        }
        groups.sort_by_key(|g| g.ops.last().map_or(0, |&o| position(o)));
        groups
            .into_iter()
            .enumerate()
            .map(|(i, g)| Partition {
                id: PartitionId::from_u32(i as u32),
                ops: g.ops,
                inputs: g.inputs,
                outputs: g.outputs,
                kind: g.kind,
            })
            .collect()
    }
}

impl fmt::Display for PartitionPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PartitionPolicy::Fusion => "fusion",
            PartitionPolicy::FusionWithoutSum => "fusion without sum",
            PartitionPolicy::Debug => "debug",
        })
    }
}
