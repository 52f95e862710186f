//! The quantized convolution and matrix product of imported networks (`layer::compile_qconv`,
//! `compile_qdense`) against a plain-Rust reference of onnxruntime's QLinearConv / QGemm written
//! here in MLAS's own steps (i32 accumulator plus i32 bias, f32 conversion, one multiply by the
//! f32 scale `(x_scale · w_scale[c]) / y_scale`, clamp to `[lo − zp, hi − zp]` in f32, round
//! half to even, `+ zp` in i32), bit for bit, at every level this CPU has, with the
//! requantization run by the map kernel. And the check can fail: oneDNN's order gives other
//! integers on the same accumulators.

use ir::DType;
use tensorlift::bench::uniform;
use tensorlift::layer::{ActQuant, LayerError, QConvSpec, QDenseSpec, compile_qconv, compile_qdense};
use tensorlift::{CompileOptions, IsaLevel, Target};

/// The levels with hand-assembled kernels this CPU has (others reported skipped).
fn levels() -> Vec<IsaLevel> {
    crate::skip::levels_here_for([IsaLevel::Avx2, IsaLevel::AvxVnni, IsaLevel::Avx512Vnni], "ort requantization")
}

fn options(level: IsaLevel, threads: usize) -> CompileOptions {
    CompileOptions { target: Target::Level(level), threads: Some(threads), ..CompileOptions::default() }
}

/// The range of a u8 or i8 activation.
fn bounds(dtype: DType) -> (i32, i32) {
    if dtype == DType::U8 { (0, 255) } else { (-128, 127) }
}

/// A byte of `dtype` as its value.
fn value(dtype: DType, byte: u8) -> i32 {
    if dtype == DType::U8 { i32::from(byte) } else { i32::from(byte as i8) }
}

/// The exact accumulators `Σ (x − zp)·w + bias` of `spec`, NHWC `[OH, OW, OC]`, padding
/// holding the zero point.
fn accumulators(spec: &QConvSpec, src: &[u8]) -> Vec<i32> {
    let (oh, ow) = spec.output_hw();
    let (h, w, ic, oc, kh, kw) = (spec.h, spec.w, spec.ic, spec.oc, spec.kh, spec.kw);
    let (s, p) = (spec.stride.0, spec.pads[0]);
    let zp = spec.src.zero_point;
    let mut out = Vec::new();
    for y in 0..oh {
        for x in 0..ow {
            for c in 0..oc {
                let mut acc = 0i32;
                for ky in 0..kh {
                    for kx in 0..kw {
                        let (iy, ix) = (y * s + ky - p, x * s + kx - p);
                        for i in 0..ic {
                            let v = if (0..h).contains(&iy) && (0..w).contains(&ix) {
                                value(spec.src.dtype, src[((iy * w + ix) * ic + i) as usize])
                            } else {
                                zp
                            };
                            let wv = i32::from(spec.weights[(((c * ic + i) * kh + ky) * kw + kx) as usize]);
                            acc = acc.wrapping_add((v - zp).wrapping_mul(wv));
                        }
                    }
                }
                let bias = spec.bias.as_ref().map_or(0, |b| b[c as usize]);
                out.push(acc.wrapping_add(bias));
            }
        }
    }
    out
}

/// onnxruntime's scale of channel `c`.
fn ort_scale(x_scale: f32, w_scales: &[f32], y_scale: f32, c: usize) -> f32 {
    let w = if w_scales.len() == 1 { w_scales[0] } else { w_scales[c] };
    x_scale * w / y_scale
}

/// MLAS's requantization of one accumulator (bias included), as bytes of `dtype`.
fn mlas_requantize(acc: i32, scale: f32, zp: i32, dtype: DType, relu: bool) -> u8 {
    let (lo, hi) = bounds(dtype);
    let v = (acc as f32 * scale).max((lo - zp) as f32).min((hi - zp) as f32);
    let mut q = v.round_ties_even() as i32 + zp;
    if relu {
        q = q.max(zp);
    }
    q as u8
}

/// oneDNN's order on the same accumulator, bias as f32 `bias · x_scale · w_scale`.
fn onednn_requantize(acc_without_bias: i32, bias: i32, (xs, ws, ys): (f32, f32, f32), zp: i32, dtype: DType) -> u8 {
    let (lo, hi) = bounds(dtype);
    let bias_f32 = bias as f32 * xs * ws;
    let x = (xs * ws) * acc_without_bias as f32 + bias_f32;
    let y = (x / ys + zp as f32).round_ties_even();
    y.clamp(lo as f32, hi as f32) as i32 as u8
}

/// The reference output of `spec` on `src`.
fn reference(spec: &QConvSpec, src: &[u8]) -> Vec<u8> {
    let oc = spec.oc as usize;
    accumulators(spec, src)
        .iter()
        .enumerate()
        .map(|(i, &acc)| {
            let s = ort_scale(spec.src.scale, &spec.weight_scales, spec.dst.scale, i % oc);
            mlas_requantize(acc, s, spec.dst.zero_point, spec.dst.dtype, spec.relu)
        })
        .collect()
}

/// Weight scales whose products with the source scale are powers of two on even channels
/// (`x_scale = 2^-4`, `y_scale = 1`: every odd multiple of half the step is a tie) and
/// arbitrary on odd ones; `per_channel` false: one power of two.
fn weight_scales(oc: i64, per_channel: bool, taps: i64, seed: u64) -> Vec<f32> {
    // About 2^-9 per tap count 576 keeps the results near the u8/i8 range, so that some
    // saturate and most do not.
    let k = ((taps as f64).sqrt() * 74.0 * 73.0 / 200.0).log2().round() as i32 - 4;
    let tie = 2f32.powi(-k);
    if !per_channel {
        return vec![tie];
    }
    let noise = uniform(oc as usize, seed, 500, 1500);
    (0..oc as usize).map(|c| if c % 2 == 0 { tie } else { tie * noise[c] as f32 / 1000.0 }).collect()
}

/// One geometry of the checks.
struct Case {
    what: &'static str,
    hw: (i64, i64),
    ic: i64,
    oc: i64,
    k: (i64, i64),
    stride: i64,
    pad: i64,
}

fn spec(case: &Case, src_dtype: DType, dst_dtype: DType, per_channel: bool, relu: bool, seed: u64) -> QConvSpec {
    let Case { hw: (h, w), ic, oc, k: (kh, kw), stride, pad, .. } = *case;
    let weights = uniform((oc * ic * kh * kw) as usize, seed, -127, 127).iter().map(|&v| v as i8).collect();
    let bias = uniform(oc as usize, seed + 1, -3000, 3000).iter().map(|&v| v as i32).collect();
    let zp = |d: DType, v: i32| if d == DType::U8 { v } else { v - 128 };
    QConvSpec {
        name: format!("{} {src_dtype}->{dst_dtype}", case.what),
        src: ActQuant { dtype: src_dtype, scale: 1.0 / 16.0, zero_point: zp(src_dtype, 121) },
        h,
        w,
        ic,
        oc,
        kh,
        kw,
        stride: (stride, stride),
        pads: [pad; 4],
        weights,
        weight_scales: weight_scales(oc, per_channel, ic * kh * kw, seed + 2),
        bias: Some(bias),
        dst: ActQuant { dtype: dst_dtype, scale: 1.0, zero_point: zp(dst_dtype, 119) },
        relu,
        sum: None,
    }
}

fn cases() -> Vec<Case> {
    vec![
        Case { what: "stem 7x7 s2 p3", hw: (20, 18), ic: 3, oc: 16, k: (7, 7), stride: 2, pad: 3 },
        Case { what: "3x3 s1 p1", hw: (9, 11), ic: 16, oc: 24, k: (3, 3), stride: 1, pad: 1 },
        Case { what: "1x1 s2 p0", hw: (10, 9), ic: 24, oc: 40, k: (1, 1), stride: 2, pad: 0 },
        Case { what: "narrow 3x3 s2 p1", hw: (8, 8), ic: 8, oc: 8, k: (3, 3), stride: 2, pad: 1 },
        Case { what: "3x1 s1 p0", hw: (7, 6), ic: 8, oc: 32, k: (3, 1), stride: 1, pad: 0 },
        Case { what: "odd channels 3x3 s1 p1", hw: (6, 7), ic: 5, oc: 12, k: (3, 3), stride: 1, pad: 1 },
    ]
}

/// The source of `spec`: random bytes (any byte is a u8 or an i8).
fn source(spec: &QConvSpec, seed: u64) -> Vec<u8> {
    uniform((spec.h * spec.w * spec.ic) as usize, seed, 0, 255).iter().map(|&v| v as u8).collect()
}

/// Counts of (saturated outputs, tied accumulators) of `spec` on `src`: the data must reach both.
fn edges(spec: &QConvSpec, src: &[u8]) -> (usize, usize) {
    let oc = spec.oc as usize;
    let (lo, hi) = bounds(spec.dst.dtype);
    let (mut saturated, mut ties) = (0, 0);
    for (i, &acc) in accumulators(spec, src).iter().enumerate() {
        let v = acc as f32 * ort_scale(spec.src.scale, &spec.weight_scales, spec.dst.scale, i % oc);
        let q = v.round_ties_even() as i64 + i64::from(spec.dst.zero_point);
        saturated += usize::from(q < i64::from(lo) || q > i64::from(hi));
        ties += usize::from((v - v.trunc()).abs() == 0.5);
    }
    (saturated, ties)
}

#[test]
fn quantized_convolutions_equal_onnxruntimes_order_bit_for_bit() {
    // The scalar level has no hand-assembled kernels: the same results from the loops.
    for level in std::iter::once(IsaLevel::Scalar).chain(levels()) {
        for (n, case) in cases().iter().enumerate() {
            for (v, (src_dtype, dst_dtype, per_channel, relu)) in [
                (DType::U8, DType::U8, true, false),
                (DType::U8, DType::U8, false, true),
                (DType::I8, DType::I8, true, true),
                (DType::I8, DType::U8, false, false),
            ]
            .into_iter()
            .enumerate()
            {
                let seed = 100 * n as u64 + 10 * v as u64;
                let spec = spec(case, src_dtype, dst_dtype, per_channel, relu, seed);
                let src = source(&spec, seed + 5);
                let threads = 1 + v % 2;
                let compiled = compile_qconv(&spec, None, &options(level, threads)).unwrap();
                let (oh, ow) = spec.output_hw();
                let mut dst = vec![0u8; (oh * ow * spec.oc) as usize];
                compiled.run(&src, &mut dst).unwrap();
                let what = format!("{} at {level}, per channel {per_channel}, relu {relu}", spec.name);
                assert_eq!(dst, reference(&spec, &src), "{what}");
                // A ymm map kernel needs 8 channels or more.
                if level != IsaLevel::Scalar && (spec.oc >= 8 || level == IsaLevel::Avx512Vnni) {
                    assert!(compiled.uses_map_kernel(), "{what}: {}", compiled.kernel_description());
                }
                if level != IsaLevel::Scalar {
                    assert!(!compiled.kernel_variants().is_empty(), "{what}: {}", compiled.kernel_description());
                }
                let (saturated, _) = edges(&spec, &src);
                assert!(saturated > 0 && saturated < dst.len(), "{what}: {saturated} of {} saturate", dst.len());
            }
        }
    }
}

#[test]
fn the_checks_data_reaches_ties() {
    let spec = spec(&cases()[1], DType::U8, DType::U8, true, false, 7);
    let src = source(&spec, 8);
    let (_, ties) = edges(&spec, &src);
    assert!(ties > 0, "no accumulator lands on a tie");
}

#[test]
fn quantized_matmuls_equal_onnxruntimes_order_bit_for_bit() {
    for level in levels() {
        for (m, k, n, per_channel, relu, alpha) in
            [(1, 64, 40, true, false, 1.0f32), (3, 72, 16, false, true, 1.0), (1, 24, 1000, true, true, 0.5)]
        {
            let seed = (m * k * n) as u64;
            let weights: Vec<i8> = uniform((k * n) as usize, seed, -127, 127).iter().map(|&v| v as i8).collect();
            let spec = QDenseSpec {
                name: format!("dense {m}x{k}x{n}"),
                src: ActQuant { dtype: DType::U8, scale: 1.0 / 16.0, zero_point: 117 },
                m,
                k,
                n,
                weights: weights.clone().into(),
                weights_transposed: false,
                weight_scales: weight_scales(n, per_channel, k, seed + 1),
                bias: Some(uniform(n as usize, seed + 2, -2000, 2000).iter().map(|&v| v as i32).collect()),
                alpha,
                dst: ActQuant { dtype: DType::U8, scale: 1.0, zero_point: 131 },
                relu,
            };
            let src: Vec<u8> = uniform((m * k) as usize, seed + 3, 0, 255).iter().map(|&v| v as u8).collect();
            let compiled = compile_qdense(&spec, None, &options(level, 1)).unwrap();
            let mut dst = vec![0u8; (m * n) as usize];
            compiled.run(&src, &mut dst).unwrap();
            let mut expected = Vec::new();
            for r in 0..m as usize {
                for c in 0..n as usize {
                    let mut acc = 0i32;
                    for i in 0..k as usize {
                        let x = i32::from(src[r * k as usize + i]) - spec.src.zero_point;
                        acc = acc.wrapping_add(x * i32::from(weights[i * n as usize + c]));
                    }
                    acc = acc.wrapping_add(spec.bias.as_ref().map_or(0, |b| b[c]));
                    let w = if per_channel { spec.weight_scales[c] } else { spec.weight_scales[0] };
                    // QGemm: `alpha · a_scale · b_scale`, then `/ y_scale`.
                    let s = alpha * spec.src.scale * w / spec.dst.scale;
                    expected.push(mlas_requantize(acc, s, spec.dst.zero_point, DType::U8, relu));
                }
            }
            let what = format!("{} at {level}", spec.name);
            assert_eq!(dst, expected, "{what}");
            assert!(compiled.uses_map_kernel(), "{what}: {}", compiled.kernel_description());
            // The same weights given `[N, K]` (a Gemm's `transB = 1`) compute the same bytes.
            let (ku, nu) = (k as usize, n as usize);
            let nk: Vec<i8> = (0..nu * ku).map(|i| weights[(i % ku) * nu + i / ku]).collect();
            let transposed = QDenseSpec { weights: nk.into(), weights_transposed: true, ..spec.clone() };
            let mut dst_t = vec![0u8; (m * n) as usize];
            compile_qdense(&transposed, None, &options(level, 1)).unwrap().run(&src, &mut dst_t).unwrap();
            assert_eq!(dst_t, expected, "{what}, weights [N, K]");
        }
    }
}

#[test]
fn onednns_order_differs_from_onnxruntimes_on_the_same_accumulators() {
    // The compiled path equals onnxruntime's order (above); here oneDNN's order on the same
    // accumulators gives other integers on some of them, so that check can fail.
    let Some(&level) = levels().first() else { return };
    // The data of `the_checks_data_reaches_ties`: on a tie `v = k + 1/2`, onnxruntime rounds
    // `v` and then adds the (odd) zero point, oneDNN rounds `v + zp`, to the other neighbour.
    let s = spec(&cases()[1], DType::U8, DType::U8, true, false, 7);
    let src = source(&s, 8);
    let compiled = compile_qconv(&s, None, &options(level, 1)).unwrap();
    let mut dst = vec![0u8; reference(&s, &src).len()];
    compiled.run(&src, &mut dst).unwrap();
    assert_eq!(dst, reference(&s, &src));
    let bias = s.bias.clone().unwrap_or_default();
    let without_bias = QConvSpec { bias: None, ..s.clone() };
    let oc = s.oc as usize;
    let onednn: Vec<u8> = accumulators(&without_bias, &src)
        .iter()
        .enumerate()
        .map(|(i, &acc)| {
            let c = i % oc;
            let scales = (s.src.scale, s.weight_scales[c], s.dst.scale);
            onednn_requantize(acc, bias[c], scales, s.dst.zero_point, s.dst.dtype)
        })
        .collect();
    let differing = dst.iter().zip(&onednn).filter(|(a, b)| a != b).count();
    assert!(differing > 0, "oneDNN's order agreed on all {} outputs", dst.len());
}

#[test]
fn bad_specs_are_typed_errors_naming_the_operator() {
    let good = spec(&cases()[1], DType::U8, DType::U8, true, false, 1);
    let defaults = CompileOptions::default();
    let bad: Vec<(&str, QConvSpec)> = vec![
        ("pads", QConvSpec { pads: [1, 1, 0, 0], ..good.clone() }),
        ("strides", QConvSpec { stride: (1, 2), ..good.clone() }),
        ("weights", QConvSpec { weights: vec![0; 5].into(), ..good.clone() }),
        ("weight scales", QConvSpec { weight_scales: vec![1.0; 3], ..good.clone() }),
        ("bias", QConvSpec { bias: Some(vec![0; 2]), ..good.clone() }),
        ("dtype", QConvSpec { dst: ActQuant { dtype: DType::I32, ..good.dst }, ..good.clone() }),
        ("zero point", QConvSpec { src: ActQuant { zero_point: 300, ..good.src }, ..good.clone() }),
        ("scale", QConvSpec { src: ActQuant { scale: f32::NAN, ..good.src }, ..good.clone() }),
        ("kernel", QConvSpec { kh: 40, weights: vec![0; (24 * 16 * 40 * 3) as usize].into(), ..good.clone() }),
        ("ic", QConvSpec { ic: 0, ..good.clone() }),
        ("oc", QConvSpec { oc: 1 << 40, ..good.clone() }),
        ("strides", QConvSpec { stride: (0, 0), ..good.clone() }),
        (
            "output scale",
            QConvSpec {
                src: ActQuant { scale: 1e30, ..good.src },
                dst: ActQuant { scale: 1e-12, ..good.dst },
                ..good.clone()
            },
        ),
    ];
    for (what, spec) in bad {
        match compile_qconv(&spec, None, &defaults) {
            Err(LayerError::Spec(e)) => {
                assert!(e.op.contains(&good.name), "{what}: {e}");
                assert!(e.what.contains(what), "{what}: {e}");
            }
            Err(e) => panic!("{what}: not a spec error: {e}"),
            Ok(_) => panic!("{what}: compiled"),
        }
    }
    let Some(&level) = levels().first() else { return };
    let compiled = compile_qconv(&good, None, &options(level, 1)).unwrap();
    let mut dst = vec![0u8; 3];
    let e = compiled.run(&[0; 4], &mut dst).unwrap_err();
    assert!(e.to_string().contains("the length of the source"), "{e}");
}

#[test]
fn default_knobs_are_valid_for_any_geometry() {
    use schedules::resnet18::ConvLayer;
    use schedules::x86_conv::{CoreRate, default_conv_knobs};
    for (ic, oc, hw, k, stride, pad) in
        [(3, 8, 1, 1, 1, 0), (3, 64, 224, 7, 2, 3), (5, 12, 3, 3, 2, 1), (7, 1, 2, 1, 1, 0)]
            .into_iter()
            .chain((1..70).map(|oc| (oc % 9 + 1, oc, oc % 13 + 1, 1 + 2 * (oc % 2), 1 + oc % 3, oc % 2)))
    {
        let layer = ConvLayer { name: "any", ic, oc, h: hw, w: hw, k, stride, pad };
        for rate in [CoreRate::FullZmmVnni, CoreRate::Slower] {
            let knobs = default_conv_knobs(&layer, rate, 2);
            let what = format!("{layer:?}: {knobs:?}");
            assert_eq!(knobs.check(), Ok(()), "{what}");
            assert!(knobs.mr <= layer.ow().max(1), "{what}");
        }
    }
}

/// The definition itself (`ops::dense_int8` in onnxruntime's order, the compensation of
/// `ops::compensation` with the bias folded in) by the interpreter, against the plain reference:
/// what a reference of a graph can use without any schedule.
#[test]
fn the_definition_in_onnxruntimes_order_equals_the_reference_under_the_interpreter() {
    use ir::interp::{Array, eval_te};
    use ir::te::placeholder;
    use schedules::ops::{compensation, dense_int8};
    use schedules::quant::{PostOp, QuantAttrs, Requantization, Scales, TensorQuant};

    let (m, k, n) = (2usize, 40usize, 24usize);
    for (src_dtype, dst_dtype, relu) in [(DType::U8, DType::U8, false), (DType::I8, DType::I8, true)] {
        let (src_zp, dst_zp) = if src_dtype == DType::U8 { (117, 121) } else { (-11, -7) };
        let src = placeholder([m as i64, k as i64], src_dtype, "src").unwrap();
        let wei = placeholder([n as i64, k as i64], DType::I8, "wei").unwrap();
        let scales = weight_scales(n as i64, true, k as i64, 3);
        let attrs = QuantAttrs {
            src: TensorQuant::per_tensor("src", 1.0 / 16.0, src_zp, src_dtype).unwrap(),
            wei_scales: Scales::new("wei", scales.clone(), 1, wei.shape()).unwrap(),
            dst: TensorQuant::per_tensor("dst", 1.0, dst_zp, dst_dtype).unwrap(),
            dst_dtype,
            post_ops: if relu { vec![PostOp::Relu] } else { vec![] },
            requantization: Requantization::OnnxRuntime,
        };
        let layer = dense_int8(&src, &wei, None, None, &attrs, "fc").unwrap();
        let prep = compensation(&wei, src_dtype, &attrs.src.zero_points, "fc.prep").unwrap();
        let (lo, hi) = bounds(src_dtype);
        let src_v = uniform(m * k, 4, i64::from(lo), i64::from(hi));
        let wei_v = uniform(n * k, 5, -128, 127);
        let bias = uniform(n, 6, -3000, 3000);
        let src_a = Array::from_i64(src_dtype, &[m as i64, k as i64], &src_v);
        let wei_a = Array::from_i64(DType::I8, &[n as i64, k as i64], &wei_v);
        let comp = eval_te(&[&prep.compensation], &[(&wei, &wei_a)]).unwrap().remove(0);
        let comp = comp.to_i64_vec();
        let folded: Vec<i64> = (0..n).map(|c| i64::from((comp[c] as i32).wrapping_sub(bias[c] as i32))).collect();
        let comp_a = Array::from_i64(DType::I32, &[n as i64], &folded);
        let mut inputs = vec![(&src, &src_a), (&wei, &wei_a), (&layer.compensation, &comp_a)];
        inputs.extend(layer.params.iter().map(|p| (&p.tensor, &p.values)));
        let out = eval_te(&[&layer.output], &inputs).unwrap().remove(0).to_i64_vec();
        for r in 0..m {
            for c in 0..n {
                let mut acc = bias[c] as i32;
                for i in 0..k {
                    acc = acc.wrapping_add((src_v[r * k + i] as i32 - src_zp) * wei_v[c * k + i] as i32);
                }
                let s = ort_scale(1.0 / 16.0, &scales, 1.0, c);
                let expected = mlas_requantize(acc, s, dst_zp, dst_dtype, relu);
                let found = out[r * n + c];
                assert_eq!(found as u8, expected, "{src_dtype}->{dst_dtype} at [{r}, {c}]");
            }
        }
    }
}

#[test]
fn onnxruntimes_order_rejects_an_f32_bias_a_sum_and_a_wide_destination() {
    use ir::te::placeholder;
    use schedules::ops::dense_int8;
    use schedules::quant::{PostOp, QLinearAdd, QuantAttrs, QuantError, Requantization};

    let src = placeholder([1, 8], DType::U8, "src").unwrap();
    let wei = placeholder([4, 8], DType::I8, "wei").unwrap();
    let bias = placeholder([4], DType::F32, "bias").unwrap();
    let sum = placeholder([1, 4], DType::U8, "sum").unwrap();
    let ort = |dst: DType| QuantAttrs {
        requantization: Requantization::OnnxRuntime,
        ..QuantAttrs::per_tensor((0.5, 3, DType::U8), 0.25, (1.0, 5, dst)).unwrap()
    };
    let bias_error = dense_int8(&src, &wei, Some(&bias), None, &ort(DType::U8), "fc").unwrap_err();
    assert!(matches!(&bias_error, QuantError::Shape { what, .. } if what.contains("bias")), "{bias_error}");
    let wide = dense_int8(&src, &wei, None, None, &ort(DType::I32), "fc").unwrap_err();
    assert!(matches!(&wide, QuantError::DType { what, .. } if what.contains("destination")), "{wide}");
    let with_sum = QuantAttrs { post_ops: vec![PostOp::Sum { scale: 1.0, zero_point: 0 }], ..ort(DType::U8) };
    let sum_error = dense_int8(&src, &wei, None, Some(&sum), &with_sum, "fc").unwrap_err();
    assert!(matches!(&sum_error, QuantError::Shape { what, .. } if what.contains("post-ops")), "{sum_error}");
    // A fused QLinearAdd: last, with a sum input of the destination's type and shape, in
    // onnxruntime's order only; anything else is a typed error.
    let add = PostOp::QLinearAdd(QLinearAdd { ra: 0.5, rb: 0.25, fixed: 3.0, dst_is_a: true, clamp: (0, 255) });
    let with_add = QuantAttrs { post_ops: vec![PostOp::Relu, add], ..ort(DType::U8) };
    assert!(dense_int8(&src, &wei, None, Some(&sum), &with_add, "fc").is_ok());
    let no_input = dense_int8(&src, &wei, None, None, &with_add, "fc").unwrap_err();
    assert!(matches!(&no_input, QuantError::Shape { what, .. } if what.contains("QLinearAdd")), "{no_input}");
    let s8_sum = placeholder([1, 4], DType::I8, "sum").unwrap();
    let mixed = dense_int8(&src, &wei, None, Some(&s8_sum), &with_add, "fc").unwrap_err();
    assert!(matches!(&mixed, QuantError::Shape { what, .. } if what.contains("post-ops")), "{mixed}");
    let first = QuantAttrs { post_ops: vec![add, PostOp::Relu], ..ort(DType::U8) };
    let not_last = dense_int8(&src, &wei, None, Some(&sum), &first, "fc").unwrap_err();
    assert!(matches!(&not_last, QuantError::Shape { what, .. } if what.contains("post-ops")), "{not_last}");
    let onednn_add = QuantAttrs { requantization: Requantization::OneDnn, ..with_add };
    assert!(dense_int8(&src, &wei, None, Some(&sum), &onednn_add, "fc").is_err());
    // The same attributes in oneDNN's order accept the f32 bias.
    let onednn = QuantAttrs { requantization: Requantization::OneDnn, ..ort(DType::U8) };
    assert!(dense_int8(&src, &wei, Some(&bias), None, &onednn, "fc").is_ok());
}

#[test]
fn every_knob_family_computes_onnxruntimes_order() {
    use schedules::x86_conv::{Accumulate, Conv2dInt8Knobs, Packing, TileOrder};
    let spec = spec(&cases()[1], DType::I8, DType::U8, true, true, 31);
    let src = source(&spec, 32);
    let expected = reference(&spec, &src);
    for level in levels() {
        for packing in [Packing::I16, Packing::Bytes] {
            for accumulation in [
                Accumulate::Whole,
                Accumulate::PerRow,
                Accumulate::PerRowWithSource,
                Accumulate::Im2col,
                Accumulate::Im2colTiles,
            ] {
                for (order, mr, nr) in [(TileOrder::PixelsOuter, 3, 8), (TileOrder::ChannelsOuter, 5, 16)] {
                    let knobs = Conv2dInt8Knobs { mr, nr, lanes: 16, order, threads: 2, packing, accumulation };
                    let compiled = compile_qconv(&spec, Some(knobs), &options(level, 2)).unwrap();
                    let mut dst = vec![0u8; expected.len()];
                    compiled.run(&src, &mut dst).unwrap();
                    assert_eq!(dst, expected, "{knobs:?} at {level}");
                    assert_eq!(compiled.knobs(), knobs);
                }
            }
        }
    }
}

/// The plain-Rust weight preparation the compile API uses against its definition
/// (`x86_conv::prepare_conv2d_int8` under the generic schedule, the bias then subtracted).
#[test]
fn the_plain_weight_preparation_equals_the_definitions() {
    use ir::te::placeholder_vec;
    use schedules::ops::{GemmOperands, space_to_depth_dims, space_to_depth_values};
    use schedules::quant::ZeroPoints;
    use schedules::resnet18::CONV_LAYERS;
    use schedules::x86_conv::{Accumulate, Conv2dInt8Knobs, Packing, default_conv_knobs, prepare_conv2d_int8};
    use tensorlift::Tensor;
    use tensorlift::layer::prepare_weights;

    let knobs: Conv2dInt8Knobs = default_conv_knobs(&CONV_LAYERS[1], schedules::x86_conv::CoreRate::Slower, 1);
    let options = CompileOptions { target: Target::Level(IsaLevel::Scalar), threads: Some(1), ..Default::default() };
    for (n, &[oc, ic, kh, kw]) in [[8i64, 3, 7, 7], [24, 16, 3, 3], [40, 24, 1, 1], [12, 5, 3, 1]].iter().enumerate() {
        for (operands, nr) in [
            (GemmOperands { source: DType::U8, weights: (-128, 127) }, 16),
            (GemmOperands { source: DType::I8, weights: (-127, 127) }, 8),
            (GemmOperands { source: DType::I16, weights: (-128, 127) }, 32),
        ] {
            // The kernel rows in place, gathered into rows rounded up to 64 bytes, and after space
            // to depth at stride 2 (the kernel rearranged first, as the network's layers do).
            for (src_dtype, accumulation) in [
                (DType::U8, Accumulate::PerRow),
                (DType::I8, Accumulate::PerRow),
                (DType::U8, Accumulate::Im2colTiles),
                (DType::I8, Accumulate::SpaceToDepth),
            ] {
                let seed = 50 + n as u64;
                let count = (oc * ic * kh * kw) as usize;
                let lo = if operands.source == DType::I8 { -127 } else { -128 };
                let weights: Vec<i8> = uniform(count, seed, lo, 127).iter().map(|&v| v as i8).collect();
                let bias: Vec<i32> =
                    uniform(oc as usize, seed + 1, -70_000, 70_000).iter().map(|&v| v as i32).collect();
                let zp = if src_dtype == DType::U8 { 131 } else { -9 };
                let knobs = Conv2dInt8Knobs { nr, packing: Packing::Bytes, accumulation, ..knobs };
                let stride = 2;
                let gemm_k = knobs.gemm_k(ic, kh, kw, stride);
                let (kernel, kernel_dims) = match knobs.space_to_depth(stride, kh, kw) {
                    Some(s) => {
                        (space_to_depth_values(&weights, [oc, ic, kh, kw], s), space_to_depth_dims([oc, ic, kh, kw], s))
                    }
                    None => (weights.clone(), [oc, ic, kh, kw]),
                };
                let mine =
                    prepare_weights(&kernel, kernel_dims, nr, gemm_k, operands, (src_dtype, zp), Some(&bias)).unwrap();

                let dims = vec![oc, ic, kh, kw];
                let wei = placeholder_vec(dims.clone(), DType::I8, "w").unwrap();
                let zps = ZeroPoints::per_tensor("zp", zp, src_dtype).unwrap();
                let prep = prepare_conv2d_int8(&wei, stride, src_dtype, &zps, knobs, operands, "prep").unwrap();
                let f =
                    tensorlift::build(&prep.schedule, &prep.args.iter().collect::<Vec<_>>(), "prep", &options).unwrap();
                let mut args = [
                    Tensor::from_slice(&dims, &weights).unwrap(),
                    Tensor::zeros(prep.packed_weights.dtype(), prep.packed_weights.shape()).unwrap(),
                    Tensor::zeros(DType::I32, prep.compensation.compensation.shape()).unwrap(),
                ];
                f.compiled.call(&mut args.iter_mut().collect::<Vec<_>>()).unwrap();
                let what = format!("{dims:?} nr {nr} {operands:?} {src_dtype} {accumulation:?}");
                assert_eq!(mine.packed.shape(), args[1].shape(), "{what}");
                assert_eq!(mine.packed.dtype(), args[1].dtype(), "{what}");
                assert_eq!(mine.packed.as_bytes(), args[1].as_bytes(), "{what}");
                let comp: Vec<i32> = args[2].to_vec().unwrap();
                let folded: Vec<i32> = comp.iter().zip(&bias).map(|(&c, &b)| c.wrapping_sub(b)).collect();
                assert_eq!(mine.compensation.to_vec::<i32>().unwrap(), folded, "{what}");
            }
        }
    }
}

#[test]
fn layers_of_one_geometry_share_their_function_and_keep_their_quantization() {
    use tensorlift::layer::{KernelCache, compile_qconv_in};
    let Some(&level) = levels().first() else { return };
    let cache = KernelCache::new();
    let (square, pointwise) = (&cases()[1], &cases()[2]);
    let other = |s: QConvSpec| QConvSpec {
        src: ActQuant { scale: 0.05, zero_point: 7, ..s.src },
        dst: ActQuant { scale: 0.75, zero_point: 200, ..s.dst },
        ..s
    };
    let layers = [
        (spec(square, DType::U8, DType::U8, true, true, 61), false),
        // Other weights, bias, zero points, per-tensor scales and no ReLU: the same function.
        (other(spec(square, DType::U8, DType::U8, false, false, 62)), true),
        // Another source dtype, another geometry: other functions.
        (spec(square, DType::I8, DType::U8, true, true, 63), false),
        (spec(pointwise, DType::U8, DType::U8, false, true, 64), false),
        (other(spec(pointwise, DType::U8, DType::U8, true, false, 65)), true),
    ];
    for (n, (s, cached)) in layers.iter().enumerate() {
        let compiled = compile_qconv_in(&cache, s, None, &options(level, 1)).unwrap();
        assert_eq!(compiled.cached(), *cached, "layer {n}");
        let src = source(s, 70 + n as u64);
        let expected = reference(s, &src);
        let mut dst = vec![0u8; expected.len()];
        compiled.run(&src, &mut dst).unwrap();
        assert_eq!(dst, expected, "layer {n}");
    }
    assert_eq!((cache.len(), cache.hits()), (3, 2));
}

/// A source whose zero point makes the padding 0 (u8 zero point 0, or i8 -128 shifted to u8):
/// the GEMM calls of the border rows compute only the kernel rows that read the source
/// (`passes::zero_segment_range`), with the same results as the plain reference, in every
/// accumulation mode, at every level, on one thread and two (parallel row loops too).
#[test]
fn zero_padding_skips_its_kernel_rows_bit_for_bit() {
    use schedules::x86_conv::{Accumulate, Conv2dInt8Knobs, Packing, TileOrder};
    let pad2 = Case { what: "3x3 s1 p2", hw: (7, 6), ic: 8, oc: 16, k: (3, 3), stride: 1, pad: 2 };
    for (n, case) in [&cases()[1], &cases()[3], &pad2].into_iter().enumerate() {
        for (src_dtype, zero_point) in [(DType::U8, 0), (DType::I8, -128)] {
            let mut spec = spec(case, src_dtype, DType::U8, true, false, 60 + n as u64);
            spec.src.zero_point = zero_point;
            let src = source(&spec, 61 + n as u64);
            let expected = reference(&spec, &src);
            for level in levels() {
                for accumulation in [Accumulate::Whole, Accumulate::PerRow, Accumulate::PerRowWithSource] {
                    for (order, mr, nr, threads) in
                        [(TileOrder::ChannelsOuter, 4, 8, 1), (TileOrder::PixelsOuter, 3, 16, 2)]
                    {
                        let packing = Packing::Bytes;
                        let knobs = Conv2dInt8Knobs { mr, nr, lanes: 16, order, threads, packing, accumulation };
                        let compiled = compile_qconv(&spec, Some(knobs), &options(level, threads)).unwrap();
                        let mut dst = vec![0u8; expected.len()];
                        compiled.run(&src, &mut dst).unwrap();
                        let what = format!("{} {knobs:?} at {level}", spec.name);
                        assert_eq!(dst, expected, "{what}");
                        // From VNNI on the GEMM reads a u8 source (an i8 one shifted by 128),
                        // whose padding is 0 (below, it reads the source as i8, padded with
                        // -128). A copy of the source per row may hold the padding on some
                        // rows only: no expectation there.
                        let ranged = compiled.func().machine_code().iter().any(|c| c.origin.contains("run-time count"));
                        if level < IsaLevel::AvxVnni {
                            assert!(!ranged, "{what}");
                        } else if level != IsaLevel::Amx && accumulation != Accumulate::PerRowWithSource {
                            assert!(ranged, "{what}");
                        }
                    }
                }
            }
        }
    }
}
