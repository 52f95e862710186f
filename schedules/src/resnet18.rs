//! The resnet-18 int8 workload (batch 1, NCHW): convolution layers R1..R11 and the FC layer,
//! as the project's resnet-18 int8 benchmark defines them, with their quantization
//! (`quantization`). `scripts/peers/layers.py` builds the same layers, data and quantization for
//! the peers (same generator and seeds): keep the two equal.

use ir::DType;

use crate::quant::{QuantAttrs, QuantError, Requantization, Scales, TensorQuant};

/// One convolution layer: `ic → oc` channels over an `h × w` input, a square `k × k` kernel,
/// `stride` and symmetric `pad`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConvLayer {
    pub name: &'static str,
    pub ic: i64,
    pub oc: i64,
    pub h: i64,
    pub w: i64,
    pub k: i64,
    pub stride: i64,
    pub pad: i64,
}

impl ConvLayer {
    /// Output height `(h + 2·pad − k) / stride + 1` (floor).
    pub fn oh(&self) -> i64 {
        (self.h + 2 * self.pad - self.k) / self.stride + 1
    }

    /// Output width, as `oh`.
    pub fn ow(&self) -> i64 {
        (self.w + 2 * self.pad - self.k) / self.stride + 1
    }

    /// Operations (two per multiply-accumulate): `2·OC·OH·OW·IC·KH·KW`.
    pub fn ops(&self) -> u64 {
        2 * (self.oc * self.oh() * self.ow() * self.ic * self.k * self.k) as u64
    }
}

/// The fully connected layer: `in_features → out_features`, batch 1.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DenseLayer {
    pub name: &'static str,
    pub in_features: i64,
    pub out_features: i64,
}

impl DenseLayer {
    /// `2·OC·IC` (a 1 × 1 convolution over a 1 × 1 image).
    pub fn ops(&self) -> u64 {
        2 * (self.out_features * self.in_features) as u64
    }
}

const fn conv(name: &'static str, ic: i64, oc: i64, hw: i64, k: i64, stride: i64, pad: i64) -> ConvLayer {
    ConvLayer { name, ic, oc, h: hw, w: hw, k, stride, pad }
}

/// R1..R11. R1's three input channels are padded as a schedule needs (the table keeps 3).
pub const CONV_LAYERS: [ConvLayer; 11] = [
    conv("R1", 3, 64, 224, 7, 2, 3),
    conv("R2", 64, 64, 56, 3, 1, 1),
    conv("R3", 64, 128, 56, 3, 2, 1),
    conv("R4", 64, 128, 56, 1, 2, 0),
    conv("R5", 128, 128, 28, 3, 1, 1),
    conv("R6", 128, 256, 28, 3, 2, 1),
    conv("R7", 128, 256, 28, 1, 2, 0),
    conv("R8", 256, 256, 14, 3, 1, 1),
    conv("R9", 256, 512, 14, 3, 2, 1),
    conv("R10", 256, 512, 14, 1, 2, 0),
    conv("R11", 512, 512, 7, 3, 1, 1),
];

/// FC: dense 512 → 1000.
pub const FC: DenseLayer = DenseLayer { name: "FC", in_features: 512, out_features: 1000 };

/// A layer of the table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layer {
    Conv(ConvLayer),
    Dense(DenseLayer),
}

impl Layer {
    pub fn name(&self) -> &'static str {
        match self {
            Layer::Conv(c) => c.name,
            Layer::Dense(d) => d.name,
        }
    }

    pub fn ops(&self) -> u64 {
        match self {
            Layer::Conv(c) => c.ops(),
            Layer::Dense(d) => d.ops(),
        }
    }
}

/// The range the table's s8 weights are drawn from (`layers.py`'s symmetric quantization, or
/// `TL_WEIGHT_BITS=7` for what onnxruntime's quantizer gives with `reduce_range`). Serialized
/// by its `name`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum WeightBits {
    /// [-127, 127].
    #[serde(rename = "full")]
    Eight,
    /// [-64, 63]: every u8 × s8 pair sum fits i16, so `vpmaddubsw` is exact on them.
    #[serde(rename = "7bit")]
    Seven,
}

impl WeightBits {
    pub const ALL: [WeightBits; 2] = [WeightBits::Eight, WeightBits::Seven];

    /// The name the CLI's `--weights` and tuning records use: `full` or `7bit`.
    pub fn name(self) -> &'static str {
        match self {
            WeightBits::Eight => "full",
            WeightBits::Seven => "7bit",
        }
    }

    /// The range called `name` (see `name`).
    pub fn from_name(name: &str) -> Option<WeightBits> {
        WeightBits::ALL.into_iter().find(|w| w.name() == name)
    }

    pub fn range(self) -> (i8, i8) {
        match self {
            WeightBits::Eight => (-127, 127),
            WeightBits::Seven => (-64, 63),
        }
    }
}

/// The source quantization: u8, scale 0.02, zero point 128.
pub const SRC_SCALE: f32 = 0.02;
pub const SRC_ZERO_POINT: i32 = 128;
/// The destination zero point: mid-range, so that (relu off) negative results are not all
/// clamped to 0: a bit-exact check needs outputs that are not all at the clamp.
pub const DST_ZERO_POINT: i32 = 128;
/// Standard deviations of the uniform source (0..=255 about 128) and weights (-127..=127).
const SRC_STD: f32 = 73.9;
const WEI_STD: f32 = 73.6;
/// The destination scale maps one standard deviation of the real output to this many steps.
const DST_STEPS_PER_STD: f32 = 32.0;

/// A 64-bit linear congruential generator (Knuth's MMIX constants), seeded through a
/// multiplicative hash so that neighbouring seeds give unrelated streams: the table's data.
#[derive(Clone, Debug)]
pub struct Lcg(u64);

impl Lcg {
    pub fn new(seed: u64) -> Lcg {
        Lcg(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }

    /// The next 31 bits (the state's high bits: an LCG's low bits have short periods).
    pub fn next_u32(&mut self) -> u32 {
        self.0 = self.0.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 33) as u32
    }
}

/// `len` deterministic pseudo-random integers, uniform in `lo..=hi` (up to the modulo bias of a
/// 31-bit draw). Panics if `lo > hi`.
pub fn uniform(len: usize, seed: u64, lo: i64, hi: i64) -> Vec<i64> {
    assert!(lo <= hi, "uniform: empty range {lo}..={hi}");
    let span = (hi - lo + 1) as u64;
    let mut rng = Lcg::new(seed);
    (0..len).map(|_| lo + (u64::from(rng.next_u32()) % span) as i64).collect()
}

/// A layer's quantization as `layers.py` draws it from `seed`: u8 source (zero point 128), s8
/// symmetric weights with per-output-channel scales, a bias, u8 output (zero point 128, a scale
/// that spreads the output over the u8 range), relu off.
#[derive(Clone, Debug)]
pub struct LayerQuant {
    pub attrs: QuantAttrs,
    /// `s32` bias in -1000..1000 with scale `src_scale · wei_scale[oc]`, as f32 (`bias_q` times
    /// that scale).
    pub bias: Vec<f32>,
    /// The same bias as the integers drawn, before scaling (what a QDQ model's bias holds).
    pub bias_q: Vec<i32>,
    /// `[N, C, H, W]` of the source (`[1, IC]` for the dense layer) and `[OC, IC, KH, KW]` of the
    /// weights (`[OC, IC]`).
    pub src_dims: Vec<i64>,
    pub wei_dims: Vec<i64>,
}

/// The quantization of `layer` drawn from `seed` (the CLI seeds by table position).
pub fn quantization(layer: Layer, seed: u64) -> Result<LayerQuant, QuantError> {
    let (src_dims, wei_dims) = match layer {
        Layer::Conv(c) => (vec![1, c.ic, c.h, c.w], vec![c.oc, c.ic, c.k, c.k]),
        Layer::Dense(d) => (vec![1, d.in_features], vec![d.out_features, d.in_features]),
    };
    let (oc, fan_in) = (wei_dims[0], wei_dims[1..].iter().product::<i64>());
    let wei_scales: Vec<f32> =
        uniform(oc as usize, seed + 2, 0, 9999).iter().map(|&u| 0.005 + 0.01 * u as f32 / 1e4).collect();
    let bias_q: Vec<i32> = uniform(oc as usize, seed + 3, -1000, 999).iter().map(|&b| b as i32).collect();
    let bias = bias_q.iter().zip(&wei_scales).map(|(&b, &s)| b as f32 * (SRC_SCALE * s)).collect();
    let mean_scale = wei_scales.iter().sum::<f32>() / oc as f32;
    let output_std = SRC_SCALE * mean_scale * (fan_in as f32).sqrt() * SRC_STD * WEI_STD;
    let attrs = QuantAttrs {
        src: TensorQuant::per_tensor("src", SRC_SCALE, SRC_ZERO_POINT, DType::U8)?,
        wei_scales: Scales::new("weights scales", wei_scales, 1, &wei_dims)?,
        dst: TensorQuant::per_tensor("dst", output_std / DST_STEPS_PER_STD, DST_ZERO_POINT, DType::U8)?,
        dst_dtype: DType::U8,
        post_ops: Vec::new(),
        requantization: Requantization::OneDnn,
    };
    Ok(LayerQuant { attrs, bias, bias_q, src_dims, wei_dims })
}

/// Every layer in table order: R1..R11, then FC.
pub fn layers() -> Vec<Layer> {
    CONV_LAYERS.iter().map(|c| Layer::Conv(*c)).chain([Layer::Dense(FC)]).collect()
}

/// The layer named `name` (`"R1"`..`"R11"`, `"FC"`), if any.
pub fn layer(name: &str) -> Option<Layer> {
    layers().into_iter().find(|l| l.name() == name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_matches_the_benchmark_definition() {
        // (IC, H, W, OC, K, stride, pad) of resnet-18's distinct convolutions, batch 1.
        let expected = [
            (3, 224, 64, 7, 2, 3),
            (64, 56, 64, 3, 1, 1),
            (64, 56, 128, 3, 2, 1),
            (64, 56, 128, 1, 2, 0),
            (128, 28, 128, 3, 1, 1),
            (128, 28, 256, 3, 2, 1),
            (128, 28, 256, 1, 2, 0),
            (256, 14, 256, 3, 1, 1),
            (256, 14, 512, 3, 2, 1),
            (256, 14, 512, 1, 2, 0),
            (512, 7, 512, 3, 1, 1),
        ];
        for (i, (l, (ic, h, oc, k, s, p))) in CONV_LAYERS.iter().zip(expected).enumerate() {
            assert_eq!(l.name, format!("R{}", i + 1));
            assert_eq!((l.ic, l.h, l.w, l.oc, l.k, l.stride, l.pad), (ic, h, h, oc, k, s, p));
        }
        assert_eq!(layers().len(), 12);
        assert_eq!(layer("FC"), Some(Layer::Dense(DenseLayer { name: "FC", in_features: 512, out_features: 1000 })));
        assert_eq!(layer("R12"), None);
    }

    #[test]
    fn output_sizes_and_gops_numerators() {
        let r = |n: &str| match layer(n) {
            Some(Layer::Conv(c)) => c,
            other => panic!("{other:?}"),
        };
        assert_eq!((r("R1").oh(), r("R1").ow()), (112, 112));
        assert_eq!((r("R2").oh(), r("R3").oh(), r("R4").oh()), (56, 28, 28));
        assert_eq!((r("R9").oh(), r("R10").oh(), r("R11").oh()), (7, 7, 7));
        // 2·OC·OH·OW·IC·KH·KW
        assert_eq!(r("R1").ops(), 2 * 64 * 112 * 112 * 3 * 49);
        assert_eq!(r("R2").ops(), 2 * 64 * 56 * 56 * 64 * 9);
        assert_eq!(r("R4").ops(), 2 * 128 * 28 * 28 * 64);
        assert_eq!(r("R11").ops(), 2 * 512 * 7 * 7 * 512 * 9);
        assert_eq!(FC.ops(), 2 * 512 * 1000);
        assert_eq!(layer("FC").unwrap().ops(), 1_024_000);
    }
}
