"""Runs an ONNX model with onnxruntime on several seeded inputs and writes the inputs, the
outputs and, with --intermediates, every 8-bit tensor the graph computes, as .npy files, so
that tensorlift's partitions can be compared with onnxruntime's one by one.

The inputs are those of run_ort.py (this directory) for seeds `--seed`, `--seed + 1`, ...:
floats standard normal, integers uniform over their range. Intermediate tensors are made
outputs of the model (onnxruntime then keeps them; with its graph optimizations on, a QDQ
model's DequantizeLinear → Conv → QuantizeLinear still becomes one QLinearConv whose output is
the QuantizeLinear's). Files: `<seed>/input_0.npy`, `<seed>/output_<i>.npy`, and
`<seed>/t_<k>.npy` for the tensor named on line k of `tensors.txt`.

Needs numpy, onnx and onnxruntime. Command (from the repository root):

  python scripts/models/ort_intermediates.py --model tests/models/resnet18_w8_s32_qop_u8_pc_rr.onnx \\
      --seeds 20 --intermediates --out-dir /tmp/ort
"""
import argparse
import os
import sys

import numpy as np
import onnx
import onnxruntime as ort

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from run_ort import OPT_LEVELS, inputs_for  # noqa: E402

EIGHT_BIT = {onnx.TensorProto.UINT8, onnx.TensorProto.INT8}


# Ops whose output has the element type of their first input (shape inference does not know
# com.microsoft's quantized ops, so the types are followed through the graph here).
SAME_TYPE = {"QLinearAdd", "QLinearGlobalAveragePool", "QLinearConv", "QLinearMatMul", "MaxPool", "Relu",
             "Flatten", "Reshape", "Transpose", "Squeeze", "Unsqueeze", "Identity"}


def with_intermediates(model):
    """The model with every 8-bit node output as an extra output."""
    inferred = onnx.shape_inference.infer_shapes(model)
    types = {v.name: v.type.tensor_type.elem_type for v in inferred.graph.value_info}
    types.update({v.name: v.type.tensor_type.elem_type for v in model.graph.input})
    types.update({t.name: t.data_type for t in model.graph.initializer})
    for node in model.graph.node:
        out = node.output[0] if node.output else None
        if not out or out in types:
            continue
        if node.op_type in SAME_TYPE:
            types[out] = types.get(node.input[0])
        elif node.op_type == "QuantizeLinear" and len(node.input) > 2:
            types[out] = types.get(node.input[2])
        elif node.op_type == "QGemm" and len(node.input) > 8:
            types[out] = types.get(node.input[8])
    outputs = {o.name for o in model.graph.output}
    names = []
    for node in model.graph.node:
        for name in node.output:
            if name and name not in outputs and types.get(name) in EIGHT_BIT:
                names.append(name)
                model.graph.output.append(onnx.helper.make_tensor_value_info(name, types[name], None))
    return model, names


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--out-dir", required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--seeds", type=int, default=1, help="how many inputs (seeds seed, seed+1, ...)")
    ap.add_argument("--intermediates", action="store_true", help="also write every 8-bit tensor")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--opt-level", choices=OPT_LEVELS, default="all")
    args = ap.parse_args()

    model = onnx.load(args.model)
    names = []
    if args.intermediates:
        model, names = with_intermediates(model)
    options = ort.SessionOptions()
    options.intra_op_num_threads = args.threads
    options.graph_optimization_level = OPT_LEVELS[args.opt_level]
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    outputs = [o.name for o in session.get_outputs()]
    os.makedirs(args.out_dir, exist_ok=True)
    with open(os.path.join(args.out_dir, "tensors.txt"), "w") as f:
        f.write("".join(f"{n}\n" for n in names))
    for seed in range(args.seed, args.seed + args.seeds):
        feeds = inputs_for(model, seed, "normal", 1)
        results = dict(zip(outputs, session.run(outputs, feeds)))
        d = os.path.join(args.out_dir, str(seed))
        os.makedirs(d, exist_ok=True)
        for i, array in enumerate(feeds.values()):
            np.save(os.path.join(d, f"input_{i}.npy"), array)
        for i, o in enumerate(model.graph.output[: len(model.graph.output) - len(names)]):
            np.save(os.path.join(d, f"output_{i}.npy"), results[o.name])
        for k, n in enumerate(names):
            np.save(os.path.join(d, f"t_{k}.npy"), results[n])
    print(f"{args.seeds} inputs, {len(names)} intermediate tensors in {args.out_dir}")


if __name__ == "__main__":
    main()
