//! The search space of the int8 convolution and dense schedules: the `x86_conv` knobs
//! (`Conv2dInt8Knobs`, the tuner's one knob type), each with a typed range for a layer on a
//! machine — a table layer, or any geometry the x86 kernels compute (`tasks::Task::space`: a
//! model's convolution as its `ConvLayer`, a product as a dense layer of `rows` rows). A point either fits the layer or is rejected with the reason before anything is
//! compiled.

use ir::intrin::pair_sums_fit_i16;
use schedules::ops::conv_row_bytes;
use schedules::resnet18::Layer;
use schedules::x86_conv::{
    Accumulate, Conv2dInt8Knobs, CoreRate, MAX_TILE_MR, Packing, TileOrder, default_dense_knobs, default_knobs,
    flat_rows_pixels,
};
use thiserror::Error;

use crate::isa::IsaLevel;

/// The typed ranges of every knob.
pub const NR: [i64; 3] = [16, 32, 64];
pub const LANES: [i64; 3] = [8, 16, 32];
pub const ORDERS: [TileOrder; 2] = [TileOrder::PixelsOuter, TileOrder::ChannelsOuter];
pub const PACKINGS: [Packing; 2] = [Packing::I16, Packing::Bytes];
pub const ACCUMULATIONS: [Accumulate; 7] = [
    Accumulate::Whole,
    Accumulate::PerRow,
    Accumulate::PerRowWithSource,
    Accumulate::FlatRows,
    Accumulate::Im2col,
    Accumulate::Im2colTiles,
    Accumulate::SpaceToDepth,
];
/// `mr` runs from 1 to this, and to the pixels of an output row (`x86_conv::MAX_TILE_MR` at
/// `CoreRate::Tiles`, whose kernels want tall tiles, for flat rows and products; a
/// convolution's tile there may take its whole output row).
pub const MAX_MR: i64 = 16;

/// Why a point does not fit a layer.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum Rejection {
    #[error(
        "mr = {found}: expected 1..={max} (at most the pixels of an output row, or of the flat rows with flat_rows, and the level's tallest tile)"
    )]
    Mr { found: i64, max: i64 },
    #[error("nr = {found}: expected one of {NR:?} dividing the {oc} output channels (the first where none does)")]
    Nr { found: i64, oc: i64 },
    #[error("lanes = {found}: expected one of {LANES:?}")]
    Lanes { found: i64 },
    #[error("threads = {found}: expected 1..={max}")]
    Threads { found: usize, max: usize },
    #[error("{layer} runs on one row: expected threads = 1, found {found}")]
    DenseThreads { layer: &'static str, found: usize },
    #[error(
        "packing = bytes: expected i16 (the packing picks no kernel family here: VNNI, or weights the triple is exact on)"
    )]
    Packing,
    #[error("accumulation = {found:?}: expected whole ({layer} computes one row)")]
    DenseAccumulation { layer: &'static str, found: Accumulate },
}

/// The space of one layer on a machine with `max_threads` threads.
#[derive(Clone, Copy, Debug)]
pub struct Space {
    pub layer: Layer,
    pub max_threads: usize,
    /// Whether the packing is a choice (it picks the kernel family: no VNNI, weights the
    /// triple is not proven exact on); else `Packing::I16`, the default.
    pub choose_packing: bool,
    /// How fast a core multiplies int8 at the level (the default knobs' threads follow it,
    /// `x86_conv::default_knobs`).
    pub rate: CoreRate,
    /// Rows of a dense layer's source (`M`: the pixels of the row its 1×1 convolution covers;
    /// 1 for the table's FC).
    pub rows: i64,
}

impl Space {
    pub fn new(layer: Layer, max_threads: usize) -> Space {
        Space { layer, max_threads: max_threads.max(1), choose_packing: false, rate: CoreRate::FullZmmVnni, rows: 1 }
    }

    /// The space for code at `level` on weights in `weights`: the packing is a choice where it
    /// picks the kernel family.
    pub fn for_target(layer: Layer, max_threads: usize, level: IsaLevel, (lo, hi): (i8, i8)) -> Space {
        let triple_exact = pair_sums_fit_i16((0, 255), (i64::from(lo.min(0)), i64::from(hi.max(0))));
        Space {
            choose_packing: !level.has_vnni() && !triple_exact,
            rate: crate::build::core_rate(level),
            ..Space::new(layer, max_threads)
        }
    }

    /// Pixels of an output row (the GEMM rows one tile covers).
    fn row_pixels(&self) -> i64 {
        match self.layer {
            Layer::Conv(c) => c.ow(),
            Layer::Dense(_) => self.rows,
        }
    }

    fn cap_mr(&self) -> i64 {
        if self.rate == CoreRate::Tiles { MAX_TILE_MR } else { MAX_MR }
    }

    /// The pixels of `FlatRows` tiles, where they apply to the layer.
    fn flat_pixels(&self) -> Option<i64> {
        match self.layer {
            Layer::Conv(c) => flat_rows_pixels(&c),
            Layer::Dense(_) => None,
        }
    }

    /// The tallest tile with `accumulation`: of the flat rows' pixels with `FlatRows` where it
    /// applies, else of an output row's; at `CoreRate::Tiles` a convolution's whole output row
    /// (the stem's 112 pixels: seven blocks of 16 rows, none recomputed, in one call).
    fn max_mr(&self, accumulation: Accumulate) -> i64 {
        match (accumulation, self.flat_pixels(), self.layer) {
            (Accumulate::FlatRows, Some(v), _) => v.min(self.cap_mr()),
            (_, _, Layer::Conv(_)) if self.rate == CoreRate::Tiles => self.row_pixels(),
            _ => self.row_pixels().min(self.cap_mr()),
        }
    }

    fn oc(&self) -> i64 {
        match self.layer {
            Layer::Conv(c) => c.oc,
            Layer::Dense(d) => d.out_features,
        }
    }

    /// The panel widths: those of `NR` dividing the output channels (the packing pads the last
    /// panel of a dense layer, so any there); where none divides them, the narrowest, padded
    /// (what `x86_conv::default_conv_knobs` picks then).
    fn nr_choices(&self) -> Vec<i64> {
        let nr: Vec<i64> =
            NR.into_iter().filter(|nr| matches!(self.layer, Layer::Dense(_)) || self.oc() % nr == 0).collect();
        if nr.is_empty() { vec![NR[0]] } else { nr }
    }

    /// The default knobs (`x86_conv::default_knobs` for the space's core rate and threads),
    /// always a candidate so tuned is never worse than default.
    pub fn default_knobs(&self) -> Conv2dInt8Knobs {
        match self.layer {
            Layer::Dense(d) => default_dense_knobs(&d, self.rows),
            conv => default_knobs(conv, self.rate, self.max_threads),
        }
    }

    /// `Ok` if `p` fits the layer, else the first reason it does not.
    pub fn check(&self, p: &Conv2dInt8Knobs) -> Result<(), Rejection> {
        let max = self.max_mr(p.accumulation);
        if !(1..=max).contains(&p.mr) {
            return Err(Rejection::Mr { found: p.mr, max });
        }
        if !self.nr_choices().contains(&p.nr) {
            return Err(Rejection::Nr { found: p.nr, oc: self.oc() });
        }
        if !LANES.contains(&p.lanes) {
            return Err(Rejection::Lanes { found: p.lanes });
        }
        if !(1..=self.max_threads).contains(&p.threads) {
            return Err(Rejection::Threads { found: p.threads, max: self.max_threads });
        }
        if matches!(self.layer, Layer::Dense(_)) && p.threads != 1 {
            return Err(Rejection::DenseThreads { layer: self.layer.name(), found: p.threads });
        }
        if !self.choose_packing && p.packing != Packing::I16 {
            return Err(Rejection::Packing);
        }
        if matches!(self.layer, Layer::Dense(_)) && p.accumulation != Accumulate::Whole {
            return Err(Rejection::DenseAccumulation { layer: self.layer.name(), found: p.accumulation });
        }
        Ok(())
    }

    /// Every value of each knob that fits alone (the others fixed at a fitting value).
    pub fn choices(&self) -> Choices {
        let nr = self.nr_choices();
        let threads = match self.layer {
            Layer::Conv(_) => (1..=self.max_threads).collect(),
            Layer::Dense(_) => vec![1],
        };
        let packings = if self.choose_packing { PACKINGS.to_vec() } else { vec![Packing::I16] };
        // Gathered rows where a kernel row is short of a 64-byte reduction chunk (the stem):
        // elsewhere they copy each source byte `KH·KW/stride²` times for no fuller chunk. Space
        // to depth likewise, at a stride (elsewhere it is `PerRow`): wider rows pay only where
        // they fill more of a chunk.
        let short = |a: &Accumulate| !matches!(a, Accumulate::Im2col | Accumulate::Im2colTiles);
        let strided = |a: &Accumulate| *a != Accumulate::SpaceToDepth;
        let accumulations = match self.layer {
            Layer::Conv(c) if c.k > 1 && conv_row_bytes(c.ic, c.k) < 64 && c.stride > 1 => ACCUMULATIONS.to_vec(),
            Layer::Conv(c) if c.k > 1 && conv_row_bytes(c.ic, c.k) < 64 => {
                ACCUMULATIONS.into_iter().filter(strided).collect()
            }
            Layer::Conv(_) => ACCUMULATIONS.into_iter().filter(|a| short(a) && strided(a)).collect(),
            Layer::Dense(_) => vec![Accumulate::Whole],
        };
        let (row_max, flat_max) = (self.max_mr(Accumulate::Whole), self.max_mr(Accumulate::FlatRows));
        let mr: Vec<i64> = (1..=row_max.max(flat_max)).collect();
        let flat = self.flat_pixels().unwrap_or(self.row_pixels());
        let divides = |m: i64| (m <= row_max && self.row_pixels() % m == 0) || (m <= flat_max && flat % m == 0);
        Choices {
            mr_dividing_rows: mr.iter().copied().filter(|&m| divides(m)).collect(),
            mr,
            nr,
            // The tuned layers are NHWC, whose output the level's map kernel requantizes: the
            // lanes (which vectorize an NCHW output) change nothing there, so only the
            // default's is tried.
            lanes: vec![self.default_knobs().lanes],
            orders: ORDERS.to_vec(),
            threads,
            packings,
            accumulations,
        }
    }

    /// The number of points in the space.
    pub fn size(&self) -> usize {
        let c = self.choices();
        c.mr.len()
            * c.nr.len()
            * c.lanes.len()
            * c.orders.len()
            * c.threads.len()
            * c.packings.len()
            * c.accumulations.len()
    }
}

/// The values of each knob (`Space::choices`).
#[derive(Clone, Debug)]
pub struct Choices {
    pub mr: Vec<i64>,
    /// The `mr` that divide an output row's pixels (or the flat rows' pixels, up to their
    /// tallest tile): any other leaves the row's last pixels to the call's fallback loops,
    /// which run many times slower than the micro-kernel.
    pub mr_dividing_rows: Vec<i64>,
    pub nr: Vec<i64>,
    pub lanes: Vec<i64>,
    pub orders: Vec<TileOrder>,
    pub threads: Vec<usize>,
    pub packings: Vec<Packing>,
    pub accumulations: Vec<Accumulate>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use schedules::resnet18::{self, FC};

    #[test]
    fn the_default_is_in_every_space_and_bad_points_say_why() {
        for layer in resnet18::layers() {
            let space = Space::new(layer, 2);
            assert_eq!(space.check(&space.default_knobs()), Ok(()), "{}", layer.name());
            assert!(space.size() >= 6, "{}: {}", layer.name(), space.size());
        }
        let r2 = Space::new(resnet18::layer("R2").unwrap(), 2);
        let p = r2.default_knobs();
        assert_eq!(r2.check(&Conv2dInt8Knobs { mr: 0, ..p }), Err(Rejection::Mr { found: 0, max: 16 }));
        assert_eq!(r2.check(&Conv2dInt8Knobs { nr: 48, ..p }), Err(Rejection::Nr { found: 48, oc: 64 }));
        assert_eq!(r2.check(&Conv2dInt8Knobs { lanes: 12, ..p }), Err(Rejection::Lanes { found: 12 }));
        assert_eq!(r2.check(&Conv2dInt8Knobs { threads: 3, ..p }), Err(Rejection::Threads { found: 3, max: 2 }));
        let r11 = Space::new(resnet18::layer("R11").unwrap(), 2);
        assert_eq!(
            r11.check(&Conv2dInt8Knobs { mr: 8, ..r11.default_knobs() }),
            Err(Rejection::Mr { found: 8, max: 7 })
        );
        // Flat rows take tiles of up to all their pixels at the level's tallest tile: R11's
        // 61 at the amx level, a row's otherwise.
        let flat = Conv2dInt8Knobs { accumulation: Accumulate::FlatRows, ..r11.default_knobs() };
        let tiles = Space { rate: CoreRate::Tiles, ..r11 };
        assert_eq!(tiles.check(&Conv2dInt8Knobs { mr: 61, ..flat }), Ok(()));
        assert_eq!(tiles.check(&Conv2dInt8Knobs { mr: 62, ..flat }), Err(Rejection::Mr { found: 62, max: 61 }));
        assert_eq!(r11.check(&Conv2dInt8Knobs { mr: 16, ..flat }), Ok(()));
        assert_eq!(
            tiles.check(&Conv2dInt8Knobs { mr: 61, ..r11.default_knobs() }),
            Err(Rejection::Mr { found: 61, max: 7 })
        );
        assert_eq!(tiles.check(&tiles.default_knobs()), Ok(()));
        let fc = Space::new(Layer::Dense(FC), 2);
        assert_eq!(
            fc.check(&Conv2dInt8Knobs { threads: 2, ..fc.default_knobs() }),
            Err(Rejection::DenseThreads { layer: "FC", found: 2 })
        );
        let bytes = Conv2dInt8Knobs { packing: Packing::Bytes, ..p };
        assert_eq!(r2.check(&bytes), Err(Rejection::Packing));
        // Without VNNI, full-range weights make the packing a choice; 7-bit ones (the triple) do not.
        let layer = resnet18::layer("R2").unwrap();
        let avx2 = Space::for_target(layer, 2, IsaLevel::Avx2, (-127, 127));
        assert_eq!(avx2.check(&bytes), Ok(()));
        assert_eq!(avx2.size(), 2 * r2.size());
        assert!(!Space::for_target(layer, 2, IsaLevel::Avx2, (-64, 63)).choose_packing);
        assert!(!Space::for_target(layer, 2, IsaLevel::Avx512Vnni, (-127, 127)).choose_packing);
        // A row at a time is a choice of the convolutions; the dense layer has one row.
        assert_eq!(r2.choices().accumulations, ACCUMULATIONS[..4]);
        // Gathered rows and space to depth are a choice of the stem alone, whose kernel rows are
        // 21 bytes at stride 2.
        let stem = Space::new(resnet18::layer("R1").unwrap(), 2);
        assert_eq!(stem.choices().accumulations, ACCUMULATIONS);
        // At the tile rate a convolution's tile may take its whole output row (the stem's 112
        // pixels), flat rows at most the tallest tile.
        let stem_tiles = Space { rate: CoreRate::Tiles, ..stem };
        assert_eq!(stem_tiles.check(&Conv2dInt8Knobs { mr: 112, ..stem_tiles.default_knobs() }), Ok(()));
        assert!(stem_tiles.choices().mr_dividing_rows.contains(&112));
        assert_eq!(
            stem.check(&Conv2dInt8Knobs { mr: 112, ..stem.default_knobs() }),
            Err(Rejection::Mr { found: 112, max: 16 })
        );
        assert_eq!(tiles.max_mr(Accumulate::FlatRows), 61);
        assert_eq!(
            fc.check(&Conv2dInt8Knobs { accumulation: Accumulate::PerRow, ..fc.default_knobs() }),
            Err(Rejection::DenseAccumulation { layer: "FC", found: Accumulate::PerRow })
        );
        assert_eq!(r2.check(&Conv2dInt8Knobs { nr: 64, ..p }).map_err(|e| e.to_string()), Ok(()));
        assert_eq!(
            r2.check(&Conv2dInt8Knobs { nr: 48, ..p }).unwrap_err().to_string(),
            "nr = 48: expected one of [16, 32, 64] dividing the 64 output channels (the first where none does)"
        );
    }
}
