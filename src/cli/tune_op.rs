//! `tensorlift tune op KIND [shape flags]`: an operator of the catalog at any shape searched in
//! the auto-scheduler's space (`tune::op_tune`), each candidate measured in a worker process;
//! ends with the generic (default) and tuned figures. `--propose N` prints the search's next
//! candidates for a database instead of measuring them (for a driver that measures elsewhere).

use std::error::Error;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Subcommand, ValueEnum};
use schedules::catalog::{MatmulDtype, OpSpec};
use tensorlift::record::{Database, Host, Record};
use tensorlift::tune::auto::Strategy;
use tensorlift::tune::op_bench::{space_options, spec_workload};
use tensorlift::tune::op_tune::{OpTuneOptions, best_point, propose_candidates, template, tune_op};
use tensorlift::tune::plot;
use tensorlift::tune::worker::Worker;

use super::common::{Format, IsaChoice, positive, thread_count, user_records};
use super::tune::{Progress, Summary, bar};

#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    kind: Kind,
}

/// A positive dimension or factor.
type Dim = i64;

#[derive(Subcommand)]
enum Kind {
    /// `C[m, n] = Σ_k A[m, k]·B[k, n]`: u8 × i8 → i32 (exact), or f32.
    Matmul {
        #[arg(long, value_parser = positive::<Dim>, allow_negative_numbers = true)]
        m: Dim,
        #[arg(long, value_parser = positive::<Dim>, allow_negative_numbers = true)]
        n: Dim,
        #[arg(long, value_parser = positive::<Dim>, allow_negative_numbers = true)]
        k: Dim,
        #[arg(long, value_enum, default_value_t = DtypeChoice::U8)]
        dtype: DtypeChoice,
        /// End as the quantized layers end: the i32 accumulator requantized to u8 in
        /// onnxruntime's order (compensation with the bias folded in, per-channel scale, round
        /// half to even, zero point, saturate). u8 only.
        #[arg(long)]
        requantize: bool,
        #[command(flatten)]
        search: OpSearchArgs,
    },
    /// NHWC int8 convolution, batch 1, i32 output, zero padding; depthwise when groups = ic = oc.
    Conv2d {
        #[arg(long, value_parser = positive::<Dim>, allow_negative_numbers = true)]
        ic: Dim,
        #[arg(long, value_parser = positive::<Dim>, allow_negative_numbers = true)]
        oc: Dim,
        #[arg(long, value_parser = positive::<Dim>, allow_negative_numbers = true)]
        h: Dim,
        #[arg(long, value_parser = positive::<Dim>, allow_negative_numbers = true)]
        w: Dim,
        #[arg(long, value_parser = positive::<Dim>, allow_negative_numbers = true)]
        kh: Dim,
        #[arg(long, value_parser = positive::<Dim>, allow_negative_numbers = true)]
        kw: Dim,
        #[arg(long, default_value_t = 1, value_parser = positive::<Dim>, allow_negative_numbers = true)]
        stride: Dim,
        /// Zero padding on every side (0 or more).
        #[arg(long, default_value_t = 0, value_parser = non_negative, allow_negative_numbers = true)]
        pad: Dim,
        #[arg(long, default_value_t = 1, value_parser = positive::<Dim>, allow_negative_numbers = true)]
        groups: Dim,
        /// End as the quantized layers end: the i32 accumulator requantized to u8 in
        /// onnxruntime's order (compensation with the bias folded in, per-channel scale, round
        /// half to even, zero point, saturate).
        #[arg(long)]
        requantize: bool,
        #[command(flatten)]
        search: OpSearchArgs,
    },
    /// `C[b, m, n] = Σ_k A[b, m, k]·B[b, k, n]`, u8 × i8 → i32.
    BatchMatmul {
        #[arg(long, value_parser = positive::<Dim>, allow_negative_numbers = true)]
        b: Dim,
        #[arg(long, value_parser = positive::<Dim>, allow_negative_numbers = true)]
        m: Dim,
        #[arg(long, value_parser = positive::<Dim>, allow_negative_numbers = true)]
        n: Dim,
        #[arg(long, value_parser = positive::<Dim>, allow_negative_numbers = true)]
        k: Dim,
        #[command(flatten)]
        search: OpSearchArgs,
    },
    /// u8 max pooling of [1, h, w, c] (NHWC), a k × k window at a stride, no padding.
    Pool {
        #[arg(long, value_parser = positive::<Dim>, allow_negative_numbers = true)]
        c: Dim,
        #[arg(long, value_parser = positive::<Dim>, allow_negative_numbers = true)]
        h: Dim,
        #[arg(long, value_parser = positive::<Dim>, allow_negative_numbers = true)]
        w: Dim,
        #[arg(long, value_parser = positive::<Dim>, allow_negative_numbers = true)]
        k: Dim,
        #[arg(long, value_parser = positive::<Dim>, allow_negative_numbers = true)]
        stride: Dim,
        #[command(flatten)]
        search: OpSearchArgs,
    },
    /// f32 softmax over the last axis of [rows, cols].
    Softmax {
        #[arg(long, value_parser = positive::<Dim>, allow_negative_numbers = true)]
        rows: Dim,
        #[arg(long, value_parser = positive::<Dim>, allow_negative_numbers = true)]
        cols: Dim,
        #[command(flatten)]
        search: OpSearchArgs,
    },
    /// f32 layer normalization over the last axis of [rows, cols] (eps 1e-5).
    Layernorm {
        #[arg(long, value_parser = positive::<Dim>, allow_negative_numbers = true)]
        rows: Dim,
        #[arg(long, value_parser = positive::<Dim>, allow_negative_numbers = true)]
        cols: Dim,
        #[command(flatten)]
        search: OpSearchArgs,
    },
}

#[derive(Clone, Copy, ValueEnum)]
enum DtypeChoice {
    U8,
    F32,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum SearchChoice {
    /// Evolution guided by a cost model learned from the measurements.
    Evolutionary,
    /// Uniform random points: the baseline the learned search is compared with.
    Random,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum StrategyChoice {
    /// The auto-scheduler's rules (`schedules::auto::Space`).
    Auto,
    /// A hand-written template's knob search, where the operator has one.
    Template,
}

/// The flags of `tune op KIND` after the shape.
#[derive(clap::Args)]
struct OpSearchArgs {
    /// Search measurements after the generic point, which is measured first as the baseline
    /// and is not one (default 64). With --propose: the database's search records of this
    /// operator to reach (no limit when not given).
    #[arg(long, value_parser = positive::<usize>, allow_negative_numbers = true)]
    trials: Option<usize>,
    /// Time of the search in seconds (stops at whichever of --trials and this comes first).
    #[arg(long)]
    budget_s: Option<f64>,
    /// Most threads a schedule may use (default: one per core).
    #[arg(long, value_parser = thread_count, allow_negative_numbers = true)]
    threads: Option<usize>,
    #[arg(long, value_enum, default_value_t = IsaChoice::Auto)]
    isa: IsaChoice,
    /// Append every measurement to this database (JSON lines); its records of this operator
    /// are never measured again, and its best point on this CPU is measured after the generic
    /// one.
    #[arg(long)]
    db: Option<PathBuf>,
    /// Write the tuning curve (best GOPS per trial) to this SVG file.
    #[arg(long)]
    plot: Option<PathBuf>,
    #[arg(long, value_enum, default_value_t = Format::Table)]
    format: Format,
    #[arg(long, value_enum, default_value_t = StrategyChoice::Auto)]
    strategy: StrategyChoice,
    /// How the auto-scheduler proposes points.
    #[arg(long, value_enum, default_value_t = SearchChoice::Evolutionary)]
    search: SearchChoice,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Start the learned model without the shipped prior (`tuning/prior.jsonl`: the catalog's
    /// operator kinds measured at other shapes); only the --db records of other workloads on
    /// this CPU then train it before the first batch.
    #[arg(long)]
    no_prior: bool,
    /// Timed calls per measurement.
    #[arg(long, default_value_t = 10, value_parser = positive::<usize>, allow_negative_numbers = true)]
    repeat: usize,
    /// In the search (not the validation), time the calls of a candidate may take, its
    /// verification call included, in milliseconds: fewer than --repeat timed calls for slow points,
    /// at least one after the verification call where it took less than the budget, none for those
    /// as slow as the budget or slower. 0: always --repeat.
    #[arg(long, default_value_t = 6.0)]
    search_budget_ms: f64,
    /// Points proposed per round of the search.
    #[arg(long, default_value_t = 8, value_parser = positive::<usize>, allow_negative_numbers = true)]
    batch: usize,
    /// Print this many new candidates (JSON lines for `tensorlift measure`) chosen from the
    /// records of --db, measure nothing and exit.
    #[arg(long, value_parser = positive::<usize>, allow_negative_numbers = true)]
    propose: Option<usize>,
    /// Print the space (its sketches, their decisions, and what each rule did or why it does
    /// not apply) and exit.
    #[arg(long)]
    list_space: bool,
}

/// Trials when --trials is not given.
const DEFAULT_TRIALS: usize = 64;

/// The value parser of `--pad`: a whole number of at least 0.
fn non_negative(s: &str) -> Result<Dim, String> {
    let v: Dim = s.trim().parse().map_err(|_| format!("expected a whole number of at least 0, found {s:?}"))?;
    if v < 0 {
        return Err(format!("must be at least 0, found {v}"));
    }
    Ok(v)
}

/// `spec` requantized to u8 where `requantize` is set (`OpSpec::Requantized`).
fn requantized(spec: OpSpec, requantize: bool) -> OpSpec {
    if requantize { OpSpec::Requantized { of: Box::new(spec) } } else { spec }
}

impl Kind {
    /// The operator and the search's flags.
    fn spec(self) -> (OpSpec, OpSearchArgs) {
        match self {
            Kind::Matmul { m, n, k, dtype, requantize, search } => {
                let dtype = match dtype {
                    DtypeChoice::U8 => MatmulDtype::U8,
                    DtypeChoice::F32 => MatmulDtype::F32,
                };
                (requantized(OpSpec::Matmul { m, n, k, dtype }, requantize), search)
            }
            Kind::Conv2d { ic, oc, h, w, kh, kw, stride, pad, groups, requantize, search } => {
                (requantized(OpSpec::Conv2d { ic, oc, h, w, kh, kw, stride, pad, groups }, requantize), search)
            }
            Kind::BatchMatmul { b, m, n, k, search } => (OpSpec::BatchMatmul { b, m, n, k }, search),
            Kind::Pool { c, h, w, k, stride, search } => (OpSpec::Pool { c, h, w, k, stride }, search),
            Kind::Softmax { rows, cols, search } => (OpSpec::Softmax { rows, cols }, search),
            Kind::Layernorm { rows, cols, search } => (OpSpec::Layernorm { rows, cols }, search),
        }
    }
}

pub fn run(args: Args) -> Result<(), Box<dyn Error>> {
    let (spec, args) = args.kind.spec();
    // A shape the definition rejects is an error before anything else runs.
    let workload = spec_workload(&spec)?;
    if args.strategy == StrategyChoice::Template {
        let template = template(&spec)?;
        return Err(format!(
            "{}: the {template:?} template's knob search does not run through `tune op` yet; use `--strategy auto`",
            spec.kind()
        )
        .into());
    }
    let level = args.isa.target().level()?;
    let max_threads = args.threads.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let trials = match args.propose {
        Some(_) => args.trials.unwrap_or(usize::MAX),
        None => args.trials.unwrap_or(DEFAULT_TRIALS),
    };
    let options = OpTuneOptions {
        level,
        max_threads,
        trials,
        budget: args.budget_s.map(Duration::from_secs_f64),
        repeat: args.repeat,
        search_budget: (args.search_budget_ms > 0.0).then(|| Duration::from_secs_f64(args.search_budget_ms / 1e3)),
        batch: args.batch,
        seed: args.seed,
        strategy: match args.search {
            SearchChoice::Evolutionary => Strategy::Evolutionary,
            SearchChoice::Random => Strategy::Random,
        },
        shipped_prior: !args.no_prior,
    };
    if args.list_space {
        let def = spec.build()?;
        let space = schedules::auto::Space::of(&def, space_options(level, max_threads));
        print!("{}", space.listing());
        return Ok(());
    }
    let db_records: Vec<Record> = match &args.db {
        Some(path) if args.propose.is_some() => Database::load(path)?.records,
        Some(path) => user_records(path)?,
        None => Vec::new(),
    };
    if let Some(count) = args.propose {
        for c in propose_candidates(&spec, &options, &db_records, count)? {
            println!("{}", serde_json::to_string(&c)?);
        }
        return Ok(());
    }
    if args.format == Format::Table {
        println!(
            "{}: cpu {}, level {level}, up to {max_threads} thread(s), {trials} trials",
            workload.summary,
            tensorlift::isa::cpu_name()
        );
    }
    let mut worker = Worker::new(std::env::current_exe()?, vec!["measure".into()]);
    let bar = bar(trials, spec.kind());
    let mut progress = Progress::new(&bar);
    let tuned = tune_op(&mut worker, &spec, &options, (&db_records, args.db.as_deref()), |r| progress.record(r))?;
    let result = tuned.result;
    let correlations: Vec<f64> = tuned.held_out_spearman.iter().flatten().copied().collect();
    let model_spearman = (!correlations.is_empty()).then(|| tensorlift::bench::median(correlations.clone()));
    bar.finish_and_clear();

    let summary = Summary::of(&result);
    let ops = spec.build()?.ops;
    let ms = |g: Option<f64>| g.map(|g| ops / g / 1e6);
    let verified = summary.best.is_some_and(|b| b.ok());
    // The best point on this CPU now, this run's records with the database's.
    let mut all = db_records;
    all.extend(result.records.iter().cloned());
    let applied = best_point(&spec, &all, &Host::this(level), max_threads)?.map(|(p, _)| p);
    let json = serde_json::json!({
        "op": spec.label(),
        "kind": spec.kind(),
        "spec": spec,
        "workload": result.workload,
        "isa": level.name(),
        "threads": max_threads,
        "default_gops": summary.default_gops,
        "tuned_gops": summary.tuned_gops,
        "default_ms": ms(summary.default_gops),
        "tuned_ms": ms(summary.tuned_gops),
        "speedup": summary.speedup,
        "trials": result.trials(),
        "failed": summary.failed,
        "seconds": result.elapsed.as_secs_f64(),
        "verified": verified,
        "best": summary.best.map(|b| &b.schedule.auto),
        "applied": applied,
        "curve": result.curve(),
        "trial_gops": result.trial_gops(),
        "search": if options.strategy == Strategy::Random { "random" } else { "evolutionary" },
        "held_out_spearman": tuned.held_out_spearman,
        "model_spearman": model_spearman,
    });
    match args.format {
        Format::Json => println!("{json}"),
        Format::Table => {
            let f = |v: Option<f64>, p: usize| v.map_or("-".to_string(), |v| format!("{v:.p$}"));
            println!(
                "{:<36} {:>9} {:>9} {:>10} {:>10} {:>7} {:>6} {:>8} {:>7}",
                "op", "def GOPS", "tun GOPS", "def ms", "tun ms", "speedup", "trials", "verified", "seconds"
            );
            println!(
                "{:<36} {:>9} {:>9} {:>10} {:>10} {:>7} {:>6} {:>8} {:>7.1}",
                spec.label(),
                f(summary.default_gops, 2),
                f(summary.tuned_gops, 2),
                f(ms(summary.default_gops), 4),
                f(ms(summary.tuned_gops), 4),
                summary.speedup.map_or("-".to_string(), |s| format!("{s:.2}x")),
                result.trials(),
                verified,
                result.elapsed.as_secs_f64(),
            );
            if let Some(p) = summary.best.and_then(|b| b.schedule.auto.as_ref()) {
                println!("best point: sketch {} values {:?} ({} failed)", p.sketch, p.values, summary.failed);
            }
            if let Some(rho) = model_spearman {
                println!(
                    "cost model: Spearman {rho:.2} (median over {} batches, each scored before it was measured)",
                    correlations.len()
                );
            }
        }
    }
    if let Some(path) = &args.plot {
        let title = format!("tuning curve, {} ({level})", spec.label());
        plot::curves_svg(std::slice::from_ref(&result), &title, path)?;
    }
    Ok(())
}
