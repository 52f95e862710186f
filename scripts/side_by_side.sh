#!/bin/sh
# tensorlift and onnxruntime on the resnet-18 int8 layers, interleaved: per round and layer,
# `tensorlift resnet18 --layer L` then onnxruntime's node on the same layer, so that both see
# the same state of a shared, drifting machine. Then scripts/side_by_side.py summarizes.
#   [LAYERS="R2 FC"] scripts/side_by_side.sh OUT_PREFIX ISA WEIGHTS THREADS [ROUNDS]
#   e.g. scripts/side_by_side.sh /tmp/vnni1 avx512-vnni full 1
#        scripts/side_by_side.sh /tmp/avx2_7bit avx2 7bit 1   # onnxruntime via scripts/ort_avx2.sh
# ISA avx2 runs onnxruntime through scripts/ort_avx2.sh (its AVX2 kernels); any other ISA runs it
# as it is (VNNI on a VNNI host). Needs a release build and the anchors venv (PYTHON, default
# /tmp/anchors-venv/bin/python).
set -eu
out=$1; isa=$2; weights=$3; threads=$4; rounds=${5:-3}
here=$(cd "$(dirname "$0")" && pwd)
bin=$here/../target/release/tensorlift
py=${PYTHON:-/tmp/anchors-venv/bin/python}
bits=8; [ "$weights" = 7bit ] && bits=7
: > "$out.ours.jsonl"; : > "$out.ort.txt"
for round in $(seq "$rounds"); do
  for layer in ${LAYERS:-R1 R2 R3 R4 R5 R6 R7 R8 R9 R10 R11 FC}; do
    "$bin" resnet18 --layer "$layer" --threads "$threads" --repeat 30 --isa "$isa" --weights "$weights" \
      --format json >> "$out.ours.jsonl"
    if [ "$isa" = avx2 ]; then
      TL_WEIGHT_BITS=$bits "$here/ort_avx2.sh" --threads "$threads" --layers "$layer" --min-time 0.5 >> "$out.ort.txt" 2>&1
    else
      TL_WEIGHT_BITS=$bits "$py" "$here/../../shared/anchors/bench_ort.py" --threads "$threads" --layers "$layer" \
        --min-time 0.5 >> "$out.ort.txt" 2>&1
    fi
  done
done
