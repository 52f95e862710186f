"""A small float MobileNet-style network written with onnx.helper (no torch), and its quantized test set.

stem Conv 3x3/2 (3 -> W) + Relu; a residual depthwise-separable block (depthwise 3x3, groups W,
+ Clip(0, 6); pointwise 1x1 W -> W; Add with the block's input); a strided one (depthwise 3x3/2
+ Relu; pointwise 1x1 W -> 2W + Relu); a grouped 3x3 convolution (2 groups, dilation 2, pad 2)
+ Relu; GlobalAveragePool, Flatten, Gemm 2W -> classes. Every Conv has a bias (no
BatchNormalization). Weights are random (He normal, seed 0), biases small.

The test set (`tests/models/mobilenet/`, committed; `tests/it/engine_grouped.rs` and `onnx_ort.rs` read it), from
one float model of width 8 on a 16x16 input (not kept):

  mobilenet_w8_s16_qop_u8_pc.onnx     QOperator, u8 activations, s8 weights per channel
  mobilenet_w8_s16_qop_u8_pc_rr.onnx  the same with 7-bit weights (onnxruntime's AVX2 kernels exact)
  mobilenet_w8_s16_qdq_u8_pc_rr.onnx  QDQ, u8 activations, 7-bit s8 weights per channel

Needs numpy, onnx and onnxruntime (the quantizer). Commands (from the repository root):

  python scripts/models/mobilenet.py                                   # the test set
  python scripts/models/mobilenet.py --width 32 --size 224 --out-dir /tmp/mb --formats qop_u8_pc
      # a full-size-ish model: its first depthwise convolution runs on 112x112x32
  python scripts/models/mobilenet.py --width 32 --size 224 --no-grouped --out-dir /tmp/mb --formats qop_u8_pc
      # the same without the grouped convolution (depthwise-separable blocks only)
"""
import argparse
import os
import sys
import tempfile

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import quantize  # noqa: E402

OPSET = 17
VARIANTS = {
    "qop_u8_pc": dict(fmt="qoperator", activation="u8", per_channel=True),
    "qop_u8_pc_rr": dict(fmt="qoperator", activation="u8", per_channel=True, reduce_range=True),
    "qdq_u8_pc_rr": dict(fmt="qdq", activation="u8", per_channel=True, reduce_range=True),
}


def build(width=8, size=16, classes=10, seed=0, grouped=True):
    """The float model as an `onnx.ModelProto`."""
    rng = np.random.default_rng(seed)
    nodes, inits = [], []

    def const(name, array):
        inits.append(numpy_helper.from_array(np.ascontiguousarray(array), name))
        return name

    def conv(x, name, cin, cout, k, stride=1, groups=1, dilation=1, act=None):
        w = rng.normal(0.0, np.sqrt(2.0 / (cin // groups * k * k)), (cout, cin // groups, k, k)).astype(np.float32)
        b = rng.normal(0.0, 0.05, cout).astype(np.float32)
        pad = dilation * (k // 2)
        out = f"{name}.out"
        nodes.append(helper.make_node("Conv", [x, const(f"{name}.weight", w), const(f"{name}.bias", b)], [out],
                                      name=name, kernel_shape=[k, k], strides=[stride] * 2, pads=[pad] * 4,
                                      dilations=[dilation] * 2, group=groups))
        if act == "relu":
            nodes.append(helper.make_node("Relu", [out], [f"{name}.relu"], name=f"{name}.relu"))
            return f"{name}.relu"
        if act == "relu6":
            lo, hi = const(f"{name}.min", np.array(0.0, np.float32)), const(f"{name}.max", np.array(6.0, np.float32))
            nodes.append(helper.make_node("Clip", [out, lo, hi], [f"{name}.clip"], name=f"{name}.clip"))
            return f"{name}.clip"
        return out

    w = width
    x = conv("input", "stem", 3, w, 3, stride=2, act="relu")
    y = conv(x, "block1.dw", w, w, 3, groups=w, act="relu6")
    y = conv(y, "block1.pw", w, w, 1)
    nodes.append(helper.make_node("Add", [x, y], ["block1.add"], name="block1.add"))
    y = conv("block1.add", "block2.dw", w, w, 3, stride=2, groups=w, act="relu")
    y = conv(y, "block2.pw", w, 2 * w, 1, act="relu")
    if grouped:
        y = conv(y, "block3.grouped", 2 * w, 2 * w, 3, groups=2, dilation=2, act="relu")
    nodes.append(helper.make_node("GlobalAveragePool", [y], ["pool"], name="pool"))
    nodes.append(helper.make_node("Flatten", ["pool"], ["flat"], name="flatten", axis=1))
    fc_w = (rng.uniform(-1, 1, (classes, 2 * w)) / np.sqrt(2 * w)).astype(np.float32)
    fc_b = (rng.uniform(-1, 1, classes) / np.sqrt(2 * w)).astype(np.float32)
    nodes.append(helper.make_node("Gemm", ["flat", const("fc.weight", fc_w), const("fc.bias", fc_b)], ["logits"],
                                  name="fc", transB=1))
    graph = helper.make_graph(
        nodes, "mobilenet",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 3, size, size])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, classes])],
        inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    onnx.checker.check_model(model)
    return model


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out-dir", help="where to write (default: tests/models/mobilenet/)")
    ap.add_argument("--width", type=int, default=8)
    ap.add_argument("--size", type=int, default=16)
    ap.add_argument("--formats", nargs="+", choices=VARIANTS, default=list(VARIANTS))
    ap.add_argument("--keep-float", action="store_true", help="also write the float model")
    ap.add_argument("--no-grouped", dest="grouped", action="store_false", help="leave out the grouped convolution")
    args = ap.parse_args()
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    out_dir = args.out_dir or os.path.join(root, "tests", "models", "mobilenet")
    os.makedirs(out_dir, exist_ok=True)
    prefix = f"mobilenet_w{args.width}_s{args.size}" + ("" if args.grouped else "_dw")
    with tempfile.TemporaryDirectory() as tmp:
        source = os.path.join(args.out_dir if args.keep_float else tmp, f"{prefix}_float.onnx")
        onnx.save(build(args.width, args.size, grouped=args.grouped), source)
        for suffix in args.formats:
            path = os.path.join(out_dir, f"{prefix}_{suffix}.onnx")
            quantize.quantize(source, path, **VARIANTS[suffix])
            print(f"{path}: {os.path.getsize(path)} bytes")


if __name__ == "__main__":
    main()
