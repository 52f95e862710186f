//! An exported network called from C against `tensorlift run` on the same model and input:
//! the median time of one `NAME_run` call (the C harness, `export::harness::network_program`)
//! and `tensorlift run`'s median latency, interleaved in rounds at each thread count, with the
//! library's size and export time. For the lead's "within 3% of `tensorlift run`" check.
//!
//! `cargo build --release && cargo run --release --example export_vs_run -- MODEL.onnx
//!  [--threads 1,2] [--rounds 5] [--repeat 30] [--db FILE] [--export-threads LIST]`

use std::path::PathBuf;
use std::process::Command;

use clap::Parser;
use tensorlift::export::{LoadedLibrary, harness};
use tensorlift::graph::{Data, Value};

#[derive(Parser)]
struct Args {
    /// A quantized ONNX model with one float input.
    model: PathBuf,
    /// Thread counts (the library's TENSORLIFT_NUM_THREADS, `tensorlift run --threads`).
    #[arg(long, value_delimiter = ',', default_value = "1,2")]
    threads: Vec<usize>,
    /// Rounds of (library, run) per thread count; the figure is the median over rounds.
    #[arg(long, default_value_t = 5)]
    rounds: usize,
    /// Timed calls per measurement (median).
    #[arg(long, default_value_t = 30)]
    repeat: usize,
    /// The thread counts the library is scheduled for (`export --threads`; default: export's).
    #[arg(long)]
    export_threads: Option<String>,
    /// Tuning database, passed to both `export` and `run`.
    #[arg(long)]
    db: Option<PathBuf>,
    /// The tensorlift binary.
    #[arg(long, default_value = "target/release/tensorlift")]
    tensorlift: PathBuf,
    /// Directory for the library and the C program.
    #[arg(long, default_value = "target/export_vs_run")]
    out: PathBuf,
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Runs `command`; its stdout, or an error with its stderr.
fn output(command: &mut Command) -> Result<String, Box<dyn std::error::Error>> {
    let out = command.output()?;
    if !out.status.success() {
        return Err(format!("{command:?}: {}", String::from_utf8_lossy(&out.stderr)).into());
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The last JSON object line of `text`.
fn last_json(text: &str) -> Result<serde_json::Value, Box<dyn std::error::Error>> {
    let line = text.lines().rev().find(|l| l.starts_with('{')).ok_or("no JSON line")?;
    Ok(serde_json::from_str(line)?)
}

fn with_db(command: &mut Command, db: &Option<PathBuf>) {
    if let Some(db) = db {
        command.arg("--db").arg(db);
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let out = &args.out;
    std::fs::create_dir_all(out)?;
    let mut export = Command::new(&args.tensorlift);
    export.arg("export").arg(&args.model).arg("--out").arg(out).args(["--name", "net", "--format", "json"]);
    with_db(&mut export, &args.db);
    if let Some(threads) = &args.export_threads {
        export.args(["--threads", threads]);
    }
    let report = last_json(&output(&mut export)?)?;
    println!(
        "library: {:.1} MiB ({:.1} MiB of weights), export {:.0} ms, levels {}, threads {} (own functions: {})",
        report["size_bytes"].as_f64().unwrap_or(0.0) / 1048576.0,
        report["weights_bytes"].as_f64().unwrap_or(0.0) / 1048576.0,
        report["export_ms"].as_f64().unwrap_or(0.0),
        report["isa_levels"],
        report["threads"],
        report["thread_variants"]
    );

    let lib = LoadedLibrary::open(&out.join("libnet.so"))?;
    let specs = lib.args("run")?.to_vec();
    let inputs: Vec<_> = specs.iter().filter(|a| !a.output).collect();
    let [input] = inputs.as_slice() else { return Err("expected a model with one input".into()) };
    let n = input.shape.iter().product::<i64>() as usize;
    let values: Vec<f32> = (0..n).map(|i| ((i * 7919) % 2000) as f32 / 1000.0 - 1.0).collect();
    let dims: Vec<usize> = input.shape.iter().map(|&d| d as usize).collect();
    let bytes: Vec<u8> = values.iter().flat_map(|x| x.to_le_bytes()).collect();
    std::fs::write(out.join("in0.bin"), bytes)?;
    let npy = out.join("input.npy");
    tensorlift::npy::write(&npy, &Value::new(&dims, Data::F32(values))?)?;

    let source = out.join("time_run.c");
    std::fs::write(&source, harness::network_program("net", &specs, args.repeat))?;
    let exe = out.join("time_run");
    output(
        Command::new("cc")
            .args(["-std=c11", "-O2", "-o"])
            .arg(&exe)
            .arg(&source)
            .arg("-I")
            .arg(out)
            .arg(out.join("libnet.a"))
            .arg("-lpthread"),
    )?;

    println!("threads  library ms  run ms  library/run  probe GOPS (run's, min-max)");
    for &threads in &args.threads {
        let (mut ours, mut theirs, mut probes) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..args.rounds {
            let text = output(Command::new(&exe).arg(out).env("TENSORLIFT_NUM_THREADS", threads.to_string()))?;
            ours.push(text.trim().parse::<f64>()? / 1e6);
            let mut run = Command::new(&args.tensorlift);
            run.arg("run").arg(&args.model).arg("--input").arg(&npy);
            run.args(["--threads", &threads.to_string(), "--repeat", &args.repeat.to_string(), "--format", "json"]);
            with_db(&mut run, &args.db);
            let report = last_json(&output(&mut run)?)?;
            theirs.push(report["median_ms"].as_f64().ok_or("no median_ms")?);
            // The peak probe of the kernels' method, measured in the same run.
            probes.extend(report["probes"].as_object().into_iter().flat_map(|p| p.values().filter_map(|v| v.as_f64())));
        }
        let (a, b) = (median(ours), median(theirs));
        let (lo, hi) = probes.iter().fold((f64::MAX, 0.0f64), |(lo, hi), &p| (lo.min(p), hi.max(p)));
        println!("{threads:>7}  {a:>10.3}  {b:>6.3}  {:>11.3}  {lo:.1}-{hi:.1}", a / b);
    }
    Ok(())
}
