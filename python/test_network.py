"""The Python loader against an exported network (`tensorlift export MODEL.onnx`):
`python3 test_network.py LIB DIR`, where DIR holds the input `in0.bin` and the engine's output
`expected0.bin` (written by the Rust test). `lib.run(x)` must return the expected output bit for
bit, with the dtype and shape of the manifest; a wrong shape raises TensorliftError. Exits
non-zero on any mismatch."""

import os
import sys

import numpy as np

from tensorlift_loader import Library, TensorliftError


def main(path, directory):
    lib = Library(path)
    (inp,), (out,) = lib.manifest["inputs"], lib.manifest["outputs"]
    x = np.fromfile(os.path.join(directory, "in0.bin"), dtype=inp["dtype"]).reshape(inp["shape"])
    expected = np.fromfile(os.path.join(directory, "expected0.bin"), dtype=out["dtype"]).reshape(out["shape"])
    y = lib.run(x)
    assert y.dtype == expected.dtype and y.shape == expected.shape, (y.dtype, y.shape)
    assert y.tobytes() == expected.tobytes(), "lib.run(x) differs from the engine"
    bad = np.zeros(inp["shape"][:-1] + [inp["shape"][-1] + 1], dtype=inp["dtype"])
    try:
        lib.run(bad)
    except TensorliftError as e:
        assert e.code == 6 and "expected shape" in str(e), e
    else:
        raise AssertionError("a wrong shape was accepted")
    print(f"python network ok: {lib.name} at {lib.selected_isa}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
