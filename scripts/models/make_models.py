"""Makes the repository's ResNet-18 ONNX models: the small test set, or the full-size set.

The test set (`tests/models/`, committed; the Rust tests read every file, `tests/it/onnx.rs`):

  resnet18_w8_s32_qdq_u8_pc.onnx    QDQ, u8 activations, s8 weights per channel
  resnet18_w8_s32_qdq_s8_pc.onnx    QDQ, s8 activations, s8 weights per channel
  resnet18_w8_s32_qop_u8_pc.onnx    QOperator, u8 activations, s8 weights per channel
  resnet18_w8_s32_qop_u8_pt.onnx    QOperator, u8 activations, s8 weights per tensor
  resnet18_w8_s32_qop_u8_pc_rr.onnx QOperator, u8 activations, 7-bit s8 weights per channel
  resnet18_w8_s32_qdq_u8_pc_rr.onnx QDQ, u8 activations, 7-bit s8 weights per channel
  resnet18_w2_s32_float.onnx        float, BatchNormalization present
  resnet18_w1_s8_c10_qop_u8_pc.onnx a tiny QOperator model, truncated at every length by the fuzz test

`wW_sS` is the width (stage channels W, 2W, 4W, 8W) and the input size ([1, 3, S, S]); the
quantized models of width 8 come from a float model of width 8 (not kept: its f32 weights make
it too large to commit), the float test model has width 2 for the same reason. The full set
(`--full`) is the real network (width 64, 224x224, 1000 classes): the float model with
BatchNormalization and folded, and the four quantized variants above, in `--out-dir`.

Every model is deterministic: resnet18.py's weights (seed 0) and quantize.py's calibration
inputs (seed 0, 8 standard normal samples). Needs numpy, onnx and onnxruntime. Commands (from
the repository root):

  python scripts/models/make_models.py                                  # the test set, into tests/models/
  python scripts/models/make_models.py --full --out-dir /tmp/resnet18   # the full-size set
"""
import argparse
import os
import sys
import tempfile

import onnx

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import quantize  # noqa: E402
import resnet18  # noqa: E402

# name suffix: quantize.quantize arguments.
QUANTIZED = {
    "qdq_u8_pc": dict(fmt="qdq", activation="u8", per_channel=True),
    "qdq_s8_pc": dict(fmt="qdq", activation="s8", per_channel=True),
    "qop_u8_pc": dict(fmt="qoperator", activation="u8", per_channel=True),
    "qop_u8_pt": dict(fmt="qoperator", activation="u8", per_channel=False),
    # onnxruntime's reduce_range: 7-bit weights, on which its AVX2 u8·s8 kernels (vpmaddubsw's
    # i16 pair sums cannot saturate) are exact.
    "qop_u8_pc_rr": dict(fmt="qoperator", activation="u8", per_channel=True, reduce_range=True),
    "qdq_u8_pc_rr": dict(fmt="qdq", activation="u8", per_channel=True, reduce_range=True),
}


def save(model, path):
    onnx.save(model, path)
    print(f"{path}: {os.path.getsize(path)} bytes")


def quantized_set(tmp, out_dir, prefix, variants, **float_args):
    """The quantized `variants` of one float model (kept in `tmp`)."""
    source = os.path.join(tmp, f"{prefix}_float.onnx")
    onnx.save(resnet18.build(**float_args), source)
    for suffix in variants:
        path = os.path.join(out_dir, f"{prefix}_{suffix}.onnx")
        quantize.quantize(source, path, **QUANTIZED[suffix])
        print(f"{path}: {os.path.getsize(path)} bytes")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out-dir", help="where to write (default: tests/models/ for the test set)")
    ap.add_argument("--full", action="store_true", help="the full-size set (width 64, 224x224)")
    args = ap.parse_args()
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    out_dir = args.out_dir or (None if args.full else os.path.join(root, "tests", "models"))
    if out_dir is None:
        ap.error("--full needs --out-dir (the full-size models are not committed)")
    os.makedirs(out_dir, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        if args.full:
            save(resnet18.build(), os.path.join(out_dir, "resnet18_float.onnx"))
            save(resnet18.build(fold_bn=True), os.path.join(out_dir, "resnet18_float_folded.onnx"))
            quantized_set(tmp, out_dir, "resnet18", QUANTIZED)
        else:
            quantized_set(tmp, out_dir, "resnet18_w8_s32", QUANTIZED, width=8, size=32)
            save(resnet18.build(width=2, size=32), os.path.join(out_dir, "resnet18_w2_s32_float.onnx"))
            quantized_set(tmp, out_dir, "resnet18_w1_s8_c10", ["qop_u8_pc"], width=1, size=8, classes=10)


if __name__ == "__main__":
    main()
