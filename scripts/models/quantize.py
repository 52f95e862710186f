"""Quantizes a float ONNX model with onnxruntime's static quantizer, as its documentation does it.

First onnxruntime's pre-processing (`quant_pre_process`: shape inference and the basic graph
optimizations, which fold BatchNormalization into the Conv before it; `--no-preprocess` skips
it), then `quantize_static` calibrated on seeded random inputs (MinMax), written as QDQ
(QuantizeLinear/DequantizeLinear pairs around float operators) or as QOperator (QLinearConv,
com.microsoft's QLinearAdd, QGemm, ...). Every input of the model is fed `--samples` tensors
drawn from one seeded generator: standard normal (`--data normal`, the range of normalized
images) or uniform in [0, 1) (`--data uniform`); a symbolic dimension is taken as 1.

Needs numpy, onnx and onnxruntime. Commands (from the repository root):

  # QDQ, u8 activations, s8 weights per output channel:
  python scripts/models/quantize.py --model resnet18.onnx --format qdq --activation u8 --per-channel \\
      --out resnet18_qdq_u8_pc.onnx
  # QOperator, u8 activations, per-tensor s8 weights with 7-bit range, converted up to opset 21:
  python scripts/models/quantize.py --model resnet18.onnx --format qoperator --activation u8 \\
      --reduce-range --opset 21 --out resnet18_qop_u8_pt_rr.onnx

`make_models.py` (this directory) makes the repository's set of variants with this script.
"""
import argparse
import os
import tempfile

import numpy as np
import onnx
from onnx import version_converter
from onnxruntime.quantization import CalibrationDataReader, CalibrationMethod, QuantFormat, QuantType, quantize_static
from onnxruntime.quantization.shape_inference import quant_pre_process

FORMATS = {"qdq": QuantFormat.QDQ, "qoperator": QuantFormat.QOperator}
TYPES = {"u8": QuantType.QUInt8, "s8": QuantType.QInt8}
NUMPY_TYPES = {
    onnx.TensorProto.FLOAT: np.float32,
    onnx.TensorProto.FLOAT16: np.float16,
    onnx.TensorProto.DOUBLE: np.float64,
}


class RandomInputs(CalibrationDataReader):
    """`samples` feeds of seeded random tensors, one per graph input that is not an initializer."""

    def __init__(self, model, samples, seed, data):
        initializers = {t.name for t in model.graph.initializer}
        rng = np.random.default_rng(seed)
        self.feeds = []
        inputs = [i for i in model.graph.input if i.name not in initializers]
        for _ in range(samples):
            feed = {}
            for value in inputs:
                tensor = value.type.tensor_type
                dtype = NUMPY_TYPES.get(tensor.elem_type)
                if dtype is None:
                    raise SystemExit(f"input {value.name}: calibration feeds float inputs only")
                shape = [d.dim_value if d.HasField("dim_value") else 1 for d in tensor.shape.dim]
                x = rng.standard_normal(shape) if data == "normal" else rng.random(shape)
                feed[value.name] = x.astype(dtype)
            self.feeds.append(feed)
        self.next = 0

    def get_next(self):
        if self.next == len(self.feeds):
            return None
        self.next += 1
        return self.feeds[self.next - 1]


def default_opset(model):
    return next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))


def quantize(model_path, out, fmt="qdq", activation="u8", weight="s8", per_channel=True, reduce_range=False,
             opset=None, samples=8, seed=0, data="normal", preprocess=True):
    """Writes the quantized model to `out`; returns it as an `onnx.ModelProto`."""
    with tempfile.TemporaryDirectory() as tmp:
        source = model_path
        if preprocess:
            # Symbolic shape inference needs sympy; the models here have static shapes or a
            # symbolic batch, which onnx's own shape inference handles.
            quant_pre_process(source, os.path.join(tmp, "preprocessed.onnx"), skip_symbolic_shape=True)
            source = os.path.join(tmp, "preprocessed.onnx")
        # onnx's converter has adapters upward only for several operators (Relu,
        # BatchNormalization, ...); a lower opset is the float model's to choose.
        have = default_opset(onnx.load(source))
        if opset is not None and opset < have:
            raise SystemExit(f"--opset {opset}: the model has opset {have}; build the float model with "
                             f"`resnet18.py --opset {opset}` instead (onnx converts upward only)")
        if opset is not None and opset > have:
            converted = version_converter.convert_version(onnx.load(source), opset)
            source = os.path.join(tmp, "converted.onnx")
            onnx.save(converted, source)
        reader = RandomInputs(onnx.load(source), samples, seed, data)
        quantize_static(
            source,
            out,
            reader,
            quant_format=FORMATS[fmt],
            per_channel=per_channel,
            reduce_range=reduce_range,
            activation_type=TYPES[activation],
            weight_type=TYPES[weight],
            calibrate_method=CalibrationMethod.MinMax,
        )
    model = onnx.load(out)
    onnx.checker.check_model(model)
    return model


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="the float .onnx model")
    ap.add_argument("--out", required=True, help="the quantized .onnx file to write")
    ap.add_argument("--format", choices=FORMATS, default="qdq", help="QDQ pairs or QOperator operators")
    ap.add_argument("--activation", choices=TYPES, default="u8", help="type of quantized activations")
    ap.add_argument("--weight", choices=TYPES, default="s8", help="type of quantized weights")
    granularity = ap.add_mutually_exclusive_group()
    granularity.add_argument("--per-channel", dest="per_channel", action="store_true", default=True,
                             help="one weight scale per output channel (the default)")
    granularity.add_argument("--per-tensor", dest="per_channel", action="store_false",
                             help="one weight scale per tensor")
    ap.add_argument("--reduce-range", action="store_true", help="7-bit weights (onnxruntime's reduce_range)")
    ap.add_argument("--opset", type=int,
                    help="convert the model up to this opset of the default domain (a lower one: build the "
                         "float model at it)")
    ap.add_argument("--samples", type=int, default=8, help="calibration inputs")
    ap.add_argument("--seed", type=int, default=0, help="seed of the calibration inputs")
    ap.add_argument("--data", choices=["normal", "uniform"], default="normal", help="calibration distribution")
    ap.add_argument("--no-preprocess", dest="preprocess", action="store_false",
                    help="skip onnxruntime's pre-processing (BatchNormalization then stays float)")
    args = ap.parse_args()
    if args.samples < 1:
        ap.error("--samples must be positive")
    model = quantize(args.model, args.out, args.format, args.activation, args.weight, args.per_channel,
                     args.reduce_range, args.opset, args.samples, args.seed, args.data, args.preprocess)
    print(f"{args.out}: {len(model.graph.node)} nodes, opsets "
          + ", ".join(f"{o.domain or 'ai.onnx'} {o.version}" for o in model.opset_import))


if __name__ == "__main__":
    main()
