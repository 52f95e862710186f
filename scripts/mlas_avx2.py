"""Copy onnxruntime into a directory with MLAS confined to its AVX2 kernels.

Why: scripts/avx2_only.c hides AVX-512 from CPUID by Linux CPUID faulting, which not every
host offers (a CPU or hypervisor may lack the `cpuid_fault` flag). MLAS picks its
kernels once, in MLAS_PLATFORM's constructor: after the AVX2 kernels are set, it takes the
AVX-512 branch (AVX-512 core, then VNNI, then AMX) when CPUID leaf 7 reports AVX512F and XCR0
enables the AVX-512 state (`test $0xe0` on the inverted XCR0, then `je` to the branch). In this
copy's libraries (the Python module links its own MLAS) that `je` is a 6-byte nop, so MLAS keeps the AVX2 kernels (and its
AVX-VNNI check, false on CPUs without it) on any CPU, as on an AVX2-only one.

The pattern (`not %rax; test $0xe0,%al; je rel32`) must occur at most once per library and
once in the Python module, or nothing is written: checked against onnxruntime 1.32.0's x86-64 Linux wheel. Whether the copy
really runs the AVX2 kernels shows in its outputs: scripts/peers/exactness_ort.py finds
them equal to the emulation of VPMADDUBSW's int16 saturation (the VNNI kernels are exact).

Usage: python scripts/mlas_avx2.py OUT_DIR   (then PYTHONPATH=OUT_DIR python ...)
"""
import os
import re
import shutil
import sys

import onnxruntime

# not %rax; test $0xe0, %al; je rel32
BRANCH = re.compile(rb"\x48\xf7\xd0\xa8\xe0\x0f\x84....", re.S)
NOP6 = b"\x66\x0f\x1f\x44\x00\x00"


def main():
    out = sys.argv[1]
    src = os.path.dirname(onnxruntime.__file__)
    dst = os.path.join(out, "onnxruntime")
    shutil.rmtree(dst, ignore_errors=True)
    shutil.copytree(src, dst)
    capi = os.path.join(dst, "capi")
    # The Python module links its own copy of onnxruntime (and so of MLAS) besides the library.
    libs = sorted(f for f in os.listdir(capi) if ".so" in f)
    patched = []
    for lib in libs:
        path = os.path.join(capi, lib)
        data = bytearray(open(path, "rb").read())
        found = [m.start() for m in BRANCH.finditer(data)]
        if len(found) > 1:
            shutil.rmtree(dst)
            sys.exit(f"onnxruntime {onnxruntime.__version__}: the AVX-512 branch pattern occurs "
                     f"{len(found)} times in {lib} (expected at most once); not patched")
        if found:
            at = found[0] + 5
            data[at:at + 6] = NOP6
            open(path, "wb").write(bytes(data))
            patched.append(f"{lib} at {at:#x}")
    if not any(lib.startswith("onnxruntime_pybind11_state") for lib in [p.split()[0] for p in patched]):
        shutil.rmtree(dst)
        sys.exit(f"onnxruntime {onnxruntime.__version__}: no AVX-512 branch found in the Python module "
                 f"({libs}); not patched")
    print(f"onnxruntime {onnxruntime.__version__}: MLAS_PLATFORM's AVX-512 branch removed in "
          f"{', '.join(patched)} (file offsets), in {dst}", file=sys.stderr)

if __name__ == "__main__":
    main()
