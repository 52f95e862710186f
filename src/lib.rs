//! tensorlift: Cranelift code generation, runtime and CLI for the tensorlift compiler.
//!
//! `codegen` translates the final loop IR (`ir::Func`) to Cranelift IR for any
//! `cranelift_module::Module`; `runtime` JIT-compiles it (`compile`) and calls it on `Tensor`s
//! with checked arguments; `build` drives a schedule through lowering and compilation;
//! `kernels` holds the hand-assembled micro-kernels tensor intrinsics call; `export` writes
//! compiled operators as a self-contained shared library with a C header.

pub mod build;
pub mod codegen;
pub mod error;
pub mod export;
pub mod kernels;
pub mod runtime;
pub mod tune;

pub use build::{BuildError, Kernel, build};
pub use error::{CompileError, RuntimeError};
pub use runtime::{Arg, CompileOptions, CompiledFunc, Element, IsaLevel, OptLevel, Target, Tensor, compile};

#[cfg(test)]
mod tests;
