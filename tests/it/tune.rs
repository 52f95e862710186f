//! The tuner: measurement in a worker process (crashes and timeouts recorded, the run goes on),
//! a small tuning run, two workers sharing one database, and the CLI around them.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use schedules::resnet18::{self, WeightBits};
use tensorlift::IsaLevel;
use tensorlift::record::{Database, Host, Phase, Record, Status, pretuned, select};
use tensorlift::tune::search::Strategy;
use tensorlift::tune::space::Space;
use tensorlift::tune::worker::{Candidate, Worker};
use tensorlift::tune::{TuneOptions, tune_layer, workload};

fn tmp(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("tune");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    let _ = std::fs::remove_file(&path);
    path
}

fn measure_worker() -> Worker {
    Worker::new(env!("CARGO_BIN_EXE_tensorlift").into(), vec!["measure".into()])
}

fn level() -> IsaLevel {
    IsaLevel::detect().unwrap()
}

/// R10: a 1×1 stride-2 layer, quick to set up and to measure.
fn candidate(layer: &str) -> Candidate {
    let l = resnet18::layer(layer).unwrap();
    Candidate {
        layer: layer.into(),
        model: None,
        task: None,
        isa: level().name().into(),
        weights: WeightBits::Eight,
        max_threads: 1,
        op: None,
        point: Some(Space::new(l, 1).default_knobs()),
        auto: None,
        repeat: 2,
        budget_ms: None,
        phase: Phase::Search,
    }
}

#[test]
fn a_crashing_or_hanging_worker_is_recorded_and_the_next_candidate_runs() {
    let c = candidate("R10");
    let w = workload(resnet18::layer("R10").unwrap());
    let mut crashing = Worker::new("sh".into(), vec!["-c".into(), "read line; kill -SEGV $$".into()]);
    let r = crashing.measure(&c, w.clone());
    assert_eq!(r.status, Status::RunError, "{r:?}");
    assert!(r.error.as_deref().unwrap_or("").contains("crashed"), "{r:?}");
    assert!(r.median_ns.is_none() && r.gops.is_none() && !r.verified);

    let mut hanging = Worker::new("sh".into(), vec!["-c".into(), "read line; sleep 30".into()]);
    hanging.timeout = Duration::from_millis(300);
    hanging.setup_timeout = Duration::ZERO;
    let r = hanging.measure(&c, w.clone());
    assert_eq!(r.status, Status::Timeout, "{r:?}");
    assert!(r.median_ns.is_none());
    // The same worker restarts (and times out again) rather than failing for good.
    assert_eq!(hanging.measure(&c, w.clone()).status, Status::Timeout);

    let mut real = measure_worker();
    let r = real.measure(&c, w);
    assert_eq!((r.status, r.verified), (Status::Ok, true), "{r:?}");
    assert!(r.median_ns.unwrap() > 0.0 && r.gops.unwrap() > 0.0);
    assert_eq!(r.target.isa, level().name());
    assert_eq!(r.workload.key.len(), 64);
    // The record carries the schedule as data: the template's knobs and the replayable trace.
    assert_eq!(r.schedule.knobs, c.point);
    let steps = &r.schedule.trace.as_ref().expect("a trace").steps;
    assert!(steps.iter().any(|s| s.primitive() == "tensorize"), "{steps:?}");
}

/// A crashed worker's record ends with what the worker printed last on stderr: the last lines
/// of a long stream, the first ones dropped.
#[test]
fn a_crashed_workers_record_keeps_the_end_of_its_stderr() {
    let c = candidate("R10");
    let w = workload(resnet18::layer("R10").unwrap());
    let script = "read line; i=0; while [ $i -lt 2000 ]; do echo \"noise $i\" >&2; i=$((i+1)); done; \
                  echo 'fatal: the last words' >&2; kill -SEGV $$";
    let mut crashing = Worker::new("sh".into(), vec!["-c".into(), script.into()]);
    let r = crashing.measure(&c, w.clone());
    assert_eq!(r.status, Status::RunError, "{r:?}");
    let error = r.error.as_deref().unwrap_or("");
    assert!(error.starts_with("the worker crashed (") && error.contains("SIGSEGV"), "{error}");
    assert_eq!(error.lines().last(), Some("fatal: the last words"), "{error}");
    assert!(error.contains("noise 1999") && !error.contains("noise 0\n"), "{error}");
    assert!(error.len() < 2 * 4096, "{} bytes", error.len());
    // A worker that printed nothing says only how it ended.
    let mut silent = Worker::new("sh".into(), vec!["-c".into(), "read line; kill -SEGV $$".into()]);
    let error = silent.measure(&c, w).error.unwrap_or_default();
    assert!(error.starts_with("the worker crashed (") && !error.contains("stderr"), "{error}");
}

/// A candidate whose output differs from the reference is `mismatch`: not verified, no time.
/// The layer's true reference verifies the same point (so the difference is the reference's),
/// and one output element off by one does not.
#[test]
fn a_candidate_whose_output_differs_from_the_reference_is_a_mismatch_without_a_time() {
    use tensorlift::engine::TableGraph;
    use tensorlift::tune::task_bench::TaskBench;
    let layer = resnet18::layer("R10").unwrap();
    let table = TableGraph::new(layer, WeightBits::Eight).expect("set up R10");
    let bench = TaskBench::for_table(&table, level(), 1, workload(layer)).expect("set up R10");
    let point = bench.space.default_knobs();
    let reference = bench.expected().to_vec();
    let right = bench.measure_against(&point, &reference, 1, None);
    assert_eq!((right.status, right.verified), (Status::Ok, true), "{right:?}");
    assert!(right.median_ns.is_some() && right.gops.is_some());

    let mut wrong = reference.clone();
    let at = wrong.len() / 2;
    let v = wrong[at];
    wrong[at] = v.wrapping_add(1);
    let m = bench.measure_against(&point, &wrong, 1, None);
    assert_eq!((m.status, m.verified), (Status::Mismatch, false), "{m:?}");
    assert_eq!((m.median_ns, m.gops, m.peak_gops, m.probe), (None, None, None, None), "{m:?}");
    let needle = format!("byte {at} (NHWC): expected {}, found {v}", v.wrapping_add(1));
    assert!(m.error.as_deref().is_some_and(|e| e.contains(&needle)), "{m:?}");
    // As the worker records it: a record that does not count, its time absent.
    let mut c = candidate("R10");
    c.isa = level().name().into();
    let record = tensorlift::tune::worker::record(&c, workload(layer), &m);
    let json = serde_json::to_value(&record).unwrap();
    assert_eq!((&json["status"], &json["verified"]), (&"mismatch".into(), &false.into()), "{json}");
    assert!(json["median_ns"].is_null() && json["gops"].is_null(), "{json}");
    assert!(!record.ok());
    // A reference of another length is a mismatch too, not a panic.
    let m = bench.measure_against(&point, &[0u8; 3], 1, None);
    assert_eq!(m.status, Status::Mismatch, "{m:?}");
}

#[test]
fn a_small_tuning_run_records_every_trial_and_starts_at_the_default() {
    let db = tmp("small.jsonl");
    let layer = resnet18::layer("R10").unwrap();
    let options = TuneOptions {
        level: level(),
        weights: WeightBits::Eight,
        max_threads: 2,
        trials: 4,
        budget: None,
        repeat: 2,
        search_budget: Some(Duration::from_millis(1)),
        strategy: Strategy::Evolutionary,
        seed: 3,
    };
    let mut seen = 0;
    let result = tune_layer(&mut measure_worker(), layer, &options, Some(&db), |_| seen += 1).unwrap();
    // Four trials (four distinct points), then every point measured again in 3 rounds, the
    // default first: validation records, not trials.
    let rounds = tensorlift::tune::VALIDATION_ROUNDS;
    assert_eq!((result.records.len(), result.trials(), seen), (4 + 4 * rounds, 4, 4));
    let validation = &result.records[4..];
    assert!(validation.iter().all(Record::is_validation));
    // The default of this CPU at this level (its threads follow the core's rate).
    let default = Space::for_target(layer, 2, level(), WeightBits::Eight.range()).default_knobs();
    assert_eq!(validation[0].schedule.knobs, Some(default));
    assert_eq!(result.records[0].schedule.knobs, Some(default));
    // The result is the median of its validation records by probe-corrected time, not its
    // luckiest one.
    let (best, phases) = (result.best().unwrap(), result.phases());
    assert!(best.is_validation());
    let mut times: Vec<f64> = validation
        .iter()
        .filter(|r| r.schedule.knobs == best.schedule.knobs)
        .map(|r| phases.seconds(r).unwrap())
        .collect();
    times.sort_by(f64::total_cmp);
    assert_eq!(phases.seconds(best), Some(times[1]));
    for r in &result.records {
        assert_eq!((r.status, r.verified), (Status::Ok, true), "{r:?}");
    }
    assert!(phases.seconds(best) <= phases.seconds(result.default_record().unwrap()));
    let curve = result.curve();
    assert!(curve.windows(2).all(|w| w[0] <= w[1]) && curve[0] > 0.0, "{curve:?}");
    // The curve is the running best of the trials' own speeds: each step up is a trial's own.
    let trials = result.trial_gops();
    assert_eq!(trials.len(), curve.len());
    assert_eq!(trials[0], curve[0]);
    for (i, w) in curve.windows(2).enumerate() {
        assert_eq!(w[1], w[0].max(trials[i + 1]), "{trials:?} {curve:?}");
    }
    let loaded = Database::load(&db).unwrap();
    assert_eq!(loaded.records.len(), 4 + 4 * rounds);
    assert!(loaded.errors.is_empty());
}

#[test]
fn two_workers_share_one_database() {
    let db = tmp("shared.jsonl");
    let options = TuneOptions {
        level: level(),
        weights: WeightBits::Eight,
        max_threads: 1,
        trials: 3,
        budget: None,
        repeat: 1,
        search_budget: None,
        strategy: Strategy::Random,
        seed: 5,
    };
    std::thread::scope(|s| {
        for layer in ["R7", "R10"] {
            let (db, options) = (&db, &options);
            s.spawn(move || {
                let layer = resnet18::layer(layer).unwrap();
                tune_layer(&mut measure_worker(), layer, options, Some(db), |_| {}).unwrap()
            });
        }
    });
    let loaded = Database::load(&db).unwrap();
    assert!(loaded.errors.is_empty(), "{:?}", loaded.errors);
    // Per layer: three trials (three distinct points), each measured again in every round.
    let per_layer = 3 + 3 * tensorlift::tune::VALIDATION_ROUNDS;
    assert_eq!(loaded.records.len(), 2 * per_layer);
    for layer in ["R7", "R10"] {
        let key = workload(resnet18::layer(layer).unwrap()).key;
        assert_eq!(loaded.records.iter().filter(|r| r.workload.key == key).count(), per_layer, "{layer}");
    }
}

fn tensorlift(args: &[&str], stdin: Option<&str>) -> (bool, String, String) {
    use std::io::Write;
    let mut child = Command::new(env!("CARGO_BIN_EXE_tensorlift"))
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(stdin.unwrap_or("").as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn measure_answers_each_candidate_line_with_a_record_and_rejects_bad_points_with_the_reason() {
    let good = candidate("R10");
    let mut bad = good.clone();
    bad.point.as_mut().unwrap().nr = 48;
    let mut unknown = good.clone();
    unknown.layer = "R99".into();
    let input: String = [&good, &bad, &unknown].iter().map(|c| serde_json::to_string(c).unwrap() + "\n").collect();
    let db = tmp("measure.jsonl");
    let (ok, stdout, stderr) = tensorlift(&["measure", "--db", db.to_str().unwrap()], Some(&input));
    assert!(ok, "{stderr}");
    let records: Vec<Record> = stdout.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(records.len(), 3);
    assert_eq!(records[0].status, Status::Ok);
    assert_eq!(records[1].status, Status::BuildError);
    assert!(records[1].error.as_deref().unwrap().contains("nr = 48: expected one of [16, 32, 64]"), "{:?}", records[1]);
    assert_eq!(records[2].status, Status::BuildError);
    assert!(records[2].error.as_deref().unwrap().contains("no layer \"R99\""));
    assert_eq!(Database::load(&db).unwrap().records, records);

    let (ok, _, stderr) = tensorlift(&["measure"], Some("{\"layer\": 3}\n"));
    assert!(!ok && stderr.contains("candidate line 1"), "{stderr}");
}

#[test]
fn tune_cli_reports_json_writes_the_database_and_the_plot_and_db_merge_merges() {
    let (db, plot) = (tmp("cli.jsonl"), tmp("cli.svg"));
    let (ok, stdout, stderr) = tensorlift(
        &[
            "tune",
            "resnet18",
            "--layer",
            "R10",
            "--trials",
            "3",
            "--repeat",
            "2",
            "--threads",
            "1",
            "--format",
            "json",
            "--db",
            db.to_str().unwrap(),
            "--plot",
            plot.to_str().unwrap(),
        ],
        None,
    );
    assert!(ok, "{stderr}");
    let row: serde_json::Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    assert_eq!(row["layer"], "R10");
    assert_eq!(row["trials"], 3);
    assert!(row["tuned_gops"].as_f64().unwrap() >= row["default_gops"].as_f64().unwrap());
    assert!(row["speedup"].as_f64().unwrap() >= 1.0);
    let records = 3 + 3 * tensorlift::tune::VALIDATION_ROUNDS;
    assert_eq!(Database::load(&db).unwrap().records.len(), records);
    assert!(std::fs::read_to_string(&plot).unwrap().contains("<svg"));

    let merged = tmp("merged.jsonl");
    let (ok, stdout, stderr) = tensorlift(
        &["db", "merge", db.to_str().unwrap(), db.to_str().unwrap(), "--out", merged.to_str().unwrap()],
        None,
    );
    assert!(ok, "{stderr}");
    assert!(stdout.contains(&format!("{records} records from 2 database(s)")), "{stdout}");

    // resnet18 applies the database's record ("tuned"), or none ("default" with --no-db).
    let run = |extra: &[&str]| -> serde_json::Value {
        let mut args = vec!["resnet18", "--layer", "R10", "--repeat", "2", "--threads", "1", "--format", "json"];
        args.extend(extra);
        let (ok, stdout, stderr) = tensorlift(&args, None);
        assert!(ok, "{args:?}: {stderr}");
        serde_json::from_str(stdout.lines().last().unwrap()).unwrap()
    };
    let tuned = run(&["--db", db.to_str().unwrap()]);
    assert_eq!((tuned["tuning"].as_str(), tuned["verified"].as_bool()), (Some("tuned"), Some(true)), "{tuned}");
    let best = Database::load(&db)
        .unwrap()
        .best(&workload(resnet18::layer("R10").unwrap()).key, &Host::this(level()))
        .cloned();
    let point = best.unwrap().schedule.knobs.unwrap();
    assert_eq!((tuned["knobs"]["mr"].as_i64(), tuned["knobs"]["nr"].as_i64()), (Some(point.mr), Some(point.nr)));
    assert_eq!(run(&["--no-db"])["tuning"], "default");
    // Without --db: the repository's record for this CPU at one thread with full-range weights,
    // if it has one.
    let fitting: Vec<_> = pretuned()
        .unwrap()
        .records
        .into_iter()
        .filter(|r| r.target.threads == 1 && r.schedule.weights == WeightBits::Eight)
        .collect();
    let host = Host::this(level());
    let key = workload(resnet18::layer("R10").unwrap()).key;
    let expected = if select(&fitting, &key, &host).is_some() { "pretuned" } else { "default" };
    assert_eq!(run(&[])["tuning"], expected);

    let (ok, _, stderr) = tensorlift(&["tune", "resnet18", "--layer", "R99"], None);
    assert!(!ok && stderr.contains("--layer: expected R1..R11 or FC, found \"R99\""), "{stderr}");
}
