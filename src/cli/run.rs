//! `tensorlift run MODEL.onnx`: imports a model, partitions it (fusion), compiles every
//! partition for this CPU, runs it on an input (a `.npy` file, or seeded random data) and
//! prints the partitions, the compile time, the median latency and each partition's share,
//! with the peak probe of each kernel's method measured in the same process.

use std::collections::BTreeMap;
use std::error::Error;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use tensorlift::CompileOptions;
use tensorlift::bench::median;
use tensorlift::engine::{self, CompiledGraph, Kernel, Tuning, Workload};
use tensorlift::graph::{PartitionPolicy, Value, reference};
use tensorlift::kernels::peak::ProbeKind;
use tensorlift::layer::QConvAutoSpec;
use tensorlift::record::{Host, pretuned_to_apply};
use tensorlift::runtime::peak::Probe;
use tensorlift::tune::apply::RecordKnobs;

use super::common::{Format, IsaChoice, positive, thread_count, user_records};

#[derive(clap::Args)]
pub struct Args {
    /// The ONNX model (float, QDQ or QOperator; docs/onnx.md).
    model: PathBuf,
    /// The input as a .npy file of the model input's dtype and shape (default: seeded random
    /// data, uniform in [-1, 1) for floats and over the whole range for integers).
    #[arg(long)]
    input: Option<PathBuf>,
    /// Write the output here as .npy, in the model output's dtype.
    #[arg(long)]
    output: Option<PathBuf>,
    /// Threads for the kernels' parallel loops (default: one per core).
    #[arg(long, value_parser = thread_count, allow_negative_numbers = true)]
    threads: Option<usize>,
    /// ISA level of the generated code and kernels (`auto`: the best this CPU has, or
    /// TENSORLIFT_ISA when set).
    #[arg(long, value_enum, default_value_t = IsaChoice::Auto)]
    isa: IsaChoice,
    /// Timed inferences (the median is reported) after one warm-up.
    #[arg(long, default_value_t = 20, value_parser = positive::<usize>, allow_negative_numbers = true)]
    repeat: usize,
    /// `fusion` (quantized patterns computed in integers), `fusion-without-sum` (the same, but a
    /// convolution's residual add is a partition of its own) or `debug` (one op per partition).
    #[arg(long, value_enum, default_value_t = PolicyChoice::Fusion)]
    policy: PolicyChoice,
    /// The seed of the random input.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Apply the best record of this tuning database (`tune --db`) to each convolution and
    /// product whose workload it holds on this CPU; else the repository's pre-tuned records;
    /// else the default knobs. The partition table says which (`tuned`, `pretuned`, `default`).
    /// A missing file or a line that is not a record is a warning, as with `resnet18 --db`.
    #[arg(long)]
    db: Option<PathBuf>,
    /// Also evaluate the partitioned graph with the graph's plain-Rust reference (slow: seconds
    /// for a full-size network) and check that every output is equal bit for bit.
    #[arg(long)]
    verify: bool,
    /// Ignore every database: the default knobs everywhere.
    #[arg(long, conflicts_with = "db")]
    no_db: bool,
    /// Time each partition after running it once more right before (`CompiledGraph::
    /// execute_warm`): its operands, weights and code in cache, so that the difference from a
    /// run without this flag is what fetching them costs. The median latency then counts both
    /// runs of every partition.
    #[arg(long)]
    warm_steps: bool,
    #[arg(long, value_enum, default_value_t = Format::Table)]
    format: Format,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum PolicyChoice {
    Fusion,
    FusionWithoutSum,
    Debug,
}

/// One partition's row of the report.
struct Row {
    id: String,
    kind: &'static str,
    ops: Vec<String>,
    kernel: String,
    tuning: &'static str,
    median_ms: f64,
    compile_ms: f64,
    /// Of `compile_ms`, preparing the weights (compiled kernels only).
    prepare_ms: Option<f64>,
    gops: Option<f64>,
    probe: Option<ProbeKind>,
    why: Option<String>,
}

pub fn run(args: Args) -> Result<(), Box<dyn Error>> {
    let Args { model, input, output, threads, isa, repeat, policy, seed, db, no_db, verify, warm_steps, format } = args;
    let options = CompileOptions { target: isa.target(), threads, ..CompileOptions::default() };
    let level = options.target.level()?;
    let (start, cpu_start) = (Instant::now(), process_cpu());
    // The tuning records are parsed on another core while the model is imported (neither
    // needs the other), and the table layers' keys the records' lookups compare are computed
    // (once per process) on a third thread meanwhile, where there are records to look up: the
    // three take about as long each, so none waits for the sum of two.
    let (imported, records) = std::thread::scope(|scope| {
        if db.is_some() || !no_db {
            scope.spawn(tensorlift::tune::warm_table_keys);
        }
        let records = scope.spawn(|| -> Result<_, String> {
            let user = match &db {
                Some(path) => user_records(path).map_err(|e| e.to_string())?,
                None => Vec::new(),
            };
            let pretuned = if no_db { Vec::new() } else { pretuned_to_apply().map_err(|e| e.to_string())?.records };
            Ok((user, pretuned))
        });
        let imported = tensorlift::onnx::load(&model);
        (imported, records.join())
    });
    let imported = imported?;
    let import = start.elapsed();
    let policy = match policy {
        PolicyChoice::Fusion => PartitionPolicy::Fusion,
        PolicyChoice::FusionWithoutSum => PartitionPolicy::FusionWithoutSum,
        PolicyChoice::Debug => PartitionPolicy::Debug,
    };
    let partitions = imported.graph.get_partitions(policy);
    let partition = start.elapsed() - import;
    let reference_partitions = verify.then(|| partitions.clone());
    let max_threads = threads.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let (user, pretuned) = records.map_err(|_| "the thread parsing the tuning records panicked")??;
    let records = RecordKnobs { user, pretuned, host: Host::this(level), max_threads };
    let knobs = |w: Workload<'_>| records.knobs(w);
    let points = |spec: &QConvAutoSpec| records.auto_point(spec);
    let engine_start = Instant::now();
    let mut compiled = engine::compile_tuned(imported.graph, partitions, &options, &knobs, &points)?;
    for warning in compiled.warnings() {
        eprintln!("warning: {warning}");
    }
    let (compile, compile_cpu) = (start.elapsed(), process_cpu().saturating_sub(cpu_start));
    let phases = Phases { import, partition, engine: engine_start.elapsed(), jobs: compiled.jobs_time() };

    let specs = compiled.input_specs();
    let inputs: Vec<Value> = match (&input, specs.as_slice()) {
        (Some(path), [_]) => vec![tensorlift::npy::read(path)?],
        (Some(_), _) => return Err(format!("--input gives one value; the model has {} inputs", specs.len()).into()),
        (None, _) => specs
            .iter()
            .enumerate()
            .map(|(i, (d, dims))| engine::random_input(*d, dims, seed + i as u64))
            .collect::<Result<_, _>>()?,
    };
    let (outputs, _) = compiled.execute(&inputs)?;
    let verified = match reference_partitions {
        Some(partitions) => {
            let graph = compiled.graph();
            let named: Vec<_> = graph.graph().inputs().iter().copied().zip(inputs.iter().cloned()).collect();
            let expected = reference::run(graph, &partitions, &named)?;
            let equal =
                expected.len() == outputs.len() && expected.iter().zip(&outputs).all(|((_, e), o)| o.bits_eq(e));
            if !equal {
                return Err("the output differs from the graph's reference".into());
            }
            Some(true)
        }
        None => None,
    };
    let mut totals = Vec::with_capacity(repeat);
    let mut per_step: Vec<Vec<f64>> = vec![Vec::with_capacity(repeat); compiled.steps().len()];
    for _ in 0..repeat {
        let begin = Instant::now();
        let (_, times) = if warm_steps { compiled.execute_warm(&inputs)? } else { compiled.execute(&inputs)? };
        totals.push(begin.elapsed().as_secs_f64());
        for (v, t) in per_step.iter_mut().zip(times) {
            v.push(t.as_secs_f64());
        }
    }
    let median_ms = median(totals) * 1e3;
    if let (Some(path), Some(out)) = (&output, outputs.first()) {
        tensorlift::npy::write(path, out)?;
    }
    let threads_used = threads.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let rows = rows(&compiled, &per_step);
    let probes = probe_rates(&rows, threads_used)?;
    let run =
        Run { phases, compile, compile_cpu, median_ms, threads: threads_used, isa: level.name(), verified, warm_steps };
    report(&compiled, &rows, &probes, &run, output.as_ref(), format);
    Ok(())
}

fn rows(compiled: &CompiledGraph, per_step: &[Vec<f64>]) -> Vec<Row> {
    let graph = compiled.graph();
    compiled
        .steps()
        .iter()
        .zip(per_step)
        .map(|(step, times)| {
            let ms = median(times.clone()) * 1e3;
            // A convolution with its residual add is probed and timed as the convolution.
            let kernel = match &step.kernel {
                Kernel::Sum { conv, .. } => conv,
                k => k,
            };
            let (probe, why) = match kernel {
                Kernel::Conv(c) | Kernel::Dense(c) => (Probe::for_function(c.func()).map(|p| p.kind), None),
                Kernel::Reference { why } => (None, Some(why.clone())),
                _ => (None, None),
            };
            Row {
                id: step.partition.id.to_string(),
                kind: step.partition.kind.name(),
                ops: step
                    .partition
                    .ops
                    .iter()
                    .filter_map(|&o| graph.op(o))
                    .map(|op| format!("{}({})", op.kind.name(), op.name))
                    .collect(),
                kernel: step.kernel.describe(),
                tuning: step.tuning.map_or("-", Tuning::name),
                median_ms: ms,
                compile_ms: step.compile.as_secs_f64() * 1e3,
                prepare_ms: match kernel {
                    Kernel::Conv(c) | Kernel::Dense(c) => Some(c.prepare_time().as_secs_f64() * 1e3),
                    _ => None,
                },
                gops: (step.kernel.ops() > 0).then(|| step.kernel.ops() as f64 / (ms * 1e-3) / 1e9),
                probe,
                why,
            }
        })
        .collect()
}

/// The GOPS of each probe the partitions' kernels use, on the run's threads (median of 5).
fn probe_rates(rows: &[Row], threads: usize) -> Result<BTreeMap<String, f64>, Box<dyn Error>> {
    let mut rates = BTreeMap::new();
    for kind in rows.iter().filter_map(|r| r.probe) {
        let name = kind.to_string();
        if rates.contains_key(&name) {
            continue;
        }
        let probe = Probe::of(kind)?;
        let iterations = probe.calibrate(Duration::from_millis(5));
        let runs = (0..5).map(|_| probe.gops_on_pool(iterations, threads)).collect::<Result<Vec<_>, _>>()?;
        rates.insert(name, median(runs));
    }
    Ok(rates)
}

/// Where the compile time went (wall time of each phase, in order).
struct Phases {
    /// Reading, decoding and importing the file (the tuning records parsed meanwhile).
    import: Duration,
    /// `get_partitions`.
    partition: Duration,
    /// `engine::compile_with`: planning, the jobs, the buffers.
    engine: Duration,
    /// Of `engine`, the convolutions and products compiled and prepared on every core.
    jobs: Duration,
}

/// The whole run's figures.
struct Run {
    phases: Phases,
    compile: Duration,
    /// The process's CPU time (every thread, user and system) over `compile`.
    compile_cpu: Duration,
    median_ms: f64,
    threads: usize,
    isa: &'static str,
    /// Whether the output equalled the reference's (`--verify`).
    verified: Option<bool>,
    /// Each partition timed after a run of its own (`--warm-steps`).
    warm_steps: bool,
}

fn report(
    compiled: &CompiledGraph,
    rows: &[Row],
    probes: &BTreeMap<String, f64>,
    run: &Run,
    output: Option<&PathBuf>,
    format: Format,
) {
    let Run { ref phases, compile, compile_cpu, median_ms, threads, isa, verified, warm_steps } = *run;
    let import = phases.import;
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let pct = |r: &Row| Some(100.0 * r.gops? / probes.get(&r.probe?.to_string())?);
    let compile_ms = compile.as_secs_f64() * 1e3;
    if format == Format::Json {
        let partitions: Vec<_> = rows
            .iter()
            .map(|r| {
                serde_json::json!({
                    "id": r.id, "kind": r.kind, "ops": r.ops, "kernel": r.kernel, "tuning": r.tuning,
                    "median_ms": r.median_ms, "compile_ms": r.compile_ms, "prepare_ms": r.prepare_ms, "gops": r.gops, "pct_probe": pct(r), "reference_because": r.why,
                })
            })
            .collect();
        let json = serde_json::json!({
            "compile_ms": compile_ms,
            "compile_cpu_ms": ms(compile_cpu),
            "import_ms": ms(import),
            "phases_ms": {
                "import": ms(import), "partition": ms(phases.partition), "engine": ms(phases.engine), "jobs": ms(phases.jobs),
            },
            "median_ms": median_ms,
            "threads": threads,
            "isa": isa,
            "verified": verified,
            "warm_steps": warm_steps,
            "probes": probes,
            "partitions": partitions,
            "output": output.map(|p| p.display().to_string()),
        });
        println!("{json}");
        return;
    }
    let total: f64 = rows.iter().map(|r| r.median_ms).sum();
    println!(
        "{:<5} {:<24} {:>9} {:>6} {:>7} {:>7}  {:<8} kernel / ops",
        "id", "kind", "ms", "%", "GOPS", "%probe", "tuning"
    );
    for r in rows {
        let opt = |v: Option<f64>, p: usize| v.map_or("-".to_string(), |v| format!("{v:.p$}"));
        println!(
            "{:<5} {:<24} {:>9.4} {:>6.1} {:>7} {:>7}  {:<8} {}",
            r.id,
            r.kind,
            r.median_ms,
            100.0 * r.median_ms / total.max(1e-12),
            opt(r.gops, 1),
            opt(pct(r), 1),
            r.tuning,
            r.kernel
        );
        println!(
            "{:<5} {}{}",
            "",
            r.ops.join(" → "),
            r.why.as_ref().map_or(String::new(), |w| format!("  (reference: {w})"))
        );
    }
    for (name, gops) in probes {
        println!("probe {name}: {gops:.1} GOPS on {threads} thread(s)");
    }
    let steps = compiled.steps().len();
    println!(
        "{steps} partitions, isa {isa}, {threads} thread(s): import {:.1} ms, compile {compile_ms:.1} ms (with import; {:.1} ms CPU), median {median_ms:.3} ms per inference",
        ms(import),
        ms(compile_cpu)
    );
    if warm_steps {
        println!("warm steps: each partition timed right after a run of its own (the median counts both)");
    }
    if verified == Some(true) {
        println!("verified: the output equals the graph reference's, bit for bit");
    }
    if let Some(path) = output {
        println!("output written to {}", path.display());
    }
}

/// CPU time the process has used so far, every thread, user and system (zero if the clock
/// cannot be read).
fn process_cpu() -> Duration {
    let mut t = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `t` is a valid, writable timespec for the duration of the call.
    let ok = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut t) } == 0;
    if ok { Duration::new(t.tv_sec as u64, t.tv_nsec as u32) } else { Duration::ZERO }
}
