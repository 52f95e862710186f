#!/bin/sh
# Run ../shared/anchors/bench_ort.py as onnxruntime runs on an AVX2-only CPU. Where Linux CPUID
# faulting exists (the `cpuid_fault` flag), scripts/avx2_only.c hides AVX-512, VNNI and AMX from
# CPUID (preloaded); elsewhere scripts/mlas_avx2.py copies onnxruntime with MLAS's AVX-512 branch
# removed. Either way MLAS runs its AVX2 kernels. Arguments pass through to bench_ort.py, e.g.
#   scripts/ort_avx2.sh --threads 1 --layers R2 R5 --min-time 1
#   TL_WEIGHT_BITS=7 scripts/ort_avx2.sh --threads 1
# SCRIPT=path/to/other_anchor.py runs another anchor script (exactness_ort.py) the same way.
# PYTHON overrides the interpreter (default /tmp/anchors-venv/bin/python).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
bench=${SCRIPT:-${BENCH_ORT:-$here/../../shared/anchors/bench_ort.py}}
py=${PYTHON:-/tmp/anchors-venv/bin/python}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM
if grep -qw cpuid_fault /proc/cpuinfo; then
  ${CC:-cc} -O2 -shared -fPIC -o "$tmp/avx2_only.so" "$here/avx2_only.c"
  AVX2_ONLY_VERBOSE=${AVX2_ONLY_VERBOSE:-1} LD_PRELOAD="$tmp/avx2_only.so" "$py" "$bench" "$@"
else
  "$py" "$here/mlas_avx2.py" "$tmp"
  PYTHONPATH="$tmp${PYTHONPATH:+:$PYTHONPATH}" "$py" "$bench" "$@"
fi
