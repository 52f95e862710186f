//! The ABI's constants: its version, the DLPack version it takes, the most arguments an operator
//! may have, and the codes every exported function returns (`ErrorCode`, mirrored by the C
//! constants of the header).

/// Version of the exported ABI (function signatures, error codes, manifest keys).
pub const ABI_VERSION: u32 = 1;

/// The DLPack version whose `DLTensor` the ABI takes.
pub const DLPACK_VERSION: &str = "1.0";

/// Most parameters one operator may take (the runtime's argument array).
pub const MAX_ARGS: usize = 64;

/// The status an exported function returns. Values are part of the ABI.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[repr(i32)]
pub enum ErrorCode {
    Ok = 0,
    /// `nargs` differs from the operator's argument count.
    Nargs = 1,
    /// `args`, an argument, its `data` or its `shape` is NULL.
    NullPointer = 2,
    /// Not a CPU tensor.
    Device = 3,
    /// Wrong dtype code or bits, or lanes other than 1.
    Dtype = 4,
    Ndim = 5,
    Shape = 6,
    /// Strides that are not compact row-major.
    Strides = 7,
    /// `data + byte_offset` overflows.
    ByteOffset = 8,
    /// `data + byte_offset` is not aligned to the element size.
    Alignment = 9,
    /// An output overlaps another argument.
    Overlap = 10,
    /// An element outside the range the compiled code relies on (`Buffer::value_range`).
    ValueRange = 11,
    /// A scratch allocation failed.
    OutOfMemory = 12,
    /// No compiled level runs on this CPU, or `TENSORLIFT_ISA` names one that cannot be used.
    UnsupportedCpu = 13,
    /// Generated code returned a status the runtime does not know (a bug).
    Internal = 14,
    /// An index computed from data (a gather) left its tensor; the message names the tensor.
    IndexOutOfBounds = 15,
}

impl ErrorCode {
    pub const ALL: [ErrorCode; 16] = [
        ErrorCode::Ok,
        ErrorCode::Nargs,
        ErrorCode::NullPointer,
        ErrorCode::Device,
        ErrorCode::Dtype,
        ErrorCode::Ndim,
        ErrorCode::Shape,
        ErrorCode::Strides,
        ErrorCode::ByteOffset,
        ErrorCode::Alignment,
        ErrorCode::Overlap,
        ErrorCode::ValueRange,
        ErrorCode::OutOfMemory,
        ErrorCode::UnsupportedCpu,
        ErrorCode::Internal,
        ErrorCode::IndexOutOfBounds,
    ];

    /// The suffix of its C constant (`NAME_ERROR_<suffix>`, `NAME_OK`).
    pub fn c_name(self) -> &'static str {
        match self {
            ErrorCode::Ok => "OK",
            ErrorCode::Nargs => "NARGS",
            ErrorCode::NullPointer => "NULL_POINTER",
            ErrorCode::Device => "DEVICE",
            ErrorCode::Dtype => "DTYPE",
            ErrorCode::Ndim => "NDIM",
            ErrorCode::Shape => "SHAPE",
            ErrorCode::Strides => "STRIDES",
            ErrorCode::ByteOffset => "BYTE_OFFSET",
            ErrorCode::Alignment => "ALIGNMENT",
            ErrorCode::Overlap => "OVERLAP",
            ErrorCode::ValueRange => "VALUE_RANGE",
            ErrorCode::OutOfMemory => "OUT_OF_MEMORY",
            ErrorCode::UnsupportedCpu => "UNSUPPORTED_CPU",
            ErrorCode::Internal => "INTERNAL",
            ErrorCode::IndexOutOfBounds => "INDEX_OUT_OF_BOUNDS",
        }
    }

    pub fn from_i32(code: i32) -> Option<ErrorCode> {
        ErrorCode::ALL.into_iter().find(|c| *c as i32 == code)
    }
}
