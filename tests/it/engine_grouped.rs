//! Grouped and depthwise quantized convolutions compiled by the auto-scheduler's rules
//! (`Kernel::Auto`, `layer::compile_qconv_auto`): the MobileNet-style test models
//! (`tests/models/mobilenet/`, `scripts/models/mobilenet.py`) run with no partition left on the
//! graph's reference and equal the reference bit for bit at every ISA level this CPU has; and one
//! convolution of every odd geometry (i8 source, batch 2, groups with several output channels
//! each, per-side pads, dilations, a clamp below the type's top) against plain Rust.

use std::path::PathBuf;

use tensorlift::engine::{self, Kernel};
use tensorlift::graph::PartitionPolicy;
use tensorlift::ir::DType;
use tensorlift::layer::{ActQuant, QConvAutoSpec, compile_qconv_auto};
use tensorlift::{CompileOptions, IsaLevel, Target};

use crate::engine::check_against_reference;

/// The committed MobileNet-style models.
pub fn mobilenet_models() -> Vec<PathBuf> {
    let files = crate::engine::onnx_files("tests/models/mobilenet");
    assert_eq!(files.len(), 3, "expected the MobileNet-style test models in tests/models/mobilenet, found {files:?}");
    files
}

#[test]
fn mobilenet_models_compile_every_partition_and_match_the_reference_at_every_level() {
    let levels = crate::skip::levels_here_for(IsaLevel::ALL, "the MobileNet-style models");
    for path in mobilenet_models() {
        for &level in &levels {
            let model = tensorlift::onnx::load(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            let partitions = model.graph.get_partitions(PartitionPolicy::Fusion);
            let options =
                CompileOptions { target: Target::Level(level), threads: Some(2), ..CompileOptions::default() };
            let mut g = engine::compile(model.graph, partitions, &options).unwrap();
            let what = format!("{} at {level}", path.file_name().unwrap().to_string_lossy());
            let references: Vec<String> = g
                .steps()
                .iter()
                .filter_map(|s| match &s.kernel {
                    Kernel::Reference { why } => Some(format!("{} {}: {why}", s.partition.id, s.partition.kind.name())),
                    _ => None,
                })
                .collect();
            assert!(references.is_empty(), "{what}: partitions on the reference: {references:?}");
            // Two depthwise convolutions and the grouped one; the stem and the pointwise ones
            // stay on the x86 template.
            let auto: Vec<String> =
                g.steps().iter().filter(|s| matches!(s.kernel, Kernel::Auto(_))).map(|s| s.kernel.describe()).collect();
            assert_eq!(auto.len(), 3, "{what}: auto-scheduled convolutions {auto:?}");
            assert!(auto.iter().all(|d| d.ends_with("auto rules")), "{what}: {auto:?}");
            // One pointwise convolution carries the residual add in its epilogue.
            assert_eq!(g.steps().iter().filter(|s| matches!(s.kernel, Kernel::Conv(_))).count(), 3, "{what}");
            let sums = g.steps().iter().filter(|s| matches!(&s.kernel, Kernel::Conv(c) if c.has_sum())).count();
            assert_eq!(sums, 1, "{what}");
            assert!(!g.steps().iter().any(|s| matches!(s.kernel, Kernel::Sum { .. })), "{what}");
            for seed in [3, 11] {
                check_against_reference(&mut g, seed, &what);
            }
        }
    }
}

/// The convolution of `QConvAutoSpec`'s doc in plain Rust (NHWC in and out, weights OIHW).
fn plain(spec: &QConvAutoSpec, src: &[i32]) -> Vec<i32> {
    let [n, h, w, ic, oc, kh, kw, g] =
        [spec.n, spec.h, spec.w, spec.ic, spec.oc, spec.kh, spec.kw, spec.groups].map(|v| v as usize);
    let (icg, ocg) = (ic / g, oc / g);
    let (oh, ow) = spec.output_hw();
    let (oh, ow) = (oh as usize, ow as usize);
    let [pt, pl, ..] = spec.pads.map(|p| p as isize);
    let mut out = Vec::with_capacity(n * oh * ow * oc);
    for b in 0..n {
        for y in 0..oh {
            for x in 0..ow {
                for o in 0..oc {
                    let mut acc = 0i32;
                    for i in 0..icg {
                        for ky in 0..kh {
                            for kx in 0..kw {
                                let sy = (y as i64 * spec.strides.0 + ky as i64 * spec.dilations.0) as isize - pt;
                                let sx = (x as i64 * spec.strides.1 + kx as i64 * spec.dilations.1) as isize - pl;
                                let inside = (0..h as isize).contains(&sy) && (0..w as isize).contains(&sx);
                                let v = if inside {
                                    src[((b * h + sy as usize) * w + sx as usize) * ic + (o / ocg) * icg + i]
                                } else {
                                    spec.src.zero_point
                                };
                                let wv = i32::from(spec.weights[((o * icg + i) * kh + ky) * kw + kx]);
                                acc = acc.wrapping_add((v - spec.src.zero_point) * wv);
                            }
                        }
                    }
                    let ws = spec.weight_scales[if spec.weight_scales.len() == 1 { 0 } else { o }];
                    let s = spec.src.scale * ws / spec.dst.scale;
                    let v = acc.wrapping_add(spec.bias.as_ref().map_or(0, |b| b[o])) as f32 * s;
                    let q = v.round_ties_even() as i64 + i64::from(spec.dst.zero_point);
                    out.push(q.clamp(i64::from(spec.clamp.0), i64::from(spec.clamp.1)) as i32);
                }
            }
        }
    }
    out
}

#[test]
fn an_odd_geometry_equals_plain_rust_at_every_level() {
    let mut state = 99u64;
    let mut next = move || {
        state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (state >> 33) as u32
    };
    let (n, h, w, ic, oc, kh, kw, groups) = (2, 9, 7, 6, 12, 3, 2, 3);
    let weights: Vec<i8> = (0..oc * (ic / groups) * kh * kw).map(|_| next() as i8).collect();
    let spec = QConvAutoSpec {
        name: "odd".into(),
        src: ActQuant { dtype: DType::I8, scale: 0.05, zero_point: -3 },
        n,
        h,
        w,
        ic,
        oc,
        kh,
        kw,
        groups,
        strides: (2, 1),
        pads: [1, 0, 2, 1],
        dilations: (2, 3),
        weights: weights.into(),
        weight_scales: (0..oc).map(|o| 0.002 + 0.0005 * o as f32).collect(),
        bias: Some((0..oc).map(|o| (o as i32 - 5) * 37).collect()),
        dst: ActQuant { dtype: DType::U8, scale: 0.03, zero_point: 20 },
        clamp: (25, 200),
    };
    let src: Vec<i8> = (0..n * h * w * ic).map(|_| next() as i8).collect();
    let expected = plain(&spec, &src.iter().map(|&v| i32::from(v)).collect::<Vec<_>>());
    let (lo, hi) = (expected.iter().min().unwrap(), expected.iter().max().unwrap());
    assert!(*lo == 25 && *hi == 200, "the data reaches both ends of the clamp: {lo}..{hi}");
    for level in crate::skip::levels_here_for(IsaLevel::ALL, "the odd geometry") {
        for threads in [1, 2] {
            let options = CompileOptions { target: Target::Level(level), threads: Some(threads), ..Default::default() };
            let compiled = compile_qconv_auto(&spec, &options).unwrap();
            let bytes: Vec<u8> = src.iter().map(|&v| v as u8).collect();
            let mut dst = vec![0u8; expected.len()];
            compiled.run(&bytes, &mut dst).unwrap();
            let found: Vec<i32> = dst.iter().map(|&v| i32::from(v)).collect();
            assert_eq!(found, expected, "{level}, {threads} threads, {}", compiled.kernel_description());
        }
    }
    let bad = QConvAutoSpec { groups: 5, ..spec };
    let e = compile_qconv_auto(&bad, &CompileOptions::default()).err().expect("groups not dividing 6");
    assert!(e.to_string().contains("the groups"), "{e}");
}
