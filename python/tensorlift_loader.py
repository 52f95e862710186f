"""Load a tensorlift-exported library (lib<NAME>.so) with ctypes and call its operators on numpy
arrays. Pure Python: needs numpy, and nothing compiled.

    import numpy as np
    from tensorlift_loader import Library
    lib = Library("out/libmatmul.so")
    c = lib.matmul(a, b)            # inputs only: outputs are allocated and returned
    lib.matmul(a, b, c)             # or every argument, outputs written in place

    net = Library("out/libresnet.so")   # tensorlift export model.onnx --name resnet
    y = net.run(x)                      # the whole network: its output, dtype and shape per the manifest

Each operator checks its arguments in the library (dtype, shape, strides, overlap, ...); a failure
raises `TensorliftError` with the library's error code and message.
"""

import ctypes
import json
import os

import numpy as np

# DLPack 1.x (dlpack/dlpack.h).
_KDLCPU = 1
_CODES = {"int": 0, "uint": 1, "float": 2, "bfloat": 4, "bool": 6}


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class TensorliftError(RuntimeError):
    """A call the library rejected: `code` is the ABI's error code, `message` its explanation."""

    def __init__(self, op, code, message):
        super().__init__(f"{op}: error {code}: {message}")
        self.op, self.code, self.message = op, code, message


def _dl_dtype(dtype):
    dtype = np.dtype(dtype)
    kind = {"i": "int", "u": "uint", "f": "float", "b": "bool"}.get(dtype.kind)
    if kind is None:
        raise TypeError(f"numpy dtype {dtype} has no DLPack equivalent here")
    return DLDataType(_CODES[kind], dtype.itemsize * 8, 1)


def _numpy_dtype(name):
    if name == "bfloat16":
        raise TypeError("bfloat16 arguments need a bfloat16 numpy dtype (e.g. ml_dtypes); pass uint16 views")
    return np.dtype(name)


class _DLArg:
    """A DLTensor viewing a numpy array (kept alive with it)."""

    def __init__(self, array):
        self.array = array
        self.shape = (ctypes.c_int64 * max(array.ndim, 1))(*array.shape)
        if array.flags["C_CONTIGUOUS"]:
            strides = None
        else:
            # DLPack strides are in elements; the library rejects non-compact ones with a message.
            self.strides_buf = (ctypes.c_int64 * max(array.ndim, 1))(*(s // array.itemsize for s in array.strides))
            strides = self.strides_buf
        self.tensor = DLTensor(
            array.ctypes.data if array.size else None,
            DLDevice(_KDLCPU, 0),
            array.ndim,
            _dl_dtype(array.dtype),
            self.shape,
            strides,
            0,
        )


class Operator:
    def __init__(self, library, spec):
        self.library = library
        self.name = spec["name"]
        self.args = spec["args"]
        self.tuning = spec.get("tuning")
        self._fn = getattr(library._lib, spec["symbol"])
        self._fn.argtypes = [ctypes.POINTER(ctypes.POINTER(DLTensor)), ctypes.c_int32]
        self._fn.restype = ctypes.c_int32

    def __call__(self, *arrays):
        """Call with every argument, or with the inputs only (outputs are allocated and returned)."""
        inputs = [a for a in self.args if a["role"] == "input"]
        outputs = []
        if len(arrays) == len(inputs) and len(inputs) != len(self.args):
            given = iter(arrays)
            arrays = []
            for a in self.args:
                if a["role"] == "input":
                    arrays.append(next(given))
                else:
                    out = np.zeros(a["shape"], dtype=_numpy_dtype(a["dtype"]))
                    outputs.append(out)
                    arrays.append(out)
        return self.call_raw(arrays, outputs)

    def call_raw(self, arrays, outputs=(), nargs=None):
        """Call with `arrays` as given (None passes a NULL DLTensor pointer) and `nargs`."""
        args = [None if a is None else _DLArg(np.asarray(a)) for a in arrays]
        pointers = (ctypes.POINTER(DLTensor) * max(len(args), 1))(
            *[ctypes.pointer(a.tensor) if a is not None else ctypes.POINTER(DLTensor)() for a in args]
        )
        code = self._fn(pointers, len(args) if nargs is None else nargs)
        if code != 0:
            raise TensorliftError(self.name, code, self.library.last_error())
        if len(outputs) == 1:
            return outputs[0]
        return tuple(outputs) if outputs else None


class Library:
    """An exported library: `lib.<operator>(...)` for every operator in its manifest."""

    def __init__(self, path):
        path = os.fspath(path)
        base = os.path.basename(path)
        if not (base.startswith("lib") and base.endswith(".so")):
            raise ValueError(f"{path}: expected a file named lib<NAME>.so")
        self.name = base[3:-3]
        self._lib = ctypes.CDLL(os.path.abspath(path))
        for fn in ("manifest", "last_error"):
            f = getattr(self._lib, f"{self.name}_{fn}")
            f.restype = ctypes.c_char_p
            f.argtypes = []
        self.manifest = json.loads(getattr(self._lib, f"{self.name}_manifest")().decode())
        self.selected_isa = self.manifest["selected_isa"]
        self.operators = {spec["name"]: Operator(self, spec) for spec in self.manifest["operators"]}
        for name, op in self.operators.items():
            setattr(self, name, op)

    def last_error(self):
        return getattr(self._lib, f"{self.name}_last_error")().decode()
