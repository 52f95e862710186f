//! Tuning databases as the commands read them: the repository's pre-tuned records name the
//! workloads the table defines today, and a user's database with lines that are not records is
//! refused by `export resnet18 --db` (what ships) and ignored with a warning by
//! `resnet18 --db`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use schedules::resnet18;
use tensorlift::record::{PRETUNED, WorkloadRef, pretuned};
use tensorlift::tune::workload;

use crate::cli::tensorlift;

fn tmp(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("databases");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    let _ = std::fs::remove_file(&path);
    path
}

/// Every record of `tuning/pretuned.jsonl` names the workload of a table layer as
/// `tune::workload` defines it now: a change to a layer's definition or quantization changes
/// its key, and the layer's records would silently stop applying (every layer back to
/// `default`) until the file is re-tuned.
#[test]
fn every_pretuned_record_names_the_workload_of_a_table_layer() {
    let workloads: HashMap<String, WorkloadRef> = resnet18::layers()
        .into_iter()
        .map(|layer| {
            let w = workload(layer);
            assert_eq!(w.key.len(), 64, "{}: {w:?}", layer.name());
            (w.key.clone(), w)
        })
        .collect();
    assert_eq!(workloads.len(), 12, "the table's twelve layers have distinct keys");
    let records = pretuned().expect("the pre-tuned database parses").records;
    assert_eq!(records.len(), PRETUNED.lines().filter(|l| !l.trim().is_empty()).count());
    let mut stale = Vec::new();
    for (i, r) in records.iter().enumerate() {
        match workloads.get(&r.workload.key) {
            Some(w) if w == &r.workload => {}
            Some(w) => stale.push(format!("line {}: {:?}, today {w:?}", i + 1, r.workload)),
            None => stale.push(format!(
                "line {}: key {} ({}) is no table layer's",
                i + 1,
                r.workload.key,
                r.workload.summary
            )),
        }
    }
    assert!(stale.is_empty(), "tuning/pretuned.jsonl names workloads the table does not define:\n{}", stale.join("\n"));
}

/// A record of the pre-tuned database as JSON, with `edit` applied.
fn pretuned_line(edit: impl FnOnce(&mut serde_json::Value)) -> String {
    let mut json: serde_json::Value = serde_json::from_str(PRETUNED.lines().next().unwrap()).unwrap();
    edit(&mut json);
    json.to_string()
}

#[test]
fn export_refuses_a_database_with_a_line_that_is_not_a_record_naming_the_file_and_line() {
    let out = tmp("export-out");
    let _ = std::fs::remove_dir_all(&out);
    let out_dir = out.to_str().unwrap();
    let cases: [(&str, String, &str); 3] = [
        (
            "malformed.jsonl",
            format!("{}\n\nnot a record\n", pretuned_line(|_| {})),
            "malformed.jsonl:3: not a tuning record",
        ),
        (
            "knobs.jsonl",
            pretuned_line(|j| j["schedule"]["knobs"]["order"] = "rows_outer".into()) + "\n",
            "knobs.jsonl:1: not a tuning record: unknown variant `rows_outer`",
        ),
        (
            "range.jsonl",
            pretuned_line(|j| j["schedule"]["knobs"]["mr"] = 0.into()) + "\n",
            "range.jsonl:1: a measured record with knobs no schedule accepts: mr = 0: expected at least 1",
        ),
    ];
    for (name, text, message) in cases {
        let db = tmp(name);
        std::fs::write(&db, text).unwrap();
        let args = ["export", "resnet18", "--db", db.to_str().unwrap(), "--out", out_dir, "--isa", "scalar"];
        let (ok, stdout, stderr) = tensorlift(&args);
        assert!(!ok && stdout.is_empty(), "{name}: {stdout}");
        assert!(stderr.starts_with("error: ") && stderr.contains(message), "{name}: {stderr}");
    }
    let missing = tmp("missing.jsonl");
    let args = ["export", "resnet18", "--db", missing.to_str().unwrap(), "--out", out_dir, "--isa", "scalar"];
    let (ok, _, stderr) = tensorlift(&args);
    assert!(!ok && stderr.contains("missing.jsonl"), "{stderr}");
    assert!(!out.join("libresnet18.so").exists(), "nothing is exported");
    let (ok, help, _) = tensorlift(&["export", "resnet18", "--help"]);
    assert!(ok && help.contains("is an error naming the file and line"), "{help}");
}

#[test]
fn resnet18_warns_about_a_database_line_that_is_not_a_record_and_runs_on() {
    let db = tmp("warned.jsonl");
    std::fs::write(&db, format!("{}\nnot a record\n", pretuned_line(|_| {}))).unwrap();
    let path = db.to_str().unwrap();
    let args = ["resnet18", "--layer", "R10", "--repeat", "1", "--threads", "1", "--format", "json", "--db", path];
    let (ok, stdout, stderr) = tensorlift(&args);
    assert!(ok, "{stderr}");
    assert!(stderr.contains(&format!("warning: {path}:2: not a tuning record")), "{stderr}");
    assert!(stderr.contains("line ignored"), "{stderr}");
    let r10: serde_json::Value = serde_json::from_str(stdout.trim()).expect("one JSON object");
    assert_eq!(r10["verified"], true, "{r10}");
    let missing = tmp("absent.jsonl");
    let args = ["resnet18", "--layer", "R10", "--repeat", "1", "--threads", "1", "--db", missing.to_str().unwrap()];
    let (ok, _, stderr) = tensorlift(&args);
    assert!(ok && stderr.contains("absent.jsonl: no such file"), "{stderr}");
    let (ok, help, _) = tensorlift(&["resnet18", "--help"]);
    assert!(ok && help.contains("is ignored with a warning on stderr naming the file and"), "{help}");
}
