//! `x86_conv::conv2d_int8` and `dense_int8` on small geometries — a 5×5 input under a 3×3
//! kernel at stride 2, a kernel as large as the padded input (a 1×1 output), rows of one pixel,
//! `OC` not a multiple of `nr`, 3 input channels — with knobs at and beyond the edges of the
//! layer (`mr` above the pixels of a row, every panel width of the tuner, each accumulation and
//! tile order, both packings, lanes above `OC`; flat rows where they apply and fall back), at every ISA level this CPU has, bit for bit
//! against the tensor-expression interpreter of `ops::conv2d_nchw_int8` (`ops::dense_int8`),
//! which shares no code with the x86 path. A level the CPU lacks is reported as skipped.

use ir::DType;
use ir::interp::{Array, eval_te};
use ir::te::{Tensor, placeholder, placeholder_vec};
use schedules::ops::{Conv2dParams, GemmOperands, Layout, compensation, conv2d_nchw_int8};
use schedules::quant::{PostOp, ZeroPoints};
use schedules::resnet18::{ConvLayer, DenseLayer, Layer, SRC_ZERO_POINT, quantization, uniform};
use schedules::x86_conv::{
    Accumulate, Conv2dInt8Error, Conv2dInt8Knobs, KnobError, Packing, TileOrder, conv2d_int8, dense_int8,
    flat_rows_pixels, prepare_conv2d_int8, prepare_dense_int8, weight_range,
};
use tensorlift::{CompileOptions, IsaLevel, Target, Tensor as RtTensor};

fn knobs(mr: i64, nr: i64, order: TileOrder, accumulation: Accumulate, packing: Packing) -> Conv2dInt8Knobs {
    Conv2dInt8Knobs { mr, nr, lanes: 16, order, threads: 2, packing, accumulation }
}

/// The knob sets every geometry runs with: `mr` above the pixels of every row here (5, 16) and
/// at 1 and 3, every panel width of the tuner (16, 32, 64: above `OC` for most geometries),
/// each accumulation and tile order, both packings, one and two threads, lanes above `OC`.
fn knob_sets() -> Vec<Conv2dInt8Knobs> {
    use Accumulate::{PerRow, PerRowWithSource, Whole};
    use TileOrder::{ChannelsOuter, PixelsOuter};
    vec![
        knobs(5, 32, PixelsOuter, PerRowWithSource, Packing::I16),
        Conv2dInt8Knobs { threads: 1, ..knobs(16, 16, ChannelsOuter, PerRow, Packing::Bytes) },
        Conv2dInt8Knobs { lanes: 256, ..knobs(1, 64, PixelsOuter, Whole, Packing::Bytes) },
        Conv2dInt8Knobs { lanes: 8, threads: 1, ..knobs(3, 16, ChannelsOuter, PerRowWithSource, Packing::I16) },
    ]
}

/// One geometry: an NCHW source `[1, IC, H, W]`, `OC` output channels of a `K × K` kernel.
struct Geometry {
    what: &'static str,
    layer: ConvLayer,
    /// The range the weights are drawn from, its ends included.
    weights: (i8, i8),
}

const fn conv(name: &'static str, ic: i64, oc: i64, (h, w): (i64, i64), k: i64, stride: i64, pad: i64) -> ConvLayer {
    ConvLayer { name, ic, oc, h, w, k, stride, pad }
}

fn geometries() -> [Geometry; 5] {
    [
        // The 2 × 2 output of a 5 × 5 input (rows of 12 bytes: a 5 × 32 × 3 × 12 tile).
        Geometry { what: "5x5 s2 k3", layer: conv("g5", 4, 32, (5, 5), 3, 2, 0), weights: (-127, 127) },
        // A 5 × 5 kernel over a 3 × 3 input padded by 1: one output pixel.
        Geometry { what: "1x1 output", layer: conv("g1", 16, 24, (3, 3), 5, 1, 1), weights: (-128, 127) },
        // Rows of one pixel (OW = 1), four of them.
        Geometry { what: "OW 1", layer: conv("gw", 16, 16, (6, 3), 3, 1, 0), weights: (-64, 63) },
        // 20 output channels: no panel width divides them.
        Geometry { what: "OC 20", layer: conv("gc", 8, 20, (6, 6), 3, 1, 1), weights: (-128, 127) },
        // The stem's 3 input channels, stride 2.
        Geometry { what: "IC 3", layer: conv("gi", 3, 16, (9, 7), 3, 2, 1), weights: (-127, 127) },
    ]
}

/// `values` of an NCHW array of `dims` in NHWC order.
fn to_nhwc(values: &[i64], [n, c, h, w]: [i64; 4]) -> Vec<i64> {
    let mut out = Vec::with_capacity(values.len());
    for b in 0..n {
        for y in 0..h {
            for x in 0..w {
                out.extend((0..c).map(|ch| values[(((b * c + ch) * h + y) * w + x) as usize]));
            }
        }
    }
    out
}

/// Builds and runs `prep` (weights → packed weights, compensation) at `options`.
fn prepare(prep: &schedules::x86_conv::Conv2dInt8Prepare, weights: &Array, options: &CompileOptions) -> [RtTensor; 2] {
    let args: Vec<&Tensor> = prep.args.iter().collect();
    let kernel = tensorlift::build(&prep.schedule, &args, "prep", options).unwrap();
    let wei = Array::from_i64(DType::I8, prep.args[0].shape(), &weights.to_i64_vec());
    let mut tensors = [
        RtTensor::from_array(&wei),
        RtTensor::zeros(prep.packed_weights.dtype(), prep.packed_weights.shape()).unwrap(),
        RtTensor::zeros(DType::I32, prep.compensation.compensation.shape()).unwrap(),
    ];
    kernel.compiled.call(&mut tensors.iter_mut().collect::<Vec<_>>()).unwrap();
    let [_, packed, compensation] = tensors;
    [packed, compensation]
}

/// The compiled per-call function `f` on `src` (in its layout), `bias` and the prepared weights:
/// its output.
fn run(
    f: &schedules::x86_conv::Conv2dInt8,
    src: &Array,
    bias: &Array,
    sum: Option<&Array>,
    prepared: [RtTensor; 2],
    options: &CompileOptions,
) -> Array {
    let args: Vec<&Tensor> = f.args.iter().collect();
    let kernel = tensorlift::build(&f.schedule, &args, "conv", options).unwrap();
    let [packed, compensation] = prepared;
    let mut tensors = vec![RtTensor::from_array(src), packed, compensation];
    tensors.push(RtTensor::from_array(bias));
    tensors.extend(sum.map(RtTensor::from_array));
    tensors.extend(f.layer.params.iter().map(|p| RtTensor::from_array(&p.values)));
    tensors.push(RtTensor::zeros(DType::U8, f.layer.output.shape()).unwrap());
    kernel.compiled.call(&mut tensors.iter_mut().collect::<Vec<_>>()).unwrap();
    tensors.pop().unwrap().to_array()
}

/// The output must exercise the requantization: not all of it at the ends of u8.
fn assert_exercised(what: &str, out: &[i64]) {
    let inside = out.iter().filter(|&&v| v != 0 && v != 255).count();
    assert!(2 * inside >= out.len(), "{what}: only {inside} of {} outputs inside (0, 255)", out.len());
}

#[test]
fn conv2d_int8_matches_the_interpreter_on_small_geometries_with_any_knobs() {
    let levels = crate::skip::levels_here_for(IsaLevel::ALL, "x86_conv on small geometries");
    let geometries = geometries();
    let checked = check_geometries(&geometries, 7000, &knob_sets(), &levels);
    assert_eq!(checked, 5 * knob_sets().len() * levels.len());
}

/// Geometries of flat rows (`Accumulate::FlatRows`): where they apply (stride 1, a 1×1 kernel
/// at stride 1 and 2, odd sizes, 16 to 64 channels) and where they fall back to `Whole` (a 3×3
/// kernel at stride 2, kernel rows of 3 channels padded to 12 bytes).
fn flat_geometries() -> [Geometry; 6] {
    [
        Geometry { what: "flat 3x3 s1 p1", layer: conv("f3", 16, 32, (5, 6), 3, 1, 1), weights: (-127, 127) },
        Geometry { what: "flat 1x1 s1", layer: conv("f1", 32, 16, (4, 5), 1, 1, 0), weights: (-128, 127) },
        Geometry { what: "flat 1x1 s2", layer: conv("f2", 64, 16, (7, 7), 1, 2, 0), weights: (-127, 127) },
        Geometry { what: "flat 3x3 s1 p0 odd", layer: conv("fo", 4, 20, (5, 7), 3, 1, 0), weights: (-64, 63) },
        Geometry { what: "flat 3x3 s2 falls back", layer: conv("fs", 16, 16, (7, 7), 3, 2, 1), weights: (-127, 127) },
        Geometry { what: "flat IC 3 falls back", layer: conv("fi", 3, 16, (5, 5), 3, 1, 1), weights: (-127, 127) },
    ]
}

#[test]
fn flat_rows_match_the_interpreter_on_small_geometries() {
    use TileOrder::{ChannelsOuter, PixelsOuter};
    let levels = crate::skip::levels_here_for(IsaLevel::ALL, "x86_conv flat rows on small geometries");
    let flat = |mr, nr, order, packing| knobs(mr, nr, order, Accumulate::FlatRows, packing);
    // Tiles that end within a row, span rows, leave a partial tile, and above all the pixels.
    let knob_sets = vec![
        flat(16, 16, PixelsOuter, Packing::I16),
        Conv2dInt8Knobs { threads: 1, ..flat(64, 32, ChannelsOuter, Packing::Bytes) },
        Conv2dInt8Knobs { threads: 1, ..flat(5, 64, PixelsOuter, Packing::I16) },
        flat(7, 16, ChannelsOuter, Packing::Bytes),
    ];
    let geometries = flat_geometries();
    // Where they apply, the 1×1 kernels at stride 1 and 2, odd sizes and 3×3 kernels with kernel
    // rows of KW·IC bytes.
    let applies: Vec<bool> = geometries.iter().map(|g| flat_rows_pixels(&g.layer).is_some()).collect();
    assert_eq!(applies, [true, true, true, true, false, false]);
    let checked = check_geometries(&geometries, 9000, &knob_sets, &levels);
    assert_eq!(checked, geometries.len() * knob_sets.len() * levels.len());
}

/// Geometries of gathered rows (`Accumulate::Im2col`, `Im2colTiles`): the stem's (3 channels,
/// 7×7 at stride 2, pad 3) on a small image, and 1, 3 and 5 input channels under 3×3, 5×5 and
/// 7×7 kernels at stride 1 and 2 with and without padding, `OC` not a multiple of `nr`.
fn im2col_geometries() -> [Geometry; 6] {
    [
        Geometry { what: "stem 7x7 s2 p3", layer: conv("i7", 3, 64, (15, 13), 7, 2, 3), weights: (-128, 127) },
        Geometry { what: "IC 1 5x5 s1 p2", layer: conv("i1", 1, 16, (6, 9), 5, 1, 2), weights: (-127, 127) },
        Geometry { what: "IC 5 3x3 s2 p1", layer: conv("i5", 5, 32, (9, 8), 3, 2, 1), weights: (-64, 63) },
        Geometry { what: "IC 3 3x3 s1 p0", layer: conv("i3", 3, 16, (5, 7), 3, 1, 0), weights: (-127, 127) },
        Geometry { what: "IC 5 7x7 s1 p3 OC 20", layer: conv("io", 5, 20, (8, 7), 7, 1, 3), weights: (-128, 127) },
        Geometry { what: "IC 1 3x3 s2 p0", layer: conv("is", 1, 16, (9, 11), 3, 2, 0), weights: (-128, 127) },
    ]
}

#[test]
fn gathered_rows_match_the_interpreter_on_small_geometries() {
    use Accumulate::{Im2col, Im2colTiles};
    use TileOrder::{ChannelsOuter, PixelsOuter};
    let levels = crate::skip::levels_here_for(IsaLevel::ALL, "x86_conv gathered rows on small geometries");
    // Both reduction lengths, tiles within and above a row, both orders and packings, one and
    // two threads.
    let knob_sets = vec![
        knobs(16, 64, PixelsOuter, Im2colTiles, Packing::I16),
        Conv2dInt8Knobs { threads: 1, ..knobs(3, 16, ChannelsOuter, Im2col, Packing::Bytes) },
        Conv2dInt8Knobs { threads: 1, ..knobs(64, 32, PixelsOuter, Im2colTiles, Packing::Bytes) },
        knobs(5, 16, ChannelsOuter, Im2col, Packing::I16),
    ];
    let geometries = im2col_geometries();
    let checked = check_geometries(&geometries, 11000, &knob_sets, &levels);
    assert_eq!(checked, geometries.len() * knob_sets.len() * levels.len());
    // The stem's reduction: 7 kernel rows of 21 bytes padded to 24, end to end (168), or
    // rounded up to 192 (three AMX k chunks, no tail).
    let stem = im2col_geometries()[0].layer;
    let k =
        |accumulation| Conv2dInt8Knobs { accumulation, ..knob_sets[0] }.gemm_k(stem.ic, stem.k, stem.k, stem.stride);
    assert_eq!((k(Im2col), k(Im2colTiles), k(Accumulate::PerRow)), (168, 192, 168));
}

/// Geometries of space to depth (`Accumulate::SpaceToDepth`): the stem's (3 channels, 7×7 at
/// stride 2, pad 3) on a small image, 1, 3 and 5 input channels under 3×3, 5×5 and 7×7 kernels
/// at stride 2 and 3 with and without padding, a size the stride does not divide, `OC` not a
/// multiple of `nr`; and where it does not apply (stride 1, a 1×1 kernel at stride 2).
fn space_to_depth_geometries() -> [Geometry; 8] {
    [
        Geometry { what: "stem 7x7 s2 p3", layer: conv("d7", 3, 64, (15, 13), 7, 2, 3), weights: (-128, 127) },
        Geometry { what: "IC 1 5x5 s2 p2", layer: conv("d1", 1, 16, (10, 9), 5, 2, 2), weights: (-127, 127) },
        Geometry { what: "IC 5 3x3 s2 p1", layer: conv("d5", 5, 32, (9, 8), 3, 2, 1), weights: (-64, 63) },
        Geometry { what: "IC 3 5x5 s3 p0", layer: conv("d3", 3, 16, (11, 13), 5, 3, 0), weights: (-127, 127) },
        Geometry { what: "IC 5 7x7 s2 p1 OC 20", layer: conv("do", 5, 20, (12, 11), 7, 2, 1), weights: (-128, 127) },
        Geometry { what: "IC 1 3x3 s3 p1", layer: conv("ds", 1, 16, (9, 11), 3, 3, 1), weights: (-128, 127) },
        Geometry { what: "stride 1 as per row", layer: conv("dp", 3, 16, (6, 7), 3, 1, 1), weights: (-127, 127) },
        Geometry { what: "1x1 s2 as per row", layer: conv("dq", 16, 16, (7, 7), 1, 2, 0), weights: (-127, 127) },
    ]
}

#[test]
fn space_to_depth_matches_the_interpreter_on_small_geometries() {
    use Accumulate::SpaceToDepth;
    use TileOrder::{ChannelsOuter, PixelsOuter};
    let levels = crate::skip::levels_here_for(IsaLevel::ALL, "x86_conv space to depth on small geometries");
    // Tiles within and above a row, both orders and packings, one and two threads.
    let knob_sets = vec![
        knobs(16, 64, PixelsOuter, SpaceToDepth, Packing::I16),
        Conv2dInt8Knobs { threads: 1, ..knobs(3, 16, ChannelsOuter, SpaceToDepth, Packing::Bytes) },
        Conv2dInt8Knobs { threads: 1, ..knobs(64, 32, PixelsOuter, SpaceToDepth, Packing::Bytes) },
        knobs(5, 16, ChannelsOuter, SpaceToDepth, Packing::I16),
    ];
    let geometries = space_to_depth_geometries();
    let applies: Vec<bool> = geometries
        .iter()
        .map(|g| knob_sets[0].space_to_depth(g.layer.stride, g.layer.k, g.layer.k).is_some())
        .collect();
    assert_eq!(applies, [true, true, true, true, true, true, false, false]);
    let checked = check_geometries(&geometries, 13000, &knob_sets, &levels);
    assert_eq!(checked, geometries.len() * knob_sets.len() * levels.len());
    // The stem's reduction: 4 kernel rows of 4 pixels × 12 channels (48 bytes), where in place
    // it is 7 rows of 21 bytes padded to 24.
    let stem = geometries[0].layer;
    let k =
        |accumulation| Conv2dInt8Knobs { accumulation, ..knob_sets[0] }.gemm_k(stem.ic, stem.k, stem.k, stem.stride);
    assert_eq!((k(SpaceToDepth), k(Accumulate::PerRow)), (192, 168));
}

/// Geometries whose output rows no usual tile height divides: 13 and 7 pixels (resnet-18's
/// layer 4 is 7 × 7), and 6 of a stride-2 layer whose 20 channels no panel width divides.
fn tail_geometries() -> [Geometry; 3] {
    [
        Geometry { what: "OW 13", layer: conv("t13", 16, 32, (13, 13), 3, 1, 1), weights: (-127, 127) },
        Geometry { what: "OW 7", layer: conv("t7", 32, 16, (7, 7), 3, 1, 1), weights: (-128, 127) },
        Geometry { what: "OW 6 s2 OC 20", layer: conv("t6", 8, 20, (11, 11), 3, 2, 1), weights: (-64, 63) },
    ]
}

#[test]
fn partial_tiles_call_kernels_of_their_height_and_match_the_interpreter() {
    use Accumulate::{FlatRows, PerRow, PerRowWithSource, Whole};
    use TileOrder::{ChannelsOuter, PixelsOuter};
    let levels = crate::skip::levels_here_for(IsaLevel::ALL, "x86_conv partial tiles");
    // Heights leaving 1 to 4 rows, each accumulation, both orders and packings, one and two
    // threads.
    let knob_sets = vec![
        knobs(5, 16, PixelsOuter, PerRow, Packing::I16),
        Conv2dInt8Knobs { threads: 1, ..knobs(4, 32, ChannelsOuter, PerRowWithSource, Packing::Bytes) },
        knobs(9, 16, ChannelsOuter, Whole, Packing::Bytes),
        Conv2dInt8Knobs { threads: 1, ..knobs(11, 16, PixelsOuter, FlatRows, Packing::I16) },
    ];
    let geometries = tail_geometries();
    let mut checked = 0;
    for (v, (src, sum)) in [(DType::U8, false), (DType::I8, true), (DType::U8, true)].into_iter().enumerate() {
        let variant = Variant { src, sum };
        checked += check_geometries_of(&geometries, 15000 + 100 * v as u64, &knob_sets, &levels, variant);
    }
    assert_eq!(checked, 3 * geometries.len() * knob_sets.len() * levels.len());
}

/// Checks each of `geometries` with each of `knob_sets` at each of `levels` against the
/// interpreter (both layouts, alternating), with the tile the knobs give; the checks made.
fn check_geometries(geometries: &[Geometry], seed: u64, knob_sets: &[Conv2dInt8Knobs], levels: &[IsaLevel]) -> usize {
    check_geometries_of(geometries, seed, knob_sets, levels, Variant { src: DType::U8, sum: false })
}

/// The source's dtype (an i8 source holds the u8 values shifted by -128, its zero point too,
/// so that it represents the same values) and whether a residual sum (`PostOp::Sum`, a u8 sum
/// input) follows the convolution.
#[derive(Clone, Copy, Debug)]
struct Variant {
    src: DType,
    sum: bool,
}

/// `check_geometries` with the source and post-op of `variant`.
fn check_geometries_of(
    geometries: &[Geometry],
    seed: u64,
    knob_sets: &[Conv2dInt8Knobs],
    levels: &[IsaLevel],
    variant: Variant,
) -> usize {
    let mut checked = 0;
    for (g, geometry) in geometries.iter().enumerate() {
        let l = geometry.layer;
        let seed = seed + 10 * g as u64;
        let mut quant = quantization(Layer::Conv(l), seed).unwrap();
        let shift = if variant.src == DType::I8 { 128 } else { 0 };
        quant.attrs.src.zero_points =
            ZeroPoints::per_tensor("src zero point", SRC_ZERO_POINT - shift as i32, variant.src).unwrap();
        if variant.sum {
            quant.attrs.post_ops.push(PostOp::Sum { scale: 0.5, zero_point: 100 });
        }
        let src_dims = [1, l.ic, l.h, l.w];
        let out_dims = [1, l.oc, l.oh(), l.ow()];
        let params = Conv2dParams { stride: l.stride, pad: l.pad };
        let src = placeholder(src_dims, variant.src, "src").unwrap();
        let wei = placeholder([l.oc, l.ic, l.k, l.k], DType::I8, "wei").unwrap();
        let bias = placeholder([l.oc], DType::F32, "bias").unwrap();
        let sum = placeholder(out_dims, DType::U8, "sum").unwrap();
        let sum_v = uniform(out_dims.iter().product::<i64>() as usize, seed + 5, 0, 255);
        let sum_a = Array::from_i64(DType::U8, &out_dims, &sum_v);
        let src_v: Vec<i64> =
            uniform(src_dims.iter().product::<i64>() as usize, seed, 0, 255).iter().map(|v| v - shift).collect();
        let (lo, hi) = geometry.weights;
        let mut wei_v = uniform((l.oc * l.ic * l.k * l.k) as usize, seed + 1, lo.into(), hi.into());
        let last = wei_v.len() - 1;
        (wei_v[0], wei_v[last]) = (lo.into(), hi.into());
        let (src_a, wei_a) =
            (Array::from_i64(variant.src, &src_dims, &src_v), Array::from_i64(DType::I8, wei.shape(), &wei_v));
        let bias_a =
            Array::from_f64(DType::F32, &[l.oc], &quant.bias.iter().map(|&b| f64::from(b)).collect::<Vec<_>>());

        // The reference: the definition and its compensation, interpreted.
        let sum_input = variant.sum.then_some(&sum);
        let def = conv2d_nchw_int8(&src, &wei, Some(&bias), sum_input, params, &quant.attrs, "ref").unwrap();
        let prep = compensation(&wei, variant.src, &quant.attrs.src.zero_points, "ref.prep").unwrap();
        let comp = eval_te(&[&prep.compensation], &[(&wei, &wei_a)]).unwrap().remove(0);
        let mut inputs = vec![(&src, &src_a), (&wei, &wei_a), (&def.compensation, &comp), (&bias, &bias_a)];
        if variant.sum {
            inputs.push((&sum, &sum_a));
        }
        inputs.extend(def.params.iter().map(|p| (&p.tensor, &p.values)));
        let want = eval_te(&[&def.output], &inputs).unwrap().remove(0).to_i64_vec();
        assert_exercised(geometry.what, &want);

        for (k, &knobs) in knob_sets.iter().enumerate() {
            // Both layouts, alternating, so that each geometry meets each.
            let layout = if (g + k) % 2 == 0 { Layout::Nhwc } else { Layout::Nchw };
            let src_x = placeholder(layout.shape(src_dims), variant.src, "src").unwrap();
            let src_x_v = if layout == Layout::Nhwc { to_nhwc(&src_v, src_dims) } else { src_v.clone() };
            let src_x_a = Array::from_i64(variant.src, src_x.shape(), &src_x_v);
            let sum_x = placeholder(layout.shape(out_dims), DType::U8, "sum").unwrap();
            let sum_x_v = if layout == Layout::Nhwc { to_nhwc(&sum_v, out_dims) } else { sum_v.clone() };
            let sum_x_a = variant.sum.then(|| Array::from_i64(DType::U8, sum_x.shape(), &sum_x_v));
            let want = if layout == Layout::Nhwc { to_nhwc(&want, out_dims) } else { want.clone() };
            for &level in levels {
                let what = format!("{} ({l:?}) {layout:?} at {level}: {knobs:?}", geometry.what);
                let operands = knobs.operands(level.has_vnni(), weight_range(wei_v.iter().map(|&w| w as i8)));
                let options =
                    CompileOptions { target: Target::Level(level), threads: Some(knobs.threads), ..Default::default() };
                let zp = &quant.attrs.src.zero_points;
                let prep = prepare_conv2d_int8(&wei, l.stride, variant.src, zp, knobs, operands, "prep").unwrap();
                let sum_input = variant.sum.then_some(&sum_x);
                let attrs = &quant.attrs;
                let f =
                    conv2d_int8(&src_x, &wei, Some(&bias), sum_input, params, attrs, layout, knobs, operands, "conv")
                        .unwrap_or_else(|e| panic!("{what}: {e}"));
                let prepared = prepare(&prep, &wei_a, &options);
                let got = run(&f, &src_x_a, &bias_a, sum_x_a.as_ref(), prepared, &options);
                assert_eq!(got.to_i64_vec(), want, "{what}");
                // A tile never taller than the row (the flat rows where they apply): the
                // micro-kernel of `min(mr, pixels)` rows.
                let flat = flat_rows_pixels(&l).filter(|_| knobs.accumulation == Accumulate::FlatRows);
                assert_eq!(f.layer.flat.is_some(), flat.is_some(), "{what}");
                let ir = ir::lower::lower(&f.schedule, &f.args.iter().collect::<Vec<_>>(), "conv").unwrap().to_string();
                let pixels = flat.unwrap_or(l.ow());
                let tile = format!("gemm_{}x{}x", knobs.mr.min(pixels), knobs.nr);
                assert!(ir.contains(&tile), "{what}: no {tile} call\n{ir}");
                // A partial last tile calls the micro-kernel of its own height.
                let rows_left = pixels % knobs.mr.min(pixels);
                let tail = format!("_i{rows_left}(");
                assert!(rows_left == 0 || ir.contains(&tail), "{what}: no {tail} call\n{ir}");
                // Gathered rows: one segment of all of K, each kernel row of a row of pixels one
                // copy.
                let gathered = matches!(knobs.accumulation, Accumulate::Im2col | Accumulate::Im2colTiles);
                assert_eq!(f.layer.im2col.is_some(), gathered, "{what}");
                if gathered {
                    let k = knobs.gemm_k(l.ic, l.k, l.k, l.stride);
                    let call = format!("{tile}{k}");
                    assert!(ir.contains(&call) && ir.contains("copy_"), "{what}: no {call} or copy call\n{ir}");
                }
                // Space to depth: the GEMM runs the rearranged kernel (`⌈K/s⌉` segments of
                // `s²·IC` channels) over rows copied `s·IC` bytes at a time.
                let block = knobs.space_to_depth(l.stride, l.k, l.k);
                assert_eq!(f.layer.space_to_depth.is_some(), block.is_some(), "{what}");
                if let (Some(s), Some((rows, run))) = (block, &f.layer.space_to_depth) {
                    let (kh, channels) = ((l.k + s - 1) / s, s * s * l.ic);
                    let row = (kh * channels + 3) / 4 * 4;
                    let call = if kh > 1 { format!("{tile}{kh}x{row}") } else { format!("{tile}{row}") };
                    let copy = format!("copy_{}x{run}", rows.shape()[2] / channels);
                    assert_eq!(*run, s * l.ic, "{what}");
                    assert!(ir.contains(&call) && ir.contains(&copy), "{what}: no {call} or {copy} call\n{ir}");
                }
                checked += 1;
            }
        }
    }
    checked
}

#[test]
fn dense_int8_matches_the_interpreter_with_a_tile_taller_than_its_rows() {
    let levels = crate::skip::levels_here_for(IsaLevel::ALL, "x86_conv::dense_int8 with mr above M");
    let layer = DenseLayer { name: "fc", in_features: 40, out_features: 21 };
    let quant = quantization(Layer::Dense(layer), 5).unwrap();
    let m = 2;
    let src = placeholder([m, 40], DType::U8, "src").unwrap();
    let wei = placeholder([21, 40], DType::I8, "wei").unwrap();
    let bias = placeholder([21], DType::F32, "bias").unwrap();
    let src_v = uniform(80, 6, 0, 255);
    let wei_v = uniform(21 * 40, 7, -127, 127);
    let (src_a, wei_a) = (Array::from_i64(DType::U8, &[m, 40], &src_v), Array::from_i64(DType::I8, &[21, 40], &wei_v));
    let bias_a = Array::from_f64(DType::F32, &[21], &quant.bias.iter().map(|&b| f64::from(b)).collect::<Vec<_>>());
    let def = schedules::ops::dense_int8(&src, &wei, Some(&bias), None, &quant.attrs, "ref").unwrap();
    let prep = compensation(&wei, DType::U8, &quant.attrs.src.zero_points, "ref.prep").unwrap();
    let comp = eval_te(&[&prep.compensation], &[(&wei, &wei_a)]).unwrap().remove(0);
    let mut inputs = vec![(&src, &src_a), (&wei, &wei_a), (&def.compensation, &comp), (&bias, &bias_a)];
    inputs.extend(def.params.iter().map(|p| (&p.tensor, &p.values)));
    let want = eval_te(&[&def.output], &inputs).unwrap().remove(0).to_i64_vec();
    assert_exercised("dense", &want);
    for &level in &levels {
        for knobs in [
            knobs(7, 16, TileOrder::PixelsOuter, Accumulate::Whole, Packing::Bytes),
            knobs(16, 64, TileOrder::ChannelsOuter, Accumulate::PerRow, Packing::I16),
        ] {
            let what = format!("dense {m}x40->21 at {level}: {knobs:?}");
            let operands = knobs.operands(level.has_vnni(), weight_range(wei_v.iter().map(|&w| w as i8)));
            let options =
                CompileOptions { target: Target::Level(level), threads: Some(knobs.threads), ..Default::default() };
            let zp = &quant.attrs.src.zero_points;
            let prep = prepare_dense_int8(&wei, DType::U8, zp, knobs, operands, "prep").unwrap();
            let f = dense_int8(&src, &wei, Some(&bias), &quant.attrs, knobs, operands, "fc")
                .unwrap_or_else(|e| panic!("{what}: {e}"));
            let src_x_a = Array::from_i64(DType::U8, f.args[0].shape(), &src_v);
            let got = run(&f, &src_x_a, &bias_a, None, prepare(&prep, &wei_a, &options), &options);
            assert_eq!(got.to_i64_vec(), want, "{what}");
        }
    }
}

/// Knobs outside the ranges the schedule accepts are its typed error in either layout (lanes
/// above `MAX_LANES` included, which an NHWC output does not use), never a silent change.
#[test]
fn knobs_outside_their_ranges_are_typed_errors_in_either_layout() {
    let l = geometries()[0].layer;
    let quant = quantization(Layer::Conv(l), 1).unwrap();
    let wei = placeholder_vec(quant.wei_dims.clone(), DType::I8, "wei").unwrap();
    let bias = placeholder([l.oc], DType::F32, "bias").unwrap();
    let params = Conv2dParams { stride: l.stride, pad: l.pad };
    let good = knob_sets()[0];
    for layout in [Layout::Nchw, Layout::Nhwc] {
        let src = placeholder(layout.shape([1, l.ic, l.h, l.w]), DType::U8, "src").unwrap();
        let build = |knobs: Conv2dInt8Knobs| {
            conv2d_int8(&src, &wei, Some(&bias), None, params, &quant.attrs, layout, knobs, GemmOperands::U8, "conv")
        };
        assert!(build(good).is_ok());
        for (bad, knob, found, expected) in [
            (Conv2dInt8Knobs { lanes: 257, ..good }, "lanes", 257, "1..=256"),
            (Conv2dInt8Knobs { lanes: 0, ..good }, "lanes", 0, "1..=256"),
            (Conv2dInt8Knobs { mr: 0, ..good }, "mr", 0, "at least 1"),
            (Conv2dInt8Knobs { nr: 512, ..good }, "nr", 512, "1..=256"),
            (Conv2dInt8Knobs { threads: 0, ..good }, "threads", 0, "at least 1"),
        ] {
            let expected = KnobError { knob, found, expected: expected.into() };
            assert_eq!(build(bad).unwrap_err(), Conv2dInt8Error::Knob(expected), "{layout:?}");
            let prep = prepare_conv2d_int8(
                &wei,
                l.stride,
                DType::U8,
                &quant.attrs.src.zero_points,
                bad,
                GemmOperands::U8,
                "p",
            );
            assert!(matches!(prep, Err(Conv2dInt8Error::Knob(_))), "{layout:?} {bad:?}");
        }
    }
}
