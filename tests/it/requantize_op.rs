//! `tune op ... --requantize`: the catalog's int8 contractions ending as the quantized layers end
//! (`OpSpec::Requantized`, the layers' requantization stage on the accumulator): points of the
//! rules' space verified bit for bit against the interpreter, the space's listing, the CLI flag.

use std::process::Command;
use std::sync::Arc;

use schedules::auto::Space;
use schedules::catalog::{MatmulDtype, OpSpec};
use tensorlift::IsaLevel;
use tensorlift::record::Status;
use tensorlift::tune::op_bench::{OpBench, OpReference, space_options};

fn level() -> IsaLevel {
    IsaLevel::detect().unwrap()
}

fn requantized(of: OpSpec) -> OpSpec {
    OpSpec::Requantized { of: Box::new(of) }
}

fn small_ops() -> Vec<OpSpec> {
    vec![
        requantized(OpSpec::Matmul { m: 8, n: 24, k: 20, dtype: MatmulDtype::U8 }),
        requantized(OpSpec::Conv2d { ic: 8, oc: 16, h: 6, w: 6, kh: 3, kw: 3, stride: 1, pad: 1, groups: 1 }),
        requantized(OpSpec::Conv2d { ic: 6, oc: 12, h: 7, w: 7, kh: 3, kw: 3, stride: 2, pad: 1, groups: 1 }),
        requantized(OpSpec::Conv2d { ic: 8, oc: 16, h: 5, w: 5, kh: 1, kw: 1, stride: 2, pad: 0, groups: 1 }),
    ]
}

#[test]
fn requantized_points_are_bit_exact_against_the_interpreter() {
    for spec in small_ops() {
        let def = spec.build().unwrap();
        let out = &def.outputs[0];
        assert_eq!(
            (out.dtype(), out.name()),
            (ir::DType::U8, format!("{}.u8", out.name().trim_end_matches(".u8")).as_str())
        );
        let reference = Arc::new(OpReference::new(&spec).unwrap());
        // The check compares rounded values, not outputs all at the clamps.
        let values = reference.outputs[0].to_i64_vec();
        let mid = values.iter().filter(|&&v| v > 0 && v < 255).count();
        assert!(mid * 2 > values.len(), "{}: {mid} of {} outputs inside u8", spec.label(), values.len());
        let bench = OpBench::new(&spec, level(), 2, reference).unwrap();
        let space = Space::of(&def, space_options(level(), 2));
        // The generic point and the first and last point of every other sketch.
        let mut points = vec![space.default_point()];
        for s in space.sketches().iter().filter(|s| s.name != "generic") {
            for pick in [0usize, usize::MAX] {
                let values = s.decisions.iter().map(|d| d.choices[pick.min(d.choices.len() - 1)]).collect();
                points.push(schedules::auto::AutoPoint { sketch: s.name.clone(), values });
            }
        }
        assert!(points.len() >= 3, "{}: {}", spec.label(), space.listing());
        for point in &points {
            let m = bench.measure(point, 1, None);
            assert_eq!((m.status, m.verified), (Status::Ok, true), "{} {point:?}: {m:?}", spec.label());
        }
    }
}

/// The definition computes what the table's layers compute (onnxruntime's order: the bias
/// folded into the compensation, then the per-channel scale, zero point and lower bound), not
/// oneDNN's (an f32 bias and a division by the destination scale), and the measurement binds
/// the parameters their own values.
#[test]
fn the_requantized_definition_is_the_layers_order_with_its_parameters_bound() {
    let spec = requantized(OpSpec::Conv2d { ic: 8, oc: 16, h: 5, w: 5, kh: 1, kw: 1, stride: 2, pad: 0, groups: 1 });
    let def = spec.build().unwrap();
    let names: Vec<&str> = def.inputs.iter().map(|t| t.name()).collect();
    assert_eq!(names, ["src", "weights", "conv.u8.compensation", "conv.u8.scale", "conv.u8.zp", "conv.u8.lower"]);
    let inputs = tensorlift::tune::op_bench::op_inputs(&def);
    assert_eq!(def.params.len(), 3);
    for p in &def.params {
        let at = def.inputs.iter().position(|t| t.id() == p.tensor.id()).unwrap();
        assert_eq!(inputs[at].to_f64_vec(), p.values.to_f64_vec(), "{}", p.tensor.name());
    }
    let scale = inputs[3].to_f64_vec();
    assert!(scale.iter().all(|&s| s >= 0.75 * 2f64.powi(-24) && s <= 2f64.powi(-24)), "{scale:?}");
    assert_eq!((inputs[4].to_f64_vec()[0], inputs[5].to_f64_vec()[0]), (128.0, 0.0));
}

#[test]
fn the_listing_of_a_requantized_conv_has_the_gemm_sketches_with_the_epilogue() {
    let spec = requantized(OpSpec::Conv2d { ic: 8, oc: 16, h: 6, w: 6, kh: 3, kw: 3, stride: 1, pad: 1, groups: 1 });
    let def = spec.build().unwrap();
    let space = Space::of(&def, space_options(level(), 1));
    let listing = space.listing();
    for sketch in
        ["sketch rules\n", "sketch tensorize.", "parallel-vectorize at conv.u8", "auto-tensorize at conv: rows"]
    {
        assert!(listing.contains(sketch), "{sketch}: {listing}");
    }
    // A tensorized point's definition ends in the requantized output, rebuilt on the GEMM.
    let s = space.sketches().iter().find(|s| s.name.starts_with("tensorize.")).unwrap();
    let point = schedules::auto::AutoPoint {
        sketch: s.name.clone(),
        values: s.decisions.iter().map(|d| d.choices[0]).collect(),
    };
    let outputs = space.definition(&point).unwrap();
    assert_eq!((outputs.len(), outputs[0].name(), outputs[0].dtype()), (1, "conv.u8", ir::DType::U8));
    // An accumulator read by two stages has no epilogue to carry: the rule says why.
    let a = ir::te::placeholder([4, 8], ir::DType::U8, "A").unwrap();
    let b = ir::te::placeholder([8, 16], ir::DType::I8, "B").unwrap();
    let c = schedules::nn::matmul(&a, &b, ir::DType::I32, "C").unwrap();
    let d = ir::te::compute([4, 16], |i| c.at([&i[0], &i[1]]) + c.at([&i[0], &i[1]]), "D").unwrap();
    let e = ir::te::compute([4, 16], |i| c.at([&i[0], &i[1]]) * c.at([&i[0], &i[1]]), "E").unwrap();
    let listing = Space::new(&[a, b], &[d, e], space_options(level(), 1)).listing();
    assert!(listing.contains("auto-tensorize at C: does not apply: not an output, and read by 2 stages"), "{listing}");
}

fn tensorlift(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_tensorlift")).args(args).output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn the_requantize_flag_tunes_the_u8_definition_and_refuses_f32() {
    let conv = ["conv2d", "--ic", "8", "--oc", "16", "--h", "6", "--w", "6", "--kh", "3", "--kw", "3", "--pad", "1"];
    let run = |extra: &[&str]| tensorlift(&[&["tune", "op"], &conv[..], extra].concat());
    let (ok, stdout, stderr) = run(&["--requantize", "--trials", "3", "--threads", "1", "--format", "json"]);
    assert!(ok, "{stderr}");
    let report: serde_json::Value = serde_json::from_str(stdout.trim().lines().last().unwrap()).unwrap();
    assert!(report["tuned_gops"].as_f64().unwrap() > 0.0, "{report}");
    assert!(report.to_string().contains("requantized u8"), "{report}");
    // Without the flag, the i32 definition: a different workload.
    let (ok, plain, stderr) = run(&["--trials", "3", "--threads", "1", "--format", "json"]);
    assert!(ok, "{stderr}");
    let plain: serde_json::Value = serde_json::from_str(plain.trim().lines().last().unwrap()).unwrap();
    assert!(!plain.to_string().contains("requantized"), "{plain}");
    let (ok, _, stderr) =
        tensorlift(&["tune", "op", "matmul", "--m", "4", "--n", "8", "--k", "8", "--dtype", "f32", "--requantize"]);
    assert!(!ok && !stderr.contains("panicked"), "{stderr}");
    assert!(stderr.contains("a u8 x i8 matmul or an int8 conv2d"), "{stderr}");
}

/// The three geometries of the epilogue-at-tile tests: a 1×1 stride-2 downsample, a 7×7
/// stride-2 stem with padding and a 3×3.
fn epilogue_ops() -> Vec<OpSpec> {
    vec![
        requantized(OpSpec::Conv2d { ic: 8, oc: 16, h: 6, w: 6, kh: 1, kw: 1, stride: 2, pad: 0, groups: 1 }),
        requantized(OpSpec::Conv2d { ic: 3, oc: 16, h: 12, w: 12, kh: 7, kw: 7, stride: 2, pad: 3, groups: 1 }),
        requantized(OpSpec::Conv2d { ic: 8, oc: 24, h: 6, w: 6, kh: 3, kw: 3, stride: 1, pad: 1, groups: 1 }),
    ]
}

/// Every `.epi` point of `space` at the first and the last choices, and every other corner of
/// `gemm.mr × gemm.nr`.
fn epi_points(space: &Space) -> Vec<schedules::auto::AutoPoint> {
    let mut points = Vec::new();
    for s in space.sketches().iter().filter(|s| s.name.ends_with(".epi")) {
        for picks in [[0usize, 0], [usize::MAX, usize::MAX], [0, usize::MAX], [usize::MAX, 0]] {
            let values = s
                .decisions
                .iter()
                .enumerate()
                .map(|(i, d)| d.choices[picks[i.min(1)].min(d.choices.len() - 1)])
                .collect();
            points.push(schedules::auto::AutoPoint { sketch: s.name.clone(), values });
        }
    }
    points
}

#[test]
fn epilogue_at_tile_points_are_bit_exact_at_each_level() {
    // AVX-512 VNNI fuses the Map into the GEMM's calls; AVX2 keeps the two calls (no fused
    // kernel there): both must agree with the interpreter.
    for level in [IsaLevel::Avx512Vnni, IsaLevel::Avx2] {
        if !level.is_supported() {
            continue;
        }
        for spec in epilogue_ops() {
            let reference = Arc::new(OpReference::new(&spec).unwrap());
            let bench = OpBench::new(&spec, level, 2, reference).unwrap();
            let points = epi_points(&bench.space);
            assert!(points.len() >= 4, "{level} {}: {}", spec.label(), bench.space.listing());
            for point in &points {
                let m = bench.measure(point, 1, None);
                assert_eq!((m.status, m.verified), (Status::Ok, true), "{level} {} {point:?}: {m:?}", spec.label());
            }
        }
    }
}

#[test]
fn the_epilogue_at_tile_lowers_to_gemm_map_calls_at_avx512_vnni_only() {
    for spec in epilogue_ops() {
        let def = spec.build().unwrap();
        let space = Space::of(&def, space_options(IsaLevel::Avx512Vnni, 2));
        let listing = space.listing();
        assert!(listing.contains("epilogue-at-tile at conv: sketch tensorize.u8"), "{listing}");
        for point in epi_points(&space) {
            let scheduled = space.apply(&point).unwrap();
            let args: Vec<&ir::Tensor> = scheduled.args.iter().collect();
            let calls = |level| {
                let func = tensorlift::build::lower_at(&scheduled.schedule, &args, "f", level).unwrap();
                let text = func.to_string();
                let names: Vec<String> = text
                    .lines()
                    .filter_map(|l| l.trim().strip_prefix("call "))
                    .map(|c| c.trim_start_matches("reset ").split('(').next().unwrap().to_string())
                    .collect();
                (names, text)
            };
            // Every GEMM call carries the row's Map, and no Map runs on its own.
            let (names, text) = calls(IsaLevel::Avx512Vnni);
            let gemms: Vec<&String> = names.iter().filter(|n| n.starts_with("int8_gemm")).collect();
            assert!(!gemms.is_empty(), "{point:?}: {text}");
            assert!(gemms.iter().all(|n| n.contains("_conv.u8.row_")), "{point:?}: {names:?}");
            assert!(!names.iter().any(|n| n.starts_with("conv.u8.row_")), "{point:?}: {names:?}");
            assert!(!text.contains("conv.gemm_c") && !text.contains("allocate conv["), "{point:?}: {text}");
            // Below AVX-512 the GEMM and the Map stay two calls.
            let (names, _) = calls(IsaLevel::Avx2);
            assert!(names.iter().any(|n| n.starts_with("conv.u8.row_")), "{point:?}: {names:?}");
            assert!(!names.iter().any(|n| n.contains("_conv.u8.row_")), "{point:?}: {names:?}");
        }
    }
}
