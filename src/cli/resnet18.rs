//! `tensorlift resnet18`: the resnet-18 int8 layers (R1..R11, FC) defined as quantized layers,
//! their weights prepared once, compiled with the x86 schedules, verified against a reference
//! and timed against the peak probe of each kernel's method.

use std::error::Error;
use std::time::Instant;

use clap::ValueEnum;
use indicatif::{ProgressBar, ProgressStyle};
use ir::DType;
use ir::interp::InterpError;
use ir::interp::array::Array;
use ir::interp::te_eval::eval_te;
use ir::te::{Tensor as TeTensor, placeholder, placeholder_vec};
use schedules::generic::default_schedule;
use schedules::ops::{
    Compensation, Conv2dParams, GemmOperands, Layout, QuantizedLayer, compensation, conv2d_nchw_int8, convert_layout,
    dense_int8,
};
use schedules::quant::{QuantAttrs, QuantError};
use schedules::resnet18::{self, Layer};
use schedules::x86_conv::{
    Conv2dInt8Error, Conv2dInt8Knobs, conv2d_int8, default_knobs, prepare_conv2d_int8, prepare_dense_int8, weight_range,
};
use tensorlift::bench::{time_against_peak, uniform};
use tensorlift::isa::KernelVariant;
use tensorlift::kernels::peak::ProbeKind;
use tensorlift::record::{Database, Host, Record, pretuned};
use tensorlift::runtime::BoundArgs;
use tensorlift::runtime::peak::Probe;
use tensorlift::tune::record_for;
use tensorlift::{BuildError, CompileOptions, IsaLevel, RuntimeError, Tensor, build};

use super::common::{Format, IsaChoice, WeightsChoice, positive, thread_count};

#[derive(clap::Args)]
pub struct Args {
    /// Only this layer (R1..R11 or FC); default: all twelve in table order.
    #[arg(long)]
    layer: Option<String>,
    /// Threads for parallel loops (default: one per core).
    #[arg(long, value_parser = thread_count, allow_negative_numbers = true)]
    threads: Option<usize>,
    /// ISA level of the generated code and kernels (`auto`: the best this CPU has, or
    /// TENSORLIFT_ISA when set).
    #[arg(long, value_enum, default_value_t = IsaChoice::Auto)]
    isa: IsaChoice,
    /// Timed runs per layer (the median is reported).
    #[arg(long, default_value_t = 10, value_parser = positive::<usize>, allow_negative_numbers = true)]
    repeat: usize,
    /// Activation layout of the convolutions' source and output: `nhwc` (the layout the x86
    /// schedule computes in, as layers chained in it run: the default, like a oneDNN
    /// primitive timed in the memory format it chose) or `nchw` (transposed to channels
    /// last and back inside the call).
    #[arg(long, value_enum, default_value_t = LayoutChoice::Nhwc)]
    layout: LayoutChoice,
    /// The weights' range: `full` (s8 in [-127, 127], the anchor script's default) or `7bit`
    /// ([-64, 63], what onnxruntime's quantizer gives with reduce_range; the anchor script with
    /// TL_WEIGHT_BITS=7). Without VNNI, 7-bit weights make the vpmaddubsw triple exact.
    #[arg(long, value_enum, default_value_t = WeightsChoice::Full)]
    weights: WeightsChoice,
    #[arg(long, value_enum, default_value_t = Format::Table)]
    format: Format,
    /// Apply the best record of this tuning database (`tune resnet18 --db`) where it has one for
    /// a layer on this CPU; else the repository's pre-tuned database; else the default knobs.
    #[arg(long)]
    db: Option<std::path::PathBuf>,
    /// Ignore every database: the default knobs for every layer.
    #[arg(long, conflicts_with = "db")]
    no_db: bool,
}

#[derive(Clone, Copy, ValueEnum)]
enum LayoutChoice {
    Nchw,
    Nhwc,
}

impl LayoutChoice {
    fn layout(self) -> Layout {
        match self {
            LayoutChoice::Nchw => Layout::Nchw,
            LayoutChoice::Nhwc => Layout::Nhwc,
        }
    }
}

/// The kernel families a function calls, by name ("none" without a hand-assembled kernel).
fn kernel_names(variants: &[KernelVariant]) -> String {
    if variants.is_empty() { "none".into() } else { variants.iter().map(|v| v.name()).collect::<Vec<_>>().join(",") }
}

/// Errors of the `resnet18` command.
#[derive(Debug, thiserror::Error)]
enum Resnet18Error {
    #[error("unknown layer {found:?}: expected one of {expected}")]
    UnknownLayer { found: String, expected: String },
    #[error("{count} of {total} layer(s) differ from the reference: {failed}")]
    NotVerified { count: usize, total: usize, failed: String },
    #[error(transparent)]
    Quant(#[from] QuantError),
    #[error(transparent)]
    Build(#[from] BuildError),
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
    #[error(transparent)]
    Interp(#[from] InterpError),
    #[error(transparent)]
    Conv(#[from] Conv2dInt8Error),
    #[error(transparent)]
    Te(#[from] ir::TeError),
}

/// One resnet-18 layer as the anchor script (`layers.py`) defines it: u8 source (zero point 128),
/// s8 symmetric weights with per-output-channel scales (drawn from `weights`), a bias, u8
/// output, relu off.
struct LayerCase {
    name: &'static str,
    ops: u64,
    src: TeTensor,
    wei: TeTensor,
    bias: TeTensor,
    attrs: QuantAttrs,
    /// Stride and padding of a convolution; `None` for the dense layer.
    conv: Option<Conv2dParams>,
    /// The definition (`ops::conv2d_nchw_int8` or `ops::dense_int8`).
    def: QuantizedLayer,
    /// The weight preparation of the definition (compensation).
    prep: Compensation,
    inputs: [Array; 3],
}

impl LayerCase {
    fn new(layer: Layer, seed: u64, (w_lo, w_hi): (i8, i8)) -> Result<LayerCase, QuantError> {
        let name = layer.name();
        let (src_dims, wei_dims) = match layer {
            Layer::Conv(c) => (vec![1, c.ic, c.h, c.w], vec![c.oc, c.ic, c.k, c.k]),
            Layer::Dense(d) => (vec![1, d.in_features], vec![d.out_features, d.in_features]),
        };
        let oc = wei_dims[0];
        let src = placeholder_vec(src_dims.clone(), DType::U8, "src")?;
        let wei = placeholder_vec(wei_dims.clone(), DType::I8, "wei")?;
        let bias = placeholder_vec(vec![oc], DType::F32, "bias")?;
        // The anchors' quantization: per-channel weight scales, an s32 bias with scale
        // src_scale · wei_scale[oc], a destination scale spreading the output over u8.
        let quant = resnet18::quantization(layer, seed)?;
        let bias_values: Vec<f64> = quant.bias.iter().map(|&b| f64::from(b)).collect();
        let attrs = quant.attrs;
        let conv = match layer {
            Layer::Conv(c) => Some(Conv2dParams { stride: c.stride, pad: c.pad }),
            Layer::Dense(_) => None,
        };
        let def = match conv {
            Some(conv) => conv2d_nchw_int8(&src, &wei, Some(&bias), None, conv, &attrs, name)?,
            None => dense_int8(&src, &wei, Some(&bias), None, &attrs, name)?,
        };
        let prep = compensation(&wei, DType::U8, &attrs.src.zero_points, &format!("{name}.prep"))?;
        let inputs = [
            Array::from_i64(DType::U8, &src_dims, &uniform(src_dims.iter().product::<i64>() as usize, seed, 0, 255)),
            Array::from_i64(
                DType::I8,
                &wei_dims,
                &uniform(wei_dims.iter().product::<i64>() as usize, seed + 1, w_lo.into(), w_hi.into()),
            ),
            Array::from_f64(DType::F32, &[oc], &bias_values),
        ];
        Ok(LayerCase { name, ops: layer.ops(), src, wei, bias, attrs, conv, def, prep, inputs })
    }

    /// The per-call function's parameters: source, weights, compensation, bias, per-channel
    /// scales, output.
    fn args(&self) -> Vec<&TeTensor> {
        let mut args = vec![&self.src, &self.wei, &self.def.compensation, &self.bias];
        args.extend(self.def.params.iter().map(|p| &p.tensor));
        args.push(&self.def.output);
        args
    }

    /// The output by the tensor-expression interpreter: the weight preparation, then the layer.
    /// The weights' smallest and largest values (what the x86 kernels may rely on).
    fn weight_range(&self) -> (i8, i8) {
        weight_range(self.inputs[1].to_i64_vec().into_iter().map(|w| w as i8))
    }

    fn reference(&self) -> Result<Array, InterpError> {
        let [src, wei, bias] = &self.inputs;
        let comp = eval_te(&[&self.prep.compensation], &[(&self.wei, wei)])?.remove(0);
        let mut inputs = vec![(&self.src, src), (&self.wei, wei), (&self.def.compensation, &comp), (&self.bias, bias)];
        inputs.extend(self.def.params.iter().map(|p| (&p.tensor, &p.values)));
        Ok(eval_te(&[&self.def.output], &inputs)?.remove(0))
    }
}

/// What one layer measured.
struct LayerReport {
    layer: &'static str,
    verified: bool,
    prepare_ms: f64,
    compile_ms: f64,
    median_ms: f64,
    runs: usize,
    gops: f64,
    peak_gops: Option<f64>,
    /// The probe `peak_gops` comes from.
    peak_probe: Option<ProbeKind>,
    /// The kernel families the layer's function calls.
    kernels: Vec<KernelVariant>,
    isa: IsaLevel,
    threads: usize,
    /// Share of output elements that are 0 or 255 (the data must exercise the requantization).
    saturated_pct: f64,
}

impl LayerReport {
    fn pct_peak(&self) -> Option<f64> {
        self.peak_gops.map(|p| 100.0 * self.gops / p)
    }
}

/// How a layer is scheduled (its knobs and the GEMM operands they give here) and what its
/// result is checked against.
#[derive(Clone, Copy)]
enum LayerPlan {
    /// Convolutions: `schedules::x86_conv::conv2d_int8` in the layout (direct convolution
    /// tensorized into the int8 micro-kernel), checked against the generic schedule of
    /// `ops::conv2d_nchw_int8` JIT-compiled (whose equality with the interpreter
    /// `tests/it/quant.rs` checks).
    X86Conv(Conv2dInt8Knobs, GemmOperands, Layout),
    /// The dense layer: `schedules::x86_conv::dense_int8` (a 1×1 convolution over a row of pixels
    /// on the same tensorized path), checked against the tensor-expression interpreter of
    /// `ops::dense_int8`.
    X86Dense(Conv2dInt8Knobs, GemmOperands),
}

impl LayerPlan {
    fn schedule(self) -> &'static str {
        match self {
            LayerPlan::X86Conv(..) => "x86_conv",
            LayerPlan::X86Dense(..) => "x86_dense",
        }
    }

    fn reference(self) -> &'static str {
        match self {
            LayerPlan::X86Conv(..) => "generic-jit",
            LayerPlan::X86Dense(..) => "eval_te",
        }
    }
}

/// A compiled layer with its arguments bound (weights prepared, and checked once where the
/// kernels rely on their range: `CompiledFunc::bind`).
struct CompiledLayer {
    /// Compiling and running the weight preparation.
    prepare_ms: f64,
    kernel: tensorlift::Kernel,
    /// The per-call function's arguments; the output is last.
    args: BoundArgs,
}

impl CompiledLayer {
    fn new(prepare_ms: f64, kernel: tensorlift::Kernel, tensors: Vec<Tensor>) -> Result<CompiledLayer, RuntimeError> {
        let args = kernel.compiled.bind(tensors)?;
        Ok(CompiledLayer { prepare_ms, kernel, args })
    }

    fn call(&mut self) -> Result<(), RuntimeError> {
        self.args.call(&self.kernel.compiled)
    }

    fn output(&self) -> Array {
        self.args.last().map_or_else(|| Array::zeros(DType::U8, &[0]), Tensor::to_array)
    }
}

/// The definition (`ops::conv2d_nchw_int8` or `ops::dense_int8`) under the generic schedule,
/// its compensation prepared by the generic schedule of `ops::compensation`.
fn compile_generic(case: &LayerCase, options: &CompileOptions) -> Result<CompiledLayer, Resnet18Error> {
    let start = Instant::now();
    let prep =
        build(&default_schedule(&[&case.prep.compensation]), &[&case.wei, &case.prep.compensation], "prep", options)?;
    let [src, wei, bias] = &case.inputs;
    let mut wei_t = Tensor::from_array(wei);
    let mut comp_t = Tensor::zeros(DType::I32, case.def.compensation.shape())?;
    prep.compiled.call(&mut [&mut wei_t, &mut comp_t])?;
    let prepare_ms = start.elapsed().as_secs_f64() * 1e3;
    let kernel = build(&default_schedule(&[&case.def.output]), &case.args(), case.name, options)?;
    let mut tensors = vec![Tensor::from_array(src), wei_t, comp_t, Tensor::from_array(bias)];
    tensors.extend(case.def.params.iter().map(|p| Tensor::from_array(&p.values)));
    tensors.push(Tensor::zeros(DType::U8, case.def.output.shape())?);
    Ok(CompiledLayer::new(prepare_ms, kernel, tensors)?)
}

/// `a` (in layout `from`) in layout `to`, by the generic schedule of `ops::convert_layout`.
fn convert_array(a: &Array, from: Layout, to: Layout, options: &CompileOptions) -> Result<Array, Resnet18Error> {
    if from == to {
        return Ok(a.clone());
    }
    let src = placeholder_vec(a.shape().to_vec(), a.dtype(), "src")?;
    let out = convert_layout(&src, from, to, "converted")?;
    let kernel = build(&default_schedule(&[&out]), &[&src, &out], "convert_layout", options)?;
    let mut tensors = [Tensor::from_array(a), Tensor::zeros(out.dtype(), out.shape())?];
    kernel.compiled.call(&mut tensors.iter_mut().collect::<Vec<_>>())?;
    Ok(tensors[1].to_array())
}

/// `x86_conv::conv2d_int8` in `layout` with `knobs` on `operands`, its weights packed by
/// `x86_conv::prepare_conv2d_int8`; the output is kept in `layout` (`CompiledLayer::output`).
fn compile_x86_conv(
    case: &LayerCase,
    conv: Conv2dParams,
    (knobs, operands): (Conv2dInt8Knobs, GemmOperands),
    layout: Layout,
    options: &CompileOptions,
) -> Result<CompiledLayer, Resnet18Error> {
    let start = Instant::now();
    let zero_point = &case.attrs.src.zero_points;
    let prep = prepare_conv2d_int8(&case.wei, DType::U8, zero_point, knobs, operands, &format!("{}.prep", case.name))?;
    let prep_kernel = build(&prep.schedule, &prep.args.iter().collect::<Vec<_>>(), "prep", options)?;
    let [src, wei, bias] = &case.inputs;
    let mut wei_t = Tensor::from_array(wei);
    let mut packed_t = Tensor::zeros(prep.packed_weights.dtype(), prep.packed_weights.shape())?;
    let mut comp_t = Tensor::zeros(DType::I32, prep.compensation.compensation.shape())?;
    prep_kernel.compiled.call(&mut [&mut wei_t, &mut packed_t, &mut comp_t])?;
    let prepare_ms = start.elapsed().as_secs_f64() * 1e3;
    let src_dims: [i64; 4] = case.src.shape().try_into().expect("a convolution source is 4-D");
    let src_te = placeholder(layout.shape(src_dims), case.src.dtype(), case.src.name())?;
    let layer =
        conv2d_int8(&src_te, &case.wei, Some(&case.bias), None, conv, &case.attrs, layout, knobs, operands, case.name)?;
    let kernel = build(&layer.schedule, &layer.args.iter().collect::<Vec<_>>(), case.name, options)?;
    let src = convert_array(src, Layout::Nchw, layout, options)?;
    let mut tensors = vec![Tensor::from_array(&src), packed_t, comp_t, Tensor::from_array(bias)];
    tensors.extend(layer.layer.params.iter().map(|p| Tensor::from_array(&p.values)));
    tensors.push(Tensor::zeros(DType::U8, layer.layer.output.shape())?);
    Ok(CompiledLayer::new(prepare_ms, kernel, tensors)?)
}

/// `x86_conv::dense_int8` with `knobs` on `operands`, its weights packed by
/// `x86_conv::prepare_dense_int8`; the dense arrays are bound as the 4-D arrays of the same bytes
/// that these functions take.
fn compile_x86_dense(
    case: &LayerCase,
    (knobs, operands): (Conv2dInt8Knobs, GemmOperands),
    options: &CompileOptions,
) -> Result<CompiledLayer, Resnet18Error> {
    let start = Instant::now();
    let zero_point = &case.attrs.src.zero_points;
    let prep = prepare_dense_int8(&case.wei, DType::U8, zero_point, knobs, operands, &format!("{}.prep", case.name))?;
    let prep_kernel = build(&prep.schedule, &prep.args.iter().collect::<Vec<_>>(), "prep", options)?;
    let [src, wei, bias] = &case.inputs;
    let as_arg = |a: &Array, t: &TeTensor| Tensor::from_array(&Array::from_i64(a.dtype(), t.shape(), &a.to_i64_vec()));
    let mut wei_t = as_arg(wei, &prep.args[0]);
    let mut packed_t = Tensor::zeros(prep.packed_weights.dtype(), prep.packed_weights.shape())?;
    let mut comp_t = Tensor::zeros(DType::I32, prep.compensation.compensation.shape())?;
    prep_kernel.compiled.call(&mut [&mut wei_t, &mut packed_t, &mut comp_t])?;
    let prepare_ms = start.elapsed().as_secs_f64() * 1e3;
    let layer = schedules::x86_conv::dense_int8(
        &case.src,
        &case.wei,
        Some(&case.bias),
        &case.attrs,
        knobs,
        operands,
        case.name,
    )?;
    let kernel = build(&layer.schedule, &layer.args.iter().collect::<Vec<_>>(), case.name, options)?;
    let mut tensors = vec![as_arg(src, &layer.args[0]), packed_t, comp_t, Tensor::from_array(bias)];
    tensors.extend(layer.layer.params.iter().map(|p| Tensor::from_array(&p.values)));
    tensors.push(Tensor::zeros(DType::U8, layer.layer.output.shape())?);
    Ok(CompiledLayer::new(prepare_ms, kernel, tensors)?)
}

fn run_layer(
    case: &LayerCase,
    plan: LayerPlan,
    options: &CompileOptions,
    repeat: usize,
    progress: &ProgressBar,
) -> Result<LayerReport, Resnet18Error> {
    let name = case.name;
    progress.set_message(format!("{name}: prepare weights, compile"));
    let mut compiled = match (plan, case.conv) {
        (LayerPlan::X86Conv(knobs, operands, layout), Some(conv)) => {
            compile_x86_conv(case, conv, (knobs, operands), layout, options)?
        }
        (LayerPlan::X86Dense(knobs, operands), None) => compile_x86_dense(case, (knobs, operands), options)?,
        _ => compile_generic(case, options)?,
    };
    compiled.call()?;
    // `x86_dense` writes `[1, 1, M, OC]`: the same bytes as the definition's `[M, OC]`.
    let output = match plan {
        LayerPlan::X86Conv(_, _, layout) => convert_array(&compiled.output(), layout, Layout::Nchw, options)?,
        LayerPlan::X86Dense(..) => compiled.output(),
    };
    let output = Array::from_i64(output.dtype(), case.def.output.shape(), &output.to_i64_vec());

    progress.set_message(format!("{name}: verify against {}", plan.reference()));
    let expected = match plan {
        LayerPlan::X86Conv(..) => {
            let mut reference = compile_generic(case, options)?;
            reference.call()?;
            reference.output()
        }
        LayerPlan::X86Dense(..) => case.reference()?,
    };
    let verified = output.bits_eq(&expected);
    let values = output.to_i64_vec();
    let saturated = values.iter().filter(|&&v| v == 0 || v == 255).count();

    progress.set_message(format!("{name}: time {repeat} runs"));
    let threads = compiled.kernel.compiled.threads().unwrap_or(1);
    let probe = Probe::for_function(&compiled.kernel.compiled);
    let timing = time_against_peak(probe.as_ref(), threads, repeat, || compiled.call())?;
    let kernel = &compiled.kernel;
    Ok(LayerReport {
        layer: name,
        verified,
        prepare_ms: compiled.prepare_ms,
        compile_ms: kernel.compile_time().as_secs_f64() * 1e3,
        median_ms: timing.median_s * 1e3,
        runs: timing.runs,
        gops: case.ops as f64 / timing.median_s / 1e9,
        peak_gops: timing.peak_gops,
        peak_probe: probe.map(|p| p.kind),
        kernels: kernel.compiled.kernel_variants(),
        isa: kernel.compiled.isa_level(),
        threads,
        saturated_pct: 100.0 * saturated as f64 / values.len().max(1) as f64,
    })
}

/// The knobs as records spell them, with the GEMM operands they gave here: `gemm_source` (u8,
/// i8 or i16) and `weight_range`, the range declared on the packed weights.
fn knobs_json(knobs: Conv2dInt8Knobs, operands: GemmOperands) -> serde_json::Value {
    let mut json = serde_json::to_value(knobs).expect("knobs serialize");
    json["gemm_source"] = operands.source.to_string().into();
    json["weight_range"] = serde_json::json!([operands.weights.0, operands.weights.1]);
    json
}

pub fn run(args: Args) -> Result<(), Box<dyn Error>> {
    let Args { layer, threads, isa, repeat, layout, weights, format, db, no_db } = args;
    let (target, layout) = (isa.target(), layout.layout());
    let layers = match layer {
        Some(name) => vec![resnet18::layer(&name).ok_or_else(|| Resnet18Error::UnknownLayer {
            found: name,
            expected: resnet18::layers().iter().map(|l| l.name()).collect::<Vec<_>>().join(", "),
        })?],
        None => resnet18::layers(),
    };
    let options = CompileOptions { target, threads, ..CompileOptions::default() };
    // Reported before anything is printed: a level this CPU lacks is an error here.
    let level = target.level()?;
    let tuned = match (&db, no_db) {
        (_, true) => Vec::new(),
        (Some(path), _) => {
            let loaded = Database::load(path)?;
            for e in &loaded.errors {
                eprintln!("{}: skipped: {e}", path.display());
            }
            loaded.records
        }
        (None, _) => Vec::new(),
    };
    let pretuned = if no_db { Vec::new() } else { pretuned()?.records };
    let max_threads = threads.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let host = Host::this(level);
    let progress = ProgressBar::new(layers.len() as u64);
    progress.set_style(
        ProgressStyle::with_template("{bar:24} {pos}/{len} layers  {elapsed}  {msg}").map_err(|e| e.to_string())?,
    );
    if format == Format::Table {
        let (w_lo, w_hi) = weights.bits().range();
        println!(
            "resnet-18 int8 layers, batch 1: u8 src (zp {}) x s8 weights in [{w_lo}, {w_hi}] (per-channel scales) + bias -> u8, relu off",
            resnet18::SRC_ZERO_POINT
        );
        println!("cpu        {} (level {level})", tensorlift::runtime::cpu_name());
        let api = match layout {
            Layout::Nchw => "conv2d_int8, NCHW source and output",
            Layout::Nhwc => "conv2d_int8, NHWC source and output",
        };
        println!(
            "schedule   conv: x86_conv (schedules::x86_conv::{api}, shown as mr x nr); FC: x86_dense (schedules::x86_conv::dense_int8, a 1x1 convolution over a row of pixels); knobs and threads per layer from a tuning record (column tuning: tuned from --db, pretuned from tuning/pretuned.jsonl) or default_knobs (default: no record for this layer on this CPU)"
        );
        println!(
            "reference  conv: generic-jit (the generic schedule of ops::conv2d_nchw_int8, compiled); FC: eval_te (the interpreter)"
        );
        println!(
            "peak       the probe of the method of the layer's kernel (vpdpbusd, the vpmaddubsw triple, sign transfer, vpmaddwd), on every thread of the layer's pool at once, median of runs interleaved with the layer's own"
        );
        println!(
            "{:<5} {:<15} {:<14} {:>8} {:>10} {:>11} {:>10} {:>8} {:>9} {:>7} {:<12} {:>7} {:>6} {:<8}",
            "layer",
            "schedule",
            "kernel",
            "verified",
            "prepare ms",
            "compile ms",
            "median ms",
            "GOPS",
            "peak GOPS",
            "% peak",
            "isa",
            "threads",
            "sat %",
            "tuning"
        );
    }
    let mut reports = Vec::new();
    for (i, &layer) in layers.iter().enumerate() {
        progress.set_message(format!("{}: define", layer.name()));
        // Data seeded by the layer's position in the table: the same layer gets the same data
        // whether it runs alone (`--layer`) or in the table.
        let position = resnet18::layers().iter().position(|l| l.name() == layer.name()).unwrap_or(i);
        let case = LayerCase::new(layer, 1000 * (position as u64 + 1), weights.bits().range())?;
        // The knobs of the best usable record for the layer: this run's database, else the
        // pre-tuned one, else the defaults for this level's cores and the threads available.
        let usable = |records: &[Record]| {
            record_for(records, layer, weights.bits(), max_threads, &host).map(|r| r.schedule.knobs)
        };
        let (tuning, knobs) = match (usable(&tuned), usable(&pretuned)) {
            (Some(k), _) => ("tuned", k),
            (None, Some(k)) => ("pretuned", k),
            (None, None) => ("default", default_knobs(layer, tensorlift::build::core_rate(level), max_threads)),
        };
        // The kernel family follows from the level and the prepared weights' proven range.
        let operands = knobs.operands(level.has_vnni(), case.weight_range());
        let plan = match layer {
            Layer::Conv(_) => LayerPlan::X86Conv(knobs, operands, layout),
            Layer::Dense(_) => LayerPlan::X86Dense(knobs, operands),
        };
        let layer_options = CompileOptions { threads: Some(knobs.threads), ..options.clone() };
        let report = run_layer(&case, plan, &layer_options, repeat, &progress)?;
        let schedule = format!("{} {}x{}", plan.schedule(), knobs.mr, knobs.nr);
        progress.suspend(|| match format {
            Format::Table => {
                let opt = |v: Option<f64>, prec: usize| v.map_or("-".to_string(), |v| format!("{v:.prec$}"));
                println!(
                    "{:<5} {:<15} {:<14} {:>8} {:>10.2} {:>11.2} {:>10.3} {:>8.1} {:>9} {:>7} {:<12} {:>7} {:>6.1} {:<8}",
                    report.layer,
                    schedule,
                    kernel_names(&report.kernels),
                    report.verified,
                    report.prepare_ms,
                    report.compile_ms,
                    report.median_ms,
                    report.gops,
                    opt(report.peak_gops, 1),
                    opt(report.pct_peak(), 1),
                    report.isa.name(),
                    report.threads,
                    report.saturated_pct,
                    tuning
                );
            }
            Format::Json => println!(
                "{}",
                serde_json::json!({
                    "layer": report.layer,
                    "verified": report.verified,
                    "schedule": plan.schedule(),
                    "knobs": knobs_json(knobs, operands),
                    "kernel": kernel_names(&report.kernels),
                    "weights": weights.bits().name(),
                    "reference": plan.reference(),
                    "layout": match plan {
                        LayerPlan::X86Conv(_, _, Layout::Nchw) => "nchw",
                        LayerPlan::X86Conv(_, _, Layout::Nhwc) => "nhwc",
                        LayerPlan::X86Dense(..) => "nc",
                    },
                    "prepare_ms": report.prepare_ms,
                    "compile_ms": report.compile_ms,
                    "median_ms": report.median_ms,
                    "runs": report.runs,
                    "ops": case.ops,
                    "gops": report.gops,
                    "peak_gops": report.peak_gops,
                    "peak_probe": report.peak_probe.map(|p| p.to_string()),
                    "pct_peak": report.pct_peak(),
                    "isa": report.isa.name(),
                    "threads": report.threads,
                    "saturated_pct": report.saturated_pct,
                    "tuning": tuning,
                })
            ),
        });
        progress.inc(1);
        reports.push(report);
    }
    progress.finish_and_clear();
    if format == Format::Table && reports.len() > 1 {
        let total_ms: f64 = reports.iter().map(|r| r.median_ms).sum();
        let total_ops: u64 = layers.iter().map(|l| l.ops()).sum();
        println!(
            "total {:<15} {:>8} {:>10} {:>11} {total_ms:>10.3} {:>8.1}",
            "",
            "",
            "",
            "",
            total_ops as f64 / total_ms / 1e6
        );
    }
    let failed: Vec<&str> = reports.iter().filter(|r| !r.verified).map(|r| r.layer).collect();
    if !failed.is_empty() {
        return Err(Resnet18Error::NotVerified {
            count: failed.len(),
            total: reports.len(),
            failed: failed.join(", "),
        }
        .into());
    }
    Ok(())
}
