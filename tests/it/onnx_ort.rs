//! Imported models against onnxruntime on the same files: the reduced-range (7-bit weight)
//! test models, on which onnxruntime's x86 kernels are exact on every CPU, give the same
//! network output and the same value in every 8-bit tensor onnxruntime computes, bit for bit,
//! on 20 seeded inputs, at every ISA level this CPU has. Needs an interpreter with numpy, onnx
//! and onnxruntime (`TENSORLIFT_PYTHON`; `.ci/run` makes one); without it the test reports
//! itself skipped, or fails when `TENSORLIFT_REQUIRE_PYTHON=1`.

use std::path::{Path, PathBuf};
use std::process::Command;

use tensorlift::engine;
use tensorlift::graph::{PartitionKind, PartitionPolicy, Value};
use tensorlift::{CompileOptions, IsaLevel, Target};

/// onnxruntime's inputs, outputs and 8-bit intermediate tensors for `seeds` seeds.
struct OrtRun {
    dir: PathBuf,
    names: Vec<String>,
}

fn run_onnxruntime(python: &str, model: &Path, seeds: usize, tag: &str) -> OrtRun {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = std::env::temp_dir().join(format!("tensorlift-ort-{tag}-{}", std::process::id()));
    let out = Command::new(python)
        .arg(root.join("scripts/models/ort_intermediates.py"))
        .args(["--model", &model.display().to_string(), "--seeds", &seeds.to_string(), "--intermediates"])
        .args(["--out-dir", &dir.display().to_string()])
        .output()
        .expect("run ort_intermediates.py");
    assert!(out.status.success(), "ort_intermediates.py: {}", String::from_utf8_lossy(&out.stderr));
    let names = std::fs::read_to_string(dir.join("tensors.txt")).expect("tensors.txt");
    OrtRun { names: names.lines().map(str::to_string).collect(), dir }
}

fn npy(path: &Path) -> Value {
    tensorlift::npy::read(path).unwrap_or_else(|e| panic!("{e}"))
}

/// `path` compiled at each of `levels` equals onnxruntime's run `ort` in the network's output
/// and every tensor `ort` names, on every seed; `auto`, when given, is how many partitions must
/// run on `Kernel::Auto`. With `PartitionPolicy::Fusion` a convolution's residual add runs in
/// its epilogue, and the convolution's own 8-bit output (the add's operand) is never stored:
/// exactly one named tensor per such partition has no buffer there. So every level runs
/// `Fusion`, and the first level also `FusionWithoutSum`, where every named tensor is stored.
fn equals_onnxruntime(path: &Path, ort: &OrtRun, seeds: usize, levels: &[IsaLevel], auto: Option<usize>) {
    let file = path.file_name().unwrap().to_string_lossy().to_string();
    let runs = levels
        .iter()
        .map(|&l| (l, PartitionPolicy::Fusion))
        .chain(levels.first().map(|&l| (l, PartitionPolicy::FusionWithoutSum)));
    for (level, policy) in runs {
        let model = tensorlift::onnx::load(path).unwrap();
        let tensors: Vec<_> = ort
            .names
            .iter()
            .map(|n| {
                let t = model.values.iter().find(|(name, _)| name == n).map(|&(_, t)| t);
                (n.clone(), t.unwrap_or_else(|| panic!("{file}: onnxruntime's tensor {n} is not in the graph")))
            })
            .collect();
        let partitions = model.graph.get_partitions(policy);
        let options = CompileOptions { target: Target::Level(level), threads: Some(2), ..CompileOptions::default() };
        let mut g = engine::compile(model.graph, partitions, &options).unwrap();
        g.keep_values();
        if let Some(auto) = auto {
            let found = g.steps().iter().filter(|s| matches!(s.kernel, engine::Kernel::Auto(_))).count();
            assert_eq!(found, auto, "{file}: the depthwise and grouped convolutions auto-scheduled");
        }
        let fused_sums = g
            .steps()
            .iter()
            .filter(|s| matches!(&s.partition.kind, PartitionKind::QuantizedConv(c) if c.residual.is_some()))
            .count();
        let unstored = tensors.iter().filter(|(_, t)| g.value(*t).is_none()).count();
        if policy == PartitionPolicy::FusionWithoutSum {
            assert_eq!(fused_sums, 0, "{file}: a residual add fused");
        }
        assert_eq!(unstored, fused_sums, "{file} with {policy:?}: named tensors without a buffer");
        for seed in 0..seeds {
            let d = ort.dir.join(seed.to_string());
            let (outputs, _) = g.execute(&[npy(&d.join("input_0.npy"))]).unwrap();
            let expected = npy(&d.join("output_0.npy"));
            assert!(outputs[0].bits_eq(&expected), "{file} at {level}, seed {seed}: the network's output differs");
            for (k, (name, t)) in tensors.iter().enumerate() {
                let Some(ours) = g.value(*t) else { continue };
                let theirs = npy(&d.join(format!("t_{k}.npy")));
                assert!(
                    ours.bits_eq(&theirs),
                    "{file} at {level} with {policy:?}, seed {seed}: {name} differs from onnxruntime's"
                );
            }
        }
    }
}

#[test]
fn reduced_range_models_equal_onnxruntime_in_every_tensor() {
    let Some(python) = crate::python::python_with(&["numpy", "onnx", "onnxruntime"]) else { return };
    let seeds = 20;
    let levels = crate::skip::levels_here_for(IsaLevel::ALL, "the comparison with onnxruntime");
    for file in ["resnet18_w8_s32_qop_u8_pc_rr.onnx", "resnet18_w8_s32_qdq_u8_pc_rr.onnx"] {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/models").join(file);
        let ort = run_onnxruntime(&python, &path, seeds, file.trim_end_matches(".onnx"));
        assert!(ort.names.len() >= 30, "{file}: {} intermediate tensors", ort.names.len());
        equals_onnxruntime(&path, &ort, seeds, &levels, None);
        std::fs::remove_dir_all(&ort.dir).ok();
    }
}

#[test]
fn mobilenet_models_equal_onnxruntime_in_every_tensor() {
    let Some(python) = crate::python::python_with(&["numpy", "onnx", "onnxruntime"]) else { return };
    let seeds = 20;
    let levels = crate::skip::levels_here_for(IsaLevel::ALL, "the MobileNet-style comparison with onnxruntime");
    // The 7-bit-weight models, on which onnxruntime's x86 kernels are exact; their depthwise
    // and grouped convolutions run on `Kernel::Auto`.
    for path in crate::engine_grouped::mobilenet_models().iter().filter(|p| p.to_string_lossy().ends_with("_rr.onnx")) {
        let file = path.file_name().unwrap().to_string_lossy().to_string();
        let ort = run_onnxruntime(&python, path, seeds, file.trim_end_matches(".onnx"));
        assert!(ort.names.len() >= 8, "{file}: {} intermediate tensors", ort.names.len());
        equals_onnxruntime(path, &ort, seeds, &levels, Some(3));
        std::fs::remove_dir_all(&ort.dir).ok();
    }
}
