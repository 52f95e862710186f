"""Summarizes scripts/side_by_side.sh: per layer, our median ms per round, each peer's compute
node ms per round (FC: its whole call, the peer script's `median_ms`), and the median over
rounds of the per-round ratio peer ms / ours (> 1: ours faster). The peers are onnxruntime
(OUT_PREFIX.ort.jsonl) and, where side_by_side.sh ran it, OpenVINO (OUT_PREFIX.ov.jsonl).

Usage: python3 scripts/side_by_side.py OUT_PREFIX THREADS
"""
import argparse
import json
import os
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


def peer_ms(r):
    """The compute node's time; for FC the whole call, as BENCHMARKS.md's tables compare it."""
    return r["median_ms"] if r["layer"] == "FC" or r.get("node_ms") is None else r["node_ms"]


def rounds(values):
    return " / ".join(f"{x:.3f}" for x in values)


def ratio(peer, ours):
    """The median of the per-round ratios peer / ours, with their range."""
    r = [b / a for a, b in zip(ours, peer)]
    return f"{st.median(r):.2f} ({min(r):.2f}–{max(r):.2f})"


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("prefix", help="OUT_PREFIX given to side_by_side.sh")
    ap.add_argument("threads", type=int, help="the THREADS given to side_by_side.sh")
    args = ap.parse_args()
    ours = by_layer(json_lines(args.prefix + ".ours.jsonl"))
    peers = []
    for suffix, name in (("ort", "onnxruntime"), ("ov", "OpenVINO")):
        path = f"{args.prefix}.{suffix}.jsonl"
        if os.path.exists(path):
            peers.append((name, by_layer(r for r in json_lines(path) if r["threads"] == args.threads)))
    header = "| layer | ours ms per round | % probe | kernel, threads |"
    header += "".join(f" {name} ms per round | {name} / ours |" for name, _ in peers)
    print(header)
    print("|---" * (4 + 2 * len(peers)) + "|")
    totals = [0.0] * (1 + len(peers))
    for layer in [name for name in LAYERS if name in ours and all(name in p for _, p in peers)]:
        o = [x["median_ms"] for x in ours[layer]]
        totals[0] += st.median(o)
        pct = st.median(x["pct_peak"] or 0.0 for x in ours[layer])
        first = ours[layer][0]
        row = f"| {layer} | {rounds(o)} | {pct:.1f} | {first['kernel']}, {first['threads']} |"
        for i, (_, peer) in enumerate(peers):
            p = [peer_ms(x) for x in peer[layer]]
            totals[i + 1] += st.median(p)
            row += f" {rounds(p)} | {ratio(p, o)} |"
        print(row)
    sums = ", ".join(f"{name} {t:.3f} ms" for (name, _), t in zip(peers, totals[1:]))
    print(f"\nsums of the medians: ours {totals[0]:.3f} ms, {sums}")

if __name__ == "__main__":
    main()
