//! Builds the learned search's shipped prior (`tune::prior`, `tuning/prior.jsonl`) from a table of
//! random-search records of `tune::prior::specs()` measured on this CPU:
//!
//! ```sh
//! python3 scripts/search_table.py --tensorlift target/release/tensorlift --set prior --points 120 \
//!     --threads 1 --seed 2000 --out /tmp/prior_table
//! cargo run --release --example build_prior -- --table /tmp/prior_table --out tuning/prior.jsonl
//! ```
//!
//! `--threads N` (default 1) must be the table's `--threads`. An existing `--out` file keeps its
//! workloads of other ISA levels or thread counts (a prior per level, each measured on a CPU of
//! that level); those of this level and threads are replaced.

use std::io::Write;
use std::path::PathBuf;

use tensorlift::isa::IsaLevel;
use tensorlift::record::{CpuRef, Database};
use tensorlift::tune::prior::{PriorWorkload, build, parse, specs};

type Error = Box<dyn std::error::Error>;

fn main() -> Result<(), Error> {
    let (mut table, mut out, mut threads) = (None, None, 1usize);
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{flag} expects a value"));
        match flag.as_str() {
            "--table" => table = Some(PathBuf::from(value()?)),
            "--out" => out = Some(PathBuf::from(value()?)),
            "--threads" => threads = value()?.parse()?,
            other => return Err(format!("unknown flag {other:?}").into()),
        }
    }
    let (Some(table), Some(out)) = (table, out) else {
        return Err("expected --table DIR --out FILE".into());
    };
    let level = IsaLevel::detect().ok_or("no supported ISA level on this CPU")?;
    let cpu = tensorlift::isa::cpu_id().as_ref().map(CpuRef::from).ok_or("this CPU does not identify itself")?;
    let records = Database::load_dir(&table)?;
    let prior = build(&specs(), &records, level, threads, &cpu)?;
    // The lines of other levels or threads kept as they are (not re-serialized).
    let text = match std::fs::read_to_string(&out) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(e.into()),
    };
    let mut kept: Vec<&str> = Vec::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let w: PriorWorkload = parse(line)?.remove(0);
        if w.isa != level.name() || w.threads != threads {
            kept.push(line);
        }
    }
    let mut file = std::fs::File::create(&out)?;
    for line in kept {
        writeln!(file, "{line}")?;
    }
    for w in &prior {
        writeln!(file, "{}", serde_json::to_string(w)?)?;
        eprintln!("{}: {} points", w.spec.label(), w.points.len());
    }
    Ok(())
}
