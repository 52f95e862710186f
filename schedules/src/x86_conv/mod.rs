//! The x86 schedule of the int8 convolution: a direct convolution (`ops::conv2d_int8_direct`)
//! whose reduction is tensorized into an int8 micro-kernel, with typed knobs and a default per
//! layer (`knobs`). Which kernel family code generation picks follows from the ISA level and
//! the GEMM operands (the GEMM source's dtype and the weights' declared range), which follow
//! from the knobs' packing, the level and the weights' proven range
//! (`Conv2dInt8Knobs::operands`): VNNI, the `vpmaddubsw` triple proven exact, pre-widened i16
//! operands (`vpmaddwd`), or with the weights kept as bytes sign transfer on an i8 source or
//! exact widening.
//!
//! Two compiled functions make a layer (`schedule`). The weight preparation
//! (`prepare_conv2d_int8`, run once) packs the weights into VNNI panels (or i16 pairs) and
//! computes the compensation; the per-call function (`conv2d_int8`, NCHW or NHWC) pads the
//! source channels last and, per tile of `mr` pixels of an output row × `nr` output channels,
//! calls `int8_gemm_{mr}x{nr}x{KH}x{R}` (`int16_gemm_…` on pre-widened operands) on the source
//! rows in place, one reduction segment per kernel row (no im2col copy: consecutive pixels of a
//! row are `stride·IC` bytes apart, the `R = conv_row_bytes(IC, KW)` bytes a pixel reads of one
//! row are contiguous, the kernel rows one padded row apart), then requantizes into the output
//! layout. The int8 dense layer runs on the same path as a 1×1 convolution over a row of `M`
//! pixels (`dense_int8`). `table_layer` builds both functions of a resnet-18 layer (`layer`).

mod knobs;
mod layer;
mod schedule;

pub use knobs::{
    Accumulate, Conv2dInt8Knobs, CoreRate, KnobError, MAX_TILE_MR, MIN_PARALLEL_OPS, MIN_PARALLEL_OPS_SLOWER_CORES,
    Packing, TileOrder, default_conv_knobs, default_dense_knobs, default_knobs, flat_rows_pixels, weight_range,
};
pub use layer::table_layer;
pub use schedule::{
    Conv2dInt8, Conv2dInt8Error, Conv2dInt8Prepare, conv2d_int8, dense_int8, prepare_conv2d_int8, prepare_dense_int8,
    schedule_conv2d_int8,
};
