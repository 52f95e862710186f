//! The int8 operator library (`schedules::quant`, `schedules::ops`) bit for bit against plain
//! Rust loops written here (not the tensor-expression evaluator), every malformed attribute as
//! its typed error, and a few generic schedules JIT-compiled and compared with the definition.

use ir::expr::Expr;
use ir::interp::{Array, eval_te};
use ir::te::{Tensor, compute, placeholder, placeholder_vec};
use ir::{DType, TeError};
use schedules::generic::default_schedule;
use schedules::ops::GemmOperands;
use schedules::ops::{
    Conv2dParams, Layout, QuantizedLayer, add_int8, compensation, conv2d_nchw_int8, convert_layout, dense_int8,
    global_avg_pool, max_pool2d, nchw_to_nchwc, nchwc_to_nchw, oihw_to_vnni_blocked, relu_int8,
};
use schedules::quant::{
    PostOp, QuantAttrs, QuantError, Requantization, Scales, TensorQuant, ZeroPoints, dequantize, mask_count, quantize,
    requantize,
};
use schedules::resnet18::{CONV_LAYERS, DenseLayer};
use schedules::x86_conv::{
    Accumulate, Conv2dInt8Knobs, CoreRate, Packing, TileOrder, conv2d_int8, default_conv_knobs, default_dense_knobs,
    prepare_conv2d_int8, prepare_dense_int8, weight_range,
};
use tensorlift::bench::uniform as values;
use tensorlift::isa::KernelVariant;
use tensorlift::{CompileOptions, IsaLevel, Target, Tensor as RtTensor};

fn range_of(d: DType) -> (i64, i64) {
    let (lo, hi) = d.scalar.int_range().unwrap();
    (lo as i64, hi as i64)
}

/// Stores an f32 result as `dtype`: round half to even and saturate, or unchanged for f32.
fn store(y: f32, dtype: DType) -> f64 {
    let r = y.round_ties_even();
    match dtype {
        DType::U8 => r as u8 as f64,
        DType::I8 => r as i8 as f64,
        DType::I32 => r as i32 as f64,
        DType::F32 => y as f64,
        other => panic!("{other}"),
    }
}

/// Fails if more than 30% of `out` is zero or at the saturation bounds of an integer `dtype`.
fn assert_exercised(what: &str, out: &[f64], dtype: DType) {
    let bounds = dtype.scalar.int_range().map(|(lo, hi)| (lo as f64, hi as f64));
    let dull = out.iter().filter(|&&v| v == 0.0 || bounds.is_some_and(|(lo, hi)| v == lo || v == hi)).count();
    assert!(dull * 10 <= out.len() * 3, "{what}: {dull} of {} outputs are zero or saturated", out.len());
}

fn assert_same(what: &str, got: &Array, want: &[f64]) {
    let got = got.to_f64_vec();
    assert_eq!(got.len(), want.len(), "{what}");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(g.to_bits() == w.to_bits(), "{what}: element {i}: got {g}, want {w}");
    }
}

/// A destination quantization that maps the f32 values `x` onto most of `dtype`'s range.
fn dst_quant_for(x: &[f32], dtype: DType) -> (f32, i32) {
    let lo = x.iter().cloned().fold(f32::INFINITY, f32::min);
    let hi = x.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
    let span = (hi - lo).max(1e-3);
    match dtype {
        DType::U8 => {
            let scale = span / 240.0;
            (scale, ((-lo / scale).round() as i32 + 6).clamp(0, 255))
        }
        DType::I8 => {
            let scale = span / 240.0;
            (scale, (-122 - (lo / scale).round() as i32).clamp(-128, 127))
        }
        _ => (span / 1000.0, 7),
    }
}

/// The f32 post-ops of the model, in list order.
fn post(mut x: f32, post_ops: &[PostOp], residual: Option<f64>) -> f32 {
    for op in post_ops {
        x = match *op {
            PostOp::Relu => x.max(0.0),
            PostOp::Sum { scale, zero_point } => x + scale * (residual.unwrap() as f32 - zero_point as f32),
            PostOp::QLinearAdd(_) => unreachable!("onnxruntime's order: not in these models"),
        };
    }
    x
}

/// The plain quantities of one int8 layer test case.
struct Layer {
    src_dtype: DType,
    dst_dtype: DType,
    src_zp: i32,
    src_scale: f32,
    wei_scales: Vec<f32>,
    per_channel: bool,
    post_ops: Vec<PostOp>,
}

/// Reference convolution: `centered[n, oc, y, x] = Σ (src − zp_src) · w` over the taps inside the
/// source (padding is a real zero), then the model's f32 requantization up to (not including)
/// the destination quantization.
#[allow(clippy::too_many_arguments)]
fn reference_conv_x(
    src: &[i64],
    [n, ic, h, w]: [i64; 4],
    wei: &[i64],
    [oc, k]: [i64; 2],
    conv: Conv2dParams,
    l: &Layer,
    bias: &[f32],
    residual: &[i64],
) -> (Vec<f32>, [i64; 4]) {
    let (oh, ow) = ((h + 2 * conv.pad - k) / conv.stride + 1, (w + 2 * conv.pad - k) / conv.stride + 1);
    let mut out = Vec::new();
    for b in 0..n {
        for o in 0..oc {
            for y in 0..oh {
                for x in 0..ow {
                    let mut acc: i64 = 0;
                    for c in 0..ic {
                        for ky in 0..k {
                            for kx in 0..k {
                                let (sy, sx) = (y * conv.stride + ky - conv.pad, x * conv.stride + kx - conv.pad);
                                if sy < 0 || sy >= h || sx < 0 || sx >= w {
                                    continue;
                                }
                                let s = src[(((b * ic + c) * h + sy) * w + sx) as usize];
                                let wv = wei[(((o * ic + c) * k + ky) * k + kx) as usize];
                                acc += (s - l.src_zp as i64) * wv;
                            }
                        }
                    }
                    let m = l.src_scale * l.wei_scales[if l.per_channel { o as usize } else { 0 }];
                    let v = acc as i32 as f32 * m + bias[o as usize];
                    let flat = (((b * oc + o) * oh + y) * ow + x) as usize;
                    out.push(post(v, &l.post_ops, residual.get(flat).map(|&r| r as f64)));
                }
            }
        }
    }
    (out, [n, oc, oh, ow])
}

fn attrs(l: &Layer, oc: i64, weight_dims: &[i64], dst: (f32, i32), out_dims: &[i64]) -> QuantAttrs {
    let wei_scales = if l.per_channel {
        Scales::new("wei", l.wei_scales[..oc as usize].to_vec(), 1, weight_dims).unwrap()
    } else {
        Scales::per_tensor("wei", l.wei_scales[0]).unwrap()
    };
    let dst_q = TensorQuant {
        scales: Scales::new("dst", vec![dst.0], 0, out_dims).unwrap(),
        zero_points: ZeroPoints::new("dst", vec![dst.1], 0, out_dims, l.dst_dtype).unwrap(),
    };
    QuantAttrs {
        src: TensorQuant::per_tensor("src", l.src_scale, l.src_zp, l.src_dtype).unwrap(),
        wei_scales,
        dst: dst_q,
        dst_dtype: l.dst_dtype,
        post_ops: l.post_ops.clone(),
        requantization: Requantization::OneDnn,
    }
}

/// Evaluates a layer's output from the definition: compensation from the weight preparation
/// function, then the per-call graph.
fn eval_layer(
    layer: &QuantizedLayer,
    weights: (&Tensor, &Array),
    l: &Layer,
    inputs: &[(&Tensor, &Array)],
    name: &str,
) -> (Array, Array) {
    let zp = ZeroPoints::per_tensor("src", l.src_zp, l.src_dtype).unwrap();
    let prep = compensation(weights.0, l.src_dtype, &zp, &format!("{name}.prep")).unwrap();
    let comp = eval_te(&[&prep.compensation], &[weights]).unwrap().remove(0);
    let mut all: Vec<(&Tensor, &Array)> = inputs.to_vec();
    all.push(weights);
    all.push((&layer.compensation, &comp));
    all.extend(layer.params.iter().map(|p| (&p.tensor, &p.values)));
    (eval_te(&[&layer.output], &all).unwrap().remove(0), comp)
}

/// One convolution case: builds the definition, evaluates it and compares with the reference;
/// returns the tensors and arrays for further (JIT) checks.
fn check_conv([n, ic, h, w]: [i64; 4], [oc, k]: [i64; 2], conv: Conv2dParams, l: &Layer, seed: u64) -> (String, Array) {
    let (slo, shi) = range_of(l.src_dtype);
    let src_v = values((n * ic * h * w) as usize, seed, slo, shi);
    let wei_v = values((oc * ic * k * k) as usize, seed + 1, -128, 127);
    let bias: Vec<f32> = values(oc as usize, seed + 2, -400, 1600).iter().map(|&b| b as f32 * 0.37).collect();
    let oh = (h + 2 * conv.pad - k) / conv.stride + 1;
    let ow = (w + 2 * conv.pad - k) / conv.stride + 1;
    let out_dims = [n, oc, oh, ow];
    let out_len = (n * oc * oh * ow) as usize;
    let with_sum = l.post_ops.iter().any(|p| matches!(p, PostOp::Sum { .. }));
    let res_dtype = if l.src_dtype == DType::U8 { DType::U8 } else { DType::I8 };
    let (rlo, rhi) = range_of(res_dtype);
    let residual = if with_sum { values(out_len, seed + 3, rlo, rhi) } else { vec![] };
    let (x, dims) = reference_conv_x(&src_v, [n, ic, h, w], &wei_v, [oc, k], conv, l, &bias, &residual);
    assert_eq!(dims, out_dims);
    let dst = dst_quant_for(&x, l.dst_dtype);
    let want: Vec<f64> = x.iter().map(|&v| store(v / dst.0 + dst.1 as f32, l.dst_dtype)).collect();
    let what = format!(
        "conv {ic}->{oc} {h}x{w} k{k} s{} p{} {}->{} per_channel={} {:?}",
        conv.stride, conv.pad, l.src_dtype, l.dst_dtype, l.per_channel, l.post_ops
    );
    assert_exercised(&what, &want, l.dst_dtype);

    let src = placeholder([n, ic, h, w], l.src_dtype, "src").unwrap();
    let wei = placeholder([oc, ic, k, k], DType::I8, "wei").unwrap();
    let b = placeholder([oc], DType::F32, "bias").unwrap();
    let r = placeholder(out_dims, res_dtype, "residual").unwrap();
    let a = attrs(l, oc, wei.shape(), dst, &out_dims);
    let layer = conv2d_nchw_int8(&src, &wei, Some(&b), with_sum.then_some(&r), conv, &a, "conv").unwrap();
    assert_eq!(layer.shifted.is_some(), l.src_dtype == DType::I8);
    assert_eq!(layer.padded.is_some(), conv.pad > 0);
    assert_eq!(layer.params.len(), l.per_channel as usize);
    let src_a = Array::from_i64(l.src_dtype, &[n, ic, h, w], &src_v);
    let wei_a = Array::from_i64(DType::I8, &[oc, ic, k, k], &wei_v);
    let bias_a = Array::from_f64(DType::F32, &[oc], &bias.iter().map(|&v| v as f64).collect::<Vec<_>>());
    let res_a = with_sum.then(|| Array::from_i64(res_dtype, &out_dims, &residual));
    let mut inputs = vec![(&src, &src_a), (&b, &bias_a)];
    inputs.extend(res_a.as_ref().map(|a| (&r, a)));
    let (got, comp) = eval_layer(&layer, (&wei, &wei_a), l, &inputs, "conv");
    assert_same(&what, &got, &want);
    // The compensation is (zp_src + shift) · Σ w per output channel.
    let shift = if l.src_dtype == DType::I8 { 128 } else { 0 };
    let per_oc = (ic * k * k) as usize;
    let sums: Vec<i64> = wei_v.chunks(per_oc).map(|c| c.iter().sum::<i64>() * (l.src_zp as i64 + shift)).collect();
    assert_eq!(comp.to_i64_vec(), sums);
    (what, got)
}

const DSTS: [DType; 4] = [DType::U8, DType::I8, DType::I32, DType::F32];

fn post_op_sets(src: DType) -> Vec<Vec<PostOp>> {
    let sum_zp = if src == DType::U8 { 120 } else { -9 };
    let sum = PostOp::Sum { scale: 0.75, zero_point: sum_zp };
    vec![vec![], vec![PostOp::Relu], vec![sum], vec![sum, PostOp::Relu]]
}

fn layer_case(src: DType, dst: DType, per_channel: bool, post_ops: Vec<PostOp>, oc: usize) -> Layer {
    let wei_scales: Vec<f32> = (0..oc).map(|o| 0.004 + 0.0005 * ((o * 7) % 11) as f32).collect();
    let src_zp = if src == DType::U8 { 131 } else { -5 };
    Layer { src_dtype: src, dst_dtype: dst, src_zp, src_scale: 0.021, wei_scales, per_channel, post_ops }
}

#[test]
fn conv2d_every_src_dst_scale_and_post_op_combination_with_tails() {
    // ic = oc = 17, width 11 (not a multiple of 4 or 16), stride 2 over an odd 9 x 11 input.
    let mut seed = 10;
    for src in [DType::U8, DType::I8] {
        for dst in DSTS {
            for per_channel in [false, true] {
                for post_ops in post_op_sets(src) {
                    let l = layer_case(src, dst, per_channel, post_ops, 17);
                    check_conv([1, 17, 9, 11], [17, 3], Conv2dParams { stride: 2, pad: 1 }, &l, seed);
                    seed += 7;
                }
            }
        }
    }
}

#[test]
fn conv2d_other_kernels_strides_and_paddings() {
    let shapes: [([i64; 4], [i64; 2], Conv2dParams); 4] = [
        ([1, 5, 7, 13], [6, 1], Conv2dParams { stride: 1, pad: 0 }),
        ([1, 3, 11, 9], [8, 7], Conv2dParams { stride: 2, pad: 3 }),
        ([1, 17, 7, 7], [19, 1], Conv2dParams { stride: 2, pad: 0 }),
        ([2, 4, 6, 5], [5, 3], Conv2dParams { stride: 1, pad: 1 }),
    ];
    for (i, (src, w, conv)) in shapes.into_iter().enumerate() {
        for s in [DType::U8, DType::I8] {
            let post = post_op_sets(s)[i % 4].clone();
            let l = layer_case(s, DSTS[i], i % 2 == 0, post, w[0] as usize);
            check_conv(src, w, conv, &l, 100 + i as u64);
        }
    }
}

#[test]
fn conv2d_generic_schedules_jit_compile_and_match_the_definition() {
    for (src_dtype, dst, post_ops) in [
        (DType::U8, DType::U8, post_op_sets(DType::U8)[3].clone()),
        (DType::I8, DType::I8, vec![PostOp::Relu]),
        (DType::I8, DType::F32, vec![]),
    ] {
        let l = layer_case(src_dtype, dst, true, post_ops, 17);
        let conv = Conv2dParams { stride: 2, pad: 1 };
        let (what, want) = check_conv([1, 17, 9, 11], [17, 3], conv, &l, 77);
        // Rebuild the same graph (same seed, same data) and run it compiled.
        let (slo, shi) = range_of(src_dtype);
        let src_v = values(17 * 9 * 11, 77, slo, shi);
        let wei_v = values(17 * 17 * 9, 78, -128, 127);
        let bias: Vec<f64> = values(17, 79, -400, 1600).iter().map(|&b| (b as f32 * 0.37) as f64).collect();
        let with_sum = l.post_ops.len() == 2;
        let res_dtype = src_dtype;
        let (rlo, rhi) = range_of(res_dtype);
        let out_dims = [1, 17, 5, 6];
        let residual = if with_sum { values(17 * 30, 80, rlo, rhi) } else { vec![] };
        let (x, _) = reference_conv_x(
            &src_v,
            [1, 17, 9, 11],
            &wei_v,
            [17, 3],
            conv,
            &l,
            &bias.iter().map(|&b| b as f32).collect::<Vec<_>>(),
            &residual,
        );
        let dst_q = dst_quant_for(&x, dst);
        let src = placeholder([1, 17, 9, 11], src_dtype, "src").unwrap();
        let wei = placeholder([17, 17, 3, 3], DType::I8, "wei").unwrap();
        let b = placeholder([17], DType::F32, "bias").unwrap();
        let r = placeholder(out_dims, res_dtype, "residual").unwrap();
        let a = attrs(&l, 17, wei.shape(), dst_q, &out_dims);
        let layer = conv2d_nchw_int8(&src, &wei, Some(&b), with_sum.then_some(&r), conv, &a, "conv").unwrap();
        // Weight preparation: its own compiled function, run once.
        let zp = ZeroPoints::per_tensor("src", l.src_zp, src_dtype).unwrap();
        let prep = compensation(&wei, src_dtype, &zp, "prep").unwrap();
        let options = CompileOptions::default();
        let prep_kernel =
            tensorlift::build(&default_schedule(&[&prep.compensation]), &[&wei, &prep.compensation], "prep", &options)
                .unwrap();
        let mut wei_t = RtTensor::from_array(&Array::from_i64(DType::I8, &[17, 17, 3, 3], &wei_v));
        let mut comp_t = RtTensor::zeros(DType::I32, &[17]).unwrap();
        prep_kernel.compiled.call(&mut [&mut wei_t, &mut comp_t]).unwrap();
        // The per-call function.
        let mut args: Vec<&Tensor> = vec![&src, &wei, &layer.compensation, &b];
        if with_sum {
            args.push(&r);
        }
        args.extend(layer.params.iter().map(|p| &p.tensor));
        args.push(&layer.output);
        let kernel = tensorlift::build(&default_schedule(&[&layer.output]), &args, "conv", &options).unwrap();
        let mut src_t = RtTensor::from_array(&Array::from_i64(src_dtype, &[1, 17, 9, 11], &src_v));
        let mut bias_t = RtTensor::from_array(&Array::from_f64(DType::F32, &[17], &bias));
        let mut res_t = with_sum.then(|| RtTensor::from_array(&Array::from_i64(res_dtype, &out_dims, &residual)));
        let mut params: Vec<RtTensor> = layer.params.iter().map(|p| RtTensor::from_array(&p.values)).collect();
        let mut out_t = RtTensor::zeros(dst, &out_dims).unwrap();
        let mut call: Vec<&mut RtTensor> = vec![&mut src_t, &mut wei_t, &mut comp_t, &mut bias_t];
        call.extend(res_t.as_mut());
        call.extend(params.iter_mut());
        call.push(&mut out_t);
        kernel.compiled.call(&mut call).unwrap();
        assert!(out_t.to_array().bits_eq(&want), "{what}: {:?}", out_t.to_array().first_difference(&want));
    }
}

#[test]
fn dense_every_src_and_dst_with_per_channel_scales_and_post_ops() {
    let (m, ic, oc) = (3, 17, 19);
    let mut seed = 500;
    for src_dtype in [DType::U8, DType::I8] {
        for (d, dst) in DSTS.into_iter().enumerate() {
            let post_ops = post_op_sets(src_dtype)[d].clone();
            let l = layer_case(src_dtype, dst, d % 2 == 1, post_ops, oc);
            let (slo, shi) = range_of(src_dtype);
            let src_v = values(m * ic, seed, slo, shi);
            let wei_v = values(oc * ic, seed + 1, -128, 127);
            let bias: Vec<f32> = values(oc, seed + 2, -200, 800).iter().map(|&b| b as f32 * 0.37).collect();
            let with_sum = l.post_ops.iter().any(|p| matches!(p, PostOp::Sum { .. }));
            let residual = if with_sum { values(m * oc, seed + 3, slo, shi) } else { vec![] };
            let mut x = Vec::new();
            for i in 0..m {
                for o in 0..oc {
                    let acc: i64 = (0..ic).map(|c| (src_v[i * ic + c] - l.src_zp as i64) * wei_v[o * ic + c]).sum();
                    let mult = l.src_scale * l.wei_scales[if l.per_channel { o } else { 0 }];
                    let v = acc as i32 as f32 * mult + bias[o];
                    x.push(post(v, &l.post_ops, residual.get(i * oc + o).map(|&r| r as f64)));
                }
            }
            let dst_q = dst_quant_for(&x, dst);
            let want: Vec<f64> = x.iter().map(|&v| store(v / dst_q.0 + dst_q.1 as f32, dst)).collect();
            let what = format!("dense {src_dtype}->{dst} {:?}", l.post_ops);
            assert_exercised(&what, &want, dst);

            let (m, ic, oc) = (m as i64, ic as i64, oc as i64);
            let src = placeholder([m, ic], src_dtype, "src").unwrap();
            let wei = placeholder([oc, ic], DType::I8, "wei").unwrap();
            let b = placeholder([oc], DType::F32, "bias").unwrap();
            let r = placeholder([m, oc], src_dtype, "residual").unwrap();
            let a = attrs(&l, oc, wei.shape(), dst_q, &[m, oc]);
            let layer = dense_int8(&src, &wei, Some(&b), with_sum.then_some(&r), &a, "fc").unwrap();
            let src_a = Array::from_i64(src_dtype, &[m, ic], &src_v);
            let wei_a = Array::from_i64(DType::I8, &[oc, ic], &wei_v);
            let bias_a = Array::from_f64(DType::F32, &[oc], &bias.iter().map(|&v| v as f64).collect::<Vec<_>>());
            let res_a = with_sum.then(|| Array::from_i64(src_dtype, &[m, oc], &residual));
            let mut inputs = vec![(&src, &src_a), (&b, &bias_a)];
            inputs.extend(res_a.as_ref().map(|a| (&r, a)));
            let (got, _) = eval_layer(&layer, (&wei, &wei_a), &l, &inputs, "fc");
            assert_same(&what, &got, &want);
            seed += 11;
        }
    }
}

#[test]
fn max_pool_3x3_stride_2_ignores_padding() {
    for (dtype, pad) in [(DType::U8, 1), (DType::I8, 1), (DType::I8, 0), (DType::U8, 2)] {
        let (n, c, h, w) = (1i64, 5i64, 9i64, 11i64);
        let (lo, hi) = range_of(dtype);
        let v = values((n * c * h * w) as usize, 900 + pad as u64, lo, hi);
        let src = placeholder([n, c, h, w], dtype, "src").unwrap();
        let out = max_pool2d(&src, 3, 2, pad, "pool").unwrap();
        let (oh, ow) = ((h + 2 * pad - 3) / 2 + 1, (w + 2 * pad - 3) / 2 + 1);
        assert_eq!(out.shape(), &[n, c, oh, ow]);
        let mut want = Vec::new();
        for ch in 0..c {
            for y in 0..oh {
                for x in 0..ow {
                    let mut best = i64::MIN;
                    for ky in 0..3 {
                        for kx in 0..3 {
                            let (sy, sx) = (y * 2 + ky - pad, x * 2 + kx - pad);
                            if (0..h).contains(&sy) && (0..w).contains(&sx) {
                                best = best.max(v[((ch * h + sy) * w + sx) as usize]);
                            }
                        }
                    }
                    want.push(best as f64);
                }
            }
        }
        assert_exercised("max_pool", &want, dtype);
        let got = eval_te(&[&out], &[(&src, &Array::from_i64(dtype, &[n, c, h, w], &v))]).unwrap().remove(0);
        assert_same(&format!("max_pool {dtype} pad {pad}"), &got, &want);
    }
    // All-minimum windows at the border stay the minimum, never a padded value.
    let src = placeholder([1, 1, 3, 3], DType::I8, "src").unwrap();
    let out = max_pool2d(&src, 3, 2, 1, "pool").unwrap();
    let got = eval_te(&[&out], &[(&src, &Array::from_i64(DType::I8, &[1, 1, 3, 3], &[-128; 9]))]).unwrap();
    assert_eq!(got[0].to_i64_vec(), vec![-128; 4]);
}

#[test]
fn global_avg_pool_rounds_half_to_even_exactly() {
    // Count 2 makes every odd sum a tie: 1/2 → 0, 3/2 → 2, 5/2 → 2, −1/2 → 0, −3/2 → −2, −5/2 → −2.
    let src = placeholder([1, 6, 2, 1], DType::I8, "src").unwrap();
    let out = global_avg_pool(&src, "gap").unwrap();
    let arr = Array::from_i64(DType::I8, &[1, 6, 2, 1], &[0, 1, 1, 2, 2, 3, 0, -1, -1, -2, -2, -3]);
    let got = eval_te(&[&out], &[(&src, &arr)]).unwrap().remove(0);
    assert_eq!(out.shape(), &[1, 6, 1, 1]);
    assert_eq!(got.to_i64_vec(), vec![0, 2, 2, 0, -2, -2]);
    for (dtype, (h, w)) in [(DType::U8, (3, 5)), (DType::I8, (7, 7)), (DType::U8, (2, 3))] {
        let c = 19;
        let (lo, hi) = range_of(dtype);
        let v = values((c * h * w) as usize, 40 + h as u64, lo, hi);
        let src = placeholder([1, c, h, w], dtype, "src").unwrap();
        let out = global_avg_pool(&src, "gap").unwrap();
        let count = (h * w) as usize;
        let want: Vec<f64> =
            v.chunks(count).map(|s| (s.iter().sum::<i64>() as f64 / count as f64).round_ties_even()).collect();
        assert_exercised("global_avg_pool", &want, dtype);
        let got = eval_te(&[&out], &[(&src, &Array::from_i64(dtype, &[1, c, h, w], &v))]).unwrap().remove(0);
        assert_same(&format!("global_avg_pool {dtype} {h}x{w}"), &got, &want);
    }
}

#[test]
fn relu_clamps_at_the_zero_point() {
    for (dtype, zp) in [(DType::U8, 100), (DType::I8, -20)] {
        let (lo, hi) = range_of(dtype);
        let v = values(5 * 7, 3, lo, hi);
        let src = placeholder([1, 5, 7, 1], dtype, "src").unwrap();
        let out = relu_int8(&src, &ZeroPoints::per_tensor("zp", zp, dtype).unwrap(), "relu").unwrap();
        let want: Vec<f64> = v.iter().map(|&x| x.max(zp as i64) as f64).collect();
        let got = eval_te(&[&out], &[(&src, &Array::from_i64(dtype, &[1, 5, 7, 1], &v))]).unwrap().remove(0);
        assert_same("relu", &got, &want);
    }
}

#[test]
fn residual_add_with_requantization_every_combination() {
    let dims = [1i64, 17, 5, 7];
    let len = 17 * 5 * 7;
    let mut seed = 60;
    for a_dtype in [DType::U8, DType::I8] {
        let b_dtype = if a_dtype == DType::U8 { DType::I8 } else { DType::U8 };
        for dst in DSTS {
            for relu in [false, true] {
                let (alo, ahi) = range_of(a_dtype);
                let (blo, bhi) = range_of(b_dtype);
                let (av, bv) = (values(len, seed, alo, ahi), values(len, seed + 1, blo, bhi));
                let (sa, za, sb, zb) = (0.05f32, (alo + 40) as i32, 0.03f32, (bhi - 100) as i32);
                let post_ops: Vec<PostOp> = [PostOp::Sum { scale: sb, zero_point: zb }]
                    .into_iter()
                    .chain(relu.then_some(PostOp::Relu))
                    .collect();
                let x: Vec<f32> = av
                    .iter()
                    .zip(&bv)
                    .map(|(&a, &b)| post(sa * (a - za as i64) as f32, &post_ops, Some(b as f64)))
                    .collect();
                let (sd, zd) = dst_quant_for(&x, dst);
                let want: Vec<f64> = x.iter().map(|&v| store(v / sd + zd as f32, dst)).collect();
                let what = format!("add {a_dtype}+{b_dtype}->{dst} relu={relu}");
                assert_exercised(&what, &want, dst);
                let (a, b) = (placeholder(dims, a_dtype, "a").unwrap(), placeholder(dims, b_dtype, "b").unwrap());
                let aq = TensorQuant::per_tensor("a", sa, za, a_dtype).unwrap();
                let bq = TensorQuant::per_tensor("b", sb, zb, b_dtype).unwrap();
                let dq = TensorQuant::per_tensor("dst", sd, zd, dst).unwrap();
                let out = add_int8((&a, &aq), (&b, &bq), relu, (dst, &dq), "add").unwrap();
                let (aa, ba) = (Array::from_i64(a_dtype, &dims, &av), Array::from_i64(b_dtype, &dims, &bv));
                let got = eval_te(&[&out], &[(&a, &aa), (&b, &ba)]).unwrap().remove(0);
                assert_same(&what, &got, &want);
                seed += 3;
            }
        }
    }
}

#[test]
fn quantize_dequantize_requantize_per_tensor_and_per_channel() {
    let dims = [2i64, 3, 5];
    let len = 30;
    // Mask 0b010: one value per index of dimension 1; mask 0b101: per (d0, d2), row-major.
    for mask in [0u32, 0b010, 0b101] {
        let count = mask_count(mask, &dims);
        let index = |flat: usize| {
            let (i0, i1, i2) = (flat / 15, flat / 5 % 3, flat % 5);
            match mask {
                0 => 0,
                0b010 => i1,
                _ => i0 * 5 + i2,
            }
        };
        let scales: Vec<f32> = (0..count).map(|i| 0.05 + 0.01 * i as f32).collect();
        let zps: Vec<i32> = (0..count).map(|i| 3 * i as i32 - 4).collect();
        let q = TensorQuant {
            scales: Scales::new("s", scales.clone(), mask, &dims).unwrap(),
            zero_points: ZeroPoints::new("z", zps.clone(), mask, &dims, DType::I8).unwrap(),
        };
        let xf: Vec<f64> = values(len, 7 + mask as u64, -700, 700).iter().map(|&v| (v as f32 * 0.01) as f64).collect();
        let x = placeholder(dims, DType::F32, "x").unwrap();
        let quant = quantize(&x, &q, DType::I8, "q").unwrap();
        assert_eq!(quant.params.len(), if mask == 0 { 0 } else { 2 });
        let mut inputs: Vec<(&Tensor, &Array)> = Vec::new();
        let xa = Array::from_f64(DType::F32, &dims, &xf);
        inputs.push((&x, &xa));
        inputs.extend(quant.params.iter().map(|p| (&p.tensor, &p.values)));
        let got = eval_te(&[&quant.output], &inputs).unwrap().remove(0);
        let want: Vec<f64> =
            (0..len).map(|i| store(xf[i] as f32 / scales[index(i)] + zps[index(i)] as f32, DType::I8)).collect();
        assert_exercised("quantize", &want, DType::I8);
        assert_same(&format!("quantize mask {mask}"), &got, &want);
        // Dequantize what was quantized.
        let xi = placeholder(dims, DType::I8, "xi").unwrap();
        let deq = dequantize(&xi, &q, "dq").unwrap();
        let mut inputs: Vec<(&Tensor, &Array)> = vec![(&xi, &got)];
        inputs.extend(deq.params.iter().map(|p| (&p.tensor, &p.values)));
        let back = eval_te(&[&deq.output], &inputs).unwrap().remove(0);
        let want_back: Vec<f64> =
            (0..len).map(|i| (scales[index(i)] * (want[i] as i32 - zps[index(i)]) as f32) as f64).collect();
        assert_same("dequantize", &back, &want_back);
        // Requantize i8 → u8 with a per-tensor output quantization.
        let out_q = TensorQuant::per_tensor("out", 0.04, 128, DType::U8).unwrap();
        let req = requantize(&xi, &q, &out_q, DType::U8, "rq").unwrap();
        let mut inputs: Vec<(&Tensor, &Array)> = vec![(&xi, &got)];
        inputs.extend(req.params.iter().map(|p| (&p.tensor, &p.values)));
        let re = eval_te(&[&req.output], &inputs).unwrap().remove(0);
        let want_re: Vec<f64> = (0..len)
            .map(|i| {
                let real = scales[index(i)] * (want[i] as i32 - zps[index(i)]) as f32;
                store(real / 0.04 + 128.0, DType::U8)
            })
            .collect();
        assert_exercised("requantize", &want_re, DType::U8);
        assert_same("requantize", &re, &want_re);
    }
}

#[test]
fn layout_transforms_block_pad_and_round_trip() {
    // NCHW → NCHW16c with 17 channels: the second block holds one channel and 15 zero points.
    let (n, c, h, w) = (1i64, 17i64, 3i64, 5i64);
    let v = values((n * c * h * w) as usize, 5, 0, 255);
    let src = placeholder([n, c, h, w], DType::U8, "src").unwrap();
    let blocked = nchw_to_nchwc(&src, 16, 128, "blocked").unwrap();
    assert_eq!(blocked.shape(), &[1, 2, 3, 5, 16]);
    let back = nchwc_to_nchw(&blocked, 17, "back").unwrap();
    let src_a = Array::from_i64(DType::U8, &[n, c, h, w], &v);
    let out = eval_te(&[&blocked, &back], &[(&src, &src_a)]).unwrap();
    let mut want = Vec::new();
    for cb in 0..2 {
        for y in 0..h {
            for x in 0..w {
                for ci in 0..16 {
                    let ch = cb * 16 + ci;
                    want.push(if ch < c { v[((ch * h + y) * w + x) as usize] } else { 128 } as f64);
                }
            }
        }
    }
    assert_same("nchw_to_nchwc", &out[0], &want);
    assert!(out[1].bits_eq(&src_a));
    // NCHW → NHWC → NCHW.
    let nhwc = convert_layout(&src, Layout::Nchw, Layout::Nhwc, "nhwc").unwrap();
    assert_eq!(nhwc.shape(), &[1, 3, 5, 17]);
    let nchw = convert_layout(&nhwc, Layout::Nhwc, Layout::Nchw, "nchw").unwrap();
    let out = eval_te(&[&nhwc, &nchw], &[(&src, &src_a)]).unwrap();
    let want: Vec<f64> = in_layout(&v, [n, c, h, w], Layout::Nhwc).into_iter().map(|x| x as f64).collect();
    assert_same("convert_layout", &out[0], &want);
    assert!(out[1].bits_eq(&src_a));
    let err = convert_layout(&blocked, Layout::Nchw, Layout::Nhwc, "bad").unwrap_err();
    assert!(err.to_string().contains("source shape must be [N, C, H, W], found [1, 2, 3, 5, 16]"), "{err}");
    // OIHW → OIHW[16/4]i[16]o4i with 17 × 17 channels, zero padded.
    let (o, i, k) = (17i64, 17i64, 3i64);
    let wv = values((o * i * k * k) as usize, 6, -128, 127);
    let wei = placeholder([o, i, k, k], DType::I8, "wei").unwrap();
    let packed = oihw_to_vnni_blocked(&wei, 16, 16, "packed").unwrap();
    assert_eq!(packed.shape(), &[2, 2, 3, 3, 4, 16, 4]);
    let got = eval_te(&[&packed], &[(&wei, &Array::from_i64(DType::I8, &[o, i, k, k], &wv))]).unwrap().remove(0);
    let mut want = Vec::new();
    for ob in 0..2 {
        for ib in 0..2 {
            for ky in 0..k {
                for kx in 0..k {
                    for i4 in 0..4 {
                        for oi in 0..16 {
                            for ii in 0..4 {
                                let (oc, ic) = (ob * 16 + oi, ib * 16 + i4 * 4 + ii);
                                let inside = oc < o && ic < i;
                                want.push(
                                    if inside { wv[(((oc * i + ic) * k + ky) * k + kx) as usize] } else { 0 } as f64
                                );
                            }
                        }
                    }
                }
            }
        }
    }
    assert_same("oihw_to_vnni_blocked", &got, &want);
}

#[test]
fn round_is_a_typed_float_only_node_that_prints_and_folds() {
    let a = placeholder([4], DType::F32, "A").unwrap();
    let c = compute([4], |i| a.at([&i[0]]).round() + Expr::float(DType::F32, 2.5).round(), "C").unwrap();
    assert_eq!(c.body().unwrap().to_string(), "round(A[i]) + round(2.5f32)");
    let f = ir::lower::lower(&default_schedule(&[&c]), &[&a, &c], "f").unwrap();
    assert!(f.to_string().contains("C[i] = round(A[i]) + 2.0f32"), "{f}");
    let i = placeholder([4], DType::I32, "I").unwrap();
    let err = compute([4], |x| i.at([&x[0]]).round(), "R").unwrap_err();
    assert!(matches!(&err, TeError::UndefinedOperator { op, dtype, .. } if op == "round" && *dtype == DType::I32));
    assert!(err.to_string().contains("operator `round` is not defined on i32"), "{err}");
}

#[test]
fn malformed_attributes_are_typed_errors() {
    let wdims = [17i64, 17, 3, 3];
    let err = Scales::new("wei", vec![0.1; 5], 1, &wdims).unwrap_err();
    assert!(matches!(err, QuantError::MaskCount { expected: 17, found: 5, .. }), "{err}");
    assert!(err.to_string().contains("needs 17 values, found 5"), "{err}");
    let err = Scales::new("wei", vec![0.1; 17 * 9], 0b1100, &wdims).unwrap_err();
    assert!(matches!(err, QuantError::MaskCount { expected: 9, found: 153, .. }), "{err}");
    let err = Scales::new("wei", vec![0.1; 17], 1 << 4, &wdims).unwrap_err();
    assert!(matches!(err, QuantError::MaskOutOfRange { dim: 4, rank: 4, .. }), "{err}");
    for bad in [0.0f32, -0.5, f32::NAN, f32::INFINITY] {
        let err = Scales::per_tensor("dst scale", bad).unwrap_err();
        assert!(matches!(err, QuantError::BadScale { index: 0, .. }), "{err}");
        assert!(err.to_string().contains("a scale must be finite and positive"), "{err}");
    }
    let err = ZeroPoints::per_tensor("src", 300, DType::U8).unwrap_err();
    assert!(matches!(err, QuantError::ZeroPointRange { value: 300, .. }), "{err}");
    assert!(err.to_string().contains("range of u8 (0..=255), found 300"), "{err}");

    let good = || QuantAttrs::per_tensor((0.02, 128, DType::U8), 0.01, (0.1, 3, DType::U8)).unwrap();
    let conv = Conv2dParams { stride: 1, pad: 1 };
    let src = placeholder([1, 17, 8, 8], DType::U8, "src").unwrap();
    let wei = placeholder(wdims, DType::I8, "wei").unwrap();
    let build = |src: &Tensor, wei: &Tensor, bias: Option<&Tensor>, sum: Option<&Tensor>, a: &QuantAttrs| {
        conv2d_nchw_int8(src, wei, bias, sum, conv, a, "c").map(|_| ())
    };
    build(&src, &wei, None, None, &good()).unwrap();
    // Wrong dtype combinations.
    let err = build(&placeholder([1, 17, 8, 8], DType::I32, "s").unwrap(), &wei, None, None, &good()).unwrap_err();
    assert!(matches!(&err, QuantError::DType { found: DType::I32, .. }), "{err}");
    assert!(err.to_string().contains("dtype of the source must be u8 or i8, found i32"), "{err}");
    let err = build(&src, &placeholder(wdims, DType::U8, "w").unwrap(), None, None, &good()).unwrap_err();
    assert!(err.to_string().contains("dtype of the weights must be i8, found u8"), "{err}");
    let mut a = good();
    a.dst_dtype = DType::U16;
    let err = build(&src, &wei, None, None, &a).unwrap_err();
    assert!(err.to_string().contains("dtype of the destination must be u8, i8, i32 or f32, found u16"), "{err}");
    let err = build(&src, &wei, Some(&placeholder([17], DType::I32, "b").unwrap()), None, &good()).unwrap_err();
    assert!(err.to_string().contains("dtype of the bias must be f32, found i32"), "{err}");
    // Non-matching shapes.
    let err = build(&src, &placeholder([17, 16, 3, 3], DType::I8, "w").unwrap(), None, None, &good()).unwrap_err();
    assert!(matches!(&err, QuantError::Shape { .. }), "{err}");
    assert!(err.to_string().contains("input channels of the weights must be 17, found 16"), "{err}");
    let err = build(&src, &wei, Some(&placeholder([16], DType::F32, "b").unwrap()), None, &good()).unwrap_err();
    assert!(err.to_string().contains("shape of the bias must be [17], found [16]"), "{err}");
    let mut a = good();
    a.post_ops = vec![PostOp::Sum { scale: 1.0, zero_point: 0 }];
    let err = build(&src, &wei, None, Some(&placeholder([1, 17, 8, 7], DType::U8, "r").unwrap()), &a).unwrap_err();
    assert!(err.to_string().contains("shape of the sum input must be [1, 17, 8, 8], found [1, 17, 8, 7]"), "{err}");
    let err = build(&src, &wei, None, None, &a).unwrap_err();
    assert!(err.to_string().contains("1 sum post-ops and 0 sum inputs"), "{err}");
    let err = build(&src, &wei, None, Some(&placeholder([1, 17, 8, 8], DType::U8, "r").unwrap()), &good()).unwrap_err();
    assert!(err.to_string().contains("0 sum post-ops and 1 sum inputs"), "{err}");
    a.post_ops = vec![PostOp::Sum { scale: 0.0, zero_point: 0 }];
    let err = build(&src, &wei, None, Some(&placeholder([1, 17, 8, 8], DType::U8, "r").unwrap()), &a).unwrap_err();
    assert!(matches!(&err, QuantError::BadScale { .. }), "{err}");
    // Masks the operator does not support, and per-channel scales of the wrong count.
    let mut a = good();
    a.src.scales = Scales::new("src", vec![0.1; 17], 0b10, src.shape()).unwrap();
    let err = build(&src, &wei, None, None, &a).unwrap_err();
    assert!(matches!(&err, QuantError::UnsupportedMask { found: 2, .. }), "{err}");
    assert!(err.to_string().contains("src scales must have mask 0 (per tensor), found mask 0b10"), "{err}");
    let mut a = good();
    a.wei_scales = Scales { values: vec![0.1; 16], mask: 1 };
    let err = build(&src, &wei, None, None, &a).unwrap_err();
    assert!(matches!(&err, QuantError::MaskCount { expected: 17, found: 16, .. }), "{err}");
    a.wei_scales = Scales { values: vec![0.1; 17 * 17], mask: 0b11 };
    let err = build(&src, &wei, None, None, &a).unwrap_err();
    assert!(matches!(&err, QuantError::UnsupportedMask { found: 3, .. }), "{err}");
    a.wei_scales = Scales { values: vec![0.1; 17], mask: 1 };
    a.src.zero_points = ZeroPoints { values: vec![-1], mask: 0 };
    let err = build(&src, &wei, None, None, &a).unwrap_err();
    assert!(matches!(&err, QuantError::ZeroPointRange { value: -1, .. }), "{err}");
    // Operator shapes.
    let err = conv2d_nchw_int8(&src, &wei, None, None, Conv2dParams { stride: 0, pad: 0 }, &good(), "c").unwrap_err();
    assert!(err.to_string().contains("stride >= 1 and pad >= 0"), "{err}");
    let err = dense_int8(
        &placeholder([1, 16], DType::U8, "s").unwrap(),
        &placeholder([4, 17], DType::I8, "w").unwrap(),
        None,
        None,
        &good(),
        "d",
    )
    .unwrap_err();
    assert!(err.to_string().contains("input channels of the weights must be 16, found 17"), "{err}");
    let err = max_pool2d(&src, 3, 2, 3, "p").unwrap_err();
    assert!(err.to_string().contains("0 <= pad < k"), "{err}");
    let err = oihw_to_vnni_blocked(&wei, 6, 16, "w").unwrap_err();
    assert!(err.to_string().contains("x a positive multiple of 4"), "{err}");
    let err = nchwc_to_nchw(&placeholder([1, 2, 3, 3, 16], DType::U8, "b").unwrap(), 40, "n").unwrap_err();
    assert!(err.to_string().contains("channel count must be 17 to 32"), "{err}");
    let x = placeholder([2, 3], DType::F32, "x").unwrap();
    let q = TensorQuant::per_tensor("q", 0.1, 0, DType::U8).unwrap();
    let err = quantize(&x, &q, DType::F32, "q").unwrap_err();
    assert!(err.to_string().contains("dtype of the destination must be u8, i8 or i32, found f32"), "{err}");
    let err = dequantize(&x, &q, "d").unwrap_err();
    assert!(err.to_string().contains("dtype of the source must be u8, i8 or i32, found f32"), "{err}");
    let bad = TensorQuant { scales: Scales { values: vec![0.1; 2], mask: 0b10 }, zero_points: q.zero_points.clone() };
    let err = requantize(&placeholder_vec(vec![2, 3], DType::U8, "x").unwrap(), &bad, &q, DType::U8, "r").unwrap_err();
    assert!(matches!(&err, QuantError::MaskCount { expected: 3, found: 2, .. }), "{err}");
    assert!(err.to_string().contains("requantize input scales: mask 0b10 over dimensions [2, 3] needs 3"), "{err}");
    let zp = ZeroPoints::per_tensor("z", 0, DType::U8).unwrap();
    let err = compensation(&placeholder([4, 4, 1], DType::I8, "w").unwrap(), DType::U8, &zp, "c").unwrap_err();
    assert!(err.to_string().contains("[OC, IC] or [OC, IC, KH, KW]"), "{err}");
    let err = add_int8(
        (&placeholder([1, 2, 3, 3], DType::U8, "a").unwrap(), &q),
        (&placeholder([1, 2, 3, 4], DType::U8, "b").unwrap(), &q),
        false,
        (DType::U8, &q),
        "add",
    )
    .unwrap_err();
    assert!(err.to_string().contains("shape of the sum input must be [1, 2, 3, 3], found [1, 2, 3, 4]"), "{err}");
}

/// `values` of an NCHW array of `dims` in `layout` order.
fn in_layout<T: Copy>(values: &[T], [n, c, h, w]: [i64; 4], layout: Layout) -> Vec<T> {
    if layout == Layout::Nchw || values.is_empty() {
        return values.to_vec();
    }
    let mut out = Vec::with_capacity(values.len());
    for b in 0..n {
        for y in 0..h {
            for x in 0..w {
                out.extend((0..c).map(|ch| values[(((b * c + ch) * h + y) * w + x) as usize]));
            }
        }
    }
    out
}

/// The weights an x86 convolution test draws, and the kernel family they lead to where the host
/// has AVX2 (code compiled for exactly that level, `x86_conv::Conv2dInt8Knobs::operands` with
/// the weights packed as i16 pairs, or as bytes).
#[derive(Clone, Copy, Debug)]
enum WeightCase {
    /// Any i8 (-128 included): pre-widened i16 operands; as bytes, a u8 GEMM source and exact
    /// widening.
    Full,
    /// [-127, 127]: pre-widened i16 operands; as bytes, an i8 GEMM source (shifted by -128) and
    /// sign transfer.
    NoMin,
    /// [-64, 63]: a u8 GEMM source whose pair sums provably fit i16, the vpmaddubsw triple.
    SevenBit,
}

impl WeightCase {
    fn range(self) -> (i64, i64) {
        match self {
            WeightCase::Full => (-128, 127),
            WeightCase::NoMin => (-127, 127),
            WeightCase::SevenBit => (-64, 63),
        }
    }

    /// `len` weights drawn from the range, its ends included (so that `Full` has a -128).
    fn draw(self, len: usize, seed: u64) -> Vec<i64> {
        let (lo, hi) = self.range();
        let mut w = values(len, seed, lo, hi);
        w[0] = lo;
        w[len - 1] = hi;
        w
    }

    fn avx2_kernel(self, bytes: bool) -> KernelVariant {
        match (self, bytes) {
            (WeightCase::Full | WeightCase::NoMin, false) => KernelVariant::AVX2_MADD16,
            (WeightCase::Full, true) => KernelVariant::AVX2_WIDEN,
            (WeightCase::NoMin, true) => KernelVariant::AVX2_SIGN,
            (WeightCase::SevenBit, _) => KernelVariant::AVX2_MADDUBS,
        }
    }

    /// The operands of `knobs`, packed as bytes or not, for the actual weights `wei_v` where the
    /// host has AVX2 (else a u8 source, any weights).
    fn operands(self, knobs: Conv2dInt8Knobs, wei_v: &[i64], bytes: bool) -> GemmOperands {
        if !IsaLevel::Avx2.is_supported() {
            return GemmOperands::U8;
        }
        let packing = if bytes { Packing::Bytes } else { Packing::I16 };
        Conv2dInt8Knobs { packing, ..knobs }.operands(false, weight_range(wei_v.iter().map(|&w| w as i8)))
    }

    /// The intrinsic the schedule tensorizes into for these weights.
    fn intrinsic(self, bytes: bool) -> &'static str {
        let widened = IsaLevel::Avx2.is_supported() && self.avx2_kernel(bytes) == KernelVariant::AVX2_MADD16;
        if widened { "int16_gemm" } else { "int8_gemm" }
    }
}

/// Whether a test case keeps the weights as bytes, alternated with the weight ranges (seeds
/// step by 11) so that every range meets both.
fn byte_weights(seed: u64) -> bool {
    seed / 33 % 2 == 1
}

/// One convolution through the x86 direct schedule (`schedules::x86_conv`) with source, sum
/// input and output in `layout`, JIT-compiled with its weight preparation, against the plain-Rust
/// reference; returns the lowered per-call function's text, the origins of its machine code and
/// its kernel families. With AVX2 on the host, the code is compiled for exactly AVX2 and the
/// operands follow the knobs and the weights (`WeightCase::operands`); otherwise a u8 source.
#[allow(clippy::too_many_arguments)]
fn check_x86_conv(
    layout: Layout,
    [n, ic, h, w]: [i64; 4],
    [oc, k]: [i64; 2],
    conv: Conv2dParams,
    l: &Layer,
    knobs: Conv2dInt8Knobs,
    weights: WeightCase,
    seed: u64,
) -> (String, Vec<String>, Vec<KernelVariant>) {
    let (slo, shi) = range_of(l.src_dtype);
    let src_v = values((n * ic * h * w) as usize, seed, slo, shi);
    let wei_v = weights.draw((oc * ic * k * k) as usize, seed + 1);
    let operands = weights.operands(knobs, &wei_v, byte_weights(seed));
    let bias: Vec<f64> = values(oc as usize, seed + 2, -400, 1600).iter().map(|&b| (b as f32 * 0.37) as f64).collect();
    let (oh, ow) = ((h + 2 * conv.pad - k) / conv.stride + 1, (w + 2 * conv.pad - k) / conv.stride + 1);
    let out_dims = [n, oc, oh, ow];
    let with_sum = l.post_ops.iter().any(|p| matches!(p, PostOp::Sum { .. }));
    let res_dtype = l.src_dtype;
    let (rlo, rhi) = range_of(res_dtype);
    let residual = if with_sum { values((n * oc * oh * ow) as usize, seed + 3, rlo, rhi) } else { vec![] };
    let bias_f32: Vec<f32> = bias.iter().map(|&b| b as f32).collect();
    let (x, _) = reference_conv_x(&src_v, [n, ic, h, w], &wei_v, [oc, k], conv, l, &bias_f32, &residual);
    let dst = dst_quant_for(&x, l.dst_dtype);
    let want: Vec<f64> = x.iter().map(|&v| store(v / dst.0 + dst.1 as f32, l.dst_dtype)).collect();
    let what = format!(
        "x86 conv {ic}->{oc} {h}x{w} k{k} s{} p{} {}->{} per_channel={} {:?} {knobs:?}",
        conv.stride, conv.pad, l.src_dtype, l.dst_dtype, l.per_channel, l.post_ops
    );
    assert_exercised(&what, &want, l.dst_dtype);

    let want = in_layout(&want, out_dims, layout);
    let (src_dims, out_dims) = (layout.shape([n, ic, h, w]), layout.shape(out_dims));
    let src = placeholder(src_dims, l.src_dtype, "src").unwrap();
    let wei = placeholder([oc, ic, k, k], DType::I8, "wei").unwrap();
    let b = placeholder([oc], DType::F32, "bias").unwrap();
    let r = placeholder(out_dims, res_dtype, "residual").unwrap();
    let a = attrs(l, oc, wei.shape(), dst, &out_dims);
    let target = if IsaLevel::Avx2.is_supported() { Target::Level(IsaLevel::Avx2) } else { Target::Native };
    let options = CompileOptions { target, ..CompileOptions::default() };
    let zp = ZeroPoints::per_tensor("src", l.src_zp, l.src_dtype).unwrap();
    let prep = prepare_conv2d_int8(&wei, conv.stride, l.src_dtype, &zp, knobs, operands, "prep").unwrap();
    let prep_args: Vec<&Tensor> = prep.args.iter().collect();
    let prep_kernel = tensorlift::build(&prep.schedule, &prep_args, "prep", &options).unwrap();
    let mut wei_t = RtTensor::from_array(&Array::from_i64(DType::I8, &[oc, ic, k, k], &wei_v));
    let mut packed_t = RtTensor::zeros(prep.packed_weights.dtype(), prep.packed_weights.shape()).unwrap();
    let mut comp_t = RtTensor::zeros(DType::I32, &[oc]).unwrap();
    prep_kernel.compiled.call(&mut [&mut wei_t, &mut packed_t, &mut comp_t]).unwrap();

    let f =
        conv2d_int8(&src, &wei, Some(&b), with_sum.then_some(&r), conv, &a, layout, knobs, operands, "conv").unwrap();
    let args: Vec<&Tensor> = f.args.iter().collect();
    let kernel = tensorlift::build(&f.schedule, &args, "conv", &options).unwrap();
    let src_v = in_layout(&src_v, [n, ic, h, w], layout);
    let mut src_t = RtTensor::from_array(&Array::from_i64(l.src_dtype, &src_dims, &src_v));
    let mut bias_t = RtTensor::from_array(&Array::from_f64(DType::F32, &[oc], &bias));
    let residual = in_layout(&residual, [n, oc, oh, ow], layout);
    let mut res_t = with_sum.then(|| RtTensor::from_array(&Array::from_i64(res_dtype, &out_dims, &residual)));
    let mut params: Vec<RtTensor> = f.layer.params.iter().map(|p| RtTensor::from_array(&p.values)).collect();
    let mut out_t = RtTensor::zeros(l.dst_dtype, &out_dims).unwrap();
    let mut call: Vec<&mut RtTensor> = vec![&mut src_t, &mut packed_t, &mut comp_t, &mut bias_t];
    call.extend(res_t.as_mut());
    call.extend(params.iter_mut());
    call.push(&mut out_t);
    kernel.compiled.call(&mut call).unwrap();
    assert_same(&what, &out_t.to_array(), &want);
    let origins = kernel.compiled.machine_code().iter().map(|m| m.origin.clone()).collect();
    (ir::lower::lower(&f.schedule, &args, "conv").unwrap().to_string(), origins, kernel.compiled.kernel_variants())
}

/// The default knobs of a resnet-18 layer on full-rate cores and two threads.
fn full_rate(layer: &schedules::resnet18::ConvLayer) -> Conv2dInt8Knobs {
    default_conv_knobs(layer, CoreRate::FullZmmVnni, 2)
}

#[test]
fn x86_conv2d_matches_the_reference_on_tails_strides_and_the_stem() {
    let small = Conv2dInt8Knobs {
        mr: 4,
        nr: 16,
        lanes: 8,
        order: TileOrder::PixelsOuter,
        threads: 2,
        packing: Packing::I16,
        // OC 17 is not a multiple of nr: computed whole.
        accumulation: Accumulate::PerRow,
    };
    let cases: [([i64; 4], [i64; 2], Conv2dParams, Conv2dInt8Knobs); 6] = [
        // ic = oc = 17: kernel rows of 51 → 52 bytes, OC not a multiple of nr; stride 2 over an
        // odd 9 × 11 input.
        ([1, 17, 9, 11], [17, 3], Conv2dParams { stride: 2, pad: 1 }, small),
        // An R-shaped 3 × 3 layer, width 10 not a multiple of the 8-lane epilogue nor of mr.
        ([1, 64, 10, 10], [64, 3], Conv2dParams { stride: 1, pad: 1 }, full_rate(&CONV_LAYERS[1])),
        // 1 × 1 stride 2 (R4-shaped).
        ([1, 32, 13, 13], [32, 1], Conv2dParams { stride: 2, pad: 0 }, full_rate(&CONV_LAYERS[3])),
        // The stem: 7 × 7 stride 2 with 3 input channels (21 bytes per kernel row, read as 24).
        ([1, 3, 23, 21], [16, 7], Conv2dParams { stride: 2, pad: 3 }, full_rate(&CONV_LAYERS[0])),
        // Batch 2, mr not dividing OW; channel panels outermost; a row at a time.
        (
            [2, 8, 6, 5],
            [32, 3],
            Conv2dParams { stride: 1, pad: 1 },
            Conv2dInt8Knobs {
                mr: 3,
                nr: 16,
                lanes: 4,
                order: TileOrder::ChannelsOuter,
                threads: 1,
                packing: Packing::I16,
                accumulation: Accumulate::PerRow,
            },
        ),
        (
            [1, 17, 9, 11],
            [17, 3],
            Conv2dParams { stride: 2, pad: 1 },
            Conv2dInt8Knobs {
                mr: 4,
                nr: 32,
                lanes: 16,
                order: TileOrder::ChannelsOuter,
                threads: 1,
                packing: Packing::I16,
                accumulation: Accumulate::Whole,
            },
        ),
    ];
    let mut seed = 500;
    for (i, (src, w, conv, knobs)) in cases.into_iter().enumerate() {
        for (src_dtype, dst, per_channel, post) in [
            (DType::U8, DType::U8, true, vec![PostOp::Relu]),
            (DType::U8, DType::U8, false, vec![]),
            (DType::I8, DType::I8, i % 2 == 0, post_op_sets(DType::I8)[3].clone()),
            (DType::U8, DSTS[i % 4], true, post_op_sets(DType::U8)[i % 4].clone()),
        ] {
            let l = layer_case(src_dtype, dst, per_channel, post, w[0] as usize);
            // Every case in both layouts would double the test time: alternate them.
            let layout = if seed % 2 == 0 { Layout::Nchw } else { Layout::Nhwc };
            // Likewise the weight ranges, so every case meets each kernel family.
            let weights = [WeightCase::NoMin, WeightCase::Full, WeightCase::SevenBit][(seed / 11 % 3) as usize];
            let (ir, origins, variants) = check_x86_conv(layout, src, w, conv, &l, knobs, weights, seed);
            // One call per tile over every kernel row (`KH` segments), run by an assembled
            // kernel wherever the host has one (AVX2 and up), not by the call's fallback loops.
            let segments = if w[1] > 1 { format!("{}x", w[1]) } else { String::new() };
            let (bytes, intrinsic) = (byte_weights(seed), weights.intrinsic(byte_weights(seed)));
            assert!(ir.contains(&format!("call reset {intrinsic}_{}x{}x{segments}", knobs.mr, knobs.nr)), "{ir}");
            // A row of accumulators is computed inside the output's row loop where asked and
            // the panels divide the channels.
            let ow = (src[3] + 2 * conv.pad - w[1]) / conv.stride + 1;
            let row = format!("allocate conv.acc: i32[1, 1, {ow}, {}]", w[0]);
            let per_row = knobs.accumulation != Accumulate::Whole && w[0] % knobs.nr == 0;
            assert_eq!(ir.contains(&row), per_row, "{knobs:?} {row}\n{ir}");
            // With its source rows copied inside it, after its buffer is allocated.
            let with_source = per_row && knobs.accumulation == Accumulate::PerRowWithSource;
            let copied_inside =
                matches!((ir.find("allocate conv.pad"), ir.find(&row)), (Some(pad), Some(acc)) if pad > acc);
            assert_eq!(copied_inside, with_source, "{knobs:?}\n{ir}");
            if crate::skip::has_level(IsaLevel::Avx2, "its kernel checks") {
                let assembled = format!("kernel for {intrinsic}_{}x{}x{segments}", knobs.mr, knobs.nr);
                assert!(origins.iter().any(|o| o.contains(&assembled)), "{origins:?}");
                assert_eq!(variants, [weights.avx2_kernel(bytes)], "{weights:?} bytes {bytes}");
            }
            seed += 11;
        }
    }
}

/// `x86_conv::dense_int8` (a 1×1 convolution over 1×1 images, tensorized), JIT-compiled with its
/// weight preparation, bit for bit against the interpreter of `ops::dense_int8` and the
/// plain-Rust formula: odd sizes (IC 37, OC 21 not a multiple of `nr`), one and three rows, u8 → u8
/// with per-channel scales, and an i8 source.
#[test]
fn x86_dense_matches_the_definition_with_odd_sizes() {
    let (ic, oc) = (37i64, 21i64);
    let fc = DenseLayer { name: "fc", in_features: ic, out_features: oc };
    // The default tile never exceeds the rows (one row: mr = 1); no panel width divides OC 21.
    let tile = |k: Conv2dInt8Knobs| (k.mr, k.nr);
    assert_eq!((tile(default_dense_knobs(&fc, 1)), tile(default_dense_knobs(&fc, 3))), ((1, 16), (3, 16)));
    let mut seed = 900;
    for (m, knobs) in [
        (1, default_dense_knobs(&fc, 1)),
        (3, default_dense_knobs(&fc, 3)),
        (
            3,
            Conv2dInt8Knobs {
                mr: 2,
                nr: 16,
                lanes: 8,
                order: TileOrder::PixelsOuter,
                threads: 2,
                packing: Packing::I16,
                accumulation: Accumulate::PerRow,
            },
        ),
    ] {
        for src_dtype in [DType::U8, DType::I8] {
            let l = layer_case(src_dtype, DType::U8, true, vec![], oc as usize);
            let (slo, shi) = range_of(src_dtype);
            let src_v = values((m * ic) as usize, seed, slo, shi);
            let weights = [WeightCase::NoMin, WeightCase::SevenBit, WeightCase::Full][(seed / 11 % 3) as usize];
            let wei_v = weights.draw((oc * ic) as usize, seed + 1);
            let operands = weights.operands(knobs, &wei_v, byte_weights(seed));
            let bias: Vec<f64> =
                values(oc as usize, seed + 2, -200, 800).iter().map(|&b| (b as f32 * 0.37) as f64).collect();
            let mut x = Vec::new();
            for i in 0..m as usize {
                for o in 0..oc as usize {
                    let acc: i64 = (0..ic as usize)
                        .map(|c| (src_v[i * ic as usize + c] - l.src_zp as i64) * wei_v[o * ic as usize + c])
                        .sum();
                    x.push(acc as i32 as f32 * (l.src_scale * l.wei_scales[o]) + bias[o] as f32);
                }
            }
            let dst_q = dst_quant_for(&x, DType::U8);
            let want: Vec<f64> = x.iter().map(|&v| store(v / dst_q.0 + dst_q.1 as f32, DType::U8)).collect();
            let what = format!("x86 dense {m}x{ic}->{oc} {src_dtype}->u8 {weights:?} {knobs:?}");
            assert_exercised(&what, &want, DType::U8);

            let src = placeholder([m, ic], src_dtype, "src").unwrap();
            let wei = placeholder([oc, ic], DType::I8, "wei").unwrap();
            let b = placeholder([oc], DType::F32, "bias").unwrap();
            let a = attrs(&l, oc, wei.shape(), dst_q, &[m, oc]);
            let src_a = Array::from_i64(src_dtype, &[m, ic], &src_v);
            let wei_a = Array::from_i64(DType::I8, &[oc, ic], &wei_v);
            let bias_a = Array::from_f64(DType::F32, &[oc], &bias);
            let def = dense_int8(&src, &wei, Some(&b), None, &a, "fc").unwrap();
            let (interpreted, _) = eval_layer(&def, (&wei, &wei_a), &l, &[(&src, &src_a), (&b, &bias_a)], "fc");
            assert_same(&what, &interpreted, &want);

            let target = if IsaLevel::Avx2.is_supported() { Target::Level(IsaLevel::Avx2) } else { Target::Native };
            let options = CompileOptions { target, ..CompileOptions::default() };
            let zp = ZeroPoints::per_tensor("src", l.src_zp, src_dtype).unwrap();
            let prep = prepare_dense_int8(&wei, src_dtype, &zp, knobs, operands, "prep").unwrap();
            assert_eq!(prep.args[0].shape(), [oc, ic, 1, 1]);
            let prep_args: Vec<&Tensor> = prep.args.iter().collect();
            let prep_kernel = tensorlift::build(&prep.schedule, &prep_args, "prep", &options).unwrap();
            let mut wei_t = RtTensor::from_array(&Array::from_i64(DType::I8, &[oc, ic, 1, 1], &wei_v));
            let mut packed_t = RtTensor::zeros(prep.packed_weights.dtype(), prep.packed_weights.shape()).unwrap();
            let mut comp_t = RtTensor::zeros(DType::I32, &[oc]).unwrap();
            prep_kernel.compiled.call(&mut [&mut wei_t, &mut packed_t, &mut comp_t]).unwrap();

            let f = schedules::x86_conv::dense_int8(&src, &wei, Some(&b), &a, knobs, operands, "fc").unwrap();
            let args: Vec<&Tensor> = f.args.iter().collect();
            let kernel = tensorlift::build(&f.schedule, &args, "fc", &options).unwrap();
            let mut src_t = RtTensor::from_array(&Array::from_i64(src_dtype, &[1, 1, m, ic], &src_v));
            let mut bias_t = RtTensor::from_array(&bias_a);
            let mut params: Vec<RtTensor> = f.layer.params.iter().map(|p| RtTensor::from_array(&p.values)).collect();
            let mut out_t = RtTensor::zeros(DType::U8, &[1, 1, m, oc]).unwrap();
            let mut call: Vec<&mut RtTensor> = vec![&mut src_t, &mut packed_t, &mut comp_t, &mut bias_t];
            call.extend(params.iter_mut());
            call.push(&mut out_t);
            kernel.compiled.call(&mut call).unwrap();
            assert_same(&what, &out_t.to_array(), &want);
            let ir = ir::lower::lower(&f.schedule, &args, "fc").unwrap().to_string();
            let a_suffix = if operands.source == DType::I8 { "_s8" } else { "" };
            let intrinsic = weights.intrinsic(byte_weights(seed));
            assert!(ir.contains(&format!("call reset {intrinsic}_{}x{}x40{a_suffix}(", knobs.mr, knobs.nr)), "{ir}");
            if crate::skip::has_level(IsaLevel::Avx2, "its kernel checks") {
                assert_eq!(kernel.compiled.kernel_variants(), [weights.avx2_kernel(byte_weights(seed))], "{what}");
            }
            seed += 11;
        }
    }
}

/// Requantization to an f32 destination is oneDNN's formula (the seed document "Quantization")
/// `(scale_src · scale_wei · s32_to_f32(acc − zp_src · comp) + bias) / scale_dst + zp_dst`
/// evaluated left to right in f32, to the bit, in the definition and in the compiled generic
/// schedule. The inputs make the order matter: random scales with full mantissas, accumulators
/// past 2^24 (so the s32 → f32 conversion rounds too), random biases. Each alternative order
/// (the accumulator times each scale in turn; a multiply by `1 / scale_dst`) is shown to differ
/// from the formula on some of these inputs, so a change of order would fail the check.
#[test]
fn requantization_follows_onednns_formula_to_the_bit() {
    let (m, ic, oc) = (16usize, 2000usize, 64usize);
    // Large sources and mostly positive weights, so that most accumulators exceed 2^24.
    let src_v = values(m * ic, 9001, 100, 255);
    let wei_v = values(oc * ic, 9002, -20, 127);
    // Scales and biases with random 24-bit mantissas.
    let mantissas = values(oc + 2, 9003, 1 << 23, (1 << 24) - 1);
    let src_scale = mantissas[oc] as f32 * 2f32.powi(-30);
    let dst_scale = mantissas[oc + 1] as f32 * 2f32.powi(-20);
    let wei_scales: Vec<f32> = mantissas[..oc].iter().map(|&v| v as f32 * 2f32.powi(-31)).collect();
    let bias: Vec<f32> = values(oc, 9004, -(1 << 30), 1 << 30).iter().map(|&b| b as f32 * 2f32.powi(-26)).collect();
    let (src_zp, dst_zp) = (3, 5);

    let (mut formula, mut separate, mut reciprocal) = (Vec::new(), Vec::new(), Vec::new());
    let mut past_2_24 = 0;
    for i in 0..m {
        for o in 0..oc {
            let acc: i64 = (0..ic).map(|c| (src_v[i * ic + c] - src_zp as i64) * wei_v[o * ic + c]).sum();
            past_2_24 += (acc.abs() > 1 << 24) as usize;
            let acc = acc as i32 as f32; // s32_to_f32: round to nearest even
            // oneDNN's formula, one operation at a time.
            let scales = src_scale * wei_scales[o];
            let x = scales * acc + bias[o];
            let y = x / dst_scale + dst_zp as f32;
            formula.push(y as f64);
            separate.push(((src_scale * acc * wei_scales[o] + bias[o]) / dst_scale + dst_zp as f32) as f64);
            reciprocal.push((x * (1.0 / dst_scale) + dst_zp as f32) as f64);
        }
    }
    let differ = |alt: &[f64]| alt.iter().zip(&formula).filter(|(a, f)| a.to_bits() != f.to_bits()).count();
    assert!(past_2_24 > 0, "no accumulator is large enough for s32_to_f32 to round");
    assert!(differ(&separate) > 0, "separate scale multiplies never differ from the product on these inputs");
    assert!(differ(&reciprocal) > 0, "the reciprocal of scale_dst never differs from the division on these inputs");

    let src = placeholder([m as i64, ic as i64], DType::U8, "src").unwrap();
    let wei = placeholder([oc as i64, ic as i64], DType::I8, "wei").unwrap();
    let b = placeholder([oc as i64], DType::F32, "bias").unwrap();
    let out_dims = [m as i64, oc as i64];
    let attrs = QuantAttrs {
        src: TensorQuant::per_tensor("src", src_scale, src_zp, DType::U8).unwrap(),
        wei_scales: Scales::new("wei", wei_scales.clone(), 1, wei.shape()).unwrap(),
        dst: TensorQuant::per_tensor("dst", dst_scale, dst_zp, DType::F32).unwrap(),
        dst_dtype: DType::F32,
        post_ops: vec![],
        requantization: Requantization::OneDnn,
    };
    let layer = dense_int8(&src, &wei, Some(&b), None, &attrs, "fc").unwrap();
    let l = Layer {
        src_dtype: DType::U8,
        dst_dtype: DType::F32,
        src_zp,
        src_scale,
        wei_scales: wei_scales.clone(),
        per_channel: true,
        post_ops: vec![],
    };
    let src_a = Array::from_i64(DType::U8, &[m as i64, ic as i64], &src_v);
    let wei_a = Array::from_i64(DType::I8, &[oc as i64, ic as i64], &wei_v);
    let bias_a = Array::from_f64(DType::F32, &[oc as i64], &bias.iter().map(|&v| v as f64).collect::<Vec<_>>());
    let (got, comp) = eval_layer(&layer, (&wei, &wei_a), &l, &[(&src, &src_a), (&b, &bias_a)], "fc");
    assert_same("definition vs oneDNN's formula", &got, &formula);

    let mut args: Vec<&Tensor> = vec![&src, &wei, &layer.compensation, &b];
    args.extend(layer.params.iter().map(|p| &p.tensor));
    args.push(&layer.output);
    let kernel =
        tensorlift::build(&default_schedule(&[&layer.output]), &args, "fc", &CompileOptions::default()).unwrap();
    let mut inputs: Vec<RtTensor> = [&src_a, &wei_a, &comp, &bias_a].into_iter().map(RtTensor::from_array).collect();
    inputs.extend(layer.params.iter().map(|p| RtTensor::from_array(&p.values)));
    inputs.push(RtTensor::zeros(DType::F32, &out_dims).unwrap());
    let mut call: Vec<&mut RtTensor> = inputs.iter_mut().collect();
    kernel.compiled.call(&mut call).unwrap();
    assert_same("JIT vs oneDNN's formula", &inputs.pop().unwrap().to_array(), &formula);
}
