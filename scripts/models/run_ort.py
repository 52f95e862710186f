"""Runs an ONNX model with onnxruntime on seeded inputs; writes the inputs and outputs as .npy.

Each graph input that is not an initializer gets one tensor from a generator seeded with
`--seed`, in graph order: floats standard normal (`--data normal`) or uniform in [0, 1)
(`--data uniform`), integers uniform over their type's range (bool: 0 or 1); a symbolic
dimension takes `--batch`. The files are `input_<i>.npy` and `output_<i>.npy` (`i`: the position
in the graph's inputs and outputs), with `io.txt` mapping each file to its ONNX name, so that
another runtime (tensorlift, OpenVINO) can be compared on exactly these numbers.

Needs numpy, onnx and onnxruntime. Commands (from the repository root):

  python scripts/models/run_ort.py --model tests/models/resnet18_w8_s32_qop_u8_pc.onnx --out-dir /tmp/qop
  # one thread, graph optimizations off (onnxruntime's plain kernels):
  python scripts/models/run_ort.py --model resnet18_qdq_u8_pc.onnx --threads 1 --opt-level disable --out-dir /tmp/qdq
"""
import argparse
import os

import numpy as np
import onnx
import onnxruntime as ort

OPT_LEVELS = {
    "disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
    "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
    "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
    "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
}


def random_input(rng, dtype, shape, data):
    if dtype == np.bool_:
        return rng.integers(0, 2, shape).astype(np.bool_)
    if np.issubdtype(dtype, np.integer):
        info = np.iinfo(dtype)
        return rng.integers(info.min, info.max, shape, endpoint=True, dtype=dtype)
    x = rng.standard_normal(shape) if data == "normal" else rng.random(shape)
    return x.astype(dtype)


def inputs_for(model, seed, data, batch):
    """The feeds: {name: array}, in graph order."""
    initializers = {t.name for t in model.graph.initializer}
    rng = np.random.default_rng(seed)
    feeds = {}
    for value in model.graph.input:
        if value.name in initializers:
            continue
        tensor = value.type.tensor_type
        dtype = onnx.helper.tensor_dtype_to_np_dtype(tensor.elem_type)
        shape = [d.dim_value if d.HasField("dim_value") else batch for d in tensor.shape.dim]
        feeds[value.name] = random_input(rng, dtype, shape, data)
    return feeds


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="the .onnx model")
    ap.add_argument("--out-dir", required=True, help="directory for input_<i>.npy, output_<i>.npy, io.txt")
    ap.add_argument("--seed", type=int, default=0, help="seed of the inputs")
    ap.add_argument("--data", choices=["normal", "uniform"], default="normal", help="distribution of float inputs")
    ap.add_argument("--batch", type=int, default=1, help="the value of symbolic dimensions")
    ap.add_argument("--threads", type=int, default=0, help="intra-op threads (0: onnxruntime's default)")
    ap.add_argument("--opt-level", choices=OPT_LEVELS, default="all", help="onnxruntime's graph optimizations")
    args = ap.parse_args()

    model = onnx.load(args.model)
    feeds = inputs_for(model, args.seed, args.data, args.batch)
    options = ort.SessionOptions()
    options.intra_op_num_threads = args.threads
    options.graph_optimization_level = OPT_LEVELS[args.opt_level]
    session = ort.InferenceSession(args.model, options, providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    outputs = session.run(names, feeds)

    os.makedirs(args.out_dir, exist_ok=True)
    lines = []
    for kind, items in (("input", feeds.items()), ("output", zip(names, outputs))):
        for i, (name, array) in enumerate(items):
            path = os.path.join(args.out_dir, f"{kind}_{i}.npy")
            np.save(path, array)
            lines.append(f"{kind}_{i}.npy\t{name}\t{array.dtype}\t{list(array.shape)}")
    with open(os.path.join(args.out_dir, "io.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
