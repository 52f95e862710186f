//! The resnet-18 int8 convolution layers through `schedules::x86_conv` (direct convolution tensorized
//! into the int8 micro-kernel of the best exact family for this CPU and the weights): compile
//! time, median run time, GOPS (`2·OC·OH·OW·IC·KH·KW / s`) and the percentage of the peak probe
//! of the kernel's method run alternately with the timed calls, each result checked bit for bit
//! against the generic schedule of `ops::conv2d_nchw_int8` (u8 source, i8 weights in
//! [-127, 127], per-channel scales, relu, u8 output).
//!
//! `cargo run --release --example conv_int8 [-- --layers R2,R5 --repeat 20 --threads 1 --mr 6 --nr 64 --order pixels|channels --accumulate whole|per-row|per-row-with-source|flat-rows|im2col|im2col-tiles|space-to-depth --print-ir]`

use std::time::Instant;

use ir::DType;
use ir::interp::Array;
use ir::te::{Tensor, placeholder};
use schedules::generic::default_schedule;
use schedules::ops::{Conv2dParams, Layout, compensation, conv2d_nchw_int8};
use schedules::quant::{PostOp, QuantAttrs, Requantization, Scales, TensorQuant, ZeroPoints};
use schedules::resnet18::{ConvLayer, Layer, layer};
use schedules::x86_conv::{
    Accumulate, Conv2dInt8Knobs, CoreRate, TileOrder, conv2d_int8, default_conv_knobs, prepare_conv2d_int8,
    weight_range,
};
use tensorlift::bench::{time_against_peak, uniform};
use tensorlift::runtime::peak::Probe;
use tensorlift::{CompileOptions, Tensor as RtTensor, build};

/// The layer's quantization attributes: u8 source (zero point 3), per-channel weight scales,
/// relu, u8 destination.
fn attrs(l: &ConvLayer) -> Result<QuantAttrs, Box<dyn std::error::Error>> {
    let wdims = [l.oc, l.ic, l.k, l.k];
    let scales: Vec<f32> = (0..l.oc).map(|o| 0.0004 + 0.00005 * ((o * 7) % 11) as f32).collect();
    Ok(QuantAttrs {
        src: TensorQuant::per_tensor("src", 0.05, 3, DType::U8)?,
        wei_scales: Scales::new("wei", scales, 1, &wdims)?,
        dst: TensorQuant::per_tensor("dst", 0.1, 0, DType::U8)?,
        dst_dtype: DType::U8,
        post_ops: vec![PostOp::Relu],
        requantization: Requantization::OneDnn,
    })
}

fn run_layer(
    l: &ConvLayer,
    knobs: Conv2dInt8Knobs,
    repeat: usize,
    options: &CompileOptions,
) -> Result<(), Box<dyn std::error::Error>> {
    let (src_dims, wdims) = ([1, l.ic, l.h, l.w], [l.oc, l.ic, l.k, l.k]);
    let out_dims = [1, l.oc, l.oh(), l.ow()];
    let conv = Conv2dParams { stride: l.stride, pad: l.pad };
    let a = attrs(l)?;
    let src = placeholder(src_dims, DType::U8, "src")?;
    let wei = placeholder(wdims, DType::I8, "wei")?;
    let bias = placeholder([l.oc], DType::F32, "bias")?;
    let src_a = Array::from_i64(DType::U8, &src_dims, &uniform(src_dims.iter().product::<i64>() as usize, 1, 0, 255));
    let wei_a = Array::from_i64(DType::I8, &wdims, &uniform(wdims.iter().product::<i64>() as usize, 2, -127, 127));
    let operands =
        knobs.operands(options.target.level()?.has_vnni(), weight_range(wei_a.to_i64_vec().iter().map(|&w| w as i8)));
    let bias_v: Vec<f64> = uniform(l.oc as usize, 3, 0, 600).iter().map(|&b| b as f64 * 0.01).collect();
    let bias_a = Array::from_f64(DType::F32, &[l.oc], &bias_v);

    // Weight preparation, once.
    let zp = ZeroPoints::per_tensor("src", 3, DType::U8)?;
    let prep = prepare_conv2d_int8(&wei, l.stride, DType::U8, &zp, knobs, operands, "prep")?;
    let prep_args: Vec<&Tensor> = prep.args.iter().collect();
    let prep_kernel = build(&prep.schedule, &prep_args, "prep", options)?;
    let mut wei_t = RtTensor::from_array(&wei_a);
    let mut packed_t = RtTensor::zeros(prep.packed_weights.dtype(), prep.packed_weights.shape())?;
    let mut comp_t = RtTensor::zeros(DType::I32, &[l.oc])?;
    prep_kernel.compiled.call(&mut [&mut wei_t, &mut packed_t, &mut comp_t])?;

    // The scheduled per-call function.
    let start = Instant::now();
    let f = conv2d_int8(&src, &wei, Some(&bias), None, conv, &a, Layout::Nchw, knobs, operands, l.name)?;
    let args: Vec<&Tensor> = f.args.iter().collect();
    let kernel = build(&f.schedule, &args, l.name, options)?;
    let compile_ms = start.elapsed().as_secs_f64() * 1e3;
    if std::env::args().any(|a| a == "--print-ir") {
        println!("{}", kernel.lowered);
    }
    let mut src_t = RtTensor::from_array(&src_a);
    let mut bias_t = RtTensor::from_array(&bias_a);
    let mut params: Vec<RtTensor> = f.layer.params.iter().map(|p| RtTensor::from_array(&p.values)).collect();
    let mut out_t = RtTensor::zeros(DType::U8, &out_dims)?;
    let mut call = |out: &mut RtTensor| {
        let mut call: Vec<&mut RtTensor> = vec![&mut src_t, &mut packed_t, &mut comp_t, &mut bias_t];
        call.extend(params.iter_mut());
        call.push(out);
        kernel.compiled.call(&mut call)
    };

    // Timed calls, each preceded by a run of the kernel's peak probe of the same length on
    // every thread of the pool.
    let probe = Probe::for_function(&kernel.compiled);
    let workers = kernel.compiled.threads().unwrap_or(1);
    let timing = time_against_peak(probe.as_ref(), workers, repeat, || call(&mut out_t))?;
    let (median_s, peak) = (timing.median_s, timing.peak_gops);

    // The reference: the generic schedule of the plain definition.
    let reference = conv2d_nchw_int8(&src, &wei, Some(&bias), None, conv, &a, "ref")?;
    let mut ref_args: Vec<&Tensor> = vec![&src, &wei, &reference.compensation, &bias];
    ref_args.extend(reference.params.iter().map(|p| &p.tensor));
    ref_args.push(&reference.output);
    let ref_kernel = build(&default_schedule(&[&reference.output]), &ref_args, "ref", options)?;
    // Its own compensation: the x86 one is for the GEMM's source dtype (`operands`).
    let ref_prep = compensation(&wei, DType::U8, &zp, "ref_prep")?;
    let ref_prep_kernel =
        build(&default_schedule(&[&ref_prep.compensation]), &[&wei, &ref_prep.compensation], "ref_prep", options)?;
    let mut ref_comp_t = RtTensor::zeros(DType::I32, &[l.oc])?;
    ref_prep_kernel.compiled.call(&mut [&mut wei_t, &mut ref_comp_t])?;
    let mut ref_params: Vec<RtTensor> = reference.params.iter().map(|p| RtTensor::from_array(&p.values)).collect();
    let mut want = RtTensor::zeros(DType::U8, &out_dims)?;
    let mut ref_call: Vec<&mut RtTensor> = vec![&mut src_t, &mut wei_t, &mut ref_comp_t, &mut bias_t];
    ref_call.extend(ref_params.iter_mut());
    ref_call.push(&mut want);
    ref_kernel.compiled.call(&mut ref_call)?;
    let got = out_t.to_array().to_i64_vec();
    let verified = out_t.to_array().bits_eq(&want.to_array());
    let dull = got.iter().filter(|&&v| v == 0 || v == 255).count() as f64 / got.len() as f64;

    let gops = l.ops() as f64 / median_s / 1e9;
    let pct = peak.map_or("n/a".to_string(), |p| format!("{:.1}%", 100.0 * gops / p));
    let peak_s = peak.map_or("n/a".to_string(), |p| format!("{p:.1}"));
    println!(
        "{:<4} mr={:<2} nr={:<2} {:?} {} threads={workers} verified={verified} (zero/255: {:.0}%) compile {compile_ms:.2} ms  median {:.3} ms  {gops:.1} GOPS  peak {peak_s} GOPS  {pct}",
        l.name,
        knobs.mr,
        knobs.nr,
        knobs.order,
        probe.as_ref().map_or("no kernel".to_string(), |p| p.kind.to_string()),
        100.0 * dull,
        median_s * 1e3
    );
    if !verified {
        return Err(format!("{}: result differs from the generic schedule", l.name).into());
    }
    Ok(())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let flag = |name: &str| args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).cloned();
    let number = |name: &str| flag(name).and_then(|v| v.parse::<i64>().ok());
    let layers = flag("--layers").unwrap_or_else(|| "R2,R5".to_string());
    let repeat = number("--repeat").unwrap_or(20) as usize;
    let threads =
        number("--threads").map_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()), |t| t as usize);
    for name in layers.split(',') {
        let Some(Layer::Conv(l)) = layer(name) else {
            return Err(format!("{name}: not a convolution layer (R1..R11)").into());
        };
        let defaults = default_conv_knobs(&l, CoreRate::FullZmmVnni, threads);
        let knobs = Conv2dInt8Knobs {
            mr: number("--mr").unwrap_or(defaults.mr),
            nr: number("--nr").unwrap_or(defaults.nr),
            lanes: number("--lanes").unwrap_or(defaults.lanes),
            order: match flag("--order").as_deref() {
                Some("pixels") => TileOrder::PixelsOuter,
                Some("channels") => TileOrder::ChannelsOuter,
                _ => defaults.order,
            },
            threads,
            accumulation: match flag("--accumulate").as_deref() {
                Some("whole") => Accumulate::Whole,
                Some("per-row") => Accumulate::PerRow,
                Some("per-row-with-source") => Accumulate::PerRowWithSource,
                Some("flat-rows") => Accumulate::FlatRows,
                Some("im2col") => Accumulate::Im2col,
                Some("im2col-tiles") => Accumulate::Im2colTiles,
                Some("space-to-depth") => Accumulate::SpaceToDepth,
                _ => defaults.accumulation,
            },
            ..defaults
        };
        let options = CompileOptions { threads: Some(knobs.threads), ..CompileOptions::default() };
        run_layer(&l, knobs, repeat, &options)?;
    }
    Ok(())
}
