//! ONNX import: every model in `tests/models/` imports and finalizes with the graph ops its
//! nodes map to (counted from the decoded protobuf, independently of the importer); malformed
//! files are typed errors; a fuzz test mutates and truncates a real model and asserts `import`
//! returns, never panics (2,000 cases; `TENSORLIFT_FUZZ_CASES=100000` for the long run).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Instant;

use prost::Message;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tensorlift::graph::{Dim, OpKind, Shape};
use tensorlift::onnx::proto::attribute_proto::AttributeType;
use tensorlift::onnx::proto::{AttributeProto, ModelProto, NodeProto};
use tensorlift::onnx::{self, OnnxError};

fn models_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests").join("models")
}

/// Every `.onnx` file of `tests/models/`, sorted.
fn model_files() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(models_dir())
        .expect("tests/models exists")
        .map(|e| e.expect("a directory entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "onnx"))
        .collect();
    files.sort();
    files
}

const TINY: &str = "resnet18_w1_s8_c10_qop_u8_pc.onnx";

fn tiny_bytes() -> Vec<u8> {
    std::fs::read(models_dir().join(TINY)).expect("the tiny model is committed")
}

fn tiny() -> ModelProto {
    ModelProto::decode(tiny_bytes().as_slice()).expect("the tiny model decodes")
}

/// The graph ops a model's nodes should become, counted from the protobuf alone: the mapping
/// of docs/onnx.md applied to the node counts (a BatchNormalization after a Conv disappears).
fn expected_ops(model: &ModelProto) -> BTreeMap<&'static str, usize> {
    let mut e = BTreeMap::new();
    let mut add = |k: &'static str, n: usize| *e.entry(k).or_insert(0) += n;
    for node in &model.graph.as_ref().expect("a graph").node {
        let has = |i: usize| node.input.get(i).is_some_and(|s| !s.is_empty());
        match node.op_type() {
            "Conv" => add("Convolution", 1),
            "Relu" => add("ReLU", 1),
            "Add" => add("Add", 1),
            "MaxPool" => add("MaxPool", 1),
            "GlobalAveragePool" => add("GlobalAveragePool", 1),
            "Flatten" | "Reshape" => add("StaticReshape", 1),
            "Gemm" => {
                add("MatMul", 1);
                add("BiasAdd", usize::from(has(2)));
            }
            "DequantizeLinear" => add("Dequantize", 1),
            "QuantizeLinear" => add("Quantize", 1),
            "BatchNormalization" => {}
            "QLinearConv" => {
                add("Dequantize", 2 + usize::from(has(8)));
                add("Convolution", 1);
                add("Quantize", 1);
            }
            "QGemm" => {
                add("Dequantize", 2 + usize::from(has(6)));
                add("MatMul", 1);
                add("BiasAdd", usize::from(has(6)));
                add("Quantize", usize::from(has(7)));
            }
            "QLinearAdd" => {
                add("Dequantize", 2);
                add("Add", 1);
                add("Quantize", 1);
            }
            "QLinearGlobalAveragePool" => {
                add("Dequantize", 1);
                add("GlobalAveragePool", 1);
                add("Quantize", 1);
            }
            other => panic!("the test models have no {other} node"),
        }
    }
    e
}

#[test]
fn every_model_imports_with_the_ops_its_nodes_map_to() {
    let files = model_files();
    assert!(files.len() >= 8, "tests/models holds the committed set, found {files:?}");
    for path in files {
        let bytes = std::fs::read(&path).expect("a model file");
        let proto = onnx::read(&bytes).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let model = onnx::load(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let mut found: BTreeMap<&'static str, usize> = BTreeMap::new();
        for &id in model.graph.order() {
            *found.entry(model.graph.op(id).expect("an op of the graph").kind.name()).or_insert(0) += 1;
        }
        assert_eq!(found, expected_ops(&proto), "{}", path.display());
        let graph = proto.graph.as_ref().expect("a graph");
        let initializers: Vec<&str> = graph.initializer.iter().map(|t| t.name()).collect();
        let inputs: Vec<&str> = graph.input.iter().map(|v| v.name()).filter(|n| !initializers.contains(n)).collect();
        let outputs: Vec<&str> = graph.output.iter().map(|v| v.name()).collect();
        assert_eq!(model.inputs.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(), inputs, "{}", path.display());
        assert_eq!(model.outputs.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(), outputs, "{}", path.display());
        // The inferred output shape is the one the file declares (the logits, [1, classes]).
        for (v, (_, t)) in graph.output.iter().zip(&model.outputs) {
            let declared = onnx::read::declared_dims(v).expect("checked").expect("declared");
            let inferred = &model.graph.tensor(*t).expect("an output tensor").shape;
            let declared = Shape::Dims(declared.into_iter().map(|d| d.map_or(Dim::Unknown, Dim::Known)).collect());
            assert!(inferred.fits(&declared), "{}: output {inferred} vs declared {declared}", path.display());
            assert!(inferred.concrete().is_some(), "{}: output {inferred} not fully inferred", path.display());
        }
        // Per-channel weights are dequantized along the output channels; per-tensor ones are not.
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default().to_string();
        let per_channel = model.graph.order().iter().any(|&id| {
            matches!(&model.graph.op(id).expect("an op").kind, OpKind::Dequantize(p) if p.axis == Some(0) && p.zero_points.iter().all(|&z| z == 0) && p.scales.len() > 1)
        });
        if name.contains("_pc") && !name.contains("_w1_") {
            assert!(per_channel, "{name}: no per-channel Dequantize");
        }
        if name.contains("_pt") {
            let weights_per_channel = model.graph.order().iter().any(|&id| {
                let op = model.graph.op(id).expect("an op");
                matches!(&op.kind, OpKind::Dequantize(p) if p.axis.is_some()) && op.name.ends_with("dq_w")
            });
            assert!(!weights_per_channel, "{name}: per-tensor weights dequantized per channel");
        }
    }
}

#[test]
fn batch_normalization_is_folded_into_the_convolution() {
    let path = models_dir().join("resnet18_w2_s32_float.onnx");
    let proto = onnx::read(&std::fs::read(&path).expect("the float model")).expect("reads");
    let graph = proto.graph.as_ref().expect("a graph");
    let bns = graph.node.iter().filter(|n| n.op_type() == "BatchNormalization").count();
    assert!(bns > 0, "the float test model keeps its BatchNormalization nodes");
    let model = onnx::load(&path).expect("imports");
    // Every convolution has a bias: the folded one (the file's Conv nodes have none).
    let convs: Vec<_> = model
        .graph
        .order()
        .iter()
        .map(|&id| model.graph.op(id).expect("an op"))
        .filter(|op| matches!(op.kind, OpKind::Convolution(_)))
        .collect();
    assert_eq!(convs.len(), bns);
    assert!(convs.iter().all(|op| op.inputs.len() == 3));
    // The first folded weight is W·γ/sqrt(σ²+ε), recomputed here from the file.
    let conv = graph.node.iter().find(|n| n.op_type() == "Conv").expect("a Conv");
    let bn = graph.node.iter().find(|n| n.input.first() == conv.output.first()).expect("its BatchNormalization");
    let init = |name: &str| -> Vec<f32> {
        let t = graph.initializer.iter().find(|t| t.name() == name).expect("an initializer");
        match &t.raw_data {
            Some(r) => r.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect(),
            None => t.float_data.clone(),
        }
    };
    let eps = bn.attribute.iter().find(|a| a.name() == "epsilon").map_or(1e-5, |a| a.f());
    let (w, gamma, var) = (init(&conv.input[1]), init(&bn.input[1]), init(&bn.input[4]));
    let expected = w[0] * (gamma[0] / (var[0] + eps).sqrt());
    let folded = model.graph.graph().constant_value(convs[0].inputs[1]).expect("constant weights");
    let tensorlift::graph::Data::F32(v) = folded.data() else { panic!("f32 weights") };
    assert_eq!(v[0].to_bits(), expected.to_bits());
}

/// The first node of `op_type` in `model`.
fn node_mut<'a>(model: &'a mut ModelProto, op_type: &str) -> (usize, &'a mut NodeProto) {
    let graph = model.graph.as_mut().expect("a graph");
    let i = graph.node.iter().position(|n| n.op_type() == op_type).expect("such a node");
    (i, &mut graph.node[i])
}

#[track_caller]
fn import_edited(edit: impl FnOnce(&mut ModelProto)) -> OnnxError {
    let mut model = tiny();
    edit(&mut model);
    match onnx::import_proto(&model) {
        Ok(m) => panic!("the edited model imports, {} ops", m.graph.order().len()),
        Err(e) => e,
    }
}

#[test]
fn malformed_models_are_typed_errors() {
    // An unknown op, named with its node.
    let err = import_edited(|m| {
        let (_, n) = node_mut(m, "MaxPool");
        n.op_type = Some("MaxPoolish".into());
    });
    assert!(
        matches!(&err, OnnxError::UnknownOp { node, op_type, domain } if op_type == "MaxPoolish" && domain == "ai.onnx" && node.op_type == "MaxPoolish"),
        "{err}"
    );
    let err = import_edited(|m| node_mut(m, "QLinearAdd").1.domain = Some("com.example".into()));
    assert!(matches!(&err, OnnxError::UnknownOp { domain, .. } if domain == "com.example"), "{err}");

    // A missing initializer.
    let mut weight = String::new();
    let err = import_edited(|m| {
        weight = node_mut(m, "QLinearConv").1.input[3].clone();
        m.graph.as_mut().expect("a graph").initializer.retain(|t| t.name() != weight);
    });
    assert!(
        matches!(&err, OnnxError::MissingInput { node, input } if *input == weight && node.op_type == "QLinearConv"),
        "{err}"
    );

    // Negative and huge dimensions of an initializer and of the input.
    let err = import_edited(|m| m.graph.as_mut().expect("a graph").initializer[0].dims = vec![-1]);
    assert!(matches!(err, OnnxError::NegativeDim { .. }), "{err}");
    let err = import_edited(|m| m.graph.as_mut().expect("a graph").initializer[0].dims = vec![1 << 20, 1 << 20]);
    assert!(matches!(err, OnnxError::TooLarge { .. }), "{err}");
    let err = import_edited(|m| {
        use tensorlift::onnx::proto::tensor_shape_proto::dimension::Value;
        use tensorlift::onnx::proto::type_proto::Value as Type;
        let input = &mut m.graph.as_mut().expect("a graph").input[0];
        let Some(Type::TensorType(t)) = input.r#type.as_mut().and_then(|t| t.value.as_mut()) else {
            panic!("a tensor input")
        };
        t.shape.as_mut().expect("a shape").dim[2].value = Some(Value::DimValue(-8));
    });
    assert!(matches!(&err, OnnxError::NegativeDim { tensor, .. } if tensor == "input"), "{err}");

    // Raw data one byte short.
    let err = import_edited(|m| {
        let t =
            m.graph.as_mut().expect("a graph").initializer.iter_mut().find(|t| t.dims.len() == 4).expect("a weight");
        let raw = t.raw_data.as_mut().expect("raw data");
        raw.truncate(raw.len() - 1);
    });
    assert!(matches!(err, OnnxError::DataLength { field: "raw_data", .. }), "{err}");

    // Unsupported attribute values, named with the node.
    let err = import_edited(|m| {
        let n = node_mut(m, "QLinearConv").1;
        n.attribute.retain(|a| a.name() != "auto_pad");
        n.attribute.push(AttributeProto {
            name: Some("auto_pad".into()),
            r#type: Some(AttributeType::String as i32),
            s: Some(b"SAME_UPPER".to_vec().into()),
            ..Default::default()
        });
    });
    assert!(
        matches!(&err, OnnxError::Attribute { attribute, node, .. } if attribute == "auto_pad" && node.op_type == "QLinearConv"),
        "{err}"
    );
    let err = import_edited(|m| {
        let a = node_mut(m, "QGemm").1.attribute.iter_mut().find(|a| a.name() == "alpha").expect("alpha");
        a.f = Some(0.5);
    });
    assert!(matches!(&err, OnnxError::Attribute { attribute, .. } if attribute == "alpha"), "{err}");
    let err = import_edited(|m| {
        let a = node_mut(m, "QLinearConv").1.attribute.iter_mut().find(|a| a.name() == "strides").expect("strides");
        a.ints = vec![1, 1, 1];
    });
    assert!(matches!(&err, OnnxError::Attribute { attribute, .. } if attribute == "strides"), "{err}");
    // A value the graph rejects (a zero stride) comes back naming the node.
    let err = import_edited(|m| {
        let a = node_mut(m, "QLinearConv").1.attribute.iter_mut().find(|a| a.name() == "strides").expect("strides");
        a.ints = vec![0, 1];
    });
    assert!(matches!(&err, OnnxError::Graph { node, .. } if node.op_type == "QLinearConv"), "{err}");

    // A zero point whose type is not the quantized input's.
    let err = import_edited(|m| {
        let (_, n) = node_mut(m, "QLinearConv");
        let zp = n.input[5].clone();
        let t =
            m.graph.as_mut().expect("a graph").initializer.iter_mut().find(|t| t.name() == zp).expect("w_zero_point");
        t.data_type = Some(2); // u8, the weights are s8
    });
    assert!(matches!(&err, OnnxError::DType { node, .. } if node.op_type == "QLinearConv"), "{err}");

    // Opsets outside 13–21.
    for version in [12, 22] {
        let err = import_edited(|m| {
            let o = m.opset_import.iter_mut().find(|o| o.domain().is_empty()).expect("the default opset");
            o.version = Some(version);
        });
        assert!(matches!(&err, OnnxError::UnsupportedOpset { found, .. } if *found == version.to_string()), "{err}");
    }

    // Truncated and malformed bytes.
    let bytes = tiny_bytes();
    let err = onnx::import(&bytes[..bytes.len() / 2]).expect_err("truncated");
    assert!(matches!(err, OnnxError::Decode(_)), "{err}");
    let err = onnx::import(&[0xff; 16]).expect_err("garbage");
    assert!(matches!(err, OnnxError::Decode(_)), "{err}");
    let err = onnx::import(&[]).expect_err("empty");
    assert!(matches!(err, OnnxError::NoGraph), "{err}");
}

/// One mutation of `bytes`: bit flips, byte replacements, an insertion, a deletion, or a
/// truncation.
fn mutate(rng: &mut StdRng, bytes: &[u8]) -> Vec<u8> {
    let mut b = bytes.to_vec();
    let kind = rng.random_range(0..5);
    let at = |rng: &mut StdRng, len: usize| rng.random_range(0..len.max(1));
    match kind {
        0 => {
            for _ in 0..rng.random_range(1..=8) {
                let i = at(rng, b.len());
                b[i] ^= 1 << rng.random_range(0..8);
            }
        }
        1 => {
            for _ in 0..rng.random_range(1..=4) {
                let i = at(rng, b.len());
                b[i] = rng.random();
            }
        }
        2 => {
            let i = at(rng, b.len());
            let n = rng.random_range(1..=16);
            let ins: Vec<u8> = (0..n).map(|_| rng.random()).collect();
            b.splice(i..i, ins);
        }
        3 => {
            let i = at(rng, b.len());
            let n = rng.random_range(1..=16).min(b.len() - i);
            b.drain(i..i + n);
        }
        _ => b.truncate(at(rng, b.len())),
    }
    b
}

/// Mutates the tiny model `cases` times (fixed seed); every import must return. Returns the
/// number of imports that succeeded.
fn fuzz(cases: usize) -> usize {
    let bytes = tiny_bytes();
    let mut rng = StdRng::seed_from_u64(0x0022_0ddc);
    let mut ok = 0;
    for case in 0..cases {
        let mutated = mutate(&mut rng, &bytes);
        match std::panic::catch_unwind(|| onnx::import(&mutated).is_ok()) {
            Ok(true) => ok += 1,
            Ok(false) => {}
            Err(_) => panic!("case {case}: import panicked on {} mutated bytes", mutated.len()),
        }
    }
    ok
}

/// The fuzz test's case count: 2,000, or `TENSORLIFT_FUZZ_CASES`.
fn fuzz_cases() -> usize {
    std::env::var("TENSORLIFT_FUZZ_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(2_000)
}

#[test]
fn fuzzed_models_are_errors_or_graphs_never_panics() {
    let cases = fuzz_cases();
    let start = Instant::now();
    let ok = fuzz(cases);
    println!("{cases} mutated models: {ok} imported, the rest typed errors, no panic, in {:.1?}", start.elapsed());
    // Some mutations keep the file valid (a changed weight byte), most do not.
    assert!(ok > 0 && ok < cases, "{ok} of {cases} mutated models imported");
}

#[test]
fn every_truncation_of_the_tiny_model_is_an_error() {
    let bytes = tiny_bytes();
    let step = (bytes.len() / 500).max(1);
    for len in (0..bytes.len()).step_by(step) {
        assert!(onnx::import(&bytes[..len]).is_err(), "{len} bytes of {} imported", bytes.len());
    }
}

#[test]
fn quantized_models_fuse_into_quantized_partitions() {
    use tensorlift::graph::{PartitionKind, PartitionPolicy};
    for path in model_files().into_iter().filter(|p| !p.to_string_lossy().contains("float")) {
        let model = onnx::load(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let count = |f: fn(&OpKind) -> bool| {
            model.graph.order().iter().filter(|&&id| f(&model.graph.op(id).expect("an op").kind)).count()
        };
        let (convs, adds, matmuls) = (
            count(|k| matches!(k, OpKind::Convolution(_))),
            count(|k| matches!(k, OpKind::Add)),
            count(|k| matches!(k, OpKind::MatMul(_))),
        );
        let partitions = model.graph.get_partitions(PartitionPolicy::Fusion);
        let mut kinds: BTreeMap<&'static str, usize> = BTreeMap::new();
        for p in &partitions {
            *kinds.entry(p.kind.name()).or_insert(0) += 1;
        }
        let unsupported: Vec<String> = partitions
            .iter()
            .filter_map(|p| match &p.kind {
                PartitionKind::Unsupported { op, reason } => Some(format!("{}: {reason}", op.name())),
                _ => None,
            })
            .collect();
        let name = path.display();
        assert!(unsupported.is_empty(), "{name}: {unsupported:?}");
        assert_eq!(kinds.get("QuantizedConv").copied().unwrap_or(0), convs, "{name}: {kinds:?}");
        // Each Add is a QuantizedAdd, or fused into a convolution as its residual.
        let sums = partitions
            .iter()
            .filter(|p| matches!(&p.kind, PartitionKind::QuantizedConv(c) if c.residual.is_some()))
            .count();
        assert_eq!(kinds.get("QuantizedAdd").copied().unwrap_or(0) + sums, adds, "{name}: {kinds:?}");
        let unfused = model.graph.get_partitions(PartitionPolicy::FusionWithoutSum);
        let unfused_adds = unfused.iter().filter(|p| matches!(p.kind, PartitionKind::QuantizedAdd(_))).count();
        assert_eq!(unfused_adds, adds, "{name}: without the sum");
        assert_eq!(kinds.get("QuantizedMatMul").copied().unwrap_or(0), matmuls, "{name}: {kinds:?}");
        assert_eq!(kinds.get("QuantizedGlobalAvgPool").copied().unwrap_or(0), 1, "{name}: {kinds:?}");
    }
}

#[test]
fn opsets_13_to_21_import_and_typed_fields_read_as_raw_data() {
    for version in [13, 21] {
        let mut m = tiny();
        m.opset_import.iter_mut().filter(|o| o.domain().is_empty()).for_each(|o| o.version = Some(version));
        let model = onnx::import_proto(&m).unwrap_or_else(|e| panic!("opset {version}: {e}"));
        assert_eq!(model.opset, version);
    }
    // The same initializers stored in the typed fields instead of raw_data.
    let raw = onnx::import(&tiny_bytes()).expect("the tiny model imports");
    let mut m = tiny();
    let mut moved = 0;
    for t in &mut m.graph.as_mut().expect("a graph").initializer {
        let Some(bytes) = t.raw_data.take() else { continue };
        match t.data_type() {
            1 => t.float_data = bytes.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect(),
            6 => t.int32_data = bytes.chunks_exact(4).map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect(),
            2 => t.int32_data = bytes.iter().map(|&b| i32::from(b)).collect(),
            3 => t.int32_data = bytes.iter().map(|&b| i32::from(b as i8)).collect(),
            other => panic!("the tiny model has no initializer of type {other}"),
        }
        moved += 1;
    }
    assert!(moved > 0, "the tiny model stores some initializers as raw data");
    let typed = onnx::import_proto(&m).expect("typed fields import");
    let constants = |model: &onnx::Model| -> Vec<tensorlift::graph::Value> {
        let g = model.graph.graph();
        g.tensors().filter_map(|(t, _)| g.constant_value(t).map(|v| (**v).clone())).collect()
    };
    let (a, b) = (constants(&raw), constants(&typed));
    assert_eq!(a.len(), b.len());
    assert!(a.iter().zip(&b).all(|(x, y)| x.bits_eq(y)), "typed fields decode to other values than raw data");
    // An 8-bit value out of range in int32_data is a typed error.
    let t = m.graph.as_mut().expect("a graph").initializer.iter_mut().find(|t| t.data_type() == 3).expect("s8 weights");
    t.int32_data[0] = 200;
    let err = onnx::import_proto(&m).expect_err("200 is not an i8");
    assert!(matches!(err, OnnxError::DataRange { value: 200, .. }), "{err}");
}

/// A node for hand-built models.
fn node(op: &str, domain: &str, inputs: &[&str], output: &str, attrs: Vec<AttributeProto>) -> NodeProto {
    NodeProto {
        op_type: Some(op.into()),
        domain: Some(domain.into()),
        name: Some(output.into()),
        input: inputs.iter().map(|s| s.to_string()).collect(),
        output: vec![output.into()],
        attribute: attrs,
        ..Default::default()
    }
}

fn ints(name: &str, v: &[i64]) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        r#type: Some(AttributeType::Ints as i32),
        ints: v.to_vec(),
        ..Default::default()
    }
}

fn tensor(name: &str, dtype: i32, dims: &[i64], raw: Vec<u8>) -> tensorlift::onnx::proto::TensorProto {
    tensorlift::onnx::proto::TensorProto {
        name: Some(name.into()),
        data_type: Some(dtype),
        dims: dims.to_vec(),
        raw_data: Some(raw.into()),
        ..Default::default()
    }
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// A model of one f32 input `x` of `dims`, `nodes`, `initializers` and output `y`.
fn hand_model(
    dims: &[i64],
    nodes: Vec<NodeProto>,
    initializers: Vec<tensorlift::onnx::proto::TensorProto>,
) -> ModelProto {
    use tensorlift::onnx::proto::tensor_shape_proto::{Dimension, dimension};
    use tensorlift::onnx::proto::{
        GraphProto, OperatorSetIdProto, TensorShapeProto, TypeProto, ValueInfoProto, type_proto,
    };
    let value = |name: &str, dims: Option<&[i64]>| ValueInfoProto {
        name: Some(name.into()),
        r#type: Some(TypeProto {
            value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                elem_type: Some(1),
                shape: dims.map(|d| TensorShapeProto {
                    dim: d
                        .iter()
                        .map(|&n| Dimension { value: Some(dimension::Value::DimValue(n)), ..Default::default() })
                        .collect(),
                }),
            })),
            ..Default::default()
        }),
        ..Default::default()
    };
    ModelProto {
        ir_version: Some(8),
        opset_import: vec![
            OperatorSetIdProto { domain: Some(String::new()), version: Some(19) },
            OperatorSetIdProto { domain: Some("com.microsoft".into()), version: Some(1) },
        ],
        graph: Some(GraphProto {
            node: nodes,
            initializer: initializers,
            input: vec![value("x", Some(dims))],
            output: vec![value("y", None)],
            ..Default::default()
        }),
        ..Default::default()
    }
}

#[test]
fn hand_built_float_and_qlinear_matmul_models_import() {
    // Clip (constant bounds) → AveragePool → Reshape (constant shape) → MatMul → Relu.
    let float = hand_model(
        &[1, 2, 4, 4],
        vec![
            node("Clip", "", &["x", "lo", "hi"], "c", vec![]),
            node("AveragePool", "", &["c"], "p", vec![ints("kernel_shape", &[2, 2]), ints("strides", &[2, 2])]),
            node("Reshape", "", &["p", "shape"], "r", vec![]),
            node("MatMul", "", &["r", "w"], "m", vec![]),
            node("Relu", "", &["m"], "y", vec![]),
        ],
        vec![
            tensor("lo", 1, &[], f32_bytes(&[-1.0])),
            tensor("hi", 1, &[], f32_bytes(&[6.0])),
            tensor("shape", 7, &[2], [1i64, -1].iter().flat_map(|x| x.to_le_bytes()).collect()),
            tensor("w", 1, &[8, 3], f32_bytes(&[0.5; 24])),
        ],
    );
    let model = onnx::import_proto(&float).unwrap_or_else(|e| panic!("{e}"));
    let kinds: Vec<&str> =
        model.graph.order().iter().map(|&id| model.graph.op(id).expect("an op").kind.name()).collect();
    assert_eq!(kinds, ["Clip", "AvgPool", "StaticReshape", "MatMul", "ReLU"]);
    let clip = model.graph.order().iter().find_map(|&id| match &model.graph.op(id).expect("an op").kind {
        OpKind::Clip(a) => Some(*a),
        _ => None,
    });
    assert_eq!(clip.map(|a| (a.min, a.max)), Some((-1.0, 6.0)));
    let y = model.outputs[0].1;
    assert_eq!(model.graph.tensor(y).expect("y").shape, Shape::known(&[1, 3]));

    // QuantizeLinear → QLinearMatMul (per-column weight scales) → DequantizeLinear, fused.
    let scalar_u8 = |name: &str, v: u8| tensor(name, 2, &[], vec![v]);
    let scalar_f32 = |name: &str, v: f32| tensor(name, 1, &[], f32_bytes(&[v]));
    let qmatmul = hand_model(
        &[2, 4],
        vec![
            node("QuantizeLinear", "", &["x", "xs", "xz"], "xq", vec![]),
            node("QLinearMatMul", "", &["xq", "xs", "xz", "w", "ws", "wz", "ys", "yz"], "yq", vec![]),
            node("DequantizeLinear", "", &["yq", "ys", "yz"], "y", vec![]),
        ],
        vec![
            scalar_f32("xs", 0.05),
            scalar_u8("xz", 128),
            tensor("w", 3, &[4, 3], (0..12).map(|i| (i * 7 % 19) as u8).collect()),
            tensor("ws", 1, &[3], f32_bytes(&[0.01, 0.02, 0.03])),
            tensor("wz", 3, &[3], vec![0; 3]),
            scalar_f32("ys", 0.1),
            scalar_u8("yz", 100),
        ],
    );
    let model = onnx::import_proto(&qmatmul).unwrap_or_else(|e| panic!("{e}"));
    let kinds: Vec<&str> =
        model.graph.order().iter().map(|&id| model.graph.op(id).expect("an op").kind.name()).collect();
    assert_eq!(kinds.iter().filter(|&&k| k == "Dequantize").count(), 3, "{kinds:?}");
    assert_eq!(kinds.iter().filter(|&&k| k == "MatMul").count(), 1, "{kinds:?}");
    let per_column = model.graph.order().iter().any(|&id| {
        matches!(&model.graph.op(id).expect("an op").kind, OpKind::Dequantize(p) if p.axis == Some(1) && p.scales.len() == 3)
    });
    assert!(per_column, "the weights are dequantized per column");
    let partitions = model.graph.get_partitions(tensorlift::graph::PartitionPolicy::Fusion);
    assert!(
        partitions.iter().any(|p| p.kind.name() == "QuantizedMatMul"),
        "{:?}",
        partitions.iter().map(|p| p.kind.name()).collect::<Vec<_>>()
    );

    // A computed Reshape shape is `NotConstant`, naming the node.
    let mut bad = float.clone();
    bad.graph.as_mut().expect("a graph").node[2].input[1] = "c".into();
    let err = onnx::import_proto(&bad).expect_err("a computed shape");
    assert!(matches!(&err, OnnxError::NotConstant { node, .. } if node.op_type == "Reshape"), "{err}");
}

#[test]
fn a_symbolic_batch_dimension_stays_unknown() {
    use tensorlift::onnx::proto::tensor_shape_proto::dimension::Value;
    use tensorlift::onnx::proto::type_proto::Value as Type;
    let bytes = std::fs::read(models_dir().join("resnet18_w8_s32_qdq_u8_pc.onnx")).expect("a model");
    let mut m = ModelProto::decode(bytes.as_slice()).expect("decodes");
    let graph = m.graph.as_mut().expect("a graph");
    graph.value_info.clear();
    for v in graph.input.iter_mut().chain(graph.output.iter_mut()).take(2) {
        let Some(Type::TensorType(t)) = v.r#type.as_mut().and_then(|t| t.value.as_mut()) else { panic!("a tensor") };
        t.shape.as_mut().expect("a shape").dim[0].value = Some(Value::DimParam("N".into()));
    }
    let model = onnx::import_proto(&m).unwrap_or_else(|e| panic!("{e}"));
    let input = model.graph.tensor(model.inputs[0].1).expect("the input");
    let output = model.graph.tensor(model.outputs[0].1).expect("the output");
    assert_eq!(input.shape.dims().map(|d| d[0]), Some(Dim::Unknown));
    let out = output.shape.dims().expect("a known rank");
    assert_eq!(out.len(), 2);
    assert_eq!(out[0], Dim::Unknown);
    assert!(out[1].known().is_some(), "the class count is inferred: {}", output.shape);
}
