//! `tensorlift gemm`: the tensorized u8 × i8 → i32 GEMM (`schedules::x86::gemm_int8`, B
//! pre-packed by `nn::pack_b_vnni`'s layout), checked against a reference (`reference`) and
//! timed against the peak probe of its kernel's method. At a level without VNNI where the
//! `vpmaddubsw` triple is not exact on A's range, the operands are pre-widened instead: B
//! packed as i16 pairs (`nn::pack_b_i16`) before timing, A widened to i16 by a stage of the
//! call, and the kernel is `vpmaddwd` + `vpaddd`.

use std::error::Error;

use ir::DType;
use ir::intrin::pair_sums_fit_i16;
use ir::schedule::MAX_LANES;
use ir::te::{compute, placeholder, placeholder_in_range};
use schedules::nn::{matmul_packed, pack_b_i16, pack_b_vnni};
use schedules::x86::{GemmInt8Knobs, gemm_int8};
use tensorlift::bench::{pattern_values, time_against_peak};
use tensorlift::runtime::IsaLevel;
use tensorlift::runtime::peak::Probe;
use tensorlift::{CompileOptions, Tensor, build};

use super::common::{Format, IsaChoice, positive, thread_count};
use super::memory;
use super::reference::Reference;

#[derive(clap::Args)]
pub struct Args {
    #[arg(long, value_parser = positive::<i64>, allow_negative_numbers = true)]
    m: i64,
    #[arg(long, value_parser = positive::<i64>, allow_negative_numbers = true)]
    n: i64,
    #[arg(long, value_parser = positive::<i64>, allow_negative_numbers = true)]
    k: i64,
    /// ISA level of the generated code and kernels (`auto`: the best this CPU has, or
    /// TENSORLIFT_ISA when set).
    #[arg(long, value_enum, default_value_t = IsaChoice::Auto)]
    isa: IsaChoice,
    /// Threads for the parallel row-tile loop (default: one per core).
    #[arg(long, value_parser = thread_count, allow_negative_numbers = true)]
    threads: Option<usize>,
    #[arg(long, default_value_t = 20, value_parser = positive::<usize>, allow_negative_numbers = true)]
    repeat: usize,
    /// Rows of the micro-kernel tile, at most M (default: 8).
    #[arg(long, value_parser = positive::<i64>, allow_negative_numbers = true)]
    mr: Option<i64>,
    /// Columns of the micro-kernel tile and packing panel, a divisor of N of at most 256
    /// (default: 32 if it divides N, else 16; for the exact AVX2 GEMM, whose B is i16 pairs,
    /// 16 first: a panel of the same bytes).
    #[arg(long, value_parser = positive::<i64>, allow_negative_numbers = true)]
    nr: Option<i64>,
    /// Declare A's values to lie in 0..=A_MAX (checked on every call); at most 127 lets the
    /// exact GEMM use `vpmaddubsw` on AVX2.
    #[arg(long, value_parser = clap::value_parser!(i64).range(0..=255), allow_negative_numbers = true)]
    a_max: Option<i64>,
    /// Print the disassembly of every function the call runs, kernels included.
    #[arg(long)]
    asm: bool,
    #[arg(long, value_enum, default_value_t = Format::Table)]
    format: Format,
}

/// `Bp[jo, ko, ji, ki] = B[ko*P + ki, jo*nr + ji]` of the row-major `B: [k, n]` in groups of
/// `pack` (`nn::pack_b_vnni`: 4, `nn::pack_b_i16`: 2, each value through `elem`), done before
/// timing.
fn pack_b<T: Copy + Default>(b: &[i8], (k, n, nr): (usize, usize, usize), pack: usize, elem: fn(i8) -> T) -> Vec<T> {
    let mut out = vec![T::default(); k * n];
    for jo in 0..n / nr {
        for ko in 0..k / pack {
            for ji in 0..nr {
                for ki in 0..pack {
                    out[((jo * (k / pack) + ko) * nr + ji) * pack + ki] = elem(b[(ko * pack + ki) * n + jo * nr + ji]);
                }
            }
        }
    }
    out
}

pub fn run(args: Args) -> Result<(), Box<dyn Error>> {
    let Args { m, n, k, isa, threads, repeat, mr, nr, a_max, asm, format } = args;
    let target = isa.target();
    // Before anything else (and any output): a level this CPU lacks.
    let level = target.level()?;
    let widened = level >= IsaLevel::Avx2
        && !level.has_vnni()
        && !a_max.is_some_and(|hi| pair_sums_fit_i16((0, hi), (i8::MIN.into(), i8::MAX.into())));
    let mr = match mr {
        Some(mr) if mr > m => return Err(format!("--mr {mr} must be at most --m {m} (the rows of one tile)").into()),
        Some(mr) => mr,
        None => GemmInt8Knobs::default().mr,
    };
    let nr = match nr {
        Some(nr) if nr > MAX_LANES => {
            return Err(format!("--nr {nr} must be at most {MAX_LANES} (a row of a tile is one vector of nr lanes)").into());
        }
        Some(nr) if n % nr != 0 => return Err(format!("--nr {nr} must divide --n {n} (B is packed in panels of nr columns)").into()),
        Some(nr) => nr,
        // A K × 32 panel of i16 pairs is 32 KiB at K = 512, all of a Zen 4's L1: 512³ ran at
        // 83–88% of its probe with it, 89–92% with 16, alternating runs (BENCHMARKS.md).
        None if widened && n % 16 == 0 => 16,
        None if n % 32 == 0 => 32,
        None if n % 16 == 0 => 16,
        None => return Err(format!("--nr defaults to 32 or 16, whichever divides --n, and neither divides --n {n}: give --nr, a divisor of --n (B is packed in panels of nr columns)").into()),
    };
    if k % 4 != 0 {
        return Err(format!("--k {k} must be a multiple of 4 (B is packed in groups of 4 rows)").into());
    }
    // A twice (its bytes, then the tensor), B four times (its bytes, packed, both tensors), C
    // and the reference's C.
    memory::check(
        &format!("gemm --m {m} --n {n} --k {k}"),
        &[("A", &[m, k], 2), ("B", &[k, n], 4), ("C", &[m, n], 4), ("the reference's C", &[m, n], 4)],
    )?;
    let a = match a_max {
        Some(hi) => placeholder_in_range([m, k], DType::U8, 0..=hi, "A")?,
        None => placeholder([m, k], DType::U8, "A")?,
    };
    let b = placeholder([k, n], DType::I8, "B")?;
    // B arrives packed (a parameter shaped like the packing's result): the layout transform
    // is not part of the timed GEMM. Widening A is.
    let packed = if widened { pack_b_i16(&b, nr, "Bp")? } else { pack_b_vnni(&b, nr, "Bp")? };
    let bp_shape: [i64; 4] = packed.shape().try_into().map_err(|_| "the packing returns a rank-4 tensor")?;
    let bp = placeholder(bp_shape, packed.dtype(), "Bp")?;
    let a16 = widened.then(|| compute([m, k], |i| a.at([&i[0], &i[1]]).cast(DType::I16), "A16")).transpose()?;
    let c = matmul_packed(a16.as_ref().unwrap_or(&a), &bp, DType::I32, "C")?;
    let knobs = GemmInt8Knobs { mr, nr, parallel: threads != Some(1) };
    let mut s = gemm_int8(&c, knobs)?;
    if let Some(a16) = &a16 {
        let (_, lanes) = s.split(a16, &a16.axis(1), 16)?;
        s.vectorize(a16, &lanes)?;
        if knobs.parallel {
            s.parallel(a16, &a16.axis(0))?;
        }
    }
    let options = CompileOptions { target, threads, ..CompileOptions::default() };
    let kernel = build(&s, &[&a, &bp, &c], "gemm", &options)?;
    let compiled = &kernel.compiled;

    // Sizes were checked against memory above, so they fit `usize`.
    let (mu, nu, ku) = (m as usize, n as usize, k as usize);
    let a_values: Vec<u8> = pattern_values(mu * ku, 3)
        .map(|v| match a_max {
            Some(hi) => (i64::from(v as u8) % (hi + 1)) as u8,
            None => v as u8,
        })
        .collect();
    let b_values: Vec<i8> = pattern_values(ku * nu, 5).map(|v| v as i8).collect();
    let mut ta = Tensor::from_slice(&[m, k], &a_values)?;
    let sizes = (ku, nu, nr as usize);
    let mut tbp = if widened {
        Tensor::from_slice(&bp_shape, &pack_b(&b_values, sizes, 2, i16::from))?
    } else {
        Tensor::from_slice(&bp_shape, &pack_b(&b_values, sizes, 4, |v| v))?
    };
    let mut tb = Tensor::from_slice(&[k, n], &b_values)?;
    drop((a_values, b_values));
    let mut tc = Tensor::zeros(DType::I32, &[m, n])?;
    compiled.call(&mut [&mut ta, &mut tbp, &mut tc])?;
    let reference = Reference::for_size(m, n, k);
    let verified = tc.as_bytes() == reference.matmul(&a, &b, &mut ta, &mut tb)?.as_bytes();
    drop(tb);

    let probe = Probe::for_function(compiled);
    let workers = compiled.threads().unwrap_or(1);
    let timing =
        time_against_peak(probe.as_ref(), workers, repeat, || compiled.call(&mut [&mut ta, &mut tbp, &mut tc]))?;
    let run = timing.median_s;
    let gops = 2.0 * m as f64 * n as f64 * k as f64 / run / 1e9;
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
                "gemm {m}x{n}x{k} u8 x i8 -> i32, B pre-packed (nr {nr}{}), tiles {mr}x{nr}, isa {level}, {workers} thread(s)",
                if widened { ", as i16 pairs; A widened to i16 in the call" } else { "" }
            );
            let against = match reference {
                Reference::Interpreter => "eval_te of the plain matmul",
                Reference::GenericJit => "the generic schedule of the plain matmul, compiled",
            };
            println!("verified      {verified} (against {against})");
            println!("compile       {compile_ms:.2} ms");
            println!("run           {:.3} ms (median of {})", run * 1e3, timing.runs);
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
            let json = |s: &str| serde_json::Value::from(s).to_string();
            let kernels: Vec<String> = kernels.iter().map(|k| json(k)).collect();
            // Written out (not `serde_json::json!`) for the fixed decimals of each field.
            println!(
                "{{\"m\":{m},\"n\":{n},\"k\":{k},\"mr\":{mr},\"nr\":{nr},\"isa\":\"{level}\",\"threads\":{workers},\"verified\":{verified},\"compile_ms\":{compile_ms:.3},\"run_median_ms\":{:.4},\"runs\":{},\"gops\":{gops:.3},\"peak_gops\":{},\"peak_probe\":{},\"percent_of_peak\":{},\"kernels\":[{}],\"reference\":\"{}\"}}",
                run * 1e3,
                timing.runs,
                opt(peak),
                probe_name.as_deref().map_or("null".to_string(), json),
                opt(percent),
                kernels.join(","),
                reference.name()
            );
        }
    }
    if asm {
        print!("{}", compiled.disassembly());
    }
    if !verified {
        return Err(format!("result differs from the reference ({})", reference.name()).into());
    }
    Ok(())
}
