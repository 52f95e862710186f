"""Summarizes scripts/side_by_side.sh: per layer, our median ms per round, onnxruntime's compute
node ms per round (FC: its whole call, from scripts/peers/bench_ort.py's `median_ms`), and the
median over rounds of the per-round ratio onnxruntime ms / ours (> 1: ours faster).

Usage: python3 scripts/side_by_side.py OUT_PREFIX THREADS
"""
import argparse
import json
import statistics as st

LAYERS = ["R1", "R2", "R3", "R4", "R5", "R6", "R7", "R8", "R9", "R10", "R11", "FC"]


def json_lines(path):
    """The JSON objects of the lines of `path` that hold one (other lines are messages)."""
    with open(path) as f:
        return [json.loads(line) for line in f if line.startswith("{")]


def by_layer(records):
    out = {}
    for r in records:
        out.setdefault(r["layer"], []).append(r)
    return out


def onnxruntime_ms(r):
    """The compute node's time; for FC the whole call, as BENCHMARKS.md's tables compare it."""
    return r["median_ms"] if r["layer"] == "FC" or r.get("node_ms") is None else r["node_ms"]


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("prefix", help="OUT_PREFIX given to side_by_side.sh")
    ap.add_argument("threads", type=int, help="the THREADS given to side_by_side.sh")
    args = ap.parse_args()
    ours = by_layer(json_lines(args.prefix + ".ours.jsonl"))
    ort = by_layer(r for r in json_lines(args.prefix + ".ort.jsonl") if r["threads"] == args.threads)
    print("| layer | ours ms per round | % probe | kernel, threads | onnxruntime ms per round | ours/ort (min–max) |")
    print("|---|---|---|---|---|---|")
    total_ours = total_ort = 0.0
    for layer in [name for name in LAYERS if name in ours and name in ort]:
        o = [x["median_ms"] for x in ours[layer]]
        r = [onnxruntime_ms(x) for x in ort[layer]]
        ratios = [b / a for a, b in zip(o, r)]
        total_ours += st.median(o)
        total_ort += st.median(r)
        pct = st.median(x["pct_peak"] or 0.0 for x in ours[layer])
        first = ours[layer][0]
        print(f"| {layer} | {' / '.join(f'{x:.3f}' for x in o)} | {pct:.1f} | {first['kernel']}, {first['threads']} "
              f"| {' / '.join(f'{x:.3f}' for x in r)} | {st.median(ratios):.2f} ({min(ratios):.2f}–{max(ratios):.2f}) |")
    print(f"\nsums of the medians: ours {total_ours:.3f} ms, onnxruntime {total_ort:.3f} ms")


if __name__ == "__main__":
    main()
