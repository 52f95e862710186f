//! The `tensorlift` command line: compile, verify and time operators.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand, ValueEnum};
use indicatif::{ProgressBar, ProgressStyle};
use ir::DType;
use ir::interp::InterpError;
use ir::interp::array::Array;
use ir::interp::te_eval::eval_te;
use ir::te::{Tensor as TeTensor, placeholder, placeholder_in_range, placeholder_vec};
use schedules::cpu::{MatmulKnobs, matmul_tiled};
use schedules::generic::default_schedule;
use schedules::nn::{matmul, matmul_packed, pack_b_vnni};
use schedules::ops::{
    Compensation, Conv2dParams, Layout, QuantizedLayer, compensation, conv2d_nchw_int8, convert_layout, dense_int8,
};
use schedules::quant::{QuantAttrs, QuantError, Scales, TensorQuant};
use schedules::resnet18::{self, Layer};
use schedules::x86::{GemmInt8Knobs, gemm_int8};
use schedules::x86_conv::{
    Conv2dInt8Error, Conv2dInt8Knobs, conv2d_int8, default_dense_knobs, default_knobs, prepare_conv2d_int8,
    prepare_dense_int8, weight_range,
};
use tensorlift::kernels::KernelVariant;
use tensorlift::kernels::peak::{PeakError, Probe, ProbeKind};
use tensorlift::{BuildError, CompileOptions, IsaLevel, RuntimeError, Target, Tensor, build};

#[derive(Parser)]
#[command(name = "tensorlift", version, about = "Tensor-expression compiler with a Cranelift JIT")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Compile an u8 × i8 → i32 matmul, check it against the reference interpreter and time it.
    Matmul {
        #[arg(long, default_value_t = 256)]
        m: i64,
        #[arg(long, default_value_t = 256)]
        n: i64,
        #[arg(long, default_value_t = 256)]
        k: i64,
        #[arg(long, value_enum, default_value_t = ScheduleChoice::Tiled)]
        schedule: ScheduleChoice,
        /// Threads for parallel loops (default: one per core).
        #[arg(long)]
        threads: Option<usize>,
        #[arg(long, default_value_t = 10)]
        repeat: usize,
        /// Print the lowered loop IR.
        #[arg(long)]
        print_ir: bool,
    },
    /// Compile a tensorized u8 × i8 → i32 GEMM (B pre-packed in the VNNI layout), check it
    /// against the reference interpreter and time it against the peak probe of the kernel's
    /// method measured in the same run.
    Gemm {
        #[arg(long)]
        m: i64,
        #[arg(long)]
        n: i64,
        #[arg(long)]
        k: i64,
        /// ISA level of the generated code and kernels (`auto`: the best this CPU has, or
        /// TENSORLIFT_ISA when set).
        #[arg(long, value_enum, default_value_t = IsaChoice::Auto)]
        isa: IsaChoice,
        /// Threads for the parallel row-tile loop (default: one per core).
        #[arg(long)]
        threads: Option<usize>,
        #[arg(long, default_value_t = 20)]
        repeat: usize,
        /// Rows of the micro-kernel tile.
        #[arg(long, default_value_t = GemmInt8Knobs::default().mr)]
        mr: i64,
        /// Columns of the micro-kernel tile and packing panel (default: 32 if it divides N, else 16).
        #[arg(long)]
        nr: Option<i64>,
        /// Declare A's values to lie in 0..=A_MAX (checked on every call); at most 127 lets the
        /// exact GEMM use `vpmaddubsw` on AVX2.
        #[arg(long)]
        a_max: Option<i64>,
        /// Print the disassembly of every function the call runs, kernels included.
        #[arg(long)]
        asm: bool,
        #[arg(long, value_enum, default_value_t = Format::Table)]
        format: Format,
    },
    /// Run the resnet-18 int8 layers (R1..R11, FC): define each quantized layer, prepare its
    /// weights once, compile, verify against a reference and time it against the peak probe of
    /// the kernel's method measured in the same run.
    Resnet18 {
        /// Only this layer (R1..R11 or FC); default: all twelve in table order.
        #[arg(long)]
        layer: Option<String>,
        /// Threads for parallel loops (default: one per core).
        #[arg(long)]
        threads: Option<usize>,
        /// ISA level of the generated code and kernels (`auto`: the best this CPU has, or
        /// TENSORLIFT_ISA when set).
        #[arg(long, value_enum, default_value_t = IsaChoice::Auto)]
        isa: IsaChoice,
        /// Timed runs per layer (the median is reported).
        #[arg(long, default_value_t = 10)]
        repeat: usize,
        /// Activation layout of the convolutions' source and output: `nhwc` (the layout the x86
        /// schedule computes in, as layers chained in it run: the default, like a oneDNN
        /// primitive timed in the memory format it chose) or `nchw` (transposed to channels
        /// last and back inside the call).
        #[arg(long, value_enum, default_value_t = LayoutChoice::Nhwc)]
        layout: LayoutChoice,
        /// The weights' range: `full` (s8 in [-127, 127], layers.py's default) or `7bit` ([-64,
        /// 63], what onnxruntime's quantizer gives with reduce_range; layers.py with
        /// TL_WEIGHT_BITS=7). Without VNNI, 7-bit weights make the vpmaddubsw triple exact.
        #[arg(long, value_enum, default_value_t = WeightsChoice::Full)]
        weights: WeightsChoice,
        #[arg(long, value_enum, default_value_t = Format::Table)]
        format: Format,
    },
    /// Measure this CPU's throughput limit for every int8 dot-product method it has: vpdpbusd
    /// (zmm, ymm), the vpmaddubsw triple, the sign-transfer chain, vpmaddwd + vpaddd.
    Peak {
        #[arg(long, value_enum, default_value_t = Format::Table)]
        format: Format,
    },
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum WeightsChoice {
    Full,
    #[value(name = "7bit")]
    SevenBit,
}

impl WeightsChoice {
    /// The range weights are drawn from.
    fn range(self) -> (i64, i64) {
        let bits = match self {
            WeightsChoice::Full => resnet18::WeightBits::Eight,
            WeightsChoice::SevenBit => resnet18::WeightBits::Seven,
        };
        let (lo, hi) = bits.range();
        (lo.into(), hi.into())
    }

    fn name(self) -> &'static str {
        match self {
            WeightsChoice::Full => "full",
            WeightsChoice::SevenBit => "7bit",
        }
    }
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

#[derive(Clone, Copy, ValueEnum)]
enum IsaChoice {
    Auto,
    Scalar,
    Avx2,
    #[value(name = "avx-vnni")]
    AvxVnni,
    #[value(name = "avx512-vnni")]
    Avx512Vnni,
}

impl IsaChoice {
    fn target(self) -> Target {
        match self {
            IsaChoice::Auto => Target::Native,
            IsaChoice::Scalar => Target::Level(IsaLevel::Scalar),
            IsaChoice::Avx2 => Target::Level(IsaLevel::Avx2),
            IsaChoice::AvxVnni => Target::Level(IsaLevel::AvxVnni),
            IsaChoice::Avx512Vnni => Target::Level(IsaLevel::Avx512Vnni),
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Format {
    Table,
    Json,
}

#[derive(Clone, Copy, ValueEnum)]
enum ScheduleChoice {
    /// The definition's own loop order.
    Naive,
    /// `schedules::cpu::matmul_tiled` with its default knobs.
    Tiled,
}

fn main() -> ExitCode {
    match run(Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> Result<(), Box<dyn std::error::Error>> {
    match cli.command {
        Command::Gemm { m, n, k, isa, threads, repeat, mr, nr, a_max, asm, format } => {
            gemm(GemmArgs { m, n, k, target: isa.target(), threads, repeat, mr, nr, a_max, asm, format })
        }
        Command::Peak { format } => peak(format),
        Command::Resnet18 { layer, threads, isa, repeat, layout, weights, format } => run_resnet18(Resnet18Args {
            layer,
            threads,
            target: isa.target(),
            repeat,
            layout: layout.layout(),
            weights,
            format,
        }),
        Command::Matmul { m, n, k, schedule, threads, repeat, print_ir } => {
            if m <= 0 || n <= 0 || k <= 0 {
                return Err(format!("matmul sizes must be positive, found m={m} n={n} k={k}").into());
            }
            let a = placeholder([m, k], DType::U8, "A")?;
            let b = placeholder([k, n], DType::I8, "B")?;
            let c = schedules::nn::matmul(&a, &b, DType::I32, "C")?;
            let s = match schedule {
                ScheduleChoice::Naive => schedules::generic::default_schedule(&[&c]),
                ScheduleChoice::Tiled => matmul_tiled(&c, MatmulKnobs::default())?,
            };
            let options = CompileOptions { threads, ..CompileOptions::default() };
            let kernel = build(&s, &[&a, &b, &c], "matmul", &options)?;
            if print_ir {
                println!("{}", kernel.lowered);
            }
            let a_data = pattern(DType::U8, &[m, k], 3);
            let b_data = pattern(DType::I8, &[k, n], 5);
            let expected = ir::interp::te_eval::eval_te(&[&c], &[(&a, &a_data), (&b, &b_data)])?.remove(0);
            let (mut ta, mut tb) = (Tensor::from_array(&a_data), Tensor::from_array(&b_data));
            let mut tc = Tensor::zeros(DType::I32, &[m, n]);
            let mut times: Vec<Duration> = Vec::new();
            for _ in 0..repeat.max(1) {
                let start = Instant::now();
                kernel.compiled.call(&mut [&mut ta, &mut tb, &mut tc])?;
                times.push(start.elapsed());
            }
            times.sort();
            let median = times[times.len() / 2];
            let verified = tc.to_array().bits_eq(&expected);
            let gops = 2.0 * (m * n * k) as f64 / median.as_secs_f64() / 1e9;
            println!(
                "matmul {m}x{n}x{k}: verified {verified}, compile {:.2} ms, median {:.3} ms of {}, {gops:.1} GOPS",
                kernel.compile_time().as_secs_f64() * 1e3,
                median.as_secs_f64() * 1e3,
                times.len()
            );
            if !verified {
                return Err("result differs from the reference interpreter".into());
            }
            Ok(())
        }
    }
}

/// Deterministic data spanning the type's whole range.
fn pattern(dtype: DType, shape: &[i64], seed: i64) -> Array {
    let n: i64 = shape.iter().product();
    let values: Vec<i64> = (0..n).map(|i| (i * 7919 + seed * 104_729) ^ (i >> 3)).collect();
    Array::from_i64(dtype, shape, &values)
}

struct GemmArgs {
    m: i64,
    n: i64,
    k: i64,
    target: Target,
    threads: Option<usize>,
    repeat: usize,
    mr: i64,
    nr: Option<i64>,
    a_max: Option<i64>,
    asm: bool,
    format: Format,
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

/// `Bp[jo, ko, ji, ki] = B[ko*4 + ki, jo*nr + ji]` (`nn::pack_b_vnni`), done before timing.
fn pack_b(b: &Array, k: i64, n: i64, nr: i64) -> Array {
    let b = b.to_i64_vec();
    let mut out = vec![0; (k * n) as usize];
    for jo in 0..n / nr {
        for ko in 0..k / 4 {
            for ji in 0..nr {
                for ki in 0..4 {
                    out[(((jo * (k / 4) + ko) * nr + ji) * 4 + ki) as usize] =
                        b[((ko * 4 + ki) * n + jo * nr + ji) as usize];
                }
            }
        }
    }
    Array::from_i64(DType::I8, &[n / nr, k / 4, nr, 4], &out)
}

/// The kernel families a function calls, by name ("none" without a hand-assembled kernel).
fn kernel_names(variants: &[KernelVariant]) -> String {
    if variants.is_empty() { "none".into() } else { variants.iter().map(|v| v.name()).collect::<Vec<_>>().join(",") }
}

/// Medians of `repeat` timed calls and of the peak probe run alternately with them.
struct Timing {
    median_s: f64,
    /// The probe's GOPS summed over the threads (median), when there is a probe.
    peak_gops: Option<f64>,
}

/// Runs `call` once to calibrate, then `repeat` times, each timed call preceded by a run of the
/// peak probe of the same length on each of the `threads` threads of the pool the call uses: the
/// machine is shared, and the ratio of medians taken side by side is what is comparable across
/// runs. (On one thread the probe runs on the calling thread, where the call runs too.)
fn time_against_peak<E: From<RuntimeError>>(
    probe: Option<&Probe>,
    threads: usize,
    repeat: usize,
    mut call: impl FnMut() -> Result<(), E>,
) -> Result<Timing, E> {
    let start = Instant::now();
    call()?;
    let iterations = probe.map(|p| p.calibrate(start.elapsed()));
    let (mut times, mut peaks) = (Vec::new(), Vec::new());
    for _ in 0..repeat.max(1) {
        if let (Some(p), Some(it)) = (probe, iterations) {
            peaks.push(if threads > 1 { p.gops_on_pool(it, threads)? } else { p.gops(it, p.run(it).as_secs_f64()) });
        }
        let start = Instant::now();
        call()?;
        times.push(start.elapsed().as_secs_f64());
    }
    Ok(Timing { median_s: median(times), peak_gops: (!peaks.is_empty()).then(|| median(peaks)) })
}

fn gemm(args: GemmArgs) -> Result<(), Box<dyn std::error::Error>> {
    let GemmArgs { m, n, k, target, threads, repeat, mr, nr, a_max, asm, format } = args;
    if m <= 0 || n <= 0 || k <= 0 {
        return Err(format!("gemm sizes must be positive, found m={m} n={n} k={k}").into());
    }
    let nr = nr.unwrap_or(if n % 32 == 0 { 32 } else { 16 });
    let a = match a_max {
        Some(hi) => placeholder_in_range([m, k], DType::U8, 0..=hi, "A")?,
        None => placeholder([m, k], DType::U8, "A")?,
    };
    let b = placeholder([k, n], DType::I8, "B")?;
    // B arrives packed (a parameter shaped like `pack_b_vnni`'s result): the layout transform
    // is not part of the timed GEMM.
    let packed = pack_b_vnni(&b, nr, "Bp")?;
    let bp_shape: [i64; 4] = packed.shape().try_into().map_err(|_| "pack_b_vnni returns a rank-4 tensor")?;
    let bp = placeholder(bp_shape, DType::I8, "Bp")?;
    let c = matmul_packed(&a, &bp, DType::I32, "C")?;
    let knobs = GemmInt8Knobs { mr, nr, parallel: threads != Some(1) };
    let s = gemm_int8(&c, knobs)?;
    let options = CompileOptions { target, threads, ..CompileOptions::default() };
    let kernel = build(&s, &[&a, &bp, &c], "gemm", &options)?;
    let compiled = &kernel.compiled;

    let a_data = pattern(DType::U8, &[m, k], 3);
    let a_data = match a_max {
        Some(hi) => {
            Array::from_i64(DType::U8, &[m, k], &a_data.to_i64_vec().iter().map(|v| v % (hi + 1)).collect::<Vec<_>>())
        }
        None => a_data,
    };
    let b_data = pattern(DType::I8, &[k, n], 5);
    let plain = matmul(&a, &b, DType::I32, "R")?;
    let expected = ir::interp::te_eval::eval_te(&[&plain], &[(&a, &a_data), (&b, &b_data)])?.remove(0);
    let (mut ta, mut tb) = (Tensor::from_array(&a_data), Tensor::from_array(&pack_b(&b_data, k, n, nr)));
    let mut tc = Tensor::zeros(DType::I32, &[m, n]);
    compiled.call(&mut [&mut ta, &mut tb, &mut tc])?;
    let verified = tc.to_array().bits_eq(&expected);

    let probe = Probe::for_function(compiled);
    let workers = compiled.threads().unwrap_or(1);
    let timing =
        time_against_peak(probe.as_ref(), workers, repeat, || compiled.call(&mut [&mut ta, &mut tb, &mut tc]))?;
    let run = timing.median_s;
    let gops = 2.0 * (m * n * k) as f64 / run / 1e9;
    let peak = timing.peak_gops;
    let kernels: Vec<&str> =
        compiled.machine_code().iter().filter(|c| c.origin != "cranelift").map(|c| c.origin.as_str()).collect();
    let level = compiled.isa_level();
    let compile_ms = kernel.compile_time().as_secs_f64() * 1e3;
    let percent = peak.map(|p| 100.0 * gops / p);
    let probe_name = probe.as_ref().map(|p| p.kind.to_string());
    match format {
        Format::Table => {
            println!(
                "gemm {m}x{n}x{k} u8 x i8 -> i32, B pre-packed (nr {nr}), tiles {mr}x{nr}, isa {level}, {workers} thread(s)"
            );
            println!("verified      {verified} (against eval_te of the plain matmul)");
            println!("compile       {compile_ms:.2} ms");
            println!("run           {:.3} ms (median of {})", run * 1e3, repeat.max(1));
            println!("throughput    {gops:.1} GOPS");
            match (peak, percent, &probe_name) {
                (Some(p), Some(pct), Some(name)) => {
                    println!("peak          {p:.1} GOPS ({name} x {workers} thread(s), median of interleaved runs)");
                    println!("of peak       {pct:.1}%");
                }
                _ => println!("peak          none (no hand-assembled kernel at level {level})"),
            }
            for k in &kernels {
                println!("kernel        {k}");
            }
        }
        Format::Json => {
            let opt = |v: Option<f64>| v.map_or("null".to_string(), |v| format!("{v:.3}"));
            let kernels: Vec<String> = kernels.iter().map(|k| json_string(k)).collect();
            println!(
                "{{\"m\":{m},\"n\":{n},\"k\":{k},\"mr\":{mr},\"nr\":{nr},\"isa\":\"{level}\",\"threads\":{workers},\"verified\":{verified},\"compile_ms\":{compile_ms:.3},\"run_median_ms\":{:.4},\"runs\":{},\"gops\":{gops:.3},\"peak_gops\":{},\"peak_probe\":{},\"percent_of_peak\":{},\"kernels\":[{}]}}",
                run * 1e3,
                repeat.max(1),
                opt(peak),
                probe_name.as_deref().map_or("null".to_string(), json_string),
                opt(percent),
                kernels.join(",")
            );
        }
    }
    if asm {
        print!("{}", compiled.disassembly());
    }
    if !verified {
        return Err("result differs from the reference interpreter".into());
    }
    Ok(())
}

fn json_string(s: &str) -> String {
    let mut out = String::from("\"");
    for ch in s.chars() {
        match ch {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn peak(format: Format) -> Result<(), Box<dyn std::error::Error>> {
    let mut rows = Vec::new();
    for kind in ProbeKind::ALL {
        match Probe::of(kind) {
            Ok(probe) => rows.push((kind, Some(probe.measure(Duration::from_millis(30), 11)))),
            Err(PeakError::Unsupported { .. }) => rows.push((kind, None)),
            Err(other) => return Err(other.into()),
        }
    }
    let cpu = tensorlift::runtime::cpu_name();
    let level = IsaLevel::detect().map_or("none", IsaLevel::name);
    match format {
        Format::Table => {
            println!("int8 dot-product throughput of {cpu} (best level {level}), 1 thread, median of 11 runs");
            for (kind, row) in &rows {
                let name = kind.to_string();
                match row {
                    Some(p) => println!(
                        "{name:<42} {:7.1} GOPS  {:.4} ns per step  ({} chains, {} iterations per run)",
                        p.gops, p.ns_per_step, kind.chains(), p.iterations
                    ),
                    None => println!("{name:<42}  unsupported by this CPU"),
                }
            }
        }
        Format::Json => {
            let probes: Vec<serde_json::Value> = rows
                .iter()
                .map(|(kind, row)| match row {
                    Some(p) => serde_json::json!({
                        "probe": kind.to_string(), "supported": true, "gops": p.gops,
                        "ns_per_step": p.ns_per_step, "chains": kind.chains(), "iterations": p.iterations, "runs": p.runs,
                    }),
                    None => serde_json::json!({"probe": kind.to_string(), "supported": false}),
                })
                .collect();
            println!("{}", serde_json::json!({"cpu": cpu, "level": level, "probes": probes}));
        }
    }
    Ok(())
}

struct Resnet18Args {
    layer: Option<String>,
    threads: Option<usize>,
    target: Target,
    repeat: usize,
    layout: Layout,
    weights: WeightsChoice,
    format: Format,
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

/// The anchors' source quantization (`shared/anchors/layers.py`): u8, scale 0.02, zero point 128.
const SRC_SCALE: f32 = 0.02;
const SRC_ZERO_POINT: i32 = 128;
/// The destination zero point: mid-range, so that (relu off) negative results are not all
/// clamped to 0 — the anchors use 0, which only their timing, not a bit-exact check, can afford.
const DST_ZERO_POINT: i32 = 128;
/// Standard deviations of the uniform source (0..=255 about 128) and weights (-127..=127).
const SRC_STD: f32 = 73.9;
const WEI_STD: f32 = 73.6;
/// The destination scale maps one standard deviation of the real output to this many steps.
const DST_STEPS_PER_STD: f32 = 32.0;

/// Deterministic pseudo-random integers, uniform in `lo..=hi` (a 64-bit LCG's high bits).
fn uniform(len: i64, seed: u64, lo: i64, hi: i64) -> Vec<i64> {
    let mut state = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            state = state.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
            lo + ((state >> 33) % (hi - lo + 1) as u64) as i64
        })
        .collect()
}

/// One resnet-18 layer as `shared/anchors/layers.py` defines it: u8 source (zero point 128),
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
    fn new(layer: Layer, seed: u64, (w_lo, w_hi): (i64, i64)) -> Result<LayerCase, QuantError> {
        let name = layer.name();
        let (src_dims, wei_dims) = match layer {
            Layer::Conv(c) => (vec![1, c.ic, c.h, c.w], vec![c.oc, c.ic, c.k, c.k]),
            Layer::Dense(d) => (vec![1, d.in_features], vec![d.out_features, d.in_features]),
        };
        let (oc, fan_in) = (wei_dims[0], wei_dims[1..].iter().product::<i64>());
        let src = placeholder_vec(src_dims.clone(), DType::U8, "src")?;
        let wei = placeholder_vec(wei_dims.clone(), DType::I8, "wei")?;
        let bias = placeholder_vec(vec![oc], DType::F32, "bias")?;
        let wei_scales: Vec<f32> =
            uniform(oc, seed + 2, 0, 9999).iter().map(|&u| 0.005 + 0.01 * u as f32 / 1e4).collect();
        // The anchors' bias: s32 in -1000..1000 with scale src_scale · wei_scale[oc].
        let bias_values: Vec<f64> = uniform(oc, seed + 3, -1000, 999)
            .iter()
            .zip(&wei_scales)
            .map(|(&b, &s)| (b as f32 * (SRC_SCALE * s)) as f64)
            .collect();
        let mean_scale = wei_scales.iter().sum::<f32>() / oc as f32;
        let output_std = SRC_SCALE * mean_scale * (fan_in as f32).sqrt() * SRC_STD * WEI_STD;
        let attrs = QuantAttrs {
            src: TensorQuant::per_tensor("src", SRC_SCALE, SRC_ZERO_POINT, DType::U8)?,
            wei_scales: Scales::new("weights scales", wei_scales, 1, &wei_dims)?,
            dst: TensorQuant::per_tensor("dst", output_std / DST_STEPS_PER_STD, DST_ZERO_POINT, DType::U8)?,
            dst_dtype: DType::U8,
            post_ops: Vec::new(),
        };
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
            Array::from_i64(DType::U8, &src_dims, &uniform(src_dims.iter().product(), seed, 0, 255)),
            Array::from_i64(DType::I8, &wei_dims, &uniform(wei_dims.iter().product(), seed + 1, w_lo, w_hi)),
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

/// How a layer is scheduled and what its result is checked against.
#[derive(Clone, Copy)]
enum LayerPlan {
    /// Convolutions: `schedules::x86_conv::conv2d_int8` in the layout (direct convolution tensorized into the VNNI micro-kernel), checked against the generic
    /// schedule of `ops::conv2d_nchw_int8` JIT-compiled (whose equality with the interpreter
    /// `tests/it/quant.rs` checks).
    X86Conv(Conv2dInt8Knobs, Layout),
    /// The dense layer: `schedules::x86_conv::dense_int8` (a 1×1 convolution over a row of pixels
    /// on the same tensorized path), checked against the tensor-expression interpreter of
    /// `ops::dense_int8`.
    X86Dense(Conv2dInt8Knobs),
}

impl LayerPlan {
    fn schedule(self) -> &'static str {
        match self {
            LayerPlan::X86Conv(..) => "x86_conv",
            LayerPlan::X86Dense(_) => "x86_dense",
        }
    }

    fn reference(self) -> &'static str {
        match self {
            LayerPlan::X86Conv(..) => "generic-jit",
            LayerPlan::X86Dense(_) => "eval_te",
        }
    }
}

/// A compiled layer with its arguments bound (weights prepared).
struct CompiledLayer {
    /// Compiling and running the weight preparation.
    prepare_ms: f64,
    kernel: tensorlift::Kernel,
    /// The per-call function's arguments; the output is last.
    tensors: Vec<Tensor>,
}

impl CompiledLayer {
    fn call(&mut self) -> Result<(), RuntimeError> {
        self.kernel.compiled.call(&mut self.tensors.iter_mut().collect::<Vec<_>>())
    }

    fn output(&self) -> Array {
        self.tensors.last().map_or_else(|| Array::zeros(DType::U8, &[0]), Tensor::to_array)
    }
}

/// The definition (`ops::conv2d_nchw_int8` or `ops::dense_int8`) under the generic schedule,
/// its compensation prepared by the generic schedule of `ops::compensation`.
fn compile_generic(case: &LayerCase, options: &CompileOptions) -> Result<CompiledLayer, Resnet18Error> {
    let start = Instant::now();
    let prep = build(&default_schedule(&[&case.prep.compensation]), &[&case.wei, &case.prep.compensation], "prep", options)?;
    let [src, wei, bias] = &case.inputs;
    let mut wei_t = Tensor::from_array(wei);
    let mut comp_t = Tensor::zeros(DType::I32, case.def.compensation.shape());
    prep.compiled.call(&mut [&mut wei_t, &mut comp_t])?;
    let prepare_ms = start.elapsed().as_secs_f64() * 1e3;
    let kernel = build(&default_schedule(&[&case.def.output]), &case.args(), case.name, options)?;
    let mut tensors = vec![Tensor::from_array(src), wei_t, comp_t, Tensor::from_array(bias)];
    tensors.extend(case.def.params.iter().map(|p| Tensor::from_array(&p.values)));
    tensors.push(Tensor::zeros(DType::U8, case.def.output.shape()));
    Ok(CompiledLayer { prepare_ms, kernel, tensors })
}

/// `a` (in layout `from`) in layout `to`, by the generic schedule of `ops::convert_layout`.
fn convert_array(a: &Array, from: Layout, to: Layout, options: &CompileOptions) -> Result<Array, Resnet18Error> {
    if from == to {
        return Ok(a.clone());
    }
    let src = placeholder_vec(a.shape().to_vec(), a.dtype(), "src")?;
    let out = convert_layout(&src, from, to, "converted")?;
    let kernel = build(&default_schedule(&[&out]), &[&src, &out], "convert_layout", options)?;
    let mut tensors = [Tensor::from_array(a), Tensor::zeros(out.dtype(), out.shape())];
    kernel.compiled.call(&mut tensors.iter_mut().collect::<Vec<_>>())?;
    Ok(tensors[1].to_array())
}

/// `x86_conv::conv2d_int8` in `layout` with `knobs`, its weights packed by
/// `x86_conv::prepare_conv2d_int8`; the output is kept in `layout` (`CompiledLayer::output`).
fn compile_x86_conv(
    case: &LayerCase,
    conv: Conv2dParams,
    knobs: Conv2dInt8Knobs,
    layout: Layout,
    options: &CompileOptions,
) -> Result<CompiledLayer, Resnet18Error> {
    let start = Instant::now();
    let prep = prepare_conv2d_int8(&case.wei, DType::U8, &case.attrs.src.zero_points, knobs, &format!("{}.prep", case.name))?;
    let prep_kernel = build(&prep.schedule, &prep.args.iter().collect::<Vec<_>>(), "prep", options)?;
    let [src, wei, bias] = &case.inputs;
    let mut wei_t = Tensor::from_array(wei);
    let mut packed_t = Tensor::zeros(DType::I8, prep.packed_weights.shape());
    let mut comp_t = Tensor::zeros(DType::I32, prep.compensation.compensation.shape());
    prep_kernel.compiled.call(&mut [&mut wei_t, &mut packed_t, &mut comp_t])?;
    let prepare_ms = start.elapsed().as_secs_f64() * 1e3;
    let src_dims: [i64; 4] = case.src.shape().try_into().expect("a convolution source is 4-D");
    let src_te = placeholder(layout.shape(src_dims), case.src.dtype(), case.src.name())?;
    let layer = conv2d_int8(&src_te, &case.wei, Some(&case.bias), None, conv, &case.attrs, layout, knobs, case.name)?;
    let kernel = build(&layer.schedule, &layer.args.iter().collect::<Vec<_>>(), case.name, options)?;
    let src = convert_array(src, Layout::Nchw, layout, options)?;
    let mut tensors = vec![Tensor::from_array(&src), packed_t, comp_t, Tensor::from_array(bias)];
    tensors.extend(layer.layer.params.iter().map(|p| Tensor::from_array(&p.values)));
    tensors.push(Tensor::zeros(DType::U8, layer.layer.output.shape()));
    Ok(CompiledLayer { prepare_ms, kernel, tensors })
}

/// `x86_conv::dense_int8` with `knobs`, its weights packed by `x86_conv::prepare_dense_int8`; the
/// dense arrays are bound as the 4-D arrays of the same bytes that these functions take.
fn compile_x86_dense(
    case: &LayerCase,
    knobs: Conv2dInt8Knobs,
    options: &CompileOptions,
) -> Result<CompiledLayer, Resnet18Error> {
    let start = Instant::now();
    let zero_point = &case.attrs.src.zero_points;
    let prep = prepare_dense_int8(&case.wei, DType::U8, zero_point, knobs, &format!("{}.prep", case.name))?;
    let prep_kernel = build(&prep.schedule, &prep.args.iter().collect::<Vec<_>>(), "prep", options)?;
    let [src, wei, bias] = &case.inputs;
    let as_arg = |a: &Array, t: &TeTensor| Tensor::from_array(&Array::from_i64(a.dtype(), t.shape(), &a.to_i64_vec()));
    let mut wei_t = as_arg(wei, &prep.args[0]);
    let mut packed_t = Tensor::zeros(DType::I8, prep.packed_weights.shape());
    let mut comp_t = Tensor::zeros(DType::I32, prep.compensation.compensation.shape());
    prep_kernel.compiled.call(&mut [&mut wei_t, &mut packed_t, &mut comp_t])?;
    let prepare_ms = start.elapsed().as_secs_f64() * 1e3;
    let layer = schedules::x86_conv::dense_int8(&case.src, &case.wei, Some(&case.bias), &case.attrs, knobs, case.name)?;
    let kernel = build(&layer.schedule, &layer.args.iter().collect::<Vec<_>>(), case.name, options)?;
    let mut tensors = vec![as_arg(src, &layer.args[0]), packed_t, comp_t, Tensor::from_array(bias)];
    tensors.extend(layer.layer.params.iter().map(|p| Tensor::from_array(&p.values)));
    tensors.push(Tensor::zeros(DType::U8, layer.layer.output.shape()));
    Ok(CompiledLayer { prepare_ms, kernel, tensors })
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
        (LayerPlan::X86Conv(knobs, layout), Some(conv)) => compile_x86_conv(case, conv, knobs, layout, options)?,
        (LayerPlan::X86Dense(knobs), None) => compile_x86_dense(case, knobs, options)?,
        _ => compile_generic(case, options)?,
    };
    compiled.call()?;
    // `x86_dense` writes `[1, 1, M, OC]`: the same bytes as the definition's `[M, OC]`.
    let output = match plan {
        LayerPlan::X86Conv(_, layout) => convert_array(&compiled.output(), layout, Layout::Nchw, options)?,
        LayerPlan::X86Dense(_) => compiled.output(),
    };
    let output = Array::from_i64(output.dtype(), case.def.output.shape(), &output.to_i64_vec());

    progress.set_message(format!("{name}: verify against {}", plan.reference()));
    let expected = match plan {
        LayerPlan::X86Conv(..) => {
            let mut reference = compile_generic(case, options)?;
            reference.call()?;
            reference.output()
        }
        LayerPlan::X86Dense(_) => case.reference()?,
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
        runs: repeat.max(1),
        gops: case.ops as f64 / timing.median_s / 1e9,
        peak_gops: timing.peak_gops,
        peak_probe: probe.map(|p| p.kind),
        kernels: kernel.compiled.kernel_variants(),
        isa: kernel.compiled.isa_level(),
        threads,
        saturated_pct: 100.0 * saturated as f64 / values.len().max(1) as f64,
    })
}

fn run_resnet18(args: Resnet18Args) -> Result<(), Box<dyn std::error::Error>> {
    let Resnet18Args { layer, threads, target, repeat, layout, weights, format } = args;
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
    let progress = ProgressBar::new(layers.len() as u64);
    progress.set_style(
        ProgressStyle::with_template("{bar:24} {pos}/{len} layers  {elapsed}  {msg}")
            .map_err(|e| e.to_string())?,
    );
    if format == Format::Table {
        let (w_lo, w_hi) = weights.range();
        println!("resnet-18 int8 layers, batch 1: u8 src (zp {SRC_ZERO_POINT}) x s8 weights in [{w_lo}, {w_hi}] (per-channel scales) + bias -> u8, relu off");
        println!("cpu        {} (level {level})", tensorlift::runtime::cpu_name());
        let api = match layout {
            Layout::Nchw => "conv2d_int8, NCHW source and output",
            Layout::Nhwc => "conv2d_int8, NHWC source and output",
        };
        println!("schedule   conv: x86_conv (schedules::x86_conv::{api}, default_knobs per layer, shown as mr x nr); FC: x86_dense (schedules::x86_conv::dense_int8, a 1x1 convolution over a row of pixels)");
        println!("reference  conv: generic-jit (the generic schedule of ops::conv2d_nchw_int8, compiled); FC: eval_te (the interpreter)");
        println!("peak       the probe of the method of the layer's kernel (vpdpbusd, the vpmaddubsw triple, sign transfer, vpmaddwd), on every thread of the layer's pool at once, median of runs interleaved with the layer's own");
        println!(
            "{:<5} {:<15} {:<14} {:>8} {:>10} {:>11} {:>10} {:>8} {:>9} {:>7} {:<12} {:>7} {:>6}",
            "layer", "schedule", "kernel", "verified", "prepare ms", "compile ms", "median ms", "GOPS", "peak GOPS", "% peak", "isa", "threads", "sat %"
        );
    }
    let mut reports = Vec::new();
    for (i, &layer) in layers.iter().enumerate() {
        progress.set_message(format!("{}: define", layer.name()));
        // Data seeded by the layer's position in the table: the same layer gets the same data
        // whether it runs alone (`--layer`) or in the table.
        let position = resnet18::layers().iter().position(|l| l.name() == layer.name()).unwrap_or(i);
        let case = LayerCase::new(layer, 1000 * (position as u64 + 1), weights.range())?;
        // The kernel family follows from the level and the prepared weights' proven range.
        let fit = |knobs: Conv2dInt8Knobs| knobs.with_weights(level.has_vnni(), case.weight_range());
        let plan = match layer {
            Layer::Conv(c) => {
                let knobs = default_knobs(&c);
                LayerPlan::X86Conv(fit(Conv2dInt8Knobs { parallel: knobs.parallel && threads != Some(1), ..knobs }), layout)
            }
            // One thread: FC's 63 tiles of 1 × 16 × 512 take ~0.2 µs each, less than handing
            // them to the pool (measured 0.011 ms on one thread, 0.044 ms on two).
            Layer::Dense(d) => LayerPlan::X86Dense(fit(Conv2dInt8Knobs { parallel: false, ..default_dense_knobs(&d, 1) })),
        };
        let report = run_layer(&case, plan, &options, repeat, &progress)?;
        let schedule = match plan {
            LayerPlan::X86Conv(k, _) | LayerPlan::X86Dense(k) => format!("{} {}x{}", plan.schedule(), k.mr, k.nr),
        };
        progress.suspend(|| match format {
            Format::Table => {
                let opt = |v: Option<f64>, prec: usize| v.map_or("-".to_string(), |v| format!("{v:.prec$}"));
                println!(
                    "{:<5} {:<15} {:<14} {:>8} {:>10.2} {:>11.2} {:>10.3} {:>8.1} {:>9} {:>7} {:<12} {:>7} {:>6.1}",
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
                    report.saturated_pct
                );
            }
            Format::Json => println!(
                "{}",
                serde_json::json!({
                    "layer": report.layer,
                    "verified": report.verified,
                    "schedule": plan.schedule(),
                    "knobs": match plan {
                        LayerPlan::X86Conv(k, _) | LayerPlan::X86Dense(k) => serde_json::json!({
                            "mr": k.mr, "nr": k.nr, "lanes": k.lanes, "order": format!("{:?}", k.order), "parallel": k.parallel,
                            "gemm_source": k.operands.source.to_string(), "weight_range": [k.operands.weights.0, k.operands.weights.1],
                        }),
                    },
                    "kernel": kernel_names(&report.kernels),
                    "weights": weights.name(),
                    "reference": plan.reference(),
                    "layout": match plan {
                        LayerPlan::X86Conv(_, Layout::Nchw) => "nchw",
                        LayerPlan::X86Conv(_, Layout::Nhwc) => "nhwc",
                        LayerPlan::X86Dense(_) => "nc",
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
        println!("total {:<15} {:>8} {:>10} {:>11} {total_ms:>10.3} {:>8.1}", "", "", "", "", total_ops as f64 / total_ms / 1e6);
    }
    let failed: Vec<&str> = reports.iter().filter(|r| !r.verified).map(|r| r.layer).collect();
    if !failed.is_empty() {
        return Err(Resnet18Error::NotVerified { count: failed.len(), total: reports.len(), failed: failed.join(", ") }.into());
    }
    Ok(())
}
