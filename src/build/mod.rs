//! The compile driver: schedule → loop IR (`ir::lower`) → machine code (`runtime::compile`);
//! and, where schedules meet the host, the `CoreRate` the default schedules follow
//! (`core_rate`).
//!
//! `TENSORLIFT_DUMP_IR=1` prints the IR to stderr after every lowering pass that changed it;
//! `TENSORLIFT_TIME_PASSES=1` prints, per function, the time of each lowering pass with the IR
//! verifier that follows it (in a release build only the last pass's), the verifier's share (timed by running it once more), and the time
//! of code generation.

mod core_rate;

use std::time::{Duration, Instant};

use ir::schedule::Schedule;
use ir::{Func, LowerError, Tensor};
use thiserror::Error;

pub use core_rate::core_rate;

use crate::error::CompileError;
use crate::isa::IsaLevel;
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

/// What lowering may assume of the code generator for `options`' target (`lower_options_at`
/// its level).
pub fn lower_options(options: &CompileOptions) -> Result<ir::lower::LowerOptions, BuildError> {
    Ok(lower_options_at(options.target.level()?))
}

/// What lowering may assume of code generated for `level`, by the JIT or into an exported
/// object alike: `GemmMap` kernels (`codegen::intrin`) at AVX-512 VNNI. At AMX the GEMM may run
/// on tiles, and below AVX-512 the fused kernels do not exist: the GEMM and the Map stay two
/// calls there. Segment ranges from AVX2 to AVX-512 VNNI, whose register kernels loop over a
/// run-time count of segments (the AMX tile kernel does not).
pub fn lower_options_at(level: IsaLevel) -> ir::lower::LowerOptions {
    ir::lower::LowerOptions {
        fuse_epilogues: level == IsaLevel::Avx512Vnni,
        segment_ranges: matches!(level, IsaLevel::Avx2 | IsaLevel::AvxVnni | IsaLevel::Avx512Vnni),
    }
}

/// Lowers `schedule` for code of `level` that is not compiled here (an exported library's
/// objects): the lowering `build` does for a target of that level.
pub fn lower_at(schedule: &Schedule, args: &[&Tensor], name: &str, level: IsaLevel) -> Result<Func, LowerError> {
    ir::lower::lower_with(schedule, args, name, &lower_options_at(level))
}

/// Lowers `schedule` to a function of `args` (inputs and outputs, in call order) and compiles it.
pub fn build(
    schedule: &Schedule,
    args: &[&Tensor],
    name: &str,
    options: &CompileOptions,
) -> Result<Kernel, BuildError> {
    let start = Instant::now();
    let on = |var: &str| std::env::var_os(var).is_some_and(|v| v == "1");
    let (dump, time) = (on("TENSORLIFT_DUMP_IR"), on("TENSORLIFT_TIME_PASSES"));
    let mut passes = Vec::new();
    let lower_options = lower_options(options)?;
    let lowered = if dump || time {
        let mut previous = String::new();
        let mut last = start;
        ir::lower::lower_with_hook(schedule, args, name, &lower_options, &mut |pass, func| {
            let pass_time = last.elapsed();
            if dump {
                let text = func.to_string();
                if text != previous {
                    eprintln!("-- {name}: after {pass}\n{text}");
                    previous = text;
                }
            }
            if time {
                let verify = Instant::now();
                // Timed only: the pipeline checks the IR itself (`lower_with_hook`).
                let _ = ir::passes::verify(func, ir::passes::VerifyLevel::Lowered);
                passes.push((pass.to_string(), pass_time, verify.elapsed()));
            }
            last = Instant::now();
        })?
    } else {
        ir::lower::lower_with(schedule, args, name, &lower_options)?
    };
    let lower_time = start.elapsed();
    let compiled = compile(&lowered, options)?;
    if time {
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        let verify: Duration = passes.iter().map(|p| p.2).sum();
        let list: Vec<String> = passes.iter().map(|(p, t, v)| format!("{p} {:.2} ({:.2})", ms(*t), ms(*v))).collect();
        eprintln!(
            "-- {name}: lower {:.2} ms, of which verifier {:.2} ms; codegen {:.2} ms; passes in ms (verifier): {}",
            ms(lower_time),
            ms(verify),
            ms(compiled.compile_time()),
            list.join(", ")
        );
    }
    Ok(Kernel { lowered, compiled, lower_time })
}
