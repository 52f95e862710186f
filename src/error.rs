//! Ground floor: the errors at the boundaries of the assemblers, the code generator and the
//! runtime, one enum per boundary. They name only ground-floor facts (`isa`), so every layer
//! above can return them.
//!
//! Messages say what was expected and what was found. Compiler bugs are not errors: they are
//! assertions, or Cranelift verifier failures reported as `CompileError::Cranelift`.

use thiserror::Error;

use ir::DType;

use crate::isa::{IsaLevel, KernelVariant};

/// Errors from `runtime::compile`.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum CompileError {
    #[error("target {requested} is not supported by this CPU (best available: {available})")]
    UnsupportedTarget { requested: IsaLevel, available: String },
    #[error("ISA level: expected one of {expected}, found {found:?}")]
    UnknownIsa { found: String, expected: String },
    #[error("cranelift ISA setup failed: {message}")]
    Isa { message: String },
    #[error("code generation of {func}: {what} (expected the final loop IR)")]
    Unsupported { func: String, what: String },
    #[error("cranelift failed on function {func}: {message}")]
    Cranelift { func: String, message: String },
    #[error(transparent)]
    Kernel(#[from] KernelError),
}

/// Why a kernel could not be assembled (`kernels`).
#[derive(Debug, Error, Clone, PartialEq)]
pub enum KernelError {
    #[error("int8 GEMM kernel: {what} must be {expected}, found {found}")]
    BadShape { what: &'static str, expected: String, found: i64 },
    #[error(
        "{variant} kernel: {rows}x{vectors} register block needs {needed} vector registers, expected at most {available}"
    )]
    TooManyRegisters { variant: KernelVariant, rows: usize, vectors: usize, needed: usize, available: usize },
    #[error("{variant} kernel: no such kernel family")]
    NoSuchVariant { variant: KernelVariant },
    #[error("{variant} kernel: A of {found} is not one it reads")]
    ADType { variant: KernelVariant, found: DType },
    #[error("int8 GEMM kernel: byte offset {offset} of {what} does not fit a 32-bit displacement")]
    OffsetTooLarge { what: &'static str, offset: i64 },
    /// A map kernel meets what it has no exact vector form for (the call runs its loop nest).
    #[error("map kernel: no vector form for {what}")]
    Unsupported { what: String },
    #[error("assembler: {message}")]
    Assembler { message: String },
}

impl From<iced_x86::IcedError> for KernelError {
    fn from(e: iced_x86::IcedError) -> Self {
        KernelError::Assembler { message: e.to_string() }
    }
}

/// Errors from building tensors and calling compiled functions. Every argument check runs
/// before any generated code does.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum RuntimeError {
    #[error("argument count: expected {expected}, found {found}")]
    ArgumentCount { expected: usize, found: usize },
    #[error("argument {index} ({name}): expected dtype {expected}, found {found}")]
    ArgumentDType { index: usize, name: String, expected: DType, found: DType },
    #[error("argument {index} ({name}): expected shape {expected:?}, found {found:?}")]
    ArgumentShape { index: usize, name: String, expected: Vec<i64>, found: Vec<i64> },
    #[error("argument {index} ({name}): buffer holds {found} elements, function needs {expected}")]
    BufferTooSmall { index: usize, name: String, expected: usize, found: usize },
    #[error("argument {index} ({name}): the function writes this buffer, but a read-only slice was given")]
    ReadOnlyArgument { index: usize, name: String },
    #[error(
        "argument {index} ({name}): element {position} is {value}, expected a value in the declared range {lo}..={hi}"
    )]
    ValueOutOfRange { index: usize, name: String, position: usize, value: i128, lo: i64, hi: i64 },
    #[error("checked tensor: element {position} is {value}, expected a value in {lo}..={hi}")]
    CheckedValue { position: usize, value: i128, lo: i64, hi: i64 },
    #[error("checked tensor: expected an integer dtype, found {found}")]
    CheckedDType { found: DType },
    #[error("tensor data: shape {shape:?} has {expected} elements, found {found}")]
    DataLength { shape: Vec<i64>, expected: usize, found: usize },
    #[error("tensor shape {shape:?}: dimensions must be non-negative and the size must fit in memory")]
    BadShape { shape: Vec<i64> },
    #[error("tensor dtype: expected a scalar dtype, found {found}")]
    VectorDType { found: DType },
    #[error("element type: tensor holds {expected}, requested {found}")]
    ElementType { expected: DType, found: DType },
    #[error("out of memory: generated code could not allocate a scratch buffer")]
    OutOfMemory,
    /// A read whose index is computed from data (a gather) left `tensor`; outputs may be
    /// partially written.
    #[error("out-of-bounds read of {tensor}: an index computed from data is outside its shape")]
    IndexOutOfBounds { tensor: String },
    #[error("thread pool with {threads} threads could not be created: {message}")]
    ThreadPool { threads: usize, message: String },
}
