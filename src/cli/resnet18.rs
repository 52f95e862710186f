//! `tensorlift resnet18`: the resnet-18 int8 layers (R1..R11, FC), each a graph of one quantized
//! partition (`engine::TableGraph`), compiled as the engine compiles a network's partition
//! (`Spec::compile_in`) with the knobs of a tuning record or the defaults, verified against the
//! graph's reference (`run_partition`) and timed against the peak probe of each kernel's method.

use std::error::Error;

use clap::ValueEnum;
use indicatif::{ProgressBar, ProgressStyle};
use schedules::ops::{GemmOperands, Layout};
use schedules::resnet18::{self, Layer};
use schedules::x86_conv::{Conv2dInt8Knobs, default_knobs};
use tensorlift::bench::time_against_peak;
use tensorlift::engine::{EngineError, TableGraph};
use tensorlift::graph::Data;
use tensorlift::isa::KernelVariant;
use tensorlift::kernels::peak::ProbeKind;
use tensorlift::layer::{CompiledQuantized, KernelCache, LayerError, permute_bytes};
use tensorlift::record::{Host, Record, pretuned};
use tensorlift::runtime::peak::Probe;
use tensorlift::tune::record_for;
use tensorlift::{CompileOptions, IsaLevel};

use super::common::{Format, IsaChoice, WeightsChoice, positive, thread_count, user_records};

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
    /// kernels compute in, as layers chained in a network run: the default, like a oneDNN
    /// primitive timed in the memory format it chose) or `nchw` (the source transposed to
    /// channels last and the output back around each call, timed with it).
    #[arg(long, value_enum, default_value_t = LayoutChoice::Nhwc)]
    layout: LayoutChoice,
    /// The weights' range: `full` (s8 in [-127, 127]) or `7bit` ([-64, 63], what onnxruntime's
    /// quantizer gives with reduce_range; `--weights` of scripts/peers likewise). Without VNNI,
    /// 7-bit weights make the vpmaddubsw triple exact.
    #[arg(long, value_enum, default_value_t = WeightsChoice::Full)]
    weights: WeightsChoice,
    #[arg(long, value_enum, default_value_t = Format::Table)]
    format: Format,
    /// Apply the best record of this tuning database (`tune resnet18 --db`) where it has one for
    /// a layer on this CPU; else the repository's pre-tuned database; else the default knobs. A
    /// line that is not a tuning record is ignored with a warning on stderr naming the file and
    /// line (as is a missing file): the run goes on without it (`export resnet18 --db` refuses
    /// such a database).
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

/// The schedule of `layer`: convolutions run `schedules::x86_conv::conv2d_int8` (a direct
/// convolution tensorized into the int8 micro-kernel), the dense layer
/// `schedules::x86_conv::dense_int8` (a 1×1 convolution over a row of pixels on the same path).
fn schedule_name(layer: Layer) -> &'static str {
    match layer {
        Layer::Conv(_) => "x86_conv",
        Layer::Dense(_) => "x86_dense",
    }
}

/// Errors of one layer's run.
#[derive(Debug, thiserror::Error)]
enum RunError {
    #[error(transparent)]
    Layer(#[from] LayerError),
    #[error(transparent)]
    Engine(#[from] EngineError),
}

/// A convolution's source and output in NCHW, transposed to and from the kernel's NHWC.
struct Nchw {
    src: Vec<u8>,
    src_dims: [usize; 4],
    dst: Vec<u8>,
    dst_dims: [usize; 4],
}

/// A layer's buffers: the kernel's (NHWC; FC: rows) and, with `--layout nchw`, the NCHW ones.
struct Buffers {
    src: Vec<u8>,
    dst: Vec<u8>,
    nchw: Option<Nchw>,
}

impl Buffers {
    /// The buffers of `table`, its source stored; NCHW ones for a convolution where `nchw`.
    fn new(table: &TableGraph, nchw: bool) -> Result<Buffers, EngineError> {
        let (src, dst) = (table.src_bytes(), vec![0u8; table.expected_bytes()?.len()]);
        let reference = table.reference()?;
        let (sd, dd) = (table.input.dims(), reference.dims());
        let nchw = match (nchw, table.input.data(), sd.len(), dd.len()) {
            (true, Data::U8(logical), 4, 4) => Some(Nchw {
                src: logical.clone(),
                src_dims: [sd[0], sd[1], sd[2], sd[3]],
                dst: vec![0u8; dst.len()],
                dst_dims: [dd[0], dd[1], dd[2], dd[3]],
            }),
            _ => None,
        };
        Ok(Buffers { src, dst, nchw })
    }

    /// One call of `compiled`; in NCHW, the source transposed to NHWC before and the output
    /// back after (part of the call, timed with it).
    fn call(&mut self, compiled: &CompiledQuantized) -> Result<(), LayerError> {
        match &mut self.nchw {
            Some(n) => {
                permute_bytes(&n.src, n.src_dims, 1, true, &mut self.src);
                compiled.run(&self.src, &mut self.dst)?;
                permute_bytes(&self.dst, n.dst_dims, 1, false, &mut n.dst);
                Ok(())
            }
            None => compiled.run(&self.src, &mut self.dst),
        }
    }

    /// The output in the command's layout.
    fn output(&self) -> &[u8] {
        self.nchw.as_ref().map_or(&self.dst, |n| &n.dst)
    }
}

/// Compiles `table` with `knobs` (a convolution's activations in `layout`), checks its output
/// against the graph's reference and times it against the peak probe.
fn run_layer(
    table: &TableGraph,
    (knobs, layout): (Conv2dInt8Knobs, Layout),
    options: &CompileOptions,
    repeat: usize,
    progress: &ProgressBar,
) -> Result<(LayerReport, GemmOperands), RunError> {
    let layer = table.layer();
    let name = layer.name();
    progress.set_message(format!("{name}: prepare weights, compile"));
    let compiled = table.compile(&KernelCache::new(), Some(knobs), options)?;
    progress.set_message(format!("{name}: reference"));
    let reference = table.reference()?;
    let mut io = Buffers::new(table, layout == Layout::Nchw)?;
    io.call(&compiled)?;
    progress.set_message(format!("{name}: verify against the graph's reference"));
    let verified = match (&io.nchw, reference.data()) {
        (Some(n), Data::U8(logical)) => n.dst == *logical,
        (None, _) => io.dst == table.expected_bytes()?,
        (Some(_), _) => false,
    };
    let output = io.output();
    let saturated = output.iter().filter(|&&v| v == 0 || v == 255).count();
    let saturated_pct = 100.0 * saturated as f64 / output.len().max(1) as f64;

    progress.set_message(format!("{name}: time {repeat} runs"));
    let func = compiled.func();
    let threads = func.threads().unwrap_or(1);
    let probe = Probe::for_function(func);
    let timing = time_against_peak(probe.as_ref(), threads, repeat, || io.call(&compiled))?;
    let report = LayerReport {
        layer: name,
        verified,
        prepare_ms: compiled.prepare_time().as_secs_f64() * 1e3,
        compile_ms: compiled.compile_time().as_secs_f64() * 1e3,
        median_ms: timing.median_s * 1e3,
        runs: timing.runs,
        gops: layer.ops() as f64 / timing.median_s / 1e9,
        peak_gops: timing.peak_gops,
        peak_probe: probe.map(|p| p.kind),
        kernels: func.kernel_variants(),
        isa: func.isa_level(),
        threads,
        saturated_pct,
    };
    Ok((report, compiled.operands()))
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
        (Some(path), false) => user_records(path)?,
        _ => Vec::new(),
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
            "resnet-18 int8 layers, batch 1: u8 src (zp {}) x s8 weights in [{w_lo}, {w_hi}] (per-channel scales) + i32 bias -> u8 (onnxruntime's QLinearConv requantization), relu off",
            resnet18::SRC_ZERO_POINT
        );
        println!("cpu        {} (level {level})", tensorlift::isa::cpu_name());
        let api = match layout {
            Layout::Nchw => "NHWC, the source and output transposed from and to NCHW in each call",
            Layout::Nhwc => "NHWC source and output",
        };
        println!(
            "schedule   each layer a graph of one quantized partition, compiled as `tensorlift run` compiles one: conv: x86_conv (schedules::x86_conv::conv2d_int8, {api}, shown as mr x nr); FC: x86_dense (a 1x1 convolution over a row of pixels); knobs and threads per layer from a tuning record (column tuning: tuned from --db, pretuned from tuning/pretuned.jsonl) or default_knobs (default: no record for this layer on this CPU)"
        );
        println!("reference  run_partition (the graph's reference: the partition evaluated in plain Rust)");
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
    for &layer in &layers {
        progress.set_message(format!("{}: define", layer.name()));
        // Data seeded by the layer's position in the table (`layer::LayerData`): the same layer
        // gets the same data whether it runs alone (`--layer`) or in the table.
        let table = TableGraph::new(layer, weights.bits())?;
        // The knobs of the best usable record for the layer: this run's database, else the
        // pre-tuned one, else the defaults for this level's cores and the threads available.
        let usable = |records: &[Record]| {
            record_for(records, layer, weights.bits(), max_threads, &host).and_then(|r| r.schedule.knobs)
        };
        let (tuning, knobs) = match (usable(&tuned), usable(&pretuned)) {
            (Some(k), _) => ("tuned", k),
            (None, Some(k)) => ("pretuned", k),
            (None, None) => ("default", default_knobs(layer, tensorlift::build::core_rate(level), max_threads)),
        };
        // The kernel family follows from the level and the weights' range (`operands`).
        let layer_options = CompileOptions { threads: Some(knobs.threads), ..options.clone() };
        let (report, operands) = run_layer(&table, (knobs, layout), &layer_options, repeat, &progress)?;
        let schedule = format!("{} {}x{}", schedule_name(layer), knobs.mr, knobs.nr);
        let layout_name = match (layer, layout) {
            (Layer::Dense(_), _) => "nc",
            (Layer::Conv(_), Layout::Nchw) => "nchw",
            (Layer::Conv(_), Layout::Nhwc) => "nhwc",
        };
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
                    "schedule": schedule_name(layer),
                    "knobs": knobs_json(knobs, operands),
                    "kernel": kernel_names(&report.kernels),
                    "weights": weights.bits().name(),
                    "reference": "run_partition",
                    "layout": layout_name,
                    "prepare_ms": report.prepare_ms,
                    "compile_ms": report.compile_ms,
                    "median_ms": report.median_ms,
                    "runs": report.runs,
                    "ops": layer.ops(),
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
