//! The engine against the graph's reference: every partition of every test model compiled at
//! every ISA level this CPU has, each partition's output bit for bit equal to the reference's
//! evaluation of that partition on the same inputs, and the network's outputs equal to the
//! reference's evaluation of the whole graph. Also: inputs that do not fit are typed errors.

use std::path::{Path, PathBuf};

use tensorlift::engine::{self, CompiledGraph, EngineError, Kernel};
use tensorlift::graph::{Data, DataType, PartitionPolicy, TensorId, Value, reference};
use tensorlift::{CompileOptions, IsaLevel, Target};

/// The committed test models (`scripts/models/make_models.py`).
pub fn models() -> Vec<PathBuf> {
    let files = onnx_files("tests/models");
    assert!(files.len() >= 6, "expected the test models in tests/models, found {files:?}");
    files
}

/// The `.onnx` files of the repository's directory `dir`, sorted.
pub fn onnx_files(dir: &str) -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join(dir);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "onnx"))
        .collect();
    files.sort();
    files
}

/// A deterministic input for a tensor of `dtype` and `dims` (floats in about [-2, 2]).
pub fn input(dtype: DataType, dims: &[usize], seed: u64) -> Value {
    let mut state = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    let mut next = move || {
        state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (state >> 33) as u32
    };
    let n: usize = dims.iter().product();
    let data = match dtype {
        DataType::F32 => Data::F32((0..n).map(|_| (next() % 4001) as f32 / 1000.0 - 2.0).collect()),
        DataType::U8 => Data::U8((0..n).map(|_| next() as u8).collect()),
        DataType::S8 => Data::S8((0..n).map(|_| next() as i8).collect()),
        other => panic!("no test input of {other}"),
    };
    Value::new(dims, data).expect("dims and data agree")
}

/// What tensor `t` held in `g`'s last run on `inputs`: its buffer, or the input itself for a
/// graph input the engine reads without keeping it (`CompiledGraph::value`).
pub fn held(g: &CompiledGraph, inputs: &[Value], t: TensorId) -> Option<Value> {
    g.value(t).or_else(|| g.graph().graph().inputs().iter().position(|&i| i == t).map(|k| inputs[k].clone()))
}

fn compiled(path: &Path, level: IsaLevel, threads: usize) -> CompiledGraph {
    let model = tensorlift::onnx::load(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let partitions = model.graph.get_partitions(PartitionPolicy::Fusion);
    let options = CompileOptions { target: Target::Level(level), threads: Some(threads), ..CompileOptions::default() };
    engine::compile(model.graph, partitions, &options).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Runs `g` on a seeded input and checks every step and the outputs against the reference.
pub fn check_against_reference(g: &mut CompiledGraph, seed: u64, what: &str) {
    g.keep_values();
    let inputs: Vec<Value> = g.input_specs().iter().map(|(d, dims)| input(*d, dims, seed)).collect();
    let (outputs, _) = g.execute(&inputs).unwrap_or_else(|e| panic!("{what}: {e}"));
    for step in g.steps() {
        let ins: Vec<Value> = step
            .partition
            .inputs
            .iter()
            .map(|&t| held(g, &inputs, t).expect("an input of a step has a value"))
            .collect();
        let expected = reference::run_partition(g.graph(), &step.partition, &ins)
            .unwrap_or_else(|e| panic!("{what}: the reference of {}: {e}", step.partition.id));
        for (&t, e) in step.partition.outputs.iter().zip([&expected]) {
            let found = g.value(t).expect("an output of a step has a value");
            assert!(
                found.bits_eq(e),
                "{what}: partition {} ({}, kernel {}) differs from the reference",
                step.partition.id,
                step.partition.kind.name(),
                step.kernel.describe()
            );
        }
    }
    let graph = g.graph();
    let all = graph.get_partitions(PartitionPolicy::Fusion);
    let named: Vec<_> = graph.graph().inputs().iter().copied().zip(inputs).collect();
    let expected = reference::run(graph, &all, &named).unwrap_or_else(|e| panic!("{what}: reference: {e}"));
    assert_eq!(expected.len(), outputs.len(), "{what}");
    for ((_, e), found) in expected.iter().zip(&outputs) {
        assert!(found.bits_eq(e), "{what}: the network's output differs from the reference");
    }
}

#[test]
fn every_partition_of_every_model_matches_the_reference_at_every_level() {
    let levels = crate::skip::levels_here_for(IsaLevel::ALL, "the test models");
    for path in models() {
        for &level in &levels {
            let mut g = compiled(&path, level, 2);
            let what = format!("{} at {level}", path.file_name().unwrap().to_string_lossy());
            check_against_reference(&mut g, 7, &what);
        }
    }
}

/// The compiled convolution of a step, alone or with its fused residual add.
fn compiled_conv(k: &Kernel) -> Option<&tensorlift::layer::CompiledQuantized> {
    match k {
        Kernel::Conv(c) => Some(c),
        Kernel::Sum { conv, .. } => compiled_conv(conv),
        _ => None,
    }
}

#[test]
fn quantized_models_run_their_convolutions_on_compiled_kernels() {
    for path in models().iter().filter(|p| p.to_string_lossy().contains("_q")) {
        let g = compiled(path, IsaLevel::Scalar, 1);
        let convs = g.steps().iter().filter(|s| compiled_conv(&s.kernel).is_some()).count();
        let fused = g.steps().iter().filter(|s| s.partition.kind.name() == "QuantizedConv").count();
        assert!(fused >= 20, "{}: {fused} fused convolutions", path.display());
        assert_eq!(convs, fused, "{}: every fused convolution compiled", path.display());
        // Convolutions of one geometry share one function, whatever their quantization; one
        // with a residual add in its epilogue has its own (the add's constants are in its code).
        let mut geometries = std::collections::HashSet::new();
        let (mut compiled_functions, mut plain) = (0, 0);
        for step in g.steps() {
            if let Some(c) = compiled_conv(&step.kernel) {
                let own = c.has_sum().then_some(step.partition.id);
                geometries.insert((c.src_shape().1.to_vec(), c.dst_shape().1.to_vec(), c.ops(), c.knobs(), own));
                compiled_functions += usize::from(!c.cached());
                plain += usize::from(!c.has_sum());
            }
        }
        assert_eq!(compiled_functions, geometries.len(), "{}: one function per geometry", path.display());
        let sums = convs - plain;
        let shared = geometries.len() - sums;
        assert!(shared < plain, "{}: {shared} geometries of {plain} convolutions", path.display());
        let references: Vec<String> = g
            .steps()
            .iter()
            .filter_map(|s| match &s.kernel {
                Kernel::Reference { why } => Some(format!("{} {}: {why}", s.partition.id, s.partition.kind.name())),
                _ => None,
            })
            .collect();
        assert!(references.is_empty(), "{}: partitions on the reference: {references:?}", path.display());
    }
}

#[test]
fn an_input_of_the_wrong_shape_or_dtype_is_a_typed_error() {
    let path = models().into_iter().find(|p| p.to_string_lossy().contains("qop_u8_pc.onnx")).expect("qop model");
    let mut g = compiled(&path, IsaLevel::Scalar, 1);
    let (dtype, dims) = g.input_specs()[0].clone();
    let mut wrong = dims.clone();
    wrong[2] += 1;
    let err = g.execute(&[input(dtype, &wrong, 1)]).unwrap_err();
    assert!(matches!(err, EngineError::Input { .. }), "{err}");
    assert!(err.to_string().contains(&format!("{dims:?}")), "{err}");
    let err = g.execute(&[input(DataType::U8, &dims, 1)]).unwrap_err();
    assert!(err.to_string().contains("expected f32") && err.to_string().contains("found u8"), "{err}");
    let err = g.execute(&[]).unwrap_err();
    assert!(matches!(err, EngineError::InputCount { expected: 1, found: 0 }), "{err}");
}

/// A float input only its quantization (the first step) reads is read straight from the
/// caller's value and not kept; one a later step also reads is stored as the step quantizes it,
/// and both graphs compute what the reference computes.
#[test]
fn a_float_input_is_kept_only_where_a_later_step_reads_it() {
    use tensorlift::graph::{Graph, OpKind, QuantParams, QuantizeAttrs};
    for (threads, dims) in [(1, [1, 3, 8, 8]), (2, [1, 3, 64, 64]), (2, [1, 2, 1, 40000])] {
        for also_read in [false, true] {
            let what = format!("{dims:?} on {threads} thread(s), the input read later: {also_read}");
            let mut g = Graph::new();
            let x = g.input("x", DataType::F32, dims);
            let quantize = QuantizeAttrs { params: QuantParams::per_tensor(0.02, 3), dtype: DataType::U8 };
            let q = g.apply("q", OpKind::Quantize(quantize), &[x]).unwrap();
            let y = g.apply("dq", OpKind::Dequantize(QuantParams::per_tensor(0.02, 3)), &[q]).unwrap();
            g.mark_output(y).unwrap();
            if also_read {
                let r = g.apply("relu", OpKind::ReLU, &[x]).unwrap();
                g.mark_output(r).unwrap();
            }
            let graph = g.finalize().unwrap();
            let partitions = graph.get_partitions(PartitionPolicy::Fusion);
            let options = CompileOptions {
                target: Target::Level(IsaLevel::Scalar),
                threads: Some(threads),
                ..CompileOptions::default()
            };
            let mut compiled = engine::compile(graph, partitions, &options).unwrap();
            assert!(matches!(compiled.steps()[0].kernel, Kernel::Quantize(_)), "{what}: the quantization first");
            let input_slot = compiled.io_slots().0[0];
            assert_eq!(compiled.slots()[input_slot].bytes.holds(), also_read, "{what}: a buffer for the input");
            check_against_reference(&mut compiled, 4, &what);
            assert_eq!(compiled.value(x).is_some(), also_read, "{what}");
            if also_read {
                let inputs = [input(DataType::F32, &dims, 4)];
                assert!(compiled.value(x).unwrap().bits_eq(&inputs[0]), "{what}: the input kept as it was");
            }
        }
    }
}

/// A residual block built by hand with random weights, scales and zero points (seeded): u8 or
/// s8 `x` → [DQ → Conv 3×3 (+ i32 bias) → ReLU → Q] twice → DQ/DQ → Add → ReLU → Q → MaxPool →
/// DQ → GlobalAveragePool → Q → Reshape → DQ → MatMul(DQ(weights)) → Q → DQ.
pub fn residual_block(seed: u64, act: DataType) -> tensorlift::graph::Graph {
    use tensorlift::graph::{
        BiasAddAttrs, ConvAttrs, MatMulAttrs, MaxPoolAttrs, OpKind, QuantParams, QuantizeAttrs, ReshapeAttrs,
    };
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15).wrapping_add(1);
    let mut next = move |m: u32| {
        state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        ((state >> 33) as u32) % m
    };
    let (lo, span) = if act == DataType::U8 { (0, 256) } else { (-128, 256) };
    let zp = |next: &mut dyn FnMut(u32) -> u32| lo + next(span) as i32;
    let scale = |next: &mut dyn FnMut(u32) -> u32| (1 + next(1000)) as f32 / 4096.0;
    let dq = |s: f32, z: i32| OpKind::Dequantize(QuantParams::per_tensor(s, z));
    let q = |s: f32, z: i32| OpKind::Quantize(QuantizeAttrs { params: QuantParams::per_tensor(s, z), dtype: act });
    let c = 16;
    let mut g = tensorlift::graph::Graph::new();
    let x = g.input("x", act, [1, c, 10, 10]);
    let (sx, zx) = (scale(&mut next), zp(&mut next));
    let mut h = x;
    let (mut sh, mut zh) = (sx, zx);
    for layer in 0..2 {
        let xf = g.apply(&format!("dq{layer}"), dq(sh, zh), &[h]).unwrap();
        let w: Vec<i8> = (0..c * c * 9).map(|_| (next(255) as i32 - 127) as i8).collect();
        let ws: Vec<f32> = (0..c).map(|_| scale(&mut next) / 8.0).collect();
        let w = g.constant(&format!("w{layer}"), Value::s8(&[c, c, 3, 3], w).unwrap());
        let wf =
            g.apply(&format!("dqw{layer}"), OpKind::Dequantize(QuantParams::per_channel(0, ws.clone())), &[w]).unwrap();
        let y = g.apply(&format!("conv{layer}"), OpKind::Convolution(ConvAttrs::square(1, 1)), &[xf, wf]).unwrap();
        let bias: Vec<i32> = (0..c).map(|_| next(20001) as i32 - 10000).collect();
        let b = g.constant(&format!("b{layer}"), Value::s32(&[c], bias).unwrap());
        let bscales: Vec<f32> = ws.iter().map(|w| sh * w).collect();
        let bf =
            g.apply(&format!("dqb{layer}"), OpKind::Dequantize(QuantParams::per_channel(0, bscales)), &[b]).unwrap();
        let y = g.apply(&format!("bias{layer}"), OpKind::BiasAdd(BiasAddAttrs { axis: 1 }), &[y, bf]).unwrap();
        let r = g.apply(&format!("relu{layer}"), OpKind::ReLU, &[y]).unwrap();
        (sh, zh) = (scale(&mut next) * 4.0, zp(&mut next));
        h = g.apply(&format!("q{layer}"), q(sh, zh), &[r]).unwrap();
    }
    let af = g.apply("dq_a", dq(sh, zh), &[h]).unwrap();
    let bf = g.apply("dq_b", dq(sx, zx), &[x]).unwrap();
    let sum = g.apply("add", OpKind::Add, &[af, bf]).unwrap();
    let r = g.apply("relu_add", OpKind::ReLU, &[sum]).unwrap();
    let (sa, za) = (scale(&mut next) * 4.0, zp(&mut next));
    let added = g.apply("q_add", q(sa, za), &[r]).unwrap();
    let pooled = g.apply("pool", OpKind::MaxPool(MaxPoolAttrs::square(3, 2, 1)), &[added]).unwrap();
    let pf = g.apply("dq_pool", dq(sa, za), &[pooled]).unwrap();
    let gap = g.apply("gap", OpKind::GlobalAveragePool, &[pf]).unwrap();
    let (sg, zg) = (scale(&mut next), zp(&mut next));
    let gq = g.apply("q_gap", q(sg, zg), &[gap]).unwrap();
    let flat = g.apply("flat", OpKind::StaticReshape(ReshapeAttrs { shape: vec![1, -1] }), &[gq]).unwrap();
    let ff = g.apply("dq_flat", dq(sg, zg), &[flat]).unwrap();
    let n = 10;
    let fw: Vec<i8> = (0..c * n).map(|_| (next(255) as i32 - 127) as i8).collect();
    let fw = g.constant("fc_w", Value::s8(&[c, n], fw).unwrap());
    let fwf =
        g.apply("dq_fc_w", OpKind::Dequantize(QuantParams::per_tensor(scale(&mut next) / 8.0, 0)), &[fw]).unwrap();
    let logits = g.apply("fc", OpKind::MatMul(MatMulAttrs::default()), &[ff, fwf]).unwrap();
    let (sl, zl) = (scale(&mut next) * 4.0, zp(&mut next));
    let lq = g.apply("q_fc", q(sl, zl), &[logits]).unwrap();
    let out = g.apply("dq_out", dq(sl, zl), &[lq]).unwrap();
    g.mark_output(out).unwrap();
    g
}

#[test]
fn a_hand_built_residual_block_matches_the_reference_at_every_level() {
    let levels = crate::skip::levels_here_for(IsaLevel::ALL, "the hand-built residual block");
    for seed in 0..6 {
        for act in [DataType::U8, DataType::S8] {
            for &level in &levels {
                let graph = residual_block(seed, act).finalize().unwrap();
                // The add fuses into the second convolution; without the sum it is its own.
                let unfused = graph.get_partitions(PartitionPolicy::FusionWithoutSum);
                let kinds: Vec<&str> = unfused.iter().map(|p| p.kind.name()).collect();
                for kind in
                    ["QuantizedConv", "QuantizedAdd", "QuantizedMaxPool", "QuantizedGlobalAvgPool", "QuantizedMatMul"]
                {
                    assert!(kinds.contains(&kind), "seed {seed}: no {kind} in {kinds:?}");
                }
                let partitions = graph.get_partitions(PartitionPolicy::Fusion);
                assert_eq!(partitions.len() + 1, unfused.len(), "seed {seed}: the add is fused");
                let options =
                    CompileOptions { target: Target::Level(level), threads: Some(2), ..CompileOptions::default() };
                let mut g = engine::compile(graph, partitions, &options).unwrap();
                let native = g.steps().iter().filter(|s| !matches!(s.kernel, Kernel::Reference { .. })).count();
                assert_eq!(native, g.steps().len(), "seed {seed}, {act}: every partition on a kernel of the engine");
                check_against_reference(&mut g, seed, &format!("residual block {seed} {act} at {level}"));
            }
        }
    }
}

/// The native kernels split their loops across the engine's pool at more than one thread: every
/// tensor the engine keeps holds the same bits at one, two and three threads.
#[test]
fn every_tensor_is_the_same_at_every_thread_count() {
    let levels = crate::skip::levels_here_for(IsaLevel::ALL, "the test models");
    let level = *levels.last().expect("every CPU has the scalar level");
    for path in models().iter().filter(|p| p.to_string_lossy().contains("_q")) {
        let mut runs = Vec::new();
        for threads in [1, 2, 3] {
            let mut g = compiled(path, level, threads);
            g.keep_values();
            let inputs: Vec<Value> = g.input_specs().iter().map(|(d, dims)| input(*d, dims, 5)).collect();
            let (outputs, _) = g.execute(&inputs).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            let tensors: Vec<Value> = g
                .steps()
                .iter()
                .flat_map(|s| s.partition.inputs.iter().chain(&s.partition.outputs))
                .map(|&t| held(&g, &inputs, t).expect("a step's tensor has a value"))
                .collect();
            runs.push((threads, outputs, tensors));
        }
        let (_, outputs, tensors) = &runs[0];
        for (threads, o, t) in &runs[1..] {
            assert!(
                o.len() == outputs.len() && o.iter().zip(outputs).all(|(a, b)| a.bits_eq(b)),
                "{}: outputs at {threads} threads",
                path.display()
            );
            let differs = t.iter().zip(tensors).position(|(a, b)| !a.bits_eq(b));
            assert_eq!(differs, None, "{}: a tensor at {threads} threads", path.display());
        }
    }
}

/// Compiles `graph` under `policy` at `level` on two threads and runs it on the seeded input.
fn outputs_under(
    graph: &tensorlift::graph::FinalizedGraph,
    policy: PartitionPolicy,
    level: IsaLevel,
) -> (Vec<Value>, usize) {
    let options = CompileOptions { target: Target::Level(level), threads: Some(2), ..CompileOptions::default() };
    let partitions = graph.get_partitions(policy);
    let mut g = engine::compile(graph.clone(), partitions, &options).unwrap();
    // The residual add in the convolution's requantization, or (auto-scheduled) after it.
    let sums = g
        .steps()
        .iter()
        .filter(|s| match &s.kernel {
            Kernel::Conv(c) => c.has_sum(),
            Kernel::Sum { .. } => true,
            _ => false,
        })
        .count();
    let inputs: Vec<Value> = g.input_specs().iter().map(|(d, dims)| input(*d, dims, 11)).collect();
    (g.execute(&inputs).unwrap().0, sums)
}

#[test]
fn a_fused_residual_add_equals_the_unfused_partitions_at_every_level() {
    let levels = crate::skip::levels_here_for(IsaLevel::ALL, "the residual sum");
    let mut graphs: Vec<(String, tensorlift::graph::FinalizedGraph, bool)> = Vec::new();
    for seed in 0..4 {
        for act in [DataType::U8, DataType::S8] {
            graphs.push((format!("residual block {seed} {act}"), residual_block(seed, act).finalize().unwrap(), true));
        }
    }
    for path in models() {
        let model = tensorlift::onnx::load(&path).unwrap();
        graphs.push((path.file_name().unwrap().to_string_lossy().into_owned(), model.graph, false));
    }
    let mut fused_somewhere = 0;
    for (what, graph, must_fuse) in &graphs {
        for &level in &levels {
            let (fused, sums) = outputs_under(graph, PartitionPolicy::Fusion, level);
            let (unfused, none) = outputs_under(graph, PartitionPolicy::FusionWithoutSum, level);
            assert_eq!(none, 0, "{what} at {level}");
            assert!(!must_fuse || sums == 1, "{what} at {level}: {sums} fused sums");
            fused_somewhere += sums;
            assert_eq!(fused.len(), unfused.len());
            for (f, u) in fused.iter().zip(&unfused) {
                assert!(f.bits_eq(u), "{what} at {level}: the fused sum differs from the unfused add");
            }
        }
    }
    assert!(fused_somewhere > 0);
}

/// Tensors whose lifetimes do not overlap share buffers by default: every model computes the
/// same outputs as with a buffer per tensor, run after run (a shared buffer passes from tensor
/// to tensor and back to the first at the next run), and the quantized networks do share.
#[test]
fn shared_buffers_compute_what_a_buffer_per_tensor_computes() {
    let levels = crate::skip::levels_here_for(IsaLevel::ALL, "shared buffers");
    let best = *levels.last().expect("the scalar level runs everywhere");
    for path in models() {
        for (level, threads) in [(IsaLevel::Scalar, 1), (best, 2)] {
            let what = format!("{} at {level}, {threads} thread(s)", path.file_name().unwrap().to_string_lossy());
            let mut shared = compiled(&path, level, threads);
            let mut own = compiled(&path, level, threads);
            own.keep_values();
            let owned: usize = own.slots().iter().map(|s| s.bytes.len()).sum();
            let tensors: Vec<TensorId> = shared.steps().iter().flat_map(|s| s.partition.outputs.clone()).collect();
            for seed in [1, 2] {
                let inputs: Vec<Value> = shared.input_specs().iter().map(|(d, dims)| input(*d, dims, seed)).collect();
                let (a, _) = shared.execute(&inputs).unwrap_or_else(|e| panic!("{what}: {e}"));
                let (b, _) = own.execute(&inputs).unwrap_or_else(|e| panic!("{what}: {e}"));
                assert_eq!(a.len(), b.len(), "{what}");
                let (warm, _) = shared.execute_warm(&inputs).unwrap_or_else(|e| panic!("{what}: {e}"));
                for ((x, y), w) in a.iter().zip(&b).zip(&warm) {
                    assert!(x.bits_eq(y) && w.bits_eq(y), "{what}, seed {seed}: the outputs differ");
                }
                // What a shared run still holds is what the run with a buffer per tensor holds.
                for &t in &tensors {
                    if let Some(v) = shared.value(t) {
                        assert!(v.bits_eq(&own.value(t).expect("kept")), "{what}: tensor {t} differs");
                    }
                }
            }
            let gone = tensors.iter().filter(|&&t| shared.value(t).is_none()).count();
            if path.to_string_lossy().contains("_q") {
                assert!(gone > 0, "{what}: no tensor gave its buffer to a later one");
                let held: usize =
                    shared.slots().iter().filter(|s| s.bytes.holds()).map(|s| s.bytes.len()).sum::<usize>();
                assert!(held < owned, "{what}: {held} bytes held against {owned} with a buffer each");
            }
        }
    }
}

#[test]
fn warm_steps_compute_what_the_plain_run_computes() {
    // The best level here and the scalar one; one thread (the first step then quantizes the
    // input as it stores it) and two (the native loops on the pool).
    let levels = crate::skip::levels_here_for(IsaLevel::ALL, "warm steps");
    let best = *levels.last().expect("the scalar level runs everywhere");
    for path in models().iter().filter(|p| p.to_string_lossy().contains("_q")) {
        for (level, threads) in [(IsaLevel::Scalar, 1), (best, 1), (best, 2)] {
            let what = format!("{} at {level}, {threads} thread(s)", path.file_name().unwrap().to_string_lossy());
            let mut g = compiled(path, level, threads);
            g.keep_values();
            let inputs: Vec<Value> = g.input_specs().iter().map(|(d, dims)| input(*d, dims, 3)).collect();
            let tensors: Vec<_> = g
                .steps()
                .iter()
                .flat_map(|s| s.partition.outputs.iter().map(move |&t| (s.partition.id.to_string(), t)))
                .collect();
            let (plain, plain_times) = g.execute(&inputs).unwrap_or_else(|e| panic!("{what}: {e}"));
            let plain_values: Vec<Value> = tensors.iter().map(|(_, t)| g.value(*t).expect("a step's output")).collect();
            let (warm, warm_times) = g.execute_warm(&inputs).unwrap_or_else(|e| panic!("{what}: {e}"));
            assert_eq!(plain_times.len(), g.steps().len(), "{what}");
            assert_eq!(warm_times.len(), g.steps().len(), "{what}: one time per step");
            assert_eq!(plain.len(), warm.len(), "{what}");
            for (p, w) in plain.iter().zip(&warm) {
                assert!(p.bits_eq(w), "{what}: the outputs differ");
            }
            for ((id, t), p) in tensors.iter().zip(&plain_values) {
                let w = g.value(*t).expect("a step's output");
                assert!(p.bits_eq(&w), "{what}: partition {id} differs");
            }
        }
    }
}

/// The weights the engine faults the weight arena in for (while it plans the layers) are what
/// the layers then pack (plus their panels' and rows' padding): none missed, as when they were
/// counted from the partitions' constant inputs, which the importers' graphs do not have.
#[test]
fn the_weight_arena_is_faulted_for_the_weights_the_layers_pack() {
    let mut checked = 0;
    for path in models() {
        let model = tensorlift::onnx::load(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let partitions = model.graph.get_partitions(PartitionPolicy::Fusion);
        let g = engine::compile(model.graph, partitions, &CompileOptions::default()).unwrap();
        let (faulted, packed) = g.arena_bytes();
        if packed > 0 {
            assert!(
                faulted > 0 && faulted <= packed && packed <= 4 * faulted,
                "{}: {faulted} {packed}",
                path.display()
            );
            checked += 1;
        }
    }
    assert!(checked >= 2, "models with packed layers: {checked}");
}
