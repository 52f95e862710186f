//! `tensorlift gemm`: the tensorized u8 × i8 → i32 GEMM (`schedules::x86::gemm_int8`, B
//! pre-packed by `nn::pack_b_vnni`'s layout), checked against a reference (`reference`) and
//! timed against the peak probe of its kernel's method. At a level without VNNI where the
//! `vpmaddubsw` triple is not exact on A's range, the operands are pre-widened instead: B
//! packed as i16 pairs (`nn::pack_b_i16`) before timing, A widened to i16 by a stage of the
//! call, and the kernel is `vpmaddwd` + `vpaddd`. Any M, N, K: the packing pads B with zero
//! rows and columns, the call pads A along K where needed (`nn::gemm_source`), and tiles are
//! capped at C (`schedules::x86::schedule_gemm_int8`).

use std::error::Error;

use ir::DType;
use ir::intrin::pair_sums_fit_i16;
use ir::te::{placeholder, placeholder_in_range};
use schedules::nn::{gemm_source, matmul_packed, pack_b_i16, pack_b_vnni};
use schedules::x86::{GemmInt8Knobs, MAX_NR, gemm_int8, schedule_gemm_source};
use tensorlift::bench::{pattern_values, time_against_peak};
use tensorlift::runtime::peak::Probe;
use tensorlift::{CompileOptions, IsaLevel, Tensor, build};

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
    /// Rows of the call's tile; a value above M is capped at M, and the output says so
    /// (default: 8 where it divides M, else its largest divisor in 4..=8, else its smallest in
    /// 9..=64, else 8; M itself below 4). Rows that do not fill a tile run loops instead of the
    /// kernel.
    #[arg(long, value_parser = positive::<i64>, allow_negative_numbers = true)]
    mr: Option<i64>,
    /// Columns of the call's tile and of B's packing panels, at most 256; a value above N is
    /// capped at N, and the output says so (default: 32 where it divides N, else 16 where it
    /// does (16 first for the exact AVX2 GEMM, whose B is i16 pairs: a panel of the same
    /// bytes), else N up to 256, else its largest divisor in 16..=256, else 16). The last
    /// panel is padded with zero columns; columns that do not fill a tile run loops instead of
    /// the kernel.
    #[arg(long, value_parser = positive::<i64>, allow_negative_numbers = true)]
    nr: Option<i64>,
    /// Declare A's values to lie in 0..=A_MAX (checked on every call); at most 127 lets the
    /// exact GEMM use `vpmaddubsw` on AVX2 where A is read in place (K a multiple of 4; the
    /// call's zero-padded copy of A has no declared range).
    #[arg(long, value_parser = clap::value_parser!(i64).range(0..=255), allow_negative_numbers = true)]
    a_max: Option<i64>,
    /// Print the disassembly of every function the call runs, kernels included.
    #[arg(long)]
    asm: bool,
    #[arg(long, value_enum, default_value_t = Format::Table)]
    format: Format,
}

/// `Bp[jo, ko, ji, ki] = B[ko*P + ki, jo*nr + ji]` of the row-major `B: [k, n]` in groups of
/// `pack` (`nn::pack_b_vnni`: 4, `nn::pack_b_i16`: 2, each value through `elem`), zero past
/// `B`'s rows and columns, shape `[⌈n/nr⌉, ⌈k/pack⌉, nr, pack]`; done before timing.
fn pack_b<T: Copy + Default>(b: &[i8], (k, n, nr): (usize, usize, usize), pack: usize, elem: fn(i8) -> T) -> Vec<T> {
    let (panels, groups) = (n.div_ceil(nr), k.div_ceil(pack));
    let mut out = vec![T::default(); panels * groups * nr * pack];
    for jo in 0..panels {
        for ko in 0..groups {
            for ji in 0..nr {
                for ki in 0..pack {
                    let (row, col) = (ko * pack + ki, jo * nr + ji);
                    if row < k && col < n {
                        out[((jo * groups + ko) * nr + ji) * pack + ki] = elem(b[row * n + col]);
                    }
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
    let defaults = GemmInt8Knobs::for_shape(m, n, widened);
    if let Some(nr) = nr.filter(|&nr| nr > MAX_NR) {
        return Err(format!("--nr {nr} must be at most {MAX_NR} (a row of a tile is one vector of nr lanes)").into());
    }
    // Tiles larger than C are capped at it (`schedule_gemm_int8` does so too); say so.
    let mut adjusted = Vec::new();
    let mut cap = |flag: &str, value: i64, (dim, size): (&str, i64)| {
        if value > size {
            adjusted.push(format!("--{flag} {value} capped at {dim} = {size}"));
            size
        } else {
            value
        }
    };
    let mr = mr.map_or(defaults.mr, |mr| cap("mr", mr, ("M", m)));
    let nr = nr.map_or(defaults.nr, |nr| cap("nr", nr, ("N", n)));
    let pack: i64 = if widened { 2 } else { 4 };
    let command = format!("gemm --m {m} --n {n} --k {k}");
    // Sizes rounded up to whole groups and panels (overflowing for sizes near 2^63).
    let round_up = |v: i64, to: i64, buffer| {
        (v as u64)
            .checked_next_multiple_of(to as u64)
            .and_then(|v| i64::try_from(v).ok())
            .ok_or_else(|| memory::MemoryError::Overflow { command: command.clone(), buffer })
    };
    let (kp, np) = (round_up(k, pack, "A")?, round_up(n, nr, "B")?);
    // A twice (its bytes, then the tensor) and the call's copy (widened, or padded along K),
    // B twice and packed twice (all within its padded shape), C and the reference's C.
    let a_copy = if widened { 2 } else { u64::from(kp != k) };
    let packed_bytes = if widened { 2 } else { 1 };
    memory::check(
        &command,
        &[
            ("A", &[m, kp], 2 + a_copy),
            ("B", &[kp, np], 2 + 2 * packed_bytes),
            ("C", &[m, n], 4),
            ("the reference's C", &[m, n], 4),
        ],
    )?;
    let a = match a_max {
        Some(hi) => placeholder_in_range([m, k], DType::U8, 0..=hi, "A")?,
        None => placeholder([m, k], DType::U8, "A")?,
    };
    let b = placeholder([k, n], DType::I8, "B")?;
    // B arrives packed (a parameter shaped like the packing's result): the layout transform
    // is not part of the timed GEMM. Widening A (and padding it along K) is.
    let packed = if widened { pack_b_i16(&b, nr, "Bp")? } else { pack_b_vnni(&b, nr, "Bp")? };
    let bp_shape: [i64; 4] = packed.shape().try_into().map_err(|_| "the packing returns a rank-4 tensor")?;
    let bp = placeholder(bp_shape, packed.dtype(), "Bp")?;
    let source = gemm_source(&a, pack, if widened { DType::I16 } else { DType::U8 }, "A'")?;
    let c = matmul_packed(source.as_ref().unwrap_or(&a), &bp, n, DType::I32, "C")?;
    let knobs = GemmInt8Knobs { mr, nr, parallel: threads != Some(1) };
    let mut s = gemm_int8(&c, knobs)?;
    if let Some(source) = &source {
        schedule_gemm_source(&mut s, source, knobs.parallel)?;
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
            if !adjusted.is_empty() {
                println!("adjusted      {}", adjusted.join(", "));
            }
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
            let adjusted: Vec<String> = adjusted.iter().map(|a| json(a)).collect();
            // Written out (not `serde_json::json!`) for the fixed decimals of each field.
            println!(
                "{{\"m\":{m},\"n\":{n},\"k\":{k},\"mr\":{mr},\"nr\":{nr},\"adjusted\":[{}],\"isa\":\"{level}\",\"threads\":{workers},\"verified\":{verified},\"compile_ms\":{compile_ms:.3},\"run_median_ms\":{:.4},\"runs\":{},\"gops\":{gops:.3},\"peak_gops\":{},\"peak_probe\":{},\"percent_of_peak\":{},\"kernels\":[{}],\"reference\":\"{}\"}}",
                adjusted.join(","),
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
