//! The residual add fused into a quantized convolution's requantization (`QConvSpec::sum`):
//! a convolution followed by a QLinearAdd with a second input, partitioned with the add fused
//! (`Fusion`) and without (`FusionWithoutSum`), at every ISA level this CPU has. The fused
//! partition runs as one compiled convolution whose epilogue computes the add (a map kernel
//! above the scalar level); its output equals, bit for bit, the unfused engine's and the graph
//! reference's unfused partitions (the convolution, then `native::add`'s formula).

use tensorlift::engine::{self, Kernel};
use tensorlift::graph::{
    BiasAddAttrs, ConvAttrs, Data, DataType, FinalizedGraph, Graph, OpKind, PartitionPolicy, QuantParams,
    QuantizeAttrs, Value, reference,
};
use tensorlift::{CompileOptions, IsaLevel, Target};

use crate::engine::{held, input};

/// One case: channels (16: whole zmm vectors; 24 and 40: a partial one; 72: groups of four),
/// the add's operand order, ReLUs, and whether the scales make most outputs saturate.
#[derive(Clone, Copy, Debug)]
struct Case {
    channels: usize,
    act: DataType,
    conv_is_a: bool,
    relu: bool,
    saturating: bool,
    stride: usize,
}

/// `x → Dequantize → Conv 3×3 (+bias) [→ ReLU] → Quantize → Dequantize → Add(·, Dequantize(r))
/// [→ ReLU] → Quantize → Dequantize → output`, with `r` a second input of the convolution's
/// output shape; the add's operands in the case's order.
fn graph(case: Case, seed: u64) -> FinalizedGraph {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15).wrapping_add(7);
    let mut next = move |m: u32| {
        state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        ((state >> 33) as u32) % m
    };
    let act = case.act;
    let lo = if act == DataType::U8 { 0 } else { -128 };
    let zp = |next: &mut dyn FnMut(u32) -> u32| lo + next(256) as i32;
    // Saturating: a destination scale far below the values' spread.
    let shrink = if case.saturating { 16.0 } else { 1.0 };
    let scale = |next: &mut dyn FnMut(u32) -> u32| (1 + next(1000)) as f32 / 4096.0;
    let dq = |s: f32, z: i32| OpKind::Dequantize(QuantParams::per_tensor(s, z));
    let q = |s: f32, z: i32| OpKind::Quantize(QuantizeAttrs { params: QuantParams::per_tensor(s, z), dtype: act });
    let c = case.channels;
    let (h, w) = (9, 11);
    let (oh, ow) = ((h - 1) / case.stride + 1, (w - 1) / case.stride + 1);
    let mut g = Graph::new();
    let x = g.input("x", act, [1, c, h, w]);
    let r = g.input("r", act, [1, c, oh, ow]);
    let (sx, zx) = (scale(&mut next), zp(&mut next));
    let xf = g.apply("dq_x", dq(sx, zx), &[x]).unwrap();
    let weights: Vec<i8> = (0..c * c * 9).map(|_| (next(255) as i32 - 127) as i8).collect();
    let ws: Vec<f32> = (0..c).map(|_| scale(&mut next) / 8.0).collect();
    let wt = g.constant("w", Value::s8(&[c, c, 3, 3], weights).unwrap());
    let wf = g.apply("dq_w", OpKind::Dequantize(QuantParams::per_channel(0, ws.clone())), &[wt]).unwrap();
    let y = g.apply("conv", OpKind::Convolution(ConvAttrs::square(case.stride as i64, 1)), &[xf, wf]).unwrap();
    let bias: Vec<i32> = (0..c).map(|_| next(20001) as i32 - 10000).collect();
    let b = g.constant("b", Value::s32(&[c], bias).unwrap());
    let bscales: Vec<f32> = ws.iter().map(|w| sx * w).collect();
    let bf = g.apply("dq_b", OpKind::Dequantize(QuantParams::per_channel(0, bscales)), &[b]).unwrap();
    let mut y = g.apply("bias", OpKind::BiasAdd(BiasAddAttrs { axis: 1 }), &[y, bf]).unwrap();
    if case.relu {
        y = g.apply("relu", OpKind::ReLU, &[y]).unwrap();
    }
    let (sy, zy) = (scale(&mut next) * 4.0 / shrink, zp(&mut next));
    let yq = g.apply("q_conv", q(sy, zy), &[y]).unwrap();
    let yf = g.apply("dq_conv", dq(sy, zy), &[yq]).unwrap();
    let (sr, zr) = (scale(&mut next) * 4.0, zp(&mut next));
    let rf = g.apply("dq_r", dq(sr, zr), &[r]).unwrap();
    let operands = if case.conv_is_a { [yf, rf] } else { [rf, yf] };
    let mut sum = g.apply("add", OpKind::Add, &operands).unwrap();
    if case.relu {
        sum = g.apply("relu_add", OpKind::ReLU, &[sum]).unwrap();
    }
    let (sa, za) = (scale(&mut next) * 4.0 / shrink, zp(&mut next));
    let added = g.apply("q_add", q(sa, za), &[sum]).unwrap();
    let out = g.apply("dq_out", dq(sa, za), &[added]).unwrap();
    g.mark_output(out).unwrap();
    g.finalize().unwrap()
}

fn cases() -> Vec<Case> {
    let mut cases = Vec::new();
    for (i, channels) in [16, 24, 40, 72].into_iter().enumerate() {
        for act in [DataType::U8, DataType::S8] {
            for conv_is_a in [true, false] {
                let relu = (i + conv_is_a as usize).is_multiple_of(2);
                let saturating = !i.is_multiple_of(2) || !conv_is_a;
                let stride = if channels == 40 { 2 } else { 1 };
                cases.push(Case { channels, act, conv_is_a, relu, saturating, stride });
            }
        }
    }
    cases
}

#[test]
fn the_fused_residual_add_equals_the_unfused_partitions_at_every_level() {
    let levels = crate::skip::levels_here_for(IsaLevel::ALL, "the fused residual add");
    for (k, case) in cases().into_iter().enumerate() {
        let graph = graph(case, k as u64);
        let inputs: Vec<Value> = graph
            .graph()
            .inputs()
            .iter()
            .enumerate()
            .map(|(i, &t)| {
                let lt = graph.tensor(t).unwrap();
                input(lt.dtype, &lt.shape.concrete().unwrap(), 100 * k as u64 + i as u64)
            })
            .collect();
        let named: Vec<_> = graph.graph().inputs().iter().copied().zip(inputs.clone()).collect();
        let unfused = graph.get_partitions(PartitionPolicy::FusionWithoutSum);
        let expected = reference::run(&graph, &unfused, &named).unwrap();
        for &level in &levels {
            let what = format!("{case:?} at {level}");
            let options =
                CompileOptions { target: Target::Level(level), threads: Some(1), ..CompileOptions::default() };
            let mut fused = engine::compile(graph.clone(), graph.get_partitions(PartitionPolicy::Fusion), &options)
                .unwrap_or_else(|e| panic!("{what}: {e}"));
            fused.keep_values();
            let convs: Vec<_> = fused
                .steps()
                .iter()
                .filter_map(|s| match &s.kernel {
                    Kernel::Conv(c) => Some(c),
                    _ => None,
                })
                .collect();
            assert_eq!(convs.len(), 1, "{what}: one compiled convolution");
            assert!(convs[0].has_sum(), "{what}: the add is in the convolution's epilogue");
            assert_eq!(
                convs[0].uses_map_kernel(),
                level >= IsaLevel::Avx2,
                "{what}: the epilogue is a map kernel above the scalar level"
            );
            assert!(
                !fused.steps().iter().any(|s| matches!(s.kernel, Kernel::Add { .. } | Kernel::Sum { .. })),
                "{what}: no separate add"
            );
            let (found, _) = fused.execute(&inputs).unwrap_or_else(|e| panic!("{what}: {e}"));
            let mut plain = engine::compile(graph.clone(), unfused.clone(), &options).unwrap();
            let (unfused_out, _) = plain.execute(&inputs).unwrap();
            assert_eq!(found.len(), 1);
            assert!(found[0].bits_eq(&expected[0].1), "{what}: the fused output differs from the reference's");
            assert!(found[0].bits_eq(&unfused_out[0]), "{what}: the fused output differs from the unfused engine's");
            // Saturating cases reach both ends of the type (the fused clamps are exercised).
            if case.saturating && !case.relu {
                let step = fused.steps().iter().find(|s| matches!(s.kernel, Kernel::Conv(_))).unwrap();
                let out = fused.value(step.partition.outputs[0]).unwrap();
                let ints: Vec<i32> = match out.data() {
                    Data::U8(v) => v.iter().map(|&x| i32::from(x)).collect(),
                    Data::S8(v) => v.iter().map(|&x| i32::from(x)).collect(),
                    other => panic!("{what}: an output of {other:?}"),
                };
                let (lo, hi) = if case.act == DataType::U8 { (0, 255) } else { (-128, 127) };
                assert!(ints.contains(&lo) && ints.contains(&hi), "{what}: both bounds reached");
            }
            // The fused step itself against the reference's evaluation of its partition.
            for step in fused.steps() {
                let ins: Vec<Value> =
                    step.partition.inputs.iter().map(|&t| held(&fused, &inputs, t).unwrap()).collect();
                let want = reference::run_partition(fused.graph(), &step.partition, &ins).unwrap();
                let got = fused.value(step.partition.outputs[0]).unwrap();
                assert!(got.bits_eq(&want), "{what}: partition {} differs", step.partition.id);
            }
        }
    }
}

/// A layer with a fused add runs only with its sum input, of the destination's length; one
/// without takes none: typed errors, no call.
#[test]
fn the_sum_input_is_checked_before_the_call() {
    use schedules::quant::QLinearAdd;
    use tensorlift::layer::{ActQuant, LayerError, QConvSpec, compile_qconv};
    let act = |zero_point| ActQuant { dtype: ir::DType::U8, scale: 0.05, zero_point };
    let spec = QConvSpec {
        name: "sum".into(),
        src: act(3),
        h: 5,
        w: 6,
        ic: 8,
        oc: 16,
        kh: 3,
        kw: 3,
        stride: (1, 1),
        pads: [1; 4],
        weights: (0..16 * 8 * 9).map(|i| (i % 7) as i8 - 3).collect(),
        weight_scales: vec![0.01],
        bias: None,
        dst: act(9),
        relu: false,
        sum: Some(QLinearAdd { ra: 0.5, rb: 0.75, fixed: 2.0, dst_is_a: false, clamp: (0, 255) }),
    };
    let level = *crate::skip::levels_here(IsaLevel::ALL).last().expect("the scalar level");
    let options = CompileOptions { target: Target::Level(level), threads: Some(1), ..CompileOptions::default() };
    let fused = compile_qconv(&spec, None, &options).unwrap();
    assert!(fused.has_sum());
    let (src, sum, mut dst) = (vec![7u8; 5 * 6 * 8], vec![1u8; 5 * 6 * 16], vec![0u8; 5 * 6 * 16]);
    assert!(matches!(fused.run(&src, &mut dst), Err(LayerError::Spec(_))));
    assert!(matches!(fused.run_with_sum(&src, Some(&sum[1..]), &mut dst), Err(LayerError::Spec(_))));
    assert_eq!(dst, vec![0u8; dst.len()], "nothing written");
    fused.run_with_sum(&src, Some(&sum), &mut dst).unwrap();
    let plain = compile_qconv(&QConvSpec { sum: None, ..spec }, None, &options).unwrap();
    assert!(!plain.has_sum());
    assert!(matches!(plain.run_with_sum(&src, Some(&sum), &mut dst), Err(LayerError::Spec(_))));
}
