//! DLPack 1.x (`dlpack/dlpack.h`) as the exported ABI uses it: the `DLTensor` every operator
//! takes, and the names and codes of our dtypes.

use std::ffi::c_void;

use ir::DType;
use ir::dtype::ScalarType;

/// `DLDeviceType::kDLCPU`.
pub const DL_CPU: i32 = 1;

/// `DLDataTypeCode`: `kDLInt`, `kDLUInt`, `kDLFloat`, `kDLBfloat`, `kDLBool`.
pub const DL_INT: u8 = 0;
pub const DL_UINT: u8 = 1;
pub const DL_FLOAT: u8 = 2;
pub const DL_BFLOAT: u8 = 4;
pub const DL_BOOL: u8 = 6;

#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DLDevice {
    pub device_type: i32,
    pub device_id: i32,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DLDataType {
    pub code: u8,
    pub bits: u8,
    pub lanes: u16,
}

/// A view of an n-dimensional array; `strides` NULL means compact row-major, otherwise in
/// elements. The data starts at `data + byte_offset`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct DLTensor {
    pub data: *mut c_void,
    pub device: DLDevice,
    pub ndim: i32,
    pub dtype: DLDataType,
    pub shape: *mut i64,
    pub strides: *mut i64,
    pub byte_offset: u64,
}

/// The DLPack dtype of a scalar `dtype`: its code and bits (lanes are always 1).
pub fn dl_dtype(dtype: DType) -> DLDataType {
    let (code, bits) = match dtype.scalar {
        ScalarType::Bool => (DL_BOOL, 8),
        ScalarType::U8 => (DL_UINT, 8),
        ScalarType::U16 => (DL_UINT, 16),
        ScalarType::U32 => (DL_UINT, 32),
        ScalarType::U64 => (DL_UINT, 64),
        ScalarType::I8 => (DL_INT, 8),
        ScalarType::I16 => (DL_INT, 16),
        ScalarType::I32 => (DL_INT, 32),
        ScalarType::I64 => (DL_INT, 64),
        ScalarType::F16 => (DL_FLOAT, 16),
        ScalarType::BF16 => (DL_BFLOAT, 16),
        ScalarType::F32 => (DL_FLOAT, 32),
        ScalarType::F64 => (DL_FLOAT, 64),
    };
    DLDataType { code, bits, lanes: 1 }
}

/// The name DLPack users (numpy, PyTorch) give `dtype`: `uint8`, `int8`, `int32`, `float32`, ...
pub fn dl_name(dtype: DType) -> &'static str {
    match dtype.scalar {
        ScalarType::Bool => "bool",
        ScalarType::U8 => "uint8",
        ScalarType::U16 => "uint16",
        ScalarType::U32 => "uint32",
        ScalarType::U64 => "uint64",
        ScalarType::I8 => "int8",
        ScalarType::I16 => "int16",
        ScalarType::I32 => "int32",
        ScalarType::I64 => "int64",
        ScalarType::F16 => "float16",
        ScalarType::BF16 => "bfloat16",
        ScalarType::F32 => "float32",
        ScalarType::F64 => "float64",
    }
}

/// The scalar dtype called `name` by `dl_name`.
pub fn from_dl_name(name: &str) -> Option<DType> {
    ScalarType::ALL.into_iter().map(DType::scalar).find(|&d| dl_name(d) == name)
}
