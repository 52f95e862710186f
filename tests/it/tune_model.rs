//! `tensorlift tune MODEL.onnx`: a model's distinct workloads extracted as tasks (counted,
//! keyed stably, 7-bit weights apart), each task's space defaulting to what the engine
//! compiles, a short tuning run whose records `run --db` applies without changing the output,
//! and models without tasks or not models at all as typed errors. A MobileNet-style model's
//! auto-scheduled convolutions are tasks too: their points measured against the graph
//! reference, applied by the engine (a point the space rejects falls back to the rules' with a
//! warning), tuned by `tune MODEL` and applied by `run --db`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use tensorlift::CompileOptions;
use tensorlift::IsaLevel;
use tensorlift::engine::Spec;
use tensorlift::layer::{compile_qconv, compile_qdense};
use tensorlift::record::{Database, Status};
use tensorlift::target::Target;
use tensorlift::tune::auto::{LoweredSpace, SearchOptions, Strategy, propose};
use tensorlift::tune::auto_task_bench::AutoTaskBench;
use tensorlift::tune::budget::{shares, split_trials};
use tensorlift::tune::task_bench::TaskBench;
use tensorlift::tune::tasks::{TaskError, extract};
use tensorlift::tune::worker::Candidate;

use crate::cli::tensorlift;

fn model(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/models").join(name)
}

fn tmp(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("tune_model");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    let _ = std::fs::remove_file(&path);
    path
}

/// ResNet-18's convolutions by geometry, as the architecture defines them (stem, then per
/// stage the 3×3 convolutions of stride 1, and from stage 2 on one 3×3 and one 1×1 of stride
/// 2), on the narrow test model (width 8, 32×32 input), with the classifier: summary → uses.
fn resnet18_w8_tasks() -> BTreeMap<String, usize> {
    let mut tasks = BTreeMap::from([
        ("conv 32x32x3→8 k7x7 s2 p3 u8".to_string(), 1),
        ("conv 8x8x8→8 k3x3 s1 p1 u8".to_string(), 4),
        ("dense 1x64→1000 u8".to_string(), 1),
    ]);
    for (size, c) in [(8, 8), (4, 16), (2, 32)] {
        let (out, oc) = (size / 2, c * 2);
        tasks.insert(format!("conv {size}x{size}x{c}→{oc} k3x3 s2 p1 u8"), 1);
        tasks.insert(format!("conv {size}x{size}x{c}→{oc} k1x1 s2 p0 u8"), 1);
        tasks.insert(format!("conv {out}x{out}x{oc}→{oc} k3x3 s1 p1 u8"), 3);
    }
    tasks
}

#[test]
fn a_models_tasks_are_its_distinct_workloads_counted_with_their_uses() {
    let tasks = extract(&model("resnet18_w8_s32_qop_u8_pc.onnx")).expect("tasks");
    let found: BTreeMap<String, usize> = tasks.tasks.iter().map(|t| (t.workload.summary.clone(), t.uses)).collect();
    assert_eq!(found, resnet18_w8_tasks());
    // ResNet-18 has no convolution the template does not take.
    assert!(
        tasks.auto_tasks.is_empty(),
        "{:?}",
        tasks.auto_tasks.iter().map(|t| &t.workload.summary).collect::<Vec<_>>()
    );
    assert_eq!(tasks.tasks.iter().map(|t| t.uses).sum::<usize>(), 21);
    // Keys are distinct, name geometry and weights range, and are the same on a second import.
    let keys: Vec<&str> = tasks.tasks.iter().map(|t| t.workload.key.as_str()).collect();
    assert_eq!(keys.iter().collect::<std::collections::BTreeSet<_>>().len(), keys.len());
    assert!(
        keys.contains(
            &"conv2d_int8:src=u8,dst=u8,h=8,w=8,ic=8,oc=8,kh=3,kw=3,stride=1,pad=1,relu=0,scales=channel,weights=full"
        ),
        "{keys:?}"
    );
    assert!(keys.contains(&"dense_int8:src=u8,dst=u8,m=1,k=64,n=1000,relu=0,scales=channel,weights=full"), "{keys:?}");
    let again = extract(&model("resnet18_w8_s32_qop_u8_pc.onnx")).expect("tasks");
    assert_eq!(again.tasks.iter().map(|t| t.workload.key.as_str()).collect::<Vec<_>>(), keys);
    // 7-bit weights pick another kernel family: the same geometry is another workload.
    let seven = extract(&model("resnet18_w8_s32_qop_u8_pc_rr.onnx")).expect("tasks");
    assert_eq!(seven.tasks.len(), tasks.tasks.len());
    for (a, b) in seven.tasks.iter().zip(&tasks.tasks) {
        assert_eq!(a.workload.summary, b.workload.summary);
        assert!(
            a.workload.key.ends_with("weights=7bit") && b.workload.key.ends_with("weights=full"),
            "{}",
            a.workload.key
        );
    }
    // The search budget follows ops × uses; every task keeps its default point.
    let trials = split_trials(100, &shares(&tasks.tasks));
    assert!(trials.iter().all(|&t| t >= 1));
    let stem = tasks.tasks.iter().position(|t| t.workload.summary.contains("k7x7")).unwrap();
    assert_eq!(trials.iter().copied().max(), Some(trials[stem]), "{trials:?}");
}

#[test]
fn a_tasks_default_point_is_the_engines_and_its_measurement_is_verified() {
    let level = IsaLevel::detect().unwrap();
    let tasks = extract(&model("resnet18_w8_s32_qop_u8_pc.onnx")).expect("tasks");
    let options = CompileOptions { target: Target::Level(level), threads: Some(2), ..Default::default() };
    for task in &tasks.tasks {
        let space = task.space(2, level);
        let engine = match &task.spec {
            Spec::Conv(c) => compile_qconv(c, None, &options),
            Spec::Dense(d) => compile_qdense(d, None, &options),
        }
        .expect("compiles");
        assert_eq!(space.default_knobs(), engine.knobs(), "{}", task.workload.summary);
        assert_eq!(space.check(&space.default_knobs()), Ok(()), "{}", task.workload.summary);
    }
    // Measured against the graph reference of the task's partition: verified, timed; a point
    // outside the space is a build error with the reason, never compiled.
    let task = &tasks.tasks[1];
    let bench = TaskBench::new(&tasks, task, level, 1).expect("set up");
    let m = bench.measure(&bench.space.default_knobs(), 2, None);
    assert_eq!((m.status, m.verified), (Status::Ok, true), "{m:?}");
    assert!(m.median_ns.is_some_and(|t| t > 0.0));
    let wide = schedules::x86_conv::Conv2dInt8Knobs { nr: 32, ..bench.space.default_knobs() };
    let m = bench.measure(&wide, 2, None);
    assert_eq!(m.status, Status::BuildError, "{m:?}");
    assert!(m.error.as_deref().is_some_and(|e| e.contains("nr = 32")), "{m:?}");
}

#[test]
fn a_short_model_tuning_writes_verified_records_that_run_applies_without_changing_the_output() {
    let db = tmp("w8.jsonl");
    let file = model("resnet18_w8_s32_qop_u8_pc.onnx").display().to_string();
    let db_s = db.display().to_string();
    let args = ["tune", &file, "--trials", "16", "--threads", "1", "--repeat", "2", "--db", &db_s, "--format", "json"];
    let (ok, stdout, stderr) = tensorlift(&args);
    assert!(ok, "{stderr}");
    let json: serde_json::Value = serde_json::from_str(stdout.trim()).expect("one JSON object");
    let reported = json["tasks"].as_array().expect("tasks");
    assert_eq!(reported.len(), 12, "{json}");
    for t in reported {
        assert!(t["tuned_gops"].as_f64().is_some_and(|g| g > 0.0), "{t}");
        assert!(t["trials"].as_u64().is_some_and(|n| n >= 1), "{t}");
    }
    for key in ["default", "pretuned", "tuned"] {
        assert!(json["latency_ms"][key].as_f64().is_some_and(|ms| ms > 0.0), "{json}");
    }
    // Every record is verified and names one of the model's tasks.
    let tasks = extract(Path::new(&file)).expect("tasks");
    let records = Database::load(&db).expect("the database").records;
    assert!(records.len() >= 16 + 12 * 3, "{} records", records.len());
    for r in &records {
        assert_eq!((r.status, r.verified), (Status::Ok, true), "{r:?}");
        assert!(tasks.task(&r.workload.key).is_ok(), "{}", r.workload.key);
    }

    // `run --db` applies them: every compiled partition tuned, the output bit for bit the
    // defaults' (and the reference's: --verify).
    let (with, without) = (tmp("tuned.npy"), tmp("default.npy"));
    let run = |extra: &[&str], out: &Path| run_json(&file, extra, out).0;
    let tuned = run(&["--db", &db_s, "--verify"], &with);
    assert_eq!(tuned["verified"], true);
    let compiled: Vec<&serde_json::Value> = tuned["partitions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["kind"] == "QuantizedConv" || p["kind"] == "QuantizedMatMul")
        .collect();
    assert_eq!(compiled.len(), 21);
    assert!(compiled.iter().all(|p| p["tuning"] == "tuned"), "{compiled:?}");
    let default = run(&["--no-db"], &without);
    assert!(default["partitions"].as_array().unwrap().iter().all(|p| p["tuning"] != "tuned"));
    let (a, b) = (tensorlift::npy::read(&with).unwrap(), tensorlift::npy::read(&without).unwrap());
    assert!(a.bits_eq(&b), "the tuned model's output differs from the default's");
}

#[test]
fn a_model_without_tasks_or_not_a_model_is_a_typed_error() {
    let float = model("resnet18_w2_s32_float.onnx");
    match extract(&float) {
        Err(e @ TaskError::NoTasks { .. }) => {
            assert!(e.to_string().contains("expected at least one quantized convolution or matmul"), "{e}")
        }
        other => panic!("expected NoTasks, found {:?}", other.map(|t| t.tasks.len())),
    }
    let garbage = tmp("garbage.onnx");
    std::fs::write(&garbage, b"not a protobuf at all").unwrap();
    assert!(matches!(extract(&garbage), Err(TaskError::Import { .. })));
    let (ok, _, stderr) = tensorlift(&["tune", &garbage.display().to_string(), "--trials", "1"]);
    assert!(!ok && stderr.starts_with("error: ") && !stderr.contains("panicked"), "{stderr}");
    // A worker asked for a task the model does not have records why.
    let mut benches = tensorlift::tune::worker::Benches::default();
    let c = Candidate {
        layer: String::new(),
        model: Some(model("resnet18_w8_s32_qop_u8_pc.onnx").display().to_string()),
        task: Some("conv2d_int8:nothing".into()),
        isa: IsaLevel::detect().unwrap().name().into(),
        weights: schedules::resnet18::WeightBits::Eight,
        max_threads: 1,
        op: None,
        point: Some(schedules::x86_conv::default_knobs(
            schedules::resnet18::layers()[0],
            schedules::x86_conv::CoreRate::FullZmmVnni,
            1,
        )),
        auto: None,
        repeat: 1,
        budget_ms: None,
        phase: tensorlift::record::Phase::Search,
    };
    let r = benches.measure(&c);
    assert_eq!(r.status, Status::BuildError);
    assert!(
        r.error.as_deref().is_some_and(|e| e.contains("expected a task of workload \"conv2d_int8:nothing\"")),
        "{r:?}"
    );
}

fn mobilenet() -> PathBuf {
    model("mobilenet/mobilenet_w8_s16_qop_u8_pc.onnx")
}

#[test]
fn auto_scheduled_convolutions_are_tasks_measured_against_the_reference_and_applied_by_the_engine() {
    use schedules::auto::AutoPoint;
    use tensorlift::engine::{self, Kernel, Tuning};
    use tensorlift::layer::QConvAutoSpec;

    let level = IsaLevel::detect().unwrap();
    let tasks = extract(&mobilenet()).expect("tasks");
    // Two depthwise convolutions (strides 1 and 2) and a grouped dilated one, each used once;
    // the stem, the pointwise convolutions and the classifier stay the template's.
    let summaries: Vec<&str> = tasks.auto_tasks.iter().map(|t| t.workload.summary.as_str()).collect();
    assert_eq!(
        summaries,
        ["dwconv 8x8x8→8 k3x3 s1 p1 g8 u8", "dwconv 8x8x8→8 k3x3 s2 p1 g8 u8", "conv 4x4x16→16 k3x3 s1 p2 d2x2 g2 u8"]
    );
    assert_eq!(tasks.tasks.len(), 4);
    assert!(tasks.auto_tasks.iter().all(|t| t.uses == 1 && t.workload.op == "qconv_auto"));
    // Keyed by the definition: the same on a second import, distinct per geometry.
    let again = extract(&mobilenet()).expect("tasks");
    let keys = |m: &tensorlift::tune::tasks::ModelTasks| {
        m.auto_tasks.iter().map(|t| t.workload.key.clone()).collect::<Vec<_>>()
    };
    assert_eq!(keys(&tasks), keys(&again));

    // Each point is verified against the graph reference of its partition; the rules' point
    // and random points of the space measure, a point outside it is a build error.
    let mut other: Option<(String, AutoPoint)> = None;
    for task in &tasks.auto_tasks {
        let bench = AutoTaskBench::new(&tasks, task, level, 1).expect("set up");
        let m = bench.measure(&bench.rules, 2, None);
        assert_eq!((m.status, m.verified), (Status::Ok, true), "{}: {m:?}", task.workload.summary);
        let options = SearchOptions { seed: 7, ..SearchOptions::new(4, Strategy::Random) };
        let points = propose(&LoweredSpace::new(&bench.space), &[], 4, &options).expect("proposals");
        assert!(!points.is_empty());
        for p in points.into_iter().filter(|p| *p != bench.rules) {
            let m = bench.measure(&p, 1, None);
            assert!(
                m.status == Status::Ok || m.status == Status::BuildError,
                "{}: {p:?}: {m:?}",
                task.workload.summary
            );
            if m.status == Status::Ok && other.is_none() {
                other = Some((task.workload.key.clone(), p));
            }
        }
        let bad = AutoPoint { sketch: bench.rules.sketch.clone(), values: vec![999; bench.rules.values.len()] };
        let m = bench.measure(&bad, 1, None);
        assert_eq!(m.status, Status::BuildError, "{m:?}");
        assert!(m.error.as_deref().is_some_and(|e| e.contains("999")), "{m:?}");
    }
    let (key, point) = other.expect("a verified point other than the rules'");

    // The engine compiles that task's partition at the point (tuned), the others at the rules'
    // (default); the output is the untuned graph's and the reference's, bit for bit.
    let options = CompileOptions { target: Target::Level(level), threads: Some(1), ..Default::default() };
    let key_of = |s: &QConvAutoSpec| tensorlift::tune::tasks::auto_workload_key(s).unwrap().key;
    let chosen = |s: &QConvAutoSpec| (key_of(s) == key).then(|| (point.clone(), Tuning::Tuned));
    let compile = |auto: tensorlift::engine::AutoSource<'_>| {
        let m = tensorlift::onnx::load(mobilenet()).unwrap();
        let partitions = m.graph.get_partitions(tensorlift::graph::PartitionPolicy::Fusion);
        engine::compile_tuned(m.graph, partitions, &options, &|_| None, auto).expect("compiles")
    };
    let mut tuned = compile(&chosen);
    let mut plain = compile(&|_| None);
    assert!(tuned.warnings().is_empty(), "{:?}", tuned.warnings());
    let autos = |g: &engine::CompiledGraph| -> Vec<(AutoPoint, Option<Tuning>)> {
        g.steps()
            .iter()
            .filter_map(|s| match &s.kernel {
                Kernel::Auto(c) => Some((c.point().clone(), s.tuning)),
                _ => None,
            })
            .collect()
    };
    let (t, d) = (autos(&tuned), autos(&plain));
    assert_eq!(t.iter().filter(|(p, tuning)| *p == point && *tuning == Some(Tuning::Tuned)).count(), 1, "{t:?}");
    assert_eq!(t.iter().filter(|(_, tuning)| *tuning == Some(Tuning::Default)).count(), 2, "{t:?}");
    assert!(d.iter().all(|(p, tuning)| *p != point && *tuning == Some(Tuning::Default)), "{d:?}");
    let input = tensorlift::engine::random_input(plain.input_specs()[0].0, &plain.input_specs()[0].1, 5).unwrap();
    let (a, _) = tuned.execute(std::slice::from_ref(&input)).unwrap();
    let (b, _) = plain.execute(std::slice::from_ref(&input)).unwrap();
    assert!(a[0].bits_eq(&b[0]), "the tuned point changed the output");
    crate::engine::check_against_reference(&mut tuned, 9, "mobilenet at a tuned point");

    // A point the space does not have (a record from another space): the rules' point runs,
    // the partition is `default`, and a warning says why.
    let bad = AutoPoint { sketch: "no such sketch".into(), values: vec![] };
    let g = compile(&|_| Some((bad.clone(), Tuning::Tuned)));
    assert_eq!(g.warnings().len(), 3, "{:?}", g.warnings());
    assert!(g.warnings()[0].contains("no such sketch"), "{:?}", g.warnings());
    assert_eq!(autos(&g), d);
}

#[test]
fn tuning_a_mobilenet_records_its_auto_scheduled_convolutions_and_run_applies_them_bit_for_bit() {
    let db = tmp("mobilenet.jsonl");
    let file = mobilenet().display().to_string();
    let db_s = db.display().to_string();
    let args = ["tune", &file, "--trials", "40", "--threads", "1", "--repeat", "2", "--db", &db_s, "--format", "json"];
    let (ok, stdout, stderr) = tensorlift(&args);
    assert!(ok, "{stderr}");
    let json: serde_json::Value = serde_json::from_str(stdout.trim()).expect("one JSON object");
    let reported = json["tasks"].as_array().expect("tasks");
    assert_eq!(reported.len(), 7, "{json}");
    let auto: Vec<&serde_json::Value> = reported.iter().filter(|t| t["kernel"] == "auto").collect();
    assert_eq!(auto.len(), 3, "{json}");
    for t in &auto {
        assert!(t["default_gops"].as_f64().is_some_and(|g| g > 0.0), "{t}");
        assert!(t["tuned_gops"].as_f64().is_some_and(|g| g > 0.0), "{t}");
        assert!(t["best"]["auto"]["sketch"].is_string(), "{t}");
    }
    // The database holds verified records of every auto task, with their points.
    let tasks = extract(&mobilenet()).expect("tasks");
    let records = Database::load(&db).expect("the database").records;
    for task in &tasks.auto_tasks {
        let mine: Vec<_> = records.iter().filter(|r| r.workload.key == task.workload.key).collect();
        assert!(!mine.is_empty(), "no record of {}", task.workload.summary);
        assert!(mine.iter().all(|r| r.schedule.auto.is_some() && r.schedule.knobs.is_none()), "{mine:?}");
        assert!(mine.iter().all(|r| r.status == Status::Ok && r.verified), "{mine:?}");
    }
    // The search measured more than the rules' point somewhere.
    let points: std::collections::HashSet<_> =
        records.iter().filter_map(|r| r.schedule.auto.as_ref().map(|p| (&r.workload.key, p))).collect();
    assert!(points.len() > tasks.auto_tasks.len(), "{points:?}");

    // `run --db` applies them: every convolution tuned, the auto-scheduled ones included, the
    // output bit for bit the untuned run's (and the reference's: --verify).
    let (with, without) = (tmp("mobilenet_tuned.npy"), tmp("mobilenet_default.npy"));
    let run = |extra: &[&str], out: &Path| {
        let (json, stderr) = run_json(&file, extra, out);
        assert!(!stderr.contains("warning"), "{stderr}");
        json
    };
    let tuned = run(&["--db", &db_s, "--verify"], &with);
    assert_eq!(tuned["verified"], true);
    let convs: Vec<&serde_json::Value> = tuned["partitions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["kind"] == "QuantizedConv" || p["kind"] == "QuantizedMatMul")
        .collect();
    assert_eq!(convs.len(), 7);
    assert_eq!(convs.iter().filter(|p| p["kernel"].as_str().is_some_and(|k| k.contains("auto"))).count(), 3);
    assert!(convs.iter().all(|p| p["tuning"] == "tuned"), "{convs:?}");
    let default = run(&["--no-db", "--verify"], &without);
    assert_eq!(default["verified"], true);
    assert!(default["partitions"].as_array().unwrap().iter().all(|p| p["tuning"] != "tuned"));
    let (a, b) = (tensorlift::npy::read(&with).unwrap(), tensorlift::npy::read(&without).unwrap());
    assert!(a.bits_eq(&b), "the tuned model's output differs from the default's");
}

/// `tensorlift run FILE --repeat 1 --threads 1 --format json --output OUT EXTRA..`, which must
/// succeed: its JSON and its stderr.
fn run_json(file: &str, extra: &[&str], out: &Path) -> (serde_json::Value, String) {
    let out = out.display().to_string();
    let mut args = vec!["run", file, "--repeat", "1", "--threads", "1", "--format", "json", "--output", &out];
    args.extend_from_slice(extra);
    let (ok, stdout, stderr) = tensorlift(&args);
    assert!(ok, "{stderr}");
    (serde_json::from_str(stdout.trim()).expect("one JSON object"), stderr)
}
