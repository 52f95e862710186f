"""Whole-network latency of a peer runtime on an ONNX file, as `tensorlift run` reports ours.

onnxruntime: a CPU session with all graph optimizations and `intra_op_num_threads`, the session
creation timed (what its compile costs), then warm-up runs and single runs timed until both
--min-runs and --min-time are reached (the median). OpenVINO: `read_model` + `compile_model`
timed, then `INFERENCE_NUM_THREADS` threads, latency hint, the same timing. The input is seeded
standard normal data of the model's input shape.

Prints one JSON object: peer, version, model, threads, compile_ms, median_ms, min_ms, runs.

  /tmp/peers-venv/bin/python scripts/peers/network.py --peer ort --model resnet18_qop_u8_pc.onnx --threads 1
  /tmp/peers-venv/bin/python scripts/peers/network.py --peer ov --model resnet18_qdq_u8_pc.onnx --threads 2
"""
import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import argparse  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
import onnx  # noqa: E402


def timed(run, min_runs, min_time):
    for _ in range(3):
        run()
    times = []
    start = time.perf_counter()
    while len(times) < min_runs or time.perf_counter() - start < min_time:
        t = time.perf_counter()
        run()
        times.append(time.perf_counter() - t)
    return times


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--peer", choices=["ort", "ov"], required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--min-runs", type=int, default=20)
    ap.add_argument("--min-time", type=float, default=1.0)
    args = ap.parse_args()
    proto = onnx.load(args.model, load_external_data=False)
    inp = proto.graph.input[0]
    shape = [d.dim_value or 1 for d in inp.type.tensor_type.shape.dim]
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    if args.peer == "ort":
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = args.threads
        options.inter_op_num_threads = 1
        t = time.perf_counter()
        session = ort.InferenceSession(args.model, options, providers=["CPUExecutionProvider"])
        compile_s = time.perf_counter() - t
        name = session.get_inputs()[0].name
        times = timed(lambda: session.run(None, {name: x}), args.min_runs, args.min_time)
        version = ort.__version__
    else:
        import openvino as ov

        core = ov.Core()
        t = time.perf_counter()
        model = core.read_model(args.model)
        compiled = core.compile_model(
            model, "CPU", {"INFERENCE_NUM_THREADS": args.threads, "PERFORMANCE_HINT": "LATENCY", "NUM_STREAMS": 1}
        )
        compile_s = time.perf_counter() - t
        request = compiled.create_infer_request()
        times = timed(lambda: request.infer({0: x}), args.min_runs, args.min_time)
        version = ov.__version__
    print(json.dumps({
        "peer": args.peer, "version": version, "model": os.path.basename(args.model), "threads": args.threads,
        "compile_ms": compile_s * 1e3, "median_ms": statistics.median(times) * 1e3, "min_ms": min(times) * 1e3,
        "runs": len(times),
    }))


if __name__ == "__main__":
    main()
