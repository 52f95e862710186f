"""Compares tensorlift's outputs with onnxruntime's on the same inputs: for each seed, the
network's output (dequantized logits) from `tensorlift run --input <dir>/<seed>/input_0.npy
--output <ours>/<seed>.npy` against `<dir>/<seed>/output_0.npy` written by
ort_intermediates.py (this directory). Prints the share of equal elements, the largest
difference, and on how many inputs the top-1 class agrees.

  python scripts/models/ort_intermediates.py --model M.onnx --seeds 20 --out-dir /tmp/ort
  for s in $(seq 0 19); do tensorlift run M.onnx --input /tmp/ort/$s/input_0.npy --output /tmp/ours/$s.npy --repeat 1; done
  python scripts/models/compare_outputs.py --ort /tmp/ort --ours /tmp/ours --seeds 20
"""
import argparse
import json
import os

import numpy as np


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ort", required=True)
    ap.add_argument("--ours", required=True)
    ap.add_argument("--seeds", type=int, default=20)
    args = ap.parse_args()
    equal = total = top1 = 0
    largest = 0.0
    for seed in range(args.seeds):
        theirs = np.load(os.path.join(args.ort, str(seed), "output_0.npy"))
        ours = np.load(os.path.join(args.ours, f"{seed}.npy"))
        equal += int(np.sum(theirs == ours))
        total += theirs.size
        largest = max(largest, float(np.max(np.abs(theirs.astype(np.float64) - ours))))
        top1 += int(np.argmax(theirs) == np.argmax(ours))
    print(json.dumps({"inputs": args.seeds, "top1_equal": top1, "equal_elements": equal, "elements": total,
                      "equal_share": equal / total, "largest_difference": largest}))


if __name__ == "__main__":
    main()
