//! The x86 int8 schedules as traces: each replays onto a fresh definition of its workload (with
//! the GEMM intrinsics rebuilt by `intrin::resolve`, the requantization taken from the fresh
//! definition) to the same lowered IR, also through JSON.

use ir::intrin::TensorIntrin;
use ir::schedule::{Schedule, create_schedule};
use ir::te::{placeholder, placeholder_vec};
use ir::trace::{IntrinRef, Trace};
use ir::workload::workload_key;
use ir::{DType, Tensor};
use tensorlift_schedules::intrin::resolve;
use tensorlift_schedules::nn::{matmul_packed, pack_b_vnni};
use tensorlift_schedules::ops::GemmOperands;
use tensorlift_schedules::ops::{Conv2dParams, Layout, conv2d_nchw_int8, dense_int8 as ops_dense_int8};
use tensorlift_schedules::resnet18::{self, CONV_LAYERS, ConvLayer, FC, Layer};
use tensorlift_schedules::x86::{GemmInt8Knobs, schedule_gemm_int8};
use tensorlift_schedules::x86_conv::{
    Accumulate, Conv2dInt8, Conv2dInt8Knobs, CoreRate, Packing, conv2d_int8, default_conv_knobs, default_dense_knobs,
    dense_int8,
};

fn lower(s: &Schedule, args: &[Tensor]) -> String {
    ir::lower::lower(s, &args.iter().collect::<Vec<_>>(), "f").unwrap().to_string()
}

/// Replays `trace` (after a JSON round trip) onto `outputs` and lowers it with `args`.
fn replay(trace: &Trace, outputs: &[&Tensor], args: &[Tensor]) -> String {
    replay_with(trace, outputs, args, &resolve)
}

fn replay_with(
    trace: &Trace,
    outputs: &[&Tensor],
    args: &[Tensor],
    resolver: &dyn Fn(&IntrinRef) -> Option<TensorIntrin>,
) -> String {
    let json = serde_json::to_string(trace).unwrap();
    let parsed: Trace = serde_json::from_str(&json).unwrap();
    assert_eq!(&parsed, trace);
    let s = parsed.replay(outputs, resolver).unwrap();
    assert_eq!(&s.trace(), trace);
    lower(&s, args)
}

/// `conv2d_int8` of `layer` with the resnet-18 quantization, names prefixed by `prefix`.
fn conv(layer: &ConvLayer, layout: Layout, knobs: Conv2dInt8Knobs, operands: GemmOperands, prefix: &str) -> Conv2dInt8 {
    let q = resnet18::quantization(Layer::Conv(*layer), 1).unwrap();
    let dims = layout.shape([1, layer.ic, layer.h, layer.w]);
    let src = placeholder(dims, DType::U8, &format!("{prefix}src")).unwrap();
    let wei = placeholder([layer.oc, layer.ic, layer.k, layer.k], DType::I8, &format!("{prefix}wei")).unwrap();
    let bias = placeholder([layer.oc], DType::F32, &format!("{prefix}bias")).unwrap();
    let conv = Conv2dParams { stride: layer.stride, pad: layer.pad };
    conv2d_int8(
        &src,
        &wei,
        Some(&bias),
        None,
        conv,
        &q.attrs,
        layout,
        knobs,
        operands,
        &format!("{prefix}{}", layer.name),
    )
    .unwrap()
}

/// The schedule's trace replays onto a fresh, identically named definition to the same IR, and
/// onto a renamed one, which has the same workload key.
fn check(build: &dyn Fn(&str) -> Conv2dInt8) {
    let first = build("");
    let trace = first.schedule.trace();
    assert!(trace.steps.iter().any(|s| s.primitive() == "tensorize"));
    // The GEMM micro-kernels from `resolve`, the layer's requantization from its definition.
    let resolver = |layer: &Conv2dInt8| {
        let requantize = layer.layer.requantize_row.clone();
        move |r: &IntrinRef| resolve(r).or_else(|| r.matches(&requantize).then(|| requantize.clone()))
    };
    let fresh = build("");
    assert_eq!(
        replay_with(&trace, &[&fresh.layer.output], &fresh.args, &resolver(&fresh)),
        lower(&first.schedule, &first.args)
    );
    let renamed = build("other_");
    assert_eq!(workload_key(&[&renamed.layer.output]), workload_key(&[&first.layer.output]));
    let s = trace.replay(&[&renamed.layer.output], &resolver(&renamed)).unwrap();
    lower(&s, &renamed.args);
}

#[test]
fn conv2d_int8_schedules_replay() {
    // The stem (3 channels, 7×7, stride 2), a 3×3, a 1×1 stride 2 and the last 3×3 layer, in
    // both layouts, with and without the thread pool, u8, i8 (sign transfer) and i16
    // (pre-widened) sources; the defaults compute a row of accumulators at a time (R1), with
    // the source rows they read (R2, R4), or all of them (R11).
    for (i, layer) in [0, 1, 3, 10].map(|i| &CONV_LAYERS[i]).into_iter().enumerate() {
        let layout = if i % 2 == 0 { Layout::Nhwc } else { Layout::Nchw };
        let mut knobs = default_conv_knobs(layer, CoreRate::FullZmmVnni, 2);
        let expected =
            [Accumulate::PerRow, Accumulate::PerRowWithSource, Accumulate::PerRowWithSource, Accumulate::Whole];
        assert_eq!(knobs.accumulation, expected[i], "{}", layer.name);
        knobs.threads = if i == 1 { 1 } else { 2 };
        check(&|p| conv(layer, layout, knobs, GemmOperands::U8, p));
        let signed = Conv2dInt8Knobs { packing: Packing::Bytes, ..knobs }.operands(false, (-127, 127));
        assert_eq!(signed.source, DType::I8);
        check(&|p| conv(layer, layout, knobs, signed, p));
        let widened = knobs.operands(false, (-127, 127));
        assert_eq!(widened.source, DType::I16);
        check(&|p| conv(layer, layout, knobs, widened, p));
    }
    // The stem after space to depth (its row copies a `copy_map`, as gathered rows'), at the
    // tile rate's default tile, on the pool and off it.
    let stem = &CONV_LAYERS[0];
    for threads in [1, 2] {
        let knobs = default_conv_knobs(stem, CoreRate::Tiles, threads);
        let knobs = Conv2dInt8Knobs { accumulation: Accumulate::SpaceToDepth, threads, ..knobs };
        check(&|p| conv(stem, Layout::Nhwc, knobs, GemmOperands::U8, p));
    }
}

#[test]
fn dense_int8_schedules_replay() {
    let q = resnet18::quantization(Layer::Dense(FC), 12).unwrap();
    let knobs = default_dense_knobs(&FC, 1);
    check(&|p| {
        let src = placeholder([1, FC.in_features], DType::U8, &format!("{p}src")).unwrap();
        let wei = placeholder([FC.out_features, FC.in_features], DType::I8, &format!("{p}wei")).unwrap();
        let bias = placeholder([FC.out_features], DType::F32, &format!("{p}bias")).unwrap();
        dense_int8(&src, &wei, Some(&bias), &q.attrs, knobs, GemmOperands::U8, &format!("{p}fc")).unwrap()
    });
}

/// `C = A · B` for `A: u8[m, 64]`, `B: i8[64, n]` packed for `nr = 32`; the arguments and `C`.
fn gemm(m: i64, n: i64) -> (Vec<Tensor>, Tensor) {
    let a = placeholder([m, 64], DType::U8, "A").unwrap();
    let b = placeholder([64, n], DType::I8, "B").unwrap();
    let c = matmul_packed(&a, &pack_b_vnni(&b, 32, "Bp").unwrap(), n, DType::I32, "C").unwrap();
    (vec![a, b, c.clone()], c)
}

#[test]
fn gemm_int8_schedules_replay() {
    for knobs in [GemmInt8Knobs { mr: 4, nr: 32, parallel: true }, GemmInt8Knobs { mr: 5, nr: 32, parallel: false }] {
        let (args, c) = gemm(18, 96);
        let mut s = create_schedule(&[&c]);
        schedule_gemm_int8(&mut s, &c, knobs).unwrap();
        let (fresh_args, fresh) = gemm(18, 96);
        assert_eq!(replay(&s.trace(), &[&fresh], &fresh_args), lower(&s, &args));
        // Another workload: a reduction of 128 instead of 64 needs another intrinsic than the
        // trace's int8_gemm_{mr}x32x64, which tensorize rejects, naming the step.
        let a = placeholder([18, 128], DType::U8, "A").unwrap();
        let b = placeholder([128, 96], DType::I8, "B").unwrap();
        let other = matmul_packed(&a, &pack_b_vnni(&b, 32, "Bp").unwrap(), 96, DType::I32, "C").unwrap();
        let err = s.trace().replay(&[&other], &resolve).unwrap_err();
        let last = s.trace().steps.len() - 1;
        assert_eq!((err.step, err.primitive), (last, "tensorize"), "{err}");
        assert!(
            err.to_string()
                .starts_with(&format!("trace step {last} (tensorize): tensorize of C at ko with int8_gemm_")),
            "{err}"
        );
    }
}

/// The schedule-independent definition of a resnet-18 layer (`ops::conv2d_nchw_int8`,
/// `ops::dense_int8`, with the table's quantization): what a record of a tuned schedule is keyed
/// by. (The x86 direct definitions depend on knobs: `nr` pads their channels.)
fn layer_output(layer: Layer) -> Tensor {
    let q = resnet18::quantization(layer, 1).unwrap();
    let src = placeholder_vec(q.src_dims.clone(), DType::U8, "src").unwrap();
    let wei = placeholder_vec(q.wei_dims.clone(), DType::I8, "wei").unwrap();
    let bias = placeholder([q.wei_dims[0]], DType::F32, "bias").unwrap();
    match layer {
        Layer::Conv(c) => {
            let conv = Conv2dParams { stride: c.stride, pad: c.pad };
            conv2d_nchw_int8(&src, &wei, Some(&bias), None, conv, &q.attrs, c.name).unwrap().output
        }
        Layer::Dense(_) => ops_dense_int8(&src, &wei, Some(&bias), None, &q.attrs, "fc").unwrap().output,
    }
}

#[test]
fn resnet18_layers_have_distinct_workload_keys() {
    let keys: Vec<_> = resnet18::layers().into_iter().map(|l| workload_key(&[&layer_output(l)])).collect();
    let distinct: std::collections::HashSet<&String> = keys.iter().map(|k| &k.key).collect();
    assert_eq!(distinct.len(), 12);
    assert_eq!(keys[1], workload_key(&[&layer_output(resnet18::layers()[1])]));
    // Source, weights, compensation, bias and the per-channel requantization multipliers.
    assert_eq!(
        keys[1].summary,
        "u8[1,64,56,56] x i8[64,64,3,3] x i32[64] x f32[64] x f32[64] -> u8[1,64,56,56] (3 computes; sum[64x3x3])"
    );
}
