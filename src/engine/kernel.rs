//! What computes each partition (`Kernel`), and one call of it on the engine's buffers.

use super::native::add::{AddParams, add_in_place};
use super::native::max_pool::Window;
use super::native::split::{add, dequantize, global_avg_pool, max_pool, quantize};
use super::native::{Affine, Int8};
use super::slot::Slot;
use crate::layer::{CompiledAuto, CompiledQuantized, LayerError};
use crate::runtime::host::Pool;

/// The code that computes a partition.
pub enum Kernel {
    /// A quantized convolution compiled on the x86 path, NHWC in and out.
    Conv(Box<CompiledQuantized>),
    /// A quantized matrix product compiled as a 1×1 convolution.
    Dense(Box<CompiledQuantized>),
    /// A quantized convolution the x86 path does not take (groups, depthwise, dilations,
    /// per-side pads, batch), its whole partition one definition scheduled by the
    /// auto-scheduler's rules (`layer::compile_qconv_auto`), NHWC in and out.
    Auto(Box<CompiledAuto>),
    /// A convolution (`Conv` or `Auto`) with its fused residual add (`graph::Residual`): the
    /// convolution writes its integers to the output, then the add (`native::add`'s arithmetic)
    /// combines them with the partition's last input in place.
    Sum { conv: Box<Kernel>, params: AddParams, ty: Int8, clamp: (i32, i32), conv_is_a: bool },
    /// The quantized add (`native::add`) on same-shaped operands.
    Add { params: AddParams, ty: Int8, clamp: (i32, i32) },
    /// Max pooling on 8-bit integers, NHWC.
    MaxPool { window: Window, ty: Int8 },
    /// Quantized global average pooling, NHWC.
    GlobalAvgPool { x: (f32, i32), y: (f32, i32), ty: Int8 },
    /// Per-tensor quantization of f32.
    Quantize(Affine),
    /// Per-tensor dequantization to f32.
    Dequantize(Affine),
    /// A reshape whose stored bytes do not move.
    Copy,
    /// The graph's reference evaluates the partition (no faster kernel supports it).
    Reference { why: String },
}

impl Kernel {
    /// Integer operations per call (convolutions and products; 0 for the others).
    pub fn ops(&self) -> u64 {
        match self {
            Kernel::Conv(c) | Kernel::Dense(c) => c.ops(),
            Kernel::Auto(c) => c.ops(),
            Kernel::Sum { conv, .. } => conv.ops(),
            _ => 0,
        }
    }

    /// A short description for the partition table.
    pub fn describe(&self) -> String {
        match self {
            Kernel::Conv(c) | Kernel::Dense(c) => c.kernel_description(),
            Kernel::Auto(c) => c.kernel_description(),
            Kernel::Sum { conv, .. } => format!("{}; sum: native add (fma)", conv.describe()),
            Kernel::Add { .. } => "native add (fma)".to_string(),
            Kernel::MaxPool { .. } => "native max pool".to_string(),
            Kernel::GlobalAvgPool { .. } => "native global avg pool".to_string(),
            Kernel::Quantize(_) => "native quantize".to_string(),
            Kernel::Dequantize(_) => "native dequantize".to_string(),
            Kernel::Copy => "copy".to_string(),
            Kernel::Reference { .. } => "reference".to_string(),
        }
    }

    /// Runs a native or compiled kernel: `inputs` in the partition's input order, `output` the
    /// partition's one output (`Reference` is run by the caller). Native kernels split their
    /// work across `pool` where there is one (compiled kernels use their own).
    pub fn run(&self, inputs: &[&Slot], output: &mut Slot, pool: Option<&Pool>) -> Result<(), LayerError> {
        match self {
            // A fused residual add's other operand is the last input (`graph::Residual`).
            Kernel::Conv(c) if c.has_sum() => {
                let sum = inputs.last().map(|s| &s.bytes[..]);
                c.run_with_sum(&inputs[0].bytes, sum, &mut output.bytes)?
            }
            Kernel::Conv(c) | Kernel::Dense(c) => c.run(&inputs[0].bytes, &mut output.bytes)?,
            Kernel::Auto(c) => c.run(&inputs[0].bytes, &mut output.bytes)?,
            Kernel::Sum { conv, params, ty, clamp, conv_is_a } => {
                conv.run(&inputs[..1], output, pool)?;
                let other = inputs[inputs.len() - 1];
                add_in_place(&mut output.bytes, &other.bytes, *conv_is_a, params, *ty, *clamp)
            }
            Kernel::Add { params, ty, clamp } => {
                add(pool, &inputs[0].bytes, &inputs[1].bytes, params, *ty, *clamp, &mut output.bytes)
            }
            Kernel::MaxPool { window, ty } => {
                let [n, c, h, w] = inputs[0].nchw();
                let [_, _, oh, ow] = output.nchw();
                max_pool(pool, &inputs[0].bytes, [n, h, w, c], [oh, ow], *window, *ty, &mut output.bytes)
            }
            Kernel::GlobalAvgPool { x, y, ty } => {
                let src = inputs[0];
                let (n, c) = (src.dims[0], src.dims[1]);
                let hw = src.dims[2..].iter().product();
                global_avg_pool(pool, &src.bytes, [n, hw, c], *x, *y, *ty, &mut output.bytes)
            }
            Kernel::Quantize(q) => {
                let dims = if output.nhwc { output.nchw() } else { [0; 4] };
                quantize(pool, &inputs[0].bytes, dims, output.nhwc, *q, &mut output.bytes)
            }
            Kernel::Dequantize(q) => {
                let src = inputs[0];
                let dims = if src.nhwc { src.nchw() } else { [0; 4] };
                dequantize(pool, &src.bytes, dims, src.nhwc, *q, &mut output.bytes)
            }
            Kernel::Copy => output.bytes.copy_from_slice(&inputs[0].bytes),
            Kernel::Reference { .. } => unreachable!("the engine runs reference partitions itself"),
        }
        Ok(())
    }
}
