//! Tuning any operator of the catalog (`tensorlift tune op`): the worker measures points of the
//! auto-scheduler's space, verified against the reference interpreter (a differing output is a
//! mismatch); failed points are records; the command writes verified records, proposes new candidates from a database and
//! refuses bad shapes and missing templates with typed errors.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use schedules::auto::{AutoPoint, Space};
use schedules::catalog::{MatmulDtype, OpSpec};
use tensorlift::IsaLevel;
use tensorlift::record::{Database, Host, Phase, Record, Status};
use tensorlift::tune::auto::{CompiledPoint, Strategy};
use tensorlift::tune::op_bench::{space_options, spec_workload};
use tensorlift::tune::op_tune::{
    OpTuneOptions, best_point, op_candidate, prior, propose_candidates, schedule_op, starting_prior,
};
use tensorlift::tune::worker::{Candidate, serve};

fn tmp(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("tune_op");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    let _ = std::fs::remove_file(&path);
    path
}

fn level() -> IsaLevel {
    IsaLevel::detect().unwrap()
}

fn options(max_threads: usize) -> OpTuneOptions {
    OpTuneOptions {
        level: level(),
        max_threads,
        trials: 4,
        budget: None,
        repeat: 2,
        search_budget: None,
        batch: 4,
        seed: 1,
        strategy: Strategy::Evolutionary,
        shipped_prior: true,
    }
}

/// Every kind of the catalog at a small shape (depthwise and grouped convolutions included).
fn small_ops() -> Vec<OpSpec> {
    vec![
        OpSpec::Matmul { m: 8, n: 12, k: 16, dtype: MatmulDtype::U8 },
        OpSpec::Matmul { m: 8, n: 12, k: 16, dtype: MatmulDtype::F32 },
        OpSpec::Conv2d { ic: 4, oc: 6, h: 6, w: 5, kh: 3, kw: 3, stride: 1, pad: 1, groups: 1 },
        OpSpec::Conv2d { ic: 4, oc: 4, h: 7, w: 7, kh: 3, kw: 3, stride: 2, pad: 1, groups: 4 },
        OpSpec::Conv2d { ic: 4, oc: 6, h: 5, w: 5, kh: 1, kw: 1, stride: 1, pad: 0, groups: 2 },
        OpSpec::BatchMatmul { b: 2, m: 4, n: 8, k: 8 },
        OpSpec::Pool { c: 4, h: 7, w: 7, k: 3, stride: 2 },
        OpSpec::Softmax { rows: 4, cols: 19 },
        OpSpec::Layernorm { rows: 4, cols: 19 },
    ]
}

/// The generic point of `spec`'s space at this CPU's level.
fn default_point(spec: &OpSpec, max_threads: usize) -> AutoPoint {
    let def = spec.build().unwrap();
    Space::of(&def, space_options(level(), max_threads)).default_point()
}

/// Candidates through `tensorlift measure`'s loop (`serve`), records back.
fn measure(candidates: &[Candidate]) -> Vec<Record> {
    let input: String = candidates.iter().map(|c| serde_json::to_string(c).unwrap() + "\n").collect();
    let mut out = Vec::new();
    let count = serve(input.as_bytes(), &mut out, |_| Ok(())).unwrap();
    assert_eq!(count, candidates.len());
    String::from_utf8(out).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

#[test]
fn the_worker_measures_the_generic_point_of_every_kind_verified() {
    let ops = small_ops();
    let candidates: Vec<Candidate> =
        ops.iter().map(|s| op_candidate(s, default_point(s, 1), &options(1), Phase::Search)).collect();
    let records = measure(&candidates);
    for (spec, r) in ops.iter().zip(&records) {
        assert_eq!((r.status, r.verified), (Status::Ok, true), "{}: {r:?}", spec.label());
        assert!(r.median_ns.unwrap() > 0.0 && r.gops.unwrap() > 0.0 && r.compile_ms.unwrap() > 0.0, "{r:?}");
        let workload = spec_workload(spec).unwrap();
        assert_eq!((&r.workload.key, r.workload.op.as_str()), (&workload.key, spec.kind()));
        assert_eq!(r.workload.key.len(), 64);
        assert_eq!((r.schedule.knobs, r.schedule.auto.as_ref()), (None, Some(&default_point(spec, 1))));
        assert!(r.schedule.trace.is_some(), "{r:?}");
        assert_eq!((r.target.isa.as_str(), r.target.threads), (level().name(), 1));
    }
    // Distinct definitions, distinct workloads.
    let keys: HashSet<&str> = records.iter().map(|r| r.workload.key.as_str()).collect();
    assert_eq!(keys.len(), ops.len());
}

#[test]
fn a_point_the_space_rejects_is_a_build_error_record_and_the_worker_goes_on() {
    let spec = OpSpec::Softmax { rows: 2, cols: 8 };
    let good = op_candidate(&spec, default_point(&spec, 1), &options(1), Phase::Search);
    let mut unknown = good.clone();
    unknown.auto = Some(AutoPoint { sketch: "no-such-sketch".into(), values: vec![3] });
    let mut arity = good.clone();
    arity.auto = Some(AutoPoint { sketch: "generic".into(), values: vec![1, 2, 3, 4, 5, 6, 7, 8, 9] });
    let mut no_point = good.clone();
    no_point.auto = None;
    let mut bad_shape = good.clone();
    bad_shape.op = Some(OpSpec::Softmax { rows: 0, cols: 8 });
    let records = measure(&[unknown, arity, no_point, bad_shape, good]);
    let error = |r: &Record| r.error.clone().unwrap_or_default();
    for r in &records[..4] {
        assert_eq!((r.status, r.verified, r.median_ns), (Status::BuildError, false, None), "{r:?}");
        assert!(r.schedule.trace.is_none(), "{r:?}");
    }
    assert!(error(&records[0]).contains("no sketch named `no-such-sketch`"), "{}", error(&records[0]));
    assert!(error(&records[1]).contains("expected 0 decision values, found 9"), "{}", error(&records[1]));
    assert!(error(&records[2]).contains("names no `auto` point"), "{}", error(&records[2]));
    assert!(error(&records[3]).contains("softmax 0x8"), "{}", error(&records[3]));
    assert_eq!(records[4].status, Status::Ok, "{:?}", records[4]);
    // The failed records keep the point they failed on, as the database stores them.
    assert_eq!(records[0].schedule.auto.as_ref().map(|p| p.sketch.as_str()), Some("no-such-sketch"));
}

fn tensorlift(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_tensorlift")).args(args).output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The points of `spec`'s space at this level on `max_threads` threads.
fn space_size(spec: &OpSpec, max_threads: usize) -> usize {
    let def = spec.build().unwrap();
    let space = Space::new(&def.inputs, &def.outputs, space_options(level(), max_threads));
    space.sketches().iter().map(|s| s.decisions.iter().map(|d| d.choices.len()).product::<usize>()).sum()
}

#[test]
fn tune_op_writes_verified_records_reports_json_and_proposes_new_candidates() {
    let db = tmp("matmul.jsonl");
    let dbs = db.to_str().unwrap();
    let spec = OpSpec::Matmul { m: 16, n: 16, k: 16, dtype: MatmulDtype::U8 };
    let shape = ["--m", "16", "--n", "16", "--k", "16", "--threads", "1"];
    // Before anything is measured, the generic point is the first proposal.
    let (ok, stdout, stderr) =
        tensorlift(&[&["tune", "op", "matmul"], &shape[..], &["--propose", "3", "--db", dbs]].concat());
    assert!(ok, "{stderr}");
    let first: Vec<Candidate> = stdout.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(first.len(), space_size(&spec, 1).min(3), "{stdout}");
    assert_eq!(first[0].auto.as_ref(), Some(&default_point(&spec, 1)));
    assert!(!db.exists(), "--propose measures nothing and writes nothing");

    let plot = tmp("matmul.svg");
    let plots = plot.to_str().unwrap();
    let args = [
        &["tune", "op", "matmul"],
        &shape[..],
        &["--trials", "4", "--repeat", "2", "--db", dbs, "--format", "json", "--plot", plots],
    ]
    .concat();
    let (ok, stdout, stderr) = tensorlift(&args);
    assert!(ok, "{stderr}");
    let json: serde_json::Value = serde_json::from_str(stdout.trim()).expect(&stdout);
    for key in ["op", "default_gops", "tuned_gops", "default_ms", "tuned_ms", "trials", "seconds", "verified"] {
        assert!(json.get(key).is_some(), "{key} missing: {json}");
    }
    assert_eq!(json["verified"], true, "{json}");
    assert!(std::fs::read_to_string(&plot).unwrap().contains("<svg"), "the tuning curve");
    assert_eq!(json["op"], spec.label());
    let trials = json["trials"].as_u64().unwrap() as usize;
    assert!((1..=4).contains(&trials), "{json}");
    assert!(json["tuned_gops"].as_f64().unwrap() > 0.0 && json["tuned_ms"].as_f64().unwrap() > 0.0, "{json}");
    let loaded = Database::load(&db).unwrap();
    assert!(loaded.errors.is_empty(), "{:?}", loaded.errors);
    let key = spec_workload(&spec).unwrap().key;
    assert!(loaded.records.iter().all(|r| r.workload.key == key && r.schedule.auto.is_some()));
    // The generic point first, as the baseline (not a trial), then the trials.
    let searched: Vec<&Record> = loaded.records.iter().filter(|r| !r.is_validation()).collect();
    assert_eq!(searched.len(), trials + 1);
    assert_eq!(searched[0].schedule.auto.as_ref(), Some(&default_point(&spec, 1)));
    assert_eq!(json["curve"].as_array().map(Vec::len), Some(trials), "{json}");
    // Each trial's own speed: one per trial, the curve's end their maximum, and a trial that
    // failed reports 0.
    let own: Vec<f64> = json["trial_gops"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).collect();
    assert_eq!(own.len(), trials, "{json}");
    assert_eq!(Some(own.iter().copied().fold(0.0, f64::max)), json["curve"][trials - 1].as_f64(), "{json}");
    for (g, r) in own.iter().zip(&searched[1..]) {
        assert_eq!(*g > 0.0, r.ok(), "{json}");
    }
    assert!(loaded.records.iter().any(|r| r.ok()), "{:?}", loaded.records);
    // The records apply: the best point on this CPU is one the run measured and verified.
    let (point, record) =
        best_point(&spec, &loaded.records, &Host::this(level()), 1).unwrap().expect("a record applies");
    assert!(record.ok() && searched.iter().any(|r| r.schedule.auto.as_ref() == Some(&point)));
    assert_eq!(json["applied"], serde_json::to_value(&point).unwrap());
    assert_eq!(
        best_point(&spec, &loaded.records, &Host::this(level()), 1).unwrap().map(|(p, _)| p),
        Some(point.clone())
    );
    // Applied in Rust: the definition scheduled by that point compiles and computes the
    // reference's result.
    let (def, scheduled, from) = schedule_op(&spec, &loaded.records, &Host::this(level()), 1).unwrap();
    assert_eq!(from.and_then(|r| r.schedule.auto.clone()).as_ref(), Some(&point));
    let compiled = CompiledPoint::build(&scheduled, "mm", &tensorlift::CompileOptions::default()).unwrap();
    let kernel = &compiled.main;
    let reference = tensorlift::tune::op_bench::OpReference::new(&spec).unwrap();
    let raw: Vec<tensorlift::Tensor> = reference.inputs.iter().map(tensorlift::Tensor::from_array).collect();
    let mut tensors = compiled.prepare(raw).unwrap();
    tensors.push(tensorlift::Tensor::zeros(def.outputs[0].dtype(), def.outputs[0].shape()).unwrap());
    let mut refs: Vec<&mut tensorlift::Tensor> = tensors.iter_mut().collect();
    kernel.compiled.call(&mut refs).unwrap();
    assert!(tensors[2].to_array().bits_eq(&reference.outputs[0]));
    let other = OpSpec::Matmul { m: 16, n: 16, k: 8, dtype: MatmulDtype::U8 };
    assert!(best_point(&other, &loaded.records, &Host::this(level()), 1).unwrap().is_none());
    // Search records keep their points' features: another workload's search trains on them
    // (one prior workload, a sample per search record), this workload's own search does not.
    let width = tensorlift::ir::analysis::features::Features::len();
    for r in &loaded.records {
        let expected = if r.is_validation() { None } else { Some(width) };
        assert_eq!(r.point_features.as_ref().map(Vec::len), expected, "{r:?}");
    }
    let other_key = spec_workload(&other).unwrap().key;
    let from_other = prior(&loaded.records, &other_key, &Host::this(level()), 1);
    assert_eq!(from_other.iter().map(Vec::len).collect::<Vec<_>>(), vec![searched.len()]);
    assert_eq!(
        from_other[0].iter().filter(|s| s.seconds.is_some()).count(),
        searched.iter().filter(|r| r.ok()).count()
    );
    assert!(prior(&loaded.records, &key, &Host::this(level()), 1).is_empty());

    // Proposals from the database: distinct, none measured before, as many as the space has.
    let (ok, stdout, stderr) =
        tensorlift(&[&["tune", "op", "matmul"], &shape[..], &["--propose", "3", "--db", dbs]].concat());
    assert!(ok, "{stderr}");
    let proposed: Vec<Candidate> = stdout.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let measured: HashSet<AutoPoint> = loaded.records.iter().filter_map(|r| r.schedule.auto.clone()).collect();
    assert_eq!(proposed.len(), space_size(&spec, 1).saturating_sub(measured.len()).min(3), "{stdout}");
    let points: HashSet<&AutoPoint> = proposed.iter().filter_map(|c| c.auto.as_ref()).collect();
    assert_eq!(points.len(), proposed.len());
    for c in &proposed {
        assert_eq!((c.op.as_ref(), c.point, c.isa.as_str()), (Some(&spec), None, level().name()));
        assert!(!measured.contains(c.auto.as_ref().unwrap()), "{c:?} was measured");
    }
}

#[test]
fn bad_shapes_and_missing_templates_are_typed_errors() {
    let run = |args: &[&str]| {
        let (ok, _, stderr) = tensorlift(&[&["tune", "op"], args].concat());
        assert!(!ok && !stderr.contains("panicked"), "{stderr}");
        stderr
    };
    let zero = run(&["matmul", "--m", "0", "--n", "4", "--k", "4"]);
    assert!(zero.contains("--m <M>") && zero.contains("must be at least 1, found 0"), "{zero}");
    let groups =
        run(&["conv2d", "--ic", "4", "--oc", "6", "--h", "5", "--w", "5", "--kh", "3", "--kw", "3", "--groups", "3"]);
    assert!(
        groups.contains("groups ≥ 1 dividing ic and oc") && groups.contains("found groups 3, ic 4, oc 6"),
        "{groups}"
    );
    let window = run(&["pool", "--c", "4", "--h", "2", "--w", "2", "--k", "3", "--stride", "1"]);
    assert!(window.contains("k ≥ 1 within H and W") && window.contains("k 3"), "{window}");
    let template = run(&["softmax", "--rows", "4", "--cols", "8", "--strategy", "template"]);
    assert!(template.contains("no template for softmax"), "{template}");
    let conv = run(&[
        "conv2d",
        "--ic",
        "4",
        "--oc",
        "4",
        "--h",
        "5",
        "--w",
        "5",
        "--kh",
        "1",
        "--kw",
        "1",
        "--strategy",
        "template",
    ]);
    assert!(conv.contains("no template for conv2d"), "{conv}");
    // The library says the same for a definition it cannot build.
    let err = spec_workload(&OpSpec::BatchMatmul { b: 2, m: 0, n: 4, k: 4 }).unwrap_err().to_string();
    assert!(err.contains("batch-matmul 2x0x4x4") && err.contains('0'), "{err}");
}

#[test]
fn records_written_before_auto_points_still_parse_and_keep_their_form() {
    // A record line of the form written before `auto` existed (knobs required, no `auto`).
    let old = r#"{"version":1,"workload":{"key":"k","op":"conv2d_int8","summary":"R5"},"target":{"isa":"avx2","cpu":{"vendor":"AuthenticAMD","family":25,"model":1,"name":"n"},"features":[],"threads":1},"schedule":{"knobs":{"mr":4,"nr":64,"lanes":16,"order":"pixels_outer","threads":1,"packing":"i16","accumulation":"whole"},"weights":"full","phase":"validation","trace":null},"status":"ok","median_ns":5.0,"gops":1.0,"compile_ms":1.0,"verified":true,"measured_at":"2026-11-25T00:00:00Z"}"#;
    let db = Database::parse(old, Path::new("old.jsonl"));
    assert!(db.errors.is_empty(), "{:?}", db.errors);
    let r = &db.records[0];
    assert_eq!((r.schedule.knobs.map(|k| k.mr), r.schedule.auto.as_ref()), (Some(4), None));
    let text = serde_json::to_string(r).unwrap();
    assert!(!text.contains("\"auto\""), "{text}");
    assert!(tensorlift::record::pretuned().unwrap().records.iter().all(|r| r.schedule.knobs.is_some()));
}

/// An output that differs from the reference by one element is a mismatch: not verified, no
/// time, the element named; the true reference verifies the same point. Floats compare
/// bitwise.
#[test]
fn an_output_that_differs_from_the_reference_is_a_mismatch_without_a_time() {
    use std::sync::Arc;

    use ir::interp::Scalar;
    use tensorlift::tune::op_bench::{OpBench, OpReference};
    let spec = OpSpec::Layernorm { rows: 3, cols: 10 };
    let reference = OpReference::new(&spec).unwrap();
    let point = default_point(&spec, 1);
    let right = OpBench::new(&spec, level(), 1, Arc::new(reference)).unwrap();
    let m = right.measure(&point, 1, None);
    assert_eq!((m.status, m.verified), (Status::Ok, true), "{m:?}");
    assert!(m.median_ns.is_some() && m.gops.is_some());

    let mut wrong = OpReference::new(&spec).unwrap();
    let Scalar::Float(v) = wrong.outputs[0].get(7) else { panic!("an f32 output") };
    wrong.outputs[0].set(7, Scalar::Float(f64::from(f32::from_bits((v as f32).to_bits() ^ 1))));
    let m = OpBench::new(&spec, level(), 1, Arc::new(wrong)).unwrap().measure(&point, 1, None);
    assert_eq!((m.status, m.verified, m.median_ns, m.gops), (Status::Mismatch, false, None, None), "{m:?}");
    assert!(m.error.as_deref().unwrap_or("").contains("element 7"), "{m:?}");
    assert!(m.trace.is_some() && m.compile_ms.is_some(), "{m:?}");
}

#[test]
fn constant_weights_are_packed_once_outside_the_timed_call_and_verified() {
    use std::sync::Arc;
    use tensorlift::tune::op_bench::{OpBench, OpReference, op_workload};
    for spec in [
        OpSpec::Matmul { m: 8, n: 32, k: 20, dtype: MatmulDtype::U8 },
        OpSpec::Conv2d { ic: 8, oc: 16, h: 6, w: 6, kh: 3, kw: 3, stride: 1, pad: 1, groups: 1 },
    ] {
        let reference = Arc::new(OpReference::new(&spec).unwrap());
        for constants in [true, false] {
            let def = spec.build().unwrap();
            assert_eq!(def.constants.len(), 1, "{}: the catalog declares the weights constant", spec.label());
            let def = if constants { def } else { def.with_runtime_inputs() };
            let workload = op_workload(&spec, &def);
            let bench = OpBench::of(def, workload, level(), 2, reference.clone());
            let sketch = bench.space.sketches().iter().find(|s| s.name.starts_with("tensorize.")).unwrap();
            let ends = [0, 1].map(|end| AutoPoint {
                sketch: sketch.name.clone(),
                values: sketch
                    .decisions
                    .iter()
                    .map(|d| if end == 0 { d.choices[0] } else { d.choices[d.choices.len() - 1] })
                    .collect(),
            });
            for point in ends {
                let label = format!("{} constants={constants} {point:?}", spec.label());
                // Verified bit for bit: the call on the prepared weights against the definition
                // on the raw ones.
                let m = bench.measure(&point, 2, None);
                assert_eq!((m.status, m.verified), (Status::Ok, true), "{label}: {m:?}");
                let scheduled = bench.space.apply(&point).unwrap();
                let compiled = CompiledPoint::build(&scheduled, "op", &tensorlift::CompileOptions::default()).unwrap();
                let allocates_packed_b =
                    |ir: String| ir.lines().any(|l| l.trim_start().starts_with("allocate") && l.contains(".gemm_b"));
                // The timed call packs the weights only when they are a runtime input.
                assert_eq!(allocates_packed_b(compiled.main.lowered.to_string()), !constants, "{label}");
                assert_eq!(compiled.prepare.len(), usize::from(constants), "{label}");
                for p in &compiled.prepare {
                    assert_eq!(p.input, 1, "{label}");
                    assert!(p.kernel.lowered.to_string().contains(".gemm_b["), "{label}");
                }
            }
        }
    }
}

#[test]
fn the_shipped_prior_ranks_the_first_proposals_and_can_be_turned_off() {
    // An f32 matmul (a kind the prior measured, at a shape it did not), nothing measured yet.
    let spec = OpSpec::Matmul { m: 32, n: 48, k: 64, dtype: MatmulDtype::F32 };
    let key = spec_workload(&spec).unwrap().key;
    // The prior applies at the ISA level it was measured at: search at that level.
    let shipped_levels: HashSet<String> =
        tensorlift::tune::prior::shipped().unwrap().into_iter().map(|w| w.isa).collect();
    let Some(level) = IsaLevel::ALL.into_iter().find(|l| shipped_levels.contains(l.name())) else {
        panic!("the shipped prior names no known ISA level: {shipped_levels:?}");
    };
    if !crate::skip::has_level(level, "the shipped prior's ranking") {
        return;
    }
    let host = Host::this(level);
    let with = OpTuneOptions { trials: 64, batch: 8, level, ..options(1) };
    let without = OpTuneOptions { shipped_prior: false, ..with.clone() };
    let prior_of = |o: &OpTuneOptions| starting_prior(&[], &key, &host, o).unwrap();
    assert!(prior_of(&without).is_empty());
    let shipped = prior_of(&with);
    assert!(shipped.len() >= 8 && shipped.iter().all(|w| w.len() >= 2), "{} workloads", shipped.len());
    let points = |o: &OpTuneOptions| -> Vec<AutoPoint> {
        propose_candidates(&spec, o, &[], 8).unwrap().into_iter().map(|c| c.auto.unwrap()).collect()
    };
    let (a, b) = (points(&with), points(&without));
    assert_eq!(a.len(), 8);
    let generic = Space::of(&spec.build().unwrap(), space_options(level, 1)).default_point();
    assert_eq!(a[0], generic, "the generic point first, prior or not");
    assert_eq!(points(&with), a, "deterministic");
    // Without the prior the first batch is random; with it the model, trained before any
    // measurement of this workload, chooses it.
    assert_ne!(a, b, "the prior changed nothing");
}

#[test]
fn auto_direct_points_run_the_hosts_kernel_on_source_rows_bit_for_bit() {
    use std::sync::Arc;
    use tensorlift::tune::op_bench::{OpBench, OpReference};
    let conv =
        |ic, oc, hw, k, stride, pad| OpSpec::Conv2d { ic, oc, h: hw, w: hw, kh: k, kw: k, stride, pad, groups: 1 };
    // (spec, values: mr, nr, cols_outer, threads; the call: AMX-sized tiles of segments)
    let cases = [
        (conv(64, 64, 16, 3, 1, 1), vec![16, 64, 1, 1], "int8_gemm_16x64x3x192("),
        (conv(64, 32, 16, 3, 2, 1), vec![8, 32, 0, 2], "int8_gemm_8x32x3x192("),
        (conv(64, 32, 16, 1, 1, 0), vec![16, 32, 0, 1], "int8_gemm_16x32x64("),
        // The stem's 7·3-byte kernel rows read as 8·3 (the overhang multiplies zeros).
        (conv(3, 64, 32, 7, 2, 3), vec![16, 64, 1, 1], "int8_gemm_16x64x7x24("),
    ];
    // Flat rows: 7×7 outputs as 6·9 + 7 = 61 virtual pixels in one call, or tiles of 16.
    let flat = [
        (conv(64, 64, 7, 3, 1, 1), vec![61, 64, 0, 1], "int8_gemm_61x64x3x192("),
        (conv(64, 64, 7, 3, 1, 1), vec![16, 32, 1, 2], "int8_gemm_16x32x3x192("),
    ];
    let cases = cases.map(|(s, v, c)| (s, "tensorize.u8.direct", v, c));
    let cases = cases.into_iter().chain(flat.map(|(s, v, c)| (s, "tensorize.u8.flat", v, c)));
    for (spec, sketch, values, call) in cases {
        let reference = Arc::new(OpReference::new(&spec).unwrap());
        let bench = OpBench::new(&spec, level(), 2, reference).unwrap();
        let point = AutoPoint { sketch: sketch.into(), values };
        if !bench.space.sketches().iter().any(|s| s.name == point.sketch) {
            // Without VNNI the kernel form is i16 pairs: the sketch is `tensorize.i16.*`.
            let i16 = sketch.replace(".u8.", ".i16.");
            assert!(bench.space.sketches().iter().any(|s| s.name == i16), "{}", spec.label());
            continue;
        }
        let label = format!("{} {point:?}", spec.label());
        // Verified against the definition evaluated by the reference interpreter.
        let m = bench.measure(&point, 2, None);
        assert_eq!((m.status, m.verified), (Status::Ok, true), "{label}: {m:?}");
        let scheduled = bench.space.apply(&point).unwrap();
        let compiled = CompiledPoint::build(&scheduled, "op", &tensorlift::CompileOptions::default()).unwrap();
        let ir = compiled.main.lowered.to_string();
        assert!(ir.contains(call), "{label}: {ir}");
    }
}

#[test]
fn row_folds_of_softmax_and_layernorm_run_their_kernels_bit_for_bit() {
    use std::sync::Arc;
    use tensorlift::tune::op_bench::{OpBench, OpReference};
    // 48 columns: three chunks of the 16 lanes per row; 8 rows: one, two or four per call.
    for spec in [OpSpec::Softmax { rows: 8, cols: 48 }, OpSpec::Layernorm { rows: 8, cols: 48 }] {
        let reference = Arc::new(OpReference::new(&spec).unwrap());
        let bench = OpBench::new(&spec, level(), 1, reference).unwrap();
        let sketch = bench.space.sketches().iter().find(|s| s.name == "rules.fold").unwrap();
        let folds: Vec<usize> =
            (0..sketch.decisions.len()).filter(|&i| sketch.decisions[i].name.ends_with(".fold_rows")).collect();
        assert_eq!(folds.len(), 2, "{}: {:?}", spec.label(), sketch.decisions);
        for rows in [1, 2, 4] {
            let mut values: Vec<i64> = sketch.decisions.iter().map(|d| d.choices[0]).collect();
            for &i in &folds {
                values[i] = rows;
            }
            let point = AutoPoint { sketch: "rules.fold".into(), values };
            let label = format!("{} {point:?}", spec.label());
            // Verified against the definition evaluated by the reference interpreter.
            let m = bench.measure(&point, 2, None);
            assert_eq!((m.status, m.verified), (Status::Ok, true), "{label}: {m:?}");
            let scheduled = bench.space.apply(&point).unwrap();
            let compiled = CompiledPoint::build(&scheduled, "op", &tensorlift::CompileOptions::default()).unwrap();
            let ir = compiled.main.lowered.to_string();
            assert_eq!(ir.matches(&format!(".fold_{rows}x48(")).count(), 2, "{label}: {ir}");
            let kernels =
                compiled.main.compiled.machine_code().iter().filter(|c| c.origin.contains("row-fold kernel")).count();
            assert_eq!(kernels, if level() >= IsaLevel::Avx2 { 2 } else { 0 }, "{label}");
        }
    }
}
