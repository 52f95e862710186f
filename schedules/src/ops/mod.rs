//! Quantized (int8) operators and layout transforms as tensor expressions, following the model
//! of `quant` (oneDNN's; the convolutions and the dense layer requantize in onnxruntime's order
//! instead where `QuantAttrs::requantization` says so). The default schedule (`generic::default_schedule`) of each is the
//! reference; target schedules must compute the same values bit for bit.
//!
//! Activations are NCHW at the API (batch `N` is any positive size; resnet-18 uses 1); the
//! direct convolution that x86 schedules tensorize (`conv2d_int8_direct`) also takes and gives
//! NHWC (`Layout`), and `convert_layout` moves between the two. A weight
//! preparation function (`compensation`) is separate from the per-call graph: it runs once when
//! the weights are packed, and the per-call operators read its result through a placeholder.
//!
//! Files, one concept each:
//! * `conv`: `conv2d_nchw_int8`, the reference convolution, and the geometry every convolution
//!   checks;
//! * `direct_conv`: `conv2d_int8_direct`, the convolution as x86 schedules tensorize it;
//! * `grouped_conv`: `conv2d_nhwc_grouped_int8`, the convolution of any 2-D geometry (groups,
//!   depthwise, per-side pads, dilations, batch) as one definition for generated schedules;
//! * `dense`: `dense_int8`;
//! * `layer`: what they share: `QuantizedLayer`, the attribute checks, the requantization (as a
//!   stage and as a `Map` declaration);
//! * `gemm_operands`: `GemmOperands`, how the GEMM reads its operands, and the source shift to
//!   its dtype;
//! * `compensation`: the weight preparation of the source zero point;
//! * `packing`: weights in the layouts the VNNI kernels read;
//! * `space_to_depth`: a strided convolution as one at stride 1 on blocks of pixels;
//! * `layout`: `Layout` and the activation layout transforms;
//! * `pool`: max and global average pooling;
//! * `elementwise`: ReLU and the residual add;
//! * `checks`: the argument checks and typed errors they all share.

mod checks;
mod compensation;
mod conv;
mod dense;
mod direct_conv;
mod elementwise;
mod gemm_operands;
mod grouped_conv;
mod layer;
mod layout;
mod packing;
mod pool;
mod space_to_depth;

pub use compensation::{Compensation, compensation, compensation_for_gemm};
pub use conv::{Conv2dParams, conv2d_nchw_int8};
pub use dense::dense_int8;
pub use direct_conv::{DirectConvLayer, SourceRows, conv2d_int8_direct};
pub use elementwise::{add_int8, relu_int8};
pub use gemm_operands::{GemmOperands, source_shift};
pub use grouped_conv::{GroupedConvParams, conv2d_nhwc_grouped_int8};
pub use layer::{QuantizedLayer, Requantized, requantize_accumulator};
pub use layout::{Layout, convert_layout, nchw_to_nchwc, nchwc_to_nchw};
pub use packing::{conv_row_bytes, im2col_k, oihw_to_vnni_blocked, pack_conv2d_weights};
pub use pool::{global_avg_pool, max_pool2d};
pub use space_to_depth::{
    space_to_depth_applies, space_to_depth_dims, space_to_depth_source, space_to_depth_values, space_to_depth_weights,
};
