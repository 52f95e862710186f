//! The schedule of the int8 convolution (`conv2d_int8`, with its weight preparation
//! `prepare_conv2d_int8`) and of the int8 dense layer on the same path (`dense_int8`,
//! `prepare_dense_int8`), each taking the knobs and the GEMM operands they give for the level
//! and the weights (`Conv2dInt8Knobs::operands`).

use ir::schedule::{Schedule, create_schedule};
use ir::te::placeholder_vec;
use ir::{DType, ScheduleError, Tensor};
use thiserror::Error;

use super::knobs::{Accumulate, Conv2dInt8Knobs, KnobError, TileOrder};
use crate::intrin::{copy_map, gemm_segmented_microkernel};
use crate::ops::{
    Compensation, Conv2dParams, DirectConvLayer, GemmOperands, Layout, compensation_for_gemm, conv_row_bytes,
    conv2d_int8_direct, pack_conv2d_weights, space_to_depth_weights,
};
use crate::quant::{QuantAttrs, QuantError, ZeroPoints};

/// An error building the convolution or scheduling it.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum Conv2dInt8Error {
    #[error(transparent)]
    Quant(#[from] QuantError),
    #[error(transparent)]
    Schedule(#[from] ScheduleError),
    #[error(transparent)]
    Knob(#[from] KnobError),
}

/// The per-call function of a convolution layer.
#[derive(Clone, Debug)]
pub struct Conv2dInt8 {
    /// The stages; `layer.output` is the result.
    pub layer: DirectConvLayer,
    pub schedule: Schedule,
    /// The function's arguments, in order: `src`, `layer.packed_weights`, `layer.compensation`,
    /// the bias (if given), the sum input (if given), each `layer.params[i].tensor` (bind
    /// `layer.params[i].values`), then `layer.output`.
    pub args: Vec<Tensor>,
}

/// The weight preparation of a convolution layer, run once per set of weights.
#[derive(Clone, Debug)]
pub struct Conv2dInt8Prepare {
    /// `i8[⌈OC/nr⌉, KH·R/4, nr, 4]` (`i16[⌈OC/nr⌉, KH·R/2, nr, 2]` for an i16 GEMM source):
    /// bind to `Conv2dInt8::layer.packed_weights`.
    pub packed_weights: Tensor,
    /// `compensation.compensation` (`i32[OC]`): bind to `Conv2dInt8::layer.compensation`.
    pub compensation: Compensation,
    pub schedule: Schedule,
    /// The function's arguments, in order: `weights`, `packed_weights`,
    /// `compensation.compensation`.
    pub args: Vec<Tensor>,
}

/// The weight preparation for `conv2d_int8` with the same `knobs.nr`, `operands`, source dtype
/// and source zero point, at the convolution's `stride`: `weights: i8[OC, IC, KH, KW]` (after
/// `ops::space_to_depth_weights` where the knobs apply space to depth at that stride) packed by
/// `ops::pack_conv2d_weights` and the compensation of `ops::compensation_for_gemm`, both as outputs of one (generically
/// scheduled) function. Errors as `conv2d_int8` for knobs outside their ranges.
pub fn prepare_conv2d_int8(
    weights: &Tensor,
    stride: i64,
    src_dtype: DType,
    src_zero_point: &ZeroPoints,
    knobs: Conv2dInt8Knobs,
    operands: GemmOperands,
    name: &str,
) -> Result<Conv2dInt8Prepare, Conv2dInt8Error> {
    knobs.check()?;
    // A weight shape that is not `[OC, IC, KH, KW]` is the packing's typed error.
    let (gemm_k, block) = match *weights.shape() {
        [_, ic, kh, kw] => (knobs.gemm_k(ic, kh, kw, stride), knobs.space_to_depth(stride, kh, kw)),
        _ => (0, None),
    };
    // The kernel the GEMM runs: the weights, or rearranged by space to depth.
    let kernel = match block {
        Some(s) => space_to_depth_weights(weights, s, &format!("{name}.space_to_depth"))?,
        None => weights.clone(),
    };
    let packed_weights = pack_conv2d_weights(&kernel, knobs.nr, operands, gemm_k, &format!("{name}.packed"))?;
    let gemm_dtype = operands.source;
    let compensation =
        compensation_for_gemm(weights, src_dtype, gemm_dtype, src_zero_point, &format!("{name}.compensation"))?;
    let schedule = create_schedule(&[&packed_weights, &compensation.compensation]);
    let args = vec![weights.clone(), packed_weights.clone(), compensation.compensation.clone()];
    Ok(Conv2dInt8Prepare { packed_weights, compensation, schedule, args })
}

/// The int8 convolution of `ops::conv2d_nchw_int8` (same meaning, bit for bit) with the source,
/// the sum input and the output in `layout` (NCHW as the definition, or NHWC: the layout the
/// schedule computes in, so chained NHWC layers skip both transposes), scheduled for x86:
/// * the source converted to the GEMM source's dtype where they differ
///   (`DirectConvLayer::shifted`) is inlined into the padding stage, whose pixels' channels are
///   vectorized (with fewer than 16 channels: rows in NHWC, channels unrolled in NCHW) and rows
///   run on the thread pool;
/// * `acc`: tiles of `mr` pixels of a row × `nr` channels in `knobs.order` (the GEMM reads its
///   operands as `operands` says: the same as the weights were prepared with), fused into one
///   parallel loop; per tile, one `int8_gemm_{mr}x{nr}x{KH}x{R}` call over the `KH` kernel
///   rows (`int8_gemm_{mr}x{nr}x{R}` for a 1×1 kernel), which covers the whole reduction and so
///   resets the tile itself (`call reset`: the kernel starts from zero instead of reading it);
/// * the output: in NHWC, each row of `OW` pixels × `OC` channels tensorized with the layer's
///   requantization (`DirectConvLayer::requantize_row`, a `Map`: a zmm or ymm kernel compiled
///   from it); in NCHW, channels split by `lanes` and vectorized (the accumulator,
///   compensation, scales and bias are contiguous in them); rows on the thread pool.
///
/// Every geometry compiles with any knobs in the ranges `Conv2dInt8Knobs::check` accepts. The
/// schedule changes two of them where they exceed the layer, as their documentation says: an
/// `mr` above the `OW` pixels of an output row is clamped to `OW` (the tile and its
/// micro-kernel are then `OW` rows), and `lanes` above `OC` are capped to `OC` (an NCHW output
/// only). `Accumulate::PerRow` and `PerRowWithSource` compute all accumulators at once where
/// `nr` does not divide `OC`; `FlatRows` is `Whole` where flat rows do not apply
/// (`ops::DirectConvLayer::flat`), and else tiles `mr` of the flat rows' pixels (clamped to
/// them), whose calls read kernel rows one padded row (`WS·IC`) apart. `SpaceToDepth` is
/// `PerRow` over the rows space to depth copies from the padded ones (one `copy_map` per row
/// and source row of a block, all rows first), where it applies (`Conv2dInt8Knobs::space_to_depth`).
///
/// Errors: the definition's typed `QuantError`s, and `Conv2dInt8Error::Knob` for knobs outside
/// their ranges (`mr` and `threads` below 1, `nr` or `lanes` outside
/// `1..=ir::schedule::MAX_LANES`) in either layout.
#[allow(clippy::too_many_arguments)]
pub fn conv2d_int8(
    src: &Tensor,
    weights: &Tensor,
    bias: Option<&Tensor>,
    sum_input: Option<&Tensor>,
    conv: Conv2dParams,
    attrs: &QuantAttrs,
    layout: Layout,
    knobs: Conv2dInt8Knobs,
    operands: GemmOperands,
    name: &str,
) -> Result<Conv2dInt8, Conv2dInt8Error> {
    knobs.check()?;
    let rows = knobs.source_rows();
    let layer = conv2d_int8_direct(src, weights, bias, sum_input, conv, attrs, layout, knobs.nr, operands, rows, name)?;
    schedule_conv2d_int8(layer, src, weights, bias, sum_input, layout, knobs, operands)
}

/// `conv2d_int8`'s schedule of `layer`, the definition `ops::conv2d_int8_direct` made from the
/// same `src`, `weights`, `bias`, `sum_input`, `layout`, `knobs.nr` and `operands` (checked
/// `knobs`): what a caller that wants the definition alone first (its workload key, its
/// parameters) schedules afterwards, if at all.
#[allow(clippy::too_many_arguments)]
pub fn schedule_conv2d_int8(
    layer: DirectConvLayer,
    src: &Tensor,
    weights: &Tensor,
    bias: Option<&Tensor>,
    sum_input: Option<&Tensor>,
    layout: Layout,
    knobs: Conv2dInt8Knobs,
    operands: GemmOperands,
) -> Result<Conv2dInt8, Conv2dInt8Error> {
    let mut s = create_schedule(&[&layer.output]);
    if let Some(shifted) = &layer.shifted {
        s.compute_inline(shifted)?;
    }
    // The source's channels, and the kernel the GEMM runs (after space to depth, where the
    // knobs ask for it).
    let ic = weights.shape()[1];
    let [gemm_ic, kh, kw] = layer.gemm_kernel;
    let row = conv_row_bytes(gemm_ic, kw);

    // Lanes within one pixel's channels where they fill a vector (the source read is then one
    // dense ramp at the pixel, whatever the stride). Otherwise (the stem's 3 channels): in NHWC,
    // 16 lanes along the row, dense away from the padding, where the vectors that straddle it
    // are gathers (wider ones cost more compile time than they save); in NCHW, where a pixel's
    // channels are planes apart, the channels of a pixel unrolled.
    let pad = &layer.padded;
    // Flat rows are split back into the padded rows, so that each vectorizes as before.
    let (pad_rows, pad_row) = match layer.flat {
        Some(ws) => s.split(pad, &pad.axis(1), ws * ic)?,
        None => (pad.axis(1), pad.axis(2)),
    };
    match ([64, 32, 16].into_iter().find(|v| ic % v == 0), layout) {
        (Some(vector), _) => {
            let (_pixel, channel) = s.split(pad, &pad_row, ic)?;
            let (_, lanes) = s.split(pad, &channel, vector)?;
            s.vectorize(pad, &lanes)?;
        }
        (None, Layout::Nhwc) => {
            let (_, lanes) = s.split(pad, &pad_row, 16)?;
            s.vectorize(pad, &lanes)?;
        }
        (None, Layout::Nchw) => {
            let (_pixel, channel) = s.split(pad, &pad_row, ic)?;
            s.unroll(pad, &channel)?;
        }
    }
    let oc = weights.shape()[0];
    let per_row = matches!(
        knobs.accumulation,
        Accumulate::PerRow
            | Accumulate::PerRowWithSource
            | Accumulate::Im2col
            | Accumulate::Im2colTiles
            | Accumulate::SpaceToDepth
    ) && oc % knobs.nr == 0;
    let source_per_row = per_row && knobs.accumulation == Accumulate::PerRowWithSource;
    if knobs.parallel() && !source_per_row {
        s.parallel(pad, &pad_rows)?;
    }

    // Space to depth: per row and source row `dy` of a block, one copy of the row's pixels ×
    // their `s·IC` bytes of that source row (`copy_map`); all rows before the accumulators, as
    // the padded ones (each feeds `KH'` rows of accumulators).
    let s2d_copy = match &layer.space_to_depth {
        Some((st, run)) => {
            let (x, q) = s.split(st, &st.axis(2), gemm_ic)?;
            let (dy, j) = s.split(st, &q, *run)?;
            s.reorder(st, &[&st.axis(0), &st.axis(1), &dy, &x, &j])?;
            if knobs.parallel() {
                s.parallel(st, &st.axis(1))?;
            }
            Some((st.clone(), x, *run))
        }
        None => None,
    };

    // Gathered rows: per row of pixels, each kernel row (a chunk of `R` of every pixel's row)
    // is one copy of `OW × R` (`copy_map`), with the accumulators' row where they are per row.
    let col_chunks = match &layer.im2col {
        Some(col) => {
            let (chunk, r) = s.split(col, &col.axis(3), row)?;
            let (cy, cx) = (col.axis(1), col.axis(2));
            s.reorder(col, &[&col.axis(0), &cy, &chunk, &cx, &r])?;
            if knobs.parallel() && !per_row {
                s.parallel(col, &cy)?;
            }
            Some((col.clone(), cx))
        }
        None => None,
    };

    let acc = &layer.acc;
    // The tile's pixels: of one output row, or of the flat rows (`[b, v, o]`).
    let (b, y, x, o) = match layer.flat {
        Some(_) => (acc.axis(0), None, acc.axis(1), acc.axis(2)),
        None => (acc.axis(0), Some(acc.axis(1)), acc.axis(2), acc.axis(3)),
    };
    // A tile of at most the row's pixels: `split` caps its factor to the extent, and the
    // micro-kernel must be declared for the tile the split makes.
    let mr = knobs.mr.min(acc.shape()[acc.shape().len() - 2]);
    let (xo, xi) = s.split(acc, &x, mr)?;
    let (oo, oi) = s.split(acc, &o, knobs.nr)?;
    let [ky, ko, ki] = [0, 1, 2].map(|d| acc.reduce_axes()[d].clone());
    let pixels: Vec<_> = [Some(&b), y.as_ref(), Some(&xo)].into_iter().flatten().collect();
    let tiles = match knobs.order {
        TileOrder::PixelsOuter => [pixels.as_slice(), &[&oo]].concat(),
        TileOrder::ChannelsOuter => [&[&oo], pixels.as_slice()].concat(),
    };
    let mut order = tiles.clone();
    order.extend([&ky, &ko, &ki, &xi, &oi]);
    s.reorder(acc, &order)?;
    s.vectorize(acc, &oi)?;
    if knobs.parallel() && !per_row {
        let mut outer = tiles[0].clone();
        for tile in &tiles[1..] {
            outer = s.fuse(acc, &outer, tile)?;
        }
        s.parallel(acc, &outer)?;
    }

    let out = &layer.output;
    let axes = [0, 1, 2, 3].map(|d| out.axis(d));
    if layout == Layout::Nchw {
        let (channels, lanes) = s.split(out, &axes[1], knobs.lanes)?;
        s.reorder(out, &[&axes[0], &axes[2], &axes[3], &channels, &lanes])?;
        s.vectorize(out, &lanes)?;
    }
    let oy = if layout == Layout::Nhwc { &axes[1] } else { &axes[2] };
    if per_row {
        s.compute_at(acc, out, oy)?;
    }
    if let (true, Some(y)) = (source_per_row, &y) {
        s.compute_at(pad, acc, y)?;
    }
    if let (true, Some(y), Some((col, _))) = (per_row, &y, &col_chunks) {
        s.compute_at(col, acc, y)?;
    }
    if knobs.parallel() {
        s.parallel(out, oy)?;
    }
    // The tensorize requests last: every later primitive re-proves each of them, so placed
    // here each is proved once (and again by lowering). One call per tile runs every kernel
    // row (a segment of the reduction, one padded row apart), so the accumulators stay in
    // registers across the rows.
    // Over gathered rows, one segment of all of `K` (the packed weights' groups).
    let (segments, seg_k) = match &layer.im2col {
        Some(_) => (1, layer.packed_weights.shape()[1] * operands.pack()),
        None => (kh, row),
    };
    let intrin = gemm_segmented_microkernel(mr, knobs.nr, segments, seg_k, operands.source)
        .expect("tile sizes passed split and R is a multiple of 4");
    s.tensorize(acc, if segments > 1 { &ky } else { &ko }, &intrin)?;
    if let Some((st, x, run)) = &s2d_copy {
        let copy = copy_map(st.shape()[2] / gemm_ic, *run, st.dtype()).expect("pixels and runs are positive");
        s.tensorize(st, x, &copy)?;
    }
    if let Some((col, cx)) = &col_chunks {
        let copy = copy_map(col.shape()[2], row, col.dtype()).expect("a row of pixels and R are positive");
        s.tensorize(col, cx, &copy)?;
    }
    // In NHWC a row's pixels × channels are one block, contiguous along the channels in the
    // accumulator, the parameters and the output: the map kernel of the level.
    if layout == Layout::Nhwc {
        s.tensorize(out, &axes[2], &layer.requantize_row)?;
    }

    let mut args = vec![src.clone(), layer.packed_weights.clone(), layer.compensation.clone()];
    args.extend(bias.cloned());
    args.extend(sum_input.cloned());
    args.extend(layer.params.iter().map(|p| p.tensor.clone()));
    args.push(layer.output.clone());
    Ok(Conv2dInt8 { layer, schedule: s, args })
}

/// The placeholder of the same dtype, name and bytes as `t: [A, B]` with the shape `dims(A, B)`.
fn reshaped(t: &Tensor, dims: impl Fn(i64, i64) -> [i64; 4]) -> Tensor {
    let [a, b] = *t.shape() else { return t.clone() };
    placeholder_vec(dims(a, b).to_vec(), t.dtype(), t.name())
        .expect("a reshape of a checked placeholder keeps its element count")
}

/// The weights `[OC, IC]` of a dense layer as the 1×1 kernel `[OC, IC, 1, 1]`.
fn as_kernel(weights: &Tensor) -> Tensor {
    reshaped(weights, |oc, ic| [oc, ic, 1, 1])
}

/// The weight preparation of `dense_int8`: `prepare_conv2d_int8` of `weights: i8[OC, IC]` as
/// `[OC, IC, 1, 1]`. The first argument (`args[0]`) is that 4-D placeholder: bind the `[OC, IC]`
/// weights with that shape (same bytes).
pub fn prepare_dense_int8(
    weights: &Tensor,
    src_dtype: DType,
    src_zero_point: &ZeroPoints,
    knobs: Conv2dInt8Knobs,
    operands: GemmOperands,
    name: &str,
) -> Result<Conv2dInt8Prepare, Conv2dInt8Error> {
    prepare_conv2d_int8(&as_kernel(weights), 1, src_dtype, src_zero_point, knobs, operands, name)
}

/// The int8 dense layer of `ops::dense_int8` (`src: [M, IC]`, `weights: [OC, IC]`, same meaning
/// bit for bit) on the tensorized path: the NHWC `conv2d_int8` of a 1×1 kernel over one image of
/// one row of `M` pixels, i.e. `src` as `[1, 1, M, IC]`, `weights` as `[OC, IC, 1, 1]`, output
/// `[1, 1, M, OC]` (the bytes of `[M, OC]`). The function's arguments are those of
/// `conv2d_int8` with these 4-D placeholders: bind the dense arrays reshaped. `OC` need not
/// be a multiple of `nr`: the packing pads the last panel with zero weights and the
/// requantization reads only the first `OC` columns. No sum input (a sum post-op is the typed
/// error of a missing sum input). `src` and `weights` that are not 2-D are the typed shape
/// error of the convolution. An `mr` above `M` is clamped to `M`.
pub fn dense_int8(
    src: &Tensor,
    weights: &Tensor,
    bias: Option<&Tensor>,
    attrs: &QuantAttrs,
    knobs: Conv2dInt8Knobs,
    operands: GemmOperands,
    name: &str,
) -> Result<Conv2dInt8, Conv2dInt8Error> {
    let conv = Conv2dParams { stride: 1, pad: 0 };
    let rows = reshaped(src, |m, ic| [1, 1, m, ic]);
    conv2d_int8(&rows, &as_kernel(weights), bias, None, conv, attrs, Layout::Nhwc, knobs, operands, name)
}
