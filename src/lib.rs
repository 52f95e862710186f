//! tensorlift: Cranelift code generation, runtime and CLI for the tensorlift compiler.
//!
//! `codegen` translates the final loop IR (`ir::Func`) to Cranelift IR for any
//! `cranelift_module::Module`; `runtime` JIT-compiles it (`compile`) and calls it on `Tensor`s
//! with checked arguments; `build` drives a schedule through lowering and compilation;
//! `kernels` assembles the micro-kernels tensor intrinsics call; `export` writes compiled
//! operators as a self-contained shared library with a C header; `bench` the deterministic data
//! and timing the CLI, examples and tests share; `layer` sets the resnet-18 table's layers up
//! (data, prepared weights, compiled schedule, reference) for `tensorlift resnet18` and the
//! tuner; `tune` searches schedule knobs, each measurement a tuning `record`, which
//! `tensorlift resnet18` and the export apply.
//!
//! They stand on a ground floor that imports nothing above it: `isa` (ISA levels, CPU features
//! and identity, kernel families), `abi` (the contract of generated functions), `disasm`,
//! `error`, `target` (what to generate code for) and `shared` (elements several owners hold).
//! Imports point down only, in the order ground floor ← `kernels` ← `codegen` ← `runtime` ←
//! `build`, `bench` ← `layer` ← `tune`, `export` (checked by `tests/it/invariants.rs`).
//!
//! The two crates below are re-exported, so that a crate depending on `tensorlift` alone can
//! write `tensorlift::ir::...` (the IR, tensor expressions, schedules, interpreters) and
//! `tensorlift::schedules::...` (the operator library); `prelude` has the names an operator
//! definition uses.

pub mod abi;
pub mod bench;
pub mod build;
pub mod codegen;
pub mod disasm;
pub mod engine;
pub mod error;
pub mod export;
pub mod graph;
pub mod isa;
pub mod kernels;
pub mod layer;
pub mod npy;
pub mod onnx;
pub mod record;
pub mod runtime;
pub mod shared;
pub mod target;
pub mod tune;

pub use build::{BuildError, Kernel, build};
pub use error::{CompileError, RuntimeError};
/// `tensorlift-ir`: dtypes, expressions, tensor expressions, schedules, lowering, interpreters.
pub use ir;
pub use isa::IsaLevel;
pub use runtime::{Arg, CheckedTensor, CompileOptions, CompiledFunc, Element, Tensor, compile};
/// `tensorlift-schedules`: operator definitions, generic and x86 schedules, the resnet-18 table.
pub use schedules;
pub use target::{OptLevel, Target};

/// What defining, scheduling, compiling and checking an operator takes:
/// `use tensorlift::prelude::*;`. `Tensor` is the runtime buffer a compiled function is called
/// on; the tensor of a definition (what `placeholder` and `compute` return) is `TeTensor`.
pub mod prelude {
    pub use crate::{CompileOptions, IsaLevel, Kernel, Target, Tensor, build};
    pub use ir::interp::{Array, eval_te};
    pub use ir::schedule::{Schedule, create_schedule};
    pub use ir::te::{Tensor as TeTensor, compute, placeholder, placeholder_in_range, reduce_axis, sum};
    pub use ir::{DType, Expr, IterVar};
}

#[cfg(test)]
mod tests;
