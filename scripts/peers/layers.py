"""The resnet-18 int8 layers of `tensorlift resnet18`, built as ONNX QDQ models for the peers.

The table (R1..R11, FC; batch 1) is `schedules/src/resnet18.rs`'s, and every layer gets the data
and quantization `tensorlift resnet18` runs, drawn from the same generator with the same seeds
(`resnet18::quantization` and the CLI's `LayerCase::new`), so a peer computes the same layer on
the same numbers:

  * source: u8 [1, IC, H, W] (FC: [1, IC]), uniform in 0..255, scale 0.02, zero point 128;
  * weights: s8 [OC, IC, KH, KW] (FC: [OC, IC]), symmetric, uniform in [-127, 127] (`full`) or
    [-64, 63] (`7bit`, what onnxruntime's quantizer gives with `reduce_range`), one f32 scale per
    output channel in [0.005, 0.015);
  * bias: s32 in -1000..999 with scale `0.02 * weight_scale[oc]`;
  * output: u8, zero point 128, a scale that maps one standard deviation of the real output to
    32 steps; relu off.

The model is QDQ: DequantizeLinear of the source, the weights (per channel) and the bias, then
Conv (FC: Gemm with transB) and QuantizeLinear to u8. onnxruntime fuses it into QLinearConv or
QGemm, OpenVINO into an int8 convolution or fully connected layer.

Used by bench_ort.py, bench_ov.py and exactness_ort.py (this directory); it has no command line.
"""
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

# name: (IC, OC, H = W, K, stride, pad), in table order (the seeds follow the position).
CONV_LAYERS = {
    "R1": (3, 64, 224, 7, 2, 3),
    "R2": (64, 64, 56, 3, 1, 1),
    "R3": (64, 128, 56, 3, 2, 1),
    "R4": (64, 128, 56, 1, 2, 0),
    "R5": (128, 128, 28, 3, 1, 1),
    "R6": (128, 256, 28, 3, 2, 1),
    "R7": (128, 256, 28, 1, 2, 0),
    "R8": (256, 256, 14, 3, 1, 1),
    "R9": (256, 512, 14, 3, 2, 1),
    "R10": (256, 512, 14, 1, 2, 0),
    "R11": (512, 512, 7, 3, 1, 1),
}
FC = (512, 1000)  # in features, out features
ALL = list(CONV_LAYERS) + ["FC"]

WEIGHT_RANGES = {"full": (-127, 127), "7bit": (-64, 63)}

SRC_SCALE = np.float32(0.02)
SRC_ZERO_POINT = 128
DST_ZERO_POINT = 128
# Standard deviations of the uniform source and full-range weights, and the output steps per
# standard deviation of the real output (`resnet18.rs`).
SRC_STD = np.float32(73.9)
WEI_STD = np.float32(73.6)
DST_STEPS_PER_STD = np.float32(32.0)

OPSET = 21


@dataclass
class Layer:
    """One layer's shapes, data and quantization (the arrays in ONNX's layouts)."""

    name: str
    src: np.ndarray  # u8 [1, IC, H, W] or [1, IC]
    weights: np.ndarray  # s8 [OC, IC, K, K] or [OC, IC]
    wei_scales: np.ndarray  # f32 [OC]
    bias: np.ndarray  # s32 [OC], scale SRC_SCALE * wei_scales
    dst_scale: np.float32
    stride: int = 1
    pad: int = 0

    @property
    def is_conv(self):
        return self.weights.ndim == 4

    @property
    def out_shape(self):
        oc = self.weights.shape[0]
        if not self.is_conv:
            return (1, oc)
        h, k = self.src.shape[2], self.weights.shape[2]
        oh = (h + 2 * self.pad - k) // self.stride + 1
        return (1, oc, oh, oh)

    @property
    def ops(self):
        """2 * multiply-adds, the GOPS numerator: 2*OC*OH*OW*IC*KH*KW."""
        per_output = int(np.prod(self.weights.shape[1:]))
        return 2 * int(np.prod(self.out_shape)) * per_output


# --- the table's generator (`resnet18::Lcg`, `resnet18::uniform`) ---------------------------

_MASK = (1 << 64) - 1
_MUL = 6364136223846793005
_INC = 1442695040888963407
_BLOCK = 4096


def uniform(n, seed, lo, hi):
    """`n` integers uniform in lo..=hi, equal to `resnet18::uniform(n, seed, lo, hi)`.

    The 64-bit LCG is stepped in blocks: the first block one step at a time, every later one
    from the block before by the affine map of `_BLOCK` steps (numpy's uint64 arithmetic wraps
    modulo 2^64, as the Rust code's `wrapping_mul` and `wrapping_add` do).
    """
    state = ((seed * 0x9E3779B97F4A7C15) & _MASK) | 1
    first = []
    for _ in range(min(n, _BLOCK)):
        state = (state * _MUL + _INC) & _MASK
        first.append(state)
    mul, inc = 1, 0
    for _ in range(_BLOCK):
        mul, inc = (mul * _MUL) & _MASK, (inc * _MUL + _INC) & _MASK
    blocks = [np.array(first, dtype=np.uint64)]
    for _ in range(1, -(-n // _BLOCK)):
        blocks.append(blocks[-1] * np.uint64(mul) + np.uint64(inc))
    states = np.concatenate(blocks)[:n]
    draws = (states >> np.uint64(33)).astype(np.int64)
    return lo + draws % (hi - lo + 1)


def _f32_sum(values):
    """The f32 sum in order, as Rust's `Iterator::sum::<f32>` (numpy's sum is pairwise)."""
    total = np.float32(0.0)
    for v in values:
        total = np.float32(total + v)
    return total


def position(name):
    """The layer's position in the table (R1 is 0, FC is 11)."""
    return ALL.index(name)


def build_layer(name, weights="full"):
    """The layer `name` with the data and quantization `tensorlift resnet18 --weights W` uses."""
    seed = 1000 * (position(name) + 1)
    if name == "FC":
        ic, oc = FC
        src_dims, wei_dims, stride, pad = (1, ic), (oc, ic), 1, 0
    else:
        ic, oc, hw, k, stride, pad = CONV_LAYERS[name]
        src_dims, wei_dims = (1, ic, hw, hw), (oc, ic, k, k)
    lo, hi = WEIGHT_RANGES[weights]
    src = uniform(int(np.prod(src_dims)), seed, 0, 255).astype(np.uint8).reshape(src_dims)
    wei = uniform(int(np.prod(wei_dims)), seed + 1, lo, hi).astype(np.int8).reshape(wei_dims)
    # Every step in f32, in the order `resnet18::quantization` writes it.
    u = uniform(oc, seed + 2, 0, 9999).astype(np.float32)
    wei_scales = np.float32(0.005) + np.float32(0.01) * u / np.float32(1e4)
    bias = uniform(oc, seed + 3, -1000, 999).astype(np.int32)
    fan_in = np.float32(np.prod(wei_dims[1:]))
    mean_scale = _f32_sum(wei_scales) / np.float32(oc)
    output_std = SRC_SCALE * mean_scale * np.sqrt(fan_in) * SRC_STD * WEI_STD
    dst_scale = np.float32(output_std / DST_STEPS_PER_STD)
    return Layer(name, src, wei, wei_scales.astype(np.float32), bias, dst_scale, stride, pad)


# --- the ONNX model ------------------------------------------------------------------------


def build_model(layer):
    """`layer` as a QDQ ONNX model: input `x` (u8), output `y` (u8)."""
    oc = layer.weights.shape[0]
    bias_scale = (SRC_SCALE * layer.wei_scales).astype(np.float32)
    inits = [
        numpy_helper.from_array(np.array(SRC_SCALE, dtype=np.float32), "x_scale"),
        numpy_helper.from_array(np.array(SRC_ZERO_POINT, dtype=np.uint8), "x_zp"),
        numpy_helper.from_array(layer.weights, "w_q"),
        numpy_helper.from_array(layer.wei_scales, "w_scale"),
        numpy_helper.from_array(np.zeros(oc, dtype=np.int8), "w_zp"),
        numpy_helper.from_array(layer.bias, "b_q"),
        numpy_helper.from_array(bias_scale, "b_scale"),
        numpy_helper.from_array(np.zeros(oc, dtype=np.int32), "b_zp"),
        numpy_helper.from_array(np.array(layer.dst_scale, dtype=np.float32), "y_scale"),
        numpy_helper.from_array(np.array(DST_ZERO_POINT, dtype=np.uint8), "y_zp"),
    ]
    nodes = [
        helper.make_node("DequantizeLinear", ["x", "x_scale", "x_zp"], ["x_f"]),
        helper.make_node("DequantizeLinear", ["w_q", "w_scale", "w_zp"], ["w_f"], axis=0),
        helper.make_node("DequantizeLinear", ["b_q", "b_scale", "b_zp"], ["b_f"], axis=0),
    ]
    if layer.is_conv:
        k = layer.weights.shape[2]
        nodes.append(helper.make_node(
            "Conv", ["x_f", "w_f", "b_f"], ["y_f"], kernel_shape=[k, k],
            strides=[layer.stride] * 2, pads=[layer.pad] * 4))
    else:
        nodes.append(helper.make_node("Gemm", ["x_f", "w_f", "b_f"], ["y_f"], transB=1))
    nodes.append(helper.make_node("QuantizeLinear", ["y_f", "y_scale", "y_zp"], ["y"]))
    x = helper.make_tensor_value_info("x", TensorProto.UINT8, list(layer.src.shape))
    y = helper.make_tensor_value_info("y", TensorProto.UINT8, list(layer.out_shape))
    graph = helper.make_graph(nodes, f"tensorlift_{layer.name}", [x], [y], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                              producer_name="tensorlift scripts/peers")
    model.ir_version = 10
    onnx.checker.check_model(model)
    return model
