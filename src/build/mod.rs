//! The compile driver: schedule → loop IR (`ir::lower`) → machine code (`runtime::compile`);
//! and, where schedules meet the host, the `CoreRate` the default schedules follow
//! (`core_rate`).
//!
//! `TENSORLIFT_DUMP_IR=1` prints the IR to stderr after every lowering pass that changed it.

mod core_rate;

use std::time::{Duration, Instant};

use ir::schedule::Schedule;
use ir::{Func, LowerError, Tensor};
use thiserror::Error;

pub use core_rate::core_rate;

use crate::error::CompileError;
use crate::runtime::{CompileOptions, CompiledFunc, compile};

/// A lowered and compiled function.
pub struct Kernel {
    /// The final loop IR that was compiled.
    pub lowered: Func,
    pub compiled: CompiledFunc,
    pub lower_time: Duration,
}

impl Kernel {
    /// Lowering plus code generation.
    pub fn compile_time(&self) -> Duration {
        self.lower_time + self.compiled.compile_time()
    }
}

/// Errors from `build`.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum BuildError {
    #[error(transparent)]
    Lower(#[from] LowerError),
    #[error(transparent)]
    Compile(#[from] CompileError),
}

/// Lowers `schedule` to a function of `args` (inputs and outputs, in call order) and compiles it.
pub fn build(
    schedule: &Schedule,
    args: &[&Tensor],
    name: &str,
    options: &CompileOptions,
) -> Result<Kernel, BuildError> {
    let start = Instant::now();
    let lowered = if std::env::var_os("TENSORLIFT_DUMP_IR").is_some_and(|v| v == "1") {
        let mut previous = String::new();
        ir::lower::lower_with_hook(schedule, args, name, &mut |pass, func| {
            let text = func.to_string();
            if text != previous {
                eprintln!("-- {name}: after {pass}\n{text}");
                previous = text;
            }
        })?
    } else {
        ir::lower::lower(schedule, args, name)?
    };
    let lower_time = start.elapsed();
    let compiled = compile(&lowered, options)?;
    Ok(Kernel { lowered, compiled, lower_time })
}
