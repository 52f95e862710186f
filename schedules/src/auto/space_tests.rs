//! Every sketch of every catalog op, at small shapes and random points: applied, lowered and
//! run by the loop interpreter, bit-identical to the definition's reference evaluation.

use ir::interp::{Array, eval_te, run_func};
use ir::trace::Trace;

use super::*;
use crate::catalog::{Definition, MatmulDtype, OpSpec};

fn small_ops() -> Vec<OpSpec> {
    vec![
        OpSpec::Matmul { m: 8, n: 24, k: 20, dtype: MatmulDtype::U8 },
        OpSpec::Matmul { m: 8, n: 24, k: 20, dtype: MatmulDtype::F32 },
        // No panel width divides N = 72: the GEMM's columns are padded to whole panels.
        OpSpec::Matmul { m: 4, n: 72, k: 20, dtype: MatmulDtype::U8 },
        OpSpec::Conv2d { ic: 8, oc: 16, h: 6, w: 6, kh: 3, kw: 3, stride: 1, pad: 1, groups: 1 },
        OpSpec::Conv2d { ic: 8, oc: 16, h: 6, w: 6, kh: 1, kw: 1, stride: 1, pad: 0, groups: 1 },
        OpSpec::Conv2d { ic: 8, oc: 8, h: 6, w: 6, kh: 3, kw: 3, stride: 1, pad: 1, groups: 8 },
        OpSpec::Conv2d { ic: 6, oc: 12, h: 7, w: 7, kh: 3, kw: 3, stride: 2, pad: 1, groups: 1 },
        // K = 3·3·3 is odd: padded for i16 pairs as well as for bytes.
        OpSpec::Conv2d { ic: 3, oc: 8, h: 7, w: 7, kh: 3, kw: 3, stride: 2, pad: 1, groups: 1 },
        OpSpec::BatchMatmul { b: 2, m: 8, n: 16, k: 12 },
        OpSpec::Pool { c: 8, h: 7, w: 7, k: 3, stride: 2 },
        OpSpec::Softmax { rows: 4, cols: 37 },
        OpSpec::Layernorm { rows: 3, cols: 29 },
    ]
}

/// Deterministic data for an input: bytes over their whole range, floats of both signs.
fn data(t: &Tensor, seed: i64) -> Array {
    let n: i64 = t.shape().iter().product();
    let dt = t.dtype();
    if dt.is_float() {
        let v: Vec<f64> = (0..n).map(|x| ((x * 37 + seed * 11) % 101 - 50) as f64 / 16.0).collect();
        Array::from_f64(dt, t.shape(), &v)
    } else {
        let (lo, hi) = dt.scalar.int_range().map(|(a, b)| (a as i64, b as i64)).unwrap_or((0, 1));
        let v: Vec<i64> = (0..n).map(|x| lo + (x * 97 + seed * 13) % (hi - lo + 1)).collect();
        Array::from_i64(dt, t.shape(), &v)
    }
}

/// A small deterministic generator (splitmix64).
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn point(&mut self, sketch: &Sketch) -> AutoPoint {
        let values =
            sketch.decisions.iter().map(|d| d.choices[(self.next() % d.choices.len() as u64) as usize]).collect();
        AutoPoint { sketch: sketch.name.clone(), values }
    }
}

/// Applies `point`, lowers and interprets it (its prepare functions first, on the raw
/// constants); compares with `eval_te` of the definition.
fn check(def: &Definition, space: &Space, point: &AutoPoint, label: &str) -> Scheduled {
    let scheduled = space.apply(point).unwrap_or_else(|e| panic!("{label} {point:?}: {e}"));
    let args: Vec<&Tensor> = scheduled.args.iter().collect();
    let f = ir::lower::lower(&scheduled.schedule, &args, "f").unwrap_or_else(|e| panic!("{label} {point:?}: {e}"));
    let inputs: Vec<Array> = def.inputs.iter().enumerate().map(|(i, t)| data(t, i as i64 + 1)).collect();
    let pairs: Vec<(&Tensor, &Array)> = def.inputs.iter().zip(&inputs).collect();
    let want = eval_te(&def.output_refs(), &pairs).unwrap();
    let mut arrays = inputs.clone();
    for p in &scheduled.prepare {
        assert_eq!(p.args[0].id(), def.inputs[p.input].id(), "{label} {point:?}: prepares a constant input");
        let args: Vec<&Tensor> = p.args.iter().collect();
        let g = ir::lower::lower(&p.schedule, &args, "prepare").unwrap_or_else(|e| panic!("{label} {point:?}: {e}"));
        let mut pa = vec![inputs[p.input].clone(), Array::zeros(p.args[1].dtype(), p.args[1].shape())];
        run_func(&g, &mut pa).unwrap_or_else(|e| panic!("{label} {point:?}: {e}\n{g}"));
        arrays[p.input] = pa.pop().unwrap();
    }
    arrays.extend(def.outputs.iter().map(|o| Array::zeros(o.dtype(), o.shape())));
    // The call's arguments keep the definition's shapes and dtypes.
    for (a, t) in arrays.iter().zip(&scheduled.args) {
        assert_eq!((a.dtype(), a.shape()), (t.dtype(), t.shape()), "{label} {point:?}");
    }
    run_func(&f, &mut arrays).unwrap_or_else(|e| panic!("{label} {point:?}: {e}\n{f}"));
    for (k, w) in want.iter().enumerate() {
        let got = &arrays[def.inputs.len() + k];
        assert!(got.bits_eq(w), "{label} {point:?}: {:?}\n{f}", got.first_difference(w));
    }
    scheduled
}

fn options(vnni: bool) -> SpaceOptions {
    SpaceOptions { max_threads: 4, vector_bytes: 32, vnni }
}

#[test]
fn random_points_of_every_sketch_match_the_reference() {
    let mut rng = Rng(24);
    for spec in small_ops() {
        for (vnni, constants) in [(true, true), (false, true), (false, false)] {
            let def = spec.build().unwrap();
            if !constants && def.constants.is_empty() {
                continue;
            }
            let def = if constants { def } else { def.with_runtime_inputs() };
            let space = Space::of(&def, options(vnni));
            let label = format!("{} vnni={vnni} constants={constants}", spec.label());
            for sketch in space.sketches() {
                let first = AutoPoint {
                    sketch: sketch.name.clone(),
                    values: sketch.decisions.iter().map(|d| d.choices[0]).collect(),
                };
                check(&def, &space, &first, &label);
                for _ in 0..12 {
                    check(&def, &space, &rng.point(sketch), &label);
                }
            }
        }
    }
}

#[test]
fn int8_contractions_get_a_tensorized_sketch_at_both_levels() {
    for spec in small_ops() {
        let def = spec.build().unwrap();
        let tensorizable = match &spec {
            OpSpec::Matmul { dtype, .. } => *dtype == MatmulDtype::U8,
            OpSpec::Conv2d { groups, .. } => *groups == 1,
            OpSpec::BatchMatmul { .. } => true,
            _ => false,
        };
        for (vnni, form) in [(true, "tensorize.u8"), (false, "tensorize.i16")] {
            let space = Space::new(&def.inputs, &def.outputs, options(vnni));
            let names: Vec<&str> = space.sketches().iter().map(|s| s.name.as_str()).collect();
            assert_eq!(
                names.contains(&form),
                tensorizable,
                "{} vnni={vnni}: {names:?}\n{}",
                spec.label(),
                space.listing()
            );
            let listing = space.listing();
            assert!(listing.contains("auto-tensorize at"), "{listing}");
            if !tensorizable {
                assert!(listing.contains("auto-tensorize at") && listing.contains("does not apply"), "{listing}");
            }
        }
    }
}

/// An f32 batched matmul `C[b, i, j] = Σ_k f(A, B)` whose product is `product(a, b)`.
fn f32_batch_matmul(product: impl Fn(ir::Expr, ir::Expr) -> ir::Expr) -> Definition {
    use ir::te::{compute, placeholder, reduce_axis, sum};
    let a = placeholder([2, 6, 12], ir::DType::F32, "A").unwrap();
    let b = placeholder([2, 12, 40], ir::DType::F32, "B").unwrap();
    let r = reduce_axis(12, "k").unwrap();
    let c = compute(
        [2, 6, 40],
        |i| sum(ir::DType::F32, &[&r], product(a.at([&i[0], &i[1], &r.to_expr()]), b.at([&i[0], &r.to_expr(), &i[2]]))),
        "C",
    )
    .unwrap();
    Definition { inputs: vec![a, b.clone()], outputs: vec![c], constants: vec![b], ops: 0.0, params: vec![] }
}

#[test]
fn f32_contractions_tensorize_onto_the_f32_kernel() {
    let mut rng = Rng(7);
    let matmul = OpSpec::Matmul { m: 8, n: 24, k: 20, dtype: MatmulDtype::F32 }.build().unwrap();
    // The product in either order (it commutes exactly: A is the operand indexed by the rows).
    let batched = f32_batch_matmul(|a, b| a * b);
    let swapped = f32_batch_matmul(|a, b| b * a);
    for (def, label) in [(&matmul, "matmul"), (&batched, "batch matmul"), (&swapped, "B·A")] {
        for vnni in [true, false] {
            let space = Space::of(def, options(vnni));
            let listing = space.listing();
            let sketch = space.sketches().iter().find(|s| s.name == "tensorize.f32");
            let sketch = sketch.unwrap_or_else(|| panic!("{label}: no tensorize.f32 sketch\n{listing}"));
            assert!(listing.contains("f32: rounded products summed in the definition's order"), "{listing}");
            assert!(listing.contains("direct-source at C: does not apply: the f32 kernel reads A as one segment"));
            for _ in 0..8 {
                let point = rng.point(sketch);
                check(def, &space, &point, label);
                assert!(lowered_call(&space, &point).contains("call reset f32_gemm_"), "{label} {point:?}");
            }
        }
    }
    // A product rounded through f16 on the way is not a product of f32 reads: the rewrite
    // would drop the rounding.
    let rounded = f32_batch_matmul(|a, b| a.cast(ir::DType::F16).cast(ir::DType::F32) * b);
    let listing = Space::of(&rounded, options(true)).listing();
    assert!(
        listing.contains("auto-tensorize at C: does not apply: a factor of the f32 product is not a read"),
        "{listing}"
    );
}

#[test]
fn the_listing_names_each_rules_outcome() {
    let def = OpSpec::Conv2d { ic: 8, oc: 8, h: 6, w: 6, kh: 3, kw: 3, stride: 1, pad: 1, groups: 8 }.build().unwrap();
    let listing = Space::new(&def.inputs, &def.outputs, options(true)).listing();
    for line in [
        "sketch rules",
        "sketch rules.at",
        "compute-location at conv.pad: sketch rules.at",
        "auto-inline at conv.pad: compute_inline",
        "multi-level-tiling at conv: S_outer R R_inner S_inner",
        "auto-tensorize at conv: does not apply: 0 output axes index only the second operand",
    ] {
        assert!(listing.contains(line), "{line}\n{listing}");
    }
    let def = OpSpec::Softmax { rows: 4, cols: 37 }.build().unwrap();
    let listing = Space::new(&def.inputs, &def.outputs, options(true)).listing();
    assert!(listing.contains("auto-inline at softmax.exp: does not apply"), "{listing}");
    assert!(listing.contains("the float fold keeps its order"), "{listing}");
}

#[test]
fn a_point_outside_the_domains_is_a_typed_error() {
    let def = OpSpec::Matmul { m: 8, n: 24, k: 20, dtype: MatmulDtype::U8 }.build().unwrap();
    let space = Space::new(&def.inputs, &def.outputs, options(true));
    let sketch = space.sketches().iter().find(|s| s.name == "tensorize.u8").unwrap();
    let mut values: Vec<i64> = sketch.decisions.iter().map(|d| d.choices[0]).collect();
    values[0] = 1000;
    let err = space.apply(&AutoPoint { sketch: sketch.name.clone(), values }).err().unwrap();
    assert!(matches!(err, AutoError::OutOfDomain { found: 1000, .. }), "{err}");
    let err = space.apply(&AutoPoint { sketch: "rules".into(), values: vec![] }).err().unwrap();
    assert!(matches!(err, AutoError::Arity { .. }), "{err}");
}

#[test]
fn the_trace_of_every_sketch_replays_onto_its_definition() {
    let mut rng = Rng(7);
    for spec in [
        OpSpec::Matmul { m: 8, n: 24, k: 20, dtype: MatmulDtype::F32 },
        // No panel width divides N = 72: the GEMM's columns are padded to whole panels.
        OpSpec::Matmul { m: 4, n: 72, k: 20, dtype: MatmulDtype::U8 },
        OpSpec::Conv2d { ic: 8, oc: 16, h: 6, w: 6, kh: 3, kw: 3, stride: 1, pad: 1, groups: 1 },
    ] {
        for (vnni, constants) in [(true, true), (false, true), (false, false)] {
            let def = spec.build().unwrap();
            let def = if constants { def } else { def.with_runtime_inputs() };
            let space = Space::of(&def, options(vnni));
            assert!(space.sketches().len() >= 2, "{}", space.listing());
            for sketch in space.sketches() {
                let point = rng.point(sketch);
                let scheduled = check(&def, &space, &point, "replay");
                let fresh = space.definition_of(&point).unwrap();
                assert_eq!(space.definition(&point).unwrap().len(), fresh.outputs.len());
                let refs: Vec<&Tensor> = fresh.outputs.iter().collect();
                let replayed = scheduled.schedule.trace().replay(&refs, &crate::intrin::resolve).unwrap();
                let lowered = |s: &ir::schedule::Schedule, args: &[Tensor]| {
                    ir::lower::lower(s, &args.iter().collect::<Vec<_>>(), "f").unwrap().to_string()
                };
                assert_eq!(lowered(&scheduled.schedule, &scheduled.args), lowered(&replayed, &fresh.args), "{point:?}");
                // The prepare functions replay onto theirs.
                assert_eq!(scheduled.prepare.len(), fresh.prepare.len(), "{point:?}");
                for (p, (input, raw, packed)) in scheduled.prepare.iter().zip(&fresh.prepare) {
                    assert_eq!(p.input, *input);
                    let trace: Trace = p.schedule.trace();
                    let replayed = trace.replay(&[packed], &crate::intrin::resolve).unwrap();
                    let args = [raw.clone(), packed.clone()];
                    assert_eq!(lowered(&p.schedule, &p.args), lowered(&replayed, &args), "{point:?}");
                }
            }
        }
    }
}

/// The tensorized point of `def` at its first values, and whether its call's IR writes the
/// packed `B` (`<out>.gemm_b`).
fn first_tensorized(def: &Definition) -> (Scheduled, bool) {
    let space = Space::of(def, options(false));
    let sketch = space.sketches().iter().find(|s| s.name == "tensorize.i16").expect("a tensorized sketch");
    let point =
        AutoPoint { sketch: sketch.name.clone(), values: sketch.decisions.iter().map(|d| d.choices[0]).collect() };
    let scheduled = check(def, &space, &point, "first tensorized");
    let args: Vec<&Tensor> = scheduled.args.iter().collect();
    let f = ir::lower::lower(&scheduled.schedule, &args, "f").unwrap();
    let s = &scheduled.schedule;
    let computes = s.order().iter().map(|&st| &s.stage_data(st).tensor).filter(|t| !t.is_placeholder());
    let packing_stage = computes.clone().any(|t| t.name().ends_with(".gemm_b"));
    // The lowered call allocates and writes the packed B exactly where it has the stage.
    let allocates = f.to_string().lines().any(|l| l.trim_start().starts_with("allocate") && l.contains(".gemm_b"));
    assert_eq!(allocates, packing_stage, "{f}");
    (scheduled, packing_stage)
}

#[test]
fn a_constant_b_is_packed_by_a_prepare_function_and_a_runtime_b_in_the_call() {
    for spec in [
        OpSpec::Matmul { m: 8, n: 24, k: 20, dtype: MatmulDtype::U8 },
        OpSpec::Conv2d { ic: 8, oc: 16, h: 6, w: 6, kh: 3, kw: 3, stride: 1, pad: 1, groups: 1 },
    ] {
        let def = spec.build().unwrap();
        assert_eq!(def.constants.len(), 1, "{}", spec.label());
        let (scheduled, packs) = first_tensorized(&def);
        assert!(!packs, "{}: the call packs a constant B", spec.label());
        assert_eq!(scheduled.prepare.len(), 1);
        let p = &scheduled.prepare[0];
        assert_eq!((p.input, p.args[0].id()), (1, def.inputs[1].id()));
        assert!(p.args[1].name().ends_with(".gemm_b"));
        // The call takes the packed B in the raw one's place.
        assert_eq!((scheduled.args[1].shape(), scheduled.args[1].dtype()), (p.args[1].shape(), p.args[1].dtype()));
        assert!(scheduled.args[1].is_placeholder());

        let (scheduled, packs) = first_tensorized(&def.with_runtime_inputs());
        assert!(packs, "{}: a runtime B is packed in the call", spec.label());
        assert!(scheduled.prepare.is_empty());
    }
    let def = OpSpec::BatchMatmul { b: 2, m: 8, n: 16, k: 12 }.build().unwrap();
    assert!(def.constants.is_empty());
    let (scheduled, packs) = first_tensorized(&def);
    assert!(packs && scheduled.prepare.is_empty());
    let listing = Space::of(&def, options(false)).listing();
    assert!(listing.contains("B is a runtime input: packed on every call"), "{listing}");
    let def = OpSpec::Matmul { m: 8, n: 24, k: 20, dtype: MatmulDtype::U8 }.build().unwrap();
    let listing = Space::of(&def, options(false)).listing();
    assert!(listing.contains("B is a constant: packed once by a prepare function"), "{listing}");
}

#[test]
fn a_gemm_whose_panels_do_not_divide_n_runs_the_kernel_on_every_tile() {
    // N = 1000 (the resnet-18 classifier): 16, 32 and 64 pad it by at most an eighth.
    let def = OpSpec::Matmul { m: 1, n: 1000, k: 8, dtype: MatmulDtype::U8 }.build().unwrap();
    let space = Space::of(&def, options(false));
    let sketch = space.sketches().iter().find(|s| s.name == "tensorize.i16").expect("a tensorized sketch");
    let nr = sketch.decisions.iter().find(|d| d.name == "gemm.nr").expect("an nr decision");
    assert_eq!(nr.choices, vec![16, 32, 64]);
    // N = 72: 16 pads it to 80; the tile sticking out of C is computed into the padded
    // `C.gemm_c` by the kernel (no guarded loop nest), and C copies its 72 columns.
    let def = OpSpec::Matmul { m: 1, n: 72, k: 20, dtype: MatmulDtype::U8 }.build().unwrap();
    let (scheduled, _) = first_tensorized(&def);
    let args: Vec<&Tensor> = scheduled.args.iter().collect();
    let text = ir::lower::lower(&scheduled.schedule, &args, "f").unwrap().to_string();
    assert!(text.contains("allocate C.gemm_c: i32[1, 80]"), "{text}");
    assert!(text.contains("for j.outer in 0..5 {\n    call reset int16_gemm_1x16x20("), "{text}");
    assert!(!text.contains("if "), "{text}");
}

/// The lowered call of `point` in `space` (panics where it does not apply or lower).
fn lowered_call(space: &Space, point: &AutoPoint) -> String {
    let scheduled = space.apply(point).unwrap_or_else(|e| panic!("{point:?}: {e}"));
    let args: Vec<&Tensor> = scheduled.args.iter().collect();
    ir::lower::lower(&scheduled.schedule, &args, "f").unwrap().to_string()
}

#[test]
fn the_direct_sketch_reads_kernel_rows_of_the_source_as_segments() {
    let conv =
        |ic, oc, hw, k, stride, pad| OpSpec::Conv2d { ic, oc, h: hw, w: hw, kh: k, kw: k, stride, pad, groups: 1 };
    // (spec, point values, the call, the copy of A it allocates, if any)
    let cases = [
        // 3×3: three kernel rows of 3·16 padded source bytes each, the padded rows flattened.
        (conv(16, 32, 8, 3, 1, 1), vec![8, 32, 0, 1], "int8_gemm_8x32x3x48(", Some("conv.gemm_a: u8[1, 10, 160]")),
        // Stride 2: the rows two pixels apart, the kernel rows as at stride 1; 8 channels do
        // not fill a vector, so the padded rows (11·8 bytes) are copied as rows of whole vectors.
        (conv(8, 16, 9, 3, 2, 1), vec![5, 16, 1, 1], "int8_gemm_5x16x3x24(", Some("conv.gemm_a: u8[1, 11, 96]")),
        // The stem's kernel row of 7·3 bytes read as 8·3 (whole groups of four): the padded
        // rows flattened with one pixel's overhang of zeros.
        (conv(3, 8, 9, 7, 2, 3), vec![5, 8, 0, 1], "int8_gemm_5x8x7x24(", Some("conv.gemm_a: u8[1, 15, 48]")),
        // 1×1 without padding: the source read in place, one segment of its channels.
        (conv(32, 16, 6, 1, 1, 0), vec![6, 16, 0, 1], "int8_gemm_6x16x32(", None),
    ];
    for (spec, values, call, copy) in cases {
        let def = spec.build().unwrap();
        let space = Space::of(&def, options(true));
        let label = spec.label();
        assert!(space.sketches().iter().any(|s| s.name == "tensorize.u8.direct"), "{label}: {}", space.listing());
        let point = AutoPoint { sketch: "tensorize.u8.direct".into(), values };
        // Bit for bit the definition's reference (the call interpreted through its loop nest).
        check(&def, &space, &point, &label);
        let text = lowered_call(&space, &point);
        if label.contains("7x7") {
            // The stem's 3 channels: its padded rows copied as rows of bytes, 16 at a time,
            // no pixel's channels decoded out of the row.
            let stores: Vec<&str> = text.lines().map(str::trim).filter(|l| l.starts_with("conv.gemm_a[")).collect();
            assert!(!stores.is_empty() && stores.iter().all(|l| l.contains(", 1, 16)] = ")), "{text}");
            assert!(!text.contains("% 3") && !text.contains("/ 3"), "{text}");
        }
        assert!(text.contains(call), "{label}: {text}");
        let allocations: Vec<&str> = text.lines().filter(|l| l.trim_start().starts_with("allocate")).collect();
        match copy {
            Some(copy) => assert!(allocations.iter().any(|l| l.contains(copy)), "{label}: {allocations:?}"),
            None => assert!(!allocations.iter().any(|l| l.contains(".gemm_a")), "{label}: {allocations:?}"),
        }
    }
}

#[test]
fn the_space_holds_the_templates_amx_call_for_a_resnet_layer() {
    // R5's geometry: rows of 28 pixels × panels of 64 channels, three kernel rows of 3·128
    // bytes per call (what the `x86_conv` template's tuned amx records run).
    let def =
        OpSpec::Conv2d { ic: 128, oc: 128, h: 28, w: 28, kh: 3, kw: 3, stride: 1, pad: 1, groups: 1 }.build().unwrap();
    let space = Space::of(&def, SpaceOptions { max_threads: 2, vector_bytes: 64, vnni: true });
    let sketch = space.sketches().iter().find(|s| s.name == "tensorize.u8.direct").expect("a direct sketch");
    let choices = |name: &str| sketch.decisions.iter().find(|d| d.name == name).unwrap().choices.clone();
    assert!(choices("gemm.mr").contains(&28) && choices("gemm.nr").contains(&64), "{}", space.listing());
    let point = AutoPoint { sketch: sketch.name.clone(), values: vec![28, 64, 1, 1] };
    let text = lowered_call(&space, &point);
    assert!(text.contains("call reset int8_gemm_28x64x3x384("), "{text}");
    assert!(space.listing().contains("3 segment(s) (ry) of 384 elements"), "{}", space.listing());
    // R11's 7×7 outputs: the template's 61 flat rows (6·9 + 7) in one call.
    let def =
        OpSpec::Conv2d { ic: 512, oc: 512, h: 7, w: 7, kh: 3, kw: 3, stride: 1, pad: 1, groups: 1 }.build().unwrap();
    let space = Space::of(&def, SpaceOptions { max_threads: 2, vector_bytes: 64, vnni: true });
    let point = AutoPoint { sketch: "tensorize.u8.flat".into(), values: vec![61, 32, 0, 1] };
    let text = lowered_call(&space, &point);
    assert!(text.contains("call reset int8_gemm_61x32x3x1536("), "{text}");
    // A 1×1 kernel row of 6 bytes read in place cannot be padded to whole groups: not direct.
    let def = OpSpec::Conv2d { ic: 6, oc: 8, h: 5, w: 5, kh: 1, kw: 1, stride: 1, pad: 0, groups: 1 }.build().unwrap();
    let space = Space::of(&def, options(true));
    assert!(!space.sketches().iter().any(|s| s.name == "tensorize.u8.direct"));
    let listing = space.listing();
    assert!(listing.contains("direct-source at conv: does not apply: a kernel row of 6"), "{listing}");
}

#[test]
fn flat_rows_run_the_gemm_over_virtual_pixels_of_several_output_rows() {
    // 5×5 outputs over 7-pixel padded rows: virtual pixels v = y·7 + x, 4·7 + 5 = 33 of them.
    let def =
        OpSpec::Conv2d { ic: 16, oc: 32, h: 5, w: 5, kh: 3, kw: 3, stride: 1, pad: 1, groups: 1 }.build().unwrap();
    let space = Space::of(&def, options(true));
    let sketch = space.sketches().iter().find(|s| s.name == "tensorize.u8.flat").expect("a flat sketch");
    assert_eq!(sketch.decisions[0].choices, vec![16, 32, 33, 48], "{}", space.listing());
    assert!(space.listing().contains("33 virtual pixels over rows of 7"), "{}", space.listing());
    // All 33 rows in one call, or tiles of 16 over rows padded to 48 (the copy of the source
    // then reads zeros past its end).
    for (values, call, gemm) in [
        (vec![33, 32, 0, 1], "int8_gemm_33x32x3x48(", "conv.gemm_c: i32[1, 33, 32]"),
        (vec![16, 32, 1, 2], "int8_gemm_16x32x3x48(", "conv.gemm_c: i32[1, 48, 32]"),
    ] {
        let point = AutoPoint { sketch: sketch.name.clone(), values };
        check(&def, &space, &point, "flat rows");
        let text = lowered_call(&space, &point);
        assert!(text.contains(call) && text.contains(gemm), "{point:?}: {text}");
    }
    // Stride 2 and 1×1 kernels have no flat rows.
    for spec in [
        OpSpec::Conv2d { ic: 8, oc: 16, h: 9, w: 9, kh: 3, kw: 3, stride: 2, pad: 1, groups: 1 },
        OpSpec::Conv2d { ic: 8, oc: 16, h: 6, w: 6, kh: 1, kw: 1, stride: 1, pad: 0, groups: 1 },
    ] {
        let space = Space::of(&spec.build().unwrap(), options(true));
        assert!(!space.sketches().iter().any(|s| s.name.ends_with(".flat")), "{}", spec.label());
        assert!(space.listing().contains("flat-rows at conv: does not apply"), "{}", space.listing());
    }
}
