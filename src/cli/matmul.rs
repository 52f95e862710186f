//! `tensorlift matmul`: an u8 × i8 → i32 matmul of any M, N, K under the naive or the tiled
//! schedule (tiles that stick out of C are guarded), compiled, checked against a reference
//! (`reference`) and timed.

use std::error::Error;

use clap::ValueEnum;
use ir::DType;
use ir::te::placeholder;
use schedules::cpu::{MatmulKnobs, matmul_tiled};
use schedules::generic::default_schedule;
use tensorlift::bench::{pattern_tensor, time};
use tensorlift::{CompileOptions, Tensor, build};

use super::common::{positive, thread_count};
use super::memory;
use super::reference::Reference;

#[derive(clap::Args)]
pub struct Args {
    #[arg(long, default_value_t = 256, value_parser = positive::<i64>, allow_negative_numbers = true)]
    m: i64,
    #[arg(long, default_value_t = 256, value_parser = positive::<i64>, allow_negative_numbers = true)]
    n: i64,
    #[arg(long, default_value_t = 256, value_parser = positive::<i64>, allow_negative_numbers = true)]
    k: i64,
    #[arg(long, value_enum, default_value_t = ScheduleChoice::Tiled)]
    schedule: ScheduleChoice,
    /// Threads for parallel loops (default: one per core).
    #[arg(long, value_parser = thread_count, allow_negative_numbers = true)]
    threads: Option<usize>,
    #[arg(long, default_value_t = 10, value_parser = positive::<usize>, allow_negative_numbers = true)]
    repeat: usize,
    /// Print the lowered loop IR.
    #[arg(long)]
    print_ir: bool,
}

#[derive(Clone, Copy, ValueEnum)]
enum ScheduleChoice {
    /// The definition's own loop order.
    Naive,
    /// `schedules::cpu::matmul_tiled` with its default knobs.
    Tiled,
}

pub fn run(args: Args) -> Result<(), Box<dyn Error>> {
    let Args { m, n, k, schedule, threads, repeat, print_ir } = args;
    // A and B twice (the bytes `pattern_tensor` builds them from, then the tensors), C and the
    // reference's C.
    memory::check(
        &format!("matmul --m {m} --n {n} --k {k}"),
        &[("A", &[m, k], 2), ("B", &[k, n], 2), ("C", &[m, n], 4), ("the reference's C", &[m, n], 4)],
    )?;
    let a = placeholder([m, k], DType::U8, "A")?;
    let b = placeholder([k, n], DType::I8, "B")?;
    let c = schedules::nn::matmul(&a, &b, DType::I32, "C")?;
    let s = match schedule {
        ScheduleChoice::Naive => default_schedule(&[&c]),
        ScheduleChoice::Tiled => matmul_tiled(&c, MatmulKnobs::default())?,
    };
    let options = CompileOptions { threads, ..CompileOptions::default() };
    let kernel = build(&s, &[&a, &b, &c], "matmul", &options)?;
    if print_ir {
        println!("{}", kernel.lowered);
    }
    let (mut ta, mut tb) = (pattern_tensor(DType::U8, &[m, k], 3), pattern_tensor(DType::I8, &[k, n], 5));
    let mut tc = Tensor::zeros(DType::I32, &[m, n])?;
    kernel.compiled.call(&mut [&mut ta, &mut tb, &mut tc])?;
    let reference = Reference::for_size(m, n, k);
    let verified = tc.as_bytes() == reference.matmul(&a, &b, &mut ta, &mut tb)?.as_bytes();
    let timing = time(repeat, || kernel.compiled.call(&mut [&mut ta, &mut tb, &mut tc]))?;
    let gops = 2.0 * m as f64 * n as f64 * k as f64 / timing.median_s / 1e9;
    println!(
        "matmul {m}x{n}x{k}: verified {verified}, compile {:.2} ms, median {:.3} ms of {}, {gops:.1} GOPS, reference {}",
        kernel.compile_time().as_secs_f64() * 1e3,
        timing.median_s * 1e3,
        timing.runs,
        reference.name()
    );
    if !verified {
        return Err(format!("result differs from the reference ({})", reference.name()).into());
    }
    Ok(())
}
