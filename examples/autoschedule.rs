//! Auto-scheduling operators that have no hand schedule: each op of the catalog gets its
//! rule-generated space (`schedules::auto::Space`); a few hand-picked points of every sketch
//! are applied, JIT-compiled, checked bit for bit against the reference and timed against the
//! generic schedule.
//!
//! `cargo run --release --example autoschedule [-- --threads N --repeat N --full]`
//!
//! By default the ops run at reduced shapes and are checked against the reference interpreter
//! (`eval_te`); `--full` runs the suite shapes (`OpSpec::suite`), where the
//! interpreter would take minutes, and checks against the generic schedule's compiled result.

use std::time::Instant;

use tensorlift::bench::{pattern, time_and_check};
use tensorlift::isa::IsaLevel;
use tensorlift::prelude::*;
use tensorlift::schedules::auto::{AutoPoint, Sketch, Space, SpaceOptions};
use tensorlift::schedules::catalog::{MatmulDtype, OpSpec};

fn reduced_suite() -> Vec<OpSpec> {
    vec![
        OpSpec::Conv2d { ic: 32, oc: 32, h: 56, w: 56, kh: 3, kw: 3, stride: 1, pad: 1, groups: 32 },
        OpSpec::BatchMatmul { b: 4, m: 128, n: 64, k: 128 },
        OpSpec::Conv2d { ic: 256, oc: 64, h: 14, w: 14, kh: 1, kw: 1, stride: 1, pad: 0, groups: 1 },
        OpSpec::Conv2d { ic: 64, oc: 64, h: 14, w: 14, kh: 3, kw: 3, stride: 1, pad: 1, groups: 1 },
        OpSpec::Matmul { m: 128, n: 128, k: 128, dtype: MatmulDtype::F32 },
        OpSpec::Softmax { rows: 256, cols: 1024 },
        OpSpec::Layernorm { rows: 128, cols: 768 },
        OpSpec::Pool { c: 64, h: 56, w: 56, k: 3, stride: 2 },
    ]
}

/// Deterministic data: integers over their whole range, floats in [-4, 4).
fn data(t: &tensorlift::ir::Tensor, seed: i64) -> Array {
    if t.dtype().is_float() {
        let n: i64 = t.shape().iter().product();
        let v: Vec<f64> = (0..n).map(|x| ((x * 7919 + seed * 104_729) % 1024 - 512) as f64 / 128.0).collect();
        Array::from_f64(t.dtype(), t.shape(), &v)
    } else {
        pattern(t.dtype(), t.shape(), seed)
    }
}

/// A point choosing, for every decision, the largest choice at most `target` of its kind:
/// all threads, kernel tiles of 8 rows and 32 columns, tiles up to `tile`, unrolled.
fn picked(sketch: &Sketch, tile: i64) -> AutoPoint {
    let values = sketch
        .decisions
        .iter()
        .map(|d| {
            let target = match d.name.as_str() {
                "threads" => i64::MAX,
                "gemm.mr" => 8,
                "gemm.nr" => 32,
                "gemm.cols_outer" => 0,
                n if n.ends_with(".unroll") => 1,
                _ => tile,
            };
            let below = d.choices.iter().copied().filter(|c| *c <= target).max();
            below.unwrap_or(d.choices[0])
        })
        .collect();
    AutoPoint { sketch: sketch.name.clone(), values }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let flag = |name: &str, default: usize| -> usize {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    let threads = flag("--threads", 1);
    let repeat = flag("--repeat", 5);
    let full = args.iter().any(|a| a == "--full");
    let level = IsaLevel::detect().ok_or("no supported ISA level")?;
    let options = SpaceOptions { max_threads: threads, vector_bytes: 32, vnni: level.has_vnni() };
    let compile = CompileOptions { threads: Some(threads), ..CompileOptions::default() };
    println!("level {level}, threads {threads}, {}", if full { "suite shapes" } else { "reduced shapes" });
    let ops = if full { OpSpec::suite() } else { reduced_suite() };
    let mut ratios = Vec::new();
    for spec in ops {
        let def = spec.build()?;
        let space = Space::new(&def.inputs, &def.outputs, options.clone());
        let inputs: Vec<Array> = def.inputs.iter().enumerate().map(|(i, t)| data(t, i as i64 + 1)).collect();
        let input_refs: Vec<&Array> = inputs.iter().collect();

        let generic = space.apply(&space.default_point())?;
        let generic_args: Vec<&tensorlift::ir::Tensor> = generic.args.iter().collect();
        let generic_kernel = build(&generic.schedule, &generic_args, "generic", &compile)?;
        let expected = if full {
            let mut tensors: Vec<Tensor> = inputs.iter().map(Tensor::from_array).collect();
            let out = &def.outputs[0];
            tensors.push(Tensor::zeros(out.dtype(), out.shape())?);
            generic_kernel.compiled.call(&mut tensors.iter_mut().collect::<Vec<_>>())?;
            tensors.pop().map(|t| t.to_array()).ok_or("no output")?
        } else {
            let pairs: Vec<(&tensorlift::ir::Tensor, &Array)> = def.inputs.iter().zip(&inputs).collect();
            eval_te(&def.output_refs(), &pairs)?.remove(0)
        };
        let (generic_time, ok) = time_and_check(&generic_kernel.compiled, &input_refs, &expected, repeat.min(3))?;
        if !ok {
            return Err(format!("{}: the generic schedule differs from the reference", spec.label()).into());
        }
        let mut best: Option<(f64, AutoPoint)> = None;
        for sketch in space.sketches().iter().filter(|s| !s.decisions.is_empty()) {
            for tile in [4, 8, 16, 32] {
                let point = picked(sketch, tile);
                let scheduled = match space.apply(&point) {
                    Ok(s) => s,
                    Err(e) => {
                        println!("  {point:?}: {e}");
                        continue;
                    }
                };
                let sargs: Vec<&tensorlift::ir::Tensor> = scheduled.args.iter().collect();
                let start = Instant::now();
                let kernel = build(&scheduled.schedule, &sargs, "auto", &compile)?;
                let compile_ms = start.elapsed().as_secs_f64() * 1e3;
                let (timing, ok) = time_and_check(&kernel.compiled, &input_refs, &expected, repeat)?;
                if !ok {
                    return Err(format!("{} {point:?}: differs from the reference", spec.label()).into());
                }
                println!(
                    "  {:<12} {:?}: {:.3} ms (compile {compile_ms:.0} ms), bit-exact",
                    point.sketch,
                    point.values,
                    timing.median_s * 1e3
                );
                if best.as_ref().is_none_or(|(t, _)| timing.median_s < *t) {
                    best = Some((timing.median_s, point));
                }
            }
        }
        let (best_s, best_point) = best.ok_or("no point applied")?;
        let ratio = generic_time.median_s / best_s;
        ratios.push(ratio);
        println!(
            "{:<36} generic {:>9.3} ms  best {:>8.3} ms ({} {:?})  {:>6.1}x  {:.1} GOPS",
            spec.label(),
            generic_time.median_s * 1e3,
            best_s * 1e3,
            best_point.sketch,
            best_point.values,
            ratio,
            def.ops / best_s / 1e9
        );
    }
    let geomean = ratios.iter().map(|r| r.ln()).sum::<f64>() / ratios.len().max(1) as f64;
    println!("geometric mean speed-up over the generic schedule: {:.1}x", geomean.exp());
    Ok(())
}
