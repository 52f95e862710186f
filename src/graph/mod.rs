//! The target-independent graph layer (oneDNN Graph's data model): logical tensors, ops with
//! exactly defined semantics, graphs built op by op and finalized, partitions (fused int8
//! patterns and single ops) and a plain-Rust reference that evaluates a partitioned graph.
//!
//! * `dtype`, `tensor`, `value`: element types, logical tensors (typed ids, shapes whose
//!   dimensions may be unknown until compilation, layouts) and concrete values.
//! * `attrs`, `op`: the op kinds with their typed attributes; each variant of `OpKind` states
//!   its formula, rounding, saturation and shapes.
//! * `build`, `finalize`, `shape`, `window`, `error`: building (`Graph::add_op`), validation
//!   and shape inference (`Graph::finalize`), the typed errors.
//! * `partition`, `fusion`: `FinalizedGraph::get_partitions(policy)`; each `PartitionKind`
//!   states the fused semantics (onnxruntime's requantization orders, with the source files they
//!   were checked against).
//! * `reference`: evaluates a partitioned graph on concrete inputs, the slow twin every compiled
//!   partition is tested against, bit for bit.
//! * `display`: one line per op and per partition.
//!
//! This module depends on nothing else in the crate (`tests/it/invariants.rs`).

pub mod attrs;
pub mod build;
pub mod display;
pub mod dtype;
pub mod error;
pub mod finalize;
mod fusion;
pub mod op;
pub mod partition;
pub mod reference;
pub mod shape;
pub mod tensor;
pub mod value;
pub mod window;

pub use attrs::{
    AvgPoolAttrs, BiasAddAttrs, ClipAttrs, ConvAttrs, MatMulAttrs, MaxPoolAttrs, QuantParams, QuantizeAttrs,
    ReduceMeanAttrs, ReshapeAttrs, TransposeAttrs, TypeCastAttrs,
};
pub use build::Graph;
pub use display::{OpLine, PartitionLine};
pub use dtype::DataType;
pub use error::{GraphError, OpRef, TensorRef};
pub use finalize::FinalizedGraph;
pub use op::{Op, OpId, OpKind};
pub use partition::{
    Activation, Partition, PartitionId, PartitionKind, PartitionPolicy, QAdd, QConv, QGlobalAvgPool, QMatMul, QMaxPool,
    QuantTensor, Residual,
};
pub use reference::ReferenceError;
pub use tensor::{Dim, Layout, LogicalTensor, Shape, TensorId};
pub use value::{Data, Value, ValueError};
pub use window::Window;
