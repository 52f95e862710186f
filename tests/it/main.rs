//! The integration test binary (one binary, many modules, for link time).

/// The level type the shared skip helpers (`skip`) name.
use tensorlift::IsaLevel;

mod autoschedule;
mod cli;
mod conv_knobs;
mod databases;
mod differential;
mod engine;
mod engine_grouped;
mod errors;
mod export;
mod export_model;
mod fused_sum;
mod golden;
mod graph;
mod indexing;
mod invariants;
mod math;
mod norm;
mod onnx;
mod onnx_ort;
mod ort_requant;
mod plain_reference;
mod python;
mod quant;
mod ray_driver;
mod readme;
mod requantize_op;
mod run_cli;
mod shapes;
#[path = "../../src/tests/skip.rs"]
mod skip;
mod suite_common;
mod tensorize;
mod tune;
mod tune_model;
mod tune_op;
mod vnni;
