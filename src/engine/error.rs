//! `EngineError`: what compiling or running a partitioned graph can fail with.

use thiserror::Error;

use crate::error::RuntimeError;
use crate::graph::{DataType, GraphError, ValueError};
use crate::layer::LayerError;

/// Errors of `engine::compile` and `CompiledGraph::execute`.
#[derive(Debug, Error)]
pub enum EngineError {
    #[error(transparent)]
    Graph(#[from] GraphError),
    #[error("partition {partition} ({kind}): {source}")]
    Layer { partition: String, kind: &'static str, source: Box<LayerError> },
    #[error("partition {partition}: the reference failed: {what}")]
    Reference { partition: String, what: String },
    #[error("tensor {tensor}: {what} must be known to compile, found {found}")]
    Unknown { tensor: String, what: &'static str, found: String },
    #[error(
        "input {index} ({tensor}): expected {expected_dtype} {expected_dims:?}, found {found_dtype} {found_dims:?}"
    )]
    Input {
        index: usize,
        tensor: String,
        expected_dtype: DataType,
        expected_dims: Vec<usize>,
        found_dtype: DataType,
        found_dims: Vec<usize>,
    },
    #[error("expected {expected} inputs, found {found}")]
    InputCount { expected: usize, found: usize },
    #[error("no random input of {dtype}: expected f32, u8, s8 or s32 (give the input as a file)")]
    RandomInput { dtype: DataType },
    #[error(transparent)]
    Value(#[from] ValueError),
    /// The thread pool the native kernels share with the compiled ones could not start.
    #[error(transparent)]
    Runtime(Box<RuntimeError>),
    #[error("table layer {layer}: {what}: {source}")]
    Table { layer: &'static str, what: String, source: Box<LayerError> },
    #[error(
        "table layer {layer}: expected one quantized convolution or matmul partition the x86 kernels compute, found {found}"
    )]
    TablePartition { layer: &'static str, found: String },
}
