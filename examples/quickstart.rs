//! Quickstart: an u8 × i8 → i32 matmul, defined, scheduled, lowered, JIT-compiled, checked
//! against the reference interpreter and timed against the definition's own loop order.
//!
//! `cargo run --release --example quickstart [-- --threads N --repeat N --size N]`

use std::time::{Duration, Instant};

use tensorlift::bench::{pattern, time_and_check};
use tensorlift::prelude::*;
use tensorlift::schedules::cpu::{MatmulKnobs, matmul_tiled};
use tensorlift::schedules::nn::matmul;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let flag = |name: &str, default: usize| -> usize {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    let size = flag("--size", 512) as i64;
    let repeat = flag("--repeat", 20);
    let threads = args.iter().any(|a| a == "--threads").then(|| flag("--threads", 1));
    let (m, n, k) = (size, size, size);

    // README's "Writing an operator" (`examples/write_operator.rs`) as the operator library has
    // it: the definition `nn::matmul` (u8 and i8 operands cast to i32) and the schedule
    // `cpu::matmul_tiled` (4×16 output tiles, the reduction outside the tile, rows unrolled,
    // columns vectorized, row tiles on the thread pool).
    let a = placeholder([m, k], DType::U8, "A")?;
    let b = placeholder([k, n], DType::I8, "B")?;
    let c = matmul(&a, &b, DType::I32, "C")?;
    let scheduled = matmul_tiled(&c, MatmulKnobs::default())?;
    let naive = create_schedule(&[&c]);

    let options = CompileOptions { threads, ..CompileOptions::default() };
    let kernels = [
        ("scheduled", build(&scheduled, &[&a, &b, &c], "matmul_u8s8s32", &options)?, repeat),
        ("naive", build(&naive, &[&a, &b, &c], "matmul_naive", &options)?, repeat.div_ceil(5)),
    ];
    println!("{}", kernels[0].1.lowered);

    let a_data = pattern(DType::U8, &[m, k], 1);
    let b_data = pattern(DType::I8, &[k, n], 2);
    let start = Instant::now();
    let expected = eval_te(&[&c], &[(&a, &a_data), (&b, &b_data)])?.remove(0);
    let reference_time = start.elapsed();

    let ops = 2.0 * (m * n * k) as f64;
    let threads = threads.map_or("all cores".to_string(), |t| t.to_string());
    println!("matmul {m}x{n}x{k} u8 x i8 -> i32, threads: {threads}");
    println!("reference interpreter: {:.0} ms", ms(reference_time));
    for (label, kernel, runs) in &kernels {
        let (timing, verified) = time_and_check(&kernel.compiled, &[&a_data, &b_data], &expected, *runs)?;
        let median = Duration::from_secs_f64(timing.median_s);
        println!(
            "{label:>9}: compile {:.2} ms (lower {:.2} ms), run median {:.3} ms of {runs}, {:.1} GOPS, bit-exact vs reference: {verified}",
            ms(kernel.compile_time()),
            ms(kernel.lower_time),
            ms(median),
            ops / median.as_secs_f64() / 1e9,
        );
        if !verified {
            return Err(format!("{label} result differs from the reference").into());
        }
    }
    Ok(())
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}
