//! A point of the auto-scheduler's space compiled (`CompiledPoint`): the call's function and
//! the functions that prepare its constants once (`schedules::auto::Prepare`, e.g. the packing
//! of a constant `B`), and what runs them. Preparing is outside any timed call: a constant's
//! preparation is paid once per function, as a layer's weight packing is.

use std::time::Duration;

use schedules::auto::Scheduled;
use thiserror::Error;

use crate::build::{BuildError, Kernel, build};
use crate::error::RuntimeError;
use crate::runtime::{CompileOptions, Tensor};

/// A prepare function compiled: run on the definition's input `input`, its output is the call's
/// argument at that position.
pub struct PrepareKernel {
    pub input: usize,
    pub kernel: Kernel,
    /// The prepared tensor's element type and shape.
    pub dtype: ir::DType,
    pub shape: Vec<i64>,
}

/// The call's function and its prepare functions, compiled.
pub struct CompiledPoint {
    /// The call (what is timed): its arguments are `prepare`'s result, then the outputs.
    pub main: Kernel,
    pub prepare: Vec<PrepareKernel>,
}

/// Why a point's inputs could not be prepared.
#[derive(Debug, Error)]
pub enum PrepareError {
    #[error("prepare function of input {input}: expected at most {count} inputs")]
    MissingInput { input: usize, count: usize },
    #[error("prepare function of input {input}: {source}")]
    Run {
        input: usize,
        #[source]
        source: RuntimeError,
    },
}

impl CompiledPoint {
    /// Compiles `scheduled` (`name` names the call; its prepare functions are `name.prepare<i>`)
    /// with `options`, each prepare function on its own threads.
    pub fn build(scheduled: &Scheduled, name: &str, options: &CompileOptions) -> Result<CompiledPoint, BuildError> {
        let args: Vec<&ir::Tensor> = scheduled.args.iter().collect();
        let main = build(&scheduled.schedule, &args, name, options)?;
        let mut prepare = Vec::new();
        for p in &scheduled.prepare {
            let args: Vec<&ir::Tensor> = p.args.iter().collect();
            let options = CompileOptions { threads: Some(p.threads), ..options.clone() };
            let kernel = build(&p.schedule, &args, &format!("{name}.prepare{}", p.input), &options)?;
            let Some(out) = p.args.last() else { continue };
            prepare.push(PrepareKernel { input: p.input, kernel, dtype: out.dtype(), shape: out.shape().to_vec() });
        }
        Ok(CompiledPoint { main, prepare })
    }

    /// Lowering and code generation of every function.
    pub fn compile_time(&self) -> Duration {
        self.main.compile_time() + self.prepare.iter().map(|p| p.kernel.compile_time()).sum::<Duration>()
    }

    /// The call's inputs from the definition's `inputs` (in its order): each prepared constant
    /// replaced by its prepare function's output on it, the others as they are.
    pub fn prepare(&self, mut inputs: Vec<Tensor>) -> Result<Vec<Tensor>, PrepareError> {
        for p in &self.prepare {
            let count = inputs.len();
            let raw = inputs.get_mut(p.input).ok_or(PrepareError::MissingInput { input: p.input, count })?;
            let run = |source| PrepareError::Run { input: p.input, source };
            let mut prepared = Tensor::zeros(p.dtype, &p.shape).map_err(run)?;
            p.kernel.compiled.call(&mut [raw, &mut prepared]).map_err(run)?;
            inputs[p.input] = prepared;
        }
        Ok(inputs)
    }
}
