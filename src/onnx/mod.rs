//! ONNX import: a model file read with prost (the vendored `proto/onnx.proto`), checked, and
//! mapped onto a `graph::Graph`, which is finalized. Float, QDQ and QOperator models of the
//! default domain's opsets 13–21 (with com.microsoft's quantized operators) are read; anything
//! else is a typed `OnnxError` naming the node, tensor or attribute (docs/onnx.md).
//!
//! * `read`: bytes → checked `ModelProto` (sizes bounded before anything is allocated);
//!   `mapped`: a model file's bytes, mapped in place where possible.
//! * `tensor`: initializers and constants decoded; `node`: a node's inputs and attributes.
//! * `import`: the walk over the nodes, the `Model` it returns (`import`, `load`).
//! * `float_ops`, `batchnorm`, `geometry`: float operators, BatchNormalization folding, window
//!   attributes; `quant`, `qdq`, `qlinear`: scales and zero points, the QDQ operators, the
//!   QOperator operators.
//! * `error`: the typed errors.
//!
//! This module uses nothing of the crate but `graph` (`tests/it/invariants.rs`).

mod batchnorm;
pub mod error;
mod float_ops;
mod geometry;
mod import;
mod mapped;
mod node;
pub mod proto;
mod qdq;
mod qlinear;
mod quant;
pub mod read;
pub mod tensor;

pub use error::{NodeRef, OnnxError};
pub use import::{Model, import, import_proto, load};
pub use read::{OPSETS, read};
pub use tensor::MAX_ELEMENTS;
