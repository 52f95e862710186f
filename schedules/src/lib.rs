//! tensorlift-schedules: operator definitions (`nn`) and their schedules (`generic`, `cpu`).
//!
//! Definitions are target-neutral tensor expressions. Every operator has a `generic` schedule
//! (the default loop order, the reference for correctness); target schedules take typed knobs.
//! This crate depends on `ir` only: no codegen, no timing.

pub mod cpu;
pub mod generic;
pub mod nn;
