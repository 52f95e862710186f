//! Builds the learned search's shipped prior (`tune::prior`, `tuning/prior.jsonl`) from a table of
//! random-search records of `tune::prior::specs()` measured on this CPU:
//!
//! ```sh
//! python3 scripts/search_table.py --tensorlift target/release/tensorlift --set prior --points 120 \
//!     --threads 1 --seed 2000 --out /tmp/prior_table
//! cargo run --release --example build_prior -- --table /tmp/prior_table --out tuning/prior.jsonl
//! ```
//!
//! A table measured at a lower level (`TENSORLIFT_ISA=avx2` for both commands) builds that
//! level's lines. `--threads N` (default 1) must be the table's `--threads`. An existing `--out` file keeps its
//! workloads of other ISA levels or thread counts (a prior per level, each measured on a CPU of
//! that level); those of this level and threads that the table measured are replaced, the others
//! kept, so a table of some specs alone (`search_table.py --set prior --only ...`) adds or
//! re-measures just those. This level's lines are written in `specs()` order.
//!
//! `--refresh FILE` instead recomputes the features of every point of the prior `FILE` with the
//! current code (lowering only, any level on any CPU) and keeps the measured times: after a
//! change to the lowered code of the spaces, when the times still rank the points.

use std::io::Write;
use std::path::PathBuf;

use tensorlift::isa::IsaLevel;
use tensorlift::record::{CpuRef, Database};
use tensorlift::tune::prior::{PriorError, PriorWorkload, build, features_now, parse, round, specs};

type Error = Box<dyn std::error::Error>;

fn main() -> Result<(), Error> {
    let (mut table, mut out, mut threads, mut refresh) = (None, None, 1usize, None);
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{flag} expects a value"));
        match flag.as_str() {
            "--table" => table = Some(PathBuf::from(value()?)),
            "--out" => out = Some(PathBuf::from(value()?)),
            "--threads" => threads = value()?.parse()?,
            "--refresh" => refresh = Some(PathBuf::from(value()?)),
            other => return Err(format!("unknown flag {other:?}").into()),
        }
    }
    if let Some(file) = refresh {
        return refresh_features(&file);
    }
    let (Some(table), Some(out)) = (table, out) else {
        return Err("expected --table DIR --out FILE".into());
    };
    // The level the table was measured at: this CPU's best, or `TENSORLIFT_ISA` as for the
    // search table's runs.
    let level = tensorlift::Target::Native.level()?;
    let cpu = tensorlift::isa::cpu_id().as_ref().map(CpuRef::from).ok_or("this CPU does not identify itself")?;
    let records = Database::load_dir(&table)?;
    // The lines of other levels or threads kept as they are (not re-serialized), and this
    // level's by workload key.
    let text = match std::fs::read_to_string(&out) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(e.into()),
    };
    let mut kept: Vec<&str> = Vec::new();
    let mut own: Vec<(String, &str)> = Vec::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let w: PriorWorkload = parse(line)?.remove(0);
        if w.isa != level.name() || w.threads != threads {
            kept.push(line);
        } else {
            own.push((w.key, line));
        }
    }
    // Per spec: the table's measurements, else this level's line as it was.
    let mut lines: Vec<String> = Vec::new();
    for spec in specs() {
        match build(std::slice::from_ref(&spec), &records, level, threads, &cpu) {
            Ok(built) => {
                for w in built {
                    eprintln!("{}: {} points measured", w.spec.label(), w.points.len());
                    lines.push(serde_json::to_string(&w)?);
                }
            }
            Err(PriorError::Missing { op }) => {
                let key = tensorlift::tune::prior::key_of(&spec)?;
                let line = own.iter().find(|(k, _)| *k == key).map(|(_, l)| *l);
                let line = line.ok_or_else(|| format!("{op}: neither in the table nor in {}", out.display()))?;
                eprintln!("{op}: kept");
                lines.push(line.to_string());
            }
            Err(e) => return Err(e.into()),
        }
    }
    let mut file = std::fs::File::create(&out)?;
    for line in kept {
        writeln!(file, "{line}")?;
    }
    for line in lines {
        writeln!(file, "{line}")?;
    }
    Ok(())
}

/// Rewrites the prior `file` with every point's features recomputed, times kept; the lines
/// of workloads whose features did not change are kept as they are.
fn refresh_features(file: &PathBuf) -> Result<(), Error> {
    let text = std::fs::read_to_string(file)?;
    let mut lines = Vec::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let mut w: PriorWorkload = parse(line)?.remove(0);
        let level = IsaLevel::ALL.into_iter().find(|l| l.name() == w.isa).ok_or("an unknown ISA level")?;
        let mut changed = 0;
        for p in &mut w.points {
            let now = features_now(&w.spec, &p.point, level, w.threads).ok_or("the space rejects a prior point")?;
            let now: Vec<f32> = now.into_iter().map(round).collect();
            changed += usize::from(now != p.features);
            p.features = now;
        }
        eprintln!("{} {} {}T: {changed} of {} points changed", w.spec.label(), w.isa, w.threads, w.points.len());
        lines.push(if changed == 0 { line.to_string() } else { serde_json::to_string(&w)? });
    }
    let mut out = std::fs::File::create(file)?;
    for line in lines {
        writeln!(out, "{line}")?;
    }
    Ok(())
}
