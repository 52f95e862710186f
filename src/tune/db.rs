//! The tuning record database: append-only JSON lines, one record per measurement.
//!
//! The keys are a public format (`Record`); appends take an exclusive file lock, so concurrent
//! writers (local workers, `tensorlift measure` on several machines writing to a shared file)
//! never interleave lines. A line that does not parse is a typed error naming it, and the other
//! lines still serve.

use std::fs::OpenOptions;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::runtime::{CpuId, IsaLevel};

/// Version of the record format.
pub const RECORD_VERSION: u32 = 1;

/// What was measured.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkloadRef {
    /// Stable hash of the canonical definition.
    pub key: String,
    /// The operator family (`conv2d_int8`, `dense_int8`).
    pub op: String,
    /// Readable shapes and dtypes.
    pub summary: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CpuRef {
    pub vendor: String,
    pub family: u32,
    pub model: u32,
    pub name: String,
}

impl From<&CpuId> for CpuRef {
    fn from(c: &CpuId) -> CpuRef {
        CpuRef { vendor: c.vendor.clone(), family: c.family, model: c.model, name: c.name.clone() }
    }
}

/// Where it was measured, and what the code needs to run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TargetRef {
    /// The ISA level the code was compiled for (`IsaLevel::name`).
    pub isa: String,
    pub cpu: CpuRef,
    /// CPU features the code needs (`std::arch::is_x86_feature_detected!` names).
    pub features: Vec<String>,
    pub threads: usize,
}

/// How a measurement ended. Only `Ok` records carry a time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    Ok,
    /// The point was rejected before compiling, or compiling failed.
    BuildError,
    /// The call failed or the worker crashed.
    RunError,
    /// The output differs from the reference.
    Mismatch,
    Timeout,
    /// The host lacks the level the candidate asks for.
    UnsupportedIsa,
}

/// One measurement: the public JSON-lines format.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Record {
    pub version: u32,
    pub workload: WorkloadRef,
    pub target: TargetRef,
    /// `{"knobs": {...}, "trace": ...}`: the template's knobs (`tune::space::Point`) and, when
    /// known, the schedule trace.
    pub schedule: serde_json::Value,
    pub status: Status,
    pub median_ns: Option<f64>,
    pub gops: Option<f64>,
    pub compile_ms: Option<f64>,
    pub verified: bool,
    /// RFC 3339, UTC.
    pub measured_at: String,
    /// Why a failed measurement failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The peak probe's GOPS measured beside the candidate (all its threads), and which probe.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peak_gops: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peak_probe: Option<String>,
}

impl Record {
    /// GOPS as a percentage of the probe measured beside it.
    pub fn pct_peak(&self) -> Option<f64> {
        Some(100.0 * self.gops? / self.peak_gops?)
    }

    /// Whether the measurement counts: it ran, matched the reference and has a time.
    pub fn ok(&self) -> bool {
        self.status == Status::Ok && self.verified && self.median_ns.is_some()
    }
}

/// Errors from reading and writing databases.
#[derive(Debug, Error)]
pub enum DbError {
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("{path}:{line}: not a tuning record: {message}")]
    Malformed { path: PathBuf, line: usize, message: String },
    #[error("{path}:{line}: record version {found}, expected {expected}")]
    Version { path: PathBuf, line: usize, found: u32, expected: u32 },
}

/// The records of a database file, with the lines that were not records.
#[derive(Debug, Default)]
pub struct Database {
    pub records: Vec<Record>,
    /// One typed error per line that did not parse; the other lines still serve.
    pub errors: Vec<DbError>,
}

/// The RFC 3339 time now, UTC, to the second.
pub fn now_rfc3339() -> String {
    humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string()
}

impl Database {
    /// Reads `path`; a missing file is an empty database.
    pub fn load(path: &Path) -> Result<Database, DbError> {
        match std::fs::read_to_string(path) {
            Ok(text) => Ok(Database::parse(&text, path)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Database::default()),
            Err(source) => Err(DbError::Io { path: path.to_path_buf(), source }),
        }
    }

    /// The records of `text` (the lines of a database file named `path` in errors).
    pub fn parse(text: &str, path: &Path) -> Database {
        let mut db = Database::default();
        for (i, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let number = i + 1;
            match serde_json::from_str::<Record>(line) {
                Ok(r) if r.version != RECORD_VERSION => db.errors.push(DbError::Version {
                    path: path.to_path_buf(),
                    line: number,
                    found: r.version,
                    expected: RECORD_VERSION,
                }),
                Ok(r) => db.records.push(r),
                Err(e) => db.errors.push(DbError::Malformed {
                    path: path.to_path_buf(),
                    line: number,
                    message: e.to_string(),
                }),
            }
        }
        db
    }

    /// The best usable record for `workload` on this host (see `select`).
    pub fn best(&self, workload: &str, host: &Host) -> Option<&Record> {
        select(&self.records, workload, host)
    }
}

/// Appends `records` to `path` (created if missing) under an exclusive lock, one line each.
pub fn append(path: &Path, records: &[Record]) -> Result<(), DbError> {
    let io = |source| DbError::Io { path: path.to_path_buf(), source };
    let mut text = String::new();
    for r in records {
        text.push_str(&serde_json::to_string(r).expect("records serialize"));
        text.push('\n');
    }
    let mut file = OpenOptions::new().create(true).append(true).open(path).map_err(io)?;
    file.lock().map_err(io)?;
    let written = file.write_all(text.as_bytes()).and_then(|()| file.flush());
    let unlocked = file.unlock();
    written.map_err(io)?;
    unlocked.map_err(io)
}

/// What the query compares records against: this machine.
#[derive(Clone, Debug)]
pub struct Host {
    pub cpu: Option<CpuRef>,
    pub level: IsaLevel,
    /// Whether the host has a CPU feature (by `is_x86_feature_detected!` name).
    pub has_feature: fn(&str) -> bool,
}

impl Host {
    /// This machine, at the level it would compile for.
    pub fn this(level: IsaLevel) -> Host {
        Host {
            cpu: crate::runtime::cpu_id().as_ref().map(CpuRef::from),
            level,
            has_feature: crate::runtime::has_feature,
        }
    }
}

/// Whether `r` re-measured a finalist after the search (`tune_layer`'s validation phase).
pub fn is_validation(r: &Record) -> bool {
    r.schedule.get("phase").and_then(|p| p.as_str()) == Some("validation")
}

/// A time of `r` (seconds, or any unit shared by the records compared): `None` sorts last.
pub type TimeOf<'t> = &'t dyn Fn(&Record) -> Option<f64>;

/// Times corrected for the phases of a shared machine. Each record's probe ran beside the
/// candidate on its threads, so when the machine slows down (another tenant, the hypervisor)
/// both slow down together: the corrected time is the median time × the record's probe ÷ the
/// fastest run of the same probe on as many threads of the same CPU model among the records,
/// the time the candidate would have taken with the machine to itself. Seen on the 2-vCPU
/// Zen 4: for seconds at a time, the two-thread probe and every two-thread candidate ran at
/// one thread's speed (most of a layer's records, at times, so the median probe would be the
/// slow state; a whole validation phase once, whose records then lost in `best_per_workload`
/// to a slower schedule measured in a fast phase). Tuning, the query and `best_per_workload`
/// all compare records by it.
#[derive(Clone, Debug, Default)]
pub struct Phases {
    /// (the CPU, the probe and its threads, its highest GOPS).
    fastest: Vec<(ProbeKey, f64)>,
}

/// A probe (which method) on a number of threads of one CPU model.
type ProbeKey = ((String, u32, u32), Option<String>, usize);

fn probe_key(r: &Record) -> ProbeKey {
    let cpu = &r.target.cpu;
    ((cpu.vendor.clone(), cpu.family, cpu.model), r.peak_probe.clone(), r.target.threads)
}

impl Phases {
    pub fn of<'a>(records: impl IntoIterator<Item = &'a Record>) -> Phases {
        let mut fastest: Vec<(ProbeKey, f64)> = Vec::new();
        for r in records {
            let Some(probe) = r.peak_gops.filter(|p| *p > 0.0) else { continue };
            let key = probe_key(r);
            match fastest.iter_mut().find(|(k, _)| *k == key) {
                Some((_, fastest)) => *fastest = fastest.max(probe),
                None => fastest.push((key, probe)),
            }
        }
        Phases { fastest }
    }

    /// Whether `r` was measured with the machine near its fastest: its probe ran at `QUIET` of
    /// the fastest run of the same probe or more (a record without a probe counts). Its measured
    /// time needs little correction, so it compares as measured with records of other targets:
    /// a database keeps measured times, and the query weighs one-thread records against
    /// two-thread ones by them.
    pub fn quiet(&self, r: &Record) -> bool {
        match (r.peak_gops, self.fastest(r)) {
            (Some(probe), Some(fastest)) => probe >= QUIET * fastest,
            _ => true,
        }
    }

    /// The fastest run of `r`'s probe among the records.
    fn fastest(&self, r: &Record) -> Option<f64> {
        let key = probe_key(r);
        self.fastest.iter().find(|(k, _)| *k == key).map(|(_, p)| *p)
    }

    /// `representatives` of the `quiet` records, by corrected time.
    pub fn quiet_representatives<'a>(&self, records: impl Iterator<Item = &'a Record>) -> Vec<&'a Record> {
        self.representatives(records.filter(|r| self.quiet(r)))
    }

    /// `r`'s median time in seconds, corrected; uncorrected when it has no probe.
    pub fn seconds(&self, r: &Record) -> Option<f64> {
        let seconds = r.median_ns? * 1e-9;
        Some(match (r.peak_gops, self.fastest(r)) {
            (Some(probe), Some(fastest)) if probe > 0.0 => seconds * probe / fastest,
            _ => seconds,
        })
    }

    /// Records by corrected time, fastest first; records without a time last.
    pub fn by_time(&self, a: &&Record, b: &&Record) -> std::cmp::Ordering {
        by(&|r| self.seconds(r), a, b)
    }

    /// `representatives` by corrected time.
    pub fn representatives<'a>(&self, records: impl Iterator<Item = &'a Record>) -> Vec<&'a Record> {
        representatives(records, &|r| self.seconds(r))
    }

    /// `r`'s GOPS, corrected likewise.
    pub fn gops(&self, r: &Record) -> Option<f64> {
        let gops = r.gops?;
        Some(gops * r.median_ns? * 1e-9 / self.seconds(r)?)
    }
}

/// The share of the fastest probe from which a record is `Phases::quiet`: a slow phase of the
/// 2-vCPU Zen 4 halves the two-thread probe; a quiet one varies by a few per cent.
pub const QUIET: f64 = 0.9;

/// Records by `time`, fastest first; records without one last.
pub fn by(time: TimeOf, a: &Record, b: &Record) -> std::cmp::Ordering {
    time(a).unwrap_or(f64::MAX).total_cmp(&time(b).unwrap_or(f64::MAX))
}

/// One record per schedule (knobs, weights) and target (ISA level, CPU model, threads): the
/// one with the median `time`. A single measurement of a multi-threaded layer of 0.1 ms varies
/// by ±40% here, so the fastest record of many would mostly be the luckiest; when any record is
/// a validation record (finalists measured again, in rounds), only those count.
pub fn representatives<'a>(records: impl Iterator<Item = &'a Record>, time: TimeOf) -> Vec<&'a Record> {
    let records: Vec<&Record> = records.collect();
    let validated = records.iter().any(|r| is_validation(r));
    let key = |r: &Record| {
        (
            r.schedule.get("knobs").cloned(),
            r.schedule.get("weights").cloned(),
            r.target.isa.clone(),
            (r.target.cpu.vendor.clone(), r.target.cpu.family, r.target.cpu.model),
            r.target.threads,
        )
    };
    let mut groups: Vec<Vec<&Record>> = Vec::new();
    for r in records.into_iter().filter(|r| !validated || is_validation(r)) {
        match groups.iter_mut().find(|g| key(g[0]) == key(r)) {
            Some(g) => g.push(r),
            None => groups.push(vec![r]),
        }
    }
    groups
        .into_iter()
        .map(|mut g| {
            g.sort_by(|a, b| by(time, a, b));
            g[(g.len() - 1) / 2]
        })
        .collect()
}

/// The record to apply for `workload` on `host`: same workload key, status ok, verified, every
/// feature it needs present on the host, a level the host compiles for; per schedule, the
/// median of its quiet (validation) records by corrected time (`Phases::quiet_representatives`:
/// a record measured in a slow phase keeps its slow time); among those, prefer the same CPU
/// model (vendor, family, model), then the same ISA level, then the same vendor and family (a
/// Zen 4 of another model takes the records of the measured Zen 4 rather than an Intel CPU's,
/// whose 1×1 layers chose one thread where the Zen 4's chose two), then the fastest by
/// corrected time. `None`:
/// use the default schedule.
pub fn select<'a>(records: impl IntoIterator<Item = &'a Record>, workload: &str, host: &Host) -> Option<&'a Record> {
    let same_family = |r: &Record| {
        host.cpu.as_ref().is_some_and(|c| r.target.cpu.vendor == c.vendor && r.target.cpu.family == c.family)
    };
    let same_cpu = |r: &Record| same_family(r) && host.cpu.as_ref().is_some_and(|c| r.target.cpu.model == c.model);
    let usable = records
        .into_iter()
        .filter(|r| r.workload.key == workload && r.ok())
        .filter(|r| r.target.features.iter().all(|f| (host.has_feature)(f)))
        .filter(|r| IsaLevel::from_name(&r.target.isa).is_ok_and(|l| l <= host.level));
    let usable: Vec<&Record> = usable.collect();
    let phases = Phases::of(usable.iter().copied());
    phases.quiet_representatives(usable.into_iter()).into_iter().min_by(|a, b| {
        let rank = |r: &Record| (!same_cpu(r), r.target.isa != host.level.name(), !same_family(r));
        rank(a).cmp(&rank(b)).then(phases.by_time(a, b))
    })
}

/// Per workload and target (ISA level, CPU vendor, family and model, weights range of the
/// schedule, threads), the fastest schedule's representative record by corrected time
/// (`Phases::quiet_representatives` of that target's records: a schedule measured mostly in a
/// slow phase is judged by its quiet records, and its representative is one of them, whose
/// time the query compares with other targets'), in first-seen order: what a pre-tuned
/// database keeps.
pub fn best_per_workload(records: &[Record]) -> Vec<Record> {
    let target = |r: &Record| {
        (
            r.workload.key.clone(),
            r.target.isa.clone(),
            r.target.cpu.vendor.clone(),
            r.target.cpu.family,
            r.target.cpu.model,
            r.schedule.get("weights").cloned(),
            r.target.threads,
        )
    };
    let ok: Vec<&Record> = records.iter().filter(|r| r.ok()).collect();
    let mut best: Vec<Record> = Vec::new();
    let mut seen = Vec::new();
    for r in &ok {
        if seen.contains(&target(r)) {
            continue;
        }
        seen.push(target(r));
        let same: Vec<&Record> = ok.iter().copied().filter(|o| target(o) == target(r)).collect();
        let phases = Phases::of(same.iter().copied());
        let quiet = phases.quiet_representatives(same.into_iter());
        if let Some(b) = quiet.into_iter().min_by(|a, b| phases.by_time(a, b)) {
            best.push(b.clone());
        }
    }
    best
}

/// Merges databases: every record of every input, in order, without exact duplicates, written
/// to `out` (replaced). Malformed lines are reported and skipped.
pub fn merge(inputs: &[&Path], out: &Path) -> Result<(usize, Vec<DbError>), DbError> {
    let mut records: Vec<Record> = Vec::new();
    let mut errors = Vec::new();
    for path in inputs {
        let db = Database::load(path)?;
        errors.extend(db.errors);
        for r in db.records {
            if !records.contains(&r) {
                records.push(r);
            }
        }
    }
    let text: String = records.iter().map(|r| serde_json::to_string(r).expect("records serialize") + "\n").collect();
    std::fs::write(out, text).map_err(|source| DbError::Io { path: out.to_path_buf(), source })?;
    Ok((records.len(), errors))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(key: &str, isa: IsaLevel, model: u32, median_ns: f64) -> Record {
        Record {
            version: RECORD_VERSION,
            workload: WorkloadRef { key: key.into(), op: "conv2d_int8".into(), summary: "test".into() },
            target: TargetRef {
                isa: isa.name().into(),
                cpu: CpuRef { vendor: "AuthenticAMD".into(), family: 25, model, name: "test".into() },
                features: isa.features().into_iter().map(String::from).collect(),
                threads: 1,
            },
            schedule: serde_json::json!({"knobs": {"mr": 4}}),
            status: Status::Ok,
            median_ns: Some(median_ns),
            gops: Some(1.0),
            compile_ms: Some(1.0),
            verified: true,
            measured_at: now_rfc3339(),
            error: None,
            peak_gops: None,
            peak_probe: None,
        }
    }

    /// An AVX2-only Zen 3 (family 25 model 1).
    fn zen3() -> Host {
        let has = |f: &str| IsaLevel::Avx2.features().contains(&f);
        Host {
            cpu: Some(CpuRef { vendor: "AuthenticAMD".into(), family: 25, model: 1, name: "zen3".into() }),
            level: IsaLevel::Avx2,
            has_feature: has,
        }
    }

    #[test]
    fn the_query_needs_the_features_then_prefers_the_cpu_model_then_the_level() {
        let host = zen3();
        // A faster record from a CPU with AVX-512 VNNI is never applied here.
        let vnni = record("w", IsaLevel::Avx512Vnni, 17, 10.0);
        assert_eq!(select(std::slice::from_ref(&vnni), "w", &host), None);
        // Same model beats a faster record from another model; same level beats a lower one.
        let other_model = record("w", IsaLevel::Avx2, 33, 20.0);
        let same_model = record("w", IsaLevel::Avx2, 1, 30.0);
        let same_model_scalar = record("w", IsaLevel::Scalar, 1, 25.0);
        let all = [vnni, other_model.clone(), same_model_scalar.clone(), same_model.clone()];
        assert_eq!(select(&all, "w", &host), Some(&same_model));
        assert_eq!(select(&all[..3], "w", &host), Some(&same_model_scalar));
        assert_eq!(select(&all[..2], "w", &host), Some(&other_model));
        // Among other models at the level, the same vendor and family beats a faster record.
        let mut intel = record("w", IsaLevel::Avx2, 167, 15.0);
        (intel.target.cpu.vendor, intel.target.cpu.family) = ("GenuineIntel".into(), 6);
        assert_eq!(select([&intel, &other_model], "w", &host), Some(&other_model));
        assert_eq!(select([&intel, &all[2]], "w", &host), Some(&all[2]));
        let zen4_scalar = record("w", IsaLevel::Scalar, 17, 20.0);
        assert_eq!(select([&zen4_scalar, &intel], "w", &host), Some(&intel));
        // Other workloads, failed or unverified measurements never serve.
        assert_eq!(select(&all, "other", &host), None);
        let failed = Record { status: Status::Timeout, median_ns: None, ..same_model.clone() };
        let unverified = Record { verified: false, ..same_model.clone() };
        assert_eq!(select(&[failed, unverified], "w", &host), None);
        // A host forced down to scalar does not take avx2 records.
        let scalar_host = Host { level: IsaLevel::Scalar, ..zen3() };
        assert_eq!(select(&all, "w", &scalar_host), Some(&same_model_scalar));
    }

    #[test]
    fn the_query_and_the_pretuned_best_judge_schedules_by_their_quiet_records() {
        let host = zen3();
        let measured = |mr: i64, threads: usize, median_ns: f64, probe: f64| {
            let mut r = Record {
                schedule: serde_json::json!({"knobs": {"mr": mr}, "phase": "validation"}),
                peak_gops: Some(probe),
                peak_probe: Some("vpmaddwd+vpaddd ymm".into()),
                ..record("w", IsaLevel::Avx2, 1, median_ns)
            };
            r.target.threads = threads;
            r
        };
        // Two threads: mr 4 was measured twice in a slow phase (its probe at half speed) and
        // once in a quiet one; mr 8 three times in quiet ones. By measured medians mr 8 would
        // win (685 against 450 ns); by corrected ones alone mr 4 would, but its representative
        // would be a slow record, which the query would weigh against the one-thread record
        // (500 ns) as 690 ns.
        let records: Vec<Record> = [
            (4, 2, 690.0, 190.0),
            (8, 2, 448.0, 375.0),
            (4, 2, 685.0, 191.0),
            (8, 2, 450.0, 380.0),
            (4, 2, 350.0, 381.0),
            (8, 2, 455.0, 379.0),
            (2, 1, 500.0, 190.0),
        ]
        .into_iter()
        .map(|(mr, threads, ns, probe)| measured(mr, threads, ns, probe))
        .collect();
        let chosen = |r: &Record| (r.schedule["knobs"]["mr"].as_i64(), r.median_ns);
        assert_eq!(select(&records, "w", &host).map(chosen), Some((Some(4), Some(350.0))));
        let best = best_per_workload(&records);
        assert_eq!(best.iter().map(chosen).collect::<Vec<_>>(), [(Some(4), Some(350.0)), (Some(2), Some(500.0))]);
        // Slow records are corrected by the fastest run of their probe on as many threads of
        // the same CPU: another CPU's faster run does not count.
        let mut xeon = measured(2, 2, 100.0, 760.0);
        (xeon.target.cpu.vendor, xeon.target.cpu.family, xeon.target.cpu.model) = ("GenuineIntel".into(), 6, 167);
        let phases = Phases::of(records.iter().chain([&xeon]));
        let seconds = |r: &Record| phases.seconds(r).expect("a time");
        for (r, expected) in [(&records[0], 690e-9 * 190.0 / 381.0), (&records[4], 350e-9), (&xeon, 100e-9)] {
            assert!((seconds(r) - expected).abs() < 1e-15, "{} against {expected}", seconds(r));
        }
        assert!(!phases.quiet(&records[0]) && phases.quiet(&records[1]) && phases.quiet(&xeon));
    }

    #[test]
    fn malformed_lines_are_named_and_the_rest_serve_and_merge_dedups() {
        let dir = std::env::temp_dir().join(format!("tensorlift-db-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("a.jsonl");
        let _ = std::fs::remove_file(&path);
        let good = record("w", IsaLevel::Avx2, 1, 5.0);
        append(&path, std::slice::from_ref(&good)).unwrap();
        let mut text = std::fs::read_to_string(&path).unwrap();
        text.push_str("{\"version\": 1, \"workload\": 3}\nnot json\n");
        text.push_str(&serde_json::to_string(&Record { version: 9, ..good.clone() }).unwrap());
        text.push('\n');
        std::fs::write(&path, text).unwrap();
        append(&path, &[record("w", IsaLevel::Avx2, 1, 4.0)]).unwrap();
        let db = Database::load(&path).unwrap();
        assert_eq!(db.records.len(), 2);
        let errors: Vec<String> = db.errors.iter().map(ToString::to_string).collect();
        assert_eq!(errors.len(), 3, "{errors:?}");
        assert!(errors[0].contains("a.jsonl:2: not a tuning record"), "{}", errors[0]);
        assert!(errors[1].contains("a.jsonl:3: not a tuning record"), "{}", errors[1]);
        assert!(errors[2].contains("a.jsonl:4: record version 9, expected 1"), "{}", errors[2]);
        assert_eq!(db.best("w", &zen3()).and_then(|r| r.median_ns), Some(4.0));

        let other = dir.join("b.jsonl");
        let _ = std::fs::remove_file(&other);
        append(&other, &[good.clone(), record("v", IsaLevel::Scalar, 1, 7.0)]).unwrap();
        let merged = dir.join("merged.jsonl");
        let (count, errors) = merge(&[&path, &other], &merged).unwrap();
        assert_eq!((count, errors.len()), (3, 3));
        assert_eq!(Database::load(&merged).unwrap().records.len(), 3);
        assert!(Database::load(&dir.join("missing.jsonl")).unwrap().records.is_empty());

        // One record per workload and target, the fastest.
        let all = Database::load(&merged).unwrap().records;
        let best = best_per_workload(&all);
        assert_eq!(
            best.iter().map(|r| (r.workload.key.as_str(), r.median_ns)).collect::<Vec<_>>(),
            [("w", Some(4.0)), ("v", Some(7.0))]
        );
    }

    #[test]
    fn concurrent_appends_never_interleave_lines() {
        let path = std::env::temp_dir().join(format!("tensorlift-db-concurrent-{}.jsonl", std::process::id()));
        let _ = std::fs::remove_file(&path);
        std::thread::scope(|s| {
            for t in 0..4 {
                let path = &path;
                s.spawn(move || {
                    for i in 0..50 {
                        append(path, &[record(&format!("w{t}"), IsaLevel::Avx2, 1, i as f64 + 1.0)]).unwrap();
                    }
                });
            }
        });
        let db = Database::load(&path).unwrap();
        assert!(db.errors.is_empty(), "{:?}", db.errors);
        assert_eq!(db.records.len(), 200);
    }
}
