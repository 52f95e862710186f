//! Database files: append-only JSON lines, one `Record` per measurement. Appends take an
//! exclusive file lock, so concurrent writers (local workers, `tensorlift measure` on several
//! machines writing to a shared file) never interleave lines. A line that is not a record — a
//! malformed schedule or knobs object included, or a record that counts (`Record::ok`) with
//! knobs no schedule accepts — is a typed error naming its line; `Database::load` keeps the
//! other lines, `Database::load_strict` (for what ships) refuses the file.

use std::fs::OpenOptions;
use std::io::Write;
use std::path::{Path, PathBuf};

use schedules::x86_conv::KnobError;
use thiserror::Error;

use super::format::{RECORD_VERSION, Record};
use super::query::{Host, select};

/// Errors from reading and writing databases.
#[derive(Debug, Error)]
pub enum DbError {
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("{path}:{line}: not a tuning record: {message}")]
    Malformed { path: PathBuf, line: usize, message: String },
    #[error("{path}:{line}: record version {found}, expected {expected}")]
    Version { path: PathBuf, line: usize, found: u32, expected: u32 },
    #[error("{path}:{line}: a measured record with knobs no schedule accepts: {source}")]
    Knobs { path: PathBuf, line: usize, source: KnobError },
    #[error("{path}:{line}: a measured record must carry exactly one schedule (`knobs` or `auto`), found {found}")]
    Schedule { path: PathBuf, line: usize, found: &'static str },
}

/// The records of a database file, with the lines that were not records.
#[derive(Debug, Default)]
pub struct Database {
    pub records: Vec<Record>,
    /// One typed error per line that did not parse; the other lines still serve.
    pub errors: Vec<DbError>,
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

    /// The records of every `.jsonl` file in `dir`, in file-name order (`load` each: lines
    /// that are not records are left out, as their errors are).
    pub fn load_dir(dir: &Path) -> Result<Vec<Record>, DbError> {
        let io = |source| DbError::Io { path: dir.to_path_buf(), source };
        let mut files = Vec::new();
        for entry in std::fs::read_dir(dir).map_err(io)? {
            let path = entry.map_err(io)?.path();
            if path.extension().is_some_and(|x| x == "jsonl") {
                files.push(path);
            }
        }
        files.sort();
        let mut records = Vec::new();
        for f in &files {
            records.extend(Database::load(f)?.records);
        }
        Ok(records)
    }

    /// Reads `path` where no line may be lost (what an exported library ships): a missing file
    /// is an error, and so is a line that is not a record (the first one's error).
    pub fn load_strict(path: &Path) -> Result<Database, DbError> {
        let text = std::fs::read_to_string(path).map_err(|source| DbError::Io { path: path.to_path_buf(), source })?;
        Database::parse_strict(&text, path)
    }

    /// `parse`, with a line that is not a record an error (the first one's).
    pub fn parse_strict(text: &str, path: &Path) -> Result<Database, DbError> {
        let mut db = Database::parse(text, path);
        match db.errors.is_empty() {
            true => Ok(db),
            false => Err(db.errors.remove(0)),
        }
    }

    /// The records of `text` (the lines of a database file named `path` in errors).
    pub fn parse(text: &str, path: &Path) -> Database {
        let mut db = Database::default();
        for (i, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let (path, line_number) = (path.to_path_buf(), i + 1);
            match serde_json::from_str::<Record>(line) {
                Ok(r) if r.version != RECORD_VERSION => db.errors.push(DbError::Version {
                    path,
                    line: line_number,
                    found: r.version,
                    expected: RECORD_VERSION,
                }),
                Ok(r) if !r.ok() => db.records.push(r),
                Ok(r) => match (&r.schedule.knobs, &r.schedule.auto) {
                    (Some(knobs), None) => match knobs.check() {
                        Err(source) => db.errors.push(DbError::Knobs { path, line: line_number, source }),
                        Ok(()) => db.records.push(r),
                    },
                    (None, Some(_)) => db.records.push(r),
                    (None, None) => db.errors.push(DbError::Schedule { path, line: line_number, found: "neither" }),
                    (Some(_), Some(_)) => db.errors.push(DbError::Schedule { path, line: line_number, found: "both" }),
                },
                Err(e) => db.errors.push(DbError::Malformed { path, line: line_number, message: e.to_string() }),
            }
        }
        db
    }

    /// The best usable record for `workload` on this host (see `select`).
    pub fn best(&self, workload: &str, host: &Host) -> Option<&Record> {
        select(&self.records, workload, host)
    }
}

/// `records` as the lines of a database file.
pub fn lines(records: &[Record]) -> String {
    records.iter().map(|r| serde_json::to_string(r).expect("records serialize") + "\n").collect()
}

/// Appends `records` to `path` (created if missing) under an exclusive lock, one line each.
pub fn append(path: &Path, records: &[Record]) -> Result<(), DbError> {
    let io = |source| DbError::Io { path: path.to_path_buf(), source };
    let text = lines(records);
    let mut file = OpenOptions::new().create(true).append(true).open(path).map_err(io)?;
    file.lock().map_err(io)?;
    let written = file.write_all(text.as_bytes()).and_then(|()| file.flush());
    let unlocked = file.unlock();
    written.map_err(io)?;
    unlocked.map_err(io)
}

/// Writes `records` to `path` (replaced), one line each.
pub fn write(path: &Path, records: &[Record]) -> Result<(), DbError> {
    std::fs::write(path, lines(records)).map_err(|source| DbError::Io { path: path.to_path_buf(), source })
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
    write(out, &records)?;
    Ok((records.len(), errors))
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::{avx2_host, record};
    use super::super::query::best_per_workload;
    use super::*;
    use crate::isa::IsaLevel;

    #[test]
    fn a_directory_is_its_jsonl_files_in_name_order() {
        let dir = std::env::temp_dir().join(format!("tensorlift-db-dir-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let (a, b) = (record("a", IsaLevel::Avx2, 1, 5.0), record("b", IsaLevel::Avx2, 1, 6.0));
        let line = |r: &Record| serde_json::to_string(r).unwrap() + "\n";
        std::fs::write(dir.join("2.jsonl"), line(&b)).unwrap();
        std::fs::write(dir.join("1.jsonl"), line(&a)).unwrap();
        std::fs::write(dir.join("notes.txt"), line(&a)).unwrap();
        let keys: Vec<String> = Database::load_dir(&dir).unwrap().iter().map(|r| r.workload.key.clone()).collect();
        assert_eq!(keys, [a.workload.key.clone(), b.workload.key.clone()]);
        assert!(Database::load_dir(&dir.join("missing")).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
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
        // A record whose knobs are malformed is an error naming its line, not the defaults.
        let mut json = serde_json::to_value(&good).unwrap();
        json["schedule"]["knobs"]["order"] = "rows_outer".into();
        text.push_str(&format!("{json}\n"));
        let mut json = serde_json::to_value(&good).unwrap();
        json["schedule"]["knobs"].as_object_mut().unwrap().remove("nr");
        text.push_str(&format!("{json}\n"));
        std::fs::write(&path, text).unwrap();
        append(&path, &[record("w", IsaLevel::Avx2, 1, 4.0)]).unwrap();
        let db = Database::load(&path).unwrap();
        assert_eq!(db.records.len(), 2);
        let errors: Vec<String> = db.errors.iter().map(ToString::to_string).collect();
        assert_eq!(errors.len(), 5, "{errors:?}");
        assert!(errors[0].contains("a.jsonl:2: not a tuning record"), "{}", errors[0]);
        assert!(errors[1].contains("a.jsonl:3: not a tuning record"), "{}", errors[1]);
        assert!(errors[2].contains("a.jsonl:4: record version 9, expected 1"), "{}", errors[2]);
        assert!(errors[3].contains("a.jsonl:5: not a tuning record: unknown variant `rows_outer`"), "{}", errors[3]);
        assert!(errors[4].contains("a.jsonl:6: not a tuning record: missing field `nr`"), "{}", errors[4]);
        assert_eq!(db.best("w", &avx2_host()).and_then(|r| r.median_ns), Some(4.0));

        let other = dir.join("b.jsonl");
        let _ = std::fs::remove_file(&other);
        append(&other, &[good.clone(), record("v", IsaLevel::Scalar, 1, 7.0)]).unwrap();
        let merged = dir.join("merged.jsonl");
        let (count, errors) = merge(&[&path, &other], &merged).unwrap();
        assert_eq!((count, errors.len()), (3, 5));
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
    fn a_measured_record_with_knobs_out_of_range_is_an_error_and_strict_loading_refuses_bad_lines() {
        let dir = std::env::temp_dir().join(format!("tensorlift-db-strict-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("s.jsonl");
        let good = record("w", IsaLevel::Avx2, 1, 5.0);
        let mut zero_rows = good.clone();
        zero_rows.schedule.knobs.as_mut().expect("knobs").mr = 0;
        // A failed measurement of a point outside the ranges is what the tuner wrote for it.
        let failed = Record { status: super::super::Status::BuildError, median_ns: None, ..zero_rows.clone() };
        write(&path, &[good.clone(), zero_rows, failed]).unwrap();
        let db = Database::load(&path).unwrap();
        assert_eq!(db.records.len(), 2);
        let errors: Vec<String> = db.errors.iter().map(ToString::to_string).collect();
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert!(
            errors[0].contains("s.jsonl:2: a measured record with knobs no schedule accepts: mr = 0"),
            "{errors:?}"
        );
        let err = Database::load_strict(&path).unwrap_err();
        assert!(matches!(err, DbError::Knobs { line: 2, .. }), "{err}");

        std::fs::write(&path, format!("{}\n\nnot json\n", serde_json::to_string(&good).unwrap())).unwrap();
        let err = Database::load_strict(&path).unwrap_err().to_string();
        assert!(err.contains("s.jsonl:3: not a tuning record"), "{err}");
        // A measured record carries exactly one schedule: knobs or an auto point.
        let auto = schedules::auto::AutoPoint { sketch: "generic".into(), values: vec![] };
        let mut neither = good.clone();
        neither.schedule.knobs = None;
        let mut both = good.clone();
        both.schedule.auto = Some(auto.clone());
        let mut auto_only = neither.clone();
        auto_only.schedule.auto = Some(auto);
        write(&path, &[neither, both, auto_only]).unwrap();
        let db = Database::load(&path).unwrap();
        let errors: Vec<String> = db.errors.iter().map(ToString::to_string).collect();
        assert_eq!(db.records.len(), 1, "{errors:?}");
        assert!(errors[0].contains("s.jsonl:1: a measured record must carry exactly one schedule"), "{errors:?}");
        assert!(errors[0].ends_with("found neither") && errors[1].ends_with("found both"), "{errors:?}");
        write(&path, &[good]).unwrap();
        assert_eq!(Database::load_strict(&path).unwrap().records.len(), 1);
        let missing = Database::load_strict(&dir.join("missing.jsonl")).unwrap_err();
        assert!(matches!(missing, DbError::Io { .. }) && missing.to_string().contains("missing.jsonl"), "{missing}");
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
