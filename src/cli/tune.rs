//! `tensorlift tune resnet18`: search each layer's schedules, measured in a worker process
//! (`tensorlift measure`), and report default and tuned speed per layer. `tensorlift tune
//! MODEL.onnx`: the same search over the model's distinct workloads (`tune::tasks`), then the
//! whole model timed with the default knobs, the pre-tuned records and the tuned ones.
//! `tensorlift tune op KIND`, an operator of the catalog in the auto-scheduler's space, is
//! `tune_op`'s.

use std::error::Error;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use clap::{Subcommand, ValueEnum};
use indicatif::{ProgressBar, ProgressStyle};
use schedules::resnet18::{self, Layer, WeightBits};
use tensorlift::engine::{AutoSource, KnobSource, Workload};
use tensorlift::layer::QConvAutoSpec;
use tensorlift::record::{Database, Host, Record, Status, pretuned};
use tensorlift::target::Target;
use tensorlift::tune::apply::RecordKnobs;
use tensorlift::tune::budget::shares_of;
use tensorlift::tune::latency::model_latency;
use tensorlift::tune::latency::task_times;
use tensorlift::tune::model::{estimated_shares, task_options};
use tensorlift::tune::search::Strategy;
use tensorlift::tune::tasks::extract;
use tensorlift::tune::worker::Worker;
use tensorlift::tune::{LayerResult, TuneOptions, plot, tune_layer};
use tensorlift::{CompileOptions, IsaLevel};

use super::common::{Format, IsaChoice, WeightsChoice, positive};

#[derive(clap::Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct Args {
    #[command(subcommand)]
    what: Option<What>,
    /// An ONNX model: search schedules for its distinct quantized convolutions and matmuls
    /// (one task per workload, counted with its uses), then time the whole model before and
    /// after.
    model: Option<PathBuf>,
    #[command(flatten)]
    search: SearchArgs,
}

#[derive(Subcommand)]
enum What {
    /// Search schedules for the resnet-18 int8 layers: each candidate compiled, verified bit for
    /// bit against the layer's reference (as `resnet18` verifies it), timed against the peak
    /// probe, in a worker process.
    Resnet18(Resnet18Args),
    /// Search schedules for an operator of the catalog at any shape in the auto-scheduler's
    /// space: each candidate compiled, verified bit for bit against the reference interpreter
    /// and timed, in a worker process.
    Op(super::tune_op::Args),
}

#[derive(Clone, Copy, ValueEnum)]
enum StrategyChoice {
    Evolutionary,
    Random,
}

#[derive(clap::Args)]
struct Resnet18Args {
    /// Tune only this layer (R1..R11, FC).
    #[arg(long)]
    layer: Option<String>,
    #[arg(long, value_enum, default_value_t = WeightsChoice::Full)]
    weights: WeightsChoice,
    #[command(flatten)]
    search: SearchArgs,
}

/// The flags of every search (a model's and the table layers').
#[derive(clap::Args)]
struct SearchArgs {
    /// Measurements (the default schedule's included): per layer for `resnet18` (default 64);
    /// for a model in total, spread over its tasks by their share of its time (default 64 per
    /// task).
    #[arg(long, value_parser = positive::<usize>)]
    trials: Option<usize>,
    /// Time in seconds, per layer for `resnet18`, in total for a model (stops at whichever of
    /// --trials and this comes first).
    #[arg(long)]
    budget_s: Option<f64>,
    /// Most threads a schedule may use (default: one per core); 1 is a valid choice.
    #[arg(long, value_parser = positive::<usize>)]
    threads: Option<usize>,
    #[arg(long, value_enum, default_value_t = IsaChoice::Auto)]
    isa: IsaChoice,
    /// Append every measurement to this database (JSON lines).
    #[arg(long)]
    db: Option<PathBuf>,
    /// Timed calls per measurement.
    #[arg(long, default_value_t = 10, value_parser = positive::<usize>)]
    repeat: usize,
    /// In the search (not the validation), time the calls of a candidate may take, its
    /// verification call included, in milliseconds: fewer than --repeat timed calls for slow layers,
    /// at least one after the verification call where it took less than the budget, none for those
    /// as slow as the budget or slower. 0: always --repeat.
    #[arg(long, default_value_t = 6.0)]
    search_budget_ms: f64,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    #[arg(long, value_enum, default_value_t = StrategyChoice::Evolutionary)]
    strategy: StrategyChoice,
    #[arg(long, value_enum, default_value_t = Format::Table)]
    format: Format,
    /// Write the tuning curves (best GOPS per trial, per layer or task) to this SVG file.
    #[arg(long)]
    plot: Option<PathBuf>,
}

/// Trials per layer of `tune resnet18`, and per task of a model, when --trials is not given.
const DEFAULT_TRIALS: usize = 64;
/// Rounds of the whole-model timing after a model's search.
const LATENCY_ROUNDS: usize = 15;
/// Runs of the model with the defaults whose per-task medians spread the budget.
const PROFILE_ROUNDS: usize = 5;

impl SearchArgs {
    /// The options of a search of `trials` measurements on weights in `weights`' range.
    fn options(&self, weights: WeightBits, trials: usize) -> Result<TuneOptions, Box<dyn Error>> {
        let level = self.isa.target().level()?;
        let max_threads = self.threads.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
        Ok(TuneOptions {
            level,
            weights,
            max_threads,
            trials,
            budget: self.budget_s.map(Duration::from_secs_f64),
            repeat: self.repeat,
            search_budget: (self.search_budget_ms > 0.0).then(|| Duration::from_secs_f64(self.search_budget_ms / 1e3)),
            strategy: match self.strategy {
                StrategyChoice::Evolutionary => Strategy::Evolutionary,
                StrategyChoice::Random => Strategy::Random,
            },
            seed: self.seed,
        })
    }
}

pub fn run(args: Args) -> Result<(), Box<dyn Error>> {
    match (args.what, args.model) {
        (Some(What::Resnet18(args)), _) => tune_resnet18(args),
        (Some(What::Op(args)), _) => super::tune_op::run(args),
        (None, Some(model)) => tune_model(&model, &args.search),
        (None, None) => {
            Err("tune: expected a model (tune MODEL.onnx), `resnet18` or `op KIND`, found none of them".into())
        }
    }
}

fn tune_resnet18(args: Resnet18Args) -> Result<(), Box<dyn Error>> {
    let layers: Vec<Layer> = match &args.layer {
        Some(name) => {
            vec![resnet18::layer(name).ok_or_else(|| format!("--layer: expected R1..R11 or FC, found {name:?}"))?]
        }
        None => resnet18::layers(),
    };
    let trials = args.search.trials.unwrap_or(DEFAULT_TRIALS);
    let options = args.search.options(args.weights.bits(), trials)?;
    let (level, max_threads) = (options.level, options.max_threads);
    let args = args.search;
    if args.format == Format::Table {
        println!(
            "cpu {}, level {level}, up to {max_threads} thread(s), {trials} trials per layer",
            tensorlift::isa::cpu_name(),
        );
        println!(
            "GOPS: each measurement scaled by the probe beside it against the layer's fastest run of that probe (the machine's slow phases corrected)"
        );
    }
    let mut worker = Worker::new(std::env::current_exe()?, vec!["measure".into()]);
    let mut results = Vec::new();
    for layer in layers {
        let bar = bar(trials, layer.name());
        let mut progress = Progress::new(&bar);
        let result = tune_layer(&mut worker, layer, &options, args.db.as_deref(), |r| progress.record(r))?;
        bar.finish_and_clear();
        report(&result, level, args.format);
        results.push(result);
    }
    if let Some(path) = &args.plot {
        let title = format!("tuning curves, {} ({level})", tensorlift::isa::cpu_name());
        plot::curves_svg(&results, &title, path)?;
    }
    Ok(())
}

pub(super) fn bar(len: usize, prefix: &str) -> ProgressBar {
    let bar = ProgressBar::new(len as u64);
    bar.set_style(ProgressStyle::with_template("{prefix:>4} {bar:30} {pos}/{len} {msg}").expect("valid template"));
    bar.set_prefix(prefix.to_string());
    bar
}

/// The progress bar's message: measurements per second and the best so far.
pub(super) struct Progress<'a> {
    bar: &'a ProgressBar,
    started: Instant,
    best: f64,
    best_pct: Option<f64>,
}

impl<'a> Progress<'a> {
    pub(super) fn new(bar: &'a ProgressBar) -> Progress<'a> {
        Progress { bar, started: Instant::now(), best: 0.0, best_pct: None }
    }

    pub(super) fn record(&mut self, r: &Record) {
        if r.status == Status::Ok && r.gops.unwrap_or(0.0) > self.best {
            self.best = r.gops.unwrap_or(0.0);
            self.best_pct = r.pct_peak();
        }
        self.bar.inc(1);
        let rate = self.bar.position() as f64 / self.started.elapsed().as_secs_f64();
        let pct = self.best_pct.map_or(String::new(), |p| format!(" ({p:.0}% of peak)"));
        self.bar.set_message(format!("{rate:.1} trials/s, best {:.1} GOPS{pct}", self.best));
    }
}

/// `tensorlift tune MODEL.onnx`: the model's tasks searched in turn, then the whole model timed
/// with the default knobs, the pre-tuned records and the tuned ones.
fn tune_model(path: &Path, args: &SearchArgs) -> Result<(), Box<dyn Error>> {
    let started = Instant::now();
    let model = extract(path)?;
    let all = model.all();
    let trials = args.trials.unwrap_or(DEFAULT_TRIALS * all.len());
    let options = args.options(WeightBits::Eight, trials)?;
    let (level, max_threads) = (options.level, options.max_threads);
    // The budget follows each task's share of the model's time, measured with the defaults
    // (estimated from operations where the model cannot be run here).
    let compile = CompileOptions { target: Target::Level(level), threads: Some(max_threads), ..Default::default() };
    let (shares, measured) = match task_times(&model, &compile, PROFILE_ROUNDS) {
        Ok(times) => (shares_of(&times), true),
        Err(e) => {
            eprintln!("warning: profiling the model with the defaults: {e}; the budget follows operations × uses");
            (estimated_shares(&model), false)
        }
    };
    let per_task = task_options(&shares, &options);
    if args.format == Format::Table {
        println!(
            "{}: {} tasks ({} auto-scheduled), cpu {}, level {level}, up to {max_threads} thread(s), {trials} trials in total",
            path.display(),
            all.len(),
            model.auto_tasks.len(),
            tensorlift::isa::cpu_name(),
        );
    }
    let mut worker = Worker::new(std::env::current_exe()?, vec!["measure".into()]);
    let bar = bar(per_task.iter().map(|o| o.trials).sum(), "");
    let mut progress = Progress::new(&bar);
    let results = tensorlift::tune::model::tune_model(
        &mut worker,
        &model,
        (&options, &per_task),
        args.db.as_deref(),
        |task, r| {
            if !r.is_validation() {
                bar.set_prefix(task.summary.clone());
                progress.record(r);
            }
        },
    )?;
    bar.finish_and_clear();
    let search_s = started.elapsed().as_secs_f64();
    let measurements: usize = results.iter().map(|r| r.records.len()).sum();
    let verified = results.iter().flat_map(|r| &r.records).filter(|r| r.ok()).count();

    // The whole model: default knobs, the repository's pre-tuned records, and this run's
    // records (with the database's, as `run --db` applies them).
    let pretuned = pretuned()?.records;
    let mut tuned: Vec<Record> = results.iter().flat_map(|r| r.records.iter().cloned()).collect();
    if let Some(db) = &args.db {
        tuned = Database::load(db)?.records;
    }
    let host = Host::this(level);
    let with_pretuned = RecordKnobs { user: Vec::new(), pretuned: pretuned.clone(), host: host.clone(), max_threads };
    let with_tuned = RecordKnobs { user: tuned, pretuned, host, max_threads };
    let (pretuned_knobs, tuned_knobs) =
        (|w: Workload<'_>| with_pretuned.knobs(w), |w: Workload<'_>| with_tuned.knobs(w));
    let (pretuned_points, tuned_points) =
        (|s: &QConvAutoSpec| with_pretuned.auto_point(s), |s: &QConvAutoSpec| with_tuned.auto_point(s));
    let sources: [(&str, KnobSource<'_>, AutoSource<'_>); 3] = [
        ("default", &|_| None, &|_| None),
        ("pretuned", &pretuned_knobs, &pretuned_points),
        ("tuned", &tuned_knobs, &tuned_points),
    ];
    let latency = model_latency(&model, &compile, &sources, LATENCY_ROUNDS)?;
    let [default_ms, pretuned_ms, tuned_ms] = latency[..] else { return Err("three latencies expected".into()) };

    let weights = model.tasks.iter().map(|t| Some(t.weights)).chain(model.auto_tasks.iter().map(|_| None));
    let tasks: Vec<serde_json::Value> = all
        .iter()
        .zip(weights)
        .zip(&results)
        .zip(per_task.iter().zip(&shares))
        .map(|((((_, ops, uses), weights), r), (o, share))| {
            let s = Summary::of(r);
            let ms = |g: Option<f64>| g.map(|g| *ops as f64 / g / 1e6);
            let kernel = if weights.is_some() { "template" } else { "auto" };
            serde_json::json!({
                "workload": r.workload, "kernel": kernel, "uses": uses, "ops": ops, "weights": weights,
                "default_gops": s.default_gops, "tuned_gops": s.tuned_gops,
                "default_ms": ms(s.default_gops), "tuned_ms": ms(s.tuned_gops),
                "speedup": s.speedup, "trials": r.trials(), "allotted_trials": o.trials, "share": share, "failed": s.failed,
                "seconds": r.elapsed.as_secs_f64(), "best": s.best.map(|b| &b.schedule),
            })
        })
        .collect();
    match args.format {
        Format::Json => {
            let json = serde_json::json!({
                "model": path.display().to_string(),
                "isa": level.name(),
                "threads": max_threads,
                "tasks": tasks,
                "budget_by": if measured { "measured time" } else { "operations" },
                "measurements": measurements,
                "verified": verified,
                "search_seconds": search_s,
                "measurements_per_second": measurements as f64 / search_s,
                "latency_ms": {"default": default_ms, "pretuned": pretuned_ms, "tuned": tuned_ms},
                "speedup_over_default": default_ms / tuned_ms,
                "speedup_over_pretuned": pretuned_ms / tuned_ms,
            });
            println!("{json}");
        }
        Format::Table => {
            let f = |v: &serde_json::Value, p: usize| v.as_f64().map_or("-".to_string(), |v| format!("{v:.p$}"));
            println!(
                "{:<40} {:>4} {:>8} {:>6} {:>9} {:>9} {:>9} {:>9} {:>7} {:>6}",
                "task", "uses", "MOPS", "%time", "def GOPS", "tun GOPS", "def ms", "tun ms", "speedup", "trials"
            );
            for t in &tasks {
                println!(
                    "{:<40} {:>4} {:>8.1} {:>6.1} {:>9} {:>9} {:>9} {:>9} {:>7} {:>6}",
                    t["workload"]["summary"].as_str().unwrap_or(""),
                    t["uses"],
                    t["ops"].as_f64().unwrap_or(0.0) / 1e6,
                    t["share"].as_f64().unwrap_or(0.0) * 1e2,
                    f(&t["default_gops"], 1),
                    f(&t["tuned_gops"], 1),
                    f(&t["default_ms"], 4),
                    f(&t["tuned_ms"], 4),
                    f(&t["speedup"], 2),
                    t["trials"],
                );
            }
            println!(
                "{measurements} measurements ({verified} verified) in {search_s:.1} s: {:.1}/s",
                measurements as f64 / search_s
            );
            println!(
                "whole model, median of {LATENCY_ROUNDS}: default {default_ms:.3} ms, pretuned {pretuned_ms:.3} ms, tuned {tuned_ms:.3} ms ({:.2}x over default, {:.2}x over pretuned)",
                default_ms / tuned_ms,
                pretuned_ms / tuned_ms
            );
        }
    }
    if let Some(plot_path) = &args.plot {
        let title = format!("tuning curves, {} ({level})", path.display());
        plot::curves_svg(&results, &title, plot_path)?;
    }
    Ok(())
}

/// Default and tuned speed of one layer or task, by probe-corrected GOPS (`Phases`).
pub(super) struct Summary<'a> {
    pub(super) default_gops: Option<f64>,
    pub(super) tuned_gops: Option<f64>,
    pub(super) speedup: Option<f64>,
    pub(super) best: Option<&'a Record>,
    pub(super) failed: usize,
}

impl<'a> Summary<'a> {
    pub(super) fn of(r: &'a LayerResult) -> Summary<'a> {
        let (default, best, phases) = (r.default_record(), r.best(), r.phases());
        let gops = |r: Option<&Record>| r.filter(|r| r.status == Status::Ok).and_then(|r| phases.gops(r));
        let (default_gops, tuned_gops) = (gops(default), gops(best));
        let speedup = match (default_gops, tuned_gops) {
            (Some(d), Some(b)) => Some(b / d),
            _ => None,
        };
        let failed = r.records.iter().filter(|r| r.status != Status::Ok).count();
        Summary { default_gops, tuned_gops, speedup, best, failed }
    }
}

fn report(r: &LayerResult, level: IsaLevel, format: Format) {
    let Summary { default_gops: dg, tuned_gops: bg, speedup, best, failed } = Summary::of(r);
    let point = best.and_then(|b| b.schedule.knobs);
    match format {
        Format::Table => {
            let f = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.1}"));
            println!(
                "{:<4} default {:>7} GOPS  tuned {:>7} GOPS ({:>5}% of peak)  speedup {:>5}  trials {:>3} ({failed} failed)  {:.1} s  {}",
                r.name,
                f(dg),
                f(bg),
                f(best.and_then(Record::pct_peak)),
                speedup.map_or("-".to_string(), |s| format!("{s:.2}x")),
                r.trials(),
                r.elapsed.as_secs_f64(),
                point.map_or(String::new(), |p| format!(
                    "mr {} nr {} lanes {} {} {} thread(s){} accumulation {}",
                    p.mr,
                    p.nr,
                    p.lanes,
                    spelled(p.order),
                    p.threads,
                    if level.has_vnni() { String::new() } else { format!(" {} weights", spelled(p.packing)) },
                    spelled(p.accumulation)
                )),
            );
        }
        Format::Json => {
            let json = serde_json::json!({
                "layer": r.name,
                "workload": r.workload,
                "default_gops": dg,
                "tuned_gops": bg,
                "pct_peak": best.and_then(Record::pct_peak),
                "speedup": speedup,
                "trials": r.trials(),
                "failed": failed,
                "seconds": r.elapsed.as_secs_f64(),
                "best": best.map(|b| &b.schedule),
                "curve": r.curve(),
            });
            println!("{json}");
        }
    }
}

/// A knob's value as tuning records spell it (`pixels_outer`, `i16`, `per_row`).
fn spelled(value: impl serde::Serialize) -> String {
    match serde_json::to_value(value) {
        Ok(serde_json::Value::String(s)) => s,
        Ok(other) => other.to_string(),
        Err(e) => format!("<{e}>"),
    }
}
