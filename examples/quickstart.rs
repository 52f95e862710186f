//! Quickstart: an u8 × i8 → i32 matmul, defined, scheduled, lowered, JIT-compiled, checked
//! against the reference interpreter and timed.
//!
//! `cargo run --release --example quickstart [-- --threads N --repeat N --size N]`

use std::time::{Duration, Instant};

use ir::interp::array::Array;
use ir::schedule::create_schedule;
use ir::te::{compute, placeholder, reduce_axis, sum};
use ir::DType;
use tensorlift::{build, CompileOptions, Kernel, Tensor};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let flag = |name: &str, default: usize| -> usize {
        args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).and_then(|v| v.parse().ok()).unwrap_or(default)
    };
    let size = flag("--size", 512) as i64;
    let repeat = flag("--repeat", 20);
    let threads = args.iter().any(|a| a == "--threads").then(|| flag("--threads", 1));
    let (m, n, k) = (size, size, size);

    // The definition: mixed precision is explicit, the u8 and i8 operands are cast to i32.
    let a = placeholder([m, k], DType::U8, "A")?;
    let b = placeholder([k, n], DType::I8, "B")?;
    let r = reduce_axis(k, "k")?;
    let c = compute(
        [m, n],
        |i| sum(DType::I32, &[&r], a.at([&i[0], &r]).cast(DType::I32) * b.at([&r, &i[1]]).cast(DType::I32)),
        "C",
    )?;

    // The schedule: 4×16 output tiles, the reduction outside the tile, rows unrolled, columns
    // vectorized, row tiles on the thread pool.
    let mut scheduled = create_schedule(&[&c]);
    let (io, jo, ii, ji) = scheduled.tile(&c, &c.axis(0), &c.axis(1), 4, 16)?;
    scheduled.reorder(&c, &[&io, &jo, &r, &ii, &ji])?;
    scheduled.unroll(&c, &ii)?;
    scheduled.vectorize(&c, &ji)?;
    scheduled.parallel(&c, &io)?;
    let naive = create_schedule(&[&c]);

    let options = CompileOptions { threads, ..CompileOptions::default() };
    let kernels = [
        ("scheduled", build(&scheduled, &[&a, &b, &c], "matmul_u8s8s32", &options)?, repeat),
        ("naive", build(&naive, &[&a, &b, &c], "matmul_naive", &options)?, repeat.div_ceil(5)),
    ];
    println!("{}", kernels[0].1.lowered);

    let a_data = random(DType::U8, &[m, k], 1);
    let b_data = random(DType::I8, &[k, n], 2);
    let start = Instant::now();
    let expected = ir::interp::te_eval::eval_te(&[&c], &[(&a, &a_data), (&b, &b_data)])?.remove(0);
    let reference_time = start.elapsed();

    let ops = 2.0 * (m * n * k) as f64;
    let threads = threads.map_or("all cores".to_string(), |t| t.to_string());
    println!("matmul {m}x{n}x{k} u8 x i8 -> i32, threads: {threads}");
    println!("reference interpreter: {:.0} ms", ms(reference_time));
    for (label, kernel, runs) in &kernels {
        let (median, verified) = run(kernel, &a_data, &b_data, &expected, *runs)?;
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

fn run(kernel: &Kernel, a: &Array, b: &Array, expected: &Array, runs: usize) -> Result<(Duration, bool), Box<dyn std::error::Error>> {
    let mut a = Tensor::from_array(a);
    let mut b = Tensor::from_array(b);
    let mut c = Tensor::zeros(expected.dtype(), expected.shape());
    let mut times = Vec::with_capacity(runs);
    for _ in 0..runs.max(1) {
        let start = Instant::now();
        kernel.compiled.call(&mut [&mut a, &mut b, &mut c])?;
        times.push(start.elapsed());
    }
    times.sort();
    Ok((times[times.len() / 2], c.to_array().bits_eq(expected)))
}

/// Deterministic data covering the whole range of the type.
fn random(dtype: DType, shape: &[i64], seed: u64) -> Array {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let n: i64 = shape.iter().product();
    let values: Vec<i64> = (0..n)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state as i64
        })
        .collect();
    Array::from_i64(dtype, shape, &values)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}
