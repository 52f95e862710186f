//! Offline evaluation of the auto-scheduler's search (`tune::auto::replay`): replays the
//! learned search against the random search over many seeds on tables of points measured once,
//! and prints, per operator of the suite and per configuration, how often the learned search
//! reached the random search's best (within the tolerance) in at most half the random search's
//! trials — the suite's target — with the median trials of each and the model's held-out
//! Spearman correlation.
//!
//! ```sh
//! python3 scripts/search_table.py --tensorlift target/release/tensorlift --points 300 \
//!     --threads 1 --out /tmp/search_table
//! cargo run --release --example search_replay -- --table /tmp/search_table --seeds 20 \
//!     --configs before,default,rank+batch4
//! ```
//!
//! `--table DIR`: every `*.jsonl` database in DIR (the suite's operators measured by the random
//! search on this CPU, at `--threads`); `--prior FILE`: a prior file (as `tuning/prior.jsonl`) in
//! the shipped prior's place; `--only A,B`: only the operators whose label contains A
//! or B (a `transfer` configuration then trains on those others only); `--prior-tables`: the
//! prior's workloads of this CPU's ISA level (or `--level NAME`'s) as the tables instead of
//! `--table`'s (no measuring: `shipped-prior` then leaves each table's own workload out, so its
//! model learns from the others, its sibling of another shape among them); `--first-picks`: no
//! search, only where the model trained on the configuration's prior alone puts its first picks
//! among each table's measured speeds (the learned search's first batch, before it measured
//! anything). A replay sees only the table: a point the evolution
//! breeds outside it is rejected as an unbuildable point would be, so the replay ranks the
//! table's points by the model rather than exploring the whole space; the random search draws
//! from the table, as its real draws are what the table holds. A configuration is `before` (the
//! search as it was when the suite target was first measured: random first batch, log-speed
//! target, batches of 8), `default` (`SearchOptions::new` with `--batch`), or either followed
//! by `+`-joined changes: `transfer` (the model trains on the other operators' tables first),
//! `shipped-prior` (on the shipped prior, `tune::prior`), `stratified`, `random-first`, `rank`,
//! `log-speed`, `batchN`, `epsN` (ε in percent), `popN`, `genN`, `treesN`, `depthN`; or
//! `random-control`: another random search (seeded apart) in the learned search's place, the win
//! rate chance alone gives. The random search always runs `SearchOptions::new` with `--batch` and the same seed.

use std::path::PathBuf;

use schedules::auto::AutoPoint;
use schedules::catalog::OpSpec;
use tensorlift::isa::IsaLevel;
use tensorlift::record::Database;
use tensorlift::tune::auto::CostModel;
use tensorlift::tune::auto::{
    EvolveOptions, FirstBatch, LoweredSpace, ModelOptions, Row, Sample, SearchOptions, SearchSpace, Strategy,
    TableSpace, Target, race, replay,
};
use tensorlift::tune::op_bench::spec_workload;
use tensorlift::tune::op_tune::op_table;
use tensorlift::tune::prior::{PriorWorkload, parse, samples, shipped};

type Error = Box<dyn std::error::Error>;

struct Args {
    table: PathBuf,
    seeds: u64,
    trials: usize,
    batch: usize,
    tolerance: f64,
    threads: usize,
    configs: Vec<String>,
    /// Only the suite's operators whose label contains one of these (all when empty).
    only: Vec<String>,
    /// A prior file in the shipped prior's place (`shipped-prior`).
    prior: Option<PathBuf>,
    /// The prior's workloads at this level as the tables, instead of `--table`'s databases.
    prior_tables: bool,
    /// The ISA level whose prior workloads are the tables (`--prior-tables`; default: this
    /// CPU's).
    level: Option<IsaLevel>,
    /// Only the model's first picks: per table and configuration, the model trained on the
    /// configuration's prior alone ranks every table point (no search is replayed).
    first_picks: bool,
}

fn parse_args() -> Result<Args, Error> {
    let mut args = Args {
        table: PathBuf::new(),
        seeds: 20,
        trials: 64,
        batch: 8,
        tolerance: 0.03,
        threads: 1,
        configs: vec!["before".into(), "default".into()],
        only: vec![],
        prior: None,
        prior_tables: false,
        first_picks: false,
        level: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{flag} expects a value"));
        match flag.as_str() {
            "--table" => args.table = value()?.into(),
            "--seeds" => args.seeds = value()?.parse()?,
            "--trials" => args.trials = value()?.parse()?,
            "--batch" => args.batch = value()?.parse()?,
            "--tolerance" => args.tolerance = value()?.parse()?,
            "--threads" => args.threads = value()?.parse()?,
            "--configs" => args.configs = value()?.split(',').map(str::to_string).collect(),
            "--only" => args.only = value()?.split(',').map(str::to_string).collect(),
            "--prior" => args.prior = Some(value()?.into()),
            "--prior-tables" => args.prior_tables = true,
            "--first-picks" => args.first_picks = true,
            "--level" => {
                let name = value()?;
                let level = IsaLevel::ALL.into_iter().find(|l| l.name() == name);
                args.level =
                    Some(level.ok_or_else(|| format!("--level: expected an ISA level's name, found {name:?}"))?);
            }
            other => return Err(format!("unknown flag {other:?}").into()),
        }
    }
    if args.table.as_os_str().is_empty() && !args.prior_tables {
        return Err("expected --table DIR (see scripts/search_table.py) or --prior-tables".into());
    }
    Ok(args)
}

/// Where a configuration's model starts from, besides the operator's own table.
#[derive(Clone, Copy, Default)]
struct Prior {
    /// The other operators' tables (`transfer`).
    transfer: bool,
    /// The shipped prior (`shipped-prior`, `tune::prior`).
    shipped: bool,
}

/// The learned search's options of configuration `name` (see the module doc), and what its
/// model trains on from the start.
fn config(name: &str, args: &Args) -> Result<(SearchOptions, Prior), Error> {
    let mut prior = Prior::default();
    let mut parts = name.split('+');
    let mut o = match parts.next() {
        Some("before") => SearchOptions {
            batch: 8,
            first: FirstBatch::Random,
            evolve: EvolveOptions {
                population: 128,
                generations: 4,
                measured_seeds: 16,
                crossover: 0.2,
                epsilon: 0.1,
                tournament: 3,
            },
            model: ModelOptions { target: Target::LogSpeed, trees: 60, max_depth: 5, shrinkage: 0.15, min_leaf: 2 },
            ..SearchOptions::new(args.trials, Strategy::Evolutionary)
        },
        Some("default") => {
            SearchOptions { batch: args.batch, ..SearchOptions::new(args.trials, Strategy::Evolutionary) }
        }
        Some("random-control") => {
            SearchOptions { batch: args.batch, ..SearchOptions::new(args.trials, Strategy::Random) }
        }
        other => {
            return Err(
                format!("configuration {other:?}: expected `before`, `default` or `random-control` first").into()
            );
        }
    };
    for part in parts {
        let number = |prefix: &str| part.strip_prefix(prefix).and_then(|n| n.parse::<usize>().ok());
        match part {
            "transfer" => prior.transfer = true,
            "shipped-prior" => prior.shipped = true,
            "stratified" => o.first = FirstBatch::Stratified,
            "random-first" => o.first = FirstBatch::Random,
            "rank" => o.model.target = Target::Rank,
            "log-speed" => o.model.target = Target::LogSpeed,
            _ if number("batch").is_some() => o.batch = number("batch").unwrap_or(8),
            _ if number("eps").is_some() => o.evolve.epsilon = number("eps").unwrap_or(10) as f64 / 100.0,
            _ if number("pop").is_some() => o.evolve.population = number("pop").unwrap_or(128),
            _ if number("gen").is_some() => o.evolve.generations = number("gen").unwrap_or(4),
            _ if number("trees").is_some() => o.model.trees = number("trees").unwrap_or(60),
            _ if number("depth").is_some() => o.model.max_depth = number("depth").unwrap_or(5) as u32,
            _ => return Err(format!("configuration {name:?}: unknown change {part:?}").into()),
        }
    }
    Ok((o, prior))
}

fn median(mut v: Vec<f64>) -> Option<f64> {
    v.sort_by(f64::total_cmp);
    (!v.is_empty()).then(|| v[v.len() / 2])
}

fn main() -> Result<(), Error> {
    let args = parse_args()?;
    let level = match args.level {
        Some(level) if args.prior_tables => level,
        Some(_) => {
            return Err("--level applies to --prior-tables only (a table is measured at this CPU's level)".into());
        }
        None => IsaLevel::detect().ok_or("no supported ISA level on this CPU")?,
    };
    let records = if args.prior_tables { vec![] } else { Database::load_dir(&args.table)? };
    let configs: Vec<(String, (SearchOptions, Prior))> =
        args.configs.iter().map(|c| config(c, &args).map(|o| (c.clone(), o))).collect::<Result<_, _>>()?;
    println!(
        "{} seeds, {} trials, random batches of {}, tolerance {}, level {level}, {} thread(s)",
        args.seeds, args.trials, args.batch, args.tolerance, args.threads
    );
    if !args.first_picks {
        println!("| op | table points | config | learned wins | median trials learned / random | median Spearman |");
        println!("|---|---|---|---|---|---|");
    }
    let mut summary: Vec<(String, usize, f64)> = configs.iter().map(|(c, _)| (c.clone(), 0, 0.0)).collect();
    let shipped = match &args.prior {
        Some(file) => parse(&std::fs::read_to_string(file)?)?,
        None => shipped()?,
    };
    // Every operator's table first: a `transfer` configuration trains on the others'.
    let mut tables = Vec::new();
    if args.prior_tables {
        // Each prior workload of this level is a table; `shipped-prior` leaves it out of the
        // model's training, so the model starts from the other workloads only.
        for w in shipped.iter().filter(|w| w.isa == level.name() && w.threads <= args.threads) {
            if !args.only.is_empty() && !args.only.iter().any(|o| w.spec.label().contains(o.as_str())) {
                continue;
            }
            let (space, _) = op_table(&w.spec, level, args.threads, &[])?;
            let lowered = LoweredSpace::new(&space);
            let rows: Vec<Row> = w
                .points
                .iter()
                .map(|p| Row { point: p.point.clone(), features: p.features.clone(), seconds: p.seconds })
                .collect();
            let samples: Vec<Sample> =
                rows.iter().map(|r| Sample { features: r.features.clone(), seconds: r.seconds }).collect();
            tables.push((w.spec.clone(), space.default_point(), TableSpace::new(lowered.sketches(), rows), samples));
        }
    }
    for spec in OpSpec::suite().into_iter().filter(|_| !args.prior_tables) {
        if !args.only.is_empty() && !args.only.iter().any(|o| spec.label().contains(o.as_str())) {
            continue;
        }
        let (space, measured) = op_table(&spec, level, args.threads, &records)?;
        if measured.is_empty() {
            eprintln!("{}: no records in {}", spec.label(), args.table.display());
            continue;
        }
        let lowered = LoweredSpace::new(&space);
        let rows: Vec<Row> = measured
            .into_iter()
            .filter_map(|(point, seconds)| Some(Row { features: lowered.features(&point)?, point, seconds }))
            .collect();
        let samples: Vec<Sample> =
            rows.iter().map(|r| Sample { features: r.features.clone(), seconds: r.seconds }).collect();
        tables.push((spec.clone(), space.default_point(), TableSpace::new(lowered.sketches(), rows), samples));
    }
    let ops = tables.len();
    if args.first_picks {
        return first_picks(&args, &tables, &configs, (&shipped, level));
    }
    for (index, (spec, default_point, table, _)) in tables.iter().enumerate() {
        let first = [default_point.clone()];
        let others: Vec<Vec<Sample>> =
            tables.iter().enumerate().filter(|(j, _)| *j != index).map(|(_, t)| t.3.clone()).collect();
        for ((name, (learned, from)), total) in configs.iter().zip(summary.iter_mut()) {
            let (mut wins, mut l, mut r, mut rho) = (0, vec![], vec![], vec![]);
            let mut prior = if from.transfer { others.clone() } else { vec![] };
            if from.shipped {
                let key = spec_workload(spec)?.key;
                prior.extend(samples(&shipped, level, args.threads, &key));
            }
            for seed in 0..args.seeds {
                // The control's random search draws apart from the one it races.
                let own_seed = if learned.strategy == Strategy::Random { seed + 1_000_003 } else { seed };
                let learned = SearchOptions { seed: own_seed, prior: prior.clone(), ..learned.clone() };
                let random =
                    SearchOptions { seed, batch: args.batch, ..SearchOptions::new(args.trials, Strategy::Random) };
                let outcome = race(table, &first, (&learned, &random), args.tolerance)?;
                wins += outcome.learned_wins() as usize;
                l.push(outcome.learned.map_or(f64::INFINITY, |t| t as f64));
                r.push(outcome.random.map_or(f64::INFINITY, |t| t as f64));
                if learned.strategy == Strategy::Evolutionary {
                    let log = replay(table, &first, &learned)?;
                    rho.extend(median(log.held_out_spearman.iter().flatten().copied().collect()));
                }
            }
            let share = wins as f64 / args.seeds as f64;
            total.1 += (share >= 0.5) as usize;
            total.2 += share;
            let fmt =
                |v: Option<f64>| v.map_or("-".into(), |v| if v.is_finite() { format!("{v}") } else { "never".into() });
            println!(
                "| {} | {} | {name} | {wins}/{} | {} / {} | {} |",
                spec.label(),
                table.len(),
                args.seeds,
                fmt(median(l)),
                fmt(median(r)),
                median(rho).map_or("-".into(), |v| format!("{v:.2}"))
            );
        }
    }
    for (name, majority, shares) in summary {
        println!(
            "{name}: learned wins on most seeds on {majority} of {ops} ops; mean win rate {:.2}",
            shares / ops.max(1) as f64
        );
    }
    Ok(())
}

/// One operator's table: its spec, generic point, points and samples.
type Table = (OpSpec, AutoPoint, TableSpace, Vec<Sample>);

/// `--first-picks`: per table and configuration, the model trained on the configuration's prior
/// alone (as before a search's first batch) ranks every point of the table; prints where its
/// first pick ranks among the table's measured speeds, and whether its first and its first
/// eight picks include a point within the tolerance of the table's best, beside the share of
/// the table that is (a random draw's chance).
fn first_picks(
    args: &Args,
    tables: &[Table],
    configs: &[(String, (SearchOptions, Prior))],
    (shipped, level): (&[PriorWorkload], IsaLevel),
) -> Result<(), Error> {
    println!("| op | table points | config | first pick's speed rank | hit at 1 | hit in 8 | share within tolerance |");
    println!("|---|---|---|---|---|---|---|");
    // Per configuration: tables hit at 1, 2, 4 and 8 picks, the first picks' relative speeds.
    let mut totals: Vec<([usize; 4], f64, f64)> = vec![([0; 4], 0.0, 0.0); configs.len()];
    for (index, (spec, _, _, measured)) in tables.iter().enumerate() {
        let ok: Vec<f64> = measured.iter().filter_map(|s| s.seconds).collect();
        let Some(best) = ok.iter().copied().min_by(f64::total_cmp) else { continue };
        let target = best / (1.0 - args.tolerance);
        let share = ok.iter().filter(|&&t| t <= target).count() as f64 / measured.len() as f64;
        for ((name, (options, from)), total) in configs.iter().zip(totals.iter_mut()) {
            let mut prior: Vec<Vec<Sample>> = if from.transfer {
                tables.iter().enumerate().filter(|(j, _)| *j != index).map(|(_, t)| t.3.clone()).collect()
            } else {
                vec![]
            };
            if from.shipped {
                prior.extend(samples(shipped, level, args.threads, &spec_workload(spec)?.key));
            }
            let mut model = CostModel::new(options.model.clone());
            let workloads: Vec<&[Sample]> = prior.iter().map(Vec::as_slice).collect();
            model.fit(&workloads)?;
            let features: Vec<Vec<f32>> = measured.iter().map(|s| s.features.clone()).collect();
            let predicted = model.predict(&features)?;
            let mut order: Vec<usize> = (0..measured.len()).collect();
            order.sort_by(|&a, &b| predicted[b].total_cmp(&predicted[a]));
            let hit = |k: usize| order.iter().take(k).any(|&i| measured[i].seconds.is_some_and(|t| t <= target));
            let rank = measured[order[0]]
                .seconds
                .map(|t| ok.iter().filter(|&&u| u < t).count() + 1)
                .map_or("failed".to_string(), |r| format!("{r} of {}", ok.len()));
            for (count, k) in total.0.iter_mut().zip([1, 2, 4, 8]) {
                *count += hit(k) as usize;
            }
            total.1 += measured[order[0]].seconds.map_or(0.0, |t| best / t);
            total.2 += share;
            println!(
                "| {} | {} | {name} | {rank} | {} | {} | {share:.2} |",
                spec.label(),
                measured.len(),
                hit(1),
                hit(8)
            );
        }
    }
    let n = tables.len().max(1) as f64;
    for ((name, _), (hits, speed, share)) in configs.iter().zip(totals) {
        println!(
            "{name}: within tolerance among the first 1, 2, 4, 8 picks on {hits:?} of {} tables; first pick at {:.2} of the best speed on average; mean share within tolerance {:.2}",
            tables.len(),
            speed / n,
            share / n
        );
    }
    Ok(())
}
