#!/bin/sh
# Run scripts/peers/bench_ort.py as onnxruntime runs on an AVX2-only CPU (its VPMADDUBSW kernels).
# On a CPU without AVX-512 and AVX-VNNI it runs as it is: MLAS picks those kernels anyway. Else,
# where Linux CPUID faulting exists (the `cpuid_fault` flag), scripts/avx2_only.c hides AVX-512,
# VNNI and AMX from CPUID (preloaded); elsewhere scripts/mlas_avx2.py copies onnxruntime with
# MLAS's AVX-512 branch removed (that copy keeps AVX-VNNI where the CPU has it). Arguments pass
# through to the script, e.g.
#   scripts/ort_avx2.sh --threads 1 --layers R2 FC --min-time 0.3
#   scripts/ort_avx2.sh --threads 1 --layers R2 --weights 7bit
#   SCRIPT=scripts/peers/exactness_ort.py scripts/ort_avx2.sh --layers R2 FC
# SCRIPT runs another script of scripts/peers the same way (default bench_ort.py).
# PYTHON names the interpreter (default /tmp/peers-venv/bin/python; the setup is in
# scripts/peers/bench_ort.py).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
script=${SCRIPT:-$here/peers/bench_ort.py}
py=${PYTHON:-/tmp/peers-venv/bin/python}
if ! grep -qwE 'avx512f|avx_vnni' /proc/cpuinfo; then
  echo "ort_avx2.sh: this CPU has neither AVX-512 nor AVX-VNNI: onnxruntime runs as it is" >&2
  exec "$py" "$script" "$@"
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM
if grep -qw cpuid_fault /proc/cpuinfo; then
  ${CC:-cc} -O2 -shared -fPIC -o "$tmp/avx2_only.so" "$here/avx2_only.c"
  AVX2_ONLY_VERBOSE=${AVX2_ONLY_VERBOSE:-1} LD_PRELOAD="$tmp/avx2_only.so" "$py" "$script" "$@"
else
  "$py" "$here/mlas_avx2.py" "$tmp"
  PYTHONPATH="$tmp${PYTHONPATH:+:$PYTHONPATH}" "$py" "$script" "$@"
fi
