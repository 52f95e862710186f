//! `CompiledLayer`: a table layer compiled with one schedule, its arguments bound (the prepared
//! weights checked once where the kernels rely on their range: `CompiledFunc::bind`), ready to
//! call again and again.

use std::time::Duration;

use ir::interp::Array;
use ir::trace::Trace;

use super::transpose::nhwc_to_nchw;
use crate::build::Kernel;
use crate::error::RuntimeError;
use crate::runtime::{BoundArgs, CompiledFunc, Tensor};

/// A compiled table layer with its arguments (`TableLayer::compile`).
pub struct CompiledLayer {
    pub kernel: Kernel,
    /// The schedule as replayable data.
    pub trace: Trace,
    /// Defining the schedule, lowering and code generation.
    pub compile: Duration,
    /// Compiling and running the weight preparation (once per panel width and GEMM operands:
    /// a preparation the layer had made before took this long then).
    pub prepare: Duration,
    /// The per-call function's arguments; the output is last.
    args: BoundArgs,
    /// Whether the function's activations are channels last (NHWC, or the dense layer's rows).
    channels_last: bool,
    /// The output's shape in the definition's layout.
    output_shape: Vec<i64>,
}

impl CompiledLayer {
    pub(super) fn new(
        kernel: Kernel,
        trace: Trace,
        (compile, prepare): (Duration, Duration),
        args: BoundArgs,
        channels_last: bool,
        output_shape: Vec<i64>,
    ) -> CompiledLayer {
        CompiledLayer { kernel, trace, compile, prepare, args, channels_last, output_shape }
    }

    /// The compiled function.
    pub fn func(&self) -> &CompiledFunc {
        &self.kernel.compiled
    }

    /// Runs the layer once on its bound arguments.
    pub fn call(&mut self) -> Result<(), RuntimeError> {
        self.args.call(&self.kernel.compiled)
    }

    /// The output of the last call in the definition's layout and shape (`[1, OC, OH, OW]`, the
    /// dense layer's `[1, OC]`): what `Reference::output` gives.
    pub fn output(&self) -> Array {
        let Some(out) = self.args.last() else { return Array::zeros(ir::DType::U8, &[0]) };
        let out = if self.channels_last { nhwc_to_nchw(out) } else { out.clone() };
        Array::from_le_bytes(out.dtype(), &self.output_shape, out.as_bytes())
    }

    /// The output of the last call as the function wrote it (in its own layout).
    pub fn raw_output(&self) -> Option<&Tensor> {
        self.args.last()
    }
}
