"""QLinearConv cases run by onnxruntime, for `examples/qconv_against_ort.rs`.

Builds one-node QLinearConv models (u8 or s8 activations, s8 weights per tensor or per output
channel, an i32 bias; the stem, 3x3, 1x1 stride 2 and narrow geometries), runs them on
onnxruntime's CPU provider on one thread, and writes each case's parameters, its NHWC source
and onnxruntime's NHWC output as JSON to the path given. The weights are 7-bit ([-64, 63]) by
default, where onnxruntime's AVX2 u8 x s8 kernels are exact; `--full-range` draws [-127, 127].

    python3 scripts/peers/qlinearconv_cases.py cases.json [--full-range]
    cargo run --release --example qconv_against_ort -- cases.json
"""
import json
import sys

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

cases = [
    # name, h, w, ic, oc, k, stride, pad, src_dtype, dst_dtype, per_channel
    ("stem", 32, 30, 3, 16, 7, 2, 3, "u8", "u8", True),
    ("c3x3", 14, 14, 32, 24, 3, 1, 1, "u8", "u8", True),
    ("c1x1s2", 14, 13, 24, 40, 1, 2, 0, "u8", "u8", False),
    ("s8", 9, 9, 16, 16, 3, 2, 1, "s8", "s8", True),
    ("odd", 7, 6, 5, 12, 3, 1, 1, "u8", "u8", True),
]
rng = np.random.default_rng(0)
out = []
for (name, h, w, ic, oc, k, s, p, sd, dd, pc) in cases:
    sdt = np.uint8 if sd == "u8" else np.int8
    ddt = np.uint8 if dd == "u8" else np.int8
    x = rng.integers(np.iinfo(sdt).min, np.iinfo(sdt).max + 1, size=(1, ic, h, w)).astype(sdt)
    lo, hi = (-127, 128) if "--full-range" in sys.argv else (-64, 64)
    wt = rng.integers(lo, hi, size=(oc, ic, k, k)).astype(np.int8)
    bias = rng.integers(-5000, 5000, size=(oc,)).astype(np.int32)
    xs = np.float32(rng.uniform(0.005, 0.05)); ys = np.float32(rng.uniform(0.02, 0.3))
    ws = rng.uniform(0.001, 0.02, size=(oc if pc else 1,)).astype(np.float32)
    xz = sdt(rng.integers(100, 150) if sd == "u8" else rng.integers(-20, 20))
    yz = ddt(rng.integers(100, 150) if dd == "u8" else rng.integers(-20, 20))
    tt = TensorProto.UINT8 if sd == "u8" else TensorProto.INT8
    dt = TensorProto.UINT8 if dd == "u8" else TensorProto.INT8
    inits = [
        numpy_helper.from_array(np.array(xs, np.float32), "xs"), numpy_helper.from_array(np.array(xz, sdt), "xz"),
        numpy_helper.from_array(wt, "w"), numpy_helper.from_array(ws if pc else ws.reshape(()), "ws"),
        numpy_helper.from_array(np.zeros(ws.shape if pc else (), np.int8), "wz"),
        numpy_helper.from_array(np.array(ys, np.float32), "ys"), numpy_helper.from_array(np.array(yz, ddt), "yz"),
        numpy_helper.from_array(bias, "b"),
    ]
    node = helper.make_node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"], ["y"],
                            kernel_shape=[k, k], strides=[s, s], pads=[p, p, p, p])
    oh = (h + 2 * p - k) // s + 1; ow = (w + 2 * p - k) // s + 1
    g = helper.make_graph([node], name, [helper.make_tensor_value_info("x", tt, [1, ic, h, w])],
                          [helper.make_tensor_value_info("y", dt, [1, oc, oh, ow])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    so = ort.SessionOptions(); so.intra_op_num_threads = 1
    sess = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
    y = sess.run(None, {"x": x})[0]
    out.append(dict(name=name, h=h, w=w, ic=ic, oc=oc, k=k, s=s, p=p, sd=sd, dd=dd,
                    x=x.transpose(0, 2, 3, 1).astype(np.int64).ravel().tolist(), wt=wt.astype(np.int64).ravel().tolist(),
                    bias=bias.tolist(), xs=float(xs), ys=float(ys), ws=[float(v) for v in ws], xz=int(xz), yz=int(yz),
                    y=y.transpose(0, 2, 3, 1).astype(np.int64).ravel().tolist()))
json.dump(out, open(sys.argv[1], "w"))
print("ok", len(out))
