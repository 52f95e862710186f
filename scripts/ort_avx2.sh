#!/bin/sh
# Run ../shared/anchors/bench_ort.py as onnxruntime runs on an AVX2-only CPU:
# builds scripts/avx2_only.c (CPUID masking shim, see its header) into a temp
# dir and preloads it.  Arguments pass through to bench_ort.py, e.g.
#   scripts/ort_avx2.sh --threads 1 --layers R2 R5 --min-time 1
#   TL_WEIGHT_BITS=7 scripts/ort_avx2.sh --threads 1
# PYTHON overrides the interpreter (default /tmp/anchors-venv/bin/python).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
bench=${BENCH_ORT:-$here/../../shared/anchors/bench_ort.py}
py=${PYTHON:-/tmp/anchors-venv/bin/python}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM
${CC:-cc} -O2 -shared -fPIC -o "$tmp/avx2_only.so" "$here/avx2_only.c"
AVX2_ONLY_VERBOSE=${AVX2_ONLY_VERBOSE:-1} LD_PRELOAD="$tmp/avx2_only.so" "$py" "$bench" "$@"
