//! One network compiled with several sets of tuning records in one process, its inferences
//! alternated between them, each output checked equal bit for bit to the first set's: an A/B of
//! record sets that a shared machine's slow phases hit alike. Per set: the median and 10th
//! percentile of the inference's wall time and of the calling thread's CPU time (at one thread
//! the kernels run on the calling thread, so a slice other processes take from it is not
//! counted), and per partition the least of its wall times (a run no other process interrupted)
//! with the knobs it ran.
//!
//! `cargo run --release --example records_ab -- MODEL.onnx --threads 1 --isa avx2
//!  --set pretuned --set mine=mine.jsonl --set default=none [--rounds 200]`
//!
//! A set is `NAME` (the repository's pre-tuned records only; `pretuned`), `NAME=none` (default
//! knobs everywhere) or `NAME=FILE` (FILE's records over the pre-tuned ones, as `run --db`).

use std::error::Error;
use std::path::PathBuf;
use std::time::Instant;

use clap::Parser;
use tensorlift::engine::{self, CompiledGraph, Kernel, Tuning, Workload};
use tensorlift::graph::{PartitionPolicy, Value};
use tensorlift::layer::QConvAutoSpec;
use tensorlift::record::{Database, Host, pretuned_to_apply};
use tensorlift::tune::apply::RecordKnobs;
use tensorlift::{CompileOptions, IsaLevel, Target};

#[derive(Parser)]
struct Args {
    /// A quantized ONNX model.
    model: PathBuf,
    /// Threads of the kernels.
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// ISA level (scalar, avx2, avx-vnni, avx512-vnni, amx).
    #[arg(long, default_value = "avx2")]
    isa: String,
    /// A record set: NAME, NAME=none or NAME=FILE (at least one).
    #[arg(long = "set", required = true)]
    sets: Vec<String>,
    /// Inferences per set, alternated between the sets.
    #[arg(long, default_value_t = 100)]
    rounds: usize,
    /// Seed of the random input.
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

/// CPU time of the calling thread, in seconds.
fn thread_cpu() -> f64 {
    let mut t = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `t` is a valid, writable timespec for the duration of the call.
    let ok = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) } == 0;
    assert!(ok, "CLOCK_THREAD_CPUTIME_ID cannot be read");
    t.tv_sec as f64 + t.tv_nsec as f64 * 1e-9
}

/// The `q`-quantile (0 ..= 1) of `v`, nearest rank.
fn quantile(v: &[f64], q: f64) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v[((v.len() - 1) as f64 * q).round() as usize]
}

struct Set {
    name: String,
    compiled: CompiledGraph,
    wall: Vec<f64>,
    cpu: Vec<f64>,
    steps: Vec<Vec<f64>>,
}

fn compile(args: &Args, spec: &str) -> Result<Set, Box<dyn Error>> {
    let (name, source) = spec.split_once('=').map_or((spec, None), |(n, s)| (n, Some(s)));
    let level = IsaLevel::from_name(&args.isa).map_err(|e| format!("--isa {}: {e}", args.isa))?;
    let user = match source {
        Some("none") | None => Vec::new(),
        Some(path) => {
            let db = Database::load_strict(std::path::Path::new(path))?;
            if db.records.is_empty() {
                return Err(format!("set {name}: {path} holds no records").into());
            }
            db.records
        }
    };
    let pretuned = if source == Some("none") { Vec::new() } else { pretuned_to_apply()?.records };
    let records = RecordKnobs { user, pretuned, host: Host::this(level), max_threads: args.threads };
    let knobs = |w: Workload<'_>| records.knobs(w);
    let points = |spec: &QConvAutoSpec| records.auto_point(spec);
    let imported = tensorlift::onnx::load(&args.model)?;
    let partitions = imported.graph.get_partitions(PartitionPolicy::Fusion);
    let options = CompileOptions { target: Target::Level(level), threads: Some(args.threads), ..Default::default() };
    let compiled = engine::compile_tuned(imported.graph, partitions, &options, &knobs, &points)?;
    let steps = vec![Vec::with_capacity(args.rounds); compiled.steps().len()];
    Ok(Set { name: name.to_string(), compiled, wall: Vec::new(), cpu: Vec::new(), steps })
}

/// What a step's kernel runs: its knobs where it is a compiled convolution or product.
fn describe(compiled: &CompiledGraph, i: usize) -> String {
    let step = &compiled.steps()[i];
    let tuning = step.tuning.map_or("-", Tuning::name);
    let kernel = match &step.kernel {
        Kernel::Sum { conv, .. } => conv,
        k => k,
    };
    match kernel {
        Kernel::Conv(c) | Kernel::Dense(c) => format!("{tuning} {:?}", c.knobs()),
        k => format!("{tuning} {}", k.describe()),
    }
}

fn main() -> Result<(), Box<dyn Error>> {
    let args = Args::parse();
    let mut sets = args.sets.iter().map(|s| compile(&args, s)).collect::<Result<Vec<_>, _>>()?;
    let specs = sets[0].compiled.input_specs();
    let inputs: Vec<Value> = specs
        .iter()
        .enumerate()
        .map(|(i, (d, dims))| engine::random_input(*d, dims, args.seed + i as u64))
        .collect::<Result<_, _>>()?;
    let (expected, _) = sets[0].compiled.execute(&inputs)?;
    for set in &mut sets[1..] {
        let (out, _) = set.compiled.execute(&inputs)?;
        let equal = out.len() == expected.len() && out.iter().zip(&expected).all(|(o, e)| o.bits_eq(e));
        if !equal {
            return Err(format!("set {} computes another output than set {}", set.name, args.sets[0]).into());
        }
    }
    for _ in 0..args.rounds {
        for set in &mut sets {
            let (begin, cpu) = (Instant::now(), thread_cpu());
            let (_, times) = set.compiled.execute(&inputs)?;
            set.cpu.push(thread_cpu() - cpu);
            set.wall.push(begin.elapsed().as_secs_f64());
            for (v, t) in set.steps.iter_mut().zip(times) {
                v.push(t.as_secs_f64());
            }
        }
    }
    println!(
        "{} rounds, {} thread(s), {}; outputs equal bit for bit across the sets",
        args.rounds, args.threads, args.isa
    );
    println!(
        "{:<12} {:>10} {:>10} {:>10} {:>10} {:>12}",
        "set", "wall med", "wall p10", "cpu med", "cpu p10", "sum step min"
    );
    for set in &sets {
        let sum: f64 = set.steps.iter().map(|s| quantile(s, 0.0)).sum();
        println!(
            "{:<12} {:>10.3} {:>10.3} {:>10.3} {:>10.3} {:>12.3}",
            set.name,
            quantile(&set.wall, 0.5) * 1e3,
            quantile(&set.wall, 0.1) * 1e3,
            quantile(&set.cpu, 0.5) * 1e3,
            quantile(&set.cpu, 0.1) * 1e3,
            sum * 1e3
        );
    }
    println!("per step, least ms per set:");
    for i in 0..sets[0].steps.len() {
        let times: Vec<String> =
            sets.iter().map(|s| format!("{}={:.4}", s.name, quantile(&s.steps[i], 0.0) * 1e3)).collect();
        println!("{:<4} {}", sets[0].compiled.steps()[i].partition.id, times.join(" "));
        for set in &sets {
            println!("       {}: {}", set.name, describe(&set.compiled, i));
        }
    }
    Ok(())
}
