//! The `tensorlift` command line: compile, verify and time operators.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand, ValueEnum};
use ir::DType;
use ir::interp::array::Array;
use ir::te::{placeholder, placeholder_in_range};
use schedules::cpu::{MatmulKnobs, matmul_tiled};
use schedules::nn::{matmul, matmul_packed, pack_b_vnni};
use schedules::x86::{GemmInt8Knobs, gemm_int8};
use tensorlift::kernels::VectorWidth;
use tensorlift::kernels::peak::{self, PeakError, Probe};
use tensorlift::{CompileOptions, IsaLevel, Target, Tensor, build};

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
    /// against the reference interpreter and time it against the vpdpbusd peak measured in the
    /// same run.
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
    /// Measure the vpdpbusd throughput of this CPU (zmm and ymm, 12 independent accumulators).
    Peak {
        #[arg(long, value_enum, default_value_t = Format::Table)]
        format: Format,
    },
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
        Command::Matmul { m, n, k, schedule, threads, repeat, print_ir } => {
            if m <= 0 || n <= 0 || k <= 0 {
                return Err(format!("matmul sizes must be positive, found m={m} n={n} k={k}").into());
            }
            let a = placeholder([m, k], DType::U8, "A");
            let b = placeholder([k, n], DType::I8, "B");
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

/// The peak probe the run is compared with: zmm where the CPU has it, else ymm.
fn reference_probe() -> Option<Probe> {
    Probe::new(VectorWidth::Zmm).or_else(|_| Probe::new(VectorWidth::Ymm)).ok()
}

fn gemm(args: GemmArgs) -> Result<(), Box<dyn std::error::Error>> {
    let GemmArgs { m, n, k, target, threads, repeat, mr, nr, a_max, asm, format } = args;
    if m <= 0 || n <= 0 || k <= 0 {
        return Err(format!("gemm sizes must be positive, found m={m} n={n} k={k}").into());
    }
    let nr = nr.unwrap_or(if n % 32 == 0 { 32 } else { 16 });
    let a = match a_max {
        Some(hi) => placeholder_in_range([m, k], DType::U8, 0..=hi, "A")?,
        None => placeholder([m, k], DType::U8, "A"),
    };
    let b = placeholder([k, n], DType::I8, "B");
    // B arrives packed (a parameter shaped like `pack_b_vnni`'s result): the layout transform
    // is not part of the timed GEMM.
    let packed = pack_b_vnni(&b, nr, "Bp")?;
    let bp_shape: [i64; 4] = packed.shape().try_into().map_err(|_| "pack_b_vnni returns a rank-4 tensor")?;
    let bp = placeholder(bp_shape, DType::I8, "Bp");
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

    // Runs alternate with peak-probe runs of the same length: the machine is shared, and the
    // ratio of medians taken side by side is what is comparable across runs.
    let probe = reference_probe();
    let start = Instant::now();
    compiled.call(&mut [&mut ta, &mut tb, &mut tc])?;
    let iterations = probe.as_ref().map(|p| p.calibrate(start.elapsed()));
    let (mut times, mut peaks) = (Vec::new(), Vec::new());
    for _ in 0..repeat.max(1) {
        if let (Some(p), Some(it)) = (&probe, iterations) {
            peaks.push(p.gops(it, p.run(it).as_secs_f64()));
        }
        let start = Instant::now();
        compiled.call(&mut [&mut ta, &mut tb, &mut tc])?;
        times.push(start.elapsed().as_secs_f64());
    }
    let run = median(times);
    let gops = 2.0 * (m * n * k) as f64 / run / 1e9;
    let workers = compiled.threads().unwrap_or(1);
    let peak = (!peaks.is_empty()).then(|| median(peaks) * workers as f64);
    let kernels: Vec<&str> =
        compiled.machine_code().iter().filter(|c| c.origin != "cranelift").map(|c| c.origin.as_str()).collect();
    let level = compiled.isa_level();
    let compile_ms = kernel.compile_time().as_secs_f64() * 1e3;
    let percent = peak.map(|p| 100.0 * gops / p);
    let width = probe.as_ref().map(|p| match p.width {
        VectorWidth::Zmm => "zmm",
        VectorWidth::Ymm => "ymm",
    });
    match format {
        Format::Table => {
            println!(
                "gemm {m}x{n}x{k} u8 x i8 -> i32, B pre-packed (nr {nr}), tiles {mr}x{nr}, isa {level}, {workers} thread(s)"
            );
            println!("verified      {verified} (against eval_te of the plain matmul)");
            println!("compile       {compile_ms:.2} ms");
            println!("run           {:.3} ms (median of {})", run * 1e3, repeat.max(1));
            println!("throughput    {gops:.1} GOPS");
            match (peak, percent, width) {
                (Some(p), Some(pct), Some(w)) => {
                    println!(
                        "peak          {p:.1} GOPS (vpdpbusd {w} x {workers} thread(s), median of interleaved runs)"
                    );
                    println!("of peak       {pct:.1}%");
                }
                _ => println!("peak          unavailable (no VNNI on this CPU)"),
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
                width.map_or("null".to_string(), |w| format!("\"vpdpbusd {w}\"")),
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
    for width in [VectorWidth::Zmm, VectorWidth::Ymm] {
        let name = match width {
            VectorWidth::Zmm => "zmm",
            VectorWidth::Ymm => "ymm",
        };
        match Probe::new(width) {
            Ok(probe) => {
                let encoding = if probe.vex { "VEX" } else { "EVEX" };
                let p = probe.measure(Duration::from_millis(30), 11);
                rows.push((name, Some((encoding, p))));
            }
            Err(PeakError::Unsupported { .. }) => rows.push((name, None)),
            Err(other) => return Err(other.into()),
        }
    }
    match format {
        Format::Table => {
            println!(
                "vpdpbusd throughput, 1 thread, {} independent accumulators (median of 11 runs)",
                peak::ACCUMULATORS
            );
            for (name, row) in &rows {
                match row {
                    Some((encoding, p)) => println!(
                        "{name} ({encoding:<4})  {:7.1} GOPS  {:.4} ns per instruction  ({} iterations per run)",
                        p.gops, p.ns_per_instruction, p.iterations
                    ),
                    None => println!("{name}         unsupported by this CPU"),
                }
            }
        }
        Format::Json => {
            let items: Vec<String> = rows
                .iter()
                .map(|(name, row)| match row {
                    Some((encoding, p)) => format!(
                        "{{\"width\":\"{name}\",\"encoding\":\"{encoding}\",\"gops\":{:.3},\"ns_per_instruction\":{:.5},\"iterations\":{},\"runs\":{}}}",
                        p.gops, p.ns_per_instruction, p.iterations, p.runs
                    ),
                    None => format!("{{\"width\":\"{name}\",\"supported\":false}}"),
                })
                .collect();
            println!("{{\"accumulators\":{},\"probes\":[{}]}}", peak::ACCUMULATORS, items.join(","));
        }
    }
    Ok(())
}
