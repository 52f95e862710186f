//! The exported resnet-18 library called from C against the same functions JIT-compiled in this
//! process, per layer: median call time of each (the library's includes its argument checks and
//! dispatch, the JIT's `CompiledFunc::call` its own checks), interleaved in rounds, and the
//! library's size and build time.
//!
//! `cargo run --release --example export_vs_jit -- [--threads 1] [--rounds 5] [--repeat 30]`

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use clap::Parser;
use ir::DType;
use ir::interp::array::Array;
use schedules::resnet18::{WeightBits, uniform};
use tensorlift::export::load::ArgSpec;
use tensorlift::export::{ExportOptions, LoadedLibrary, export, harness, operators};
use tensorlift::{CompileOptions, IsaLevel, Target, Tensor};

#[derive(Parser)]
struct Args {
    /// Threads of both (the library's TENSORLIFT_NUM_THREADS, the JIT's pool).
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// Rounds of (JIT, library) per layer; the figure is the median over rounds.
    #[arg(long, default_value_t = 5)]
    rounds: usize,
    /// Timed calls per measurement (median).
    #[arg(long, default_value_t = 30)]
    repeat: usize,
    /// Directory for the library and the C programs.
    #[arg(long, default_value = "target/export_vs_jit")]
    out: String,
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Inputs as the tests draw them: u8 source, s8 weights in [-127, 127], small f32 vectors.
fn input(a: &ArgSpec, seed: u64) -> Result<Tensor, tensorlift::RuntimeError> {
    let n = a.shape.iter().product::<i64>() as usize;
    Ok(match a.dtype {
        _ if a.output => Tensor::zeros(a.dtype, &a.shape)?,
        DType::U8 => Tensor::from_array(&Array::from_i64(DType::U8, &a.shape, &uniform(n, seed, 0, 255))),
        DType::I8 => Tensor::from_array(&Array::from_i64(DType::I8, &a.shape, &uniform(n, seed, -127, 127))),
        _ => {
            let v: Vec<f64> = uniform(n, seed, 1, 1000).iter().map(|&x| x as f64 * 2e-6).collect();
            Tensor::from_array(&Array::from_f64(DType::F32, &a.shape, &v))
        }
    })
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let level = IsaLevel::detect().ok_or("no supported ISA level")?;
    let out = Path::new(&args.out);
    let start = Instant::now();
    let ops = operators::resnet18(&IsaLevel::ALL, WeightBits::Eight, |_| None)?;
    let lib = export(&ops, &ExportOptions::new("r18"), out)?;
    let build_s = start.elapsed().as_secs_f64();
    let size = std::fs::metadata(&lib.shared)?.len();
    let loaded = LoadedLibrary::open(&lib.shared)?;
    println!("cpu: {}, level {level}, {} thread(s)", tensorlift::isa::cpu_name(), args.threads);
    println!(
        "library: lib{}.so {:.0} KiB, {} operators x {} levels, built in {build_s:.2} s (codegen {:.0} ms, C + link {:.0} ms)",
        lib.name,
        size as f64 / 1024.0,
        ops.len(),
        lib.levels.len(),
        lib.codegen_time.as_secs_f64() * 1e3,
        lib.link_time.as_secs_f64() * 1e3
    );
    println!("selected by the library on this CPU: {}", loaded.selected_isa());

    struct Layer {
        name: String,
        dir: std::path::PathBuf,
        exe: std::path::PathBuf,
        jit: Vec<tensorlift::CompiledFunc>,
        prep: Vec<Tensor>,
        run: Vec<Tensor>,
        jit_ms: Vec<f64>,
        lib_ms: Vec<f64>,
    }
    let options = CompileOptions { target: Target::Level(level), threads: Some(args.threads), ..Default::default() };
    let mut layers = Vec::new();
    for pair in ops.chunks(2) {
        let name = pair[1].name.clone();
        let (prep_spec, run_spec) = (loaded.args(&pair[0].name)?.to_vec(), loaded.args(&name)?.to_vec());
        let dir = out.join(&name);
        std::fs::create_dir_all(&dir)?;
        let prep: Vec<Tensor> =
            prep_spec.iter().enumerate().map(|(i, a)| input(a, 7 + i as u64)).collect::<Result<_, _>>()?;
        let run: Vec<Tensor> =
            run_spec.iter().enumerate().map(|(i, a)| input(a, 100 + i as u64)).collect::<Result<_, _>>()?;
        for (prefix, tensors) in [("prep", &prep), ("run", &run)] {
            for (i, t) in tensors.iter().enumerate() {
                std::fs::write(dir.join(format!("{prefix}{i}.bin")), t.as_bytes())?;
            }
        }
        let source = dir.join("bench.c");
        std::fs::write(&source, harness::layer_program("r18", &name, &prep_spec, &run_spec, args.repeat))?;
        let exe = dir.join("bench");
        let status = Command::new("cc")
            .args(["-std=c11", "-O2", "-o"])
            .arg(&exe)
            .arg(&source)
            .arg(format!("-I{}", out.display()))
            .arg(format!("-L{}", out.display()))
            .arg(format!("-Wl,-rpath,{}", std::fs::canonicalize(out)?.display()))
            .arg("-lr18")
            .status()?;
        if !status.success() {
            return Err(format!("cc failed for {name}").into());
        }
        let jit =
            pair.iter().map(|op| tensorlift::compile(&op.funcs[&level], &options)).collect::<Result<Vec<_>, _>>()?;
        layers.push(Layer { name, dir, exe, jit, prep, run, jit_ms: Vec::new(), lib_ms: Vec::new() });
    }

    for _ in 0..args.rounds {
        for layer in &mut layers {
            let mut prep = layer.prep.clone();
            layer.jit[0].call(&mut prep.iter_mut().collect::<Vec<_>>())?;
            let mut run = layer.run.clone();
            run[1] = prep[1].clone();
            run[2] = prep[2].clone();
            let mut refs: Vec<&mut Tensor> = run.iter_mut().collect();
            layer.jit[1].call(&mut refs)?;
            let times: Vec<f64> = (0..args.repeat)
                .map(|_| {
                    let t = Instant::now();
                    layer.jit[1].call(&mut refs).map(|()| t.elapsed().as_secs_f64() * 1e3)
                })
                .collect::<Result<_, _>>()?;
            layer.jit_ms.push(median(times));
            let output = Command::new(&layer.exe)
                .arg(&layer.dir)
                .env("TENSORLIFT_NUM_THREADS", args.threads.to_string())
                .output()?;
            if !output.status.success() {
                return Err(format!("{}: {}", layer.name, String::from_utf8_lossy(&output.stderr)).into());
            }
            let ns: f64 = String::from_utf8_lossy(&output.stdout).trim().parse()?;
            layer.lib_ms.push(ns / 1e6);
            if std::fs::read(layer.dir.join("out.bin"))?
                != run.last().map(|t| t.as_bytes().to_vec()).unwrap_or_default()
            {
                return Err(format!("{}: the library's output differs from the JIT's", layer.name).into());
            }
        }
    }
    println!(
        "\n{:<6} {:>10} {:>10} {:>9}  (median over {} rounds of the median of {} calls; outputs equal)",
        "layer", "jit ms", "lib ms", "lib/jit", args.rounds, args.repeat
    );
    for layer in &layers {
        let (jit, lib) = (median(layer.jit_ms.clone()), median(layer.lib_ms.clone()));
        println!("{:<6} {jit:>10.3} {lib:>10.3} {:>9.3}", layer.name, lib / jit);
    }
    Ok(())
}
