//! Softmax, layer normalization and GELU (`schedules::nn`): the JIT under the generic and the
//! vectorized schedules equal to the interpreter bit for bit, and close to an f64 reference.

use ir::interp::{Array, eval_te};
use ir::schedule::Schedule;
use ir::te::{Tensor, placeholder};
use ir::{DType, TeError};
use schedules::cpu::{gelu_vectorized, layernorm_vectorized, softmax_rows, softmax_vectorized};
use schedules::generic::default_schedule;
use schedules::nn::{FOLD_LANES, gelu, layernorm, softmax};
use tensorlift::{CompileOptions, Tensor as RtTensor, build};

/// Deterministic f32 values in `[lo, hi)`.
fn uniform(len: usize, seed: u64, lo: f32, hi: f32) -> Vec<f32> {
    let mut state = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            lo + (hi - lo) * ((state >> 40) as f32 / (1u64 << 24) as f32)
        })
        .collect()
}

fn array(shape: &[i64], values: &[f32]) -> Array {
    Array::from_f64(DType::F32, shape, &values.iter().map(|&v| v as f64).collect::<Vec<_>>())
}

/// Runs `output` over `inputs` under `schedule` in the JIT.
fn run_jit(schedule: &Schedule, inputs: &[(&Tensor, &Array)], output: &Tensor) -> Array {
    let mut args: Vec<&Tensor> = inputs.iter().map(|(t, _)| *t).collect();
    args.push(output);
    let kernel = build(schedule, &args, "f", &CompileOptions::default()).expect("the schedule builds");
    let mut tensors: Vec<RtTensor> = inputs.iter().map(|(_, a)| RtTensor::from_array(a)).collect();
    tensors.push(RtTensor::zeros(output.dtype(), output.shape()).unwrap());
    let mut refs: Vec<&mut RtTensor> = tensors.iter_mut().collect();
    kernel.compiled.call(&mut refs).unwrap();
    tensors.pop().unwrap().to_array()
}

/// The interpreter's result, which both schedules must reproduce bit for bit.
fn check_schedules(what: &str, inputs: &[(&Tensor, &Array)], output: &Tensor, vectorized: Schedule) -> Vec<f64> {
    let want = eval_te(&[output], inputs).expect("reference evaluation").remove(0);
    for (name, schedule) in [("generic", default_schedule(&[output])), ("vectorized", vectorized)] {
        let got = run_jit(&schedule, inputs, output);
        assert!(got.bits_eq(&want), "{what}, {name} schedule: {:?}", got.first_difference(&want));
    }
    want.to_f64_vec()
}

/// Largest `|got − want| / max(|want|, floor)` over all elements.
fn max_rel_error(got: &[f64], want: &[f64], floor: f64) -> f64 {
    got.iter().zip(want).map(|(g, w)| (g - w).abs() / w.abs().max(floor)).fold(0.0, f64::max)
}

#[test]
fn softmax_matches_the_interpreter_and_an_f64_reference() {
    // 37 is not a multiple of the 8 lanes; the last row has large values (stability).
    let (rows, n) = (6usize, 37usize);
    let mut xs = uniform(rows * n, 1, -20.0, 20.0);
    for v in &mut xs[(rows - 1) * n..] {
        *v += 1000.0;
    }
    let x = placeholder([rows as i64, n as i64], DType::F32, "x").unwrap();
    let sm = softmax(&x, "softmax").unwrap();
    let xa = array(x.shape(), &xs);
    let got = check_schedules("softmax", &[(&x, &xa)], &sm.output, softmax_vectorized(&sm, 8).unwrap());
    // Row by row, with Map calls (37 columns fill a vector of 8 or 16 lanes and leave a tail).
    for lanes in [8, 16] {
        let rows_schedule = softmax_rows(&sm, lanes).unwrap();
        let got_rows = run_jit(&rows_schedule, &[(&x, &xa)], &sm.output);
        let want = eval_te(&[&sm.output], &[(&x, &xa)]).unwrap().remove(0);
        assert!(got_rows.bits_eq(&want), "softmax rows {lanes}: {:?}", got_rows.first_difference(&want));
    }
    let mut want = Vec::new();
    for row in xs.chunks(n) {
        let m = row.iter().fold(f64::NEG_INFINITY, |a, &b| a.max(b as f64));
        let e: Vec<f64> = row.iter().map(|&v| (v as f64 - m).exp()).collect();
        let s: f64 = e.iter().sum();
        want.extend(e.iter().map(|v| v / s));
    }
    let err = max_rel_error(&got, &want, 1e-30);
    assert!(err < 1e-5, "softmax relative error {err}");
    for row in got.chunks(n) {
        assert!((row.iter().sum::<f64>() - 1.0).abs() < 1e-5, "a row sums to {}", row.iter().sum::<f64>());
    }
}

/// A row's sum in the definition's lane order, in plain Rust: `FOLD_LANES` partial sums over
/// `k ≡ l`, in increasing `k`, then added in increasing `l`.
fn lane_order_sum(row: &[f32]) -> f32 {
    let lanes = FOLD_LANES as usize;
    let partials: Vec<f32> =
        (0..lanes).map(|l| row.iter().skip(l).step_by(lanes).fold(0.0f32, |a, &v| a + v)).collect();
    partials.iter().fold(0.0f32, |a, &p| a + p)
}

#[test]
fn softmax_sums_each_row_in_the_lane_order() {
    // Terms spread over many binades, so the order of the additions shows in the bits; 37 leaves
    // a tail of 5 lanes.
    let (rows, n) = (4usize, 37usize);
    let xs = uniform(rows * n, 7, -30.0, 30.0);
    let x = placeholder([rows as i64, n as i64], DType::F32, "x").unwrap();
    let sm = softmax(&x, "softmax").unwrap();
    let xa = array(x.shape(), &xs);
    let stages = eval_te(&[&sm.exp, &sm.sum], &[(&x, &xa)]).unwrap();
    let exps: Vec<f32> = stages[0].to_f64_vec().iter().map(|&v| v as f32).collect();
    let sums: Vec<f32> = stages[1].to_f64_vec().iter().map(|&v| v as f32).collect();
    let mut sequential_differs = false;
    for (row, &sum) in exps.chunks(n).zip(&sums) {
        assert_eq!(sum.to_bits(), lane_order_sum(row).to_bits(), "row {row:?}");
        sequential_differs |= row.iter().fold(0.0f32, |a, &v| a + v).to_bits() != sum.to_bits();
    }
    // The data distinguish the lane order from the sequential one, so the check above can fail.
    assert!(sequential_differs, "every row sums to the same bits in either order");
}

#[test]
fn layernorm_matches_the_interpreter_and_an_f64_reference() {
    let (rows, n) = (5usize, 45usize);
    let xs: Vec<f32> =
        uniform(rows * n, 2, -3.0, 5.0).iter().enumerate().map(|(i, v)| v + (i / n) as f32 * 100.0).collect();
    let gs = uniform(n, 3, 0.5, 1.5);
    let bs = uniform(n, 4, -1.0, 1.0);
    let x = placeholder([rows as i64, n as i64], DType::F32, "x").unwrap();
    let gamma = placeholder([n as i64], DType::F32, "gamma").unwrap();
    let beta = placeholder([n as i64], DType::F32, "beta").unwrap();
    let eps = 1e-5;
    let ln = layernorm(&x, &gamma, &beta, eps, "ln").unwrap();
    let (xa, ga, ba) = (array(x.shape(), &xs), array(&[n as i64], &gs), array(&[n as i64], &bs));
    let inputs = [(&x, &xa), (&gamma, &ga), (&beta, &ba)];
    let got = check_schedules("layernorm", &inputs, &ln.output, layernorm_vectorized(&ln, 8).unwrap());
    let mut want = Vec::new();
    for row in xs.chunks(n) {
        let mean = row.iter().map(|&v| v as f64).sum::<f64>() / n as f64;
        let var = row.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>() / n as f64;
        let inv = 1.0 / (var + eps as f64).sqrt();
        want.extend(row.iter().enumerate().map(|(k, &v)| (v as f64 - mean) * inv * gs[k] as f64 + bs[k] as f64));
    }
    // Absolute error relative to the output's unit scale (values are O(1); rows are offset by
    // up to 400, whose f32 rounding bounds the error of the centered values).
    let err = max_rel_error(&got, &want, 1.0);
    assert!(err < 1e-4, "layernorm error {err}");
}

#[test]
fn gelu_matches_the_interpreter_and_an_f64_reference() {
    let xs = uniform(3 * 50, 5, -6.0, 6.0);
    let x = placeholder([3, 50], DType::F32, "x").unwrap();
    let y = gelu(&x, "gelu").unwrap();
    let xa = array(x.shape(), &xs);
    let got = check_schedules("gelu", &[(&x, &xa)], &y, gelu_vectorized(&y, 8).unwrap());
    let want: Vec<f64> =
        xs.iter().map(|&v| 0.5 * v as f64 * (1.0 + libm::erf(v as f64 / std::f64::consts::SQRT_2))).collect();
    // Absolute error for |y| < 1: for x ≪ 0, `1 + erf` cancels (documented at `gelu`).
    let err = max_rel_error(&got, &want, 1.0);
    assert!(err < 1e-6, "gelu error {err}");
}

#[test]
fn malformed_operands_are_typed_errors() {
    let is_shape_error = |r: Result<(), TeError>| matches!(r, Err(TeError::ShapeMismatch { .. }));
    let f = |shape: &[i64], dtype| ir::te::placeholder_vec(shape.to_vec(), dtype, "x").unwrap();
    assert!(is_shape_error(softmax(&f(&[4, 8], DType::I32), "s").map(|_| ())));
    assert!(is_shape_error(softmax(&f(&[8], DType::F32), "s").map(|_| ())));
    assert!(is_shape_error(gelu(&f(&[8], DType::F16), "g").map(|_| ())));
    let (x, g) = (f(&[2, 8], DType::F32), f(&[8], DType::F32));
    assert!(layernorm(&x, &g, &g, 1e-5, "ln").is_ok());
    assert!(is_shape_error(layernorm(&x, &f(&[7], DType::F32), &g, 1e-5, "ln").map(|_| ())));
    assert!(is_shape_error(layernorm(&x, &g, &f(&[8], DType::I32), 1e-5, "ln").map(|_| ())));
    assert!(is_shape_error(layernorm(&x, &g, &g, f32::NAN, "ln").map(|_| ())));
    assert!(is_shape_error(layernorm(&x, &g, &g, -1.0, "ln").map(|_| ())));
}
