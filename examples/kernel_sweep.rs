//! Sweeps the register blocking of the hand-assembled int8 GEMM kernels on one thread and
//! prints GOPS and % of the peak probe of each kernel's own method, each a median over runs that
//! alternate a kernel call with a probe run of the same length (the machine is shared and
//! noisy).
//!
//! `cargo run --release --example kernel_sweep -- [variant] [MxNxK ...] [--defaults]`, variant
//! one of `avx512-vnni avx-vnni avx2-widen avx2-maddubs avx512-maddubs avx2-sign avx2-madd16` (default: all
//! this CPU runs); `--defaults` times only `Blocking::default_for`, which is how the defaults
//! were chosen. Sign-transfer kernels read A as i8, `avx2-madd16` both operands as i16.
//!
//! Before it is timed, every blocking's output is checked bit for bit against a plain-Rust GEMM
//! of the same operands (drawn in the range where the kernel's method is exact: 7-bit B for the
//! `vpmaddubsw` triple, no -128 in B for sign transfer); a blocking that differs is an error
//! naming it, and nothing more is timed.

use std::time::Duration;

use tensorlift::RuntimeError;
use tensorlift::bench::time_against_peak;
use tensorlift::isa::{DotMethod, KernelVariant};
use tensorlift::kernels::gemm::{Blocking, GemmShape};
use tensorlift::runtime::GemmKernel;
use tensorlift::runtime::peak::{PeakError, Probe};

/// Why the sweep stopped.
#[derive(Debug, thiserror::Error)]
enum SweepError {
    #[error(transparent)]
    Peak(#[from] PeakError),
    #[error(transparent)]
    Run(#[from] RuntimeError),
    #[error(
        "{variant} {blocking:?} on {m}x{n}x{k}: C[{row}][{col}] is {found}, expected {expected} (the plain-Rust GEMM of the same operands)"
    )]
    Mismatch {
        variant: &'static str,
        blocking: Blocking,
        m: i64,
        n: i64,
        k: i64,
        row: usize,
        col: usize,
        expected: i32,
        found: i32,
    },
}

/// The operands as bytes, and widened to i16 for `Madd16` kernels, in the range where `method`
/// is exact: B in [-64, 63] for the `vpmaddubsw` triple (every pair sum fits i16), without -128
/// for sign transfer, anything else for the exact methods.
struct Operands {
    a: Vec<u8>,
    b: Vec<i8>,
    a16: Vec<i16>,
    b16: Vec<i16>,
}

impl Operands {
    fn new(method: DotMethod, (na, nb): (usize, usize)) -> Operands {
        let a: Vec<u8> = (0..na).map(|i| (i * 7 % 251) as u8).collect();
        let b: Vec<i8> = (0..nb)
            .map(|i| {
                let v = (i * 13 % 255) as u8 as i8;
                match method {
                    DotMethod::MaddUbs => v >> 1,
                    DotMethod::SignTransfer => v.max(-127),
                    DotMethod::Vnni | DotMethod::Widen | DotMethod::Madd16 | DotMethod::Amx => v,
                }
            })
            .collect();
        let (a16, b16) = (a.iter().map(|&x| i16::from(x)).collect(), b.iter().map(|&x| i16::from(x)).collect());
        Operands { a, b, a16, b16 }
    }

    /// `C = A·B` (`m × n`, row-major) as `shape` lays the operands out for `method`: A row-major
    /// (`lda` apart) read as the shape's element type (u8, i8, or the i16 copies), B in groups of
    /// `pack` reduction values per column (`[k/pack, n, pack]`, the i16 copies for `Madd16`),
    /// in wrapping i32 arithmetic.
    fn reference(&self, method: DotMethod, shape: &GemmShape) -> Vec<i32> {
        let [m, n, k, lda, ldb] = [shape.m, shape.n, shape.k, shape.lda, shape.ldb].map(|v| v as usize);
        let pack = if method == DotMethod::Madd16 { 2 } else { 4 };
        let a = |i: usize| -> i32 {
            match method {
                DotMethod::Madd16 => i32::from(self.a16[i]),
                DotMethod::SignTransfer => i32::from(self.a[i] as i8),
                _ => i32::from(self.a[i]),
            }
        };
        let b = |i: usize| -> i32 {
            if method == DotMethod::Madd16 { i32::from(self.b16[i]) } else { i32::from(self.b[i]) }
        };
        let mut c = vec![0i32; m * n];
        for i in 0..m {
            for kk in 0..k {
                let av = a(i * lda + kk);
                let row = (kk / pack) * ldb + kk % pack;
                for j in 0..n {
                    c[i * n + j] = c[i * n + j].wrapping_add(av.wrapping_mul(b(row + j * pack)));
                }
            }
        }
        c
    }
}

/// Runs `kernel` once on zeroed `c` (kernels accumulate: `C += A·B`).
fn run_once(kernel: &GemmKernel, x: &Operands, c: &mut [i32]) -> Result<(), RuntimeError> {
    c.fill(0);
    match kernel.variant.method {
        DotMethod::Madd16 => kernel.run_i16(&x.a16, &x.b16, c),
        _ => kernel.run(&x.a, &x.b, c),
    }
}

/// Median kernel seconds and median peak GOPS over `runs` alternating runs.
fn measure(
    kernel: &GemmKernel,
    probe: &Probe,
    x: &Operands,
    c: &mut [i32],
    runs: usize,
) -> Result<(f64, f64), RuntimeError> {
    let call = || match kernel.variant.method {
        DotMethod::Madd16 => kernel.run_i16(&x.a16, &x.b16, c),
        _ => kernel.run(&x.a, &x.b, c),
    };
    let timing = time_against_peak(Some(probe), 1, runs, call)?;
    Ok((timing.median_s, timing.peak_gops.expect("timed against a probe")))
}

fn main() -> std::process::ExitCode {
    match sweep() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn sweep() -> Result<(), SweepError> {
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
    println!("cpu: {}", tensorlift::isa::cpu_name());
    for (m, n, k) in shapes {
        // Element counts are the same for every method (i16 pairs hold as many values).
        let (na, nb, nc) = GemmShape::dense(m, n, k).footprint(DotMethod::Vnni);
        let mut c = vec![0i32; nc];
        let ops = 2.0 * (m * n * k) as f64;
        let runs = ((0.15 / (ops / 500e9)) as usize).clamp(5, 51);
        for &variant in &variants {
            let shape = GemmShape::dense_for(variant.method, m, n, k);
            let operands = Operands::new(variant.method, (na, nb));
            let expected = operands.reference(variant.method, &shape);
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
                run_once(&kernel, &operands, &mut c)?;
                if let Some(at) = (0..expected.len()).find(|&i| c[i] != expected[i]) {
                    let (row, col) = (at / n as usize, at % n as usize);
                    let (variant, expected, found) = (variant.name(), expected[at], c[at]);
                    return Err(SweepError::Mismatch { variant, blocking, m, n, k, row, col, expected, found });
                }
                let (t, peak) = measure(&kernel, &probe, &operands, &mut c, runs)?;
                let gops = ops / t / 1e9;
                let mark = if blocking == Blocking::default_for(variant) { " (default)" } else { "" };
                println!(
                    "{m}x{n}x{k} {variant:<15} rows {rows:>2} vectors {vectors} unroll {unroll}: {gops:7.1} GOPS {:5.1}% of {peak:.1}, verified{mark}",
                    100.0 * gops / peak
                );
            }
        }
    }
    Ok(())
}
