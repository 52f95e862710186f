//! The typed attributes of the ops (`OpKind` says what each op computes with them). Integers are
//! `i64`, as a model file gives them, so that a negative pad or a zero stride reaches
//! finalization and becomes a typed error there instead of being unrepresentable.

use super::dtype::DataType;

/// Convolution geometry. Each list has one entry per spatial dimension.
#[derive(Clone, Debug, PartialEq)]
pub struct ConvAttrs {
    /// Step between output positions, ≥ 1.
    pub strides: Vec<i64>,
    /// Implicit zeros before the first element of each spatial dimension, ≥ 0.
    pub pads_begin: Vec<i64>,
    /// Implicit zeros after the last element, ≥ 0.
    pub pads_end: Vec<i64>,
    /// Step between kernel taps, ≥ 1 (1: dense kernel).
    pub dilations: Vec<i64>,
    /// Channel groups, ≥ 1, dividing both the input and the output channels.
    pub groups: i64,
}

impl ConvAttrs {
    /// Stride 1, no padding, no dilation, one group, for `spatial` spatial dimensions.
    pub fn unit(spatial: usize) -> ConvAttrs {
        ConvAttrs {
            strides: vec![1; spatial],
            pads_begin: vec![0; spatial],
            pads_end: vec![0; spatial],
            dilations: vec![1; spatial],
            groups: 1,
        }
    }

    /// A 2-D convolution with the same stride and the same padding on every side.
    pub fn square(stride: i64, pad: i64) -> ConvAttrs {
        ConvAttrs { strides: vec![stride; 2], pads_begin: vec![pad; 2], pads_end: vec![pad; 2], ..ConvAttrs::unit(2) }
    }
}

/// Matrix product operand order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct MatMulAttrs {
    /// Read `a` as `[.., K, M]` and use its transpose.
    pub transpose_a: bool,
    /// Read `b` as `[.., N, K]` and use its transpose.
    pub transpose_b: bool,
}

/// The axis of the data a bias runs along.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BiasAddAttrs {
    /// `0 ≤ axis < rank` (1 for NCHW convolution outputs, the last for matrix products).
    pub axis: i64,
}

/// Clamping bounds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ClipAttrs {
    /// Not NaN, `min ≤ max`; ±∞ allowed.
    pub min: f32,
    pub max: f32,
}

/// Max pooling geometry. Each list has one entry per spatial dimension.
#[derive(Clone, Debug, PartialEq)]
pub struct MaxPoolAttrs {
    /// Window size, ≥ 1.
    pub kernel: Vec<i64>,
    /// ≥ 1.
    pub strides: Vec<i64>,
    /// ≥ 0 and smaller than the kernel (as onnxruntime requires).
    pub pads_begin: Vec<i64>,
    pub pads_end: Vec<i64>,
    /// ≥ 1.
    pub dilations: Vec<i64>,
    /// Round the output size up instead of down (ONNX `ceil_mode`).
    pub ceil_mode: bool,
}

impl MaxPoolAttrs {
    /// A 2-D window of `kernel`² with the same stride and padding everywhere, no dilation.
    pub fn square(kernel: i64, stride: i64, pad: i64) -> MaxPoolAttrs {
        MaxPoolAttrs {
            kernel: vec![kernel; 2],
            strides: vec![stride; 2],
            pads_begin: vec![pad; 2],
            pads_end: vec![pad; 2],
            dilations: vec![1; 2],
            ceil_mode: false,
        }
    }
}

/// Average pooling geometry. Each list has one entry per spatial dimension.
#[derive(Clone, Debug, PartialEq)]
pub struct AvgPoolAttrs {
    /// Window size, ≥ 1.
    pub kernel: Vec<i64>,
    /// ≥ 1.
    pub strides: Vec<i64>,
    /// ≥ 0 and smaller than the kernel.
    pub pads_begin: Vec<i64>,
    pub pads_end: Vec<i64>,
    /// Round the output size up instead of down (ONNX `ceil_mode`).
    pub ceil_mode: bool,
    /// Count padded positions in the divisor (ONNX `count_include_pad`).
    pub count_include_pad: bool,
}

impl AvgPoolAttrs {
    /// A 2-D window of `kernel`² with the same stride and padding everywhere.
    pub fn square(kernel: i64, stride: i64, pad: i64) -> AvgPoolAttrs {
        AvgPoolAttrs {
            kernel: vec![kernel; 2],
            strides: vec![stride; 2],
            pads_begin: vec![pad; 2],
            pads_end: vec![pad; 2],
            ceil_mode: false,
            count_include_pad: false,
        }
    }
}

/// The axes a mean reduces.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReduceMeanAttrs {
    /// Distinct axes in `-rank..rank` (negative counts from the end); at least one.
    pub axes: Vec<i64>,
    /// Keep each reduced axis as a dimension of size 1.
    pub keep_dims: bool,
}

/// Quantization parameters: `real = scale · (int − zero_point)`.
#[derive(Clone, Debug, PartialEq)]
pub struct QuantParams {
    /// Finite and positive; one value (per tensor) or one per index of `axis`.
    pub scales: Vec<f32>,
    /// As many as `scales`, each in the range of the integer type (0 for s32).
    pub zero_points: Vec<i32>,
    /// `None`: per tensor. `Some(axis)`: per channel along `0 ≤ axis < rank`.
    pub axis: Option<i64>,
}

impl QuantParams {
    /// One scale and zero point for the whole tensor.
    pub fn per_tensor(scale: f32, zero_point: i32) -> QuantParams {
        QuantParams { scales: vec![scale], zero_points: vec![zero_point], axis: None }
    }

    /// One scale per index of `axis`, zero points all zero (symmetric, as weights are).
    pub fn per_channel(axis: i64, scales: Vec<f32>) -> QuantParams {
        QuantParams { zero_points: vec![0; scales.len()], scales, axis: Some(axis) }
    }

    /// The scale and zero point of channel `c` (the only ones, per tensor).
    pub fn get(&self, c: usize) -> (f32, i32) {
        let i = if self.axis.is_some() { c } else { 0 };
        (self.scales.get(i).copied().unwrap_or(f32::NAN), self.zero_points.get(i).copied().unwrap_or(0))
    }
}

/// Quantization into an 8-bit type.
#[derive(Clone, Debug, PartialEq)]
pub struct QuantizeAttrs {
    pub params: QuantParams,
    /// `U8` or `S8`.
    pub dtype: DataType,
}

/// A floating-point conversion.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TypeCastAttrs {
    /// The output type: `F16` or `Bf16` from `F32`, or `F32` from either.
    pub dtype: DataType,
}

/// A new shape for the same elements (ONNX `Reshape` without `allowzero`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReshapeAttrs {
    /// Each entry ≥ 1 (that size), 0 (the input's dimension at the same index) or -1 (at most
    /// once: whatever makes the element counts equal).
    pub shape: Vec<i64>,
}

/// A permutation of the axes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TransposeAttrs {
    /// A permutation of `0..rank`: output axis `i` is input axis `perm[i]`.
    pub perm: Vec<i64>,
}
