//! Errors at the boundaries of the code generator and the runtime, one enum per boundary.
//!
//! Messages say what was expected and what was found. Compiler bugs are not errors: they are
//! assertions, or Cranelift verifier failures reported as `CompileError::Cranelift`.

use thiserror::Error;

use ir::DType;

use crate::kernels::KernelError;
use crate::runtime::IsaLevel;

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
