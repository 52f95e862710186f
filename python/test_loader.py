"""The Python loader against an exported matmul library: `python3 test_loader.py LIB EXPECTED`,
where EXPECTED holds the JIT's int32 result of the same operands (written by the Rust test).
Exits non-zero on any mismatch."""

import sys

import numpy as np

from tensorlift_loader import Library, TensorliftError


def main(path, expected_path):
    lib = Library(path)
    assert lib.manifest["abi_version"] == 1, lib.manifest
    spec = lib.operators["matmul"].args
    (m, k), (_, n) = spec[0]["shape"], spec[1]["shape"]
    a = ((np.arange(m * k) * 7 + 3) % 256).astype(np.uint8).reshape(m, k)
    b = ((np.arange(k * n) * 13 + 5) % 256 - 128).astype(np.int8).reshape(k, n)
    expected = np.fromfile(expected_path, dtype="<i4").reshape(m, n)

    c = lib.matmul(a, b)
    assert c.dtype == np.int32 and c.shape == (m, n)
    assert np.array_equal(c, expected), "library result differs from the JIT"
    assert np.array_equal(c, a.astype(np.int32) @ b.astype(np.int32)), "library result differs from numpy"
    out = np.full((m, n), -1, dtype=np.int32)
    lib.matmul(a, b, out)
    assert np.array_equal(out, expected)

    def error(call, code, needle):
        try:
            call()
        except TensorliftError as e:
            assert e.code == code, (e.code, code, e.message)
            assert needle in e.message, (needle, e.message)
            return
        raise AssertionError(f"expected error {code} ({needle})")

    op = lib.operators["matmul"]
    error(lambda: lib.matmul(a.astype(np.int16), b), 4, "expected dtype uint8")
    error(lambda: lib.matmul(a[:, :-4].copy(), b), 6, "expected shape")
    error(lambda: lib.matmul(np.asfortranarray(a), b), 7, "compact row-major strides")
    error(lambda: lib.matmul(a.reshape(-1), b), 5, "expected ndim 2")
    error(lambda: op.call_raw([a, b]), 1, "expected 3 arguments, found 2")
    error(lambda: op.call_raw([None, b, out]), 2, "argument 0 (A) is NULL")
    # The library goes on working after every error.
    assert np.array_equal(lib.matmul(a, b), expected)
    print(f"python loader ok: {lib.name}, selected isa {lib.selected_isa}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
