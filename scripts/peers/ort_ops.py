"""onnxruntime's node on the auto-scheduler's operator suite (`schedules::catalog::OpSpec::suite`).

Each operator becomes a one-node ONNX model computing what tensorlift's catalog definition
computes, where onnxruntime has such a node:
  conv2d (int8, NHWC in tensorlift; NCHW here, onnxruntime's layout): ConvInteger, u8 × s8 → s32,
      with `group` for the depthwise one;
  batch-matmul, matmul u8: MatMulInteger, u8 × s8 → s32;
  matmul f32: MatMul;  softmax: Softmax (axis -1);  layernorm: LayerNormalization (axis -1, eps 1e-5);
  pool: MaxPool on u8 (NCHW).
Timed as bench_ort.py times a layer: a CPU session with every graph optimization and
`intra_op_num_threads`, IO binding, warm-up, then single calls. Prints one JSON line per op:
peer, version, cpu, op (tensorlift's label), threads, ops, median_ms, min_ms, runs, gops,
other_cores.

  /tmp/peers-venv/bin/python scripts/peers/ort_ops.py --threads 1 --min-time 0.5
"""
import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import argparse  # noqa: E402

import numpy as np  # noqa: E402
import onnx  # noqa: E402
import onnxruntime as ort  # noqa: E402
from onnx import TensorProto, helper  # noqa: E402

import measure  # noqa: E402

U8, I8, I32, F32 = TensorProto.UINT8, TensorProto.INT8, TensorProto.INT32, TensorProto.FLOAT


def conv(ic, oc, h, w, k, stride, pad, groups):
    oh, ow = (h + 2 * pad - k) // stride + 1, (w + 2 * pad - k) // stride + 1
    node = helper.make_node("ConvInteger", ["x", "w"], ["y"], strides=[stride] * 2, pads=[pad] * 4,
                            group=groups, kernel_shape=[k, k])
    inputs = [("x", U8, [1, ic, h, w]), ("w", I8, [oc, ic // groups, k, k])]
    label = f"conv2d {h}x{w} {ic}->{oc} {k}x{k} s{stride} p{pad} g{groups}"
    return label, node, inputs, ("y", I32, [1, oc, oh, ow]), 2 * oc * oh * ow * (ic // groups) * k * k, 13


SUITE = [
    conv(32, 32, 112, 112, 3, 1, 1, 32),
    ("batch-matmul 12x128x64x128", helper.make_node("MatMulInteger", ["a", "b"], ["y"]),
     [("a", U8, [12, 128, 128]), ("b", I8, [12, 128, 64])], ("y", I32, [12, 128, 64]), 2 * 12 * 128 * 64 * 128, 13),
    conv(256, 64, 56, 56, 1, 1, 0, 1),
    conv(128, 128, 28, 28, 3, 1, 1, 1),
    ("matmul 512x512x512 f32", helper.make_node("MatMul", ["a", "b"], ["y"]),
     [("a", F32, [512, 512]), ("b", F32, [512, 512])], ("y", F32, [512, 512]), 2 * 512 ** 3, 13),
    ("softmax 1024x1024", helper.make_node("Softmax", ["x"], ["y"], axis=-1),
     [("x", F32, [1024, 1024])], ("y", F32, [1024, 1024]), 4 * 1024 * 1024, 13),
    ("layernorm 512x768", helper.make_node("LayerNormalization", ["x", "g", "b"], ["y"], axis=-1, epsilon=1e-5),
     [("x", F32, [512, 768]), ("g", F32, [768]), ("b", F32, [768])], ("y", F32, [512, 768]), 8 * 512 * 768, 17),
    ("pool 112x112x64 k3 s2", helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[3, 3], strides=[2, 2]),
     [("x", U8, [1, 64, 112, 112])], ("y", U8, [1, 64, 55, 55]), 64 * 55 * 55 * 9, 13),
]

NP = {U8: np.uint8, I8: np.int8, I32: np.int32, F32: np.float32}


def model(node, inputs, output, opset):
    graph = helper.make_graph([node], "op", [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
                              [helper.make_tensor_value_info(*output)])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m.SerializeToString()


def data(t, shape, rng):
    if t == F32:
        return rng.uniform(-2, 2, size=shape).astype(np.float32)
    lo, hi = (0, 255) if t == U8 else (-127, 127)
    return rng.integers(lo, hi + 1, size=shape).astype(NP[t])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", nargs="+", type=int, default=[1])
    ap.add_argument("--min-time", type=float, default=0.5)
    ap.add_argument("--min-runs", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--ops", nargs="*", default=None, help="labels to run (default: all)")
    a = ap.parse_args()
    name, flags = measure.cpu()
    rng = np.random.default_rng(0)
    for label, node, inputs, output, ops, opset in SUITE:
        if a.ops and label not in a.ops:
            continue
        m = model(node, inputs, output, opset)
        feeds = {n: data(t, s, rng) for n, t, s in inputs}
        for threads in a.threads:
            so = ort.SessionOptions()
            so.intra_op_num_threads = threads
            so.inter_op_num_threads = 1
            so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
            so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
            sess = ort.InferenceSession(m, so, providers=["CPUExecutionProvider"])
            binding = sess.io_binding()
            for n, v in feeds.items():
                binding.bind_cpu_input(n, v)
            out = np.empty(output[2], NP[output[1]])
            binding.bind_output(output[0], "cpu", 0, out.dtype, out.shape, out.ctypes.data)
            t = measure.time_calls(lambda: sess.run_with_iobinding(binding), a.warmup, a.min_runs, a.min_time)
            measure.emit(dict(peer="onnxruntime", version=ort.__version__, cpu=name, isa_flags=flags, op=label,
                              node=node.op_type, threads=threads, ops=ops, gops=measure.gops(ops, t["median_ms"]),
                              **t))


if __name__ == "__main__":
    main()
