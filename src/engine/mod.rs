//! The engine: a partitioned graph compiled for this CPU and run (`tensorlift run`).
//!
//! `compile` binds each partition of `FinalizedGraph::get_partitions` to the code that computes
//! it: quantized convolutions and matrix products to the x86 kernels (`layer::compile_qconv`,
//! `compile_qdense`: onnxruntime's requantization, weights prepared once at compile time),
//! pooling, the residual add and the quantization at the network's edges to the engine's own
//! loops (`native`), anything else to the graph's reference. Tensors live in buffers allocated
//! once (`slot`): 4-D 8-bit activations in NHWC between partitions (the layout the kernels
//! read, an opaque layout in oneDNN Graph's terms), everything else in its logical order.
//! The convolutions and products compile on every core, one function per geometry (`jobs`).
//! `CompiledGraph::execute` checks the inputs, runs the steps in order and times each.
//!
//! A layer of the resnet-18 table is a graph of one such partition (`TableGraph`), compiled
//! through the same function (`Spec::compile_in`) by `tensorlift resnet18` and the tuner.
//!
//! Every kernel here computes its partition's definition bit for bit; the graph's reference is
//! the slow twin the tests compare with (`tests/it/engine.rs`).

mod compile;
mod error;
mod execute;
mod inputs;
mod jobs;
mod kernel;
pub mod native;
mod share;
mod slot;
mod spec;
mod table;

pub use compile::{
    AutoSource, CompiledGraph, KnobSource, Step, Tuning, Workload, compile, compile_tuned, compile_with,
};
pub use error::EngineError;
pub use inputs::random_input;
pub use kernel::Kernel;
pub use slot::{Bytes, Slot};
pub use spec::{Spec, auto_spec, partition_spec};
pub use table::{TableGraph, kernel_bytes};
