//! An u8 × i8 → i32 matmul whose reduce axis of extent 4 is vectorized together with 16 output
//! columns: the schedule alone turns the inner update into the VPDPBUSD shape, and the JIT emits
//! `vpdpbusd` on VNNI targets. Prints the lowered loop and the `vpdpbusd` lines of the machine
//! code, then times it against the same schedule at the AVX2 level (no VNNI) and the
//! quickstart's schedule (columns vectorized, `B` unpacked), every result checked bit for bit
//! against the reference interpreter.
//!
//! `cargo run --release --example int8_dot [-- --size N --repeat N --threads N]`

use tensorlift::bench::{pattern, time_and_check};
use tensorlift::prelude::*;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let flag = |name: &str, default: usize| -> usize {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    let n = (flag("--size", 512) as i64 + 15) / 16 * 16;
    let repeat = flag("--repeat", 20);
    let threads = args.iter().any(|a| a == "--threads").then(|| flag("--threads", 1));

    // `B` packed 4 consecutive k per column, `B[k/4, j, k%4]` (`IntrinKind::Int8Gemm`'s layout),
    // so the 16 bytes of 4 columns × 4 k are adjacent.
    let a = placeholder([n, n], DType::U8, "A")?;
    let packed = placeholder([n / 4, n, 4], DType::I8, "B")?;
    let (ko, ki) = (reduce_axis(n / 4, "ko")?, reduce_axis(4, "ki")?);
    let c = compute(
        [n, n],
        |i| {
            let product = a.at([&i[0], &(&ko * 4 + &ki)]).cast(DType::I32)
                * packed.at([&ko.to_expr(), &i[1], &ki.to_expr()]).cast(DType::I32);
            sum(DType::I32, &[&ko, &ki], product)
        },
        "C",
    )?;
    // 4×16 output tiles, the reduction outside the tile, rows unrolled, row tiles parallel, and
    // `ki` vectorized with the 16 columns: a 64-lane reduction into 16 lanes, 4 `vpdpbusd` a row.
    let mut dot = create_schedule(&[&c]);
    let (io, jo, ii, ji) = dot.tile(&c, &c.axis(0), &c.axis(1), 4, 16)?;
    dot.reorder(&c, &[&io, &jo, &ko, &ii, &ji, &ki])?;
    dot.unroll(&c, &ii)?;
    dot.vectorize(&c, &ji)?;
    dot.vectorize(&c, &ki)?;
    dot.parallel(&c, &io)?;

    // The quickstart's definition and schedule, on `B` unpacked.
    let b = placeholder([n, n], DType::I8, "B")?;
    let c_columns = schedules::nn::matmul(&a, &b, DType::I32, "C")?;
    let columns = schedules::cpu::matmul_tiled(&c_columns, schedules::cpu::MatmulKnobs::default())?;

    let native = CompileOptions { threads, ..CompileOptions::default() };
    let avx2 = CompileOptions { target: Target::Level(IsaLevel::Avx2), ..native.clone() };
    let level = IsaLevel::detect().map_or("none".to_string(), |l| l.to_string());
    let kernels = [
        (format!("ki vectorized with 16 columns ({level})"), build(&dot, &[&a, &packed, &c], "dot", &native)?, true),
        ("ki vectorized with 16 columns (avx2)".to_string(), build(&dot, &[&a, &packed, &c], "dot_avx2", &avx2)?, true),
        (format!("quickstart schedule ({level})"), build(&columns, &[&a, &b, &c_columns], "columns", &native)?, false),
    ];
    println!("{}", kernels[0].1.lowered);
    for line in kernels[0].1.compiled.disassembly().lines().filter(|l| l.contains("vpdpbusd")) {
        println!("{line}");
    }

    let a_data = pattern(DType::U8, &[n, n], 1);
    let b_data = pattern(DType::I8, &[n, n], 2);
    let packed_data = pack(&b_data, n);
    let expected = eval_te(&[&c_columns], &[(&a, &a_data), (&b, &b_data)])?.remove(0);
    let ops = 2.0 * (n * n * n) as f64;
    let threads = threads.map_or("all cores".to_string(), |t| t.to_string());
    println!("\nmatmul {n}x{n}x{n} u8 x i8 -> i32, threads: {threads}");
    for (label, kernel, is_packed) in &kernels {
        let b = if *is_packed { &packed_data } else { &b_data };
        let (timing, exact) = time_and_check(&kernel.compiled, &[&a_data, b], &expected, repeat)?;
        println!(
            "{label:>42}: compile {:.2} ms, run median {:.3} ms, {:.1} GOPS, bit-exact: {exact}",
            kernel.compile_time().as_secs_f64() * 1e3,
            timing.median_s * 1e3,
            ops / timing.median_s / 1e9,
        );
        if !exact {
            return Err(format!("{label} differs from the reference").into());
        }
    }
    Ok(())
}

/// `B[k, j]` as `B[k/4, j, k%4]`.
fn pack(b: &Array, n: i64) -> Array {
    let mut packed = Array::zeros(DType::I8, &[n / 4, n, 4]);
    for k in 0..n {
        for j in 0..n {
            packed.set(((k / 4 * n + j) * 4 + k % 4) as usize, b.get((k * n + j) as usize));
        }
    }
    packed
}
