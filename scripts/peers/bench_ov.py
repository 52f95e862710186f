"""OpenVINO on the resnet-18 int8 layers of `tensorlift resnet18` (see layers.py).

OpenVINO reads the same QDQ ONNX model as bench_ort.py; its low-precision transformations turn
the DequantizeLinear/QuantizeLinear pairs into an int8 convolution or fully connected node where
the CPU plugin supports one (else it runs in another precision: the `node_precision` field
says which). For each layer and thread count: the model compiled for the CPU with
PERFORMANCE_HINT=LATENCY, one stream and INFERENCE_NUM_THREADS threads, input and output tensors
set once on preallocated arrays (shared memory, the counterpart of IO binding), warm-up calls,
then single infer() calls timed until --min-runs and --min-time are both reached. A second
compilation with PERF_COUNT=YES runs --profile-runs calls and gives the median real time of the
compute node(s) alone.

Prints one JSON object per line and measurement:
  peer, version, cpu, isa_flags, layer, weights, threads, ops (2*OC*OH*OW*IC*KH*KW),
  median_ms, min_ms, runs, gops (whole call), node (the compute node's type and
  implementation), node_precision, node_ms, node_gops, graph (the executed graph's layer
  types, in order), compile_ms, other_cores (CPU time of other processes during the timed
  calls, in cores).

Run it from the repository root, e.g. with the virtual environment of scripts/peers:
  python3 -m venv /tmp/peers-venv && /tmp/peers-venv/bin/pip install numpy onnx onnxruntime openvino
  /tmp/peers-venv/bin/python scripts/peers/bench_ov.py --layers R2 FC --threads 1 --min-time 0.3
"""
import os

# numpy's OpenBLAS threads would spin on the cores being measured; nothing here needs BLAS.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import statistics  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
import onnx  # noqa: E402
import openvino as ov  # noqa: E402

import layers  # noqa: E402
import measure  # noqa: E402

# Layer types of the executed graph that do a layer's multiply-adds.
COMPUTE_TYPES = {"Convolution", "FullyConnected", "MatMul", "Gemm", "Deconvolution"}


def read_model(core, layer):
    """The layer's QDQ model, through a temporary ONNX file (what OpenVINO's frontend reads)."""
    with tempfile.TemporaryDirectory(prefix="tensorlift-ov-") as tmp:
        path = os.path.join(tmp, f"{layer.name}.onnx")
        onnx.save(layers.build_model(layer), path)
        return core.read_model(path)


def compile_model(core, model, threads, perf_count=False):
    """`model` compiled for the CPU for latency: one stream of `threads` threads."""
    config = {"PERFORMANCE_HINT": "LATENCY", "NUM_STREAMS": "1",
              "INFERENCE_NUM_THREADS": str(threads)}
    if perf_count:
        config["PERF_COUNT"] = "YES"
    return core.compile_model(model, "CPU", config)


class BoundRequest:
    """An infer request with its input and output tensors set once on the layer's source and a
    preallocated array (the tensors share the arrays' memory, and this object keeps them
    alive); calling it runs the model once."""

    def __init__(self, compiled, layer):
        self.request = compiled.create_infer_request()
        self.dst = np.empty(layer.out_shape, dtype=np.uint8)
        self.request.set_input_tensor(ov.Tensor(layer.src, shared_memory=True))
        self.request.set_output_tensor(ov.Tensor(self.dst, shared_memory=True))

    def __call__(self):
        self.request.infer()


def executed_graph(compiled):
    """(layer type, implementation, runtime precision) of every node OpenVINO executes."""
    def fields(info, *keys):
        return tuple(str(info[k].astype(str)) if k in info else "" for k in keys)

    return [fields(op.get_rt_info(), "layerType", "primitiveType", "runtimePrecision")
            for op in compiled.get_runtime_model().get_ordered_ops()]


def compute_node_ms(core, model, layer, threads, warmup, runs):
    """The median over `runs` calls of the compute nodes' summed real time, in ms."""
    call = BoundRequest(compile_model(core, model, threads, perf_count=True), layer)
    for _ in range(warmup):
        call()
    per_call = []
    for _ in range(runs):
        call()
        per_call.append(sum(p.real_time.total_seconds() for p in call.request.get_profiling_info()
                            if p.node_type in COMPUTE_TYPES))
    return statistics.median(per_call) * 1e3 if any(per_call) else None


def measure_layer(core, name, threads, args, version, cpu, flags):
    """One measurement of layer `name` at `threads` threads, as a JSON-ready dict."""
    layer = layers.build_layer(name, args.weights)
    model = read_model(core, layer)
    t0 = time.perf_counter()
    compiled = compile_model(core, model, threads)
    compile_ms = (time.perf_counter() - t0) * 1e3
    timed = measure.time_calls(BoundRequest(compiled, layer), args.warmup, args.min_runs,
                               args.min_time)
    graph = executed_graph(compiled)
    compute = [g for g in graph if g[0] in COMPUTE_TYPES]
    node_ms = compute_node_ms(core, model, layer, threads, args.warmup, args.profile_runs)
    return dict(peer="openvino", version=version, cpu=cpu, isa_flags=flags, layer=name,
                weights=args.weights, threads=threads, ops=layer.ops,
                median_ms=round(timed["median_ms"], 5), min_ms=round(timed["min_ms"], 5),
                runs=timed["runs"], gops=measure.gops(layer.ops, timed["median_ms"]),
                node="+".join(f"{t}:{impl}" for t, impl, _ in compute) or None,
                node_precision="+".join(p for _, _, p in compute) or None,
                node_ms=round(node_ms, 5) if node_ms else None,
                node_gops=measure.gops(layer.ops, node_ms),
                graph=[t for t, _, _ in graph], compile_ms=round(compile_ms, 1),
                other_cores=timed["other_cores"])


def main():
    args = measure.arguments(__doc__).parse_args()
    core = ov.Core()
    version = ov.get_version()
    cpu, flags = measure.cpu()
    measure.note(f"openvino {version} on {cpu}")
    for name in args.layers:
        for threads in args.threads:
            measure.emit(measure_layer(core, name, threads, args, version, cpu, flags))


if __name__ == "__main__":
    main()
