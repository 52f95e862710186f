//! `tensorlift export MODEL.onnx` (`export::export_model`, `export_graph`): a whole quantized
//! network as `NAME_run` — the ResNet-style models' template kernels and the MobileNet-style
//! models' auto-scheduled grouped and depthwise convolutions — run from C (forced to every
//! level this CPU has), Rust and Python (`python/test_network.py`), bit for bit equal to the
//! engine (`tensorlift run`) and to the graph's reference on the same input, with the library's
//! pool at 1 and at 2 threads, each thread variant of the library reached; bad arguments are
//! error codes with messages; a partition the engine leaves to the reference is a typed export
//! error.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use schedules::x86_conv::Conv2dInt8Knobs;
use tensorlift::engine;
use tensorlift::export::load::ArgSpec;
use tensorlift::export::{
    ErrorCode, ExportError, ExportOptions, LoadError, LoadedLibrary, ModelExport, ModelLibrary, export_graph,
    export_model, harness,
};
use tensorlift::graph::{Data, DataType, FinalizedGraph, PartitionPolicy, Value, reference};
use tensorlift::record::{CpuRef, Phase, RECORD_VERSION, Record, RecordSchedule, Status, TargetRef};
use tensorlift::{CompileOptions, IsaLevel, Tensor};

fn out_dir(test: &str) -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join("export_model").join(test)
}

fn model(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/models").join(name)
}

/// The thread counts the tests export for (and run the library's pool at).
const THREADS: [usize; 2] = [1, 2];

/// No tuning records: every layer takes its default knobs (the same in the engine and the
/// library, which the manifest says), scheduled for each of `THREADS`.
fn no_records() -> ModelExport {
    ModelExport { user: Vec::new(), pretuned: Vec::new(), threads: THREADS.to_vec() }
}

/// The engine on `threads` threads on the export's partitions (`FusionWithoutSum`: what
/// `tensorlift run --threads --policy fusion-without-sum` compiles).
fn engine_on(graph: &FinalizedGraph, threads: usize) -> engine::CompiledGraph {
    let options = CompileOptions { threads: Some(threads), ..CompileOptions::default() };
    engine::compile(graph.clone(), graph.get_partitions(PartitionPolicy::FusionWithoutSum), &options).expect("engine")
}

fn options(name: &str, levels: &[IsaLevel]) -> ExportOptions {
    ExportOptions { levels: levels.to_vec(), ..ExportOptions::new(name) }
}

/// The little-endian bytes of a value's elements (logical order).
fn value_bytes(v: &Value) -> Vec<u8> {
    match v.data() {
        Data::F32(x) => x.iter().flat_map(|e| e.to_le_bytes()).collect(),
        Data::U8(x) => x.clone(),
        Data::S8(x) => x.iter().map(|&e| e as u8).collect(),
        other => panic!("no test bytes for {other:?}"),
    }
}

fn tensor(v: &Value) -> Tensor {
    let dims: Vec<i64> = v.dims().iter().map(|&d| d as i64).collect();
    match v.data() {
        Data::F32(x) => Tensor::from_slice(&dims, x),
        Data::U8(x) => Tensor::from_slice(&dims, x),
        Data::S8(x) => Tensor::from_slice(&dims, x),
        other => panic!("no test tensor of {other:?}"),
    }
    .expect("tensor")
}

/// The network's outputs as the engine (what `tensorlift run` runs, compiled for each of
/// `THREADS`) and the graph's reference compute them on `inputs`; asserts they all agree.
fn expected(graph: &FinalizedGraph, inputs: &[Value], what: &str) -> Vec<Vec<u8>> {
    let partitions = graph.get_partitions(PartitionPolicy::Fusion);
    let named: Vec<_> = graph.graph().inputs().iter().copied().zip(inputs.iter().cloned()).collect();
    let reference = reference::run(graph, &partitions, &named).unwrap_or_else(|e| panic!("{what}: reference: {e}"));
    for threads in THREADS {
        let (outputs, _) = engine_on(graph, threads).execute(inputs).expect("engine run");
        for ((_, r), o) in reference.iter().zip(&outputs) {
            assert!(o.bits_eq(r), "{what}: the engine on {threads} threads differs from the reference");
        }
    }
    reference.iter().map(|(_, r)| value_bytes(r)).collect()
}

fn run(command: &mut Command) -> (bool, String, String) {
    let out = command.output().expect("run command");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The run operator's arguments, from the manifest.
fn run_args(lib: &ModelLibrary) -> Vec<ArgSpec> {
    LoadedLibrary::open(&lib.library.shared).expect("load").args("run").expect("run").to_vec()
}

/// `source` compiled against `lib`'s static archive into `DIR/exe`.
fn build_c(lib: &ModelLibrary, exe: &str, source: &str, what: &str) -> PathBuf {
    let dir = lib.library.shared.parent().expect("out dir").to_path_buf();
    let (c, exe) = (dir.join(format!("{exe}.c")), dir.join(exe));
    std::fs::write(&c, source).unwrap();
    let (ok, _, stderr) = run(Command::new("cc")
        .args(["-std=c11", "-O1", "-Wall", "-Werror", "-o"])
        .arg(&exe)
        .arg(&c)
        .arg("-I")
        .arg(&dir)
        .arg(&lib.library.archive)
        .arg("-lpthread"));
    assert!(ok, "{what}: cc: {stderr}");
    exe
}

/// Builds `harness::network_program` against the static archive, writes `inputs`, and runs it
/// at every level of `levels` this CPU has (forced by TENSORLIFT_ISA) with the library's pool
/// at each of `THREADS`, asserting each output equals `expected`. The manifest, read from C on
/// the same pool, has the pool's size; the thread variant of the level the dispatch takes there
/// (the largest count within it) is thus reached, and every variant of each level is.
fn check_from_c(lib: &ModelLibrary, inputs: &[Value], expected: &[Vec<u8>], levels: &[IsaLevel], what: &str) {
    let dir = lib.library.shared.parent().expect("out dir").to_path_buf();
    let name = &lib.library.name;
    let exe = build_c(lib, "call_run", &harness::network_program(name, &run_args(lib), 0), what);
    let manifest_source =
        format!("#include <stdio.h>\n#include \"{name}.h\"\nint main(void) {{ puts({name}_manifest()); return 0; }}\n");
    let print_manifest = build_c(lib, "print_manifest", &manifest_source, what);
    for (i, v) in inputs.iter().enumerate() {
        std::fs::write(dir.join(format!("in{i}.bin")), value_bytes(v)).unwrap();
    }
    assert_eq!(lib.library.manifest["threads"], serde_json::json!(THREADS), "{what}");
    for level in crate::skip::levels_here_for(levels.iter().copied(), what) {
        let variants: Vec<usize> =
            serde_json::from_value(lib.library.manifest["thread_variants"][level.name()].clone())
                .unwrap_or_else(|e| panic!("{what}: thread_variants at {level}: {e}"));
        let mut reached = Vec::new();
        for threads in THREADS {
            let env = [("TENSORLIFT_ISA", level.name().to_string()), ("TENSORLIFT_NUM_THREADS", threads.to_string())];
            let (ok, _, stderr) = run(Command::new(&exe).arg(&dir).envs(env.clone()));
            assert!(ok, "{what} at {level}, {threads} threads: {stderr}");
            for (j, e) in expected.iter().enumerate() {
                let out = std::fs::read(dir.join(format!("out{j}.bin"))).unwrap();
                assert!(&out == e, "{what}: output {j} from C at {level} on {threads} threads differs from the engine");
            }
            let (ok, stdout, stderr) = run(Command::new(&print_manifest).envs(env));
            assert!(ok, "{what}: manifest: {stderr}");
            let m: serde_json::Value = serde_json::from_str(stdout.trim()).expect("manifest JSON");
            assert_eq!(
                (m["selected_isa"].as_str(), m["pool_threads"].as_u64()),
                (Some(level.name()), Some(threads as u64))
            );
            let taken = variants.iter().copied().filter(|&v| v <= threads).max().unwrap_or(variants[0]);
            reached.push(taken);
        }
        reached.dedup();
        assert_eq!(reached, variants, "{what} at {level}: the thread variants the runs reach");
    }
}

/// `graph` exported as `name` at `levels` (no records), after checking that its manifest lists
/// every kernel of `kernels` (what the test means to exercise).
fn export_with_kernels(
    graph: &FinalizedGraph,
    model: &str,
    name: &str,
    levels: &[IsaLevel],
    kernels: &[&str],
    what: &str,
) -> ModelLibrary {
    let lib = export_graph(
        graph.clone(),
        Path::new(model),
        &no_records(),
        &options(name, levels),
        &out_dir(name),
        Instant::now(),
    )
    .unwrap_or_else(|e| panic!("{what}: {e}"));
    let kinds: Vec<&str> =
        lib.library.manifest["partitions"].as_array().unwrap().iter().filter_map(|p| p["kernel"].as_str()).collect();
    for kind in kernels {
        assert!(kinds.contains(kind), "{what}: no {kind} in {kinds:?}");
    }
    lib
}

/// The manifest's `kernel` of an engine step.
fn kernel_name(kernel: &engine::Kernel) -> Option<String> {
    match kernel {
        engine::Kernel::Conv(_) => Some("compiled conv".into()),
        engine::Kernel::Dense(_) => Some("compiled dense".into()),
        engine::Kernel::Auto(a) => Some(format!("auto {}", a.point().sketch)),
        _ => None,
    }
}

/// `file` (under `tests/models`) exported as `name` at every level, run from C at each level
/// this CPU has, from Rust, Python and `tensorlift run --output`, all bit for bit equal to the
/// engine and the reference. The manifest describes the network: every kernel of `kinds`
/// (what the caller means to exercise), `autos` auto-scheduled convolutions, and per compiled
/// partition the engine's kernel, with at this CPU's level and each thread count the knobs or
/// point the engine chose on that many threads; a level's thread variants are the counts whose
/// functions differ from every smaller count's. `variants`: the host level's thread variants
/// where the caller knows them.
fn check_exported_model(file: &str, name: &str, kinds: &[&str], autos: usize, variants: Option<&[usize]>) {
    {
        let path = model(file);
        let lib = export_model(&path, &no_records(), &options(name, &IsaLevel::ALL), &out_dir(name))
            .unwrap_or_else(|e| panic!("{file}: {e}"));
        let graph = tensorlift::onnx::load(&path).unwrap().graph;
        let engines: Vec<_> = THREADS.iter().map(|&t| engine_on(&graph, t)).collect();
        let specs = engines[0].input_specs();
        let inputs: Vec<Value> = specs.iter().map(|(d, dims)| crate::engine::input(*d, dims, 7)).collect();
        let want = expected(&graph, &inputs, file);

        // Manifest: inputs, outputs, partitions with their kernels and tuning per level.
        let m = &lib.library.manifest;
        assert_eq!(m["inputs"][0]["dtype"], "float32", "{file}");
        assert_eq!(m["inputs"][0]["shape"], serde_json::json!(specs[0].1), "{file}");
        assert_eq!(m["outputs"].as_array().map(Vec::len), Some(1), "{file}");
        let partitions = m["partitions"].as_array().expect("partitions");
        for kind in kinds {
            assert!(partitions.iter().any(|p| p["kernel"] == *kind), "{file}: no {kind}");
        }
        let auto: Vec<_> = partitions.iter().filter(|p| p["kernel"] == "auto rules").collect();
        assert_eq!(auto.len(), autos, "{file}: auto-scheduled convolutions");
        assert!(m["weights_bytes"].as_u64().unwrap() > 0, "{file}");
        // At this CPU's level, each thread count's schedules are those the engine compiles on
        // that many threads; every level has a function for each compiled partition and count.
        let host = IsaLevel::detect().unwrap_or(IsaLevel::Scalar).name();
        let counts: Vec<String> = THREADS.iter().map(usize::to_string).collect();
        for (compiled, t) in engines.iter().zip(&counts) {
            assert_eq!(compiled.steps().len(), partitions.len(), "{file}");
            for (step, p) in compiled.steps().iter().zip(partitions) {
                let Some(kernel) = kernel_name(&step.kernel) else { continue };
                assert_eq!(p["kernel"], kernel.as_str(), "{file}: {p}");
                // The defaults' and points' weights do not depend on the threads: every count
                // runs its own choice (else `weights_of`, which the test below exercises).
                assert!(p.get("weights_of").is_none(), "{file}: {p}");
                for level in IsaLevel::ALL {
                    let f = &p["function"][level.name()][t];
                    assert!(f.as_str().is_some_and(|f| f.starts_with('k')), "{file}: {t} threads: {p}");
                }
                match &step.kernel {
                    engine::Kernel::Conv(c) | engine::Kernel::Dense(c) => {
                        for level in IsaLevel::ALL {
                            assert_eq!(p["tuning"][level.name()][t]["source"], "default", "{file}: {p}");
                        }
                        let knobs = serde_json::to_value(c.knobs()).unwrap();
                        assert_eq!(p["tuning"][host][t]["knobs"], knobs, "{file}: {t} threads: {p}");
                    }
                    engine::Kernel::Auto(a) => {
                        for level in IsaLevel::ALL {
                            assert_eq!(p["point"][level.name()][t]["sketch"], "rules", "{file}: {p}");
                        }
                        let point = serde_json::to_value(a.point()).unwrap();
                        assert_eq!(p["point"][host][t], point, "{file}: {t} threads: {p}");
                    }
                    _ => {}
                }
            }
        }
        for level in IsaLevel::ALL {
            let functions = |t: &String| -> Vec<serde_json::Value> {
                partitions.iter().map(|p| p["function"][level.name()][t].clone()).collect()
            };
            let own: Vec<usize> = THREADS
                .iter()
                .zip(&counts)
                .enumerate()
                .filter(|&(i, (_, t))| counts[..i].iter().all(|smaller| functions(smaller) != functions(t)))
                .map(|(_, (&n, _))| n)
                .collect();
            assert_eq!(m["thread_variants"][level.name()], serde_json::json!(own), "{file} at {level}");
        }
        if let Some(variants) = variants {
            assert_eq!(m["thread_variants"][host], serde_json::json!(variants), "{file}");
        }

        check_from_c(&lib, &inputs, &want, &IsaLevel::ALL, file);

        // Only the three NAME_ functions are exported, and libc is all the library needs.
        let so = &lib.library.shared;
        let (ok, symbols, _) = run(Command::new("nm").args(["-D", "--defined-only"]).arg(so));
        assert!(ok, "{file}: nm");
        let mut names: Vec<&str> = symbols.lines().filter_map(|l| l.split_whitespace().nth(2)).collect();
        names.sort();
        let expect = ["last_error", "manifest", "run"].map(|f| format!("{name}_{f}"));
        assert_eq!(names, expect, "{file}: exported symbols");
        let (ok, dynamic, _) = run(Command::new("readelf").arg("-d").arg(so));
        assert!(ok, "{file}: readelf");
        for line in dynamic.lines().filter(|l| l.contains("(NEEDED)")) {
            assert!(line.contains("[libc.so.6]") || line.contains("[ld-linux"), "{file}: {line}");
        }

        let loaded = LoadedLibrary::open(&lib.library.shared).unwrap();
        let outs = loaded.run(&inputs.iter().map(tensor).collect::<Vec<_>>().iter().collect::<Vec<_>>()).unwrap();
        assert!(outs[0].as_bytes() == want[0].as_slice(), "{file}: Rust loader differs from the engine");
        // Callers on several threads at once, each with its own buffers.
        let tensors: Vec<Tensor> = inputs.iter().map(tensor).collect();
        std::thread::scope(|s| {
            let calls: Vec<_> = (0..3)
                .map(|_| s.spawn(|| loaded.run(&tensors.iter().collect::<Vec<_>>()).expect("concurrent call")))
                .collect();
            for call in calls {
                assert!(call.join().unwrap()[0].as_bytes() == want[0].as_slice(), "{file}: a concurrent call differs");
            }
        });

        let dir = out_dir(name);
        if let Some(python) = crate::python::python_with(&["numpy"]) {
            std::fs::write(dir.join("expected0.bin"), &want[0]).unwrap();
            let loader_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("python");
            let (ok, stdout, stderr) = run(Command::new(python)
                .arg(loader_dir.join("test_network.py"))
                .arg(&lib.library.shared)
                .arg(&dir)
                .env("PYTHONPATH", &loader_dir));
            assert!(ok && stdout.contains("python network ok"), "{file}: {stdout}\n{stderr}");
        }
        let (input, output) = (dir.join("input.npy"), dir.join("run_output.npy"));
        tensorlift::npy::write(&input, &inputs[0]).unwrap();
        let (ok, _, stderr) = crate::cli::tensorlift(&[
            "run",
            &path.display().to_string(),
            "--input",
            &input.display().to_string(),
            "--output",
            &output.display().to_string(),
            "--repeat",
            "1",
        ]);
        assert!(ok, "{file}: tensorlift run: {stderr}");
        let from_run = tensorlift::npy::read(&output).unwrap();
        assert!(value_bytes(&from_run) == want[0], "{file}: tensorlift run --output differs from the library");
    }
}

/// The ResNet-style test models, QOperator and QDQ: template convolutions and products, the
/// native kernels (`check_exported_model`).
#[test]
fn exported_models_equal_the_engine_from_c_rust_and_tensorlift_run() {
    let kinds = ["compiled conv", "native quantize", "native dequantize", "native add", "compiled dense"];
    check_exported_model("resnet18_w8_s32_qop_u8_pc.onnx", "netqop", &kinds, 0, None);
    check_exported_model("resnet18_w8_s32_qdq_s8_pc.onnx", "netqdq", &kinds, 0, None);
}

/// The library's functions at `level` (manifest names, `k0`, ...) whose object defines a
/// fused GEMM-and-Map kernel (`IntrinKind::GemmMap`: a kernel symbol named after a GEMM
/// declaration, assembled for zmm), from the shared library's symbol table.
fn functions_with_fused_kernels(lib: &ModelLibrary, level: IsaLevel) -> Vec<String> {
    let (ok, symbols, stderr) = run(Command::new("nm").arg(&lib.library.shared));
    assert!(ok, "nm: {stderr}");
    let prefix = format!("tlx_{}__", lib.library.name);
    let level_part = format!("__{}__", level.name().replace('-', "_"));
    let mut functions: Vec<String> = symbols
        .lines()
        .filter_map(|l| l.split_whitespace().nth(2)?.strip_prefix(&prefix))
        .filter_map(|s| {
            let (function, kernel) = s.split_once(&level_part)?;
            (kernel.starts_with("int8_gemm") && kernel.contains("__zmm__")).then(|| function.to_string())
        })
        .collect();
    functions.dedup();
    functions
}

/// An exported library lowers each level's functions as the JIT lowers for that level
/// (`build::lower_at`): at `avx512-vnni` the requantization is the GEMM kernel's epilogue
/// in the library exactly where it is in the engine compiled for `avx512-vnni`, partition by
/// partition, and no other level has a fused kernel; the library's output from C equals the
/// engine's at every level this CPU has.
#[test]
fn an_exported_library_fuses_the_epilogues_the_jit_fuses() {
    let file = "resnet18_w8_s32_qdq_u8_pc.onnx";
    let levels = [IsaLevel::Avx2, IsaLevel::Avx512Vnni];
    let graph = tensorlift::onnx::load(model(file)).unwrap().graph;
    let lib = export_with_kernels(&graph, file, "netepi", &levels, &["compiled conv", "compiled dense"], file);
    let fused = functions_with_fused_kernels(&lib, IsaLevel::Avx512Vnni);
    assert!(!fused.is_empty(), "{file}: no fused kernel at avx512-vnni");
    assert_eq!(functions_with_fused_kernels(&lib, IsaLevel::Avx2), Vec::<String>::new(), "{file}: avx2");
    let partitions = lib.library.manifest["partitions"].as_array().expect("partitions").clone();
    if crate::skip::has_level(IsaLevel::Avx512Vnni, "the engine at avx512-vnni") {
        for threads in THREADS {
            let options = CompileOptions {
                threads: Some(threads),
                target: tensorlift::Target::Level(IsaLevel::Avx512Vnni),
                ..CompileOptions::default()
            };
            let partitioned = graph.get_partitions(PartitionPolicy::FusionWithoutSum);
            let compiled = engine::compile(graph.clone(), partitioned, &options).expect("engine");
            let mut epilogues = 0;
            for (step, p) in compiled.steps().iter().zip(&partitions) {
                let (engine::Kernel::Conv(c) | engine::Kernel::Dense(c)) = &step.kernel else { continue };
                let function = p["function"]["avx512-vnni"][threads.to_string()].as_str().expect("function");
                let jit = c.kernel_description().contains("GEMM epilogue");
                epilogues += usize::from(jit);
                assert_eq!(fused.iter().any(|f| f == function), jit, "{file}, {threads} threads: {p}");
            }
            assert!(epilogues > 0, "{file}, {threads} threads: the engine fuses no epilogue");
        }
    }
    let specs = engine_on(&graph, 1).input_specs();
    let inputs: Vec<Value> = specs.iter().map(|(d, dims)| crate::engine::input(*d, dims, 11)).collect();
    let want = expected(&graph, &inputs, file);
    check_from_c(&lib, &inputs, &want, &levels, file);
}

/// The MobileNet-style test models, QOperator and QDQ: two depthwise convolutions and a grouped
/// one, auto-scheduled (`auto rules`), beside the template's pointwise ones
/// (`check_exported_model`). The auto-scheduled points take the threads they are made for, so
/// the library has a variant for 1 and for 2 threads, and the runs reach both.
#[test]
fn exported_mobilenet_models_with_auto_scheduled_convolutions_equal_the_engine() {
    let kinds = ["compiled conv", "auto rules", "native quantize", "native dequantize"];
    check_exported_model("mobilenet/mobilenet_w8_s16_qop_u8_pc.onnx", "mbqop", &kinds, 3, Some(&THREADS));
    check_exported_model("mobilenet/mobilenet_w8_s16_qdq_u8_pc_rr.onnx", "mbqdq", &kinds, 3, Some(&THREADS));
}

/// A verified user record of `task` on this CPU at `host`, with `knobs` for `threads` threads
/// and a median of `ns`.
fn record(task: &tensorlift::tune::tasks::Task, knobs: Conv2dInt8Knobs, threads: usize, ns: f64) -> Record {
    let host = IsaLevel::detect().unwrap_or(IsaLevel::Scalar);
    let cpu = tensorlift::isa::cpu_id().as_ref().map(CpuRef::from);
    let cpu = cpu.unwrap_or(CpuRef { vendor: "v".into(), family: 1, model: 2, name: "n".into() });
    Record {
        version: RECORD_VERSION,
        workload: task.workload.clone(),
        target: TargetRef { isa: host.name().into(), cpu, features: vec![], threads },
        schedule: RecordSchedule {
            knobs: Some(knobs),
            auto: None,
            weights: task.weights,
            phase: Phase::Validation,
            trace: None,
        },
        status: Status::Ok,
        median_ns: Some(ns),
        gops: Some(1.0 / ns),
        compile_ms: Some(1.0),
        verified: true,
        measured_at: tensorlift::record::now_rfc3339(),
        error: None,
        peak_gops: None,
        peak_probe: None,
        point_features: None,
    }
}

/// Records whose 1-thread knobs pack every layer's weights in other panels than the 2-thread
/// ones (as ResNet-18's pre-tuned records do): the 1-thread variant keeps the 2-thread
/// weights, so the library's weights are those of a `--threads 2` export, and the manifest says
/// so (`weights_of`, the 2-thread knobs on one thread, their source); the library still equals
/// the engine and the reference at 1 and 2 threads.
#[test]
fn smaller_thread_counts_keep_the_weights_of_the_largest() {
    let path = model("resnet18_w8_s32_qop_u8_pc.onnx");
    let host = IsaLevel::detect().unwrap_or(IsaLevel::Scalar);
    let tasks = tensorlift::tune::tasks::extract(&path).expect("tasks");
    let mut user = Vec::new();
    for task in &tasks.tasks {
        let mut one = task.space(1, host).default_knobs();
        one.nr = if one.nr == 16 { 32 } else { 16 };
        user.push(record(task, one, 1, 2.0));
        user.push(record(task, task.space(2, host).default_knobs(), 2, 1.0));
    }
    let export = |threads: &[usize], name: &str| {
        let export = ModelExport { user: user.clone(), pretuned: Vec::new(), threads: threads.to_vec() };
        export_model(&path, &export, &options(name, &[host]), &out_dir(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
    };
    let (both, two, one) = (export(&[1, 2], "kw12"), export(&[2], "kw2"), export(&[1], "kw1"));
    assert_ne!(one.weights_bytes, two.weights_bytes, "the 1-thread records pack the weights otherwise");
    assert_eq!(both.weights_bytes, two.weights_bytes, "a 1-thread variant adds no weights");

    let h = host.name();
    let partitions = both.library.manifest["partitions"].as_array().expect("partitions").clone();
    let compiled: Vec<_> =
        partitions.iter().filter(|p| p["kernel"].as_str().is_some_and(|k| k.starts_with("compiled"))).collect();
    assert!(!compiled.is_empty());
    for p in compiled {
        let (t1, t2) = (&p["tuning"][h]["1"], &p["tuning"][h]["2"]);
        assert_eq!(p["weights_of"][h]["1"], 2, "{p}");
        assert_eq!((&t1["source"], &t2["source"]), (&"tuned".into(), &"tuned".into()), "{p}");
        let mut knobs = t2["knobs"].clone();
        knobs["threads"] = 1.into();
        assert_eq!(t1["knobs"], knobs, "the 2-thread knobs on one thread: {p}");
        assert!(p["weights_of"][h].get("2").is_none(), "{p}");
    }

    let graph = tensorlift::onnx::load(&path).unwrap().graph;
    let inputs: Vec<Value> =
        engine_on(&graph, 1).input_specs().iter().map(|(d, dims)| crate::engine::input(*d, dims, 7)).collect();
    let want = expected(&graph, &inputs, "kw12");
    check_from_c(&both, &inputs, &want, &[host], "kw12");
}

/// With a tuning record of an auto-scheduled convolution (a verified point other than the
/// rules'), the library runs that convolution at the record's point (the manifest says which),
/// the others at the rules', and still equals the engine and the reference bit for bit.
#[test]
fn an_exported_mobilenet_takes_the_point_of_its_auto_tuning_record() {
    use tensorlift::tune::auto::{LoweredSpace, SearchOptions, Strategy, propose};
    use tensorlift::tune::auto_task_bench::AutoTaskBench;
    use tensorlift::tune::worker::{Candidate, record};

    let path = model("mobilenet/mobilenet_w8_s16_qop_u8_pc.onnx");
    let host = IsaLevel::detect().unwrap_or(IsaLevel::Scalar);
    let tasks = tensorlift::tune::tasks::extract(&path).unwrap();
    let task = &tasks.auto_tasks[0];
    let bench = AutoTaskBench::new(&tasks, task, host, 2).unwrap();
    let search = SearchOptions { seed: 3, ..SearchOptions::new(8, Strategy::Random) };
    let points = propose(&LoweredSpace::new(&bench.space), &[], 8, &search).unwrap();
    let (point, measured) = points
        .into_iter()
        .filter(|p| *p != bench.rules)
        .map(|p| {
            let m = bench.measure(&p, 1, None);
            (p, m)
        })
        .find(|(_, m)| m.verified)
        .expect("a verified point other than the rules'");
    let candidate = Candidate {
        layer: String::new(),
        model: Some(path.display().to_string()),
        task: Some(task.workload.key.clone()),
        isa: host.name().into(),
        weights: schedules::resnet18::WeightBits::Eight,
        max_threads: 2,
        op: None,
        point: None,
        auto: Some(point.clone()),
        repeat: 1,
        budget_ms: None,
        phase: tensorlift::record::Phase::Validation,
    };
    let tuned = record(&candidate, task.workload.clone(), &measured);
    let export = ModelExport { user: vec![tuned], pretuned: Vec::new(), threads: vec![1, 2] };
    let lib = export_model(&path, &export, &options("mbtuned", &[host]), &out_dir("mbtuned")).unwrap();
    let partitions = lib.library.manifest["partitions"].as_array().unwrap().clone();
    let points: Vec<&serde_json::Value> =
        partitions.iter().filter(|p| !p["point"].is_null()).map(|p| &p["point"][host.name()]["2"]).collect();
    assert_eq!(points.len(), 3);
    let want = serde_json::to_value(&point).unwrap();
    assert_eq!(points.iter().filter(|p| ***p == want).count(), 1, "{points:?}");
    // The manifest says where each point came from: the record's `tuned`, the others `default`.
    let sources: Vec<(&serde_json::Value, &serde_json::Value)> = partitions
        .iter()
        .filter(|p| !p["point"].is_null())
        .map(|p| (&p["tuning"][host.name()]["2"]["source"], &p["tuning"][host.name()]["2"]["point"]))
        .collect();
    for (source, point) in &sources {
        let expected = if **point == want { "tuned" } else { "default" };
        assert_eq!(source.as_str(), Some(expected), "{sources:?}");
    }
    let graph = tensorlift::onnx::load(&path).unwrap().graph;
    let specs = engine::compile(graph.clone(), graph.get_partitions(PartitionPolicy::Fusion), &Default::default())
        .unwrap()
        .input_specs();
    let inputs: Vec<Value> = specs.iter().map(|(d, dims)| crate::engine::input(*d, dims, 7)).collect();
    let want = expected(&graph, &inputs, "mbtuned");
    check_from_c(&lib, &inputs, &want, &[host], "mobilenet with a tuned point");
    assert!(lib.warnings.is_empty(), "{:?}", lib.warnings);

    // A record whose point the space does not have: the export goes on at the rules' point and
    // says so once at planning and once per thread count, never silently.
    let mut bad = record(&candidate, task.workload.clone(), &measured);
    bad.schedule.auto = Some(schedules::auto::AutoPoint { sketch: "no such sketch".into(), values: vec![] });
    let export = ModelExport { user: vec![bad], pretuned: Vec::new(), threads: vec![1, 2] };
    let lib = export_model(&path, &export, &options("mbbad", &[host]), &out_dir("mbbad")).unwrap();
    assert_eq!(lib.warnings.len(), 3, "{:?}", lib.warnings);
    assert!(lib.warnings.iter().all(|w| w.contains("no such sketch")), "{:?}", lib.warnings);
    for threads in ["1 threads", "2 threads"] {
        assert!(lib.warnings.iter().any(|w| w.contains(threads)), "{threads}: {:?}", lib.warnings);
    }
    let partitions = lib.library.manifest["partitions"].as_array().unwrap().clone();
    for p in partitions.iter().filter(|p| !p["point"].is_null()) {
        assert_eq!(p["tuning"][host.name()]["2"]["source"], "default", "{p}");
    }
}

/// The hand-built residual block of `engine.rs` (u8 and s8, random scales and zero points):
/// the native kernels (quantized add, max pool, global average pool, dequantize; the models
/// above quantize their float input) and an 8-bit 4-D graph input, which the library permutes into NHWC, exported and run from
/// C at every level this CPU has (the C loops' builds: the baseline with software fma at
/// `scalar`, AVX2 with fused multiply-add, AVX-512 at `avx512-vnni` and `amx`), bit for bit as
/// the engine and the reference.
#[test]
fn every_native_kernel_in_the_library_equals_the_engine() {
    for seed in 0..3 {
        for act in [DataType::U8, DataType::S8] {
            let what = format!("residual block {seed} {act}");
            let graph = crate::engine::residual_block(seed, act).finalize().unwrap();
            let name = format!("blk{seed}{}", if act == DataType::U8 { "u" } else { "s" });
            let levels = IsaLevel::ALL;
            let kernels = ["native add", "native max pool", "native global avg pool", "native dequantize"];
            let lib = export_with_kernels(&graph, "residual_block", &name, &levels, &kernels, &what);
            let inputs = vec![crate::engine::input(act, &[1, 16, 10, 10], seed + 100)];
            let want = expected(&graph, &inputs, &what);
            check_from_c(&lib, &inputs, &want, &levels, &what);
        }
    }
}

/// Wrong shape, dtype, argument count: the library's error code and a message naming what it
/// expected and found, from Rust.
#[test]
fn bad_arguments_to_run_are_error_codes_with_messages() {
    let path = model("resnet18_w8_s32_qop_u8_pc.onnx");
    let host = IsaLevel::detect().unwrap_or(IsaLevel::Scalar);
    let lib = export_model(&path, &no_records(), &options("netbad", &[host]), &out_dir("netbad")).unwrap();
    let loaded = LoadedLibrary::open(&lib.library.shared).unwrap();
    let wrong_shape = Tensor::zeros(ir::DType::F32, &[1, 3, 32, 31]).unwrap();
    let err = loaded.run(&[&wrong_shape]).unwrap_err();
    assert!(matches!(err, LoadError::Call { code: Some(ErrorCode::Shape), .. }), "{err}");
    assert!(err.to_string().contains("expected shape [1, 3, 32, 32], found [1, 3, 32, 31]"), "{err}");
    let wrong_dtype = Tensor::zeros(ir::DType::U8, &[1, 3, 32, 32]).unwrap();
    let err = loaded.run(&[&wrong_dtype]).unwrap_err();
    assert!(matches!(err, LoadError::Call { code: Some(ErrorCode::Dtype), .. }), "{err}");
    assert!(err.to_string().contains("expected dtype float32"), "{err}");
    let x = Tensor::zeros(ir::DType::F32, &[1, 3, 32, 32]).unwrap();
    let err = loaded.run(&[&x, &x]).unwrap_err();
    assert!(matches!(err, LoadError::Call { code: Some(ErrorCode::Nargs), .. }), "{err}");
    assert!(err.to_string().contains("expected 2 arguments, found 3"), "{err}");
}

/// A float model's convolutions run on the graph's reference in the engine: its export is an
/// `UnsupportedPartition` error naming the partition, and writes no library.
#[test]
fn a_partition_the_engine_leaves_to_the_reference_is_a_typed_export_error() {
    let dir = out_dir("float");
    let err =
        export_model(&model("resnet18_w2_s32_float.onnx"), &no_records(), &options("netf", &[IsaLevel::Scalar]), &dir)
            .err()
            .expect("a float model does not export");
    match &err {
        ExportError::UnsupportedPartition { partition, kind, why } => {
            assert!(partition.starts_with("p0"), "{err}");
            assert_eq!(kind, "Single", "{err}");
            assert!(why.contains("no native kernel"), "{err}");
        }
        other => panic!("expected UnsupportedPartition, found {other}"),
    }
    assert!(!dir.join("libnetf.so").exists());
}

/// Every pair of 8-bit operands through the library's quantized add (u8 and s8, seeded scales
/// and zero points, with and without a ReLU), and the quantization of float values that fall
/// on rounding ties and beyond the range: from C at every level this CPU has (each build of the
/// C loops), bit for bit as the engine and the reference.
#[test]
fn the_native_add_and_quantize_equal_the_engine_on_every_operand_pair() {
    use tensorlift::graph::{Graph, OpKind, QuantParams, QuantizeAttrs};
    let levels = IsaLevel::ALL;
    for seed in 0..4u32 {
        for act in [DataType::U8, DataType::S8] {
            let what = format!("add and quantize {seed} {act}");
            let mut state = u64::from(seed) * 0x9E37_79B9 + 17;
            let mut next = |m: u32| {
                state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                ((state >> 33) as u32) % m
            };
            let (lo, span) = if act == DataType::U8 { (0, 256) } else { (-128, 256) };
            let mut zp = || lo + next(span) as i32;
            let (za, zb, zc, zq) = (zp(), zp(), zp(), zp());
            let mut scale = || (1 + next(4000)) as f32 / 8192.0;
            let (sa, sb, sc) = (scale(), scale(), scale());
            // Power-of-two scale on even seeds: x / scale is exact and ties are exact halves.
            let sq = if seed % 2 == 0 { 0.125 } else { scale() };
            let dq = |s: f32, z: i32| OpKind::Dequantize(QuantParams::per_tensor(s, z));
            let q =
                |s: f32, z: i32| OpKind::Quantize(QuantizeAttrs { params: QuantParams::per_tensor(s, z), dtype: act });
            let mut g = Graph::new();
            let a = g.input("a", act, [1, 256, 16, 16]);
            let b = g.input("b", act, [1, 256, 16, 16]);
            let f = g.input("f", DataType::F32, [64, 1024]);
            let af = g.apply("dq_a", dq(sa, za), &[a]).unwrap();
            let bf = g.apply("dq_b", dq(sb, zb), &[b]).unwrap();
            let mut sum = g.apply("add", OpKind::Add, &[af, bf]).unwrap();
            if seed % 2 == 1 {
                sum = g.apply("relu", OpKind::ReLU, &[sum]).unwrap();
            }
            let c = g.apply("q_c", q(sc, zc), &[sum]).unwrap();
            g.mark_output(c).unwrap();
            let fq = g.apply("q_f", q(sq, zq), &[f]).unwrap();
            let back = g.apply("dq_f", dq(sq, zq), &[fq]).unwrap();
            g.mark_output(back).unwrap();
            let graph = g.finalize().unwrap();
            let name = format!("addq{seed}{}", if act == DataType::U8 { "u" } else { "s" });
            let kernels = ["native add", "native quantize", "native dequantize"];
            let lib = export_with_kernels(&graph, "add_and_quantize", &name, &levels, &kernels, &what);
            // a[i] = i / 256, b[i] = i % 256 (as bytes): every pair once.
            let bytes = |f: fn(usize) -> usize| -> Vec<u8> { (0..65536).map(|i| f(i) as u8).collect() };
            let value = |v: Vec<u8>| match act {
                DataType::U8 => Value::new(&[1, 256, 16, 16], Data::U8(v)).unwrap(),
                _ => Value::new(&[1, 256, 16, 16], Data::S8(v.into_iter().map(|x| x as i8).collect())).unwrap(),
            };
            // Floats on every half step of the scale across and beyond the range, then NaN and
            // the infinities.
            let mut floats: Vec<f32> = (0..65536).map(|i| (i as f32 - 32768.0) * sq / 64.0).collect();
            floats[0] = f32::NAN;
            floats[1] = f32::INFINITY;
            floats[2] = f32::NEG_INFINITY;
            let inputs = vec![
                value(bytes(|i| i / 256)),
                value(bytes(|i| i % 256)),
                Value::new(&[64, 1024], Data::F32(floats)).unwrap(),
            ];
            let want = expected(&graph, &inputs, &what);
            check_from_c(&lib, &inputs, &want, &levels, &what);
        }
    }
}

/// `tensorlift export MODEL.onnx --out DIR --name NAME --isa LEVELS --format json`: the three
/// files, the levels asked, the sizes and times reported; the subcommands still parse beside it.
#[test]
fn the_cli_exports_a_model_and_reports_it_as_json() {
    let dir = out_dir("cli");
    let file = model("resnet18_w8_s32_qdq_u8_pc.onnx").display().to_string();
    let (ok, stdout, stderr) = crate::cli::tensorlift(&[
        "export",
        &file,
        "--out",
        &dir.display().to_string(),
        "--name",
        "clinet",
        "--isa",
        "scalar,avx2",
        "--threads",
        "2,1,2",
        "--format",
        "json",
    ]);
    assert!(ok, "{stderr}");
    let report: serde_json::Value = serde_json::from_str(stdout.trim()).expect("one JSON object");
    assert_eq!(report["isa_levels"], serde_json::json!(["scalar", "avx2"]));
    assert_eq!(report["threads"], serde_json::json!([1, 2]));
    assert!(report["thread_variants"]["avx2"].as_array().is_some_and(|v| v.first() == Some(&1.into())), "{report}");
    for key in ["size_bytes", "weights_bytes", "plan_ms", "export_ms"] {
        assert!(report[key].as_f64().is_some_and(|v| v > 0.0), "{key}: {report}");
    }
    for f in ["libclinet.so", "libclinet.a", "clinet.h"] {
        assert!(dir.join(f).exists(), "{f}");
    }
    let header = std::fs::read_to_string(dir.join("clinet.h")).unwrap();
    assert!(header.contains("int32_t clinet_run(DLTensor *const *args, int32_t nargs);"), "{header}");
    let (ok, _, stderr) = crate::cli::tensorlift(&["export", "--out", &dir.display().to_string()]);
    assert!(!ok && stderr.contains("MODEL"), "{stderr}");
}

/// Thread counts out of range (none, zero, more than the pool can have) are a typed error
/// naming them, and write no library.
#[test]
fn thread_counts_out_of_range_are_a_typed_export_error() {
    let path = model("resnet18_w8_s32_qop_u8_pc.onnx");
    let dir = out_dir("netthr");
    for threads in [vec![], vec![0, 2], vec![1, ModelExport::MAX_THREADS + 1]] {
        let export = ModelExport { threads: threads.clone(), ..no_records() };
        let err = export_model(&path, &export, &options("netthr", &[IsaLevel::Scalar]), &dir).err().expect("an error");
        match &err {
            ExportError::Threads { found, max } => assert_eq!((found, *max), (&threads, ModelExport::MAX_THREADS)),
            other => panic!("expected Threads, found {other}"),
        }
        assert!(err.to_string().contains("expected one or more, each from 1 to 256"), "{err}");
    }
    assert!(!dir.join("libnetthr.so").exists());
}
