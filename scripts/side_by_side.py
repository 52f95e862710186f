"""Summarizes scripts/side_by_side.sh: per layer, our median ms per round, onnxruntime's node ms
(FC: its whole QGemm call) per round, and the median over rounds of the per-round ratio
onnxruntime ms / ours (> 1: ours faster).  Usage: python3 scripts/side_by_side.py OUT_PREFIX THREADS"""
import json
import statistics as st
import sys

LAYERS = ["R1", "R2", "R3", "R4", "R5", "R6", "R7", "R8", "R9", "R10", "R11", "FC"]


def main(prefix, threads):
    ours = {}
    for line in open(prefix + ".ours.jsonl"):
        if line.startswith("{"):
            r = json.loads(line)
            ours.setdefault(r["layer"], []).append(r)
    ort = {}
    for line in open(prefix + ".ort.txt"):
        p = line.split()
        if p and (p[0].startswith("R") or p[0] == "FC") and len(p) > 9 and p[1] == "qdq" and int(p[2]) == threads:
            ort.setdefault(p[0], []).append(float(p[3]) if p[0] == "FC" else float(p[7]))
    print("| layer | ours ms per round | % probe | kernel, threads | onnxruntime ms per round | ours/ort (min–max) |")
    print("|---|---|---|---|---|---|")
    total_ours = total_ort = 0.0
    for layer in [name for name in LAYERS if name in ours]:
        o, r = [x["median_ms"] for x in ours[layer]], ort[layer]
        ratios = [b / a for a, b in zip(o, r)]
        total_ours += st.median(o)
        total_ort += st.median(r)
        pct = st.median(x["pct_peak"] for x in ours[layer])
        first = ours[layer][0]
        print(f"| {layer} | {' / '.join(f'{x:.3f}' for x in o)} | {pct:.1f} | {first['kernel']}, {first['threads']} "
              f"| {' / '.join(f'{x:.3f}' for x in r)} | {st.median(ratios):.2f} ({min(ratios):.2f}–{max(ratios):.2f}) |")
    print(f"\nsums of the medians: ours {total_ours:.3f} ms, onnxruntime {total_ort:.3f} ms")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
