//! The x86 schedule of the int8 convolution: an implicit GEMM (`ops::conv2d_nchw_int8_gemm`)
//! whose reduction is tensorized into the AVX-512 VNNI micro-kernel, with typed knobs and a
//! default per resnet-18 layer.
//!
//! Two compiled functions make a layer. The weight preparation (`prepare_conv2d_int8`, run once)
//! packs the weights into VNNI panels and computes the compensation; the per-call function
//! (`conv2d_int8`) pads the source channels-last, copies each output pixel's receptive field
//! into a row of `columns` (`u8[M, K]`, `K` contiguous), multiplies it with the panels by one
//! `int8_gemm_{mr}x{nr}x{K}` call per `mr × nr` tile, and requantizes into NCHW. The int8 dense
//! layer runs on the same path as a 1×1 convolution over 1×1 images (`dense_int8`).

use ir::schedule::{Schedule, create_schedule};
use ir::te::placeholder_vec;
use ir::{DType, ScheduleError, Tensor};
use thiserror::Error;

use crate::ops::{
    Compensation, Conv2dParams, ConvGemmLayer, compensation, conv2d_nchw_int8_gemm, pack_conv2d_weights_vnni,
};
use crate::quant::{QuantAttrs, QuantError, ZeroPoints};
use crate::resnet18::{ConvLayer, DenseLayer};
use crate::x86::{GemmInt8Knobs, schedule_gemm_int8};

/// The decisions of the int8 convolution schedule. A tuner varies these and nothing else.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Conv2dInt8Knobs {
    /// Output pixels per micro-kernel tile (rows of the GEMM).
    pub mr: i64,
    /// Output channels per micro-kernel tile and weight panel; the weights must be prepared with
    /// the same `nr`. A multiple of 16 fills zmm registers.
    pub nr: i64,
    /// Lanes of the vectorized epilogue (output channels per vector).
    pub lanes: i64,
    /// Run the outer loops of every stage on the thread pool.
    pub parallel: bool,
}

/// The default knobs of a resnet-18 layer: the register tile `mr × nr` (`nr` in 64, 32, 16
/// dividing `OC`, at most 24 zmm accumulators `mr · nr/16`, `mr ≥ 4`) of largest area whose `mr`
/// divides the `OH·OW` output pixels, so that no row tile runs the call's fallback loops; ties
/// go to the wider `nr`. Without such a tile, the widest `nr` with the most rows, at most the
/// pixel count (a single pixel, as in a dense layer, takes `mr = 1`). Measured on
/// R2 and R5 (`examples/conv_int8.rs`): `6 × 64` (4 pixels left over) ran R5 at 59% of the peak,
/// `4 × 64` at 77%.
pub fn default_knobs(layer: &ConvLayer) -> Conv2dInt8Knobs {
    let pixels = layer.oh() * layer.ow();
    let widths: Vec<i64> = [64, 32, 16].into_iter().filter(|nr| layer.oc % nr == 0).collect();
    let widths = if widths.is_empty() { vec![16] } else { widths };
    let rows = |nr: i64| 24 / (nr / 16);
    let dividing = widths
        .iter()
        .flat_map(|&nr| (4..=rows(nr)).filter(move |mr| pixels % mr == 0).map(move |mr| (mr * nr, nr, mr)))
        .max_by_key(|&(area, nr, _)| (area, nr));
    let (mr, nr) = dividing.map_or((rows(widths[0]).min(pixels), widths[0]), |(_, nr, mr)| (mr, nr));
    Conv2dInt8Knobs { mr, nr, lanes: 16, parallel: true }
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
    pub layer: ConvGemmLayer,
    pub schedule: Schedule,
    /// The function's arguments, in order: `src`, `layer.packed_weights`, `layer.compensation`,
    /// the bias (if given), the sum input (if given), each `layer.params[i].tensor` (bind
    /// `layer.params[i].values`), then `layer.output`.
    pub args: Vec<Tensor>,
}

/// The weight preparation of a convolution layer, run once per set of weights.
#[derive(Clone, Debug)]
pub struct Conv2dInt8Prepare {
    /// `i8[⌈OC/nr⌉, K/4, nr, 4]`: bind to `Conv2dInt8::layer.packed_weights`.
    pub packed_weights: Tensor,
    /// `compensation.compensation` (`i32[OC]`): bind to `Conv2dInt8::layer.compensation`.
    pub compensation: Compensation,
    pub schedule: Schedule,
    /// The function's arguments, in order: `weights`, `packed_weights`,
    /// `compensation.compensation`.
    pub args: Vec<Tensor>,
}

/// The weight preparation for `conv2d_int8` with the same `knobs.nr`, source dtype and source
/// zero point: `weights: i8[OC, IC, KH, KW]` packed by `ops::pack_conv2d_weights_vnni` and the
/// compensation of `ops::compensation`, both as outputs of one (generically scheduled) function.
pub fn prepare_conv2d_int8(
    weights: &Tensor,
    src_dtype: DType,
    src_zero_point: &ZeroPoints,
    knobs: Conv2dInt8Knobs,
    name: &str,
) -> Result<Conv2dInt8Prepare, Conv2dInt8Error> {
    let packed_weights = pack_conv2d_weights_vnni(weights, knobs.nr, &format!("{name}.packed"))?;
    let compensation = compensation(weights, src_dtype, src_zero_point, &format!("{name}.compensation"))?;
    let schedule = create_schedule(&[&packed_weights, &compensation.compensation]);
    let args = vec![weights.clone(), packed_weights.clone(), compensation.compensation.clone()];
    Ok(Conv2dInt8Prepare { packed_weights, compensation, schedule, args })
}

/// The int8 convolution of `ops::conv2d_nchw_int8` (same arguments and meaning, bit for bit)
/// scheduled for x86:
/// * the shifted source (i8 only) is inlined into the channels-last padding stage, whose
///   channels are vectorized (for `IC ≤ 256`) and rows run on the thread pool;
/// * `columns[m, k]`: `m` split by `OW`, `k` by `IC` and the taps by `KW`, so that the indices
///   simplify to `(oh, ow, kh, kw, ic)` and each `(pixel, tap)` copies `IC` contiguous bytes as
///   one vector (for `IC ≤ 256`);
/// * `acc`: `x86::schedule_gemm_int8` with `mr × nr` tiles, one `int8_gemm_{mr}x{nr}x{K}` call
///   per tile (row tiles that stick out of `M` run the call's fallback loops);
/// * the output: loops `n, oh, ow, oc` with `oc` split by `lanes` and vectorized (the
///   accumulator, compensation, scales and bias are contiguous in `oc`), rows on the thread pool.
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
    knobs: Conv2dInt8Knobs,
    name: &str,
) -> Result<Conv2dInt8, Conv2dInt8Error> {
    let layer = conv2d_nchw_int8_gemm(src, weights, bias, sum_input, conv, attrs, knobs.nr, name)?;
    let mut s = create_schedule(&[&layer.output]);
    if let Some(shifted) = &layer.shifted {
        s.compute_inline(shifted)?;
    }
    let (ic, kw) = (src.shape()[1], weights.shape()[3]);
    let pad = &layer.padded;
    if ic <= ir::schedule::MAX_LANES {
        s.vectorize(pad, &pad.axis(3))?;
    }
    if knobs.parallel {
        s.parallel(pad, &pad.axis(1))?;
    }

    let ow = layer.output.shape()[3];
    let cols = &layer.columns;
    let (pixel_row, _pixel) = s.split(cols, &cols.axis(0), ow)?;
    let (tap, channel) = s.split(cols, &cols.axis(1), ic)?;
    s.split(cols, &tap, kw)?;
    if ic <= ir::schedule::MAX_LANES {
        s.vectorize(cols, &channel)?;
    }
    if knobs.parallel {
        s.parallel(cols, &pixel_row)?;
    }

    schedule_gemm_int8(&mut s, &layer.acc, GemmInt8Knobs { mr: knobs.mr, nr: knobs.nr, parallel: knobs.parallel })?;

    let out = &layer.output;
    let [b, o, y, x] = [0, 1, 2, 3].map(|d| out.axis(d));
    let (channels, lanes) = s.split(out, &o, knobs.lanes)?;
    s.reorder(out, &[&b, &y, &x, &channels, &lanes])?;
    s.vectorize(out, &lanes)?;
    if knobs.parallel {
        s.parallel(out, &y)?;
    }

    let mut args = vec![src.clone(), layer.packed_weights.clone(), layer.compensation.clone()];
    args.extend(bias.cloned());
    args.extend(sum_input.cloned());
    args.extend(layer.params.iter().map(|p| p.tensor.clone()));
    args.push(layer.output.clone());
    Ok(Conv2dInt8 { layer, schedule: s, args })
}

/// The default knobs of a dense layer with `rows` source rows run as `dense_int8`: those of a
/// 1×1 convolution whose `rows` output pixels are its rows (`default_knobs`; one row takes
/// `mr = 1`, an `OC` that no panel width divides takes `nr = 16` with the last panel padded).
pub fn default_dense_knobs(layer: &DenseLayer, rows: i64) -> Conv2dInt8Knobs {
    let (ic, oc) = (layer.in_features, layer.out_features);
    default_knobs(&ConvLayer { name: layer.name, ic, oc, h: rows, w: 1, k: 1, stride: 1, pad: 0 })
}

/// `t: [A, B]` as the placeholder `[A, B, 1, 1]` of the same dtype and name (the same bytes).
fn as_1x1(t: &Tensor) -> Tensor {
    let mut dims = t.shape().to_vec();
    dims.extend([1, 1]);
    placeholder_vec(dims, t.dtype(), t.name())
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
    prepare_conv2d_int8(&as_1x1(weights), src_dtype, src_zero_point, knobs, name)
}

/// The int8 dense layer of `ops::dense_int8` (`src: [M, IC]`, `weights: [OC, IC]`, same meaning
/// bit for bit) on the tensorized path: `conv2d_int8` of a 1×1 kernel over `M` images of 1×1
/// pixel, i.e. `src` as `[M, IC, 1, 1]`, `weights` as `[OC, IC, 1, 1]`, output `[M, OC, 1, 1]`
/// (the bytes of `[M, OC]`). The function's arguments are those of `conv2d_int8` with these 4-D
/// placeholders: bind the dense arrays reshaped. `OC` need not be a multiple of `nr`: the packing
/// pads the last panel with zero weights and the requantization reads only the first `OC`
/// columns. No sum input (a sum post-op is the typed error of a missing sum input).
pub fn dense_int8(
    src: &Tensor,
    weights: &Tensor,
    bias: Option<&Tensor>,
    attrs: &QuantAttrs,
    knobs: Conv2dInt8Knobs,
    name: &str,
) -> Result<Conv2dInt8, Conv2dInt8Error> {
    let conv = Conv2dParams { stride: 1, pad: 0 };
    conv2d_int8(&as_1x1(src), &as_1x1(weights), bias, None, conv, attrs, knobs, name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resnet18::CONV_LAYERS;

    #[test]
    fn default_tiles_fit_the_registers_and_divide_the_pixels_where_possible() {
        let tiles: Vec<(i64, i64)> = CONV_LAYERS.iter().map(|l| (default_knobs(l).mr, default_knobs(l).nr)).collect();
        // R1, R2, R4 (112², 56², 28² pixels, OC 64/64/128) take 4 × 64; R11 (7²) 7 × 32.
        assert_eq!(tiles[0], (4, 64));
        assert_eq!(tiles[1], (4, 64));
        assert_eq!(tiles[10], (7, 32));
        for (l, (mr, nr)) in CONV_LAYERS.iter().zip(tiles) {
            assert!(mr * nr / 16 <= 24 && l.oc % nr == 0, "{}: {mr} x {nr}", l.name);
            assert_eq!(l.oh() * l.ow() % mr, 0, "{}: {mr}", l.name);
        }
    }
}
