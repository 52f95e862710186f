//! The graph layer: building and finalizing (typed errors naming the op, never a panic),
//! partitioning (the fused int8 patterns and what stops them), and the plain-Rust reference
//! on small cases whose results are derived by hand here.

use cranelift_entity::EntityRef;
use proptest::prelude::*;
use tensorlift::graph::{
    Activation, AvgPoolAttrs, BiasAddAttrs, ClipAttrs, ConvAttrs, DataType, Dim, Graph, GraphError, MatMulAttrs,
    MaxPoolAttrs, OpKind, PartitionKind, PartitionPolicy, QuantParams, QuantizeAttrs, ReduceMeanAttrs, ReferenceError,
    ReshapeAttrs, Shape, TensorId, TransposeAttrs, TypeCastAttrs, Value, reference,
};

use DataType::{F32, S8, S32, U8};

fn dq(scale: f32, zp: i32) -> OpKind {
    OpKind::Dequantize(QuantParams::per_tensor(scale, zp))
}

fn q(scale: f32, zp: i32, dtype: DataType) -> OpKind {
    OpKind::Quantize(QuantizeAttrs { params: QuantParams::per_tensor(scale, zp), dtype })
}

/// The name of the op an error names, if it names one.
fn op_name(e: &GraphError) -> Option<&str> {
    match e {
        GraphError::UnknownTensor { op, .. }
        | GraphError::Arity { op, .. }
        | GraphError::WritesInput { op, .. }
        | GraphError::Dangling { op, .. }
        | GraphError::DType { op, .. }
        | GraphError::Shape { op, .. }
        | GraphError::Attribute { op, .. }
        | GraphError::UnknownRank { op, .. }
        | GraphError::Declared { op, .. } => Some(&op.name),
        GraphError::ProducedTwice { second, .. } => Some(&second.name),
        _ => None,
    }
}

#[test]
fn a_graph_built_op_by_op_finalizes_with_inferred_shapes() {
    let mut g = Graph::new();
    let x = g.input("x", F32, [1, 3, 8, 8]);
    let w = g.constant("w", Value::f32(&[4, 3, 3, 3], vec![0.5; 108]).unwrap());
    let b = g.constant("b", Value::f32(&[4], vec![1.0; 4]).unwrap());
    // Declared with unknown dimensions: finalization fills them in.
    let y = g.tensor("y", F32, vec![Dim::Unknown; 4]);
    g.add_op("conv", OpKind::Convolution(ConvAttrs::square(2, 1)), &[x, w, b], &[y]).unwrap();
    let r = g.apply("relu", OpKind::ReLU, &[y]).unwrap();
    let p = g.apply("pool", OpKind::MaxPool(MaxPoolAttrs::square(2, 2, 0)), &[r]).unwrap();
    let f = g.apply("flat", OpKind::StaticReshape(ReshapeAttrs { shape: vec![1, -1] }), &[p]).unwrap();
    g.mark_output(f).unwrap();
    let fg = g.finalize().unwrap();
    assert_eq!(fg.tensor(y).unwrap().shape, Shape::known(&[1, 4, 4, 4]));
    assert_eq!(fg.tensor(p).unwrap().shape, Shape::known(&[1, 4, 2, 2]));
    assert_eq!(fg.tensor(f).unwrap().shape, Shape::known(&[1, 16]));
    assert_eq!(fg.order().len(), 4);
}

#[test]
fn a_dangling_input_names_the_op_that_reads_it() {
    let mut g = Graph::new();
    let x = g.tensor("nobody_writes_me", F32, [2, 2]);
    let y = g.tensor("y", F32, [2, 2]);
    g.add_op("relu", OpKind::ReLU, &[x], &[y]).unwrap();
    let e = g.finalize().unwrap_err();
    assert!(
        matches!(&e, GraphError::Dangling { op, tensor } if &*op.name == "relu" && &*tensor.name == "nobody_writes_me"),
        "{e}"
    );
}

#[test]
fn a_cycle_lists_its_ops() {
    let mut g = Graph::new();
    let a = g.tensor("a", F32, [2]);
    let b = g.tensor("b", F32, [2]);
    g.add_op("first", OpKind::ReLU, &[b], &[a]).unwrap();
    g.add_op("second", OpKind::ReLU, &[a], &[b]).unwrap();
    let e = g.finalize().unwrap_err();
    let GraphError::Cycle { ops } = &e else { panic!("expected a cycle, got {e}") };
    let names: Vec<&str> = ops.iter().map(|o| &*o.name).collect();
    assert!(names.contains(&"first") && names.contains(&"second"), "{e}");
    assert_eq!(ops.first(), ops.last(), "the cycle closes: {e}");
}

#[test]
fn a_dtype_that_does_not_fit_names_the_op_and_operand() {
    let mut g = Graph::new();
    let x = g.input("x", U8, [1, 4]);
    let e = g.apply("relu_on_u8", OpKind::ReLU, &[x]).unwrap_err();
    assert!(matches!(&e, GraphError::DType { found: U8, .. }), "{e}");
    assert_eq!(op_name(&e), Some("relu_on_u8"));
    // The same through finalize, with a declared output.
    let mut g = Graph::new();
    let x = g.input("x", F32, [1, 4]);
    let y = g.tensor("y", F32, [1, 4]);
    g.add_op("dq_on_f32", dq(0.5, 0), &[x], &[y]).unwrap();
    let e = g.finalize().unwrap_err();
    assert!(matches!(&e, GraphError::DType { found: F32, .. }), "{e}");
    assert_eq!(op_name(&e), Some("dq_on_f32"));
}

#[test]
fn a_shape_that_does_not_fit_names_the_op() {
    let mut g = Graph::new();
    let a = g.input("a", F32, [2, 3]);
    let b = g.input("b", F32, [4, 5]);
    let e = g.apply("mm", OpKind::MatMul(MatMulAttrs::default()), &[a, b]).unwrap_err();
    assert!(matches!(&e, GraphError::Shape { .. }), "{e}");
    assert_eq!(op_name(&e), Some("mm"));
    let e = g.apply("add", OpKind::Add, &[a, b]).unwrap_err();
    assert!(matches!(&e, GraphError::Shape { .. }), "{e}");
    assert_eq!(op_name(&e), Some("add"));
    // A declared output that disagrees with what the op produces.
    let mut g = Graph::new();
    let a = g.input("a", F32, [2, 3]);
    let y = g.tensor("y", F32, [3, 2]);
    g.add_op("relu", OpKind::ReLU, &[a], &[y]).unwrap();
    let e = g.finalize().unwrap_err();
    assert!(matches!(&e, GraphError::Declared { what: "shape", .. }), "{e}");
}

/// A convolution of `x: [1, 4, 6, 6]` by `w: [wo, wi, 3, 3]` with `attrs`.
fn conv_error(attrs: ConvAttrs, wo: usize, wi: usize) -> GraphError {
    let mut g = Graph::new();
    let x = g.input("x", F32, [1, 4, 6, 6]);
    let w = g.constant("w", Value::f32(&[wo, wi, 3, 3], vec![0.0; wo * wi * 9]).unwrap());
    g.apply("the_conv", OpKind::Convolution(attrs), &[x, w]).unwrap_err()
}

#[test]
fn bad_attributes_are_typed_errors_naming_the_op_and_attribute() {
    let cases: Vec<(ConvAttrs, usize, usize, &str)> = vec![
        (ConvAttrs::square(0, 1), 4, 4, "strides"),
        (ConvAttrs::square(1, -1), 4, 4, "pads_begin"),
        (ConvAttrs { dilations: vec![1, 0], ..ConvAttrs::unit(2) }, 4, 4, "dilations"),
        (ConvAttrs { groups: 3, ..ConvAttrs::unit(2) }, 3, 1, "groups"),
        (ConvAttrs { groups: 2, ..ConvAttrs::unit(2) }, 3, 2, "groups"),
        (ConvAttrs { groups: 0, ..ConvAttrs::unit(2) }, 4, 4, "groups"),
        (ConvAttrs { strides: vec![1], ..ConvAttrs::unit(2) }, 4, 4, "strides"),
    ];
    for (attrs, wo, wi, attribute) in cases {
        let e = conv_error(attrs.clone(), wo, wi);
        assert!(
            matches!(&e, GraphError::Attribute { op, attribute: a, .. } if &*op.name == "the_conv" && *a == attribute),
            "{attrs:?}: {e}"
        );
    }
    // Weights whose channels are not C / groups.
    let e = conv_error(ConvAttrs { groups: 2, ..ConvAttrs::unit(2) }, 4, 4);
    assert!(matches!(&e, GraphError::Shape { .. }), "{e}");
    let mut g = Graph::new();
    let x = g.input("x", F32, [1, 1, 4, 4]);
    let e = g.apply("pool", OpKind::MaxPool(MaxPoolAttrs::square(2, 1, 2)), &[x]).unwrap_err();
    assert!(matches!(&e, GraphError::Attribute { attribute: "pads_begin", .. }), "{e}");
    let e = g.apply("clip", OpKind::Clip(ClipAttrs { min: 1.0, max: 0.0 }), &[x]).unwrap_err();
    assert!(matches!(&e, GraphError::Attribute { .. }), "{e}");
    let e = g
        .apply("dq", OpKind::Quantize(QuantizeAttrs { params: QuantParams::per_tensor(0.0, 0), dtype: U8 }), &[x])
        .unwrap_err();
    assert!(matches!(&e, GraphError::Attribute { attribute: "scales", .. }), "{e}");
}

#[test]
fn an_unknown_tensor_is_a_typed_error() {
    let mut g = Graph::new();
    let x = g.input("x", F32, [2]);
    let stranger = TensorId::new(99);
    let e = g.apply("relu", OpKind::ReLU, &[stranger]).unwrap_err();
    assert!(
        matches!(&e, GraphError::UnknownTensor { op, tensor } if &*op.name == "relu" && *tensor == stranger),
        "{e}"
    );
    let e = g.add_op("relu2", OpKind::ReLU, &[x], &[stranger]).unwrap_err();
    assert!(matches!(&e, GraphError::UnknownTensor { .. }), "{e}");
    assert!(matches!(g.mark_output(stranger), Err(GraphError::UnknownGraphTensor { .. })));
    let e = g.add_op("two_in", OpKind::ReLU, &[x, x], &[]).unwrap_err();
    assert!(matches!(&e, GraphError::Arity { .. }), "{e}");
}

// ---------------------------------------------------------------------------------------------
// Random graphs: finalize, partition and the reference return, never panic.

#[derive(Clone, Debug)]
struct RandomOp {
    kind: u8,
    ints: Vec<i64>,
    inputs: Vec<u32>,
    output: u32,
}

fn random_kind(r: &RandomOp) -> OpKind {
    let i = |k: usize| r.ints.get(k).copied().unwrap_or(1);
    let v = |from: usize, n: usize| (from..from + n).map(i).collect::<Vec<_>>();
    let spatial = (i(0).rem_euclid(3) + 1) as usize;
    let dtypes = [F32, U8, S8, S32, DataType::F16, DataType::Bf16];
    match r.kind % 16 {
        0 => OpKind::Convolution(ConvAttrs {
            strides: v(1, spatial),
            pads_begin: v(2, spatial),
            pads_end: v(3, spatial),
            dilations: v(4, spatial),
            groups: i(5),
        }),
        1 => OpKind::MatMul(MatMulAttrs { transpose_a: i(1) % 2 == 0, transpose_b: i(2) % 2 == 0 }),
        2 => OpKind::BiasAdd(BiasAddAttrs { axis: i(1) }),
        3 => OpKind::Add,
        4 => OpKind::ReLU,
        5 => OpKind::Clip(ClipAttrs { min: i(1) as f32, max: i(2) as f32 }),
        6 => OpKind::MaxPool(MaxPoolAttrs {
            kernel: v(1, spatial),
            strides: v(2, spatial),
            pads_begin: v(3, spatial),
            pads_end: v(4, spatial),
            dilations: v(5, spatial),
            ceil_mode: i(6) % 2 == 0,
        }),
        7 => OpKind::AvgPool(AvgPoolAttrs {
            kernel: v(1, spatial),
            strides: v(2, spatial),
            pads_begin: v(3, spatial),
            pads_end: v(4, spatial),
            ceil_mode: i(5) % 2 == 0,
            count_include_pad: i(6) % 2 == 0,
        }),
        8 => OpKind::GlobalAveragePool,
        9 => OpKind::ReduceMean(ReduceMeanAttrs { axes: v(1, spatial), keep_dims: i(2) % 2 == 0 }),
        10 => OpKind::Dequantize(QuantParams {
            scales: vec![i(1) as f32 / 4.0; spatial],
            zero_points: v(2, spatial).into_iter().map(|z| z as i32).collect(),
            axis: (i(3) % 2 == 0).then_some(i(4)),
        }),
        11 => OpKind::Quantize(QuantizeAttrs {
            params: QuantParams::per_tensor(i(1) as f32 / 8.0, i(2) as i32),
            dtype: dtypes[i(3).rem_euclid(6) as usize],
        }),
        12 => OpKind::TypeCast(TypeCastAttrs { dtype: dtypes[i(1).rem_euclid(6) as usize] }),
        13 => OpKind::StaticReshape(ReshapeAttrs { shape: v(1, spatial) }),
        14 => OpKind::StaticTranspose(TransposeAttrs { perm: v(1, spatial + 1) }),
        _ => OpKind::Reorder,
    }
}

fn random_op() -> impl Strategy<Value = RandomOp> {
    (any::<u8>(), prop::collection::vec(-2i64..5, 8), prop::collection::vec(0u32..10, 1..4), 0u32..12)
        .prop_map(|(kind, ints, inputs, output)| RandomOp { kind, ints, inputs, output })
}

fn random_tensor() -> impl Strategy<Value = (u8, Vec<Option<usize>>, u8)> {
    (any::<u8>(), prop::collection::vec(prop::option::weighted(0.9, 0usize..5), 0..5), 0u8..3)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn random_graphs_finalize_partition_and_run_or_fail_without_panicking(
        tensors in prop::collection::vec(random_tensor(), 1..9),
        ops in prop::collection::vec(random_op(), 0..7),
    ) {
        let dtypes = [F32, U8, S8, S32, DataType::F16, DataType::Bf16, DataType::Boolean];
        let mut g = Graph::new();
        let mut ids = Vec::new();
        for (i, (dt, dims, role)) in tensors.iter().enumerate() {
            let dtype = dtypes[*dt as usize % dtypes.len()];
            let shape = Shape::Dims(dims.iter().map(|d| d.map_or(Dim::Unknown, Dim::Known)).collect());
            let name = format!("t{i}");
            ids.push(match role {
                0 => g.input(&name, dtype, shape),
                1 if dims.iter().all(Option::is_some) => {
                    let dims: Vec<usize> = dims.iter().map(|d| d.unwrap_or(1)).collect();
                    let n = dims.iter().product();
                    let data = tensorlift::graph::Data::zeros(dtype, n);
                    g.constant(&name, Value::new(&dims, data).unwrap())
                }
                _ => g.tensor(&name, dtype, shape),
            });
        }
        let pick = |k: u32| if (k as usize) < ids.len() { ids[k as usize] } else { TensorId::new(k as usize + 40) };
        for (i, op) in ops.iter().enumerate() {
            let inputs: Vec<TensorId> = op.inputs.iter().map(|&k| pick(k)).collect();
            let _ = g.add_op(&format!("op{i}"), random_kind(op), &inputs, &[pick(op.output)]);
            let _ = g.apply(&format!("apply{i}"), random_kind(op), &inputs);
        }
        if let Some(&last) = ids.last() {
            let _ = g.mark_output(last);
        }
        if let Ok(fg) = g.finalize() {
            // Zeros for every input, unknown dimensions taken as 1.
            let inputs: Vec<(TensorId, Value)> = fg
                .graph()
                .inputs()
                .iter()
                .filter_map(|&t| {
                    let lt = fg.tensor(t)?;
                    let dims: Vec<usize> = lt.shape.dims()?.iter().map(|d| d.known().unwrap_or(1)).collect();
                    let n = dims.iter().product();
                    Some((t, Value::new(&dims, tensorlift::graph::Data::zeros(lt.dtype, n)).ok()?))
                })
                .collect();
            for policy in [PartitionPolicy::Fusion, PartitionPolicy::Debug] {
                let parts = fg.get_partitions(policy);
                for &op in fg.order() {
                    prop_assert!(parts.iter().any(|p| p.ops.contains(&op)), "{op} in no partition");
                }
                // Evaluates or fails with a typed error; never panics.
                let _ = reference::run(&fg, &parts, &inputs);
            }
        }
    }
}

/// One step of a grown graph: an op kind, two picks among the tensors so far, two attributes.
#[derive(Clone, Debug)]
struct Step {
    kind: u8,
    a: usize,
    b: usize,
    p: i64,
    q: i64,
}

/// Grows a graph step by step with `apply`, mostly well formed (so that partitioning and the
/// reference see real patterns), sometimes not; returns it with its input.
fn grow(steps: &[Step], input_u8: bool, dims: [usize; 4]) -> (Graph, TensorId) {
    let mut g = Graph::new();
    let x = g.input("x", if input_u8 { U8 } else { F32 }, dims);
    let mut ts = vec![x];
    for (i, s) in steps.iter().enumerate() {
        let t = ts[s.a % ts.len()];
        let u = ts[s.b % ts.len()];
        let lt = g.logical_tensor(t).unwrap().clone();
        let shape: Vec<usize> = lt.shape.concrete().unwrap_or_default();
        let name = format!("s{i}");
        let scale = (s.p.rem_euclid(7) + 1) as f32 / 8.0;
        let zp = s.q.rem_euclid(5) as i32;
        let out = match s.kind % 14 {
            0 => g.apply(&name, dq(scale, zp), &[t]),
            1 => g.apply(&name, q(scale, zp, if s.q % 2 == 0 { U8 } else { S8 }), &[t]),
            2 => {
                let c = shape.get(1).copied().unwrap_or(1);
                let groups = if s.q % 3 == 0 && c % 2 == 0 { 2 } else { 1 };
                let (oc, k) = ((s.b % 3 + 1) * groups, (s.p.rem_euclid(3) + 1) as usize);
                let wdims = [oc, (c / groups).max(1), k, k];
                let n = wdims.iter().product::<usize>();
                let w = if s.q % 2 == 0 {
                    let w = g.constant(
                        &format!("{name}_w"),
                        Value::s8(&wdims, (0..n).map(|j| (j % 5) as i8 - 2).collect()).unwrap(),
                    );
                    match g.apply(&format!("{name}_dqw"), dq(0.25, 0), &[w]) {
                        Ok(w) => w,
                        Err(_) => continue,
                    }
                } else {
                    g.constant(
                        &format!("{name}_w"),
                        Value::f32(&wdims, (0..n).map(|j| j as f32 / 8.0).collect()).unwrap(),
                    )
                };
                let attrs = ConvAttrs {
                    groups: groups as i64,
                    ..ConvAttrs::square(s.p.rem_euclid(3), s.q.rem_euclid(3) - 1 + (s.b % 2) as i64)
                };
                g.apply(&name, OpKind::Convolution(attrs), &[t, w])
            }
            3 => g.apply(&name, OpKind::ReLU, &[t]),
            4 => g.apply(
                &name,
                OpKind::Clip(ClipAttrs { min: s.p as f32 / 4.0, max: s.p as f32 / 4.0 + s.q.rem_euclid(8) as f32 }),
                &[t],
            ),
            5 => g.apply(
                &name,
                OpKind::MaxPool(MaxPoolAttrs::square(s.p.rem_euclid(3) + 1, s.q.rem_euclid(3), s.b as i64 % 2)),
                &[t],
            ),
            6 => {
                let attrs = AvgPoolAttrs {
                    count_include_pad: s.b % 2 == 0,
                    ceil_mode: s.a % 2 == 0,
                    ..AvgPoolAttrs::square(s.p.rem_euclid(3) + 1, s.q.rem_euclid(2) + 1, (s.b % 2) as i64)
                };
                g.apply(&name, OpKind::AvgPool(attrs), &[t])
            }
            7 => g.apply(&name, OpKind::GlobalAveragePool, &[t]),
            8 => {
                g.apply(&name, OpKind::ReduceMean(ReduceMeanAttrs { axes: vec![2, 3], keep_dims: s.q % 2 == 0 }), &[t])
            }
            9 => g.apply(&name, OpKind::Add, &[t, u]),
            10 => {
                let k = shape.last().copied().unwrap_or(1);
                let n = (s.b % 3) + 1;
                let w = g.constant(
                    &format!("{name}_w"),
                    Value::s8(&[k, n], (0..k * n).map(|j| (j % 7) as i8 - 3).collect()).unwrap(),
                );
                match g.apply(
                    &format!("{name}_dqw"),
                    OpKind::Dequantize(QuantParams::per_channel(1, vec![0.5; n])),
                    &[w],
                ) {
                    Ok(w) => g.apply(&name, OpKind::MatMul(MatMulAttrs::default()), &[t, w]),
                    Err(_) => continue,
                }
            }
            11 => g.apply(&name, OpKind::StaticReshape(ReshapeAttrs { shape: vec![1, -1] }), &[t]),
            12 => g.apply(
                &name,
                OpKind::StaticTranspose(TransposeAttrs { perm: (0..shape.len() as i64).rev().collect() }),
                &[t],
            ),
            _ => {
                let axis = (s.q.rem_euclid(shape.len().max(1) as i64)) as usize;
                let n = shape.get(axis).copied().unwrap_or(1);
                let b = g.constant(&format!("{name}_b"), Value::s32(&[n], vec![3; n]).unwrap());
                match g.apply(&format!("{name}_dqb"), dq(scale, 0), &[b]) {
                    Ok(b) => g.apply(&name, OpKind::BiasAdd(BiasAddAttrs { axis: axis as i64 }), &[t, b]),
                    Err(_) => continue,
                }
            }
        };
        if let Ok(out) = out {
            ts.push(out);
        }
    }
    g.mark_output(*ts.last().unwrap_or(&x)).unwrap();
    (g, x)
}

fn step() -> impl Strategy<Value = Step> {
    (any::<u8>(), 0usize..16, 0usize..16, -3i64..9, -3i64..9).prop_map(|(kind, a, b, p, q)| Step { kind, a, b, p, q })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Grown graphs: both policies partition every op, the reference runs both (or fails with
    /// a typed error, never a panic), and where both run the outputs have the same types and
    /// shapes.
    #[test]
    fn grown_graphs_partition_and_run_under_both_policies(
        steps in prop::collection::vec(step(), 1..10),
        input_u8 in any::<bool>(),
        dims in (1usize..3, 1usize..5, 1usize..6, 1usize..6),
        seed in any::<u64>(),
    ) {
        let dims = [dims.0, dims.1, dims.2, dims.3];
        let (g, x) = grow(&steps, input_u8, dims);
        let Ok(fg) = g.finalize() else { return Ok(()) };
        let n: usize = dims.iter().product();
        let mut r = seed;
        let mut next = move || { r = r.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407); (r >> 33) as u32 };
        let value = if input_u8 {
            Value::u8(&dims, (0..n).map(|_| next() as u8).collect()).unwrap()
        } else {
            Value::f32(&dims, (0..n).map(|_| (next() % 64) as f32 / 8.0 - 4.0).collect()).unwrap()
        };
        let mut results = Vec::new();
        for policy in [PartitionPolicy::Fusion, PartitionPolicy::Debug] {
            let parts = fg.get_partitions(policy);
            for &op in fg.order() {
                prop_assert!(parts.iter().any(|p| p.ops.contains(&op)), "{op} in no partition");
            }
            results.push(reference::run(&fg, &parts, &[(x, value.clone())]));
        }
        if let (Ok(a), Ok(b)) = (&results[0], &results[1]) {
            for ((_, va), (_, vb)) in a.iter().zip(b) {
                prop_assert_eq!((va.dtype(), va.dims()), (vb.dtype(), vb.dims()));
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Partitioning.

/// `u8 x [1, 2, 4, 4]` → DQ → Conv(3×3, pad 1, DQ(s8 per-channel weights)) [+ BiasAdd(DQ(s32))]
/// → ReLU → Q(u8), then MaxPool on the quantized output.
struct ConvNet {
    graph: Graph,
    x: TensorId,
    conv_out: TensorId,
    pooled: TensorId,
}

fn conv_net(bias: bool) -> ConvNet {
    let mut g = Graph::new();
    let x = g.input("x", U8, [1, 2, 4, 4]);
    let xf = g.apply("dq_x", dq(0.5, 10), &[x]).unwrap();
    let w = g.constant("w", Value::s8(&[3, 2, 3, 3], (0..54).map(|i| (i % 7 - 3) as i8).collect()).unwrap());
    let wf = g.apply("dq_w", OpKind::Dequantize(QuantParams::per_channel(0, vec![0.25, 0.5, 1.0])), &[w]).unwrap();
    let mut y = g.apply("conv", OpKind::Convolution(ConvAttrs::square(1, 1)), &[xf, wf]).unwrap();
    if bias {
        let b = g.constant("b", Value::s32(&[3], vec![4, -8, 100]).unwrap());
        let bf =
            g.apply("dq_b", OpKind::Dequantize(QuantParams::per_channel(0, vec![0.125, 0.25, 0.5])), &[b]).unwrap();
        y = g.apply("bias", OpKind::BiasAdd(BiasAddAttrs { axis: 1 }), &[y, bf]).unwrap();
    }
    let r = g.apply("relu", OpKind::ReLU, &[y]).unwrap();
    let conv_out = g.apply("q", q(2.0, 3, U8), &[r]).unwrap();
    let pooled = g.apply("pool", OpKind::MaxPool(MaxPoolAttrs::square(2, 2, 0)), &[conv_out]).unwrap();
    g.mark_output(pooled).unwrap();
    ConvNet { graph: g, x, conv_out, pooled }
}

#[test]
fn a_quantized_conv_chain_is_one_partition_with_everything_resolved() {
    let net = conv_net(true);
    let fg = net.graph.finalize().unwrap();
    let parts = fg.get_partitions(PartitionPolicy::Fusion);
    assert_eq!(parts.len(), 2, "{parts:#?}");
    let PartitionKind::QuantizedConv(c) = &parts[0].kind else { panic!("{:?}", parts[0].kind) };
    assert_eq!(parts[0].ops.len(), 7, "dq_x, dq_w, dq_b, conv, bias, relu, q");
    assert_eq!(parts[0].inputs, vec![net.x]);
    assert_eq!(parts[0].outputs, vec![net.conv_out]);
    assert_eq!(c.bias, Some(vec![4, -8, 100]));
    assert_eq!((c.src.scale, c.src.zero_point, c.dst.scale, c.dst.zero_point), (0.5, 10, 2.0, 3));
    // S[c] = 0.5 · w_scale[c] / 2.
    assert_eq!(c.requant_scales, vec![0.0625, 0.125, 0.25]);
    assert_eq!(c.activation, Activation::ReLU);
    assert_eq!(c.clamp, (3, 255));
    assert_eq!(c.weight_dims, vec![3, 2, 3, 3]);
    assert_eq!(c.weights[..4], [-3, -2, -1, 0]);
    assert_eq!((c.window.strides.clone(), c.window.pads_begin.clone(), c.groups), (vec![1, 1], vec![1, 1], 1));
    let PartitionKind::QuantizedMaxPool(p) = &parts[1].kind else { panic!("{:?}", parts[1].kind) };
    assert_eq!((p.dtype, p.quant), (U8, None));
    assert_eq!(parts[1].outputs, vec![net.pooled]);
    // Debug: one op per partition, none fused.
    let debug = fg.get_partitions(PartitionPolicy::Debug);
    assert_eq!(debug.len(), 8);
    assert!(debug.iter().all(|p| p.ops.len() == 1 && matches!(p.kind, PartitionKind::Single(_))));
}

#[test]
fn a_bias_at_the_wrong_scale_or_in_float_is_not_fused() {
    // Bias scale 0.125 · 2 for channel 1 instead of x_scale · w_scale = 0.25: the BiasAdd stops
    // the pattern before a Quantize, so nothing fuses.
    let mut g = Graph::new();
    let x = g.input("x", U8, [1, 1, 2, 2]);
    let xf = g.apply("dq_x", dq(0.5, 0), &[x]).unwrap();
    let w = g.constant("w", Value::s8(&[2, 1, 1, 1], vec![1, 2]).unwrap());
    let wf = g.apply("dq_w", OpKind::Dequantize(QuantParams::per_channel(0, vec![0.25, 0.5])), &[w]).unwrap();
    let b = g.constant("b", Value::s32(&[2], vec![1, 1]).unwrap());
    let bf = g.apply("dq_b", OpKind::Dequantize(QuantParams::per_channel(0, vec![0.125, 0.5])), &[b]).unwrap();
    let y = g.apply("conv", OpKind::Convolution(ConvAttrs::unit(2)), &[xf, wf, bf]).unwrap();
    let out = g.apply("q", q(1.0, 0, U8), &[y]).unwrap();
    g.mark_output(out).unwrap();
    let fg = g.finalize().unwrap();
    let parts = fg.get_partitions(PartitionPolicy::Fusion);
    assert!(parts.iter().all(|p| matches!(p.kind, PartitionKind::Single(_))), "{parts:#?}");
    assert_eq!(parts.len(), 5);
}

#[test]
fn a_float_result_read_elsewhere_stops_the_fusion() {
    let mut g = Graph::new();
    let x = g.input("x", U8, [1, 1, 2, 2]);
    let xf = g.apply("dq_x", dq(0.5, 0), &[x]).unwrap();
    let w = g.constant("w", Value::s8(&[1, 1, 1, 1], vec![3]).unwrap());
    let wf = g.apply("dq_w", dq(0.25, 0), &[w]).unwrap();
    let y = g.apply("conv", OpKind::Convolution(ConvAttrs::unit(2)), &[xf, wf]).unwrap();
    let out = g.apply("q", q(1.0, 0, U8), &[y]).unwrap();
    let other = g.apply("relu", OpKind::ReLU, &[y]).unwrap();
    g.mark_output(out).unwrap();
    g.mark_output(other).unwrap();
    let fg = g.finalize().unwrap();
    let parts = fg.get_partitions(PartitionPolicy::Fusion);
    assert!(!parts.iter().any(|p| matches!(p.kind, PartitionKind::QuantizedConv(_))), "{parts:#?}");
    // The same conv output as a graph output also stops it.
    let mut g = Graph::new();
    let x = g.input("x", U8, [1, 1, 2, 2]);
    let xf = g.apply("dq_x", dq(0.5, 0), &[x]).unwrap();
    let w = g.constant("w", Value::s8(&[1, 1, 1, 1], vec![3]).unwrap());
    let wf = g.apply("dq_w", dq(0.25, 0), &[w]).unwrap();
    let y = g.apply("conv", OpKind::Convolution(ConvAttrs::unit(2)), &[xf, wf]).unwrap();
    let out = g.apply("q", q(1.0, 0, U8), &[y]).unwrap();
    g.mark_output(out).unwrap();
    g.mark_output(y).unwrap();
    let parts = g.finalize().unwrap().get_partitions(PartitionPolicy::Fusion);
    assert!(!parts.iter().any(|p| matches!(p.kind, PartitionKind::QuantizedConv(_))), "{parts:#?}");
}

#[test]
fn a_quantize_followed_by_a_dequantize_is_kept() {
    let mut g = Graph::new();
    let x = g.input("x", F32, [4]);
    let qx = g.apply("q", q(0.5, 0, S8), &[x]).unwrap();
    let back = g.apply("dq", dq(0.5, 0), &[qx]).unwrap();
    g.mark_output(back).unwrap();
    let parts = g.finalize().unwrap().get_partitions(PartitionPolicy::Fusion);
    assert_eq!(parts.len(), 2);
    assert!(matches!(parts[0].kind, PartitionKind::Single(OpKind::Quantize(_))));
    assert!(matches!(parts[1].kind, PartitionKind::Single(OpKind::Dequantize(_))));
}

/// A residual block's shape: one Dequantize read by a conv and by an Add.
#[test]
fn a_shared_dequantize_feeds_each_fused_partition() {
    let mut g = Graph::new();
    let x = g.input("x", U8, [1, 1, 2, 2]);
    let xf = g.apply("dq_x", dq(0.5, 7), &[x]).unwrap();
    let w = g.constant("w", Value::s8(&[1, 1, 1, 1], vec![2]).unwrap());
    let wf = g.apply("dq_w", dq(0.25, 0), &[w]).unwrap();
    let y = g.apply("conv", OpKind::Convolution(ConvAttrs::unit(2)), &[xf, wf]).unwrap();
    let yq = g.apply("q_conv", q(0.5, 7, U8), &[y]).unwrap();
    let yf = g.apply("dq_y", dq(0.5, 7), &[yq]).unwrap();
    let s = g.apply("add", OpKind::Add, &[yf, xf]).unwrap();
    let sr = g.apply("relu", OpKind::ReLU, &[s]).unwrap();
    let out = g.apply("q_add", q(1.0, 0, U8), &[sr]).unwrap();
    g.mark_output(out).unwrap();
    let fg = g.finalize().unwrap();
    // Fused, the add reads the convolution's own source: one partition, one input.
    let fused = fg.get_partitions(PartitionPolicy::Fusion);
    assert_eq!(fused.len(), 1, "{fused:#?}");
    let PartitionKind::QuantizedConv(c) = &fused[0].kind else { panic!("{:?}", fused[0].kind) };
    let r = c.residual.as_ref().expect("the add is fused");
    assert!(r.conv_is_a);
    assert_eq!((fused[0].inputs.clone(), fused[0].outputs.clone()), (vec![x], vec![out]));
    let x_value = Value::u8(&[1, 1, 2, 2], vec![0, 7, 100, 255]).unwrap();
    assert_eq!(
        run(&fg.graph().clone(), PartitionPolicy::Fusion, &[(x, x_value.clone())]),
        run(&fg.graph().clone(), PartitionPolicy::FusionWithoutSum, &[(x, x_value)])
    );
    let parts = fg.get_partitions(PartitionPolicy::FusionWithoutSum);
    assert_eq!(parts.len(), 2, "{parts:#?}");
    assert!(matches!(&parts[0].kind, PartitionKind::QuantizedConv(c) if c.residual.is_none()));
    let PartitionKind::QuantizedAdd(a) = &parts[1].kind else { panic!("{:?}", parts[1].kind) };
    assert_eq!(parts[1].inputs, vec![yq, x]);
    assert_eq!((a.a.zero_point, a.b.scale, a.clamp), (7, 0.5, (0, 255)));
    let dq_x = fg.graph().producer(xf).unwrap();
    assert!(parts[0].ops.contains(&dq_x) && parts[1].ops.contains(&dq_x));
}

#[test]
fn half_precision_arithmetic_and_1d_windows_are_unsupported_with_a_reason() {
    let mut g = Graph::new();
    let x = g.input("x", DataType::F16, [2, 2]);
    let y = g.apply("relu", OpKind::ReLU, &[x]).unwrap();
    let z = g.apply("cast", OpKind::TypeCast(TypeCastAttrs { dtype: F32 }), &[y]).unwrap();
    let c = g.input("c", F32, [1, 1, 5]);
    let p = g
        .apply(
            "pool1d",
            OpKind::MaxPool(MaxPoolAttrs {
                kernel: vec![2],
                strides: vec![1],
                pads_begin: vec![0],
                pads_end: vec![0],
                dilations: vec![1],
                ceil_mode: false,
            }),
            &[c],
        )
        .unwrap();
    g.mark_output(z).unwrap();
    g.mark_output(p).unwrap();
    let parts = g.finalize().unwrap().get_partitions(PartitionPolicy::Fusion);
    let reasons: Vec<&str> = parts
        .iter()
        .filter_map(|p| match &p.kind {
            PartitionKind::Unsupported { reason, .. } => Some(reason.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(reasons.len(), 2, "{parts:#?}");
    assert!(reasons.iter().any(|r| r.contains("f16")) && reasons.iter().any(|r| r.contains("2-D")), "{reasons:?}");
    assert!(parts.iter().any(|p| matches!(p.kind, PartitionKind::Single(OpKind::TypeCast(_)))));
}

#[test]
fn graph_sources_use_no_codegen_unsafe_or_clock() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/graph");
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let text = std::fs::read_to_string(&path).unwrap();
        for forbidden in ["unsafe ", "cranelift_codegen", "cranelift_jit", "cranelift_frontend", "std::time", "Instant"]
        {
            assert!(!text.contains(forbidden), "{} uses `{forbidden}`", path.display());
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The reference, on values derived by hand.

/// Partitions `g` under `policy` and runs the reference on `inputs`; the graph's outputs.
fn run(g: &Graph, policy: PartitionPolicy, inputs: &[(TensorId, Value)]) -> Vec<Value> {
    let fg = g.clone().finalize().unwrap();
    let parts = fg.get_partitions(policy);
    reference::run(&fg, &parts, inputs).unwrap().into_iter().map(|(_, v)| v).collect()
}

fn kinds(g: &Graph, policy: PartitionPolicy) -> Vec<&'static str> {
    g.clone().finalize().unwrap().get_partitions(policy).iter().map(|p| p.kind.name()).collect()
}

/// `u8 x[1, 1, 2, 2]` (scale 0.5, zp 10) → 1×1 conv by `w = 3` (scale 0.25) + i32 bias 1
/// (scale 0.125) → ReLU → Quantize (scale 0.25, zp 5, u8).
fn tiny_conv() -> (Graph, TensorId) {
    let mut g = Graph::new();
    let x = g.input("x", U8, [1, 1, 2, 2]);
    let xf = g.apply("dq_x", dq(0.5, 10), &[x]).unwrap();
    let w = g.constant("w", Value::s8(&[1, 1, 1, 1], vec![3]).unwrap());
    let wf = g.apply("dq_w", dq(0.25, 0), &[w]).unwrap();
    let b = g.constant("b", Value::s32(&[1], vec![1]).unwrap());
    let bf = g.apply("dq_b", dq(0.125, 0), &[b]).unwrap();
    let y = g.apply("conv", OpKind::Convolution(ConvAttrs::unit(2)), &[xf, wf, bf]).unwrap();
    let r = g.apply("relu", OpKind::ReLU, &[y]).unwrap();
    let out = g.apply("q", q(0.25, 5, U8), &[r]).unwrap();
    g.mark_output(out).unwrap();
    (g, x)
}

#[test]
fn reference_quantized_conv_by_hand() {
    let (g, x) = tiny_conv();
    assert_eq!(kinds(&g, PartitionPolicy::Fusion), ["QuantizedConv"]);
    // acc = (x − 10)·3 + 1 = [4, 7, −2, 31]; S = 0.5·0.25/0.25 = 0.5; v = [2, 3.5, −1, 15.5];
    // round half even [2, 4, −1, 16]; + 5 = [7, 9, 4, 21]; ReLU: max(q, 5) = [7, 9, 5, 21].
    let input = [(x, Value::u8(&[1, 1, 2, 2], vec![11, 12, 9, 20]).unwrap())];
    let want = Value::u8(&[1, 1, 2, 2], vec![7, 9, 5, 21]).unwrap();
    assert_eq!(run(&g, PartitionPolicy::Fusion, &input), std::slice::from_ref(&want));
    // In floats: [0.5, 1, −0.5, 5]·0.75 + 0.125 = [0.5, 0.875, −0.25, 3.875], ReLU, / 0.25 =
    // [2, 3.5, 0, 15.5], rounded [2, 4, 0, 16] + 5: the same here.
    assert_eq!(run(&g, PartitionPolicy::Debug, &input), [want]);
}

#[test]
fn reference_fused_and_float_paths_differ_where_rounding_does() {
    // x_scale = w_scale = y_scale = 0.1 (f32 0.100000001490116), x − zp = 1, w = 5.
    // Fused: S = f32(f32(0.1·0.1) / 0.1) = 0.100000008940697; v = 5·S = 0.500000059604645,
    // which rounds to 1. Float: 0.1·(5·0.1 = 0.5) = 0.0500000007450581, / 0.1 = 0.5 exactly,
    // which rounds (half to even) to 0. (The other order, x_scale · (w_scale / y_scale) =
    // 0.100000001490116, would also give 0.5 and 0: this pins onnxruntime's order.)
    let mut g = Graph::new();
    let x = g.input("x", U8, [1, 1, 1, 1]);
    let xf = g.apply("dq_x", dq(0.1, 0), &[x]).unwrap();
    let w = g.constant("w", Value::s8(&[1, 1, 1, 1], vec![5]).unwrap());
    let wf = g.apply("dq_w", dq(0.1, 0), &[w]).unwrap();
    let y = g.apply("conv", OpKind::Convolution(ConvAttrs::unit(2)), &[xf, wf]).unwrap();
    let out = g.apply("q", q(0.1, 0, U8), &[y]).unwrap();
    g.mark_output(out).unwrap();
    let input = [(x, Value::u8(&[1, 1, 1, 1], vec![1]).unwrap())];
    assert_eq!(run(&g, PartitionPolicy::Fusion, &input), [Value::u8(&[1, 1, 1, 1], vec![1]).unwrap()]);
    assert_eq!(run(&g, PartitionPolicy::Debug, &input), [Value::u8(&[1, 1, 1, 1], vec![0]).unwrap()]);
}

#[test]
fn reference_quantized_conv_with_padding_stride_and_groups() {
    // x: 2 channels of 3×3 (zp 0, scale 1), 2 groups, each 2×2 kernel of ones (scale 1),
    // stride 2, pad 1: output 2×2 per channel; y scale 1, zp 0, s8.
    let mut g = Graph::new();
    let x = g.input("x", U8, [1, 2, 3, 3]);
    let xf = g.apply("dq_x", dq(1.0, 0), &[x]).unwrap();
    let w = g.constant("w", Value::s8(&[2, 1, 2, 2], vec![1, 1, 1, 1, 1, 1, 1, -1]).unwrap());
    let wf = g.apply("dq_w", dq(1.0, 0), &[w]).unwrap();
    let attrs = ConvAttrs { groups: 2, ..ConvAttrs::square(2, 1) };
    let y = g.apply("conv", OpKind::Convolution(attrs), &[xf, wf]).unwrap();
    let out = g.apply("q", q(1.0, 0, S8), &[y]).unwrap();
    g.mark_output(out).unwrap();
    // Channel 0 = 1..9, channel 1 = 10..18 (row-major 3×3).
    let input = [(x, Value::u8(&[1, 2, 3, 3], (1..=18).collect()).unwrap())];
    // Output (0,0) covers input rows/cols {−1, 0}: only x[0][0]. (0,1): cols {1, 2} of row 0.
    // Channel 0: [1, 2+3, 4+7, 5+6+8+9] = [1, 5, 11, 28].
    // Channel 1, taps w = [[1, 1], [1, −1]]: (0,0) sees x[0][0] at tap (1,1): −10;
    // (0,1) sees row 0 cols 1, 2 at taps (1,0), (1,1): 11 − 12 = −1;
    // (1,0) sees rows 1, 2 col 0 at taps (0,1), (1,1): 13 − 16 = −3;
    // (1,1) sees x[1][1], x[1][2], x[2][1], x[2][2] = 14 + 15 + 17 − 18 = 28.
    let want = Value::s8(&[1, 2, 2, 2], vec![1, 5, 11, 28, -10, -1, -3, 28]).unwrap();
    assert_eq!(run(&g, PartitionPolicy::Fusion, &input), std::slice::from_ref(&want));
    assert_eq!(run(&g, PartitionPolicy::Debug, &input), [want]);
}

#[test]
fn reference_quantized_matmul_by_hand() {
    for transposed in [false, true] {
        let mut g = Graph::new();
        let x = g.input("x", U8, [1, 3]);
        let xf = g.apply("dq_x", dq(1.0, 5), &[x]).unwrap();
        // W = [[1, 2], [3, 4], [5, 6]] as [K, N], or its transpose [N, K].
        let (wv, axis) = if transposed { (vec![1, 3, 5, 2, 4, 6], 0) } else { (vec![1, 2, 3, 4, 5, 6], 1) };
        let dims: &[usize] = if transposed { &[2, 3] } else { &[3, 2] };
        let w = g.constant("w", Value::s8(dims, wv).unwrap());
        let wf = g.apply("dq_w", OpKind::Dequantize(QuantParams::per_channel(axis, vec![0.5, 0.25])), &[w]).unwrap();
        let mm = OpKind::MatMul(MatMulAttrs { transpose_a: false, transpose_b: transposed });
        let y = g.apply("fc", mm, &[xf, wf]).unwrap();
        let b = g.constant("b", Value::s32(&[2], vec![1, -4]).unwrap());
        let bf = g.apply("dq_b", OpKind::Dequantize(QuantParams::per_channel(0, vec![0.5, 0.25])), &[b]).unwrap();
        let yb = g.apply("bias", OpKind::BiasAdd(BiasAddAttrs { axis: 1 }), &[y, bf]).unwrap();
        let out = g.apply("q", q(1.0, 0, S8), &[yb]).unwrap();
        g.mark_output(out).unwrap();
        assert_eq!(kinds(&g, PartitionPolicy::Fusion), ["QuantizedMatMul"]);
        // x − 5 = [0, 1, 2]; acc = [0·1 + 1·3 + 2·5, 0·2 + 1·4 + 2·6] = [13, 16];
        // + bias = [14, 12]; · S = [0.5, 0.25] → [7, 3].
        let input = [(x, Value::u8(&[1, 3], vec![5, 6, 7]).unwrap())];
        assert_eq!(run(&g, PartitionPolicy::Fusion, &input), [Value::s8(&[1, 2], vec![7, 3]).unwrap()], "{transposed}");
        assert_eq!(run(&g, PartitionPolicy::Debug, &input), [Value::s8(&[1, 2], vec![7, 3]).unwrap()], "{transposed}");
    }
}

#[test]
fn reference_quantized_add_by_hand() {
    for relu in [false, true] {
        let mut g = Graph::new();
        let a = g.input("a", U8, [4]);
        let b = g.input("b", U8, [4]);
        let af = g.apply("dq_a", dq(0.5, 10), &[a]).unwrap();
        let bf = g.apply("dq_b", dq(0.25, 1), &[b]).unwrap();
        let mut s = g.apply("add", OpKind::Add, &[af, bf]).unwrap();
        if relu {
            s = g.apply("relu", OpKind::ReLU, &[s]).unwrap();
        }
        let out = g.apply("q", q(1.0, 0, S8), &[s]).unwrap();
        g.mark_output(out).unwrap();
        assert_eq!(kinds(&g, PartitionPolicy::Fusion), ["QuantizedAdd"]);
        // r_a = 0.5, r_b = 0.25, fixed = 0 − (0.5·10 + 0.25·1) = −5.25;
        // v = a·0.5 + (b·0.25 − 5.25): (11, 1) → 0.5 → 0; (13, 1) → 1.5 → 2;
        // (2, 1) → −4; (10, 0) → −0.25 → 0.
        let input =
            [(a, Value::u8(&[4], vec![11, 13, 2, 10]).unwrap()), (b, Value::u8(&[4], vec![1, 1, 1, 0]).unwrap())];
        let want = if relu { vec![0, 2, 0, 0] } else { vec![0, 2, -4, 0] };
        assert_eq!(run(&g, PartitionPolicy::Fusion, &input), [Value::s8(&[4], want).unwrap()], "relu {relu}");
    }
}

#[test]
fn reference_quantized_add_rounds_after_adding_the_zero_point() {
    // a = b = 6 at scale 0.125 (zp 0), y scale 1, zp 7: v = 6·0.125 + (6·0.125 + 7) = 8.5,
    // which rounds half to even to 8; the float path rounds 1.5 to 2 first, then adds 7: 9.
    let mut g = Graph::new();
    let a = g.input("a", U8, [1]);
    let af = g.apply("dq_a", dq(0.125, 0), &[a]).unwrap();
    let bf = g.apply("dq_b", dq(0.125, 0), &[a]).unwrap();
    let s = g.apply("add", OpKind::Add, &[af, bf]).unwrap();
    let out = g.apply("q", q(1.0, 7, U8), &[s]).unwrap();
    g.mark_output(out).unwrap();
    let input = [(a, Value::u8(&[1], vec![6]).unwrap())];
    assert_eq!(run(&g, PartitionPolicy::Fusion, &input), [Value::u8(&[1], vec![8]).unwrap()]);
    assert_eq!(run(&g, PartitionPolicy::Debug, &input), [Value::u8(&[1], vec![9]).unwrap()]);
}

#[test]
fn reference_quantized_pools_by_hand() {
    let mut g = Graph::new();
    let x = g.input("x", U8, [1, 2, 2, 2]);
    // Dequantize → MaxPool → Quantize with the same parameters: integers.
    let xf = g.apply("dq", dq(0.5, 1), &[x]).unwrap();
    let p = g.apply("pool", OpKind::MaxPool(MaxPoolAttrs::square(2, 1, 0)), &[xf]).unwrap();
    let pq = g.apply("q", q(0.5, 1, U8), &[p]).unwrap();
    // Dequantize → GlobalAveragePool → Quantize.
    let xf2 = g.apply("dq2", dq(0.5, 1), &[x]).unwrap();
    let a = g.apply("gap", OpKind::GlobalAveragePool, &[xf2]).unwrap();
    let aq = g.apply("q2", q(0.25, 3, U8), &[a]).unwrap();
    g.mark_output(pq).unwrap();
    g.mark_output(aq).unwrap();
    assert_eq!(kinds(&g, PartitionPolicy::Fusion), ["QuantizedMaxPool", "QuantizedGlobalAvgPool"]);
    let input = [(x, Value::u8(&[1, 2, 2, 2], vec![1, 2, 4, 3, 10, 10, 10, 11]).unwrap())];
    // Max: [4, 11]. Average: P = 4, S = 0.5 / (0.25·4) = 0.5;
    // channel 0: (1 + 2 + 4 + 3 − 4) · 0.5 = 3 → 6; channel 1: (41 − 4) · 0.5 = 18.5 → 18 → 21.
    let got = run(&g, PartitionPolicy::Fusion, &input);
    assert_eq!(got, [Value::u8(&[1, 2, 1, 1], vec![4, 11]).unwrap(), Value::u8(&[1, 2, 1, 1], vec![6, 21]).unwrap()]);
    // In floats the average of channel 1 is 37·0.5/4 = 4.625, / 0.25 = 18.5 → 18 + 3: the same.
    assert_eq!(run(&g, PartitionPolicy::Debug, &input), got);
}

#[test]
fn reference_float_ops_by_hand() {
    let mut g = Graph::new();
    let x = g.input("x", F32, [1, 1, 2, 3]);
    // AvgPool 2×2, stride 1, pad 1 on the left/top only; count_include_pad on and off.
    let pool = |include: bool| AvgPoolAttrs {
        kernel: vec![2, 2],
        strides: vec![1, 1],
        pads_begin: vec![1, 1],
        pads_end: vec![0, 0],
        ceil_mode: false,
        count_include_pad: include,
    };
    let avg_in = g.apply("avg_in", OpKind::AvgPool(pool(true)), &[x]).unwrap();
    let avg_ex = g.apply("avg_ex", OpKind::AvgPool(pool(false)), &[x]).unwrap();
    let mx = g
        .apply("max", OpKind::MaxPool(MaxPoolAttrs { pads_end: vec![0, 0], ..MaxPoolAttrs::square(2, 1, 1) }), &[x])
        .unwrap();
    let t = g.apply("t", OpKind::StaticTranspose(TransposeAttrs { perm: vec![0, 1, 3, 2] }), &[x]).unwrap();
    let mean = g.apply("mean", OpKind::ReduceMean(ReduceMeanAttrs { axes: vec![-1], keep_dims: false }), &[x]).unwrap();
    let clip = g.apply("clip", OpKind::Clip(ClipAttrs { min: 1.5, max: 4.0 }), &[x]).unwrap();
    let row = g.constant("row", Value::f32(&[3], vec![10.0, 20.0, 30.0]).unwrap());
    let add = g.apply("add", OpKind::Add, &[x, row]).unwrap();
    let h = g.apply("to_f16", OpKind::TypeCast(TypeCastAttrs { dtype: DataType::F16 }), &[x]).unwrap();
    for out in [avg_in, avg_ex, mx, t, mean, clip, add, h] {
        g.mark_output(out).unwrap();
    }
    // x = [[1, 2, 3], [4, 5, 6]].
    let input = [(x, Value::f32(&[1, 1, 2, 3], vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]).unwrap())];
    let got = run(&g, PartitionPolicy::Fusion, &input);
    let f = |dims: &[usize], v: Vec<f32>| Value::f32(dims, v).unwrap();
    // Windows (rows, cols) start at −1: output (i, j) covers rows i−1..i, cols j−1..j.
    // Sums: (0,0) 1; (0,1) 1+2; (0,2) 2+3; (1,0) 1+4; (1,1) 1+2+4+5; (1,2) 2+3+5+6.
    // With padding every window counts 4; without, the taps inside: 1, 2, 2, 2, 4, 4.
    assert_eq!(got[0], f(&[1, 1, 2, 3], vec![0.25, 0.75, 1.25, 1.25, 3.0, 4.0]));
    assert_eq!(got[1], f(&[1, 1, 2, 3], vec![1.0, 1.5, 2.5, 2.5, 3.0, 4.0]));
    assert_eq!(got[2], f(&[1, 1, 2, 3], vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]));
    assert_eq!(got[3], f(&[1, 1, 3, 2], vec![1.0, 4.0, 2.0, 5.0, 3.0, 6.0]));
    assert_eq!(got[4], f(&[1, 1, 2], vec![2.0, 5.0]));
    assert_eq!(got[5], f(&[1, 1, 2, 3], vec![1.5, 2.0, 3.0, 4.0, 4.0, 4.0]));
    assert_eq!(got[6], f(&[1, 1, 2, 3], vec![11.0, 22.0, 33.0, 14.0, 25.0, 36.0]));
    assert_eq!(got[7].dtype(), DataType::F16);
}

#[test]
fn reference_quantize_and_dequantize_by_hand() {
    let mut g = Graph::new();
    let x = g.input("x", F32, [6]);
    let qx = g.apply("q", q(0.5, 3, S8), &[x]).unwrap();
    let back = g.apply("dq", dq(0.5, 3), &[qx]).unwrap();
    g.mark_output(qx).unwrap();
    g.mark_output(back).unwrap();
    // x / 0.5 = [0.5, 1.5, −0.5, 200, −inf, NaN] → half to even [0, 2, −0, 200, −inf, NaN]
    // + 3, saturated to s8: [3, 5, 3, 127, −128, −128] (NaN gives the low bound).
    let input = [(x, Value::f32(&[6], vec![0.25, 0.75, -0.25, 100.0, f32::NEG_INFINITY, f32::NAN]).unwrap())];
    let got = run(&g, PartitionPolicy::Fusion, &input);
    assert_eq!(got[0], Value::s8(&[6], vec![3, 5, 3, 127, -128, -128]).unwrap());
    // f32(q − 3)·0.5.
    assert_eq!(got[1], Value::f32(&[6], vec![0.0, 1.0, 0.0, 62.0, -65.5, -65.5]).unwrap());
}

#[test]
fn reference_rejects_wrong_inputs() {
    let (g, x) = tiny_conv();
    let fg = g.finalize().unwrap();
    let parts = fg.get_partitions(PartitionPolicy::Fusion);
    let e = reference::run(&fg, &parts, &[(x, Value::s8(&[1, 1, 2, 2], vec![0; 4]).unwrap())]).unwrap_err();
    assert!(matches!(e, ReferenceError::InputDType { expected: U8, found: S8, .. }), "{e}");
    let e = reference::run(&fg, &parts, &[(x, Value::u8(&[1, 1, 2, 3], vec![0; 6]).unwrap())]).unwrap_err();
    assert!(matches!(e, ReferenceError::InputShape { .. }), "{e}");
    let e = reference::run(&fg, &parts, &[]).unwrap_err();
    assert!(matches!(e, ReferenceError::MissingInput { .. }), "{e}");
    let w = fg.graph().tensors().find(|(_, t)| t.name == "w").map(|(id, _)| id).unwrap();
    let e = reference::run(&fg, &parts, &[(w, Value::s8(&[1, 1, 1, 1], vec![0]).unwrap())]).unwrap_err();
    assert!(matches!(e, ReferenceError::NotAnInput { .. }), "{e}");
}

#[test]
fn reference_checks_unknown_dimensions_with_the_concrete_values() {
    // A batch dimension unknown until run time.
    let mut g = Graph::new();
    let x = g.input("x", F32, vec![Dim::Unknown, Dim::Known(2)]);
    let y = g.apply("relu", OpKind::ReLU, &[x]).unwrap();
    g.mark_output(y).unwrap();
    let out =
        run(&g, PartitionPolicy::Debug, &[(x, Value::f32(&[3, 2], vec![-1.0, 1.0, -2.0, 2.0, 0.0, -0.0]).unwrap())]);
    assert_eq!(out[0].dims(), [3, 2]);
    assert!(out[0].bits_eq(&Value::f32(&[3, 2], vec![0.0, 1.0, 0.0, 2.0, 0.0, -0.0]).unwrap()));
}

#[test]
fn partitions_print_one_line_each_with_the_ops_they_fuse() {
    let net = conv_net(true);
    let fg = net.graph.finalize().unwrap();
    let parts = fg.get_partitions(PartitionPolicy::Fusion);
    let text = fg.display_partitions(&parts);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2, "{text}");
    assert!(
        lines[0].starts_with("p0 QuantizedConv") && lines[0].contains("[dq_x, dq_w, conv, dq_b, bias, relu, q]"),
        "{text}"
    );
    assert!(lines[1].starts_with("p1 QuantizedMaxPool") && lines[1].contains("[pool]"), "{text}");
    assert_eq!(fg.display_ops().lines().count(), 8);
}

/// A random quantized conv (any groups, stride, pad, dilation; bias; ReLU or Clip or none)
/// followed by a quantized Add of its result and a GlobalAveragePool on a 2×2 image, all with
/// power-of-two scales: then every float operation of the Debug path is exact and the fused
/// integer formulas must give the same integers.
#[derive(Clone, Debug)]
struct PowerOfTwoNet {
    c: usize,
    oc_per_group: usize,
    groups: usize,
    k: usize,
    stride: i64,
    pad: i64,
    dilation: i64,
    act: u8,
    bias: bool,
    exps: [i32; 4],
    zps: [i32; 3],
    seed: u64,
}

fn power_of_two_net() -> impl Strategy<Value = PowerOfTwoNet> {
    (
        (1usize..4, 1usize..3, 1usize..3, 1usize..4),
        (1i64..3, 0i64..2, 1i64..3, 0u8..3, any::<bool>()),
        ([-6i32..-1, -4i32..0, -3i32..3, -3i32..3], [0i32..20, 0i32..20, 0i32..20], any::<u64>()),
    )
        .prop_map(|((c, oc_per_group, groups, k), (stride, pad, dilation, act, bias), (exps, zps, seed))| {
            PowerOfTwoNet { c, oc_per_group, groups, k, stride, pad, dilation, act, bias, exps, zps, seed }
        })
}

fn pow2(e: i32) -> f32 {
    2f32.powi(e)
}

impl PowerOfTwoNet {
    /// The graph, its input and the input value (spatial 5×5, or as the window needs).
    fn build(&self) -> Option<(Graph, TensorId, Value)> {
        let (c, oc) = (self.c * self.groups, self.oc_per_group * self.groups);
        let [ex, ew, ey, ez] = self.exps;
        let [zx, zy, zz] = self.zps;
        let mut r = self.seed;
        let mut next = move || {
            r = r.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (r >> 33) as u32
        };
        let mut g = Graph::new();
        let x = g.input("x", U8, [1, c, 5, 5]);
        let xf = g.apply("dq_x", dq(pow2(ex), zx), &[x]).ok()?;
        let wdims = [oc, self.c, self.k, self.k];
        let n: usize = wdims.iter().product();
        let w = g.constant("w", Value::s8(&wdims, (0..n).map(|_| next() as i8).collect()).unwrap());
        let w_scales: Vec<f32> = (0..oc).map(|i| pow2(ew - (i % 3) as i32)).collect();
        let wf = g.apply("dq_w", OpKind::Dequantize(QuantParams::per_channel(0, w_scales.clone())), &[w]).ok()?;
        let mut ins = vec![xf, wf];
        if self.bias {
            let b =
                g.constant("b", Value::s32(&[oc], (0..oc).map(|_| (next() % 2001) as i32 - 1000).collect()).unwrap());
            let b_scales = w_scales.iter().map(|s| pow2(ex) * s).collect();
            ins.push(g.apply("dq_b", OpKind::Dequantize(QuantParams::per_channel(0, b_scales)), &[b]).ok()?);
        }
        let attrs = ConvAttrs {
            strides: vec![self.stride; 2],
            pads_begin: vec![self.pad; 2],
            pads_end: vec![self.pad; 2],
            dilations: vec![self.dilation; 2],
            groups: self.groups as i64,
        };
        let mut y = g.apply("conv", OpKind::Convolution(attrs), &ins).ok()?;
        y = match self.act {
            0 => y,
            1 => g.apply("relu", OpKind::ReLU, &[y]).ok()?,
            _ => g.apply("clip", OpKind::Clip(ClipAttrs { min: -1.0, max: 6.0 }), &[y]).ok()?,
        };
        let yq = g.apply("q", q(pow2(ey), zy, U8), &[y]).ok()?;
        // A residual-style Add of the conv's output and itself through another Dequantize.
        let yf = g.apply("dq_y", dq(pow2(ey), zy), &[yq]).ok()?;
        let yf2 = g.apply("dq_y2", dq(pow2(ey), zy), &[yq]).ok()?;
        let s = g.apply("add", OpKind::Add, &[yf, yf2]).ok()?;
        // An even zero point: QAdd rounds `v + zp` (onnxruntime's AVX2 kernel folds the zero
        // point in before rounding), which equals rounding `v` first only for even ones.
        let sq = g.apply("q_add", q(pow2(ez), zz / 2 * 2, S8), &[s]).ok()?;
        g.mark_output(sq).ok()?;
        let value = Value::u8(&[1, c, 5, 5], (0..c * 25).map(|_| next() as u8).collect()).unwrap();
        Some((g, x, value))
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    #[test]
    fn fused_integer_formulas_equal_exact_float_paths(net in power_of_two_net()) {
        let Some((g, x, value)) = net.build() else { return Ok(()) };
        let fused_kinds = kinds(&g, PartitionPolicy::Fusion);
        prop_assert_eq!(fused_kinds, ["QuantizedConv", "QuantizedAdd"]);
        let input = [(x, value)];
        prop_assert_eq!(run(&g, PartitionPolicy::Fusion, &input), run(&g, PartitionPolicy::Debug, &input));
    }
}

#[test]
fn one_partition_runs_alone_on_its_input_values() {
    let (g, _) = tiny_conv();
    let fg = g.finalize().unwrap();
    let parts = fg.get_partitions(PartitionPolicy::Fusion);
    let x = Value::u8(&[1, 1, 2, 2], vec![11, 12, 9, 20]).unwrap();
    let got = reference::run_partition(&fg, &parts[0], std::slice::from_ref(&x)).unwrap();
    assert_eq!(got, Value::u8(&[1, 1, 2, 2], vec![7, 9, 5, 21]).unwrap());
    let e = reference::run_partition(&fg, &parts[0], &[x.clone(), x]).unwrap_err();
    assert!(matches!(e, ReferenceError::Partition { .. }), "{e}");
    let e = reference::run_partition(&fg, &parts[0], &[Value::s8(&[1, 1, 2, 2], vec![0; 4]).unwrap()]).unwrap_err();
    assert!(e.to_string().contains("u8"), "{e}");
}

#[test]
fn reference_dilation_and_ceil_mode_by_hand() {
    let mut g = Graph::new();
    let x = g.input("x", F32, [1, 1, 1, 5]);
    let w = g.constant("w", Value::f32(&[1, 1, 1, 2], vec![1.0, 10.0]).unwrap());
    let attrs = ConvAttrs { dilations: vec![1, 2], ..ConvAttrs::unit(2) };
    let y = g.apply("conv", OpKind::Convolution(attrs), &[x, w]).unwrap();
    let pool = MaxPoolAttrs {
        kernel: vec![1, 2],
        strides: vec![1, 2],
        pads_begin: vec![0, 0],
        pads_end: vec![0, 0],
        dilations: vec![1, 1],
        ceil_mode: true,
    };
    let p = g.apply("pool", OpKind::MaxPool(pool), &[x]).unwrap();
    g.mark_output(y).unwrap();
    g.mark_output(p).unwrap();
    let got =
        run(&g, PartitionPolicy::Fusion, &[(x, Value::f32(&[1, 1, 1, 5], vec![1.0, 2.0, 3.0, 4.0, 5.0]).unwrap())]);
    // Taps 2 apart: x[i] + 10·x[i + 2] for i = 0, 1, 2.
    assert_eq!(got[0], Value::f32(&[1, 1, 1, 3], vec![31.0, 42.0, 53.0]).unwrap());
    // ceil((5 − 2) / 2) + 1 = 3 windows: {0, 1}, {2, 3}, {4} (the last tap is past the end).
    assert_eq!(got[1], Value::f32(&[1, 1, 1, 3], vec![2.0, 4.0, 5.0]).unwrap());
}

#[test]
fn a_fused_clip_clamps_to_its_quantized_bounds() {
    // x − 10 = [−10, 0, 4, 20] at scale 0.5, w = 2 at 0.5: acc = [−20, 0, 8, 40], S = 0.25/0.5.
    // v = [−10, 0, 4, 20] → + 3 = [−7, 3, 7, 23]; Clip(−1, 6) quantizes to [−2 + 3, 12 + 3] =
    // [1, 15]: [1, 3, 7, 15].
    let mut g = Graph::new();
    let x = g.input("x", U8, [1, 1, 1, 4]);
    let xf = g.apply("dq_x", dq(0.5, 10), &[x]).unwrap();
    let w = g.constant("w", Value::s8(&[1, 1, 1, 1], vec![2]).unwrap());
    let wf = g.apply("dq_w", dq(0.5, 0), &[w]).unwrap();
    let y = g.apply("conv", OpKind::Convolution(ConvAttrs::unit(2)), &[xf, wf]).unwrap();
    let c = g.apply("clip", OpKind::Clip(ClipAttrs { min: -1.0, max: 6.0 }), &[y]).unwrap();
    let out = g.apply("q", q(0.5, 3, U8), &[c]).unwrap();
    g.mark_output(out).unwrap();
    let fg = g.clone().finalize().unwrap();
    let parts = fg.get_partitions(PartitionPolicy::Fusion);
    let PartitionKind::QuantizedConv(qc) = &parts[0].kind else { panic!("{parts:#?}") };
    assert_eq!((qc.activation, qc.clamp), (Activation::Clip { min: -1.0, max: 6.0 }, (1, 15)));
    let input = [(x, Value::u8(&[1, 1, 1, 4], vec![0, 10, 14, 30]).unwrap())];
    let want = Value::u8(&[1, 1, 1, 4], vec![1, 3, 7, 15]).unwrap();
    assert_eq!(run(&g, PartitionPolicy::Fusion, &input), std::slice::from_ref(&want));
    assert_eq!(run(&g, PartitionPolicy::Debug, &input), [want]);
}

#[test]
fn quantized_add_uses_fused_multiply_adds() {
    // a: scale 0.1, zp 0; b: scale 0.07, zp 128; y: scale 0.1, zp 0. In f32: r_a = 1,
    // r_b = 0.699999988079071, fixed = −f32(r_b·128) = −89.5999984741211.
    // For a = 1, b = 203: fma(203, r_b, fixed) is 52.4999991059 exactly before rounding, so
    // 52.5 in f32; fma(1, r_a, 52.5) = 53.5, which rounds to 54.
    // Without FMA: f32(203·r_b) = 142.099990844727, + fixed = 52.4999923706, + 1 =
    // 53.4999923706, which rounds to 53.
    let mut g = Graph::new();
    let a = g.input("a", U8, [1]);
    let b = g.input("b", U8, [1]);
    let af = g.apply("dq_a", dq(0.1, 0), &[a]).unwrap();
    let bf = g.apply("dq_b", dq(0.07, 128), &[b]).unwrap();
    let s = g.apply("add", OpKind::Add, &[af, bf]).unwrap();
    let out = g.apply("q", q(0.1, 0, U8), &[s]).unwrap();
    g.mark_output(out).unwrap();
    let input = [(a, Value::u8(&[1], vec![1]).unwrap()), (b, Value::u8(&[1], vec![203]).unwrap())];
    assert_eq!(run(&g, PartitionPolicy::Fusion, &input), [Value::u8(&[1], vec![54]).unwrap()]);
}

/// `u8 x[1, 2, 3, 3]` → 1×1 conv → Quantize `q_conv` → Dequantize → Add with `Dequantize(r)`
/// (`r` of `r_dims`; the conv the Add's first operand when `conv_first`) → ReLU → Quantize.
struct SumNet {
    graph: Graph,
    x: TensorId,
    r: TensorId,
    conv_q: TensorId,
    conv_f: TensorId,
    out: TensorId,
}

fn sum_net(conv_first: bool, r_dims: [usize; 4]) -> SumNet {
    let mut g = Graph::new();
    let x = g.input("x", U8, [1, 2, 3, 3]);
    let r = g.input("r", U8, r_dims);
    let xf = g.apply("dq_x", dq(0.5, 7), &[x]).unwrap();
    let w = g.constant("w", Value::s8(&[2, 2, 1, 1], vec![2, -3, 5, 1]).unwrap());
    let wf = g.apply("dq_w", dq(0.25, 0), &[w]).unwrap();
    let y = g.apply("conv", OpKind::Convolution(ConvAttrs::unit(2)), &[xf, wf]).unwrap();
    let conv_q = g.apply("q_conv", q(0.5, 9, U8), &[y]).unwrap();
    let conv_f = g.apply("dq_y", dq(0.5, 9), &[conv_q]).unwrap();
    let rf = g.apply("dq_r", dq(0.25, 3), &[r]).unwrap();
    let operands = if conv_first { [conv_f, rf] } else { [rf, conv_f] };
    let s = g.apply("add", OpKind::Add, &operands).unwrap();
    let sr = g.apply("relu", OpKind::ReLU, &[s]).unwrap();
    let out = g.apply("q_add", q(1.0, 5, U8), &[sr]).unwrap();
    SumNet { graph: g, x, r, conv_q, conv_f, out }
}

/// Every value of the inputs of a `SumNet`, deterministic.
fn sum_inputs(net: &SumNet, r_dims: [usize; 4]) -> Vec<(TensorId, Value)> {
    let x = Value::u8(&[1, 2, 3, 3], (0..18).map(|i| (i * 37 % 256) as u8).collect()).unwrap();
    let r_len = r_dims.iter().product::<usize>();
    let r = Value::u8(&r_dims, (0..r_len).map(|i| (i * 71 % 256) as u8).collect()).unwrap();
    vec![(net.x, x), (net.r, r)]
}

#[test]
fn a_residual_add_after_the_quantize_fuses_into_the_convolution() {
    for conv_first in [true, false] {
        let mut net = sum_net(conv_first, [1, 2, 3, 3]);
        net.graph.mark_output(net.out).unwrap();
        let fg = net.graph.clone().finalize().unwrap();
        let parts = fg.get_partitions(PartitionPolicy::Fusion);
        assert_eq!(parts.len(), 1, "{parts:#?}");
        let PartitionKind::QuantizedConv(c) = &parts[0].kind else { panic!("{:?}", parts[0].kind) };
        let r = c.residual.as_ref().expect("the add is fused");
        assert_eq!(r.conv_is_a, conv_first);
        // The conv's own Quantize stays in the definition; the add's operands in graph order.
        assert_eq!((c.dst.scale, c.dst.zero_point, c.clamp), (0.5, 9, (0, 255)));
        let (conv, other) = if conv_first { (r.add.a, r.add.b) } else { (r.add.b, r.add.a) };
        assert_eq!((conv.scale, conv.zero_point, other.scale, other.zero_point), (0.5, 9, 0.25, 3));
        assert_eq!(
            (r.add.dst.scale, r.add.dst.zero_point, r.add.clamp, r.add.activation),
            (1.0, 5, (5, 255), Activation::ReLU)
        );
        assert_eq!((parts[0].inputs.clone(), parts[0].outputs.clone()), (vec![net.x, net.r], vec![net.out]));
        assert_eq!(parts[0].ops.len(), 9, "dq_x, dq_w, conv, q_conv, dq_y, dq_r, add, relu, q_add");
        // Without the sum: the conv and the add as before; the results are the same.
        let kinds_without: Vec<_> =
            fg.get_partitions(PartitionPolicy::FusionWithoutSum).iter().map(|p| p.kind.name()).collect();
        assert_eq!(kinds_without, ["QuantizedConv", "QuantizedAdd"]);
        let inputs = sum_inputs(&net, [1, 2, 3, 3]);
        let fused = run(&net.graph, PartitionPolicy::Fusion, &inputs);
        assert_eq!(fused, run(&net.graph, PartitionPolicy::FusionWithoutSum, &inputs));
    }
}

#[test]
fn a_residual_whose_intermediate_is_read_elsewhere_is_not_fused() {
    let fused_residual = |g: &Graph| {
        g.clone()
            .finalize()
            .unwrap()
            .get_partitions(PartitionPolicy::Fusion)
            .iter()
            .any(|p| matches!(&p.kind, PartitionKind::QuantizedConv(c) if c.residual.is_some()))
    };
    // The control: fused.
    let mut net = sum_net(true, [1, 2, 3, 3]);
    net.graph.mark_output(net.out).unwrap();
    assert!(fused_residual(&net.graph));
    // The conv's integers also read by a MaxPool.
    let mut net = sum_net(true, [1, 2, 3, 3]);
    let pooled = net.graph.apply("pool", OpKind::MaxPool(MaxPoolAttrs::square(1, 1, 0)), &[net.conv_q]).unwrap();
    net.graph.mark_output(net.out).unwrap();
    net.graph.mark_output(pooled).unwrap();
    assert!(!fused_residual(&net.graph));
    let kinds: Vec<_> = kinds(&net.graph, PartitionPolicy::Fusion);
    assert!(kinds.contains(&"QuantizedAdd"), "{kinds:?}");
    let inputs = sum_inputs(&net, [1, 2, 3, 3]);
    assert_eq!(
        run(&net.graph, PartitionPolicy::Fusion, &inputs),
        run(&net.graph, PartitionPolicy::FusionWithoutSum, &inputs)
    );
    // The conv's integers a graph output.
    let mut net = sum_net(true, [1, 2, 3, 3]);
    net.graph.mark_output(net.out).unwrap();
    net.graph.mark_output(net.conv_q).unwrap();
    assert!(!fused_residual(&net.graph));
    // The dequantized conv read by another op too.
    let mut net = sum_net(false, [1, 2, 3, 3]);
    let other = net.graph.apply("relu2", OpKind::ReLU, &[net.conv_f]).unwrap();
    net.graph.mark_output(net.out).unwrap();
    net.graph.mark_output(other).unwrap();
    assert!(!fused_residual(&net.graph));
    // An operand that broadcasts.
    let mut net = sum_net(true, [1, 2, 1, 1]);
    net.graph.mark_output(net.out).unwrap();
    assert!(!fused_residual(&net.graph));
    let inputs = sum_inputs(&net, [1, 2, 1, 1]);
    assert_eq!(
        run(&net.graph, PartitionPolicy::Fusion, &inputs),
        run(&net.graph, PartitionPolicy::FusionWithoutSum, &inputs)
    );
}
