//! tensorlift-schedules: operator definitions (`nn`; int8 operators in `ops` on the
//! quantization model of `quant`; the resnet-18 layer table in `resnet18`), tensor-intrinsic
//! declarations (`intrin`) and schedules (`generic`, `cpu`, `x86`, `x86_conv`).
//!
//! Definitions are target-neutral tensor expressions. Every operator has a `generic` schedule
//! (the default loop order, the reference for correctness); target schedules take typed knobs.
//! This crate depends on `ir` (and `serde`, in which tuning records store the knobs) only: no
//! codegen, no timing.

pub mod auto;
pub mod catalog;
pub mod cpu;
pub mod generic;
pub mod intrin;
pub mod nn;
pub mod ops;
pub mod quant;
pub mod resnet18;
pub mod x86;
pub mod x86_conv;
