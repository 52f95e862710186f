"""onnxruntime on the resnet-18 int8 layers of `tensorlift resnet18` (see layers.py).

For each layer and thread count: a CPU session (all graph optimizations, so the QDQ model
runs as one QLinearConv or QGemm node) with `intra_op_num_threads` threads, input and output
bound once to preallocated buffers (IO binding), warm-up calls, then single calls timed until
--min-runs and --min-time are both reached: the whole call as a user sees it (median and
minimum). A second session with onnxruntime's profiler runs --profile-runs calls and gives
the median time of the compute node alone (its `_kernel_time` events), without the per-call
overhead and the other nodes (the layout transposes it may put around a convolution).

Prints one JSON object per line and measurement:
  peer, version, cpu, isa_flags, layer, weights, threads, ops (2*OC*OH*OW*IC*KH*KW),
  median_ms, min_ms, runs, gops (whole call), node (the compute node's operator),
  node_ms, node_gops, graph (every node's operator, in order), other_cores (CPU time of other
  processes during the timed calls, in cores).

Run it from the repository root, e.g. with the virtual environment of scripts/peers:
  python3 -m venv /tmp/peers-venv && /tmp/peers-venv/bin/pip install numpy onnx onnxruntime openvino
  /tmp/peers-venv/bin/python scripts/peers/bench_ort.py --layers R2 FC --threads 1 --min-time 0.3
  scripts/ort_avx2.sh --layers R2 --weights 7bit   # its AVX2 kernels on a CPU with more
"""
import os

# numpy's OpenBLAS threads would spin on the cores being measured; nothing here needs BLAS.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import json  # noqa: E402
import statistics  # noqa: E402
import tempfile  # noqa: E402

import numpy as np  # noqa: E402
import onnxruntime as ort  # noqa: E402

import layers  # noqa: E402
import measure  # noqa: E402

# Operators that do a layer's multiply-adds (fused int8 ones, and float ones if not fused).
COMPUTE_OPS = {"QLinearConv", "QGemm", "QLinearMatMul", "ConvInteger", "MatMulInteger",
               "Conv", "FusedConv", "Gemm", "FusedGemm", "MatMul"}


def session(model_bytes, threads, profile_dir=None):
    """A CPU session with every graph optimization and `threads` intra-op threads."""
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    if profile_dir:
        so.enable_profiling = True
        so.profile_file_prefix = os.path.join(profile_dir, "ort")
    return ort.InferenceSession(model_bytes, so, providers=["CPUExecutionProvider"])


class BoundCall:
    """`sess` with its input bound to the layer's source and its output to a preallocated
    array (the bound values share the arrays' memory, and this object keeps them alive);
    calling it runs the model once."""

    def __init__(self, sess, layer):
        self.sess, self.binding = sess, sess.io_binding()
        self.src = ort.OrtValue.ortvalue_from_numpy(layer.src)
        self.dst = ort.OrtValue.ortvalue_from_numpy(np.empty(layer.out_shape, dtype=np.uint8))
        self.binding.bind_ortvalue_input("x", self.src)
        self.binding.bind_ortvalue_output("y", self.dst)

    def __call__(self):
        self.sess.run_with_iobinding(self.binding)


def profiled_nodes(model_bytes, layer, threads, warmup, runs):
    """Per node (in execution order): its operator and the median of its last `runs` kernel
    times in ms, from onnxruntime's profiler."""
    with tempfile.TemporaryDirectory(prefix="tensorlift-ort-prof-") as tmp:
        sess = session(model_bytes, threads, profile_dir=tmp)
        call = BoundCall(sess, layer)
        for _ in range(warmup + runs):
            call()
        with open(sess.end_profiling()) as f:
            events = json.load(f)
    times, ops = {}, {}
    for e in events:
        if e.get("cat") == "Node" and e.get("name", "").endswith("_kernel_time"):
            times.setdefault(e["name"], []).append(e["dur"])
            ops[e["name"]] = e.get("args", {}).get("op_name", "?")
    return [(ops[n], statistics.median(t[-runs:]) * 1e-3) for n, t in times.items()]


def measure_layer(name, threads, args, version, cpu, flags):
    """One measurement of layer `name` at `threads` threads, as a JSON-ready dict."""
    layer = layers.build_layer(name, args.weights)
    model = layers.build_model(layer).SerializeToString()
    timed = measure.time_calls(BoundCall(session(model, threads), layer),
                               args.warmup, args.min_runs, args.min_time)
    nodes = profiled_nodes(model, layer, threads, args.warmup, args.profile_runs)
    compute = [(op, ms) for op, ms in nodes if op in COMPUTE_OPS]
    node_ms = sum(ms for _, ms in compute) if compute else None
    return dict(peer="onnxruntime", version=version, cpu=cpu, isa_flags=flags, layer=name,
                weights=args.weights, threads=threads, ops=layer.ops,
                median_ms=round(timed["median_ms"], 5), min_ms=round(timed["min_ms"], 5),
                runs=timed["runs"], gops=measure.gops(layer.ops, timed["median_ms"]),
                node="+".join(op for op, _ in compute) or None,
                node_ms=round(node_ms, 5) if node_ms else None,
                node_gops=measure.gops(layer.ops, node_ms),
                graph=[op for op, _ in nodes], other_cores=timed["other_cores"])


def main():
    args = measure.arguments(__doc__).parse_args()
    ort.set_default_logger_severity(3)
    cpu, flags = measure.cpu()
    measure.note(f"onnxruntime {ort.__version__} from {os.path.dirname(ort.__file__)} on {cpu}")
    for name in args.layers:
        for threads in args.threads:
            measure.emit(measure_layer(name, threads, args, ort.__version__, cpu, flags))


if __name__ == "__main__":
    main()
