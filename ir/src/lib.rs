//! tensorlift-ir: the target-independent compiler.
//!
//! Tensor expressions (`te`) are scheduled (`schedule`), lowered to a loop IR (`stmt`, `expr`)
//! by one ordered pass list (`lower::lower`), and defined by two reference interpreters
//! (`interp`). This crate never depends on Cranelift, contains no `unsafe`, and does no I/O.

#![forbid(unsafe_code)]

pub mod analysis;
pub mod composite;
pub mod dtype;
pub mod error;
pub mod expr;
pub mod interp;
pub mod intrin;
pub mod intrin_tail;
pub mod lower;
pub mod math;
pub mod mutator;
pub mod passes;
pub mod printer;
mod proven_plans;
pub mod schedule;
pub mod stmt;
pub mod te;
mod tensorize;
pub mod trace;
pub mod workload;

pub use dtype::{DType, ScalarType};
pub use error::{LowerError, MismatchPart, OutOfBoundsRead, ScheduleError, TeError, TensorizeMismatch};
pub use expr::{Expr, ExprKind, Var};
pub use intrin::{IntrinKind, TensorIntrin};
pub use stmt::{Buffer, ForKind, Func, Operand, Stmt, StmtKind};
pub use te::{IterVar, Tensor};
