//! The `tensorlift` command line: compile, verify and time operators.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand, ValueEnum};
use ir::interp::array::Array;
use ir::te::placeholder;
use ir::DType;
use schedules::cpu::{matmul_tiled, MatmulKnobs};
use tensorlift::{build, CompileOptions, Tensor};

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
