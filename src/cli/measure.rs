//! `tensorlift measure`: candidates (`tune::worker::Candidate`) as JSON lines on stdin, one
//! record per line on stdout — the tuner's worker, and what any engine fans out to machines with
//! the target CPU.

use std::error::Error;
use std::path::PathBuf;

use tensorlift::record;
use tensorlift::tune::worker;

/// `tensorlift measure [--db FILE]`.
#[derive(clap::Args)]
pub struct Args {
    /// Also append every record to this database.
    #[arg(long)]
    db: Option<PathBuf>,
}

pub fn run(args: Args) -> Result<(), Box<dyn Error>> {
    worker::serve(std::io::stdin().lock(), std::io::stdout().lock(), |record| match &args.db {
        Some(path) => record::append(path, std::slice::from_ref(record)).map_err(std::io::Error::other),
        None => Ok(()),
    })?;
    Ok(())
}
