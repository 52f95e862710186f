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
        OpSpec::Conv2d { ic: 8, oc: 16, h: 6, w: 6, kh: 3, kw: 3, stride: 1, pad: 1, groups: 1 },
        OpSpec::Conv2d { ic: 8, oc: 16, h: 6, w: 6, kh: 1, kw: 1, stride: 1, pad: 0, groups: 1 },
        OpSpec::Conv2d { ic: 8, oc: 8, h: 6, w: 6, kh: 3, kw: 3, stride: 1, pad: 1, groups: 8 },
        OpSpec::Conv2d { ic: 6, oc: 12, h: 7, w: 7, kh: 3, kw: 3, stride: 2, pad: 1, groups: 1 },
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

/// Applies `point`, lowers and interprets it; compares with `eval_te` of the definition.
fn check(def: &Definition, space: &Space, point: &AutoPoint, label: &str) -> Scheduled {
    let scheduled = space.apply(point).unwrap_or_else(|e| panic!("{label} {point:?}: {e}"));
    let args: Vec<&Tensor> = scheduled.args.iter().collect();
    let f = ir::lower::lower(&scheduled.schedule, &args, "f").unwrap_or_else(|e| panic!("{label} {point:?}: {e}"));
    let inputs: Vec<Array> = def.inputs.iter().enumerate().map(|(i, t)| data(t, i as i64 + 1)).collect();
    let pairs: Vec<(&Tensor, &Array)> = def.inputs.iter().zip(&inputs).collect();
    let want = eval_te(&def.output_refs(), &pairs).unwrap();
    let mut arrays = inputs.clone();
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
        for vnni in [true, false] {
            let def = spec.build().unwrap();
            let space = Space::new(&def.inputs, &def.outputs, options(vnni));
            let label = format!("{} vnni={vnni}", spec.label());
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
        "auto-tensorize at conv: does not apply: 0 output axes index only the i8 operand",
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
        OpSpec::Conv2d { ic: 8, oc: 16, h: 6, w: 6, kh: 3, kw: 3, stride: 1, pad: 1, groups: 1 },
    ] {
        let def = spec.build().unwrap();
        for vnni in [true, false] {
            let space = Space::new(&def.inputs, &def.outputs, options(vnni));
            assert!(space.sketches().len() >= 2, "{}", space.listing());
            for sketch in space.sketches() {
                let point = rng.point(sketch);
                let scheduled = check(&def, &space, &point, "replay");
                let trace: Trace = scheduled.schedule.trace();
                let outputs = space.definition(&point).unwrap();
                let refs: Vec<&Tensor> = outputs.iter().collect();
                let replayed = trace.replay(&refs, &crate::intrin::resolve).unwrap();
                let args: Vec<&Tensor> = def.inputs.iter().chain(&outputs).collect();
                let (a, b) = (
                    ir::lower::lower(&scheduled.schedule, &scheduled.args.iter().collect::<Vec<_>>(), "f").unwrap(),
                    ir::lower::lower(&replayed, &args, "f").unwrap(),
                );
                assert_eq!(a.to_string(), b.to_string(), "{point:?}");
            }
        }
    }
}
