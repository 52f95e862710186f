#!/bin/sh
# tensorlift and its peers on the resnet-18 int8 layers, interleaved: per round and layer,
# `tensorlift resnet18 --layer L`, then scripts/peers/bench_ort.py and (with PEERS="ort ov")
# scripts/peers/bench_ov.py on the same layer, so that all see the same state of a shared,
# drifting machine. Then scripts/side_by_side.py summarizes.
#   [LAYERS="R2 FC"] scripts/side_by_side.sh OUT_PREFIX ISA WEIGHTS THREADS [ROUNDS]
#   e.g. scripts/side_by_side.sh /tmp/vnni1 avx512-vnni full 1
#        scripts/side_by_side.sh /tmp/avx2_7bit avx2 7bit 1   # onnxruntime via scripts/ort_avx2.sh
#        LAYERS="R2 FC" scripts/side_by_side.sh /tmp/quick avx2 full 1 1
#        PEERS="ort ov" scripts/side_by_side.sh /tmp/both avx2 full 1
# ISA avx2 runs onnxruntime through scripts/ort_avx2.sh (its AVX2 kernels); any other ISA runs it
# as it is (VNNI on a VNNI host). Writes OUT_PREFIX.ours.jsonl (tensorlift's JSON lines),
# OUT_PREFIX.ort.jsonl (bench_ort.py's), OUT_PREFIX.ov.jsonl (bench_ov.py's, with PEERS="ort ov")
# and OUT_PREFIX.peers.log (their messages). Needs a release
# build and the peers' virtual environment (PYTHON, default /tmp/peers-venv/bin/python; see
# scripts/peers/bench_ort.py).
set -eu
out=$1; isa=$2; weights=$3; threads=$4; rounds=${5:-3}
here=$(cd "$(dirname "$0")" && pwd)
bin=$here/../target/release/tensorlift
py=${PYTHON:-/tmp/peers-venv/bin/python}
: > "$out.ours.jsonl"; : > "$out.ort.jsonl"; : > "$out.peers.log"
case " ${PEERS:-ort} " in *" ov "*) : > "$out.ov.jsonl" ;; esac
for round in $(seq "$rounds"); do
  for layer in ${LAYERS:-R1 R2 R3 R4 R5 R6 R7 R8 R9 R10 R11 FC}; do
    "$bin" resnet18 --layer "$layer" --threads "$threads" --repeat 30 --isa "$isa" --weights "$weights" \
      --format json >> "$out.ours.jsonl"
    set -- --threads "$threads" --layers "$layer" --weights "$weights" --min-time 0.5
    if [ "$isa" = avx2 ]; then
      PYTHON=$py "$here/ort_avx2.sh" "$@" >> "$out.ort.jsonl" 2>> "$out.peers.log"
    else
      "$py" "$here/peers/bench_ort.py" "$@" >> "$out.ort.jsonl" 2>> "$out.peers.log"
    fi
    case " ${PEERS:-ort} " in
      *" ov "*) "$py" "$here/peers/bench_ov.py" "$@" >> "$out.ov.jsonl" 2>> "$out.peers.log" ;;
    esac
  done
done
