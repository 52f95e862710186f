"""Is onnxruntime's u8 x s8 arithmetic exact? Its outputs against an exact reference in numpy.

onnxruntime runs each layer's QDQ model (layers.py; fused into QLinearConv or QGemm, one
thread) and its u8 outputs are compared with three references computed here:

  exact       the exact int32 accumulator acc = sum (x - 128) * w (numpy, no rounding anywhere),
              requantized as onnxruntime requantizes an int32 accumulator (MLAS):
              clamp(round_half_even(f32(acc + bias) * f32(x_scale * w_scale[oc] / y_scale)) + 128)
              so that an output differing from it comes from the accumulation alone;
  onednn      the same exact accumulator requantized in oneDNN's order
              (`Requantization::OneDnn` in schedules/src/quant.rs, which tensorlift's
              quantization library computes when asked for it):
              round(((x_scale * w_scale[oc]) * f32(acc) + bias_f32) / y_scale + 128);
              onnxruntime's order may differ from it by 1. tensorlift's networks and table
              layers requantize in onnxruntime's order, i.e. as `exact`;
  saturating  what VPMADDUBSW computes (the AVX2 u8 x s8 kernels without VNNI): raw u8 source
              (padding = the zero point 128) times s8 weights, the products of adjacent input
              channels of one kernel position summed in pairs, each pair sum saturated to int16,
              the pairs summed in int32, minus 128 * sum(w); requantized as `exact`. A peer
              equal to this and not to `exact` saturates pair sums.

Cases (--cases):
  table        the layer's data as `tensorlift resnet18` runs it (u8 source over 0..255);
  control      the source halved to 0..127: no pair sum can leave int16, so every exact
               kernel and every saturating one agree;
  adversarial  source 255 everywhere, the weights of each pair of adjacent input channels equal
               and extreme (127 or -127; 7-bit weights: 63 or -64) with a random sign: every pair
               sum of full-range weights saturates.
The control and adversarial cases set the output scale to spread the exact result over u8.

Prints one JSON object per line, layer and case: peer, version, cpu, isa_flags, layer, weights,
case, outputs, differ_exact (outputs differing from `exact`), differ_exact_pct, max_diff_exact,
differ_onednn, differ_onednn_over_1, differ_saturating, pairs, pairs_saturated (pair sums
outside int16 in the emulation), exact_saturated_pct (exact outputs at 0 or 255, the
`saturated_pct` of `tensorlift resnet18 --format json` on the table case); a summary on stderr.

Run it from the repository root, e.g. with the virtual environment of scripts/peers:
  /tmp/peers-venv/bin/python scripts/peers/exactness_ort.py --layers R2 FC
  /tmp/peers-venv/bin/python scripts/peers/exactness_ort.py --layers R2 FC --weights 7bit
  SCRIPT=scripts/peers/exactness_ort.py scripts/ort_avx2.sh --layers R2   # AVX2 kernels anywhere
"""
import os

# numpy's OpenBLAS threads would spin on the cores; the exact products need one.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import argparse  # noqa: E402
import dataclasses  # noqa: E402

import numpy as np  # noqa: E402
import onnxruntime as ort  # noqa: E402

import bench_ort  # noqa: E402
import layers  # noqa: E402
import measure  # noqa: E402

CASES = ("table", "control", "adversarial")
ZP = layers.SRC_ZERO_POINT


def columns(layer, src):
    """The source as im2col rows: (pixels, KH, KW, IC) raw u8 values as int32, padding = the
    zero point; the dense layer is one pixel of one kernel position."""
    if not layer.is_conv:
        return src.astype(np.int32).reshape(1, 1, 1, -1)
    _, ic, h, _ = src.shape
    k, s, p = layer.weights.shape[2], layer.stride, layer.pad
    oh = layer.out_shape[2]
    padded = np.full((ic, h + 2 * p, h + 2 * p), ZP, dtype=np.int32)
    padded[:, p:p + h, p:p + h] = src[0]
    cols = np.empty((oh * oh, k, k, ic), dtype=np.int32)
    for kh in range(k):
        for kw in range(k):
            patch = padded[:, kh:kh + s * oh:s, kw:kw + s * oh:s]  # (IC, OH, OW)
            cols[:, kh, kw, :] = patch.reshape(ic, -1).T
    return cols


def weight_rows(weights):
    """The weights as (OC, KH, KW, IC) int32, the order of `columns`."""
    if weights.ndim == 2:
        return weights.astype(np.int32)[:, None, None, :]
    return weights.transpose(0, 2, 3, 1).astype(np.int32)


def exact_accumulator(cols, wrows):
    """sum (x - zp) * w per (pixel, oc), exactly: in float64 every product and partial sum is
    an integer far below 2^53, so the matrix product (BLAS) rounds nothing."""
    x = (cols.reshape(cols.shape[0], -1) - ZP).astype(np.float64)
    w = wrows.reshape(wrows.shape[0], -1).astype(np.float64)
    return (x @ w.T).astype(np.int64)


def saturating_accumulator(cols, wrows):
    """VPMADDUBSW's accumulator: pairs of adjacent input channels (IC padded to even with a zero
    weight), each pair sum of raw u8 x s8 products saturated to int16, minus zp * sum(w).
    Returns it and the counts of pairs and of saturated pairs."""
    if cols.shape[-1] % 2:
        cols = np.concatenate([cols, np.zeros(cols.shape[:-1] + (1,), np.int32)], axis=-1)
        wrows = np.concatenate([wrows, np.zeros(wrows.shape[:-1] + (1,), np.int32)], axis=-1)
    x = cols.reshape(cols.shape[0], -1)
    w = wrows.reshape(wrows.shape[0], -1)
    acc = np.empty((x.shape[0], w.shape[0]), dtype=np.int64)
    saturated = 0
    chunk = max(1, 4_000_000 // w.size)  # pixels per step: a few million products at a time
    for p0 in range(0, x.shape[0], chunk):
        prod = x[p0:p0 + chunk, None, :] * w[None, :, :]  # (pixels, OC, K)
        pairs = prod[..., 0::2] + prod[..., 1::2]
        clipped = np.clip(pairs, -32768, 32767)
        saturated += int(np.count_nonzero(pairs != clipped))
        acc[p0:p0 + chunk] = clipped.sum(axis=-1, dtype=np.int64)
    acc -= ZP * w.sum(axis=1, dtype=np.int64)[None, :]
    return acc, x.shape[0] * w.shape[0] * (x.shape[1] // 2), saturated


def requantize_mlas(acc, layer):
    """onnxruntime's requantization: int32 bias added to the accumulator, one f32 multiplier
    (x_scale * w_scale / y_scale) per channel, round half to even, zero point, clamp."""
    scale = (layers.SRC_SCALE * layer.wei_scales) / np.float32(layer.dst_scale)
    v = (acc + layer.bias.astype(np.int64)[None, :]).astype(np.float32) * scale[None, :]
    return np.clip(np.rint(v) + layers.DST_ZERO_POINT, 0, 255).astype(np.uint8)


def requantize_onednn(acc, layer):
    """oneDNN's requantization order, left to right in f32."""
    m = layers.SRC_SCALE * layer.wei_scales
    bias = layer.bias.astype(np.float32) * m
    x = m[None, :] * acc.astype(np.float32) + bias[None, :]
    y = x / np.float32(layer.dst_scale) + np.float32(layers.DST_ZERO_POINT)
    return np.clip(np.rint(y), 0, 255).astype(np.uint8)


def to_output_layout(values, layer):
    """(pixels, OC) -> the model's output shape ([1, OC, OH, OW] or [1, OC])."""
    return values.T.reshape(layer.out_shape)


def case_layer(layer, case, weights):
    """The layer with the data of `case` (see the module doc)."""
    if case == "table":
        return layer
    if case == "control":
        layer = dataclasses.replace(layer, src=layer.src >> 1)
    else:
        lo, hi = layers.WEIGHT_RANGES[weights]
        oc, ic = layer.weights.shape[:2]
        sign = np.random.default_rng(7).choice([-1, 1], size=(oc, (ic + 1) // 2))
        pairs = np.repeat(np.where(sign > 0, hi, lo), 2, axis=1)[:, :ic].astype(np.int8)
        w = np.broadcast_to(pairs.reshape((oc, ic) + (1,) * (layer.weights.ndim - 2)),
                            layer.weights.shape)
        layer = dataclasses.replace(layer, src=np.full_like(layer.src, 255),
                                    weights=np.ascontiguousarray(w), bias=np.zeros_like(layer.bias))
    # An output scale spreading the exact result over u8: 3 standard deviations to 127 steps.
    acc = exact_accumulator(columns(layer, layer.src), weight_rows(layer.weights))
    real = acc * (layers.SRC_SCALE * layer.wei_scales)[None, :].astype(np.float64)
    return dataclasses.replace(layer, dst_scale=np.float32(max(3 * real.std(), 1e-3) / 127))


def run_onnxruntime(layer):
    """onnxruntime's output for the layer's source (one thread)."""
    sess = bench_ort.session(layers.build_model(layer).SerializeToString(), threads=1)
    return sess.run(None, {"x": layer.src})[0]


def compare(got, want):
    """Outputs that differ, that differ by more than 1, and the largest difference."""
    d = np.abs(got.astype(np.int32) - want.astype(np.int32))
    return int(np.count_nonzero(d)), int(np.count_nonzero(d > 1)), int(d.max())


def check(name, case, weights, cpu, flags):
    """onnxruntime against the references on layer `name` in `case`, as a JSON-ready dict."""
    layer = case_layer(layers.build_layer(name, weights), case, weights)
    cols, wrows = columns(layer, layer.src), weight_rows(layer.weights)
    acc = exact_accumulator(cols, wrows)
    sat, pairs, pairs_saturated = saturating_accumulator(cols, wrows)
    exact = to_output_layout(requantize_mlas(acc, layer), layer)
    onednn = to_output_layout(requantize_onednn(acc, layer), layer)
    emulated = to_output_layout(requantize_mlas(sat, layer), layer)
    got = run_onnxruntime(layer)
    differ, _, max_diff = compare(got, exact)
    differ_dnn, differ_dnn_over_1, _ = compare(got, onednn)
    return dict(peer="onnxruntime", version=ort.__version__, cpu=cpu, isa_flags=flags,
                layer=name, weights=weights, case=case, outputs=int(got.size),
                differ_exact=differ, differ_exact_pct=round(100 * differ / got.size, 2),
                max_diff_exact=max_diff, differ_onednn=differ_dnn,
                differ_onednn_over_1=differ_dnn_over_1,
                differ_saturating=compare(got, emulated)[0], pairs=pairs,
                pairs_saturated=pairs_saturated,
                exact_saturated_pct=round(100 * float(np.isin(exact, (0, 255)).mean()), 2))


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", nargs="+", default=["R2", "FC"], choices=layers.ALL,
                    metavar="LAYER", help="layers of the table (default: R2 FC)")
    ap.add_argument("--weights", choices=sorted(layers.WEIGHT_RANGES), default="full",
                    help="weights in [-127, 127] (full) or [-64, 63] (7bit)")
    ap.add_argument("--cases", nargs="+", choices=CASES, default=list(CASES),
                    help="data cases (default: all)")
    args = ap.parse_args()
    ort.set_default_logger_severity(3)
    cpu, flags = measure.cpu()
    measure.note(f"onnxruntime {ort.__version__} from {os.path.dirname(ort.__file__)} on {cpu}")
    for name in args.layers:
        for case in args.cases:
            r = check(name, case, args.weights, cpu, flags)
            measure.emit(r)
            measure.note(
                f"{name:3} {case:11} {args.weights}: differ from exact {r['differ_exact']}/"
                f"{r['outputs']} ({r['differ_exact_pct']}%, max {r['max_diff_exact']}), from "
                f"oneDNN's order {r['differ_onednn']} (>1: "
                f"{r['differ_onednn_over_1']}), from the saturating emulation "
                f"{r['differ_saturating']}; saturated pairs {r['pairs_saturated']}/{r['pairs']}")


if __name__ == "__main__":
    main()
