//! Sweeps the register blocking of the hand-assembled int8 GEMM kernels on one thread and
//! prints GOPS and % of the peak probe of each kernel's own method, each a median over runs that
//! alternate a kernel call with a probe run of the same length (the machine is shared and
//! noisy).
//!
//! `cargo run --release --example kernel_sweep -- [variant] [MxNxK ...] [--defaults]`, variant
//! one of `avx512-vnni avx-vnni avx2-widen avx2-maddubs avx512-maddubs avx2-sign avx2-madd16` (default: all
//! this CPU runs); `--defaults` times only `Blocking::default_for`, which is how the defaults
//! were chosen. Sign-transfer kernels read A as i8, `avx2-madd16` both operands as i16.

use std::time::Duration;

use tensorlift::bench::time_against_peak;
use tensorlift::isa::{DotMethod, KernelVariant};
use tensorlift::kernels::{Blocking, GemmShape};
use tensorlift::runtime::GemmKernel;
use tensorlift::runtime::peak::{PeakError, Probe};

/// The operands as bytes, and widened to i16 for `Madd16` kernels.
struct Operands {
    a: Vec<u8>,
    b: Vec<i8>,
    a16: Vec<i16>,
    b16: Vec<i16>,
}

/// Median kernel seconds and median peak GOPS over `runs` alternating runs.
fn measure(kernel: &GemmKernel, probe: &Probe, x: &Operands, c: &mut [i32], runs: usize) -> (f64, f64) {
    let call = || match kernel.variant.method {
        DotMethod::Madd16 => kernel.run_i16(&x.a16, &x.b16, c),
        _ => kernel.run(&x.a, &x.b, c),
    };
    let timing = time_against_peak(Some(probe), 1, runs, call).expect("operands cover the shape");
    (timing.median_s, timing.peak_gops.expect("timed against a probe"))
}

fn main() -> Result<(), PeakError> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let only_defaults = args.iter().any(|a| a == "--defaults");
    let variants: Vec<KernelVariant> = match args
        .first()
        .and_then(|a| KernelVariant::ALL.into_iter().find(|v| v.name() == a))
    {
        Some(v) => vec![v],
        None => KernelVariant::ALL.into_iter().filter(|v| v.min_level().is_some_and(|l| l.is_supported())).collect(),
    };
    let mut shapes: Vec<(i64, i64, i64)> = args
        .iter()
        .filter_map(|a| {
            let d: Vec<i64> = a.split('x').filter_map(|x| x.parse().ok()).collect();
            (d.len() == 3).then(|| (d[0], d[1], d[2]))
        })
        .collect();
    if shapes.is_empty() {
        shapes = vec![(512, 512, 512), (64, 3136, 576)];
    }
    println!("cpu: {}", tensorlift::runtime::cpu_name());
    for (m, n, k) in shapes {
        // Element counts are the same for every method (i16 pairs hold as many values).
        let (na, nb, nc) = GemmShape::dense(m, n, k).footprint(DotMethod::Vnni);
        let a: Vec<u8> = (0..na).map(|i| (i * 7 % 251) as u8).collect();
        let b: Vec<i8> = (0..nb).map(|i| (i * 13 % 255) as i8).collect();
        let (a16, b16) = (a.iter().map(|&x| i16::from(x)).collect(), b.iter().map(|&x| i16::from(x)).collect());
        let operands = Operands { a, b, a16, b16 };
        let mut c = vec![0i32; nc];
        let ops = 2.0 * (m * n * k) as f64;
        let runs = ((0.15 / (ops / 500e9)) as usize).clamp(5, 51);
        for &variant in &variants {
            let shape = GemmShape::dense_for(variant.method, m, n, k);
            let probe = Probe::for_variant(variant)?;
            println!("{} peak: {:.1} GOPS", probe.kind, probe.measure(Duration::from_millis(30), 7).gops);
            let lanes = variant.width.lanes();
            let blockings: Vec<Blocking> = if only_defaults {
                vec![Blocking::default_for(variant)]
            } else {
                (1..=12)
                    .flat_map(|rows| {
                        (1..=6).flat_map(move |vectors| [1, 2, 4, 8].map(|unroll| Blocking { rows, vectors, unroll }))
                    })
                    .filter(|b| {
                        Blocking::registers(variant, b.rows, b.vectors, false) <= variant.width.registers()
                            && b.rows * b.vectors * lanes >= 32
                    })
                    .collect()
            };
            for blocking in blockings {
                let Blocking { rows, vectors, unroll } = blocking;
                let kernel = GemmKernel::new(variant, shape, blocking).map_err(PeakError::Compile)?;
                let (t, peak) = measure(&kernel, &probe, &operands, &mut c, runs);
                let gops = ops / t / 1e9;
                let mark = if blocking == Blocking::default_for(variant) { " (default)" } else { "" };
                println!(
                    "{m}x{n}x{k} {variant:<15} rows {rows:>2} vectors {vectors} unroll {unroll}: {gops:7.1} GOPS {:5.1}% of {peak:.1}{mark}",
                    100.0 * gops / peak
                );
            }
        }
    }
    Ok(())
}
