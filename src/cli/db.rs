//! `tensorlift db merge A B ... --out C` and `tensorlift db best A B ... --out C`: tuning
//! databases merged, or reduced to the best record per workload and target.

use std::error::Error;
use std::path::PathBuf;

use clap::Subcommand;
use tensorlift::record::{self, Database};

/// `tensorlift db merge|best`.
#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    what: DbCommand,
}

#[derive(Subcommand)]
enum DbCommand {
    /// Merge databases into one (records deduplicated; malformed lines reported and skipped).
    Merge {
        inputs: Vec<PathBuf>,
        #[arg(long)]
        out: PathBuf,
    },
    /// Keep the fastest verified record per workload and target (ISA level, CPU model,
    /// weights): how `tuning/pretuned.jsonl` is made.
    Best {
        inputs: Vec<PathBuf>,
        #[arg(long)]
        out: PathBuf,
    },
}

pub fn run(args: Args) -> Result<(), Box<dyn Error>> {
    match args.what {
        DbCommand::Merge { inputs, out } => {
            let paths: Vec<&std::path::Path> = inputs.iter().map(PathBuf::as_path).collect();
            let (count, errors) = record::merge(&paths, &out)?;
            for e in &errors {
                eprintln!("skipped: {e}");
            }
            println!("{count} records from {} database(s) in {}", inputs.len(), out.display());
            Ok(())
        }
        DbCommand::Best { inputs, out } => {
            let mut records = Vec::new();
            for path in &inputs {
                let loaded = Database::load(path)?;
                for e in &loaded.errors {
                    eprintln!("skipped: {e}");
                }
                records.extend(loaded.records);
            }
            let best = record::best_per_workload(&records);
            record::write(&out, &best)?;
            println!("{} best records of {} in {}", best.len(), records.len(), out.display());
            Ok(())
        }
    }
}
