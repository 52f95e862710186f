//! Auto-scheduling operators that have no hand schedule: two definitions written here — an int8
//! dense layer with its weights stored one row per output (`W[n, k]`), declared constant, and
//! f32 squared distances between two sets of points — each searched in the rules' space by the
//! learned search (`tune::auto::autoschedule`), every point checked bit for bit against the
//! reference interpreter; prints the space's sketches, the generic and tuned times and the best
//! point, then compiles the best point, prepares its constants once and runs it.
//!
//! `cargo run --release --example autoschedule [-- --trials N --threads N]`

use tensorlift::IsaLevel;
use tensorlift::ir::TeError;
use tensorlift::prelude::*;
use tensorlift::schedules::catalog::Definition;
use tensorlift::tune::auto::{AutoOptions, autoschedule};
use tensorlift::tune::op_bench::op_inputs;

/// `C[i, j] = Σ_k i32(A[i, k]) · i32(W[j, k])`, u8 activations and i8 weights known when the
/// function is compiled (a constant: an auto-tensorized point packs them once, not per call).
fn dense_nt(m: i64, n: i64, k: i64) -> Result<Definition, TeError> {
    let a = placeholder([m, k], DType::U8, "A")?;
    let w = placeholder([n, k], DType::I8, "W")?;
    let r = reduce_axis(k, "k")?;
    let c = compute(
        [m, n],
        |i| sum(DType::I32, &[&r], a.at([&i[0], &r]).cast(DType::I32) * w.at([&i[1], &r]).cast(DType::I32)),
        "C",
    )?;
    Ok(Definition {
        inputs: vec![a, w.clone()],
        outputs: vec![c],
        constants: vec![w],
        ops: (2 * m * n * k) as f64,
        params: vec![],
    })
}

/// `D[i, j] = Σ_d (X[i, d] − Y[j, d])²` in f32, summed in increasing `d`.
fn squared_distances(m: i64, n: i64, dims: i64) -> Result<Definition, TeError> {
    let x = placeholder([m, dims], DType::F32, "X")?;
    let y = placeholder([n, dims], DType::F32, "Y")?;
    let r = reduce_axis(dims, "d")?;
    let d = compute(
        [m, n],
        |i| {
            let diff = x.at([&i[0], &r]) - y.at([&i[1], &r]);
            sum(DType::F32, &[&r], &diff * &diff)
        },
        "D",
    )?;
    Ok(Definition {
        inputs: vec![x, y],
        outputs: vec![d],
        constants: vec![],
        ops: (3 * m * n * dims) as f64,
        params: vec![],
    })
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let flag = |name: &str, default: usize| -> usize {
        let value = args.iter().position(|a| a == name).and_then(|i| args.get(i + 1));
        value.and_then(|v| v.parse().ok()).unwrap_or(default)
    };
    let level = IsaLevel::detect().ok_or("no supported ISA level on this CPU")?;
    let mut options = AutoOptions::new(level, flag("--trials", 48));
    options.max_threads = flag("--threads", 1);
    let ops = [
        ("dense_nt 256x256x512 u8", dense_nt(256, 256, 512)?),
        ("sqdist 512x512x64 f32", squared_distances(512, 512, 64)?),
    ];
    for (name, def) in ops {
        let work = def.ops;
        let result = autoschedule(name, def.clone(), &options)?;
        let sketches: Vec<&str> = result.listing.lines().filter_map(|l| l.strip_prefix("sketch ")).collect();
        let gops = |s: f64| work / s / 1e9;
        println!("{name}: sketches {sketches:?}");
        println!(
            "  generic {:.3} ms ({:.2} GOPS), tuned {:.3} ms ({:.2} GOPS): {:.1}x after {} verified trials in {:.1} s",
            result.default_seconds * 1e3,
            gops(result.default_seconds),
            result.best_seconds * 1e3,
            gops(result.best_seconds),
            result.speedup(),
            result.log.trials.iter().filter(|t| t.seconds.is_some()).count(),
            result.elapsed.as_secs_f64(),
        );
        println!("  best point: sketch {} values {:?}", result.point.sketch, result.point.values);
        // Compiled with its prepare functions: the constants prepared once, then called.
        let compiled = result.compile()?;
        let mut args = compiled.prepare(op_inputs(&def).iter().map(Tensor::from_array).collect())?;
        for out in &def.outputs {
            args.push(Tensor::zeros(out.dtype(), out.shape())?);
        }
        let mut refs: Vec<&mut Tensor> = args.iter_mut().collect();
        compiled.main.compiled.call(&mut refs)?;
        println!("  compiled: {} prepare function(s) run once, then the call", compiled.prepare.len());
    }
    Ok(())
}
