//! `tensorlift tune resnet18`: search each layer's schedules, measured in a worker process
//! (`tensorlift measure`), and report default and tuned speed per layer.

use std::error::Error;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Subcommand, ValueEnum};
use indicatif::{ProgressBar, ProgressStyle};
use schedules::resnet18::{self, Layer};
use tensorlift::IsaLevel;
use tensorlift::record::{Record, Status};
use tensorlift::tune::search::Strategy;
use tensorlift::tune::worker::Worker;
use tensorlift::tune::{LayerResult, TuneOptions, plot, tune_layer};

use super::common::{Format, IsaChoice, WeightsChoice, positive};

#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    what: What,
}

#[derive(Subcommand)]
enum What {
    /// Search schedules for the resnet-18 int8 layers: each candidate compiled, verified bit for
    /// bit against the layer's reference (as `resnet18` verifies it), timed against the peak
    /// probe, in a worker process.
    Resnet18(Resnet18Args),
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
    /// Measurements per layer (the default schedule's included).
    #[arg(long, default_value_t = 64, value_parser = positive::<usize>)]
    trials: usize,
    /// Time per layer, in seconds (stops at whichever of --trials and this comes first).
    #[arg(long)]
    budget_s: Option<f64>,
    /// Most threads a schedule may use (default: one per core); 1 is a valid choice.
    #[arg(long, value_parser = positive::<usize>)]
    threads: Option<usize>,
    #[arg(long, value_enum, default_value_t = IsaChoice::Auto)]
    isa: IsaChoice,
    #[arg(long, value_enum, default_value_t = WeightsChoice::Full)]
    weights: WeightsChoice,
    /// Append every measurement to this database (JSON lines).
    #[arg(long)]
    db: Option<PathBuf>,
    /// Timed calls per measurement.
    #[arg(long, default_value_t = 10, value_parser = positive::<usize>)]
    repeat: usize,
    /// In the search (not the validation), time the timed calls of a candidate may take, in
    /// milliseconds: fewer than --repeat for slow layers, at least 1. 0: always --repeat.
    #[arg(long, default_value_t = 6.0)]
    search_budget_ms: f64,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    #[arg(long, value_enum, default_value_t = StrategyChoice::Evolutionary)]
    strategy: StrategyChoice,
    #[arg(long, value_enum, default_value_t = Format::Table)]
    format: Format,
    /// Write the tuning curves (best GOPS per trial, per layer) to this SVG file.
    #[arg(long)]
    plot: Option<PathBuf>,
}

pub fn run(args: Args) -> Result<(), Box<dyn Error>> {
    match args.what {
        What::Resnet18(args) => tune_resnet18(args),
    }
}

fn tune_resnet18(args: Resnet18Args) -> Result<(), Box<dyn Error>> {
    let level = args.isa.target().level()?;
    let layers: Vec<Layer> = match &args.layer {
        Some(name) => {
            vec![resnet18::layer(name).ok_or_else(|| format!("--layer: expected R1..R11 or FC, found {name:?}"))?]
        }
        None => resnet18::layers(),
    };
    let max_threads = args.threads.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let options = TuneOptions {
        level,
        weights: args.weights.bits(),
        max_threads,
        trials: args.trials,
        budget: args.budget_s.map(Duration::from_secs_f64),
        repeat: args.repeat,
        search_budget: (args.search_budget_ms > 0.0).then(|| Duration::from_secs_f64(args.search_budget_ms / 1e3)),
        strategy: match args.strategy {
            StrategyChoice::Evolutionary => Strategy::Evolutionary,
            StrategyChoice::Random => Strategy::Random,
        },
        seed: args.seed,
    };
    if args.format == Format::Table {
        println!(
            "cpu {}, level {level}, up to {max_threads} thread(s), {} trials per layer",
            tensorlift::isa::cpu_name(),
            args.trials
        );
        println!(
            "GOPS: each measurement scaled by the probe beside it against the layer's fastest run of that probe (the machine's slow phases corrected)"
        );
    }
    let mut worker = Worker::new(std::env::current_exe()?, vec!["measure".into()]);
    let mut results = Vec::new();
    for layer in layers {
        let bar = ProgressBar::new(args.trials as u64);
        bar.set_style(ProgressStyle::with_template("{prefix:>4} {bar:30} {pos}/{len} {msg}").expect("valid template"));
        bar.set_prefix(layer.name());
        let started = std::time::Instant::now();
        let (mut best, mut best_pct) = (0.0_f64, None);
        let result = tune_layer(&mut worker, layer, &options, args.db.as_deref(), |r| {
            if r.status == Status::Ok && r.gops.unwrap_or(0.0) > best {
                best = r.gops.unwrap_or(0.0);
                best_pct = r.pct_peak();
            }
            bar.inc(1);
            let rate = bar.position() as f64 / started.elapsed().as_secs_f64();
            let pct = best_pct.map_or(String::new(), |p| format!(" ({p:.0}% of peak)"));
            bar.set_message(format!("{rate:.1} trials/s, best {best:.1} GOPS{pct}"));
        })?;
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

fn report(r: &LayerResult, level: IsaLevel, format: Format) {
    let (default, best, phases) = (r.default_record(), r.best(), r.phases());
    let gops = |r: Option<&Record>| r.filter(|r| r.status == Status::Ok).and_then(|r| phases.gops(r));
    let (dg, bg) = (gops(default), gops(best));
    let speedup = match (dg, bg) {
        (Some(d), Some(b)) => Some(b / d),
        _ => None,
    };
    let point = best.map(|b| b.schedule.knobs);
    let failed = r.records.iter().filter(|r| r.status != Status::Ok).count();
    match format {
        Format::Table => {
            let f = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.1}"));
            println!(
                "{:<4} default {:>7} GOPS  tuned {:>7} GOPS ({:>5}% of peak)  speedup {:>5}  trials {:>3} ({failed} failed)  {:.1} s  {}",
                r.layer.name(),
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
                "layer": r.layer.name(),
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
