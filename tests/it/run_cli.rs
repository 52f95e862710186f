//! `tensorlift run`: a model imported, partitioned, compiled, verified against the graph's
//! reference and run; its JSON report and .npy output; inputs that do not fit are errors
//! naming what was expected and what was found.

use std::path::Path;

use tensorlift::graph::{DataType, Value};

use crate::cli::tensorlift;

fn model(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/models").join(name).display().to_string()
}

#[test]
fn run_verifies_reports_json_and_writes_the_output() {
    let out = std::env::temp_dir().join(format!("tensorlift-run-{}.npy", std::process::id()));
    let out_s = out.display().to_string();
    let file = model("resnet18_w8_s32_qdq_u8_pc.onnx");
    let (ok, stdout, stderr) = tensorlift(&[
        "run",
        &file,
        "--repeat",
        "2",
        "--threads",
        "1",
        "--verify",
        "--format",
        "json",
        "--output",
        &out_s,
    ]);
    assert!(ok, "{stderr}");
    let json: serde_json::Value = serde_json::from_str(stdout.trim()).expect("one JSON object");
    for key in ["compile_ms", "compile_cpu_ms", "median_ms", "threads", "isa", "partitions", "output"] {
        assert!(json.get(key).is_some(), "no {key} in {json}");
    }
    // The compile read, partitioned, prepared and compiled something: it took CPU time.
    assert!(json["compile_cpu_ms"].as_f64().is_some_and(|c| c > 0.0), "{json}");
    assert_eq!(json["verified"], true);
    assert_eq!(json["threads"], 1);
    let partitions = json["partitions"].as_array().expect("partitions");
    let convs: Vec<_> = partitions.iter().filter(|p| p["kind"] == "QuantizedConv").collect();
    assert_eq!(convs.len(), 20, "{json}");
    for p in &convs {
        assert!(p["gops"].as_f64().is_some_and(|g| g > 0.0), "{p}");
        assert_eq!(p["tuning"], "default", "the narrow model's geometries are not table layers: {p}");
        assert!(p["ops"].as_array().is_some_and(|ops| ops.len() >= 4), "{p}");
    }
    let written = tensorlift::npy::read(&out).expect("the output file");
    assert_eq!(written.dtype(), DataType::F32);
    assert_eq!(written.dims(), &[1, 1000]);
    std::fs::remove_file(&out).ok();
}

#[test]
fn an_input_file_of_the_wrong_shape_is_an_error_naming_both() {
    let input = std::env::temp_dir().join(format!("tensorlift-run-in-{}.npy", std::process::id()));
    tensorlift::npy::write(&input, &Value::f32(&[1, 3, 16, 16], vec![0.0; 768]).unwrap()).unwrap();
    let file = model("resnet18_w8_s32_qop_u8_pc.onnx");
    let (ok, _, stderr) = tensorlift(&["run", &file, "--repeat", "1", "--input", &input.display().to_string()]);
    assert!(!ok);
    assert!(stderr.contains("expected f32 [1, 3, 32, 32], found f32 [1, 3, 16, 16]"), "{stderr}");
    let (ok, _, stderr) = tensorlift(&["run", "no-such-model.onnx"]);
    assert!(!ok && stderr.contains("no-such-model.onnx"), "{stderr}");
    std::fs::remove_file(&input).ok();
}

#[test]
fn warm_steps_time_every_partition_and_say_so() {
    let file = model("resnet18_w8_s32_qop_u8_pc.onnx");
    let args = ["run", &file, "--repeat", "2", "--threads", "1", "--format", "json"];
    let (ok, stdout, stderr) = tensorlift(&[&args[..], &["--warm-steps"]].concat());
    assert!(ok, "{stderr}");
    let json: serde_json::Value = serde_json::from_str(stdout.trim()).expect("one JSON object");
    assert_eq!(json["warm_steps"], true, "{json}");
    let partitions = json["partitions"].as_array().expect("partitions");
    assert!(!partitions.is_empty());
    for p in partitions {
        assert!(p["median_ms"].as_f64().is_some_and(|ms| ms >= 0.0), "{p}");
    }
    let (ok, stdout, stderr) = tensorlift(&args);
    assert!(ok, "{stderr}");
    let json: serde_json::Value = serde_json::from_str(stdout.trim()).expect("one JSON object");
    assert_eq!(json["warm_steps"], false, "{json}");
}
