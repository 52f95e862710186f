//! The x86 schedule of the int8 convolution: a direct convolution (`ops::conv2d_int8_direct`)
//! whose reduction is tensorized into an int8 micro-kernel, with typed knobs and a default per
//! resnet-18 layer. Which kernel family code generation picks follows from the ISA level and
//! `Conv2dInt8Knobs::operands` (the GEMM source's dtype and the weights' proven range, set by
//! `Conv2dInt8Knobs::with_weights`): VNNI, the `vpmaddubsw` triple proven exact, pre-widened
//! i16 operands (`vpmaddwd`), or with the weights kept as bytes (`with_byte_weights`) sign
//! transfer on an i8 source or exact widening.
//!
//! Two compiled functions make a layer. The weight preparation (`prepare_conv2d_int8`, run once)
//! packs the weights into VNNI panels (or i16 pairs) and computes the compensation; the
//! per-call function (`conv2d_int8`, NCHW or NHWC) pads the source channels last and, per tile
//! of `mr` pixels of an output row × `nr` output channels, calls `int8_gemm_{mr}x{nr}x{KH}x{R}`
//! (`int16_gemm_…` on pre-widened operands) on the
//! source rows in place, one reduction segment per kernel row (no im2col copy: consecutive
//! pixels of a row are `stride·IC` bytes apart, the `R = conv_row_bytes(IC, KW)` bytes a pixel
//! reads of one row are contiguous, the kernel rows one padded row apart), then requantizes into the output layout. The int8 dense layer runs on the same path as a 1×1
//! convolution over a row of `M` pixels (`dense_int8`).

use ir::intrin::pair_sums_fit_i16;
use ir::schedule::{Schedule, create_schedule};
use ir::te::placeholder_vec;
use ir::{DType, ScheduleError, Tensor};
use thiserror::Error;

use crate::intrin::gemm_segmented_microkernel;
use crate::ops::{
    Compensation, Conv2dParams, DirectConvLayer, GemmOperands, Layout, compensation_for_gemm, conv_row_bytes,
    conv2d_int8_direct, pack_conv2d_weights,
};
use crate::quant::{QuantAttrs, QuantError, ZeroPoints};
use crate::resnet18::{ConvLayer, DenseLayer, Layer, LayerQuant};

/// The order of the tile loops of the convolution.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TileOrder {
    /// Rows, pixel tiles, then channel panels: a pixel tile's source rows stay in cache while
    /// every weight panel streams past them.
    PixelsOuter,
    /// Channel panels outermost: one weight panel stays in cache while the source streams past.
    ChannelsOuter,
}

/// Where the accumulators (`DirectConvLayer::acc`, i32) are computed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Accumulate {
    /// All of them (an `OH × OW × OC` buffer), then the requantization.
    Whole,
    /// One output row at a time, inside the output's row loop (`compute_at`): the row's
    /// `OW × OC` accumulators stay in L1 between the micro-kernel and the requantization. The
    /// threads then split the rows, whatever the tile order. Where `nr` does not divide `OC`,
    /// `Whole`: a row holds only the `OC` channels the requantization reads, so the last panel
    /// (all of them when `nr > OC`) would fall back to loops, where the whole buffer is padded
    /// to full panels.
    PerRow,
    /// `PerRow`, and the padded source rows that a row of accumulators reads copied inside it
    /// (at the accumulators' row loop) rather than all of them first: one parallel loop
    /// instead of two, and the rows in L1, for `KH / stride` copies of each source row instead
    /// of one. With channel panels outermost, the rows are copied again for each panel.
    PerRowWithSource,
}

/// The decisions of the int8 convolution schedule. A tuner varies these and nothing else.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Conv2dInt8Knobs {
    /// Output pixels of one row per micro-kernel tile (rows of the GEMM).
    pub mr: i64,
    /// Output channels per micro-kernel tile and weight panel; the weights must be prepared with
    /// the same `nr`. A multiple of 16 fills zmm registers.
    pub nr: i64,
    /// Lanes of the vectorized epilogue of an NCHW output. An NHWC output is tensorized with
    /// the layer's requantization (`DirectConvLayer::requantize_row`), which code generation
    /// runs as a map kernel of the level's vector width.
    pub lanes: i64,
    /// The order of the tile loops.
    pub order: TileOrder,
    /// Run the outer loops of every stage on the thread pool.
    pub parallel: bool,
    /// How the micro-kernel reads the source and the weights, which picks the kernel family
    /// (`with_weights`).
    pub operands: GemmOperands,
    pub accumulate: Accumulate,
}

impl Conv2dInt8Knobs {
    /// These knobs with the operands that give the fastest exact kernel for weights proven to
    /// lie in `weights` (the range of the actual weights, from `weight_range`), on a CPU with
    /// or without VNNI:
    /// * with VNNI, a u8 source (`vpdpbusd` is exact on any weights);
    /// * without, a u8 source when every pair of weights keeps `255·(w0 + w1)` in i16 (7-bit
    ///   weights in [-64, 64]): the `vpmaddubsw` triple is then exact, and the range is
    ///   declared on the packed weights, so every call checks it;
    /// * else pre-widened i16 operands (`vpmaddwd`, exact on any weights). Sign transfer (an i8
    ///   source) is exact too when no weight is -128, but its chain has one instruction more
    ///   and most convolutions ran 3–6% faster pre-widened (R9 and R11 2% slower); the dense
    ///   layer, which streams its weights once per call, ran faster on bytes (the Xeon's
    ///   "Exact int8 at the AVX2 level", `git show 2c3ae31:BENCHMARKS.md`), which the tuner picks there (`with_byte_weights`).
    ///
    /// The declared range is the weights' only where a kernel relies on it (the triple, sign
    /// transfer: a call scans it unless the weights are a `CheckedTensor`, checked once when
    /// bound); elsewhere it is all of i8, which calls do not scan (FC's 512 KiB of weights
    /// were scanned on every call for nothing).
    pub fn with_weights(self, vnni: bool, (lo, hi): (i8, i8)) -> Conv2dInt8Knobs {
        let proven = (lo.min(0), hi.max(0));
        let triple = pair_sums_fit_i16((0, 255), (i64::from(proven.0), i64::from(proven.1)));
        let (source, weights) = match (vnni, triple) {
            (false, true) => (DType::U8, proven),
            (true, _) => (DType::U8, ANY_WEIGHT),
            (false, false) => (DType::I16, ANY_WEIGHT),
        };
        Conv2dInt8Knobs { operands: GemmOperands { source, weights }, ..self }
    }

    /// `with_weights` with the weights packed as bytes, a layout that is the same at every
    /// level (what a library dispatching between levels at run time needs: one preparation for
    /// all): sign transfer instead of pre-widened operands where no weight is -128, else exact
    /// widening.
    pub fn with_byte_weights(self, vnni: bool, range: (i8, i8)) -> Conv2dInt8Knobs {
        let knobs = self.with_weights(vnni, range);
        if knobs.operands.source != DType::I16 {
            return knobs;
        }
        let proven = (range.0.min(0), range.1.max(0));
        let operands = if proven.0 > i8::MIN {
            GemmOperands { source: DType::I8, weights: proven }
        } else {
            GemmOperands { source: DType::U8, weights: ANY_WEIGHT }
        };
        Conv2dInt8Knobs { operands, ..knobs }
    }
}

/// The declared weight range where no kernel relies on one.
const ANY_WEIGHT: (i8, i8) = (i8::MIN, i8::MAX);

/// The smallest and largest of `weights` (`(0, 0)` when there are none).
pub fn weight_range(weights: impl IntoIterator<Item = i8>) -> (i8, i8) {
    weights
        .into_iter()
        .fold(None, |range, w| match range {
            None => Some((w, w)),
            Some((lo, hi)) => Some((w.min(lo), w.max(hi))),
        })
        .unwrap_or((0, 0))
}

/// How fast one core multiplies int8 at the level code is compiled for: where a layer starts
/// to pay for a second thread follows from it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CoreRate {
    /// A full-width zmm `vpdpbusd` per cycle or more (AVX-512 VNNI on 512-bit units, as on
    /// the Intel Xeon: about 950 GOPS per core).
    FullZmmVnni,
    /// Half of that or less: AVX-512 VNNI on 256-bit units (Zen 4: about 465 GOPS per core),
    /// VNNI on ymm, or no VNNI.
    Slower,
}

/// Layers with fewer int8 operations run on one thread by default at `CoreRate::FullZmmVnni`:
/// there the 1×1 layers of resnet-18 (12.8 M operations, 14–27 µs on one thread) ran at
/// 0.82–0.96× on two threads (`tensorlift measure`, AVX512-VNNI Xeon, `git show
/// 2c3ae31:BENCHMARKS.md`).
pub const MIN_PARALLEL_OPS: u64 = 50_000_000;

/// `MIN_PARALLEL_OPS` at `CoreRate::Slower`, where the same layers take 2–5× longer: there two
/// threads ran them 1.34–1.43× faster (the Xeon at `--isa avx2`, ibid.) and 1.69–1.96× (the
/// Zen 4 at `avx512-vnni`, tuned, 2026-11-25).
pub const MIN_PARALLEL_OPS_SLOWER_CORES: u64 = 10_000_000;

/// The default knobs of a resnet-18 layer: the register tile `mr × nr` (`nr` in 64, 32, 16
/// dividing `OC`, at most 24 zmm accumulators `mr · nr/16`, `mr ≥ 4`) of largest area whose `mr`
/// divides the `OW` pixels of an output row, so that no tile runs the call's fallback loops;
/// ties go to the wider `nr`. Without such a tile, the widest `nr` with the most rows, at most
/// `OW`. Channel panels go outermost when the packed weights outweigh the padded source; the
/// loops are parallel from `MIN_PARALLEL_OPS` operations on (the rule of full-rate cores;
/// `default_knobs_at` for others).
pub fn default_knobs(layer: &ConvLayer) -> Conv2dInt8Knobs {
    default_knobs_at(layer, CoreRate::FullZmmVnni)
}

/// `default_knobs` for cores of `rate`: parallel from `MIN_PARALLEL_OPS` operations on, or
/// `MIN_PARALLEL_OPS_SLOWER_CORES` on slower cores.
pub fn default_knobs_at(layer: &ConvLayer, rate: CoreRate) -> Conv2dInt8Knobs {
    let pixels = layer.ow();
    let widths: Vec<i64> = [64, 32, 16].into_iter().filter(|nr| layer.oc % nr == 0).collect();
    let widths = if widths.is_empty() { vec![16] } else { widths };
    let rows = |nr: i64| 24 / (nr / 16);
    let dividing = widths
        .iter()
        .flat_map(|&nr| (4..=rows(nr)).filter(move |mr| pixels % mr == 0).map(move |mr| (mr * nr, nr, mr)))
        .max_by_key(|&(area, nr, _)| (area, nr));
    let (mr, nr) = dividing.map_or((rows(widths[0]).min(pixels), widths[0]), |(_, nr, mr)| (mr, nr));
    let weight_bytes = layer.oc * layer.k * conv_row_bytes(layer.ic, layer.k);
    let source_bytes =
        if layer.k == 1 { layer.oh() * layer.ow() } else { (layer.h + 2 * layer.pad) * (layer.w + 2 * layer.pad) }
            * layer.ic;
    let order = if weight_bytes > source_bytes { TileOrder::ChannelsOuter } else { TileOrder::PixelsOuter };
    let parallel = layer.ops()
        >= match rate {
            CoreRate::FullZmmVnni => MIN_PARALLEL_OPS,
            CoreRate::Slower => MIN_PARALLEL_OPS_SLOWER_CORES,
        };
    // A row at a time where the source dominates: where the weights do, they would stream
    // once per row (R11: 1.2 MB for each of its 7 rows). The source rows with it (one parallel
    // loop instead of two), but for the stem, whose 7 kernel rows at stride 2 would copy each
    // source row 3.5 times.
    let accumulate = match order {
        TileOrder::PixelsOuter if layer.k <= 3 => Accumulate::PerRowWithSource,
        TileOrder::PixelsOuter => Accumulate::PerRow,
        TileOrder::ChannelsOuter => Accumulate::Whole,
    };
    Conv2dInt8Knobs { mr, nr, lanes: 16, order, parallel, operands: GemmOperands::U8, accumulate }
}

/// An error building the convolution or scheduling it.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum Conv2dInt8Error {
    #[error(transparent)]
    Quant(#[from] QuantError),
    #[error(transparent)]
    Schedule(#[from] ScheduleError),
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

/// The weight preparation for `conv2d_int8` with the same `knobs.nr`, `knobs.operands.source`,
/// source dtype and source zero point: `weights: i8[OC, IC, KH, KW]` packed by
/// `ops::pack_conv2d_weights` and the compensation of `ops::compensation_for_gemm`, both as
/// outputs of one (generically scheduled) function.
pub fn prepare_conv2d_int8(
    weights: &Tensor,
    src_dtype: DType,
    src_zero_point: &ZeroPoints,
    knobs: Conv2dInt8Knobs,
    name: &str,
) -> Result<Conv2dInt8Prepare, Conv2dInt8Error> {
    let packed_weights = pack_conv2d_weights(weights, knobs.nr, knobs.operands, &format!("{name}.packed"))?;
    let gemm_dtype = knobs.operands.source;
    let compensation =
        compensation_for_gemm(weights, src_dtype, gemm_dtype, src_zero_point, &format!("{name}.compensation"))?;
    let schedule = create_schedule(&[&packed_weights, &compensation.compensation]);
    let args = vec![weights.clone(), packed_weights.clone(), compensation.compensation.clone()];
    Ok(Conv2dInt8Prepare { packed_weights, compensation, schedule, args })
}

/// The int8 convolution of `ops::conv2d_nchw_int8` (same meaning, bit for bit) with the source,
/// the sum input and the output in `layout` (NCHW as the definition, or NHWC: the layout the
/// schedule computes in, so chained NHWC layers skip both transposes), scheduled for x86:
/// * the shifted source (i8 only) is inlined into the padding stage, whose pixels' channels are
///   vectorized (with fewer than 16 channels: rows in NHWC, channels unrolled in NCHW) and rows
///   run on the thread pool;
/// * `acc`: tiles of `mr` pixels of a row × `nr` channels in `knobs.order`, fused into one
///   parallel loop; per tile, one `int8_gemm_{mr}x{nr}x{KH}x{R}` call over the `KH` kernel
///   rows (`int8_gemm_{mr}x{nr}x{R}` for a 1×1 kernel), which covers the whole reduction and so
///   resets the tile itself (`call reset`: the kernel starts from zero instead of reading it);
/// * the output: in NHWC, each row of `OW` pixels × `OC` channels tensorized with the layer's
///   requantization (`DirectConvLayer::requantize_row`, a `Map`: a zmm or ymm kernel compiled
///   from it); in NCHW, channels split by `lanes` and vectorized (the accumulator,
///   compensation, scales and bias are contiguous in them); rows on the thread pool.
///
/// Errors: the definition's typed `QuantError`s, and a `ScheduleError` for knobs the primitives
/// reject (non-positive tile sizes, `lanes` above `ir::schedule::MAX_LANES`).
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
    name: &str,
) -> Result<Conv2dInt8, Conv2dInt8Error> {
    let layer = conv2d_int8_direct(src, weights, bias, sum_input, conv, attrs, layout, knobs.nr, knobs.operands, name)?;
    let mut s = create_schedule(&[&layer.output]);
    if let Some(shifted) = &layer.shifted {
        s.compute_inline(shifted)?;
    }
    let ic = weights.shape()[1];
    let row = conv_row_bytes(ic, weights.shape()[3]);

    // Lanes within one pixel's channels where they fill a vector (the source read is then one
    // dense ramp at the pixel, whatever the stride). Otherwise (the stem's 3 channels): in NHWC,
    // 16 lanes along the row, dense away from the padding, where the vectors that straddle it
    // are gathers (wider ones cost more compile time than they save); in NCHW, where a pixel's
    // channels are planes apart, the channels of a pixel unrolled.
    let pad = &layer.padded;
    match ([64, 32, 16].into_iter().find(|v| ic % v == 0), layout) {
        (Some(vector), _) => {
            let (_pixel, channel) = s.split(pad, &pad.axis(2), ic)?;
            let (_, lanes) = s.split(pad, &channel, vector)?;
            s.vectorize(pad, &lanes)?;
        }
        (None, Layout::Nhwc) => {
            let (_, lanes) = s.split(pad, &pad.axis(2), 16)?;
            s.vectorize(pad, &lanes)?;
        }
        (None, Layout::Nchw) => {
            let (_pixel, channel) = s.split(pad, &pad.axis(2), ic)?;
            s.unroll(pad, &channel)?;
        }
    }
    let oc = weights.shape()[0];
    let per_row = knobs.accumulate != Accumulate::Whole && oc % knobs.nr == 0;
    let source_per_row = per_row && knobs.accumulate == Accumulate::PerRowWithSource;
    if knobs.parallel && !source_per_row {
        s.parallel(pad, &pad.axis(1))?;
    }

    let acc = &layer.acc;
    let [b, y, x, o] = [0, 1, 2, 3].map(|d| acc.axis(d));
    let (xo, xi) = s.split(acc, &x, knobs.mr)?;
    let (oo, oi) = s.split(acc, &o, knobs.nr)?;
    let [ky, ko, ki] = [0, 1, 2].map(|d| acc.reduce_axes()[d].clone());
    let tiles = match knobs.order {
        TileOrder::PixelsOuter => [&b, &y, &xo, &oo],
        TileOrder::ChannelsOuter => [&oo, &b, &y, &xo],
    };
    let mut order = tiles.to_vec();
    order.extend([&ky, &ko, &ki, &xi, &oi]);
    s.reorder(acc, &order)?;
    s.vectorize(acc, &oi)?;
    if knobs.parallel && !per_row {
        let outer = s.fuse(acc, tiles[0], tiles[1])?;
        let outer = s.fuse(acc, &outer, tiles[2])?;
        let outer = s.fuse(acc, &outer, tiles[3])?;
        s.parallel(acc, &outer)?;
    }
    // One call per tile runs every kernel row (a segment of the reduction, one padded row
    // apart), so the accumulators stay in registers across the rows.
    let kh = weights.shape()[2];
    let intrin = gemm_segmented_microkernel(knobs.mr, knobs.nr, kh, row, knobs.operands.source)
        .expect("tile sizes passed split and R is a multiple of 4");
    s.tensorize(acc, if kh > 1 { &ky } else { &ko }, &intrin)?;

    let out = &layer.output;
    let axes = [0, 1, 2, 3].map(|d| out.axis(d));
    match layout {
        // A row's pixels × channels are one block, contiguous along the channels in the
        // accumulator, the parameters and the output: the map kernel of the level.
        Layout::Nhwc => s.tensorize(out, &axes[2], &layer.requantize_row)?,
        Layout::Nchw => {
            let (channels, lanes) = s.split(out, &axes[1], knobs.lanes)?;
            s.reorder(out, &[&axes[0], &axes[2], &axes[3], &channels, &lanes])?;
            s.vectorize(out, &lanes)?;
        }
    }
    let oy = if layout == Layout::Nhwc { &axes[1] } else { &axes[2] };
    if per_row {
        s.compute_at(acc, out, oy)?;
    }
    if source_per_row {
        s.compute_at(pad, acc, &y)?;
    }
    if knobs.parallel {
        s.parallel(out, oy)?;
    }

    let mut args = vec![src.clone(), layer.packed_weights.clone(), layer.compensation.clone()];
    args.extend(bias.cloned());
    args.extend(sum_input.cloned());
    args.extend(layer.params.iter().map(|p| p.tensor.clone()));
    args.push(layer.output.clone());
    Ok(Conv2dInt8 { layer, schedule: s, args })
}

/// The default knobs of a dense layer with `rows` source rows run as `dense_int8`: those of a
/// 1×1 convolution whose output row is the `rows` pixels (`default_knobs`; one row takes
/// `mr = 1`, an `OC` that no panel width divides takes `nr = 16` with the last panel padded).
/// Its NHWC output is requantized by the map kernel, which masks a partial vector (FC's 1000
/// channels), so the lanes play no part.
pub fn default_dense_knobs(layer: &DenseLayer, rows: i64) -> Conv2dInt8Knobs {
    let (ic, oc) = (layer.in_features, layer.out_features);
    default_knobs(&ConvLayer { name: layer.name, ic, oc, h: 1, w: rows, k: 1, stride: 1, pad: 0 })
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
    name: &str,
) -> Result<Conv2dInt8Prepare, Conv2dInt8Error> {
    prepare_conv2d_int8(&as_kernel(weights), src_dtype, src_zero_point, knobs, name)
}

/// The int8 dense layer of `ops::dense_int8` (`src: [M, IC]`, `weights: [OC, IC]`, same meaning
/// bit for bit) on the tensorized path: the NHWC `conv2d_int8` of a 1×1 kernel over one image of
/// one row of `M` pixels, i.e. `src` as `[1, 1, M, IC]`, `weights` as `[OC, IC, 1, 1]`, output
/// `[1, 1, M, OC]` (the bytes of `[M, OC]`). The function's arguments are those of
/// `conv2d_int8` with these 4-D placeholders: bind the dense arrays reshaped. `OC` need not
/// be a multiple of `nr`: the packing pads the last panel with zero weights and the
/// requantization reads only the first `OC` columns. No sum input (a sum post-op is the typed
/// error of a missing sum input). `src` and `weights` that are not 2-D are the typed shape
/// error of the convolution.
pub fn dense_int8(
    src: &Tensor,
    weights: &Tensor,
    bias: Option<&Tensor>,
    attrs: &QuantAttrs,
    knobs: Conv2dInt8Knobs,
    name: &str,
) -> Result<Conv2dInt8, Conv2dInt8Error> {
    let conv = Conv2dParams { stride: 1, pad: 0 };
    let rows = reshaped(src, |m, ic| [1, 1, m, ic]);
    conv2d_int8(&rows, &as_kernel(weights), bias, None, conv, attrs, Layout::Nhwc, knobs, name)
}

/// A resnet-18 table layer on the x86 path, defined with `quant` (`resnet18::quantization`) and
/// scheduled by `knobs`: its weight preparation and its per-call function (the convolution
/// NHWC on `src: u8[1, H, W, IC]`, the dense layer on `src: u8[1, IC]`), both named `name`.
pub fn table_layer(
    layer: Layer,
    quant: &LayerQuant,
    knobs: Conv2dInt8Knobs,
    name: &str,
) -> Result<(Conv2dInt8Prepare, Conv2dInt8), Conv2dInt8Error> {
    let wei = placeholder_vec(quant.wei_dims.clone(), DType::I8, "weights").map_err(QuantError::from)?;
    let bias = placeholder_vec(vec![quant.wei_dims[0]], DType::F32, "bias").map_err(QuantError::from)?;
    let zero_point = &quant.attrs.src.zero_points;
    Ok(match layer {
        Layer::Conv(c) => {
            let src = placeholder_vec(vec![1, c.h, c.w, c.ic], DType::U8, "src").map_err(QuantError::from)?;
            let params = Conv2dParams { stride: c.stride, pad: c.pad };
            (
                prepare_conv2d_int8(&wei, DType::U8, zero_point, knobs, name)?,
                conv2d_int8(&src, &wei, Some(&bias), None, params, &quant.attrs, Layout::Nhwc, knobs, name)?,
            )
        }
        Layer::Dense(_) => {
            let src = placeholder_vec(quant.src_dims.clone(), DType::U8, "src").map_err(QuantError::from)?;
            (
                prepare_dense_int8(&wei, DType::U8, zero_point, knobs, name)?,
                dense_int8(&src, &wei, Some(&bias), &quant.attrs, knobs, name)?,
            )
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resnet18::CONV_LAYERS;

    #[test]
    fn the_weights_range_picks_the_fastest_exact_operands() {
        let knobs = default_knobs(&CONV_LAYERS[1]);
        let pick = |vnni, range| {
            let k = knobs.with_weights(vnni, range);
            (k.operands.source, k.operands.weights)
        };
        // 7-bit weights prove the vpmaddubsw triple exact on a u8 source.
        assert_eq!(pick(false, (-64, 63)), (DType::U8, (-64, 63)));
        assert_eq!(pick(false, (-64, 64)), (DType::U8, (-64, 64)));
        // Wider ones, -128 or not: pre-widened i16 operands, which rely on no range.
        assert_eq!(pick(false, (-127, 127)), (DType::I16, (-128, 127)));
        assert_eq!(pick(false, (-65, 3)), (DType::I16, (-128, 127)));
        assert_eq!(pick(false, (-128, 5)), (DType::I16, (-128, 127)));
        // VNNI is exact on a u8 source and any weights.
        assert_eq!(pick(true, (-128, 5)), (DType::U8, (-128, 127)));
        assert_eq!(pick(true, (-64, 63)), (DType::U8, (-128, 127)));
        // Bytes at every level: sign transfer without -128 (relying on that), else widening.
        let bytes = |range| {
            let o = knobs.with_byte_weights(false, range).operands;
            (o.source, o.weights)
        };
        assert_eq!(bytes((-127, 127)), (DType::I8, (-127, 127)));
        assert_eq!(bytes((-128, 5)), (DType::U8, (-128, 127)));
        assert_eq!(bytes((-64, 63)), (DType::U8, (-64, 63)));
        // The declared range always holds the packing's zero padding.
        assert_eq!(pick(false, (3, 9)), (DType::U8, (0, 9)));
        assert_eq!(weight_range([5, -3, 7]), (-3, 7));
        assert_eq!(weight_range([]), (0, 0));
        assert_eq!(knobs.operands, GemmOperands::U8);
    }

    #[test]
    fn the_thread_pool_serves_smaller_layers_on_slower_cores() {
        // R4 (a 1×1 stride-2 layer, 12.8 M operations) and R1 (236 M).
        let (r4, r1) = (&CONV_LAYERS[3], &CONV_LAYERS[0]);
        let (full, slower) = (CoreRate::FullZmmVnni, CoreRate::Slower);
        assert!(!default_knobs_at(r4, full).parallel && default_knobs_at(r4, slower).parallel);
        assert!(default_knobs_at(r1, full).parallel && default_knobs_at(r1, slower).parallel);
        assert_eq!(default_knobs(r4), default_knobs_at(r4, full));
    }

    #[test]
    fn default_tiles_fit_the_registers_and_divide_the_rows() {
        let tiles: Vec<(i64, i64)> = CONV_LAYERS.iter().map(|l| (default_knobs(l).mr, default_knobs(l).nr)).collect();
        // R1, R2, R4 (rows of 112, 56, 28 pixels, OC 64/64/128) take 4 × 64; R11 (7) 7 × 32.
        assert_eq!(tiles[0], (4, 64));
        assert_eq!(tiles[1], (4, 64));
        assert_eq!(tiles[10], (7, 32));
        for (l, (mr, nr)) in CONV_LAYERS.iter().zip(tiles) {
            assert!(mr * nr / 16 <= 24 && l.oc % nr == 0, "{}: {mr} x {nr}", l.name);
            assert_eq!(l.ow() % mr, 0, "{}: {mr}", l.name);
        }
    }
}
