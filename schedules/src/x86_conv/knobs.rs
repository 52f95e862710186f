//! The decisions of the int8 convolution schedule (`Conv2dInt8Knobs`: what a tuner varies, a
//! tuning record stores and `tensorlift resnet18` and the export apply), their defaults per
//! layer (`default_knobs`), and the GEMM operands that follow from them, the ISA level and the
//! weights' proven range (`Conv2dInt8Knobs::operands`).

use ir::DType;
use ir::intrin::pair_sums_fit_i16;
use ir::schedule::MAX_LANES;
use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::ops::{GemmOperands, SourceRows, conv_row_bytes, im2col_k, space_to_depth_applies, space_to_depth_dims};
use crate::resnet18::{ConvLayer, DenseLayer, Layer};

/// The order of the tile loops of the convolution.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TileOrder {
    /// Rows, pixel tiles, then channel panels: a pixel tile's source rows stay in cache while
    /// every weight panel streams past them.
    PixelsOuter,
    /// Channel panels outermost: one weight panel stays in cache while the source streams past.
    ChannelsOuter,
}

/// Where the accumulators (`DirectConvLayer::acc`, i32) are computed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
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
    /// All of them, over flat rows (`DirectConvLayer::flat`): the accumulator of a stride-1
    /// convolution (and of a 1×1 one after its subsampling) over the padded row width, so that
    /// one tile of `mr` pixels spans several output rows (small images: fewer, taller GEMM
    /// calls, each weight tile serving more rows). Elsewhere (a larger kernel at a stride, a
    /// kernel row of `KW·IC` bytes not a multiple of 4), `Whole`.
    FlatRows,
    /// `PerRow` (`Whole` where it is), each pixel's receptive field first gathered into one
    /// contiguous row (`ops::SourceRows::Im2col`, of `K = KH·R` bytes) at the accumulators' row
    /// loop: one GEMM segment for the whole kernel instead of one per kernel row, for kernels
    /// whose rows are short (the stem's 21 bytes), at the cost of a copy.
    Im2col,
    /// `Im2col` with `K` rounded up to a multiple of 64: AMX tiles then take no k tail (the
    /// tail bytes, whose weights are zero, cost a copy but no `tdpbusd`).
    Im2colTiles,
    /// `PerRow` (`Whole` where it is) over the source after space to depth
    /// (`ops::SourceRows::SpaceToDepth`), for a kernel larger than 1×1 at a stride `s` above 1
    /// (elsewhere plain `PerRow`): the GEMM runs `⌈KH/s⌉` segments of kernel rows `s²` times
    /// wider at stride 1 (the stem: 4 of 48 bytes instead of 7 of 24), with no copy beyond the
    /// padding's.
    SpaceToDepth,
}

impl Accumulate {
    /// What records written before the knob existed measured.
    fn before_the_knob() -> Accumulate {
        Accumulate::Whole
    }
}

/// How the weights are packed where that picks the kernel family (no VNNI, and weights the
/// `vpmaddubsw` triple is not proven exact on); elsewhere both give the same code
/// (`Conv2dInt8Knobs::operands`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Packing {
    /// As i16 pairs, for pre-widened operands (`vpmaddwd`, exact on any weights).
    I16,
    /// As bytes, a layout that is the same at every level (what a library dispatching between
    /// levels at run time needs: one preparation for all): sign transfer where no weight is
    /// -128, else exact widening.
    Bytes,
}

impl Packing {
    /// What records written before the knob existed measured.
    fn before_the_knob() -> Packing {
        Packing::Bytes
    }
}

/// The decisions of the int8 convolution and dense schedules (`conv2d_int8`, `dense_int8`). A
/// tuner varies these and nothing else; tuning records store them as JSON (`{"mr", "nr",
/// "lanes", "order", "threads", "packing", "accumulation"}`; records written before `packing`
/// and `accumulation` existed measured `bytes` and `whole`, which a missing key means).
///
/// The GEMM operands are not a decision: they follow from these, the ISA level and the
/// weights' proven range (`operands`), and the schedule and the weight preparation take them as
/// a separate argument, so that knobs read from a record cannot carry operands derived for
/// other weights or another level.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Conv2dInt8Knobs {
    /// Output pixels of one row per micro-kernel tile (rows of the GEMM). At least 1; above the
    /// `OW` pixels of an output row it is clamped to `OW` (a taller tile holds no more pixels).
    /// With `Accumulate::FlatRows`, pixels of the flat rows, clamped to all of them.
    pub mr: i64,
    /// Output channels per micro-kernel tile and weight panel; the weights must be prepared with
    /// the same `nr`. A multiple of 16 fills zmm registers. In `1..=ir::schedule::MAX_LANES`
    /// (a tile's channels are one vector loop); above `OC`, the one panel is padded.
    pub nr: i64,
    /// Lanes of the vectorized epilogue of an NCHW output, in `1..=ir::schedule::MAX_LANES`;
    /// above `OC` they are capped to `OC`. An NHWC output is tensorized with the layer's
    /// requantization (`DirectConvLayer::requantize_row`), which code generation runs as a map
    /// kernel of the level's vector width, so they play no part there.
    pub lanes: i64,
    /// The order of the tile loops.
    pub order: TileOrder,
    /// Threads the layer runs on (at least 1): with more than one, the outer loops of every
    /// stage run on the thread pool, which the caller sizes to this (`CompileOptions::threads`).
    pub threads: usize,
    /// How the weights are packed where that picks the kernel family.
    #[serde(default = "Packing::before_the_knob")]
    pub packing: Packing,
    /// Where the accumulators are computed.
    #[serde(default = "Accumulate::before_the_knob")]
    pub accumulation: Accumulate,
}

/// A knob outside the range the schedule accepts.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
#[error("{knob} = {found}: expected {expected}")]
pub struct KnobError {
    pub knob: &'static str,
    pub found: i64,
    pub expected: String,
}

impl Conv2dInt8Knobs {
    /// How the accumulator reads the source under these knobs (`ops::conv2d_int8_direct`).
    pub fn source_rows(&self) -> SourceRows {
        match self.accumulation {
            Accumulate::FlatRows => SourceRows::Flat,
            Accumulate::Im2col => SourceRows::Im2col { align: 4 },
            Accumulate::Im2colTiles => SourceRows::Im2col { align: 64 },
            Accumulate::SpaceToDepth => SourceRows::SpaceToDepth,
            Accumulate::Whole | Accumulate::PerRow | Accumulate::PerRowWithSource => SourceRows::Padded,
        }
    }

    /// The stride `s` of the space to depth these knobs apply to a kernel `KH × KW` at
    /// `stride` (`ops::space_to_depth_applies`), else `None`: the packed weights are then those
    /// of the rearranged kernel (`ops::space_to_depth_weights`).
    pub fn space_to_depth(&self, stride: i64, kh: i64, kw: i64) -> Option<i64> {
        (self.accumulation == Accumulate::SpaceToDepth && space_to_depth_applies(stride, kh, kw)).then_some(stride)
    }

    /// The reduction length of the GEMM, which the packed weights hold (`ops::pack_conv2d_weights`)
    /// for a kernel `[_, IC, KH, KW]` at `stride`: `KH·R`, `ops::im2col_k` over gathered rows, or
    /// that of the kernel after space to depth.
    pub fn gemm_k(&self, ic: i64, kh: i64, kw: i64, stride: i64) -> i64 {
        match self.source_rows() {
            SourceRows::Im2col { align } => im2col_k(ic, kh, kw, align),
            SourceRows::SpaceToDepth | SourceRows::Padded | SourceRows::Flat => {
                let [_, ic, kh, kw] =
                    space_to_depth_dims([0, ic, kh, kw], self.space_to_depth(stride, kh, kw).unwrap_or(1));
                kh * conv_row_bytes(ic, kw)
            }
        }
    }

    /// Whether the stages' outer loops run on the thread pool.
    pub fn parallel(&self) -> bool {
        self.threads > 1
    }

    /// `Ok` if the schedule accepts these knobs (any geometry then compiles with them), else
    /// the first knob outside its range.
    pub fn check(&self) -> Result<(), KnobError> {
        let lanes = format!("1..={MAX_LANES}");
        let ranges = [
            ("mr", self.mr, 1, i64::MAX, "at least 1".to_string()),
            ("nr", self.nr, 1, MAX_LANES, lanes.clone()),
            ("lanes", self.lanes, 1, MAX_LANES, lanes),
            ("threads", i64::try_from(self.threads).unwrap_or(i64::MAX), 1, i64::MAX, "at least 1".to_string()),
        ];
        match ranges.into_iter().find(|(_, v, lo, hi, _)| !(lo..=hi).contains(&v)) {
            Some((knob, found, _, _, expected)) => Err(KnobError { knob, found, expected }),
            None => Ok(()),
        }
    }

    /// The GEMM operands these knobs give for code at a level with or without `vnni` on
    /// weights proven to lie in `weights` (the range of the actual weights, from
    /// `weight_range`): the fastest exact kernel family, where the packing decides between two:
    /// * with VNNI, a u8 source (`vpdpbusd` is exact on any weights);
    /// * without, a u8 source when every pair of weights keeps `255·(w0 + w1)` in i16 (7-bit
    ///   weights in [-64, 64]): the `vpmaddubsw` triple is then exact, and the range is
    ///   declared on the packed weights, so every call checks it;
    /// * else, packed as `Packing::I16`, pre-widened i16 operands (`vpmaddwd`, exact on any
    ///   weights); packed as `Packing::Bytes`, an i8 source for sign transfer (one instruction
    ///   more in its chain) where no weight is -128, else a u8 source and exact widening.
    ///
    /// The declared range is the weights' only where a kernel relies on it (the triple, sign
    /// transfer: a call scans it unless the weights are a `CheckedTensor`, checked once when
    /// bound); elsewhere it is all of i8, which calls do not scan.
    pub fn operands(&self, vnni: bool, (lo, hi): (i8, i8)) -> GemmOperands {
        let proven = (lo.min(0), hi.max(0));
        let triple = pair_sums_fit_i16((0, 255), (i64::from(proven.0), i64::from(proven.1)));
        let (source, weights) = match (vnni, triple, self.packing) {
            (true, _, _) => (DType::U8, ANY_WEIGHT),
            (false, true, _) => (DType::U8, proven),
            (false, false, Packing::I16) => (DType::I16, ANY_WEIGHT),
            (false, false, Packing::Bytes) if proven.0 > i8::MIN => (DType::I8, proven),
            (false, false, Packing::Bytes) => (DType::U8, ANY_WEIGHT),
        };
        GemmOperands { source, weights }
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
    /// A full-width zmm `vpdpbusd` per cycle or more (AVX-512 VNNI on 512-bit units).
    FullZmmVnni,
    /// Half of that or less: AVX-512 VNNI on 256-bit units, VNNI on ymm, or no VNNI.
    Slower,
    /// AMX tiles (`tdpbusd`): several times `FullZmmVnni`, for calls whose tiles fill their 16
    /// rows, so the default register tile is as tall as an output row allows (`MAX_TILE_MR`).
    Tiles,
}

/// The tallest default tile at `CoreRate::Tiles`: four AMX tiles of 16 rows.
pub const MAX_TILE_MR: i64 = 64;

/// Layers with fewer int8 operations run on one thread by default at `CoreRate::FullZmmVnni`:
/// such cores finish a layer that small (the 1×1 layers of resnet-18) before a second thread
/// pays for its share of the synchronization.
pub const MIN_PARALLEL_OPS: u64 = 50_000_000;

/// `MIN_PARALLEL_OPS` at `CoreRate::Slower`, where the same layers take several times longer,
/// long enough for a second thread to pay.
pub const MIN_PARALLEL_OPS_SLOWER_CORES: u64 = 10_000_000;

/// The default knobs of a layer for cores of `rate` on at most `max_threads` threads: the
/// convolution's (`default_conv_knobs`) or the dense layer's on one row (`default_dense_knobs`).
/// What the tuner starts from, `tensorlift resnet18` runs without a tuning record, and the
/// export builds.
pub fn default_knobs(layer: Layer, rate: CoreRate, max_threads: usize) -> Conv2dInt8Knobs {
    match layer {
        Layer::Conv(c) => default_conv_knobs(&c, rate, max_threads),
        Layer::Dense(d) => default_dense_knobs(&d, 1),
    }
}

/// The default knobs of a convolution: the register tile `mr × nr` (`nr` in 64, 32, 16
/// dividing `OC`, at most 24 zmm accumulators `mr · nr/16`, `mr ≥ 4`) of largest area whose
/// `mr` divides the `OW` pixels of an output row, so that no tile runs the call's fallback
/// loops; ties go to the wider `nr`. Without such a tile, the widest `nr` with the most rows,
/// at most `OW`. Channel panels go outermost when the packed weights outweigh the padded
/// source. All `max_threads` threads from `MIN_PARALLEL_OPS` operations on
/// (`MIN_PARALLEL_OPS_SLOWER_CORES` on slower cores), else one. Weights packed as i16 pairs
/// where that is the choice (pre-widened operands).
pub fn default_conv_knobs(layer: &ConvLayer, rate: CoreRate, max_threads: usize) -> Conv2dInt8Knobs {
    if rate == CoreRate::Tiles {
        return default_tile_knobs(layer, max_threads);
    }
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
    let min_parallel = match rate {
        CoreRate::FullZmmVnni | CoreRate::Tiles => MIN_PARALLEL_OPS,
        CoreRate::Slower => MIN_PARALLEL_OPS_SLOWER_CORES,
    };
    let threads = if layer.ops() >= min_parallel { max_threads.max(1) } else { 1 };
    // A row at a time where the source dominates: where the weights do, they would stream
    // once per row (R11: all of them for each of its 7 rows). The source rows with it
    // (one parallel loop instead of two), but for the stem, whose 7 kernel rows at stride 2
    // would copy each source row 3.5 times.
    let accumulation = match order {
        TileOrder::PixelsOuter if layer.k <= 3 => Accumulate::PerRowWithSource,
        TileOrder::PixelsOuter => Accumulate::PerRow,
        TileOrder::ChannelsOuter => Accumulate::Whole,
    };
    Conv2dInt8Knobs { mr, nr, lanes: 16, order, threads, packing: Packing::I16, accumulation }
}

/// The default knobs at `CoreRate::Tiles`: the widest `nr` of 64, 32, 16 dividing `OC`, and
/// the whole output row in one tile (`mr = OW`) where it has at most `MAX_TILE_MR` pixels, else
/// the largest divisor of `OW` up to that (at least 16 rows: 112 pixels take two tiles of 56);
/// the tile order, accumulation and threads as `FullZmmVnni` chooses them. Tall tiles let each
/// B tile the kernel loads serve several row tiles. Where the flat rows of an image of several
/// rows fit one tile (`flat_rows_pixels` at most `MAX_TILE_MR`: 7×7 images), `FlatRows` with
/// that one tile.
fn default_tile_knobs(layer: &ConvLayer, max_threads: usize) -> Conv2dInt8Knobs {
    let pixels = layer.ow();
    let nr = [64, 32, 16].into_iter().find(|nr| layer.oc % nr == 0).unwrap_or(16);
    let mr = if pixels <= MAX_TILE_MR {
        pixels
    } else {
        (16..=MAX_TILE_MR).rev().find(|mr| pixels % mr == 0).unwrap_or(MAX_TILE_MR)
    };
    let knobs = Conv2dInt8Knobs { mr, nr, ..default_conv_knobs(layer, CoreRate::FullZmmVnni, max_threads) };
    // A small image whose flat rows fit one tile: one call for all of them. Taller flat images
    // split into tiles that fill the AMX rows less than one output row per tile does.
    match flat_rows_pixels(layer) {
        Some(v) if v <= MAX_TILE_MR && v > pixels => {
            Conv2dInt8Knobs { mr: v, accumulation: Accumulate::FlatRows, ..knobs }
        }
        _ => knobs,
    }
}

/// The accumulator's pixels with `Accumulate::FlatRows` (`OH·WS - (KW - 1)`, `WS` the padded
/// width), where it applies to the layer (`ops::DirectConvLayer::flat`): at stride 1 or with a
/// 1×1 kernel, and kernel rows of `KW·IC` bytes.
pub fn flat_rows_pixels(layer: &ConvLayer) -> Option<i64> {
    let applies = (layer.stride == 1 || layer.k == 1) && conv_row_bytes(layer.ic, layer.k) == layer.k * layer.ic;
    let ws = if layer.k == 1 && layer.stride > 1 { layer.ow() } else { layer.w + 2 * layer.pad };
    applies.then(|| layer.oh() * ws - (layer.k - 1))
}

/// The default knobs of a dense layer with `rows` source rows run as `dense_int8`: the tile of
/// a 1×1 convolution whose output row is the `rows` pixels (`default_conv_knobs`; one row
/// takes `mr = 1`, an `OC` that no panel width divides takes `nr = 16` with the last panel
/// padded), on one thread: a row of tiles is less work than handing it to the pool. Its NHWC
/// output is requantized by the map kernel, which masks a partial vector (FC's 1000 channels),
/// so the lanes play no part.
pub fn default_dense_knobs(layer: &DenseLayer, rows: i64) -> Conv2dInt8Knobs {
    let (ic, oc) = (layer.in_features, layer.out_features);
    let conv = ConvLayer { name: layer.name, ic, oc, h: 1, w: rows, k: 1, stride: 1, pad: 0 };
    default_conv_knobs(&conv, CoreRate::FullZmmVnni, 1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resnet18::{CONV_LAYERS, FC};

    #[test]
    fn the_weights_range_and_the_packing_pick_the_fastest_exact_operands() {
        let knobs = default_conv_knobs(&CONV_LAYERS[1], CoreRate::FullZmmVnni, 1);
        assert_eq!(knobs.packing, Packing::I16);
        let pick = |vnni, range| {
            let o = knobs.operands(vnni, range);
            (o.source, o.weights)
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
        let bytes = Conv2dInt8Knobs { packing: Packing::Bytes, ..knobs };
        let bytes = |vnni, range| {
            let o = bytes.operands(vnni, range);
            (o.source, o.weights)
        };
        assert_eq!(bytes(false, (-127, 127)), (DType::I8, (-127, 127)));
        assert_eq!(bytes(false, (-128, 5)), (DType::U8, (-128, 127)));
        assert_eq!(bytes(false, (-64, 63)), (DType::U8, (-64, 63)));
        assert_eq!(bytes(true, (-127, 127)), (DType::U8, (-128, 127)));
        // The declared range always holds the packing's zero padding.
        assert_eq!(pick(false, (3, 9)), (DType::U8, (0, 9)));
        assert_eq!(weight_range([5, -3, 7]), (-3, 7));
        assert_eq!(weight_range([]), (0, 0));
    }

    #[test]
    fn the_thread_pool_serves_smaller_layers_on_slower_cores() {
        // R4 (a 1×1 stride-2 layer, 12.8 M operations) and R1 (236 M).
        let (r4, r1) = (&CONV_LAYERS[3], &CONV_LAYERS[0]);
        let threads = |l, rate| default_conv_knobs(l, rate, 2).threads;
        let (full, slower) = (CoreRate::FullZmmVnni, CoreRate::Slower);
        assert_eq!((threads(r4, full), threads(r4, slower)), (1, 2));
        assert_eq!((threads(r1, full), threads(r1, slower)), (2, 2));
        assert_eq!(default_conv_knobs(r1, full, 1).threads, 1);
        // The dense layer runs one row on one thread, whatever the rate.
        let fc = default_knobs(Layer::Dense(FC), slower, 2);
        assert_eq!((fc.mr, fc.nr, fc.threads), (1, 16, 1));
        assert_eq!(fc, default_dense_knobs(&FC, 1));
        assert_eq!(default_knobs(Layer::Conv(*r4), slower, 2), default_conv_knobs(r4, slower, 2));
    }

    #[test]
    fn default_tiles_fit_the_registers_and_divide_the_rows() {
        let knobs = |l| default_conv_knobs(l, CoreRate::FullZmmVnni, 2);
        let tiles: Vec<(i64, i64)> = CONV_LAYERS.iter().map(|l| (knobs(l).mr, knobs(l).nr)).collect();
        // R1, R2, R4 (rows of 112, 56, 28 pixels, OC 64/64/128) take 4 × 64; R11 (7) 7 × 32.
        assert_eq!(tiles[0], (4, 64));
        assert_eq!(tiles[1], (4, 64));
        assert_eq!(tiles[10], (7, 32));
        for (l, (mr, nr)) in CONV_LAYERS.iter().zip(tiles) {
            assert!(mr * nr / 16 <= 24 && l.oc % nr == 0, "{}: {mr} x {nr}", l.name);
            assert_eq!(l.ow() % mr, 0, "{}: {mr}", l.name);
            assert_eq!(knobs(l).check(), Ok(()), "{}", l.name);
        }
    }

    #[test]
    fn tiles_take_the_flat_rows_of_images_that_fit_one_tile() {
        let flat = |name: &str| CONV_LAYERS.iter().find(|l| l.name == name).copied().unwrap();
        // R11 (3×3, 7×7 padded to 9 wide): 7·9 - 2 pixels; R10 (1×1 stride 2 to 7×7): 49.
        assert_eq!(flat_rows_pixels(&flat("R11")), Some(61));
        assert_eq!(flat_rows_pixels(&flat("R10")), Some(49));
        // R9 (3×3 stride 2) has none; R8 (14×14) has more than a tile.
        assert_eq!(flat_rows_pixels(&flat("R9")), None);
        assert_eq!(flat_rows_pixels(&flat("R8")), Some(14 * 16 - 2));
        let tiles = |name| {
            let k = default_conv_knobs(&flat(name), CoreRate::Tiles, 1);
            (k.mr, k.accumulation)
        };
        assert_eq!(tiles("R11"), (61, Accumulate::FlatRows));
        assert_eq!(tiles("R10"), (49, Accumulate::FlatRows));
        assert_eq!(tiles("R8").1, default_conv_knobs(&flat("R8"), CoreRate::FullZmmVnni, 1).accumulation);
        assert_eq!(tiles("R9").0, 7);
        // Other rates keep rows.
        assert_ne!(default_conv_knobs(&flat("R11"), CoreRate::FullZmmVnni, 1).accumulation, Accumulate::FlatRows);
    }

    #[test]
    fn knobs_outside_the_schedules_ranges_are_named_and_records_spell_them_in_snake_case() {
        let knobs = default_conv_knobs(&CONV_LAYERS[1], CoreRate::FullZmmVnni, 2);
        let err = |k: Conv2dInt8Knobs| k.check().unwrap_err().to_string();
        assert_eq!(err(Conv2dInt8Knobs { mr: 0, ..knobs }), "mr = 0: expected at least 1");
        assert_eq!(err(Conv2dInt8Knobs { nr: 257, ..knobs }), "nr = 257: expected 1..=256");
        assert_eq!(err(Conv2dInt8Knobs { lanes: 512, ..knobs }), "lanes = 512: expected 1..=256");
        assert_eq!(err(Conv2dInt8Knobs { threads: 0, ..knobs }), "threads = 0: expected at least 1");
        let json = r#"{"mr":4,"nr":64,"lanes":16,"order":"pixels_outer","threads":2,"packing":"i16","accumulation":"per_row_with_source"}"#;
        assert_eq!(serde_json::to_string(&knobs).unwrap(), json);
        assert_eq!(serde_json::from_str::<Conv2dInt8Knobs>(json).unwrap(), knobs);
        // Records from before the packing and accumulation knobs measured bytes, all
        // accumulators at once.
        let old = r#"{"mr":4,"nr":64,"lanes":16,"order":"channels_outer","threads":1}"#;
        let old = serde_json::from_str::<Conv2dInt8Knobs>(old).unwrap();
        assert_eq!(
            (old.order, old.packing, old.accumulation),
            (TileOrder::ChannelsOuter, Packing::Bytes, Accumulate::Whole)
        );
        // Gathered rows, of K = KH·R and rounded up to 64: one GEMM segment of K.
        for (accumulation, name, k) in
            [(Accumulate::Im2col, "im2col", 168), (Accumulate::Im2colTiles, "im2col_tiles", 192)]
        {
            let gathered = Conv2dInt8Knobs { accumulation, ..knobs };
            let json = format!(
                r#"{{"mr":4,"nr":64,"lanes":16,"order":"pixels_outer","threads":2,"packing":"i16","accumulation":"{name}"}}"#
            );
            assert_eq!(serde_json::to_string(&gathered).unwrap(), json);
            assert_eq!(serde_json::from_str::<Conv2dInt8Knobs>(&json).unwrap(), gathered);
            assert_eq!(gathered.source_rows(), SourceRows::Im2col { align: if k == 168 { 4 } else { 64 } });
            // The stem: 7 kernel rows of 21 bytes padded to 24.
            assert_eq!(gathered.gemm_k(3, 7, 7, 2), k);
        }
        assert_eq!(knobs.gemm_k(3, 7, 7, 2), 168);
        // Space to depth: the stem as 4 kernel rows of 4 × 12 bytes; a 1×1 kernel or stride 1
        // as before.
        let s2d = Conv2dInt8Knobs { accumulation: Accumulate::SpaceToDepth, ..knobs };
        let json = r#"{"mr":4,"nr":64,"lanes":16,"order":"pixels_outer","threads":2,"packing":"i16","accumulation":"space_to_depth"}"#;
        assert_eq!(serde_json::to_string(&s2d).unwrap(), json);
        assert_eq!(serde_json::from_str::<Conv2dInt8Knobs>(json).unwrap(), s2d);
        assert_eq!(s2d.source_rows(), SourceRows::SpaceToDepth);
        assert_eq!((s2d.gemm_k(3, 7, 7, 2), s2d.space_to_depth(2, 7, 7)), (192, Some(2)));
        assert_eq!((s2d.gemm_k(64, 3, 3, 1), s2d.space_to_depth(1, 3, 3)), (576, None));
        assert_eq!((s2d.gemm_k(64, 1, 1, 2), s2d.space_to_depth(2, 1, 1)), (64, None));
        assert_eq!(s2d.gemm_k(64, 3, 3, 2), 2 * 2 * 256);
        assert_eq!(knobs.source_rows(), SourceRows::Padded);
        let flat = Conv2dInt8Knobs { mr: 61, accumulation: Accumulate::FlatRows, ..knobs };
        let json = r#"{"mr":61,"nr":64,"lanes":16,"order":"pixels_outer","threads":2,"packing":"i16","accumulation":"flat_rows"}"#;
        assert_eq!(serde_json::to_string(&flat).unwrap(), json);
        assert_eq!(serde_json::from_str::<Conv2dInt8Knobs>(json).unwrap(), flat);
        for bad in [r#"{"mr":4,"nr":64,"lanes":16,"order":"rows_outer","threads":1}"#, r#"{"mr":4,"nr":64}"#] {
            assert!(serde_json::from_str::<Conv2dInt8Knobs>(bad).is_err(), "{bad}");
        }
    }
}
