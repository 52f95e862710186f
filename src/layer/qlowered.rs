//! `LoweredQuantized`: a quantized layer's per-call function lowered for one ISA level but not
//! compiled, with its weights prepared for that level (`lower_qconv`, `lower_qdense`): what an
//! exported network library links in, for levels this CPU may not have.

use ir::Func;
use schedules::ops::GemmOperands;
use schedules::x86_conv::Conv2dInt8Knobs;

use crate::runtime::Tensor;

/// One layer's function at one level, and the arguments it takes besides source and output.
pub struct LoweredQuantized {
    /// Arguments: source, the `weights` in order, output (as `CompiledQuantized::run` binds them).
    pub func: Func,
    /// Equal for two layers whose functions are equal (definition, knobs, level): one function
    /// serves both.
    pub key: String,
    pub knobs: Conv2dInt8Knobs,
    pub operands: GemmOperands,
    /// Packed weights, compensation (bias folded in), then the per-channel parameters.
    pub weights: Vec<Tensor>,
}
